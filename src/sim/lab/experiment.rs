//! `ferroce lab FILE --out DIR`: every run of an experiment file, on
//! `--jobs` threads (each run built and driven in its thread), each into
//! its own folder, then the table and plots that compare them, written
//! from the runs in plan order: the same bytes for any number of threads.
//! `--only RUN` runs some of the runs (no experiment-level files), and
//! `--merge PART_DIR...` puts such parts together ([`super::merge`]).
//!
//! # The results folder
//!
//! ```text
//! DIR/summary.txt, summary.csv, summary.json   one row per run
//! DIR/fct.csv                                  FCT slowdown per run and size bucket
//! DIR/fct-hpcc.csv                             FCT slowdown per run in 5% bins of flows by size (HPCC's scripts)
//! DIR/sweep-*.png                              a figure over the swept value, a line per variant
//! DIR/fct-p99.png                              p99 FCT slowdown per size bucket, a bar per run
//! DIR/fct-hpcc-p95.png                         p95 slowdown (HPCC ideal) against flow size, a line per run
//! DIR/RUN/summary.json                         everything the run measured
//! DIR/RUN/queue.csv, queue.png                 the hot (or chosen) egress queues over time
//! DIR/RUN/rates.csv, rates.png                 per flow: goodput, its controller's rate and last RTT sample
//! DIR/RUN/rtt.png                             per flow: its controller's RTT samples (controllers that take them)
//! DIR/RUN/signals.csv                         ECN marks, CNPs, PFC frames and paused time so far
//! DIR/RUN/pauses.png                          PFC frames so far, over time (when PFC acted)
//! DIR/RUN/flows.csv                            per flow: size, start, FCT, ideal FCT, goodput
//! DIR/RUN/collectives.csv                      per all-reduce step: start, end, completion, ideal
//! DIR/collective-steps.png                     each step's median completion, a line per run
//! DIR/RUN/run.json                             the run's identity: experiment, file hash, seed, place
//! DIR/RUN/timing.json                          the run's wall time and events per second
//! DIR/timing.txt                               every run's wall time and events per second
//! DIR/RUN/fct-hpcc.csv                         the run's FCT table as the HPCC simulator's scripts make it
//! DIR/RUN/flow-throughput.csv                  chosen flows: Gb/s acknowledged per rate_sample_us
//! ```
//!
//! `timing.json` and `timing.txt` are the only files that differ from one
//! invocation to the next; every other file is the same, byte for byte,
//! for the same file and seed.
//!
//! With all-reduce workloads, the summary table also has each run's
//! collective time p50 and p99 (its first `allreduce`; `summary.json` of
//! the run has them all).

#![deny(unsafe_code)]
use super::config::LabConfigError;
use super::merge::{self, MergeError, RunIdentity, RunTiming, TIMING_FILE};
use super::output::{Cell, Column, CsvSeries, OutputError, Results, SummaryTable};
use super::plan::{LabPlan, Run as PlannedRun};
use super::plot::{BarPlot, LinePlot, Series};
use super::progress::{Board, Progress};
use super::resolve::{QueueSelect, Resolved};
use super::run::{LabRun, RunError, RunSeries, RunSummary};
use super::workload::{generate, SizeBucket};
use crate::cc::CcConfig;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Queues a run plots at most (the hottest first).
const MAX_PLOTTED_QUEUES: usize = 8;
/// Flows whose rate a run plots at most.
const MAX_PLOTTED_FLOWS: usize = 64;

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The file, or a run's settings or workloads, cannot be used.
    #[error(transparent)]
    Config(#[from] LabConfigError),
    /// A run could not be built or driven.
    #[error("run {run}: {error}")]
    Run {
        /// The run's name.
        run: String,
        /// Why it failed.
        error: RunError,
    },
    /// The results could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// `--only` or `--merge` was given runs that do not fit the file.
    #[error(transparent)]
    Merge(#[from] MergeError),
}

/// How to run an experiment file.
#[derive(Debug, Clone, clap::Args)]
pub struct LabOptions {
    /// The results folder (created if missing).
    #[arg(long, required_unless_present = "list_runs")]
    pub out: Option<PathBuf>,
    /// Replaces the file's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write PNG plots (a missing font turns into a warning); on the
    /// command line, `--no-plots` turns them off.
    #[arg(
        long = "no-plots",
        action = clap::ArgAction::SetFalse,
        help = "No PNG plots (CSV and the summary only)"
    )]
    pub plots: bool,
    /// Runs at once, each on a thread (default: the cores there are).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Print the run names, one per line in plan order, and nothing else.
    #[arg(long, conflicts_with_all = ["only", "merge"])]
    pub list_runs: bool,
    /// Run only this run (repeatable, or a comma list): its folder, no
    /// experiment-level files (a part for --merge).
    #[arg(long, value_name = "RUN", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Run nothing: check the runs in these folders (written with --only)
    /// and write the results folder from them, as a local run does.
    #[arg(long, value_name = "PART_DIR", num_args = 1.., conflicts_with = "only")]
    pub merge: Vec<PathBuf>,
    /// Every ICRC computed and checked and every WRITE placed, whatever
    /// the file's `transport.icrc_offload` and `transport.place_writes`:
    /// the work the lab leaves to the NICs by default done in software
    /// (results are the same; the runs are slower).
    #[arg(long)]
    pub full_checks: bool,
}

