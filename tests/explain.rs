//! `ferroce explain`: the story of the real rxe captures in `tests/vectors`
//! (clean runs, loss recovered by NAK 0x60, an injected PSN gap, a refused
//! RDMA WRITE, a spurious retransmission), of captures made on the
//! simulator where the fault injected is known (tail loss, retries
//! exhausted, RNR), the plot, and bad input.

mod common;
use common::*;
use ferroce::backend::fabric::LinkConfig;
use ferroce::sim::net::SimNet;
use ferroce::time::Duration as SimDuration;
use ferroce::tools::explain::{explain_file, Cause, Connection, Report, Verdict, What};
use ferroce::transport::connect::ConnectParams;
use ferroce::transport::{
    Access, CqId, DeviceConfig, MrKeys, MrSpec, Payload, QpCaps, QpCounters, RecvWr, SendOp,
    SendWr, Sge, Wc, WcStatus,
};
use ferroce::wire::MacAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn vector(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name)
}

/// The one connection of a capture.
fn only(r: &Report) -> &Connection {
    assert_eq!(r.connections.len(), 1, "{r:#?}");
    &r.connections[0]
}

fn resends(c: &Connection) -> Vec<(u32, u32, Cause)> {
    c.events
        .iter()
        .filter_map(|e| match e.what {
            What::Resend {
                psn,
                packets,
                cause,
            } => Some((psn, packets, cause)),
            _ => None,
        })
        .collect()
}

fn naks(c: &Connection) -> Vec<(u32, u8)> {
    c.events
        .iter()
        .filter_map(|e| match e.what {
            What::Nak { psn, syndrome, .. } => Some((psn, syndrome)),
            _ => None,
        })
        .collect()
}

