//! A deterministic network simulator: hosts, full-duplex links and
//! store-and-forward switches in virtual time (nanoseconds), with seeded
//! faults. Each host is a [`Backend`](crate::backend::Backend)
//! ([`SimPort`]), so the code that runs
//! over a DPDK port runs here unchanged.
//!
//! This module owns the topology (hosts, switches, links), the switches'
//! forwarding (shortest-path routes, flooding), the virtual clock, the
//! event calendar, the one seeded [`Rng`], the fault model, the per-link
//! and per-host counters, and an optional pcap capture per host. Its
//! submodules own the routes (`route`), the eight priority queues of each
//! egress and their scheduler (`sched`), ECN marking (`ecn`), the TTL a
//! switch lowers (`hop`), switch
//! buffers and PFC (`pfc`), PFC deadlock detection (`deadlock`), the
//! event calendar and each frame's way through the fabric (`engine`), and
//! a host as a backend (`port`). It
//! knows frames as Ethernet bytes; it looks into one only as far as its
//! 802.1Q tag and IP header (priority, ECN field, TTL), its UDP ports (to spread
//! flows over equal paths) or a MAC control frame's fields, never at RoCE.
//! A switch port also stamps its hop (time, bytes sent, queue, rate) into
//! a frame that carries ferroce's INT trailer after its IP packet
//! ([`crate::wire::int`]), as the frame leaves, as HPCC's switches do
//! (Li et al., SIGCOMM 2019, §3.2); frames without one are untouched.
//! A fabric whose hosts never ask for INT may turn that off
//! ([`Fabric::set_int_stamping`]): its switches then read no frame as it
//! leaves (one look less at a header that waited in a queue, per hop).
//!
//! # Call order
//!
//! 1. Build: [`Fabric::new`] with a seed, [`Fabric::add_host`],
//!    [`Fabric::add_switch`], [`Fabric::connect`] (host to host),
//!    [`Fabric::connect_to_switch`], [`Fabric::connect_switches`].
//! 2. Transmit at [`Fabric::now`]: `fabric.port(h).tx_burst(..)` queues
//!    frames on the host's link.
//! 3. Advance: [`Fabric::advance_to`]`(t)` processes every event up to and
//!    including `t` and sets the clock to `t`. A driver usually picks
//!    `t` = the earlier of [`Fabric::next_event`] and its endpoints' own
//!    timers.
//! 4. Receive: `fabric.port(h).rx_burst(..)` returns the frames that have
//!    arrived at `h` by now. Go to 2.
//!
//! ```
//! use ferroce::backend::fabric::{Fabric, LinkConfig};
//! use ferroce::backend::{Backend, Burst, FrameBuf};
//! use ferroce::time::Instant;
//! use ferroce::wire::MacAddr;
//!
//! let mut fabric = Fabric::new(1);
//! let a = fabric.add_host(MacAddr([2, 0, 0, 0, 0, 1]));
//! let b = fabric.add_host(MacAddr([2, 0, 0, 0, 0, 2]));
//! fabric.connect(a, b, LinkConfig::default()).unwrap();
//!
//! let mut port = fabric.port(a);
//! let mut frame = port.alloc().unwrap();
//! frame.append(64).unwrap().fill(0xab);
//! let mut burst = Burst::new();
//! burst.push(frame);
//! assert_eq!(port.tx_burst(&mut burst), 1);
//!
//! // 64 bytes at 100 Gb/s take 6 ns (5.12, rounded up), then 1 µs of delay.
//! assert_eq!(fabric.next_event(), Some(Instant::from_nanos(6)));
//! fabric.advance_to(Instant::from_nanos(1_006));
//! let mut rx = Burst::new();
//! assert_eq!(fabric.port(b).rx_burst(&mut rx), 1);
//! ```
//!
//! # Timing
//!
//! Each direction of a link has an [`EgressQueue`] and serialises one frame
//! at a time: a frame queued at `now` finishes serialising ("departs") at
//! `max(now, end of the frame before it) + bytes * 8 / rate` (whole
//! nanoseconds, rounded up; [`serialization_time`]), where "the frame
//! before it" is the one the scheduler picked before it (one priority
//! alone is a FIFO; see [Priorities](#priorities-and-pfc)), and arrives
//! [`LinkConfig::delay`] after it departs. The frame length is the buffer's
//! length: no preamble, inter-frame gap or FCS is added. A switch is
//! store-and-forward with no processing delay: a frame that has fully
//! arrived is queued at once on the egress link towards its destination,
//! which serialises it again at its own rate.
//!
//! # Faults
//!
//! Decided when a frame departs, with the fabric's one [`Rng`], in this
//! order (a probability of 0 draws nothing):
//!
//! 1. **loss** ([`LinkConfig::loss`]): the frame vanishes (it has still
//!    used the wire's time); nothing more is drawn for it;
//! 2. **corruption**: one bit at a random offset >= 14 (beyond the Ethernet
//!    header, so a switch still forwards it) is flipped; a frame of 14 bytes
//!    or fewer is left alone;
//! 3. **duplication**: a copy (with the same corruption) arrives at the same
//!    instant, right after the original;
//! 4. **reordering**: the frame (and its copy) arrive later by a uniform
//!    extra delay in (0, [`LinkConfig::reorder_delay`]], so frames sent after
//!    it may overtake it.
//!
//! A queue with [`LinkConfig::queue_bytes`] refuses (drop-tail) a frame that
//! would take the bytes waiting, the frame on the wire included, past the
//! limit (a frame of exactly the room left is taken); at a switch, frames
//! of PFC priorities are exempt ([`PfcConfig`]). [`SimPort::tx_burst`](crate::backend::Backend::tx_burst)
//! always takes every frame: one tail-dropped at
//! the host's own link counts as sent by the host and dropped by the
//! network ([`LinkCounters::dropped_queue`]), as happens to a frame lost
//! further on.
//!
//! # Topology
//!
//! A host has one port: it is connected once, to another host or to a
//! switch, and a frame it sends with no link is dropped
//! ([`HostCounters::dropped_no_link`]). Hosts are promiscuous (they receive
//! every frame that reaches them) and their inbox is unbounded.
//!
//! Switches connect to hosts ([`Fabric::connect_to_switch`]) and to each
//! other ([`Fabric::connect_switches`], parallel links allowed), each link
//! on a new port; [`Fabric::switch_ports`] lists a switch's ports with
//! their peers. No two hosts attached to switches share a MAC.
//!
//! A switch forwards by destination MAC, with no learning, along tables
//! computed from the topology (rebuilt when it changes, before the next
//! frame is forwarded, or at [`Fabric::build_routes`]):
//!
//! - a unicast frame for a host attached to a switch goes out by one of
//!   the ports on a shortest path (fewest switch hops) to the host's switch
//!   ([`Fabric::route_ports`]; [`Fabric::path`] traces a frame's whole
//!   way). Where there are several, a hash of the frame's flow key picks
//!   one (ECMP): for UDP over IPv4 or IPv6 (RoCE v2), the source and
//!   destination addresses and UDP ports, so that QPs spread by their UDP
//!   source port (IBTA A17 §17.3.2.1, §17.9.4); for other frames, the two MACs. The hash
//!   is salted per switch from the fabric's seed, so tiers choose
//!   independently; a flow always takes the same path;
//! - a broadcast or multicast frame (group bit set) is flooded to every
//!   host port and to the switch ports of one spanning tree of the switch
//!   graph (breadth-first from the lowest-numbered switch of each connected
//!   group), never back out of the port it came in by, so every host gets
//!   one copy even where switches form loops;
//! - an unknown unicast destination, or one on the host port the frame came
//!   in by, is dropped ([`SwitchCounters::dropped_unknown`]), as is a frame
//!   shorter than an Ethernet header. A frame may leave by the switch port
//!   it came in by, as a routed frame may.
//!
//! A switch forwards IP as a router would as far as the TTL goes: every
//! IPv4 or IPv6 frame it forwards or floods leaves with its TTL / hop
//! limit one lower (the IPv4 checksum follows, RFC 1624), and one that
//! arrives with 0 or 1 is dropped ([`SwitchCounters::dropped_ttl`]; RFC
//! 1812 §5.3.1, RFC 8200 §3), so a receiver can count the switches a
//! packet crossed from its TTL. NDP messages keep their hop limit of
//! 255 (RFC 4861 §7.1: the switches are one link for address
//! resolution); RoCE v2's ICRC does not cover the TTL (reference B.7).
//! See the `hop` submodule.
//!
//! [`Fabric::set_route`] overrides a switch's choice for one destination
//! (ECMP among the ports given), until [`Fabric::clear_route`], whatever
//! the links do meanwhile: asymmetric routes, or routes that bounce between
//! tiers, for experiments. A static route that would let frames go round a
//! loop is refused.
//!
//! # Link failures
//!
//! [`Fabric::set_link_up`] takes a link down (or [`Fabric::set_channel_up`]
//! one direction). A direction that is down takes no new frame
//! ([`LinkCounters::dropped_down`]) and drops those waiting in its queue
//! (counted there too); the frame being serialised and those already on the
//! wire arrive. Routes and the flooding tree are recomputed over what is
//! still up; a unicast frame for a host a switch has no route to any more
//! is dropped there ([`SwitchCounters::dropped_no_route`]).
//!
//! A MAC control frame (to 01-80-C2-00-00-01, EtherType 0x8808) is
//! consumed by the MAC it reaches, host or switch port, and never delivered
//! or forwarded.
//!
//! # Determinism
//!
//! Events sit in a calendar (a heap, `calendar.rs`) keyed by (time,
//! sequence number), so events at the same instant run in the order they
//! were scheduled; all randomness comes from the one seeded generator,
//! drawn in event order; nothing reads a real clock or iterates a hash
//! map. The same seed, topology and calls give the same run, bit for bit.
//!
//! # ECN marking
//!
//! A link direction with [`LinkConfig::ecn`] (or, for one priority,
//! [`LinkConfig::ecn_class`]) marks frames as they are queued, on the bytes
//! already waiting in the frame's own priority queue
//! ([`EgressQueue::class_bytes`], its frame on the wire included), or with
//! [`RedConfig::at_dequeue`] as they leave, on the bytes of their priority
//! still waiting, with RED's curve between Kmin and Kmax
//! ([`RedConfig`]; RFC 3168, the DCQCN congestion point of reference C.1):
//! an ECT(0) or ECT(1) IPv4 / IPv6 packet gets CE (the IPv4 checksum
//! follows), Not-ECT and non-IP frames pass unmarked. The decision comes
//! before the drop-tail check and is independent of it; a refused frame
//! counts in [`LinkCounters::dropped_queue`] only, a marked one that is
//! queued in [`LinkCounters::ecn_marked`]. The draw uses the fabric's
//! [`Rng`] (see [`RedConfig::apply`] for when it draws).
//!
//! # Priorities and PFC
//!
//! Every egress queue holds eight priority queues: a frame's priority is
//! its 802.1Q PCP, else its IP DSCP through a DSCP -> priority table (the
//! switch's [`SwitchConfig::dscp_to_priority`]; hosts use
//! [`DEFAULT_DSCP_TO_PRIORITY`], DSCP >> 3), else 0 ([`frame_priority`]).
//! The scheduler serves a switch's [`SwitchConfig::strict`] priorities
//! first, highest first, then the others by deficit round robin
//! ([`EgressQueue`]); hosts' NICs schedule the same way with no strict
//! priority. [`SwitchConfig::default`] behaves as a switch without
//! priorities did: one unbounded buffer, no PFC, and frames of one
//! priority in FIFO order.
//!
//! A switch accounts each frame in a shared buffer and per (ingress port,
//! priority) until it has left, drops lossy frames when the buffer is full,
//! and with [`SwitchConfig::pfc`] sends IEEE 802.1Qbb PFC frames
//! ([`PfcFrame`]) that pause the upstream MAC's priorities (hosts obey
//! them); see [`PfcConfig`] and the `pfc` submodule's docs for the rules,
//! and [`Fabric::deadlocks`] for the cyclic buffer dependencies it finds.
//! [`Fabric::set_paused`] pauses a whole queue by hand, PFC or not.
//!
//! # Capture
//!
//! [`Fabric::capture`] records every frame a host sends (when it hands it to
//! `tx_burst`, before any fault) and receives (when it arrives, after any
//! corruption) into a classic pcap [`pcap::Writer`], stamped with the
//! virtual time in nanoseconds since the epoch of the capture file.
//!
//! # ICRC offload
//!
//! With [`Fabric::set_icrc_offload`], the hosts' NICs compute the RoCE v2
//! ICRC in hardware, as a real NIC does: their drivers send frames with
//! [`OFFLOADED_ICRC`](crate::wire::frame::OFFLOADED_ICRC) in its place
//! (`transport::Offload`), and the fabric gives such a frame its real ICRC
//! wherever it would show ([`crate::wire::frame::complete_offloaded_icrc`]):
//! in a capture (sent and received frames alike), and before a
//! corruption flips one of its bits, so that the receiver's check finds
//! the damage. Elsewhere the field stays as sent, which nothing on the
//! way reads (switches rewrite only fields the ICRC does not cover).

