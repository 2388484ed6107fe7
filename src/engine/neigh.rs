//! The IPv4 neighbour table: ARP resolution of peers' MACs and answers for
//! our own addresses, sans IO like the transport (frames in with `handle`,
//! frames out with `poll_transmit`, time through `now`).
//!
//! Rules (RFC 826's packet reception, RFC 1122 §2.3.2, and what Linux
//! does):
//! - an ARP packet whose sender is in the table refreshes that entry; one
//!   that targets one of our addresses also creates it (RFC 826 "merge");
//! - a request for one of our addresses is answered with a reply to the
//!   requester's MAC;
//! - looking up an unknown address sends a broadcast request and retries
//!   every `retrans` up to `max_probes` times, then the address is failed
//!   (lookups say so until `failed_for` has passed);
//! - an entry older than `reachable` is stale: it is still used, and one
//!   unicast request re-checks it (RFC 1122 §2.3.2.1); no answer after
//!   `max_probes` and it is failed;
//! - static entries never age and are never replaced.

use crate::time::{Duration, Instant};
use crate::wire::ethernet::ETHERTYPE_ARP;
use crate::wire::{ArpOp, ArpPacket, ArpRepr, EthernetFrame, MacAddr};
use core::net::Ipv4Addr;
use std::collections::{HashMap, VecDeque};

/// Timers of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighConfig {
    /// How long an answer is trusted (Linux: about 30 s).
    pub reachable: Duration,
    /// Between requests for one address (Linux: 1 s).
    pub retrans: Duration,
    /// Requests before an address is failed (Linux: 3).
    pub max_probes: u32,
    /// How long a failed address stays failed before a lookup tries again.
    pub failed_for: Duration,
}

impl Default for NeighConfig {
    fn default() -> NeighConfig {
        NeighConfig {
            reachable: Duration::from_secs(30),
            retrans: Duration::from_secs(1),
            max_probes: 3,
            failed_for: Duration::from_secs(3),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
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

/// What the table counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NeighCounters {
    pub requests_sent: u64,
    pub replies_sent: u64,
    pub requests_received: u64,
    pub replies_received: u64,
    pub resolved: u64,
    pub failed: u64,
    /// ARP frames that were not Ethernet / IPv4 requests or replies.
    pub malformed: u64,
}

/// The neighbour table of one port.
#[derive(Debug)]
pub struct Neighbours {
    mac: MacAddr,
    ips: Vec<Ipv4Addr>,
    cfg: NeighConfig,
    table: HashMap<Ipv4Addr, State>,
    /// Frames to send: destination MAC and packet.
    out: VecDeque<(MacAddr, ArpRepr)>,
    counters: NeighCounters,
}

impl Neighbours {
    /// A table for a port with `mac` owning `ips` (the first is the source
    /// of our requests).
    pub fn new(mac: MacAddr, ips: Vec<Ipv4Addr>, cfg: NeighConfig) -> Neighbours {
        Neighbours {
            mac,
            ips,
            cfg,
            table: HashMap::new(),
            out: VecDeque::new(),
            counters: NeighCounters::default(),
        }
    }

    pub fn counters(&self) -> &NeighCounters {
        &self.counters
    }

    /// A static entry (`ip neigh add ... nud permanent`).
    pub fn add_static(&mut self, ip: Ipv4Addr, mac: MacAddr) {
        self.table.insert(ip, State::Static(mac));
    }

    fn our_ip(&self) -> Ipv4Addr {
        self.ips.first().copied().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    fn request(&mut self, to: MacAddr, target: Ipv4Addr) {
        let r = ArpRepr::request(self.mac, self.our_ip(), target);
        self.out.push_back((to, r));
        self.counters.requests_sent += 1;
    }

    /// The MAC of `ip`, starting or refreshing its resolution as needed.
    pub fn lookup(&mut self, ip: Ipv4Addr, now: Instant) -> Lookup {
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
                    self.request(mac, ip);
                }
                Lookup::Found(mac)
            }
            Some(State::Probe { mac, .. }) => Lookup::Found(mac),
            Some(State::Incomplete { .. }) => Lookup::Pending,
            Some(State::Failed { until }) if now < until => Lookup::Failed,
            Some(State::Failed { .. }) | None => {
                self.table.insert(ip, State::Incomplete { probes: 1, next });
                self.request(MacAddr::BROADCAST, ip);
                Lookup::Pending
            }
        }
    }

    /// Handles a received frame; returns whether it was ARP (consumed).
    pub fn handle(&mut self, now: Instant, frame: &[u8]) -> bool {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return false;
        };
        if eth.ethertype() != ETHERTYPE_ARP {
            return false;
        }
        let Some(arp) = ArpPacket::new_checked(eth.payload())
            .ok()
            .and_then(|p| ArpRepr::parse(&p).ok())
        else {
            self.counters.malformed += 1;
            return true;
        };
        match arp.op {
            ArpOp::Request => self.counters.requests_received += 1,
            ArpOp::Reply => self.counters.replies_received += 1,
        }
        let for_us = self.ips.contains(&arp.tpa);
        let known = self.table.contains_key(&arp.spa);
        if (known || for_us) && arp.spa != Ipv4Addr::UNSPECIFIED {
            match self.table.get(&arp.spa) {
                Some(State::Static(_)) => {}
                old => {
                    if matches!(
                        old,
                        Some(State::Incomplete { .. } | State::Probe { .. } | State::Failed { .. })
                    ) {
                        self.counters.resolved += 1;
                    }
                    let fresh = State::Reachable {
                        mac: arp.sha,
                        since: now,
                    };
                    self.table.insert(arp.spa, fresh);
                }
            }
        }
        if let Some(reply) = arp.reply(self.mac, arp.tpa).filter(|_| for_us) {
            self.out.push_back((reply.tha, reply));
            self.counters.replies_sent += 1;
        }
        true
    }

    /// Writes the next ARP frame to send into `buf` (60 bytes).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        let (dst, r) = *self.out.front()?;
        let n = r.emit_frame_to(dst, buf).ok()?;
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
        let due: Vec<(Ipv4Addr, State)> = self
            .table
            .iter()
            .filter(|(_, s)| {
                matches!(s, State::Incomplete { next, .. } | State::Probe { next, .. } if *next <= now)
            })
            .map(|(ip, s)| (*ip, *s))
            .collect();
        for (ip, s) in due {
            let (probes, to) = match s {
                State::Incomplete { probes, .. } => (probes, MacAddr::BROADCAST),
                State::Probe { probes, mac, .. } => (probes, mac),
                _ => continue,
            };
            if probes >= self.cfg.max_probes {
                self.counters.failed += 1;
                self.table.insert(
                    ip,
                    State::Failed {
                        until: now + self.cfg.failed_for,
                    },
                );
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

    fn pair() -> (Neighbours, Neighbours) {
        let c = NeighConfig::default();
        (
            Neighbours::new(MA, vec![IA], c),
            Neighbours::new(MB, vec![IB], c),
        )
    }

    /// Moves every queued frame from `x` to `y`; returns how many.
    fn carry(x: &mut Neighbours, y: &mut Neighbours, now: Instant) -> usize {
        let mut buf = [0u8; 64];
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
}
