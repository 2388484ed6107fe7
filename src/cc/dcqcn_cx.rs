//! DCQCN as ConnectX firmware runs it: the reaction point of Zhu et al.,
//! "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM 2015),
//! with the fixed-point α, the rate-cut monitor period and the parameter
//! names and defaults of NVIDIA's "DCQCN Parameters" page (the `roce_rp`
//! sysfs names of mlx5). This is our reading of the project reference
//! (shared/reference/roce-v2.md) §C.1, §C.3 and §C.4; each rule below lives
//! in one method, named in the list.
//!
//! - **Rates** are integer bits per second, α an integer in 1/1024ths.
//!   The highest rate is `rpg_max_rate` or the line rate, the lower of the
//!   two known ones (`super::max_rate_bps`).
//! - **Not limited until the first CNP** (`first_cnp`): a QP starts at
//!   Rc = Rt = the highest rate with no rate limiter: `rate_bps` is `None`
//!   and no timer runs. The first CNP sets α to
//!   `initial_alpha_value` and either sets Rc = Rt = `rate_to_set_on_first_cnp`
//!   (if non-zero; NVIDIA: "rates (current, target) on first CNP") or cuts.
//! - **Back to unlimited** (`release`): when an increase brings both Rc and
//!   Rt to the highest rate (and no deferred cut waits), the QP drops its
//!   limiter and stops every timer; the next CNP is a first CNP again (our
//!   choice, after NVIDIA's "when receiving the first CNP for a flow").
//!   Switch `release_at_max_rate` (unverified against hardware): `false`
//!   keeps the limiter and α, as ns-3's DCQCN and Google's isekai ConnectX
//!   model do, so the next CNP cuts by the decayed α (0.24% where a
//!   released QP cuts 50%).
//! - **α** (`update_alpha`): every `dce_tcp_rtt` µs from the first CNP on,
//!   α = g·α/1024 + (1024 − g) if a CNP arrived in the period, else
//!   α = g·α/1024, with g = `dce_tcp_g` (NVIDIA's formulas), α kept in
//!   1/2^`alpha_fraction_bits` (default 20, so that truncation does not wear
//!   a small α away; unverified against hardware: isekai and NVIDIA's text
//!   keep it in 1/1024ths, `alpha_fraction_bits = 10`). The first CNP
//!   does not count for its own period: `initial_alpha_value` stands for it
//!   (as in the HPCC simulator, reference §C.4). When a period without CNPs
//!   leaves α unchanged (α reached 0, or g = 1024) the timer stops, and the
//!   next CNP restarts it with that CNP counted.
//! - **At most one cut per `rate_reduce_monitor_period`** (`later_cnp`): a CNP
//!   at least one period after the last cut cuts at once; CNPs inside the
//!   period are remembered and make one deferred cut when it ends.
//!   Switch `fixed_grid` (unverified against hardware): `true` puts the
//!   monitor periods and the α periods on fixed grids from the limiter's
//!   first CNP (one cut per grid period, a deferred one at its end; a
//!   restarted α timer keeps its phase) instead of counting from the last
//!   cut and restarting the α timer at the CNP that wakes it
//!   (`period_end`, `alpha_restart`).
//! - **Cut** (`cut`): Rt = Rc if `clamp_tgt_rate`, or a byte stage has
//!   passed, or `clamp_tgt_rate_after_time_inc` and a timer stage has
//!   passed; then cut = min(Rc·α >> `rpg_gd`, Rc·(100 − `rpg_min_dec_fac`)/100)
//!   and Rc = max(Rc − cut, `rpg_min_rate`). Every cut (and the first-CNP
//!   rate) resets both stages and the byte count and restarts the
//!   rate-increase timer (`after_cut`).
//! - **Rate-increase events** (`increase`): the timer every `rpg_time_reset`
//!   µs after the last cut, and the byte counter every `rpg_byte_reset` × 64
//!   bytes sent (0: no byte counter, our choice). The kind of an event is
//!   judged on the stages *before* the event bumps its own (as the HPCC
//!   simulator's `RateIncEventTimerMlx` does), F = `rpg_threshold`:
//!   fast recovery if max(T, BC) < F; hyper increase (Rt += `rpg_hai_rate`)
//!   if min(T, BC) > F; additive (Rt += `rpg_ai_rate`) otherwise; then
//!   Rc = (Rt + Rc)/2 rounded up (`super::halfway`), both capped at the
//!   highest rate.
//! - **Timers** (`advance`): due α updates, the deferred cut and the
//!   increase timer run in time order; at equal times α first (a cut uses
//!   the α of its instant), then the cut, then the increase (which the cut
//!   restarted). The work is bounded: the α timer stops at its fixed point
//!   and every timer stops once the QP is unlimited again, which each
//!   increase brings closer (`rpg_ai_rate` and `rpg_hai_rate` are at least
//!   1 Mb/s).

use super::{
    earlier, earliest_due, halfway, max_rate_bps, mbps, micros, Books, CcState, RateController,
    TraceEvent,
};
use crate::time::{Duration, Instant};

/// α and `dce_tcp_g` are fixed point with 10 fraction bits: 1024 is 1.
const ONE: u32 = 1024;

/// α's own unit: the parameters give α and g in 1/1024ths, but α is kept
/// in 1/2^20ths. In 1/1024ths a small α loses at least one unit to
/// truncation in every period without a CNP (5·1019/1024 is 4), so with a
/// CNP every few periods it could never rise above a few units and the
/// cuts would fade to nothing under sustained marking.
const ALPHA_ONE: u64 = 1 << 20;
/// From 1/1024ths to [`ALPHA_ONE`]ths.
const ALPHA_SHIFT: u32 = 10;

