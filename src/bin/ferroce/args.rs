//! The `ferroce` command line: its subcommands (clap); their options are
//! the library's option structs, which carry their flags.

use clap::{Parser, Subcommand};
use ferroce::sim::cli::SimOpts;
use ferroce::sim::lab::experiment::LabOptions;
use ferroce::tools::bench::wire::WireOpts;
use ferroce::tools::bench::{E2eCmd, IoOpts};
use ferroce::tools::decode::DecodeOpts;
use ferroce::tools::demo::DemoOpts;
use ferroce::tools::explain::ExplainOpts;
use ferroce::tools::interop::{PerftestCmd, PingpongCmd, RpingCmd, UdPingpongCmd};
use ferroce::tools::linktest::LinktestOpts;
use ferroce::tools::perftest::Test;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "ferroce",
    version,
    about = "Kernel-bypass userspace RoCE v2 engine"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// The main job: two ports on DPDK virtual devices exchange RoCE frames,
    /// verified byte for byte both ways.
    Demo {
        /// Config file (default: the built-in configs/demo.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        opts: DemoOpts,
    },
    /// One end of a link test between two processes or hosts.
    Linktest {
        #[arg(long)]
        config: PathBuf,
        #[command(flatten)]
        opts: LinktestOpts,
    },
    /// rdma-core's ibv_rc_pingpong on a DPDK port: the same wire and TCP
    /// exchange, so either end may be ibv_rc_pingpong (on rxe or a NIC).
    /// Without SERVER it waits for a client.
    Pingpong(PingpongCmd),
    /// rdma-core's ibv_ud_pingpong on a DPDK port: a UD QP, the same wire
    /// and TCP exchange, so either end may be ibv_ud_pingpong.
    UdPingpong(UdPingpongCmd),
    /// librdmacm's rping on a DPDK port: connects by RDMA-CM, then the
    /// same SENDs, RDMA READs and WRITEs, so either end may be rping.
    Rping(RpingCmd),
    /// perftest's ib_write_bw: RDMA WRITE bandwidth. Either end may be
    /// perftest (its default TCP exchange, not RDMA-CM). Without SERVER it
    /// waits for a client.
    #[command(name = "write-bw")]
    WriteBw(PerftestCmd),
    /// perftest's ib_read_bw: RDMA READ bandwidth.
    #[command(name = "read-bw")]
    ReadBw(PerftestCmd),
    /// perftest's ib_send_bw: SEND bandwidth.
    #[command(name = "send-bw")]
    SendBw(PerftestCmd),
    /// perftest's ib_atomic_bw: fetch-and-add (or compare-and-swap) rate.
    #[command(name = "atomic-bw")]
    AtomicBw(PerftestCmd),
    /// perftest's ib_write_lat: RDMA WRITE ping-pong latency.
    #[command(name = "write-lat")]
    WriteLat(PerftestCmd),
    /// perftest's ib_read_lat: RDMA READ latency.
    #[command(name = "read-lat")]
    ReadLat(PerftestCmd),
    /// perftest's ib_send_lat: SEND ping-pong latency.
    #[command(name = "send-lat")]
    SendLat(PerftestCmd),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
    /// The EAL, hugepages and ports of a config: MAC, MTU, link, counters.
    Info {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// One line per frame of pcap files: RoCE v2 headers and ICRC check.
    /// Exits 1 if any RoCE frame has a bad ICRC or is malformed.
    Decode(DecodeOpts),
    /// The story of each RC connection in a capture: its ends and QPNs,
    /// messages and PSNs each way, PSN gaps, NAKs, RNR NAKs, resends and
    /// what caused them (a NAK, a timeout and its implied exponent, or
    /// spurious), CNPs and ECN marks, and a verdict. --plot FILE.png draws
    /// the PSNs over time, one panel per connection. Exits 1 when a
    /// connection did not end clean or recovered.
    Explain(ExplainOpts),
    /// Two hosts on a simulated link run a mix of SEND, WRITE, READ and
    /// atomics over RC and verify every byte and atomic result where it
    /// lands. One summary line per seed (and a total line for --seeds).
    /// Exits 1 on a mismatch, an error completion or a hang. With
    /// --incast N: N senders into one receiver through a switch that marks
    /// ECN, measured (goodput, fairness, utilisation, queue, CNPs, drops);
    /// exits 1 on an error completion or WRITEs left undone.
    Sim(Box<SimOpts>),
    /// Congestion-control experiments on a simulated fabric with the real
    /// transport: every run of an experiment file (its variants times its
    /// sweep), each into a folder of CSV time series and PNG plots, then a
    /// summary table (printed, and saved as text, CSV and JSON). A run
    /// that stops early (a PFC deadlock, the drain limit) is a result: it
    /// is reported, and the command still exits 0. Runs go on --jobs
    /// threads; across machines, --list-runs names them, --only RUN runs
    /// one into its folder, and --merge PART_DIR... writes the results
    /// folder from such parts (see docs/lab.md).
    Lab {
        /// The experiment (see configs/lab/).
        file: PathBuf,
        #[command(flatten)]
        opts: LabOptions,
    },
}

impl Cmd {
    /// The perftest tool a command runs, and its arguments.
    pub fn perftest(&self) -> Option<(Test, &PerftestCmd)> {
        Some(match self {
            Cmd::WriteBw(a) => (Test::WriteBw, a),
            Cmd::ReadBw(a) => (Test::ReadBw, a),
            Cmd::SendBw(a) => (Test::SendBw, a),
            Cmd::AtomicBw(a) => (Test::AtomicBw, a),
            Cmd::WriteLat(a) => (Test::WriteLat, a),
            Cmd::ReadLat(a) => (Test::ReadLat, a),
            Cmd::SendLat(a) => (Test::SendLat, a),
            _ => return None,
        })
    }
}

#[derive(Subcommand)]
pub enum BenchCmd {
    /// rx+tx bursts through our Port layer vs a bare loop over the C shim,
    /// on an in-process ring link, in the same run.
    Io {
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        opts: IoOpts,
    },
    /// Frame parse, ICRC and emit next to crc32fast over the same bytes,
    /// interleaved round by round so that the ratios hold on a noisy host.
    Wire(WireOpts),
    /// The RC transport end to end between two engines on a DPDK ring pair
    /// (64 B WRITE rate, 64 KiB WRITE goodput, 64 B SEND round trip) next to
    /// the same transport over kernel UDP sockets, a bare DPDK echo and one
    /// core's memcpy + CRC-32, rounds alternated; ratios against targets.
    E2e {
        /// DPDK EAL and ports: ports "a" and "b" on a ring link (default: the
        /// built-in configs/demo.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        cmd: E2eCmd,
    },
}