fn gaps(c: &Connection) -> Vec<(u32, u32)> {
    c.events
        .iter()
        .filter_map(|e| match e.what {
            What::Gap { psn, missing } => Some((psn, missing)),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------- rxe

#[test]
fn clean_rxe_runs_are_clean() {
    let r = explain_file(&vector("rc_pingpong.pcap")).unwrap();
    let c = only(&r);
    assert_eq!(c.verdict, Verdict::Clean { messages: 10 });
    let ips: Vec<&str> = c.ends.iter().map(|e| e.ip.as_str()).collect();
    assert_eq!(ips, ["198.18.0.3", "198.18.0.2"]);
    assert_eq!(c.ends[0].qpn, Some(0x11));
    for s in &c.sent {
        assert_eq!(s.messages, [("SEND", 5)]);
        assert_eq!(s.request_packets, 20);
        assert_eq!(s.resent_packets, 0);
        let (first, last) = s.psns.unwrap();
        assert_eq!(last - first, 19);
        assert_eq!(s.acked, Some(last), "every request acknowledged");
    }
    assert!(c.events.is_empty(), "{:?}", c.events);
    assert_eq!(r.skipped, 13, "ARP and the TCP exchange are skipped");

    let r = explain_file(&vector("ib_write_bw.pcap")).unwrap();
    let c = only(&r);
    assert_eq!(c.verdict, Verdict::Clean { messages: 5 });
    assert_eq!(c.sent[0].messages, [("RDMA WRITE", 5)]);
    assert!(c.sent[1].messages.is_empty(), "the server only ACKs");
    // READs use a PSN per response packet: no gap between the requests.
    let r = explain_file(&vector("ib_read_bw.pcap")).unwrap();
    assert_eq!(only(&r).verdict, Verdict::Clean { messages: 5 });
}

#[test]
fn a_dropped_frame_is_a_gap_a_nak_0x60_and_go_back_n() {
    // ib_write_bw_loss: the 3rd RoCE frame from g2 (a WRITE MIDDLE, PSN
    // 0xd221ca) dropped on the bridge; g1 NAKs it, g2 goes back to it and
    // resends everything it had sent since (15 packets).
    let r = explain_file(&vector("ib_write_bw_loss.pcap")).unwrap();
    let c = only(&r);
    assert_eq!(gaps(c), [(0xd221ca, 1)]);
    assert_eq!(naks(c), [(0xd221ca, 0x60)]);
    assert_eq!(resends(c), [(0xd221ca, 15, Cause::Nak)]);
    assert_eq!(
        c.verdict,
        Verdict::Recovered {
            gaps: 1,
            seq_naks: 1,
            timeouts: 0,
            resends: 1
        }
    );
    // rc_pingpong_loss: the same for SEND, resuming with SEND MIDDLE.
    let r = explain_file(&vector("rc_pingpong_loss.pcap")).unwrap();
    let c = only(&r);
    assert_eq!(gaps(c), [(0x901bf6, 1)]);
    assert_eq!(naks(c), [(0x901bf6, 0x60)]);
    assert_eq!(resends(c), [(0x901bf6, 2, Cause::Nak)]);
    assert_eq!(c.verdict.kind(), "recovered");
    assert_eq!(c.sent[0].acked, Some(0x901c07));
}

#[test]
fn an_injected_psn_gap_is_nak_0x60_with_the_expected_psn() {
    // The host peer's first SEND skips one PSN: rxe NAKs with the PSN it
    // expected, which the peer had never sent.
    let r = explain_file(&vector("host_peer_psn_gap.pcap")).unwrap();
    let c = only(&r);
    assert_eq!(c.ends[0].ip, "198.18.0.10");
    assert_eq!(c.ends[1].qpn, Some(0x25));
    assert_eq!(naks(c), [(0xbd9bfc, 0x60)]);
    assert_eq!(gaps(c), [(0xbd9bfc, 1)]);
    assert_eq!(resends(c)[0].2, Cause::Nak);
    assert!(matches!(
        c.verdict,
        Verdict::Recovered {
            gaps: 1,
            seq_naks: 1,
            ..
        }
    ));
}

#[test]
fn a_bad_rkey_write_is_a_nak_0x61_error() {
    let r = explain_file(&vector("host_peer_bad_rkey.pcap")).unwrap();
    let c = only(&r);
    match c.verdict {
        Verdict::NakError {
            end,
            syndrome,
            psn,
            request,
        } => {
            assert_eq!(c.ends[end].ip, "198.18.0.10");
            assert_eq!(syndrome, 0x61);
            assert_eq!(psn, 0xf8800e);
            let op = request.unwrap();
            assert_eq!(op.to_string(), "RC_RDMA_WRITE_ONLY");
        }
        v => panic!("{v:?}"),
    }
    let out = run(
        &[
            "explain",
            vector("host_peer_bad_rkey.pcap").to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(
        out.stdout.contains(
            "verdict: request refused: NAK 0x61 (invalid request) to RDMA WRITE (RC_RDMA_WRITE_ONLY) at PSN 0xf8800e"
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn the_spurious_retransmission_of_ib_send_lat_is_not_loss() {
    // g1 resent PSN 0xac299d after g2's ACK of it was on the wire; g2
    // counted a duplicate_request and ACKed it again.
    let r = explain_file(&vector("ib_send_lat.pcap")).unwrap();
    let c = only(&r);
    let rs = resends(c);
    assert_eq!(rs.len(), 1, "{rs:?}");
    assert_eq!((rs[0].0, rs[0].1), (0xac299d, 1));
    assert!(matches!(rs[0].2, Cause::Spurious { acked_before_ns } if acked_before_ns > 10_000_000));
    assert!(gaps(c).is_empty() && naks(c).is_empty());
    assert_eq!(
        c.verdict,
        Verdict::Spurious {
            resends: 1,
            duplicate_acks: 1
        }
    );
    let out = run(
        &["explain", vector("ib_send_lat.pcap").to_str().unwrap()],
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("spurious"), "{}", out.stdout);
    assert!(!out.stdout.contains("loss:"), "{}", out.stdout);
}

#[test]
fn the_command_tells_the_story() {
    let out = run(
        &["explain", vector("rc_pingpong_loss.pcap").to_str().unwrap()],
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    let s = &out.stdout;
    for want in [
        "connection 1: 198.18.0.3 QP 0x000021 <-> 198.18.0.2 QP 0x000022",
        "198.18.0.3 -> 198.18.0.2: 5 SEND in 21 packets (2 resent), PSN 0x901bf4..0x901c07",
        "PSN gap: 1 request packet from 198.18.0.3 never seen from 0x901bf6",
        "198.18.0.2 sends NAK 0x60 (PSN sequence error) at PSN 0x901bf6",
        "198.18.0.3 goes back to PSN 0x901bf6 and resends 2 packets after the NAK",
        "verdict: recovered from loss: 1 gap, 1 NAK sequence error, go-back-N (1 resend)",
        "13 not RoCE (skipped)",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
}

// ---------------------------------------------------------------- plot

fn font_installed() -> bool {
    std::env::var_os("FERROCE_FONT").is_some()
        || Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists()
}

#[test]
fn plot_writes_a_png() {
    if !font_installed() {
        eprintln!(
            "SKIPPED plot_writes_a_png: no font (install fonts-dejavu-core or set FERROCE_FONT)"
        );
        return;
    }
    let dir = TempDir::new();
    let png = dir.path().join("seq.png");
    let out = run(
        &[
            "explain",
            vector("ib_send_bw_rdmacm.pcap").to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("connection 2:"), "{}", out.stdout);
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(bytes.len() > 20_000, "{} bytes", bytes.len());
    // Two connections: two stacked panels.
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(h, 2 * ferroce::tools::explain::plot::PANEL_HEIGHT);
}

#[test]
fn without_a_font_the_story_is_still_told() {
    let dir = TempDir::new();
    let png = dir.path().join("seq.png");
    let bad = dir.write("notafont.ttf", "not a font");
    let out = run_env(
        &[
            "explain",
            vector("rc_pingpong.pcap").to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ],
        ("FERROCE_FONT", bad.to_str().unwrap()),
    );
    assert_eq!(out.code, Some(0), "{}", out.all());
    assert!(out.stdout.contains("verdict: clean"), "{}", out.stdout);
    assert!(out.stderr.contains("no plot"), "{}", out.stderr);
    assert!(!png.exists());
}

fn run_env(args: &[&str], env: (&str, &str)) -> Output {
    let mut cmd = std::process::Command::new(ferroce());
    cmd.args(args).env(env.0, env.1);
    spawn(&mut cmd, LIMIT).wait()
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = TempDir::new();
    let junk = dir.write("junk.pcap", "this is not a capture file at all");
    let src = std::fs::read(vector("ib_read_lat.pcap")).unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &src[..src.len() - 7]).unwrap();
    // A capture of nothing but ARP and TCP: the first 10 frames of
    // ib_read_lat (before any RoCE).
    let none = dir.path().join("none.pcap");
    {
        let mut r = ferroce::pcap::open(vector("ib_read_lat.pcap")).unwrap();
        let mut w = ferroce::pcap::create(&none, ferroce::pcap::Precision::Micro).unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            if ferroce::wire::Frame::parse(rec.data).is_err() {
                w.write(rec.ts_ns, rec.data).unwrap();
            }
        }
        w.flush().unwrap();
    }
    for (file, want) in [
        (junk, "junk.pcap"),
        (cut, "truncated"),
        (none, "no RoCE RC frames"),
        (PathBuf::from("/nonexistent/x.pcap"), "/nonexistent/x.pcap"),
    ] {
        let out = run(&["explain", file.to_str().unwrap()], LIMIT);
        assert_eq!(out.code, Some(2), "{}", out.all());
        assert!(out.stderr.contains(want), "{}", out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
    let out = run(
        &["explain", vector("ud_pingpong.pcap").to_str().unwrap()],
        LIMIT,
    );
    assert_eq!(out.code, Some(2), "{}", out.all());
    assert!(out.stderr.contains("10 other RoCE"), "{}", out.stderr);
}

// ---------------------------------------------------------------- simulator

/// Two hosts on one simulated link, a connected RC QP each, every frame of
/// `capture`'s host recorded to a pcap.
struct Pair {
    net: SimNet,
    qp: [u32; 2],
    cq: [CqId; 2],
    mr: [MrKeys; 2],
}

const IPS: [&str; 2] = ["198.18.0.1", "198.18.0.2"];
const PSNS: (u32, u32) = (0xFF_FFFE, 0x1000);

impl Pair {
    fn new(p: &ConnectParams, pcap: &Path, capture: usize) -> Pair {
        let mut net = SimNet::new(3);
        let mut qp = [0; 2];
        let mut cq = [CqId(0); 2];
        let mut mr = Vec::new();
        for i in 0..2 {
            let mac = MacAddr([2, 0, 0, 0, 0, i as u8 + 1]);
            let h = net
                .add_host(DeviceConfig::new(mac, IPS[i].parse().unwrap()))
                .unwrap();
            let d = &mut net.hosts[h].dev;
            let pd = d.alloc_pd();
            cq[i] = d.create_cq(64).unwrap();
            mr.push(d.reg_mr(MrSpec::new(pd, 1 << 16, Access::ALL)).unwrap());
            qp[i] = d.create_qp(pd, cq[i], cq[i], QpCaps::default()).unwrap();
        }
        let link = LinkConfig {
            rate_bps: 10_000_000_000,
            ..LinkConfig::default()
        };
        net.connect(0, 1, link).unwrap();
        net.connect_qps(0, qp[0], 1, qp[1], p, PSNS).unwrap();
        let w = ferroce::pcap::create(pcap, ferroce::pcap::Precision::Nano).unwrap();
        let h = net.hosts[capture].host;
        net.fabric.capture(h, w).unwrap();
        Pair {
            net,
            qp,
            cq,
            mr: [mr[0], mr[1]],
        }
    }

    /// Host 0 posts `op` of `len` bytes.
    fn post(&mut self, op: SendOp, len: u32) {
        let mr = self.mr[0];
        let sge = Sge {
            addr: mr.addr,
            length: len,
            lkey: mr.lkey,
        };
        let d = &mut self.net.hosts[0].dev;
        d.post_send(self.qp[0], SendWr::new(1, op, Payload::sge(sge)))
            .unwrap();
        self.net.touch(0);
    }

    fn write(&self) -> SendOp {
        SendOp::Write {
            remote_addr: self.mr[1].addr,
            rkey: self.mr[1].rkey,
        }
    }

    /// Runs until host 0 has a completion (or `limit` of virtual time),
    /// calling `step` after every step; returns host 0's completion.
    fn run(&mut self, limit: SimDuration, mut step: impl FnMut(&mut SimNet)) -> Wc {
        let mut wcs = Vec::new();
        let cq = self.cq[0];
        let done = self.net.run_until(limit, |n| {
            step(n);
            n.hosts[0].dev.poll_cq(cq, 4, &mut wcs);
            !wcs.is_empty()
        });
        assert!(done, "no completion");
        wcs.remove(0)
    }

    fn finish(&mut self, capture: usize) -> [QpCounters; 2] {
        let h = self.net.hosts[capture].host;
        self.net.fabric.end_capture(h).unwrap();
        [0, 1].map(|i| *self.net.hosts[i].dev.qp_counters(self.qp[i]).unwrap())
    }
}

#[test]
fn tail_loss_is_a_timeout_then_a_resend() {
    // A 3-packet WRITE whose last packet is lost once: nothing on the wire
    // tells the requester, whose ACK timer (exponent 12: 16.8 ms) fires.
    // Captured at the requester (the lost frame is in the capture) and at
    // the responder (it is not); the story is the same.
    for capture in [0, 1] {
        let dir = TempDir::new();
        let pcap = dir.path().join("tail.pcap");
        let p = ConnectParams {
            timeout: 12,
            ..ConnectParams::default()
        };
        let mut pair = Pair::new(&p, &pcap, capture);
        let link = pair.net.fabric.host_link(pair.net.hosts[0].host).unwrap();
        // One frame at a time on the NIC, so that the link can go down for
        // exactly the third.
        pair.net.fabric.set_tx_ring(pair.net.hosts[0].host, Some(1));
        let write = pair.write();
        pair.post(write, 3 * 1024);
        let base = 0;
        let mut dropped = false;
        let wc = pair.run(SimDuration::from_secs(1), |n| {
            let sent = n.fabric.host_counters(n.hosts[0].host).tx_frames;
            if sent == base + 2 && !dropped {
                n.fabric.set_channel_up(link, false).unwrap();
                dropped = true;
            } else if sent == base + 3 && dropped {
                n.fabric.set_channel_up(link, true).unwrap();
            }
        });
        assert_eq!(wc.status, WcStatus::Success);
        let counters = pair.finish(capture);
        assert_eq!(counters[0].local_ack_timeout_err, 1, "{}", counters[0]);
        assert_eq!(pair.net.fabric.link_counters(link).dropped_down, 1);

        let r = explain_file(&pcap).unwrap();
        let c = only(&r);
        assert_eq!(c.ends[0].ip, IPS[0], "capture at {capture}");
        let rs = resends(c);
        assert_eq!(rs.len(), 1, "{rs:?}");
        let (psn, packets, cause) = rs[0];
        // Go-back-N from the first unacknowledged PSN: the whole message,
        // of which the responder's capture had seen two packets before.
        assert_eq!(psn, PSNS.0);
        assert_eq!(counters[0].retransmitted_pkts, 3);
        assert_eq!(packets, if capture == 0 { 3 } else { 2 });
        match cause {
            Cause::Timeout {
                silence_ns,
                exponent,
            } => {
                // The timer runs from when the transport sent the packet,
                // a little before the NIC put it on the wire.
                let t = 4096u64 << p.timeout;
                assert!(silence_ns.abs_diff(t) < t / 10, "{silence_ns}");
                assert_eq!(exponent, Some(p.timeout));
            }
            c => panic!("{c:?}"),
        }
        assert!(naks(c).is_empty());
        assert_eq!(
            c.verdict,
            Verdict::Recovered {
                gaps: 0,
                seq_naks: 0,
                timeouts: 1,
                resends: 1
            }
        );
        // The PSNs wrap (0xfffffe, 0xffffff, 0): no gap, no confusion.
        assert_eq!(c.sent[0].psns, Some((0xFF_FFFE, 0)));
        assert_eq!(c.sent[0].acked, Some(0));
    }
}

#[test]
fn a_path_that_drops_everything_is_retry_exceeded() {
    let dir = TempDir::new();
    let pcap = dir.path().join("dead.pcap");
    let p = ConnectParams {
        timeout: 10,
        retry_cnt: 3,
        ..ConnectParams::default()
    };
    let mut pair = Pair::new(&p, &pcap, 0);
    // One WRITE goes through; then the path drops every frame.
    let write = pair.write();
    pair.post(write, 2048);
    assert_eq!(
        pair.run(SimDuration::from_secs(1), |_| {}).status,
        WcStatus::Success
    );
    let link = pair.net.fabric.host_link(pair.net.hosts[0].host).unwrap();
    pair.net.fabric.set_channel_up(link, false).unwrap();
    let write = pair.write();
    pair.post(write, 2048);
    let wc = pair.run(SimDuration::from_secs(5), |_| {});
    assert_eq!(wc.status, WcStatus::RetryExcErr);
    let counters = pair.finish(0);
    assert_eq!(counters[0].retry_exceeded_err, 1, "{}", counters[0]);

    let r = explain_file(&pcap).unwrap();
    let c = only(&r);
    match c.verdict {
        Verdict::RetryExceeded {
            end,
            psn,
            tries,
            last_ack,
            silence_ns,
        } => {
            assert_eq!(end, 0);
            // The second WRITE's first PSN, after the first's two.
            assert_eq!(psn, (PSNS.0 + 2) & 0xFF_FFFF);
            assert_eq!(last_ack, Some((PSNS.0 + 1) & 0xFF_FFFF));
            // The first send, then retry_cnt resends, each after a timeout.
            assert_eq!(tries, 1 + p.retry_cnt as u32);
            assert_eq!(tries as u64, counters[0].local_ack_timeout_err);
            let t = 4096u64 << p.timeout;
            assert!(silence_ns >= t && silence_ns < t + t / 10, "{silence_ns}");
        }
        v => panic!("{v:?}"),
    }
    let out = run(&["explain", pcap.to_str().unwrap()], LIMIT);
    assert_eq!(out.code, Some(1), "{}", out.all());
    assert!(
        out.stdout
            .contains("verdict: retry exceeded: PSN 0x000000 sent 4 times by 198.18.0.1, never acknowledged; last ACK PSN 0xffffff"),
        "{}",
        out.stdout
    );
}

#[test]
fn no_receive_posted_is_rnr() {
    // Host 1 posts no receive: each SEND meets an RNR NAK. With rnr_retry
    // 2 the requester gives up after the third; posting a receive in time
    // lets the next SEND through.
    for post_recv in [false, true] {
        let dir = TempDir::new();
        let pcap = dir.path().join("rnr.pcap");
        let p = ConnectParams {
            rnr_retry: 2,
            min_rnr_timer: 14, // 1.28 ms
            ..ConnectParams::default()
        };
        let mut pair = Pair::new(&p, &pcap, 1);
        pair.post(SendOp::Send, 64);
        let (qp1, mr1) = (pair.qp[1], pair.mr[1]);
        let mut posted = false;
        let wc = pair.run(SimDuration::from_secs(1), |n| {
            let naks = n.hosts[1].dev.qp_counters(qp1).unwrap().out_of_buffer;
            if post_recv && naks == 2 && !posted {
                let sge = Sge {
                    addr: mr1.addr,
                    length: 64,
                    lkey: mr1.lkey,
                };
                n.hosts[1]
                    .dev
                    .post_recv(
                        qp1,
                        RecvWr {
                            wr_id: 9,
                            sges: smallvec::smallvec![sge],
                        },
                    )
                    .unwrap();
                n.touch(1);
                posted = true;
            }
        });
        let counters = pair.finish(1);
        let r = explain_file(&pcap).unwrap();
        let c = only(&r);
        let rnr: Vec<(u32, u8)> = c
            .events
            .iter()
            .filter_map(|e| match e.what {
                What::RnrNak { psn, timer } => Some((psn, timer)),
                _ => None,
            })
            .collect();
        assert_eq!(rnr.len() as u64, counters[1].out_of_buffer, "{rnr:?}");
        assert_eq!(rnr.len() as u64, counters[0].rnr_nak_retry_err);
        assert!(rnr.iter().all(|&(psn, timer)| psn == PSNS.0 && timer == 14));
        for (_, _, cause) in resends(c) {
            match cause {
                Cause::Rnr { wait_ns } => assert!(wait_ns >= 1_280_000, "{wait_ns}"),
                c => panic!("{c:?}"),
            }
        }
        if post_recv {
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(
                c.verdict,
                Verdict::Rnr {
                    end: 0,
                    naks: 2,
                    exceeded: false
                }
            );
        } else {
            assert_eq!(wc.status, WcStatus::RnrRetryExcErr);
            assert_eq!(counters[0].retry_rnr_exceeded_err, 1);
            assert_eq!(
                c.verdict,
                Verdict::Rnr {
                    end: 0,
                    naks: 1 + p.rnr_retry as u32,
                    exceeded: true
                }
            );
        }
    }
}
