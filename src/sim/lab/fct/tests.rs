use super::*;
use crate::sim::lab::config::LabConfig;
use crate::sim::lab::workload;

/// The topology of a `[topology]` table written out.
fn topology(t: &str) -> TopologySpec {
    let text = format!("name = \"t\"\n[topology]\n{t}\n[[workload]]\nkind = \"long\"\nfrom = \"all\"\nto = \"all\"\n");
    LabConfig::parse(&text, "t.toml", Path::new("."))
        .and_then(|c| c.topology())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Two hosts on one switch, 100 Gb/s links of 1 us.
fn one_switch() -> TopologySpec {
    topology("kind = \"incast\"\nsenders = 1")
}

#[test]
fn the_hpcc_ideal_of_a_flow_on_one_switch_with_its_own_constants() {
    let topo = one_switch();
    let mut paths = IdealPaths::new(&topo, PacketShape::HPCC.payload);
    let p = paths.path(1, 0).unwrap();
    // 1000 bytes at 100 Gb/s is 80 ns per link, two links.
    assert_eq!(
        p,
        IdealPath {
            delay_ns: 2_000,
            bottleneck_bps: 100_000_000_000,
            tx_ns: 160,
        }
    );
    assert_eq!(p.base_rtt_ns(), 4_160);
    // 2500 bytes: 3 packets of 48 header bytes, 2644 bytes, 211.52 ns at
    // 100 Gb/s, rounded down.
    assert_eq!(ideal_fct_ns(2_500, &p, PacketShape::HPCC), 4_160 + 211);
    // One byte is one packet; 1000 bytes still one, 1001 two.
    assert_eq!(ideal_fct_ns(1, &p, PacketShape::HPCC), 4_160 + 3);
    assert_eq!(ideal_fct_ns(1_000, &p, PacketShape::HPCC), 4_160 + 83);
    assert_eq!(ideal_fct_ns(1_001, &p, PacketShape::HPCC), 4_160 + 87);
}

#[test]
fn the_lab_shape_uses_the_mtu_and_roce_headers_and_differs_from_the_lab_ideal() {
    let topo = one_switch();
    let shape = PacketShape::lab(topo.mtu);
    assert_eq!(
        shape,
        PacketShape {
            payload: 4096,
            header: 58
        }
    );
    let p = IdealPaths::new(&topo, shape.payload).path(1, 0).unwrap();
    // 4096 bytes at 100 Gb/s: 327.68 ns, 327 per link.
    assert_eq!(p.base_rtt_ns(), 4_000 + 654);
    // 10 KB: 3 packets, 10174 bytes, 813.92 ns.
    assert_eq!(ideal_fct_ns(10_000, &p, shape), 4_654 + 813);
    // The lab's ideal: propagation only, one RETH, rounded up: 10190
    // bytes, 815.2 ns.
    let path = topo.path(1, 0).unwrap();
    let lab = workload::ideal_fct_ns(10_000, path.bottleneck_bps, path.base_rtt_ns(), topo.mtu);
    assert_eq!(lab, 4_000 + 816);
}

#[test]
fn a_mixed_rate_path_sums_each_links_packet_time_and_takes_the_slowest_link() {
    let topo = topology(
        r#"kind = "custom"
switches = ["s0", "s1"]
hosts = [{ name = "a", switch = "s0" }, { name = "b", switch = "s1", rate_gbps = 25 }]
links = [{ a = "s0", b = "s1", rate_gbps = 400, delay_us = 0.5 }]"#,
    );
    let mut paths = IdealPaths::new(&topo, 1000);
    let p = paths.path(0, 1).unwrap();
    // 80 + 20 + 320 ns: 1000 bytes at 100, 400 and 25 Gb/s.
    assert_eq!(
        p,
        IdealPath {
            delay_ns: 2_500,
            bottleneck_bps: 25_000_000_000,
            tx_ns: 420,
        }
    );
    assert_eq!(paths.path(1, 0), Some(p));
    assert_eq!(paths.path(0, 0), None);
    assert_eq!(paths.path(0, 9), None);
    // 1 MB at 25 Gb/s with 1000 packets of 48 header bytes: 1048000
    // bytes, 335360 ns.
    assert_eq!(
        ideal_fct_ns(1_000_000, &p, PacketShape::HPCC),
        5_000 + 420 + 335_360
    );
}

fn rec(bytes: u64, slowdown: f64) -> FctRecord {
    FctRecord {
        bytes,
        fct_ns: (slowdown * 1000.0).round() as u64,
        ideal_hpcc_ns: 1000,
        ideal_lab_ns: 500,
    }
}

#[test]
fn flows_are_sorted_by_size_and_cut_into_bins_by_count() {
    // Ten flows, bins of 50%: sizes 1..=5 and 6..=10.
    let sd = [3.0, 1.0, 4.0, 1.5, 9.0, 2.0, 2.0, 7.0, 1.0, 8.0];
    let mut v: Vec<FctRecord> = sd
        .iter()
        .enumerate()
        .map(|(i, &s)| rec(i as u64 + 1, s))
        .collect();
    v.reverse();
    let b = bins(&v, 50);
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].from_pct, b[0].flows, b[0].size_bytes), (0, 5, 5));
    assert_eq!((b[1].from_pct, b[1].flows, b[1].size_bytes), (50, 5, 10));
    // [1, 1.5, 3, 4, 9]: indices floor(5 x p) = 2, 4, 4.
    assert_eq!((b[0].p50, b[0].p95, b[0].p99), (3.0, 9.0, 9.0));
    // [1, 2, 2, 7, 8].
    assert_eq!((b[1].p50, b[1].p95, b[1].p99), (2.0, 8.0, 8.0));
    // Over the lab's ideal (half the HPCC one here): twice the slowdown.
    assert_eq!((b[0].lab_p50, b[0].lab_p95), (6.0, 18.0));
}

