use super::*;
use crate::sim::lab::plan::*;
use crate::sim::lab::resolve::*;
use crate::sim::lab::workload;
use std::path::Path;

fn lab_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/lab")
}

/// A file of `top` keys, then `[topology]` with `topo`, then `rest`.
fn file(top: &str, topo: &str, rest: &str) -> String {
    format!("name = \"t\"\n{top}\n[topology]\n{topo}\n{rest}\n")
}

const LONG: &str = "[[workload]]\nkind = \"long\"\nfrom = \"all\"\nto = \"all\"\n";

fn plan(text: &str) -> Result<LabPlan, LabConfigError> {
    LabFile::parse(text, "t.toml", &lab_dir())?.plan()
}

fn one(text: &str) -> Resolved {
    let p = plan(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.runs.len(), 1);
    p.runs.into_iter().next().unwrap().resolved
}

#[test]
fn an_incast_topology_has_a_receiver_and_n_senders_on_one_switch() {
    let r = one(&file("", "kind = \"incast\"\nsenders = 16", LONG));
    let t = &r.topology;
    assert_eq!((t.hosts.len(), t.switches.len(), t.links.len()), (17, 1, 0));
    assert_eq!(t.hosts[0].name, "recv");
    assert_eq!(t.hosts[16].name, "s15");
    assert_eq!(t.switches[0].name, "sw");
    assert_eq!(t.group("receiver"), Some(&[0][..]));
    assert_eq!(t.group("senders").unwrap().len(), 16);
    assert_eq!(t.group("all").unwrap().len(), 17);
    assert!(t.hosts.iter().all(|h| h.switch == 0
        && h.link
            == LinkSpec {
                rate_bps: 100_000_000_000,
                delay_ns: 1000
            }));
    // Defaults of the other tables.
    assert_eq!(r.duration_ns, 10_000_000);
    assert_eq!((r.queue_sample_ns, r.rate_sample_ns), (1000, 10_000));
    assert_eq!(r.switch.strict_priorities, vec![6, 7]);
    assert_eq!((r.switch.red, &r.switch.pfc), (None, &None));
    assert_eq!(r.switch.buffer_bytes, None);
    assert_eq!(r.transport.cc.name(), "dcqcn-cx");
    assert_eq!(r.transport.min_time_between_cnps_ns, 4000);
    assert_eq!(r.transport.message_bytes, 64_000);
    assert_eq!(
        (
            r.transport.window,
            r.transport.timeout,
            r.transport.retry_cnt
        ),
        (8, 14, 7)
    );
    assert_eq!(r.transport.traffic_class, 106);
    assert!(r.transport.icrc_offload && !r.transport.place_writes);
    assert_eq!(r.queues, QueueSelect::Bottleneck);
}

/// The NICs' offloads are plain switches: a value that is not a boolean
/// is refused, naming the file and the key.
#[test]
fn the_nic_offloads_take_booleans_only() {
    for key in ["transport.icrc_offload", "transport.place_writes"] {
        let e = error_with(key, "\"yes\"").to_string();
        let field = key.trim_start_matches("transport.");
        assert!(e.contains("t.toml") && e.contains(field), "{e}");
    }
}

#[test]
fn a_dumbbell_has_two_switches_and_one_bottleneck() {
    let topo = "kind = \"dumbbell\"\npairs = 4\nfabric_link = { rate_gbps = 40, delay_us = 2500 }";
    let t = one(&file("", topo, LONG)).topology;
    assert_eq!((t.hosts.len(), t.switches.len(), t.links.len()), (8, 2, 1));
    let names: Vec<_> = t.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["L0", "L1", "L2", "L3", "R0", "R1", "R2", "R3"]);
    assert_eq!(t.host_index("R3").map(|h| t.hosts[h].switch), Some(1));
    assert_eq!(t.hosts_named(&["left".into()]).unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(t.hosts_named(&["right".into()]).unwrap(), vec![4, 5, 6, 7]);
    // Milliseconds of delay between availability zones.
    assert_eq!(
        t.links[0].link,
        LinkSpec {
            rate_bps: 40_000_000_000,
            delay_ns: 2_500_000
        }
    );
    let p = t.path(0, 4).unwrap();
    assert_eq!(p.hops, 3);
    assert_eq!(p.bottleneck_bps, 40_000_000_000);
    assert_eq!(p.base_rtt_ns(), 2 * (1000 + 2_500_000 + 1000));
}

#[test]
fn a_leaf_spine_links_every_leaf_to_every_spine() {
    let topo = "kind = \"leaf-spine\"\nleaves = 4\nspines = 2\nhosts_per_leaf = 8";
    let t = one(&file("", topo, LONG)).topology;
    assert_eq!((t.hosts.len(), t.switches.len(), t.links.len()), (32, 6, 8));
    assert_eq!(t.switches[3].name, "leaf3");
    assert_eq!(t.switches[5].name, "spine1");
    assert_eq!(t.hosts[17].name, "h2-1");
    assert_eq!(t.hosts[17].switch, 2);
    assert_eq!(t.group("leaf2").unwrap(), &(16..24).collect::<Vec<_>>()[..]);
    for leaf in 0..4 {
        for spine in 4..6 {
            assert_eq!(t.links_between(leaf, spine).len(), 1);
        }
    }
    // h0-0 -> leaf0 -> spine -> leaf3 -> h3-0.
    assert_eq!(t.path(0, 24).unwrap().hops, 4);
    assert_eq!(t.path(0, 1).unwrap().hops, 2);
    assert_eq!(t.path(0, 0), None);
    // Ports: the leaf's hosts, then its spines.
    let ports = t.ports(1);
    assert_eq!(ports.len(), 10);
    assert_eq!(ports[0], Peer::Host(8));
    assert_eq!(
        ports[8],
        Peer::Switch {
            switch: 4,
            link: t.links_between(1, 4)[0]
        }
    );
}

const CUSTOM: &str = r#"kind = "custom"
switches = ["a", "b", "c"]
hosts = [{ name = "x", switch = "a" }, { name = "y", switch = "c", rate_gbps = 25 }, { name = "z", switch = "b" }]
links = [{ a = "a", b = "b", rate_gbps = 10 }, { a = "a", b = "b" }, { a = "b", b = "c", delay_us = 3 }]
groups = { edge = ["x", "y"] }
fabric_link = { rate_gbps = 40, delay_us = 1 }"#;

