//! The experiments shipped in configs/lab/, each run as a user runs it
//! (`ferroce lab FILE --out DIR`), with its qualitative result asserted on
//! the summary the run writes:
//!
//! - (a) incast: DCQCN bounds the bottleneck queue where no rate control
//!   fills the buffer and drops, and PFC alone is lossless but queues in
//!   proportion to the number of senders;
//! - (b) ecn-vs-pfc: ECN marking below the PFC threshold keeps pauses near
//!   zero, marking above it leaves the work to PFC;
//! - (c) victim: PFC alone costs a flow that shares a paused link most of
//!   its throughput (head-of-line blocking); DCQCN gives some of it back;
//! - (d) deadlock: a cyclic buffer dependency under PFC deadlocks, and the
//!   run reports the cycle; without PFC it does not;
//! - (e) dcqcn-sweep: ECN thresholds trade short-flow against long-flow
//!   completion times;
//! - (f) timely-rtt: patched TIMELY holds the RTT between T_low and T_high
//!   and shares fairly; the SIGCOMM'15 original, with flows starting 1 ms
//!   apart, does not;
//! - (g) hpcc, hpcc-websearch: HPCC keeps the bottleneck queue near zero
//!   where DCQCN holds a standing one, on one hop and across a leaf-spine;
//! - (h) swift: Swift holds the RTT near its target, which is higher with
//!   more flows;
//! - (i) cross-az: an all-reduce across two zones 1 ms apart completes
//!   where the transport's window, its ACK timeout, PFC headroom and the
//!   rate control's base RTT or target are sized for the long link, and
//!   falls behind (or stalls) where one is not.
//! - (j) hpcc-vs-dcqcn: the HPCC paper's comparison on a scaled fat tree:
//!   HPCC cuts the tail slowdown of short flows and the queues far below
//!   DCQCN's, at 30% and 50% load, and sends no PFC frame under incasts
//!   that make DCQCN's;
//! - (k) irn: selective repeat (IRN-style) without PFC beats go-back-N
//!   with PFC on mean and tail flow completion, and go-back-N without PFC
//!   collapses once the buffers are shallow; selective repeat resends
//!   about one packet per drop, go-back-N several;
//! - hpcc-files, fat-tree: the HPCC simulator's topology and flow-list
//!   files, and a fat tree with Poisson incasts, run with every flow
//!   completing.
//!
//! The simulator is deterministic: these are exact runs, not samples.
//! They run once, in the test pass without DPDK.

#![cfg(not(feature = "dpdk"))]

mod common;

use common::doc_tables::{self, one, Cell};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `ferroce lab configs/lab/NAME.toml --out TMP --quiet`; returns the
/// results folder (kept alive by the tempdir).
fn lab(name: &str) -> (tempfile::TempDir, PathBuf) {
    lab_with(name, &[])
}

/// [`lab`] with more arguments after `--quiet`.
fn lab_with(name: &str, args: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let out = tmp.path().join(name);
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs/lab")
        .join(format!("{name}.toml"));
    let o = Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .arg("lab")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .args(args)
        .output()
        .expect("ferroce runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "ferroce lab {name} failed");
    assert!(stdout.contains("results in"), "{stdout}");
    (tmp, out)
}

/// A run's own summary (`DIR/RUN/summary.json`).
fn run(out: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(out.join(name).join("summary.json"))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).expect("JSON")
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} in {}", v["name"]))
}

/// The FCT size bucket `name` of a run's summary (`fct`, as `fct.csv`).
fn fct_bucket<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["fct"]
        .as_array()
        .expect("fct buckets")
        .iter()
        .find(|b| b["bucket"] == name)
        .unwrap_or_else(|| panic!("the {name} bucket in {}", v["name"]))
}

