//! One port on several datapaths: each a transport device of its own
//! (`DeviceConfig::shard`) over one queue pair of the port, with received
//! frames steered to the datapath that owns their QP
//! (`backend::steer`). Two such engines, each split over the same number
//! of queue pairs, exchange RC WRITEs and SENDs between QPs that sit on
//! different datapaths at the two ends, so that every frame arrives on a
//! queue its QP's owner does not poll; once driven from one thread, once
//! with a thread per datapath. The bytes, the completions and the
//! counters are checked.

// Datapath i of one engine pairs with datapath i + 1 of the other: index loops say so.
#![allow(clippy::needless_range_loop)]

use ferroce::backend::loopback::{pair, LoopbackPort};
use ferroce::backend::steer::{steer, Steered};
use ferroce::backend::{Backend, Burst};
use ferroce::host::pump::pump_with;
use ferroce::time::Instant;
use ferroce::time::{Clock, Duration};
use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::{MacAddr, Shard};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

const LEN: usize = 1 << 16;
const MSGS: u64 = 200;

/// One datapath of an engine: its device, its queue pair, one QP.
struct Dp {
    dev: Device,
    port: Steered<LoopbackPort>,
    pending: Burst<<LoopbackPort as Backend>::Buf>,
    spare: Option<<LoopbackPort as Backend>::Buf>,
    cq: CqId,
    mr: MrKeys,
    qp: u32,
    wcs: Vec<Wc>,
}

impl Dp {
    fn step(&mut self, now: Instant) {
        pump_with(
            &mut self.dev,
            &mut self.port,
            now,
            &mut self.pending,
            &mut self.spare,
        );
        self.dev.poll_cq(self.cq, 64, &mut self.wcs);
    }
}

fn engine(mac: [u8; 6], ip: &str, queues: Vec<LoopbackPort>) -> Vec<Dp> {
    let ip: IpAddr = ip.parse().unwrap();
    steer(queues, 256)
        .unwrap()
        .into_iter()
        .map(|port| {
            let mut cfg = DeviceConfig::new(MacAddr(mac), ip);
            cfg.shard = port.shard();
            cfg.port_mtu = Mtu::Mtu4096;
            let mut dev = Device::new(cfg).unwrap();
            let pd = dev.alloc_pd();
            let cq = dev.create_cq(4096).unwrap();
            let mr = dev.reg_mr(MrSpec::new(pd, LEN, Access::ALL)).unwrap();
            let caps = QpCaps {
                max_send_wr: 256,
                max_recv_wr: 256,
                ..QpCaps::default()
            };
            let qp = dev.create_qp(pd, cq, cq, caps).unwrap();
            assert!(port.shard().owns(qp), "QP {qp:#x} is its shard's");
            Dp {
                dev,
                port,
                pending: Burst::new(),
                spare: None,
                cq,
                mr,
                qp,
                wcs: Vec::new(),
            }
        })
        .collect()
}

/// Engines A and B over `n` queue pairs; A's datapath i is connected to
/// B's datapath (i + 1) mod n.
fn engines(n: usize) -> (Vec<Dp>, Vec<Dp>) {
    let (qa, qb): (Vec<_>, Vec<_>) = (0..n).map(|_| pair(512, 4352)).unzip();
    let mut a = engine([2, 0, 0, 0, 0, 0xA], "198.18.0.1", qa);
    let mut b = engine([2, 0, 0, 0, 0, 0xB], "198.18.0.2", qb);
    let p = ConnectParams {
        mtu: Mtu::Mtu1024,
        ..ConnectParams::default()
    };
    for i in 0..n {
        let j = (i + 1) % n;
        let (ma, ia) = (a[i].dev.config().mac, a[i].dev.config().gids[0]);
        let (mb, ib) = (b[j].dev.config().mac, b[j].dev.config().gids[0]);
        let (qa, qb) = (a[i].qp, b[j].qp);
        connect_qp(&mut a[i].dev, qa, qb, mb, ib, &p, 0, 0).unwrap();
        connect_qp(&mut b[j].dev, qb, qa, ma, ia, &p, 0, 0).unwrap();
    }
    (a, b)
}

fn pattern(seed: usize) -> Vec<u8> {
    (0..LEN / 2).map(|k| (k * 31 + seed * 7) as u8).collect()
}

/// A's datapath i WRITEs its pattern (4 KiB at a time) into B's region
/// and SENDs `MSGS` small messages; B's datapath answers nothing but ACKs.
fn load(a: &mut Dp, b: &mut Dp, i: usize) {
    let pat = pattern(i);
    a.dev.mr_mut(a.mr.lkey).unwrap()[..LEN / 2].copy_from_slice(&pat);
    for k in 0..MSGS {
        let sge = Sge {
            addr: b.mr.addr + (k % 64) * 64,
            length: 64,
            lkey: b.mr.lkey,
        };
        b.dev
            .post_recv(
                b.qp,
                RecvWr {
                    wr_id: k,
                    sges: [sge].into_iter().collect(),
                },
            )
            .unwrap();
    }
}

/// Posts what fits of A's work: the WRITEs first, then the SENDs.
fn post(a: &mut Dp, remote: (u64, u32), next: &mut u64) {
    let writes = (LEN / 2 / 4096) as u64;
    while *next < writes + MSGS && a.dev.send_queue_len(a.qp) < 200 {
        let k = *next;
        let wr = if k < writes {
            let off = k * 4096;
            SendWr::new(
                k,
                SendOp::Write {
                    remote_addr: remote.0 + (LEN / 2) as u64 + off,
                    rkey: remote.1,
                },
                Payload::sge(Sge {
                    addr: a.mr.addr + off,
                    length: 4096,
                    lkey: a.mr.lkey,
                }),
            )
        } else {
            SendWr::new(
                k,
                SendOp::Send,
                Payload::sge(Sge {
                    addr: a.mr.addr + (k % 64) * 64,
                    length: 64,
                    lkey: a.mr.lkey,
                }),
            )
        };
        a.dev.post_send(a.qp, wr).unwrap();
        *next += 1;
    }
}

