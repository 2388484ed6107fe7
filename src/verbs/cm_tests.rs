//! RDMA-CM between two contexts joined by an in-process link: connect,
//! accept, data, disconnect; a port nobody listens on; a reject.

use super::*;
use crate::backend::loopback::{self, LoopbackPort};
use crate::backend::WallClock;
use crate::verbs::{ContextConfig, Cq, Mr, Pd};
use core::net::Ipv4Addr;

type Ctx = Context<LoopbackPort>;

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// Two contexts that know each other's MAC (one thread drives both, so
/// neither could answer the other's ARP while it waits).
fn pair() -> (Ctx, Ctx) {
    let (pa, pb) = loopback::pair(256, 4352);
    let clock = WallClock::new();
    let mut ca = ContextConfig::new(MAC_A, IP_A.into());
    ca.static_neigh.push((IP_B.into(), MAC_B));
    let mut cb = ContextConfig::new(MAC_B, IP_B.into());
    cb.static_neigh.push((IP_A.into(), MAC_A));
    let a = Context::open(pa, Box::new(clock), ca).unwrap();
    let b = Context::open(pb, Box::new(clock), cb).unwrap();
    (a, b)
}

struct Side {
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side(c: &mut Ctx) -> Side {
    let pd = c.alloc_pd();
    let cq = c.create_cq(64).unwrap();
    let mr = c.reg_mr(&pd, 4096, Access::ALL).unwrap();
    let qp = c.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
    Side {
        _pd: pd,
        cq,
        mr,
        qp,
    }
}

/// The next event of `on` (a or b), driving both for at most 5 s.
fn next(a: &mut Ctx, b: &mut Ctx, on_a: bool) -> RdmaCmEvent {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        assert!(std::time::Instant::now() < end, "no RDMA-CM event in 5 s");
        let (me, other) = if on_a {
            (&mut *a, &mut *b)
        } else {
            (&mut *b, &mut *a)
        };
        other.progress();
        if let Some(e) = me.rdma_poll_cm_event() {
            return e;
        }
    }
}

/// a listens on 7471; b connects with private data; a accepts with its
/// own; both QPs end in RTS pointing at each other, with each other's
/// first PSNs, and carry a SEND each way; then b disconnects.
#[test]
fn connect_accept_send_both_ways_and_disconnect() {
    let (mut a, mut b) = pair();
    let (sa, sb) = (side(&mut a), side(&mut b));
    a.rdma_listen(7471).unwrap();
    let ask = ConnParam {
        private_data: b"hello from b".to_vec(),
        responder_resources: 4,
        initiator_depth: 4,
        ..ConnParam::default()
    };
    let cb = b.rdma_connect(&sb.qp, IP_A.into(), 7471, 0, &ask).unwrap();
    let RdmaCmEvent::ConnectRequest {
        conn: ca,
        from,
        port,
        param,
        remote_qpn,
    } = next(&mut a, &mut b, true)
    else {
        panic!("a connect request first");
    };
    assert_eq!(
        (from.0, port, remote_qpn),
        (IpAddr::from(IP_B), 7471, sb.qp.num())
    );
    assert!(from.1 >= 0xC000, "an ephemeral source port: {}", from.1);
    assert_eq!(&param.private_data[..12], b"hello from b");
    assert_eq!((param.responder_resources, param.initiator_depth), (4, 4));
    let grant = ConnParam {
        private_data: b"welcome".to_vec(),
        responder_resources: 2,
        initiator_depth: 8,
        ..ConnParam::default()
    };
    a.rdma_accept(ca, &sa.qp, &grant).unwrap();
    match next(&mut a, &mut b, false) {
        RdmaCmEvent::Established { conn, private_data } => {
            assert_eq!(conn, cb);
            assert_eq!(&private_data[..7], b"welcome");
        }
        e => panic!("b: {e:?}"),
    }
    assert!(
        matches!(next(&mut a, &mut b, true), RdmaCmEvent::Established { conn, .. } if conn == ca)
    );
    let (qa, qb) = (a.query_qp(&sa.qp).unwrap(), b.query_qp(&sb.qp).unwrap());
    assert_eq!((qa.0, qb.0), (QpState::Rts, QpState::Rts));
    assert_eq!(
        (qa.1.dest_qp_num, qb.1.dest_qp_num),
        (sb.qp.num(), sa.qp.num())
    );
    assert_eq!((qa.1.sq_psn, qb.1.sq_psn), (qb.1.rq_psn, qa.1.rq_psn));
    // What each end grants: a accepts 2 READs at once (asked 4 issued by
    // b, granted 2) and issues up to 4 (b accepts 4).
    assert_eq!(qa.1.max_dest_rd_atomic, 2);
    assert_eq!(qa.1.max_rd_atomic, 4);
    assert_eq!(qb.1.max_rd_atomic, 2);
    assert_eq!(qa.1.path_mtu, a.query_port().active_mtu);
    // A SEND each way.
    send_one(&mut a, &mut b, &sa, &sb);
    send_one(&mut b, &mut a, &sb, &sa);
    // b disconnects: both see it; a answers with its own rdma_disconnect.
    b.rdma_disconnect(cb).unwrap();
    assert!(matches!(next(&mut a, &mut b, true), RdmaCmEvent::Disconnected { conn } if conn == ca));
    a.rdma_disconnect(ca).unwrap();
    assert!(
        matches!(next(&mut a, &mut b, false), RdmaCmEvent::Disconnected { conn } if conn == cb)
    );
    assert_eq!(a.query_qp(&sa.qp).unwrap().0, QpState::Err);
    assert_eq!(b.query_qp(&sb.qp).unwrap().0, QpState::Err);
}

