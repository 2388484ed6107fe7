//! The CM agent (`ferroce::cm`) in virtual time: two agents and a tiny
//! driver that moves their MADs with a loss filter, through the
//! handshake, teardown, losses at every step, retries running out,
//! rejections, duplicates and malformed input; then the agent against
//! the RDMA CM captures of `tests/vectors/` (it must emit rxe's REQ, REP,
//! RTU, DREQ and DREP byte for byte, IDs included); and property tests
//! that random bytes and random CM messages never panic it.

use ferroce::cm::{
    cm_timeout, reason, AcceptParams, CmAgent, CmConfig, CmEvent, CmState, ConnId, ConnectParams,
    MadPeer, OutMad, RepInfo, ReqInfo,
};
use ferroce::time::{Duration, Instant};
use ferroce::wire::cm::{attr, CmMessage, Dreq};
use ferroce::wire::mad::{method, CmMad, MAD_LEN};
use ferroce::wire::{gid_of, Frame, Psn};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// The client (active side) and the server, as in the captures.
const GA: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 3));
const GB: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
const GUID_A: u64 = 0x5054_00ff_fe18_0003;
const GUID_B: u64 = 0x5054_00ff_fe18_0002;
/// rdma_cm's service ID of TCP port 18515.
const SID: u64 = 0x0106_4853;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}
use Side::{A, B};

fn other(s: Side) -> Side {
    match s {
        A => B,
        B => A,
    }
}

/// One MAD an agent sent.
#[derive(Debug, Clone)]
struct Sent {
    at: Instant,
    from: Side,
    dropped: bool,
    out: OutMad,
    mad: CmMad,
}

impl Sent {
    fn attr(&self) -> u16 {
        self.mad.hdr.attribute_id
    }
}

/// Decides whether to lose a MAD: its sender, the MAD, and how many of
/// that attribute the sender sent before it.
type Loss = Box<dyn FnMut(Side, &CmMad, usize) -> bool>;

/// Two agents joined by a lossy, zero-latency link in virtual time.
struct Pair {
    a: CmAgent,
    b: CmAgent,
    now: Instant,
    lose: Loss,
    log: Vec<Sent>,
    events: Vec<(Instant, Side, CmEvent)>,
    seen: [usize; 2],
}

fn config(guid: u64, gid: IpAddr) -> CmConfig {
    let mut c = CmConfig::new(guid, vec![gid]);
    c.tid_hi = 2;
    c
}

/// The request every test makes, with distinct values in each field.
fn params() -> ConnectParams {
    let mut p = ConnectParams::new(SID, GA, GB, 0x11, Psn::new(0x12_3456));
    p.path_mtu = 5;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.retry_count = 6;
    p.rnr_retry_count = 5;
    p.flow_label = 0x1_2345;
    p.traffic_class = 0x20;
    p.sl = 3;
    p.packet_rate = 0x26;
    p.private_data = b"hello from A".to_vec();
    p
}

fn accept_params() -> AcceptParams {
    let mut p = AcceptParams::new(0x22, Psn::new(0x65_4321));
    p.responder_resources = 2;
    p.initiator_depth = 4;
    p.rnr_retry_count = 6;
    p.private_data = b"hello from B".to_vec();
    p
}

/// How long a REQ of `params()` waits: 2 x packet life time (18) + the
/// response timeout (20).
fn req_wait() -> Duration {
    cm_timeout(18).saturating_mul(2) + cm_timeout(20)
}

fn at(d: Duration) -> Instant {
    Instant::ZERO + d
}

impl Pair {
    fn new() -> Pair {
        let a = CmAgent::new(config(GUID_A, GA));
        let mut b = CmAgent::new(config(GUID_B, GB));
        b.listen(SID).unwrap();
        Pair {
            a,
            b,
            now: Instant::ZERO,
            lose: Box::new(|_, _, _| false),
            log: Vec::new(),
            events: Vec::new(),
            seen: [0; 2],
        }
    }

    fn lossy(lose: impl FnMut(Side, &CmMad, usize) -> bool + 'static) -> Pair {
        Pair {
            lose: Box::new(lose),
            ..Pair::new()
        }
    }

    fn agent(&mut self, s: Side) -> &mut CmAgent {
        match s {
            A => &mut self.a,
            B => &mut self.b,
        }
    }

