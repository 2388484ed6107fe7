//! The device's timers: each QP's next deadline (its ACK timer, its RNR
//! wait, its pacer's release), the heap that orders them, and
//! [`Device::handle_timeout`], which visits only the QPs that are due.

use std::collections::VecDeque;

use super::{ack_timeout, Cq, Device, Event, MrTable, Outcome, Qp, QpState};
use crate::cc::earlier;
use crate::time::{DeadlineHeap, Instant};

impl Device {
    /// When [`Device::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = self.timers.next();
        debug_assert_eq!(
            next,
            self.qps.values().filter_map(qp_deadline).min(),
            "a QP's deadline moved without a re-arm"
        );
        next
    }

    /// Re-arms `qpn`'s deadline after something was done to it.
    pub(super) fn rearm(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return self.prune_timers();
        };
        arm(&mut self.timers, qp);
        let armed = qp.armed;
        self.settle_timers(Some((qpn, armed)));
    }

    pub(super) fn prune_timers(&mut self) {
        self.settle_timers(None);
    }

    /// Drops stale deadlines from the heap's top; `just` is a QP just
    /// armed and its deadline, looked up no more (on one busy QP it is the
    /// top).
    pub(super) fn settle_timers(&mut self, just: Option<(u32, Option<Instant>)>) {
        let qps = &self.qps;
        self.timers.prune(
            |q| match just {
                Some((n, armed)) if n == q => armed,
                _ => qps.get(&q).and_then(|qp| qp.armed),
            },
            qps.len(),
            || qps.values().filter_map(|qp| qp.armed.map(|t| (qp.qpn, t))),
        );
    }

    /// Runs the timers due at `now`: only the QPs whose deadline has come,
    /// taken from the deadline heap (no walk over the others; a device may
    /// hold thousands of idle QPs).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        while let Some((qpn, at)) = self.timers.pop_due(now) {
            if let Some(qp) = self.qps.get_mut(&qpn).filter(|q| q.armed == Some(at)) {
                // Popped: the QP is re-armed below, whatever its deadline.
                qp.armed = None;
                due.push(qpn);
            }
        }
        for &qpn in &due {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                let (mrs, cqs, events) = (&mut self.mrs, &mut self.cqs[..], &mut self.events);
                Self::run_timers(qp, now, &mut self.ready, mrs, cqs, events);
                super::note_backlog(&mut self.backlogged, qp);
                // A deadline is its own QP's; one that is due again by
                // `now` waits for the next call.
                let next = qp_deadline(qp);
                self.timers.arm(qpn, &mut qp.armed, next);
            }
        }
        due.clear();
        self.due = due;
        self.prune_timers();
    }

    /// One QP's due timers: its pacer's release, the end of an RNR wait,
    /// the local ACK timeout.
    fn run_timers(
        qp: &mut Qp,
        now: Instant,
        ready: &mut VecDeque<u32>,
        mrs: &mut MrTable,
        cqs: &mut [Cq],
        events: &mut VecDeque<Event>,
    ) {
        if qp.paced_wait {
            qp.cc.advance(now);
        }
        if qp.paced_wait && qp.pacer.ready(now, qp.cc.rate_bps()) {
            qp.paced_wait = false;
            if !qp.ready {
                qp.ready = true;
                ready.push_back(qp.qpn);
            }
        }
        if matches!(qp.state, QpState::Rts | QpState::Sqd) {
            let rnr_over = qp.req.rnr_until.is_some_and(|t| t <= now);
            let timer_fired = qp.req.timer.is_some_and(|t| t <= now);
            if (rnr_over || timer_fired) && !qp.ready {
                qp.ready = true;
                ready.push_back(qp.qpn);
            }
            if rnr_over {
                qp.req.rnr_until = None;
                // Re-arm the ACK timer for the packets about to go again.
                qp.req.timer = ack_timeout(qp.attr.timeout).map(|t| now + t);
            }
            if timer_fired {
                let (req, mut env) = qp.completer(mrs, cqs, now);
                if let Outcome::Fatal(s) = req.on_timeout(&mut env) {
                    Self::protocol_error(qp, cqs, events, s);
                }
            }
        }
    }
}

/// Arms `qp`'s deadline in `timers` (the QP in hand); the caller settles
/// the heap after ([`Device::settle_timers`]).
pub(super) fn arm(timers: &mut DeadlineHeap<u32>, qp: &mut Qp) {
    let due = qp_deadline(qp);
    timers.arm(qp.qpn, &mut qp.armed, due);
}

/// Puts `qp` on the device's ready list unless it is there.
pub(super) fn mark_ready(ready: &mut VecDeque<u32>, qp: &mut Qp) {
    if !qp.ready {
        qp.ready = true;
        ready.push_back(qp.qpn);
    }
}

/// When a QP next needs [`Device::handle_timeout`]: its ACK timer or RNR
/// wait while it sends (RTS, SQD); and, while paced output is held back,
/// its pacer's release at today's rate or its controller's next timer,
/// which may raise the rate.
pub(super) fn qp_deadline(q: &Qp) -> Option<Instant> {
    // Plain matches: an iterator chain over the four compiled to a loop
    // that cost more than the rest of a re-arm (it runs several times a
    // frame).
    let mut due = None;
    if matches!(q.state, QpState::Rts | QpState::Sqd) {
        due = earlier(q.req.timer, q.req.rnr_until);
    }
    if q.paced_wait {
        let rate = q.cc.rate_bps();
        due = earlier(due, q.pacer.release_at(rate));
        due = earlier(due, q.cc.next_rate_change());
    }
    due
}