/// Second-half goodput of the flows tagged `tag`, summed (bits/s).
fn goodput_of(out: &Path, run: &str, tag: &str) -> f64 {
    let text = std::fs::read_to_string(out.join(run).join("flows.csv")).expect("flows.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).expect(n);
    let (t, g) = (col("tag"), col("goodput_second_half_bps"));
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|c| c[t] == tag)
        .map(|c| c[g].parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// Plots are drawn where a font is installed (the setup script installs
/// one); their absence elsewhere is a warning, not a failure.
fn font_installed() -> bool {
    std::env::var_os("FERROCE_FONT").is_some()
        || Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists()
}

const KMAX: f64 = 1_600_000.0;
const BUFFER: f64 = 3_200_000.0;

/// How far a run may stray from the figure it measured: the runs are
/// exact (the simulator is deterministic), so a bound 25% past the
/// measured figure holds until a change moves the result, where the
/// qualitative bar (e.g. Kmax, ten times these queues) would let it drift
/// far.
fn at_most_25_percent_above(measured: f64) -> f64 {
    measured * 1.25
}

/// The lower bound counterpart: 25% below the measured figure.
fn at_least_25_percent_below(measured: f64) -> f64 {
    measured * 0.75
}

/// (a)'s DCQCN runs on the lossy fabric: the bottleneck queue's p99 over
/// the second half, bytes, as measured, per number of senders.
const INCAST_DCQCN_QUEUE_P99: [(usize, f64); 4] = [
    (2, 96_656.0),
    (4, 136_676.0),
    (8, 131_408.0),
    (16, 233_754.0),
];

#[test]
fn a_incast_dcqcn_bounds_the_queue_none_drops_pfc_alone_queues_per_sender() {
    let (_tmp, out) = lab("incast");
    for n in [2, 4, 8, 16, 32, 64] {
        let dcqcn = run(&out, &format!("dcqcn-senders={n}"));
        let none = run(&out, &format!("none-senders={n}"));
        let pfc = run(&out, &format!("pfc-senders={n}"));
        let both = run(&out, &format!("dcqcn-pfc-senders={n}"));
        let q2 = |v: &Value| f(&v["queue_second_half"], "p99");
        // Without rate control the queue sits near the buffer once the
        // senders' windows exceed it, and the switch drops.
        if n >= 8 {
            assert!(q2(&none) > 0.9 * BUFFER, "{none}");
            assert!(f(&none, "drops") > 0.0, "{none}");
            // Data frames (priority 3), every one.
            assert_eq!(
                none["drops_by_priority"][3].as_f64(),
                Some(f(&none, "drops")),
                "{none}"
            );
        }
        // DCQCN on the lossy fabric holds the steady queue below Kmax up
        // to 16:1 (beyond, the ConnectX defaults do not hold it: see
        // docs/lab.md), and far below: at what it measured.
        if let Some(&(_, measured)) = INCAST_DCQCN_QUEUE_P99.iter().find(|m| m.0 == n) {
            assert!(q2(&dcqcn) < KMAX, "{dcqcn}");
            assert!(
                q2(&dcqcn) <= at_most_25_percent_above(measured),
                "queue p99 {} B, measured {measured} B\n{dcqcn}",
                q2(&dcqcn)
            );
            assert!(q2(&dcqcn) < 0.3 * q2(&none), "{dcqcn}\n{none}");
            assert!(f(&dcqcn, "long_goodput_bps") > 95e9, "{dcqcn}");
            assert!(f(&dcqcn, "long_jain") > 0.95, "{dcqcn}");
        }
        // PFC alone: lossless, full and fair, but each sender parks its
        // XOFF's worth in the queue, which grows with N.
        assert_eq!(f(&pfc, "drops"), 0.0, "{pfc}");
        assert!(f(&pfc, "pfc_frames") > 0.0, "{pfc}");
        assert!(f(&pfc, "long_goodput_bps") > 95e9, "{pfc}");
        assert!(f(&pfc, "long_jain") > 0.99, "{pfc}");
        // DCQCN with PFC: nothing lost (the CNPs' priority has its
        // reserve in the switch buffer), the link full, and a queue well
        // below PFC alone's.
        assert_eq!(f(&both, "drops"), 0.0, "{both}");
        assert!(f(&both, "long_goodput_bps") > 95e9, "{both}");
        if n >= 4 {
            assert!(q2(&both) < 0.7 * q2(&pfc), "{both}\n{pfc}");
        }
    }
    // PFC alone's queue grows in proportion to the number of senders: it
    // doubles with them (measured p99, second half: 88 348, 179 752,
    // 429 072, 918 448, 1 914 032, 3 905 830 B for 2 to 64 senders, each
    // from 2.03 to 2.39 times the one before).
    let q = |n: usize| {
        f(
            &run(&out, &format!("pfc-senders={n}"))["queue_second_half"],
            "p99",
        )
    };
    for n in [2, 4, 8, 16, 32] {
        assert!(q(2 * n) > 1.6 * q(n), "{n}: {} {}", q(n), q(2 * n));
    }
    for file in ["summary.txt", "summary.csv", "summary.json", "fct.csv"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    if font_installed() {
        assert!(out.join("sweep-queue-p99-2nd-half.png").is_file());
        assert!(out.join("dcqcn-senders=16/queue.png").is_file());
        assert!(out.join("dcqcn-senders=16/rates.png").is_file());
    }
}

#[test]
fn b_ecn_below_the_pfc_threshold_keeps_pauses_near_zero() {
    let (_tmp, out) = lab("ecn-vs-pfc");
    let below = run(&out, "ecn-below");
    let above = run(&out, "ecn-above");
    // Measured: 2228 PFC frames and 36.3 ms paused above, 20 frames and
    // 155 µs below.
    assert!(
        f(&above, "pfc_frames") >= at_least_25_percent_below(2228.0),
        "{above}"
    );
    assert!(
        f(&above, "paused_ns") >= at_least_25_percent_below(36_339_298.0),
        "{above}"
    );
    assert!(
        f(&below, "pfc_frames") <= at_most_25_percent_above(20.0),
        "{below}"
    );
    assert!(
        f(&below, "paused_ns") <= at_most_25_percent_above(155_202.0),
        "{below}"
    );
    assert!(
        f(&below, "pfc_frames") < 0.05 * f(&above, "pfc_frames"),
        "{below}\n{above}"
    );
    // Marking above what PFC allows never fires: PFC alone holds the line.
    assert_eq!(f(&above, "ecn_marked"), 0.0, "{above}");
    assert!(f(&below, "cnp_handled") > 0.0, "{below}");
    for v in [&below, &above] {
        assert_eq!(f(v, "drops"), 0.0, "{v}");
        assert!(f(v, "long_goodput_bps") > 90e9, "{v}");
    }
}

#[test]
fn c_pfc_alone_costs_the_victim_flow_its_throughput() {
    let (_tmp, out) = lab("victim");
    let alone = goodput_of(&out, "alone", "victim");
    let pfc = goodput_of(&out, "pfc-only", "victim");
    let dcqcn = goodput_of(&out, "dcqcn", "victim");
    eprintln!("victim goodput: alone {alone:e}, pfc-only {pfc:e}, dcqcn {dcqcn:e}");
    // Measured (second half): alone 98.56 Gb/s, pfc-only 13.06 Gb/s,
    // dcqcn 29.18 Gb/s.
    assert!(alone > 95e9, "{alone}");
    // Paused with the incast on the shared link: an incast sender's share.
    assert!(pfc < 0.2 * alone, "{pfc} vs {alone}");
    assert!(dcqcn > 2.0 * pfc, "{dcqcn} vs {pfc}");
    let p = run(&out, "pfc-only");
    assert!(f(&p, "pfc_frames") > 0.0, "{p}");
    assert!(
        p["hot_port"].as_str().unwrap_or("").starts_with("s0:"),
        "{p}"
    );
    let d = run(&out, "dcqcn");
    assert!(f(&d, "pfc_frames") < 0.1 * f(&p, "pfc_frames"), "{d}\n{p}");
    // Measured: 96 PFC frames with DCQCN, 2382 without.
    assert!(f(&d, "pfc_frames") <= at_most_25_percent_above(96.0), "{d}");
}

#[test]
fn d_a_cyclic_buffer_dependency_deadlocks_under_pfc_and_is_reported() {
    let (_tmp, out) = lab("deadlock");
    let pfc = run(&out, "pfc");
    let lossy = run(&out, "lossy");
    let dl = pfc["deadlocks"].as_array().expect("a list");
    assert_eq!(dl.len(), 1, "{pfc}");
    let text = dl[0].as_str().unwrap_or("");
    for hop in ["s0:", "s1:", "s2:", "PFC deadlock at"] {
        assert!(text.contains(hop), "{text}");
    }
    assert!(!pfc["drained"].as_bool().unwrap_or(true), "{pfc}");
    assert!(pfc["stopped"].as_str().unwrap_or("").contains("deadlock"));
    assert_eq!(lossy["deadlocks"].as_array().map(Vec::len), Some(0));
    assert!(lossy["drained"].as_bool().unwrap_or(false), "{lossy}");
    let summary = std::fs::read_to_string(out.join("summary.txt")).expect("summary.txt");
    assert!(summary.contains("deadlocks"), "{summary}");
}

#[test]
fn e_ecn_thresholds_trade_short_flow_against_long_flow_completion() {
    let (_tmp, out) = lab("dcqcn-sweep");
    // p50 slowdown of a size bucket.
    let p50 = |r: &str, bucket: &str| {
        let v = run(&out, r);
        let b = fct_bucket(&v, bucket);
        assert!(b["count"].as_u64().unwrap_or(0) >= 10, "{v}");
        f(b, "p50")
    };
    for r in [
        "cx",
        "paper",
        "cx-low-k",
        "cx-high-k",
        "cx-kept",
        "cx-alpha1024",
        "cx-grid",
    ] {
        let v = run(&out, r);
        assert_eq!(v["flows_completed"], v["flows"], "{v}");
        assert_eq!(f(&v, "drops_headroom"), 0.0, "{v}");
    }
    // Low thresholds keep queues short: short flows finish sooner...
    assert!(p50("cx-low-k", "<=10KB") < p50("cx", "<=10KB"));
    assert!(p50("cx", "<=10KB") < p50("cx-high-k", "<=10KB"));
    // ...and cut long flows' rates more: they finish later.
    assert!(p50("cx-high-k", "1-10MB") < p50("cx-low-k", "1-10MB"));
    // α in 1/1024ths wears a small α away: cuts fade and queues grow
    // (measured: bottleneck queue p50 1511 KB against 138 KB).
    let q50 = |r: &str| f(&run(&out, r)["queue"], "p50");
    assert!(q50("cx-alpha1024") > 4.0 * q50("cx"));
    assert!(p50("cx", "<=10KB") < p50("cx-alpha1024", "<=10KB"));
    if font_installed() {
        assert!(out.join("fct-p99.png").is_file());
    }
}

/// A flow's second-half goodput, bits/s, by flow id.
fn flow_goodputs(out: &Path, run: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(out.join(run).join("flows.csv")).expect("flows.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let g = header
        .iter()
        .position(|h| *h == "goodput_second_half_bps")
        .expect("goodput column");
    lines
        .map(|l| {
            l.split(',')
                .nth(g)
                .unwrap_or("")
                .parse::<f64>()
                .unwrap_or(0.0)
        })
        .collect()
}

#[test]
fn f_patched_timely_holds_the_rtt_between_its_thresholds_and_is_fair_the_original_is_not() {
    let (_tmp, out) = lab("timely-rtt");
    let patched = run(&out, "patched");
    let original = run(&out, "original");
    assert_eq!(patched["cc"], "timely", "{patched}");
    assert_eq!(original["cc"], "timely-original", "{original}");
    for v in [&patched, &original] {
        assert_eq!(f(v, "drops"), 0.0, "{v}");
        assert_eq!(v["flows_completed"], v["flows"], "{v}");
        assert!(f(v, "long_goodput_bps") > 95e9, "{v}");
    }
    // Patched: every RTT sample of the second half between T_low (50 us)
    // and T_high (500 us); measured p1 92.9 us, p50 100.3 us, max 111.6 us.
    let rtt = &patched["rtt_second_half"];
    assert!(f(rtt, "samples") > 1000.0, "{rtt}");
    assert!(f(rtt, "p1") > 50_000.0, "{rtt}");
    assert!(f(rtt, "max") < 500_000.0, "{rtt}");
    assert!(
        f(rtt, "p50") <= at_most_25_percent_above(100_277.0),
        "{rtt}"
    );
    // Fair (measured 0.998): every flow within 20% of the mean.
    assert!(f(&patched, "long_jain") > 0.99, "{patched}");
    let g = flow_goodputs(&out, "patched");
    let mean = g.iter().sum::<f64>() / g.len() as f64;
    assert!(g.iter().all(|x| (x / mean - 1.0).abs() < 0.2), "{g:?}");
    // The original: the flows that came last take most of the link
    // (measured Jain 0.288; flow 7 59.5 Gb/s, flows 0 to 5 1.9 to
    // 3.3 Gb/s).
    assert!(
        f(&original, "long_jain") <= at_most_25_percent_above(0.288),
        "{original}"
    );
    let g = flow_goodputs(&out, "original");
    assert!(g[7] > 10.0 * g[0], "{g:?}");
    if font_installed() {
        assert!(out.join("patched/rtt.png").is_file());
        assert!(out.join("original/rates.png").is_file());
    }
}

#[test]
fn g_hpcc_keeps_the_queue_near_zero_where_dcqcn_holds_one() {
    let (_tmp, out) = lab("hpcc");
    let hpcc = run(&out, "hpcc");
    let dcqcn = run(&out, "dcqcn");
    let q2 = |v: &Value, p: &str| f(&v["queue_second_half"], p);
    // Measured (second half): HPCC p50 8.4 KB, p99 23.7 KB at 91.1%
    // utilisation; DCQCN p50 85.7 KB, p99 233.8 KB at 99.3%.
    assert!(
        q2(&hpcc, "p99") <= at_most_25_percent_above(25_188.0),
        "{hpcc}"
    );
    assert!(
        q2(&hpcc, "p99") < 0.2 * q2(&dcqcn, "p99"),
        "{hpcc}\n{dcqcn}"
    );
    assert!(
        q2(&hpcc, "p50") < 0.2 * q2(&dcqcn, "p50"),
        "{hpcc}\n{dcqcn}"
    );
    // HPCC aims at eta = 95% of the link.
    let u = f(&hpcc, "hot_port_utilisation");
    assert!((0.85..=0.96).contains(&u), "{hpcc}");
    assert!(f(&dcqcn, "hot_port_utilisation") > 0.95, "{dcqcn}");
    assert_eq!(f(&hpcc, "drops"), 0.0, "{hpcc}");
    assert!(f(&hpcc, "long_jain") > 0.95, "{hpcc}");
    assert!(hpcc["rtt_second_half"]["p99"].as_f64().is_some(), "{hpcc}");

    // Across a leaf-spine (three switch hops, each stamping its INT
    // record) under web-search traffic: the queue stays low too.
    let (_tmp, out) = lab("hpcc-websearch");
    let hpcc = run(&out, "hpcc");
    let dcqcn = run(&out, "dcqcn");
    // Measured: hot queue p50 4.2 KB against 138.3 KB; p99 219 KB
    // against 1775 KB.
    let q = |v: &Value, p: &str| f(&v["queue"], p);
    assert!(
        q(&hpcc, "p50") <= at_most_25_percent_above(4198.0),
        "{hpcc}"
    );
    assert!(q(&hpcc, "p50") < 0.1 * q(&dcqcn, "p50"), "{hpcc}\n{dcqcn}");
    assert!(q(&hpcc, "p99") < 0.2 * q(&dcqcn, "p99"), "{hpcc}\n{dcqcn}");
    assert_eq!(dcqcn["flows_completed"], dcqcn["flows"], "{dcqcn}");
    assert_eq!(hpcc["flows_completed"], hpcc["flows"], "{hpcc}");
    assert_eq!(f(&hpcc, "drops"), 0.0, "{hpcc}");
    let p50 = |v: &Value| f(fct_bucket(v, "<=10KB"), "p50");
    // Short flows wait behind no queue: p50 slowdown 1.38 against 3.18.
    assert!(p50(&hpcc) < 0.6 * p50(&dcqcn), "{hpcc}\n{dcqcn}");
    if font_installed() {
        assert!(out.join("fct-p99.png").is_file());
    }
}

/// (h) Swift's RTT settles just above its target at 4:1 and at 16:1, the
/// target (and so the RTT) higher with more flows (the flow term), the
/// link full and fair. Measured (second half): RTT p50 31.1 µs and
/// 37.5 µs against targets of about 30.6 and 36.1 µs; utilisation 99.8%,
/// Jain 1.000; the queue under 0.5 MB (the 16:1 start drops, as the
/// windows start at 256 packets).
#[test]
fn h_swift_holds_the_rtt_near_a_target_that_grows_with_the_flows() {
    let (_tmp, out) = lab("swift");
    let four = run(&out, "4-to-1");
    let sixteen = run(&out, "16-to-1");
    let rtt = |v: &Value| f(&v["rtt_second_half"], "p50") / 1000.0;
    let (r4, r16) = (rtt(&four), rtt(&sixteen));
    assert!((26.0..40.0).contains(&r4), "{four}");
    assert!((30.0..45.0).contains(&r16), "{sixteen}");
    assert!(
        r16 > r4 + 3.0,
        "more flows, a higher target\n{four}\n{sixteen}"
    );
    for v in [&four, &sixteen] {
        assert!(f(v, "hot_port_utilisation") > 0.95, "{v}");
        assert!(f(v, "long_jain") > 0.99, "{v}");
        // The queue holds well under the 6.4 MB buffer: nothing drops
        // once the windows have come down.
        assert!(f(&v["queue_second_half"], "max") < 1_000_000.0, "{v}");
    }
    assert_eq!(f(&four, "drops"), 0.0, "{four}");
}

// Sweeps across cores and machines: `--jobs`, `--list-runs`, `--only`
// and `--merge` give the same results folder, byte for byte, as one
// thread does; only the timing files differ.

/// The example experiment (6 runs, well under a second each).
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/lab/example.toml")
}

/// `ferroce lab FILE ARGS...`, its output.
fn ferroce_lab(file: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .arg("lab")
        .arg(file)
        .args(args)
        .output()
        .expect("ferroce runs")
}

/// `ferroce lab FILE ARGS...`, which must succeed; its stdout.
fn lab_ok(file: &Path, args: &[&str]) -> String {
    let o = ferroce_lab(file, args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "ferroce lab {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// `ferroce lab FILE ARGS...`, which must fail with exit code 2; its stderr.
fn lab_err(file: &Path, args: &[&str]) -> String {
    let o = ferroce_lab(file, args);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "ferroce lab {args:?}: {stderr}");
    stderr
}

/// The files that may differ from one invocation to the next.
const TIMING_FILES: [&str; 2] = ["timing.json", "timing.txt"];

/// Every file under `dir`, recursively, but the timing files: path
/// relative to `dir`, and bytes.
fn files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("a folder entry").path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if !TIMING_FILES.iter().any(|t| p.ends_with(t)) {
                let bytes = std::fs::read(&p).expect("a file");
                out.insert(p.strip_prefix(root).expect("inside").to_path_buf(), bytes);
            }
        }
    }
    let mut out = Default::default();
    walk(dir, dir, &mut out);
    out
}

/// The two folders hold the same files, byte for byte, timing files aside.
fn assert_same_folders(a: &Path, b: &Path) {
    let (fa, fb) = (files(a), files(b));
    let names =
        |f: &std::collections::BTreeMap<PathBuf, Vec<u8>>| f.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&fa),
        names(&fb),
        "{} and {}",
        a.display(),
        b.display()
    );
    for (name, bytes) in &fa {
        assert!(
            *bytes == fb[name],
            "{} differs between {} and {}",
            name.display(),
            a.display(),
            b.display()
        );
    }
}

