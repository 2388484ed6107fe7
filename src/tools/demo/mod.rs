//! The tools phase of `ferroce demo`: two verbs contexts on the two
//! ports of one process, each driven by its own thread, run the interop
//! tools against each other (pingpong, write-bw, read-bw, send-lat,
//! atomic-bw) through the same TCP exchange as between two hosts, while
//! the second port's frames are recorded to a pcap that is then decoded
//! (every RoCE frame well formed, every ICRC good). [`rc`] is the RC
//! transport's part of the demo; `run` is the command on DPDK ports.

pub mod rc;
#[cfg(feature = "dpdk")]
pub mod run;

use crate::backend::Backend;
use crate::config::ToolsConfig;
use crate::time::Clock;
use crate::tools::decode::{Decoder, Totals};
use crate::tools::perftest::{self, Outcome, Test};
use crate::tools::pingpong::{self, PingpongOpts, Role};
use crate::transport::{Mtu, QpCounters};
use crate::verbs::{Context, ContextConfig};
use crate::wire::MacAddr;
use anyhow::{bail, Context as _, Result};
use core::net::Ipv4Addr;
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

/// The options of `ferroce demo` (those given override the config's
/// `[linktest]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct DemoOpts {
    /// Probes to send (overrides the config's `linktest.count`).
    #[arg(long, help = "Probes to send (overrides [linktest] count)")]
    pub count: Option<u64>,
    /// Payload bytes per probe (overrides the config's `linktest.payload`).
    #[arg(long, help = "Payload bytes per probe (overrides [linktest] payload)")]
    pub payload: Option<usize>,
    /// With a one-port config (e.g. net_memif): this process is the
    /// client end of the tools, the server end at this address (TCP).
    /// Without it, a one-port config's process is the server end.
    #[arg(long)]
    pub peer: Option<std::net::IpAddr>,
}

/// One tool of the demo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Pingpong,
    Perftest(Test),
}

const TOOLS: [Tool; 5] = [
    Tool::Pingpong,
    Tool::Perftest(Test::WriteBw),
    Tool::Perftest(Test::ReadBw),
    Tool::Perftest(Test::SendLat),
    Tool::Perftest(Test::AtomicBw),
];

/// What one end of one tool reported.
struct Ran {
    text: String,
    counters: QpCounters,
    ok: bool,
}

/// Where one tool's TCP exchange meets: the port, and the listener the
/// server accepts on when this process bound it beforehand.
#[derive(Debug, Clone)]
struct At {
    port: u16,
    listener: Option<Arc<TcpListener>>,
}

impl At {
    /// A listener on a free port of localhost, bound now and held, so
    /// that no other program can take the port before the server accepts.
    fn bound() -> Result<At> {
        let l = TcpListener::bind(("127.0.0.1", 0)).context("binding a TCP listener")?;
        Ok(At {
            port: l.local_addr()?.port(),
            listener: Some(Arc::new(l)),
        })
    }

    /// The port alone: a server binds it, a client connects to it.
    fn port(port: u16) -> At {
        At {
            port,
            listener: None,
        }
    }
}

fn run_tool<B: Backend>(
    ctx: &mut Context<B>,
    tool: Tool,
    role: &Role,
    at: &At,
    cfg: &ToolsConfig,
    mtu: Mtu,
) -> Result<Ran> {
    let mut out = Vec::new();
    let timeout = std::time::Duration::from_millis(cfg.timeout_ms);
    let (counters, ok) = match tool {
        Tool::Pingpong => {
            let opts = PingpongOpts {
                size: 4096,
                iters: cfg.iters.min(u32::MAX as u64) as u32,
                mtu,
                tcp_port: at.port,
                listener: at.listener.clone(),
                timeout,
                ..PingpongOpts::default()
            };
            let r = pingpong::run(ctx, role, &opts, &mut out)?;
            r.print(&opts, &mut out)?;
            (r.counters, r.bad_payloads == 0)
        }
        Tool::Perftest(test) => {
            let opts = perftest::Opts {
                iters: Some(cfg.iters),
                mtu: Some(mtu),
                tcp_port: at.port,
                listener: at.listener.clone(),
                timeout,
                device: "ferroce-demo".into(),
                ..perftest::Opts::new(test)
            };
            let r = perftest::run(ctx, role, &opts, &mut out)?;
            let ok = r.errors == 0 && r.bad_payloads == 0 && !matches!(r.outcome, Outcome::None);
            (r.counters, ok)
        }
    };
    Ok(Ran {
        text: String::from_utf8_lossy(&out).into_owned(),
        counters,
        ok,
    })
}

/// Every tool in turn, each at its own `at`.
fn run_all<B: Backend>(
    ctx: &mut Context<B>,
    role: &Role,
    at: &[At],
    cfg: &ToolsConfig,
    mtu: Mtu,
) -> Result<Vec<Ran>> {
    TOOLS
        .iter()
        .zip(at)
        .map(|(tool, at)| run_tool(ctx, *tool, role, at, cfg, mtu))
        .collect()
}

