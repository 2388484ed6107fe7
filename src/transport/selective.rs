//! Selective repeat, as IRN runs it (Mittal et al., "Revisiting Network
//! Support for RDMA", SIGCOMM 2018, §3 and §5.2): the loss-recovery mode
//! [`Recovery::Selective`](super::Recovery::Selective) of a QP whose two
//! ends are ferroce and both asked for it. Toward any other peer a QP
//! stays in go-back-N, the IBTA's only mode (§9.7.5), and nothing here
//! runs.
//!
//! The rules, each in one place below:
//!
//! - **Placement (responder).** A SEND or WRITE packet that arrives ahead
//!   of the expected PSN, within [`WINDOW`] PSNs, is checked as it would
//!   be in its turn (opcode allowed, length by position, R_Key and bounds
//!   for a WRITE, the receive WQE's room and keys for a SEND) and its data
//!   placed at once, where the place trailer of [`crate::wire::sr`] says
//!   its message goes: its offset is its PSN's distance from the
//!   message's first PSN times the path MTU. What cannot be placed (a
//!   READ or atomic request, no trailer, a failed check) is dropped, as
//!   go-back-N drops it, and when it comes in its turn the usual chain of
//!   checks gives the spec's answer.
//! - **Order (responder).** Nothing completes out of order: the packets
//!   placed ahead are *committed* when the expected PSN reaches them, in
//!   PSN order, exactly as if they had just arrived (receive WQEs
//!   consumed, completions, MSN), with their data already in place; then
//!   one ACK covers them all.
//! - **Selective acknowledgement (responder).** Every packet placed ahead
//!   is answered at once with a NAK PSN sequence error for the expected
//!   PSN (the cumulative acknowledgement) carrying a sack trailer with the
//!   packet's own PSN: IRN's NACK.
//! - **Resend (requester).** A packet is lost once a later one is
//!   acknowledged selectively (IRN §3.1): the requester resends each
//!   unacknowledged SEND / WRITE packet below the highest PSN acknowledged
//!   selectively, once per recovery, before any new packet, and nothing
//!   after it. A NAK without a sack trailer (the responder could not place
//!   what came) and a READ's missing response go back as go-back-N does,
//!   skipping the packets the responder acknowledged selectively.
//! - **Timeouts (requester).** IRN's two: the QP's local ACK timeout, and
//!   [`QpConfig::rto_low`](super::QpConfig) when at most
//!   [`RTO_LOW_PACKETS`] packets are in flight, so that the tail of a
//!   message does not wait out the long one. A timeout resends every
//!   packet in flight that was not acknowledged selectively. Selective
//!   NAKs spend no retry; timeouts do, as in go-back-N.
//! - **In flight.** At most `max_inflight` PSNs (IRN's BDP cap: set it to
//!   the path's bandwidth-delay product in packets), and never more than
//!   [`WINDOW`].
//!
//! READ responses and atomics keep go-back-N's ordering rules: IRN
//! retransmits a READ request for the missing responses (§5.2), which is
//! what the completer's go-back to the first missing response does here.

use super::completer::{read_piece, Outcome, RxEnv};
use super::mr::Access;
use super::requester::Requester;
use super::responder::{InMsg, Out, RespEnv, Responder, Verdict};
use super::wr::{Payload, SendOp};
use crate::time::Duration;
use crate::wire::ext::{AckSyndrome, AtomicEthRepr, NakCode, RethRepr};
use crate::wire::opcode::Op;
use crate::wire::opcode::{Class, Position};
use crate::wire::sr::{Placement, SrTrailer};
use crate::wire::Opcode;
use crate::wire::{Frame, Psn};
use std::collections::VecDeque;

/// The farthest ahead of the expected PSN a packet is placed; a requester
/// in selective repeat keeps no more PSNs in flight.
pub const WINDOW: u32 = 4096;
/// At most this many packets in flight, the short timeout applies (IRN
/// §3.2: N = 3).
pub const RTO_LOW_PACKETS: u32 = 3;
/// IRN's short timeout, µs (§3.2: 100 µs).
pub const DEFAULT_RTO_LOW_US: u32 = 100;

/// A packet placed ahead of its turn: what its commit needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    class: Class,
    position: Position,
    len: u32,
    imm: Option<u32>,
    ieth: Option<u32>,
    place: Placement,
    /// A READ or atomic request, held to be executed in its turn.
    held: Option<Held>,
}

/// A READ or atomic request that came ahead of its turn: kept, not
/// executed, until the expected PSN reaches it (a READ must see the
/// WRITEs before it, an atomic must run in order).
#[derive(Debug, Clone, Copy)]
enum Held {
    Read(RethRepr),
    Atomic(AtomicEthRepr, bool),
}

