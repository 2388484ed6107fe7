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

/// What an af_packet port carries follows the kernel interface and the
/// ring slots: `ferroce info` on a veth of MTU 9000 offers path MTU 4096;
/// at MTU 1500 it offers 1024, and `-m 4096` is an error naming the limit
/// (not a silent 1024).
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it as root)"]
fn af_packet_port_mtu_follows_the_interface() {
    assert!(is_root(), "needs root to create network namespaces");
    let veth = VethPair::new("afm", 9000);
    let dir = TempDir::new();
    let cfg = dir.write("a.toml", &af_packet_config("198.18.0.1"));
    let info = |veth: &VethPair| {
        let out = veth
            .command(0, &["info", "--config", cfg.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = info(&veth);
    assert!(
        text.contains(
            "port p: mtu 4272, frames up to 4286 B, path MTU up to 4096 (ring slots of 4352 B"
        ),
        "{text}"
    );
    assert!(text.contains("interface veth0 has MTU 9000"), "{text}");
    ip_ok(&["-n", &veth.ns[0], "link", "set", "veth0", "mtu", "1500"]);
    let text = info(&veth);
    assert!(
        text.contains("port p: mtu 1500, frames up to 1518 B, path MTU up to 1024 (MTU 1500 of interface veth0"),
        "{text}"
    );
    for tool in [&["write-bw", "-x", "0"][..], &["pingpong", "-g", "0"][..]] {
        let mut args = tool.to_vec();
        args.extend([
            "--config",
            cfg.to_str().unwrap(),
            "--port",
            "p",
            "-m",
            "4096",
            "--timeout-ms",
            "5000",
        ]);
        args.push("198.18.0.2");
        let out = veth.command(0, &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{} {err}", tool[0]);
        assert!(
            err.contains("-m 4096: path MTU 4096 is more than this port carries: path MTU at most 1024, frames up to 1518 B (MTU 1500 of interface veth0"),
            "{}: {err}",
            tool[0]
        );
    }
}