    /// Moves every MAD and event until both agents are quiet.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            for s in [A, B] {
                while let Some(out) = self.agent(s).poll_transmit() {
                    moved = true;
                    let mad = CmMad::parse(&out.mad).expect("the agent sends CM MADs");
                    let a = mad.hdr.attribute_id;
                    let nth = self.sent(s, a).len();
                    let dropped = (self.lose)(s, &mad, nth);
                    let now = self.now;
                    if !dropped {
                        let from = MadPeer {
                            gid: out.to.local_gid,
                            local_gid: out.to.gid,
                            qpn: 1,
                            pkey: out.to.pkey,
                        };
                        self.agent(other(s)).handle(now, from, &out.mad);
                    }
                    self.log.push(Sent {
                        at: now,
                        from: s,
                        dropped,
                        out,
                        mad,
                    });
                }
            }
            for s in [A, B] {
                while let Some(e) = self.agent(s).poll_event() {
                    moved = true;
                    self.events.push((self.now, s, e));
                }
            }
            if !moved {
                break;
            }
        }
    }

    fn next_timeout(&self) -> Option<Instant> {
        match (self.a.poll_timeout(), self.b.poll_timeout()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// Runs every timer up to `t`, then sets the clock to `t`.
    fn run_until(&mut self, t: Instant) {
        self.pump();
        while let Some(due) = self.next_timeout().filter(|&d| d <= t) {
            assert!(
                due >= self.now,
                "a deadline in the past: {due:?} < {:?}: {:?} {:?}",
                self.now,
                self.a.poll_timeout(),
                self.b.poll_timeout()
            );
            self.now = due;
            self.a.handle_timeout(due);
            self.b.handle_timeout(due);
            self.pump();
        }
        self.now = self.now.max(t);
    }

    fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Runs until side `s` reports an event `pick` takes (at most 10
    /// virtual minutes), and returns it with its time.
    fn wait<T>(&mut self, s: Side, mut pick: impl FnMut(&CmEvent) -> Option<T>) -> (Instant, T) {
        let limit = self.now + Duration::from_secs(600);
        loop {
            self.pump();
            let i = s as usize;
            while self.seen[i] < self.events.len() {
                let (t, side, e) = &self.events[self.seen[i]];
                self.seen[i] += 1;
                if *side == s {
                    if let Some(x) = pick(e) {
                        return (*t, x);
                    }
                }
            }
            let next = self.next_timeout().filter(|&d| d <= limit);
            let Some(next) = next else {
                panic!("no such event on {s:?}: {:#?}", self.events);
            };
            self.run_until(next);
        }
    }

    fn events_of(&self, s: Side) -> Vec<CmEvent> {
        let it = self.events.iter().filter(|(_, side, _)| *side == s);
        it.map(|(_, _, e)| e.clone()).collect()
    }

    fn sent(&self, from: Side, attr_id: u16) -> Vec<Sent> {
        let it = self
            .log
            .iter()
            .filter(|x| x.from == from && x.attr() == attr_id);
        it.cloned().collect()
    }

    fn connect(&mut self) -> ConnId {
        let now = self.now;
        let id = self.a.connect(now, params()).unwrap();
        self.pump();
        id
    }

    fn request(&mut self) -> (ConnId, Box<ReqInfo>) {
        self.wait(B, |e| match e {
            CmEvent::ConnectRequest { id, info } => Some((*id, info.clone())),
            _ => None,
        })
        .1
    }

    fn accept(&mut self, id: ConnId) {
        let now = self.now;
        self.b.accept(now, id, accept_params()).unwrap();
        self.pump();
    }

    fn reply(&mut self) -> Box<RepInfo> {
        self.wait(A, |e| match e {
            CmEvent::ConnectReply { info, .. } => Some(info.clone()),
            _ => None,
        })
        .1
    }

    fn established(&mut self, s: Side) -> Instant {
        self.wait(s, |e| {
            matches!(e, CmEvent::Established { .. }).then_some(())
        })
        .0
    }

    /// The whole handshake; the two ends' IDs.
    fn handshake(&mut self) -> (ConnId, ConnId) {
        let a = self.connect();
        let (b, _) = self.request();
        self.accept(b);
        self.reply();
        self.a.establish(a).unwrap();
        self.established(B);
        (a, b)
    }

    fn disconnected(&mut self, s: Side) -> (Instant, bool) {
        self.wait(s, |e| match e {
            CmEvent::Disconnected { timed_out, .. } => Some(*timed_out),
            _ => None,
        })
    }

    fn timewait_exit(&mut self, s: Side) -> Instant {
        self.wait(s, |e| {
            matches!(e, CmEvent::TimewaitExit { .. }).then_some(())
        })
        .0
    }
}

fn padded(data: &[u8], n: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(n, 0);
    v
}

// ---------------------------------------------------------------------------
// The handshake and the teardown

#[test]
fn the_handshake_carries_every_field_both_ways() {
    let mut p = Pair::new();
    let a = p.connect();
    let (b, req) = p.request();
    assert_eq!(p.b.state(b), Some(CmState::ReqRcvd));
    assert_eq!(req.service_id, SID);
    assert_eq!(req.from.gid, GA);
    assert_eq!(
        (req.remote_ca_guid, req.remote_comm_id),
        (GUID_A, a.comm_id())
    );
    assert_eq!(
        (req.remote_qpn, req.starting_psn),
        (0x11, Psn::new(0x12_3456))
    );
    // The READ resources cross over: A's initiator depth is what B must
    // accept at once.
    assert_eq!((req.responder_resources, req.initiator_depth), (2, 4));
    assert_eq!(
        (req.path_mtu, req.pkey, req.transport_service_type),
        (5, 0xFFFF, 0)
    );
    assert_eq!((req.retry_count, req.rnr_retry_count), (6, 5));
    assert!(!req.flow_control && !req.srq);
    let path = req.path;
    assert_eq!((path.local_gid, path.remote_gid), (gid_of(GA), gid_of(GB)));
    assert_eq!((path.local_lid, path.remote_lid), (0xFFFF, 0xFFFF));
    assert_eq!(
        (path.flow_label, path.traffic_class, path.hop_limit),
        (0x1_2345, 0x20, 64)
    );
    assert_eq!(
        (path.sl, path.packet_rate, path.local_ack_timeout),
        (3, 0x26, 19)
    );
    assert_eq!(req.private_data, padded(b"hello from A", 92));

    p.accept(b);
    assert_eq!(p.b.state(b), Some(CmState::RepSent));
    let rep = p.reply();
    assert_eq!(p.a.state(a), Some(CmState::RepRcvd));
    assert_eq!(
        (rep.remote_ca_guid, rep.remote_comm_id),
        (GUID_B, b.comm_id())
    );
    assert_eq!(
        (rep.remote_qpn, rep.starting_psn),
        (0x22, Psn::new(0x65_4321))
    );
    assert_eq!((rep.responder_resources, rep.initiator_depth), (4, 2));
    assert_eq!((rep.rnr_retry_count, rep.target_ack_delay), (6, 15));
    assert_eq!(
        (rep.failover_accepted, rep.flow_control, rep.srq),
        (0, false, false)
    );
    assert_eq!(rep.local_ack_timeout, 19);
    assert_eq!(rep.private_data, padded(b"hello from B", 196));

    p.a.establish(a).unwrap();
    p.established(A);
    p.established(B);
    assert_eq!(p.a.state(a), Some(CmState::Established));
    assert_eq!(p.b.state(b), Some(CmState::Established));
    // One transaction: REQ, REP, RTU (§13.4.6.4; Linux keeps the REQ's).
    let tid = p.sent(A, attr::REQ)[0].mad.hdr.transaction_id;
    assert_eq!(p.sent(B, attr::REP)[0].mad.hdr.transaction_id, tid);
    assert_eq!(p.sent(A, attr::RTU)[0].mad.hdr.transaction_id, tid);
    // Every MAD goes to QP1 of the peer's GID, from our own.
    for s in &p.log {
        let (to, from) = if s.from == A { (GB, GA) } else { (GA, GB) };
        assert_eq!(
            (s.out.to.gid, s.out.to.local_gid, s.out.to.qpn),
            (to, from, 1)
        );
        assert_eq!(s.mad.hdr.method, method::SEND);
    }
    assert_eq!(p.log.len(), 3);
    for agent in [&p.a, &p.b] {
        let c = agent.counters();
        assert_eq!((c.tx_retries.total(), c.dropped(), c.timeouts), (0, 0, 0));
    }
    assert_eq!(p.a.counters().rx.get(attr::REP), 1);
    assert_eq!(p.b.counters().rx.get(attr::RTU), 1);
}

#[test]
fn a_disconnect_from_the_active_side_ends_in_timewait_then_frees_both() {
    let mut p = Pair::new();
    let (a, b) = p.handshake();
    let t0 = p.now;
    p.a.disconnect(t0, a).unwrap();
    assert_eq!(p.a.state(a), Some(CmState::DreqSent));
    let (_, timed_out) = p.disconnected(B);
    assert!(!timed_out);
    assert_eq!(p.b.state(b), Some(CmState::DreqRcvd));
    // rdma_cm: the DREP waits for the application's rdma_disconnect.
    assert!(p.sent(B, attr::DREP).is_empty());
    p.b.disconnect(t0, b).unwrap();
    let (t, timed_out) = p.disconnected(A);
    assert_eq!((t, timed_out), (t0, false));
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
    assert_eq!(p.b.state(b), Some(CmState::TimeWait));
    let dreq = &p.sent(A, attr::DREQ)[0];
    let CmMessage::Dreq(d) = &dreq.mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id, d.remote_qpn_eecn),
        (a.comm_id(), b.comm_id(), 0x22)
    );
    let drep = &p.sent(B, attr::DREP)[0];
    assert_eq!(drep.mad.hdr.transaction_id, dreq.mad.hdr.transaction_id);
    // TimeWait lasts the path's ACK timeout, 4.096 us x 2^19, on both.
    assert_eq!(p.timewait_exit(A), t0 + cm_timeout(19));
    assert_eq!(p.timewait_exit(B), t0 + cm_timeout(19));
    assert_eq!((p.a.state(a), p.b.state(b)), (None, None));
    assert_eq!((p.a.connections(), p.b.connections()), (0, 0));
    assert_eq!((p.a.poll_timeout(), p.b.poll_timeout()), (None, None));
    assert_eq!(
        p.a.disconnect(p.now, a),
        Err(ferroce::cm::CmError::NoSuchConn)
    );
}

