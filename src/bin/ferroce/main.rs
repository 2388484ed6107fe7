//! The `ferroce` command line.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use ferroce::config::{self, Config};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferroce",
    version,
    about = "Kernel-bypass userspace RoCE v2 engine"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
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
struct ToolPort {
    /// The config file: EAL, mempool and ports (see configs/).
    #[arg(long)]
    config: PathBuf,
    /// The [[port]] to use (its ip is our GID).
    #[arg(long)]
    port: String,
    /// TCP port of the exchange.
    #[arg(short = 'p', long = "tcp-port", default_value_t = 18515)]
    tcp_port: u16,
    /// Print the QPs' counters at the end.
    #[arg(long)]
    stats: bool,
    /// Record every frame sent and received on the port (classic pcap,
    /// nanosecond timestamps); `ferroce decode` or Wireshark reads it.
    #[arg(long)]
    pcap: Option<PathBuf>,
}

impl ToolPort {
    /// The config, checked to have the port.
    fn config(&self) -> Result<Config> {
        let cfg = Config::load(&self.config)?;
        if cfg.port(&self.port).is_none() {
            bail!("the config has no port named {:?}", self.port);
        }
        Ok(cfg)
    }
}

/// perftest's options (same letters), plus the port and what to record.
#[derive(clap::Args, Clone)]
struct PerftestArgs {
    #[command(flatten)]
    at: ToolPort,
    /// Bytes per message (default 65536 for bandwidth, 2 for latency).
    #[arg(short = 's', long)]
    size: Option<u64>,
    /// Messages per QP (default 5000 for write-bw, else 1000).
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Run this many seconds instead of a count (bandwidth tests).
    #[arg(short = 'D', long)]
    duration: Option<u32>,
    /// Path MTU we offer: 256 .. 4096 (default: the port's).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// GID index.
    #[arg(short = 'x', long = "gid-index", default_value_t = 0)]
    gid_index: u8,
    /// QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// Work requests outstanding per QP.
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Receives posted per QP (SEND tests).
    #[arg(short = 'r', long = "rx-depth")]
    rx_depth: Option<u32>,
    /// One completion per this many work requests.
    #[arg(short = 'Q', long = "cq-mod")]
    cq_mod: Option<u32>,
    /// The atomic of atomic-bw.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic: ferroce::tools::perftest::AtomicKind,
    /// Report Gbit/s instead of MiB/s.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,
    /// Give up after this many milliseconds without progress.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// The server's address (TCP); without it we are the server.
    server: Option<std::net::IpAddr>,
}

impl PerftestArgs {
    fn opts(&self, test: ferroce::tools::perftest::Test) -> Result<ferroce::tools::perftest::Opts> {
        let mtu = self
            .mtu
            .map(|m| {
                ferroce::transport::Mtu::from_bytes(m)
                    .with_context(|| format!("-m {m}: not 256, 512, 1024, 2048 or 4096"))
            })
            .transpose()?;
        Ok(ferroce::tools::perftest::Opts {
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
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            device: format!("ferroce:{}", self.at.port),
        })
    }
}

