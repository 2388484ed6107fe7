//! The send log: each request packet's send time and length, from its
//! first sending until it is acknowledged. It gives the reaction point
//! its per-ACK input ([`crate::cc::AckSample`]): bytes newly acknowledged,
//! bytes in flight, and an RTT sample from the transport's own clock (the
//! engine's on DPDK, virtual time in the simulator).
//!
//! A packet sent again is timed from its latest sending and its sample is
//! flagged ([`AckSample::rtt_resent`]): Karn's rule (RFC 6298 §3) would
//! drop it, which under go-back-N leaves a delay-based controller blind
//! while its queue overflows; the controller chooses. A READ request is
//! logged at its first PSN only: its response is data, not an
//! acknowledgement of bytes sent, so it gives bytes and no sample.
//!
//! A QP whose rate controller reads no acknowledgements keeps none: its
//! log is empty (`SendLog::default()`) and every call returns at once.
//!
//! The log is a ring indexed by PSN, as long as the QP's `max_inflight`
//! (a power of two, at most [`SendLog::MAX_SLOTS`]); an entry remembers
//! its PSN, so one overwritten by a later packet (a window wider than the
//! ring) is seen as gone rather than misread.

use crate::cc::AckSample;
use crate::time::Instant;
use crate::wire::Psn;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The PSN + 1 this slot holds (0: empty).
    tag: u32,
    sent: Instant,
    bytes: u32,
    resent: bool,
}

/// The log of one requester.
/// `repr(C)`, the ring first: every ACK reads whether there is one, and
/// a QP without a log then reads nothing else (see `Qp`'s layout).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct SendLog {
    slots: Vec<Slot>,
    inflight: u64,
    /// What the acknowledgements since the last `take` said.
    pending: Option<AckSample>,
}

impl SendLog {
    /// The longest ring: beyond this many packets in flight, the oldest
    /// give no sample (and their bytes leave the in-flight count early).
    pub const MAX_SLOTS: usize = 1 << 16;

    /// A log for a requester with at most `max_inflight` PSNs in flight.
    pub fn new(max_inflight: u32) -> SendLog {
        let n = (max_inflight as usize)
            .clamp(1, Self::MAX_SLOTS)
            .next_power_of_two();
        SendLog {
            slots: vec![Slot::default(); n],
            inflight: 0,
            pending: None,
        }
    }

    fn slot(&mut self, psn: Psn) -> &mut Slot {
        let mask = self.slots.len() - 1;
        &mut self.slots[psn.value() as usize & mask]
    }

    /// A request packet of `bytes` (the whole frame) with PSN `psn` left
    /// at `now`; `again`: it was sent before.
    pub fn sent(&mut self, psn: Psn, now: Instant, bytes: u32, again: bool) {
        if self.slots.is_empty() {
            return;
        }
        let tag = psn.value() + 1;
        let s = self.slot(psn);
        if s.tag == tag {
            s.resent |= again;
            s.sent = now;
            return;
        }
        if s.tag != 0 {
            // An older packet still unacknowledged: the window is wider
            // than the ring; it leaves the count now.
            let old = s.bytes;
            self.inflight -= u64::from(old);
        }
        let s = self.slot(psn);
        *s = Slot {
            tag,
            sent: now,
            bytes,
            resent: again,
        };
        self.inflight += u64::from(bytes);
    }

    /// Every packet in `from..to` is acknowledged, at `now`: their bytes
    /// leave the in-flight count and join the pending sample, whose RTT is
    /// the newest one's (PSN `to - 1`) if it was sent once.
    pub fn acked(&mut self, from: Psn, to: Psn, now: Instant) {
        let n = to.diff(from);
        if n <= 0 || self.slots.is_empty() {
            return;
        }
        let mut sample = self.pending.take().unwrap_or_default();
        // A jump longer than the ring (a long READ) visits each slot once.
        let visit = (n as usize).min(self.slots.len()) as u32;
        let start = to.sub(visit);
        for k in 0..visit {
            let psn = start.add(k);
            let tag = psn.value() + 1;
            let s = *self.slot(psn);
            if s.tag != tag {
                continue;
            }
            *self.slot(psn) = Slot::default();
            self.inflight -= u64::from(s.bytes);
            sample.acked_bytes += u64::from(s.bytes);
            sample.acked_pkts += 1;
            if k + 1 == visit {
                sample.rtt = Some(now.saturating_since(s.sent));
                sample.rtt_resent = s.resent;
                sample.rtt_bytes = s.bytes;
            }
        }
        sample.inflight_bytes = self.inflight;
        self.pending = Some(sample);
    }

