//! The experiment description of `ferroce lab`: the TOML schema, its
//! variants and sweep, and the resolved form a runner maps onto the
//! simulator.
//!
//! This module owns the file format ([`LabConfig`] and its tables), the
//! expansion of a file into runs ([`LabFile::plan`]: variants x sweep
//! values, each applied to the file's TOML before it is read, so any key
//! can be varied), the checks of every value, and the resolved
//! description of one run ([`Resolved`]: the topology as indices, rates
//! in bits per second, times in nanoseconds, sizes in bytes). The flows
//! themselves come from [`super::workload::generate`].
//!
//! # The file
//!
//! Units are in the key names; KB is 1000 bytes; numbers with a unit may
//! be integers or decimals. Unknown keys are errors. Defaults are given
//! after each key; keys without one are required.
//!
//! ```toml
//! name = "incast-sweep"          # required; the default run name
//! description = "..."            # ""; one paragraph for the summary
//! seed = 1                       # the workloads' random streams
//! duration_us = 10000            # the posting phase (<= 1 s); the run then drains
//! # drain_limit_us = 20000       # absent: the runner's bound on draining
//! queue_sample_ns = 1000         # queue depth sampling
//! rate_sample_us = 10            # per-flow rate / goodput sampling
//!
//! [topology]
//! kind = "incast"                # incast | dumbbell | leaf-spine | custom; required
//! senders = 16                   # incast: hosts "recv" and "s0".."s15" on switch "sw"
//! # pairs = 4                    # dumbbell: "L0".."L3" on switch "left", "R0".."R3" on
//! #                              #   "right", one fabric link left <-> right
//! # leaves = 4                   # leaf-spine: switches "leaf0".., "spine0"..; hosts
//! # spines = 2                   #   "h<leaf>-<i>"; every leaf linked to every spine
//! # hosts_per_leaf = 8
//! # switches = ["s0", "s1"]      # custom: switches, hosts and links as given; a host
//! # hosts = [{ name = "h0", switch = "s0" }]  # or link may set its own rate_gbps
//! # links = [{ a = "s0", b = "s1", rate_gbps = 40 }]  # and delay_us
//! # groups = { rack0 = ["h0", "h1"] }  # {}; extra host groups, any kind
//! host_link = { rate_gbps = 100, delay_us = 1.0 }    # host <-> switch
//! fabric_link = { rate_gbps = 100, delay_us = 1.0 }  # switch <-> switch; absent: host_link
//! mtu = 4096                     # path MTU: 256, 512, 1024, 2048 or 4096
//!
//! [switch]
//! # buffer_kb = 3200             # shared buffer per switch; absent: unbounded
//! port_buffer_kb = 0             # drop-tail cap per egress port of a lossy class; 0: none
//! reserved_kb = [0, 0, 0, 0, 0, 0, 0, 0]  # per priority: guaranteed per ingress port
//! #                              #   even when the shared buffer is full (lossy ones)
//! strict_priorities = [6, 7]     # served before the others (CNPs use priority 6)
//! [switch.ecn]                   # RED on the data priority's queues; absent: no marking
//! enabled = true
//! kmin_kb = 50                   # absent: 50 KB x host link rate / 100 Gb/s
//! kmax_kb = 1600                 # absent: 1600 KB x host link rate / 100 Gb/s
//! pmax = 1.0
//! at_dequeue = true
//! [switch.pfc]                   # absent or enabled = false: lossy
//! enabled = true
//! priorities = [3]
//! xoff_kb = 400
//! xon_kb = 350
//! headroom_kb = 100
//! quanta = 65535                 # pause time sent with XOFF, 512-bit times
//!
//! [transport]
//! cc = "dcqcn-cx"                # dcqcn-cx | dcqcn-paper | none | a .toml parameter file
//! ecn = true                     # send ECN-capable
//! traffic_class = 106            # DSCP 26, ECT(0)
//! priority = 3                   # 802.1p priority of data
//! cnp_priority = 6               # 802.1p priority of CNPs
//! # min_time_between_cnps_us = 4 # absent: 50 for dcqcn-paper, 4 otherwise
//! message_kb = 64                # long flows are posted as WRITEs of this size
//! window = 8                     # WRITEs outstanding per flow
//! timeout = 14                   # ACK timeout exponent (4.096 us x 2^timeout)
//! retry_cnt = 7
//!
//! [[workload]]                   # one or more; see `workload` for each kind
//! kind = "long"
//! from = ["s0", "s1"]
//! to = "recv"
//!
//! [[link_event]]                 # optional: a switch-to-switch link goes down or up
//! at_us = 5000
//! link = { a = "leaf0", b = "spine1", index = 0 }  # index: which of parallel links
//! up = false
//!
//! [[route]]                      # optional static route (ECMP over `via`)
//! switch = "leaf0"
//! dst = "h3-0"                   # a host or a group
//! via = ["spine1"]               # next-hop switches, or the host itself
//!
//! [[variant]]                    # optional: each variant sets keys of the file
//! name = "lossless"
//! set = { "switch.pfc.enabled" = true, "transport.cc" = "none" }
//!
//! [sweep]                        # optional: one key over a list of values
//! key = "topology.senders"
//! values = [2, 4, 8, 16]
//!
//! [output]
//! plots = true
//! queues = "bottleneck"          # "bottleneck", "all", or ["switch:port", ...]
//! ```
//!
//! # Variants and sweeps
//!
//! A key of `set` or `sweep.key` is a dotted path into the file: table
//! names, then the key (`switch.ecn.kmin_kb`); an array of tables takes
//! its entry's number, counted from 0 (`workload.1.size_kb`). A value
//! that is a table is merged into the table it names; any other value
//! replaces. Tables on the way that the file leaves out are created. The
//! file without variants or sweep must be complete on its own; `name`,
//! `variant` and `sweep` cannot be set.
//!
//! The runs are every variant (or the file alone, when it has none) with
//! every sweep value (or none), in that order; the sweep's value is
//! applied after the variant's keys. A run is named after its variant
//! and sweep value: `dcqcn-senders=16`, `dcqcn`, `senders=16`, or the
//! file's `name` when it has neither.
//!
//! # Names
//!
//! Hosts and switches share one namespace; a group (a list of hosts)
//! may take a switch's name (leaf-spine's per-leaf groups do) but not a
//! host's. Every topology has the group `all`. A switch port is named
//! `switch:neighbour` (`leaf0:spine1`; `leaf0:spine1#1` for the second of
//! parallel links) or `switch:N`, N its number in
//! [`TopologySpec::ports`]. Keys in error messages are written as
//! variants and sweeps write them (`workload.0.hosts`).

