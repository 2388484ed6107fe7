//! The Environment Abstraction Layer: started once per process from
//! [`EalOptions`] and the devices the ports will use, cleaned up when the last
//! handle drops.
//!
//! Memory: with `hugepages = "auto"` (the default) the EAL uses hugepages
//! when the kernel has free ones, and otherwise falls back to `--no-huge` and
//! says so in one log line. By default it runs `--in-memory` (no runtime files,
//! no shared config) with telemetry off, so a run leaves nothing behind.
#![cfg(feature = "dpdk")]

use super::error::{Error, Result};
use super::ffi;
use super::options::{eal_args, DeviceSpec, EalOptions, HugepageState};
use std::ffi::CString;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Set by the first `Eal::init` of the process: DPDK cannot start twice.
static STARTED: AtomicBool = AtomicBool::new(false);
/// Mempools that still had mbufs out when dropped and were leaked on
/// purpose; while any exists the EAL's memory must stay mapped.
pub(crate) static LEAKED_POOLS: AtomicUsize = AtomicUsize::new(0);

/// A handle on the running EAL; clones share it, the last drop cleans up.
#[derive(Clone)]
pub struct Eal(Arc<EalInner>);

struct EalInner {
    args: Vec<String>,
    hugepages: bool,
    /// The EAL's runtime directory (/var/run/dpdk/PREFIX), removed at
    /// clean-up when empty.
    runtime_dir: Option<std::path::PathBuf>,
}

impl Eal {
    /// Starts the EAL with `opts`, giving it `devices` (vdevs and PCI
    /// functions; ring links need nothing from the EAL).
    pub fn init(opts: &EalOptions, devices: &[DeviceSpec]) -> Result<Eal> {
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyInitialised);
        }
        let (args, hugepages) = eal_args(opts, devices, HugepageState::read())?;
        let argv_owned: Vec<CString> = args
            .iter()
            .map(|a| {
                CString::new(a.as_str())
                    .map_err(|_| Error::Invalid(format!("NUL in EAL argument {a:?}")))
            })
            .collect::<Result<_>>()?;
        // The EAL may keep pointers into argv: leak the strings (once per process).
        let mut argv: Vec<*mut c_char> = argv_owned.into_iter().map(|c| c.into_raw()).collect();
        let argc = argv.len() as c_int;
        argv.push(std::ptr::null_mut());
        let argv = Box::leak(argv.into_boxed_slice());
        log::debug!("EAL arguments: {}", args.join(" "));
        // SAFETY: argv holds argc valid NUL-terminated strings followed by a
        // NULL, leaked so they outlive the EAL; STARTED guarantees one call.
        let ret = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = super::error::last_errno();
            // A probe failure comes after the EAL made its runtime
            // directory: remove it if empty, as a clean exit would.
            if let Some(d) = runtime_dir() {
                let _ = std::fs::remove_dir(d);
            }
            return Err(Error::EalInit {
                errno,
                text: super::error::strerror(errno),
                args: args.join(" "),
            });
        }
        if opts.lcores.is_empty() {
            // The EAL pinned this thread to lcore 0's CPU; let it (and the
            // threads it starts) run anywhere, as two such processes on one
            // machine would otherwise share CPU 0.
            super::lcore::unpin_current_thread();
        }
        Ok(Eal(Arc::new(EalInner {
            args,
            hugepages,
            runtime_dir: runtime_dir(),
        })))
    }

    /// Whether the EAL runs on hugepages (false: the `--no-huge` fallback).
    pub fn hugepages(&self) -> bool {
        self.0.hugepages
    }

    /// The arguments the EAL was started with.
    pub fn args(&self) -> &[String] {
        &self.0.args
    }

    /// The NUMA socket of the calling thread.
    pub fn socket_id(&self) -> i32 {
        // SAFETY: the EAL is initialised (we hold a handle).
        unsafe { ffi::rte_socket_id() as i32 }
    }
}

/// The EAL's runtime directory, if it has named one.
fn runtime_dir() -> Option<std::path::PathBuf> {
    // SAFETY: returns a pointer to a static NUL-terminated buffer of the
    // EAL (empty until rte_eal_init names the directory); never NULL.
    let dir = unsafe { std::ffi::CStr::from_ptr(ffi::rte_eal_get_runtime_dir()) };
    let dir = dir.to_string_lossy();
    (!dir.is_empty()).then(|| std::path::PathBuf::from(dir.into_owned()))
}

impl Drop for EalInner {
    fn drop(&mut self) {
        if LEAKED_POOLS.load(Ordering::SeqCst) > 0 {
            log::warn!("EAL clean-up skipped: a mempool still had mbufs outstanding");
            return;
        }
        // The EAL's interrupt thread outlives the clean-up and would walk
        // interrupt sources in the memory it unmaps (see intr.rs).
        if !super::intr::park(std::time::Duration::from_secs(1)) {
            log::warn!("EAL clean-up skipped: its interrupt thread could not be parked");
            return;
        }
        // SAFETY: the last handle is gone: every port and mempool (which hold
        // handles) has been released, and the interrupt thread is parked, so
        // nothing uses EAL memory any more.
        let ret = unsafe { ffi::rte_eal_cleanup() };
        if ret < 0 {
            log::warn!("rte_eal_cleanup: {}", super::error::strerror(-ret));
        }
        // The EAL makes its runtime directory even when it puts nothing in
        // it (--in-memory, --no-shconf): leave no trace of the run.
        if let Some(d) = &self.runtime_dir {
            let _ = std::fs::remove_dir(d);
        }
    }
}
