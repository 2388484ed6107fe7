//! `ferroce lab`: experiments on a simulated fabric, described in TOML.

#![deny(unsafe_code)]

pub mod config;
pub mod workload;
