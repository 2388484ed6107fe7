//! Congestion control at the reaction point, and the pacer that applies
//! its rate.
//!
//! This module owns the rate-control algorithms behind one trait
//! ([`RateController`]), their configurations with defaults ([`CcConfig`],
//! the factory [`CcConfig::build`]), the per-QP rate trace
//! ([`TraceRecord`]) and the [`Pacer`]. It sees events (a CNP arrived,
//! bytes left, time passed) and never packets; the transport decides what
//! is paced (requester data and READ responses, never ACKs or CNPs) and
//! where CNPs come from (the notification point, `transport`).
//!
//! # Call order
//!
//! A controller is a deterministic function of the events it is given and
//! their times, which never go backwards:
//!
//! 1. [`RateController::advance`]`(now)` runs every timer due by `now`, in
//!    time order (rate-increase timers, α updates, a deferred cut). Every
//!    other call does this first, so a caller may skip it.
//! 2. [`RateController::on_cnp`]`(now)` when a CNP for the QP arrives.
//! 3. [`RateController::on_sent`]`(now, bytes)` after each paced packet.
//! 4. [`RateController::rate_bps`] is the rate to pace at now.
//!
//! Timers need no wake-up of their own: nothing but the rate depends on
//! them, and the rate is read (after `advance`) whenever a packet is about
//! to go.

#![deny(unsafe_code)]

mod dcqcn_cx;
mod dcqcn_paper;
mod dctcp;
mod hpcc;
mod pacer;
mod swift;
mod timely;

pub use dcqcn_cx::{CxParams, DcqcnCx};
pub use dcqcn_paper::{DcqcnPaper, PaperParams};
pub use dctcp::{Dctcp, DctcpParams};
pub use hpcc::{Hpcc, HpccParams};
pub use pacer::Pacer;
pub use swift::{Swift, SwiftParams};
pub use timely::{Timely, TimelyParams};

use crate::time::{Duration, Instant};
use crate::wire::int::IntStack;
use core::fmt;

/// What a controller exposes at any time.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct CcState {
    /// The current rate Rc, bits per second.
    pub rate_bps: u64,
    /// The target rate Rt, bits per second.
    pub target_bps: u64,
    /// α, the congestion estimate, in [0, 1].
    pub alpha: f64,
    /// Rate-increase events counted by the timer since the last cut.
    pub timer_stage: u32,
    /// Rate-increase events counted by the byte counter since the last cut.
    pub byte_stage: u32,
    /// The last RTT sample the controller took, nanoseconds (0: none;
    /// controllers that use no RTT leave it 0).
    pub rtt_ns: u64,
    /// The window, bytes the QP may have unacknowledged (0: the
    /// controller keeps none).
    pub window_bytes: u64,
}

/// What one acknowledgement tells the reaction point: the per-ACK input of
/// delay- and window-based controllers ([`RateController::on_ack`]).
///
/// The transport builds it from its own send log: each request packet's
/// send time and length, kept until it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckSample {
    /// Bytes (whole frames, as sent) newly acknowledged.
    pub acked_bytes: u64,
    /// Request packets newly acknowledged.
    pub acked_pkts: u32,
    /// From the latest sending of the newest packet this acknowledgement
    /// covers to its arrival (`None`: that packet is not in the send log).
    pub rtt: Option<Duration>,
    /// Whether that packet was sent more than once. Karn's rule would
    /// drop such a sample, as the acknowledgement cannot say which sending
    /// it answers; under go-back-N it mostly answers the latest (the
    /// first copy was lost), and dropping every such sample starves a
    /// delay-based controller exactly when its queue overflows. A
    /// controller may still ignore it.
    pub rtt_resent: bool,
    /// The bytes of that packet (a controller that subtracts its
    /// serialisation time, as TIMELY does, needs them).
    pub rtt_bytes: u32,
    /// Bytes sent and not yet acknowledged, after this acknowledgement.
    pub inflight_bytes: u64,
    /// Whether a CNP arrived for the QP since the previous sample: the
    /// ECN echo of RoCE (reference B.8).
    pub ecn_echo: bool,
    /// The hops the acknowledged request collected, echoed by the
    /// responder: on a path with INT telemetry only
    /// ([`crate::wire::int`]).
    pub int: Option<IntStack>,
    /// Switches between the QP and its peer, from the TTL / hop limit of
    /// the response that made this sample ([`hops_from_ttl`]; paths are
    /// the same both ways); `None`: not known.
    pub hops: Option<u8>,
}

