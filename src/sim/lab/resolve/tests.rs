//! The switch keys of ECN scaling and dynamic PFC, and the `[output]`
//! keys of the analyses, as a run resolves them.

use super::*;
use crate::sim::lab::plan::LabFile;

fn resolve(text: &str) -> Result<Resolved, LabConfigError> {
    let p = LabFile::parse(text, "t.toml", Path::new("."))?.plan()?;
    Ok(p.runs.into_iter().next().unwrap().resolved)
}

fn err(text: &str) -> String {
    resolve(text).unwrap_err().to_string()
}

/// Hosts at 25, 100 and 400 Gb/s on one switch; `rest` after the
/// topology.
fn mixed(rest: &str) -> String {
    format!(
        r#"name = "t"
[topology]
kind = "custom"
switches = ["sw"]
hosts = [
  {{ name = "a", switch = "sw", rate_gbps = 25 }},
  {{ name = "b", switch = "sw", rate_gbps = 100 }},
  {{ name = "c", switch = "sw", rate_gbps = 400 }},
]
[[workload]]
kind = "long"
from = "a"
to = "b"
{rest}
"#
    )
}

#[test]
fn ecn_thresholds_per_25g_scale_with_each_ports_rate() {
    let r = resolve(&mixed(
        "[switch.ecn]\nkmin_kb = 100\nkmax_kb = 400\npmax = 0.2\nscale_per_25g = true",
    ))
    .unwrap();
    assert!(r.switch.ecn_per_25g);
    let k = |gbps: u64| {
        let red = r.switch.red_for(gbps * 1_000_000_000).unwrap();
        (red.kmin_bytes, red.kmax_bytes, red.pmax)
    };
    // The HPCC simulator's KMIN_MAP / KMAX_MAP of mix/config.txt.
    assert_eq!(k(25), (100_000, 400_000, 0.2));
    assert_eq!(k(50), (200_000, 800_000, 0.2));
    assert_eq!(k(100), (400_000, 1_600_000, 0.2));
    assert_eq!(k(400), (1_600_000, 6_400_000, 0.2));
    // Each port of the topology gets its link's.
    let ports: Vec<(usize, usize)> = r
        .topology
        .hosts
        .iter()
        .map(|h| {
            let red = r.switch.red_for(h.link.rate_bps).unwrap();
            (red.kmin_bytes, red.kmax_bytes)
        })
        .collect();
    assert_eq!(
        ports,
        [
            (100_000, 400_000),
            (400_000, 1_600_000),
            (1_600_000, 6_400_000)
        ]
    );
    // Absent thresholds are the lab's defaults at 25 Gb/s, per 25 Gb/s.
    let r = resolve(&mixed("[switch.ecn]\nscale_per_25g = true")).unwrap();
    let red = r.switch.red_for(100_000_000_000).unwrap();
    assert_eq!((red.kmin_bytes, red.kmax_bytes), (50_000, 1_600_000));
}

#[test]
fn without_scaling_every_port_has_the_same_thresholds() {
    let r = resolve(&mixed("[switch.ecn]\nkmin_kb = 100\nkmax_kb = 400")).unwrap();
    assert!(!r.switch.ecn_per_25g);
    for gbps in [25, 100, 400] {
        let red = r.switch.red_for(gbps * 1_000_000_000).unwrap();
        assert_eq!((red.kmin_bytes, red.kmax_bytes), (100_000, 400_000));
        assert_eq!(Some(red), r.switch.red);
    }
    let r = resolve(&mixed("")).unwrap();
    assert_eq!(r.switch.red_for(100_000_000_000), None);
}

#[test]
fn a_dynamic_pfc_threshold_resolves_alpha_to_a_shift() {
    let r = resolve(&mixed(
        "[switch]\nbuffer_kb = 1000\n[switch.pfc]\nthreshold = \"dynamic\"\nalpha = 0.25\n\
         resume_offset_kb = 6",
    ))
    .unwrap();
    let pfc = r.switch.pfc.unwrap();
    assert_eq!(
        pfc.dynamic,
        Some(DynamicPfcSpec {
            alpha_shift: 2,
            resume_offset_bytes: 6_000
        })
    );
    // Defaults: 1/8 and 3 KiB, as the HPCC simulator's switch MMU.
    let r = resolve(&mixed(
        "[switch]\nbuffer_kb = 1000\n[switch.pfc]\nthreshold = \"dynamic\"",
    ))
    .unwrap();
    let d = r.switch.pfc.unwrap().dynamic.unwrap();
    assert_eq!((d.alpha_shift, d.resume_offset_bytes), (3, 3_072));
    // The static XOFF need not fit the buffer when it is not used.
    assert!(resolve(&mixed(
        "[switch]\nbuffer_kb = 200\n[switch.pfc]\nthreshold = \"dynamic\"\nheadroom_kb = 50"
    ))
    .is_ok());
    // Static by default.
    let r = resolve(&mixed("[switch.pfc]")).unwrap();
    assert_eq!(r.switch.pfc.unwrap().dynamic, None);
}

#[test]
fn bad_dynamic_pfc_and_analysis_keys_are_named() {
    let e = err(&mixed("[switch.pfc]\nthreshold = \"dynamic\""));
    assert!(
        e.contains("t.toml") && e.contains("switch.pfc.threshold") && e.contains("buffer_kb"),
        "{e}"
    );
    let e = err(&mixed(
        "[switch]\nbuffer_kb = 1000\n[switch.pfc]\nthreshold = \"dynamic\"\nalpha = 0.3",
    ));
    assert!(e.contains("switch.pfc.alpha") && e.contains("0.3"), "{e}");
    let e = err(&mixed("[switch.pfc]\nthreshold = \"sometimes\""));
    assert!(e.contains("t.toml") && e.contains("sometimes"), "{e}");
    let e = err(&mixed("[output]\nfct_tags = [\"incast\"]"));
    assert!(
        e.contains("output.fct_tags") && e.contains("\"incast\"") && e.contains("long"),
        "{e}"
    );
    let e = err(&mixed("[output]\nthroughput_tags = \"web\""));
    assert!(e.contains("output.throughput_tags"), "{e}");
    let e = err(&mixed("[output]\nfct_bin_pct = 0"));
    assert!(
        e.contains("output.fct_bin_pct") && e.contains("1..=100"),
        "{e}"
    );
    let e = err(&mixed("[switch.ecn]\nscale_per_25g = \"yes\""));
    assert!(e.contains("t.toml") && e.contains("scale_per_25g"), "{e}");
}

#[test]
fn the_analysis_keys_default_to_every_flow_in_5_percent_bins() {
    let r = resolve(&mixed("")).unwrap();
    assert_eq!(
        r.analysis,
        AnalysisParams {
            fct_tags: None,
            fct_bin_pct: 5,
            throughput_flows: 1000,
            throughput_tags: None,
        }
    );
    let r = resolve(&mixed(
        "[output]\nfct_tags = \"long\"\nfct_bin_pct = 10\nthroughput_flows = 3\nthroughput_tags = [\"long\"]",
    ))
    .unwrap();
    assert!(r.analysis.fct_takes("long") && !r.analysis.fct_takes("cdf"));
    assert!(r.analysis.throughput_takes("long") && !r.analysis.throughput_takes("x"));
    assert_eq!(
        (r.analysis.fct_bin_pct, r.analysis.throughput_flows),
        (10, 3)
    );
}
