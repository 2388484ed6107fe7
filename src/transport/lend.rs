//! Zero-copy send, the transport's side: a request packet's payload may
//! leave from its memory region in place rather than be copied into the
//! frame ([`Device::set_zero_copy`], [`Device::poll_transmit_parts`]), and
//! a frame may arrive in the three parts such a sender sends
//! ([`Device::handle_parts`]). Which packets lend is decided where they
//! are written (`requester.rs`, [`super::path::Path::emit_parts`]); the
//! port that carries the payload from the region is the backend's
//! business (`crate::backend::Backend::attach`).

use super::mr::Lkey;
use super::path::{Packet, Path};
use super::{Device, NpConfig, QpCounters};
use crate::time::Instant;
use crate::wire::Frame;

/// The payload size from which a port that can lend is best given the
/// payload in place: below it, copying into the frame costs less than the
/// two extra mbufs of a chained frame (`ferroce bench e2e`'s b,z run).
pub const ZERO_COPY_MIN: usize = 512;

/// A frame written with its payload left in its memory region (zero-copy
/// send): the buffer holds the frame's headers (`head` bytes) and, right
/// after them, its pad and ICRC; the payload is `len` bytes of region
/// `lkey` from byte `offset` on, which the port sends between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lent {
    /// The region's local key.
    pub lkey: Lkey,
    /// Where the payload starts in the region's bytes.
    pub offset: usize,
    /// The payload's length.
    pub len: usize,
    /// The headers' length: where the pad and ICRC start in the buffer.
    pub head: usize,
}

/// A frame [`Device::poll_transmit_parts`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxFrame {
    /// Bytes written into the buffer: the whole frame, or, when its
    /// payload is `lent`, its headers then its pad and ICRC.
    pub len: usize,
    /// Where the payload is when it was left in its region.
    pub lent: Option<Lent>,
}

/// What a QP's transmit reads beyond the QP: the notification point's
/// settings, what it may lend; and what it lent.
pub(crate) struct Lending {
    pub np: NpConfig,
    pub min: Option<usize>,
    pub lent: Option<Lent>,
}

impl Lending {
    /// Whether a payload of `len` bytes on `path` may leave in place.
    pub fn wants(&self, len: usize, path: &Path) -> bool {
        self.min.is_some_and(|min| len >= min.max(1)) && path.lends()
    }

    /// Writes packet `p` with its payload left in its region (`bytes`,
    /// from `offset` of region `lkey`, as `MrTable::lendable` found it),
    /// notes it lent and counts it; the frame's length.
    pub fn emit(
        &mut self,
        path: &Path,
        p: &Packet,
        (lkey, offset, bytes): (Lkey, usize, &[u8]),
        buf: &mut [u8],
        counters: &mut QpCounters,
    ) -> Option<usize> {
        let (head, n) = path.emit_parts(p, bytes, buf)?;
        self.lent = Some(Lent {
            lkey,
            offset,
            len: bytes.len(),
            head,
        });
        counters.lent_pkts += 1;
        Some(n)
    }
}

impl Device {
    /// As [`Device::poll_transmit`], for a port that can send a payload
    /// from its region in place (zero-copy send, [`Device::set_zero_copy`]):
    /// a frame may come back with its payload [`Lent`] rather than in
    /// `buf`, which then holds its headers, pad and ICRC.
    pub fn poll_transmit_parts(&mut self, now: Instant, buf: &mut [u8]) -> Option<TxFrame> {
        self.poll_frame(now, buf, self.lend_min)
    }

    /// Lets SEND, WRITE and READ response payloads of at least `min` bytes
    /// (`None`: none, the default) leave from their memory region in
    /// place, with no copy,
    /// when the region's memory is one the port can send from
    /// ([`super::mr::RegionMemory::lender`]), the payload lies in one SGE and the QP's
    /// frames carry no trailer. Only [`Device::poll_transmit_parts`] does.
    /// As on a NIC, the application must leave a send's bytes unchanged
    /// until its completion (its buffers are the channel adapter's until then).
    pub fn set_zero_copy(&mut self, min: Option<usize>) {
        self.lend_min = min;
    }

    /// Where a [`Lent`] payload lies: its region's memory as the port
    /// recognises it ([`super::mr::RegionMemory::lender`]) and the bytes.
    pub fn lent(&self, l: &Lent) -> Option<(&dyn core::any::Any, &[u8])> {
        self.mrs.lent(l.lkey, l.offset, l.len)
    }

    /// [`Device::handle`] for a frame received in three parts, as a
    /// zero-copy sender sends it ([`Frame::parse_parts`]): its headers,
    /// its payload, its pad and ICRC. The payload is read where it is.
    /// `false` when the parts are not cut that way: nothing was done or
    /// counted, and the caller hands the frame whole to
    /// [`Device::handle`], which judges it.
    pub fn handle_parts(&mut self, now: Instant, head: &[u8], payload: &[u8], tail: &[u8]) -> bool {
        let Ok(f) = Frame::parse_parts(head, payload, tail) else {
            return false;
        };
        self.rx.frames += 1;
        self.accept(now, &f, &[]);
        true
    }
}
