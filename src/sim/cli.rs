//! The bodies of the simulator's subcommands: `ferroce sim` ([`sim`]: the
//! soak of [`super::soak`] per seed, or with `--incast` one run of
//! [`super::incast`]) and `ferroce lab` ([`lab`]). Each takes its options
//! as plain values (the command line's text for rates, sizes and
//! durations, parsed here), prints its report on stdout and its problems
//! on stderr, and says whether the run passed (false: exit 1).

#![allow(missing_docs)] // documented in a later commit
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
    pub duration: Option<String>,
    pub cc: Option<String>,
    pub kmin: Option<String>,
    pub kmax: Option<String>,
    pub pmax: Option<f64>,
    pub buffer: Option<String>,
    pub csv: Option<PathBuf>,
    pub ops: String,
    pub msgs: u64,
    pub size: Option<String>,
    pub mtu: Option<u32>,
    pub loss: f64,
    pub reorder: f64,
    pub dup: f64,
    pub corrupt: f64,
    pub seed: u64,
    pub seeds: Option<String>,
    pub rate: String,
    pub delay: String,
    pub reorder_delay: String,
    pub queue_bytes: Option<usize>,
    pub qps: u32,
    pub bidir: bool,
    pub window: Option<u32>,
    pub recvs: Option<u32>,
    pub recv_delay: String,
    pub timeout: Option<u8>,
    pub retry_cnt: u8,
    pub time_limit: String,
    pub json: bool,
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
