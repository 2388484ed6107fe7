//! The per-packet engine of the [`Fabric`]: the calendar of pending
//! events, virtual time's advance through them, and each frame's way from
//! a host's send through egress queues, links and switches to a host's
//! inbox.

use super::calendar::EventKind;
use super::hop::{self, Hop};
use super::pfc::{is_mac_control, switch_port_mac, PfcFrame};
use super::route::Decision;
use super::sched::{self, frame_priority, DEFAULT_DSCP_TO_PRIORITY};
use super::{serialization_time, ChannelId, Endpoint, Fabric, HostId, SwitchId};
use super::{FRAME_CAPACITY, SPARE_BUFFERS};
use crate::backend::loopback::VecBuf;
use crate::backend::FrameBuf;
use crate::time::{Clock, Duration, Instant};
use crate::wire::ethernet::HEADER_LEN as ETH_HEADER_LEN;
use crate::wire::int::{self, IntHop};

impl Fabric {
    /// When the earliest pending event is due, if any.
    pub fn next_event(&self) -> Option<Instant> {
        self.events.peek_time()
    }

    /// Processes every event due by `t` (included), in time order, then sets
    /// the clock to `t`. Frames that arrive at a host wait in its inbox for
    /// `rx_burst`; frames that arrive at a switch are queued on their egress
    /// links. The clock never goes back: a `t` before [`Fabric::now`] does
    /// nothing.
    pub fn advance_to(&mut self, t: Instant) {
        while let Some(ev) = self.events.pop_due(t) {
            self.now = self.now.max(ev.at);
            self.events_done += 1;
            match ev.kind {
                EventKind::TxDone(ch) => self.tx_done(ch),
                EventKind::Arrive(ch, frame) => self.arrive(ch, frame),
                EventKind::PauseExpire(ch, p) => self.pause_expired(ch, p, ev.at),
                EventKind::PfcRefresh(s, port) => self.pfc_refresh(s, port, ev.at),
            }
        }
        self.now = self.now.max(t);
        // An overtaken PFC timer is never the next event.
        if self.events.timer_on_top() {
            let mut events = std::mem::take(&mut self.events);
            events.drop_stale(|kind, at| self.timer_is_stale(kind, at));
            self.events = events;
        }
    }

    /// Processes the pending events instant by instant, as
    /// [`Fabric::advance_to`] each next event's time, up to `bound`
    /// (included), and stops after the first instant that wakes a host
    /// ([`Fabric::take_woken`]) or finds a PFC deadlock. Does nothing if a
    /// host is already woken.
    pub fn advance_while_quiet(&mut self, bound: Instant) {
        while self.woken.is_empty() && self.deadlocks().is_empty() {
            match self.next_event() {
                Some(t) if t <= bound => self.advance_to(t),
                _ => break,
            }
        }
    }

    /// Moves into `out` the hosts that something happened to since the
    /// last call, each once, in the order it first happened: a frame
    /// arrived in its inbox, or one left its link (so its NIC's ring has
    /// room again). A driver that pumps only these hosts, and those whose
    /// own timers are due, misses nothing.
    pub fn take_woken(&mut self, out: &mut Vec<HostId>) {
        for h in self.woken.drain(..) {
            self.hosts[h.0].woken = false;
            out.push(h);
        }
    }

    fn wake(&mut self, host: HostId) {
        let h = &mut self.hosts[host.0];
        if !h.woken {
            h.woken = true;
            self.woken.push(host);
        }
    }

    /// Events processed so far: frames finishing serialisation, frames
    /// arriving, PFC timers. What a run's events per second count.
    pub fn events_processed(&self) -> u64 {
        self.events_done
    }

    /// [`Fabric::advance_to`] `now + d`.
    pub fn advance_by(&mut self, d: Duration) {
        self.advance_to(self.now + d);
    }

    /// Processes events until none is pending and returns the time then
    /// (that of the last event, or `now` if there was none). Endpoints do
    /// not run meanwhile, so this drains what is in flight.
    pub fn run_until_idle(&mut self) -> Instant {
        while let Some(t) = self.next_event() {
            self.advance_to(t);
        }
        self.now
    }

    /// A host hands a frame to its link at `now`.
    pub(super) fn send(&mut self, host: HostId, frame: VecBuf) {
        let now = self.now;
        let h = &mut self.hosts[host.0];
        h.counters.tx_frames += 1;
        h.counters.tx_bytes += frame.len() as u64;
        if let Some(cap) = &mut h.capture {
            cap.record(now, frame.data(), self.icrc_offload);
        }
        match h.egress {
            Some(ch) => self.offer(ch, frame),
            None => h.counters.dropped_no_link += 1,
        }
    }

    /// Hands a frame a host sends to its link direction: refused if it is
    /// down, else queued ([`Fabric::enqueue`]).
    fn offer(&mut self, ch: ChannelId, frame: VecBuf) {
        let c = &mut self.channels[ch.0];
        if c.up {
            self.enqueue(ch, frame);
        } else {
            c.counters.dropped_down += 1;
        }
    }

