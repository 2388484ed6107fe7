//! Behaviour tests of the RC transport: two endpoints driven in virtual
//! time, asserting on completions, data, frames on the wire and counters
//! (the quinn-proto way).
//!
//! Most tests use [`Pair`], two [`Device`]s wired back to back with no
//! fabric in between: every frame one side writes goes through a filter
//! closure that can pass, drop, duplicate, delay or replace it, and is
//! logged ([`Seen`]) so a test can assert on opcodes, PSNs, AckReq bits and
//! NAK codes. That gives exact control over which packet is lost. The fault
//! soak at the end runs on the simulated fabric ([`SimNet`]) instead.
//!
//! Coverage, by the acceptance of the transport issue: every opcode path,
//! every path MTU around multiples of the MTU, PSN wrap-around, each NAK
//! code, RNR, retry exhaustion, flush, the QP state machine, duplicates,
//! bad input, and a fault soak.

use core::net::IpAddr;
use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;

use ferroce::backend::fabric::LinkConfig;
use ferroce::sim::net::SimNet;
use ferroce::time::{Duration, Instant};
use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::ext::rnr_timer_ns;
use ferroce::wire::frame::seal;
use ferroce::wire::opcode::Op;
use ferroce::wire::{
    AckSyndrome, AethRepr, Ecn, Frame, FrameRepr, IpRepr, MacAddr, NakCode, Opcode,
};
use ferroce::wire::{AtomicEthRepr, RethRepr};

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const PSN_MOD: u32 = 1 << 24;

fn ip_a() -> IpAddr {
    "198.18.0.1".parse().unwrap()
}
fn ip_b() -> IpAddr {
    "198.18.0.2".parse().unwrap()
}
fn rc(op: Op) -> Opcode {
    Opcode::rc(op)
}

// ---------------------------------------------------------------------------
// A small deterministic generator (xorshift64*), for data and fault choices.

#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    Rng::new(seed).bytes(n)
}

// ---------------------------------------------------------------------------
// The two-device harness.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// A frame as one side wrote it (before the filter decided its fate).
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    from: Side,
    op: Opcode,
    psn: u32,
    ack_req: bool,
    aeth: Option<AethRepr>,
    reth: Option<RethRepr>,
    atomic: Option<AtomicEthRepr>,
    len: usize,
    bytes: Vec<u8>,
}

impl Seen {
    fn is(&self, op: Op) -> bool {
        self.op == rc(op)
    }
    fn is_request(&self) -> bool {
        self.op.info().is_some_and(|i| i.is_request())
    }
    fn is_read_resp(&self) -> bool {
        self.is(Op::RdmaReadResponseFirst)
            || self.is(Op::RdmaReadResponseMiddle)
            || self.is(Op::RdmaReadResponseLast)
            || self.is(Op::RdmaReadResponseOnly)
    }
    fn is_ack(&self) -> bool {
        self.is(Op::Acknowledge)
            && matches!(self.aeth.map(|a| a.syndrome), Some(AckSyndrome::Ack { .. }))
    }
    fn nak(&self) -> Option<NakCode> {
        match self.aeth.map(|a| a.syndrome) {
            Some(AckSyndrome::Nak(c)) if self.is(Op::Acknowledge) => Some(c),
            _ => None,
        }
    }
    fn rnr(&self) -> Option<u8> {
        match self.aeth.map(|a| a.syndrome) {
            Some(AckSyndrome::RnrNak { timer }) if self.is(Op::Acknowledge) => Some(timer),
            _ => None,
        }
    }
}

/// What happens to a frame on its way.
#[allow(dead_code)]
enum Fate {
    Pass,
    Drop,
    /// Arrives twice, back to back.
    Dup,
    /// Arrives this much later than it would have.
    Delay(Duration),
    /// These bytes arrive instead.
    Replace(Vec<u8>),
}

type Filter = Box<dyn FnMut(&Seen) -> Fate>;

/// How a [`Pair`] is built and connected.
#[derive(Clone)]
struct Opts {
    mtu_a: Mtu,
    mtu_b: Mtu,
    /// First PSN A sends (B's RQ PSN), and B's.
    psn_a: u32,
    psn_b: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    access_a: Access,
    access_b: Access,
    caps_a: QpCaps,
    caps_b: QpCaps,
    scq_cap: usize,
    rcq_cap_a: usize,
    rcq_cap_b: usize,
    mr_len: usize,
    /// One-way latency of the wire.
    delay: Duration,
    /// RoCE v2 over IPv6 instead of IPv4.
    ipv6: bool,
    /// ECN, notification and reaction point of both devices.
    congestion: CongestionConfig,
    /// Loss recovery of both QPs.
    recovery: Recovery,
}

const REMOTE_ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            mtu_a: Mtu::Mtu1024,
            mtu_b: Mtu::Mtu1024,
            psn_a: 0x100,
            psn_b: 0x8_0000,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            access_a: REMOTE_ALL,
            access_b: REMOTE_ALL,
            caps_a: QpCaps::default(),
            caps_b: QpCaps::default(),
            scq_cap: 4096,
            rcq_cap_a: 4096,
            rcq_cap_b: 4096,
            mr_len: 1 << 18,
            delay: Duration::from_micros(1),
            ipv6: false,
            congestion: CongestionConfig::default(),
            recovery: Recovery::GoBackN,
        }
    }
}

impl Opts {
    fn mtu(self, m: Mtu) -> Opts {
        Opts {
            mtu_a: m,
            mtu_b: m,
            ..self
        }
    }
}

/// One endpoint: a device with one PD, a send and a receive CQ, one
/// memory region with every right, and one QP.
struct End {
    dev: Device,
    pd: PdId,
    scq: CqId,
    rcq: CqId,
    mr: MrKeys,
    qp: u32,
    /// Completions polled so far.
    sent: Vec<Wc>,
    recvd: Vec<Wc>,
}

impl End {
    fn new(mac: MacAddr, ip: IpAddr, o: &Opts, caps: QpCaps, rcq_cap: usize) -> End {
        let mut cfg = DeviceConfig::new(mac, ip);
        cfg.congestion = o.congestion.clone();
        let mut dev = Device::new(cfg).unwrap();
        let pd = dev.alloc_pd();
        let scq = dev.create_cq(o.scq_cap).unwrap();
        let rcq = dev.create_cq(rcq_cap).unwrap();
        let mr = dev.reg_mr(MrSpec::new(pd, o.mr_len, Access::ALL)).unwrap();
        let qp = dev.create_qp(pd, scq, rcq, caps).unwrap();
        End {
            dev,
            pd,
            scq,
            rcq,
            mr,
            qp,
            sent: Vec::new(),
            recvd: Vec::new(),
        }
    }

    fn addr(&self, off: u64) -> u64 {
        self.mr.addr + off
    }
    fn rkey(&self) -> Rkey {
        self.mr.rkey
    }
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }
    fn fill(&mut self, off: usize, data: &[u8]) {
        self.dev.mr_mut(self.mr.lkey).unwrap()[off..off + data.len()].copy_from_slice(data);
    }
    fn mem(&self, off: usize, len: usize) -> Vec<u8> {
        self.dev.mr(self.mr.lkey).unwrap()[off..off + len].to_vec()
    }
    fn word(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.mem(off, 8).try_into().unwrap())
    }
    fn post(&mut self, wr: SendWr) {
        self.dev.post_send(self.qp, wr).unwrap()
    }
    fn recv(&mut self, wr_id: u64, sges: Vec<Sge>) {
        self.dev
            .post_recv(
                self.qp,
                RecvWr {
                    wr_id,
                    sges: sges.into(),
                },
            )
            .unwrap()
    }
    fn poll(&mut self) {
        let mut v = Vec::new();
        while self.dev.poll_cq(self.scq, 64, &mut v) > 0 {}
        self.sent.append(&mut v);
        while self.dev.poll_cq(self.rcq, 64, &mut v) > 0 {}
        self.recvd.append(&mut v);
    }
    fn c(&self) -> QpCounters {
        *self.dev.qp_counters(self.qp).unwrap()
    }
    fn state(&self) -> QpState {
        self.dev.query_qp(self.qp).unwrap().0
    }
    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.dev.poll_event()).collect()
    }
    fn sent_ids(&self) -> Vec<u64> {
        self.sent.iter().map(|w| w.wr_id).collect()
    }
    fn sent_status(&self) -> Vec<(u64, WcStatus)> {
        self.sent.iter().map(|w| (w.wr_id, w.status)).collect()
    }
}

fn wr(id: u64, op: SendOp, sges: Vec<Sge>) -> SendWr {
    SendWr::new(id, op, Payload::Sges(sges.into()))
}

/// RESET -> INIT -> RTR -> RTS, as `ibv_modify_qp` three times.
#[allow(clippy::too_many_arguments)]
fn connect(
    dev: &mut Device,
    qpn: u32,
    remote_qpn: u32,
    remote_mac: MacAddr,
    remote_ip: IpAddr,
    o: &Opts,
    access: Access,
    mtu: Mtu,
    sq_psn: u32,
    rq_psn: u32,
) -> Result<(), Error> {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    dev.modify_qp(qpn, &a, INIT_MASK)?;
    a.qp_state = QpState::Rtr;
    a.ah_attr = Some(AddressVector {
        recovery: o.recovery,
        ..av(remote_ip, remote_mac)
    });
    a.path_mtu = mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = o.max_dest_rd_atomic;
    a.min_rnr_timer = o.min_rnr_timer;
    dev.modify_qp(qpn, &a, RTR_MASK)?;
    a.qp_state = QpState::Rts;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = o.max_rd_atomic;
    dev.modify_qp(qpn, &a, RTS_MASK)
}

fn av(dgid: IpAddr, dmac: MacAddr) -> AddressVector {
    AddressVector {
        dgid,
        dmac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        src_port: None,
        int_telemetry: false,
        recovery: ferroce::transport::Recovery::GoBackN,
    }
}

const INIT_MASK: AttrMask = AttrMask::STATE
    .union(AttrMask::PKEY_INDEX)
    .union(AttrMask::PORT)
    .union(AttrMask::ACCESS_FLAGS);
const RTR_MASK: AttrMask = AttrMask::STATE
    .union(AttrMask::AV)
    .union(AttrMask::PATH_MTU)
    .union(AttrMask::DEST_QPN)
    .union(AttrMask::RQ_PSN)
    .union(AttrMask::MAX_DEST_RD_ATOMIC)
    .union(AttrMask::MIN_RNR_TIMER);
const RTS_MASK: AttrMask = AttrMask::STATE
    .union(AttrMask::TIMEOUT)
    .union(AttrMask::RETRY_CNT)
    .union(AttrMask::RNR_RETRY)
    .union(AttrMask::SQ_PSN)
    .union(AttrMask::MAX_QP_RD_ATOMIC);

fn to_state(s: QpState) -> QpAttr {
    QpAttr {
        qp_state: s,
        ..QpAttr::default()
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Cond,
    Idle,
    Limit,
}

/// Two devices wired back to back through a filter, in virtual time.
struct Pair {
    a: End,
    b: End,
    now: Instant,
    delay: Duration,
    /// Deliver every frame due before either side transmits again (lets
    /// the responder coalesce its ACKs); otherwise one frame at a time.
    batch: bool,
    /// Frames in flight: arrival time, sequence number, destination.
    wire: Vec<(Instant, u64, Side, Vec<u8>)>,
    seq: u64,
    seen: Vec<Seen>,
    filter: Filter,
}

impl Pair {
    fn new(o: Opts) -> Pair {
        let (ia, ib) = if o.ipv6 {
            (
                "2001:db8::1".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
            )
        } else {
            (ip_a(), ip_b())
        };
        let mut a = End::new(MAC_A, ia, &o, o.caps_a, o.rcq_cap_a);
        let mut b = End::new(MAC_B, ib, &o, o.caps_b, o.rcq_cap_b);
        let (qa, qb) = (a.qp, b.qp);
        connect(
            &mut a.dev, qa, qb, MAC_B, ib, &o, o.access_a, o.mtu_a, o.psn_a, o.psn_b,
        )
        .unwrap();
        connect(
            &mut b.dev, qb, qa, MAC_A, ia, &o, o.access_b, o.mtu_b, o.psn_b, o.psn_a,
        )
        .unwrap();
        Pair {
            a,
            b,
            now: Instant::ZERO,
            delay: o.delay,
            batch: false,
            wire: Vec::new(),
            seq: 0,
            seen: Vec::new(),
            filter: Box::new(|_| Fate::Pass),
        }
    }

    fn end_mut(&mut self, s: Side) -> &mut End {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn set_filter(&mut self, f: impl FnMut(&Seen) -> Fate + 'static) {
        self.filter = Box::new(f);
    }

    fn put(&mut self, at: Instant, to: Side, bytes: Vec<u8>) {
        self.seq += 1;
        self.wire.push((at, self.seq, to, bytes));
    }

    fn transmit(&mut self, from: Side, bytes: Vec<u8>) {
        let f = Frame::parse(&bytes).expect("the transport wrote a frame it cannot parse");
        assert!(f.icrc_ok(), "the transport wrote a bad ICRC");
        let ext = f.ext();
        let s = Seen {
            at: self.now,
            from,
            op: f.opcode(),
            psn: f.psn().value(),
            ack_req: f.ack_req(),
            aeth: ext.aeth,
            reth: ext.reth,
            atomic: ext.atomic,
            len: f.payload.len(),
            bytes: bytes.clone(),
        };
        let fate = (self.filter)(&s);
        self.seen.push(s);
        let to = from.other();
        let at = self.now + self.delay;
        match fate {
            Fate::Pass => self.put(at, to, bytes),
            Fate::Drop => {}
            Fate::Dup => {
                self.put(at, to, bytes.clone());
                self.put(at, to, bytes);
            }
            Fate::Delay(d) => self.put(at + d, to, bytes),
            Fate::Replace(b) => self.put(at, to, b),
        }
    }

    fn due(&self) -> Option<usize> {
        self.wire
            .iter()
            .enumerate()
            .filter(|(_, w)| w.0 <= self.now)
            .min_by_key(|(_, w)| (w.0, w.1))
            .map(|(i, _)| i)
    }

    /// Runs until `cond` holds (asked whenever nothing more can happen at
    /// the current instant), nothing is left to happen, or `limit` of
    /// virtual time has passed.
    fn run_until(&mut self, limit: Duration, mut cond: impl FnMut(&mut Pair) -> bool) -> Stop {
        let end = self.now + limit;
        let mut buf = vec![0u8; 9216];
        let mut spins = 0u64;
        let mut asked = false;
        loop {
            spins += 1;
            assert!(spins < 20_000_000, "no progress at {:?}", self.now);
            let mut busy = false;
            for side in [Side::A, Side::B] {
                let now = self.now;
                while let Some(n) = self.end_mut(side).dev.poll_transmit(now, &mut buf) {
                    self.transmit(side, buf[..n].to_vec());
                    busy = true;
                }
            }
            while let Some(i) = self.due() {
                let (_, _, to, bytes) = self.wire.remove(i);
                let now = self.now;
                self.end_mut(to).dev.handle(now, &bytes);
                busy = true;
                if !self.batch {
                    break;
                }
            }
            for side in [Side::A, Side::B] {
                let now = self.now;
                let d = &mut self.end_mut(side).dev;
                if d.poll_timeout().is_some_and(|t| t <= now) {
                    d.handle_timeout(now);
                    busy = true;
                }
            }
            if busy {
                asked = false;
                continue;
            }
            if !asked {
                // Once per quiet instant; then one more round at the same
                // instant for whatever `cond` posted.
                asked = true;
                if cond(self) {
                    return Stop::Cond;
                }
                continue;
            }
            asked = false;
            let next = [
                self.wire.iter().map(|w| w.0).min(),
                self.a.dev.poll_timeout(),
                self.b.dev.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next else {
                return Stop::Idle;
            };
            if t > end {
                return Stop::Limit;
            }
            self.now = t.max(self.now);
        }
    }

    fn run(&mut self, limit: Duration) -> Stop {
        self.run_until(limit, |_| false)
    }

    /// Runs until nothing is left to happen (at most a minute of virtual
    /// time), then polls every CQ.
    fn settle(&mut self) {
        assert_eq!(self.run(Duration::from_secs(60)), Stop::Idle);
        self.poll();
    }

    /// Runs until `cond` holds, polling CQs before each check.
    fn wait(&mut self, limit: Duration, mut cond: impl FnMut(&Pair) -> bool) -> bool {
        self.run_until(limit, |p| {
            p.poll();
            cond(p)
        }) == Stop::Cond
    }

    fn poll(&mut self) {
        self.a.poll();
        self.b.poll();
    }

    fn from(&self, s: Side) -> impl Iterator<Item = &Seen> {
        self.seen.iter().filter(move |f| f.from == s)
    }

    fn ops(&self, s: Side) -> Vec<Opcode> {
        self.from(s).map(|f| f.op).collect()
    }

    fn naks(&self, s: Side) -> Vec<(u32, NakCode)> {
        self.from(s)
            .filter_map(|f| Some((f.psn, f.nak()?)))
            .collect()
    }

    /// The accounting identity of both devices (every frame handled lands
    /// in exactly one counter).
    fn check_accounting(&self) {
        accounting(&self.a.dev);
        accounting(&self.b.dev);
    }
}

fn accounting(d: &Device) {
    let r = d.rx_counters();
    let c = d.counters();
    assert_eq!(
        r.frames,
        r.not_roce
            + r.malformed
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

/// Resets both QPs of `p` and connects them again (A sends from PSN
/// `psn_a`, B from `psn_b`).
fn reconnect(p: &mut Pair, psn_a: u32, psn_b: u32) {
    let (qa, qb) = (p.a.qp, p.b.qp);
    for (d, q) in [(&mut p.a.dev, qa), (&mut p.b.dev, qb)] {
        d.modify_qp(q, &to_state(QpState::Reset), AttrMask::STATE)
            .unwrap();
    }
    let o = Opts::default();
    connect(
        &mut p.a.dev,
        qa,
        qb,
        MAC_B,
        ip_b(),
        &o,
        REMOTE_ALL,
        Mtu::Mtu1024,
        psn_a,
        psn_b,
    )
    .unwrap();
    connect(
        &mut p.b.dev,
        qb,
        qa,
        MAC_A,
        ip_a(),
        &o,
        REMOTE_ALL,
        Mtu::Mtu1024,
        psn_b,
        psn_a,
    )
    .unwrap();
}

/// The opcodes of one message of `n` packets.
fn msg(n: usize, only: Op, first: Op, middle: Op, last: Op) -> Vec<Opcode> {
    if n == 1 {
        return vec![rc(only)];
    }
    let mut v = vec![rc(first)];
    v.extend(std::iter::repeat(rc(middle)).take(n - 2));
    v.push(rc(last));
    v
}

fn send_ops(n: usize) -> Vec<Opcode> {
    msg(n, Op::SendOnly, Op::SendFirst, Op::SendMiddle, Op::SendLast)
}
fn write_ops(n: usize) -> Vec<Opcode> {
    msg(
        n,
        Op::RdmaWriteOnly,
        Op::RdmaWriteFirst,
        Op::RdmaWriteMiddle,
        Op::RdmaWriteLast,
    )
}
fn read_resp_ops(n: usize) -> Vec<Opcode> {
    msg(
        n,
        Op::RdmaReadResponseOnly,
        Op::RdmaReadResponseFirst,
        Op::RdmaReadResponseMiddle,
        Op::RdmaReadResponseLast,
    )
}

fn npkts(len: usize, mtu: Mtu) -> usize {
    len.div_ceil(mtu.bytes() as usize).max(1)
}

/// Every send completion succeeded and none is missing.
fn all_ok(wcs: &[Wc], n: usize) {
    assert_eq!(wcs.len(), n, "{wcs:?}");
    for w in wcs {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
    }
}

/// Drops the first transmission of each frame `pick` selects.
fn drop_first(mut pick: impl FnMut(&Seen) -> bool) -> impl FnMut(&Seen) -> Fate {
    let mut done: Vec<(Side, u32, Opcode)> = Vec::new();
    move |s| {
        if pick(s) && !done.contains(&(s.from, s.psn, s.op)) {
            done.push((s.from, s.psn, s.op));
            Fate::Drop
        } else {
            Fate::Pass
        }
    }
}

// ===========================================================================
// Opcode paths.

#[test]
fn send_only_and_multi_packet() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(1, 8192);
    p.a.fill(0, &data);
    for (i, off) in [0u64, 10_000, 20_000].into_iter().enumerate() {
        let sge = p.b.sge(off, 8192);
        p.b.recv(100 + i as u64, vec![sge]);
    }
    for (id, len) in [(1u64, 100u32), (2, 1024), (3, 5000)] {
        let sge = p.a.sge(0, len);
        p.a.post(wr(id, SendOp::Send, vec![sge]));
    }
    p.settle();
    all_ok(&p.a.sent, 3);
    assert_eq!(p.a.sent_ids(), [1, 2, 3]);
    for (w, len) in p.a.sent.iter().zip([100, 1024, 5000]) {
        assert_eq!(
            (w.opcode, w.byte_len, w.qp_num),
            (WcOpcode::Send, len, p.a.qp)
        );
    }
    assert_eq!(p.b.recvd.len(), 3);
    for ((w, len), off) in
        p.b.recvd
            .iter()
            .zip([100usize, 1024, 5000])
            .zip([0, 10_000, 20_000])
    {
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(w.opcode, WcOpcode::Recv);
        assert_eq!(w.byte_len as usize, len);
        assert_eq!((w.imm_data, w.invalidated_rkey), (None, None));
        assert_eq!(w.qp_num, p.b.qp);
        assert_eq!(p.b.mem(off, len), data[..len]);
        // Nothing beyond the message was written.
        assert_eq!(p.b.mem(off + len, 16), [0; 16]);
    }
    assert_eq!(
        p.b.recvd.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [100, 101, 102]
    );
    let mut want = send_ops(1);
    want.extend(send_ops(1));
    want.extend(send_ops(5));
    assert_eq!(p.ops(Side::A), want);
    // AckReq on the last packet of each message only; PSNs consecutive.
    let reqs: Vec<&Seen> = p.from(Side::A).collect();
    let ack_req: Vec<bool> = reqs.iter().map(|s| s.ack_req).collect();
    assert_eq!(ack_req, [true, true, false, false, false, false, true]);
    for (i, s) in reqs.iter().enumerate() {
        assert_eq!(s.psn, 0x100 + i as u32);
    }
    assert!(p.from(Side::B).all(|s| s.is_ack()));
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!(
        (ca.rdma_sends, ca.sent_pkts, ca.retransmitted_pkts),
        (3, 7, 0)
    );
    assert_eq!((cb.rdma_recvs, cb.acks_sent), (3, 3));
    assert_eq!(cb.rcvd_pkts, 7);
    assert_eq!(ca.req_cqe_error + cb.resp_cqe_error, 0);
    p.check_accounting();
}

#[test]
fn send_with_immediate() {
    let mut p = Pair::new(Opts::default());
    p.a.fill(0, &pattern(2, 3000));
    for i in 0..2 {
        let sge = p.b.sge(i * 4096, 4096);
        p.b.recv(10 + i, vec![sge]);
    }
    let s10 = p.a.sge(0, 10);
    let s3000 = p.a.sge(0, 3000);
    p.a.post(wr(1, SendOp::SendWithImm(0xDEAD_BEEF), vec![s10]));
    p.a.post(wr(2, SendOp::SendWithImm(0x0102_0304), vec![s3000]));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert!(p
        .a
        .sent
        .iter()
        .all(|w| w.opcode == WcOpcode::Send && w.imm_data.is_none()));
    let r = &p.b.recvd;
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].imm_data, r[0].byte_len), (Some(0xDEAD_BEEF), 10));
    assert_eq!((r[1].imm_data, r[1].byte_len), (Some(0x0102_0304), 3000));
    assert!(r
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Recv));
    assert_eq!(p.b.mem(4096, 3000), p.a.mem(0, 3000));
    assert_eq!(
        p.ops(Side::A),
        [
            rc(Op::SendOnlyWithImmediate),
            rc(Op::SendFirst),
            rc(Op::SendMiddle),
            rc(Op::SendLastWithImmediate)
        ]
    );
}

