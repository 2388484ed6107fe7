//! The completion times of a run's collectives: each `allreduce`
//! workload's repetitions and steps, against the same collective alone
//! on an idle fabric.
//!
//! This module owns what a collective's step and whole time are, and
//! their summary ([`CollectiveSummary`], in a run's `summary.json`, and
//! the rows of `collectives.csv`, [`StepRecord`]).
//!
//! # What is measured
//!
//! A repetition starts when the first flow of its first step starts (its
//! flows all start together: at `start_us`, or at the barrier after the
//! repetition before). Step k ends when the last of its N flows completes
//! (a flow completes when its last WRITE is acknowledged, so a step over
//! a link of one-way delay d takes at least 2d): the slowest flow
//! decides. A step's **completion** is the time from the repetition's
//! start to its end; its **time** is what it adds, from the end of step
//! k-1 (from the start, for step 0) to its end. The last step's
//! completion is the collective's time. A repetition with a flow that
//! never completed has no time.
//!
//! **The ideal**: the same dependencies with every flow taking its ideal
//! completion time ([`super::workload::ideal_fct_ns`], alone on its path)
//! and starting as soon as the flows it waits for end: a flow's ideal end
//! is the latest ideal end of the flows it waits for in its repetition
//! (0 for the first step) plus its own ideal. A step's ideal completion
//! is the latest ideal end of its flows; its ideal time and the
//! collective's follow as above, and are the same for every repetition.
//! Slowdowns are times over their ideal.

#![deny(unsafe_code)]
use super::run::FlowResult;
use super::workload::FlowSpec;
use crate::sim::stats::percentile;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One step of one repetition of a collective: a row of
/// `collectives.csv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The collective: the index of its `[[workload]]`.
    pub collective: usize,
    /// Its workload's tag.
    pub tag: String,
    /// The repetition, from 0.
    pub repetition: u32,
    /// The step, from 0 (2(N-1) steps for N hosts).
    pub step: u32,
    /// When the step's first flow started, ns from the run's start;
    /// `None`: none started.
    pub start_ns: Option<u64>,
    /// When its last flow completed; `None`: one did not.
    pub end_ns: Option<u64>,
    /// The repetition's start to this step's end, ns.
    pub completion_ns: Option<u64>,
    /// What the step added: from the end of the step before (the
    /// repetition's start, for step 0) to its end, ns.
    pub time_ns: Option<u64>,
    /// Its completion on an idle fabric, ns.
    pub ideal_completion_ns: u64,
    /// Its time on an idle fabric, ns.
    pub ideal_time_ns: u64,
}

/// Percentiles of a set of times, nanoseconds (nearest rank).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeStats {
    /// How many there were.
    pub count: usize,
    /// The median.
    pub p50_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// The largest.
    pub max_ns: u64,
    /// The median slowdown (each time over its ideal).
    pub slowdown_p50: f64,
    /// The 99th percentile slowdown.
    pub slowdown_p99: f64,
}

