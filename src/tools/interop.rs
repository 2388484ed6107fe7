//! The interop tools' subcommands (`ferroce pingpong`, `write-bw`,
//! `read-bw`, ...): their options as plain values, and the commands on a
//! DPDK port: open the config's port, run [`super::pingpong`] or
//! [`super::perftest`] on it, print the report, the pcap and counters.

use super::perftest::{self, AtomicKind, Test};
use crate::config::Config;
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::path::PathBuf;

/// Where an interop tool runs and what it records.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ToolAt {
    /// The config file: EAL, mempool and ports (see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// The config's `[[port]]` to use (its ip is our GID).
    #[arg(long, help = "The [[port]] to use (its ip is our GID)")]
    pub port: String,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "tcp-port", default_value_t = 18515)]
    pub tcp_port: u16,
    /// Print at the end the QPs' counters, what the host lost before the
    /// transport saw it, and the port's frame limit.
    #[arg(long)]
    pub stats: bool,
    /// Record every frame sent and received on the port (classic pcap,
    /// nanosecond timestamps); `ferroce decode` or Wireshark reads it.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

impl ToolAt {
    /// The config, checked to have the port.
    pub fn config(&self) -> Result<Config> {
        let cfg = Config::load(&self.config)?;
        if cfg.port(&self.port).is_none() {
            bail!("the config has no port named {:?}", self.port);
        }
        Ok(cfg)
    }
}

/// The options of `ferroce pingpong` (`ibv_rc_pingpong`'s).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PingpongCmd {
    /// Where it runs and what it records.
    #[command(flatten)]
    pub at: ToolAt,
    /// Bytes per message.
    #[arg(short = 's', long, default_value_t = 4096)]
    pub size: u32,
    /// Messages each way.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Receives posted.
    #[arg(short = 'r', long, default_value_t = 500)]
    pub rx_depth: u32,
    /// GID index.
    #[arg(short = 'g', long)]
    pub gid_idx: Option<u8>,
    /// Give up after this many milliseconds (the exchange and the run).
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// The server's address (TCP); without it we are the server.
    pub server: Option<IpAddr>,
}

impl PingpongCmd {
    /// The run's options; an error for an MTU that is not one.
    pub fn opts(&self) -> Result<crate::tools::pingpong::PingpongOpts> {
        let mtu = crate::transport::Mtu::from_bytes(self.mtu)
            .with_context(|| format!("-m {}: not 256, 512, 1024, 2048 or 4096", self.mtu))?;
        Ok(crate::tools::pingpong::PingpongOpts {
            size: self.size,
            iters: self.iters,
            mtu,
            rx_depth: self.rx_depth,
            tcp_port: self.at.tcp_port,
            listener: None,
            gid_index: self.gid_idx.unwrap_or(0),
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            qp_type: crate::transport::QpType::Rc,
        })
    }
}

/// The options of `ferroce ud-pingpong` (`ibv_ud_pingpong`'s: no path
/// MTU, the message must fit the port's).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct UdPingpongCmd {
    /// Where it runs and what it records.
    #[command(flatten)]
    pub at: ToolAt,
    /// Bytes per message, at most the port's MTU.
    #[arg(short = 's', long, default_value_t = 2048)]
    pub size: u32,
    /// Messages each way.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u32,
    /// Receives posted.
    #[arg(short = 'r', long, default_value_t = 500)]
    pub rx_depth: u32,
    /// GID index.
    #[arg(short = 'g', long)]
    pub gid_idx: Option<u8>,
    /// Give up after this many milliseconds (the exchange and the run).
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// The server's address (TCP); without it we are the server.
    pub server: Option<IpAddr>,
}

impl UdPingpongCmd {
    /// The run's options, as `ferroce pingpong`'s with a UD QP.
    pub fn as_pingpong(&self) -> PingpongCmd {
        PingpongCmd {
            at: self.at.clone(),
            size: self.size,
            iters: self.iters,
            mtu: 1024,
            rx_depth: self.rx_depth,
            gid_idx: self.gid_idx,
            timeout_ms: self.timeout_ms,
            server: self.server,
        }
    }

