//! The switches' forwarding state, computed from the topology and the
//! state of its links: for every switch and destination host, the ports on
//! a shortest path (fewest switch hops) over link directions that are up
//! to the switch the host is attached to, or those of a static route; the
//! ports a broadcast is flooded to (host ports, and switch ports along one
//! spanning tree of the switch graph); the host that owns each MAC address.
//!
//! Shortest paths never loop; static routes could. Static routes that
//! would make frames for a destination go round a loop are refused when
//! they are set; where a later link failure closes one, the loop is broken
//! at the switch where a depth-first search over the destination's
//! forwarding graph finds it (lowest switch first, ports in order), whose
//! route loses the port that closes it.
//!
//! Where a destination has several ports on shortest paths, a switch picks
//! one by a hash of the frame's flow key (equal-cost multi-path): for UDP
//! over IPv4 or IPv6, the source and destination addresses and ports, so
//! that RoCE v2 traffic spreads by its UDP source port, which a sender
//! varies per QP for this purpose (IBTA A17 §17.3.2.1, §17.9.4); for any other frame, its
//! destination and source MACs. Each switch seeds the hash with its own
//! salt, derived from the fabric's seed and its index, so that the choices
//! of consecutive tiers are independent (no polarisation), and the same
//! flow always takes the same path.
//!
//! The tables are rebuilt as a whole, and only when the topology has
//! changed ([`Routes::invalidate`]); a lookup then costs a binary search
//! for the MAC, a hash of at most 40 bytes and an index into flat vectors,
//! and allocates nothing.

#![deny(unsafe_code)]

use std::collections::BTreeMap;

use super::{Channel, Endpoint, Host, Switch};
use crate::wire::ethernet::HEADER_LEN as ETH_HEADER_LEN;

/// Not reachable.
const FAR: u32 = u32::MAX;

/// What a switch does with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Queue it on this port.
    Port(usize),
    /// A group address: copy it to the switch's flood ports.
    Flood,
    /// Shorter than an Ethernet header.
    Runt,
    /// For no known host, or back to the host port it came in by.
    Unknown,
    /// For a known host this switch has no route to.
    NoRoute,
}

/// A port struck from a route to break a loop (not a port number).
const STRUCK: usize = usize::MAX;

/// The forwarding tables of every switch of a fabric.
#[derive(Debug)]
pub(super) struct Routes {
    /// The fabric's seed, from which each switch's hash salt follows.
    seed: u64,
    /// Per switch, the salt of its flow hash.
    salt: Vec<u64>,
    /// The tables no longer match the topology.
    stale: bool,
    switches: usize,
    /// The MACs of the hosts attached to a switch (as 48-bit integers),
    /// sorted, and beside each the host's index.
    macs: Vec<u64>,
    mac_hosts: Vec<usize>,
    /// Destination-major: entry `host * switches + switch` is the range
    /// `start[i]..start[i + 1]` of `ports`.
    start: Vec<usize>,
    ports: Vec<usize>,
    /// Per switch, the range `flood_start[s]..flood_start[s + 1]` of
    /// `flood`: its ports a group-addressed frame is copied to.
    flood_start: Vec<usize>,
    flood: Vec<usize>,
    /// Static routes: (destination host, switch) -> ports.
    statics: BTreeMap<(usize, usize), Vec<usize>>,
    /// Per destination with a loop broken at the last rebuild, the switch
    /// where it was broken (the first found).
    loops: Vec<(usize, usize)>,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// IEEE 802.1Q customer and service tags.
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const IP_PROTO_UDP: u8 = 17;

/// A bijective mix of 64 bits: xor-shifts and odd multipliers (the
/// splitmix64 finaliser).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The words of a frame's flow key (see the module docs) and how many are
/// used. The first word carries a tag of the key's kind, so that keys of
/// different kinds do not collide by construction. `frame` holds at least
/// an Ethernet header.
fn flow_key(frame: &[u8]) -> ([u64; 5], usize) {
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut at = 12;
    let mut ethertype = be16(at);
    // Up to two VLAN tags (802.1Q, 802.1ad).
    for _ in 0..2 {
        if matches!(ethertype, Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ)) {
            at += 4;
            ethertype = be16(at);
        }
    }
    let l3 = frame.get(at + 2..).unwrap_or(&[]);
    let ip = match ethertype {
        Some(ETHERTYPE_IPV4) => ipv4_udp_key(l3),
        Some(ETHERTYPE_IPV6) => ipv6_udp_key(l3),
        _ => None,
    };
    ip.unwrap_or_else(|| ([1 << 48 | mac48(frame), mac48(&frame[6..]), 0, 0, 0], 2))
}

