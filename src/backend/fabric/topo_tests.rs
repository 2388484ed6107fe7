//! Switch-to-switch topologies: shortest-path routing, flooding along a
//! spanning tree, ECMP, link failures and static routes.

use super::tests::recv;
use super::*;
use crate::backend::Backend;
use crate::backend::Burst;
use crate::wire::opcode::Op;
use crate::wire::{BthRepr, Ecn, FrameRepr, IpRepr, Opcode, Psn};

fn mac(i: usize) -> MacAddr {
    MacAddr([2, 0, 0, 0, 1, i as u8])
}

fn ip(i: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(198, 18, 1, i as u8)
}

/// A RoCE v2 SEND Only (IPv4, UDP 4791) from host `src` to host `dst`
/// with UDP source port `sport`, as the transport builds it.
fn roce(src: usize, dst: usize, sport: u16) -> VecBuf {
    let ip = IpRepr::v4(ip(src), ip(dst), 26, Ecn::Ect0);
    let bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x11, Psn::new(0));
    let r = FrameRepr::roce(mac(src), mac(dst), ip, sport, bth);
    let payload = [0x5a; 64];
    let mut f = VecBuf::with_capacity(FRAME_CAPACITY);
    let buf = f.append(r.frame_len(payload.len())).unwrap();
    r.emit(&payload, buf).unwrap();
    f
}