#[test]
fn send_with_invalidate() {
    let mut p = Pair::new(Opts::default());
    let inv = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_INVALIDATE;
    let pd = p.b.pd;
    let m2 = p.b.dev.reg_mr(MrSpec::new(pd, 4096, inv)).unwrap();
    let m3 = p.b.dev.reg_mr(MrSpec::new(pd, 4096, inv)).unwrap();
    p.a.fill(0, &pattern(3, 4096));
    for i in 0..2 {
        let sge = p.b.sge(i * 4096, 4096);
        p.b.recv(10 + i, vec![sge]);
    }
    // The region works before it is invalidated.
    let s = p.a.sge(0, 100);
    p.a.post(wr(
        1,
        SendOp::Write {
            remote_addr: m2.addr,
            rkey: m2.rkey,
        },
        vec![s],
    ));
    let s = p.a.sge(0, 3000);
    p.a.post(wr(2, SendOp::SendWithInv(m2.rkey), vec![s]));
    let s = p.a.sge(0, 10);
    p.a.post(wr(3, SendOp::SendWithInv(m3.rkey), vec![s]));
    p.settle();
    all_ok(&p.a.sent, 3);
    assert_eq!(p.b.dev.mr(m2.lkey).unwrap()[..100], p.a.mem(0, 100)[..]);
    let r = &p.b.recvd;
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].invalidated_rkey, r[0].byte_len),
        (Some(m2.rkey), 3000)
    );
    assert_eq!((r[1].invalidated_rkey, r[1].byte_len), (Some(m3.rkey), 10));
    assert!(r
        .iter()
        .all(|w| w.status == WcStatus::Success && w.imm_data.is_none()));
    assert!(p.ops(Side::A).ends_with(&[
        rc(Op::SendFirst),
        rc(Op::SendMiddle),
        rc(Op::SendLastWithInvalidate),
        rc(Op::SendOnlyWithInvalidate)
    ]));
    // The invalidated region now refuses remote access.
    let s = p.a.sge(0, 8);
    p.a.post(wr(
        4,
        SendOp::Write {
            remote_addr: m2.addr,
            rkey: m2.rkey,
        },
        vec![s],
    ));
    p.settle();
    assert_eq!(p.a.sent[3].status, WcStatus::RemAccessErr);
    assert_eq!(
        p.naks(Side::B),
        [(
            p.from(Side::A).last().unwrap().psn,
            NakCode::RemoteAccessError
        )]
    );
    // Made valid again by its owner, it takes remote access again.
    assert!(p.b.dev.revalidate_mr(m2.lkey));
    reconnect(&mut p, 10, 20);
    let s = p.a.sge(0, 8);
    p.a.post(wr(
        5,
        SendOp::Write {
            remote_addr: m2.addr,
            rkey: m2.rkey,
        },
        vec![s],
    ));
    p.settle();
    assert_eq!(
        p.a.sent.last().map(|w| (w.wr_id, w.status)),
        Some((5, WcStatus::Success))
    );
}

#[test]
fn send_with_invalidate_of_a_region_that_does_not_allow_it() {
    let mut p = Pair::new(Opts::default());
    let pd = p.b.pd;
    let m2 =
        p.b.dev
            .reg_mr(MrSpec::new(
                pd,
                4096,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            ))
            .unwrap();
    let sge = p.b.sge(0, 4096);
    p.b.recv(10, vec![sge]);
    let s = p.a.sge(0, 10);
    p.a.post(wr(1, SendOp::SendWithInv(m2.rkey), vec![s]));
    p.settle();
    assert_eq!(p.a.sent_status(), [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.b.recvd.len(), 1);
    assert_ne!(p.b.recvd[0].status, WcStatus::Success);
    assert_eq!(p.naks(Side::B).len(), 1);
    assert_eq!(p.naks(Side::B)[0].1, NakCode::InvalidRequest);
    // The region was not invalidated: on a new connection it still takes
    // a WRITE.
    reconnect(&mut p, 10, 20);
    p.a.fill(0, b"valid");
    let s = p.a.sge(0, 5);
    p.a.post(wr(
        2,
        SendOp::Write {
            remote_addr: m2.addr,
            rkey: m2.rkey,
        },
        vec![s],
    ));
    p.settle();
    assert_eq!(p.a.sent_status()[1..], [(2, WcStatus::Success)]);
    assert_eq!(&p.b.dev.mr(m2.lkey).unwrap()[..5], b"valid");
}

#[test]
fn rdma_write_only_and_multi_packet() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(4, 4096);
    p.a.fill(0, &data);
    let sge = p.b.sge(0, 64);
    p.b.recv(99, vec![sge]);
    let mut off = 1000u64;
    let mut want_ops = Vec::new();
    for (id, len) in [(1u64, 10u32), (2, 1024), (3, 3000)] {
        let s = p.a.sge(0, len);
        let op = SendOp::Write {
            remote_addr: p.b.addr(off),
            rkey: p.b.rkey(),
        };
        p.a.post(wr(id, op, vec![s]));
        want_ops.extend(write_ops(npkts(len as usize, Mtu::Mtu1024)));
        off += 4096;
    }
    p.settle();
    all_ok(&p.a.sent, 3);
    assert!(p.a.sent.iter().all(|w| w.opcode == WcOpcode::RdmaWrite));
    assert_eq!(p.b.mem(1000, 10), data[..10]);
    assert_eq!(p.b.mem(1000 + 4096, 1024), data[..1024]);
    assert_eq!(p.b.mem(1000 + 8192, 3000), data[..3000]);
    assert_eq!(p.b.mem(1000 + 8192 + 3000, 8), [0; 8]);
    assert_eq!(p.ops(Side::A), want_ops);
    // The RETH is on the first packet only and says the whole length.
    let reths: Vec<Option<u32>> = p.from(Side::A).map(|s| s.reth.map(|r| r.dma_len)).collect();
    assert_eq!(reths, [Some(10), Some(1024), Some(3000), None, None]);
    // A WRITE consumes no receive.
    assert!(p.b.recvd.is_empty());
    assert_eq!(p.b.dev.recv_queue_len(p.b.qp), 1);
    assert_eq!(p.b.c().rx_write_requests, 3);
}

#[test]
fn rdma_write_with_immediate_consumes_a_receive() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(5, 4096);
    p.a.fill(0, &data);
    for i in 0..3 {
        let sge = p.b.sge(100_000 + i * 64, 64);
        p.b.recv(10 + i, vec![sge]);
    }
    let s = p.a.sge(0, 3000);
    let op = SendOp::WriteWithImm {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
        imm: 7,
    };
    p.a.post(wr(1, op, vec![s]));
    // Zero bytes: the immediate alone.
    let op = SendOp::WriteWithImm {
        remote_addr: 0,
        rkey: 0,
        imm: 8,
    };
    p.a.post(wr(2, op, vec![]));
    let s = p.a.sge(0, 500);
    let op = SendOp::WriteWithImm {
        remote_addr: p.b.addr(8000),
        rkey: p.b.rkey(),
        imm: 9,
    };
    p.a.post(wr(3, op, vec![s]));
    p.settle();
    all_ok(&p.a.sent, 3);
    assert_eq!(p.b.mem(0, 3000), data[..3000]);
    assert_eq!(p.b.mem(8000, 500), data[..500]);
    let r: Vec<(u64, WcOpcode, u32, Option<u32>)> =
        p.b.recvd
            .iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len, w.imm_data))
            .collect();
    assert_eq!(
        r,
        [
            (10, WcOpcode::RecvRdmaWithImm, 3000, Some(7)),
            (11, WcOpcode::RecvRdmaWithImm, 0, Some(8)),
            (12, WcOpcode::RecvRdmaWithImm, 500, Some(9)),
        ]
    );
    // The receive buffers are untouched.
    assert_eq!(p.b.mem(100_000, 192), [0; 192]);
    assert_eq!(
        p.ops(Side::A),
        [
            rc(Op::RdmaWriteFirst),
            rc(Op::RdmaWriteMiddle),
            rc(Op::RdmaWriteLastWithImmediate),
            rc(Op::RdmaWriteOnlyWithImmediate),
            rc(Op::RdmaWriteOnlyWithImmediate),
        ]
    );
}

#[test]
fn rdma_read_multi_packet_into_a_scatter_list() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(6, 8000);
    p.b.fill(1000, &data);
    let sges = vec![
        p.a.sge(0, 1000),
        p.a.sge(10_000, 3000),
        p.a.sge(20_000, 1000),
    ];
    let op = SendOp::Read {
        remote_addr: p.b.addr(1000),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(1, op, sges));
    // The next request's PSN comes after the READ's response PSNs.
    let sge = p.b.sge(50_000, 64);
    p.b.recv(5, vec![sge]);
    let s = p.a.sge(30_000, 4);
    p.a.post(wr(2, SendOp::Send, vec![s]));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!(
        (p.a.sent[0].opcode, p.a.sent[0].byte_len),
        (WcOpcode::RdmaRead, 5000)
    );
    assert_eq!(p.a.mem(0, 1000), data[..1000]);
    assert_eq!(p.a.mem(10_000, 3000), data[1000..4000]);
    assert_eq!(p.a.mem(20_000, 1000), data[4000..5000]);
    assert_eq!(p.a.mem(21_000, 8), [0; 8]);
    assert_eq!(p.ops(Side::A), [rc(Op::RdmaReadRequest), rc(Op::SendOnly)]);
    let a: Vec<&Seen> = p.from(Side::A).collect();
    assert_eq!(a[0].reth.unwrap().dma_len, 5000);
    assert_eq!(a[1].psn, a[0].psn + 5);
    let mut want = read_resp_ops(5);
    want.push(rc(Op::Acknowledge));
    assert_eq!(p.ops(Side::B), want);
    let resp: Vec<u32> = p.from(Side::B).map(|s| s.psn).collect();
    assert_eq!(
        resp[..5],
        [
            a[0].psn,
            a[0].psn + 1,
            a[0].psn + 2,
            a[0].psn + 3,
            a[0].psn + 4
        ]
    );
    assert_eq!(p.b.c().rx_read_requests, 1);
}

#[test]
fn atomics_compare_and_swap_and_fetch_and_add() {
    let mut p = Pair::new(Opts::default());
    p.b.fill(64, &10u64.to_le_bytes());
    let ra = p.b.addr(64);
    let rk = p.b.rkey();
    let ops = [
        SendOp::CompareSwap {
            remote_addr: ra,
            rkey: rk,
            compare: 10,
            swap: 20,
        },
        SendOp::CompareSwap {
            remote_addr: ra,
            rkey: rk,
            compare: 10,
            swap: 30,
        },
        SendOp::FetchAdd {
            remote_addr: ra,
            rkey: rk,
            add: 5,
        },
        SendOp::FetchAdd {
            remote_addr: ra,
            rkey: rk,
            add: u64::MAX,
        },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let s = p.a.sge(i as u64 * 8, 8);
        p.a.post(wr(i as u64 + 1, op, vec![s]));
    }
    p.settle();
    all_ok(&p.a.sent, 4);
    let opc: Vec<WcOpcode> = p.a.sent.iter().map(|w| w.opcode).collect();
    assert_eq!(
        opc,
        [
            WcOpcode::CompSwap,
            WcOpcode::CompSwap,
            WcOpcode::FetchAdd,
            WcOpcode::FetchAdd
        ]
    );
    assert!(p.a.sent.iter().all(|w| w.byte_len == 8));
    // Old values: 10 (swapped to 20), 20 (no match: unchanged), 20 (+5),
    // 25 (-1).
    let olds: Vec<u64> = (0..4).map(|i| p.a.word(i * 8)).collect();
    assert_eq!(olds, [10, 20, 20, 25]);
    assert_eq!(p.b.word(64), 24);
    assert_eq!(p.b.c().rx_atomic_requests, 4);
    assert_eq!(
        p.ops(Side::A),
        [
            rc(Op::CompareSwap),
            rc(Op::CompareSwap),
            rc(Op::FetchAdd),
            rc(Op::FetchAdd)
        ]
    );
    assert!(p.from(Side::B).all(|s| s.is(Op::AtomicAcknowledge)));
    let a = p.from(Side::A).next().unwrap().atomic.unwrap();
    assert_eq!((a.compare, a.swap_add, a.rkey), (10, 20, rk));
}

#[test]
fn scatter_gather_lists_on_both_sides() {
    let mut p = Pair::new(Opts::default());
    let pd = p.a.pd;
    let m2 =
        p.a.dev
            .reg_mr(MrSpec::new(pd, 8192, Access::LOCAL_WRITE))
            .unwrap();
    let d1 = pattern(7, 4096);
    let d2 = pattern(8, 8192);
    p.a.fill(0, &d1);
    p.a.dev.mr_mut(m2.lkey).unwrap().copy_from_slice(&d2);
    let sg2 = |off: u64, len: u32| Sge {
        addr: m2.addr + off,
        length: len,
        lkey: m2.lkey,
    };
    let gather = vec![p.a.sge(3, 700), sg2(5, 1), p.a.sge(2000, 1500)];
    let mut want = d1[3..703].to_vec();
    want.extend_from_slice(&d2[5..6]);
    want.extend_from_slice(&d1[2000..3500]);
    assert_eq!(want.len(), 2201);
    let scatter = vec![p.b.sge(0, 100), p.b.sge(5000, 1000), p.b.sge(9000, 2000)];
    p.b.recv(1, scatter);
    p.a.post(wr(1, SendOp::Send, gather.clone()));
    let op = SendOp::Write {
        remote_addr: p.b.addr(20_000),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(2, op, gather));
    let op = SendOp::Read {
        remote_addr: p.b.addr(20_000),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(
        3,
        op,
        vec![sg2(100, 1000), p.a.sge(30_000, 1200), sg2(7000, 1)],
    ));
    p.settle();
    all_ok(&p.a.sent, 3);
    assert_eq!(p.b.recvd[0].byte_len, 2201);
    let mut got = p.b.mem(0, 100);
    got.extend(p.b.mem(5000, 1000));
    got.extend(p.b.mem(9000, 1101));
    assert_eq!(got, want);
    assert_eq!(p.b.mem(9000 + 1101, 4), [0; 4]);
    assert_eq!(p.b.mem(20_000, 2201), want);
    let m = p.a.dev.mr(m2.lkey).unwrap();
    let mut got = m[100..1100].to_vec();
    got.extend(p.a.mem(30_000, 1200));
    got.push(m[7000]);
    assert_eq!(got, want);
    // Limits on the number of elements.
    let many: Vec<Sge> = (0..17).map(|i| p.a.sge(i, 1)).collect();
    assert_eq!(
        p.a.dev.post_send(p.a.qp, wr(9, SendOp::Send, many.clone())),
        Err(Error::TooManySge)
    );
    assert_eq!(
        p.a.dev.post_recv(
            p.a.qp,
            RecvWr {
                wr_id: 9,
                sges: many.into()
            }
        ),
        Err(Error::TooManySge)
    );
}

#[test]
fn inline_data() {
    let caps = QpCaps {
        max_inline_data: 4096,
        ..QpCaps::default()
    };
    let mut p = Pair::new(Opts {
        caps_a: caps,
        ..Opts::default()
    });
    let data = pattern(9, 3000);
    let sge = p.b.sge(0, 4096);
    p.b.recv(1, vec![sge]);
    p.a.post(SendWr::new(1, SendOp::Send, Payload::Inline(data.clone())));
    let op = SendOp::Write {
        remote_addr: p.b.addr(8192),
        rkey: p.b.rkey(),
    };
    p.a.post(SendWr::new(2, op, Payload::Inline(data[..50].to_vec())));
    // Too long, or on a READ / atomic: refused when posted.
    let long = Payload::Inline(vec![0; 4097]);
    assert_eq!(
        p.a.dev
            .post_send(p.a.qp, SendWr::new(3, SendOp::Send, long)),
        Err(Error::InlineTooLong)
    );
    let op = SendOp::Read {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    assert!(matches!(
        p.a.dev
            .post_send(p.a.qp, SendWr::new(4, op, Payload::Inline(vec![0; 8]))),
        Err(Error::InvalidArgument(_))
    ));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!(p.b.recvd[0].byte_len, 3000);
    assert_eq!(p.b.mem(0, 3000), data);
    assert_eq!(p.b.mem(8192, 50), data[..50]);
    assert_eq!(p.ops(Side::A)[..3], send_ops(3)[..]);
    // The default QP takes at most 256 inline bytes.
    let mut q = Pair::new(Opts::default());
    let long = Payload::Inline(vec![0; 257]);
    assert_eq!(
        q.a.dev
            .post_send(q.a.qp, SendWr::new(1, SendOp::Send, long)),
        Err(Error::InlineTooLong)
    );
    q.settle();
}

#[test]
fn zero_length_send_write_and_read() {
    let mut p = Pair::new(Opts::default());
    p.b.recv(1, vec![]);
    p.a.post(wr(1, SendOp::Send, vec![]));
    // A zero-length RDMA operation needs no valid R_Key (C9-88).
    p.a.post(wr(
        2,
        SendOp::Write {
            remote_addr: 0,
            rkey: 0xDEAD,
        },
        vec![],
    ));
    p.a.post(wr(
        3,
        SendOp::Read {
            remote_addr: 0,
            rkey: 0xDEAD,
        },
        vec![],
    ));
    p.a.post(wr(4, SendOp::Send, vec![p.a.sge(0, 0)]));
    let sge = p.b.sge(0, 16);
    p.b.recv(2, vec![sge]);
    p.settle();
    all_ok(&p.a.sent, 4);
    assert!(p.a.sent.iter().all(|w| w.byte_len == 0));
    assert_eq!(p.b.recvd.len(), 2);
    assert!(p
        .b
        .recvd
        .iter()
        .all(|w| w.status == WcStatus::Success && w.byte_len == 0));
    assert_eq!(
        p.ops(Side::A),
        [
            rc(Op::SendOnly),
            rc(Op::RdmaWriteOnly),
            rc(Op::RdmaReadRequest),
            rc(Op::SendOnly)
        ]
    );
    assert!(p.from(Side::A).all(|s| s.len == 0));
    let resp: Vec<&Seen> = p.from(Side::B).filter(|s| s.is_read_resp()).collect();
    assert_eq!(resp.len(), 1);
    assert!(resp[0].is(Op::RdmaReadResponseOnly) && resp[0].len == 0);
}

#[test]
fn unsignaled_work_requests_complete_silently() {
    let mut p = Pair::new(Opts::default());
    for i in 0..2 {
        let sge = p.b.sge(i * 64, 64);
        p.b.recv(i, vec![sge]);
    }
    let w = |p: &Pair| SendOp::Write {
        remote_addr: p.b.addr(4096),
        rkey: p.b.rkey(),
    };
    let ops = [
        (1, w(&p), false),
        (2, w(&p), false),
        (3, SendOp::Send, true),
        (4, SendOp::Send, false),
        (
            5,
            SendOp::Read {
                remote_addr: p.b.addr(4096),
                rkey: p.b.rkey(),
            },
            true,
        ),
        (
            6,
            SendOp::FetchAdd {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
                add: 1,
            },
            false,
        ),
    ];
    for (id, op, sig) in ops {
        let mut x = wr(id, op, vec![p.a.sge(id * 8, 8)]);
        x.signaled = sig;
        p.a.post(x);
    }
    p.settle();
    assert_eq!(
        p.a.sent_status(),
        [(3, WcStatus::Success), (5, WcStatus::Success)]
    );
    assert_eq!(p.a.dev.send_queue_len(p.a.qp), 0);
    assert_eq!(p.b.recvd.len(), 2);
    assert_eq!(p.b.word(0), 1);
    // An unsignaled request that fails still completes.
    let mut x = wr(
        7,
        SendOp::Write {
            remote_addr: 0,
            rkey: 0xBAD,
        },
        vec![p.a.sge(0, 8)],
    );
    x.signaled = false;
    p.a.post(x);
    p.settle();
    assert_eq!(p.a.sent_status()[2..], [(7, WcStatus::RemAccessErr)]);

    // sq_sig_all: every request completes.
    let caps = QpCaps {
        sq_sig_all: true,
        ..QpCaps::default()
    };
    let mut p = Pair::new(Opts {
        caps_a: caps,
        ..Opts::default()
    });
    for id in 0..3 {
        let mut x = wr(
            id,
            SendOp::Write {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
            },
            vec![p.a.sge(0, 8)],
        );
        x.signaled = false;
        p.a.post(x);
    }
    p.settle();
    all_ok(&p.a.sent, 3);
}

#[test]
fn fence_waits_for_earlier_reads_and_atomics() {
    for fence in [false, true] {
        for atomic in [false, true] {
            let mut p = Pair::new(Opts::default());
            let sge = p.b.sge(0, 64);
            p.b.recv(1, vec![sge]);
            let first = if atomic {
                wr(
                    1,
                    SendOp::FetchAdd {
                        remote_addr: p.b.addr(0),
                        rkey: p.b.rkey(),
                        add: 1,
                    },
                    vec![p.a.sge(0, 8)],
                )
            } else {
                wr(
                    1,
                    SendOp::Read {
                        remote_addr: p.b.addr(0),
                        rkey: p.b.rkey(),
                    },
                    vec![p.a.sge(0, 8000)],
                )
            };
            p.a.post(first);
            let mut x = wr(2, SendOp::Send, vec![p.a.sge(10_000, 10)]);
            x.fence = fence;
            p.a.post(x);
            p.settle();
            all_ok(&p.a.sent, 2);
            let send = p.seen.iter().position(|s| s.is(Op::SendOnly)).unwrap();
            let last = p
                .seen
                .iter()
                .rposition(|s| s.is(Op::RdmaReadResponseLast) || s.is(Op::AtomicAcknowledge))
                .unwrap();
            if fence {
                assert!(send > last, "fenced SEND left before the response");
                assert!(p.seen[send].at >= p.seen[last].at + p.delay);
            } else {
                assert_eq!(send, 1, "an unfenced SEND follows the request at once");
            }
        }
    }
}

#[test]
fn max_rd_atomic_bounds_reads_and_atomics_outstanding() {
    for limit in [1u8, 2, 4] {
        let o = Opts {
            max_rd_atomic: limit,
            max_dest_rd_atomic: limit,
            ..Opts::default()
        };
        let mut p = Pair::new(o);
        p.b.fill(0, &pattern(10, 65536));
        for i in 0..14u64 {
            let op = if i % 4 == 3 {
                SendOp::FetchAdd {
                    remote_addr: p.b.addr(100_000),
                    rkey: p.b.rkey(),
                    add: 1,
                }
            } else {
                SendOp::Read {
                    remote_addr: p.b.addr(i * 3000),
                    rkey: p.b.rkey(),
                }
            };
            let len = if op.is_atomic() { 8 } else { 3000 };
            p.a.post(wr(i, op, vec![p.a.sge(i * 4096, len)]));
        }
        p.settle();
        all_ok(&p.a.sent, 14);
        for i in 0..14u64 {
            if i % 4 != 3 {
                assert_eq!(
                    p.a.mem(i as usize * 4096, 3000),
                    p.b.mem(i as usize * 3000, 3000)
                );
            }
        }
        // On the wire: requests sent minus final responses sent, which is
        // at most what the requester counts outstanding.
        let (mut out, mut max) = (0i32, 0i32);
        for s in &p.seen {
            if s.is(Op::RdmaReadRequest) || s.is(Op::FetchAdd) {
                out += 1;
            }
            if s.is(Op::RdmaReadResponseLast) || s.is(Op::AtomicAcknowledge) {
                out -= 1;
            }
            max = max.max(out);
        }
        assert_eq!(max, limit as i32, "limit {limit}");
        assert_eq!(out, 0);
    }
}

#[test]
fn ack_req_every_n_packets() {
    let cfg = QpConfig {
        ack_req_every: 4,
        ..QpConfig::default()
    };
    let o = Opts {
        caps_a: QpCaps {
            config: Some(cfg),
            ..QpCaps::default()
        },
        ..Opts::default()
    };
    let mut p = Pair::new(o);
    for i in 0..3 {
        let sge = p.b.sge(i * 16384, 16384);
        p.b.recv(i, vec![sge]);
    }
    for (id, n) in [(1u64, 10u32), (2, 3), (3, 5)] {
        p.a.post(wr(id, SendOp::Send, vec![p.a.sge(0, n * 1024)]));
    }
    p.settle();
    all_ok(&p.a.sent, 3);
    let bits: Vec<usize> = p
        .from(Side::A)
        .enumerate()
        .filter(|(_, s)| s.ack_req)
        .map(|(i, _)| i + 1)
        .collect();
    // 10 packets: 4, 8, 10 (last); 3: 13 (last); 5: 17, 18 (last).
    assert_eq!(bits, [4, 8, 10, 13, 17, 18]);
    let acks: Vec<u32> = p
        .from(Side::B)
        .filter(|s| s.is_ack())
        .map(|s| s.psn - 0x100 + 1)
        .collect();
    assert_eq!(acks, [4, 8, 10, 13, 17, 18]);
    assert_eq!(p.b.c().acks_sent, 6);

    // The default asks every 64 packets.
    let mut p = Pair::new(Opts::default().mtu(Mtu::Mtu256));
    let sge = p.b.sge(0, 100 * 256);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 100 * 256)]));
    p.settle();
    let bits: Vec<usize> = p
        .from(Side::A)
        .enumerate()
        .filter(|(_, s)| s.ack_req)
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(bits, [64, 100]);
}

