//! `ferroce sim --incast N`: N senders write into one receiver through one
//! switch, in virtual time, and the run measures what congestion control
//! (or its absence) makes of the shared bottleneck.
//!
//! # What runs
//!
//! N + 1 hosts, each on its own link (rate R, one-way delay d) to one
//! switch. Each sender has one RC QP to the receiver and keeps a window of
//! RDMA WRITEs (64 KiB by default) outstanding from time 0 until
//! [`IncastConfig::duration`]; it then stops posting, and the run goes on
//! until every WRITE has completed ("drained") or
//! [`IncastConfig::drain_limit_or_auto`] more virtual time has passed.
//!
//! Every egress port of the switch marks ECN-capable frames with RED's
//! curve ([`RedConfig`]; RFC 3168, the DCQCN congestion point of reference
//! C.1) and drops at the tail beyond its buffer; the port towards the
//! receiver is the bottleneck. The hosts' own egress queues (their NICs)
//! neither mark nor drop. Every device sends ECT(0), answers CE with CNPs
//! (at most one per QP per [`IncastConfig::min_time_between_cnps`]) and
//! paces its QPs at the rate of [`IncastConfig::cc`], starting from the
//! line rate R.
//!
//! Defaults for R (reference C.4, the HPCC simulator's DCQCN settings
//! scaled to the link): Kmin = 100 KB x R/25G, Kmax = 400 KB x R/25G,
//! Pmax = 0.2, a buffer of 2 x Kmax, path MTU 4096, and a window large
//! enough that without rate control the senders' outstanding bytes exceed
//! the buffer (see [`IncastConfig::window_or_auto`]).
//!
//! The driver advances virtual time to the earliest of the fabric's next
//! event, every device's [`Device::poll_timeout`] (retransmission timers
//! and the pacers' release times) and its own sampling instants, so a
//! paced packet leaves exactly when its pacer allows.
//!
//! # What is measured
//!
//! - **Goodput per flow**: bytes of completed WRITEs (the requester's
//!   completion, i.e. acknowledged), over `[0, duration]` and over the
//!   second half `[duration/2, duration]`, in bits per second.
//! - **Jain's fairness index** over the second-half goodputs:
//!   (Σx)² / (n·Σx²) ([`jain_index`]).
//! - **Bottleneck utilisation** over the second half: the wire bytes the
//!   switch delivered to the receiver (whole frames: headers, payload,
//!   ICRC; the simulator adds no preamble, gap or FCS) over R x time; and
//!   the same for goodput alone (the WRITE payload completed). Both count
//!   whole frames and whole WRITEs at the instant they arrive or complete,
//!   so a half that carries only a few of them (a short run on a slow
//!   link) can read a little above 100%.
//! - **The queue** of the switch port towards the receiver, sampled every
//!   [`IncastConfig::queue_sample`]: p50, p99 and max over the whole run
//!   and over the second half ([`percentile`], nearest rank); and the
//!   largest queue the port ever held (its counter).
//! - **Congestion signals**: frames the switch marked CE, CE packets the
//!   receiver counted, CNPs it sent, CNPs the senders' rate control took
//!   (and ignored, when there is none).
//! - **Losses**: tail drops at the switch, packets sent again, ACK
//!   timeouts, sequence NAKs, and completions with an error (none unless
//!   drops exhaust a QP's retries).
//!
//! With [`IncastConfig::csv_dir`], time series go to `queue.csv`
//! (`time_ns,queue_bytes`), `flows.csv` (`time_ns,flow,goodput_bps,rate_bps`
//! per [`IncastConfig::flow_sample`] window; `rate_bps` is the sender QP's
//! current rate, [`Device::cc_state`]) and `cc_trace.csv` (`flow,` then
//! [`TraceRecord::CSV_HEADER`]: every rate decision of every sender).

#![deny(unsafe_code)]
use crate::backend::fabric::{
    serialization_time, ChannelId, LinkConfig, LinkCounters, RedConfig, SimError,
};
use crate::cc::{CcConfig, TraceRecord};
use crate::sim::defaults::{
    default_cnp_interval, default_red, window_caps, MAX_MESSAGE, MAX_WINDOW,
};
use crate::sim::net::SimNet;
use crate::sim::stats::{jain_index, percentile};
use crate::time::{Duration, Instant};
use crate::transport::connect::ConnectParams;
use crate::transport::{
    Access, CqId, Device, DeviceConfig, Event, MrKeys, MrSpec, Mtu, Payload, QpConfig, QpCounters,
    SendOp, SendWr, Sge, Wc, WcStatus,
};
use crate::wire::{len, MacAddr};
use serde::Serialize;
use std::fmt;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The most senders a run accepts.
pub const MAX_SENDERS: usize = 64;
/// The longest virtual time a run accepts for its posting phase.
pub const MAX_DURATION: Duration = Duration::from_secs(1);
/// The most queue samples a run takes.
pub const MAX_SAMPLES: u64 = 2_000_000;
/// Headers of one RoCE v2 data packet on an untagged IPv4 frame: Ethernet,
/// IPv4, UDP, BTH, RETH (first packet only; counted on all for a bound),
/// ICRC: 74 B.
const PACKET_OVERHEAD: u64 = (len::ROCE_V4 + len::RETH + len::ICRC) as u64;

/// Why a run cannot be set up as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IncastError {
    /// A sender count outside 1..=[`MAX_SENDERS`].
    #[error("--incast must be in 1..={MAX_SENDERS} senders, got {0}")]
    BadSenders(usize),
    /// A link rate of 0, which means infinitely fast (no bottleneck).
    #[error("--rate must be a finite rate above zero for an incast (the bottleneck's R)")]
    NoRate,
    /// A posting phase of zero.
    #[error("--duration must be above zero")]
    NoDuration,
    /// A posting phase above [`MAX_DURATION`].
    #[error("--duration {0} is above the limit of {MAX_DURATION}")]
    DurationTooLong(Duration),
    /// A queue or flow sampling interval of zero.
    #[error("the sampling intervals must be above zero")]
    NoSampleInterval,
    /// More queue samples than [`MAX_SAMPLES`] over the posting phase.
    #[error("{0} queue samples is above the limit of {MAX_SAMPLES}: sample less often")]
    TooManySamples(u64),
    /// ECN marking thresholds the wrong way round.
    #[error("--kmin {kmin} B is above --kmax {kmax} B")]
    RedOrder {
        /// Bytes queued at or below which nothing is marked.
        kmin: usize,
        /// Bytes queued above which every ECN-capable frame is marked.
        kmax: usize,
    },
    /// A marking probability outside [0, 1].
    #[error("--pmax {0} is not a probability in [0, 1]")]
    BadPmax(f64),
    /// A switch buffer smaller than one data frame.
    #[error("--buffer {buffer} B cannot hold one {frame} B frame")]
    BufferTooSmall {
        /// The switch ports' buffer, in bytes.
        buffer: usize,
        /// The largest data frame of the run, in bytes.
        frame: usize,
    },
    /// An MTU that is not one of the five IBTA path MTUs.
    #[error("--mtu {0} is not one of 256, 512, 1024, 2048, 4096")]
    BadMtu(u32),
    /// A WRITE size outside 1..=[`MAX_MESSAGE`] bytes.
    #[error("the message size must be in 1..={MAX_MESSAGE} bytes, got {0}")]
    BadMessage(u32),
    /// A window (given or computed) outside 1..=[`MAX_WINDOW`].
    #[error("the window must be in 1..={MAX_WINDOW} WRITEs, got {0}")]
    BadWindow(u32),
    /// A local ACK timeout exponent outside 1..=31.
    #[error("the ACK timeout exponent must be in 1..=31, got {0}")]
    BadTimeout(u8),
    /// A retry count above 7.
    #[error("retry_cnt must be in 0..=7, got {0}")]
    BadRetryCnt(u8),
    /// A `--cc` that is neither a known algorithm nor a file.
    #[error(
        "--cc {0:?} is not an algorithm (expected one of {names} or a .toml file)",
        names = CcConfig::NAMES.join(", ")
    )]
    UnknownCc(String),
    /// A `--cc` parameter file that cannot be read or parsed.
    #[error("--cc {0}")]
    CcFile(String),
    /// A device, QP or fabric the run builds was refused.
    #[error("setting up the run: {0}")]
    Setup(String),
    /// A CSV file or directory that cannot be written.
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error, described.
        error: String,
    },
}

