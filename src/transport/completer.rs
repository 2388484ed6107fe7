//! The completer: responses -> acknowledged work requests, retries and
//! completions (IBTA §9.7.5.2, §9.9; reference B.5, B.9).
//!
//! - An ACK with PSN p acknowledges every request packet up to p
//!   (cumulative); a NAK or RNR NAK with PSN p acknowledges every packet
//!   before p (the implicit ACK, rxe_comp.c).
//! - A READ or atomic is done only when its response arrived: an ACK or a
//!   response beyond an unanswered one means the response was lost
//!   (`implied_nak_seq_err`) and the requester goes back to it.
//! - NAK PSN sequence error: go back N to p. Local ACK timeout (4.096 µs x
//!   2^timeout): go back to the oldest unacknowledged PSN. Both spend one of
//!   `retry_cnt` retries (IBTA: 7 is a count like any other); forward
//!   progress restores the count. Exhausted: `RetryExcErr`.
//! - RNR NAK: wait the time of its timer code, then resend from p; spends
//!   one of `rnr_retry` (7 = forever; a copy arriving during the wait
//!   spends none); exhausted: `RnrRetryExcErr`.
//! - NAK invalid request / remote access / remote operational error: the
//!   request at p completes with `RemInvReqErr` / `RemAccessErr` /
//!   `RemOpErr` and the QP goes to ERR.
//! - Completions come in send-queue order; an unsignaled success makes
//!   none.

use super::mr::{Access, MrTable, PdId};
use super::requester::{Requester, SendWqe};
use super::wr::{Payload, SendOp, Wc, WcStatus};
use super::{CqId, QpCounters, Sink};
use crate::time::{Duration, Instant};
use crate::wire::ext::{rnr_timer_ns, AckSyndrome, NakCode};
use crate::wire::opcode::{Class, Position};
use crate::wire::sr::SrTrailer;
use crate::wire::{Frame, Psn};

/// What the completer needs of its QP.
pub(crate) struct RxEnv<'a> {
    pub mrs: &'a mut MrTable,
    pub pd: PdId,
    pub mtu: u32,
    pub qpn: u32,
    pub send_cq: CqId,
    pub sink: Sink<'a>,
    pub counters: &'a mut QpCounters,
    /// The QP runs selective repeat ([`super::selective`]).
    pub sr: bool,
    pub timeout: Option<Duration>,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub now: Instant,
}

/// The completer's verdict.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// A work request completed in error: the QP goes to ERR.
    Fatal(WcStatus),
}

