//! Traffic classes on an egress queue: how a frame is classified into one
//! of eight priorities, the eight per-priority queues of one link
//! direction ([`EgressQueue`]), and the scheduler that picks the next
//! frame to serialise.
//!
//! - **Classification** ([`frame_priority`]): an 802.1Q-tagged frame
//!   (TPID 0x8100) by its PCP; otherwise an IPv4 or IPv6 packet by its
//!   DSCP through a 64-entry DSCP -> priority table
//!   ([`DEFAULT_DSCP_TO_PRIORITY`]: priority = DSCP >> 3, so RoCE's traffic
//!   class 106 = DSCP 26 is priority 3 and CNPs with DSCP 48 are priority
//!   6); anything else is priority 0.
//! - **Scheduling** ([`EgressQueue`]): strict priority among the
//!   priorities of a `strict` mask (highest first), then deficit round
//!   robin with equal quanta ([`DRR_QUANTUM`]) among the others. A paused
//!   priority is skipped; the link idles only when every non-empty
//!   priority is paused. The frame on the wire always finishes. Frames of
//!   one priority leave in the order they came (one priority alone is a
//!   FIFO).
//! - **MAC control**: a PFC frame waiting to be sent goes out before any
//!   data frame (right after the frame on the wire), whatever is paused.

use std::collections::VecDeque;

use super::pfc::PfcFrame;
use crate::backend::loopback::VecBuf;
use crate::backend::FrameBuf;
use crate::time::{Duration, Instant};
use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN};

/// The number of priorities (traffic classes) of an egress queue.
pub const PRIORITIES: usize = 8;

/// The deficit round robin quantum of every non-strict priority: one
/// jumbo frame, so a priority's turn always covers its head frame.
pub const DRR_QUANTUM: usize = 9216;

/// The default DSCP -> priority table: priority = DSCP >> 3 (the class
/// selector bits).
pub const DEFAULT_DSCP_TO_PRIORITY: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = (i >> 3) as u8;
        i += 1;
    }
    t
};

/// The priority (0-7) of an Ethernet frame: the PCP of an 802.1Q tag;
/// else the DSCP of an IPv4 / IPv6 packet through `dscp_to_priority`
/// (entries above 7 count as 7); else 0. Never panics.
pub fn frame_priority(frame: &[u8], dscp_to_priority: &[u8; 64]) -> u8 {
    let byte = |at: usize| frame.get(at).copied();
    let (Some(t0), Some(t1)) = (byte(12), byte(13)) else {
        return 0;
    };
    let dscp = match u16::from_be_bytes([t0, t1]) {
        ETHERTYPE_VLAN => {
            return match (byte(14), byte(15)) {
                (Some(tci), Some(_)) => tci >> 5,
                _ => 0,
            }
        }
        ETHERTYPE_IPV4 => match (byte(14), byte(15)) {
            (Some(v), Some(tos)) if v >> 4 == 4 => tos >> 2,
            _ => return 0,
        },
        ETHERTYPE_IPV6 => match (byte(14), byte(15)) {
            (Some(b0), Some(b1)) if b0 >> 4 == 6 => ((b0 & 0x0f) << 4 | b1 >> 4) >> 2,
            _ => return 0,
        },
        _ => return 0,
    };
    dscp_to_priority[usize::from(dscp)].min(7)
}

/// A frame waiting in an egress queue, with the switch ingress port it
/// came in by (`None`: sent by the host that owns the queue), to which it
/// stays accounted until it has been serialised.
#[derive(Debug)]
pub(super) struct Queued {
    pub frame: VecBuf,
    pub ingress: Option<u32>,
}

/// The frames of one priority.
#[derive(Debug, Default)]
struct ClassQueue {
    frames: VecDeque<Queued>,
    bytes: usize,
    /// PFC pause: until when (`None`: not paused by PFC).
    pause_until: Option<Instant>,
    /// When the current PFC pause began.
    paused_since: Instant,
    /// When the last frame of this priority finished serialising.
    last_dequeue: Instant,
    /// Deficit round robin credit, in bytes.
    deficit: usize,
}

/// What the link is serialising.
#[derive(Debug, Default)]
enum Wire {
    #[default]
    Idle,
    /// The head frame of this priority.
    Data(u8),
    /// A MAC control (PFC) frame.
    Control(VecBuf),
}

/// What finished serialising.
#[derive(Debug)]
pub(super) enum Finished {
    Data { priority: u8, queued: Queued },
    Control(VecBuf),
}

