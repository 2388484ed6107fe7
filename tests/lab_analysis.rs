//! The lab's analyses and buffer settings, each run as a user runs it
//! (`ferroce lab FILE --out DIR` on an experiment file written here):
//!
//! - the HPCC-style FCT table (`fct-hpcc.csv` per run and per experiment,
//!   the summary's `fct_hpcc`, `fct-hpcc-p95.png`) over the flows of the
//!   chosen tags, and the per-flow throughput series
//!   (`flow-throughput.csv`) of the chosen flows;
//! - ECN thresholds per 25 Gb/s: on a fabric of mixed rates, marking
//!   starts at each port's scaled threshold;
//! - dynamic PFC thresholds: a lossless incast stays lossless, paused by
//!   PFC frames.

#![cfg(not(feature = "dpdk"))]

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes `toml` as `NAME.toml` in a temporary folder and runs `ferroce
/// lab` on it; returns the results folder (kept alive by the tempdir).
fn lab(name: &str, toml: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let file = tmp.path().join(format!("{name}.toml"));
    std::fs::write(&file, toml).expect("the experiment file");
    let out = tmp.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .arg("lab")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .output()
        .expect("ferroce runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "ferroce lab {name} failed");
    (tmp, out)
}

fn summary(out: &Path, run: &str) -> Value {
    let text = std::fs::read_to_string(out.join(run).join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("JSON")
}

/// A CSV file as a header and rows of fields.
fn csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let split = |l: &str| l.split(',').map(str::to_string).collect::<Vec<_>>();
    let header = split(lines.next().expect("a header"));
    (header, lines.map(split).collect())
}

fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

fn font_installed() -> bool {
    std::env::var_os("FERROCE_FONT").is_some()
        || Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists()
}

fn websearch() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs/lab/websearch.csv")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_hpcc_style_fct_table_and_the_throughput_series_cover_the_chosen_flows() {
    let toml = format!(
        r#"name = "analysis"
duration_us = 2000
drain_limit_us = 100000
rate_sample_us = 10
[topology]
kind = "incast"
senders = 7
[switch]
buffer_kb = 12000
[switch.ecn]
kmin_kb = 100
kmax_kb = 1600
[switch.pfc]
priorities = [3]
xoff_kb = 400
xon_kb = 380
[[workload]]
kind = "cdf"
tag = "web"
file = "{}"
load = 0.5
[[workload]]
kind = "incast"
tag = "burst"
size_kb = 100
start_us = 500
[output]
fct_tags = ["web"]
fct_bin_pct = 10
throughput_flows = 12
throughput_tags = "web"
[[variant]]
name = "dcqcn"
[[variant]]
name = "none"
set = {{ "transport.cc" = "none" }}
"#,
        websearch()
    );
    let (_tmp, out) = lab("analysis", &toml);
    let mut all_rows = 0;
    for run in ["dcqcn", "none"] {
        let dir = out.join(run);
        // The completed web flows, from flows.csv.
        let (h, flows) = csv(&dir.join("flows.csv"));
        let (tag, bytes, fct) = (col(&h, "tag"), col(&h, "bytes"), col(&h, "fct_ns"));
        let (start, id) = (col(&h, "start_ns"), col(&h, "flow"));
        let web: Vec<&Vec<String>> = flows
            .iter()
            .filter(|f| f[tag] == "web" && !f[fct].is_empty())
            .collect();
        assert!(web.len() >= 20, "{run}: {} web flows", web.len());
        assert!(flows.iter().any(|f| f[tag] == "burst"));
        // The table: bins of 10% of the web flows (the burst left out),
        // by size, each with its largest size; percentiles in order, at
        // least 1, and over the lab's ideal (the smaller) at least as high.
        let (h, rows) = csv(&dir.join("fct-hpcc.csv"));
        assert_eq!(
            h,
            [
                "from_pct",
                "flows",
                "size_bytes",
                "p50",
                "p95",
                "p99",
                "lab_p50",
                "lab_p95",
                "lab_p99"
            ]
        );
        assert_eq!(rows.len(), 10, "{run}");
        let num = |r: &Vec<String>, c: &str| r[col(&h, c)].parse::<f64>().unwrap();
        let counted: f64 = rows.iter().map(|r| num(r, "flows")).sum();
        assert_eq!(counted as usize, web.len(), "{run}");
        let mut sizes: Vec<u64> = web.iter().map(|f| f[bytes].parse().unwrap()).collect();
        sizes.sort_unstable();
        assert_eq!(
            num(rows.last().unwrap(), "size_bytes") as u64,
            sizes[sizes.len() - 1]
        );
        assert_eq!(
            num(&rows[0], "size_bytes") as u64,
            sizes[web.len() / 10 - 1]
        );
        for (k, r) in rows.iter().enumerate() {
            assert_eq!(num(r, "from_pct") as usize, k * 10);
            if k > 0 {
                assert!(num(r, "size_bytes") >= num(&rows[k - 1], "size_bytes"));
            }
            let (p50, p95, p99) = (num(r, "p50"), num(r, "p95"), num(r, "p99"));
            assert!(1.0 <= p50 && p50 <= p95 && p95 <= p99, "{run}: {r:?}");
            assert!(
                num(r, "lab_p50") >= p50 && num(r, "lab_p99") >= p99,
                "{run}: {r:?}"
            );
        }
        // The summary carries the same table.
        let s = summary(&out, run);
        let t = s["fct_hpcc"].as_array().expect("fct_hpcc");
        assert_eq!(t.len(), rows.len());
        assert_eq!(
            t[3]["size_bytes"].as_f64(),
            Some(num(&rows[3], "size_bytes"))
        );
        // Throughput: the first 12 web flows by id, each from the interval
        // it started in to its end; a finished flow's Gb/s add up to its
        // size.
        let (h, tp) = csv(&dir.join("flow-throughput.csv"));
        assert_eq!(h, ["time_ns", "flow", "gbps"]);
        let mut per_flow: BTreeMap<usize, Vec<(u64, f64)>> = BTreeMap::new();
        for r in &tp {
            per_flow
                .entry(r[1].parse().unwrap())
                .or_default()
                .push((r[0].parse().unwrap(), r[2].parse().unwrap()));
        }
        let mut web_ids: Vec<usize> = flows
            .iter()
            .filter(|f| f[tag] == "web" && !f[start].is_empty())
            .map(|f| f[id].parse().unwrap())
            .collect();
        web_ids.sort_unstable();
        web_ids.truncate(12);
        assert_eq!(
            per_flow.keys().copied().collect::<Vec<_>>(),
            web_ids,
            "{run}"
        );
        for (&flow, series) in &per_flow {
            let f = &flows[flow];
            assert!(series.windows(2).all(|w| w[1].0 == w[0].0 + 10_000));
            let first = series[0].0;
            let started: u64 = f[start].parse().unwrap();
            assert!(
                first > started && first <= started + 10_000,
                "{run} flow {flow}"
            );
            if !f[fct].is_empty() {
                let acked: f64 = series.iter().map(|(_, g)| g * 10_000.0 / 8.0).sum();
                let size: f64 = f[bytes].parse().unwrap();
                assert!(
                    (acked - size).abs() < 1.0,
                    "{run} flow {flow}: {acked} of {size}"
                );
                let done = started + f[fct].parse::<u64>().unwrap();
                assert!(
                    series.last().unwrap().0 >= done && series.last().unwrap().0 < done + 10_000
                );
            }
            // A WRITE counts whole in the interval its completion comes in,
            // and completions come in order, so one interval may show more
            // than the line rate; what is acknowledged by the end of each
            // interval stays within 100 Gb/s since the start, plus the
            // window (8 WRITEs of 64 KB).
            let mut acked = 0.0;
            for &(t, g) in series {
                acked += g * 10_000.0 / 8.0;
                let line = (t - started) as f64 * 100.0 / 8.0;
                assert!(acked <= line + 512_000.0, "{run} flow {flow}: {series:?}");
            }
        }
        all_rows += rows.len();
    }
    // The experiment's table: every run's rows, the run first.
    let (h, rows) = csv(&out.join("fct-hpcc.csv"));
    assert_eq!(h[0], "run");
    assert_eq!(rows.len(), all_rows);
    assert_eq!(rows[0][0], "dcqcn");
    assert_eq!(rows[rows.len() - 1][0], "none");
    if font_installed() {
        assert!(out.join("fct-hpcc-p95.png").is_file());
    }
}

