//! Every RoCE frame of every real rxe capture in tests/vectors: it parses,
//! its ICRC verifies, etherparse reads its Ethernet / IP / UDP headers the
//! same way, and parse -> Repr -> emit gives back the exact bytes. Every
//! other frame (ARP, the tools' TCP exchange) is recognised as not RoCE.

mod common;

use ferroce::wire::ext::{AckSyndrome, NakCode};
use ferroce::wire::{Error, Frame, Opcode};
use std::collections::BTreeSet;
use std::path::PathBuf;

struct Capture {
    name: String,
    frames: Vec<Vec<u8>>,
}

fn captures() -> Vec<Capture> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    names.sort();
    assert!(names.len() >= 18, "captures in {}", dir.display());
    names
        .into_iter()
        .map(|p| {
            let mut r = ferroce::pcap::open(&p).unwrap();
            let mut frames = Vec::new();
            while let Some(rec) = r.next_record().unwrap() {
                frames.push(rec.data.to_vec());
            }
            Capture {
                name: p.file_stem().unwrap().to_string_lossy().into_owned(),
                frames,
            }
        })
        .collect()
}

/// The number of RoCE frames in each capture (as counted when it was made).
fn expected_roce_frames(name: &str) -> usize {
    match name {
        "host_peer_bad_rkey" => 22,
        "host_peer_psn_gap" => 52,
        "host_peer_rc_pingpong" => 50,
        "host_peer_send_only" => 12,
        "ib_read_bw" | "ib_read_bw_mtu4096" | "ib_send_bw" | "ib_write_bw" => 25,
        "ib_read_lat" | "ud_pingpong" => 10,
        "ib_send_bw_rdmacm" => 79,
        "ib_write_bw_rdmacm_mtu4096" => 99,
        "rping_cm" => 41,
        "ib_send_lat" => 22,
        "ib_write_bw_loss" | "uc_pingpong" => 40,
        "ib_write_lat" => 20,
        "rc_pingpong" => 50,
        "rc_pingpong_loss" => 52,
        "rc_pingpong_mtu4096" => 30,
        other => panic!("no expectation for capture {other}: add it here"),
    }
}

#[test]
fn every_rxe_frame_parses_verifies_and_re_emits_exactly() {
    let mut total = 0;
    for c in captures() {
        let mut roce = 0;
        for (i, bytes) in c.frames.iter().enumerate() {
            let f = match Frame::parse(bytes) {
                Ok(f) => f,
                Err(Error::NotRoce) => continue,
                Err(e) => panic!("{} frame {}: {e}", c.name, i + 1),
            };
            roce += 1;
            let at = format!("{} frame {} ({})", c.name, i + 1, f.repr().bth.opcode);
            assert!(f.icrc_ok(), "{at}: ICRC");
            assert_eq!(f.len(), bytes.len(), "{at}: trailing bytes");
            common::oracle::agrees(bytes, &f).unwrap_or_else(|e| panic!("{at}: {e}"));
            let mut out = vec![0u8; bytes.len()];
            let n = f.repr().emit(f.payload, &mut out).unwrap();
            assert_eq!(n, bytes.len(), "{at}: length");
            assert_eq!(&out, bytes, "{at}: bytes differ");
            assert_eq!(f.repr().frame_len(f.payload.len()), n);
        }
        assert_eq!(roce, expected_roce_frames(&c.name), "{}", c.name);
        total += roce;
    }
    assert_eq!(total, 729);
}

