//! The bodies of the simulator's subcommands: `ferroce sim` ([`sim`]: the
//! soak of [`super::soak`] per seed, or with `--incast` one run of
//! [`super::incast`]) and `ferroce lab` ([`lab`]). Each takes its options
//! as plain values (the command line's text for rates, sizes and
//! durations, parsed here), prints its report on stdout and its problems
//! on stderr, and says whether the run passed (false: exit 1).

use super::incast::{self, IncastConfig};
use super::lab::experiment::{run_plan, LabOptions};
use super::lab::merge::list_runs;
use super::lab::plan::LabPlan;
pub use super::soak::Side;
use super::soak::{self, SimConfig, SimRun, Totals};
use crate::backend::fabric::LinkConfig;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The options of `ferroce sim`, as given on the command line (the text
/// of rates, sizes and durations is parsed by [`sim`]).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct SimOpts {
    /// Incast mode: N senders (1-64) each write RDMA WRITEs into one
    /// receiver through one switch whose ports mark ECN (RED) and drop at
    /// the tail; prints goodput per flow, Jain's fairness, bottleneck
    /// utilisation, queue percentiles, CNPs and drops. Takes --rate,
    /// --delay, --mtu (default 4096), --size (one size, default 64K),
    /// --window (default: enough to overflow the buffer without rate
    /// control), --timeout, --retry-cnt, --seed, --json and the incast
    /// flags (--duration, --cc, --kmin, --kmax, --pmax, --buffer, --csv).
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = [
            "ops", "msgs", "loss", "reorder", "dup", "corrupt", "seeds", "reorder_delay",
            "queue_bytes", "qps", "bidir", "recvs", "recv_delay", "time_limit", "pcap",
        ]
    )]
    pub incast: Option<usize>,
    /// Incast: how long the senders post WRITEs, in virtual time (e.g.
    /// 20ms; default 20ms).
    #[arg(long, requires = "incast")]
    pub duration: Option<String>,
    /// Incast: the senders' rate control: dcqcn-cx, dcqcn-paper, timely, dctcp,
    /// hpcc, swift or none, or a .toml parameter file (default dcqcn-cx). The CNP
    /// interval follows: 50us for dcqcn-paper, 4us otherwise.
    #[arg(long, requires = "incast")]
    pub cc: Option<String>,
    /// Incast: ECN marking starts above this many bytes queued (K and M
    /// suffixes, binary; default 50 KB x rate / 100G).
    #[arg(long, requires = "incast")]
    pub kmin: Option<String>,
    /// Incast: every ECN-capable frame is marked above this many bytes
    /// queued (default 1.6 MB x rate / 100G).
    #[arg(long, requires = "incast")]
    pub kmax: Option<String>,
    /// Incast: the marking probability at Kmax (default 1).
    #[arg(long, requires = "incast")]
    pub pmax: Option<f64>,
    /// Incast: the switch ports' drop-tail buffer in bytes (K and M
    /// suffixes; default 2 x Kmax).
    #[arg(long, requires = "incast")]
    pub buffer: Option<String>,
    /// Incast: write queue.csv, flows.csv and cc_trace.csv into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR", requires = "incast")]
    pub csv: Option<PathBuf>,
    /// Operations to mix, comma-separated: send, write, read, atomic (or all).
    #[arg(long, default_value = "send,write,read,atomic")]
    pub ops: String,
    /// Messages per seed (spread over the QP pairs).
    #[arg(long, default_value_t = 2000)]
    pub msgs: u64,
    /// Message sizes in bytes, MIN-MAX (uniform) or one size; K and M
    /// suffixes [default: 1-8192; with --incast one size, 64K].
    #[arg(long)]
    pub size: Option<String>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 1024; 4096 with
    /// --incast].
    #[arg(long)]
    pub mtu: Option<u32>,
    /// Probability that a frame is lost (each direction).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Probability that a frame is delayed by up to --reorder-delay.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Probability that a frame arrives twice.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Probability that one bit of a frame is flipped (it then fails its
    /// ICRC or IP checksum and is dropped by the receiver).
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// The seed of the faults and the data.
    #[arg(long, default_value_t = 1, conflicts_with = "seeds")]
    pub seed: u64,
    /// Runs every seed of A-B (inclusive), one line each, then a total line.
    #[arg(long)]
    pub seeds: Option<String>,
    /// Link rate (bits/s): 100G, 25G, 400M, ...; inf for no serialisation.
    #[arg(long, default_value = "100G")]
    pub rate: String,
    /// One-way propagation delay: 1us, 500ns, 2ms, ...
    #[arg(long, default_value = "1us")]
    pub delay: String,
    /// The largest extra delay of a reordered frame.
    #[arg(long, default_value = "10us")]
    pub reorder_delay: String,
    /// Drop-tail limit of each egress queue in bytes (default: unbounded).
    #[arg(long)]
    pub queue_bytes: Option<usize>,
    /// QP pairs between the two hosts.
    #[arg(long, default_value_t = 1)]
    pub qps: u32,
    /// Both hosts post work requests on every QP pair (each QP is requester
    /// and responder at once); otherwise host A posts and host B answers.
    #[arg(long)]
    pub bidir: bool,
    /// Work requests outstanding per QP at most [default: 64; with
    /// --incast, enough to overflow the buffer without rate control].
    #[arg(long)]
    pub window: Option<u32>,
    /// Receive buffers the responder keeps posted per QP (default: window +
    /// 8, so a SEND never waits; fewer exercise RNR NAKs).
    #[arg(long)]
    pub recvs: Option<u32>,
    /// How long after its completion the responder posts a receive buffer
    /// again (a slow consumer; with a small --recvs, RNR NAKs).
    #[arg(long, default_value = "0ns")]
    pub recv_delay: String,
    /// Local ACK timeout exponent (4.096 us x 2^N); default: 10 (4.2 ms),
    /// more on a link too slow for it.
    #[arg(long)]
    pub timeout: Option<u8>,
    /// Transport retries before an error completion (0-7).
    #[arg(long, default_value_t = 7)]
    pub retry_cnt: u8,
    /// Loss recovery of both hosts' QPs: gbn (go-back-N, the IBTA's, what
    /// every RoCE peer speaks) or sr (selective repeat as IRN runs it,
    /// ferroce to ferroce only).
    #[arg(long, default_value = "gbn", value_parser = clap::value_parser!(crate::transport::Recovery))]
    pub recovery: crate::transport::Recovery,
    /// Virtual time one seed may take at most.
    #[arg(long, default_value = "120s")]
    pub time_limit: String,
    /// One JSON object per seed (and a last one with the totals).
    #[arg(long)]
    pub json: bool,
    /// Write host A's frames (sent and received) to this pcap file (one
    /// seed only).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Whose frames --pcap records: a (the requester) or b (the responder).
    #[arg(long, value_enum, default_value_t = Side::A, requires = "pcap")]
    pub pcap_host: Side,
}

