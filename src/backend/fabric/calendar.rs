//! The [`Fabric`](super::Fabric)'s calendar of pending events: what is due
//! next, in (time, sequence number) order, so that events at the same
//! instant run in the order they were scheduled (the module docs'
//! determinism rule).
//!
//! Every event passes through here twice (scheduled, then taken), so the
//! calendar is built for that: a four-ary min-heap of 16-byte keys (four
//! siblings share a cache line, half the depth of a binary heap), the
//! events' kinds in a slab beside it whose slots are reused, so that
//! sifting moves keys and no frame handle, and no event allocates once
//! the slab has grown to the run's largest backlog.

use super::ChannelId;
use super::SwitchId;
use crate::backend::loopback::VecBuf;
use crate::time::Instant;

#[derive(Debug)]
pub(super) enum EventKind {
    /// The head frame of the channel's queue has been serialised.
    TxDone(ChannelId),
    /// A frame reaches the far end of the channel.
    Arrive(ChannelId, VecBuf),
    /// A PFC pause of a priority of the channel's egress queue may end.
    PauseExpire(ChannelId, u8),
    /// A switch port's PFC pauses are due to be sent again.
    PfcRefresh(SwitchId, usize),
}

impl EventKind {
    /// A PFC timer, which a later pause or refresh may have overtaken
    /// ([`Calendar::drop_stale`]).
    fn is_pfc_timer(&self) -> bool {
        matches!(self, EventKind::PauseExpire(..) | EventKind::PfcRefresh(..))
    }
}

/// An event taken off the calendar.
#[derive(Debug)]
pub(super) struct Event {
    pub(super) at: Instant,
    pub(super) kind: EventKind,
}

/// Bits of a key's tag ([`Key::new`]) below the sequence number: the
/// slot, and above it one bit saying the event is a PFC timer.
const SLOT_BITS: u32 = 23;
const TIMER_BIT: u64 = 1 << SLOT_BITS;
const SEQ_SHIFT: u32 = SLOT_BITS + 1;
/// Sequence numbers run below this; reaching it renumbers the pending
/// events from 0, in their order ([`Calendar::renumber`]).
const SEQ_LIMIT: u64 = 1 << (64 - SEQ_SHIFT);
const MAX_SLOTS: usize = 1 << SLOT_BITS;
/// The timer bit and the slot of a key's tag.
const LOW_MASK: u64 = (1 << SEQ_SHIFT) - 1;

/// An event's place in the heap: its time in the high 64 bits, then its
/// sequence number, timer bit and slot packed so that comparing keys as
/// integers orders events by (time, sequence number) (the sequence
/// number is unique), without a branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u128);

impl Key {
    fn new(at: Instant, tag: u64) -> Key {
        Key(u128::from(at.as_nanos()) << 64 | u128::from(tag))
    }

    fn at(self) -> Instant {
        Instant::from_nanos((self.0 >> 64) as u64)
    }

    fn tag(self) -> u64 {
        self.0 as u64
    }

    fn slot(self) -> usize {
        (self.tag() & (TIMER_BIT - 1)) as usize
    }

    fn is_timer(self) -> bool {
        self.tag() & TIMER_BIT != 0
    }
}

/// Children per node of the heap.
const ARITY: usize = 4;

/// The pending events, earliest (then first scheduled) first.
#[derive(Debug, Default)]
pub(super) struct Calendar {
    heap: Vec<Key>,
    slots: Vec<Option<EventKind>>,
    free: Vec<u32>,
    next_seq: u64,
}

