//! Datapath threads that own verbs contexts, and application threads that
//! reach them through rings: two ports joined by an in-process link (no
//! DPDK), each wait bounded.

use ferroce::backend::loopback::{self, LoopbackPort, VecBuf};
use ferroce::backend::{Backend, Burst, WallClock};
use ferroce::time::Duration;
use ferroce::verbs::lcore::{
    AppContext, Datapath, Error, Idle, LcoreConfig, PostError, Refused, WorkQueue,
};
use ferroce::verbs::{
    self, Access, AsyncEvent, ConnectParams, Context, ContextConfig, Cq, Mr, Payload, Pd, Qp,
    QpCaps, QpState, RecvWr, SendOp, SendWr, Wc, WcOpcode, WcStatus,
};
use ferroce::wire::MacAddr;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn config(mac: MacAddr, ip: Ipv4Addr, peer: (Ipv4Addr, MacAddr)) -> ContextConfig {
    let mut c = ContextConfig::new(mac, ip.into());
    c.static_neigh.push((peer.0.into(), peer.1));
    c
}

/// Two contexts on the two ends of a link, each knowing the other's MAC.
fn contexts_on<P: Backend>(pa: P, pb: P) -> (Context<P>, Context<P>) {
    let t = WallClock::new();
    let a = Context::open(pa, Box::new(t), config(MAC_A, IP_A, (IP_B, MAC_B))).unwrap();
    let b = Context::open(pb, Box::new(t), config(MAC_B, IP_B, (IP_A, MAC_A))).unwrap();
    (a, b)
}

fn contexts() -> (Context<LoopbackPort>, Context<LoopbackPort>) {
    let (pa, pb) = loopback::pair(256, 4352);
    contexts_on(pa, pb)
}

type App = AppContext<LoopbackPort>;

/// Each context on a datapath thread of its own.
fn two_threads() -> (Datapath<LoopbackPort>, Datapath<LoopbackPort>, App, App) {
    let (a, b) = contexts();
    let da = Datapath::spawn(vec![a], LcoreConfig::default()).unwrap();
    let db = Datapath::spawn(vec![b], LcoreConfig::default()).unwrap();
    let (aa, ab) = (da.context(0).unwrap(), db.context(0).unwrap());
    (da, db, aa, ab)
}

struct Side {
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side<P: Backend + 'static>(app: &AppContext<P>, cqe: usize, ring: usize) -> Side {
    let pd = app.alloc_pd().unwrap();
    let cq = app.create_cq_with_ring(cqe, ring).unwrap();
    let mr = app.reg_mr(&pd, 16384, Access::ALL).unwrap();
    let qp = app.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
    Side { pd, cq, mr, qp }
}

fn connect<P: Backend + 'static>(a: &AppContext<P>, sa: &Side, b: &AppContext<P>, sb: &Side) {
    let p = ConnectParams::default();
    a.connect(&sa.qp, sb.qp.num(), IP_B.into(), &p, 100, 200)
        .unwrap();
    b.connect(&sb.qp, sa.qp.num(), IP_A.into(), &p, 200, 100)
        .unwrap();
}

/// `n` completions of `cq`, waiting (not spinning) between polls; at most
/// 5 s.
fn take<P: Backend + 'static>(app: &AppContext<P>, cq: &Cq, n: usize) -> Vec<Wc> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut wcs = Vec::new();
    while wcs.len() < n {
        assert!(
            std::time::Instant::now() < end,
            "{} of {n} completions in 5 s",
            wcs.len()
        );
        if app.poll_cq(cq, n - wcs.len(), &mut wcs).unwrap() == 0 {
            app.wait_cq(cq, Duration::from_millis(50)).unwrap();
        }
    }
    wcs
}

