//! The responder: request packets -> execution and responses (IBTA
//! §9.7.5.1, §9.7.4.1.x; reference B.5, B.6). Each request goes through one
//! chain of checks, in this order, the first failing one deciding the
//! answer (the order of rxe_resp.c):
//!
//! 1. PSN (§9.7.5.1.1): ahead of the expected PSN -> one NAK PSN sequence
//!    error carrying the expected PSN, then silence until it arrives;
//!    behind it -> a duplicate (`Responder::duplicate`): SEND / WRITE
//!    re-ACKed (every packet, AckReq or not, with the last PSN executed),
//!    READ answered again from the requested PSN and offset,
//!    atomics answered from the saved result, never executed twice.
//! 2. Opcode sequence (§9.7.5.1.2): MIDDLE / LAST only inside a message of
//!    the same kind, FIRST / ONLY only outside one -> NAK invalid request.
//! 3. Opcode allowed by the QP's access flags (remote write / read /
//!    atomic), responder resources for READ and atomics -> NAK invalid
//!    request.
//! 4. A receive WQE for a SEND or a WRITE with immediate -> else RNR NAK
//!    with the QP's `min_rnr_timer` (the PSN is not consumed).
//! 5. Length (§9.7.4.1.x, C9-87..): FIRST / MIDDLE carry exactly one MTU,
//!    LAST 1..MTU, ONLY up to one MTU and, for WRITE, the RETH length; a
//!    SEND must fit its receive WQE -> NAK invalid request (the WQE
//!    completes with a local length error).
//! 6. R_Key, bounds and access of the memory region; 8-byte alignment for
//!    atomics -> NAK remote access error (misalignment: invalid request).
//! 7. Room on the receive CQ for the completion, and receive elements the
//!    data may be written to (L_Key, PD, local write, bounds; else the
//!    receive completes with a local protection error) -> else NAK remote
//!    operational error.
//! 8. Execute, advance the expected PSN (a READ by its response's
//!    packets), count the message in the MSN, and ACK if AckReq is set (or
//!    every `ack_every` packets).
//!
//! NAK invalid request, remote access and remote operational errors are
//! fatal to the QP (class A/C errors of §9.9.3.1.x): the NAK is sent, then
//! the QP goes to ERR. Responses leave in request order from one queue, so
//! an ACK never overtakes the READ response before it; consecutive ACKs
//! coalesce into the last one.

use super::lend::Lending;
use super::mr::{Access, AtomicOp, MrTable, PdId};
use super::path::{Packet, Path};
use super::requester::packets;
use super::selective::Reorder;
use super::wr::{Wc, WcOpcode, WcStatus};
use super::{CqId, QpCounters, Sink};
use crate::wire::ext::{AckSyndrome, AethRepr, NakCode, CREDIT_INVALID};
use crate::wire::int::{IntStack, Trailer};
use crate::wire::opcode::{Class, Op, Position};
use crate::wire::sr::SrTrailer;
use crate::wire::{ExtHeaders, Frame, Opcode, Psn};
use std::collections::VecDeque;

/// A posted receive work request.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: super::wr::SgeList,
    pub len: u64,
}

/// The message being received, between its FIRST and LAST packets.
#[derive(Debug)]
pub(super) enum InMsg {
    None,
    Send {
        wqe: RecvWqe,
        offset: u64,
    },
    Write {
        rkey: u32,
        va: u64,
        resid: u64,
        total: u64,
    },
}

/// What a READ or atomic left behind, to answer its duplicates.
#[derive(Debug, Clone, Copy)]
struct Resource {
    first: Psn,
    npkts: u32,
    kind: ResKind,
}

#[derive(Debug, Clone, Copy)]
enum ResKind {
    Read { va: u64, rkey: u32, len: u64 },
    Atomic { orig: u64 },
}