/// The hops a packet that arrived with TTL (or hop limit) `ttl` took:
/// from the nearest common initial TTL at or above it (64, 128 or 255)
/// down to it. Every router, and every switch of the simulator, lowers
/// it by one.
pub fn hops_from_ttl(ttl: u8) -> u8 {
    let initial = match ttl {
        0..=64 => 64,
        65..=128 => 128,
        _ => 255,
    };
    initial - ttl
}

/// Counters of one controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CcCounters {
    /// CNPs taken by the reaction point (ConnectX `rp_cnp_handled`),
    /// those merged into a cut already made in the same monitor period
    /// included.
    pub rp_cnp_handled: u64,
    /// CNPs that changed nothing because rate control is off for the QP
    /// (ConnectX `rp_cnp_ignored`).
    pub rp_cnp_ignored: u64,
    /// Rate cuts made.
    pub rate_cuts: u64,
    /// Rate increases made (fast recovery, additive and hyper).
    pub rate_increases: u64,
}

impl CcCounters {
    /// Adds `o`'s counts to these (totals over QPs).
    pub fn add(&mut self, o: &CcCounters) {
        self.rp_cnp_handled += o.rp_cnp_handled;
        self.rp_cnp_ignored += o.rp_cnp_ignored;
        self.rate_cuts += o.rate_cuts;
        self.rate_increases += o.rate_increases;
    }
}

/// What a trace record reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceEvent {
    /// A CNP arrived and was taken.
    Cnp,
    /// A CNP arrived and was ignored (no rate control).
    CnpIgnored,
    /// The rate was cut.
    Cut,
    /// Fast recovery: Rc = (Rt + Rc) / 2.
    FastRecovery,
    /// Additive increase of Rt, then Rc = (Rt + Rc) / 2.
    AdditiveIncrease,
    /// Hyper increase of Rt, then Rc = (Rt + Rc) / 2.
    HyperIncrease,
    /// An RTT sample raised the rate additively (TIMELY).
    RttAdditive,
    /// An RTT sample raised the rate by the hyper-active step (TIMELY).
    RttHyper,
    /// An RTT sample cut the rate (TIMELY).
    RttCut,
    /// INT showed a link above the target utilisation: the window was
    /// cut (HPCC).
    IntCut,
    /// INT showed the links under the target: the window grew by W_AI
    /// (HPCC).
    IntAdditive,
    /// Under the target for maxStage updates: the window grew
    /// multiplicatively (HPCC).
    IntHyper,
    /// A delay sample below the target grew the window (Swift).
    WindowIncrease,
    /// A delay sample above the target shrank the window (Swift).
    WindowDecrease,
}

impl TraceEvent {
    /// The event's snake_case name, as in the trace CSV.
    pub fn name(self) -> &'static str {
        match self {
            TraceEvent::Cnp => "cnp",
            TraceEvent::CnpIgnored => "cnp_ignored",
            TraceEvent::Cut => "cut",
            TraceEvent::FastRecovery => "fast_recovery",
            TraceEvent::AdditiveIncrease => "additive_increase",
            TraceEvent::HyperIncrease => "hyper_increase",
            TraceEvent::RttAdditive => "rtt_additive",
            TraceEvent::RttHyper => "rtt_hyper",
            TraceEvent::RttCut => "rtt_cut",
            TraceEvent::IntCut => "int_cut",
            TraceEvent::IntAdditive => "int_additive",
            TraceEvent::IntHyper => "int_hyper",
            TraceEvent::WindowIncrease => "window_increase",
            TraceEvent::WindowDecrease => "window_decrease",
        }
    }
}

/// One rate decision, with the state after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRecord {
    /// When the decision was made.
    pub time: Instant,
    /// What happened.
    pub event: TraceEvent,
    /// Rc, Rt, α and the stages after it.
    pub state: CcState,
}

impl TraceRecord {
    /// The CSV header matching [`TraceRecord`]'s `Display`.
    pub const CSV_HEADER: &'static str =
        "time_ns,event,rate_bps,target_bps,alpha,timer_stage,byte_stage,rtt_ns,window_bytes";
}

