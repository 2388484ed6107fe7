//! The host's monotonic clock as a [`Clock`]: for backends without a TSC
//! and for tests. The TSC clock is `crate::dpdk::TscClock`.

use crate::time::{Clock, Instant};

/// Nanoseconds since the clock was made, read from `std::time::Instant`.
#[derive(Debug, Clone, Copy)]
pub struct WallClock(std::time::Instant);

impl WallClock {
    /// A clock whose zero is now.
    pub fn new() -> WallClock {
        WallClock(std::time::Instant::now())
    }
}

impl Default for WallClock {
    fn default() -> WallClock {
        WallClock::new()
    }
}

impl Clock for WallClock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
}
