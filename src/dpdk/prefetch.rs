//! Prefetch hints: ask the CPU to bring memory into its caches ahead of
//! use, so that the misses of several items overlap instead of stalling
//! one after another (the transport's per-QP state, looked up for a
//! burst's frames before they are handled, and a few turns ahead on the
//! ready list). The lines go to the core's L2 (PREFETCHT1, what DPDK's
//! `rte_prefetch1` issues): a burst of QPs is about as large as the L1.
//! A hint changes no value and never faults; on targets without one it
//! does nothing. Needs no DPDK, and imports nothing of the crate.

use core::mem::size_of;

/// The cache line of the CPUs prefetched for.
const LINE: usize = 64;

/// Prefetches every cache line of `*r`.
#[inline]
pub fn prefetch<T>(r: &T) {
    let p: *const u8 = (r as *const T).cast();
    let mut off = 0;
    while off < size_of::<T>() {
        line(p.wrapping_add(off));
        off += LINE;
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn line(p: *const u8) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    // SAFETY: PREFETCHT1 is a hint: it reads nothing into the program,
    // writes nothing and never faults, whatever the address (SSE, which
    // every x86-64 CPU has).
    unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast()) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn line(_: *const u8) {}