#[test]
fn a_disconnect_from_the_passive_side_mirrors_it() {
    let mut p = Pair::new();
    let (a, b) = p.handshake();
    let t0 = p.now;
    p.b.disconnect(t0, b).unwrap();
    p.disconnected(A);
    p.a.disconnect(t0, a).unwrap();
    p.disconnected(B);
    // The passive side waits the response time A's REQ gave (20) before
    // it resends its DREQ: A answers that long, and a tenth.
    let w = cm_timeout(20);
    let tenth = Duration::from_nanos(w.as_nanos() / 10);
    assert_eq!(p.a.answering_until(), Some(t0 + w + tenth));
    // The passive side's DREQ is a transaction of its own.
    let dreq = &p.sent(B, attr::DREQ)[0];
    let req = &p.sent(A, attr::REQ)[0];
    assert_ne!(dreq.mad.hdr.transaction_id, req.mad.hdr.transaction_id);
    assert_eq!(dreq.mad.hdr.transaction_id >> 32, 2);
    p.timewait_exit(A);
    p.timewait_exit(B);
    assert_eq!((p.a.connections(), p.b.connections()), (0, 0));
}

/// Both ends call disconnect at once: each DREQ finds the other in DREQ
/// Sent and is answered at once; the DREPs then find TimeWait.
#[test]
fn a_simultaneous_disconnect_ends_once_on_each_side() {
    let mut p = Pair::new();
    let (a, b) = p.handshake();
    let t0 = p.now;
    p.a.disconnect(t0, a).unwrap();
    p.b.disconnect(t0, b).unwrap();
    p.pump();
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
    assert_eq!(p.b.state(b), Some(CmState::TimeWait));
    p.timewait_exit(A);
    p.timewait_exit(B);
    for s in [A, B] {
        let ev = p.events_of(s);
        let n = ev
            .iter()
            .filter(|e| matches!(e, CmEvent::Disconnected { .. }))
            .count();
        assert_eq!(n, 1, "{s:?}: {ev:?}");
    }
    assert_eq!(p.a.counters().rx_duplicates.get(attr::DREP), 1);
    assert_eq!(p.b.counters().rx_duplicates.get(attr::DREP), 1);
}

// ---------------------------------------------------------------------------
// Losses

#[test]
fn a_lost_req_is_resent_after_the_response_timeout() {
    let mut p = Pair::lossy(|s, m, nth| s == A && m.hdr.attribute_id == attr::REQ && nth == 0);
    let a = p.connect();
    let (b, _) = p.request();
    let reqs = p.sent(A, attr::REQ);
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].dropped && !reqs[1].dropped);
    assert_eq!(reqs[1].at, at(req_wait()));
    // The same message again: same transaction, same bytes.
    assert_eq!(reqs[1].out.mad, reqs[0].out.mad);
    p.accept(b);
    p.reply();
    p.a.establish(a).unwrap();
    p.established(B);
    assert_eq!(p.a.counters().tx_retries.get(attr::REQ), 1);
    assert_eq!(p.a.counters().tx.get(attr::REQ), 2);
}

#[test]
fn a_lost_rep_is_resent_after_the_reqs_local_response_timeout() {
    let mut p = Pair::lossy(|s, m, nth| s == B && m.hdr.attribute_id == attr::REP && nth == 0);
    let a = p.connect();
    let (b, _) = p.request();
    p.accept(b);
    p.reply();
    let reps = p.sent(B, attr::REP);
    assert_eq!(reps.len(), 2);
    // B waits the REQ's local CM response timeout (20) for the RTU.
    assert_eq!(reps[1].at, at(cm_timeout(20)));
    assert_eq!(reps[1].out.mad, reps[0].out.mad);
    // The REP came before A's REQ resend would have.
    assert_eq!(p.sent(A, attr::REQ).len(), 1);
    p.a.establish(a).unwrap();
    p.established(B);
}

/// B accepts late, its REP is lost, and A's REQ resend reaches B in REP
/// Sent: B sends the REP again at once rather than waiting for its own
/// resend.
#[test]
fn a_lost_rep_is_resent_on_the_duplicate_req() {
    let mut p = Pair::lossy(|s, m, nth| s == B && m.hdr.attribute_id == attr::REP && nth == 0);
    let a = p.connect();
    let (b, _) = p.request();
    p.run_until(at(Duration::from_secs(5)));
    p.accept(b);
    p.reply();
    let reps = p.sent(B, attr::REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[1].at, at(req_wait()));
    assert_eq!(reps[1].out.mad, reps[0].out.mad);
    assert_eq!(p.sent(A, attr::REQ)[1].at, at(req_wait()));
    assert_eq!(p.b.counters().rx_duplicates.get(attr::REQ), 1);
    p.a.establish(a).unwrap();
    p.established(B);
    p.run_for(Duration::from_secs(60));
    // The answer to the duplicate is not a timer resend, and the RTU
    // stopped B's timer before it ran out.
    assert_eq!(p.b.counters().tx_retries.get(attr::REP), 0);
    assert_eq!(p.sent(B, attr::REP).len(), 2);
}

/// The RTU is lost: B resends its REP after the timeout, A (established)
/// takes it as a duplicate and sends the RTU again (Linux
/// `cm_dup_rep_handler`).
#[test]
fn a_lost_rtu_is_recovered_by_the_rep_resend() {
    let mut p = Pair::lossy(|s, m, nth| s == A && m.hdr.attribute_id == attr::RTU && nth == 0);
    let a = p.connect();
    let (b, _) = p.request();
    p.accept(b);
    p.reply();
    p.a.establish(a).unwrap();
    let t = p.established(B);
    assert_eq!(t, at(cm_timeout(20)));
    let rtus = p.sent(A, attr::RTU);
    assert_eq!(rtus.len(), 2);
    assert_eq!(rtus[1].out.mad, rtus[0].out.mad);
    assert_eq!(p.a.counters().rx_duplicates.get(attr::REP), 1);
    assert_eq!(p.b.state(b), Some(CmState::Established));
}

/// The RTU is lost but traffic reaches B's QP first: notify_comm_est
/// establishes B and stops the REP resends.
#[test]
fn a_lost_rtu_is_covered_by_the_first_traffic() {
    let mut p = Pair::lossy(|s, m, _| s == A && m.hdr.attribute_id == attr::RTU);
    let a = p.connect();
    let (b, _) = p.request();
    p.accept(b);
    p.reply();
    p.a.establish(a).unwrap();
    p.run_for(Duration::from_millis(1));
    p.b.notify_comm_est(b).unwrap();
    assert_eq!(p.established(B), at(Duration::from_millis(1)));
    assert_eq!(p.b.state(b), Some(CmState::Established));
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.sent(B, attr::REP).len(), 1);
    // Traffic again changes nothing.
    assert_eq!(p.b.notify_comm_est(b), Ok(()));
    p.pump();
    let n = p
        .events_of(B)
        .iter()
        .filter(|e| matches!(e, CmEvent::Established { .. }))
        .count();
    assert_eq!(n, 1);
}

#[test]
fn a_lost_dreq_is_resent() {
    let mut p = Pair::lossy(|s, m, nth| s == A && m.hdr.attribute_id == attr::DREQ && nth == 0);
    let (a, b) = p.handshake();
    let t0 = p.now;
    p.a.disconnect(t0, a).unwrap();
    let (t, _) = p.disconnected(B);
    // The active side's DREQ waits as its REQ did.
    assert_eq!(t, t0 + req_wait());
    p.b.disconnect(p.now, b).unwrap();
    p.disconnected(A);
    let dreqs = p.sent(A, attr::DREQ);
    assert_eq!(dreqs.len(), 2);
    assert_eq!(dreqs[1].out.mad, dreqs[0].out.mad);
}

