use super::*;
use crate::backend::Backend;
use crate::backend::Burst;
use crate::backend::BURST;
use crate::time::Clock;
use crate::time::Duration;

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

/// A frame of `len` bytes (at least 18) from `src` to `dst` carrying `tag`
/// in bytes 14..18 and a pattern after it.
fn frame(dst: MacAddr, src: MacAddr, len: usize, tag: u32) -> VecBuf {
    let mut f = VecBuf::with_capacity(FRAME_CAPACITY);
    let b = f.append(len).unwrap();
    b[0..6].copy_from_slice(&dst.0);
    b[6..12].copy_from_slice(&src.0);
    b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    b[14..18].copy_from_slice(&tag.to_be_bytes());
    for (i, x) in b[18..].iter_mut().enumerate() {
        *x = (i as u8).wrapping_add(tag as u8);
    }
    f
}

fn tag(data: &[u8]) -> u32 {
    u32::from_be_bytes(data[14..18].try_into().unwrap())
}

/// Sends every frame from `h` at the fabric's `now`, a burst at a time.
fn send(fabric: &mut Fabric, h: HostId, frames: Vec<VecBuf>) {
    let mut port = fabric.port(h);
    let mut burst = Burst::new();
    for f in frames {
        burst.push(f);
        if burst.is_full() {
            assert_eq!(port.tx_burst(&mut burst), BURST);
        }
    }
    let n = burst.len();
    assert_eq!(port.tx_burst(&mut burst), n);
    assert!(burst.is_empty());
}

/// Every frame waiting at host `h`.
pub(super) fn recv(fabric: &mut Fabric, h: HostId) -> Vec<VecBuf> {
    let mut port = fabric.port(h);
    let mut out = Vec::new();
    let mut burst = Burst::new();
    while port.rx_burst(&mut burst) > 0 {
        out.extend(burst.drain(..));
    }
    out
}

/// Runs the fabric event by event until it is idle; returns every frame
/// that arrived at any of `hosts`: (host index, time, bytes).
fn drain(fabric: &mut Fabric, hosts: &[HostId]) -> Vec<(usize, u64, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(t) = fabric.next_event() {
        fabric.advance_to(t);
        for &h in hosts {
            for f in recv(fabric, h) {
                out.push((h.index(), t.as_nanos(), f.data().to_vec()));
            }
        }
    }
    out
}

/// 1 byte per nanosecond, 1 µs of delay.
fn slow() -> LinkConfig {
    LinkConfig {
        rate_bps: 8_000_000_000,
        delay: Duration::from_nanos(1_000),
        ..LinkConfig::default()
    }
}

fn pair(seed: u64, cfg: LinkConfig) -> (Fabric, HostId, HostId, Link) {
    let mut fabric = Fabric::new(seed);
    let a = fabric.add_host(mac(1));
    let b = fabric.add_host(mac(2));
    let link = fabric.connect(a, b, cfg).unwrap();
    (fabric, a, b, link)
}

fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

#[test]
fn serialization_time_rounds_up_and_zero_rate_is_instant() {
    assert_eq!(serialization_time(64, 100_000_000_000).as_nanos(), 6);
    assert_eq!(serialization_time(1000, 8_000_000_000).as_nanos(), 1000);
    assert_eq!(serialization_time(1500, 0), Duration::ZERO);
    assert_eq!(serialization_time(0, 1), Duration::ZERO);
    assert_eq!(
        serialization_time(1500, 1).as_nanos(),
        12_000 * 1_000_000_000
    );
}

#[test]
fn a_frame_crosses_in_exactly_delay_plus_serialisation() {
    let (mut fabric, a, b, link) = pair(1, LinkConfig::default());
    // 1001 bytes at 100 Gb/s: 80.08 ns, rounded up to 81; then 1 µs.
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 1001, 7)]);
    assert_eq!(fabric.next_event(), Some(t(81)));
    fabric.advance_to(t(1_080));
    assert!(recv(&mut fabric, b).is_empty());
    fabric.advance_to(t(1_081));
    assert_eq!(fabric.now(), t(1_081));
    let got = recv(&mut fabric, b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data(), frame(mac(2), mac(1), 1001, 7).data());
    assert_eq!(fabric.next_event(), None);

    // Sent later, from an idle link: timed from then.
    fabric.advance_to(t(5_000));
    send(&mut fabric, b, vec![frame(mac(1), mac(2), 1001, 8)]);
    let arrivals = drain(&mut fabric, &[a]);
    assert_eq!(arrivals.len(), 1);
    assert_eq!(arrivals[0].1, 6_081);

    let ab = fabric.link_counters(link.a_to_b);
    assert_eq!(
        (ab.tx_frames, ab.tx_bytes, ab.rx_frames, ab.rx_bytes),
        (1, 1001, 1, 1001)
    );
    assert_eq!(fabric.link_counters(link.b_to_a).rx_frames, 1);
    let ha = fabric.host_counters(a);
    assert_eq!(
        (ha.tx_frames, ha.tx_bytes, ha.rx_frames, ha.rx_bytes),
        (1, 1001, 1, 1001)
    );
}

#[test]
fn the_rate_serialises_back_to_back_frames() {
    let (mut fabric, a, b, link) = pair(1, slow());
    let frames = (0..3).map(|i| frame(mac(2), mac(1), 1000, i)).collect();
    send(&mut fabric, a, frames);
    fabric.advance_to(t(500));
    let q = fabric.egress_queue(link.a_to_b);
    assert_eq!((q.bytes(), q.frames(), q.is_busy()), (3000, 3, true));
    fabric.advance_to(t(1_500));
    assert_eq!(fabric.egress_queue(link.a_to_b).bytes(), 2000);
    // Queued behind the other two: departs at 4000.
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 1000, 3)]);
    let arrivals = drain(&mut fabric, &[b]);
    let times: Vec<u64> = arrivals.iter().map(|x| x.1).collect();
    assert_eq!(times, vec![2_000, 3_000, 4_000, 5_000]);
    let tags: Vec<u32> = arrivals.iter().map(|x| tag(&x.2)).collect();
    assert_eq!(tags, vec![0, 1, 2, 3]);
    assert_eq!(fabric.link_counters(link.a_to_b).max_queue_bytes, 3000);
    assert_eq!(fabric.egress_queue(link.a_to_b).bytes(), 0);
}