    /// A CNP arrived: the next sample carries the ECN echo.
    pub fn cnp(&mut self) {
        if self.slots.is_empty() {
            return;
        }
        self.pending.get_or_insert_with(AckSample::default).ecn_echo = true;
    }

    /// The sample the acknowledgements since the last call make, if any
    /// acknowledged something.
    pub fn take(&mut self) -> Option<AckSample> {
        if self.slots.is_empty() {
            // A log that keeps nothing has no sample: decided without
            // reading the sample's own cache line.
            return None;
        }
        match self.pending {
            Some(s) if s.acked_pkts > 0 => self.pending.take(),
            _ => None,
        }
    }

    /// Bytes sent and not acknowledged.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight
    }

    /// Forgets everything (the QP was reset).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = Slot::default());
        self.inflight = 0;
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    #[test]
    fn an_ack_gives_the_bytes_it_covers_and_the_newest_packets_rtt() {
        let mut l = SendLog::new(128);
        let p = Psn::new(0xFF_FFFE);
        l.sent(p, at(0), 1000, false);
        l.sent(p.add(1), at(1), 1000, false);
        l.sent(p.add(2), at(2), 500, false);
        assert_eq!(l.inflight_bytes(), 2500);
        l.acked(p, p.add(2), at(11));
        let s = l.take().unwrap();
        assert_eq!((s.acked_bytes, s.acked_pkts), (2000, 2));
        assert_eq!(s.rtt, Some(Duration::from_micros(10)));
        assert_eq!((s.rtt_bytes, s.inflight_bytes), (1000, 500));
        assert_eq!(l.take(), None);
    }

    #[test]
    fn a_resent_packet_is_timed_from_its_latest_sending_and_flagged() {
        let mut l = SendLog::new(128);
        let p = Psn::new(7);
        l.sent(p, at(0), 1000, false);
        l.sent(p, at(50), 1000, true);
        assert_eq!(l.inflight_bytes(), 1000, "its bytes count once");
        l.cnp();
        l.acked(p, p.add(1), at(60));
        let s = l.take().unwrap();
        assert_eq!((s.acked_bytes, s.ecn_echo), (1000, true));
        assert_eq!(
            (s.rtt, s.rtt_resent),
            (Some(Duration::from_micros(10)), true)
        );
    }

    #[test]
    fn a_window_wider_than_the_ring_loses_samples_not_the_count() {
        let mut l = SendLog::new(2);
        for k in 0..5 {
            l.sent(Psn::new(k), at(k as u64), 100, false);
        }
        // Two slots: PSNs 3 and 4 are held, 0..3 left the count.
        assert_eq!(l.inflight_bytes(), 200);
        l.acked(Psn::new(0), Psn::new(5), at(10));
        let s = l.take().unwrap();
        assert_eq!((s.acked_pkts, s.acked_bytes), (2, 200));
        assert_eq!(s.rtt, Some(Duration::from_micros(6)));
        assert_eq!(l.inflight_bytes(), 0);
    }

    #[test]
    fn acknowledging_nothing_new_makes_no_sample() {
        let mut l = SendLog::new(8);
        l.sent(Psn::new(1), at(0), 100, false);
        l.acked(Psn::new(1), Psn::new(1), at(5));
        assert_eq!(l.take(), None);
        l.cnp();
        assert_eq!(l.take(), None, "an echo alone waits for an ACK");
    }

    #[test]
    fn an_empty_log_keeps_nothing() {
        let mut l = SendLog::default();
        l.sent(Psn::new(1), at(0), 100, false);
        l.cnp();
        l.acked(Psn::new(1), Psn::new(2), at(5));
        assert_eq!((l.take(), l.inflight_bytes()), (None, 0));
    }
}
