//! Switch buffers and priority-based flow control (IEEE 802.1Qbb): a
//! switch's configuration ([`SwitchConfig`], [`PfcConfig`]), its buffer
//! accounting, the PFC frame ([`PfcFrame`]; 802.3 Annex 31B), and how
//! switches send it and every MAC (switch port or host NIC) obeys it.
//!
//! # Buffers
//!
//! A frame is accounted to a switch from its arrival until its copy on an
//! egress link has been serialised, both in the switch's shared buffer and
//! in a counter per (ingress port, priority). A lossy priority's frame is
//! dropped when the shared buffer ([`SwitchConfig::shared_buffer`]) has no
//! room for it ([`SwitchCounters::dropped_shared_buffer`]), unless its
//! (ingress port, priority) holds less than that priority's guaranteed
//! minimum ([`SwitchConfig::reserved`], as a switch reserves a little
//! buffer per port and priority group so that, say, CNPs still pass a
//! buffer full of lossless data), or by the egress
//! link's drop-tail limit ([`LinkConfig::queue_bytes`],
//! [`LinkCounters::dropped_queue`]). A PFC priority's frame is never
//! dropped by either (it counts in the shared buffer but may take it past
//! its size); it is dropped only when its ingress counter would exceed
//! XOFF + headroom ([`SwitchCounters::dropped_headroom`]: the headroom was
//! too small for what was in flight when the pause was sent).
//!
//! # PFC
//!
//! When the ingress counter of (port, p) of a PFC priority rises above
//! [`PfcConfig::xoff`], the switch sends a PFC frame out of that port,
//! towards the upstream peer, pausing p for [`PfcConfig::quanta`] (units of
//! 512 bit times at the paused link's rate). While any priority of the port
//! stays above XON it sends the pause again every half pause time; when
//! the counter falls to [`PfcConfig::xon`] or below, it sends quanta 0
//! (resume). A PFC frame goes out before the frames queued on its link
//! (right after the frame on the wire), takes its serialisation time and
//! the link's delay, meets no fault, is never dropped, never marked, never
//! forwarded and never delivered to a host's inbox: the receiving MAC
//! consumes it ([`LinkCounters::pfc_rx`]) and pauses the given priorities
//! of its own egress on that link for quanta x 512 bit times at that
//! egress's rate (a later PFC frame replaces the time left; quanta 0
//! resumes at once). A pause ends through a calendar event at its expiry;
//! an event overtaken by a later frame is skipped (and never left as the
//! next event: [`Fabric::next_event`] and [`Fabric::run_until_idle`] see
//! only live timers). Hosts obey PFC and never send it.
//!
//! # Dynamic thresholds
//!
//! With [`PfcConfig::dynamic`] set, XOFF is not a fixed byte count but a
//! share of the free shared buffer, as the HPCC simulator's switch MMU
//! computes it (alibaba-edu/High-Precision-Congestion-Control,
//! `simulation/src/point-to-point/model/switch-mmu.cc`,
//! `GetPfcThreshold`, `CheckShouldPause`, `CheckShouldResume`): the
//! threshold is T = (B - used) >> shift, α = 1/2^shift of what the shared
//! buffer B has free (`used`: every byte the switch holds; an unbounded
//! buffer never runs short, so T is then as large as it gets). A lossless
//! frame that would take its (port, priority)'s bytes in the shared pool
//! past T is taken into that pair's headroom instead; one that finds the
//! headroom full ([`PfcConfig::headroom`]) is dropped. The port pauses its
//! peer once its bytes in the pool reach T or anything sits in its
//! headroom, and resumes it when its headroom is empty and its bytes in
//! the pool are none or at most T less [`DynamicPfc::resume_offset`]. A
//! fuller buffer so pauses at fewer bytes. [`PfcConfig::xoff`] and
//! [`PfcConfig::xon`] are not used then. Unlike that MMU, headroom and the
//! lossy reserve are not set aside from B beforehand: they count in
//! `used` as they fill, and no per-port reserve precedes the pool for
//! lossless priorities.
//!
//! An infinitely fast link (`rate_bps` 0) makes every pause last no time:
//! PFC needs a finite rate. With a short pause time and a long link, the
//! refresh can arrive after the pause lapsed, as on real links.