impl Cmd {
    /// The perftest tool a command runs, and its arguments.
    fn perftest(&self) -> Option<(ferroce::tools::perftest::Test, &PerftestArgs)> {
        use ferroce::tools::perftest::Test;
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
struct PingpongArgs {
    #[command(flatten)]
    at: ToolPort,
    /// Bytes per message.
    #[arg(short = 's', long, default_value_t = 4096)]
    size: u32,
    /// Messages each way.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
    /// Receives posted.
    #[arg(short = 'r', long, default_value_t = 500)]
    rx_depth: u32,
    /// GID index.
    #[arg(short = 'g', long)]
    gid_idx: Option<u8>,
    /// Give up after this many milliseconds (the exchange and the run).
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    /// The server's address (TCP); without it we are the server.
    server: Option<std::net::IpAddr>,
}

#[derive(clap::Args)]
struct SimArgs {
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
    incast: Option<usize>,
    /// Incast: how long the senders post WRITEs, in virtual time (e.g.
    /// 20ms; default 20ms).
    #[arg(long, requires = "incast")]
    duration: Option<String>,
    /// Incast: the senders' rate control: dcqcn-cx, dcqcn-paper or none
    /// (default dcqcn-cx). The CNP interval follows: 50us for dcqcn-paper,
    /// 4us otherwise.
    #[arg(long, requires = "incast")]
    cc: Option<String>,
    /// Incast: ECN marking starts above this many bytes queued (K and M
    /// suffixes, binary; default 50 KB x rate / 100G).
    #[arg(long, requires = "incast")]
    kmin: Option<String>,
    /// Incast: every ECN-capable frame is marked above this many bytes
    /// queued (default 1.6 MB x rate / 100G).
    #[arg(long, requires = "incast")]
    kmax: Option<String>,
    /// Incast: the marking probability at Kmax (default 1).
    #[arg(long, requires = "incast")]
    pmax: Option<f64>,
    /// Incast: the switch ports' drop-tail buffer in bytes (K and M
    /// suffixes; default 2 x Kmax).
    #[arg(long, requires = "incast")]
    buffer: Option<String>,
    /// Incast: write queue.csv, flows.csv and cc_trace.csv into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR", requires = "incast")]
    csv: Option<PathBuf>,
    /// Operations to mix, comma-separated: send, write, read, atomic (or all).
    #[arg(long, default_value = "send,write,read,atomic")]
    ops: String,
    /// Messages per seed (spread over the QP pairs).
    #[arg(long, default_value_t = 2000)]
    msgs: u64,
    /// Message sizes in bytes, MIN-MAX (uniform) or one size; K and M
    /// suffixes [default: 1-8192; with --incast one size, 64K].
    #[arg(long)]
    size: Option<String>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: 1024; 4096 with
    /// --incast].
    #[arg(long)]
    mtu: Option<u32>,
    /// Probability that a frame is lost (each direction).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Probability that a frame is delayed by up to --reorder-delay.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Probability that a frame arrives twice.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Probability that one bit of a frame is flipped (it then fails its
    /// ICRC or IP checksum and is dropped by the receiver).
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// The seed of the faults and the data.
    #[arg(long, default_value_t = 1, conflicts_with = "seeds")]
    seed: u64,
    /// Runs every seed of A-B (inclusive), one line each, then a total line.
    #[arg(long)]
    seeds: Option<String>,
    /// Link rate (bits/s): 100G, 25G, 400M, ...; inf for no serialisation.
    #[arg(long, default_value = "100G")]
    rate: String,
    /// One-way propagation delay: 1us, 500ns, 2ms, ...
    #[arg(long, default_value = "1us")]
    delay: String,
    /// The largest extra delay of a reordered frame.
    #[arg(long, default_value = "10us")]
    reorder_delay: String,
    /// Drop-tail limit of each egress queue in bytes (default: unbounded).
    #[arg(long)]
    queue_bytes: Option<usize>,
    /// QP pairs between the two hosts.
    #[arg(long, default_value_t = 1)]
    qps: u32,
    /// Both hosts post work requests on every QP pair (each QP is requester
    /// and responder at once); otherwise host A posts and host B answers.
    #[arg(long)]
    bidir: bool,
    /// Work requests outstanding per QP at most [default: 64; with
    /// --incast, enough to overflow the buffer without rate control].
    #[arg(long)]
    window: Option<u32>,
    /// Receive buffers the responder keeps posted per QP (default: window +
    /// 8, so a SEND never waits; fewer exercise RNR NAKs).
    #[arg(long)]
    recvs: Option<u32>,
    /// How long after its completion the responder posts a receive buffer
    /// again (a slow consumer; with a small --recvs, RNR NAKs).
    #[arg(long, default_value = "0ns")]
    recv_delay: String,
    /// Local ACK timeout exponent (4.096 us x 2^N); default: 10 (4.2 ms),
    /// more on a link too slow for it.
    #[arg(long)]
    timeout: Option<u8>,
    /// Transport retries before an error completion (0-7).
    #[arg(long, default_value_t = 7)]
    retry_cnt: u8,
    /// Virtual time one seed may take at most.
    #[arg(long, default_value = "120s")]
    time_limit: String,
    /// One JSON object per seed (and a last one with the totals).
    #[arg(long)]
    json: bool,
    /// Write host A's frames (sent and received) to this pcap file (one
    /// seed only).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Whose frames --pcap records: a (the requester) or b (the responder).
    #[arg(long, value_enum, default_value_t = PcapHost::A, requires = "pcap")]
    pcap_host: PcapHost,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum PcapHost {
    A,
    B,
}

#[derive(Subcommand)]
enum BenchCmd {
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
struct E2eArgs {
    /// DPDK EAL and ports: ports "a" and "b" on a ring link (default: the
    /// built-in configs/demo.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Measured rounds (after one warm-up round at a tenth of the counts).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// 64 B WRITEs per rate run (and frames per echo run).
    #[arg(long, default_value_t = 100_000)]
    msgs: u64,
    /// 64 KiB WRITEs per goodput run (and messages of the memcpy + CRC run).
    #[arg(long, default_value_t = 2_000)]
    big_msgs: u64,
    /// Round trips per latency run.
    #[arg(long, default_value_t = 5_000)]
    lat_iters: u64,
    /// Time limit of each run, in seconds (a run ends at its count or here).
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Send work requests outstanding (and echo frames in flight).
    #[arg(long, default_value_t = 256)]
    sq_depth: u32,
    /// One WRITE in this many is signaled (perftest's --cq-mod).
    #[arg(long, default_value_t = 32)]
    cq_mod: u32,
    /// Request PSNs in flight at most (the transport's max_inflight).
    #[arg(long, default_value_t = 256)]
    inflight: u32,
    /// 1: one thread polls both ends; 2: a thread per end.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    threads: u8,
    /// Kernel socket buffers asked for the UDP backend, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    socket_buf: usize,
    /// Print the report as one JSON object (every round's figures).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Role {
    /// Send probes and check the answers.
    Send,
    /// Check probes and answer each.
    Answer,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp(None)
        .format_target(false)
        .init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Decode { files, json } => decode(&files, json),
        Cmd::Sim(args) => sim(&args),
        Cmd::Lab {
            file,
            out,
            seed,
            quiet,
            no_plots,
        } => lab(&file, out, seed, quiet, !no_plots),
        Cmd::Bench {
            what: BenchCmd::Wire { rounds, iters },
        } => bench_wire(rounds, iters),
        cmd => run(cmd),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ferroce: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load(path: &Option<PathBuf>) -> Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p)?,
        None => Config::parse(config::DEMO, "built-in demo config")?,
    })
}

/// Without DPDK the arguments and configs are still checked, then refused.
#[cfg(not(feature = "dpdk"))]
fn run(cmd: Cmd) -> Result<bool> {
    match cmd {
        Cmd::Demo { config, .. }
        | Cmd::Info { config }
        | Cmd::Bench {
            what: BenchCmd::Io { config, .. },
        }
        | Cmd::Bench {
            what: BenchCmd::E2e(E2eArgs { config, .. }),
        } => {
            load(&config)?;
        }
        Cmd::Linktest {
            config,
            port,
            peer_mac,
            ..
        } => {
            let cfg = Config::load(&config)?;
            if cfg.port(&port).is_none() {
                bail!("the config has no port named {port:?}");
            }
            peer_mac.map(|m| parse_mac(&m)).transpose()?;
        }
        Cmd::Pingpong(a) => {
            a.at.config()?;
        }
        Cmd::WriteBw(_)
        | Cmd::ReadBw(_)
        | Cmd::SendBw(_)
        | Cmd::AtomicBw(_)
        | Cmd::WriteLat(_)
        | Cmd::ReadLat(_)
        | Cmd::SendLat(_) => {
            let (t, a) = cmd.perftest().expect("a perftest command");
            ferroce::tools::perftest::Params::from_opts(&a.opts(t)?)?;
            a.at.config()?;
        }
        Cmd::Decode { .. }
        | Cmd::Sim(_)
        | Cmd::Lab { .. }
        | Cmd::Bench {
            what: BenchCmd::Wire { .. },
        } => unreachable!("handled in main"),
    }
    bail!("this ferroce was built without the `dpdk` feature; rebuild with default features")
}

#[cfg(feature = "dpdk")]
fn run(cmd: Cmd) -> Result<bool> {
    match cmd {
        Cmd::Demo {
            config,
            count,
            payload,
            peer,
        } => {
            let mut cfg = load(&config)?;
            if cfg.ports.len() == 1 {
                return cmd::demo_one_end(&cfg, peer);
            }
            if peer.is_some() {
                bail!("--peer is for a config with one port (one end of the demo per process)");
            }
            if let Some(c) = count {
                cfg.linktest.count = c;
            }
            if let Some(p) = payload {
                cfg.linktest.payload = p;
            }
            cmd::demo(&cfg)
        }
        Cmd::Linktest {
            config,
            port,
            role,
            count,
            payload,
            window,
            timeout_ms,
            peer_ip,
            peer_mac,
        } => {
            let mut cfg = Config::load(&config)?;
            let lt = &mut cfg.linktest;
            lt.count = count.unwrap_or(lt.count);
            lt.payload = payload.unwrap_or(lt.payload);
            lt.window = window.unwrap_or(lt.window);
            lt.timeout_ms = timeout_ms.unwrap_or(lt.timeout_ms);
            let peer_mac = peer_mac.map(|m| parse_mac(&m)).transpose()?;
            cmd::linktest(&cfg, &port, role == Role::Send, peer_ip, peer_mac)
        }
        Cmd::Bench {
            what:
                BenchCmd::Io {
                    config,
                    packets,
                    frame_len,
                    rounds,
                },
        } => cmd::bench_io(&load(&config)?, packets, frame_len, rounds),
        Cmd::Bench {
            what: BenchCmd::E2e(a),
        } => bench_e2e(&a),
        Cmd::Info { config } => cmd::info(&load(&config)?),
        Cmd::Pingpong(a) => cmd::pingpong(a),
        Cmd::WriteBw(_)
        | Cmd::ReadBw(_)
        | Cmd::SendBw(_)
        | Cmd::AtomicBw(_)
        | Cmd::WriteLat(_)
        | Cmd::ReadLat(_)
        | Cmd::SendLat(_) => {
            let (t, a) = cmd.perftest().expect("a perftest command");
            cmd::perftest(t, a)
        }
        Cmd::Decode { .. }
        | Cmd::Sim(_)
        | Cmd::Lab { .. }
        | Cmd::Bench {
            what: BenchCmd::Wire { .. },
        } => unreachable!("handled in main"),
    }
}

/// `ferroce bench e2e`: the table (or JSON) of `tools::bench::e2e::run`.
#[cfg(feature = "dpdk")]
fn bench_e2e(a: &E2eArgs) -> Result<bool> {
    use ferroce::tools::bench::e2e::{self, E2eOpts, QpParams, Threads};
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
            mtu: ferroce::transport::Mtu::Mtu4096,
        },
        threads: if a.threads == 2 {
            Threads::Two
        } else {
            Threads::One
        },
        socket_buf: a.socket_buf,
    };
    let r = e2e::run(&load(&a.config)?, &opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(true)
}