/// A bare Ethernet frame of 100 bytes (an unknown ethertype).
fn raw(dst: MacAddr, src: MacAddr, tag: u8) -> VecBuf {
    let mut f = VecBuf::with_capacity(FRAME_CAPACITY);
    let b = f.append(100).unwrap();
    b[0..6].copy_from_slice(&dst.0);
    b[6..12].copy_from_slice(&src.0);
    b[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    b[14..].fill(tag);
    f
}

fn send(fabric: &mut Fabric, h: HostId, frames: Vec<VecBuf>) {
    let mut port = fabric.port(h);
    for chunk in frames.chunks(crate::backend::BURST) {
        let mut burst = Burst::new();
        for f in chunk {
            burst.push(f.clone());
        }
        assert_eq!(port.tx_burst(&mut burst), chunk.len());
    }
}

/// `leaves` leaf switches with `per_leaf` hosts each, every leaf linked
/// once to each of `spines` spine switches. Hosts are numbered leaf by
/// leaf; a leaf's ports are its hosts, then its uplinks in spine order; a
/// spine's port `l` goes to leaf `l`.
struct LeafSpine {
    fabric: Fabric,
    leaves: Vec<SwitchId>,
    spines: Vec<SwitchId>,
    hosts: Vec<HostId>,
    /// `uplinks[l][s]`: leaf `l` (a) to spine `s` (b).
    uplinks: Vec<Vec<Link>>,
}

impl LeafSpine {
    fn new(seed: u64, leaves: usize, spines: usize, per_leaf: usize) -> LeafSpine {
        let mut fabric = Fabric::new(seed);
        let leaf_ids: Vec<SwitchId> = (0..leaves).map(|_| fabric.add_switch()).collect();
        let spine_ids: Vec<SwitchId> = (0..spines).map(|_| fabric.add_switch()).collect();
        let mut hosts = Vec::new();
        for &leaf in &leaf_ids {
            for _ in 0..per_leaf {
                let h = fabric.add_host(mac(hosts.len()));
                fabric
                    .connect_to_switch(h, leaf, LinkConfig::default())
                    .unwrap();
                hosts.push(h);
            }
        }
        let uplinks = leaf_ids
            .iter()
            .map(|&leaf| {
                spine_ids
                    .iter()
                    .map(|&spine| {
                        fabric
                            .connect_switches(leaf, spine, LinkConfig::default())
                            .unwrap()
                    })
                    .collect()
            })
            .collect();
        LeafSpine {
            fabric,
            leaves: leaf_ids,
            spines: spine_ids,
            hosts,
            uplinks,
        }
    }

    fn spine_traffic(&self) -> u64 {
        self.uplinks
            .iter()
            .flatten()
            .map(|l| {
                self.fabric.link_counters(l.a_to_b).tx_frames
                    + self.fabric.link_counters(l.b_to_a).tx_frames
            })
            .sum()
    }

    /// The spine a path crosses, if any.
    fn spine_of(&self, path: &[ChannelId]) -> Option<usize> {
        path.iter()
            .find_map(|&ch| match self.fabric.channel_ends(ch).1 {
                Endpoint::Switch { switch, .. } => self.spines.iter().position(|&s| s == switch),
                Endpoint::Host(_) => None,
            })
    }
}

#[test]
fn a_leaf_spine_fabric_routes_across_leaves_over_one_spine_and_locally_over_none() {
    let mut ls = LeafSpine::new(1, 2, 2, 2);
    let h = ls.hosts.clone();
    // Host 0 (leaf 0) to host 3 (leaf 1): host link, leaf to spine, spine
    // to leaf, leaf to host.
    let far = roce(0, 3, 0xc000);
    let path = ls.fabric.path(h[0], far.data()).unwrap();
    assert_eq!(path.len(), 4);
    assert_eq!(path[0], ls.fabric.host_link(h[0]).unwrap());
    assert_eq!(ls.fabric.channel_ends(path[3]).1, Endpoint::Host(h[3]));
    assert!(ls.spine_of(&path).is_some());
    // Host 0 to host 1, both on leaf 0: no spine.
    let near = roce(0, 1, 0xc000);
    let path = ls.fabric.path(h[0], near.data()).unwrap();
    assert_eq!(path.len(), 2);
    assert_eq!(ls.spine_of(&path), None);

    // A leaf offers both uplinks towards the other leaf's hosts, and the
    // host's own port towards its own hosts; a spine its one link down.
    let (leaf0, spine1) = (ls.leaves[0], ls.spines[1]);
    assert_eq!(ls.fabric.route_ports(leaf0, h[3]).unwrap(), &[2, 3]);
    assert_eq!(ls.fabric.route_ports(leaf0, h[1]).unwrap(), &[1]);
    assert_eq!(ls.fabric.route_ports(spine1, h[2]).unwrap(), &[1]);
    assert_eq!(
        ls.fabric.route_ports(SwitchId(9), h[0]),
        Err(SimError::UnknownSwitch(SwitchId(9)))
    );
    assert_eq!(
        ls.fabric.route_ports(leaf0, HostId(99)),
        Err(SimError::UnknownHost(HostId(99)))
    );

    // What the path says is what happens.
    send(&mut ls.fabric, h[0], vec![far, near]);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[3]).len(), 1);
    assert_eq!(recv(&mut ls.fabric, h[1]).len(), 1);
    assert_eq!(ls.spine_traffic(), 2);
    assert_eq!(ls.fabric.switch_counters(leaf0).forwarded, 2);

    // The ports of a switch and their peers.
    let ports: Vec<PortInfo> = ls.fabric.switch_ports(spine1).collect();
    assert_eq!(ports.len(), 2);
    assert_eq!(
        ports[0].peer,
        Endpoint::Switch {
            switch: leaf0,
            port: 3
        }
    );
    assert_eq!(ports[0].ingress, ls.uplinks[0][1].a_to_b);
    assert_eq!(ports[0].egress, ls.uplinks[0][1].b_to_a);
    let up = ls.fabric.switch_port(leaf0, 3).unwrap();
    assert_eq!(up.egress, ls.uplinks[0][1].a_to_b);
    assert_eq!(
        ls.fabric.channel_ends(up.egress),
        (
            Endpoint::Switch {
                switch: leaf0,
                port: 3
            },
            Endpoint::Switch {
                switch: spine1,
                port: 0
            }
        )
    );
}

#[test]
fn a_path_names_why_a_frame_would_not_arrive() {
    let mut ls = LeafSpine::new(1, 2, 2, 2);
    let h = ls.hosts.clone();
    let lonely = ls.fabric.add_host(mac(50));
    assert_eq!(
        ls.fabric.path(lonely, roce(50, 0, 1).data()),
        Err(SimError::NotConnected(lonely))
    );
    assert_eq!(
        ls.fabric
            .path(h[0], raw(MacAddr::BROADCAST, mac(0), 0).data())
            .unwrap_err(),
        SimError::NotUnicast
    );
    assert_eq!(
        ls.fabric.path(h[0], &[0u8; 10]).unwrap_err(),
        SimError::NotUnicast
    );
    let err = ls
        .fabric
        .path(h[0], raw(mac(77), mac(0), 0).data())
        .unwrap_err();
    assert_eq!(
        err,
        SimError::NoRoute {
            switch: ls.leaves[0],
            mac: mac(77)
        }
    );
    assert_eq!(
        err.to_string(),
        "a frame for 02:00:00:00:01:4d has no route at switch 0"
    );
}

