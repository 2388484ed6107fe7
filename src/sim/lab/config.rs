//! The experiment description of `ferroce lab`: the TOML schema and the
//! names in it.
//!
//! This module owns the file format ([`LabConfig`] and its tables, the
//! `[[variant]]` and `[sweep]` tables), its errors, the unit conversions
//! of its values and the resolved topology ([`TopologySpec`]). Above it:
//! [`super::workload`] makes the flows, [`super::resolve`] checks every
//! value and resolves one run ([`super::resolve::Resolved`]: rates in bits
//! per second, times in nanoseconds, sizes in bytes), and
//! [`super::plan`] expands a file into runs
//! ([`super::plan::LabFile::plan`]: variants x sweep values, each applied
//! to the file's TOML before it is read, so any key can be varied).
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
//! kind = "incast"                # incast | dumbbell | leaf-spine | custom | fat-tree | hpcc
//! senders = 16                   # incast: hosts "recv" and "s0".."s15" on switch "sw"
//! # pairs = 4                    # dumbbell: "L0".."L3" on switch "left", "R0".."R3" on
//! #                              #   "right", one fabric link left <-> right
//! # leaves = 4                   # leaf-spine: switches "leaf0".., "spine0"..; hosts
//! # spines = 2                   #   "h<leaf>-<i>"; every leaf linked to every spine
//! # hosts_per_leaf = 8
//! # k = 4                        # fat-tree: a k-ary fat tree (k even), or the five keys
//! # pods = 5                     #   below; switches "tor0".., "agg0".., "core0"..; hosts
//! # tors_per_pod = 4             #   "h0".. ToR by ToR; groups "tor<N>", "pod<P>"; each ToR
//! # aggs_per_pod = 4             #   linked to its pod's aggs, agg j of each pod to cores
//! # cores = 16                   #   j*c..(j+1)*c-1, c = cores / aggs_per_pod (the HPCC
//! # hosts_per_tor = 16           #   paper's 320 hosts: these five values)
//! # file = "topology.txt"        # hpcc: the HPCC simulator's topology file (relative to
//! #                              #   this file's folder); nodes "n<id>", a group per switch
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
//! scale_per_25g = false          # true: kmin_kb / kmax_kb are per 25 Gb/s of each
//! #                              #   egress port's rate (absent: 12.5 / 400 KB per 25 Gb/s)
//! [switch.pfc]                   # absent or enabled = false: lossy
//! enabled = true
//! priorities = [3]
//! threshold = "static"           # "static": xoff_kb / xon_kb; "dynamic": XOFF at
//! #                              #   alpha x the free shared buffer (needs buffer_kb)
//! xoff_kb = 400                  # static only
//! xon_kb = 350                   # static only
//! alpha = 0.125                  # dynamic only: 1/2^k, k in 0..=16
//! resume_offset_kb = 3.072       # dynamic only: XON this far below the threshold
//! headroom_kb = 100
//! quanta = 65535                 # pause time sent with XOFF, 512-bit times
//!
//! [transport]
//! cc = "dcqcn-cx"                # any of ferroce::cc::CcConfig::NAMES, or a .toml file
//! ecn = true                     # send ECN-capable
//! traffic_class = 106            # DSCP 26, ECT(0)
//! priority = 3                   # 802.1p priority of data
//! cnp_priority = 6               # 802.1p priority of CNPs
//! # min_time_between_cnps_us = 4 # absent: 50 for dcqcn-paper, 4 otherwise
//! message_kb = 64                # long flows are posted as WRITEs of this size
//! window = 8                     # WRITEs outstanding per flow
//! timeout = 14                   # ACK timeout exponent (4.096 us x 2^timeout)
//! retry_cnt = 7
//! icrc_offload = true            # the NICs' ICRC: neither computed nor checked; frames
//! #                              #   written to a pcap get their real one
//! place_writes = false           # WRITE payloads checked, not copied into their region
//! #                              #   (`ferroce lab --full-checks` turns on both checks)
//! recovery = "gbn"               # loss recovery: gbn (go-back-N) or sr (selective repeat,
//! #                              #   IRN-style: every host of the lab is ferroce)
//! rto_low_us = 100               # sr: IRN's short timeout, with at most 3 packets in flight
//!
//! [[workload]]                   # one or more; see `workload` for each kind: long, incast,
//! #                              #   all-to-all, allreduce, cdf, flow-file, poisson-incast
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
//! # fct_tags = ["cdf"]           # absent: every flow; the flows of the HPCC-style
//! #                              #   FCT table (`fct-hpcc.csv`), by workload tag
//! fct_bin_pct = 5                # that table's bins: this % of the flows each
//! throughput_flows = 1000        # per-flow throughput series: at most this many flows
//! # throughput_tags = ["long"]   # absent: flows of any tag
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
use crate::config::FileError;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

