//! TIMELY: RTT-gradient rate control (Mittal et al., "TIMELY: RTT-based
//! Congestion Control for the Datacenter", SIGCOMM 2015), and its patched
//! form from Zhu et al., "ECN or Delay: Lessons Learnt from Analysis of
//! DCQCN and TIMELY" (CoNEXT 2016, §5), which gives the flows one fixed
//! point and so fairness. Each rule lives in one method, named below.
//!
//! - **Input**: one RTT sample per completion event (`on_ack`): the
//!   original measures a whole segment (16 KB in §6) from its send to its
//!   completion. Here a completion event is every `segment_bytes`
//!   acknowledged, and its RTT is the sample of the acknowledgement that
//!   completes it (the transport's send log; a resent packet timed from
//!   its latest sending) less the
//!   serialisation of the packet timed (§3.1: RTT excludes the time to put
//!   the segment on the wire at line rate). Samples below `min_rtt_us`
//!   are taken as `min_rtt_us` (the normalisation base, minRTT of §4.2).
//! - **Gradient** (`gradient`, Algorithm 1): rtt_diff = (1 − α)·rtt_diff
//!   + α·(rtt − prev_rtt); the normalised gradient is rtt_diff / minRTT.
//! - **Original** (`update_original`, Algorithm 1): rtt < T_low: rate +=
//!   δ; rtt > T_high: rate ·= 1 − β·(1 − T_high/rtt); else a gradient
//!   ≤ 0 adds N·δ (N = 5 once the gradient has been ≤ 0 for
//!   `hai_threshold` completion events in a row: hyper-active increase,
//!   §4.3; else 1) and a positive gradient cuts rate ·= 1 − β·gradient.
//! - **Patched** (`update_patched`, CoNEXT'16 §5, its Algorithm 2):
//!   between T_low and T_high, w = 0 for a gradient ≤ −1/4, 1 for ≥ 1/4,
//!   2·g + 1/2 between; rate = rate·(1 − β'·w·(rtt − rtt_ref)/rtt_ref) +
//!   δ·(1 − w), with its own β' = 0.008 and rtt_ref = T_low (the paper's
//!   reference queue is C·T_low). No hyper-active increase: w replaces the
//!   branches. Outside that band it acts as the original.
//! - **No cut takes more than half the rate** (`on_event`), as in the
//!   first author's published code: the gradient rule alone would take the
//!   rate below zero once β·gradient > 1.
//! - **Bounds**: the rate stays in [`min_rate_mbps`, the highest rate]
//!   (`super::max_rate_bps`). TIMELY paces from the start, at the highest
//!   rate (the paper's flows start at line rate).
//!
//! Defaults: T_low 50 µs, T_high 500 µs, β 0.8 and 16 KB segments are
//! §6's (as CoNEXT'16 restates them); δ is §6's 10 Mb/s at its 10 Gb/s
//! links, scaled with the line rate (a thousandth of it, as the HPCC
//! simulator's scripts scale it: at 100 Gb/s a fixed 10 Mb/s takes 16
//! flows cut to a fifth of the link tens of milliseconds to climb back).
//! β' = 0.008 is CoNEXT'16's. α = 0.875 and minRTT = 20 µs are the HPCC
//! simulator's defaults for TIMELY (the paper gives no figure for either;
//! eRPC's port of the authors' code uses α = 0.02 with per-packet
//! samples, which smooths the same signal more slowly). N = 5 is §4.3's.

use super::{max_rate_bps, Books, CcState, RateController, TraceEvent};
use crate::cc::AckSample;
use crate::time::Instant;

