//! INT telemetry between ferroce endpoints on the simulator's fabric
//! (`ferroce::wire::int`): two devices that agreed to it exchange a
//! WRITE through a switch, which stamps its hop into each request; the
//! responder echoes it; the data arrives intact, the RoCE frames keep their
//! ICRC and tshark decodes them as RoCE with a trailer. A device that did
//! not agree ignores the trailer (and sends none back), which the asking
//! side counts; a rate control that needs INT is refused without it.

mod common;

use ferroce::backend::fabric::LinkConfig;
use ferroce::cc::CcConfig;
use ferroce::pcap;
use ferroce::sim::net::SimNet;
use ferroce::time::Duration;
use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::int::{self, Trailer};
use ferroce::wire::{Frame, MacAddr};
use std::process::Command;

const LEN: usize = 256 << 10;

struct End {
    cq: CqId,
    mr: MrKeys,
    qp: u32,
}

/// Two hosts on one 100 Gb/s switch, a QP each; `cc` on host 0.
fn two_hosts(cc: CcConfig) -> (SimNet, [End; 2]) {
    let mut net = SimNet::new(3);
    let sw = net.add_switch();
    let mut ends = Vec::new();
    for i in 0..2u8 {
        let mut cfg = DeviceConfig::new(
            MacAddr([2, 0, 0, 0, 0, i + 1]),
            format!("198.18.0.{}", i + 1).parse().unwrap(),
        );
        if i == 0 {
            cfg.congestion.rp = cc.clone();
            cfg.congestion.line_bps = 100_000_000_000;
        }
        let h = net.add_host(cfg).unwrap();
        net.connect_to_switch(h, sw, LinkConfig::default()).unwrap();
        let d = &mut net.hosts[h].dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(64).unwrap();
        let mr = d.reg_mr(MrSpec::new(pd, LEN, Access::ALL)).unwrap();
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        ends.push(End { cq, mr, qp });
    }
    let ends: [End; 2] = ends.try_into().ok().unwrap();
    (net, ends)
}

/// Connects the QPs, host 0 agreeing to INT if `a`, host 1 if `b`.
fn connect(net: &mut SimNet, e: &[End; 2], a: bool, b: bool) -> Result<(), Error> {
    let addr = |net: &SimNet, h: usize| {
        let c = net.hosts[h].dev.config();
        (c.mac, c.gids[0])
    };
    let (m0, ip0) = addr(net, 0);
    let (m1, ip1) = addr(net, 1);
    let p = |int| ConnectParams {
        mtu: Mtu::Mtu4096,
        int_telemetry: int,
        recovery: ferroce::transport::Recovery::GoBackN,
        ..ConnectParams::default()
    };
    connect_qp(
        &mut net.hosts[0].dev,
        e[0].qp,
        e[1].qp,
        m1,
        ip1,
        &p(a),
        0,
        0,
    )?;
    connect_qp(
        &mut net.hosts[1].dev,
        e[1].qp,
        e[0].qp,
        m0,
        ip0,
        &p(b),
        0,
        0,
    )
}

/// Host 0 WRITEs its whole region into host 1's; returns when it completed.
fn write(net: &mut SimNet, e: &[End; 2]) {
    let d = &mut net.hosts[0].dev;
    for (i, b) in d.mr_mut(e[0].mr.lkey).unwrap().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let op = SendOp::Write {
        remote_addr: e[1].mr.addr,
        rkey: e[1].mr.rkey,
    };
    let sge = Sge {
        addr: e[0].mr.addr,
        length: LEN as u32,
        lkey: e[0].mr.lkey,
    };
    d.post_send(e[0].qp, SendWr::new(1, op, Payload::sge(sge)))
        .unwrap();
    let mut wcs: Vec<Wc> = Vec::new();
    let cq = e[0].cq;
    let done = net.run_until(Duration::from_millis(100), |n| {
        n.hosts[0].dev.poll_cq(cq, 8, &mut wcs);
        !wcs.is_empty()
    });
    assert!(done && wcs[0].status == WcStatus::Success, "{wcs:?}");
    let (src, dst) = (
        net.hosts[0].dev.mr(e[0].mr.lkey).unwrap(),
        net.hosts[1].dev.mr(e[1].mr.lkey).unwrap(),
    );
    assert!(src == dst, "the data arrived intact");
}

/// Connects both ends agreeing to INT and runs [`write`] with host 1's
/// frames captured into `file`; the frames captured.
fn captured_write(net: &mut SimNet, e: &[End; 2], file: &std::path::Path) -> u64 {
    connect(net, e, true, true).unwrap();
    let w = pcap::create(file, pcap::Precision::Nano).unwrap();
    let h1 = net.hosts[1].host;
    net.fabric.capture(h1, w).unwrap();
    write(net, e);
    net.fabric.end_capture(h1).unwrap()
}