use super::calendar::EventKind;
use super::deadlock::DeadlockReport;
use super::sched::{frame_priority, DEFAULT_DSCP_TO_PRIORITY, PRIORITIES};
use super::{serialization_time, ChannelId, Endpoint, Fabric, SimError, SwitchId};
#[cfg(doc)]
use super::{LinkConfig, LinkCounters, SwitchCounters};
use crate::backend::loopback::VecBuf;
use crate::backend::FrameBuf;
use crate::time::{Duration, Instant};
use crate::wire::MacAddr;

/// The destination of MAC control frames (802.3 Annex 31B): never
/// forwarded by a bridge.
pub const MAC_CONTROL_DST: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
/// The MAC control EtherType (802.3 clause 31).
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// The PFC opcode (802.1Qbb clause 36, 802.3 Annex 31D).
pub const OPCODE_PFC: u16 = 0x0101;

/// A PFC frame's content: which priorities it speaks for (the class-enable
/// vector) and the pause time of each, in quanta of 512 bit times (0:
/// resume).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PfcFrame {
    /// Bit `p` set: `quanta[p]` applies to priority `p`.
    pub enable: u8,
    /// Pause times, priority 0 first; ignored where `enable` is clear.
    pub quanta: [u16; PRIORITIES],
}

impl PfcFrame {
    /// The frame's length: the 64-byte minimum less the FCS the simulator
    /// does not carry.
    pub const LEN: usize = 60;

    /// A frame for one priority.
    pub fn single(priority: u8, quanta: u16) -> PfcFrame {
        let mut f = PfcFrame::default();
        f.set(priority, quanta);
        f
    }

    /// Enables `priority` with `quanta` (priorities above 7 are ignored).
    pub fn set(&mut self, priority: u8, quanta: u16) {
        if let Some(q) = self.quanta.get_mut(usize::from(priority)) {
            *q = quanta;
            self.enable |= 1 << priority;
        }
    }

    /// Takes every priority `other` enables, with its time.
    pub fn merge(&mut self, other: &PfcFrame) {
        for p in 0..PRIORITIES as u8 {
            if other.enable & (1 << p) != 0 {
                self.set(p, other.quanta[usize::from(p)]);
            }
        }
    }

    /// The frame's bytes (802.3 Annex 31B, 802.1Qbb clause 36): destination
    /// 01-80-C2-00-00-01, `src`, EtherType 0x8808, opcode 0x0101, the
    /// class-enable vector (a reserved zero octet, then bit `p` for
    /// priority `p`), eight 2-byte times (priority 0 first), zero padding
    /// to 60 bytes.
    pub fn emit(&self, src: MacAddr) -> [u8; PfcFrame::LEN] {
        let mut b = [0u8; PfcFrame::LEN];
        b[0..6].copy_from_slice(&MAC_CONTROL_DST.0);
        b[6..12].copy_from_slice(&src.0);
        b[12..14].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
        b[14..16].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        b[16..18].copy_from_slice(&u16::from(self.enable).to_be_bytes());
        for (i, q) in self.quanta.iter().enumerate() {
            let q = if self.enable & (1 << i) != 0 { *q } else { 0 };
            b[18 + 2 * i..20 + 2 * i].copy_from_slice(&q.to_be_bytes());
        }
        b
    }

