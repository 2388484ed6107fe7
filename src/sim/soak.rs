//! `ferroce sim`: two hosts on a simulated link run a mix of SEND, RDMA
//! WRITE, RDMA READ and atomics over one or more RC QP pairs, and every
//! byte is checked where it lands.
//!
//! Host A posts every work request; host B is the responder (it posts the
//! receive buffers). What is checked, per QP pair:
//!
//! - **SEND**: A's data lands in B's posted receive buffers, in posting
//!   order; each receive completion must carry the next expected message
//!   (bytes and `byte_len`), in receive-posting order, with the bytes just
//!   past it untouched; buffers are re-posted as they complete.
//! - **WRITE**: into a slot of B's memory of its own; when A's completion
//!   arrives, B's slot must hold the message (and the bytes just past it
//!   be untouched).
//! - **READ**: from a region of B filled with a seeded pattern, at a random
//!   offset, into a slot of A; compared on A's completion.
//! - **Atomics** (compare-and-swap and fetch-and-add on a few 8-byte words
//!   of B): a model applies them in posting order (RC executes them in
//!   order), so each returned original value is known in advance; the
//!   words' final values are compared with the model at the end.
//! - Every completion must succeed, and A's come in posting order.
//!
//! A slot is reused only after its work request completed; at most
//! `window` work requests are outstanding per QP. Every pattern follows
//! from the seed, so a seed and the parameters reproduce a run exactly
//! (the simulator is deterministic).
//!
//! Every loop stops by itself: a run ends when all is done, at the first
//! error, when nothing is left to happen, when no completion arrived for a
//! while of virtual time (a stall), when virtual time passes its limit, or
//! after a bounded number of steps.

#![deny(unsafe_code)]

use crate::backend::fabric::{LinkConfig, LinkCounters, Rng};
use crate::pcap;
use crate::sim::net::SimNet;
use crate::time::{Duration, Instant};
use crate::transport::connect::ConnectParams;
use crate::transport::{
    ack_timeout, Access, CqId, DeviceConfig, Event, MrKeys, MrSpec, Mtu, Payload, QpCaps,
    QpCounters, RecvWr, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use crate::wire::MacAddr;
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt;
use std::io::Write;

/// The largest message size a run accepts.
pub const MAX_SIZE: u32 = 1 << 20;
/// The most QP pairs a run accepts.
pub const MAX_QPS: u32 = 256;
/// The most work requests outstanding per QP a run accepts.
pub const MAX_WINDOW: u32 = 1024;
/// Atomic target words per QP pair.
const WORDS: usize = 4;
/// Bytes past each message that must stay untouched.
const GUARD: usize = 8;
/// What unwritten destination bytes hold.
const POISON: u8 = 0xA5;
/// How many problems a report describes (it counts them all).
const MAX_ERRORS: usize = 8;

/// An operation of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Send,
    Write,
    Read,
    /// Compare-and-swap or fetch-and-add, half each.
    Atomic,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Send, Op::Write, Op::Read, Op::Atomic];

    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
            Op::Atomic => "atomic",
        }
    }
}

/// Why a run cannot be set up as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown op {0:?} (expected send, write, read or atomic, comma-separated)")]
    UnknownOp(String),
    #[error("--ops names no operation")]
    NoOps,
    #[error("--size {0:?} is not MIN-MAX or SIZE (bytes, e.g. 1-4096)")]
    BadSize(String),
    #[error("--size: MIN {min} is larger than MAX {max}")]
    SizeOrder { min: u32, max: u32 },
    #[error("--size: MAX {0} is above the limit of {MAX_SIZE} bytes")]
    SizeTooLarge(u32),
    #[error("--mtu {0} is not one of 256, 512, 1024, 2048, 4096")]
    BadMtu(u32),
    #[error("--{field} {value} is not a probability in [0, 1]")]
    BadProbability { field: &'static str, value: f64 },
    #[error("--msgs must be at least 1")]
    NoMessages,
    #[error("--qps must be in 1..={MAX_QPS}, got {0}")]
    BadQps(u32),
    #[error("--window must be in 1..={MAX_WINDOW}, got {0}")]
    BadWindow(u32),
    #[error("--recvs must be in 1..={MAX_WINDOW}, got {0}")]
    BadRecvs(u32),
    #[error("--timeout must be in 1..=31, got {0}")]
    BadTimeout(u8),
    #[error("--retry-cnt must be in 0..=7, got {0}")]
    BadRetryCnt(u8),
    #[error("--reorder-delay must be above zero when --reorder is")]
    ReorderWithoutDelay,
    #[error("--time-limit must be above zero")]
    NoTime,
    #[error("{what} {text:?}: {why}")]
    BadValue {
        what: &'static str,
        text: String,
        why: &'static str,
    },
}

/// What a run does, before it is checked ([`SimRun::new`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The operations drawn from (uniformly) for each message.
    pub ops: Vec<Op>,
    /// Messages in all (spread over the QP pairs).
    pub msgs: u64,
    /// Message sizes, uniform in `size_min..=size_max` bytes (atomics are
    /// always 8).
    pub size_min: u32,
    pub size_max: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Both directions of the link (rate, delay, faults).
    pub link: LinkConfig,
    /// QP pairs between the two hosts.
    pub qps: u32,
    /// Both hosts post work requests on every QP pair (each QP is then a
    /// requester and a responder at once); otherwise A posts, B answers.
    pub bidir: bool,
    /// Work requests outstanding per QP at most.
    pub window: u32,
    /// Receive buffers B keeps posted per QP; `None` for `window + 8`, so
    /// that a SEND never waits. Fewer make B answer RNR NAKs.
    pub recvs: Option<u32>,
    /// How long after its completion B posts a receive buffer again (an
    /// application slow to consume; with few `recvs`, RNR NAKs).
    pub recv_delay: Duration,
    /// Local ACK timeout exponent (4.096 µs x 2^t); `None` picks one for
    /// the link (see [`SimRun::timeout`]).
    pub timeout: Option<u8>,
    pub retry_cnt: u8,
    /// Virtual time a run may take at most.
    pub time_limit: Duration,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            ops: Op::ALL.to_vec(),
            msgs: 2000,
            size_min: 1,
            size_max: 8192,
            mtu: 1024,
            link: LinkConfig::default(),
            qps: 1,
            bidir: false,
            window: 64,
            recvs: None,
            recv_delay: Duration::ZERO,
            timeout: None,
            retry_cnt: 7,
            time_limit: Duration::from_secs(120),
        }
    }
}

/// A checked [`SimConfig`]: [`SimRun::run`] it with a seed.
#[derive(Debug, Clone)]
pub struct SimRun {
    cfg: SimConfig,
    mtu: Mtu,
    timeout: u8,
}

/// The operations of a comma-separated list (`send,write,read,atomic`;
/// `all` for the four). Repeats weigh an operation more.
pub fn parse_ops(s: &str) -> Result<Vec<Op>, ConfigError> {
    let mut ops = Vec::new();
    for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match w.to_ascii_lowercase().as_str() {
            "send" => ops.push(Op::Send),
            "write" => ops.push(Op::Write),
            "read" => ops.push(Op::Read),
            "atomic" | "atomics" => ops.push(Op::Atomic),
            "all" => ops.extend(Op::ALL),
            _ => return Err(ConfigError::UnknownOp(w.to_string())),
        }
    }
    if ops.is_empty() {
        return Err(ConfigError::NoOps);
    }
    Ok(ops)
}

