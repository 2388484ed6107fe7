//! DCTCP made rate-based, as the HPCC simulator runs it for RDMA
//! (Alizadeh et al., "Data Center TCP", SIGCOMM 2010, §3.1; the rate form
//! of Li et al.'s HPCC ns-3 simulator). Each rule lives in one method.
//!
//! - **ECN echo**: RoCE's is the CNP; an acknowledgement is counted as
//!   marked when a CNP came since the previous one (`AckSample::ecn_echo`).
//!   The notification point sends at most one CNP per QP per interval
//!   (4 µs by default), so this counts marked intervals rather than
//!   marked packets, as ConnectX's own DCTCP-like α does.
//! - **Windows** (`on_ack`): one observation window per RTT, the latest
//!   RTT sample (at least `min_window_us`). At its end (`end_window`):
//!   F = marked / all acknowledgements of the window; α = (1 − g)·α + g·F;
//!   a window with a mark cuts rate ·= 1 − α/2 (§3.1's cwnd rule on the
//!   rate), one without raises rate += `ai_rate_mbps`.
//! - **Bounds**: the rate stays in [`min_rate_mbps`, the highest rate];
//!   it starts at the highest rate, α at `initial_alpha`.
//!
//! Defaults: g = 1/16 (§3.1); the rate step 1000 Mb/s and the start
//! α = 1 are the HPCC simulator's (`DctcpRateAI`; its α starts at 1, as
//! DCQCN's does); the 10 µs window floor and the 10 Mb/s lowest rate are
//! our choices.

use super::{max_rate_bps, Books, CcState, RateController, TraceEvent};
use crate::cc::AckSample;
use crate::time::{Duration, Instant};

/// DCTCP's parameters (module docs give their sources).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DctcpParams {
    /// α gain g, in (0, 1]. Default 1/16.
    pub g: f64,
    /// α before the first window, in [0, 1]. Default 1.
    pub initial_alpha: f64,
    /// Additive increase per window without a mark, Mb/s. Default 1000.
    pub ai_rate_mbps: u32,
    /// The shortest observation window, µs. Default 10.
    pub min_window_us: u32,
    /// Lowest rate, Mb/s. Default 10.
    pub min_rate_mbps: u32,
    /// Highest rate, Mb/s (0: the line rate). Default 0.
    pub max_rate_mbps: u32,
}

impl Default for DctcpParams {
    fn default() -> DctcpParams {
        DctcpParams {
            g: 1.0 / 16.0,
            initial_alpha: 1.0,
            ai_rate_mbps: 1000,
            min_window_us: 10,
            min_rate_mbps: 10,
            max_rate_mbps: 0,
        }
    }
}

impl DctcpParams {
    /// Whether every value is in its range; the error names the first that
    /// is not.
    pub fn check(&self) -> Result<(), String> {
        if !(self.g > 0.0 && self.g <= 1.0) {
            return Err(format!("g {} is outside (0, 1]", self.g));
        }
        if !(0.0..=1.0).contains(&self.initial_alpha) {
            return Err(format!(
                "initial_alpha {} is outside [0, 1]",
                self.initial_alpha
            ));
        }
        let positive = [
            ("ai_rate_mbps", self.ai_rate_mbps),
            ("min_window_us", self.min_window_us),
            ("min_rate_mbps", self.min_rate_mbps),
        ];
        super::check_positive(&positive)?;
        super::check_rate_bounds(self.min_rate_mbps, self.max_rate_mbps)
    }
}

/// Rate-based DCTCP at one QP (see the module docs).
#[derive(Debug)]
pub struct Dctcp {
    p: DctcpParams,
    max_bps: u64,
    min_bps: u64,
    rate: u64,
    alpha: f64,
    /// The current window's end (`None` before the first acknowledgement).
    window_end: Option<Instant>,
    /// Acknowledgements in it, and those marked.
    acks: u32,
    marked: u32,
    /// The latest RTT sample.
    last_rtt: Duration,
    books: Books,
}

impl Dctcp {
    /// DCTCP for a QP whose line rate is `line_bps` (0: unknown).
    pub fn new(p: &DctcpParams, line_bps: u64) -> Dctcp {
        let max_bps = max_rate_bps(p.max_rate_mbps, line_bps);
        Dctcp {
            p: p.clone(),
            max_bps,
            min_bps: super::mbps(p.min_rate_mbps).min(max_bps),
            rate: max_bps,
            alpha: p.initial_alpha,
            window_end: None,
            acks: 0,
            marked: 0,
            last_rtt: Duration::ZERO,
            books: Books::default(),
        }
    }

    fn window(&self) -> Duration {
        self.last_rtt
            .max(Duration::from_micros(u64::from(self.p.min_window_us)))
    }

