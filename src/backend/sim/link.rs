//! One direction of a link: its configuration ([`LinkConfig`]), its egress
//! queue ([`EgressQueue`]) and its counters ([`LinkCounters`]).

use std::collections::VecDeque;
use std::fmt;

use super::{RedConfig, SimError};
use crate::backend::loopback::VecBuf;
use crate::backend::FrameBuf;
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
    /// ECN marking of ECN-capable frames as they are queued (RED's curve on
    /// the bytes waiting; see the module docs); `None`: no marking.
    pub ecn: Option<RedConfig>,
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
    /// anything, and ECN thresholds that fail [`RedConfig::check`].
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
        Ok(())
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
/// dropped_down` and `rx_frames = tx_frames - dropped_loss + duplicated`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkCounters {
    /// Frames that finished serialising onto the wire (lost ones included).
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames delivered at the far end (duplicates included).
    pub rx_frames: u64,
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
}

impl fmt::Display for LinkCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx {} frames {} B, rx {} frames {} B, lost {}, tail-dropped {}, dropped while down {}, \
             corrupted {}, duplicated {}, reordered {}, max queue {} B, ECN-marked {}",
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
            self.ecn_marked
        )
    }
}

/// The frames waiting to leave on one direction of a link, the head one
/// being serialised while the link is busy.
///
/// This is where congestion signals attach: the ECN marker
/// ([`LinkConfig::ecn`]) sets CE in a frame as it is queued, on
/// [`EgressQueue::bytes`], and PFC would
/// [`Fabric::set_paused`](super::Fabric::set_paused) the queue that feeds a
/// full ingress (pausing is implemented, PFC frames are not).
#[derive(Debug, Default)]
pub struct EgressQueue {
    frames: VecDeque<VecBuf>,
    bytes: usize,
    /// A frame is being serialised (its `TxDone` event is pending).
    busy: bool,
    /// No new frame starts serialising while set (the one on the wire
    /// finishes).
    paused: bool,
}

impl EgressQueue {
    /// Bytes waiting, the frame being serialised included.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Frames waiting, the frame being serialised included.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// Whether a frame is on the wire now.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// Whether the queue is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    pub(super) fn push(&mut self, frame: VecBuf) {
        self.bytes += frame.len();
        self.frames.push_back(frame);
    }

    pub(super) fn pop(&mut self) -> Option<VecBuf> {
        let f = self.frames.pop_front()?;
        self.bytes -= f.len();
        Some(f)
    }

    /// Drops every frame waiting behind the one on the wire (every frame
    /// if none is); returns how many.
    pub(super) fn drop_waiting(&mut self) -> u64 {
        let keep = usize::from(self.busy);
        let mut n = 0;
        while self.frames.len() > keep {
            if let Some(f) = self.frames.pop_back() {
                self.bytes -= f.len();
                n += 1;
            }
        }
        n
    }

    pub(super) fn head_len(&self) -> Option<usize> {
        self.frames.front().map(|f| f.len())
    }

    pub(super) fn set_busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    pub(super) fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }
}
