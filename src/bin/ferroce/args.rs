//! The `ferroce` command line: its arguments (clap), and their conversion
//! into the options of the library's commands.

use anyhow::{bail, Result};
use clap::{Parser, Subcommand, ValueEnum};
use ferroce::config::Config;
use ferroce::sim::cli::{Side, SimOpts};
use ferroce::tools::interop::{PerftestCmd, ToolAt};
use ferroce::tools::perftest::{AtomicKind, Test};
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
        /// Probes to send (overrides [linktest] count).
        #[arg(long)]
        count: Option<u64>,
        /// Payload bytes per probe (overrides [linktest] payload).
        #[arg(long)]
        payload: Option<usize>,
        /// With a one-port config (e.g. net_memif): this process is the
        /// client end of the tools, the server end at this address (TCP).
        /// Without it, a one-port config's process is the server end.
        #[arg(long)]
        peer: Option<std::net::IpAddr>,
    },
    /// One end of a link test between two processes or hosts.
    Linktest {
        #[arg(long)]
        config: PathBuf,
        /// The [[port]] to use.
        #[arg(long)]
        port: String,
        #[arg(long, value_enum)]
        role: Role,
        #[arg(long)]
        count: Option<u64>,
        #[arg(long)]
        payload: Option<usize>,
        #[arg(long)]
        window: Option<u64>,
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// The peer's IPv4 address (sender; default: ours with the last byte
        /// + 1). The answerer learns the addresses from the first probe.
        #[arg(long)]
        peer_ip: Option<std::net::Ipv4Addr>,
        /// The peer's MAC (default: broadcast).
        #[arg(long)]
        peer_mac: Option<String>,
    },
    /// rdma-core's ibv_rc_pingpong on a DPDK port: the same wire and TCP
    /// exchange, so either end may be ibv_rc_pingpong (on rxe or a NIC).
    /// Without SERVER it waits for a client.
    Pingpong(PingpongArgs),
    /// perftest's ib_write_bw: RDMA WRITE bandwidth. Either end may be
    /// perftest (its default TCP exchange, not RDMA-CM). Without SERVER it
    /// waits for a client.
    #[command(name = "write-bw")]
    WriteBw(PerftestArgs),
    /// perftest's ib_read_bw: RDMA READ bandwidth.
    #[command(name = "read-bw")]
    ReadBw(PerftestArgs),
    /// perftest's ib_send_bw: SEND bandwidth.
    #[command(name = "send-bw")]
    SendBw(PerftestArgs),
    /// perftest's ib_atomic_bw: fetch-and-add (or compare-and-swap) rate.
    #[command(name = "atomic-bw")]
    AtomicBw(PerftestArgs),
    /// perftest's ib_write_lat: RDMA WRITE ping-pong latency.
    #[command(name = "write-lat")]
    WriteLat(PerftestArgs),
    /// perftest's ib_read_lat: RDMA READ latency.
    #[command(name = "read-lat")]
    ReadLat(PerftestArgs),
    /// perftest's ib_send_lat: SEND ping-pong latency.
    #[command(name = "send-lat")]
    SendLat(PerftestArgs),
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
    Decode {
        /// Classic pcap files (Ethernet).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per frame (and a last one with the totals).
        #[arg(long)]
        json: bool,
    },
    /// Two hosts on a simulated link run a mix of SEND, WRITE, READ and
    /// atomics over RC and verify every byte and atomic result where it
    /// lands. One summary line per seed (and a total line for --seeds).
    /// Exits 1 on a mismatch, an error completion or a hang. With
    /// --incast N: N senders into one receiver through a switch that marks
    /// ECN, measured (goodput, fairness, utilisation, queue, CNPs, drops);
    /// exits 1 on an error completion or WRITEs left undone.
    Sim(Box<SimArgs>),
    /// Congestion-control experiments on a simulated fabric with the real
    /// transport: every run of an experiment file (its variants times its
    /// sweep), each into a folder of CSV time series and PNG plots, then a
    /// summary table (printed, and saved as text, CSV and JSON). A run
    /// that stops early (a PFC deadlock, the drain limit) is a result: it
    /// is reported, and the command still exits 0.
    Lab {
        /// The experiment (see configs/lab/).
        file: PathBuf,
        /// The results folder (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Replaces the file's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// No PNG plots (CSV and the summary only).
        #[arg(long)]
        no_plots: bool,
    },
}