#![deny(unsafe_code)]
use std::collections::VecDeque;
use std::fmt;
use std::io::Write;

use crate::backend::loopback::VecBuf;
use crate::backend::FrameBuf;
use crate::pcap::{self, PcapError};
use crate::time::Instant;
use crate::wire::ethernet::HEADER_LEN as ETH_HEADER_LEN;
use crate::wire::MacAddr;

mod calendar;
mod deadlock;
mod ecn;
mod engine;
mod hop;
mod link;
mod pfc;
#[cfg(test)]
mod pfc_tests;
mod port;
mod rng;
mod route;
mod sched;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod topo_tests;

use calendar::Calendar;

pub use deadlock::{DeadlockHop, DeadlockReport, DEFAULT_DEADLOCK_WINDOW};
pub use ecn::{frame_ecn, EcnField, RedConfig};
pub use link::{serialization_time, LinkConfig, LinkCounters};
pub use pfc::{
    is_mac_control, pause_duration, switch_port_mac, DynamicPfc, PfcConfig, PfcFrame, SwitchConfig,
    ETHERTYPE_MAC_CONTROL, MAC_CONTROL_DST, OPCODE_PFC,
};
pub use port::SimPort;
pub use rng::Rng;
use route::{Decision, Routes};
pub use sched::{frame_priority, EgressQueue, DEFAULT_DSCP_TO_PRIORITY, DRR_QUANTUM, PRIORITIES};

