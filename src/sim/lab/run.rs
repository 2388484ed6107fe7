//! One lab run: the fabric a [`Resolved`] describes, a transport device on
//! every host, the workload's flows started on time, virtual time driven
//! to the end, and what happened measured.
//!
//! # What runs
//!
//! Every host is a [`Device`](crate::transport::Device) with the run's rate control, ECN and CNP
//! settings, behind a NIC that holds two frames ready for its wire (the
//! rest waits in the QPs, where the pacer is), and leaves to that NIC, by
//! default, what hardware does: the ICRC (neither computed nor checked)
//! and the placing of WRITE payloads (checked, not copied), which change
//! nothing on the simulated wire ([`crate::transport::Offload`];
//! `transport.icrc_offload`, `transport.place_writes`). Every switch has the run's
//! shared buffer, strict priorities, RED marking on its egress queues and,
//! when set, PFC. Links are built in a fixed order (each switch's hosts,
//! then the switch-to-switch links in file order), so port numbers follow
//! from the description.
//!
//! Each flow gets its own RC QP pair when it starts (at its start time,
//! once the flows it waits for have completed) and sends RDMA WRITEs of
//! at most `message_bytes`, `window` of them outstanding, into a region of
//! the destination. A finite flow completes when its last WRITE is
//! acknowledged (its flow completion time runs from its start to then); a
//! long flow posts until its stop time or the end of the posting phase.
//!
//! # What is measured
//!
//! Per flow: bytes completed, its FCT and the ideal one (alone on its
//! path, [`ideal_fct_ns`]); per long flow: goodput over the second half of
//! the posting phase and the rate its controller had, sampled every
//! `rate_sample_ns`. Per switch egress port: the queue, sampled every
//! `queue_sample_ns`. Per link direction: PFC frames and paused time.
//! Totals: ECN marks, CNPs, drops of every kind, retransmissions, ACK
//! timeouts, completion errors, deadlocks, and the simulator's events per
//! wall second. Per all-reduce: its steps' and repetitions' times against
//! the idle fabric's ([`super::collective`]), from the flows' outcomes.

#![deny(unsafe_code)]
use super::collective::{CollectiveSummary, StepRecord};
use super::config::{LinkSpec, NextHop, TopologySpec};
use super::fct::FctBin;
use super::progress::Progress;
use super::resolve::Resolved;
use super::throughput::{ThroughputLog, ThroughputSample};
use super::workload::{ideal_fct_ns, slowdown_by_bucket, FctSample, FlowSpec, SlowdownStats};
use crate::backend::fabric::{
    self as fabric, ChannelId, Link, LinkConfig, PfcConfig as SimPfc, SimError,
    SwitchConfig as SimSwitch, SwitchId,
};
use crate::cc::earlier;
use crate::host::pump::MAX_FRAME;
use crate::sim::net::SimNet;
use crate::sim::stats::{jain_index, percentile};
use crate::time::{Duration, Instant};
use crate::transport::connect::ConnectParams;
use crate::transport::mr::SharedMemory;
use crate::transport::{
    Access, CqId, DeviceConfig, MrKeys, MrSpec, Offload, Payload, QpCaps, QpCounters, SendOp,
    SendWr, Sge, Wc, WcStatus,
};
use crate::wire::MacAddr;
use serde::{Deserialize, Serialize};

/// Frames a host's NIC holds ready for its wire.
const NIC_RING_FRAMES: usize = 2;
/// The most queue samples a run keeps (over every port).
pub const MAX_QUEUE_SAMPLES: u64 = 50_000_000;
/// How long a run may drain after its posting phase when its file sets
/// no limit.
pub const DEFAULT_DRAIN_LIMIT: Duration = Duration::from_millis(200);

/// Why a run could not be built or driven.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The simulated fabric refused a switch, link or route: its message.
    #[error("building the fabric: {0}")]
    Fabric(String),
    /// A device refused a protection domain, CQ, memory region or QP, or the MTU is not a path
    /// MTU: the message.
    #[error("setting up the transport: {0}")]
    Transport(String),
    /// Recording the chosen queues would keep more than [`MAX_QUEUE_SAMPLES`] samples.
    #[error(
        "{samples} queue samples ({ports} ports x {per_port}) is above the limit of \
         {MAX_QUEUE_SAMPLES}: raise queue_sample_ns or record fewer queues"
    )]
    TooManySamples {
        /// The samples the run would keep.
        samples: u64,
        /// The ports it would record.
        ports: usize,
        /// The samples of each port over the posting phase.
        per_port: u64,
    },
}

fn fabric_err(e: SimError) -> RunError {
    RunError::Fabric(e.to_string())
}

fn transport_err(e: crate::transport::Error) -> RunError {
    RunError::Transport(e.to_string())
}

/// The name a run's summary gives its rate control: the algorithm's, and
/// `timely-original` for TIMELY without the CoNEXT'16 patch.
pub fn cc_label(cc: &crate::cc::CcConfig) -> String {
    match cc {
        crate::cc::CcConfig::Timely(p) if !p.patched => "timely-original".into(),
        c => c.name().into(),
    }
}

/// A host's MAC address: 02:00:00:00 and its number from 1.
pub fn host_mac(i: usize) -> MacAddr {
    let n = i + 1;
    MacAddr([2, 0, 0, 0, (n >> 8) as u8, n as u8])
}

/// A host's IPv4 address: the `i + 1`-th of 198.18.0.0/15.
pub fn host_ip(i: usize) -> core::net::Ipv4Addr {
    core::net::Ipv4Addr::from(u32::from(core::net::Ipv4Addr::new(198, 18, 0, 0)) + i as u32 + 1)
}

/// One switch egress port as the run built it.
#[derive(Debug, Clone, Serialize)]
pub struct PortInfo {
    /// "switch:port -> peer", e.g. `leaf0:9->spine1`.
    pub name: String,
    /// The switch: an index in [`TopologySpec::switches`].
    pub switch: usize,
    /// Its number on that switch, as in [`TopologySpec::ports`].
    pub port: usize,
    /// The fabric channel of its egress direction.
    #[serde(skip)]
    pub egress: ChannelId,
}

