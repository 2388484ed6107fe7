//! Swift: delay-based window control (Kumar et al., "Swift: Delay is
//! Simple and Effective for Congestion Control in the Datacenter",
//! SIGCOMM 2020), with its target delay scaled by the hop count and by
//! the flow's own window. Each rule lives in one method, named below.
//!
//! - **Input**: one RTT sample per acknowledgement (`on_ack`), from the
//!   transport's send log (the newest packet the ACK covers, timed by the
//!   sender's own clock from its latest sending), and the hop count of the
//!   path (`AckSample::hops`, from the ACK's TTL; see below).
//! - **Fabric delay only**: Swift splits the RTT into fabric delay and
//!   endpoint delay, the latter made of the remote NIC's queueing, echoed
//!   in the ACK, and the local ACK processing, and keeps a window for each
//!   (fcwnd, ecwnd; §3.2). Standard RoCE echoes no endpoint delay, so
//!   here the endpoint delay is taken as 0 and the whole RTT sample is
//!   the fabric delay: only fcwnd runs, and a slow receiver shows up as
//!   fabric delay.
//! - **Target delay** (`target_us`, §3.5): base_target + hops·per_hop +
//!   a flow-scaling term α/√cwnd + β clamped to [0, fs_range], with α =
//!   fs_range / (1/√fs_min_cwnd − 1/√fs_max_cwnd) and β = −α/√fs_max_cwnd,
//!   so that the term is fs_range at fs_min_cwnd and 0 at fs_max_cwnd
//!   (many flows, small windows: a longer target, as the queue they build
//!   grows like √N).
//! - **Hop count**: Swift takes it from the IP TTL. Here the sender reads
//!   the TTL / hop limit of each acknowledgement it receives: hops = the
//!   nearest common initial TTL at or above it (64, 128, 255) minus it
//!   ([`super::hops_from_ttl`]); fabric paths are shortest paths, the
//!   same both ways, so the ACK's count is the data's. Until an ACK tells
//!   it, the hop term is 0.
//! - **Window** (`update`, Algorithm 1): delay < target: additive
//!   increase, cwnd += ai/cwnd per packet acknowledged (ai per packet when
//!   cwnd < 1), ai packets per RTT; otherwise, if at least one RTT (the
//!   sample's) has passed since the last decrease, a multiplicative
//!   decrease proportional to the overshoot, cwnd ·= max(1 −
//!   β·(delay − target)/delay, 1 − max_mdf). Only a real decrease restarts
//!   the one-RTT hold-off: a blocked decrease leaves cwnd unchanged, and
//!   restarting the hold-off then would block every later one under
//!   sustained congestion. cwnd stays in [min_cwnd, max_cwnd].
//! - **Bytes and pacing**: cwnd counts packets of `packet_bytes` (0: the
//!   largest mean frame an acknowledgement has covered, 4096 bytes until
//!   one has); the transport's window is cwnd packets in bytes. Below one
//!   packet (§3.3, large incasts) the window holds one packet and the
//!   sender paces at cwnd·packet/RTT, one packet every RTT/cwnd (the
//!   paper's gap, counted from the previous sending, as the pacer does);
//!   at one packet or more it does not pace.
//! - **Not modelled**: loss reactions. Swift cuts cwnd by (1 − max_mdf) on
//!   fast recovery and on a retransmit timeout, and sets it to min_cwnd
//!   after repeated timeouts; the `RateController` trait tells a
//!   controller of no loss or timeout, so none of these runs. A resent
//!   packet's sample (go-back-N) is used like any other. CNPs change
//!   nothing (Swift reads delay, not ECN).
//!
//! Defaults. The paper's only value that could be checked here is
//! min_cwnd = 0.001 packets (§3.3). The others are those of Google's
//! public isekai simulator (`Swift::DefaultConfiguration`), whose comment
//! says many come from Swift in production: ai 1 packet per RTT, β 0.8,
//! max_mdf 0.5, max_cwnd 256 packets, base target 25 µs, 1 µs per hop,
//! fs_range 100 µs, fs_min_cwnd 0.1 and fs_max_cwnd 256 (isekai sets it
//! to its largest window). The 25 µs base target is kept at 100 Gb/s: the
//! 16:1 incast of the simulator (1 µs links) then holds its queue near
//! the target and stays fair and full (tests/incast.rs). The first window,
//! `initial_cwnd`, is our choice: max_cwnd, so a flow starts unlimited, as
//! the other controllers start at line rate.