#[test]
fn responder_acks_every_n_packets_and_coalesces() {
    for batch in [false, true] {
        let cfg = QpConfig {
            ack_every: 4,
            ..QpConfig::default()
        };
        let o = Opts {
            caps_b: QpCaps {
                config: Some(cfg),
                ..QpCaps::default()
            },
            ..Opts::default()
        };
        let mut p = Pair::new(o);
        p.batch = batch;
        let sge = p.b.sge(0, 16384);
        p.b.recv(1, vec![sge]);
        p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 10 * 1024)]));
        p.settle();
        all_ok(&p.a.sent, 1);
        assert_eq!(p.b.c().acks_sent, 3, "packets 4, 8 and 10 (AckReq)");
        let acks: Vec<u32> = p
            .from(Side::B)
            .filter(|s| s.is_ack())
            .map(|s| s.psn - 0x100 + 1)
            .collect();
        if batch {
            // All ten arrive before the responder writes: one ACK covers
            // them.
            assert_eq!(acks, [10]);
        } else {
            assert_eq!(acks, [4, 8, 10]);
        }
    }
}

#[test]
fn ipv6_path() {
    let mut p = Pair::new(Opts {
        ipv6: true,
        ..Opts::default()
    });
    let data = pattern(60, 5000);
    p.a.fill(0, &data);
    p.b.fill(10_000, &data);
    let sge = p.b.sge(0, 8192);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 5000)]));
    let op = SendOp::Read {
        remote_addr: p.b.addr(10_000),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(2, op, vec![p.a.sge(20_000, 5000)]));
    // One request lost: the retransmission is IPv6 too.
    p.set_filter(drop_first(|s| s.from == Side::A && s.psn == 0x101));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!(p.b.mem(0, 5000), data);
    assert_eq!(p.a.mem(20_000, 5000), data);
    assert!(p
        .seen
        .iter()
        .all(|s| matches!(Frame::parse(&s.bytes).unwrap().ip(), IpRepr::V6(_))));
    p.check_accounting();
}

#[test]
fn qps_on_one_device_are_independent() {
    // A second QP pair on the same two devices: its fatal error leaves the
    // first connection running, and frames reach the right QP.
    let mut p = Pair::new(Opts::default());
    let o = Opts::default();
    let (pa, pb) = (p.a.pd, p.b.pd);
    let (sa, sb) = (p.a.scq, p.b.scq);
    let (ra, rb) = (p.a.rcq, p.b.rcq);
    let qa2 = p.a.dev.create_qp(pa, sa, ra, QpCaps::default()).unwrap();
    let qb2 = p.b.dev.create_qp(pb, sb, rb, QpCaps::default()).unwrap();
    connect(
        &mut p.a.dev,
        qa2,
        qb2,
        MAC_B,
        ip_b(),
        &o,
        REMOTE_ALL,
        Mtu::Mtu512,
        50,
        60,
    )
    .unwrap();
    connect(
        &mut p.b.dev,
        qb2,
        qa2,
        MAC_A,
        ip_a(),
        &o,
        REMOTE_ALL,
        Mtu::Mtu512,
        60,
        50,
    )
    .unwrap();
    let data = pattern(61, 4096);
    p.a.fill(0, &data);
    for i in 0..4u64 {
        let s = p.a.sge(0, 4096);
        let op = SendOp::Write {
            remote_addr: p.b.addr(i * 4096),
            rkey: p.b.rkey(),
        };
        p.a.post(wr(i, op, vec![s]));
        let op = SendOp::Write {
            remote_addr: p.b.addr(100_000 + i * 4096),
            rkey: if i == 2 { 0xBAD00 } else { p.b.rkey() },
        };
        p.a.dev.post_send(qa2, wr(10 + i, op, vec![s])).unwrap();
    }
    p.settle();
    let by_qp = |q: u32| -> Vec<(u64, WcStatus)> {
        p.a.sent
            .iter()
            .filter(|w| w.qp_num == q)
            .map(|w| (w.wr_id, w.status))
            .collect()
    };
    assert_eq!(
        by_qp(p.a.qp),
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(
        by_qp(qa2),
        [
            (10, WcStatus::Success),
            (11, WcStatus::Success),
            (12, WcStatus::RemAccessErr),
            (13, WcStatus::WrFlushErr)
        ]
    );
    for i in 0..4 {
        assert_eq!(p.b.mem(i * 4096, 4096), data);
    }
    assert_eq!(p.b.mem(100_000, 4096), data);
    assert_eq!(p.a.state(), QpState::Rts);
    assert_eq!(p.b.state(), QpState::Rts);
    assert_eq!(p.a.dev.query_qp(qa2).unwrap().0, QpState::Err);
    assert_eq!(p.b.dev.query_qp(qb2).unwrap().0, QpState::Err);
    // Each QP's packets used its own MTU and PSNs.
    assert!(p
        .from(Side::A)
        .filter(|s| s.psn < 0x100)
        .all(|s| s.len <= 512));
    let total = p.a.dev.counters();
    assert_eq!(
        total.rdma_sends,
        p.a.c().rdma_sends + p.a.dev.qp_counters(qa2).unwrap().rdma_sends
    );
}

// ===========================================================================
// Every path MTU, messages around multiples of it.

#[test]
fn every_path_mtu_with_sizes_around_multiples() {
    for mtu in Mtu::ALL {
        let m = mtu.bytes() as usize;
        let mut p = Pair::new(
            Opts {
                mr_len: 1 << 18,
                ..Opts::default()
            }
            .mtu(mtu),
        );
        let mut sizes = vec![1];
        for k in 1..=3 {
            sizes.extend([k * m - 1, k * m, k * m + 1]);
        }
        for (i, &len) in sizes.iter().enumerate() {
            let data = pattern(1000 + i as u64 + m as u64, len);
            p.a.fill(0, &data);
            let mark = p.seen.len();
            let (sent0, recvd0) = (p.a.sent.len(), p.b.recvd.len());
            let sge = p.b.sge(0, len as u32);
            p.b.recv(1, vec![sge]);
            let sge = p.b.sge(200_000, 16);
            p.b.recv(2, vec![sge]);
            let s = p.a.sge(0, len as u32);
            p.a.post(wr(1, SendOp::Send, vec![s]));
            let op = SendOp::Write {
                remote_addr: p.b.addr(32768),
                rkey: p.b.rkey(),
            };
            p.a.post(wr(2, op, vec![s]));
            let op = SendOp::WriteWithImm {
                remote_addr: p.b.addr(65536),
                rkey: p.b.rkey(),
                imm: len as u32,
            };
            p.a.post(wr(3, op, vec![s]));
            let op = SendOp::Read {
                remote_addr: p.b.addr(32768),
                rkey: p.b.rkey(),
            };
            p.a.post(wr(4, op, vec![p.a.sge(98304, len as u32)]));
            p.settle();
            let ctx = format!("mtu {m} len {len}");
            all_ok(&p.a.sent[sent0..], 4);
            assert!(
                p.a.sent[sent0..].iter().all(|w| w.byte_len as usize == len),
                "{ctx}"
            );
            let r = &p.b.recvd[recvd0..];
            assert_eq!(r.len(), 2, "{ctx}");
            assert_eq!(
                (r[0].opcode, r[0].byte_len as usize),
                (WcOpcode::Recv, len),
                "{ctx}"
            );
            assert_eq!(
                (r[1].opcode, r[1].byte_len as usize),
                (WcOpcode::RecvRdmaWithImm, len),
                "{ctx}"
            );
            assert_eq!(r[1].imm_data, Some(len as u32));
            assert_eq!(p.b.mem(0, len), data, "{ctx}");
            assert_eq!(p.b.mem(32768, len), data, "{ctx}");
            assert_eq!(p.b.mem(65536, len), data, "{ctx}");
            assert_eq!(p.a.mem(98304, len), data, "{ctx}");
            let n = npkts(len, mtu);
            let a: Vec<Opcode> = p.seen[mark..]
                .iter()
                .filter(|s| s.from == Side::A)
                .map(|s| s.op)
                .collect();
            let mut want = send_ops(n);
            want.extend(write_ops(n));
            want.extend(msg(
                n,
                Op::RdmaWriteOnlyWithImmediate,
                Op::RdmaWriteFirst,
                Op::RdmaWriteMiddle,
                Op::RdmaWriteLastWithImmediate,
            ));
            want.push(rc(Op::RdmaReadRequest));
            assert_eq!(a, want, "{ctx}");
            let b: Vec<Opcode> = p.seen[mark..]
                .iter()
                .filter(|s| s.is_read_resp())
                .map(|s| s.op)
                .collect();
            assert_eq!(b, read_resp_ops(n), "{ctx}");
            // Every FIRST / MIDDLE carries exactly one MTU.
            for s in p.seen[mark..].iter() {
                if s.is(Op::SendFirst)
                    || s.is(Op::SendMiddle)
                    || s.is(Op::RdmaWriteFirst)
                    || s.is(Op::RdmaReadResponseMiddle)
                {
                    assert_eq!(s.len, m, "{ctx}");
                }
            }
            assert_eq!(p.a.c().retransmitted_pkts, 0);
        }
        p.check_accounting();
    }
}

// ===========================================================================
// PSN wrap-around at 2^24.

/// A mixed workload both ways whose PSNs cross 2^24.
fn wrap_workload(p: &mut Pair) {
    p.a.fill(0, &pattern(20, 8192));
    p.b.fill(0, &pattern(21, 8192));
    p.b.fill(100_000, &pattern(22, 4096));
    for i in 0..2 {
        let sge = p.b.sge(20_000 + i * 4096, 4096);
        p.b.recv(i, vec![sge]);
        let sge = p.a.sge(20_000 + i * 4096, 4096);
        p.a.recv(i, vec![sge]);
    }
    // A: 4 + 4 + 8 (READ) + 1 + 4 PSNs.
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 1000)]));
    let op = SendOp::Write {
        remote_addr: p.b.addr(40_000),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(2, op, vec![p.a.sge(1000, 1000)]));
    let op = SendOp::Read {
        remote_addr: p.b.addr(100_000),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(3, op, vec![p.a.sge(50_000, 2000)]));
    let op = SendOp::FetchAdd {
        remote_addr: p.b.addr(60_000),
        rkey: p.b.rkey(),
        add: 3,
    };
    p.a.post(wr(4, op, vec![p.a.sge(60_000, 8)]));
    p.a.post(wr(5, SendOp::SendWithImm(5), vec![p.a.sge(2000, 1000)]));
    // B: a READ of 8 PSNs across the wrap, then 8 + 8.
    p.a.fill(100_000, &pattern(23, 4096));
    let op = SendOp::Read {
        remote_addr: p.a.addr(100_000),
        rkey: p.a.rkey(),
    };
    p.b.post(wr(0, op, vec![p.b.sge(50_000, 2000)]));
    p.b.post(wr(1, SendOp::Send, vec![p.b.sge(0, 2000)]));
    let op = SendOp::Write {
        remote_addr: p.a.addr(40_000),
        rkey: p.a.rkey(),
    };
    p.b.post(wr(2, op, vec![p.b.sge(2000, 2000)]));
}

fn wrap_check(p: &Pair) {
    all_ok(&p.a.sent, 5);
    all_ok(&p.b.sent, 3);
    assert_eq!(p.b.mem(50_000, 2000), p.a.mem(100_000, 2000));
    assert_eq!(p.b.mem(20_000, 1000), p.a.mem(0, 1000));
    assert_eq!(p.b.mem(24_096, 1000), p.a.mem(2000, 1000));
    assert_eq!(p.b.mem(40_000, 1000), p.a.mem(1000, 1000));
    assert_eq!(p.a.mem(50_000, 2000), p.b.mem(100_000, 2000));
    assert_eq!((p.a.word(60_000), p.b.word(60_000)), (0, 3));
    assert_eq!(p.a.mem(20_000, 2000), p.b.mem(0, 2000));
    assert_eq!(p.a.mem(40_000, 2000), p.b.mem(2000, 2000));
    assert_eq!(
        p.b.recvd.iter().map(|w| w.byte_len).collect::<Vec<_>>(),
        [1000, 1000]
    );
    assert_eq!(p.b.recvd[1].imm_data, Some(5));
}

#[test]
fn psn_wraps_at_2_pow_24() {
    let o = Opts {
        psn_a: PSN_MOD - 5,
        psn_b: PSN_MOD - 3,
        ..Opts::default()
    }
    .mtu(Mtu::Mtu256);
    let mut p = Pair::new(o);
    wrap_workload(&mut p);
    p.settle();
    wrap_check(&p);
    // A's first transmissions use PSN 2^24-5 .. 2^24-1, 0 .. 15 in order.
    let mut want = PSN_MOD - 5;
    let mut psns = Vec::new();
    for s in p.from(Side::A).filter(|s| s.is_request()) {
        psns.push(s.psn);
        assert_eq!(s.psn, want);
        want = (want + if s.is(Op::RdmaReadRequest) { 8 } else { 1 }) % PSN_MOD;
    }
    assert!(psns.contains(&(PSN_MOD - 1)) && psns.contains(&0));
    assert_eq!(want, 16);
    // B's READ straddles the wrap: its responses run 2^24-3 .. 4, and
    // B's next request starts at 5.
    let b: Vec<(u32, Opcode)> = p
        .from(Side::B)
        .filter(|s| s.is_request())
        .take(2)
        .map(|s| (s.psn, s.op))
        .collect();
    assert_eq!(
        b,
        [
            (PSN_MOD - 3, rc(Op::RdmaReadRequest)),
            (5, rc(Op::SendFirst))
        ]
    );
    let resp: Vec<u32> = p
        .from(Side::A)
        .filter(|s| s.is_read_resp())
        .map(|s| s.psn)
        .collect();
    assert_eq!(resp, [PSN_MOD - 3, PSN_MOD - 2, PSN_MOD - 1, 0, 1, 2, 3, 4]);
    assert_eq!(p.a.c().retransmitted_pkts + p.b.c().retransmitted_pkts, 0);
}

#[test]
fn psn_wrap_with_loss_retransmits_across_it() {
    type Pick = fn(&Seen) -> bool;
    let cases: [(&str, Pick); 6] = [
        ("request at psn 0", |s| {
            s.from == Side::A && s.is_request() && s.psn == 0
        }),
        ("request at 2^24-1", |s| {
            s.from == Side::A && s.is_request() && s.psn == PSN_MOD - 1
        }),
        ("request before the wrap", |s| {
            s.from == Side::A && s.is_request() && s.psn == PSN_MOD - 4
        }),
        ("B's READ request and the SEND after it", |s| {
            s.from == Side::B && s.is_request() && (s.psn == PSN_MOD - 3 || s.psn == 5)
        }),
        ("READ responses across the wrap", |s| {
            s.is_read_resp() && (s.psn == PSN_MOD - 1 || s.psn == 0 || s.psn == 3)
        }),
        ("last packets and ACKs", |s| s.ack_req || s.is_ack()),
    ];
    for (name, pick) in cases {
        let o = Opts {
            psn_a: PSN_MOD - 5,
            psn_b: PSN_MOD - 3,
            ..Opts::default()
        }
        .mtu(Mtu::Mtu256);
        let mut p = Pair::new(o);
        p.set_filter(drop_first(pick));
        wrap_workload(&mut p);
        p.settle();
        wrap_check(&p);
        let re = p.a.c().retransmitted_pkts + p.b.c().retransmitted_pkts;
        assert!(re > 0, "{name}: nothing was retransmitted");
        // Every retransmission crossed or started at the lost PSN, and
        // nothing was executed twice.
        assert_eq!(p.b.c().rdma_recvs, 2, "{name}");
        assert_eq!(p.b.c().rx_atomic_requests, 1, "{name}");
        p.check_accounting();
    }
}

// ===========================================================================
// NAK codes.

#[test]
fn nak_psn_sequence_error_on_a_lost_packet() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(30, 8192);
    p.a.fill(0, &data);
    let sge = p.b.sge(0, 8192);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 8192)]));
    let lost = 0x100 + 2;
    p.set_filter(drop_first(move |s| s.from == Side::A && s.psn == lost));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.mem(0, 8192), data);
    // One NAK, carrying the expected PSN, for the five packets after the
    // hole.
    assert_eq!(p.naks(Side::B), [(lost, NakCode::PsnSequenceError)]);
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!((cb.out_of_sequence, cb.seq_naks_sent), (5, 1));
    assert_eq!((ca.packet_seq_err, ca.completer_retry_err), (1, 1));
    assert_eq!(ca.retransmitted_pkts, 6, "go back N: packets 3..8 again");
    assert_eq!(ca.local_ack_timeout_err, 0);
    let psns: Vec<u32> = p.from(Side::A).map(|s| s.psn - 0x100).collect();
    assert_eq!(psns, [0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7]);
    assert_eq!(p.a.state(), QpState::Rts);
}

#[test]
fn lost_nak_is_recovered_by_the_ack_timer() {
    let mut p = Pair::new(Opts::default());
    let sge = p.b.sge(0, 8192);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 4096)]));
    let mut f1 = drop_first(|s| s.from == Side::A && s.psn == 0x101);
    let mut f2 = drop_first(|s| s.nak().is_some());
    p.set_filter(move |s| match (f1(s), f2(s)) {
        (Fate::Pass, Fate::Pass) => Fate::Pass,
        _ => Fate::Drop,
    });
    p.settle();
    all_ok(&p.a.sent, 1);
    let ca = p.a.c();
    assert_eq!((ca.local_ack_timeout_err, ca.packet_seq_err), (1, 0));
    // The retry went back to the oldest unacknowledged PSN: there was no
    // ACK, so to the start.
    assert_eq!(ca.retransmitted_pkts, 4);
}

/// Runs `post` on a fresh pair built from `o`, expects A's first work
/// request to fail with `status` by a NAK with `code`, and both QPs in ERR.
fn expect_nak(o: Opts, code: NakCode, status: WcStatus, post: impl FnOnce(&mut Pair)) -> Pair {
    let mut p = Pair::new(o);
    post(&mut p);
    p.settle();
    assert_eq!(
        p.a.sent.first().map(|w| w.status),
        Some(status),
        "{:?}",
        p.a.sent
    );
    assert_eq!(p.naks(Side::B).len(), 1);
    assert_eq!(p.naks(Side::B)[0].1, code);
    assert_eq!(p.a.state(), QpState::Err);
    assert_eq!(p.b.state(), QpState::Err);
    assert_eq!(
        p.a.events(),
        [Event::QpError {
            qpn: p.a.qp,
            status
        }]
    );
    assert!(matches!(p.b.events()[..], [Event::QpError { .. }]));
    let (ca, cb) = (p.a.c(), p.b.c());
    match code {
        NakCode::InvalidRequest => {
            assert_eq!(
                (ca.req_remote_invalid_request, cb.resp_invalid_request),
                (1, 1)
            )
        }
        NakCode::RemoteAccessError => {
            assert_eq!(
                (ca.req_remote_access_errors, cb.resp_remote_access_errors),
                (1, 1)
            )
        }
        NakCode::RemoteOperationalError => assert_eq!(
            (
                ca.req_remote_operational_errors,
                cb.resp_remote_operational_errors
            ),
            (1, 1)
        ),
        _ => unreachable!(),
    }
    assert_eq!(ca.req_cqe_error, 1);
    p.check_accounting();
    p
}

#[test]
fn nak_invalid_request() {
    let inv = NakCode::InvalidRequest;
    let err = WcStatus::RemInvReqErr;
    // The QP does not allow the operation.
    for (access, what) in [
        (
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            0,
        ),
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
            1,
        ),
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            2,
        ),
    ] {
        let p = expect_nak(
            Opts {
                access_b: access,
                ..Opts::default()
            },
            inv,
            err,
            |p| {
                let (ra, rk) = (p.b.addr(0), p.b.rkey());
                let op = match what {
                    0 => SendOp::Write {
                        remote_addr: ra,
                        rkey: rk,
                    },
                    1 => SendOp::Read {
                        remote_addr: ra,
                        rkey: rk,
                    },
                    _ => SendOp::FetchAdd {
                        remote_addr: ra,
                        rkey: rk,
                        add: 1,
                    },
                };
                p.a.post(wr(1, op, vec![p.a.sge(0, 8)]));
            },
        );
        assert_eq!(p.b.c().opcode_errors, 1);
        assert_eq!(p.b.word(0), 0);
    }
    // A misaligned atomic.
    expect_nak(Opts::default(), inv, err, |p| {
        let op = SendOp::CompareSwap {
            remote_addr: p.b.addr(4),
            rkey: p.b.rkey(),
            compare: 0,
            swap: 1,
        };
        p.a.post(wr(1, op, vec![p.a.sge(0, 8)]));
    });
    // No responder resources for READ / atomics.
    expect_nak(
        Opts {
            max_dest_rd_atomic: 0,
            ..Opts::default()
        },
        inv,
        err,
        |p| {
            let op = SendOp::Read {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
            };
            p.a.post(wr(1, op, vec![p.a.sge(0, 8)]));
        },
    );
    // Path MTUs that differ (reference B.6): the responder's FIRST packet
    // length check fails.
    for send in [true, false] {
        let o = Opts {
            mtu_a: Mtu::Mtu1024,
            mtu_b: Mtu::Mtu512,
            ..Opts::default()
        };
        let p = expect_nak(o, inv, err, |p| {
            let sge = p.b.sge(0, 8192);
            p.b.recv(1, vec![sge]);
            let op = if send {
                SendOp::Send
            } else {
                SendOp::Write {
                    remote_addr: p.b.addr(0),
                    rkey: p.b.rkey(),
                }
            };
            p.a.post(wr(1, op, vec![p.a.sge(0, 3000)]));
        });
        if send {
            assert_ne!(p.b.recvd[0].status, WcStatus::Success);
        }
    }
}