#[test]
fn an_experiment_split_in_three_with_only_and_merged_equals_the_local_run_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let file = example();
    let local = tmp.path().join("local");
    lab_ok(&file, &["--out", local.to_str().unwrap(), "--quiet"]);

    // One name per line, nothing else: line N is run N.
    let list = lab_ok(&file, &["--list-runs"]);
    let names: Vec<&str> = list.lines().collect();
    assert!(names.len() >= 3, "{list}");
    for n in &names {
        assert!(local.join(n).join("summary.json").is_file(), "{n}: {list}");
    }

    // Three batch jobs, each its own output folder.
    let mut parts = Vec::new();
    for j in 0..3 {
        let mine: Vec<&str> = names.iter().copied().skip(j).step_by(3).collect();
        let part = tmp.path().join(format!("part{j}"));
        let mut args = vec!["--out", part.to_str().unwrap(), "--quiet"];
        // A comma list for the first part, --only repeated for the others.
        let list = mine.join(",");
        if j == 0 {
            args.extend(["--only", &list]);
        } else {
            for n in &mine {
                args.extend(["--only", n]);
            }
        }
        lab_ok(&file, &args);
        for n in &names {
            assert_eq!(part.join(n).is_dir(), mine.contains(n), "{n} in part {j}");
        }
        // No experiment-level results from a part: they need every run.
        for f in ["summary.txt", "summary.csv", "summary.json", "fct.csv"] {
            assert!(!part.join(f).exists(), "{f} in part {j}");
        }
        parts.push(part);
    }

    let merged = tmp.path().join("merged");
    let mut args = vec!["--out", merged.to_str().unwrap(), "--quiet", "--merge"];
    args.extend(parts.iter().map(|p| p.to_str().unwrap()));
    let stdout = lab_ok(&file, &args);
    assert!(stdout.contains("results in"), "{stdout}");
    assert!(merged.join("summary.txt").is_file());
    if font_installed() {
        assert!(merged.join("fct-p99.png").is_file());
    }
    assert_same_folders(&local, &merged);
}