/// `MIN-MAX` or one size, in bytes, with an optional `K` / `M` suffix
/// (binary: 4K = 4096).
pub fn parse_size(s: &str) -> Result<(u32, u32), ConfigError> {
    let bad = || ConfigError::BadSize(s.to_string());
    let one = |t: &str| -> Result<u32, ConfigError> {
        let t = t.trim();
        let (num, mul) = match t.char_indices().last() {
            Some((i, 'k' | 'K')) => (&t[..i], 1024u64),
            Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
            _ => (t, 1),
        };
        let v: u64 = num.parse().map_err(|_| bad())?;
        u32::try_from(v.checked_mul(mul).ok_or_else(bad)?).map_err(|_| bad())
    };
    let (min, max) = match s.split_once('-') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let v = one(s)?;
            (v, v)
        }
    };
    if min > max {
        return Err(ConfigError::SizeOrder { min, max });
    }
    Ok((min, max))
}

/// A rate in bits per second: `100G`, `25g`, `10Gbps`, `400M`, `1000000`
/// (plain bits per second); `0` or `inf` for no serialisation time.
pub fn parse_rate(s: &str) -> Result<u64, ConfigError> {
    let bad = |why| ConfigError::BadValue {
        what: "rate",
        text: s.to_string(),
        why,
    };
    let t = s.trim().to_ascii_lowercase();
    if t == "inf" {
        return Ok(0);
    }
    let t = t
        .strip_suffix("bps")
        .or_else(|| t.strip_suffix("b/s"))
        .unwrap_or(&t);
    let (num, mul) = match t.chars().last() {
        Some('t') => (&t[..t.len() - 1], 1e12),
        Some('g') => (&t[..t.len() - 1], 1e9),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('k') => (&t[..t.len() - 1], 1e3),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| bad("expected a number with an optional K, M, G or T (e.g. 100G)"))?;
    let bps = v * mul;
    if !(0.0..=1e15).contains(&bps) {
        return Err(bad("out of range (0 to 1000T)"));
    }
    Ok(bps.round() as u64)
}

/// A duration: a number with `ns`, `us`, `ms` or `s` (`1us`, `2.5ms`).
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    let bad = |why| ConfigError::BadValue {
        what: "duration",
        text: s.to_string(),
        why,
    };
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(bad("expected a unit: ns, us, ms or s (e.g. 1us)"));
    };
    let v: f64 = num.trim().parse().map_err(|_| bad("not a number"))?;
    let ns = v * mul;
    if !(0.0..=1e15).contains(&ns) {
        return Err(bad("out of range"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// `A-B` (inclusive) or one seed.
pub fn parse_seeds(s: &str) -> Result<(u64, u64), ConfigError> {
    let bad = |why| ConfigError::BadValue {
        what: "seeds",
        text: s.to_string(),
        why,
    };
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| bad("expected A-B, two whole numbers"))
    };
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let v = num(s)?;
            (v, v)
        }
    };
    if a > b {
        return Err(bad("the first seed is larger than the last"));
    }
    Ok((a, b))
}

impl SimRun {
    /// Checks `cfg`: known ops, MIN <= MAX <= [`MAX_SIZE`], one of the five
    /// MTUs, probabilities in [0, 1], sensible counts.
    pub fn new(cfg: SimConfig) -> Result<SimRun, ConfigError> {
        if cfg.ops.is_empty() {
            return Err(ConfigError::NoOps);
        }
        if cfg.msgs == 0 {
            return Err(ConfigError::NoMessages);
        }
        if cfg.size_min > cfg.size_max {
            return Err(ConfigError::SizeOrder {
                min: cfg.size_min,
                max: cfg.size_max,
            });
        }
        if cfg.size_max > MAX_SIZE {
            return Err(ConfigError::SizeTooLarge(cfg.size_max));
        }
        let mtu = Mtu::from_bytes(cfg.mtu).ok_or(ConfigError::BadMtu(cfg.mtu))?;
        let l = &cfg.link;
        for (field, value) in [
            ("loss", l.loss),
            ("reorder", l.reorder),
            ("dup", l.dup),
            ("corrupt", l.corrupt),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ConfigError::BadProbability { field, value });
            }
        }
        if l.reorder > 0.0 && l.reorder_delay == Duration::ZERO {
            return Err(ConfigError::ReorderWithoutDelay);
        }
        if cfg.qps == 0 || cfg.qps > MAX_QPS {
            return Err(ConfigError::BadQps(cfg.qps));
        }
        if cfg.window == 0 || cfg.window > MAX_WINDOW {
            return Err(ConfigError::BadWindow(cfg.window));
        }
        if let Some(n) = cfg.recvs {
            if n == 0 || n > MAX_WINDOW {
                return Err(ConfigError::BadRecvs(n));
            }
        }
        if let Some(t) = cfg.timeout {
            if !(1..=31).contains(&t) {
                return Err(ConfigError::BadTimeout(t));
            }
        }
        if cfg.retry_cnt > 7 {
            return Err(ConfigError::BadRetryCnt(cfg.retry_cnt));
        }
        if cfg.time_limit == Duration::ZERO {
            return Err(ConfigError::NoTime);
        }
        let timeout = cfg.timeout.unwrap_or_else(|| auto_timeout(&cfg));
        Ok(SimRun { cfg, mtu, timeout })
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The local ACK timeout exponent the QPs use: the one asked for, or
    /// the smallest of at least 10 (4.2 ms) that is 4x the worst time
    /// between two acknowledgements (see [`auto_timeout`]).
    pub fn timeout(&self) -> u8 {
        self.timeout
    }

    /// Runs the mix with `seed` (faults and data); `capture` records the
    /// frames one host sends (before any fault) and receives (after them).
    pub fn run(&self, seed: u64, capture: Option<(Side, pcap::Writer<Box<dyn Write>>)>) -> Report {
        let wall = std::time::Instant::now();
        let mut r = Report::new(seed, self);
        let mut run = match Run::setup(self, seed, &mut r) {
            Ok(run) => run,
            Err(e) => {
                r.problem(format!("setup: {e}"));
                r.wall_s = wall.elapsed().as_secs_f64();
                return r;
            }
        };
        let captured = capture.map(|(side, w)| {
            let h = run.net.hosts[side.index()].host;
            if let Err(e) = run.net.fabric.capture(h, w) {
                r.problem(format!("capture: {e}"));
            }
            h
        });
        run.drive(&mut r);
        run.finish(&mut r);
        if let Some(h) = captured {
            if let Err(e) = run.net.fabric.end_capture(h) {
                r.problem(format!("capture: {e}"));
            }
        }
        r.wall_s = wall.elapsed().as_secs_f64();
        r
    }
}

/// The longest a QP of this run can wait between two acknowledgements,
/// four times over: a round trip with the largest reordering delay on both
/// ways, plus the serialisation of every byte the QPs may have outstanding
/// (both directions, headers included). A local ACK timeout shorter than
/// this retries packets that are not lost (and, go-back-N resending whole
/// windows into the queue that delayed them, can collapse).
pub fn needed_timeout(cfg: &SimConfig) -> Duration {
    let l = &cfg.link;
    let rtt = 2 * (l.delay.as_nanos() + l.reorder_delay.as_nanos());
    let pkts = (cfg.size_max as u64)
        .div_ceil(cfg.mtu.max(256) as u64)
        .max(1);
    let dirs = if cfg.bidir { 2 } else { 1 };
    let bytes = dirs * cfg.qps as u64 * cfg.window as u64 * (cfg.size_max as u64 + 100 * pkts);
    let ser = crate::backend::fabric::serialization_time(
        usize::try_from(bytes).unwrap_or(usize::MAX),
        l.rate_bps,
    )
    .as_nanos();
    Duration::from_nanos(4 * (rtt + 2 * ser))
}