/// The capacity of the buffers [`SimPort::alloc`](crate::backend::Backend::alloc) hands
/// out: a jumbo frame.
pub const FRAME_CAPACITY: usize = 9216;

/// A host of a [`Fabric`] (an index into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(usize);

/// A switch of a [`Fabric`] (an index into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SwitchId(usize);

/// One direction of a link (an index into the [`Fabric`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId(usize);

impl HostId {
    /// The host's position among the fabric's hosts, from 0 in creation order.
    pub fn index(self) -> usize {
        self.0
    }
}

impl SwitchId {
    /// The switch's position among the fabric's switches, from 0 in creation order.
    pub fn index(self) -> usize {
        self.0
    }
}

impl ChannelId {
    /// The link direction's position among the fabric's, from 0 in creation order.
    pub fn index(self) -> usize {
        self.0
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host {}", self.0)
    }
}

impl fmt::Display for SwitchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "switch {}", self.0)
    }
}

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "channel {}", self.0)
    }
}

/// The two directions of a full-duplex link. For a link made by
/// [`Fabric::connect_to_switch`], `a` is the host and `b` the switch; for
/// one made by [`Fabric::connect_switches`], `a` and `b` are its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    /// The direction from `a` to `b`.
    pub a_to_b: ChannelId,
    /// The direction from `b` to `a`.
    pub b_to_a: ChannelId,
}

/// Where a link direction starts or ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A host (a host has one port).
    Host(HostId),
    /// A switch port (ports are numbered from 0 in connection order).
    Switch {
        /// The switch.
        switch: SwitchId,
        /// Its port.
        port: usize,
    },
}

