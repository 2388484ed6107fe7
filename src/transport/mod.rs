//! The reliable-connected (RC) transport, sans IO: a pure state machine
//! that never reads a clock, never touches a device and never blocks. The
//! same code runs over DPDK ports, in the simulator and in tests.
//!
//! A [`Device`] is one RoCE endpoint: its MAC and GIDs, protection domains
//! and memory regions ([`mr`]), completion queues, and QPs. Each QP has a
//! state and attributes ([`qp`]), a requester that turns send work requests
//! into packets ([`requester`]), a completer that turns responses into
//! completions and retries ([`completer`]) and a responder that executes
//! requests and answers them ([`responder`]); [`counters`] says what each
//! saw. The device keeps every QP's next deadline in a
//! [`DeadlineHeap`], re-armed for each QP it acts on.
//!
//! # Driving a device
//!
//! The caller owns the clock and the wire. In any order, as often as it
//! likes, with a `now` that never goes backward:
//!
//! 1. [`Device::handle`]`(now, frame)` for every frame received (bad
//!    frames are counted and dropped, never a panic);
//! 2. [`Device::poll_transmit`]`(now, buf)` until it returns `None`, sending
//!    each frame it writes into `buf` (send them in that order);
//! 3. [`Device::poll_timeout`] gives the next instant at which
//!    [`Device::handle_timeout`]`(now)` must be called (local ACK timer, end
//!    of an RNR wait); call it then, then poll transmit again;
//! 4. [`Device::poll_cq`] and [`Device::poll_event`] for completions and
//!    asynchronous events.
//!
//! The verbs (create / modify QP, post send / receive, register memory)
//! can be called between any of these.

#![deny(unsafe_code)]

pub mod completer;
pub mod congestion;
pub mod connect;
pub mod counters;
mod lend;
pub mod mr;
pub mod path;
pub mod qp;
pub mod requester;
pub mod responder;
pub mod selective;
pub(crate) mod sendlog;
mod timers;
mod turns;
pub mod ud;
pub mod vlan;
pub mod wr;

pub use congestion::{CongestionConfig, NpConfig};
pub use counters::{QpCounters, RxCounters};
pub use lend::{Lent, TxFrame, ZERO_COPY_MIN};
pub use mr::{Access, AccessError, Lkey, MrKeys, MrSpec, MrTable, PdId, Rkey};
pub use path::Offload;
pub use qp::{AddressVector, AttrMask, Mtu, QpAttr, QpState, QpType, Recovery};
pub use requester::QpConfig;
pub use ud::{AhId, UdDest};
pub use vlan::Vlan;
pub use wr::{Payload, RecvWr, SendOp, SendWr, Sge, SgeList, Wc, WcOpcode, WcStatus, SGE_INLINE};

use crate::cc::{CcCounters, CcState, Pacer, RateController, TraceRecord};
use crate::time::{DeadlineHeap, Duration, Instant};
use crate::wire::int::Trailer;
use crate::wire::{self, Ecn, Frame, MacAddr, Psn, Transport};
use completer::{Outcome, RxEnv};
use core::net::IpAddr;
use mr::KeyMap;
use path::Path;
use requester::{Requester, SendWqe, TxEnv, TxOutcome};
use responder::{RecvWqe, RespEnv, Responder, Verdict};
use std::collections::VecDeque;