/// The timeout exponent [`SimRun::new`] picks when none is given: the
/// smallest t >= 10 whose 4.096 µs x 2^t covers [`needed_timeout`]. 10
/// (4.2 ms) is far above that at the defaults (100 Gb/s, 1 µs, 64 x 8 KiB
/// outstanding: ~0.3 ms), so a retry is a loss and not an impatient timer,
/// and a lost tail costs 4 ms of virtual time, not the 67 ms of the usual
/// 14 (virtual time is free, but the tail of a run is shorter to read in
/// a capture).
pub fn auto_timeout(cfg: &SimConfig) -> u8 {
    let need = needed_timeout(cfg).as_nanos();
    (10..=31).find(|&t| 4096u64 << t >= need).unwrap_or(31)
}

/// One of the two hosts: A posts the work requests (B too with
/// [`SimConfig::bidir`]), B answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Side {
    A,
    B,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::A => A,
            Side::B => B,
        }
    }
}

/// What happened to each kind of operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    pub send: u64,
    pub write: u64,
    pub read: u64,
    pub cmp_swap: u64,
    pub fetch_add: u64,
}

impl OpCounts {
    fn add(&mut self, o: &OpCounts) {
        self.send += o.send;
        self.write += o.write;
        self.read += o.read;
        self.cmp_swap += o.cmp_swap;
        self.fetch_add += o.fetch_add;
    }
}

/// The faults the link injected (both directions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Faults {
    pub frames: u64,
    pub lost: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub tail_dropped: u64,
}

impl Faults {
    fn add_link(&mut self, c: &LinkCounters) {
        self.frames += c.tx_frames;
        self.lost += c.dropped_loss;
        self.corrupted += c.corrupted;
        self.duplicated += c.duplicated;
        self.reordered += c.reordered;
        self.tail_dropped += c.dropped_queue;
    }
    fn add(&mut self, o: &Faults) {
        self.frames += o.frames;
        self.lost += o.lost;
        self.corrupted += o.corrupted;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.tail_dropped += o.tail_dropped;
    }
}

/// What one run did and found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    /// Messages asked for.
    pub messages: u64,
    /// Messages completed and verified.
    pub completed: u64,
    pub ops: OpCounts,
    /// Payload bytes compared at their destination (atomics: 8 each).
    pub bytes_verified: u64,
    /// Request packets sent again (go-back-N).
    pub retransmitted: u64,
    /// NAKs received by the requester: PSN sequence errors and RNR.
    pub naks: u64,
    pub seq_naks: u64,
    pub rnr_naks: u64,
    /// READ / atomic responses found missing by a later response.
    pub implied_naks: u64,
    /// Local ACK timer expiries.
    pub timeouts: u64,
    /// Completions with a status other than success.
    pub error_completions: u64,
    /// Data, length, order or atomic results that differ from what was
    /// sent or modelled.
    pub mismatches: u64,
    /// Why the run stopped early without an error completion, if it did.
    pub hang: Option<String>,
    /// The first problems, described.
    pub problems: Vec<String>,
    /// Frames the receivers dropped for a bad ICRC.
    pub icrc_drops: u64,
    /// Frames the receivers found malformed (a corrupted IP header).
    pub malformed: u64,
    pub faults: Faults,
    /// The local ACK timeout exponent used.
    pub timeout_exp: u8,
    /// Virtual time the run took, in nanoseconds.
    pub virtual_ns: u64,
    pub wall_s: f64,
    pub verify: bool,
}

impl Report {
    fn new(seed: u64, run: &SimRun) -> Report {
        Report {
            seed,
            messages: run.cfg.msgs,
            completed: 0,
            ops: OpCounts::default(),
            bytes_verified: 0,
            retransmitted: 0,
            naks: 0,
            seq_naks: 0,
            rnr_naks: 0,
            implied_naks: 0,
            timeouts: 0,
            error_completions: 0,
            mismatches: 0,
            hang: None,
            problems: Vec::new(),
            icrc_drops: 0,
            malformed: 0,
            faults: Faults::default(),
            timeout_exp: run.timeout,
            virtual_ns: 0,
            wall_s: 0.0,
            verify: false,
        }
    }

    /// Every message completed, verified, without an error completion.
    pub fn ok(&self) -> bool {
        self.completed == self.messages
            && self.error_completions == 0
            && self.mismatches == 0
            && self.hang.is_none()
            && self.problems.is_empty()
    }

    fn problem(&mut self, s: String) {
        if self.problems.len() < MAX_ERRORS {
            self.problems.push(s);
        }
    }

    fn mismatch(&mut self, s: String) {
        self.mismatches += 1;
        self.problem(s);
    }

    /// Simulated messages per wall-clock second.
    pub fn msgs_per_wall_s(&self) -> f64 {
        self.completed as f64 / self.wall_s.max(1e-9)
    }

    /// The one summary line.
    pub fn line(&self) -> String {
        format!(
            "seed={} msgs={}/{} bytes={} retrans={} naks={} timeouts={} errors={} \
             lost={} corrupt={} dup={} reord={} vtime={} wall={:.3}s rate={:.0}msg/s verify={}",
            self.seed,
            self.completed,
            self.messages,
            self.bytes_verified,
            self.retransmitted,
            self.naks,
            self.timeouts,
            self.error_completions,
            self.faults.lost,
            self.faults.corrupted,
            self.faults.duplicated,
            self.faults.reordered,
            Duration::from_nanos(self.virtual_ns),
            self.wall_s,
            self.msgs_per_wall_s(),
            if self.ok() { "ok" } else { "FAIL" }
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line())
    }
}

/// The sum of many runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub runs: u64,
    pub failed: u64,
    /// Seeds of the failed runs.
    pub failed_seeds: Vec<u64>,
    pub messages: u64,
    pub completed: u64,
    pub ops: OpCounts,
    pub bytes_verified: u64,
    pub retransmitted: u64,
    pub naks: u64,
    pub implied_naks: u64,
    pub timeouts: u64,
    pub error_completions: u64,
    pub mismatches: u64,
    pub icrc_drops: u64,
    pub faults: Faults,
    pub virtual_ns: u64,
    pub wall_s: f64,
    pub verify: bool,
}

impl Totals {
    pub fn add(&mut self, r: &Report) {
        self.runs += 1;
        if !r.ok() {
            self.failed += 1;
            self.failed_seeds.push(r.seed);
        }
        self.messages += r.messages;
        self.completed += r.completed;
        self.ops.add(&r.ops);
        self.bytes_verified += r.bytes_verified;
        self.retransmitted += r.retransmitted;
        self.naks += r.naks;
        self.implied_naks += r.implied_naks;
        self.timeouts += r.timeouts;
        self.error_completions += r.error_completions;
        self.mismatches += r.mismatches;
        self.icrc_drops += r.icrc_drops;
        self.faults.add(&r.faults);
        self.virtual_ns += r.virtual_ns;
        self.wall_s += r.wall_s;
        self.verify = self.failed == 0 && self.runs > 0;
    }

    pub fn ok(&self) -> bool {
        self.runs > 0 && self.failed == 0
    }

    pub fn msgs_per_wall_s(&self) -> f64 {
        self.completed as f64 / self.wall_s.max(1e-9)
    }

    pub fn line(&self) -> String {
        let mut failed = String::new();
        if self.failed > 0 {
            let list: Vec<String> = self
                .failed_seeds
                .iter()
                .take(20)
                .map(|s| s.to_string())
                .collect();
            failed = format!(
                " failed_seeds={}{}",
                list.join(","),
                if self.failed_seeds.len() > 20 {
                    ",..."
                } else {
                    ""
                }
            );
        }
        format!(
            "total runs={} failed={} msgs={}/{} bytes={} retrans={} naks={} timeouts={} errors={} \
             mismatches={} wall={:.3}s rate={:.0}msg/s{} verify={}",
            self.runs,
            self.failed,
            self.completed,
            self.messages,
            self.bytes_verified,
            self.retransmitted,
            self.naks,
            self.timeouts,
            self.error_completions,
            self.mismatches,
            self.wall_s,
            self.msgs_per_wall_s(),
            failed,
            if self.ok() { "ok" } else { "FAIL" }
        )
    }
}