/// The rate control `name` selects, for the command line: `dcqcn-cx`,
/// `dcqcn-paper` or `none` with their default parameters, or a TOML file
/// of parameters (`configs/cc/dcqcn-cx.toml` is one).
pub fn parse_cc(name: &str) -> Result<CcConfig, IncastError> {
    match CcConfig::by_name_or_file(name) {
        Some(r) => r.map_err(|e| IncastError::CcFile(e.to_string())),
        None => Err(IncastError::UnknownCc(name.to_string())),
    }
}

/// What an incast run does. [`IncastConfig::new`] fills in the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct IncastConfig {
    /// Senders (N of N:1).
    pub senders: usize,
    /// Every link's rate R, bits per second (the bottleneck's too).
    pub rate_bps: u64,
    /// Every link's one-way propagation delay.
    pub link_delay: Duration,
    /// How long the senders keep posting WRITEs.
    pub duration: Duration,
    /// The senders' (every device's) reaction point.
    pub cc: CcConfig,
    /// The notification point's least time between two CNPs of one QP.
    pub min_time_between_cnps: Duration,
    /// ECN marking on every switch egress port.
    pub red: RedConfig,
    /// Drop-tail limit of every switch egress port; `None`: 2 x Kmax.
    pub buffer_bytes: Option<usize>,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Bytes per WRITE.
    pub message_bytes: u32,
    /// WRITEs outstanding per sender; `None`: [`IncastConfig::window_or_auto`].
    pub window: Option<u32>,
    /// Local ACK timeout exponent; `None`: [`IncastConfig::timeout_or_auto`].
    pub timeout: Option<u8>,
    /// Transport retries before an error completion (0-7; default 7).
    pub retry_cnt: u8,
    /// How long after `duration` the run waits for outstanding WRITEs;
    /// `None`: [`IncastConfig::drain_limit_or_auto`].
    pub drain_limit: Option<Duration>,
    /// The bottleneck queue is sampled this often.
    pub queue_sample: Duration,
    /// Per-flow goodput and rate are sampled this often (`flows.csv`).
    pub flow_sample: Duration,
    /// The fabric's seed (ECN marking draws).
    pub seed: u64,
    /// Where to write the time series; `None`: none written.
    pub csv_dir: Option<PathBuf>,
    /// Every QP's loss recovery (every host is ferroce, so selective
    /// repeat is theirs to agree on).
    pub recovery: crate::transport::Recovery,
}

impl IncastConfig {
    /// N senders at `rate_bps` with rate control `cc`: 1 µs links, 20 ms,
    /// the ECN thresholds of [`default_red`], a buffer of 2 x Kmax, MTU
    /// 4096, 64 KiB WRITEs, the CNP interval of
    /// [`default_cnp_interval`], queue samples every 1 µs and flow samples
    /// every 100 µs, seed 1.
    pub fn new(senders: usize, rate_bps: u64, cc: CcConfig) -> IncastConfig {
        IncastConfig {
            senders,
            rate_bps,
            link_delay: Duration::from_micros(1),
            duration: Duration::from_millis(20),
            min_time_between_cnps: default_cnp_interval(&cc),
            cc,
            red: default_red(rate_bps),
            buffer_bytes: None,
            mtu: 4096,
            message_bytes: 64 << 10,
            window: None,
            timeout: None,
            retry_cnt: 7,
            drain_limit: None,
            queue_sample: Duration::from_micros(1),
            flow_sample: Duration::from_micros(100),
            seed: 1,
            csv_dir: None,
            recovery: crate::transport::Recovery::GoBackN,
        }
    }

    /// The switch ports' buffer: the one given, or 2 x Kmax.
    pub fn buffer(&self) -> usize {
        self.buffer_bytes
            .unwrap_or(self.red.kmax_bytes.saturating_mul(2))
    }

    /// Data packets per WRITE.
    fn packets_per_message(&self) -> u64 {
        u64::from(self.message_bytes).div_ceil(u64::from(self.mtu.max(256)))
    }

    /// A WRITE's bytes on the wire.
    fn message_wire_bytes(&self) -> u64 {
        u64::from(self.message_bytes) + PACKET_OVERHEAD * self.packets_per_message()
    }

    /// The window given, or the smallest of at least 4 with which the N
    /// senders' outstanding WRITEs add up to 1.5 x the buffer: without
    /// rate control they then overflow it (the contrast the run is for).
    /// At 100 Gb/s with the defaults (3.2 MB buffer, 64 KiB WRITEs): 37
    /// for 2 senders, 10 for 8, 5 for 16.
    pub fn window_or_auto(&self) -> u32 {
        if let Some(w) = self.window {
            return w;
        }
        let want = self.buffer() as u64 * 3 / 2;
        let per_window = self.senders.max(1) as u64 * u64::from(self.message_bytes.max(1));
        let w = want.div_ceil(per_window).clamp(4, u64::from(MAX_WINDOW));
        w as u32
    }

    /// The timeout exponent given, or the smallest t whose 4.096 µs x 2^t
    /// is twice the longest wait for an acknowledgement: a round trip
    /// (four link delays) plus the serialisation of a full switch buffer
    /// and of every sender's whole window (which, without rate control,
    /// waits in the senders' own queues). 9 (2.1 ms) with the defaults at
    /// 100 Gb/s. A shorter timer would retry packets that are only queued.
    pub fn timeout_or_auto(&self) -> u8 {
        if let Some(t) = self.timeout {
            return t;
        }
        let bytes = self.buffer() as u64
            + self.senders as u64 * u64::from(self.window_or_auto()) * self.message_wire_bytes();
        let ser = serialization_time(usize::try_from(bytes).unwrap_or(usize::MAX), self.rate_bps);
        let need = 2 * (4 * self.link_delay.as_nanos() + ser.as_nanos());
        (1..=31).find(|&t| 4096u64 << t >= need).unwrap_or(31)
    }