/// What a verb refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("no such QP")]
    /// No QP has that number.
    NoSuchQp,
    #[error("no such completion queue")]
    /// No completion queue has that handle.
    NoSuchCq,
    #[error("no such protection domain")]
    /// No protection domain has that handle.
    NoSuchPd,
    #[error("QP number {0:#x} is in use or out of range")]
    /// The requested QP number is taken or outside 24 bits.
    QpnUnavailable(u32),
    #[error("invalid QP state transition {from:?} -> {to:?}")]
    /// The transition does not exist for an RC QP.
    InvalidTransition {
        /// The QP's state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    #[error("attribute {0} is required by this transition")]
    /// A transition left out an attribute it requires (the attribute's name).
    MissingAttr(&'static str),
    #[error("attribute {0} is not allowed in this transition")]
    /// A transition gave an attribute it does not allow (the attribute's name).
    UnexpectedAttr(&'static str),
    #[error("invalid attribute: {0}")]
    /// An attribute's value is out of range (what is wrong).
    InvalidAttr(&'static str),
    #[error("the QP's state does not allow this ({0:?})")]
    /// The QP's state does not allow the verb (the state).
    WrongState(QpState),
    #[error("the queue is full")]
    /// The send or receive queue has no room.
    QueueFull,
    #[error("too many scatter/gather elements")]
    /// A work request has more scatter/gather elements than the QP allows.
    TooManySge,
    #[error("inline data longer than max_inline_data")]
    /// Inline data longer than the QP's `max_inline_data`.
    InlineTooLong,
    #[error("invalid argument: {0}")]
    /// An argument is out of range (which and why).
    InvalidArgument(&'static str),
    #[error("still in use: {0}")]
    /// A resource is still used by another (which).
    Busy(&'static str),
    #[error("no such memory region")]
    /// No memory region has that key.
    NoSuchMr,
    #[error("no such address handle")]
    /// No address handle has that number.
    NoSuchAh,
}

/// A completion queue's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);

#[derive(Debug)]
struct Cq {
    q: VecDeque<Wc>,
    cap: usize,
    alive: bool,
    /// A completion found the CQ full since the last `CqOverrun` event.
    overrun: bool,
}

/// Where QPs put completions: the CQ, or the QP's backlog while the CQ is
/// full (completions are never lost; they wait for `poll_cq`).
pub(crate) struct Sink<'a> {
    cqs: &'a mut [Cq],
    backlog: &'a mut VecDeque<(CqId, Wc)>,
}

impl Sink<'_> {
    /// Whether completions for `cq` wait in the backlog: a new one queues
    /// behind them (each CQ keeps its order; a full send CQ does not hold
    /// back the receive CQ).
    fn waiting(&self, cq: CqId) -> bool {
        self.backlog.iter().any(|&(c, _)| c == cq)
    }
    pub fn push(&mut self, cq: CqId, wc: Wc) {
        let waiting = self.waiting(cq);
        match self.cqs.get_mut(cq.0 as usize) {
            Some(c) if !waiting && c.q.len() < c.cap => c.q.push_back(wc),
            Some(c) => {
                c.overrun = true;
                self.backlog.push_back((cq, wc));
            }
            None => self.backlog.push_back((cq, wc)),
        }
    }
    pub fn has_room(&self, cq: CqId) -> bool {
        !self.waiting(cq)
            && self
                .cqs
                .get(cq.0 as usize)
                .is_some_and(|c| c.q.len() < c.cap)
    }
}

/// Asynchronous events (`ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Event {
    /// The send queue of a QP in SQD has nothing outstanding
    /// (`IBV_EVENT_SQ_DRAINED`).
    SqDrained {
        /// The QP.
        qpn: u32,
    },
    /// A QP went to ERR because of a protocol error: `status` is that of
    /// the completion that reported it on this side, or, when this side's
    /// responder sent a fatal NAK, the one the peer's requester gets.
    QpError {
        /// The QP.
        qpn: u32,
        /// The completion status that reports the error.
        status: WcStatus,
    },
    /// A completion found CQ `cq` full (`IBV_EVENT_CQ_ERR`). Unlike a
    /// NIC, nothing is lost and no QP fails: the completion waits, in
    /// order, until `poll_cq` makes room. Reported once per overrun.
    CqOverrun {
        /// The completion queue's number.
        cq: u32,
    },
}

/// Sizes of a QP's queues and its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests the QP holds at most.
    pub max_send_wr: u32,
    /// Receive work requests the QP holds at most.
    pub max_recv_wr: u32,
    /// Scatter/gather elements per send work request at most.
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive work request at most.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send work request at most.
    pub max_inline_data: u32,
    /// Every send work request completes, signaled or not.
    pub sq_sig_all: bool,
    /// The QP number to use (e.g. to replay a capture); `None` picks one.
    pub qpn: Option<u32>,
    /// Transport tunables; `None` takes the device's.
    pub config: Option<QpConfig>,
    /// RC or UD (`ibv_qp_init_attr.qp_type`).
    pub qp_type: QpType,
}

/// Work requests' slots a QP reserves up front in each queue at most;
/// past this a deeper queue grows as it fills.
pub(crate) const QUEUE_PREALLOC: usize = 4096;

impl QpCaps {
    /// Bytes of the application's queues: the send and receive queue
    /// slots a QP with these caps reserves when it is created (what a
    /// verbs provider maps as the SQ and RQ rings). The engine's own state
    /// per QP comes on top.
    pub fn queue_bytes(&self) -> usize {
        let sq = (self.max_send_wr as usize).min(QUEUE_PREALLOC) * core::mem::size_of::<SendWqe>();
        let rq = (self.max_recv_wr as usize).min(QUEUE_PREALLOC) * core::mem::size_of::<RecvWqe>();
        sq + rq
    }
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 16,
            max_recv_sge: 16,
            max_inline_data: 256,
            sq_sig_all: false,
            qpn: None,
            config: None,
            qp_type: QpType::Rc,
        }
    }
}

/// A device's identity and limits.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    /// The port's MAC address, the source of every frame.
    pub mac: MacAddr,
    /// The GID table: index -> address (IPv4 GIDs as IPv4 addresses).
    pub gids: Vec<IpAddr>,
    /// The P_Key table (default: the one full-member default P_Key).
    pub pkeys: Vec<u16>,
    /// Most READ / atomic requests outstanding per QP, either side.
    pub max_qp_rd_atom: u8,
    /// Default transport tunables of new QPs.
    pub qp: QpConfig,
    /// The port's 802.1Q VLAN: frames sent carry its tag, frames of other
    /// VLANs are dropped ([`vlan`]); `None`: untagged.
    pub vlan: Option<Vlan>,
    /// ECN marking, the notification point and the reaction point.
    pub congestion: CongestionConfig,
    /// The port's active MTU: the largest UD message ([`ud`]).
    pub port_mtu: Mtu,
    /// What the NIC's hardware does instead (default: nothing, all checked).
    pub offload: Offload,
    /// Which of the port's datapaths this device is, when several share
    /// the port ([`wire::Shard`]): its QPs get only the numbers it owns.
    /// Default: the only one.
    pub shard: wire::Shard,
}

impl DeviceConfig {
    /// Port `mac` with the one GID `ip`, the default P_Key, no VLAN and
    /// default tunables and congestion settings.
    pub fn new(mac: MacAddr, ip: IpAddr) -> DeviceConfig {
        DeviceConfig {
            mac,
            gids: vec![ip.to_canonical()],
            pkeys: vec![wire::bth::DEFAULT_PKEY],
            max_qp_rd_atom: 16,
            qp: QpConfig::default(),
            vlan: None,
            congestion: CongestionConfig::default(),
            port_mtu: Mtu::Mtu1024,
            offload: Offload::default(),
            shard: wire::Shard::default(),
        }
    }
}

/// One QP's state, laid out for many QPs (`repr(C)`). With thousands of
/// QPs a QP's state leaves the caches between its turns, and a message
/// pays for each cache line of it that it touches; so what every packet
/// reads comes first, here and inside [`Requester`], [`Responder`],
/// [`Path`] and [`QpCounters`], and what only selective repeat, INT and
/// errors read lies behind it.
#[derive(Debug)]
#[repr(C)]
struct Qp {
    qpn: u32,
    pd: PdId,
    send_cq: CqId,
    recv_cq: CqId,
    state: QpState,
    /// In ERR after a protocol error: the queued NAK still goes out.
    drain_out: bool,
    /// On the device's ready list.
    ready: bool,
    /// Paced output waits for [`Pacer::release_at`].
    paced_wait: bool,
    /// On the device's list of QPs holding completions back.
    backlog_listed: bool,
    /// The deadline this QP holds in the device's timer heap.
    armed: Option<Instant>,
    /// The notification point: CNPs owed for CE-marked packets.
    np: congestion::Np,
    req: Requester,
    resp: Responder,
    path: Option<Path>,
    pacer: Pacer,
    /// The reaction point: the rate this QP may send at.
    cc: Box<dyn RateController>,
    backlog: VecDeque<(CqId, Wc)>,
    attr: QpAttr,
    caps: QpCaps,
    counters: QpCounters,
}