/// Sends one broadcast from every host and checks that each other host
/// got exactly one copy of each, the sender none.
fn broadcast_once_each(fabric: &mut Fabric, hosts: &[HostId]) {
    for (i, &h) in hosts.iter().enumerate() {
        let src = fabric.mac(h);
        send(fabric, h, vec![raw(MacAddr::BROADCAST, src, i as u8)]);
    }
    fabric.run_until_idle();
    for (j, &h) in hosts.iter().enumerate() {
        let mut tags: Vec<u8> = recv(fabric, h).iter().map(|f| f.data()[14]).collect();
        tags.sort_unstable();
        let want: Vec<u8> = (0..hosts.len() as u8).filter(|&i| i != j as u8).collect();
        assert_eq!(tags, want, "host {j}");
    }
}

#[test]
fn a_broadcast_reaches_every_host_once_where_switches_form_loops() {
    // A leaf-spine fabric is full of loops.
    let mut ls = LeafSpine::new(1, 3, 2, 2);
    let hosts = ls.hosts.clone();
    broadcast_once_each(&mut ls.fabric, &hosts);
    // Every switch flooded each broadcast once.
    let flooded: u64 = (0..5)
        .map(|s| ls.fabric.switch_counters(SwitchId(s)).flooded)
        .sum();
    assert_eq!(flooded, 6 * 5);

    // A ring of three switches, two of them joined twice, with a host on
    // each; and a second fabric island of one switch with two hosts.
    let mut fabric = Fabric::new(2);
    let s: Vec<SwitchId> = (0..4).map(|_| fabric.add_switch()).collect();
    let cfg = LinkConfig::default();
    fabric.connect_switches(s[0], s[1], cfg).unwrap();
    fabric.connect_switches(s[1], s[2], cfg).unwrap();
    fabric.connect_switches(s[2], s[0], cfg).unwrap();
    fabric.connect_switches(s[1], s[0], cfg).unwrap();
    let mut hosts = Vec::new();
    for (i, &sw) in [s[0], s[1], s[2], s[3], s[3]].iter().enumerate() {
        let h = fabric.add_host(mac(i));
        fabric.connect_to_switch(h, sw, cfg).unwrap();
        hosts.push(h);
    }
    for f in [0u8, 1, 2] {
        let src = fabric.mac(hosts[f as usize]);
        send(
            &mut fabric,
            hosts[f as usize],
            vec![raw(MacAddr([0x01, 0, 0x5e, 0, 0, 1]), src, f)],
        );
    }
    fabric.run_until_idle();
    for (j, &h) in hosts.iter().enumerate() {
        let got = recv(&mut fabric, h).len();
        let want = if j < 3 { 2 } else { 0 };
        assert_eq!(got, want, "host {j}");
    }
    let hosts_island = [hosts[3], hosts[4]];
    broadcast_once_each(&mut fabric, &hosts_island);
}

#[test]
fn switch_topology_mistakes_are_errors() {
    let mut fabric = Fabric::new(0);
    let a = fabric.add_switch();
    let b = fabric.add_switch();
    let cfg = LinkConfig::default();
    assert_eq!(
        fabric.connect_switches(a, a, cfg),
        Err(SimError::SwitchSelfLoop(a))
    );
    assert_eq!(
        fabric.connect_switches(a, a, cfg).unwrap_err().to_string(),
        "cannot connect switch 0 to itself"
    );
    assert_eq!(
        fabric.connect_switches(a, SwitchId(7), cfg),
        Err(SimError::UnknownSwitch(SwitchId(7)))
    );
    assert_eq!(
        fabric.connect_switches(SwitchId(8), b, cfg),
        Err(SimError::UnknownSwitch(SwitchId(8)))
    );
    let bad = LinkConfig { loss: 2.0, ..cfg };
    assert!(matches!(
        fabric.connect_switches(a, b, bad),
        Err(SimError::InvalidProbability { field: "loss", .. })
    ));
    // Nothing was half built.
    assert_eq!(fabric.switch_ports(a).count(), 0);
    fabric.connect_switches(a, b, cfg).unwrap();
    fabric.connect_switches(b, a, cfg).unwrap();
    assert_eq!(fabric.switch_ports(a).count(), 2);
    // One MAC per fabric, across switches.
    let h1 = fabric.add_host(mac(1));
    let h2 = fabric.add_host(mac(1));
    fabric.connect_to_switch(h1, a, cfg).unwrap();
    assert_eq!(
        fabric.connect_to_switch(h2, b, cfg),
        Err(SimError::DuplicateMac {
            switch: a,
            mac: mac(1)
        })
    );
}