// ----- the run -----

/// A work request posted on A and not yet completed.
#[derive(Debug)]
struct Pending {
    wr_id: u64,
    slot: usize,
    len: u32,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send,
    /// The data's seed (also for a SEND's check at B).
    Write {
        data: u64,
    },
    Read {
        /// Offset in B's read region.
        from: usize,
    },
    CmpSwap {
        word: usize,
        orig: u64,
    },
    FetchAdd {
        word: usize,
        orig: u64,
    },
}

impl Kind {
    fn opcode(self) -> WcOpcode {
        match self {
            Kind::Send => WcOpcode::Send,
            Kind::Write { .. } => WcOpcode::RdmaWrite,
            Kind::Read { .. } => WcOpcode::RdmaRead,
            Kind::CmpSwap { .. } => WcOpcode::CompSwap,
            Kind::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A SEND B must receive, in order.
#[derive(Debug)]
struct Expected {
    wr_id: u64,
    data: u64,
    len: u32,
}

/// Where things are in a pair's memory regions (offsets).
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Bytes per slot (the largest message and its guard, rounded up).
    slot: usize,
    window: usize,
    recvs: usize,
    // A's region.
    a_src: usize,
    a_dst: usize,
    a_len: usize,
    // B's region.
    b_recv: usize,
    b_write: usize,
    b_read: usize,
    b_read_len: usize,
    b_words: usize,
    b_len: usize,
}

impl Layout {
    fn new(size_max: u32, window: u32, recvs: Option<u32>) -> Layout {
        let slot = (size_max as usize + GUARD).div_ceil(64) * 64;
        let window = window as usize;
        let recvs = recvs.map_or(window + 8, |n| n as usize);
        let a_src = 0;
        let a_dst = a_src + window * slot;
        let a_len = a_dst + window * slot;
        let b_recv = 0;
        let b_write = b_recv + recvs * slot;
        let b_read = b_write + window * slot;
        let b_read_len = size_max as usize + 4096;
        let b_words = (b_read + b_read_len).div_ceil(64) * 64;
        let b_len = b_words + WORDS * 8 + 64;
        Layout {
            slot,
            window,
            recvs,
            a_src,
            a_dst,
            a_len,
            b_recv,
            b_write,
            b_read,
            b_read_len,
            b_words,
            b_len,
        }
    }
}

/// One direction of a QP pair: the requester's QP (on host `req`) posts,
/// the responder's (on host `resp`) answers. The `a` fields are the
/// requester's, the `b` fields the responder's.
struct Pair {
    req: usize,
    resp: usize,
    qa: u32,
    qb: u32,
    /// The requester's send CQ and the responder's receive CQ.
    cqa: CqId,
    cqb: CqId,
    mra: MrKeys,
    mrb: MrKeys,
    /// Messages this flow runs, and how many are posted.
    quota: u64,
    posted: u64,
    done: u64,
    pending: VecDeque<Pending>,
    free: Vec<usize>,
    expected: VecDeque<Expected>,
    /// The receive slot whose completion comes next.
    next_recv: usize,
    /// The atomic words as the model has them.
    words: [u64; WORDS],
    /// B's read region as filled.
    read_src: Vec<u8>,
    /// Receive slots to post again, and when.
    reposts: VecDeque<(Instant, usize)>,
}

impl Pair {
    /// The requester's QP, named for messages.
    fn a(&self) -> String {
        format!("{} qp {:#x}", NAMES[self.req], self.qa)
    }
    /// The responder's QP.
    fn b(&self) -> String {
        format!("{} qp {:#x}", NAMES[self.resp], self.qb)
    }
}

struct Run<'a> {
    sim: &'a SimRun,
    net: SimNet,
    pairs: Vec<Pair>,
    lay: Layout,
    rng: Rng,
    seed: u64,
    scratch: Vec<u8>,
    wcs: Vec<Wc>,
    /// The last instant a completion arrived.
    last_progress: Instant,
}

const A: usize = 0;
const B: usize = 1;
const NAMES: [&str; 2] = ["A", "B"];

/// Fills `buf` with the pattern of `seed` (splitmix64 words).
fn fill(seed: u64, buf: &mut [u8]) {
    let mut s = seed;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&splitmix(&mut s).to_le_bytes());
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let w = splitmix(&mut s).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&w[..n]);
    }
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where two byte strings first differ.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    a.iter().zip(b).position(|(x, y)| x != y).or_else(|| {
        if a.len() == b.len() {
            None
        } else {
            Some(a.len().min(b.len()))
        }
    })
}

