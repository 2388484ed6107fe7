//! `ferroce pingpong` against itself in two processes: over DPDK's
//! net_memif (shared memory, no root; the TCP exchange on localhost), and
//! over net_af_packet on a veth pair between two network namespaces (root;
//! the exchange through the namespaces' kernels). ARP and the RC transport
//! run over the link; ibv_rc_pingpong's output on both sides.
#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

fn pingpong(size: u32, iters: u32, mtu: u32) {
    let dir = TempDir::new();
    let sock = dir.path().join("memif.sock").display().to_string();
    let server = dir.write("server.toml", &memif_config(&sock, "server", "198.18.0.1"));
    let client = dir.write("client.toml", &memif_config(&sock, "client", "198.18.0.2"));
    let what = format!("pingpong -s {size} -n {iters} -m {mtu}");
    let args = |cfg: &std::path::Path, tcp: &str| -> Vec<String> {
        [
            "pingpong",
            "--config",
            cfg.to_str().unwrap(),
            "--port",
            "m",
            "-p",
            tcp,
            "-s",
            &size.to_string(),
            "-n",
            &iters.to_string(),
            "-m",
            &mtu.to_string(),
            "--stats",
            "--timeout-ms",
            "60000",
        ]
        .map(String::from)
        .to_vec()
    };
    // The server listens on a free TCP port (`-p 0`: no test beside this
    // one can meet it there) and says which; its memif socket exists by
    // then, and the client is started on that port.
    let mut s = Command::new(ferroce());
    s.args(args(&server, "0"));
    let mut srv = spawn(&mut s, Duration::from_secs(90));
    let tcp = srv
        .wait_for("listening on TCP port ", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{what}: server: {e}"));
    let pcap = dir.path().join("client.pcap");
    let mut c = Command::new(ferroce());
    c.args(args(&client, &tcp))
        .arg("--pcap")
        .arg(&pcap)
        .arg("127.0.0.1");
    let cli = spawn(&mut c, Duration::from_secs(90)).wait();
    let srv = srv.wait();
    assert!(cli.ok(), "{what}: client failed:\n{}", cli.all());
    assert!(srv.ok(), "{what}: server failed:\n{}", srv.all());
    for (side, out) in [("client", &cli), ("server", &srv)] {
        let o = &out.stdout;
        assert!(
            o.contains("  local address:  LID 0x0000, QPN 0x"),
            "{side}:\n{o}"
        );
        assert!(
            o.contains("  remote address: LID 0x0000, QPN 0x"),
            "{side}:\n{o}"
        );
        let bytes = size as u64 * iters as u64 * 2;
        assert!(o.contains(&format!("{bytes} bytes in ")), "{side}:\n{o}");
        assert!(o.contains(&format!("{iters} iters in ")), "{side}:\n{o}");
    }
    assert!(
        cli.stdout.contains("GID ::ffff:198.18.0.1"),
        "{}",
        cli.all()
    );
    assert!(
        srv.stdout.contains("GID ::ffff:198.18.0.2"),
        "{}",
        srv.all()
    );
    // The client's capture: every RoCE frame both ways, each with a good
    // ICRC, by `ferroce decode`; the ARP and TCP frames are skipped there.
    assert!(cli.stdout.contains("  pcap: "), "{}", cli.all());
    let d = run(&["decode", pcap.to_str().unwrap()], Duration::from_secs(60));
    assert!(d.ok(), "decode:\n{}", d.all());
    let per_msg = size.div_ceil(mtu) as u64 + 1; // packets + ACK
    let want = 2 * iters as u64 * per_msg;
    let totals = d.stdout.lines().last().unwrap_or_default().to_string();
    let roce: u64 = totals.split(' ').next().unwrap_or("0").parse().unwrap_or(0);
    assert!(roce >= want, "{totals} (want at least {want})");
    assert!(totals.contains(" 0 icrc bad, 0 malformed"), "{totals}");
    // The path MTU is the one asked for: the largest SEND payload either
    // way is the MTU (or the message, when it is shorter).
    let j = run(
        &["decode", "--json", pcap.to_str().unwrap()],
        Duration::from_secs(60),
    );
    let largest = j
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["opcode"].as_str().is_some_and(|o| o.contains("SEND")))
        .filter_map(|v| v["payload_len"].as_u64())
        .max();
    assert_eq!(
        largest,
        Some(size.min(mtu) as u64),
        "{what}: the largest SEND payload"
    );
}

/// Few iterations: two busy-polling processes on a 2-core machine see a
/// round trip of some milliseconds over memif (the link test with a
/// window of 1 shows the same), so this checks function, not speed.
#[test]
fn pingpong_against_itself_over_memif() {
    pingpong(4096, 300, 1024);
    pingpong(100, 100, 4096);
    pingpong(16384, 50, 4096);
}

/// Over a veth pair between two network namespaces through
/// net_af_packet: the kernel of each namespace owns a 10.99.0.x address
/// for the TCP exchange (as the host's own stack would), ferroce owns
/// 198.18.0.x on the same link for RoCE and answers ARP for it. Needs
/// root: ignored unless asked for.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it as root)"]
fn pingpong_against_itself_over_af_packet_between_namespaces() {
    assert!(is_root(), "needs root to create network namespaces");
    let veth = VethPair::new("pp", 9000);
    veth.kernel_addrs(["10.99.0.1/24", "10.99.0.2/24"]);
    let dir = TempDir::new();
    let a = dir.write("a.toml", &af_packet_config("198.18.0.1"));
    let b = dir.write("b.toml", &af_packet_config("198.18.0.2"));
    let args = |cfg: &std::path::Path, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "pingpong",
            "--config",
            cfg.to_str().unwrap(),
            "--port",
            "p",
            "-s",
            "4096",
            "-n",
            "200",
            "--stats",
            "--timeout-ms",
            "60000",
        ]
        .map(String::from)
        .to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let mut server = veth.command(1, &args(&b, &[]));
    let mut client = veth.command(0, &args(&a, &["10.99.0.2"]));
    let srv = spawn(&mut server, Duration::from_secs(90));
    std::thread::sleep(Duration::from_millis(700));
    let cli = spawn(&mut client, Duration::from_secs(90)).wait();
    let srv = srv.wait();
    assert!(cli.ok(), "client failed:\n{}", cli.all());
    assert!(srv.ok(), "server failed:\n{}", srv.all());
    assert!(cli.stdout.contains("1638400 bytes in "), "{}", cli.all());
    assert!(srv.stdout.contains("200 iters in "), "{}", srv.all());
    assert!(
        cli.stdout.contains("GID ::ffff:198.18.0.2"),
        "{}",
        cli.all()
    );
}