fn write(id: u64, sa: &Side, sb: &Side, off: usize, len: u32) -> SendWr {
    let op = SendOp::Write {
        remote_addr: sb.mr.addr() + off as u64,
        rkey: sb.mr.rkey(),
    };
    SendWr::new(id, op, Payload::sge(sa.mr.sge(off, len).unwrap()))
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<App>();
    send_sync::<ferroce::verbs::lcore::Completions>();
    fn send<T: Send>() {}
    send::<Datapath<LoopbackPort>>();
}

#[test]
fn send_write_and_read_through_two_datapath_threads() {
    let (da, db, a, b) = two_threads();
    assert_ne!(a.thread().id(), b.thread().id());
    let (sa, sb) = (side(&a, 64, 64), side(&b, 64, 64));
    connect(&a, &sa, &b, &sb);
    // b's application (this thread) posts a receive...
    b.post_recv(
        &sb.qp,
        RecvWr {
            wr_id: 7,
            sges: smallvec::smallvec![sb.mr.sge(0, 64).unwrap()],
        },
    )
    .unwrap();
    // ... and a's, in a thread of its own, a SEND, a WRITE of 6000 bytes
    // (several packets) and a READ of them back.
    let pattern: Vec<u8> = (0..6000).map(|i| (i * 7) as u8).collect();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            let p = pattern.clone();
            a.with_mr_mut(&sa.mr, move |m| {
                m[..5].copy_from_slice(b"hello");
                m[1024..7024].copy_from_slice(&p);
            })
            .unwrap();
            let send = SendWr::new(1, SendOp::Send, Payload::sge(sa.mr.sge(0, 5).unwrap()));
            a.post_send(&sa.qp, send).unwrap();
            let op = SendOp::Write {
                remote_addr: sb.mr.addr() + 100,
                rkey: sb.mr.rkey(),
            };
            let sge = sa.mr.sge(1024, 6000).unwrap();
            a.post_send(&sa.qp, SendWr::new(2, op, Payload::sge(sge)))
                .unwrap();
            let op = SendOp::Read {
                remote_addr: sb.mr.addr() + 100,
                rkey: sb.mr.rkey(),
            };
            let sge = sa.mr.sge(8192, 6000).unwrap();
            a.post_send(&sa.qp, SendWr::new(3, op, Payload::sge(sge)))
                .unwrap();
            take(&a, &sa.cq, 3)
        })
        .join()
        .unwrap()
    });
    let r = take(&b, &sb.cq, 1);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].status, r[0].byte_len),
        (7, WcOpcode::Recv, WcStatus::Success, 5)
    );
    let ids: Vec<(u64, WcOpcode, WcStatus)> =
        got.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        ids,
        [
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::RdmaWrite, WcStatus::Success),
            (3, WcOpcode::RdmaRead, WcStatus::Success),
        ]
    );
    let at_b = b.with_mr(&sb.mr, |m| m[..6100].to_vec()).unwrap();
    assert_eq!(&at_b[..5], b"hello");
    assert!(at_b[100..6100] == pattern[..], "the WRITE's bytes");
    let back = a.with_mr(&sa.mr, |m| m[8192..14192].to_vec()).unwrap();
    assert!(back == pattern, "the READ's bytes");
    assert_eq!(a.qp_counters(&sa.qp).unwrap().rdma_sends, 3);
    assert!(da.stats().commands >= 3 && db.stats().completions >= 1);
}

#[test]
fn several_application_threads_post_on_one_datapath() {
    let (_da, _db, a, b) = two_threads();
    let pairs: Vec<(Side, Side)> = (0..4)
        .map(|_| {
            let (sa, sb) = (side(&a, 64, 8), side(&b, 64, 8));
            connect(&a, &sa, &b, &sb);
            (sa, sb)
        })
        .collect();
    std::thread::scope(|s| {
        for (t, (sa, sb)) in pairs.iter().enumerate() {
            let a = a.clone();
            s.spawn(move || {
                for round in 0..5u64 {
                    for i in 0..20u64 {
                        let id = round * 20 + i;
                        let off = (id as usize % 64) * 8;
                        a.post_send(&sa.qp, write(id, sa, sb, off, 8)).unwrap();
                    }
                    let w = take(&a, &sa.cq, 20);
                    let ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
                    let want: Vec<u64> = (round * 20..round * 20 + 20).collect();
                    assert_eq!(ids, want, "thread {t}: its completions in order");
                    assert!(w.iter().all(|w| w.status == WcStatus::Success));
                }
            });
        }
    });
}