impl Requester {
    /// Handles one response packet (ACK, NAK, READ response, atomic ACK),
    /// with its selective-repeat trailer if it has one.
    pub fn on_response(
        &mut self,
        env: &mut RxEnv<'_>,
        f: &Frame<'_>,
        sr: Option<SrTrailer>,
    ) -> Outcome {
        let psn = f.psn();
        let info = f.info;
        if !self.outstanding() || !psn.before(self.max_psn) {
            env.counters.ghost_responses += 1;
            return Outcome::Ok;
        }
        match info.class {
            Class::Ack => {
                let Some(aeth) = f.aeth() else {
                    return Outcome::Ok;
                };
                match aeth.syndrome {
                    AckSyndrome::Ack { .. } => self.ack_before(env, psn.add(1)),
                    AckSyndrome::RnrNak { timer } => {
                        env.counters.rnr_nak_retry_err += 1;
                        if let o @ Outcome::Fatal(_) = self.ack_before(env, psn) {
                            return o;
                        }
                        // Still waiting out an RNR NAK (nothing was sent
                        // again since): this one is a copy of it, not a
                        // second refusal, and spends no retry.
                        if psn != self.comp_psn || self.rnr_until.is_some() {
                            return Outcome::Ok;
                        }
                        if env.rnr_retry != 7 {
                            if self.rnr_left == 0 {
                                env.counters.retry_rnr_exceeded_err += 1;
                                return self.fail_at(env, psn, WcStatus::RnrRetryExcErr);
                            }
                            self.rnr_left -= 1;
                        }
                        self.rnr_until = Some(env.now + Duration::from_nanos(rnr_timer_ns(timer)));
                        self.timer = None;
                        self.go_back(env, psn, false);
                        Outcome::Ok
                    }
                    AckSyndrome::Nak(NakCode::PsnSequenceError) => {
                        env.counters.packet_seq_err += 1;
                        if let o @ Outcome::Fatal(_) = self.ack_before(env, psn) {
                            return o;
                        }
                        if let (true, Some(SrTrailer::Sack(got))) = (env.sr, sr) {
                            // Selective repeat: the responder has `got`;
                            // what is missing before it goes again alone.
                            env.counters.sr_sacks_received += 1;
                            self.sack.sack(got);
                        }
                        if psn != self.comp_psn || self.rewound_at == Some(psn) {
                            return Outcome::Ok;
                        }
                        self.recover(env, psn)
                    }
                    AckSyndrome::Nak(code) => {
                        if let o @ Outcome::Fatal(_) = self.ack_before(env, psn) {
                            return o;
                        }
                        let status = match code {
                            NakCode::InvalidRequest => {
                                env.counters.req_remote_invalid_request += 1;
                                WcStatus::RemInvReqErr
                            }
                            NakCode::RemoteAccessError => {
                                env.counters.req_remote_access_errors += 1;
                                WcStatus::RemAccessErr
                            }
                            NakCode::RemoteOperationalError => {
                                env.counters.req_remote_operational_errors += 1;
                                WcStatus::RemOpErr
                            }
                            _ => WcStatus::BadRespErr,
                        };
                        self.fail_at(env, psn, status)
                    }
                    AckSyndrome::Reserved(_) => Outcome::Ok,
                }
            }
            Class::ReadResponse => self.on_read_response(env, f),
            Class::AtomicAck => {
                let Some(i) = self.sq.iter().position(|w| w.contains(psn)) else {
                    env.counters.ghost_responses += 1;
                    return Outcome::Ok;
                };
                if !self.sq[i].wr.op.is_atomic() {
                    env.counters.ghost_responses += 1;
                    return Outcome::Ok;
                }
                let first = self.sq[i].first_psn.unwrap_or(psn);
                if let o @ Outcome::Fatal(_) = self.ack_before(env, first) {
                    return o;
                }
                if let Some(o) = self.response_ahead(env, f) {
                    return o;
                }
                if self.comp_psn != psn || !self.sq.front().is_some_and(|w| w.contains(psn)) {
                    env.counters.ghost_responses += 1;
                    return Outcome::Ok;
                }
                let orig = f.ext().atomic_ack.unwrap_or(0);
                if let Payload::Sges(s) = &self.sq[0].wr.payload {
                    if env
                        .mrs
                        .check_scatter(env.pd, s, 0, &orig.to_le_bytes(), Access::LOCAL_WRITE)
                        .is_err()
                    {
                        return self.fail_at(env, psn, WcStatus::LocProtErr);
                    }
                }
                self.sq[0].done = true;
                self.progress(env, psn.add(1));
                self.retire(env)
            }
            _ => Outcome::Ok,
        }
    }

    fn on_read_response(&mut self, env: &mut RxEnv<'_>, f: &Frame<'_>) -> Outcome {
        let psn = f.psn();
        let Some(i) = self.sq.iter().position(|w| w.contains(psn)) else {
            env.counters.ghost_responses += 1;
            return Outcome::Ok;
        };
        if !matches!(self.sq[i].wr.op, SendOp::Read { .. }) {
            env.counters.ghost_responses += 1;
            return Outcome::Ok;
        }
        let first = self.sq[i].first_psn.unwrap_or(psn);
        if let o @ Outcome::Fatal(_) = self.ack_before(env, first) {
            return o;
        }
        if let Some(o) = self.response_ahead(env, f) {
            return o;
        }
        let Some(w) = self.sq.front() else {
            return Outcome::Ok;
        };
        if !w.contains(psn) || w.done {
            env.counters.ghost_responses += 1;
            self.answered_before_retry(env);
            return Outcome::Ok;
        }
        let d = psn.diff(self.comp_psn);
        if d < 0 {
            env.counters.ghost_responses += 1;
            return Outcome::Ok;
        }
        if d > 0 {
            // A response packet before this one was lost.
            env.counters.implied_nak_seq_err += 1;
            if self.rewound_at == Some(self.comp_psn) {
                self.answered_before_retry(env);
                return Outcome::Ok;
            }
            let at = self.comp_psn;
            return self.recover(env, at);
        }
        let Some((off, last)) = read_piece(w, psn, env.mtu, f) else {
            // Not the response this READ expects: drop it, the timer or a
            // retry recovers.
            env.counters.ghost_responses += 1;
            return Outcome::Ok;
        };
        if let Payload::Sges(s) = &w.wr.payload {
            if env
                .mrs
                .check_scatter(env.pd, s, off, f.payload, Access::LOCAL_WRITE)
                .is_err()
            {
                // The READ's local buffer was deregistered meanwhile.
                return self.fail_at(env, psn, WcStatus::LocProtErr);
            }
        }
        if last {
            self.sq[0].done = true;
        }
        self.progress(env, psn.add(1));
        self.retire(env)
    }

