use super::*;
use crate::sim::lab::config::LabConfig;
use std::path::PathBuf;

fn lab_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/lab")
}

/// The flows of a file of `topo` and `workloads`, seed 1.
fn flows_of(top: &str, topo: &str, workloads: &str) -> Result<Vec<FlowSpec>, LabConfigError> {
    let text = format!("name = \"w\"\n{top}\n[topology]\n{topo}\n{workloads}\n");
    let c = LabConfig::parse(&text, "w.toml", &lab_dir())?;
    let r = c.resolve()?;
    let flows = generate(&c, &r.topology, 1)?;
    assert!(flows.len() as u64 <= r.flows_bound);
    check_order(&flows);
    Ok(flows)
}

fn flows(top: &str, topo: &str, workloads: &str) -> Vec<FlowSpec> {
    flows_of(top, topo, workloads).unwrap_or_else(|e| panic!("{e}"))
}

/// Sorted by (start, id), id = index, dependencies on earlier flows only.
fn check_order(flows: &[FlowSpec]) {
    for (i, f) in flows.iter().enumerate() {
        assert_eq!(f.id, i);
        assert_ne!(f.src, f.dst);
        assert!(f.after.iter().all(|&a| a < i), "{f:?}");
    }
    assert!(flows.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
}

const DUMBBELL: &str = "kind = \"dumbbell\"\npairs = 4";
const INCAST8: &str = "kind = \"incast\"\nsenders = 8";

#[test]
fn long_flows_go_from_each_to_each_until_the_end() {
    let f = flows(
        "duration_us = 500",
        DUMBBELL,
        "[[workload]]\nkind = \"long\"\nfrom = [\"L0\", \"L1\"]\nto = \"R0\"\nstart_us = 10",
    );
    assert_eq!(f.len(), 2);
    assert_eq!((f[0].src, f[0].dst, f[1].src), (0, 4, 1));
    assert!(f.iter().all(|f| f.bytes.is_none()
        && f.start_ns == 10_000
        && f.stop_ns == Some(500_000)
        && f.tag == "long"
        && f.workload == 0));
    // Overlapping lists: no flow to oneself; stop_us; a tag.
    let f = flows(
        "",
        DUMBBELL,
        "[[workload]]\nkind = \"long\"\nfrom = \"left\"\nto = [\"left\", \"R3\"]\nstop_us = 20\ntag = \"bg\"",
    );
    assert_eq!(f.len(), 4 * 5 - 4);
    assert!(f.iter().all(|f| f.stop_ns == Some(20_000) && f.tag == "bg"));
}

#[test]
fn an_incast_sends_from_every_sender_to_the_receiver_each_round() {
    let f = flows(
        "",
        INCAST8,
        "[[workload]]\nkind = \"incast\"\nsize_kb = 512",
    );
    assert_eq!(f.len(), 8);
    assert!(f
        .iter()
        .all(|f| f.dst == 0 && f.bytes == Some(512_000) && f.start_ns == 0 && f.round == 0));
    let srcs: Vec<_> = f.iter().map(|f| f.src).collect();
    assert_eq!(srcs, (1..=8).collect::<Vec<_>>());

    // Repeated: every 100 µs, 3 times.
    let f = flows(
        "",
        INCAST8,
        "[[workload]]\nkind = \"incast\"\nsize_kb = 64\nstart_us = 50\nrepeat_us = 100\ncount = 3\nsenders = [\"s0\", \"s1\"]",
    );
    assert_eq!(f.len(), 6);
    let starts: Vec<_> = f.iter().map(|f| (f.start_ns, f.round)).collect();
    assert_eq!(
        starts,
        [
            (50_000, 0),
            (50_000, 0),
            (150_000, 1),
            (150_000, 1),
            (250_000, 2),
            (250_000, 2)
        ]
    );
    // Without count: as many as start within the posting phase.
    let f = flows(
        "duration_us = 1000",
        INCAST8,
        "[[workload]]\nkind = \"incast\"\nsize_kb = 1\nrepeat_us = 300\nsenders = \"s0\"",
    );
    let starts: Vec<_> = f.iter().map(|f| f.start_ns).collect();
    assert_eq!(starts, [0, 300_000, 600_000, 900_000]);
    // A count beyond the end is cut there.
    let f = flows(
        "duration_us = 1000",
        INCAST8,
        "[[workload]]\nkind = \"incast\"\nsize_kb = 1\nrepeat_us = 500\ncount = 10\nsenders = \"s0\"",
    );
    assert_eq!(f.len(), 2);
    // Another topology has no default senders.
    let e = flows_of(
        "",
        DUMBBELL,
        "[[workload]]\nkind = \"incast\"\nsize_kb = 1\nto = \"R0\"",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("workload.0.senders: is required (the topology has no group \"senders\")"),
        "{e}"
    );
}

#[test]
fn all_to_all_sends_between_every_ordered_pair() {
    let f = flows(
        "",
        DUMBBELL,
        "[[workload]]\nkind = \"all-to-all\"\nsize_kb = 8\nhosts = [\"L0\", \"L1\", \"R0\", \"R1\", \"R2\"]\nstart_us = 5",
    );
    assert_eq!(f.len(), 5 * 4);
    let mut pairs: Vec<_> = f.iter().map(|f| (f.src, f.dst)).collect();
    pairs.sort_unstable();
    pairs.dedup();
    assert_eq!(pairs.len(), 20);
    assert!(f
        .iter()
        .all(|f| f.bytes == Some(8000) && f.start_ns == 5000));
    // Default: every host.
    assert_eq!(
        flows(
            "",
            DUMBBELL,
            "[[workload]]\nkind = \"all-to-all\"\nsize_kb = 8"
        )
        .len(),
        8 * 7
    );
}

#[test]
fn a_ring_allreduce_takes_2n_minus_2_dependent_steps() {
    for n in [2usize, 3, 4, 7] {
        let hosts: Vec<String> = (0..n).rev().map(|i| format!("\"s{i}\"")).collect();
        let f = flows(
            "",
            INCAST8,
            &format!(
                "[[workload]]\nkind = \"allreduce\"\nsize_kb = 100\nhosts = [{}]",
                hosts.join(", ")
            ),
        );
        assert_eq!(f.len(), n * 2 * (n - 1), "n = {n}");
        // The ring in the listed order: s(n-1) -> s(n-2) -> ... -> s0 -> s(n-1).
        let ring: Vec<usize> = (0..n).rev().map(|i| i + 1).collect();
        let pos = |h: usize| ring.iter().position(|&r| r == h).unwrap();
        let chunk = 100_000u64.div_ceil(n as u64);
        for fl in &f {
            assert_eq!(fl.bytes, Some(chunk));
            assert_eq!(pos(fl.dst), (pos(fl.src) + 1) % n, "successor");
            let k = fl.round as usize;
            assert!(k < 2 * (n - 1));
            if k == 0 {
                assert!(fl.after.is_empty());
            } else {
                // After the predecessor's previous step, which was sent to
                // this flow's source.
                assert_eq!(fl.after.len(), 1);
                let dep = &f[fl.after[0]];
                assert_eq!(dep.round as usize, k - 1);
                assert_eq!(dep.dst, fl.src);
                assert_eq!(pos(dep.src), (pos(fl.src) + n - 1) % n);
            }
        }
        // Every host sends each step once.
        for k in 0..2 * (n - 1) {
            let mut srcs: Vec<_> = f
                .iter()
                .filter(|x| x.round as usize == k)
                .map(|x| x.src)
                .collect();
            srcs.sort_unstable();
            assert_eq!(srcs, (1..=n).collect::<Vec<_>>());
        }
    }
    let e = flows_of(
        "",
        INCAST8,
        "[[workload]]\nkind = \"allreduce\"\nsize_kb = 1\nhosts = \"s1\"",
    );
    assert!(e.unwrap_err().to_string().contains("at least 2 hosts"));
}

#[test]
fn allreduce_repetitions_wait_for_the_one_before_and_for_repeat_us() {
    let ar = |extra: &str| {
        flows(
            "duration_us = 1000",
            INCAST8,
            &format!(
                "[[workload]]\nkind = \"allreduce\"\nsize_kb = 30\nhosts = [\"s0\", \"s1\", \"s2\"]\n\
                 start_us = 10\n{extra}"
            ),
        )
    };
    // Once by default: every flow of repetition 0.
    let f = ar("");
    assert_eq!(f.len(), 12);
    assert!(f.iter().all(|f| f.repetition == Some(0)));
    // Back to back: repetition r's first step waits for every flow of
    // the last step of r - 1 (a barrier), and starts no earlier.
    let f = ar("count = 3");
    assert_eq!(f.len(), 3 * 12);
    for fl in &f {
        let r = fl.repetition.unwrap();
        assert_eq!(fl.start_ns, 10_000);
        if fl.round == 0 && r > 0 {
            let mut deps: Vec<_> = fl
                .after
                .iter()
                .map(|&a| (f[a].repetition, f[a].round))
                .collect();
            deps.dedup();
            assert_eq!(deps, [(Some(r - 1), 3)], "{fl:?}");
            assert_eq!(fl.after.len(), 3);
        } else if fl.round > 0 {
            assert_eq!(f[fl.after[0]].repetition, Some(r));
        }
    }
    // With repeat_us: no earlier than start + r x repeat_us too; without
    // count, as many as start before the posting phase ends.
    let f = ar("repeat_us = 400");
    let mut starts: Vec<_> = f
        .iter()
        .map(|f| (f.repetition.unwrap(), f.start_ns))
        .collect();
    starts.dedup();
    assert_eq!(starts, [(0, 10_000), (1, 410_000), (2, 810_000)]);
    assert!(f
        .iter()
        .filter(|f| f.round == 0 && f.repetition > Some(0))
        .all(|f| f.after.len() == 3));
    assert_eq!(ar("repeat_us = 400\ncount = 2").len(), 2 * 12);
    // Other kinds have no repetition.
    let f = flows("", INCAST8, "[[workload]]\nkind = \"incast\"\nsize_kb = 1");
    assert!(f.iter().all(|f| f.repetition.is_none()));
    let e = flows_of(
        "",
        INCAST8,
        "[[workload]]\nkind = \"allreduce\"\nsize_kb = 1\ncount = 0",
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("workload.0.count: must be at least 1"));
    let e = flows_of(
        "",
        INCAST8,
        "[[workload]]\nkind = \"all-to-all\"\nsize_kb = 1\ncount = 2",
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("workload.0.count: is not a key of all-to-all"));
}

#[test]
fn flows_are_sorted_by_start_across_workloads_and_renumbered() {
    let f = flows(
        "",
        INCAST8,
        "[[workload]]\nkind = \"incast\"\nsize_kb = 1\nstart_us = 30\nsenders = [\"s0\", \"s1\"]\n\
         [[workload]]\nkind = \"allreduce\"\nsize_kb = 3\nhosts = [\"s2\", \"s3\", \"s4\"]\nstart_us = 10\n\
         [[workload]]\nkind = \"long\"\nfrom = \"s5\"\nto = \"recv\"\nstart_us = 20",
    );
    let order: Vec<_> = f.iter().map(|f| (f.start_ns / 1000, f.workload)).collect();
    let mut want = vec![(10, 1); 12];
    want.push((20, 2));
    want.extend([(30, 0), (30, 0)]);
    assert_eq!(order, want);
    // The all-reduce's dependencies follow the renumbering: step 1 of
    // the ring's first host waits for step 0 of its last.
    assert_eq!(f[3].after, vec![2]);
    assert_eq!((f[3].src, f[2].dst), (3, 3));
}

const WEBSEARCH: &str = "websearch.csv";

fn websearch() -> Cdf {
    Cdf::load(&lab_dir().join(WEBSEARCH)).unwrap()
}

#[test]
fn the_websearch_distribution_is_as_tabulated() {
    let c = websearch();
    let p = c.points();
    assert_eq!(p.len(), 12);
    assert_eq!(p[0], (8760.0, 0.0));
    assert_eq!(p[11], (29_200_000.0, 1.0));
    let mean = c.mean();
    assert!((mean - 1_665_830.8).abs() < 1.0, "{mean}");
    assert_eq!(c.sample(0.0), 8760);
    assert_eq!(c.sample(0.15), 8760);
    assert_eq!(c.sample(1.0), 29_200_000);
    // Halfway between 0.9 and 0.97.
    assert_eq!(c.sample(0.935), (4_866_180 + 9_733_820) / 2);
}

#[test]
fn sampling_a_cdf_keeps_its_mean() {
    let c = websearch();
    let mut rng = Rng::new(42);
    let n = 100_000;
    let sum: f64 = (0..n).map(|_| c.sample(rng.unit_f64()) as f64).sum();
    let got = sum / n as f64;
    let err = (got - c.mean()).abs() / c.mean();
    assert!(err < 0.03, "sample mean {got}, file mean {}", c.mean());
    // A point mass: 15% of flows are exactly the smallest size.
    let mut rng = Rng::new(43);
    let small = (0..n).filter(|_| c.sample(rng.unit_f64()) == 8760).count();
    assert!((small as f64 / n as f64 - 0.15).abs() < 0.01, "{small}");
}

/// Offered bytes per source over the window, as a fraction of its link.
fn offered_load(f: &[FlowSpec], hosts: usize, rate_bps: f64, window_ns: f64) -> f64 {
    let bytes: u64 = f.iter().filter_map(|f| f.bytes).sum();
    bytes as f64 * 8.0 / (rate_bps * window_ns / 1e9) / hosts as f64
}

#[test]
fn poisson_arrivals_offer_the_load_asked_for() {
    // A one-size distribution: the arrival count alone sets the load.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fixed.csv"), "100000 0\n100000 1\n").unwrap();
    std::fs::write(
        dir.path().join("web.csv"),
        std::fs::read(lab_dir().join(WEBSEARCH)).unwrap(),
    )
    .unwrap();
    let run = |file: &str, load: f64, gbps: u64| {
        let text = format!(
            "name = \"p\"\nduration_us = 1e6\n[topology]\nkind = \"incast\"\nsenders = 15\n\
             host_link = {{ rate_gbps = {gbps} }}\n[[workload]]\nkind = \"cdf\"\n\
             file = \"{file}\"\nload = {load}\nmax_flows = 1000000"
        );
        let c = LabConfig::parse(&text, "p.toml", dir.path()).unwrap();
        let r = c.resolve().unwrap_or_else(|e| panic!("{e}"));
        let f = generate(&c, &r.topology, 5).unwrap();
        check_order(&f);
        f
    };
    // 16 hosts at 10 Gb/s, 0.4 load of 100 KB flows: 5000 flows/s each,
    // 80000 over a second.
    let f = run("fixed.csv", 0.4, 10);
    let got = offered_load(&f, 16, 1e10, 1e9);
    assert!(
        (got - 0.4).abs() / 0.4 < 0.02,
        "{got} from {} flows",
        f.len()
    );
    // Destinations: never the source, spread over the others.
    let mut to = [0usize; 16];
    for fl in &f {
        assert_ne!(fl.src, fl.dst);
        to[fl.dst] += 1;
    }
    let per = f.len() / 16;
    assert!(to.iter().all(|&n| n.abs_diff(per) < per / 10), "{to:?}");
    // Each source offers its share.
    for h in 0..16 {
        let mine: Vec<_> = f.iter().filter(|x| x.src == h).cloned().collect();
        let l = offered_load(&mine, 1, 1e10, 1e9);
        assert!((l - 0.4).abs() < 0.04, "host {h}: {l}");
    }
    // The web-search sizes: heavy-tailed, so many flows (60000: 100 Gb/s
    // links for a second).
    let f = run("web.csv", 0.5, 100);
    let got = offered_load(&f, 16, 1e11, 1e9);
    assert!(
        (got - 0.5).abs() / 0.5 < 0.05,
        "{got} from {} flows",
        f.len()
    );
}

#[test]
fn cdf_flows_follow_the_seed_and_stop_at_max_flows() {
    let text = |max: u64| {
        format!(
            "[[workload]]\nkind = \"cdf\"\nfile = \"{WEBSEARCH}\"\nload = 0.8\nmax_flows = {max}\n\
             start_us = 100\nstop_us = 5000\nhosts = \"senders\"\ntag = \"web\""
        )
    };
    let c = LabConfig::parse(
        &format!("name = \"d\"\n[topology]\n{INCAST8}\n{}", text(100_000)),
        "d.toml",
        &lab_dir(),
    )
    .unwrap();
    let t = c.topology().unwrap();
    let a = generate(&c, &t, 9).unwrap();
    assert_eq!(a, generate(&c, &t, 9).unwrap());
    assert_ne!(a, generate(&c, &t, 10).unwrap());
    assert!(!a.is_empty());
    assert!(a.iter().all(|f| f.start_ns >= 100_000
        && f.start_ns < 5_000_000
        && f.src != 0
        && f.dst != 0
        && f.tag == "web"));
    // A bound keeps the earliest arrivals.
    let c2 = LabConfig::parse(
        &format!("name = \"d\"\n[topology]\n{INCAST8}\n{}", text(10)),
        "d.toml",
        &lab_dir(),
    )
    .unwrap();
    let b = generate(&c2, &t, 9).unwrap();
    assert_eq!(b.len(), 10);
    assert_eq!(b[..], a[..10]);
    // Another workload after it does not change its flows.
    let c3 = LabConfig::parse(
        &format!(
            "name = \"d\"\n[topology]\n{INCAST8}\n{}\n[[workload]]\nkind = \"incast\"\nsize_kb = 1\nstart_us = 60",
            text(100_000)
        ),
        "d.toml",
        &lab_dir(),
    )
    .unwrap();
    let mut c = generate(&c3, &t, 9).unwrap();
    assert_eq!(c.iter().filter(|f| f.workload == 1).count(), 8);
    c.retain(|f| f.workload == 0);
    assert_eq!(c.len(), a.len());
    assert!(c
        .iter()
        .zip(&a)
        .all(|(x, y)| (x.src, x.dst, x.bytes, x.start_ns) == (y.src, y.dst, y.bytes, y.start_ns)));
}

#[test]
fn cdf_files_are_checked_with_line_numbers() {
    let e = |t: &str| Cdf::parse(t).unwrap_err().to_string();
    assert_eq!(
        e("100 0\n50 1\n"),
        "line 2: size 50 is below the row before (100): sizes must not decrease"
    );
    assert!(e("# c\n100 0.5\n200 0.4\n300 1").starts_with("line 3: cumulative value 0.4"));
    assert!(e("100 0\nabc 1").starts_with("line 2: \"abc\" is not a number"));
    assert!(e("100 0 1\n").starts_with("line 1: expected two columns"));
    assert!(e("100 0\n200 0.9\n").starts_with("line 2: the last cumulative value must be 1"));
    assert!(e("100 -1\n200 1").contains("outside 0..=100"));
    assert!(e("-5 0\n200 1").contains("size -5"));
    assert!(e("nan 0\n200 1").contains("size NaN"));
    assert!(e("100 0\n200 inf").contains("outside 0..=100"));
    assert!(e("").contains("no rows"));
    assert!(e("# only comments\n\n").contains("no rows"));
    assert!(e("0 0\n0 1").contains("mean flow size"));
    // Headers, comments, commas, percent.
    let c = Cdf::parse("size,cdf\n# note\n1000, 0 # first\n\n3000,50\n5000 100\n").unwrap();
    assert_eq!(c.points(), &[(1000.0, 0.0), (3000.0, 0.5), (5000.0, 1.0)]);
    assert_eq!(c.mean(), 3000.0);
    assert_eq!(c.sample(0.25), 2000);
    // A missing file names itself.
    let e = Cdf::load(Path::new("/nonexistent/x.csv")).unwrap_err();
    assert!(e.contains("/nonexistent/x.csv"), "{e}");
    // A bad file names its line.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.csv");
    std::fs::write(&p, "# h\n1 0\n0 1\n").unwrap();
    let e = Cdf::load(&p).unwrap_err();
    assert!(
        e.ends_with("bad.csv:3: size 0 is below the row before (1): sizes must not decrease"),
        "{e}"
    );
}

#[test]
fn the_ideal_fct_serialises_payload_and_headers_at_the_bottleneck() {
    // 1 MB in 4096-byte packets: 245 packets of 58 header bytes, one RETH.
    assert_eq!(wire_bytes(1_000_000, 4096), 1_000_000 + 245 * 58 + 16);
    assert_eq!(wire_bytes(0, 4096), 58 + 16);
    // 1_014_226 bytes at 100 Gb/s: 81138.08 ns, rounded up, plus the RTT.
    assert_eq!(
        ideal_fct_ns(1_000_000, 100_000_000_000, 8000, 4096),
        81_139 + 8000
    );
    assert_eq!(ideal_fct_ns(1, 0, 8000, 4096), u64::MAX);
    assert_eq!(ideal_fct_ns(u64::MAX, 1, u64::MAX, 0), u64::MAX);
}

#[test]
fn slowdowns_are_reported_per_size_bucket() {
    assert_eq!(SizeBucket::of(10_000), SizeBucket::UpTo10K);
    assert_eq!(SizeBucket::of(10_001), SizeBucket::To100K);
    assert_eq!(SizeBucket::of(1_000_000), SizeBucket::To1M);
    assert_eq!(SizeBucket::of(10_000_000), SizeBucket::To10M);
    assert_eq!(SizeBucket::of(10_000_001), SizeBucket::Above10M);
    let mut samples = Vec::new();
    // 100 small flows with slowdowns 1..=100, one large of 2.
    for i in 1..=100 {
        samples.push(FctSample {
            bytes: 5000,
            fct_ns: 1000 * i,
            ideal_ns: 1000,
        });
    }
    samples.push(FctSample {
        bytes: 20_000_000,
        fct_ns: 4000,
        ideal_ns: 2000,
    });
    let s = slowdown_by_bucket(&samples);
    assert_eq!(s.len(), 5);
    assert_eq!(s[0].bucket.label(), "<=10KB");
    assert_eq!(
        (s[0].count, s[0].p50, s[0].p99, s[0].mean),
        (100, Some(50.0), Some(99.0), Some(50.5))
    );
    assert_eq!((s[1].count, s[1].p50, s[1].mean), (0, None, None));
    assert_eq!((s[4].count, s[4].p50, s[4].p99), (1, Some(2.0), Some(2.0)));
    assert_eq!(
        serde_json::to_value(s[4].bucket).unwrap(),
        serde_json::json!(">10MB")
    );
    assert!(slowdown_by_bucket(&[]).iter().all(|b| b.count == 0));
}

#[test]
fn the_hpcc_simulators_cdf_files_are_read_as_percent_with_their_means() {
    // The format of traffic_gen's files as they are: no comments.
    let c = Cdf::parse("0 0\n10000 50\n20000 100\n").unwrap();
    assert_eq!(c.points(), &[(0.0, 0.0), (10000.0, 0.5), (20000.0, 1.0)]);
    assert_eq!(c.mean(), 10000.0);
    // The shipped tabulations, and the means traffic_gen computes.
    let web = Cdf::load(&lab_dir().join("hpcc-format/websearch.txt")).unwrap();
    assert_eq!(web.points().len(), 12);
    assert_eq!(web.points()[1], (10_000.0, 0.15));
    assert!((web.mean() - 1_711_250.0).abs() < 1e-3, "{}", web.mean());
    let hadoop = Cdf::load(&lab_dir().join("hpcc-format/fb-hadoop.txt")).unwrap();
    assert_eq!(hadoop.points().len(), 20);
    assert_eq!(hadoop.points()[17], (1_000_000.0, 0.975));
    assert!(
        (hadoop.mean() - 120_420.75).abs() < 1e-3,
        "{}",
        hadoop.mean()
    );
    assert_eq!(hadoop.sample(0.5), 700);
}

/// The flows of `workloads` on the hpcc topology file `topo` (both files
/// written into a temporary folder with `files`).
fn flows_in(
    files: &[(&str, &str)],
    top: &str,
    topo: &str,
    workloads: &str,
) -> Result<Vec<FlowSpec>, String> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let text = format!("name = \"w\"\n{top}\n[topology]\n{topo}\n{workloads}\n");
    let c = LabConfig::parse(&text, "w.toml", dir.path()).map_err(|e| e.to_string())?;
    let r = c.resolve().map_err(|e| e.to_string())?;
    let f = generate(&c, &r.topology, 1).map_err(|e| e.to_string())?;
    assert_eq!(f.len() as u64, r.flows_bound);
    check_order(&f);
    Ok(f)
}