#[test]
fn wait_cq_blocks_until_a_completion_or_the_timeout() {
    let (da, _db, a, b) = two_threads();
    let (sa, sb) = (side(&a, 8, 8), side(&b, 8, 8));
    connect(&a, &sa, &b, &sb);
    let t = std::time::Instant::now();
    assert!(!a.wait_cq(&sa.cq, Duration::from_millis(30)).unwrap());
    assert!(t.elapsed() >= std::time::Duration::from_millis(30));
    // Idle, the datapath soon parks rather than spins.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while da.stats().parks == 0 {
        assert!(std::time::Instant::now() < end, "{:?}", da.stats());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            a.post_send(&sa.qp, write(9, &sa, &sb, 0, 8)).unwrap();
        });
        assert!(a.wait_cq(&sa.cq, Duration::from_secs(5)).unwrap());
    });
    assert!(t.elapsed() >= std::time::Duration::from_millis(20));
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    let mut wcs = Vec::new();
    assert_eq!(a.poll_cq(&sa.cq, 4, &mut wcs).unwrap(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::Success));
    // The ring is empty again: a short wait times out.
    assert!(!a.wait_cq(&sa.cq, Duration::from_millis(5)).unwrap());
}

#[test]
fn refused_posts_come_back_at_once_or_as_error_completions() {
    let (_da, _db, a, b) = two_threads();
    let sa = side(&a, 16, 16);
    let sb = side(&b, 16, 16);
    // At once: a QP of another context; the work request comes back.
    let e = b.post_send(&sa.qp, write(1, &sa, &sa, 0, 8)).unwrap_err();
    assert_eq!(e.error, Error::Verb(verbs::Error::WrongContext));
    assert_eq!(e.handle.wr_id, 1);
    let mut wcs = Vec::new();
    assert_eq!(
        b.poll_cq(&sa.cq, 1, &mut wcs),
        Err(Error::Verb(verbs::Error::WrongContext))
    );

    // On the datapath: a QP in RESET takes neither sends nor receives.
    a.post_send(&sa.qp, write(2, &sa, &sb, 0, 8)).unwrap();
    a.post_recv(
        &sa.qp,
        RecvWr {
            wr_id: 3,
            sges: smallvec::smallvec![],
        },
    )
    .unwrap();
    let w = take(&a, &sa.cq, 2);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode, w[0].qp_num),
        (2, WcStatus::LocQpOpErr, WcOpcode::RdmaWrite, sa.qp.num())
    );
    assert_eq!(
        (w[1].wr_id, w[1].status, w[1].opcode),
        (3, WcStatus::LocQpOpErr, WcOpcode::Recv)
    );
    let reset = verbs::Error::Verb(ferroce::transport::Error::WrongState(QpState::Reset));
    assert_eq!(
        a.poll_post_error(),
        Some(PostError {
            qp_num: sa.qp.num(),
            wr_id: 2,
            queue: WorkQueue::Send,
            error: reset.clone(),
            completed: true,
        })
    );
    let e = a.poll_post_error().unwrap();
    assert_eq!((e.wr_id, e.queue, e.error), (3, WorkQueue::Recv, reset));
    assert_eq!(a.poll_post_error(), None);

    // A QP towards a peer that never answers (no retransmit timer):
    // too many SGEs, then a full send queue.
    let caps = QpCaps {
        max_send_wr: 2,
        max_send_sge: 1,
        ..QpCaps::default()
    };
    let qp = a.create_qp(&sa.pd, &sa.cq, &sa.cq, caps).unwrap();
    let p = ConnectParams {
        timeout: 0,
        ..ConnectParams::default()
    };
    a.connect(&qp, 0x99, IP_B.into(), &p, 0, 0).unwrap();
    let sge = sa.mr.sge(0, 8).unwrap();
    let two = SendWr::new(
        4,
        SendOp::Send,
        Payload::Sges(smallvec::smallvec![sge, sge]),
    );
    a.post_send(&qp, two).unwrap();
    for id in 5..8 {
        let one = SendWr::new(id, SendOp::Send, Payload::sge(sge));
        a.post_send(&qp, one).unwrap();
    }
    let w = take(&a, &sa.cq, 2);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::LocLenErr));
    assert_eq!((w[1].wr_id, w[1].status), (7, WcStatus::LocQpOpErr));
    let e = a.poll_post_error().unwrap();
    assert_eq!(
        e.error,
        verbs::Error::Verb(ferroce::transport::Error::TooManySge)
    );
    let e = a.poll_post_error().unwrap();
    assert_eq!(
        (e.wr_id, e.error),
        (7, verbs::Error::Verb(ferroce::transport::Error::QueueFull))
    );
    assert_eq!(a.send_queue_len(&qp).unwrap(), 2, "5 and 6 wait");
    assert_eq!(a.post_errors_lost(), 0);
}