#![deny(unsafe_code)]

use crate::backend::fabric::RedConfig;
use crate::cc::CcConfig;
use crate::config::{read_text, FileError};
use crate::sim::incast::{default_cnp_interval, default_red, MAX_MESSAGE, MAX_WINDOW};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests;
mod topology;

pub use topology::{
    HostSpec, LinkSpec, NextHop, PathSpec, Peer, SwitchLinkSpec, SwitchSpec, TopologySpec,
};

/// The most hosts a topology may have.
pub const MAX_HOSTS: usize = 4096;
/// The most switches a topology may have.
pub const MAX_SWITCHES: usize = 4096;
/// The most switch-to-switch links a topology may have.
pub const MAX_LINKS: usize = 65_536;
/// The most flows the workloads of one run may make.
pub const MAX_FLOWS: u64 = 1_000_000;
/// The longest posting phase, nanoseconds (1 s).
pub const MAX_DURATION_NS: u64 = 1_000_000_000;
/// The longest one-way link delay, nanoseconds (100 ms).
pub const MAX_DELAY_NS: u64 = 100_000_000;
/// The fastest link, bits per second (10 Tb/s).
pub const MAX_RATE_BPS: u64 = 10_000_000_000_000;
/// The largest size (buffer, threshold, flow), bytes (1 TB).
pub const MAX_BYTES: u64 = 1_000_000_000_000;
/// The most runs a file may expand to.
pub const MAX_RUNS: usize = 10_000;
/// The most samples of one queue or one flow over the posting phase.
pub const MAX_SAMPLES: u64 = 2_000_000;

/// Why an experiment description cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LabConfigError {
    #[error(transparent)]
    File(#[from] FileError),
    /// A value out of range or inconsistent with another; `key` is its
    /// dotted path, `run` the run whose settings it is when the file has
    /// variants or a sweep.
    #[error("{path}: {}{key}: {msg}", run_prefix(.run))]
    Invalid {
        path: String,
        run: Option<String>,
        key: String,
        msg: String,
    },
}

fn run_prefix(run: &Option<String>) -> String {
    run.as_ref()
        .map(|r| format!("run {r}: "))
        .unwrap_or_default()
}

