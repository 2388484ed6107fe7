//! [`SimNet`]: transport devices on the simulator's fabric, in virtual
//! time, each moved by the host layer's [`pump_with`].

use crate::backend::fabric::{Fabric, HostId, Link, LinkConfig, SimError, SwitchId};
use crate::backend::Burst;
use crate::cc::earlier;
use crate::host::pump::pump_with;
use crate::time::{DeadlineHeap, Duration, Instant};
use crate::transport::connect::{connect_qp, ConnectParams};
use crate::transport::{Device, DeviceConfig};

/// A host of a [`SimNet`]: its device and where it sits on the fabric.
pub struct SimHost {
    /// The host's RoCE v2 endpoint (the RC transport).
    pub dev: Device,
    /// The host on [`SimNet::fabric`] the device sends and receives through.
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
    /// The simulated network the hosts sit on (and its virtual clock).
    pub fabric: Fabric,
    /// The hosts in the order [`SimNet::add_host`] added them (the index it
    /// returns).
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

impl SimNet {
    /// No hosts yet, on an empty [`Fabric`] seeded with `seed`.
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
        let dev = self.next_timer_active();
        earlier(self.fabric.next_event(), dev)
    }

    /// The earliest device timer, for a driver of [`SimNet::pump_active`].
    pub fn next_timer_active(&mut self) -> Option<Instant> {
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
        self.timers.next()
    }

