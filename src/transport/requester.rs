//! The requester: send-queue work requests -> request packets (IBTA
//! §9.7.4 and §9.7.5.1; reference B.6, B.9).
//!
//! Each work request becomes one message: SEND and RDMA WRITE are cut at
//! the path MTU into FIRST / MIDDLE.. / LAST packets (ONLY when one packet
//! holds it; FIRST and MIDDLE carry exactly one MTU); a READ is one request
//! packet that consumes as many PSNs as its response has packets; an atomic
//! is one packet and one PSN. AckReq is set on the last packet of every
//! message, after every `ack_req_every` packets, and on the packet that
//! fills the rate controller's window (a window-limited requester would
//! otherwise wait for its ACK timeout; should a window shrink below what
//! is already in flight, one more packet goes, asking for the ACK). A
//! work request gets its
//! PSNs when its first packet leaves and keeps them for every
//! retransmission, so going back to a PSN (`Requester::rewind`) resumes
//! mid-message with the MIDDLE / LAST opcode and the right offset, and a
//! READ resumes with a RETH moved by the packets already answered.
//!
//! The completer half ([`super::completer`]) acknowledges, retries and
//! completes; both share this state.

use super::lend::Lending;
use super::mr::{Access, MrTable, PdId};
use super::path::{Packet, Path};
use super::selective::Scoreboard;
use super::sendlog::SendLog;
use super::wr::{Payload, SendOp, SendWr, WcStatus};
use super::QpCounters;
use crate::time::{Duration, Instant};
use crate::wire::ext::{AtomicEthRepr, RethRepr};
use crate::wire::int::{IntStack, Trailer};
use crate::wire::opcode::Op;
use crate::wire::sr::{Placement, SrTrailer};
use crate::wire::{ExtHeaders, Opcode, Psn};
use std::collections::VecDeque;

/// A posted send work request and its progress.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    pub len: u32,
    /// PSN of its first packet, once sent.
    pub first_psn: Option<Psn>,
    /// PSNs it uses (READ: response packets).
    pub npkts: u32,
    /// A local error found when it was about to be sent.
    pub local_error: Option<WcStatus>,
    /// Its response arrived in full (READ, atomic).
    pub done: bool,
    /// Its receive sequence number, if it consumes a receive WQE at the
    /// responder (a SEND, a WRITE with immediate): what selective repeat's
    /// place trailer names ([`crate::wire::sr::Placement::rsn`]).
    pub rsn: u32,
    /// Selective repeat: a READ's response packets taken ahead of their
    /// turn ([`super::selective`]).
    pub got_ahead: u32,
}

impl SendWqe {
    /// Whether its gather list (or, for a READ or atomic, the place the
    /// response lands) names the region `lkey`.
    pub fn uses_lkey(&self, lkey: u32) -> bool {
        matches!(&self.wr.payload, super::Payload::Sges(s) if s.iter().any(|s| s.lkey == lkey))
    }

    pub fn last_psn(&self) -> Option<Psn> {
        self.first_psn.map(|f| f.add(self.npkts - 1))
    }
    pub fn contains(&self, psn: Psn) -> bool {
        self.first_psn.is_some_and(|f| psn.in_range(f, self.npkts))
    }
}

/// Packets a message of `len` bytes needs at `mtu`.
pub(crate) fn packets(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// Tunables of a QP's transport that are not IBTA attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QpConfig {
    /// Set AckReq at least every this many packets (rxe: 64).
    pub ack_req_every: u32,
    /// Most request PSNs outstanding at once (rxe: 128,
    /// `RXE_MAX_UNACKED_PSNS`; a slow peer drops what a larger window
    /// floods it with, and go-back-N resends the whole window).
    pub max_inflight: u32,
    /// The responder also ACKs every this many packets without AckReq
    /// (0: only when AckReq is set, like rxe).
    pub ack_every: u32,
    /// Selective repeat only: IRN's short retransmission timeout, in µs,
    /// used while at most [`super::selective::RTO_LOW_PACKETS`] packets
    /// are in flight (IRN §3.2: 100 µs). Keep it above the path's RTT.
    pub rto_low_us: u32,
}

impl Default for QpConfig {
    fn default() -> QpConfig {
        QpConfig {
            ack_req_every: 64,
            max_inflight: 128,
            ack_every: 0,
            rto_low_us: super::selective::DEFAULT_RTO_LOW_US,
        }
    }
}