/// From this many QPs on, a device prefetches the state of the QPs a
/// received burst names ([`Device::prefetch`]) and of the QP a few turns
/// ahead on its ready list: their state (about 1.5 KB each) no longer
/// stays in a core's caches between turns. Below it the lookups would cost
/// more than they save (measured in `ferroce bench e2e`'s QP sweep: at
/// 100 QPs, prefetching was a few percent slower; at 10,000, faster by
/// about 1.6x).
pub const PREFETCH_MIN_QPS: usize = 256;

/// The local ACK timeout of attribute `t` (IBTA §9.7.6.1.3: 4.096 µs x
/// 2^t; 0 disables it).
pub fn ack_timeout(t: u8) -> Option<Duration> {
    (t != 0).then(|| Duration::from_nanos(4096u64 << t.min(31)))
}

/// The status a requester's completion gets for a fatal NAK (the one the
/// responder's `QpError` event reports too).
fn nak_status(code: wire::ext::NakCode) -> WcStatus {
    match code {
        wire::ext::NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        wire::ext::NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        _ => WcStatus::RemInvReqErr,
    }
}

/// Lists `qp` among the QPs holding completions back (once), if it holds
/// any.
fn note_backlog(list: &mut Vec<u32>, qp: &mut Qp) {
    if !qp.backlog_listed && !qp.backlog.is_empty() {
        qp.backlog_listed = true;
        list.push(qp.qpn);
    }
}

/// Moves `qp`'s held-back completions to their CQs as far as there is
/// room, in order per CQ (a full CQ holds back its own completions only);
/// returns whether some are still held back.
fn drain_backlog(qp: &mut Qp, cqs: &mut [Cq]) -> bool {
    let mut full: Vec<CqId> = Vec::new();
    let mut i = 0;
    while let Some(&(id, wc)) = qp.backlog.get(i) {
        if !full.contains(&id) {
            match cqs.get_mut(id.0 as usize) {
                Some(c) if c.q.len() < c.cap => {
                    c.q.push_back(wc);
                    qp.backlog.remove(i);
                    continue;
                }
                _ => full.push(id),
            }
        }
        i += 1;
    }
    !qp.backlog.is_empty()
}

/// P_Keys match if their low 15 bits do and one is a full member (IBTA
/// §10.9.3).
fn pkey_match(a: u16, b: u16) -> bool {
    (a & 0x7FFF) == (b & 0x7FFF) && (a | b) & 0x8000 != 0
}

impl Qp {
    fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// The requester, and what its completer needs borrowed beside it.
    fn completer<'a>(
        &'a mut self,
        mrs: &'a mut MrTable,
        cqs: &'a mut [Cq],
        now: Instant,
    ) -> (&'a mut Requester, RxEnv<'a>) {
        let env = RxEnv {
            mrs,
            pd: self.pd,
            mtu: self.attr.path_mtu.bytes(),
            qpn: self.qpn,
            send_cq: self.send_cq,
            sink: Sink {
                cqs,
                backlog: &mut self.backlog,
            },
            counters: &mut self.counters,
            sr: self.path.as_ref().is_some_and(|p| p.sr),
            timeout: ack_timeout(self.attr.timeout),
            retry_cnt: self.attr.retry_cnt,
            rnr_retry: self.attr.rnr_retry,
            now,
        };
        (&mut self.req, env)
    }

    /// Puts a completion on `cq` (or behind its backlog).
    fn complete(&mut self, cqs: &mut [Cq], cq: CqId, wc: Wc) {
        Sink {
            cqs,
            backlog: &mut self.backlog,
        }
        .push(cq, wc);
    }

    fn flush(&mut self, cqs: &mut [Cq]) {
        let mut sink = Sink {
            cqs,
            backlog: &mut self.backlog,
        };
        while let Some(w) = self.req.sq.pop_front() {
            self.counters.req_cqe_flush_error += 1;
            sink.push(
                self.send_cq,
                flushed(self.qpn, w.wr.wr_id, w.wr.op.wc_opcode(), w.len),
            );
        }
        let partial = self.resp.take_partial_recv();
        for w in partial.into_iter().chain(self.resp.rq.drain(..)) {
            self.counters.resp_cqe_flush_error += 1;
            sink.push(self.recv_cq, flushed(self.qpn, w.wr_id, WcOpcode::Recv, 0));
        }
        self.req.next = 0;
        self.req.next_pkt = 0;
        self.req.timer = None;
        self.req.rnr_until = None;
        self.req.stopped = true;
        self.req.rd_atomic_outstanding = 0;
    }
}

fn flushed(qpn: u32, wr_id: u64, opcode: WcOpcode, len: u32) -> Wc {
    Wc {
        wr_id,
        status: WcStatus::WrFlushErr,
        opcode,
        qp_num: qpn,
        byte_len: len,
        imm_data: None,
        invalidated_rkey: None,
        src_qp: None,
    }
}

/// One RoCE v2 endpoint running the RC transport.
#[derive(Debug)]
pub struct Device {
    cfg: DeviceConfig,
    /// Bytes of every frame sent, counted when the device stamps its own
    /// INT hop ([`CongestionConfig::int_host_hop`]).
    int_tx_bytes: u64,
    /// ECN-capable packets received, counted for
    /// [`NpConfig::mark_ce_every`].
    ect_received: u64,
    mrs: MrTable,
    cqs: Vec<Cq>,
    qps: KeyMap<Qp>,
    /// Address handles of UD sends.
    ahs: KeyMap<ud::Ah>,
    next_ah: u32,
    /// QPs that may have a frame to send, in turn.
    ready: VecDeque<u32>,
    next_qpn: u32,
    rx: RxCounters,
    /// Counters of destroyed QPs, kept in the device totals.
    gone: QpCounters,
    events: VecDeque<Event>,
    /// The QPs holding completions back for a full CQ (their `backlog`),
    /// each once, in the order they began to: [`Device::poll_cq`] walks
    /// these and no other QP.
    backlogged: Vec<u32>,
    /// Every QP's next deadline. Each method that acts on a QP re-arms that QP
    /// ([`Device::rearm`]), so [`Device::poll_timeout`], which drivers ask after
    /// every event, is a peek rather than a walk over every QP.
    timers: DeadlineHeap<u32>,
    /// The QPs [`Device::handle_timeout`] found due (kept for its capacity).
    due: Vec<u32>,
    /// Zero-copy send ([`Device::set_zero_copy`]): payloads of at least
    /// this many bytes may leave from their region in place.
    lend_min: Option<usize>,
}