/// Prints one tool's output and counters (`peer`: the other end's, when
/// this process ran it); whether both ends verified.
fn print_run(
    tool: Tool,
    roles: &str,
    run: &Ran,
    peer: Option<&Ran>,
    out: &mut dyn Write,
) -> Result<bool> {
    let name = match tool {
        Tool::Pingpong => "pingpong",
        Tool::Perftest(t) => t.name(),
    };
    writeln!(out, "\n  == {name} ({roles}) ==")?;
    for line in run.text.lines() {
        writeln!(out, "  {line}")?;
    }
    let ok = run.ok && peer.map_or(true, |p| p.ok);
    match peer {
        Some(p) => {
            writeln!(out, "  counters b: {}", run.counters)?;
            writeln!(out, "  counters a: {}", p.counters)?;
        }
        None => writeln!(out, "  counters: {}", run.counters)?,
    }
    if !ok {
        writeln!(out, "  FAILED: {name} did not verify")?;
    }
    Ok(ok)
}

/// Decodes the recorded frames and says so; whether they are all well
/// formed.
pub fn check_pcap(path: &Path, frames: u64, out: &mut dyn Write) -> Result<bool> {
    let t = decode_file(path)?;
    writeln!(
        out,
        "\n  pcap: {frames} frames in {} (decode: {}; `ferroce decode {}` lists them)",
        path.display(),
        t.line(),
        path.display()
    )?;
    if !t.clean() || t.roce == 0 {
        writeln!(
            out,
            "  FAILED: the recorded RoCE frames are not all well formed"
        )?;
        return Ok(false);
    }
    Ok(true)
}

/// One end of the demo's tools on `ctx`, the other end in another
/// process (e.g. over net_memif): the server, or the client of the server
/// at `peer`. The tools use TCP ports `cfg.tcp_port` and the four above
/// it. Prints each tool's output; whether all verified.
pub fn run_tools_one_end<B: Backend>(
    ctx: &mut Context<B>,
    cfg: &ToolsConfig,
    peer: Option<core::net::IpAddr>,
    out: &mut dyn Write,
) -> Result<bool> {
    let mtu = Mtu::from_bytes(cfg.mtu).context("tools.mtu: not 256, 512, 1024, 2048 or 4096")?;
    let mtu = mtu.min(ctx.query_port().active_mtu);
    let ports: Vec<At> = (0..TOOLS.len() as u16)
        .map(|i| At::port(cfg.tcp_port + i))
        .collect();
    let (role, roles) = match peer {
        Some(ip) => (Role::Client(ip), "this end the client"),
        None => (Role::Server, "this end serves"),
    };
    let runs = run_all(ctx, &role, &ports, cfg, mtu)?;
    let mut ok = true;
    for (tool, r) in TOOLS.iter().zip(&runs) {
        ok &= print_run(*tool, roles, r, None, out)?;
    }
    Ok(ok)
}

/// Decodes a pcap: the totals over its frames.
pub fn decode_file(path: &Path) -> Result<Totals> {
    let mut r = crate::pcap::open(path).with_context(|| format!("{}", path.display()))?;
    let mut d = Decoder::new();
    while let Some(rec) = r.next_record()? {
        d.frame_of(rec.linktype, rec.ts_ns, rec.orig_len as usize, rec.data);
    }
    Ok(d.totals)
}

/// The end of a port: its queue, our MAC and address there.
pub struct End<B> {
    /// The port's queue the tools send and receive on.
    pub queue: B,
    /// Our MAC on the port.
    pub mac: MacAddr,
    /// Our IPv4 address on the port.
    pub ip: Ipv4Addr,
    /// The largest frame the port carries.
    pub max_frame: usize,
    /// Zero-copy send from this end ([`ContextConfig::zero_copy_min`]),
    /// with its regions from this allocator, one a port can send from in
    /// place; `None`: the tools' regions as given, payloads copied.
    pub zero_copy: Option<crate::verbs::RegionAlloc>,
}

