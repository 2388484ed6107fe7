//! Each tool against itself: both ends in one process, each on its own
//! thread and end of an in-process link, the exchange over TCP on
//! localhost.

use super::*;
use crate::backend::loopback::{self, LoopbackPort};
use crate::backend::WallClock;
use crate::verbs::ContextConfig;
use crate::wire::MacAddr;
use core::net::Ipv4Addr;

fn ctx(port: LoopbackPort, last: u8) -> Context<LoopbackPort> {
    let cfg = ContextConfig::new(
        MacAddr([2, 0, 0, 0, 0, last]),
        Ipv4Addr::new(198, 18, 0, last).into(),
    );
    Context::open(port, Box::new(WallClock::new()), cfg).unwrap()
}

/// Runs `opts` on both ends; returns (server, client) reports and output.
fn both(opts: Opts) -> ((Report, String), (Report, String)) {
    both_at(opts, "127.0.0.1")
}

/// As [`both`], the client connecting to `server` (the TCP exchange's
/// address, or the server's GID with `-R`).
fn both_at(opts: Opts, at: &str) -> ((Report, String), (Report, String)) {
    both_with(opts.clone(), opts, at)
}

/// As [`both_at`], the server with `o2` and the client with `opts`.
fn both_with(o2: Opts, opts: Opts, at: &str) -> ((Report, String), (Report, String)) {
    let _one = crate::tools::spinning_pair();
    let (pa, pb) = loopback::pair(1024, 4352);
    let server = std::thread::spawn(move || {
        let mut c = ctx(pa, 1);
        let mut out = Vec::new();
        let r = run(&mut c, &Role::Server, &o2, &mut out);
        (r, String::from_utf8(out).unwrap())
    });
    let mut c = ctx(pb, 2);
    let mut out = Vec::new();
    let rc = run(&mut c, &Role::Client(at.parse().unwrap()), &opts, &mut out);
    let (rs, out_s) = server.join().unwrap();
    let out_c = String::from_utf8(out).unwrap();
    let rc = rc.unwrap_or_else(|e| panic!("client: {e:#}\n{out_c}\nserver: {out_s}"));
    let rs = rs.unwrap_or_else(|e| panic!("server: {e:#}\n{out_s}"));
    ((rs, out_s), (rc, out_c))
}

/// `test`'s options with a TCP listener of its own (port 0): tests that
/// run side by side never share a port. The server accepts on it, the
/// client connects to its port.
fn opts(test: Test) -> Opts {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    Opts {
        tcp_port: l.local_addr().unwrap().port(),
        listener: Some(std::sync::Arc::new(l)),
        timeout: std::time::Duration::from_secs(20),
        ..Opts::new(test)
    }
}

/// `-R`: the control channel and the test QPs connected by RDMA-CM (on
/// RDMA-CM port 18515 of each context: nothing else shares it), the keys
/// exchanged as binary `pingpong_dest`s; WRITE, READ and SEND tests end
/// with the same results as over TCP.
#[test]
fn rdma_cm_runs_write_read_and_send_tests() {
    for test in [Test::WriteBw, Test::ReadLat, Test::SendBw] {
        let o = Opts {
            iters: Some(200),
            size: Some(4099),
            rdma_cm: true,
            timeout: std::time::Duration::from_secs(20),
            ..Opts::new(test)
        };
        let ((s, out_s), (c, out_c)) = both_at(o, "198.18.0.1");
        assert_eq!(c.errors + s.errors, 0, "{test:?}");
        assert!(out_c.contains(" Data ex. method : rdma_cm"), "{out_c}");
        assert!(out_s.contains(" rdma_cm QPs\t : ON"), "{out_s}");
        match test {
            Test::WriteBw => assert_eq!(s.counters.rx_write_requests, 200),
            Test::ReadLat => assert_eq!(s.counters.rx_read_requests, 200),
            _ => assert_eq!(s.counters.rdma_recvs, 200),
        }
    }
}

