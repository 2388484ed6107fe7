//! The poll loop: one backend queue driven as
//! rx burst -> frame handler -> tx burst, counting everything.
//!
//! Call order, once per iteration of a datapath thread:
//!
//! 1. [`PollLoop::poll`] receives a burst, gives each frame to
//!    [`Handler::on_frame`], then calls [`Handler::on_poll`] so the handler
//!    can transmit new frames, then flushes the tx burst.
//! 2. Frames the queue had no room for stay queued for the next poll; a
//!    handler that finds the tx burst still full gets its frame back from
//!    [`Io::send`] (nothing is dropped behind its back).
//!
//! The `now` it hands on comes from a [`Clock`] (the TSC under DPDK).

use crate::backend::{Backend, Burst, FrameBuf};
use crate::time::{Clock, Instant};
use std::fmt;

/// What a poll loop counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames received from the backend.
    pub rx_packets: u64,
    /// Bytes of the frames received.
    pub rx_bytes: u64,
    /// Frames the backend accepted for transmission.
    pub tx_packets: u64,
    /// Bytes of the frames it accepted.
    pub tx_bytes: u64,
    /// Received frames the handler rejected.
    pub rx_dropped: u64,
    /// Frames the handler gave up on because the tx queue stayed full.
    pub tx_dropped: u64,
    /// Failed buffer allocations (mempool exhausted).
    pub alloc_failures: u64,
    /// tx bursts that left frames unsent (the queue's ring was full).
    pub tx_ring_full: u64,
    /// Calls of the poll loop.
    pub polls: u64,
    /// Polls that received or sent nothing.
    pub idle_polls: u64,
}