/// TIMELY's parameters (module docs give their sources).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimelyParams {
    /// The CoNEXT'16 patch (`true`) or the SIGCOMM'15 original.
    pub patched: bool,
    /// EWMA weight α of a new RTT difference, in (0, 1]. Default 0.875.
    pub ewma_alpha: f64,
    /// Multiplicative decrease β of the original, in (0, 1]. Default 0.8.
    pub beta: f64,
    /// The patched rule's β', in (0, 1]. Default 0.008.
    pub patched_beta: f64,
    /// Additive increase δ, Mb/s; 0: a thousandth of the line rate (10
    /// Mb/s at the paper's 10 Gb/s). Default 0.
    pub delta_mbps: u32,
    /// T_low, µs: below it the rate only grows. Default 50.
    pub t_low_us: u32,
    /// T_high, µs: above it the rate is cut by the excess. Default 500.
    pub t_high_us: u32,
    /// minRTT, µs: the gradient's normalisation and the smallest sample
    /// taken. Default 20.
    pub min_rtt_us: u32,
    /// The patched rule's reference RTT, µs (its fixed point lies above
    /// it, more so with more flows). Default 50, T_low.
    pub rtt_ref_us: u32,
    /// Completion events with a gradient ≤ 0 before increases are N·δ.
    /// Default 5.
    pub hai_threshold: u32,
    /// N, the hyper-active increase multiple. Default 5.
    pub hai_multiple: u32,
    /// Bytes acknowledged per completion event (a segment). Default 16384.
    pub segment_bytes: u64,
    /// Lowest rate, Mb/s. Default 10 (our choice; the paper names none).
    pub min_rate_mbps: u32,
    /// Highest rate, Mb/s (0: the line rate). Default 0.
    pub max_rate_mbps: u32,
}

impl Default for TimelyParams {
    fn default() -> TimelyParams {
        TimelyParams {
            patched: true,
            ewma_alpha: 0.875,
            beta: 0.8,
            patched_beta: 0.008,
            delta_mbps: 0,
            t_low_us: 50,
            t_high_us: 500,
            min_rtt_us: 20,
            rtt_ref_us: 50,
            hai_threshold: 5,
            hai_multiple: 5,
            segment_bytes: 16384,
            min_rate_mbps: 10,
            max_rate_mbps: 0,
        }
    }
}

impl TimelyParams {
    /// Whether every value is in its range; the error names the first that
    /// is not.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("ewma_alpha", self.ewma_alpha),
            ("beta", self.beta),
            ("patched_beta", self.patched_beta),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!("{name} {v} is outside (0, 1]"));
            }
        }
        let positive = [
            ("t_low_us", self.t_low_us),
            ("t_high_us", self.t_high_us),
            ("min_rtt_us", self.min_rtt_us),
            ("rtt_ref_us", self.rtt_ref_us),
            ("hai_multiple", self.hai_multiple),
            ("min_rate_mbps", self.min_rate_mbps),
        ];
        super::check_positive(&positive)?;
        if self.t_low_us >= self.t_high_us {
            return Err(format!(
                "t_low_us {} must be below t_high_us {}",
                self.t_low_us, self.t_high_us
            ));
        }
        if self.segment_bytes == 0 {
            return Err("segment_bytes must be at least 1".into());
        }
        super::check_rate_bounds(self.min_rate_mbps, self.max_rate_mbps)
    }
}

/// TIMELY at one QP (see the module docs).
#[derive(Debug)]
pub struct Timely {
    p: TimelyParams,
    max_bps: u64,
    min_bps: u64,
    line_bps: u64,
    /// The rate, bits per second (a float: δ steps are small beside it).
    rate: f64,
    /// δ, bits per second.
    delta: f64,
    /// The previous completion event's RTT, µs (`None` before the first).
    prev_rtt: Option<f64>,
    /// The smoothed RTT difference, µs.
    rtt_diff: f64,
    /// Completion events in a row with a gradient ≤ 0.
    calm: u32,
    /// Bytes acknowledged towards the next completion event.
    acked: u64,
    /// The last RTT sample taken, ns.
    last_rtt_ns: u64,
    books: Books,
}

impl Timely {
    /// TIMELY for a QP whose line rate is `line_bps` (0: unknown).
    pub fn new(p: &TimelyParams, line_bps: u64) -> Timely {
        let max_bps = max_rate_bps(p.max_rate_mbps, line_bps);
        let min_bps = super::mbps(p.min_rate_mbps).min(max_bps);
        Timely {
            p: p.clone(),
            max_bps,
            min_bps,
            line_bps,
            rate: max_bps as f64,
            delta: match p.delta_mbps {
                0 => (max_bps / 1000).max(1_000_000) as f64,
                d => super::mbps(d) as f64,
            },
            prev_rtt: None,
            rtt_diff: 0.0,
            calm: 0,
            acked: 0,
            last_rtt_ns: 0,
            books: Books::default(),
        }
    }

    fn delta(&self) -> f64 {
        self.delta
    }

    /// The RTT of a completion event, µs: the sample less the timed
    /// packet's serialisation, at least minRTT.
    fn event_rtt_us(&self, ack: &AckSample) -> Option<f64> {
        let rtt = ack.rtt?.as_nanos() as f64;
        let wire = if self.line_bps > 0 {
            ack.rtt_bytes as f64 * 8.0 * 1e9 / self.line_bps as f64
        } else {
            0.0
        };
        Some(((rtt - wire) / 1e3).max(f64::from(self.p.min_rtt_us)))
    }

