//! The RC transport on the simulated fabric: a 4:1 incast with ECN and
//! DCQCN, in virtual time.
//!
//! Five hosts hang off one switch by 25 Gb/s links: four senders each
//! RDMA WRITE 2 MiB (32 WRITEs of 64 KiB, 8 outstanding at a time) into
//! their own part of the receiver's one region. The switch port towards
//! the receiver is the bottleneck: four senders at line rate offer it four
//! times what it can carry, so its queue grows. The switch marks ECN on
//! its egress ports with RED's curve; the receiver answers marked packets
//! with CNPs; each sender's DCQCN reaction point cuts its QP's rate on a
//! CNP and lets it recover while none come.
//!
//! What it shows, from the library's own API:
//!
//! - [`SimNet`]: transport [`Device`]s on a [`Fabric`] of hosts, links and
//!   a switch ([`ferroce::backend::fabric`]), configured per link
//!   ([`LinkConfig`]: rate, delay, buffer, [`RedConfig`] marking);
//! - the devices' congestion control ([`CongestionConfig`]: ECT(0) on
//!   every packet, the notification point's CNPs, the reaction point's
//!   [`CcConfig::DcqcnCx`]);
//! - a virtual-time driver: pump every host until nothing moves, take
//!   completions and post work, then jump to the next instant anything
//!   happens (a frame event or a device timer). No wall clock is read, so
//!   every run prints the same numbers.
//!
//! Every WRITE is checked byte for byte where it landed. Run it with
//! `cargo run --release --example sim_incast`; it exits 1 naming what
//! failed, if anything does.
//!
//! [`Device`]: ferroce::transport::Device
//! [`Fabric`]: ferroce::backend::fabric::Fabric
//! [`CongestionConfig`]: ferroce::transport::CongestionConfig

use anyhow::{bail, ensure, Context as _, Result};
use ferroce::backend::fabric::{ChannelId, LinkConfig, RedConfig};
use ferroce::cc::{CcConfig, CxParams};
use ferroce::sim::defaults::default_red;
use ferroce::sim::net::SimNet;
use ferroce::time::{Duration, Instant};
use ferroce::transport::connect::ConnectParams;
use ferroce::transport::{
    Access, CqId, DeviceConfig, MrKeys, MrSpec, Mtu, Payload, QpCaps, QpConfig, SendOp, SendWr,
    Sge, Wc, WcStatus,
};
use ferroce::wire::MacAddr;
use std::net::Ipv4Addr;
use std::process::ExitCode;

/// Senders (N of N:1).
const SENDERS: usize = 4;
/// Every link's rate, bits per second, and one-way delay.
const RATE_BPS: u64 = 25_000_000_000;
const LINK_DELAY: Duration = Duration::from_micros(1);
/// WRITEs per sender, bytes per WRITE, WRITEs outstanding per sender.
const MSGS: usize = 32;
const MSG: usize = 64 << 10;
const WINDOW: usize = 8;
/// The switch's ECN marking (DCQCN's Kmin / Kmax / Pmax, reference C.1),
/// as `ferroce sim --incast` sets it for the link rate: at 25 Gb/s no
/// marks up to 12.5 KB waiting, every ECN-capable frame marked beyond
/// 400 KB, linear in between; decided as a frame leaves the queue.
fn red() -> RedConfig {
    default_red(RATE_BPS)
}
/// Drop-tail limit of every switch port: 2 x Kmax.
const BUFFER: usize = 800_000;
/// Local ACK timeout exponent: 4.096 us x 2^10 = 4.2 ms, more than twice
/// the time a full buffer and every sender's window take to drain, so a
/// packet that is only queued is not sent again.
const ACK_TIMEOUT: u8 = 10;
/// Give up if virtual time passes this.
const LIMIT: Duration = Duration::from_millis(100);
/// The fabric's seed (its random draws: ECN marking between Kmin and Kmax).
const SEED: u64 = 1;
/// Host 0 is the receiver, hosts 1..=SENDERS the senders.
const RECEIVER: usize = 0;

