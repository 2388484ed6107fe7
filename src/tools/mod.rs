//! The user-facing tools, each the body of a `ferroce` subcommand:
//! rdma-core's and perftest's interop tools ([`pingpong`], [`perftest`])
//! with their out-of-band exchange ([`oob`], [`exchange`]), `ferroce demo`
//! ([`demo`]), the link test and its probe frames ([`linktest`],
//! [`probe`]), the capture decoder ([`decode`]) and its per-connection
//! diagnosis ([`explain`]), the benchmarks ([`bench`](mod@bench)),
//! the interop tools' subcommands ([`interop`]), `ferroce info` (`info`) and
//! what every tool does to open a DPDK port (`port`; both need DPDK).

#![deny(unsafe_code)]

pub mod bench;
pub mod decode;
pub mod demo;
pub mod exchange;
pub mod explain;
#[cfg(feature = "dpdk")]
pub mod info;
pub mod interop;
pub mod linktest;
pub mod oob;
pub mod perftest;
pub mod pingpong;
#[cfg(feature = "dpdk")]
pub mod port;
pub mod probe;

/// What a command that needs a DPDK port says in a build without the
/// `dpdk` feature.
pub const NO_DPDK: &str =
    "this ferroce was built without the `dpdk` feature; rebuild with default features";