#[test]
fn an_infinite_rate_and_no_delay_deliver_within_the_same_instant() {
    let cfg = LinkConfig {
        rate_bps: 0,
        delay: Duration::ZERO,
        ..LinkConfig::default()
    };
    let (mut fabric, a, b, _) = pair(1, cfg);
    fabric.advance_to(t(42));
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 100, 1)]);
    assert_eq!(fabric.next_event(), Some(t(42)));
    fabric.advance_to(t(42));
    assert_eq!(recv(&mut fabric, b).len(), 1);
}

#[test]
fn the_clock_never_goes_back() {
    let mut fabric = Fabric::new(0);
    assert_eq!(fabric.next_event(), None);
    fabric.advance_to(t(100));
    fabric.advance_to(t(50));
    assert_eq!(fabric.now(), t(100));
    fabric.advance_by(Duration::from_nanos(5));
    assert_eq!(Clock::now(&fabric), t(105));
    assert_eq!(fabric.run_until_idle(), t(105));
}

#[test]
fn loss_one_drops_every_frame_and_counts_it() {
    let cfg = LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    };
    let (mut fabric, a, b, link) = pair(3, cfg);
    send(
        &mut fabric,
        a,
        (0..100).map(|i| frame(mac(2), mac(1), 200, i)).collect(),
    );
    assert!(drain(&mut fabric, &[b]).is_empty());
    let c = fabric.link_counters(link.a_to_b);
    assert_eq!((c.tx_frames, c.dropped_loss, c.rx_frames), (100, 100, 0));
    assert_eq!(fabric.host_counters(a).tx_frames, 100);
    assert_eq!(fabric.host_counters(b).rx_frames, 0);
    assert!(c.to_string().contains("lost 100"));
}

/// Three hosts on a switch exchanging traffic over faulty links; every
/// arrival (host, time, bytes).
fn faulty_run(seed: u64, cfg: LinkConfig) -> Vec<(usize, u64, Vec<u8>)> {
    let mut fabric = Fabric::new(seed);
    let sw = fabric.add_switch();
    let hosts: Vec<HostId> = (1..=3).map(|i| fabric.add_host(mac(i))).collect();
    for &h in &hosts {
        fabric.connect_to_switch(h, sw, cfg).unwrap();
    }
    let mut out = Vec::new();
    for round in 0..20u32 {
        for (i, &h) in hosts.iter().enumerate() {
            let dst = mac(((i + 1) % 3 + 1) as u8);
            let src = mac(i as u8 + 1);
            let frames = (0..5)
                .map(|k| frame(dst, src, 64 + 100 * k, round * 100 + k as u32))
                .collect();
            send(&mut fabric, h, frames);
        }
        let next = fabric.now() + Duration::from_nanos(700);
        while let Some(e) = fabric.next_event().filter(|&e| e <= next) {
            fabric.advance_to(e);
            for &h in &hosts {
                for f in recv(&mut fabric, h) {
                    out.push((h.index(), e.as_nanos(), f.data().to_vec()));
                }
            }
        }
        fabric.advance_to(next);
    }
    out.extend(drain(&mut fabric, &hosts));
    out
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let faulty = LinkConfig {
        loss: 0.1,
        corrupt: 0.1,
        dup: 0.1,
        reorder: 0.2,
        reorder_delay: Duration::from_micros(2),
        ..LinkConfig::default()
    };
    let one = faulty_run(7, faulty);
    assert!(one.len() > 200, "{}", one.len());
    assert_eq!(one, faulty_run(7, faulty));
    assert_ne!(one, faulty_run(8, faulty));
    // Without faults the seed does not matter, and every frame arrives.
    let clean = faulty_run(1, LinkConfig::default());
    assert_eq!(clean.len(), 20 * 3 * 5);
    assert_eq!(clean, faulty_run(1, LinkConfig::default()));
    assert_eq!(clean, faulty_run(2, LinkConfig::default()));
}

#[test]
fn reordering_lets_later_frames_overtake_within_the_bound() {
    let cfg = LinkConfig {
        reorder: 0.3,
        reorder_delay: Duration::from_micros(10),
        ..LinkConfig::default()
    };
    let (mut fabric, a, b, link) = pair(11, cfg);
    send(
        &mut fabric,
        a,
        (0..200).map(|i| frame(mac(2), mac(1), 100, i)).collect(),
    );
    let arrivals = drain(&mut fabric, &[b]);
    assert_eq!(arrivals.len(), 200);
    let tags: Vec<u32> = arrivals.iter().map(|x| tag(&x.2)).collect();
    let mut sorted = tags.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..200).collect::<Vec<u32>>());
    assert_ne!(tags, sorted, "nothing was reordered");
    let reordered = fabric.link_counters(link.a_to_b).reordered;
    assert!((30..=90).contains(&reordered), "{reordered}");
    // 100 bytes take 8 ns at 100 Gb/s: frame i departs at 8 (i + 1).
    let mut late = 0;
    for (_, at, data) in &arrivals {
        let nominal = 8 * (u64::from(tag(data)) + 1) + 1_000;
        let extra = at - nominal;
        assert!(extra <= 10_000, "{extra}");
        late += u64::from(extra > 0);
    }
    assert_eq!(late, reordered);
}

#[test]
fn duplication_delivers_twice() {
    let cfg = LinkConfig {
        dup: 1.0,
        ..LinkConfig::default()
    };
    let (mut fabric, a, b, link) = pair(5, cfg);
    send(
        &mut fabric,
        a,
        (0..10).map(|i| frame(mac(2), mac(1), 80, i)).collect(),
    );
    let arrivals = drain(&mut fabric, &[b]);
    assert_eq!(arrivals.len(), 20);
    for pair in arrivals.chunks(2) {
        assert_eq!(pair[0], pair[1]);
    }
    let tags: Vec<u32> = arrivals.iter().step_by(2).map(|x| tag(&x.2)).collect();
    assert_eq!(tags, (0..10).collect::<Vec<u32>>());
    let c = fabric.link_counters(link.a_to_b);
    assert_eq!((c.tx_frames, c.duplicated, c.rx_frames), (10, 10, 20));
    assert_eq!(fabric.host_counters(b).rx_frames, 20);
}