/// `ferroce bench wire`: per payload size, each loop runs `iters` frames per
/// round, the loops alternate within a round, and the figures are medians
/// over rounds (ratios are taken within a round, then the median).
fn bench_wire(rounds: usize, iters: u32) -> Result<bool> {
    use ferroce::wire::opcode::Op;
    use ferroce::wire::{icrc, BthRepr, Ecn, Frame, FrameRepr, IpRepr, MacAddr, Opcode, Psn};
    use std::hint::black_box;
    use std::time::Instant;
    if rounds == 0 || iters == 0 {
        bail!("--rounds and --iters must be at least 1");
    }
    let mut bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x12, Psn::new(1));
    bth.ack_req = true;
    let repr = FrameRepr::roce(
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        IpRepr::v4("198.18.0.1".parse()?, "198.18.0.2".parse()?, 26, Ecn::Ect0),
        0xC000,
        bth,
    );
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        t.elapsed().as_nanos() as f64 / iters as f64
    };
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!(
        "ferroce bench wire: RC SEND_ONLY over IPv4, {rounds} rounds x {iters} frames, medians (ns per frame)"
    );
    println!(
        "{:>8} {:>10} {:>8} {:>11} {:>8} {:>8} {:>18}",
        "payload", "crc32fast", "parse", "parse+icrc", "icrc", "emit", "parse+icrc / crc"
    );
    for len in [64usize, 4096] {
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut frame = vec![0u8; repr.frame_len(len)];
        let n = repr.emit(&payload, &mut frame)?;
        let ip = &frame[14..n - 4];
        let mut out = vec![0u8; n];
        let mut v: [Vec<f64>; 6] = Default::default();
        for _ in 0..rounds {
            let crc = time(&mut || {
                black_box(crc32fast::hash(black_box(ip)));
            });
            let parse = time(&mut || {
                black_box(Frame::parse(black_box(&frame)).is_ok());
            });
            let both = time(&mut || {
                black_box(Frame::parse(black_box(&frame)).map(|f| f.icrc_ok()) == Ok(true));
            });
            let ic = time(&mut || {
                black_box(icrc::compute(black_box(ip)).is_ok());
            });
            let emit = time(&mut || {
                black_box(repr.emit(black_box(&payload), black_box(&mut out)).is_ok());
            });
            for (k, x) in [crc, parse, both, ic, emit, both / crc]
                .into_iter()
                .enumerate()
            {
                v[k].push(x);
            }
        }
        let m: Vec<f64> = v.iter_mut().map(median).collect();
        println!(
            "{:>8} {:>10.1} {:>8.1} {:>11.1} {:>8.1} {:>8.1} {:>18.2}",
            len, m[0], m[1], m[2], m[3], m[4], m[5]
        );
    }
    Ok(true)
}