/// Drives A's datapath `i` and B's datapath `i` (which serves A's
/// datapath i - 1) until `done` says so, from one thread.
struct Lane<'a> {
    a: &'a mut Dp,
    b: &'a mut Dp,
    remote: (u64, u32),
    next: u64,
    a_done: u64,
    b_recvs: u64,
}

impl Lane<'_> {
    fn step(&mut self, now: Instant) {
        post(self.a, self.remote, &mut self.next);
        self.a.step(now);
        self.b.step(now);
        for wc in self.a.wcs.drain(..) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            self.a_done += 1;
        }
        for wc in self.b.wcs.drain(..) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.opcode, WcOpcode::Recv);
            self.b_recvs += 1;
        }
    }
}

const TOTAL: u64 = (LEN / 2 / 4096) as u64 + MSGS;

fn check(a: &[Dp], b: &[Dp]) {
    let n = a.len();
    for i in 0..n {
        let j = (i + 1) % n;
        let got = &b[j].dev.mr(b[j].mr.lkey).unwrap()[LEN / 2..];
        assert!(got == &pattern(i)[..], "A{i}'s WRITEs landed in B{j}");
        let ca = a[i].dev.rx_counters();
        let cb = b[j].dev.rx_counters();
        assert_eq!((ca.unknown_qp, cb.unknown_qp), (0, 0));
        assert_eq!(a[i].dev.counters().retransmitted_pkts, 0);
    }
    if n > 1 {
        for d in a.iter().chain(b) {
            let c = d.port.counters();
            assert!(c.handed_on > 0 && c.handed_in > 0, "{c:?}");
            assert_eq!(c.dropped, 0);
        }
    }
}

fn setup(n: usize) -> (Vec<Dp>, Vec<Dp>) {
    let (mut a, mut b) = engines(n);
    for i in 0..n {
        let j = (i + 1) % n;
        load(&mut a[i], &mut b[j], i);
    }
    (a, b)
}

fn lanes<'a>(a: &'a mut [Dp], b: &'a mut [Dp]) -> Vec<Lane<'a>> {
    let n = a.len();
    let remotes: Vec<(u64, u32)> = (0..n)
        .map(|i| {
            let r = &b[(i + 1) % n].mr;
            (r.addr, r.rkey)
        })
        .collect();
    a.iter_mut()
        .zip(b.iter_mut())
        .zip(remotes)
        .map(|((a, b), remote)| Lane {
            a,
            b,
            remote,
            next: 0,
            a_done: 0,
            b_recvs: 0,
        })
        .collect()
}

#[test]
fn qps_on_different_datapaths_at_each_end_exchange_writes_and_sends() {
    for n in [1usize, 2, 3] {
        let (mut a, mut b) = setup(n);
        {
            let mut ls = lanes(&mut a, &mut b);
            let mut t = 1u64;
            while ls.iter().any(|l| l.a_done < TOTAL || l.b_recvs < MSGS) {
                t += 1_000;
                assert!(t < 10_000_000_000, "{n} datapaths: stuck");
                for l in ls.iter_mut() {
                    l.step(Instant::from_nanos(t));
                }
            }
        }
        check(&a, &b);
    }
}

#[test]
fn each_datapath_on_its_own_thread() {
    let (mut a, mut b) = setup(2);
    let clock = ferroce::backend::WallClock::new();
    let finished = AtomicUsize::new(0);
    let lanes = lanes(&mut a, &mut b);
    let n = lanes.len();
    std::thread::scope(|s| {
        for mut l in lanes {
            let (clock, finished) = (&clock, &finished);
            s.spawn(move || {
                // Each lane also serves the previous lane's QP (on its B
                // datapath): it goes on until every lane is done.
                let end = clock.now() + Duration::from_secs(60);
                let mut mine = false;
                while finished.load(Ordering::Acquire) < n {
                    assert!(clock.now() < end, "stuck");
                    l.step(clock.now());
                    if !mine && l.a_done >= TOTAL && l.b_recvs >= MSGS {
                        mine = true;
                        finished.fetch_add(1, Ordering::AcqRel);
                    }
                }
            });
        }
    });
    check(&a, &b);
}

#[test]
fn a_datapaths_qp_numbers_are_its_own() {
    let mut cfg = DeviceConfig::new(MacAddr([2, 0, 0, 0, 0, 1]), "198.18.0.1".parse().unwrap());
    cfg.shard = Shard::new(4, 3).unwrap();
    let mut dev = Device::new(cfg.clone()).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16).unwrap();
    let caps = QpCaps::default();
    let qpns: Vec<u32> = (0..5)
        .map(|_| dev.create_qp(pd, cq, cq, caps).unwrap())
        .collect();
    assert_eq!(qpns, vec![0x13, 0x17, 0x1B, 0x1F, 0x23]);
    let other = QpCaps {
        qpn: Some(0x20),
        ..caps
    };
    assert_eq!(
        dev.create_qp(pd, cq, cq, other),
        Err(Error::QpnUnavailable(0x20))
    );
    let mine = QpCaps {
        qpn: Some(0x27),
        ..caps
    };
    assert_eq!(dev.create_qp(pd, cq, cq, mine), Ok(0x27));
    cfg.shard = Shard { count: 2, index: 2 };
    assert!(Device::new(cfg).is_err(), "index beyond the count");
}
