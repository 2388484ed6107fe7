//! RoCE v2 over IPv6 GIDs and on 802.1Q VLANs, end to end, and the IPv6
//! Neighbor Discovery that finds the peers.
//!
//! - RC between two transport devices with IPv6 GIDs (SEND, WRITE, READ,
//!   both atomics, a lost packet and its go-back-N retransmission): every
//!   frame an IPv6 frame as A17 §17.3.1.2 and rxe's prepare6() make it
//!   (traffic class and hop limit of the address vector, flow label of the
//!   address vector (rxe always sends 0), next header UDP, UDP checksum 0),
//!   its ICRC right, the data where it belongs;
//! - the same on a VLAN, over IPv4 and over IPv6: every frame tagged with
//!   the port's VLAN id and priority; frames of other VLANs, untagged ones
//!   and priority-tagged ones counted (`wrong_vlan`) and dropped before any
//!   QP sees them;
//! - two hosts (device + neighbour table) on a loopback link that know only
//!   each other's IPv6 address, on a VLAN: Neighbor Discovery finds the
//!   MACs, then RC runs; with static neighbour entries no discovery at all;
//! - the Linux kernel's own Neighbor Discovery frames
//!   (`tests/vectors/ndisc/linux_ndisc.pcap`): each one parses, and our table
//!   sends Linux's solicitation and advertisement byte for byte;
//! - tshark (Wireshark) decodes the transport's IPv6 and VLAN-tagged
//!   frames, and our solicitations and advertisements (tagged or not), as
//!   we built them, with no malformed frame and no expert warning but the
//!   one tshark 4.0 raises for a zero UDP checksum over IPv6 (RoCE v2 sends
//!   0, A17 §17.3.2.4; RFC 6935 allows it for tunnels).

mod common;

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use ferroce::backend::{loopback, Burst};
use ferroce::host::neigh::{Lookup, NeighConfig, Neighbours};
use ferroce::host::pump::{pump, MAX_FRAME};
use ferroce::host::Host;
use ferroce::pcap;
use ferroce::time::{Duration as VDuration, Instant};
use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::{
    ArpRepr, EthernetFrame, Frame, IpRepr, MacAddr, NaFlags, NdpFrame, NdpRepr, VlanTag,
};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const V4_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const V4_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const V6_A: Ipv6Addr = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 1);
const V6_B: Ipv6Addr = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 2);
const MR_LEN: usize = 1 << 16;

// ---------------------------------------------------------------------------
// Two devices back to back in virtual time.

/// A device with one PD, one CQ, one 64 KiB region with every right, one QP.
struct End {
    dev: Device,
    cq: CqId,
    mr: MrKeys,
    qp: u32,
}

impl End {
    fn new(cfg: DeviceConfig) -> End {
        let mut dev = Device::new(cfg).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(256).unwrap();
        let mr = dev.reg_mr(MrSpec::new(pd, MR_LEN, Access::ALL)).unwrap();
        let qp = dev.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        End { dev, cq, mr, qp }
    }
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }
    fn mem(&self, off: usize, len: usize) -> Vec<u8> {
        self.dev.mr(self.mr.lkey).unwrap()[off..off + len].to_vec()
    }
    fn wcs(&mut self) -> Vec<Wc> {
        let mut v = Vec::new();
        while self.dev.poll_cq(self.cq, 64, &mut v) > 0 {}
        v
    }
}

/// How the two ends are set up.
#[derive(Clone, Copy)]
struct Setup {
    /// IPv6 GIDs (both devices also have an IPv4 one at index 0: the QPs
    /// pick the IPv6 one by `sgid_index` 1).
    ipv6: bool,
    vlan: Option<Vlan>,
    /// The address vectors' flow labels, A's and B's (rxe sends 0).
    flow_labels: (u32, u32),
    /// The address vectors' hop limits, A's and B's.
    hop_limits: (u8, u8),
    /// DSCP and ECN of every packet (106: DSCP 26, ECT(0)).
    traffic_class: u8,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            ipv6: true,
            vlan: None,
            flow_labels: (0, 0xABCDE),
            hop_limits: (64, 1),
            traffic_class: 106,
        }
    }
}

fn config(mac: MacAddr, v4: Ipv4Addr, v6: Ipv6Addr, vlan: Option<Vlan>) -> DeviceConfig {
    let mut c = DeviceConfig::new(mac, v4.into());
    c.gids.push(v6.into());
    c.vlan = vlan;
    c
}

/// RESET -> INIT -> RTR -> RTS with an address vector of our own choosing.
#[allow(clippy::too_many_arguments)]
fn connect(
    e: &mut End,
    remote_qp: u32,
    dmac: MacAddr,
    dgid: IpAddr,
    sgid_index: u8,
    hop_limit: u8,
    flow_label: u32,
    traffic_class: u8,
    sq_psn: u32,
    rq_psn: u32,
) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    e.dev.modify_qp(e.qp, &a, m).unwrap();
    a.qp_state = QpState::Rtr;
    a.ah_attr = Some(AddressVector {
        dgid,
        dmac,
        sgid_index,
        hop_limit,
        traffic_class,
        flow_label,
        src_port: None,
        int_telemetry: false,
        recovery: ferroce::transport::Recovery::GoBackN,
    });
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = remote_qp;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    let m = AttrMask::RC_RTR;
    e.dev.modify_qp(e.qp, &a, m).unwrap();
    a.qp_state = QpState::Rts;
    a.timeout = 10;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = 16;
    let m = AttrMask::STATE
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::SQ_PSN
        | AttrMask::MAX_QP_RD_ATOMIC;
    e.dev.modify_qp(e.qp, &a, m).unwrap();
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ 0x5A)
        .collect()
}

