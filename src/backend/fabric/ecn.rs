//! ECN marking on an egress queue: RED's marking curve applied to
//! ECN-capable frames, as a DCQCN congestion point does.
//!
//! - **The curve** (DCQCN's CP, reference C.1; the same shape as RED and
//!   DCTCP marking): with `q` bytes already waiting when a frame is queued,
//!   the frame is marked with probability 0 if `q <= Kmin`,
//!   `Pmax * (q - Kmin) / (Kmax - Kmin)` if `Kmin < q <= Kmax`, and 1 if
//!   `q > Kmax`. Only the instantaneous queue counts (no averaging: DCQCN
//!   switches mark on the instantaneous queue).
//! - **What gets marked** (RFC 3168 §5, §6.1.1.1): an IPv4 or IPv6 packet
//!   in an Ethernet frame (with at most one 802.1Q tag) whose ECN field is
//!   ECT(0) or ECT(1) has it set to CE ('11'); the IPv4 header checksum is
//!   updated incrementally (RFC 1624). A packet already CE stays CE and
//!   counts as marked. A Not-ECT packet, a non-IP frame, or a frame too
//!   short to hold its IP header is never marked, and this marker never
//!   drops anything (RED's drop of Not-ECT packets is left to the queue's
//!   own drop-tail limit).
//! - **ICRC**: RoCE v2's invariant CRC covers the IP header with its
//!   traffic-class / TOS byte (ECN included), TTL and checksum replaced by
//!   ones (reference B.7), so a marked RoCE frame keeps a valid ICRC.
//!
//! The random draw comes from the fabric's one seeded [`Rng`], and only for
//! an ECN-capable (ECT or CE) frame with `0 < p < 1`: a fabric without
//! marking, or traffic that is not ECN-capable, leaves the random stream
//! untouched.

use super::{Rng, SimError};
use crate::wire::ethernet::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, HEADER_LEN, HEADER_LEN_VLAN,
};
use crate::wire::ipv4::{Ecn, Ipv4Packet};
use crate::wire::ipv6::Ipv6Packet;

/// RED-style ECN marking thresholds of one egress queue (DCQCN's
/// Kmin / Kmax / Pmax; reference C.1, C.4).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RedConfig {
    /// At or below this many bytes waiting, nothing is marked.
    pub kmin_bytes: usize,
    /// Above this many bytes waiting, every ECN-capable frame is marked;
    /// at it, a frame is marked with probability `pmax`.
    pub kmax_bytes: usize,
    /// The marking probability at `kmax_bytes`, in [0, 1].
    pub pmax: f64,
    /// Decide when a frame leaves the queue, on the bytes still waiting
    /// behind it (the HPCC simulator's switch marks so, in
    /// `SwitchNotifyDequeue`), rather than when it joins, on the bytes in
    /// front of it. Marking at dequeue tells the sender about the queue as
    /// it is now, not as it was a queueing delay ago.
    pub at_dequeue: bool,
}

impl RedConfig {
    /// These thresholds if they pass [`RedConfig::check`].
    pub fn new(kmin_bytes: usize, kmax_bytes: usize, pmax: f64) -> Result<RedConfig, SimError> {
        let r = RedConfig {
            kmin_bytes,
            kmax_bytes,
            pmax,
            at_dequeue: false,
        };
        r.check()?;
        Ok(r)
    }

    /// The HPCC simulator's DCQCN thresholds for a link of `rate_bps`
    /// (reference C.4, alibaba-edu/High-Precision-Congestion-Control
    /// `simulation/run.py`): Kmin = 100 KB x R / 25 Gb/s, Kmax = 400 KB x
    /// R / 25 Gb/s (KB = 1000 bytes), Pmax = 0.2. At 100 Gb/s: 400 KB and
    /// 1.6 MB. An infinitely fast link (`rate_bps` 0) gets thresholds of 0.
    /// Marked at dequeue, as that simulator's switch does.
    pub fn hpcc(rate_bps: u64) -> RedConfig {
        let scale = |kb: u128| {
            let bytes = kb * 1000 * u128::from(rate_bps) / 25_000_000_000;
            usize::try_from(bytes).unwrap_or(usize::MAX)
        };
        RedConfig {
            kmin_bytes: scale(100),
            kmax_bytes: scale(400),
            pmax: 0.2,
            at_dequeue: true,
        }
    }

