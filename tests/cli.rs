//! The command line's answers to bad input: a clear message, exit status 2,
//! never a panic.

mod common;
use common::*;
use std::time::Duration;

/// Runs `ferroce ARGS`, which must exit 2 saying `needle`; its PID.
fn fails_with(args: &[&str], needle: &str) -> u32 {
    let o = run(args, Duration::from_secs(30));
    assert_eq!(o.code, Some(2), "{}", o.all());
    assert!(
        o.stderr.contains(needle),
        "wanted {needle:?} in:\n{}",
        o.all()
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.all());
    o.pid
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

#[test]
fn explain_names_what_it_cannot_read() {
    let dir = TempDir::new();
    let junk = dir.write("junk.pcap", "not a capture");
    fails_with(&["explain", junk.to_str().unwrap()], "junk.pcap");
    fails_with(&["explain", "/nonexistent/x.pcap"], "/nonexistent/x.pcap");
    // A valid pcap with no frame at all.
    let empty = dir.path().join("empty.pcap");
    ferroce::pcap::create(&empty, ferroce::pcap::Precision::Micro)
        .unwrap()
        .flush()
        .unwrap();
    fails_with(
        &["explain", empty.to_str().unwrap()],
        "no RoCE RC frames in 0 frames",
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
    let pid = fails_with(
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
    let left = dpdk_dirs_left(&before, &[pid]);
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