/// Why a fabric cannot be built as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A link fault probability (`loss`, `reorder`, `dup`, `corrupt`,
    /// `ecn.pmax`) outside [0, 1].
    #[error("link config: {field} must be a probability in [0, 1], got {value}")]
    InvalidProbability {
        /// The config field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `reorder` above zero with `reorder_delay` zero.
    #[error("link config: reorder > 0 needs a reorder_delay above zero")]
    ReorderWithoutDelay,
    /// The link's ECN marking thresholds the wrong way round.
    #[error("link config: ECN marking needs kmin <= kmax, got kmin {kmin} B > kmax {kmax} B")]
    RedThresholds {
        /// Bytes waiting at or below which nothing is marked.
        kmin: usize,
        /// Bytes waiting above which every ECN-capable frame is marked.
        kmax: usize,
    },
    /// A host id from another fabric, or out of range.
    #[error("{0} is not in this fabric")]
    UnknownHost(HostId),
    /// A switch id from another fabric, or out of range.
    #[error("{0} is not in this fabric")]
    UnknownSwitch(SwitchId),
    /// A link direction id from another fabric, or out of range.
    #[error("{0} is not in this fabric")]
    UnknownChannel(ChannelId),
    /// The host already has its one link.
    #[error("{0} is already connected (a host has one port)")]
    AlreadyConnected(HostId),
    /// [`Fabric::connect`] of a host to itself.
    #[error("cannot connect {0} to itself")]
    SelfLoop(HostId),
    /// [`Fabric::connect_switches`] of a switch to itself.
    #[error("cannot connect {0} to itself")]
    SwitchSelfLoop(SwitchId),
    /// The host has no link yet.
    #[error("{0} has no link")]
    NotConnected(HostId),
    /// A switch on the frame's path has no route for its destination MAC.
    #[error("a frame for {mac} has no route at {switch}")]
    NoRoute {
        /// The switch without a route.
        switch: SwitchId,
        /// The frame's destination MAC.
        mac: MacAddr,
    },
    /// A static route names a port the switch does not have.
    #[error("{switch} has no port {port}")]
    UnknownPort {
        /// The switch.
        switch: SwitchId,
        /// The port it lacks.
        port: usize,
    },
    /// Two link directions that are not the two halves of one link.
    #[error("{a_to_b} and {b_to_a} are not the two directions of one link")]
    NotALink {
        /// The first direction given.
        a_to_b: ChannelId,
        /// The second direction given.
        b_to_a: ChannelId,
    },
    /// The link direction is down.
    #[error("{0} is down")]
    LinkDown(ChannelId),
    /// Frames for `dst` would go round a loop of switches.
    #[error("frames for {dst} would loop through {switch}")]
    RoutingLoop {
        /// A switch on the loop.
        switch: SwitchId,
        /// The destination host whose frames would loop.
        dst: HostId,
    },
    /// The frame is shorter than an Ethernet header or addressed to a group.
    #[error("the frame has no unicast destination (shorter than an Ethernet header, or a group address)")]
    NotUnicast,
    /// A host with this MAC is already attached to a switch.
    #[error("{switch} already has a host with MAC {mac}")]
    DuplicateMac {
        /// The switch the other host is attached to.
        switch: SwitchId,
        /// The MAC both hosts have.
        mac: MacAddr,
    },
    /// The ECN marking thresholds of one priority (`ecn_class`) the wrong
    /// way round.
    #[error("link config: ECN marking of priority {priority}: kmin {kmin} B > kmax {kmax} B")]
    ClassRedThresholds {
        /// The priority (0-7).
        priority: u8,
        /// Bytes waiting at or below which nothing is marked.
        kmin: usize,
        /// Bytes waiting above which every ECN-capable frame is marked.
        kmax: usize,
    },
    /// The switch's DSCP table maps a DSCP to a priority above 7.
    #[error("switch config: DSCP {dscp} maps to priority {priority}; priorities are 0-7")]
    DscpPriority {
        /// The DSCP (0-63).
        dscp: usize,
        /// The priority it maps to.
        priority: u8,
    },
    /// A PFC config with an empty priority mask.
    #[error("PFC config: no priority is enabled (priorities mask 0)")]
    PfcNoPriority,
    /// PFC thresholds the wrong way round.
    #[error("PFC config: xon must be <= xoff, got xon {xon} B > xoff {xoff} B")]
    PfcThresholds {
        /// A port's bytes of the priority at or below which it resumes its peer.
        xon: usize,
        /// A port's bytes of the priority above which it pauses its peer.
        xoff: usize,
    },
    /// A PFC pause time of zero quanta.
    #[error("PFC config: quanta must be above 0 (a pause of no time)")]
    PfcQuantaZero,
    /// [`Fabric::set_deadlock_window`] with a window of zero.
    #[error("deadlock detection window must be above zero (None turns detection off)")]
    DeadlockWindowZero,
}

/// What a host sent and received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostCounters {
    /// Frames handed to `tx_burst` (all are taken).
    pub tx_frames: u64,
    /// Bytes of those frames (whole Ethernet frames, no FCS).
    pub tx_bytes: u64,
    /// Frames that arrived in the host's inbox.
    pub rx_frames: u64,
    /// Bytes of those frames (whole Ethernet frames, no FCS).
    pub rx_bytes: u64,
    /// Frames sent while the host had no link.
    pub dropped_no_link: u64,
}

impl fmt::Display for HostCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx {} frames {} B, rx {} frames {} B, dropped without a link {}",
            self.tx_frames, self.tx_bytes, self.rx_frames, self.rx_bytes, self.dropped_no_link
        )
    }
}

/// What a switch did with the frames it received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SwitchCounters {
    /// Unicast frames queued on their destination's port.
    pub forwarded: u64,
    /// Broadcast or multicast frames copied to every other port (each
    /// counts once).
    pub flooded: u64,
    /// Unicast frames for no known host, or for the host port they came
    /// in by.
    pub dropped_unknown: u64,
    /// Unicast frames for a known host with no route from this switch (no
    /// path over links that are up, or an empty static route).
    pub dropped_no_route: u64,
    /// Frames shorter than an Ethernet header.
    pub dropped_runt: u64,
    /// IP packets whose TTL (IPv4) or hop limit (IPv6) ran out here: they
    /// arrived with 0 or 1.
    pub dropped_ttl: u64,
    /// Frames of lossy priorities refused by a full shared buffer
    /// ([`SwitchConfig::shared_buffer`]).
    pub dropped_shared_buffer: u64,
    /// Frames of PFC priorities refused beyond XOFF + headroom
    /// ([`PfcConfig::headroom`]: too little headroom).
    pub dropped_headroom: u64,
    /// Frames this switch's buffers refused (the shared buffer, headroom,
    /// or an egress port's drop-tail cap), by priority: which traffic
    /// class lost them, CNPs (6) or data (3), say.
    pub buffer_drops_by_priority: [u64; 8],
    /// Times an ingress (port, priority) rose above XOFF and paused its
    /// peer.
    pub xoff_events: u64,
    /// The most bytes the switch ever held.
    pub max_buffer_bytes: u64,
}