#[test]
fn a_full_command_ring_refuses_a_post_and_gives_it_back() {
    let (a, _b) = contexts();
    let cfg = LcoreConfig {
        commands: 2,
        ..LcoreConfig::default()
    };
    let dp = Datapath::spawn(vec![a], cfg).unwrap();
    let app = dp.context(0).unwrap();
    let s = side(&app, 64, 64);
    std::thread::scope(|sc| {
        // The datapath is busy in a closure while the posts come.
        let (started, busy) = std::sync::mpsc::channel();
        let slow = app.clone();
        sc.spawn(move || {
            slow.run(move |_| {
                started.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(100));
            })
            .unwrap()
        });
        busy.recv_timeout(std::time::Duration::from_secs(5))
            .unwrap();
        for id in 0..10u64 {
            match app.post_send(&s.qp, write(id, &s, &s, 0, 8)) {
                Ok(()) => assert!(id < 2, "post {id} found room in a ring of two"),
                Err(Refused { error, handle }) => {
                    assert_eq!(error, Error::RingFull);
                    assert_eq!(handle.wr_id, id);
                    assert!(id >= 2);
                }
            }
        }
    });
    // The two queued posts ran (in RESET: error completions); control
    // calls wait for room instead of failing.
    let w = take(&app, &s.cq, 2);
    assert_eq!((w[0].wr_id, w[1].wr_id), (0, 1));
    assert!(w.iter().all(|w| w.status == WcStatus::LocQpOpErr));
    for _ in 0..10 {
        app.query_qp(&s.qp).unwrap();
    }
}

#[test]
fn a_tiny_completion_ring_holds_the_rest_back_and_loses_nothing() {
    let (da, _db, a, b) = two_threads();
    // The transport CQ holds 16, its ring 2: 64 completions at a time
    // wait in the ring, the CQ and the QP's backlog.
    let (sa, sb) = (side(&a, 16, 2), side(&b, 16, 16));
    connect(&a, &sa, &b, &sb);
    let ring = a.completions(&sa.cq).unwrap();
    assert_eq!(ring.capacity(), 2);
    let mut all = Vec::new();
    for round in 0..5u64 {
        for i in 0..64u64 {
            let id = round * 64 + i;
            a.post_send(&sa.qp, write(id, &sa, &sb, i as usize * 8, 8))
                .unwrap();
        }
        // Every WRITE completes while the application does not poll.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while a.send_queue_len(&sa.qp).unwrap() > 0 {
            assert!(std::time::Instant::now() < end);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(ring.len(), 2);
        while all.len() < (round as usize + 1) * 64 {
            if ring.poll(1, &mut all) == 0 {
                assert!(ring.wait(Duration::from_secs(5)).unwrap());
            }
        }
    }
    let ids: Vec<u64> = all.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..320).collect::<Vec<u64>>());
    assert!(all.iter().all(|w| w.status == WcStatus::Success));
    assert!(
        matches!(
            a.poll_async_event().unwrap(),
            Some(AsyncEvent::CqOverrun { .. })
        ),
        "the transport CQ overran too"
    );
    assert_eq!(da.stats().completions, 320);
}