/// Two senders at 100 Gb/s write to `r100` (100 Gb/s) or `r25` (25 Gb/s)
/// with no rate control, so the receiver's queue grows until the end;
/// RED with Kmin = Kmax = 25 KB, per 25 Gb/s or not.
const MIXED: &str = r#"name = "mixed"
duration_us = 100
rate_sample_us = 1
queue_sample_ns = 100
[topology]
kind = "custom"
switches = ["sw"]
hosts = [
  { name = "a", switch = "sw" },
  { name = "b", switch = "sw" },
  { name = "r100", switch = "sw" },
  { name = "r25", switch = "sw", rate_gbps = 25 },
]
[switch.ecn]
kmin_kb = 25
kmax_kb = 25
scale_per_25g = true
[transport]
cc = "none"
[[workload]]
kind = "long"
from = ["a", "b"]
to = "r100"
[output]
queues = ["sw:r100", "sw:r25"]
[[variant]]
name = "scaled-100g"
[[variant]]
name = "scaled-25g"
set = { "workload.0.to" = "r25" }
[[variant]]
name = "flat-100g"
set = { "switch.ecn.scale_per_25g" = false }
"#;

/// The queue towards `to` when the first ECN mark is counted, and one
/// rate sample (1 us) before.
fn queue_at_first_mark(out: &Path, run: &str, to: &str) -> (f64, f64) {
    let dir = out.join(run);
    let (h, sig) = csv(&dir.join("signals.csv"));
    let m = col(&h, "ecn_marked");
    let first = sig
        .iter()
        .find(|r| r[m].parse::<u64>().unwrap() > 0)
        .unwrap_or_else(|| panic!("{run}: no mark"));
    let t: u64 = first[0].parse().unwrap();
    let (h, q) = csv(&dir.join("queue.csv"));
    let c = h
        .iter()
        .position(|n| n.ends_with(&format!("->{to}")))
        .unwrap_or_else(|| panic!("{run}: no queue to {to} in {h:?}"));
    let at = |ns: u64| {
        q.iter()
            .find(|r| r[0].parse::<u64>().unwrap() == ns)
            .map(|r| r[c].parse::<f64>().unwrap())
            .unwrap()
    };
    (at(t - 1_000), at(t))
}