mod fattree;
mod hpcc_files;
#[cfg(test)]
mod tests;
mod topology;

pub use hpcc_files::{
    load_flow_list, parse_flow_list, HpccFlow, HpccLink, HpccTopology, LineError, MAX_HPCC_FILE,
};
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
    /// The file could not be read, or is not TOML of this schema.
    #[error(transparent)]
    File(#[from] FileError),
    /// A value out of range or inconsistent with another; `key` is its
    /// dotted path, `run` the run whose settings it is when the file has
    /// variants or a sweep.
    #[error("{path}: {}{key}: {msg}", run_prefix(.run))]
    Invalid {
        /// The experiment file, as it is named in messages.
        path: String,
        /// The run whose settings hold the value, when the file has variants or a sweep.
        run: Option<String>,
        /// The value's dotted key (`workload.0.hosts`).
        key: String,
        /// What is wrong with the value.
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

    pub(crate) fn in_run(self, name: &str) -> LabConfigError {
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
    /// `name` (required): the experiment's name, and its run's name when it has no variants or
    /// sweep.
    pub name: String,
    /// `description` (default empty): one paragraph for the summary.
    #[serde(default)]
    pub description: String,
    /// `seed` (default 1): seeds the workloads' random streams and the simulated fabric.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The posting phase: workloads start flows within it; the run then
    /// drains.
    #[serde(default = "default_duration_us")]
    pub duration_us: f64,
    /// The longest the run may drain; absent: the runner's bound.
    #[serde(default)]
    pub drain_limit_us: Option<f64>,
    /// `queue_sample_ns` (default 1000): how often egress queue depths are sampled,
    /// nanoseconds.
    #[serde(default = "default_queue_sample_ns")]
    pub queue_sample_ns: f64,
    /// `rate_sample_us` (default 10): how often each flow's goodput and controller rate are
    /// sampled, microseconds.
    #[serde(default = "default_rate_sample_us")]
    pub rate_sample_us: f64,
    /// The `[topology]` table (required).
    pub topology: TopologyConfig,
    /// The `[switch]` table (default: [`SwitchConfig::default`]).
    #[serde(default)]
    pub switch: SwitchConfig,
    /// The `[transport]` table (default: [`TransportConfig::default`]).
    #[serde(default)]
    pub transport: TransportConfig,
    /// The `[[workload]]` tables, in file order (at least one).
    #[serde(rename = "workload")]
    pub workloads: Vec<WorkloadConfig>,
    /// The `[[link_event]]` tables, in file order (default none).
    #[serde(default, rename = "link_event")]
    pub link_events: Vec<LinkEventConfig>,
    /// The `[[route]]` tables: static routes, in file order (default none).
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    /// The `[output]` table (default: [`OutputConfig::default`]).
    #[serde(default)]
    pub output: OutputConfig,
    /// Read by [`super::plan::LabFile`]; here so that the file reads as one table.
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
    /// A three-tier fat tree: pods of ToR and aggregation switches under
    /// core switches (`k`, or `pods`, `tors_per_pod`, `aggs_per_pod`,
    /// `cores`, `hosts_per_tor`).
    FatTree,
    /// A topology file of the HPCC ns-3 simulator (`file`).
    Hpcc,
}

impl TopologyKind {
    /// Its name in the file.
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::Incast => "incast",
            TopologyKind::Dumbbell => "dumbbell",
            TopologyKind::LeafSpine => "leaf-spine",
            TopologyKind::Custom => "custom",
            TopologyKind::FatTree => "fat-tree",
            TopologyKind::Hpcc => "hpcc",
        }
    }
}