impl fmt::Display for SwitchCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "forwarded {}, flooded {}, dropped unknown {}, dropped without a route {}, \
             dropped runt {}, dropped with TTL expired {}, dropped by the shared buffer {}, \
             dropped beyond headroom {}, XOFF {}, max buffer {} B",
            self.forwarded,
            self.flooded,
            self.dropped_unknown,
            self.dropped_no_route,
            self.dropped_runt,
            self.dropped_ttl,
            self.dropped_shared_buffer,
            self.dropped_headroom,
            self.xoff_events,
            self.max_buffer_bytes
        )
    }
}

/// A capture file behind a trait object, whatever it writes to.
trait CaptureSink {
    fn put(&mut self, ts_ns: u64, data: &[u8]) -> Result<(), PcapError>;
    fn finish(&mut self) -> Result<(), PcapError>;
    fn count(&self) -> u64;
}

impl<W: Write> CaptureSink for pcap::Writer<W> {
    fn put(&mut self, ts_ns: u64, data: &[u8]) -> Result<(), PcapError> {
        self.write(ts_ns, data)
    }
    fn finish(&mut self) -> Result<(), PcapError> {
        self.flush()
    }
    fn count(&self) -> u64 {
        self.records()
    }
}

/// A host's capture: the file, and the first error writing it (after
/// which nothing more is written).
struct Capture {
    sink: Box<dyn CaptureSink>,
    error: Option<PcapError>,
    /// A copy of a frame whose offloaded ICRC is filled in.
    scratch: Vec<u8>,
}

impl Capture {
    /// Records a frame; with `icrc_offload`, one that carries an
    /// offloaded ICRC is recorded with its real one.
    fn record(&mut self, now: Instant, data: &[u8], icrc_offload: bool) {
        if self.error.is_some() {
            return;
        }
        let data = if icrc_offload {
            self.scratch.clear();
            self.scratch.extend_from_slice(data);
            crate::wire::frame::complete_offloaded_icrc(&mut self.scratch);
            &self.scratch[..]
        } else {
            data
        };
        if let Err(e) = self.sink.put(now.as_nanos(), data) {
            self.error = Some(e);
        }
    }
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("records", &self.sink.count())
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Host {
    mac: MacAddr,
    /// The host's outgoing link direction, once connected.
    egress: Option<ChannelId>,
    inbox: VecDeque<VecBuf>,
    counters: HostCounters,
    capture: Option<Capture>,
    /// The NIC's transmit ring: `tx_burst` takes frames only while fewer
    /// bytes than this wait on the host's link (`None`: always).
    tx_ring_bytes: Option<usize>,
    /// Listed among the woken hosts now.
    woken: bool,
}

#[derive(Debug)]
struct SwitchPort {
    /// The far end: a host, or a port of another switch.
    peer: Endpoint,
    /// From the peer into this port.
    ingress: ChannelId,
    /// From this port to the peer.
    egress: ChannelId,
}

/// One port of a switch, as [`Fabric::switch_ports`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortInfo {
    /// The port's number on its switch (from 0, in connection order).
    pub port: usize,
    /// The far end of its link: a host, or a port of another switch.
    pub peer: Endpoint,
    /// The link direction from the peer into this port.
    pub ingress: ChannelId,
    /// The link direction from this port to the peer.
    pub egress: ChannelId,
}

#[derive(Debug, Default)]
struct Switch {
    ports: Vec<SwitchPort>,
    counters: SwitchCounters,
    cfg: SwitchConfig,
    buffer: pfc::SwitchBuffer,
}

/// One direction of a link.
#[derive(Debug)]
struct Channel {
    cfg: LinkConfig,
    from: Endpoint,
    to: Endpoint,
    /// Takes new frames (see [`Fabric::set_link_up`]).
    up: bool,
    queue: EgressQueue,
    counters: LinkCounters,
}

/// The simulated network: its topology, virtual clock, pending events and
/// random generator. See the module docs for the call order.
///
/// Methods that build or change the fabric return [`SimError`] for an id
/// that is not in it; the accessors and [`Fabric::port`] panic on one, as
/// slice indexing does.
#[derive(Debug)]
pub struct Fabric {
    now: Instant,
    rng: Rng,
    events: Calendar,
    hosts: Vec<Host>,
    switches: Vec<Switch>,
    channels: Vec<Channel>,
    deadlock: deadlock::DeadlockDetector,
    /// The switches' forwarding tables, rebuilt when the topology changes.
    routes: Routes,
    /// Events processed so far.
    events_done: u64,
    /// Hosts something happened to since [`Fabric::take_woken`]: a frame
    /// arrived, or a frame left their link (room in the NIC's ring).
    woken: Vec<HostId>,
    /// Frame buffers the hosts are done with, for [`SimPort::alloc`]: no
    /// allocation per frame, as with an mbuf pool.
    spare: Vec<VecBuf>,
    /// The NICs compute the ICRC ([`Fabric::set_icrc_offload`]).
    icrc_offload: bool,
    /// The switches stamp INT trailers ([`Fabric::set_int_stamping`]).
    int_stamping: bool,
}

/// How many used frame buffers the fabric keeps for reuse.
pub(super) const SPARE_BUFFERS: usize = 1024;

impl Fabric {
    /// An empty fabric at time zero whose faults all follow from `seed`.
    pub fn new(seed: u64) -> Self {
        Fabric {
            now: Instant::ZERO,
            rng: Rng::new(seed),
            events: Calendar::default(),
            hosts: Vec::new(),
            switches: Vec::new(),
            channels: Vec::new(),
            deadlock: deadlock::DeadlockDetector::default(),
            routes: Routes::new(seed),
            events_done: 0,
            spare: Vec::new(),
            woken: Vec::new(),
            icrc_offload: false,
            int_stamping: true,
        }
    }

    /// Whether the switches stamp their hop into frames that carry an INT
    /// trailer (see the module docs); on by default. Off, a switch reads
    /// no frame as it leaves: for a fabric whose hosts never ask for INT,
    /// where it would find none.
    pub fn set_int_stamping(&mut self, on: bool) {
        self.int_stamping = on;
    }

