//! Flow completion times as the HPCC simulator's scripts report them,
//! beside the lab's own size buckets ([`super::workload::slowdown_by_bucket`]).
//!
//! This module owns that simulator's ideal ("standalone") FCT, its way of
//! binning flows by size, the table it makes ([`FctBin`]) and the files
//! and plot of it: `RUN/fct-hpcc.csv`, the experiment's `fct-hpcc.csv`
//! and `fct-hpcc-p95.png`. Which flows it takes is `[output] fct_tags`
//! and `fct_bin_pct` ([`super::resolve::AnalysisParams`]).
//!
//! # The ideal FCT
//!
//! The HPCC simulator writes, for each flow that completes, its FCT and a
//! standalone FCT (alibaba-edu/High-Precision-Congestion-Control,
//! `simulation/scratch/third.cc`, `qp_finish`):
//!
//! ```text
//! standalone = base_rtt + total_bytes x 8 / b
//! total_bytes = size + ceil(size / payload) x header
//! base_rtt = 2 x (one-way propagation delay) + sum over the path's links of payload x 8 / rate
//! ```
//!
//! with `b` the path's slowest link (`pairBw`), `payload` the packet
//! payload (`PACKET_PAYLOAD_SIZE`, 1000 bytes in its `mix/config.txt`),
//! `header` its per-packet headers less INT (`CustomHeader::
//! GetStaticWholeHeaderSize() - IntHeader::GetStaticSize()`: Ethernet 14,
//! IPv4 20, UDP 8, its 2-byte priority group and 4-byte sequence number,
//! 48 bytes), and the base RTT as `CalculateRoute` sums it: propagation
//! both ways plus one full packet's payload serialised at each link one
//! way (`pairRtt` = `delay * 2 + txDelay`). Every division is integer
//! (rounded down), in nanoseconds.
//!
//! Here, [`ideal_fct_ns`] is that formula with the lab's packets
//! ([`PacketShape::lab`]): `payload` the path MTU, `header` 58 bytes (a
//! RoCE v2 packet's Ethernet 14, IPv4 20, UDP 8, BTH 12 and ICRC 4;
//! [`PACKET_HEADER_BYTES`]); the path is the one
//! [`TopologySpec::path`] picks (fewest links, then the fastest slowest
//! link, then the least delay). [`PacketShape::HPCC`] gives that
//! simulator's own constants. The lab's own ideal
//! ([`super::workload::ideal_fct_ns`], `ideal_fct_ns` in `flows.csv`)
//! differs in three ways: its base RTT is propagation only (no
//! per-link serialisation of a packet), it counts the one RETH (16 bytes)
//! of each WRITE, and it rounds the serialisation time up. The HPCC ideal
//! is the larger by about one packet's time per link, so its slowdowns
//! are the smaller, mostly for flows of a few packets. The table keeps
//! both: the HPCC ideal's percentiles, and the lab ideal's (`lab_p50`..)
//! over the same bins.
//!
//! # The bins
//!
//! As `analysis/fct_analysis.py` of that repository does: the slowdown
//! of a flow is FCT / standalone, 1 where that is below 1; the flows are
//! sorted by size and cut into bins of `step` percent of their number
//! (flows `i x n / 100` to `(i + step) x n / 100`, rounded down, for
//! i = 0, step, 2 step, ... below 100); each bin reports the size of its
//! last (largest) flow and the slowdowns at the 50th, 95th and 99th
//! percentile, a percentile p being the sorted bin's element at index
//! `floor(len x p)` (counted from 0). The script differs in details that
//! do not come from the simulator: it drops the last line of its sorted
//! input (the largest flow), it sorts lines as text after their leading
//! size, so equal sizes fall in the order of their slowdown's text, and
//! it fails on an empty bin. Here every flow counts, equal sizes are
//! ordered by their slowdown, and empty bins (fewer flows than bins) are
//! left out. Its filter on the flow's destination port (100: the
//! background traffic, 200: incast) is `fct_tags`; it has no flows of
//! unknown size, and here only completed sized flows count.

#![deny(unsafe_code)]
use super::config::TopologySpec;
use super::output::{CsvSeries, OutputError};
use super::plot::{LinePlot, Series};
use super::resolve::Resolved;
use super::run::{FlowResult, RunSummary};
use super::workload::PACKET_HEADER_BYTES;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::path::Path;

/// The per-packet sizes the ideal FCT is computed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketShape {
    /// Payload bytes of a full packet.
    pub payload: u64,
    /// Header bytes of every packet.
    pub header: u64,
}

