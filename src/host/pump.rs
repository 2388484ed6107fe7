//! Glue between an endpoint and any backend: [`pump`] moves one round of
//! frames between an [`Endpoint`] (a transport [`Device`], or a
//! [`Host`](super::Host) with its neighbour table) and a [`Backend`] queue;
//! the same function drives a DPDK port and a simulated host.

use crate::backend::{Backend, Burst, FrameBuf};
use crate::time::Instant;
use crate::transport::Device;

pub use crate::transport::MAX_FRAME;

/// What [`pump`] drives: anything that takes received frames and writes
/// frames to send, in time: a transport [`Device`], or a
/// [`super::Host`] (a device and its neighbour table).
pub trait Endpoint {
    /// Takes a received frame.
    fn handle(&mut self, now: Instant, frame: &[u8]);
    /// Writes the next frame to send into `buf` and returns its length, or `None` when there is none now.
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    /// When the endpoint next needs [`Endpoint::handle_timeout`]; `None`: no timer runs.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Runs the timers due at `now`.
    fn handle_timeout(&mut self, now: Instant);
}

impl Endpoint for Device {
    fn handle(&mut self, now: Instant, frame: &[u8]) {
        Device::handle(self, now, frame)
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        Device::poll_transmit(self, now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Device::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Device::handle_timeout(self, now)
    }
}

/// What one [`pump`] moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpStats {
    /// Frames received and handed to the endpoint.
    pub rx: usize,
    /// Frames the backend accepted for transmission.
    pub tx: usize,
}

/// One round: every frame the queue has goes to the device, the timers due
/// at `now` run, then every frame the device has ready is written and sent
/// (a burst at a time, at most [`Backend::tx_room`] frames built ahead).
/// Frames the queue could not take stay in `pending` for the next round,
/// in order, and go first; the device is asked for no more while they
/// wait.
pub fn pump<E: Endpoint, B: Backend>(
    dev: &mut E,
    port: &mut B,
    now: Instant,
    pending: &mut Burst<B::Buf>,
) -> PumpStats {
    pump_with(dev, port, now, pending, &mut None)
}

/// [`pump`], keeping the buffer the device had nothing to write into in
/// `spare` for the next round instead of dropping it. Most rounds end with
/// such a buffer; where allocating one costs (the simulator's heap buffers
/// are allocated and zeroed to [`MAX_FRAME`] each time) this saves it.
pub fn pump_with<E: Endpoint, B: Backend>(
    dev: &mut E,
    port: &mut B,
    now: Instant,
    pending: &mut Burst<B::Buf>,
    spare: &mut Option<B::Buf>,
) -> PumpStats {
    let mut st = PumpStats::default();
    let mut rx = Burst::new();
    loop {
        let n = port.rx_burst(&mut rx);
        for f in rx.iter() {
            dev.handle(now, f.data());
        }
        port.free_burst(&mut rx);
        st.rx += n;
        if n == 0 {
            break;
        }
    }
    if dev.poll_timeout().is_some_and(|t| t <= now) {
        dev.handle_timeout(now);
    }
    loop {
        // What waits goes first; while the port has no room for it, the
        // device is asked for nothing more.
        if !pending.is_empty() {
            st.tx += port.tx_burst(pending);
            if !pending.is_empty() {
                break;
            }
        }
        let room = port.tx_room().min(pending.capacity());
        if room == 0 {
            break;
        }
        let mut pulled = 0;
        while pulled < room {
            let mut b = match spare.take() {
                Some(b) => b,
                None => {
                    let Some(mut b) = port.alloc() else { break };
                    if b.append(MAX_FRAME).is_none() {
                        break;
                    }
                    b
                }
            };
            match dev.poll_transmit(now, b.data_mut()) {
                Some(len) => {
                    b.truncate(len);
                    pending.push(b);
                    pulled += 1;
                }
                None => {
                    *spare = Some(b);
                    break;
                }
            }
        }
        if pulled < room {
            // The device has nothing more now: send what it gave.
            if !pending.is_empty() {
                st.tx += port.tx_burst(pending);
            }
            break;
        }
    }
    st
}
