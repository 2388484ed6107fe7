//! Holding the EAL's interrupt thread still while a port closes, and
//! parking it before clean-up.
//!
//! DPDK runs device interrupt callbacks (net_memif's control channels and
//! listener socket, link-state changes) on a thread of its own. Two races
//! with that thread kill a process on its way out (SIGSEGV in the
//! interrupt thread, in net_memif or in the EAL's heap):
//!
//! - a port closing while the thread serves that port's control channel
//!   (net_memif 22.11: the peer's disconnect message arriving as our close
//!   frees the port's process-private data, which the handler then reads);
//! - `rte_eal_cleanup`, which does not stop the thread: each time it is
//!   woken it walks every registered interrupt source, reading each one's
//!   handle, and net_memif never unregisters its listener socket's
//!   callback, whose handle lives in DPDK's heap; a wake-up served after
//!   the clean-up unmapped the heap reads unmapped memory.
//!
//! [`hold`] has the interrupt thread run a callback of ours that waits
//! until the returned [`Hold`] drops: while it waits, it has served every
//! earlier wake-up and runs no other callback, so a port can close under
//! it. [`park`] holds it for good, before clean-up.
#![cfg(feature = "dpdk")]

use super::ffi;
use std::os::raw::c_void;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// `RTE_INTR_INSTANCE_F_PRIVATE` (a `UINT32_C(0)` bindgen cannot read): an
/// interrupt instance in process memory, not in DPDK's heap.
const INSTANCE_F_PRIVATE: u32 = 0;

/// What the main thread and the interrupt thread share.
struct State {
    /// Our eventfd, once registered as an interrupt source (for good).
    fd: Option<i32>,
    /// Whether the interrupt thread is asked to wait in [`wait_here`].
    hold: bool,
    /// Whether it is in there.
    inside: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    fd: None,
    hold: false,
    inside: false,
});
static CV: Condvar = Condvar::new();

/// The interrupt thread held in [`wait_here`]; it goes on when this drops.
pub(crate) struct Hold(());

impl Drop for Hold {
    fn drop(&mut self) {
        let mut s = lock();
        s.hold = false;
        CV.notify_all();
    }
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holds the EAL's interrupt thread in a callback of ours until the
/// returned guard drops; `None` if it did not get there within `timeout`
/// (or the callback could not be registered), and then it is not held.
/// The EAL must be initialised.
pub(crate) fn hold(timeout: Duration) -> Option<Hold> {
    let mut s = lock();
    let fd = match s.fd {
        Some(fd) => fd,
        None => {
            let fd = register()?;
            s.fd = Some(fd);
            fd
        }
    };
    s.hold = true;
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64 to our open eventfd.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    let deadline = Instant::now() + timeout;
    while !s.inside {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            s.hold = false;
            return None;
        }
        s = CV
            .wait_timeout(s, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    Some(Hold(()))
}

/// Parks the EAL's interrupt thread for good; true once it is parked.
/// Call only as the EAL is about to be cleaned up: no interrupt callback
/// runs after this.
pub(crate) fn park(timeout: Duration) -> bool {
    match hold(timeout) {
        Some(h) => {
            std::mem::forget(h);
            true
        }
        None => false,
    }
}

/// Registers our eventfd with [`wait_here`] as its callback; the fd.
fn register() -> Option<i32> {
    // SAFETY: plain syscall; the flags are valid for eventfd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the EAL is initialised (the caller holds it); a private
    // instance lives in process memory, as does the copy the EAL registers.
    let handle = unsafe { ffi::rte_intr_instance_alloc(INSTANCE_F_PRIVATE) };
    if handle.is_null() {
        // SAFETY: fd is our open eventfd.
        unsafe { libc::close(fd) };
        return None;
    }
    // SAFETY: handle is a live instance; the EAL copies it on registration,
    // so it can be freed right after. wait_here reads nothing through its
    // argument, and the eventfd stays open for as long as the callback is
    // registered (for good, as it is never unregistered).
    let registered = unsafe {
        ffi::rte_intr_fd_set(handle, fd) == 0
            && ffi::rte_intr_type_set(handle, ffi::rte_intr_handle_type_RTE_INTR_HANDLE_EXT) == 0
            && ffi::rte_intr_callback_register(handle, Some(wait_here), std::ptr::null_mut()) == 0
    };
    // SAFETY: handle came from rte_intr_instance_alloc and is not used again.
    unsafe { ffi::rte_intr_instance_free(handle) };
    if !registered {
        // SAFETY: fd is our open eventfd, not registered.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// The interrupt thread's stop: empties the eventfd (the EAL reads no
/// external source itself), then, if asked to, says it is here and waits
/// until let go.
///
/// # Safety
///
/// Only for the EAL's interrupt thread, as the callback [`register`]
/// registers: it reads nothing through its argument.
unsafe extern "C" fn wait_here(_: *mut c_void) {
    let mut s = lock();
    if let Some(fd) = s.fd {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64 from our
        // non-blocking eventfd.
        unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
    }
    if !s.hold {
        return;
    }
    s.inside = true;
    CV.notify_all();
    while s.hold {
        s = CV.wait(s).unwrap_or_else(|e| e.into_inner());
    }
    s.inside = false;
}