// ----- ECMP -----

/// A RoCE v2 frame over IPv6, tagged with a VLAN, from `src` to `dst`.
fn roce_v6_tagged(src: usize, dst: usize, sport: u16) -> VecBuf {
    let addr = |i: usize| std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 1, i as u16);
    let ip = IpRepr::v6(addr(src), addr(dst), 26, Ecn::Ect0, 0);
    let bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x11, Psn::new(0));
    let mut r = FrameRepr::roce(mac(src), mac(dst), ip, sport, bth);
    r.eth.vlan = Some(crate::wire::VlanTag {
        pcp: 3,
        dei: false,
        vid: 7,
    });
    let mut f = VecBuf::with_capacity(FRAME_CAPACITY);
    let buf = f.append(r.frame_len(0)).unwrap();
    r.emit(&[], buf).unwrap();
    f
}

impl LeafSpine {
    /// Frames that went up from every leaf to spine `s`.
    fn up_to_spine(&self, s: usize) -> u64 {
        self.uplinks
            .iter()
            .map(|l| self.fabric.link_counters(l[s].a_to_b).tx_frames)
            .sum()
    }
}

/// Whether `count` of `n` is within 4 standard deviations of a fair share
/// of `1 / ways` (a binomial spread).
fn fair(count: u64, n: u64, ways: u64) -> bool {
    let p = 1.0 / ways as f64;
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (count as f64 - mean).abs() <= 4.0 * sd
}

#[test]
fn ecmp_spreads_udp_source_ports_over_both_spines() {
    let mut ls = LeafSpine::new(1, 2, 2, 2);
    let h = ls.hosts.clone();
    // 1000 flows from host 0 to host 2, one frame each, differing only by
    // their UDP source port, as QPs do.
    let frames: Vec<VecBuf> = (0..1000).map(|i| roce(0, 2, 0xc000 + i)).collect();
    send(&mut ls.fabric, h[0], frames);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[2]).len(), 1000);
    let (s0, s1) = (ls.up_to_spine(0), ls.up_to_spine(1));
    assert_eq!(s0 + s1, 1000);
    assert!(fair(s0, 1000, 2), "spine 0 carried {s0} of 1000");

    // IPv6 behind a VLAN tag spreads the same way.
    let frames: Vec<VecBuf> = (0..1000)
        .map(|i| roce_v6_tagged(1, 3, 0xc000 + i))
        .collect();
    send(&mut ls.fabric, h[1], frames);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[3]).len(), 1000);
    let s0 = ls.up_to_spine(0) - s0;
    assert!(fair(s0, 1000, 2), "spine 0 carried {s0} of 1000");
}

#[test]
fn one_flow_key_always_takes_one_path_in_order() {
    let mut ls = LeafSpine::new(3, 2, 2, 2);
    let h = ls.hosts.clone();
    for sport in [0xc000u16, 0xc001, 0xd123, 0xffff] {
        let before = [ls.up_to_spine(0), ls.up_to_spine(1)];
        let path = ls.fabric.path(h[0], roce(0, 3, sport).data()).unwrap();
        let spine = ls.spine_of(&path).unwrap();
        // Frames of one flow differ beyond the key (here the PSN and the
        // payload): all take the path the first one takes.
        let frames: Vec<VecBuf> = (0..50u32)
            .map(|psn| {
                let mut f = roce(0, 3, sport);
                let d = f.data_mut();
                // The BTH's PSN (bytes 9..12 of the BTH, after 14 + 20 + 8).
                d[42 + 9..42 + 12].copy_from_slice(&psn.to_be_bytes()[1..]);
                let n = d.len();
                d[n - 8] = psn as u8;
                f
            })
            .collect();
        for f in &frames {
            assert_eq!(ls.fabric.path(h[0], f.data()).unwrap(), path);
        }
        send(&mut ls.fabric, h[0], frames);
        ls.fabric.run_until_idle();
        let got: Vec<u8> = recv(&mut ls.fabric, h[3])
            .iter()
            .map(|f| f.data()[f.len() - 8])
            .collect();
        assert_eq!(got, (0..50).collect::<Vec<u8>>());
        let after = [ls.up_to_spine(0), ls.up_to_spine(1)];
        assert_eq!(after[spine] - before[spine], 50);
        assert_eq!(after[1 - spine], before[1 - spine]);
    }
    // A frame that is not UDP over IP hashes on its MACs: one pair of
    // hosts, one path, whatever it carries.
    let first = ls.fabric.path(h[1], raw(mac(2), mac(1), 0).data()).unwrap();
    for tag in 1..20 {
        let f = raw(mac(2), mac(1), tag);
        assert_eq!(ls.fabric.path(h[1], f.data()).unwrap(), first);
    }
}