impl TimeStats {
    /// The stats of (time, ideal) pairs; `None` when there are none.
    fn of(pairs: &[(u64, u64)]) -> Option<TimeStats> {
        if pairs.is_empty() {
            return None;
        }
        let mut t: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        t.sort_unstable();
        let mut s: Vec<f64> = pairs
            .iter()
            .map(|&(a, i)| a as f64 / i.max(1) as f64)
            .collect();
        s.sort_by(f64::total_cmp);
        let pct = |p: f64| s[((p / 100.0 * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Some(TimeStats {
            count: pairs.len(),
            p50_ns: percentile(&t, 50.0),
            p99_ns: percentile(&t, 99.0),
            max_ns: t.last().copied().unwrap_or(0),
            slowdown_p50: pct(50.0),
            slowdown_p99: pct(99.0),
        })
    }
}

/// One collective of a run: its repetitions' and steps' times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveSummary {
    /// The index of its `[[workload]]`.
    pub collective: usize,
    /// Its workload's tag.
    pub tag: String,
    /// The hosts in its ring.
    pub hosts: usize,
    /// Its steps per repetition (2(N-1)).
    pub steps: u32,
    /// Its repetitions.
    pub repetitions: u32,
    /// The repetitions every flow of which completed.
    pub completed: u32,
    /// The whole collective on an idle fabric, ns.
    pub ideal_ns: u64,
    /// The whole collective's time over the completed repetitions.
    pub time: Option<TimeStats>,
    /// The steps' times (what each adds) over the completed steps of
    /// every repetition.
    pub step_time: Option<TimeStats>,
    /// Per step: its completion's median over the repetitions in which
    /// it completed, ns (up to the last step that ever completed).
    pub step_completion_p50_ns: Vec<u64>,
    /// Per step: its completion on an idle fabric, ns.
    pub ideal_step_completion_ns: Vec<u64>,
}

/// One collective's flows being gathered: by (repetition, step), the
/// flows' indices.
#[derive(Default)]
struct Gather {
    tag: String,
    hosts: std::collections::BTreeSet<usize>,
    steps: u32,
    flows: BTreeMap<(u32, u32), Vec<usize>>,
}

/// The collectives of a run: every `allreduce` workload's flows
/// (`specs`, with their outcomes `results`, both by flow id), summarised
/// and step by step, in workload order.
pub fn measure(
    specs: &[&FlowSpec],
    results: &[FlowResult],
) -> (Vec<CollectiveSummary>, Vec<StepRecord>) {
    let mut by: BTreeMap<usize, Gather> = BTreeMap::new();
    for s in specs {
        let Some(rep) = s.repetition else { continue };
        let g = by.entry(s.workload).or_default();
        g.tag.clone_from(&s.tag);
        g.hosts.insert(s.src);
        g.steps = g.steps.max(s.round + 1);
        g.flows.entry((rep, s.round)).or_default().push(s.id);
    }
    let end = |i: usize| {
        let r = &results[i];
        r.start_ns.zip(r.fct_ns).map(|(s, f)| s + f)
    };
    // Ideal ends, within a repetition (see the module docs).
    let mut ideal_end = vec![0u64; specs.len()];
    for s in specs.iter().filter(|s| s.repetition.is_some()) {
        let before = if s.round == 0 {
            0
        } else {
            s.after.iter().map(|&a| ideal_end[a]).max().unwrap_or(0)
        };
        ideal_end[s.id] = before.saturating_add(results[s.id].ideal_fct_ns.unwrap_or(0));
    }
    let mut summaries = Vec::new();
    let mut records = Vec::new();
    for (w, g) in by {
        let reps = g.flows.keys().map(|k| k.0 + 1).max().unwrap_or(0);
        let (mut whole, mut steps) = (Vec::new(), Vec::new());
        let mut ideal_whole = 0;
        for rep in 0..reps {
            let flows_of = |k: u32| g.flows.get(&(rep, k)).map_or(&[][..], Vec::as_slice);
            let start = flows_of(0)
                .iter()
                .filter_map(|&i| results[i].start_ns)
                .min();
            let (mut prev, mut prev_ideal) = (start, 0);
            for k in 0..g.steps {
                let f = flows_of(k);
                let done: Option<Vec<u64>> = f.iter().map(|&i| end(i)).collect();
                let end_ns = done.and_then(|v| v.into_iter().max());
                let ideal = f.iter().map(|&i| ideal_end[i]).max().unwrap_or(0);
                let time = end_ns.zip(prev).map(|(e, p)| e.saturating_sub(p));
                if let Some(t) = time {
                    steps.push((t, ideal.saturating_sub(prev_ideal)));
                }
                records.push(StepRecord {
                    collective: w,
                    tag: g.tag.clone(),
                    repetition: rep,
                    step: k,
                    start_ns: f.iter().filter_map(|&i| results[i].start_ns).min(),
                    end_ns,
                    completion_ns: end_ns.zip(start).map(|(e, s)| e.saturating_sub(s)),
                    time_ns: time,
                    ideal_completion_ns: ideal,
                    ideal_time_ns: ideal.saturating_sub(prev_ideal),
                });
                prev = end_ns;
                prev_ideal = ideal;
            }
            ideal_whole = prev_ideal;
            if let (Some(s), Some(e)) = (start, prev) {
                whole.push((e - s, prev_ideal));
            }
        }
        let mut per_step: Vec<Vec<u64>> = vec![Vec::new(); g.steps as usize];
        let mut ideal_steps = vec![0; g.steps as usize];
        for r in records.iter().filter(|r| r.collective == w) {
            ideal_steps[r.step as usize] = r.ideal_completion_ns;
            if let Some(c) = r.completion_ns {
                per_step[r.step as usize].push(c);
            }
        }
        let step_p50: Vec<u64> = per_step
            .into_iter()
            .map_while(|mut v| {
                v.sort_unstable();
                (!v.is_empty()).then(|| percentile(&v, 50.0))
            })
            .collect();
        summaries.push(CollectiveSummary {
            collective: w,
            tag: g.tag,
            hosts: g.hosts.len(),
            steps: g.steps,
            repetitions: reps,
            completed: whole.len() as u32,
            ideal_ns: ideal_whole,
            time: TimeStats::of(&whole),
            step_time: TimeStats::of(&steps),
            step_completion_p50_ns: step_p50,
            ideal_step_completion_ns: ideal_steps,
        });
    }
    (summaries, records)
}

#[cfg(test)]
mod tests;