/// The DREP is lost: A resends the DREQ, and B sends the DREP again,
/// from TimeWait (Linux `cm_dreq_handler`) or, once TimeWait is over, for
/// a connection it no longer knows (`cm_issue_drep`): the same DREP.
#[test]
fn a_lost_drep_is_sent_again_from_timewait() {
    let mut p = Pair::lossy(|s, m, nth| s == B && m.hdr.attribute_id == attr::DREP && nth == 0);
    let mut cfg = config(GUID_B, GB);
    cfg.timewait = Some(Duration::from_secs(60));
    p.b = CmAgent::new(cfg);
    p.b.listen(SID).unwrap();
    let (a, b) = p.handshake();
    let t0 = p.now;
    p.a.disconnect(t0, a).unwrap();
    p.disconnected(B);
    assert_eq!(p.b.answering_until(), None);
    p.b.disconnect(t0, b).unwrap();
    // B keeps answering one of A's DREQ waits (2 x packet life time + the
    // response time, as A's REQ wait) and a tenth after its DREP.
    let tenth = |d: Duration| d + Duration::from_nanos(d.as_nanos() / 10);
    assert_eq!(p.b.answering_until(), Some(t0 + tenth(req_wait())));
    let (t, timed_out) = p.disconnected(A);
    assert_eq!((t, timed_out), (t0 + req_wait(), false));
    // The DREQ's resend is inside that window, and the DREP sent again
    // opens another.
    assert_eq!(p.b.answering_until(), Some(t + tenth(req_wait())));
    assert_eq!(p.b.counters().rx_duplicates.get(attr::DREQ), 1);
    assert_eq!(p.b.counters().dreq_unknown, 0);
    assert_eq!(p.b.state(b), Some(CmState::TimeWait));
    let dreps = p.sent(B, attr::DREP);
    assert_eq!(dreps.len(), 2);
    assert_eq!(dreps[1].mad, dreps[0].mad);
    // With Linux's TimeWait (2.1 s) B has forgotten the connection by the
    // DREQ resend (6.4 s) and answers it as unknown, with the same bytes.
    let mut q = Pair::lossy(|s, m, nth| s == B && m.hdr.attribute_id == attr::DREP && nth == 0);
    let (a, b) = q.handshake();
    let t0 = q.now;
    q.a.disconnect(t0, a).unwrap();
    q.disconnected(B);
    q.b.disconnect(t0, b).unwrap();
    let (t, _) = q.disconnected(A);
    assert_eq!(q.b.counters().dreq_unknown, 1);
    // A DREQ for a connection forgotten: its peer's wait is not known, so
    // twice the response time our REQ gives, and a tenth.
    assert_eq!(
        q.b.answering_until(),
        Some(t + tenth(cm_timeout(20).saturating_mul(2)))
    );
    let dreps = q.sent(B, attr::DREP);
    assert_eq!(dreps[1].out.mad, dreps[0].out.mad);
}

// ---------------------------------------------------------------------------
// Resends that run out

#[test]
fn all_reqs_lost_is_unreachable_after_max_retries_plus_one_sends() {
    let mut p = Pair::lossy(|s, m, _| s == A && m.hdr.attribute_id == attr::REQ);
    let a = p.connect();
    let (t, unanswered) = p.wait(A, |e| match e {
        CmEvent::Unreachable { unanswered, .. } => Some(*unanswered),
        _ => None,
    });
    assert_eq!(unanswered, attr::REQ);
    let reqs = p.sent(A, attr::REQ);
    assert_eq!(reqs.len(), 16, "Max CM Retries (15) + 1 sends");
    for (k, r) in reqs.iter().enumerate() {
        assert_eq!(r.at, at(req_wait().saturating_mul(k as u64)), "send {k}");
        assert_eq!(r.out.mad, reqs[0].out.mad);
    }
    assert_eq!(t, at(req_wait().saturating_mul(16)));
    assert_eq!(p.a.state(a), None);
    assert_eq!(p.a.poll_timeout(), None);
    let c = p.a.counters();
    assert_eq!((c.timeouts, c.tx_retries.get(attr::REQ)), (1, 15));
    assert!(p.events_of(B).is_empty());
}

/// A smaller Max CM Retries in the config is what the REQ carries and
/// what the active side uses.
#[test]
fn max_retries_come_from_the_config() {
    let mut p = Pair::lossy(|s, m, _| s == A && m.hdr.attribute_id == attr::REQ);
    let mut cfg = config(GUID_A, GA);
    cfg.max_retries = 2;
    cfg.response_timeout = 14;
    p.a = CmAgent::new(cfg);
    p.connect();
    let (t, _) = p.wait(A, |e| {
        matches!(e, CmEvent::Unreachable { .. }).then_some(())
    });
    let wait = cm_timeout(18).saturating_mul(2) + cm_timeout(14);
    assert_eq!(p.sent(A, attr::REQ).len(), 3);
    assert_eq!(t, at(wait.saturating_mul(3)));
    let CmMessage::Req(r) = &p.sent(A, attr::REQ)[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (
            r.max_cm_retries,
            r.remote_cm_response_timeout,
            r.local_cm_response_timeout
        ),
        (2, 14, 14)
    );
}

/// Every RTU lost and no traffic: B's REP resends run out and the
/// connection is unreachable on B's side (Linux `IB_CM_REP_ERROR`).
#[test]
fn all_reps_unanswered_is_unreachable_on_the_passive_side() {
    let mut p = Pair::lossy(|s, m, _| s == A && m.hdr.attribute_id == attr::RTU);
    let a = p.connect();
    let (b, _) = p.request();
    p.accept(b);
    p.reply();
    p.a.establish(a).unwrap();
    let (t, unanswered) = p.wait(B, |e| match e {
        CmEvent::Unreachable { unanswered, .. } => Some(*unanswered),
        _ => None,
    });
    assert_eq!(unanswered, attr::REP);
    assert_eq!(t, at(cm_timeout(20).saturating_mul(16)));
    assert_eq!(p.sent(B, attr::REP).len(), 16);
    assert_eq!(p.b.state(b), None);
    // A answered every REP resend with the RTU again.
    assert_eq!(p.sent(A, attr::RTU).len(), 16);
}

#[test]
fn all_dreqs_lost_forces_timewait() {
    let mut p = Pair::lossy(|s, m, _| s == A && m.hdr.attribute_id == attr::DREQ);
    let (a, _) = p.handshake();
    let t0 = p.now;
    p.a.disconnect(t0, a).unwrap();
    let (t, timed_out) = p.disconnected(A);
    assert!(timed_out);
    assert_eq!(t, t0 + req_wait().saturating_mul(16));
    assert_eq!(p.sent(A, attr::DREQ).len(), 16);
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
    assert_eq!(p.timewait_exit(A), t + cm_timeout(19));
    assert_eq!(p.a.counters().timeouts, 1);
}

// ---------------------------------------------------------------------------
// MRA