/// `ferroce sim`: one summary line (or JSON object) per seed, a total line
/// when there are several; Ok(false) (exit 1) unless every seed verified.
/// With `incast`, one incast run instead: its table (or one JSON object);
/// Ok(false) when a completion failed or the WRITEs did not drain.
pub fn sim(a: &SimOpts) -> Result<bool> {
    if let Some(n) = a.incast {
        return incast_run(a, n);
    }
    let run = SimRun::new(soak_config(a)?)?;
    if let Some(t) = a.timeout {
        let need = soak::needed_timeout(run.config());
        let have = crate::transport::ack_timeout(t).unwrap_or_default();
        if have < need {
            eprintln!(
                "ferroce: warning: --timeout {t} ({have}) is shorter than the {need} this link may \
                 take between two acknowledgements: expect retries of packets that are not lost \
                 (the default would be {})",
                soak::auto_timeout(run.config())
            );
        }
    }
    let (first, last) = match &a.seeds {
        Some(s) => soak::parse_seeds(s)?,
        None => (a.seed, a.seed),
    };
    if a.pcap.is_some() && first != last {
        bail!("--pcap captures one seed; give --seed (or a one-seed --seeds)");
    }
    let mut capture = match &a.pcap {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("{}", p.display()))?;
            let w: Box<dyn Write> = Box::new(std::io::BufWriter::new(f));
            let w = crate::pcap::Writer::new(
                w,
                crate::pcap::Precision::Nano,
                crate::pcap::LINKTYPE_ETHERNET,
                crate::pcap::DEFAULT_SNAPLEN,
            )
            .with_context(|| format!("{}", p.display()))?;
            Some((a.pcap_host, w))
        }
        None => None,
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut totals = Totals::default();
    for seed in first..=last {
        let r = run.run(seed, capture.take());
        if a.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({ "kind": "seed", "report": r })
            )?;
        } else {
            writeln!(out, "{}", r.line())?;
        }
        out.flush()?;
        for p in &r.problems {
            eprintln!("seed {seed}: {p}");
        }
        if let Some(h) = &r.hang {
            eprintln!("seed {seed}: {h}");
        }
        totals.add(&r);
    }
    if first != last {
        if a.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({ "kind": "totals", "totals": totals })
            )?;
        } else {
            writeln!(out, "{}", totals.line())?;
        }
    }
    Ok(totals.ok())
}

