//! Datapath threads: pinning to a core (core_affinity) and registering with
//! DPDK so the thread gets an lcore id and per-lcore mempool caches.
#![cfg(feature = "dpdk")]

use super::error::{from_errno, Error, Result};
use super::ffi;

/// The CPUs online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut v = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.splitn(2, '-').map(|x| x.parse::<usize>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), None) => v.push(a),
            (Some(Ok(a)), Some(Ok(b))) if a <= b => v.extend(a..=b),
            _ => {}
        }
    }
    v
}

/// A CPU other than the first one the calling thread may run on: where a
/// second datapath thread goes (the EAL pins its main thread to one CPU,
/// and threads started from it inherit that).
pub fn other_cpu() -> Option<usize> {
    let here = core_affinity::get_core_ids()
        .and_then(|v| v.first().map(|c| c.id))
        .unwrap_or(0);
    online_cpus().into_iter().find(|&c| c != here)
}

/// Lets the calling thread run on every online CPU.
pub fn unpin_current_thread() {
    let cpus = online_cpus();
    // SAFETY: cpu_set_t is plain data, zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: c is below CPU_SETSIZE, the set's capacity.
        unsafe { libc::CPU_SET(*c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; set is a valid cpu_set_t of the
    // size passed.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if ret != 0 {
        log::warn!(
            "could not let the main thread run on every CPU: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Pins the calling thread to CPU `core`.
pub fn pin_current_thread(core: usize) -> Result<()> {
    // Any online CPU: the thread's own mask may be narrower (the EAL pins
    // its main thread, and threads started from it inherit that).
    if !online_cpus().contains(&core) {
        return Err(Error::Invalid(format!("CPU {core} is not online")));
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
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

/// A datapath thread's setup for the threaded verbs mode
/// (`verbs::lcore::LcoreConfig::setup`): pin the thread to `core` and
/// register it with `eal`, each if given. The registration is the returned
/// guard.
pub fn thread_setup(
    core: Option<usize>,
    eal: Option<super::Eal>,
) -> impl Fn() -> core::result::Result<Box<dyn core::any::Any>, String> + Send + Sync {
    move || {
        if let Some(core) = core {
            pin_current_thread(core).map_err(|e| e.to_string())?;
        }
        let reg = match &eal {
            Some(eal) => Some(register_current_thread(eal).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok(Box::new(reg) as Box<dyn core::any::Any>)
    }
}
