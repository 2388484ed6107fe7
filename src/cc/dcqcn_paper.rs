//! DCQCN as the paper describes it: the reaction point of Zhu et al.,
//! "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM 2015),
//! with the paper's parameters. This is our reading of the project
//! reference (shared/reference/roce-v2.md) §C.1 and §C.2; each rule below
//! lives in one method, named in the list.
//!
//! - **Rates** are integer bits per second, α a float in [0, 1] starting
//!   at `initial_alpha` (1 in the paper). The highest rate is
//!   `max_rate_mbps` or the line rate, the lower of the two known ones
//!   (`super::max_rate_bps`).
//! - **Not limited until the first CNP**: `rate_bps` is `None` and no
//!   timer runs; once an increase brings Rc and Rt back to the highest
//!   rate the QP is unlimited again and rate increases stop (`release`;
//!   our choice: there they could change nothing). α keeps decaying.
//! - **Every CNP cuts** (`cut`; the paper's notification point sends at
//!   most one CNP per 50 µs, so the reaction point has no period of its
//!   own): Rt = Rc; Rc = Rc·(1 − α/2), at least `min_rate_mbps`;
//!   α = (1 − g)·α + g; the stages and the byte count reset and both
//!   timers restart.
//! - **α decay** (`decay_alpha`): every K = `alpha_timer_us` without a
//!   CNP, α = (1 − g)·α. Below 2^-40 α is taken as 0 and its timer stops
//!   until the next CNP (a cut of Rc·α/2 is then under 1 b/s for any rate
//!   up to 2 Tb/s), which bounds the work of a long idle gap.
//! - **Rate-increase events** (`increase`): the timer every T =
//!   `rate_timer_us` after the last CNP, and the byte counter every B =
//!   `byte_counter` bytes sent (0: none, our choice). An event first bumps
//!   its own stage, then is judged with F = `fast_recovery_stages`: fast
//!   recovery if max(T, BC) < F; hyper increase, Rt += i·R_HAI with
//!   i = min(T, BC) − F, if min(T, BC) > F; additive, Rt += R_AI,
//!   otherwise. Then Rc = (Rt + Rc)/2 rounded up (`super::halfway`), Rt
//!   capped at the highest rate.
//! - **Timers** (`advance`): due α decays and increase events run in time
//!   order, α first at equal times.

use super::{
    earliest_due, halfway, max_rate_bps, mbps, micros, Books, CcState, RateController, TraceEvent,
};
use crate::time::Instant;

/// α below this counts as 0 (see the module docs).
const ALPHA_FLOOR: f64 = 1.0 / (1u64 << 40) as f64;

/// The DCQCN paper's reaction-point parameters (reference §C.2).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaperParams {
    /// α gain g, in (0, 1). Default 1/256.
    pub g: f64,
    /// α decay timer K, µs. Default 55.
    pub alpha_timer_us: u32,
    /// Rate-increase timer T, µs. Default 55.
    pub rate_timer_us: u32,
    /// Byte counter B, bytes sent per rate-increase event (0: no byte
    /// counter). Default 10 MB (10 000 000).
    pub byte_counter: u64,
    /// Stages of fast recovery F. Default 5.
    pub fast_recovery_stages: u32,
    /// Additive increase R_AI, Mb/s. Default 40.
    pub ai_rate_mbps: u32,
    /// Hyper increase R_HAI, Mb/s. Default 400, ten times R_AI (the paper
    /// gives no figure we could confirm; reference §C.2).
    pub hai_rate_mbps: u32,
    /// Lowest rate, Mb/s. Default 10 (our choice; the paper names none).
    pub min_rate_mbps: u32,
    /// Highest rate, Mb/s (0: the line rate). Default 0.
    pub max_rate_mbps: u32,
    /// α before the first CNP, in [0, 1]. Default 1.
    pub initial_alpha: f64,
}