/// Runs the tools, a's end the server (in a thread of its own, which
/// first calls `server_setup`: e.g. pins itself to port a's core), b's the
/// client (in this thread); prints each tool's client output and both
/// ends' counters. Returns whether every tool verified and the pcap
/// decoded clean.
pub fn run_tools<B, C>(
    a: End<B>,
    b: End<B>,
    clock: C,
    cfg: &ToolsConfig,
    region_alloc: crate::verbs::RegionAlloc,
    server_setup: impl FnOnce() + Send + 'static,
    out: &mut dyn Write,
) -> Result<bool>
where
    B: Backend + Send + 'static,
    B::Buf: Send,
    C: Clock + Copy + Send + 'static,
{
    let mtu = Mtu::from_bytes(cfg.mtu).context("tools.mtu: not 256, 512, 1024, 2048 or 4096")?;
    let open = |e: &End<B>| {
        let mut cc = ContextConfig::new(e.mac, e.ip.into());
        cc.max_frame = e.max_frame;
        cc.region_alloc = region_alloc;
        if let Some(lending) = e.zero_copy {
            cc.region_alloc = lending;
            cc.zero_copy_min = Some(crate::transport::ZERO_COPY_MIN);
        }
        cc
    };
    let (ca, cb) = (open(&a), open(&b));
    let ctx_a = Context::open(a.queue, Box::new(clock), ca)?;
    let active = ctx_a.query_port().active_mtu;
    let mtu = mtu.min(active);
    let pcap = (!cfg.pcap.is_empty()).then(|| Path::new(&cfg.pcap).to_path_buf());
    writeln!(
        out,
        "  tools: pingpong, write-bw, read-bw, send-lat, atomic-bw; {} messages each, path MTU {}, a serves, b is the client{}",
        cfg.iters,
        mtu.bytes(),
        pcap.as_ref()
            .map(|p| format!(", b's frames recorded to {}", p.display()))
            .unwrap_or_default()
    )?;
    // The server's listeners are bound here, before either end starts:
    // the client connects to their ports, and no other program can take
    // one in between.
    let server_at: Vec<At> = TOOLS.iter().map(|_| At::bound()).collect::<Result<_>>()?;
    let ports: Vec<At> = server_at.iter().map(|a| At::port(a.port)).collect();
    let cfg2 = cfg.clone();
    let server = std::thread::spawn(move || -> Result<Vec<Ran>> {
        server_setup();
        let mut ctx = ctx_a;
        let v = run_all(&mut ctx, &Role::Server, &server_at, &cfg2, mtu);
        drop(ctx.close(crate::time::Duration::from_millis(50)));
        v
    });
    let client = Role::Client("127.0.0.1".parse().expect("an address"));
    let (client_runs, frames) = match &pcap {
        Some(path) => {
            let cap = crate::backend::poll::recorder(b.queue, clock, path)?;
            let mut ctx = Context::open(cap, Box::new(clock), cb)?;
            let runs = run_all(&mut ctx, &client, &ports, cfg, mtu);
            let (_, n) = ctx.close(crate::time::Duration::from_millis(50)).finish()?;
            (runs, Some(n))
        }
        None => {
            let mut ctx = Context::open(b.queue, Box::new(clock), cb)?;
            let runs = run_all(&mut ctx, &client, &ports, cfg, mtu);
            drop(ctx.close(crate::time::Duration::from_millis(50)));
            (runs, None)
        }
    };
    let server_runs = match server.join() {
        Ok(r) => r,
        Err(_) => bail!("the server thread panicked"),
    };
    let (client_runs, server_runs) = match (client_runs, server_runs) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(e), _) => return Err(e.context("the client end")),
        (_, Err(e)) => return Err(e.context("the server end")),
    };
    let mut ok = true;
    for ((tool, c), s) in TOOLS.iter().zip(&client_runs).zip(&server_runs) {
        ok &= print_run(*tool, "client b; a serves", c, Some(s), out)?;
    }
    if let (Some(path), Some(n)) = (&pcap, frames) {
        ok &= check_pcap(path, n, out)?;
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback;
    use crate::backend::WallClock;

    #[test]
    fn the_tools_run_against_each_other_and_their_frames_decode_clean() {
        let _one = crate::tools::spinning_pair();
        let (pa, pb) = loopback::pair(1024, 4352);
        let dir = std::env::temp_dir().join(format!("ferroce-demo-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("demo.pcap");
        let cfg = ToolsConfig {
            iters: 60,
            pcap: pcap.display().to_string(),
            ..ToolsConfig::default()
        };
        let end = |queue, last: u8| End {
            queue,
            mac: MacAddr([2, 0, 0, 0, 0, last]),
            ip: Ipv4Addr::new(198, 18, 0, last),
            max_frame: 4352,
            zero_copy: None,
        };
        let mut out = Vec::new();
        let ok = run_tools(
            end(pa, 1),
            end(pb, 2),
            WallClock::new(),
            &cfg,
            crate::verbs::heap_region,
            || {},
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(ok, "{text}");
        for name in ["pingpong", "write-bw", "read-bw", "send-lat", "atomic-bw"] {
            assert!(text.contains(&format!("== {name} ")), "{name}:\n{text}");
        }
        assert!(text.contains("491520 bytes in "), "{text}");
        assert!(text.contains("RDMA_Read BW Test"), "{text}");
        assert!(text.contains(" 0 icrc bad, 0 malformed"), "{text}");
        let t = decode_file(&pcap).unwrap();
        assert!(t.roce > 500 && t.clean(), "{t:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
