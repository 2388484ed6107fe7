//! HPCC: window and rate control from in-network telemetry (Li et al.,
//! "HPCC: High Precision Congestion Control", SIGCOMM 2019). Each switch
//! on the path stamps its egress port's time, bytes sent, queue and link
//! rate into the request ([`crate::wire::int`]); the responder echoes
//! the stack in its acknowledgement, and the sender computes how loaded
//! the busiest link is. Each rule lives in one method, named below.
//!
//! - **Input** (`on_ack`): the echoed stack of each acknowledgement
//!   ([`AckSample::int`]). The first stack, or one with a different
//!   number of hops (the path changed), is only kept as the reference.
//! - **Utilisation** (`measure`, the paper's Algorithm 1 lines 1–10):
//!   per hop, txRate = Δbytes / Δts against the previous stack, and
//!   u' = min(qlen, qlen_prev) / (B·T) + txRate / B; u is the largest u'
//!   and τ the Δts of that hop, at most T; then U = (1 − τ/T)·U + (τ/T)·u.
//!   The min() of the two queue lengths ignores a burst one packet saw.
//!   Hops whose rate the record cannot name, or with no time between the
//!   two stacks, are skipped.
//! - **Window** (`compute`, lines 11–20): with c = U/η, if c ≥ 1 or the
//!   additive stages have reached maxStage, W = Wc/c + W_AI (a cut when
//!   the link is over η, a multiplicative increase when it has stayed
//!   under it for maxStage updates), else W = Wc + W_AI.
//! - **Reference window** (`on_ack`, lines 21–28): Wc and the stage
//!   change once per RTT, on the first acknowledgement that covers data
//!   sent after the last such update (the paper's ack.seq >
//!   lastUpdateSeq, here in bytes: acknowledged bytes past those sent at
//!   the last update). Every other acknowledgement recomputes W from the
//!   same Wc with the newest U ("fast reaction"), unless `fast_react` is
//!   off.
//! - **Output**: the window W bounds the bytes in flight and the pacing
//!   rate is R = W/T. Both are kept as the rate R (W = R·T), as the
//!   HPCC simulator does (`rdma-hw.cc`, `UpdateRateHp`, single-rate mode),
//!   clamped to [`min_rate_mbps`, the highest rate]. Flows start at the
//!   highest rate: W_init = B_NIC·T.
//! - CNPs are ignored: HPCC reads INT, not ECN.
//!
//! Defaults: η = 0.95 and maxStage = 5 are the paper's (§3.3, and the
//! HPCC simulator's `TargetUtil` and `MiThresh`; that simulator's
//! published scripts run with maxStage 0, set `max_stage = 0` to
//! reproduce them). W_AI: the paper sets W_AI = W_init·(1 − η)/N for N
//! expected concurrent flows; we take the HPCC simulator scripts'
//! additive step, 10 Mb/s per 25 Gb/s of line rate (`run.py`,
//! RATE_AI), i.e. W_AI = line·T/2500 (N = 125 flows in the paper's
//! terms). T = 13 µs, the base RTT the HPCC simulator's scripts take for
//! their fat tree (our choice for a default: set it to your network's
//! largest base RTT, as the paper does). The lowest rate, 100 Mb/s, is
//! the HPCC simulator's `MinRate` default.

use super::{max_rate_bps, AckSample, Books, CcState, RateController, TraceEvent};
use crate::time::Instant;
use crate::wire::int::IntStack;

/// HPCC's parameters (module docs give their sources).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HpccParams {
    /// η, the target utilisation of the busiest link, in (0, 1]. Default
    /// 0.95.
    pub eta: f64,
    /// maxStage: additive increases before a multiplicative one. Default
    /// 5.
    pub max_stage: u32,
    /// T, the base RTT, µs: the window is the rate times T. Default 13.
    pub base_rtt_us: u32,
    /// The additive step W_AI as a rate, Mb/s (W_AI = it times T); 0:
    /// 1/2500 of the line rate. Default 0.
    pub ai_rate_mbps: u32,
    /// Recompute the window from the reference one on every
    /// acknowledgement, not only once per RTT. Default true.
    pub fast_react: bool,
    /// Lowest rate, Mb/s. Default 100.
    pub min_rate_mbps: u32,
    /// Highest rate, Mb/s (0: the line rate). Default 0.
    pub max_rate_mbps: u32,
}

impl Default for HpccParams {
    fn default() -> HpccParams {
        HpccParams {
            eta: 0.95,
            max_stage: 5,
            base_rtt_us: 13,
            ai_rate_mbps: 0,
            fast_react: true,
            min_rate_mbps: 100,
            max_rate_mbps: 0,
        }
    }
}

