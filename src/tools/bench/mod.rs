//! `ferroce bench`: measurements taken beside their baselines in the same
//! run ([`e2e`]: the transport end to end between two engines; [`wire`]:
//! frame parse, ICRC and emit next to a bare CRC-32; `io`: the DPDK port
//! layer next to a bare loop over the C shim).

#![allow(missing_docs)] // documented in a later commit
pub mod e2e;
#[cfg(feature = "dpdk")]
pub mod io;
pub mod wire;

/// The options of `ferroce bench e2e` (see its `--help`); the path MTU is
/// 4096.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct E2eCmd {
    pub rounds: usize,
    pub msgs: u64,
    pub big_msgs: u64,
    pub lat_iters: u64,
    pub secs: f64,
    pub sq_depth: u32,
    pub cq_mod: u32,
    pub inflight: u32,
    /// 1: one thread polls both ends; 2: a thread per end.
    pub threads: u8,
    pub socket_buf: usize,
    /// The report as one JSON object instead of the table.
    pub json: bool,
}

/// `ferroce bench e2e`: the table (or JSON) of [`e2e::run`] on the config's
/// ports "a" and "b"; Ok(true).
#[cfg(feature = "dpdk")]
pub fn run_e2e(cfg: &crate::config::Config, a: &E2eCmd) -> anyhow::Result<bool> {
    use e2e::{E2eOpts, QpParams, Threads};
    let opts = E2eOpts {
        rounds: a.rounds,
        msgs: a.msgs,
        big_msgs: a.big_msgs,
        lat_iters: a.lat_iters,
        secs: a.secs,
        qp: QpParams {
            sq_depth: a.sq_depth,
            cq_mod: a.cq_mod,
            inflight: a.inflight,
            mtu: crate::transport::Mtu::Mtu4096,
        },
        threads: if a.threads == 2 {
            Threads::Two
        } else {
            Threads::One
        },
        socket_buf: a.socket_buf,
    };
    let r = e2e::run(cfg, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(true)
}