impl LabConfigError {
    /// The dotted key an [`LabConfigError::Invalid`] is about.
    pub fn key(&self) -> Option<&str> {
        match self {
            LabConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    fn in_run(self, name: &str) -> LabConfigError {
        match self {
            LabConfigError::Invalid { path, key, msg, .. } => LabConfigError::Invalid {
                path,
                run: Some(name.to_string()),
                key,
                msg,
            },
            e => e,
        }
    }
}

/// A bad value: its dotted key and what is wrong with it. Becomes a
/// [`LabConfigError::Invalid`] once the file is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyError {
    pub key: String,
    pub msg: String,
}

impl KeyError {
    pub(crate) fn new(key: impl Into<String>, msg: impl Into<String>) -> KeyError {
        KeyError {
            key: key.into(),
            msg: msg.into(),
        }
    }
}

/// `v` (in a key's unit) times `scale`, rounded, if it is in
/// `0..=max` after scaling.
pub(crate) fn scaled(key: &str, v: f64, scale: f64, max: u64) -> Result<u64, KeyError> {
    let x = v * scale;
    if !(x >= 0.0 && x <= max as f64) {
        return Err(KeyError::new(
            key,
            format!("{v} is outside 0..={}", max as f64 / scale),
        ));
    }
    Ok(x.round() as u64)
}

/// Microseconds (a key ending in `_us`) in nanoseconds.
pub(crate) fn us(key: &str, v: f64, max_ns: u64) -> Result<u64, KeyError> {
    scaled(key, v, 1e3, max_ns)
}

/// Kilobytes (a key ending in `_kb`, 1000 bytes) in bytes.
pub(crate) fn kb(key: &str, v: f64) -> Result<u64, KeyError> {
    scaled(key, v, 1e3, MAX_BYTES)
}

/// Gb/s (a key ending in `_gbps`) in bits per second, above zero.
pub(crate) fn gbps(key: &str, v: f64) -> Result<u64, KeyError> {
    let bps = v * 1e9;
    if !(bps >= 1.0 && bps <= MAX_RATE_BPS as f64) {
        return Err(KeyError::new(
            key,
            format!(
                "{v} must be above 0 and at most {}",
                MAX_RATE_BPS as f64 / 1e9
            ),
        ));
    }
    Ok(bps.round() as u64)
}

/// A list of host or group names; in TOML a list of strings, or one
/// string for a list of one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Names(pub Vec<String>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a name or a list of names")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Names, E> {
                Ok(Names(vec![s.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Names, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = a.next_element::<String>()? {
                    v.push(s);
                }
                Ok(Names(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// One experiment as written: the whole file but its variants and sweep,
/// or one run's settings once they are applied.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LabConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The posting phase: workloads start flows within it; the run then
    /// drains.
    #[serde(default = "default_duration_us")]
    pub duration_us: f64,
    /// The longest the run may drain; absent: the runner's bound.
    #[serde(default)]
    pub drain_limit_us: Option<f64>,
    #[serde(default = "default_queue_sample_ns")]
    pub queue_sample_ns: f64,
    #[serde(default = "default_rate_sample_us")]
    pub rate_sample_us: f64,
    pub topology: TopologyConfig,
    #[serde(default)]
    pub switch: SwitchConfig,
    #[serde(default)]
    pub transport: TransportConfig,
    #[serde(rename = "workload")]
    pub workloads: Vec<WorkloadConfig>,
    #[serde(default, rename = "link_event")]
    pub link_events: Vec<LinkEventConfig>,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub output: OutputConfig,
    /// Read by [`LabFile`]; here so that the file reads as one table.
    #[serde(default, rename = "variant", skip_serializing)]
    variants_: IgnoredAny,
    #[serde(default, rename = "sweep", skip_serializing)]
    sweep_: IgnoredAny,
    /// The file, for error messages.
    #[serde(skip)]
    pub origin: String,
    /// The folder relative paths (a CDF, a rate-control file) start from:
    /// the file's own.
    #[serde(skip)]
    pub dir: PathBuf,
}

fn default_seed() -> u64 {
    1
}
fn default_duration_us() -> f64 {
    10_000.0
}
fn default_queue_sample_ns() -> f64 {
    1000.0
}
fn default_rate_sample_us() -> f64 {
    10.0
}

/// The shape of a topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// `senders` hosts and one receiver on one switch.
    Incast,
    /// `pairs` hosts on each of two switches joined by one link.
    Dumbbell,
    /// `leaves` x `hosts_per_leaf` hosts; every leaf linked to every
    /// spine.
    LeafSpine,
    /// Switches, hosts and links as listed.
    Custom,
}

impl TopologyKind {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::Incast => "incast",
            TopologyKind::Dumbbell => "dumbbell",
            TopologyKind::LeafSpine => "leaf-spine",
            TopologyKind::Custom => "custom",
        }
    }
}

/// A link's rate and one-way delay.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkParams {
    pub rate_gbps: f64,
    pub delay_us: f64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            rate_gbps: 100.0,
            delay_us: 1.0,
        }
    }
}