/// A response waiting to be sent.
#[derive(Debug, Clone, Copy)]
pub(super) enum Out {
    Ack {
        psn: Psn,
        syndrome: AckSyndrome,
        msn: u32,
        /// Selective repeat: the packet received ahead of `psn` that
        /// this NAK answers ([`crate::wire::sr`]).
        sack: Option<Psn>,
    },
    /// A READ response being streamed: next PSN, where its data is, and
    /// whether its first packet is a FIRST / ONLY (a new READ) or a MIDDLE /
    /// LAST (a READ answered again from the middle, as rxe does).
    Read {
        psn: Psn,
        va: u64,
        rkey: u32,
        resid: u64,
        fresh: bool,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
}

/// The responder half of a QP. What every packet reads comes first
/// (`repr(C)`; see the QP's own struct), selective repeat's and INT's
/// state last.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Responder {
    pub e_psn: Psn,
    /// Messages completed, 24 bits.
    pub msn: u32,
    pub(super) since_ack: u32,
    /// Receive WQEs consumed, 24 bits: the receive sequence number of the
    /// next message that takes one (selective repeat places by it).
    pub(super) rsn: u32,
    pub ack_every: u32,
    /// The protection domain of the QP's memory.
    pd: PdId,
    pub(super) sent_psn_nak: bool,
    /// A fatal NAK decided while sending (not while receiving).
    failed: Option<NakCode>,
    pub max_recv_wr: usize,
    pub rq: VecDeque<RecvWqe>,
    pub(super) out: VecDeque<Out>,
    pub(super) in_msg: InMsg,
    res: VecDeque<Resource>,
    /// Selective repeat: the packets placed ahead of `e_psn`.
    pub(super) reorder: Reorder,
    /// The hops the latest request's INT trailer collected, echoed in
    /// every response on a path with INT ([`crate::wire::int`]).
    pub int_echo: IntStack,
}

/// What the responder needs of its QP.
pub(crate) struct RespEnv<'a, 'b> {
    pub mrs: &'a mut MrTable,
    pub pd: PdId,
    pub mtu: u32,
    pub access: Access,
    pub max_dest_rd_atomic: u32,
    pub min_rnr_timer: u8,
    pub qpn: u32,
    pub recv_cq: CqId,
    pub sink: &'a mut Sink<'b>,
    pub counters: &'a mut QpCounters,
    /// The QP runs selective repeat ([`super::selective`]).
    pub sr: bool,
}

/// The responder's verdict on a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ok,
    /// An RNR NAK was queued: the PSN is not consumed.
    Rnr,
    /// A fatal NAK with this code was queued: the QP goes to ERR.
    Fatal(NakCode),
}

impl Responder {
    pub fn new(max_recv_wr: usize, ack_every: u32, pd: PdId) -> Responder {
        Responder {
            int_echo: IntStack::default(),
            e_psn: Psn::new(0),
            msn: 0,
            sent_psn_nak: false,
            rq: VecDeque::with_capacity(max_recv_wr.min(super::QUEUE_PREALLOC)),
            max_recv_wr,
            in_msg: InMsg::None,
            res: VecDeque::new(),
            out: VecDeque::new(),
            since_ack: 0,
            rsn: 0,
            reorder: Reorder::default(),
            ack_every,
            pd,
            failed: None,
        }
    }

    /// A fatal NAK queued by [`Responder::poll`] itself: the caller moves
    /// the QP to ERR.
    pub fn take_failure(&mut self) -> Option<NakCode> {
        self.failed.take()
    }

    /// Whether a response is waiting.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Whether the next response is READ data (paced like requests; ACKs
    /// are not).
    pub fn next_is_read_data(&self) -> bool {
        matches!(self.out.front(), Some(Out::Read { .. }))
    }

    /// Drops every queued response (the QP was moved to ERR or RESET by
    /// its owner: it sends nothing more).
    pub fn clear_output(&mut self) {
        self.out.clear();
    }

    /// Whether a posted receive (or the one a SEND is filling) names the
    /// region `lkey`.
    pub fn uses_lkey(&self, lkey: u32) -> bool {
        let partial = match &self.in_msg {
            InMsg::Send { wqe, .. } => Some(wqe),
            _ => None,
        };
        self.rq
            .iter()
            .chain(partial)
            .any(|w| w.sges.iter().any(|s| s.lkey == lkey))
    }

    /// Takes the receive WQE of an unfinished SEND (to flush it).
    pub fn take_partial_recv(&mut self) -> Option<RecvWqe> {
        match core::mem::replace(&mut self.in_msg, InMsg::None) {
            InMsg::Send { wqe, .. } => Some(wqe),
            _ => None,
        }
    }

