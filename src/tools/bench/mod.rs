//! `ferroce bench`: measurements taken beside their baselines in the same
//! run ([`e2e`]: the transport end to end between two engines; [`wire`]:
//! frame parse, ICRC and emit next to a bare CRC-32; `io`: the DPDK port
//! layer next to a bare loop over the C shim).

pub mod e2e;
#[cfg(feature = "dpdk")]
pub mod io;
pub mod wire;

/// The options of `ferroce bench io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct IoOpts {
    /// Packets per measurement.
    #[arg(long, default_value_t = 2_000_000)]
    pub packets: u64,
    /// Frame size in bytes.
    #[arg(long, default_value_t = 64)]
    pub frame_len: usize,
    /// Alternating rounds of each loop.
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
}

/// The options of `ferroce bench e2e` (see its `--help`); the path MTU is
/// 4096.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct E2eCmd {
    /// Measured rounds (after one warm-up round at a tenth of the counts).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// 64 B WRITEs per rate run (and frames per echo run).
    #[arg(long, default_value_t = 100_000)]
    pub msgs: u64,
    /// 64 KiB WRITEs per goodput run (and messages of the memcpy + CRC run).
    #[arg(long, default_value_t = 2_000)]
    pub big_msgs: u64,
    /// Round trips per latency run.
    #[arg(long, default_value_t = 5_000)]
    pub lat_iters: u64,
    /// Time limit of each run, in seconds (a run ends at its count or here).
    #[arg(long, default_value_t = 2.0)]
    pub secs: f64,
    /// Send work requests outstanding (and echo frames in flight).
    #[arg(long, default_value_t = 256)]
    pub sq_depth: u32,
    /// One WRITE in this many is signaled (perftest's --cq-mod).
    #[arg(long, default_value_t = 32)]
    pub cq_mod: u32,
    /// Request PSNs in flight at most (the transport's max_inflight).
    #[arg(long, default_value_t = 256)]
    pub inflight: u32,
    /// 1: one thread polls both ends; 2: a thread per end.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub threads: u8,
    /// Kernel socket buffers asked for the UDP backend, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub socket_buf: usize,
    /// The QP-count sweep's largest count: 64 B WRITEs round-robin over 1,
    /// 100, 1,000 and 10,000 QPs, up to this many (0 skips the sweep).
    #[arg(long, default_value_t = 10_000)]
    pub max_qps: usize,
    /// The cores sweep's most datapath lcores per engine: each engine split
    /// over 1 to this many queue pairs, a thread each (0 skips the sweep;
    /// default: the CPUs online).
    #[arg(long)]
    pub max_lcores: Option<usize>,
    /// Print the report as one JSON object (every round's figures).
    #[arg(long)]
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
        max_qps: a.max_qps,
        max_lcores: a
            .max_lcores
            .unwrap_or_else(|| crate::dpdk::lcore::online_cpus().len().max(1)),
    };
    let r = e2e::run(cfg, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(true)
}