    /// The drain limit given, or 20 ms, or, if longer, the time a QP that
    /// makes no progress takes to exhaust its retries ((retry_cnt + 1)
    /// ACK timeouts): by then every WRITE has completed, one way or the
    /// other, unless a QP still crawls forward.
    pub fn drain_limit_or_auto(&self) -> Duration {
        if let Some(d) = self.drain_limit {
            return d;
        }
        let t = Duration::from_nanos(4096u64 << self.timeout_or_auto().min(31));
        Duration::from_millis(20).max(t.saturating_mul(u64::from(self.retry_cnt) + 1))
    }

    /// Checks every field (see [`IncastError`]).
    pub fn check(&self) -> Result<(), IncastError> {
        if self.senders == 0 || self.senders > MAX_SENDERS {
            return Err(IncastError::BadSenders(self.senders));
        }
        if self.rate_bps == 0 {
            return Err(IncastError::NoRate);
        }
        if self.duration == Duration::ZERO {
            return Err(IncastError::NoDuration);
        }
        if self.duration > MAX_DURATION {
            return Err(IncastError::DurationTooLong(self.duration));
        }
        if self.queue_sample == Duration::ZERO || self.flow_sample == Duration::ZERO {
            return Err(IncastError::NoSampleInterval);
        }
        let samples = self.duration.as_nanos() / self.queue_sample.as_nanos();
        if samples > MAX_SAMPLES {
            return Err(IncastError::TooManySamples(samples));
        }
        if self.red.kmin_bytes > self.red.kmax_bytes {
            return Err(IncastError::RedOrder {
                kmin: self.red.kmin_bytes,
                kmax: self.red.kmax_bytes,
            });
        }
        if !(0.0..=1.0).contains(&self.red.pmax) {
            return Err(IncastError::BadPmax(self.red.pmax));
        }
        if Mtu::from_bytes(self.mtu).is_none() {
            return Err(IncastError::BadMtu(self.mtu));
        }
        if self.message_bytes == 0 || self.message_bytes > MAX_MESSAGE {
            return Err(IncastError::BadMessage(self.message_bytes));
        }
        let frame = (self.mtu.min(self.message_bytes) as u64 + PACKET_OVERHEAD) as usize;
        if self.buffer() < frame {
            return Err(IncastError::BufferTooSmall {
                buffer: self.buffer(),
                frame,
            });
        }
        let w = self.window_or_auto();
        if w == 0 || w > MAX_WINDOW {
            return Err(IncastError::BadWindow(w));
        }
        if let Some(t) = self.timeout {
            if !(1..=31).contains(&t) {
                return Err(IncastError::BadTimeout(t));
            }
        }
        if self.retry_cnt > 7 {
            return Err(IncastError::BadRetryCnt(self.retry_cnt));
        }
        Ok(())
    }
}

/// Percentiles of a set of queue samples, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    /// Samples taken.
    pub samples: u64,
    /// The median, bytes.
    pub p50: u64,
    /// The 99th percentile, bytes.
    pub p99: u64,
    /// The largest sample, bytes (0 with none).
    pub max: u64,
}

impl QueueStats {
    /// The statistics of `samples` (queue depths in bytes, any order).
    pub fn of(samples: &[u64]) -> QueueStats {
        let mut s = samples.to_vec();
        s.sort_unstable();
        QueueStats {
            samples: s.len() as u64,
            p50: percentile(&s, 50.0),
            p99: percentile(&s, 99.0),
            max: s.last().copied().unwrap_or(0),
        }
    }
}

/// One sender's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlowResult {
    /// The sender's number, from 0.
    pub flow: usize,
    /// WRITE bytes completed by the end of the run (drain included).
    pub bytes_completed: u64,
    /// Completed WRITE bytes over `[0, duration]`, bits per second.
    pub goodput_bps: f64,
    /// Completed WRITE bytes over `[duration/2, duration]`, bits per second.
    pub goodput_second_half_bps: f64,
    /// The QP's rate at the end of the posting phase.
    pub rate_bps: u64,
    /// CNPs the QP's rate control took.
    pub cnp_handled: u64,
    /// CNPs the QP received with no rate control to take them.
    pub cnp_ignored: u64,
    /// Request packets the QP sent again (go-back-N).
    pub retransmitted_pkts: u64,
    /// WRITE completions with a status other than success.
    pub completion_errors: u64,
}

/// Everything a run measured (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IncastResult {
    /// Senders (N of N:1).
    pub senders: usize,
    /// The rate control's name (`dcqcn-cx`, `dcqcn-paper`, `none`, ...).
    pub cc: String,
    /// Every link's rate, bits per second.
    pub rate_bps: u64,
    /// Every link's one-way propagation delay, nanoseconds.
    pub link_delay_ns: u64,
    /// The posting phase, nanoseconds.
    pub duration_ns: u64,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Bytes per WRITE.
    pub message_bytes: u32,
    /// WRITEs outstanding per sender at most (given or computed).
    pub window: u32,
    /// The local ACK timeout exponent used (given or computed).
    pub timeout_exp: u8,
    /// Every QP's loss recovery: "gbn" or "sr".
    pub recovery: String,
    /// The notification point's least time between two CNPs of one QP,
    /// nanoseconds.
    pub min_time_between_cnps_ns: u64,
    /// ECN marking on every switch egress port.
    pub red: RedConfig,
    /// Drop-tail limit of every switch egress port, bytes (given or 2 x
    /// Kmax).
    pub buffer_bytes: usize,
    /// The fabric's seed.
    pub seed: u64,
    /// Each sender's figures, in sender order.
    pub flows: Vec<FlowResult>,
    /// Σ of the flows' goodput over the whole posting phase.
    pub goodput_bps: f64,
    /// Σ of the flows' goodput over the second half.
    pub goodput_second_half_bps: f64,
    /// Jain's index of the flows' second-half goodput.
    pub jain_second_half: f64,
    /// Wire bytes delivered to the receiver over R x time, second half.
    pub utilisation_second_half: f64,
    /// Σ second-half goodput over R.
    pub goodput_utilisation_second_half: f64,
    /// Bottleneck queue samples over `[0, duration]`.
    pub queue: QueueStats,
    /// Bottleneck queue samples over `[duration/2, duration]`.
    pub queue_second_half: QueueStats,
    /// The most the bottleneck port ever held (its counter, whole run).
    pub queue_max_bytes: u64,
    /// Frames marked CE by the switch (every port).
    pub ecn_marked: u64,
    /// CE-marked packets the receiver counted.
    pub ce_received: u64,
    /// CNPs the receiver sent.
    pub cnp_sent: u64,
    /// CNPs the senders' rate control took.
    pub cnp_handled: u64,
    /// CNPs the senders received with no rate control to take them.
    pub cnp_ignored: u64,
    /// Frames the switch dropped at the tail (every port).
    pub tail_drops: u64,
    /// Tail drops from the half-time mark on (the first half holds the
    /// start, when every sender begins at line rate).
    pub tail_drops_second_half: u64,
    /// Request packets the senders sent again (go-back-N).
    pub retransmitted_pkts: u64,
    /// The senders' local ACK timer expiries.
    pub ack_timeouts: u64,
    /// NAK PSN sequence errors the senders received (IBTA §9.7.5.1.1).
    pub seq_naks: u64,
    /// WRITE completions with a status other than success, all senders.
    pub completion_errors: u64,
    /// QPs that went to ERR (either side).
    pub qp_errors: u64,
    /// Every WRITE completed before the drain limit.
    pub drained: bool,
    /// Why the run ended early, if it did (nothing left to happen, time
    /// not advancing).
    pub stopped: Option<String>,
    /// Virtual time at the end of the run.
    pub virtual_ns: u64,
    /// Wall-clock time the run took, in seconds.
    pub wall_s: f64,
}