/// The responder's packets placed ahead of the expected PSN: slot `i`
/// holds the packet of PSN `e_psn + i` (slot 0, the expected PSN itself,
/// is always empty).
#[derive(Debug, Default)]
pub(crate) struct Reorder {
    slots: VecDeque<Option<Placed>>,
}

impl Reorder {
    fn has(&self, d: usize) -> bool {
        self.slots.get(d).is_some_and(Option::is_some)
    }

    fn set(&mut self, d: usize, p: Placed) {
        if self.slots.len() <= d {
            self.slots.resize(d + 1, None);
        }
        self.slots[d] = Some(p);
    }

    /// The expected PSN moved on by `n`.
    fn shift(&mut self, n: usize) {
        let n = n.min(self.slots.len());
        self.slots.drain(..n);
    }

    /// Takes the packet at the expected PSN, if it was placed.
    fn take_front(&mut self) -> Option<Placed> {
        let p = self.slots.front().copied().flatten()?;
        self.slots.pop_front();
        Some(p)
    }

    /// Forgets everything (the QP was reset).
    pub(super) fn clear(&mut self) {
        self.slots.clear();
    }
}

impl Responder {
    /// A request packet `d` PSNs ahead of the expected one, on a QP in
    /// selective repeat: placed and acknowledged selectively, or dropped.
    pub(super) fn on_ahead(
        &mut self,
        env: &mut RespEnv<'_, '_>,
        f: &Frame<'_>,
        d: u32,
        sr: Option<SrTrailer>,
    ) -> Verdict {
        let psn = f.psn();
        env.counters.out_of_sequence += 1;
        if self.reorder.has(d as usize) {
            env.counters.duplicate_request += 1;
            self.push_sack(env, psn);
            return Verdict::Ok;
        }
        let placed = match (sr, f.info.class) {
            _ if d >= WINDOW => None,
            (_, Class::ReadRequest | Class::Atomic) => Self::hold(env, f),
            (Some(SrTrailer::Place(p)), _) => self.place(env, f, p),
            _ => None,
        };
        match placed {
            Some(placed) => {
                env.counters.sr_placed_ahead += 1;
                self.reorder.set(d as usize, placed);
                self.push_sack(env, psn);
            }
            None => {
                // As go-back-N: one NAK until the expected PSN arrives.
                env.counters.sr_not_placed += 1;
                self.nak_sequence_once(env);
            }
        }
        Verdict::Ok
    }

    fn push_sack(&mut self, env: &mut RespEnv<'_, '_>, psn: Psn) {
        env.counters.sr_sacks_sent += 1;
        self.out.push_back(Out::Ack {
            psn: self.e_psn,
            syndrome: AckSyndrome::Nak(NakCode::PsnSequenceError),
            msn: self.msn,
            sack: Some(psn),
        });
    }

    /// Checks a packet ahead of its turn as its turn would, and writes its
    /// data where its message goes; `None` (nothing written) if it cannot
    /// be placed.
    fn place(&mut self, env: &mut RespEnv<'_, '_>, f: &Frame<'_>, p: Placement) -> Option<Placed> {
        let info = f.info;
        let mtu = u64::from(env.mtu);
        let k = f.psn().diff(p.first_psn);
        let len = f.payload.len() as u64;
        let off = u64::try_from(k).ok()? * mtu;
        let starts = info.starts_message();
        let ends = info.ends_message();
        let fits = Self::length_ok(info.position, f.payload.len(), env.mtu)
            && starts == (k == 0)
            && if ends {
                off + len == u64::from(p.len)
            } else {
                off + len < u64::from(p.len)
            };
        if !fits {
            return None;
        }
        let ext = f.ext();
        match info.class {
            Class::Write => {
                if !env.access.contains(Access::REMOTE_WRITE) {
                    return None;
                }
                if let Some(reth) = ext.reth {
                    let same = reth.rkey == p.rkey && reth.va == p.va && reth.dma_len == p.len;
                    if !same {
                        return None;
                    }
                }
                if info.has_immediate() && ends && self.wqe_for(p.rsn).is_none() {
                    return None;
                }
                let va = p.va.wrapping_add(off);
                if len > 0 && env.mrs.write_remote(p.rkey, env.pd, va, f.payload).is_err() {
                    return None;
                }
            }
            Class::Send => {
                let wqe = self.wqe_for(p.rsn)?;
                if off + len > wqe.len
                    || env
                        .mrs
                        .check_scatter(env.pd, &wqe.sges, off, f.payload, Access::LOCAL_WRITE)
                        .is_err()
                {
                    return None;
                }
            }
            _ => return None,
        }
        Some(Placed {
            class: info.class,
            position: info.position,
            len: len as u32,
            imm: ext.imm,
            ieth: ext.ieth,
            place: p,
            held: None,
        })
    }

