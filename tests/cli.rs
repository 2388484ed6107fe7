//! The command line's answers to bad input: a clear message, exit status 2,
//! never a panic.

mod common;
use common::*;
use std::time::Duration;

fn fails_with(args: &[&str], needle: &str) {
    let o = run(args, Duration::from_secs(30));
    assert_eq!(o.code, Some(2), "{}", o.all());
    assert!(
        o.stderr.contains(needle),
        "wanted {needle:?} in:\n{}",
        o.all()
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.all());
}

#[test]
fn bad_configs_and_arguments_are_named() {
    let dir = TempDir::new();
    let typo = dir.write("typo.toml", "[eal]\nhugepage = \"on\"\n");
    fails_with(
        &["demo", "--config", typo.to_str().unwrap()],
        "unknown field `hugepage`",
    );
    fails_with(
        &["demo", "--config", "/nonexistent/ferroce.toml"],
        "cannot read /nonexistent/ferroce.toml",
    );
    let one_end = dir.write("ring.toml", "[[port]]\nname = \"a\"\ndevice = \"ring:x\"\n");
    fails_with(
        &["demo", "--config", one_end.to_str().unwrap()],
        "needs exactly two ports",
    );
    let ok = dir.write(
        "ok.toml",
        "[[port]]\nname = \"a\"\ndevice = \"net_null0\"\n",
    );
    fails_with(
        &[
            "linktest",
            "--config",
            ok.to_str().unwrap(),
            "--port",
            "zz",
            "--role",
            "send",
        ],
        "no port named \"zz\"",
    );
    fails_with(
        &[
            "linktest",
            "--config",
            ok.to_str().unwrap(),
            "--port",
            "a",
            "--role",
            "send",
            "--peer-mac",
            "1:2:3",
        ],
        "MAC",
    );
}

#[cfg(feature = "dpdk")]
#[test]
fn a_device_the_eal_cannot_open_is_an_error() {
    let dir = TempDir::new();
    let cfg = dir.write(
        "bad.toml",
        "[eal]\nhugepages = \"off\"\n[[port]]\nname = \"a\"\ndevice = \"net_nosuchpmd0\"\n",
    );
    let before = dpdk_runtime_dirs();
    fails_with(
        &[
            "linktest",
            "--config",
            cfg.to_str().unwrap(),
            "--port",
            "a",
            "--role",
            "send",
        ],
        "error",
    );
    // The failed EAL start leaves no runtime directory behind.
    let left: Vec<String> = dpdk_runtime_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect();
    assert!(left.is_empty(), "left behind in /var/run/dpdk: {left:?}");
}

/// `ferroce bench wire` runs (a tiny load here: figures come from real
/// runs, never from tests) and refuses empty loops.
#[test]
fn bench_wire_runs_and_checks_its_arguments() {
    let o = run(
        &["bench", "wire", "--rounds", "1", "--iters", "10"],
        Duration::from_secs(60),
    );
    assert!(o.ok(), "{}", o.all());
    assert!(o.stdout.contains("parse+icrc / crc"), "{}", o.stdout);
    assert_eq!(o.stdout.lines().count(), 4, "{}", o.stdout);
    fails_with(&["bench", "wire", "--rounds", "0"], "at least 1");
}

/// `ferroce bench e2e` with tiny counts (figures come from real runs, never
/// from tests): every row of the table is there, the JSON form parses, and
/// zero rounds are refused.
#[cfg(feature = "dpdk")]
#[test]
fn bench_e2e_prints_every_row_with_tiny_counts() {
    let dir = TempDir::new();
    let cfg = dir.write(
        "ring.toml",
        "[eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
         [[port]]\nname = \"a\"\ndevice = \"ring:e2e\"\nip = \"198.18.0.1\"\n\n\
         [[port]]\nname = \"b\"\ndevice = \"ring:e2e\"\nip = \"198.18.0.2\"\n",
    );
    let cfg = cfg.to_str().unwrap();
    let tiny = [
        "--rounds",
        "1",
        "--msgs",
        "2000",
        "--big-msgs",
        "20",
        "--lat-iters",
        "100",
        "--secs",
        "5",
    ];
    let mut args = vec!["bench", "e2e", "--config", cfg];
    args.extend(tiny);
    let o = run(&args, Duration::from_secs(60));
    assert!(o.ok(), "{}", o.all());
    for row in [
        "engine 64 B WRITE, DPDK",
        "engine 64 B WRITE, UDP socket backend",
        "bare DPDK echo, 138 B frames",
        "engine 64 KiB WRITE, DPDK, MTU 4096",
        "engine 64 KiB WRITE, UDP socket backend",
        "memcpy + CRC-32",
        "send-lat 64 B SEND ping-pong, DPDK",
        "bare DPDK echo of one frame",
        "send-lat 64 B SEND ping-pong, UDP socket backend",
        "engine / UDP-backend 64 B message rate",
        "engine / bare-echo 64 B frame rate",
        "64 KiB goodput / copy+CRC-32 limit",
        "send-lat / echo round trip, p50",
    ] {
        assert!(o.stdout.contains(row), "no row {row:?} in:\n{}", o.stdout);
    }
    assert!(!o.stdout.contains("NaN"), "{}", o.stdout);
    args.push("--json");
    let o = run(&args, Duration::from_secs(60));
    assert!(o.ok(), "{}", o.all());
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("one JSON object");
    assert_eq!(v["rounds"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["rounds"][0]["engine_64"]["msgs"], 2000, "{v}");
    assert_eq!(v["ratios"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(v["send_lat"]["samples"], 100, "{v}");
    fails_with(
        &["bench", "e2e", "--config", cfg, "--rounds", "0"],
        "at least 1",
    );
}