/// A link's rate and one-way delay.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkParams {
    /// `rate_gbps` (default 100): the link's rate, Gb/s.
    pub rate_gbps: f64,
    /// `delay_us` (default 1.0): the link's one-way propagation delay, microseconds.
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
    /// `kind` (required): the topology's shape.
    pub kind: TopologyKind,
    /// `senders`: incast only (required there): the number of sending hosts.
    pub senders: Option<usize>,
    /// `pairs`: dumbbell only (required there): the hosts on each side.
    pub pairs: Option<usize>,
    /// `leaves`: leaf-spine only (required there): the number of leaf switches.
    pub leaves: Option<usize>,
    /// `spines`: leaf-spine only (required there): the number of spine switches.
    pub spines: Option<usize>,
    /// `hosts_per_leaf`: leaf-spine only (required there): the hosts on each leaf.
    pub hosts_per_leaf: Option<usize>,
    /// `switches`: custom only (at least one): the switch names.
    pub switches: Option<Vec<String>>,
    /// `hosts`: custom only (at least one): the hosts and the switch each is attached to.
    pub hosts: Option<Vec<CustomHost>>,
    /// `links`: custom only (default none): the switch-to-switch links.
    pub links: Option<Vec<CustomLink>>,
    /// `k`: fat-tree only: shorthand for a k-ary fat tree (k even: k pods
    /// of k/2 ToRs and k/2 aggregation switches, (k/2)^2 cores, k/2 hosts
    /// per ToR); instead of the five keys below.
    pub k: Option<usize>,
    /// `pods`: fat-tree only (without `k`): the number of pods.
    pub pods: Option<usize>,
    /// `tors_per_pod`: fat-tree only (without `k`): edge (ToR) switches per pod.
    pub tors_per_pod: Option<usize>,
    /// `aggs_per_pod`: fat-tree only (without `k`): aggregation switches per pod.
    pub aggs_per_pod: Option<usize>,
    /// `cores`: fat-tree only (without `k`): core switches, a multiple of
    /// `aggs_per_pod`.
    pub cores: Option<usize>,
    /// `hosts_per_tor`: fat-tree only (without `k`): the hosts on each ToR.
    pub hosts_per_tor: Option<usize>,
    /// `file`: hpcc only (required there): the HPCC simulator's topology
    /// file, relative to the experiment's folder.
    pub file: Option<String>,
    /// Extra groups of hosts (any kind): name -> hosts or groups the
    /// topology defines.
    #[serde(default)]
    pub groups: BTreeMap<String, Names>,
    /// Every host's link to its switch.
    #[serde(default)]
    pub host_link: LinkParams,
    /// Every switch-to-switch link; absent: `host_link`.
    pub fabric_link: Option<LinkParams>,
    /// `mtu` (default 4096): the path MTU, bytes: 256, 512, 1024, 2048 or 4096.
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
    /// `name`: the host's name.
    pub name: String,
    /// `switch`: the name of the switch it is attached to.
    pub switch: String,
    /// `rate_gbps`: its link's rate, Gb/s (absent: `host_link`'s).
    pub rate_gbps: Option<f64>,
    /// `delay_us`: its link's one-way delay, microseconds (absent: `host_link`'s).
    pub delay_us: Option<f64>,
}