/// ConnectX DCQCN reaction-point parameters, with their mlx5 names and
/// defaults (NVIDIA "DCQCN Parameters"; reference §C.3).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CxParams {
    /// Set Rt = Rc on every cut. Default false.
    pub clamp_tgt_rate: bool,
    /// Set Rt = Rc on a cut after a timer stage has passed. Default true.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// Rate-increase timer period, µs. Default 300.
    pub rpg_time_reset: u32,
    /// Byte-counter period, in units of 64 bytes (0: no byte counter).
    /// Default 32767 (≈ 2 MiB).
    pub rpg_byte_reset: u32,
    /// Stage threshold F between fast recovery, additive and hyper
    /// increase. Default 1.
    pub rpg_threshold: u32,
    /// Highest rate, Mb/s (0: the line rate). Default 0.
    pub rpg_max_rate: u32,
    /// Additive increase of Rt, Mb/s. Default 5.
    pub rpg_ai_rate: u32,
    /// Hyper increase of Rt, Mb/s. Default 50.
    pub rpg_hai_rate: u32,
    /// Shift from α·Rc to the cut: cut = Rc·α / 2^rpg_gd with α in
    /// 1/1024ths, so 11 cuts by α/2. Default 11.
    pub rpg_gd: u32,
    /// The largest cut is Rc·(100 − rpg_min_dec_fac)/100, %. Default 50.
    pub rpg_min_dec_fac: u32,
    /// Lowest rate, Mb/s. Default 1.
    pub rpg_min_rate: u32,
    /// Rc and Rt on the first CNP, Mb/s (0: the first CNP cuts as any
    /// other). Default 0.
    pub rate_to_set_on_first_cnp: u32,
    /// α gain g, 1/1024ths: α = g·α/1024 (+ 1024 − g after a CNP).
    /// Default 1019.
    pub dce_tcp_g: u32,
    /// α update period, µs. Default 1.
    pub dce_tcp_rtt: u32,
    /// At most one cut per this period, µs. Default 4.
    pub rate_reduce_monitor_period: u32,
    /// α on the first CNP, 1/1024ths. Default 1023.
    pub initial_alpha_value: u32,
    /// Unverified: release the limiter at Rc = Rt = the highest rate (the
    /// next CNP is a first CNP). Default true.
    pub release_at_max_rate: bool,
    /// Unverified: α's fraction bits, 10..=20 (10: 1/1024ths). Default 20.
    pub alpha_fraction_bits: u32,
    /// Unverified: monitor and α periods on fixed grids from the first CNP
    /// (false: from the last cut, and from the CNP that restarts α).
    /// Default false.
    pub fixed_grid: bool,
}

impl Default for CxParams {
    fn default() -> CxParams {
        CxParams {
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rpg_time_reset: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_max_rate: 0,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
            release_at_max_rate: true,
            alpha_fraction_bits: 20,
            fixed_grid: false,
        }
    }
}

impl CxParams {
    /// Whether every value is in its range; the error names the first that
    /// is not.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("rpg_time_reset", self.rpg_time_reset),
            ("dce_tcp_rtt", self.dce_tcp_rtt),
            (
                "rate_reduce_monitor_period",
                self.rate_reduce_monitor_period,
            ),
            ("rpg_min_rate", self.rpg_min_rate),
            ("rpg_ai_rate", self.rpg_ai_rate),
            ("rpg_hai_rate", self.rpg_hai_rate),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        let at_most = [
            ("rpg_gd", self.rpg_gd, 63),
            ("rpg_min_dec_fac", self.rpg_min_dec_fac, 100),
            ("dce_tcp_g", self.dce_tcp_g, ONE),
            ("initial_alpha_value", self.initial_alpha_value, ONE),
        ];
        if let Some((name, v, max)) = at_most.iter().find(|(_, v, max)| v > max) {
            return Err(format!("{name} {v} is above its maximum {max}"));
        }
        if !(10..=20).contains(&self.alpha_fraction_bits) {
            return Err(format!(
                "alpha_fraction_bits {} is outside 10..=20",
                self.alpha_fraction_bits
            ));
        }
        if self.rpg_max_rate != 0 && self.rpg_max_rate < self.rpg_min_rate {
            return Err(format!(
                "rpg_max_rate {} is below rpg_min_rate {}",
                self.rpg_max_rate, self.rpg_min_rate
            ));
        }
        Ok(())
    }
}

/// Which timer is due; at equal times they run in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    Alpha,
    DeferredCut,
    Increase,
}

/// Which counter made a rate-increase event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Timer,
    Bytes,
}

/// The ConnectX DCQCN reaction point of one QP (see the module docs).
#[derive(Debug)]
pub struct DcqcnCx {
    p: CxParams,
    /// The highest and lowest rate, bits per second.
    max_bps: u64,
    min_bps: u64,
    /// Rc and Rt, bits per second.
    rc: u64,
    rt: u64,
    /// α in 1/2^20ths ([`ALPHA_ONE`]); 0 until the first CNP.
    alpha: u64,
    /// A rate limiter is in use (from a first CNP until `release`).
    limited: bool,
    timer_stage: u32,
    byte_stage: u32,
    /// Bytes sent since the last byte-counter event or cut.
    bytes: u64,
    /// The next α update; `None`: stopped.
    next_alpha: Option<Instant>,
    /// A CNP arrived in the current α period.
    cnp_in_alpha_period: bool,
    /// When the last cut was made.
    last_cut: Option<Instant>,
    /// A CNP arrived within the monitor period of the last cut.
    cut_deferred: bool,
    /// The next rate-increase timer event; `None`: stopped.
    next_increase: Option<Instant>,
    /// The limiter's first CNP: the origin of the fixed grids.
    origin: Option<Instant>,
    books: Books,
}

