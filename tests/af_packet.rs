//! Two processes in two network namespaces exchange RoCE frames over a veth
//! pair through DPDK's net_af_packet and our Port / Mbuf layer, each
//! checking every byte. The namespaces are made by the test and always
//! removed. Needs root (CAP_NET_ADMIN / CAP_NET_RAW): ignored unless asked
//! for (`-- --ignored`), as `scripts/test.sh` does when run as root.
#![cfg(feature = "dpdk")]

mod common;
use common::*;

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it as root)"]
fn af_packet_over_a_veth_between_two_namespaces() {
    assert!(is_root(), "needs root to create network namespaces");
    let veth = VethPair::new("afp", 9000);
    let dir = TempDir::new();
    let a = dir.write("a.toml", &af_packet_config("198.18.0.1"));
    let b = dir.write("b.toml", &af_packet_config("198.18.0.2"));
    for (payload, count) in [(1024, 20000), (4096, 5000), (61, 5000)] {
        let opts = ["--window", "32", "--timeout-ms", "60000"];
        let answerer = veth.command(1, &linktest_args(&b, "p", "answer", count, payload, &opts));
        let send_opts = [&opts[..], &["--peer-ip", "198.18.0.2"]].concat();
        let sender = veth.command(
            0,
            &linktest_args(&a, "p", "send", count, payload, &send_opts),
        );
        linktest_pair(
            answerer,
            sender,
            count,
            &format!("af_packet, payload {payload}"),
        );
    }
}