#[test]
fn nak_remote_access_error() {
    type Case = (&'static str, fn(&mut Pair, &MrKeys) -> SendOp, u32);
    let cases: [Case; 9] = [
        (
            "WRITE with a bad rkey",
            |p, _| SendOp::Write {
                remote_addr: p.b.addr(0),
                rkey: 0xBAD00,
            },
            8,
        ),
        (
            "WRITE past the end",
            |p, _| SendOp::Write {
                remote_addr: p.b.addr((1 << 18) - 4),
                rkey: p.b.rkey(),
            },
            8,
        ),
        (
            "multi-packet WRITE past the end",
            |p, _| SendOp::Write {
                remote_addr: p.b.addr((1 << 18) - 3000),
                rkey: p.b.rkey(),
            },
            3001,
        ),
        (
            "READ before the start",
            |p, _| SendOp::Read {
                remote_addr: p.b.addr(0) - 1,
                rkey: p.b.rkey(),
            },
            8,
        ),
        (
            "READ a region without remote read",
            |_, m| SendOp::Read {
                remote_addr: m.addr,
                rkey: m.rkey,
            },
            8,
        ),
        (
            "WRITE a region without remote write",
            |_, m| SendOp::Write {
                remote_addr: m.addr + 4096,
                rkey: m.rkey,
            },
            8,
        ),
        (
            "atomic on a region without remote atomic",
            |_, m| SendOp::FetchAdd {
                remote_addr: m.addr,
                rkey: m.rkey,
                add: 1,
            },
            8,
        ),
        (
            "atomic with a bad rkey",
            |p, _| SendOp::CompareSwap {
                remote_addr: p.b.addr(0),
                rkey: 0xBAD00,
                compare: 0,
                swap: 1,
            },
            8,
        ),
        (
            "WRITE a region of another PD",
            |p, _| {
                let pd = p.b.dev.alloc_pd();
                let m = p.b.dev.reg_mr(MrSpec::new(pd, 64, Access::ALL)).unwrap();
                SendOp::Write {
                    remote_addr: m.addr,
                    rkey: m.rkey,
                }
            },
            8,
        ),
    ];
    for (name, op, len) in cases {
        let p = expect_nak(
            Opts::default(),
            NakCode::RemoteAccessError,
            WcStatus::RemAccessErr,
            |p| {
                let pd = p.b.pd;
                // Local write only: no remote right at all.
                let m =
                    p.b.dev
                        .reg_mr(MrSpec::new(pd, 8192, Access::LOCAL_WRITE))
                        .unwrap();
                let op = op(p, &m);
                p.a.post(wr(1, op, vec![p.a.sge(0, len)]));
            },
        );
        assert!(p.b.mem(0, 64).iter().all(|&b| b == 0), "{name}");
        assert!(
            p.b.mem((1 << 18) - 3000, 3000).iter().all(|&b| b == 0),
            "{name}"
        );
    }
}

#[test]
fn nak_remote_operational_error_when_the_receive_cq_is_full() {
    let mut p = Pair::new(Opts {
        rcq_cap_b: 1,
        ..Opts::default()
    });
    for i in 0..3 {
        let sge = p.b.sge(i * 4096, 4096);
        p.b.recv(10 + i, vec![sge]);
    }
    for id in 1..=3 {
        // The second is a WRITE with immediate: it needs the CQ as well.
        let op = if id == 2 {
            SendOp::WriteWithImm {
                remote_addr: p.b.addr(50_000),
                rkey: p.b.rkey(),
                imm: 2,
            }
        } else {
            SendOp::Send
        };
        p.a.post(wr(id, op, vec![p.a.sge(0, 100)]));
    }
    // Nobody polls B's receive CQ.
    assert_eq!(p.run(Duration::from_secs(1)), Stop::Idle);
    p.a.poll();
    assert_eq!(
        p.a.sent_status(),
        [
            (1, WcStatus::Success),
            (2, WcStatus::RemOpErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.naks(Side::B), [(0x101, NakCode::RemoteOperationalError)]);
    assert_eq!(p.b.state(), QpState::Err);
    assert_eq!(p.b.mem(50_000, 100), [0; 100], "the WRITE was not executed");
    assert_eq!(
        (
            p.a.c().req_remote_operational_errors,
            p.b.c().resp_remote_operational_errors
        ),
        (1, 1)
    );
    // The completions that did not fit wait for the CQ, in order.
    assert_eq!(p.b.dev.cq_len(p.b.rcq), 1);
    let mut got = Vec::new();
    while p.b.dev.poll_cq(p.b.rcq, 1, &mut got) > 0 {}
    let st: Vec<(u64, WcStatus)> = got.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        [
            (10, WcStatus::Success),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
}

#[test]
fn local_length_error_send_longer_than_the_receive() {
    for (recv_len, send_len) in [(100u32, 200u32), (1500, 3000), (0, 1)] {
        let p = expect_nak(
            Opts::default(),
            NakCode::InvalidRequest,
            WcStatus::RemInvReqErr,
            |p| {
                let sge = p.b.sge(0, recv_len);
                p.b.recv(7, if recv_len == 0 { vec![] } else { vec![sge] });
                p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, send_len)]));
            },
        );
        assert_eq!(p.b.recvd.len(), 1);
        assert_eq!(
            (p.b.recvd[0].wr_id, p.b.recvd[0].status),
            (7, WcStatus::LocLenErr)
        );
        assert_eq!(p.b.c().resp_local_length_error, 1);
        // Nothing beyond the buffer was written.
        assert_eq!(p.b.mem(recv_len as usize, 64), [0; 64]);
    }
}

#[test]
fn local_protection_error_on_a_bad_send_sge() {
    type Case = (&'static str, fn(&mut Pair) -> SendWr);
    let cases: [Case; 6] = [
        ("bad lkey", |p| {
            wr(
                1,
                SendOp::Send,
                vec![Sge {
                    addr: p.a.addr(0),
                    length: 8,
                    lkey: 0xBAD,
                }],
            )
        }),
        ("beyond the region", |p| {
            wr(1, SendOp::Send, vec![p.a.sge((1 << 18) - 4, 8)])
        }),
        ("region of another PD", |p| {
            let pd = p.a.dev.alloc_pd();
            let m = p.a.dev.reg_mr(MrSpec::new(pd, 64, Access::ALL)).unwrap();
            wr(
                1,
                SendOp::Send,
                vec![Sge {
                    addr: m.addr,
                    length: 8,
                    lkey: m.lkey,
                }],
            )
        }),
        ("READ into a read-only region", |p| {
            let pd = p.a.pd;
            let m = p.a.dev.reg_mr(MrSpec::new(pd, 64, Access::NONE)).unwrap();
            let op = SendOp::Read {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
            };
            wr(
                1,
                op,
                vec![Sge {
                    addr: m.addr,
                    length: 8,
                    lkey: m.lkey,
                }],
            )
        }),
        ("atomic into a read-only region", |p| {
            let pd = p.a.pd;
            let m =
                p.a.dev
                    .reg_mr(MrSpec::new(pd, 64, Access::REMOTE_READ))
                    .unwrap();
            let op = SendOp::FetchAdd {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
                add: 1,
            };
            wr(
                1,
                op,
                vec![Sge {
                    addr: m.addr,
                    length: 8,
                    lkey: m.lkey,
                }],
            )
        }),
        ("second SGE bad", |p| {
            wr(
                1,
                SendOp::Write {
                    remote_addr: p.b.addr(0),
                    rkey: p.b.rkey(),
                },
                vec![
                    p.a.sge(0, 8),
                    Sge {
                        addr: 0,
                        length: 1,
                        lkey: p.a.mr.lkey,
                    },
                ],
            )
        }),
    ];
    for (name, mk) in cases {
        let mut p = Pair::new(Opts::default());
        let x = mk(&mut p);
        p.a.post(x);
        p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 8)]));
        p.settle();
        assert_eq!(
            p.a.sent_status(),
            [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)],
            "{name}"
        );
        assert_eq!(p.from(Side::A).count(), 0, "{name}: nothing may be sent");
        assert_eq!(p.a.state(), QpState::Err);
        assert_eq!(
            p.a.events(),
            [Event::QpError {
                qpn: p.a.qp,
                status: WcStatus::LocProtErr
            }]
        );
        assert_eq!((p.a.c().req_cqe_error, p.a.c().req_cqe_flush_error), (1, 1));
        assert_eq!(p.b.word(0), 0);
    }
}

#[test]
fn local_protection_error_after_earlier_requests_that_need_a_retransmission() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(31, 4096);
    p.a.fill(0, &data);
    let op = SendOp::Write {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(1, op, vec![p.a.sge(0, 4096)]));
    p.a.post(wr(
        2,
        SendOp::Send,
        vec![Sge {
            addr: 0,
            length: 8,
            lkey: 0xBAD,
        }],
    ));
    p.a.post(wr(3, SendOp::Send, vec![p.a.sge(0, 8)]));
    // The WRITE's second packet is lost: it must still be retransmitted
    // and complete before the bad request fails.
    p.set_filter(drop_first(|s| s.from == Side::A && s.psn == 0x101));
    p.settle();
    assert_eq!(
        p.a.sent_status(),
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.b.mem(0, 4096), data);
    assert_eq!(p.a.c().retry_exceeded_err, 0);
}

/// A region deregistered while a message using it is still in flight: the
/// bytes that would come from it or go to it are never faked. Each case
/// loses one packet so that the rest of the message moves after the
/// deregistration.
#[test]
fn a_region_deregistered_mid_message_fails_the_message_instead_of_moving_wrong_bytes() {
    // The requester's source, before go-back-N resends the lost packet.
    let mut p = Pair::new(Opts::default());
    p.a.fill(0, &pattern(41, 4096));
    let op = SendOp::Write {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(1, op, vec![p.a.sge(0, 4096)]));
    p.set_filter(drop_first(|s| s.from == Side::A && s.psn == 0x102));
    let mut gone = false;
    p.run_until(Duration::from_secs(1), |p| {
        if !gone && p.b.c().out_of_sequence > 0 {
            let k = p.a.mr.lkey;
            assert!(p.a.dev.dereg_mr(k));
            gone = true;
        }
        false
    });
    p.poll();
    assert!(gone);
    assert_eq!(p.a.sent_status(), [(1, WcStatus::LocProtErr)]);
    assert_eq!(p.a.state(), QpState::Err);

    // The responder's target, between the FIRST packet and the rest.
    let mut p = Pair::new(Opts::default());
    let op = SendOp::Write {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(2, op, vec![p.a.sge(0, 4096)]));
    p.set_filter(drop_first(|s| s.from == Side::A && s.psn == 0x102));
    let mut gone = false;
    p.run_until(Duration::from_secs(1), |p| {
        if !gone && p.b.c().out_of_sequence > 0 {
            let k = p.b.mr.lkey;
            assert!(p.b.dev.dereg_mr(k));
            gone = true;
        }
        false
    });
    p.poll();
    assert_eq!(p.a.sent_status(), [(2, WcStatus::RemAccessErr)]);
    assert_eq!(p.b.c().resp_remote_access_errors, 1);
    assert_eq!(
        p.b.events(),
        [Event::QpError {
            qpn: p.b.qp,
            status: WcStatus::RemAccessErr
        }]
    );

    // The READ's local buffer, before the lost response is answered again.
    let mut p = Pair::new(Opts::default());
    p.b.fill(0, &pattern(43, 4096));
    let op = SendOp::Read {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(3, op, vec![p.a.sge(0, 4096)]));
    p.set_filter(drop_first(|s| s.from == Side::B && s.psn == 0x102));
    let mut gone = false;
    p.run_until(Duration::from_secs(1), |p| {
        if !gone && p.a.c().implied_nak_seq_err > 0 {
            let k = p.a.mr.lkey;
            assert!(p.a.dev.dereg_mr(k));
            gone = true;
        }
        false
    });
    p.poll();
    assert!(gone);
    assert_eq!(p.a.sent_status(), [(3, WcStatus::LocProtErr)]);

    // The READ's source, before the lost response is answered again: the
    // responder NAKs remote access error rather than send bytes it no
    // longer has.
    let mut p = Pair::new(Opts::default());
    p.b.fill(0, &pattern(47, 4096));
    let op = SendOp::Read {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    p.a.post(wr(4, op, vec![p.a.sge(0, 4096)]));
    p.set_filter(drop_first(|s| {
        s.from == Side::B && s.is_read_resp() && s.psn == 0x102
    }));
    let mut gone = false;
    p.run_until(Duration::from_secs(1), |p| {
        if !gone && p.a.c().implied_nak_seq_err > 0 {
            let k = p.b.mr.lkey;
            assert!(p.b.dev.dereg_mr(k));
            gone = true;
        }
        false
    });
    p.poll();
    assert!(gone);
    assert_eq!(p.a.sent_status(), [(4, WcStatus::RemAccessErr)]);
    assert_eq!(p.b.c().resp_remote_access_errors, 1);
    assert_eq!(p.b.state(), QpState::Err);
    let naks: Vec<_> = p.seen.iter().filter_map(|s| s.nak()).collect();
    assert_eq!(naks, [NakCode::RemoteAccessError]);
}

#[test]
fn responder_local_protection_error_on_a_bad_receive_sge() {
    type Case = (&'static str, fn(&mut Pair) -> Vec<Sge>);
    let cases: [Case; 3] = [
        ("bad lkey", |p| {
            vec![Sge {
                addr: p.b.addr(0),
                length: 64,
                lkey: 0xBAD,
            }]
        }),
        ("region without local write", |p| {
            let pd = p.b.pd;
            let m =
                p.b.dev
                    .reg_mr(MrSpec::new(pd, 64, Access::REMOTE_READ))
                    .unwrap();
            vec![Sge {
                addr: m.addr,
                length: 64,
                lkey: m.lkey,
            }]
        }),
        ("second element beyond its region", |p| {
            vec![p.b.sge(0, 10), p.b.sge((1 << 18) - 10, 64)]
        }),
    ];
    for (name, sges) in cases {
        let p = expect_nak(
            Opts::default(),
            NakCode::RemoteOperationalError,
            WcStatus::RemOpErr,
            |p| {
                let s = sges(p);
                p.b.recv(7, s);
                p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 40)]));
            },
        );
        assert_eq!(p.b.recvd.len(), 1, "{name}");
        assert_eq!(
            (p.b.recvd[0].wr_id, p.b.recvd[0].status),
            (7, WcStatus::LocProtErr),
            "{name}"
        );
    }
}

// ===========================================================================
// RNR.

#[test]
fn rnr_nak_waits_the_timer_then_succeeds() {
    let o = Opts {
        min_rnr_timer: 5,
        ..Opts::default()
    };
    let mut p = Pair::new(o);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 100)]));
    assert!(p.wait(Duration::from_secs(1), |p| p.b.c().out_of_buffer >= 4));
    let rnrs: Vec<(u32, u8)> = p
        .from(Side::B)
        .filter_map(|s| Some((s.psn, s.rnr()?)))
        .collect();
    assert!(rnrs.len() >= 4);
    assert!(rnrs.iter().all(|&r| r == (0x100, 5)));
    let tries: Vec<Instant> = p.from(Side::A).map(|s| s.at).collect();
    for w in tries.windows(2) {
        let gap = w[1].saturating_since(w[0]).as_nanos();
        assert_eq!(gap, rnr_timer_ns(5) + 2 * p.delay.as_nanos(), "RNR wait");
    }
    assert!(p.a.sent.is_empty());
    let sge = p.b.sge(0, 100);
    p.b.recv(9, vec![sge]);
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.recvd[0].byte_len, 100);
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!(ca.rnr_nak_retry_err, cb.out_of_buffer);
    assert_eq!(ca.retry_rnr_exceeded_err + ca.local_ack_timeout_err, 0);
}

#[test]
fn rnr_retry_exhaustion() {
    for n in 0..=6u8 {
        let mut p = Pair::new(Opts {
            rnr_retry: n,
            ..Opts::default()
        });
        p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 100)]));
        p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 100)]));
        p.settle();
        assert_eq!(
            p.a.sent_status(),
            [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
            "rnr_retry {n}"
        );
        let rnrs = p.from(Side::B).filter(|s| s.rnr().is_some()).count();
        assert_eq!(rnrs, n as usize + 1, "rnr_retry {n}");
        assert_eq!(p.a.c().retry_rnr_exceeded_err, 1);
        assert_eq!(p.a.c().rnr_nak_retry_err, n as u64 + 1);
        assert_eq!(
            p.a.events(),
            [Event::QpError {
                qpn: p.a.qp,
                status: WcStatus::RnrRetryExcErr
            }]
        );
        // RNR is not the responder's error.
        assert_eq!(p.b.state(), QpState::Rts);
    }
}

#[test]
fn rnr_retry_7_retries_forever() {
    let mut p = Pair::new(Opts {
        rnr_retry: 7,
        ..Opts::default()
    });
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 100)]));
    assert!(p.wait(Duration::from_secs(10), |p| p.b.c().out_of_buffer >= 100));
    assert!(p.a.sent.is_empty());
    let sge = p.b.sge(0, 100);
    p.b.recv(1, vec![sge]);
    p.settle();
    all_ok(&p.a.sent, 1);
}

#[test]
fn rnr_then_later_messages_are_retransmitted() {
    // Reference B.9: after an RNR NAK the messages behind the NAKed one
    // must be sent again too.
    let mut p = Pair::new(Opts::default());
    let data = pattern(40, 4 * 1500);
    p.a.fill(0, &data);
    let sge = p.b.sge(0, 1500);
    p.b.recv(0, vec![sge]);
    for i in 0..4u64 {
        p.a.post(wr(i, SendOp::Send, vec![p.a.sge(i * 1500, 1500)]));
    }
    assert!(p.wait(Duration::from_secs(1), |p| p.b.c().out_of_buffer >= 2));
    assert!(
        p.b.c().out_of_sequence > 0,
        "the messages behind were dropped"
    );
    for i in 1..4 {
        let sge = p.b.sge(i * 1500, 1500);
        p.b.recv(i, vec![sge]);
    }
    p.settle();
    all_ok(&p.a.sent, 4);
    assert_eq!(p.b.mem(0, 6000), data);
    assert_eq!(p.b.c().rdma_recvs, 4);
}

#[test]
fn rnr_on_write_with_immediate() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(41, 3000);
    p.a.fill(0, &data);
    let op = SendOp::WriteWithImm {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
        imm: 3,
    };
    p.a.post(wr(1, op, vec![p.a.sge(0, 3000)]));
    assert!(p.wait(Duration::from_secs(1), |p| p.b.c().out_of_buffer >= 2));
    // The RNR NAK is for the last packet, the one that needs the receive.
    assert!(p
        .from(Side::B)
        .filter_map(|s| s.rnr().map(|_| s.psn))
        .all(|psn| psn == 0x102));
    let sge = p.b.sge(100_000, 8);
    p.b.recv(5, vec![sge]);
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.mem(0, 3000), data);
    assert_eq!(
        (
            p.b.recvd[0].opcode,
            p.b.recvd[0].byte_len,
            p.b.recvd[0].imm_data
        ),
        (WcOpcode::RecvRdmaWithImm, 3000, Some(3))
    );
    assert_eq!(p.b.c().rx_write_requests, 1);
}

#[test]
fn duplicated_rnr_naks_spend_one_retry() {
    // The same RNR NAK arriving twice (a duplicating network) is one
    // receiver-not-ready event, not two.
    for n in 0..=3u8 {
        let mut p = Pair::new(Opts {
            rnr_retry: n,
            ..Opts::default()
        });
        p.set_filter(|s| {
            if s.from == Side::B {
                Fate::Dup
            } else {
                Fate::Pass
            }
        });
        p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 100)]));
        p.settle();
        assert_eq!(
            p.a.sent_status(),
            [(1, WcStatus::RnrRetryExcErr)],
            "rnr_retry {n}"
        );
        let rnrs = p.from(Side::B).filter(|s| s.rnr().is_some()).count();
        assert_eq!(
            rnrs,
            n as usize + 1,
            "rnr_retry {n}: RNR NAKs sent before the error"
        );
    }
}

// ===========================================================================
// Retry exhaustion.

#[test]
fn retry_exhaustion_when_nothing_comes_back() {
    let t = ack_timeout(8).unwrap();
    assert_eq!(t.as_nanos(), 4096 << 8);
    for n in 0..=7u8 {
        let mut p = Pair::new(Opts {
            timeout: 8,
            retry_cnt: n,
            ..Opts::default()
        });
        p.set_filter(|s| {
            if s.from == Side::A {
                Fate::Drop
            } else {
                Fate::Pass
            }
        });
        p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 100)]));
        p.a.post(wr(
            2,
            SendOp::Write {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
            },
            vec![p.a.sge(0, 100)],
        ));
        assert!(p.wait(Duration::from_secs(10), |p| p.a.sent.len() == 2));
        // retry_cnt retries, then the error, after retry_cnt + 1 timeouts.
        assert_eq!(
            p.now.as_nanos(),
            (n as u64 + 1) * t.as_nanos(),
            "retry_cnt {n}"
        );
        assert_eq!(
            p.a.sent_status(),
            [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
        );
        let c = p.a.c();
        assert_eq!(c.local_ack_timeout_err, n as u64 + 1);
        assert_eq!(c.retry_exceeded_err, 1);
        assert_eq!(c.retransmitted_pkts, 2 * n as u64);
        assert_eq!(
            p.a.events(),
            [Event::QpError {
                qpn: p.a.qp,
                status: WcStatus::RetryExcErr
            }]
        );
        assert_eq!(p.run(Duration::from_secs(1)), Stop::Idle);
        assert_eq!(p.a.dev.poll_timeout(), None);
    }
}

#[test]
fn retry_exhaustion_when_acks_are_lost_executes_once() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        retry_cnt: 3,
        ..Opts::default()
    });
    p.set_filter(|s| {
        if s.from == Side::B {
            Fate::Drop
        } else {
            Fate::Pass
        }
    });
    let sge = p.b.sge(0, 64);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 64)]));
    p.settle();
    assert_eq!(p.a.sent_status(), [(1, WcStatus::RetryExcErr)]);
    assert_eq!(p.b.recvd.len(), 1, "the duplicates are not executed");
    assert_eq!(p.b.c().duplicate_request, 3);
}

#[test]
fn retry_exhaustion_when_the_peer_is_gone() {
    let mut p = Pair::new(Opts {
        timeout: 8,
        retry_cnt: 2,
        ..Opts::default()
    });
    let qb = p.b.qp;
    p.b.dev.destroy_qp(qb).unwrap();
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 64)]));
    p.settle();
    assert_eq!(p.a.sent_status(), [(1, WcStatus::RetryExcErr)]);
    assert_eq!(p.b.dev.rx_counters().unknown_qp, 3);
    assert_eq!(p.a.c().local_ack_timeout_err, 3);
}

#[test]
fn retry_exhaustion_on_a_dead_simulated_link() {
    let mut net = SimNet::new(7);
    let a = net.add_host(DeviceConfig::new(MAC_A, ip_a())).unwrap();
    let b = net.add_host(DeviceConfig::new(MAC_B, ip_b())).unwrap();
    let link = net.connect(a, b, LinkConfig::default()).unwrap();
    let mut ids = Vec::new();
    for h in [a, b] {
        let d = &mut net.hosts[h].dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(64).unwrap();
        let mr = d.reg_mr(MrSpec::new(pd, 4096, Access::ALL)).unwrap();
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        ids.push((cq, mr, qp));
    }
    let params = ConnectParams {
        timeout: 8,
        retry_cnt: 3,
        ..ConnectParams::default()
    };
    net.connect_qps(a, ids[0].2, b, ids[1].2, &params, (0, 0))
        .unwrap();
    let dead = LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    };
    net.fabric.set_link_config(link.a_to_b, dead).unwrap();
    let (cq, mr, qp) = ids[0];
    let sge = Sge {
        addr: mr.addr,
        length: 64,
        lkey: mr.lkey,
    };
    net.hosts[a]
        .dev
        .post_send(qp, wr(1, SendOp::Send, vec![sge]))
        .unwrap();
    let start = net.now();
    let mut wcs = Vec::new();
    assert!(net.run_until(Duration::from_secs(10), |n| {
        n.hosts[a].dev.poll_cq(cq, 8, &mut wcs);
        !wcs.is_empty()
    }));
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    let c = net.hosts[a].dev.qp_counters(qp).unwrap();
    assert_eq!((c.local_ack_timeout_err, c.retry_exceeded_err), (4, 1));
    let took = net.now().saturating_since(start).as_nanos();
    let t = ack_timeout(8).unwrap().as_nanos();
    assert!((4 * t..4 * t + 100_000).contains(&took), "{took}");
    assert_eq!(net.fabric.link_counters(link.a_to_b).dropped_loss, 4);
}

// ===========================================================================
// Flush and the QP state machine.

#[test]
fn flush_after_an_error_completes_everything_in_order() {
    let mut p = Pair::new(Opts::default());
    for i in 0..2 {
        let sge = p.b.sge(i * 64, 64);
        p.b.recv(100 + i, vec![sge]);
    }
    let sge = p.a.sge(50_000, 64);
    p.a.recv(200, vec![sge]);
    p.a.post(wr(
        1,
        SendOp::Write {
            remote_addr: p.b.addr(0),
            rkey: 0xBAD00,
        },
        vec![p.a.sge(0, 8)],
    ));
    p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 8)]));
    p.a.post(wr(
        3,
        SendOp::Read {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 8)],
    ));
    let mut x = wr(
        4,
        SendOp::Write {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 8)],
    );
    x.signaled = false;
    p.a.post(x);
    p.settle();
    let got: Vec<(u64, WcStatus, WcOpcode)> =
        p.a.sent
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite),
            (2, WcStatus::WrFlushErr, WcOpcode::Send),
            (3, WcStatus::WrFlushErr, WcOpcode::RdmaRead),
            (4, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
        ]
    );
    assert_eq!(
        p.a.recvd
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(200, WcStatus::WrFlushErr)]
    );
    let b: Vec<(u64, WcStatus)> = p.b.recvd.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        b,
        [(100, WcStatus::WrFlushErr), (101, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.b.c().resp_cqe_flush_error, 2);
    // Requests that reached B after its error were dropped, not executed.
    assert!(p.b.c().state_drops > 0);
    // Work posted in ERR completes at once.
    p.a.post(wr(5, SendOp::Send, vec![p.a.sge(0, 8)]));
    p.a.recv(201, vec![]);
    p.a.poll();
    assert_eq!(
        p.a.sent.last().map(|w| (w.wr_id, w.status)),
        Some((5, WcStatus::WrFlushErr))
    );
    assert_eq!(
        p.a.recvd.last().map(|w| (w.wr_id, w.status)),
        Some((201, WcStatus::WrFlushErr))
    );
    assert_eq!((p.a.c().req_cqe_error, p.a.c().req_cqe_flush_error), (1, 4));
    let before = p.seen.len();
    p.settle();
    assert_eq!(p.seen.len(), before, "a QP in ERR sends nothing");
}