#[test]
fn a_custom_topology_is_as_listed_with_parallel_links() {
    let r = one(&file(
        "",
        CUSTOM,
        "[[link_event]]\nat_us = 5\nlink = { a = \"b\", b = \"a\", index = 1 }\n\
         [[route]]\nswitch = \"a\"\ndst = \"edge\"\nvia = \"b\"\n\
         [[route]]\nswitch = \"a\"\ndst = \"x\"\nvia = [\"b\", \"x\", \"b\"]\n\
         [output]\nqueues = [\"a:b#1\", \"b:0\", \"c:y\"]\n[[workload]]\nkind = \"long\"\n\
         from = \"x\"\nto = [\"y\", \"z\"]",
    ));
    let t = &r.topology;
    assert_eq!((t.hosts.len(), t.switches.len(), t.links.len()), (3, 3, 3));
    assert_eq!(t.hosts[1].link.rate_bps, 25_000_000_000);
    assert_eq!(t.hosts[1].link.delay_ns, 1000);
    assert_eq!(t.links[0].link.rate_bps, 10_000_000_000);
    assert_eq!(t.links[1].link.rate_bps, 40_000_000_000);
    assert_eq!(t.links[2].link.delay_ns, 3000);
    assert_eq!(t.links_between(1, 0), vec![0, 1]);
    assert_eq!(t.group("edge"), Some(&[0, 1][..]));
    // The widest of the shortest paths: the 40G parallel link, then 25G.
    let p = t.path(0, 1).unwrap();
    assert_eq!((p.hops, p.bottleneck_bps), (4, 25_000_000_000));
    assert_eq!(t.path(0, 2).unwrap().bottleneck_bps, 40_000_000_000);
    assert_eq!(
        r.link_events,
        vec![LinkEventSpec {
            at_ns: 5000,
            a: 1,
            b: 0,
            nth: 1,
            link: 1,
            up: false
        }]
    );
    // A group destination gives a route per host; a host is a next hop
    // of a route to itself only.
    assert_eq!(r.routes.len(), 3);
    assert_eq!((r.routes[0].dst, r.routes[1].dst), (0, 1));
    assert_eq!(r.routes[1].via, vec![NextHop::Switch(1)]);
    assert_eq!(r.routes[2].via, vec![NextHop::Switch(1), NextHop::Host(0)]);
    let e = plan(&file(
        "",
        CUSTOM,
        "[[route]]\nswitch = \"a\"\ndst = \"edge\"\nvia = [\"b\", \"x\"]\n[[workload]]\n\
         kind = \"long\"\nfrom = \"x\"\nto = \"y\"",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("route.0.via"), "{e}");
    assert_eq!(
        r.queues,
        QueueSelect::Ports(vec![
            PortRef { switch: 0, port: 2 },
            PortRef { switch: 1, port: 0 },
            PortRef { switch: 2, port: 0 },
        ])
    );
}

const SWEEP: &str = r#"
[[variant]]
name = "dcqcn"
set = { "transport.cc" = "dcqcn-cx", "switch.pfc.enabled" = false }
[[variant]]
name = "pfc"
set = { "transport.cc" = "none", "switch.pfc.enabled" = true }
[sweep]
key = "topology.senders"
values = [2, 4, 8]
"#;

#[test]
fn variants_times_sweep_values_make_the_runs_in_order() {
    let text = file(
        "",
        "kind = \"incast\"\nsenders = 16",
        &format!("{LONG}{SWEEP}"),
    );
    let p = plan(&text).unwrap();
    let names: Vec<_> = p.runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "dcqcn-senders=2",
            "dcqcn-senders=4",
            "dcqcn-senders=8",
            "pfc-senders=2",
            "pfc-senders=4",
            "pfc-senders=8"
        ]
    );
    assert_eq!(p.sweep_key.as_deref(), Some("topology.senders"));
    assert_eq!(p.variants, ["dcqcn", "pfc"]);
    for r in &p.runs {
        let n = r.sweep_value.as_ref().unwrap().as_integer().unwrap() as usize;
        assert_eq!(r.config.topology.senders, Some(n));
        assert_eq!(r.resolved.topology.hosts.len(), n + 1);
        let pfc = r.variant.as_deref() == Some("pfc");
        assert_eq!(r.resolved.switch.pfc.is_some(), pfc);
        assert_eq!(
            r.resolved.transport.cc.name(),
            if pfc { "none" } else { "dcqcn-cx" }
        );
        // The CNP interval default follows the run's rate control.
        assert_eq!(r.resolved.transport.min_time_between_cnps_ns, 4000);
    }
    // A sweep alone, variants alone, neither.
    let sweep_only = file(
        "",
        "kind = \"incast\"\nsenders = 16",
        &format!("{LONG}[sweep]\nkey = \"switch.ecn.pmax\"\nvalues = [0.25, 1]"),
    );
    let names: Vec<_> = plan(&sweep_only)
        .unwrap()
        .runs
        .into_iter()
        .map(|r| (r.name, r.resolved.switch.red.unwrap().pmax))
        .collect();
    assert_eq!(
        names,
        [("pmax=0.25".to_string(), 0.25), ("pmax=1".to_string(), 1.0)]
    );
    let variants_only = file(
        "",
        "kind = \"incast\"\nsenders = 2",
        &format!(
            "{LONG}[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b.2\"\nset = {{ seed = 9 }}"
        ),
    );
    let runs = plan(&variants_only).unwrap().runs;
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[0].name.as_str(), runs[0].config.seed), ("a", 1));
    assert_eq!((runs[1].name.as_str(), runs[1].config.seed), ("b.2", 9));
    let neither = plan(&file("", "kind = \"incast\"\nsenders = 2", LONG)).unwrap();
    assert_eq!(neither.runs[0].name, "t");
    assert_eq!(neither.runs[0].variant, None);
}

#[test]
fn overrides_reach_nested_keys_and_array_entries() {
    let base = file(
        "",
        "kind = \"incast\"\nsenders = 4",
        "[switch.ecn]\nkmin_kb = 100\nkmax_kb = 400\n\
         [[workload]]\nkind = \"incast\"\nsize_kb = 10\n\
         [[workload]]\nkind = \"incast\"\nsize_kb = 20\n",
    );
    let with = |set: &str| {
        let text = format!("{base}[[variant]]\nname = \"v\"\nset = {set}\n");
        plan(&text).map(|p| p.runs.into_iter().next().unwrap())
    };
    // A table the file leaves out is created, with its defaults.
    let r = with("{ \"switch.pfc.xoff_kb\" = 500 }").unwrap();
    let pfc = r.resolved.switch.pfc.unwrap();
    assert_eq!((pfc.xoff_bytes, pfc.xon_bytes), (500_000, 350_000));
    assert_eq!(pfc.priorities, vec![3]);
    // A table value merges into the table there.
    let r = with("{ \"switch.ecn\" = { kmin_kb = 10 } }").unwrap();
    let red = r.resolved.switch.red.unwrap();
    assert_eq!((red.kmin_bytes, red.kmax_bytes), (10_000, 400_000));
    // TOML's own dotted keys say the same.
    let r = with("{ switch.ecn.kmax_kb = 800, transport.cc = \"none\" }").unwrap();
    assert_eq!(r.resolved.switch.red.unwrap().kmax_bytes, 800_000);
    assert_eq!(r.resolved.transport.cc.name(), "none");
    assert_eq!(r.resolved.transport.min_time_between_cnps_ns, 4000);
    let r = with("{ \"transport.cc\" = \"dcqcn-paper\" }").unwrap();
    assert_eq!(r.resolved.transport.min_time_between_cnps_ns, 50_000);
    // Array entries by number.
    let r = with("{ \"workload.1.size_kb\" = 30 }").unwrap();
    assert_eq!(r.config.workloads[0].size_kb, Some(10.0));
    assert_eq!(r.config.workloads[1].size_kb, Some(30.0));
    // Keys that are not there.
    let e = |set: &str| with(set).unwrap_err().to_string();
    let msg = e("{ \"topology.sendrs\" = 8 }");
    assert!(
        msg.contains("topology.sendrs") && msg.contains("unknown field"),
        "{msg}"
    );
    assert!(msg.contains("variant v"), "{msg}");
    assert!(e("{ \"workload.2.size_kb\" = 1 }").contains("2 entries"));
    assert!(e("{ \"workload.x.size_kb\" = 1 }").contains("numbered from 0"));
    assert!(e("{ \"topology.kind.x\" = 1 }").contains("topology.kind is a string, not a table"));
    assert!(e("{ \"transport.cc.x\" = 1 }").contains("invalid type"));
    assert!(e("{ \"topology.senders\" = \"many\" }").contains("invalid type"));
    assert!(e("{ \"name\" = \"x\" }").contains("cannot be set"));
    assert!(e("{ \"sweep.key\" = \"x\" }").contains("cannot be set"));
    assert!(e("{ \"a..b\" = 1 }").contains("not a dotted key"));
    // A key of the schema that does not apply to this file is caught when
    // the run is checked, and the run is named.
    let msg = e("{ \"topology.pairs\" = 2 }");
    assert!(msg.contains("run v: topology.pairs"), "{msg}");
}