/// A frame one end wrote.
struct Sent {
    from: char,
    bytes: Vec<u8>,
}

/// Moves frames between `a` and `b` in virtual time, dropping the first
/// copy of A's request with PSN `drop_psn`, until both are idle; returns
/// every frame either wrote (the dropped one included).
fn shuttle(a: &mut Device, b: &mut Device, drop_psn: Option<u32>) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut buf = vec![0u8; MAX_FRAME];
    let mut now = Instant::ZERO;
    let mut dropped = false;
    for _ in 0..10_000 {
        let mut moved = false;
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            let f = buf[..n].to_vec();
            let psn = Frame::parse(&f).unwrap().psn().value();
            sent.push(Sent {
                from: 'a',
                bytes: f.clone(),
            });
            if Some(psn) == drop_psn && !dropped {
                dropped = true;
                continue;
            }
            b.handle(now, &f);
            moved = true;
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            let f = buf[..n].to_vec();
            sent.push(Sent {
                from: 'b',
                bytes: f.clone(),
            });
            a.handle(now, &f);
            moved = true;
        }
        if moved {
            continue;
        }
        match a.poll_timeout() {
            Some(t) => {
                now = t.max(now + VDuration::from_nanos(1));
                a.handle_timeout(now);
            }
            None => return sent,
        }
    }
    panic!("the two devices never went idle");
}

/// What a run left behind.
struct Run {
    a: End,
    b: End,
    sent: Vec<Sent>,
}

/// Two connected devices as `s` says run SEND (3 packets), SEND with
/// immediate, WRITE, READ (3 response packets), FETCH_ADD and
/// COMPARE_SWAP, with A's second packet lost once; everything must
/// complete and land.
fn run(s: Setup) -> Run {
    let mut a = End::new(config(MAC_A, V4_A, V6_A, s.vlan));
    let mut b = End::new(config(MAC_B, V4_B, V6_B, s.vlan));
    let (ga, gb, sgid): (IpAddr, IpAddr, u8) = if s.ipv6 {
        (V6_A.into(), V6_B.into(), 1)
    } else {
        (V4_A.into(), V4_B.into(), 0)
    };
    let (qa, qb) = (a.qp, b.qp);
    let tc = s.traffic_class;
    connect(
        &mut a,
        qb,
        MAC_B,
        gb,
        sgid,
        s.hop_limits.0,
        s.flow_labels.0,
        tc,
        100,
        200,
    );
    connect(
        &mut b,
        qa,
        MAC_A,
        ga,
        sgid,
        s.hop_limits.1,
        s.flow_labels.1,
        tc,
        200,
        100,
    );
    let data = pattern(1, 8192);
    a.dev.mr_mut(a.mr.lkey).unwrap()[..8192].copy_from_slice(&data);
    let remote = pattern(2, 2100);
    b.dev.mr_mut(b.mr.lkey).unwrap()[..2100].copy_from_slice(&remote);
    for (i, off) in [32768u64, 36864].into_iter().enumerate() {
        let sge = b.sge(off, 4096);
        b.dev
            .post_recv(
                qb,
                RecvWr {
                    wr_id: i as u64,
                    sges: smallvec::smallvec![sge],
                },
            )
            .unwrap();
    }
    let rb = |off: u64| (b.mr.addr + off, b.mr.rkey);
    let ops = [
        (SendOp::Send, a.sge(0, 3000)),
        (SendOp::SendWithImm(0x1234_5678), a.sge(0, 5)),
        (
            SendOp::Write {
                remote_addr: rb(8192).0,
                rkey: rb(8192).1,
            },
            a.sge(4096, 2500),
        ),
        (
            SendOp::Read {
                remote_addr: rb(0).0,
                rkey: rb(0).1,
            },
            a.sge(16384, 2100),
        ),
        (
            SendOp::FetchAdd {
                remote_addr: rb(20480).0,
                rkey: rb(20480).1,
                add: 3,
            },
            a.sge(24576, 8),
        ),
        (
            SendOp::CompareSwap {
                remote_addr: rb(20488).0,
                rkey: rb(20488).1,
                compare: 0,
                swap: 5,
            },
            a.sge(24584, 8),
        ),
    ];
    for (i, (op, sge)) in ops.into_iter().enumerate() {
        a.dev
            .post_send(qa, SendWr::new(i as u64, op, Payload::sge(sge)))
            .unwrap();
    }
    let sent = shuttle(&mut a.dev, &mut b.dev, Some(101));

    let wa = a.wcs();
    let wb = b.wcs();
    assert_eq!(wa.len(), 6, "{wa:?}");
    assert_eq!(wb.len(), 2, "{wb:?}");
    assert!(wa.iter().chain(&wb).all(|w| w.status == WcStatus::Success));
    assert_eq!(b.mem(32768, 3000), data[..3000]);
    assert_eq!(b.mem(36864, 5), data[..5]);
    assert_eq!(wb[1].imm_data, Some(0x1234_5678));
    assert_eq!(b.mem(8192, 2500), data[4096..6596]);
    assert_eq!(a.mem(16384, 2100), remote);
    let word = |e: &End, off: usize| u64::from_le_bytes(e.mem(off, 8).try_into().unwrap());
    assert_eq!((word(&b, 20480), word(&b, 20488)), (3, 5));
    assert_eq!((word(&a, 24576), word(&a, 24584)), (0, 0));
    assert!(
        a.dev.counters().retransmitted_pkts > 0,
        "the loss was repaired"
    );
    for e in [&a, &b] {
        let rx = e.dev.rx_counters();
        assert_eq!(
            (
                rx.malformed,
                rx.icrc_errors,
                rx.wrong_vlan,
                rx.wrong_destination
            ),
            (0, 0, 0, 0),
            "{rx}"
        );
        accounting(&e.dev);
    }
    Run { a, b, sent }
}

