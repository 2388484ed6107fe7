//! The device's timer queue: each QP's earliest deadline (ACK timer, RNR
//! wait, pacer release, rate-controller timer), kept in a min-heap so that
//! [`super::Device::poll_timeout`] costs the same with one QP as with
//! thousands.
//!
//! A QP's deadline is recomputed whenever something is done to that QP
//! (a frame for it, a frame from it, a verb on it, its timers running);
//! the QP keeps the deadline it was last armed with, and heap entries that
//! no longer match it are stale and dropped when they reach the top.

use crate::time::Instant;
use core::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pending QP deadlines, earliest first; see the module docs.
#[derive(Debug, Default)]
pub(super) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
}

impl TimerQueue {
    /// Records that QP `qpn`, last armed at `*armed`, is now due at `due`.
    pub fn arm(&mut self, qpn: u32, armed: &mut Option<Instant>, due: Option<Instant>) {
        if *armed != due {
            *armed = due;
            if let Some(t) = due {
                self.heap.push(Reverse((t, qpn)));
            }
        }
    }

    /// Drops stale entries from the top: `armed(qpn)` is the deadline the
    /// QP holds now (`None` for a QP that is gone). Rebuilds the heap from
    /// `all` when stale entries below the top have piled up.
    pub fn prune<I>(
        &mut self,
        armed: impl Fn(u32) -> Option<Instant>,
        live: usize,
        all: impl FnOnce() -> I,
    ) where
        I: Iterator<Item = (u32, Instant)>,
    {
        if self.heap.len() > 2 * live + 64 {
            self.heap = all().map(|(q, t)| Reverse((t, q))).collect();
            return;
        }
        while let Some(&Reverse((t, q))) = self.heap.peek() {
            if armed(q) == Some(t) {
                break;
            }
            self.heap.pop();
        }
    }

    /// The earliest deadline, once [`TimerQueue::prune`] has run.
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
        let mut q = TimerQueue::default();
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
        let mut q = TimerQueue::default();
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
}