#[test]
fn jobs_1_and_jobs_2_give_identical_folders_but_for_the_timing_files() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let file = example();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    lab_ok(
        &file,
        &["--out", one.to_str().unwrap(), "--jobs", "1", "--quiet"],
    );
    let stdout = lab_ok(
        &file,
        &["--out", two.to_str().unwrap(), "--jobs", "2", "--quiet"],
    );
    assert_same_folders(&one, &two);
    // The wall-clock figures are in the timing files (and printed), not
    // in the summaries.
    assert!(stdout.contains("on 2 threads"), "{stdout}");
    let run = std::fs::read_dir(&one)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a run folder");
    let summary = std::fs::read_to_string(run.join("summary.json")).unwrap();
    assert!(
        !summary.contains("wall") && summary.contains("\"events\""),
        "{summary}"
    );
    let timing: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("timing.json")).unwrap()).unwrap();
    assert!(f(&timing, "wall_s") > 0.0 && f(&timing, "events_per_s") > 0.0);
    for table in ["summary.txt", "summary.csv", "summary.json"] {
        let text = std::fs::read_to_string(one.join(table)).unwrap();
        assert!(!text.contains("wall"), "{table}: {text}");
    }
    assert!(std::fs::read_to_string(one.join("timing.txt"))
        .unwrap()
        .contains("wall"));
}

