//! Traffic classes, switch buffers and PFC in the simulator.

use super::*;
use crate::backend::Backend;
use crate::backend::Burst;
use crate::time::Duration;
use crate::wire::Ecn;

const R100: u64 = 100_000_000_000;
const R10: u64 = 10_000_000_000;

fn mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, i])
}

fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// An IPv4 frame of `len` bytes (at least 38) from host `src` to host
/// `dst`, with this DSCP and ECN, carrying `tag` in bytes 34..38.
fn ip(dst: u8, src: u8, len: usize, dscp: u8, ecn: Ecn, tag: u32) -> VecBuf {
    let mut f = VecBuf::with_capacity(FRAME_CAPACITY);
    let b = f.append(len).unwrap();
    b[0..6].copy_from_slice(&mac(dst).0);
    b[6..12].copy_from_slice(&mac(src).0);
    b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    b[14] = 0x45;
    b[15] = dscp << 2 | ecn.bits();
    b[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    b[22] = 64;
    b[23] = 17;
    b[34..38].copy_from_slice(&tag.to_be_bytes());
    f
}

fn tag_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[34..38].try_into().unwrap())
}

fn dscp_of(f: &[u8]) -> u8 {
    f[15] >> 2
}

fn buf(bytes: &[u8]) -> VecBuf {
    let mut v = VecBuf::with_capacity(FRAME_CAPACITY);
    v.append(bytes.len()).unwrap().copy_from_slice(bytes);
    v
}

fn send(fabric: &mut Fabric, h: HostId, frames: Vec<VecBuf>) {
    let mut port = fabric.port(h);
    for chunk in frames.chunks(1) {
        let mut burst = Burst::new();
        burst.push(chunk[0].clone());
        assert_eq!(port.tx_burst(&mut burst), 1);
    }
}

/// Runs until idle; every frame that reached `h`: (time, bytes).
fn drain(fabric: &mut Fabric, h: HostId) -> Arrivals {
    let mut out = Vec::new();
    while let Some(at) = fabric.next_event() {
        fabric.advance_to(at);
        collect(fabric, h, &mut out);
    }
    out
}

fn collect(fabric: &mut Fabric, h: HostId, out: &mut Arrivals) {
    let now = fabric.now().as_nanos();
    let mut port = fabric.port(h);
    let mut burst = Burst::new();
    while port.rx_burst(&mut burst) > 0 {
        out.extend(burst.drain(..).map(|f| (now, f.data().to_vec())));
    }
}

/// A switch with `n` hosts (host i has MAC i + 1), every link `link`
/// but the last host's, which is `last`.
fn star(
    cfg: SwitchConfig,
    n: usize,
    link: LinkConfig,
    last: LinkConfig,
) -> (Fabric, SwitchId, Vec<HostId>, Vec<Link>) {
    let mut fabric = Fabric::new(7);
    let sw = fabric.add_switch_with(cfg).unwrap();
    let mut hosts = Vec::new();
    let mut links = Vec::new();
    for i in 0..n {
        let h = fabric.add_host(mac(i as u8 + 1));
        let cfg = if i + 1 == n { last } else { link };
        links.push(fabric.connect_to_switch(h, sw, cfg).unwrap());
        hosts.push(h);
    }
    (fabric, sw, hosts, links)
}

fn lossless_on(p: u8) -> PfcConfig {
    PfcConfig::new(1 << p, 20_000, 10_000, 40_000).unwrap()
}