impl fmt::Display for TraceRecord {
    /// One CSV row (see [`TraceRecord::CSV_HEADER`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.state;
        write!(
            f,
            "{},{},{},{},{:.6},{},{},{},{}",
            self.time.as_nanos(),
            self.event.name(),
            s.rate_bps,
            s.target_bps,
            s.alpha,
            s.timer_stage,
            s.byte_stage,
            s.rtt_ns,
            s.window_bytes
        )
    }
}

/// A reaction point's rate control, one per QP.
pub trait RateController: fmt::Debug + Send {
    /// Runs every timer due by `now`, in time order (none by default).
    fn advance(&mut self, now: Instant) {
        let _ = now;
    }
    /// A CNP for this QP arrived at `now`.
    fn on_cnp(&mut self, now: Instant);
    /// A paced packet of `bytes` (the whole frame) left at `now`.
    fn on_sent(&mut self, now: Instant, bytes: u64) {
        let _ = (now, bytes);
    }
    /// Whether the controller reads acknowledgements (`on_ack`) or keeps
    /// a window: only then does the transport keep the send log that
    /// feeds them (work on every packet).
    fn reads_acks(&self) -> bool {
        false
    }
    /// Whether the controller needs INT telemetry in its acknowledgements
    /// ([`AckSample::int`]): a QP running it must have both ends agree
    /// to INT.
    fn needs_int(&self) -> bool {
        false
    }
    /// An acknowledgement arrived at `now` (after `on_cnp` for any CNP
    /// that came before it); called only if `reads_acks`.
    fn on_ack(&mut self, now: Instant, ack: &AckSample) {
        let _ = (now, ack);
    }
    /// The rate to pace at, bits per second; `None`: not limited.
    fn rate_bps(&self) -> Option<u64>;
    /// The most bytes the QP may have unacknowledged, on top of the rate;
    /// `None`: no window.
    fn window_bytes(&self) -> Option<u64> {
        None
    }
    /// When a timer may next change the rate (a rate increase, a deferred
    /// cut); `None`: no such timer runs. A caller holding a packet back
    /// wakes then to read the rate again.
    fn next_rate_change(&self) -> Option<Instant> {
        None
    }
    /// Rc, Rt, α and the stages now.
    fn state(&self) -> CcState;
    /// The controller's counters and trace.
    fn books(&self) -> &Books;
    /// The same, to change.
    fn books_mut(&mut self) -> &mut Books;
    /// The controller's counts of CNPs and rate changes.
    fn counters(&self) -> &CcCounters {
        &self.books().counters
    }
    /// Starts (`true`) or stops recording [`TraceRecord`]s.
    fn set_trace(&mut self, on: bool) {
        self.books_mut().trace.set(on);
    }
    /// Moves the records kept since the last call into `out`.
    fn drain_trace(&mut self, out: &mut Vec<TraceRecord>) {
        self.books_mut().trace.drain(out);
    }
}

/// What every controller keeps besides its rate: its counters and, when
/// asked, the trace of its decisions.
#[derive(Debug, Default)]
pub struct Books {
    counters: CcCounters,
    trace: Trace,
}

/// Which rate control a QP runs, with its parameters. Its TOML form is
/// `algorithm = "NAME"` and the parameters of that algorithm (see
/// `configs/cc/dcqcn-cx.toml`); `crate::config` reads it
/// (`CcConfig::load`, `CcConfig::from_toml`).
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize, serde::Serialize)]
#[serde(tag = "algorithm", rename_all = "kebab-case")]
pub enum CcConfig {
    /// No rate control: CNPs are counted as ignored.
    #[default]
    None,
    /// DCQCN as ConnectX firmware runs it, with its parameter names.
    DcqcnCx(CxParams),
    /// DCQCN with the parameters of the paper (Zhu et al., SIGCOMM 2015).
    DcqcnPaper(PaperParams),
    /// TIMELY, RTT-gradient rate control (Mittal et al., SIGCOMM 2015),
    /// patched as Zhu et al. (CoNEXT 2016) propose unless told not to.
    Timely(TimelyParams),
    /// DCTCP made rate-based on RoCE's ECN echo (the CNP), as the HPCC
    /// simulator runs it (Alizadeh et al., SIGCOMM 2010).
    Dctcp(DctcpParams),
    /// HPCC, window control from in-network telemetry (Li et al.,
    /// SIGCOMM 2019); needs INT telemetry on the QP's path.
    Hpcc(HpccParams),
    /// Swift, delay-based window control with a target scaled by hop
    /// count and window (Kumar et al., SIGCOMM 2020).
    Swift(SwiftParams),
}