#[test]
fn consecutive_tiers_choose_independently() {
    // Host x on switch A, two links A-B, two links B-C, host y on C: a
    // switch that chose as the one before it would use two of the four
    // combinations only.
    let mut fabric = Fabric::new(5);
    let s: Vec<SwitchId> = (0..3).map(|_| fabric.add_switch()).collect();
    let cfg = LinkConfig::default();
    let x = fabric.add_host(mac(0));
    let y = fabric.add_host(mac(1));
    fabric.connect_to_switch(x, s[0], cfg).unwrap();
    fabric.connect_to_switch(y, s[2], cfg).unwrap();
    let ab: Vec<Link> = (0..2)
        .map(|_| fabric.connect_switches(s[0], s[1], cfg).unwrap())
        .collect();
    let bc: Vec<Link> = (0..2)
        .map(|_| fabric.connect_switches(s[1], s[2], cfg).unwrap())
        .collect();
    let mut combos = [[0u64; 2]; 2];
    for i in 0..2000 {
        let path = fabric.path(x, roce(0, 1, i).data()).unwrap();
        assert_eq!(path.len(), 4);
        let first = ab.iter().position(|l| l.a_to_b == path[1]).unwrap();
        let second = bc.iter().position(|l| l.a_to_b == path[2]).unwrap();
        combos[first][second] += 1;
    }
    for (i, row) in combos.iter().enumerate() {
        for (j, &c) in row.iter().enumerate() {
            assert!(fair(c, 2000, 4), "links {i} then {j}: {c} of 2000");
        }
    }
}

/// Per uplink direction of a 4 x 2 x 4 fabric, the frames carried when
/// every host sends 20 flows to every host on other leaves.
fn uplink_counts(seed: u64) -> Vec<u64> {
    let mut ls = LeafSpine::new(seed, 4, 2, 4);
    let h = ls.hosts.clone();
    for (i, &src) in h.iter().enumerate() {
        let frames: Vec<VecBuf> = (0..h.len())
            .filter(|j| j / 4 != i / 4)
            .flat_map(|j| (0..20).map(move |k| roce(i, j, 0xc000 + k)))
            .collect();
        send(&mut ls.fabric, src, frames);
    }
    ls.fabric.run_until_idle();
    ls.uplinks
        .iter()
        .flatten()
        .flat_map(|l| [l.a_to_b, l.b_to_a])
        .map(|ch| ls.fabric.link_counters(ch).tx_frames)
        .collect()
}

#[test]
fn the_same_seed_spreads_flows_the_same_way() {
    let a = uplink_counts(11);
    assert_eq!(a.iter().step_by(2).sum::<u64>(), 16 * 12 * 20);
    assert_eq!(a, uplink_counts(11));
    assert_ne!(a, uplink_counts(12));
}

// ----- Link failures and static routes -----

/// Sends one frame per UDP source port from host `src` to host `dst`.
fn flows(fabric: &mut Fabric, src: usize, dst: usize, n: u16) {
    let frames = (0..n).map(|i| roce(src, dst, 0xc000 + i)).collect();
    send(fabric, HostId(src), frames);
}