    pub(super) fn push_ack(&mut self, psn: Psn, syndrome: AckSyndrome) {
        let msn = self.msn;
        if let AckSyndrome::Ack { .. } = syndrome {
            if let Some(Out::Ack {
                psn: p,
                syndrome: AckSyndrome::Ack { .. },
                msn: m,
                ..
            }) = self.out.back_mut()
            {
                // Coalesce: the newer ACK covers the older.
                *p = psn;
                *m = msn;
                return;
            }
        }
        self.out.push_back(Out::Ack {
            psn,
            syndrome,
            msn,
            sack: None,
        });
    }

    /// The one NAK PSN sequence error for the expected PSN that packets
    /// ahead of it get, until it arrives (§9.7.5.1.1).
    pub(super) fn nak_sequence_once(&mut self, env: &mut RespEnv<'_, '_>) {
        if !self.sent_psn_nak {
            self.sent_psn_nak = true;
            env.counters.seq_naks_sent += 1;
            let e = self.e_psn;
            self.push_ack(e, AckSyndrome::Nak(NakCode::PsnSequenceError));
        }
    }

    /// Takes the receive WQE of the next message that consumes one.
    pub(super) fn take_wqe(&mut self) -> Option<RecvWqe> {
        let w = self.rq.pop_front()?;
        self.rsn = (self.rsn + 1) & 0x00FF_FFFF;
        Some(w)
    }

    pub(super) fn nak(&mut self, env: &mut RespEnv<'_, '_>, psn: Psn, code: NakCode) -> Verdict {
        match code {
            NakCode::InvalidRequest => env.counters.resp_invalid_request += 1,
            NakCode::RemoteAccessError => env.counters.resp_remote_access_errors += 1,
            NakCode::RemoteOperationalError => env.counters.resp_remote_operational_errors += 1,
            _ => {}
        }
        self.push_ack(psn, AckSyndrome::Nak(code));
        Verdict::Fatal(code)
    }

    fn complete_recv(&mut self, env: &mut RespEnv<'_, '_>, wqe: &RecvWqe, wc: Wc) {
        let _ = wqe;
        if wc.status != WcStatus::Success {
            env.counters.resp_cqe_error += 1;
        }
        env.sink.push(env.recv_cq, wc);
    }