#[test]
fn a_slowdown_below_one_counts_as_one() {
    let b = bins(&[rec(10, 0.5), rec(20, 0.9)], 100);
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].p50, b[0].p99, b[0].size_bytes), (1.0, 1.0, 20));
    assert_eq!(b[0].lab_p50, 1.8);
}

#[test]
fn bins_split_by_rounded_down_counts_and_empty_ones_are_left_out() {
    // Three flows in halves: flows [0, 1) and [1, 3).
    let b = bins(&[rec(1, 1.0), rec(2, 1.0), rec(3, 1.0)], 50);
    let counts: Vec<(u32, usize)> = b.iter().map(|x| (x.from_pct, x.flows)).collect();
    assert_eq!(counts, [(0, 1), (50, 2)]);
    // One flow in 5% bins: only the last bin, [0, 1), has it.
    let b = bins(&[rec(7, 2.0)], 5);
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].from_pct, b[0].flows, b[0].p95), (95, 1, 2.0));
    assert!(bins(&[], 5).is_empty());
    // 40 flows in 5% bins: 20 bins of 2, the largest of each its edge.
    let v: Vec<FctRecord> = (1..=40).map(|i| rec(i * 100, 1.0)).collect();
    let b = bins(&v, 5);
    assert_eq!(b.len(), 20);
    assert!(b.iter().all(|x| x.flows == 2));
    assert_eq!(b[0].size_bytes, 200);
    assert_eq!(b[19].size_bytes, 4000);
}

#[test]
fn flows_of_equal_size_are_ordered_by_slowdown() {
    // Four flows of one size in two bins: the two slowest go to the second.
    let v = [rec(5, 4.0), rec(5, 1.0), rec(5, 3.0), rec(5, 2.0)];
    let b = bins(&v, 50);
    assert_eq!((b[0].p50, b[1].p50), (2.0, 4.0));
}