    /// The run's options.
    pub fn opts(&self) -> Result<crate::tools::pingpong::PingpongOpts> {
        Ok(crate::tools::pingpong::PingpongOpts {
            qp_type: crate::transport::QpType::Ud,
            ..self.as_pingpong().opts()?
        })
    }
}

/// The options of `ferroce rping` (librdmacm's `rping`'s letters; `-p` is
/// rping's port, not a TCP one).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RpingCmd {
    /// The config file: EAL, mempool and ports (see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// The config's `[[port]]` to use.
    #[arg(long)]
    pub port: String,
    /// Print at the end the QP's counters and the CM agent's.
    #[arg(long)]
    pub stats: bool,
    /// Record every frame sent and received on the port.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Be the server.
    #[arg(short = 's', conflicts_with = "client")]
    pub server: bool,
    /// Be the client.
    #[arg(short = 'c')]
    pub client: bool,
    /// The server's address (the client connects to it; the server
    /// listens on every address of the port).
    #[arg(short = 'a')]
    pub addr: IpAddr,
    /// The RDMA-CM port.
    #[arg(short = 'p', default_value_t = super::rping::PORT)]
    pub rdma_port: u16,
    /// Pings (0: until stopped).
    #[arg(short = 'C', default_value_t = 0)]
    pub count: u32,
    /// Bytes per ping.
    #[arg(short = 'S', default_value_t = 64)]
    pub size: u32,
    /// Print each ping's data.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Check each ping's data (client).
    #[arg(short = 'V')]
    pub validate: bool,
    /// Our GID index.
    #[arg(short = 'g', long, default_value_t = 0)]
    pub gid_idx: u8,
    /// Give up after this many milliseconds without progress.
    #[arg(long, default_value_t = 30_000)]
    pub timeout_ms: u64,
}

impl RpingCmd {
    /// The run's options; one of `-s` and `-c` is needed.
    pub fn opts(&self) -> Result<super::rping::RpingOpts> {
        if self.server == self.client {
            bail!("rping: one of -s (server) and -c (client)");
        }
        Ok(super::rping::RpingOpts {
            server: self.server,
            addr: self.addr,
            port: self.rdma_port,
            count: self.count,
            size: self.size,
            verbose: self.verbose,
            validate: self.validate,
            gid_index: self.gid_idx,
            timeout: std::time::Duration::from_millis(self.timeout_ms),
        })
    }
}

/// Without DPDK `ferroce rping` is refused.
#[cfg(not(feature = "dpdk"))]
pub fn rping(_a: &RpingCmd, _opts: &super::rping::RpingOpts) -> Result<bool> {
    bail!(super::NO_DPDK)
}

/// `ferroce rping` on the config's port; Ok(false) (exit 1) when a ping
/// came back different (`-V`).
#[cfg(feature = "dpdk")]
pub fn rping(a: &RpingCmd, opts: &super::rping::RpingOpts) -> Result<bool> {
    use super::port::{describe_limit, on_port, OnContext};
    use super::rping::{self, RpingOpts, RpingReport};
    struct Work<'a>(&'a RpingOpts);
    impl OnContext for Work<'_> {
        type Out = (RpingReport, String);
        fn run<B: crate::backend::Backend>(
            self,
            ctx: &mut crate::verbs::Context<B>,
        ) -> Result<(RpingReport, String)> {
            let r = rping::run(ctx, self.0, &mut std::io::stdout())?;
            let cm = ctx
                .cm_counters()
                .map(|c| format!("{c:?}"))
                .unwrap_or_default();
            Ok((r, cm))
        }
    }
    let cfg = Config::load(&a.config)?;
    if cfg.port(&a.port).is_none() {
        bail!("the config has no port named {:?}", a.port);
    }
    let run = on_port(&cfg, &a.port, a.pcap.as_deref(), Work(opts))?;
    let (r, cm) = run.out;
    if let (Some(n), Some(path)) = (run.frames, &a.pcap) {
        eprintln!("pcap: {n} frames written to {}", path.display());
    }
    if a.stats {
        println!("counters: {}", r.counters);
        println!("cm: {cm}");
        println!("host: {}", run.host);
        println!("port: {}", describe_limit(&run.limit));
    }
    Ok(r.bad == 0)
}