/// The frames waiting to leave on one direction of a link, in eight
/// priority queues (see the module docs for the scheduler), the frame
/// being serialised included until it has left.
///
/// This is where congestion signals attach: the ECN marker
/// ([`LinkConfig::ecn`](super::LinkConfig::ecn)) sets CE in a frame on the
/// bytes of its own priority ([`EgressQueue::class_bytes`]), and PFC
/// pauses single priorities of it.
#[derive(Debug, Default)]
pub struct EgressQueue {
    classes: [ClassQueue; PRIORITIES],
    bytes: usize,
    frames: usize,
    wire: Wire,
    /// Paused as a whole ([`Fabric::set_paused`](super::Fabric::set_paused)).
    paused: bool,
    /// The priority holding the round robin turn.
    rr: u8,
    /// Whether `rr` has had its quantum for this turn.
    rr_granted: bool,
    /// A PFC frame to send next (merged while it waits).
    control: Option<PfcFrame>,
    /// The priorities with a frame waiting, and those PFC pauses, as masks
    /// (bit `p` for priority `p`), kept as they change so that picking the
    /// next frame reads no priority's queue it will not serve.
    backlogged: u8,
    paused_mask: u8,
}

impl EgressQueue {
    /// Bytes waiting, the frame being serialised included.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Frames waiting, the frame being serialised included.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Bytes waiting in priority `p`'s queue, its frame being serialised
    /// included.
    ///
    /// # Panics
    ///
    /// If `p` is 8 or more.
    pub fn class_bytes(&self, p: u8) -> usize {
        self.classes[usize::from(p)].bytes
    }

    /// Frames waiting in priority `p`'s queue, its frame being serialised
    /// included.
    ///
    /// # Panics
    ///
    /// If `p` is 8 or more.
    pub fn class_frames(&self, p: u8) -> usize {
        self.classes[usize::from(p)].frames.len()
    }

    /// Whether a frame (data or PFC) is on the wire now.
    pub fn is_busy(&self) -> bool {
        !matches!(self.wire, Wire::Idle)
    }

    /// Whether the queue is paused as a whole
    /// ([`Fabric::set_paused`](super::Fabric::set_paused)).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether priority `p` is paused by PFC now.
    ///
    /// # Panics
    ///
    /// If `p` is 8 or more.
    pub fn is_class_paused(&self, p: u8) -> bool {
        self.classes[usize::from(p)].pause_until.is_some()
    }

    /// The priorities paused by PFC now, as a mask (bit `p` for priority
    /// `p`).
    pub fn paused_classes(&self) -> u8 {
        debug_assert_eq!(
            self.paused_mask,
            self.mask_of(|c| c.pause_until.is_some()),
            "the paused mask follows the pauses"
        );
        self.paused_mask
    }

    /// The priorities with a frame waiting, as a mask.
    fn nonempty(&self) -> u8 {
        debug_assert_eq!(
            self.backlogged,
            self.mask_of(|c| !c.frames.is_empty()),
            "the backlog mask follows the queues"
        );
        self.backlogged
    }

    /// The priorities whose queue meets `test`, as a mask (what the masks
    /// kept by the queue's changes must equal).
    fn mask_of(&self, test: impl Fn(&ClassQueue) -> bool) -> u8 {
        let mut m = 0;
        for (p, c) in self.classes.iter().enumerate() {
            if test(c) {
                m |= 1 << p;
            }
        }
        m
    }

    pub(super) fn push(&mut self, p: u8, frame: VecBuf, ingress: Option<u32>) {
        let c = &mut self.classes[usize::from(p)];
        self.bytes += frame.len();
        self.frames += 1;
        c.bytes += frame.len();
        c.frames.push_back(Queued { frame, ingress });
        self.backlogged |= 1 << p;
    }

