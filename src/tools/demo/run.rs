//! `ferroce demo` on DPDK ports: with two ports, the link test between
//! them, the RC transport's verified cycle ([`super::rc`]) and the tools
//! phase ([`super::run_tools`]); with one port, one end of the tools phase
//! ([`super::run_tools_one_end`]) against another process.

use super::DemoOpts;
use crate::backend::poll::PollLoop;
use crate::config::Config;
use crate::dpdk::{self, Port, TscClock};
use crate::time::{Clock, Duration};
use crate::tools::linktest::run::{print_counters, probe_between, report_ok};
use crate::tools::linktest::{Responder, Sender};
use crate::tools::port::ports::Ports;
use anyhow::{bail, Context, Result};
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// `ferroce demo`: both ends in this process with a two-port config, one
/// end with a one-port config; Ok(false) (exit 1) when a check failed.
pub fn run(mut cfg: Config, opts: &DemoOpts) -> Result<bool> {
    if cfg.ports.len() == 1 {
        return one_end(&cfg, opts.peer);
    }
    if opts.peer.is_some() {
        bail!("--peer is for a config with one port (one end of the demo per process)");
    }
    if let Some(c) = opts.count {
        cfg.linktest.count = c;
    }
    if let Some(p) = opts.payload {
        cfg.linktest.payload = p;
    }
    two_ports(&cfg)
}

/// The demo's tools with one end in this process and the other in
/// another (two processes over net_memif, say).
fn one_end(cfg: &Config, peer: Option<std::net::IpAddr>) -> Result<bool> {
    use super::{check_pcap, run_tools_one_end};
    use crate::tools::port::{on_port, OnContext};
    struct Work<'a> {
        cfg: &'a crate::config::ToolsConfig,
        peer: Option<std::net::IpAddr>,
    }
    impl OnContext for Work<'_> {
        type Out = bool;
        fn run<B: crate::backend::Backend>(
            self,
            ctx: &mut crate::verbs::Context<B>,
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
    let run = on_port(cfg, &pc.name, pcap.as_deref(), work)?;
    let (mut ok, frames) = (run.out, run.frames);
    if let (Some(path), Some(n)) = (&pcap, frames) {
        ok &= check_pcap(path, n, &mut std::io::stdout())?;
    }
    println!("demo {}", if ok { "OK" } else { "FAILED" });
    Ok(ok)
}

/// The demo with both ends in this process: the link test, the RC
/// transport and the tools between ports "a" and "b".
fn two_ports(cfg: &Config) -> Result<bool> {
    let dp = Ports::open(cfg, &["a", "b"])
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
            (pa.mac()?, ca.ip),
            (pb.mac()?, cb.ip),
        )?;
    }
    if cfg.tools.run {
        use super::{run_tools, End};
        let end =
            |queue, port: &Port, pc: &crate::config::PortConfig| -> Result<End<dpdk::PortQueue>> {
                Ok(End {
                    queue,
                    mac: port.mac()?,
                    ip: pc.ip,
                    max_frame: port.frame_limit()?.max_frame,
                    zero_copy: pc.zero_copy.then_some(
                        crate::tools::port::memory::lending_region as crate::verbs::RegionAlloc,
                    ),
                })
            };
        let (ea, eb) = (end(qa, pa, ca)?, end(qb, pb, cb)?);
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
            crate::tools::port::memory::hugepage_region,
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
    a: (crate::wire::MacAddr, Ipv4Addr),
    b: (crate::wire::MacAddr, Ipv4Addr),
) -> Result<bool> {
    use super::rc::{self, RcDemoConfig};
    let rc = &cfg.rc;
    let dc = RcDemoConfig {
        msgs: rc.msgs,
        size: rc.size,
        mtu: crate::transport::Mtu::from_bytes(rc.mtu).context("rc.mtu")?,
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