/// perftest's options (same letters), plus the port and what to record;
/// the test is the subcommand's.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PerftestCmd {
    /// Where it runs and what it records.
    #[command(flatten)]
    pub at: ToolAt,
    /// Bytes per message (default 65536 for bandwidth, 2 for latency).
    #[arg(short = 's', long)]
    pub size: Option<u64>,
    /// Messages per QP (default 5000 for write-bw, else 1000).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Run this many seconds instead of a count (bandwidth tests).
    #[arg(short = 'D', long)]
    pub duration: Option<u32>,
    /// Path MTU we offer: 256 .. 4096 (default: the port's).
    #[arg(short = 'm', long)]
    pub mtu: Option<u32>,
    /// GID index.
    #[arg(short = 'x', long = "gid-index", default_value_t = 0)]
    pub gid_index: u8,
    /// QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Work requests outstanding per QP.
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receives posted per QP (SEND tests).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// One completion per this many work requests.
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// The atomic of atomic-bw.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    pub atomic: AtomicKind,
    /// Report Gbit/s instead of MiB/s.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
    /// Connect by RDMA-CM (perftest's `-R`): the control channel and the
    /// test QPs, to port `-p` in RDMA-CM's TCP port space.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Give up after this many milliseconds without progress.
    #[arg(long, default_value_t = 60_000)]
    pub timeout_ms: u64,
    /// Write every rate decision of our QPs (the `[congestion]` table's
    /// rate control) to this CSV file: the QP, then the columns of
    /// `ferroce sim --incast --csv`'s cc_trace.csv.
    #[arg(long = "cc-trace")]
    pub cc_trace: Option<PathBuf>,
    /// Loss recovery of the test QPs: gbn (go-back-N, what every RoCE
    /// peer speaks) or sr (selective repeat, used only when the peer is
    /// ferroce and was given `--recovery sr` too; otherwise the QPs stay
    /// go-back-N and the tool says so).
    #[arg(long, default_value = "gbn")]
    pub recovery: crate::transport::Recovery,
    /// The local ACK timeout of the test QPs, 4.096 us x 2^N (default 14,
    /// about 67 ms). Not with -R (RDMA-CM's path sets it).
    #[arg(short = 'u', long = "qp-timeout")]
    pub qp_timeout: Option<u8>,
    /// The server's address (TCP); without it we are the server.
    pub server: Option<IpAddr>,
}

impl PerftestCmd {
    /// The options of perftest's `test`; an error for an MTU that is not
    /// one.
    pub fn opts(&self, test: Test) -> Result<perftest::Opts> {
        let mtu = self
            .mtu
            .map(|m| {
                crate::transport::Mtu::from_bytes(m)
                    .with_context(|| format!("-m {m}: not 256, 512, 1024, 2048 or 4096"))
            })
            .transpose()?;
        Ok(perftest::Opts {
            test,
            size: self.size,
            iters: self.iters,
            duration: self.duration,
            mtu,
            gid_index: self.gid_index,
            qps: self.qps,
            tx_depth: self.tx_depth,
            rx_depth: self.rx_depth,
            cq_mod: self.cq_mod,
            atomic: self.atomic,
            report_gbits: self.report_gbits,
            tcp_port: self.at.tcp_port,
            listener: None,
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            device: format!("ferroce:{}", self.at.port),
            rdma_cm: self.rdma_cm,
            cc_trace: self.cc_trace.is_some(),
            recovery: self.recovery,
            qp_timeout: self.qp_timeout,
        })
    }

    /// Checks the options of `test` as the run would (without opening a
    /// port).
    pub fn check(&self, test: Test) -> Result<()> {
        perftest::Params::from_opts(&self.opts(test)?)?;
        Ok(())
    }
}

#[cfg(feature = "dpdk")]
pub use dpdk_run::{perftest, pingpong};

/// Without DPDK `ferroce pingpong` and `ud-pingpong` are refused (their
/// options and config checked first by the caller).
#[cfg(not(feature = "dpdk"))]
pub fn pingpong(
    _cfg: &Config,
    _a: &PingpongCmd,
    _opts: &crate::tools::pingpong::PingpongOpts,
) -> Result<bool> {
    bail!(super::NO_DPDK)
}

/// Without DPDK a perftest command is refused (its options and config
/// checked first by the caller).
#[cfg(not(feature = "dpdk"))]
pub fn perftest(_cfg: &Config, _test: Test, _a: &PerftestCmd) -> Result<bool> {
    bail!(super::NO_DPDK)
}