#[test]
fn a_pfc_frame_has_the_802_1qbb_layout() {
    let mut f = PfcFrame::single(3, 0xffff);
    f.set(6, 0x0102);
    let b = f.emit(MacAddr([2, 0xff, 0, 1, 0, 2]));
    let mut want = vec![
        0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, // destination
        0x02, 0xff, 0x00, 0x01, 0x00, 0x02, // source
        0x88, 0x08, // MAC control
        0x01, 0x01, // PFC opcode
        0x00, 0x48, // class-enable vector: priorities 3 and 6
        0, 0, 0, 0, 0, 0, // time[0..3]
        0xff, 0xff, // time[3]
        0, 0, 0, 0, // time[4], time[5]
        0x01, 0x02, // time[6]
        0, 0, // time[7]
    ];
    want.resize(60, 0);
    assert_eq!(b.len(), 60);
    assert_eq!(&b[..], &want[..]);
    assert!(is_mac_control(&b));
    assert_eq!(PfcFrame::parse(&b), Some(f));
    assert_eq!(
        switch_port_mac(SwitchId(1), 2),
        MacAddr([2, 0xff, 0, 1, 0, 2])
    );

    // Times of priorities not enabled are sent as zero.
    let mut g = PfcFrame::single(0, 0);
    g.quanta[5] = 99;
    assert_eq!(
        &g.emit(mac(1))[16..30],
        &[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );

    // Anything else is not PFC.
    let mut pause = b;
    pause[14..16].copy_from_slice(&[0x00, 0x01]); // 802.3x PAUSE
    assert!(is_mac_control(&pause) && PfcFrame::parse(&pause).is_none());
    assert!(PfcFrame::parse(&b[..33]).is_none());
    assert!(PfcFrame::parse(ip(2, 1, 60, 26, Ecn::Ect0, 0).data()).is_none());
    assert!(!is_mac_control(&b[..13]));

    // Merging keeps the latest time of each priority.
    let mut m = PfcFrame::single(3, 100);
    m.merge(&PfcFrame::single(3, 0));
    m.merge(&PfcFrame::single(1, 7));
    assert_eq!((m.enable, m.quanta[3], m.quanta[1]), (0b1010, 0, 7));
    assert_eq!(pause_duration(0xffff, R100).as_nanos(), 335_540);
    assert_eq!(pause_duration(1000, R100).as_nanos(), 5_120);
}

#[test]
fn frames_are_classified_by_pcp_then_dscp() {
    let d = &DEFAULT_DSCP_TO_PRIORITY;
    assert_eq!(frame_priority(ip(2, 1, 60, 26, Ecn::Ect0, 0).data(), d), 3);
    assert_eq!(
        frame_priority(ip(2, 1, 60, 48, Ecn::NotEct, 0).data(), d),
        6
    );
    assert_eq!(frame_priority(ip(2, 1, 60, 0, Ecn::NotEct, 0).data(), d), 0);
    assert_eq!(
        frame_priority(ip(2, 1, 60, 63, Ecn::NotEct, 0).data(), d),
        7
    );
    // IPv6: traffic class 106 straddles the first two bytes.
    let mut v6 = [0u8; 60];
    v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    v6[14] = 0x60 | (106 >> 4);
    v6[15] = (106 & 0xf) << 4;
    assert_eq!(frame_priority(&v6, d), 3);
    // A tag: its PCP, whatever the DSCP inside.
    let mut tagged = [0u8; 60];
    tagged[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
    tagged[14] = 5 << 5;
    tagged[16..18].copy_from_slice(&0x0800u16.to_be_bytes());
    tagged[18] = 0x45;
    tagged[19] = 48 << 2;
    assert_eq!(frame_priority(&tagged, d), 5);
    // Non-IP, a wrong version, short frames: 0.
    let mut arp = [0u8; 60];
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(frame_priority(&arp, d), 0);
    let mut v5 = ip(2, 1, 60, 26, Ecn::Ect0, 0).data().to_vec();
    v5[14] = 0x55;
    assert_eq!(frame_priority(&v5, d), 0);
    for n in [0, 13, 14, 15] {
        assert_eq!(frame_priority(&tagged[..n], d), 0);
    }
    // Another table.
    let mut table = [0u8; 64];
    table[26] = 5;
    assert_eq!(
        frame_priority(ip(2, 1, 60, 26, Ecn::Ect0, 0).data(), &table),
        5
    );
}

#[test]
fn bad_switch_configs_are_refused_with_a_clear_error() {
    let e = PfcConfig::new(1 << 3, 100, 200, 0).unwrap_err();
    assert_eq!(
        e,
        SimError::PfcThresholds {
            xon: 200,
            xoff: 100
        }
    );
    assert!(e.to_string().contains("xon must be <= xoff"), "{e}");
    assert_eq!(PfcConfig::new(0, 100, 50, 0), Err(SimError::PfcNoPriority));
    let zero = PfcConfig {
        quanta: 0,
        ..lossless_on(3)
    };
    let mut fabric = Fabric::new(1);
    let bad = SwitchConfig {
        pfc: Some(zero),
        ..SwitchConfig::default()
    };
    assert_eq!(fabric.add_switch_with(bad), Err(SimError::PfcQuantaZero));
    let mut table = DEFAULT_DSCP_TO_PRIORITY;
    table[9] = 8;
    let bad = SwitchConfig {
        dscp_to_priority: table,
        ..SwitchConfig::default()
    };
    let e = fabric.add_switch_with(bad).unwrap_err();
    assert_eq!(
        e,
        SimError::DscpPriority {
            dscp: 9,
            priority: 8
        }
    );
    assert!(e.to_string().contains("DSCP 9"), "{e}");
    let sw = fabric.add_switch_with(SwitchConfig::default()).unwrap();
    assert_eq!(fabric.set_switch_config(sw, bad), Err(e));
    assert_eq!(
        fabric.set_switch_config(SwitchId(5), SwitchConfig::default()),
        Err(SimError::UnknownSwitch(SwitchId(5)))
    );
    assert_eq!(
        fabric.set_deadlock_window(Some(Duration::ZERO)),
        Err(SimError::DeadlockWindowZero)
    );
    let mut link = LinkConfig::default();
    link.ecn_class[4] = Some(RedConfig {
        kmin_bytes: 10,
        kmax_bytes: 5,
        pmax: 1.0,
        at_dequeue: false,
    });
    let e = link.check().unwrap_err();
    assert_eq!(
        e,
        SimError::ClassRedThresholds {
            priority: 4,
            kmin: 10,
            kmax: 5
        }
    );
    assert!(e.to_string().contains("priority 4"), "{e}");
    assert_eq!(fabric.switch_config(sw), &SwitchConfig::default());
}

/// Two senders at 100 Gb/s into one receiver, 400 frames of 1000 B each,
/// DSCP 26 (priority 3); every switch egress has a 30 KB drop-tail limit.
/// Frames that reached a host: (time, bytes).
type Arrivals = Vec<(u64, Vec<u8>)>;

fn incast(cfg: SwitchConfig) -> (Fabric, SwitchId, Vec<Link>, Arrivals) {
    let switch_side = LinkConfig {
        queue_bytes: Some(30_000),
        ..LinkConfig::default()
    };
    let (mut fabric, sw, hosts, links) = star(cfg, 3, LinkConfig::default(), LinkConfig::default());
    for l in &links {
        fabric.set_link_config(l.b_to_a, switch_side).unwrap();
    }
    for s in 0..2u8 {
        let frames = (0..400)
            .map(|i| ip(3, s + 1, 1000, 26, Ecn::Ect0, u32::from(s) << 16 | i))
            .collect();
        send(&mut fabric, hosts[usize::from(s)], frames);
    }
    let got = drain(&mut fabric, hosts[2]);
    (fabric, sw, links, got)
}

#[test]
fn a_lossless_priority_pauses_the_senders_instead_of_dropping() {
    let cfg = SwitchConfig {
        shared_buffer: Some(60_000),
        pfc: Some(lossless_on(3)),
        ..SwitchConfig::default()
    };
    let (fabric, sw, links, got) = incast(cfg);
    // Everything arrives, each sender's frames in order.
    assert_eq!(got.len(), 800);
    for s in 0..2u32 {
        let seq: Vec<u32> = got
            .iter()
            .map(|(_, f)| tag_of(f))
            .filter(|tag| tag >> 16 == s)
            .map(|tag| tag & 0xffff)
            .collect();
        assert_eq!(seq, (0..400).collect::<Vec<_>>());
    }
    let c = fabric.switch_counters(sw);
    assert_eq!((c.dropped_shared_buffer, c.dropped_headroom), (0, 0), "{c}");
    assert!(c.xoff_events >= 2, "{c}");
    // Past the shared buffer and the egress limit, within XOFF + headroom
    // per ingress port.
    assert!(
        c.max_buffer_bytes > 60_000 && c.max_buffer_bytes <= 2 * 60_000,
        "{c}"
    );
    assert!(fabric.link_counters(links[2].b_to_a).max_queue_bytes > 30_000);
    for l in &links {
        assert_eq!(fabric.link_counters(l.b_to_a).dropped_queue, 0);
    }
    for l in &links[..2] {
        let down = fabric.link_counters(l.b_to_a);
        // A pause, then (XON) a resume, at least.
        assert!(down.pfc_tx >= 2, "{down}");
        assert_eq!(down.pfc_rx, down.pfc_tx);
        // PFC frames are not data.
        assert_eq!(down.tx_frames, 0);
        // The sender was paused, and resumed by XON well before its pause
        // would have run out.
        let paused = fabric.paused_time(l.a_to_b, 3);
        assert!(paused > Duration::ZERO);
        assert!(paused < pause_duration(0xffff, R100), "{paused:?}");
        assert_eq!(fabric.paused_time(l.a_to_b, 0), Duration::ZERO);
        assert!(!fabric.egress_queue(l.a_to_b).is_class_paused(3));
        assert_eq!(
            fabric.link_counters(l.a_to_b).paused_ns[3],
            paused.as_nanos()
        );
    }
    // The senders' MACs consumed the PFC frames.
    for h in [HostId(0), HostId(1)] {
        assert_eq!(fabric.host_counters(h).rx_frames, 0);
        assert_eq!(fabric.inbox_len(h), 0);
    }
    // Nothing is left buffered, and no timer outlives the traffic.
    assert_eq!(fabric.switch_buffer_bytes(sw), 0);
    assert_eq!(fabric.ingress_bytes(sw, 0, 3), 0);
    assert_eq!(fabric.next_event(), None);
    let last = got.last().unwrap().0;
    assert!(
        fabric.now().as_nanos() < last + 2_000,
        "{:?} {last}",
        fabric.now()
    );
    assert!(fabric.deadlocks().is_empty());
}

#[test]
fn the_same_incast_on_a_lossy_priority_drops() {
    // The egress limit.
    let cfg = SwitchConfig {
        shared_buffer: Some(60_000),
        pfc: Some(lossless_on(4)),
        ..SwitchConfig::default()
    };
    let (fabric, sw, links, got) = incast(cfg);
    let dropped = fabric.link_counters(links[2].b_to_a).dropped_queue;
    assert!(dropped > 0);
    let c = fabric.switch_counters(sw);
    assert_eq!(got.len() as u64 + dropped + c.dropped_shared_buffer, 800);
    assert_eq!(c.xoff_events, 0);
    for l in &links {
        assert_eq!(fabric.link_counters(l.b_to_a).pfc_tx, 0);
        assert_eq!(fabric.paused_time(l.a_to_b, 3), Duration::ZERO);
    }

    // The shared buffer.
    let cfg = SwitchConfig {
        shared_buffer: Some(20_000),
        ..SwitchConfig::default()
    };
    let (fabric, sw, links, got) = incast(cfg);
    let c = *fabric.switch_counters(sw);
    assert!(c.dropped_shared_buffer > 0, "{c}");
    assert!(c.max_buffer_bytes <= 20_000, "{c}");
    assert_eq!(fabric.link_counters(links[2].b_to_a).dropped_queue, 0);
    assert_eq!(got.len() as u64 + c.dropped_shared_buffer, 800);
    let json = serde_json::to_value(c).unwrap();
    assert_eq!(json["dropped_shared_buffer"], c.dropped_shared_buffer);
}

#[test]
fn too_little_headroom_drops_lossless_frames_and_says_so() {
    let cfg = SwitchConfig {
        pfc: Some(PfcConfig::new(1 << 3, 10_000, 5_000, 2_000).unwrap()),
        ..SwitchConfig::default()
    };
    let (fabric, sw, links, got) = incast(cfg);
    let c = fabric.switch_counters(sw);
    assert!(c.dropped_headroom > 0, "{c}");
    assert_eq!(got.len() as u64 + c.dropped_headroom, 800);
    assert_eq!(fabric.link_counters(links[2].b_to_a).dropped_queue, 0);
}

#[test]
fn a_long_congestion_refreshes_the_pause_before_it_runs_out() {
    // Quanta 2000: 10.24 µs pauses, refreshed every 5.12 µs, into a 10 Gb/s
    // receiver that takes 640 µs to drain.
    let cfg = SwitchConfig {
        pfc: Some(PfcConfig {
            quanta: 2000,
            ..lossless_on(3)
        }),
        ..SwitchConfig::default()
    };
    let slow = LinkConfig {
        rate_bps: R10,
        ..LinkConfig::default()
    };
    let (mut fabric, sw, hosts, links) = star(cfg, 3, LinkConfig::default(), slow);
    for s in 0..2u8 {
        let frames = (0..400)
            .map(|i| ip(3, s + 1, 1000, 26, Ecn::Ect0, i))
            .collect();
        send(&mut fabric, hosts[usize::from(s)], frames);
    }
    let got = drain(&mut fabric, hosts[2]);
    assert_eq!(got.len(), 800);
    let c = fabric.switch_counters(sw);
    assert_eq!(c.dropped_headroom, 0, "{c}");
    for l in &links[..2] {
        let down = fabric.link_counters(l.b_to_a);
        assert!(down.pfc_tx > 20, "{down}");
        // Paused most of the time, and never let loose long.
        let paused = fabric.paused_time(l.a_to_b, 3).as_nanos();
        assert!(paused > 500_000, "{paused}");
    }
    assert_eq!(fabric.next_event(), None);
}

#[test]
fn strict_priority_lets_a_frame_overtake_queued_frames() {
    for strict in [1u8 << 6, 0] {
        let cfg = SwitchConfig {
            strict,
            ..SwitchConfig::default()
        };
        let slow = LinkConfig {
            rate_bps: R10,
            ..LinkConfig::default()
        };
        let (mut fabric, _, hosts, _) = star(cfg, 3, LinkConfig::default(), slow);
        let frames = (0..20).map(|i| ip(3, 1, 1000, 26, Ecn::Ect0, i)).collect();
        send(&mut fabric, hosts[0], frames);
        fabric.advance_to(t(5_000));
        send(
            &mut fabric,
            hosts[1],
            vec![ip(3, 2, 100, 48, Ecn::NotEct, 99)],
        );
        let got = drain(&mut fabric, hosts[2]);
        assert_eq!(got.len(), 21);
        let at = got.iter().position(|(_, f)| dscp_of(f) == 48).unwrap();
        // It reaches the switch at 5_000 + 8 + 1_000; at most the frame
        // on the wire (800 ns at 10 Gb/s) is ahead of it, then 80 ns and
        // 1 µs.
        let arrival = got[at].0;
        if strict != 0 {
            assert!(arrival <= 6_008 + 800 + 80 + 1_000, "{arrival}");
            assert!(at < 8, "{at}");
        } else {
            // Round robin: it waits for the rest of priority 3's turn.
            assert!(arrival > 6_008 + 800 + 80 + 1_000, "{arrival}");
            assert!(at <= 10, "{at}");
        }
        // Priority 3 keeps its own order.
        let seq: Vec<u32> = got
            .iter()
            .filter(|(_, f)| dscp_of(f) == 26)
            .map(|(_, f)| tag_of(f))
            .collect();
        assert_eq!(seq, (0..20).collect::<Vec<_>>());
    }
}

#[test]
fn round_robin_shares_a_link_equally_between_two_lossy_priorities() {
    let slow = LinkConfig {
        rate_bps: R10,
        ..LinkConfig::default()
    };
    let (mut fabric, _, hosts, links) =
        star(SwitchConfig::default(), 3, LinkConfig::default(), slow);
    // 450 KB each: priority 1 in 1500-byte frames, priority 2 in 500-byte
    // frames; round robin shares bytes, not frames.
    let big = (0..300)
        .map(|i| ip(3, 1, 1500, 8, Ecn::NotEct, i))
        .collect();
    let small = (0..900)
        .map(|i| ip(3, 2, 500, 16, Ecn::NotEct, i))
        .collect();
    send(&mut fabric, hosts[0], big);
    send(&mut fabric, hosts[1], small);
    let mut got = Vec::new();
    while fabric.now() < t(300_000) {
        let next = fabric.next_event().unwrap();
        fabric.advance_to(next);
        collect(&mut fabric, hosts[2], &mut got);
    }
    let bytes = |dscp: u8| -> usize {
        got.iter()
            .filter(|(_, f)| dscp_of(f) == dscp)
            .map(|(_, f)| f.len())
            .sum()
    };
    let (b1, b2) = (bytes(8), bytes(16));
    assert!(b1 + b2 > 300_000, "{b1} {b2}");
    assert!(b1.abs_diff(b2) <= 2 * DRR_QUANTUM, "{b1} {b2}");
    let q = fabric.egress_queue(links[2].b_to_a);
    assert!(q.class_frames(1) > 0 && q.class_frames(2) > 0);
    assert_eq!(q.class_bytes(1) + q.class_bytes(2), q.bytes());
    assert_eq!(q.class_frames(1) + q.class_frames(2), q.frames());
    assert_eq!(q.class_bytes(1), q.class_frames(1) * 1500);
}

/// Host to host at 100 Gb/s, 1 µs: `a` sends a PFC frame at `at` (hosts
/// never send one by themselves; a crafted one reaches the MAC all the
/// same).
fn pause_from(fabric: &mut Fabric, a: HostId, at: u64, pfc: PfcFrame) {
    fabric.advance_to(t(at));
    send(fabric, a, vec![buf(&pfc.emit(mac(1)))]);
}

#[test]
fn a_pause_without_refresh_runs_out_after_quanta_times_512_bit_times() {
    let mut fabric = Fabric::new(1);
    let a = fabric.add_host(mac(1));
    let b = fabric.add_host(mac(2));
    let link = fabric.connect(a, b, LinkConfig::default()).unwrap();
    // 60 bytes: 5 ns, then 1 µs: b pauses priority 3 from 1_005 to
    // 1_005 + 1000 x 512 / 100 Gb/s = 6_125.
    pause_from(&mut fabric, a, 0, PfcFrame::single(3, 1000));
    fabric.advance_to(t(2_000));
    assert!(fabric.egress_queue(link.b_to_a).is_class_paused(3));
    assert_eq!(fabric.egress_queue(link.b_to_a).paused_classes(), 1 << 3);
    send(
        &mut fabric,
        b,
        vec![
            ip(1, 2, 1000, 26, Ecn::Ect0, 1),
            ip(1, 2, 1000, 0, Ecn::NotEct, 2),
        ],
    );
    let got = drain(&mut fabric, a);
    // Priority 0 goes at once; priority 3 waits for the pause to end.
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0, tag_of(&got[0].1)), (3_080, 2));
    assert_eq!((got[1].0, tag_of(&got[1].1)), (6_125 + 80 + 1_000, 1));
    assert_eq!(fabric.paused_time(link.b_to_a, 3).as_nanos(), 5_120);
    let ab = fabric.link_counters(link.a_to_b);
    assert_eq!(ab.pfc_rx, 1);
    // The host consumed it: not in its inbox, not counted as received.
    assert_eq!(fabric.host_counters(b).rx_frames, 0);
    assert_eq!(fabric.inbox_len(b), 0);
}

