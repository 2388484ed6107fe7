//! The datapath allocates nothing in steady state.
//!
//! A counting global allocator (stats_alloc) watches two transport devices
//! wired back to back in virtual time: after a warm-up, thousands of
//! posts, frames, acknowledgements and completions of each kind (64 B and
//! 4 KiB WRITEs, SENDs into reposted receives, READs) must not allocate
//! once. The loads run three times: with frames moved from one device
//! straight into the other, the same with every payload left in its
//! region (zero-copy send, taken in parts by the receiver), then through
//! the engine's pump and a loopback backend
//! (its bursts, frame buffers from the backend's pool, its queues), as a
//! host's poll loop moves them. (The engine's memory per QP is measured
//! by `ferroce bench e2e`'s QP sweep.)
//!
//! The counters are the whole process's, so this file runs without the
//! test harness (`harness = false`), on its main thread alone: the
//! harness's own thread, starting a test or reporting one's end,
//! allocated now and then inside a count.

use core::net::IpAddr;
use std::alloc::System;

use ferroce::backend::loopback::{self, LoopbackPort, VecBuf};
use ferroce::backend::Burst;
use ferroce::host::pump::{pump_with, MAX_FRAME};
use ferroce::time::{Duration, Instant};
use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::MacAddr;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

mod common;
use common::lends::Lends;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
/// Bytes of each end's region: the sources, then the targets.
const REGION: usize = 1 << 20;
/// WRITEs and SENDs outstanding per QP; one in `SIGNAL` is signaled.
const DEPTH: u64 = 32;
const SIGNAL: u64 = 8;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([198, 18, 0, last])
}

/// One device with `n` RC QPs on one CQ and one region.
struct End {
    dev: Device,
    qps: Vec<u32>,
    cq: CqId,
    mr: MrKeys,
    wcs: Vec<Wc>,
}

impl End {
    /// `lends`: the region lends its memory and zero-copy send is on for
    /// every payload.
    fn new(mac: MacAddr, last: u8, n: usize, caps: QpCaps, lends: bool) -> End {
        let mut dev = Device::new(DeviceConfig::new(mac, ip(last))).unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(1 << 16).unwrap();
        let spec = MrSpec::new(pd, REGION, Access::ALL);
        let mr = if lends {
            dev.set_zero_copy(Some(1));
            dev.reg_mr_memory(spec, Box::new(Lends(vec![0; REGION])))
        } else {
            dev.reg_mr(spec)
        }
        .unwrap();
        let qps = (0..n)
            .map(|_| dev.create_qp(pd, cq, cq, caps).unwrap())
            .collect();
        End {
            dev,
            qps,
            cq,
            mr,
            wcs: Vec::with_capacity(256),
        }
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }
}

/// `a`'s and `b`'s QPs connected pairwise at path MTU 1024.
fn pair(n: usize, caps: QpCaps, lends: bool) -> (End, End) {
    let mut a = End::new(MAC_A, 1, n, caps, lends);
    let mut b = End::new(MAC_B, 2, n, caps, lends);
    let p = ConnectParams {
        mtu: Mtu::Mtu1024,
        ..ConnectParams::default()
    };
    for i in 0..n {
        let (qa, qb) = (a.qps[i], b.qps[i]);
        connect_qp(&mut a.dev, qa, qb, MAC_B, ip(2), &p, 0, 0).unwrap();
        connect_qp(&mut b.dev, qb, qa, MAC_A, ip(1), &p, 0, 0).unwrap();
    }
    (a, b)
}

/// Moves every frame either device has to send into the other, and runs
/// the timers due, until both are quiet at `now`.
fn exchange(a: &mut Device, b: &mut Device, now: Instant, buf: &mut [u8]) {
    while one_way(a, b, now, buf) | one_way(b, a, now, buf) {}
}