/// A rate in bits per second as Gb/s (or Mb/s below 1 Gb/s).
fn bps(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} Gb/s", v / 1e9)
    } else {
        format!("{:.1} Mb/s", v / 1e6)
    }
}

/// Bytes as KB (1000 B).
fn kb(v: u64) -> String {
    format!("{:.1} KB", v as f64 / 1e3)
}

impl fmt::Display for IncastResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "incast {}:1 at {}, {} of WRITEs, cc {}, seed {}",
            self.senders,
            bps(self.rate_bps as f64),
            Duration::from_nanos(self.duration_ns),
            self.cc,
            self.seed
        )?;
        writeln!(
            f,
            "  links {} one way; MTU {}; {} B WRITEs, {} outstanding per sender; ACK timeout 2^{}; \
             recovery {}; CNPs at most every {}",
            Duration::from_nanos(self.link_delay_ns),
            self.mtu,
            self.message_bytes,
            self.window,
            self.timeout_exp,
            self.recovery,
            Duration::from_nanos(self.min_time_between_cnps_ns)
        )?;
        writeln!(
            f,
            "  switch ports: ECN Kmin {} Kmax {} Pmax {}; buffer {}",
            kb(self.red.kmin_bytes as u64),
            kb(self.red.kmax_bytes as u64),
            self.red.pmax,
            kb(self.buffer_bytes as u64)
        )?;
        writeln!(
            f,
            "  {:>4}  {:>13}  {:>13}  {:>13}  {:>8}  {:>8}  {:>8}  {:>6}",
            "flow", "goodput", "2nd half", "rate at end", "CNPs", "ignored", "retrans", "errors"
        )?;
        for x in &self.flows {
            writeln!(
                f,
                "  {:>4}  {:>13}  {:>13}  {:>13}  {:>8}  {:>8}  {:>8}  {:>6}",
                x.flow,
                bps(x.goodput_bps),
                bps(x.goodput_second_half_bps),
                bps(x.rate_bps as f64),
                x.cnp_handled,
                x.cnp_ignored,
                x.retransmitted_pkts,
                x.completion_errors
            )?;
        }
        writeln!(
            f,
            "  {:>4}  {:>13}  {:>13}",
            "sum",
            bps(self.goodput_bps),
            bps(self.goodput_second_half_bps)
        )?;
        writeln!(
            f,
            "  second half: Jain {:.4}, utilisation {:.1}% (wire bytes to the receiver), \
             {:.1}% (goodput)",
            self.jain_second_half,
            100.0 * self.utilisation_second_half,
            100.0 * self.goodput_utilisation_second_half
        )?;
        writeln!(
            f,
            "  queue to the receiver: p50 {} p99 {} max {} (whole run); p50 {} p99 {} max {} \
             (second half); largest ever {}",
            kb(self.queue.p50),
            kb(self.queue.p99),
            kb(self.queue.max),
            kb(self.queue_second_half.p50),
            kb(self.queue_second_half.p99),
            kb(self.queue_second_half.max),
            kb(self.queue_max_bytes)
        )?;
        writeln!(
            f,
            "  ECN-marked {}, CE received {}, CNPs sent {}, handled {}, ignored {}",
            self.ecn_marked, self.ce_received, self.cnp_sent, self.cnp_handled, self.cnp_ignored
        )?;
        writeln!(
            f,
            "  tail drops {} ({} in the second half), retransmitted {}, ACK timeouts {}, \
             sequence NAKs {}, completion errors {}, QPs in error {}",
            self.tail_drops,
            self.tail_drops_second_half,
            self.retransmitted_pkts,
            self.ack_timeouts,
            self.seq_naks,
            self.completion_errors,
            self.qp_errors
        )?;
        write!(
            f,
            "  virtual {}, {}, wall {:.2} s",
            Duration::from_nanos(self.virtual_ns),
            if self.drained {
                "drained".to_string()
            } else {
                format!(
                    "not drained{}",
                    self.stopped
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                )
            },
            self.wall_s
        )
    }
}

// ----- the run -----

/// One sender and its QP pair.
struct Flow {
    host: usize,
    qpn: u32,
    /// The receiver's QP.
    rqpn: u32,
    cq: CqId,
    mr: MrKeys,
    outstanding: u32,
    /// A completion failed: the QP is in ERR and takes no more work (a
    /// WRITE posted there would only be flushed at once).
    dead: bool,
    next_wr: u64,
    bytes: u64,
    errors: u64,
    /// `bytes` at the half-time mark, at `duration`, and at the last flow
    /// sample.
    at_half: u64,
    at_end: u64,
    at_sample: u64,
    rate_at_end: u64,
}

/// Open CSV files.
struct Csv {
    queue: (PathBuf, BufWriter<std::fs::File>),
    flows: (PathBuf, BufWriter<std::fs::File>),
    trace: (PathBuf, BufWriter<std::fs::File>),
}

fn io_err(path: &Path, e: std::io::Error) -> IncastError {
    IncastError::Io {
        path: path.to_path_buf(),
        error: e.to_string(),
    }
}

impl Csv {
    fn open(dir: &Path) -> Result<Csv, IncastError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let open = |name: &str, header: &str| -> Result<_, IncastError> {
            let p = dir.join(name);
            let f = std::fs::File::create(&p).map_err(|e| io_err(&p, e))?;
            let mut w = BufWriter::new(f);
            writeln!(w, "{header}").map_err(|e| io_err(&p, e))?;
            Ok((p, w))
        };
        Ok(Csv {
            queue: open("queue.csv", "time_ns,queue_bytes")?,
            flows: open("flows.csv", "time_ns,flow,goodput_bps,rate_bps")?,
            trace: open("cc_trace.csv", &format!("flow,{}", TraceRecord::CSV_HEADER))?,
        })
    }

    fn finish(mut self) -> Result<(), IncastError> {
        for (p, w) in [&mut self.queue, &mut self.flows, &mut self.trace] {
            w.flush().map_err(|e| io_err(p, e))?;
        }
        Ok(())
    }
}

