//! ECN and congestion notification: the notification point (NP) rules
//! and the device's congestion settings.
//!
//! - **Sending ECN-capable** (RFC 3168, reference B.8): with
//!   [`CongestionConfig::ecn`] on, every packet a QP sends carries ECT(0)
//!   unless its traffic class already asks for an ECN-capable codepoint;
//!   DSCP comes from the traffic class (ConnectX deployments use 106 =
//!   DSCP 26 with ECT(0)).
//! - **Notification point** (IBTA A17 §17.9.3, CA17-44): a valid RoCE v2
//!   packet with CE makes a CNP to its source QP, at most one per QP per
//!   [`NpConfig::min_time_between_cnps`]; marked packets inside that
//!   interval are covered by the CNP already sent. The CNP is BTH opcode
//!   0x81 with BECN set, the marked packet's P_Key, the source QP as
//!   DestQP, PSN 0 and 16 zero bytes (reference B.8), sent with
//!   [`NpConfig::cnp_dscp`] and, when the port is tagged,
//!   [`NpConfig::cnp_prio`] as its 802.1p priority.
//! - **Reaction point**: a QP that receives a CNP hands it to its
//!   [`crate::cc::RateController`], built from [`CongestionConfig::rp`];
//!   the controller's rate paces the QP's requests and READ responses.

use crate::cc::CcConfig;

/// The traffic class ConnectX deployments use (reference B.8): DSCP 26
/// and ECT(0).
pub const DEFAULT_TRAFFIC_CLASS: u8 = 26 << 2 | 0b10;
use crate::time::{Duration, Instant};
use crate::wire::Ecn;

/// The notification point's settings (ConnectX `roce_np` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpConfig {
    /// Send CNPs for CE-marked packets.
    pub enabled: bool,
    /// At most one CNP per QP per this interval (ConnectX default 4 µs;
    /// the DCQCN paper 50 µs).
    pub min_time_between_cnps: Duration,
    /// DSCP of CNPs (ConnectX `cnp_dscp`, 48 = CS6).
    pub cnp_dscp: u8,
    /// 802.1p priority of CNPs on a tagged port (ConnectX `cnp_802p_prio`).
    pub cnp_prio: u8,
    /// Take every Nth ECN-capable RoCE packet received as if a switch had
    /// marked it CE (0: never). For testing a reaction point over a link
    /// with no congestion point on it (two DPDK ports over net_memif); not
    /// for production.
    pub mark_ce_every: u32,
}

impl Default for NpConfig {
    fn default() -> NpConfig {
        NpConfig {
            enabled: true,
            min_time_between_cnps: Duration::from_micros(4),
            cnp_dscp: 48,
            cnp_prio: 6,
            mark_ce_every: 0,
        }
    }
}

/// A device's ECN and congestion-control settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CongestionConfig {
    /// Mark sent packets ECN-capable (ECT(0)) when their traffic class
    /// does not.
    pub ecn: bool,
    /// The notification point: when a marked packet gets a CNP and how the CNP is sent.
    pub np: NpConfig,
    /// The reaction point's rate control of every QP.
    pub rp: CcConfig,
    /// The line rate the reaction point starts from and never exceeds,
    /// bits per second (0: unknown, the controller's own maximum).
    pub line_bps: u64,
    /// Keep a trace of every rate decision per QP
    /// (`Device::drain_cc_trace`).
    pub trace: bool,
    /// Stamp the device's own egress as the first hop of every INT
    /// trailer it sends ([`crate::wire::int`]): time, bytes the device has
    /// sent, no queue, [`CongestionConfig::line_bps`]. For a datapath with
    /// no switch that stamps INT (a DPDK port), so that a rate control
    /// reading INT sees at least the sender's own link; the simulator's
    /// switches stamp their own hops.
    pub int_host_hop: bool,
}

impl Default for CongestionConfig {
    fn default() -> CongestionConfig {
        CongestionConfig {
            ecn: true,
            np: NpConfig::default(),
            rp: CcConfig::None,
            line_bps: 0,
            trace: false,
            int_host_hop: false,
        }
    }
}

/// One QP's notification-point state.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Np {
    /// When the last CNP of this QP was queued.
    last_cnp: Option<Instant>,
    /// A CNP is waiting to be sent, with the P_Key of the packet that
    /// asked for it.
    pub pending: Option<u16>,
}

impl Np {
    /// A CE-marked packet arrived at `now`: whether a CNP is due (and then
    /// it is recorded as queued).
    pub fn on_marked(&mut self, cfg: &NpConfig, now: Instant, pkey: u16) -> bool {
        if !cfg.enabled {
            return false;
        }
        if let Some(t) = self.last_cnp {
            if now.saturating_since(t) < cfg.min_time_between_cnps {
                return false;
            }
        }
        self.last_cnp = Some(now);
        self.pending = Some(pkey);
        true
    }
}

/// Whether a received packet of ECN codepoint `ecn` is taken as
/// CE-marked by [`NpConfig::mark_ce_every`] (every Nth ECN-capable one;
/// `seen` counts them).
pub(super) fn emulated_ce(np: &NpConfig, seen: &mut u64, ecn: Ecn) -> bool {
    let n = np.mark_ce_every;
    if n == 0 || !matches!(ecn, Ecn::Ect0 | Ecn::Ect1) {
        return false;
    }
    *seen += 1;
    *seen % u64::from(n) == 0
}
