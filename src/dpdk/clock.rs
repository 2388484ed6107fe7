//! The TSC as the crate's clock: cycles turned into nanoseconds with a
//! fixed-point multiply (no division on the hot path).
#![cfg(feature = "dpdk")]

use super::ffi;
use crate::time::{Clock, Instant};

/// Nanoseconds since the clock was made, read from the TSC.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    base: u64,
    hz: u64,
    /// ns per cycle in 32.32 fixed point.
    mult: u64,
}

impl TscClock {
    /// Reads the TSC frequency DPDK calibrated at EAL start.
    pub fn new(_eal: &super::Eal) -> TscClock {
        // SAFETY: the EAL is up (we were handed a handle), so the TSC
        // frequency is calibrated.
        let hz = unsafe { ffi::ferroce_tsc_hz() }.max(1);
        let mult = ((1_000_000_000u128 << 32) / u128::from(hz)) as u64;
        TscClock {
            base: cycles(),
            hz,
            mult,
        }
    }

    /// The TSC's frequency in Hz.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Converts a cycle delta into nanoseconds.
    #[inline]
    pub fn cycles_to_nanos(&self, cycles: u64) -> u64 {
        ((u128::from(cycles) * u128::from(self.mult)) >> 32) as u64
    }
}

/// The raw TSC.
#[inline]
pub fn cycles() -> u64 {
    // SAFETY: reads the time-stamp counter; no preconditions.
    unsafe { ffi::ferroce_tsc_cycles() }
}

impl Clock for TscClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::from_nanos(self.cycles_to_nanos(cycles().wrapping_sub(self.base)))
    }
}
