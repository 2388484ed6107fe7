//! Glue between the RC transport and any backend: [`pump`] moves one
//! round of frames between an [`Endpoint`] (a [`Device`], or a host with
//! its neighbour table) and a [`Backend`] queue (the same function drives a
//! DPDK port and a simulated host), and [`SimNet`] runs devices on the
//! simulator's fabric in virtual time.

use crate::backend::sim::{Fabric, HostId, Link, LinkConfig, SimError, SwitchId};
use crate::backend::{Backend, Burst, FrameBuf};
use crate::time::{DeadlineHeap, Duration, Instant};
use crate::transport::{AddressVector, AttrMask, Device, DeviceConfig, Mtu, QpAttr, QpState};
use crate::wire::MacAddr;
use core::net::IpAddr;

/// Room for the largest frame the transport writes: path MTU 4096 plus
/// Ethernet with a VLAN tag (18), IPv6 (40), UDP (8), BTH (12), the
/// largest extension headers (AtomicETH, 28) and the ICRC (4) is 4206 B;
/// 4224 is what a 4352 B mbuf data room leaves after its 128 B headroom.
pub const MAX_FRAME: usize = 4224;

/// What [`pump`] drives: anything that takes received frames and writes
/// frames to send, in time: a transport [`Device`], or a
/// [`super::host::Host`] (a device and its neighbour table).
pub trait Endpoint {
    fn handle(&mut self, now: Instant, frame: &[u8]);
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
}

impl Endpoint for Device {
    fn handle(&mut self, now: Instant, frame: &[u8]) {
        Device::handle(self, now, frame)
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        Device::poll_transmit(self, now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Device::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Device::handle_timeout(self, now)
    }
}

/// What one [`pump`] moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpStats {
    pub rx: usize,
    pub tx: usize,
}

/// One round: every frame the queue has goes to the device, the timers due
/// at `now` run, then every frame the device has ready is written and sent
/// (a burst at a time, at most [`Backend::tx_room`] frames built ahead).
/// Frames the queue could not take stay in `pending` for the next round,
/// in order, and go first; the device is asked for no more while they
/// wait.
pub fn pump<E: Endpoint, B: Backend>(
    dev: &mut E,
    port: &mut B,
    now: Instant,
    pending: &mut Burst<B::Buf>,
) -> PumpStats {
    pump_with(dev, port, now, pending, &mut None)
}

/// [`pump`], keeping the buffer the device had nothing to write into in
/// `spare` for the next round instead of dropping it. Most rounds end with
/// such a buffer; where allocating one costs (the simulator's heap buffers
/// are allocated and zeroed to [`MAX_FRAME`] each time) this saves it.
pub fn pump_with<E: Endpoint, B: Backend>(
    dev: &mut E,
    port: &mut B,
    now: Instant,
    pending: &mut Burst<B::Buf>,
    spare: &mut Option<B::Buf>,
) -> PumpStats {
    let mut st = PumpStats::default();
    let mut rx = Burst::new();
    loop {
        let n = port.rx_burst(&mut rx);
        for f in rx.iter() {
            dev.handle(now, f.data());
        }
        port.free_burst(&mut rx);
        st.rx += n;
        if n == 0 {
            break;
        }
    }
    if dev.poll_timeout().is_some_and(|t| t <= now) {
        dev.handle_timeout(now);
    }
    loop {
        // What waits goes first; while the port has no room for it, the
        // device is asked for nothing more.
        if !pending.is_empty() {
            st.tx += port.tx_burst(pending);
            if !pending.is_empty() {
                break;
            }
        }
        let room = port.tx_room().min(pending.capacity());
        if room == 0 {
            break;
        }
        let mut pulled = 0;
        while pulled < room {
            let mut b = match spare.take() {
                Some(b) => b,
                None => {
                    let Some(mut b) = port.alloc() else { break };
                    if b.append(MAX_FRAME).is_none() {
                        break;
                    }
                    b
                }
            };
            match dev.poll_transmit(now, b.data_mut()) {
                Some(len) => {
                    b.truncate(len);
                    pending.push(b);
                    pulled += 1;
                }
                None => {
                    *spare = Some(b);
                    break;
                }
            }
        }
        if pulled < room {
            // The device has nothing more now: send what it gave.
            if !pending.is_empty() {
                st.tx += port.tx_burst(pending);
            }
            break;
        }
    }
    st
}