#[test]
fn a_failed_uplink_drops_its_queue_and_every_flow_moves_to_the_other_spine() {
    let mut ls = LeafSpine::new(1, 2, 2, 2);
    let h = ls.hosts.clone();
    let slow_up = ls.uplinks[0][0];
    // Leaf 0's uplink to spine 0 runs at 1 Gb/s: what ECMP puts there
    // queues.
    let slow = LinkConfig {
        rate_bps: 1_000_000_000,
        ..LinkConfig::default()
    };
    ls.fabric.set_link_config(slow_up.a_to_b, slow).unwrap();
    flows(&mut ls.fabric, 0, 2, 400);
    ls.fabric.advance_to(Instant::from_nanos(20_000));
    let q = ls.fabric.egress_queue(slow_up.a_to_b);
    let waiting = q.frames() as u64 - u64::from(q.is_busy());
    let sent = ls.fabric.link_counters(slow_up.a_to_b).tx_frames;
    assert!(waiting > 100, "{waiting} waiting");

    ls.fabric.set_link_up(slow_up, false).unwrap();
    assert!(!ls.fabric.is_up(slow_up.a_to_b) && !ls.fabric.is_up(slow_up.b_to_a));
    let c = *ls.fabric.link_counters(slow_up.a_to_b);
    assert_eq!(c.dropped_down, waiting);
    assert_eq!(ls.fabric.egress_queue(slow_up.a_to_b).frames() as u64, 1);
    ls.fabric.run_until_idle();
    // What had left, and the frame on the wire, arrived; the rest is lost.
    let c = *ls.fabric.link_counters(slow_up.a_to_b);
    assert_eq!(c.tx_frames, sent + 1);
    assert_eq!(c.rx_frames, sent + 1);
    assert_eq!(recv(&mut ls.fabric, h[2]).len() as u64, 400 - waiting);
    assert!(c
        .to_string()
        .contains(&format!("dropped while down {waiting}")));

    // From now on every flow takes spine 1.
    assert_eq!(ls.fabric.route_ports(ls.leaves[0], h[2]).unwrap(), &[3]);
    for sport in 0..100 {
        let path = ls.fabric.path(h[0], roce(0, 2, sport).data()).unwrap();
        assert_eq!(ls.spine_of(&path), Some(1));
    }
    let before = ls.up_to_spine(0);
    flows(&mut ls.fabric, 0, 3, 200);
    flows(&mut ls.fabric, 1, 2, 200);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[3]).len(), 200);
    assert_eq!(recv(&mut ls.fabric, h[2]).len(), 200);
    assert_eq!(ls.up_to_spine(0), before);
    // Spine 0 has lost its way to leaf 0's hosts through that link too,
    // but still reaches them through leaf 1 and spine 1.
    assert_eq!(ls.fabric.route_ports(ls.spines[0], h[0]).unwrap(), &[1]);
    // Nothing was refused at a switch: no route led into the failed link.
    assert_eq!(
        c.dropped_down,
        ls.fabric.link_counters(slow_up.a_to_b).dropped_down
    );

    // Back up: both spines again.
    ls.fabric.set_link_up(slow_up, true).unwrap();
    assert_eq!(ls.fabric.route_ports(ls.leaves[0], h[2]).unwrap(), &[2, 3]);
    flows(&mut ls.fabric, 0, 2, 200);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[2]).len(), 200);
    assert!(ls.up_to_spine(0) > before);
}

#[test]
fn a_host_whose_link_is_down_is_unreachable_and_cannot_send() {
    let mut ls = LeafSpine::new(1, 2, 2, 2);
    let h = ls.hosts.clone();
    let link = Link {
        a_to_b: ls.fabric.host_link(h[3]).unwrap(),
        b_to_a: ls.fabric.switch_port(ls.leaves[1], 1).unwrap().egress,
    };
    ls.fabric.set_link_up(link, false).unwrap();
    flows(&mut ls.fabric, 0, 3, 10);
    flows(&mut ls.fabric, 2, 3, 5);
    flows(&mut ls.fabric, 3, 0, 7);
    ls.fabric.run_until_idle();
    assert!(recv(&mut ls.fabric, h[3]).is_empty());
    assert!(recv(&mut ls.fabric, h[0]).is_empty());
    // Dropped at the first switch, which knows the MAC but has no route.
    assert_eq!(ls.fabric.switch_counters(ls.leaves[0]).dropped_no_route, 10);
    assert_eq!(ls.fabric.switch_counters(ls.leaves[1]).dropped_no_route, 5);
    assert_eq!(ls.spine_traffic(), 0);
    // Host 3's frames never left it.
    assert_eq!(ls.fabric.link_counters(link.a_to_b).dropped_down, 7);
    assert_eq!(ls.fabric.link_counters(link.a_to_b).tx_frames, 0);
    assert_eq!(ls.fabric.host_counters(h[3]).tx_frames, 7);
    assert_eq!(
        ls.fabric.path(h[0], roce(0, 3, 1).data()),
        Err(SimError::NoRoute {
            switch: ls.leaves[0],
            mac: mac(3)
        })
    );
    assert_eq!(
        ls.fabric.path(h[3], roce(3, 0, 1).data()),
        Err(SimError::LinkDown(link.a_to_b))
    );
    // A broadcast skips the dead port.
    send(
        &mut ls.fabric,
        h[0],
        vec![raw(MacAddr::BROADCAST, mac(0), 1)],
    );
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[2]).len(), 1);
    assert_eq!(ls.fabric.link_counters(link.b_to_a).dropped_down, 0);
}