use super::{Books, CcState, RateController, TraceEvent};
use crate::cc::AckSample;
use crate::time::{Duration, Instant};

/// The packet size assumed until an acknowledgement tells one (with
/// `packet_bytes` 0): a 4096-byte MTU's payload.
const FIRST_PACKET_BYTES: f64 = 4096.0;

/// Swift's parameters (module docs give their sources).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwiftParams {
    /// Additive increase, packets per RTT, > 0. Default 1.
    pub ai: f64,
    /// Multiplicative decrease β, in (0, 1]. Default 0.8.
    pub beta: f64,
    /// The largest fraction one decrease takes, in (0, 1). Default 0.5.
    pub max_mdf: f64,
    /// The smallest window, packets, > 0. Default 0.001.
    pub min_cwnd: f64,
    /// The largest window, packets. Default 256.
    pub max_cwnd: f64,
    /// The first window, packets, in [min_cwnd, max_cwnd]. Default 256.
    pub initial_cwnd: f64,
    /// The target delay before the hop and flow terms, µs, > 0.
    /// Default 25.
    pub base_target_us: f64,
    /// Target delay added per hop, µs, ≥ 0. Default 1.
    pub per_hop_us: f64,
    /// The flow-scaling term's largest value, µs, ≥ 0 (0: no flow
    /// scaling). Default 100.
    pub fs_range_us: f64,
    /// The window at or below which the flow term is `fs_range_us`,
    /// packets, > 0. Default 0.1.
    pub fs_min_cwnd: f64,
    /// The window at or above which the flow term is 0, packets, above
    /// `fs_min_cwnd`. Default 256.
    pub fs_max_cwnd: f64,
    /// The bytes of one packet (a whole frame); 0: learnt from the
    /// acknowledgements. Default 0.
    pub packet_bytes: u32,
}

impl Default for SwiftParams {
    fn default() -> SwiftParams {
        SwiftParams {
            ai: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            min_cwnd: 0.001,
            max_cwnd: 256.0,
            initial_cwnd: 256.0,
            base_target_us: 25.0,
            per_hop_us: 1.0,
            fs_range_us: 100.0,
            fs_min_cwnd: 0.1,
            fs_max_cwnd: 256.0,
            packet_bytes: 0,
        }
    }
}