    /// A host queues a frame on its link at `now` (or it is dropped at
    /// the tail), classified by the default DSCP table.
    fn enqueue(&mut self, ch: ChannelId, frame: VecBuf) {
        let p = frame_priority(frame.data(), &DEFAULT_DSCP_TO_PRIORITY);
        self.enqueue_class(ch, frame, p, true, None);
    }

    /// Queues a frame of priority `p` on a link direction at `now`, or
    /// drops it at the tail if `droppable`, and starts serialising if the
    /// link is idle; `ingress` is the switch port it came in by. Returns
    /// whether it was queued.
    ///
    /// ECN marking at enqueue ([`LinkConfig::ecn`](super::LinkConfig::ecn)) is decided first, on
    /// the bytes already waiting in the frame's priority queue, whether or
    /// not the frame then fits; a frame the drop-tail limit refuses counts
    /// as dropped, never as marked. Marking at dequeue happens in
    /// [`Fabric::tx_done`].
    pub(super) fn enqueue_class(
        &mut self,
        ch: ChannelId,
        mut frame: VecBuf,
        p: u8,
        droppable: bool,
        ingress: Option<u32>,
    ) -> bool {
        let c = &mut self.channels[ch.0];
        let marked = match c.cfg.red(p) {
            Some(red) if !red.at_dequeue => {
                red.apply(c.queue.class_bytes(p), frame.data_mut(), &mut self.rng)
            }
            _ => false,
        };
        if let Some(cap) = c.cfg.queue_bytes.filter(|_| droppable) {
            if c.queue.bytes() + frame.len() > cap {
                c.counters.dropped_queue += 1;
                self.recycle(frame);
                return false;
            }
        }
        if marked {
            c.counters.ecn_marked += 1;
        }
        c.queue.push(p, frame, ingress);
        let q = c.queue.bytes() as u64;
        c.counters.max_queue_bytes = c.counters.max_queue_bytes.max(q);
        self.start_next(ch);
        true
    }

    /// Starts serialising the next frame if the link is idle: a waiting
    /// PFC frame, else the scheduler's pick (see [`EgressQueue`](super::EgressQueue)).
    pub(super) fn start_next(&mut self, ch: ChannelId) {
        let c = &self.channels[ch.0];
        if c.queue.is_busy() {
            return;
        }
        let (strict, src) = match c.from {
            Endpoint::Switch { switch, port } => (
                self.switches[switch.0].cfg.strict,
                switch_port_mac(switch, port),
            ),
            Endpoint::Host(h) => (0, self.hosts[h.0].mac),
        };
        let c = &mut self.channels[ch.0];
        let emit = |pfc: &PfcFrame| {
            let mut f = VecBuf::with_capacity(PfcFrame::LEN);
            if let Some(b) = f.append(PfcFrame::LEN) {
                b.copy_from_slice(&pfc.emit(src));
            }
            f
        };
        let Some(len) = c.queue.start(strict, emit) else {
            return;
        };
        let done = self.now + serialization_time(len, c.cfg.rate_bps);
        self.events.push(done, EventKind::TxDone(ch));
    }

    /// The frame on the wire has left: a PFC frame goes to the far end; a
    /// data frame leaves its switch's buffer, meets its faults and is
    /// scheduled to arrive. Then the next one starts.
    fn tx_done(&mut self, ch: ChannelId) {
        if let Endpoint::Host(h) = self.channels[ch.0].from {
            self.wake(h);
        }
        let c = &mut self.channels[ch.0];
        let (p, mut frame, ingress) = match c.queue.finish(self.now) {
            None => return self.start_next(ch),
            Some(sched::Finished::Control(frame)) => {
                c.counters.pfc_tx += 1;
                self.events
                    .push(self.now + c.cfg.delay, EventKind::Arrive(ch, frame));
                return self.start_next(ch);
            }
            Some(sched::Finished::Data { priority, queued }) => {
                (priority, queued.frame, queued.ingress)
            }
        };
        let release = match (c.from, ingress) {
            (Endpoint::Switch { switch, .. }, Some(port)) => {
                Some((switch, port as usize, frame.len()))
            }
            _ => None,
        };
        // What of the link's configuration this needs, copied out (the
        // whole of it is hundreds of bytes).
        let red = c.cfg.red(p).filter(|r| r.at_dequeue).copied();
        let (rate_bps, delay) = (c.cfg.rate_bps, c.cfg.delay);
        let (loss, corrupt, dup) = (c.cfg.loss, c.cfg.corrupt, c.cfg.dup);
        let (reorder, reorder_delay) = (c.cfg.reorder, c.cfg.reorder_delay);
        if let Some(red) = red {
            if red.apply(c.queue.class_bytes(p), frame.data_mut(), &mut self.rng) {
                c.counters.ecn_marked += 1;
            }
        }
        if release.is_some() && self.int_stamping {
            // A switch stamps its hop into an INT trailer (crate::wire::int)
            // as the frame leaves: the port's bytes sent before it and the
            // bytes still queued behind it.
            let hop = IntHop::stamp(
                rate_bps,
                self.now.as_nanos(),
                c.counters.tx_bytes,
                c.queue.bytes() as u64,
            );
            if int::stamp(frame.data_mut(), hop) {
                c.counters.int_stamped += 1;
            }
        }
        let n = &mut c.counters;
        n.tx_frames += 1;
        n.tx_bytes += frame.len() as u64;
        let rng = &mut self.rng;
        if rng.chance(loss) {
            n.dropped_loss += 1;
            self.recycle(frame);
        } else {
            if rng.chance(corrupt) && frame.len() > ETH_HEADER_LEN {
                if self.icrc_offload {
                    // The sender's NIC put the real ICRC on the wire.
                    crate::wire::frame::complete_offloaded_icrc(frame.data_mut());
                }
                let span = (frame.len() - ETH_HEADER_LEN) as u64;
                let at = ETH_HEADER_LEN + rng.below(span) as usize;
                let bit = rng.below(8);
                frame.data_mut()[at] ^= 1 << bit;
                n.corrupted += 1;
            }
            let dup = rng.chance(dup);
            let mut arrival = self.now + delay;
            if rng.chance(reorder) {
                let extra = 1 + rng.below(reorder_delay.as_nanos());
                arrival += Duration::from_nanos(extra);
                n.reordered += 1;
            }
            if dup {
                n.duplicated += 1;
                let copy = frame.clone();
                self.events.push(arrival, EventKind::Arrive(ch, frame));
                self.events.push(arrival, EventKind::Arrive(ch, copy));
            } else {
                self.events.push(arrival, EventKind::Arrive(ch, frame));
            }
        }
        if let Some((switch, port, len)) = release {
            self.switch_release(switch, port, p, len);
        }
        self.start_next(ch);
    }

