//! One port on several datapath lcores, with the verbs API on DPDK.
//!
//! Two ports joined by rings in this process (a DPDK ring pair, no NIC),
//! each opened with `N` queue pairs (`N` = 2, or the first argument, 1 to
//! 8). `verbs::lcore::spawn_port` puts each port on `N` datapath threads:
//! thread `i` polls queue pair `i`, owns the QP numbers of shard `i` (QPN
//! mod N), is pinned to a CPU and registered with the EAL. A frame that
//! arrives on another thread's queue is handed to its QP's owner through
//! a lock-free ring.
//!
//! Each of `a`'s datapaths gets one RC QP, connected to a QP on the *next*
//! datapath of `b` (i + 1 mod N), so every frame arrives on a queue its
//! QP's owner does not poll and crosses a ring. Peers are found by ARP
//! (no static neighbours), which only the first datapath of a port
//! answers. From one application thread per pair, `a` WRITEs 64 KiB into
//! `b`'s region and READs it back into its own; every byte is checked.
//!
//! Run it with `cargo run --release --example rc_lcores [N]`. It prints
//! what each datapath did and exits 0, or names what failed and exits 1.

use anyhow::{bail, ensure, Context as _, Result};
use ferroce::backend::steer::Steered;
use ferroce::dpdk::{
    self, Eal, EalOptions, HugepageMode, Mempool, MempoolOptions, Port, PortOptions, QueueId,
    TscClock,
};
use ferroce::verbs::lcore::{spawn_port, AppContext, Datapath, Idle, LcoreConfig};
use ferroce::verbs::{
    Access, ConnectParams, ContextConfig, Cq, Mr, Payload, Qp, QpCaps, SendOp, SendWr, Wc,
    WcOpcode, WcStatus,
};
use ferroce::wire::MacAddr;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
/// Each transfer, and where it goes: `a` writes its offset 0 into `b`'s 0,
/// and reads `b`'s 0 back into its own `LEN`.
const LEN: usize = 64 << 10;
const TIMEOUT: Duration = Duration::from_secs(10);

type Queue = Steered<dpdk::PortQueue>;
type App = AppContext<Queue>;