/// One sender's QP towards the receiver, and how far it has got.
struct Flow {
    host: usize,
    qpn: u32,
    /// The receiver's QP it is connected to.
    rqpn: u32,
    cq: CqId,
    mr: MrKeys,
    posted: usize,
    completed: usize,
    /// When its last WRITE completed.
    finished: Option<Instant>,
}

/// The byte at offset `i` of WRITE `tag` (= flow x MSGS + message): every
/// WRITE's bytes differ from every other's at each offset, so one that
/// landed in the wrong place is caught.
fn pattern(tag: usize, i: usize) -> u8 {
    (tag * 131 + i * 7) as u8
}

fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, i as u8 + 1)
}

/// Builds the fabric and connects one QP per sender to the receiver.
fn build() -> Result<(SimNet, Vec<Flow>, MrKeys, ChannelId)> {
    let mut net = SimNet::new(SEED);

    // The hosts: each device sends ECT(0) (the default), its notification
    // point sends CNPs for CE-marked packets (at most one per QP per 4 us,
    // the default), and its reaction point runs DCQCN with ConnectX's
    // parameters, starting from the line rate.
    for i in 0..=SENDERS {
        let mut dc = DeviceConfig::new(MacAddr([2, 0, 0, 0, 0, i as u8 + 1]), ip(i).into());
        dc.congestion.rp = CcConfig::DcqcnCx(CxParams::default());
        dc.congestion.line_bps = RATE_BPS;
        let h = net.add_host(dc)?;
        // The NIC holds two frames ready for its wire and pulls the next
        // when one has left: the rest waits in the QP, where the DCQCN
        // pacer decides when it goes.
        let id = net.hosts[h].host;
        net.fabric
            .set_tx_ring(id, Some(2 * ferroce::host::pump::MAX_FRAME));
    }

    // The switch: every host on a link of its own. A link has two
    // directions; the switch's side (b_to_a, switch -> host) gets the
    // buffer limit and the ECN marking, the hosts' side stays plain.
    let sw = net.add_switch();
    let host_side = LinkConfig {
        rate_bps: RATE_BPS,
        delay: LINK_DELAY,
        ..LinkConfig::default()
    };
    let switch_side = LinkConfig {
        queue_bytes: Some(BUFFER),
        ecn: Some(red()),
        ..host_side
    };
    let mut bottleneck = None;
    for h in 0..=SENDERS {
        let link = net.connect_to_switch(h, sw, host_side)?;
        net.fabric.set_link_config(link.b_to_a, switch_side)?;
        if h == RECEIVER {
            bottleneck = Some(link.b_to_a);
        }
    }
    let bottleneck = bottleneck.context("the receiver's link")?;

    // Room in each QP for its whole window in flight (8 WRITEs of 16
    // packets), so the window and the pacer, not the transport's default
    // cap, limit what a sender has out.
    let caps = QpCaps {
        max_send_wr: WINDOW as u32,
        config: Some(QpConfig {
            max_inflight: (WINDOW * MSG / 4096) as u32,
            ..QpConfig::default()
        }),
        ..QpCaps::default()
    };
    let params = ConnectParams {
        mtu: Mtu::Mtu4096,
        timeout: ACK_TIMEOUT,
        ..ConnectParams::default()
    };

    // The receiver: one region, a part of it per sender, remote write
    // allowed; one CQ for all its QPs (it posts nothing: WRITEs complete
    // only at the requester).
    let (rpd, rcq, rmr) = {
        let d = &mut net.hosts[RECEIVER].dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(16)?;
        let mr = d.reg_mr(MrSpec::new(
            pd,
            SENDERS * MSGS * MSG,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ))?;
        (pd, cq, mr)
    };

    // Each sender: a region holding all its WRITEs' bytes, a CQ and a QP,
    // connected to a QP of its own at the receiver.
    let mut flows = Vec::new();
    for s in 1..=SENDERS {
        let rqpn = net.hosts[RECEIVER].dev.create_qp(rpd, rcq, rcq, caps)?;
        let d = &mut net.hosts[s].dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(WINDOW + 16)?;
        let mr = d.reg_mr(MrSpec::new(pd, MSGS * MSG, Access::LOCAL_WRITE))?;
        let mem = d.mr_mut(mr.lkey).context("a sender's region")?;
        for (k, chunk) in mem.chunks_mut(MSG).enumerate() {
            let tag = (s - 1) * MSGS + k;
            chunk
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = pattern(tag, i));
        }
        let qpn = d.create_qp(pd, cq, cq, caps)?;
        net.connect_qps(s, qpn, RECEIVER, rqpn, &params, (0, 0))?;
        flows.push(Flow {
            host: s,
            qpn,
            rqpn,
            cq,
            mr,
            posted: 0,
            completed: 0,
            finished: None,
        });
    }
    Ok((net, flows, rmr, bottleneck))
}

