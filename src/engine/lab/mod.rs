//! `ferroce lab`: a TOML experiment turned into simulated runs of the real
//! transport, whose results are written as CSV time series, a summary
//! table and PNG plots.

#![deny(unsafe_code)]

pub mod output;
pub mod plot;
pub mod progress;
