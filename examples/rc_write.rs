//! The verbs API on a DPDK port, in one process.
//!
//! Two verbs contexts, `a` and `b`, each on one end of a DPDK ring pair
//! (two ethdev ports joined by rings inside this process, so no NIC and no
//! privilege are needed). The example walks through what every RDMA
//! program does:
//!
//! 1. start the EAL (hugepages when the kernel has free ones, otherwise
//!    the logged `--no-huge` fallback), a mempool and the two ports;
//! 2. open a context on each port (`ibv_open_device`);
//! 3. allocate a protection domain, register a memory region, create a
//!    completion queue and an RC queue pair on each side;
//! 4. connect the two QPs (RESET → INIT → RTR → RTS);
//! 5. RDMA WRITE from `a`'s region into `b`'s: post, poll the completion
//!    queue, check every byte in `b`'s region;
//! 6. RDMA READ from `b`'s region into `a`'s: the same, checked in `a`'s;
//! 7. destroy what it created.
//!
//! Run it with `cargo run --release --example rc_write` (add
//! `RUST_LOG=debug` to see the EAL arguments). It prints a short summary
//! and exits 0, or names what failed and exits 1.

use anyhow::{bail, ensure, Context as _, Result};
use ferroce::dpdk::{
    self, Eal, EalOptions, HugepageMode, Mempool, MempoolOptions, Port, PortOptions, QueueId,
    TscClock,
};
use ferroce::verbs::{
    Access, ConnectParams, Context, ContextConfig, Cq, Mr, Payload, Pd, Qp, QpCaps, SendOp, SendWr,
    Wc, WcOpcode, WcStatus,
};
use ferroce::wire::MacAddr;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The two ends' addresses (198.18.0.0/15 is set aside for benchmarks).
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);

/// Bytes of the region each side registers, and of each transfer (64 KiB:
/// 16 packets at path MTU 4096).
const REGION: usize = 256 << 10;
const LEN: usize = 64 << 10;
/// Where the bytes go: `a` writes from offset 0 of its region into
/// offset `WRITE_AT` of `b`'s, and reads `b`'s offset `READ_FROM` into its
/// own offset `READ_INTO`.
const WRITE_AT: usize = 64 << 10;
const READ_FROM: usize = 128 << 10;
const READ_INTO: usize = 192 << 10;
/// How long to wait for one completion.
const TIMEOUT: Duration = Duration::from_secs(5);