impl LabOptions {
    /// Options for a local run of everything into `out`.
    pub fn new(out: impl Into<PathBuf>) -> LabOptions {
        LabOptions {
            out: Some(out.into()),
            seed: None,
            quiet: false,
            plots: true,
            jobs: None,
            list_runs: false,
            only: Vec::new(),
            merge: Vec::new(),
            full_checks: false,
        }
    }

    /// The results folder (empty without `--out`, which only
    /// `--list-runs` may leave out).
    pub fn out_dir(&self) -> &Path {
        self.out.as_deref().unwrap_or(Path::new(""))
    }

    /// The threads to run on: `--jobs`, else the cores available.
    pub fn threads(&self) -> usize {
        self.jobs.map(usize::from).unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }
}

/// What an experiment produced.
#[derive(Debug)]
pub struct LabReport {
    /// The experiment's `name`.
    pub name: String,
    /// What each run measured, in plan order.
    pub runs: Vec<RunSummary>,
    /// The summary table, as written to `summary.txt`, `.csv` and `.json`.
    pub table: SummaryTable,
    /// Plots that could not be drawn, and why.
    pub plot_warnings: Vec<String>,
    /// The wall-clock figures, as written to `timing.txt`.
    pub timing: String,
}

/// Runs every run of the experiment at `path` and writes the results
/// folder.
pub fn run_file(path: &Path, opts: &LabOptions) -> Result<LabReport, LabError> {
    let plan = LabPlan::load(path)?;
    run_plan(&plan, opts)
}

/// Runs a loaded plan: every run, or those `--only` names; or, with
/// `--merge`, none ([`merge::merge_plan`]).
pub fn run_plan(plan: &LabPlan, opts: &LabOptions) -> Result<LabReport, LabError> {
    if !opts.merge.is_empty() {
        return merge::merge_plan(plan, opts);
    }
    let picked = merge::select(plan, &opts.only)?;
    let results = Results::create(opts.out_dir())?;
    let wall = std::time::Instant::now();
    let threads = opts.threads().clamp(1, picked.len().max(1));
    let board = (!opts.quiet && threads > 1 && std::io::stderr().is_terminal())
        .then(|| Board::new(picked.len()));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    // Each thread takes the next run in plan order until none is left (or
    // one failed); the results are put back in plan order.
    let mut done: Vec<(usize, Result<RunDone, LabError>)> = std::thread::scope(|scope| {
        let work = || {
            let mut out = Vec::new();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= picked.len() || failed.load(Ordering::Relaxed) {
                    return out;
                }
                let r = run_one(plan, picked[k], opts, &results, board.as_ref());
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                out.push((k, r));
            }
        };
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(k, _)| *k);
    let mut runs = Vec::with_capacity(done.len());
    let mut timing = Vec::with_capacity(done.len());
    let mut warnings = Vec::new();
    for (_, r) in done {
        let r = r?;
        warnings.extend(r.warnings);
        timing.push(r.timing);
        runs.push(r.summary);
    }
    let table = if opts.only.is_empty() {
        write_experiment(&results, plan, &runs, opts.plots, &mut warnings)?
    } else {
        summary_table(plan, &runs)
    };
    let note = format!(
        "{} of {} runs on {threads} thread{} in {:.2} s; {}",
        runs.len(),
        plan.runs.len(),
        if threads == 1 { "" } else { "s" },
        wall.elapsed().as_secs_f64(),
        merge::timing_total(&timing)
    );
    let timing_text = write_timing(&results, &timing, &note)?;
    Ok(LabReport {
        name: plan.name.clone(),
        runs,
        table,
        plot_warnings: warnings,
        timing: timing_text,
    })
}

