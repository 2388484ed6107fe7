//! `ferroce lab`: a TOML experiment turned into simulated runs of the real
//! transport, whose results are written as CSV time series, a summary
//! table and PNG plots.
//!
//! - [`config`]: the experiment file's schema; [`workload`]: the flows it
//!   makes; [`resolve`]: one run's checked, resolved description;
//!   [`plan`]: a file's variants and sweep expanded into runs;
//! - `run`: one run on the simulator; `experiment`: every run of a file,
//!   its results folder and the plots that compare them; [`merge`]: its
//!   runs split over batch jobs (`--only`) and merged back;
//! - [`fct`]: flow completion times as the HPCC simulator's scripts
//!   report them; [`throughput`]: per-flow throughput series;
//! - [`output`], [`plot`], [`progress`]: CSV and summary files, PNG charts,
//!   the progress line; [`collective`]: the step and whole times of a
//!   run's all-reduces.

#![deny(unsafe_code)]

pub mod collective;
pub mod config;
pub mod experiment;
pub mod fct;
pub mod merge;
pub mod output;
pub mod plan;
pub mod plot;
pub mod progress;
pub mod resolve;
pub mod run;
pub mod throughput;
pub mod workload;