    /// Acknowledges every packet before `upto`.
    fn ack_before(&mut self, env: &mut RxEnv<'_>, upto: Psn) -> Outcome {
        if !upto.after(self.comp_psn) {
            return self.retire(env);
        }
        let mut at = self.comp_psn;
        let mut i = 0;
        while i < self.sq.len() {
            let w = &self.sq[i];
            let (Some(first), Some(last)) = (w.first_psn, w.last_psn()) else {
                break;
            };
            if last.before(upto) {
                if w.wr.op.is_read_or_atomic() && !w.done {
                    // Acknowledged beyond an unanswered READ / atomic.
                    env.counters.implied_nak_seq_err += 1;
                    self.progress(env, at);
                    if self.rewound_at == Some(self.comp_psn) {
                        return self.retire(env);
                    }
                    let to = self.comp_psn;
                    return match self.recover(env, to) {
                        Outcome::Ok => self.retire(env),
                        o => o,
                    };
                }
                self.sq[i].done = true;
                at = last.add(1);
                i += 1;
            } else {
                if !w.wr.op.is_read_or_atomic() && upto.after(first) {
                    at = upto;
                }
                break;
            }
        }
        self.progress(env, at);
        self.retire(env)
    }

    /// A READ response from the stream the responder was sending before it
    /// saw our retry. A responder answers requests in order (rxe finishes
    /// every READ it has begun before it takes the re-issued one), so such
    /// a stream may outlast the local ACK timeout: while it flows, the
    /// timer restarts instead of spending a retry on a peer that is
    /// plainly alive, as rxe's completer restarts its retransmit timer on
    /// every response it handles (drivers/infiniband/sw/rxe/rxe_comp.c).
    /// The stream is finite (the responses of READs we sent), so this
    /// cannot hold the timer back for ever.
    fn answered_before_retry(&mut self, env: &mut RxEnv<'_>) {
        if self.rewound_at.is_some() && self.outstanding() {
            self.timer = env.timeout.map(|t| env.now + t);
        }
    }

    /// Records that every packet before `to` is acknowledged.
    pub(super) fn progress(&mut self, env: &mut RxEnv<'_>, to: Psn) {
        if !to.after(self.comp_psn) {
            return;
        }
        self.log.acked(self.comp_psn, to, env.now);
        self.comp_psn = to;
        // Only selective repeat reads the scoreboard; without it, leave
        // it alone (two cache lines of the QP fewer per ACK).
        if env.sr {
            self.sack.advance(to);
        }
        self.low_rto_spent = false;
        if self.psn.before(to) {
            // Acknowledged beyond where a retry had gone back to.
            self.rewind(to);
        }
        self.retry_left = env.retry_cnt;
        self.rnr_left = env.rnr_retry;
        self.rewound_at = None;
        self.timer = if self.comp_psn != self.max_psn {
            self.rto(env.sr, env.timeout).map(|t| env.now + t)
        } else {
            None
        };
    }

    /// Completes the finished work requests at the head of the queue.
    pub fn retire(&mut self, env: &mut RxEnv<'_>) -> Outcome {
        if env.sr {
            self.pass_answered(env);
        }
        while let Some(w) = self.sq.front() {
            if let Some(status) = w.local_error {
                let wc = self.wc(env.qpn, status);
                env.sink.push(env.send_cq, wc);
                env.counters.req_cqe_error += 1;
                self.sq.pop_front();
                self.next = self.next.saturating_sub(1);
                return Outcome::Fatal(status);
            }
            if !w.done {
                break;
            }
            if w.wr.op.is_read_or_atomic() {
                self.rd_atomic_outstanding -= 1;
            }
            if w.wr.signaled {
                let wc = self.wc(env.qpn, WcStatus::Success);
                env.sink.push(env.send_cq, wc);
            }
            self.sq.pop_front();
            self.next = self.next.saturating_sub(1);
        }
        if !self.outstanding() {
            self.timer = None;
        }
        Outcome::Ok
    }