#[test]
fn modify_to_err_flushes_outstanding_work() {
    let mut p = Pair::new(Opts::default());
    p.set_filter(|s| {
        if s.from == Side::A {
            Fate::Drop
        } else {
            Fate::Pass
        }
    });
    for i in 0..2 {
        let sge = p.a.sge(100_000 + i * 64, 64);
        p.a.recv(10 + i, vec![sge]);
    }
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 3000)]));
    let mut x = wr(
        2,
        SendOp::Write {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 8)],
    );
    x.signaled = false;
    p.a.post(x);
    p.a.post(wr(
        3,
        SendOp::Read {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 8)],
    ));
    assert_eq!(p.run(Duration::from_micros(10)), Stop::Limit);
    assert!(p.a.sent.is_empty());
    let qa = p.a.qp;
    p.a.dev
        .modify_qp(qa, &to_state(QpState::Err), AttrMask::STATE)
        .unwrap();
    p.poll();
    let got: Vec<(u64, WcStatus, WcOpcode)> =
        p.a.sent
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::WrFlushErr, WcOpcode::Send),
            (2, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (3, WcStatus::WrFlushErr, WcOpcode::RdmaRead),
        ]
    );
    let r: Vec<(u64, WcStatus)> = p.a.recvd.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(r, [(10, WcStatus::WrFlushErr), (11, WcStatus::WrFlushErr)]);
    assert_eq!(p.a.events(), [], "a requested ERR is no async error");
    assert_eq!(p.a.dev.poll_timeout(), None);
    let before = p.from(Side::A).count();
    p.settle();
    assert_eq!(p.from(Side::A).count(), before);
}

#[test]
fn qp_state_machine_errors_are_errors_not_panics() {
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    const ERR: QpState = QpState::Err;
    let mut d = Device::new(DeviceConfig::new(MAC_A, ip_a())).unwrap();
    let pd = d.alloc_pd();
    let cq = d.create_cq(16).unwrap();
    let mr = d.reg_mr(MrSpec::new(pd, 64, Access::ALL)).unwrap();
    let q = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
    let sge = Sge {
        addr: mr.addr,
        length: 8,
        lkey: mr.lkey,
    };
    let send = || wr(1, SendOp::Send, vec![sge]);
    let recv = || RecvWr {
        wr_id: 1,
        sges: smallvec::smallvec![sge],
    };
    let state = |d: &Device| d.query_qp(q).unwrap().0;

    // RESET: nothing may be posted; only INIT (and RESET / ERR) next.
    assert_eq!(d.post_send(q, send()), Err(Error::WrongState(Reset)));
    assert_eq!(d.post_recv(q, recv()), Err(Error::WrongState(Reset)));
    for s in [Rtr, Rts, Sqd, Sqe] {
        assert_eq!(
            d.modify_qp(q, &to_state(s), AttrMask::STATE),
            Err(Error::InvalidTransition { from: Reset, to: s })
        );
    }
    let mut a = to_state(Init);
    a.qp_access_flags = REMOTE_ALL;
    assert_eq!(
        d.modify_qp(
            q,
            &a,
            AttrMask::STATE | AttrMask::PORT | AttrMask::ACCESS_FLAGS
        ),
        Err(Error::MissingAttr("PKEY_INDEX"))
    );
    assert_eq!(
        d.modify_qp(q, &a, INIT_MASK | AttrMask::SQ_PSN),
        Err(Error::UnexpectedAttr("SQ_PSN"))
    );
    assert_eq!(
        d.modify_qp(q, &a, INIT_MASK | AttrMask::AV),
        Err(Error::UnexpectedAttr("AV"))
    );
    let bad = |f: fn(&mut QpAttr)| {
        let mut x = a;
        f(&mut x);
        x
    };
    assert!(matches!(
        d.modify_qp(q, &bad(|x| x.port_num = 2), INIT_MASK),
        Err(Error::InvalidAttr(_))
    ));
    assert!(matches!(
        d.modify_qp(q, &bad(|x| x.pkey_index = 1), INIT_MASK),
        Err(Error::InvalidAttr(_))
    ));
    let mut c = a;
    c.cur_qp_state = Init;
    assert!(matches!(
        d.modify_qp(q, &c, INIT_MASK | AttrMask::CUR_STATE),
        Err(Error::InvalidAttr(_))
    ));
    // Without STATE the "transition" is RESET -> RESET with attributes.
    assert!(d.modify_qp(q, &a, AttrMask::ACCESS_FLAGS).is_err());
    assert_eq!(state(&d), Reset, "a refused modify changes nothing");
    d.modify_qp(q, &a, INIT_MASK).unwrap();
    assert_eq!(state(&d), Init);

    // INIT: receives may be posted, sends not.
    assert_eq!(d.post_send(q, send()), Err(Error::WrongState(Init)));
    d.post_recv(q, recv()).unwrap();
    d.modify_qp(q, &a, AttrMask::STATE | AttrMask::ACCESS_FLAGS)
        .unwrap(); // INIT -> INIT
    for s in [Rts, Sqd] {
        assert_eq!(
            d.modify_qp(q, &to_state(s), AttrMask::STATE),
            Err(Error::InvalidTransition { from: Init, to: s })
        );
    }
    let mut r = a;
    r.qp_state = Rtr;
    r.ah_attr = Some(av(ip_b(), MAC_B));
    r.dest_qp_num = 0x22;
    r.max_dest_rd_atomic = 4;
    r.min_rnr_timer = 12;
    for (m, name) in [
        (AttrMask::AV, "AV"),
        (AttrMask::PATH_MTU, "PATH_MTU"),
        (AttrMask::DEST_QPN, "DEST_QPN"),
        (AttrMask::RQ_PSN, "RQ_PSN"),
        (AttrMask::MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
        (AttrMask::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
    ] {
        let mask = AttrMask::STATE
            | [
                AttrMask::AV,
                AttrMask::PATH_MTU,
                AttrMask::DEST_QPN,
                AttrMask::RQ_PSN,
                AttrMask::MAX_DEST_RD_ATOMIC,
                AttrMask::MIN_RNR_TIMER,
            ]
            .into_iter()
            .filter(|&x| x != m)
            .fold(AttrMask::NONE, |acc, x| acc | x);
        assert_eq!(d.modify_qp(q, &r, mask), Err(Error::MissingAttr(name)));
    }
    assert_eq!(
        d.modify_qp(q, &r, RTR_MASK | AttrMask::TIMEOUT),
        Err(Error::UnexpectedAttr("TIMEOUT"))
    );
    let bad_rtr: [fn(&mut QpAttr); 10] = [
        |x| x.dest_qp_num = 1 << 24,
        |x| x.rq_psn = 1 << 24,
        |x| x.max_dest_rd_atomic = 17,
        |x| x.min_rnr_timer = 32,
        |x| x.ah_attr = None,
        |x| x.ah_attr.as_mut().unwrap().sgid_index = 1,
        |x| x.ah_attr.as_mut().unwrap().flow_label = 1 << 20,
        |x| x.ah_attr.as_mut().unwrap().dmac = MacAddr([1, 0, 0x5e, 0, 0, 1]),
        |x| x.ah_attr.as_mut().unwrap().dgid = "2001:db8::1".parse().unwrap(),
        |x| x.pkey_index = 3,
    ];
    for (i, f) in bad_rtr.into_iter().enumerate() {
        let mut x = r;
        f(&mut x);
        let mask = if i == 9 {
            RTR_MASK | AttrMask::PKEY_INDEX
        } else {
            RTR_MASK
        };
        assert!(
            matches!(d.modify_qp(q, &x, mask), Err(Error::InvalidAttr(_))),
            "case {i}"
        );
        assert_eq!(state(&d), Init);
    }
    d.modify_qp(q, &r, RTR_MASK).unwrap();
    assert_eq!(state(&d), Rtr);

    // RTR: still no sends.
    assert_eq!(d.post_send(q, send()), Err(Error::WrongState(Rtr)));
    assert_eq!(
        d.modify_qp(q, &to_state(Rtr), AttrMask::STATE),
        Err(Error::InvalidTransition { from: Rtr, to: Rtr })
    );
    let mut t = r;
    t.qp_state = Rts;
    t.timeout = 14;
    t.retry_cnt = 7;
    t.rnr_retry = 7;
    t.max_rd_atomic = 4;
    assert_eq!(
        d.modify_qp(q, &t, AttrMask::STATE | AttrMask::TIMEOUT),
        Err(Error::MissingAttr("RETRY_CNT"))
    );
    assert_eq!(
        d.modify_qp(q, &t, RTS_MASK | AttrMask::AV),
        Err(Error::UnexpectedAttr("AV"))
    );
    let bad_rts: [fn(&mut QpAttr); 5] = [
        |x| x.timeout = 32,
        |x| x.retry_cnt = 8,
        |x| x.rnr_retry = 8,
        |x| x.sq_psn = 1 << 24,
        |x| x.max_rd_atomic = 17,
    ];
    for f in bad_rts {
        let mut x = t;
        f(&mut x);
        assert!(matches!(
            d.modify_qp(q, &x, RTS_MASK),
            Err(Error::InvalidAttr(_))
        ));
    }
    d.modify_qp(q, &t, RTS_MASK).unwrap();
    assert_eq!(state(&d), Rts);
    d.post_send(q, send()).unwrap();

    // RTS: RTS -> RTS with optional attributes, not with others.
    d.modify_qp(
        q,
        &t,
        AttrMask::STATE | AttrMask::MIN_RNR_TIMER | AttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    assert_eq!(
        d.modify_qp(q, &t, AttrMask::STATE | AttrMask::SQ_PSN),
        Err(Error::UnexpectedAttr("SQ_PSN"))
    );
    let mut cur = t;
    cur.cur_qp_state = Rtr;
    assert!(matches!(
        d.modify_qp(q, &cur, AttrMask::STATE | AttrMask::CUR_STATE),
        Err(Error::InvalidAttr(_))
    ));
    for s in [Init, Rtr] {
        assert_eq!(
            d.modify_qp(q, &to_state(s), AttrMask::STATE),
            Err(Error::InvalidTransition { from: Rts, to: s })
        );
    }
    // SQD and back.
    d.modify_qp(q, &to_state(Sqd), AttrMask::STATE).unwrap();
    let mut s2 = t;
    s2.qp_state = Sqd;
    s2.timeout = 9;
    d.modify_qp(q, &s2, AttrMask::STATE | AttrMask::TIMEOUT)
        .unwrap();
    assert_eq!(d.query_qp(q).unwrap().1.timeout, 9);
    assert_eq!(
        d.modify_qp(q, &to_state(Rtr), AttrMask::STATE),
        Err(Error::InvalidTransition { from: Sqd, to: Rtr })
    );
    d.modify_qp(q, &to_state(Rts), AttrMask::STATE).unwrap();
    // ERR: only RESET (or ERR) next.
    d.modify_qp(q, &to_state(ERR), AttrMask::STATE).unwrap();
    for s in [Init, Rtr, Rts, Sqd] {
        assert_eq!(
            d.modify_qp(q, &to_state(s), AttrMask::STATE),
            Err(Error::InvalidTransition { from: ERR, to: s })
        );
    }
    d.modify_qp(q, &to_state(ERR), AttrMask::STATE).unwrap();
    d.modify_qp(q, &to_state(Reset), AttrMask::STATE).unwrap();
    assert_eq!(state(&d), Reset);
    let mut wcs = Vec::new();
    d.poll_cq(cq, 16, &mut wcs);
    assert!(wcs.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(wcs.len(), 2, "the posted send and receive were flushed");

    // Unknown QPs, bad resources.
    assert_eq!(d.modify_qp(0x999, &a, INIT_MASK), Err(Error::NoSuchQp));
    assert_eq!(d.post_send(0x999, send()), Err(Error::NoSuchQp));
    assert_eq!(d.post_recv(0x999, recv()), Err(Error::NoSuchQp));
    assert_eq!(d.query_qp(0x999).map(|x| x.0), Err(Error::NoSuchQp));
    assert_eq!(d.destroy_qp(0x999), Err(Error::NoSuchQp));
    assert_eq!(
        d.create_qp(PdId(99), cq, cq, QpCaps::default()),
        Err(Error::NoSuchPd)
    );
    assert_eq!(
        d.create_qp(pd, CqId(99), cq, QpCaps::default()),
        Err(Error::NoSuchCq)
    );
    assert!(d
        .create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                max_send_wr: 0,
                ..QpCaps::default()
            }
        )
        .is_err());
    assert_eq!(
        d.create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                qpn: Some(q),
                ..QpCaps::default()
            }
        ),
        Err(Error::QpnUnavailable(q))
    );
    assert_eq!(
        d.create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                qpn: Some(1 << 24),
                ..QpCaps::default()
            }
        ),
        Err(Error::QpnUnavailable(1 << 24))
    );
    assert!(d.create_cq(0).is_err());
    let bad_cfg = QpConfig {
        ack_req_every: 0,
        ..QpConfig::default()
    };
    assert!(d
        .create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                config: Some(bad_cfg),
                ..QpCaps::default()
            }
        )
        .is_err());
    assert!(d.reg_mr(MrSpec::new(pd, 8, Access::REMOTE_WRITE)).is_err());
    assert_eq!(
        d.reg_mr(MrSpec::new(PdId(99), 8, Access::NONE)),
        Err(Error::NoSuchPd)
    );
    assert!(d
        .reg_mr(MrSpec {
            pd,
            len: 8,
            access: Access::NONE,
            addr: None,
            key: Some(mr.lkey)
        })
        .is_err());
}

#[test]
fn posting_limits() {
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 2,
        ..QpCaps::default()
    };
    let mut p = Pair::new(Opts {
        caps_a: caps,
        ..Opts::default()
    });
    p.set_filter(|_| Fate::Drop);
    let qa = p.a.qp;
    let op = SendOp::FetchAdd {
        remote_addr: 0,
        rkey: 0,
        add: 1,
    };
    assert!(matches!(
        p.a.dev.post_send(qa, wr(4, op, vec![p.a.sge(0, 4)])),
        Err(Error::InvalidArgument(_))
    ));
    let s = p.a.sge(0, 8);
    p.a.post(wr(1, SendOp::Send, vec![s]));
    p.a.post(wr(2, SendOp::Send, vec![s]));
    assert_eq!(
        p.a.dev.post_send(qa, wr(3, SendOp::Send, vec![s])),
        Err(Error::QueueFull)
    );
    p.a.recv(1, vec![s]);
    p.a.recv(2, vec![s]);
    assert_eq!(
        p.a.dev.post_recv(
            qa,
            RecvWr {
                wr_id: 3,
                sges: smallvec::smallvec![s]
            }
        ),
        Err(Error::QueueFull)
    );
}

#[test]
fn reset_and_reconnect_after_an_error() {
    let mut p = Pair::new(Opts::default());
    p.a.post(wr(
        1,
        SendOp::Write {
            remote_addr: 0,
            rkey: 0xBAD00,
        },
        vec![p.a.sge(0, 8)],
    ));
    p.settle();
    assert_eq!(p.a.sent_status(), [(1, WcStatus::RemAccessErr)]);
    reconnect(&mut p, 777, 999);
    p.a.fill(0, b"again");
    p.a.post(wr(
        2,
        SendOp::Write {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 5)],
    ));
    p.settle();
    assert_eq!(p.a.sent_status()[1..], [(2, WcStatus::Success)]);
    assert_eq!(p.b.mem(0, 5), b"again");
    assert_eq!(p.from(Side::A).last().unwrap().psn, 777);
}

#[test]
fn err_flushes_a_partly_received_send() {
    let mut p = Pair::new(Opts::default());
    for i in 0..3 {
        let sge = p.b.sge(i * 4096, 4096);
        p.b.recv(10 + i, vec![sge]);
    }
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 3000)]));
    // The LAST packet never arrives.
    p.set_filter(|s| {
        if s.is(Op::SendLast) {
            Fate::Drop
        } else {
            Fate::Pass
        }
    });
    assert_eq!(p.run(Duration::from_micros(50)), Stop::Limit);
    assert_eq!(
        p.b.dev.recv_queue_len(p.b.qp),
        2,
        "the first receive is in use"
    );
    let qb = p.b.qp;
    p.b.dev
        .modify_qp(qb, &to_state(QpState::Err), AttrMask::STATE)
        .unwrap();
    p.b.poll();
    let r: Vec<(u64, WcStatus)> = p.b.recvd.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        r,
        [
            (10, WcStatus::WrFlushErr),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.b.c().resp_cqe_flush_error, 3);
}

#[test]
fn solicited_event_bit_and_ecn_marks() {
    let mut p = Pair::new(Opts::default());
    for i in 0..2 {
        let sge = p.b.sge(i * 4096, 4096);
        p.b.recv(i, vec![sge]);
    }
    let mut x = wr(1, SendOp::Send, vec![p.a.sge(0, 3000)]);
    x.solicited = true;
    p.a.post(x);
    // The network marks every request CE.
    p.set_filter(|s| {
        if s.from == Side::A {
            Fate::Replace(reemit(&s.bytes, |r| r.ip.set_ecn(ferroce::wire::Ecn::Ce)))
        } else {
            Fate::Pass
        }
    });
    p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 10)]));
    p.settle();
    all_ok(&p.a.sent, 2);
    let se: Vec<bool> = p
        .from(Side::A)
        .map(|s| Frame::parse(&s.bytes).unwrap().bth().solicited)
        .collect();
    assert_eq!(se, [false, false, true, false]);
    assert_eq!(p.b.c().np_ecn_marked_roce_packets, 4);
}

#[test]
fn sqd_drains_the_message_in_flight_and_reports_it() {
    let cfg = QpConfig {
        ack_req_every: 4,
        max_inflight: 4,
        ack_every: 0,
        ..QpConfig::default()
    };
    let o = Opts {
        caps_a: QpCaps {
            config: Some(cfg),
            ..QpCaps::default()
        },
        ..Opts::default()
    };
    let mut p = Pair::new(o);
    for i in 0..4 {
        let sge = p.b.sge(i * 16384, 16384);
        p.b.recv(i, vec![sge]);
    }
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 10 * 1024)]));
    p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 100)]));
    p.a.post(wr(
        3,
        SendOp::Read {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(100_000, 100)],
    ));
    // After the first window of four packets: SQD.
    let stop = p.run_until(Duration::from_secs(1), |p| {
        assert_eq!(p.from(Side::A).count(), 4);
        let mut x = to_state(QpState::Sqd);
        x.en_sqd_async_notify = true;
        let qa = p.a.qp;
        p.a.dev
            .modify_qp(qa, &x, AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY)
            .unwrap();
        true
    });
    assert_eq!(stop, Stop::Cond);
    // Posting is allowed in SQD.
    p.a.post(wr(4, SendOp::Send, vec![p.a.sge(0, 10)]));
    p.settle();
    assert_eq!(
        p.a.sent_status(),
        [(1, WcStatus::Success)],
        "the started message finishes"
    );
    assert_eq!(p.from(Side::A).count(), 10, "no new message starts");
    assert_eq!(p.a.dev.send_queue_len(p.a.qp), 3);
    assert_eq!(p.a.events(), [Event::SqDrained { qpn: p.a.qp }]);
    assert_eq!(p.a.state(), QpState::Sqd);
    let qa = p.a.qp;
    p.a.dev
        .modify_qp(qa, &to_state(QpState::Rts), AttrMask::STATE)
        .unwrap();
    p.settle();
    all_ok(&p.a.sent, 4);
    assert_eq!(p.a.sent_ids(), [1, 2, 3, 4]);
    assert_eq!(p.a.events(), []);
    // SQD with nothing outstanding drains at once.
    p.a.dev
        .modify_qp(qa, &to_state(QpState::Sqd), AttrMask::STATE)
        .unwrap();
    p.settle();
    assert_eq!(p.a.events(), [Event::SqDrained { qpn: qa }]);
}

// ===========================================================================
// Duplicates.

#[test]
fn duplicated_requests_are_answered_not_executed_twice() {
    let mut p = Pair::new(Opts::default());
    p.set_filter(|s| {
        if s.from == Side::A {
            Fate::Dup
        } else {
            Fate::Pass
        }
    });
    let data = pattern(50, 4096);
    p.a.fill(0, &data);
    p.b.fill(8192, &data);
    for i in 0..2 {
        let sge = p.b.sge(20_000 + i * 4096, 4096);
        p.b.recv(i, vec![sge]);
    }
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 3000)]));
    p.a.post(wr(
        2,
        SendOp::Write {
            remote_addr: p.b.addr(40_000),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 3000)],
    ));
    p.a.post(wr(
        3,
        SendOp::Read {
            remote_addr: p.b.addr(8192),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(50_000, 3000)],
    ));
    let ra = p.b.addr(64);
    p.a.post(wr(
        4,
        SendOp::FetchAdd {
            remote_addr: ra,
            rkey: p.b.rkey(),
            add: 1,
        },
        vec![p.a.sge(60_000, 8)],
    ));
    p.a.post(wr(
        5,
        SendOp::CompareSwap {
            remote_addr: ra,
            rkey: p.b.rkey(),
            compare: 1,
            swap: 9,
        },
        vec![p.a.sge(60_008, 8)],
    ));
    p.a.post(wr(6, SendOp::SendWithImm(6), vec![p.a.sge(0, 10)]));
    p.settle();
    all_ok(&p.a.sent, 6);
    assert_eq!(p.b.recvd.len(), 2);
    assert_eq!(p.b.mem(20_000, 3000), data[..3000]);
    assert_eq!(p.b.mem(40_000, 3000), data[..3000]);
    assert_eq!(p.a.mem(50_000, 3000), data[..3000]);
    assert_eq!(
        (p.a.word(60_000), p.a.word(60_008), p.b.word(64)),
        (0, 1, 9)
    );
    let cb = p.b.c();
    let reqs = p.from(Side::A).count() as u64;
    assert_eq!(cb.duplicate_request, reqs, "every copy is a duplicate");
    assert_eq!(
        (
            cb.rdma_recvs,
            cb.rx_write_requests,
            cb.rx_read_requests,
            cb.rx_atomic_requests
        ),
        (2, 1, 1, 2)
    );
    assert!(p.a.c().ghost_responses > 0);
    p.check_accounting();
}

#[test]
fn duplicate_send_is_reacked_not_reexecuted() {
    let mut p = Pair::new(Opts::default());
    let sge = p.b.sge(0, 4096);
    p.b.recv(1, vec![sge]);
    let sge = p.b.sge(4096, 4096);
    p.b.recv(2, vec![sge]);
    p.set_filter(drop_first(|s| s.is_ack()));
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 3000)]));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.recvd.len(), 1, "executed once");
    assert_eq!(p.b.dev.recv_queue_len(p.b.qp), 1, "one receive consumed");
    let last = 0x100 + 2;
    let acks: Vec<u32> = p
        .from(Side::B)
        .filter(|s| s.is_ack())
        .map(|s| s.psn)
        .collect();
    assert!(
        acks.len() >= 2 && acks.iter().all(|&a| a == last),
        "{acks:?}"
    );
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!(ca.local_ack_timeout_err, 1);
    assert_eq!(cb.duplicate_request, 3, "the whole message came again");
    assert_eq!(cb.rdma_recvs, 1);
}

