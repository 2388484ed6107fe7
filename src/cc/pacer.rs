//! The per-QP pacer: an inter-packet gap at the controller's rate.
//!
//! After a packet of `b` bytes leaves at rate `r`, the next may leave
//! `b * 8 / r` later. A late sender (the poll loop came round after the
//! release time) may catch up by at most [`Pacer::max_lag`], so the rate
//! holds on average over a busy engine without letting an idle QP save up
//! a burst. On the simulator's clock sends happen exactly at the release
//! time and the lag never matters.

use crate::time::{Duration, Instant};

/// Holds back a QP's paced packets to its rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacer {
    /// When the next paced packet may leave; `None`: now.
    next: Option<Instant>,
    /// How far behind its schedule the pacer may run and still catch up.
    pub max_lag: Duration,
}

impl Default for Pacer {
    fn default() -> Pacer {
        Pacer {
            next: None,
            max_lag: Duration::from_micros(1),
        }
    }
}

impl Pacer {
    pub fn new(max_lag: Duration) -> Pacer {
        Pacer {
            next: None,
            max_lag,
        }
    }

    /// Whether a paced packet may leave at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        match self.next {
            Some(t) => t <= now,
            None => true,
        }
    }

    /// When the next paced packet may leave, if that is later than a
    /// packet that left at the last call (a caller's timer).
    pub fn release_at(&self) -> Option<Instant> {
        self.next
    }

    /// A paced packet of `bytes` left at `now`; `rate_bps` is the rate to
    /// keep (`None` or 0: unlimited, the pacer holds nothing back).
    pub fn on_sent(&mut self, now: Instant, bytes: u64, rate_bps: Option<u64>) {
        let Some(rate) = rate_bps.filter(|&r| r > 0) else {
            self.next = None;
            return;
        };
        let gap = gap(bytes, rate);
        let floor = Instant::from_nanos(now.as_nanos().saturating_sub(self.max_lag.as_nanos()));
        let start = match self.next {
            Some(t) if t > floor => t,
            Some(_) => floor,
            None => now,
        };
        self.next = Some(start + gap);
    }
}

/// How long `bytes` take at `rate_bps` (> 0), rounded to the nearest
/// nanosecond.
pub fn gap(bytes: u64, rate_bps: u64) -> Duration {
    let ns =
        (u128::from(bytes) * 8 * 1_000_000_000 + u128::from(rate_bps) / 2) / u128::from(rate_bps);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn packets_are_spaced_by_their_serialisation_time_at_the_rate() {
        let mut p = Pacer::new(Duration::ZERO);
        assert!(p.ready(t(0)));
        // 1000 B at 10 Gb/s: 800 ns.
        p.on_sent(t(0), 1000, Some(10_000_000_000));
        assert_eq!(p.release_at(), Some(t(800)));
        assert!(!p.ready(t(799)));
        assert!(p.ready(t(800)));
        p.on_sent(t(800), 1000, Some(10_000_000_000));
        assert_eq!(p.release_at(), Some(t(1600)));
    }

    #[test]
    fn a_late_sender_catches_up_by_at_most_the_lag() {
        let mut p = Pacer::new(Duration::from_nanos(500));
        p.on_sent(t(0), 1000, Some(10_000_000_000));
        // Sent 300 ns late: the schedule holds (next at 1600).
        p.on_sent(t(1100), 1000, Some(10_000_000_000));
        assert_eq!(p.release_at(), Some(t(1600)));
        // Sent 10 µs late: no saved-up burst beyond 500 ns.
        p.on_sent(t(11_600), 1000, Some(10_000_000_000));
        assert_eq!(p.release_at(), Some(t(11_900)));
    }

    #[test]
    fn no_rate_holds_nothing_back() {
        let mut p = Pacer::default();
        p.on_sent(t(0), 1000, Some(1_000_000));
        assert!(!p.ready(t(1)));
        p.on_sent(t(1), 1000, None);
        assert!(p.ready(t(1)));
        assert_eq!(p.release_at(), None);
    }
}