/// A link between two switches of a custom topology; defaults to
/// `fabric_link`. Two switches may have several (parallel) links.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CustomLink {
    /// `a`: the name of one of the link's switches.
    pub a: String,
    /// `b`: the name of the other switch.
    pub b: String,
    /// `rate_gbps`: the link's rate, Gb/s (absent: `fabric_link`'s).
    pub rate_gbps: Option<f64>,
    /// `delay_us`: the link's one-way delay, microseconds (absent: `fabric_link`'s).
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
    /// `enabled` (default true): false is as if the table were absent (no marking).
    pub enabled: bool,
    /// Absent: 50 KB scaled by the host link's rate over 100 Gb/s.
    pub kmin_kb: Option<f64>,
    /// Absent: 1600 KB scaled by the host link's rate over 100 Gb/s.
    pub kmax_kb: Option<f64>,
    /// `pmax` (default 1.0): the marking probability at Kmax, in [0, 1].
    pub pmax: f64,
    /// `at_dequeue` (default true): decide as a frame leaves the queue rather than as it
    /// arrives.
    pub at_dequeue: bool,
    /// `scale_per_25g` (default false): `kmin_kb` and `kmax_kb` are per 25 Gb/s of each
    /// egress port's rate, as the HPCC simulator's `KMIN_MAP` / `KMAX_MAP` scale them.
    pub scale_per_25g: bool,
}

impl Default for EcnConfig {
    fn default() -> Self {
        EcnConfig {
            enabled: true,
            kmin_kb: None,
            kmax_kb: None,
            pmax: 1.0,
            at_dequeue: true,
            scale_per_25g: false,
        }
    }
}

/// The `[switch.pfc]` table (IEEE 802.1Qbb).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcConfig {
    /// `enabled` (default true): false is as if the table were absent (lossy).
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
    /// `threshold` (default `"static"`): fixed `xoff_kb` / `xon_kb`, or `"dynamic"`.
    pub threshold: PfcThreshold,
    /// `alpha` (default 0.125): dynamic XOFF at this share of the free shared buffer; a
    /// power of two, 1 to 1/65536.
    pub alpha: f64,
    /// `resume_offset_kb` (default 3.072, 3 KiB): dynamic XON this far below the threshold.
    pub resume_offset_kb: f64,
}

/// `switch.pfc.threshold`: how XOFF and XON are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PfcThreshold {
    /// `static`: at `xoff_kb`, resuming at `xon_kb`.
    #[default]
    Static,
    /// `dynamic`: at `alpha` of the free shared buffer, resuming
    /// `resume_offset_kb` below it.
    Dynamic,
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
            threshold: PfcThreshold::Static,
            alpha: 0.125,
            resume_offset_kb: 3.072,
        }
    }
}

