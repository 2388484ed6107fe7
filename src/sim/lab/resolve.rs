//! The resolved description of one run of `ferroce lab`: what a runner
//! builds from an experiment ([`LabConfig::resolve`]). This module owns
//! the checks of every value of the file and their resolved form (the
//! topology as indices, rates in bits per second, times in nanoseconds,
//! sizes in bytes); the workloads are checked by [`super::workload`].

use super::config::{
    kb, scaled, us, KeyError, LabConfig, LabConfigError, Names, NextHop, OutputConfig,
    PfcThreshold, PortRef, QueueChoice, SwitchConfig, TopologySpec, TransportConfig,
    MAX_DURATION_NS, MAX_SAMPLES,
};
use super::workload;
use crate::backend::fabric::RedConfig;
use crate::cc::CcConfig;
use crate::sim::defaults::{default_cnp_interval, default_red, MAX_MESSAGE, MAX_WINDOW};
use crate::transport::connect::ConnectParams;
use crate::transport::{Mtu, QpCaps};
use serde::Serialize;
use std::path::Path;

/// The resolved description of one run: what a runner builds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// The posting phase, nanoseconds (`duration_us`).
    pub duration_ns: u64,
    /// The longest the run may drain; `None`: the runner's choice.
    pub drain_limit_ns: Option<u64>,
    /// How often egress queues are sampled, nanoseconds (`queue_sample_ns`).
    pub queue_sample_ns: u64,
    /// How often flow rates are sampled, nanoseconds (`rate_sample_us`).
    pub rate_sample_ns: u64,
    /// The topology, by index.
    pub topology: TopologySpec,
    /// Every switch's settings (`[switch]`).
    pub switch: SwitchParams,
    /// Every device's transport settings (`[transport]`).
    pub transport: TransportParams,
    /// Static routes, in file order (a group destination gives one per
    /// host).
    pub routes: Vec<RouteSpec>,
    /// Link state changes, in time order (file order at equal times).
    pub link_events: Vec<LinkEventSpec>,
    /// Which switch egress queues to record (`output.queues`).
    pub queues: QueueSelect,
    /// The most flows the workloads can make (what the flow limit is
    /// checked against).
    pub flows_bound: u64,
    /// What the HPCC-style FCT table and the per-flow throughput take
    /// (`[output]`).
    pub analysis: AnalysisParams,
}

/// The `[output]` keys of the analyses, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnalysisParams {
    /// Workload tags whose flows the HPCC-style FCT table takes; `None`: all.
    pub fct_tags: Option<Vec<String>>,
    /// That table's bins, in percent of the flows (1..=100).
    pub fct_bin_pct: u32,
    /// The most flows whose throughput series is written.
    pub throughput_flows: usize,
    /// Workload tags whose flows get a throughput series; `None`: all.
    pub throughput_tags: Option<Vec<String>>,
}

impl AnalysisParams {
    /// Whether the HPCC-style FCT table takes a flow of this tag.
    pub fn fct_takes(&self, tag: &str) -> bool {
        self.fct_tags
            .as_ref()
            .map_or(true, |t| t.iter().any(|x| x == tag))
    }

    /// Whether a flow of this tag may get a throughput series.
    pub fn throughput_takes(&self, tag: &str) -> bool {
        self.throughput_tags
            .as_ref()
            .map_or(true, |t| t.iter().any(|x| x == tag))
    }
}

/// Every switch's settings, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwitchParams {
    /// Shared buffer per switch; `None`: unbounded.
    pub buffer_bytes: Option<u64>,
    /// Drop-tail cap per egress port for lossy classes; `None`: none.
    pub port_buffer_bytes: Option<u64>,
    /// Per priority: bytes per ingress port admitted past a full buffer.
    pub reserved_bytes: [u64; 8],
    /// Priorities served strictly before the others (`switch.strict_priorities`).
    pub strict_priorities: Vec<u8>,
    /// ECN marking; `None`: none. With `ecn_per_25g`, its thresholds are
    /// per 25 Gb/s: [`SwitchParams::red_for`] gives a port's.
    pub red: Option<RedConfig>,
    /// `switch.ecn.scale_per_25g`: Kmin and Kmax scale with each egress
    /// port's rate.
    pub ecn_per_25g: bool,
    /// PFC; `None`: lossy.
    pub pfc: Option<PfcSpec>,
}