impl LinkParams {
    pub(crate) fn resolve(&self, key: &str) -> Result<LinkSpec, KeyError> {
        Ok(LinkSpec {
            rate_bps: gbps(&format!("{key}.rate_gbps"), self.rate_gbps)?,
            delay_ns: us(&format!("{key}.delay_us"), self.delay_us, MAX_DELAY_NS)?,
        })
    }
}

/// The `[topology]` table. Which keys apply depends on `kind`; the others
/// must be absent.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    pub kind: TopologyKind,
    /// incast
    pub senders: Option<usize>,
    /// dumbbell
    pub pairs: Option<usize>,
    /// leaf-spine
    pub leaves: Option<usize>,
    pub spines: Option<usize>,
    pub hosts_per_leaf: Option<usize>,
    /// custom
    pub switches: Option<Vec<String>>,
    pub hosts: Option<Vec<CustomHost>>,
    pub links: Option<Vec<CustomLink>>,
    /// Extra groups of hosts (any kind): name -> hosts or groups the
    /// topology defines.
    #[serde(default)]
    pub groups: BTreeMap<String, Names>,
    /// Every host's link to its switch.
    #[serde(default)]
    pub host_link: LinkParams,
    /// Every switch-to-switch link; absent: `host_link`.
    pub fabric_link: Option<LinkParams>,
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

fn default_mtu() -> u32 {
    4096
}

/// A host of a custom topology; its link defaults to `host_link`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CustomHost {
    pub name: String,
    pub switch: String,
    pub rate_gbps: Option<f64>,
    pub delay_us: Option<f64>,
}

/// A link between two switches of a custom topology; defaults to
/// `fabric_link`. Two switches may have several (parallel) links.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CustomLink {
    pub a: String,
    pub b: String,
    pub rate_gbps: Option<f64>,
    pub delay_us: Option<f64>,
}

/// The `[switch]` table: every switch's buffer, scheduling, ECN and PFC.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchConfig {
    /// Shared buffer per switch; absent: unbounded.
    pub buffer_kb: Option<f64>,
    /// Drop-tail cap per egress port for lossy classes; 0: none.
    pub port_buffer_kb: f64,
    /// Per priority: bytes per ingress port admitted even when the shared
    /// buffer is full (lossy priorities).
    pub reserved_kb: [f64; 8],
    /// Priorities served strictly before the others.
    pub strict_priorities: Vec<u8>,
    /// RED marking on the data priority's queues; absent: none.
    pub ecn: Option<EcnConfig>,
    /// Priority flow control; absent: lossy.
    pub pfc: Option<PfcConfig>,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            buffer_kb: None,
            port_buffer_kb: 0.0,
            reserved_kb: [0.0; 8],
            strict_priorities: vec![6, 7],
            ecn: None,
            pfc: None,
        }
    }
}

/// The `[switch.ecn]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EcnConfig {
    pub enabled: bool,
    /// Absent: 50 KB scaled by the host link's rate over 100 Gb/s.
    pub kmin_kb: Option<f64>,
    /// Absent: 1600 KB scaled by the host link's rate over 100 Gb/s.
    pub kmax_kb: Option<f64>,
    pub pmax: f64,
    pub at_dequeue: bool,
}

impl Default for EcnConfig {
    fn default() -> Self {
        EcnConfig {
            enabled: true,
            kmin_kb: None,
            kmax_kb: None,
            pmax: 1.0,
            at_dequeue: true,
        }
    }
}

/// The `[switch.pfc]` table (IEEE 802.1Qbb).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcConfig {
    pub enabled: bool,
    /// The lossless priorities.
    pub priorities: Vec<u8>,
    /// An ingress queue of a lossless priority above this sends XOFF ...
    pub xoff_kb: f64,
    /// ... and, once XOFF is sent, below this XON.
    pub xon_kb: f64,
    /// What an ingress may still take after XOFF (the bytes in flight).
    pub headroom_kb: f64,
    /// The pause time of XOFF, in quanta of 512 bit times (1..=65535).
    pub quanta: u32,
}

impl Default for PfcConfig {
    fn default() -> Self {
        PfcConfig {
            enabled: true,
            priorities: vec![3],
            xoff_kb: 400.0,
            xon_kb: 350.0,
            headroom_kb: 100.0,
            quanta: 65535,
        }
    }
}

