//! The neighbour table of a port: ARP for IPv4 and Neighbor Discovery for
//! IPv6, resolving peers' MACs and answering for our own addresses, sans IO
//! like the transport (frames in with `handle`, frames out with
//! `poll_transmit`, time through `now`). One table, one set of timers and
//! counters for both families; IPv4-mapped IPv6 addresses (IPv4 GIDs,
//! `::ffff:a.b.c.d`) are IPv4.
//!
//! Rules (RFC 826's packet reception, RFC 1122 §2.3.2, RFC 4861 §7, and
//! what Linux does):
//! - an ARP packet whose sender is in the table refreshes that entry; one
//!   that targets one of our addresses also creates it (RFC 826 "merge");
//! - a Neighbor Solicitation for one of our addresses creates or refreshes
//!   the solicitor's entry from its source link-layer option (RFC 4861
//!   §7.2.3); one for another address is ignored;
//! - a Neighbor Advertisement refreshes the entry of its target if there is
//!   one (RFC 4861 §7.2.5: an advertisement creates none); a MAC other than
//!   the cached one replaces it only with the override flag;
//! - an ARP request or a solicitation for one of our addresses is answered:
//!   an ARP reply to the requester's MAC, a solicited advertisement with
//!   our MAC and the override flag to the solicitor (RFC 4861 §7.2.4);
//! - looking up an unknown address sends a broadcast ARP request, or a
//!   solicitation to the address's solicited-node multicast address
//!   (RFC 4861 §7.2.2, from our IPv6 address on its /64 if we have one,
//!   else our first), and retries every `retrans` up to `max_probes` times;
//!   then the address is failed (lookups say so until `failed_for` has
//!   passed). An IPv6 address cannot be solicited without an IPv6 address
//!   of ours: it fails at once;
//! - an entry older than `reachable` is stale: it is still used, and one
//!   unicast request or solicitation re-checks it (RFC 1122 §2.3.2.1,
//!   RFC 4861 §7.3.3); no answer after `max_probes` and it is failed;
//! - static entries ([`NeighConfig::statics`], [`Neighbours::add_static`])
//!   never age, are never resolved and are never replaced;
//! - on a VLAN port every frame sent is tagged, and ARP / Neighbor
//!   Discovery frames of another VLAN are counted (`wrong_vlan`) and
//!   dropped (see [`crate::transport::vlan`]).

use crate::time::{Duration, Instant};
use crate::transport::vlan::{self, Vlan};
use crate::wire::ethernet::{ETHERTYPE_ARP, ETHERTYPE_IPV6};
use crate::wire::{ArpOp, ArpPacket, ArpRepr, EthernetFrame, MacAddr, NdpFrame, NdpRepr};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::{HashMap, VecDeque};

/// Timers of the table, and its static entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighConfig {
    /// How long an answer is trusted (Linux: about 30 s).
    pub reachable: Duration,
    /// Between requests for one address (Linux: 1 s).
    pub retrans: Duration,
    /// Requests before an address is failed (Linux: 3).
    pub max_probes: u32,
    /// How long a failed address stays failed before a lookup tries again.
    pub failed_for: Duration,
    /// Entries known from the start, never aged, resolved or replaced
    /// (`ip neigh add ADDR lladdr MAC nud permanent`): IPv4 or IPv6.
    pub statics: Vec<(IpAddr, MacAddr)>,
    /// Whether requests and solicitations for our addresses are answered
    /// (default). A port split over several datapaths answers from its
    /// first only; the others learn from the copies of the frames it is
    /// sent (`crate::backend::steer`).
    pub answer: bool,
}

