//! Every verb, and what each refuses, on two contexts joined by an
//! in-process link.

use super::*;
use crate::backend::loopback::{self, LoopbackPort};
use crate::backend::WallClock;
use core::net::Ipv4Addr;

type Ctx = Context<LoopbackPort>;

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn config(mac: MacAddr, ip: Ipv4Addr, peer: (Ipv4Addr, MacAddr)) -> ContextConfig {
    let mut c = ContextConfig::new(mac, ip.into());
    c.static_neigh.push((peer.0.into(), peer.1));
    c
}

/// Two contexts that know each other's MAC (no ARP needed).
fn pair() -> (Ctx, Ctx) {
    let (pa, pb) = loopback::pair(256, 4352);
    let clock = WallClock::new();
    let a = Context::open(pa, Box::new(clock), config(MAC_A, IP_A, (IP_B, MAC_B))).unwrap();
    let b = Context::open(pb, Box::new(clock), config(MAC_B, IP_B, (IP_A, MAC_A))).unwrap();
    (a, b)
}

/// Drives both until `done` (at most 5 s).
fn drive(a: &mut Ctx, b: &mut Ctx, mut done: impl FnMut(&mut Ctx, &mut Ctx) -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !done(a, b) {
        assert!(std::time::Instant::now() < end, "nothing happened in 5 s");
        a.progress();
        b.progress();
    }
}