    /// Adds a host with a device of this MAC and IP; returns its index. A
    /// device that leaves the ICRC to its NIC ([`crate::transport::Offload`])
    /// turns on the fabric's ICRC offload ([`Fabric::set_icrc_offload`]).
    pub fn add_host(&mut self, cfg: DeviceConfig) -> Result<usize, crate::transport::Error> {
        if cfg.offload.icrc {
            self.fabric.set_icrc_offload(true);
        }
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

    /// The fabric's virtual time.
    pub fn now(&self) -> Instant {
        self.fabric.now()
    }

    /// Connects QP `qa` of host `a` with QP `qb` of host `b`, both to RTS,
    /// with the first PSN each side sends: `psns.0` from `a` (`b`'s RQ
    /// PSN), `psns.1` from `b`.
    pub fn connect_qps(
        &mut self,
        a: usize,
        qa: u32,
        b: usize,
        qb: u32,
        p: &ConnectParams,
        psns: (u32, u32),
    ) -> Result<(), crate::transport::Error> {
        let (psn_a, psn_b) = psns;
        let (mac_a, ip_a) = {
            let c = self.hosts[a].dev.config();
            (c.mac, c.gids[0])
        };
        let (mac_b, ip_b) = {
            let c = self.hosts[b].dev.config();
            (c.mac, c.gids[0])
        };
        connect_qp(&mut self.hosts[a].dev, qa, qb, mac_b, ip_b, p, psn_a, psn_b)?;
        connect_qp(&mut self.hosts[b].dev, qb, qa, mac_a, ip_a, p, psn_b, psn_a)
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

    /// Pumps every host until no frame moves; false if frames still moved
    /// after `max_rounds` rounds (they never stop).
    pub fn pump_until_quiet(&mut self, max_rounds: u64) -> bool {
        let mut rounds = 0u64;
        while self.pump_all() > 0 {
            rounds += 1;
            if rounds > max_rounds {
                return false;
            }
        }
        true
    }

    /// A driver's step to its next instant `t`: advances virtual time to
    /// `t` (to now if `t` is not later). `same_instant` counts the steps in
    /// a row whose `t` was not after now; once there are more than `limit`
    /// of them, returns false without advancing (a timer that stays due
    /// while nothing moves would hold time still: stop rather than spin).
    pub fn advance_towards(&mut self, t: Instant, same_instant: &mut u64, limit: u64) -> bool {
        let now = self.fabric.now();
        if t <= now {
            *same_instant += 1;
            if *same_instant > limit {
                return false;
            }
        } else {
            *same_instant = 0;
        }
        self.fabric.advance_to(t.max(now));
        true
    }

    /// [`SimNet::advance_towards`] `t`, then on through the fabric's next
    /// instants up to `quiet_until` (included) for as long as they wake no
    /// host and find no deadlock. A driver that would do nothing between
    /// those instants (no host to pump, none of its own deadlines before
    /// `quiet_until`) reaches the same state with fewer steps.
    pub fn advance_quietly(
        &mut self,
        t: Instant,
        quiet_until: Instant,
        same_instant: &mut u64,
        limit: u64,
    ) -> bool {
        if !self.advance_towards(t, same_instant, limit) {
            return false;
        }
        self.fabric.advance_while_quiet(quiet_until);
        true
    }

    /// The next instant anything happens: a frame event or a device timer.
    pub fn next_time(&self) -> Option<Instant> {
        let dev = self.hosts.iter().filter_map(|h| h.dev.poll_timeout()).min();
        earlier(self.fabric.next_event(), dev)
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
            self.pump_until_quiet(u64::MAX);
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
    use crate::wire::MacAddr;

    /// Devices that leave the ICRC to their NICs over a link that flips a
    /// bit in a fifth of the frames: the NIC puts the real ICRC on the
    /// wire before the damage (the fabric's ICRC offload), so the receiver
    /// drops every damaged frame as an ICRC error, takes the others
    /// unchecked, and the WRITE lands intact after retries.
    #[test]
    fn offloaded_icrc_still_catches_corrupted_frames() {
        let mut net = SimNet::new(3);
        let mut hosts = Vec::new();
        for i in 0..2u8 {
            let mac = MacAddr([2, 0, 0, 0, 0, i + 1]);
            let mut cfg = DeviceConfig::new(mac, format!("198.18.0.{}", i + 1).parse().unwrap());
            cfg.offload.icrc = true;
            hosts.push(net.add_host(cfg).unwrap());
        }
        let link = LinkConfig {
            rate_bps: 10_000_000_000,
            corrupt: 0.2,
            ..LinkConfig::default()
        };
        net.connect(hosts[0], hosts[1], link).unwrap();
        let mut ends = Vec::new();
        for &h in &hosts {
            let d = &mut net.hosts[h].dev;
            let pd = d.alloc_pd();
            let cq = d.create_cq(16).unwrap();
            let mr = d.reg_mr(MrSpec::new(pd, 64 << 10, Access::ALL)).unwrap();
            let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
            ends.push((cq, mr, qp));
        }
        let p = ConnectParams {
            timeout: 8,
            ..ConnectParams::default()
        };
        net.connect_qps(0, ends[0].2, 1, ends[1].2, &p, (0, 0))
            .unwrap();
        let d = &mut net.hosts[0].dev;
        d.mr_mut(ends[0].1.lkey).unwrap().fill(0x5a);
        let op = SendOp::Write {
            remote_addr: ends[1].1.addr,
            rkey: ends[1].1.rkey,
        };
        let sge = Sge {
            addr: ends[0].1.addr,
            length: 64 << 10,
            lkey: ends[0].1.lkey,
        };
        d.post_send(ends[0].2, SendWr::new(1, op, Payload::sge(sge)))
            .unwrap();
        let mut wcs: Vec<Wc> = Vec::new();
        let cq = ends[0].0;
        let done = net.run_until(Duration::from_secs(1), |n| {
            n.hosts[0].dev.poll_cq(cq, 8, &mut wcs);
            !wcs.is_empty()
        });
        assert!(done && wcs[0].status == WcStatus::Success, "{wcs:?}");
        let rx = *net.hosts[1].dev.rx_counters();
        assert!(rx.icrc_errors > 0, "{rx:?}");
        assert!(rx.icrc_unchecked > 0, "{rx:?}");
        assert!(rx.icrc_errors + rx.icrc_unchecked <= rx.frames, "{rx:?}");
        let c = net.hosts[1].dev.mr(ends[1].1.lkey).unwrap();
        assert!(c.iter().all(|&x| x == 0x5a));
    }

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
            let mr = d.reg_mr(MrSpec::new(pd, 1 << 20, Access::ALL)).unwrap();
            let q1 = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
            let q2 = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
            ends.push((cq, mr, q1, q2));
        }
        let p = ConnectParams::default();
        net.connect_qps(0, ends[0].2, 2, ends[2].2, &p, (0, 0))
            .unwrap();
        net.connect_qps(1, ends[1].2, 2, ends[2].3, &p, (0, 0))
            .unwrap();
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
            d.post_send(q, SendWr::new(i as u64, op, Payload::sge(sge)))
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