#[test]
fn only_an_unknown_run_is_a_clear_error_listing_the_valid_names() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let out = tmp.path().join("out");
    let file = example();
    let err = lab_err(
        &file,
        &["--only", "dcqcn-size_kb=99", "--out", out.to_str().unwrap()],
    );
    assert!(err.contains("dcqcn-size_kb=99"), "{err}");
    for name in lab_ok(&file, &["--list-runs"]).lines() {
        assert!(err.contains(name), "{name} not listed: {err}");
    }
    assert!(!out.join("dcqcn-size_kb=64").exists(), "nothing ran");
}

#[test]
fn a_merge_refuses_a_missing_run_a_duplicate_another_seed_and_another_file() {
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let file = example();
    let names = lab_ok(&file, &["--list-runs"]);
    let first = names.lines().next().expect("a run");
    let [a, b, out] = ["a", "b", "out"].map(|n| tmp.path().join(n));
    let [a_s, b_s, out_s] = [&a, &b, &out].map(|p| p.to_str().unwrap().to_string());
    for part in [&a_s, &b_s] {
        lab_ok(&file, &["--only", first, "--out", part, "--quiet"]);
    }

    // Every other run is missing, and named.
    let err = lab_err(&file, &["--merge", &a_s, "--out", &out_s]);
    assert!(err.contains("missing"), "{err}");
    for n in names.lines().skip(1) {
        assert!(err.contains(n), "{n}: {err}");
    }
    assert!(!err.contains(&format!(" {first},")), "{err}");
    // The same run in two parts.
    let err = lab_err(&file, &["--merge", &a_s, &b_s, "--out", &out_s]);
    assert!(err.contains(first) && err.contains("two parts"), "{err}");
    // Another seed than the parts'.
    let err = lab_err(&file, &["--merge", &a_s, "--seed", "8", "--out", &out_s]);
    assert!(err.contains("seed 7") && err.contains("expects 8"), "{err}");
    assert!(err.contains("run.json"), "names the file: {err}");
    // Another experiment file: the same with one more line.
    let other = tmp.path().join("example.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&other, text + "\n# another line\n").unwrap();
    std::fs::copy(
        file.with_file_name("websearch.csv"),
        tmp.path().join("websearch.csv"),
    )
    .unwrap();
    let err = lab_err(&other, &["--merge", &a_s, "--out", &out_s]);
    assert!(err.contains("another experiment file"), "{err}");
    assert!(err.contains(&a_s), "names the part: {err}");
    // Nothing was written by the refused merges.
    assert!(!out.join("summary.txt").exists());
}

/// The first all-reduce of a run's summary (`collectives[0]`).
fn collective(v: &Value) -> &Value {
    &v["collectives"][0]
}

/// A run's first all-reduce: its median time over the completed
/// repetitions, ns.
fn collective_p50(v: &Value) -> f64 {
    f(&collective(v)["time"], "p50_ns")
}

/// (i) A ring all-reduce across two zones joined by 1 ms links, 3 times
/// back to back, with web-search traffic in each pod and a 2:1 incast of
/// long flows across the zones; PFC with headroom sized for the long link.
/// Measured (collective p50, against 9.94 ms on an idle fabric): DCQCN
/// 16.79 ms, TIMELY 12.91, DCTCP 14.68, HPCC and Swift with their own
/// base RTT and target 16.60 and 15.05, PFC alone 21.02; HPCC with its
/// 13 us base RTT completes none and Swift with its 25 us target two (at
/// 34.74 ms); 8 WRITEs in flight 30.21 ms; a 1.05 ms ACK timeout 23.48 ms
/// with 170 timeouts; 100 KB of headroom drops 6,338 lossless frames and
/// completes one repetition of three. docs/lab.md's table of (i) is this
/// run's, figure for figure.
#[test]
fn i_across_two_zones_the_allreduce_needs_window_timeout_and_headroom_sized_for_the_long_link() {
    let (_tmp, out) = lab("cross-az");
    let get = |name: &str| run(&out, name);
    let dcqcn = get("dcqcn");
    let ideal = f(collective(&dcqcn), "ideal_ns");
    // On an idle fabric: three of the six steps on a repetition's
    // critical path cross the zones (2 ms of round trip and 2 MB at
    // 25 Gb/s: 2.66 ms each), three stay in a pod (0.66 ms).
    assert!((9.0e6..11.0e6).contains(&ideal), "{dcqcn}");
    // The rate controls that cope (and PFC alone) complete every
    // repetition, within 25% of what they measured, and lose nothing.
    for (name, measured) in [
        ("dcqcn", 16_790_000.0),
        ("timely", 12_910_000.0),
        ("dctcp", 14_680_000.0),
        ("hpcc-wan", 16_600_000.0),
        ("swift-wan", 15_050_000.0),
        ("none", 21_020_000.0),
    ] {
        let v = get(name);
        let c = collective(&v);
        assert_eq!(
            (c["repetitions"].as_u64(), c["completed"].as_u64()),
            (Some(3), Some(3)),
            "{v}"
        );
        let p50 = collective_p50(&v);
        assert!(p50 >= ideal, "{v}");
        assert!(
            p50 <= at_most_25_percent_above(measured),
            "{name}: {p50}\n{v}"
        );
        assert!(
            p50 >= at_least_25_percent_below(measured),
            "{name}: {p50}\n{v}"
        );
        assert_eq!(f(&v, "drops"), 0.0, "{v}");
        assert_eq!(f(&v, "ack_timeouts"), 0.0, "{v}");
    }
    // PFC alone is lossless with headroom for the long link, and slower
    // than DCQCN, which pauses less.
    let none = get("none");
    assert!(f(&none, "pfc_frames") > 0.0, "{none}");
    assert!(
        collective_p50(&none) > 1.1 * collective_p50(&dcqcn),
        "{none}\n{dcqcn}"
    );
    assert!(
        f(&none, "paused_ns") > 2.0 * f(&dcqcn, "paused_ns"),
        "{none}\n{dcqcn}"
    );
    // Headroom sized for a link in a pod drops lossless frames (past
    // XOFF + headroom) and the collective falls behind.
    let short = get("headroom-short");
    assert!(f(&short, "drops_headroom") > 1000.0, "{short}");
    assert_eq!(f(&short, "drops"), f(&short, "drops_headroom"), "{short}");
    assert!(f(&short, "retransmitted_pkts") > 0.0, "{short}");
    assert!(
        collective(&short)["completed"].as_u64() < Some(3),
        "{short}"
    );
    // A base RTT or target delay for a data centre: HPCC's window (13 us
    // of its rate) and Swift's (cut while the RTT is 15 times its target
    // or more) hold the flows across the zones to a crawl.
    let hpcc = get("hpcc");
    assert_eq!(collective(&hpcc)["completed"].as_u64(), Some(0), "{hpcc}");
    let swift = get("swift");
    assert!(
        collective(&swift)["completed"].as_u64() < Some(3),
        "{swift}"
    );
    assert!(
        collective_p50(&swift) > 1.8 * collective_p50(&dcqcn),
        "{swift}"
    );
    // The transport's window below the long path's BDP, and an ACK
    // timeout below its RTT.
    let w8 = get("window-8");
    assert!(collective_p50(&w8) > 1.5 * collective_p50(&dcqcn), "{w8}");
    let t8 = get("timeout-8");
    assert!(f(&t8, "ack_timeouts") > 50.0, "{t8}");
    assert!(collective_p50(&t8) > 1.2 * collective_p50(&dcqcn), "{t8}");
    // TIMELY finishes the collective first: a 2 MB step is sent before
    // the first RTT sample returns. The long flows across the zones,
    // whose RTT stays above T_high, it throttles to nearly nothing.
    let timely = get("timely");
    for name in ["dcqcn", "dctcp", "hpcc-wan", "swift-wan", "none"] {
        assert!(
            collective_p50(&timely) < collective_p50(&get(name)),
            "{name}"
        );
    }
    assert!(goodput_of(&out, "timely", "incast") < 0.1e9, "{timely}");
    assert!(goodput_of(&out, "dcqcn", "incast") > 5e9, "{dcqcn}");
    // Step by step: 6 steps x 3 repetitions, and the summary's columns.
    let csv = std::fs::read_to_string(out.join("dcqcn/collectives.csv")).expect("collectives.csv");
    assert_eq!(csv.lines().count(), 1 + 6 * 3, "{csv}");
    assert!(
        csv.starts_with("collective,tag,repetition,step,start_ns,end_ns"),
        "{csv}"
    );
    let table = std::fs::read_to_string(out.join("summary.txt")).expect("summary.txt");
    assert!(table.contains("collective p50 (ms)"), "{table}");
    if font_installed() {
        assert!(out.join("collective-steps.png").is_file());
    }
    i_table_is_this_runs(&out);
}

/// The rows of a run's `flows.csv`, each as column name -> value.
fn flow_rows(out: &Path, run: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(out.join(run).join("flows.csv")).expect("flows.csv");
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .expect("a header")
        .split(',')
        .map(String::from)
        .collect();
    lines
        .map(|l| {
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(String::from))
                .collect()
        })
        .collect()
}