#[test]
fn a_sweep_key_must_exist_and_its_values_be_distinct_scalars() {
    let base = file("", "kind = \"incast\"\nsenders = 4", LONG);
    let with = |sweep: &str| plan(&format!("{base}[sweep]\n{sweep}\n")).unwrap_err();
    let e = with("key = \"topology.sender\"\nvalues = [1, 2]");
    assert_eq!(e.key(), Some("topology.sender"));
    assert!(e.to_string().contains("unknown field `sender`"), "{e}");
    assert!(e.to_string().contains("swept to 1"), "{e}");
    assert!(with("key = \"seed\"\nvalues = []")
        .to_string()
        .contains("at least one value"));
    assert!(with("key = \"seed\"\nvalues = [1, 1]")
        .to_string()
        .contains("listed twice"));
    assert!(with("key = \"seed\"\nvalues = [[1]]")
        .to_string()
        .contains("not a number"));
    assert!(with("key = \"seed\"\nvalues = [-1]")
        .to_string()
        .contains("invalid value"));
    assert!(with("key = \"topology.senders\"\nvalues = [2, 5000]")
        .to_string()
        .contains("run senders=5000: topology.senders: 5000 is outside 1..=4095"));
    let e = plan(&format!(
        "{base}[[variant]]\nname = \"a\"\n[[variant]]\nname = \"a\"\n"
    ))
    .unwrap_err();
    assert!(
        e.to_string().contains("two variants are named \"a\""),
        "{e}"
    );
    let e = plan(&format!("{base}[[variant]]\nname = \"a b\"\n")).unwrap_err();
    assert!(e.to_string().contains("variant.0.name"), "{e}");
}

/// The valid base of the error table: every section present.
const BASE: &str = r#"name = "base"
duration_us = 1000
[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 2
[switch]
buffer_kb = 3200
[switch.ecn]
[switch.pfc]
[transport]
[[workload]]
kind = "long"
from = "leaf0"
to = "leaf1"
[[workload]]
kind = "incast"
senders = "all"
to = "h1-1"
size_kb = 100
[[workload]]
kind = "cdf"
file = "websearch.csv"
load = 0.5
[[link_event]]
at_us = 10
link = { a = "leaf0", b = "spine0" }
[[route]]
switch = "leaf0"
dst = "h1-0"
via = "spine1"
[output]
queues = "all"
"#;

/// The error of `BASE` with `key` set to the TOML value `value`.
fn error_with(key: &str, value: &str) -> LabConfigError {
    let mut table: toml::Table = toml::from_str(BASE).unwrap();
    let v: toml::Table = toml::from_str(&format!("v = {value}")).unwrap();
    set_key(&mut table, key, v["v"].clone()).unwrap();
    let text = toml::to_string(&table).unwrap();
    match LabConfig::parse(&text, "t.toml", &lab_dir()) {
        Err(e) => e,
        Ok(c) => match c.resolve() {
            Err(e) => e,
            Ok(_) => panic!("{key} = {value} was accepted"),
        },
    }
}

#[test]
fn the_base_of_the_error_table_is_valid() {
    let c = LabConfig::parse(BASE, "t.toml", &lab_dir()).unwrap();
    let r = c.resolve().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.link_events[0].link, 0);
    assert_eq!(r.routes[0].via, vec![NextHop::Switch(3)]);
    assert_eq!(r.queues, QueueSelect::All);
    assert!(workload::generate(&c, &r.topology, 1).is_ok());
}

