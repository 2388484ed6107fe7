//! The bodies of the simulator's subcommands: `ferroce sim` ([`sim`]: the
//! soak of [`super::soak`] per seed, or with `--incast` one run of
//! [`super::incast`]) and `ferroce lab` ([`lab`]). Each takes its options
//! as plain values (the command line's text for rates, sizes and
//! durations, parsed here), prints its report on stdout and its problems
//! on stderr, and says whether the run passed (false: exit 1).

use super::incast::{self, IncastConfig};
use super::lab::experiment::{run_file, LabOptions};
pub use super::soak::Side;
use super::soak::{self, SimConfig, SimRun, Totals};
use crate::backend::fabric::LinkConfig;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The options of `ferroce sim`, as given on the command line (see its
/// `--help` for each).
#[derive(Debug, Clone, PartialEq)]
pub struct SimOpts {
    /// `--incast N`: N senders into one receiver instead of the soak.
    pub incast: Option<usize>,
    /// `--duration`: how long the incast senders post WRITEs, in virtual
    /// time (e.g. `20ms`; default 20 ms).
    pub duration: Option<String>,
    /// `--cc`: the incast senders' rate control, `dcqcn-cx`, `dcqcn-paper`
    /// or `none` (default `dcqcn-cx`).
    pub cc: Option<String>,
    /// `--kmin`: incast ECN marking starts above this many bytes queued
    /// (K, M suffixes; default scaled with the rate).
    pub kmin: Option<String>,
    /// `--kmax`: above this many bytes queued every ECN-capable frame is
    /// marked (K, M suffixes; default scaled with the rate).
    pub kmax: Option<String>,
    /// `--pmax`: the incast marking probability at Kmax (default 1).
    pub pmax: Option<f64>,
    /// `--buffer`: the incast switch ports' drop-tail buffer in bytes (K, M
    /// suffixes; default 2 x Kmax).
    pub buffer: Option<String>,
    /// `--csv`: directory for the incast's queue.csv, flows.csv and
    /// cc_trace.csv.
    pub csv: Option<PathBuf>,
    /// `--ops`: the operations to mix, comma-separated `send`, `write`,
    /// `read`, `atomic` or `all`.
    pub ops: String,
    /// `--msgs`: messages per seed, spread over the QP pairs.
    pub msgs: u64,
    /// `--size`: message sizes in bytes, `MIN-MAX` or one size, K and M
    /// suffixes (default `1-8192`; incast one size, 64 KiB).
    pub size: Option<String>,
    /// `--mtu`: the path MTU in bytes, 256 to 4096 (default 1024; incast
    /// 4096).
    pub mtu: Option<u32>,
    /// `--loss`: probability that a frame is lost, each direction.
    pub loss: f64,
    /// `--reorder`: probability that a frame is held back by up to
    /// `reorder_delay`.
    pub reorder: f64,
    /// `--dup`: probability that a frame arrives twice.
    pub dup: f64,
    /// `--corrupt`: probability that one bit of a frame is flipped.
    pub corrupt: f64,
    /// `--seed`: the seed of the faults and the data (one run).
    pub seed: u64,
    /// `--seeds A-B`: run every seed from A to B inclusive instead.
    pub seeds: Option<String>,
    /// `--rate`: link rate in bits/s with a suffix (`100G`, `400M`), or
    /// `inf` for no serialisation.
    pub rate: String,
    /// `--delay`: one-way propagation delay of a link (`1us`, `500ns`).
    pub delay: String,
    /// `--reorder-delay`: the largest extra delay of a reordered frame.
    pub reorder_delay: String,
    /// `--queue-bytes`: drop-tail limit of each egress queue in bytes
    /// (`None`: unbounded).
    pub queue_bytes: Option<usize>,
    /// `--qps`: QP pairs between the two hosts.
    pub qps: u32,
    /// `--bidir`: both hosts post work requests on every QP pair.
    pub bidir: bool,
    /// `--window`: work requests outstanding per QP at most (default 64;
    /// incast: enough to overflow the buffer without rate control).
    pub window: Option<u32>,
    /// `--recvs`: receive buffers the responder keeps posted per QP
    /// (default window + 8).
    pub recvs: Option<u32>,
    /// `--recv-delay`: how long after a completion the responder posts a
    /// receive buffer again.
    pub recv_delay: String,
    /// `--timeout`: local ACK timeout exponent, 4.096 us x 2^N (default:
    /// 10, more on a slow link).
    pub timeout: Option<u8>,
    /// `--retry-cnt`: transport retries before an error completion (0-7).
    pub retry_cnt: u8,
    /// `--time-limit`: the virtual time one seed may take at most.
    pub time_limit: String,
    /// `--json`: one JSON object per seed (and one with the totals)
    /// instead of text lines.
    pub json: bool,
    /// `--pcap`: write one host's frames to this pcap file (one seed only).
    pub pcap: Option<PathBuf>,
    /// Whose frames `pcap` records.
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

/// `ferroce lab`: runs an experiment file and prints its summary, the runs
/// that stopped early and where the results are; a run that stopped early
/// is a result, so this is Ok(true) unless the file cannot run.
pub fn lab(file: &Path, opts: &LabOptions) -> Result<bool> {
    let report = run_file(file, opts)?;
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
    println!("results in {}", opts.out.display());
    Ok(true)
}