/// A port nobody listens on is refused with REJ "invalid service ID"
/// (8), as Linux does; a listener's reject carries its private data with
/// reason 28.
#[test]
fn no_listener_and_a_reject_come_back_as_rejected() {
    let (mut a, mut b) = pair();
    let sb = side(&mut b);
    a.rdma_listen(7471).unwrap();
    b.rdma_connect(&sb.qp, IP_A.into(), 9999, 0, &ConnParam::default())
        .unwrap();
    match next(&mut a, &mut b, false) {
        RdmaCmEvent::Rejected { reason, .. } => assert_eq!(reason, 8),
        e => panic!("{e:?}"),
    }
    let sb2 = side(&mut b);
    b.rdma_connect(&sb2.qp, IP_A.into(), 7471, 0, &ConnParam::default())
        .unwrap();
    let RdmaCmEvent::ConnectRequest { conn, .. } = next(&mut a, &mut b, true) else {
        panic!("a request");
    };
    a.rdma_reject(conn, b"go away").unwrap();
    match next(&mut a, &mut b, false) {
        RdmaCmEvent::Rejected {
            reason,
            private_data,
            ..
        } => {
            assert_eq!(reason, 28);
            assert_eq!(&private_data[..7], b"go away");
        }
        e => panic!("{e:?}"),
    }
    assert!(b.cm_counters().unwrap().dropped() == 0);
}

/// x SENDs 5 bytes to y, which receives them.
fn send_one(x: &mut Ctx, y: &mut Ctx, sx: &Side, sy: &Side) {
    x.mr_mut(&sx.mr).unwrap()[..5].copy_from_slice(b"ping!");
    let r = RecvWr {
        wr_id: 7,
        sges: smallvec::smallvec![sy.mr.sge(0, 64).unwrap()],
    };
    y.post_recv(&sy.qp, r).unwrap();
    let s = SendWr::new(1, SendOp::Send, Payload::sge(sx.mr.sge(0, 5).unwrap()));
    x.post_send(&sx.qp, s).unwrap();
    let mut w = Vec::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while w.is_empty() {
        assert!(std::time::Instant::now() < end, "the SEND did not arrive");
        x.progress();
        y.poll_cq(&sy.cq, 4, &mut w).unwrap();
    }
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 5));
    assert_eq!(&y.mr(&sy.mr).unwrap()[..5], b"ping!");
    let _ = x.poll_cq(&sx.cq, 4, &mut Vec::new());
}

