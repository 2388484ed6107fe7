//! Two separate processes exchange RoCE frames over DPDK's net_memif (shared
//! memory) through our Port / Mbuf layer; each checks every byte it gets.
#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

fn config(socket: &str, role: &str, ip: &str) -> String {
    format!(
        "[eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
         [[port]]\nname = \"m\"\ndevice = \"net_memif0,role={role},id=0,bsize=8192,socket={socket}\"\nip = \"{ip}\"\n"
    )
}

fn exchange(payload: usize, count: u64) {
    let dir = TempDir::new();
    let sock = dir.path().join("memif.sock").display().to_string();
    let server = dir.write("server.toml", &config(&sock, "server", "198.18.0.1"));
    let client = dir.write("client.toml", &config(&sock, "client", "198.18.0.2"));
    let (count_s, payload_s) = (count.to_string(), payload.to_string());
    let common = [
        "--port",
        "m",
        "--count",
        &count_s,
        "--payload",
        &payload_s,
        "--timeout-ms",
        "60000",
    ];
    let answerer = spawn(
        Command::new(ferroce())
            .args([
                "linktest",
                "--config",
                server.to_str().unwrap(),
                "--role",
                "answer",
            ])
            .args(common),
        Duration::from_secs(90),
    );
    // The server creates the socket; the client retries until it exists.
    std::thread::sleep(Duration::from_millis(300));
    let sender = spawn(
        Command::new(ferroce())
            .args([
                "linktest",
                "--config",
                client.to_str().unwrap(),
                "--role",
                "send",
                "--peer-ip",
                "198.18.0.1",
            ])
            .args(common),
        Duration::from_secs(90),
    );
    let s = sender.wait();
    let a = answerer.wait();
    assert!(s.ok(), "sender failed:\n{}", s.all());
    assert!(a.ok(), "answerer failed:\n{}", a.all());
    let want = format!("verified {count} mismatched 0");
    assert!(s.stdout.contains(&want), "sender:\n{}", s.all());
    assert!(a.stdout.contains(&want), "answerer:\n{}", a.all());
}

#[test]
fn memif_two_processes_1024_byte_payloads() {
    exchange(1024, 20_000);
}

#[test]
fn memif_two_processes_4096_byte_payloads_and_odd_lengths() {
    exchange(4096, 5_000);
    exchange(61, 5_000);
}