    /// Keeps a dropped frame's buffer for a host's next
    /// [`Backend::alloc`](crate::backend::Backend::alloc) (up to a bound),
    /// as a NIC's driver returns an mbuf to its pool.
    pub(super) fn recycle(&mut self, frame: VecBuf) {
        if self.spare.len() < SPARE_BUFFERS && frame.capacity() >= FRAME_CAPACITY {
            self.spare.push(frame);
        }
    }

    /// A frame reaches the far end of a link direction.
    fn arrive(&mut self, ch: ChannelId, frame: VecBuf) {
        if is_mac_control(frame.data()) {
            return self.mac_control_received(ch, &frame);
        }
        let c = &mut self.channels[ch.0];
        c.counters.rx_frames += 1;
        c.counters.rx_bytes += frame.len() as u64;
        match c.to {
            Endpoint::Host(h) => self.deliver(h, frame),
            Endpoint::Switch { switch, port } => self.forward(switch, port, frame),
        }
    }

    /// A switch port's link directions: (into the port, out of it).
    pub(super) fn switch_port_channels(
        &self,
        switch: SwitchId,
        port: usize,
    ) -> (ChannelId, ChannelId) {
        let p = &self.switches[switch.0].ports[port];
        (p.ingress, p.egress)
    }

    fn deliver(&mut self, host: HostId, frame: VecBuf) {
        let now = self.now;
        let h = &mut self.hosts[host.0];
        h.counters.rx_frames += 1;
        h.counters.rx_bytes += frame.len() as u64;
        if let Some(cap) = &mut h.capture {
            cap.record(now, frame.data(), self.icrc_offload);
        }
        h.inbox.push_back(frame);
        self.wake(host);
    }

    /// A switch's forwarding decision for a frame that has arrived by
    /// `in_port` (see the module docs).
    fn forward(&mut self, switch: SwitchId, in_port: usize, mut frame: VecBuf) {
        self.fresh_routes();
        let decision = self
            .routes
            .decide(&self.switches, switch.0, in_port, frame.data());
        let sw = &mut self.switches[switch.0];
        if matches!(decision, Decision::Port(_) | Decision::Flood)
            && hop::forward(frame.data_mut()) == Hop::Expired
        {
            sw.counters.dropped_ttl += 1;
            return;
        }
        match decision {
            Decision::Port(p) => {
                sw.counters.forwarded += 1;
                let egress = sw.ports[p].egress;
                self.switch_enqueue(switch, in_port, egress, frame);
            }
            Decision::Flood => {
                sw.counters.flooded += 1;
                for i in self.routes.flood_range(switch.0) {
                    let p = self.routes.flood_port(i);
                    if p != in_port {
                        let egress = self.switches[switch.0].ports[p].egress;
                        self.switch_enqueue(switch, in_port, egress, frame.clone());
                    }
                }
            }
            Decision::Unknown => sw.counters.dropped_unknown += 1,
            Decision::NoRoute => sw.counters.dropped_no_route += 1,
            Decision::Runt => sw.counters.dropped_runt += 1,
        }
    }
}

impl Clock for Fabric {
    fn now(&self) -> Instant {
        self.now
    }
}
