//! `ferroce linktest` on a DPDK port, and the probe helpers `ferroce demo`
//! shares with it: the probe stream between two ports, the counters of a
//! port, the verdict of one end.

use super::{parse_mac, LinkReport, LinktestOpts, Responder, Role, Sender};
use crate::backend::poll::{Counters, PollLoop};
use crate::config::Config;
use crate::dpdk::{self, Port, TscClock};
use crate::time::{Clock, Duration};
use crate::tools::port::ports::Ports;
use crate::tools::probe::Probe;
use anyhow::{bail, Result};
use std::net::Ipv4Addr;

/// The probe stream from port `a` (with its IP) to the MAC and IP `b`.
pub(crate) fn probe_between(
    a: (&Port, Ipv4Addr),
    b: ([u8; 6], Ipv4Addr),
    payload: usize,
) -> Result<Probe> {
    Ok(Probe {
        src_mac: a.0.mac()?.0,
        dst_mac: b.0,
        src_ip: a.1,
        dst_ip: b.1,
        src_qp: 0x11,
        dest_qp: 0x12,
        payload,
    })
}

/// Two lines: the poll loop's counters and the PMD's of one port.
pub(crate) fn print_counters(name: &str, c: &Counters, port: &Port) -> Result<()> {
    let s = port.stats()?;
    println!("  port {name:<3} engine: {c}");
    println!(
        "  port {name:<3} pmd:    ipackets={} opackets={} ibytes={} obytes={} imissed={} ierrors={} oerrors={} rx_nombuf={}",
        s.ipackets, s.opackets, s.ibytes, s.obytes, s.imissed, s.ierrors, s.oerrors, s.rx_nombuf
    );
    Ok(())
}

/// Whether one end verified all `want` probes with no mismatch; if not,
/// says so on stderr with the first errors.
pub(crate) fn report_ok(who: &str, r: &LinkReport, want: u64) -> bool {
    let ok = r.verified == want && r.mismatched == 0;
    if !ok {
        eprintln!(
            "{who}: verified {} of {want}, {} mismatched",
            r.verified, r.mismatched
        );
        for e in &r.errors {
            eprintln!("  {e}");
        }
    }
    ok
}

/// `ferroce linktest`: one end of a link test on the config's port
/// `opts.port`; Ok(false) (exit 1) unless every probe was verified.
pub fn run(mut cfg: Config, opts: &LinktestOpts) -> Result<bool> {
    let lt = &mut cfg.linktest;
    lt.count = opts.count.unwrap_or(lt.count);
    lt.payload = opts.payload.unwrap_or(lt.payload);
    lt.window = opts.window.unwrap_or(lt.window);
    lt.timeout_ms = opts.timeout_ms.unwrap_or(lt.timeout_ms);
    let peer_mac = opts.peer_mac.as_deref().map(parse_mac).transpose()?;
    let send = opts.role == Role::Send;
    linktest(&cfg, &opts.port, send, opts.peer_ip, peer_mac)
}

fn linktest(
    cfg: &Config,
    port: &str,
    send: bool,
    peer_ip: Option<Ipv4Addr>,
    peer_mac: Option<[u8; 6]>,
) -> Result<bool> {
    let dp = Ports::open(cfg, &[port])?;
    if !send {
        // The port is started: what arrives from now on waits in its
        // receive queue. Said so that a sender may be started only now
        // (a probe sent to a port not yet open is lost, and the sender
        // sends each probe once).
        println!("linktest answer on {port}: ready");
        std::io::Write::flush(&mut std::io::stdout())?;
    }
    let clock = TscClock::new(&dp.eal);
    let (pc, p) = dp.port(port)?;
    if let Some(core) = pc.core {
        dpdk::lcore::pin_current_thread(core)?;
    }
    let lt = &cfg.linktest;
    let link = p.wait_link_up(std::time::Duration::from_millis(lt.timeout_ms.min(15_000)))?;
    if !link.up {
        bail!("port {port}: link did not come up (is the peer running?)");
    }
    let peer_ip = peer_ip.unwrap_or_else(|| {
        let o = pc.ip.octets();
        Ipv4Addr::new(
            o[0],
            o[1],
            o[2],
            if send {
                o[3].wrapping_add(1)
            } else {
                o[3].wrapping_sub(1)
            },
        )
    });
    let peer_mac = peer_mac.unwrap_or([0xff; 6]);
    // The probe stream always runs sender -> answerer; the answerer
    // describes it from the sender's side (MACs are learned on the wire).
    let our_mac = p.mac()?.0;
    let stream = if send {
        probe_between((p, pc.ip), (peer_mac, peer_ip), lt.payload)?
    } else {
        Probe {
            src_mac: peer_mac,
            dst_mac: our_mac,
            src_ip: peer_ip,
            dst_ip: pc.ip,
            src_qp: 0x11,
            dest_qp: 0x12,
            payload: lt.payload,
        }
    };
    let mut lp = PollLoop::new(dp.queue(port)?);
    let start = clock.now();
    let deadline = start + Duration::from_millis(lt.timeout_ms);
    let (report, ok) = if send {
        let mut s = Sender::new(stream, lt.count, lt.window);
        lp.run_until(&clock, &mut s, deadline, |s| s.done());
        let ok = report_ok("sender", &s.report, lt.count);
        (s.report, ok)
    } else {
        let mut r = Responder::new(stream, our_mac, lt.count);
        lp.run_until(&clock, &mut r, deadline, |r| r.done());
        // Let the last answers leave before the port closes. Only tx:
        // the sender may already be gone, and net_memif unmaps a
        // departed peer's rings from its control thread while rx runs.
        // Then wait for the sender to leave (a shared-memory link goes
        // down), so that it never loses our rings under its own rx.
        lp.drain_tx(&clock, clock.now() + Duration::from_millis(300));
        p.wait_link_down(std::time::Duration::from_millis(1000))?;
        let ok = report_ok("answerer", &r.report, lt.count);
        (r.report, ok)
    };
    let secs = (clock.now() - start).as_secs_f64();
    println!(
        "linktest {} on {port}: sent {} verified {} mismatched {} foreign {} in {:.3} s",
        if send { "send" } else { "answer" },
        report.sent,
        report.verified,
        report.mismatched,
        report.foreign,
        secs
    );
    print_counters(port, lp.counters(), p)?;
    drop(lp.into_backend());
    println!("linktest {}", if ok { "OK" } else { "FAILED" });
    Ok(ok)
}
