//! The interop tools' subcommands (`ferroce pingpong`, `write-bw`,
//! `read-bw`, ...): their options as plain values, and the commands on a
//! DPDK port: open the config's port, run [`super::pingpong`] or
//! [`super::perftest`] on it, print the report, the pcap and counters.

use super::perftest::{self, AtomicKind, Test};
use anyhow::{Context, Result};
use std::net::IpAddr;
use std::path::PathBuf;

/// Where an interop tool runs and what it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAt {
    /// The config's `[[port]]` to use (its ip is our GID).
    pub port: String,
    /// TCP port of the exchange.
    pub tcp_port: u16,
    /// Print the QPs' counters at the end.
    pub stats: bool,
    /// Record every frame sent and received on the port here.
    pub pcap: Option<PathBuf>,
}

/// The options of `ferroce pingpong` (`ibv_rc_pingpong`'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingpongCmd {
    /// Where it runs and what it records.
    pub at: ToolAt,
    /// Bytes per message (`-s`, default 4096).
    pub size: u32,
    /// Messages each way (`-n`, default 1000).
    pub iters: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    pub mtu: u32,
    /// Receives posted (`-r`, default 500).
    pub rx_depth: u32,
    /// GID index (`-g`; default 0).
    pub gid_idx: Option<u8>,
    /// Give up after this many ms, the exchange and the run
    /// (`--timeout-ms`, default 30,000).
    pub timeout_ms: u64,
    /// The server's address; without it we are the server.
    pub server: Option<IpAddr>,
}

/// The options of a perftest command (perftest's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerftestCmd {
    /// Where it runs and what it records.
    pub at: ToolAt,
    /// Which test (the subcommand).
    pub test: Test,
    /// Bytes per message (`-s`; default 65536 for bandwidth, 8 for atomics,
    /// 2 for latency).
    pub size: Option<u64>,
    /// Messages per QP (`-n`; default 5000 for write-bw, else 1000).
    pub iters: Option<u64>,
    /// Run this many seconds instead of a count (`-D`, bandwidth tests).
    pub duration: Option<u32>,
    /// Path MTU in bytes we offer: 256 .. 4096.
    pub mtu: Option<u32>,
    /// GID index (`-x`, default 0).
    pub gid_index: u8,
    /// QPs, bandwidth tests (`-q`, default 1).
    pub qps: u32,
    /// Work requests outstanding per QP (`-t`).
    pub tx_depth: Option<u32>,
    /// Receives posted per QP, SEND tests (`-r`).
    pub rx_depth: Option<u32>,
    /// One completion per this many work requests (`-Q`).
    pub cq_mod: Option<u32>,
    /// The atomic of atomic-bw (`-A`, default FETCH_AND_ADD).
    pub atomic: AtomicKind,
    /// Report Gbit/s instead of MiB/s (`--report_gbits`).
    pub report_gbits: bool,
    /// Give up after this many ms without progress (`--timeout-ms`,
    /// default 60,000).
    pub timeout_ms: u64,
    /// The server's address; without it we are the server.
    pub server: Option<IpAddr>,
}

impl PerftestCmd {
    /// perftest's options; an error for an MTU that is not one.
    pub fn opts(&self) -> Result<perftest::Opts> {
        let mtu = self
            .mtu
            .map(|m| {
                crate::transport::Mtu::from_bytes(m)
                    .with_context(|| format!("-m {m}: not 256, 512, 1024, 2048 or 4096"))
            })
            .transpose()?;
        Ok(perftest::Opts {
            test: self.test,
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
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            device: format!("ferroce:{}", self.at.port),
        })
    }

    /// Checks the options as the run would (without opening a port).
    pub fn check(&self) -> Result<()> {
        perftest::Params::from_opts(&self.opts()?)?;
        Ok(())
    }
}

#[cfg(feature = "dpdk")]
pub use dpdk_run::{perftest, pingpong};

#[cfg(feature = "dpdk")]
mod dpdk_run {
    use super::{PerftestCmd, PingpongCmd};
    use crate::config::Config;
    use anyhow::{Context, Result};

    /// `ferroce pingpong` on the config's port `a.at.port`; Ok(false)
    /// (exit 1) when a message arrived with wrong bytes.
    pub fn pingpong(cfg: &Config, a: &PingpongCmd) -> Result<bool> {
        use crate::tools::pingpong::{self, PingpongOpts, PingpongReport, Role};
        use crate::tools::port::{on_port, OnContext};
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
        let mtu = crate::transport::Mtu::from_bytes(a.mtu)
            .with_context(|| format!("-m {}: not 256, 512, 1024, 2048 or 4096", a.mtu))?;
        let opts = PingpongOpts {
            size: a.size,
            iters: a.iters,
            mtu,
            rx_depth: a.rx_depth,
            tcp_port: a.at.tcp_port,
            gid_index: a.gid_idx.unwrap_or(0),
            timeout: std::time::Duration::from_millis(a.timeout_ms),
        };
        let role = match a.server {
            Some(ip) => Role::Client(ip),
            None => Role::Server,
        };
        let work = Work { opts: &opts, role };
        let (r, frames) = on_port(cfg, &a.at.port, a.at.pcap.as_deref(), work)?;
        if let (Some(n), Some(path)) = (frames, &a.at.pcap) {
            println!("  pcap: {n} frames written to {}", path.display());
        }
        r.print(&opts, &mut std::io::stdout())?;
        if a.at.stats {
            println!("  counters: {}", r.counters);
        }
        if r.bad_payloads > 0 {
            println!("{} messages arrived with wrong bytes", r.bad_payloads);
        }
        Ok(r.bad_payloads == 0)
    }

    /// A perftest command on the config's port `a.at.port`; Ok(false)
    /// (exit 1) on an error completion or a message of the wrong length.
    pub fn perftest(cfg: &Config, a: &PerftestCmd) -> Result<bool> {
        use crate::tools::perftest::{self, Report};
        use crate::tools::pingpong::Role;
        use crate::tools::port::{on_port, OnContext};
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
        let opts = a.opts()?;
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
        let (r, frames) = on_port(cfg, &a.at.port, a.at.pcap.as_deref(), work)?;
        if let (Some(n), Some(path)) = (frames, &a.at.pcap) {
            println!(" pcap: {n} frames written to {}", path.display());
        }
        if a.at.stats {
            println!(" counters: {}", r.counters);
        }
        if r.bad_payloads > 0 {
            println!(" {} messages arrived with the wrong length", r.bad_payloads);
        }
        Ok(r.bad_payloads == 0 && r.errors == 0)
    }
}