#[test]
fn a_switch_stamps_requests_and_the_responder_echoes_the_hops() {
    let (mut net, e) = two_hosts(CcConfig::from_name("hpcc").unwrap());
    let dir = tempdir();
    let file = dir.join("int.pcap");
    let frames = captured_write(&mut net, &e, &file);
    assert!(frames > 64, "{frames}");

    let rx = *net.hosts[1].dev.qp_counters(e[1].qp).unwrap();
    let tx = *net.hosts[0].dev.qp_counters(e[0].qp).unwrap();
    assert_eq!((rx.int_missing, tx.int_missing), (0, 0), "{rx}\n{tx}");
    assert!(tx.int_echoes > 0, "{tx}");
    assert!(rx.rcvd_pkts >= 64, "{rx}");

    // Every frame host 1 received or sent: a valid RoCE v2 frame in front
    // of its trailer; requests collected the switch's one hop (100 Gb/s),
    // responses carry the echo.
    let mut r = pcap::Reader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let (mut requests, mut echoes) = (0, 0);
    while let Some(rec) = r.next_record().unwrap() {
        let f = Frame::parse(rec.data).unwrap();
        assert!(f.icrc_ok());
        let at = int::trailer_offset(rec.data).unwrap();
        assert_eq!(at, f.bytes().len());
        match Trailer::parse(&rec.data[at..]).expect("a trailer") {
            Trailer::Collect(s) => {
                assert!(f.info.is_request());
                assert_eq!(s.n, 1);
                assert_eq!(s.hops()[0].rate_bps(), Some(100_000_000_000));
                requests += 1;
            }
            Trailer::Echo(s) => {
                assert!(!f.info.is_request());
                assert!(s.n <= 1);
                echoes += 1;
            }
        }
    }
    assert_eq!(requests, LEN / 4096);
    assert!(echoes > 0);

    // tshark decodes each as InfiniBand over UDP with the 44-byte trailer
    // after it (taking its last 4 bytes for an FCS, as it guesses for a
    // trailer of a frame with no FCS flag).
    let out = Command::new(tshark())
        .env("WIRESHARK_CONFIG_DIR", dir.join("ws"))
        .args(["-n", "-r"])
        .arg(&file)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["-T", "fields", "-e", "frame.protocols", "-e", "eth.trailer"])
        .args(["-e", "eth.fcs"])
        .output()
        .expect("tshark runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len() as u64, frames, "{text}");
    for row in rows {
        let cols: Vec<&str> = row.split('\t').collect();
        let (proto, trailer, fcs) = (cols[0], cols[1], cols.get(2).copied().unwrap_or(""));
        assert!(proto.contains("infiniband"), "{row}");
        assert!(trailer.starts_with("f17e"), "{row}");
        let fcs_bytes = if fcs.is_empty() { 0 } else { 4 };
        assert_eq!(trailer.len() / 2 + fcs_bytes, int::LEN, "{row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn switches_told_not_to_stamp_leave_the_trailers_as_the_hosts_sent_them() {
    let (mut net, e) = two_hosts(CcConfig::from_name("hpcc").unwrap());
    net.fabric.set_int_stamping(false);
    let file = tempdir().join("unstamped.pcap");
    captured_write(&mut net, &e, &file);
    let mut r = pcap::Reader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let mut requests = 0;
    while let Some(rec) = r.next_record().unwrap() {
        let at = int::trailer_offset(rec.data).unwrap();
        if let Some(Trailer::Collect(s)) = Trailer::parse(&rec.data[at..]) {
            assert_eq!(s.n, 0, "no switch stamped its hop");
            requests += 1;
        }
    }
    assert_eq!(
        requests,
        LEN / 4096,
        "the requests still carry their trailer"
    );
}

#[test]
fn a_peer_that_did_not_agree_ignores_the_trailer_and_the_asker_counts_it() {
    let (mut net, e) = two_hosts(CcConfig::None);
    connect(&mut net, &e, true, false).unwrap();
    write(&mut net, &e);
    let tx = *net.hosts[0].dev.qp_counters(e[0].qp).unwrap();
    let rx = *net.hosts[1].dev.qp_counters(e[1].qp).unwrap();
    assert!(tx.int_missing > 0 && tx.int_echoes == 0, "{tx}");
    assert_eq!(rx.int_missing, 0, "{rx}");
}

#[test]
fn a_rate_control_that_needs_int_is_refused_without_it() {
    let (mut net, e) = two_hosts(CcConfig::from_name("hpcc").unwrap());
    let err = connect(&mut net, &e, false, false).unwrap_err();
    assert!(err.to_string().contains("needs INT telemetry"), "{err}");
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferroce-int-{}", std::process::id()));
    std::fs::create_dir_all(d.join("ws")).unwrap();
    d
}

fn tshark() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("tshark"))
        .find(|p| p.is_file())
        .expect("tshark (Wireshark) is installed by scripts/setup.sh")
}
