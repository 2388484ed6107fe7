//! A host of the [`Fabric`] as a [`Backend`]: [`SimPort`].

use super::{Fabric, HostId, FRAME_CAPACITY};
use crate::backend::loopback::VecBuf;
use crate::backend::{Backend, Burst, FrameBuf};
use crate::time::{Clock, Instant};

impl Fabric {
    /// The host as a [`Backend`]; it sends at [`Fabric::now`].
    ///
    /// # Panics
    ///
    /// If `host` is not in this fabric.
    pub fn port(&mut self, host: HostId) -> SimPort<'_> {
        assert!(host.0 < self.hosts.len(), "{host} is not in this fabric");
        SimPort { fabric: self, host }
    }
}

/// One host of a [`Fabric`] as a [`Backend`]: it sends at the fabric's
/// `now` and receives what has arrived by then.
#[derive(Debug)]
pub struct SimPort<'a> {
    fabric: &'a mut Fabric,
    host: HostId,
}

impl SimPort<'_> {
    /// The host this port belongs to.
    pub fn host(&self) -> HostId {
        self.host
    }

    /// The fabric's virtual time, at which this port sends.
    pub fn now(&self) -> Instant {
        self.fabric.now
    }
}

impl Clock for SimPort<'_> {
    fn now(&self) -> Instant {
        self.fabric.now
    }
}

impl Backend for SimPort<'_> {
    type Buf = VecBuf;

    /// Pops frames that have arrived at the host, oldest first.
    fn rx_burst(&mut self, out: &mut Burst<VecBuf>) -> usize {
        let inbox = &mut self.fabric.hosts[self.host.0].inbox;
        let mut n = 0;
        while !out.is_full() {
            let Some(f) = inbox.pop_front() else {
                break;
            };
            out.push(f);
            n += 1;
        }
        n
    }

    /// A buffer of [`FRAME_CAPACITY`] bytes, one the hosts freed if there
    /// is one; never `None`.
    fn alloc(&mut self) -> Option<VecBuf> {
        Some(match self.fabric.spare.pop() {
            Some(mut b) => {
                b.clear();
                b
            }
            None => VecBuf::with_capacity(FRAME_CAPACITY),
        })
    }

    /// Keeps the buffers for [`SimPort::alloc`] (up to a bound).
    fn free_burst(&mut self, frames: &mut Burst<VecBuf>) {
        for b in frames.drain(..) {
            self.fabric.recycle(b);
        }
    }

    /// One frame while the host's link holds less than its transmit ring
    /// ([`Fabric::set_tx_ring`]), none when it holds more; no limit
    /// without a ring.
    fn tx_room(&self) -> usize {
        let h = &self.fabric.hosts[self.host.0];
        match (h.tx_ring_bytes, h.egress) {
            (Some(ring), Some(ch)) => usize::from(self.fabric.channels[ch.0].queue.bytes() < ring),
            _ => usize::MAX,
        }
    }

    /// Takes frames from the front (all of them, or while the host's link
    /// holds less than its transmit ring, [`Fabric::set_tx_ring`]) and
    /// returns how many: the network may still drop them (tail-dropped at
    /// the host's own link, lost, no link); the counters say which.
    fn tx_burst(&mut self, frames: &mut Burst<VecBuf>) -> usize {
        let h = &self.fabric.hosts[self.host.0];
        let n = match (h.tx_ring_bytes, h.egress) {
            (Some(ring), Some(ch)) => {
                let mut waiting = self.fabric.channels[ch.0].queue.bytes();
                frames
                    .iter()
                    .take_while(|f| {
                        let room = waiting < ring;
                        waiting += f.len();
                        room
                    })
                    .count()
            }
            _ => frames.len(),
        };
        for frame in frames.drain(..n) {
            self.fabric.send(self.host, frame);
        }
        n
    }
}