/// What one run leaves for the experiment.
struct RunDone {
    summary: RunSummary,
    timing: RunTiming,
    warnings: Vec<String>,
}

/// Builds, drives and writes run `i` of the plan (on the calling thread).
fn run_one(
    plan: &LabPlan,
    i: usize,
    opts: &LabOptions,
    results: &Results,
    board: Option<&Arc<Board>>,
) -> Result<RunDone, LabError> {
    let run = &plan.runs[i];
    let mut warnings = Vec::new();
    let seed = opts.seed.unwrap_or(run.config.seed);
    let flows = generate(&run.config, &run.resolved.topology, seed)?;
    let resolved = checked_fully(&run.resolved, opts.full_checks);
    let lab = LabRun::new(&resolved, flows, seed).map_err(|error| LabError::Run {
        run: run.name.clone(),
        error,
    })?;
    let mut progress = match board {
        _ if opts.quiet => Progress::disabled(),
        Some(b) => b.progress(i, run.name.clone(), run.resolved.duration_ns),
        None => Progress::new(run.name.clone(), run.resolved.duration_ns),
    };
    let (mut summary, series) = lab.run(&mut progress).map_err(|error| LabError::Run {
        run: run.name.clone(),
        error,
    })?;
    progress.finish();
    summary.name = run.name.clone();
    let dir = results.run_dir(&run.name)?;
    write_run(&dir, &summary, &series, &run.resolved.queues)?;
    if opts.plots {
        plot_run(&dir, &run.name, &series, &mut warnings);
        plot_rtt(&dir, run, &series, &mut warnings);
    }
    let timing = RunTiming::of(&summary);
    timing.write(&dir)?;
    // Last: its presence says the run's folder is complete.
    RunIdentity::of(plan, i, opts.seed).write(&dir)?;
    Ok(RunDone {
        summary,
        timing,
        warnings,
    })
}

/// The experiment-level files from every run's summary (in plan order):
/// the summary table, `fct.csv` and, with `plots`, the figures. Returns
/// the table.
pub(super) fn write_experiment(
    results: &Results,
    plan: &LabPlan,
    runs: &[RunSummary],
    plots: bool,
    warnings: &mut Vec<String>,
) -> Result<SummaryTable, LabError> {
    let table = summary_table(plan, runs);
    table.write(results.dir())?;
    write_fct(results.dir(), runs)?;
    super::fct::write_csv(results.dir(), runs)?;
    if plots {
        plot_plan(results.dir(), plan, runs, warnings);
    }
    Ok(table)
}

/// Writes `timing.txt`: the timing table, then `note`; returns its text.
pub(super) fn write_timing(
    results: &Results,
    timing: &[RunTiming],
    note: &str,
) -> Result<String, LabError> {
    let text = format!("{}{note}\n", merge::timing_table(timing));
    let path = results.dir().join(TIMING_FILE);
    std::fs::write(&path, &text).map_err(|source| OutputError::Io { path, source })?;
    Ok(text)
}

/// A run's settings with the NICs' offloads turned off when `full` holds
/// ([`LabOptions::full_checks`]).
fn checked_fully(r: &Resolved, full: bool) -> std::borrow::Cow<'_, Resolved> {
    if !full {
        return std::borrow::Cow::Borrowed(r);
    }
    let mut r = r.clone();
    r.transport.icrc_offload = false;
    r.transport.place_writes = true;
    std::borrow::Cow::Owned(r)
}

