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
///
/// It keeps when the last paced packet was due and how long it was, not a
/// release time: the next release is that start plus the packet's time at
/// the rate *now*, so a rate that rises while a packet waits (DCQCN's
/// recovery) shortens the wait instead of leaving a gap computed at the
/// lowest rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacer {
    /// When the last paced packet was due to leave, and its bytes.
    last: Option<(Instant, u64)>,
    /// How far behind its schedule the pacer may run and still catch up.
    pub max_lag: Duration,
}

impl Default for Pacer {
    fn default() -> Pacer {
        Pacer {
            last: None,
            max_lag: Duration::from_micros(1),
        }
    }
}

impl Pacer {
    /// A pacer with nothing sent yet that may catch up by at most `max_lag`.
    pub fn new(max_lag: Duration) -> Pacer {
        Pacer {
            last: None,
            max_lag,
        }
    }

    /// When the next paced packet may leave at `rate_bps` (`None` or 0:
    /// unlimited); `None`: at once.
    pub fn release_at(&self, rate_bps: Option<u64>) -> Option<Instant> {
        let (start, bytes) = self.last?;
        let rate = rate_bps.filter(|&r| r > 0)?;
        Some(start + gap(bytes, rate))
    }

    /// Whether a paced packet may leave at `now` at `rate_bps`.
    pub fn ready(&self, now: Instant, rate_bps: Option<u64>) -> bool {
        match self.release_at(rate_bps) {
            Some(t) => t <= now,
            None => true,
        }
    }

    /// A paced packet of `bytes` left at `now`, at `rate_bps` (`None`:
    /// unlimited, and nothing is kept).
    pub fn on_sent(&mut self, now: Instant, bytes: u64, rate_bps: Option<u64>) {
        if !matches!(rate_bps, Some(r) if r > 0) {
            self.last = None;
            return;
        }
        let floor = Instant::from_nanos(now.as_nanos().saturating_sub(self.max_lag.as_nanos()));
        let start = match self.release_at(rate_bps) {
            Some(t) if t > floor => t.min(now),
            Some(_) => floor,
            None => now,
        };
        self.last = Some((start, bytes));
    }

    /// The QP had nothing to send at `now`: once its last packet's time
    /// is over, the schedule restarts with the next one, so an idle QP
    /// saves up no burst ([`Pacer::max_lag`] is for a late sender only).
    pub fn on_idle(&mut self, now: Instant, rate_bps: Option<u64>) {
        if self.ready(now, rate_bps) {
            self.last = None;
        }
    }
}

/// How long `bytes` take at `rate_bps` (> 0), rounded to the nearest
/// nanosecond.
pub fn gap(bytes: u64, rate_bps: u64) -> Duration {
    // In 64 bits when the product fits (any packet), the same integer
    // result as the 128-bit division, which costs several times more.
    let ns = bytes
        .checked_mul(8_000_000_000)
        .and_then(|b| b.checked_add(rate_bps / 2))
        .map(|n| u128::from(n / rate_bps))
        .unwrap_or_else(|| {
            (u128::from(bytes) * 8 * 1_000_000_000 + u128::from(rate_bps) / 2)
                / u128::from(rate_bps)
        });
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_G: Option<u64> = Some(10_000_000_000);

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn packets_are_spaced_by_their_serialisation_time_at_the_rate() {
        let mut p = Pacer::new(Duration::ZERO);
        assert!(p.ready(t(0), TEN_G));
        // 1000 B at 10 Gb/s: 800 ns.
        p.on_sent(t(0), 1000, TEN_G);
        assert_eq!(p.release_at(TEN_G), Some(t(800)));
        assert!(!p.ready(t(799), TEN_G));
        assert!(p.ready(t(800), TEN_G));
        p.on_sent(t(800), 1000, TEN_G);
        assert_eq!(p.release_at(TEN_G), Some(t(1600)));
    }

    #[test]
    fn a_late_sender_catches_up_by_at_most_the_lag() {
        let mut p = Pacer::new(Duration::from_nanos(500));
        p.on_sent(t(0), 1000, TEN_G);
        // Sent 300 ns late: the schedule holds (next at 1600).
        p.on_sent(t(1100), 1000, TEN_G);
        assert_eq!(p.release_at(TEN_G), Some(t(1600)));
        // Sent 10 µs late: no saved-up burst beyond 500 ns.
        p.on_sent(t(11_600), 1000, TEN_G);
        assert_eq!(p.release_at(TEN_G), Some(t(11_900)));
    }

    #[test]
    fn the_wait_follows_the_rate_as_it_changes() {
        let mut p = Pacer::new(Duration::ZERO);
        // 4000 B at 1 Mb/s would hold the next packet for 32 ms ...
        p.on_sent(t(0), 4000, Some(1_000_000));
        assert_eq!(p.release_at(Some(1_000_000)), Some(t(32_000_000)));
        // ... but at 50 Gb/s, once the rate has recovered, 640 ns.
        assert_eq!(p.release_at(Some(50_000_000_000)), Some(t(640)));
        assert!(p.ready(t(640), Some(50_000_000_000)));
    }

    #[test]
    fn an_idle_qp_saves_up_no_burst() {
        let mut p = Pacer::new(Duration::from_nanos(500));
        p.on_sent(t(0), 1000, TEN_G);
        // Idle from 800 ns to 10 µs: the next two packets are a gap apart.
        p.on_idle(t(5_000), TEN_G);
        assert!(p.ready(t(10_000), TEN_G));
        p.on_sent(t(10_000), 1000, TEN_G);
        assert_eq!(p.release_at(TEN_G), Some(t(10_800)));
    }

    #[test]
    fn no_rate_holds_nothing_back() {
        let mut p = Pacer::default();
        p.on_sent(t(0), 1000, Some(1_000_000));
        assert!(!p.ready(t(1), Some(1_000_000)));
        assert!(p.ready(t(1), None));
        assert_eq!(p.release_at(None), None);
    }
}