/// What each capture is known to contain, read through our parser.
#[test]
fn the_captures_show_what_their_readme_says() {
    for c in captures() {
        let frames: Vec<Frame> = c
            .frames
            .iter()
            .filter_map(|b| Frame::parse(b).ok())
            .collect();
        let ops: BTreeSet<u8> = frames.iter().map(|f| f.repr().bth.opcode.0).collect();
        let naks: BTreeSet<NakCode> = frames
            .iter()
            .filter_map(|f| match f.repr().ext.aeth?.syndrome {
                AckSyndrome::Nak(c) => Some(c),
                _ => None,
            })
            .collect();
        let has = |op: u8| ops.contains(&op);
        match c.name.as_str() {
            "ib_read_bw" | "ib_read_bw_mtu4096" => {
                for op in [0x0C, 0x0D, 0x0E, 0x0F] {
                    assert!(has(op), "{}: {}", c.name, Opcode(op));
                }
                // READ RESPONSE MIDDLE has no AETH, FIRST and LAST have one.
                for f in &frames {
                    let aeth = f.repr().ext.aeth.is_some();
                    match f.repr().bth.opcode.0 {
                        0x0E => assert!(!aeth),
                        0x0D | 0x0F | 0x10 | 0x11 => assert!(aeth),
                        _ => assert!(!aeth),
                    }
                }
            }
            "ib_read_lat" => assert!(has(0x0C) && has(0x10)),
            "ib_write_bw" => assert!(has(0x06) && has(0x07) && has(0x08)),
            "ib_write_lat" => assert!(has(0x0A)),
            "ud_pingpong" => {
                assert_eq!(ops, BTreeSet::from([0x64]));
                assert!(frames.iter().all(|f| f.repr().ext.deth.is_some()));
            }
            "uc_pingpong" => assert!(ops.iter().all(|&o| (0x20..0x40).contains(&o))),
            "ib_send_bw_rdmacm" => {
                assert!(has(0x64), "CM MADs in UD SEND ONLY");
                assert!(frames.iter().any(|f| f.pad == 2), "pad 2");
            }
            "ib_write_bw_rdmacm_mtu4096" => {
                assert!(has(0x64), "CM MADs in UD SEND ONLY");
                assert!(
                    has(0x06) && has(0x07) && has(0x08),
                    "WRITE FIRST/MIDDLE/LAST"
                );
            }
            "rping_cm" => {
                assert!(has(0x64), "CM MADs in UD SEND ONLY");
                assert!(has(0x0C) && has(0x10), "READ REQUEST, READ RESPONSE ONLY");
            }
            "rc_pingpong_loss" | "ib_write_bw_loss" | "host_peer_psn_gap" => {
                assert_eq!(
                    naks,
                    BTreeSet::from([NakCode::PsnSequenceError]),
                    "{}",
                    c.name
                )
            }
            "host_peer_bad_rkey" => {
                assert_eq!(naks, BTreeSet::from([NakCode::InvalidRequest]))
            }
            _ => {}
        }
        if !c.name.contains("loss") && !c.name.ends_with("gap") && !c.name.ends_with("rkey") {
            assert!(naks.is_empty(), "{}: unexpected NAK", c.name);
        }
        // rxe never marks ECN and always sends UDP checksum 0 and DF.
        for f in &frames {
            assert_eq!(f.repr().udp.checksum, 0);
            assert_eq!(f.repr().ip.ecn(), ferroce::wire::Ecn::NotEct);
        }
    }
}