#[test]
fn bad_values_are_named_with_their_key_and_file() {
    // (key, value, the key the error names, a piece of its message)
    let table: &[(&str, &str, &str, &str)] = &[
        ("duration_us", "0", "duration_us", "above 0"),
        ("duration_us", "2e6", "duration_us", "outside 0..=1000000"),
        ("duration_us", "nan", "duration_us", "outside"),
        ("queue_sample_ns", "0", "queue_sample_ns", "above 0"),
        ("queue_sample_ns", "0.4", "queue_sample_ns", "above 0"),
        ("rate_sample_us", "-1", "rate_sample_us", "outside"),
        ("drain_limit_us", "-5", "drain_limit_us", "outside"),
        (
            "topology.host_link.rate_gbps",
            "0",
            "topology.host_link.rate_gbps",
            "above 0",
        ),
        (
            "topology.host_link.rate_gbps",
            "-1",
            "topology.host_link.rate_gbps",
            "above 0",
        ),
        (
            "topology.host_link.rate_gbps",
            "inf",
            "topology.host_link.rate_gbps",
            "above 0",
        ),
        (
            "topology.fabric_link.rate_gbps",
            "0",
            "topology.fabric_link.rate_gbps",
            "above 0",
        ),
        (
            "topology.fabric_link.delay_us",
            "200000",
            "topology.fabric_link.delay_us",
            "outside 0..=100000",
        ),
        (
            "topology.host_link.delay_us",
            "-1",
            "topology.host_link.delay_us",
            "outside",
        ),
        ("topology.mtu", "1500", "topology.mtu", "not one of"),
        (
            "topology.senders",
            "3",
            "topology.senders",
            "incast topologies",
        ),
        ("topology.leaves", "0", "topology.leaves", "outside 1..="),
        (
            "topology.hosts_per_leaf",
            "4096",
            "topology.hosts_per_leaf",
            "more than 4096 hosts",
        ),
        (
            "topology.spines",
            "4095",
            "topology.spines",
            "more than 4096 switches",
        ),
        (
            "topology.groups",
            "{ h0-0 = [\"h1-0\"] }",
            "topology.groups.h0-0",
            "already the name",
        ),
        (
            "topology.groups",
            "{ g = [\"nobody\"] }",
            "topology.groups.g",
            "no host or group is named \"nobody\"",
        ),
        (
            "topology.groups",
            "{ g = [] }",
            "topology.groups.g",
            "no hosts",
        ),
        ("switch.buffer_kb", "0", "switch.buffer_kb", "above 0"),
        (
            "switch.buffer_kb",
            "100",
            "switch.pfc.xoff_kb",
            "above switch.buffer_kb",
        ),
        (
            "switch.port_buffer_kb",
            "5000",
            "switch.port_buffer_kb",
            "above switch.buffer_kb",
        ),
        (
            "switch.reserved_kb",
            "[0, 0, 0, 0, 0, 0, -8, 0]",
            "switch.reserved_kb",
            "outside 0..=",
        ),
        (
            "switch.strict_priorities",
            "[8]",
            "switch.strict_priorities",
            "outside 0..=7",
        ),
        (
            "switch.strict_priorities",
            "[6, 6]",
            "switch.strict_priorities",
            "twice",
        ),
        (
            "switch.ecn.kmin_kb",
            "2000",
            "switch.ecn.kmin_kb",
            "above kmax_kb",
        ),
        ("switch.ecn.kmax_kb", "-1", "switch.ecn.kmax_kb", "outside"),
        (
            "switch.ecn.pmax",
            "1.5",
            "switch.ecn.pmax",
            "not a probability",
        ),
        (
            "switch.ecn.pmax",
            "-0.1",
            "switch.ecn.pmax",
            "not a probability",
        ),
        (
            "switch.ecn.pmax",
            "nan",
            "switch.ecn.pmax",
            "not a probability",
        ),
        (
            "switch.pfc.xon_kb",
            "500",
            "switch.pfc.xon_kb",
            "above xoff_kb",
        ),
        ("switch.pfc.xoff_kb", "0", "switch.pfc.xoff_kb", "above 0"),
        (
            "switch.pfc.priorities",
            "[9]",
            "switch.pfc.priorities",
            "outside 0..=7",
        ),
        (
            "switch.pfc.priorities",
            "[]",
            "switch.pfc.priorities",
            "at least one",
        ),
        (
            "switch.pfc.quanta",
            "0",
            "switch.pfc.quanta",
            "outside 1..=65535",
        ),
        (
            "switch.pfc.quanta",
            "70000",
            "switch.pfc.quanta",
            "outside 1..=65535",
        ),
        ("transport.cc", "\"cubic\"", "transport.cc", "dcqcn-cx"),
        (
            "transport.cc",
            "\"missing.toml\"",
            "transport.cc",
            "missing.toml",
        ),
        (
            "transport.message_kb",
            "0",
            "transport.message_kb",
            "outside",
        ),
        (
            "transport.message_kb",
            "20000",
            "transport.message_kb",
            "outside",
        ),
        (
            "transport.window",
            "0",
            "transport.window",
            "outside 1..=4096",
        ),
        (
            "transport.timeout",
            "0",
            "transport.timeout",
            "outside 1..=31",
        ),
        (
            "transport.retry_cnt",
            "8",
            "transport.retry_cnt",
            "outside 0..=7",
        ),
        (
            "transport.priority",
            "8",
            "transport.priority",
            "outside 0..=7",
        ),
        (
            "transport.cnp_priority",
            "9",
            "transport.cnp_priority",
            "outside 0..=7",
        ),
        (
            "transport.min_time_between_cnps_us",
            "-4",
            "transport.min_time_between_cnps_us",
            "outside",
        ),
        (
            "workload.0.from",
            "[\"nobody\"]",
            "workload.0.from",
            "no host or group is named \"nobody\"",
        ),
        ("workload.0.from", "[]", "workload.0.from", "no hosts"),
        (
            "workload.0",
            "{ from = \"h0-0\", to = \"h0-0\" }",
            "workload.0.to",
            "no flows",
        ),
        (
            "workload.0.load",
            "0.5",
            "workload.0.load",
            "not a key of long workloads",
        ),
        (
            "workload.0.start_us",
            "1000",
            "workload.0.start_us",
            "not before the end",
        ),
        (
            "workload.0.stop_us",
            "0",
            "workload.0.stop_us",
            "not after start_us",
        ),
        (
            "workload.0.stop_us",
            "2000",
            "workload.0.stop_us",
            "at most duration_us",
        ),
        (
            "workload.1.to",
            "\"leaf1\"",
            "workload.1.to",
            "one receiver",
        ),
        (
            "workload.1.senders",
            "\"h1-1\"",
            "workload.1.senders",
            "but the receiver",
        ),
        (
            "workload.1.size_kb",
            "0",
            "workload.1.size_kb",
            "not above 0",
        ),
        ("workload.1.size_kb", "-3", "workload.1.size_kb", "outside"),
        ("workload.1.count", "2", "workload.1.count", "repeat_us"),
        ("workload.1.count", "0", "workload.1.count", "at least 1"),
        (
            "workload.1.repeat_us",
            "0",
            "workload.1.repeat_us",
            "above 0",
        ),
        (
            "workload.1",
            "{ size_kb = 2e9 }",
            "workload.1.size_kb",
            "outside",
        ),
        ("workload.2.load", "0", "workload.2.load", "outside (0, 1]"),
        (
            "workload.2.load",
            "1.5",
            "workload.2.load",
            "outside (0, 1]",
        ),
        (
            "workload.2.hosts",
            "\"h0-0\"",
            "workload.2.hosts",
            "at least 2 hosts",
        ),
        (
            "workload.2.file",
            "\"nothing.csv\"",
            "workload.2.file",
            "cannot read",
        ),
        (
            "workload.2.max_flows",
            "0",
            "workload.2.max_flows",
            "outside 1..=1000000",
        ),
        (
            "workload.2.max_flows",
            "1000000",
            "workload.2",
            "above the limit of 1000000",
        ),
        (
            "link_event.0.link.a",
            "\"h0-0\"",
            "link_event.0.link.a",
            "is a host",
        ),
        (
            "link_event.0.link.b",
            "\"leaf1\"",
            "link_event.0.link.index",
            "0 link(s)",
        ),
        (
            "link_event.0.link.index",
            "1",
            "link_event.0.link.index",
            "1 link(s)",
        ),
        ("link_event.0.at_us", "-1", "link_event.0.at_us", "outside"),
        (
            "route.0.switch",
            "\"leaf9\"",
            "route.0.switch",
            "no switch is named \"leaf9\"",
        ),
        ("route.0.dst", "\"h9\"", "route.0.dst", "no host or group"),
        (
            "route.0.via",
            "\"leaf1\"",
            "route.0.via",
            "not linked to leaf0",
        ),
        ("route.0.via", "[]", "route.0.via", "at least one"),
        (
            "route.0.via",
            "\"h1-0\"",
            "route.0.via",
            "only be the next hop",
        ),
        (
            "output.queues",
            "\"hot\"",
            "output.queues",
            "not \"bottleneck\"",
        ),
        (
            "output.queues",
            "[\"leaf0\"]",
            "output.queues",
            "not \"switch:port\"",
        ),
        (
            "output.queues",
            "[\"leaf0:9\"]",
            "output.queues",
            "has 4 ports",
        ),
        (
            "output.queues",
            "[\"leaf0:spine0#1\"]",
            "output.queues",
            "no port",
        ),
        ("output.queues", "[\"x:y\"]", "output.queues", "no switch"),
        ("name", "\"\"", "name", "must not be empty"),
    ];
    for (key, value, want_key, want) in table {
        let e = error_with(key, value);
        let msg = e.to_string();
        assert!(msg.starts_with("t.toml: "), "{key} = {value}: {msg}");
        assert_eq!(e.key(), Some(*want_key), "{key} = {value}: {msg}");
        assert!(msg.contains(want), "{key} = {value}: {msg}");
    }
}