impl SwitchParams {
    /// The ECN marking of an egress port of `rate_bps`: `red`, with its
    /// thresholds times `rate_bps` / 25 Gb/s when `ecn_per_25g` (the HPCC
    /// simulator gives Kmin and Kmax per link rate, `mix/config.txt`
    /// `KMIN_MAP` / `KMAX_MAP`: 100 / 400 KB at 25 Gb/s, 4x that at 100).
    pub fn red_for(&self, rate_bps: u64) -> Option<RedConfig> {
        let mut red = self.red?;
        if self.ecn_per_25g {
            let scale = |b: usize| {
                let x = b as u128 * u128::from(rate_bps) / 25_000_000_000;
                usize::try_from(x).unwrap_or(usize::MAX)
            };
            red.kmin_bytes = scale(red.kmin_bytes);
            red.kmax_bytes = scale(red.kmax_bytes);
        }
        Some(red)
    }
}

/// PFC thresholds, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PfcSpec {
    /// The lossless priorities, ascending.
    pub priorities: Vec<u8>,
    /// An ingress queue of a lossless priority above this many bytes sends XOFF.
    pub xoff_bytes: u64,
    /// Once it has sent XOFF, below this many bytes it sends XON.
    pub xon_bytes: u64,
    /// What an ingress may still take after XOFF, bytes.
    pub headroom_bytes: u64,
    /// The pause time sent with XOFF, quanta of 512 bit times (1..=65535).
    pub quanta: u16,
    /// Dynamic thresholds (`threshold = "dynamic"`); `None`: `xoff_bytes`
    /// and `xon_bytes`.
    pub dynamic: Option<DynamicPfcSpec>,
}

/// A dynamic PFC threshold, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DynamicPfcSpec {
    /// XOFF at 1/2^alpha_shift of the free shared buffer (`alpha`).
    pub alpha_shift: u8,
    /// XON this many bytes below the threshold (`resume_offset_kb`).
    pub resume_offset_bytes: u64,
}

/// Every device's transport settings, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransportParams {
    /// The rate control (`transport.cc`).
    pub cc: CcConfig,
    /// Send packets ECN-capable (ECT(0)) when their traffic class does not.
    pub ecn: bool,
    /// The IP traffic class of every QP's packets (its DSCP sets their priority in the fabric).
    pub traffic_class: u8,
    /// The 802.1p priority of data as the file gives it, checked (0..=7); the runner does not
    /// apply it.
    pub priority: u8,
    /// The 802.1p priority of CNPs as the file gives it, checked (0..=7); the runner does not
    /// apply it.
    pub cnp_priority: u8,
    /// The notification points' least time between CNPs, nanoseconds (absent from the file: the
    /// rate control's default).
    pub min_time_between_cnps_ns: u64,
    /// The largest WRITE a flow posts, bytes.
    pub message_bytes: u32,
    /// The WRITEs a flow keeps outstanding.
    pub window: u32,
    /// The local ACK timeout exponent (IBTA §9.7.6.1.3: 4.096 us x 2^timeout).
    pub timeout: u8,
    /// Retries after an ACK timeout or a PSN sequence error NAK before `RetryExcErr`.
    pub retry_cnt: u8,
    /// The ICRC is left to the NICs (`transport.icrc_offload`).
    pub icrc_offload: bool,
    /// WRITE payloads are copied into their regions (`transport.place_writes`).
    pub place_writes: bool,
    /// Every QP's loss recovery (`transport.recovery`).
    pub recovery: crate::transport::Recovery,
    /// Selective repeat's short timeout, µs (`transport.rto_low_us`).
    pub rto_low_us: u32,
}

/// A static route: at `switch`, frames for host `dst` leave towards
/// `via` (spread over them when several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteSpec {
    /// The switch the route is set on: an index in [`TopologySpec::switches`].
    pub switch: usize,
    /// The destination host: an index in [`TopologySpec::hosts`].
    pub dst: usize,
    /// The next hops, without repeats, in the order listed.
    pub via: Vec<NextHop>,
}

