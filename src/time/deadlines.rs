//! A min-heap of deadlines, one per key (a QP, a simulated host), for a
//! driver that must know the earliest and find those that are due without
//! walking every key.
//!
//! Each key keeps the deadline it was last armed with (its `armed` slot,
//! owned by the caller); the heap may also hold entries that no longer
//! match it: they are stale, and are dropped when they reach the top, or
//! all at once when too many have piled up.

use super::Instant;
use core::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pending deadlines by key, earliest (then smallest key) first; see the
/// module docs.
#[derive(Debug)]
pub struct DeadlineHeap<K> {
    heap: BinaryHeap<Reverse<(Instant, K)>>,
}

impl<K: Ord> Default for DeadlineHeap<K> {
    fn default() -> Self {
        DeadlineHeap {
            heap: BinaryHeap::new(),
        }
    }
}

impl<K: Ord + Copy> DeadlineHeap<K> {
    /// Records that `key`, last armed at `*armed`, is now due at `due`
    /// (`None`: not at all).
    pub fn arm(&mut self, key: K, armed: &mut Option<Instant>, due: Option<Instant>) {
        if *armed != due {
            *armed = due;
            if let Some(t) = due {
                self.heap.push(Reverse((t, key)));
            }
        }
    }

    /// Drops stale entries from the top: `armed(key)` is the deadline the
    /// key holds now (`None` for one that is gone or disarmed). Rebuilds
    /// the heap from `all` (every armed key and its deadline) once more
    /// entries have piled up than twice the `live` keys.
    pub fn prune<I>(
        &mut self,
        armed: impl Fn(K) -> Option<Instant>,
        live: usize,
        all: impl FnOnce() -> I,
    ) where
        I: Iterator<Item = (K, Instant)>,
    {
        if self.heap.len() > 2 * live + 64 {
            self.heap = all().map(|(k, t)| Reverse((t, k))).collect();
            return;
        }
        while let Some(&Reverse((t, k))) = self.heap.peek() {
            if armed(k) == Some(t) {
                break;
            }
            self.heap.pop();
        }
    }

    /// The earliest entry due by `now`, removed, whether live or stale:
    /// the caller checks it against the key's `armed` slot.
    pub fn pop_due(&mut self, now: Instant) -> Option<(K, Instant)> {
        let &Reverse((t, k)) = self.heap.peek()?;
        if t > now {
            return None;
        }
        self.heap.pop();
        Some((k, t))
    }

    /// The earliest deadline, once [`DeadlineHeap::prune`] has run.
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|r| r.0 .0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn earliest_live_deadline_wins_and_stale_ones_go() {
        let mut q = DeadlineHeap::default();
        let mut armed = [None; 3];
        q.arm(0, &mut armed[0], Some(t(30)));
        q.arm(1, &mut armed[1], Some(t(10)));
        q.arm(2, &mut armed[2], Some(t(20)));
        let all = |a: [Option<Instant>; 3]| {
            move || {
                a.into_iter()
                    .enumerate()
                    .filter_map(|(i, d)| d.map(|d| (i as u32, d)))
            }
        };
        q.prune(|i| armed[i as usize], 3, all(armed));
        assert_eq!(q.next(), Some(t(10)));
        // QP 1 moves later, QP 2 is disarmed: 30 (QP 0) and 40 remain.
        q.arm(1, &mut armed[1], Some(t(40)));
        q.arm(2, &mut armed[2], None);
        q.prune(|i| armed[i as usize], 3, all(armed));
        assert_eq!(q.next(), Some(t(30)));
        // Re-arming at the same deadline adds nothing.
        let len = q.heap.len();
        q.arm(0, &mut armed[0], Some(t(30)));
        assert_eq!(q.heap.len(), len);
        q.arm(0, &mut armed[0], None);
        q.prune(|i| armed[i as usize], 3, all(armed));
        assert_eq!(q.next(), Some(t(40)));
    }

    #[test]
    fn piled_up_stale_entries_are_rebuilt_away() {
        let mut q = DeadlineHeap::default();
        let mut armed = None;
        // One QP whose deadline moves earlier again and again leaves its
        // later entries below the top.
        for i in (0..1000).rev() {
            q.arm(7, &mut armed, Some(t(i)));
            q.prune(|_| armed, 1, || armed.map(|d| (7, d)).into_iter());
        }
        assert!(q.heap.len() <= 2 + 64);
        assert_eq!(q.next(), Some(t(0)));
    }

    #[test]
    fn due_entries_come_out_earliest_first_stale_ones_included() {
        let mut q = DeadlineHeap::default();
        let mut armed = [None; 2];
        q.arm(1usize, &mut armed[1], Some(t(20)));
        q.arm(0, &mut armed[0], Some(t(20)));
        q.arm(0, &mut armed[0], Some(t(5)));
        assert_eq!(q.pop_due(t(4)), None);
        assert_eq!(q.pop_due(t(20)), Some((0, t(5))));
        // At the same instant, the smaller key first; (0, 20) is stale.
        assert_eq!(q.pop_due(t(20)), Some((0, t(20))));
        assert_eq!(q.pop_due(t(20)), Some((1, t(20))));
        assert_eq!(q.pop_due(t(99)), None);
        assert_eq!(q.next(), None);
    }
}