/// B's application is slow: A's REQ resend finds B in REQ Rcvd, B
/// answers with an MRA (service timeout 24), and A waits that long
/// before the next resend; B's accept then completes the handshake.
#[test]
fn a_slow_accept_is_covered_by_an_mra_on_the_duplicate_req() {
    let mut p = Pair::new();
    let a = p.connect();
    let (b, _) = p.request();
    p.run_until(at(req_wait()));
    assert_eq!(p.b.state(b), Some(CmState::MraReqSent));
    assert_eq!(p.a.state(a), Some(CmState::MraReqRcvd));
    let mra = &p.sent(B, attr::MRA)[0];
    let CmMessage::Mra(m) = &mra.mad.msg else {
        unreachable!()
    };
    assert_eq!((m.message_mraed, m.service_timeout), (0, 24));
    assert_eq!(
        (m.local_comm_id, m.remote_comm_id),
        (b.comm_id(), a.comm_id())
    );
    // A's next REQ waits the service timeout plus the path's ACK timeout.
    let wait = cm_timeout(24) + cm_timeout(19);
    assert_eq!(p.a.poll_timeout(), Some(at(req_wait()) + wait));
    p.run_until(at(Duration::from_secs(30)));
    assert_eq!(p.sent(A, attr::REQ).len(), 2);
    p.accept(b);
    p.reply();
    p.a.establish(a).unwrap();
    p.established(B);
    assert_eq!(p.a.counters().rx.get(attr::MRA), 1);
    // A stray copy of the REQ now is a duplicate, not a new connection.
    let again = p.sent(A, attr::REQ)[0].out.clone();
    let before = p.b.connections();
    p.b.handle(
        p.now,
        MadPeer {
            gid: GA,
            local_gid: GB,
            qpn: 1,
            pkey: 0xFFFF,
        },
        &again.mad,
    );
    assert_eq!(p.b.connections(), before);
}

// ---------------------------------------------------------------------------
// Rejections

#[test]
fn a_req_for_a_service_nobody_listens_on_is_rejected_with_reason_8() {
    let mut p = Pair::new();
    let now = p.now;
    let mut cp = params();
    cp.service_id = 0x0106_0001;
    let a = p.a.connect(now, cp).unwrap();
    let (_, (reason, private)) = p.wait(A, |e| match e {
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => Some((*reason, private_data.clone())),
        _ => None,
    });
    assert_eq!(reason, reason::INVALID_SERVICE_ID);
    assert_eq!(private, vec![0; 148]);
    assert_eq!(p.a.state(a), None);
    assert_eq!(p.b.connections(), 0);
    let rej = &p.sent(B, attr::REJ)[0];
    let CmMessage::Rej(r) = &rej.mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id, r.message_rejected),
        (0, a.comm_id(), 0)
    );
    assert_eq!(
        rej.mad.hdr.transaction_id,
        p.sent(A, attr::REQ)[0].mad.hdr.transaction_id
    );
    assert_eq!(p.b.counters().rej_sent.get(&8), Some(&1));
    assert_eq!(p.a.counters().rej_received.get(&8), Some(&1));
    assert!(p.events_of(B).is_empty());
}

#[test]
fn a_req_to_a_gid_the_agent_lacks_is_rejected_with_reason_12() {
    let mut p = Pair::new();
    let now = p.now;
    let mut cp = params();
    cp.remote_gid = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 9));
    p.a.connect(now, cp).unwrap();
    let (_, (reason, ari)) = p.wait(A, |e| match e {
        CmEvent::Rejected { reason, ari, .. } => Some((*reason, ari.clone())),
        _ => None,
    });
    assert_eq!(reason, reason::INVALID_GID);
    assert_eq!(ari, gid_of(GB).to_vec());
}

#[test]
fn a_consumer_reject_carries_reason_28_and_private_data() {
    let mut p = Pair::new();
    let a = p.connect();
    let (b, _) = p.request();
    let now = p.now;
    p.b.reject(now, b, reason::CONSUMER_DEFINED, b"no room")
        .unwrap();
    assert_eq!(p.b.state(b), None);
    let (_, (reason, private)) = p.wait(A, |e| match e {
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => Some((*reason, private_data.clone())),
        _ => None,
    });
    assert_eq!(reason, 28);
    assert_eq!(private, padded(b"no room", 148));
    assert_eq!(p.a.state(a), None);
    let CmMessage::Rej(r) = &p.sent(B, attr::REJ)[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id, r.message_rejected),
        (b.comm_id(), a.comm_id(), 0)
    );
    // Nothing else happens afterwards.
    let n = p.log.len();
    p.run_for(Duration::from_secs(300));
    assert_eq!(p.log.len(), n);
    assert_eq!((p.a.connections(), p.b.connections()), (0, 0));
}

/// The active side gives up before an answer with REJ "timeout": its ARI
/// names A's CA, by which B finds the connection it holds in REQ Rcvd
/// and frees it (Linux `cm_acquire_rejected_id`).
#[test]
fn abandoning_a_connect_with_reason_timeout_frees_the_passive_side_too() {
    let mut p = Pair::new();
    let a = p.connect();
    let (b, _) = p.request();
    let now = p.now;
    p.a.reject(now, a, reason::TIMEOUT, &[]).unwrap();
    let (_, (reason, ari)) = p.wait(B, |e| match e {
        CmEvent::Rejected { reason, ari, .. } => Some((*reason, ari.clone())),
        _ => None,
    });
    assert_eq!(reason, reason::TIMEOUT);
    assert_eq!(ari, GUID_A.to_be_bytes().to_vec());
    assert_eq!((p.a.state(a), p.b.state(b)), (None, None));
    assert_eq!(p.b.counters().rej_received.get(&4), Some(&1));
}

/// The active side refuses the REP (Linux `ib_send_cm_rej` in REP Rcvd):
/// a REJ of the REP; B, in REP Sent, is reset to idle (Linux
/// `cm_rej_handler`): both are freed.
#[test]
fn rejecting_a_rep_frees_both_sides() {
    let mut p = Pair::new();
    let a = p.connect();
    let (b, _) = p.request();
    p.accept(b);
    p.reply();
    let now = p.now;
    p.a.reject(now, a, reason::CONSUMER_DEFINED, &[]).unwrap();
    p.pump();
    assert_eq!(p.a.state(a), None);
    assert_eq!(p.b.state(b), None);
    let CmMessage::Rej(r) = &p.sent(A, attr::REJ)[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(
        (r.message_rejected, r.local_comm_id, r.remote_comm_id),
        (1, a.comm_id(), b.comm_id())
    );
    assert!(p
        .events_of(B)
        .iter()
        .any(|e| matches!(e, CmEvent::Rejected { reason: 28, .. })));
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.sent(B, attr::REP).len(), 1);
}

/// A REQ again while the connection is in TimeWait: REJ "stale
/// connection" (Linux `cm_dup_req_handler`).
#[test]
fn a_duplicate_req_in_timewait_is_rejected_as_stale() {
    let mut p = Pair::new();
    let (a, b) = p.handshake();
    let now = p.now;
    p.a.disconnect(now, a).unwrap();
    p.disconnected(B);
    p.b.disconnect(now, b).unwrap();
    p.pump();
    let req = p.sent(A, attr::REQ)[0].out.clone();
    p.b.handle(
        now,
        MadPeer {
            gid: GA,
            local_gid: GB,
            qpn: 1,
            pkey: 0xFFFF,
        },
        &req.mad,
    );
    p.pump();
    let rej = p.sent(B, attr::REJ);
    let CmMessage::Rej(r) = &rej[0].mad.msg else {
        unreachable!()
    };
    assert_eq!(r.reason, reason::STALE_CONN);
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (b.comm_id(), a.comm_id())
    );
    assert_eq!(p.b.counters().rx_duplicates.get(attr::REQ), 1);
    // A is in TimeWait too: the REJ changes nothing there.
    assert_eq!(p.a.state(a), Some(CmState::TimeWait));
}