impl PacketShape {
    /// The HPCC simulator's: 1000-byte payloads (`PACKET_PAYLOAD_SIZE` of
    /// `mix/config.txt`) and 48 bytes of headers less INT (`third.cc`).
    pub const HPCC: PacketShape = PacketShape {
        payload: 1000,
        header: 48,
    };

    /// The lab's: payloads of the path MTU, a RoCE v2 packet's 58 bytes of
    /// headers ([`PACKET_HEADER_BYTES`]).
    pub fn lab(mtu: u32) -> PacketShape {
        PacketShape {
            payload: u64::from(mtu.max(1)),
            header: PACKET_HEADER_BYTES,
        }
    }
}

/// A path between two hosts as the HPCC simulator's ideal FCT sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdealPath {
    /// One-way propagation delay over every link, nanoseconds.
    pub delay_ns: u64,
    /// Its slowest link, bits per second.
    pub bottleneck_bps: u64,
    /// One full packet's payload serialised at every link of the path, one
    /// way, each rounded down, nanoseconds (`txDelay` of `third.cc`).
    pub tx_ns: u64,
}

impl IdealPath {
    /// Propagation both ways plus `tx_ns` (`pairRtt` of `third.cc`).
    pub fn base_rtt_ns(&self) -> u64 {
        self.delay_ns.saturating_mul(2).saturating_add(self.tx_ns)
    }
}

/// `payload` bytes at `rate_bps`, nanoseconds rounded down (0 at rate 0).
fn ser_ns(bytes: u64, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return 0;
    }
    u64::try_from(u128::from(bytes) * 8 * 1_000_000_000 / u128::from(rate_bps)).unwrap_or(u64::MAX)
}

/// The HPCC simulator's standalone FCT of a flow of `bytes` on `path`
/// with packets of `shape` (the formula in the module docs); `u64::MAX`
/// for a path of rate 0.
pub fn ideal_fct_ns(bytes: u64, path: &IdealPath, shape: PacketShape) -> u64 {
    if path.bottleneck_bps == 0 {
        return u64::MAX;
    }
    let packets = bytes.saturating_sub(1) / shape.payload.max(1) + 1;
    let total = bytes.saturating_add(packets.saturating_mul(shape.header));
    let ser = u128::from(total) * 8 * 1_000_000_000 / u128::from(path.bottleneck_bps);
    u64::try_from(ser)
        .unwrap_or(u64::MAX)
        .saturating_add(path.base_rtt_ns())
}

/// The best (hops, bottleneck, delay, tx) from one switch to each switch
/// (`None`: not reached).
type Reach = Vec<Option<(usize, u64, u64, u64)>>;

/// The ideal paths of a topology, found once per source switch.
pub struct IdealPaths<'a> {
    topo: &'a TopologySpec,
    payload: u64,
    adj: Vec<Vec<usize>>,
    /// Per source switch: the best (hops, bottleneck, delay, tx) to every
    /// switch.
    from: HashMap<usize, Reach>,
}

