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
pub mod cm_link;
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
pub mod rping;

/// What a command that needs a DPDK port says in a build without the
/// `dpdk` feature.
pub const NO_DPDK: &str =
    "this ferroce was built without the `dpdk` feature; rebuild with default features";

/// Taken by the unit tests that run two ends against each other on the
/// wall clock, each end on its own thread polling without rest (the
/// tools' self-tests, the demo's, the end-to-end benchmark's): one such
/// pair at a time. Side by side on a machine with few cores (e.g. eight
/// test threads on two), sixteen spinning threads get a slice of a core
/// some tens of milliseconds apart, a round trip outlasts the transport's
/// 67 ms ACK timeout (rc_pingpong's and perftest's timeout 14) again and
/// again, and a QP runs out of retries or a run out of its time limit.
#[cfg(test)]
pub(crate) fn spinning_pair() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