impl Device {
    /// A device with `cfg`, checked; no PD, MR, CQ or QP yet.
    pub fn new(cfg: DeviceConfig) -> Result<Device, Error> {
        cfg.qp.check()?;
        if let Some(v) = cfg.vlan {
            v.check()?;
        }
        if cfg.gids.is_empty() || cfg.pkeys.is_empty() {
            return Err(Error::InvalidArgument("GID and P_Key tables need an entry"));
        }
        let Some(shard) = wire::Shard::new(cfg.shard.count, cfg.shard.index) else {
            return Err(Error::InvalidArgument(
                "a shard's index must be below its count, at most 64",
            ));
        };
        let cfg = DeviceConfig {
            gids: cfg.gids.iter().map(|g| g.to_canonical()).collect(),
            ..cfg
        };
        Ok(Device {
            mrs: MrTable::new().discarding_writes(cfg.offload.discard_write_payloads),
            cfg,
            cqs: Vec::new(),
            qps: KeyMap::default(),
            ahs: KeyMap::default(),
            next_ah: 1,
            ready: VecDeque::new(),
            next_qpn: shard.first_from(qp::FIRST_QPN),
            rx: RxCounters::default(),
            gone: QpCounters::default(),
            events: VecDeque::new(),
            backlogged: Vec::new(),
            int_tx_bytes: 0,
            ect_received: 0,
            timers: DeadlineHeap::default(),
            due: Vec::new(),
            lend_min: None,
        })
    }

    /// The configuration the device was created with.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    // ----- verbs: resources -----

