//! Packet-buffer pools. A [`Mempool`] is passed explicitly to whatever
//! allocates (no thread-locals); clones share one pool, freed with the last.
#![cfg(feature = "dpdk")]

use super::eal::{Eal, LEAKED_POOLS};
use super::error::{from_errno, Error, Result};
use super::ffi;
use super::mbuf::Mbuf;
use super::options::MempoolOptions;
use crate::backend::Burst;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The headroom DPDK reserves in front of each mbuf's data.
pub const HEADROOM: u16 = ffi::RTE_PKTMBUF_HEADROOM as u16;

/// A pool of packet mbufs (`rte_pktmbuf_pool_create`), shared by its
/// handles; freed after the last one drops unless mbufs are still out.
#[derive(Clone)]
pub struct Mempool(Arc<PoolInner>);

struct PoolInner {
    ptr: NonNull<ffi::rte_mempool>,
    name: String,
    size: u32,
    data_room: u16,
    _eal: Eal,
}

// SAFETY: DPDK mempools are multi-producer / multi-consumer safe; the pointer
// is only dereferenced by DPDK.
unsafe impl Send for PoolInner {}
// SAFETY: as above: every operation on the pool is thread-safe in DPDK.
unsafe impl Sync for PoolInner {}

impl Mempool {
    /// Creates pool `name` of `opts.mbufs` mbufs on the EAL's socket.
    pub fn new(eal: &Eal, name: &str, opts: &MempoolOptions) -> Result<Mempool> {
        let cname =
            CString::new(name).map_err(|_| Error::Invalid(format!("mempool name {name:?}")))?;
        let room = u32::from(opts.data_room) + u32::from(HEADROOM);
        let room = u16::try_from(room)
            .map_err(|_| Error::Invalid(format!("data_room {} too large", opts.data_room)))?;
        let cache = opts.cache.min(512).min(opts.mbufs / 2);
        // SAFETY: the EAL is up (we hold a handle); the name is a valid C string.
        let ptr = unsafe {
            ffi::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                opts.mbufs,
                cache,
                0,
                room,
                eal.socket_id(),
            )
        };
        let ptr = NonNull::new(ptr).ok_or_else(|| from_errno("rte_pktmbuf_pool_create"))?;
        Ok(Mempool(Arc::new(PoolInner {
            ptr,
            name: name.to_string(),
            size: opts.mbufs,
            data_room: opts.data_room,
            _eal: eal.clone(),
        })))
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Total mbufs in the pool.
    pub fn size(&self) -> u32 {
        self.0.size
    }

    /// Bytes of frame an mbuf holds (after its headroom).
    pub fn data_room(&self) -> u16 {
        self.0.data_room
    }

    /// Mbufs free right now (including those in per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is alive while we hold it.
        unsafe { ffi::rte_mempool_avail_count(self.0.ptr.as_ptr()) }
    }

    /// Mbufs handed out right now.
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool is alive while we hold it.
        unsafe { ffi::rte_mempool_in_use_count(self.0.ptr.as_ptr()) }
    }

    /// One empty mbuf, or `None` when the pool is exhausted.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is alive; a non-null result is a fresh mbuf we own.
        let m = unsafe { ffi::ferroce_pktmbuf_alloc(self.0.ptr.as_ptr()) };
        // SAFETY: m is null or an mbuf we now own exclusively.
        NonNull::new(m).map(|p| unsafe { Mbuf::from_raw(p) })
    }

    /// Fills `out` up to `n` more mbufs (at most its free capacity), all or
    /// nothing. Returns how many were added (0 when the pool is short).
    #[inline]
    pub fn alloc_bulk(&self, out: &mut Burst<Mbuf>, n: usize) -> usize {
        let n = n.min(out.remaining_capacity());
        let len = out.len();
        // SAFETY: Mbuf is repr(transparent) over a non-null mbuf pointer, so
        // the burst's spare capacity holds n pointer slots; alloc_bulk fills
        // all n or none (ret != 0), and only then do they become owned Mbufs.
        unsafe {
            let slots = out.as_mut_ptr().add(len) as *mut *mut ffi::rte_mbuf;
            if ffi::ferroce_pktmbuf_alloc_bulk(self.0.ptr.as_ptr(), slots, n as u32) != 0 {
                return 0;
            }
            out.set_len(len + n);
        }
        n
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.0.ptr.as_ptr()
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the pool is still alive here.
        let in_use = unsafe { ffi::rte_mempool_in_use_count(self.ptr.as_ptr()) };
        if in_use != 0 {
            // An mbuf that outlives its pool would free into freed memory:
            // keep the pool (and the EAL's memory) instead.
            LEAKED_POOLS.fetch_add(1, Ordering::SeqCst);
            log::warn!(
                "mempool {} dropped with {in_use} mbufs still in use: not freed",
                self.name
            );
            return;
        }
        // SAFETY: no mbuf of this pool is outstanding and no port uses it
        // (ports hold a handle), so nothing references it any more.
        unsafe { ffi::rte_mempool_free(self.ptr.as_ptr()) }
    }
}