/// The HPCC simulator's input formats run as they are: a topology file
/// (`kind = "hpcc"`) and a flow list (`kind = "flow-file"`), both in
/// configs/lab/hpcc-format/. Every flow of the list runs once, from the
/// host and at the time its line gives, and completes.
#[test]
fn hpcc_simulator_files_run_and_every_flow_of_the_flow_list_completes() {
    let (_tmp, out) = lab("hpcc-files");
    let s = run(&out, "hpcc-files");
    let list = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/lab/hpcc-format/flow.txt"),
    )
    .expect("flow.txt");
    let mut lines = list.lines().filter(|l| !l.trim().is_empty());
    let count: usize = lines
        .next()
        .expect("a count")
        .trim()
        .parse()
        .expect("a count");
    // src, dst, bytes, start_ns; the topology's hosts n0..n7 are node
    // ids 0..7, and host indices 0..7.
    let mut want: Vec<(String, String, String, String)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ns = (f[5].parse::<f64>().expect("seconds") * 1e9).round() as u64;
            (f[0].into(), f[1].into(), f[4].into(), ns.to_string())
        })
        .collect();
    assert_eq!(want.len(), count);
    assert_eq!(f(&s, "flows"), count as f64, "{s}");
    assert_eq!(f(&s, "flows_completed"), count as f64, "{s}");
    let rows = flow_rows(&out, "hpcc-files");
    let mut got: Vec<(String, String, String, String)> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["bytes_completed"], r["bytes"], "{r:?}");
            assert!(!r["fct_ns"].is_empty(), "{r:?}");
            (
                r["src"].clone(),
                r["dst"].clone(),
                r["bytes"].clone(),
                r["start_ns"].clone(),
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(f(&s, "drops"), 0.0, "{s}");
}