impl Default for PaperParams {
    fn default() -> PaperParams {
        PaperParams {
            g: 1.0 / 256.0,
            alpha_timer_us: 55,
            rate_timer_us: 55,
            byte_counter: 10_000_000,
            fast_recovery_stages: 5,
            ai_rate_mbps: 40,
            hai_rate_mbps: 400,
            min_rate_mbps: 10,
            max_rate_mbps: 0,
            initial_alpha: 1.0,
        }
    }
}

impl PaperParams {
    /// Whether every value is in its range; the error names the first that
    /// is not.
    pub fn check(&self) -> Result<(), String> {
        if !(self.g > 0.0 && self.g < 1.0) {
            return Err(format!("g {} is outside (0, 1)", self.g));
        }
        if !(0.0..=1.0).contains(&self.initial_alpha) {
            return Err(format!(
                "initial_alpha {} is outside [0, 1]",
                self.initial_alpha
            ));
        }
        let positive = [
            ("alpha_timer_us", self.alpha_timer_us),
            ("rate_timer_us", self.rate_timer_us),
            ("ai_rate_mbps", self.ai_rate_mbps),
            ("hai_rate_mbps", self.hai_rate_mbps),
            ("min_rate_mbps", self.min_rate_mbps),
        ];
        super::check_positive(&positive)?;
        super::check_rate_bounds(self.min_rate_mbps, self.max_rate_mbps)
    }
}

/// Which timer is due; at equal times they run in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    Alpha,
    Increase,
}

/// Which counter made a rate-increase event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Timer,
    Bytes,
}

/// The paper's DCQCN reaction point of one QP (see the module docs).
#[derive(Debug)]
pub struct DcqcnPaper {
    p: PaperParams,
    /// The highest and lowest rate, bits per second.
    max_bps: u64,
    min_bps: u64,
    /// Rc and Rt, bits per second.
    rc: u64,
    rt: u64,
    alpha: f64,
    /// Rate-limited (from a CNP until `release`).
    limited: bool,
    timer_stage: u32,
    byte_stage: u32,
    /// Bytes sent since the last byte-counter event or cut.
    bytes: u64,
    /// The next α decay; `None`: stopped.
    next_alpha: Option<Instant>,
    /// The next rate-increase timer event; `None`: stopped.
    next_increase: Option<Instant>,
    books: Books,
}

impl DcqcnPaper {
    /// A controller for a QP of line rate `line_bps` (0: unknown). `p`
    /// should have passed [`PaperParams::check`]; other values neither
    /// panic nor stall the timers (zero periods and rates count as 1, a
    /// NaN α as 0), though the rates they give mean little.
    pub fn new(p: &PaperParams, line_bps: u64) -> DcqcnPaper {
        let max_bps = max_rate_bps(p.max_rate_mbps, line_bps);
        DcqcnPaper {
            p: p.clone(),
            max_bps,
            min_bps: mbps(p.min_rate_mbps.max(1)).min(max_bps),
            rc: max_bps,
            rt: max_bps,
            alpha: p.initial_alpha.clamp(0.0, 1.0),
            limited: false,
            timer_stage: 0,
            byte_stage: 0,
            bytes: 0,
            next_alpha: None,
            next_increase: None,
            books: Books::default(),
        }
    }

    fn record(&mut self, at: Instant, event: TraceEvent) {
        if self.books.trace.is_on() {
            let state = self.state();
            self.books.trace.push(at, event, state);
        }
    }

    /// The earliest timer due by `now`, and when it is due.
    fn due(&self, now: Instant) -> Option<(Instant, Timer)> {
        earliest_due(
            now,
            [
                (self.next_alpha, Timer::Alpha),
                (self.next_increase, Timer::Increase),
            ],
        )
    }

