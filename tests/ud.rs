//! The UD transport: two devices back to back in virtual time (datagrams
//! both ways, IPv4 and IPv6, the GRH area, immediate data), every drop
//! rule with its counter (Q_Key, no receive, short buffer, wrong
//! transport, state), the verbs' refusals, the UD state transitions; and
//! rxe's `ibv_ud_pingpong` capture, whose datagrams our requester must
//! send byte for byte and our receiver must take.

use core::net::IpAddr;
use ferroce::time::Instant;
use ferroce::transport::ud;
use ferroce::transport::*;
use ferroce::wire::opcode::Op;
use ferroce::wire::{Frame, IpRepr, MacAddr, Opcode};

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const QKEY: u32 = 0x1111_1111;

struct End {
    dev: Device,
    cq: CqId,
    qpn: u32,
    lkey: Lkey,
    /// The region's virtual address.
    base: u64,
    ip: IpAddr,
    mac: MacAddr,
}

const BUF: usize = 64 * 1024;

fn end(mac: MacAddr, ip: IpAddr, qkey: u32, sq_psn: u32) -> End {
    let mut cfg = DeviceConfig::new(mac, ip);
    cfg.port_mtu = Mtu::Mtu4096;
    let mut dev = Device::new(cfg).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(256).unwrap();
    let caps = QpCaps {
        qp_type: QpType::Ud,
        ..QpCaps::default()
    };
    let qpn = dev.create_qp(pd, cq, cq, caps).unwrap();
    let keys = dev
        .reg_mr(MrSpec::new(pd, BUF, Access::LOCAL_WRITE))
        .unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qkey,
        ..QpAttr::default()
    };
    dev.modify_qp(qpn, &a, AttrMask::UD_INIT).unwrap();
    a.qp_state = QpState::Rtr;
    dev.modify_qp(qpn, &a, AttrMask::STATE).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn;
    dev.modify_qp(qpn, &a, AttrMask::UD_RTS).unwrap();
    End {
        dev,
        cq,
        qpn,
        lkey: keys.lkey,
        base: keys.addr,
        ip,
        mac,
    }
}

fn v4() -> (End, End) {
    (
        end(MAC_A, "198.18.0.1".parse().unwrap(), QKEY, 100),
        end(MAC_B, "198.18.0.2".parse().unwrap(), QKEY, 200),
    )
}

fn av_to(to: &End) -> AddressVector {
    AddressVector {
        dgid: to.ip,
        dmac: to.mac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        src_port: None,
        int_telemetry: false,
        recovery: ferroce::transport::Recovery::GoBackN,
    }
}

/// A destination on `from`'s device: a new address handle to `to`.
fn dest(from: &mut End, to: &End, qkey: u32) -> UdDest {
    UdDest {
        ah: from.dev.create_ah(&av_to(to)).unwrap(),
        remote_qpn: to.qpn,
        remote_qkey: qkey,
    }
}

/// `len` bytes at offset `at` of `e`'s region.
fn sge(e: &End, at: u64, len: u32) -> Sge {
    Sge {
        addr: e.base + at,
        length: len,
        lkey: e.lkey,
    }
}

/// Posts a receive of `len` bytes at offset `at` of `e`'s region.
fn recv(e: &mut End, id: u64, at: u64, len: u32) {
    let s = sge(e, at, len);
    e.dev
        .post_recv(
            e.qpn,
            RecvWr {
                wr_id: id,
                sges: smallvec::smallvec![s],
            },
        )
        .unwrap();
}

/// `from` sends `data` (placed at offset 0 of its region) to `to`.
fn send(from: &mut End, to: &End, id: u64, op: SendOp, data: &[u8], qkey: u32) {
    from.dev.mr_mut(from.lkey).unwrap()[..data.len()].copy_from_slice(data);
    let s = sge(from, 0, data.len() as u32);
    let d = dest(from, to, qkey);
    let wr = SendWr::ud(id, op, Payload::sge(s), d);
    from.dev.post_send(from.qpn, wr).unwrap();
}

/// Every frame `from` has to send, handed to `to`; returns them.
fn deliver(from: &mut End, to: &mut End) -> Vec<Vec<u8>> {
    let now = Instant::from_nanos(0);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 9216];
    while let Some(n) = from.dev.poll_transmit(now, &mut buf) {
        to.dev.handle(now, &buf[..n]);
        out.push(buf[..n].to_vec());
    }
    out
}

