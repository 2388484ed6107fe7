//! An experiment split over batch jobs, and put back together: the runs
//! `--only` picks, the identity each run leaves in its folder
//! (`DIR/RUN/run.json`), and `--merge PART_DIR...`, which checks the
//! parts against the experiment file and writes the results folder a
//! local run writes.
//!
//! # A run's identity (`run.json`)
//!
//! Written last into each run's folder, by every run (local or `--only`),
//! so a folder without it holds no finished run:
//!
//! ```text
//! experiment   the file's `name`
//! source_hash  the file's text, hashed (plan::source_hash)
//! seed         the seed the run used (the file's, or --seed)
//! run          the run's name
//! index        its place in the plan, from 1 (the line of --list-runs)
//! runs         the plan's runs
//! ```
//!
//! A merge refuses a run whose identity differs from the one the file
//! (and the merge's `--seed`) gives, a run found in two parts, and a run
//! found in none. It reads each run's `summary.json` back and refuses one
//! that does not serialise to the same text again (another version of
//! ferroce), so the table, `fct.csv` and plots come from the very figures
//! the runs measured.
//!
//! # Timing
//!
//! `DIR/RUN/timing.json` (the run's wall time, events and events per wall
//! second) and `DIR/timing.txt` (those of every run) are the only files
//! of a results folder that differ from one invocation to the next.

#![deny(unsafe_code)]
use super::experiment::{write_experiment, write_timing, LabError, LabOptions, LabReport};
use super::output::{Cell, Column, OutputError, Results, SummaryTable};
use super::plan::LabPlan;
use super::run::RunSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A run's identity, in its folder.
pub const IDENTITY_FILE: &str = "run.json";
/// A run's wall-clock figures, in its folder.
pub const RUN_TIMING_FILE: &str = "timing.json";
/// Every run's wall-clock figures, in the results folder.
pub const TIMING_FILE: &str = "timing.txt";

/// Why runs could not be picked or merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// `--only` named a run the experiment does not have.
    #[error("--only {name}: no such run in {experiment}; its runs are: {}", valid.join(", "))]
    UnknownRun {
        /// The name given.
        name: String,
        /// The experiment's name.
        experiment: String,
        /// The plan's run names.
        valid: Vec<String>,
    },
    /// A file of a part could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A file of a part is not what ferroce writes there.
    #[error("{path}: {msg}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A run that belongs to another experiment file, seed or plan.
    #[error("{path}: {msg}")]
    Foreign {
        /// The run's `run.json`.
        path: PathBuf,
        /// How it differs.
        msg: String,
    },
    /// A run found in two parts.
    #[error("run {run} is in two parts: {} and {}", first.display(), second.display())]
    Duplicate {
        /// The run.
        run: String,
        /// Its folder in the first part.
        first: PathBuf,
        /// And in the other.
        second: PathBuf,
    },
    /// Runs found in no part.
    #[error("{} of {total} runs missing from the parts ({}): {}", missing.len(), parts.join(", "), missing.join(", "))]
    Missing {
        /// Their names, in plan order.
        missing: Vec<String>,
        /// The plan's runs.
        total: usize,
        /// The part folders.
        parts: Vec<String>,
    },
    /// A part folder holding no run of the experiment.
    #[error("{}: holds no run of {experiment} (no RUN/run.json)", part.display())]
    EmptyPart {
        /// The folder.
        part: PathBuf,
        /// The experiment's name.
        experiment: String,
    },
}

/// The identity of one run, as `run.json` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunIdentity {
    /// The experiment's `name`.
    pub experiment: String,
    /// [`super::plan::source_hash`] of the experiment file.
    pub source_hash: String,
    /// The seed the run used.
    pub seed: u64,
    /// The run's name.
    pub run: String,
    /// Its place in the plan, from 1.
    pub index: usize,
    /// The plan's runs.
    pub runs: usize,
}

impl RunIdentity {
    /// The identity of run `i` (from 0) of `plan`, with `seed` replacing
    /// the file's when given.
    pub fn of(plan: &LabPlan, i: usize, seed: Option<u64>) -> RunIdentity {
        let run = &plan.runs[i];
        RunIdentity {
            experiment: plan.name.clone(),
            source_hash: plan.source_hash.clone(),
            seed: seed.unwrap_or(run.config.seed),
            run: run.name.clone(),
            index: i + 1,
            runs: plan.runs.len(),
        }
    }

    /// Writes it as `dir/run.json`.
    pub fn write(&self, dir: &Path) -> Result<(), OutputError> {
        write_json(&dir.join(IDENTITY_FILE), self)
    }
}

/// A run's wall-clock figures, as `timing.json` holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunTiming {
    /// The run's name.
    pub run: String,
    /// Simulator events processed.
    pub events: u64,
    /// Wall-clock time the run took, seconds.
    pub wall_s: f64,
    /// Events per wall-clock second.
    pub events_per_s: f64,
}

