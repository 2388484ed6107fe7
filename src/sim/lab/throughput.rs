//! Per-flow throughput series: for the chosen flows of a run, sized and
//! long alike, the bytes acknowledged in each sample interval, as Gb/s
//! (`RUN/flow-throughput.csv`: `time_ns`, `flow`, `gbps`).
//!
//! This module owns which flows get a series (`[output]
//! throughput_flows`, `throughput_tags`:
//! [`super::resolve::AnalysisParams`]), the log of their completions and
//! the series made from it.
//!
//! # What is counted
//!
//! A flow's bytes count when the WRITE that carries them completes: the
//! sender has the acknowledgement of its last packet. The resolution is
//! so one WRITE (`transport.message_kb`, 64 KB by default): a WRITE's
//! bytes all fall in the interval its acknowledgement arrives in. The
//! intervals are `rate_sample_us` long, on the run's clock (interval k
//! covers (k x T, (k + 1) x T], written at its end), from the interval a
//! flow starts in to the one of its last completion, zeros included; the
//! drain after the posting phase counts too. A flow's WRITEs complete in
//! order, so when an early one's acknowledgement is late the ones behind
//! it complete together: an interval can show more than the line rate,
//! and the next ones less. The sum over a flow is exact (its size, for a
//! flow that completed).
//!
//! `rates.csv` holds the same completions (`goodput_bps`) beside each
//! controller's rate, but only while the posting phase lasts and for every
//! started flow; this series is bounded (at most `throughput_flows` flows,
//! the first by id of the chosen tags, and at most [`MAX_ROWS`] rows) and
//! follows a flow to its end.

#![deny(unsafe_code)]
use super::output::{CsvSeries, OutputError};
use super::resolve::AnalysisParams;
use super::workload::FlowSpec;
use std::path::Path;

/// The most rows a run's series has; flows whose rows would pass it are
/// left out (the first by id are kept).
pub const MAX_ROWS: u64 = 10_000_000;

/// One sample: a flow's acknowledged bytes over the interval ending at
/// `time_ns`, in Gb/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputSample {
    /// The end of the interval, nanoseconds from the run's start.
    pub time_ns: u64,
    /// The flow ([`FlowSpec::id`]).
    pub flow: usize,
    /// Bytes acknowledged in the interval x 8 / its length, Gb/s.
    pub gbps: f64,
}

/// The completions of the chosen flows, as the run sees them.
#[derive(Debug, Default)]
pub struct ThroughputLog {
    /// Per flow by id: whether it is chosen.
    chosen: Vec<bool>,
    /// (flow, time ns, bytes) of every completion of a chosen flow.
    events: Vec<(usize, u64, u64)>,
}

impl ThroughputLog {
    /// Chooses the flows of `flows` to follow.
    pub fn new(flows: &[FlowSpec], a: &AnalysisParams) -> ThroughputLog {
        let mut chosen = vec![false; flows.len()];
        let mut n = 0;
        for f in flows {
            if n < a.throughput_flows && a.throughput_takes(&f.tag) {
                if let Some(c) = chosen.get_mut(f.id) {
                    *c = true;
                    n += 1;
                }
            }
        }
        ThroughputLog {
            chosen,
            events: Vec::new(),
        }
    }

    /// A WRITE of `flow` carrying `bytes` completed at `time_ns`.
    pub fn completed(&mut self, flow: usize, time_ns: u64, bytes: u64) {
        if self.chosen.get(flow).copied().unwrap_or(false) {
            self.events.push((flow, time_ns, bytes));
        }
    }

    /// The series, flow by flow in id order, each in time order, in
    /// intervals of `every_ns`; `starts[i]`: when flow i started (`None`:
    /// never).
    pub fn series(&self, every_ns: u64, starts: &[Option<u64>]) -> Vec<ThroughputSample> {
        let every = every_ns.max(1);
        let mut by_flow: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.chosen.len()];
        for &(f, t, b) in &self.events {
            by_flow[f].push((t, b));
        }
        let interval = |t: u64| t.saturating_sub(1) / every;
        let mut out = Vec::new();
        let mut rows = 0u64;
        for (flow, ev) in by_flow.iter().enumerate() {
            let (Some(start), Some(&(last, _))) = (starts.get(flow).copied().flatten(), ev.last())
            else {
                continue;
            };
            let (first, end) = (interval(start.max(1)), interval(last));
            let n = end.saturating_sub(first) + 1;
            if rows + n > MAX_ROWS {
                break;
            }
            rows += n;
            let mut bytes = vec![0u64; n as usize];
            for &(t, b) in ev {
                let k = interval(t).saturating_sub(first).min(n - 1);
                bytes[k as usize] += b;
            }
            out.extend(bytes.iter().enumerate().map(|(k, &b)| ThroughputSample {
                time_ns: (first + k as u64 + 1) * every,
                flow,
                gbps: b as f64 * 8.0 / every as f64,
            }));
        }
        out
    }
}

/// `RUN/flow-throughput.csv`.
pub fn write_csv(dir: &Path, series: &[ThroughputSample]) -> Result<(), OutputError> {
    let mut c = CsvSeries::create(
        &dir.join("flow-throughput.csv"),
        &["time_ns", "flow", "gbps"],
    )?;
    for s in series {
        c.row(&[s.time_ns as f64, s.flow as f64, s.gbps])?;
    }
    c.finish().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(id: usize, tag: &str) -> FlowSpec {
        FlowSpec {
            id,
            src: 0,
            dst: 1,
            bytes: Some(1000),
            start_ns: 0,
            stop_ns: None,
            after: Vec::new(),
            workload: 0,
            round: 0,
            repetition: None,
            tag: tag.into(),
        }
    }

    fn params(flows: usize, tags: Option<&[&str]>) -> AnalysisParams {
        AnalysisParams {
            fct_tags: None,
            fct_bin_pct: 5,
            throughput_flows: flows,
            throughput_tags: tags.map(|t| t.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn a_flows_completions_become_gbps_per_interval_from_its_start_to_its_end() {
        let flows = [flow(0, "cdf")];
        let mut log = ThroughputLog::new(&flows, &params(10, None));
        // Started at 2 us; 64 KB acknowledged at 9 us, nothing in (10, 20],
        // 2 x 64 KB in (20, 30]: intervals of 10 us.
        log.completed(0, 9_000, 64_000);
        log.completed(0, 21_000, 64_000);
        log.completed(0, 30_000, 64_000);
        let s = log.series(10_000, &[Some(2_000)]);
        let got: Vec<(u64, f64)> = s.iter().map(|x| (x.time_ns, x.gbps)).collect();
        // 64 KB in 10 us is 51.2 Gb/s.
        assert_eq!(got, [(10_000, 51.2), (20_000, 0.0), (30_000, 102.4)]);
    }

    #[test]
    fn only_the_chosen_flows_get_a_series() {
        let flows = [
            flow(0, "incast"),
            flow(1, "cdf"),
            flow(2, "cdf"),
            flow(3, "cdf"),
        ];
        let mut log = ThroughputLog::new(&flows, &params(2, Some(&["cdf"])));
        for f in 0..4 {
            log.completed(f, 5_000, 1_000);
        }
        let s = log.series(10_000, &[Some(0); 4]);
        let ids: Vec<usize> = s.iter().map(|x| x.flow).collect();
        assert_eq!(ids, [1, 2]);
        // No flow at all.
        let none = ThroughputLog::new(&flows, &params(0, None));
        assert!(none.series(10_000, &[Some(0); 4]).is_empty());
    }
}