impl Default for NeighConfig {
    fn default() -> NeighConfig {
        NeighConfig {
            reachable: Duration::from_secs(30),
            retrans: Duration::from_secs(1),
            max_probes: 3,
            failed_for: Duration::from_secs(3),
            statics: Vec::new(),
            answer: true,
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The neighbour's MAC address.
    Found(MacAddr),
    /// A request is out; ask again later.
    Pending,
    /// Nobody answered.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Static(MacAddr),
    Reachable {
        mac: MacAddr,
        since: Instant,
    },
    /// Stale, being re-checked with unicast requests.
    Probe {
        mac: MacAddr,
        probes: u32,
        next: Instant,
    },
    Incomplete {
        probes: u32,
        next: Instant,
    },
    Failed {
        until: Instant,
    },
}

impl State {
    fn mac(&self) -> Option<MacAddr> {
        match *self {
            State::Static(mac) | State::Reachable { mac, .. } | State::Probe { mac, .. } => {
                Some(mac)
            }
            State::Incomplete { .. } | State::Failed { .. } => None,
        }
    }
}

/// What the table counted (ARP and Neighbor Discovery together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NeighCounters {
    /// ARP requests and Neighbor Solicitations sent.
    pub requests_sent: u64,
    /// ARP replies and Neighbor Advertisements sent.
    pub replies_sent: u64,
    /// ARP requests and Neighbor Solicitations received.
    pub requests_received: u64,
    /// ARP replies and Neighbor Advertisements received.
    pub replies_received: u64,
    /// Addresses that became known after a request (or a failure) for them.
    pub resolved: u64,
    /// Resolutions given up: the probes ran out unanswered, or the address could not be asked.
    pub failed: u64,
    /// ARP frames that were not Ethernet / IPv4 requests or replies;
    /// solicitations and advertisements that fail RFC 4861 §7.1's checks.
    pub malformed: u64,
    /// ARP and Neighbor Discovery frames of another VLAN (or untagged on a
    /// VLAN port), dropped.
    pub wrong_vlan: u64,
}

/// A frame to send.
#[derive(Debug, Clone, Copy)]
enum Out {
    Arp { to: MacAddr, arp: ArpRepr },
    Nd(NdpFrame),
}

/// The neighbour table of one port.
#[derive(Debug)]
pub struct Neighbours {
    mac: MacAddr,
    ips: Vec<IpAddr>,
    vlan: Option<Vlan>,
    cfg: NeighConfig,
    table: HashMap<IpAddr, State>,
    out: VecDeque<Out>,
    counters: NeighCounters,
}

impl Neighbours {
    /// A table for a port with `mac` owning `ips` (IPv4 and IPv6; the first
    /// IPv4 one is the source of our ARP requests), with `cfg`'s static
    /// entries in it. Untagged until [`Neighbours::with_vlan`].
    pub fn new<A: Into<IpAddr>>(
        mac: MacAddr,
        ips: impl IntoIterator<Item = A>,
        cfg: NeighConfig,
    ) -> Neighbours {
        let mut n = Neighbours {
            mac,
            ips: ips.into_iter().map(|a| a.into().to_canonical()).collect(),
            vlan: None,
            table: HashMap::new(),
            out: VecDeque::new(),
            counters: NeighCounters::default(),
            cfg,
        };
        for (ip, mac) in n.cfg.statics.clone() {
            n.add_static(ip, mac);
        }
        n
    }

    /// The same table on 802.1Q VLAN `vlan`.
    pub fn with_vlan(mut self, vlan: Option<Vlan>) -> Neighbours {
        self.vlan = vlan;
        self
    }

    /// What the table counted so far.
    pub fn counters(&self) -> &NeighCounters {
        &self.counters
    }

    /// A static entry (`ip neigh add ... nud permanent`).
    pub fn add_static(&mut self, ip: impl Into<IpAddr>, mac: MacAddr) {
        self.table
            .insert(ip.into().to_canonical(), State::Static(mac));
    }