/// Every frame a device handled lands in exactly one counter.
fn accounting(d: &Device) {
    let r = d.rx_counters();
    let c = d.counters();
    assert_eq!(
        r.frames,
        r.not_roce
            + r.malformed
            + r.wrong_vlan
            + r.icrc_errors
            + r.wrong_destination
            + r.unsupported_transport
            + r.unknown_qp
            + r.cnp_received
            + c.state_drops
            + c.pkey_violation
            + c.wrong_source
            + c.rcvd_pkts,
        "{r} / {c}"
    );
}

/// Checks every frame of a run against what the setup asks for.
fn check_frames(r: &Run, s: Setup) {
    assert!(r.sent.len() > 15, "{} frames", r.sent.len());
    for f in &r.sent {
        let p = Frame::parse(&f.bytes).unwrap();
        assert!(p.icrc_ok());
        let (me, peer) = if f.from == 'a' {
            (&r.a, &r.b)
        } else {
            (&r.b, &r.a)
        };
        let (flow, hop) = if f.from == 'a' {
            (s.flow_labels.0, s.hop_limits.0)
        } else {
            (s.flow_labels.1, s.hop_limits.1)
        };
        let want_tag = s.vlan.map(|v| v.tag());
        assert_eq!(p.vlan(), want_tag);
        assert_eq!(p.eth().vlan, want_tag);
        let eth_len = if want_tag.is_some() { 18 } else { 14 };
        assert_eq!(p.ip_offset, eth_len);
        let repr = p.repr();
        assert_eq!(repr.eth.src, me.dev.config().mac);
        assert_eq!(repr.eth.dst, peer.dev.config().mac);
        assert_eq!(repr.udp.dst_port, 4791);
        assert_eq!(repr.udp.checksum, 0, "UDP checksum 0 (A17 §17.3.2.4)");
        assert!(repr.udp.src_port >= 0xC000);
        assert_eq!(repr.ip.dscp() << 2 | repr.ip.ecn().bits(), s.traffic_class);
        match repr.ip {
            IpRepr::V6(ip) => {
                assert!(s.ipv6);
                assert_eq!(ip.src, if f.from == 'a' { V6_A } else { V6_B });
                assert_eq!(ip.dst, if f.from == 'a' { V6_B } else { V6_A });
                assert_eq!(ip.flow_label, flow);
                assert_eq!(ip.hop_limit, hop);
                assert_eq!(ip.next_header, 17);
                // IPv6 payload length: UDP header through the ICRC.
                let pl = u16::from_be_bytes([f.bytes[eth_len + 4], f.bytes[eth_len + 5]]);
                assert_eq!(pl as usize, f.bytes.len() - eth_len - 40);
            }
            IpRepr::V4(ip) => {
                assert!(!s.ipv6);
                assert_eq!(ip.src, if f.from == 'a' { V4_A } else { V4_B });
                assert!(ip.dont_frag);
            }
        }
    }
}

#[test]
fn rc_over_ipv6_gids_end_to_end() {
    let s = Setup::default();
    let r = run(s);
    check_frames(&r, s);
    // A's frames carry the flow label rxe sends (0), B's its own.
    let labels: std::collections::BTreeSet<(char, u32)> = r
        .sent
        .iter()
        .filter_map(|f| match Frame::parse(&f.bytes).unwrap().ip() {
            IpRepr::V6(ip) => Some((f.from, ip.flow_label)),
            IpRepr::V4(_) => None,
        })
        .collect();
    assert_eq!(labels, [('a', 0), ('b', 0xABCDE)].into_iter().collect());
}

#[test]
fn rc_on_a_vlan_end_to_end_over_ipv4_and_ipv6() {
    for (ipv6, vlan) in [(false, Vlan::new(100, 5)), (true, Vlan::new(4094, 3))] {
        let s = Setup {
            ipv6,
            vlan: Some(vlan),
            ..Setup::default()
        };
        let r = run(s);
        check_frames(&r, s);
    }
    // Priority tags only (VID 0): tagged with the PCP, no VLAN.
    let s = Setup {
        vlan: Some(Vlan::new(0, 6)),
        ..Setup::default()
    };
    check_frames(&run(s), s);
}

#[test]
fn a_vlan_id_out_of_range_is_refused() {
    for v in [Vlan::new(4095, 0), Vlan::new(1, 8)] {
        let c = config(MAC_A, V4_A, V6_A, Some(v));
        assert!(matches!(Device::new(c), Err(Error::InvalidArgument(_))));
    }
}