/// The `[transport]` table: every device's RC and congestion settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// A rate control of `CcConfig::NAMES`, or a `.toml` parameter file
    /// (relative: to the experiment's folder if it is there, else to the
    /// working directory).
    pub cc: String,
    /// `ecn` (default true): send packets ECN-capable (ECT(0)) when their traffic class does
    /// not.
    pub ecn: bool,
    /// `traffic_class` (default 106: DSCP 26, ECT(0)): the IP traffic class of every QP's
    /// packets.
    pub traffic_class: u8,
    /// 802.1p priority of data.
    pub priority: u8,
    /// 802.1p priority of CNPs.
    pub cnp_priority: u8,
    /// Absent: the rate control's (`default_cnp_interval`).
    pub min_time_between_cnps_us: Option<f64>,
    /// `message_kb` (default 64): the largest WRITE a flow posts, KB.
    pub message_kb: f64,
    /// `window` (default 8): the WRITEs a flow keeps outstanding.
    pub window: u32,
    /// `timeout` (default 14): the local ACK timeout exponent, 4.096 us x 2^timeout
    /// (IBTA §9.7.6.1.3; 1..=31).
    pub timeout: u8,
    /// `retry_cnt` (default 7): retries after an ACK timeout or a PSN sequence error NAK
    /// before the WRITE fails with `RetryExcErr` (0..=7).
    pub retry_cnt: u8,
    /// `icrc_offload` (default true): the ICRC is left to the NICs, as hardware computes and
    /// checks it: not computed by senders nor checked by receivers
    /// (`crate::transport::Offload::icrc`).
    pub icrc_offload: bool,
    /// `place_writes` (default false): WRITE payloads are copied into their target regions;
    /// false: checked but not copied, as nothing in the lab reads them
    /// (`crate::transport::Offload::discard_write_payloads`).
    pub place_writes: bool,
    /// `recovery` (default "gbn"): every QP's loss recovery, "gbn" (go-back-N, IBTA
    /// §9.7.5) or "sr" (selective repeat as IRN runs it, `crate::transport::selective`);
    /// with sr, `window` x the packets of a message must stay within 4096 packets.
    pub recovery: crate::transport::Recovery,
    /// `rto_low_us` (default 100): with `recovery = "sr"`, IRN's short retransmission
    /// timeout, used while at most 3 packets are in flight (`QpConfig::rto_low_us`).
    pub rto_low_us: u32,
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
            icrc_offload: true,
            place_writes: false,
            recovery: crate::transport::Recovery::GoBackN,
            rto_low_us: crate::transport::QpConfig::default().rto_low_us,
        }
    }
}

/// What a workload generates (see `workload` for each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// `long`: flows that post WRITEs until they stop, of no set size.
    Long,
    /// `incast`: every sender sends one size to one receiver, optionally repeated.
    Incast,
    /// `all-to-all`: every host sends one size to every other.
    AllToAll,
    /// `allreduce`: a ring all-reduce of 2(N-1) steps, a host's step waiting for its
    /// predecessor's previous one.
    Allreduce,
    /// `cdf`: Poisson arrivals at a load, sizes drawn from a CDF file.
    Cdf,
    /// `flow-file`: the flows of a flow-list file of the HPCC simulator.
    FlowFile,
    /// `poisson-incast`: incasts of `fan_in` senders to one receiver,
    /// arriving as a Poisson process at a load.
    PoissonIncast,
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
            WorkloadKind::FlowFile => "flow-file",
            WorkloadKind::PoissonIncast => "poisson-incast",
        }
    }
}

/// One `[[workload]]` table. Which keys apply depends on `kind`
/// (`workload` lists them); the others must be absent.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// `kind` (required): what the workload generates.
    pub kind: WorkloadKind,
    /// The label of its flows; absent: the kind's name.
    pub tag: Option<String>,
    /// `from`: long: the sending hosts or groups (required).
    pub from: Option<Names>,
    /// `to`: long: the receiving hosts (required); incast: the one receiver (default: the group
    /// `receiver`).
    pub to: Option<Names>,
    /// `senders`: incast: the senders (default: the group `senders`).
    pub senders: Option<Names>,
    /// `hosts`: all-to-all, allreduce (the ring, in order) and cdf: the hosts (default `all`).
    pub hosts: Option<Names>,
    /// `size_kb`: incast and all-to-all: each flow's size; allreduce: the vector, of which a
    /// step sends 1/N; KB (required).
    pub size_kb: Option<f64>,
    /// `start_us` (default 0): when its first flows start, microseconds (before `duration_us`).
    pub start_us: Option<f64>,
    /// `stop_us`: long and cdf: when they stop, microseconds (default: the end of the posting
    /// phase).
    pub stop_us: Option<f64>,
    /// `repeat_us`: incast: the period of its repetitions, microseconds (absent: once);
    /// allreduce: the least time between the starts of its repetitions (absent: back to back).
    pub repeat_us: Option<f64>,
    /// `count`: incast and allreduce with `repeat_us`: the most repetitions (default: as many
    /// as start within the posting phase); allreduce without it: the repetitions (default 1).
    pub count: Option<u64>,
    /// `file`: cdf: the flow-size CDF file; flow-file: the flow list; relative to the
    /// experiment's folder (required).
    pub file: Option<String>,
    /// `load`: cdf: the share of each host's link rate offered; poisson-incast: the incast
    /// bytes' share of the summed link rates of `hosts`; in (0, 1] (required).
    pub load: Option<f64>,
    /// `max_flows`: cdf: the arrivals kept at most (default
    /// [`DEFAULT_MAX_FLOWS`](super::workload::DEFAULT_MAX_FLOWS)).
    pub max_flows: Option<u64>,
    /// `fan_in`: poisson-incast: the senders of each incast (required).
    pub fan_in: Option<u64>,
    /// `time_zero_s`: flow-file: the time of the file, seconds, that the
    /// run's `start_us` stands for (default 0).
    pub time_zero_s: Option<f64>,
}

