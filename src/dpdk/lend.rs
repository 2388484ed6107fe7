//! Registered memory a port sends from in place (zero-copy send): a
//! [`DmaRegion`] is a hugepage block ([`HugeMem`]) that an mbuf can point
//! into (`rte_pktmbuf_attach_extbuf`) instead of holding a copy of the
//! payload.
//!
//! Each such mbuf carries its own external-buffer shared info, written in
//! its own data room (unused once it points elsewhere) with a reference
//! count of 1, so that freeing it takes no atomic operation on a line the
//! sending core also writes. Its free callback counts the frame done on
//! the region (`freed`); the sender counts the frames it lends (`lent`).
//! A region deregistered when the two agree unmaps its block at once;
//! one deregistered with frames still queued (which a NIC's memory
//! registration would refuse) keeps its block mapped for the rest of the
//! process, said in a log line, so that no frame ever reads unmapped
//! memory.
#![cfg(feature = "dpdk")]

use super::error::Result;
use super::ffi;
use super::hugemem::HugeMem;
use super::mbuf::Mbuf;
use super::mempool::Mempool;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The block and its counts, on the heap at a fixed address (the free
/// callbacks' opaque pointer).
struct Shared {
    mem: HugeMem,
    /// Frames lent: written by the sending thread alone.
    lent: AtomicU64,
    /// Frames done, counted by the free callbacks (on the receiving or
    /// sending thread): on a cache line of their own.
    freed: Padded,
}

#[repr(align(128))]
struct Padded(AtomicU64);

/// Hugepage memory for a memory region that a port can send from in place.
pub struct DmaRegion {
    shared: NonNull<Shared>,
}

// SAFETY: the region's block is owned like a Box<[u8]> (HugeMem is Send);
// the counts are atomics.
unsafe impl Send for DmaRegion {}
// SAFETY: shared references only read the block; writing needs &mut.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Maps `len` zeroed bytes (hugepages when there are free ones, as
    /// [`HugeMem::new`]).
    pub fn new(len: usize) -> Result<DmaRegion> {
        let mem = HugeMem::new(len)?;
        let shared = Box::new(Shared {
            mem,
            lent: AtomicU64::new(0),
            freed: Padded(AtomicU64::new(0)),
        });
        Ok(DmaRegion {
            shared: NonNull::from(Box::leak(shared)),
        })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: `shared` is freed only by Drop, after the last use of
        // `self`.
        unsafe { self.shared.as_ref() }
    }

    /// The block's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.shared().mem.as_slice()
    }

    /// The block's bytes, writable. Frames in flight may point into them:
    /// as with a NIC's DMA, bytes a posted send covers must stay unchanged
    /// until its completion (the verbs' rule for every send buffer).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the block is alive; &mut self excludes every other
        // reference made through this region. Mbufs attached to it are
        // read by the PMD, as a NIC reads memory by DMA.
        unsafe { (*self.shared.as_ptr()).mem.as_mut_slice() }
    }

    /// Whether the block sits on hugepages.
    pub fn is_huge(&self) -> bool {
        self.shared().mem.is_huge()
    }

    /// Frames lent and not yet freed by the port.
    pub fn in_flight(&self) -> u64 {
        let s = self.shared();
        s.lent.load(Ordering::Relaxed) - s.freed.0.load(Ordering::Acquire)
    }

    /// Makes `frame` (a frame's headers, `head` bytes, then its pad and
    /// ICRC) carry `len` bytes of this region from `offset` on between the
    /// two: an mbuf of `segs` attached to those bytes, then another of
    /// `segs` holding the pad and ICRC, chained behind the headers (one
    /// call into the shim). `false` (the frame unchanged, nothing lent)
    /// when the range is out of the block or longer than an mbuf can point
    /// at, or `segs` is empty.
    pub(crate) fn lend(
        &self,
        segs: &Mempool,
        frame: &mut Mbuf,
        head: usize,
        offset: usize,
        len: usize,
    ) -> bool {
        let s = self.shared();
        let (Some(end), Ok(len16), Ok(head16)) = (
            offset.checked_add(len),
            u16::try_from(len),
            u16::try_from(head),
        ) else {
            return false;
        };
        if end > s.mem.len() {
            return false;
        }
        let at = s.mem.as_slice()[offset..end].as_ptr() as *mut libc::c_void;
        // The shim checks the frame's shape and every room before it
        // attaches anything, and leaves the frame unchanged when it fails.
        // The IOVA is the address: ports that lend are software ones that
        // read an mbuf by its address.
        // SAFETY: `frame` is an mbuf we own, `segs` a live pool; `at` is
        // `len` bytes inside the block, which stays mapped while the count
        // says a frame is in flight (Drop); `shared` outlives every
        // callback for the same reason.
        let lent = unsafe {
            ffi::ferroce_lend(
                segs.as_ptr(),
                frame.ptr(),
                head16,
                at,
                len16,
                Some(frame_done),
                self.shared.as_ptr() as *mut libc::c_void,
            )
        } == 0;
        if lent {
            // The frame is still ours (not sent, so not freed): counted
            // before its callback can run, `freed` never passes `lent`.
            s.lent
                .store(s.lent.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        lent
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        let n = self.in_flight();
        if n == 0 {
            // SAFETY: every lent frame was freed, so no mbuf points into
            // the block and no callback will read `shared`; it came from
            // Box::leak in new().
            drop(unsafe { Box::from_raw(self.shared.as_ptr()) });
        } else {
            log::warn!(
                "a zero-copy region was deregistered with {n} frames still queued: its {} bytes stay mapped",
                self.shared().mem.len()
            );
        }
    }
}

/// An mbuf that pointed into a region was freed: one frame fewer in
/// flight.
///
/// # Safety
/// `opaque` is the `Shared` of the region the mbuf pointed into, alive
/// while frames are in flight.
unsafe extern "C" fn frame_done(_addr: *mut libc::c_void, opaque: *mut libc::c_void) {
    // SAFETY: as the function's contract says.
    let s = unsafe { &*(opaque as *const Shared) };
    s.freed.0.fetch_add(1, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_zeroed_writable_and_freed_when_dropped() {
        let mut r = DmaRegion::new(10_000).unwrap();
        assert!(r.as_slice().iter().all(|&b| b == 0));
        r.as_mut_slice()[9_999] = 7;
        assert_eq!(r.as_slice()[9_999], 7);
        assert_eq!(r.in_flight(), 0);
        drop(r);
        assert!(DmaRegion::new(0).is_err());
    }
}