    pub(super) fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Queues a PFC frame to go next, merged into one still waiting (a
    /// later time for a priority replaces the earlier one).
    pub(super) fn push_control(&mut self, pfc: PfcFrame) {
        match &mut self.control {
            Some(waiting) => waiting.merge(&pfc),
            None => self.control = Some(pfc),
        }
    }

    /// Puts the next frame on the wire if the link is idle: a waiting PFC
    /// frame (built by `emit`), else the scheduler's pick among the
    /// priorities neither PFC nor [`EgressQueue::is_paused`] holds back.
    /// Returns the length of the frame now on the wire.
    pub(super) fn start(
        &mut self,
        strict: u8,
        emit: impl FnOnce(&PfcFrame) -> VecBuf,
    ) -> Option<usize> {
        if self.is_busy() {
            return None;
        }
        if let Some(pfc) = self.control.take() {
            let frame = emit(&pfc);
            let len = frame.len();
            self.wire = Wire::Control(frame);
            return Some(len);
        }
        if self.paused {
            return None;
        }
        let p = self.pick(strict)?;
        self.wire = Wire::Data(p);
        self.classes[usize::from(p)]
            .frames
            .front()
            .map(|q| q.frame.len())
    }

    /// Strict priority over `strict`, then deficit round robin; `None`
    /// when every non-empty priority is paused.
    fn pick(&mut self, strict: u8) -> Option<u8> {
        let eligible = self.nonempty() & !self.paused_classes();
        if eligible == 0 {
            return None;
        }
        let high = eligible & strict;
        if high != 0 {
            return Some(7 - high.leading_zeros() as u8);
        }
        let drr = eligible & !strict;
        // Each priority is visited at most twice: once to be granted its
        // quantum, once more if the loop came round to it again.
        for _ in 0..=2 * PRIORITIES {
            let p = self.rr;
            let c = &mut self.classes[usize::from(p)];
            if drr & (1 << p) != 0 {
                let len = c.frames.front().map_or(0, |q| q.frame.len());
                if c.deficit >= len {
                    c.deficit -= len;
                    return Some(p);
                }
                if !self.rr_granted {
                    self.rr_granted = true;
                    // A frame above the quantum goes on its turn.
                    c.deficit = (c.deficit + DRR_QUANTUM).max(len);
                    continue;
                }
            } else {
                // Not backlogged (empty, paused or strict): no credit kept.
                c.deficit = 0;
            }
            self.rr = (self.rr + 1) % PRIORITIES as u8;
            self.rr_granted = false;
        }
        None
    }

    /// The frame on the wire has been serialised: takes it off the queue.
    pub(super) fn finish(&mut self, now: Instant) -> Option<Finished> {
        match std::mem::take(&mut self.wire) {
            Wire::Idle => None,
            Wire::Control(frame) => Some(Finished::Control(frame)),
            Wire::Data(p) => {
                let c = &mut self.classes[usize::from(p)];
                let queued = c.frames.pop_front()?;
                if c.frames.is_empty() {
                    self.backlogged &= !(1 << p);
                }
                let len = queued.frame.len();
                c.bytes -= len;
                c.last_dequeue = now;
                self.bytes -= len;
                self.frames -= 1;
                Some(Finished::Data {
                    priority: p,
                    queued,
                })
            }
        }
    }

    /// Drops every frame waiting behind the one on the wire (every frame
    /// if none is), and any PFC frame not yet sent; returns the dropped
    /// frames with their priorities, lowest priority first.
    pub(super) fn drop_waiting(&mut self) -> Vec<(u8, Queued)> {
        self.control = None;
        let on_wire = match self.wire {
            Wire::Data(p) => Some(p),
            _ => None,
        };
        let mut dropped = Vec::new();
        for (p, c) in self.classes.iter_mut().enumerate() {
            let p = p as u8;
            let keep = usize::from(on_wire == Some(p));
            while c.frames.len() > keep {
                if let Some(q) = c.frames.pop_back() {
                    c.bytes -= q.frame.len();
                    self.bytes -= q.frame.len();
                    self.frames -= 1;
                    dropped.push((p, q));
                }
            }
            c.deficit = 0;
            if c.frames.is_empty() {
                self.backlogged &= !(1 << p);
            }
        }
        dropped
    }

    /// Pauses priority `p` until `until` (replacing any time left).
    pub(super) fn pause_class(&mut self, p: u8, now: Instant, until: Instant) {
        let c = &mut self.classes[usize::from(p)];
        if c.pause_until.is_none() {
            c.paused_since = now;
        }
        c.pause_until = Some(until);
        self.paused_mask |= 1 << p;
    }

    /// Resumes priority `p`; returns how long the pause that ends lasted
    /// (`None` if it was not paused).
    pub(super) fn resume_class(&mut self, p: u8, now: Instant) -> Option<Duration> {
        let c = &mut self.classes[usize::from(p)];
        c.pause_until.take()?;
        self.paused_mask &= !(1 << p);
        Some(now.saturating_since(c.paused_since))
    }

    /// Until when priority `p` is paused by PFC.
    pub(super) fn pause_until(&self, p: u8) -> Option<Instant> {
        self.classes[usize::from(p)].pause_until
    }

    /// How long the ongoing PFC pause of priority `p` has lasted by `now`
    /// (zero if it is not paused).
    pub(super) fn ongoing_pause(&self, p: u8, now: Instant) -> Duration {
        let c = &self.classes[usize::from(p)];
        match c.pause_until {
            Some(_) => now.saturating_since(c.paused_since),
            None => Duration::ZERO,
        }
    }

    /// Since when priority `p` has been waiting with nothing leaving: the
    /// later of its pause's start and its last frame's departure; `None`
    /// unless it is paused by PFC and not empty.
    pub(super) fn stalled_since(&self, p: u8) -> Option<Instant> {
        let c = &self.classes[usize::from(p)];
        if c.pause_until.is_none() || c.frames.is_empty() {
            return None;
        }
        Some(c.paused_since.max(c.last_dequeue))
    }

    /// Whether priority `p` holds a frame that came in by switch port
    /// `ingress`.
    pub(super) fn holds_from(&self, p: u8, ingress: u32) -> bool {
        self.classes[usize::from(p)]
            .frames
            .iter()
            .any(|q| q.ingress == Some(ingress))
    }
}