/// A link state change at `at_ns`: the `nth` link between switches `a`
/// and `b` (`link`, its index in [`TopologySpec::links`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LinkEventSpec {
    /// When the link changes, nanoseconds from the run's start.
    pub at_ns: u64,
    /// One of the link's switches: an index in [`TopologySpec::switches`].
    pub a: usize,
    /// The other switch.
    pub b: usize,
    /// Which of the links between `a` and `b` (`link.index`), from 0.
    pub nth: usize,
    /// The link: its index in [`TopologySpec::links`].
    pub link: usize,
    /// The link's state from then on.
    pub up: bool,
}

/// Which switch egress queues to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum QueueSelect {
    /// The ports the runner finds hot (their queue exceeded their own
    /// Kmin, scaled to their rate when Kmin is per 25 Gb/s).
    Bottleneck,
    /// Every switch egress port.
    All,
    /// The ports listed, without repeats, in the order listed.
    Ports(Vec<PortRef>),
}

impl LabConfig {
    /// Checks every value and resolves the run's description.
    pub fn resolve(&self) -> Result<Resolved, LabConfigError> {
        self.resolve_checked().map_err(|e| self.invalid(e))
    }

    fn resolve_checked(&self) -> Result<Resolved, KeyError> {
        if self.name.trim().is_empty() {
            return Err(KeyError::new("name", "must not be empty"));
        }
        let duration_ns = us("duration_us", self.duration_us, MAX_DURATION_NS)?;
        if duration_ns == 0 {
            return Err(KeyError::new("duration_us", "must be above 0"));
        }
        let drain_limit_ns = self
            .drain_limit_us
            .map(|v| us("drain_limit_us", v, MAX_DURATION_NS))
            .transpose()?;
        let queue_sample_ns = scaled("queue_sample_ns", self.queue_sample_ns, 1.0, duration_ns)?;
        let rate_sample_ns = us("rate_sample_us", self.rate_sample_us, duration_ns)?;
        for (key, every) in [
            ("queue_sample_ns", queue_sample_ns),
            ("rate_sample_us", rate_sample_ns),
        ] {
            if every == 0 {
                return Err(KeyError::new(key, "must be above 0"));
            }
            let n = duration_ns / every;
            if n > MAX_SAMPLES {
                return Err(KeyError::new(
                    key,
                    format!(
                        "{n} samples over duration_us is above the limit of {MAX_SAMPLES}: \
                         sample less often"
                    ),
                ));
            }
        }
        let topology = TopologySpec::build(&self.topology, &self.dir)?;
        let host_rate = self
            .topology
            .host_link
            .resolve("topology.host_link")?
            .rate_bps;
        let switch = self.switch.resolve(host_rate)?;
        let transport = self.transport.resolve(&self.dir)?;
        check_window_for_selective_repeat(&transport, topology.mtu)?;
        let flows_bound = workload::check(self, &topology)?;
        let routes = self.resolve_routes(&topology)?;
        let link_events = self.resolve_link_events(&topology)?;
        let queues = resolve_queues(&self.output.queues, &topology)?;
        let analysis = self.output.resolve_analysis(self)?;
        Ok(Resolved {
            duration_ns,
            drain_limit_ns,
            queue_sample_ns,
            rate_sample_ns,
            topology,
            switch,
            transport,
            routes,
            link_events,
            queues,
            flows_bound,
            analysis,
        })
    }

    fn resolve_routes(&self, topo: &TopologySpec) -> Result<Vec<RouteSpec>, KeyError> {
        let mut out = Vec::new();
        for (i, r) in self.routes.iter().enumerate() {
            let key = |k: &str| format!("route.{i}.{k}");
            let switch = topo
                .switch_index(&r.switch)
                .ok_or_else(|| KeyError::new(key("switch"), no_switch(topo, &r.switch)))?;
            let dsts = topo
                .hosts_named(std::slice::from_ref(&r.dst))
                .map_err(|e| KeyError::new(key("dst"), e))?;
            if r.via.0.is_empty() {
                return Err(KeyError::new(key("via"), "needs at least one next hop"));
            }
            for dst in dsts {
                let mut via = Vec::new();
                for name in &r.via.0 {
                    let hop = if let Some(s) = topo.switch_index(name) {
                        if topo.links_between(switch, s).is_empty() {
                            return Err(KeyError::new(
                                key("via"),
                                format!("{name} is not linked to {}", r.switch),
                            ));
                        }
                        NextHop::Switch(s)
                    } else if let Some(h) = topo.host_index(name) {
                        if h != dst || topo.hosts[h].switch != switch {
                            return Err(KeyError::new(
                                key("via"),
                                format!(
                                    "host {name} can only be the next hop of a route to \
                                     itself, at its own switch"
                                ),
                            ));
                        }
                        NextHop::Host(h)
                    } else {
                        return Err(KeyError::new(
                            key("via"),
                            format!("no switch or host is named {name:?}"),
                        ));
                    };
                    if !via.contains(&hop) {
                        via.push(hop);
                    }
                }
                out.push(RouteSpec { switch, dst, via });
            }
        }
        Ok(out)
    }