/// `from`'s due timers, then every frame it has, into `to`; whether any
/// frame moved.
fn one_way(from: &mut Device, to: &mut Device, now: Instant, buf: &mut [u8]) -> bool {
    if from.poll_timeout().is_some_and(|t| t <= now) {
        from.handle_timeout(now);
    }
    let mut moved = false;
    while let Some(t) = from.poll_transmit_parts(now, buf) {
        match t.lent {
            // Zero-copy send: the payload is read where it lies.
            Some(l) => {
                let payload = &from.mr(l.lkey).unwrap()[l.offset..l.offset + l.len];
                assert!(to.handle_parts(now, &buf[..l.head], payload, &buf[l.head..t.len]));
            }
            None => to.handle(now, &buf[..t.len]),
        }
        moved = true;
    }
    moved
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Write,
    Send,
    Read,
}

/// The two ends' ports of a loopback link, each driven by the engine's
/// own pump ([`pump_with`]) as a host's poll loop drives it: frames go
/// through the backend's buffers (taken from and freed back to its pool),
/// bursts and queues, not a buffer of the test's.
struct Ports {
    a: LoopbackPort,
    b: LoopbackPort,
    pending: [Burst<VecBuf>; 2],
    spare: [Option<VecBuf>; 2],
}

impl Ports {
    fn new() -> Ports {
        let (a, b) = loopback::pair(1024, MAX_FRAME);
        Ports {
            a,
            b,
            pending: [Burst::new(), Burst::new()],
            spare: [None, None],
        }
    }

    /// Pumps both ends until neither moves a frame at `now`.
    fn exchange(&mut self, a: &mut Device, b: &mut Device, now: Instant) {
        loop {
            let [pa, pb] = &mut self.pending;
            let [sa, sb] = &mut self.spare;
            let x = pump_with(a, &mut self.a, now, pa, sa);
            let y = pump_with(b, &mut self.b, now, pb, sb);
            if x.rx + x.tx + y.rx + y.tx == 0 {
                break;
            }
        }
    }
}

/// Runs `count` messages of `size` bytes of `kind` from `a` to `b`,
/// round-robin over the QPs, `DEPTH` outstanding per QP; every completion
/// must succeed. `recvs_posted` counts the receives `b` has posted per QP
/// (kept `DEPTH` ahead of the SENDs).
struct Load<'a> {
    a: &'a mut End,
    b: &'a mut End,
    now: Instant,
    buf: Vec<u8>,
    /// Frames go through the pump and a loopback backend; else straight
    /// from one device into the other.
    ports: Option<Ports>,
    posted: Vec<u64>,
    done: Vec<u64>,
}

impl Load<'_> {
    fn run(&mut self, kind: Kind, size: u32, count: u64) {
        let n = self.a.qps.len();
        let (mut sent, mut completed) = (0u64, 0u64);
        let (target, rkey) = (self.b.mr.addr + (REGION / 2) as u64, self.b.mr.rkey);
        let mut steps = 0u64;
        while completed < count {
            steps += 1;
            assert!(
                steps < 50 * count + 10_000,
                "{kind:?} {size} B: no progress"
            );
            // Post: each QP up to DEPTH outstanding.
            for i in 0..n {
                while sent < count && self.posted[i] - self.done[i] < DEPTH {
                    let k = self.posted[i];
                    let qp = self.a.qps[i];
                    let op = match kind {
                        Kind::Write => SendOp::Write {
                            remote_addr: target,
                            rkey,
                        },
                        Kind::Send => SendOp::Send,
                        Kind::Read => SendOp::Read {
                            remote_addr: target,
                            rkey,
                        },
                    };
                    if kind == Kind::Send {
                        let wr = RecvWr {
                            wr_id: k,
                            sges: smallvec::smallvec![self.b.sge(REGION as u64 / 2, size)],
                        };
                        self.b.dev.post_recv(self.b.qps[i], wr).unwrap();
                    }
                    let mut wr = SendWr::new(k, op, Payload::sge(self.a.sge(0, size)));
                    wr.signaled = (k + 1) % SIGNAL == 0;
                    self.a.dev.post_send(qp, wr).unwrap();
                    self.posted[i] += 1;
                    sent += 1;
                }
            }
            match &mut self.ports {
                Some(p) => p.exchange(&mut self.a.dev, &mut self.b.dev, self.now),
                None => exchange(&mut self.a.dev, &mut self.b.dev, self.now, &mut self.buf),
            }
            self.now += Duration::from_nanos(1_000);
            for end in [&mut *self.a, &mut *self.b] {
                end.wcs.clear();
                end.dev.poll_cq(end.cq, 256, &mut end.wcs);
                for wc in &end.wcs {
                    assert_eq!(wc.status, WcStatus::Success, "{kind:?} {size} B: {wc:?}");
                }
            }
            for wc in &self.a.wcs {
                // A signaled completion retires the SIGNAL work requests
                // up to it.
                let i = self.a.qps.iter().position(|&q| q == wc.qp_num).unwrap();
                let upto = wc.wr_id + 1;
                completed += upto - self.done[i];
                self.done[i] = upto;
            }
        }
    }
}