impl<'a> IdealPaths<'a> {
    /// The paths of `topo`, their `tx_ns` for payloads of `payload` bytes.
    pub fn new(topo: &'a TopologySpec, payload: u64) -> IdealPaths<'a> {
        let mut adj = vec![Vec::new(); topo.switches.len()];
        for (i, l) in topo.links.iter().enumerate() {
            adj[l.a].push(i);
            adj[l.b].push(i);
        }
        IdealPaths {
            topo,
            payload,
            adj,
            from: HashMap::new(),
        }
    }

    /// The path from host `src` to host `dst`: among the paths of fewest
    /// links, the fastest slowest link, then the least delay (as
    /// [`TopologySpec::path`]), then the least `tx_ns`. `None` when
    /// `src == dst`, either is not a host or they are not connected.
    pub fn path(&mut self, src: usize, dst: usize) -> Option<IdealPath> {
        let topo = self.topo;
        let (s, d) = (topo.hosts.get(src)?, topo.hosts.get(dst)?);
        if src == dst {
            return None;
        }
        let (adj, payload) = (&self.adj, self.payload);
        let best = self
            .from
            .entry(s.switch)
            .or_insert_with(|| switch_paths(topo, adj, payload, s.switch));
        let (_, rate, delay, tx) = best.get(d.switch).copied().flatten()?;
        Some(IdealPath {
            delay_ns: delay
                .saturating_add(s.link.delay_ns)
                .saturating_add(d.link.delay_ns),
            bottleneck_bps: rate.min(s.link.rate_bps).min(d.link.rate_bps),
            tx_ns: tx
                .saturating_add(ser_ns(payload, s.link.rate_bps))
                .saturating_add(ser_ns(payload, d.link.rate_bps)),
        })
    }
}

/// Breadth first from switch `from`: the best (hops, bottleneck, delay,
/// tx) to every switch it reaches.
fn switch_paths(topo: &TopologySpec, adj: &[Vec<usize>], payload: u64, from: usize) -> Reach {
    let mut best: Reach = vec![None; topo.switches.len()];
    best[from] = Some((0, u64::MAX, 0, 0));
    let mut queue = VecDeque::from([from]);
    while let Some(u) = queue.pop_front() {
        let Some((hops, rate, delay, tx)) = best[u] else {
            continue;
        };
        for &li in &adj[u] {
            let l = &topo.links[li];
            let v = if l.a == u { l.b } else { l.a };
            let cand = (
                hops + 1,
                rate.min(l.link.rate_bps),
                delay.saturating_add(l.link.delay_ns),
                tx.saturating_add(ser_ns(payload, l.link.rate_bps)),
            );
            match best[v] {
                None => {
                    best[v] = Some(cand);
                    queue.push_back(v);
                }
                Some(b)
                    if b.0 == cand.0
                        && (Reverse(cand.1), cand.2, cand.3) < (Reverse(b.1), b.2, b.3) =>
                {
                    best[v] = Some(cand);
                }
                _ => {}
            }
        }
    }
    best
}

/// One completed flow, for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FctRecord {
    /// Its size, bytes.
    pub bytes: u64,
    /// Its completion time, nanoseconds.
    pub fct_ns: u64,
    /// The HPCC simulator's standalone FCT ([`ideal_fct_ns`]).
    pub ideal_hpcc_ns: u64,
    /// The lab's ideal ([`super::workload::ideal_fct_ns`]).
    pub ideal_lab_ns: u64,
}

impl FctRecord {
    /// FCT over the HPCC ideal, at least 1 (as `fct_analysis.py`).
    pub fn slowdown(&self) -> f64 {
        slowdown(self.fct_ns, self.ideal_hpcc_ns)
    }

    /// FCT over the lab's ideal, at least 1.
    pub fn lab_slowdown(&self) -> f64 {
        slowdown(self.fct_ns, self.ideal_lab_ns)
    }
}

fn slowdown(fct: u64, ideal: u64) -> f64 {
    (fct as f64 / ideal.max(1) as f64).max(1.0)
}

/// One bin of the table: a share of the flows, sorted by size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FctBin {
    /// Where the bin starts, percent of the flows (0, 5, 10, ...).
    pub from_pct: u32,
    /// The flows in it.
    pub flows: usize,
    /// The size of its largest flow, bytes (the bin's upper edge).
    pub size_bytes: u64,
    /// Slowdown over the HPCC ideal: the median ...
    pub p50: f64,
    /// ... the 95th percentile ...
    pub p95: f64,
    /// ... and the 99th (index `floor(len x p)` of the sorted bin).
    pub p99: f64,
    /// The same over the lab's ideal: the median ...
    pub lab_p50: f64,
    /// ... the 95th percentile ...
    pub lab_p95: f64,
    /// ... and the 99th.
    pub lab_p99: f64,
}