/// The UDP ports of an L4 header, as one word.
fn ports(l4: &[u8]) -> Option<u64> {
    let b = l4.get(..4)?;
    Some(u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
}

/// Addresses and ports of an unfragmented UDP-over-IPv4 packet.
fn ipv4_udp_key(ip: &[u8]) -> Option<([u64; 5], usize)> {
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl || ip[9] != IP_PROTO_UDP {
        return None;
    }
    // A fragment (offset or more-fragments set) may carry no UDP header.
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return None;
    }
    let addrs = u64::from_be_bytes(ip[12..20].try_into().ok()?);
    let ports = ports(&ip[ihl..])?;
    Some(([4 << 48 | ports, addrs, 0, 0, 0], 2))
}

/// Addresses and ports of a UDP-over-IPv6 packet with no extension header.
fn ipv6_udp_key(ip: &[u8]) -> Option<([u64; 5], usize)> {
    if ip.len() < 40 || ip[0] >> 4 != 6 || ip[6] != IP_PROTO_UDP {
        return None;
    }
    let word = |at: usize| u64::from_be_bytes(ip[at..at + 8].try_into().unwrap_or_default());
    let ports = ports(&ip[40..])?;
    Some(([6 << 48 | ports, word(8), word(16), word(24), word(32)], 5))
}

/// The flow hash of a frame at a switch with this salt.
fn flow_hash(frame: &[u8], salt: u64) -> u64 {
    let (words, n) = flow_key(frame);
    words[..n].iter().fold(salt, |h, &w| mix(h ^ w))
}