impl QpConfig {
    /// `InvalidArgument` if a tunable is out of range.
    pub fn check(&self) -> Result<(), super::Error> {
        if self.ack_req_every == 0 {
            return Err(super::Error::InvalidArgument(
                "ack_req_every must be at least 1",
            ));
        }
        if self.max_inflight == 0 || self.max_inflight > Psn::HALF / 2 {
            return Err(super::Error::InvalidArgument(
                "max_inflight must be in 1..=4194304",
            ));
        }
        if self.ack_req_every > self.max_inflight {
            return Err(super::Error::InvalidArgument(
                "ack_req_every must not exceed max_inflight",
            ));
        }
        if self.rto_low_us == 0 {
            return Err(super::Error::InvalidArgument(
                "rto_low_us must be at least 1",
            ));
        }
        Ok(())
    }

    /// IRN's short timeout ([`QpConfig::rto_low_us`]).
    pub fn rto_low(&self) -> Duration {
        Duration::from_micros(u64::from(self.rto_low_us))
    }
}

/// What the requester and completer of one QP hold. What every packet
/// reads comes first (`repr(C)`; see the QP's own struct), selective
/// repeat's scoreboard last.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Requester {
    pub sq: VecDeque<SendWqe>,
    /// Index in `sq` of the work request the next packet comes from.
    pub next: usize,
    pub max_send_wr: usize,
    pub cfg: QpConfig,
    /// Packet index within it.
    pub next_pkt: u32,
    /// PSN of the next packet sent (new or again).
    pub psn: Psn,
    /// One past the highest PSN ever sent.
    pub max_psn: Psn,
    /// PSN of the oldest packet not acknowledged.
    pub comp_psn: Psn,
    pub since_ackreq: u32,
    /// READs and atomics sent and not answered.
    pub rd_atomic_outstanding: u32,
    /// The receive sequence number of the next message that consumes a
    /// receive WQE.
    pub rsn_next: u32,
    pub retry_left: u8,
    pub rnr_left: u8,
    /// A work request failed locally: no message starts after it (those
    /// before it may still be sent again).
    pub stopped: bool,
    /// SQD reached with nothing outstanding has been reported.
    pub drained_reported: bool,
    /// The packet being built found its data's region gone.
    lost_region: bool,
    /// Selective repeat: the short timeout fired with no progress since;
    /// the next one is the QP's own.
    pub low_rto_spent: bool,
    /// The PSN the last retry went back to, until the next progress: a
    /// second NAK for it is a duplicate.
    pub rewound_at: Option<Psn>,
    /// Local ACK timer deadline.
    pub timer: Option<Instant>,
    /// No packet leaves before this (RNR NAK wait).
    pub rnr_until: Option<Instant>,
    /// Each packet's send time and length until acknowledged.
    pub log: SendLog,
    /// Selective repeat: what the responder acknowledged selectively.
    pub sack: Scoreboard,
}

/// What the requester needs of its QP to build a packet.
pub(crate) struct TxEnv<'a> {
    pub path: &'a Path,
    pub mtu: u32,
    pub pd: PdId,
    pub max_rd_atomic: u32,
    /// The local ACK timeout, `None` for "no timer".
    pub timeout: Option<Duration>,
    /// In SQD no new message starts.
    pub draining: bool,
    /// The reaction point's window: no new packet leaves while this many
    /// bytes are unacknowledged.
    pub window: Option<u64>,
    pub mrs: &'a MrTable,
    pub counters: &'a mut QpCounters,
    /// Zero-copy send: what may leave from its region in place
    /// ([`MrTable::lendable`]), and what the packet just written lent.
    pub lend: &'a mut Lending,
}

/// Why the requester sent nothing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TxOutcome {
    Sent(usize),
    Idle,
    /// The work request at the head failed locally: the QP must go to ERR.
    Fatal(WcStatus),
}

impl Requester {
    /// `log_acks`: keep the send log (the QP's rate controller reads
    /// acknowledgements).
    pub fn new(max_send_wr: usize, cfg: QpConfig, log_acks: bool) -> Requester {
        Requester {
            sq: VecDeque::with_capacity(max_send_wr.min(super::QUEUE_PREALLOC)),
            max_send_wr,
            cfg,
            next: 0,
            next_pkt: 0,
            psn: Psn::new(0),
            max_psn: Psn::new(0),
            comp_psn: Psn::new(0),
            rd_atomic_outstanding: 0,
            retry_left: 0,
            rnr_left: 0,
            timer: None,
            rnr_until: None,
            rewound_at: None,
            since_ackreq: 0,
            stopped: false,
            drained_reported: false,
            lost_region: false,
            log: if log_acks {
                SendLog::new(cfg.max_inflight)
            } else {
                SendLog::default()
            },
            sack: Scoreboard::default(),
            rsn_next: 0,
            low_rto_spent: false,
        }
    }