/// The `[transport]` table: every device's RC and congestion settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// `dcqcn-cx`, `dcqcn-paper`, `none`, or a `.toml` parameter file
    /// (relative: to the experiment's folder if it is there, else to the
    /// working directory).
    pub cc: String,
    pub ecn: bool,
    pub traffic_class: u8,
    /// 802.1p priority of data.
    pub priority: u8,
    /// 802.1p priority of CNPs.
    pub cnp_priority: u8,
    /// Absent: the rate control's (`default_cnp_interval`).
    pub min_time_between_cnps_us: Option<f64>,
    pub message_kb: f64,
    pub window: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            cc: "dcqcn-cx".into(),
            ecn: true,
            traffic_class: crate::transport::congestion::DEFAULT_TRAFFIC_CLASS,
            priority: 3,
            cnp_priority: 6,
            min_time_between_cnps_us: None,
            message_kb: 64.0,
            window: 8,
            timeout: 14,
            retry_cnt: 7,
        }
    }
}

/// What a workload generates (see `workload` for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    Long,
    Incast,
    AllToAll,
    Allreduce,
    Cdf,
}

impl WorkloadKind {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Long => "long",
            WorkloadKind::Incast => "incast",
            WorkloadKind::AllToAll => "all-to-all",
            WorkloadKind::Allreduce => "allreduce",
            WorkloadKind::Cdf => "cdf",
        }
    }
}

/// One `[[workload]]` table. Which keys apply depends on `kind`
/// (`workload` lists them); the others must be absent.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    pub kind: WorkloadKind,
    /// The label of its flows; absent: the kind's name.
    pub tag: Option<String>,
    pub from: Option<Names>,
    pub to: Option<Names>,
    pub senders: Option<Names>,
    pub hosts: Option<Names>,
    pub size_kb: Option<f64>,
    pub start_us: Option<f64>,
    pub stop_us: Option<f64>,
    pub repeat_us: Option<f64>,
    pub count: Option<u64>,
    pub file: Option<String>,
    pub load: Option<f64>,
    pub max_flows: Option<u64>,
}

/// One `[[link_event]]`: a switch-to-switch link goes down or up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEventConfig {
    pub at_us: f64,
    pub link: LinkRef,
    /// The link's state from then on.
    #[serde(default)]
    pub up: bool,
}

/// A switch-to-switch link: its two switches, and which of their
/// parallel links (0: the first listed).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkRef {
    pub a: String,
    pub b: String,
    #[serde(default)]
    pub index: usize,
}

/// One `[[route]]`: at `switch`, frames for `dst` leave towards `via`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub switch: String,
    /// A host or a group.
    pub dst: String,
    /// Neighbouring switches (or the host, when `switch` is its own).
    pub via: Names,
}

/// The `[output]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputConfig {
    pub plots: bool,
    pub queues: QueueChoice,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            plots: true,
            queues: QueueChoice::Named("bottleneck".into()),
        }
    }
}

/// `output.queues` as written: `"bottleneck"`, `"all"` or a list of
/// `"switch:port"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum QueueChoice {
    Named(String),
    Ports(Vec<String>),
}

impl<'de> Deserialize<'de> for QueueChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<QueueChoice, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = QueueChoice;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"bottleneck\", \"all\" or a list of \"switch:port\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<QueueChoice, E> {
                Ok(QueueChoice::Named(s.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<QueueChoice, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = a.next_element::<String>()? {
                    v.push(s);
                }
                Ok(QueueChoice::Ports(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// One `[[variant]]`: a name and the keys it sets.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VariantConfig {
    pub name: String,
    #[serde(default)]
    pub set: toml::Table,
}

/// The `[sweep]` table: one key and its values.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    pub key: String,
    pub values: Vec<toml::Value>,
}

/// The resolved description of one run: what a runner builds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    pub duration_ns: u64,
    /// The longest the run may drain; `None`: the runner's choice.
    pub drain_limit_ns: Option<u64>,
    pub queue_sample_ns: u64,
    pub rate_sample_ns: u64,
    pub topology: TopologySpec,
    pub switch: SwitchParams,
    pub transport: TransportParams,
    /// Static routes, in file order (a group destination gives one per
    /// host).
    pub routes: Vec<RouteSpec>,
    /// Link state changes, in time order (file order at equal times).
    pub link_events: Vec<LinkEventSpec>,
    pub queues: QueueSelect,
    /// The most flows the workloads can make (what the flow limit is
    /// checked against).
    pub flows_bound: u64,
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
    pub strict_priorities: Vec<u8>,
    /// ECN marking; `None`: none.
    pub red: Option<RedConfig>,
    /// PFC; `None`: lossy.
    pub pfc: Option<PfcSpec>,
}

/// PFC thresholds, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PfcSpec {
    /// The lossless priorities, ascending.
    pub priorities: Vec<u8>,
    pub xoff_bytes: u64,
    pub xon_bytes: u64,
    pub headroom_bytes: u64,
    pub quanta: u16,
}