impl<'a> Run<'a> {
    fn setup(sim: &'a SimRun, seed: u64, r: &mut Report) -> Result<Run<'a>, String> {
        let cfg = &sim.cfg;
        let mut net = SimNet::new(seed);
        let err = |e: crate::transport::Error| e.to_string();
        let a = net
            .add_host(DeviceConfig::new(
                MacAddr([2, 0, 0, 0, 0, 1]),
                "198.18.0.1".parse().expect("an IPv4 address"),
            ))
            .map_err(err)?;
        let b = net
            .add_host(DeviceConfig::new(
                MacAddr([2, 0, 0, 0, 0, 2]),
                "198.18.0.2".parse().expect("an IPv4 address"),
            ))
            .map_err(err)?;
        debug_assert_eq!((a, b), (A, B));
        net.connect(a, b, cfg.link).map_err(|e| e.to_string())?;
        let lay = Layout::new(cfg.size_max, cfg.window, cfg.recvs);
        // The workload's own generator, apart from the fabric's.
        let mut rng = Rng::new(seed ^ 0x5eed_f00d_cafe_0001);
        let mut pairs = Vec::new();
        let dirs: &[(usize, usize)] = if cfg.bidir {
            &[(A, B), (B, A)]
        } else {
            &[(A, B)]
        };
        let flows = cfg.qps as u64 * dirs.len() as u64;
        for k in 0..cfg.qps {
            // One QP on each host, with its own send and receive CQs.
            let mut ends = Vec::new();
            for h in [A, B] {
                let d = &mut net.hosts[h].dev;
                let pd = d.alloc_pd();
                let scq = d.create_cq(lay.window + 16).map_err(err)?;
                let rcq = d.create_cq(lay.recvs + 16).map_err(err)?;
                let caps = QpCaps {
                    max_send_wr: cfg.window.max(16),
                    max_recv_wr: lay.recvs as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                    ..QpCaps::default()
                };
                let qp = d.create_qp(pd, scq, rcq, caps).map_err(err)?;
                ends.push((pd, scq, rcq, qp));
            }
            // Start A's PSNs just before the 24-bit wrap on even seeds.
            let psn_a = if (seed + k as u64) % 2 == 0 {
                0xFF_FFFF - rng.below(4096) as u32
            } else {
                rng.below(1 << 24) as u32
            };
            let p = ConnectParams {
                mtu: sim.mtu,
                timeout: sim.timeout,
                retry_cnt: cfg.retry_cnt,
                psn_a,
                psn_b: rng.below(1 << 24) as u32,
                ..ConnectParams::default()
            };
            net.connect_qps(A, ends[A].3, B, ends[B].3, &p)
                .map_err(err)?;
            for &(req, resp) in dirs {
                let f = pairs.len() as u64;
                let quota = cfg.msgs / flows + u64::from(f < cfg.msgs % flows);
                let reg = |net: &mut SimNet, h: usize, len: usize| {
                    net.hosts[h]
                        .dev
                        .reg_mr(MrSpec {
                            pd: ends[h].0,
                            len,
                            access: Access::ALL,
                            addr: None,
                            key: None,
                        })
                        .map_err(err)
                };
                let mra = reg(&mut net, req, lay.a_len)?;
                let mrb = reg(&mut net, resp, lay.b_len)?;
                // Poison every destination; fill the read region and words.
                net.hosts[req]
                    .dev
                    .mr_mut(mra.lkey)
                    .ok_or("the requester's region")?
                    .fill(POISON);
                let mut read_src = vec![0u8; lay.b_read_len];
                fill(rng.next_u64(), &mut read_src);
                let mut words = [0u64; WORDS];
                for w in &mut words {
                    // Near the top now and then, so that fetch-and-add
                    // wraps.
                    *w = if rng.below(4) == 0 {
                        u64::MAX - rng.below(16)
                    } else {
                        rng.next_u64()
                    };
                }
                let mb = net.hosts[resp]
                    .dev
                    .mr_mut(mrb.lkey)
                    .ok_or("the responder's region")?;
                mb.fill(POISON);
                mb[lay.b_read..lay.b_read + lay.b_read_len].copy_from_slice(&read_src);
                for (i, w) in words.iter().enumerate() {
                    let at = lay.b_words + 8 * i;
                    mb[at..at + 8].copy_from_slice(&w.to_le_bytes());
                }
                let mut pair = Pair {
                    req,
                    resp,
                    qa: ends[req].3,
                    qb: ends[resp].3,
                    cqa: ends[req].1,
                    cqb: ends[resp].2,
                    mra,
                    mrb,
                    quota,
                    posted: 0,
                    done: 0,
                    pending: VecDeque::new(),
                    free: (0..lay.window).rev().collect(),
                    expected: VecDeque::new(),
                    next_recv: 0,
                    words,
                    read_src,
                    reposts: VecDeque::new(),
                };
                for slot in 0..lay.recvs {
                    post_recv(&mut net, &mut pair, &lay, slot).map_err(err)?;
                }
                pairs.push(pair);
            }
        }
        let _ = r;
        Ok(Run {
            sim,
            net,
            pairs,
            lay,
            rng,
            seed,
            scratch: Vec::with_capacity(lay.slot),
            wcs: Vec::with_capacity(256),
            last_progress: Instant::ZERO,
        })
    }

    fn all_done(&self) -> bool {
        self.pairs
            .iter()
            .all(|p| p.done == p.quota && p.expected.is_empty())
    }

    /// Runs until done, the first error, or a limit.
    fn drive(&mut self, r: &mut Report) {
        let cfg = &self.sim.cfg;
        let timeout = ack_timeout(self.sim.timeout).unwrap_or(Duration::from_millis(100));
        // No completion for this long is a stall: the transport would have
        // given up (retry_cnt + 1 timeouts) several times over, a receive
        // buffer come back, the link drained its queues.
        let stall = Duration::from_millis(100)
            .max(timeout.saturating_mul(4 * (cfg.retry_cnt as u64 + 1)))
            .max(cfg.recv_delay.saturating_mul(4))
            .max(Duration::from_nanos(
                8 * (cfg.link.delay.as_nanos() + cfg.link.reorder_delay.as_nanos()),
            ))
            .max(needed_timeout(cfg).saturating_mul(4));
        let end = self.net.now() + cfg.time_limit;
        // Steps: generous for the packets the run needs, but finite. A
        // receive buffer that comes back late makes the sender retry every
        // RNR timer (10 us here) with its whole window meanwhile.
        let per_msg = cfg.size_max as u64 / self.sim.mtu.bytes() as u64 + 2;
        let mut max_steps = 200 * per_msg * cfg.msgs + 1_000_000;
        if cfg.recv_delay > Duration::ZERO {
            let rounds = cfg.recv_delay.as_nanos() / 10_000 + 1;
            max_steps = max_steps.saturating_add(
                (4 * rounds * cfg.window as u64 * per_msg).saturating_mul(cfg.msgs),
            );
        }
        let mut steps = 0u64;
        let mut same_instant = 0u64;
        loop {
            steps += 1;
            if steps > max_steps {
                r.hang = Some(format!(
                    "no end after {max_steps} steps at {}",
                    self.vtime()
                ));
                return;
            }
            let mut rounds = 0;
            while self.net.pump_all() > 0 {
                rounds += 1;
                if rounds > 1_000_000 {
                    r.hang = Some(format!("frames never stop at {}", self.vtime()));
                    return;
                }
            }
            let moved = self.step(r);
            if self.failed(r) {
                return;
            }
            if self.all_done() {
                return;
            }
            if moved {
                continue;
            }
            let now = self.net.now();
            if now.saturating_since(self.last_progress) > stall {
                r.hang = Some(format!(
                    "stalled: no completion from {} to {} ({})",
                    Duration::from_nanos(self.last_progress.as_nanos()),
                    self.vtime(),
                    self.outstanding()
                ));
                return;
            }
            let next = match (self.net.next_time(), self.next_repost()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let Some(t) = next else {
                r.hang = Some(format!(
                    "nothing left to happen at {} ({})",
                    self.vtime(),
                    self.outstanding()
                ));
                return;
            };
            if t > end {
                r.hang = Some(format!(
                    "time limit: {} of virtual time ({})",
                    cfg.time_limit,
                    self.outstanding()
                ));
                return;
            }
            if t <= now {
                same_instant += 1;
                if same_instant > 100_000 {
                    r.hang = Some(format!("time does not advance at {}", self.vtime()));
                    return;
                }
            } else {
                same_instant = 0;
            }
            self.net.fabric.advance_to(t.max(now));
        }
    }

    fn vtime(&self) -> Duration {
        Duration::from_nanos(self.net.now().as_nanos())
    }

    fn outstanding(&self) -> String {
        let p: Vec<String> = self
            .pairs
            .iter()
            .map(|p| {
                format!(
                    "qp {:#x}: {}/{} done, {} outstanding, {} sends unreceived",
                    p.qa,
                    p.done,
                    p.quota,
                    p.pending.len(),
                    p.expected.len()
                )
            })
            .collect();
        p.join("; ")
    }

    fn failed(&self, r: &Report) -> bool {
        r.error_completions > 0 || r.mismatches > 0 || !r.problems.is_empty()
    }

    /// Completions and events in, new work out; whether anything moved.
    fn step(&mut self, r: &mut Report) -> bool {
        let mut moved = false;
        for h in [A, B] {
            while let Some(ev) = self.net.hosts[h].dev.poll_event() {
                match ev {
                    Event::QpError { qpn, status } => r.problem(format!(
                        "host {} QP {qpn:#x} went to ERR: {status}",
                        NAMES[h]
                    )),
                    Event::SqDrained { .. } | Event::CqOverrun { .. } => {}
                }
            }
        }
        for i in 0..self.pairs.len() {
            moved |= self.poll_b(i, r);
            moved |= self.repost(i, r);
            moved |= self.poll_a(i, r);
            moved |= self.post(i, r);
        }
        moved
    }

    /// Every completion waiting on `cq` of host `host` (in the reused
    /// buffer: hand it back to `self.wcs`), noting progress if any.
    fn completions(&mut self, host: usize, cq: CqId) -> Vec<Wc> {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        self.net.hosts[host].dev.poll_cq(cq, usize::MAX, &mut wcs);
        if !wcs.is_empty() {
            self.last_progress = self.net.now();
        }
        wcs
    }

    /// B's receive completions: the next expected SEND, byte for byte.
    fn poll_b(&mut self, i: usize, r: &mut Report) -> bool {
        let (host, cq) = (self.pairs[i].resp, self.pairs[i].cqb);
        let wcs = self.completions(host, cq);
        let moved = !wcs.is_empty();
        for wc in &wcs {
            let p = &mut self.pairs[i];
            if wc.status != WcStatus::Success {
                r.error_completions += 1;
                r.problem(format!(
                    "{}: receive {} completed with {} ({:?})",
                    p.b(),
                    wc.wr_id,
                    wc.status,
                    wc.opcode
                ));
                continue;
            }
            let slot = wc.wr_id as usize;
            if slot != p.next_recv || wc.opcode != WcOpcode::Recv || wc.qp_num != p.qb {
                r.mismatch(format!(
                    "{}: receive completion {:?} {} on qp {:#x}, expected Recv {} on {:#x}",
                    p.b(),
                    wc.opcode,
                    wc.wr_id,
                    wc.qp_num,
                    p.next_recv,
                    p.qb
                ));
                continue;
            }
            p.next_recv = (p.next_recv + 1) % self.lay.recvs;
            let Some(e) = p.expected.pop_front() else {
                r.mismatch(format!(
                    "{}: receive {} completed with no SEND outstanding",
                    p.b(),
                    wc.wr_id
                ));
                continue;
            };
            let at = self.lay.b_recv + slot * self.lay.slot;
            let len = e.len as usize;
            let ok_len = wc.byte_len == e.len;
            self.scratch.clear();
            self.scratch.resize(len, 0);
            fill(e.data, &mut self.scratch);
            let mb = self.net.hosts[p.resp].dev.mr(p.mrb.lkey).unwrap_or(&[]);
            let got = &mb[at..at + len];
            let guard = &mb[at + len..at + len + GUARD];
            if !ok_len {
                r.mismatch(format!(
                    "{}: SEND {} received with byte_len {}, sent {}",
                    p.b(),
                    e.wr_id,
                    wc.byte_len,
                    e.len
                ));
            } else if let Some(d) = first_diff(got, &self.scratch) {
                r.mismatch(format!(
                    "{}: SEND {} ({} B) differs at byte {d}",
                    p.b(),
                    e.wr_id,
                    e.len
                ));
            } else if guard.iter().any(|&x| x != POISON) {
                r.mismatch(format!(
                    "{}: SEND {} ({} B) wrote past its end",
                    p.b(),
                    e.wr_id,
                    e.len
                ));
            } else {
                r.bytes_verified += e.len as u64;
            }
            // Poison what it wrote, and give the buffer back.
            if let Some(mb) = self.net.hosts[p.resp].dev.mr_mut(p.mrb.lkey) {
                mb[at..at + len].fill(POISON);
            }
            let due = self.net.now() + self.sim.cfg.recv_delay;
            p.reposts.push_back((due, slot));
        }
        self.wcs = wcs;
        moved
    }

    /// Posts B's receive buffers again once their delay is over.
    fn repost(&mut self, i: usize, r: &mut Report) -> bool {
        let now = self.net.now();
        let p = &mut self.pairs[i];
        let mut moved = false;
        while let Some(&(due, slot)) = p.reposts.front() {
            if due > now {
                break;
            }
            p.reposts.pop_front();
            if let Err(e) = post_recv(&mut self.net, p, &self.lay, slot) {
                r.problem(format!("{}: post_recv: {e}", p.b()));
            }
            moved = true;
        }
        moved
    }

    /// The next instant the harness itself has something to do.
    fn next_repost(&self) -> Option<Instant> {
        self.pairs
            .iter()
            .filter_map(|p| p.reposts.front().map(|&(t, _)| t))
            .min()
    }

    /// A's send completions: in posting order, each checked at its
    /// destination.
    fn poll_a(&mut self, i: usize, r: &mut Report) -> bool {
        let (host, cq) = (self.pairs[i].req, self.pairs[i].cqa);
        let wcs = self.completions(host, cq);
        let moved = !wcs.is_empty();
        for wc in &wcs {
            let p = &mut self.pairs[i];
            if wc.status != WcStatus::Success {
                r.error_completions += 1;
                r.problem(format!(
                    "{}: work request {} ({:?}) completed with {}",
                    p.a(),
                    wc.wr_id,
                    wc.opcode,
                    wc.status
                ));
                continue;
            }
            let Some(w) = p.pending.pop_front() else {
                r.mismatch(format!(
                    "{}: completion {} with nothing outstanding",
                    p.a(),
                    wc.wr_id
                ));
                continue;
            };
            if wc.wr_id != w.wr_id || wc.opcode != w.kind.opcode() || wc.qp_num != p.qa {
                r.mismatch(format!(
                    "{}: completion {} {:?} out of order: expected {} {:?}",
                    p.a(),
                    wc.wr_id,
                    wc.opcode,
                    w.wr_id,
                    w.kind.opcode()
                ));
                continue;
            }
            let (ma, mb) = {
                let hs = &self.net.hosts;
                (
                    hs[p.req].dev.mr(p.mra.lkey).unwrap_or(&[]),
                    hs[p.resp].dev.mr(p.mrb.lkey).unwrap_or(&[]),
                )
            };
            let len = w.len as usize;
            let dst = self.lay.a_dst + w.slot * self.lay.slot;
            let what = |k: &str| format!("{}: {k} {} ({} B)", p.a(), w.wr_id, w.len);
            let bad: Option<String> = match w.kind {
                Kind::Send => None, // checked at B
                Kind::Write { data } => {
                    let at = self.lay.b_write + w.slot * self.lay.slot;
                    self.scratch.clear();
                    self.scratch.resize(len, 0);
                    fill(data, &mut self.scratch);
                    if let Some(d) = first_diff(&mb[at..at + len], &self.scratch) {
                        Some(format!("{}: B's memory differs at byte {d}", what("WRITE")))
                    } else if mb[at + len..at + len + GUARD].iter().any(|&x| x != POISON) {
                        Some(format!("{}: wrote past its end", what("WRITE")))
                    } else {
                        None
                    }
                }
                Kind::Read { from } => {
                    if let Some(d) = first_diff(&ma[dst..dst + len], &p.read_src[from..from + len])
                    {
                        Some(format!(
                            "{} from offset {from}: differs at byte {d}",
                            what("READ")
                        ))
                    } else if ma[dst + len..dst + len + GUARD]
                        .iter()
                        .any(|&x| x != POISON)
                    {
                        Some(format!("{}: wrote past its end", what("READ")))
                    } else {
                        None
                    }
                }
                Kind::CmpSwap { orig, word } | Kind::FetchAdd { orig, word } => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&ma[dst..dst + 8]);
                    let got = u64::from_le_bytes(b);
                    if got != orig {
                        Some(format!(
                            "{} on word {word}: returned {got:#x}, the model says {orig:#x}",
                            what(if matches!(w.kind, Kind::CmpSwap { .. }) {
                                "CMP_SWAP"
                            } else {
                                "FETCH_ADD"
                            })
                        ))
                    } else if ma[dst + 8..dst + 8 + GUARD].iter().any(|&x| x != POISON) {
                        Some(format!("{}: wrote past its 8 bytes", what("atomic")))
                    } else {
                        None
                    }
                }
            };
            // Poison what the destination may hold before the slot is reused.
            if let (Some(ma), true) = (
                self.net.hosts[p.req].dev.mr_mut(p.mra.lkey),
                matches!(
                    w.kind,
                    Kind::Read { .. } | Kind::CmpSwap { .. } | Kind::FetchAdd { .. }
                ),
            ) {
                ma[dst..dst + len.max(8)].fill(POISON);
            }
            if let Kind::Write { .. } = w.kind {
                let at = self.lay.b_write + w.slot * self.lay.slot;
                if let Some(mb) = self.net.hosts[p.resp].dev.mr_mut(p.mrb.lkey) {
                    mb[at..at + len].fill(POISON);
                }
            }
            match bad {
                Some(s) => r.mismatch(s),
                None => {
                    p.done += 1;
                    r.completed += 1;
                    match w.kind {
                        Kind::Send => r.ops.send += 1,
                        Kind::Write { .. } => {
                            r.ops.write += 1;
                            r.bytes_verified += len as u64;
                        }
                        Kind::Read { .. } => {
                            r.ops.read += 1;
                            r.bytes_verified += len as u64;
                        }
                        Kind::CmpSwap { .. } => {
                            r.ops.cmp_swap += 1;
                            r.bytes_verified += 8;
                        }
                        Kind::FetchAdd { .. } => {
                            r.ops.fetch_add += 1;
                            r.bytes_verified += 8;
                        }
                    }
                }
            }
            p.free.push(w.slot);
        }
        self.wcs = wcs;
        moved
    }