impl DcqcnCx {
    /// A controller for a QP of line rate `line_bps` (0: unknown). `p`
    /// should have passed [`CxParams::check`]; out-of-range values are
    /// clamped into range where they are used (zero periods and rates
    /// count as 1), so they neither panic nor stall the timers.
    pub fn new(p: &CxParams, line_bps: u64) -> DcqcnCx {
        let max_bps = max_rate_bps(p.rpg_max_rate, line_bps);
        DcqcnCx {
            p: p.clone(),
            max_bps,
            min_bps: mbps(p.rpg_min_rate.max(1)).min(max_bps),
            rc: max_bps,
            rt: max_bps,
            alpha: 0,
            limited: false,
            timer_stage: 0,
            byte_stage: 0,
            bytes: 0,
            next_alpha: None,
            cnp_in_alpha_period: false,
            last_cut: None,
            cut_deferred: false,
            next_increase: None,
            origin: None,
            books: Books::default(),
        }
    }

    fn monitor_period(&self) -> Duration {
        micros(self.p.rate_reduce_monitor_period)
    }

    /// The first multiple of `period` from the grid's origin after `t`.
    fn next_on_grid(&self, t: Instant, period: Duration) -> Instant {
        let origin = self.origin.unwrap_or(t);
        let p = period.as_nanos().max(1);
        let k = t.saturating_since(origin).as_nanos() / p + 1;
        origin + Duration::from_nanos(k * p)
    }

    /// When the monitor period of a cut made at `cut` ends.
    fn period_end(&self, cut: Instant) -> Instant {
        if self.p.fixed_grid {
            self.next_on_grid(cut, self.monitor_period())
        } else {
            cut + self.monitor_period()
        }
    }

    /// When a stopped α timer, woken by a CNP at `now`, next runs.
    fn alpha_restart(&self, now: Instant) -> Instant {
        let period = micros(self.p.dce_tcp_rtt);
        if self.p.fixed_grid {
            self.next_on_grid(now, period)
        } else {
            now + period
        }
    }

    /// α truncated to `alpha_fraction_bits`.
    fn truncate_alpha(&self, alpha: u64) -> u64 {
        let drop = 20 - self.p.alpha_fraction_bits.clamp(10, 20);
        alpha >> drop << drop
    }

    /// Bytes per byte-counter event; 0: no byte counter.
    fn byte_threshold(&self) -> u64 {
        u64::from(self.p.rpg_byte_reset) * 64
    }

    fn record(&mut self, at: Instant, event: TraceEvent) {
        if self.books.trace.is_on() {
            let state = self.state();
            self.books.trace.push(at, event, state);
        }
    }

    /// The earliest timer due by `now`, and when it is due.
    fn due(&self, now: Instant) -> Option<(Instant, Timer)> {
        // Most calls (one or two a packet sent) find nothing due: say so
        // before working out when a deferred cut is.
        let pending = |t: Option<Instant>| t.is_some_and(|t| t <= now);
        if !self.cut_deferred && !pending(self.next_alpha) && !pending(self.next_increase) {
            return None;
        }
        earliest_due(
            now,
            [
                (self.next_alpha, Timer::Alpha),
                (self.deferred_cut_at(), Timer::DeferredCut),
                (self.next_increase, Timer::Increase),
            ],
        )
    }

    /// When a cut held back to the end of its period is due.
    fn deferred_cut_at(&self) -> Option<Instant> {
        match (self.cut_deferred, self.last_cut) {
            (true, Some(c)) => Some(self.period_end(c)),
            _ => None,
        }
    }

    /// The first CNP of a rate limiter: α starts at `initial_alpha_value`
    /// (the α timer with it, this CNP not counted), then the rates are set
    /// to `rate_to_set_on_first_cnp` or cut.
    fn first_cnp(&mut self, now: Instant) {
        self.limited = true;
        self.origin = Some(now);
        self.alpha = u64::from(self.p.initial_alpha_value.min(ONE)) << ALPHA_SHIFT;
        self.cnp_in_alpha_period = false;
        self.next_alpha = Some(now + micros(self.p.dce_tcp_rtt));
        match mbps(self.p.rate_to_set_on_first_cnp) {
            0 => self.cut(now),
            r => {
                self.rc = r.clamp(self.min_bps, self.max_bps);
                self.rt = self.rc;
                self.after_cut(now);
            }
        }
    }

    /// A later CNP counts for the α period (restarting a stopped α timer)
    /// and cuts now, or once the monitor period of the last cut is over.
    fn later_cnp(&mut self, now: Instant) {
        self.cnp_in_alpha_period = true;
        if self.next_alpha.is_none() {
            self.next_alpha = Some(self.alpha_restart(now));
        }
        let in_period = self.last_cut.is_some_and(|c| now < self.period_end(c));
        if in_period {
            self.cut_deferred = true;
        } else {
            self.cut(now);
        }
    }

    /// One α update at its period's end.
    fn update_alpha(&mut self, at: Instant) {
        let g = self.p.dce_tcp_g.min(ONE);
        let decayed = u64::from(g) * self.alpha / u64::from(ONE);
        let decayed = self.truncate_alpha(decayed);
        if self.cnp_in_alpha_period {
            self.alpha = decayed + (u64::from(ONE - g) << ALPHA_SHIFT);
            self.cnp_in_alpha_period = false;
        } else if decayed == self.alpha {
            // A fixed point: later periods without CNPs change nothing.
            self.next_alpha = None;
            return;
        } else {
            self.alpha = decayed;
        }
        self.next_alpha = Some(at + micros(self.p.dce_tcp_rtt));
    }