    /// Algorithm 1's EWMA of the RTT difference; the normalised gradient.
    fn gradient(&mut self, rtt: f64) -> f64 {
        let new_diff = rtt - self.prev_rtt.unwrap_or(rtt);
        self.prev_rtt = Some(rtt);
        let a = self.p.ewma_alpha;
        self.rtt_diff = (1.0 - a) * self.rtt_diff + a * new_diff;
        self.rtt_diff / f64::from(self.p.min_rtt_us)
    }

    /// The T_low and T_high rules, shared by both forms; `None` inside
    /// the band.
    fn outside_band(&mut self, rtt: f64) -> Option<TraceEvent> {
        let (lo, hi) = (f64::from(self.p.t_low_us), f64::from(self.p.t_high_us));
        if rtt < lo {
            self.rate += self.delta();
            Some(TraceEvent::RttAdditive)
        } else if rtt > hi {
            self.rate *= 1.0 - self.p.beta * (1.0 - hi / rtt);
            Some(TraceEvent::RttCut)
        } else {
            None
        }
    }

    /// SIGCOMM'15 Algorithm 1 inside the band.
    fn update_original(&mut self, g: f64) -> TraceEvent {
        if g <= 0.0 {
            self.calm += 1;
            let n = if self.calm >= self.p.hai_threshold {
                self.p.hai_multiple
            } else {
                1
            };
            self.rate += f64::from(n) * self.delta();
            if n > 1 {
                TraceEvent::RttHyper
            } else {
                TraceEvent::RttAdditive
            }
        } else {
            self.calm = 0;
            self.rate *= 1.0 - self.p.beta * g;
            TraceEvent::RttCut
        }
    }

    /// CoNEXT'16 §5 inside the band.
    fn update_patched(&mut self, g: f64, rtt: f64) -> TraceEvent {
        let w = if g <= -0.25 {
            0.0
        } else if g >= 0.25 {
            1.0
        } else {
            2.0 * g + 0.5
        };
        let r = f64::from(self.p.rtt_ref_us);
        let err = (rtt - r) / r;
        let before = self.rate;
        self.rate = self.rate * (1.0 - self.p.patched_beta * w * err) + self.delta() * (1.0 - w);
        if self.rate < before {
            TraceEvent::RttCut
        } else {
            TraceEvent::RttAdditive
        }
    }

    /// One completion event with RTT `rtt` µs.
    fn on_event(&mut self, now: Instant, rtt: f64) {
        let g = self.gradient(rtt);
        let before = self.rate;
        let event = match self.outside_band(rtt) {
            Some(e) => {
                self.calm = if g <= 0.0 { self.calm + 1 } else { 0 };
                e
            }
            None if self.p.patched => self.update_patched(g, rtt),
            None => self.update_original(g),
        };
        self.rate = self.rate.max(before / 2.0);
        self.rate = self.rate.clamp(self.min_bps as f64, self.max_bps as f64);
        if self.rate < before {
            self.books.counters.rate_cuts += 1;
        } else if self.rate > before {
            self.books.counters.rate_increases += 1;
        }
        let state = self.state();
        self.books.trace.push(now, event, state);
    }
}

impl RateController for Timely {
    fn on_cnp(&mut self, now: Instant) {
        // TIMELY reads delay, not ECN: a CNP changes nothing.
        self.books.counters.rp_cnp_ignored += 1;
        let state = self.state();
        self.books.trace.push(now, TraceEvent::CnpIgnored, state);
    }