fn wcs(e: &mut End) -> Vec<Wc> {
    let mut v = Vec::new();
    e.dev.poll_cq(e.cq, 64, &mut v);
    v
}

#[test]
fn datagrams_both_ways_with_the_grh_area_and_immediate_data() {
    let (mut a, mut b) = v4();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    recv(&mut b, 1, 4096, 2048);
    send(&mut a, &b, 10, SendOp::Send, &data, QKEY);
    let frames = deliver(&mut a, &mut b);
    assert_eq!(frames.len(), 1);
    let f = Frame::parse(&frames[0]).unwrap();
    assert!(f.icrc_ok());
    assert_eq!(f.opcode(), Opcode::ud(Op::SendOnly));
    assert_eq!(f.psn().value(), 100);
    assert!(!f.ack_req(), "UD asks no ACK");
    let deth = f.ext().deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (QKEY, a.qpn));
    assert_eq!(f.dest_qp(), b.qpn);
    // The sender's completion needs no answer; nothing comes back.
    let w = wcs(&mut a);
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (10, WcStatus::Success, WcOpcode::Send)
    );
    assert!(deliver(&mut b, &mut a).is_empty());
    let w = wcs(&mut b);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].status, WcStatus::Success);
    assert_eq!(w[0].opcode, WcOpcode::Recv);
    assert_eq!(w[0].byte_len, 40 + 1000);
    assert_eq!(w[0].src_qp, Some(a.qpn));
    let mem = b.dev.mr(b.lkey).unwrap();
    let grh = &mem[4096..4096 + 40];
    assert_eq!(&grh[..20], &[0u8; 20], "IPv4: 20 zero bytes first");
    assert_eq!(grh[20] >> 4, 4);
    assert_eq!(&grh[32..36], &[198, 18, 0, 1], "the IPv4 source");
    assert_eq!(&grh[36..40], &[198, 18, 0, 2], "the IPv4 destination");
    assert_eq!(&mem[4096 + 40..4096 + 1040], &data[..]);
    // Back, with immediate data; the PSN counts packets.
    recv(&mut a, 2, 8192, 2048);
    send(
        &mut b,
        &a,
        20,
        SendOp::SendWithImm(0xfeed),
        &data[..5],
        QKEY,
    );
    let frames = deliver(&mut b, &mut a);
    let f = Frame::parse(&frames[0]).unwrap();
    assert_eq!(f.opcode(), Opcode::ud(Op::SendOnlyWithImmediate));
    assert_eq!((f.pad, f.payload.len()), (3, 5));
    let w = wcs(&mut a);
    let r = w.iter().find(|w| w.wr_id == 2).unwrap();
    assert_eq!(
        (r.byte_len, r.imm_data, r.src_qp),
        (45, Some(0xfeed), Some(b.qpn))
    );
    send(&mut a, &b, 11, SendOp::Send, &data[..8], QKEY);
    let f = deliver(&mut a, &mut b);
    assert_eq!(Frame::parse(&f[0]).unwrap().psn().value(), 101);
    assert_eq!(b.dev.qp_counters(b.qpn).unwrap().out_of_buffer, 1);
}

#[test]
fn ipv6_datagrams_carry_the_ipv6_header_as_their_grh() {
    let mut a = end(MAC_A, "2001:db8::1".parse().unwrap(), QKEY, 0);
    let mut b = end(MAC_B, "2001:db8::2".parse().unwrap(), QKEY, 0);
    recv(&mut b, 1, 0, 4096 + 40);
    let data = vec![0x5a; 4096];
    send(&mut a, &b, 1, SendOp::Send, &data, QKEY);
    let frames = deliver(&mut a, &mut b);
    let f = Frame::parse(&frames[0]).unwrap();
    assert!(matches!(f.ip(), IpRepr::V6(_)));
    let w = wcs(&mut b);
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 4136));
    let mem = b.dev.mr(b.lkey).unwrap();
    let ip_at = f.ip_offset;
    assert_eq!(&mem[..40], &frames[0][ip_at..ip_at + 40]);
    assert_eq!(&mem[40..4136], &data[..]);
}