/// A host of a [`SimNet`]: its device and where it sits on the fabric.
pub struct SimHost {
    pub dev: Device,
    pub host: HostId,
    pending: Burst<crate::backend::loopback::VecBuf>,
    spare: Option<crate::backend::loopback::VecBuf>,
}

/// Devices on a simulated fabric, in virtual time.
///
/// Two ways to drive it: [`SimNet::pump_all`] and [`SimNet::next_time`]
/// visit every host at every step (simple, fine for a few hosts), while
/// [`SimNet::pump_active`] and [`SimNet::next_time_active`] visit only the
/// hosts that something happened to (a frame in, room in the NIC's ring,
/// a timer due, or [`SimNet::touch`] after the caller gave a device work),
/// which keeps a step's cost independent of the number of hosts.
pub struct SimNet {
    pub fabric: Fabric,
    pub hosts: Vec<SimHost>,
    /// Fabric host index -> index in `hosts`.
    by_fabric: Vec<usize>,
    /// Hosts to pump at the next [`SimNet::pump_active`], and whether
    /// each is listed.
    active: Vec<usize>,
    listed: Vec<bool>,
    /// Each host's next device timer as last seen, and those times in a
    /// heap.
    timer_of: Vec<Option<Instant>>,
    timers: DeadlineHeap<usize>,
    /// The [`SimNet::pump_active`] call in which a host's timer last
    /// pumped it, and the number of calls so far.
    timer_call: Vec<u64>,
    calls: u64,
    woken: Vec<HostId>,
}

/// The attributes two QPs are connected with by [`SimNet::connect_qps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: crate::transport::Access,
    /// First PSN each side sends (the other side's RQ PSN).
    pub psn_a: u32,
    pub psn_b: u32,
    /// DSCP and ECN bits of every packet; default
    /// [`DEFAULT_TRAFFIC_CLASS`](crate::transport::congestion::DEFAULT_TRAFFIC_CLASS).
    pub traffic_class: u8,
}

impl Default for ConnectParams {
    fn default() -> ConnectParams {
        use crate::transport::Access;
        ConnectParams {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            psn_a: 0,
            psn_b: 0,
            traffic_class: crate::transport::congestion::DEFAULT_TRAFFIC_CLASS,
        }
    }
}

/// The three `ibv_modify_qp` calls that bring an RC QP from RESET through
/// INIT and RTR to RTS towards `remote_qpn` at `remote_ip` (`remote_mac`;
/// zero for "resolve it"), sending from PSN `sq_psn` and expecting
/// `rq_psn`, with `p`'s attributes (as ibv_rc_pingpong and perftest do).
pub fn connect_steps(
    remote_qpn: u32,
    remote_mac: MacAddr,
    remote_ip: IpAddr,
    p: &ConnectParams,
    sq_psn: u32,
    rq_psn: u32,
) -> [(QpAttr, AttrMask); 3] {
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: p.access,
        ..QpAttr::default()
    };
    let mut rtr = init;
    rtr.qp_state = QpState::Rtr;
    rtr.ah_attr = Some(AddressVector {
        dgid: remote_ip,
        dmac: remote_mac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: p.traffic_class,
        flow_label: 0,
        src_port: None,
    });
    rtr.path_mtu = p.mtu;
    rtr.dest_qp_num = remote_qpn;
    rtr.rq_psn = rq_psn;
    rtr.max_dest_rd_atomic = p.max_rd_atomic;
    rtr.min_rnr_timer = p.min_rnr_timer;
    let mut rts = rtr;
    rts.qp_state = QpState::Rts;
    rts.timeout = p.timeout;
    rts.retry_cnt = p.retry_cnt;
    rts.rnr_retry = p.rnr_retry;
    rts.sq_psn = sq_psn;
    rts.max_rd_atomic = p.max_rd_atomic;
    [
        (
            init,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        ),
        (
            rtr,
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
                | AttrMask::MAX_DEST_RD_ATOMIC
                | AttrMask::MIN_RNR_TIMER,
        ),
        (
            rts,
            AttrMask::STATE
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::SQ_PSN
                | AttrMask::MAX_QP_RD_ATOMIC,
        ),
    ]
}