#[test]
fn a_host_obeys_a_pause_until_quanta_zero_resumes_it() {
    let mut fabric = Fabric::new(1);
    let a = fabric.add_host(mac(1));
    let b = fabric.add_host(mac(2));
    let link = fabric.connect(a, b, LinkConfig::default()).unwrap();
    pause_from(&mut fabric, a, 0, PfcFrame::single(3, 0xffff));
    fabric.advance_to(t(2_000));
    send(&mut fabric, b, vec![ip(1, 2, 1000, 26, Ecn::Ect0, 1)]);
    fabric.advance_to(t(2_900));
    // While paused, the queue holds it and the link is idle.
    let q = fabric.egress_queue(link.b_to_a);
    assert_eq!((q.class_frames(3), q.is_busy()), (1, false));
    assert_eq!(fabric.paused_time(link.b_to_a, 3).as_nanos(), 2_900 - 1_005);
    // A resume at 3_000 arrives at 4_005.
    pause_from(&mut fabric, a, 3_000, PfcFrame::single(3, 0));
    let got = drain(&mut fabric, a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 4_005 + 80 + 1_000);
    assert_eq!(fabric.paused_time(link.b_to_a, 3).as_nanos(), 3_000);
    // The first pause's timer is gone: the run ended with the frame.
    assert_eq!(fabric.now(), t(5_085));
    assert_eq!(fabric.next_event(), None);

    // A later PFC frame replaces the time left.
    pause_from(&mut fabric, a, 10_000, PfcFrame::single(3, 0xffff));
    pause_from(&mut fabric, a, 12_000, PfcFrame::single(3, 100));
    send(&mut fabric, b, vec![ip(1, 2, 1000, 26, Ecn::Ect0, 2)]);
    let got = drain(&mut fabric, a);
    // Paused at 11_005, then until 13_005 + 512.
    assert_eq!(got[0].0, 13_005 + 512 + 80 + 1_000);
    assert_eq!(fabric.paused_time(link.b_to_a, 3).as_nanos(), 3_000 + 2_512);
}