impl RunTiming {
    /// The figures of a run that just ended.
    pub fn of(s: &RunSummary) -> RunTiming {
        RunTiming {
            run: s.name.clone(),
            events: s.events,
            wall_s: s.wall_s,
            events_per_s: s.events_per_s,
        }
    }

    /// Writes it as `dir/timing.json`.
    pub fn write(&self, dir: &Path) -> Result<(), OutputError> {
        write_json(&dir.join(RUN_TIMING_FILE), self)
    }
}

fn write_json(path: &Path, v: &impl Serialize) -> Result<(), OutputError> {
    let mut text = serde_json::to_string_pretty(v).unwrap_or_default();
    text.push('\n');
    std::fs::write(path, text).map_err(|source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The runs `--only` names (each a name, or a comma list of them), as
/// indices in plan order, each once; every run when `only` is empty.
pub fn select(plan: &LabPlan, only: &[String]) -> Result<Vec<usize>, MergeError> {
    if only.is_empty() {
        return Ok((0..plan.runs.len()).collect());
    }
    let mut picked = std::collections::BTreeSet::new();
    for name in only.iter().flat_map(|o| o.split(',')).map(str::trim) {
        match plan.runs.iter().position(|r| r.name == name) {
            Some(i) => {
                picked.insert(i);
            }
            None => {
                return Err(MergeError::UnknownRun {
                    name: name.to_string(),
                    experiment: plan.name.clone(),
                    valid: plan.runs.iter().map(|r| r.name.clone()).collect(),
                })
            }
        }
    }
    Ok(picked.into_iter().collect())
}

/// The plan's run names, one per line, in plan order (`--list-runs`).
pub fn list_runs(plan: &LabPlan) -> String {
    plan.runs.iter().map(|r| format!("{}\n", r.name)).collect()
}

/// A run found in a part.
#[derive(Debug)]
struct Found {
    dir: PathBuf,
    summary: RunSummary,
}

/// Finds every run of `plan` in the `parts` folders, checked (see the
/// module docs); summaries in plan order, with the folders they are in.
fn collect(plan: &LabPlan, seed: Option<u64>, parts: &[PathBuf]) -> Result<Vec<Found>, MergeError> {
    let mut found: BTreeMap<usize, PathBuf> = BTreeMap::new();
    for part in parts {
        let read_err = |source| MergeError::Read {
            path: part.clone(),
            source,
        };
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(part)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        let mut any = false;
        for dir in dirs {
            let id_path = dir.join(IDENTITY_FILE);
            let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !id_path.is_file() {
                if plan.runs.iter().any(|r| r.name == folder) {
                    return Err(MergeError::Bad {
                        path: dir.clone(),
                        msg: format!(
                            "no {IDENTITY_FILE}: the run did not finish, or was not written by \
                             `ferroce lab` (a version that writes it)"
                        ),
                    });
                }
                continue;
            }
            let text = std::fs::read_to_string(&id_path).map_err(|source| MergeError::Read {
                path: id_path.clone(),
                source,
            })?;
            let id: RunIdentity = serde_json::from_str(&text).map_err(|e| MergeError::Bad {
                path: id_path.clone(),
                msg: format!("not a run identity: {e}"),
            })?;
            let i = check_identity(plan, seed, &id, &id_path)?;
            if folder != id.run {
                return Err(MergeError::Bad {
                    path: id_path,
                    msg: format!("names run {}, but is in folder {folder:?}", id.run),
                });
            }
            if let Some(first) = found.get(&i) {
                return Err(MergeError::Duplicate {
                    run: id.run,
                    first: first.clone(),
                    second: dir,
                });
            }
            found.insert(i, dir);
            any = true;
        }
        if !any {
            return Err(MergeError::EmptyPart {
                part: part.clone(),
                experiment: plan.name.clone(),
            });
        }
    }
    let missing: Vec<String> = (0..plan.runs.len())
        .filter(|i| !found.contains_key(i))
        .map(|i| plan.runs[i].name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing {
            missing,
            total: plan.runs.len(),
            parts: parts.iter().map(|p| p.display().to_string()).collect(),
        });
    }
    found
        .into_values()
        .map(|dir| {
            let summary = read_summary(&dir)?;
            Ok(Found { dir, summary })
        })
        .collect()
}

/// Checks a run's identity against the plan's; returns its index (from 0).
fn check_identity(
    plan: &LabPlan,
    seed: Option<u64>,
    id: &RunIdentity,
    path: &Path,
) -> Result<usize, MergeError> {
    let foreign = |msg: String| MergeError::Foreign {
        path: path.to_path_buf(),
        msg,
    };
    if id.experiment != plan.name || id.source_hash != plan.source_hash {
        return Err(foreign(format!(
            "a run of another experiment file ({} {}), not of this one ({} {})",
            id.experiment, id.source_hash, plan.name, plan.source_hash
        )));
    }
    let Some(i) = plan.runs.iter().position(|r| r.name == id.run) else {
        return Err(foreign(format!("run {} is not in {}", id.run, plan.name)));
    };
    let want = RunIdentity::of(plan, i, seed);
    if id.seed != want.seed {
        return Err(foreign(format!(
            "run {} used seed {}, this merge expects {} (give the merge the parts' --seed)",
            id.run, id.seed, want.seed
        )));
    }
    if *id != want {
        return Err(foreign(format!(
            "run {} is run {} of {} there, {} of {} in the file",
            id.run, id.index, id.runs, want.index, want.runs
        )));
    }
    Ok(i)
}

/// Reads `dir/summary.json` back, and checks that it serialises to the
/// same text.
fn read_summary(dir: &Path) -> Result<RunSummary, MergeError> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|source| MergeError::Read {
        path: path.clone(),
        source,
    })?;
    let bad = |msg: String| MergeError::Bad {
        path: path.clone(),
        msg,
    };
    let s: RunSummary = serde_json::from_str(&text)
        .map_err(|e| bad(format!("not a run summary of this version of ferroce: {e}")))?;
    let again = serde_json::to_string_pretty(&s).unwrap_or_default() + "\n";
    if again != text {
        return Err(bad(
            "does not read back as written (another version of ferroce?)".into(),
        ));
    }
    Ok(s)
}