impl HpccParams {
    /// Whether every value is in its range; the error names the first that
    /// is not.
    pub fn check(&self) -> Result<(), String> {
        if !(self.eta > 0.0 && self.eta <= 1.0) {
            return Err(format!("eta {} is outside (0, 1]", self.eta));
        }
        super::check_positive(&[
            ("base_rtt_us", self.base_rtt_us),
            ("min_rate_mbps", self.min_rate_mbps),
        ])?;
        super::check_rate_bounds(self.min_rate_mbps, self.max_rate_mbps)
    }
}

/// HPCC at one QP (see the module docs).
#[derive(Debug)]
pub struct Hpcc {
    p: HpccParams,
    max_bps: f64,
    min_bps: f64,
    /// T, seconds.
    t: f64,
    /// W_AI as a rate, bits per second.
    ai: f64,
    /// The current rate R (window W = R·T), bits per second.
    rate: f64,
    /// The reference rate Rc (Wc = Rc·T).
    rc: f64,
    /// Additive stages since the last multiplicative step.
    stage: u32,
    /// U, the smoothed utilisation of the busiest hop.
    u: f64,
    /// The previous acknowledgement's stack (`None` before the first).
    last: Option<IntStack>,
    /// Bytes sent, and those acknowledged, since the QP started.
    sent: u64,
    acked: u64,
    /// `sent` at the last reference update (lastUpdateSeq).
    update_mark: u64,
    last_rtt_ns: u64,
    books: Books,
}

impl Hpcc {
    /// HPCC for a QP whose line rate is `line_bps` (0: unknown).
    pub fn new(p: &HpccParams, line_bps: u64) -> Hpcc {
        let max_bps = max_rate_bps(p.max_rate_mbps, line_bps) as f64;
        let ai = match p.ai_rate_mbps {
            0 => max_bps / 2500.0,
            r => super::mbps(r) as f64,
        };
        Hpcc {
            p: p.clone(),
            max_bps,
            min_bps: (super::mbps(p.min_rate_mbps) as f64).min(max_bps),
            t: f64::from(p.base_rtt_us) * 1e-6,
            ai,
            rate: max_bps,
            rc: max_bps,
            stage: 0,
            u: 0.0,
            last: None,
            sent: 0,
            acked: 0,
            update_mark: 0,
            last_rtt_ns: 0,
            books: Books::default(),
        }
    }

    /// Lines 1–10: the new U from the stack `now` against `prev` (same
    /// number of hops).
    fn measure(&mut self, now: &IntStack, prev: &IntStack) {
        let t_ns = self.t * 1e9;
        let mut u = 0.0;
        let mut tau = t_ns;
        for (h, l) in now.hops().iter().zip(prev.hops()) {
            let (Some(b), dt) = (h.rate_bps(), h.ns_since(l)) else {
                continue;
            };
            if dt == 0 {
                continue;
            }
            let b = b as f64;
            let tx_rate = h.bytes_since(l) as f64 * 8.0 * 1e9 / dt as f64;
            let q = h.qlen_bytes().min(l.qlen_bytes()) as f64 * 8.0;
            let u1 = q / (b * self.t) + tx_rate / b;
            if u1 > u {
                u = u1;
                tau = dt as f64;
            }
        }
        let tau = tau.min(t_ns);
        self.u = (1.0 - tau / t_ns) * self.u + tau / t_ns * u;
    }

    /// Lines 11–20: the rate from the reference and U; commits the
    /// reference and the stage when `update`.
    fn compute(&mut self, now: Instant, update: bool) {
        let c = self.u / self.p.eta;
        let before = self.rate;
        let (rate, stage, event) = if c >= 1.0 || self.stage >= self.p.max_stage {
            let e = if c >= 1.0 {
                TraceEvent::IntCut
            } else {
                TraceEvent::IntHyper
            };
            (self.rc / c.max(f64::MIN_POSITIVE) + self.ai, 0, e)
        } else {
            (self.rc + self.ai, self.stage + 1, TraceEvent::IntAdditive)
        };
        self.rate = rate.clamp(self.min_bps, self.max_bps);
        if update {
            self.rc = self.rate;
            self.stage = stage;
        }
        if self.rate < before {
            self.books.counters.rate_cuts += 1;
        } else if self.rate > before {
            self.books.counters.rate_increases += 1;
        }
        if update || self.rate != before {
            let state = self.state();
            self.books.trace.push(now, event, state);
        }
    }
}

impl RateController for Hpcc {
    fn on_cnp(&mut self, now: Instant) {
        // HPCC reads INT, not ECN: a CNP changes nothing.
        self.books.counters.rp_cnp_ignored += 1;
        let state = self.state();
        self.books.trace.push(now, TraceEvent::CnpIgnored, state);
    }