/// A flow's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct FlowResult {
    /// The flow's index in the run's list ([`FlowSpec::id`]).
    pub id: usize,
    /// The sending host: an index in [`TopologySpec::hosts`].
    pub src: usize,
    /// The receiving host: an index in [`TopologySpec::hosts`].
    pub dst: usize,
    /// The index of its `[[workload]]`.
    pub workload: usize,
    /// Its label: its workload's `tag`, or the kind's name.
    pub tag: String,
    /// Its size; `None` for a long flow.
    pub bytes: Option<u64>,
    /// Bytes of its WRITEs that completed successfully, drain included.
    pub bytes_completed: u64,
    /// When it started (QP created, first WRITE posted); `None`: never.
    pub start_ns: Option<u64>,
    /// When its last WRITE completed (finite flows).
    pub fct_ns: Option<u64>,
    /// Its FCT alone on its path ([`ideal_fct_ns`]), nanoseconds; `None` for a long flow.
    pub ideal_fct_ns: Option<u64>,
    /// Long flows: goodput over the second half of the posting phase.
    pub goodput_second_half_bps: Option<f64>,
    /// Packets its sending QP sent again (go-back-N).
    pub retransmitted_pkts: u64,
    /// CNPs its sending QP's reaction point handled.
    pub cnp_handled: u64,
    /// Its WRITEs that completed with an error status.
    pub errors: u64,
}

/// Queue statistics of one port over the posting phase (bytes).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct QueueSummary {
    /// The median sample (nearest rank), bytes.
    pub p50: u64,
    /// The 99th percentile sample (nearest rank), bytes.
    pub p99: u64,
    /// The largest sample, bytes.
    pub max: u64,
}

/// PFC activity of one link direction.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PauseSummary {
    /// The link direction, `from->to` in topology names (switch ends as `switch:port`).
    pub name: String,
    /// PFC frames sent over it that its far end consumed.
    pub frames_received: u64,
    /// How long PFC held it paused, summed over priorities, nanoseconds.
    pub paused_ns: u64,
}

/// What one run measured, as its `summary.json` holds it (and the merge
/// of a split experiment reads it back). The wall-clock figures are not
/// written there: they differ from one run to the next, and go to the
/// run's `timing.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's name (empty until the experiment sets it).
    pub name: String,
    /// The posting phase, nanoseconds.
    pub duration_ns: u64,
    /// The virtual time at which the run ended, nanoseconds.
    pub virtual_ns: u64,
    /// Every started flow completed (long flows: stopped and drained).
    pub drained: bool,
    /// Why it ended without draining (a PFC deadlock, the drain limit, nothing left to happen,
    /// time not advancing); `None` when it drained.
    pub stopped: Option<String>,
    /// The flows the workloads made.
    pub flows: usize,
    /// The flows that started.
    pub flows_started: usize,
    /// Sized flows that completed, and long flows idle and unfailed once the run drained.
    pub flows_completed: usize,
    /// Sum of every long flow's second-half goodput.
    pub long_goodput_bps: f64,
    /// Jain's index over the long flows' second-half goodputs.
    pub long_jain: Option<f64>,
    /// Goodput per workload over the posting phase: bytes completed by its
    /// flows in it, in bits per second.
    pub workload_goodput_bps: Vec<f64>,
    /// FCT slowdowns of the completed sized flows, per size bucket in
    /// [`SizeBucket::ALL`](super::workload::SizeBucket::ALL) order.
    pub fct: Vec<SlowdownStats>,
    /// The same flows (of `[output] fct_tags`) as the HPCC simulator's
    /// scripts bin them ([`super::fct`]).
    pub fct_hpcc: Vec<FctBin>,
    /// The rate control (its name; `timely-original` for TIMELY without
    /// the CoNEXT'16 patch).
    pub cc: String,
    /// Controllers' RTT samples over the second half; `None` when no
    /// controller reported one.
    pub rtt_second_half: Option<RttSummary>,
    /// The port whose queue had the highest p99, and its figures.
    pub hot_port: Option<String>,
    /// That port's frame bytes sent over the second half, over its line
    /// rate's (0 to 1).
    pub hot_port_utilisation: Option<f64>,
    /// That port's queue over the posting phase.
    pub queue: QueueSummary,
    /// The same port over the second half of the posting phase (the
    /// steady state, past the start's transient).
    pub queue_second_half: QueueSummary,
    /// Frames the switches' egress ports marked CE.
    pub ecn_marked: u64,
    /// CNPs the hosts' notification points sent.
    pub cnp_sent: u64,
    /// CNPs the hosts' reaction points handled.
    pub cnp_handled: u64,
    /// Frames the switches dropped: shared buffer, headroom, egress
    /// drop-tail, down links, no route, TTL expired.
    pub drops: u64,
    /// Of `drops`: by the shared buffer (lossy priorities).
    pub drops_shared_buffer: u64,
    /// Of `drops`: past PFC headroom (lossless priorities).
    pub drops_headroom: u64,
    /// Of `drops`: by an egress port's drop-tail limit.
    pub drops_egress: u64,
    /// Of `drops`: on links that were down.
    pub drops_link_down: u64,
    /// Of `drops`: for want of a route.
    pub drops_no_route: u64,
    /// Of `drops`: with their TTL / hop limit run out.
    pub drops_ttl: u64,
    /// The buffer drops (shared buffer, headroom, egress drop-tail) by
    /// priority: data (3) or CNPs (6), say.
    pub drops_by_priority: [u64; 8],
    /// PFC frames received, over every link direction.
    pub pfc_frames: u64,
    /// Paused time summed over every link direction and priority.
    pub paused_ns: u64,
    /// The link directions that were paused, most paused first.
    pub paused_links: Vec<PauseSummary>,
    /// Packets the hosts' QPs sent again (go-back-N).
    pub retransmitted_pkts: u64,
    /// Local ACK timer expiries over every QP.
    pub ack_timeouts: u64,
    /// Work completions with an error status, over every flow.
    pub completion_errors: u64,
    /// The PFC deadlocks the fabric found, in topology names.
    pub deadlocks: Vec<String>,
    /// The all-reduces' times, per `allreduce` workload
    /// ([`super::collective`]); left out of the JSON when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveSummary>,
    /// Simulator events processed: frames serialised, frames arriving, PFC timers.
    pub events: u64,
    /// The wall-clock time the run took, seconds (not serialised).
    #[serde(skip)]
    pub wall_s: f64,
    /// Simulator events per wall-clock second (not serialised).
    #[serde(skip)]
    pub events_per_s: f64,
}

/// Time series of one run, for its CSV files and plots.
#[derive(Debug, Default)]
pub struct RunSeries {
    /// Sample times of `queues` (ns).
    pub queue_times: Vec<u64>,
    /// Per recorded port: its name and samples (bytes).
    pub queues: Vec<(String, Vec<u32>)>,
    /// Per recorded port, as `queues`: its ECN Kmin, bytes (scaled to its
    /// rate when Kmin is given per 25 Gb/s); `None`: it does not mark.
    pub queue_kmin: Vec<Option<usize>>,
    /// Rate samples, every `rate_sample_ns` per started flow.
    pub rates: Vec<RateSample>,
    /// Congestion signals so far, over the whole fabric, every rate
    /// sample.
    pub signals: Vec<Signals>,
    /// Every flow's outcome, by id.
    pub flows: Vec<FlowResult>,
    /// Every step of every all-reduce repetition ([`super::collective`]).
    pub collective_steps: Vec<StepRecord>,
    /// The chosen flows' throughput ([`super::throughput`]).
    pub throughput: Vec<ThroughputSample>,
}

