//! One direction of a link: its configuration ([`LinkConfig`]) and its
//! counters ([`LinkCounters`]). Its egress queue is
//! [`EgressQueue`](super::EgressQueue).

use std::fmt;

use super::sched::PRIORITIES;
use super::{RedConfig, SimError};
use crate::time::Duration;

/// How one direction of a link behaves. Each direction of a
/// [`Fabric::connect`](super::Fabric::connect) link gets its own copy.
///
/// Probabilities are per frame, decided when the frame has been serialised
/// (see the module docs for the order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Bits per second; 0 means infinitely fast (no serialisation time).
    pub rate_bps: u64,
    /// Propagation delay, from the end of serialisation to arrival.
    pub delay: Duration,
    /// Probability that a frame is lost on the wire.
    pub loss: f64,
    /// Probability that a frame is held back by an extra delay, uniform in
    /// (0, `reorder_delay`], so frames sent after it can overtake it.
    pub reorder: f64,
    /// The largest extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability that a frame arrives twice.
    pub dup: f64,
    /// Probability that one random bit of a frame, beyond its 14-byte
    /// Ethernet header, is flipped.
    pub corrupt: f64,
    /// Drop-tail limit on the bytes waiting to be serialised (the frame on
    /// the wire included); `None` for an unbounded queue.
    pub queue_bytes: Option<usize>,
    /// ECN marking of ECN-capable frames (RED's curve on the bytes waiting
    /// in the frame's own priority queue; see the module docs), for every
    /// priority without its own entry in `ecn_class`; `None`: no marking.
    pub ecn: Option<RedConfig>,
    /// Per-priority ECN marking that replaces `ecn` for that priority
    /// (index = priority); `None` entries follow `ecn`.
    pub ecn_class: [Option<RedConfig>; PRIORITIES],
}

impl Default for LinkConfig {
    /// 100 Gb/s, 1 µs of delay, no faults (reorder delay 10 µs when
    /// reordering is turned on), an unbounded queue, no ECN marking.
    fn default() -> Self {
        LinkConfig {
            rate_bps: 100_000_000_000,
            delay: Duration::from_micros(1),
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(10),
            dup: 0.0,
            corrupt: 0.0,
            queue_bytes: None,
            ecn: None,
            ecn_class: [None; PRIORITIES],
        }
    }
}

impl LinkConfig {
    /// This configuration if it passes [`LinkConfig::check`]: a way to
    /// build and validate a config in one expression.
    pub fn checked(self) -> Result<Self, SimError> {
        self.check()?;
        Ok(self)
    }

    /// Rejects a probability that is NaN or outside [0, 1], reordering
    /// (`reorder` > 0) with a zero `reorder_delay`, which could not reorder
    /// anything, and ECN thresholds (`ecn` or any of `ecn_class`) that fail
    /// [`RedConfig::check`].
    pub fn check(&self) -> Result<(), SimError> {
        for (field, value) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("dup", self.dup),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(SimError::InvalidProbability { field, value });
            }
        }
        if self.reorder > 0.0 && self.reorder_delay == Duration::ZERO {
            return Err(SimError::ReorderWithoutDelay);
        }
        if let Some(red) = &self.ecn {
            red.check()?;
        }
        for (p, red) in self.ecn_class.iter().enumerate() {
            if let Some(red) = red {
                red.check().map_err(|e| match e {
                    SimError::RedThresholds { kmin, kmax } => SimError::ClassRedThresholds {
                        priority: p as u8,
                        kmin,
                        kmax,
                    },
                    e => e,
                })?;
            }
        }
        Ok(())
    }

    /// The ECN marking of priority `p`: its own `ecn_class` entry, else
    /// `ecn`.
    pub fn red(&self, p: u8) -> Option<&RedConfig> {
        self.ecn_class
            .get(usize::from(p))
            .and_then(Option::as_ref)
            .or(self.ecn.as_ref())
    }
}

/// How long `bytes` take to serialise at `rate_bps`, rounded up to the next
/// nanosecond; zero for an infinite rate (`rate_bps` 0).
pub fn serialization_time(bytes: usize, rate_bps: u64) -> Duration {
    if rate_bps == 0 {
        return Duration::ZERO;
    }
    let bits = bytes as u128 * 8 * 1_000_000_000;
    let ns = bits.div_ceil(u128::from(rate_bps));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// What happened on one direction of a link.
///
/// When no event is pending: `offered = tx_frames + dropped_queue +
/// dropped_down` and `rx_frames = tx_frames - dropped_loss + duplicated`,
/// where frames are data frames (PFC frames count in `pfc_tx` / `pfc_rx`
/// only, and then `pfc_rx = pfc_tx`); a frame a switch refuses before its
/// egress queue (shared buffer, headroom) is not offered to the link. A
/// MAC control frame a host itself hands to `tx_burst` is sent as data but
/// consumed at the far end: it counts in `tx_frames` and `pfc_rx` (when it
/// is PFC), not in `rx_frames`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkCounters {
    /// Frames that finished serialising onto the wire (lost ones included).
    pub tx_frames: u64,
    /// Bytes of those frames (whole Ethernet frames, no FCS).
    pub tx_bytes: u64,
    /// Frames delivered at the far end (duplicates included).
    pub rx_frames: u64,
    /// Bytes of those frames (whole Ethernet frames, no FCS).
    pub rx_bytes: u64,
    /// Frames lost on the wire (`loss`).
    pub dropped_loss: u64,
    /// Frames refused by a full queue (`queue_bytes`).
    pub dropped_queue: u64,
    /// Frames refused while the link direction was down, and frames that
    /// were waiting in its queue when it went down
    /// ([`Fabric::set_link_up`](super::Fabric::set_link_up)).
    pub dropped_down: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
    /// Frames sent twice (each counts once here).
    pub duplicated: u64,
    /// Frames held back by an extra delay.
    pub reordered: u64,
    /// The most bytes ever waiting in the egress queue (the frame being
    /// serialised included).
    pub max_queue_bytes: u64,
    /// Frames queued with CE set by the ECN marker ([`LinkConfig::ecn`]),
    /// those that arrived already CE and drew a mark included.
    pub ecn_marked: u64,
    /// Frames that left a switch port with this port's hop pushed into
    /// their INT trailer ([`crate::wire::int`]).
    pub int_stamped: u64,
    /// PFC frames serialised onto this direction (by the switch port it
    /// starts from).
    pub pfc_tx: u64,
    /// PFC frames that reached the far end and were consumed there.
    pub pfc_rx: u64,
    /// Nanoseconds each priority of this direction's egress queue spent
    /// paused by PFC, pauses that have ended only
    /// ([`Fabric::paused_time`](super::Fabric::paused_time) adds the one
    /// going on).
    pub paused_ns: [u64; PRIORITIES],
}

impl fmt::Display for LinkCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx {} frames {} B, rx {} frames {} B, lost {}, tail-dropped {}, dropped while down {}, \
             corrupted {}, duplicated {}, reordered {}, max queue {} B, ECN-marked {}, \
             PFC tx {} rx {}, paused {} ns",
            self.tx_frames,
            self.tx_bytes,
            self.rx_frames,
            self.rx_bytes,
            self.dropped_loss,
            self.dropped_queue,
            self.dropped_down,
            self.corrupted,
            self.duplicated,
            self.reordered,
            self.max_queue_bytes,
            self.ecn_marked,
            self.pfc_tx,
            self.pfc_rx,
            self.paused_ns.iter().sum::<u64>()
        )
    }
}