    /// Whether the hosts' NICs compute the ICRC of RoCE v2 frames their
    /// drivers left it out of (see [ICRC offload](#icrc-offload)); off by
    /// default.
    pub fn set_icrc_offload(&mut self, on: bool) {
        self.icrc_offload = on;
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// A new, unconnected host with this MAC address.
    pub fn add_host(&mut self, mac: MacAddr) -> HostId {
        self.hosts.push(Host {
            mac,
            egress: None,
            inbox: VecDeque::new(),
            counters: HostCounters::default(),
            capture: None,
            tx_ring_bytes: None,
            woken: false,
        });
        self.routes.invalidate();
        HostId(self.hosts.len() - 1)
    }

    /// Gives the host a NIC that takes frames to send only while fewer
    /// than `bytes` wait on its link, as a real NIC pulls the next packet
    /// when its wire is free: `tx_burst` then leaves the rest with the
    /// caller, which asks its transport for no more meanwhile. Without it
    /// (`None`, the default) the host's link queue takes everything, and a
    /// sender's whole window can sit there beyond the reach of its pacer.
    pub fn set_tx_ring(&mut self, host: HostId, bytes: Option<usize>) {
        self.hosts[host.0].tx_ring_bytes = bytes;
    }

    /// A new switch with no ports.
    pub fn add_switch(&mut self) -> SwitchId {
        self.switches.push(Switch::default());
        self.routes.invalidate();
        SwitchId(self.switches.len() - 1)
    }

    /// Connects two hosts back to back; each direction gets a copy of `cfg`.
    pub fn connect(&mut self, a: HostId, b: HostId, cfg: LinkConfig) -> Result<Link, SimError> {
        cfg.check()?;
        self.unconnected_host(a)?;
        self.unconnected_host(b)?;
        if a == b {
            return Err(SimError::SelfLoop(a));
        }
        let link = self.add_link(Endpoint::Host(a), Endpoint::Host(b), cfg);
        self.hosts[a.0].egress = Some(link.a_to_b);
        self.hosts[b.0].egress = Some(link.b_to_a);
        Ok(link)
    }

    /// Connects a host to a new port of a switch, from which on every
    /// switch routes frames for the host's MAC towards that port (see the
    /// module docs). Both directions (`a_to_b`: host to switch) get a copy
    /// of `cfg`. The MAC must be new among the hosts attached to switches.
    pub fn connect_to_switch(
        &mut self,
        host: HostId,
        switch: SwitchId,
        cfg: LinkConfig,
    ) -> Result<Link, SimError> {
        cfg.check()?;
        self.unconnected_host(host)?;
        let sw = self
            .switches
            .get(switch.0)
            .ok_or(SimError::UnknownSwitch(switch))?;
        let port = sw.ports.len();
        let mac = self.hosts[host.0].mac;
        for (s, other) in self.switches.iter().enumerate() {
            for p in &other.ports {
                if matches!(p.peer, Endpoint::Host(h) if self.hosts[h.0].mac == mac) {
                    return Err(SimError::DuplicateMac {
                        switch: SwitchId(s),
                        mac,
                    });
                }
            }
        }
        let link = self.add_link(Endpoint::Host(host), Endpoint::Switch { switch, port }, cfg);
        self.switches[switch.0].ports.push(SwitchPort {
            peer: Endpoint::Host(host),
            ingress: link.a_to_b,
            egress: link.b_to_a,
        });
        self.hosts[host.0].egress = Some(link.a_to_b);
        self.routes.invalidate();
        Ok(link)
    }

    /// Connects two switches by a new port on each (`a_to_b`: from `a`'s
    /// port to `b`'s); each direction gets a copy of `cfg`. Two switches
    /// may have several links between them; a switch cannot be linked to
    /// itself.
    pub fn connect_switches(
        &mut self,
        a: SwitchId,
        b: SwitchId,
        cfg: LinkConfig,
    ) -> Result<Link, SimError> {
        cfg.check()?;
        for s in [a, b] {
            if s.0 >= self.switches.len() {
                return Err(SimError::UnknownSwitch(s));
            }
        }
        if a == b {
            return Err(SimError::SwitchSelfLoop(a));
        }
        let pa = self.switches[a.0].ports.len();
        let pb = self.switches[b.0].ports.len();
        let end_a = Endpoint::Switch {
            switch: a,
            port: pa,
        };
        let end_b = Endpoint::Switch {
            switch: b,
            port: pb,
        };
        let link = self.add_link(end_a, end_b, cfg);
        self.switches[a.0].ports.push(SwitchPort {
            peer: end_b,
            ingress: link.b_to_a,
            egress: link.a_to_b,
        });
        self.switches[b.0].ports.push(SwitchPort {
            peer: end_a,
            ingress: link.a_to_b,
            egress: link.b_to_a,
        });
        self.routes.invalidate();
        Ok(link)
    }

    fn unconnected_host(&self, h: HostId) -> Result<(), SimError> {
        match self.hosts.get(h.0) {
            None => Err(SimError::UnknownHost(h)),
            Some(host) if host.egress.is_some() => Err(SimError::AlreadyConnected(h)),
            Some(_) => Ok(()),
        }
    }

    fn add_link(&mut self, a: Endpoint, b: Endpoint, cfg: LinkConfig) -> Link {
        let mut channel = |from, to| {
            self.channels.push(Channel {
                cfg,
                from,
                to,
                up: true,
                queue: EgressQueue::default(),
                counters: LinkCounters::default(),
            });
            ChannelId(self.channels.len() - 1)
        };
        let a_to_b = channel(a, b);
        let b_to_a = channel(b, a);
        Link { a_to_b, b_to_a }
    }

    /// The host's MAC address.
    pub fn mac(&self, host: HostId) -> MacAddr {
        self.hosts[host.0].mac
    }

    /// The host's outgoing link direction, if it is connected.
    pub fn host_link(&self, host: HostId) -> Option<ChannelId> {
        self.hosts[host.0].egress
    }

    /// Frames waiting in the host's inbox.
    pub fn inbox_len(&self, host: HostId) -> usize {
        self.hosts[host.0].inbox.len()
    }

    /// What the host has sent and received so far.
    pub fn host_counters(&self, host: HostId) -> &HostCounters {
        &self.hosts[host.0].counters
    }

    /// What the switch has done with the frames it received so far.
    pub fn switch_counters(&self, switch: SwitchId) -> &SwitchCounters {
        &self.switches[switch.0].counters
    }

    /// What has happened on the link direction so far.
    pub fn link_counters(&self, ch: ChannelId) -> &LinkCounters {
        &self.channels[ch.0].counters
    }

    /// The link direction's rate, delay, queue and fault settings.
    pub fn link_config(&self, ch: ChannelId) -> &LinkConfig {
        &self.channels[ch.0].cfg
    }

    /// Where the link direction starts and ends.
    pub fn channel_ends(&self, ch: ChannelId) -> (Endpoint, Endpoint) {
        let c = &self.channels[ch.0];
        (c.from, c.to)
    }

    /// The link direction's egress queue.
    pub fn egress_queue(&self, ch: ChannelId) -> &EgressQueue {
        &self.channels[ch.0].queue
    }

    /// Every port of a switch, in port order, with its peer and its two
    /// link directions.
    pub fn switch_ports(&self, switch: SwitchId) -> impl Iterator<Item = PortInfo> + '_ {
        self.switches[switch.0]
            .ports
            .iter()
            .enumerate()
            .map(|(port, p)| PortInfo {
                port,
                peer: p.peer,
                ingress: p.ingress,
                egress: p.egress,
            })
    }