    /// A CNP's rate cut at `at`.
    fn cut(&mut self, at: Instant) {
        let g = self.p.g;
        self.limited = true;
        self.rt = self.rc;
        let rc = (self.rc as f64 * (1.0 - self.alpha / 2.0)).round() as u64;
        self.rc = rc.max(self.min_bps);
        self.alpha = (1.0 - g) * self.alpha + g;
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.next_alpha = Some(at + micros(self.p.alpha_timer_us));
        self.next_increase = Some(at + micros(self.p.rate_timer_us));
        self.books.counters.rate_cuts += 1;
        self.record(at, TraceEvent::Cut);
    }

    /// One α decay, K after the last CNP or decay.
    fn decay_alpha(&mut self, at: Instant) {
        self.alpha *= 1.0 - self.p.g;
        if self.alpha.is_nan() || self.alpha < ALPHA_FLOOR {
            self.alpha = 0.0;
            self.next_alpha = None;
        } else {
            self.next_alpha = Some(at + micros(self.p.alpha_timer_us));
        }
    }

    /// One rate-increase event at `at`, made by the timer or the byte
    /// counter, judged after it bumps its own stage.
    fn increase(&mut self, at: Instant, by: Stage) {
        match by {
            Stage::Timer => self.timer_stage = self.timer_stage.saturating_add(1),
            Stage::Bytes => self.byte_stage = self.byte_stage.saturating_add(1),
        }
        let f = self.p.fast_recovery_stages;
        let (t, bc) = (self.timer_stage, self.byte_stage);
        let event = if t.max(bc) < f {
            TraceEvent::FastRecovery
        } else if t.min(bc) > f {
            let i = u64::from(t.min(bc) - f);
            let step = i.saturating_mul(mbps(self.p.hai_rate_mbps.max(1)));
            self.rt = self.rt.saturating_add(step);
            TraceEvent::HyperIncrease
        } else {
            self.rt = self.rt.saturating_add(mbps(self.p.ai_rate_mbps.max(1)));
            TraceEvent::AdditiveIncrease
        };
        self.rt = self.rt.min(self.max_bps);
        self.rc = halfway(self.rc, self.rt);
        self.books.counters.rate_increases += 1;
        self.record(at, event);
        if self.rc == self.max_bps && self.rt == self.max_bps {
            self.release();
        }
    }

    /// Back at the highest rate: not limited, no increase events.
    fn release(&mut self) {
        self.limited = false;
        self.next_increase = None;
        self.bytes = 0;
    }
}

impl RateController for DcqcnPaper {
    fn advance(&mut self, now: Instant) {
        while let Some((at, timer)) = self.due(now) {
            match timer {
                Timer::Alpha => self.decay_alpha(at),
                Timer::Increase => {
                    self.next_increase = Some(at + micros(self.p.rate_timer_us));
                    self.increase(at, Stage::Timer);
                }
            }
        }
    }

    fn on_cnp(&mut self, now: Instant) {
        self.advance(now);
        self.books.counters.rp_cnp_handled += 1;
        self.record(now, TraceEvent::Cnp);
        self.cut(now);
    }

    fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.advance(now);
        let threshold = self.p.byte_counter;
        if !self.limited || threshold == 0 {
            return;
        }
        self.bytes = self.bytes.saturating_add(bytes);
        while self.limited && self.bytes >= threshold {
            self.bytes -= threshold;
            self.increase(now, Stage::Bytes);
        }
    }

    /// `None` before the first CNP and after `release`.
    fn rate_bps(&self) -> Option<u64> {
        self.limited.then_some(self.rc)
    }

    fn next_rate_change(&self) -> Option<Instant> {
        self.next_increase
    }

    fn state(&self) -> CcState {
        CcState {
            rate_bps: self.rc,
            target_bps: self.rt,
            alpha: self.alpha,
            timer_stage: self.timer_stage,
            byte_stage: self.byte_stage,
            rtt_ns: 0,
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
    //! Expected values are worked out by hand in the comments, never by
    //! the code under test.

    use super::*;

    const G: u64 = 1_000_000_000;
    const M: u64 = 1_000_000;
    const LINE: u64 = 100 * G;

    /// `us` microseconds after an arbitrary start of 1 ms.
    fn at(us: u64) -> Instant {
        Instant::from_nanos(1_000_000 + us * 1_000)
    }

    fn just_before(t: Instant) -> Instant {
        Instant::from_nanos(t.as_nanos() - 1)
    }

    fn paper() -> DcqcnPaper {
        DcqcnPaper::new(&PaperParams::default(), LINE)
    }

    /// Rc and Rt.
    fn rates(c: &DcqcnPaper) -> (u64, u64) {
        (c.state().rate_bps, c.state().target_bps)
    }

    #[test]
    fn a_cnp_halves_the_rate_with_alpha_one() {
        let mut c = paper();
        assert_eq!(c.rate_bps(), None);
        c.on_cnp(at(0));
        // Rt = 100e9; Rc = 100e9 * (1 - 1/2) = 50e9;
        // α = (1 - 1/256) * 1 + 1/256 = 1.
        assert_eq!(c.rate_bps(), Some(50 * G));
        assert_eq!(rates(&c), (50 * G, LINE));
        assert_eq!(c.state().alpha, 1.0);
        let n = c.counters();
        assert_eq!((n.rp_cnp_handled, n.rate_cuts), (1, 1));
    }

    #[test]
    fn alpha_decays_every_55_us_without_a_cnp_and_the_next_cut_uses_it() {
        let mut c = paper();
        c.on_cnp(at(0));
        assert_eq!(c.state().alpha, 1.0);
        // K = 55 µs without a CNP: α = (1 - 1/256) α = 255/256.
        c.advance(at(55));
        assert_eq!(c.state().alpha, 255.0 / 256.0);
        // Another 55 µs: (255/256)^2 = 65025/65536.
        c.advance(at(110));
        assert_eq!(c.state().alpha, 65_025.0 / 65_536.0);
        // A CNP at 120 µs cuts with that α, then raises it:
        // Rc before = the timer's fast recoveries from 50e9 towards 100e9
        // at 55 and 110 µs: 75e9, then 87.5e9.
        // Rc = 87.5e9 * (1 - 65025/131072) = 87.5e9 * 66047/131072
        //    = 5_779_112_500_000_000 / 131072 = 44_091_129_302.98..., rounded:
        //    44_091_129_303.
        // α = (255/256) * 65025/65536 + 1/256.
        c.on_cnp(at(120));
        assert_eq!(c.rate_bps(), Some(44_091_129_303));
        let want = 255.0 / 256.0 * (65_025.0 / 65_536.0) + 1.0 / 256.0;
        assert!((c.state().alpha - want).abs() < 1e-15);
    }

    #[test]
    fn the_timer_recovers_every_55_us_four_fast_steps_then_additive() {
        let mut c = paper();
        c.on_cnp(at(0));
        c.advance(just_before(at(55)));
        assert_eq!(c.rate_bps(), Some(50 * G));
        // T = 1..4 < F = 5: fast recovery towards Rt = 100e9:
        // 75e9, 87.5e9, 93.75e9, 96.875e9.
        for (k, rc) in [
            75_000_000_000,
            87_500_000_000,
            93_750_000_000,
            96_875_000_000,
        ]
        .into_iter()
        .enumerate()
        {
            c.advance(at(55 * (k as u64 + 1)));
            assert_eq!(rates(&c), (rc, LINE));
        }
        // T = 5: additive, Rt = min(100e9 + 40e6, 100e9); Rc = 98.4375e9.
        c.advance(at(275));
        assert_eq!(rates(&c), (98_437_500_000, LINE));
        assert_eq!(c.state().timer_stage, 5);
        assert_eq!(c.counters().rate_increases, 5);
    }

    #[test]
    fn the_byte_counter_fires_every_10_mb() {
        let mut c = paper();
        c.on_cnp(at(0));
        c.on_sent(at(1), 9_999_999);
        assert_eq!(c.rate_bps(), Some(50 * G));
        // BC = 1 < 5: fast recovery, Rc = 75e9.
        c.on_sent(at(2), 1);
        assert_eq!(rates(&c), (75 * G, LINE));
        assert_eq!((c.state().byte_stage, c.state().timer_stage), (1, 0));
    }

    #[test]
    fn stages_go_fast_recovery_additive_then_hyper_by_i_times_r_hai() {
        let mut c = paper();
        c.set_trace(true);
        // Two CNPs: Rc = 50e9 then Rt = 50e9, Rc = 25e9 (α stays 1);
        // the timer restarts at +1 µs.
        c.on_cnp(at(0));
        c.on_cnp(at(1));
        assert_eq!(rates(&c), (25 * G, 50 * G));
        // 60 MB at +10 µs: six byte events with T = 0.
        // BC 1..4: fast recovery, Rc = 37.5e9, 43.75e9, 46.875e9, 48.4375e9.
        // BC 5: additive, Rt = 50.04e9, Rc = 48.4375e9 + 1.6025e9 / 2
        //       = 49_238_750_000.
        // BC 6: additive, Rt = 50.08e9, Rc = 49_238_750_000 + 841_250_000 / 2
        //       = 49_659_375_000.
        c.on_sent(at(10), 60_000_000);
        assert_eq!(rates(&c), (49_659_375_000, 50_080_000_000));
        // Timer T = 1..5 (+56 .. +276 µs), min(T, 6) <= 5: additive,
        // Rt = 50.12e9 .. 50.28e9; Rc halfway each time, rounded up:
        // 49_889_687_500, 50_024_843_750, 50_112_421_875, 50_176_210_938,
        // 50_228_105_469.
        c.advance(at(276));
        assert_eq!(rates(&c), (50_228_105_469, 50_280_000_000));
        // T = 6 (+331 µs): min(6, 6) = 6 > 5, hyper with i = 1:
        // Rt = 50.28e9 + 400e6 = 50.68e9,
        // Rc = 50_228_105_469 + ceil(451_894_531 / 2) = 50_454_052_735.
        c.advance(at(331));
        assert_eq!(rates(&c), (50_454_052_735, 50_680_000_000));
        // T = 7 (+386 µs): min(7, 6) = 6, i = 1: Rt = 51.08e9,
        // Rc = 50_454_052_735 + ceil(625_947_265 / 2) = 50_767_026_368.
        c.advance(at(386));
        assert_eq!(rates(&c), (50_767_026_368, 51_080_000_000));
        // BC = 7: min(7, 7) = 7, i = 2: Rt = 51.08e9 + 800e6 = 51.88e9,
        // Rc = 50_767_026_368 + 1_112_973_632 / 2 = 51_323_513_184.
        c.on_sent(at(390), 10_000_000);
        assert_eq!(rates(&c), (51_323_513_184, 51_880_000_000));
        let mut t = Vec::new();
        c.drain_trace(&mut t);
        let kinds: Vec<_> = t.iter().map(|r| r.event).collect();
        use TraceEvent::*;
        let mut want = vec![Cnp, Cut, Cnp, Cut];
        want.extend([FastRecovery; 4]);
        want.extend([AdditiveIncrease; 7]);
        want.extend([HyperIncrease; 3]);
        assert_eq!(kinds, want);
        assert_eq!(t[15].time, at(331));
    }

    #[test]
    fn alpha_decays_every_55_us_without_cnps() {
        let mut c = paper();
        c.on_cnp(at(0));
        c.advance(just_before(at(55)));
        assert_eq!(c.state().alpha, 1.0);
        // α = 255/256, then (255/256)^2 = 65025/65536 (both exact in f64).
        c.advance(at(55));
        assert_eq!(c.state().alpha, 0.99609375);
        c.advance(at(110));
        assert_eq!(c.state().alpha, 0.9922027587890625);
        // Meanwhile fast recovery made Rc = 87.5e9 (Rt 100e9). A CNP:
        // Rt = 87.5e9; Rc = 87.5e9 * (1 - 65025/131072)
        //   = 87.5e9 * 66047 / 131072 = 44_091_129_302.98 -> 44_091_129_303;
        // α = 255/256 * 65025/65536 + 1/256
        //   = (16_581_375 + 65_536) / 16_777_216 = 16_646_911 / 16_777_216.
        c.on_cnp(at(120));
        assert_eq!(rates(&c), (44_091_129_303, 87_500_000_000));
        assert_eq!(c.state().alpha, 16_646_911.0 / 16_777_216.0);
        // The decay timer restarted at the CNP: next at +175 µs.
        c.advance(just_before(at(175)));
        assert_eq!(c.state().alpha, 16_646_911.0 / 16_777_216.0);
        c.advance(at(175));
        assert!(c.state().alpha < 16_646_911.0 / 16_777_216.0);
    }

    #[test]
    fn cnps_drive_the_rate_down_to_the_minimum_and_no_lower() {
        let mut c = paper();
        // α stays 1, so each CNP halves Rc (f64 rounding halves away from
        // zero): 50e9, 25e9, ..., 48_828_125, 24_414_063, 12_207_032 after
        // 13; the 14th would give 6_103_516, under the 10 Mb/s floor.
        for i in 0..13 {
            c.on_cnp(at(i));
        }
        assert_eq!(c.rate_bps(), Some(12_207_032));
        for i in 13..30 {
            c.on_cnp(at(i));
            assert_eq!(c.rate_bps(), Some(10 * M));
        }
        assert_eq!(rates(&c), (10 * M, 10 * M));
    }

    #[test]
    fn trace_records_carry_their_own_times() {
        let mut c = paper();
        c.set_trace(true);
        c.on_cnp(at(0));
        c.advance(at(120));
        let mut t = Vec::new();
        c.drain_trace(&mut t);
        let events: Vec<_> = t.iter().map(|r| (r.time, r.event)).collect();
        use TraceEvent::*;
        assert_eq!(
            events,
            [
                (at(0), Cnp),
                (at(0), Cut),
                (at(55), FastRecovery),
                (at(110), FastRecovery),
            ]
        );
        // The CNP record shows the state it found, the others the state
        // after them: α decayed once by +55 µs.
        assert_eq!(t[0].state.rate_bps, LINE);
        assert_eq!(t[2].state.alpha, 0.99609375);
        assert_eq!(t[3].state.timer_stage, 2);
    }

    #[test]
    fn a_long_idle_gap_ends_unlimited_after_a_bounded_recovery() {
        let mut c = paper();
        c.on_cnp(at(0));
        c.advance(at(10_000_000));
        // Rt stays 100e9; each event halves the gap of 50e9 (a 36-bit
        // number), so 36 increases, then no limiter.
        assert_eq!(c.rate_bps(), None);
        assert_eq!(rates(&c), (LINE, LINE));
        assert_eq!(c.counters().rate_increases, 36);
        // α fell under 2^-40 after 40 ln 2 / ln(256/255) ≈ 7084 decays
        // (0.39 s) and is 0: a CNP now cuts nothing but limits the QP.
        assert_eq!(c.state().alpha, 0.0);
        c.on_cnp(at(10_000_001));
        assert_eq!(c.rate_bps(), Some(LINE));
        assert_eq!(c.state().alpha, 1.0 / 256.0);
    }

    #[test]
    fn a_long_idle_gap_from_the_minimum_rate_is_bounded_too() {
        let mut c = paper();
        for i in 0..30 {
            c.on_cnp(at(i));
        }
        // Rt climbs 40 Mb/s per 55 µs: ~2500 events reach 100 Gb/s.
        c.advance(at(10_000_000));
        assert_eq!(c.rate_bps(), None);
        assert_eq!(rates(&c), (LINE, LINE));
        assert!(c.counters().rate_increases < 3_000);
    }
}