/// `ferroce decode`: every frame of every file, then the totals. Ok(false)
/// (exit 1) when a RoCE frame is malformed or has a bad ICRC.
fn decode(files: &[PathBuf], json: bool) -> Result<bool> {
    use std::io::Write;
    let mut d = ferroce::tools::decode::Decoder::new();
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for path in files {
        let mut r = ferroce::pcap::open(path).with_context(|| format!("{}", path.display()))?;
        let lt = r.linktype();
        // (A pcapng names a link type per interface; its frames are judged
        // one by one, and those of other link types listed as skipped.)
        if !r.is_pcapng() && !ferroce::tools::decode::linktype::supported(lt) {
            bail!(
                "{}: link type {lt} is not one decode reads (Ethernet, Linux cooked v1/v2, raw IP)",
                path.display()
            );
        }
        d.next_file();
        if !json && files.len() > 1 {
            writeln!(out, "# {}", path.display())?;
        }
        while let Some(rec) = r
            .next_record()
            .with_context(|| format!("reading {}", path.display()))?
        {
            let line = d.frame_of(rec.linktype, rec.ts_ns, rec.orig_len as usize, rec.data);
            if json {
                let mut v = serde_json::to_value(&line)?;
                v["file"] = path.display().to_string().into();
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", line.text())?;
            }
        }
    }
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "kind": "totals", "totals": d.totals })
        )?;
    } else {
        writeln!(out, "{}", d.totals.line())?;
    }
    out.flush()?;
    Ok(d.totals.clean())
}

/// `ferroce sim`: one summary line (or JSON object) per seed, a total line
/// when there are several; Ok(false) (exit 1) unless every seed verified.
/// `ferroce lab`: runs an experiment file and prints its summary.
fn lab(
    file: &std::path::Path,
    out: PathBuf,
    seed: Option<u64>,
    quiet: bool,
    plots: bool,
) -> Result<bool> {
    use ferroce::sim::lab::experiment::{run_file, LabOptions};
    let opts = LabOptions {
        out,
        seed,
        quiet,
        plots,
    };
    let report = run_file(file, &opts)?;
    println!("{}", report.name);
    print!("{}", report.table);
    for w in &report.plot_warnings {
        eprintln!("ferroce: warning: plot not drawn: {w}");
    }
    for s in &report.runs {
        for d in &s.deadlocks {
            println!("run {}: {d}", s.name);
        }
        match &s.stopped {
            Some(why) if !s.deadlocks.contains(why) => println!("run {}: {why}", s.name),
            _ => {}
        }
    }
    println!("results in {}", opts.out.display());
    Ok(true)
}