/// The ports a run shows: for `Bottleneck`, those whose queue ever passed
/// its own Kmin (or held anything, on a port that does not mark), hottest
/// first; otherwise every recorded one.
fn shown_queues(series: &RunSeries, select: &QueueSelect) -> Vec<usize> {
    let mut idx: Vec<(u32, usize)> = series
        .queues
        .iter()
        .enumerate()
        .map(|(i, (_, s))| (s.iter().copied().max().unwrap_or(0), i))
        .collect();
    if matches!(select, QueueSelect::Bottleneck) {
        let floor = |i: usize| series.queue_kmin.get(i).copied().flatten().unwrap_or(0);
        idx.retain(|&(m, i)| m as usize > floor(i));
        idx.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    idx.into_iter().map(|(_, i)| i).collect()
}

fn write_run(
    dir: &Path,
    summary: &RunSummary,
    series: &RunSeries,
    select: &QueueSelect,
) -> Result<(), OutputError> {
    let json = serde_json::to_string_pretty(summary).unwrap_or_default();
    let path = dir.join("summary.json");
    std::fs::write(&path, json + "\n").map_err(|source| OutputError::Io { path, source })?;

    let shown = shown_queues(series, select);
    let mut header = vec!["time_ns".to_string()];
    header.extend(shown.iter().map(|&i| series.queues[i].0.clone()));
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut q = CsvSeries::create(&dir.join("queue.csv"), &h)?;
    let mut row = Vec::with_capacity(h.len());
    for (k, &t) in series.queue_times.iter().enumerate() {
        row.clear();
        row.push(t as f64);
        row.extend(shown.iter().map(|&i| f64::from(series.queues[i].1[k])));
        q.row(&row)?;
    }
    q.finish()?;

    let mut r = CsvSeries::create(
        &dir.join("rates.csv"),
        &["time_ns", "flow", "goodput_bps", "rate_bps", "rtt_ns"],
    )?;
    for s in &series.rates {
        r.row(&[
            s.time_ns as f64,
            s.flow as f64,
            s.goodput_bps.round(),
            s.rate_bps as f64,
            s.rtt_ns as f64,
        ])?;
    }
    r.finish()?;

    let mut p = CsvSeries::create(
        &dir.join("signals.csv"),
        &[
            "time_ns",
            "ecn_marked",
            "cnp_sent",
            "cnp_handled",
            "pfc_frames",
            "paused_ns",
        ],
    )?;
    for g in &series.signals {
        p.row(&[
            g.time_ns as f64,
            g.ecn_marked as f64,
            g.cnp_sent as f64,
            g.cnp_handled as f64,
            g.pfc_frames as f64,
            g.paused_ns as f64,
        ])?;
    }
    p.finish()?;

    let mut f = CsvSeries::create(
        &dir.join("flows.csv"),
        &[
            "flow",
            "workload",
            "tag",
            "src",
            "dst",
            "bytes",
            "bytes_completed",
            "start_ns",
            "fct_ns",
            "ideal_fct_ns",
            "goodput_second_half_bps",
            "retransmitted_pkts",
            "cnp_handled",
            "errors",
        ],
    )?;
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for fl in &series.flows {
        f.row_display(&[
            &fl.id,
            &fl.workload,
            &fl.tag,
            &fl.src,
            &fl.dst,
            &opt(fl.bytes),
            &fl.bytes_completed,
            &opt(fl.start_ns),
            &opt(fl.fct_ns),
            &opt(fl.ideal_fct_ns),
            &fl.goodput_second_half_bps
                .map_or(String::new(), |g| format!("{g:.0}")),
            &fl.retransmitted_pkts,
            &fl.cnp_handled,
            &fl.errors,
        ])?;
    }
    f.finish()?;
    write_collectives(dir, series)?;
    write_analysis(dir, summary, series)
}

/// `collectives.csv`: a row per step of every all-reduce repetition;
/// nothing without all-reduces.
fn write_collectives(dir: &Path, series: &RunSeries) -> Result<(), OutputError> {
    if series.collective_steps.is_empty() {
        return Ok(());
    }
    let mut c = CsvSeries::create(
        &dir.join("collectives.csv"),
        &[
            "collective",
            "tag",
            "repetition",
            "step",
            "start_ns",
            "end_ns",
            "completion_ns",
            "time_ns",
            "ideal_completion_ns",
            "ideal_time_ns",
        ],
    )?;
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for r in &series.collective_steps {
        c.row_display(&[
            &r.collective,
            &r.tag,
            &r.repetition,
            &r.step,
            &opt(r.start_ns),
            &opt(r.end_ns),
            &opt(r.completion_ns),
            &opt(r.time_ns),
            &r.ideal_completion_ns,
            &r.ideal_time_ns,
        ])?;
    }
    c.finish()?;
    Ok(())
}

/// The run's HPCC-style FCT table and per-flow throughput.
fn write_analysis(dir: &Path, summary: &RunSummary, series: &RunSeries) -> Result<(), OutputError> {
    super::fct::write_run_csv(dir, &summary.fct_hpcc)?;
    super::throughput::write_csv(dir, &series.throughput)
}

fn warn(warnings: &mut Vec<String>, what: &Path, e: impl std::fmt::Display) {
    warnings.push(format!("{}: {e}", what.display()));
}

fn plot_run(dir: &Path, name: &str, series: &RunSeries, warnings: &mut Vec<String>) {
    // Queues: the hottest few, in KB over ms.
    let mut order: Vec<usize> = (0..series.queues.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(series.queues[i].1.iter().copied().max()));
    let step = (series.queue_times.len() / 4000).max(1);
    let queues: Vec<Series> = order
        .iter()
        .take(MAX_PLOTTED_QUEUES)
        .filter(|&&i| series.queues[i].1.iter().any(|&b| b > 0))
        .map(|&i| Series {
            name: series.queues[i].0.clone(),
            points: series
                .queue_times
                .iter()
                .zip(&series.queues[i].1)
                .step_by(step)
                .map(|(&t, &b)| (t as f64 / 1e6, f64::from(b) / 1e3))
                .collect(),
        })
        .collect();
    let path = dir.join("queue.png");
    let plot = LinePlot {
        title: format!("{name}: egress queues"),
        x_label: "time (ms)".into(),
        y_label: "queue (KB)".into(),
        series: queues,
        ..LinePlot::default()
    };
    if let Err(e) = plot.write_png(&path) {
        warn(warnings, &path, e);
    }
    // PFC: frames received so far, over ms (only where PFC acted).
    if series.signals.last().is_some_and(|g| g.pfc_frames > 0) {
        let path = dir.join("pauses.png");
        let plot = LinePlot {
            title: format!("{name}: PFC frames received, all links"),
            x_label: "time (ms)".into(),
            y_label: "PFC frames so far".into(),
            series: vec![Series {
                name: "PFC frames".into(),
                points: series
                    .signals
                    .iter()
                    .map(|g| (g.time_ns as f64 / 1e6, g.pfc_frames as f64))
                    .collect(),
            }],
            ..LinePlot::default()
        };
        if let Err(e) = plot.write_png(&path) {
            warn(warnings, &path, e);
        }
    }
    // Rates: each flow's controller rate, Gb/s over ms.
    let mut by_flow: std::collections::BTreeMap<usize, Vec<(f64, f64)>> = Default::default();
    for s in &series.rates {
        if by_flow.len() < MAX_PLOTTED_FLOWS || by_flow.contains_key(&s.flow) {
            by_flow
                .entry(s.flow)
                .or_default()
                .push((s.time_ns as f64 / 1e6, s.rate_bps as f64 / 1e9));
        }
    }
    let path = dir.join("rates.png");
    let plot = LinePlot {
        title: format!("{name}: sending rate per flow"),
        x_label: "time (ms)".into(),
        y_label: "rate (Gb/s)".into(),
        series: by_flow
            .into_iter()
            .map(|(f, points)| Series {
                name: format!("flow {f}"),
                points,
            })
            .collect(),
        ..LinePlot::default()
    };
    if let Err(e) = plot.write_png(&path) {
        warn(warnings, &path, e);
    }
}

/// The RTTs a rate control steers by, to draw across its RTT plot: a
/// name and microseconds.
fn rtt_marks(cc: &CcConfig) -> Vec<(String, f64)> {
    match cc {
        CcConfig::Timely(p) => vec![
            (format!("T_low {} us", p.t_low_us), f64::from(p.t_low_us)),
            (format!("T_high {} us", p.t_high_us), f64::from(p.t_high_us)),
        ],
        CcConfig::Swift(p) => vec![
            (
                format!("base target + 1 hop {} us", p.base_target_us + p.per_hop_us),
                p.base_target_us + p.per_hop_us,
            ),
            (
                format!(
                    "+ the whole flow term {} us",
                    p.base_target_us + p.per_hop_us + p.fs_range_us
                ),
                p.base_target_us + p.per_hop_us + p.fs_range_us,
            ),
        ],
        _ => Vec::new(),
    }
}

/// Each flow's RTT as its controller last sampled it, in µs over ms, with
/// the controller's thresholds; only for controllers that take RTTs.
fn plot_rtt(dir: &Path, run: &PlannedRun, series: &RunSeries, warnings: &mut Vec<String>) {
    let mut by_flow: std::collections::BTreeMap<usize, Vec<(f64, f64)>> = Default::default();
    for s in series.rates.iter().filter(|s| s.rtt_ns > 0) {
        if by_flow.len() < MAX_PLOTTED_FLOWS || by_flow.contains_key(&s.flow) {
            by_flow
                .entry(s.flow)
                .or_default()
                .push((s.time_ns as f64 / 1e6, s.rtt_ns as f64 / 1e3));
        }
    }
    if by_flow.is_empty() {
        return;
    }
    let end_ms = run.resolved.duration_ns as f64 / 1e6;
    let mut lines: Vec<Series> = rtt_marks(&run.resolved.transport.cc)
        .into_iter()
        .map(|(name, us)| Series {
            name,
            points: vec![(0.0, us), (end_ms, us)],
        })
        .collect();
    lines.extend(by_flow.into_iter().map(|(f, points)| Series {
        name: format!("flow {f}"),
        points,
    }));
    let path = dir.join("rtt.png");
    let plot = LinePlot {
        title: format!("{}: RTT per flow, as its controller sampled it", run.name),
        x_label: "time (ms)".into(),
        y_label: "RTT (us)".into(),
        series: lines,
        ..LinePlot::default()
    };
    if let Err(e) = plot.write_png(&path) {
        warn(warnings, &path, e);
    }
}

fn f(v: f64, d: usize) -> Cell {
    Cell::Float(v, d)
}

fn summary_table(plan: &LabPlan, runs: &[RunSummary]) -> SummaryTable {
    let columns = vec![
        Column::new("run", ""),
        Column::new("cc", ""),
        Column::new("flows done", ""),
        Column::new("long goodput", "Gb/s"),
        Column::new("Jain", ""),
        Column::new("queue p50", "KB"),
        Column::new("queue p99", "KB"),
        Column::new("queue max", "KB"),
        Column::new("2nd-half p99", "KB"),
        Column::new("hot port", ""),
        Column::new("hot util", "%"),
        Column::new("RTT p50", "us"),
        Column::new("RTT p99", "us"),
        Column::new("ECN marks", ""),
        Column::new("CNPs", ""),
        Column::new("drops", ""),
        Column::new("PFC frames", ""),
        Column::new("paused", "ms"),
        Column::new("FCT p99 slowdown", ""),
        Column::new("retrans", ""),
        Column::new("deadlocks", ""),
        Column::new("events", ""),
    ];
    let rows = plan
        .runs
        .iter()
        .zip(runs)
        .map(|(_, s)| {
            let fct_p99 = s
                .fct
                .iter()
                .filter_map(|b| b.p99)
                .fold(f64::NAN, |m: f64, v| if m.is_nan() { v } else { m.max(v) });
            let rtt = s.rtt_second_half;
            vec![
                Cell::Text(s.name.clone()),
                Cell::Text(s.cc.clone()),
                Cell::Text(format!("{}/{}", s.flows_completed, s.flows)),
                f(
                    if s.long_jain.is_some() {
                        s.long_goodput_bps / 1e9
                    } else {
                        f64::NAN
                    },
                    2,
                ),
                f(s.long_jain.unwrap_or(f64::NAN), 3),
                f(s.queue.p50 as f64 / 1e3, 1),
                f(s.queue.p99 as f64 / 1e3, 1),
                f(s.queue.max as f64 / 1e3, 1),
                f(s.queue_second_half.p99 as f64 / 1e3, 1),
                Cell::Text(s.hot_port.clone().unwrap_or_default()),
                f(s.hot_port_utilisation.map_or(f64::NAN, |u| u * 100.0), 1),
                f(rtt.map_or(f64::NAN, |r| r.p50 as f64 / 1e3), 1),
                f(rtt.map_or(f64::NAN, |r| r.p99 as f64 / 1e3), 1),
                Cell::Int(s.ecn_marked as i64),
                Cell::Int(s.cnp_handled as i64),
                Cell::Int(s.drops as i64),
                Cell::Int(s.pfc_frames as i64),
                f(s.paused_ns as f64 / 1e6, 3),
                f(fct_p99, 2),
                Cell::Int(s.retransmitted_pkts as i64),
                Cell::Int(s.deadlocks.len() as i64),
                Cell::Int(s.events as i64),
            ]
        })
        .collect();
    let mut table = SummaryTable { columns, rows };
    add_collective_columns(&mut table, runs);
    table
}

/// With all-reduces in any run: each run's first collective's time, p50
/// and p99 over its completed repetitions, in ms.
fn add_collective_columns(table: &mut SummaryTable, runs: &[RunSummary]) {
    if runs.iter().all(|s| s.collectives.is_empty()) {
        return;
    }
    table.columns.push(Column::new("collective p50", "ms"));
    table.columns.push(Column::new("collective p99", "ms"));
    for (row, s) in table.rows.iter_mut().zip(runs) {
        let t = s.collectives.first().and_then(|c| c.time);
        row.push(f(t.map_or(f64::NAN, |t| t.p50_ns as f64 / 1e6), 3));
        row.push(f(t.map_or(f64::NAN, |t| t.p99_ns as f64 / 1e6), 3));
    }
}

fn write_fct(dir: &Path, runs: &[RunSummary]) -> Result<(), OutputError> {
    let mut c = CsvSeries::create(
        &dir.join("fct.csv"),
        &["run", "bucket", "flows", "mean", "p50", "p95", "p99"],
    )?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for s in runs {
        for b in &s.fct {
            c.row_display(&[
                &s.name,
                &b.bucket.label(),
                &b.count,
                &opt(b.mean),
                &opt(b.p50),
                &opt(b.p95),
                &opt(b.p99),
            ])?;
        }
    }
    c.finish()?;
    Ok(())
}

/// A figure of every run, for the sweep plots.
type Metric = (&'static str, &'static str, fn(&RunSummary) -> f64);

const SWEEP_METRICS: [Metric; 7] = [
    ("queue-p99", "queue p99 (KB)", |s| s.queue.p99 as f64 / 1e3),
    ("queue-p99-2nd-half", "queue p99, second half (KB)", |s| {
        s.queue_second_half.p99 as f64 / 1e3
    }),
    ("goodput", "long-flow goodput (Gb/s)", |s| {
        s.long_goodput_bps / 1e9
    }),
    ("jain", "Jain's index", |s| s.long_jain.unwrap_or(f64::NAN)),
    ("drops", "drops", |s| s.drops as f64),
    ("pfc-frames", "PFC frames", |s| s.pfc_frames as f64),
    ("paused", "paused time (ms)", |s| s.paused_ns as f64 / 1e6),
];

fn plot_plan(dir: &Path, plan: &LabPlan, runs: &[RunSummary], warnings: &mut Vec<String>) {
    if let Some(key) = &plan.sweep_key {
        let variants: Vec<Option<String>> = if plan.variants.is_empty() {
            vec![None]
        } else {
            plan.variants.iter().cloned().map(Some).collect()
        };
        for (file, label, metric) in SWEEP_METRICS {
            let series = variants
                .iter()
                .map(|v| Series {
                    name: v.clone().unwrap_or_else(|| plan.name.clone()),
                    points: plan
                        .runs
                        .iter()
                        .zip(runs)
                        .filter(|(r, _)| &r.variant == v)
                        .filter_map(|(r, s)| {
                            let x = r.sweep_value.as_ref().and_then(|x| {
                                x.as_float().or_else(|| x.as_integer().map(|i| i as f64))
                            })?;
                            Some((x, metric(s)))
                        })
                        .collect(),
                })
                .collect();
            let path = dir.join(format!("sweep-{file}.png"));
            let plot = LinePlot {
                title: format!("{}: {label}", plan.name),
                x_label: key.clone(),
                y_label: label.into(),
                series,
                markers: true,
                ..LinePlot::default()
            };
            if let Err(e) = plot.write_png(&path) {
                warn(warnings, &path, e);
            }
        }
    }
    plot_collective_steps(dir, plan, runs, warnings);
    super::fct::plot_p95(dir, &plan.name, runs, warnings);
    if runs.iter().any(|s| s.fct.iter().any(|b| b.count > 0)) {
        let path = dir.join("fct-p99.png");
        let plot = BarPlot {
            title: format!("{}: p99 FCT slowdown per flow size", plan.name),
            x_label: "flow size".into(),
            y_label: "p99 slowdown (FCT / ideal)".into(),
            categories: SizeBucket::ALL
                .iter()
                .map(|b| b.label().to_string())
                .collect(),
            groups: runs
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        s.fct.iter().map(|b| b.p99.unwrap_or(f64::NAN)).collect(),
                    )
                })
                .collect(),
            log_y: true,
        };
        if let Err(e) = plot.write_png(&path) {
            warn(warnings, &path, e);
        }
    }
}