/// The salt of switch `index`'s flow hash in a fabric seeded with `seed`.
fn salt(seed: u64, index: usize) -> u64 {
    mix(seed
        ^ mix((index as u64)
            .wrapping_add(1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

/// One of `n` choices, uniformly for a uniform hash: the high bits of
/// `hash * n` (no modulo).
fn pick(hash: u64, n: usize) -> usize {
    ((u128::from(hash) * n as u128) >> 64) as usize
}

/// A MAC address as the integer of its six bytes, big-endian.
fn mac48(b: &[u8]) -> u64 {
    b[..6].iter().fold(0, |acc, &x| (acc << 8) | u64::from(x))
}

impl Routes {
    /// No tables yet, for a fabric seeded with `seed`.
    pub(super) fn new(seed: u64) -> Routes {
        Routes {
            seed,
            salt: Vec::new(),
            stale: true,
            switches: 0,
            macs: Vec::new(),
            mac_hosts: Vec::new(),
            start: Vec::new(),
            ports: Vec::new(),
            flood_start: Vec::new(),
            flood: Vec::new(),
            statics: BTreeMap::new(),
            loops: Vec::new(),
        }
    }

    /// Sets (`Some`) or removes (`None`) the static route of `switch` for
    /// `dst`; returns the one it had. The tables are then stale.
    pub(super) fn set_static(
        &mut self,
        dst: usize,
        switch: usize,
        ports: Option<Vec<usize>>,
    ) -> Option<Vec<usize>> {
        self.stale = true;
        match ports {
            Some(p) => self.statics.insert((dst, switch), p),
            None => self.statics.remove(&(dst, switch)),
        }
    }

    /// Where the last rebuild broke a loop of frames for `dst`, if it did.
    pub(super) fn loop_at(&self, dst: usize) -> Option<usize> {
        self.loops.iter().find(|l| l.0 == dst).map(|l| l.1)
    }

    /// Marks the tables out of date: the next lookup rebuilds them.
    pub(super) fn invalidate(&mut self) {
        self.stale = true;
    }

    pub(super) fn is_stale(&self) -> bool {
        self.stale
    }

    /// Recomputes every table from the topology.
    pub(super) fn rebuild(&mut self, hosts: &[Host], switches: &[Switch], channels: &[Channel]) {
        let up = |ch: super::ChannelId| channels[ch.0].up;
        let n = switches.len();
        self.switches = n;
        self.salt = (0..n).map(|u| salt(self.seed, u)).collect();

        // Where each host is attached, and the MAC table.
        let mut attached: Vec<Option<(usize, usize)>> = vec![None; hosts.len()];
        let mut macs: Vec<(u64, usize)> = Vec::new();
        for (s, sw) in switches.iter().enumerate() {
            for (p, port) in sw.ports.iter().enumerate() {
                if let Endpoint::Host(h) = port.peer {
                    attached[h.0] = Some((s, p));
                    macs.push((mac48(&hosts[h.0].mac.0), h.0));
                }
            }
        }
        macs.sort_unstable();
        self.macs = macs.iter().map(|m| m.0).collect();
        self.mac_hosts = macs.iter().map(|m| m.1).collect();

        // The switch graph over link directions that are up, reversed: for
        // each switch v, the switches u with a port towards v (once per
        // port).
        let mut in_start = vec![0usize; n + 1];
        for sw in switches {
            for port in sw.ports.iter().filter(|p| up(p.egress)) {
                if let Endpoint::Switch { switch: v, .. } = port.peer {
                    in_start[v.0 + 1] += 1;
                }
            }
        }
        for v in 0..n {
            in_start[v + 1] += in_start[v];
        }
        let mut in_src = vec![0usize; in_start[n]];
        let mut fill = in_start.clone();
        for (u, sw) in switches.iter().enumerate() {
            for port in sw.ports.iter().filter(|p| up(p.egress)) {
                if let Endpoint::Switch { switch: v, .. } = port.peer {
                    in_src[fill[v.0]] = u;
                    fill[v.0] += 1;
                }
            }
        }

        // Hops from every switch to each switch that has hosts:
        // `dist[d * n + u]`, by a breadth-first search from d backwards.
        let mut has_hosts = vec![false; n];
        for &(s, _) in attached.iter().flatten() {
            has_hosts[s] = true;
        }
        let mut dist = vec![FAR; n * n];
        let mut queue = Vec::with_capacity(n);
        for d in (0..n).filter(|&d| has_hosts[d]) {
            let row = &mut dist[d * n..(d + 1) * n];
            row[d] = 0;
            queue.clear();
            queue.push(d);
            let mut head = 0;
            while head < queue.len() {
                let v = queue[head];
                head += 1;
                for &u in &in_src[in_start[v]..in_start[v + 1]] {
                    if row[u] == FAR {
                        row[u] = row[v] + 1;
                        queue.push(u);
                    }
                }
            }
        }

        // The tables, destination by destination.
        self.start.clear();
        self.ports.clear();
        self.loops.clear();
        self.start.push(0);
        let mut lists: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (h, at) in attached.iter().enumerate() {
            for (u, list) in lists.iter_mut().enumerate() {
                list.clear();
                if let Some(fixed) = self.statics.get(&(h, u)) {
                    let ports = &switches[u].ports;
                    list.extend(fixed.iter().filter(|&&p| up(ports[p].egress)));
                    continue;
                }
                let Some((d, host_port)) = *at else {
                    continue;
                };
                if !up(switches[d].ports[host_port].egress) {
                    continue;
                }
                let here = dist[d * n + u];
                if u == d {
                    list.push(host_port);
                } else if here != FAR {
                    for (p, port) in switches[u].ports.iter().enumerate() {
                        if let Endpoint::Switch { switch: v, .. } = port.peer {
                            if up(port.egress) && dist[d * n + v.0].saturating_add(1) == here {
                                list.push(p);
                            }
                        }
                    }
                }
            }
            let has_static = self.statics.range((h, 0)..(h + 1, 0)).next().is_some();
            if has_static {
                if let Some(at) = break_loops(switches, &mut lists) {
                    self.loops.push((h, at));
                }
            }
            for list in &lists {
                self.ports.extend_from_slice(list);
                self.start.push(self.ports.len());
            }
        }

        self.build_flood(switches, channels);
        self.stale = false;
    }

    /// The flood ports: every host port that is up, and the switch ports
    /// of one spanning tree per connected group of switches, over links up
    /// both ways (breadth-first from its lowest-numbered switch; of
    /// parallel links, the first).
    fn build_flood(&mut self, switches: &[Switch], channels: &[Channel]) {
        let up = |ch: super::ChannelId| channels[ch.0].up;
        let n = switches.len();
        let mut base = Vec::with_capacity(n + 1);
        base.push(0);
        for sw in switches {
            base.push(base.last().copied().unwrap_or(0) + sw.ports.len());
        }
        let mut on_tree = vec![false; base[n]];
        let mut seen = vec![false; n];
        let mut queue = Vec::with_capacity(n);
        for root in 0..n {
            if seen[root] {
                continue;
            }
            seen[root] = true;
            queue.clear();
            queue.push(root);
            let mut head = 0;
            while head < queue.len() {
                let u = queue[head];
                head += 1;
                for (p, port) in switches[u].ports.iter().enumerate() {
                    if !up(port.egress) || !up(port.ingress) {
                        continue;
                    }
                    if let Endpoint::Switch { switch: v, port: q } = port.peer {
                        if !seen[v.0] {
                            seen[v.0] = true;
                            on_tree[base[u] + p] = true;
                            on_tree[base[v.0] + q] = true;
                            queue.push(v.0);
                        }
                    }
                }
            }
        }
        self.flood_start.clear();
        self.flood.clear();
        self.flood_start.push(0);
        for (u, sw) in switches.iter().enumerate() {
            for (p, port) in sw.ports.iter().enumerate() {
                let host = matches!(port.peer, Endpoint::Host(_)) && up(port.egress);
                if host || on_tree[base[u] + p] {
                    self.flood.push(p);
                }
            }
            self.flood_start.push(self.flood.len());
        }
    }

    /// The host that owns this MAC (among the hosts attached to a switch).
    fn host_of(&self, mac: u64) -> Option<usize> {
        let i = self.macs.binary_search(&mac).ok()?;
        Some(self.mac_hosts[i])
    }

    /// The host a frame is addressed to, if the tables know its MAC.
    pub(super) fn host_of_frame(&self, frame: &[u8]) -> Option<usize> {
        if frame.len() < 6 {
            return None;
        }
        self.host_of(mac48(frame))
    }

    /// The ports of `switch` on a shortest path to `host` (empty: no
    /// route, or a host the tables do not know).
    pub(super) fn ports(&self, switch: usize, host: usize) -> &[usize] {
        let i = host * self.switches + switch;
        match (self.start.get(i), self.start.get(i + 1)) {
            (Some(&lo), Some(&hi)) if switch < self.switches => &self.ports[lo..hi],
            _ => &[],
        }
    }

    /// The range of [`Routes::flood_port`] indices of a switch.
    pub(super) fn flood_range(&self, switch: usize) -> std::ops::Range<usize> {
        self.flood_start[switch]..self.flood_start[switch + 1]
    }

    pub(super) fn flood_port(&self, i: usize) -> usize {
        self.flood[i]
    }

    /// Where `switch` sends a frame that came in by `in_port`. The tables
    /// must be up to date.
    pub(super) fn decide(
        &self,
        switches: &[Switch],
        switch: usize,
        in_port: usize,
        frame: &[u8],
    ) -> Decision {
        if frame.len() < ETH_HEADER_LEN {
            return Decision::Runt;
        }
        if frame[0] & 1 != 0 {
            return Decision::Flood;
        }
        let Some(host) = self.host_of(mac48(frame)) else {
            return Decision::Unknown;
        };
        let ports = self.ports(switch, host);
        let p = match ports.len() {
            0 => return Decision::NoRoute,
            1 => ports[0],
            n => ports[pick(flow_hash(frame, self.salt[switch]), n)],
        };
        let back_to_host = matches!(switches[switch].ports[p].peer, Endpoint::Host(_));
        if p == in_port && back_to_host {
            return Decision::Unknown;
        }
        Decision::Port(p)
    }
}

/// Breaks every loop in one destination's forwarding graph (switch `u` has
/// an edge to switch `v` for each port of `lists[u]` that leads to `v`):
/// a depth-first search from each switch in turn, ports in order, strikes
/// every port that leads back to a switch still on its stack. What is left
/// has no loop (the edges kept are tree, forward and cross edges of the
/// search). Returns the switch of the first port struck.
fn break_loops(switches: &[Switch], lists: &mut [Vec<usize>]) -> Option<usize> {
    const NEW: u8 = 0;
    const ON_STACK: u8 = 1;
    const DONE: u8 = 2;
    let n = lists.len();
    let mut state = vec![NEW; n];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    let mut first = None;
    for root in 0..n {
        if state[root] != NEW {
            continue;
        }
        state[root] = ON_STACK;
        stack.push((root, 0));
        while let Some(&(u, i)) = stack.last() {
            let Some(&p) = lists[u].get(i) else {
                state[u] = DONE;
                stack.pop();
                continue;
            };
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            let Endpoint::Switch { switch: v, .. } = switches[u].ports[p].peer else {
                continue;
            };
            match state[v.0] {
                NEW => {
                    state[v.0] = ON_STACK;
                    stack.push((v.0, 0));
                }
                ON_STACK => {
                    lists[u][i] = STRUCK;
                    first.get_or_insert(u);
                }
                _ => {}
            }
        }
    }
    for list in lists.iter_mut() {
        list.retain(|&p| p != STRUCK);
    }
    first
}