#[test]
fn duplicate_atomic_is_replayed_not_reexecuted() {
    let mut p = Pair::new(Opts::default());
    p.b.fill(64, &100u64.to_le_bytes());
    p.set_filter(drop_first(|s| s.is(Op::AtomicAcknowledge)));
    let ra = p.b.addr(64);
    p.a.post(wr(
        1,
        SendOp::FetchAdd {
            remote_addr: ra,
            rkey: p.b.rkey(),
            add: 5,
        },
        vec![p.a.sge(0, 8)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!((p.a.word(0), p.b.word(64)), (100, 105));
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!(
        (
            ca.local_ack_timeout_err,
            cb.duplicate_request,
            cb.rx_atomic_requests
        ),
        (1, 1, 1)
    );
    // A compare-and-swap that would not match a second time.
    p.a.post(wr(
        2,
        SendOp::CompareSwap {
            remote_addr: ra,
            rkey: p.b.rkey(),
            compare: 105,
            swap: 7,
        },
        vec![p.a.sge(8, 8)],
    ));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!((p.a.word(8), p.b.word(64)), (105, 7));
    assert_eq!(
        (p.b.c().duplicate_request, p.b.c().rx_atomic_requests),
        (2, 2)
    );
    // The retried request and the replayed answer are on the wire.
    let acks: Vec<u64> = p
        .from(Side::B)
        .filter(|s| s.is(Op::AtomicAcknowledge))
        .map(|s| Frame::parse(&s.bytes).unwrap().ext().atomic_ack.unwrap())
        .collect();
    assert_eq!(acks, [100, 100, 105, 105]);
}

#[test]
fn duplicate_read_is_reexecuted_from_where_it_was_lost() {
    let mut p = Pair::new(Opts::default());
    let data = pattern(51, 5000);
    p.b.fill(1000, &data);
    let read_psn = 0x100;
    p.set_filter(drop_first(move |s| {
        s.is_read_resp() && s.psn == read_psn + 1
    }));
    p.a.post(wr(
        1,
        SendOp::Read {
            remote_addr: p.b.addr(1000),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 5000)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.a.mem(0, 5000), data);
    let reqs: Vec<(u32, RethRepr)> = p.from(Side::A).map(|s| (s.psn, s.reth.unwrap())).collect();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].0, read_psn + 1);
    assert_eq!(reqs[1].1.va, p.b.addr(1000 + 1024));
    assert_eq!(reqs[1].1.dma_len, 5000 - 1024);
    // Answered again from the middle: MIDDLE .. LAST.
    let resp: Vec<Opcode> = p.from(Side::B).skip(5).map(|s| s.op).collect();
    assert_eq!(resp, read_resp_ops(5)[1..]);
    let (ca, cb) = (p.a.c(), p.b.c());
    assert!(ca.implied_nak_seq_err >= 1);
    assert_eq!((cb.duplicate_request, cb.rx_read_requests), (1, 1));

    // Every response lost: the whole READ is asked again after the timer
    // and answered from the start, reading the memory again.
    let mut p = Pair::new(Opts::default());
    p.b.fill(1000, &data);
    let lost = Rc::new(Cell::new(0));
    let l = lost.clone();
    p.set_filter(move |s| {
        if s.is_read_resp() && l.get() < 5 {
            l.set(l.get() + 1);
            Fate::Drop
        } else {
            Fate::Pass
        }
    });
    p.a.post(wr(
        1,
        SendOp::Read {
            remote_addr: p.b.addr(1000),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 5000)],
    ));
    assert!(
        p.wait(Duration::from_secs(1), |p| p.b.c().rx_read_requests == 1
            && p.from(Side::B).count() == 5)
    );
    // Changed in between: the answer to the duplicate reads it anew.
    p.b.fill(1000, &data[..10].iter().map(|b| !b).collect::<Vec<_>>());
    p.settle();
    all_ok(&p.a.sent, 1);
    let mut want = data.clone();
    want[..10].iter_mut().for_each(|b| *b = !*b);
    assert_eq!(p.a.mem(0, 5000), want);
    assert_eq!(p.a.c().local_ack_timeout_err, 1);
    let resp: Vec<Opcode> = p.from(Side::B).skip(5).map(|s| s.op).collect();
    assert_eq!(resp, read_resp_ops(5));
}

#[test]
fn a_responder_still_answering_an_earlier_read_keeps_the_timer_back() {
    // As rxe does: a responder answers a re-issued READ only after it has
    // sent every response of the READ it was answering. While that stream
    // lasts longer than the local ACK timeout, the requester must not
    // spend its retries on a peer that is plainly alive (live rxe: a 1 MiB
    // READ with one response lost took 200 ms to drain, three timeouts).
    let o = Opts {
        timeout: 10, // 4.2 ms
        retry_cnt: 2,
        ..Opts::default()
    };
    let mut p = Pair::new(o);
    let data = pattern(53, 20 * 1024);
    p.b.fill(0, &data);
    let read_psn = 0x100;
    // Responses leave one a millisecond, in the order they were made: the
    // re-issued READ's answer waits behind the first one's.
    let mut k = 0u64;
    let mut lost = false;
    p.set_filter(move |s| {
        if !s.is_read_resp() {
            return Fate::Pass;
        }
        if s.psn == read_psn + 1 && !lost {
            lost = true;
            return Fate::Drop;
        }
        k += 1;
        Fate::Delay(Duration::from_millis(k))
    });
    p.a.post(wr(
        1,
        SendOp::Read {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 20 * 1024)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.a.mem(0, 20 * 1024), data);
    let ca = p.a.c();
    assert_eq!(ca.local_ack_timeout_err, 0, "{ca:?}");
    assert_eq!(
        p.from(Side::A)
            .filter(|s| s.is(Op::RdmaReadRequest))
            .count(),
        2,
        "the READ and one re-issue from the lost response"
    );
}

#[test]
fn an_ack_overtaking_read_responses_retries_the_read() {
    // READ then WRITE: the WRITE's ACK overtakes the READ's responses
    // (implied NAK, mlx5 implied_nak_seq_err). The READ is asked again and
    // the late responses are ignored.
    let mut p = Pair::new(Opts::default());
    let data = pattern(52, 3000);
    p.b.fill(0, &data);
    let late = Duration::from_micros(20);
    let mut n = 0;
    p.set_filter(move |s| {
        if s.is_read_resp() && n < 3 {
            n += 1;
            Fate::Delay(late)
        } else {
            Fate::Pass
        }
    });
    p.a.post(wr(
        1,
        SendOp::Read {
            remote_addr: p.b.addr(0),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(0, 3000)],
    ));
    p.a.post(wr(
        2,
        SendOp::Write {
            remote_addr: p.b.addr(8192),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(4096, 100)],
    ));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!(p.a.sent_ids(), [1, 2]);
    assert_eq!(p.a.mem(0, 3000), data);
    let (ca, cb) = (p.a.c(), p.b.c());
    assert!(ca.implied_nak_seq_err >= 1);
    assert!(ca.ghost_responses >= 1, "the late responses are ignored");
    assert_eq!((cb.rx_read_requests, cb.rx_write_requests), (1, 1));
    assert_eq!(
        p.from(Side::A)
            .filter(|s| s.is(Op::RdmaReadRequest))
            .count(),
        2
    );
}

#[test]
fn an_ack_overtaking_an_atomic_ack_replays_the_atomic() {
    let mut p = Pair::new(Opts::default());
    p.b.fill(64, &41u64.to_le_bytes());
    let mut n = 0;
    p.set_filter(move |s| {
        if s.is(Op::AtomicAcknowledge) && n == 0 {
            n += 1;
            Fate::Delay(Duration::from_micros(20))
        } else {
            Fate::Pass
        }
    });
    let op = SendOp::FetchAdd {
        remote_addr: p.b.addr(64),
        rkey: p.b.rkey(),
        add: 1,
    };
    p.a.post(wr(1, op, vec![p.a.sge(0, 8)]));
    p.a.post(wr(
        2,
        SendOp::Write {
            remote_addr: p.b.addr(8192),
            rkey: p.b.rkey(),
        },
        vec![p.a.sge(4096, 100)],
    ));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!((p.a.word(0), p.b.word(64)), (41, 42));
    assert_eq!(p.b.c().rx_atomic_requests, 1);
    assert!(p.a.c().implied_nak_seq_err >= 1);
}

/// Each frame, either way, may be lost, duplicated or held back for up to
/// five local ACK timeouts, so that stale copies of requests, responses
/// and NAKs arrive long after the retries they caused: every message still
/// completes once, in order, with its data.
#[test]
fn random_faults_with_stale_frames() {
    for seed in 0..40u64 {
        let mut rng = Rng::new(seed);
        let mtu = Mtu::ALL[seed as usize % 5];
        let m = mtu.bytes() as usize;
        let o = Opts {
            timeout: 8,
            mr_len: 1 << 20,
            psn_a: PSN_MOD - 1 - rng.below(100) as u32,
            ..Opts::default()
        }
        .mtu(mtu);
        let mut p = Pair::new(o);
        let mut f = Rng::new(seed + 1000);
        p.set_filter(move |_| {
            let x = f.below(100);
            if x < 5 {
                Fate::Drop
            } else if x < 10 {
                Fate::Dup
            } else if x < 20 {
                Fate::Delay(Duration::from_nanos(f.below(5 << 20)))
            } else {
                Fate::Pass
            }
        });
        p.b.fill(600 * 1024, &pattern(seed, 256 * 1024));
        let mut sends = Vec::new();
        let mut checks = Vec::new();
        let mut adds = 0;
        for i in 0..40u64 {
            let len = match rng.below(3) {
                0 => rng.below(3 * m as u64 + 2) as usize,
                _ => ((1 + rng.below(3) as usize) * m + rng.below(3) as usize).saturating_sub(1),
            };
            let slot = i as usize * 13 * 1024;
            let data = rng.bytes(len);
            p.a.fill(slot, &data);
            let s = p.a.sge(slot as u64, len as u32);
            let op = match rng.below(4) {
                0 => {
                    let r = p.b.sge(slot as u64, len as u32);
                    p.b.recv(i, vec![r]);
                    sends.push((i, slot, data));
                    SendOp::Send
                }
                1 => {
                    checks.push((slot, data));
                    SendOp::Write {
                        remote_addr: p.b.addr(slot as u64),
                        rkey: p.b.rkey(),
                    }
                }
                2 => {
                    let from = 600 * 1024 + rng.below(200 * 1024) as usize;
                    let want = p.b.mem(from, len);
                    checks.push((usize::MAX - slot, want));
                    SendOp::Read {
                        remote_addr: p.b.addr(from as u64),
                        rkey: p.b.rkey(),
                    }
                }
                _ => {
                    adds += 1;
                    let op = SendOp::FetchAdd {
                        remote_addr: p.b.addr(1000 * 1024),
                        rkey: p.b.rkey(),
                        add: 1,
                    };
                    p.a.post(wr(i, op, vec![p.a.sge(slot as u64, 8)]));
                    continue;
                }
            };
            p.a.post(wr(i, op, vec![s]));
        }
        p.settle();
        all_ok(&p.a.sent, 40);
        assert_eq!(p.a.sent_ids(), (0..40).collect::<Vec<_>>(), "seed {seed}");
        let got: Vec<u64> = p.b.recvd.iter().map(|w| w.wr_id).collect();
        assert_eq!(
            got,
            sends.iter().map(|s| s.0).collect::<Vec<_>>(),
            "seed {seed}"
        );
        for (w, (_, slot, data)) in p.b.recvd.iter().zip(&sends) {
            assert_eq!(w.status, WcStatus::Success);
            assert!(p.b.mem(*slot, data.len()) == *data, "seed {seed}: SEND");
        }
        for (at, want) in checks {
            if at > usize::MAX / 2 {
                assert!(
                    p.a.mem(usize::MAX - at, want.len()) == want,
                    "seed {seed}: READ"
                );
            } else {
                assert!(p.b.mem(at, want.len()) == want, "seed {seed}: WRITE");
            }
        }
        assert_eq!(p.b.word(1000 * 1024), adds, "seed {seed}: each add once");
        p.check_accounting();
    }
}

// ===========================================================================
// Bad input to Device::handle.

/// A pair that has exchanged one SEND each way (so frames of both kinds
/// are at hand), and those frames.
fn pair_with_frames() -> (Pair, Vec<u8>, Vec<u8>) {
    let mut p = Pair::new(Opts::default());
    let sge = p.b.sge(0, 64);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 21)]));
    p.settle();
    all_ok(&p.a.sent, 1);
    let req = p.from(Side::A).next().unwrap().bytes.clone();
    let ack = p.from(Side::B).next().unwrap().bytes.clone();
    (p, req, ack)
}

fn reemit(bytes: &[u8], f: impl FnOnce(&mut FrameRepr)) -> Vec<u8> {
    let fr = Frame::parse(bytes).unwrap();
    let mut r = fr.repr();
    f(&mut r);
    let mut buf = vec![0u8; 9216];
    let n = r.emit(fr.payload, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn bad_frames_are_counted_and_dropped() {
    let (mut p, req, ack) = pair_with_frames();
    let now = p.now;
    let pd = p.b.pd;
    let other =
        p.b.dev
            .create_qp(pd, p.b.scq, p.b.rcq, QpCaps::default())
            .unwrap();
    let cnp = {
        let marked = Frame::parse(&ack).unwrap().repr();
        let mut buf = vec![0u8; 256];
        let n = FrameRepr::cnp(&marked, p.b.qp, 48)
            .emit(&[], &mut buf)
            .unwrap();
        buf.truncate(n);
        buf
    };
    let mut bad_icrc = req.clone();
    *bad_icrc.last_mut().unwrap() ^= 1;
    let mut flipped = req.clone();
    let at = flipped.len() - 10;
    flipped[at] ^= 0x10;
    // A flip in a header byte the ICRC covers and no other check does:
    // one that varies per packet (the PSN), one every packet of the QP
    // keeps (the UDP source port).
    let flip = |at: usize| {
        let mut f = req.clone();
        f[at] ^= 0x01;
        f
    };
    let (psn_flipped, sport_flipped) = (flip(14 + 20 + 8 + 11), flip(14 + 21));
    let mut arp = req.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "malformed"),
        ("ethernet only", req[..14].to_vec(), "malformed"),
        ("cut in the IP header", req[..20].to_vec(), "malformed"),
        ("cut in the BTH", req[..50].to_vec(), "malformed"),
        (
            "cut before the ICRC",
            req[..req.len() - 6].to_vec(),
            "malformed",
        ),
        ("wrong ICRC", bad_icrc, "icrc"),
        ("payload bit flipped", flipped, "icrc"),
        ("PSN bit flipped", psn_flipped, "icrc"),
        ("UDP source port bit flipped", sport_flipped, "icrc"),
        ("not RoCE", arp, "not_roce"),
        (
            "unknown QP",
            reemit(&req, |r| r.bth.dest_qp = 0x999),
            "unknown_qp",
        ),
        ("wrong P_Key", reemit(&req, |r| r.bth.pkey = 0x1234), "pkey"),
        (
            "wrong source",
            reemit(&req, |r| {
                if let IpRepr::V4(ip) = &mut r.ip {
                    ip.src = "198.18.0.99".parse().unwrap();
                }
            }),
            "source",
        ),
        (
            "not our address",
            reemit(&req, |r| {
                if let IpRepr::V4(ip) = &mut r.ip {
                    ip.dst = "198.18.0.77".parse().unwrap();
                }
            }),
            "destination",
        ),
        (
            "QP in INIT",
            reemit(&req, |r| r.bth.dest_qp = other),
            "state",
        ),
        (
            "UC opcode",
            reemit(&req, |r| r.bth.opcode = Opcode::uc(Op::SendOnly)),
            "transport",
        ),
        ("CNP", cnp, "cnp"),
    ];
    // Reset ("QP in INIT" needs INIT): bring `other` to INIT.
    let mut init = to_state(QpState::Init);
    init.qp_access_flags = REMOTE_ALL;
    p.b.dev.modify_qp(other, &init, INIT_MASK).unwrap();
    let sge = p.b.sge(0, 64);
    p.b.recv(2, vec![sge]);
    for (name, frame, what) in cases {
        let rx0 = *p.b.dev.rx_counters();
        let c0 = p.b.dev.counters();
        p.b.dev.handle(now, &frame);
        let rx = *p.b.dev.rx_counters();
        let c = p.b.dev.counters();
        let delta = |a: u64, b: u64| a - b;
        let got = match what {
            "malformed" => delta(rx.malformed, rx0.malformed),
            "icrc" => delta(rx.icrc_errors, rx0.icrc_errors),
            "not_roce" => delta(rx.not_roce, rx0.not_roce),
            "unknown_qp" => delta(rx.unknown_qp, rx0.unknown_qp),
            "destination" => delta(rx.wrong_destination, rx0.wrong_destination),
            "transport" => delta(rx.unsupported_transport, rx0.unsupported_transport),
            "cnp" => delta(rx.cnp_received, rx0.cnp_received),
            "pkey" => delta(c.pkey_violation, c0.pkey_violation),
            "source" => delta(c.wrong_source, c0.wrong_source),
            "state" => delta(c.state_drops, c0.state_drops),
            _ => unreachable!(),
        };
        assert_eq!(got, 1, "{name}");
        assert_eq!(rx.frames, rx0.frames + 1);
        assert_eq!(c.rcvd_pkts, c0.rcvd_pkts, "{name} reached a QP");
        let mut buf = vec![0u8; 9216];
        assert_eq!(
            p.b.dev.poll_transmit(now, &mut buf),
            None,
            "{name} was answered"
        );
        p.b.poll();
        assert_eq!(p.b.recvd.len(), 1, "{name} completed something");
    }
    assert_eq!(p.b.dev.recv_queue_len(p.b.qp), 1);
    p.check_accounting();
    // The connection still works.
    p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 21)]));
    p.settle();
    all_ok(&p.a.sent, 2);
}

/// Flips bytes of a frame (mostly in its transport headers) and, most of
/// the time, makes its ICRC right again so the transport sees it.
fn mutate(rng: &mut Rng, f: &[u8]) -> Vec<u8> {
    let mut b = f.to_vec();
    let n = b.len();
    for _ in 0..1 + rng.below(3) {
        let at = if rng.chance(0.7) {
            42 + rng.below((n - 46).min(48) as u64) as usize
        } else {
            14 + rng.below((n - 18) as u64) as usize
        };
        if rng.chance(0.5) {
            b[at] ^= 1 << rng.below(8);
        } else {
            b[at] = rng.next() as u8;
        }
    }
    if rng.chance(0.2) {
        let cut = rng.below(n as u64) as usize;
        b.truncate(cut);
    } else if rng.chance(0.9) {
        let _ = seal(&mut b, 14);
    }
    b
}

/// Mutated frames, resealed so they pass the ICRC, fed into live
/// connections: no panic, every frame accounted for, and every posted
/// work request still completes (in success or in error).
#[test]
fn mutated_frames_never_panic_or_hang() {
    let mut rng = Rng::new(0xF022);
    for round in 0..60u64 {
        let o = Opts {
            rnr_retry: 6,
            timeout: 8,
            ..Opts::default()
        }
        .mtu(Mtu::ALL[round as usize % 5]);
        let mut p = Pair::new(o);
        p.a.fill(0, &pattern(round, 16384));
        p.b.fill(0, &pattern(round + 1, 16384));
        for i in 0..4 {
            let sge = p.b.sge(32768 + i * 4096, 4096);
            p.b.recv(i, vec![sge]);
        }
        let ops = [
            SendOp::Send,
            SendOp::Write {
                remote_addr: p.b.addr(65536),
                rkey: p.b.rkey(),
            },
            SendOp::Read {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
            },
            SendOp::FetchAdd {
                remote_addr: p.b.addr(8),
                rkey: p.b.rkey(),
                add: 1,
            },
            SendOp::SendWithImm(9),
            SendOp::CompareSwap {
                remote_addr: p.b.addr(16),
                rkey: p.b.rkey(),
                compare: 0,
                swap: 1,
            },
            SendOp::WriteWithImm {
                remote_addr: p.b.addr(70000),
                rkey: p.b.rkey(),
                imm: 1,
            },
        ];
        let mut posted = 0;
        for (i, op) in ops.into_iter().enumerate() {
            let len = if op.is_atomic() {
                8
            } else {
                1 + rng.below(3000) as u32
            };
            p.a.post(wr(
                i as u64,
                op,
                vec![p.a.sge(100_000 + i as u64 * 4096, len)],
            ));
            posted += 1;
        }
        let mut r = Rng::new(round * 7 + 1);
        p.set_filter(move |s| {
            if r.chance(0.3) {
                Fate::Replace(mutate(&mut r, &s.bytes))
            } else {
                Fate::Pass
            }
        });
        assert_eq!(
            p.run(Duration::from_secs(60)),
            Stop::Idle,
            "round {round} hangs"
        );
        p.poll();
        assert_eq!(p.a.sent.len(), posted, "round {round}: {:?}", p.a.sent);
        p.check_accounting();
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Random bytes, and random bytes behind a valid RoCE v2 header,
        /// are counted and dropped: no panic, no completion, no answer.
        #[test]
        fn random_bytes_are_dropped(bytes in proptest::collection::vec(any::<u8>(), 0..1200), behind_header in any::<bool>()) {
            let (mut p, req, _) = pair_with_frames();
            let frame = if behind_header && bytes.len() >= 16 {
                // Keep Ethernet / IP / UDP, randomise the BTH onwards, fix
                // the lengths and the ICRC.
                let mut f = req[..42].to_vec();
                f.extend_from_slice(&bytes);
                let ip_len = (f.len() - 14) as u16;
                f[16..18].copy_from_slice(&ip_len.to_be_bytes());
                f[24..26].copy_from_slice(&[0, 0]);
                let sum = ipv4_checksum(&f[14..34]);
                f[24..26].copy_from_slice(&sum.to_be_bytes());
                let udp_len = (f.len() - 34) as u16;
                f[38..40].copy_from_slice(&udp_len.to_be_bytes());
                let _ = seal(&mut f, 14);
                f
            } else {
                bytes
            };
            let now = p.now;
            p.b.dev.handle(now, &frame);
            p.a.dev.handle(now, &frame);
            p.check_accounting();
            // Whatever it was, the pair still settles and works.
            p.settle();
            prop_assert_eq!(p.b.recvd.len(), 1);
        }
    }

    /// One verb with random arguments.
    #[derive(Debug, Clone)]
    enum Verb {
        Modify { state: u8, mask: u32, v: [u32; 6] },
        Send(u8, u32),
        Recv(u32),
        Poll,
    }

    fn verb() -> impl Strategy<Value = Verb> {
        prop_oneof![
            4 => (0u8..8, any::<u32>(), any::<[u32; 6]>()).prop_map(|(state, mask, v)| Verb::Modify { state, mask, v }),
            1 => (0u8..8, 0u32..5000).prop_map(|(o, l)| Verb::Send(o, l)),
            1 => (0u32..5000).prop_map(Verb::Recv),
            1 => Just(Verb::Poll),
        ]
    }

    /// The attributes whose bit is set in `bits` (STATE more often than not).
    fn mask_of(bits: u32) -> AttrMask {
        const ALL: [AttrMask; 19] = [
            AttrMask::STATE,
            AttrMask::CUR_STATE,
            AttrMask::EN_SQD_ASYNC_NOTIFY,
            AttrMask::ACCESS_FLAGS,
            AttrMask::PKEY_INDEX,
            AttrMask::PORT,
            AttrMask::AV,
            AttrMask::PATH_MTU,
            AttrMask::TIMEOUT,
            AttrMask::RETRY_CNT,
            AttrMask::RNR_RETRY,
            AttrMask::RQ_PSN,
            AttrMask::MAX_QP_RD_ATOMIC,
            AttrMask::ALT_PATH,
            AttrMask::MIN_RNR_TIMER,
            AttrMask::SQ_PSN,
            AttrMask::MAX_DEST_RD_ATOMIC,
            AttrMask::PATH_MIG_STATE,
            AttrMask::DEST_QPN,
        ];
        let mut m = if bits & (3 << 30) != 0 {
            AttrMask::STATE
        } else {
            AttrMask::NONE
        };
        for (i, x) in ALL.into_iter().enumerate() {
            if bits & (1 << i) != 0 {
                m = m | x;
            }
        }
        m
    }

    fn state_of(n: u8) -> QpState {
        [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ][n as usize % 7]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any sequence of verbs with any attributes: errors, never a
        /// panic; a refused modify changes nothing; the device keeps
        /// answering.
        #[test]
        fn random_verbs_never_panic(verbs in proptest::collection::vec(verb(), 1..40)) {
            let mut d = Device::new(DeviceConfig::new(MAC_A, ip_a())).unwrap();
            let pd = d.alloc_pd();
            let cq = d.create_cq(8).unwrap();
            let mr = d.reg_mr(MrSpec::new(pd, 8192, Access::ALL)).unwrap();
            let q = d.create_qp(pd, cq, cq, QpCaps { max_send_wr: 8, max_recv_wr: 8, ..QpCaps::default() }).unwrap();
            let mut now = Instant::ZERO;
            let mut buf = vec![0u8; 9216];
            for v in verbs {
                match v {
                    Verb::Modify { state, mask, v } => {
                        let mut a = to_state(state_of(state));
                        a.cur_qp_state = state_of(v[0] as u8);
                        a.pkey_index = (v[0] >> 8) as u16 % 3;
                        a.port_num = (v[0] >> 16) as u8 % 3;
                        a.qp_access_flags = Access::from_bits(v[1]);
                        a.path_mtu = Mtu::ALL[v[1] as usize % 5];
                        a.dest_qp_num = v[2] >> (v[2] % 9);
                        a.rq_psn = v[3] >> (v[3] % 9);
                        a.sq_psn = v[3].rotate_left(7) >> (v[3] % 9);
                        a.max_dest_rd_atomic = v[4] as u8 % 20;
                        a.max_rd_atomic = (v[4] >> 8) as u8 % 20;
                        a.min_rnr_timer = (v[4] >> 16) as u8 % 40;
                        a.timeout = (v[4] >> 24) as u8 % 40;
                        a.retry_cnt = v[5] as u8 % 10;
                        a.rnr_retry = (v[5] >> 8) as u8 % 10;
                        a.en_sqd_async_notify = v[5] & (1 << 20) != 0;
                        if v[5] & (1 << 21) != 0 {
                            let mut av = av(ip_b(), MAC_B);
                            av.sgid_index = (v[5] >> 22) as u8 % 3;
                            av.flow_label = v[2] >> 10;
                            if v[5] & (1 << 30) != 0 {
                                av.dgid = "2001:db8::2".parse().unwrap();
                            }
                            a.ah_attr = Some(av);
                        }
                        let before = d.query_qp(q).unwrap();
                        let m = mask_of(mask);
                        let r = d.modify_qp(q, &a, m);
                        if r.is_err() {
                            prop_assert_eq!(d.query_qp(q).unwrap(), before);
                        } else {
                            let want = if m.contains(AttrMask::STATE) { a.qp_state } else { before.0 };
                            prop_assert_eq!(d.query_qp(q).unwrap().0, want);
                        }
                    }
                    Verb::Send(o, l) => {
                        let rk = mr.rkey;
                        let op = match o % 7 {
                            0 => SendOp::Send,
                            1 => SendOp::Write { remote_addr: 0, rkey: rk },
                            2 => SendOp::Read { remote_addr: 0, rkey: rk },
                            3 => SendOp::FetchAdd { remote_addr: 0, rkey: rk, add: 1 },
                            4 => SendOp::SendWithImm(l),
                            5 => SendOp::CompareSwap { remote_addr: 0, rkey: rk, compare: 0, swap: 1 },
                            _ => SendOp::SendWithInv(rk),
                        };
                        let len = if op.is_atomic() { 8 } else { l.min(8192) };
                        let _ = d.post_send(q, wr(1, op, vec![Sge { addr: mr.addr, length: len, lkey: mr.lkey }]));
                    }
                    Verb::Recv(l) => {
                        let _ = d.post_recv(q, RecvWr { wr_id: 2, sges: smallvec::smallvec![Sge { addr: mr.addr, length: l, lkey: mr.lkey }] });
                    }
                    Verb::Poll => {
                        let mut w = Vec::new();
                        d.poll_cq(cq, 16, &mut w);
                    }
                }
                // Let time pass: transmit, fire timers.
                while d.poll_transmit(now, &mut buf).is_some() {}
                if let Some(t) = d.poll_timeout() {
                    now = now.max(t);
                    d.handle_timeout(now);
                }
                while d.poll_transmit(now, &mut buf).is_some() {}
                while d.poll_event().is_some() {}
            }
        }
    }

    fn ipv4_checksum(h: &[u8]) -> u16 {
        let mut s: u32 = h
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
            .sum();
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        !(s as u16)
    }
}

