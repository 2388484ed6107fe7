use super::*;
use crate::sim::lab::config::LabConfig;
use crate::sim::lab::workload::generate;
use std::path::Path;

/// The flows of an all-reduce of `hosts` hosts of 300 KB, `count` times
/// back to back, on an incast topology.
fn ring(hosts: usize, count: u32) -> Vec<FlowSpec> {
    let names: Vec<String> = (0..hosts).map(|i| format!("\"s{i}\"")).collect();
    let text = format!(
        "name = \"c\"\n[topology]\nkind = \"incast\"\nsenders = 8\n\
         [[workload]]\nkind = \"long\"\nfrom = \"s7\"\nto = \"recv\"\n\
         [[workload]]\nkind = \"allreduce\"\ntag = \"ar\"\nsize_kb = 300\ncount = {count}\nhosts = [{}]",
        names.join(", ")
    );
    let c = LabConfig::parse(&text, "c.toml", Path::new(".")).unwrap();
    let r = c.resolve().unwrap();
    generate(&c, &r.topology, 1).unwrap()
}

/// An outcome for each flow: started at `start(f)`, taking `fct(f)`
/// (`None`: never completed), ideal 10 µs for collective flows.
fn outcomes(
    flows: &[FlowSpec],
    start: impl Fn(&FlowSpec) -> u64,
    fct: impl Fn(&FlowSpec) -> Option<u64>,
) -> Vec<FlowResult> {
    flows
        .iter()
        .map(|f| FlowResult {
            id: f.id,
            src: f.src,
            dst: f.dst,
            workload: f.workload,
            tag: f.tag.clone(),
            bytes: f.bytes,
            bytes_completed: 0,
            start_ns: Some(start(f)),
            fct_ns: fct(f),
            ideal_fct_ns: f.bytes.map(|_| 10_000),
            goodput_second_half_bps: None,
            retransmitted_pkts: 0,
            cnp_handled: 0,
            errors: 0,
        })
        .collect()
}

#[test]
fn a_step_ends_with_its_slowest_flow_and_the_collective_with_its_last_step() {
    // Three hosts: four steps. Every flow of step k starts at 20k µs and
    // takes 15 µs, but the one from s1, which takes 19 µs.
    let flows = ring(3, 1);
    let step_start = |f: &FlowSpec| 20_000 * u64::from(f.round);
    let res = outcomes(&flows, step_start, |f| {
        Some(if f.src == 2 { 19_000 } else { 15_000 })
    });
    let specs: Vec<&FlowSpec> = flows.iter().collect();
    let (sum, steps) = measure(&specs, &res);
    // The long flow is no collective.
    assert_eq!(sum.len(), 1);
    let s = &sum[0];
    assert_eq!((s.collective, s.tag.as_str()), (1, "ar"));
    assert_eq!((s.hosts, s.steps, s.repetitions, s.completed), (3, 4, 1, 1));
    // Idle: each step adds one flow's ideal, 10 µs.
    assert_eq!(s.ideal_ns, 40_000);
    assert_eq!(steps.len(), 4);
    for (k, r) in steps.iter().enumerate() {
        let k = k as u64;
        assert_eq!(r.step as u64, k);
        assert_eq!(r.start_ns, Some(20_000 * k));
        assert_eq!(r.end_ns, Some(20_000 * k + 19_000));
        assert_eq!(r.completion_ns, Some(20_000 * k + 19_000));
        assert_eq!(r.ideal_completion_ns, 10_000 * (k + 1));
        assert_eq!(r.ideal_time_ns, 10_000);
    }
    assert_eq!(steps[0].time_ns, Some(19_000));
    assert_eq!(steps[1].time_ns, Some(20_000));
    let t = s.time.unwrap();
    assert_eq!((t.count, t.p50_ns, t.p99_ns), (1, 79_000, 79_000));
    assert!((t.slowdown_p50 - 79.0 / 40.0).abs() < 1e-9);
    let st = s.step_time.unwrap();
    assert_eq!((st.count, st.p50_ns, st.max_ns), (4, 20_000, 20_000));
    assert!((st.slowdown_p50 - 2.0).abs() < 1e-9);
}

#[test]
fn repetitions_are_timed_apart_and_an_unfinished_one_has_no_time() {
    // Two hosts, two steps, three repetitions back to back; each step
    // takes 12 µs, but the last flow of the last repetition never ends.
    let flows = ring(2, 3);
    let reps: Vec<u32> = flows.iter().filter_map(|f| f.repetition).collect();
    assert_eq!(reps, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    let at = |f: &FlowSpec| match f.repetition {
        Some(r) => u64::from(r) * 100_000 + u64::from(f.round) * 12_000,
        None => 0,
    };
    let last = flows
        .iter()
        .rev()
        .find(|f| f.repetition.is_some())
        .unwrap()
        .id;
    let res = outcomes(&flows, at, |f| (f.id != last).then_some(12_000));
    let specs: Vec<&FlowSpec> = flows.iter().collect();
    let (sum, steps) = measure(&specs, &res);
    let s = &sum[0];
    assert_eq!((s.steps, s.repetitions, s.completed), (2, 3, 2));
    let t = s.time.unwrap();
    assert_eq!((t.count, t.p50_ns, t.max_ns), (2, 24_000, 24_000));
    // Five steps completed, the sixth did not.
    assert_eq!(s.step_time.unwrap().count, 5);
    let r2: Vec<_> = steps.iter().filter(|r| r.repetition == 2).collect();
    assert_eq!(r2[0].start_ns, Some(200_000));
    assert_eq!(r2[0].completion_ns, Some(12_000));
    assert_eq!((r2[1].end_ns, r2[1].time_ns), (None, None));
}