/// A new REQ from A's CA for a QP B is still connected to: refused as
/// stale (A's new connection goes to TimeWait), and B disconnects the old
/// connection (Linux `cm_match_req`).
#[test]
fn a_req_for_a_qp_still_connected_is_stale_and_tears_the_old_one_down() {
    let mut p = Pair::new();
    let (a, b) = p.handshake();
    let now = p.now;
    let a2 = p.a.connect(now, params()).unwrap();
    p.pump();
    assert_eq!(p.b.counters().stale, 1);
    let rejected = p.events_of(A).iter().any(|e| {
        matches!(e,
        CmEvent::Rejected { id, reason: 10, .. } if *id == a2)
    });
    assert!(rejected);
    assert_eq!(p.a.state(a2), Some(CmState::TimeWait));
    // The old connection is torn down from B's side.
    assert_eq!(p.b.state(b), Some(CmState::DreqSent));
    assert_eq!(p.a.state(a), Some(CmState::DreqRcvd));
}

// ---------------------------------------------------------------------------
// Unknown and malformed input

fn peer() -> MadPeer {
    MadPeer {
        gid: GA,
        local_gid: GB,
        qpn: 1,
        pkey: 0xFFFF,
    }
}

fn mad_bytes(tid: u64, msg: CmMessage) -> [u8; MAD_LEN] {
    let mut b = [0u8; MAD_LEN];
    CmMad::new(tid, msg).emit(&mut b).unwrap();
    b
}

#[test]
fn a_dreq_for_no_connection_is_answered_with_a_drep_and_counted() {
    let mut b = CmAgent::new(config(GUID_B, GB));
    let dreq = Dreq {
        local_comm_id: 0x1234_5678,
        remote_comm_id: 0x9abc_def0,
        remote_qpn_eecn: 0x33,
        private_data: [0; 220],
    };
    b.handle(
        Instant::ZERO,
        peer(),
        &mad_bytes(0x7_0000_0042, CmMessage::Dreq(dreq)),
    );
    let out = b.poll_transmit().expect("a DREP");
    assert_eq!(out.to.gid, GA);
    let m = CmMad::parse(&out.mad).unwrap();
    assert_eq!(m.hdr.transaction_id, 0x7_0000_0042);
    let CmMessage::Drep(d) = m.msg else {
        panic!("{m:?}")
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (0x9abc_def0, 0x1234_5678)
    );
    assert_eq!(b.counters().dreq_unknown, 1);
    assert_eq!(b.counters().rx_duplicates.get(attr::DREQ), 1);
    assert_eq!(b.poll_event(), None);
    assert_eq!(b.connections(), 0);
}

#[test]
fn malformed_mads_are_counted_and_dropped() {
    let mut b = CmAgent::new(config(GUID_B, GB));
    b.listen(SID).unwrap();
    let mut a = CmAgent::new(config(GUID_A, GA));
    a.connect(Instant::ZERO, params()).unwrap();
    let req = a.poll_transmit().unwrap().mad;
    let with = |at: usize, v: u8| {
        let mut m = req;
        m[at] = v;
        m
    };
    let now = Instant::ZERO;
    b.handle(now, peer(), &req[..100]);
    b.handle(now, peer(), &[]);
    b.handle(now, peer(), &with(0, 2)); // base version
    b.handle(now, peer(), &with(1, 0x81)); // class: subnet management
    b.handle(now, peer(), &with(2, 1)); // class version
    b.handle(now, peer(), &with(3, method::GET_RESP)); // method
    b.handle(now, peer(), &with(17, 0x19)); // LAP
    b.handle(now, peer(), &with(17, 0x20)); // nothing
    let c = b.counters();
    assert_eq!((c.malformed, c.not_cm, c.bad_class_version), (3, 1, 1));
    assert_eq!((c.bad_method, c.unknown_attribute), (1, 2));
    assert_eq!(c.dropped(), 8);
    assert_eq!(c.rx.total(), 0);
    assert_eq!(b.poll_event(), None);
    assert_eq!(b.poll_transmit(), None);
    // The REQ itself still works afterwards, and a longer buffer is its
    // first 256 bytes.
    let mut long = req.to_vec();
    long.extend_from_slice(&[0xEE; 64]);
    b.handle(now, peer(), &long);
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
}

/// Replies for nothing: REP, RTU, DREP, MRA, REJ with unknown IDs are
/// counted as unmatched; a SIDR_REQ gets "service ID not supported".
#[test]
fn answers_to_nothing_are_unmatched_and_sidr_is_not_served() {
    let mut b = CmAgent::new(config(GUID_B, GB));
    let now = Instant::ZERO;
    let data = [0x5Au8; 232];
    for a in [
        attr::REP,
        attr::RTU,
        attr::DREP,
        attr::MRA,
        attr::REJ,
        attr::SIDR_REP,
    ] {
        let msg = CmMessage::parse(a, &data).unwrap();
        b.handle(now, peer(), &mad_bytes(9, msg));
    }
    assert_eq!(b.counters().unmatched, 6);
    assert_eq!(b.poll_transmit(), None);
    let msg = CmMessage::parse(attr::SIDR_REQ, &data).unwrap();
    b.handle(now, peer(), &mad_bytes(10, msg));
    let m = CmMad::parse(&b.poll_transmit().unwrap().mad).unwrap();
    let CmMessage::SidrRep(r) = m.msg else {
        panic!("{m:?}")
    };
    assert_eq!(
        (r.status, r.request_id, m.hdr.transaction_id),
        (1, 0x5A5A_5A5A, 10)
    );
    assert_eq!(b.counters().sidr_unsupported, 1);
    assert_eq!(b.poll_event(), None);
}

// ---------------------------------------------------------------------------
// The RDMA CM captures

/// One CM MAD of a capture: who sent it, the address it arrived with, its
/// bytes and its parse.
struct Cap {
    frame: usize,
    src: IpAddr,
    from: MadPeer,
    bytes: [u8; MAD_LEN],
    mad: CmMad,
}

fn capture(name: &str) -> Vec<Cap> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/vectors/{name}.pcap"));
    let mut r = ferroce::pcap::open(&p).unwrap();
    let mut v = Vec::new();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        let Ok(f) = Frame::parse(rec.data) else {
            continue;
        };
        if f.dest_qp() != 1 {
            continue;
        }
        let repr = f.repr();
        let from = MadPeer {
            gid: repr.ip.src(),
            local_gid: repr.ip.dst(),
            qpn: repr.ext.deth.unwrap().src_qp,
            pkey: repr.bth.pkey,
        };
        let mut bytes = [0u8; MAD_LEN];
        bytes.copy_from_slice(f.payload);
        v.push(Cap {
            frame: n,
            src: from.gid,
            from,
            mad: CmMad::parse(&bytes).unwrap(),
            bytes,
        });
    }
    v
}

/// One connection of a capture: its REQ, REP, RTU, and its DREQ / DREP.
struct Conn<'a> {
    req: &'a Cap,
    rep: &'a Cap,
    rtu: &'a Cap,
    dreq: &'a Cap,
    drep: &'a Cap,
}

fn connections(caps: &[Cap]) -> Vec<Conn<'_>> {
    let ids = |c: &Cap| match &c.mad.msg {
        CmMessage::Req(m) => (m.local_comm_id, 0),
        CmMessage::Rep(m) => (m.local_comm_id, m.remote_comm_id),
        CmMessage::Rtu(m) | CmMessage::Drep(m) => (m.local_comm_id, m.remote_comm_id),
        CmMessage::Dreq(m) => (m.local_comm_id, m.remote_comm_id),
        _ => (0, 0),
    };
    let find = |a: u16, pred: &dyn Fn((u32, u32)) -> bool| {
        caps.iter()
            .find(|c| c.mad.hdr.attribute_id == a && pred(ids(c)))
            .unwrap_or_else(|| panic!("no {a:#x}"))
    };
    let mut v = Vec::new();
    for req in caps.iter().filter(|c| c.mad.hdr.attribute_id == attr::REQ) {
        let (x, _) = ids(req);
        let rep = find(attr::REP, &|(_, r)| r == x);
        let (y, _) = ids(rep);
        let pair = |(l, r)| (l, r) == (x, y) || (l, r) == (y, x);
        v.push(Conn {
            req,
            rep,
            rtu: find(attr::RTU, &|ids| ids == (x, y)),
            dreq: find(attr::DREQ, &pair),
            drep: find(attr::DREP, &pair),
        });
    }
    v
}

