//! `ferroce bench io`: rx+tx bursts through the DPDK port layer
//! ([`crate::dpdk::Port`], `Mbuf`) next to a bare loop over the C shim, on
//! an in-process ring link, rounds alternated in the same run.

use super::IoOpts;
use crate::config::Config;
use crate::dpdk::{self, TscClock};
use crate::time::Clock;
use crate::tools::port::ports::Ports;
use anyhow::{Context, Result};

/// `ferroce bench io` on the config's ports "a" and "b" (a ring link):
/// prints the medians and the layer's cost; Ok(true).
pub fn run(cfg: &Config, opts: &IoOpts) -> Result<bool> {
    let IoOpts {
        packets,
        frame_len,
        rounds,
    } = *opts;
    let dp = Ports::open(cfg, &["a", "b"])
        .context("bench io needs ports \"a\" and \"b\" on a ring link")?;
    let (_, pa) = dp.port("a")?;
    let (_, pb) = dp.port("b")?;
    let clock = TscClock::new(&dp.eal);
    let _reg = dpdk::lcore::register_current_thread(&dp.eal)?;
    let mut qa = dp.queue("a")?;
    let mut qb = dp.queue("b")?;
    let pool = dp.pool.clone();
    let ours = |qa: &mut dpdk::PortQueue, qb: &mut dpdk::PortQueue| {
        crate::backend::poll::io_loop_with(qa, qb, frame_len, packets, |_, out, n| {
            pool.alloc_bulk(out, n);
        })
    };
    // Warm up both paths.
    dpdk::bare::io_loop(pa, pb, frame_len as u16, packets / 10);
    ours(&mut qa, &mut qb);
    let (mut bare, mut safe) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = clock.now();
        let n = dpdk::bare::io_loop(pa, pb, frame_len as u16, packets);
        bare.push(n as f64 / (clock.now() - t).as_secs_f64());
        let t = clock.now();
        let n = ours(&mut qa, &mut qb);
        safe.push(n as f64 / (clock.now() - t).as_secs_f64());
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (b, s) = (med(&mut bare), med(&mut safe));
    println!(
        "bench io: {frame_len}-byte frames, {packets} per round, {rounds} rounds, ring link a -> b"
    );
    println!(
        "  bare loop over the C shim : {:>8.2} Mpps (median)",
        b / 1e6
    );
    println!(
        "  ferroce Port/Mbuf layer   : {:>8.2} Mpps (median)",
        s / 1e6
    );
    println!(
        "  layer cost                : {:>+8.1} % (ours / bare = {:.3})",
        (b / s - 1.0) * 100.0,
        s / b
    );
    Ok(true)
}