#[test]
fn qkey_rules_drop_with_a_counter_and_the_high_bit_means_the_qps_own() {
    let (mut a, mut b) = v4();
    recv(&mut b, 1, 0, 256);
    send(&mut a, &b, 1, SendOp::Send, b"hello", 0x2222_2222);
    deliver(&mut a, &mut b);
    assert!(wcs(&mut b).is_empty());
    assert_eq!(b.dev.qp_counters(b.qpn).unwrap().qkey_violation, 1);
    // Bit 31 set: the sender's own Q_Key (QKEY) goes on the wire.
    send(&mut a, &b, 2, SendOp::Send, b"hello", 0x8000_0000);
    let f = deliver(&mut a, &mut b);
    assert_eq!(Frame::parse(&f[0]).unwrap().ext().deth.unwrap().qkey, QKEY);
    let w = wcs(&mut b);
    assert_eq!((w.len(), w[0].wr_id, w[0].byte_len), (1, 1, 45));
}

#[test]
fn no_receive_or_a_short_one_drops_the_datagram_and_keeps_the_wqe() {
    let (mut a, mut b) = v4();
    send(&mut a, &b, 1, SendOp::Send, &[1; 100], QKEY);
    let back = deliver(&mut a, &mut b);
    assert_eq!(back.len(), 1);
    assert!(deliver(&mut b, &mut a).is_empty(), "no RNR NAK on UD");
    assert_eq!(b.dev.qp_counters(b.qpn).unwrap().out_of_buffer, 1);
    // 40 + 100 bytes do not fit 139: dropped, and the WQE waits.
    recv(&mut b, 7, 0, 139);
    send(&mut a, &b, 2, SendOp::Send, &[2; 100], QKEY);
    deliver(&mut a, &mut b);
    assert!(wcs(&mut b).is_empty());
    assert_eq!(b.dev.qp_counters(b.qpn).unwrap().resp_local_length_error, 1);
    send(&mut a, &b, 3, SendOp::Send, &[3; 99], QKEY);
    deliver(&mut a, &mut b);
    let w = wcs(&mut b);
    assert_eq!((w[0].wr_id, w[0].byte_len), (7, 139));
    assert_eq!(b.dev.mr(b.lkey).unwrap()[40..139], [3; 99]);
}

#[test]
fn the_verbs_refuse_what_ud_cannot_send() {
    let (mut a, b) = v4();
    let s = sge(&a, 0, 8);
    let write = SendOp::Write {
        remote_addr: 0,
        rkey: 1,
    };
    let d = dest(&mut a, &b, QKEY);
    let post = |a: &mut End, op, len, d| {
        let s = sge(a, 0, len);
        a.dev
            .post_send(a.qpn, SendWr::ud(1, op, Payload::sge(s), d))
    };
    let r = post(&mut a, write, 8, d);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let r = a
        .dev
        .post_send(a.qpn, SendWr::new(1, SendOp::Send, Payload::sge(s)));
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "no destination: {r:?}"
    );
    let r = post(&mut a, SendOp::Send, 4097, d);
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "above the port MTU: {r:?}"
    );
    // Address handles are checked when made, and must exist when used.
    let mut far = av_to(&b);
    far.sgid_index = 3;
    assert!(matches!(a.dev.create_ah(&far), Err(Error::InvalidAttr(_))));
    far = av_to(&b);
    far.dgid = "2001:db8::2".parse().unwrap();
    assert!(matches!(a.dev.create_ah(&far), Err(Error::InvalidAttr(_))));
    a.dev.destroy_ah(d.ah).unwrap();
    assert_eq!(post(&mut a, SendOp::Send, 8, d), Err(Error::NoSuchAh));
    // Destroyed between post and send: the send completes in error.
    let d = dest(&mut a, &b, QKEY);
    post(&mut a, SendOp::Send, 8, d).unwrap();
    a.dev.destroy_ah(d.ah).unwrap();
    let mut buf = vec![0u8; 2048];
    assert_eq!(a.dev.poll_transmit(Instant::from_nanos(0), &mut buf), None);
    let w = wcs(&mut a);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::LocQpOpErr));
}