#[test]
fn ecn_marking_looks_at_the_frames_own_priority_queue() {
    let never = RedConfig::new(1 << 30, 1 << 30, 1.0).unwrap();
    let mut cfg = LinkConfig {
        rate_bps: R10,
        ecn: Some(RedConfig::new(2_500, 2_500, 1.0).unwrap()),
        ..LinkConfig::default()
    };
    for class_cfg in [None, Some(never)] {
        cfg.ecn_class[3] = class_cfg;
        let mut fabric = Fabric::new(1);
        let a = fabric.add_host(mac(1));
        let b = fabric.add_host(mac(2));
        let link = fabric.connect(a, b, cfg).unwrap();
        // Six priority-0 frames: the 4th, 5th and 6th find more than 2.5 KB
        // of their priority waiting. Three priority-3 frames find at most
        // 2 KB of theirs, whatever waits in priority 0.
        let mut frames: Vec<VecBuf> = (0..6).map(|i| ip(2, 1, 1000, 0, Ecn::Ect0, i)).collect();
        frames.extend((0..3).map(|i| ip(2, 1, 1000, 26, Ecn::Ect0, 10 + i)));
        send(&mut fabric, a, frames);
        let got = drain(&mut fabric, b);
        let ce: Vec<u32> = got
            .iter()
            .filter(|(_, f)| f[15] & 3 == 3)
            .map(|(_, f)| tag_of(f))
            .collect();
        assert_eq!(ce, vec![3, 4, 5]);
        assert_eq!(fabric.link_counters(link.a_to_b).ecn_marked, 3);
    }
    // A per-priority curve that marks what the shared one would not.
    cfg.ecn_class[3] = Some(RedConfig::new(0, 0, 1.0).unwrap());
    let mut fabric = Fabric::new(1);
    let a = fabric.add_host(mac(1));
    let b = fabric.add_host(mac(2));
    fabric.connect(a, b, cfg).unwrap();
    let frames = (0..3).map(|i| ip(2, 1, 1000, 26, Ecn::Ect0, i)).collect();
    send(&mut fabric, a, frames);
    let ce = drain(&mut fabric, b)
        .iter()
        .filter(|(_, f)| f[15] & 3 == 3)
        .count();
    assert_eq!(ce, 2);
}