#[test]
fn schema_errors_carry_the_line() {
    let e = |text: &str| plan(text).unwrap_err().to_string();
    let msg = e(&file("", "kind = \"ring\"", LONG));
    assert!(
        msg.contains("unknown variant `ring`") && msg.contains("line 4"),
        "{msg}"
    );
    let msg = e(&file("", "kind = \"incast\"\nsendrs = 2", LONG));
    assert!(msg.contains("unknown field `sendrs`"), "{msg}");
    assert!(e(&file("colour = 1", "kind = \"incast\"", LONG)).contains("unknown field `colour`"));
    assert!(
        e("name = \"t\"\n[topology]\nkind = \"incast\"\nsenders = 2\n")
            .contains("missing field `workload`")
    );
    assert!(e(&file(
        "",
        "kind = \"incast\"\nsenders = 2",
        "[[workload]]\nkind = \"bulk\""
    ))
    .contains("unknown variant `bulk`"));
    assert!(e(&file("", "kind = \"incast\"\nsenders = -2", LONG)).contains("invalid value"));
    assert!(e(&file(
        "",
        "kind = \"incast\"\nsenders = 2",
        "[switch.pfc]\nxof_kb = 1\n[[workload]]\nkind = \"long\"\nfrom = \"all\"\nto = \"all\""
    ))
    .contains("unknown field `xof_kb`"));
    assert!(e(&file(
        "",
        "kind = \"incast\"\nsenders = 2",
        &format!("{LONG}[[variant]]\nnme = \"x\"")
    ))
    .contains("unknown field `nme`"));
    assert!(e("not toml at all").contains("t.toml"));
    let r = LabPlan::load(Path::new("/nonexistent/lab.toml")).unwrap_err();
    assert!(r.to_string().contains("cannot read /nonexistent/lab.toml"));
}

#[test]
fn custom_topology_mistakes_are_named() {
    let e = |topo: &str| plan(&file("", topo, LONG)).unwrap_err().to_string();
    let custom = |hosts: &str, links: &str| {
        format!("kind = \"custom\"\nswitches = [\"a\", \"b\"]\nhosts = {hosts}\nlinks = {links}")
    };
    let h = "[{ name = \"x\", switch = \"a\" }, { name = \"y\", switch = \"b\" }]";
    let l = "[{ a = \"a\", b = \"b\" }]";
    assert!(plan(&file("", &custom(h, l), LONG)).is_ok());
    assert!(e(&custom(h, "[]")).contains("switch b is not connected to switch a"));
    assert!(e(&custom(h, "[{ a = \"a\", b = \"a\" }]")).contains("not a to itself"));
    assert!(e(&custom(h, "[{ a = \"a\", b = \"q\" }]")).contains("topology.links.0.b"));
    assert!(e(&custom("[{ name = \"x\", switch = \"q\" }]", l)).contains("topology.hosts.0.switch"));
    assert!(e(&custom("[{ name = \"a\", switch = \"a\" }]", l)).contains("already the name"));
    assert!(e(&custom(
        "[{ name = \"x\", switch = \"a\" }, { name = \"x\", switch = \"b\" }]",
        l
    ))
    .contains("already the name"));
    assert!(e(&custom("[{ name = \"x y\", switch = \"a\" }]", l)).contains("not a name"));
    assert!(e(&custom("[]", l)).contains("at least one host"));
    assert!(e(&custom(h, "[{ a = \"a\", b = \"b\", rate_gbps = 0 }]"))
        .contains("topology.links.0.rate_gbps"));
    assert!(e("kind = \"custom\"\nswitches = []").contains("at least one switch"));
    assert!(e(
        "kind = \"custom\"\nswitches = [\"a\", \"a\"]\nhosts = [{ name = \"x\", switch = \"a\" }]"
    )
    .contains("named twice"));
    assert!(e("kind = \"dumbbell\"").contains("topology.pairs: is required"));
    assert!(e("kind = \"incast\"\nsenders = 2\nhosts = []").contains("custom topologies"));
}

#[test]
fn limits_hold() {
    let e = |topo: &str, rest: &str| plan(&file("", topo, rest)).unwrap_err().to_string();
    assert!(e("kind = \"incast\"\nsenders = 4096", LONG).contains("outside 1..=4095"));
    assert!(plan(&file(
        "",
        "kind = \"incast\"\nsenders = 4095",
        "[[workload]]\nkind = \"incast\"\nsize_kb = 1"
    ))
    .is_ok());
    assert!(e("kind = \"dumbbell\"\npairs = 2049", LONG).contains("outside 1..=2048"));
    // 2000 hosts all-to-all: 3998000 flows.
    let msg = e(
        "kind = \"leaf-spine\"\nleaves = 40\nspines = 2\nhosts_per_leaf = 50",
        "[[workload]]\nkind = \"all-to-all\"\nsize_kb = 1",
    );
    assert!(
        msg.contains("3998000 flows, above the limit of 1000000"),
        "{msg}"
    );
    // Too many samples of a queue.
    let msg = plan(&file(
        "duration_us = 1e6\nqueue_sample_ns = 100",
        "kind = \"incast\"\nsenders = 2",
        LONG,
    ))
    .unwrap_err()
    .to_string();
    assert!(msg.contains("sample less often"), "{msg}");
}

#[test]
fn every_shipped_experiment_plans_and_makes_its_flows() {
    let mut n = 0;
    for e in std::fs::read_dir(lab_dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let plan = LabPlan::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!plan.runs.is_empty());
            for run in &plan.runs {
                let flows =
                    workload::generate(&run.config, &run.resolved.topology, run.config.seed)
                        .unwrap_or_else(|e| panic!("{}: {e}", run.name));
                assert!(!flows.is_empty(), "{}", run.name);
                assert!(flows.len() as u64 <= run.resolved.flows_bound);
            }
            n += 1;
        }
    }
    assert!(n >= 1);
}

#[test]
fn the_example_uses_every_section() {
    let plan = LabPlan::load(&lab_dir().join("example.toml")).unwrap();
    assert_eq!(plan.runs.len(), 6);
    assert_eq!(plan.runs[0].name, "dcqcn-size_kb=16");
    assert_eq!(plan.runs[5].name, "pfc-size_kb=256");
    let pfc = &plan.runs[5].resolved;
    assert!(pfc.switch.pfc.is_some() && pfc.switch.red.is_none());
    let dcqcn = &plan.runs[0].resolved;
    assert!(dcqcn.switch.pfc.is_none() && dcqcn.switch.red.is_some());
    assert_eq!(dcqcn.link_events.len(), 2);
    assert_eq!(dcqcn.routes.len(), 4);
    assert_eq!(dcqcn.drain_limit_ns, Some(5_000_000));
    let kinds: std::collections::BTreeSet<_> = plan.runs[0]
        .config
        .workloads
        .iter()
        .map(|w| w.kind.name())
        .collect();
    assert_eq!(kinds.len(), 5);
    assert!(!plan.description.is_empty());
    // The resolved description serialises (for the run's record).
    assert!(serde_json::to_string(dcqcn).is_ok());
    assert!(toml::to_string(&plan.runs[0].config).is_ok());
}

#[test]
fn a_rate_control_file_is_found_next_to_the_experiment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow.toml"),
        "algorithm = \"dcqcn-paper\"\ng = 0.0625\n",
    )
    .unwrap();
    let text = file(
        "",
        "kind = \"incast\"\nsenders = 2",
        &format!("[transport]\ncc = \"slow.toml\"\n{LONG}"),
    );
    let p = LabFile::parse(&text, "t.toml", dir.path())
        .unwrap()
        .plan()
        .unwrap();
    let r = &p.runs[0].resolved.transport;
    assert_eq!(r.cc.name(), "dcqcn-paper");
    assert_eq!(r.min_time_between_cnps_ns, 50_000);
    let bad = file(
        "",
        "kind = \"incast\"\nsenders = 2",
        &format!("[transport]\ncc = \"nothing.toml\"\n{LONG}"),
    );
    assert!(LabFile::parse(&bad, "t.toml", dir.path())
        .unwrap()
        .plan()
        .is_err());
}