/// Copies the files of `from` into `to` (created), folders included.
fn copy_folder(from: &Path, to: &Path) -> Result<(), LabError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LabError::Output(OutputError::Io { path, source })
    };
    std::fs::create_dir_all(to).map_err(io(to))?;
    for e in std::fs::read_dir(from).map_err(io(from))? {
        let e = e.map_err(io(from))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_folder(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(io(&src))?;
        }
    }
    Ok(())
}

/// `ferroce lab FILE --merge PART_DIR... --out DIR`: checks the parts
/// (every run of the plan once, of this file and seed), copies each run's
/// folder into DIR (unless it is there already), and writes the summary,
/// `fct.csv`, plots and `timing.txt` as a local run does.
pub fn merge_plan(plan: &LabPlan, opts: &LabOptions) -> Result<LabReport, LabError> {
    let found = collect(plan, opts.seed, &opts.merge)?;
    let results = Results::create(opts.out_dir())?;
    let mut runs = Vec::with_capacity(found.len());
    let mut timing = Vec::with_capacity(found.len());
    for f in found {
        let dir = results.run_dir(&f.summary.name)?;
        let same = match (dir.canonicalize(), f.dir.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if !same {
            copy_folder(&f.dir, &dir)?;
        }
        timing.push(read_timing(&dir, &f.summary));
        runs.push(f.summary);
    }
    let mut warnings = Vec::new();
    let table = write_experiment(&results, plan, &runs, opts.plots, &mut warnings)?;
    let note = format!("merged from {} part folders", opts.merge.len());
    let timing_text = write_timing(&results, &timing, &note)?;
    Ok(LabReport {
        name: plan.name.clone(),
        runs,
        table,
        plot_warnings: warnings,
        timing: timing_text,
    })
}

/// A run's `timing.json`; without one (or unreadable), its events and no
/// wall time.
fn read_timing(dir: &Path, s: &RunSummary) -> RunTiming {
    std::fs::read_to_string(dir.join(RUN_TIMING_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(RunTiming {
            run: s.name.clone(),
            events: s.events,
            wall_s: f64::NAN,
            events_per_s: f64::NAN,
        })
}

/// The timing table: a row per run.
pub fn timing_table(timing: &[RunTiming]) -> SummaryTable {
    SummaryTable {
        columns: vec![
            Column::new("run", ""),
            Column::new("events", ""),
            Column::new("wall", "s"),
            Column::new("events/s", "M"),
        ],
        rows: timing
            .iter()
            .map(|t| {
                vec![
                    Cell::Text(t.run.clone()),
                    Cell::Int(t.events as i64),
                    Cell::Float(t.wall_s, 2),
                    Cell::Float(t.events_per_s / 1e6, 2),
                ]
            })
            .collect(),
    }
}

/// The runs' events over the wall time they simulated for (building and
/// writing a run not counted): the simulator's speed, per thread.
pub fn timing_total(timing: &[RunTiming]) -> String {
    let events: u64 = timing.iter().map(|t| t.events).sum();
    let wall: f64 = timing.iter().map(|t| t.wall_s).sum();
    let rate = if wall > 0.0 {
        events as f64 / wall
    } else {
        0.0
    };
    format!(
        "simulating: {events} events in {wall:.2} s, {:.2} M events/s",
        rate / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::super::plan::source_hash;

    #[test]
    fn the_source_hash_is_64_bit_fnv_1a() {
        // The published FNV-1a 64 test vectors (the empty string, "a").
        assert_eq!(source_hash(""), "fnv1a64:cbf29ce484222325");
        assert_eq!(source_hash("a"), "fnv1a64:af63dc4c8601ec8c");
        assert_ne!(source_hash("seed = 1\n"), source_hash("seed = 2\n"));
    }
}