    /// A READ or atomic request ahead of its turn, kept if its turn would
    /// not refuse it outright (the QP allows the operation).
    fn hold(env: &RespEnv<'_, '_>, f: &Frame<'_>) -> Option<Placed> {
        let ext = f.ext();
        let (need, held) = match f.info.class {
            Class::ReadRequest => (Access::REMOTE_READ, Held::Read(ext.reth?)),
            _ => {
                let cas = f.info.opcode == Opcode::rc(Op::CompareSwap);
                (Access::REMOTE_ATOMIC, Held::Atomic(ext.atomic?, cas))
            }
        };
        if !env.access.contains(need) || env.max_dest_rd_atomic == 0 {
            return None;
        }
        Some(Placed {
            class: f.info.class,
            position: f.info.position,
            len: 0,
            imm: None,
            ieth: None,
            place: Placement::default(),
            held: Some(held),
        })
    }

    /// The receive WQE the message with receive sequence number `rsn`
    /// takes: the one a SEND in progress holds, or one still posted.
    fn wqe_for(&self, rsn: u32) -> Option<&super::responder::RecvWqe> {
        let k = rsn.wrapping_sub(self.rsn) & 0x00FF_FFFF;
        match &self.in_msg {
            InMsg::Send { wqe, .. } if k == 0x00FF_FFFF => Some(wqe),
            _ => self.rq.get(k as usize),
        }
    }

    /// The expected PSN moved from `before` to `e_psn` in turn: the
    /// packets placed ahead that it now reaches are committed, in order,
    /// and one ACK covers them.
    pub(super) fn commit_ahead(&mut self, env: &mut RespEnv<'_, '_>, before: Psn) -> Verdict {
        self.reorder.shift(self.e_psn.diff(before).max(0) as usize);
        // The last SEND or WRITE packet committed, which the ACK names (a
        // READ's responses and an atomic's acknowledgement answer them).
        let mut acked = None;
        while let Some(p) = self.reorder.take_front() {
            let psn = self.e_psn;
            let v = match p.held {
                Some(Held::Read(reth)) => self.read_at(env, psn, reth),
                Some(Held::Atomic(a, cas)) => self.atomic_at(env, psn, a, cas),
                None => self.commit(env, psn, &p),
            };
            if v != Verdict::Ok {
                self.reorder.clear();
                return v;
            }
            if p.held.is_none() {
                self.e_psn = psn.add(1);
                acked = Some(psn);
            } else {
                // A READ moved the expected PSN past its responses.
                let n = self.e_psn.diff(psn).max(1) as usize;
                self.reorder.shift(n - 1);
            }
        }
        if let Some(psn) = acked {
            self.sent_psn_nak = false;
            self.since_ack = 0;
            env.counters.acks_sent += 1;
            self.push_ack(
                psn,
                AckSyndrome::Ack {
                    credit: crate::wire::ext::CREDIT_INVALID,
                },
            );
        }
        Verdict::Ok
    }

    /// What a packet placed ahead does in its turn, its data already in
    /// place: the message's progress, receive WQEs, completions and MSN.
    fn commit(&mut self, env: &mut RespEnv<'_, '_>, psn: Psn, p: &Placed) -> Verdict {
        let starts = matches!(p.position, Position::First | Position::Only);
        let ends = matches!(p.position, Position::Last | Position::Only);
        let len = u64::from(p.len);
        let completes = ends && (p.class == Class::Send || p.imm.is_some());
        if completes && !env.sink.has_room(env.recv_cq) {
            return self.nak(env, psn, NakCode::RemoteOperationalError);
        }
        match p.class {
            Class::Send => {
                if starts {
                    let Some(wqe) = self.take_wqe() else {
                        return self.nak(env, psn, NakCode::InvalidRequest);
                    };
                    self.in_msg = InMsg::Send { wqe, offset: 0 };
                }
                let InMsg::Send { offset, .. } = &mut self.in_msg else {
                    return self.nak(env, psn, NakCode::InvalidRequest);
                };
                *offset += len;
                if ends {
                    return self.finish_send(env, psn, p.imm, p.ieth);
                }
            }
            _ => {
                if starts {
                    let total = u64::from(p.place.len);
                    self.in_msg = InMsg::Write {
                        rkey: p.place.rkey,
                        va: p.place.va,
                        resid: total,
                        total,
                    };
                }
                let InMsg::Write { va, resid, .. } = &mut self.in_msg else {
                    return self.nak(env, psn, NakCode::InvalidRequest);
                };
                *va = va.wrapping_add(len);
                *resid = resid.saturating_sub(len);
                if ends {
                    return self.finish_write(env, psn, p.imm);
                }
            }
        }
        Verdict::Ok
    }
}