#[test]
fn pfc_runs_are_deterministic() {
    let cfg = SwitchConfig {
        shared_buffer: Some(60_000),
        pfc: Some(lossless_on(3)),
        ..SwitchConfig::default()
    };
    let (f1, _, l1, g1) = incast(cfg);
    let (f2, _, l2, g2) = incast(cfg);
    assert_eq!(g1, g2);
    for (a, b) in l1.iter().zip(&l2) {
        assert_eq!(f1.link_counters(a.a_to_b), f2.link_counters(b.a_to_b));
        assert_eq!(f1.link_counters(a.b_to_a), f2.link_counters(b.b_to_a));
    }
}

#[test]
fn a_deadlock_report_reads_as_a_cycle_and_serialises() {
    let hop = |s: usize, port: usize| DeadlockHop {
        switch: SwitchId(s),
        port,
        priority: 3,
    };
    let r = DeadlockReport {
        at: t(3_214_000),
        cycle: vec![hop(0, 2), hop(1, 1), hop(2, 1)],
    };
    assert_eq!(
        r.to_string(),
        "PFC deadlock at 3.214 ms: switch 0 port 2 prio 3 -> switch 1 port 1 prio 3 -> \
         switch 2 port 1 prio 3 -> switch 0 port 2 prio 3"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["at_ns"], 3_214_000);
    assert_eq!(json["cycle"][1]["switch"], 1);
    assert_eq!(json["cycle"][1]["port"], 1);
    assert_eq!(json["cycle"][1]["priority"], 3);
}