#[test]
fn corruption_flips_exactly_one_bit_beyond_the_ethernet_header() {
    let cfg = LinkConfig {
        corrupt: 1.0,
        ..LinkConfig::default()
    };
    let (mut fabric, a, b, link) = pair(9, cfg);
    let sent: Vec<VecBuf> = (0..100)
        .map(|i| frame(mac(2), mac(1), 18 + i as usize, i))
        .collect();
    send(&mut fabric, a, sent.clone());
    // A frame that is all Ethernet header has nothing to corrupt.
    let mut short = VecBuf::with_capacity(64);
    short.append(14).unwrap().fill(0x55);
    send(&mut fabric, a, vec![short]);
    let arrivals = drain(&mut fabric, &[b]);
    assert_eq!(arrivals.len(), 101);
    let mut offsets = std::collections::BTreeSet::new();
    for (orig, (_, _, got)) in sent.iter().zip(&arrivals) {
        let diff: Vec<(usize, u8)> = orig
            .data()
            .iter()
            .zip(got)
            .enumerate()
            .filter(|(_, (x, y))| x != y)
            .map(|(i, (x, y))| (i, x ^ y))
            .collect();
        assert_eq!(diff.len(), 1, "{diff:?}");
        let (at, xor) = diff[0];
        assert!(at >= 14);
        assert_eq!(xor.count_ones(), 1);
        offsets.insert(at);
    }
    assert!(offsets.len() > 10, "offsets do not spread: {offsets:?}");
    assert_eq!(arrivals[100].2, vec![0x55; 14]);
    assert_eq!(fabric.link_counters(link.a_to_b).corrupted, 100);
}

#[test]
fn a_tiny_queue_drops_at_the_tail() {
    let cfg = LinkConfig {
        queue_bytes: Some(2500),
        ..slow()
    };
    let (mut fabric, a, b, link) = pair(1, cfg);
    // Taken (returned as sent) though only two fit.
    send(
        &mut fabric,
        a,
        (0..5).map(|i| frame(mac(2), mac(1), 1000, i)).collect(),
    );
    let c = fabric.link_counters(link.a_to_b);
    assert_eq!((c.dropped_queue, c.max_queue_bytes), (3, 2000));
    assert_eq!(fabric.host_counters(a).tx_frames, 5);
    // Once the first has left there is room for one more.
    fabric.advance_to(t(1_000));
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 1000, 5)]);
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 1000, 6)]);
    let arrivals = drain(&mut fabric, &[b]);
    let tags: Vec<u32> = arrivals.iter().map(|x| tag(&x.2)).collect();
    assert_eq!(tags, vec![0, 1, 5]);
    let c = fabric.link_counters(link.a_to_b);
    assert_eq!((c.tx_frames, c.dropped_queue, c.rx_frames), (3, 4, 3));
}

/// Hosts with MACs 1..=n, each on its own `slow()` link to one switch.
fn star(n: u8) -> (Fabric, SwitchId, Vec<HostId>) {
    let mut fabric = Fabric::new(1);
    let sw = fabric.add_switch();
    let h: Vec<HostId> = (1..=n).map(|i| fabric.add_host(mac(i))).collect();
    for &x in &h {
        fabric.connect_to_switch(x, sw, slow()).unwrap();
    }
    (fabric, sw, h)
}

#[test]
fn advancing_while_quiet_stops_at_the_first_instant_that_wakes_a_host_or_at_the_bound() {
    let (mut fabric, _, h) = star(2);
    let mut woken = Vec::new();
    fabric.take_woken(&mut woken);
    woken.clear();
    // Serialised at 1000 ns (host 1's ring has room: woken), at the switch
    // at 2000, serialised again at 3000, at host 2 at 4000 (woken).
    send(&mut fabric, h[0], vec![frame(mac(2), mac(1), 1000, 7)]);
    let far = Instant::from_nanos(10_000);
    fabric.advance_while_quiet(far);
    assert_eq!(fabric.now(), Instant::from_nanos(1_000));
    fabric.take_woken(&mut woken);
    assert_eq!(woken, vec![h[0]]);
    woken.clear();
    // The switch's instants wake nobody; the bound stops the run.
    fabric.advance_while_quiet(Instant::from_nanos(2_500));
    assert_eq!(fabric.now(), Instant::from_nanos(2_000));
    fabric.take_woken(&mut woken);
    assert!(woken.is_empty());
    fabric.advance_while_quiet(far);
    assert_eq!(fabric.now(), Instant::from_nanos(4_000));
    fabric.take_woken(&mut woken);
    assert_eq!(woken, vec![h[1]]);
    let got: Vec<u32> = recv(&mut fabric, h[1])
        .iter()
        .map(|f| tag(f.data()))
        .collect();
    assert_eq!(got, vec![7]);
    assert!(fabric.next_event().is_none());
}