    fn our_ipv4(&self) -> Ipv4Addr {
        self.ips
            .iter()
            .find_map(|a| match a {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            })
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// Our IPv6 address to solicit `target` from: one on the target's /64,
    /// else the first (RFC 4861 §7.2.2 wants an address of the interface).
    fn our_ipv6(&self, target: &Ipv6Addr) -> Option<Ipv6Addr> {
        let mut first = None;
        for a in &self.ips {
            if let IpAddr::V6(v6) = a {
                if v6.octets()[..8] == target.octets()[..8] {
                    return Some(*v6);
                }
                first = first.or(Some(*v6));
            }
        }
        first
    }

    /// Queues a request for `target`: to `to`, or broadcast / multicast
    /// when `None`. `false` if it cannot be asked (IPv6 without an IPv6
    /// address of ours).
    fn request(&mut self, to: Option<MacAddr>, target: IpAddr) -> bool {
        let out = match target {
            IpAddr::V4(t) => Out::Arp {
                to: to.unwrap_or(MacAddr::BROADCAST),
                arp: ArpRepr::request(self.mac, self.our_ipv4(), t),
            },
            IpAddr::V6(t) => {
                let Some(src) = self.our_ipv6(&t) else {
                    return false;
                };
                Out::Nd(NdpFrame::solicit(
                    self.mac,
                    vlan::tag_of(self.vlan),
                    src,
                    t,
                    to,
                ))
            }
        };
        self.out.push_back(out);
        self.counters.requests_sent += 1;
        true
    }

    fn fail(&mut self, ip: IpAddr, now: Instant) {
        self.counters.failed += 1;
        self.table.insert(
            ip,
            State::Failed {
                until: now + self.cfg.failed_for,
            },
        );
    }

    /// The MAC of `ip`, starting or refreshing its resolution as needed.
    pub fn lookup(&mut self, ip: impl Into<IpAddr>, now: Instant) -> Lookup {
        let ip = ip.into().to_canonical();
        let next = now + self.cfg.retrans;
        match self.table.get(&ip).copied() {
            Some(State::Static(mac)) => Lookup::Found(mac),
            Some(State::Reachable { mac, since }) => {
                if now.saturating_since(since) >= self.cfg.reachable {
                    self.table.insert(
                        ip,
                        State::Probe {
                            mac,
                            probes: 1,
                            next,
                        },
                    );
                    self.request(Some(mac), ip);
                }
                Lookup::Found(mac)
            }
            Some(State::Probe { mac, .. }) => Lookup::Found(mac),
            Some(State::Incomplete { .. }) => Lookup::Pending,
            Some(State::Failed { until }) if now < until => Lookup::Failed,
            Some(State::Failed { .. }) | None => {
                if self.request(None, ip) {
                    self.table.insert(ip, State::Incomplete { probes: 1, next });
                    Lookup::Pending
                } else {
                    self.fail(ip, now);
                    Lookup::Failed
                }
            }
        }
    }

    /// Handles a received frame; returns whether it was ARP or a Neighbor
    /// Solicitation / Advertisement (consumed: anything else is the
    /// transport's).
    pub fn handle(&mut self, now: Instant, frame: &[u8]) -> bool {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return false;
        };
        match eth.ethertype() {
            ETHERTYPE_ARP => {
                if vlan::accepts(self.vlan, eth.vlan()) {
                    self.handle_arp(now, eth.payload());
                } else {
                    self.counters.wrong_vlan += 1;
                }
                true
            }
            ETHERTYPE_IPV6 => match NdpFrame::parse(frame) {
                Ok(None) => false,
                _ if !vlan::accepts(self.vlan, eth.vlan()) => {
                    self.counters.wrong_vlan += 1;
                    true
                }
                Ok(Some(nd)) => {
                    self.handle_nd(now, &nd);
                    true
                }
                Err(_) => {
                    self.counters.malformed += 1;
                    true
                }
            },
            _ => false,
        }
    }

    /// `ip` is at `mac` as of `now`: a static entry stays as it is; an
    /// entry being resolved or re-checked counts as resolved.
    fn refresh(&mut self, ip: IpAddr, mac: MacAddr, now: Instant) {
        match self.table.get(&ip) {
            Some(State::Static(_)) => {}
            old => {
                if matches!(
                    old,
                    Some(State::Incomplete { .. } | State::Probe { .. } | State::Failed { .. })
                ) {
                    self.counters.resolved += 1;
                }
                self.table.insert(ip, State::Reachable { mac, since: now });
            }
        }
    }