/// Three switches in a ring, one host on each (port 0), ring links on
/// ports 1 and 2 (`cw[i]`: the port of switch i towards the next one
/// clockwise, by `ring[i]`'s `a_to_b`). Each host sends
/// `frames` frames of 1000 B, priority 3, to the host two switches
/// clockwise, routed the long way round (static routes), so each ring
/// link carries two flows and each switch's ingress from the ring holds a
/// flow that leaves again by the next ring link.
struct Ring {
    fabric: Fabric,
    switches: Vec<SwitchId>,
    hosts: Vec<HostId>,
    ring: Vec<Link>,
    cw: Vec<usize>,
}

impl Ring {
    fn new(cfg: SwitchConfig) -> Ring {
        let mut fabric = Fabric::new(3);
        let switches: Vec<SwitchId> = (0..3)
            .map(|_| fabric.add_switch_with(cfg).unwrap())
            .collect();
        let mut hosts = Vec::new();
        for (i, &s) in switches.iter().enumerate() {
            let h = fabric.add_host(mac(i as u8 + 1));
            fabric
                .connect_to_switch(h, s, LinkConfig::default())
                .unwrap();
            hosts.push(h);
        }
        let ring: Vec<Link> = (0..3)
            .map(|i| {
                let (a, b) = (switches[i], switches[(i + 1) % 3]);
                fabric
                    .connect_switches(a, b, LinkConfig::default())
                    .unwrap()
            })
            .collect();
        let cw: Vec<usize> = ring
            .iter()
            .map(|l| match fabric.channel_ends(l.a_to_b).0 {
                Endpoint::Switch { port, .. } => port,
                Endpoint::Host(_) => unreachable!(),
            })
            .collect();
        for i in 0..3 {
            // The host two switches on is one hop the short way: go round.
            let dst = hosts[(i + 2) % 3];
            fabric.set_route(switches[i], dst, &[cw[i]]).unwrap();
        }
        Ring {
            fabric,
            switches,
            hosts,
            ring,
            cw,
        }
    }

    fn send(&mut self, frames: u32) {
        for i in 0..3 {
            let dst = (i + 2) % 3 + 1;
            let batch = (0..frames)
                .map(|n| ip(dst as u8, i as u8 + 1, 1000, 26, Ecn::Ect0, n))
                .collect();
            send(&mut self.fabric, self.hosts[i], batch);
        }
    }

    fn delivered(&self) -> u64 {
        self.hosts
            .iter()
            .map(|&h| self.fabric.host_counters(h).rx_frames)
            .sum()
    }
}

#[test]
fn ring_ports_and_routes_go_the_long_way_round() {
    let mut r = Ring::new(SwitchConfig::default());
    let f = ip(3, 1, 1000, 26, Ecn::Ect0, 0);
    let path = r.fabric.path(r.hosts[0], f.data()).unwrap();
    let ring = &r.ring;
    assert_eq!(path[1..3], [ring[0].a_to_b, ring[1].a_to_b]);
    for (i, l) in ring.iter().enumerate() {
        let (from, to) = r.fabric.channel_ends(l.a_to_b);
        assert_eq!(
            from,
            Endpoint::Switch {
                switch: r.switches[i],
                port: r.cw[i]
            }
        );
        assert!(matches!(to, Endpoint::Switch { switch, .. } if switch == r.switches[(i + 1) % 3]));
    }
}

#[test]
fn a_cyclic_buffer_dependency_deadlocks_the_ring_and_is_reported() {
    let cfg = SwitchConfig {
        pfc: Some(PfcConfig::new(1 << 3, 20_000, 18_000, 40_000).unwrap()),
        ..SwitchConfig::default()
    };
    let mut r = Ring::new(cfg);
    r.send(2_000);
    r.fabric.advance_to(t(5_000_000));
    let reports = r.fabric.deadlocks().to_vec();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let d = &reports[0];
    let hops: Vec<(SwitchId, usize, u8)> = d
        .cycle
        .iter()
        .map(|h| (h.switch, h.port, h.priority))
        .collect();
    let s = &r.switches;
    let cw = &r.cw;
    assert_eq!(
        hops,
        vec![(s[0], cw[0], 3), (s[1], cw[1], 3), (s[2], cw[2], 3)]
    );
    // The queues stall within microseconds; found after the 1 ms window,
    // at the next refresh (every half of 335.5 µs).
    assert!(d.at > t(1_000_000) && d.at < t(1_200_000), "{d}");
    assert!(d.to_string().starts_with("PFC deadlock at "), "{d}");
    // Stuck for good: nothing moves, nothing is dropped, frames stay
    // behind.
    let delivered = r.delivered();
    assert!(delivered < 6_000);
    r.fabric.advance_to(t(20_000_000));
    assert_eq!(r.delivered(), delivered);
    assert_eq!(r.fabric.deadlocks().len(), 1);
    for &sw in s {
        let c = r.fabric.switch_counters(sw);
        assert_eq!(c.dropped_headroom, 0, "{c}");
        assert!(r.fabric.switch_buffer_bytes(sw) > 0);
    }
    for l in &r.ring {
        assert!(r.fabric.egress_queue(l.a_to_b).is_class_paused(3));
        assert!(r.fabric.egress_queue(l.a_to_b).class_frames(3) > 0);
    }

    // A failed link breaks the cycle: the frames its queue held are
    // dropped and leave their switch's buffer, the pauses lift, the rest
    // drains, and the fabric goes idle.
    r.fabric.set_link_up(r.ring[0], false).unwrap();
    r.fabric.run_until_idle();
    let lost = r.fabric.link_counters(r.ring[0].a_to_b).dropped_down;
    let no_route: u64 = s
        .iter()
        .map(|&sw| r.fabric.switch_counters(sw).dropped_no_route)
        .sum();
    assert!(lost > 0);
    assert_eq!(r.delivered() + lost + no_route, 6_000);
    for &sw in s {
        assert_eq!(r.fabric.switch_buffer_bytes(sw), 0);
    }
    assert_eq!(r.fabric.deadlocks().len(), 1);
}