    /// §3.1 at the end of a window.
    fn end_window(&mut self, now: Instant) {
        let f = f64::from(self.marked) / f64::from(self.acks.max(1));
        let g = self.p.g;
        self.alpha = (1.0 - g) * self.alpha + g * f;
        let event = if self.marked > 0 {
            let cut = (self.rate as f64 * (1.0 - self.alpha / 2.0)) as u64;
            self.rate = cut.max(self.min_bps);
            self.books.counters.rate_cuts += 1;
            TraceEvent::Cut
        } else {
            self.rate = (self.rate + super::mbps(self.p.ai_rate_mbps)).min(self.max_bps);
            self.books.counters.rate_increases += 1;
            TraceEvent::AdditiveIncrease
        };
        self.acks = 0;
        self.marked = 0;
        let state = self.state();
        self.books.trace.push(now, event, state);
    }
}

impl RateController for Dctcp {
    fn on_cnp(&mut self, now: Instant) {
        // Counted through the next acknowledgement's ECN echo.
        self.books.counters.rp_cnp_handled += 1;
        let state = self.state();
        self.books.trace.push(now, TraceEvent::Cnp, state);
    }

    fn reads_acks(&self) -> bool {
        true
    }

    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        if let Some(rtt) = ack.rtt {
            self.last_rtt = rtt;
        }
        self.acks += 1;
        self.marked += u32::from(ack.ecn_echo);
        match self.window_end {
            None => self.window_end = Some(now + self.window()),
            Some(end) if now >= end => {
                self.end_window(now);
                self.window_end = Some(now + self.window());
            }
            Some(_) => {}
        }
    }

    fn rate_bps(&self) -> Option<u64> {
        Some(self.rate)
    }

    fn state(&self) -> CcState {
        CcState {
            rate_bps: self.rate,
            target_bps: self.rate,
            alpha: self.alpha,
            timer_stage: 0,
            byte_stage: 0,
            rtt_ns: self.last_rtt.as_nanos(),
            window_bytes: 0,
        }
    }

    fn books(&self) -> &Books {
        &self.books
    }

    fn books_mut(&mut self) -> &mut Books {
        &mut self.books
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: u64 = 100_000_000_000;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    fn ack(marked: bool) -> AckSample {
        AckSample {
            acked_bytes: 4096,
            acked_pkts: 1,
            rtt: Some(Duration::from_micros(20)),
            rtt_resent: false,
            rtt_bytes: 4096,
            inflight_bytes: 0,
            ecn_echo: marked,
            int: None,
            hops: None,
        }
    }

    #[test]
    fn a_window_with_a_mark_cuts_by_half_alpha_and_alpha_follows_the_marked_fraction() {
        let mut d = Dctcp::new(&DctcpParams::default(), G100);
        // The first acknowledgement opens a 20 µs window (its RTT).
        d.on_ack(at(0), &ack(false));
        d.on_ack(at(10), &ack(true));
        d.on_ack(at(15), &ack(false));
        assert_eq!(d.rate_bps(), Some(G100), "window still open");
        // At 20 µs: 4 acknowledgements, 1 marked: F = 1/4;
        // α = 15/16·1 + 1/16·1/4 = 0.953125; rate ·= 1 − α/2.
        d.on_ack(at(20), &ack(false));
        let alpha = 15.0 / 16.0 + 1.0 / 64.0;
        assert!((d.state().alpha - alpha).abs() < 1e-12);
        let want = (G100 as f64 * (1.0 - alpha / 2.0)) as u64;
        assert_eq!(d.rate_bps(), Some(want));
    }

    #[test]
    fn a_window_without_marks_adds_the_step_and_decays_alpha() {
        let mut d = Dctcp::new(&DctcpParams::default(), G100);
        d.rate = 10_000_000_000;
        d.on_ack(at(0), &ack(false));
        d.on_ack(at(20), &ack(false));
        assert_eq!(d.rate_bps(), Some(11_000_000_000));
        assert!((d.state().alpha - 15.0 / 16.0).abs() < 1e-12);
    }

    #[test]
    fn the_window_is_the_latest_rtt_at_least_the_floor() {
        let mut d = Dctcp::new(&DctcpParams::default(), G100);
        let mut short = ack(true);
        short.rtt = Some(Duration::from_micros(2));
        d.on_ack(at(0), &short);
        d.on_ack(at(9), &short);
        assert_eq!(d.rate_bps(), Some(G100), "a 10 µs floor");
        d.on_ack(at(10), &short);
        assert!(d.rate_bps().unwrap() < G100);
    }

    #[test]
    fn the_rate_stays_in_its_bounds() {
        let mut d = Dctcp::new(&DctcpParams::default(), G100);
        for k in 0..2000 {
            d.on_ack(at(k * 20), &ack(true));
        }
        assert_eq!(d.rate_bps(), Some(10_000_000));
        for k in 2000..3000 {
            d.on_ack(at(k * 20), &ack(false));
        }
        assert_eq!(d.rate_bps(), Some(G100));
    }

    #[test]
    fn parameters_out_of_range_are_named() {
        let mut p = DctcpParams {
            g: 0.0,
            ..DctcpParams::default()
        };
        assert!(p.check().unwrap_err().contains("g 0 is outside"));
        p.g = 0.5;
        p.ai_rate_mbps = 0;
        assert!(p.check().unwrap_err().contains("ai_rate_mbps"));
        assert!(DctcpParams::default().check().is_ok());
    }
}