/// Where an interop tool runs and what it records.
#[derive(clap::Args, Clone)]
pub struct ToolPort {
    /// The config file: EAL, mempool and ports (see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// The [[port]] to use (its ip is our GID).
    #[arg(long)]
    pub port: String,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "tcp-port", default_value_t = 18515)]
    pub tcp_port: u16,
    /// Print the QPs' counters at the end.
    #[arg(long)]
    pub stats: bool,
    /// Record every frame sent and received on the port (classic pcap,
    /// nanosecond timestamps); `ferroce decode` or Wireshark reads it.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

impl ToolPort {
    /// The config, checked to have the port.
    pub fn config(&self) -> Result<Config> {
        let cfg = Config::load(&self.config)?;
        if cfg.port(&self.port).is_none() {
            bail!("the config has no port named {:?}", self.port);
        }
        Ok(cfg)
    }
}

/// perftest's options (same letters), plus the port and what to record.
#[derive(clap::Args, Clone)]
pub struct PerftestArgs {
    #[command(flatten)]
    pub at: ToolPort,
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
    /// Give up after this many milliseconds without progress.
    #[arg(long, default_value_t = 60_000)]
    pub timeout_ms: u64,
    /// The server's address (TCP); without it we are the server.
    pub server: Option<std::net::IpAddr>,
}