#[test]
fn ud_state_transitions_take_a_qkey_and_a_first_psn() {
    let mut dev = Device::new(DeviceConfig::new(MAC_A, "198.18.0.1".parse().unwrap())).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(4).unwrap();
    let caps = QpCaps {
        qp_type: QpType::Ud,
        ..QpCaps::default()
    };
    let q = dev.create_qp(pd, cq, cq, caps).unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qkey: 5,
        ..QpAttr::default()
    };
    let rc_init = AttrMask::RC_INIT;
    assert_eq!(
        dev.modify_qp(q, &a, rc_init),
        Err(Error::MissingAttr("QKEY"))
    );
    dev.modify_qp(q, &a, AttrMask::UD_INIT).unwrap();
    a.qp_state = QpState::Rtr;
    assert_eq!(
        dev.modify_qp(q, &a, AttrMask::STATE | AttrMask::PATH_MTU),
        Err(Error::UnexpectedAttr("PATH_MTU"))
    );
    dev.modify_qp(q, &a, AttrMask::STATE).unwrap();
    a.qp_state = QpState::Rts;
    assert_eq!(
        dev.modify_qp(q, &a, AttrMask::STATE),
        Err(Error::MissingAttr("SQ_PSN"))
    );
    a.qkey = 9;
    dev.modify_qp(q, &a, AttrMask::UD_RTS | AttrMask::QKEY)
        .unwrap();
    assert_eq!(dev.query_qp(q).unwrap().1.qkey, 9);
}

#[test]
fn a_datagram_to_an_rc_qp_and_a_qp_not_ready_are_dropped_and_counted() {
    let (mut a, mut b) = v4();
    // b's QP back to RESET: a datagram finds it unable to receive.
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    b.dev.modify_qp(b.qpn, &reset, AttrMask::STATE).unwrap();
    send(&mut a, &b, 1, SendOp::Send, b"x", QKEY);
    deliver(&mut a, &mut b);
    assert_eq!(b.dev.qp_counters(b.qpn).unwrap().state_drops, 1);
    // An RC QP of the same number on another device takes no UD packet.
    let mut c = Device::new(DeviceConfig::new(MAC_B, b.ip)).unwrap();
    let pd = c.alloc_pd();
    let cq = c.create_cq(4).unwrap();
    let caps = QpCaps {
        qpn: Some(b.qpn),
        ..QpCaps::default()
    };
    c.create_qp(pd, cq, cq, caps).unwrap();
    send(&mut a, &b, 2, SendOp::Send, b"x", QKEY);
    let mut buf = vec![0u8; 2048];
    let n = a
        .dev
        .poll_transmit(Instant::from_nanos(0), &mut buf)
        .unwrap();
    c.handle(Instant::from_nanos(0), &buf[..n]);
    assert_eq!(c.rx_counters().unsupported_transport, 1);
}

