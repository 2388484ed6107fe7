//! Two RC transport devices over any two backend queues and a clock: the
//! run of `ferroce demo` after its link test (over DPDK ring ports there),
//! and of its tests. One QP pair runs a verified cycle of RDMA WRITE,
//! RDMA READ, SEND and FETCH_ADD with a bounded window; each result is
//! checked when its completion arrives.

use crate::backend::{Backend, Burst};
use crate::host::pump::pump;
use crate::time::{Clock, Duration, Instant};
use crate::transport::connect::{connect_qp, ConnectParams};
use crate::transport::{
    Access, CqId, Device, DeviceConfig, MrKeys, MrSpec, Mtu, Payload, QpCaps, QpCounters, RecvWr,
    SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use crate::wire::MacAddr;
use core::net::IpAddr;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcDemoConfig {
    /// Work requests a posts (WRITE, READ, SEND, FETCH_ADD in turn).
    pub msgs: u64,
    /// Bytes per WRITE, READ and SEND.
    pub size: u32,
    /// The path MTU both QPs are connected with.
    pub mtu: Mtu,
    /// Work requests outstanding at once.
    pub window: u32,
    /// Give up after this long.
    pub timeout: Duration,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RcDemoReport {
    /// a's work requests that completed successfully (b's receives not
    /// counted).
    pub completed: u64,
    /// Bytes of those work requests checked against what was sent (8 per
    /// FETCH_ADD).
    pub bytes_verified: u64,
    /// Completions with an error status, and results that did not match.
    pub failures: Vec<String>,
    /// From the first post until the cycle ended (done, failed or timed out).
    pub elapsed: Duration,
    /// a's QP counters at the end.
    pub a: QpCounters,
    /// b's QP counters at the end.
    pub b: QpCounters,
}

impl RcDemoReport {
    /// Whether all `cfg.msgs` work requests completed and nothing failed.
    pub fn ok(&self, cfg: &RcDemoConfig) -> bool {
        self.failures.is_empty() && self.completed == cfg.msgs
    }
}

/// One end: the device, its QP, CQ and memory.
struct End {
    dev: Device,
    qp: u32,
    cq: CqId,
    mr: MrKeys,
}

const SLOTS: u64 = 64;

impl End {
    fn new(mac: MacAddr, ip: IpAddr, size: u32) -> anyhow::Result<End> {
        let mut dev = Device::new(DeviceConfig::new(mac, ip))?;
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096)?;
        // Slots: [0, SLOTS) local sources / READ targets, [SLOTS, 2 SLOTS)
        // WRITE and SEND targets, then the FETCH_ADD word.
        let len = (2 * SLOTS as usize) * size as usize + 8 * SLOTS as usize + 8;
        let mr = dev.reg_mr(MrSpec {
            pd,
            len,
            access: Access::ALL,
            addr: None,
            key: None,
        })?;
        let qp = dev.create_qp(pd, cq, cq, QpCaps::default())?;
        Ok(End { dev, qp, cq, mr })
    }

    fn slot(&self, i: u64, size: u32) -> u64 {
        self.mr.addr + i * size as u64
    }
}

/// The byte at `off` of message `n`'s data.
fn pattern(n: u64, off: usize) -> u8 {
    (n.wrapping_mul(131).wrapping_add(off as u64 * 7) >> 1) as u8
}

/// Runs the demo between `pa` (the requester's port, `a`) and `pb`.
#[allow(clippy::too_many_arguments)]
pub fn run<A: Backend, B: Backend>(
    pa: &mut A,
    pb: &mut B,
    clock: &dyn Clock,
    a_addr: (MacAddr, IpAddr),
    b_addr: (MacAddr, IpAddr),
    cfg: &RcDemoConfig,
) -> anyhow::Result<RcDemoReport> {
    anyhow::ensure!(
        cfg.size > 0 && (1..=SLOTS as u32 / 2).contains(&cfg.window),
        "size must be positive and window in 1..={}",
        SLOTS / 2
    );
    let size = cfg.size;
    let mut a = End::new(a_addr.0, a_addr.1, size)?;
    let mut b = End::new(b_addr.0, b_addr.1, size)?;
    let p = ConnectParams {
        mtu: cfg.mtu,
        timeout: 12,
        ..ConnectParams::default()
    };
    connect_qp(&mut a.dev, a.qp, b.qp, b_addr.0, b_addr.1, &p, 0, 0)?;
    connect_qp(&mut b.dev, b.qp, a.qp, a_addr.0, a_addr.1, &p, 0, 0)?;
    // b's READ sources: slots [0, SLOTS) hold a pattern of their own.
    let sz = size as usize;
    {
        let m = b.dev.mr_mut(b.mr.lkey).expect("b's region");
        for s in 0..SLOTS as usize {
            for (o, x) in m[s * sz..(s + 1) * sz].iter_mut().enumerate() {
                *x = pattern(1_000_000 + s as u64, o);
            }
        }
    }
    let start = clock.now();
    let deadline = start + cfg.timeout;
    let mut rep = RcDemoReport {
        completed: 0,
        bytes_verified: 0,
        failures: Vec::new(),
        elapsed: Duration::ZERO,
        a: QpCounters::default(),
        b: QpCounters::default(),
    };
    let (mut posted, mut outstanding, mut adds) = (0u64, 0u32, 0u64);
    let mut wcs: Vec<Wc> = Vec::with_capacity(64);
    let mut qa: Burst<A::Buf> = Burst::new();
    let mut qb: Burst<B::Buf> = Burst::new();
    let mut now: Instant;
    while rep.completed < cfg.msgs && rep.failures.is_empty() {
        now = clock.now();
        if now >= deadline {
            rep.failures.push(format!(
                "timed out after {} with {} of {} completed",
                cfg.timeout, rep.completed, cfg.msgs
            ));
            break;
        }
        while outstanding < cfg.window && posted < cfg.msgs {
            post(&mut a, &mut b, posted, size)?;
            posted += 1;
            outstanding += 1;
        }
        pump(&mut a.dev, pa, now, &mut qa);
        pump(&mut b.dev, pb, now, &mut qb);
        wcs.clear();
        a.dev.poll_cq(a.cq, 64, &mut wcs);
        b.dev.poll_cq(b.cq, 64, &mut wcs);
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                rep.failures
                    .push(format!("wr {}: {:?} {}", wc.wr_id, wc.opcode, wc.status));
                continue;
            }
            if !verify(&a, &b, wc, size, &mut adds) {
                rep.failures.push(format!(
                    "wr {}: {:?} data does not match",
                    wc.wr_id, wc.opcode
                ));
            }
            if wc.opcode != WcOpcode::Recv {
                rep.completed += 1;
                outstanding -= 1;
                if wc.opcode != WcOpcode::FetchAdd {
                    rep.bytes_verified += size as u64;
                } else {
                    rep.bytes_verified += 8;
                }
            }
        }
    }
    rep.elapsed = clock.now() - start;
    rep.a = a.dev.qp_counters(a.qp).copied().unwrap_or_default();
    rep.b = b.dev.qp_counters(b.qp).copied().unwrap_or_default();
    Ok(rep)
}