/// Switches 1 and 4; hosts 0, 2, 3 and 5 (positions 0..3).
const TOPO6: &str = "6 2 5\n1 4\n0 1 100Gbps 1us 0\n2 1 100Gbps 1us 0\n3 4 100Gbps 1us 0\n\
                     5 4 100Gbps 1us 0\n1 4 100Gbps 1us 0\n";
const HPCC6: &str = "kind = \"hpcc\"\nfile = \"t.txt\"";
const FLOWFILE: &str = "[[workload]]\nkind = \"flow-file\"\nfile = \"f.txt\"";

#[test]
fn a_flow_list_gives_one_sized_flow_per_line_at_its_time() {
    let list = "3\n5 0 3 100 200000 0.000010\n0 2 3 100 1000 0.000002\n3 5 3 80 7 0.000010\n";
    let files = [("t.txt", TOPO6), ("f.txt", list)];
    let f = flows_in(&files, "duration_us = 100", HPCC6, FLOWFILE).unwrap();
    let got: Vec<_> = f
        .iter()
        .map(|f| (f.src, f.dst, f.bytes, f.start_ns, f.tag.as_str()))
        .collect();
    // Node ids are the hosts n<id>: 0 -> 0, 2 -> 1, 3 -> 2, 5 -> 3;
    // sorted by start, file order at equal times.
    assert_eq!(
        got,
        vec![
            (0, 1, Some(1000), 2000, "flow-file"),
            (3, 0, Some(200_000), 10_000, "flow-file"),
            (2, 3, Some(7), 10_000, "flow-file"),
        ]
    );
    // time_zero_s and start_us move the file's times; stop_us leaves the
    // later flows out.
    let moved = format!("{FLOWFILE}\ntime_zero_s = 0.000002\nstart_us = 50\ntag = \"x\"");
    let f = flows_in(&files, "duration_us = 100", HPCC6, &moved).unwrap();
    let starts: Vec<_> = f.iter().map(|f| f.start_ns).collect();
    assert_eq!(starts, vec![50_000, 58_000, 58_000]);
    assert!(f.iter().all(|f| f.tag == "x"));
    let cut = format!("{FLOWFILE}\nstop_us = 5");
    assert_eq!(
        flows_in(&files, "duration_us = 100", HPCC6, &cut)
            .unwrap()
            .len(),
        1
    );
    // On any other topology node i is the i-th host of `all`, or of `hosts`.
    let f = flows_in(
        &files,
        "duration_us = 100",
        "kind = \"incast\"\nsenders = 5",
        FLOWFILE,
    )
    .unwrap();
    assert_eq!((f[0].src, f[0].dst, f[1].src, f[1].dst), (0, 2, 5, 0));
    let listed = format!("{FLOWFILE}\nhosts = [\"s4\", \"recv\", \"s0\", \"s1\", \"s2\", \"s3\"]");
    let f = flows_in(
        &files,
        "duration_us = 100",
        "kind = \"incast\"\nsenders = 5",
        &listed,
    )
    .unwrap();
    assert_eq!((f[0].src, f[0].dst), (5, 1));
}

