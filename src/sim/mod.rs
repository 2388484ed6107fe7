//! Runs of the real transport on the simulated fabric
//! ([`crate::backend::fabric`]), in virtual time: [`net`] puts transport
//! devices on the fabric; [`soak`] is `ferroce sim` (two hosts, a mix of
//! verbs, every byte checked); [`incast`] is `ferroce sim --incast`; [`lab`]
//! is `ferroce lab` (experiment files, fabrics, workloads, plots); [`cli`]
//! holds the bodies of those two subcommands; [`defaults`] and [`stats`] are
//! what the runs share (default settings and limits; percentiles, the
//! median, fairness).

#![deny(unsafe_code)]

pub mod cli;
pub mod defaults;
pub mod incast;
pub mod lab;
pub mod net;
pub mod soak;
pub mod stats;