    /// A new protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> PdId {
        self.mrs.alloc_pd()
    }

    /// Registers a memory region (`ibv_reg_mr`); returns its keys.
    pub fn reg_mr(&mut self, spec: MrSpec) -> Result<MrKeys, Error> {
        self.mrs.register(spec)
    }

    /// Deregisters the region `lkey`; false if there is none.
    pub fn dereg_mr(&mut self, lkey: Lkey) -> bool {
        self.mrs.deregister(lkey)
    }

    /// The bytes of a memory region.
    pub fn mr(&self, lkey: Lkey) -> Option<&[u8]> {
        self.mrs.bytes(lkey)
    }

    /// The bytes of a memory region, writable.
    pub fn mr_mut(&mut self, lkey: Lkey) -> Option<&mut [u8]> {
        self.mrs.bytes_mut(lkey)
    }

    /// Makes a region invalidated by a peer usable again.
    pub fn revalidate_mr(&mut self, lkey: Lkey) -> bool {
        self.mrs.revalidate(lkey)
    }

    /// A completion queue of `cap` entries (`ibv_create_cq`).
    pub fn create_cq(&mut self, cap: usize) -> Result<CqId, Error> {
        if cap == 0 {
            return Err(Error::InvalidArgument("a CQ needs room for one entry"));
        }
        self.cqs.push(Cq {
            q: VecDeque::with_capacity(cap.min(1 << 16)),
            cap,
            alive: true,
            overrun: false,
        });
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    fn cq_alive(&self, cq: CqId) -> bool {
        self.cqs.get(cq.0 as usize).is_some_and(|c| c.alive)
    }

    /// Destroys a CQ no QP uses (`ibv_destroy_cq`; its number is not
    /// reused). Completions still on it are dropped with it.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), Error> {
        if !self.cq_alive(cq) {
            return Err(Error::NoSuchCq);
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(Error::Busy("a QP uses this CQ"));
        }
        let c = &mut self.cqs[cq.0 as usize];
        c.alive = false;
        c.q = VecDeque::new();
        Ok(())
    }

    /// Frees a protection domain no QP or region uses (`ibv_dealloc_pd`).
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), Error> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::NoSuchPd);
        }
        if self.qps.values().any(|q| q.pd == pd) {
            return Err(Error::Busy("a QP is in this protection domain"));
        }
        if !self.mrs.dealloc_pd(pd) {
            return Err(Error::Busy("a memory region is in this protection domain"));
        }
        Ok(())
    }

    /// Registers `mem` as a region (its length is the region's).
    pub fn reg_mr_memory(
        &mut self,
        spec: MrSpec,
        mem: Box<dyn mr::RegionMemory>,
    ) -> Result<MrKeys, Error> {
        self.mrs.register_memory(spec, mem)
    }

    /// Whether a work request not yet completed names region `lkey` in its
    /// scatter/gather list.
    pub fn mr_in_use(&self, lkey: Lkey) -> bool {
        self.qps
            .values()
            .any(|q| q.req.sq.iter().any(|w| w.uses_lkey(lkey)) || q.resp.uses_lkey(lkey))
    }

    /// Takes up to `max` completions of `cq`, oldest first, into `out`;
    /// returns how many.
    pub fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<Wc>) -> usize {
        let Some(c) = self.cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = max.min(c.q.len());
        out.extend(c.q.drain(..n));
        if !self.backlogged.is_empty() {
            let (qps, cqs) = (&mut self.qps, &mut self.cqs);
            self.backlogged.retain(|qpn| {
                let Some(qp) = qps.get_mut(qpn) else {
                    return false;
                };
                qp.backlog_listed = drain_backlog(qp, cqs);
                qp.backlog_listed
            });
        }
        n
    }

    /// Completions waiting on `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0 as usize).map_or(0, |c| c.q.len())
    }

    /// A QP in RESET on `pd` with its CQs (`ibv_create_qp`); returns its number.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
    ) -> Result<u32, Error> {
        if !self.mrs.pd_exists(pd) {
            return Err(Error::NoSuchPd);
        }
        if !self.cq_alive(send_cq) || !self.cq_alive(recv_cq) {
            return Err(Error::NoSuchCq);
        }
        if caps.max_send_wr == 0 || caps.max_recv_wr == 0 {
            return Err(Error::InvalidArgument("queues need room for one request"));
        }
        let cfg = caps.config.unwrap_or(self.cfg.qp);
        cfg.check()?;
        let qpn = match caps.qpn {
            Some(n) => {
                // QP1 is the general services QP (IBTA §13.5.1): UD only.
                let gsi = n == ud::GSI_QPN && caps.qp_type == QpType::Ud;
                let ours = self.cfg.shard.owns(n);
                if !(gsi || (2..=qp::MAX_QPN).contains(&n)) || !ours || self.qps.contains_key(&n) {
                    return Err(Error::QpnUnavailable(n));
                }
                n
            }
            // A shard steps through the numbers it owns (QPN mod N).
            None => loop {
                let n = self.next_qpn;
                let step = self.cfg.shard.count;
                self.next_qpn = if n > qp::MAX_QPN - step {
                    self.cfg.shard.first_from(qp::FIRST_QPN)
                } else {
                    n + step
                };
                if !self.qps.contains_key(&n) {
                    break n;
                }
            },
        };
        let cc = self.new_rate_controller();
        self.qps.insert(
            qpn,
            Qp {
                qpn,
                pd,
                send_cq,
                recv_cq,
                state: QpState::Reset,
                attr: QpAttr::default(),
                caps,
                path: None,
                req: Requester::new(caps.max_send_wr as usize, cfg, cc.reads_acks()),
                resp: Responder::new(caps.max_recv_wr as usize, cfg.ack_every, pd),
                counters: QpCounters::default(),
                backlog: VecDeque::new(),
                backlog_listed: false,
                drain_out: false,
                ready: false,
                np: congestion::Np::default(),
                cc,
                pacer: Pacer::default(),
                paced_wait: false,
                armed: None,
            },
        );
        self.rearm(qpn);
        Ok(qpn)
    }

    fn new_rate_controller(&self) -> Box<dyn RateController> {
        let c = &self.cfg.congestion;
        let mut cc = c.rp.build(c.line_bps);
        cc.set_trace(c.trace);
        cc
    }

    /// Destroys a QP; its counters join the device's totals.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), Error> {
        let qp = self.qps.remove(&qpn).ok_or(Error::NoSuchQp)?;
        self.gone.add(&qp.counters);
        self.ready.retain(|&q| q != qpn);
        self.backlogged.retain(|&q| q != qpn);
        self.prune_timers();
        Ok(())
    }

    /// An address handle for UD sends to `av` (`ibv_create_ah`); `av.dmac`
    /// must be the next hop's already.
    pub fn create_ah(&mut self, av: &AddressVector) -> Result<AhId, Error> {
        let ah = ud::Ah::new(&self.cfg, av)?;
        let id = loop {
            let n = self.next_ah;
            self.next_ah = n.checked_add(1).unwrap_or(1);
            if !self.ahs.contains_key(&n) {
                break n;
            }
        };
        self.ahs.insert(id, ah);
        Ok(AhId(
            core::num::NonZeroU32::new(id).expect("AH numbers start at 1"),
        ))
    }

    /// Destroys an address handle (`ibv_destroy_ah`); a send posted with
    /// it and not yet sent completes with a local QP operation error.
    pub fn destroy_ah(&mut self, ah: AhId) -> Result<(), Error> {
        self.ahs
            .remove(&ah.0.get())
            .map(|_| ())
            .ok_or(Error::NoSuchAh)
    }

    /// A QP's state and attributes (`ibv_query_qp`).
    pub fn query_qp(&self, qpn: u32) -> Result<(QpState, QpAttr), Error> {
        let qp = self.qps.get(&qpn).ok_or(Error::NoSuchQp)?;
        Ok((qp.state, qp.attr))
    }

    /// Changes a QP's state and attributes (`ibv_modify_qp`); see
    /// [`qp::check_transition`] for what each transition takes.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<(), Error> {
        let r = self.apply_modify(qpn, attr, mask);
        self.rearm(qpn);
        r
    }

    fn apply_modify(&mut self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<(), Error> {
        let lim = qp::Limits {
            max_rd_atomic: self.cfg.max_qp_rd_atom,
            pkeys: self.cfg.pkeys.len(),
            gids: self.cfg.gids.len(),
        };
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoSuchQp)?;
        let from = qp.state;
        let to = qp::check_transition_of(qp.caps.qp_type, from, attr, mask, &lim)?;
        let mut new = qp.attr;
        let set = |m: AttrMask| mask.contains(m);
        if set(AttrMask::PKEY_INDEX) {
            new.pkey_index = attr.pkey_index;
        }
        if set(AttrMask::PORT) {
            new.port_num = attr.port_num;
        }
        if set(AttrMask::ACCESS_FLAGS) {
            new.qp_access_flags = attr.qp_access_flags;
        }
        if set(AttrMask::AV) {
            new.ah_attr = attr.ah_attr;
        }
        if set(AttrMask::PATH_MTU) {
            new.path_mtu = attr.path_mtu;
        }
        if set(AttrMask::DEST_QPN) {
            new.dest_qp_num = attr.dest_qp_num;
        }
        if set(AttrMask::RQ_PSN) {
            new.rq_psn = attr.rq_psn;
        }
        if set(AttrMask::SQ_PSN) {
            new.sq_psn = attr.sq_psn;
        }
        if set(AttrMask::MAX_DEST_RD_ATOMIC) {
            new.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if set(AttrMask::MAX_QP_RD_ATOMIC) {
            new.max_rd_atomic = attr.max_rd_atomic;
        }
        if set(AttrMask::MIN_RNR_TIMER) {
            new.min_rnr_timer = attr.min_rnr_timer;
        }
        if set(AttrMask::TIMEOUT) {
            new.timeout = attr.timeout;
        }
        if set(AttrMask::RETRY_CNT) {
            new.retry_cnt = attr.retry_cnt;
        }
        if set(AttrMask::RNR_RETRY) {
            new.rnr_retry = attr.rnr_retry;
        }
        if set(AttrMask::EN_SQD_ASYNC_NOTIFY) {
            new.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if set(AttrMask::QKEY) {
            new.qkey = attr.qkey;
        }
        let path = if set(AttrMask::AV) || set(AttrMask::DEST_QPN) || set(AttrMask::PKEY_INDEX) {
            match new.ah_attr {
                Some(av) => Some(path::build_path(&self.cfg, qpn, &new, &av)?),
                None => qp.path,
            }
        } else {
            qp.path
        };
        if let Some(p) = path.filter(|_| to == QpState::Rtr) {
            path::check_int(&p, new.path_mtu.bytes(), qp.cc.needs_int(), &qp.req.cfg)?;
        }
        // Everything checked: apply.
        qp.attr = new;
        qp.attr.qp_state = to;
        qp.attr.cur_qp_state = to;
        qp.path = path;
        let cfg = qp.req.cfg;
        match (from, to) {
            (_, QpState::Reset) => {
                qp.req = Requester::new(qp.caps.max_send_wr as usize, cfg, qp.cc.reads_acks());
                qp.resp = Responder::new(qp.caps.max_recv_wr as usize, cfg.ack_every, qp.pd);
                qp.backlog.clear();
                qp.path = None;
                qp.drain_out = false;
            }
            (_, QpState::Err) if from != QpState::Err => {
                qp.resp.clear_output();
                qp.drain_out = false;
                qp.flush(&mut self.cqs);
            }
            (QpState::Init, QpState::Rtr) => {
                qp.resp.e_psn = Psn::new(new.rq_psn);
            }
            (QpState::Rtr, QpState::Rts) => {
                qp.req
                    .start(Psn::new(new.sq_psn), new.retry_cnt, new.rnr_retry);
            }
            (QpState::Rts, QpState::Sqd) => qp.req.drained_reported = false,
            _ => {}
        }
        qp.state = to;
        note_backlog(&mut self.backlogged, qp);
        self.wake(qpn);
        Ok(())
    }

    /// Posts a send work request (`ibv_post_send`). In ERR it completes at
    /// once with a flush error.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), Error> {
        // A queued request moves no deadline (the ACK timer starts when
        // its first packet goes): nothing to re-arm.
        self.queue_send(qpn, wr)
    }

    fn queue_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoSuchQp)?;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Err => {}
            s => return Err(Error::WrongState(s)),
        }
        if qp.req.sq.len() >= qp.req.max_send_wr {
            return Err(Error::QueueFull);
        }
        match &wr.payload {
            Payload::Sges(s) if s.len() > qp.caps.max_send_sge as usize => {
                return Err(Error::TooManySge)
            }
            Payload::Inline(b) => {
                if b.len() > qp.caps.max_inline_data as usize {
                    return Err(Error::InlineTooLong);
                }
                if wr.op.is_read_or_atomic() {
                    return Err(Error::InvalidArgument("READ and atomics cannot be inline"));
                }
            }
            _ => {}
        }
        let len = wr.payload.len();
        if qp.caps.qp_type == QpType::Ud {
            ud::check_post(&self.cfg, &self.ahs, &wr.op, wr.ud.as_ref(), len)?;
        }
        if len > 1 << 31 {
            return Err(Error::InvalidArgument("message longer than 2^31 bytes"));
        }
        if wr.op.is_read_or_atomic() && qp.attr.max_rd_atomic == 0 && qp.state != QpState::Err {
            // It would never start (IBTA §11.2.5: max_rd_atomic 0 issues no
            // READ or atomic); refuse it rather than let it wait forever.
            return Err(Error::InvalidArgument(
                "max_rd_atomic is 0: this QP issues no READ or atomic",
            ));
        }
        if wr.op.is_atomic() && len != 8 {
            return Err(Error::InvalidArgument(
                "an atomic's local buffer is 8 bytes",
            ));
        }
        let mut wr = wr;
        wr.signaled |= qp.caps.sq_sig_all;
        if qp.state == QpState::Err {
            qp.counters.req_cqe_flush_error += 1;
            let wc = flushed(qpn, wr.wr_id, wr.op.wc_opcode(), len as u32);
            qp.complete(&mut self.cqs, qp.send_cq, wc);
            note_backlog(&mut self.backlogged, qp);
            return Ok(());
        }
        qp.req.sq.push_back(SendWqe {
            wr,
            len: len as u32,
            first_psn: None,
            npkts: 0,
            local_error: None,
            done: false,
            rsn: 0,
            got_ahead: 0,
        });
        timers::mark_ready(&mut self.ready, qp);
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), Error> {
        // A receive moves no deadline of its QP: nothing to re-arm.
        self.queue_recv(qpn, wr)
    }

    fn queue_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoSuchQp)?;
        if qp.state == QpState::Reset {
            return Err(Error::WrongState(QpState::Reset));
        }
        if qp.resp.rq.len() >= qp.resp.max_recv_wr {
            return Err(Error::QueueFull);
        }
        if wr.sges.len() > qp.caps.max_recv_sge as usize {
            return Err(Error::TooManySge);
        }
        if qp.state == QpState::Err {
            qp.counters.resp_cqe_flush_error += 1;
            let wc = flushed(qpn, wr.wr_id, WcOpcode::Recv, 0);
            qp.complete(&mut self.cqs, qp.recv_cq, wc);
            note_backlog(&mut self.backlogged, qp);
            return Ok(());
        }
        let len = wr.sges.iter().map(|s| s.length as u64).sum();
        qp.resp.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sges,
            len,
        });
        Ok(())
    }

    /// Receive work requests posted and not yet consumed.
    pub fn recv_queue_len(&self, qpn: u32) -> usize {
        self.qps.get(&qpn).map_or(0, |q| q.resp.rq.len())
    }

    /// Send work requests not yet completed.
    pub fn send_queue_len(&self, qpn: u32) -> usize {
        self.qps.get(&qpn).map_or(0, |q| q.req.sq.len())
    }

    // ----- driving -----

    /// Whether the device prefetches QP state: it has at least
    /// [`PREFETCH_MIN_QPS`] QPs (with fewer, their state stays in the
    /// caches). A driver asks once per received burst before giving
    /// [`Device::prefetch`] its frames.
    pub fn prefetches(&self) -> bool {
        self.qps.len() >= PREFETCH_MIN_QPS
    }

    /// A hint ahead of [`Device::handle`], for each frame of a received
    /// burst before any of them is handled: starts loading the state of
    /// the QP the frame names into the caches, so that the misses of a
    /// burst's QPs overlap instead of stalling one at a time. Does nothing
    /// unless [`Device::prefetches`]. Changes no state; costs a lookup.
    pub fn prefetch(&self, frame_head: &[u8]) {
        if self.prefetches() {
            if let Some(qpn) = wire::frame::peek_dest_qp(frame_head) {
                self.prefetch_qp(qpn);
            }
        }
    }

    /// Prefetches every cache line of QP `qpn`'s state, if it exists (loads
    /// through it would stall on the QP first).
    fn prefetch_qp(&self, qpn: u32) {
        if let Some(qp) = self.qps.get(&qpn) {
            crate::dpdk::prefetch::prefetch(qp);
        }
    }

    /// Handles one received frame.
    pub fn handle(&mut self, now: Instant, frame: &[u8]) {
        self.rx.frames += 1;
        match Frame::parse(frame) {
            // The bytes after the IP packet: an INT trailer on a path with
            // INT telemetry (crate::wire::int), else padding or nothing.
            Ok(f) => self.accept(now, &f, &frame[f.bytes().len()..]),
            Err(e) => self.refuse(e),
        }
    }

    /// Counts a frame that did not parse.
    fn refuse(&mut self, e: wire::Error) {
        match e {
            wire::Error::NotRoce => self.rx.not_roce += 1,
            _ => self.rx.malformed += 1,
        }
    }

    /// A parsed frame through the device's checks to its QP; `tail`: the
    /// bytes after its IP packet.
    fn accept(&mut self, now: Instant, f: &Frame<'_>, tail: &[u8]) {
        if !vlan::accepts(self.cfg.vlan, f.vlan()) {
            self.rx.wrong_vlan += 1;
            return;
        }
        if !self.cfg.offload.admits(f, &mut self.rx) {
            return;
        }
        if !self.cfg.gids.contains(&f.dst().to_canonical()) {
            self.rx.wrong_destination += 1;
            return;
        }
        // What follows acts on the addressed QP only.
        let qpn = f.dest_qp();
        if !self.deliver(now, f, tail) {
            self.rearm(qpn);
        }
    }

    /// A frame that passed the device's checks goes to the QP it names;
    /// `true` if that QP's timers were re-armed here (an RC packet it
    /// took), `false` if the caller must.
    fn deliver(&mut self, now: Instant, f: &Frame<'_>, tail: &[u8]) -> bool {
        if f.info.transport == Transport::Cnp {
            self.rx.cnp_received += 1;
            self.on_cnp(now, f);
            return false;
        }
        let ty = match f.info.transport {
            Transport::Rc => QpType::Rc,
            Transport::Ud => QpType::Ud,
            _ => {
                self.rx.unsupported_transport += 1;
                return false;
            }
        };
        // The one lookup of the QP for this frame.
        let Some(qp) = self.qps.get_mut(&f.dest_qp()) else {
            self.rx.unknown_qp += 1;
            return false;
        };
        if qp.caps.qp_type != ty {
            self.rx.unsupported_transport += 1;
            return false;
        }
        if ty == QpType::Ud {
            ud::receive(qp, &self.cfg.pkeys, &mut self.mrs, &mut self.cqs, f);
            note_backlog(&mut self.backlogged, qp);
            return false;
        }
        if !Self::admits(qp, &self.cfg.pkeys, f) {
            return false;
        }
        qp.counters.rcvd_pkts += 1;
        if f.ecn() == Ecn::Ce
            || congestion::emulated_ce(&self.cfg.congestion.np, &mut self.ect_received, f.ecn())
        {
            qp.counters.np_ecn_marked_roce_packets += 1;
            let pkey = f.bth_view().pkey();
            qp.np.on_marked(&self.cfg.congestion.np, now, pkey);
        }
        let (int, sr) = match &qp.path {
            Some(p) => p.trailers(tail, &mut qp.counters.int_missing),
            None => (None, None),
        };
        let fatal = if f.info.is_request() {
            if let Some(Trailer::Collect(s)) = int {
                qp.resp.int_echo = s;
            }
            let mut sink = Sink {
                cqs: &mut self.cqs,
                backlog: &mut qp.backlog,
            };
            let mut env = RespEnv {
                mrs: &mut self.mrs,
                pd: qp.pd,
                mtu: qp.attr.path_mtu.bytes(),
                access: qp.attr.qp_access_flags,
                max_dest_rd_atomic: qp.attr.max_dest_rd_atomic as u32,
                min_rnr_timer: qp.attr.min_rnr_timer,
                qpn: qp.qpn,
                recv_cq: qp.recv_cq,
                sink: &mut sink,
                counters: &mut qp.counters,
                sr: qp.path.as_ref().is_some_and(|p| p.sr),
            };
            match qp.resp.on_request(&mut env, f, sr) {
                Verdict::Fatal(code) => Some(nak_status(code)),
                _ => None,
            }
        } else if qp.state == QpState::Rtr {
            qp.counters.ghost_responses += 1;
            None
        } else {
            let (req, mut env) = qp.completer(&mut self.mrs, &mut self.cqs, now);
            let outcome = req.on_response(&mut env, f, sr);
            if let Some(mut ack) = qp.req.log.take() {
                if let Some(Trailer::Echo(s)) = int {
                    qp.counters.int_echoes += 1;
                    ack.int = Some(s);
                }
                // One byte: the switches this response crossed.
                ack.hops = Some(crate::cc::hops_from_ttl(f.ttl()));
                qp.cc.on_ack(now, &ack);
            }
            match outcome {
                Outcome::Fatal(s) => Some(s),
                Outcome::Ok => None,
            }
        };
        if let Some(status) = fatal {
            Self::protocol_error(qp, &mut self.cqs, &mut self.events, status);
        }
        Self::check_drained(qp, &mut self.events);
        note_backlog(&mut self.backlogged, qp);
        timers::mark_ready(&mut self.ready, qp);
        timers::arm(&mut self.timers, qp);
        let just = (qp.qpn, qp.armed);
        self.settle_timers(Some(just));
        true
    }

    /// The QP a packet (request, response or CNP) is for, if it may take
    /// it: the QP exists (else `unknown_qp`), can receive in its state
    /// (RTR, RTS or SQD, else `state_drops`), the P_Key matches its own
    /// (else `pkey_violation`) and the packet comes from its peer's GID
    /// (else `wrong_source`); rxe's `hdr_check()` checks the same.
    fn addressed_qp<'q>(
        qps: &'q mut KeyMap<Qp>,
        rx: &mut RxCounters,
        pkeys: &[u16],
        f: &Frame<'_>,
    ) -> Option<&'q mut Qp> {
        let Some(qp) = qps.get_mut(&f.dest_qp()) else {
            rx.unknown_qp += 1;
            return None;
        };
        Self::admits(qp, pkeys, f).then_some(qp)
    }

    /// The checks of [`Device::addressed_qp`] once the QP is found.
    fn admits(qp: &mut Qp, pkeys: &[u16], f: &Frame<'_>) -> bool {
        if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            qp.counters.state_drops += 1;
            return false;
        }
        if !pkey_match(f.bth_view().pkey(), pkeys[qp.attr.pkey_index as usize]) {
            qp.counters.pkey_violation += 1;
            return false;
        }
        let src = f.src().to_canonical();
        if !qp
            .attr
            .ah_attr
            .is_some_and(|av| av.dgid.to_canonical() == src)
        {
            qp.counters.wrong_source += 1;
            return false;
        }
        true
    }

    /// A CNP (reference B.8) goes to the reaction point of the QP it
    /// names, under the checks of [`Device::addressed_qp`].
    fn on_cnp(&mut self, now: Instant, f: &Frame<'_>) {
        let Some(qp) = Self::addressed_qp(&mut self.qps, &mut self.rx, &self.cfg.pkeys, f) else {
            return;
        };
        let before = *qp.cc.counters();
        qp.cc.on_cnp(now);
        qp.req.log.cnp();
        let after = qp.cc.counters();
        qp.counters.rp_cnp_handled += after.rp_cnp_handled - before.rp_cnp_handled;
        qp.counters.rp_cnp_ignored += after.rp_cnp_ignored - before.rp_cnp_ignored;
    }

    fn protocol_error(qp: &mut Qp, cqs: &mut [Cq], events: &mut VecDeque<Event>, st: WcStatus) {
        qp.state = QpState::Err;
        qp.attr.qp_state = QpState::Err;
        qp.attr.cur_qp_state = QpState::Err;
        qp.drain_out = true;
        qp.flush(cqs);
        events.push_back(Event::QpError {
            qpn: qp.qpn,
            status: st,
        });
    }

    fn check_drained(qp: &mut Qp, events: &mut VecDeque<Event>) {
        if qp.state == QpState::Sqd
            && !qp.req.drained_reported
            && qp.req.next_pkt == 0
            && !qp.req.outstanding()
        {
            qp.req.drained_reported = true;
            events.push_back(Event::SqDrained { qpn: qp.qpn });
        }
    }

    /// The next asynchronous event, if any (`ibv_get_async_event`).
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        let (i, c) = self.cqs.iter_mut().enumerate().find(|(_, c)| c.overrun)?;
        c.overrun = false;
        Some(Event::CqOverrun { cq: i as u32 })
    }

    // ----- observability -----

    /// A QP's counters.
    pub fn qp_counters(&self, qpn: u32) -> Option<&QpCounters> {
        self.qps.get(&qpn).map(|q| &q.counters)
    }

    /// The sum over every QP, destroyed ones included.
    pub fn counters(&self) -> QpCounters {
        let mut c = self.gone;
        for q in self.qps.values() {
            c.add(&q.counters);
        }
        c
    }

    /// What the receive path dropped before any QP saw it.
    pub fn rx_counters(&self) -> &RxCounters {
        &self.rx
    }

    /// The reaction point's rate, target rate, α and stages of a QP.
    pub fn cc_state(&self, qpn: u32) -> Option<CcState> {
        self.qps.get(&qpn).map(|q| q.cc.state())
    }

    /// The reaction point's counters of a QP.
    pub fn cc_counters(&self, qpn: u32) -> Option<CcCounters> {
        self.qps.get(&qpn).map(|q| *q.cc.counters())
    }

    /// Starts (`true`) or stops keeping a QP's rate-decision records
    /// (its initial setting is [`CongestionConfig::trace`]).
    pub fn set_cc_trace(&mut self, qpn: u32, on: bool) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.cc.set_trace(on);
        }
    }

    /// Moves a QP's rate-decision records (kept when
    /// [`CongestionConfig::trace`] is on) into `out`.
    pub fn drain_cc_trace(&mut self, qpn: u32, out: &mut Vec<TraceRecord>) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.cc.drain_trace(out);
        }
    }
}

/// Room for the largest frame the transport writes, the size of the
/// frame buffers it is given: path MTU 4096 plus Ethernet with a VLAN tag
/// (18), IPv6 (40), UDP (8), BTH (12), the largest extension headers
/// (AtomicETH, 28) and the ICRC (4) is 4206 B; 4224 is what a 4352 B mbuf
/// data room leaves after its 128 B headroom.
pub const MAX_FRAME: usize = 4224;
const _: () =
    assert!(4096 + wire::len::ROCE_MAX + wire::len::ATOMIC_ETH + wire::len::ICRC <= MAX_FRAME);