/// Where the FETCH_ADD word sits in each region: after the `2 SLOTS`
/// message slots.
fn counter_at(size: u32) -> u64 {
    2 * SLOTS * size as u64
}

/// Posts work request `n` at `a`: WRITE, READ, SEND (its receive posted
/// at `b`) or FETCH_ADD in turn, in slot `n % SLOTS`; a WRITE's and a
/// SEND's data is message `n`'s pattern.
fn post(a: &mut End, b: &mut End, n: u64, size: u32) -> anyhow::Result<()> {
    let sz = size as usize;
    let counter_at = counter_at(size);
    let slot = n % SLOTS;
    let local = Sge {
        addr: a.slot(slot, size),
        length: size,
        lkey: a.mr.lkey,
    };
    let (op, payload) = match n % 4 {
        0 => {
            let m = a.dev.mr_mut(a.mr.lkey).expect("a's region");
            for (o, x) in m[slot as usize * sz..][..sz].iter_mut().enumerate() {
                *x = pattern(n, o);
            }
            (
                SendOp::Write {
                    remote_addr: b.slot(SLOTS + slot, size),
                    rkey: b.mr.rkey,
                },
                Payload::sge(local),
            )
        }
        1 => (
            SendOp::Read {
                remote_addr: b.slot(slot, size),
                rkey: b.mr.rkey,
            },
            Payload::sge(local),
        ),
        2 => {
            let m = a.dev.mr_mut(a.mr.lkey).expect("a's region");
            for (o, x) in m[slot as usize * sz..][..sz].iter_mut().enumerate() {
                *x = pattern(n, o);
            }
            let rsge = Sge {
                addr: b.slot(SLOTS + slot, size),
                length: size,
                lkey: b.mr.lkey,
            };
            b.dev.post_recv(
                b.qp,
                RecvWr {
                    wr_id: n,
                    sges: smallvec::smallvec![rsge],
                },
            )?;
            (SendOp::Send, Payload::sge(local))
        }
        _ => (
            SendOp::FetchAdd {
                remote_addr: b.mr.addr + counter_at,
                rkey: b.mr.rkey,
                add: 1,
            },
            Payload::sge(Sge {
                addr: a.mr.addr + counter_at + 8 + slot * 8,
                length: 8,
                lkey: a.mr.lkey,
            }),
        ),
    };
    a.dev.post_send(a.qp, SendWr::new(n, op, payload))?;
    Ok(())
}