struct Side {
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side(c: &mut Ctx, cqe: usize) -> Side {
    let pd = c.alloc_pd();
    let cq = c.create_cq(cqe).unwrap();
    let mr = c.reg_mr(&pd, 16384, Access::ALL).unwrap();
    let qp = c.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
    Side { pd, cq, mr, qp }
}

fn connected(cqe: usize) -> (Ctx, Ctx, Side, Side) {
    let (mut a, mut b) = pair();
    let (sa, sb) = (side(&mut a, cqe), side(&mut b, cqe));
    let p = ConnectParams::default();
    a.connect(&sa.qp, sb.qp.num(), IP_B.into(), &p, 100, 200)
        .unwrap();
    b.connect(&sb.qp, sa.qp.num(), IP_A.into(), &p, 200, 100)
        .unwrap();
    (a, b, sa, sb)
}

/// Polls `cq` of `c` (driving both) until `n` completions came.
fn take(a: &mut Ctx, b: &mut Ctx, on_a: bool, cq: &Cq, n: usize) -> Vec<Wc> {
    let mut wcs = Vec::new();
    drive(a, b, |a, b| {
        let c = if on_a { a } else { b };
        c.poll_cq(cq, n - wcs.len(), &mut wcs).unwrap();
        wcs.len() == n
    });
    wcs
}

#[test]
fn query_port_and_gid_describe_the_port() {
    let (a, _b) = pair();
    let p = a.query_port();
    assert_eq!(p.mac, MAC_A);
    assert_eq!(p.active_mtu, Mtu::Mtu4096);
    assert_eq!((p.gid_tbl_len, p.pkey_tbl_len), (1, 1));
    let g = a.query_gid(0).unwrap();
    assert_eq!(g.ip, IpAddr::from(IP_A));
    assert_eq!(g.gid_type, GidType::RoceV2);
    assert_eq!(&g.gid[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert_eq!(&g.gid[12..], &IP_A.octets());
    assert_eq!(a.query_gid(1), Err(Error::NoSuchGid(1)));
}

#[test]
fn a_small_port_frame_limits_the_active_mtu() {
    let (pa, _pb) = loopback::pair(4, 2048);
    let mut c = ContextConfig::new(MAC_A, IP_A.into());
    c.max_frame = 1600;
    c.frame_source = "MTU 1582 of interface t0".into();
    let mut a = Context::open(pa, Box::new(WallClock::new()), c).unwrap();
    assert_eq!(a.query_port().active_mtu, Mtu::Mtu1024);
    assert_eq!(a.query_port().max_frame, 1600);
    // A QP cannot be brought to a path MTU its port's frames do not hold.
    let pd = a.alloc_pd();
    let cq = a.create_cq(4).unwrap();
    let qp = a.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
    let p = ConnectParams {
        mtu: Mtu::Mtu2048,
        ..ConnectParams::default()
    };
    let e = a.connect(&qp, 0x11, IP_B.into(), &p, 1, 1).unwrap_err();
    assert!(matches!(
        e,
        Error::PathMtu {
            asked: 2048,
            active: 1024,
            max_frame: 1600,
            ..
        }
    ));
    assert!(e.to_string().contains("MTU 1582 of interface t0"), "{e}");
    assert_eq!(a.query_qp(&qp).unwrap().0, crate::transport::QpState::Init);
}

#[test]
fn send_write_read_and_atomics_complete_with_their_data() {
    let (mut a, mut b, sa, sb) = connected(64);
    // SEND into a posted receive.
    a.mr_mut(&sa.mr).unwrap()[..5].copy_from_slice(b"hello");
    b.post_recv(
        &sb.qp,
        RecvWr {
            wr_id: 7,
            sges: smallvec::smallvec![sb.mr.sge(0, 64).unwrap()],
        },
    )
    .unwrap();
    let sge = sa.mr.sge(0, 5).unwrap();
    a.post_send(&sa.qp, SendWr::new(1, SendOp::Send, Payload::sge(sge)))
        .unwrap();
    let r = take(&mut a, &mut b, false, &sb.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (7, WcStatus::Success, 5)
    );
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    assert_eq!(&b.mr(&sb.mr).unwrap()[..5], b"hello");
    let s = take(&mut a, &mut b, true, &sa.cq, 1);
    assert_eq!((s[0].wr_id, s[0].opcode), (1, WcOpcode::Send));

    // WRITE 6000 bytes (several packets), then READ them back elsewhere.
    for (i, x) in a.mr_mut(&sa.mr).unwrap()[..6000].iter_mut().enumerate() {
        *x = i as u8;
    }
    let write = SendOp::Write {
        remote_addr: sb.mr.addr() + 100,
        rkey: sb.mr.rkey(),
    };
    let sge = sa.mr.sge(0, 6000).unwrap();
    a.post_send(&sa.qp, SendWr::new(2, write, Payload::sge(sge)))
        .unwrap();
    let read = SendOp::Read {
        remote_addr: sb.mr.addr() + 100,
        rkey: sb.mr.rkey(),
    };
    let back = sa.mr.sge(8192, 6000).unwrap();
    a.post_send(&sa.qp, SendWr::new(3, read, Payload::sge(back)))
        .unwrap();
    let w = take(&mut a, &mut b, true, &sa.cq, 2);
    assert_eq!(
        (w[0].wr_id, w[0].opcode, w[0].status),
        (2, WcOpcode::RdmaWrite, WcStatus::Success)
    );
    assert_eq!((w[1].wr_id, w[1].opcode), (3, WcOpcode::RdmaRead));
    let want: Vec<u8> = (0..6000).map(|i| i as u8).collect();
    assert!(
        b.mr(&sb.mr).unwrap()[100..6100] == want[..],
        "the WRITE's bytes"
    );
    assert!(
        a.mr(&sa.mr).unwrap()[8192..14192] == want[..],
        "the READ's bytes"
    );

    // Fetch-and-add twice on an aligned word of a's region.
    let word = sa.mr.addr() + 8000;
    let fa = |id| {
        SendWr::new(
            id,
            SendOp::FetchAdd {
                remote_addr: word,
                rkey: sa.mr.rkey(),
                add: 5,
            },
            Payload::sge(sb.mr.sge(8000, 8).unwrap()),
        )
    };
    b.post_send(&sb.qp, fa(4)).unwrap();
    b.post_send(&sb.qp, fa(5)).unwrap();
    let at = take(&mut a, &mut b, false, &sb.cq, 2);
    assert!(at
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::FetchAdd));
    assert_eq!(&b.mr(&sb.mr).unwrap()[8000..8008], &5u64.to_le_bytes());
    assert_eq!(&a.mr(&sa.mr).unwrap()[8000..8008], &10u64.to_le_bytes());
    let c = a.qp_counters(&sa.qp).unwrap();
    assert_eq!(c.rdma_sends, 3, "SEND, WRITE and READ started");
    assert!(a.counters().rdma_sends >= 1);
}

/// Connects a to b knowing only b's address: b answers in its own thread.
fn connect_by_address(ip_a: IpAddr, ip_b: IpAddr) -> (Ctx, Ctx) {
    let (pa, pb) = loopback::pair(256, 4352);
    let clock = WallClock::new();
    let mut a = Context::open(pa, Box::new(clock), ContextConfig::new(MAC_A, ip_a)).unwrap();
    let mut b = Context::open(pb, Box::new(clock), ContextConfig::new(MAC_B, ip_b)).unwrap();
    let (sa, sb) = (side(&mut a, 8), side(&mut b, 8));
    let (qa, qb) = (sa.qp.num(), sb.qp.num());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t = std::thread::spawn(move || {
        while !s2.load(Ordering::Relaxed) {
            b.progress();
            std::thread::yield_now();
        }
        (b, sb)
    });
    a.connect(&sa.qp, qb, ip_b, &ConnectParams::default(), 1, 2)
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let (mut b, sb) = t.join().unwrap();
    let (_, attr) = a.query_qp(&sa.qp).unwrap();
    assert_eq!(attr.ah_attr.unwrap().dmac, MAC_B);
    assert_eq!(a.neigh_counters().requests_sent, 1);
    // b learnt a's MAC from the request: its own connect needs no
    // resolution.
    b.connect(&sb.qp, qa, ip_a, &ConnectParams::default(), 2, 1)
        .unwrap();
    assert_eq!(b.neigh_counters().requests_sent, 0);
    (a, b)
}

#[test]
fn arp_finds_the_peer_when_the_address_vector_has_no_mac() {
    connect_by_address(IP_A.into(), IP_B.into());
}

#[test]
fn neighbor_discovery_finds_an_ipv6_peer() {
    let (a, _b) = connect_by_address(
        "2001:db8::1".parse().unwrap(),
        "2001:db8::2".parse().unwrap(),
    );
    let g = a.query_gid(0).unwrap();
    assert_eq!(g.ip, "2001:db8::1".parse::<IpAddr>().unwrap());
    assert_eq!(g.gid[0..2], [0x20, 0x01]);
}

#[test]
fn an_unanswered_peer_fails_modify_qp_with_a_clear_error() {
    let (pa, _pb) = loopback::pair(256, 4352);
    let mut c = ContextConfig::new(MAC_A, IP_A.into());
    c.resolve_timeout = Duration::from_millis(50);
    let mut a = Context::open(pa, Box::new(WallClock::new()), c).unwrap();
    let s = side(&mut a, 8);
    let e = a
        .connect(&s.qp, 5, IP_B.into(), &ConnectParams::default(), 1, 2)
        .unwrap_err();
    assert!(
        matches!(e, Error::Unresolved(ip, _) if ip == IpAddr::from(IP_B)),
        "{e}"
    );
    assert_eq!(a.query_qp(&s.qp).unwrap().0, QpState::Init);
}

#[test]
fn modify_qp_refuses_bad_transitions_and_attributes() {
    let (mut a, _b) = pair();
    let s = side(&mut a, 8);
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    assert!(matches!(
        a.modify_qp(&s.qp, &rts, AttrMask::STATE),
        Err(Error::Verb(transport::Error::InvalidTransition { .. }))
    ));
    let init = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    assert!(matches!(
        a.modify_qp(&s.qp, &init, AttrMask::STATE),
        Err(Error::Verb(transport::Error::MissingAttr(_)))
    ));
    assert!(matches!(
        a.modify_qp(
            &s.qp,
            &init,
            AttrMask::STATE
                | AttrMask::PKEY_INDEX
                | AttrMask::PORT
                | AttrMask::ACCESS_FLAGS
                | AttrMask::SQ_PSN
        ),
        Err(Error::Verb(transport::Error::UnexpectedAttr(_)))
    ));
    let bad_pkey = QpAttr {
        pkey_index: 9,
        ..init
    };
    assert!(matches!(
        a.modify_qp(
            &s.qp,
            &bad_pkey,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS
        ),
        Err(Error::Verb(transport::Error::InvalidAttr(_)))
    ));
    // Nothing changed.
    assert_eq!(a.query_qp(&s.qp).unwrap().0, QpState::Reset);
    // ERR from any state, RESET from ERR.
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    a.modify_qp(&s.qp, &err, AttrMask::STATE).unwrap();
    a.modify_qp(&s.qp, &QpAttr::default(), AttrMask::STATE)
        .unwrap();
    assert_eq!(a.query_qp(&s.qp).unwrap().0, QpState::Reset);
}

#[test]
fn posting_checks_state_queue_room_and_sizes() {
    let (mut a, _b) = pair();
    let pd = a.alloc_pd();
    let cq = a.create_cq(8).unwrap();
    let mr = a.reg_mr(&pd, 4096, Access::ALL).unwrap();
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_inline_data: 16,
        ..QpCaps::default()
    };
    let qp = a.create_qp(&pd, &cq, &cq, caps).unwrap();
    let send = |sges: Vec<Sge>| SendWr::new(1, SendOp::Send, Payload::Sges(sges.into()));
    let sge = mr.sge(0, 8).unwrap();
    assert_eq!(
        a.post_send(&qp, send(vec![sge])),
        Err(Error::Verb(transport::Error::WrongState(QpState::Reset)))
    );
    let rwr = || RecvWr {
        wr_id: 1,
        sges: smallvec::smallvec![sge],
    };
    assert!(a.post_recv(&qp, rwr()).is_err(), "no receive in RESET");
    // To RTS towards a QP that never answers (static MAC: no ARP).
    let p = ConnectParams {
        timeout: 0,
        ..ConnectParams::default()
    };
    a.connect(&qp, 0x99, IP_B.into(), &p, 0, 0).unwrap();
    a.post_recv(&qp, rwr()).unwrap();
    assert_eq!(
        a.post_recv(&qp, rwr()),
        Err(Error::Verb(transport::Error::QueueFull))
    );
    assert_eq!(
        a.post_send(&qp, send(vec![sge, sge])),
        Err(Error::Verb(transport::Error::TooManySge))
    );
    let inline = SendWr::new(2, SendOp::Send, Payload::Inline(vec![0; 17]));
    assert_eq!(
        a.post_send(&qp, inline),
        Err(Error::Verb(transport::Error::InlineTooLong))
    );
    a.post_send(&qp, send(vec![sge])).unwrap();
    a.post_send(&qp, send(vec![sge])).unwrap();
    assert_eq!(
        a.post_send(&qp, send(vec![sge])),
        Err(Error::Verb(transport::Error::QueueFull))
    );
    assert_eq!(a.send_queue_len(&qp), 2);
    assert_eq!(a.recv_queue_len(&qp), 1);
}

#[test]
fn resources_in_use_cannot_be_destroyed_and_come_back() {
    let (mut a, _b) = pair();
    let s = side(&mut a, 8);
    // A PD with a QP and a region in it.
    let e = a.dealloc_pd(s.pd).unwrap_err();
    assert!(matches!(e.error, Error::Busy(_)), "{}", e.error);
    let pd = e.handle;
    // A CQ a QP uses.
    let e = a.destroy_cq(s.cq).unwrap_err();
    assert!(matches!(e.error, Error::Busy(_)));
    let cq = e.handle;
    // A region a posted receive names.
    a.connect(&s.qp, 0x99, IP_B.into(), &ConnectParams::default(), 0, 0)
        .unwrap();
    a.post_recv(
        &s.qp,
        RecvWr {
            wr_id: 1,
            sges: smallvec::smallvec![s.mr.sge(0, 16).unwrap()],
        },
    )
    .unwrap();
    let e = a.dereg_mr(s.mr).unwrap_err();
    assert!(matches!(e.error, Error::Busy(_)), "{}", e.error);
    let mr = e.handle;
    // Flush the receive (ERR), then everything goes, in order.
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    a.modify_qp(&s.qp, &err, AttrMask::STATE).unwrap();
    let mut wcs = Vec::new();
    a.poll_cq(&cq, 8, &mut wcs).unwrap();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::WrFlushErr);
    a.dereg_mr(mr).unwrap();
    a.destroy_qp(s.qp).unwrap();
    a.destroy_cq(cq).unwrap();
    a.dealloc_pd(pd).unwrap();
}

