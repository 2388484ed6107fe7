//! What a [`super::CmAgent`] saw and did. The per-message groups are
//! Linux's (`/sys/class/infiniband/*/ports/*/cm_tx_msgs`, `cm_tx_retries`,
//! `cm_rx_msgs`, `cm_rx_duplicates`, one counter per attribute); the rest
//! say why a MAD was dropped, what timed out and which REJ reasons went
//! each way.

use crate::wire::cm::attr;
use crate::wire::mad::MadError;
use std::collections::BTreeMap;

/// One counter per CM attribute, REQ (0x10) to SIDR_REP (0x18), as Linux
/// keeps its `cm_*_msgs` groups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttrCounts(pub [u64; 9]);

impl AttrCounts {
    /// The count for attribute `attr_id` (0 for one outside REQ..SIDR_REP).
    pub fn get(&self, attr_id: u16) -> u64 {
        Self::index(attr_id).map_or(0, |i| self.0[i])
    }

    /// The sum over every attribute.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub(crate) fn bump(&mut self, attr_id: u16) {
        if let Some(i) = Self::index(attr_id) {
            self.0[i] += 1;
        }
    }

    fn index(attr_id: u16) -> Option<usize> {
        (attr::REQ..=attr::SIDR_REP)
            .contains(&attr_id)
            .then(|| (attr_id - attr::REQ) as usize)
    }
}

/// What a CM agent counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs sent, first sends and resends (Linux `cm_tx_msgs`).
    pub tx: AttrCounts,
    /// Resends after a response timeout (Linux `cm_tx_retries`).
    pub tx_retries: AttrCounts,
    /// Well-formed CM MADs received (Linux `cm_rx_msgs`).
    pub rx: AttrCounts,
    /// Duplicates received: a REQ, REP, DREQ or MRA for a connection
    /// already past it, an RTU for an established one (Linux
    /// `cm_rx_duplicates`).
    pub rx_duplicates: AttrCounts,
    /// Dropped: shorter than a MAD, a base version other than 1.
    pub malformed: u64,
    /// Dropped: a management class other than CM.
    pub not_cm: u64,
    /// Dropped: a CM class version other than 2.
    pub bad_class_version: u64,
    /// Dropped: a method other than Send (every CM message is a Send).
    pub bad_method: u64,
    /// Dropped: an attribute that is not a CM message handled here (LAP,
    /// APR, anything else).
    pub unknown_attribute: u64,
    /// Dropped: no connection matched the message's IDs, or its state
    /// does not take that message.
    pub unmatched: u64,
    /// DREQs for no connection, answered with a DREP (Linux
    /// `cm_issue_drep`; they also count as duplicate DREQs, as in Linux).
    pub dreq_unknown: u64,
    /// REQs or REPs naming a QP another connection still uses, refused
    /// with REJ "stale connection".
    pub stale: u64,
    /// Messages whose resends ran out (REQ, REP: the connection is
    /// unreachable; DREQ: it goes to TimeWait anyway).
    pub timeouts: u64,
    /// SIDR_REQs answered "service ID not supported" (SIDR is not served).
    pub sidr_unsupported: u64,
    /// REJs sent, by reason (§12.6.7 table 109, [`super::reason`]).
    pub rej_sent: BTreeMap<u16, u64>,
    /// REJs received for a connection, by reason.
    pub rej_received: BTreeMap<u16, u64>,
}

impl CmCounters {
    /// Counts a MAD that did not parse as a CM MAD.
    pub(crate) fn parse_error(&mut self, e: MadError) {
        match e {
            MadError::NotCm(_) => self.not_cm += 1,
            MadError::BadClassVersion(_) => self.bad_class_version += 1,
            MadError::UnknownAttribute(_) => self.unknown_attribute += 1,
            _ => self.malformed += 1,
        }
    }

    /// MADs dropped before reaching a connection: every drop counter.
    pub fn dropped(&self) -> u64 {
        self.malformed
            + self.not_cm
            + self.bad_class_version
            + self.bad_method
            + self.unknown_attribute
            + self.unmatched
    }
}