// ===========================================================================
// Completion queues.

#[test]
fn a_full_cq_holds_completions_back_in_order() {
    let mut p = Pair::new(Opts {
        scq_cap: 2,
        ..Opts::default()
    });
    for i in 0..10 {
        let sge = p.b.sge(i * 64, 64);
        p.b.recv(i, vec![sge]);
    }
    for id in 0..10 {
        p.a.post(wr(id, SendOp::Send, vec![p.a.sge(0, 8)]));
    }
    assert_eq!(p.run(Duration::from_secs(1)), Stop::Idle);
    assert_eq!(p.a.dev.cq_len(p.a.scq), 2);
    let mut got = Vec::new();
    while p.a.dev.poll_cq(p.a.scq, 1, &mut got) > 0 {}
    assert_eq!(
        got.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
}

#[test]
fn a_full_send_cq_does_not_block_receives() {
    // B is requester and responder at once and leaves its send CQ full:
    // incoming SENDs must still be received and completed on its receive
    // CQ.
    let mut p = Pair::new(Opts {
        scq_cap: 1,
        ..Opts::default()
    });
    for i in 0..3 {
        let sge = p.a.sge(i * 64, 64);
        p.a.recv(i, vec![sge]);
    }
    for id in 0..3 {
        p.b.post(wr(id, SendOp::Send, vec![p.b.sge(0, 8)]));
    }
    assert_eq!(p.run(Duration::from_secs(1)), Stop::Idle);
    assert_eq!(p.b.dev.cq_len(p.b.scq), 1);
    let sge = p.b.sge(1000, 64);
    p.b.recv(7, vec![sge]);
    p.a.post(wr(9, SendOp::Send, vec![p.a.sge(0, 8)]));
    assert_eq!(p.run(Duration::from_secs(1)), Stop::Idle);
    let mut r = Vec::new();
    p.b.dev.poll_cq(p.b.rcq, 8, &mut r);
    assert_eq!(
        r.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(7, WcStatus::Success)]
    );
    let mut a = Vec::new();
    p.a.dev.poll_cq(p.a.scq, 8, &mut a);
    assert_eq!(
        a.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(9, WcStatus::Success)]
    );
    let mut s = Vec::new();
    while p.b.dev.poll_cq(p.b.scq, 8, &mut s) > 0 {}
    assert_eq!(s.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
}

#[test]
fn completions_held_back_on_one_full_cq_from_many_qps_all_arrive_in_order() {
    // Three QPs of A share a send CQ of room 1; each completes two
    // signaled WRITEs. What the CQ cannot take waits per QP and comes out
    // as it is polled, each QP's in order; a QP destroyed meanwhile takes
    // its own with it.
    let mut a = Device::new(DeviceConfig::new(MAC_A, ip_a())).unwrap();
    let mut b = Device::new(DeviceConfig::new(MAC_B, ip_b())).unwrap();
    let caps = QpCaps {
        max_send_wr: 4,
        ..QpCaps::default()
    };
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let cq = a.create_cq(1).unwrap();
    let cqb = b.create_cq(16).unwrap();
    let mra = a.reg_mr(MrSpec::new(pa, 4096, Access::ALL)).unwrap();
    let mrb = b.reg_mr(MrSpec::new(pb, 4096, Access::ALL)).unwrap();
    let p = ConnectParams::default();
    let mut qps = Vec::new();
    for _ in 0..3 {
        let qa = a.create_qp(pa, cq, cq, caps).unwrap();
        let qb = b.create_qp(pb, cqb, cqb, caps).unwrap();
        connect_qp(&mut a, qa, qb, MAC_B, ip_b(), &p, 0, 0).unwrap();
        connect_qp(&mut b, qb, qa, MAC_A, ip_a(), &p, 0, 0).unwrap();
        qps.push(qa);
    }
    for (i, &qa) in qps.iter().enumerate() {
        for k in 0..2 {
            let sge = Sge {
                addr: mra.addr,
                length: 8,
                lkey: mra.lkey,
            };
            let op = SendOp::Write {
                remote_addr: mrb.addr,
                rkey: mrb.rkey,
            };
            let id = (10 * i + k) as u64;
            a.post_send(qa, SendWr::new(id, op, Payload::sge(sge)))
                .unwrap();
        }
    }
    let mut buf = vec![0u8; 4096];
    let now = Instant::ZERO;
    loop {
        let mut moved = false;
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            b.handle(now, &buf[..n]);
            moved = true;
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            a.handle(now, &buf[..n]);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    assert_eq!(a.cq_len(cq), 1);
    // The third QP goes with what it held back.
    let mut got = Vec::new();
    a.poll_cq(cq, 1, &mut got);
    let gone = qps[2];
    a.destroy_qp(gone).unwrap();
    while a.poll_cq(cq, 1, &mut got) > 0 {
        assert!(a.cq_len(cq) <= 1);
    }
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    for i in 0..2u64 {
        let mine: Vec<u64> = ids.iter().copied().filter(|&id| id / 10 == i).collect();
        assert_eq!(mine, [10 * i, 10 * i + 1], "QP {i}'s completions: {ids:?}");
    }
    // Of the destroyed QP's, only what the CQ held before may be there.
    let theirs = ids.iter().filter(|&&id| id / 10 == 2).count();
    assert!(theirs == 0 || (theirs == 1 && ids[0] / 10 == 2), "{ids:?}");
}

// ===========================================================================
// A fault soak on the simulated fabric.

const SLOTS: usize = 16;
const SLOT: usize = 16384;

struct SoakEnd {
    cq: CqId,
    mr: MrKeys,
    qp: u32,
}

#[derive(Clone)]
enum Pending {
    Send,
    Write(usize, Vec<u8>),
    Read(usize, usize),
    Add,
}

fn soak(seed: u64, messages: usize) -> (QpCounters, QpCounters) {
    let mut rng = Rng::new(seed);
    let mtu = Mtu::ALL[seed as usize % 5];
    let m = mtu.bytes() as usize;
    let mut net = SimNet::new(seed);
    let a = net.add_host(DeviceConfig::new(MAC_A, ip_a())).unwrap();
    let b = net.add_host(DeviceConfig::new(MAC_B, ip_b())).unwrap();
    let faults = LinkConfig {
        loss: 0.02,
        reorder: 0.02,
        dup: 0.02,
        corrupt: 0.01,
        ..LinkConfig::default()
    };
    net.connect(a, b, faults).unwrap();
    let mut ends = Vec::new();
    for h in [a, b] {
        let d = &mut net.hosts[h].dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(4096).unwrap();
        let mr = d.reg_mr(MrSpec::new(pd, 1 << 20, Access::ALL)).unwrap();
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        ends.push(SoakEnd { cq, mr, qp });
    }
    let params = ConnectParams {
        mtu,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectParams::default()
    };
    let psn_a = rng.below(PSN_MOD as u64) as u32;
    let psn_b = PSN_MOD - 1 - rng.below(64) as u32;
    net.connect_qps(a, ends[0].qp, b, ends[1].qp, &params, (psn_a, psn_b))
        .unwrap();
    let (ea, eb) = (&ends[0], &ends[1]);
    // B's source for READs: 512K.. 768K.
    let src = rng.bytes(256 * 1024);
    net.hosts[b].dev.mr_mut(eb.mr.lkey).unwrap()[512 * 1024..768 * 1024].copy_from_slice(&src);
    let counter_off = 900 * 1024;

    let mut inflight: Vec<Option<Pending>> = vec![None; SLOTS];
    let mut recvs: VecDeque<Vec<u8>> = VecDeque::new();
    let mut next = 0usize;
    let mut done = 0usize;
    let mut total_add = 0u64;
    let mut origs = Vec::new();
    let mut errors = Vec::new();
    let mut wcs = Vec::new();
    let ok = net.run_until(Duration::from_secs(600), |n| {
        // B's receives first: they complete before A's SENDs do.
        wcs.clear();
        n.hosts[b].dev.poll_cq(eb.cq, 4096, &mut wcs);
        for w in wcs.drain(..) {
            if w.status != WcStatus::Success {
                errors.push(w);
                continue;
            }
            let want = recvs.pop_front().unwrap();
            let slot = w.wr_id as usize;
            let got =
                &n.hosts[b].dev.mr(eb.mr.lkey).unwrap()[256 * 1024 + slot * SLOT..][..want.len()];
            assert_eq!(w.byte_len as usize, want.len());
            assert!(got == &want[..], "seed {seed}: SEND data");
        }
        n.hosts[a].dev.poll_cq(ea.cq, 4096, &mut wcs);
        for w in wcs.drain(..) {
            if w.status != WcStatus::Success {
                errors.push(w);
                continue;
            }
            let slot = w.wr_id as usize % SLOTS;
            let mem_a = n.hosts[a].dev.mr(ea.mr.lkey).unwrap();
            let mem_b = n.hosts[b].dev.mr(eb.mr.lkey).unwrap();
            match inflight[slot].take().unwrap() {
                Pending::Send => {}
                Pending::Write(off, want) => assert!(
                    mem_b[off..off + want.len()] == want[..],
                    "seed {seed}: WRITE data"
                ),
                Pending::Read(from, len) => {
                    let got = &mem_a[256 * 1024 + slot * SLOT..][..len];
                    assert!(got == &mem_b[from..from + len], "seed {seed}: READ data");
                }
                Pending::Add => {
                    let o =
                        u64::from_le_bytes(mem_a[slot * SLOT + 8000..][..8].try_into().unwrap());
                    origs.push(o);
                }
            }
            done += 1;
        }
        if !errors.is_empty() {
            return true;
        }
        // Keep up to SLOTS messages in flight.
        while next < messages && inflight[next % SLOTS].is_none() {
            let slot = next % SLOTS;
            let kind = rng.below(4);
            let k = 1 + rng.below(3) as usize;
            let len = match rng.below(5) {
                0 => rng.below(SLOT as u64 / 2) as usize,
                1 => 0,
                _ => (k * m + rng.below(3) as usize).saturating_sub(1),
            };
            let data = rng.bytes(len);
            let (dev_a, dev_b) = {
                let (x, y) = n.hosts.split_at_mut(1);
                (&mut x[0].dev, &mut y[0].dev)
            };
            let a_slot = slot * SLOT;
            dev_a.mr_mut(ea.mr.lkey).unwrap()[a_slot..a_slot + len].copy_from_slice(&data);
            let sge = Sge {
                addr: ea.mr.addr + a_slot as u64,
                length: len as u32,
                lkey: ea.mr.lkey,
            };
            let (op, pend, sges) = match kind {
                0 => {
                    let r = 256 * 1024 + slot * SLOT;
                    let rs = Sge {
                        addr: eb.mr.addr + r as u64,
                        length: SLOT as u32,
                        lkey: eb.mr.lkey,
                    };
                    dev_b
                        .post_recv(
                            eb.qp,
                            RecvWr {
                                wr_id: slot as u64,
                                sges: smallvec::smallvec![rs],
                            },
                        )
                        .unwrap();
                    recvs.push_back(data.clone());
                    (SendOp::Send, Pending::Send, vec![sge])
                }
                1 => {
                    let off = slot * SLOT;
                    let op = SendOp::Write {
                        remote_addr: eb.mr.addr + off as u64,
                        rkey: eb.mr.rkey,
                    };
                    (op, Pending::Write(off, data), vec![sge])
                }
                2 => {
                    let from = 512 * 1024 + rng.below((256 * 1024 - SLOT) as u64) as usize;
                    let op = SendOp::Read {
                        remote_addr: eb.mr.addr + from as u64,
                        rkey: eb.mr.rkey,
                    };
                    let dst = 256 * 1024 + slot * SLOT;
                    let d = Sge {
                        addr: ea.mr.addr + dst as u64,
                        length: len as u32,
                        lkey: ea.mr.lkey,
                    };
                    (op, Pending::Read(from, len), vec![d])
                }
                _ => {
                    let add = 1 + rng.below(1000);
                    total_add += add;
                    let op = SendOp::FetchAdd {
                        remote_addr: eb.mr.addr + counter_off as u64,
                        rkey: eb.mr.rkey,
                        add,
                    };
                    let d = Sge {
                        addr: ea.mr.addr + (slot * SLOT + 8000) as u64,
                        length: 8,
                        lkey: ea.mr.lkey,
                    };
                    (op, Pending::Add, vec![d])
                }
            };
            dev_a.post_send(ea.qp, wr(next as u64, op, sges)).unwrap();
            inflight[slot] = Some(pend);
            next += 1;
        }
        // Hand what was just posted to the fabric (run_until pumps before
        // it asks, not after).
        n.pump_all();
        done == messages
    });
    assert!(errors.is_empty(), "seed {seed}: {errors:?}");
    assert!(
        ok,
        "seed {seed}: {done} of {messages} done by {:?}",
        net.now()
    );
    let word = u64::from_le_bytes(
        net.hosts[b].dev.mr(eb.mr.lkey).unwrap()[counter_off..][..8]
            .try_into()
            .unwrap(),
    );
    assert_eq!(word, total_add, "seed {seed}: each add exactly once");
    origs.sort_unstable();
    origs.dedup();
    assert!(origs.iter().all(|&o| o < total_add.max(1)), "seed {seed}");
    for h in [a, b] {
        accounting(&net.hosts[h].dev);
    }
    (
        *net.hosts[a].dev.qp_counters(ea.qp).unwrap(),
        *net.hosts[b].dev.qp_counters(eb.qp).unwrap(),
    )
}

#[test]
fn fault_soak_loss_reorder_duplication_corruption() {
    let mut retrans = 0;
    let mut dups = 0;
    for seed in 1..=10 {
        let (ca, cb) = soak(seed, 300);
        assert_eq!(
            ca.req_cqe_error + ca.req_cqe_flush_error + cb.resp_cqe_error,
            0
        );
        retrans += ca.retransmitted_pkts;
        dups += cb.duplicate_request;
    }
    assert!(retrans > 0 && dups > 0, "the faults did happen");
}

#[test]
fn a_qp_with_max_rd_atomic_0_refuses_reads_and_atomics_at_post() {
    let mut p = Pair::new(Opts {
        max_rd_atomic: 0,
        ..Opts::default()
    });
    let read = SendOp::Read {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
    };
    let faa = SendOp::FetchAdd {
        remote_addr: p.b.addr(0),
        rkey: p.b.rkey(),
        add: 1,
    };
    for op in [read, faa] {
        let w = wr(1, op, vec![p.a.sge(0, 8)]);
        assert!(matches!(
            p.a.dev.post_send(p.a.qp, w),
            Err(Error::InvalidArgument(_))
        ));
    }
    // SEND and WRITE still go.
    p.b.recv(9, vec![p.b.sge(0, 64)]);
    p.a.post(wr(2, SendOp::Send, vec![p.a.sge(0, 64)]));
    p.settle();
    assert_eq!(p.a.sent_status(), [(2, WcStatus::Success)]);
}

// ===========================================================================
// ECN and CNPs: the notification point (A17 §17.9.3, reference B.8).

/// `bytes` re-emitted with CE set (the ICRC does not cover the ECN bits,
/// so a switch marks without touching it).
fn ce_marked(bytes: &[u8]) -> Vec<u8> {
    let out = reemit(bytes, |r| r.ip.set_ecn(Ecn::Ce));
    assert!(Frame::parse(&out).unwrap().icrc_ok());
    out
}

/// A filter that marks CE the frames `pick` chooses, at most `limit` of
/// them, as a switch on the way would.
fn mark_ce(limit: usize, pick: impl Fn(&Seen) -> bool + 'static) -> impl FnMut(&Seen) -> Fate {
    let mut left = limit;
    move |s| {
        if left > 0 && pick(s) {
            left -= 1;
            Fate::Replace(ce_marked(&s.bytes))
        } else {
            Fate::Pass
        }
    }
}

fn cnps(p: &Pair, from: Side) -> Vec<Seen> {
    p.from(from)
        .filter(|s| s.op == Opcode::CNP)
        .cloned()
        .collect()
}

#[test]
fn packets_leave_ect0_unless_ecn_is_off() {
    for ecn in [true, false] {
        let mut o = Opts::default();
        o.congestion.ecn = ecn;
        let mut p = Pair::new(o);
        let sge = p.b.sge(0, 64);
        p.b.recv(1, vec![sge]);
        p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 21)]));
        p.settle();
        all_ok(&p.a.sent, 1);
        let want = if ecn { Ecn::Ect0 } else { Ecn::NotEct };
        for s in &p.seen {
            let f = Frame::parse(&s.bytes).unwrap();
            assert_eq!(f.ip().ecn(), want, "{:?} from {:?}", s.op, s.from);
        }
    }
}

#[test]
fn a_ce_marked_packet_makes_one_cnp_to_its_source_qp() {
    let mut p = Pair::new(Opts::default());
    p.set_filter(mark_ce(usize::MAX, |s| s.from == Side::A && s.is_request()));
    let sge = p.b.sge(0, 64);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 21)]));
    p.settle();
    all_ok(&p.a.sent, 1);
    let sent = cnps(&p, Side::B);
    assert_eq!(sent.len(), 1);
    assert_eq!(p.b.c().np_ecn_marked_roce_packets, 1);
    assert_eq!(p.b.c().np_cnp_sent, 1);
    assert_eq!(p.a.dev.rx_counters().cnp_received, 1);
    // No rate control configured: the reaction point counts it ignored.
    assert_eq!(p.a.c().rp_cnp_ignored, 1);
    assert_eq!(p.a.c().rp_cnp_handled, 0);

    // The bytes (reference B.8): BTH opcode 0x81, SE/M/Pad/TVer 0, the
    // P_Key of the marked packet, BECN set, DestQP = A's QP, PSN 0, then
    // 16 zero bytes and the ICRC; IP DSCP 48 (CS6), Not-ECT.
    let cnp = &sent[0].bytes;
    let f = Frame::parse(cnp).unwrap();
    assert!(f.icrc_ok());
    assert_eq!(f.ip().dscp(), 48);
    assert_eq!(f.ip().ecn(), Ecn::NotEct);
    let bth_at = 14 + 20 + 8;
    let qa = p.a.qp.to_be_bytes();
    let want_bth = [0x81, 0, 0xff, 0xff, 0x40, qa[1], qa[2], qa[3], 0, 0, 0, 0];
    assert_eq!(cnp[bth_at..bth_at + 12], want_bth);
    assert_eq!(cnp[bth_at + 12..bth_at + 28], [0u8; 16]);
    assert_eq!(cnp.len(), bth_at + 28 + 4);
    // The same frame as the wire module's CNP of the marked packet.
    let marked = ce_marked(&p.from(Side::A).next().unwrap().bytes);
    let mut buf = vec![0u8; 256];
    let n = FrameRepr::cnp(&Frame::parse(&marked).unwrap().repr(), p.a.qp, 48)
        .emit(&[], &mut buf)
        .unwrap();
    assert_eq!(cnp[..], buf[..n]);
}