struct Run<'a> {
    cfg: &'a IncastConfig,
    net: SimNet,
    flows: Vec<Flow>,
    /// The switch port towards the receiver, and every switch egress.
    bottleneck: ChannelId,
    switch_egress: Vec<ChannelId>,
    window: u32,
    /// The receiver's region, which every WRITE targets.
    rmr: MrKeys,
    wcs: Vec<Wc>,
    trace: Vec<TraceRecord>,
    csv: Option<Csv>,
    /// Queue samples over [0, duration] (bytes); the index of the first
    /// one at or after the half.
    queue: Vec<u64>,
    half_index: usize,
    rx_bytes_half: u64,
    /// Tail drops at the switch by the half-time mark.
    drops_half: u64,
    rx_bytes_end: u64,
    qp_errors: u64,
}

const RECEIVER: usize = 0;

/// Frames a host's NIC holds ready for its wire ([`crate::backend::fabric::Fabric::set_tx_ring`]).
const NIC_RING_FRAMES: usize = 2;

fn mac(i: usize) -> MacAddr {
    MacAddr([2, 0, 0, 0, (i >> 8) as u8, i as u8])
}

impl<'a> Run<'a> {
    fn setup(cfg: &'a IncastConfig) -> Result<Run<'a>, IncastError> {
        let setup = |e: crate::transport::Error| IncastError::Setup(e.to_string());
        let sim = |e: SimError| IncastError::Setup(e.to_string());
        let window = cfg.window_or_auto();
        let mut net = SimNet::new(cfg.seed);
        for i in 0..=cfg.senders {
            let ip = core::net::Ipv4Addr::new(198, 18, (i >> 8) as u8, (i & 0xFF) as u8 + 1);
            let mut dc = DeviceConfig::new(mac(i + 1), ip.into());
            dc.congestion.rp = cfg.cc.clone();
            dc.congestion.line_bps = cfg.rate_bps;
            dc.congestion.np.min_time_between_cnps = cfg.min_time_between_cnps;
            dc.congestion.trace = cfg.csv_dir.is_some();
            let h = net.add_host(dc).map_err(setup)?;
            debug_assert_eq!(h, i);
            // A NIC pulls the next packet when its wire is free: the
            // window waits in the QP, where the pacer can hold it back,
            // not in an unbounded queue in front of the wire.
            let id = net.hosts[h].host;
            net.fabric
                .set_tx_ring(id, Some(NIC_RING_FRAMES * crate::host::pump::MAX_FRAME));
        }
        let sw = net.add_switch();
        let host_side = LinkConfig {
            rate_bps: cfg.rate_bps,
            delay: cfg.link_delay,
            ..LinkConfig::default()
        };
        let switch_side = LinkConfig {
            queue_bytes: Some(cfg.buffer()),
            ecn: Some(cfg.red),
            ..host_side
        };
        let mut switch_egress = Vec::new();
        for h in 0..=cfg.senders {
            let link = net.connect_to_switch(h, sw, host_side).map_err(sim)?;
            net.fabric
                .set_link_config(link.b_to_a, switch_side)
                .map_err(sim)?;
            switch_egress.push(link.b_to_a);
        }
        let bottleneck = switch_egress[RECEIVER];

        let msg = cfg.message_bytes as usize;
        let pkts = cfg.packets_per_message() as u32;
        let caps = window_caps(window, pkts, QpConfig::default().rto_low_us);
        // The receiver's one region: every flow writes over it.
        let (rpd, rcq, rmr) = {
            let d = &mut net.hosts[RECEIVER].dev;
            let pd = d.alloc_pd();
            let cq = d.create_cq(16).map_err(setup)?;
            let mr = d
                .reg_mr(MrSpec::new(
                    pd,
                    msg,
                    Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                ))
                .map_err(setup)?;
            (pd, cq, mr)
        };
        let params = ConnectParams {
            mtu: Mtu::from_bytes(cfg.mtu).ok_or(IncastError::BadMtu(cfg.mtu))?,
            timeout: cfg.timeout_or_auto(),
            retry_cnt: cfg.retry_cnt,
            // Both ends are ferroce: a rate control that needs INT (HPCC)
            // has both agree to it, and so does selective repeat.
            int_telemetry: cfg.cc.needs_int(),
            recovery: cfg.recovery,
            ..ConnectParams::default()
        };
        let mut flows = Vec::new();
        for s in 1..=cfg.senders {
            let rqpn = net.hosts[RECEIVER]
                .dev
                .create_qp(rpd, rcq, rcq, caps)
                .map_err(setup)?;
            let d = &mut net.hosts[s].dev;
            let pd = d.alloc_pd();
            let cq = d.create_cq(window as usize + 16).map_err(setup)?;
            let mr = d
                .reg_mr(MrSpec::new(pd, msg, Access::LOCAL_WRITE))
                .map_err(setup)?;
            let qpn = d.create_qp(pd, cq, cq, caps).map_err(setup)?;
            net.connect_qps(s, qpn, RECEIVER, rqpn, &params, (0, 0))
                .map_err(setup)?;
            flows.push(Flow {
                host: s,
                qpn,
                rqpn,
                cq,
                mr,
                outstanding: 0,
                dead: false,
                next_wr: 0,
                bytes: 0,
                errors: 0,
                at_half: 0,
                at_end: 0,
                at_sample: 0,
                rate_at_end: 0,
            });
        }
        let csv = match &cfg.csv_dir {
            Some(d) => Some(Csv::open(d)?),
            None => None,
        };
        let samples = (cfg.duration.as_nanos() / cfg.queue_sample.as_nanos()) as usize + 1;
        Ok(Run {
            cfg,
            net,
            flows,
            bottleneck,
            switch_egress,
            window,
            rmr,
            wcs: Vec::with_capacity(window as usize + 16),
            trace: Vec::new(),
            csv,
            queue: Vec::with_capacity(samples),
            half_index: 0,
            rx_bytes_half: 0,
            drops_half: 0,
            rx_bytes_end: 0,
            qp_errors: 0,
        })
    }

    /// Posts WRITEs on every flow up to its window; whether any was posted.
    fn post(&mut self) -> bool {
        let mut posted = false;
        for fl in &mut self.flows {
            while !fl.dead && fl.outstanding < self.window {
                let wr = SendWr::new(
                    fl.next_wr,
                    SendOp::Write {
                        remote_addr: self.rmr.addr,
                        rkey: self.rmr.rkey,
                    },
                    Payload::sge(Sge {
                        addr: fl.mr.addr,
                        length: self.cfg.message_bytes,
                        lkey: fl.mr.lkey,
                    }),
                );
                if self.net.hosts[fl.host].dev.post_send(fl.qpn, wr).is_err() {
                    // Not taken (the QP left RTS): the flow is over.
                    fl.dead = true;
                    break;
                }
                fl.next_wr += 1;
                fl.outstanding += 1;
                posted = true;
            }
        }
        posted
    }

    /// Takes every completion; whether there was any.
    fn complete(&mut self) -> bool {
        let mut any = false;
        for fl in &mut self.flows {
            let dev = &mut self.net.hosts[fl.host].dev;
            self.wcs.clear();
            dev.poll_cq(fl.cq, usize::MAX, &mut self.wcs);
            for wc in &self.wcs {
                any = true;
                fl.outstanding = fl.outstanding.saturating_sub(1);
                if wc.status == WcStatus::Success {
                    fl.bytes += u64::from(wc.byte_len);
                } else {
                    fl.errors += 1;
                    fl.dead = true;
                }
            }
            while let Some(ev) = dev.poll_event() {
                if matches!(ev, Event::QpError { .. }) {
                    self.qp_errors += 1;
                }
            }
        }
        while let Some(ev) = self.net.hosts[RECEIVER].dev.poll_event() {
            if matches!(ev, Event::QpError { .. }) {
                self.qp_errors += 1;
            }
        }
        any
    }

    fn trace_out(&mut self) -> Result<(), IncastError> {
        let Some(csv) = &mut self.csv else {
            return Ok(());
        };
        for (i, fl) in self.flows.iter().enumerate() {
            self.trace.clear();
            self.net.hosts[fl.host]
                .dev
                .drain_cc_trace(fl.qpn, &mut self.trace);
            let (p, w) = &mut csv.trace;
            for r in &self.trace {
                writeln!(w, "{i},{r}").map_err(|e| io_err(p, e))?;
            }
        }
        Ok(())
    }

    fn flow_sample(&mut self, t: Instant) -> Result<(), IncastError> {
        let secs = self.cfg.flow_sample.as_secs_f64();
        for (i, fl) in self.flows.iter_mut().enumerate() {
            let d = fl.bytes - fl.at_sample;
            fl.at_sample = fl.bytes;
            let rate = self.net.hosts[fl.host]
                .dev
                .cc_state(fl.qpn)
                .map_or(0, |s| s.rate_bps);
            if let Some(csv) = &mut self.csv {
                let (p, w) = &mut csv.flows;
                writeln!(
                    w,
                    "{},{i},{:.0},{rate}",
                    t.as_nanos(),
                    d as f64 * 8.0 / secs
                )
                .map_err(|e| io_err(p, e))?;
            }
        }
        self.trace_out()
    }

    fn queue_sample(&mut self, t: Instant) -> Result<(), IncastError> {
        let q = self.net.fabric.egress_queue(self.bottleneck).bytes() as u64;
        self.queue.push(q);
        if let Some(csv) = &mut self.csv {
            let (p, w) = &mut csv.queue;
            writeln!(w, "{},{q}", t.as_nanos()).map_err(|e| io_err(p, e))?;
        }
        Ok(())
    }

    fn drive(&mut self) -> Result<(bool, Option<String>), IncastError> {
        let cfg = self.cfg;
        let start = self.net.now();
        let end = start + cfg.duration;
        let half = start + Duration::from_nanos(cfg.duration.as_nanos() / 2);
        let limit = end + cfg.drain_limit_or_auto();
        let mut next_q = start;
        let mut next_f = start + cfg.flow_sample;
        let mut half_done = false;
        let mut end_done = false;
        let mut same_instant = 0u64;
        loop {
            // Everything that happens at `now`: frames in and out, then
            // completions and new work, until nothing moves (each round
            // completes or posts a WRITE, and posting stops at a window).
            loop {
                self.net.pump_until_quiet(u64::MAX);
                let done = self.complete();
                let posted = if self.net.now() < end {
                    self.post()
                } else {
                    false
                };
                if !done && !posted {
                    break;
                }
            }
            let now = self.net.now();
            while next_q <= now && next_q <= end {
                if next_q >= half && self.half_index == 0 {
                    self.half_index = self.queue.len();
                }
                self.queue_sample(next_q)?;
                next_q += cfg.queue_sample;
            }
            while next_f <= now && next_f <= end {
                self.flow_sample(next_f)?;
                next_f += cfg.flow_sample;
            }
            if !half_done && now >= half {
                half_done = true;
                for fl in &mut self.flows {
                    fl.at_half = fl.bytes;
                }
                self.rx_bytes_half = self.net.fabric.link_counters(self.bottleneck).rx_bytes;
                self.drops_half = self
                    .switch_egress
                    .iter()
                    .map(|&ch| self.net.fabric.link_counters(ch).dropped_queue)
                    .sum();
            }
            if !end_done && now >= end {
                end_done = true;
                for fl in &mut self.flows {
                    fl.at_end = fl.bytes;
                    fl.rate_at_end = self.net.hosts[fl.host]
                        .dev
                        .cc_state(fl.qpn)
                        .map_or(0, |s| s.rate_bps);
                }
                self.rx_bytes_end = self.net.fabric.link_counters(self.bottleneck).rx_bytes;
            }
            if end_done && self.flows.iter().all(|f| f.outstanding == 0) {
                return Ok((true, None));
            }
            let mut next = self.net.next_time();
            for t in [next_q, next_f, half, end] {
                if t > now && t <= end {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            let Some(t) = next else {
                return Ok((
                    false,
                    Some(format!(
                        "nothing left to happen at {}",
                        Duration::from_nanos(now.as_nanos())
                    )),
                ));
            };
            if t > limit {
                return Ok((false, Some("drain limit reached".to_string())));
            }
            if !self.net.advance_towards(t, &mut same_instant, 1_000_000) {
                return Ok((
                    false,
                    Some(format!(
                        "time does not advance at {}",
                        Duration::from_nanos(now.as_nanos())
                    )),
                ));
            }
        }
    }

    fn result(&mut self, drained: bool, stopped: Option<String>) -> IncastResult {
        let cfg = self.cfg;
        let r = cfg.rate_bps as f64;
        let whole = cfg.duration.as_secs_f64();
        let second = (cfg.duration.as_nanos() - cfg.duration.as_nanos() / 2) as f64 / 1e9;
        let mut flows = Vec::new();
        let mut senders = QpCounters::default();
        for (i, fl) in self.flows.iter().enumerate() {
            let dev: &Device = &self.net.hosts[fl.host].dev;
            let c = dev.qp_counters(fl.qpn).copied().unwrap_or_default();
            senders.add(&c);
            flows.push(FlowResult {
                flow: i,
                bytes_completed: fl.bytes,
                goodput_bps: fl.at_end as f64 * 8.0 / whole,
                goodput_second_half_bps: (fl.at_end - fl.at_half) as f64 * 8.0 / second,
                rate_bps: fl.rate_at_end,
                cnp_handled: c.rp_cnp_handled,
                cnp_ignored: c.rp_cnp_ignored,
                retransmitted_pkts: c.retransmitted_pkts,
                completion_errors: fl.errors,
            });
        }
        let mut receiver = QpCounters::default();
        for fl in &self.flows {
            if let Some(c) = self.net.hosts[RECEIVER].dev.qp_counters(fl.rqpn) {
                receiver.add(c);
            }
        }
        let mut links = LinkCounters::default();
        for &ch in &self.switch_egress {
            let c = self.net.fabric.link_counters(ch);
            links.ecn_marked += c.ecn_marked;
            links.dropped_queue += c.dropped_queue;
        }
        let second_half: Vec<f64> = flows.iter().map(|f| f.goodput_second_half_bps).collect();
        let goodput_second_half_bps: f64 = second_half.iter().sum();
        let rx = self.rx_bytes_end.saturating_sub(self.rx_bytes_half);
        let half_index = if self.half_index == 0 {
            self.queue.len()
        } else {
            self.half_index
        };
        IncastResult {
            senders: cfg.senders,
            cc: cfg.cc.name().to_string(),
            rate_bps: cfg.rate_bps,
            link_delay_ns: cfg.link_delay.as_nanos(),
            duration_ns: cfg.duration.as_nanos(),
            mtu: cfg.mtu,
            message_bytes: cfg.message_bytes,
            window: self.window,
            timeout_exp: cfg.timeout_or_auto(),
            recovery: cfg.recovery.to_string(),
            min_time_between_cnps_ns: cfg.min_time_between_cnps.as_nanos(),
            red: cfg.red,
            buffer_bytes: cfg.buffer(),
            seed: cfg.seed,
            goodput_bps: flows.iter().map(|f| f.goodput_bps).sum(),
            goodput_second_half_bps,
            jain_second_half: jain_index(&second_half),
            utilisation_second_half: rx as f64 * 8.0 / (r * second),
            goodput_utilisation_second_half: goodput_second_half_bps / r,
            queue: QueueStats::of(&self.queue),
            queue_second_half: QueueStats::of(&self.queue[half_index..]),
            queue_max_bytes: self
                .net
                .fabric
                .link_counters(self.bottleneck)
                .max_queue_bytes,
            ecn_marked: links.ecn_marked,
            ce_received: receiver.np_ecn_marked_roce_packets,
            cnp_sent: receiver.np_cnp_sent,
            cnp_handled: senders.rp_cnp_handled,
            cnp_ignored: senders.rp_cnp_ignored,
            tail_drops: links.dropped_queue,
            tail_drops_second_half: links.dropped_queue.saturating_sub(self.drops_half),
            retransmitted_pkts: senders.retransmitted_pkts,
            ack_timeouts: senders.local_ack_timeout_err,
            seq_naks: senders.packet_seq_err,
            completion_errors: flows.iter().map(|f| f.completion_errors).sum(),
            qp_errors: self.qp_errors,
            flows,
            drained,
            stopped,
            virtual_ns: self.net.now().as_nanos(),
            wall_s: 0.0,
        }
    }
}

/// Runs the incast `cfg` describes (checked first) and measures it.
pub fn run(cfg: &IncastConfig) -> Result<IncastResult, IncastError> {
    let wall = std::time::Instant::now();
    cfg.check()?;
    let mut run = Run::setup(cfg)?;
    let (drained, stopped) = run.drive()?;
    run.trace_out()?;
    let mut res = run.result(drained, stopped);
    if let Some(csv) = run.csv.take() {
        csv.finish()?;
    }
    res.wall_s = wall.elapsed().as_secs_f64();
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_stats_are_nearest_rank_percentiles() {
        let q = QueueStats::of(&[4, 1, 3, 2]);
        assert_eq!(
            q,
            QueueStats {
                samples: 4,
                p50: 2,
                p99: 4,
                max: 4
            }
        );
        assert_eq!(QueueStats::of(&[]), QueueStats::default());
    }

    #[test]
    fn parse_cc_knows_three_names_and_parameter_files() {
        assert_eq!(parse_cc("none"), Ok(CcConfig::None));
        assert_eq!(parse_cc(" None "), Ok(CcConfig::None));
        for n in ["dcqcn-cx", "dcqcn-paper"] {
            assert_eq!(parse_cc(n).unwrap().name(), n);
        }
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/cc/dcqcn-paper.toml");
        assert_eq!(parse_cc(file).unwrap().name(), "dcqcn-paper");
        let e = parse_cc("/nonexistent/dcqcn.toml").unwrap_err();
        assert!(e.to_string().contains("nonexistent"), "{e}");
        let e = parse_cc("cubic").unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("\"cubic\" is not an algorithm (expected one of none, "),
            "{e}"
        );
        assert!(e.ends_with(" or a .toml file)"), "{e}");
        for n in CcConfig::NAMES {
            assert!(e.contains(n), "{e}");
        }
        assert_eq!(
            default_cnp_interval(&CcConfig::None),
            Duration::from_micros(4)
        );
    }

    #[test]
    fn defaults_follow_the_rate_and_the_number_of_senders() {
        let c = IncastConfig::new(2, 100_000_000_000, CcConfig::None);
        assert_eq!(c.check(), Ok(()));
        assert_eq!(
            (
                c.red.kmin_bytes,
                c.red.kmax_bytes,
                c.red.pmax,
                c.red.at_dequeue
            ),
            (50_000, 1_600_000, 1.0, true)
        );
        assert_eq!(c.buffer(), 3_200_000);
        assert_eq!(c.window_or_auto(), 37);
        assert_eq!(
            IncastConfig::new(8, 100_000_000_000, CcConfig::None).window_or_auto(),
            10
        );
        assert_eq!(
            IncastConfig::new(16, 100_000_000_000, CcConfig::None).window_or_auto(),
            5
        );
        assert_eq!(
            IncastConfig::new(64, 100_000_000_000, CcConfig::None).window_or_auto(),
            4
        );
        assert_eq!(c.timeout_or_auto(), 9);
        // 8 timeouts of 2.1 ms are less than 20 ms; 8 of 16.8 ms are more.
        assert_eq!(c.drain_limit_or_auto(), Duration::from_millis(20));
        let mut e = c.clone();
        e.timeout = Some(12);
        assert_eq!(
            e.drain_limit_or_auto(),
            Duration::from_nanos(8 * (4096 << 12))
        );
        e.drain_limit = Some(Duration::from_millis(1));
        assert_eq!(e.drain_limit_or_auto(), Duration::from_millis(1));
        // Enough outstanding to overflow the buffer without rate control.
        for n in [1, 2, 8, 16, 64] {
            let c = IncastConfig::new(n, 100_000_000_000, CcConfig::None);
            let out = n as u64 * c.window_or_auto() as u64 * c.message_bytes as u64;
            assert!(out > c.buffer() as u64, "{n}: {out}");
            // The timer covers a full buffer and every window queued.
            let t = ack_wait(&c);
            assert!(4096u64 << c.timeout_or_auto() >= 2 * t, "{n}");
        }
        let mut d = c.clone();
        d.window = Some(3);
        d.timeout = Some(14);
        d.buffer_bytes = Some(10_000);
        assert_eq!(
            (d.window_or_auto(), d.timeout_or_auto(), d.buffer()),
            (3, 14, 10_000)
        );
    }

    /// The serialisation of a full buffer and every window, nanoseconds.
    fn ack_wait(c: &IncastConfig) -> u64 {
        let bytes = c.buffer() as u64
            + c.senders as u64 * c.window_or_auto() as u64 * c.message_wire_bytes();
        bytes * 8 * 1_000_000_000 / c.rate_bps
    }

    #[test]
    fn bad_configs_are_refused_with_a_clear_error() {
        let ok = IncastConfig::new(4, 100_000_000_000, CcConfig::None);
        let bad = |f: &dyn Fn(&mut IncastConfig), want: &str| {
            let mut c = ok.clone();
            f(&mut c);
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            // And run refuses it before building anything.
            assert_eq!(run(&c).unwrap_err().to_string(), e);
        };
        bad(
            &|c| c.senders = 0,
            "--incast must be in 1..=64 senders, got 0",
        );
        bad(&|c| c.senders = 65, "got 65");
        bad(
            &|c| c.rate_bps = 0,
            "--rate must be a finite rate above zero",
        );
        bad(
            &|c| c.duration = Duration::ZERO,
            "--duration must be above zero",
        );
        bad(
            &|c| c.duration = Duration::from_secs(2),
            "above the limit of 1.000s",
        );
        bad(&|c| c.queue_sample = Duration::ZERO, "sampling intervals");
        bad(&|c| c.flow_sample = Duration::ZERO, "sampling intervals");
        bad(
            &|c| {
                c.duration = Duration::from_secs(1);
                c.queue_sample = Duration::from_nanos(100);
            },
            "queue samples is above the limit",
        );
        bad(
            &|c| {
                c.red.kmin_bytes = 5000;
                c.red.kmax_bytes = 4000;
            },
            "--kmin 5000 B is above --kmax 4000 B",
        );
        bad(&|c| c.red.pmax = 1.5, "--pmax 1.5 is not a probability");
        bad(
            &|c| c.red.pmax = f64::NAN,
            "--pmax NaN is not a probability",
        );
        bad(
            &|c| c.buffer_bytes = Some(100),
            "--buffer 100 B cannot hold one 4170 B frame",
        );
        bad(&|c| c.mtu = 1500, "--mtu 1500 is not one of");
        bad(&|c| c.message_bytes = 0, "message size must be in 1..=");
        bad(&|c| c.window = Some(0), "window must be in 1..=4096");
        bad(
            &|c| c.timeout = Some(0),
            "timeout exponent must be in 1..=31",
        );
        bad(&|c| c.retry_cnt = 8, "retry_cnt must be in 0..=7");
        // Small messages need only a small buffer.
        let mut c = ok.clone();
        c.message_bytes = 64;
        c.buffer_bytes = Some(200);
        assert_eq!(c.check(), Ok(()));
    }

    #[test]
    fn a_short_incast_measures_and_drains() {
        let mut c = IncastConfig::new(2, 100_000_000_000, CcConfig::None);
        c.duration = Duration::from_micros(400);
        let r = run(&c).unwrap();
        assert!(r.drained, "{r}");
        assert_eq!(r.flows.len(), 2);
        assert_eq!(r.completion_errors, 0);
        assert_eq!(r.queue.samples, 401);
        assert_eq!(r.queue_second_half.samples, 201);
        assert!(r.flows.iter().all(|f| f.bytes_completed > 0), "{r}");
        assert!(
            r.utilisation_second_half > 0.9 && r.utilisation_second_half <= 1.0,
            "{r}"
        );
        // ECN-capable traffic, no rate control: marks, CNPs, all ignored.
        assert!(r.ecn_marked > 0 && r.ce_received == r.ecn_marked, "{r}");
        assert!(
            r.cnp_sent > 0 && r.cnp_ignored == r.cnp_sent && r.cnp_handled == 0,
            "{r}"
        );
        let text = r.to_string();
        assert!(text.starts_with("incast 2:1 at 100.00 Gb/s"), "{text}");
        assert!(text.contains("Jain"), "{text}");
        // The same seed gives the same run.
        let mut s = run(&c).unwrap();
        s.wall_s = r.wall_s;
        assert_eq!(s, r);
    }

    #[test]
    fn a_flow_whose_retries_run_out_ends_without_hanging_the_run() {
        // No retries, a timer shorter than the queue: without rate
        // control some QP times out and fails; its flow stops, the others
        // go on, and the run ends.
        let mut c = IncastConfig::new(16, 100_000_000_000, CcConfig::None);
        c.duration = Duration::from_millis(2);
        c.retry_cnt = 0;
        c.timeout = Some(4);
        let r = run(&c).unwrap();
        assert!(r.completion_errors > 0, "{r}");
        assert!(r.qp_errors > 0, "{r}");
        assert!(r.drained, "{r}");
        let failed = r.flows.iter().filter(|f| f.completion_errors > 0).count();
        assert!(failed > 0 && failed <= 16, "{r}");
        assert!(r.to_string().contains("QPs in error"), "{r}");
    }

    #[test]
    fn csv_series_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = IncastConfig::new(3, 100_000_000_000, CcConfig::None);
        c.duration = Duration::from_micros(300);
        c.csv_dir = Some(dir.path().join("out"));
        let r = run(&c).unwrap();
        let read = |n: &str| std::fs::read_to_string(dir.path().join("out").join(n)).unwrap();
        let q = read("queue.csv");
        let mut lines = q.lines();
        assert_eq!(lines.next(), Some("time_ns,queue_bytes"));
        assert_eq!(lines.next(), Some("0,0"));
        assert_eq!(q.lines().count(), 1 + 301);
        assert!(q.lines().last().unwrap().starts_with("300000,"));
        let f = read("flows.csv");
        assert_eq!(f.lines().next(), Some("time_ns,flow,goodput_bps,rate_bps"));
        // Three windows of 100 µs, three flows each.
        assert_eq!(f.lines().count(), 1 + 9);
        assert!(f.lines().nth(1).unwrap().starts_with("100000,0,"));
        assert!(f.lines().all(|l| l.split(',').count() == 4));
        let t = read("cc_trace.csv");
        assert_eq!(
            t.lines().next().unwrap(),
            format!("flow,{}", TraceRecord::CSV_HEADER)
        );
        // Without rate control every CNP is a trace row ("cnp_ignored").
        assert_eq!(t.lines().count() as u64 - 1, r.cnp_ignored);
        // An unwritable directory is an error, named.
        let mut c = c.clone();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "x").unwrap();
        c.csv_dir = Some(file.clone());
        let e = run(&c).unwrap_err().to_string();
        assert!(e.contains(&file.display().to_string()), "{e}");
    }
}
