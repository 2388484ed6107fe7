//! The CM MADs of the real rxe captures that connect with RDMA CM
//! (tests/vectors/ib_send_bw_rdmacm, ib_write_bw_rdmacm_mtu4096,
//! rping_cm): every MAD is the 256-byte payload of a UD SEND ONLY to QP1
//! with Q_Key 0x80010000, parses as a `CmMad`, and re-emits byte for byte
//! from its `Repr` (and so does its whole frame); the fields agree with
//! the rest of the capture (QPNs and starting PSNs with the RC traffic
//! that follows, path MTU, GIDs and CA GUIDs with the addresses, the
//! service ID's port with the tool's, REQ/REP/RTU and DREQ/DREP pairs).
//!
//! Property tests: random bytes, truncations and mutations of the real
//! MADs never panic the parsers, and whatever parses re-emits to a
//! canonical form that parses back the same.

use ferroce::wire::cm::{attr, path_mtu_bytes, CmMessage, Rep, Req};
use ferroce::wire::cma::{port_space, CmaHdr, ServiceId};
use ferroce::wire::mad::{CmMad, MadError, GSI_QKEY, GSI_QPN, MAD_LEN};
use ferroce::wire::{gid_of, Frame, MacAddr, Opcode};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

const G1: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
const G2: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 3));

fn frames(name: &str) -> Vec<Vec<u8>> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/vectors/{name}.pcap"));
    let mut r = ferroce::pcap::open(&p).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        v.push(rec.data.to_vec());
    }
    v
}

/// One CM MAD of a capture and where it was.
struct Seen {
    frame: usize,
    src: IpAddr,
    src_mac: MacAddr,
    mad: CmMad,
}

/// A capture's RoCE frames and its CM MADs, each checked on the way: UD
/// SEND ONLY to QP1 from QP1 with the GSI Q_Key, 256 bytes, parsed, and
/// re-emitted byte for byte (the MAD, then its whole frame).
struct Capture {
    roce: Vec<(usize, Vec<u8>)>,
    mads: Vec<Seen>,
}

fn capture(name: &str) -> Capture {
    let mut roce = Vec::new();
    let mut mads = Vec::new();
    for (i, bytes) in frames(name).into_iter().enumerate() {
        let Ok(f) = Frame::parse(&bytes) else {
            continue;
        };
        let at = format!("{name} frame {}", i + 1);
        if f.dest_qp() == GSI_QPN {
            let r = f.repr();
            assert_eq!(r.bth.opcode, Opcode(0x64), "{at}: UD SEND ONLY");
            let deth = r.ext.deth.expect("a DETH");
            assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, GSI_QPN), "{at}");
            assert_eq!(f.payload.len(), MAD_LEN, "{at}: MAD length");
            let mad = CmMad::parse(f.payload).unwrap_or_else(|e| panic!("{at}: {e}"));
            let mut out = [0u8; MAD_LEN];
            assert_eq!(mad.emit(&mut out), Ok(MAD_LEN));
            assert_eq!(&out[..], f.payload, "{at}: the MAD re-emitted");
            let mut whole = vec![0u8; bytes.len()];
            let n = r.emit(&out, &mut whole).unwrap();
            assert_eq!(&whole[..n], &bytes[..], "{at}: the frame re-emitted");
            mads.push(Seen {
                frame: i + 1,
                src: r.ip.src(),
                src_mac: r.eth.src,
                mad,
            });
        } else {
            roce.push((i + 1, bytes.clone()));
        }
    }
    Capture { roce, mads }
}

/// The EUI-64 a MAC gives (rxe's node GUID): U/L bit flipped, FF:FE in
/// the middle.
fn guid_of(m: MacAddr) -> u64 {
    let a = m.0;
    u64::from_be_bytes([a[0] ^ 2, a[1], a[2], 0xFF, 0xFE, a[3], a[4], a[5]])
}

/// The first RC request (not an ACK or a READ response) `from` sends to
/// `qpn`: its PSN.
fn first_request_psn(c: &Capture, from: IpAddr, qpn: u32) -> Option<u32> {
    c.roce.iter().find_map(|(_, b)| {
        let f = Frame::parse(b).unwrap();
        let op = f.opcode().0;
        let request = op < 0x0D || op == 0x13 || op == 0x14;
        (f.repr().ip.src() == from && f.dest_qp() == qpn && request).then(|| f.psn().value())
    })
}