    fn resolve_link_events(&self, topo: &TopologySpec) -> Result<Vec<LinkEventSpec>, KeyError> {
        let mut out = Vec::with_capacity(self.link_events.len());
        for (i, e) in self.link_events.iter().enumerate() {
            let key = |k: &str| format!("link_event.{i}.{k}");
            let at_ns = us(&key("at_us"), e.at_us, MAX_DURATION_NS)?;
            let end = |name: &str, k: &str| {
                topo.switch_index(name).ok_or_else(|| {
                    let msg = if topo.host_index(name).is_some() {
                        format!("{name} is a host: link events act on switch-to-switch links")
                    } else {
                        no_switch(topo, name)
                    };
                    KeyError::new(key(k), msg)
                })
            };
            let a = end(&e.link.a, "link.a")?;
            let b = end(&e.link.b, "link.b")?;
            let links = topo.links_between(a, b);
            let Some(&link) = links.get(e.link.index) else {
                return Err(KeyError::new(
                    key("link.index"),
                    format!(
                        "{} and {} have {} link(s) between them, so no link {}",
                        e.link.a,
                        e.link.b,
                        links.len(),
                        e.link.index
                    ),
                ));
            };
            out.push(LinkEventSpec {
                at_ns,
                a,
                b,
                nth: e.link.index,
                link,
                up: e.up,
            });
        }
        out.sort_by_key(|e| e.at_ns);
        Ok(out)
    }
}

fn no_switch(topo: &TopologySpec, name: &str) -> String {
    let names: Vec<&str> = topo
        .switches
        .iter()
        .take(8)
        .map(|s| s.name.as_str())
        .collect();
    let more = if topo.switches.len() > 8 { ", ..." } else { "" };
    format!(
        "no switch is named {name:?} (there are {}{more})",
        names.join(", ")
    )
}

fn resolve_queues(q: &QueueChoice, topo: &TopologySpec) -> Result<QueueSelect, KeyError> {
    match q {
        QueueChoice::Named(s) if s == "bottleneck" => Ok(QueueSelect::Bottleneck),
        QueueChoice::Named(s) if s == "all" => Ok(QueueSelect::All),
        QueueChoice::Named(s) => Err(KeyError::new(
            "output.queues",
            format!("{s:?} is not \"bottleneck\", \"all\" or a list of \"switch:port\""),
        )),
        QueueChoice::Ports(list) => {
            let mut out = Vec::with_capacity(list.len());
            for p in list {
                let r = topo
                    .port_named(p)
                    .map_err(|e| KeyError::new("output.queues", e))?;
                if !out.contains(&r) {
                    out.push(r);
                }
            }
            Ok(QueueSelect::Ports(out))
        }
    }
}

/// `priorities`, checked to be 802.1p priorities (0..=7) without repeats.
fn priorities(key: &str, p: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut seen = [false; 8];
    for &x in p {
        if x > 7 {
            return Err(KeyError::new(key, format!("priority {x} is outside 0..=7")));
        }
        if std::mem::replace(&mut seen[usize::from(x)], true) {
            return Err(KeyError::new(key, format!("priority {x} is listed twice")));
        }
    }
    Ok(p.to_vec())
}