/// The requester's record of what the responder acknowledged
/// selectively, and its progress through one recovery.
#[derive(Debug, Default)]
pub(crate) struct Scoreboard {
    /// Bit `i`: PSN `base + i` was acknowledged selectively.
    sacked: VecDeque<bool>,
    /// Bit `i`: the response of PSN `base + i` (a READ response packet,
    /// an atomic acknowledgement) was taken ahead of its turn.
    answered: VecDeque<bool>,
    base: Psn,
    /// One past the highest PSN to resend in this recovery (`None`: none
    /// under way).
    until: Option<Psn>,
    /// The next PSN this recovery considers.
    scan: Psn,
    /// A PSN certainly lost, resent first: the one a NAK names (the
    /// responder's expected PSN), a READ's first missing response.
    urgent: Option<Psn>,
}

impl Scoreboard {
    /// Every PSN before `comp` is acknowledged.
    pub(super) fn advance(&mut self, comp: Psn) {
        let n = comp.diff(self.base);
        if n <= 0 {
            return;
        }
        let n = n as usize;
        for bits in [&mut self.sacked, &mut self.answered] {
            let n = n.min(bits.len());
            bits.drain(..n);
        }
        self.base = comp;
        if self.scan.before(comp) {
            self.scan = comp;
        }
        if self.until.is_some_and(|u| !u.after(comp)) {
            self.until = None;
        }
    }

    /// The responder has `psn`: the packets before it not acknowledged are
    /// lost (IRN §3.1) and go again.
    pub(super) fn sack(&mut self, psn: Psn) {
        let d = psn.diff(self.base);
        if d < 0 || d as u32 >= WINDOW {
            return;
        }
        let d = d as usize;
        if self.sacked.len() <= d {
            self.sacked.resize(d + 1, false);
        }
        self.sacked[d] = true;
        let end = psn.add(1);
        match self.until {
            Some(u) if !end.after(u) => {}
            Some(_) => self.until = Some(end),
            None => {
                self.until = Some(end);
                self.scan = self.base;
            }
        }
    }

    /// Whether the responder acknowledged `psn` selectively.
    pub(super) fn has(&self, psn: Psn) -> bool {
        let d = psn.diff(self.base);
        d >= 0 && self.sacked.get(d as usize).copied().unwrap_or(false)
    }

    /// `psn` is lost: it goes again before anything else.
    pub(super) fn lost(&mut self, psn: Psn) {
        self.urgent = Some(psn);
    }

    /// A recovery's scan passes `psn` by (its packets went with a READ
    /// request sent again).
    fn pass(&mut self, psn: Psn) {
        if self.scan.before(psn) {
            self.scan = psn;
        }
    }

    /// The response of PSN `psn` arrived ahead of its turn.
    fn answer(&mut self, psn: Psn) {
        let d = psn.diff(self.base);
        if d < 0 || d as u32 >= WINDOW {
            return;
        }
        if self.answered.len() <= d as usize {
            self.answered.resize(d as usize + 1, false);
        }
        self.answered[d as usize] = true;
    }

    /// Whether the response of PSN `psn` arrived ahead of its turn.
    fn is_answered(&self, psn: Psn) -> bool {
        let d = psn.diff(self.base);
        d >= 0 && self.answered.get(d as usize).copied().unwrap_or(false)
    }

    /// The next PSN this recovery resends, moving past it.
    fn next_resend(&mut self) -> Option<Psn> {
        if let Some(p) = self.urgent.take() {
            if self.scan == p {
                self.scan = p.add(1);
            }
            return Some(p);
        }
        let until = self.until?;
        while self.scan.before(until) {
            let psn = self.scan;
            self.scan = psn.add(1);
            if !self.has(psn) {
                return Some(psn);
            }
        }
        None
    }

    /// Forgets everything (the send queue starts again at `psn`).
    pub(super) fn reset(&mut self, psn: Psn) {
        *self = Scoreboard {
            base: psn,
            scan: psn,
            ..Scoreboard::default()
        };
    }
}