/// Connects b to a with `ask` on b and `grant` on a; returns the
/// recovery each QP runs, what a saw b ask for, and the application's
/// private data each side received.
fn connect_with(
    b_asks: Recovery,
    a_grants: Recovery,
) -> (Recovery, Recovery, Recovery, Vec<u8>, Vec<u8>) {
    let (mut a, mut b) = pair();
    let (sa, sb) = (side(&mut a), side(&mut b));
    a.rdma_listen(7471).unwrap();
    let ask = ConnParam {
        private_data: b"hello".to_vec(),
        recovery: b_asks,
        ..ConnParam::default()
    };
    let cb = b.rdma_connect(&sb.qp, IP_A.into(), 7471, 0, &ask).unwrap();
    let RdmaCmEvent::ConnectRequest {
        conn: ca, param, ..
    } = next(&mut a, &mut b, true)
    else {
        panic!("a: no connect request");
    };
    let grant = ConnParam {
        private_data: b"hi".to_vec(),
        recovery: a_grants,
        ..ConnParam::default()
    };
    a.rdma_accept(ca, &sa.qp, &grant).unwrap();
    let RdmaCmEvent::Established { conn, private_data } = next(&mut a, &mut b, false) else {
        panic!("b: not established");
    };
    assert_eq!(conn, cb);
    assert!(matches!(
        next(&mut a, &mut b, true),
        RdmaCmEvent::Established { .. }
    ));
    let rec = |c: &Ctx, q: &Qp| c.query_qp(q).unwrap().1.ah_attr.unwrap().recovery;
    (
        rec(&b, &sb.qp),
        rec(&a, &sa.qp),
        param.recovery,
        param.private_data,
        private_data,
    )
}

/// Selective repeat runs only when both ends asked: the REQ's and the
/// REP's private data end with ferroce's capability tail, the
/// application's data is intact in front of it, and an end that did not
/// ask (or a REP without the tail, as any other peer's) keeps go-back-N.
#[test]
fn selective_repeat_only_when_both_ends_ask_in_the_private_data() {
    use Recovery::{GoBackN, Selective};
    let (b, a, asked, req_data, rep_data) = connect_with(Selective, Selective);
    assert_eq!((b, a, asked), (Selective, Selective, Selective));
    assert_eq!(&req_data[..5], b"hello");
    assert_eq!(&req_data[52..], &[0xF5, b'f', b'r', 2]);
    assert_eq!(&rep_data[..2], b"hi");
    assert_eq!(crate::wire::caps::parse(&rep_data), Some(2));
    // a did not ask: its REP has no tail, and b stays go-back-N.
    let (b, a, asked, _, rep_data) = connect_with(Selective, GoBackN);
    assert_eq!((b, a, asked), (GoBackN, GoBackN, Selective));
    assert_eq!(crate::wire::caps::parse(&rep_data), None);
    // b did not ask: a stays go-back-N though it would have.
    let (b, a, asked, req_data, _) = connect_with(GoBackN, Selective);
    assert_eq!((b, a, asked), (GoBackN, GoBackN, GoBackN));
    assert!(req_data.iter().skip(5).all(|&x| x == 0));
}

/// With selective repeat asked, the application's REQ data must leave the
/// tail's 4 bytes free: 53 bytes are refused by name.
#[test]
fn selective_repeat_leaves_52_bytes_of_req_private_data() {
    let (_a, mut b) = pair();
    let sb = side(&mut b);
    let ask = ConnParam {
        private_data: vec![1; 53],
        recovery: Recovery::Selective,
        ..ConnParam::default()
    };
    let e = b
        .rdma_connect(&sb.qp, IP_A.into(), 7471, 0, &ask)
        .unwrap_err();
    assert!(e.to_string().contains("at most 52"), "{e}");
}

/// On a port split over datapaths, RDMA-CM runs on the first: QP1 and
/// its MADs are datapath 0's, and another datapath's context says so.
#[test]
fn rdma_cm_runs_on_a_ports_first_datapath() {
    let (pa, _pb) = loopback::pair(16, 4352);
    let mut cfg = ContextConfig::new(MAC_A, IP_A.into());
    cfg.shard = crate::wire::Shard::new(2, 1).unwrap();
    let mut c = Context::open(pa, Box::new(WallClock::new()), cfg).unwrap();
    let e = c.rdma_listen(7471).unwrap_err().to_string();
    assert!(e.contains("first datapath"), "{e}");
    let (pa, _pb) = loopback::pair(16, 4352);
    let mut cfg = ContextConfig::new(MAC_A, IP_A.into());
    cfg.shard = crate::wire::Shard::new(2, 0).unwrap();
    let mut c = Context::open(pa, Box::new(WallClock::new()), cfg).unwrap();
    c.rdma_listen(7471).unwrap();
}