mod no_panics {
    use super::*;
    use proptest::prelude::*;

    const KEYS: &[&str] = &[
        "seed",
        "duration_us",
        "queue_sample_ns",
        "rate_sample_us",
        "drain_limit_us",
        "topology.kind",
        "topology.senders",
        "topology.pairs",
        "topology.leaves",
        "topology.spines",
        "topology.hosts_per_leaf",
        "topology.switches",
        "topology.hosts",
        "topology.links",
        "topology.groups",
        "topology.mtu",
        "topology.host_link.rate_gbps",
        "topology.fabric_link.delay_us",
        "switch.buffer_kb",
        "switch.port_buffer_kb",
        "switch.strict_priorities",
        "switch.ecn.kmin_kb",
        "switch.ecn.pmax",
        "switch.pfc.enabled",
        "switch.pfc.xon_kb",
        "switch.pfc.quanta",
        "transport.cc",
        "transport.message_kb",
        "transport.window",
        "transport.timeout",
        "transport.icrc_offload",
        "transport.place_writes",
        "transport.recovery",
        "transport.rto_low_us",
        "workload.0.from",
        "workload.0.stop_us",
        "workload.1.senders",
        "workload.1.size_kb",
        "workload.1.repeat_us",
        "workload.1.count",
        "workload.2.hosts",
        "workload.3.hosts",
        "workload.3.size_kb",
        "workload.4.load",
        "workload.4.max_flows",
        "workload.4.file",
        "workload.0.kind",
        "link_event.0.link.index",
        "link_event.0.at_us",
        "route.0.via",
        "route.0.dst",
        "output.queues",
        "switch.ecn.scale_per_25g",
        "switch.pfc.threshold",
        "switch.pfc.alpha",
        "switch.pfc.resume_offset_kb",
        "output.fct_tags",
        "output.fct_bin_pct",
        "output.throughput_flows",
        "output.throughput_tags",
        "sweep.key",
        "variant.0.name",
        "nonsense.key",
    ];

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "-1",
                "0",
                "1",
                "2",
                "3",
                "7",
                "8",
                "64",
                "4095",
                "4096",
                "65536",
                "1000000",
                "9223372036854775807",
                "0.5",
                "1e9",
                "1e30",
                "-0.0",
                "nan",
                "inf",
                "true",
                "\"\"",
                "\"all\"",
                "\"leaf0\"",
                "\"h0-0\"",
                "\"incast\"",
                "\"custom\"",
                "\"dumbbell\"",
                "\"allreduce\"",
                "\"websearch.csv\"",
                "\"none\"",
                "[]",
                "[\"h1-0\", \"h0-1\"]",
                "[9]",
                "[[1]]",
                "{}",
                "{ a = 1 }",
                "[{ name = \"x\", switch = \"leaf0\" }]",
                "[\"leaf0:spine0\"]",
            ])
            .prop_map(str::to_string),
            any::<i64>().prop_map(|v| v.to_string()),
            (-1e7f64..1e7).prop_map(|v| format!("{v:?}")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any value at any key of the example: an error or a plan whose
        /// flows can be made, never a panic.
        #[test]
        fn any_override_of_the_example_is_an_error_or_a_plan(
            sets in prop::collection::vec((prop::sample::select(KEYS), value()), 1..4)
        ) {
            let text = std::fs::read_to_string(lab_dir().join("example.toml")).unwrap();
            let mut set = String::new();
            for (k, v) in &sets {
                set.push_str(&format!("\"{k}\" = {v}, "));
            }
            let text = format!("{text}\n[[variant]]\nname = \"fuzz\"\nset = {{ {set} }}\n");
            let Ok(file) = LabFile::parse(&text, "t.toml", &lab_dir()) else { return Ok(()) };
            if let Ok(plan) = file.plan() {
                let run = plan.runs.last().unwrap();
                let flows = workload::generate(&run.config, &run.resolved.topology, 1).unwrap();
                prop_assert!(flows.len() as u64 <= run.resolved.flows_bound);
            }
        }

        /// Arbitrary text is an error, not a panic.
        #[test]
        fn any_text_is_an_error_or_a_file(text in "[a-z_=\\[\\]\"\\.0-9 \n{},-]{0,200}") {
            if let Ok(f) = LabFile::parse(&text, "t.toml", &lab_dir()) {
                let _ = f.plan();
            }
        }
    }
}

#[test]
fn transport_cc_takes_every_rate_control_by_name_and_every_shipped_parameter_file() {
    let topo = "kind = \"incast\"\nsenders = 2";
    for name in crate::cc::CcConfig::NAMES {
        let r = one(&file(
            "",
            topo,
            &format!("[transport]\ncc = \"{name}\"\n{LONG}"),
        ));
        assert_eq!(r.transport.cc.name(), name);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/cc");
    let mut files = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = file(
                "",
                topo,
                &format!("[transport]\ncc = \"../cc/{name}\"\n{LONG}"),
            );
            let r = one(&text);
            assert!(
                crate::cc::CcConfig::NAMES.contains(&r.transport.cc.name()),
                "{name}"
            );
            files += 1;
        }
    }
    assert!(files >= 2, "{}", dir.display());
}

/// A file of `topo` with one long flow, planned with `dir` as its folder.
fn plan_in(dir: &Path, topo: &str) -> Result<LabPlan, LabConfigError> {
    LabFile::parse(&file("", topo, LONG), "t.toml", dir)?.plan()
}

const HPCC_320: &str = "kind = \"fat-tree\"\npods = 5\ntors_per_pod = 4\naggs_per_pod = 4\n\
                        cores = 16\nhosts_per_tor = 16\nhost_link = { rate_gbps = 100 }\n\
                        fabric_link = { rate_gbps = 400 }";

#[test]
fn a_k_ary_fat_tree_has_k_pods_and_routes_from_the_first_pod_to_the_last() {
    let t = one(&file("", "kind = \"fat-tree\"\nk = 4", LONG)).topology;
    // k^3/4 hosts; k pods of k/2 + k/2 switches and (k/2)^2 cores.
    assert_eq!((t.hosts.len(), t.switches.len()), (16, 20));
    // Each ToR to its pod's 2 aggs (16 links); each agg to 2 cores (16).
    assert_eq!(t.links.len(), 32);
    let sw = |n: &str| t.switch_index(n).unwrap();
    assert_eq!(t.hosts[0].name, "h0");
    assert_eq!(t.hosts[0].switch, sw("tor0"));
    assert_eq!(t.hosts[15].switch, sw("tor7"));
    assert_eq!(t.group("tor1"), Some(&[2, 3][..]));
    assert_eq!(t.group("pod3"), Some(&[12, 13, 14, 15][..]));
    assert_eq!(t.group("all").unwrap().len(), 16);
    // tor2 (pod 1) reaches agg2 and agg3; agg j of each pod reaches
    // cores 2j and 2j + 1.
    assert_eq!(t.links_between(sw("tor2"), sw("agg2")).len(), 1);
    assert_eq!(t.links_between(sw("tor2"), sw("agg3")).len(), 1);
    assert!(t.links_between(sw("tor2"), sw("agg0")).is_empty());
    for (agg, cores) in [("agg0", [0, 1]), ("agg3", [2, 3]), ("agg6", [0, 1])] {
        for c in 0..4 {
            let linked = !t.links_between(sw(agg), sw(&format!("core{c}"))).is_empty();
            assert_eq!(linked, cores.contains(&c), "{agg} core{c}");
        }
    }
    // h0 (pod 0) to h15 (pod 3): host, ToR, agg, core, agg, ToR, host.
    let p = t.path(0, 15).unwrap();
    assert_eq!(
        (p.hops, p.bottleneck_bps, p.delay_ns),
        (6, 100_000_000_000, 6000)
    );
    // Within a pod: up to an agg and down; within a ToR: one switch.
    assert_eq!(t.path(0, 2).unwrap().hops, 4);
    assert_eq!(t.path(0, 1).unwrap().hops, 2);
}