fn sole(a: &mut CmAgent) -> OutMad {
    let out = a.poll_transmit().expect("a MAD");
    assert!(a.poll_transmit().is_none());
    out
}

fn event(a: &mut CmAgent) -> CmEvent {
    a.poll_event().expect("an event")
}

fn same_mad(ours: &OutMad, theirs: &Cap, what: &str) {
    assert_eq!(
        CmMad::parse(&ours.mad).unwrap(),
        theirs.mad,
        "{what}: frame {}",
        theirs.frame
    );
    assert_eq!(
        ours.mad, theirs.bytes,
        "{what}: frame {} bytes",
        theirs.frame
    );
    assert_eq!(
        (ours.to.gid, ours.to.local_gid),
        (theirs.from.local_gid, theirs.from.gid)
    );
}

/// The server's side: the captured REQ into a listening agent whose CA
/// GUID and ID seed are the server's; accepted with the captured REP's
/// values it must emit that REP byte for byte; the captured RTU
/// establishes it; then the DREQ / DREP of the capture, either way.
fn replay_passive(c: &Conn<'_>, name: &str) {
    let CmMessage::Req(req) = &c.req.mad.msg else {
        unreachable!()
    };
    let CmMessage::Rep(rep) = &c.rep.mad.msg else {
        unreachable!()
    };
    let server = c.rep.src;
    let mut cfg = config(rep.local_ca_guid, server);
    cfg.id_seed = rep.local_comm_id.swap_bytes();
    cfg.ack_delay = rep.target_ack_delay;
    let mut b = CmAgent::new(cfg);
    b.listen(req.service_id).unwrap();
    let now = Instant::ZERO;
    b.handle(now, c.req.from, &c.req.bytes);
    let CmEvent::ConnectRequest { id, info } = event(&mut b) else {
        panic!("{name}: no ConnectRequest")
    };
    assert_eq!(
        (info.remote_qpn, info.starting_psn),
        (req.local_qpn, req.starting_psn)
    );
    assert_eq!(info.private_data, req.private_data.to_vec());
    assert_eq!(info.path, req.primary);
    let mut ap = AcceptParams::new(rep.local_qpn, rep.starting_psn);
    ap.responder_resources = rep.responder_resources;
    ap.initiator_depth = rep.initiator_depth;
    ap.rnr_retry_count = rep.rnr_retry_count;
    ap.failover_accepted = rep.failover_accepted;
    ap.flow_control = rep.end_to_end_flow_control;
    ap.srq = rep.srq;
    ap.private_data = rep.private_data.to_vec();
    b.accept(now, id, ap).unwrap();
    same_mad(&sole(&mut b), c.rep, &format!("{name}: our REP"));
    b.handle(now, c.rtu.from, &c.rtu.bytes);
    assert_eq!(event(&mut b), CmEvent::Established { id });
    if c.dreq.src == server {
        b.disconnect(now, id).unwrap();
        same_mad(&sole(&mut b), c.dreq, &format!("{name}: our DREQ"));
        b.handle(now, c.drep.from, &c.drep.bytes);
    } else {
        b.handle(now, c.dreq.from, &c.dreq.bytes);
        assert_eq!(
            event(&mut b),
            CmEvent::Disconnected {
                id,
                timed_out: false
            }
        );
        b.disconnect(now, id).unwrap();
        same_mad(&sole(&mut b), c.drep, &format!("{name}: our DREP"));
    }
    assert_eq!(b.state(id), Some(CmState::TimeWait));
    b.handle_timeout(now + cm_timeout(req.primary.local_ack_timeout));
    let ev: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
    assert_eq!(ev.last(), Some(&CmEvent::TimewaitExit { id }), "{name}");
    assert_eq!(b.counters().dropped(), 0);
}

/// The client's side: an agent with the client's CA GUID, ID seed and MAD
/// agent number, given the REQ's parameters, must emit the captured REQ
/// byte for byte, answer the captured REP with the captured RTU, and
/// disconnect as the capture does.
fn replay_active(c: &Conn<'_>, name: &str) {
    let CmMessage::Req(req) = &c.req.mad.msg else {
        unreachable!()
    };
    let CmMessage::Rep(rep) = &c.rep.mad.msg else {
        unreachable!()
    };
    let client = c.req.src;
    let mut cfg = config(req.local_ca_guid, client);
    cfg.id_seed = req.local_comm_id.swap_bytes();
    cfg.tid_hi = (c.req.mad.hdr.transaction_id >> 32) as u32;
    cfg.response_timeout = req.remote_cm_response_timeout;
    cfg.max_retries = req.max_cm_retries;
    let mut a = CmAgent::new(cfg);
    let path = &req.primary;
    let mut p = ConnectParams::new(
        req.service_id,
        client,
        c.req.from.local_gid,
        req.local_qpn,
        req.starting_psn,
    );
    p.path_mtu = req.path_mtu;
    p.responder_resources = req.responder_resources;
    p.initiator_depth = req.initiator_depth;
    p.retry_count = req.retry_count;
    p.rnr_retry_count = req.rnr_retry_count;
    p.flow_control = req.end_to_end_flow_control;
    p.srq = req.srq;
    p.pkey = req.pkey;
    p.flow_label = path.flow_label;
    p.traffic_class = path.traffic_class;
    p.hop_limit = path.hop_limit;
    p.sl = path.sl;
    p.packet_rate = path.packet_rate;
    // rdma_cm's RoCE packet life time in Linux 6.1 (CMA_IBOE_PACKET_LIFETIME).
    p.packet_life_time = 18;
    p.private_data = req.private_data.to_vec();
    let now = Instant::ZERO;
    let id = a.connect(now, p).unwrap();
    same_mad(&sole(&mut a), c.req, &format!("{name}: our REQ"));
    a.handle(now, c.rep.from, &c.rep.bytes);
    let CmEvent::ConnectReply { id: rid, info } = event(&mut a) else {
        panic!("{name}: no ConnectReply")
    };
    assert_eq!(rid, id);
    assert_eq!(
        (info.remote_qpn, info.starting_psn),
        (rep.local_qpn, rep.starting_psn)
    );
    a.establish(id).unwrap();
    same_mad(&sole(&mut a), c.rtu, &format!("{name}: our RTU"));
    assert_eq!(event(&mut a), CmEvent::Established { id });
    if c.dreq.src == client {
        a.disconnect(now, id).unwrap();
        same_mad(&sole(&mut a), c.dreq, &format!("{name}: our DREQ"));
        a.handle(now, c.drep.from, &c.drep.bytes);
        assert_eq!(
            event(&mut a),
            CmEvent::Disconnected {
                id,
                timed_out: false
            }
        );
    } else {
        a.handle(now, c.dreq.from, &c.dreq.bytes);
        assert_eq!(
            event(&mut a),
            CmEvent::Disconnected {
                id,
                timed_out: false
            }
        );
        a.disconnect(now, id).unwrap();
        same_mad(&sole(&mut a), c.drep, &format!("{name}: our DREP"));
    }
    assert_eq!(a.state(id), Some(CmState::TimeWait));
    assert_eq!(a.counters().dropped(), 0);
}

