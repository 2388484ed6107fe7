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

/// Runs `work` on a context over port `name` of `cfg`, recording to
/// `pcap` if given. Returns its result and the frames recorded.
pub fn on_port<W: OnContext>(
    cfg: &Config,
    name: &str,
    pcap: Option<&Path>,
    work: W,
) -> Result<(W::Out, Option<u64>)> {
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
    let limit = p.frame_limit()?;
    cc.max_frame = limit.max_frame;
    cc.frame_source = limit.source;
    cc.region_alloc = memory::hugepage_region;
    cc.resolve_timeout = crate::time::Duration::from_secs(10);
    cc.vlan = pc.vlan();
    cc.congestion = cfg
        .congestion
        .resolve(link.speed_mbps)
        .map_err(anyhow::Error::msg)?;
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
    Ok((out, frames))
}