/// One flow's rate sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSample {
    /// The sample's time, nanoseconds from the run's start.
    pub time_ns: u64,
    /// The flow ([`FlowSpec::id`]).
    pub flow: usize,
    /// Its goodput over the window before the sample, bits per second.
    pub goodput_bps: f64,
    /// Its controller's rate then, bits per second.
    pub rate_bps: u64,
    /// The last RTT sample its controller took, nanoseconds (0: none, or a
    /// controller that reads no RTT).
    pub rtt_ns: u64,
}

/// The RTT samples controllers took, as the rate samples saw them (each
/// flow's last sample, every `rate_sample_ns`), over the second half of
/// the posting phase; nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RttSummary {
    /// Rate samples that held an RTT.
    pub samples: u64,
    /// The 1st percentile (nearest rank).
    pub p1: u64,
    /// The median.
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The largest.
    pub max: u64,
}

/// Congestion signals counted over the whole fabric up to `time_ns`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Signals {
    /// The sample's time, nanoseconds from the run's start.
    pub time_ns: u64,
    /// Frames the switches marked CE.
    pub ecn_marked: u64,
    /// CNPs the notification points sent.
    pub cnp_sent: u64,
    /// CNPs the reaction points handled.
    pub cnp_handled: u64,
    /// PFC frames received, over every link direction.
    pub pfc_frames: u64,
    /// Paused time, over every link direction and priority, nanoseconds.
    pub paused_ns: u64,
}

/// A flow while the run goes.
struct FlowState {
    spec: FlowSpec,
    started: Option<Instant>,
    /// Flows of `after` not completed yet.
    waiting_for: usize,
    qpn: u32,
    posted: u64,
    completed: u64,
    outstanding: u32,
    done: Option<Instant>,
    dead: bool,
    /// Started, and finished with: nothing outstanding, nothing to post.
    over: bool,
    at_half: u64,
    at_end: u64,
    at_sample: u64,
    errors: u64,
}

impl FlowState {
    fn wants_more(&self, now: Instant, end: Instant) -> bool {
        if self.dead || self.started.is_none() {
            return false;
        }
        match self.spec.bytes {
            Some(b) => self.posted < b,
            None => {
                let stop = self.spec.stop_ns.map_or(end, Instant::from_nanos).min(end);
                now < stop
            }
        }
    }
}

/// Per host: its CQ, a source region and a target region.
struct HostRes {
    pd: crate::transport::PdId,
    cq: CqId,
    src: MrKeys,
    dst: MrKeys,
}

/// What [`LabRun::summarise`] takes from the flows.
struct FlowFigures {
    flows: Vec<FlowResult>,
    /// Completed sized flows against their ideal completion times.
    fct: Vec<FctSample>,
    /// Every started long flow's second-half goodput.
    long: Vec<f64>,
    /// Bytes completed in the posting phase, per workload.
    workload_bytes: Vec<u64>,
}

/// ECN marks and drops over every switch port (see [`RunSummary`]).
#[derive(Default)]
struct SwitchFigures {
    ecn_marked: u64,
    egress: u64,
    down: u64,
    shared: u64,
    headroom: u64,
    no_route: u64,
    ttl: u64,
    by_priority: [u64; 8],
}

/// A run being built and driven.
pub struct LabRun<'a> {
    r: &'a Resolved,
    net: SimNet,
    res: Vec<HostRes>,
    flows: Vec<FlowState>,
    /// Flows waiting for each flow.
    dependants: Vec<Vec<usize>>,
    /// Index of the first flow (by start time) not yet looked at.
    next_flow: usize,
    /// Flows whose waits are over but whose start time has not come.
    ready_later: Vec<usize>,
    ports: Vec<PortInfo>,
    /// Sim links of `topology.links`, in order.
    links: Vec<Link>,
    /// Sim switches of `topology.switches`, in order.
    switch_of: Vec<SwitchId>,
    /// Every link direction: switch egress ports and host NICs.
    channels: Vec<ChannelId>,
    caps: QpCaps,
    params: ConnectParams,
    wcs: Vec<Wc>,
    series: RunSeries,
    record: Vec<usize>,
    completion_errors: u64,
    /// Flows to look at in the next [`LabRun::post`], and whether listed.
    to_post: Vec<usize>,
    post_listed: Vec<bool>,
    /// Hosts pumped since their completions were last polled.
    pumped: Vec<usize>,
    seen: Vec<bool>,
    /// Started flows not over yet.
    live: usize,
    /// Frame bytes each port of `ports` had sent at the half and at the
    /// end of the posting phase.
    tx_at_half: Vec<u64>,
    tx_at_end: Vec<u64>,
    /// The completions of the flows whose throughput is written.
    throughput: ThroughputLog,
}

fn switch_config(r: &Resolved) -> SimSwitch {
    let s = &r.switch;
    let mask = |ps: &[u8]| ps.iter().fold(0u8, |m, &p| m | 1 << p);
    SimSwitch {
        shared_buffer: s.buffer_bytes.map(|b| b as usize),
        reserved: s.reserved_bytes.map(|b| b as usize),
        strict: mask(&s.strict_priorities),
        pfc: s.pfc.as_ref().map(|p| SimPfc {
            priorities: mask(&p.priorities),
            xoff: p.xoff_bytes as usize,
            xon: p.xon_bytes as usize,
            headroom: p.headroom_bytes as usize,
            quanta: p.quanta,
            dynamic: p.dynamic.map(|d| fabric::DynamicPfc {
                alpha_shift: d.alpha_shift,
                resume_offset: d.resume_offset_bytes as usize,
            }),
        }),
        ..SimSwitch::default()
    }
}

/// An endpoint in the topology's names: a host, or a switch (with
/// `:port` when `port` is set). The run adds the switches in topology
/// order to a fresh fabric, so a sim switch's index is its topology index.
fn endpoint_name(topo: &TopologySpec, e: fabric::Endpoint, port: bool) -> String {
    match e {
        fabric::Endpoint::Host(h) => topo.hosts[h.index()].name.clone(),
        fabric::Endpoint::Switch { switch, port: p } if port => {
            format!("{}:{p}", topo.switches[switch.index()].name)
        }
        fabric::Endpoint::Switch { switch, .. } => topo.switches[switch.index()].name.clone(),
    }
}