#[test]
fn a_switch_forwards_by_mac_floods_broadcasts_and_drops_unknowns() {
    let (mut fabric, sw, h) = star(3);
    // Two hops of 1000 ns serialisation + 1000 ns delay each.
    send(&mut fabric, h[0], vec![frame(mac(2), mac(1), 1000, 1)]);
    send(&mut fabric, h[1], vec![frame(mac(1), mac(2), 1000, 2)]);
    send(&mut fabric, h[2], vec![frame(mac(1), mac(3), 1000, 3)]);
    let arrivals = drain(&mut fabric, &h);
    let seen: Vec<(usize, u64, u32)> = arrivals.iter().map(|x| (x.0, x.1, tag(&x.2))).collect();
    // Host 0 gets two frames at once from the switch: they serialise one
    // after the other on its port.
    assert_eq!(seen, vec![(0, 4_000, 2), (1, 4_000, 1), (0, 5_000, 3)]);

    let t0 = fabric.now();
    send(
        &mut fabric,
        h[2],
        vec![frame(MacAddr::BROADCAST, mac(3), 100, 4)],
    );
    send(&mut fabric, h[0], vec![frame(mac(9), mac(1), 100, 5)]);
    // Back to the port it came from.
    send(&mut fabric, h[0], vec![frame(mac(1), mac(1), 100, 6)]);
    let mut runt = VecBuf::with_capacity(64);
    runt.append(10).unwrap();
    send(&mut fabric, h[1], vec![runt]);
    let arrivals = drain(&mut fabric, &h);
    let seen: Vec<(usize, u32)> = arrivals.iter().map(|x| (x.0, tag(&x.2))).collect();
    assert_eq!(seen, vec![(0, 4), (1, 4)]);
    assert_eq!(arrivals[0].1 - t0.as_nanos(), 2 * (100 + 1_000));

    let c = fabric.switch_counters(sw);
    assert_eq!(
        (c.forwarded, c.flooded, c.dropped_unknown, c.dropped_runt),
        (3, 1, 2, 1)
    );
    let ports: Vec<PortInfo> = fabric.switch_ports(sw).collect();
    assert_eq!(ports.len(), 3);
    assert_eq!(ports[1].peer, Endpoint::Host(h[1]));
    assert_eq!(fabric.host_link(h[1]), Some(ports[1].ingress));
    assert_eq!(fabric.switch_port(sw, 2), Some(ports[2]));
    assert_eq!(fabric.switch_port(sw, 3), None);
    assert_eq!(
        fabric.channel_ends(ports[2].egress),
        (
            Endpoint::Switch {
                switch: sw,
                port: 2
            },
            Endpoint::Host(h[2])
        )
    );
    // The port towards host 0 queued two frames at once.
    assert_eq!(fabric.link_counters(ports[0].egress).max_queue_bytes, 2000);
}

#[test]
fn incast_queues_at_the_switch_egress() {
    let mut fabric = Fabric::new(1);
    let sw = fabric.add_switch();
    let h: Vec<HostId> = (1..=3).map(|i| fabric.add_host(mac(i))).collect();
    let links: Vec<Link> = h
        .iter()
        .map(|&x| fabric.connect_to_switch(x, sw, slow()).unwrap())
        .collect();
    for &x in &h[..2] {
        let src = fabric.mac(x);
        send(
            &mut fabric,
            x,
            (0..3).map(|i| frame(mac(3), src, 1000, i)).collect(),
        );
    }
    let arrivals = drain(&mut fabric, &[h[2]]);
    let times: Vec<u64> = arrivals.iter().map(|x| x.1).collect();
    assert_eq!(times, vec![4_000, 5_000, 6_000, 7_000, 8_000, 9_000]);
    let down = fabric.link_counters(links[2].b_to_a);
    assert!(down.max_queue_bytes >= 2000, "{down}");
    assert_eq!(down.tx_frames, 6);
}

#[test]
fn a_paused_queue_holds_its_frames_until_resumed() {
    let (mut fabric, a, b, link) = pair(1, slow());
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 1000, 0)]);
    // The frame on the wire finishes; the next ones wait.
    fabric.set_paused(link.a_to_b, true).unwrap();
    send(
        &mut fabric,
        a,
        (1..3).map(|i| frame(mac(2), mac(1), 1000, i)).collect(),
    );
    fabric.advance_to(t(10_000));
    assert_eq!(recv(&mut fabric, b).len(), 1);
    let q = fabric.egress_queue(link.a_to_b);
    assert_eq!((q.bytes(), q.is_paused(), q.is_busy()), (2000, true, false));
    fabric.set_paused(link.a_to_b, false).unwrap();
    let times: Vec<u64> = drain(&mut fabric, &[b]).iter().map(|x| x.1).collect();
    assert_eq!(times, vec![12_000, 13_000]);
    assert_eq!(
        fabric.set_paused(ChannelId(99), true),
        Err(SimError::UnknownChannel(ChannelId(99)))
    );
}

#[test]
fn rx_burst_fills_one_burst_at_a_time() {
    let (mut fabric, a, b, _) = pair(1, LinkConfig::default());
    send(
        &mut fabric,
        a,
        (0..40).map(|i| frame(mac(2), mac(1), 64, i)).collect(),
    );
    fabric.run_until_idle();
    assert_eq!(fabric.inbox_len(b), 40);
    let mut port = fabric.port(b);
    let mut burst = Burst::new();
    assert_eq!(port.rx_burst(&mut burst), BURST);
    assert_eq!(port.rx_burst(&mut burst), 0);
    burst.clear();
    assert_eq!(port.rx_burst(&mut burst), 8);
    assert_eq!(
        port.alloc().unwrap().append(FRAME_CAPACITY).unwrap().len(),
        FRAME_CAPACITY
    );
}

#[test]
fn invalid_configs_are_refused_with_a_clear_error() {
    assert_eq!(LinkConfig::default().check(), Ok(()));
    let edge = LinkConfig {
        loss: 1.0,
        dup: 0.0,
        ..LinkConfig::default()
    };
    assert!(edge.checked().is_ok());
    for (cfg, field) in [
        (
            LinkConfig {
                loss: f64::NAN,
                ..LinkConfig::default()
            },
            "loss",
        ),
        (
            LinkConfig {
                dup: -0.1,
                ..LinkConfig::default()
            },
            "dup",
        ),
        (
            LinkConfig {
                corrupt: 1.5,
                ..LinkConfig::default()
            },
            "corrupt",
        ),
        (
            LinkConfig {
                reorder: f64::INFINITY,
                ..LinkConfig::default()
            },
            "reorder",
        ),
    ] {
        let err = cfg.check().unwrap_err();
        assert!(
            matches!(err, SimError::InvalidProbability { field: f, .. } if f == field),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(field) && text.contains("[0, 1]"), "{text}");
        let (mut fabric, a, b) = {
            let mut f = Fabric::new(0);
            let a = f.add_host(mac(1));
            let b = f.add_host(mac(2));
            (f, a, b)
        };
        // Compared as text: NaN is not equal to itself.
        assert_eq!(fabric.connect(a, b, cfg).unwrap_err().to_string(), text);
        assert_eq!(fabric.host_link(a), None);
    }
    assert!(LinkConfig {
        loss: f64::NAN,
        ..LinkConfig::default()
    }
    .check()
    .unwrap_err()
    .to_string()
    .contains("NaN"));
    let no_delay = LinkConfig {
        reorder: 0.5,
        reorder_delay: Duration::ZERO,
        ..LinkConfig::default()
    };
    assert_eq!(no_delay.check(), Err(SimError::ReorderWithoutDelay));

    let (mut fabric, a, b, link) = pair(0, LinkConfig::default());
    let bad = LinkConfig {
        dup: 2.0,
        ..LinkConfig::default()
    };
    assert!(fabric.set_link_config(link.a_to_b, bad).is_err());
    assert_eq!(fabric.link_config(link.a_to_b), &LinkConfig::default());
    assert_eq!(fabric.host_link(b), Some(link.b_to_a));
    let _ = a;
}

