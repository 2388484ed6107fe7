//! What every command-line tool does before and after its own work: open
//! the config's port, pin the thread, build a verbs [`Context`] on it
//! (hugepage regions, the port's MTU), record every frame to a pcap when
//! asked, and leave the link up a moment at the end for the peer's last
//! frames.

pub mod memory;
pub mod ports;

use crate::backend::Backend;
use crate::config::Config;
use crate::dpdk::{self, TscClock};
use crate::tools::port::ports::Ports;
use crate::verbs::{Context, ContextConfig};
use anyhow::Result;
use std::path::Path;

/// Work done on a context, whatever backend is under it (the port, or
/// the port inside a pcap recorder).
pub trait OnContext {
    /// What the work returns.
    type Out;
    /// Does the work on `ctx`, an open context over the tool's port.
    fn run<B: Backend>(self, ctx: &mut Context<B>) -> Result<Self::Out>;
}

/// What the receive path lost on this host before the transport saw a
/// frame: a full packet-socket ring (net_af_packet), a full rx queue
/// (`imissed`), no mbuf (`rx_nombuf`), bad frames (`ierrors`). A loss here
/// is the host's, not the peer's or the transport's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostDrops {
    /// Frames the kernel dropped for a full receive ring; `None` where
    /// the port has no such ring.
    pub ring: Option<u64>,
    /// Frames the device dropped for a full receive queue.
    pub imissed: u64,
    /// Receives that found no mbuf.
    pub rx_nombuf: u64,
    /// Frames received with errors.
    pub ierrors: u64,
}

impl HostDrops {
    /// Reads them from `port`.
    pub fn read(port: &crate::dpdk::Port) -> Result<HostDrops> {
        let s = port.stats()?;
        Ok(HostDrops {
            ring: port.ring_drops(),
            imissed: s.imissed,
            rx_nombuf: s.rx_nombuf,
            ierrors: s.ierrors,
        })
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.ring.unwrap_or(0) + self.imissed + self.rx_nombuf + self.ierrors
    }
}

impl std::fmt::Display for HostDrops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(r) = self.ring {
            write!(f, "ring_drops={r} ")?;
        }
        write!(
            f,
            "imissed={} rx_nombuf={} ierrors={}",
            self.imissed, self.rx_nombuf, self.ierrors
        )
    }
}

/// What [`on_port`] returns: the work's result, the frames recorded and
/// the host's receive losses over the run.
pub struct PortRun<T> {
    /// The work's result.
    pub out: T,
    /// Frames written to the pcap, if one was asked for.
    pub frames: Option<u64>,
    /// Frames the host lost before the transport saw them.
    pub host: HostDrops,
    /// How large the port's frames can be, and why.
    pub limit: crate::dpdk::FrameLimit,
}

/// A port's frame limit in words, as `ferroce info` and the tools'
/// `--stats` print it: "mtu 9000, frames up to 4286 B, path MTU up to
/// 4096 (what sets them)".
pub fn describe_limit(l: &crate::dpdk::FrameLimit) -> String {
    format!(
        "mtu {}, frames up to {} B, path MTU up to {} ({})",
        l.mtu,
        l.max_frame,
        crate::verbs::active_mtu(l.max_frame).bytes(),
        l.source
    )
}

/// Runs `work` on a context over port `name` of `cfg`, recording to
/// `pcap` if given.
pub fn on_port<W: OnContext>(
    cfg: &Config,
    name: &str,
    pcap: Option<&Path>,
    work: W,
) -> Result<PortRun<W::Out>> {
    let dp = Ports::open(cfg, &[name])?;
    let clock = TscClock::new(&dp.eal);
    let (pc, p) = dp.port(name)?;
    if let Some(core) = pc.core {
        dpdk::lcore::pin_current_thread(core)?;
    }
    // A shared-memory or kernel link may take a moment to come up; frames
    // sent before are lost (the first ARP request, say).
    let link = p.wait_link_up(std::time::Duration::from_secs(10))?;
    if !link.up {
        log::warn!("port {name}: the link is not up yet; going on");
    }
    let mac = p.mac()?;
    let mut cc = ContextConfig::new(mac, pc.ip.into());
    cc.gids = pc.gid_table();
    let limit = p.frame_limit()?;
    cc.max_frame = limit.max_frame;
    cc.frame_source = limit.source.clone();
    cc.region_alloc = memory::hugepage_region;
    if pc.zero_copy {
        cc.region_alloc = memory::lending_region;
        cc.zero_copy_min = Some(crate::transport::ZERO_COPY_MIN);
    }
    cc.resolve_timeout = crate::time::Duration::from_secs(10);
    cc.vlan = pc.vlan();
    cc.congestion = cfg
        .congestion
        .resolve(link.speed_mbps)
        .map_err(anyhow::Error::msg)?;
    // No switch between two DPDK ports stamps ferroce's INT: the sender's
    // own egress is the hop a rate control reading INT sees.
    cc.congestion.int_host_hop = true;
    let q = dp.queue(name)?;
    let (out, frames) = match pcap {
        None => {
            let mut ctx = Context::open(q, Box::new(clock), cc)?;
            let out = work.run(&mut ctx)?;
            drop(ctx.close(crate::time::Duration::from_millis(100)));
            (out, None)
        }
        Some(path) => {
            let cap = crate::backend::poll::recorder(q, clock, path)?;
            let mut ctx = Context::open(cap, Box::new(clock), cc)?;
            let out = work.run(&mut ctx);
            let (_, n) = ctx
                .close(crate::time::Duration::from_millis(100))
                .finish()?;
            (out?, Some(n))
        }
    };
    // Leave the link up a moment for the peer's last frames.
    let _ = p.wait_link_down(std::time::Duration::from_millis(200));
    let host = HostDrops::read(p)?;
    Ok(PortRun {
        out,
        frames,
        host,
        limit,
    })
}
