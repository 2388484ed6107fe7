//! The DPDK datapath layer: the crate's only `unsafe` code and all of its FFI.
//!
//! Our own bindings (build.rs: bindgen over `dpdk/wrapper.h` from an
//! allowlist, plus a C shim for DPDK's static-inline functions) sit in a
//! private `ffi` module; this module wraps them in owned, typed handles:
//!
//! - [`Eal`]: started once per process from [`EalOptions`] and the ports'
//!   [`DeviceSpec`]s; hugepages when available, else a logged `--no-huge`
//!   fallback; cleaned up when the last handle drops;
//! - [`Mempool`]: packet-buffer pools, passed explicitly;
//! - [`Mbuf`]: an owned packet buffer, freed on drop, `into_raw` for TX;
//! - [`Port`] / [`PortQueue`]: ports with N queues; a `PortQueue` implements
//!   [`crate::backend::Backend`] with rx bursts into a caller's fixed array
//!   and tx bursts that keep the unsent;
//! - [`TscClock`]: the TSC as a [`crate::time::Clock`];
//! - [`lcore`]: pinning and registering datapath threads;
//! - [`HugeMem`]: hugepage-backed memory for registered memory regions;
//!   [`DmaRegion`]: the same that a port sends from in place (zero-copy
//!   send: an mbuf attached to the region's bytes, chained behind the
//!   headers).
//!
//! The option types ([`options`]) are plain data and exist without the
//! `dpdk` feature too, as does [`prefetch`] (the cache prefetch hint, a leaf
//! any layer may use: the transport prefetches QP state with it);
//! everything else needs the feature. Every `unsafe` block carries a
//! `// SAFETY:` line.

#![allow(unsafe_code)]
// Without the `dpdk` feature the types these docs link to do not exist.
#![cfg_attr(not(feature = "dpdk"), allow(rustdoc::broken_intra_doc_links))]

pub mod options;
pub use options::{
    eal_args, AfPacketArgs, DeviceSpec, EalOptions, HugepageMode, HugepageState, InvalidOption,
    MempoolOptions, PortOptions,
};

pub mod prefetch;

// Each module below is DPDK-only by its own `#![cfg(feature = "dpdk")]`.
mod ffi;

pub mod bare;
mod clock;
mod eal;
mod error;
mod hugemem;
mod intr;
pub mod lcore;
mod lend;
mod mbuf;
mod mempool;
pub mod netdev;
mod port;

#[cfg(feature = "dpdk")]
pub use {
    clock::{cycles, TscClock},
    eal::Eal,
    error::{Error, Result},
    hugemem::HugeMem,
    lend::DmaRegion,
    mbuf::{free_burst, Mbuf},
    mempool::{Mempool, HEADROOM},
    port::{FrameLimit, LinkStatus, Port, PortId, PortQueue, PortStats, QueueId},
};

/// The DPDK version the crate was built against (from pkg-config).
#[cfg(feature = "dpdk")]
pub const DPDK_VERSION: &str = env!("FERROCE_DPDK_VERSION");
