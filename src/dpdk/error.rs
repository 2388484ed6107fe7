//! Every failure of a DPDK call as a typed error carrying `rte_errno` and its
//! text.
#![cfg(feature = "dpdk")]

use super::ffi;
use std::ffi::CStr;

/// Why a DPDK call or setup step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A DPDK call failed; `errno` is `rte_errno` (or the negated return).
    #[error("{call} failed: {text} (rte_errno {errno})")]
    Call {
        /// The DPDK function that failed.
        call: &'static str,
        /// `rte_errno`, or the negated return value.
        errno: i32,
        /// DPDK's text for `errno`.
        text: String,
    },
    #[error(
        "DPDK's EAL is already initialised in this process (it can start only once per process)"
    )]
    /// `rte_eal_init` already ran in this process.
    AlreadyInitialised,
    #[error("EAL initialisation failed: {text} (rte_errno {errno}); EAL arguments: {args}")]
    /// `rte_eal_init` failed.
    EalInit {
        /// `rte_errno` after the call.
        errno: i32,
        /// DPDK's text for `errno`.
        text: String,
        /// The EAL arguments it was given, space-separated.
        args: String,
    },
    #[error("no DPDK port named {0:?} (is the device given to the EAL and its PMD installed?)")]
    /// No DPDK port has this name.
    PortNotFound(String),
    #[error("invalid argument: {0}")]
    /// An option or argument is out of range (what is wrong).
    Invalid(String),
    #[error("memory: {0}")]
    /// A memory allocation failed (what and why).
    Memory(String),
}

impl From<super::options::InvalidOption> for Error {
    fn from(e: super::options::InvalidOption) -> Self {
        Error::Invalid(e.0)
    }
}

/// The result of a DPDK call or setup step.
pub type Result<T> = std::result::Result<T, Error>;

/// The text DPDK gives for an errno value.
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local,
    // NUL-terminated string for any errno value.
    unsafe { CStr::from_ptr(ffi::rte_strerror(errno)) }
        .to_string_lossy()
        .into_owned()
}

/// `rte_errno` of the calling thread.
pub fn last_errno() -> i32 {
    // SAFETY: reads the calling thread's rte_errno; no preconditions.
    unsafe { ffi::ferroce_errno() }
}

/// An error from the current `rte_errno`.
pub(crate) fn from_errno(call: &'static str) -> Error {
    let errno = last_errno();
    Error::Call {
        call,
        errno,
        text: strerror(errno),
    }
}

/// Turns a DPDK return code (0 ok, negative errno) into a `Result`.
pub(crate) fn check(call: &'static str, ret: i32) -> Result<i32> {
    if ret < 0 {
        let errno = -ret;
        Err(Error::Call {
            call,
            errno,
            text: strerror(errno),
        })
    } else {
        Ok(ret)
    }
}