    fn handle_arp(&mut self, now: Instant, payload: &[u8]) {
        let Some(arp) = ArpPacket::new_checked(payload)
            .ok()
            .and_then(|p| ArpRepr::parse(&p).ok())
        else {
            self.counters.malformed += 1;
            return;
        };
        match arp.op {
            ArpOp::Request => self.counters.requests_received += 1,
            ArpOp::Reply => self.counters.replies_received += 1,
        }
        let spa = IpAddr::V4(arp.spa);
        let for_us = self.ips.contains(&IpAddr::V4(arp.tpa));
        let known = self.table.contains_key(&spa);
        if (known || for_us) && arp.spa != Ipv4Addr::UNSPECIFIED {
            self.refresh(spa, arp.sha, now);
        }
        let answer = for_us && self.cfg.answer;
        if let Some(reply) = arp.reply(self.mac, arp.tpa).filter(|_| answer) {
            self.out.push_back(Out::Arp {
                to: reply.tha,
                arp: reply,
            });
            self.counters.replies_sent += 1;
        }
    }

    fn handle_nd(&mut self, now: Instant, nd: &NdpFrame) {
        match nd.ndp {
            NdpRepr::NeighborSolicit { target, lladdr } => {
                self.counters.requests_received += 1;
                if !self.ips.contains(&IpAddr::V6(target)) {
                    return;
                }
                if let (false, Some(mac)) = (nd.src.is_unspecified(), lladdr) {
                    self.refresh(IpAddr::V6(nd.src), mac, now);
                }
                let reply = nd.reply(self.mac, vlan::tag_of(self.vlan));
                if let Some(reply) = reply.filter(|_| self.cfg.answer) {
                    self.out.push_back(Out::Nd(reply));
                    self.counters.replies_sent += 1;
                }
            }
            NdpRepr::NeighborAdvert {
                flags,
                target,
                lladdr,
            } => {
                self.counters.replies_received += 1;
                let ip = IpAddr::V6(target);
                let Some(old) = self.table.get(&ip).copied() else {
                    return;
                };
                let Some(mac) = lladdr.or(old.mac()) else {
                    return;
                };
                if old.mac().is_some_and(|m| m != mac) && !flags.override_ {
                    return;
                }
                self.refresh(ip, mac, now);
            }
        }
    }