impl CcConfig {
    /// A controller for a QP whose line rate is `line_bps` (bits per
    /// second; 0 when unknown).
    pub fn build(&self, line_bps: u64) -> Box<dyn RateController> {
        match self {
            CcConfig::None => Box::new(NoControl::new(line_bps)),
            CcConfig::DcqcnCx(p) => Box::new(DcqcnCx::new(p, line_bps)),
            CcConfig::DcqcnPaper(p) => Box::new(DcqcnPaper::new(p, line_bps)),
            CcConfig::Timely(p) => Box::new(Timely::new(p, line_bps)),
            CcConfig::Dctcp(p) => Box::new(Dctcp::new(p, line_bps)),
            CcConfig::Hpcc(p) => Box::new(Hpcc::new(p, line_bps)),
            CcConfig::Swift(p) => Box::new(Swift::new(p, line_bps)),
        }
    }

    /// Every algorithm's name, as [`CcConfig::name`] gives it.
    pub const NAMES: [&'static str; 7] = [
        "none",
        "dcqcn-cx",
        "dcqcn-paper",
        "timely",
        "dctcp",
        "hpcc",
        "swift",
    ];

    /// Whether the algorithm needs INT telemetry on the QP's path (both
    /// ends must agree to it: [`crate::wire::int`]).
    pub fn needs_int(&self) -> bool {
        matches!(self, CcConfig::Hpcc(_))
    }

    /// The command-line name of the algorithm (the `algorithm` key of its
    /// TOML).
    pub fn name(&self) -> &'static str {
        match self {
            CcConfig::None => "none",
            CcConfig::DcqcnCx(_) => "dcqcn-cx",
            CcConfig::DcqcnPaper(_) => "dcqcn-paper",
            CcConfig::Timely(_) => "timely",
            CcConfig::Dctcp(_) => "dctcp",
            CcConfig::Hpcc(_) => "hpcc",
            CcConfig::Swift(_) => "swift",
        }
    }

    /// The algorithm called `name`, with its default parameters.
    pub fn from_name(name: &str) -> Option<CcConfig> {
        match name {
            "none" => Some(CcConfig::None),
            "dcqcn-cx" => Some(CcConfig::DcqcnCx(CxParams::default())),
            "dcqcn-paper" => Some(CcConfig::DcqcnPaper(PaperParams::default())),
            "timely" => Some(CcConfig::Timely(TimelyParams::default())),
            "dctcp" => Some(CcConfig::Dctcp(DctcpParams::default())),
            "hpcc" => Some(CcConfig::Hpcc(HpccParams::default())),
            "swift" => Some(CcConfig::Swift(SwiftParams::default())),
            _ => None,
        }
    }

    /// Whether the parameters are in range; the error names the first
    /// that is not.
    pub fn check(&self) -> Result<(), String> {
        match self {
            CcConfig::None => Ok(()),
            CcConfig::DcqcnCx(p) => p.check(),
            CcConfig::DcqcnPaper(p) => p.check(),
            CcConfig::Timely(p) => p.check(),
            CcConfig::Dctcp(p) => p.check(),
            CcConfig::Hpcc(p) => p.check(),
            CcConfig::Swift(p) => p.check(),
        }
    }
}

/// The line rate assumed when neither the device nor the parameters give
/// one: 400 Gb/s. Our choice, an upper bound for the links this engine
/// drives; it only matters once a CNP has made the QP rate-limited.
pub const UNKNOWN_LINE_BPS: u64 = 400_000_000_000;

/// Megabits per second (the unit of the DCQCN rate parameters) in bits per
/// second.
fn mbps(v: u32) -> u64 {
    u64::from(v) * 1_000_000
}

/// The highest rate a controller uses: the configured maximum (`max_mbps`,
/// 0: none) and the line rate (`line_bps`, 0: unknown), whichever is
/// lower, or [`UNKNOWN_LINE_BPS`] when neither is known.
fn max_rate_bps(max_mbps: u32, line_bps: u64) -> u64 {
    match (mbps(max_mbps), line_bps) {
        (0, 0) => UNKNOWN_LINE_BPS,
        (0, line) => line,
        (max, 0) => max,
        (max, line) => max.min(line),
    }
}