/// One transport device per host of `topo`, each with its NIC's ring.
fn add_hosts(net: &mut SimNet, r: &Resolved) -> Result<(), RunError> {
    let t = &r.transport;
    for (i, h) in r.topology.hosts.iter().enumerate() {
        let mut dc = DeviceConfig::new(host_mac(i), host_ip(i).into());
        dc.congestion.ecn = t.ecn;
        dc.congestion.rp = t.cc.clone();
        dc.congestion.line_bps = h.link.rate_bps;
        dc.congestion.np.min_time_between_cnps = Duration::from_nanos(t.min_time_between_cnps_ns);
        dc.offload = Offload {
            icrc: t.icrc_offload,
            discard_write_payloads: !t.place_writes,
        };
        let idx = net.add_host(dc).map_err(transport_err)?;
        debug_assert_eq!(idx, i);
        let id = net.hosts[idx].host;
        net.fabric
            .set_tx_ring(id, Some(NIC_RING_FRAMES * MAX_FRAME));
    }
    Ok(())
}

/// The switches (in topology order), every host's link to its switch and
/// the switch-to-switch links (returned in topology order).
fn add_switches_and_links(
    net: &mut SimNet,
    r: &Resolved,
) -> Result<(Vec<SwitchId>, Vec<Link>), RunError> {
    let topo = &r.topology;
    let scfg = switch_config(r);
    let switch_of: Vec<SwitchId> = topo
        .switches
        .iter()
        .map(|_| net.fabric.add_switch_with(scfg))
        .collect::<Result<_, _>>()
        .map_err(fabric_err)?;
    let link_cfg = |l: &LinkSpec| LinkConfig {
        rate_bps: l.rate_bps,
        delay: Duration::from_nanos(l.delay_ns),
        ..LinkConfig::default()
    };
    let egress_cfg = |l: &LinkSpec| LinkConfig {
        queue_bytes: r.switch.port_buffer_bytes.map(|b| b as usize),
        ecn: r.switch.red_for(l.rate_bps),
        ..link_cfg(l)
    };
    // Each switch's hosts in host order, then the switch links.
    for (i, h) in topo.hosts.iter().enumerate() {
        let link = net
            .connect_to_switch(i, switch_of[h.switch], link_cfg(&h.link))
            .map_err(fabric_err)?;
        net.fabric
            .set_link_config(link.b_to_a, egress_cfg(&h.link))
            .map_err(fabric_err)?;
    }
    let mut links = Vec::new();
    for l in &topo.links {
        let link = net
            .fabric
            .connect_switches(switch_of[l.a], switch_of[l.b], egress_cfg(&l.link))
            .map_err(fabric_err)?;
        links.push(link);
    }
    Ok((switch_of, links))
}

/// The egress ports of every switch, named by their peer, and every link
/// direction to record (switch egress ports and host NICs).
fn egress_ports(
    net: &SimNet,
    topo: &TopologySpec,
    switch_of: &[SwitchId],
) -> (Vec<PortInfo>, Vec<ChannelId>) {
    let mut ports = Vec::new();
    let mut channels = Vec::new();
    for (si, &sw) in switch_of.iter().enumerate() {
        for p in net.fabric.switch_ports(sw) {
            channels.push(p.egress);
            if matches!(p.peer, fabric::Endpoint::Host(_)) {
                channels.push(p.ingress);
            }
            ports.push(PortInfo {
                name: format!(
                    "{}:{}->{}",
                    topo.switches[si].name,
                    p.port,
                    endpoint_name(topo, p.peer, false)
                ),
                switch: si,
                port: p.port,
                egress: p.egress,
            });
        }
    }
    (ports, channels)
}

/// The experiment's static routes, on the switches' ports towards `via`.
fn set_routes(net: &mut SimNet, r: &Resolved, switch_of: &[SwitchId]) -> Result<(), RunError> {
    for route in &r.routes {
        let sw = switch_of[route.switch];
        let mut via = Vec::new();
        for hop in &route.via {
            for p in net.fabric.switch_ports(sw) {
                let to = match (hop, p.peer) {
                    (NextHop::Switch(s), fabric::Endpoint::Switch { switch, .. }) => {
                        switch == switch_of[*s]
                    }
                    (NextHop::Host(h), fabric::Endpoint::Host(id)) => id.index() == *h,
                    _ => false,
                };
                if to {
                    via.push(p.port);
                }
            }
        }
        let dst = net.hosts[route.dst].host;
        net.fabric.set_route(sw, dst, &via).map_err(fabric_err)?;
    }
    Ok(())
}

/// Each host's protection domain, completion queue and the source and
/// destination regions of `msg` bytes its flows use.
fn host_resources(net: &mut SimNet, msg: usize) -> Result<Vec<HostRes>, RunError> {
    let mut res = Vec::new();
    // One send buffer for every host: the payloads are all zeros, and
    // one copy of them stays in the cache where hundreds would not.
    let send_buf = SharedMemory::zeroed(msg);
    for h in net.hosts.iter_mut() {
        let d = &mut h.dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(1 << 20).map_err(transport_err)?;
        let spec = |access| MrSpec {
            pd,
            len: msg,
            access,
            addr: None,
            key: None,
        };
        let src = d
            .reg_mr_memory(spec(Access::LOCAL_WRITE), Box::new(send_buf.clone()))
            .map_err(transport_err)?;
        let dst = d
            .reg_mr(spec(Access::LOCAL_WRITE | Access::REMOTE_WRITE))
            .map_err(transport_err)?;
        res.push(HostRes { pd, cq, src, dst });
    }
    Ok(res)
}

/// The flows' states before the run, and the flows waiting for each.
fn flow_states(flows: Vec<FlowSpec>) -> (Vec<FlowState>, Vec<Vec<usize>>) {
    let mut dependants = vec![Vec::new(); flows.len()];
    for f in &flows {
        for &a in &f.after {
            dependants[a].push(f.id);
        }
    }
    let flows = flows
        .into_iter()
        .map(|spec| FlowState {
            waiting_for: spec.after.len(),
            spec,
            started: None,
            qpn: 0,
            posted: 0,
            completed: 0,
            outstanding: 0,
            done: None,
            dead: false,
            over: false,
            at_half: 0,
            at_end: 0,
            at_sample: 0,
            errors: 0,
        })
        .collect();
    (flows, dependants)
}

