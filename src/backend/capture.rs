//! A pcap recorder around any backend queue: every frame received and
//! every frame sent goes to a classic pcap file, with the time of a
//! [`Clock`] the caller hands in. What a user reaches for first when a peer
//! and ferroce do not get along: `ferroce decode` or Wireshark reads it.
//!
//! A frame the queue refuses stays with the caller, who offers it again
//! (the [`Backend::tx_burst`] contract); it is recorded once, when first
//! offered.

use super::{Backend, Burst, FrameBuf, Layout};
use crate::pcap::{PcapError, Writer};
use crate::time::Clock;
use std::io::Write;

/// A backend whose frames are also written to a pcap file.
pub struct Capture<B: Backend, C: Clock, W: Write> {
    inner: B,
    clock: C,
    writer: Writer<W>,
    /// Added to the clock's nanoseconds: the clock's epoch as Unix time.
    epoch_ns: u64,
    /// Frames at the front of the last tx burst that were recorded but
    /// not taken.
    recorded_unsent: usize,
    frames: u64,
    error: Option<PcapError>,
}

impl<B: Backend, C: Clock, W: Write> Capture<B, C, W> {
    /// Records `inner`'s frames into `writer`, stamped `epoch_ns` +
    /// `clock.now()`.
    pub fn new(inner: B, clock: C, writer: Writer<W>, epoch_ns: u64) -> Self {
        Capture {
            inner,
            clock,
            writer,
            epoch_ns,
            recorded_unsent: 0,
            frames: 0,
            error: None,
        }
    }

    /// Writes one frame stamped now; after a write error it records
    /// nothing more (the error waits for [`Capture::finish`]).
    /// Records a frame whole, every segment of a chained one.
    fn record_frame<F: FrameBuf>(&mut self, f: &F) {
        match f.layout() {
            Layout::One(d) => self.record(d),
            _ => {
                let mut whole = [0u8; 16 << 10];
                if let Some(n) = f.read_into(&mut whole) {
                    self.record(&whole[..n]);
                }
            }
        }
    }

    fn record(&mut self, data: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let ts = self.epoch_ns + self.clock.now().as_nanos();
        match self.writer.write(ts, data) {
            Ok(()) => self.frames += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// Frames recorded so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes the file and gives back the queue; the first write error,
    /// if any, is reported here (the datapath never stops for the file).
    pub fn finish(mut self) -> Result<(B, u64), PcapError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.writer.flush()?;
        Ok((self.inner, self.frames))
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

impl<B: Backend, C: Clock, W: Write> Backend for Capture<B, C, W> {
    type Buf = B::Buf;

    fn rx_burst(&mut self, out: &mut Burst<B::Buf>) -> usize {
        let before = out.len();
        let n = self.inner.rx_burst(out);
        for f in &out[before..] {
            self.record_frame(f);
        }
        n
    }

    fn alloc(&mut self) -> Option<B::Buf> {
        self.inner.alloc()
    }

    fn tx_burst(&mut self, frames: &mut Burst<B::Buf>) -> usize {
        let skip = self.recorded_unsent.min(frames.len());
        for f in &frames[skip..] {
            self.record_frame(f);
        }
        let n = self.inner.tx_burst(frames);
        self.recorded_unsent = frames.len();
        n
    }

    fn free_burst(&mut self, frames: &mut Burst<B::Buf>) {
        self.inner.free_burst(frames)
    }

    // A frame that carries its payload by reference is recorded whole
    // (every segment) when it is sent.
    fn can_lend(&self) -> bool {
        self.inner.can_lend()
    }

    fn attach(
        &mut self,
        frame: &mut B::Buf,
        head: usize,
        mem: &dyn core::any::Any,
        offset: usize,
        len: usize,
    ) -> bool {
        self.inner.attach(frame, head, mem, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback;
    use crate::pcap::Precision;
    use crate::time::Instant;
    use std::cell::Cell;

    struct Ticks(Cell<u64>);
    impl Clock for Ticks {
        fn now(&self) -> Instant {
            self.0.set(self.0.get() + 1);
            Instant::from_nanos(self.0.get())
        }
    }

    #[test]
    fn records_what_is_sent_once_and_what_is_received() {
        let (a, mut b) = loopback::pair(2, 64);
        let w = Writer::new(Vec::new(), Precision::Nano, 1, 65535).unwrap();
        let mut cap = Capture::new(a, Ticks(Cell::new(0)), w, 1_000);
        let mut tx = Burst::new();
        for i in 0..3u8 {
            let mut f = cap.alloc().unwrap();
            f.append(20).unwrap().fill(i);
            tx.push(f);
        }
        // The queue holds 2: one frame stays and is offered again.
        assert_eq!(cap.tx_burst(&mut tx), 2);
        assert_eq!(cap.frames(), 3);
        let mut rx = Burst::new();
        b.rx_burst(&mut rx);
        assert_eq!(cap.tx_burst(&mut tx), 1);
        assert_eq!(cap.frames(), 3, "a refused frame is recorded once");
        let mut back = Burst::new();
        let mut f = b.alloc().unwrap();
        f.append(30).unwrap().fill(9);
        back.push(f);
        b.tx_burst(&mut back);
        let mut got = Burst::new();
        assert_eq!(cap.rx_burst(&mut got), 1);
        let (_, n) = cap.finish().unwrap();
        assert_eq!(n, 4);
    }
}
