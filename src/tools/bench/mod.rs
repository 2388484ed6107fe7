//! `ferroce bench`: measurements taken beside their baselines in the same
//! run ([`e2e`]: the transport end to end between two engines; [`wire`]:
//! frame parse, ICRC and emit next to a bare CRC-32; `io`: the DPDK port
//! layer next to a bare loop over the C shim).

pub mod e2e;
#[cfg(feature = "dpdk")]
pub mod io;
pub mod wire;

/// The options of `ferroce bench e2e` (see its `--help`); the path MTU is
/// 4096.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct E2eCmd {
    /// Measured rounds after the warm-up round (`--rounds`, default 5).
    pub rounds: usize,
    /// 64 B WRITEs per rate run and frames per echo run (`--msgs`, default 100,000).
    pub msgs: u64,
    /// 64 KiB WRITEs per goodput run and messages of the memcpy + CRC run
    /// (`--big-msgs`, default 2,000).
    pub big_msgs: u64,
    /// Round trips per latency run (`--lat-iters`, default 5,000).
    pub lat_iters: u64,
    /// Time limit of each run, in seconds (`--secs`, default 2.0).
    pub secs: f64,
    /// Send work requests outstanding at most (`--sq-depth`, default 256).
    pub sq_depth: u32,
    /// One WRITE in this many is signaled (`--cq-mod`, default 32).
    pub cq_mod: u32,
    /// Request PSNs in flight at most (`--inflight`, default 256).
    pub inflight: u32,
    /// 1: one thread polls both ends; 2: a thread per end.
    pub threads: u8,
    /// Kernel socket buffers asked for the UDP backend, in bytes
    /// (`--socket-buf`, default 4 MiB).
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