    /// Posts new work requests on pair `i` while its window has room.
    fn post(&mut self, i: usize, r: &mut Report) -> bool {
        let cfg = &self.sim.cfg;
        let lay = self.lay;
        let mut moved = false;
        loop {
            let p = &mut self.pairs[i];
            if p.posted == p.quota {
                break;
            }
            let Some(&slot) = p.free.last() else { break };
            let op = cfg.ops[self.rng.below(cfg.ops.len() as u64) as usize];
            let span = (cfg.size_max - cfg.size_min) as u64 + 1;
            let len = cfg.size_min + self.rng.below(span) as u32;
            let wr_id = (i as u64) << 40 | p.posted;
            let data = self.rng.next_u64() ^ self.seed.rotate_left(17);
            let src = lay.a_src + slot * lay.slot;
            let dst = lay.a_dst + slot * lay.slot;
            let mra = p.mra;
            let sge = |at: usize, len: u32| -> Payload {
                if len == 0 {
                    Payload::Sges(Vec::new())
                } else {
                    Payload::Sges(vec![Sge {
                        addr: mra.addr + at as u64,
                        length: len,
                        lkey: mra.lkey,
                    }])
                }
            };
            let (kind, op, payload, len) = match op {
                Op::Send => (Kind::Send, SendOp::Send, sge(src, len), len),
                Op::Write => (
                    Kind::Write { data },
                    SendOp::Write {
                        remote_addr: p.mrb.addr + (lay.b_write + slot * lay.slot) as u64,
                        rkey: p.mrb.rkey,
                    },
                    sge(src, len),
                    len,
                ),
                Op::Read => {
                    let from = self.rng.below((lay.b_read_len - len as usize) as u64 + 1) as usize;
                    (
                        Kind::Read { from },
                        SendOp::Read {
                            remote_addr: p.mrb.addr + (lay.b_read + from) as u64,
                            rkey: p.mrb.rkey,
                        },
                        sge(dst, len),
                        len,
                    )
                }
                Op::Atomic => {
                    let word = self.rng.below(WORDS as u64) as usize;
                    let remote_addr = p.mrb.addr + (lay.b_words + 8 * word) as u64;
                    let orig = p.words[word];
                    if self.rng.below(2) == 0 {
                        // Half the time the compare matches.
                        let compare = if self.rng.below(2) == 0 {
                            orig
                        } else {
                            self.rng.next_u64()
                        };
                        let swap = self.rng.next_u64();
                        if orig == compare {
                            p.words[word] = swap;
                        }
                        (
                            Kind::CmpSwap { word, orig },
                            SendOp::CompareSwap {
                                remote_addr,
                                rkey: p.mrb.rkey,
                                compare,
                                swap,
                            },
                            sge(dst, 8),
                            8,
                        )
                    } else {
                        let add = if self.rng.below(2) == 0 {
                            self.rng.below(1 << 16)
                        } else {
                            self.rng.next_u64()
                        };
                        p.words[word] = orig.wrapping_add(add);
                        (
                            Kind::FetchAdd { word, orig },
                            SendOp::FetchAdd {
                                remote_addr,
                                rkey: p.mrb.rkey,
                                add,
                            },
                            sge(dst, 8),
                            8,
                        )
                    }
                }
            };
            // Source data; the SEND's expected copy is the same pattern.
            if matches!(kind, Kind::Send | Kind::Write { .. }) {
                if let Some(ma) = self.net.hosts[p.req].dev.mr_mut(p.mra.lkey) {
                    fill(data, &mut ma[src..src + len as usize]);
                }
            }
            if let Kind::Send = kind {
                p.expected.push_back(Expected { wr_id, data, len });
            }
            match self.net.hosts[p.req]
                .dev
                .post_send(p.qa, SendWr::new(wr_id, op, payload))
            {
                Ok(()) => {}
                Err(e) => {
                    r.problem(format!("{}: post_send {wr_id}: {e}", p.a()));
                    return moved;
                }
            }
            p.free.pop();
            p.posted += 1;
            p.pending.push_back(Pending {
                wr_id,
                slot,
                len,
                kind,
            });
            moved = true;
        }
        moved
    }