impl Requester {
    /// The packet a recovery in selective repeat resends next, if any: its
    /// PSN, the cursor moved there. A SEND or WRITE packet goes alone; a
    /// READ request goes again from its first missing response (IRN
    /// §5.2), an atomic as it was (the responder answers it from its
    /// saved result). The caller emits it and then puts the cursor back
    /// ([`Requester::resume`]).
    pub(super) fn selective_resend(&mut self) -> Option<(Psn, (usize, u32, Psn))> {
        while let Some(psn) = self.sack.next_resend() {
            if !psn.before(self.max_psn) || psn.before(self.comp_psn) {
                continue;
            }
            let Some(w) = self.sq.iter().find(|w| w.contains(psn)) else {
                continue;
            };
            if w.wr.op.is_read_or_atomic() {
                let end = w.last_psn().unwrap_or(psn).add(1);
                self.sack.pass(end);
                // Done, or held by the responder, which answers it in its
                // turn: nothing to send.
                let held = w.first_psn.is_some_and(|f| self.sack.has(f)) && psn != self.comp_psn;
                if w.done || held {
                    continue;
                }
            }
            let saved = (self.next, self.next_pkt, self.psn);
            self.rewind(psn);
            return Some((psn, saved));
        }
        None
    }

    /// Puts the send cursor back where a selective resend found it.
    pub(super) fn resume(&mut self, saved: (usize, u32, Psn)) {
        (self.next, self.next_pkt, self.psn) = saved;
    }

    /// The local ACK timeout for the packets now in flight: IRN's short
    /// one when few are (`rto_low`), else the QP's.
    pub(super) fn rto(&self, sr: bool, timeout: Option<Duration>) -> Option<Duration> {
        let inflight = self.max_psn.diff(self.comp_psn).max(0) as u32;
        match timeout {
            Some(t) if sr && !self.low_rto_spent && inflight <= RTO_LOW_PACKETS => {
                Some(t.min(self.cfg.rto_low()))
            }
            t => t,
        }
    }
}

impl Requester {
    /// Selective repeat: a READ response or atomic acknowledgement for a
    /// request after one still unanswered (whose loss the caller has just
    /// acted on) is taken now, its data placed, rather than dropped and
    /// asked for again (IRN places READ responses directly, §5.2). `None`:
    /// not such a response; the usual rules decide.
    pub(super) fn response_ahead(&mut self, env: &mut RxEnv<'_>, f: &Frame<'_>) -> Option<Outcome> {
        let psn = f.psn();
        if !env.sr || !psn.after(self.comp_psn) {
            return None;
        }
        let i = self.sq.iter().position(|w| w.contains(psn))?;
        let w = &self.sq[i];
        if w.done || w.contains(self.comp_psn) {
            return None;
        }
        if self.sack.is_answered(psn) {
            env.counters.ghost_responses += 1;
            return Some(Outcome::Ok);
        }
        let Payload::Sges(sges) = &w.wr.payload else {
            return None;
        };
        let (off, data): (u64, &[u8]) = match (f.info.class, w.wr.op) {
            (Class::AtomicAck, op) if op.is_atomic() => (0, &[]),
            (Class::ReadResponse, SendOp::Read { .. }) => {
                (read_piece(w, psn, env.mtu, f)?.0, f.payload)
            }
            _ => return None,
        };
        let orig = f.ext().atomic_ack.unwrap_or(0).to_le_bytes();
        let data = if f.info.class == Class::AtomicAck {
            &orig[..]
        } else {
            data
        };
        if !data.is_empty()
            && env
                .mrs
                .check_scatter(env.pd, sges, off, data, Access::LOCAL_WRITE)
                .is_err()
        {
            return None;
        }
        env.counters.sr_responses_ahead += 1;
        self.sack.answer(psn);
        let w = &mut self.sq[i];
        w.got_ahead += 1;
        if w.got_ahead >= w.npkts {
            w.done = true;
        }
        Some(self.retire(env))
    }

    /// Selective repeat: moves the oldest unacknowledged PSN past the READ
    /// responses and atomic acknowledgements taken ahead of their turn
    /// once the ones before them are in.
    pub(super) fn pass_answered(&mut self, env: &mut RxEnv<'_>) {
        loop {
            let comp = self.comp_psn;
            let Some(w) = self.sq.iter_mut().find(|w| w.contains(comp)) else {
                return;
            };
            if !w.wr.op.is_read_or_atomic() {
                return;
            }
            let Some(last) = w.last_psn() else { return };
            let to = if w.done {
                last.add(1)
            } else if self.sack.is_answered(comp) {
                if comp == last {
                    w.done = true;
                }
                comp.add(1)
            } else {
                return;
            };
            self.progress(env, to);
        }
    }
}