/// Every device's transport settings, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransportParams {
    pub cc: CcConfig,
    pub ecn: bool,
    pub traffic_class: u8,
    pub priority: u8,
    pub cnp_priority: u8,
    pub min_time_between_cnps_ns: u64,
    pub message_bytes: u32,
    pub window: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
}

/// A static route: at `switch`, frames for host `dst` leave towards
/// `via` (spread over them when several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteSpec {
    pub switch: usize,
    pub dst: usize,
    pub via: Vec<NextHop>,
}

/// A link state change at `at_ns`: the `nth` link between switches `a`
/// and `b` (`link`, its index in [`TopologySpec::links`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LinkEventSpec {
    pub at_ns: u64,
    pub a: usize,
    pub b: usize,
    pub nth: usize,
    pub link: usize,
    pub up: bool,
}

/// Which switch egress queues to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum QueueSelect {
    /// The ports the runner finds hot (their queue exceeded Kmin).
    Bottleneck,
    All,
    Ports(Vec<PortRef>),
}

/// A switch's egress port: `port` indexes [`TopologySpec::ports`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortRef {
    pub switch: usize,
    pub port: usize,
}

impl LabConfig {
    /// Parses one experiment (no variants or sweep applied) from `text`;
    /// `origin` names it in errors and `dir` is where relative paths start.
    pub fn parse(text: &str, origin: &str, dir: &Path) -> Result<LabConfig, LabConfigError> {
        let mut c: LabConfig = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
        c.origin = origin.to_string();
        c.dir = dir.to_path_buf();
        Ok(c)
    }

    /// An [`LabConfigError::Invalid`] about `key` of this file.
    pub fn error(&self, key: impl Into<String>, msg: impl Into<String>) -> LabConfigError {
        self.invalid(KeyError::new(key, msg))
    }

    pub(crate) fn invalid(&self, e: KeyError) -> LabConfigError {
        LabConfigError::Invalid {
            path: self.origin.clone(),
            run: None,
            key: e.key,
            msg: e.msg,
        }
    }

    /// The topology, resolved.
    pub fn topology(&self) -> Result<TopologySpec, LabConfigError> {
        TopologySpec::build(&self.topology).map_err(|e| self.invalid(e))
    }

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
        let topology = TopologySpec::build(&self.topology)?;
        let host_rate = self
            .topology
            .host_link
            .resolve("topology.host_link")?
            .rate_bps;
        let switch = self.switch.resolve(host_rate)?;
        let transport = self.transport.resolve(&self.dir)?;
        let flows_bound = super::workload::check(self, &topology)?;
        let routes = self.resolve_routes(&topology)?;
        let link_events = self.resolve_link_events(&topology)?;
        let queues = resolve_queues(&self.output.queues, &topology)?;
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
                let d = default_red(host_rate_bps);
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
                if xoff == 0 {
                    return Err(KeyError::new("switch.pfc.xoff_kb", "must be above 0"));
                }
                if xon > xoff {
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
                if let Some(b) = buffer_bytes {
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
            pfc,
        })
    }
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
        })
    }
}

/// The rate control `s` names, or the one its parameter file holds
/// (relative to `dir` when the file is there).
fn rate_control(s: &str, dir: &Path) -> Result<CcConfig, KeyError> {
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
            format!("{s:?} is none of none, dcqcn-cx, dcqcn-paper or a .toml parameter file"),
        )),
    }
}

fn parse_error(origin: &str, e: toml::de::Error) -> LabConfigError {
    FileError::parse(origin, e).into()
}

/// An experiment file: the experiment as written, its variants and its
/// sweep. [`LabFile::plan`] expands it into runs.
#[derive(Debug, Clone)]
pub struct LabFile {
    /// The experiment without variants or sweep.
    pub base: LabConfig,
    pub variants: Vec<VariantConfig>,
    pub sweep: Option<SweepConfig>,
    /// `base` as TOML, for applying variants and sweep values.
    table: toml::Table,
}

#[derive(Deserialize)]
struct Overrides {
    #[serde(default, rename = "variant")]
    variants: Vec<VariantConfig>,
    #[serde(default)]
    sweep: Option<SweepConfig>,
}

/// The expansion of an experiment file: every run, resolved.
#[derive(Debug, Clone)]
pub struct LabPlan {
    pub name: String,
    pub description: String,
    /// The swept key, if the file sweeps one.
    pub sweep_key: Option<String>,
    /// The variants' names, in file order (empty when there are none).
    pub variants: Vec<String>,
    /// Every variant with every sweep value, in that order.
    pub runs: Vec<Run>,
}

/// One run of an experiment.
#[derive(Debug, Clone)]
pub struct Run {
    /// Unique within the plan; made of `[A-Za-z0-9._=+-]`.
    pub name: String,
    pub variant: Option<String>,
    /// The sweep's value for this run.
    pub sweep_value: Option<toml::Value>,
    /// The settings, variant and sweep applied.
    pub config: LabConfig,
    pub resolved: Resolved,
}

