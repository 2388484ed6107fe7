//! CM time values and the resend of a message that waits for an answer.
//!
//! CM timeouts travel as 5-bit exponents: 4.096 µs × 2^x (IBTA Vol. 1
//! §12.6.5 table 106, "Remote / Local CM Response Timeout", and §12.7).
//! Linux approximates them as 2^(x - 8) ms (`cm_convert_to_ms`); here they
//! are exact, so a virtual-time test can name the nanosecond a resend
//! happens.
//!
//! A REQ, a REP and a DREQ are each sent again when no answer came within
//! the wait, up to `Max CM Retries` times (§12.7, §12.9; in Linux the
//! MAD layer resends them with the `timeout_ms` and `retries` cm.c set).
//! The message is kept as sent and resent unchanged (same transaction
//! ID), as the MAD layer does.

use super::{CmAgent, CmEvent, CmState, ConnId, OutMad};
use crate::time::{Duration, Instant};
use crate::wire::cm::attr;

/// The CM time 4.096 µs × 2^`exp` (IBTA §12.6.5 table 106); exponents
/// over 31 count as 31 (the field is 5 bits).
pub fn cm_timeout(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// The local ACK timeout exponent to put in a REQ's path for a path whose
/// packet life time is `packet_life_time`, with the local CA's ACK delay
/// `ca_ack_delay`: about 4.096 µs × 2^ack_delay + 2 × 4.096 µs ×
/// 2^life_time (IBTA §12.7, "Local ACK Timeout"), as Linux's
/// `cm_ack_timeout` rounds it: the larger of the two exponents, one more
/// when the other is within a factor of two, at most 31. Linux's
/// rdma_cm on RoCE (packet life time 18, rxe's ACK delay 15) gives 19.
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let life = packet_life_time as u16 + 1;
    let delay = ca_ack_delay as u16;
    let t = if life >= delay {
        life + u16::from(delay + 1 >= life)
    } else {
        delay + u16::from(life + 1 >= delay)
    };
    t.min(31) as u8
}

/// A message waiting for its answer (§12.9: REQ Sent, REP Sent, DREQ
/// Sent): resent `left` more times, `wait` after each send.
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    /// The message as first sent.
    pub out: Box<OutMad>,
    /// Resends left.
    pub left: u8,
    /// How long to wait for the answer after a send: the response
    /// timeout, or what an MRA asked for (§12.6.6).
    pub wait: Duration,
}

impl CmAgent {
    /// Acts on every deadline due by `now`: resends a message still
    /// unanswered, gives up on one whose resends ran out (Linux
    /// `cm_process_send_error`: a REQ or REP makes the connection
    /// unreachable and frees it, a DREQ sends it to TimeWait), and frees a
    /// connection whose TimeWait is over.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, id)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if let Some(c) = self.conns.get_mut(&id) {
                c.due = None;
            }
            self.expire(now, id);
        }
    }

    fn expire(&mut self, now: Instant, id: ConnId) {
        use CmState::*;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.state == TimeWait {
            self.free(id);
            self.events.push_back(CmEvent::TimewaitExit { id });
            return;
        }
        let state = c.state;
        let Some(retry) = &mut c.retry else {
            return;
        };
        if retry.left > 0 {
            retry.left -= 1;
            let out = (*retry.out).clone();
            let due = now + retry.wait;
            let attr = u16::from_be_bytes([out.mad[16], out.mad[17]]);
            self.counters.tx_retries.bump(attr);
            self.push(out);
            self.arm(id, Some(due));
            return;
        }
        self.counters.timeouts += 1;
        let unanswered = match state {
            ReqSent | MraReqRcvd => attr::REQ,
            RepSent | MraRepRcvd => attr::REP,
            DreqSent => {
                self.enter_timewait(now, id);
                let timed_out = true;
                self.events
                    .push_back(CmEvent::Disconnected { id, timed_out });
                return;
            }
            _ => {
                c.retry = None;
                return;
            }
        };
        self.free(id);
        self.events
            .push_back(CmEvent::Unreachable { id, unanswered });
    }
}