#[test]
fn topology_mistakes_are_errors() {
    let mut fabric = Fabric::new(0);
    let a = fabric.add_host(mac(1));
    let b = fabric.add_host(mac(2));
    let c = fabric.add_host(mac(2));
    let lonely = fabric.add_host(mac(4));
    let sw = fabric.add_switch();
    let cfg = LinkConfig::default();
    assert_eq!(fabric.connect(a, a, cfg), Err(SimError::SelfLoop(a)));
    assert_eq!(
        fabric.connect(a, HostId(99), cfg),
        Err(SimError::UnknownHost(HostId(99)))
    );
    assert_eq!(
        fabric.connect_to_switch(a, SwitchId(5), cfg),
        Err(SimError::UnknownSwitch(SwitchId(5)))
    );
    fabric.connect_to_switch(b, sw, cfg).unwrap();
    let err = fabric.connect_to_switch(c, sw, cfg).unwrap_err();
    assert_eq!(
        err,
        SimError::DuplicateMac {
            switch: sw,
            mac: mac(2)
        }
    );
    assert_eq!(
        err.to_string(),
        "switch 0 already has a host with MAC 02:00:00:00:00:02"
    );
    assert_eq!(
        fabric.connect(a, b, cfg),
        Err(SimError::AlreadyConnected(b))
    );
    fabric.connect_to_switch(a, sw, cfg).unwrap();
    // A host with no link loses what it sends.
    send(&mut fabric, lonely, vec![frame(mac(1), mac(4), 64, 0)]);
    assert_eq!(fabric.host_counters(lonely).dropped_no_link, 1);
    assert_eq!(fabric.next_event(), None);
}

#[test]
fn a_capture_records_both_directions_at_virtual_times() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.pcap");
    let (mut fabric, a, b, _) = pair(1, slow());
    let w = pcap::create(&path, pcap::Precision::Nano).unwrap();
    fabric.capture(a, w).unwrap();
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 100, 1)]);
    fabric.advance_to(t(1_100));
    assert_eq!(recv(&mut fabric, b).len(), 1);
    send(&mut fabric, b, vec![frame(mac(1), mac(2), 200, 2)]);
    fabric.run_until_idle();
    assert_eq!(fabric.end_capture(a).unwrap(), 2);
    assert_eq!(fabric.end_capture(a).unwrap(), 0);

    let mut r = pcap::open(&path).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        got.push((rec.ts_ns, rec.data.to_vec()));
    }
    assert_eq!(
        got,
        vec![
            (0, frame(mac(2), mac(1), 100, 1).data().to_vec()),
            (
                1_100 + 200 + 1_000,
                frame(mac(1), mac(2), 200, 2).data().to_vec()
            ),
        ]
    );
}

#[test]
fn counters_print_on_one_line_and_serialise() {
    let (mut fabric, a, b, link) = pair(1, LinkConfig::default());
    send(&mut fabric, a, vec![frame(mac(2), mac(1), 64, 0)]);
    fabric.run_until_idle();
    let line = fabric.link_counters(link.a_to_b).to_string();
    assert!(!line.contains('\n'));
    assert!(
        line.starts_with("tx 1 frames 64 B, rx 1 frames 64 B"),
        "{line}"
    );
    assert!(!fabric.host_counters(b).to_string().contains('\n'));
    let json = serde_json::to_value(fabric.link_counters(link.a_to_b)).unwrap();
    assert_eq!(json["rx_bytes"], 64);
    assert_eq!(json["max_queue_bytes"], 64);
    assert_eq!(json["ecn_marked"], 0);
    assert!(
        line.ends_with("ECN-marked 0, PFC tx 0 rx 0, paused 0 ns"),
        "{line}"
    );
    let json = serde_json::to_value(fabric.host_counters(b)).unwrap();
    assert_eq!(json["rx_frames"], 1);
}

// ----- ECN marking -----

mod marking {
    use super::*;
    use crate::wire::opcode::Op;
    use crate::wire::{BthRepr, Ecn, Frame, FrameRepr, IpRepr, Ipv4Packet, Opcode, Psn, VlanTag};