fn sim(a: &SimArgs) -> Result<bool> {
    use ferroce::backend::fabric::LinkConfig;
    use ferroce::sim::soak::{self, SimConfig, SimRun, Totals};
    use std::io::Write;
    if let Some(n) = a.incast {
        return sim_incast(a, n);
    }
    let (size_min, size_max) = soak::parse_size(a.size.as_deref().unwrap_or("1-8192"))?;
    let link = LinkConfig {
        rate_bps: soak::parse_rate(&a.rate)?,
        delay: soak::parse_duration(&a.delay)?,
        loss: a.loss,
        reorder: a.reorder,
        reorder_delay: soak::parse_duration(&a.reorder_delay)?,
        dup: a.dup,
        corrupt: a.corrupt,
        queue_bytes: a.queue_bytes,
        ..LinkConfig::default()
    };
    let run = SimRun::new(SimConfig {
        ops: soak::parse_ops(&a.ops)?,
        msgs: a.msgs,
        size_min,
        size_max,
        mtu: a.mtu.unwrap_or(1024),
        link,
        qps: a.qps,
        bidir: a.bidir,
        window: a.window.unwrap_or(64),
        recvs: a.recvs,
        recv_delay: soak::parse_duration(&a.recv_delay)?,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        time_limit: soak::parse_duration(&a.time_limit)?,
    })?;
    if let Some(t) = a.timeout {
        let need = soak::needed_timeout(run.config());
        let have = ferroce::transport::ack_timeout(t).unwrap_or_default();
        if have < need {
            eprintln!(
                "ferroce: warning: --timeout {t} ({have}) is shorter than the {need} this link may \
                 take between two acknowledgements: expect retries of packets that are not lost \
                 (the default would be {})",
                soak::auto_timeout(run.config())
            );
        }
    }
    let (first, last) = match &a.seeds {
        Some(s) => soak::parse_seeds(s)?,
        None => (a.seed, a.seed),
    };
    if a.pcap.is_some() && first != last {
        bail!("--pcap captures one seed; give --seed (or a one-seed --seeds)");
    }
    let side = match a.pcap_host {
        PcapHost::A => soak::Side::A,
        PcapHost::B => soak::Side::B,
    };
    let mut capture = match &a.pcap {
        Some(p) => {
            let f = std::fs::File::create(p).with_context(|| format!("{}", p.display()))?;
            let w: Box<dyn Write> = Box::new(std::io::BufWriter::new(f));
            let w = ferroce::pcap::Writer::new(
                w,
                ferroce::pcap::Precision::Nano,
                ferroce::pcap::LINKTYPE_ETHERNET,
                ferroce::pcap::DEFAULT_SNAPLEN,
            )
            .with_context(|| format!("{}", p.display()))?;
            Some((side, w))
        }
        None => None,
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut totals = Totals::default();
    for seed in first..=last {
        let r = run.run(seed, capture.take());
        if a.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({ "kind": "seed", "report": r })
            )?;
        } else {
            writeln!(out, "{}", r.line())?;
        }
        out.flush()?;
        for p in &r.problems {
            eprintln!("seed {seed}: {p}");
        }
        if let Some(h) = &r.hang {
            eprintln!("seed {seed}: {h}");
        }
        totals.add(&r);
    }
    if first != last {
        if a.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({ "kind": "totals", "totals": totals })
            )?;
        } else {
            writeln!(out, "{}", totals.line())?;
        }
    }
    Ok(totals.ok())
}

/// A byte count for an incast flag: one size with an optional K or M
/// suffix (binary), as `--size` takes it.
fn parse_bytes(flag: &str, s: &str) -> Result<usize> {
    match ferroce::sim::soak::parse_size(s) {
        Ok((a, b)) if a == b => Ok(a as usize),
        _ => bail!("{flag} {s:?} is not a byte count (e.g. 400000, 400K, 2M)"),
    }
}

/// `ferroce sim --incast N`: one incast run, its table (or one JSON
/// object); Ok(false) (exit 1) when a completion failed or the WRITEs did
/// not drain.
fn sim_incast(a: &SimArgs, n: usize) -> Result<bool> {
    use ferroce::sim::incast::{self, IncastConfig};
    use ferroce::sim::soak;
    use std::io::Write;
    let rate = soak::parse_rate(&a.rate)?;
    let cc = incast::parse_cc(a.cc.as_deref().unwrap_or("dcqcn-cx"))?;
    let mut cfg = IncastConfig::new(n, rate, cc);
    cfg.link_delay = soak::parse_duration(&a.delay)?;
    if let Some(d) = &a.duration {
        cfg.duration = soak::parse_duration(d)?;
    }
    if let Some(k) = &a.kmin {
        cfg.red.kmin_bytes = parse_bytes("--kmin", k)?;
    }
    if let Some(k) = &a.kmax {
        cfg.red.kmax_bytes = parse_bytes("--kmax", k)?;
    }
    if let Some(p) = a.pmax {
        cfg.red.pmax = p;
    }
    if let Some(b) = &a.buffer {
        cfg.buffer_bytes = Some(parse_bytes("--buffer", b)?);
    }
    if let Some(m) = a.mtu {
        cfg.mtu = m;
    }
    if let Some(s) = &a.size {
        cfg.message_bytes =
            u32::try_from(parse_bytes("--size", s)?).context("--size is too large")?;
    }
    cfg.window = a.window;
    cfg.timeout = a.timeout;
    cfg.retry_cnt = a.retry_cnt;
    cfg.seed = a.seed;
    cfg.csv_dir = a.csv.clone();
    let r = incast::run(&cfg)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    if a.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "kind": "incast", "result": r })
        )?;
    } else {
        writeln!(out, "{r}")?;
    }
    out.flush()?;
    if let Some(s) = &r.stopped {
        eprintln!("ferroce: incast stopped early: {s}");
    }
    Ok(r.completion_errors == 0 && r.drained)
}

fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("MAC {s:?} is not six hex bytes separated by ':'");
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("MAC {s:?}"))?;
    }
    Ok(m)
}

#[cfg(feature = "dpdk")]
mod cmd {
    use super::*;
    use ferroce::backend::poll::{Counters, PollLoop};
    use ferroce::dpdk::{self, Port, TscClock};
    use ferroce::time::{Clock, Duration};
    use ferroce::tools::linktest::{LinkReport, Responder, Sender};
    use ferroce::tools::port::ports::Datapath;
    use ferroce::tools::probe::Probe;
    use std::net::Ipv4Addr;