impl SwitchConfig {
    /// Resolved, with ECN defaults for hosts linked at `host_rate_bps`.
    fn resolve(&self, host_rate_bps: u64) -> Result<SwitchParams, KeyError> {
        let buffer_bytes = match self.buffer_kb {
            Some(v) => {
                let b = kb("switch.buffer_kb", v)?;
                if b == 0 {
                    return Err(KeyError::new(
                        "switch.buffer_kb",
                        "must be above 0 (leave it out for an unbounded buffer)",
                    ));
                }
                Some(b)
            }
            None => None,
        };
        let port_buffer_bytes = match kb("switch.port_buffer_kb", self.port_buffer_kb)? {
            0 => None,
            b => Some(b),
        };
        if let (Some(p), Some(b)) = (port_buffer_bytes, buffer_bytes) {
            if p > b {
                return Err(KeyError::new(
                    "switch.port_buffer_kb",
                    format!("{} KB is above switch.buffer_kb", p as f64 / 1e3),
                ));
            }
        }
        let mut reserved_bytes = [0; 8];
        for (out, &v) in reserved_bytes.iter_mut().zip(&self.reserved_kb) {
            *out = kb("switch.reserved_kb", v)?;
        }
        let strict_priorities = priorities("switch.strict_priorities", &self.strict_priorities)?;
        let red = match &self.ecn {
            Some(e) if e.enabled => {
                // Per 25 Gb/s, the defaults are those of a 25 Gb/s host link.
                let d = default_red(if e.scale_per_25g {
                    25_000_000_000
                } else {
                    host_rate_bps
                });
                let kmin = match e.kmin_kb {
                    Some(v) => kb("switch.ecn.kmin_kb", v)?,
                    None => d.kmin_bytes as u64,
                };
                let kmax = match e.kmax_kb {
                    Some(v) => kb("switch.ecn.kmax_kb", v)?,
                    None => d.kmax_bytes as u64,
                };
                if kmin > kmax {
                    return Err(KeyError::new(
                        "switch.ecn.kmin_kb",
                        format!(
                            "{} KB is above kmax_kb ({} KB)",
                            kmin as f64 / 1e3,
                            kmax as f64 / 1e3
                        ),
                    ));
                }
                if !(0.0..=1.0).contains(&e.pmax) {
                    return Err(KeyError::new(
                        "switch.ecn.pmax",
                        format!("{} is not a probability in [0, 1]", e.pmax),
                    ));
                }
                Some(RedConfig {
                    kmin_bytes: usize::try_from(kmin).unwrap_or(usize::MAX),
                    kmax_bytes: usize::try_from(kmax).unwrap_or(usize::MAX),
                    pmax: e.pmax,
                    at_dequeue: e.at_dequeue,
                })
            }
            _ => None,
        };
        let pfc = match &self.pfc {
            Some(p) if p.enabled => {
                let mut prios = priorities("switch.pfc.priorities", &p.priorities)?;
                if prios.is_empty() {
                    return Err(KeyError::new(
                        "switch.pfc.priorities",
                        "needs at least one priority (or enabled = false)",
                    ));
                }
                prios.sort_unstable();
                let xoff = kb("switch.pfc.xoff_kb", p.xoff_kb)?;
                let xon = kb("switch.pfc.xon_kb", p.xon_kb)?;
                let headroom = kb("switch.pfc.headroom_kb", p.headroom_kb)?;
                let dynamic = match p.threshold {
                    PfcThreshold::Static => None,
                    PfcThreshold::Dynamic => {
                        Some(dynamic_pfc(p.alpha, p.resume_offset_kb, buffer_bytes)?)
                    }
                };
                if dynamic.is_some() {
                    // xoff_kb and xon_kb are not used.
                } else if xoff == 0 {
                    return Err(KeyError::new("switch.pfc.xoff_kb", "must be above 0"));
                } else if xon > xoff {
                    return Err(KeyError::new(
                        "switch.pfc.xon_kb",
                        format!("{} is above xoff_kb ({})", p.xon_kb, p.xoff_kb),
                    ));
                }
                let quanta = u16::try_from(p.quanta)
                    .ok()
                    .filter(|&q| q > 0)
                    .ok_or_else(|| {
                        KeyError::new(
                            "switch.pfc.quanta",
                            format!("{} is outside 1..=65535", p.quanta),
                        )
                    })?;
                if let Some(b) = buffer_bytes.filter(|_| dynamic.is_none()) {
                    if xoff + headroom > b {
                        return Err(KeyError::new(
                            "switch.pfc.xoff_kb",
                            format!(
                                "xoff_kb + headroom_kb ({} KB) is above switch.buffer_kb ({} KB)",
                                (xoff + headroom) as f64 / 1e3,
                                b as f64 / 1e3
                            ),
                        ));
                    }
                }
                Some(PfcSpec {
                    priorities: prios,
                    xoff_bytes: xoff,
                    xon_bytes: xon,
                    headroom_bytes: headroom,
                    quanta,
                    dynamic,
                })
            }
            _ => None,
        };
        Ok(SwitchParams {
            buffer_bytes,
            port_buffer_bytes,
            reserved_bytes,
            strict_priorities,
            red,
            ecn_per_25g: self.ecn.as_ref().is_some_and(|e| e.scale_per_25g),
            pfc,
        })
    }
}

