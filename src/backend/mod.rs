//! How frames move: the [`Backend`] trait that the engine drives, the
//! [`FrameBuf`] a backend hands out, and the fixed-size [`Burst`] that carries
//! frames in and out without a heap allocation per burst.
//!
//! A backend is one (port, queue) pair: a DPDK port queue (`crate::dpdk`), an
//! in-process loopback ([`loopback`]), a host of the deterministic network
//! simulator ([`fabric`]), and a kernel UDP socket ([`udp`]). Frames are owned
//! buffers: a received frame is the caller's until it drops it (DPDK: back
//! to the mempool) or hands it back to `tx_burst` (zero-copy forwarding).

#![deny(unsafe_code)]

pub mod capture;
pub mod clock;
pub mod fabric;
pub mod loopback;
pub mod poll;
pub mod steer;
pub mod udp;

pub use clock::WallClock;

/// Frames per burst: DPDK's customary 32.
pub const BURST: usize = 32;

/// A burst of owned frames: a fixed array on the stack or inside a struct,
/// never a heap allocation per burst.
pub type Burst<T> = arrayvec::ArrayVec<T, BURST>;

/// An owned frame buffer with room to grow at the end.
pub trait FrameBuf {
    /// The frame's bytes (for a chained DPDK mbuf: its first segment).
    fn data(&self) -> &[u8];
    /// The frame's bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// The frame's length in bytes.
    fn len(&self) -> usize {
        self.data().len()
    }
    /// Whether the frame is zero bytes long.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Grows the frame by `len` bytes at its end and returns them, or `None`
    /// when the buffer has no room (nothing changes then).
    fn append(&mut self, len: usize) -> Option<&mut [u8]>;
    /// Shortens the frame to `len` bytes (no-op when already shorter).
    fn truncate(&mut self, len: usize);
    /// How the received frame lies in the buffer: in one piece (the
    /// default, [`FrameBuf::data`]), or in segments (a chained DPDK mbuf).
    fn layout(&self) -> Layout<'_> {
        Layout::One(self.data())
    }
    /// Copies the whole frame, every segment, into `out`; its length, or
    /// `None` when `out` is too short.
    fn read_into(&self, out: &mut [u8]) -> Option<usize> {
        let d = self.data();
        out.get_mut(..d.len())?.copy_from_slice(d);
        Some(d.len())
    }
}

/// How a frame lies in its buffer ([`FrameBuf::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout<'a> {
    /// In one piece.
    One(&'a [u8]),
    /// In three segments, as a zero-copy sender sends a frame: its
    /// headers, its payload, its pad and ICRC (not checked here: the
    /// receiver parses the parts and falls back to the whole frame,
    /// [`FrameBuf::read_into`], when they are cut elsewhere).
    Three([&'a [u8]; 3]),
    /// In some other number of segments: read it with
    /// [`FrameBuf::read_into`].
    Scattered,
}

/// One queue of a network port, as the engine's poll loop sees it.
pub trait Backend {
    /// The frame buffer this queue receives into and transmits from.
    type Buf: FrameBuf;

    /// Receives up to `out.remaining_capacity()` frames, appending them to
    /// `out`. Returns how many arrived.
    fn rx_burst(&mut self, out: &mut Burst<Self::Buf>) -> usize;

    /// An empty frame buffer to fill and transmit, or `None` when the pool is
    /// exhausted.
    fn alloc(&mut self) -> Option<Self::Buf>;

    /// Transmits frames from the front of `frames`. Sent frames are removed;
    /// those the queue had no room for stay in `frames`, in order. Returns how
    /// many were sent.
    fn tx_burst(&mut self, frames: &mut Burst<Self::Buf>) -> usize;

    /// About how many more frames `tx_burst` would take now (a hint, the
    /// default: no limit). A caller that builds frames on demand asks for
    /// no more than this, so that what waits for the wire waits in the
    /// transport, where its pacer still holds it, not in a burst built
    /// ahead.
    fn tx_room(&self) -> usize {
        usize::MAX
    }

    /// Releases every frame in `frames` (a backend may do it in bulk).
    fn free_burst(&mut self, frames: &mut Burst<Self::Buf>) {
        frames.clear();
    }

    /// Whether this queue can send a frame whose payload stays in
    /// registered memory ([`Backend::attach`]; default: no).
    fn can_lend(&self) -> bool {
        false
    }

    /// Zero-copy send: makes `frame`, which holds a frame's headers
    /// (`head` bytes) followed by the rest of it (its pad and ICRC),
    /// carry `len` bytes of the registered memory `mem` from byte
    /// `offset` on between the two, without copying them; `mem` keeps
    /// its bytes until the port has sent them. `false` (the default)
    /// when the queue cannot, for this memory or now: nothing changed,
    /// and the caller copies the payload in.
    fn attach(
        &mut self,
        frame: &mut Self::Buf,
        head: usize,
        mem: &dyn core::any::Any,
        offset: usize,
        len: usize,
    ) -> bool {
        let _ = (frame, head, mem, offset, len);
        false
    }
}