/// One `[[link_event]]`: a switch-to-switch link goes down or up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEventConfig {
    /// `at_us`: when the link changes, microseconds from the run's start.
    pub at_us: f64,
    /// `link`: the switch-to-switch link that changes.
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
    /// `a`: the name of one of the link's switches.
    pub a: String,
    /// `b`: the name of the other switch.
    pub b: String,
    /// `index` (default 0): which of their parallel links, in the order of
    /// [`TopologySpec::links`].
    #[serde(default)]
    pub index: usize,
}

/// One `[[route]]`: at `switch`, frames for `dst` leave towards `via`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// `switch`: the name of the switch the route is set on.
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
    /// `plots` (default true): read but not acted on; `ferroce lab --no-plots` decides.
    pub plots: bool,
    /// `queues` (default `"bottleneck"`): which switch egress queues to record.
    pub queues: QueueChoice,
    /// `fct_tags` (default: every flow): the workload tags whose flows the HPCC-style FCT
    /// table takes.
    pub fct_tags: Option<Names>,
    /// `fct_bin_pct` (default 5): that table's bins, each this percentage of the flows
    /// sorted by size (1..=100).
    pub fct_bin_pct: u32,
    /// `throughput_flows` (default 1000): the most flows whose throughput is written
    /// (`flow-throughput.csv`), the first by id; 0: none.
    pub throughput_flows: usize,
    /// `throughput_tags` (default: any): only flows of these workload tags.
    pub throughput_tags: Option<Names>,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            plots: true,
            queues: QueueChoice::Named("bottleneck".into()),
            fct_tags: None,
            fct_bin_pct: 5,
            throughput_flows: 1000,
            throughput_tags: None,
        }
    }
}

/// `output.queues` as written: `"bottleneck"`, `"all"` or a list of
/// `"switch:port"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum QueueChoice {
    /// `"bottleneck"` or `"all"` (any other string is refused when resolved).
    Named(String),
    /// Ports named `switch:N` or `switch:neighbour[#n]`.
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
    /// `name`: the variant's name, which starts its runs' names.
    pub name: String,
    /// `set` (default none): dotted keys of the file and the values they take.
    #[serde(default)]
    pub set: toml::Table,
}

/// The `[sweep]` table: one key and its values.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// `key`: the dotted key swept (`topology.senders`).
    pub key: String,
    /// `values`: the key's values, a run each (for every variant).
    pub values: Vec<toml::Value>,
}

/// A switch's egress port: `port` indexes [`TopologySpec::ports`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortRef {
    /// The switch: its index in [`TopologySpec::switches`].
    pub switch: usize,
    /// The port: its index in that switch's [`TopologySpec::ports`].
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
        TopologySpec::build(&self.topology, &self.dir).map_err(|e| self.invalid(e))
    }
}

pub(crate) fn parse_error(origin: &str, e: toml::de::Error) -> LabConfigError {
    FileError::parse(origin, e).into()
}