/// `collective-steps.png`: each run's first all-reduce, the median
/// completion of each step (from the repetition's start) over its
/// repetitions, with the idle fabric's as the first line; nothing
/// without all-reduces.
fn plot_collective_steps(
    dir: &Path,
    plan: &LabPlan,
    runs: &[RunSummary],
    warnings: &mut Vec<String>,
) {
    let firsts: Vec<(&str, &super::collective::CollectiveSummary)> = runs
        .iter()
        .filter_map(|s| s.collectives.first().map(|c| (s.name.as_str(), c)))
        .collect();
    let Some(&(_, c0)) = firsts.first() else {
        return;
    };
    let ms = |v: &[u64]| -> Vec<(f64, f64)> {
        v.iter()
            .enumerate()
            .map(|(k, &t)| (k as f64, t as f64 / 1e6))
            .collect()
    };
    let mut series = vec![Series {
        name: "idle fabric".into(),
        points: ms(&c0.ideal_step_completion_ns),
    }];
    series.extend(firsts.iter().map(|(name, c)| Series {
        name: (*name).to_string(),
        points: ms(&c.step_completion_p50_ns),
    }));
    let path = dir.join("collective-steps.png");
    let plot = LinePlot {
        title: format!(
            "{}: all-reduce ({} hosts), median completion of each step",
            plan.name, c0.hosts
        ),
        x_label: "step".into(),
        y_label: "time from the collective's start (ms)".into(),
        series,
        markers: true,
        ..LinePlot::default()
    };
    if let Err(e) = plot.write_png(&path) {
        warn(warnings, &path, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "bottleneck" shows the queues that passed their own port's Kmin
    /// (and, on a port that does not mark, any that held something),
    /// hottest first: a 100 Gb/s port whose Kmin is 25 KB per 25 Gb/s is
    /// hot past 100 KB, not past 25 KB.
    #[test]
    fn the_bottleneck_queues_are_those_past_their_own_kmin() {
        let series = RunSeries {
            queue_times: vec![0, 1_000],
            queues: vec![
                ("sw:0->a".into(), vec![0, 50_000]),
                ("sw:1->b".into(), vec![0, 150_000]),
                ("sw:2->c".into(), vec![0, 10]),
                ("sw:3->d".into(), vec![0, 0]),
                ("sw:4->e".into(), vec![30_000, 0]),
            ],
            queue_kmin: vec![Some(100_000), Some(100_000), None, None, Some(25_000)],
            ..RunSeries::default()
        };
        assert_eq!(shown_queues(&series, &QueueSelect::Bottleneck), [1, 4, 2]);
        assert_eq!(shown_queues(&series, &QueueSelect::All), [0, 1, 2, 3, 4]);
    }
}