    /// A RoCE v2 SEND Only from host 1 to host 2 with `payload` bytes,
    /// its PSN `psn`, over IPv4 or IPv6, tagged or not.
    fn roce(ecn: Ecn, v6: bool, vlan: bool, payload: usize, psn: u32) -> VecBuf {
        let ip = if v6 {
            IpRepr::v6(
                "fd00::1".parse().unwrap(),
                "fd00::2".parse().unwrap(),
                26,
                ecn,
                0x12345,
            )
        } else {
            IpRepr::v4(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                26,
                ecn,
            )
        };
        let bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x11, Psn::new(psn));
        let mut r = FrameRepr::roce(mac(1), mac(2), ip, 0xC000, bth);
        if vlan {
            r.eth.vlan = Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            });
        }
        let data: Vec<u8> = (0..payload).map(|i| i as u8).collect();
        let mut f = VecBuf::with_capacity(FRAME_CAPACITY);
        let buf = f.append(r.frame_len(payload)).unwrap();
        r.emit(&data, buf).unwrap();
        f
    }

    fn red(kmin: usize, kmax: usize, pmax: f64) -> RedConfig {
        RedConfig::new(kmin, kmax, pmax).unwrap()
    }

    /// Host to host at 1 byte/ns with marking on A's egress.
    fn marked_pair(
        seed: u64,
        red: RedConfig,
        queue: Option<usize>,
    ) -> (Fabric, HostId, HostId, Link) {
        pair(
            seed,
            LinkConfig {
                ecn: Some(red),
                queue_bytes: queue,
                ..slow()
            },
        )
    }

    /// Frames that arrived at `h`, in order.
    fn arrived(fabric: &mut Fabric, h: HostId) -> Vec<Vec<u8>> {
        drain(fabric, &[h]).into_iter().map(|x| x.2).collect()
    }

    fn psn_of(f: &[u8]) -> u32 {
        Frame::parse(f).unwrap().psn().value()
    }

    #[test]
    fn the_curve_is_zero_to_kmin_linear_to_pmax_at_kmax_then_one() {
        let r = red(1000, 3000, 0.2);
        assert_eq!(r.probability(0), 0.0);
        assert_eq!(r.probability(1000), 0.0);
        assert!(r.probability(1001) > 0.0);
        assert!((r.probability(2000) - 0.1).abs() < 1e-12);
        assert!((r.probability(3000) - 0.2).abs() < 1e-12);
        assert_eq!(r.probability(3001), 1.0);
        assert_eq!(r.probability(usize::MAX), 1.0);
        // Kmin = Kmax: a step.
        let step = red(500, 500, 0.7);
        assert_eq!(step.probability(500), 0.0);
        assert_eq!(step.probability(501), 1.0);
        // The HPCC simulator's scaling (reference C.4), marked at dequeue
        // as its switch does.
        let at_dequeue = |r: RedConfig| RedConfig {
            at_dequeue: true,
            ..r
        };
        assert_eq!(
            RedConfig::hpcc(100_000_000_000),
            at_dequeue(red(400_000, 1_600_000, 0.2))
        );
        assert_eq!(
            RedConfig::hpcc(25_000_000_000),
            at_dequeue(red(100_000, 400_000, 0.2))
        );
        assert_eq!(RedConfig::hpcc(0), at_dequeue(red(0, 0, 0.2)));
    }

    #[test]
    fn bad_thresholds_are_refused() {
        assert_eq!(
            RedConfig::new(2, 1, 0.1),
            Err(SimError::RedThresholds { kmin: 2, kmax: 1 })
        );
        for p in [f64::NAN, -0.1, 1.01, f64::INFINITY] {
            let e = RedConfig::new(1, 2, p).unwrap_err();
            assert!(
                matches!(
                    e,
                    SimError::InvalidProbability {
                        field: "ecn.pmax",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
        assert!(RedConfig::new(0, 0, 0.0).is_ok());
        assert!(RedConfig::new(0, 0, 1.0).is_ok());
        let bad = LinkConfig {
            ecn: Some(RedConfig {
                kmin_bytes: 10,
                kmax_bytes: 5,
                pmax: 0.5,
                at_dequeue: false,
            }),
            ..LinkConfig::default()
        };
        let text = bad.check().unwrap_err().to_string();
        assert!(text.contains("kmin 10 B > kmax 5 B"), "{text}");
        let (mut fabric, _, _, link) = pair(0, LinkConfig::default());
        assert!(fabric.set_link_config(link.a_to_b, bad).is_err());
        let mut f = Fabric::new(0);
        let (a, b) = (f.add_host(mac(1)), f.add_host(mac(2)));
        assert!(f.connect(a, b, bad).is_err());
    }

    #[test]
    fn nothing_is_marked_up_to_kmin_and_everything_above_kmax() {
        // Ten frames queued at once behind 0, L, 2L, ... bytes; Pmax 0 so
        // that only the part above Kmax marks.
        let len = roce(Ecn::Ect0, false, false, 900, 0).len();
        let (mut fabric, a, b, link) = marked_pair(1, red(3 * len, 6 * len, 0.0), None);
        send(
            &mut fabric,
            a,
            (0..10)
                .map(|i| roce(Ecn::Ect0, false, false, 900, i))
                .collect(),
        );
        let got = arrived(&mut fabric, b);
        assert_eq!(got.len(), 10);
        for f in &got {
            let fr = Frame::parse(f).unwrap();
            let want = if psn_of(f) >= 7 { Ecn::Ce } else { Ecn::Ect0 };
            assert_eq!(fr.ecn(), want, "psn {}", psn_of(f));
            assert!(fr.icrc_ok());
        }
        assert_eq!(fabric.link_counters(link.a_to_b).ecn_marked, 3);
        // Nothing drawn: the stream is where a fresh one starts.
        assert_eq!(fabric.rng.next_u64(), Rng::new(1).next_u64());
    }

    /// The PSNs of the marked frames when 200 frames are queued at once on
    /// a ramp from 0 to Pmax 0.5 over the whole queue.
    fn ramp(seed: u64) -> Vec<u32> {
        let len = roce(Ecn::Ect1, false, false, 100, 0).len();
        let (mut fabric, a, b, link) = marked_pair(seed, red(0, 200 * len, 0.5), None);
        send(
            &mut fabric,
            a,
            (0..200)
                .map(|i| roce(Ecn::Ect1, false, false, 100, i))
                .collect(),
        );
        let got = arrived(&mut fabric, b);
        let marked: Vec<u32> = got
            .iter()
            .filter(|f| frame_ecn(f) == Some(Ecn::Ce))
            .map(|f| psn_of(f))
            .collect();
        assert_eq!(
            fabric.link_counters(link.a_to_b).ecn_marked,
            marked.len() as u64
        );
        marked
    }

    #[test]
    fn marking_on_the_ramp_is_random_but_follows_the_seed() {
        let a = ramp(7);
        assert_eq!(a, ramp(7));
        assert_ne!(a, ramp(8));
        // Expected: the sum of 0.5 * i / 200 over i < 200, about 50.
        assert!((30..=70).contains(&a.len()), "{}", a.len());
        // More marks towards the tail of the queue than the head.
        let head = a.iter().filter(|&&p| p < 100).count();
        assert!(head * 2 < a.len(), "{a:?}");
        assert!(!a.contains(&0));
    }

    #[test]
    fn only_ecn_capable_ip_frames_are_marked_and_checksums_and_icrcs_hold() {
        // Kmin = Kmax = 0: everything behind the first frame is marked.
        let (mut fabric, a, b, link) = marked_pair(3, red(0, 0, 1.0), None);
        let mut arp = frame(MacAddr::BROADCAST, mac(1), 60, 0xAAAA);
        arp.data_mut()[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let frames = vec![
            roce(Ecn::NotEct, false, false, 64, 0), // first: nothing waits
            roce(Ecn::Ect0, false, false, 64, 1),
            roce(Ecn::NotEct, false, false, 64, 2),
            roce(Ecn::Ect1, false, false, 64, 3),
            roce(Ecn::Ce, false, false, 64, 4),
            roce(Ecn::Ect0, true, false, 64, 5),
            roce(Ecn::Ect1, false, true, 64, 6),
            roce(Ecn::Ect0, true, true, 64, 7),
            roce(Ecn::NotEct, true, true, 64, 8),
            arp.clone(),
        ];
        let sent: Vec<Vec<u8>> = frames.iter().map(|f| f.data().to_vec()).collect();
        send(&mut fabric, a, frames);
        let got = arrived(&mut fabric, b);
        assert_eq!(got.len(), sent.len());
        let want = [
            Ecn::NotEct,
            Ecn::Ce,
            Ecn::NotEct,
            Ecn::Ce,
            Ecn::Ce,
            Ecn::Ce,
            Ecn::Ce,
            Ecn::Ce,
            Ecn::NotEct,
        ];
        for (i, (f, s)) in got.iter().zip(&sent).enumerate().take(9) {
            let fr = Frame::parse(f).unwrap();
            assert_eq!(fr.ecn(), want[i], "frame {i}");
            assert!(fr.icrc_ok(), "frame {i}: the ICRC masks the ECN bits");
            if let IpRepr::V4(_) = fr.ip() {
                let ip = Ipv4Packet::new_checked(&f[fr.ip_offset..]).unwrap();
                assert!(ip.checksum_ok(), "frame {i}: IPv4 checksum");
            }
            // Nothing but the ECN bits (and the IPv4 checksum) changed.
            let diff: Vec<usize> = (0..f.len()).filter(|&k| f[k] != s[k]).collect();
            if want[i] == Ecn::Ce && i != 4 {
                assert!(!diff.is_empty() && diff.len() <= 3, "frame {i}: {diff:?}");
                assert!(diff.iter().all(|&k| k < fr.ip_offset + 12), "{diff:?}");
            } else {
                assert!(diff.is_empty(), "frame {i}: {diff:?}");
            }
        }
        assert_eq!(got[9], arp.data(), "a non-IP frame passes untouched");
        // ECT(0), ECT(1), CE (counts as marked), and the three ECN-capable
        // IPv6 or tagged frames.
        assert_eq!(fabric.link_counters(link.a_to_b).ecn_marked, 6);
    }

    #[test]
    fn short_and_odd_frames_are_left_alone() {
        let v4 = roce(Ecn::Ect0, false, false, 0, 0).data().to_vec();
        let v6 = roce(Ecn::Ect0, true, true, 0, 0).data().to_vec();
        assert_eq!(EcnField::find(&v4), Some(EcnField::Ipv4(14)));
        assert_eq!(EcnField::find(&v6), Some(EcnField::Ipv6(18)));
        let mut odd: Vec<Vec<u8>> = vec![Vec::new(), vec![0; 5], v4[..13].to_vec()];
        // Cut inside the IP header, or inside the tag.
        odd.push(v4[..14 + 19].to_vec());
        odd.push(v6[..16].to_vec());
        odd.push(v6[..17].to_vec());
        odd.push(v6[..18 + 39].to_vec());
        // IPv4 EtherType with a version 6 header, and the other way round.
        let mut x = v4.clone();
        x[14] = 0x65;
        odd.push(x);
        let mut y = v6.clone();
        y[18] = 0x45;
        odd.push(y);
        // A tag in a tag.
        let mut z = v6.clone();
        z[16..18].copy_from_slice(&0x8100u16.to_be_bytes());
        odd.push(z);
        for f in &odd {
            assert_eq!(EcnField::find(f), None, "{f:02x?}");
            assert_eq!(frame_ecn(f), None);
            let mut g = f.clone();
            let mut rng = Rng::new(1);
            assert!(!red(0, 0, 1.0).apply(1 << 20, &mut g, &mut rng));
            assert_eq!(&g, f);
        }
        // Through a link that marks everything: every one arrives as sent
        // (frames of different priorities in no set order).
        let (mut fabric, a, b, link) = marked_pair(1, red(0, 0, 1.0), None);
        let first = roce(Ecn::NotEct, false, false, 64, 0);
        let mut want = odd.clone();
        want.push(first.data().to_vec());
        send(&mut fabric, a, vec![first]);
        let bufs: Vec<VecBuf> = odd
            .iter()
            .map(|f| {
                let mut v = VecBuf::with_capacity(FRAME_CAPACITY);
                v.append(f.len()).unwrap().copy_from_slice(f);
                v
            })
            .collect();
        send(&mut fabric, a, bufs);
        let mut got = arrived(&mut fabric, b);
        got.sort();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(fabric.link_counters(link.a_to_b).ecn_marked, 0);
    }

    #[test]
    fn marking_at_dequeue_looks_at_the_bytes_behind_the_frame() {
        // A step above one frame: at enqueue, only the third frame sees
        // more than one in front of it; at dequeue, only the first leaves
        // more than one behind it.
        let len = roce(Ecn::Ect0, false, false, 1000, 0).len();
        for (dequeue, want) in [
            (false, [Ecn::Ect0, Ecn::Ect0, Ecn::Ce]),
            (true, [Ecn::Ce, Ecn::Ect0, Ecn::Ect0]),
        ] {
            let r = RedConfig {
                at_dequeue: dequeue,
                ..red(len, len, 1.0)
            };
            let (mut fabric, a, b, link) = marked_pair(1, r, None);
            send(
                &mut fabric,
                a,
                (0..3)
                    .map(|i| roce(Ecn::Ect0, false, false, 1000, i))
                    .collect(),
            );
            let got: Vec<Option<Ecn>> = arrived(&mut fabric, b)
                .iter()
                .map(|f| frame_ecn(f))
                .collect();
            assert_eq!(got, want.map(Some), "at dequeue: {dequeue}");
            assert_eq!(fabric.link_counters(link.a_to_b).ecn_marked, 1);
        }
    }

    #[test]
    fn drop_tail_refuses_what_does_not_fit_whether_marked_or_not() {
        // A buffer of three frames; marking from the third frame on.
        let len = roce(Ecn::Ect0, false, false, 1000, 0).len();
        let (mut fabric, a, b, link) = marked_pair(1, red(len, len, 1.0), Some(3 * len));
        send(
            &mut fabric,
            a,
            (0..5)
                .map(|i| roce(Ecn::Ect0, false, false, 1000, i))
                .collect(),
        );
        let c = *fabric.link_counters(link.a_to_b);
        assert_eq!(c.dropped_queue, 2, "{c}");
        assert_eq!(c.ecn_marked, 1, "the refused frames are not counted");
        assert_eq!(c.max_queue_bytes, 3 * len as u64, "an exact fit is taken");
        let got = arrived(&mut fabric, b);
        let seen: Vec<(u32, Option<Ecn>)> = got.iter().map(|f| (psn_of(f), frame_ecn(f))).collect();
        assert_eq!(
            seen,
            vec![
                (0, Some(Ecn::Ect0)),
                (1, Some(Ecn::Ect0)),
                (2, Some(Ecn::Ce))
            ]
        );
        // Not-ECT frames are never marked, and dropped only at the tail.
        let (mut fabric, a, _, link) = marked_pair(1, red(0, 0, 1.0), Some(3 * len));
        send(
            &mut fabric,
            a,
            (0..5)
                .map(|i| roce(Ecn::NotEct, false, false, 1000, i))
                .collect(),
        );
        let c = *fabric.link_counters(link.a_to_b);
        assert_eq!((c.dropped_queue, c.ecn_marked), (2, 0), "{c}");
    }

    #[test]
    fn each_switch_lowers_the_ttl_by_one_and_drops_a_frame_that_runs_out() {
        // A - sw0 - sw1 - B: two switches, so TTL 64 arrives as 62.
        let mut fabric = Fabric::new(7);
        let (s0, s1) = (fabric.add_switch(), fabric.add_switch());
        let a = fabric.add_host(mac(1));
        let b = fabric.add_host(mac(2));
        fabric.connect_to_switch(a, s0, slow()).unwrap();
        fabric.connect_switches(s0, s1, slow()).unwrap();
        fabric.connect_to_switch(b, s1, slow()).unwrap();
        let ttl_of = |f: &[u8]| Frame::parse(f).unwrap().ip().ttl();
        let with_ttl = |v6: bool, ttl: u8| {
            let mut f = roce(Ecn::Ect0, v6, false, 64, 0);
            let fr = Frame::parse(f.data()).unwrap();
            let at = fr.ip_offset;
            let d = f.data_mut();
            if v6 {
                d[at + 7] = ttl;
            } else {
                Ipv4Packet::new_unchecked(&mut d[at..]).set_ttl(ttl);
            }
            f
        };
        let frames = vec![
            roce(Ecn::Ect0, false, false, 64, 0),
            roce(Ecn::Ect0, true, true, 64, 0),
            with_ttl(false, 2), // 1 after sw0: dropped at sw1
            with_ttl(true, 1),  // dropped at sw0
            with_ttl(false, 3), // arrives with 1
        ];
        send(&mut fabric, a, frames);
        let got = arrived(&mut fabric, b);
        let ttls: Vec<u8> = got.iter().map(|f| ttl_of(f)).collect();
        assert_eq!(ttls, vec![62, 62, 1]);
        for f in &got {
            let fr = Frame::parse(f).unwrap();
            assert!(fr.icrc_ok(), "the ICRC masks the TTL");
            if let IpRepr::V4(_) = fr.ip() {
                let ip = Ipv4Packet::new_checked(&f[fr.ip_offset..]).unwrap();
                assert!(ip.checksum_ok());
            }
        }
        let c = (fabric.switch_counters(s0), fabric.switch_counters(s1));
        assert_eq!((c.0.dropped_ttl, c.1.dropped_ttl), (1, 1));
        assert_eq!((c.0.forwarded, c.1.forwarded), (4, 3));
    }

    #[test]
    fn a_switch_marks_on_its_congested_egress_only() {
        // Two senders into one receiver through a switch whose ports mark
        // above 2 frames waiting: the receiver's port is the one to mark.
        let mut fabric = Fabric::new(5);
        let sw = fabric.add_switch();
        let h: Vec<HostId> = (1..=3).map(|i| fabric.add_host(mac(i))).collect();
        let len = roce(Ecn::Ect0, false, false, 1000, 0).len();
        let cfg = LinkConfig {
            ecn: Some(red(2 * len, 2 * len, 1.0)),
            ..slow()
        };
        let links: Vec<Link> = h
            .iter()
            .map(|&x| fabric.connect_to_switch(x, sw, cfg).unwrap())
            .collect();
        // The hosts' own queues do not mark (a NIC is no congestion point).
        for l in &links {
            fabric.set_link_config(l.a_to_b, slow()).unwrap();
        }
        for &s in &h[..2] {
            let mut fr = Vec::new();
            for i in 0..10 {
                let mut f = roce(Ecn::Ect0, false, false, 1000, i);
                f.data_mut()[0..6].copy_from_slice(&mac(3).0);
                fr.push(f);
            }
            send(&mut fabric, s, fr);
        }
        let got = arrived(&mut fabric, h[2]);
        assert_eq!(got.len(), 20);
        let down = fabric.link_counters(links[2].b_to_a);
        assert!(down.ecn_marked > 0, "{down}");
        assert_eq!(
            got.iter().filter(|f| frame_ecn(f) == Some(Ecn::Ce)).count() as u64,
            down.ecn_marked
        );
        assert!(got.iter().all(|f| Frame::parse(f).unwrap().icrc_ok()));
        for l in &links[..2] {
            assert_eq!(fabric.link_counters(l.a_to_b).ecn_marked, 0);
            assert_eq!(fabric.link_counters(l.b_to_a).ecn_marked, 0);
        }
    }
}