    /// A PFC frame's content, or `None` for any other frame (or one too
    /// short for its fields). Never panics.
    pub fn parse(frame: &[u8]) -> Option<PfcFrame> {
        if !is_mac_control(frame) || frame.len() < 34 {
            return None;
        }
        let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
        if be16(14) != OPCODE_PFC {
            return None;
        }
        let mut f = PfcFrame {
            enable: (be16(16) & 0xff) as u8,
            quanta: [0; PRIORITIES],
        };
        for (i, q) in f.quanta.iter_mut().enumerate() {
            *q = be16(18 + 2 * i);
        }
        Some(f)
    }
}

/// Whether a frame is a MAC control frame (to 01-80-C2-00-00-01 with
/// EtherType 0x8808), which a MAC consumes and never passes on.
pub fn is_mac_control(frame: &[u8]) -> bool {
    frame.len() >= 14
        && frame[0..6] == MAC_CONTROL_DST.0
        && frame[12..14] == ETHERTYPE_MAC_CONTROL.to_be_bytes()
}

/// The source MAC of a switch port's PFC frames: locally administered,
/// 02-FF-ss-ss-pp-pp (switch and port numbers).
pub fn switch_port_mac(switch: SwitchId, port: usize) -> MacAddr {
    let s = (switch.index() as u16).to_be_bytes();
    let p = (port as u16).to_be_bytes();
    MacAddr([0x02, 0xff, s[0], s[1], p[0], p[1]])
}

/// How long `quanta` x 512 bit times last at `rate_bps` (rounded up to the
/// next nanosecond; zero at an infinite rate).
pub fn pause_duration(quanta: u16, rate_bps: u64) -> Duration {
    serialization_time(usize::from(quanta) * 64, rate_bps)
}

/// A switch's PFC settings (IEEE 802.1Qbb), the same on every port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PfcConfig {
    /// The lossless priorities (bit `p` for priority `p`).
    pub priorities: u8,
    /// A port's bytes of one priority above which it pauses its peer.
    pub xoff: usize,
    /// At or below which it resumes it (at most `xoff`).
    pub xon: usize,
    /// Bytes a port takes of one priority beyond `xoff` (what is in flight
    /// when the pause goes out) before it drops.
    pub headroom: usize,
    /// The pause time a PFC frame asks for, in 512 bit times (not 0).
    pub quanta: u16,
    /// Thresholds that follow the free shared buffer (see the module
    /// docs); `None`: the static `xoff` and `xon`.
    pub dynamic: Option<DynamicPfc>,
}

/// A dynamic PFC threshold: XOFF at α = 1/2^`alpha_shift` of the free
/// shared buffer, XON `resume_offset` bytes below it (the HPCC
/// simulator's `pfc_a_shift` and `resume_offset`, `switch-mmu.cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DynamicPfc {
    /// α = 1/2^alpha_shift (3: 1/8, that simulator's default).
    pub alpha_shift: u8,
    /// How far below the threshold a port's bytes must fall to resume
    /// (3 KiB there).
    pub resume_offset: usize,
}

impl DynamicPfc {
    /// The threshold with `free` bytes of the shared buffer free.
    pub fn threshold(&self, free: usize) -> usize {
        free.checked_shr(u32::from(self.alpha_shift)).unwrap_or(0)
    }
}

impl PfcConfig {
    /// PFC on `priorities` with these thresholds and the longest pause
    /// (quanta 0xFFFF), if they pass [`PfcConfig::check`].
    pub fn new(
        priorities: u8,
        xoff: usize,
        xon: usize,
        headroom: usize,
    ) -> Result<PfcConfig, SimError> {
        let c = PfcConfig {
            priorities,
            xoff,
            xon,
            headroom,
            quanta: 0xffff,
            dynamic: None,
        };
        c.check()?;
        Ok(c)
    }

    /// Rejects no priority at all, `xon > xoff` and quanta 0 (a pause of
    /// no time).
    pub fn check(&self) -> Result<(), SimError> {
        if self.priorities == 0 {
            return Err(SimError::PfcNoPriority);
        }
        if self.xon > self.xoff {
            return Err(SimError::PfcThresholds {
                xon: self.xon,
                xoff: self.xoff,
            });
        }
        if self.quanta == 0 {
            return Err(SimError::PfcQuantaZero);
        }
        Ok(())
    }