/// A request frame of A's re-emitted with `tag` (the ICRC does not cover
/// the Ethernet header, so the rest is unchanged).
fn retag(frame: &[u8], tag: Option<VlanTag>) -> Vec<u8> {
    let f = Frame::parse(frame).unwrap();
    let mut r = f.repr();
    r.eth.vlan = tag;
    let mut buf = vec![0u8; MAX_FRAME];
    let n = r.emit(f.payload, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn frames_of_other_vlans_are_counted_and_dropped() {
    let tag = |vid: u16, pcp: u8| {
        Some(VlanTag {
            pcp,
            dei: false,
            vid,
        })
    };
    for (vlan, cases) in [
        (
            Some(Vlan::new(100, 5)),
            vec![
                ("our VLAN, another priority", tag(100, 0), true),
                ("another VLAN", tag(200, 5), false),
                ("untagged", None, false),
                ("priority tagged", tag(0, 5), false),
            ],
        ),
        (
            None,
            vec![
                ("untagged", None, true),
                ("priority tagged", tag(0, 3), true),
                ("a VLAN", tag(100, 0), false),
            ],
        ),
    ] {
        let mut a = End::new(config(MAC_A, V4_A, V6_A, vlan));
        let mut b = End::new(config(MAC_B, V4_B, V6_B, vlan));
        let (qa, qb) = (a.qp, b.qp);
        connect(&mut a, qb, MAC_B, V6_B.into(), 1, 64, 0, 0, 100, 200);
        connect(&mut b, qa, MAC_A, V6_A.into(), 1, 64, 0, 0, 200, 100);
        let sge = a.sge(0, 16);
        let w = SendOp::Write {
            remote_addr: b.mr.addr,
            rkey: b.mr.rkey,
        };
        a.dev
            .post_send(qa, SendWr::new(1, w, Payload::sge(sge)))
            .unwrap();
        let mut buf = vec![0u8; MAX_FRAME];
        let n = a.dev.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        let req = buf[..n].to_vec();
        for (what, t, accepted) in cases {
            let frame = retag(&req, t);
            assert_eq!(Frame::parse(&frame).unwrap().vlan(), t, "{what}");
            let rx0 = *b.dev.rx_counters();
            let c0 = b.dev.counters();
            b.dev.handle(Instant::ZERO, &frame);
            let rx = *b.dev.rx_counters();
            let c = b.dev.counters();
            assert_eq!(
                rx.wrong_vlan - rx0.wrong_vlan,
                u64::from(!accepted),
                "{what} on {vlan:?}"
            );
            assert_eq!(
                c.rcvd_pkts - c0.rcvd_pkts,
                u64::from(accepted),
                "{what} on {vlan:?}"
            );
            accounting(&b.dev);
        }
    }
}

// ---------------------------------------------------------------------------
// Hosts: neighbour discovery, then RC.

fn host(mac: MacAddr, v6: Ipv6Addr, vlan: Option<Vlan>, nc: NeighConfig) -> Host {
    let mut c = DeviceConfig::new(mac, v6.into());
    c.vlan = vlan;
    Host::new(c, nc).unwrap()
}

/// Connects one QP on each host (each knowing the other's MAC) and sends
/// a SEND from A to B over the link; returns when both completed.
fn send_between(
    a: &mut Host,
    b: &mut Host,
    pa: &mut loopback::LoopbackPort,
    pb: &mut loopback::LoopbackPort,
    mac_b: MacAddr,
    mac_a: MacAddr,
) {
    let setup = |d: &mut Device| {
        let pd = d.alloc_pd();
        let cq = d.create_cq(16).unwrap();
        let mr = d.reg_mr(MrSpec::new(pd, 4096, Access::ALL)).unwrap();
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        (cq, mr, qp)
    };
    let (cqa, mra, qpa) = setup(&mut a.dev);
    let (cqb, mrb, qpb) = setup(&mut b.dev);
    let p = ConnectParams::default();
    let (ga, gb) = (a.dev.config().gids[0], b.dev.config().gids[0]);
    connect_qp(&mut a.dev, qpa, qpb, mac_b, gb, &p, 1, 2).unwrap();
    connect_qp(&mut b.dev, qpb, qpa, mac_a, ga, &p, 2, 1).unwrap();
    a.dev.mr_mut(mra.lkey).unwrap()[..5].copy_from_slice(b"hello");
    let rsge = Sge {
        addr: mrb.addr,
        length: 64,
        lkey: mrb.lkey,
    };
    b.dev
        .post_recv(
            qpb,
            RecvWr {
                wr_id: 1,
                sges: smallvec::smallvec![rsge],
            },
        )
        .unwrap();
    let sge = Sge {
        addr: mra.addr,
        length: 5,
        lkey: mra.lkey,
    };
    a.dev
        .post_send(qpa, SendWr::new(2, SendOp::Send, Payload::sge(sge)))
        .unwrap();
    let (mut qa_out, mut qb_out) = (Burst::new(), Burst::new());
    let mut wcs: Vec<Wc> = Vec::new();
    let now = Instant::from_nanos(1);
    for _ in 0..100 {
        pump(a, pa, now, &mut qa_out);
        pump(b, pb, now, &mut qb_out);
        a.dev.poll_cq(cqa, 4, &mut wcs);
        b.dev.poll_cq(cqb, 4, &mut wcs);
        if wcs.len() == 2 {
            break;
        }
    }
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(&b.dev.mr(mrb.lkey).unwrap()[..5], b"hello");
}

/// Two hosts that know only each other's IPv6 address, on VLAN 100:
/// Neighbor Discovery (tagged) finds the MACs over the link, then the QPs
/// connect and a SEND crosses. A host on another VLAN of the same link is
/// never heard.
#[test]
fn two_hosts_find_each_other_by_neighbour_discovery_on_a_vlan_then_talk_rc() {
    let (mut pa, mut pb) = loopback::pair(64, 4352);
    let vlan = Some(Vlan::new(100, 3));
    let nc = NeighConfig::default();
    let mut a = host(MAC_A, V6_A, vlan, nc.clone());
    let mut b = host(MAC_B, V6_B, vlan, nc.clone());
    let (mut qa_out, mut qb_out) = (Burst::new(), Burst::new());
    let mut now = Instant::from_nanos(1);
    let mac_b = loop {
        if let Lookup::Found(m) = a.lookup(V6_B, now) {
            break m;
        }
        pump(&mut a, &mut pa, now, &mut qa_out);
        pump(&mut b, &mut pb, now, &mut qb_out);
        now += VDuration::from_micros(1);
        assert!(now < Instant::from_nanos(1_000_000), "no advertisement");
    };
    assert_eq!(mac_b, MAC_B);
    // b learnt a's MAC from the solicitation.
    assert_eq!(b.lookup(V6_A, now), Lookup::Found(MAC_A));
    send_between(&mut a, &mut b, &mut pa, &mut pb, mac_b, MAC_A);
    let (ca, cb) = (*a.neigh.counters(), *b.neigh.counters());
    assert_eq!(
        (ca.requests_sent, ca.replies_received, ca.resolved),
        (1, 1, 1)
    );
    assert_eq!((cb.requests_received, cb.replies_sent), (1, 1));
    assert_eq!(ca.wrong_vlan + cb.wrong_vlan, 0);

    // The same link, B now on VLAN 200: A's solicitations go unanswered
    // (B counts them as another VLAN's) and the lookup fails.
    let (mut pa, mut pb) = loopback::pair(64, 4352);
    let mut a = host(MAC_A, V6_A, vlan, nc.clone());
    let mut b = host(MAC_B, V6_B, Some(Vlan::new(200, 3)), nc);
    let mut now = Instant::from_nanos(1);
    let end = now + VDuration::from_secs(10);
    while a.lookup(V6_B, now) == Lookup::Pending {
        pump(&mut a, &mut pa, now, &mut qa_out);
        pump(&mut b, &mut pb, now, &mut qb_out);
        now += VDuration::from_millis(100);
        assert!(now < end);
    }
    assert_eq!(a.lookup(V6_B, now), Lookup::Failed);
    assert_eq!(b.neigh.counters().wrong_vlan, 3, "three solicitations");
    assert_eq!(b.neigh.counters().replies_sent, 0);
}

/// With each other's MAC in the static table, no discovery at all.
#[test]
fn static_neighbours_need_no_discovery() {
    let (mut pa, mut pb) = loopback::pair(64, 4352);
    let nc = |peer: Ipv6Addr, mac: MacAddr| NeighConfig {
        statics: vec![(peer.into(), mac)],
        ..NeighConfig::default()
    };
    let mut a = host(MAC_A, V6_A, None, nc(V6_B, MAC_B));
    let mut b = host(MAC_B, V6_B, None, nc(V6_A, MAC_A));
    let now = Instant::from_nanos(1);
    assert_eq!(a.lookup(V6_B, now), Lookup::Found(MAC_B));
    assert_eq!(b.lookup(IpAddr::V6(V6_A), now), Lookup::Found(MAC_A));
    send_between(&mut a, &mut b, &mut pa, &mut pb, MAC_B, MAC_A);
    let far = now + VDuration::from_secs(3600);
    assert_eq!(a.lookup(V6_B, far), Lookup::Found(MAC_B));
    for h in [&a, &b] {
        let c = h.neigh.counters();
        assert_eq!(c.requests_sent + c.replies_sent + c.requests_received, 0);
        assert_eq!(h.neigh.poll_timeout(), None);
    }
}

// ---------------------------------------------------------------------------
// The Linux kernel's Neighbor Discovery.

fn linux_ndisc() -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/ndisc/linux_ndisc.pcap");
    let mut r = pcap::open(&path).expect("open linux_ndisc.pcap");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("read linux_ndisc.pcap") {
        out.push(rec.data.to_vec());
    }
    out
}

fn next_frame(n: &mut Neighbours) -> Option<Vec<u8>> {
    let mut buf = [0u8; 128];
    n.poll_transmit(&mut buf).map(|k| buf[..k].to_vec())
}

#[test]
fn linux_neighbour_discovery_parses_and_ours_is_linuxs_byte_for_byte() {
    let frames = linux_ndisc();
    assert_eq!(frames.len(), 29);
    let parsed: Vec<NdpFrame> = frames
        .iter()
        .map(|f| {
            NdpFrame::parse(f)
                .unwrap()
                .expect("a solicitation or advertisement")
        })
        .collect();
    // Duplicate address detection: from ::, no link-layer option (the
    // nonce option, RFC 7527, is skipped).
    let ll_a: Ipv6Addr = "fe80::ff:fe00:1".parse().unwrap();
    assert_eq!(parsed[0].src, Ipv6Addr::UNSPECIFIED);
    assert_eq!(
        parsed[0].ndp,
        NdpRepr::NeighborSolicit {
            target: ll_a,
            lladdr: None
        }
    );
    // Every re-check answer: solicited, no override, no link-layer option.
    for p in &parsed[5..] {
        if let NdpRepr::NeighborAdvert { flags, lladdr, .. } = p.ndp {
            assert_eq!(
                flags,
                NaFlags {
                    router: false,
                    solicited: true,
                    override_: false
                }
            );
            assert_eq!(lladdr, None);
        }
    }

    // Our A resolving fd18::2 sends Linux A's solicitation (frame 3) ...
    let nc = NeighConfig::default();
    let mut a = Neighbours::new(MAC_A, [IpAddr::V6(V6_A)], nc.clone());
    let t = Instant::from_nanos(1);
    assert_eq!(a.lookup(V6_B, t), Lookup::Pending);
    assert_eq!(next_frame(&mut a).unwrap(), frames[2]);
    // ... our B answers it with Linux B's advertisement (frame 4) ...
    let mut b = Neighbours::new(MAC_B, [IpAddr::V6(V6_B)], nc.clone());
    assert!(b.handle(t, &frames[2]));
    assert_eq!(next_frame(&mut b).unwrap(), frames[3]);
    assert_eq!(b.lookup(V6_A, t), Lookup::Found(MAC_A));
    // ... which resolves fd18::2 for our A.
    assert!(a.handle(t, &frames[3]));
    assert_eq!(a.lookup(V6_B, t), Lookup::Found(MAC_B));

    // Linux B re-checking fd18::1 from its link-local address (frame 5):
    // our A answers it unicast, solicited, with its MAC.
    assert!(a.handle(t, &frames[4]));
    let na = NdpFrame::parse(&next_frame(&mut a).unwrap())
        .unwrap()
        .unwrap();
    let ll_b: Ipv6Addr = "fe80::ff:fe00:2".parse().unwrap();
    assert_eq!((na.eth.dst, na.src, na.dst), (MAC_B, V6_A, ll_b));
    assert!(matches!(
        na.ndp,
        NdpRepr::NeighborAdvert { flags, target: V6_A, lladdr: Some(MAC_A) }
            if flags.solicited && flags.override_
    ));

    // Our A's entry gone stale: a unicast re-check, answered by Linux B as
    // in frame 8 (no link-layer option) — that answer confirms it.
    let later = t + VDuration::from_secs(31);
    assert_eq!(a.lookup(V6_B, later), Lookup::Found(MAC_B));
    let probe = NdpFrame::parse(&next_frame(&mut a).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!((probe.eth.dst, probe.dst), (MAC_B, V6_B));
    assert!(a.poll_timeout().is_some());
    assert_eq!(parsed[7].ndp.target(), V6_B);
    assert!(a.handle(later, &frames[7]));
    assert_eq!(a.poll_timeout(), None, "the re-check is answered");
    assert_eq!(a.counters().resolved, 2);
    assert_eq!(a.counters().malformed + b.counters().malformed, 0);
}

// ---------------------------------------------------------------------------
// tshark.

/// How long one tshark run may take.
const TSHARK_LIMIT: Duration = Duration::from_secs(120);
const AGGREGATOR: char = '|';

fn tshark_path() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("tshark"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "tshark (Wireshark) is not installed, or not on PATH: this test needs it. \
                 Run scripts/setup.sh, which installs it (Debian package tshark)."
            )
        })
}

