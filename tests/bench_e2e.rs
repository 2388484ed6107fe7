//! `ferroce bench e2e` runs (own file: the EAL runtime-directory check of
//! tests/cli.rs must not see this test's EAL come and go).

#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::time::Duration;

/// `ferroce bench e2e` with tiny counts (figures come from real runs, never
/// from tests): every row of the table is there, the QP sweep's included,
/// the cores sweep's too, the JSON form parses, and zero rounds are
/// refused.
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
        "--max-qps",
        "100",
        "--max-lcores",
        "2",
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
        "the same, zero-copy send",
        "engine 64 KiB WRITE, UDP socket backend",
        "memcpy + CRC-32",
        "send-lat 64 B SEND ping-pong, DPDK",
        "bare DPDK echo of one frame",
        "send-lat 64 B SEND ping-pong, UDP socket backend",
        "engine / UDP-backend 64 B message rate",
        "engine / bare-echo 64 B frame rate",
        "64 KiB goodput / copy+CRC-32 limit",
        "64 KiB goodput, zero-copy send / copy+CRC-32",
        "send-lat / echo round trip, p50",
        "64 B WRITEs round-robin over N QPs, DPDK",
        "100 QPs / 1 QP message rate",
        "engine bytes per QP at 100 QPs",
        "64 B WRITEs, each engine on N lcores, DPDK",
        "1 lcore, aligned",
        "2 lcores, aligned",
        "2 lcores, crossed",
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
    assert_eq!(v["ratios"].as_array().map(Vec::len), Some(4), "{v}");
    // Zero-copy send: every request packet of the 20 64 KiB WRITEs (16
    // each at MTU 4096) left from the region in place, and every byte
    // landed (the run checks the target slots); the copying run lent none.
    let r = &v["rounds"][0];
    assert_eq!(r["engine_64k_zc"]["msgs"], 20, "{v}");
    assert!(r["engine_64k_zc"]["lent"].as_u64() >= Some(20 * 16), "{v}");
    assert_eq!(r["engine_64k"]["lent"], 0, "{v}");
    assert_eq!(v["send_lat"]["samples"], 100, "{v}");
    // The sweep: 1 and 100 QPs, every WRITE done, the heap counted by the
    // binary's allocator.
    let sweep = v["qp_sweep"].as_array().expect("a sweep");
    assert_eq!(sweep.len(), 2, "{v}");
    for (pt, n) in sweep.iter().zip([1, 100]) {
        assert_eq!(pt["qps"], n, "{v}");
        assert_eq!(pt["rate"]["msgs"], 2000, "{v}");
        assert!(
            pt["engine_bytes_per_qp"].as_f64().is_some_and(|b| b > 0.0),
            "{v}"
        );
    }
    // The cores sweep: each engine on 1 and 2 lcores (a thread each),
    // every WRITE done and its bytes checked by the run; crossed, every
    // frame went through a steering ring, aligned none.
    let cores = v["cores"].as_array().expect("a cores sweep");
    assert_eq!(cores.len(), 3, "{v}");
    for (pt, (n, crossed)) in cores.iter().zip([(1, false), (2, false), (2, true)]) {
        assert_eq!(
            (&pt["lcores"], &pt["crossed"]),
            (&n.into(), &crossed.into()),
            "{v}"
        );
        assert_eq!(pt["rate"]["msgs"], 2000 * n, "{v}");
        assert_eq!(pt["rate"]["complete"], true, "{v}");
        let steered = pt["handed_on"].as_u64().unwrap_or(0);
        assert_eq!(steered > 2000, crossed, "{v}");
    }
    let o = run(
        &["bench", "e2e", "--config", cfg, "--rounds", "0"],
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(2), "{}", o.all());
    assert!(o.stderr.contains("at least 1"), "{}", o.all());
}

/// `zero_copy = true` on both ring ports: the demo's tools send their
/// SEND, WRITE and READ response payloads from the regions in place (the counters say
/// how many), every byte is still verified, and b's capture, which
/// records the chained frames whole, decodes with every ICRC right.
#[test]
fn the_demo_tools_send_in_place_with_zero_copy_ports() {
    let dir = TempDir::new();
    let pcap = dir.path().join("zc.pcap");
    let cfg = dir.write(
        "zc.toml",
        &format!(
            "[eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
             [[port]]\nname = \"a\"\ndevice = \"ring:zc\"\nip = \"198.18.0.1\"\nmtu = 9000\nzero_copy = true\n\n\
             [[port]]\nname = \"b\"\ndevice = \"ring:zc\"\nip = \"198.18.0.2\"\nmtu = 9000\nzero_copy = true\n\n\
             [rc]\nmsgs = 0\n\n\
             [tools]\nrun = true\niters = 200\nmtu = 4096\npcap = \"{}\"\n",
            pcap.display()
        ),
    );
    let o = run(
        &["demo", "--config", cfg.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert!(o.ok() && o.stdout.contains("demo OK"), "{}", o.all());
    // write-bw: 200 WRITEs of 64 KiB, 16 packets each, all from b's region.
    let wb = o
        .stdout
        .split("== write-bw")
        .nth(1)
        .expect("a write-bw section");
    assert!(wb.contains("lent_pkts=3200"), "{}", o.all());
    // read-bw: a answers 200 READs of 64 KiB from its region in place.
    let rb = o
        .stdout
        .split("== read-bw")
        .nth(1)
        .expect("a read-bw section");
    let rb = rb.split("== ").next().unwrap_or_default();
    assert!(rb.contains("lent_pkts=3200"), "{}", o.all());
    // pingpong: 200 SENDs of 4096 B each way.
    let pp = o
        .stdout
        .split("== pingpong")
        .nth(1)
        .expect("a pingpong section");
    let pp = pp.split("== ").next().unwrap_or_default();
    assert_eq!(pp.matches("lent_pkts=200").count(), 2, "{}", o.all());
    assert!(o.stdout.contains(" 0 icrc bad, 0 malformed"), "{}", o.all());
    assert!(o.stdout.contains("8191 of 8191 mbufs free"), "{}", o.all());
}