#[test]
fn the_detection_window_can_be_changed_or_turned_off() {
    let cfg = SwitchConfig {
        pfc: Some(PfcConfig::new(1 << 3, 20_000, 18_000, 40_000).unwrap()),
        ..SwitchConfig::default()
    };
    let mut r = Ring::new(cfg);
    r.fabric.set_deadlock_window(None).unwrap();
    r.send(2_000);
    r.fabric.advance_to(t(10_000_000));
    assert!(r.fabric.deadlocks().is_empty());
    assert!(r.delivered() < 6_000);

    let mut r = Ring::new(cfg);
    r.fabric
        .set_deadlock_window(Some(Duration::from_millis(3)))
        .unwrap();
    r.send(2_000);
    r.fabric.advance_to(t(10_000_000));
    let at = r.fabric.deadlocks()[0].at;
    assert!(at > t(3_000_000) && at < t(3_200_000), "{at:?}");
}

#[test]
fn the_same_ring_without_pfc_or_with_room_for_everything_does_not_deadlock() {
    // Lossless with thresholds above all the traffic: no pause at all.
    let roomy = SwitchConfig {
        pfc: Some(PfcConfig::new(1 << 3, 10_000_000, 9_000_000, 40_000).unwrap()),
        ..SwitchConfig::default()
    };
    // Lossy: a shared buffer drops instead of pausing.
    let lossy = SwitchConfig {
        shared_buffer: Some(60_000),
        ..SwitchConfig::default()
    };
    for (cfg, drops) in [(roomy, false), (lossy, true)] {
        let mut r = Ring::new(cfg);
        r.send(2_000);
        // It drains, and no timer keeps the calendar busy.
        r.fabric.run_until_idle();
        assert!(r.fabric.deadlocks().is_empty());
        let dropped: u64 = r
            .switches
            .iter()
            .map(|&s| r.fabric.switch_counters(s).dropped_shared_buffer)
            .sum();
        assert_eq!(r.delivered() + dropped, 6_000);
        assert_eq!(dropped > 0, drops);
        for &s in &r.switches {
            assert_eq!(r.fabric.switch_buffer_bytes(s), 0);
        }
    }
}

/// Lossless data fills the shared buffer of the `incast` switch while the
/// receiver sends 200 frames of priority 6 (DSCP 48, as CNPs) back to
/// host 0: how many of those arrive, and the switch's counters.
fn return_traffic(reserved6: usize) -> (usize, SwitchCounters) {
    let cfg = SwitchConfig {
        shared_buffer: Some(60_000),
        reserved: [0, 0, 0, 0, 0, 0, reserved6, 0],
        pfc: Some(lossless_on(3)),
        ..SwitchConfig::default()
    };
    let (mut fabric, sw, hosts, _) = star(cfg, 3, LinkConfig::default(), LinkConfig::default());
    for s in 0..2u8 {
        let frames = (0..400)
            .map(|i| ip(3, s + 1, 1000, 26, Ecn::Ect0, i))
            .collect();
        send(&mut fabric, hosts[usize::from(s)], frames);
    }
    // Once the buffer has filled, one frame every 200 ns for 40 µs.
    fabric.advance_to(t(2_000));
    let mut back = 0;
    for i in 0..200 {
        let at = 2_000 + 200 * i;
        fabric.advance_to(t(at));
        send(
            &mut fabric,
            hosts[2],
            vec![ip(1, 3, 100, 48, Ecn::NotEct, i as u32)],
        );
        back += drain_now(&mut fabric, hosts[0]);
    }
    while let Some(at) = fabric.next_event() {
        fabric.advance_to(at);
        back += drain_now(&mut fabric, hosts[0]);
    }
    (back, *fabric.switch_counters(sw))
}

fn drain_now(fabric: &mut Fabric, h: HostId) -> usize {
    let mut got = Vec::new();
    collect(fabric, h, &mut got);
    got.len()
}

#[test]
fn a_reserve_per_port_and_priority_lets_cnps_through_a_full_buffer() {
    // No reserve: the lossless data holds the buffer past its size and
    // the lossy priority's frames are dropped.
    let (back, c) = return_traffic(0);
    assert!(c.max_buffer_bytes > 60_000, "{c}");
    assert!(c.dropped_shared_buffer > 0, "{c}");
    assert_eq!(back as u64 + c.dropped_shared_buffer, 200);
    // All of them priority 6.
    let mut by_priority = [0; 8];
    by_priority[6] = c.dropped_shared_buffer;
    assert_eq!(c.buffer_drops_by_priority, by_priority);
    // Two frames' worth reserved for (receiver's port, priority 6): all
    // of them pass, and the lossless data is no worse off.
    let (back, c) = return_traffic(200);
    assert_eq!(
        (back, c.dropped_shared_buffer, c.dropped_headroom),
        (200, 0, 0),
        "{c}"
    );
}