#[test]
fn handles_of_another_context_are_refused() {
    let (mut a, mut b) = pair();
    let sa = side(&mut a, 8);
    let sb = side(&mut b, 8);
    assert_eq!(b.reg_mr(&sa.pd, 64, Access::NONE), Err(Error::WrongContext));
    assert_eq!(b.mr(&sa.mr).err(), Some(Error::WrongContext));
    assert_eq!(b.query_qp(&sa.qp).err(), Some(Error::WrongContext));
    assert_eq!(
        b.create_qp(&sb.pd, &sa.cq, &sb.cq, QpCaps::default()).err(),
        Some(Error::WrongContext)
    );
    let mut wcs = Vec::new();
    assert_eq!(b.poll_cq(&sa.cq, 1, &mut wcs), Err(Error::WrongContext));
    let e = b.destroy_qp(sa.qp).unwrap_err();
    assert_eq!(e.error, Error::WrongContext);
    // a's QP is still there.
    assert_eq!(a.query_qp(&e.handle).unwrap().0, QpState::Reset);
}

#[test]
fn bad_arguments_get_typed_errors() {
    let (mut a, _b) = pair();
    let pd = a.alloc_pd();
    assert!(matches!(
        a.create_cq(0),
        Err(Error::Verb(transport::Error::InvalidArgument(_)))
    ));
    assert!(matches!(
        a.reg_mr(&pd, 64, Access::REMOTE_WRITE),
        Err(Error::Verb(transport::Error::InvalidArgument(_)))
    ));
    let cq = a.create_cq(1).unwrap();
    let none = QpCaps {
        max_send_wr: 0,
        ..QpCaps::default()
    };
    assert!(a.create_qp(&pd, &cq, &cq, none).is_err());
    let mr = a.reg_mr(&pd, 64, Access::LOCAL_WRITE).unwrap();
    assert_eq!(mr.sge(60, 8), None);
    assert_eq!(mr.sge(56, 8).unwrap().addr, mr.addr() + 56);
    assert!(!mr.is_empty());
}