    /// Starts the send PSN space at RTR -> RTS.
    pub fn start(&mut self, sq_psn: Psn, retry_cnt: u8, rnr_retry: u8) {
        self.psn = sq_psn;
        self.max_psn = sq_psn;
        self.comp_psn = sq_psn;
        self.retry_left = retry_cnt;
        self.rnr_left = rnr_retry;
        self.log.clear();
        self.sack.reset(sq_psn);
        self.low_rto_spent = false;
    }

    /// Whether [`Requester::poll`] surely has nothing to send, whatever
    /// the time: no work request left to start or continue. (A path with
    /// selective repeat may owe resends outside the queue: never sure.)
    pub fn surely_idle(&self, sr: bool) -> bool {
        !sr && self.next >= self.sq.len()
    }

    /// Packets sent and not acknowledged. Every PSN of a started work
    /// request lies in `comp_psn..max_psn` until it is done (a READ or an
    /// atomic is done when its last response arrives, which is also when
    /// `comp_psn` passes it), so this is one comparison.
    pub fn outstanding(&self) -> bool {
        debug_assert!(
            self.comp_psn != self.max_psn
                || !self
                    .sq
                    .iter()
                    .take(self.next)
                    .any(|w| !w.done && w.first_psn.is_some()),
            "a started work request outside comp_psn..max_psn"
        );
        self.comp_psn != self.max_psn
    }

    /// Goes back to `to`: the next packet sent is the one with that PSN.
    pub fn rewind(&mut self, to: Psn) {
        for (i, w) in self.sq.iter().enumerate() {
            match w.first_psn {
                Some(f) if to.in_range(f, w.npkts) => {
                    self.next = i;
                    self.next_pkt = to.diff(f) as u32;
                    self.psn = to;
                    return;
                }
                Some(_) => {}
                None => {
                    self.next = i;
                    self.next_pkt = 0;
                    self.psn = to;
                    return;
                }
            }
        }
        self.next = self.sq.len();
        self.next_pkt = 0;
        self.psn = to;
    }

    /// Builds the next request packet into `buf`.
    pub fn poll(&mut self, env: &mut TxEnv<'_>, now: Instant, buf: &mut [u8]) -> TxOutcome {
        if self.rnr_until.is_some_and(|t| now < t) {
            return TxOutcome::Idle;
        }
        self.rnr_until = None;
        if env.path.sr {
            if let Some(sent) = self.resend_selected(env, now, buf) {
                return sent;
            }
            self.skip_selected(env);
        }
        let Some(w) = self.sq.get(self.next) else {
            return TxOutcome::Idle;
        };
        let retransmit = self.psn.before(self.max_psn);
        if w.first_psn.is_none() {
            // A new message: the rules that gate its start. After a local
            // error (`stopped`) none starts, but the messages before the
            // failed one may still need to be sent again.
            if self.stopped || env.draining {
                return TxOutcome::Idle;
            }
            if w.wr.fence && self.rd_atomic_outstanding > 0 {
                return TxOutcome::Idle;
            }
            if w.wr.op.is_read_or_atomic() && self.rd_atomic_outstanding >= env.max_rd_atomic {
                return TxOutcome::Idle;
            }
        }
        let npkts_now = match w.wr.op {
            SendOp::Read { .. } => w.first_psn.map_or_else(
                || packets(w.len, env.mtu),
                |f| w.npkts - self.psn.diff(f) as u32,
            ),
            _ => 1,
        };
        let inflight = self.psn.diff(self.comp_psn).max(0) as u32;
        if !retransmit && inflight > 0 && inflight + npkts_now > self.cfg.max_inflight {
            return TxOutcome::Idle;
        }
        // A full window holds new packets back only once the last packet
        // sent asked for an ACK: one that did not would leave the window
        // waiting for the ACK timeout (the responder ACKs on AckReq).
        if !retransmit
            && inflight > 0
            && self.since_ackreq == 0
            && env.window.is_some_and(|w| self.log.inflight_bytes() >= w)
        {
            return TxOutcome::Idle;
        }
        if w.first_psn.is_none() {
            // Check the local buffers once, when the message starts.
            let need = if w.wr.op.writes_local() {
                Access::LOCAL_WRITE
            } else {
                Access::NONE
            };
            let bad = match &w.wr.payload {
                Payload::Sges(s) => env.mrs.check_sges(env.pd, s, need).is_err(),
                Payload::Inline(_) => false,
            };
            let idx = self.next;
            let w = &mut self.sq[idx];
            if bad {
                w.local_error = Some(WcStatus::LocProtErr);
                self.stopped = true;
                if idx == 0 {
                    return TxOutcome::Fatal(WcStatus::LocProtErr);
                }
                return TxOutcome::Idle;
            }
            w.first_psn = Some(self.psn);
            w.npkts = match w.wr.op {
                SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
                _ => packets(w.len, env.mtu),
            };
            if w.wr.op.is_read_or_atomic() {
                self.rd_atomic_outstanding += 1;
            }
            if w.wr.op.consumes_recv() {
                w.rsn = self.rsn_next;
                self.rsn_next = (self.rsn_next + 1) & 0x00FF_FFFF;
            }
            env.counters.rdma_sends += 1;
        }
        let psn = self.psn;
        let Some(n) = self.emit(env, buf) else {
            if core::mem::take(&mut self.lost_region) {
                self.sq[self.next].local_error = Some(WcStatus::LocProtErr);
                self.stopped = true;
                if self.next == 0 {
                    return TxOutcome::Fatal(WcStatus::LocProtErr);
                }
            }
            return TxOutcome::Idle;
        };
        if retransmit {
            env.counters.retransmitted_pkts += 1;
        }
        self.log.sent(psn, now, n as u32, retransmit);
        if self.psn.after(self.max_psn) {
            self.max_psn = self.psn;
        }
        if self.timer.is_none() {
            self.timer = self.rto(env.path.sr, env.timeout).map(|t| now + t);
        }
        TxOutcome::Sent(n)
    }

