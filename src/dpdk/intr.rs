//! Parking the EAL's interrupt thread before clean-up.
//!
//! DPDK runs device interrupt callbacks (net_memif's control channels and
//! listener socket, link-state changes) on a thread of its own, which
//! `rte_eal_cleanup` does not stop: each time that thread is woken it walks
//! every registered interrupt source, reading each source's handle. net_memif
//! (22.11) never unregisters its listener socket's callback when the port
//! closes, and that source's handle lives in DPDK's heap; when the thread
//! walks the list after the clean-up has unmapped the heap (a wake-up from the
//! port's close that it served late, say on a busy machine), it reads
//! unmapped memory and the process dies of SIGSEGV on its way out.
//!
//! [`park`] has the interrupt thread run a callback of ours that never
//! returns: once it is in there, it has served every earlier wake-up and
//! touches no interrupt source again.
#![cfg(feature = "dpdk")]

use super::ffi;
use std::os::raw::c_void;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// `RTE_INTR_INSTANCE_F_PRIVATE` (a `UINT32_C(0)` bindgen cannot read): an
/// interrupt instance in process memory, not in DPDK's heap.
const INSTANCE_F_PRIVATE: u32 = 0;

/// Whether the interrupt thread is in [`park_here`].
static PARKED: Mutex<bool> = Mutex::new(false);
static PARKED_CV: Condvar = Condvar::new();

/// Parks the EAL's interrupt thread for good; true once it is parked,
/// false if it did not get there within `timeout` (or the callback could
/// not be registered). Call only as the EAL is about to be cleaned up: no
/// interrupt callback runs after this.
pub(crate) fn park(timeout: Duration) -> bool {
    // SAFETY: plain syscall; the flags are valid for eventfd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return false;
    }
    // SAFETY: the EAL is initialised (the caller holds it); a private
    // instance lives in process memory, as does the copy the EAL registers.
    let handle = unsafe { ffi::rte_intr_instance_alloc(INSTANCE_F_PRIVATE) };
    if handle.is_null() {
        // SAFETY: fd is our open eventfd.
        unsafe { libc::close(fd) };
        return false;
    }
    // SAFETY: handle is a live instance; the EAL copies it on registration,
    // so it can be freed right after. park_here takes no argument and never
    // returns, and the eventfd stays open for as long as the callback is
    // registered (for good, as it is never unregistered).
    let registered = unsafe {
        ffi::rte_intr_fd_set(handle, fd) == 0
            && ffi::rte_intr_type_set(handle, ffi::rte_intr_handle_type_RTE_INTR_HANDLE_EXT) == 0
            && ffi::rte_intr_callback_register(handle, Some(park_here), std::ptr::null_mut()) == 0
    };
    // SAFETY: handle came from rte_intr_instance_alloc and is not used again.
    unsafe { ffi::rte_intr_instance_free(handle) };
    if !registered {
        // SAFETY: fd is our open eventfd, not registered.
        unsafe { libc::close(fd) };
        return false;
    }
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64 to our eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    let deadline = Instant::now() + timeout;
    let mut parked = PARKED.lock().unwrap_or_else(|e| e.into_inner());
    while !*parked {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        parked = PARKED_CV
            .wait_timeout(parked, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}

/// The interrupt thread's last stop: says it is here, then stays.
///
/// # Safety
///
/// Only for the EAL's interrupt thread, as the callback [`park`] registers:
/// it reads nothing through its argument and never returns.
unsafe extern "C" fn park_here(_: *mut c_void) {
    *PARKED.lock().unwrap_or_else(|e| e.into_inner()) = true;
    PARKED_CV.notify_all();
    loop {
        std::thread::park();
    }
}
