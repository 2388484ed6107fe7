//! ferroce: a kernel-bypass, userspace RoCE v2 engine.
//!
//! A DPDK poll-mode datapath builds and parses RoCE v2 frames itself, runs a
//! reliable-connected transport with ECN echo and DCQCN, and offers a
//! verbs-like API. The layers, from the bottom:
//!
//! - [`time`]: `Instant` / `Duration` in nanoseconds, the `Clock` trait;
//! - [`wire`]: RoCE v2 byte layouts: header views and `Repr`s, the opcode
//!   table, PSN arithmetic, the ICRC, whole-frame parse / emit;
//! - [`cc`]: congestion control at the reaction point (DCQCN) and the
//!   pacer;
//! - [`pcap`]: capture files, classic pcap and pcapng read, classic pcap
//!   written;
//! - [`decode`]: what `ferroce decode` says of each captured frame;
//! - [`oob`]: the out-of-band TCP messages of rdma-core's and perftest's
//!   tools;
//! - [`transport`]: the reliable-connected transport as a sans-IO state
//!   machine (QPs, memory regions, requester, responder, completer);
//! - [`backend`]: the `Backend` trait the engine drives, and backends that
//!   need no DPDK, the simulated fabric among them;
//! - [`dpdk`]: the DPDK layer and all FFI (feature `dpdk`);
//! - [`engine`]: the poll loop, probe frames, the link test, and the glue
//!   that runs transport devices over a backend or the simulator;
//! - [`config`]: TOML configuration.
//!
//! The module rules (who may import whom) are in DESIGN.md and checked by
//! `tests/layering.rs`.

#![deny(unsafe_code)]

pub mod backend;
pub mod cc;
pub mod config;
pub mod decode;
pub mod dpdk;
pub mod engine;
pub mod oob;
pub mod pcap;
pub mod time;
pub mod transport;
pub mod verbs;
pub mod wire;