/// What tshark said of one frame: each field's occurrences.
struct Row(HashMap<String, Vec<String>>);

impl Row {
    fn first(&self, f: &str) -> Option<&str> {
        self.0.get(f).and_then(|v| v.first()).map(String::as_str)
    }
    fn all(&self, f: &str) -> Vec<&str> {
        self.0
            .get(f)
            .map_or(Vec::new(), |v| v.iter().map(String::as_str).collect())
    }
    fn num(&self, f: &str) -> Option<u64> {
        let v = self.first(f)?;
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    }
    /// A tshark boolean: 4.0 prints 1 / 0, later versions True / False.
    fn flag(&self, f: &str) -> Option<bool> {
        match self.first(f)? {
            "1" | "True" | "true" => Some(true),
            "0" | "False" | "false" => Some(false),
            _ => None,
        }
    }
}

/// Writes `frames` to a pcap and has tshark read `fields` of each
/// (decoding UDP 4791 as RoCE); one Row a frame.
fn tshark(frames: &[Vec<u8>], fields: &[&str]) -> Vec<Row> {
    let dir = common::TempDir::new();
    let config = dir.path().join("wireshark-config");
    std::fs::create_dir(&config).unwrap();
    let file = dir.path().join("frames.pcap");
    let mut w = pcap::create(&file, pcap::Precision::Nano).expect("create pcap");
    for (i, f) in frames.iter().enumerate() {
        w.write(1_700_000_000_000_000_000 + i as u64 * 1_000, f)
            .expect("write pcap");
    }
    w.flush().expect("flush pcap");
    drop(w);
    let mut cmd = Command::new(tshark_path());
    cmd.env("WIRESHARK_CONFIG_DIR", &config)
        .arg("-n")
        .arg("-r")
        .arg(&file)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(["--disable-protocol", "rpcordma"])
        .args(["-T", "fields", "-E", "header=n", "-E", "separator=/t"])
        .args(["-E", "occurrence=a"])
        .arg(format!("-Eaggregator={AGGREGATOR}"));
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = common::spawn(&mut cmd, TSHARK_LIMIT).wait();
    assert!(out.ok(), "tshark failed:\n{}", out.all());
    let rows: Vec<Row> = out
        .stdout
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), fields.len(), "tshark line {line:?}");
            Row(fields
                .iter()
                .zip(cols)
                .map(|(f, v)| {
                    let v = if v.is_empty() {
                        Vec::new()
                    } else {
                        v.split(AGGREGATOR).map(str::to_string).collect()
                    };
                    (f.to_string(), v)
                })
                .collect())
        })
        .collect();
    assert_eq!(rows.len(), frames.len(), "{}", out.all());
    rows
}

