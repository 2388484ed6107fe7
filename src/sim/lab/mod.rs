//! `ferroce lab`: a TOML experiment turned into simulated runs of the real
//! transport, whose results are written as CSV time series, a summary
//! table and PNG plots.
//!
//! - [`config`]: the experiment file (variants, a sweep) and its resolved
//!   form; [`workload`]: the flows it makes;
//! - `run`: one run on the simulator; `experiment`: every run of a file,
//!   its results folder and the plots that compare them;
//! - [`output`], [`plot`], [`progress`]: CSV and summary files, PNG charts,
//!   the progress line.

#![deny(unsafe_code)]

pub mod config;
pub mod experiment;
pub mod output;
pub mod plot;
pub mod progress;
pub mod run;
pub mod workload;