    fn on_sent(&mut self, _now: Instant, bytes: u64) {
        self.sent += bytes;
    }

    fn reads_acks(&self) -> bool {
        true
    }

    fn needs_int(&self) -> bool {
        true
    }

    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        self.acked += ack.acked_bytes;
        if let Some(r) = ack.rtt {
            self.last_rtt_ns = r.as_nanos();
        }
        let Some(int) = ack.int.filter(|s| s.n > 0) else {
            return;
        };
        let Some(prev) = self.last.replace(int).filter(|l| l.n == int.n) else {
            // The first stack, or a new path: a reference only.
            self.update_mark = self.sent;
            return;
        };
        self.measure(&int, &prev);
        let update = self.acked > self.update_mark;
        if update || self.p.fast_react {
            self.compute(now, update);
        }
        if update {
            self.update_mark = self.sent;
        }
    }

    fn rate_bps(&self) -> Option<u64> {
        Some(self.rate as u64)
    }

    fn window_bytes(&self) -> Option<u64> {
        Some((self.rate * self.t / 8.0) as u64)
    }

    fn state(&self) -> CcState {
        CcState {
            rate_bps: self.rate as u64,
            target_bps: self.rc as u64,
            alpha: self.u,
            timer_stage: self.stage,
            byte_stage: 0,
            rtt_ns: self.last_rtt_ns,
            window_bytes: self.window_bytes().unwrap_or(0),
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
    use crate::wire::int::IntHop;

    const G100: u64 = 100_000_000_000;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    /// A one-hop stack at a 100 Gb/s port: `ns`, bytes sent, queue bytes.
    fn stack(ns: u64, tx: u64, q: u64) -> IntStack {
        let mut s = IntStack::default();
        s.push(IntHop::stamp(G100, ns, tx, q));
        s
    }

    fn ack(int: IntStack, acked: u64) -> AckSample {
        AckSample {
            acked_bytes: acked,
            acked_pkts: 1,
            int: Some(int),
            ..AckSample::default()
        }
    }

    fn hpcc(p: HpccParams) -> Hpcc {
        let mut h = Hpcc::new(&p, G100);
        h.set_trace(true);
        h
    }

    #[test]
    fn a_full_link_with_a_queue_cuts_by_u_over_eta() {
        // T = 10 µs. The port sent at line rate for 10 µs (125,000 B) and
        // held 62,500 B both times: u = 0.5 + 1 = 1.5, τ = T, so U = 1.5
        // and R = Rc / (1.5 / 0.95) + AI = 100 G x 0.6333 + 40 Mb/s (to
        // within the records' 128-byte units: 0.1%).
        let p = HpccParams {
            base_rtt_us: 10,
            ..HpccParams::default()
        };
        let mut h = hpcc(p);
        h.on_sent(at(0), 4000);
        h.on_ack(at(5), &ack(stack(0, 0, 62_500), 1000));
        assert_eq!(h.rate_bps(), Some(G100), "the first stack is a reference");
        h.on_ack(at(15), &ack(stack(10_000, 125_000, 62_500), 4000));
        let want = 1e11 * 0.95 / 1.5 + 4e7;
        assert!((h.rate - want).abs() < want * 1e-3, "{} vs {want}", h.rate);
        assert!((h.u - 1.5).abs() < 2e-3, "{}", h.u);
        assert_eq!(h.rc, h.rate, "a full update moves the reference");
        assert_eq!(h.window_bytes(), Some((h.rate * 10e-6 / 8.0) as u64));
        assert_eq!(h.counters().rate_cuts, 1);
    }

    #[test]
    fn u_is_smoothed_by_the_time_the_stacks_cover() {
        // Δts = 2.5 µs of T = 10 µs at half the line rate, no queue:
        // u = 0.5 and U = 0.75·0 + 0.25·0.5 = 0.125.
        let p = HpccParams {
            base_rtt_us: 10,
            ..HpccParams::default()
        };
        let mut h = hpcc(p);
        h.on_ack(at(0), &ack(stack(0, 0, 0), 0));
        h.on_ack(at(3), &ack(stack(2_500, 15_625, 0), 0));
        assert!((h.u - 0.125).abs() < 1e-3, "{}", h.u);
        // The queue counts at its smaller value of the two stacks.
        let mut h = hpcc(HpccParams {
            base_rtt_us: 10,
            ..HpccParams::default()
        });
        h.on_ack(at(0), &ack(stack(0, 0, 1280), 0));
        h.on_ack(at(20), &ack(stack(20_000, 0, 1_000_000), 0));
        // u = 1280 B x 8 / (100 Gb/s x 10 µs) = 0.01024; τ clamps to T.
        assert!((h.u - 0.01024).abs() < 1e-6, "{}", h.u);
    }

    #[test]
    fn under_eta_it_adds_then_multiplies_after_max_stage() {
        let p = HpccParams {
            base_rtt_us: 10,
            max_stage: 2,
            ai_rate_mbps: 1000,
            max_rate_mbps: 200_000,
            ..HpccParams::default()
        };
        let mut h = Hpcc::new(&p, 0);
        h.rate = 10e9;
        h.rc = 10e9;
        let mut tx = 0;
        let mut sent = 0;
        h.on_ack(at(0), &ack(stack(0, 0, 0), 0));
        let mut rates = Vec::new();
        for i in 1..=4u64 {
            // Each RTT the port ran at half the line rate: U ends at 0.5.
            sent += 1000;
            h.on_sent(at(i * 10), 1000);
            tx += 62_500;
            h.on_ack(at(i * 10 + 1), &ack(stack(i * 10_000, tx, 0), 1000));
            rates.push(h.rate / 1e9);
        }
        assert_eq!(sent, 4000);
        // Two additive stages of 1 Gb/s, then Rc / (0.5 / 0.95) + 1 (U is
        // 0.4997 in the records' 128-byte units).
        assert!((rates[0] - 11.0).abs() < 1e-6, "{rates:?}");
        assert!((rates[1] - 12.0).abs() < 1e-6, "{rates:?}");
        assert!(
            (rates[2] - (12.0 * 0.95 / 0.5 + 1.0)).abs() < 0.05,
            "{rates:?}"
        );
        // The multiplicative step restarts the stages.
        assert!((rates[3] - rates[2] - 1.0).abs() < 1e-6, "{rates:?}");
        assert_eq!(h.stage, 1);
    }

    #[test]
    fn the_reference_moves_once_per_rtt_and_fast_reaction_between() {
        let p = HpccParams {
            base_rtt_us: 10,
            ..HpccParams::default()
        };
        let mut h = hpcc(p.clone());
        h.on_sent(at(0), 10_000);
        h.on_ack(at(1), &ack(stack(0, 0, 0), 1000));
        // Acknowledged 2,000 of 10,000 sent at the reference: fast reaction
        // only (the rate moves, Rc does not).
        h.on_ack(at(11), &ack(stack(10_000, 125_000, 62_500), 1000));
        assert!(h.rate < 1e11);
        assert_eq!(h.rc, 1e11);
        // Past the 10,000 bytes: a full update.
        h.on_ack(at(12), &ack(stack(11_000, 137_500, 62_500), 9000));
        assert_eq!(h.rc, h.rate);
        // Without fast reaction the in-between acknowledgement changes
        // nothing.
        let mut h = hpcc(HpccParams {
            fast_react: false,
            ..p
        });
        h.on_sent(at(0), 10_000);
        h.on_ack(at(1), &ack(stack(0, 0, 0), 1000));
        h.on_ack(at(11), &ack(stack(10_000, 125_000, 62_500), 1000));
        assert_eq!(h.rate, 1e11);
    }

    #[test]
    fn a_new_path_or_no_telemetry_only_resets_the_reference() {
        let mut h = hpcc(HpccParams::default());
        h.on_ack(at(0), &ack(stack(0, 0, 0), 0));
        let mut two = stack(10_000, 125_000, 500_000);
        two.push(IntHop::stamp(G100, 10_000, 125_000, 500_000));
        h.on_ack(at(10), &ack(two, 100));
        assert_eq!(h.rate, 1e11);
        h.on_ack(at(11), &AckSample::default());
        assert_eq!(h.rate, 1e11);
        // A hop whose rate the record cannot name is skipped.
        let mut h = hpcc(HpccParams::default());
        let odd = |ns, tx| {
            let mut s = IntStack::default();
            s.push(IntHop::stamp(12_000_000_000, ns, tx, 1 << 20));
            s
        };
        h.on_ack(at(0), &ack(odd(0, 0), 0));
        h.on_ack(at(10), &ack(odd(10_000, 125_000), 100));
        assert!(h.rate >= 1e11 - 1.0);
        assert!(h.needs_int() && h.reads_acks());
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = |p: HpccParams| p.check().unwrap_err();
        assert!(bad(HpccParams {
            eta: 0.0,
            ..HpccParams::default()
        })
        .contains("eta"));
        assert!(bad(HpccParams {
            eta: 1.5,
            ..HpccParams::default()
        })
        .contains("eta"));
        assert!(bad(HpccParams {
            base_rtt_us: 0,
            ..HpccParams::default()
        })
        .contains("base_rtt_us"));
        assert!(bad(HpccParams {
            min_rate_mbps: 5000,
            max_rate_mbps: 1000,
            ..HpccParams::default()
        })
        .contains("max_rate_mbps"));
        assert!(HpccParams::default().check().is_ok());
    }
}
