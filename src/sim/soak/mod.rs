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
//!
//! `parse` reads the command line's units, `report` holds what a run
//! found, and `run` drives one seed.

#![deny(unsafe_code)]
mod parse;
mod report;
mod run;
#[cfg(test)]
mod tests;

pub use parse::{parse_duration, parse_ops, parse_rate, parse_seeds, parse_size};
pub use report::{Faults, OpCounts, Report, Totals};
use run::Run;

use crate::backend::fabric::LinkConfig;
use crate::pcap;
use crate::time::Duration;
use crate::transport::{Mtu, Recovery};
use serde::Serialize;
use std::io::Write;

/// The largest message size a run accepts.
pub const MAX_SIZE: u32 = 1 << 20;
/// The most QP pairs a run accepts.
pub const MAX_QPS: u32 = 256;
/// The most work requests outstanding per QP a run accepts.
pub const MAX_WINDOW: u32 = 1024;

/// An operation of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// SEND into one of B's posted receive buffers.
    Send,
    /// RDMA WRITE into a slot of B's memory.
    Write,
    /// RDMA READ from B's patterned region into a slot of A.
    Read,
    /// Compare-and-swap or fetch-and-add, half each.
    Atomic,
}

impl Op {
    /// Every operation, in the order `--ops all` lists them.
    pub const ALL: [Op; 4] = [Op::Send, Op::Write, Op::Read, Op::Atomic];

    /// The operation's name in `--ops` and the reports (`send`, ...).
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
    /// A word of `--ops` that names no operation.
    #[error("unknown op {0:?} (expected send, write, read or atomic, comma-separated)")]
    UnknownOp(String),
    /// An empty operation list.
    #[error("--ops names no operation")]
    NoOps,
    /// A `--size` that is neither `MIN-MAX` nor one size.
    #[error("--size {0:?} is not MIN-MAX or SIZE (bytes, e.g. 1-4096)")]
    BadSize(String),
    /// A size range the wrong way round.
    #[error("--size: MIN {min} is larger than MAX {max}")]
    SizeOrder {
        /// The smallest size given, in bytes.
        min: u32,
        /// The largest size given, in bytes.
        max: u32,
    },
    /// A largest size above [`MAX_SIZE`] bytes.
    #[error("--size: MAX {0} is above the limit of {MAX_SIZE} bytes")]
    SizeTooLarge(u32),
    /// An MTU that is not one of the five IBTA path MTUs.
    #[error("--mtu {0} is not one of 256, 512, 1024, 2048, 4096")]
    BadMtu(u32),
    /// A link fault probability outside [0, 1].
    #[error("--{field} {value} is not a probability in [0, 1]")]
    BadProbability {
        /// The option: `loss`, `reorder`, `dup` or `corrupt`.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// Zero messages.
    #[error("--msgs must be at least 1")]
    NoMessages,
    /// A QP pair count outside 1..=[`MAX_QPS`].
    #[error("--qps must be in 1..={MAX_QPS}, got {0}")]
    BadQps(u32),
    /// A window outside 1..=[`MAX_WINDOW`].
    #[error("--window must be in 1..={MAX_WINDOW}, got {0}")]
    BadWindow(u32),
    /// A receive buffer count outside 1..=[`MAX_WINDOW`].
    #[error("--recvs must be in 1..={MAX_WINDOW}, got {0}")]
    BadRecvs(u32),
    /// A local ACK timeout exponent outside 1..=31.
    #[error("--timeout must be in 1..=31, got {0}")]
    BadTimeout(u8),
    /// A retry count above 7.
    #[error("--retry-cnt must be in 0..=7, got {0}")]
    BadRetryCnt(u8),
    /// `reorder` above zero with `reorder_delay` zero.
    #[error("--reorder-delay must be above zero when --reorder is")]
    ReorderWithoutDelay,
    /// A time limit of zero.
    #[error("--time-limit must be above zero")]
    NoTime,
    /// A rate, duration or seed range that does not parse.
    #[error("{what} {text:?}: {why}")]
    BadValue {
        /// What was being read: `rate`, `duration` or `seeds`.
        what: &'static str,
        /// The text given.
        text: String,
        /// What is wrong with it.
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
    /// The largest message size in bytes (at most [`MAX_SIZE`]).
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
    /// Transport retries before an error completion (0-7; default 7).
    pub retry_cnt: u8,
    /// Virtual time a run may take at most.
    pub time_limit: Duration,
    /// Loss recovery of both ends' QPs (both are ferroce: selective repeat
    /// may be asked of both).
    pub recovery: Recovery,
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
            recovery: Recovery::GoBackN,
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

    /// The configuration as checked.
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
/// On the command line (`--pcap-host`) it is `a` or `b`, listed without help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum Side {
    /// The requester.
    #[value(help = None::<&str>)]
    A,
    /// The responder.
    #[value(help = None::<&str>)]
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

const A: usize = 0;
const B: usize = 1;
const NAMES: [&str; 2] = ["A", "B"];