    fn recv_wc(env: &RespEnv<'_, '_>, wr_id: u64, status: WcStatus, opcode: WcOpcode) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            qp_num: env.qpn,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            src_qp: None,
        }
    }

    /// Handles one request packet, with its selective-repeat trailer if
    /// it has one.
    pub fn on_request(
        &mut self,
        env: &mut RespEnv<'_, '_>,
        f: &Frame<'_>,
        sr: Option<SrTrailer>,
    ) -> Verdict {
        let d = f.psn().diff(self.e_psn);
        if d > 0 && env.sr {
            return self.on_ahead(env, f, d as u32, sr);
        }
        let before = self.e_psn;
        let v = self.in_turn(env, f);
        if env.sr && v == Verdict::Ok && self.e_psn != before {
            return self.commit_ahead(env, before);
        }
        v
    }

    /// The chain of checks of the module docs, for a packet that is not
    /// placed ahead of its turn.
    fn in_turn(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>) -> Verdict {
        let psn = f.psn();
        let info = f.info;
        // 1. PSN.
        let d = psn.diff(self.e_psn);
        if d > 0 {
            env.counters.out_of_sequence += 1;
            self.nak_sequence_once(env);
            return Verdict::Ok;
        }
        if d < 0 {
            env.counters.duplicate_request += 1;
            self.duplicate(env, f);
            return Verdict::Ok;
        }
        // 2. Opcode sequence.
        let cont = matches!(info.position, Position::Middle | Position::Last);
        let seq_ok = match (&self.in_msg, info.class) {
            (InMsg::Send { .. }, Class::Send) | (InMsg::Write { .. }, Class::Write) => cont,
            (InMsg::None, _) => !cont,
            _ => false,
        };
        if !seq_ok {
            env.counters.opcode_errors += 1;
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        // 3. Opcode allowed.
        let need = match info.class {
            Class::Write => Some(Access::REMOTE_WRITE),
            Class::ReadRequest => Some(Access::REMOTE_READ),
            Class::Atomic => Some(Access::REMOTE_ATOMIC),
            Class::Send => None,
            _ => {
                env.counters.opcode_errors += 1;
                return self.nak(env, psn, NakCode::InvalidRequest);
            }
        };
        if need.is_some_and(|a| !env.access.contains(a)) {
            env.counters.opcode_errors += 1;
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        if matches!(info.class, Class::ReadRequest | Class::Atomic) && env.max_dest_rd_atomic == 0 {
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        let verdict = match info.class {
            Class::Send => self.send(env, f),
            Class::Write => self.write(env, f),
            Class::ReadRequest => return self.read(env, f),
            Class::Atomic => return self.atomic(env, f),
            _ => Verdict::Ok,
        };
        match verdict {
            Verdict::Ok => {}
            Verdict::Rnr => return Verdict::Ok,
            v @ Verdict::Fatal(_) => return v,
        }
        self.sent_psn_nak = false;
        self.e_psn = psn.add(1);
        self.since_ack += 1;
        if f.ack_req() || (self.ack_every > 0 && self.since_ack >= self.ack_every) {
            self.since_ack = 0;
            env.counters.acks_sent += 1;
            self.push_ack(
                psn,
                AckSyndrome::Ack {
                    credit: CREDIT_INVALID,
                },
            );
        }
        Verdict::Ok
    }

    /// Answers a request whose PSN is behind the expected one.
    fn duplicate(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>) {
        let psn = f.psn();
        match f.info.class {
            // Every duplicate SEND / WRITE packet is ACKed with the last PSN
            // executed, AckReq or not (C9-105; rxe since "RDMA/rxe: Fix
            // missing acks from responder", 2021). A requester that went
            // back to packets we already have learns where we are, even
            // when the packet at our expected PSN keeps being lost behind
            // them (the one PSN sequence NAK has been spent): without this
            // ACK, a retry that resends FIRST, MIDDLE.. (no AckReq) and
            // loses the next packet every time never progresses.
            Class::Send | Class::Write => {
                env.counters.acks_sent += 1;
                let last = self.e_psn.sub(1);
                self.push_ack(
                    last,
                    AckSyndrome::Ack {
                        credit: CREDIT_INVALID,
                    },
                );
            }
            Class::ReadRequest => {
                let Some(reth) = f.reth() else { return };
                let Some(r) = self.res.iter().find(|r| psn.in_range(r.first, r.npkts)) else {
                    return; // forgotten: class D, dropped
                };
                let ResKind::Read { va, rkey, len } = r.kind else {
                    return;
                };
                // The request must ask for the same data or a tail of it.
                let end = va.wrapping_add(len);
                let rend = reth.va.wrapping_add(reth.dma_len as u64);
                if reth.rkey != rkey || reth.va < va || rend > end || rend < reth.va {
                    return;
                }
                let fresh = psn == r.first;
                let msn = self.msn;
                self.out.push_back(Out::Read {
                    psn,
                    va: reth.va,
                    rkey,
                    resid: reth.dma_len as u64,
                    fresh,
                    msn,
                });
            }
            Class::Atomic => {
                let Some(r) = self.res.iter().find(|r| r.first == psn) else {
                    return;
                };
                if let ResKind::Atomic { orig } = r.kind {
                    let msn = self.msn;
                    self.out.push_back(Out::AtomicAck { psn, orig, msn });
                }
            }
            _ => {}
        }
    }

    /// Length rule of a SEND / WRITE packet by its position.
    pub(super) fn length_ok(pos: Position, len: usize, mtu: u32) -> bool {
        let mtu = mtu as usize;
        match pos {
            Position::First | Position::Middle => len == mtu,
            Position::Last => len >= 1 && len <= mtu,
            Position::Only => len <= mtu,
        }
    }

    fn send(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>) -> Verdict {
        let psn = f.psn();
        let info = f.info;
        if info.starts_message() {
            if self.rq.is_empty() {
                return self.rnr(env, psn);
            }
            let wqe = self.take_wqe().expect("a receive WQE");
            self.in_msg = InMsg::Send { wqe, offset: 0 };
        }
        let InMsg::Send { wqe, offset } = &mut self.in_msg else {
            return Verdict::Ok;
        };
        let len = f.payload.len() as u64;
        if !Self::length_ok(info.position, f.payload.len(), env.mtu) || *offset + len > wqe.len {
            if *offset + len > wqe.len {
                env.counters.resp_local_length_error += 1;
            }
            let wqe = wqe.clone();
            self.in_msg = InMsg::None;
            let wc = Self::recv_wc(env, wqe.wr_id, WcStatus::LocLenErr, WcOpcode::Recv);
            self.complete_recv(env, &wqe, wc);
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        if info.ends_message() && !env.sink.has_room(env.recv_cq) {
            return self.nak(env, psn, NakCode::RemoteOperationalError);
        }
        if env
            .mrs
            .check_scatter(env.pd, &wqe.sges, *offset, f.payload, Access::LOCAL_WRITE)
            .is_err()
        {
            // A receive WQE whose L_Key, PD, rights or bounds do not fit
            // (nothing was written): a local protection error on the
            // receive and, class A, NAK remote operational error (IBTA
            // §9.9.3.1.2; rxe: malformed WQE).
            let wqe = wqe.clone();
            self.in_msg = InMsg::None;
            let wc = Self::recv_wc(env, wqe.wr_id, WcStatus::LocProtErr, WcOpcode::Recv);
            self.complete_recv(env, &wqe, wc);
            return self.nak(env, psn, NakCode::RemoteOperationalError);
        }
        *offset += len;
        if info.ends_message() {
            return self.finish_send(env, psn, f.imm(), f.ieth());
        }
        Verdict::Ok
    }

    /// The LAST or ONLY packet of a SEND is in: its receive completes
    /// (with the immediate, or invalidating `ieth`), and the MSN moves.
    pub(super) fn finish_send(
        &mut self,
        env: &mut RespEnv<'_, '_>,
        psn: Psn,
        imm: Option<u32>,
        ieth: Option<u32>,
    ) -> Verdict {
        let InMsg::Send { wqe, offset } = core::mem::replace(&mut self.in_msg, InMsg::None) else {
            return Verdict::Ok;
        };
        let mut wc = Self::recv_wc(env, wqe.wr_id, WcStatus::Success, WcOpcode::Recv);
        wc.byte_len = offset as u32;
        wc.imm_data = imm;
        if let Some(rkey) = ieth {
            if env.mrs.invalidate(rkey, env.pd).is_err() {
                let mut wc = wc;
                wc.status = WcStatus::RemInvReqErr;
                self.complete_recv(env, &wqe, wc);
                return self.nak(env, psn, NakCode::InvalidRequest);
            }
            wc.invalidated_rkey = Some(rkey);
        }
        self.complete_recv(env, &wqe, wc);
        env.counters.rdma_recvs += 1;
        self.msn = (self.msn + 1) & 0x00FF_FFFF;
        Verdict::Ok
    }

    fn rnr(&mut self, env: &mut RespEnv<'_, '_>, psn: Psn) -> Verdict {
        env.counters.out_of_buffer += 1;
        // Later packets of the window are dropped until this one comes
        // again (they are ahead of the expected PSN; one NAK is enough).
        self.sent_psn_nak = true;
        let timer = env.min_rnr_timer;
        self.push_ack(psn, AckSyndrome::RnrNak { timer });
        Verdict::Rnr
    }

    fn write(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>) -> Verdict {
        let psn = f.psn();
        let info = f.info;
        let len = f.payload.len() as u64;
        let imm = info.has_immediate();
        if imm && info.ends_message() && self.rq.is_empty() {
            return self.rnr(env, psn);
        }
        if info.starts_message() {
            let Some(reth) = f.reth() else {
                return self.nak(env, psn, NakCode::InvalidRequest);
            };
            let total = reth.dma_len as u64;
            let ok = match info.position {
                Position::Only => len == total && len <= env.mtu as u64,
                _ => len == env.mtu as u64 && total > len,
            };
            if !ok {
                return self.nak(env, psn, NakCode::InvalidRequest);
            }
            if total > 0
                && env
                    .mrs
                    .check_remote(reth.rkey, env.pd, reth.va, total, Access::REMOTE_WRITE)
                    .is_err()
            {
                return self.nak(env, psn, NakCode::RemoteAccessError);
            }
            self.in_msg = InMsg::Write {
                rkey: reth.rkey,
                va: reth.va,
                resid: total,
                total,
            };
        }
        let InMsg::Write {
            rkey,
            va,
            resid,
            total: _,
        } = &mut self.in_msg
        else {
            return Verdict::Ok;
        };
        let ok = match info.position {
            Position::Middle => len == env.mtu as u64 && *resid > len,
            Position::Last => len == *resid && len >= 1 && len <= env.mtu as u64,
            _ => true,
        };
        if !ok {
            self.in_msg = InMsg::None;
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        if imm && info.ends_message() && !env.sink.has_room(env.recv_cq) {
            self.in_msg = InMsg::None;
            return self.nak(env, psn, NakCode::RemoteOperationalError);
        }
        // Checked per packet as it is written: the region may have been
        // deregistered or invalidated since the FIRST packet.
        if len > 0 && env.mrs.write_remote(*rkey, env.pd, *va, f.payload).is_err() {
            self.in_msg = InMsg::None;
            return self.nak(env, psn, NakCode::RemoteAccessError);
        }
        *va = va.wrapping_add(len);
        *resid -= len;
        if info.ends_message() {
            let imm = if imm { f.imm() } else { None };
            return self.finish_write(env, psn, imm);
        }
        Verdict::Ok
    }

    /// The LAST or ONLY packet of a WRITE is in: with an immediate, a
    /// receive completes; the MSN moves.
    pub(super) fn finish_write(
        &mut self,
        env: &mut RespEnv<'_, '_>,
        _psn: Psn,
        imm: Option<u32>,
    ) -> Verdict {
        let InMsg::Write { total, .. } = core::mem::replace(&mut self.in_msg, InMsg::None) else {
            return Verdict::Ok;
        };
        env.counters.rx_write_requests += 1;
        if let Some(imm) = imm {
            if let Some(wqe) = self.take_wqe() {
                let mut wc =
                    Self::recv_wc(env, wqe.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
                wc.byte_len = total as u32;
                wc.imm_data = Some(imm);
                self.complete_recv(env, &wqe, wc);
            }
        }
        self.msn = (self.msn + 1) & 0x00FF_FFFF;
        Verdict::Ok
    }

    fn read(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>) -> Verdict {
        let psn = f.psn();
        let Some(reth) = f.reth() else {
            return self.nak(env, psn, NakCode::InvalidRequest);
        };
        self.read_at(env, psn, reth)
    }

    /// Executes the READ request of PSN `psn` asking for `reth`: its
    /// response is queued, the expected PSN moves past its packets.
    pub(super) fn read_at(
        &mut self,
        env: &mut RespEnv<'_, '_>,
        psn: Psn,
        reth: crate::wire::ext::RethRepr,
    ) -> Verdict {
        let len = reth.dma_len as u64;
        if len > 1 << 31 {
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        if len > 0
            && env
                .mrs
                .check_remote(reth.rkey, env.pd, reth.va, len, Access::REMOTE_READ)
                .is_err()
        {
            return self.nak(env, psn, NakCode::RemoteAccessError);
        }
        let npkts = packets(reth.dma_len, env.mtu);
        self.msn = (self.msn + 1) & 0x00FF_FFFF;
        env.counters.rx_read_requests += 1;
        self.remember(
            env,
            Resource {
                first: psn,
                npkts,
                kind: ResKind::Read {
                    va: reth.va,
                    rkey: reth.rkey,
                    len,
                },
            },
        );
        let msn = self.msn;
        self.out.push_back(Out::Read {
            psn,
            va: reth.va,
            rkey: reth.rkey,
            resid: len,
            fresh: true,
            msn,
        });
        self.sent_psn_nak = false;
        self.e_psn = psn.add(npkts);
        Verdict::Ok
    }

    fn atomic(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>) -> Verdict {
        let psn = f.psn();
        let Some(a) = f.ext().atomic else {
            return self.nak(env, psn, NakCode::InvalidRequest);
        };
        let cas = f.info.opcode == Opcode::rc(Op::CompareSwap);
        self.atomic_at(env, psn, a, cas)
    }

    /// Executes the atomic request of PSN `psn` (`cas`: compare and swap,
    /// else fetch and add): its acknowledgement is queued.
    pub(super) fn atomic_at(
        &mut self,
        env: &mut RespEnv<'_, '_>,
        psn: Psn,
        a: crate::wire::ext::AtomicEthRepr,
        cas: bool,
    ) -> Verdict {
        if a.va % 8 != 0 {
            return self.nak(env, psn, NakCode::InvalidRequest);
        }
        if env
            .mrs
            .check_remote(a.rkey, env.pd, a.va, 8, Access::REMOTE_ATOMIC)
            .is_err()
        {
            return self.nak(env, psn, NakCode::RemoteAccessError);
        }
        let op = if cas {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = env.mrs.atomic(a.rkey, a.va, op);
        self.msn = (self.msn + 1) & 0x00FF_FFFF;
        env.counters.rx_atomic_requests += 1;
        self.remember(
            env,
            Resource {
                first: psn,
                npkts: 1,
                kind: ResKind::Atomic { orig },
            },
        );
        let msn = self.msn;
        self.out.push_back(Out::AtomicAck { psn, orig, msn });
        self.sent_psn_nak = false;
        self.e_psn = psn.add(1);
        Verdict::Ok
    }

    /// Keeps the last `max_dest_rd_atomic` READ / atomic resources.
    fn remember(&mut self, env: &RespEnv<'_, '_>, r: Resource) {
        while self.res.len() >= env.max_dest_rd_atomic.max(1) as usize {
            self.res.pop_front();
        }
        self.res.push_back(r);
    }

    /// Writes the next response into `buf`; a READ response's payload
    /// may stay in its region ([`Lending`]: zero-copy send).
    pub(super) fn poll(
        &mut self,
        path: &Path,
        mtu: u32,
        mrs: &MrTable,
        counters: &mut QpCounters,
        buf: &mut [u8],
        lend: &mut Lending,
    ) -> Option<usize> {
        let pd = self.pd;
        let echo = path.int.then_some(Trailer::Echo(self.int_echo));
        let out = self.out.front_mut()?;
        let aeth = |syndrome, msn| AethRepr { syndrome, msn };
        let ack = AckSyndrome::Ack {
            credit: CREDIT_INVALID,
        };
        let n = match out {
            Out::Ack {
                psn,
                syndrome,
                msn,
                sack,
            } => {
                let a = aeth(*syndrome, *msn);
                let n = path.emit_ack(*psn, a, echo, sack.map(SrTrailer::Sack), buf)?;
                self.out.pop_front();
                n
            }
            Out::AtomicAck { psn, orig, msn } => {
                let ext = ExtHeaders {
                    aeth: Some(aeth(ack, *msn)),
                    atomic_ack: Some(*orig),
                    ..ExtHeaders::default()
                };
                let p = Packet {
                    int: echo,
                    ..Packet::new(Opcode::rc(Op::AtomicAcknowledge), *psn, ext)
                };
                let n = path.emit(&p, 0, buf, |_| {})?;
                self.out.pop_front();
                n
            }
            Out::Read {
                psn,
                va,
                rkey,
                resid,
                fresh,
                msn,
            } => {
                let mtu = mtu as u64;
                let len = (*resid).min(mtu);
                let last = *resid <= mtu;
                let op = match (*fresh, last) {
                    (true, true) => Op::RdmaReadResponseOnly,
                    (true, false) => Op::RdmaReadResponseFirst,
                    (false, false) => Op::RdmaReadResponseMiddle,
                    (false, true) => Op::RdmaReadResponseLast,
                };
                let mut ext = ExtHeaders::default();
                if op != Op::RdmaReadResponseMiddle {
                    ext.aeth = Some(aeth(ack, *msn));
                }
                let p = Packet {
                    int: echo,
                    ..Packet::new(Opcode::rc(op), *psn, ext)
                };
                let (rk, at) = (*rkey, *va);
                let mut read = Ok(());
                let lendable = if lend.wants(len as usize, path) {
                    mrs.lendable_remote(rk, pd, at, len)
                } else {
                    None
                };
                let n = if let Some(l) = lendable {
                    lend.emit(path, &p, l, buf, counters)?
                } else {
                    path.emit(&p, len as usize, buf, |dst| {
                        if !dst.is_empty() {
                            read = mrs.read_remote(rk, pd, at, dst);
                        }
                    })?
                };
                if read.is_err() {
                    // The region went away (deregistered or invalidated)
                    // after the request was checked: a NAK remote access
                    // error for this PSN instead of this frame, then the
                    // QP goes to ERR.
                    let code = NakCode::RemoteAccessError;
                    *out = Out::Ack {
                        psn: *psn,
                        syndrome: AckSyndrome::Nak(code),
                        msn: *msn,
                        sack: None,
                    };
                    counters.resp_remote_access_errors += 1;
                    self.failed = Some(code);
                    return self.poll(path, mtu as u32, mrs, counters, buf, lend);
                }
                if last {
                    self.out.pop_front();
                } else {
                    *psn = psn.add(1);
                    *va = va.wrapping_add(len);
                    *resid -= len;
                    *fresh = false;
                }
                n
            }
        };
        counters.sent_pkts += 1;
        Some(n)
    }
}