/// Brings QP `qpn` of `dev` to RTS with [`connect_steps`].
#[allow(clippy::too_many_arguments)]
pub fn connect_qp(
    dev: &mut Device,
    qpn: u32,
    remote_qpn: u32,
    remote_mac: MacAddr,
    remote_ip: IpAddr,
    p: &ConnectParams,
    sq_psn: u32,
    rq_psn: u32,
) -> Result<(), crate::transport::Error> {
    for (attr, mask) in connect_steps(remote_qpn, remote_mac, remote_ip, p, sq_psn, rq_psn) {
        dev.modify_qp(qpn, &attr, mask)?;
    }
    Ok(())
}

impl SimNet {
    pub fn new(seed: u64) -> SimNet {
        SimNet {
            fabric: Fabric::new(seed),
            hosts: Vec::new(),
            by_fabric: Vec::new(),
            active: Vec::new(),
            listed: Vec::new(),
            timer_of: Vec::new(),
            timers: DeadlineHeap::default(),
            timer_call: Vec::new(),
            calls: 1,
            woken: Vec::new(),
        }
    }

    /// Marks host `h` to be pumped at the next [`SimNet::pump_active`]:
    /// call it after giving its device work (a posted WR, a new QP).
    pub fn touch(&mut self, h: usize) {
        if !self.listed[h] {
            self.listed[h] = true;
            self.active.push(h);
        }
    }

    /// Pumps every host that something happened to, until none is left;
    /// returns frames moved and appends each pumped host once to
    /// `pumped` (whose completions may then be polled).
    pub fn pump_active(&mut self, pumped: &mut Vec<usize>, seen: &mut [bool]) -> usize {
        let now = self.fabric.now();
        let mut moved = 0;
        loop {
            self.fabric.take_woken(&mut self.woken);
            for i in 0..self.woken.len() {
                let h = self.by_fabric[self.woken[i].index()];
                if h != usize::MAX {
                    self.touch(h);
                }
            }
            self.woken.clear();
            // A timer due now pumps its host once per call: one that a
            // pump leaves due (nothing could move) waits for the next.
            let mut held = Vec::new();
            while let Some((h, t)) = self.timers.pop_due(now) {
                if self.timer_of[h] != Some(t) {
                    continue;
                }
                if self.timer_call[h] == self.calls {
                    held.push((h, t));
                } else {
                    self.timer_call[h] = self.calls;
                    self.timer_of[h] = None;
                    self.touch(h);
                }
            }
            for (h, t) in held {
                self.timer_of[h] = None;
                self.timers.arm(h, &mut self.timer_of[h], Some(t));
            }
            if self.active.is_empty() {
                self.calls += 1;
                return moved;
            }
            let mut list = std::mem::take(&mut self.active);
            for &h in &list {
                self.listed[h] = false;
                let host = &mut self.hosts[h];
                let mut port = self.fabric.port(host.host);
                let st = pump_with(
                    &mut host.dev,
                    &mut port,
                    now,
                    &mut host.pending,
                    &mut host.spare,
                );
                moved += st.rx + st.tx;
                let t = host.dev.poll_timeout();
                self.timers.arm(h, &mut self.timer_of[h], t);
                if !seen[h] {
                    seen[h] = true;
                    pumped.push(h);
                }
            }
            list.clear();
            if self.active.is_empty() {
                self.active = list;
            }
        }
    }