    /// Selective repeat: the next packet a recovery resends alone, if any
    /// ([`super::selective`]).
    fn resend_selected(
        &mut self,
        env: &mut TxEnv<'_>,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<TxOutcome> {
        let (psn, saved) = self.selective_resend()?;
        let n = self.emit(env, buf);
        self.resume(saved);
        let n = n?;
        env.counters.retransmitted_pkts += 1;
        env.counters.sr_selective_resends += 1;
        self.log.sent(psn, now, n as u32, true);
        if self.timer.is_none() {
            self.timer = self.rto(true, env.timeout).map(|t| now + t);
        }
        Some(TxOutcome::Sent(n))
    }

    /// Selective repeat: a go-back-N resend passes over the SEND and WRITE
    /// packets the responder acknowledged selectively, but for the last
    /// packet in flight: it goes again, so that the responder's cumulative
    /// ACK covers those passed over (an ACK beyond an unanswered READ
    /// acknowledged none of them).
    fn skip_selected(&mut self, env: &mut TxEnv<'_>) {
        while self.psn.add(1).before(self.max_psn) && self.sack.has(self.psn) {
            let Some(w) = self.sq.get(self.next) else {
                return;
            };
            if w.wr.op.is_read_or_atomic() || w.first_psn.is_none() {
                return;
            }
            env.counters.sr_resends_skipped += 1;
            self.psn = self.psn.add(1);
            if self.next_pkt + 1 >= w.npkts {
                self.next += 1;
                self.next_pkt = 0;
            } else {
                self.next_pkt += 1;
            }
        }
    }

