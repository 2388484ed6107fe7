//! The owned packet buffer. An [`Mbuf`] frees itself on drop and is handed to
//! DPDK (TX) with [`Mbuf::into_raw`].
#![cfg(feature = "dpdk")]

use super::ffi;
use crate::backend::{FrameBuf, Layout};
use std::ptr::NonNull;

/// One DPDK packet buffer, owned: exactly one `Mbuf` refers to it.
#[repr(transparent)]
pub struct Mbuf(NonNull<ffi::rte_mbuf>);

// SAFETY: an Mbuf is exclusively owned; DPDK allows freeing it into its pool
// from any thread.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `p` must point to a valid mbuf that nothing else owns or frees.
    #[inline]
    pub unsafe fn from_raw(p: NonNull<ffi::rte_mbuf>) -> Mbuf {
        Mbuf(p)
    }

    /// Gives up ownership (e.g. to a TX burst); the caller must see it freed.
    #[inline]
    pub fn into_raw(self) -> NonNull<ffi::rte_mbuf> {
        let p = self.0;
        std::mem::forget(self);
        p
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut ffi::rte_mbuf {
        self.0.as_ptr()
    }

    /// Bytes in this (first) segment.
    #[inline]
    pub fn data_len(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        usize::from(unsafe { ffi::ferroce_pktmbuf_data_len(self.ptr()) })
    }

    /// Bytes in the whole packet (all segments).
    #[inline]
    pub fn pkt_len(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        unsafe { ffi::ferroce_pktmbuf_pkt_len(self.ptr()) as usize }
    }

    /// Number of chained segments (1 for a contiguous packet).
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        // SAFETY: self owns a valid mbuf.
        unsafe { ffi::ferroce_pktmbuf_nb_segs(self.ptr()) }
    }

    #[inline]
    /// Free bytes in front of the first segment's data.
    pub fn headroom(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        usize::from(unsafe { ffi::ferroce_pktmbuf_headroom(self.ptr()) })
    }

    #[inline]
    /// Free bytes after the first segment's data.
    pub fn tailroom(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        usize::from(unsafe { ffi::ferroce_pktmbuf_tailroom(self.ptr()) })
    }

    /// The first segment's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: mtod points at data_len initialised bytes of the mbuf we
        // own; the borrow of self keeps them alive and unaliased.
        unsafe {
            std::slice::from_raw_parts(
                ffi::ferroce_pktmbuf_mtod(self.ptr()) as *const u8,
                self.data_len(),
            )
        }
    }

    #[inline]
    /// The first segment's bytes, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.data_len();
        // SAFETY: as in data(); &mut self makes the access exclusive.
        unsafe {
            std::slice::from_raw_parts_mut(ffi::ferroce_pktmbuf_mtod(self.ptr()) as *mut u8, len)
        }
    }

    /// Each segment's bytes, in order.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut cur = self.ptr();
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            // SAFETY: cur is a segment of the chain we own (head or a next
            // pointer DPDK maintains); its data is valid for data_len bytes.
            unsafe {
                let s = std::slice::from_raw_parts(
                    ffi::ferroce_pktmbuf_mtod(cur) as *const u8,
                    usize::from(ffi::ferroce_pktmbuf_data_len(cur)),
                );
                cur = ffi::ferroce_pktmbuf_next(cur);
                Some(s)
            }
        })
    }

    /// Grows the last segment by `len` bytes and returns them (uninitialised
    /// contents from the pool: the caller writes them), or `None` without room.
    #[inline]
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let l = u16::try_from(len).ok()?;
        // SAFETY: append returns null or a pointer to l bytes inside the
        // mbuf's data room, which we own exclusively.
        unsafe {
            let p = ffi::ferroce_pktmbuf_append(self.ptr(), l);
            (!p.is_null()).then(|| std::slice::from_raw_parts_mut(p as *mut u8, len))
        }
    }

    /// Grows the frame by `len` bytes at its front (into the headroom).
    #[inline]
    pub fn prepend(&mut self, len: usize) -> Option<&mut [u8]> {
        let l = u16::try_from(len).ok()?;
        // SAFETY: as append, into the headroom.
        unsafe {
            let p = ffi::ferroce_pktmbuf_prepend(self.ptr(), l);
            (!p.is_null()).then(|| std::slice::from_raw_parts_mut(p as *mut u8, len))
        }
    }

    /// Removes `len` bytes from the front; false if the segment is shorter.
    #[inline]
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(l) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: self owns a valid mbuf; adj checks the length.
        !unsafe { ffi::ferroce_pktmbuf_adj(self.ptr(), l) }.is_null()
    }

    /// Removes `len` bytes from the end; false if the last segment is shorter.
    #[inline]
    pub fn trim(&mut self, len: usize) -> bool {
        let Ok(l) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: self owns a valid mbuf; trim checks the length.
        unsafe { ffi::ferroce_pktmbuf_trim(self.ptr(), l) == 0 }
    }

    /// Empties the mbuf (a single segment, default headroom).
    pub fn reset(&mut self) {
        // SAFETY: self owns a valid mbuf.
        unsafe { ffi::ferroce_pktmbuf_reset(self.ptr()) }
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (and its chain); it is freed exactly once.
        unsafe { ffi::ferroce_pktmbuf_free(self.ptr()) }
    }
}

impl FrameBuf for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self)
    }
    #[inline]
    fn len(&self) -> usize {
        self.data_len()
    }
    #[inline]
    fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        Mbuf::append(self, len)
    }
    fn truncate(&mut self, len: usize) {
        let cur = self.pkt_len();
        if len < cur {
            // Only the last segment can be trimmed; packets we build are single-segment.
            self.trim(cur - len);
        }
    }
    #[inline]
    fn layout(&self) -> Layout<'_> {
        let mut addr = [std::ptr::null::<libc::c_void>(); 3];
        let mut len = [0u16; 3];
        // SAFETY: self owns a valid chain; the shim writes at most 3
        // entries of each array.
        let n = unsafe {
            ffi::ferroce_pktmbuf_segs(self.ptr(), addr.as_mut_ptr(), len.as_mut_ptr(), 3)
        };
        // SAFETY: each address is a segment's data, valid for its length
        // while the chain (ours, borrowed with self) lives.
        let seg = |i: usize| unsafe {
            std::slice::from_raw_parts(addr[i] as *const u8, usize::from(len[i]))
        };
        match n {
            1 => Layout::One(seg(0)),
            3 => Layout::Three([seg(0), seg(1), seg(2)]),
            _ => Layout::Scattered,
        }
    }
    fn read_into(&self, out: &mut [u8]) -> Option<usize> {
        let mut n = 0;
        for seg in self.segments() {
            out.get_mut(n..n + seg.len())?.copy_from_slice(seg);
            n += seg.len();
        }
        Some(n)
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("pkt_len", &self.pkt_len())
            .field("nb_segs", &self.nb_segs())
            .finish()
    }
}

/// Frees every mbuf of `burst` with one call (cheaper than one drop each).
#[inline]
pub fn free_burst(burst: &mut crate::backend::Burst<Mbuf>) {
    let n = burst.len();
    if n == 0 {
        return;
    }
    // SAFETY: Mbuf is repr(transparent) over a non-null mbuf pointer, so the
    // burst is an array of n owned mbufs; set_len(0) gives up ownership
    // before free_bulk releases them, so none is freed twice.
    unsafe {
        burst.set_len(0);
        ffi::rte_pktmbuf_free_bulk(burst.as_mut_ptr() as *mut *mut ffi::rte_mbuf, n as u32);
    }
}