    fn probe_between(
        a: (&Port, Ipv4Addr),
        b: ([u8; 6], Ipv4Addr),
        payload: usize,
    ) -> Result<Probe> {
        Ok(Probe {
            src_mac: a.0.mac()?.0,
            dst_mac: b.0,
            src_ip: a.1,
            dst_ip: b.1,
            src_qp: 0x11,
            dest_qp: 0x12,
            payload,
        })
    }

    fn print_counters(name: &str, c: &Counters, port: &Port) -> Result<()> {
        let s = port.stats()?;
        println!("  port {name:<3} engine: {c}");
        println!(
            "  port {name:<3} pmd:    ipackets={} opackets={} ibytes={} obytes={} imissed={} ierrors={} oerrors={} rx_nombuf={}",
            s.ipackets, s.opackets, s.ibytes, s.obytes, s.imissed, s.ierrors, s.oerrors, s.rx_nombuf
        );
        Ok(())
    }

    fn report_ok(who: &str, r: &LinkReport, want: u64) -> bool {
        let ok = r.verified == want && r.mismatched == 0;
        if !ok {
            eprintln!(
                "{who}: verified {} of {want}, {} mismatched",
                r.verified, r.mismatched
            );
            for e in &r.errors {
                eprintln!("  {e}");
            }
        }
        ok
    }

