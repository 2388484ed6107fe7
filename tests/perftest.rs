//! The perftest tools against themselves in two processes: over DPDK's
//! net_memif (shared memory, no root; the TCP exchange on localhost), and
//! over net_af_packet on a veth pair between two network namespaces (root;
//! the exchange through the namespaces' kernels). Each run records the
//! client's frames, which `ferroce decode` must find all well formed.
#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One tool's small run and what its table row must start with.
struct Case {
    tool: &'static str,
    args: &'static [&'static str],
    /// The row's start (size, then iterations).
    row: &'static str,
}

const CASES: &[Case] = &[
    Case {
        tool: "write-bw",
        args: &["-n", "200", "-q", "2"],
        row: " 65536      400 ",
    },
    Case {
        tool: "read-bw",
        args: &["-n", "500", "-s", "1000", "--report_gbits"],
        row: " 1000       500 ",
    },
    Case {
        tool: "send-bw",
        args: &["-n", "300", "-s", "4096"],
        row: " 4096       300 ",
    },
    Case {
        tool: "atomic-bw",
        args: &["-n", "500"],
        row: " 8          500 ",
    },
    Case {
        tool: "write-lat",
        args: &["-n", "100", "-s", "64"],
        row: " 64      100 ",
    },
    Case {
        tool: "read-lat",
        args: &["-n", "100", "-s", "2000"],
        row: " 2000    100 ",
    },
    Case {
        tool: "send-lat",
        args: &["-n", "100"],
        row: " 2       100 ",
    },
];

fn tool_args(c: &Case, cfg: &Path, port: &str, tcp: &str) -> Vec<String> {
    let mut v: Vec<String> = [
        c.tool,
        "--config",
        cfg.to_str().unwrap(),
        "--port",
        port,
        "-p",
        tcp,
        "--stats",
        "--timeout-ms",
        "30000",
    ]
    .map(String::from)
    .to_vec();
    v.extend(c.args.iter().map(|s| s.to_string()));
    v
}

/// Both ends' outputs must show the run; the client's pcap must decode.
fn check(c: &Case, srv: &Output, cli: &Output, pcap: &Path) {
    let what = format!("{} {}", c.tool, c.args.join(" "));
    assert!(cli.ok(), "{what}: client failed:\n{}", cli.all());
    assert!(srv.ok(), "{what}: server failed:\n{}", srv.all());
    assert!(cli.stdout.contains(c.row), "{what}: client:\n{}", cli.all());
    // The passive read-lat server prints no numbers (as perftest's).
    if c.tool != "read-lat" {
        assert!(srv.stdout.contains(c.row), "{what}: server:\n{}", srv.all());
    }
    for o in [&cli.stdout, &srv.stdout] {
        assert!(
            o.contains(" remote address: LID 0000 QPN 0x"),
            "{what}:\n{o}"
        );
        assert!(o.contains(" counters: "), "{what}:\n{o}");
    }
    let d = run(&["decode", pcap.to_str().unwrap()], Duration::from_secs(60));
    assert!(d.ok(), "{what}: decode:\n{}", d.all());
    let totals = d.stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        totals.contains(" 0 icrc bad, 0 malformed"),
        "{what}: {totals}"
    );
    let roce: u64 = totals.split(' ').next().unwrap_or("0").parse().unwrap_or(0);
    assert!(roce > 100, "{what}: {totals}");
}