    /// Whether a cut sets Rt = Rc first.
    fn clamps_target(&self) -> bool {
        self.p.clamp_tgt_rate
            || self.byte_stage > 0
            || (self.p.clamp_tgt_rate_after_time_inc && self.timer_stage > 0)
    }

    /// A rate cut at `at`.
    fn cut(&mut self, at: Instant) {
        if self.clamps_target() {
            self.rt = self.rc;
        }
        let rc = u128::from(self.rc);
        let by_alpha = (rc * u128::from(self.alpha)) >> (self.p.rpg_gd.min(63) + ALPHA_SHIFT);
        let largest = rc * u128::from(100 - self.p.rpg_min_dec_fac.min(100)) / 100;
        // Both are at most Rc, so the cut fits a u64.
        let cut = by_alpha.min(largest) as u64;
        self.rc = self.rc.saturating_sub(cut).max(self.min_bps);
        self.after_cut(at);
    }

    /// What every cut resets: the stages, the byte count, the increase
    /// timer and the monitor period.
    fn after_cut(&mut self, at: Instant) {
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.next_increase = Some(at + micros(self.p.rpg_time_reset));
        self.last_cut = Some(at);
        self.cut_deferred = false;
        self.books.counters.rate_cuts += 1;
        self.record(at, TraceEvent::Cut);
    }

    /// One rate-increase event at `at`, made by the timer or the byte
    /// counter, judged on the stages before it bumps its own.
    fn increase(&mut self, at: Instant, by: Stage) {
        let f = self.p.rpg_threshold;
        let (t, bc) = (self.timer_stage, self.byte_stage);
        let event = if t.max(bc) < f {
            TraceEvent::FastRecovery
        } else if t.min(bc) > f {
            self.rt = self.rt.saturating_add(mbps(self.p.rpg_hai_rate.max(1)));
            TraceEvent::HyperIncrease
        } else {
            self.rt = self.rt.saturating_add(mbps(self.p.rpg_ai_rate.max(1)));
            TraceEvent::AdditiveIncrease
        };
        self.rt = self.rt.min(self.max_bps);
        self.rc = halfway(self.rc, self.rt);
        match by {
            Stage::Timer => self.timer_stage = t.saturating_add(1),
            Stage::Bytes => self.byte_stage = bc.saturating_add(1),
        }
        self.books.counters.rate_increases += 1;
        self.record(at, event);
        if self.rc == self.max_bps
            && self.rt == self.max_bps
            && !self.cut_deferred
            && self.p.release_at_max_rate
        {
            self.release();
        }
    }

    /// Back at the highest rate: no limiter, no timers.
    fn release(&mut self) {
        self.limited = false;
        self.next_alpha = None;
        self.next_increase = None;
        self.bytes = 0;
    }
}

impl RateController for DcqcnCx {
    fn advance(&mut self, now: Instant) {
        while let Some((at, timer)) = self.due(now) {
            match timer {
                Timer::Alpha => {
                    // α periods come every few microseconds and change
                    // nothing else: run all of them due before the next
                    // other timer (α first at a tie, as in `due`) here.
                    let until = self.next_rate_change().map_or(now, |t| t.min(now));
                    self.update_alpha(at);
                    while let Some(t) = self.next_alpha.filter(|&t| t <= until) {
                        self.update_alpha(t);
                    }
                }
                Timer::DeferredCut => self.cut(at),
                Timer::Increase => {
                    self.next_increase = Some(at + micros(self.p.rpg_time_reset));
                    self.increase(at, Stage::Timer);
                }
            }
        }
    }

    fn on_cnp(&mut self, now: Instant) {
        self.advance(now);
        self.books.counters.rp_cnp_handled += 1;
        self.record(now, TraceEvent::Cnp);
        if self.limited {
            self.later_cnp(now);
        } else {
            self.first_cnp(now);
        }
    }

    fn on_sent(&mut self, now: Instant, bytes: u64) {
        self.advance(now);
        let threshold = self.byte_threshold();
        if !self.limited || threshold == 0 {
            return;
        }
        self.bytes = self.bytes.saturating_add(bytes);
        while self.limited && self.bytes >= threshold {
            self.bytes -= threshold;
            self.increase(now, Stage::Bytes);
        }
    }

    /// `None` while no rate limiter is in use (before the first CNP and
    /// after `release`).
    fn rate_bps(&self) -> Option<u64> {
        self.limited.then_some(self.rc)
    }

    fn next_rate_change(&self) -> Option<Instant> {
        earlier(self.deferred_cut_at(), self.next_increase)
    }