impl Counters {
    /// (name, value) pairs, in a stable order, for tables and JSON.
    pub fn fields(&self) -> [(&'static str, u64); 10] {
        [
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_dropped", self.rx_dropped),
            ("tx_dropped", self.tx_dropped),
            ("alloc_failures", self.alloc_failures),
            ("tx_ring_full", self.tx_ring_full),
            ("polls", self.polls),
            ("idle_polls", self.idle_polls),
        ]
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.fields().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// What a poll loop feeds frames to.
pub trait Handler<B: Backend> {
    /// A received frame. Returns false to count it as dropped. Dropping the
    /// frame frees it; sending it through `io` forwards it without a copy.
    fn on_frame(&mut self, now: Instant, frame: B::Buf, io: &mut Io<'_, B>) -> bool;

    /// Called once per poll after the received frames: transmit new frames.
    fn on_poll(&mut self, now: Instant, io: &mut Io<'_, B>);
}

/// The handler's access to buffers and the tx burst during a poll.
pub struct Io<'a, B: Backend> {
    backend: &'a mut B,
    tx: &'a mut Burst<B::Buf>,
    counters: &'a mut Counters,
}

impl<B: Backend> Io<'_, B> {
    /// An empty buffer, or `None` (counted) when the pool is exhausted.
    #[inline]
    pub fn alloc(&mut self) -> Option<B::Buf> {
        let b = self.backend.alloc();
        if b.is_none() {
            self.counters.alloc_failures += 1;
        }
        b
    }

    /// Queues `frame` for transmission, flushing the burst when it is full.
    /// Gives the frame back when the queue has no room even after a flush.
    #[inline]
    pub fn send(&mut self, frame: B::Buf) -> Result<(), B::Buf> {
        if self.tx.is_full() {
            flush(self.backend, self.tx, self.counters);
        }
        self.tx.try_push(frame).map_err(|e| e.element())
    }

    /// [`Io::send`], counting the frame as dropped when there is no room.
    #[inline]
    pub fn send_or_drop(&mut self, frame: B::Buf) -> bool {
        match self.send(frame) {
            Ok(()) => true,
            Err(_) => {
                self.counters.tx_dropped += 1;
                false
            }
        }
    }

    /// Frames that can be queued before the next flush.
    pub fn tx_room(&self) -> usize {
        self.tx.remaining_capacity()
    }
}

fn flush<B: Backend>(backend: &mut B, tx: &mut Burst<B::Buf>, c: &mut Counters) -> usize {
    if tx.is_empty() {
        return 0;
    }
    let before: usize = tx.iter().map(FrameBuf::len).sum();
    let sent = backend.tx_burst(tx);
    let after: usize = tx.iter().map(FrameBuf::len).sum();
    c.tx_packets += sent as u64;
    c.tx_bytes += (before - after) as u64;
    if !tx.is_empty() {
        c.tx_ring_full += 1;
    }
    sent
}

/// One queue's poll loop: the backend, its rx and tx bursts and counters.
pub struct PollLoop<B: Backend> {
    backend: B,
    rx: Burst<B::Buf>,
    tx: Burst<B::Buf>,
    counters: Counters,
}

impl<B: Backend> PollLoop<B> {
    /// A poll loop over `backend` with empty bursts and zero counters.
    pub fn new(backend: B) -> Self {
        PollLoop {
            backend,
            rx: Burst::new(),
            tx: Burst::new(),
            counters: Counters::default(),
        }
    }

    /// The backend it polls.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// What it counted so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Frames queued for transmission but not yet accepted by the queue.
    pub fn tx_pending(&self) -> usize {
        self.tx.len()
    }

    /// One iteration: rx burst -> handler -> tx burst. Returns the frames
    /// received plus sent (0 means an idle poll).
    pub fn poll<H: Handler<B>>(&mut self, now: Instant, handler: &mut H) -> usize {
        let c = &mut self.counters;
        c.polls += 1;
        let n = self.backend.rx_burst(&mut self.rx);
        c.rx_packets += n as u64;
        let tx_before = c.tx_packets;
        let mut io = Io {
            backend: &mut self.backend,
            tx: &mut self.tx,
            counters: c,
        };
        for frame in self.rx.drain(..) {
            io.counters.rx_bytes += frame.len() as u64;
            if !handler.on_frame(now, frame, &mut io) {
                io.counters.rx_dropped += 1;
            }
        }
        handler.on_poll(now, &mut io);
        flush(&mut self.backend, &mut self.tx, &mut self.counters);
        let work = n + (self.counters.tx_packets - tx_before) as usize;
        if work == 0 {
            self.counters.idle_polls += 1;
        }
        work
    }

    /// Polls until `done` says so or `deadline` passes on `clock`. Returns
    /// whether `done` was reached.
    pub fn run_until<H: Handler<B>, C: Clock>(
        &mut self,
        clock: &C,
        handler: &mut H,
        deadline: Instant,
        mut done: impl FnMut(&H) -> bool,
    ) -> bool {
        loop {
            if done(handler) {
                return true;
            }
            let now = clock.now();
            if now >= deadline {
                return false;
            }
            self.poll(now, handler);
        }
    }

    /// Hands queued tx frames to the queue, without polling rx, until none
    /// are left or `deadline` passes. Returns whether all were accepted.
    /// For ending a run: a peer that already left may tear its side of a
    /// shared-memory link down, so receiving then is not safe for every PMD.
    pub fn drain_tx<C: Clock>(&mut self, clock: &C, deadline: Instant) -> bool {
        while !self.tx.is_empty() {
            if clock.now() >= deadline {
                return false;
            }
            flush(&mut self.backend, &mut self.tx, &mut self.counters);
        }
        true
    }

    /// Gives the backend back (pending tx frames are freed).
    pub fn into_backend(mut self) -> B {
        self.backend.free_burst(&mut self.tx);
        self.backend
    }
}

/// The io benchmark's loop through the safe layer: the same work as
/// `dpdk::bare::io_loop` (bulk-allocate, stamp a sequence number, tx burst,
/// rx burst, bulk free), over any backend.
pub fn io_loop<B: Backend>(tx: &mut B, rx: &mut B, frame_len: usize, packets: u64) -> u64 {
    io_loop_with(
        tx,
        rx,
        frame_len,
        packets,
        |b: &mut B, out: &mut Burst<B::Buf>, n| {
            for _ in 0..n {
                match b.alloc() {
                    Some(m) => out.push(m),
                    None => break,
                }
            }
        },
    )
}

/// [`io_loop`] with a caller-supplied bulk allocator (DPDK's is one call).
pub fn io_loop_with<B: Backend>(
    tx: &mut B,
    rx: &mut B,
    frame_len: usize,
    packets: u64,
    mut alloc: impl FnMut(&mut B, &mut Burst<B::Buf>, usize),
) -> u64 {
    let mut out: Burst<B::Buf> = Burst::new();
    let mut inp: Burst<B::Buf> = Burst::new();
    let (mut sent, mut received, mut seq) = (0u64, 0u64, 0u64);
    let mut idle = 0u32;
    while received < packets && idle < 1_000_000 {
        let n = (packets - sent).min(crate::backend::BURST as u64) as usize;
        if n > 0 {
            alloc(tx, &mut out, n);
            for m in out.iter_mut() {
                if let Some(d) = m.append(frame_len) {
                    d[..8].copy_from_slice(&seq.to_be_bytes());
                }
                seq += 1;
            }
            sent += tx.tx_burst(&mut out) as u64;
            tx.free_burst(&mut out);
        }
        let r = rx.rx_burst(&mut inp);
        if r > 0 {
            rx.free_burst(&mut inp);
            received += r as u64;
            idle = 0;
        } else {
            idle += 1;
        }
    }
    received
}

/// A pcap recorder around `port` writing every frame to `path` (classic
/// pcap, nanoseconds), its timestamps `clock`'s placed on the wall clock.
pub fn recorder<B: Backend, C: Clock>(
    port: B,
    clock: C,
    path: &std::path::Path,
) -> anyhow::Result<crate::backend::capture::Capture<B, C, std::io::BufWriter<std::fs::File>>> {
    let w = crate::pcap::create(path, crate::pcap::Precision::Nano)?;
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let epoch = unix.saturating_sub(clock.now().as_nanos());
    Ok(crate::backend::capture::Capture::new(port, clock, w, epoch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback;

    /// Echoes every frame back without a copy.
    struct Echo;
    impl<B: Backend> Handler<B> for Echo {
        fn on_frame(&mut self, _: Instant, f: B::Buf, io: &mut Io<'_, B>) -> bool {
            io.send_or_drop(f)
        }
        fn on_poll(&mut self, _: Instant, _: &mut Io<'_, B>) {}
    }

    /// Sends `left` one-byte frames, counts what comes back.
    struct Source {
        left: u32,
        back: u32,
    }
    impl<B: Backend> Handler<B> for Source {
        fn on_frame(&mut self, _: Instant, f: B::Buf, _: &mut Io<'_, B>) -> bool {
            self.back += 1;
            f.len() == 1
        }
        fn on_poll(&mut self, _: Instant, io: &mut Io<'_, B>) {
            while self.left > 0 && io.tx_room() > 0 {
                let Some(mut f) = io.alloc() else { return };
                f.append(1).unwrap()[0] = self.left as u8;
                if io.send(f).is_err() {
                    return;
                }
                self.left -= 1;
            }
        }
    }

    #[test]
    fn frames_go_round_and_counters_add_up() {
        let (a, b) = loopback::pair(16, 128);
        let (mut la, mut lb) = (PollLoop::new(a), PollLoop::new(b));
        let mut src = Source {
            left: 1000,
            back: 0,
        };
        let mut echo = Echo;
        for _ in 0..10_000 {
            la.poll(Instant::ZERO, &mut src);
            lb.poll(Instant::ZERO, &mut echo);
            if src.back == 1000 {
                break;
            }
        }
        assert_eq!(src.back, 1000);
        let (ca, cb) = (la.counters(), lb.counters());
        assert_eq!(
            (ca.tx_packets, ca.rx_packets, ca.rx_dropped),
            (1000, 1000, 0)
        );
        assert_eq!(
            (cb.rx_packets, cb.tx_packets, cb.tx_bytes),
            (1000, 1000, 1000)
        );
        // The queue holds 16 of a 32-frame burst: the source met a full ring and kept
        // its frames rather than dropping them.
        assert!(ca.tx_ring_full > 0);
        assert_eq!(ca.tx_dropped + cb.tx_dropped, 0);
    }

    #[test]
    fn io_loop_moves_every_frame() {
        let (mut a, mut b) = loopback::pair(1024, 2048);
        assert_eq!(io_loop(&mut a, &mut b, 100, 5000), 5000);
    }
}