/// One datapath's verbs objects.
struct Side {
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side(app: &App) -> Result<Side> {
    let pd = app.alloc_pd()?;
    let mr = app.reg_mr(&pd, 2 * LEN, Access::ALL)?;
    let cq = app.create_cq(16)?;
    let qp = app.create_qp(&pd, &cq, &cq, QpCaps::default())?;
    Ok(Side { cq, mr, qp })
}

fn pattern(pair: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(pair as u8 * 17) ^ (i >> 8) as u8
}

/// Waits for one completion on `cq`: a successful `opcode`.
fn wait(app: &App, cq: &Cq, opcode: WcOpcode) -> Result<()> {
    let end = Instant::now() + TIMEOUT;
    let mut wcs: Vec<Wc> = Vec::new();
    while wcs.is_empty() {
        ensure!(Instant::now() < end, "no completion within {TIMEOUT:?}");
        if app.poll_cq(cq, 1, &mut wcs)? == 0 {
            app.wait_cq(cq, ferroce::time::Duration::from_millis(20))?;
        }
    }
    let wc = &wcs[0];
    ensure!(
        wc.status == WcStatus::Success && wc.opcode == opcode,
        "{:?} of work request {}: {}",
        wc.opcode,
        wc.wr_id,
        wc.status
    );
    Ok(())
}

/// Pair `i`: `a`'s datapath `i` WRITEs into `b`'s datapath `j` and READs
/// the bytes back; both checked.
fn exchange(i: usize, (a, sa): (&App, &Side), (b, sb): (&App, &Side)) -> Result<()> {
    let p = ConnectParams::default();
    a.connect(&sa.qp, sb.qp.num(), IP_B.into(), &p, 100, 200)
        .context("connecting a's QP (ARP through the steering)")?;
    b.connect(&sb.qp, sa.qp.num(), IP_A.into(), &p, 200, 100)
        .context("connecting b's QP")?;
    a.with_mr_mut(&sa.mr, move |m| {
        for (k, x) in m[..LEN].iter_mut().enumerate() {
            *x = pattern(i, k);
        }
    })?;
    let write = SendOp::Write {
        remote_addr: sb.mr.addr(),
        rkey: sb.mr.rkey(),
    };
    let src = sa.mr.sge(0, LEN as u32).context("source SGE")?;
    a.post_send(&sa.qp, SendWr::new(1, write, Payload::sge(src)))
        .map_err(|r| r.error)?;
    wait(a, &sa.cq, WcOpcode::RdmaWrite)?;
    let read = SendOp::Read {
        remote_addr: sb.mr.addr(),
        rkey: sb.mr.rkey(),
    };
    let dst = sa.mr.sge(LEN, LEN as u32).context("destination SGE")?;
    a.post_send(&sa.qp, SendWr::new(2, read, Payload::sge(dst)))
        .map_err(|r| r.error)?;
    wait(a, &sa.cq, WcOpcode::RdmaRead)?;
    let at_b = b.with_mr(&sb.mr, |m| m[..LEN].to_vec())?;
    if let Some(k) = (0..LEN).find(|&k| at_b[k] != pattern(i, k)) {
        bail!("pair {i}: byte {k} of the WRITE is wrong at b");
    }
    let back = a.with_mr(&sa.mr, |m| m[LEN..].to_vec())?;
    if let Some(k) = (0..LEN).find(|&k| back[k] != pattern(i, k)) {
        bail!("pair {i}: byte {k} of the READ is wrong at a");
    }
    Ok(())
}

/// Puts `port`'s `n` queue pairs on `n` datapath threads, thread `i` on
/// the `i`-th online CPU (shared when there are fewer).
fn datapaths(
    eal: &Eal,
    port: &Port,
    n: usize,
    mac: MacAddr,
    ip: Ipv4Addr,
) -> Result<Vec<Datapath<Queue>>> {
    let queues = (0..n as u16)
        .map(|q| port.queue(QueueId(q)))
        .collect::<Result<Vec<_>, _>>()?;
    let cpus = dpdk::lcore::online_cpus();
    let clock = TscClock::new(eal);
    let lcore = |i: usize| LcoreConfig {
        name: format!("{}-dp{i}", port.name()),
        // Several datapaths may share a CPU here: back off when idle.
        idle: Idle::default(),
        setup: Some(Arc::new(dpdk::lcore::thread_setup(
            cpus.get(i % cpus.len().max(1)).copied(),
            Some(eal.clone()),
        ))),
        ..LcoreConfig::default()
    };
    spawn_port(
        queues,
        &ContextConfig::new(mac, ip.into()),
        &|| Box::new(clock),
        &lcore,
    )
    .map_err(anyhow::Error::msg)
}

fn run() -> Result<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().context("the datapath count")?,
        None => 2,
    };
    ensure!((1..=8).contains(&n), "1 to 8 datapaths per port");
    let opts = EalOptions {
        hugepages: HugepageMode::Auto,
        memory_mb: 256,
        ..EalOptions::default()
    };
    let eal = Eal::init(&opts, &[]).context("starting the DPDK EAL")?;
    let pool = Mempool::new(&eal, "rc_lcores_mbufs", &MempoolOptions::default())
        .context("creating the mempool")?;
    let popts = PortOptions {
        rx_queues: n as u16,
        tx_queues: n as u16,
        ..PortOptions::default()
    };
    let (port_a, port_b) =
        Port::ring_pair(&eal, "rc_lcores", &pool, &popts).context("opening the ring pair")?;
    let da = datapaths(&eal, &port_a, n, MAC_A, IP_A)?;
    let db = datapaths(&eal, &port_b, n, MAC_B, IP_B)?;
    let a: Vec<App> = da.iter().filter_map(|d| d.context(0)).collect();
    let b: Vec<App> = db.iter().filter_map(|d| d.context(0)).collect();
    let sa = a.iter().map(side).collect::<Result<Vec<_>>>()?;
    let sb = b.iter().map(side).collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let jobs: Vec<_> = (0..n)
            .map(|i| {
                let j = (i + 1) % n;
                let (a, sa, b, sb) = (&a[i], &sa[i], &b[j], &sb[j]);
                s.spawn(move || exchange(i, (a, sa), (b, sb)))
            })
            .collect();
        for (i, job) in jobs.into_iter().enumerate() {
            job.join()
                .map_err(|_| anyhow::anyhow!("pair {i} panicked"))?
                .with_context(|| format!("pair {i}"))?;
        }
        Ok(())
    })?;
    let took = started.elapsed();
    println!(
        "rc_lcores: DPDK {} ring pair, {n} queue pairs per port, a datapath thread each ({})",
        dpdk::DPDK_VERSION,
        if eal.hugepages() {
            "hugepages"
        } else {
            "no hugepages"
        }
    );
    for (end, apps, sides) in [("a", &a, &sa), ("b", &b, &sb)] {
        for (i, (app, s)) in apps.iter().zip(sides).enumerate() {
            let st = app.run(|ctx| ctx.port().counters())?;
            let c = app.qp_counters(&s.qp)?;
            println!(
                "  {end}{i}: QP {:#x}, sent {} received {} packets; frames handed on {}, handed in {}, ARP/ND copied {}, dropped {}",
                s.qp.num(),
                c.sent_pkts,
                c.rcvd_pkts,
                st.handed_on,
                st.handed_in,
                st.copied,
                st.dropped
            );
            if n > 1 {
                ensure!(st.handed_in > 0, "{end}{i} was handed nothing");
            }
            ensure!(st.dropped == 0, "{end}{i} dropped frames");
        }
    }
    println!(
        "  {n} pairs crossed (a's datapath i with b's i + 1): RDMA WRITE and READ of {LEN} B each, verified, in {} us",
        took.as_micros()
    );
    println!("rc_lcores: OK");
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_lcores: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