/// `fct_analysis.py`'s percentile: the element at `floor(len x p)` of a
/// sorted, non-empty slice.
fn pctl(sorted: &[f64], p: f64) -> f64 {
    let i = (sorted.len() as f64 * p) as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The table of `records` in bins of `step_pct` percent (module docs);
/// bins without flows are left out.
pub fn bins(records: &[FctRecord], step_pct: u32) -> Vec<FctBin> {
    let step = step_pct.clamp(1, 100) as usize;
    let mut v: Vec<(u64, f64, f64)> = records
        .iter()
        .map(|r| (r.bytes, r.slowdown(), r.lab_slowdown()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let n = v.len();
    let mut out = Vec::new();
    for i in (0..100).step_by(step) {
        let (l, r) = (i * n / 100, ((i + step) * n / 100).min(n));
        let bin = &v[l..r];
        let Some(last) = bin.last() else {
            continue;
        };
        let sorted = |f: fn(&(u64, f64, f64)) -> f64| {
            let mut s: Vec<f64> = bin.iter().map(f).collect();
            s.sort_by(f64::total_cmp);
            s
        };
        let (h, lab) = (sorted(|x| x.1), sorted(|x| x.2));
        out.push(FctBin {
            from_pct: i as u32,
            flows: bin.len(),
            size_bytes: last.0,
            p50: pctl(&h, 0.5),
            p95: pctl(&h, 0.95),
            p99: pctl(&h, 0.99),
            lab_p50: pctl(&lab, 0.5),
            lab_p95: pctl(&lab, 0.95),
            lab_p99: pctl(&lab, 0.99),
        });
    }
    out
}

/// A run's table: its completed sized flows of the chosen tags, with
/// their HPCC ideal on the run's topology and the lab's ideal they carry.
pub fn run_table(flows: &[FlowResult], r: &Resolved) -> Vec<FctBin> {
    let topo = &r.topology;
    let shape = PacketShape::lab(topo.mtu);
    let mut paths = IdealPaths::new(topo, shape.payload);
    let records: Vec<FctRecord> = flows
        .iter()
        .filter(|f| r.analysis.fct_takes(&f.tag))
        .filter_map(|f| {
            let (bytes, fct_ns, ideal_lab_ns) = (f.bytes?, f.fct_ns?, f.ideal_fct_ns?);
            let path = paths.path(f.src, f.dst)?;
            Some(FctRecord {
                bytes,
                fct_ns,
                ideal_hpcc_ns: ideal_fct_ns(bytes, &path, shape),
                ideal_lab_ns,
            })
        })
        .collect();
    bins(&records, r.analysis.fct_bin_pct)
}

const COLUMNS: [&str; 9] = [
    "from_pct",
    "flows",
    "size_bytes",
    "p50",
    "p95",
    "p99",
    "lab_p50",
    "lab_p95",
    "lab_p99",
];

fn row(b: &FctBin) -> [String; 9] {
    let f = |v: f64| format!("{v:.3}");
    [
        b.from_pct.to_string(),
        b.flows.to_string(),
        b.size_bytes.to_string(),
        f(b.p50),
        f(b.p95),
        f(b.p99),
        f(b.lab_p50),
        f(b.lab_p95),
        f(b.lab_p99),
    ]
}

/// `RUN/fct-hpcc.csv`: a run's table, a row per bin.
pub fn write_run_csv(dir: &Path, table: &[FctBin]) -> Result<(), OutputError> {
    let mut c = CsvSeries::create(&dir.join("fct-hpcc.csv"), &COLUMNS)?;
    for b in table {
        let cells = row(b);
        let cells: Vec<&dyn std::fmt::Display> =
            cells.iter().map(|c| c as &dyn std::fmt::Display).collect();
        c.row_display(&cells)?;
    }
    c.finish().map(|_| ())
}

/// `DIR/fct-hpcc.csv`: every run's table, the run's name first.
pub fn write_csv(dir: &Path, runs: &[RunSummary]) -> Result<(), OutputError> {
    let mut header = vec!["run"];
    header.extend(COLUMNS);
    let mut c = CsvSeries::create(&dir.join("fct-hpcc.csv"), &header)?;
    for s in runs {
        for b in &s.fct_hpcc {
            let cells = row(b);
            let mut v: Vec<&dyn std::fmt::Display> = vec![&s.name];
            v.extend(cells.iter().map(|c| c as &dyn std::fmt::Display));
            c.row_display(&v)?;
        }
    }
    c.finish().map(|_| ())
}

/// `DIR/fct-hpcc-p95.png`: p95 slowdown over the HPCC ideal against each
/// bin's size, a line per run, the size on a log axis; nothing when no run
/// has a table. A plot that cannot be drawn adds a warning.
pub fn plot_p95(dir: &Path, title: &str, runs: &[RunSummary], warnings: &mut Vec<String>) {
    if runs.iter().all(|s| s.fct_hpcc.is_empty()) {
        return;
    }
    let path = dir.join("fct-hpcc-p95.png");
    let plot = LinePlot {
        title: format!("{title}: p95 FCT slowdown (HPCC ideal) per flow size"),
        x_label: "flow size, bin's upper edge (bytes)".into(),
        y_label: "p95 slowdown (FCT / standalone FCT)".into(),
        series: runs
            .iter()
            .map(|s| Series {
                name: s.name.clone(),
                points: s
                    .fct_hpcc
                    .iter()
                    .map(|b| (b.size_bytes as f64, b.p95))
                    .collect(),
            })
            .collect(),
        log_x: true,
        markers: true,
        ..LinePlot::default()
    };
    if let Err(e) = plot.write_png(&path) {
        warnings.push(format!("{}: {e}", path.display()));
    }
}

#[cfg(test)]
mod tests;