/// The HPCC simulator's 320-host fat tree in its own topology format,
/// written from the wiring of its `simulation/mix/fat.txt`: hosts 0..319
/// on ToRs 320..339 (16 each); ToR 320 + t to aggregation switches
/// 340 + 4 (t / 4) .. + 3; aggregation switch 340 + a to cores
/// 360 + 4 (a % 4) .. + 3.
fn hpcc_fat_tree_file() -> String {
    let mut links = Vec::new();
    for h in 0..320 {
        links.push(format!("{h} {} 100Gbps 1000ns 0.000000", 320 + h / 16));
    }
    for t in 0..20 {
        for j in 0..4 {
            links.push(format!(
                "{} {} 400Gbps 1000ns 0.000000",
                320 + t,
                340 + 4 * (t / 4) + j
            ));
        }
    }
    for a in 0..20 {
        for c in 0..4 {
            links.push(format!(
                "{} {} 400Gbps 1000ns 0.000000",
                340 + a,
                360 + 4 * (a % 4) + c
            ));
        }
    }
    let ids: Vec<String> = (320..376).map(|i| i.to_string()).collect();
    format!(
        "376 56 {}\n{}\n{}\n",
        links.len(),
        ids.join(" "),
        links.join("\n")
    )
}

#[test]
fn the_hpcc_papers_320_host_fat_tree_is_wired_as_the_hpcc_simulators_file() {
    let ft = one(&file("", HPCC_320, LONG)).topology;
    assert_eq!(
        (ft.hosts.len(), ft.switches.len(), ft.links.len()),
        (320, 56, 160)
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fat.txt"), hpcc_fat_tree_file()).unwrap();
    let plan = plan_in(dir.path(), "kind = \"hpcc\"\nfile = \"fat.txt\"").unwrap();
    let hp = &plan.runs[0].resolved.topology;
    assert_eq!(
        (hp.hosts.len(), hp.switches.len(), hp.links.len()),
        (320, 56, 160)
    );
    // Node ids of the HPCC file: ToRs from 320, aggs from 340, cores
    // from 360.
    let node = |name: &str| -> String {
        let n = |p: &str| name.strip_prefix(p).map(|i| i.parse::<usize>().unwrap());
        let id = n("tor").map(|i| 320 + i).or(n("agg").map(|i| 340 + i));
        let id = id.or(n("core").map(|i| 360 + i)).or(n("h")).unwrap();
        format!("n{id}")
    };
    for (i, h) in ft.hosts.iter().enumerate() {
        assert_eq!(node(&h.name), hp.hosts[i].name);
        assert_eq!(
            node(&ft.switches[h.switch].name),
            hp.switches[hp.hosts[i].switch].name
        );
        assert_eq!(h.link, hp.hosts[i].link);
    }
    let pairs = |t: &TopologySpec, map: &dyn Fn(&str) -> String| {
        let mut v: Vec<(String, String, LinkSpec)> = t
            .links
            .iter()
            .map(|l| {
                let (a, b) = (map(&t.switches[l.a].name), map(&t.switches[l.b].name));
                (a.clone().min(b.clone()), a.max(b), l.link)
            })
            .collect();
        v.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
        v
    };
    assert_eq!(pairs(&ft, &node), pairs(hp, &|n: &str| n.to_string()));
    assert!(ft.links.iter().all(|l| l.link.rate_bps == 400_000_000_000));
    // A host of pod 0 reaches one of the last pod over six links.
    let p = ft.path(0, 319).unwrap();
    assert_eq!((p.hops, p.bottleneck_bps), (6, 100_000_000_000));
    assert_eq!(ft.group("pod4").unwrap().len(), 64);
    assert_eq!(ft.group("tor19").unwrap().len(), 16);
}

#[test]
fn impossible_fat_trees_are_refused_with_the_reason() {
    let e = |topo: &str| plan(&file("", topo, LONG)).unwrap_err().to_string();
    let ft = |keys: &str| format!("kind = \"fat-tree\"\n{keys}");
    assert!(e(&ft("k = 5")).contains("topology.k: 5 is not an even number"));
    assert!(e(&ft("k = 0")).contains("topology.k: 0 is not an even number"));
    // k = 26: 4394 hosts.
    let msg = e(&ft("k = 26"));
    assert!(
        msg.contains("topology.k: 338 ToRs of 13 hosts are more than 4096 hosts"),
        "{msg}"
    );
    let explicit = |cores: usize, hosts: usize| {
        ft(&format!(
            "pods = 2\ntors_per_pod = 2\naggs_per_pod = 3\ncores = {cores}\nhosts_per_tor = {hosts}"
        ))
    };
    assert!(plan(&file("", &explicit(6, 2), LONG)).is_ok());
    let msg = e(&explicit(4, 2));
    assert!(
        msg.contains("topology.cores: 4 cores do not divide among 3 aggregation switches"),
        "{msg}"
    );
    assert!(e(&explicit(6, 0)).contains("topology.hosts_per_tor: must be at least 1"));
    assert!(e(&explicit(6, 1025)).contains("more than 4096 hosts"));
    assert!(e(&ft("pods = 2")).contains("topology.tors_per_pod: is required by fat-tree"));
    assert!(e(&ft("k = 4\ncores = 4")).contains("topology.cores: is set by k"));
    let msg = e(&ft(
        "pods = 3000\ntors_per_pod = 1\naggs_per_pod = 1\ncores = 1\nhosts_per_tor = 1",
    ));
    assert!(msg.contains("more than 4096 switches"), "{msg}");
    let msg = e(&ft(
        "pods = 1\ntors_per_pod = 300\naggs_per_pod = 300\ncores = 300\nhosts_per_tor = 1",
    ));
    assert!(
        msg.contains("switch-to-switch links, more than 65536"),
        "{msg}"
    );
    // Keys of one kind in another.
    assert!(e("kind = \"incast\"\nsenders = 2\nk = 4").contains("fat-tree topologies"));
    assert!(e("kind = \"incast\"\nsenders = 2\nfile = \"x\"").contains("hpcc topologies"));
}

#[test]
fn an_hpcc_topology_file_names_its_nodes_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let topo = "kind = \"hpcc\"\nfile = \"t.txt\"";
    // Switch ids 1 and 4; hosts 0, 2, 3, 5 (host 5 on switch 1, so ids
    // and positions differ); parallel switch links; mixed units.
    std::fs::write(
        dir.path().join("t.txt"),
        "6 2 6\n4 1\n0 1 100Gbps 0.001ms 0\n2 1 25Gb/s 500ns 0\n\n3 4 1.6e1Gbps 2us 0\n\
         4 5 10GBps 1us 0.000000\n1 4 400Gbps 1us 0\n4 1 400Gbps 1us 0\n",
    )
    .unwrap();
    let r = &plan_in(dir.path(), topo).unwrap().runs[0].resolved;
    let t = &r.topology;
    let names = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        t.switches
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>(),
        names(vec!["n1", "n4"])
    );
    assert_eq!(
        t.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
        names(vec!["n0", "n2", "n3", "n5"])
    );
    let link = |rate_bps: u64, delay_ns: u64| LinkSpec { rate_bps, delay_ns };
    assert_eq!(t.hosts[0].link, link(100_000_000_000, 1000));
    assert_eq!(t.hosts[1].link, link(25_000_000_000, 500));
    assert_eq!(t.hosts[2].link, link(16_000_000_000, 2000));
    assert_eq!(t.hosts[3].link, link(80_000_000_000, 1000));
    assert_eq!(t.links.len(), 2);
    assert_eq!(t.links_between(0, 1), vec![0, 1]);
    assert_eq!(t.group("n1"), Some(&[0, 1][..]));
    assert_eq!(t.group("n4"), Some(&[2, 3][..]));
    assert!(t.port_named("n4:n1#1").is_ok());
    // fabric_link has no meaning here.
    let e = plan_in(
        dir.path(),
        &format!("{topo}\nfabric_link = {{ rate_gbps = 1 }}"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("topology.fabric_link: is not used by hpcc"),
        "{e}"
    );
    let e = plan_in(dir.path(), "kind = \"hpcc\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("topology.file: is required"), "{e}");
}

#[test]
fn each_bad_line_of_an_hpcc_topology_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.txt");
    let err = |text: &str| {
        std::fs::write(&path, text).unwrap();
        let e = plan_in(dir.path(), "kind = \"hpcc\"\nfile = \"t.txt\"")
            .unwrap_err()
            .to_string();
        // t.toml: topology.file: <dir>/t.txt:LINE: what
        assert!(e.starts_with("t.toml: topology.file: "), "{e}");
        assert!(e.contains(&*path.display().to_string()), "{e}");
        e.split("t.txt").last().unwrap().to_string()
    };
    let ok = "3 1 2\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n";
    std::fs::write(&path, ok).unwrap();
    assert!(plan_in(dir.path(), "kind = \"hpcc\"\nfile = \"t.txt\"").is_ok());
    let cases = [
        ("", ": is empty"),
        (
            "3 1\n",
            ":1: expected 3 fields (node count, switch count, link count), found 2",
        ),
        ("3 x 2\n", ":1: switch count \"x\" is not a whole number"),
        ("3 0 2\n\n", ":1: the switch count is 0"),
        (
            "3 3 2\n0 1 2\n",
            ":1: 3 switches among 3 nodes leave no host",
        ),
        ("3 1 2\n", ": ends before the line of switch ids (line 2)"),
        (
            "3 1 2\n2 1\n",
            ":2: lists 2 switch ids; line 1 says 1 switches",
        ),
        ("3 1 2\n3\n", ":2: switch id 3 is above 2"),
        ("4 2 2\n3 3\n", ":2: switch id 3 is listed twice"),
        (
            "3 1 2\n2\n0 2 100Gbps 1us\n",
            ":3: expected 5 fields (node, node, rate, delay, error rate), found 4",
        ),
        ("3 1 2\n2\n0 5 100Gbps 1us 0\n", ":3: node 5 is above 2"),
        (
            "3 1 2\n2\n2 2 100Gbps 1us 0\n",
            ":3: links node 2 to itself",
        ),
        (
            "3 1 2\n2\n0 2 100Gbit 1us 0\n",
            ":3: rate \"100Gbit\" has no unit",
        ),
        (
            "3 1 2\n2\n0 2 100Xbps 1us 0\n",
            ":3: rate \"100Xbps\": unit prefix \"X\"",
        ),
        (
            "3 1 2\n2\n0 2 0Gbps 1us 0\n",
            ":3: rate \"0Gbps\" is outside",
        ),
        (
            "3 1 2\n2\n0 2 100Gbps 1 0\n",
            ":3: delay \"1\" needs a unit",
        ),
        (
            "3 1 2\n2\n0 2 100Gbps 1min 0\n",
            ":3: delay \"1min\": unit \"min\"",
        ),
        (
            "3 1 2\n2\n0 2 100Gbps 1s 0\n",
            ":3: delay \"1s\" is outside 0..=100 ms",
        ),
        (
            "3 1 2\n2\n0 2 100Gbps 1us 0.01\n",
            ":3: error rate 0.01: the simulated fabric drops no frame",
        ),
        (
            "3 1 2\n2\n0 2 100Gbps 1us x\n",
            ":3: error rate \"x\" is not a number",
        ),
        (
            "3 1 2\n2\n0 1 100Gbps 1us 0\n",
            ":3: links two hosts (0 and 1",
        ),
        (
            "3 1 3\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n2 0 100Gbps 1us 0\n",
            ":5: host 0 already has a link (line 3)",
        ),
        (
            "3 1 1\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n",
            ":4: a link past the 1 that line 1 announces",
        ),
        (
            "3 1 3\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n",
            ": line 1 announces 3 links, but 2 follow",
        ),
        (
            "3 1 1\n2\n0 2 100Gbps 1us 0\n",
            ": node 1 is a host (not on line 2's switch list) with no link",
        ),
    ];
    for (text, want) in cases {
        let got = err(text);
        assert!(got.starts_with(want), "{text:?}: {got}");
    }
    // Switches the file leaves apart are refused as any topology's are.
    std::fs::write(&path, "4 2 2\n2 3\n0 2 1Gbps 1us 0\n1 3 1Gbps 1us 0\n").unwrap();
    let e = plan_in(dir.path(), "kind = \"hpcc\"\nfile = \"t.txt\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("switch n3 is not connected to switch n2"), "{e}");
    let e = plan_in(dir.path(), "kind = \"hpcc\"\nfile = \"missing.txt\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot read") && e.contains("missing.txt"),
        "{e}"
    );
}