/// Posts WRITEs on every flow up to its window; whether any was posted.
fn post(net: &mut SimNet, flows: &mut [Flow], rmr: &MrKeys) -> Result<bool> {
    let mut any = false;
    for (f, fl) in flows.iter_mut().enumerate() {
        while fl.posted < MSGS && fl.posted - fl.completed < WINDOW {
            let k = fl.posted;
            // Message k of flow f goes to slot f x MSGS + k of the receiver.
            let op = SendOp::Write {
                remote_addr: rmr.addr + ((f * MSGS + k) * MSG) as u64,
                rkey: rmr.rkey,
            };
            let sge = Sge {
                addr: fl.mr.addr + (k * MSG) as u64,
                length: MSG as u32,
                lkey: fl.mr.lkey,
            };
            let wr = SendWr::new(k as u64, op, Payload::sge(sge));
            net.hosts[fl.host].dev.post_send(fl.qpn, wr)?;
            fl.posted += 1;
            any = true;
        }
    }
    Ok(any)
}

/// Takes every flow's completions; whether there was any.
fn complete(net: &mut SimNet, flows: &mut [Flow], wcs: &mut Vec<Wc>) -> Result<bool> {
    let now = net.now();
    let mut any = false;
    for (f, fl) in flows.iter_mut().enumerate() {
        wcs.clear();
        net.hosts[fl.host].dev.poll_cq(fl.cq, usize::MAX, wcs);
        for wc in wcs.iter() {
            ensure!(
                wc.status == WcStatus::Success,
                "flow {f}: WRITE {} completed with {}",
                wc.wr_id,
                wc.status
            );
            fl.completed += 1;
            any = true;
        }
        if fl.completed == MSGS && fl.finished.is_none() {
            fl.finished = Some(now);
        }
    }
    Ok(any)
}

/// Runs the incast in virtual time until every WRITE has completed.
fn drive(net: &mut SimNet, flows: &mut [Flow], rmr: &MrKeys) -> Result<()> {
    let end = net.now() + LIMIT;
    let mut wcs = Vec::new();
    loop {
        // Everything that happens at this instant: frames in and out of
        // every host, then completions and new WRITEs, until nothing moves.
        loop {
            net.pump_until_quiet(u64::MAX);
            let completed = complete(net, flows, &mut wcs)?;
            let posted = post(net, flows, rmr)?;
            if !completed && !posted {
                break;
            }
        }
        if flows.iter().all(|f| f.finished.is_some()) {
            return Ok(());
        }
        // Then on to the next frame event or device timer (an ACK
        // timeout, a pacer releasing a packet, a DCQCN rate increase).
        let Some(t) = net.next_time() else {
            bail!("nothing left to happen at {:?}", net.now());
        };
        ensure!(t <= end, "not done after {LIMIT} of virtual time");
        net.fabric.advance_to(t.max(net.now()));
    }
}

