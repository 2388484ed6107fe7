//! The transmit side of a device: the ready list of QPs that may have a
//! frame to send, and each QP's turn on it: a CNP it owes, then its
//! responses, then its requests, paced at its rate
//! ([`Device::poll_transmit`]). A QP whose turn surely finds nothing
//! leaves the list after a few loads.

use std::collections::VecDeque;

use super::lend::{Lending, TxFrame};
use super::{
    ack_timeout, nak_status, timers, ud, Cq, Device, Event, MrTable, Qp, QpState, QpType, TxEnv,
    TxOutcome,
};
use crate::time::Instant;
use crate::wire;

/// With many QPs ([`super::PREFETCH_MIN_QPS`]), the QP this many places
/// behind the one taking its turn on the ready list is prefetched: its
/// state is out of the caches, and the loads start a few turns before the
/// turn that needs them.
const PREFETCH_AHEAD: usize = 4;

impl Device {
    /// Whether some QP may have a frame to send now (the ready list that
    /// [`Device::poll_transmit`] walks is not empty). A driver with
    /// nothing received, no timer due and this `false` can skip the
    /// device.
    pub fn wants_transmit(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Writes the next frame to send into `buf` (9 KiB holds any) and
    /// returns its length; `None` when nothing is ready now.
    ///
    /// Only QPs that may have something to send are visited: a QP joins
    /// the ready list when work is posted, a frame for it arrives, a timer
    /// of it fires or its state changes, and leaves it when it has nothing
    /// to send; the ready ones take turns, a packet each.
    ///
    /// Every frame is whole in `buf`: payloads are copied, whatever
    /// [`Device::set_zero_copy`] says ([`Device::poll_transmit_parts`]
    /// leaves them in place).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.poll_frame(now, buf, None).map(|t| t.len)
    }

    pub(super) fn poll_frame(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        lend_min: Option<usize>,
    ) -> Option<TxFrame> {
        let mut lend = Lending {
            np: self.cfg.congestion.np,
            min: lend_min,
            lent: None,
        };
        while let Some(qpn) = self.ready.pop_front() {
            if self.prefetches() {
                if let Some(&ahead) = self.ready.get(PREFETCH_AHEAD) {
                    self.prefetch_qp(ahead);
                }
            }
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if Self::surely_idle(qp) {
                // The turn's outcome is known: nothing to send. Do what
                // `transmit` would do on finding nothing, not the work of
                // finding it (its deadline stands: nothing it depends on
                // moved). The unit tests take the long way too and check
                // that it finds nothing.
                #[cfg(test)]
                {
                    let (mrs, cqs, events) = (&mut self.mrs, &mut self.cqs, &mut self.events);
                    let found = Self::transmit(qp, mrs, cqs, events, now, buf, &mut lend);
                    assert_eq!(found, None, "QP {qpn} was surely idle, yet sent");
                }
                qp.ready = false;
                qp.pacer.on_idle(now, None);
                Self::check_drained(qp, &mut self.events);
                super::note_backlog(&mut self.backlogged, qp);
                continue;
            }
            let sent = match qp.caps.qp_type {
                QpType::Rc => Self::transmit(
                    qp,
                    &mut self.mrs,
                    &mut self.cqs,
                    &mut self.events,
                    now,
                    buf,
                    &mut lend,
                ),
                QpType::Ud => ud::transmit(qp, &self.cfg, &self.ahs, &self.mrs, &mut self.cqs, buf),
            };
            super::note_backlog(&mut self.backlogged, qp);
            if sent.is_none() {
                qp.ready = false;
            }
            let int_here =
                qp.path.as_ref().is_some_and(|p| p.int) && self.cfg.congestion.int_host_hop;
            timers::arm(&mut self.timers, qp);
            let armed = qp.armed;
            self.settle_timers(Some((qpn, armed)));
            if let Some(len) = sent {
                if int_here {
                    self.stamp_host_hop(now, &mut buf[..len]);
                }
                if self.cfg.congestion.int_host_hop {
                    self.int_tx_bytes += len as u64;
                }
                self.ready.push_back(qpn);
                return Some(match lend.lent {
                    Some(l) => TxFrame {
                        len: len - l.len,
                        lent: Some(l),
                    },
                    None => TxFrame { len, lent: None },
                });
            }
        }
        None
    }

    /// Pushes the device's own egress hop into a request's INT trailer
    /// ([`CongestionConfig::int_host_hop`]): the bytes the device sent
    /// before this frame, no queue, the line rate.
    fn stamp_host_hop(&mut self, now: Instant, frame: &mut [u8]) {
        let hop = wire::int::IntHop::stamp(
            self.cfg.congestion.line_bps,
            now.as_nanos(),
            self.int_tx_bytes,
            0,
        );
        wire::int::stamp(frame, hop);
    }