#[test]
fn ecn_thresholds_per_25g_mark_each_port_from_its_scaled_threshold() {
    let (_tmp, out) = lab("mixed", MIXED);
    // Marking (at dequeue, of the bytes behind the frame) starts as the
    // first frame leaves past the port's threshold: a microsecond before
    // the first mark is counted, the queue was below the threshold plus
    // what arrives while a frame or two is sent (4 KB frames take 0.33 us
    // at 100 Gb/s, 1.3 us at 25 Gb/s; the queue grows by at most 12.5 KB
    // a microsecond into r100 and 21.9 KB into r25).
    let got: Vec<(f64, f64)> = [
        ("scaled-100g", "r100"),
        ("flat-100g", "r100"),
        ("scaled-25g", "r25"),
    ]
    .iter()
    .map(|(run, to)| queue_at_first_mark(&out, run, to))
    .collect();
    eprintln!("queue a microsecond before and when marking starts: {got:?}");
    // 25 KB per 25 Gb/s is 100 KB at the 100 Gb/s port ...
    let (before, at) = got[0];
    assert!(at > 100_000.0 && before < 100_000.0 + 17_000.0, "{got:?}");
    // ... 25 KB without scaling ...
    let (before, at) = got[1];
    assert!(at > 25_000.0 && before < 25_000.0 + 17_000.0, "{got:?}");
    // ... and 25 KB at the 25 Gb/s port of the same fabric.
    let (before, at) = got[2];
    assert!(at > 25_000.0 && before < 25_000.0 + 50_000.0, "{got:?}");
    for run in ["scaled-100g", "flat-100g", "scaled-25g"] {
        let s = summary(&out, run);
        assert!(s["ecn_marked"].as_u64().unwrap() > 0, "{run}");
    }
}

#[test]
fn a_lossless_incast_with_dynamic_pfc_thresholds_drops_nothing() {
    let toml = r#"name = "dynamic-pfc"
duration_us = 1000
[topology]
kind = "incast"
senders = 8
[switch]
buffer_kb = 1000
[switch.pfc]
priorities = [3]
threshold = "dynamic"
alpha = 0.125
headroom_kb = 100
[transport]
cc = "none"
[[workload]]
kind = "long"
from = "senders"
to = "recv"
"#;
    let (_tmp, out) = lab("dynamic-pfc", toml);
    let s = summary(&out, "dynamic-pfc");
    eprintln!(
        "drops {} pfc {} paused {} queue max {} p99 {} goodput {} jain {}",
        s["drops"],
        s["pfc_frames"],
        s["paused_ns"],
        s["queue"]["max"],
        s["queue"]["p99"],
        s["long_goodput_bps"],
        s["long_jain"]
    );
    assert_eq!(s["drops"].as_u64(), Some(0));
    assert_eq!(s["drops_headroom"].as_u64(), Some(0));
    assert!(s["pfc_frames"].as_u64().unwrap() > 8, "{}", s["pfc_frames"]);
    assert!(s["paused_ns"].as_u64().unwrap() > 0);
    assert_eq!(s["drained"].as_bool(), Some(true));
    assert_eq!(s["flows_completed"], s["flows"]);
    // The link stays busy: pausing at a share of the free buffer is not
    // pausing for ever.
    assert!(s["long_goodput_bps"].as_f64().unwrap() > 90e9);
    // Eight ports, each paused at 1/8 of what is free: together they hold
    // about half the 1 MB buffer, plus what was in flight.
    let max = s["queue"]["max"].as_f64().unwrap();
    assert!(max < 1_000_000.0, "{max}");
}