fn dynamic_on(p: u8, alpha_shift: u8) -> PfcConfig {
    PfcConfig {
        dynamic: Some(DynamicPfc {
            alpha_shift,
            resume_offset: 3 * 1024,
        }),
        ..PfcConfig::new(1 << p, 0, 0, 40_000).unwrap()
    }
}

/// Host 0 sends 60 lossless 1000-byte frames (priority 3) to host 2, whose
/// link runs at 10 Gb/s; when `fill`, host 1 first sends 100 lossy ones
/// (priority 0) to host 2, which wait in the switch. Returns host 0's
/// ingress bytes at the switch and the switch's bytes when the first
/// pause goes out to host 0, and the frames host 2 got.
fn first_pause(pfc: PfcConfig, fill: bool) -> (usize, usize, usize) {
    let cfg = SwitchConfig {
        shared_buffer: Some(200_000),
        pfc: Some(pfc),
        ..SwitchConfig::default()
    };
    let slow = LinkConfig {
        rate_bps: R10,
        ..LinkConfig::default()
    };
    let (mut fabric, sw, hosts, links) = star(cfg, 3, LinkConfig::default(), slow);
    if fill {
        let lossy = (0..100).map(|i| ip(3, 2, 1000, 0, Ecn::Ect0, i)).collect();
        send(&mut fabric, hosts[1], lossy);
        // Every lossy frame is in the switch; few have left at 10 Gb/s.
        fabric.advance_to(t(10_000));
    }
    let frames = (0..60)
        .map(|i| ip(3, 1, 1000, 26, Ecn::Ect0, 1 << 16 | i))
        .collect();
    send(&mut fabric, hosts[0], frames);
    let mut at_pause = None;
    let mut got = 0;
    let mut out = Vec::new();
    while let Some(at) = fabric.next_event() {
        fabric.advance_to(at);
        if at_pause.is_none() && fabric.link_counters(links[0].b_to_a).pfc_tx > 0 {
            at_pause = Some((
                fabric.ingress_bytes(sw, 0, 3),
                fabric.switch_buffer_bytes(sw),
            ));
        }
        collect(&mut fabric, hosts[2], &mut out);
        got = out.len();
    }
    let c = fabric.switch_counters(sw);
    assert_eq!((c.dropped_shared_buffer, c.dropped_headroom), (0, 0), "{c}");
    let (ingress, used) = at_pause.expect("host 0 was paused");
    (ingress, used, got)
}

#[test]
fn a_dynamic_threshold_pauses_earlier_when_the_buffer_is_fuller() {
    // α = 1/8: XOFF once host 0's bytes reach (200 KB - used) / 8.
    let pfc = dynamic_on(3, 3);
    let (empty, used_empty, got) = first_pause(pfc, false);
    assert_eq!(got, 60);
    let (full, used_full, got) = first_pause(pfc, true);
    assert_eq!(got, 160);
    // Each pause came at the first frame that reached the threshold of its
    // moment: at or above it, less than a frame above.
    for (ingress, used) in [(empty, used_empty), (full, used_full)] {
        let t = (200_000 - used) / 8;
        assert!(ingress >= t && ingress < t + 1000, "{ingress} {used} {t}");
    }
    // An empty buffer lets about 200 KB / 9 in; with ~90 KB of lossy
    // frames waiting, about half of that.
    assert!((21_000..=24_000).contains(&empty), "{empty}");
    assert!(used_full > 80_000, "{used_full}");
    assert!(full < empty * 2 / 3, "{full} vs {empty}");
    // A static XOFF pauses at the same bytes however full the buffer is.
    let fixed = PfcConfig::new(1 << 3, 20_000, 10_000, 40_000).unwrap();
    let (a, _, _) = first_pause(fixed, false);
    let (b, _, _) = first_pause(fixed, true);
    assert_eq!(a, b);
}

#[test]
fn a_lossless_incast_under_dynamic_thresholds_loses_nothing_and_resumes() {
    // The incast above: 2 x 400 frames into one port, a 60 KB buffer.
    let cfg = SwitchConfig {
        shared_buffer: Some(60_000),
        pfc: Some(dynamic_on(3, 1)),
        ..SwitchConfig::default()
    };
    let (fabric, sw, links, got) = incast(cfg);
    assert_eq!(got.len(), 800);
    let c = fabric.switch_counters(sw);
    assert_eq!((c.dropped_shared_buffer, c.dropped_headroom), (0, 0), "{c}");
    assert!(c.xoff_events >= 2, "{c}");
    for l in &links[..2] {
        let down = fabric.link_counters(l.b_to_a);
        assert!(down.pfc_tx >= 2, "{down}");
        assert!(!fabric.egress_queue(l.a_to_b).is_class_paused(3));
    }
    assert_eq!(fabric.switch_buffer_bytes(sw), 0);
    assert_eq!(fabric.next_event(), None);
}

#[test]
fn a_dynamic_threshold_is_a_shift_of_the_free_buffer() {
    let d = DynamicPfc {
        alpha_shift: 3,
        resume_offset: 0,
    };
    assert_eq!(d.threshold(80_000), 10_000);
    assert_eq!(d.threshold(7), 0);
    let all = DynamicPfc {
        alpha_shift: 0,
        ..d
    };
    assert_eq!(all.threshold(1234), 1234);
    let past = DynamicPfc {
        alpha_shift: 200,
        ..d
    };
    assert_eq!(past.threshold(usize::MAX), 0);
}