/// Expert info severities and group (epan/proto.h).
const PI_WARN: u64 = 0x0060_0000;
const PI_ERROR: u64 = 0x0080_0000;
const PI_CHECKSUM: u64 = 0x0100_0000;

/// No malformed frame, and no expert item of severity warning or error
/// except (when `allow_v6_zero_udp`) tshark's "Illegal checksum value (0)"
/// for UDP over IPv6 (see tests/tshark.rs, `ipv6_zero_udp_checksum`);
/// returns how many of those it allowed.
fn no_trouble(what: &str, row: &Row, allow_v6_zero_udp: bool) -> usize {
    let mut allowed = 0;
    assert!(row.first("_ws.malformed").is_none(), "{what}: malformed");
    let sev = row.all("_ws.expert.severity");
    let grp = row.all("_ws.expert.group");
    let msg = row.all("_ws.expert.message");
    for (i, s) in sev.iter().enumerate() {
        let s = s.parse::<u64>().unwrap_or(u64::MAX);
        let g = grp.get(i).and_then(|g| g.parse::<u64>().ok()).unwrap_or(0);
        let m = msg.get(i).copied().unwrap_or("");
        let zero_udp = s == PI_ERROR && g == PI_CHECKSUM && m == "Illegal checksum value (0)";
        assert!(
            s < PI_WARN || (allow_v6_zero_udp && zero_udp),
            "{what}: expert item {s:#x} {g:#x} {m:?}"
        );
        allowed += usize::from(s >= PI_WARN);
    }
    allowed
}