    /// The demo's tools with one end in this process and the other in
    /// another (two processes over net_memif, say).
    pub fn demo_one_end(cfg: &Config, peer: Option<std::net::IpAddr>) -> Result<bool> {
        use ferroce::tools::demo::{check_pcap, run_tools_one_end};
        use ferroce::tools::port::{on_port, OnContext};
        struct Work<'a> {
            cfg: &'a ferroce::config::ToolsConfig,
            peer: Option<std::net::IpAddr>,
        }
        impl OnContext for Work<'_> {
            type Out = bool;
            fn run<B: ferroce::backend::Backend>(
                self,
                ctx: &mut ferroce::verbs::Context<B>,
            ) -> Result<bool> {
                run_tools_one_end(ctx, self.cfg, self.peer, &mut std::io::stdout())
            }
        }
        let pc = &cfg.ports[0];
        println!(
            "ferroce demo: DPDK {}, one end on {} ({}), the {} end of the tools",
            dpdk::DPDK_VERSION,
            pc.name,
            pc.device,
            if peer.is_some() { "client" } else { "server" }
        );
        // The client records its frames.
        let pcap =
            (peer.is_some() && !cfg.tools.pcap.is_empty()).then(|| PathBuf::from(&cfg.tools.pcap));
        let work = Work {
            cfg: &cfg.tools,
            peer,
        };
        let (mut ok, frames) = on_port(cfg, &pc.name, pcap.as_deref(), work)?;
        if let (Some(path), Some(n)) = (&pcap, frames) {
            ok &= check_pcap(path, n, &mut std::io::stdout())?;
        }
        println!("demo {}", if ok { "OK" } else { "FAILED" });
        Ok(ok)
    }

    pub fn demo(cfg: &Config) -> Result<bool> {
        let dp = Datapath::open(cfg, &["a", "b"])
            .context("opening the demo ports (config needs ports \"a\" and \"b\")")?;
        let clock = TscClock::new(&dp.eal);
        let (ca, pa) = dp.port("a")?;
        let (cb, pb) = dp.port("b")?;
        if let Some(core) = ca.core {
            dpdk::lcore::pin_current_thread(core)?;
        }
        let lt = &cfg.linktest;
        let probe = probe_between((pa, ca.ip), (pb.mac()?.0, cb.ip), lt.payload)?;
        println!(
            "ferroce demo: DPDK {}, {} ({} <-> {}), {} probes of {} B (frames of {} B), window {}",
            dpdk::DPDK_VERSION,
            if dp.eal.hugepages() {
                "hugepages"
            } else {
                "no hugepages"
            },
            ca.device,
            cb.device,
            lt.count,
            lt.payload,
            probe.frame_len(),
            lt.window
        );
        let mut la = PollLoop::new(dp.queue("a")?);
        let mut lb = PollLoop::new(dp.queue("b")?);
        let mut s = Sender::new(probe, lt.count, lt.window);
        let mut r = Responder::new(probe, pb.mac()?.0, lt.count);
        let start = clock.now();
        let deadline = start + Duration::from_millis(lt.timeout_ms);
        loop {
            let now = clock.now();
            if s.done() || now >= deadline {
                break;
            }
            la.poll(now, &mut s);
            lb.poll(now, &mut r);
        }
        let secs = (clock.now() - start).as_secs_f64().max(1e-9);
        let frames = (s.report.sent + r.report.sent) as f64;
        let bytes = (la.counters().tx_bytes + lb.counters().tx_bytes) as f64;
        println!(
            "  a -> b: {} probes sent, {} verified at b; b -> a: {} answers, {} verified at a",
            s.report.sent, r.report.verified, r.report.sent, s.report.verified
        );
        println!(
            "  {:.3} s, {:.2} Mpps, {:.2} Gb/s of frames (both directions, one core)",
            secs,
            frames / secs / 1e6,
            bytes * 8.0 / secs / 1e9
        );
        print_counters("a", la.counters(), pa)?;
        print_counters("b", lb.counters(), pb)?;
        let mut ok = report_ok("b", &r.report, lt.count) & report_ok("a", &s.report, lt.count);
        let (mut qa, mut qb) = (la.into_backend(), lb.into_backend());
        if cfg.rc.msgs > 0 {
            ok &= rc_demo(
                cfg,
                (&mut qa, &mut qb),
                &clock,
                (ferroce::wire::MacAddr(pa.mac()?.0), ca.ip),
                (ferroce::wire::MacAddr(pb.mac()?.0), cb.ip),
            )?;
        }
        if cfg.tools.run {
            use ferroce::tools::demo::{run_tools, End};
            use ferroce::tools::port::max_frame;
            let end = |queue, port: &Port, ip| -> Result<End<dpdk::PortQueue>> {
                Ok(End {
                    queue,
                    mac: ferroce::wire::MacAddr(port.mac()?.0),
                    ip,
                    max_frame: max_frame(cfg, port),
                })
            };
            let (ea, eb) = (end(qa, pa, ca.ip)?, end(qb, pb, cb.ip)?);
            // Each end's thread where its port's `core` says, else free.
            match cb.core {
                Some(core) => dpdk::lcore::pin_current_thread(core)?,
                None => dpdk::lcore::unpin_current_thread(),
            }
            let a_core = ca.core;
            let mut out = std::io::stdout();
            ok &= run_tools(
                ea,
                eb,
                clock,
                &cfg.tools,
                ferroce::tools::port::memory::hugepage_region,
                move || {
                    if let Some(core) = a_core {
                        if let Err(e) = dpdk::lcore::pin_current_thread(core) {
                            log::warn!("port a's thread stays unpinned: {e}");
                        }
                    }
                },
                &mut out,
            )?;
        } else {
            drop((qa, qb));
        }
        println!(
            "  mempool: {} of {} mbufs free after the run",
            dp.pool.available(),
            dp.pool.size()
        );
        println!("demo {}", if ok { "OK" } else { "FAILED" });
        Ok(ok)
    }

    /// The RC transport over the demo's two ports: two devices, one QP
    /// pair, a verified cycle of WRITE, READ, SEND and FETCH_ADD.
    fn rc_demo(
        cfg: &Config,
        (qa, qb): (&mut dpdk::PortQueue, &mut dpdk::PortQueue),
        clock: &TscClock,
        a: (ferroce::wire::MacAddr, Ipv4Addr),
        b: (ferroce::wire::MacAddr, Ipv4Addr),
    ) -> Result<bool> {
        use ferroce::tools::demo::rc::{self, RcDemoConfig};
        let rc = &cfg.rc;
        let dc = RcDemoConfig {
            msgs: rc.msgs,
            size: rc.size,
            mtu: ferroce::transport::Mtu::from_bytes(rc.mtu).context("rc.mtu")?,
            window: rc.window,
            timeout: Duration::from_millis(rc.timeout_ms),
        };
        println!(
            "  RC transport: {} work requests (RDMA WRITE, READ, SEND of {} B, FETCH_ADD in turn), path MTU {}, window {}",
            dc.msgs, dc.size, rc.mtu, dc.window
        );
        let r = rc::run(qa, qb, clock, (a.0, a.1.into()), (b.0, b.1.into()), &dc)?;
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        println!(
            "  {} completed, {} bytes verified, {:.3} s, {:.0} work requests/s, {:.2} Gb/s of data",
            r.completed,
            r.bytes_verified,
            secs,
            r.completed as f64 / secs,
            r.bytes_verified as f64 * 8.0 / secs / 1e9
        );
        println!("  requester a: {}", r.a);
        println!("  responder b: {}", r.b);
        for f in r.failures.iter().take(10) {
            println!("  FAILED: {f}");
        }
        Ok(r.ok(&dc))
    }

    pub fn pingpong(a: super::PingpongArgs) -> Result<bool> {
        use ferroce::tools::pingpong::{self, PingpongOpts, PingpongReport, Role};
        use ferroce::tools::port::{on_port, OnContext};
        struct Work<'a> {
            opts: &'a PingpongOpts,
            role: Role,
        }
        impl OnContext for Work<'_> {
            type Out = PingpongReport;
            fn run<B: ferroce::backend::Backend>(
                self,
                ctx: &mut ferroce::verbs::Context<B>,
            ) -> Result<PingpongReport> {
                pingpong::run(ctx, &self.role, self.opts, &mut std::io::stdout())
            }
        }
        let cfg = a.at.config()?;
        let mtu = ferroce::transport::Mtu::from_bytes(a.mtu)
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
        let (r, frames) = on_port(&cfg, &a.at.port, a.at.pcap.as_deref(), work)?;
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

    pub fn perftest(test: ferroce::tools::perftest::Test, a: &super::PerftestArgs) -> Result<bool> {
        use ferroce::tools::perftest::{self, Report};
        use ferroce::tools::pingpong::Role;
        use ferroce::tools::port::{on_port, OnContext};
        struct Work<'a> {
            opts: perftest::Opts,
            role: Role,
            out: &'a mut dyn std::io::Write,
        }
        impl OnContext for Work<'_> {
            type Out = Report;
            fn run<B: ferroce::backend::Backend>(
                self,
                ctx: &mut ferroce::verbs::Context<B>,
            ) -> Result<Report> {
                perftest::run(ctx, &self.role, &self.opts, self.out)
            }
        }
        let cfg = a.at.config()?;
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
        let (r, frames) = on_port(&cfg, &a.at.port, a.at.pcap.as_deref(), work)?;
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

    pub fn linktest(
        cfg: &Config,
        port: &str,
        send: bool,
        peer_ip: Option<Ipv4Addr>,
        peer_mac: Option<[u8; 6]>,
    ) -> Result<bool> {
        let dp = Datapath::open(cfg, &[port])?;
        let clock = TscClock::new(&dp.eal);
        let (pc, p) = dp.port(port)?;
        if let Some(core) = pc.core {
            dpdk::lcore::pin_current_thread(core)?;
        }
        let lt = &cfg.linktest;
        let link = p.wait_link_up(std::time::Duration::from_millis(lt.timeout_ms.min(15_000)))?;
        if !link.up {
            bail!("port {port}: link did not come up (is the peer running?)");
        }
        let peer_ip = peer_ip.unwrap_or_else(|| {
            let o = pc.ip.octets();
            Ipv4Addr::new(
                o[0],
                o[1],
                o[2],
                if send {
                    o[3].wrapping_add(1)
                } else {
                    o[3].wrapping_sub(1)
                },
            )
        });
        let peer_mac = peer_mac.unwrap_or([0xff; 6]);
        // The probe stream always runs sender -> answerer; the answerer
        // describes it from the sender's side (MACs are learned on the wire).
        let our_mac = p.mac()?.0;
        let stream = if send {
            probe_between((p, pc.ip), (peer_mac, peer_ip), lt.payload)?
        } else {
            Probe {
                src_mac: peer_mac,
                dst_mac: our_mac,
                src_ip: peer_ip,
                dst_ip: pc.ip,
                src_qp: 0x11,
                dest_qp: 0x12,
                payload: lt.payload,
            }
        };
        let mut lp = PollLoop::new(dp.queue(port)?);
        let start = clock.now();
        let deadline = start + Duration::from_millis(lt.timeout_ms);
        let (report, ok) = if send {
            let mut s = Sender::new(stream, lt.count, lt.window);
            lp.run_until(&clock, &mut s, deadline, |s| s.done());
            let ok = report_ok("sender", &s.report, lt.count);
            (s.report, ok)
        } else {
            let mut r = Responder::new(stream, our_mac, lt.count);
            lp.run_until(&clock, &mut r, deadline, |r| r.done());
            // Let the last answers leave before the port closes. Only tx:
            // the sender may already be gone, and net_memif unmaps a
            // departed peer's rings from its control thread while rx runs.
            // Then wait for the sender to leave (a shared-memory link goes
            // down), so that it never loses our rings under its own rx.
            lp.drain_tx(&clock, clock.now() + Duration::from_millis(300));
            p.wait_link_down(std::time::Duration::from_millis(1000))?;
            let ok = report_ok("answerer", &r.report, lt.count);
            (r.report, ok)
        };
        let secs = (clock.now() - start).as_secs_f64();
        println!(
            "linktest {} on {port}: sent {} verified {} mismatched {} foreign {} in {:.3} s",
            if send { "send" } else { "answer" },
            report.sent,
            report.verified,
            report.mismatched,
            report.foreign,
            secs
        );
        print_counters(port, lp.counters(), p)?;
        drop(lp.into_backend());
        println!("linktest {}", if ok { "OK" } else { "FAILED" });
        Ok(ok)
    }

    pub fn bench_io(cfg: &Config, packets: u64, frame_len: usize, rounds: usize) -> Result<bool> {
        let dp = Datapath::open(cfg, &["a", "b"])
            .context("bench io needs ports \"a\" and \"b\" on a ring link")?;
        let (_, pa) = dp.port("a")?;
        let (_, pb) = dp.port("b")?;
        let clock = TscClock::new(&dp.eal);
        let _reg = dpdk::lcore::register_current_thread(&dp.eal)?;
        let mut qa = dp.queue("a")?;
        let mut qb = dp.queue("b")?;
        let pool = dp.pool.clone();
        let ours = |qa: &mut dpdk::PortQueue, qb: &mut dpdk::PortQueue| {
            ferroce::backend::poll::io_loop_with(qa, qb, frame_len, packets, |_, out, n| {
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
        println!("bench io: {frame_len}-byte frames, {packets} per round, {rounds} rounds, ring link a -> b");
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

    pub fn info(cfg: &Config) -> Result<bool> {
        let h = dpdk::HugepageState::read();
        println!("DPDK {} (built against)", dpdk::DPDK_VERSION);
        println!(
            "hugepages: {} free of {} KiB, hugetlbfs {}",
            h.free_pages,
            h.page_kib,
            if h.hugetlbfs_mounted {
                "mounted"
            } else {
                "not mounted"
            }
        );
        let dp = Datapath::open(cfg, &[])?;
        println!("EAL: {}", dp.eal.args().join(" "));
        for name in dp.port_names() {
            let (pc, p) = dp.port(&name)?;
            let link = p.wait_link_up(std::time::Duration::from_millis(500))?;
            println!(
                "port {name}: id {} device {} mac {} mtu {} ip {} link {} {} Mb/s",
                p.id().0,
                pc.device,
                p.mac()?,
                p.mtu()
                    .map(|m| m.to_string())
                    .unwrap_or_else(|e| format!("? ({e})")),
                pc.ip,
                if link.up { "up" } else { "down" },
                link.speed_mbps
            );
        }
        Ok(true)
    }
}