    /// The next frame of one QP: a CNP it owes first, then its responses,
    /// then its requests. Requests and READ response data are paced at
    /// the QP's rate ([`crate::cc`]); CNPs and ACKs never are.
    fn transmit(
        qp: &mut Qp,
        mrs: &mut MrTable,
        cqs: &mut [Cq],
        events: &mut VecDeque<Event>,
        now: Instant,
        buf: &mut [u8],
        lend: &mut Lending,
    ) -> Option<usize> {
        let np = lend.np;
        let mtu = qp.mtu();
        // Borrowed, not copied: a path with its header template is a few
        // hundred bytes.
        let path = qp.path.as_ref()?;
        let sends = match qp.state {
            QpState::Rtr | QpState::Rts | QpState::Sqd => true,
            QpState::Err => qp.drain_out,
            _ => false,
        };
        if !sends {
            return None;
        }
        if let Some(pkey) = qp.np.pending {
            if let Some(len) = path.emit_cnp(pkey, np.cnp_dscp, np.cnp_prio, buf) {
                qp.np.pending = None;
                qp.counters.np_cnp_sent += 1;
                return Some(len);
            }
        }
        qp.cc.advance(now);
        let may_pace = qp.pacer.ready(now, qp.cc.rate_bps());
        if qp.resp.has_output() {
            let paced = qp.resp.next_is_read_data();
            if paced && !may_pace {
                qp.paced_wait = true;
                return None;
            }
            if let Some(len) = qp.resp.poll(path, mtu, mrs, &mut qp.counters, buf, lend) {
                if let Some(code) = qp.resp.take_failure() {
                    // That NAK was the last word: nothing queued after it.
                    qp.resp.clear_output();
                    Self::protocol_error(qp, cqs, events, nak_status(code));
                }
                if paced {
                    Self::paced(qp, now, len);
                }
                return Some(len);
            }
        }
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        if !may_pace {
            qp.paced_wait = true;
            return None;
        }
        let mut env = TxEnv {
            path,
            mtu,
            pd: qp.pd,
            max_rd_atomic: qp.attr.max_rd_atomic as u32,
            timeout: ack_timeout(qp.attr.timeout),
            draining: qp.state == QpState::Sqd,
            window: qp.cc.window_bytes(),
            mrs,
            counters: &mut qp.counters,
            lend: &mut *lend,
        };
        match qp.req.poll(&mut env, now, buf) {
            TxOutcome::Sent(len) => {
                Self::paced(qp, now, len);
                Some(len)
            }
            TxOutcome::Fatal(status) => {
                let (req, mut env) = qp.completer(mrs, cqs, now);
                let _ = req.retire(&mut env);
                Self::protocol_error(qp, cqs, events, status);
                // The QP may still owe its peer a response.
                Self::transmit(qp, mrs, cqs, events, now, buf, lend)
            }
            TxOutcome::Idle => {
                if !qp.resp.next_is_read_data() {
                    qp.pacer.on_idle(now, qp.cc.rate_bps());
                }
                Self::check_drained(qp, events);
                None
            }
        }
    }

    /// Whether [`Device::transmit`] would surely find nothing to send on
    /// `qp`, and change nothing in finding it but the pacer's idle rule
    /// and the drained report (its rate controller's timers run in time
    /// order whenever it is next advanced), at any time: an RC QP sending
    /// (RTS, SQD)
    /// with no rate limit and no packet held for pacing, no CNP owed, no
    /// response queued, no RNR wait, every work request sent, and no
    /// selective repeat (which may owe resends outside the queue). The
    /// usual state of a QP after its last frame: its turn on the ready
    /// list then costs a few loads.
    fn surely_idle(qp: &Qp) -> bool {
        let Some(path) = qp.path.as_ref() else {
            return false;
        };
        // What a QP with work fails first goes first; the rate
        // controller's (a call through its box) last.
        qp.req.surely_idle(path.sr)
            && !qp.resp.has_output()
            && qp.np.pending.is_none()
            && qp.caps.qp_type == QpType::Rc
            && matches!(qp.state, QpState::Rts | QpState::Sqd)
            && !qp.paced_wait
            && qp.req.rnr_until.is_none()
            && qp.cc.rate_bps().is_none()
    }

    /// A paced packet of `len` bytes left: the controller counts it and
    /// the pacer spaces the next one at the controller's rate.
    fn paced(qp: &mut Qp, now: Instant, len: usize) {
        qp.cc.on_sent(now, len as u64);
        qp.pacer.on_sent(now, len as u64, qp.cc.rate_bps());
    }

    /// Puts `qpn` on the ready list (once).
    pub(super) fn wake(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.ready {
                qp.ready = true;
                self.ready.push_back(qpn);
            }
        }
    }
}