#[test]
fn a_static_route_is_followed_until_cleared() {
    let mut ls = LeafSpine::new(1, 2, 2, 2);
    let h = ls.hosts.clone();
    let leaf0 = ls.leaves[0];
    // Leaf 0 sends everything for host 2 by spine 1 (port 3).
    ls.fabric.set_route(leaf0, h[2], &[3]).unwrap();
    assert_eq!(ls.fabric.route_ports(leaf0, h[2]).unwrap(), &[3]);
    flows(&mut ls.fabric, 0, 2, 100);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, h[2]).len(), 100);
    assert_eq!((ls.up_to_spine(0), ls.up_to_spine(1)), (0, 100));
    // Other destinations keep both spines.
    assert_eq!(ls.fabric.route_ports(leaf0, h[3]).unwrap(), &[2, 3]);
    // It holds through recomputation.
    ls.fabric.set_link_up(ls.uplinks[1][0], false).unwrap();
    ls.fabric.set_link_up(ls.uplinks[1][0], true).unwrap();
    assert_eq!(ls.fabric.route_ports(leaf0, h[2]).unwrap(), &[3]);

    ls.fabric.clear_route(leaf0, h[2]).unwrap();
    assert_eq!(ls.fabric.route_ports(leaf0, h[2]).unwrap(), &[2, 3]);
    flows(&mut ls.fabric, 0, 2, 400);
    ls.fabric.run_until_idle();
    assert!(fair(ls.up_to_spine(0), 400, 2), "{}", ls.up_to_spine(0));
    // Clearing what is not there is fine.
    ls.fabric.clear_route(leaf0, h[2]).unwrap();

    // No ports: frames for host 2 are dropped at leaf 0.
    ls.fabric.set_route(leaf0, h[2], &[]).unwrap();
    flows(&mut ls.fabric, 1, 2, 3);
    ls.fabric.run_until_idle();
    assert_eq!(ls.fabric.switch_counters(leaf0).dropped_no_route, 3);

    // Mistakes.
    assert_eq!(
        ls.fabric.set_route(leaf0, h[2], &[1, 4]),
        Err(SimError::UnknownPort {
            switch: leaf0,
            port: 4
        })
    );
    assert_eq!(
        ls.fabric
            .set_route(leaf0, h[2], &[9])
            .unwrap_err()
            .to_string(),
        "switch 0 has no port 9"
    );
    assert_eq!(
        ls.fabric.set_route(SwitchId(9), h[2], &[0]),
        Err(SimError::UnknownSwitch(SwitchId(9)))
    );
    assert_eq!(
        ls.fabric.clear_route(leaf0, HostId(40)),
        Err(SimError::UnknownHost(HostId(40)))
    );
    // A refused route leaves the one before.
    assert_eq!(ls.fabric.route_ports(leaf0, h[2]).unwrap(), &[] as &[usize]);
}