/// Changing any byte the ICRC covers breaks it; changing a variant field
/// (TTL, ECN, FECN/BECN) does not, once the IP checksum is fixed.
#[test]
fn the_icrc_covers_exactly_the_invariant_bytes() {
    let c = captures()
        .into_iter()
        .find(|c| c.name == "ib_write_lat")
        .unwrap();
    let bytes = c
        .frames
        .iter()
        .find(|b| Frame::parse(b).is_ok())
        .unwrap()
        .clone();
    let f = Frame::parse(&bytes).unwrap();
    let n = f.len();
    for i in 14 + 20..n - 4 {
        let mut g = bytes.clone();
        g[i] ^= 0x01;
        let variant = i == 14 + 20 + 6 || i == 14 + 20 + 7 || i == 14 + 20 + 8 + 4;
        if let Ok(h) = Frame::parse(&g) {
            assert_eq!(h.icrc_ok(), variant, "byte {i}");
        }
    }
    let mut g = bytes.clone();
    let mut ip = ferroce::wire::Ipv4Packet::new_checked(&mut g[14..]).unwrap();
    ip.set_ecn(ferroce::wire::Ecn::Ce);
    g[14 + 8] = 3; // TTL
    let fix = {
        let mut s = 0u32;
        g[24] = 0;
        g[25] = 0;
        for w in g[14..34].chunks(2) {
            s += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        !(s as u16)
    };
    g[24..26].copy_from_slice(&fix.to_be_bytes());
    let h = Frame::parse(&g).unwrap();
    assert!(h.icrc_ok());
}

/// Our own frame for every opcode, IPv4 and IPv6 with a VLAN tag: parses
/// back to the same headers, ICRC ok, and etherparse agrees.
#[test]
fn every_opcode_we_build_parses_back() {
    let all = common::frames::every_opcode();
    assert_eq!(all.len(), 2 * Opcode::all().count());
    for (what, bytes) in &all {
        let f = Frame::parse(bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(f.icrc_ok(), "{what}");
        common::oracle::agrees(bytes, &f).unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut out = vec![0u8; bytes.len()];
        f.repr().emit(f.payload, &mut out).unwrap();
        assert_eq!(&out, bytes, "{what}");
    }
}

/// Every ARP frame of the captures (Linux's requests, broadcast or unicast,
/// and replies) reads as an Ethernet / IPv4 ARP packet and is written back
/// byte for byte (the captures hold them unpadded, 42 bytes);
/// each request for a host of the capture is answered as that host did.
#[test]
fn every_arp_frame_of_the_captures_re_emits_exactly() {
    use ferroce::wire::ethernet::ETHERTYPE_ARP;
    use ferroce::wire::{ArpOp, ArpPacket, ArpRepr, EthernetFrame};
    let mut n = 0;
    for c in captures() {
        let arps: Vec<ArpRepr> = c
            .frames
            .iter()
            .filter_map(|f| {
                let eth = EthernetFrame::new_checked(&f[..]).ok()?;
                (eth.ethertype() == ETHERTYPE_ARP).then(|| {
                    let p = ArpPacket::new_checked(eth.payload()).unwrap();
                    let r = ArpRepr::parse(&p).unwrap();
                    let mut out = [0u8; 64];
                    let len = r.emit_frame_to(eth.dst(), &mut out).unwrap();
                    assert_eq!(len, 60, "{}", c.name);
                    assert_eq!(&out[..42], &f[..42], "{}: ARP re-emitted", c.name);
                    r
                })
            })
            .collect();
        for req in arps.iter().filter(|r| r.op == ArpOp::Request) {
            if let Some(rep) = arps
                .iter()
                .find(|r| r.op == ArpOp::Reply && r.spa == req.tpa && r.tha == req.sha)
            {
                assert_eq!(req.reply(rep.sha, rep.spa), Some(*rep), "{}", c.name);
            }
        }
        n += arps.len();
    }
    assert!(n >= 10, "only {n} ARP frames in the captures");
}

/// Steering a received frame to its QP's datapath reads only the headers:
/// for every frame of the captures it names the QP the full parse names,
/// or none for a frame that is not RoCE (ARP, other traffic), from the
/// headers alone, and no prefix of any frame makes it panic.
#[test]
fn peek_dest_qp_names_the_qp_of_every_captured_frame() {
    use ferroce::wire::frame::peek_dest_qp;
    let (mut roce, mut other) = (0, 0);
    for c in captures() {
        for (i, bytes) in c.frames.iter().enumerate() {
            let at = format!("{} frame {}", c.name, i + 1);
            match Frame::parse(bytes) {
                Ok(f) => {
                    roce += 1;
                    assert_eq!(peek_dest_qp(bytes), Some(f.dest_qp()), "{at}");
                    // The headers are enough (a zero-copy frame's first part).
                    let head = bytes.len() - f.payload.len() - f.pad as usize - 4;
                    assert_eq!(peek_dest_qp(&bytes[..head]), Some(f.dest_qp()), "{at}");
                }
                Err(Error::NotRoce) => {
                    other += 1;
                    assert_eq!(peek_dest_qp(bytes), None, "{at}");
                }
                Err(e) => panic!("{at}: {e}"),
            }
            for n in 0..bytes.len().min(80) {
                let _ = peek_dest_qp(&bytes[..n]);
            }
        }
    }
    assert_eq!(roce, 729);
    assert!(other > 0, "the captures hold ARP frames too");
}