impl Cmd {
    /// The perftest tool a command runs, and its arguments.
    pub fn perftest(&self) -> Option<(Test, &PerftestArgs)> {
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

#[derive(clap::Args)]
pub struct PingpongArgs {
    #[command(flatten)]
    pub at: ToolPort,
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
    pub server: Option<std::net::IpAddr>,
}

#[derive(clap::Args)]
pub struct SimArgs {
    /// Incast mode: N senders (1-64) each write RDMA WRITEs into one
    /// receiver through one switch whose ports mark ECN (RED) and drop at
    /// the tail; prints goodput per flow, Jain's fairness, bottleneck
    /// utilisation, queue percentiles, CNPs and drops. Takes --rate,
    /// --delay, --mtu (default 4096), --size (one size, default 64K),
    /// --window (default: enough to overflow the buffer without rate
    /// control), --timeout, --retry-cnt, --seed, --json and the incast
    /// flags (--duration, --cc, --kmin, --kmax, --pmax, --buffer, --csv).
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = [
            "ops", "msgs", "loss", "reorder", "dup", "corrupt", "seeds", "reorder_delay",
            "queue_bytes", "qps", "bidir", "recvs", "recv_delay", "time_limit", "pcap",
        ]
    )]
    pub incast: Option<usize>,
    /// Incast: how long the senders post WRITEs, in virtual time (e.g.
    /// 20ms; default 20ms).
    #[arg(long, requires = "incast")]
    pub duration: Option<String>,
    /// Incast: the senders' rate control: dcqcn-cx, dcqcn-paper or none
    /// (default dcqcn-cx). The CNP interval follows: 50us for dcqcn-paper,
    /// 4us otherwise.
    #[arg(long, requires = "incast")]
    pub cc: Option<String>,
    /// Incast: ECN marking starts above this many bytes queued (K and M
    /// suffixes, binary; default 50 KB x rate / 100G).
    #[arg(long, requires = "incast")]
    pub kmin: Option<String>,
    /// Incast: every ECN-capable frame is marked above this many bytes
    /// queued (default 1.6 MB x rate / 100G).
    #[arg(long, requires = "incast")]
    pub kmax: Option<String>,
    /// Incast: the marking probability at Kmax (default 1).
    #[arg(long, requires = "incast")]
    pub pmax: Option<f64>,
    /// Incast: the switch ports' drop-tail buffer in bytes (K and M
    /// suffixes; default 2 x Kmax).
    #[arg(long, requires = "incast")]
    pub buffer: Option<String>,
    /// Incast: write queue.csv, flows.csv and cc_trace.csv into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR", requires = "incast")]
    pub csv: Option<PathBuf>,
    /// Operations to mix, comma-separated: send, write, read, atomic (or all).
    #[arg(long, default_value = "send,write,read,atomic")]
    pub ops: String,
    /// Messages per seed (spread over the QP pairs).
    #[arg(long, default_value_t = 2000)]
    pub msgs: u64,
    /// Message sizes in bytes, MIN-MAX (uniform) or one size; K and M
    /// suffixes [default: 1-8192; with --incast one size, 64K].
    #[arg(long)]
    pub size: Option<String>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 1024; 4096 with
    /// --incast].
    #[arg(long)]
    pub mtu: Option<u32>,
    /// Probability that a frame is lost (each direction).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Probability that a frame is delayed by up to --reorder-delay.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Probability that a frame arrives twice.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Probability that one bit of a frame is flipped (it then fails its
    /// ICRC or IP checksum and is dropped by the receiver).
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// The seed of the faults and the data.
    #[arg(long, default_value_t = 1, conflicts_with = "seeds")]
    pub seed: u64,
    /// Runs every seed of A-B (inclusive), one line each, then a total line.
    #[arg(long)]
    pub seeds: Option<String>,
    /// Link rate (bits/s): 100G, 25G, 400M, ...; inf for no serialisation.
    #[arg(long, default_value = "100G")]
    pub rate: String,
    /// One-way propagation delay: 1us, 500ns, 2ms, ...
    #[arg(long, default_value = "1us")]
    pub delay: String,
    /// The largest extra delay of a reordered frame.
    #[arg(long, default_value = "10us")]
    pub reorder_delay: String,
    /// Drop-tail limit of each egress queue in bytes (default: unbounded).
    #[arg(long)]
    pub queue_bytes: Option<usize>,
    /// QP pairs between the two hosts.
    #[arg(long, default_value_t = 1)]
    pub qps: u32,
    /// Both hosts post work requests on every QP pair (each QP is requester
    /// and responder at once); otherwise host A posts and host B answers.
    #[arg(long)]
    pub bidir: bool,
    /// Work requests outstanding per QP at most [default: 64; with
    /// --incast, enough to overflow the buffer without rate control].
    #[arg(long)]
    pub window: Option<u32>,
    /// Receive buffers the responder keeps posted per QP (default: window +
    /// 8, so a SEND never waits; fewer exercise RNR NAKs).
    #[arg(long)]
    pub recvs: Option<u32>,
    /// How long after its completion the responder posts a receive buffer
    /// again (a slow consumer; with a small --recvs, RNR NAKs).
    #[arg(long, default_value = "0ns")]
    pub recv_delay: String,
    /// Local ACK timeout exponent (4.096 us x 2^N); default: 10 (4.2 ms),
    /// more on a link too slow for it.
    #[arg(long)]
    pub timeout: Option<u8>,
    /// Transport retries before an error completion (0-7).
    #[arg(long, default_value_t = 7)]
    pub retry_cnt: u8,
    /// Virtual time one seed may take at most.
    #[arg(long, default_value = "120s")]
    pub time_limit: String,
    /// One JSON object per seed (and a last one with the totals).
    #[arg(long)]
    pub json: bool,
    /// Write host A's frames (sent and received) to this pcap file (one
    /// seed only).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Whose frames --pcap records: a (the requester) or b (the responder).
    #[arg(long, value_enum, default_value_t = PcapHost::A, requires = "pcap")]
    pub pcap_host: PcapHost,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum PcapHost {
    A,
    B,
}

#[derive(Subcommand)]
pub enum BenchCmd {
    /// rx+tx bursts through our Port layer vs a bare loop over the C shim,
    /// on an in-process ring link, in the same run.
    Io {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Packets per measurement.
        #[arg(long, default_value_t = 2_000_000)]
        packets: u64,
        /// Frame size in bytes.
        #[arg(long, default_value_t = 64)]
        frame_len: usize,
        /// Alternating rounds of each loop.
        #[arg(long, default_value_t = 7)]
        rounds: usize,
    },
    /// Frame parse, ICRC and emit next to crc32fast over the same bytes,
    /// interleaved round by round so that the ratios hold on a noisy host.
    Wire {
        /// Alternating rounds of each loop.
        #[arg(long, default_value_t = 41)]
        rounds: usize,
        /// Frames per loop and round.
        #[arg(long, default_value_t = 20_000)]
        iters: u32,
    },
    /// The RC transport end to end between two engines on a DPDK ring pair
    /// (64 B WRITE rate, 64 KiB WRITE goodput, 64 B SEND round trip) next to
    /// the same transport over kernel UDP sockets, a bare DPDK echo and one
    /// core's memcpy + CRC-32, rounds alternated; ratios against targets.
    E2e(E2eArgs),
}

#[derive(clap::Args)]
pub struct E2eArgs {
    /// DPDK EAL and ports: ports "a" and "b" on a ring link (default: the
    /// built-in configs/demo.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
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
    /// Print the report as one JSON object (every round's figures).
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Role {
    /// Send probes and check the answers.
    Send,
    /// Check probes and answer each.
    Answer,
}

impl ToolPort {
    /// Where the tool runs, for the library.
    fn at(&self) -> ToolAt {
        ToolAt {
            port: self.port.clone(),
            tcp_port: self.tcp_port,
            stats: self.stats,
            pcap: self.pcap.clone(),
        }
    }
}

impl PerftestArgs {
    /// The options of perftest's `test`.
    pub fn cmd(&self, test: Test) -> PerftestCmd {
        PerftestCmd {
            at: self.at.at(),
            test,
            size: self.size,
            iters: self.iters,
            duration: self.duration,
            mtu: self.mtu,
            gid_index: self.gid_index,
            qps: self.qps,
            tx_depth: self.tx_depth,
            rx_depth: self.rx_depth,
            cq_mod: self.cq_mod,
            atomic: self.atomic,
            report_gbits: self.report_gbits,
            timeout_ms: self.timeout_ms,
            server: self.server,
        }
    }
}

#[cfg(feature = "dpdk")]
impl PingpongArgs {
    /// The options of `ferroce pingpong`.
    pub fn cmd(&self) -> ferroce::tools::interop::PingpongCmd {
        ferroce::tools::interop::PingpongCmd {
            at: self.at.at(),
            size: self.size,
            iters: self.iters,
            mtu: self.mtu,
            rx_depth: self.rx_depth,
            gid_idx: self.gid_idx,
            timeout_ms: self.timeout_ms,
            server: self.server,
        }
    }
}

impl SimArgs {
    /// The options of `ferroce sim`.
    pub fn opts(&self) -> SimOpts {
        SimOpts {
            incast: self.incast,
            duration: self.duration.clone(),
            cc: self.cc.clone(),
            kmin: self.kmin.clone(),
            kmax: self.kmax.clone(),
            pmax: self.pmax,
            buffer: self.buffer.clone(),
            csv: self.csv.clone(),
            ops: self.ops.clone(),
            msgs: self.msgs,
            size: self.size.clone(),
            mtu: self.mtu,
            loss: self.loss,
            reorder: self.reorder,
            dup: self.dup,
            corrupt: self.corrupt,
            seed: self.seed,
            seeds: self.seeds.clone(),
            rate: self.rate.clone(),
            delay: self.delay.clone(),
            reorder_delay: self.reorder_delay.clone(),
            queue_bytes: self.queue_bytes,
            qps: self.qps,
            bidir: self.bidir,
            window: self.window,
            recvs: self.recvs,
            recv_delay: self.recv_delay.clone(),
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            time_limit: self.time_limit.clone(),
            json: self.json,
            pcap: self.pcap.clone(),
            pcap_host: match self.pcap_host {
                PcapHost::A => Side::A,
                PcapHost::B => Side::B,
            },
        }
    }
}

#[cfg(feature = "dpdk")]
impl E2eArgs {
    /// The options of `ferroce bench e2e`.
    pub fn cmd(&self) -> ferroce::tools::bench::E2eCmd {
        ferroce::tools::bench::E2eCmd {
            rounds: self.rounds,
            msgs: self.msgs,
            big_msgs: self.big_msgs,
            lat_iters: self.lat_iters,
            secs: self.secs,
            sq_depth: self.sq_depth,
            cq_mod: self.cq_mod,
            inflight: self.inflight,
            threads: self.threads,
            socket_buf: self.socket_buf,
            json: self.json,
        }
    }
}