const ROCE_FIELDS: &[&str] = &[
    "eth.src",
    "eth.dst",
    "vlan.id",
    "vlan.priority",
    "ip.src",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.tclass.dscp",
    "ipv6.tclass.ecn",
    "ipv6.flow",
    "ipv6.hlim",
    "ipv6.nxt",
    "ipv6.plen",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "udp.checksum",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.padcnt",
    "infiniband.invariant.crc",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.group",
    "_ws.expert.message",
];

/// Every frame the transport sent over IPv6, over IPv4 on a VLAN and over
/// IPv6 on a VLAN decodes in tshark as our parser reads it: Ethernet and
/// the tag, the IPv6 header field by field, UDP, the BTH, and the ICRC
/// where we put it.
#[test]
fn ipv6_and_vlan_rc_frames_decode_in_tshark() {
    let setups = [
        Setup::default(),
        Setup {
            ipv6: false,
            vlan: Some(Vlan::new(100, 5)),
            ..Setup::default()
        },
        Setup {
            vlan: Some(Vlan::new(4094, 3)),
            ..Setup::default()
        },
    ];
    let frames: Vec<Vec<u8>> = setups
        .iter()
        .flat_map(|s| run(*s).sent.into_iter().map(|f| f.bytes))
        .collect();
    let rows = tshark(&frames, ROCE_FIELDS);
    let mut v6 = 0;
    let mut allowed = 0;
    for (i, (f, row)) in frames.iter().zip(&rows).enumerate() {
        let p = Frame::parse(f).unwrap();
        let r = p.repr();
        let what = format!("frame {} ({} psn {})", i + 1, p.opcode(), p.psn().value());
        assert_eq!(
            row.first("eth.src"),
            Some(&*r.eth.src.to_string()),
            "{what}"
        );
        assert_eq!(
            row.first("eth.dst"),
            Some(&*r.eth.dst.to_string()),
            "{what}"
        );
        match r.eth.vlan {
            Some(t) => {
                assert_eq!(row.num("vlan.id"), Some(t.vid.into()), "{what}");
                assert_eq!(row.num("vlan.priority"), Some(t.pcp.into()), "{what}");
            }
            None => assert_eq!(row.first("vlan.id"), None, "{what}"),
        }
        match r.ip {
            IpRepr::V6(ip) => {
                let addr = |f: &str| row.first(f).and_then(|a| a.parse::<Ipv6Addr>().ok());
                assert_eq!(addr("ipv6.src"), Some(ip.src), "{what}");
                assert_eq!(addr("ipv6.dst"), Some(ip.dst), "{what}");
                assert_eq!(row.num("ipv6.tclass.dscp"), Some(ip.dscp.into()), "{what}");
                assert_eq!(row.num("ipv6.tclass.ecn"), Some(ip.ecn.bits().into()));
                assert_eq!(row.num("ipv6.flow"), Some(ip.flow_label.into()), "{what}");
                assert_eq!(row.num("ipv6.hlim"), Some(ip.hop_limit.into()), "{what}");
                assert_eq!(row.num("ipv6.nxt"), Some(17), "{what}");
                let plen = f.len() - p.ip_offset - 40;
                assert_eq!(row.num("ipv6.plen"), Some(plen as u64), "{what}");
                assert_eq!(row.first("ip.src"), None, "{what}");
            }
            IpRepr::V4(ip) => {
                assert_eq!(row.first("ip.src"), Some(&*ip.src.to_string()), "{what}");
                assert_eq!(row.first("ipv6.src"), None, "{what}");
            }
        }
        assert_eq!(
            row.num("udp.srcport"),
            Some(r.udp.src_port.into()),
            "{what}"
        );
        assert_eq!(row.num("udp.dstport"), Some(4791), "{what}");
        let udp_len = f.len() - p.ip_offset - r.ip.header_len();
        assert_eq!(row.num("udp.length"), Some(udp_len as u64), "{what}");
        assert_eq!(row.num("udp.checksum"), Some(0), "{what}");
        assert_eq!(row.num("infiniband.bth.opcode"), Some(p.opcode().0.into()));
        assert_eq!(row.num("infiniband.bth.destqp"), Some(p.dest_qp().into()));
        assert_eq!(row.num("infiniband.bth.psn"), Some(p.psn().value().into()));
        assert_eq!(
            row.num("infiniband.bth.padcnt"),
            Some(p.pad.into()),
            "{what}"
        );
        let icrc: String = f[f.len() - 4..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            row.num("infiniband.invariant.crc"),
            u64::from_str_radix(&icrc, 16).ok(),
            "{what}: the ICRC where we put it"
        );
        let is_v6 = matches!(r.ip, IpRepr::V6(_));
        v6 += usize::from(is_v6);
        allowed += no_trouble(&what, row, is_v6);
    }
    println!(
        "{} frames ({v6} IPv6) decoded as built; {allowed} IPv6 zero-UDP-checksum items allowed",
        frames.len()
    );
    // tshark 4.0 flags each IPv6 frame's zero UDP checksum, once.
    assert_eq!(allowed, v6);
}

const ND_FIELDS: &[&str] = &[
    "eth.src",
    "eth.dst",
    "vlan.id",
    "vlan.priority",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.hlim",
    "ipv6.flow",
    "icmpv6.type",
    "icmpv6.code",
    "icmpv6.checksum.status",
    "icmpv6.nd.ns.target_address",
    "icmpv6.nd.na.target_address",
    "icmpv6.nd.na.flag.r",
    "icmpv6.nd.na.flag.s",
    "icmpv6.nd.na.flag.o",
    "icmpv6.opt.type",
    "icmpv6.opt.linkaddr",
    "arp.opcode",
    "arp.src.hw_mac",
    "arp.src.proto_ipv4",
    "arp.dst.proto_ipv4",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.group",
    "_ws.expert.message",
];