/// `transport.recovery`: "gbn" by default, "sr" gives every QP selective
/// repeat; another word is refused by name, and so is a window that sr
/// cannot track (more than 4096 packets in flight).
#[test]
fn transport_recovery_is_gbn_or_sr_and_sr_bounds_the_window() {
    use crate::transport::Recovery;
    let with = |pairs: &[(&str, &str)]| {
        let mut table: toml::Table = toml::from_str(BASE).unwrap();
        for (key, value) in pairs {
            let v: toml::Table = toml::from_str(&format!("v = {value}")).unwrap();
            set_key(&mut table, key, v["v"].clone()).unwrap();
        }
        let text = toml::to_string(&table).unwrap();
        LabConfig::parse(&text, "t.toml", &lab_dir()).and_then(|c| c.resolve())
    };
    let r = with(&[]).unwrap();
    assert_eq!(r.qp_settings().unwrap().1.recovery, Recovery::GoBackN);
    let r = with(&[("transport.recovery", "\"sr\"")]).unwrap();
    assert_eq!(r.transport.recovery, Recovery::Selective);
    assert_eq!(r.qp_settings().unwrap().1.recovery, Recovery::Selective);
    let e = error_with("transport.recovery", "\"irn\"").to_string();
    assert!(e.contains("recovery"), "{e}");
    let e = with(&[
        ("transport.recovery", "\"sr\""),
        ("transport.window", "4096"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("transport.window") && e.contains("at most 4096"),
        "{e}"
    );
}