impl<'a> LabRun<'a> {
    /// Builds the fabric, the devices and the flows of one run.
    pub fn new(r: &'a Resolved, flows: Vec<FlowSpec>, seed: u64) -> Result<LabRun<'a>, RunError> {
        let topo = &r.topology;
        let mut net = SimNet::new(seed);
        // Only a rate control that reads INT has its QPs ask for it.
        net.fabric.set_int_stamping(r.transport.cc.needs_int());
        add_hosts(&mut net, r)?;
        let (switch_of, links) = add_switches_and_links(&mut net, r)?;
        let (ports, channels) = egress_ports(&net, topo, &switch_of);
        set_routes(&mut net, r, &switch_of)?;
        let res = host_resources(&mut net, r.transport.message_bytes as usize)?;
        let (caps, params) = r.qp_settings().map_err(RunError::Transport)?;
        let nflows = flows.len();
        let nhosts = topo.hosts.len();
        let throughput = ThroughputLog::new(&flows, &r.analysis);
        let (flows, dependants) = flow_states(flows);
        Ok(LabRun {
            r,
            net,
            res,
            flows,
            dependants,
            next_flow: 0,
            ready_later: Vec::new(),
            ports,
            links,
            switch_of,
            channels,
            caps,
            params,
            wcs: Vec::new(),
            series: RunSeries::default(),
            record: Vec::new(),
            completion_errors: 0,
            to_post: Vec::new(),
            post_listed: vec![false; nflows],
            pumped: Vec::new(),
            seen: vec![false; nhosts],
            live: 0,
            tx_at_half: Vec::new(),
            tx_at_end: Vec::new(),
            throughput,
        })
    }

    /// Every switch egress port, in switch then port order.
    pub fn ports(&self) -> &[PortInfo] {
        &self.ports
    }

    /// Starts flow `i` now: its QP pair, connected.
    fn start(&mut self, i: usize) -> Result<(), RunError> {
        let now = self.net.fabric.now();
        let (src, dst) = (self.flows[i].spec.src, self.flows[i].spec.dst);
        let (spd, scq) = (self.res[src].pd, self.res[src].cq);
        let (dpd, dcq) = (self.res[dst].pd, self.res[dst].cq);
        let sq = self.net.hosts[src]
            .dev
            .create_qp(spd, scq, scq, self.caps)
            .map_err(transport_err)?;
        let dq = self.net.hosts[dst]
            .dev
            .create_qp(dpd, dcq, dcq, self.caps)
            .map_err(transport_err)?;
        self.net
            .connect_qps(src, sq, dst, dq, &self.params, (0, 0))
            .map_err(transport_err)?;
        let f = &mut self.flows[i];
        f.qpn = sq;
        f.started = Some(now);
        self.live += 1;
        self.net.touch(src);
        self.net.touch(dst);
        self.want_post(i);
        Ok(())
    }

    /// Starts every flow due by now; the earliest start still to come.
    fn start_due(&mut self) -> Result<Option<Instant>, RunError> {
        let now = self.net.fabric.now();
        let mut due = Vec::new();
        while let Some(f) = self.flows.get(self.next_flow) {
            if Instant::from_nanos(f.spec.start_ns) > now {
                break;
            }
            if f.waiting_for == 0 {
                due.push(self.next_flow);
            }
            self.next_flow += 1;
        }
        self.ready_later.retain(|&i| {
            if Instant::from_nanos(self.flows[i].spec.start_ns) <= now {
                due.push(i);
                false
            } else {
                true
            }
        });
        for i in due {
            self.start(i)?;
        }
        let next = self
            .flows
            .get(self.next_flow)
            .map(|f| Instant::from_nanos(f.spec.start_ns));
        let later = self
            .ready_later
            .iter()
            .map(|&i| Instant::from_nanos(self.flows[i].spec.start_ns))
            .min();
        Ok(match (next, later) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Posts WRITEs on the flows that may have room (just started, or
    /// completions came back) up to their window; settles those that are
    /// over. Whether any was posted.
    fn post(&mut self, end: Instant) -> bool {
        let now = self.net.fabric.now();
        let msg = u64::from(self.r.transport.message_bytes);
        let window = self.r.transport.window;
        let mut posted = false;
        let mut list = std::mem::take(&mut self.to_post);
        for &i in &list {
            self.post_listed[i] = false;
            let f = &mut self.flows[i];
            let mut any = false;
            while f.outstanding < window && f.wants_more(now, end) {
                let len = match f.spec.bytes {
                    Some(b) => (b - f.posted).min(msg),
                    None => msg,
                } as u32;
                let (s, d) = (&self.res[f.spec.src], &self.res[f.spec.dst]);
                let wr = SendWr::new(
                    i as u64,
                    SendOp::Write {
                        remote_addr: d.dst.addr,
                        rkey: d.dst.rkey,
                    },
                    Payload::sge(Sge {
                        addr: s.src.addr,
                        length: len,
                        lkey: s.src.lkey,
                    }),
                );
                if self.net.hosts[f.spec.src].dev.post_send(f.qpn, wr).is_err() {
                    f.dead = true;
                    break;
                }
                f.posted += u64::from(len);
                f.outstanding += 1;
                any = true;
            }
            if any {
                posted = true;
                let src = f.spec.src;
                self.net.touch(src);
            }
            self.settle(i, now, end);
        }
        list.clear();
        if self.to_post.is_empty() {
            self.to_post = list;
        }
        posted
    }

    /// Lists flow `i` for the next [`LabRun::post`].
    fn want_post(&mut self, i: usize) {
        if !self.post_listed[i] {
            self.post_listed[i] = true;
            self.to_post.push(i);
        }
    }

    /// Marks a started flow over once nothing of it is outstanding and it
    /// will post no more (done, failed, or a long flow past its stop).
    fn settle(&mut self, i: usize, now: Instant, end: Instant) {
        let f = &mut self.flows[i];
        if f.over || f.started.is_none() || f.outstanding > 0 {
            return;
        }
        if f.done.is_some() || f.dead || !f.wants_more(now, end) {
            f.over = true;
            self.live -= 1;
        }
    }

    /// Takes the completions of the hosts pumped since the last call;
    /// whether there was any.
    fn complete(&mut self) -> bool {
        let now = self.net.fabric.now();
        let mut any = false;
        let mut finished = Vec::new();
        let pumped = std::mem::take(&mut self.pumped);
        for &h in &pumped {
            self.seen[h] = false;
            let dev = &mut self.net.hosts[h].dev;
            self.wcs.clear();
            dev.poll_cq(self.res[h].cq, usize::MAX, &mut self.wcs);
            while dev.poll_event().is_some() {}
            for k in 0..self.wcs.len() {
                let wc = self.wcs[k];
                any = true;
                let i = wc.wr_id as usize;
                let Some(f) = self.flows.get_mut(i) else {
                    continue;
                };
                f.outstanding = f.outstanding.saturating_sub(1);
                if wc.status == WcStatus::Success {
                    f.completed += u64::from(wc.byte_len);
                    self.throughput
                        .completed(i, now.as_nanos(), u64::from(wc.byte_len));
                    if f.spec.bytes == Some(f.completed) && f.done.is_none() {
                        f.done = Some(now);
                        finished.push(i);
                    }
                } else {
                    f.errors += 1;
                    f.dead = true;
                    self.completion_errors += 1;
                }
                self.want_post(i);
            }
        }
        self.pumped = pumped;
        self.pumped.clear();
        for id in finished {
            for k in 0..self.dependants[id].len() {
                let d = self.dependants[id][k];
                let f = &mut self.flows[d];
                f.waiting_for -= 1;
                if f.waiting_for == 0 && d < self.next_flow {
                    self.ready_later.push(d);
                }
            }
        }
        any
    }

    /// No flow is going, and none can start any more.
    fn all_done(&self) -> bool {
        self.next_flow >= self.flows.len() && self.ready_later.is_empty() && self.live == 0
    }

    fn sample_queues(&mut self, t: Instant) {
        self.series.queue_times.push(t.as_nanos());
        for (k, &p) in self.record.iter().enumerate() {
            let q = self.net.fabric.egress_queue(self.ports[p].egress).bytes();
            self.series.queues[k]
                .1
                .push(q.min(u32::MAX as usize) as u32);
        }
    }

    fn sample_rates(&mut self, t: Instant, window: Duration) {
        let secs = window.as_secs_f64();
        for f in &mut self.flows {
            if f.started.is_none() || (f.done.is_some() && f.at_sample == f.completed) {
                continue;
            }
            let d = f.completed - f.at_sample;
            f.at_sample = f.completed;
            let state = self.net.hosts[f.spec.src]
                .dev
                .cc_state(f.qpn)
                .unwrap_or_default();
            self.series.rates.push(RateSample {
                time_ns: t.as_nanos(),
                flow: f.spec.id,
                goodput_bps: d as f64 * 8.0 / secs,
                rate_bps: state.rate_bps,
                rtt_ns: state.rtt_ns,
            });
        }
        let (pfc_frames, paused_ns) = self.pause_totals();
        let mut cnp_sent = 0;
        let mut cnp_handled = 0;
        for h in &self.net.hosts {
            let c = h.dev.counters();
            cnp_sent += c.np_cnp_sent;
            cnp_handled += c.rp_cnp_handled;
        }
        let ecn_marked = self
            .ports
            .iter()
            .map(|p| self.net.fabric.link_counters(p.egress).ecn_marked)
            .sum();
        self.series.signals.push(Signals {
            time_ns: t.as_nanos(),
            ecn_marked,
            cnp_sent,
            cnp_handled,
            pfc_frames,
            paused_ns,
        });
    }

    /// Frame bytes each switch egress port has sent so far.
    fn port_tx_bytes(&self) -> Vec<u64> {
        self.ports
            .iter()
            .map(|p| self.net.fabric.link_counters(p.egress).tx_bytes)
            .collect()
    }

    /// The RTT samples of the second half ([`RttSummary`]).
    fn rtt_summary(&self) -> Option<RttSummary> {
        let half = self.r.duration_ns / 2;
        let mut v: Vec<u64> = self
            .series
            .rates
            .iter()
            .filter(|s| s.time_ns >= half && s.rtt_ns > 0)
            .map(|s| s.rtt_ns)
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(RttSummary {
            samples: v.len() as u64,
            p1: percentile(&v, 1.0),
            p50: percentile(&v, 50.0),
            p99: percentile(&v, 99.0),
            max: v[v.len() - 1],
        })
    }

    /// The second half's utilisation of the port named `name`.
    fn utilisation(&self, name: &str) -> Option<f64> {
        let i = self.ports.iter().position(|p| p.name == name)?;
        let (a, b) = (self.tx_at_half.get(i)?, self.tx_at_end.get(i)?);
        let rate = self.net.fabric.link_config(self.ports[i].egress).rate_bps;
        let secs = (self.r.duration_ns - self.r.duration_ns / 2) as f64 / 1e9;
        (rate > 0 && secs > 0.0).then(|| (b - a) as f64 * 8.0 / (rate as f64 * secs))
    }

    fn pause_totals(&self) -> (u64, u64) {
        let mut frames = 0;
        let mut paused = 0;
        for &ch in &self.channels {
            frames += self.net.fabric.link_counters(ch).pfc_rx;
            paused += self.paused_ns(ch);
        }
        (frames, paused)
    }

    /// Paused time of a link direction, over every priority.
    fn paused_ns(&self, ch: ChannelId) -> u64 {
        (0..8)
            .map(|p| self.net.fabric.paused_time(ch, p).as_nanos())
            .sum()
    }

    /// Chooses the queues to record (`[output] queues`) and makes their
    /// series, each with its port's ECN Kmin; refuses more samples than
    /// [`MAX_QUEUE_SAMPLES`] at one every `qs`.
    fn set_up_queue_records(&mut self, qs: Duration) -> Result<(), RunError> {
        let r = self.r;
        self.record = match &r.queues {
            super::resolve::QueueSelect::Ports(list) => self
                .ports
                .iter()
                .enumerate()
                .filter(|(_, p)| {
                    list.iter()
                        .any(|q| q.switch == p.switch && q.port == p.port)
                })
                .map(|(i, _)| i)
                .collect(),
            _ => (0..self.ports.len()).collect(),
        };
        let per_port = r.duration_ns / qs.as_nanos() + 1;
        let samples = per_port.saturating_mul(self.record.len() as u64);
        if samples > MAX_QUEUE_SAMPLES {
            return Err(RunError::TooManySamples {
                samples,
                ports: self.record.len(),
                per_port,
            });
        }
        self.series.queues = self
            .record
            .iter()
            .map(|&p| {
                (
                    self.ports[p].name.clone(),
                    Vec::with_capacity(per_port as usize),
                )
            })
            .collect();
        self.series.queue_kmin = self
            .record
            .iter()
            .map(|&p| {
                let ecn = self.net.fabric.link_config(self.ports[p].egress).ecn;
                ecn.map(|e| e.kmin_bytes)
            })
            .collect();
        Ok(())
    }

    /// Drives the run to its end and measures it.
    pub fn run(mut self, progress: &mut Progress) -> Result<(RunSummary, RunSeries), RunError> {
        let wall = std::time::Instant::now();
        let r = self.r;
        let start = self.net.fabric.now();
        let end = start + Duration::from_nanos(r.duration_ns);
        let half = start + Duration::from_nanos(r.duration_ns / 2);
        let limit = end
            + r.drain_limit_ns
                .map_or(DEFAULT_DRAIN_LIMIT, Duration::from_nanos);
        let qs = Duration::from_nanos(r.queue_sample_ns.max(1));
        let rs = Duration::from_nanos(r.rate_sample_ns.max(1));
        self.set_up_queue_records(qs)?;
        let mut link_events = r.link_events.iter().peekable();
        let mut next_q = start;
        let mut next_r = start + rs;
        let mut half_done = false;
        let mut end_done = false;
        let mut stopped = None;
        let mut drained = false;
        let mut same_instant = 0u64;
        loop {
            let now = self.net.fabric.now();
            while let Some(ev) = link_events.next_if(|e| Instant::from_nanos(e.at_ns) <= now) {
                self.net
                    .fabric
                    .set_link_up(self.links[ev.link], ev.up)
                    .map_err(fabric_err)?;
            }
            let next_start = self.start_due()?;
            loop {
                self.net.pump_active(&mut self.pumped, &mut self.seen);
                let done = self.complete();
                let posted = self.post(end);
                if !done && !posted {
                    break;
                }
                // Completions may have let waiting flows start.
                self.start_due()?;
            }
            let now = self.net.fabric.now();
            while next_q <= now && next_q <= end {
                self.sample_queues(next_q);
                next_q += qs;
            }
            while next_r <= now && next_r <= end {
                self.sample_rates(next_r, rs);
                next_r += rs;
            }
            if !half_done && now >= half {
                half_done = true;
                for f in &mut self.flows {
                    f.at_half = f.completed;
                }
                self.tx_at_half = self.port_tx_bytes();
            }
            if !end_done && now >= end {
                end_done = true;
                self.tx_at_end = self.port_tx_bytes();
                for i in 0..self.flows.len() {
                    self.flows[i].at_end = self.flows[i].completed;
                    // Long flows stop posting now: settle those idle.
                    self.settle(i, now, end);
                }
            }
            progress.update_events(now.as_nanos(), self.net.fabric.events_processed());
            if let Some(d) = self.net.fabric.deadlocks().first() {
                stopped = Some(self.deadlock_text(d));
                break;
            }
            if end_done && self.all_done() {
                drained = true;
                break;
            }
            // The next instant anything happens, and the earliest that is
            // not the fabric's own: until then the fabric may go on alone
            // while it wakes no host.
            let timer = self.net.next_timer_active();
            let mut next = earlier(self.net.fabric.next_event(), timer);
            let mut quiet_until = timer.unwrap_or(limit).min(limit);
            let mut consider = |t: Option<Instant>| {
                if let Some(t) = t.filter(|&t| t > now) {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                    quiet_until = quiet_until.min(t);
                }
            };
            consider(next_start);
            consider(link_events.peek().map(|e| Instant::from_nanos(e.at_ns)));
            for t in [next_q, next_r, half, end] {
                consider((t <= end).then_some(t));
            }
            let Some(t) = next else {
                stopped = Some(format!(
                    "nothing left to happen at {}",
                    Duration::from_nanos(now.as_nanos())
                ));
                break;
            };
            if t > limit {
                stopped = Some("drain limit reached".to_string());
                break;
            }
            if !self
                .net
                .advance_quietly(t, quiet_until, &mut same_instant, 1_000_000)
            {
                stopped = Some(format!(
                    "time does not advance at {}",
                    Duration::from_nanos(now.as_nanos())
                ));
                break;
            }
        }
        if !end_done {
            for f in &mut self.flows {
                f.at_end = f.completed;
            }
        }
        let wall_s = wall.elapsed().as_secs_f64();
        Ok(self.summarise(drained, stopped, wall_s))
    }

    /// Every flow's results, and what the summary adds up from them.
    fn flow_results(&self) -> FlowFigures {
        let r = self.r;
        let topo = &r.topology;
        let second_s = (r.duration_ns - r.duration_ns / 2) as f64 / 1e9;
        let nworkloads = self
            .flows
            .iter()
            .map(|f| f.spec.workload + 1)
            .max()
            .unwrap_or(0);
        let mut out = FlowFigures {
            flows: Vec::new(),
            fct: Vec::new(),
            long: Vec::new(),
            workload_bytes: vec![0u64; nworkloads],
        };
        for f in &self.flows {
            out.workload_bytes[f.spec.workload] += f.at_end;
            let c = (f.started.is_some())
                .then(|| self.net.hosts[f.spec.src].dev.qp_counters(f.qpn).copied())
                .flatten()
                .unwrap_or_default();
            let path = topo.path(f.spec.src, f.spec.dst);
            let ideal = match (f.spec.bytes, path) {
                (Some(b), Some(p)) => {
                    Some(ideal_fct_ns(b, p.bottleneck_bps, p.base_rtt_ns(), topo.mtu))
                }
                _ => None,
            };
            let fct_ns = match (f.started, f.done) {
                (Some(s), Some(d)) => Some((d - s).as_nanos()),
                _ => None,
            };
            if let (Some(b), Some(t), Some(i)) = (f.spec.bytes, fct_ns, ideal) {
                out.fct.push(FctSample {
                    bytes: b,
                    fct_ns: t,
                    ideal_ns: i,
                });
            }
            let goodput = (f.spec.bytes.is_none() && f.started.is_some())
                .then(|| (f.at_end - f.at_half) as f64 * 8.0 / second_s);
            if let Some(g) = goodput {
                out.long.push(g);
            }
            out.flows.push(FlowResult {
                id: f.spec.id,
                src: f.spec.src,
                dst: f.spec.dst,
                workload: f.spec.workload,
                tag: f.spec.tag.clone(),
                bytes: f.spec.bytes,
                bytes_completed: f.completed,
                start_ns: f.started.map(|s| s.as_nanos()),
                fct_ns,
                ideal_fct_ns: ideal,
                goodput_second_half_bps: goodput,
                retransmitted_pkts: c.retransmitted_pkts,
                cnp_handled: c.rp_cnp_handled,
                errors: f.errors,
            });
        }
        out
    }

    /// The hottest recorded queue (highest p99, then max): its name, its
    /// figures over the run and over the second half.
    fn hot_queue(&self) -> Option<(String, QueueSummary, QueueSummary)> {
        let stats = |s: &[u32]| {
            let mut v: Vec<u64> = s.iter().map(|&x| u64::from(x)).collect();
            v.sort_unstable();
            QueueSummary {
                p50: percentile(&v, 50.0),
                p99: percentile(&v, 99.0),
                max: v.last().copied().unwrap_or(0),
            }
        };
        let half_at = self
            .series
            .queue_times
            .partition_point(|&t| t < self.r.duration_ns / 2);
        let mut hot: Option<(String, QueueSummary, QueueSummary)> = None;
        for (name, s) in &self.series.queues {
            let q = stats(s);
            if hot
                .as_ref()
                .map_or(true, |(_, h, _)| (q.p99, q.max) > (h.p99, h.max))
            {
                hot = Some((name.clone(), q, stats(&s[half_at.min(s.len())..])));
            }
        }
        hot
    }

    /// ECN marks and drops, summed over the switches' ports.
    fn switch_figures(&self) -> SwitchFigures {
        let fabric = &self.net.fabric;
        let mut f = SwitchFigures::default();
        for p in &self.ports {
            let c = fabric.link_counters(p.egress);
            f.ecn_marked += c.ecn_marked;
            f.egress += c.dropped_queue;
            f.down += c.dropped_down;
        }
        for &s in &self.switch_of {
            let c = fabric.switch_counters(s);
            for (sum, n) in f.by_priority.iter_mut().zip(c.buffer_drops_by_priority) {
                *sum += n;
            }
            f.shared += c.dropped_shared_buffer;
            f.headroom += c.dropped_headroom;
            f.no_route += c.dropped_no_route;
            f.ttl += c.dropped_ttl;
        }
        f
    }

    /// The link directions that were paused, most paused first.
    fn paused_links(&self) -> Vec<PauseSummary> {
        let fabric = &self.net.fabric;
        let mut paused_links = Vec::new();
        for &ch in &self.channels {
            let ns = self.paused_ns(ch);
            if ns > 0 {
                paused_links.push(PauseSummary {
                    name: self.channel_name(ch),
                    frames_received: fabric.link_counters(ch).pfc_rx,
                    paused_ns: ns,
                });
            }
        }
        paused_links.sort_by_key(|p| std::cmp::Reverse(p.paused_ns));
        paused_links
    }

    fn summarise(
        mut self,
        drained: bool,
        stopped: Option<String>,
        wall_s: f64,
    ) -> (RunSummary, RunSeries) {
        let r = self.r;
        let dur_s = r.duration_ns as f64 / 1e9;
        let mut totals = QpCounters::default();
        for h in &self.net.hosts {
            totals.add(&h.dev.counters());
        }
        let flows = self.flow_results();
        let hot = self.hot_queue();
        let sw = self.switch_figures();
        let (pfc_frames, paused_ns) = self.pause_totals();
        let paused_links = self.paused_links();
        let fabric = &self.net.fabric;
        let events = fabric.events_processed();
        let long = &flows.long;
        let specs: Vec<&FlowSpec> = self.flows.iter().map(|f| &f.spec).collect();
        let (collectives, collective_steps) = super::collective::measure(&specs, &flows.flows);
        let summary = RunSummary {
            name: String::new(),
            duration_ns: r.duration_ns,
            virtual_ns: fabric.now().as_nanos(),
            drained,
            stopped,
            flows: self.flows.len(),
            flows_started: self.flows.iter().filter(|f| f.started.is_some()).count(),
            flows_completed: self
                .flows
                .iter()
                .filter(|f| {
                    f.done.is_some()
                        || f.spec.bytes.is_none()
                            && f.started.is_some()
                            && !f.dead
                            && f.outstanding == 0
                            && drained
                })
                .count(),
            long_goodput_bps: long.iter().sum(),
            long_jain: (!long.is_empty()).then(|| jain_index(long)),
            workload_goodput_bps: flows
                .workload_bytes
                .iter()
                .map(|&b| b as f64 * 8.0 / dur_s)
                .collect(),
            fct: slowdown_by_bucket(&flows.fct),
            fct_hpcc: super::fct::run_table(&flows.flows, r),
            cc: cc_label(&r.transport.cc),
            rtt_second_half: self.rtt_summary(),
            hot_port: hot.as_ref().map(|(n, _, _)| n.clone()),
            hot_port_utilisation: hot.as_ref().and_then(|(n, _, _)| self.utilisation(n)),
            queue: hot.as_ref().map(|h| h.1).unwrap_or_default(),
            queue_second_half: hot.as_ref().map(|h| h.2).unwrap_or_default(),
            ecn_marked: sw.ecn_marked,
            cnp_sent: totals.np_cnp_sent,
            cnp_handled: totals.rp_cnp_handled,
            drops: sw.egress + sw.down + sw.shared + sw.headroom + sw.no_route + sw.ttl,
            drops_shared_buffer: sw.shared,
            drops_headroom: sw.headroom,
            drops_egress: sw.egress,
            drops_link_down: sw.down,
            drops_no_route: sw.no_route,
            drops_ttl: sw.ttl,
            drops_by_priority: sw.by_priority,
            pfc_frames,
            paused_ns,
            paused_links,
            retransmitted_pkts: totals.retransmitted_pkts,
            ack_timeouts: totals.local_ack_timeout_err,
            completion_errors: self.completion_errors,
            deadlocks: fabric
                .deadlocks()
                .iter()
                .map(|d| self.deadlock_text(d))
                .collect(),
            collectives,
            events,
            wall_s,
            events_per_s: events as f64 / wall_s.max(1e-9),
        };
        let starts: Vec<Option<u64>> = flows.flows.iter().map(|f| f.start_ns).collect();
        self.series.throughput = self.throughput.series(r.rate_sample_ns, &starts);
        self.series.flows = flows.flows;
        self.series.collective_steps = collective_steps;
        (summary, self.series)
    }

    /// A deadlock in the topology's names: "PFC deadlock at 1.020 ms:
    /// s0:2->s1 -> s1:3->s2 -> s2:3->s0 -> s0:2->s1 (priority 3)".
    fn deadlock_text(&self, d: &fabric::DeadlockReport) -> String {
        let hops: Vec<String> = d
            .cycle
            .iter()
            .map(|h| {
                self.ports
                    .iter()
                    .find(|p| self.switch_of[p.switch] == h.switch && p.port == h.port)
                    .map_or_else(
                        || format!("{} port {}", h.switch, h.port),
                        |p| p.name.clone(),
                    )
            })
            .collect();
        let prio = d.cycle.first().map_or(0, |h| h.priority);
        format!(
            "PFC deadlock at {:.3} ms: {} (priority {prio})",
            d.at.as_nanos() as f64 / 1e6,
            hops.join(" -> ")
        )
    }

    fn channel_name(&self, ch: ChannelId) -> String {
        let topo = &self.r.topology;
        let (from, to) = self.net.fabric.channel_ends(ch);
        format!(
            "{}->{}",
            endpoint_name(topo, from, true),
            endpoint_name(topo, to, true)
        )
    }
}