/// The first of `values` that is 0, named: parameters that must be at
/// least 1.
fn check_positive(values: &[(&str, u32)]) -> Result<(), String> {
    match values.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(format!("{name} must be at least 1")),
        None => Ok(()),
    }
}

/// The highest rate (0: the line rate) must not be below the lowest.
fn check_rate_bounds(min_rate_mbps: u32, max_rate_mbps: u32) -> Result<(), String> {
    if max_rate_mbps != 0 && max_rate_mbps < min_rate_mbps {
        return Err(format!(
            "max_rate_mbps {max_rate_mbps} is below min_rate_mbps {min_rate_mbps}"
        ));
    }
    Ok(())
}

/// A period of `v` µs, at least 1 µs (a zero period would spin).
fn micros(v: u32) -> Duration {
    Duration::from_micros(u64::from(v.max(1)))
}

/// The earliest of `timers` (when, which; `None`: stopped) due by `now`;
/// at equal times the one listed first.
fn earliest_due<T: Copy, const N: usize>(
    now: Instant,
    timers: [(Option<Instant>, T); N],
) -> Option<(Instant, T)> {
    // A plain loop: it runs on every packet sent, and the iterator chain
    // it replaces compiled to several times the work.
    let mut best: Option<(Instant, T)> = None;
    for (at, timer) in timers {
        if let Some(at) = at.filter(|&at| at <= now) {
            // The first of equal minima wins.
            if !best.is_some_and(|(b, _)| at >= b) {
                best = Some((at, timer));
            }
        }
    }
    best
}

/// The earlier of two optional instants (`None` where neither is set).
pub(crate) fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Halfway from `rc` to `rt`, rounded towards `rt`: DCQCN's
/// Rc = (Rt + Rc) / 2 in integers. Rounding towards the target lets
/// repeated steps reach it (rounding down would stop one short forever).
fn halfway(rc: u64, rt: u64) -> u64 {
    if rc <= rt {
        rc + (rt - rc).div_ceil(2)
    } else {
        rc - (rc - rt).div_ceil(2)
    }
}

/// A controller's trace: off (`None`) or the records not yet drained.
#[derive(Debug, Default)]
struct Trace(Option<Vec<TraceRecord>>);

impl Trace {
    fn set(&mut self, on: bool) {
        self.0 = on.then(Vec::new);
    }

    fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn push(&mut self, time: Instant, event: TraceEvent, state: CcState) {
        if let Some(t) = &mut self.0 {
            t.push(TraceRecord { time, event, state });
        }
    }

    fn drain(&mut self, out: &mut Vec<TraceRecord>) {
        if let Some(t) = &mut self.0 {
            out.append(t);
        }
    }
}

/// No rate control: the rate is the line rate (or unlimited) and CNPs are
/// ignored.
#[derive(Debug, Default)]
pub struct NoControl {
    line_bps: u64,
    books: Books,
}

impl NoControl {
    /// No rate control; `line_bps` is what [`RateController::state`] reports as Rc and Rt.
    pub fn new(line_bps: u64) -> NoControl {
        NoControl {
            line_bps,
            ..NoControl::default()
        }
    }
}

impl RateController for NoControl {
    fn on_cnp(&mut self, now: Instant) {
        self.books.counters.rp_cnp_ignored += 1;
        let state = self.state();
        self.books.trace.push(now, TraceEvent::CnpIgnored, state);
    }

    fn rate_bps(&self) -> Option<u64> {
        None
    }

    fn state(&self) -> CcState {
        CcState {
            rate_bps: self.line_bps,
            target_bps: self.line_bps,
            alpha: 0.0,
            timer_stage: 0,
            byte_stage: 0,
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
    use super::hops_from_ttl;

    #[test]
    fn hops_count_down_from_the_nearest_common_initial_ttl() {
        for (ttl, hops) in [
            (64, 0),
            (63, 1),
            (60, 4),
            (0, 64),
            (128, 0),
            (126, 2),
            (65, 63),
            (255, 0),
            (250, 5),
            (129, 126),
        ] {
            assert_eq!(hops_from_ttl(ttl), hops, "ttl {ttl}");
        }
    }
}