/// rxe's `ibv_ud_pingpong -s 1024 -n 5` (tests/vectors/ud_pingpong.pcap):
/// for each direction, our device with the sender's addresses and QP
/// sends the same messages as the same frames (IPv4 identification
/// aside, as in rxe_replay.rs), and a device with the receiver's takes
/// every one of rxe's frames into a receive with its GRH.
#[test]
fn rxe_ud_pingpong_frames_are_ours_byte_for_byte() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/ud_pingpong.pcap"
    );
    let mut r = ferroce::pcap::open(path).unwrap();
    let mut frames = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Ok(f) = Frame::parse(rec.data) {
            if f.opcode() == Opcode::ud(Op::SendOnly) {
                frames.push(rec.data.to_vec());
            }
        }
    }
    assert_eq!(frames.len(), 10, "5 pings and 5 pongs");
    let mut directions = 0;
    for from in ["198.18.0.3", "198.18.0.2"] {
        let from: IpAddr = from.parse().unwrap();
        let mine: Vec<&Vec<u8>> = frames
            .iter()
            .filter(|b| Frame::parse(b).unwrap().ip().src() == from)
            .collect();
        let f0 = Frame::parse(mine[0]).unwrap();
        let (eth, ip, deth) = (f0.eth(), f0.ip(), f0.ext().deth.unwrap());
        // The sender.
        let mut cfg = DeviceConfig::new(eth.src, ip.src());
        cfg.port_mtu = Mtu::Mtu1024;
        let mut dev = Device::new(cfg).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(64).unwrap();
        let caps = QpCaps {
            qp_type: QpType::Ud,
            qpn: Some(deth.src_qp),
            ..QpCaps::default()
        };
        let qpn = dev.create_qp(pd, cq, cq, caps).unwrap();
        let keys = dev
            .reg_mr(MrSpec::new(pd, 1024, Access::LOCAL_WRITE))
            .unwrap();
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qkey: deth.qkey,
            ..QpAttr::default()
        };
        dev.modify_qp(qpn, &a, AttrMask::UD_INIT).unwrap();
        a.qp_state = QpState::Rtr;
        dev.modify_qp(qpn, &a, AttrMask::STATE).unwrap();
        a.qp_state = QpState::Rts;
        a.sq_psn = f0.psn().value();
        dev.modify_qp(qpn, &a, AttrMask::UD_RTS).unwrap();
        let av = AddressVector {
            dgid: ip.dst(),
            dmac: eth.dst,
            sgid_index: 0,
            hop_limit: ip.ttl(),
            traffic_class: 0,
            flow_label: 0,
            src_port: None,
            recovery: ferroce::transport::Recovery::GoBackN,
            int_telemetry: false,
        };
        let to = UdDest {
            ah: dev.create_ah(&av).unwrap(),
            remote_qpn: f0.dest_qp(),
            remote_qkey: deth.qkey,
        };
        for (i, theirs) in mine.iter().enumerate() {
            let t = Frame::parse(theirs).unwrap();
            dev.mr_mut(keys.lkey).unwrap()[..t.payload.len()].copy_from_slice(t.payload);
            let s = Sge {
                addr: keys.addr,
                length: t.payload.len() as u32,
                lkey: keys.lkey,
            };
            dev.post_send(qpn, SendWr::ud(i as u64, SendOp::Send, Payload::sge(s), to))
                .unwrap();
            let mut buf = vec![0u8; 2048];
            let n = dev.poll_transmit(Instant::from_nanos(0), &mut buf).unwrap();
            same_frame(&buf[..n], theirs)
                .unwrap_or_else(|e| panic!("datagram {i} from {from}: {e}"));
        }
        // The receiver takes rxe's frames.
        let mut cfg = DeviceConfig::new(eth.dst, ip.dst());
        cfg.port_mtu = Mtu::Mtu1024;
        let mut rx = Device::new(cfg).unwrap();
        let pd = rx.alloc_pd();
        let cq = rx.create_cq(64).unwrap();
        let caps = QpCaps {
            qp_type: QpType::Ud,
            qpn: Some(f0.dest_qp()),
            ..QpCaps::default()
        };
        let q = rx.create_qp(pd, cq, cq, caps).unwrap();
        let keys = rx
            .reg_mr(MrSpec::new(pd, 1064 * mine.len(), Access::LOCAL_WRITE))
            .unwrap();
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qkey: deth.qkey,
            ..QpAttr::default()
        };
        rx.modify_qp(q, &a, AttrMask::UD_INIT).unwrap();
        a.qp_state = QpState::Rtr;
        rx.modify_qp(q, &a, AttrMask::STATE).unwrap();
        for i in 0..mine.len() {
            let s = Sge {
                addr: keys.addr + (i * 1064) as u64,
                length: 1064,
                lkey: keys.lkey,
            };
            rx.post_recv(
                q,
                RecvWr {
                    wr_id: i as u64,
                    sges: smallvec::smallvec![s],
                },
            )
            .unwrap();
        }
        for theirs in &mine {
            rx.handle(Instant::from_nanos(0), theirs);
        }
        let mut w = Vec::new();
        rx.poll_cq(cq, 64, &mut w);
        assert_eq!(w.len(), mine.len());
        for (i, wc) in w.iter().enumerate() {
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.byte_len, 1064);
            assert_eq!(wc.src_qp, Some(deth.src_qp));
            let t = Frame::parse(mine[i]).unwrap();
            let mem = &rx.mr(keys.lkey).unwrap()[i * 1064..(i + 1) * 1064];
            assert_eq!(&mem[20..40], &mine[i][t.ip_offset..t.ip_offset + 20]);
            assert_eq!(&mem[40..], t.payload);
        }
        directions += 1;
    }
    assert_eq!(directions, 2);
}