fn load<'a>(a: &'a mut End, b: &'a mut End, ports: Option<Ports>) -> Load<'a> {
    let n = a.qps.len();
    Load {
        a,
        b,
        now: Instant::from_nanos(1_000_000),
        buf: vec![0u8; 9216],
        ports,
        posted: vec![0; n],
        done: vec![0; n],
    }
}

/// The four loads of `l`, each warmed up and then run 20,000 times under
/// the counter: no allocation, no reallocation.
fn no_allocation_in(l: &mut Load<'_>, what: &str) {
    let cases = [
        (Kind::Write, 64),
        (Kind::Write, 4096),
        (Kind::Send, 64),
        (Kind::Read, 64),
    ];
    for (kind, size) in cases {
        l.run(kind, size, 2_000);
        let region = Region::new(GLOBAL);
        l.run(kind, size, 20_000);
        let c = region.change();
        println!("{what}: {kind:?} {size} B: 20,000 messages, {c:?}");
        assert_eq!(
            (c.allocations, c.reallocations),
            (0, 0),
            "{what}: {kind:?} of {size} B allocated in steady state: {c:?}"
        );
    }
    let c = l.a.dev.counters();
    assert_eq!(
        (c.retransmitted_pkts, c.local_ack_timeout_err),
        (0, 0),
        "{c}"
    );
    assert!(c.sent_pkts >= 4 * 22_000 + 3 * 22_000, "{c}");
}

/// The counter sees the heap: a control allocation counts.
fn counter_is_live() {
    let control = Region::new(GLOBAL);
    std::hint::black_box(vec![0u8; 100]);
    assert!(
        control.change().allocations >= 1,
        "the counting allocator is not in use"
    );
}

/// Posting, sending, receiving, acknowledging and completing allocate
/// nothing once the queues have reached their working size: for 64 B
/// WRITEs (one packet each), 4 KiB WRITEs (four packets at MTU 1024),
/// 64 B SENDs into receives posted as they go, and 64 B READs. First with
/// frames passed from device to device; then through the engine's pump
/// and a backend (the loopback, with its buffer pool, as DPDK's mbufs come
/// from a mempool), whose receive bursts, transmit bursts, frame buffers
/// and queues allocate nothing either.
fn main() {
    the_datapath_and_the_pump_allocate_nothing_in_steady_state();
    println!("alloc_free: ok");
}

fn the_datapath_and_the_pump_allocate_nothing_in_steady_state() {
    counter_is_live();
    {
        let (mut a, mut b) = pair(4, QpCaps::default(), false);
        no_allocation_in(&mut load(&mut a, &mut b, None), "devices");
    }
    {
        let (mut a, mut b) = pair(4, QpCaps::default(), true);
        no_allocation_in(&mut load(&mut a, &mut b, None), "zero-copy");
        assert!(
            a.dev.counters().lent_pkts >= 3 * 22_000,
            "{}",
            a.dev.counters()
        );
    }
    let (mut a, mut b) = pair(4, QpCaps::default(), false);
    let ports = Some(Ports::new());
    no_allocation_in(&mut load(&mut a, &mut b, ports), "pump");
}