#[test]
fn each_bad_line_of_a_flow_list_is_named() {
    let err = |list: &str, extra: &str| {
        let files = [("t.txt", TOPO6), ("f.txt", list)];
        let e = flows_in(
            &files,
            "duration_us = 100",
            HPCC6,
            &format!("{FLOWFILE}\n{extra}"),
        )
        .unwrap_err();
        assert!(e.starts_with("w.toml: workload.0.file: "), "{e}");
        e.split("f.txt").last().unwrap().to_string()
    };
    let cases = [
        ("", ": is empty"),
        ("2 3\n", ":1: expected 1 fields (the flow count), found 2"),
        ("-1\n", ":1: flow count \"-1\" is not a whole number"),
        ("2000000\n", ":1: flow count 2000000 is above 1000000"),
        ("2\n0 2 3 100 10 0\n", ": line 1 announces 2 flows, but 1 follow"),
        ("1\n0 2 3 100 10 0\n\n2 0 3 100 10 0\n", ":4: a flow past the 1 that line 1 announces"),
        ("1\n0 2 3 100 10\n", ":2: expected 6 fields (src, dst, priority, dst port, size in bytes, start in seconds), found 5"),
        ("1\nx 2 3 100 10 0\n", ":2: src \"x\" is not a whole number"),
        ("1\n0 0 3 100 10 0\n", ":2: src and dst are the same node, 0"),
        ("1\n0 2 8 100 10 0\n", ":2: priority 8 is above 7"),
        ("1\n0 2 3 70000 10 0\n", ":2: dst port 70000 is above 65535"),
        ("1\n0 2 3 100 0 0\n", ":2: size 0: a flow sends at least one byte"),
        ("1\n0 2 3 100 1.5 0\n", ":2: size \"1.5\" is not a whole number"),
        ("1\n0 2 3 100 10 -1\n", ":2: start time \"-1\" is not a number of seconds"),
        ("1\n0 2 3 100 10 inf\n", ":2: start time \"inf\" is not a number of seconds"),
        ("1\n0 1 3 100 10 0\n", ":2: node 1 is not a host of the topology file"),
        ("1\n0 9 3 100 10 0\n", ":2: node 9 is not a host of the topology file"),
        ("1\n0 2 3 100 10 0.0002\n", ":2: starts at 0.0002 s, 200 us into the run: not before the end of the posting phase"),
    ];
    for (list, want) in cases {
        let got = err(list, "");
        assert!(got.starts_with(want), "{list:?}: {got}");
    }
    let got = err("1\n0 2 3 100 10 1\n", "time_zero_s = 2");
    assert!(
        got.starts_with(":2: starts at 1 s, before time_zero_s (2 s)"),
        "{got}"
    );
}