#[test]
fn static_routes_can_bounce_between_tiers_but_not_loop() {
    // Three leaves, two spines; leaf 2 has lost its link to spine 0.
    let mut ls = LeafSpine::new(1, 3, 2, 2);
    let h = ls.hosts.clone();
    let dst = h[4];
    let (leaf0, spine0) = (ls.leaves[0], ls.spines[0]);
    ls.fabric.set_link_up(ls.uplinks[2][0], false).unwrap();
    // Shortest paths avoid spine 0 for leaf 2's hosts.
    let path = ls.fabric.path(h[0], roce(0, 4, 1).data()).unwrap();
    assert_eq!(path.len(), 4);
    assert_eq!(ls.spine_of(&path), Some(1));
    // Sending them up to spine 0 from leaf 0 alone would loop: spine 0's
    // shortest way to leaf 2 goes back down to leaf 0 (or leaf 1).
    let err = ls.fabric.set_route(leaf0, dst, &[2]).unwrap_err();
    assert_eq!(
        err,
        SimError::RoutingLoop {
            switch: spine0,
            dst
        }
    );
    assert_eq!(
        err.to_string(),
        "frames for host 4 would loop through switch 3"
    );
    assert_eq!(ls.fabric.route_ports(leaf0, dst).unwrap(), &[3]);
    // Spine 0 first hands them down to leaf 1, which takes them up to
    // spine 1: leaf 0, spine 0, leaf 1, spine 1, leaf 2.
    ls.fabric.set_route(spine0, dst, &[1]).unwrap();
    ls.fabric.set_route(leaf0, dst, &[2]).unwrap();
    for sport in 0..50 {
        let path = ls.fabric.path(h[0], roce(0, 4, sport).data()).unwrap();
        let switches: Vec<usize> = path[..5]
            .iter()
            .map(|&ch| match ls.fabric.channel_ends(ch).1 {
                Endpoint::Switch { switch, .. } => switch.index(),
                Endpoint::Host(_) => unreachable!(),
            })
            .collect();
        assert_eq!(switches, vec![0, 3, 1, 4, 2]);
    }
    flows(&mut ls.fabric, 0, 4, 50);
    ls.fabric.run_until_idle();
    assert_eq!(recv(&mut ls.fabric, dst).len(), 50);
    assert_eq!(
        ls.fabric.link_counters(ls.uplinks[1][0].b_to_a).tx_frames,
        50
    );
    // Clearing spine 0's route first would loop again.
    assert!(matches!(
        ls.fabric.clear_route(spine0, dst),
        Err(SimError::RoutingLoop { .. })
    ));

    // A failure that closes a loop: leaf 1 loses spine 1, so its shortest
    // way to leaf 2 is up to spine 0, which sends frames for host 4 back
    // to leaf 1. The loop is broken at leaf 1, which drops them.
    ls.fabric.set_link_up(ls.uplinks[1][1], false).unwrap();
    flows(&mut ls.fabric, 0, 4, 20);
    ls.fabric.run_until_idle();
    assert!(recv(&mut ls.fabric, dst).is_empty());
    assert_eq!(ls.fabric.switch_counters(ls.leaves[1]).dropped_no_route, 20);
    // Undone in order, the fabric routes as before.
    ls.fabric.set_link_up(ls.uplinks[1][1], true).unwrap();
    ls.fabric.clear_route(leaf0, dst).unwrap();
    ls.fabric.clear_route(spine0, dst).unwrap();
    ls.fabric.set_link_up(ls.uplinks[2][0], true).unwrap();
    assert_eq!(ls.fabric.route_ports(leaf0, dst).unwrap(), &[2, 3]);
}

#[test]
fn a_link_is_named_by_its_two_directions() {
    let mut ls = LeafSpine::new(1, 2, 2, 1);
    let (a, b) = (ls.uplinks[0][0], ls.uplinks[0][1]);
    let mixed = Link {
        a_to_b: a.a_to_b,
        b_to_a: b.b_to_a,
    };
    assert_eq!(
        ls.fabric.set_link_up(mixed, false),
        Err(SimError::NotALink {
            a_to_b: a.a_to_b,
            b_to_a: b.b_to_a
        })
    );
    let same = Link {
        a_to_b: a.a_to_b,
        b_to_a: a.a_to_b,
    };
    assert!(ls.fabric.set_link_up(same, false).is_err());
    assert_eq!(
        ls.fabric.set_channel_up(ChannelId(99), false),
        Err(SimError::UnknownChannel(ChannelId(99)))
    );
    // Reversed, it is still one link.
    let reversed = Link {
        a_to_b: a.b_to_a,
        b_to_a: a.a_to_b,
    };
    ls.fabric.set_link_up(reversed, false).unwrap();
    assert!(!ls.fabric.is_up(a.a_to_b));
    // One direction down: the other still carries frames.
    ls.fabric.set_link_up(a, true).unwrap();
    ls.fabric.set_channel_up(a.a_to_b, false).unwrap();
    assert!(ls.fabric.is_up(a.b_to_a));
    assert_eq!(
        ls.fabric.route_ports(ls.spines[0], ls.hosts[0]).unwrap(),
        &[0]
    );
    assert_eq!(
        ls.fabric.route_ports(ls.leaves[0], ls.hosts[1]).unwrap(),
        &[2]
    );
}
