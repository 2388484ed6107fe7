//! What a run of `ferroce sim` found: one seed's [`Report`] (its line and
//! its JSON object) and the [`Totals`] over seeds.

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
    /// SENDs completed and verified.
    pub send: u64,
    /// RDMA WRITEs completed and verified.
    pub write: u64,
    /// RDMA READs completed and verified.
    pub read: u64,
    /// Compare-and-swaps completed and verified.
    pub cmp_swap: u64,
    /// Fetch-and-adds completed and verified.
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
    /// Frames that finished serialising onto the link.
    pub frames: u64,
    /// Frames lost on the wire (`loss`).
    pub lost: u64,
    /// Frames with a flipped bit (`corrupt`).
    pub corrupted: u64,
    /// Frames sent twice (`dup`).
    pub duplicated: u64,
    /// Frames held back by an extra delay (`reorder`).
    pub reordered: u64,
    /// Frames refused by a full egress queue (`queue_bytes`).
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
    /// The seed of the run's faults and data.
    pub seed: u64,
    /// Messages asked for.
    pub messages: u64,
    /// Messages completed and verified.
    pub completed: u64,
    /// Those messages by operation.
    pub ops: OpCounts,
    /// Payload bytes compared at their destination (atomics: 8 each).
    pub bytes_verified: u64,
    /// Request packets sent again (go-back-N).
    pub retransmitted: u64,
    /// NAKs received by the requester: PSN sequence errors and RNR.
    pub naks: u64,
    /// NAK PSN sequence errors received (IBTA §9.7.5.1.1).
    pub seq_naks: u64,
    /// RNR NAKs received.
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
    /// What the link did to the frames, both directions.
    pub faults: Faults,
    /// The local ACK timeout exponent used.
    pub timeout_exp: u8,
    /// Virtual time the run took, in nanoseconds.
    pub virtual_ns: u64,
    /// Wall-clock time the run took, in seconds.
    pub wall_s: f64,
    /// Whether the run passed ([`Report::ok`]) when it finished.
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
    /// Runs added.
    pub runs: u64,
    /// Runs that did not pass ([`Report::ok`]).
    pub failed: u64,
    /// Seeds of the failed runs.
    pub failed_seeds: Vec<u64>,
    /// Messages asked for.
    pub messages: u64,
    /// Messages completed and verified.
    pub completed: u64,
    /// Those messages by operation.
    pub ops: OpCounts,
    /// Payload bytes compared at their destination.
    pub bytes_verified: u64,
    /// Request packets sent again (go-back-N).
    pub retransmitted: u64,
    /// NAKs received: PSN sequence errors and RNR.
    pub naks: u64,
    /// READ / atomic responses found missing by a later response.
    pub implied_naks: u64,
    /// Local ACK timer expiries.
    pub timeouts: u64,
    /// Completions with a status other than success.
    pub error_completions: u64,
    /// Data, length, order or atomic results that differ from what was
    /// sent or modelled.
    pub mismatches: u64,
    /// Frames the receivers dropped for a bad ICRC.
    pub icrc_drops: u64,
    /// What the links did to the frames.
    pub faults: Faults,
    /// Virtual time of all runs, in nanoseconds.
    pub virtual_ns: u64,
    /// Wall-clock time of all runs, in seconds.
    pub wall_s: f64,
    /// At least one run, and every run passed.
    pub verify: bool,
}

impl Totals {
    /// Counts one more run.
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

    /// At least one run, and every run passed.
    pub fn ok(&self) -> bool {
        self.runs > 0 && self.failed == 0
    }

    /// Simulated messages per wall-clock second, over all runs.
    pub fn msgs_per_wall_s(&self) -> f64 {
        self.completed as f64 / self.wall_s.max(1e-9)
    }

    /// The one total line (with the first 20 failed seeds).
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
            "total runs={} failed={} msgs={}/{} bytes={} retrans={} retrans_per_msg={:.2} naks={} \
             timeouts={} errors={} mismatches={} wall={:.3}s rate={:.0}msg/s{} verify={}",
            self.runs,
            self.failed,
            self.completed,
            self.messages,
            self.bytes_verified,
            self.retransmitted,
            self.retransmitted as f64 / self.completed.max(1) as f64,
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