    /// The final checks (atomic words) and the counters.
    fn finish(&mut self, r: &mut Report) {
        if self.all_done() && r.ok() {
            for p in &self.pairs {
                let mb = self.net.hosts[p.resp].dev.mr(p.mrb.lkey).unwrap_or(&[]);
                for (k, &want) in p.words.iter().enumerate() {
                    let at = self.lay.b_words + 8 * k;
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&mb[at..at + 8]);
                    let got = u64::from_le_bytes(b);
                    if got != want {
                        r.mismatch(format!(
                            "{}: atomic word {k} ends as {got:#x}, the model says {want:#x}",
                            p.b()
                        ));
                    }
                }
                // The read region is only ever read.
                if mb[self.lay.b_read..self.lay.b_read + self.lay.b_read_len] != p.read_src[..] {
                    r.mismatch(format!("{}: the READ source region changed", p.b()));
                }
            }
        } else if !self.all_done() && r.hang.is_none() && r.problems.is_empty() {
            r.hang = Some(format!("stopped early ({})", self.outstanding()));
        }
        let mut c = QpCounters::default();
        for h in &self.net.hosts {
            c.add(&h.dev.counters());
            r.icrc_drops += h.dev.rx_counters().icrc_errors;
            r.malformed += h.dev.rx_counters().malformed;
        }
        r.retransmitted = c.retransmitted_pkts;
        r.seq_naks = c.packet_seq_err;
        r.rnr_naks = c.rnr_nak_retry_err;
        r.naks = c.packet_seq_err + c.rnr_nak_retry_err;
        r.implied_naks = c.implied_nak_seq_err;
        r.timeouts = c.local_ack_timeout_err;
        for h in [A, B] {
            if let Some(ch) = self.net.fabric.host_link(self.net.hosts[h].host) {
                r.faults.add_link(self.net.fabric.link_counters(ch));
            }
        }
        r.virtual_ns = self.net.now().as_nanos();
        r.verify = r.ok();
    }
}

