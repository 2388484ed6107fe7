//! A min-heap of deadlines, one per key (a QP, a simulated host), for a
//! driver that must know the earliest and find those that are due without
//! walking every key.
//!
//! Each key keeps the deadline it was last armed with (its `armed` slot,
//! owned by the caller); the heap may also hold entries that no longer
//! match it: they are stale, and are dropped when they reach the top, or
//! all at once when too many have piled up.
//!
//! Most deadlines are armed in order: an ACK timer is "now + the QP's
//! timeout", and now only grows. An entry no earlier (by deadline, then
//! key) than the last one in order goes to the back of a queue, in and
//! out in O(1); only the others go into a binary heap. The earliest entry
//! is the earlier of the queue's front and the heap's top, so entries come
//! out in exactly the order one heap would give them.

use super::Instant;
use core::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Pending deadlines by key, earliest (then smallest key) first; see the
/// module docs.
#[derive(Debug)]
pub struct DeadlineHeap<K> {
    /// Entries armed in (deadline, key) order, each no earlier than the
    /// one before it.
    in_order: VecDeque<(Instant, K)>,
    /// The entries armed out of that order.
    heap: BinaryHeap<Reverse<(Instant, K)>>,
}

impl<K: Ord> Default for DeadlineHeap<K> {
    fn default() -> Self {
        DeadlineHeap {
            in_order: VecDeque::new(),
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
                self.push((t, key));
            }
        }
    }

    fn push(&mut self, e: (Instant, K)) {
        if self.in_order.back().map_or(true, |&last| last <= e) {
            self.in_order.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
    }

    /// Entries held, live and stale.
    fn len(&self) -> usize {
        self.in_order.len() + self.heap.len()
    }

    /// The earliest entry, live or stale, and whether it is the queue's.
    fn peek(&self) -> Option<((Instant, K), bool)> {
        match (self.in_order.front(), self.heap.peek()) {
            (Some(&q), Some(&Reverse(h))) => Some(if q <= h { (q, true) } else { (h, false) }),
            (Some(&q), None) => Some((q, true)),
            (None, Some(&Reverse(h))) => Some((h, false)),
            (None, None) => None,
        }
    }

    /// Removes the earliest entry ([`DeadlineHeap::peek`] said where).
    fn pop(&mut self, queued: bool) {
        if queued {
            self.in_order.pop_front();
        } else {
            self.heap.pop();
        }
    }

    /// Drops stale entries from the top: `armed(key)` is the deadline the
    /// key holds now (`None` for one that is gone or disarmed). Rebuilds
    /// from `all` (every armed key and its deadline) once more entries
    /// have piled up than twice the `live` keys.
    pub fn prune<I>(
        &mut self,
        armed: impl Fn(K) -> Option<Instant>,
        live: usize,
        all: impl FnOnce() -> I,
    ) where
        I: Iterator<Item = (K, Instant)>,
    {
        if self.len() > 2 * live + 64 {
            let mut v: Vec<(Instant, K)> = all().map(|(k, t)| (t, k)).collect();
            v.sort_unstable();
            self.in_order = v.into();
            self.heap.clear();
            return;
        }
        while let Some(((t, k), queued)) = self.peek() {
            if armed(k) == Some(t) {
                break;
            }
            self.pop(queued);
        }
    }

    /// The earliest entry due by `now`, removed, whether live or stale:
    /// the caller checks it against the key's `armed` slot.
    pub fn pop_due(&mut self, now: Instant) -> Option<(K, Instant)> {
        let ((t, k), queued) = self.peek()?;
        if t > now {
            return None;
        }
        self.pop(queued);
        Some((k, t))
    }

    /// The earliest deadline, once [`DeadlineHeap::prune`] has run.
    pub fn next(&self) -> Option<Instant> {
        self.peek().map(|((t, _), _)| t)
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
        let len = q.len();
        q.arm(0, &mut armed[0], Some(t(30)));
        assert_eq!(q.len(), len);
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
        assert!(q.len() <= 2 + 64);
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

    /// The queue and heap together give what one heap gave: the same
    /// entries, due in the same order, the same earliest deadline, under
    /// random arming (in order and out of it), disarming and pruning.
    #[test]
    fn queue_and_heap_give_one_heaps_order() {
        /// One binary heap of every entry: what the type was before.
        struct OneHeap(BinaryHeap<Reverse<(Instant, u32)>>);
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let keys = 40;
        let mut q = DeadlineHeap::default();
        let mut r = OneHeap(BinaryHeap::new());
        let mut armed = vec![None; keys];
        let mut now = 0u64;
        for _ in 0..20_000 {
            let k = rand(keys as u64) as u32;
            let due = match rand(10) {
                // Disarmed.
                0 => None,
                // Out of order: earlier than most.
                1 | 2 => Some(t(now + rand(50))),
                // In order: now plus one of a few timeouts.
                _ => Some(t(now + 100 * (1 + rand(3)))),
            };
            if armed[k as usize] != due {
                if let Some(d) = due {
                    r.0.push(Reverse((d, k)));
                }
            }
            q.arm(k, &mut armed[k as usize], due);
            let live = |a: &Vec<Option<Instant>>| {
                let a = a.clone();
                move || {
                    a.into_iter()
                        .enumerate()
                        .filter_map(|(i, d)| d.map(|d| (i as u32, d)))
                }
            };
            // The old type's prune, beside the new one's.
            if r.0.len() > 2 * keys + 64 {
                r.0 = live(&armed)().map(|(k, t)| Reverse((t, k))).collect();
            } else {
                while let Some(&Reverse((t, k))) = r.0.peek() {
                    if armed[k as usize] == Some(t) {
                        break;
                    }
                    r.0.pop();
                }
            }
            q.prune(|k| armed[k as usize], keys, live(&armed));
            assert_eq!(q.next(), r.0.peek().map(|e| e.0 .0));
            assert_eq!(q.len(), r.0.len());
            if rand(4) == 0 {
                now += rand(120);
                loop {
                    let want = match r.0.peek() {
                        Some(&Reverse((d, k))) if d <= t(now) => {
                            r.0.pop();
                            Some((k, d))
                        }
                        _ => None,
                    };
                    let got = q.pop_due(t(now));
                    assert_eq!(got, want);
                    let Some((k, d)) = got else { break };
                    if armed[k as usize] == Some(d) {
                        armed[k as usize] = None;
                    }
                }
            }
        }
    }
}