/// Offered bytes over the window as a share of `capacity_bps`.
fn share(f: &[FlowSpec], capacity_bps: f64, window_ns: f64) -> f64 {
    let bytes: u64 = f.iter().filter_map(|f| f.bytes).sum();
    bytes as f64 * 8.0 / (capacity_bps * window_ns / 1e9)
}

#[test]
fn poisson_incasts_offer_their_share_of_the_hosts_capacity_and_follow_the_seed() {
    let incast = |extra: &str| {
        format!(
            "[[workload]]\nkind = \"poisson-incast\"\nfan_in = 6\nsize_kb = 100\nload = 0.05\n\
             max_flows = 1000000\n{extra}"
        )
    };
    // 16 hosts at 10 Gb/s: 8 Gb/s of incast, about 1667 incasts of 600 KB
    // a second.
    let top = "duration_us = 1e6";
    let topo = "kind = \"leaf-spine\"\nleaves = 4\nspines = 2\nhosts_per_leaf = 4\n\
                host_link = { rate_gbps = 10 }";
    let f = flows(top, topo, &incast(""));
    let got = share(&f, 16.0 * 1e10, 1e9);
    assert!(
        (got - 0.05).abs() / 0.05 < 0.03,
        "{got} from {} flows",
        f.len()
    );
    // Each incast: 6 distinct senders, none the receiver, one start.
    let rounds = f.iter().map(|f| f.round).max().unwrap() as usize + 1;
    assert_eq!(f.len(), 6 * rounds);
    let mut receivers = [0usize; 16];
    for r in 0..rounds as u32 {
        let fl: Vec<_> = f.iter().filter(|f| f.round == r).collect();
        assert_eq!(fl.len(), 6);
        let mut src: Vec<_> = fl.iter().map(|f| f.src).collect();
        src.sort();
        src.dedup();
        assert_eq!(src.len(), 6);
        assert!(fl
            .iter()
            .all(|x| x.dst == fl[0].dst && x.start_ns == fl[0].start_ns));
        assert!(fl
            .iter()
            .all(|x| x.src != x.dst && x.bytes == Some(100_000)));
        receivers[fl[0].dst] += 1;
    }
    // Receivers drawn uniformly from the hosts (about 104 each; a third
    // is over 3 standard deviations).
    let per = rounds / 16;
    assert!(
        receivers.iter().all(|&n| n.abs_diff(per) < per / 3),
        "{receivers:?}"
    );
    // Deterministic from the seed; its own stream.
    let text = format!(
        "name = \"w\"\n[topology]\n{topo}\n{}",
        incast("stop_us = 5000")
    );
    let c = LabConfig::parse(&text, "w.toml", &lab_dir()).unwrap();
    let t = c.topology().unwrap();
    let a = generate(&c, &t, 3).unwrap();
    assert_eq!(a, generate(&c, &t, 3).unwrap());
    assert_ne!(a, generate(&c, &t, 4).unwrap());
    let before = format!(
        "name = \"w\"\n[topology]\n{topo}\n{}\n[[workload]]\nkind = \"all-to-all\"\nsize_kb = 1",
        incast("stop_us = 5000").replace("1000000", "100000")
    );
    let c2 = LabConfig::parse(&before, "w.toml", &lab_dir()).unwrap();
    let mut b = generate(&c2, &t, 3).unwrap();
    b.retain(|f| f.workload == 0);
    assert_eq!(a.len(), b.len());
    assert!(a
        .iter()
        .zip(&b)
        .all(|(x, y)| (x.src, x.dst, x.start_ns, x.round) == (y.src, y.dst, y.start_ns, y.round)));
    // A fixed receiver; the bound keeps whole incasts.
    let f = flows(
        "duration_us = 100000",
        topo,
        &incast("to = \"h0-0\"\nmax_flows = 20").replace("max_flows = 1000000\n", ""),
    );
    assert_eq!(f.len(), 18);
    assert!(f.iter().all(|f| f.dst == 0 && f.src != 0));
    // Mistakes.
    let e = |extra: &str| {
        flows_of("duration_us = 1000", topo, &incast(extra))
            .unwrap_err()
            .to_string()
    };
    assert!(e("hosts = \"leaf0\"").contains("workload.0.fan_in: 6 is outside 1..=3"));
    assert!(e("to = \"leaf1\"").contains("an incast has one receiver"));
    assert!(e("count = 2").contains("workload.0.count: is not a key of poisson-incast"));
    let e = flows_of(
        "duration_us = 1000",
        topo,
        "[[workload]]\nkind = \"poisson-incast\"\nsize_kb = 1\nload = 0.1",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("workload.0.fan_in: is required"), "{e}");
}