impl SwiftParams {
    /// Whether every value is in its range; the error names the first that
    /// is not.
    pub fn check(&self) -> Result<(), String> {
        let finite = [
            ("ai", self.ai),
            ("beta", self.beta),
            ("max_mdf", self.max_mdf),
            ("min_cwnd", self.min_cwnd),
            ("max_cwnd", self.max_cwnd),
            ("initial_cwnd", self.initial_cwnd),
            ("base_target_us", self.base_target_us),
            ("per_hop_us", self.per_hop_us),
            ("fs_range_us", self.fs_range_us),
            ("fs_min_cwnd", self.fs_min_cwnd),
            ("fs_max_cwnd", self.fs_max_cwnd),
        ];
        if let Some((name, v)) = finite.iter().find(|(_, v)| !v.is_finite()) {
            return Err(format!("{name} {v} is not a finite number"));
        }
        for (name, v) in [
            ("ai", self.ai),
            ("min_cwnd", self.min_cwnd),
            ("base_target_us", self.base_target_us),
            ("fs_min_cwnd", self.fs_min_cwnd),
        ] {
            if v <= 0.0 {
                return Err(format!("{name} {v} must be above 0"));
            }
        }
        for (name, v) in [
            ("per_hop_us", self.per_hop_us),
            ("fs_range_us", self.fs_range_us),
        ] {
            if v < 0.0 {
                return Err(format!("{name} {v} must not be below 0"));
            }
        }
        if !(self.beta > 0.0 && self.beta <= 1.0) {
            return Err(format!("beta {} is outside (0, 1]", self.beta));
        }
        if !(self.max_mdf > 0.0 && self.max_mdf < 1.0) {
            return Err(format!("max_mdf {} is outside (0, 1)", self.max_mdf));
        }
        if self.max_cwnd < self.min_cwnd {
            return Err(format!(
                "max_cwnd {} is below min_cwnd {}",
                self.max_cwnd, self.min_cwnd
            ));
        }
        if !(self.min_cwnd..=self.max_cwnd).contains(&self.initial_cwnd) {
            return Err(format!(
                "initial_cwnd {} is outside [min_cwnd {}, max_cwnd {}]",
                self.initial_cwnd, self.min_cwnd, self.max_cwnd
            ));
        }
        if self.fs_max_cwnd <= self.fs_min_cwnd {
            return Err(format!(
                "fs_max_cwnd {} must be above fs_min_cwnd {}",
                self.fs_max_cwnd, self.fs_min_cwnd
            ));
        }
        Ok(())
    }
}

/// Swift at one QP (see the module docs).
#[derive(Debug)]
pub struct Swift {
    p: SwiftParams,
    line_bps: u64,
    /// The window, packets.
    cwnd: f64,
    /// The bytes of one packet.
    packet: f64,
    /// Whether `packet` was learnt from an acknowledgement.
    packet_learnt: bool,
    /// α and β of the flow-scaling term, µs.
    fs_alpha: f64,
    fs_beta: f64,
    /// The hop count of the path (0 until an acknowledgement gives one).
    hops: u8,
    /// The latest delay sample (`None` before the first).
    delay: Option<Duration>,
    /// When the window was last decreased.
    last_decrease: Option<Instant>,
    books: Books,
}

impl Swift {
    /// Swift for a QP whose line rate is `line_bps` (0: unknown; it is
    /// only reported).
    pub fn new(p: &SwiftParams, line_bps: u64) -> Swift {
        let fs_alpha = p.fs_range_us / (1.0 / p.fs_min_cwnd.sqrt() - 1.0 / p.fs_max_cwnd.sqrt());
        Swift {
            p: p.clone(),
            line_bps,
            cwnd: p.initial_cwnd,
            packet: match p.packet_bytes {
                0 => FIRST_PACKET_BYTES,
                b => f64::from(b),
            },
            packet_learnt: false,
            fs_alpha,
            fs_beta: -fs_alpha / p.fs_max_cwnd.sqrt(),
            hops: 0,
            delay: None,
            last_decrease: None,
            books: Books::default(),
        }
    }

    /// The window, packets.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// §3.5's flow-scaling term at the current window, µs.
    fn flow_term_us(&self) -> f64 {
        (self.fs_alpha / self.cwnd.sqrt() + self.fs_beta).clamp(0.0, self.p.fs_range_us)
    }

    /// The target delay now, µs: base, hops and flow terms.
    pub fn target_us(&self) -> f64 {
        self.p.base_target_us + f64::from(self.hops) * self.p.per_hop_us + self.flow_term_us()
    }

    /// Algorithm 1 on one delay sample of `delay` µs covering `acked`
    /// packets, with an RTT of `rtt` for the hold-off.
    fn update(&mut self, now: Instant, delay: f64, rtt: Duration, acked: u32) {
        let before = self.cwnd;
        let target = self.target_us();
        if delay < target {
            let n = f64::from(acked);
            if self.cwnd >= 1.0 {
                self.cwnd += self.p.ai / self.cwnd * n;
            } else {
                self.cwnd += self.p.ai * n;
            }
        } else if self
            .last_decrease
            .map_or(true, |t| now.saturating_since(t) >= rtt)
        {
            let f = 1.0 - self.p.beta * (delay - target) / delay;
            self.cwnd *= f.max(1.0 - self.p.max_mdf);
        }
        self.cwnd = self.cwnd.clamp(self.p.min_cwnd, self.p.max_cwnd);
        let event = if self.cwnd < before {
            self.last_decrease = Some(now);
            self.books.counters.rate_cuts += 1;
            TraceEvent::WindowDecrease
        } else if self.cwnd > before {
            self.books.counters.rate_increases += 1;
            TraceEvent::WindowIncrease
        } else {
            return;
        };
        let state = self.state();
        self.books.trace.push(now, event, state);
    }