    fn reads_acks(&self) -> bool {
        true
    }

    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        self.acked += ack.acked_bytes;
        if self.acked < self.p.segment_bytes {
            return;
        }
        let Some(rtt) = self.event_rtt_us(ack) else {
            // No sample (the packet timed is not in the log): the next
            // acknowledgement completes the event.
            return;
        };
        self.last_rtt_ns = ack.rtt.map_or(0, |r| r.as_nanos());
        // One event per segment completed, each with this sample.
        while self.acked >= self.p.segment_bytes {
            self.acked -= self.p.segment_bytes;
            self.on_event(now, rtt);
        }
    }

    fn rate_bps(&self) -> Option<u64> {
        Some(self.rate as u64)
    }

    fn state(&self) -> CcState {
        CcState {
            rate_bps: self.rate as u64,
            target_bps: self.rate as u64,
            alpha: self.rtt_diff / f64::from(self.p.min_rtt_us),
            timer_stage: self.calm,
            byte_stage: 0,
            rtt_ns: self.last_rtt_ns,
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
    use crate::time::Duration;

    const G100: u64 = 100_000_000_000;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    /// An acknowledgement completing one segment, with an RTT of `us`
    /// (a 64-byte packet timed: 5 ns at 100 Gb/s, under the rounding).
    fn ack(us: f64) -> AckSample {
        AckSample {
            acked_bytes: 16384,
            acked_pkts: 4,
            rtt: Some(Duration::from_nanos((us * 1e3) as u64)),
            rtt_resent: false,
            rtt_bytes: 0,
            inflight_bytes: 0,
            ecn_echo: false,
            int: None,
            hops: None,
        }
    }

    /// The paper's δ of 10 Mb/s, as the defaults give it at 10 Gb/s.
    fn patched() -> TimelyParams {
        TimelyParams {
            delta_mbps: 10,
            ..TimelyParams::default()
        }
    }

    fn original() -> TimelyParams {
        TimelyParams {
            patched: false,
            ..patched()
        }
    }

    fn rate(t: &Timely) -> f64 {
        t.rate_bps().unwrap() as f64
    }

    #[test]
    fn starts_at_line_rate_and_a_short_rtt_adds_delta_up_to_it() {
        let mut t = Timely::new(&original(), G100);
        assert_eq!(t.rate_bps(), Some(G100));
        t.on_ack(at(1), &ack(30.0));
        assert_eq!(t.rate_bps(), Some(G100), "capped at line rate");
        t.rate = 1e9;
        t.on_ack(at(2), &ack(30.0));
        assert_eq!(rate(&t), 1e9 + 10e6);
    }

    #[test]
    fn the_default_delta_is_a_thousandth_of_the_line_rate() {
        let p = TimelyParams::default();
        for (line, delta) in [
            (10_000_000_000u64, 10e6f64),
            (G100, 100e6),
            (1_000_000, 1e6),
        ] {
            let mut t = Timely::new(&p, line);
            t.rate = 0.5e6;
            t.on_ack(at(1), &ack(30.0));
            assert_eq!(rate(&t), (0.5e6 + delta).min(line as f64), "line {line}");
        }
    }

    #[test]
    fn no_cut_takes_more_than_half_the_rate() {
        let mut t = Timely::new(&original(), G100);
        t.rate = 10e9;
        t.on_ack(at(1), &ack(100.0));
        // 100 → 200 µs: rtt_diff 87.5, g = 4.375: 1 − 0.8·4.375 < 0; half.
        t.on_ack(at(2), &ack(200.0));
        assert!((rate(&t) - (10e9 + 10e6) / 2.0).abs() < 2.0, "{}", rate(&t));
    }

    #[test]
    fn an_ack_of_several_segments_makes_one_event_each() {
        let mut t = Timely::new(&original(), G100);
        t.rate = 1e9;
        let mut a = ack(30.0);
        a.acked_bytes = 4 * 16384 + 100;
        t.on_ack(at(1), &a);
        assert_eq!(rate(&t), 1e9 + 4.0 * 10e6);
        // The 100 bytes over count towards the next segment.
        a.acked_bytes = 16384 - 100;
        t.on_ack(at(2), &a);
        assert_eq!(rate(&t), 1e9 + 5.0 * 10e6);
    }

    #[test]
    fn a_segment_is_one_event_however_many_acks_make_it() {
        let mut t = Timely::new(&original(), G100);
        t.rate = 1e9;
        let mut part = ack(30.0);
        part.acked_bytes = 8192;
        t.on_ack(at(1), &part);
        assert_eq!(rate(&t), 1e9, "half a segment: no event");
        t.on_ack(at(2), &part);
        assert_eq!(rate(&t), 1e9 + 10e6);
    }

    #[test]
    fn above_t_high_the_cut_is_beta_times_the_excess() {
        // Worked by hand: rtt 1000 µs, T_high 500: 1 − 0.8·(1 − 0.5) = 0.6.
        let mut t = Timely::new(&original(), G100);
        t.rate = 10e9;
        t.on_ack(at(1), &ack(1000.0));
        assert!((rate(&t) - 6e9).abs() < 1.0, "{}", rate(&t));
    }

    #[test]
    fn the_original_cuts_on_a_rising_gradient_and_hyper_increases_after_five_calm_events() {
        let mut t = Timely::new(&original(), G100);
        t.rate = 10e9;
        // First event: no previous RTT, difference 0, gradient 0: +δ.
        t.on_ack(at(1), &ack(100.0));
        assert_eq!(rate(&t), 10e9 + 10e6);
        // 100 → 110 µs: rtt_diff = 0.875·10 = 8.75; g = 8.75/20 = 0.4375;
        // rate ·= 1 − 0.8·0.4375 = 0.65.
        t.on_ack(at(2), &ack(110.0));
        let r = (10e9 + 10e6) * 0.65;
        assert!((rate(&t) - r).abs() < 2.0, "{} vs {r}", rate(&t));
        // Falling RTTs: the gradient turns negative; the fifth calm event
        // in a row adds 5·δ. 110 → 100: diff = 0.125·8.75 − 8.75 < 0.
        let mut expect = r;
        for (k, us) in [100.0, 90.0, 80.0, 70.0].into_iter().enumerate() {
            t.on_ack(at(3 + k as u64), &ack(us));
            expect += 10e6;
            assert!((rate(&t) - expect).abs() < 2.0, "event {k}");
        }
        t.on_ack(at(9), &ack(60.0));
        expect += 50e6;
        assert!((rate(&t) - expect).abs() < 2.0, "hyper-active increase");
    }

    #[test]
    fn the_patched_form_weighs_the_gradient_and_cuts_by_distance_from_the_reference() {
        let mut t = Timely::new(&patched(), G100);
        t.rate = 10e9;
        t.on_ack(at(1), &ack(100.0));
        // g = 0: w = 1/2; err = (100 − 50)/50 = 1:
        // rate = 10e9·(1 − 0.008·0.5·1) + 10e6·0.5 = 9.965e9.
        assert!((rate(&t) - 9.965e9).abs() < 1.0, "{}", rate(&t));
        // 100 → 80: rtt_diff = −17.5, g = −0.875 ≤ −1/4: w = 0: +δ.
        t.on_ack(at(2), &ack(80.0));
        assert!((rate(&t) - 9.975e9).abs() < 1.0, "{}", rate(&t));
    }

    #[test]
    fn the_patched_form_has_one_fixed_point_for_every_flow() {
        // Two flows at very different rates seeing the same steady RTT
        // (g = 0) converge on the same rate: δ/2 = R·β'/2·(rtt − ref)/ref,
        // at 60 µs R = 10e6 / (0.008·0.2) = 6.25e9.
        let p = patched();
        let (mut a, mut b) = (Timely::new(&p, G100), Timely::new(&p, G100));
        a.rate = 40e9;
        b.rate = 1e9;
        for k in 0..20_000 {
            a.on_ack(at(k), &ack(60.0));
            b.on_ack(at(k), &ack(60.0));
        }
        let fixed = 6.25e9;
        for r in [rate(&a), rate(&b)] {
            assert!((r - fixed).abs() / fixed < 1e-3, "{r} vs {fixed}");
        }
    }

    #[test]
    fn a_resent_packet_completes_no_event_and_a_cnp_changes_nothing() {
        let mut t = Timely::new(&original(), G100);
        t.rate = 1e9;
        let mut a = ack(30.0);
        a.rtt = None;
        t.on_ack(at(1), &a);
        assert_eq!(rate(&t), 1e9);
        t.on_cnp(at(2));
        assert_eq!(rate(&t), 1e9);
        assert_eq!(t.counters().rp_cnp_ignored, 1);
    }

    #[test]
    fn never_below_the_lowest_rate() {
        let mut t = Timely::new(&original(), G100);
        for k in 0..100 {
            t.on_ack(at(k), &ack(100_000.0));
        }
        assert_eq!(t.rate_bps(), Some(10_000_000));
    }

    #[test]
    fn parameters_out_of_range_are_named() {
        let bad = |f: fn(&mut TimelyParams)| {
            let mut p = TimelyParams::default();
            f(&mut p);
            p.check().unwrap_err()
        };
        assert!(bad(|p| p.beta = 0.0).contains("beta"));
        assert!(bad(|p| p.ewma_alpha = 1.5).contains("ewma_alpha"));
        assert!(bad(|p| p.t_low_us = 600).contains("t_low_us"));
        assert!(bad(|p| p.segment_bytes = 0).contains("segment_bytes"));
        assert!(TimelyParams::default().check().is_ok());
    }
}