fn replay(name: &str, connections_expected: usize) {
    let caps = capture(name);
    let conns = connections(&caps);
    assert_eq!(conns.len(), connections_expected, "{name}");
    for c in &conns {
        replay_passive(c, name);
        replay_active(c, name);
    }
}

#[test]
fn ib_send_bw_rdmacm_is_replayed_byte_for_byte() {
    replay("ib_send_bw_rdmacm", 2);
}

#[test]
fn ib_write_bw_rdmacm_mtu4096_is_replayed_byte_for_byte() {
    replay("ib_write_bw_rdmacm_mtu4096", 2);
}

#[test]
fn rping_cm_is_replayed_byte_for_byte() {
    replay("rping_cm", 1);
}

/// The captures disconnect from both sides: the replays above cover a
/// DREQ sent by each.
#[test]
fn the_captures_hold_dreqs_from_both_sides_and_no_mra() {
    let caps = capture("ib_send_bw_rdmacm");
    let conns = connections(&caps);
    let from_server = conns.iter().filter(|c| c.dreq.src == c.rep.src).count();
    assert_eq!(from_server, 1);
    for name in [
        "ib_send_bw_rdmacm",
        "ib_write_bw_rdmacm_mtu4096",
        "rping_cm",
    ] {
        let mras = capture(name)
            .iter()
            .filter(|c| c.mad.hdr.attribute_id == attr::MRA)
            .count();
        assert_eq!(mras, 0, "{name}");
    }
}

// ---------------------------------------------------------------------------
// Properties

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// What every agent must keep whatever it is fed: what it sends parses
/// as a CM MAD of method Send, and no deadline is left in the past.
fn check_sane(a: &mut CmAgent, now: Instant) -> Result<(), TestCaseError> {
    a.handle_timeout(now);
    if let Some(t) = a.poll_timeout() {
        prop_assert!(t > now);
    }
    while let Some(out) = a.poll_transmit() {
        let m = CmMad::parse(&out.mad);
        prop_assert!(m.is_ok(), "{:?}", m);
        prop_assert_eq!(m.unwrap().hdr.method, method::SEND);
        prop_assert_eq!(out.to.qpn, 1);
    }
    while a.poll_event().is_some() {}
    Ok(())
}

#[test]
fn random_bytes_never_panic_the_agent() {
    // One agent through every case: what one input leaves behind meets
    // the next.
    let mut b = CmAgent::new(config(GUID_B, GB));
    b.listen(SID).unwrap();
    let b = std::cell::RefCell::new(b);
    let now = std::cell::Cell::new(Instant::ZERO);
    runner(3000)
        .run(&prop::collection::vec(any::<u8>(), 0..300), |bytes| {
            now.set(now.get() + Duration::from_millis(7));
            let b = &mut *b.borrow_mut();
            b.handle(now.get(), peer(), &bytes);
            check_sane(b, now.get())
        })
        .unwrap();
}

/// One step of the random exchange.
#[derive(Debug, Clone)]
enum Op {
    /// A CM message of attribute `attr` with a random data area, to side
    /// `to`, with its IDs (and service ID, QPN) replaced by real ones as
    /// `patch` says.
    Msg {
        to: bool,
        attr: u16,
        data: Vec<u8>,
        patch: u8,
        pick: (u8, u8),
    },
    /// Time passes.
    Wait(u32),
    /// A verb on a known connection.
    Verb { on_a: bool, which: u8, verb: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            any::<bool>(),
            0x10u16..=0x18,
            prop::collection::vec(any::<u8>(), 232),
            any::<u8>(),
            (any::<u8>(), any::<u8>()),
        )
            .prop_map(|(to, attr, data, patch, pick)| Op::Msg { to, attr, data, patch, pick }),
        1 => (0u32..20_000).prop_map(Op::Wait),
        2 => (any::<bool>(), any::<u8>(), 0u8..8).prop_map(|(on_a, which, verb)| Op::Verb { on_a, which, verb }),
    ]
}

/// Random CM messages, mostly carrying the IDs, service ID and QPNs of
/// real connections so that they reach real state, interleaved with time
/// and verbs, into two agents mid-handshake: nothing panics, and both
/// stay sane.
#[test]
fn random_cm_messages_never_panic_the_agents() {
    runner(400)
        .run(&prop::collection::vec(op(), 1..40), |ops| {
            let mut p = Pair::new();
            let (a1, b1) = p.handshake();
            // A second connection, from another QP (the same one would be
            // refused as stale), left in REQ Rcvd.
            let mut cp = params();
            cp.qpn = 0x12;
            let a2 = p.a.connect(p.now, cp).unwrap();
            let (b2, _) = p.request();
            let mut ids: Vec<u32> = [a1, b1, a2, b2].iter().map(|i| i.comm_id()).collect();
            ids.push(0);
            let qpns = [0x11u32, 0x12, 0x22];
            for op in ops {
                match op {
                    Op::Msg {
                        to,
                        attr,
                        mut data,
                        patch,
                        pick,
                    } => {
                        let id = |k: u8| ids[k as usize % ids.len()].to_be_bytes();
                        if patch & 1 != 0 {
                            data[0..4].copy_from_slice(&id(pick.0));
                        }
                        if patch & 2 != 0 {
                            data[4..8].copy_from_slice(&id(pick.1));
                        }
                        if patch & 4 != 0 && attr == attr::REQ {
                            data[8..16].copy_from_slice(&SID.to_be_bytes());
                        }
                        if patch & 8 != 0 && attr == attr::DREQ {
                            data[8..11]
                                .copy_from_slice(&qpns[pick.0 as usize % 3].to_be_bytes()[1..]);
                        }
                        if patch & 16 != 0 && attr == attr::REJ {
                            data[8] &= 0x3F; // a REJ of the REQ
                        }
                        let msg = CmMessage::parse(attr, &data).unwrap();
                        let mut bytes = [0u8; MAD_LEN];
                        let tid = u64::from(pick.0) << 32 | u64::from(pick.1);
                        if CmMad::new(tid, msg).emit(&mut bytes).is_err() {
                            continue;
                        }
                        let s = if to { A } else { B };
                        let from = MadPeer {
                            gid: if to { GB } else { GA },
                            local_gid: if to { GA } else { GB },
                            qpn: 1,
                            pkey: 0xFFFF,
                        };
                        let now = p.now;
                        p.agent(s).handle(now, from, &bytes);
                        p.pump();
                    }
                    Op::Wait(ms) => p.run_for(Duration::from_millis(ms as u64)),
                    Op::Verb { on_a, which, verb } => {
                        let s = if on_a { A } else { B };
                        let id = ConnId::from_comm_id(ids[which as usize % ids.len()]);
                        let now = p.now;
                        let ag = p.agent(s);
                        let _ = match verb {
                            0 => ag.accept(now, id, accept_params()),
                            1 => ag.establish(id),
                            2 => ag.disconnect(now, id),
                            3 => ag.reject(now, id, 28, b"x"),
                            4 => ag.notify_comm_est(id),
                            _ => ag.connect(now, params()).map(|_| ()),
                        };
                        p.pump();
                    }
                }
            }
            let now = p.now;
            for s in [A, B] {
                check_sane(p.agent(s), now)?;
            }
            // Left alone, every connection ends: resends run out, TimeWait
            // ends, only connections waiting on the application remain.
            p.run_for(Duration::from_secs(1_000_000));
            for s in [A, B] {
                prop_assert_eq!(p.agent(s).poll_timeout(), None);
            }
            Ok(())
        })
        .unwrap();
}
