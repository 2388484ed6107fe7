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
//! - [`transport`]: the reliable-connected transport as a sans-IO state
//!   machine (QPs, memory regions, requester, responder, completer, the
//!   connect steps);
//! - [`cm`]: the InfiniBand Communication Manager as a sans-IO agent: the
//!   REQ / REP / RTU handshake and DREQ / DREP teardown on QP1, its
//!   resends, duplicates, rejections and TimeWait, as Linux's cm.c does
//!   them;
//! - [`backend`]: the `Backend` trait, the poll loop, backends that need no
//!   DPDK, and the simulated fabric;
//! - [`dpdk`]: the DPDK layer and all FFI (feature `dpdk`);
//! - [`host`]: one port, sans IO: a transport device with its neighbour
//!   table, and the pump that moves frames between it and a backend;
//! - [`verbs`]: the application API, run to completion or on datapath
//!   threads;
//! - [`sim`]: the transport on the simulated fabric: `ferroce sim`, incast,
//!   the lab;
//! - [`tools`]: the user-facing tools and benchmarks;
//! - [`config`]: TOML configuration.
//!
//! The module rules (who may import whom) are in `ARCHITECTURE.md` and
//! checked by
//! `tests/layering.rs`.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod cc;
pub mod cm;
pub mod config;
pub mod dpdk;
pub mod host;
pub mod pcap;
pub mod sim;
pub mod time;
pub mod tools;
pub mod transport;
pub mod verbs;
pub mod wire;