/// A k = 4 fat tree routes between every pair of pods (the all-to-all
/// crosses the core from h0 in pod 0 to h15 in pod 3), and Poisson
/// incasts run beside it; every flow completes.
#[test]
fn a_fat_tree_routes_from_the_first_pod_to_the_last_and_poisson_incasts_complete() {
    let (_tmp, out) = lab("fat-tree");
    let s = run(&out, "fat-tree");
    assert_eq!(s["flows_completed"], s["flows"], "{s}");
    let rows = flow_rows(&out, "fat-tree");
    let done = |r: &std::collections::BTreeMap<String, String>| {
        !r["fct_ns"].is_empty() && r["bytes_completed"] == r["bytes"]
    };
    assert!(rows.iter().all(done));
    let a2a = rows.iter().filter(|r| r["tag"] == "all-to-all").count();
    assert_eq!(a2a, 16 * 15);
    assert!(rows
        .iter()
        .any(|r| r["tag"] == "all-to-all" && r["src"] == "0" && r["dst"] == "15"));
    // 5% of 16 x 100 Gb/s in 300 KB incasts over 500 us: about 17.
    let incast = rows.iter().filter(|r| r["tag"] == "incast").count();
    assert!(incast >= 6 * 5 && incast % 6 == 0, "{incast}");
}

/// (k)'s figures of one run from flows.csv: mean FCT (ns), p99 FCT (ns),
/// mean slowdown and p99 slowdown over every completed flow.
fn fct_figures(out: &Path, run: &str) -> (f64, f64, f64, f64) {
    let rows = flow_rows(out, run);
    let mut fct: Vec<f64> = Vec::new();
    let mut slow: Vec<f64> = Vec::new();
    for r in &rows {
        let f: f64 = r["fct_ns"].parse().expect("every flow completed");
        let ideal: f64 = r["ideal_fct_ns"].parse().unwrap();
        fct.push(f);
        slow.push(f / ideal.max(1.0));
    }
    let n = fct.len() as f64;
    let mean = fct.iter().sum::<f64>() / n;
    let mean_slow = slow.iter().sum::<f64>() / n;
    let p99 = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[((v.len() * 99) / 100).saturating_sub(1)]
    };
    (mean, p99(&mut fct), mean_slow, p99(&mut slow))
}

/// Experiment (k), IRN §4.2 without a rate control: selective repeat
/// without PFC beats go-back-N with it, go-back-N without PFC falls far
/// behind on shallow buffers, and the resends per drop; docs/lab.md's
/// table of (k) is this run's, figure for figure (seed 1).
#[test]
fn k_selective_repeat_without_pfc_beats_go_back_n_with_it() {
    let (_tmp, out) = lab("irn");
    let runs = [
        "roce-pfc-nocc",
        "irn-nocc",
        "roce-nocc",
        "irn-nocc-shallow",
        "roce-nocc-shallow",
        "roce-pfc",
        "irn",
        "roce",
    ];
    for r in runs {
        let v = run(&out, r);
        assert_eq!(v["flows_completed"], v["flows"], "{v}");
        assert_eq!(f(&v, "completion_errors"), 0.0, "{v}");
        if r.contains("pfc") {
            assert_eq!(f(&v, "drops"), 0.0, "{v}");
        }
    }
    let (pfc, irn) = (
        fct_figures(&out, "roce-pfc-nocc"),
        fct_figures(&out, "irn-nocc"),
    );
    assert!(
        irn.0 < pfc.0,
        "mean FCT: irn {irn:?}, roce with PFC {pfc:?}"
    );
    assert!(irn.1 < pfc.1, "p99 FCT: irn {irn:?}, roce with PFC {pfc:?}");
    assert!(
        irn.2 < pfc.2,
        "mean slowdown: irn {irn:?}, roce with PFC {pfc:?}"
    );
    let (irn_s, roce_s) = (
        fct_figures(&out, "irn-nocc-shallow"),
        fct_figures(&out, "roce-nocc-shallow"),
    );
    assert!(
        roce_s.2 > 1.5 * irn_s.2,
        "shallow: irn {irn_s:?}, roce {roce_s:?}"
    );
    assert!(
        roce_s.1 > 1.3 * irn_s.1,
        "shallow: irn {irn_s:?}, roce {roce_s:?}"
    );
    // Resent packets per drop.
    let per_drop = |r: &str| {
        let v = run(&out, r);
        f(&v, "retransmitted_pkts") / f(&v, "drops").max(1.0)
    };
    for r in ["irn-nocc", "irn-nocc-shallow"] {
        assert!(per_drop(r) <= 1.5, "{r}: {}", per_drop(r));
    }
    for r in ["roce-nocc", "roce-nocc-shallow"] {
        assert!(per_drop(r) >= 3.0, "{r}: {}", per_drop(r));
    }
    if font_installed() {
        assert!(out.join("fct-p99.png").is_file());
    }
    k_table_is_this_runs(&out);
}

/// The lab leaves the ICRC and the placing of WRITE payloads to the NICs
/// by default; `--full-checks` does both in software. Nothing on the
/// simulated wire depends on either (switches rewrite only what the ICRC
/// does not cover, and no one reads the memory written), so the leaf-spine
/// under web-search traffic, INT trailers and PFC included, gives the same
/// results either way: the run's summary and every CSV, byte for byte
/// (wall-clock figures are in the timing files only).
#[test]
fn icrc_offload_and_unplaced_writes_change_no_result() {
    let (_a, offloaded) = lab("hpcc-websearch");
    let (_b, full) = lab_with("hpcc-websearch", &["--full-checks"]);
    for name in ["hpcc", "dcqcn"] {
        for file in [
            "summary.json",
            "flows.csv",
            "queue.csv",
            "rates.csv",
            "signals.csv",
        ] {
            let read = |d: &Path| std::fs::read(d.join(name).join(file)).expect(file);
            assert!(read(&offloaded) == read(&full), "{name}/{file} differs");
        }
    }
}