/// One side's verbs objects.
struct Side {
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

/// Allocates a PD, registers a region, creates a CQ and an RC QP.
fn side(ctx: &mut Context<dpdk::PortQueue>) -> Result<Side> {
    let pd = ctx.alloc_pd();
    let mr = ctx
        .reg_mr(&pd, REGION, Access::ALL)
        .context("registering a region")?;
    let cq = ctx.create_cq(16).context("creating a CQ")?;
    let qp = ctx
        .create_qp(&pd, &cq, &cq, QpCaps::default())
        .context("creating a QP")?;
    Ok(Side { pd, cq, mr, qp })
}

/// Destroys a side's objects, users first (`ibv_destroy_qp`, ...): each
/// destroy consumes its handle.
fn teardown(ctx: &mut Context<dpdk::PortQueue>, s: Side) -> Result<()> {
    ctx.destroy_qp(s.qp)?;
    ctx.destroy_cq(s.cq)?;
    ctx.dereg_mr(s.mr)?;
    ctx.dealloc_pd(s.pd)?;
    Ok(())
}

/// The byte at offset `i` of a transfer tagged `tag`.
fn pattern(tag: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(tag) ^ (i >> 8) as u8
}

/// Fills `bytes` with `tag`'s pattern.
fn fill(bytes: &mut [u8], tag: u8) {
    for (i, x) in bytes.iter_mut().enumerate() {
        *x = pattern(tag, i);
    }
}

/// Posts `wr` on `a`'s QP and waits for its completion, which must be a
/// successful `opcode`; returns how long that took.
fn post_and_wait(
    a: &mut Context<dpdk::PortQueue>,
    sa: &Side,
    b: &mut Context<dpdk::PortQueue>,
    wr: SendWr,
    opcode: WcOpcode,
) -> Result<std::time::Duration> {
    let started = Instant::now();
    let wr_id = wr.wr_id;
    a.post_send(&sa.qp, wr)?;
    let wc = wait_one(a, &sa.cq, b)?;
    expect(&wc, wr_id, opcode)?;
    Ok(started.elapsed())
}

/// Polls `a`'s CQ until one completion arrives, driving `b`'s port too:
/// in run-to-completion mode a context moves its frames only when its
/// owner calls into it (`poll_cq` or `progress`).
fn wait_one(
    a: &mut Context<dpdk::PortQueue>,
    cq: &Cq,
    b: &mut Context<dpdk::PortQueue>,
) -> Result<Wc> {
    let start = Instant::now();
    let mut wcs = Vec::new();
    while wcs.is_empty() {
        if start.elapsed() > TIMEOUT {
            bail!("no completion within {TIMEOUT:?}");
        }
        a.poll_cq(cq, 1, &mut wcs)?;
        b.progress();
    }
    Ok(wcs.remove(0))
}

/// Checks a completion's status and opcode.
fn expect(wc: &Wc, wr_id: u64, opcode: WcOpcode) -> Result<()> {
    ensure!(
        wc.status == WcStatus::Success,
        "work request {} completed with {}",
        wc.wr_id,
        wc.status
    );
    ensure!(
        wc.wr_id == wr_id && wc.opcode == opcode,
        "expected {opcode:?} of work request {wr_id}, got {:?} of {}",
        wc.opcode,
        wc.wr_id
    );
    Ok(())
}

/// The first offset at which `got` differs from `tag`'s pattern.
fn first_mismatch(got: &[u8], tag: u8) -> Option<usize> {
    got.iter()
        .enumerate()
        .position(|(i, &x)| x != pattern(tag, i))
}

fn run() -> Result<()> {
    // 1. The EAL: no PCI devices (a ring pair needs none), hugepages if
    //    the kernel has enough free ones, else `--no-huge -m 256`, which
    //    the library logs (at info level).
    let opts = EalOptions {
        hugepages: HugepageMode::Auto,
        memory_mb: 256,
        ..EalOptions::default()
    };
    let eal = Eal::init(&opts, &[]).context("starting the DPDK EAL")?;
    let pool = Mempool::new(
        &eal,
        "rc_write_mbufs",
        &MempoolOptions {
            mbufs: 2047,
            cache: 64,
            ..MempoolOptions::default()
        },
    )
    .context("creating the mempool")?;
    let (port_a, port_b) = Port::ring_pair(&eal, "rc_write", &pool, &PortOptions::default())
        .context("opening the ring pair")?;

    // 2. One context per port, each on queue 0, reading time from the TSC.
    //    Each knows the other's MAC in advance: both run in this one
    //    thread, so neither could answer the other's ARP request while
    //    the other waits for the answer inside `connect`.
    let clock = TscClock::new(&eal);
    let mut cfg_a = ContextConfig::new(MAC_A, IP_A.into());
    cfg_a.static_neigh.push((IP_B.into(), MAC_B));
    let mut cfg_b = ContextConfig::new(MAC_B, IP_B.into());
    cfg_b.static_neigh.push((IP_A.into(), MAC_A));
    let mut a = Context::open(port_a.queue(QueueId(0))?, Box::new(clock), cfg_a)?;
    let mut b = Context::open(port_b.queue(QueueId(0))?, Box::new(clock), cfg_b)?;

    // 3. PD, memory region, CQ and QP on each side.
    let sa = side(&mut a)?;
    let sb = side(&mut b)?;

    // 4. Connect: each QP learns the other's number and address, and the
    //    PSNs each side starts sending from. The path MTU is the largest
    //    the port carries (`ibv_query_port`'s active MTU).
    let mtu = a.query_port().active_mtu;
    let p = ConnectParams {
        mtu,
        ..ConnectParams::default()
    };
    a.connect(&sa.qp, sb.qp.num(), IP_B.into(), &p, 1000, 2000)
        .context("connecting a's QP")?;
    b.connect(&sb.qp, sa.qp.num(), IP_A.into(), &p, 2000, 1000)
        .context("connecting b's QP")?;

    // 5. RDMA WRITE: fill a's source bytes, post, poll.
    fill(&mut a.mr_mut(&sa.mr)?[..LEN], 0xA5);
    let write = SendOp::Write {
        remote_addr: sb.mr.addr() + WRITE_AT as u64,
        rkey: sb.mr.rkey(),
    };
    let src = sa.mr.sge(0, LEN as u32).context("source SGE")?;
    let wr = SendWr::new(1, write, Payload::sge(src));
    let write_time = post_and_wait(&mut a, &sa, &mut b, wr, WcOpcode::RdmaWrite)?;
    // The requester's completion means the responder acknowledged the
    // data: it is in b's region now.
    if let Some(i) = first_mismatch(&b.mr(&sb.mr)?[WRITE_AT..][..LEN], 0xA5) {
        bail!("RDMA WRITE: byte {i} of b's region is wrong");
    }

    // 6. RDMA READ: b's application fills its bytes (b posts nothing:
    //    its transport answers the READ), then a reads them.
    fill(&mut b.mr_mut(&sb.mr)?[READ_FROM..][..LEN], 0x5A);
    let read = SendOp::Read {
        remote_addr: sb.mr.addr() + READ_FROM as u64,
        rkey: sb.mr.rkey(),
    };
    let dst = sa
        .mr
        .sge(READ_INTO, LEN as u32)
        .context("destination SGE")?;
    let wr = SendWr::new(2, read, Payload::sge(dst));
    let read_time = post_and_wait(&mut a, &sa, &mut b, wr, WcOpcode::RdmaRead)?;
    // The READ's completion means the bytes are in a's region.
    if let Some(i) = first_mismatch(&a.mr(&sa.mr)?[READ_INTO..][..LEN], 0x5A) {
        bail!("RDMA READ: byte {i} of a's region is wrong");
    }

    let (ca, cb) = (a.qp_counters(&sa.qp)?, b.qp_counters(&sb.qp)?);
    // 7. Tear down; the ports, the mempool and the EAL close when their
    //    last handle drops, at the end of this function.
    teardown(&mut a, sa)?;
    teardown(&mut b, sb)?;
    println!(
        "rc_write: DPDK {} ring pair ({}), path MTU {}",
        dpdk::DPDK_VERSION,
        if eal.hugepages() {
            "hugepages"
        } else {
            "no hugepages"
        },
        mtu.bytes()
    );
    println!(
        "  RDMA WRITE {LEN} B a -> b: verified ({} us)",
        write_time.as_micros()
    );
    println!(
        "  RDMA READ  {LEN} B b -> a: verified ({} us)",
        read_time.as_micros()
    );
    println!(
        "  a sent {} packets, received {}; b sent {}, received {}",
        ca.sent_pkts, ca.rcvd_pkts, cb.sent_pkts, cb.rcvd_pkts
    );
    println!("rc_write: OK");
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_write: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