impl LabPlan {
    /// Reads, expands and checks the experiment file at `path`.
    pub fn load(path: &Path) -> Result<LabPlan, LabConfigError> {
        LabFile::load(path)?.plan()
    }
}

impl LabFile {
    /// Reads the experiment file at `path` (relative paths in it start
    /// from its folder).
    pub fn load(path: &Path) -> Result<LabFile, LabConfigError> {
        let (text, p) = read_text(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        LabFile::parse(&text, &p, dir)
    }

    /// Parses an experiment file; `origin` names it in errors, `dir` is
    /// where its relative paths start.
    pub fn parse(text: &str, origin: &str, dir: &Path) -> Result<LabFile, LabConfigError> {
        let base = LabConfig::parse(text, origin, dir)?;
        let o: Overrides = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
        table.remove("variant");
        table.remove("sweep");
        Ok(LabFile {
            base,
            variants: o.variants,
            sweep: o.sweep,
            table,
        })
    }

    fn error(&self, key: impl Into<String>, msg: impl Into<String>) -> LabConfigError {
        self.base.error(key, msg)
    }

    /// Every run: each variant with each sweep value, checked and
    /// resolved.
    pub fn plan(&self) -> Result<LabPlan, LabConfigError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, v) in self.variants.iter().enumerate() {
            if v.name.is_empty() || !v.name.chars().all(name_char) {
                return Err(self.error(
                    format!("variant.{i}.name"),
                    format!("{:?} must be letters, digits, '.', '_' or '-'", v.name),
                ));
            }
            if !names.insert(v.name.as_str()) {
                return Err(self.error(
                    format!("variant.{i}.name"),
                    format!("two variants are named {:?}", v.name),
                ));
            }
            for (k, value) in &v.set {
                self.check_override(k, value, &format!("set by variant {}", v.name))?;
            }
        }
        let mut labels = Vec::new();
        if let Some(s) = &self.sweep {
            if s.values.is_empty() {
                return Err(self.error("sweep.values", "needs at least one value"));
            }
            let mut seen = std::collections::BTreeSet::new();
            for value in &s.values {
                let label = value_label(value).ok_or_else(|| {
                    self.error(
                        "sweep.values",
                        format!("{value} is not a number, string or boolean"),
                    )
                })?;
                if !seen.insert(label.clone()) {
                    return Err(self.error("sweep.values", format!("{value} is listed twice")));
                }
                labels.push(label);
            }
            for value in &s.values {
                self.check_override(&s.key, value, &format!("swept to {value}"))?;
            }
        }
        let n = self
            .variants
            .len()
            .max(1)
            .saturating_mul(labels.len().max(1));
        if n > MAX_RUNS {
            return Err(self.error(
                "sweep.values",
                format!("variants x values make {n} runs, above the limit of {MAX_RUNS}"),
            ));
        }

