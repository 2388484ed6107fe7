//! An in-process pair of queues with heap buffers: what one end transmits,
//! the other receives, in order, with a bounded queue. It runs the engine
//! where DPDK is absent (`--no-default-features`) and in unit tests.

use super::{Backend, Burst, FrameBuf};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A heap frame buffer with a fixed capacity. Its bytes past the frame
/// stay initialised when it shrinks, so a buffer used again (the
/// simulator recycles them) grows back without zero-filling.
#[derive(Debug, Clone)]
pub struct VecBuf {
    /// Initialised storage: the frame is `bytes[..len]`.
    bytes: Vec<u8>,
    len: usize,
    cap: usize,
}

impl VecBuf {
    /// An empty buffer that can grow to `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        VecBuf {
            bytes: Vec::with_capacity(cap),
            len: 0,
            cap,
        }
    }

    /// The largest frame it holds.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Empties the buffer for another frame.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl FrameBuf for VecBuf {
    fn data(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
    /// The appended bytes are zero in a new buffer and whatever they held
    /// last in a reused one, as in a DPDK mbuf.
    fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let start = self.len;
        if start + len > self.cap {
            return None;
        }
        if self.bytes.len() < start + len {
            self.bytes.resize(start + len, 0);
        }
        self.len = start + len;
        Some(&mut self.bytes[start..self.len])
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

type Queue = Arc<Mutex<VecDeque<VecBuf>>>;

/// One end of a loopback link.
pub struct LoopbackPort {
    rx: Queue,
    tx: Queue,
    /// Freed buffers, shared by both ends (what one end receives and
    /// frees, the other may send in again), as a DPDK mempool: in steady
    /// state no frame allocates.
    pool: Arc<Mutex<Vec<VecBuf>>>,
    depth: usize,
    buf_cap: usize,
}

/// Two connected ends; each queue holds at most `depth` frames of at most
/// `buf_cap` bytes.
pub fn pair(depth: usize, buf_cap: usize) -> (LoopbackPort, LoopbackPort) {
    let ab: Queue = Arc::default();
    let ba: Queue = Arc::default();
    let pool: Arc<Mutex<Vec<VecBuf>>> = Arc::default();
    (
        LoopbackPort {
            rx: ba.clone(),
            tx: ab.clone(),
            pool: pool.clone(),
            depth,
            buf_cap,
        },
        LoopbackPort {
            rx: ab,
            tx: ba,
            pool,
            depth,
            buf_cap,
        },
    )
}

impl LoopbackPort {
    /// The most freed buffers the pool keeps: both queues full, twice over
    /// (what a pump may hold in its bursts as well).
    fn pool_cap(&self) -> usize {
        4 * self.depth
    }
}

impl Backend for LoopbackPort {
    type Buf = VecBuf;

    fn rx_burst(&mut self, out: &mut Burst<VecBuf>) -> usize {
        let mut q = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while !out.is_full() {
            match q.pop_front() {
                Some(f) => {
                    out.push(f);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn alloc(&mut self) -> Option<VecBuf> {
        let reused = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Some(reused.unwrap_or_else(|| VecBuf::with_capacity(self.buf_cap)))
    }

    fn tx_burst(&mut self, frames: &mut Burst<VecBuf>) -> usize {
        let mut q = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let room = self.depth.saturating_sub(q.len()).min(frames.len());
        q.extend(frames.drain(..room));
        room
    }

    /// Back to the pool (beyond its cap, dropped).
    fn free_burst(&mut self, frames: &mut Burst<VecBuf>) {
        let cap = self.pool_cap();
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.capacity() == 0 {
            pool.reserve_exact(cap);
        }
        for mut f in frames.drain(..) {
            if pool.len() < cap {
                f.clear();
                pool.push(f);
            }
        }
    }
}

/// A loopback end that loses the frames it sends for which `lose` holds:
/// a link that drops what a test picks (one CM message, every ACK).
pub struct Lossy<F> {
    port: LoopbackPort,
    lose: F,
}

impl<F: FnMut(&[u8]) -> bool> Lossy<F> {
    /// `port`, losing what it sends when `lose(frame)` holds.
    pub fn new(port: LoopbackPort, lose: F) -> Self {
        Lossy { port, lose }
    }
}

impl<F: FnMut(&[u8]) -> bool> Backend for Lossy<F> {
    type Buf = VecBuf;

    fn rx_burst(&mut self, out: &mut Burst<VecBuf>) -> usize {
        self.port.rx_burst(out)
    }

    fn alloc(&mut self) -> Option<VecBuf> {
        self.port.alloc()
    }

    /// The lost frames count as sent.
    fn tx_burst(&mut self, frames: &mut Burst<VecBuf>) -> usize {
        let before = frames.len();
        frames.retain(|f| !(self.lose)(f.data()));
        let lost = before - frames.len();
        self.port.tx_burst(frames) + lost
    }

    fn free_burst(&mut self, frames: &mut Burst<VecBuf>) {
        self.port.free_burst(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_in_order_and_a_full_queue_keeps_the_rest() {
        let (mut a, mut b) = pair(3, 64);
        let mut tx = Burst::new();
        for i in 0..5u8 {
            let mut f = a.alloc().unwrap();
            f.append(1).unwrap()[0] = i;
            tx.push(f);
        }
        assert_eq!(a.tx_burst(&mut tx), 3);
        assert_eq!(tx.len(), 2);
        assert_eq!(tx[0].data(), &[3]);
        let mut rx = Burst::new();
        assert_eq!(b.rx_burst(&mut rx), 3);
        let got: Vec<u8> = rx.iter().map(|f| f.data()[0]).collect();
        assert_eq!(got, vec![0, 1, 2]);
        assert!(a.alloc().unwrap().append(65).is_none());
    }
}