/// `switch.pfc`'s dynamic threshold: `alpha` a power of two from 1 to
/// 1/65536, and a shared buffer to take a share of.
fn dynamic_pfc(
    alpha: f64,
    resume_offset_kb: f64,
    buffer: Option<u64>,
) -> Result<DynamicPfcSpec, KeyError> {
    if buffer.is_none() {
        return Err(KeyError::new(
            "switch.pfc.threshold",
            "\"dynamic\" takes a share of the free shared buffer: set switch.buffer_kb",
        ));
    }
    let alpha_shift = (0..=16u8)
        .find(|&k| alpha == 1.0 / f64::from(1u32 << k))
        .ok_or_else(|| {
            KeyError::new(
                "switch.pfc.alpha",
                format!("{alpha} is not 1/2^k for k in 0..=16 (1, 0.5, 0.25, 0.125, ...)"),
            )
        })?;
    Ok(DynamicPfcSpec {
        alpha_shift,
        resume_offset_bytes: kb("switch.pfc.resume_offset_kb", resume_offset_kb)?,
    })
}

impl OutputConfig {
    /// The analyses' keys, checked: tags that some workload has, bins of
    /// 1 to 100%.
    fn resolve_analysis(&self, c: &LabConfig) -> Result<AnalysisParams, KeyError> {
        let tags: Vec<String> = c
            .workloads
            .iter()
            .map(|w| w.tag.clone().unwrap_or_else(|| w.kind.name().to_string()))
            .collect();
        let check = |key: &str, names: &Option<Names>| -> Result<Option<Vec<String>>, KeyError> {
            let Some(n) = names else {
                return Ok(None);
            };
            for t in &n.0 {
                if !tags.contains(t) {
                    return Err(KeyError::new(
                        key,
                        format!("no workload has the tag {t:?} (tags: {})", tags.join(", ")),
                    ));
                }
            }
            Ok(Some(n.0.clone()))
        };
        if !(1..=100).contains(&self.fct_bin_pct) {
            return Err(KeyError::new(
                "output.fct_bin_pct",
                format!("{} is outside 1..=100", self.fct_bin_pct),
            ));
        }
        Ok(AnalysisParams {
            fct_tags: check("output.fct_tags", &self.fct_tags)?,
            fct_bin_pct: self.fct_bin_pct,
            throughput_flows: self.throughput_flows,
            throughput_tags: check("output.throughput_tags", &self.throughput_tags)?,
        })
    }
}

impl Resolved {
    /// Every flow's QP capabilities and connection parameters; an error
    /// for an MTU that is not a path MTU.
    pub fn qp_settings(&self) -> Result<(QpCaps, ConnectParams), String> {
        let (topo, t) = (&self.topology, &self.transport);
        let mtu =
            Mtu::from_bytes(topo.mtu).ok_or_else(|| format!("{} is not a path MTU", topo.mtu))?;
        let pkts = (t.message_bytes as u64).div_ceil(u64::from(topo.mtu)) as u32;
        let caps = crate::sim::defaults::window_caps(t.window, pkts, t.rto_low_us);
        let params = ConnectParams {
            mtu,
            timeout: t.timeout,
            retry_cnt: t.retry_cnt,
            traffic_class: t.traffic_class,
            // Every host of the lab is ferroce: both ends agree to INT for
            // a rate control that needs it (HPCC), and to the file's
            // loss recovery.
            int_telemetry: t.cc.needs_int(),
            recovery: t.recovery,
            ..ConnectParams::default()
        };
        Ok((caps, params))
    }
}