#[test]
fn write_bw_client_results_reach_the_server() {
    let o = Opts {
        iters: Some(300),
        qps: 2,
        ..opts(Test::WriteBw)
    };
    let ((s, out_s), (c, out_c)) = both(o);
    let Outcome::Bw(cr) = c.outcome else { panic!() };
    let Outcome::Bw(sr) = s.outcome else { panic!() };
    assert_eq!((cr.size, cr.iters), (65536, 600));
    assert!(cr.bw_avg > 0.0 && cr.bw_peak >= cr.bw_avg * 0.5, "{cr:?}");
    // The server prints the client's numbers.
    assert_eq!(sr.iters, 600);
    assert_eq!(sr.bw_avg, cr.bw_avg);
    assert_eq!(c.counters.rdma_sends, 600);
    assert_eq!(s.counters.rx_write_requests, 600);
    assert_eq!(c.errors + s.errors, 0);
    for out in [&out_s, &out_c] {
        assert!(out.contains("RDMA_Write BW Test"), "{out}");
        assert!(
            out.contains(" #bytes     #iterations    BW peak[MB/sec]"),
            "{out}"
        );
        assert!(out.contains(" 65536      600 "), "{out}");
    }
    assert!(
        out_c.contains(" remote address: LID 0000 QPN 0x"),
        "{out_c}"
    );
    assert!(out_c.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:01"));
}

#[test]
fn read_bw_with_small_messages_cycles_over_the_page() {
    let o = Opts {
        iters: Some(2000),
        size: Some(64),
        report_gbits: true,
        ..opts(Test::ReadBw)
    };
    let ((s, _), (c, out_c)) = both(o);
    let Outcome::Bw(cr) = c.outcome else { panic!() };
    assert_eq!(cr.iters, 2000);
    assert!(out_c.contains("BW average[Gb/sec]"));
    assert_eq!(s.counters.rx_read_requests, 2000);
    assert_eq!(c.params.cq_mod, 100);
}

#[test]
fn send_bw_receiver_counts_every_message() {
    let o = Opts {
        iters: Some(500),
        size: Some(1000),
        ..opts(Test::SendBw)
    };
    let ((s, out_s), (c, _)) = both(o);
    let Outcome::Bw(sr) = s.outcome else { panic!() };
    assert_eq!(sr.iters, 500);
    assert_eq!(sr.bw_peak, 0.0);
    assert_eq!((s.bad_payloads, c.bad_payloads), (0, 0));
    assert_eq!(s.counters.rdma_recvs, 500);
    assert!(out_s.contains(" RX depth        : 500"), "{out_s}");
}

#[test]
fn atomic_bw_adds_one_per_message() {
    let o = Opts {
        iters: Some(640),
        ..opts(Test::AtomicBw)
    };
    let ((s, out_s), (c, _)) = both(o);
    let Outcome::Bw(cr) = c.outcome else { panic!() };
    assert_eq!((cr.size, cr.iters), (8, 640));
    assert_eq!(s.counters.rx_atomic_requests, 640);
    assert!(out_s.contains("Atomic FETCH_AND_ADD BW Test"));
}

#[test]
fn write_lat_ping_pongs_and_reports_percentiles() {
    let o = Opts {
        iters: Some(200),
        ..opts(Test::WriteLat)
    };
    let ((s, out_s), (c, _)) = both(o);
    for r in [&s, &c] {
        let Outcome::Lat(l) = r.outcome else { panic!() };
        assert_eq!((l.size, l.iters), (2, 200));
        assert!(l.t_min <= l.t_typical && l.t_typical <= l.t_max, "{l:?}");
        assert!(l.p99 <= l.p999);
    }
    assert_eq!(s.counters.rdma_sends, 200);
    assert!(out_s.contains("t_typical[usec]"));
}

#[test]
fn read_lat_only_the_client_measures() {
    let o = Opts {
        iters: Some(100),
        size: Some(300),
        ..opts(Test::ReadLat)
    };
    let ((s, _), (c, _)) = both(o);
    assert!(matches!(s.outcome, Outcome::None));
    let Outcome::Lat(l) = c.outcome else { panic!() };
    assert_eq!((l.size, l.iters), (300, 100));
    assert_eq!(s.counters.rx_read_requests, 100);
}

#[test]
fn send_lat_ping_pongs_sends() {
    let o = Opts {
        iters: Some(150),
        size: Some(64),
        ..opts(Test::SendLat)
    };
    let ((s, _), (c, _)) = both(o);
    assert_eq!((s.counters.rdma_recvs, c.counters.rdma_recvs), (150, 150));
    assert_eq!((s.bad_payloads, c.bad_payloads), (0, 0));
}

#[test]
fn a_duration_run_stops_by_itself() {
    let o = Opts {
        duration: Some(1),
        size: Some(4096),
        ..opts(Test::WriteBw)
    };
    let t = std::time::Instant::now();
    let ((_, _), (c, _)) = both(o);
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    let Outcome::Bw(cr) = c.outcome else { panic!() };
    assert!(cr.iters > 0 && cr.bw_peak == 0.0, "{cr:?}");
}

#[test]
fn defaults_follow_perftest() {
    let p = |t| Params::from_opts(&Opts::new(t)).unwrap();
    let w = p(Test::WriteBw);
    assert_eq!(
        (w.size, w.iters, w.tx_depth, w.cq_mod),
        (65536, 5000, 128, 1)
    );
    let a = p(Test::AtomicBw);
    assert_eq!((a.size, a.iters, a.cq_mod), (8, 1000, 100));
    let s = p(Test::SendLat);
    assert_eq!(
        (s.size, s.iters, s.tx_depth, s.rx_depth, s.cq_mod),
        (2, 1000, 1, 512, 1)
    );
    assert!(Params::from_opts(&Opts {
        size: Some(16),
        ..Opts::new(Test::AtomicBw)
    })
    .is_err());
    assert!(Params::from_opts(&Opts {
        qps: 2,
        ..Opts::new(Test::WriteLat)
    })
    .is_err());
}

/// `-u`: perftest's 14 by default, any exponent up to 31, refused past
/// it and with `-R` (whose QPs take RDMA-CM's path values), by name.
#[test]
fn qp_timeout_is_perftest_u() {
    let with = |u, rdma_cm| {
        Params::from_opts(&Opts {
            qp_timeout: u,
            rdma_cm,
            ..Opts::new(Test::SendBw)
        })
    };
    assert_eq!(with(None, false).unwrap().qp_timeout, 14);
    assert_eq!(with(None, true).unwrap().qp_timeout, 14);
    assert_eq!(with(Some(16), false).unwrap().qp_timeout, 16);
    let e = with(Some(32), false).unwrap_err().to_string();
    assert!(e.contains("-u 32"), "{e}");
    let e = with(Some(16), true).unwrap_err().to_string();
    assert!(e.contains("-u with -R"), "{e}");
}

/// `--recovery sr` on both ends: the version messages carry the ask, the
/// QPs run selective repeat (the banner says so); on one end only, both
/// run go-back-N and the end that asked says why. Over TCP and with `-R`.
#[test]
fn selective_repeat_runs_only_when_both_ends_ask() {
    use crate::transport::Recovery::{GoBackN, Selective};
    for rdma_cm in [false, true] {
        let with = |r| {
            let mut o = if rdma_cm {
                Opts {
                    rdma_cm: true,
                    timeout: std::time::Duration::from_secs(20),
                    ..Opts::new(Test::WriteBw)
                }
            } else {
                opts(Test::WriteBw)
            };
            o.iters = Some(100);
            o.recovery = r;
            o
        };
        let at = if rdma_cm { "198.18.0.1" } else { "127.0.0.1" };
        let server = with(Selective);
        let client = Opts {
            recovery: Selective,
            ..server.clone()
        };
        let ((s, out_s), (c, out_c)) = both_with(server, client, at);
        assert_eq!((s.recovery, c.recovery), (Selective, Selective));
        assert!(
            out_c.contains(" Recovery        : selective repeat"),
            "{out_c}"
        );
        assert_eq!(s.counters.rx_write_requests, 100);
        let server = with(GoBackN);
        let client = Opts {
            recovery: Selective,
            ..server.clone()
        };
        let ((s, out_s2), (c, out_c)) = both_with(server, client, at);
        assert_eq!((s.recovery, c.recovery), (GoBackN, GoBackN));
        assert!(out_c.contains("the peer did not ask for it"), "{out_c}");
        assert!(!out_c.contains(" Recovery "), "{out_c}");
        assert!(!out_s2.contains("did not ask") && out_s.contains(" Recovery "));
        assert_eq!(c.errors + s.errors, 0);
    }
}