/// (j) hpcc-vs-dcqcn: the HPCC paper's comparison (SIGCOMM'19 section
/// 5.3) on its fat-tree shape scaled to 32 hosts, web search at 30% and
/// 50% load with Poisson incasts, every rate control. Incasts arrive in
/// every run, and every flow that started completes under every rate
/// control; HPCC's p95 slowdown of flows up to 10 KB is under half
/// DCQCN's at both loads (the paper's Figures 11 and 12), its bottleneck
/// queue p99 under 0.4 of DCQCN's (0.24 and 0.30 measured), and it sends
/// no PFC frame where DCQCN's incasts reach PFC's threshold. docs/lab.md's
/// table of (j) is this run's, figure for figure.
#[test]
fn j_hpcc_cuts_short_flows_tail_slowdown_and_queues_below_dcqcns() {
    let (_t, out) = lab("hpcc-vs-dcqcn");
    let short_p95 = |v: &Value| {
        let b = fct_bucket(v, "<=10KB");
        assert!(f(b, "count") >= 100.0, "{b}");
        f(b, "p95")
    };
    for cc in ["dcqcn", "dcqcn-paper", "timely", "dctcp", "hpcc", "swift"] {
        for load in ["0.3", "0.5"] {
            let v = run(&out, &format!("{cc}-load={load}"));
            let incast_flows = flow_rows(&out, &format!("{cc}-load={load}"))
                .iter()
                .filter(|r| r["tag"] == "incast")
                .count();
            assert!(
                incast_flows >= 16,
                "{cc} {load}: {incast_flows} incast flows"
            );
            assert_eq!(v["drained"], true, "{cc} {load}");
            assert_eq!(f(&v, "completion_errors"), 0.0, "{cc} {load}");
            assert_eq!(
                f(&v, "flows_completed"),
                f(&v, "flows_started"),
                "{cc} {load}"
            );
        }
    }
    for load in ["0.3", "0.5"] {
        let hpcc = run(&out, &format!("hpcc-load={load}"));
        let dcqcn = run(&out, &format!("dcqcn-load={load}"));
        let (h, d) = (short_p95(&hpcc), short_p95(&dcqcn));
        assert!(
            h < 0.5 * d,
            "load {load}: <=10KB p95 slowdown hpcc {h} dcqcn {d}"
        );
        let (hq, dq) = (f(&hpcc["queue"], "p99"), f(&dcqcn["queue"], "p99"));
        assert!(hq < 0.4 * dq, "load {load}: queue p99 hpcc {hq} dcqcn {dq}");
        assert_eq!(f(&hpcc, "pfc_frames"), 0.0, "load {load}");
        assert!(f(&dcqcn, "pfc_frames") > 0.0, "load {load}");
    }
    assert!(out.join("fct-hpcc.csv").is_file());
    j_table_is_this_runs(&out);
}

// ----- docs/lab.md's tables are these runs' -----

/// The table of (i) in `docs/lab.md` is this run's, figure for figure.
fn i_table_is_this_runs(out: &Path) {
    let rows = doc_tables::table("docs/lab.md", "ferroce lab configs/lab/cross-az.toml --out");
    assert_eq!(rows.len(), 11, "{rows:?}");
    let ms = |x: f64| x / 1e6;
    for row in &rows {
        let v = run(out, &row[0]);
        let c = collective(&v);
        let (time, step) = (&c["time"], &c["step_time"]);
        let done = f(c, "completed");
        let collective_time = match done as u64 {
            0 => Cell::Blank,
            1 => one(ms(f(time, "p50_ns"))),
            _ => Cell::Nums(vec![ms(f(time, "p50_ns")), ms(f(time, "p99_ns"))]),
        };
        let slowdown = match done as u64 {
            0 => Cell::Blank,
            _ => one(f(time, "slowdown_p50")),
        };
        let steps = if step.is_null() {
            Cell::Blank
        } else {
            Cell::Nums(vec![ms(f(step, "p50_ns")), ms(f(step, "p99_ns"))])
        };
        let drops = match f(&v, "drops") {
            0.0 => one(0.0),
            d => Cell::Nums(vec![d, f(&v, "drops_headroom")]),
        };
        let want = [
            Cell::Skip,
            collective_time,
            slowdown,
            steps,
            Cell::Nums(vec![done, f(c, "repetitions")]),
            drops,
            one(f(&v, "pfc_frames")),
            one(ms(f(&v, "paused_ns"))),
            one(goodput_of(out, &row[0], "incast") / 1e9),
        ];
        doc_tables::check_row("docs/lab.md", "(i)", row, &want);
    }
}

/// The table of (j) in `docs/lab.md` is this run's, figure for figure.
fn j_table_is_this_runs(out: &Path) {
    let rows = doc_tables::table("docs/lab.md", "**(j) HPCC against DCQCN");
    assert_eq!(rows.len(), 8, "{rows:?}");
    for row in &rows {
        let (cc, load) = row[0].split_once(", ").expect("'rate control, load%'");
        let load: f64 = load.trim_end_matches('%').parse().expect("a load");
        let v = run(out, &format!("{cc}-load={}", load / 100.0));
        let bucket = |name: &str, p: &str| one(f(fct_bucket(&v, name), p));
        let want = [
            bucket("<=10KB", "p50"),
            bucket("<=10KB", "p95"),
            bucket("<=10KB", "p99"),
            bucket(">10MB", "p50"),
            one(f(&v["queue"], "p99") / 1e3),
            one(f(&v, "ecn_marked")),
            one(f(&v, "pfc_frames")),
        ];
        doc_tables::check_row("docs/lab.md", "(j)", row, &want);
    }
}

/// The table of (k) in `docs/lab.md` is this run's, figure for figure.
fn k_table_is_this_runs(out: &Path) {
    let rows = doc_tables::table("docs/lab.md", "**(k) Selective repeat");
    assert_eq!(rows.len(), 8, "{rows:?}");
    for row in &rows {
        let v = run(out, &row[0]);
        let (mean, p99, slowdown, slowdown_p99) = fct_figures(out, &row[0]);
        let want = [
            one(mean / 1e3),
            one(p99 / 1e6),
            one(slowdown),
            one(slowdown_p99),
            one(f(&v, "drops")),
            one(f(&v, "retransmitted_pkts")),
            one(f(&v, "ack_timeouts")),
        ];
        doc_tables::check_row("docs/lab.md", "(k)", row, &want);
    }
}