/// Checks that every WRITE landed where it was sent, byte for byte, and
/// that the receiver executed each once.
fn verify(net: &SimNet, flows: &[Flow], rmr: &MrKeys) -> Result<()> {
    let dev = &net.hosts[RECEIVER].dev;
    let mem = dev.mr(rmr.lkey).context("the receiver's region")?;
    for (slot, got) in mem.chunks(MSG).enumerate() {
        if let Some(i) = (0..MSG).find(|&i| got[i] != pattern(slot, i)) {
            bail!(
                "flow {} WRITE {}: byte {i} at the receiver is wrong",
                slot / MSGS,
                slot % MSGS
            );
        }
    }
    for (f, fl) in flows.iter().enumerate() {
        let c = dev.qp_counters(fl.rqpn).context("a receiver QP")?;
        ensure!(
            c.rx_write_requests == MSGS as u64,
            "flow {f}: the receiver executed {} WRITEs, not {MSGS}",
            c.rx_write_requests
        );
    }
    Ok(())
}

/// Prints per-flow goodput and congestion signals, and the bottleneck.
fn report(net: &SimNet, flows: &[Flow], bottleneck: ChannelId) -> Result<()> {
    println!(
        "sim_incast: {SENDERS}:1 incast, {} Gb/s links, {MSGS} WRITEs of {} KiB per sender, \
         window {WINDOW}, DCQCN (dcqcn-cx), seed {SEED}",
        RATE_BPS / 1_000_000_000,
        MSG >> 10
    );
    println!(
        "  {:<6} {:>12} {:>12} {:>10} {:>10} {:>8}",
        "flow", "done at", "goodput", "CNPs sent", "CNPs took", "retrans"
    );
    let recv = &net.hosts[RECEIVER].dev;
    let mut last = Instant::from_nanos(0);
    for (f, fl) in flows.iter().enumerate() {
        let done = fl.finished.context("an unfinished flow")?;
        let s = net.hosts[fl.host]
            .dev
            .qp_counters(fl.qpn)
            .context("a sender QP")?;
        let r = recv.qp_counters(fl.rqpn).context("a receiver QP")?;
        // Goodput: the flow's WRITE payload over the time to its last
        // completion (virtual time starts at 0).
        let gbps = (MSGS * MSG) as f64 * 8.0 / done.as_nanos() as f64;
        last = last.max(done);
        println!(
            "  {f:<6} {:>9} us {:>7.2} Gb/s {:>10} {:>10} {:>8}",
            done.as_nanos() / 1000,
            gbps,
            r.np_cnp_sent,
            s.rp_cnp_handled,
            s.retransmitted_pkts
        );
    }
    // The bottleneck: the switch port towards the receiver.
    let link = net.fabric.link_counters(bottleneck);
    let all = (flows.len() * MSGS * MSG) as f64 * 8.0 / last.as_nanos() as f64;
    println!(
        "  all flows: {all:.2} Gb/s of {} Gb/s into the receiver",
        RATE_BPS / 1_000_000_000
    );
    println!(
        "  switch -> receiver: queue peak {} B (marking from {} B, buffer {BUFFER} B), \
         {} frames ECN-marked, {} dropped",
        link.max_queue_bytes,
        red().kmin_bytes,
        link.ecn_marked,
        link.dropped_queue
    );
    println!(
        "  every WRITE landed and was checked: {} x {MSGS} x {MSG} B",
        flows.len()
    );
    Ok(())
}

fn run() -> Result<()> {
    let (mut net, mut flows, rmr, bottleneck) = build()?;
    drive(&mut net, &mut flows, &rmr)?;
    verify(&net, &flows, &rmr)?;
    report(&net, &flows, bottleneck)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("sim_incast: OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sim_incast: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
