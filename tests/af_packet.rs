//! Two processes in two network namespaces exchange RoCE frames over a veth
//! pair through DPDK's net_af_packet and our Port / Mbuf layer, each
//! checking every byte. The namespaces are made by the test and always
//! removed. Needs root (CAP_NET_ADMIN / CAP_NET_RAW); skipped otherwise.
#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::time::Duration;

fn config(ip: &str) -> String {
    format!(
        "[eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
         [[port]]\nname = \"p\"\n\
         device = \"net_af_packet0,iface=veth0,framesz=4352,blocksz=69632,framecnt=512,qdisc_bypass=1\"\n\
         ip = \"{ip}\"\n"
    )
}

#[test]
fn af_packet_over_a_veth_between_two_namespaces() {
    if !is_root() {
        eprintln!("SKIPPED af_packet_over_a_veth_between_two_namespaces: needs root to create network namespaces");
        return;
    }
    let veth = VethPair::new("afp", 9000);
    let dir = TempDir::new();
    let a = dir.write("a.toml", &config("198.18.0.1"));
    let b = dir.write("b.toml", &config("198.18.0.2"));
    for (payload, count) in [("1024", "20000"), ("4096", "5000"), ("61", "5000")] {
        let args = |cfg: &std::path::Path, role: &'static str| -> Vec<String> {
            let mut v: Vec<String> = [
                "linktest",
                "--config",
                cfg.to_str().unwrap(),
                "--port",
                "p",
                "--role",
                role,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            v.extend(
                [
                    "--count",
                    count,
                    "--payload",
                    payload,
                    "--window",
                    "32",
                    "--timeout-ms",
                    "60000",
                ]
                .map(String::from),
            );
            v
        };
        let aa = args(&b, "answer");
        let answerer = spawn(
            &mut veth.command(1, &aa.iter().map(String::as_str).collect::<Vec<_>>()),
            Duration::from_secs(90),
        );
        std::thread::sleep(Duration::from_millis(500));
        let mut sa = args(&a, "send");
        sa.extend(["--peer-ip".into(), "198.18.0.2".into()]);
        let sender = spawn(
            &mut veth.command(0, &sa.iter().map(String::as_str).collect::<Vec<_>>()),
            Duration::from_secs(90),
        );
        let s = sender.wait();
        let r = answerer.wait();
        assert!(s.ok(), "payload {payload}: sender failed:\n{}", s.all());
        assert!(r.ok(), "payload {payload}: answerer failed:\n{}", r.all());
        let want = format!("verified {count} mismatched 0");
        assert!(
            s.stdout.contains(&want) && r.stdout.contains(&want),
            "{}\n{}",
            s.all(),
            r.all()
        );
    }
}