/// What a capture must show.
struct Expect {
    name: &'static str,
    mads: [usize; 3],
    connections: usize,
    port: u16,
    path_mtu: u32,
}

/// The checks every capture shares; returns its REQ / REP pairs.
fn check(e: &Expect) -> (Capture, Vec<(Req, Rep)>) {
    let c = capture(e.name);
    let n = |a: u16| {
        c.mads
            .iter()
            .filter(|s| s.mad.hdr.attribute_id == a)
            .count()
    };
    assert_eq!(
        [n(attr::REQ), n(attr::DREQ), c.mads.len()],
        e.mads,
        "{}: REQs, DREQs, MADs",
        e.name
    );
    let mut pairs = Vec::new();
    for (k, s) in c.mads.iter().enumerate() {
        let at = format!("{} frame {}", e.name, s.frame);
        assert_eq!(s.mad.hdr.method, ferroce::wire::mad::method::SEND, "{at}");
        assert_eq!(s.mad.hdr.status, 0, "{at}");
        let CmMessage::Req(req) = &s.mad.msg else {
            continue;
        };
        // The active side is the client, g2; it asks g1 for the tool's
        // port in the TCP port space.
        assert_eq!(s.src, G2, "{at}");
        let sid = ServiceId::from_u64(req.service_id).expect("an IP CM service ID");
        assert_eq!(
            (sid.port_space, sid.port),
            (port_space::TCP, e.port),
            "{at}"
        );
        assert_eq!(path_mtu_bytes(req.path_mtu), Some(e.path_mtu), "{at}");
        assert_eq!(req.transport_service_type, 0, "{at}: RC");
        assert_eq!(req.pkey, 0xFFFF, "{at}");
        assert_eq!(req.local_ca_guid, guid_of(s.src_mac), "{at}: CA GUID");
        let p = &req.primary;
        assert_eq!(
            (p.local_gid, p.remote_gid),
            (gid_of(G2), gid_of(G1)),
            "{at}"
        );
        assert_eq!((p.local_lid, p.remote_lid), (0xFFFF, 0xFFFF), "{at}");
        assert_eq!(p.hop_limit, 64, "{at}");
        assert_eq!(req.alternate, Default::default(), "{at}: no alternate path");
        let cma = CmaHdr::parse(&req.private_data).unwrap();
        assert_eq!((cma.src, cma.dst), (G2, G1), "{at}: rdma_cm addresses");
        assert_ne!(cma.src_port, 0, "{at}");
        // The REP answers it (same transaction, the REQ's ID echoed) and
        // an RTU closes the handshake.
        let rep = c.mads[k + 1..]
            .iter()
            .find_map(|r| match &r.mad.msg {
                CmMessage::Rep(rep) if rep.remote_comm_id == req.local_comm_id => {
                    assert_eq!(r.src, G1, "{at}: REP from g1");
                    assert_eq!(r.mad.hdr.transaction_id, s.mad.hdr.transaction_id);
                    assert_eq!(rep.local_ca_guid, guid_of(r.src_mac), "{at}: REP GUID");
                    Some(rep.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("{at}: no REP"));
        assert!(
            c.mads.iter().any(|r| matches!(&r.mad.msg, CmMessage::Rtu(m)
                if (m.local_comm_id, m.remote_comm_id) == (req.local_comm_id, rep.local_comm_id))),
            "{at}: no RTU"
        );
        pairs.push((req.clone(), rep));
    }
    assert_eq!(pairs.len(), e.connections, "{}", e.name);
    check_psns(e.name, &c, &pairs);
    check_disconnects(e.name, &c, &pairs);
    (c, pairs)
}

/// Each side's first request on a connection carries the starting PSN
/// the peer's message announced: the passive side (g1) starts at the
/// REQ's, the active side (g2) at the REP's (the CM message's starting
/// PSN is what its sender's receive queue expects, as Linux sets up the
/// QPs); each goes to the QPN the peer's message named.
fn check_psns(name: &str, c: &Capture, pairs: &[(Req, Rep)]) {
    let mut checked = 0;
    for (req, rep) in pairs {
        if let Some(psn) = first_request_psn(c, G1, req.local_qpn) {
            assert_eq!(psn, req.starting_psn.value(), "{name}: g1's first PSN");
            checked += 1;
        }
        if let Some(psn) = first_request_psn(c, G2, rep.local_qpn) {
            assert_eq!(psn, rep.starting_psn.value(), "{name}: g2's first PSN");
            checked += 1;
        }
    }
    // The first connection carries requests both ways (the tools' own
    // exchange), so at least both of its checks ran.
    assert!(checked >= 2, "{name}: {checked} PSN checks");
    // Every RC frame goes to a QPN one of the CM messages named.
    for (i, b) in &c.roce {
        let f = Frame::parse(b).unwrap();
        let to = if f.repr().ip.src() == G1 { G2 } else { G1 };
        let named = pairs.iter().any(|(req, rep)| {
            f.dest_qp()
                == if to == G2 {
                    req.local_qpn
                } else {
                    rep.local_qpn
                }
        });
        assert!(named, "{name} frame {i}: QPN {:#x}", f.dest_qp());
    }
}

/// Every DREQ names the receiver's QPN and is answered by a DREP with the
/// IDs swapped, in the same transaction.
fn check_disconnects(name: &str, c: &Capture, pairs: &[(Req, Rep)]) {
    for (k, s) in c.mads.iter().enumerate() {
        let CmMessage::Dreq(d) = &s.mad.msg else {
            continue;
        };
        let (req, rep) = pairs
            .iter()
            .find(|(req, rep)| {
                [req.local_comm_id, rep.local_comm_id] == [d.local_comm_id, d.remote_comm_id]
                    || [rep.local_comm_id, req.local_comm_id] == [d.local_comm_id, d.remote_comm_id]
            })
            .unwrap_or_else(|| panic!("{name} frame {}: DREQ of no connection", s.frame));
        let peer_qpn = if s.src == G2 {
            rep.local_qpn
        } else {
            req.local_qpn
        };
        assert_eq!(d.remote_qpn_eecn, peer_qpn, "{name} frame {}", s.frame);
        let answered = c.mads[k + 1..].iter().any(|r| {
            r.src != s.src
                && r.mad.hdr.transaction_id == s.mad.hdr.transaction_id
                && matches!(&r.mad.msg, CmMessage::Drep(m)
                    if (m.local_comm_id, m.remote_comm_id) == (d.remote_comm_id, d.local_comm_id))
        });
        assert!(answered, "{name} frame {}: no DREP", s.frame);
    }
}

#[test]
fn ib_send_bw_rdmacm_cm_mads() {
    let (_, pairs) = check(&Expect {
        name: "ib_send_bw_rdmacm",
        mads: [2, 2, 10],
        connections: 2,
        port: 18515,
        path_mtu: 1024,
    });
    // Values read off the capture with tshark.
    let (req, rep) = &pairs[0];
    assert_eq!((req.local_qpn, req.starting_psn.value()), (0x1b, 0x3cc095));
    assert_eq!(
        (req.local_comm_id, rep.local_comm_id),
        (0x3352_75e4, 0x5971_70f3)
    );
    assert_eq!((rep.local_qpn, rep.starting_psn.value()), (0x1b, 0x36699f));
    assert_eq!(pairs[1].0.local_qpn, 0x1c);
    assert_eq!(pairs[1].1.starting_psn.value(), 0x41e0a9);
}

#[test]
fn ib_write_bw_rdmacm_mtu4096_cm_mads() {
    let (c, pairs) = check(&Expect {
        name: "ib_write_bw_rdmacm_mtu4096",
        mads: [2, 2, 10],
        connections: 2,
        port: 18515,
        path_mtu: 4096,
    });
    let (req, rep) = &pairs[0];
    assert_eq!(req.service_id, 0x0000_0000_0106_4853);
    assert_eq!((req.local_qpn, req.starting_psn.value()), (0x13, 0x37874a));
    assert_eq!((rep.local_qpn, rep.starting_psn.value()), (0x13, 0xa15509));
    assert_eq!(req.path_mtu, 5);
    assert_eq!((req.retry_count, req.rnr_retry_count), (7, 7));
    assert_eq!(req.max_cm_retries, 15);
    assert_eq!(req.primary.flow_label, 0x82562);
    assert_eq!(req.primary.local_ack_timeout, 0x13);
    assert_eq!((rep.target_ack_delay, rep.rnr_retry_count), (0x0f, 7));
    let cma = CmaHdr::parse(&req.private_data).unwrap();
    assert_eq!(cma.src_port, 0xc511);
    // The WRITEs use the path MTU the REQ announced: full 4096 B segments.
    let largest = c
        .roce
        .iter()
        .map(|(_, b)| Frame::parse(b).unwrap().payload.len())
        .max();
    assert_eq!(largest, Some(4096));
    // The second connection's WRITEs start at its REP's PSN.
    let (_, rep2) = &pairs[1];
    assert_eq!(first_request_psn(&c, G2, rep2.local_qpn), Some(0xab2f7a));
}

#[test]
fn rping_cm_mads() {
    let (c, pairs) = check(&Expect {
        name: "rping_cm",
        mads: [1, 1, 5],
        connections: 1,
        port: 7174,
        path_mtu: 4096,
    });
    let (req, rep) = &pairs[0];
    assert_eq!((req.local_qpn, req.starting_psn.value()), (0x12, 0x1a2d3f));
    // rping's server reads the client's buffer first: its READ REQUEST
    // carries the REQ's starting PSN.
    let read = c.roce.iter().find_map(|(_, b)| {
        let f = Frame::parse(b).unwrap();
        (f.opcode().0 == 0x0C).then(|| f.psn().value())
    });
    assert_eq!(read, Some(req.starting_psn.value()));
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
}

// ---------------------------------------------------------------------------
// Properties

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Every CM MAD of the three captures, as bytes.
fn real_mads() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for name in [
        "ib_send_bw_rdmacm",
        "ib_write_bw_rdmacm_mtu4096",
        "rping_cm",
    ] {
        for b in frames(name) {
            if let Ok(f) = Frame::parse(&b) {
                if f.dest_qp() == GSI_QPN {
                    v.push(f.payload.to_vec());
                }
            }
        }
    }
    assert_eq!(v.len(), 25);
    v
}

/// Whatever parses re-emits, and the emitted MAD parses back the same.
fn round_trips(b: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(h) = CmaHdr::parse(b) {
        let mut out = [0u8; CmaHdr::LEN];
        prop_assert_eq!(h.emit(&mut out), Ok(CmaHdr::LEN));
        prop_assert_eq!(CmaHdr::parse(&out), Ok(h));
    }
    let Ok(m) = CmMad::parse(b) else {
        return Ok(());
    };
    let mut out = [0u8; MAD_LEN];
    prop_assert_eq!(m.emit(&mut out), Ok(MAD_LEN));
    prop_assert_eq!(CmMad::parse(&out), Ok(m));
    Ok(())
}

#[test]
fn every_truncation_of_a_real_mad_is_an_error() {
    for m in real_mads() {
        for n in 0..MAD_LEN {
            assert_eq!(CmMad::parse(&m[..n]), Err(MadError::Truncated), "{n}");
        }
        assert!(CmMad::parse(&m).is_ok());
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut runner = TestRunner::new(config(2000));
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..300), |b| {
            round_trips(&b)
        })
        .unwrap();
}

#[test]
fn any_cm_data_area_parses_and_re_emits_canonically() {
    let strategy = (
        attr::REQ..=attr::SIDR_REP,
        prop::collection::vec(any::<u8>(), MAD_LEN - 24),
    );
    let mut runner = TestRunner::new(config(2000));
    runner
        .run(&strategy, |(a, data)| {
            let mut b = vec![1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            b.extend_from_slice(&a.to_be_bytes());
            b.extend_from_slice(&[0; 6]);
            b.extend_from_slice(&data);
            let m = CmMad::parse(&b).expect("a known attribute parses");
            prop_assert_eq!(m.msg.attribute_id(), a);
            round_trips(&b)
        })
        .unwrap();
}

#[test]
fn mutated_real_mads_never_panic() {
    let mads = real_mads();
    let strategy = (
        any::<Index>(),
        prop::collection::vec((any::<Index>(), any::<u8>()), 1..8),
        any::<Index>(),
    );
    let mut runner = TestRunner::new(config(3000));
    runner
        .run(&strategy, |(which, sets, cut)| {
            let mut b = mads[which.index(mads.len())].clone();
            for (i, v) in sets {
                let i = i.index(b.len());
                b[i] = v;
            }
            round_trips(&b)?;
            // The REQ's private data header too, from any offset.
            let n = cut.index(b.len() + 1);
            round_trips(&b[..n])?;
            let _ = CmaHdr::parse(&b[n..]);
            Ok(())
        })
        .unwrap();
}