    /// Writes the next frame to send into `buf` (128 bytes hold any: ARP
    /// frames are 60 bytes, Neighbor Discovery ones at most 90).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        let n = match self.out.front()? {
            Out::Arp { to, arp } => arp
                .emit_frame_tagged(*to, vlan::tag_of(self.vlan), buf)
                .ok()?,
            Out::Nd(f) => f.emit(buf).ok()?,
        };
        self.out.pop_front();
        Some(n)
    }

    /// When [`Neighbours::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.table
            .values()
            .filter_map(|s| match s {
                State::Incomplete { next, .. } | State::Probe { next, .. } => Some(*next),
                _ => None,
            })
            .min()
    }

    /// Retries or fails the resolutions due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<(IpAddr, State)> = self
            .table
            .iter()
            .filter(|(_, s)| {
                matches!(s, State::Incomplete { next, .. } | State::Probe { next, .. } if *next <= now)
            })
            .map(|(ip, s)| (*ip, *s))
            .collect();
        for (ip, s) in due {
            let (probes, to) = match s {
                State::Incomplete { probes, .. } => (probes, None),
                State::Probe { probes, mac, .. } => (probes, Some(mac)),
                _ => continue,
            };
            if probes >= self.cfg.max_probes {
                self.fail(ip, now);
                continue;
            }
            let next = now + self.cfg.retrans;
            let st = match s {
                State::Probe { mac, .. } => State::Probe {
                    mac,
                    probes: probes + 1,
                    next,
                },
                _ => State::Incomplete {
                    probes: probes + 1,
                    next,
                },
            };
            self.table.insert(ip, st);
            self.request(to, ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MA: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const MB: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
    const IA: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const IB: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    const IA6: Ipv6Addr = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 1);
    const IB6: Ipv6Addr = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 2);

    fn pair() -> (Neighbours, Neighbours) {
        let c = NeighConfig::default();
        (
            Neighbours::new(MA, vec![IA], c.clone()),
            Neighbours::new(MB, vec![IB], c),
        )
    }

    /// Two hosts with an IPv4 and an IPv6 address each, on `vlan`.
    fn dual(vlan: Option<Vlan>) -> (Neighbours, Neighbours) {
        let c = NeighConfig::default();
        let a: Vec<IpAddr> = vec![IA.into(), IA6.into()];
        let b: Vec<IpAddr> = vec![IB.into(), IB6.into()];
        (
            Neighbours::new(MA, a, c.clone()).with_vlan(vlan),
            Neighbours::new(MB, b, c).with_vlan(vlan),
        )
    }

    /// The next frame `x` would send.
    fn next_frame(x: &mut Neighbours) -> Option<Vec<u8>> {
        let mut buf = [0u8; 128];
        x.poll_transmit(&mut buf).map(|n| buf[..n].to_vec())
    }

    /// Moves every queued frame from `x` to `y`; returns how many.
    fn carry(x: &mut Neighbours, y: &mut Neighbours, now: Instant) -> usize {
        let mut buf = [0u8; 128];
        let mut n = 0;
        while let Some(len) = x.poll_transmit(&mut buf) {
            assert!(y.handle(now, &buf[..len]));
            n += 1;
        }
        n
    }

    #[test]
    fn resolves_a_peer_and_answers_for_itself() {
        let (mut a, mut b) = pair();
        let t = Instant::from_nanos(1);
        assert_eq!(a.lookup(IB, t), Lookup::Pending);
        assert_eq!(a.lookup(IB, t), Lookup::Pending);
        assert_eq!(carry(&mut a, &mut b, t), 1);
        // b learnt a from the request (it was the target) and answered.
        assert_eq!(b.lookup(IA, t), Lookup::Found(MA));
        assert_eq!(carry(&mut b, &mut a, t), 1);
        assert_eq!(a.lookup(IB, t), Lookup::Found(MB));
        assert_eq!(a.counters().resolved, 1);
        assert_eq!(b.counters().replies_sent, 1);
        assert_eq!(a.poll_timeout(), None);
    }

    #[test]
    fn retries_then_fails_then_tries_again() {
        let (mut a, _) = pair();
        let mut t = Instant::from_nanos(1);
        assert_eq!(a.lookup(IB, t), Lookup::Pending);
        let mut buf = [0u8; 64];
        let mut sent = 0;
        while let Some(due) = a.poll_timeout() {
            while a.poll_transmit(&mut buf).is_some() {
                sent += 1;
            }
            t = due;
            a.handle_timeout(t);
        }
        assert_eq!(sent, 3);
        assert_eq!(a.counters().failed, 1);
        assert_eq!(a.lookup(IB, t), Lookup::Failed);
        let later = t + Duration::from_secs(4);
        assert_eq!(a.lookup(IB, later), Lookup::Pending);
    }

    #[test]
    fn stale_entries_are_rechecked_by_unicast_and_static_ones_never() {
        let (mut a, mut b) = pair();
        let t0 = Instant::from_nanos(1);
        a.lookup(IB, t0);
        carry(&mut a, &mut b, t0);
        carry(&mut b, &mut a, t0);
        let t1 = t0 + Duration::from_secs(31);
        assert_eq!(a.lookup(IB, t1), Lookup::Found(MB));
        let mut buf = [0u8; 64];
        let n = a.poll_transmit(&mut buf).unwrap();
        let eth = EthernetFrame::new_checked(&buf[..n]).unwrap();
        assert_eq!(eth.dst(), MB, "a unicast re-check");
        b.handle(t1, &buf[..n]);
        carry(&mut b, &mut a, t1);
        assert_eq!(a.poll_timeout(), None);
        a.add_static(IB, MacAddr([2, 0, 0, 0, 0, 9]));
        let far = t1 + Duration::from_secs(1000);
        assert_eq!(
            a.lookup(IB, far),
            Lookup::Found(MacAddr([2, 0, 0, 0, 0, 9]))
        );
        // A reply from the real owner does not replace a static entry.
        b.handle(far, &{
            let mut f = [0u8; 64];
            let r = ArpRepr::request(MA, IA, IB);
            let n = r.emit_frame(&mut f).unwrap();
            f[..n].to_vec()
        });
        carry(&mut b, &mut a, far);
        assert_eq!(
            a.lookup(IB, far),
            Lookup::Found(MacAddr([2, 0, 0, 0, 0, 9]))
        );
    }

    /// A port's second datapath (`answer: false`) learns the asker from a
    /// request for its address, and a peer from a reply, but answers
    /// nothing: the port's first datapath answers, once.
    #[test]
    fn a_datapath_that_does_not_answer_still_learns() {
        let mut b2 = Neighbours::new(MB, vec![IB], quiet());
        let (mut a, mut b) = pair();
        let now = Instant::ZERO;
        assert_eq!(a.lookup(IB, now), Lookup::Pending);
        let req = next_frame(&mut a).unwrap();
        assert!(b2.handle(now, &req));
        assert_eq!(next_frame(&mut b2), None, "not answered");
        assert_eq!(b2.lookup(IA, now), Lookup::Found(MA), "the asker is learnt");
        assert!(b.handle(now, &req));
        let reply = next_frame(&mut b).unwrap();
        assert!(a.handle(now, &reply));
        assert_eq!(a.lookup(IB, now), Lookup::Found(MB));
        // Its own request: resolved by the reply (which the port's first
        // datapath receives and copies to it).
        let mut c2 = Neighbours::new(MA, vec![IA], quiet());
        assert_eq!(c2.lookup(IB, now), Lookup::Pending);
        let req = next_frame(&mut c2).unwrap();
        assert!(b.handle(now, &req));
        assert!(c2.handle(now, &next_frame(&mut b).unwrap()));
        assert_eq!(c2.lookup(IB, now), Lookup::Found(MB));
    }

    fn quiet() -> NeighConfig {
        NeighConfig {
            answer: false,
            ..NeighConfig::default()
        }
    }

    #[test]
    fn requests_for_others_are_not_answered_nor_learnt() {
        let (mut a, mut b) = pair();
        let mut f = [0u8; 64];
        let n = ArpRepr::request(MA, IA, Ipv4Addr::new(198, 18, 0, 77))
            .emit_frame(&mut f)
            .unwrap();
        assert!(b.handle(Instant::ZERO, &f[..n]));
        assert_eq!(b.poll_transmit(&mut f), None);
        assert_eq!(b.counters().requests_received, 1);
        assert_eq!(b.lookup(IA, Instant::ZERO), Lookup::Pending);
        // Not ARP: not consumed; a broken ARP packet: counted.
        assert!(!a.handle(Instant::ZERO, &[0u8; 60]));
        let mut bad = f;
        bad[14 + 7] = 9;
        assert!(a.handle(Instant::ZERO, &bad[..60]));
        assert_eq!(a.counters().malformed, 1);
    }

    #[test]
    fn resolves_an_ipv6_peer_by_solicitation_and_answers_for_itself() {
        let (mut a, mut b) = dual(None);
        let t = Instant::from_nanos(1);
        assert_eq!(a.lookup(IB6, t), Lookup::Pending);
        assert_eq!(a.lookup(IpAddr::V6(IB6), t), Lookup::Pending);
        // The solicitation: to the target's solicited-node address and its
        // multicast MAC, from our address, with our MAC.
        let ns = next_frame(&mut a).unwrap();
        let f = NdpFrame::parse(&ns).unwrap().unwrap();
        assert_eq!(f.eth.dst, MacAddr([0x33, 0x33, 0xff, 0, 0, 2]));
        assert_eq!(f.dst, "ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(f.src, IA6);
        assert_eq!(
            f.ndp,
            NdpRepr::NeighborSolicit {
                target: IB6,
                lladdr: Some(MA)
            }
        );
        assert!(next_frame(&mut a).is_none(), "one solicitation");
        assert!(b.handle(t, &ns));
        // b learnt a from the solicitation and advertised itself.
        assert_eq!(b.lookup(IA6, t), Lookup::Found(MA));
        let na = next_frame(&mut b).unwrap();
        let f = NdpFrame::parse(&na).unwrap().unwrap();
        assert_eq!((f.eth.dst, f.src, f.dst), (MA, IB6, IA6));
        assert!(matches!(
            f.ndp,
            NdpRepr::NeighborAdvert { flags, target: IB6, lladdr: Some(MB) }
                if flags.solicited && flags.override_ && !flags.router
        ));
        assert!(a.handle(t, &na));
        assert_eq!(a.lookup(IB6, t), Lookup::Found(MB));
        assert_eq!(a.counters().resolved, 1);
        assert_eq!(a.counters().requests_sent, 1);
        assert_eq!(b.counters().requests_received, 1);
        assert_eq!(b.counters().replies_sent, 1);
        assert_eq!(a.counters().replies_received, 1);
        assert_eq!(a.poll_timeout(), None);
        // IPv4 on the same table still goes by ARP.
        assert_eq!(a.lookup(IB, t), Lookup::Pending);
        assert_eq!(carry(&mut a, &mut b, t), 1);
        assert_eq!(carry(&mut b, &mut a, t), 1);
        assert_eq!(a.lookup(IB, t), Lookup::Found(MB));
        // An IPv4-mapped address is the IPv4 one.
        assert_eq!(a.lookup(IB.to_ipv6_mapped(), t), Lookup::Found(MB));
    }

    #[test]
    fn ipv6_retries_then_fails_and_stale_entries_are_rechecked_by_unicast() {
        let (mut a, mut b) = dual(None);
        let mut t = Instant::from_nanos(1);
        let lost = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 0x77);
        assert_eq!(a.lookup(lost, t), Lookup::Pending);
        let mut sent = 0;
        while let Some(due) = a.poll_timeout() {
            while next_frame(&mut a).is_some() {
                sent += 1;
            }
            t = due;
            a.handle_timeout(t);
        }
        assert_eq!(sent, 3);
        assert_eq!(a.counters().failed, 1);
        assert_eq!(a.lookup(lost, t), Lookup::Failed);

        a.lookup(IB6, t);
        carry(&mut a, &mut b, t);
        carry(&mut b, &mut a, t);
        let later = t + Duration::from_secs(31);
        assert_eq!(a.lookup(IB6, later), Lookup::Found(MB));
        let probe = next_frame(&mut a).unwrap();
        let f = NdpFrame::parse(&probe).unwrap().unwrap();
        assert_eq!((f.eth.dst, f.dst), (MB, IB6), "a unicast re-check");
        b.handle(later, &probe);
        carry(&mut b, &mut a, later);
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(a.counters().resolved, 2);
    }

    #[test]
    fn advertisements_refresh_but_never_create_and_override_rules() {
        let (mut a, _) = dual(None);
        let t = Instant::from_nanos(1);
        let advert = |mac: MacAddr, override_: bool, solicited: bool| {
            let mut buf = [0u8; 128];
            let f = NdpFrame {
                eth: crate::wire::EthernetRepr {
                    dst: MA,
                    src: mac,
                    vlan: None,
                    ethertype: ETHERTYPE_IPV6,
                },
                src: IB6,
                dst: IA6,
                ndp: NdpRepr::NeighborAdvert {
                    flags: crate::wire::NaFlags {
                        router: false,
                        solicited,
                        override_,
                    },
                    target: IB6,
                    lladdr: Some(mac),
                },
            };
            let n = f.emit(&mut buf).unwrap();
            buf[..n].to_vec()
        };
        // Unsolicited, for an address we never asked for: no entry.
        assert!(a.handle(t, &advert(MB, true, false)));
        assert_eq!(a.counters().replies_received, 1);
        assert!(!a.table.contains_key(&IpAddr::V6(IB6)));
        // Asked for: the answer resolves it.
        a.lookup(IB6, t);
        a.handle(t, &advert(MB, true, true));
        assert_eq!(a.lookup(IB6, t), Lookup::Found(MB));
        // Another MAC without the override flag does not replace it...
        let other = MacAddr([2, 0, 0, 0, 0, 0x22]);
        a.handle(t, &advert(other, false, false));
        assert_eq!(a.lookup(IB6, t), Lookup::Found(MB));
        // ... with it, it does.
        a.handle(t, &advert(other, true, false));
        assert_eq!(a.lookup(IB6, t), Lookup::Found(other));
    }

    #[test]
    fn static_entries_of_the_config_are_never_resolved() {
        let s6 = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 0x99);
        let m6 = MacAddr([2, 0, 0, 0, 0, 0x99]);
        let m4 = MacAddr([2, 0, 0, 0, 0, 0x44]);
        let cfg = NeighConfig {
            statics: vec![(s6.into(), m6), (IB.to_ipv6_mapped().into(), m4)],
            ..NeighConfig::default()
        };
        let mut a = Neighbours::new(MA, vec![IpAddr::V4(IA), IpAddr::V6(IA6)], cfg);
        let far = Instant::from_nanos(1) + Duration::from_secs(100_000);
        assert_eq!(a.lookup(s6, far), Lookup::Found(m6));
        assert_eq!(a.lookup(IB, far), Lookup::Found(m4));
        assert!(next_frame(&mut a).is_none());
        assert_eq!(a.poll_timeout(), None);
        // The real owner's answers replace neither.
        let mut buf = [0u8; 128];
        let n = ArpRepr::request(MB, IB, IA).emit_frame(&mut buf).unwrap();
        a.handle(far, &buf[..n]);
        assert_eq!(a.lookup(IB, far), Lookup::Found(m4));
        let ns = NdpFrame::solicit(MB, None, IB6, IA6, None);
        let n = ns.emit(&mut buf).unwrap();
        a.handle(far, &buf[..n]);
        assert_eq!(a.lookup(s6, far), Lookup::Found(m6));
        assert_eq!(a.counters().resolved, 0);
        assert_eq!(a.counters().requests_sent, 0);
    }

    #[test]
    fn ipv6_needs_an_ipv6_address_of_ours() {
        let (mut a, _) = pair();
        let t = Instant::from_nanos(1);
        assert_eq!(a.lookup(IB6, t), Lookup::Failed);
        assert!(next_frame(&mut a).is_none());
        assert_eq!(a.counters().failed, 1);
        // Solicitations for others' addresses are neither answered nor
        // learnt from.
        let (mut a, mut b) = dual(None);
        let other = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 0x55);
        let mut buf = [0u8; 128];
        let n = NdpFrame::solicit(MA, None, IA6, other, None)
            .emit(&mut buf)
            .unwrap();
        assert!(b.handle(t, &buf[..n]));
        assert!(next_frame(&mut b).is_none());
        assert_eq!(b.lookup(IA6, t), Lookup::Pending);
        // A broken solicitation is consumed and counted; other IPv6 frames
        // (RoCE, echo requests) are not ours.
        let mut bad = buf[..n].to_vec();
        bad[n - 1] ^= 1;
        assert!(a.handle(t, &bad));
        assert_eq!(a.counters().malformed, 1);
        let mut echo = buf[..n].to_vec();
        echo[54] = 128;
        assert!(!a.handle(t, &echo));
    }

    #[test]
    fn on_a_vlan_everything_is_tagged_and_other_vlans_are_dropped() {
        let vlan = Vlan::new(100, 3);
        let (mut a, mut b) = dual(Some(vlan));
        let t = Instant::from_nanos(1);
        a.lookup(IB, t);
        a.lookup(IB6, t);
        let frames: Vec<Vec<u8>> = std::iter::from_fn(|| next_frame(&mut a)).collect();
        assert_eq!(frames.len(), 2);
        for f in &frames {
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(eth.vlan(), Some(vlan.tag()));
            assert!(b.handle(t, f));
        }
        let answers: Vec<Vec<u8>> = std::iter::from_fn(|| next_frame(&mut b)).collect();
        assert_eq!(answers.len(), 2);
        for f in &answers {
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(eth.vlan().map(|t| t.vid), Some(100));
            assert!(a.handle(t, f));
        }
        assert_eq!(a.lookup(IB, t), Lookup::Found(MB));
        assert_eq!(a.lookup(IB6, t), Lookup::Found(MB));
        // A host on another VLAN, and an untagged one, are not heard.
        for other in [Some(Vlan::new(200, 3)), None] {
            let (mut c, _) = dual(other);
            c.lookup(IB, t);
            c.lookup(IB6, t);
            let before = *b.counters();
            while let Some(f) = next_frame(&mut c) {
                assert!(b.handle(t, &f), "consumed");
            }
            assert_eq!(b.counters().wrong_vlan, before.wrong_vlan + 2);
            assert_eq!(b.counters().requests_received, before.requests_received);
            assert!(next_frame(&mut b).is_none(), "not answered");
        }
    }
}
