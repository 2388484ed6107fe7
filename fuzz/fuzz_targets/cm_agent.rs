//! Fuzzes the CM agent's receive side: the input is cut into MADs (the
//! first byte of each chunk picks its length), fed to a listening agent
//! with the clock moving on, and every MAD the agent sends must parse. No
//! input may panic it.

#![no_main]

use ferroce::cm::{CmAgent, CmConfig, MadPeer};
use ferroce::time::{Duration, Instant};
use ferroce::wire::mad::CmMad;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let me: core::net::IpAddr = "198.18.0.2".parse().unwrap();
    let peer = MadPeer {
        gid: "198.18.0.3".parse().unwrap(),
        local_gid: me,
        qpn: 1,
        pkey: 0xFFFF,
    };
    let mut a = CmAgent::new(CmConfig::new(0x0252_54ff_fe00_0002, vec![me]));
    a.listen(0x0106_4A5F).unwrap();
    let mut now = Instant::from_nanos(0);
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = (n as usize).min(tail.len());
        a.handle(now, peer, &tail[..n]);
        rest = &tail[n..];
        now = now + Duration::from_millis(500);
        a.handle_timeout(now);
        while let Some(m) = a.poll_transmit() {
            assert!(CmMad::parse(&m.mad).is_ok(), "the agent sent a MAD it cannot parse");
        }
        while a.poll_event().is_some() {}
    }
});
