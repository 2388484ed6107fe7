//! Two separate processes exchange RoCE frames over DPDK's net_memif (shared
//! memory) through our Port / Mbuf layer; each checks every byte it gets.
#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::process::Command;

fn exchange(payload: usize, count: u64) {
    let dir = TempDir::new();
    let sock = dir.path().join("memif.sock").display().to_string();
    let server = dir.write("server.toml", &memif_config(&sock, "server", "198.18.0.1"));
    let client = dir.write("client.toml", &memif_config(&sock, "client", "198.18.0.2"));
    let timeout = ["--timeout-ms", "60000"];
    let mut answerer = Command::new(ferroce());
    answerer.args(linktest_args(
        &server, "m", "answer", count, payload, &timeout,
    ));
    let mut sender = Command::new(ferroce());
    sender.args(linktest_args(
        &client,
        "m",
        "send",
        count,
        payload,
        &[&timeout[..], &["--peer-ip", "198.18.0.1"]].concat(),
    ));
    linktest_pair(
        answerer,
        sender,
        count,
        &format!("memif, payload {payload}"),
    );
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