#[test]
fn every_tool_against_itself_over_memif() {
    let dir = TempDir::new();
    let sock = dir.path().join("memif.sock").display().to_string();
    let server = dir.write("server.toml", &memif_config(&sock, "server", "198.18.0.1"));
    let client = dir.write("client.toml", &memif_config(&sock, "client", "198.18.0.2"));
    for c in CASES {
        let pcap = dir.path().join(format!("{}.pcap", c.tool));
        // The server listens on a free TCP port (`-p 0`: no test beside
        // this one can meet it there) and says which; the memif socket its
        // port made exists by then, and the client is started on that port.
        let mut s = Command::new(ferroce());
        s.args(tool_args(c, &server, "m", "0"));
        let mut srv = spawn(&mut s, Duration::from_secs(90));
        let tcp = srv
            .wait_for("listening on TCP port ", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{}: server: {e}", c.tool));
        let mut k = Command::new(ferroce());
        k.args(tool_args(c, &client, "m", &tcp))
            .arg("--pcap")
            .arg(&pcap)
            .arg("127.0.0.1");
        let cli = spawn(&mut k, Duration::from_secs(90)).wait();
        let srv = srv.wait();
        check(c, &srv, &cli, &pcap);
    }
}

/// Over a veth pair between two network namespaces through
/// net_af_packet; the kernels own 10.99.1.x for the TCP exchange, ferroce
/// 198.18.0.x on the same link for RoCE (it answers ARP for them). Needs
/// root: ignored unless asked for.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it as root)"]
fn every_tool_against_itself_over_af_packet_between_namespaces() {
    assert!(is_root(), "needs root to create network namespaces");
    let veth = VethPair::new("pt", 9000);
    veth.kernel_addrs(["10.99.1.1/24", "10.99.1.2/24"]);
    let dir = TempDir::new();
    let a = dir.write("a.toml", &af_packet_config("198.18.0.1"));
    let b = dir.write("b.toml", &af_packet_config("198.18.0.2"));
    for (i, c) in CASES.iter().enumerate() {
        let tcp = (18515 + i).to_string();
        let pcap = dir.path().join(format!("{}.pcap", c.tool));
        let mut server = veth.command(1, &tool_args(c, &b, "p", &tcp));
        let mut args = tool_args(c, &a, "p", &tcp);
        args.extend([
            "--pcap".into(),
            pcap.display().to_string(),
            "10.99.1.2".into(),
        ]);
        let mut client = veth.command(0, &args);
        let srv = spawn(&mut server, Duration::from_secs(90));
        let cli = spawn(&mut client, Duration::from_secs(90)).wait();
        let srv = srv.wait();
        check(c, &srv, &cli, &pcap);
    }
}

/// `ferroce demo` with one end per process: a one-port config makes the
/// process one end of the demo's tools (the server, or the client with
/// `--peer`), over net_memif.
#[test]
fn the_demo_in_two_processes_over_memif() {
    demo_over_memif(false);
}

/// The same with `zero_copy = true` on both ends: net_memif takes the
/// chained frames whose payload is an mbuf pointing into the region, and
/// every tool's bytes still verify.
#[test]
fn the_demo_in_two_processes_over_memif_with_zero_copy_send() {
    demo_over_memif(true);
}

fn demo_over_memif(zero_copy: bool) {
    let dir = TempDir::new();
    let sock = dir.path().join("memif.sock").display().to_string();
    let pcap = dir.path().join("demo.pcap");
    let tools = |port: u32| {
        format!(
            "\n[tools]\niters = 100\npcap = \"{}\"\ntcp_port = {port}\n",
            pcap.display()
        )
    };
    // Five ports from `port`, below Linux's ephemeral range (32768 and
    // up): a port in it can be held by any test's outgoing connection, or
    // taken by the client's own connect while the server is not yet
    // listening, and the server's bind then fails (seen in CI: "no server
    // at 127.0.0.1:35984").
    let port = 20000 + std::process::id() % 1000 * 12 + if zero_copy { 6 } else { 0 };
    let zc = if zero_copy { "zero_copy = true\n" } else { "" };
    let server = dir.write(
        "server.toml",
        &(memif_config(&sock, "server", "198.18.0.1") + zc + &tools(port)),
    );
    let client = dir.write(
        "client.toml",
        &(memif_config(&sock, "client", "198.18.0.2") + zc + &tools(port)),
    );
    let mut s = Command::new(ferroce());
    s.args(["demo", "--config", server.to_str().unwrap()]);
    let srv = spawn(&mut s, Duration::from_secs(120));
    let t = std::time::Instant::now();
    while !Path::new(&sock).exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut k = Command::new(ferroce());
    k.args([
        "demo",
        "--config",
        client.to_str().unwrap(),
        "--peer",
        "127.0.0.1",
    ]);
    let cli = spawn(&mut k, Duration::from_secs(120)).wait();
    let srv = srv.wait();
    assert!(
        cli.ok() && srv.ok(),
        "client:\n{}\nserver:\n{}",
        cli.all(),
        srv.all()
    );
    for name in ["pingpong", "write-bw", "read-bw", "send-lat", "atomic-bw"] {
        assert!(
            cli.stdout
                .contains(&format!("== {name} (this end the client)")),
            "{}",
            cli.all()
        );
        assert!(
            srv.stdout.contains(&format!("== {name} (this end serves)")),
            "{}",
            srv.all()
        );
    }
    assert!(
        cli.stdout.contains(" 0 icrc bad, 0 malformed"),
        "{}",
        cli.all()
    );
    assert!(cli.stdout.ends_with("demo OK\n") && srv.stdout.ends_with("demo OK\n"));
    let d = run(&["decode", pcap.to_str().unwrap()], Duration::from_secs(60));
    assert!(d.ok(), "decode:\n{}", d.all());
    // write-bw: the client's 100 WRITEs of 64 KiB left from its region in
    // place (16 packets each); read-bw: the server's responses did.
    let lent = |out: &str, tool: &str| {
        let sec = out.split(&format!("== {tool}")).nth(1).unwrap_or_default();
        sec.split("== ")
            .next()
            .unwrap_or_default()
            .contains("lent_pkts=1600")
    };
    assert_eq!(lent(&cli.stdout, "write-bw"), zero_copy, "{}", cli.all());
    assert_eq!(lent(&srv.stdout, "read-bw"), zero_copy, "{}", srv.all());
}

/// Each rate control runs on the DPDK datapath between two processes over
/// net_memif, named in the `[congestion]` table of both configs; the
/// client's `--cc-trace` holds its rate decisions. Over memif no switch
/// marks CE, so the receiver takes every 20th packet as marked
/// (`mark_ce_every`): DCQCN cuts on the CNPs, DCTCP in the windows that
/// saw one. The controllers that read ACKs react to what the datapath
/// measured: TIMELY's completion events, DCTCP's windows and Swift's
/// window changes carry RTT samples taken from the engine's clock, and
/// HPCC's updates read the INT hop the sender's own port stamped (the
/// only hop on a memif link), both ends having asked for INT in
/// perftest's version exchange.
#[test]
fn every_rate_control_runs_over_memif_and_traces_its_decisions() {
    let dir = TempDir::new();
    let sock = dir.path().join("memif.sock").display().to_string();
    let case = Case {
        tool: "write-bw",
        args: &["-n", "300", "-s", "65536"],
        row: " 65536      300 ",
    };
    for cc in ["timely", "dctcp", "hpcc", "swift", "dcqcn-cx"] {
        // HPCC's one hop is the sender's own port: at 1 Gb/s, which the
        // pacer fills, it sees the link at its target and holds the rate
        // under it.
        let line = if cc == "hpcc" { 1 } else { 100 };
        // Swift starts at its largest window, where growing changes
        // nothing: it starts at 8 packets here, so that it has to grow.
        // Its 25 µs base target is a hardware fabric's: between two
        // processes on a shared host RTT samples reach milliseconds
        // (1 to 12 ms seen beside a parallel build on two cores), and
        // Swift then rightly shrinks to its floor of 0.001 packets, one
        // packet every thousand RTTs, which stalls the run. Here the
        // base target is 50 ms and the floor one packet, unpaced.
        let rate_control = match cc {
            "swift" => dir
                .write(
                    "swift.toml",
                    "algorithm = \"swift\"\ninitial_cwnd = 8.0\nmin_cwnd = 1.0\n\
                     base_target_us = 50000.0\n",
                )
                .display()
                .to_string(),
            _ => cc.to_string(),
        };
        let table =
            format!("\n[congestion]\nrate_control = \"{rate_control}\"\nline_gbps = {line}\n");
        // The receiver takes every 20th packet as CE-marked: the CNPs
        // DCQCN (and DCTCP) react to.
        let server = dir.write(
            &format!("server-{cc}.toml"),
            &(memif_config(&sock, "server", "198.18.0.1") + &table + "mark_ce_every = 20\n"),
        );
        let client = dir.write(
            &format!("client-{cc}.toml"),
            &(memif_config(&sock, "client", "198.18.0.2") + &table),
        );
        let pcap = dir.path().join(format!("{cc}.pcap"));
        let trace = dir.path().join(format!("{cc}.csv"));
        let mut s = Command::new(ferroce());
        s.args(tool_args(&case, &server, "m", "0"));
        let mut srv = spawn(&mut s, Duration::from_secs(90));
        let tcp = srv
            .wait_for("listening on TCP port ", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{cc}: server: {e}"));
        let mut k = Command::new(ferroce());
        k.args(tool_args(&case, &client, "m", &tcp))
            .arg("--pcap")
            .arg(&pcap)
            .arg("--cc-trace")
            .arg(&trace)
            .arg("127.0.0.1");
        let cli = spawn(&mut k, Duration::from_secs(90)).wait();
        let srv = srv.wait();
        check(&case, &srv, &cli, &pcap);
        let csv = std::fs::read_to_string(&trace).unwrap_or_else(|e| panic!("{cc}: {e}"));
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some(
                "qp,time_ns,event,rate_bps,target_bps,alpha,timer_stage,byte_stage,rtt_ns,\
                 window_bytes"
            ),
            "{cc}"
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        match cc {
            // 300 x 64 KiB, each message's ACK a completion event (it
            // covers four 16 KiB segments; ACKs may cover several).
            // (CNPs of the emulated marks are ignored: TIMELY reads delay.)
            "timely" => {
                let rtt: Vec<_> = rows.iter().filter(|r| r[2] != "cnp_ignored").collect();
                assert!(rtt.len() >= 100, "{cc}: {} rows\n{csv}", rtt.len());
                assert!(rtt.iter().all(|r| r[2].starts_with("rtt_")), "{cc}\n{csv}");
                assert!(rtt.iter().all(|r| r[8] != "0"), "{cc}\n{csv}");
            }
            // Every window of one RTT (milliseconds over memif) sees a
            // mark: the rate halves and halves again.
            "dctcp" => {
                let d: Vec<_> = rows.iter().filter(|r| r[2] != "cnp").collect();
                assert!(!d.is_empty(), "{cc}: no window ended\n{}", cli.all());
                assert!(d.iter().any(|r| r[2] == "cut"), "{cc}\n{csv}");
                assert!(d.iter().all(|r| r[8] != "0"), "{cc}\n{csv}");
            }
            // Updates from the INT its own port stamped, cuts among them.
            "hpcc" => {
                assert!(rows.len() >= 10, "{cc}: {} rows\n{}", rows.len(), cli.all());
                let int: Vec<_> = rows.iter().filter(|r| r[2] != "cnp_ignored").collect();
                assert!(int.iter().all(|r| r[2].starts_with("int_")), "{cc}\n{csv}");
                assert!(int.iter().any(|r| r[2] == "int_cut"), "{cc}\n{csv}");
                assert!(int.iter().all(|r| r[8] != "0"), "{cc}\n{csv}");
            }
            // The window grows from 8 packets while the RTT is below the
            // target (and shrinks if a sample is above it).
            // (CNPs of the emulated marks are ignored: Swift reads delay.)
            "swift" => {
                let rows: Vec<_> = rows.iter().filter(|r| r[2] != "cnp_ignored").collect();
                assert!(!rows.is_empty(), "{cc}: no decision\n{}", cli.all());
                assert!(
                    rows.iter().any(|r| r[2] == "window_increase"),
                    "{cc}\n{csv}"
                );
                assert!(
                    rows.iter().all(|r| r[2].starts_with("window_")),
                    "{cc}\n{csv}"
                );
                assert!(rows.iter().all(|r| r[8] != "0"), "{cc}\n{csv}");
                assert!(
                    rows.iter().all(|r| r[9].parse::<u64>().unwrap_or(0) > 0),
                    "{cc}: every row has a window\n{csv}"
                );
            }
            // DCQCN acts on the CNPs of the emulated marks only.
            _ => {
                assert!(rows.iter().any(|r| r[2] == "cnp"), "{cc}\n{csv}");
                assert!(rows.iter().any(|r| r[2] == "cut"), "{cc}\n{csv}");
            }
        }
    }
    // HPCC toward a peer that did not ask for INT (it runs DCTCP): both
    // ends refuse, each saying why, and no INT trailer is ever sent.
    let table = |cc: &str| format!("\n[congestion]\nrate_control = \"{cc}\"\nline_gbps = 1\n");
    let server = dir.write(
        "server-mixed.toml",
        &(memif_config(&sock, "server", "198.18.0.1") + &table("dctcp")),
    );
    let client = dir.write(
        "client-mixed.toml",
        &(memif_config(&sock, "client", "198.18.0.2") + &table("hpcc")),
    );
    let mut s = Command::new(ferroce());
    s.args(tool_args(&case, &server, "m", "0"));
    let mut srv = spawn(&mut s, Duration::from_secs(60));
    let tcp = srv
        .wait_for("listening on TCP port ", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("mixed: server: {e}"));
    let mut k = Command::new(ferroce());
    k.args(tool_args(&case, &client, "m", &tcp))
        .arg("127.0.0.1");
    let cli = spawn(&mut k, Duration::from_secs(60)).wait();
    let srv = srv.wait();
    assert!(!cli.ok() && !srv.ok(), "{}\n{}", cli.all(), srv.all());
    assert!(
        cli.all()
            .contains("needs INT telemetry and the peer did not ask for it"),
        "{}",
        cli.all()
    );
    assert!(
        srv.all().contains("the peer asked for INT telemetry"),
        "{}",
        srv.all()
    );
}