    fn lossless(&self, p: u8) -> bool {
        self.priorities & (1 << p) != 0
    }
}

/// How a switch classifies, schedules and buffers frames. The default is
/// one unbounded buffer, no PFC, no strict priority, DSCP >> 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SwitchConfig {
    /// The priority of an untagged IP frame by its DSCP (each 0-7).
    #[serde(serialize_with = "serialize_table")]
    pub dscp_to_priority: [u8; 64],
    /// Priorities served by strict priority, highest first, before the
    /// others share the link by deficit round robin (bit `p` for `p`).
    pub strict: u8,
    /// Bytes the whole switch buffers; `None`: unbounded.
    pub shared_buffer: Option<usize>,
    /// Bytes per (ingress port, lossy priority) admitted even when the
    /// shared buffer is full, indexed by priority; they count in the
    /// shared buffer all the same, which may so go past its size by at
    /// most their sum over the ports.
    pub reserved: [usize; PRIORITIES],
    /// PFC on some priorities; `None`: every priority is lossy.
    pub pfc: Option<PfcConfig>,
}

fn serialize_table<S: serde::Serializer>(t: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&t[..], s)
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            dscp_to_priority: DEFAULT_DSCP_TO_PRIORITY,
            strict: 0,
            shared_buffer: None,
            reserved: [0; PRIORITIES],
            pfc: None,
        }
    }
}

impl SwitchConfig {
    /// Rejects a DSCP table entry above 7 and a [`PfcConfig`] that fails
    /// its check.
    pub fn check(&self) -> Result<(), SimError> {
        if let Some((dscp, &priority)) = self
            .dscp_to_priority
            .iter()
            .enumerate()
            .find(|(_, &p)| usize::from(p) >= PRIORITIES)
        {
            return Err(SimError::DscpPriority { dscp, priority });
        }
        if let Some(pfc) = &self.pfc {
            pfc.check()?;
        }
        Ok(())
    }
}

/// One switch port's ingress accounting and PFC state.
#[derive(Debug, Clone, Copy, Default)]
struct PortBuffer {
    /// Bytes in the switch that came in by this port, per priority.
    ingress: [usize; PRIORITIES],
    /// Under dynamic thresholds: bytes per priority taken into headroom
    /// (past the threshold), part of `ingress`.
    headroom: [usize; PRIORITIES],
    /// Priorities this port has paused its peer for (above XOFF, not yet
    /// back to XON).
    xoff: u8,
    /// When the pending refresh is due, while `xoff` is not empty.
    refresh_at: Option<Instant>,
}

/// A switch's buffer accounting.
#[derive(Debug, Default)]
pub(super) struct SwitchBuffer {
    /// Bytes in the switch.
    used: usize,
    /// Per ingress port (grown as ports appear).
    ports: Vec<PortBuffer>,
}

impl SwitchBuffer {
    fn port(&self, port: usize) -> PortBuffer {
        self.ports.get(port).copied().unwrap_or_default()
    }

    /// The dynamic threshold now: a share of what `cap` has free.
    fn dynamic_threshold(&self, cap: Option<usize>, d: DynamicPfc) -> usize {
        d.threshold(cap.map_or(usize::MAX, |c| c.saturating_sub(self.used)))
    }

    fn port_mut(&mut self, port: usize) -> &mut PortBuffer {
        if port >= self.ports.len() {
            self.ports.resize(port + 1, PortBuffer::default());
        }
        &mut self.ports[port]
    }
}

impl Fabric {
    /// A new switch with no ports and this configuration, if it passes
    /// [`SwitchConfig::check`].
    pub fn add_switch_with(&mut self, cfg: SwitchConfig) -> Result<SwitchId, SimError> {
        cfg.check()?;
        let s = self.add_switch();
        self.switches[s.index()].cfg = cfg;
        Ok(s)
    }