/// Selective repeat tracks at most 4096 packets in flight per QP
/// (`crate::transport::selective`): a flow's window of WRITEs must fit.
fn check_window_for_selective_repeat(t: &TransportParams, mtu: u32) -> Result<(), KeyError> {
    let pkts = u64::from(t.message_bytes).div_ceil(u64::from(mtu.max(1)));
    let inflight = u64::from(t.window) * pkts;
    if t.recovery == crate::transport::Recovery::Selective && inflight > 4096 {
        return Err(KeyError::new(
            "transport.window",
            format!(
                "{} WRITEs of {pkts} packets is {inflight} packets in flight; selective repeat \
                 (transport.recovery = \"sr\") tracks at most 4096",
                t.window
            ),
        ));
    }
    Ok(())
}

impl TransportConfig {
    /// Resolved; a relative rate-control file is looked for in `dir`
    /// first.
    fn resolve(&self, dir: &Path) -> Result<TransportParams, KeyError> {
        let cc = rate_control(&self.cc, dir)?;
        let min_time_between_cnps_ns = match self.min_time_between_cnps_us {
            Some(v) => us("transport.min_time_between_cnps_us", v, MAX_DURATION_NS)?,
            None => default_cnp_interval(&cc).as_nanos(),
        };
        let message = kb("transport.message_kb", self.message_kb)?;
        let message_bytes = u32::try_from(message)
            .ok()
            .filter(|&m| (1..=MAX_MESSAGE).contains(&m))
            .ok_or_else(|| {
                KeyError::new(
                    "transport.message_kb",
                    format!(
                        "{} is outside 0.001..={}",
                        self.message_kb,
                        f64::from(MAX_MESSAGE) / 1e3
                    ),
                )
            })?;
        if !(1..=MAX_WINDOW).contains(&self.window) {
            return Err(KeyError::new(
                "transport.window",
                format!("{} is outside 1..={MAX_WINDOW}", self.window),
            ));
        }
        if !(1..=31).contains(&self.timeout) {
            return Err(KeyError::new(
                "transport.timeout",
                format!("{} is outside 1..=31", self.timeout),
            ));
        }
        if !(1..=1_000_000).contains(&self.rto_low_us) {
            return Err(KeyError::new(
                "transport.rto_low_us",
                format!("{} is outside 1..=1000000", self.rto_low_us),
            ));
        }
        if self.retry_cnt > 7 {
            return Err(KeyError::new(
                "transport.retry_cnt",
                format!("{} is outside 0..=7", self.retry_cnt),
            ));
        }
        for (key, p) in [
            ("transport.priority", self.priority),
            ("transport.cnp_priority", self.cnp_priority),
        ] {
            if p > 7 {
                return Err(KeyError::new(key, format!("{p} is outside 0..=7")));
            }
        }
        Ok(TransportParams {
            cc,
            ecn: self.ecn,
            traffic_class: self.traffic_class,
            priority: self.priority,
            cnp_priority: self.cnp_priority,
            min_time_between_cnps_ns,
            message_bytes,
            window: self.window,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            icrc_offload: self.icrc_offload,
            place_writes: self.place_writes,
            recovery: self.recovery,
            rto_low_us: self.rto_low_us,
        })
    }
}

/// The rate control `s` names, or the one its parameter file holds
/// (relative to `dir` when the file is there).
pub(crate) fn rate_control(s: &str, dir: &Path) -> Result<CcConfig, KeyError> {
    let t = s.trim();
    let mut name = t.to_string();
    if t.ends_with(".toml") && Path::new(t).is_relative() {
        let p = dir.join(t);
        if p.is_file() {
            name = p.to_string_lossy().into_owned();
        }
    }
    match CcConfig::by_name_or_file(&name) {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => Err(KeyError::new("transport.cc", e.to_string())),
        None => Err(KeyError::new(
            "transport.cc",
            format!(
                "{s:?} is none of {} or a .toml parameter file",
                CcConfig::NAMES.join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
