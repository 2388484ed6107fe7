//! `ferroce decode` as a user runs it: on the real rxe captures, on a
//! capture with a corrupted and a malformed RoCE frame, with --json, and on
//! files that are not captures.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn vectors() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    v.sort();
    v
}

fn vector(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name)
}

/// Rewrites `src` into `dst`, changing frame `n` (1-based) with `f`.
fn rewrite(src: &Path, dst: &Path, n: usize, f: impl Fn(&mut Vec<u8>)) {
    let mut r = ferroce::pcap::open(src).unwrap();
    let mut w = ferroce::pcap::create(dst, ferroce::pcap::Precision::Micro).unwrap();
    let mut i = 0;
    while let Some(rec) = r.next_record().unwrap() {
        i += 1;
        let mut data = rec.data.to_vec();
        if i == n {
            f(&mut data);
        }
        w.write(rec.ts_ns, &data).unwrap();
    }
    w.flush().unwrap();
}

#[test]
fn every_rxe_capture_decodes_clean() {
    let files = vectors();
    let mut args = vec!["decode"];
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let out = run(&args, LIMIT);
    assert!(out.ok(), "{}", out.all());
    let last = out.stdout.lines().last().unwrap();
    assert_eq!(
        last,
        "729 roce frames, 729 icrc ok, 0 icrc bad, 0 malformed"
    );
    // One "# file" header per file, and the opcodes by name.
    assert_eq!(out.stdout.matches("\n# ").count() + 1, files.len());
    for op in [
        "RC_SEND_FIRST",
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        "UC_SEND_LAST",
        "UD_SEND_ONLY",
        "RC_ACKNOWLEDGE",
    ] {
        assert!(out.stdout.contains(op), "{op}");
    }
    assert!(out.stdout.contains("aeth(nak psn-seq-err msn="));
    assert!(out.stdout.contains("deth(qkey="));
    assert!(out.stdout.contains("skipped: ARP"));
}

#[test]
fn a_bad_icrc_and_a_malformed_frame_fail_the_run() {
    let dir = TempDir::new();
    let src = vector("rc_pingpong.pcap");
    // Frame 20 of rc_pingpong is a RoCE frame; find the first one to be sure.
    let mut r = ferroce::pcap::open(&src).unwrap();
    let mut first = 0;
    let mut i = 0;
    while let Some(rec) = r.next_record().unwrap() {
        i += 1;
        if ferroce::wire::Frame::parse(rec.data).is_ok() {
            first = i;
            break;
        }
    }
    let bad = dir.path().join("bad_icrc.pcap");
    rewrite(&src, &bad, first, |d| {
        let n = d.len();
        d[n - 10] ^= 0x40;
    });
    let out = run(&["decode", bad.to_str().unwrap()], LIMIT);
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out.stdout.contains("icrc=BAD (carried"), "{}", out.stdout);
    assert!(out
        .stdout
        .ends_with("50 roce frames, 49 icrc ok, 1 icrc bad, 0 malformed\n"));

    let mal = dir.path().join("malformed.pcap");
    rewrite(&src, &mal, first, |d| {
        d[14 + 20 + 8 + 1] |= 0x03; // TVer 3
    });
    let out = run(&["decode", mal.to_str().unwrap()], LIMIT);
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(out
        .stdout
        .contains("MALFORMED: BTH transport version 3 (must be 0)"));
    assert!(out
        .stdout
        .ends_with("50 roce frames, 49 icrc ok, 0 icrc bad, 1 malformed\n"));
}

#[test]
fn json_is_one_object_per_frame_and_the_totals() {
    let f = vector("ib_write_bw_loss.pcap");
    let out = run(&["decode", "--json", f.to_str().unwrap()], LIMIT);
    assert!(out.ok(), "{}", out.all());
    let objs: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    let roce: Vec<&serde_json::Value> = objs.iter().filter(|o| o["kind"] == "roce").collect();
    assert_eq!(roce.len(), 40);
    assert!(roce.iter().all(|o| o["icrc_ok"] == true));
    let nak = roce
        .iter()
        .find(|o| o["aeth"]["kind"] == "nak")
        .expect("the NAK");
    assert_eq!(nak["aeth"]["nak"], "psn-seq-err");
    assert_eq!(nak["opcode"], "RC_ACKNOWLEDGE");
    assert!(roce.iter().any(|o| o["reth"]["dma_len"] == 4096));
    let totals = objs.last().unwrap();
    assert_eq!(totals["kind"], "totals");
    assert_eq!(totals["totals"]["roce"], 40);
    assert_eq!(totals["totals"]["icrc_bad"], 0);
}

#[test]
fn files_that_are_not_captures_are_clear_errors() {
    let dir = TempDir::new();
    let junk = dir.write("junk.pcap", "this is not a capture file at all");
    let out = run(&["decode", junk.to_str().unwrap()], LIMIT);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("junk.pcap") || out.stderr.contains("magic"));
    let out = run(&["decode", "/nonexistent/x.pcap"], LIMIT);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("/nonexistent/x.pcap"), "{}", out.stderr);
    // A capture cut mid-record: what was read is decoded, then an error.
    let src = std::fs::read(vector("ib_read_lat.pcap")).unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &src[..src.len() - 7]).unwrap();
    let out = run(&["decode", cut.to_str().unwrap()], LIMIT);
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("truncated"), "{}", out.stderr);
}

/// A pcapng (Wireshark's own format) decodes exactly like the same capture
/// as classic pcap.
#[test]
fn pcapng_decodes_like_pcap() {
    let dir = TempDir::new();
    let src = vector("ib_write_bw_loss.pcap");
    let ng = dir.path().join("loss.pcapng");
    let conv = std::process::Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(&src)
        .arg(&ng)
        .status()
        .expect("editcap (wireshark-common) is missing: run scripts/setup.sh");
    assert!(conv.success());
    let a = run(&["decode", src.to_str().unwrap()], LIMIT);
    let b = run(&["decode", ng.to_str().unwrap()], LIMIT);
    assert!(a.ok() && b.ok(), "{}\n{}", a.all(), b.all());
    assert_eq!(a.stdout, b.stdout);
}
