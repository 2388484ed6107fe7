//! `ferroce lab FILE --out DIR`: every run of an experiment file, one
//! after the other, each into its own folder, then the table and plots
//! that compare them.
//!
//! # The results folder
//!
//! ```text
//! DIR/summary.txt, summary.csv, summary.json   one row per run
//! DIR/fct.csv                                  FCT slowdown per run and size bucket
//! DIR/sweep-*.png                              a figure over the swept value, a line per variant
//! DIR/fct-p99.png                              p99 FCT slowdown per size bucket, a bar per run
//! DIR/RUN/summary.json                         everything the run measured
//! DIR/RUN/queue.csv, queue.png                 the hot (or chosen) egress queues over time
//! DIR/RUN/rates.csv, rates.png                 per flow: goodput and its controller's rate
//! DIR/RUN/signals.csv                         ECN marks, CNPs, PFC frames and paused time so far
//! DIR/RUN/pauses.png                          PFC frames so far, over time (when PFC acted)
//! DIR/RUN/flows.csv                            per flow: size, start, FCT, ideal FCT, goodput
//! ```

#![deny(unsafe_code)]
use super::config::LabConfigError;
use super::output::{Cell, Column, CsvSeries, OutputError, Results, SummaryTable};
use super::plan::LabPlan;
use super::plot::{BarPlot, LinePlot, Series};
use super::progress::Progress;
use super::resolve::QueueSelect;
use super::run::{LabRun, RunError, RunSeries, RunSummary};
use super::workload::{generate, SizeBucket};
use std::path::{Path, PathBuf};

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
}

/// How to run an experiment file.
#[derive(Debug, Clone, clap::Args)]
pub struct LabOptions {
    /// The results folder (created if missing).
    #[arg(long)]
    pub out: PathBuf,
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
}

/// Runs every run of the experiment at `path` and writes the results
/// folder.
pub fn run_file(path: &Path, opts: &LabOptions) -> Result<LabReport, LabError> {
    let plan = LabPlan::load(path)?;
    run_plan(&plan, opts)
}

/// Runs a loaded plan.
pub fn run_plan(plan: &LabPlan, opts: &LabOptions) -> Result<LabReport, LabError> {
    let results = Results::create(&opts.out)?;
    let mut runs = Vec::new();
    let mut warnings = Vec::new();
    for run in &plan.runs {
        let seed = opts.seed.unwrap_or(run.config.seed);
        let flows = generate(&run.config, &run.resolved.topology, seed)?;
        let lab = LabRun::new(&run.resolved, flows, seed).map_err(|error| LabError::Run {
            run: run.name.clone(),
            error,
        })?;
        let mut progress = if opts.quiet {
            Progress::disabled()
        } else {
            Progress::new(run.name.clone(), run.resolved.duration_ns)
        };
        let (mut summary, series) = lab.run(&mut progress).map_err(|error| LabError::Run {
            run: run.name.clone(),
            error,
        })?;
        progress.finish();
        summary.name = run.name.clone();
        let dir = results.run_dir(&run.name)?;
        write_run(
            &dir,
            &summary,
            &series,
            &run.resolved.queues,
            run.resolved.switch.red.map(|r| r.kmin_bytes),
        )?;
        if opts.plots {
            plot_run(&dir, &run.name, &series, &mut warnings);
        }
        runs.push(summary);
    }
    let table = summary_table(plan, &runs);
    table.write(results.dir())?;
    write_fct(results.dir(), &runs)?;
    if opts.plots {
        plot_plan(results.dir(), plan, &runs, &mut warnings);
    }
    Ok(LabReport {
        name: plan.name.clone(),
        runs,
        table,
        plot_warnings: warnings,
    })
}

/// The ports a run shows: for `Bottleneck`, those whose queue ever passed
/// Kmin (or held anything, without marking), hottest first; otherwise
/// every recorded one.
fn shown_queues(series: &RunSeries, select: &QueueSelect, kmin: Option<usize>) -> Vec<usize> {
    let mut idx: Vec<(u32, usize)> = series
        .queues
        .iter()
        .enumerate()
        .map(|(i, (_, s))| (s.iter().copied().max().unwrap_or(0), i))
        .collect();
    if matches!(select, QueueSelect::Bottleneck) {
        let floor = kmin.unwrap_or(0) as u32;
        idx.retain(|&(m, _)| m > floor);
        idx.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    idx.into_iter().map(|(_, i)| i).collect()
}

fn write_run(
    dir: &Path,
    summary: &RunSummary,
    series: &RunSeries,
    select: &QueueSelect,
    kmin: Option<usize>,
) -> Result<(), OutputError> {
    let json = serde_json::to_string_pretty(summary).unwrap_or_default();
    let path = dir.join("summary.json");
    std::fs::write(&path, json + "\n").map_err(|source| OutputError::Io { path, source })?;

    let shown = shown_queues(series, select, kmin);
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
        &["time_ns", "flow", "goodput_bps", "rate_bps"],
    )?;
    for &(t, f, g, rate) in &series.rates {
        r.row(&[t as f64, f as f64, g.round(), rate as f64])?;
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
    Ok(())
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
    for &(t, f, _, rate) in &series.rates {
        if by_flow.len() < MAX_PLOTTED_FLOWS || by_flow.contains_key(&f) {
            by_flow
                .entry(f)
                .or_default()
                .push((t as f64 / 1e6, rate as f64 / 1e9));
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

fn f(v: f64, d: usize) -> Cell {
    Cell::Float(v, d)
}

fn summary_table(plan: &LabPlan, runs: &[RunSummary]) -> SummaryTable {
    let columns = vec![
        Column::new("run", ""),
        Column::new("flows done", ""),
        Column::new("long goodput", "Gb/s"),
        Column::new("Jain", ""),
        Column::new("queue p50", "KB"),
        Column::new("queue p99", "KB"),
        Column::new("queue max", "KB"),
        Column::new("2nd-half p99", "KB"),
        Column::new("hot port", ""),
        Column::new("ECN marks", ""),
        Column::new("CNPs", ""),
        Column::new("drops", ""),
        Column::new("PFC frames", ""),
        Column::new("paused", "ms"),
        Column::new("FCT p99 slowdown", ""),
        Column::new("retrans", ""),
        Column::new("deadlocks", ""),
        Column::new("events/s", "M"),
        Column::new("wall", "s"),
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
            vec![
                Cell::Text(s.name.clone()),
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
                Cell::Int(s.ecn_marked as i64),
                Cell::Int(s.cnp_handled as i64),
                Cell::Int(s.drops as i64),
                Cell::Int(s.pfc_frames as i64),
                f(s.paused_ns as f64 / 1e6, 3),
                f(fct_p99, 2),
                Cell::Int(s.retransmitted_pkts as i64),
                Cell::Int(s.deadlocks.len() as i64),
                f(s.events_per_s / 1e6, 2),
                f(s.wall_s, 2),
            ]
        })
        .collect();
    SummaryTable { columns, rows }
}

fn write_fct(dir: &Path, runs: &[RunSummary]) -> Result<(), OutputError> {
    let mut c = CsvSeries::create(
        &dir.join("fct.csv"),
        &["run", "bucket", "flows", "mean", "p50", "p99"],
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