fn post_recv(
    net: &mut SimNet,
    p: &mut Pair,
    lay: &Layout,
    slot: usize,
) -> Result<(), crate::transport::Error> {
    let at = lay.b_recv + slot * lay.slot;
    net.hosts[p.resp].dev.post_recv(
        p.qb,
        RecvWr {
            wr_id: slot as u64,
            sges: vec![Sge {
                addr: p.mrb.addr + at as u64,
                length: (lay.slot - GUARD) as u32,
                lkey: p.mrb.lkey,
            }],
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: SimConfig, seed: u64) -> Report {
        SimRun::new(cfg).unwrap().run(seed, None)
    }

    #[test]
    fn parsers_take_good_input_and_name_bad_input() {
        assert_eq!(
            parse_ops("send,write,read,atomic").unwrap(),
            Op::ALL.to_vec()
        );
        assert_eq!(parse_ops("all").unwrap(), Op::ALL.to_vec());
        assert_eq!(
            parse_ops("send,fetch"),
            Err(ConfigError::UnknownOp("fetch".into()))
        );
        assert_eq!(parse_ops(","), Err(ConfigError::NoOps));
        assert_eq!(parse_size("64-4096").unwrap(), (64, 4096));
        assert_eq!(parse_size("4K").unwrap(), (4096, 4096));
        assert_eq!(parse_size("0-1M").unwrap(), (0, 1 << 20));
        assert_eq!(
            parse_size("9-3"),
            Err(ConfigError::SizeOrder { min: 9, max: 3 })
        );
        assert!(parse_size("x-3").is_err());
        assert_eq!(parse_rate("100G").unwrap(), 100_000_000_000);
        assert_eq!(parse_rate("25gbps").unwrap(), 25_000_000_000);
        assert_eq!(parse_rate("1.5M").unwrap(), 1_500_000);
        assert_eq!(parse_rate("inf").unwrap(), 0);
        assert!(parse_rate("fast").is_err());
        assert_eq!(parse_duration("1us").unwrap(), Duration::from_micros(1));
        assert_eq!(
            parse_duration("2.5ms").unwrap(),
            Duration::from_micros(2500)
        );
        assert_eq!(parse_duration("0ns").unwrap(), Duration::ZERO);
        assert!(parse_duration("5").is_err());
        assert_eq!(parse_seeds("1-100").unwrap(), (1, 100));
        assert_eq!(parse_seeds("7").unwrap(), (7, 7));
        assert!(parse_seeds("9-1").is_err());
    }

    #[test]
    fn the_constructor_refuses_bad_configs() {
        let bad = |f: &dyn Fn(&mut SimConfig)| {
            let mut c = SimConfig::default();
            f(&mut c);
            SimRun::new(c).unwrap_err()
        };
        assert_eq!(
            bad(&|c| c.link.loss = 1.5),
            ConfigError::BadProbability {
                field: "loss",
                value: 1.5
            }
        );
        assert!(matches!(
            bad(&|c| c.link.corrupt = f64::NAN),
            ConfigError::BadProbability {
                field: "corrupt",
                ..
            }
        ));
        assert_eq!(bad(&|c| c.mtu = 1500), ConfigError::BadMtu(1500));
        assert_eq!(
            bad(&|c| {
                c.size_min = 10;
                c.size_max = 5
            }),
            ConfigError::SizeOrder { min: 10, max: 5 }
        );
        assert_eq!(
            bad(&|c| c.size_max = MAX_SIZE + 1),
            ConfigError::SizeTooLarge(MAX_SIZE + 1)
        );
        assert_eq!(bad(&|c| c.ops.clear()), ConfigError::NoOps);
        assert_eq!(bad(&|c| c.msgs = 0), ConfigError::NoMessages);
        assert_eq!(bad(&|c| c.qps = 0), ConfigError::BadQps(0));
        assert_eq!(bad(&|c| c.window = 0), ConfigError::BadWindow(0));
        assert_eq!(bad(&|c| c.timeout = Some(0)), ConfigError::BadTimeout(0));
        assert_eq!(bad(&|c| c.retry_cnt = 8), ConfigError::BadRetryCnt(8));
    }

    #[test]
    fn the_auto_timeout_is_10_at_the_defaults_and_grows_on_slow_links() {
        let c = SimConfig::default();
        assert_eq!(auto_timeout(&c), 10);
        let slow = SimConfig {
            link: LinkConfig {
                rate_bps: 1_000_000_000,
                ..LinkConfig::default()
            },
            size_max: 1 << 20,
            ..SimConfig::default()
        };
        let t = auto_timeout(&slow);
        assert!(t > 10, "{t}");
    }

    #[test]
    fn a_clean_mix_verifies_every_byte() {
        let r = run(
            SimConfig {
                msgs: 400,
                ..SimConfig::default()
            },
            1,
        );
        assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
        assert_eq!(r.completed, 400);
        assert_eq!(r.retransmitted, 0);
        assert!(r.ops.send > 0 && r.ops.write > 0 && r.ops.read > 0);
        assert!(r.ops.cmp_swap > 0 && r.ops.fetch_add > 0);
        let sizes: u64 = r.bytes_verified;
        assert!(sizes > 400 * 1000, "{sizes}");
    }

    #[test]
    fn the_checks_catch_a_corrupted_destination() {
        // Run, then break one remote word behind the model's back: the
        // final check must see it.
        let sim = SimRun::new(SimConfig {
            msgs: 50,
            ops: vec![Op::Atomic],
            ..SimConfig::default()
        })
        .unwrap();
        let mut r = Report::new(3, &sim);
        let mut run = Run::setup(&sim, 3, &mut r).unwrap();
        run.drive(&mut r);
        assert!(r.ok(), "{:?}", r.problems);
        let (lkey, at) = (run.pairs[0].mrb.lkey, run.lay.b_words);
        run.net.hosts[B].dev.mr_mut(lkey).unwrap()[at] ^= 1;
        run.finish(&mut r);
        assert!(!r.ok());
        assert_eq!(r.mismatches, 1, "{:?}", r.problems);
    }

    /// Regression: a 12 KiB WRITE (three 4 KiB packets) behind a queue
    /// that holds two of them. The first try loses the LAST packet; every
    /// retry resends FIRST and MIDDLE, which the responder already has
    /// (duplicates without AckReq), and the queue drops the LAST again.
    /// Unless the responder ACKs those duplicates, the requester never
    /// learns of its progress and fails with RetryExcErr after 8 timeouts.
    #[test]
    fn a_retry_of_duplicates_without_ackreq_progresses() {
        let r = run(
            SimConfig {
                ops: vec![Op::Write],
                msgs: 1,
                size_min: 12288,
                size_max: 12288,
                mtu: 4096,
                link: LinkConfig {
                    queue_bytes: Some(9000),
                    ..LinkConfig::default()
                },
                ..SimConfig::default()
            },
            1,
        );
        assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
        assert_eq!(r.timeouts, 2, "{}", r.line());
    }

    /// Both directions on two QP pairs, with too few receive buffers
    /// coming back late: RNR NAKs on top of the faults.
    #[test]
    fn both_directions_and_rnr_under_faults_verify() {
        let r = run(
            SimConfig {
                msgs: 600,
                qps: 2,
                bidir: true,
                recvs: Some(2),
                recv_delay: Duration::from_micros(3),
                link: LinkConfig {
                    loss: 0.01,
                    reorder: 0.01,
                    dup: 0.01,
                    corrupt: 0.002,
                    ..LinkConfig::default()
                },
                ..SimConfig::default()
            },
            9,
        );
        assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
        assert!(r.rnr_naks > 0, "{}", r.line());
        assert_eq!(r.completed, 600);
    }

    #[test]
    fn several_qps_and_faults_verify() {
        let r = run(
            SimConfig {
                msgs: 600,
                qps: 3,
                size_min: 0,
                size_max: 3000,
                mtu: 256,
                link: LinkConfig {
                    loss: 0.02,
                    reorder: 0.02,
                    dup: 0.02,
                    corrupt: 0.005,
                    ..LinkConfig::default()
                },
                ..SimConfig::default()
            },
            5,
        );
        assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
        assert!(r.retransmitted > 0);
    }
}