    /// Replaces a switch's configuration. Meant for before traffic flows:
    /// frames already buffered stay accounted where they are, and a port
    /// that paused its peer under PFC that is now off resumes it as its
    /// next frame leaves.
    pub fn set_switch_config(
        &mut self,
        switch: SwitchId,
        cfg: SwitchConfig,
    ) -> Result<(), SimError> {
        cfg.check()?;
        let sw = self
            .switches
            .get_mut(switch.index())
            .ok_or(SimError::UnknownSwitch(switch))?;
        sw.cfg = cfg;
        Ok(())
    }

    /// The switch's buffer, DSCP and PFC settings.
    pub fn switch_config(&self, switch: SwitchId) -> &SwitchConfig {
        &self.switches[switch.index()].cfg
    }

    /// Bytes the switch holds now (every frame from its arrival until it
    /// has been serialised out).
    pub fn switch_buffer_bytes(&self, switch: SwitchId) -> usize {
        self.switches[switch.index()].buffer.used
    }

    /// Bytes of priority `p` the switch holds now that came in by `port`.
    pub fn ingress_bytes(&self, switch: SwitchId, port: usize, p: u8) -> usize {
        self.switches[switch.index()].buffer.port(port).ingress[usize::from(p)]
    }

    /// How long PFC has held priority `p` of a link direction paused, the
    /// pause going on now included (up to [`Fabric::now`]).
    pub fn paused_time(&self, ch: ChannelId, p: u8) -> Duration {
        let c = &self.channels[ch.index()];
        let closed = c.counters.paused_ns[usize::from(p)];
        Duration::from_nanos(closed + c.queue.ongoing_pause(p, self.now).as_nanos())
    }

    /// The PFC deadlocks found so far, in the order found.
    pub fn deadlocks(&self) -> &[DeadlockReport] {
        self.deadlock.reports()
    }

    /// Queues a frame that came in by `in_port` on the switch's egress
    /// link `ch`, or drops it (a link that is down refuses it, see
    /// [`Fabric::set_channel_up`]; the buffer rules are in the module docs);
    /// may pause `in_port`'s peer.
    pub(super) fn switch_enqueue(
        &mut self,
        switch: SwitchId,
        in_port: usize,
        ch: ChannelId,
        frame: VecBuf,
    ) {
        let c = &mut self.channels[ch.index()];
        if !c.up {
            c.counters.dropped_down += 1;
            return self.recycle(frame);
        }
        let sw = &mut self.switches[switch.index()];
        let p = frame_priority(frame.data(), &sw.cfg.dscp_to_priority);
        let len = frame.len();
        let pfc = sw.cfg.pfc.filter(|c| c.lossless(p));
        let mut to_headroom = false;
        match &pfc {
            Some(pfc) => {
                let held = sw.buffer.port(in_port);
                let over = match pfc.dynamic {
                    None => {
                        held.ingress[usize::from(p)] + len > pfc.xoff.saturating_add(pfc.headroom)
                    }
                    Some(d) => {
                        let t = sw.buffer.dynamic_threshold(sw.cfg.shared_buffer, d);
                        let hdrm = held.headroom[usize::from(p)];
                        to_headroom = held.ingress[usize::from(p)] - hdrm + len > t;
                        to_headroom && hdrm + len > pfc.headroom
                    }
                };
                if over {
                    sw.counters.dropped_headroom += 1;
                    sw.counters.buffer_drops_by_priority[usize::from(p)] += 1;
                    return self.recycle(frame);
                }
            }
            None => {
                let held = sw.buffer.port(in_port).ingress[usize::from(p)];
                let guaranteed = held + len <= sw.cfg.reserved[usize::from(p)];
                if let Some(cap) = sw.cfg.shared_buffer.filter(|_| !guaranteed) {
                    if sw.buffer.used + len > cap {
                        sw.counters.dropped_shared_buffer += 1;
                        sw.counters.buffer_drops_by_priority[usize::from(p)] += 1;
                        return self.recycle(frame);
                    }
                }
            }
        }
        if !self.enqueue_class(ch, frame, p, pfc.is_none(), Some(in_port as u32)) {
            let sw = &mut self.switches[switch.index()];
            sw.counters.buffer_drops_by_priority[usize::from(p)] += 1;
            return;
        }
        let sw = &mut self.switches[switch.index()];
        sw.buffer.used += len;
        sw.counters.max_buffer_bytes = sw.counters.max_buffer_bytes.max(sw.buffer.used as u64);
        let t = pfc
            .and_then(|c| c.dynamic)
            .map(|d| sw.buffer.dynamic_threshold(sw.cfg.shared_buffer, d));
        let port = sw.buffer.port_mut(in_port);
        port.ingress[usize::from(p)] += len;
        if to_headroom {
            port.headroom[usize::from(p)] += len;
        }
        let Some(pfc) = pfc else {
            return;
        };
        let above = match t {
            None => port.ingress[usize::from(p)] > pfc.xoff,
            Some(t) => {
                let hdrm = port.headroom[usize::from(p)];
                hdrm > 0 || port.ingress[usize::from(p)] - hdrm >= t
            }
        };
        if !above || port.xoff & (1 << p) != 0 {
            return;
        }
        port.xoff |= 1 << p;
        let refresh = port.refresh_at.is_none();
        sw.counters.xoff_events += 1;
        self.send_pfc(switch, in_port, PfcFrame::single(p, pfc.quanta));
        if refresh {
            self.schedule_refresh(switch, in_port, pfc.quanta);
        }
    }