    fn wc(&self, qpn: u32, status: WcStatus) -> Wc {
        let w = &self.sq[0];
        Wc {
            wr_id: w.wr.wr_id,
            status,
            opcode: w.wr.op.wc_opcode(),
            qp_num: qpn,
            byte_len: w.len,
            imm_data: None,
            invalidated_rkey: None,
            src_qp: None,
        }
    }

    /// `psn` is lost, as a NAK or a missing READ response says: go-back-N
    /// retries from it; selective repeat resends it alone and spends no
    /// retry ([`super::selective`]).
    fn recover(&mut self, env: &mut RxEnv<'_>, psn: Psn) -> Outcome {
        if !env.sr {
            return self.retry(env, psn);
        }
        env.counters.completer_retry_err += 1;
        self.rewound_at = Some(psn);
        self.sack.lost(psn);
        Outcome::Ok
    }

    /// Starts a retry from `psn`, spending one of `retry_cnt`.
    fn retry(&mut self, env: &mut RxEnv<'_>, psn: Psn) -> Outcome {
        if self.retry_left == 0 {
            env.counters.retry_exceeded_err += 1;
            return self.fail_at(env, psn, WcStatus::RetryExcErr);
        }
        self.retry_left -= 1;
        self.go_back(env, psn, true);
        Outcome::Ok
    }

    fn go_back(&mut self, env: &mut RxEnv<'_>, psn: Psn, arm: bool) {
        env.counters.completer_retry_err += 1;
        self.rewound_at = Some(psn);
        self.rewind(psn);
        if arm {
            self.timer = self.rto(env.sr, env.timeout).map(|t| env.now + t);
        }
    }

    /// The local ACK timer fired.
    pub fn on_timeout(&mut self, env: &mut RxEnv<'_>) -> Outcome {
        self.timer = None;
        if !self.outstanding() {
            return Outcome::Ok;
        }
        env.counters.local_ack_timeout_err += 1;
        let at = self.comp_psn;
        self.rewound_at = None;
        if env.sr && !self.low_rto_spent && self.rto(true, env.timeout) != env.timeout {
            // IRN's short timeout spends no retry, once per progress: the
            // next timeout is the QP's own.
            self.low_rto_spent = true;
            self.go_back(env, at, true);
            return Outcome::Ok;
        }
        self.retry(env, at)
    }

    /// Completes the work request holding `psn` with `status` (those before
    /// it, unanswered, are flushed).
    fn fail_at(&mut self, env: &mut RxEnv<'_>, psn: Psn, status: WcStatus) -> Outcome {
        while !self.sq.is_empty() {
            let hit = self.sq[0].contains(psn) || self.sq[0].first_psn.is_none();
            let st = if hit { status } else { WcStatus::WrFlushErr };
            let wc = self.wc(env.qpn, st);
            env.sink.push(env.send_cq, wc);
            if hit {
                env.counters.req_cqe_error += 1;
            } else {
                env.counters.req_cqe_flush_error += 1;
            }
            self.sq.pop_front();
            self.next = self.next.saturating_sub(1);
            if hit {
                break;
            }
        }
        Outcome::Fatal(status)
    }
}

/// Where the READ response `psn` of `w` lands: its offset in the READ and
/// whether it is the last; `None` if its length or position is not the
/// one that PSN must have.
pub(super) fn read_piece(w: &SendWqe, psn: Psn, mtu: u32, f: &Frame<'_>) -> Option<(u64, bool)> {
    let k = u32::try_from(psn.diff(w.first_psn?)).ok()?;
    let off = u64::from(k) * u64::from(mtu);
    let want = (u64::from(w.len).checked_sub(off)?).min(u64::from(mtu)) as usize;
    let last = k + 1 == w.npkts;
    let pos_ok = match f.info.position {
        Position::First | Position::Middle => !last,
        Position::Last | Position::Only => last,
    };
    (f.payload.len() == want && pos_ok).then_some((off, last))
}