    /// One port of a switch (`None` for a switch or port that does not
    /// exist).
    pub fn switch_port(&self, switch: SwitchId, port: usize) -> Option<PortInfo> {
        let p = self.switches.get(switch.0)?.ports.get(port)?;
        Some(PortInfo {
            port,
            peer: p.peer,
            ingress: p.ingress,
            egress: p.egress,
        })
    }

    /// Recomputes every switch's forwarding tables now. Not needed for
    /// forwarding, which rebuilds them itself when the topology has
    /// changed; it moves that work to a moment of the caller's choosing.
    pub fn build_routes(&mut self) {
        self.routes
            .rebuild(&self.hosts, &self.switches, &self.channels);
    }

    fn fresh_routes(&mut self) {
        if self.routes.is_stale() {
            self.build_routes();
        }
    }

    /// The ports `switch` chooses among for a unicast frame to `dst`
    /// (empty: no route): its static route's ports that are up, if it has
    /// one, else those on shortest paths over links that are up.
    pub fn route_ports(&mut self, switch: SwitchId, dst: HostId) -> Result<&[usize], SimError> {
        if switch.0 >= self.switches.len() {
            return Err(SimError::UnknownSwitch(switch));
        }
        if dst.0 >= self.hosts.len() {
            return Err(SimError::UnknownHost(dst));
        }
        self.fresh_routes();
        Ok(self.routes.ports(switch.0, dst.0))
    }

