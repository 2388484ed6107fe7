//! The baseline for `ferroce bench io`: the same rx+tx loop as
//! [`crate::backend::poll::io_loop`], written straight against the C shim with raw
//! pointers, so the cost of the safe layer can be measured in the same run.
#![cfg(feature = "dpdk")]

use super::ffi;
use super::port::Port;
use crate::backend::BURST;

/// Sends `packets` frames of `frame_len` bytes from queue 0 of `tx` and
/// receives them on queue 0 of `rx`, freeing them. Each frame gets an 8-byte
/// sequence number. Returns the frames received.
pub fn io_loop(tx: &Port, rx: &Port, frame_len: u16, packets: u64) -> u64 {
    let pool = tx.mempool().as_ptr();
    let (txp, rxp) = (tx.id().0, rx.id().0);
    let mut out = [std::ptr::null_mut::<ffi::rte_mbuf>(); BURST];
    let mut inp = [std::ptr::null_mut::<ffi::rte_mbuf>(); BURST];
    let (mut sent, mut received, mut seq) = (0u64, 0u64, 0u64);
    let mut idle = 0u32;
    while received < packets && idle < 1_000_000 {
        let n = (packets - sent).min(BURST as u64) as u32;
        // SAFETY: pool is alive (tx holds it); `out` has room for n <= BURST
        // mbufs; append returns room inside each fresh mbuf of >= frame_len
        // bytes (the pool's data room is larger), checked for null.
        if n > 0 && unsafe { ffi::ferroce_pktmbuf_alloc_bulk(pool, out.as_mut_ptr(), n) } == 0 {
            for m in &out[..n as usize] {
                // SAFETY: see above.
                unsafe {
                    let d = ffi::ferroce_pktmbuf_append(*m, frame_len) as *mut u8;
                    if !d.is_null() {
                        std::ptr::copy_nonoverlapping(seq.to_be_bytes().as_ptr(), d, 8);
                    }
                }
                seq += 1;
            }
            // SAFETY: out holds n mbufs we own; the PMD takes the first `s`.
            let s = unsafe { ffi::ferroce_tx_burst(txp, 0, out.as_mut_ptr(), n as u16) };
            if u32::from(s) < n {
                // SAFETY: the unsent mbufs are still ours.
                unsafe {
                    ffi::rte_pktmbuf_free_bulk(
                        out.as_mut_ptr().add(usize::from(s)),
                        n - u32::from(s),
                    )
                };
            }
            sent += u64::from(s);
        }
        // SAFETY: inp has room for BURST pointers; we own what arrives.
        let r = unsafe { ffi::ferroce_rx_burst(rxp, 0, inp.as_mut_ptr(), BURST as u16) };
        if r > 0 {
            // SAFETY: the r received mbufs are ours to free.
            unsafe { ffi::rte_pktmbuf_free_bulk(inp.as_mut_ptr(), u32::from(r)) };
            received += u64::from(r);
            idle = 0;
        } else {
            idle += 1;
        }
    }
    received
}