#[test]
fn ce_marks_within_min_time_between_cnps_make_one_cnp() {
    let mut p = Pair::new(Opts::default());
    p.set_filter(mark_ce(usize::MAX, |s| s.from == Side::A));
    // 16 packets sent within the same microsecond, all marked: one CNP.
    p.a.post(wr(
        1,
        write(p.b.addr(0), p.b.rkey()),
        vec![p.a.sge(0, 16 << 10)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.c().np_ecn_marked_roce_packets, 16);
    assert_eq!(cnps(&p, Side::B).len(), 1);
    // Past the interval (4 µs by default) a marked packet makes another.
    p.now += Duration::from_micros(5);
    p.a.post(wr(
        2,
        write(p.b.addr(0), p.b.rkey()),
        vec![p.a.sge(0, 1024)],
    ));
    p.settle();
    all_ok(&p.a.sent, 2);
    assert_eq!(p.b.c().np_ecn_marked_roce_packets, 17);
    assert_eq!(cnps(&p, Side::B).len(), 2);
    assert_eq!(p.b.c().np_cnp_sent, 2);
    assert_eq!(p.a.dev.rx_counters().cnp_received, 2);
    // The ACKs B sent were not marked: A owes no CNP.
    assert!(cnps(&p, Side::A).is_empty());
}

#[test]
fn the_cnp_interval_and_the_notification_point_are_settings() {
    // 50 µs as the DCQCN paper: a mark 5 µs later is covered.
    let mut o = Opts::default();
    o.congestion.np.min_time_between_cnps = Duration::from_micros(50);
    let mut p = Pair::new(o);
    p.set_filter(mark_ce(usize::MAX, |s| s.from == Side::A && s.is_request()));
    for id in 1..=2 {
        p.a.post(wr(id, write(p.b.addr(0), p.b.rkey()), vec![p.a.sge(0, 64)]));
        p.settle();
        p.now += Duration::from_micros(5);
    }
    all_ok(&p.a.sent, 2);
    assert_eq!(cnps(&p, Side::B).len(), 1);
    // Off: marks are counted, no CNP goes out.
    let mut o = Opts::default();
    o.congestion.np.enabled = false;
    let mut p = Pair::new(o);
    p.set_filter(mark_ce(usize::MAX, |s| s.from == Side::A && s.is_request()));
    p.a.post(wr(1, write(p.b.addr(0), p.b.rkey()), vec![p.a.sge(0, 64)]));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.c().np_ecn_marked_roce_packets, 1);
    assert!(cnps(&p, Side::B).is_empty());
}

fn write(remote_addr: u64, rkey: Rkey) -> SendOp {
    SendOp::Write { remote_addr, rkey }
}

// ===========================================================================
// The reaction point: CNPs cut a QP's rate and its pacer spaces its
// requests and READ responses; ACKs and CNPs are never paced.

const LINE: u64 = 100_000_000_000;

fn dcqcn_cx(o: &mut Opts) {
    o.congestion.rp = ferroce::cc::CcConfig::DcqcnCx(Default::default());
    o.congestion.line_bps = LINE;
    o.congestion.trace = true;
}

/// Rc after one CNP at line rate, ConnectX defaults (reference C.1, C.3):
/// α = initial_alpha_value = 1023; cut = min(Rc·α >> rpg_gd (11),
/// Rc·(100 − rpg_min_dec_fac (50))/100) = min(49 951 171 875, 50e9).
const AFTER_ONE_CNP: u64 = 100_000_000_000 - 49_951_171_875;

/// The gap the pacer leaves after a frame of `len` bytes at `rate`.
fn gap_ns(len: usize, rate: u64) -> u64 {
    (len as u64 * 8 * 1_000_000_000 + rate / 2) / rate
}

/// Send times of `side`'s frames that match `pick`, and their lengths.
fn times(p: &Pair, side: Side, pick: impl Fn(&Seen) -> bool) -> Vec<(u64, usize)> {
    p.from(side)
        .filter(|s| pick(s))
        .map(|s| (s.at.as_nanos(), s.bytes.len()))
        .collect()
}

fn assert_paced(sent: &[(u64, usize)], rate: u64) {
    assert!(sent.len() > 2);
    for w in sent.windows(2) {
        let ((t0, len), (t1, _)) = (w[0], w[1]);
        assert_eq!(t1 - t0, gap_ns(len, rate), "frames at {t0} and {t1} ns");
    }
}

#[test]
fn a_cnp_cuts_the_senders_rate_and_its_requests_are_paced_at_it() {
    let mut o = Opts::default();
    dcqcn_cx(&mut o);
    let mut p = Pair::new(o);
    p.set_filter(mark_ce(1, |s| s.from == Side::A && s.is_request()));
    // Before any CNP nothing is paced: the 16 packets leave at once.
    p.a.post(wr(
        1,
        write(p.b.addr(0), p.b.rkey()),
        vec![p.a.sge(0, 16 << 10)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    let first = times(&p, Side::A, |s| s.is_request());
    assert!(first.iter().all(|(t, _)| *t == 0));
    let qa = p.a.qp;
    assert_eq!(p.a.c().rp_cnp_handled, 1);
    let st = p.a.dev.cc_state(qa).unwrap();
    assert_eq!(st.rate_bps, AFTER_ONE_CNP);
    // The next message leaves at the cut rate, one frame per gap.
    let t0 = p.now.as_nanos();
    p.a.post(wr(
        2,
        write(p.b.addr(0), p.b.rkey()),
        vec![p.a.sge(0, 16 << 10)],
    ));
    p.settle();
    all_ok(&p.a.sent, 2);
    let second = times(&p, Side::A, |s| s.is_request() && s.at.as_nanos() >= t0);
    assert_eq!(second.len(), 16);
    assert_paced(&second, AFTER_ONE_CNP);
    // The trace: the CNP (with the state it found) and the cut.
    let mut trace = Vec::new();
    p.a.dev.drain_cc_trace(qa, &mut trace);
    let events: Vec<&str> = trace.iter().map(|r| r.event.name()).collect();
    assert_eq!(events, ["cnp", "cut"]);
    assert_eq!(trace[1].state.rate_bps, AFTER_ONE_CNP);
}

#[test]
fn read_responses_are_paced_at_the_responders_rate() {
    // For a READ the data flows from B: A's notification point sends the
    // CNP to B, whose pacer spaces its responses.
    let mut o = Opts::default();
    dcqcn_cx(&mut o);
    let mut p = Pair::new(o);
    p.set_filter(mark_ce(1, |s| s.from == Side::B && s.is_read_resp()));
    let read = |p: &Pair, id| {
        wr(
            id,
            SendOp::Read {
                remote_addr: p.b.addr(0),
                rkey: p.b.rkey(),
            },
            vec![p.a.sge(0, 16 << 10)],
        )
    };
    let r = read(&p, 1);
    p.a.post(r);
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.a.c().np_cnp_sent, 1);
    assert_eq!(p.b.c().rp_cnp_handled, 1);
    assert_eq!(p.b.dev.cc_state(p.b.qp).unwrap().rate_bps, AFTER_ONE_CNP);
    let t0 = p.now.as_nanos();
    let r = read(&p, 2);
    p.a.post(r);
    p.settle();
    all_ok(&p.a.sent, 2);
    let resp = times(&p, Side::B, |s| s.is_read_resp() && s.at.as_nanos() >= t0);
    assert_eq!(resp.len(), 16);
    assert_paced(&resp, AFTER_ONE_CNP);
}

#[test]
fn acks_and_cnps_are_not_paced() {
    // B's rate is cut (A answers B's marked ACK with a CNP), and then a
    // marked request makes B send a CNP: B's ACKs and CNP leave the
    // instant the request arrives, whatever its pacer says.
    let mut o = Opts::default();
    dcqcn_cx(&mut o);
    o.congestion.rp = ferroce::cc::CcConfig::DcqcnCx(ferroce::cc::CxParams {
        // cut = min(Rc·α >> 10, Rc·(100 − 0)/100): nearly all of it.
        rpg_gd: 10,
        rpg_min_dec_fac: 0,
        ..Default::default()
    });
    let mut p = Pair::new(o);
    p.set_filter(mark_ce(usize::MAX, |s| {
        s.is_ack() || (s.from == Side::A && s.is_request())
    }));
    for id in 1..=3 {
        p.a.post(wr(id, write(p.b.addr(0), p.b.rkey()), vec![p.a.sge(0, 64)]));
        p.settle();
        p.now += Duration::from_micros(10);
    }
    all_ok(&p.a.sent, 3);
    assert!(p.b.c().rp_cnp_handled >= 1);
    assert!(p.b.dev.cc_state(p.b.qp).unwrap().rate_bps < LINE / 100);
    // Each request was answered (ACK, and a CNP) 1 µs after A sent it: the
    // wire's delay, no pacing.
    let reqs = times(&p, Side::A, |s| s.is_request());
    let acks = times(&p, Side::B, |s| s.is_ack());
    let cnps = times(&p, Side::B, |s| s.op == Opcode::CNP);
    assert_eq!(reqs.len(), 3);
    assert_eq!(acks.len(), 3);
    assert_eq!(cnps.len(), 3);
    for i in 0..3 {
        assert_eq!(acks[i].0, reqs[i].0 + 1_000);
        assert_eq!(cnps[i].0, reqs[i].0 + 1_000);
    }
}

// The per-ACK input: RTT samples from the requester's send log reach the
// rate controller with each acknowledgement.

/// TIMELY on A with the rate trace on, over a wire of `delay` one way.
fn timely(delay: Duration) -> Opts {
    let mut o = Opts::default();
    o.congestion.rp = ferroce::cc::CcConfig::Timely(Default::default());
    o.congestion.line_bps = LINE;
    o.congestion.trace = true;
    o.delay = delay;
    o
}

#[test]
fn an_ack_gives_the_controller_the_rtt_of_the_newest_packet_it_covers() {
    // 30 µs each way: the ACK of a 16 KiB WRITE (one TIMELY segment)
    // comes 60 µs after its last packet left, inside TIMELY's band.
    let mut p = Pair::new(timely(Duration::from_micros(30)));
    p.a.post(wr(
        1,
        write(p.b.addr(0), p.b.rkey()),
        vec![p.a.sge(0, 16 << 10)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    let qa = p.a.qp;
    let mut trace = Vec::new();
    p.a.dev.drain_cc_trace(qa, &mut trace);
    let events: Vec<(&str, u64)> = trace
        .iter()
        .map(|r| (r.event.name(), r.state.rtt_ns))
        .collect();
    assert_eq!(events, [("rtt_cut", 60_000)]);
    // Patched TIMELY's first event (gradient 0, w = 1/2), worked by hand:
    // the RTT less the timed frame's serialisation (a WRITE LAST of 1024
    // B: 14 + 20 + 8 + 12 + 1024 + 4 = 1082 B, 86.56 ns at 100 Gb/s) is
    // 59.91344 µs; rate = 100e9·(1 − 0.008·0.5·(59.91344 − 50)/50) + 100e6·0.5.
    let rtt = 60.0 - 1082.0 * 8.0 / 100e3;
    let want = 100e9 * (1.0 - 0.008 * 0.5 * (rtt - 50.0) / 50.0) + 50e6;
    let got = p.a.dev.cc_state(qa).unwrap().rate_bps as f64;
    assert!((got - want).abs() < 2.0, "{got} vs {want}");
}

#[test]
fn a_lost_packet_is_timed_from_its_resending() {
    // The last packet of the WRITE is lost; after the ACK timeout it goes
    // again and its ACK comes one round trip after the resend.
    let mut o = timely(Duration::from_micros(30));
    o.timeout = 8; // 1 ms
    let mut p = Pair::new(o);
    p.set_filter(drop_first(|s| {
        s.from == Side::A && s.is_request() && s.op == rc(Op::RdmaWriteLast)
    }));
    p.a.post(wr(
        1,
        write(p.b.addr(0), p.b.rkey()),
        vec![p.a.sge(0, 16 << 10)],
    ));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert!(p.a.c().retransmitted_pkts >= 1);
    let mut trace = Vec::new();
    p.a.dev.drain_cc_trace(p.a.qp, &mut trace);
    let rtts: Vec<u64> = trace.iter().map(|r| r.state.rtt_ns).collect();
    assert_eq!(rtts, [60_000]);
}

// ===========================================================================
// Selective repeat (transport::selective): both QPs in Recovery::Selective.

fn sr() -> Opts {
    Opts {
        recovery: Recovery::Selective,
        ..Opts::default()
    }
}

/// The selective-repeat trailer a frame carries after its IP packet.
fn sr_trailer(s: &Seen) -> Option<ferroce::wire::sr::SrTrailer> {
    let f = Frame::parse(&s.bytes).unwrap();
    ferroce::wire::sr::SrTrailer::parse(&s.bytes[f.bytes().len()..])
}

#[test]
fn selective_repeat_resends_only_the_lost_packet() {
    let mut p = Pair::new(sr());
    let data = pattern(40, 8192);
    p.a.fill(0, &data);
    let sge = p.b.sge(0, 8192);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 8192)]));
    let lost = 0x100 + 2;
    p.set_filter(drop_first(move |s| s.from == Side::A && s.psn == lost));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.recvd.len(), 1);
    assert_eq!(
        (p.b.recvd[0].status, p.b.recvd[0].byte_len),
        (WcStatus::Success, 8192)
    );
    assert_eq!(p.b.mem(0, 8192), data);
    let psns: Vec<u32> = p.from(Side::A).map(|s| s.psn - 0x100).collect();
    assert_eq!(
        psns,
        [0, 1, 2, 3, 4, 5, 6, 7, 2],
        "only the lost packet again"
    );
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!(
        (cb.sr_placed_ahead, cb.sr_sacks_sent, cb.sr_not_placed),
        (5, 5, 0)
    );
    assert_eq!((ca.sr_sacks_received, ca.sr_selective_resends), (5, 1));
    assert_eq!(ca.retransmitted_pkts, 1);
    // One recovery, for the hole the first NAK named; no timeout.
    assert_eq!((ca.local_ack_timeout_err, ca.completer_retry_err), (0, 1));
    // Every NAK is a standard PSN sequence error for the hole, with the
    // packet that came ahead in its trailer; every request names its
    // message.
    let sacks: Vec<u32> = p
        .from(Side::B)
        .filter(|s| s.nak().is_some())
        .map(|s| {
            assert_eq!((s.psn, s.nak()), (lost, Some(NakCode::PsnSequenceError)));
            match sr_trailer(s) {
                Some(ferroce::wire::sr::SrTrailer::Sack(x)) => x.value() - 0x100,
                t => panic!("a NAK without a sack trailer: {t:?}"),
            }
        })
        .collect();
    assert_eq!(sacks, [3, 4, 5, 6, 7]);
    for s in p.from(Side::A) {
        match sr_trailer(s) {
            Some(ferroce::wire::sr::SrTrailer::Place(pl)) => {
                assert_eq!((pl.first_psn.value(), pl.rsn, pl.len), (0x100, 0, 8192))
            }
            t => panic!("a request without a place trailer: {t:?}"),
        }
    }
    p.check_accounting();
}

#[test]
fn selective_repeat_places_a_write_whose_first_packet_was_lost() {
    let mut p = Pair::new(sr());
    let data = pattern(41, 6000);
    p.a.fill(0, &data);
    p.b.recv(7, vec![]);
    let op = SendOp::WriteWithImm {
        remote_addr: p.b.addr(100),
        rkey: p.b.rkey(),
        imm: 0xfeed,
    };
    p.a.post(wr(1, op, vec![p.a.sge(0, 6000)]));
    p.set_filter(drop_first(|s| s.from == Side::A && s.psn == 0x100));
    p.settle();
    all_ok(&p.a.sent, 1);
    assert_eq!(p.b.mem(100, 6000), data);
    let w = &p.b.recvd[0];
    assert_eq!(
        (w.wr_id, w.status, w.byte_len),
        (7, WcStatus::Success, 6000)
    );
    assert_eq!(
        (w.opcode, w.imm_data),
        (WcOpcode::RecvRdmaWithImm, Some(0xfeed))
    );
    let (ca, cb) = (p.a.c(), p.b.c());
    assert_eq!(
        cb.sr_placed_ahead, 5,
        "MIDDLE and LAST placed before their FIRST"
    );
    assert_eq!(ca.retransmitted_pkts, 1);
    assert_eq!(p.b.c().rx_write_requests, 1);
}

/// A lost last packet has no later packet to reveal it: with at most
/// three packets in flight, IRN's short timeout resends it, long before
/// the QP's own (4.2 ms at timeout 10), and spends no retry.
#[test]
fn selective_repeat_tail_loss_waits_the_short_timeout() {
    let mut o = sr();
    o.retry_cnt = 0;
    let mut p = Pair::new(o);
    let sge = p.b.sge(0, 3072);
    p.b.recv(1, vec![sge]);
    p.a.post(wr(1, SendOp::Send, vec![p.a.sge(0, 3072)]));
    p.set_filter(drop_first(|s| s.from == Side::A && s.psn == 0x102));
    assert!(p.wait(Duration::from_millis(1), |p| !p.a.sent.is_empty()));
    all_ok(&p.a.sent, 1);
    let ca = p.a.c();
    assert_eq!((ca.local_ack_timeout_err, ca.retry_exceeded_err), (1, 0));
    // Only the last packet asked for an ACK: nothing was acknowledged, so
    // the timeout sends all three again.
    assert_eq!(ca.retransmitted_pkts, 3);
}

/// One frame's fate in [`sr_mixed_run`]: 0 drop, 1 delay by `1 + n` µs,
/// 2 duplicate, anything else pass.
type FateCode = (u8, u8);

/// Messages of the given kinds (0 SEND, 1 WRITE, 2 WRITE with immediate,
/// 3 READ, 4 fetch-and-add) and lengths on a selective-repeat pair whose
/// frames, both ways, meet `fates` in turn (then pass): each message
/// completes once, in order, successfully, with its data; each receive
/// completes once in order, with its length.
fn sr_mixed_run(label: &str, msgs: &[(u8, u32)], fates: Vec<FateCode>) {
    let mut o = sr();
    o.timeout = 8;
    let mut p = Pair::new(o);
    let n = msgs.len() as u64;
    let mut sends = Vec::new();
    let mut expect_recv = Vec::new();
    for (i, &(kind, len)) in msgs.iter().enumerate() {
        let i = i as u64;
        let len = if kind == 4 { 8 } else { len.clamp(1, 8192) };
        let off = i * 8192;
        let data = pattern(i * 31 + u64::from(len), len as usize);
        p.a.fill(off as usize, &data);
        let op = match kind {
            4 => SendOp::FetchAdd {
                remote_addr: p.b.addr(off),
                rkey: p.b.rkey(),
                add: 0,
            },
            0 => SendOp::Send,
            1 => SendOp::Write {
                remote_addr: p.b.addr(off),
                rkey: p.b.rkey(),
            },
            2 => SendOp::WriteWithImm {
                remote_addr: p.b.addr(off),
                rkey: p.b.rkey(),
                imm: i as u32,
            },
            _ => SendOp::Read {
                remote_addr: p.b.addr(off),
                rkey: p.b.rkey(),
            },
        };
        if matches!(op, SendOp::Send | SendOp::WriteWithImm { .. }) {
            let sge = p.b.sge(off, 8192);
            p.b.recv(i, vec![sge]);
            expect_recv.push((i, len));
        }
        if let SendOp::Read { .. } | SendOp::FetchAdd { .. } = op {
            p.b.fill(off as usize, &data);
        }
        sends.push((i, op, off, data));
        p.a.post(wr(i, op, vec![p.a.sge(off, len)]));
    }
    let mut fates: VecDeque<FateCode> = fates.into();
    p.set_filter(move |_| match fates.pop_front() {
        Some((0, _)) => Fate::Drop,
        Some((1, d)) => Fate::Delay(Duration::from_micros(1 + u64::from(d))),
        Some((2, _)) => Fate::Dup,
        _ => Fate::Pass,
    });
    p.settle();
    assert_eq!(
        p.a.sent_ids(),
        (0..n).collect::<Vec<_>>(),
        "{label}: {:?} {} / {}",
        p.a.sent_status(),
        p.a.c(),
        p.b.c()
    );
    assert!(
        p.a.sent.iter().all(|w| w.status == WcStatus::Success),
        "{label}: {:?} {} / {}",
        p.a.sent_status(),
        p.a.c(),
        p.b.c()
    );
    let got: Vec<(u64, u32)> = p.b.recvd.iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(got, expect_recv, "{label}");
    for (i, op, off, data) in &sends {
        let at = match op {
            SendOp::Read { .. } | SendOp::FetchAdd { .. } => p.a.mem(*off as usize, data.len()),
            _ => p.b.mem(*off as usize, data.len()),
        };
        assert_eq!(&at, data, "{label} message {i}");
    }
    assert_eq!((p.a.state(), p.b.state()), (QpState::Rts, QpState::Rts));
    p.check_accounting();
}

/// Messages of every kind (SEND, WRITE, WRITE with immediate, READ,
/// fetch-and-add) under random loss (6%), delays that reorder (5%) and
/// duplicates (1%), 200 seeds.
#[test]
fn selective_repeat_under_random_faults_delivers_each_message_once_in_order() {
    for seed in 0..200u64 {
        let mut rng = Rng::new(seed);
        let msgs: Vec<(u8, u32)> = (0..24)
            .map(|_| (rng.below(5) as u8, 1 + rng.below(5000) as u32))
            .collect();
        let mut f = Rng::new(seed ^ 0xabc);
        let fates = (0..4000)
            .map(|_| match f.below(100) {
                0..=5 => (0, 0),
                6..=10 => (1, f.below(20) as u8),
                11 => (2, 0),
                _ => (3, 0),
            })
            .collect();
        sr_mixed_run(&format!("seed {seed}"), &msgs, fates);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..Default::default()
    })]

    /// The same property over patterns proptest draws (and shrinks on a
    /// failure): any mix of messages, any sequence of drops, delays and
    /// duplicates on the first frames both ways.
    #[test]
    fn selective_repeat_delivers_every_message_once_in_order_under_any_fault_pattern(
        msgs in proptest::collection::vec((0u8..5, 1u32..9000), 1..20),
        fates in proptest::collection::vec((0u8..6, 0u8..40), 0..400),
    ) {
        sr_mixed_run("proptest", &msgs, fates);
    }
}

/// Selective repeat resends less than go-back-N on the same losses.
#[test]
fn selective_repeat_resends_fewer_packets_than_go_back_n() {
    let run = |o: Opts| {
        let mut p = Pair::new(o);
        let mut f = Rng::new(9);
        for i in 0..16u64 {
            p.a.post(wr(
                i,
                SendOp::Write {
                    remote_addr: p.b.addr(0),
                    rkey: p.b.rkey(),
                },
                vec![p.a.sge(0, 16384)],
            ));
        }
        p.set_filter(move |s| match s.from == Side::A && f.chance(0.02) {
            true => Fate::Drop,
            false => Fate::Pass,
        });
        p.settle();
        all_ok(&p.a.sent, 16);
        p.a.c().retransmitted_pkts
    };
    let (gbn, sr) = (run(Opts::default()), run(sr()));
    assert!(sr * 3 < gbn, "sr {sr} resends, gbn {gbn}");
}

/// One run of [`prefetch_hints_change_nothing`]: `qps` connected QPs a
/// side, a 64 B WRITE of its own bytes on each, the frames moved a burst
/// of 32 at a time, each burst's frames hinted to the receiver first when
/// `hint` (and a frame that is no RoCE, a truncated one and one for no QP
/// besides). What the run leaves: the writer's completions, the bytes
/// written and both devices' counters.
fn burst_writes(qps: usize, hint: bool) -> (Vec<Wc>, Vec<u8>, [RxCounters; 2], [QpCounters; 2]) {
    let now = Instant::ZERO;
    let mut devs = [MAC_A, MAC_B].map(|m| {
        let ip = if m == MAC_A { ip_a() } else { ip_b() };
        Device::new(DeviceConfig::new(m, ip)).unwrap()
    });
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 1,
        ..QpCaps::default()
    };
    let mut made = Vec::new();
    for d in devs.iter_mut() {
        let pd = d.alloc_pd();
        let cq = d.create_cq(2 * qps).unwrap();
        let mr = d.reg_mr(MrSpec::new(pd, 64 * qps, Access::ALL)).unwrap();
        let q: Vec<u32> = (0..qps)
            .map(|_| d.create_qp(pd, cq, cq, caps).unwrap())
            .collect();
        made.push((cq, mr, q));
    }
    let p = ConnectParams::default();
    for i in 0..qps {
        let [a, b] = &mut devs;
        let (qa, qb) = (made[0].2[i], made[1].2[i]);
        connect_qp(a, qa, qb, MAC_B, ip_b(), &p, 0, 0).unwrap();
        connect_qp(b, qb, qa, MAC_A, ip_a(), &p, 0, 0).unwrap();
    }
    let (mra, mrb) = (made[0].1, made[1].1);
    let src = pattern(7, 64 * qps);
    devs[0].mr_mut(mra.lkey).unwrap().copy_from_slice(&src);
    for i in 0..qps {
        let off = 64 * i as u64;
        let sge = Sge {
            addr: mra.addr + off,
            length: 64,
            lkey: mra.lkey,
        };
        let op = SendOp::Write {
            remote_addr: mrb.addr + off,
            rkey: mrb.rkey,
        };
        devs[0]
            .post_send(made[0].2[i], SendWr::new(i as u64, op, Payload::sge(sge)))
            .unwrap();
    }
    let mut buf = vec![0u8; 2048];
    for _ in 0..4 * qps {
        let mut moved = false;
        for from in [0, 1] {
            let mut burst = Vec::new();
            while burst.len() < 32 {
                match devs[from].poll_transmit(now, &mut buf) {
                    Some(n) => burst.push(buf[..n].to_vec()),
                    None => break,
                }
            }
            moved |= !burst.is_empty();
            let to = &mut devs[1 - from];
            if hint {
                for f in &burst {
                    to.prefetch(f);
                    to.prefetch(&f[..20]);
                    let mut stray = f.clone();
                    stray[14 + 20 + 8 + 5] ^= 0xFF;
                    to.prefetch(&stray);
                }
                to.prefetch(&[0u8; 60]);
                to.prefetch(&[]);
            }
            for f in &burst {
                to.handle(now, f);
            }
        }
        if !moved {
            break;
        }
    }
    let mut wcs = Vec::new();
    devs[0].poll_cq(made[0].0, 2 * qps, &mut wcs);
    let written = devs[1].mr(mrb.lkey).unwrap().to_vec();
    let rx = [*devs[0].rx_counters(), *devs[1].rx_counters()];
    let c = [devs[0].counters(), devs[1].counters()];
    (wcs, written, rx, c)
}

/// The prefetch hints a driver gives a device ahead of a received burst
/// ([`Device::prefetch`]) change nothing: the same WRITEs on more than
/// [`PREFETCH_MIN_QPS`] QPs, with and without those hints (among them
/// hints on frames that are no RoCE, truncated or for no QP), end with the
/// same completions, bytes and counters. The prefetching the device does
/// itself along its ready list runs in both (it cannot be turned off);
/// with it every WRITE completes and its bytes land where they should.
#[test]
fn prefetch_hints_change_nothing() {
    let qps = PREFETCH_MIN_QPS + 44;
    let plain = burst_writes(qps, false);
    let hinted = burst_writes(qps, true);
    assert_eq!(plain, hinted);
    let (wcs, written, _, _) = hinted;
    assert_eq!(wcs.len(), qps);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..qps as u64).collect::<Vec<_>>());
    assert_eq!(written, pattern(7, 64 * qps));
}