    /// A frame that came in by `port` has left the switch.
    pub(super) fn switch_release(&mut self, switch: SwitchId, port: usize, p: u8, len: usize) {
        let sw = &mut self.switches[switch.index()];
        sw.buffer.used -= len;
        let xon = sw.cfg.pfc.map_or(usize::MAX, |c| c.xon);
        let dynamic = sw.cfg.pfc.and_then(|c| c.dynamic);
        let t = dynamic.map(|d| sw.buffer.dynamic_threshold(sw.cfg.shared_buffer, d));
        let pb = sw.buffer.port_mut(port);
        pb.ingress[usize::from(p)] -= len;
        let hdrm = &mut pb.headroom[usize::from(p)];
        *hdrm -= (*hdrm).min(len);
        let resume = match (dynamic, t) {
            (Some(d), Some(t)) => {
                let shared = pb.ingress[usize::from(p)] - pb.headroom[usize::from(p)];
                pb.headroom[usize::from(p)] == 0
                    && (shared == 0 || shared.saturating_add(d.resume_offset) <= t)
            }
            _ => pb.ingress[usize::from(p)] <= xon,
        };
        if pb.xoff & (1 << p) == 0 || !resume {
            return;
        }
        pb.xoff &= !(1 << p);
        if pb.xoff == 0 {
            pb.refresh_at = None;
        }
        self.send_pfc(switch, port, PfcFrame::single(p, 0));
    }

    /// Queues a PFC frame out of a switch port, ahead of its data (none
    /// while the link is down).
    fn send_pfc(&mut self, switch: SwitchId, port: usize, pfc: PfcFrame) {
        let (_, egress) = self.switch_port_channels(switch, port);
        let c = &mut self.channels[egress.index()];
        if !c.up {
            return;
        }
        c.queue.push_control(pfc);
        self.start_next(egress);
    }