    /// cwnd packets a RTT, bits per second (`None` before an RTT sample).
    fn window_rate(&self) -> Option<u64> {
        let rtt = self.delay?.as_nanos().max(1) as f64;
        Some(((self.cwnd * self.packet * 8.0 * 1e9 / rtt) as u64).max(1))
    }
}

impl RateController for Swift {
    fn on_cnp(&mut self, now: Instant) {
        // Swift reads delay, not ECN: a CNP changes nothing.
        self.books.counters.rp_cnp_ignored += 1;
        let state = self.state();
        self.books.trace.push(now, TraceEvent::CnpIgnored, state);
    }

    fn reads_acks(&self) -> bool {
        true
    }

    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        if self.p.packet_bytes == 0 && ack.acked_pkts > 0 {
            let mean = ack.acked_bytes as f64 / f64::from(ack.acked_pkts);
            self.packet = if self.packet_learnt {
                self.packet.max(mean)
            } else {
                mean
            };
            self.packet_learnt = true;
        }
        if let Some(h) = ack.hops {
            self.hops = h;
        }
        let Some(rtt) = ack.rtt else {
            return;
        };
        self.delay = Some(rtt);
        let delay_us = rtt.as_nanos() as f64 / 1e3;
        self.update(now, delay_us, rtt, ack.acked_pkts);
    }

    fn rate_bps(&self) -> Option<u64> {
        if self.cwnd < 1.0 {
            self.window_rate()
        } else {
            None
        }
    }

    fn window_bytes(&self) -> Option<u64> {
        Some(((self.cwnd * self.packet).ceil() as u64).max(1))
    }

    fn state(&self) -> CcState {
        let rate = self.window_rate().unwrap_or(self.line_bps);
        CcState {
            rate_bps: rate,
            target_bps: rate,
            alpha: 0.0,
            timer_stage: 0,
            byte_stage: 0,
            rtt_ns: self.delay.map_or(0, |d| d.as_nanos()),
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

    const G100: u64 = 100_000_000_000;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    /// An acknowledgement of `pkts` packets of 1000 bytes with an RTT of
    /// `us` over `hops` switches.
    fn ack(us: f64, pkts: u32, hops: u8) -> AckSample {
        AckSample {
            acked_bytes: 1000 * u64::from(pkts),
            acked_pkts: pkts,
            rtt: Some(Duration::from_nanos((us * 1e3) as u64)),
            rtt_resent: false,
            rtt_bytes: 1000,
            inflight_bytes: 0,
            ecn_echo: false,
            int: None,
            hops: Some(hops),
        }
    }

    /// No flow scaling and no hop term: the target is the base, 25 µs.
    fn plain() -> SwiftParams {
        SwiftParams {
            fs_range_us: 0.0,
            per_hop_us: 0.0,
            ..SwiftParams::default()
        }
    }

    fn swift(p: &SwiftParams, cwnd: f64) -> Swift {
        let mut s = Swift::new(p, G100);
        s.cwnd = cwnd;
        s
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn below_the_target_the_window_grows_ai_per_rtt() {
        // cwnd 10, 2 packets acknowledged at 20 µs < 25: += 1/10·2.
        let mut s = swift(&plain(), 10.0);
        s.on_ack(at(1), &ack(20.0, 2, 1));
        assert!(close(s.cwnd(), 10.2), "{}", s.cwnd());
        // Below one packet the step is ai per packet: 0.5 + 1·1.
        let mut s = swift(&plain(), 0.5);
        s.on_ack(at(1), &ack(20.0, 1, 1));
        assert!(close(s.cwnd(), 1.5), "{}", s.cwnd());
        assert_eq!(s.counters().rate_increases, 1);
    }

    #[test]
    fn above_the_target_the_cut_follows_the_overshoot_capped_by_max_mdf() {
        // delay 50 µs, target 25: 1 − 0.8·(50 − 25)/50 = 0.6.
        let mut s = swift(&plain(), 10.0);
        s.on_ack(at(100), &ack(50.0, 1, 1));
        assert!(close(s.cwnd(), 6.0), "{}", s.cwnd());
        // delay 500 µs: 1 − 0.8·0.95 = 0.24 < 1 − 0.5: the cap, 0.5.
        let mut s = swift(&plain(), 10.0);
        s.on_ack(at(100), &ack(500.0, 1, 1));
        assert!(close(s.cwnd(), 5.0), "{}", s.cwnd());
        assert_eq!(s.counters().rate_cuts, 1);
    }

    #[test]
    fn at_most_one_decrease_per_rtt_and_only_a_decrease_restarts_the_wait() {
        let mut s = swift(&plain(), 10.0);
        s.on_ack(at(100), &ack(50.0, 1, 1));
        assert!(close(s.cwnd(), 6.0));
        // 49 µs later, with a 50 µs RTT: held.
        s.on_ack(at(149), &ack(50.0, 1, 1));
        assert!(close(s.cwnd(), 6.0), "held: {}", s.cwnd());
        // A blocked decrease did not restart the wait: at 150 µs it cuts.
        s.on_ack(at(150), &ack(50.0, 1, 1));
        assert!(close(s.cwnd(), 3.6), "{}", s.cwnd());
        // An increase between does not restart it either.
        s.on_ack(at(160), &ack(10.0, 36, 1));
        assert!(close(s.cwnd(), 13.6), "{}", s.cwnd());
        s.on_ack(at(200), &ack(50.0, 1, 1));
        assert!(
            close(s.cwnd(), 8.16),
            "one RTT after the last cut: {}",
            s.cwnd()
        );
        assert_eq!(s.counters().rate_cuts, 3);
    }

    #[test]
    fn each_hop_adds_to_the_target() {
        let p = SwiftParams {
            fs_range_us: 0.0,
            ..SwiftParams::default()
        };
        let mut s = swift(&p, 10.0);
        assert!(close(s.target_us(), 25.0), "no hop known yet");
        // 27.5 µs is above 25 + 2·1 but below 25 + 3·1.
        s.on_ack(at(100), &ack(27.5, 1, 3));
        assert!(close(s.target_us(), 28.0));
        assert!(s.cwnd() > 10.0, "below a 3-hop target: {}", s.cwnd());
        let mut s = swift(&p, 10.0);
        s.on_ack(at(100), &ack(27.5, 1, 2));
        assert!(close(s.target_us(), 27.0));
        assert!(s.cwnd() < 10.0, "above a 2-hop target: {}", s.cwnd());
        // An acknowledgement without a hop count keeps the last one.
        let mut a = ack(10.0, 1, 0);
        a.hops = None;
        s.on_ack(at(300), &a);
        assert!(close(s.target_us(), 27.0));
    }

    #[test]
    fn the_flow_term_is_fs_range_at_fs_min_and_zero_at_fs_max() {
        let p = SwiftParams {
            per_hop_us: 0.0,
            ..SwiftParams::default()
        };
        // α = 100 / (1/√0.1 − 1/√256) = 100 / (3.16228 − 0.0625),
        // β = −α/16.
        let alpha = 100.0 / (1.0 / 0.1f64.sqrt() - 1.0 / 16.0);
        let beta = -alpha / 16.0;
        for (cwnd, term) in [
            (0.1, 100.0),
            (0.001, 100.0), // clamped to fs_range
            (256.0, 0.0),
            (4.0, alpha / 2.0 + beta), // 14.11 µs
        ] {
            let s = swift(&p, cwnd);
            assert!(
                close(s.target_us(), 25.0 + term),
                "cwnd {cwnd}: {} vs {}",
                s.target_us(),
                25.0 + term
            );
        }
        assert!(
            (alpha / 2.0 + beta - 14.1139).abs() < 1e-4,
            "{}",
            alpha / 2.0 + beta
        );
    }

    #[test]
    fn below_one_packet_the_sender_paces_at_cwnd_packets_per_rtt() {
        let mut s = swift(&plain(), 0.5);
        assert_eq!(s.rate_bps(), None, "no RTT yet");
        // 100 µs RTT: a cut to 0.5·0.5 = 0.25 packets of 1000 bytes per
        // 100 µs: 2000 bits / 100 µs = 20 Mb/s.
        s.on_ack(at(100), &ack(100.0, 1, 1));
        assert!(close(s.cwnd(), 0.25));
        assert_eq!(s.rate_bps(), Some(20_000_000));
        assert_eq!(s.window_bytes(), Some(250));
        // At one packet or more it does not pace.
        let mut s = swift(&plain(), 2.0);
        s.on_ack(at(1), &ack(20.0, 1, 1));
        assert_eq!(s.rate_bps(), None);
        assert_eq!(s.window_bytes(), Some(2500));
    }

    #[test]
    fn the_window_stays_in_its_bounds_and_learns_the_packet_size() {
        let mut s = Swift::new(&plain(), G100);
        assert_eq!(s.window_bytes(), Some(256 * 4096), "before any ACK");
        for k in 0..100 {
            s.on_ack(at(k * 20_000), &ack(10_000.0, 1, 1));
        }
        assert_eq!(s.cwnd(), 0.001);
        assert_eq!(s.window_bytes(), Some(1), "0.001 of 1000 bytes");
        for k in 100..1000 {
            s.on_ack(at(k * 20_000), &ack(1.0, 100, 1));
        }
        assert_eq!(s.cwnd(), 256.0);
        assert_eq!(s.window_bytes(), Some(256_000));
    }

    #[test]
    fn a_cnp_or_an_ack_without_a_sample_changes_nothing() {
        let mut s = swift(&plain(), 10.0);
        let mut a = ack(100.0, 1, 1);
        a.rtt = None;
        s.on_ack(at(1), &a);
        s.on_cnp(at(2));
        assert_eq!(s.cwnd(), 10.0);
        assert_eq!(s.counters().rp_cnp_ignored, 1);
    }

    #[test]
    fn parameters_out_of_range_are_named() {
        let bad = |f: fn(&mut SwiftParams)| {
            let mut p = SwiftParams::default();
            f(&mut p);
            p.check().unwrap_err()
        };
        assert!(bad(|p| p.beta = 0.0).contains("beta 0 is outside (0, 1]"));
        assert!(bad(|p| p.max_mdf = 1.0).contains("max_mdf 1 is outside (0, 1)"));
        assert!(bad(|p| p.ai = 0.0).contains("ai 0 must be above 0"));
        assert!(bad(|p| p.min_cwnd = 0.0).contains("min_cwnd"));
        assert!(bad(|p| p.max_cwnd = 0.0001).contains("max_cwnd 0.0001 is below min_cwnd"));
        assert!(bad(|p| p.initial_cwnd = 300.0).contains("initial_cwnd 300 is outside"));
        assert!(bad(|p| p.base_target_us = 0.0).contains("base_target_us"));
        assert!(bad(|p| p.per_hop_us = -1.0).contains("per_hop_us -1 must not be below 0"));
        assert!(bad(|p| p.fs_min_cwnd = 256.0).contains("fs_max_cwnd 256 must be above"));
        assert!(
            bad(|p| p.fs_range_us = f64::NAN).contains("fs_range_us NaN is not a finite number")
        );
        assert!(SwiftParams::default().check().is_ok());
    }
}