    /// The link directions a frame with these bytes would take if `from`
    /// sent it now, faults and full queues aside: from the host's own link
    /// to the one that delivers it to a host. An error if it would be
    /// dropped on the way: no unicast destination
    /// ([`SimError::NotUnicast`]), a switch with no route for it
    /// ([`SimError::NoRoute`]), the host's own link down
    /// ([`SimError::LinkDown`]).
    pub fn path(&mut self, from: HostId, frame: &[u8]) -> Result<Vec<ChannelId>, SimError> {
        let host = self.hosts.get(from.0).ok_or(SimError::UnknownHost(from))?;
        let mut ch = host.egress.ok_or(SimError::NotConnected(from))?;
        if frame.len() < ETH_HEADER_LEN || frame[0] & 1 != 0 {
            return Err(SimError::NotUnicast);
        }
        self.fresh_routes();
        let mut path = Vec::new();
        let mut last = SwitchId(0);
        // A frame crosses each link direction at most once on a path the
        // tables allow; the bound only guards against a bug.
        for _ in 0..=self.channels.len() {
            if !self.channels[ch.0].up {
                return Err(SimError::LinkDown(ch));
            }
            path.push(ch);
            let (switch, in_port) = match self.channels[ch.0].to {
                Endpoint::Host(_) => return Ok(path),
                Endpoint::Switch { switch, port } => (switch, port),
            };
            last = switch;
            match self.routes.decide(&self.switches, switch.0, in_port, frame) {
                Decision::Port(p) => ch = self.switches[switch.0].ports[p].egress,
                _ => {
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&frame[..6]);
                    return Err(SimError::NoRoute {
                        switch,
                        mac: MacAddr(mac),
                    });
                }
            }
        }
        Err(SimError::RoutingLoop {
            switch: last,
            dst: self.routes.host_of_frame(frame).map_or(from, HostId),
        })
    }

    /// Replaces one direction's configuration. The new rate applies from
    /// the next frame to start serialising, the faults from the next frame
    /// to depart, the queue limit from the next frame queued.
    pub fn set_link_config(&mut self, ch: ChannelId, cfg: LinkConfig) -> Result<(), SimError> {
        cfg.check()?;
        let c = self
            .channels
            .get_mut(ch.0)
            .ok_or(SimError::UnknownChannel(ch))?;
        c.cfg = cfg;
        Ok(())
    }

    /// Pauses or resumes a link direction's egress queue as a whole, every
    /// priority, apart from PFC (which pauses single priorities and keeps
    /// its own timers). A paused queue keeps accepting frames but starts
    /// serialising no data frame; the frame on the wire finishes, and a
    /// PFC frame still goes out.
    pub fn set_paused(&mut self, ch: ChannelId, paused: bool) -> Result<(), SimError> {
        let c = self
            .channels
            .get_mut(ch.0)
            .ok_or(SimError::UnknownChannel(ch))?;
        c.queue.set_paused(paused);
        if !paused {
            self.start_next(ch);
        }
        Ok(())
    }

    /// Takes a link down or brings it back up, both directions at once
    /// (see [`Fabric::set_channel_up`]).
    pub fn set_link_up(&mut self, link: Link, up: bool) -> Result<(), SimError> {
        let (a, b) = (link.a_to_b, link.b_to_a);
        for ch in [a, b] {
            if ch.0 >= self.channels.len() {
                return Err(SimError::UnknownChannel(ch));
            }
        }
        let (ca, cb) = (&self.channels[a.0], &self.channels[b.0]);
        if a == b || ca.from != cb.to || ca.to != cb.from {
            return Err(SimError::NotALink {
                a_to_b: a,
                b_to_a: b,
            });
        }
        self.set_channel_up(a, up)?;
        self.set_channel_up(b, up)
    }

    /// Takes one direction of a link down or brings it back up. A direction
    /// that is down takes no new frame (each refused one counts in
    /// [`LinkCounters::dropped_down`]); as it goes down, the frames waiting
    /// in its queue are dropped (and count there too), while the one being
    /// serialised and those already on the wire arrive. Switches route
    /// around it from then on (see the module docs).
    pub fn set_channel_up(&mut self, ch: ChannelId, up: bool) -> Result<(), SimError> {
        let c = self
            .channels
            .get_mut(ch.0)
            .ok_or(SimError::UnknownChannel(ch))?;
        if c.up != up {
            c.up = up;
            if !up {
                let dropped = c.queue.drop_waiting();
                c.counters.dropped_down += dropped.len() as u64;
                if let Endpoint::Switch { switch, .. } = c.from {
                    for (p, q) in dropped {
                        if let Some(port) = q.ingress {
                            self.switch_release(switch, port as usize, p, q.frame.len());
                        }
                    }
                }
            }
            self.routes.invalidate();
        }
        Ok(())
    }

    /// Whether the link direction takes frames ([`Fabric::set_channel_up`]).
    pub fn is_up(&self, ch: ChannelId) -> bool {
        self.channels[ch.0].up
    }

    /// Makes `switch` send unicast frames for `dst` by one of `ports`
    /// (picked by the flow hash, as for equal-cost paths; a port listed
    /// twice gets twice the share), instead of by its shortest paths, until
    /// [`Fabric::clear_route`]. Ports that are down are skipped; with none
    /// left (or none given), frames for `dst` are dropped at `switch`
    /// ([`SwitchCounters::dropped_no_route`]). The route holds whatever
    /// links fail or recover later.
    ///
    /// Refused if a port does not exist, or if frames for `dst` could then
    /// go round in a loop ([`SimError::RoutingLoop`]: every switch on the
    /// way needs a route that leads on). Should a link failure later close
    /// such a loop, its switches drop frames for `dst` rather than send
    /// them round it.
    pub fn set_route(
        &mut self,
        switch: SwitchId,
        dst: HostId,
        ports: &[usize],
    ) -> Result<(), SimError> {
        self.known_route_key(switch, dst)?;
        let have = self.switches[switch.0].ports.len();
        if let Some(&port) = ports.iter().find(|&&p| p >= have) {
            return Err(SimError::UnknownPort { switch, port });
        }
        let before = self
            .routes
            .set_static(dst.0, switch.0, Some(ports.to_vec()));
        self.check_loop_free(switch, dst, before)
    }

    /// Removes `switch`'s static route for `dst` (if any): its shortest
    /// paths apply again. Refused, as [`Fabric::set_route`] is, if frames
    /// for `dst` could then go round in a loop.
    pub fn clear_route(&mut self, switch: SwitchId, dst: HostId) -> Result<(), SimError> {
        self.known_route_key(switch, dst)?;
        let before = self.routes.set_static(dst.0, switch.0, None);
        self.check_loop_free(switch, dst, before)
    }

    fn known_route_key(&self, switch: SwitchId, dst: HostId) -> Result<(), SimError> {
        if switch.0 >= self.switches.len() {
            return Err(SimError::UnknownSwitch(switch));
        }
        if dst.0 >= self.hosts.len() {
            return Err(SimError::UnknownHost(dst));
        }
        Ok(())
    }

    /// Rebuilds the routes after a change of `switch`'s static route for
    /// `dst`; if frames for `dst` could loop, puts back the route it had
    /// (`before`) and refuses.
    fn check_loop_free(
        &mut self,
        switch: SwitchId,
        dst: HostId,
        before: Option<Vec<usize>>,
    ) -> Result<(), SimError> {
        self.build_routes();
        let Some(at) = self.routes.loop_at(dst.0) else {
            return Ok(());
        };
        self.routes.set_static(dst.0, switch.0, before);
        self.routes.invalidate();
        Err(SimError::RoutingLoop {
            switch: SwitchId(at),
            dst,
        })
    }

    /// Records every frame the host sends and receives from now on into
    /// `writer` (replacing, and dropping unflushed, any earlier capture of
    /// this host). See the module docs.
    pub fn capture<W: Write + 'static>(
        &mut self,
        host: HostId,
        writer: pcap::Writer<W>,
    ) -> Result<(), SimError> {
        let h = self
            .hosts
            .get_mut(host.0)
            .ok_or(SimError::UnknownHost(host))?;
        h.capture = Some(Capture {
            sink: Box::new(writer),
            error: None,
            scratch: Vec::new(),
        });
        Ok(())
    }

    /// Stops the host's capture and flushes it. Returns the records
    /// written (0 without a capture), or the first error met writing them
    /// (after which the capture had stopped recording).
    pub fn end_capture(&mut self, host: HostId) -> Result<u64, PcapError> {
        let Some(mut cap) = self.hosts[host.0].capture.take() else {
            return Ok(0);
        };
        if let Some(e) = cap.error.take() {
            return Err(e);
        }
        cap.sink.finish()?;
        Ok(cap.sink.count())
    }
}