    /// Schedules the next refresh of a port's pauses, half a pause time
    /// away at the rate of the link it pauses (none at an infinite rate).
    fn schedule_refresh(&mut self, switch: SwitchId, port: usize, quanta: u16) {
        let (ingress, _) = self.switch_port_channels(switch, port);
        let pause = pause_duration(quanta, self.channels[ingress.index()].cfg.rate_bps);
        let pb = self.switches[switch.index()].buffer.port_mut(port);
        if pause == Duration::ZERO {
            pb.refresh_at = None;
            return;
        }
        let at = self.now + Duration::from_nanos((pause.as_nanos() / 2).max(1));
        pb.refresh_at = Some(at);
        self.events.push(at, EventKind::PfcRefresh(switch, port));
    }

    /// A port's refresh timer: pauses its peer again for every priority
    /// still above XON, then looks for deadlocks.
    pub(super) fn pfc_refresh(&mut self, switch: SwitchId, port: usize, at: Instant) {
        let sw = &mut self.switches[switch.index()];
        let pb = sw.buffer.port_mut(port);
        if pb.refresh_at != Some(at) {
            return;
        }
        pb.refresh_at = None;
        let (xoff, pfc) = (pb.xoff, sw.cfg.pfc);
        let Some(pfc) = pfc.filter(|_| xoff != 0) else {
            return;
        };
        let mut frame = PfcFrame::default();
        for p in 0..PRIORITIES as u8 {
            if xoff & (1 << p) != 0 {
                frame.set(p, pfc.quanta);
            }
        }
        self.send_pfc(switch, port, frame);
        self.schedule_refresh(switch, port, pfc.quanta);
        self.check_deadlocks();
    }

    /// A MAC control frame reaches the far end of `ch`: the MAC there
    /// consumes it, and a PFC frame pauses or resumes priorities of its
    /// own egress on that link.
    pub(super) fn mac_control_received(&mut self, ch: ChannelId, frame: &VecBuf) {
        let c = &mut self.channels[ch.index()];
        let Some(pfc) = PfcFrame::parse(frame.data()) else {
            return;
        };
        c.counters.pfc_rx += 1;
        let to = c.to;
        let paused = match to {
            Endpoint::Host(h) => self.hosts[h.index()].egress,
            Endpoint::Switch { switch, port } => Some(self.switch_port_channels(switch, port).1),
        };
        let Some(e) = paused else {
            return;
        };
        let now = self.now;
        let rate = self.channels[e.index()].cfg.rate_bps;
        for p in 0..PRIORITIES as u8 {
            if pfc.enable & (1 << p) == 0 {
                continue;
            }
            let d = pause_duration(pfc.quanta[usize::from(p)], rate);
            if d == Duration::ZERO {
                self.resume_class(e, p);
            } else {
                let until = now + d;
                self.channels[e.index()].queue.pause_class(p, now, until);
                self.events.push(until, EventKind::PauseExpire(e, p));
            }
        }
        self.start_next(e);
    }

    /// A pause timer: resumes the priority if this is still its expiry.
    pub(super) fn pause_expired(&mut self, ch: ChannelId, p: u8, at: Instant) {
        if self.channels[ch.index()].queue.pause_until(p) == Some(at) {
            self.resume_class(ch, p);
            self.start_next(ch);
        }
    }

    fn resume_class(&mut self, ch: ChannelId, p: u8) {
        let c = &mut self.channels[ch.index()];
        if let Some(d) = c.queue.resume_class(p, self.now) {
            c.counters.paused_ns[usize::from(p)] += d.as_nanos();
        }
    }

    /// Whether a pending timer has been overtaken (a later PFC frame moved
    /// the pause's end, or the port went back below XON): it would do
    /// nothing when due.
    pub(super) fn timer_is_stale(&self, kind: &EventKind, at: Instant) -> bool {
        match *kind {
            EventKind::PauseExpire(ch, p) => {
                self.channels[ch.index()].queue.pause_until(p) != Some(at)
            }
            EventKind::PfcRefresh(s, port) => {
                self.switches[s.index()].buffer.port(port).refresh_at != Some(at)
            }
            _ => false,
        }
    }
}
