//! Datapath threads: pinning to a core (core_affinity) and registering with
//! DPDK so the thread gets an lcore id and per-lcore mempool caches.

use super::error::{from_errno, Error, Result};
use super::ffi;

/// Pins the calling thread to CPU `core`.
pub fn pin_current_thread(core: usize) -> Result<()> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let id = ids
        .into_iter()
        .find(|c| c.id == core)
        .ok_or_else(|| Error::Invalid(format!("CPU {core} is not available to this process")))?;
    if core_affinity::set_for_current(id) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "could not pin the thread to CPU {core}"
        )))
    }
}

/// The calling thread's lcore id, `None` for a thread DPDK does not know.
pub fn lcore_id() -> Option<u32> {
    // SAFETY: reads a per-thread variable; no preconditions.
    let id = unsafe { ffi::ferroce_lcore_id() };
    (id != u32::MAX).then_some(id)
}

/// Registers a non-EAL thread with DPDK (idempotent); unregistered when the
/// guard drops.
pub fn register_current_thread(_eal: &super::Eal) -> Result<ThreadRegistration> {
    if lcore_id().is_some() {
        return Ok(ThreadRegistration { registered: false });
    }
    // SAFETY: the EAL is up; registers the calling thread.
    if unsafe { ffi::rte_thread_register() } != 0 {
        return Err(from_errno("rte_thread_register"));
    }
    Ok(ThreadRegistration { registered: true })
}

/// Keeps the calling thread registered with DPDK while alive.
pub struct ThreadRegistration {
    registered: bool,
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: this thread registered itself in register_current_thread.
            unsafe { ffi::rte_thread_unregister() }
        }
    }
}