#[cfg(feature = "dpdk")]
mod dpdk_run {
    use super::{PerftestCmd, PingpongCmd, Test};
    use crate::config::Config;
    use anyhow::Result;

    /// `ferroce pingpong` (or `ud-pingpong`, as `opts` say) on the
    /// config's port `a.at.port`; Ok(false) (exit 1) when a message
    /// arrived with wrong bytes.
    pub fn pingpong(
        cfg: &Config,
        a: &PingpongCmd,
        opts: &crate::tools::pingpong::PingpongOpts,
    ) -> Result<bool> {
        use crate::tools::pingpong::{self, PingpongOpts, PingpongReport, Role};
        use crate::tools::port::{describe_limit, on_port, OnContext};
        struct Work<'a> {
            opts: &'a PingpongOpts,
            role: Role,
        }
        impl OnContext for Work<'_> {
            type Out = PingpongReport;
            fn run<B: crate::backend::Backend>(
                self,
                ctx: &mut crate::verbs::Context<B>,
            ) -> Result<PingpongReport> {
                pingpong::run(ctx, &self.role, self.opts, &mut std::io::stdout())
            }
        }
        let role = match a.server {
            Some(ip) => Role::Client(ip),
            None => Role::Server,
        };
        let work = Work { opts, role };
        let run = on_port(cfg, &a.at.port, a.at.pcap.as_deref(), work)?;
        let r = run.out;
        if let (Some(n), Some(path)) = (run.frames, &a.at.pcap) {
            println!("  pcap: {n} frames written to {}", path.display());
        }
        r.print(opts, &mut std::io::stdout())?;
        if a.at.stats {
            println!("  counters: {}", r.counters);
            println!("  host: {}", run.host);
            println!("  port: {}", describe_limit(&run.limit));
        }
        if r.bad_payloads > 0 {
            println!("{} messages arrived with wrong bytes", r.bad_payloads);
        }
        Ok(r.bad_payloads == 0)
    }

    /// perftest's `test` on the config's port `a.at.port`; Ok(false) (exit
    /// 1) on an error completion or a message of the wrong length.
    pub fn perftest(cfg: &Config, test: Test, a: &PerftestCmd) -> Result<bool> {
        use crate::tools::perftest::{self, Report};
        use crate::tools::pingpong::Role;
        use crate::tools::port::{describe_limit, on_port, OnContext};
        struct Work<'a> {
            opts: perftest::Opts,
            role: Role,
            out: &'a mut dyn std::io::Write,
        }
        impl OnContext for Work<'_> {
            type Out = Report;
            fn run<B: crate::backend::Backend>(
                self,
                ctx: &mut crate::verbs::Context<B>,
            ) -> Result<Report> {
                perftest::run(ctx, &self.role, &self.opts, self.out)
            }
        }
        let opts = a.opts(test)?;
        let role = match a.server {
            Some(ip) => Role::Client(ip),
            None => Role::Server,
        };
        let mut out = std::io::stdout();
        let work = Work {
            opts,
            role,
            out: &mut out,
        };
        let run = on_port(cfg, &a.at.port, a.at.pcap.as_deref(), work)?;
        let r = run.out;
        if let (Some(n), Some(path)) = (run.frames, &a.at.pcap) {
            println!(" pcap: {n} frames written to {}", path.display());
        }
        if a.at.stats {
            println!(" counters: {}", r.counters);
            println!(" host: {}", run.host);
            println!(" port: {}", describe_limit(&run.limit));
        }
        if let Some(path) = &a.cc_trace {
            let mut csv = format!("qp,{}\n", crate::cc::TraceRecord::CSV_HEADER);
            let mut n = 0;
            for (qpn, records) in &r.cc_trace {
                for rec in records {
                    csv += &format!("{qpn},{rec}\n");
                    n += 1;
                }
            }
            std::fs::write(path, csv)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            println!(
                " cc trace: {n} rate decisions written to {}",
                path.display()
            );
        }
        if r.bad_payloads > 0 {
            println!(" {} messages arrived with the wrong length", r.bad_payloads);
        }
        Ok(r.bad_payloads == 0 && r.errors == 0)
    }
}