        let variants: Vec<Option<&VariantConfig>> = if self.variants.is_empty() {
            vec![None]
        } else {
            self.variants.iter().map(Some).collect()
        };
        let values: Vec<Option<(&toml::Value, &str)>> = match &self.sweep {
            None => vec![None],
            Some(s) => s
                .values
                .iter()
                .zip(&labels)
                .map(|(v, l)| Some((v, l.as_str())))
                .collect(),
        };
        let key_label = self
            .sweep
            .as_ref()
            .map(|s| sanitize(s.key.rsplit('.').next().unwrap_or(&s.key)));
        let mut runs = Vec::with_capacity(n);
        let mut run_names = std::collections::BTreeSet::new();
        for v in &variants {
            for x in &values {
                let name = match (v, x, &key_label) {
                    (Some(v), Some((_, l)), Some(k)) => format!("{}-{k}={l}", v.name),
                    (Some(v), _, _) => v.name.clone(),
                    (None, Some((_, l)), Some(k)) => format!("{k}={l}"),
                    _ => sanitize(&self.base.name),
                };
                if !run_names.insert(name.clone()) {
                    return Err(self.error(
                        "sweep.values",
                        format!("two runs would be named {name}: make the values distinct"),
                    ));
                }
                let mut table = self.table.clone();
                let mut keys = Vec::new();
                if let Some(v) = v {
                    for (k, value) in &v.set {
                        set_key(&mut table, k, value.clone()).map_err(|m| self.error(k, m))?;
                        keys.push(k.as_str());
                    }
                }
                if let (Some((value, _)), Some(s)) = (x, &self.sweep) {
                    set_key(&mut table, &s.key, (*value).clone())
                        .map_err(|m| self.error(&s.key, m))?;
                    keys.push(s.key.as_str());
                }
                let mut config: LabConfig =
                    toml::Value::Table(table)
                        .try_into()
                        .map_err(|e: toml::de::Error| {
                            self.error(keys.join(", "), e.message().to_string())
                                .in_run(&name)
                        })?;
                config.origin = self.base.origin.clone();
                config.dir = self.base.dir.clone();
                let resolved = config.resolve().map_err(|e| {
                    if v.is_some() || x.is_some() {
                        e.in_run(&name)
                    } else {
                        e
                    }
                })?;
                runs.push(Run {
                    name,
                    variant: v.map(|v| v.name.clone()),
                    sweep_value: x.map(|(value, _)| value.clone()),
                    config,
                    resolved,
                });
            }
        }
        Ok(LabPlan {
            name: self.base.name.clone(),
            description: self.base.description.clone(),
            sweep_key: self.sweep.as_ref().map(|s| s.key.clone()),
            variants: self.variants.iter().map(|v| v.name.clone()).collect(),
            runs,
        })
    }

    /// Checks that `key` can be set to `value` on its own: a key of the
    /// schema, a value of its type.
    fn check_override(
        &self,
        key: &str,
        value: &toml::Value,
        what: &str,
    ) -> Result<(), LabConfigError> {
        let first = key.split('.').next().unwrap_or("");
        if matches!(first, "name" | "variant" | "sweep") {
            return Err(self.error(key, format!("{first} cannot be set ({what})")));
        }
        let mut table = self.table.clone();
        set_key(&mut table, key, value.clone())
            .map_err(|m| self.error(key, format!("{m} ({what})")))?;
        toml::Value::Table(table)
            .try_into::<LabConfig>()
            .map_err(|e| self.error(key, format!("{} ({what})", e.message())))?;
        Ok(())
    }
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// `s` with every character a run name does not take replaced by `_`.
fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if name_char(c) || matches!(c, '=' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "run".into()
    } else {
        out
    }
}

/// How a sweep value appears in run names; `None` for a value that is
/// not a number, string or boolean.
fn value_label(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(sanitize(&f.to_string())),
        toml::Value::String(s) => Some(sanitize(s)),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Sets the dotted `key` of `table` to `value` (see the module docs).
pub(crate) fn set_key(
    table: &mut toml::Table,
    key: &str,
    value: toml::Value,
) -> Result<(), String> {
    let path: Vec<&str> = key.split('.').collect();
    if path.iter().any(|s| s.is_empty()) {
        return Err(format!("{key:?} is not a dotted key"));
    }
    set_in_table(table, &path, 0, value)
}

/// Sets `path[depth..]` of `t`, the table at `path[..depth]`.
fn set_in_table(
    t: &mut toml::Table,
    path: &[&str],
    depth: usize,
    value: toml::Value,
) -> Result<(), String> {
    let seg = path[depth];
    if depth + 1 == path.len() {
        match t.get_mut(seg) {
            Some(old) => merge(old, value),
            None => {
                t.insert(seg.to_string(), value);
            }
        }
        return Ok(());
    }
    let child = t
        .entry(seg.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    set_in_value(child, path, depth + 1, value)
}

/// Sets `path[depth..]` of `node`, the value at `path[..depth]`.
fn set_in_value(
    node: &mut toml::Value,
    path: &[&str],
    depth: usize,
    value: toml::Value,
) -> Result<(), String> {
    let here = path[..depth].join(".");
    match node {
        toml::Value::Table(t) => set_in_table(t, path, depth, value),
        toml::Value::Array(a) => {
            let seg = path[depth];
            let i: usize = seg.parse().map_err(|_| {
                format!("{here} is a list: its entries are numbered from 0 ({here}.0)")
            })?;
            let n = a.len();
            let entry = a.get_mut(i).ok_or_else(|| {
                format!("{here} has {n} entries (numbered from 0), so no {here}.{i}")
            })?;
            if depth + 1 == path.len() {
                merge(entry, value);
                Ok(())
            } else {
                set_in_value(entry, path, depth + 1, value)
            }
        }
        other => Err(format!("{here} is a {}, not a table", other.type_str())),
    }
}

/// Puts `value` in place of `old`: a table merges into a table, anything
/// else replaces.
fn merge(old: &mut toml::Value, value: toml::Value) {
    match (old, value) {
        (toml::Value::Table(old), toml::Value::Table(new)) => {
            for (k, v) in new {
                match old.get_mut(&k) {
                    Some(o) => merge(o, v),
                    None => {
                        old.insert(k, v);
                    }
                }
            }
        }
        (old, value) => *old = value,
    }
}