/// The soak's configuration from the options.
fn soak_config(a: &SimOpts) -> Result<SimConfig> {
    let (size_min, size_max) = soak::parse_size(a.size.as_deref().unwrap_or("1-8192"))?;
    let link = LinkConfig {
        rate_bps: soak::parse_rate(&a.rate)?,
        delay: soak::parse_duration(&a.delay)?,
        loss: a.loss,
        reorder: a.reorder,
        reorder_delay: soak::parse_duration(&a.reorder_delay)?,
        dup: a.dup,
        corrupt: a.corrupt,
        queue_bytes: a.queue_bytes,
        ..LinkConfig::default()
    };
    Ok(SimConfig {
        ops: soak::parse_ops(&a.ops)?,
        msgs: a.msgs,
        size_min,
        size_max,
        mtu: a.mtu.unwrap_or(1024),
        link,
        qps: a.qps,
        bidir: a.bidir,
        window: a.window.unwrap_or(64),
        recvs: a.recvs,
        recv_delay: soak::parse_duration(&a.recv_delay)?,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        time_limit: soak::parse_duration(&a.time_limit)?,
        recovery: a.recovery,
    })
}

/// A byte count for an incast flag: one size with an optional K or M
/// suffix (binary), as `--size` takes it.
fn parse_bytes(flag: &str, s: &str) -> Result<usize> {
    match soak::parse_size(s) {
        Ok((a, b)) if a == b => Ok(a as usize),
        _ => bail!("{flag} {s:?} is not a byte count (e.g. 400000, 400K, 2M)"),
    }
}

/// `ferroce sim --incast N`: one incast run, its table (or one JSON
/// object); Ok(false) (exit 1) when a completion failed or the WRITEs did
/// not drain.
fn incast_run(a: &SimOpts, n: usize) -> Result<bool> {
    let rate = soak::parse_rate(&a.rate)?;
    let cc = incast::parse_cc(a.cc.as_deref().unwrap_or("dcqcn-cx"))?;
    let mut cfg = IncastConfig::new(n, rate, cc);
    cfg.recovery = a.recovery;
    cfg.link_delay = soak::parse_duration(&a.delay)?;
    if let Some(d) = &a.duration {
        cfg.duration = soak::parse_duration(d)?;
    }
    if let Some(k) = &a.kmin {
        cfg.red.kmin_bytes = parse_bytes("--kmin", k)?;
    }
    if let Some(k) = &a.kmax {
        cfg.red.kmax_bytes = parse_bytes("--kmax", k)?;
    }
    if let Some(p) = a.pmax {
        cfg.red.pmax = p;
    }
    if let Some(b) = &a.buffer {
        cfg.buffer_bytes = Some(parse_bytes("--buffer", b)?);
    }
    if let Some(m) = a.mtu {
        cfg.mtu = m;
    }
    if let Some(s) = &a.size {
        cfg.message_bytes =
            u32::try_from(parse_bytes("--size", s)?).context("--size is too large")?;
    }
    cfg.window = a.window;
    cfg.timeout = a.timeout;
    cfg.retry_cnt = a.retry_cnt;
    cfg.seed = a.seed;
    cfg.csv_dir = a.csv.clone();
    let r = incast::run(&cfg)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "kind": "incast", "result": r })
        )?;
    } else {
        writeln!(out, "{r}")?;
    }
    out.flush()?;
    if let Some(s) = &r.stopped {
        eprintln!("ferroce: incast stopped early: {s}");
    }
    Ok(r.completion_errors == 0 && r.drained)
}

/// `ferroce lab`: runs an experiment file (or, with `--only`, some of its
/// runs; with `--merge`, none: their parts are put together) and prints
/// its summary, the runs that stopped early, the wall-clock figures and
/// where the results are; a run that stopped early is a result, so this
/// is Ok(true) unless the file cannot run. With `--list-runs`, prints the
/// run names only.
pub fn lab(file: &Path, opts: &LabOptions) -> Result<bool> {
    let plan = LabPlan::load(file)?;
    if opts.list_runs {
        print!("{}", list_runs(&plan));
        return Ok(true);
    }
    let report = run_plan(&plan, opts)?;
    println!("{}", report.name);
    print!("{}", report.table);
    for w in &report.plot_warnings {
        eprintln!("ferroce: warning: plot not drawn: {w}");
    }
    for s in &report.runs {
        for d in &s.deadlocks {
            println!("run {}: {d}", s.name);
        }
        match &s.stopped {
            Some(why) if !s.deadlocks.contains(why) => println!("run {}: {why}", s.name),
            _ => {}
        }
    }
    println!();
    print!("{}", report.timing);
    println!("results in {}", opts.out_dir().display());
    Ok(true)
}