    /// The next instant anything happens (a frame event or a device
    /// timer), for a driver of [`SimNet::pump_active`].
    pub fn next_time_active(&mut self) -> Option<Instant> {
        let timer_of = &self.timer_of;
        self.timers.prune(
            |h| timer_of[h],
            timer_of.len(),
            || {
                timer_of
                    .iter()
                    .enumerate()
                    .filter_map(|(h, t)| t.map(|t| (h, t)))
            },
        );
        let dev = self.timers.next();
        match (self.fabric.next_event(), dev) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Adds a host with a device of this MAC and IP; returns its index.
    pub fn add_host(&mut self, cfg: DeviceConfig) -> Result<usize, crate::transport::Error> {
        let host = self.fabric.add_host(cfg.mac);
        let dev = Device::new(cfg)?;
        self.hosts.push(SimHost {
            dev,
            host,
            pending: Burst::new(),
            spare: None,
        });
        let i = self.hosts.len() - 1;
        if self.by_fabric.len() <= host.index() {
            self.by_fabric.resize(host.index() + 1, usize::MAX);
        }
        self.by_fabric[host.index()] = i;
        self.listed.push(false);
        self.timer_of.push(None);
        self.timer_call.push(0);
        self.touch(i);
        Ok(i)
    }

    /// A switch; hosts join it with [`SimNet::connect_to_switch`].
    pub fn add_switch(&mut self) -> SwitchId {
        self.fabric.add_switch()
    }

    /// A link between host `h` and a port of `switch`.
    pub fn connect_to_switch(
        &mut self,
        h: usize,
        switch: SwitchId,
        cfg: LinkConfig,
    ) -> Result<Link, SimError> {
        let host = self.hosts[h].host;
        self.fabric.connect_to_switch(host, switch, cfg)
    }

    /// A point-to-point link between hosts `a` and `b`.
    pub fn connect(&mut self, a: usize, b: usize, cfg: LinkConfig) -> Result<Link, SimError> {
        let (ha, hb) = (self.hosts[a].host, self.hosts[b].host);
        self.fabric.connect(ha, hb, cfg)
    }

    pub fn now(&self) -> Instant {
        self.fabric.now()
    }

    /// Connects QP `qa` of host `a` with QP `qb` of host `b`, both to RTS.
    pub fn connect_qps(
        &mut self,
        a: usize,
        qa: u32,
        b: usize,
        qb: u32,
        p: &ConnectParams,
    ) -> Result<(), crate::transport::Error> {
        let (mac_a, ip_a) = {
            let c = self.hosts[a].dev.config();
            (c.mac, c.gids[0])
        };
        let (mac_b, ip_b) = {
            let c = self.hosts[b].dev.config();
            (c.mac, c.gids[0])
        };
        connect_qp(
            &mut self.hosts[a].dev,
            qa,
            qb,
            mac_b,
            ip_b,
            p,
            p.psn_a,
            p.psn_b,
        )?;
        connect_qp(
            &mut self.hosts[b].dev,
            qb,
            qa,
            mac_a,
            ip_a,
            p,
            p.psn_b,
            p.psn_a,
        )
    }

    /// Pumps every host once at the current time; returns frames moved.
    pub fn pump_all(&mut self) -> usize {
        let now = self.fabric.now();
        let mut moved = 0;
        for h in self.hosts.iter_mut() {
            // A host with nothing received, nothing waiting, nothing ready
            // and no timer due has nothing to do: most hosts, most events.
            if h.pending.is_empty()
                && self.fabric.inbox_len(h.host) == 0
                && !h.dev.wants_transmit()
                && h.dev.poll_timeout().map_or(true, |t| t > now)
            {
                continue;
            }
            let mut port = self.fabric.port(h.host);
            let st = pump_with(&mut h.dev, &mut port, now, &mut h.pending, &mut h.spare);
            moved += st.rx + st.tx;
        }
        moved
    }

    /// The next instant anything happens: a frame event or a device timer.
    pub fn next_time(&self) -> Option<Instant> {
        let dev = self.hosts.iter().filter_map(|h| h.dev.poll_timeout()).min();
        match (self.fabric.next_event(), dev) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs until `done` holds (checked after every step), nothing is left
    /// to happen, or virtual time passes `limit`. Returns whether `done`
    /// held.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut SimNet) -> bool,
    ) -> bool {
        let end = self.fabric.now() + limit;
        loop {
            while self.pump_all() > 0 {}
            if done(self) {
                return true;
            }
            let Some(t) = self.next_time() else {
                return false;
            };
            if t > end {
                return false;
            }
            self.fabric.advance_to(t.max(self.fabric.now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{Access, MrSpec, Payload, QpCaps, SendOp, SendWr, Sge, Wc, WcStatus};

    /// Three hosts on one switch: A and B each write to C over their own
    /// QP pair through the shared switch port (an incast of two).
    #[test]
    fn three_hosts_on_a_switch_run_two_qp_pairs_into_one() {
        let mut net = SimNet::new(7);
        let ips = ["198.18.0.1", "198.18.0.2", "198.18.0.3"];
        let hosts: Vec<usize> = (0..3)
            .map(|i| {
                let mac = MacAddr([2, 0, 0, 0, 0, i as u8 + 1]);
                net.add_host(DeviceConfig::new(mac, ips[i].parse().unwrap()))
                    .unwrap()
            })
            .collect();
        let sw = net.add_switch();
        let link = LinkConfig {
            rate_bps: 10_000_000_000,
            ..LinkConfig::default()
        };
        for &h in &hosts {
            net.connect_to_switch(h, sw, link).unwrap();
        }
        let mut ends = Vec::new();
        for &h in &hosts {
            let d = &mut net.hosts[h].dev;
            let pd = d.alloc_pd();
            let cq = d.create_cq(256).unwrap();
            let mr = d
                .reg_mr(MrSpec {
                    pd,
                    len: 1 << 20,
                    access: Access::ALL,
                    addr: None,
                    key: None,
                })
                .unwrap();
            let q1 = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
            let q2 = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
            ends.push((cq, mr, q1, q2));
        }
        let p = ConnectParams::default();
        net.connect_qps(0, ends[0].2, 2, ends[2].2, &p).unwrap();
        net.connect_qps(1, ends[1].2, 2, ends[2].3, &p).unwrap();
        for (i, &(_, mr, q, _)) in ends.iter().take(2).enumerate() {
            let d = &mut net.hosts[i].dev;
            d.mr_mut(mr.lkey).unwrap()[..256 << 10].fill(i as u8 + 0x40);
            let op = SendOp::Write {
                remote_addr: ends[2].1.addr + (i as u64) * (256 << 10),
                rkey: ends[2].1.rkey,
            };
            let sge = Sge {
                addr: mr.addr,
                length: 256 << 10,
                lkey: mr.lkey,
            };
            d.post_send(q, SendWr::new(i as u64, op, Payload::Sges(vec![sge])))
                .unwrap();
        }
        let mut wcs: Vec<Wc> = Vec::new();
        let done = net.run_until(Duration::from_secs(1), |n| {
            for (h, e) in n.hosts.iter_mut().zip(&ends).take(2) {
                h.dev.poll_cq(e.0, 8, &mut wcs);
            }
            wcs.len() == 2
        });
        assert!(done, "{wcs:?}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        let c = net.hosts[2].dev.mr(ends[2].1.lkey).unwrap();
        assert!(c[..256 << 10].iter().all(|&x| x == 0x40));
        assert!(c[256 << 10..512 << 10].iter().all(|&x| x == 0x41));
        // Two senders at line rate into one 10 Gb/s port: 512 KiB take
        // at least 0.42 ms of virtual time.
        assert!(net.now() >= Instant::from_nanos(419_000), "{:?}", net.now());
    }
}
