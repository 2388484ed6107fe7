//! What a run of `ferroce sim` found: one seed's [`Report`] (its line and
//! its JSON object) and the [`Totals`] over seeds.

#![allow(missing_docs)] // documented in a later commit
use super::SimRun;
use crate::backend::fabric::LinkCounters;
use crate::time::Duration;
use serde::Serialize;
use std::fmt;

/// How many problems a report describes (it counts them all).
const MAX_ERRORS: usize = 8;

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
    pub(super) fn add(&mut self, o: &OpCounts) {
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
    pub(super) fn add_link(&mut self, c: &LinkCounters) {
        self.frames += c.tx_frames;
        self.lost += c.dropped_loss;
        self.corrupted += c.corrupted;
        self.duplicated += c.duplicated;
        self.reordered += c.reordered;
        self.tail_dropped += c.dropped_queue;
    }
    pub(super) fn add(&mut self, o: &Faults) {
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
    pub(super) fn new(seed: u64, run: &SimRun) -> Report {
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

    pub(super) fn problem(&mut self, s: String) {
        if self.problems.len() < MAX_ERRORS {
            self.problems.push(s);
        }
    }

    pub(super) fn mismatch(&mut self, s: String) {
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