    fn state(&self) -> CcState {
        CcState {
            rate_bps: self.rc,
            target_bps: self.rt,
            alpha: self.alpha as f64 / ALPHA_ONE as f64,
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
    use crate::cc::CcCounters;

    const G: u64 = 1_000_000_000;
    const M: u64 = 1_000_000;
    const LINE: u64 = 100 * G;

    /// `us` microseconds after an arbitrary start of 1 ms.
    fn at(us: u64) -> Instant {
        Instant::from_nanos(1_000_000 + us * 1_000)
    }

    fn cx(p: CxParams) -> DcqcnCx {
        DcqcnCx::new(&p, LINE)
    }

    /// Rc and Rt.
    fn rates(c: &DcqcnCx) -> (u64, u64) {
        (c.state().rate_bps, c.state().target_bps)
    }

    /// Parameters whose α stays at its initial 1023 for a second.
    fn steady_alpha() -> CxParams {
        CxParams {
            dce_tcp_rtt: 1_000_000,
            ..CxParams::default()
        }
    }

    #[test]
    fn nothing_is_limited_before_the_first_cnp() {
        let mut c = cx(CxParams::default());
        c.on_sent(at(0), 100_000_000);
        c.advance(at(10_000));
        assert_eq!(c.rate_bps(), None);
        assert_eq!(rates(&c), (LINE, LINE));
        assert_eq!(*c.counters(), CcCounters::default());
    }

    #[test]
    fn the_first_cnp_cuts_by_about_half() {
        let mut c = cx(CxParams::default());
        c.on_cnp(at(0));
        // α = 1023. cut = min(100e9 * 1023 >> 11, 100e9 * 50 / 100)
        //              = min(102_300e9 / 2048 = 49_951_171_875, 50e9)
        // Rc = 100e9 - 49_951_171_875 = 50_048_828_125; Rt stays (no stage).
        assert_eq!(c.rate_bps(), Some(50_048_828_125));
        assert_eq!(rates(&c), (50_048_828_125, LINE));
        assert_eq!(c.state().alpha, 1023.0 / 1024.0);
        let n = c.counters();
        assert_eq!((n.rp_cnp_handled, n.rate_cuts, n.rate_increases), (1, 1, 0));
    }

    #[test]
    fn the_timer_recovers_every_300_us_fast_then_additive() {
        let mut c = cx(CxParams::default());
        c.on_cnp(at(0));
        c.advance(Instant::from_nanos(at(300).as_nanos() - 1));
        assert_eq!(c.rate_bps(), Some(50_048_828_125));
        // T = 0 < F = 1: fast recovery, Rc = 50_048_828_125 + ceil(49_951_171_875 / 2)
        //                                  = 50_048_828_125 + 24_975_585_938
        c.advance(at(300));
        assert_eq!(rates(&c), (75_024_414_063, LINE));
        assert_eq!(c.state().timer_stage, 1);
        // T = 1 = F: additive, Rt = min(100e9 + 5e6, 100e9) = 100e9,
        // Rc = 75_024_414_063 + ceil(24_975_585_937 / 2) = + 12_487_792_969
        c.advance(at(600));
        assert_eq!(rates(&c), (87_512_207_032, LINE));
        assert_eq!(c.state().timer_stage, 2);
        assert_eq!(c.counters().rate_increases, 2);
    }

    #[test]
    fn the_byte_counter_fires_every_32767_times_64_bytes() {
        let mut c = cx(CxParams::default());
        c.on_cnp(at(0));
        // 32767 * 64 = 2_097_088 bytes.
        c.on_sent(at(1), 2_097_087);
        assert_eq!(c.rate_bps(), Some(50_048_828_125));
        c.on_sent(at(2), 1);
        // BC = 0, T = 0: fast recovery, as for the timer above.
        assert_eq!(rates(&c), (75_024_414_063, LINE));
        assert_eq!((c.state().byte_stage, c.state().timer_stage), (1, 0));
        // Two more thresholds in one go: two additive steps (T = 0, BC = 1
        // then 2: max >= F, min = 0 <= F).
        // Rc = 75_024_414_063 + 12_487_792_969 = 87_512_207_032
        // Rc = 87_512_207_032 + ceil(12_487_792_968 / 2) = + 6_243_896_484
        c.on_sent(at(3), 2 * 2_097_088);
        assert_eq!(rates(&c), (93_756_103_516, LINE));
        assert_eq!(c.state().byte_stage, 3);
    }

    #[test]
    fn stages_go_fast_recovery_additive_then_hyper() {
        // The first CNP sets Rc = Rt = 10 Gb/s, so Rt's steps show.
        let mut c = cx(CxParams {
            rate_to_set_on_first_cnp: 10_000,
            ..CxParams::default()
        });
        c.set_trace(true);
        c.on_cnp(at(0));
        assert_eq!(rates(&c), (10 * G, 10 * G));
        // +300 µs, T = 0, BC = 0: fast recovery, Rc = (10e9 + 10e9) / 2.
        c.advance(at(300));
        assert_eq!(rates(&c), (10 * G, 10 * G));
        // Bytes, T = 1, BC = 0: additive. Rt = 10e9 + 5e6 = 10_005_000_000,
        // Rc = 10e9 + 5e6 / 2 = 10_002_500_000.
        c.on_sent(at(310), 2_097_088);
        assert_eq!(rates(&c), (10_002_500_000, 10_005_000_000));
        // +600 µs, T = 1, BC = 1: additive. Rt = 10_010_000_000,
        // Rc = 10_002_500_000 + 7_500_000 / 2 = 10_006_250_000.
        c.advance(at(600));
        assert_eq!(rates(&c), (10_006_250_000, 10_010_000_000));
        // Bytes, T = 2, BC = 1: additive. Rt = 10_015_000_000,
        // Rc = 10_006_250_000 + 8_750_000 / 2 = 10_010_625_000.
        c.on_sent(at(610), 2_097_088);
        assert_eq!(rates(&c), (10_010_625_000, 10_015_000_000));
        // +900 µs, T = 2, BC = 2, both > F: hyper. Rt = 10_015e6 + 50e6
        // = 10_065_000_000, Rc = 10_010_625_000 + 54_375_000 / 2
        // = 10_037_812_500.
        c.advance(at(900));
        assert_eq!(rates(&c), (10_037_812_500, 10_065_000_000));
        let mut t = Vec::new();
        c.drain_trace(&mut t);
        let events: Vec<_> = t.iter().map(|r| (r.time, r.event)).collect();
        use TraceEvent::*;
        assert_eq!(
            events,
            [
                (at(0), Cnp),
                (at(0), Cut),
                (at(300), FastRecovery),
                (at(310), AdditiveIncrease),
                (at(600), AdditiveIncrease),
                (at(610), AdditiveIncrease),
                (at(900), HyperIncrease),
            ]
        );
    }

    #[test]
    fn alpha_decays_every_microsecond_and_rises_after_a_cnp() {
        let mut c = cx(CxParams::default());
        c.on_cnp(at(0));
        // α is kept in 1/2^20ths: 1023/1024 is 1_047_552.
        let alpha = |c: &DcqcnCx| (c.state().alpha * 1_048_576.0) as u64;
        assert_eq!(alpha(&c), 1_047_552);
        // No CNP: α = 1019 α / 1024 = 1_067_455_488 / 1024 = 1_042_437.
        c.advance(at(1));
        assert_eq!(alpha(&c), 1_042_437);
        // 1019 * 1_042_437 = 1_062_243_303, / 1024 = 1_037_346 (truncated).
        c.advance(at(2));
        assert_eq!(alpha(&c), 1_037_346);
        // A CNP in (2, 3] µs (its cut is deferred to +4 µs):
        // α = 1019 * 1_037_346 / 1024 + (1024 - 1019) * 1024
        //   = 1_057_055_574 / 1024 + 5120 = 1_032_280 + 5120 = 1_037_400.
        c.on_cnp(Instant::from_nanos(at(2).as_nanos() + 500));
        c.advance(at(3));
        assert_eq!(alpha(&c), 1_037_400);
        // +4 µs: α = 1019 * 1_037_400 / 1024 = 1_032_334 first, then the
        // deferred cut uses it (α >> 10 more for its 1/2^20ths):
        // cut = min(50_048_828_125 * 1_032_334 >> 21, 50_048_828_125 * 50 / 100)
        //     = min(24_636_796_442, 25_024_414_062)
        // Rc = 50_048_828_125 - 24_636_796_442 = 25_412_031_683.
        c.advance(at(4));
        assert_eq!(alpha(&c), 1_032_334);
        assert_eq!(c.rate_bps(), Some(25_412_031_683));
    }

    #[test]
    fn at_most_one_cut_per_monitor_period() {
        let mut c = cx(CxParams::default());
        c.set_trace(true);
        c.on_cnp(at(0));
        c.on_cnp(at(1));
        c.on_cnp(at(2));
        // Both later CNPs wait for the period's end at +4 µs.
        c.advance(Instant::from_nanos(at(4).as_nanos() - 1));
        assert_eq!(c.rate_bps(), Some(50_048_828_125));
        assert_eq!(c.counters().rate_cuts, 1);
        // α in 1/2^20ths from 1023 * 1024 = 1_047_552: +1 µs none:
        // 1019 * 1_047_552 / 1024 = 1_042_437 (the CNP at +1 µs comes after
        // that update); +2 µs CNP: 1019 * 1_042_437 / 1024 + 5 * 1024 =
        // 1_037_346 + 5120 = 1_042_466 (the CNP at +2 µs again after it);
        // +3 µs CNP: 1_037_375 + 5120 = 1_042_495; +4 µs none: 1_037_404.
        // cut = 50_048_828_125 * 1_037_404 >> 21 = 24_757_792_707
        //     (< 25_024_414_062)
        // Rc = 50_048_828_125 - 24_757_792_707 = 25_291_035_418.
        c.advance(at(4));
        assert_eq!(c.rate_bps(), Some(25_291_035_418));
        // A CNP at +7 µs, inside the period of the cut at +4 µs, waits
        // for +8 µs; one at +20 µs cuts at once.
        c.on_cnp(at(7));
        c.advance(at(7));
        assert_eq!(c.counters().rate_cuts, 2);
        c.on_cnp(at(20));
        assert_eq!(c.counters().rate_cuts, 4);
        let n = c.counters();
        assert_eq!((n.rp_cnp_handled, n.rate_cuts), (5, 4));
        let mut t = Vec::new();
        c.drain_trace(&mut t);
        let cuts: Vec<_> = t
            .iter()
            .filter(|r| r.event == TraceEvent::Cut)
            .map(|r| r.time)
            .collect();
        assert_eq!(cuts, [at(0), at(4), at(8), at(20)]);
    }

    #[test]
    fn cnps_drive_the_rate_down_to_the_minimum_and_no_lower() {
        let mut c = cx(CxParams {
            clamp_tgt_rate: true,
            ..steady_alpha()
        });
        // α stays 1023, so each cut keeps Rc - floor(Rc * 1023 / 2048), a
        // little over half: 100e9, 50_048_828_125, ..., 3_096_769 and
        // 1_549_897 after 16 cuts; the 17th would leave 775_583, under
        // the 1 Mb/s floor.
        for i in 0..16 {
            c.on_cnp(at(10 * i));
        }
        assert_eq!(c.rate_bps(), Some(1_549_897));
        c.on_cnp(at(160));
        assert_eq!(rates(&c), (M, 1_549_897));
        for i in 17..40 {
            c.on_cnp(at(10 * i));
            assert_eq!(rates(&c), (M, M));
        }
        assert_eq!(c.counters().rate_cuts, 40);
    }

    #[test]
    fn rpg_min_dec_fac_bounds_a_cut_and_rpg_gd_scales_it() {
        let mut c = cx(CxParams {
            rpg_min_dec_fac: 90,
            ..CxParams::default()
        });
        c.on_cnp(at(0));
        // min(49_951_171_875, 100e9 * (100 - 90) / 100 = 10e9): Rc = 90e9.
        assert_eq!(c.rate_bps(), Some(90 * G));
        let mut c = cx(CxParams {
            rpg_gd: 12,
            ..CxParams::default()
        });
        c.on_cnp(at(0));
        // 100e9 * 1023 >> 12 = 102_300e9 / 4096 = 24_975_585_937 (.5 dropped).
        assert_eq!(c.rate_bps(), Some(100 * G - 24_975_585_937));
    }

    #[test]
    fn rate_to_set_on_first_cnp_sets_both_rates_and_only_once() {
        let mut c = cx(CxParams {
            rate_to_set_on_first_cnp: 25_000,
            ..steady_alpha()
        });
        c.on_cnp(at(0));
        assert_eq!(rates(&c), (25 * G, 25 * G));
        assert_eq!(c.counters().rate_cuts, 1);
        // A later CNP cuts: 25e9 - min(25e9 * 1023 >> 11, 12.5e9)
        // = 25e9 - 25_575e9 / 2048 = 25e9 - 12_487_792_968 = 12_512_207_032.
        c.on_cnp(at(10));
        assert_eq!(c.rate_bps(), Some(12_512_207_032));
    }

    /// Two cuts, a fast recovery, a third cut; returns Rt after the second
    /// and after the third cut.
    fn targets_around_a_timer_stage(p: CxParams) -> (u64, u64) {
        let mut c = cx(p);
        c.on_cnp(at(0));
        c.on_cnp(at(10));
        let second = c.state().target_bps;
        // Timer at +310 µs (300 after the second cut): fast recovery.
        c.advance(at(310));
        assert_eq!(c.state().timer_stage, 1);
        c.on_cnp(at(320));
        (second, c.state().target_bps)
    }

    #[test]
    fn by_default_the_target_is_clamped_only_after_a_timer_stage() {
        // Cut 1: Rc = 50_048_828_125. Cut 2 (no stage, Rt stays 100e9):
        // Rc = 50_048_828_125 - (50_048_828_125 * 1023 >> 11 = 24_999_976_158)
        //    = 25_048_851_967.
        // Fast recovery: Rc = 25_048_851_967 + ceil(74_951_148_033 / 2)
        //    = 62_524_425_984, which cut 3 clamps Rt to.
        let got = targets_around_a_timer_stage(steady_alpha());
        assert_eq!(got, (LINE, 62_524_425_984));
    }

    #[test]
    fn clamp_tgt_rate_clamps_on_every_cut() {
        let got = targets_around_a_timer_stage(CxParams {
            clamp_tgt_rate: true,
            ..steady_alpha()
        });
        // Cut 2 sets Rt to Rc after cut 1, 50_048_828_125, and leaves
        // Rc = 25_048_851_967 (as above). Fast recovery towards that Rt:
        // Rc = 25_048_851_967 + 24_999_976_158 / 2 = 37_548_840_046,
        // which cut 3 clamps Rt to.
        assert_eq!(got, (50_048_828_125, 37_548_840_046));
    }

    #[test]
    fn without_clamp_after_time_inc_only_a_byte_stage_clamps() {
        let p = CxParams {
            clamp_tgt_rate_after_time_inc: false,
            ..steady_alpha()
        };
        assert_eq!(targets_around_a_timer_stage(p.clone()), (LINE, LINE));
        let mut c = cx(p);
        c.on_cnp(at(0));
        // A byte stage (fast recovery to 75_024_414_063), then a cut.
        c.on_sent(at(5), 2_097_088);
        c.on_cnp(at(10));
        assert_eq!(c.state().target_bps, 75_024_414_063);
    }

    #[test]
    fn trace_records_carry_their_own_times() {
        let mut c = cx(CxParams::default());
        c.set_trace(true);
        c.on_cnp(at(0));
        c.on_cnp(at(1));
        // One call runs the deferred cut (+4 µs) and the fast recovery
        // 300 µs after it, at their own times.
        c.advance(at(1_000));
        let mut t = Vec::new();
        c.drain_trace(&mut t);
        let events: Vec<_> = t.iter().map(|r| (r.time, r.event)).collect();
        use TraceEvent::*;
        assert_eq!(
            &events[..5],
            [
                (at(0), Cnp),
                (at(0), Cut),
                (at(1), Cnp),
                (at(4), Cut),
                (at(304), FastRecovery),
            ]
        );
        // The state after the first cut; the CNP record shows it found.
        assert_eq!(t[0].state.rate_bps, LINE);
        assert_eq!(t[1].state.rate_bps, 50_048_828_125);
        assert_eq!(t[4].state.timer_stage, 1);
        // Then additive increases at +604 and +904 µs; a second drain
        // finds nothing new.
        assert_eq!(t.len(), 7);
        c.drain_trace(&mut t);
        assert_eq!(t.len(), 7);
    }

    #[test]
    fn a_long_idle_gap_ends_unlimited_after_a_bounded_recovery() {
        let mut c = cx(CxParams::default());
        c.on_cnp(at(0));
        c.advance(at(10_000_000));
        // Rt stays 100e9; each event halves the gap 49_951_171_875 (rounding
        // Rc up, the gap down), which is 36 bits long: 36 increases, the
        // last at 36 * 300 µs, then no limiter.
        assert_eq!(c.rate_bps(), None);
        assert_eq!(rates(&c), (LINE, LINE));
        assert_eq!(c.counters().rate_increases, 36);
        // The next CNP is a first CNP again (α = 1023, the same cut).
        c.on_cnp(at(10_000_001));
        assert_eq!(c.rate_bps(), Some(50_048_828_125));
    }

    #[test]
    fn a_long_idle_gap_from_the_minimum_rate_is_bounded_too() {
        let mut c = cx(CxParams {
            clamp_tgt_rate: true,
            ..CxParams::default()
        });
        for i in 0..30 {
            c.on_cnp(at(4 * i));
        }
        // Rt climbs 5 Mb/s per 300 µs: ~20_000 events reach 100 Gb/s,
        // well within 10 s (33_333 timer periods).
        c.advance(at(10_000_000));
        assert_eq!(c.rate_bps(), None);
        assert_eq!(rates(&c), (LINE, LINE));
        assert!(c.counters().rate_increases < 33_333);
    }

    #[test]
    fn unchecked_zero_increases_still_climb_by_1_mbps() {
        let mut c = cx(CxParams {
            rate_to_set_on_first_cnp: 10_000,
            rpg_ai_rate: 0,
            rpg_hai_rate: 0,
            ..CxParams::default()
        });
        c.on_cnp(at(0));
        // +300 µs fast recovery (no change), +600 µs additive:
        // Rt = 10e9 + 1e6, Rc = 10e9 + 1e6 / 2.
        c.advance(at(600));
        assert_eq!(rates(&c), (10_000_500_000, 10_001_000_000));
    }

    #[test]
    fn an_unknown_line_rate_uses_rpg_max_rate_or_400_gbps() {
        let c = DcqcnCx::new(&CxParams::default(), 0);
        assert_eq!(c.state().rate_bps, 400 * G);
        let p = CxParams {
            rpg_max_rate: 40_000,
            ..CxParams::default()
        };
        assert_eq!(DcqcnCx::new(&p, 0).state().rate_bps, 40 * G);
        assert_eq!(DcqcnCx::new(&p, 25 * G).state().rate_bps, 25 * G);
    }

    // The unverified rules, each behind a switch whose default is the rule
    // above (shared/reference §C.4 lists what has no public source).

    #[test]
    fn released_at_the_highest_rate_the_next_cnp_is_a_first_one_unless_kept() {
        // The first CNP sets Rc = Rt = 100 Gb/s; the first increase (fast
        // recovery, at 300 µs) finds both at the highest rate.
        let p = CxParams {
            rate_to_set_on_first_cnp: 100_000,
            ..steady_alpha()
        };
        let mut released = cx(p.clone());
        released.on_cnp(at(0));
        released.advance(at(300));
        assert_eq!(released.rate_bps(), None, "released");
        // The next CNP is a first CNP: the rates are set again, no cut.
        released.on_cnp(at(400));
        assert_eq!(released.rate_bps(), Some(LINE));
        let mut kept = cx(CxParams {
            release_at_max_rate: false,
            ..p
        });
        kept.on_cnp(at(0));
        kept.advance(at(300));
        assert_eq!(kept.rate_bps(), Some(LINE), "the limiter stays");
        // A later CNP, 400 µs after the last cut: it cuts with the α it
        // kept (1023, steady): Rc = 100e9 − 49_951_171_875.
        kept.on_cnp(at(400));
        assert_eq!(kept.rate_bps(), Some(50_048_828_125));
    }

    #[test]
    fn alpha_in_1024ths_truncates_each_update() {
        // One period without a CNP from α = 1023/1024, g = 1019:
        // 1/2^20: 1019·1023·1024/1024 = 1_042_437 (of 2^20);
        // 1/1024: floor(1019·1023/1024) = floor(1018.0048) = 1018 (of 1024).
        let mut fine = cx(CxParams::default());
        fine.on_cnp(at(0));
        fine.advance(at(1));
        assert_eq!(fine.state().alpha, 1_042_437.0 / (1u64 << 20) as f64);
        let mut coarse = cx(CxParams {
            alpha_fraction_bits: 10,
            ..CxParams::default()
        });
        coarse.on_cnp(at(0));
        coarse.advance(at(1));
        assert_eq!(coarse.state().alpha, 1018.0 / 1024.0);
    }

    #[test]
    fn on_a_fixed_grid_a_deferred_cut_comes_at_the_grid_periods_end() {
        // Cuts at 0 (first CNP) and 5 µs (past the 4 µs period either
        // way); a CNP at 6 µs is deferred to the end of the period of the
        // cut at 5: 9 µs counted from that cut, 8 µs on the grid from 0.
        let run = |fixed_grid| {
            let mut c = cx(CxParams {
                fixed_grid,
                ..steady_alpha()
            });
            c.on_cnp(at(0));
            c.on_cnp(at(5));
            c.on_cnp(at(6));
            c.advance(at(8));
            let at_8 = c.counters().rate_cuts;
            c.advance(at(9));
            (at_8, c.counters().rate_cuts)
        };
        assert_eq!(run(false), (2, 3));
        assert_eq!(run(true), (3, 3));
    }

    #[test]
    fn on_a_fixed_grid_a_restarted_alpha_timer_keeps_its_phase() {
        // g = 1024: α does not move without CNPs, so its timer stops at
        // the first quiet period's end (10 µs). A CNP at 13 µs restarts
        // it: at 23 µs from that CNP, at 20 µs on the grid from 0.
        let run = |fixed_grid| {
            let mut c = cx(CxParams {
                fixed_grid,
                dce_tcp_g: 1024,
                dce_tcp_rtt: 10,
                ..CxParams::default()
            });
            c.on_cnp(at(0));
            c.advance(at(10));
            assert_eq!(c.next_alpha, None);
            c.on_cnp(at(13));
            c.next_alpha
        };
        assert_eq!(run(false), Some(at(23)));
        assert_eq!(run(true), Some(at(20)));
    }

    #[test]
    fn alpha_fraction_bits_outside_10_to_20_is_named() {
        let p = CxParams {
            alpha_fraction_bits: 9,
            ..CxParams::default()
        };
        assert!(p.check().unwrap_err().contains("alpha_fraction_bits 9"));
    }
}