    /// Writes the packet `next_pkt` of `sq[next]` and moves on.
    fn emit(&mut self, env: &mut TxEnv<'_>, buf: &mut [u8]) -> Option<usize> {
        let mtu = env.mtu;
        let w = &self.sq[self.next];
        let first = w.first_psn?;
        let k = self.next_pkt;
        let psn = first.add(k);
        let mut ext = ExtHeaders::default();
        let (opcode, payload_len, consumed, last) = match w.wr.op {
            SendOp::Read { remote_addr, rkey } => {
                let off = k as u64 * mtu as u64;
                ext.reth = Some(RethRepr {
                    va: remote_addr.wrapping_add(off),
                    rkey,
                    dma_len: w.len - off as u32,
                });
                (Opcode::rc(Op::RdmaReadRequest), 0, w.npkts - k, true)
            }
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                ext.atomic = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: swap,
                    compare,
                });
                (Opcode::rc(Op::CompareSwap), 0, 1, true)
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                ext.atomic = Some(AtomicEthRepr {
                    va: remote_addr,
                    rkey,
                    swap_add: add,
                    compare: 0,
                });
                (Opcode::rc(Op::FetchAdd), 0, 1, true)
            }
            op => {
                let n = w.npkts;
                let pos_first = k == 0;
                let pos_last = k + 1 == n;
                let off = k * mtu;
                let len = (w.len - off).min(mtu) as usize;
                let code = message_opcode(&op, pos_first, pos_last);
                if pos_first {
                    if let SendOp::Write {
                        remote_addr, rkey, ..
                    }
                    | SendOp::WriteWithImm {
                        remote_addr, rkey, ..
                    } = op
                    {
                        ext.reth = Some(RethRepr {
                            va: remote_addr,
                            rkey,
                            dma_len: w.len,
                        });
                    }
                }
                if pos_last {
                    match op {
                        SendOp::SendWithImm(imm) | SendOp::WriteWithImm { imm, .. } => {
                            ext.imm = Some(imm)
                        }
                        SendOp::SendWithInv(rkey) => ext.ieth = Some(rkey),
                        _ => {}
                    }
                }
                (code, len, 1, pos_last)
            }
        };
        let mut pkt = Packet {
            opcode,
            psn,
            ack_req: false,
            solicited: last && w.wr.solicited,
            ext,
            int: env.path.int.then(|| Trailer::Collect(IntStack::default())),
            sr: env.path.sr.then(|| place(w, first)).flatten(),
        };
        // The packet that fills the rate controller's window asks for an
        // ACK, so that the window opens again.
        let fills_window = env.window.is_some_and(|win| {
            self.log.inflight_bytes() + env.path.frame_len(&pkt, payload_len) as u64 >= win
        });
        let ack_req = last || self.since_ackreq + 1 >= self.cfg.ack_req_every || fills_window;
        pkt.ack_req = ack_req;
        let off = k as u64 * mtu as u64;
        let (mrs, pd) = (env.mrs, env.pd);
        let lendable = match &w.wr.payload {
            Payload::Sges(s) if env.lend.wants(payload_len, env.path) => {
                mrs.lendable(pd, s, off, payload_len as u64)
            }
            _ => None,
        };
        let n = if let Some(l) = lendable {
            env.lend.emit(env.path, &pkt, l, buf, env.counters)?
        } else {
            let mut gathered = Ok(());
            let n = env
                .path
                .emit(&pkt, payload_len, buf, |dst| match &w.wr.payload {
                    Payload::Inline(b) => {
                        dst.copy_from_slice(&b[off as usize..off as usize + dst.len()])
                    }
                    Payload::Sges(s) => gathered = mrs.gather(pd, s, off, dst),
                })?;
            if gathered.is_err() {
                // A region deregistered since the message started: the
                // frame is not sent.
                self.lost_region = true;
                return None;
            }
            n
        };
        env.counters.sent_pkts += 1;
        self.since_ackreq = if ack_req { 0 } else { self.since_ackreq + 1 };
        self.psn = psn.add(consumed);
        if last {
            self.next += 1;
            self.next_pkt = 0;
        } else {
            self.next_pkt += 1;
        }
        Some(n)
    }
}

/// Selective repeat's place trailer for a packet of a SEND or WRITE whose
/// first PSN is `first` ([`crate::wire::sr`]); none for a READ or atomic.
fn place(w: &SendWqe, first: Psn) -> Option<SrTrailer> {
    let (rkey, va) = match w.wr.op {
        SendOp::Write {
            remote_addr, rkey, ..
        }
        | SendOp::WriteWithImm {
            remote_addr, rkey, ..
        } => (rkey, remote_addr),
        SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => (0, 0),
        _ => return None,
    };
    Some(SrTrailer::Place(Placement {
        first_psn: first,
        rsn: w.rsn,
        rkey,
        va,
        len: w.len,
    }))
}

/// The opcode of a SEND or WRITE packet by its place in the message
/// (IBTA §9.4.1; reference B.3).
fn message_opcode(op: &SendOp, first: bool, last: bool) -> Opcode {
    use Op::*;
    let o = match (op, first, last) {
        (SendOp::Send, true, true) => SendOnly,
        (SendOp::SendWithImm(_), true, true) => SendOnlyWithImmediate,
        (SendOp::SendWithInv(_), true, true) => SendOnlyWithInvalidate,
        (SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_), true, false) => SendFirst,
        (SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_), false, false) => {
            SendMiddle
        }
        (SendOp::Send, false, true) => SendLast,
        (SendOp::SendWithImm(_), false, true) => SendLastWithImmediate,
        (SendOp::SendWithInv(_), false, true) => SendLastWithInvalidate,
        (SendOp::WriteWithImm { .. }, true, true) => RdmaWriteOnlyWithImmediate,
        (_, true, true) => RdmaWriteOnly,
        (_, true, false) => RdmaWriteFirst,
        (_, false, false) => RdmaWriteMiddle,
        (SendOp::WriteWithImm { .. }, false, true) => RdmaWriteLastWithImmediate,
        (_, false, true) => RdmaWriteLast,
    };
    Opcode::rc(o)
}