/// Ours must be theirs byte for byte but for the IPv4 identification:
/// theirs is re-emitted with ours (which recomputes its checksum and
/// ICRC) before the comparison.
fn same_frame(ours: &[u8], theirs: &[u8]) -> Result<(), String> {
    let a = Frame::parse(ours).map_err(|e| format!("ours does not parse: {e}"))?;
    let mut rb = Frame::parse(theirs).unwrap().repr();
    if let (IpRepr::V4(x), IpRepr::V4(y)) = (&a.repr().ip, &mut rb.ip) {
        y.ident = x.ident;
    }
    let t = Frame::parse(theirs).unwrap();
    let mut buf = vec![0u8; theirs.len()];
    let n = rb.emit(t.payload, &mut buf).map_err(|e| e.to_string())?;
    if ours != &buf[..n] {
        let at = ours.iter().zip(&buf).position(|(x, y)| x != y);
        return Err(format!(
            "frames differ (ours {} B, rxe's {n} B) first at byte {at:?}: ours {:?} rxe {:?}",
            ours.len(),
            a.repr(),
            rb
        ));
    }
    Ok(())
}

/// QP1, the general services QP: rxe's CM MADs (tests/vectors/
/// ib_send_bw_rdmacm.pcap) re-sent by a UD QP numbered 1 with Q_Key
/// 0x80010000 and first PSN 0 are rxe's frames byte for byte (AckReq set,
/// as rxe's GSI QP sets it, and QP1's UDP source port).
#[test]
fn rxe_cm_mads_from_qp1_are_ours_byte_for_byte() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/ib_send_bw_rdmacm.pcap"
    );
    let mut r = ferroce::pcap::open(path).unwrap();
    let mut mads = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Ok(f) = Frame::parse(rec.data) {
            if f.dest_qp() == 1 && f.ip().src() == "198.18.0.3".parse::<IpAddr>().unwrap() {
                mads.push(rec.data.to_vec());
            }
        }
    }
    assert!(mads.len() >= 3, "REQ, RTU, DREQ at least");
    let f0 = Frame::parse(&mads[0]).unwrap();
    let (eth, ip) = (f0.eth(), f0.ip());
    let mut dev = Device::new(DeviceConfig::new(eth.src, ip.src())).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(64).unwrap();
    let caps = QpCaps {
        qp_type: QpType::Ud,
        qpn: Some(ud::GSI_QPN),
        ..QpCaps::default()
    };
    let qp1 = dev.create_qp(pd, cq, cq, caps).unwrap();
    assert_eq!(qp1, 1);
    let rc = QpCaps {
        qpn: Some(1),
        ..QpCaps::default()
    };
    assert_eq!(dev.create_qp(pd, cq, cq, rc), Err(Error::QpnUnavailable(1)));
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qkey: ud::GSI_QKEY,
        ..QpAttr::default()
    };
    dev.modify_qp(qp1, &a, AttrMask::UD_INIT).unwrap();
    a.qp_state = QpState::Rtr;
    dev.modify_qp(qp1, &a, AttrMask::STATE).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 0;
    dev.modify_qp(qp1, &a, AttrMask::UD_RTS).unwrap();
    let av = AddressVector {
        dgid: ip.dst(),
        dmac: eth.dst,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        recovery: ferroce::transport::Recovery::GoBackN,
        src_port: None,
        int_telemetry: false,
    };
    let to = UdDest {
        ah: dev.create_ah(&av).unwrap(),
        remote_qpn: 1,
        remote_qkey: ud::GSI_QKEY,
    };
    for (i, theirs) in mads.iter().enumerate() {
        let t = Frame::parse(theirs).unwrap();
        let wr = SendWr::ud(
            i as u64,
            SendOp::Send,
            Payload::Inline(t.payload.to_vec()),
            to,
        );
        // 256 B fit the default max_inline_data.
        dev.post_send(qp1, wr).unwrap();
        let mut buf = vec![0u8; 2048];
        let n = dev.poll_transmit(Instant::from_nanos(0), &mut buf).unwrap();
        same_frame(&buf[..n], theirs).unwrap_or_else(|e| panic!("MAD {i}: {e}"));
    }
}