/// Whether the result of the successful completion `wc` is what it should
/// be: the data written, read or received, or the FETCH_ADD's old value
/// (`adds`, the FETCH_ADDs completed before it).
fn verify(a: &End, b: &End, wc: &Wc, size: u32, adds: &mut u64) -> bool {
    let sz = size as usize;
    let n = wc.wr_id;
    let slot = (n % SLOTS) as usize;
    let ma = a.dev.mr(a.mr.lkey).expect("a's region");
    let mb = b.dev.mr(b.mr.lkey).expect("b's region");
    match wc.opcode {
        WcOpcode::RdmaWrite => {
            let got = &mb[(SLOTS as usize + slot) * sz..][..sz];
            got.iter().enumerate().all(|(o, &x)| x == pattern(n, o))
        }
        WcOpcode::RdmaRead => {
            let got = &ma[slot * sz..][..sz];
            got.iter()
                .enumerate()
                .all(|(o, &x)| x == pattern(1_000_000 + slot as u64, o))
        }
        WcOpcode::Recv => {
            let got = &mb[(SLOTS as usize + slot) * sz..][..sz];
            wc.byte_len == size && got.iter().enumerate().all(|(o, &x)| x == pattern(n, o))
        }
        WcOpcode::FetchAdd => {
            let at = (counter_at(size) + 8 + slot as u64 * 8) as usize;
            let old = u64::from_le_bytes(ma[at..at + 8].try_into().unwrap_or([0; 8]));
            let ok = old == *adds;
            *adds += 1;
            ok
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback;
    use std::cell::Cell;

    /// A clock that moves 1 µs each time it is read.
    struct Ticks(Cell<u64>);
    impl Clock for Ticks {
        fn now(&self) -> Instant {
            self.0.set(self.0.get() + 1_000);
            Instant::from_nanos(self.0.get())
        }
    }

    #[test]
    fn write_read_send_fetch_add_verified_over_a_loopback_pair() {
        let (mut pa, mut pb) = loopback::pair(256, 4352);
        let a = (MacAddr([2, 0, 0, 0, 0, 1]), "198.18.0.1".parse().unwrap());
        let b = (MacAddr([2, 0, 0, 0, 0, 2]), "198.18.0.2".parse().unwrap());
        for mtu in [Mtu::Mtu256, Mtu::Mtu4096] {
            let cfg = RcDemoConfig {
                msgs: 400,
                size: 5000,
                mtu,
                window: 16,
                timeout: Duration::from_secs(10),
            };
            let r = run(&mut pa, &mut pb, &Ticks(Cell::new(0)), a, b, &cfg).unwrap();
            assert!(r.ok(&cfg), "{r:?}");
            assert_eq!(r.bytes_verified, 300 * 5000 + 100 * 8);
            assert_eq!(r.a.retransmitted_pkts, 0);
        }
    }
}