/// Our solicitations (multicast for resolution, unicast for a re-check)
/// and advertisements, untagged and on a VLAN, and our tagged ARP, as
/// tshark reads them: the ICMPv6 checksum good, hop limit 255, the target,
/// the flags, the link-layer option, the multicast MAC.
#[test]
fn neighbour_discovery_frames_decode_in_tshark() {
    let mut frames = Vec::new();
    for vlan in [None, Some(Vlan::new(100, 3))] {
        let c = NeighConfig::default();
        let ips = |v4: Ipv4Addr, v6: Ipv6Addr| [IpAddr::V4(v4), IpAddr::V6(v6)];
        let mut a = Neighbours::new(MAC_A, ips(V4_A, V6_A), c.clone()).with_vlan(vlan);
        let mut b = Neighbours::new(MAC_B, ips(V4_B, V6_B), c).with_vlan(vlan);
        let t = Instant::from_nanos(1);
        a.lookup(V6_B, t);
        a.lookup(V4_B, t);
        while let Some(f) = next_frame(&mut a) {
            assert!(b.handle(t, &f));
            frames.push(f);
        }
        while let Some(f) = next_frame(&mut b) {
            assert!(a.handle(t, &f));
            frames.push(f);
        }
        // A stale entry's unicast re-check, and its answer.
        let later = t + VDuration::from_secs(31);
        assert_eq!(a.lookup(V6_B, later), Lookup::Found(MAC_B));
        let probe = next_frame(&mut a).unwrap();
        b.handle(later, &probe);
        frames.push(probe);
        frames.push(next_frame(&mut b).unwrap());
    }
    assert_eq!(frames.len(), 12);
    let rows = tshark(&frames, ND_FIELDS);
    println!(
        "{} Neighbor Discovery and ARP frames decoded as built",
        rows.len()
    );
    for (i, (f, row)) in frames.iter().zip(&rows).enumerate() {
        let what = format!("frame {}", i + 1);
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(
            row.first("eth.dst"),
            Some(&*eth.dst().to_string()),
            "{what}"
        );
        match eth.vlan() {
            Some(t) => {
                assert_eq!(row.num("vlan.id"), Some(t.vid.into()), "{what}");
                assert_eq!(row.num("vlan.priority"), Some(t.pcp.into()), "{what}");
            }
            None => assert_eq!(row.first("vlan.id"), None, "{what}"),
        }
        assert_eq!(no_trouble(&what, row, false), 0);
        let Some(nd) = NdpFrame::parse(f).unwrap() else {
            // ARP.
            let p = ferroce::wire::ArpPacket::new_checked(eth.payload()).unwrap();
            let arp = ArpRepr::parse(&p).unwrap();
            let op = if arp.op == ferroce::wire::ArpOp::Request {
                1
            } else {
                2
            };
            assert_eq!(row.num("arp.opcode"), Some(op), "{what}");
            assert_eq!(row.first("arp.src.hw_mac"), Some(&*arp.sha.to_string()));
            assert_eq!(row.first("arp.dst.proto_ipv4"), Some(&*arp.tpa.to_string()));
            continue;
        };
        let addr = |f: &str| row.first(f).and_then(|a| a.parse::<Ipv6Addr>().ok());
        assert_eq!(addr("ipv6.src"), Some(nd.src), "{what}");
        assert_eq!(addr("ipv6.dst"), Some(nd.dst), "{what}");
        assert_eq!(row.num("ipv6.hlim"), Some(255), "{what}");
        assert_eq!(row.num("ipv6.flow"), Some(0), "{what}");
        assert_eq!(row.num("icmpv6.code"), Some(0), "{what}");
        assert_eq!(row.num("icmpv6.checksum.status"), Some(1), "{what}: good");
        match nd.ndp {
            NdpRepr::NeighborSolicit { target, lladdr } => {
                assert_eq!(row.num("icmpv6.type"), Some(135), "{what}");
                assert_eq!(addr("icmpv6.nd.ns.target_address"), Some(target));
                assert_eq!(row.num("icmpv6.opt.type"), Some(1), "{what}");
                assert_eq!(
                    row.first("icmpv6.opt.linkaddr"),
                    lladdr.map(|m| m.to_string()).as_deref()
                );
                // Resolution goes to the solicited-node address's MAC.
                if nd.dst.is_multicast() {
                    let o = target.octets();
                    let want = MacAddr([0x33, 0x33, 0xff, o[13], o[14], o[15]]);
                    assert_eq!(eth.dst(), want, "{what}");
                }
            }
            NdpRepr::NeighborAdvert {
                flags,
                target,
                lladdr,
            } => {
                assert_eq!(row.num("icmpv6.type"), Some(136), "{what}");
                assert_eq!(addr("icmpv6.nd.na.target_address"), Some(target));
                assert_eq!(row.flag("icmpv6.nd.na.flag.r"), Some(flags.router));
                assert_eq!(row.flag("icmpv6.nd.na.flag.s"), Some(flags.solicited));
                assert_eq!(row.flag("icmpv6.nd.na.flag.o"), Some(flags.override_));
                assert_eq!(row.num("icmpv6.opt.type"), Some(2), "{what}");
                assert_eq!(
                    row.first("icmpv6.opt.linkaddr"),
                    lladdr.map(|m| m.to_string()).as_deref()
                );
            }
        }
    }
}