#[test]
fn a_full_cq_reports_an_overrun_and_loses_nothing() {
    let (mut a, mut b, sa, sb) = connected(2);
    for i in 0..6u64 {
        let op = SendOp::Write {
            remote_addr: sb.mr.addr() + i * 8,
            rkey: sb.mr.rkey(),
        };
        let sge = sa.mr.sge(i as usize * 8, 8).unwrap();
        a.post_send(&sa.qp, SendWr::new(i, op, Payload::sge(sge)))
            .unwrap();
    }
    // All six complete while the CQ holds two.
    drive(&mut a, &mut b, |a, _| a.send_queue_len(&sa.qp) == 0);
    assert_eq!(a.poll_async_event(), Some(AsyncEvent::CqOverrun { cq: 0 }));
    assert_eq!(a.poll_async_event(), None);
    let mut wcs = Vec::new();
    while wcs.len() < 6 {
        assert!(a.poll_cq(&sa.cq, 1, &mut wcs).unwrap() <= 1);
    }
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5]);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let _ = sb;
}

#[test]
fn wait_cq_returns_when_a_completion_arrives_or_times_out() {
    let (mut a, b, sa, _sb) = connected(8);
    let t = a.clock.now();
    assert!(!a.wait_cq(&sa.cq, Duration::from_millis(20)).unwrap());
    assert!(a.clock.now() - t >= Duration::from_millis(20));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t = std::thread::spawn(move || {
        let mut b = b;
        while !s2.load(Ordering::Relaxed) {
            b.progress();
            std::thread::yield_now();
        }
    });
    let op = SendOp::Write {
        remote_addr: 0,
        rkey: 0x7777,
    };
    a.post_send(
        &sa.qp,
        SendWr::new(9, op, Payload::Sges(crate::transport::SgeList::new())),
    )
    .unwrap();
    assert!(a.wait_cq(&sa.cq, Duration::from_secs(5)).unwrap());
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    let mut wcs = Vec::new();
    a.poll_cq_only(&sa.cq, 4, &mut wcs).unwrap();
    // A zero-length WRITE with a bad R_Key touches nothing: it succeeds
    // (IBTA §9.4.4: no R_Key check for a zero-length RDMA operation).
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::Success));
}

#[test]
fn an_error_completion_moves_the_qp_to_err_and_says_why() {
    let (mut a, mut b, sa, sb) = connected(8);
    let op = SendOp::Write {
        remote_addr: sb.mr.addr(),
        rkey: sb.mr.rkey() ^ 0x100,
    };
    let sge = sa.mr.sge(0, 8).unwrap();
    a.post_send(&sa.qp, SendWr::new(1, op, Payload::sge(sge)))
        .unwrap();
    let w = take(&mut a, &mut b, true, &sa.cq, 1);
    assert_eq!(w[0].status, WcStatus::RemAccessErr);
    assert_eq!(a.query_qp(&sa.qp).unwrap().0, QpState::Err);
    assert_eq!(
        a.poll_async_event(),
        Some(AsyncEvent::QpError {
            qpn: sa.qp.num(),
            status: WcStatus::RemAccessErr
        })
    );
    drive(&mut a, &mut b, |_, b| {
        b.query_qp(&sb.qp).unwrap().0 == QpState::Err
    });
}