#[test]
fn stop_and_join_give_the_contexts_back() {
    let (da, db, a, b) = two_threads();
    let (sa, sb) = (side(&a, 8, 8), side(&b, 8, 8));
    connect(&a, &sa, &b, &sb);
    a.with_mr_mut(&sa.mr, |m| m[..4].copy_from_slice(b"ping"))
        .unwrap();
    a.post_send(&sa.qp, write(1, &sa, &sb, 0, 4)).unwrap();
    assert_eq!(take(&a, &sa.cq, 1)[0].status, WcStatus::Success);

    let mut ca = da.join().unwrap();
    let mut cb = db.join().unwrap();
    assert!(!a.is_running());
    // The handles' calls fail; a refused post comes back.
    assert_eq!(a.alloc_pd(), Err(Error::Stopped));
    let e = a.post_send(&sa.qp, write(2, &sa, &sb, 0, 4)).unwrap_err();
    assert_eq!((e.error, e.handle.wr_id), (Error::Stopped, 2));
    assert_eq!(
        a.wait_cq(&sa.cq, Duration::from_secs(5)),
        Err(Error::Stopped)
    );
    // The contexts carry on in run-to-completion mode, with the same
    // handles.
    let (ca, cb) = (ca.pop().unwrap(), cb.pop().unwrap());
    assert_eq!(ca.query_qp(&sa.qp).unwrap().0, QpState::Rts);
    assert_eq!(&cb.mr(&sb.mr).unwrap()[..4], b"ping");
    let _ports = (
        ca.close(Duration::from_millis(10)),
        cb.close(Duration::from_millis(10)),
    );
}

#[test]
fn two_contexts_on_one_datapath_thread() {
    let (ca, cb) = contexts();
    // Busy-polling, as on a DPDK lcore (the test is short).
    let cfg = LcoreConfig {
        idle: Idle::BusyPoll,
        ..LcoreConfig::default()
    };
    let dp = Datapath::spawn(vec![ca, cb], cfg).unwrap();
    assert_eq!(dp.len(), 2);
    let (a, b) = (dp.context(0).unwrap(), dp.context(1).unwrap());
    assert!(dp.context(2).is_none());
    assert_eq!(a.thread().id(), b.thread().id());
    let (sa, sb) = (side(&a, 8, 8), side(&b, 8, 8));
    connect(&a, &sa, &b, &sb);
    b.post_recv(
        &sb.qp,
        RecvWr {
            wr_id: 70,
            sges: smallvec::smallvec![sb.mr.sge(0, 64).unwrap()],
        },
    )
    .unwrap();
    a.with_mr_mut(&sa.mr, |m| m[..9].copy_from_slice(b"same core"))
        .unwrap();
    let send = SendWr::new(1, SendOp::Send, Payload::sge(sa.mr.sge(0, 9).unwrap()));
    a.post_send(&sa.qp, send).unwrap();
    a.post_send(&sa.qp, write(2, &sa, &sb, 0, 9)).unwrap();
    let w = take(&a, &sa.cq, 2);
    assert!(w.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(take(&b, &sb.cq, 1)[0].byte_len, 9);
    assert_eq!(
        b.with_mr(&sb.mr, |m| m[..9].to_vec()).unwrap(),
        b"same core"
    );
    // A handle of the other context is refused, as in one thread.
    assert_eq!(
        a.query_qp(&sb.qp),
        Err(Error::Verb(verbs::Error::WrongContext))
    );
    let back = dp.join().unwrap();
    assert_eq!(back.len(), 2);
}

#[test]
fn control_verbs_refuse_and_hand_handles_back() {
    let (_da, _db, a, _b) = two_threads();
    let s = side(&a, 8, 8);
    let e = a.destroy_cq(s.cq).unwrap_err();
    assert!(
        matches!(e.error, Error::Verb(verbs::Error::Busy(_))),
        "{}",
        e.error
    );
    let cq = e.handle;
    let e = a.dealloc_pd(s.pd).unwrap_err();
    let pd = e.handle;
    a.dereg_mr(s.mr).unwrap();
    a.destroy_qp(s.qp).unwrap();
    let ring = a.completions(&cq).unwrap();
    a.destroy_cq(cq).unwrap();
    assert_eq!(ring.wait(Duration::from_secs(5)), Err(Error::NoRing));
    a.dealloc_pd(pd).unwrap();
    // A CQ made by a raw closure has no ring.
    let raw = a.run(|c| c.create_cq(4).unwrap()).unwrap();
    let mut wcs = Vec::new();
    assert_eq!(a.poll_cq(&raw, 1, &mut wcs), Err(Error::NoRing));
}

#[test]
fn a_panicking_closure_panics_its_caller_and_the_datapath_goes_on() {
    let (_da, _db, a, _b) = two_threads();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.run(|_| -> u32 { panic!("a closure that fails") })
    }));
    assert!(r.is_err());
    assert!(a.alloc_pd().is_ok());
}

