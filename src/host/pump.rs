//! Glue between an endpoint and any backend: [`pump`] moves one round of
//! frames between an [`Endpoint`] (a transport [`Device`], or a
//! [`Host`](super::Host) with its neighbour table) and a [`Backend`] queue;
//! the same function drives a DPDK port and a simulated host.

use crate::backend::{Backend, Burst, FrameBuf, Layout};
use crate::time::Instant;
use crate::transport::{Device, Lent, TxFrame};

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
    /// Takes a frame received in three parts (headers, payload, pad and
    /// ICRC); `false` when it cannot take it so (the default): the caller
    /// hands it whole to [`Endpoint::handle`].
    fn handle_parts(&mut self, now: Instant, head: &[u8], payload: &[u8], tail: &[u8]) -> bool {
        let _ = (now, head, payload, tail);
        false
    }
    /// [`Endpoint::poll_transmit`], for a port that can send a payload
    /// from registered memory in place (zero-copy send); the default
    /// writes whole frames.
    fn poll_transmit_parts(&mut self, now: Instant, buf: &mut [u8]) -> Option<TxFrame> {
        self.poll_transmit(now, buf)
            .map(|len| TxFrame { len, lent: None })
    }
    /// The registered memory a [`Lent`] payload lies in, as the port
    /// recognises it, and its bytes there.
    fn lent(&self, l: &Lent) -> Option<(&dyn core::any::Any, &[u8])> {
        let _ = l;
        None
    }
    /// Whether [`Endpoint::prefetch`] does anything now (asked once per
    /// received burst; the default: no).
    fn prefetches(&self) -> bool {
        false
    }
    /// A hint for each frame of a received burst (its first segment),
    /// before any is handled: what the frame will touch may be loaded into
    /// the caches ahead (the default does nothing).
    fn prefetch(&self, frame_head: &[u8]) {
        let _ = frame_head;
    }
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
    fn handle_parts(&mut self, now: Instant, head: &[u8], payload: &[u8], tail: &[u8]) -> bool {
        Device::handle_parts(self, now, head, payload, tail)
    }
    fn poll_transmit_parts(&mut self, now: Instant, buf: &mut [u8]) -> Option<TxFrame> {
        Device::poll_transmit_parts(self, now, buf)
    }
    fn lent(&self, l: &Lent) -> Option<(&dyn core::any::Any, &[u8])> {
        Device::lent(self, l)
    }
    fn prefetches(&self) -> bool {
        Device::prefetches(self)
    }
    fn prefetch(&self, frame_head: &[u8]) {
        Device::prefetch(self, frame_head)
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
        if n > 1 && dev.prefetches() {
            // The burst's QPs start loading before its first frame is
            // handled.
            for f in rx.iter() {
                if let Layout::One(head) | Layout::Three([head, _, _]) = f.layout() {
                    dev.prefetch(head);
                }
            }
        }
        for f in rx.iter() {
            match f.layout() {
                Layout::One(b) => dev.handle(now, b),
                Layout::Three([h, p, t]) if dev.handle_parts(now, h, p, t) => {}
                _ => handle_whole(dev, now, f),
            }
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
            let frame = if port.can_lend() {
                dev.poll_transmit_parts(now, b.data_mut())
            } else {
                dev.poll_transmit(now, b.data_mut())
                    .map(|len| TxFrame { len, lent: None })
            };
            match frame {
                Some(t) => {
                    b.truncate(t.len);
                    let whole = match t.lent {
                        Some(l) => lend_or_copy(dev, port, &mut b, &l, t.len),
                        None => true,
                    };
                    if whole {
                        pending.push(b);
                    }
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

/// A received frame in segments, read whole into a buffer on the stack.
/// One longer than [`MAX_FRAME`] is no frame a port takes: its first
/// segment alone goes in, which the endpoint counts as malformed.
#[cold]
fn handle_whole<E: Endpoint, F: FrameBuf>(dev: &mut E, now: Instant, f: &F) {
    let mut whole = [0u8; MAX_FRAME];
    match f.read_into(&mut whole) {
        Some(n) => dev.handle(now, &whole[..n]),
        None => dev.handle(now, f.data()),
    }
}

/// A frame whose payload the device left in its region: the port carries
/// it from there, or (no room for the segment now, or memory it does not
/// recognise) the payload is copied in between the headers and the tail,
/// as a frame of a port that cannot lend. `false`: the frame could be
/// made neither way and is not sent (the transport's recovery sends it
/// again, as after a loss).
fn lend_or_copy<E: Endpoint, B: Backend>(
    dev: &E,
    port: &mut B,
    b: &mut B::Buf,
    l: &Lent,
    written: usize,
) -> bool {
    let Some((mem, bytes)) = dev.lent(l) else {
        return false;
    };
    if port.attach(b, l.head, mem, l.offset, l.len) {
        return true;
    }
    let mut tail = [0u8; 8];
    let Some(t) = written.checked_sub(l.head).filter(|&t| t <= tail.len()) else {
        return false;
    };
    tail[..t].copy_from_slice(&b.data()[l.head..written]);
    b.truncate(l.head);
    match b.append(l.len + t) {
        Some(rest) => {
            rest[..l.len].copy_from_slice(bytes);
            rest[l.len..].copy_from_slice(&tail[..t]);
            true
        }
        None => false,
    }
}