    /// Rejects `kmin_bytes > kmax_bytes` and a `pmax` that is NaN or
    /// outside [0, 1].
    pub fn check(&self) -> Result<(), SimError> {
        if self.kmin_bytes > self.kmax_bytes {
            return Err(SimError::RedThresholds {
                kmin: self.kmin_bytes,
                kmax: self.kmax_bytes,
            });
        }
        if !(0.0..=1.0).contains(&self.pmax) {
            return Err(SimError::InvalidProbability {
                field: "ecn.pmax",
                value: self.pmax,
            });
        }
        Ok(())
    }

    /// The probability that a frame queued behind `queued` bytes is
    /// marked (the curve in the module docs). With `kmin == kmax` it is a
    /// step from 0 to 1.
    pub fn probability(&self, queued: usize) -> f64 {
        if queued <= self.kmin_bytes {
            0.0
        } else if queued > self.kmax_bytes {
            1.0
        } else {
            let span = (self.kmax_bytes - self.kmin_bytes) as f64;
            self.pmax * (queued - self.kmin_bytes) as f64 / span
        }
    }

    /// Decides whether the frame, queued behind `queued` bytes, is marked,
    /// and marks it: `true` when it now carries CE because of this
    /// decision (an already-CE frame included). Draws from `rng` only for
    /// an ECN-capable frame with a probability strictly between 0 and 1.
    pub fn apply(&self, queued: usize, frame: &mut [u8], rng: &mut Rng) -> bool {
        let Some(field) = EcnField::find(frame) else {
            return false;
        };
        let ecn = field.get(frame);
        if ecn == Ecn::NotEct {
            return false;
        }
        let p = self.probability(queued);
        let mark = if p >= 1.0 { true } else { rng.chance(p) };
        if mark && ecn != Ecn::Ce {
            field.set(frame, Ecn::Ce);
        }
        mark
    }
}

/// Where a frame's IP header is, for its ECN field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnField {
    /// An IPv4 header (at least 20 bytes, version 4) at this offset.
    Ipv4(usize),
    /// An IPv6 header (at least 40 bytes, version 6) at this offset.
    Ipv6(usize),
}

impl EcnField {
    /// The IP header of an Ethernet frame, untagged or with one 802.1Q
    /// tag; `None` for anything else (other EtherTypes, a wrong IP
    /// version, a frame too short for its headers). Never panics.
    pub fn find(frame: &[u8]) -> Option<EcnField> {
        let be16 = |at: usize| {
            frame
                .get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
        };
        let (ethertype, l3) = match be16(12)? {
            ETHERTYPE_VLAN => (be16(16)?, HEADER_LEN_VLAN),
            t => (t, HEADER_LEN),
        };
        let ip = frame.get(l3..)?;
        match ethertype {
            ETHERTYPE_IPV4 => {
                let p = Ipv4Packet::new_checked(ip).ok()?;
                (p.version() == 4).then_some(EcnField::Ipv4(l3))
            }
            ETHERTYPE_IPV6 => {
                let p = Ipv6Packet::new_checked(ip).ok()?;
                (p.version() == 6).then_some(EcnField::Ipv6(l3))
            }
            _ => None,
        }
    }

    /// The ECN codepoint of `frame`, which [`EcnField::find`] returned
    /// this field for.
    ///
    /// # Panics
    ///
    /// If `frame` is shorter than the header this field was found in.
    pub fn get(self, frame: &[u8]) -> Ecn {
        match self {
            EcnField::Ipv4(at) => Ipv4Packet::new_unchecked(&frame[at..]).ecn(),
            EcnField::Ipv6(at) => Ipv6Packet::new_unchecked(&frame[at..]).ecn(),
        }
    }

    /// Sets the ECN codepoint (and, for IPv4, fixes the header checksum).
    ///
    /// # Panics
    ///
    /// As [`EcnField::get`].
    pub fn set(self, frame: &mut [u8], ecn: Ecn) {
        match self {
            EcnField::Ipv4(at) => Ipv4Packet::new_unchecked(&mut frame[at..]).set_ecn(ecn),
            EcnField::Ipv6(at) => Ipv6Packet::new_unchecked(&mut frame[at..]).set_ecn(ecn),
        }
    }
}

/// The ECN codepoint of an Ethernet frame's IP packet, if it has one
/// ([`EcnField::find`]).
pub fn frame_ecn(frame: &[u8]) -> Option<Ecn> {
    EcnField::find(frame).map(|f| f.get(frame))
}