/// A loopback port that says when it is dropped.
struct Watched {
    port: LoopbackPort,
    dropped: Arc<AtomicBool>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl Backend for Watched {
    type Buf = VecBuf;
    fn rx_burst(&mut self, out: &mut Burst<VecBuf>) -> usize {
        self.port.rx_burst(out)
    }
    fn alloc(&mut self) -> Option<VecBuf> {
        self.port.alloc()
    }
    fn tx_burst(&mut self, frames: &mut Burst<VecBuf>) -> usize {
        self.port.tx_burst(frames)
    }
}

#[test]
fn the_last_handle_to_go_stops_the_thread() {
    let (pa, pb) = loopback::pair(16, 4352);
    let dropped = Arc::new(AtomicBool::new(false));
    let watched = |port, dropped: &Arc<AtomicBool>| Watched {
        port,
        dropped: dropped.clone(),
    };
    let (ca, _cb) = contexts_on(watched(pa, &dropped), watched(pb, &Arc::default()));
    let dp = Datapath::spawn(vec![ca], LcoreConfig::default()).unwrap();
    let app = dp.context(0).unwrap();
    let other = app.clone();
    drop(dp);
    drop(app);
    // One handle left: the thread runs on.
    assert!(other.is_running());
    assert!(other.alloc_pd().is_ok());
    assert!(!dropped.load(Ordering::SeqCst));
    drop(other);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !dropped.load(Ordering::SeqCst) {
        assert!(std::time::Instant::now() < end, "the thread did not stop");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }

    // The Datapath as the last handle: its drop waits for the thread.
    let (pa, pb) = loopback::pair(16, 4352);
    let dropped2 = Arc::new(AtomicBool::new(false));
    let (ca, _cb) = contexts_on(watched(pa, &dropped2), watched(pb, &Arc::default()));
    let dp = Datapath::spawn(vec![ca], LcoreConfig::default()).unwrap();
    drop(dp.context(0).unwrap());
    assert!(!dropped2.load(Ordering::SeqCst));
    drop(dp);
    assert!(dropped2.load(Ordering::SeqCst));
}

/// The thread's setup is injected: it runs on the datapath thread before
/// its loop, and a failing one refuses the spawn with its message and
/// gives the contexts back.
#[test]
fn an_injected_setup_runs_on_the_thread_and_a_failing_one_refuses_the_spawn() {
    let (a, _b) = contexts();
    let ran_on = Arc::new(std::sync::Mutex::new(None));
    let seen = ran_on.clone();
    let cfg = LcoreConfig {
        name: "setup-test".into(),
        setup: Some(Arc::new(move || {
            *seen.lock().unwrap() = std::thread::current().name().map(String::from);
            Ok(Box::new(()) as Box<dyn std::any::Any>)
        })),
        ..LcoreConfig::default()
    };
    let dp = Datapath::spawn(vec![a], cfg).unwrap();
    assert_eq!(ran_on.lock().unwrap().as_deref(), Some("setup-test"));
    drop(dp);

    let (a, _b) = contexts();
    let cfg = LcoreConfig {
        setup: Some(Arc::new(|| Err("no such core".to_string()))),
        ..LcoreConfig::default()
    };
    let e = Datapath::spawn(vec![a], cfg).err().unwrap();
    assert!(e.error.contains("no such core"), "{}", e.error);
    assert_eq!(e.contexts.len(), 1);
}

/// DPDK's setup pins the datapath thread to the CPU asked for.
#[cfg(feature = "dpdk")]
#[test]
fn the_dpdk_setup_pins_the_datapath_thread() {
    let cpu = *ferroce::dpdk::lcore::online_cpus().last().unwrap();
    let (a, _b) = contexts();
    let cfg = LcoreConfig {
        setup: Some(Arc::new(ferroce::dpdk::lcore::thread_setup(
            Some(cpu),
            None,
        ))),
        ..LcoreConfig::default()
    };
    let dp = Datapath::spawn(vec![a], cfg).unwrap();
    drop(dp);
}

type Sq = ferroce::backend::steer::Steered<LoopbackPort>;

/// Two ends of two queue pairs each, every end's queue pairs on two
/// datapath threads (`spawn_port`), no neighbour configured: the
/// datapaths (to keep them running) and a context, a PD, CQ, region and
/// QP on each, for a and for b.
#[allow(clippy::type_complexity)]
fn split_ends(
    ip_a: std::net::IpAddr,
    ip_b: std::net::IpAddr,
) -> (
    Vec<Datapath<Sq>>,
    Vec<AppContext<Sq>>,
    Vec<Side>,
    Vec<AppContext<Sq>>,
    Vec<Side>,
) {
    use ferroce::verbs::lcore::spawn_port;
    let (qa, qb): (Vec<_>, Vec<_>) = (0..2).map(|_| loopback::pair(256, 4352)).unzip();
    let spawn = |queues: Vec<LoopbackPort>, mac, ip| -> Vec<Datapath<Sq>> {
        let cfg = ContextConfig::new(mac, ip);
        let lcore = |i| LcoreConfig {
            name: format!("dp{i}"),
            ..LcoreConfig::default()
        };
        spawn_port(queues, &cfg, &|| Box::new(WallClock::new()), &lcore).unwrap()
    };
    let mut dps = spawn(qa, MAC_A, ip_a);
    let db = spawn(qb, MAC_B, ip_b);
    let a: Vec<AppContext<Sq>> = dps.iter().map(|d| d.context(0).unwrap()).collect();
    let b: Vec<AppContext<Sq>> = db.iter().map(|d| d.context(0).unwrap()).collect();
    dps.extend(db);
    let sa: Vec<Side> = a.iter().map(|x| side(x, 64, 64)).collect();
    let sb: Vec<Side> = b.iter().map(|x| side(x, 64, 64)).collect();
    (dps, a, sa, b, sb)
}

/// One port on two datapath lcores at each end (`spawn_port`): each
/// end's two queue pairs steered (`backend::steer`), a context per queue
/// pair with its `shard`, each on a datapath thread of its own. The QPs are crossed (a's
/// first datapath with b's second and the other way), so every frame
/// arrives on a queue its QP's owner does not poll; no neighbour is
/// configured, so each datapath resolves its peer by ARP, which only the
/// first datapath of a port answers and the others learn from copies.
#[test]
fn a_port_on_two_datapath_lcores_with_crossed_qps() {
    use ferroce::wire::Shard;
    let (dps, a, sa, b, sb) = split_ends(IP_A.into(), IP_B.into());
    for i in 0..2 {
        assert!(Shard::new(2, i as u32).unwrap().owns(sa[i].qp.num()));
        assert!(Shard::new(2, i as u32).unwrap().owns(sb[i].qp.num()));
    }
    let pattern = |i: usize| -> Vec<u8> { (0..6000).map(|k| (k * 7 + i * 13) as u8).collect() };
    std::thread::scope(|s| {
        for i in 0..2 {
            let (a, b) = (&a[i], &b[1 - i]);
            let (sa, sb) = (&sa[i], &sb[1 - i]);
            s.spawn(move || {
                connect(a, sa, b, sb);
                let p = pattern(i);
                a.with_mr_mut(&sa.mr, move |m| m[..6000].copy_from_slice(&p))
                    .unwrap();
                a.post_send(&sa.qp, write(1, sa, sb, 0, 6000)).unwrap();
                let op = SendOp::Read {
                    remote_addr: sb.mr.addr(),
                    rkey: sb.mr.rkey(),
                };
                let sge = sa.mr.sge(8192, 6000).unwrap();
                a.post_send(&sa.qp, SendWr::new(2, op, Payload::sge(sge)))
                    .unwrap();
                let wcs = take(a, &sa.cq, 2);
                assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
            });
        }
    });
    for i in 0..2 {
        let (b, sb) = (&b[1 - i], &sb[1 - i]);
        let at_b = b.with_mr(&sb.mr, |m| m[..6000].to_vec()).unwrap();
        assert!(
            at_b == pattern(i),
            "datapath {i}'s WRITE landed at b's {}",
            1 - i
        );
        let back = a[i]
            .with_mr(&sa[i].mr, |m| m[8192..14192].to_vec())
            .unwrap();
        assert!(back == pattern(i), "datapath {i}'s READ");
    }
    // Each datapath's steering handed frames on to the other.
    for d in &dps {
        let app = d.context(0).unwrap();
        let c = app.run(|ctx| ctx.port().counters()).unwrap();
        assert!(
            c.handed_on > 0 && c.handed_in > 0 && c.dropped == 0,
            "{c:?}"
        );
    }
}

/// The same over IPv6: each datapath resolves its peer by Neighbor
/// Discovery through the steering (solicitations and advertisements
/// reach every datapath; only the first answers), then a WRITE lands.
#[test]
fn a_port_on_two_datapath_lcores_over_ipv6() {
    use std::net::{IpAddr, Ipv6Addr};
    let v6a: Ipv6Addr = "fd18::1".parse().unwrap();
    let v6b: Ipv6Addr = "fd18::2".parse().unwrap();
    let (_dps, a, sa, b, sb) = split_ends(v6a.into(), v6b.into());
    let p = ConnectParams::default();
    for i in 0..2 {
        let (ai, bj, sai, sbj) = (&a[i], &b[1 - i], &sa[i], &sb[1 - i]);
        ai.connect(&sai.qp, sbj.qp.num(), IpAddr::V6(v6b), &p, 1, 2)
            .unwrap();
        bj.connect(&sbj.qp, sai.qp.num(), IpAddr::V6(v6a), &p, 2, 1)
            .unwrap();
        let pat: Vec<u8> = (0..3000).map(|k| (k * 3 + i) as u8).collect();
        let pc = pat.clone();
        ai.with_mr_mut(&sai.mr, move |m| m[..3000].copy_from_slice(&pc))
            .unwrap();
        ai.post_send(&sai.qp, write(9, sai, sbj, 0, 3000)).unwrap();
        let wcs = take(ai, &sai.cq, 1);
        assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
        let got = bj.with_mr(&sbj.mr, |m| m[..3000].to_vec()).unwrap();
        assert!(got == pat, "datapath {i}'s WRITE over IPv6");
    }
}