impl Calendar {
    /// Schedules `kind` at `at`, after every event already scheduled for
    /// the same instant.
    ///
    /// # Panics
    ///
    /// With 2^23 events pending at once (each an event of a link or a
    /// frame on a wire: far beyond what memory holds as frames).
    pub(super) fn push(&mut self, at: Instant, kind: EventKind) {
        if self.next_seq == SEQ_LIMIT {
            self.renumber();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let timer = if kind.is_pfc_timer() { TIMER_BIT } else { 0 };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(kind);
                s as u64
            }
            None => {
                assert!(
                    self.slots.len() < MAX_SLOTS,
                    "fewer than 2^23 pending events"
                );
                self.slots.push(Some(kind));
                (self.slots.len() - 1) as u64
            }
        };
        self.sift_up(Key::new(at, seq << SEQ_SHIFT | timer | slot));
    }

    /// When the earliest pending event is due.
    pub(super) fn peek_time(&self) -> Option<Instant> {
        self.heap.first().map(|k| k.at())
    }

    /// The earliest event if it is due by `t`.
    pub(super) fn pop_due(&mut self, t: Instant) -> Option<Event> {
        let top = *self.heap.first()?;
        if top.at() > t {
            return None;
        }
        self.remove_top();
        let kind = self.take(top)?;
        Some(Event { at: top.at(), kind })
    }

    /// Whether the earliest event is a PFC timer (which
    /// [`Calendar::drop_stale`] may drop).
    pub(super) fn timer_on_top(&self) -> bool {
        self.heap.first().is_some_and(|k| k.is_timer())
    }

    /// Drops the earliest events while they are PFC timers that `stale`
    /// says would do nothing.
    pub(super) fn drop_stale(&mut self, mut stale: impl FnMut(&EventKind, Instant) -> bool) {
        while let Some(&k) = self.heap.first() {
            if !k.is_timer() {
                break;
            }
            match &self.slots[k.slot()] {
                Some(kind) if stale(kind, k.at()) => {}
                _ => break,
            }
            self.remove_top();
            self.take(k);
        }
    }

    /// Empties the slot of a key taken off the heap.
    fn take(&mut self, k: Key) -> Option<EventKind> {
        self.free.push(k.slot() as u32);
        self.slots[k.slot()].take()
    }

    /// Adds `k` at the bottom and moves it up past its larger parents.
    fn sift_up(&mut self, k: Key) {
        let mut i = self.heap.len();
        self.heap.push(k);
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[parent] <= k {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = k;
    }

    /// Removes the root: the last key fills the hole, moving down past its
    /// smallest child while that is smaller.
    fn remove_top(&mut self) {
        let Some(last) = self.heap.pop() else {
            return;
        };
        let n = self.heap.len();
        if n == 0 {
            return;
        }
        let mut i = 0;
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let mut min = first;
            let mut min_key = self.heap[first];
            for c in first + 1..(first + ARITY).min(n) {
                let k = self.heap[c];
                if k < min_key {
                    min = c;
                    min_key = k;
                }
            }
            if min_key >= last {
                break;
            }
            self.heap[i] = min_key;
            i = min;
        }
        self.heap[i] = last;
    }

    /// Gives the pending events sequence numbers from 0 in their order, so
    /// that numbering can go on below [`SEQ_LIMIT`].
    fn renumber(&mut self) {
        self.heap.sort_unstable();
        for (seq, k) in self.heap.iter_mut().enumerate() {
            *k = Key::new(k.at(), (seq as u64) << SEQ_SHIFT | (k.tag() & LOW_MASK));
        }
        // A sorted array is a heap.
        self.next_seq = self.heap.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(ch: usize) -> EventKind {
        EventKind::TxDone(ChannelId(ch))
    }

    fn drain(c: &mut Calendar) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        while let Some(e) = c.pop_due(Instant::from_nanos(u64::MAX)) {
            let EventKind::TxDone(ch) = e.kind else {
                panic!("only TxDone was scheduled");
            };
            out.push((e.at.as_nanos(), ch.0));
        }
        out
    }

    #[test]
    fn events_come_out_by_time_then_in_the_order_scheduled() {
        let mut c = Calendar::default();
        // A pseudo-random order of times with many ties.
        let mut x = 7u64;
        let mut want = Vec::new();
        for i in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (x >> 33) % 97;
            c.push(Instant::from_nanos(at), tx(i));
            want.push((at, i));
        }
        want.sort(); // by time, then by the order pushed (i)
        assert_eq!(drain(&mut c), want);
        assert!(c.peek_time().is_none());
    }

    #[test]
    fn pop_due_leaves_later_events_and_slots_are_reused() {
        let mut c = Calendar::default();
        for round in 0..3u64 {
            for i in 0..10 {
                c.push(Instant::from_nanos(round * 100 + 10 - i as u64), tx(i));
            }
            assert!(c.pop_due(Instant::from_nanos(round * 100)).is_none());
            let mut n = 0;
            while c.pop_due(Instant::from_nanos(round * 100 + 5)).is_some() {
                n += 1;
            }
            assert_eq!(n, 5);
            assert_eq!(c.peek_time(), Some(Instant::from_nanos(round * 100 + 6)));
            drain(&mut c);
        }
        assert_eq!(c.slots.len(), 10, "slots are reused from round to round");
    }

    #[test]
    fn renumbering_keeps_the_order_of_pending_events() {
        let mut c = Calendar::default();
        for i in 0..50 {
            c.push(Instant::from_nanos(i as u64 % 5), tx(i));
        }
        c.next_seq = SEQ_LIMIT;
        for i in 50..100 {
            c.push(Instant::from_nanos(i as u64 % 5), tx(i));
        }
        assert!(c.next_seq < 200);
        let mut want: Vec<(u64, usize)> = (0..100).map(|i| (i as u64 % 5, i)).collect();
        want.sort();
        assert_eq!(drain(&mut c), want);
    }

    #[test]
    fn only_stale_pfc_timers_at_the_front_are_dropped() {
        let mut c = Calendar::default();
        c.push(
            Instant::from_nanos(1),
            EventKind::PauseExpire(ChannelId(0), 3),
        );
        c.push(Instant::from_nanos(2), tx(1));
        c.push(
            Instant::from_nanos(3),
            EventKind::PauseExpire(ChannelId(0), 3),
        );
        c.drop_stale(|_, _| true);
        assert_eq!(c.peek_time(), Some(Instant::from_nanos(2)));
        c.pop_due(Instant::from_nanos(2));
        c.drop_stale(|_, _| false);
        assert_eq!(c.peek_time(), Some(Instant::from_nanos(3)));
    }
}
