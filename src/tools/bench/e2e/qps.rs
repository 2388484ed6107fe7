//! The QP-count sweep of `ferroce bench e2e`: the message rate of 64 B
//! RDMA WRITEs spread round-robin over 1, 100, 1,000 and 10,000 connected
//! QPs between two engines, and the heap each QP costs the engine.
//!
//! Every point runs the same workload, so the 1-QP point is the baseline
//! the others are judged against: at most [`WINDOW`] WRITEs outstanding in
//! all, each QP taking its turn (with more QPs than the window, each QP
//! has one WRITE out at a time), every WRITE signaled (a QP with one
//! WRITE out has nothing to retire it otherwise), every completion
//! checked.
//!
//! Memory is what the heap holds after the QPs were created, connected
//! and ran, less what it held before them (the devices, their CQ and
//! region made already, and the bench's list of QP numbers; both engines,
//! so halved), per QP, less the application's queues
//! ([`QpCaps::queue_bytes`]). A completion finds its QP by its work
//! request's id, with no table of the bench's own. It needs the
//! counting allocator the `ferroce` binary installs; elsewhere it is not
//! measured.

use super::{drive, QpParams, Rate, Run, Side};
use crate::backend::{Backend, Burst, FrameBuf};
use crate::host::pump::pump_with;
use crate::time::{Clock, Duration, Instant};
use crate::transport::connect::{connect_qp, ConnectParams};
use crate::transport::{
    Access, CqId, Device, DeviceConfig, MrKeys, MrSpec, Payload, PdId, QpCaps, QpConfig, SendOp,
    SendWr, Sge, Wc, WcStatus,
};
use crate::wire::MacAddr;
use core::net::IpAddr;
use serde::Serialize;

/// WRITEs outstanding in all, whatever the QP count.
pub const WINDOW: u64 = 128;
/// Bytes of each WRITE.
const SIZE: u32 = 64;
/// Completions polled at once.
const POLL: usize = 64;

/// One point of the sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct QpPoint {
    /// Connected QPs on each engine.
    pub qps: usize,
    /// The WRITEs that completed, their frames, the wall time.
    pub rate: Rate,
    /// This point's message rate over the 1-QP point's.
    pub of_one: f64,
    /// Heap bytes the engine holds per QP beyond the application's queues
    /// (`None`: no counting allocator in this process).
    pub engine_bytes_per_qp: Option<f64>,
    /// The application's queues per QP ([`QpCaps::queue_bytes`]).
    pub queue_bytes_per_qp: usize,
}

/// Live heap bytes, when the process counts its allocations (the
/// `ferroce` binary installs stats_alloc's allocator).
pub fn live_heap() -> Option<i64> {
    let s = stats_alloc::INSTRUMENTED_SYSTEM.stats();
    (s.allocations > 0)
        .then(|| s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64)
}

/// One end: a device with `n` RC QPs on one CQ and one small region.
pub struct Many<T> {
    dev: Device,
    qps: Vec<u32>,
    cq: CqId,
    pd: PdId,
    mr: MrKeys,
    caps: QpCaps,
    wcs: Vec<Wc>,
    pending: Burst<T>,
    spare: Option<T>,
}

impl<T: FrameBuf> Many<T> {
    /// A device with its CQ and region, no QP yet.
    pub fn new(mac: MacAddr, ip: IpAddr) -> anyhow::Result<Many<T>> {
        let mut dev = Device::new(DeviceConfig::new(mac, ip))?;
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4 * WINDOW as usize)?;
        let mr = dev.reg_mr(MrSpec::new(pd, 64 << 10, Access::ALL))?;
        Ok(Many {
            dev,
            qps: Vec::new(),
            cq,
            pd,
            mr,
            caps: QpCaps::default(),
            wcs: Vec::with_capacity(POLL),
            pending: Burst::new(),
            spare: None,
        })
    }

    /// `n` QPs, each with room for its share of [`WINDOW`].
    pub fn add_qps(&mut self, n: usize, p: &QpParams) -> anyhow::Result<()> {
        anyhow::ensure!((1..=100_000).contains(&n), "1 to 100,000 QPs");
        let per_qp = WINDOW.div_ceil(n as u64) as u32;
        self.caps = QpCaps {
            max_send_wr: per_qp,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
            config: Some(QpConfig {
                max_inflight: p.inflight,
                ack_req_every: QpConfig::default().ack_req_every.min(p.inflight),
                ..QpConfig::default()
            }),
            ..QpCaps::default()
        };
        self.reserve(n);
        for _ in 0..n {
            let qp = self.dev.create_qp(self.pd, self.cq, self.cq, self.caps)?;
            self.qps.push(qp);
        }
        Ok(())
    }

    /// Room for `n` QPs in the list of their numbers (the application's
    /// bookkeeping, made before the engine's memory is measured).
    pub fn reserve(&mut self, n: usize) {
        self.qps.reserve(n);
    }

    fn pump<B: Backend<Buf = T>>(&mut self, port: &mut B, now: Instant) {
        pump_with(&mut self.dev, port, now, &mut self.pending, &mut self.spare);
    }

    fn poll(&mut self) {
        self.wcs.clear();
        self.dev.poll_cq(self.cq, POLL, &mut self.wcs);
    }
}

/// Connects `a`'s QP `i` with `b`'s QP `i`, for every `i`.
pub fn connect_many<T: FrameBuf>(
    a: &mut Many<T>,
    b: &mut Many<T>,
    p: &QpParams,
) -> anyhow::Result<()> {
    let cp = ConnectParams {
        mtu: p.mtu,
        ..ConnectParams::default()
    };
    let (mac_a, ip_a) = (a.dev.config().mac, a.dev.config().gids[0]);
    let (mac_b, ip_b) = (b.dev.config().mac, b.dev.config().gids[0]);
    for (&qa, &qb) in a.qps.iter().zip(&b.qps) {
        connect_qp(&mut a.dev, qa, qb, mac_b, ip_b, &cp, 0, 0)?;
        connect_qp(&mut b.dev, qb, qa, mac_a, ip_a, &cp, 0, 0)?;
    }
    Ok(())
}

/// Posts 64 B WRITEs round-robin over the QPs, [`WINDOW`] out in all and
/// the QP's share each, until `count` completed.
struct RoundRobin<'e, T> {
    e: &'e mut Many<T>,
    remote: (u64, u32),
    count: u64,
    per_qp: u32,
    out: Vec<u32>,
    next: usize,
    posted: u64,
    completed: u64,
    failure: Option<String>,
}

impl<B: Backend> Side<B> for RoundRobin<'_, B::Buf> {
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B) {
        let n = self.e.qps.len();
        let sge = Sge {
            addr: self.e.mr.addr,
            length: SIZE,
            lkey: self.e.mr.lkey,
        };
        let mut tried = 0;
        while self.posted < self.count && self.posted - self.completed < WINDOW && tried < n {
            let i = self.next;
            self.next = (i + 1) % n;
            tried += 1;
            if self.out[i] >= self.per_qp {
                continue;
            }
            let op = SendOp::Write {
                remote_addr: self.remote.0,
                rkey: self.remote.1,
            };
            // The work request's id is its QP's place in the list, as an
            // application keeps a context per QP: its completion finds it
            // with no lookup.
            let wr = SendWr::new(i as u64, op, Payload::sge(sge));
            if let Err(err) = self.e.dev.post_send(self.e.qps[i], wr) {
                self.failure = Some(format!("post_send on QP {i}: {err}"));
                return;
            }
            self.out[i] += 1;
            self.posted += 1;
            tried = 0;
        }
        self.e.pump(port, clock.now());
        self.e.poll();
        for wc in &self.e.wcs {
            if wc.status != WcStatus::Success {
                self.failure
                    .get_or_insert_with(|| format!("QP {}: {}", wc.wr_id, wc.status));
            } else if let Some(out) = self.out.get_mut(wc.wr_id as usize) {
                *out -= 1;
                self.completed += 1;
            }
        }
    }

    fn done(&self) -> bool {
        self.completed >= self.count || self.failure.is_some()
    }
}

/// The answering end: pumps its device.
struct Answer<'e, T> {
    e: &'e mut Many<T>,
}

impl<B: Backend> Side<B> for Answer<'_, B::Buf> {
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B) {
        self.e.pump(port, clock.now());
        self.e.poll();
    }
}

impl<C: Clock + Sync, G> Run<'_, C, G> {
    /// `count` round-robin WRITEs over every QP of `a` towards `b`.
    pub fn round_robin<B: Backend + Send>(
        &self,
        (a, pa): (&mut Many<B::Buf>, &mut B),
        (b, pb): (&mut Many<B::Buf>, &mut B),
        count: u64,
    ) -> anyhow::Result<Rate>
    where
        B::Buf: Send,
    {
        let n = a.qps.len();
        let (ca, cb) = (a.dev.counters(), b.dev.counters());
        let mut w = RoundRobin {
            remote: (b.mr.addr, b.mr.rkey),
            count,
            per_qp: a.caps.max_send_wr,
            out: vec![0; n],
            next: 0,
            posted: 0,
            completed: 0,
            failure: None,
            e: a,
        };
        let mut s = Answer { e: b };
        let took = drive(
            self.threads,
            self.clock,
            (&mut w, pa),
            (&mut s, pb),
            self.limit,
            self.register,
        );
        if let Some(f) = w.failure {
            anyhow::bail!("{n} QPs, 64 B WRITEs: {f}");
        }
        let completed = w.completed;
        // Let the last acknowledgements land before the next run.
        let end = self.clock.now() + Duration::from_millis(200);
        while w.posted > w.completed && self.clock.now() < end {
            w.step(self.clock, pa);
            s.step(self.clock, pb);
        }
        anyhow::ensure!(completed > 0, "{n} QPs: no WRITE completed in {took}");
        let (da, db) = (w.e.dev.counters(), s.e.dev.counters());
        Ok(Rate {
            msgs: completed,
            frames: (da.sent_pkts - ca.sent_pkts) + (db.sent_pkts - cb.sent_pkts),
            bytes: completed * u64::from(SIZE),
            secs: took.as_secs_f64(),
            retransmitted: da.retransmitted_pkts - ca.retransmitted_pkts,
            lent: 0,
            complete: completed >= count,
        })
    }

    /// The sweep: for each count of [`DEFAULT_COUNTS`] up to `max_qps`,
    /// two engines with that many QPs on `pa` / `pb`, connected, warmed
    /// up, then `msgs` round-robin WRITEs timed. The first count is the
    /// baseline of `of_one`.
    #[allow(clippy::too_many_arguments)]
    pub fn qp_sweep<B: Backend + Send>(
        &self,
        pa: &mut B,
        pb: &mut B,
        (mac_a, ip_a): (MacAddr, IpAddr),
        (mac_b, ip_b): (MacAddr, IpAddr),
        p: &QpParams,
        max_qps: usize,
        msgs: u64,
    ) -> anyhow::Result<Vec<QpPoint>>
    where
        B::Buf: Send,
    {
        let mut out: Vec<QpPoint> = Vec::new();
        for n in DEFAULT_COUNTS.into_iter().filter(|&n| n <= max_qps) {
            let mut a = Many::new(mac_a, ip_a)?;
            let mut b = Many::new(mac_b, ip_b)?;
            a.reserve(n);
            b.reserve(n);
            let before = live_heap();
            a.add_qps(n, p)?;
            b.add_qps(n, p)?;
            connect_many(&mut a, &mut b, p)?;
            // Every QP sends at least once before the timed run.
            let warm = (n as u64).max(msgs / 10);
            self.round_robin((&mut a, pa), (&mut b, pb), warm)?;
            let after = live_heap();
            let rate = self.round_robin((&mut a, pa), (&mut b, pb), msgs)?;
            let queue = a.caps.queue_bytes();
            let engine_bytes_per_qp = before
                .zip(after)
                .map(|(x, y)| (y - x) as f64 / (2 * n) as f64 - queue as f64);
            let of_one = out
                .first()
                .map_or(1.0, |b| rate.msgs_per_s() / b.rate.msgs_per_s().max(1e-9));
            out.push(QpPoint {
                qps: n,
                rate,
                of_one,
                engine_bytes_per_qp,
                queue_bytes_per_qp: queue,
            });
            drop((a, b));
        }
        Ok(out)
    }
}

/// The sweep's QP counts: 1, 100, 1,000, 10,000.
pub const DEFAULT_COUNTS: [usize; 4] = [1, 100, 1_000, 10_000];

#[cfg(test)]
mod tests {
    use super::super::Threads;
    use super::*;
    use crate::backend::clock::WallClock;
    use crate::backend::loopback::{self, LoopbackPort};
    use crate::transport::Mtu;

    /// The sweep runs over the loopback backend: every WRITE completes at
    /// each point, every QP took part, nothing was resent.
    #[test]
    fn the_qp_sweep_completes_every_write_on_every_qp_count() {
        let (mut pa, mut pb): (LoopbackPort, LoopbackPort) = loopback::pair(1024, 4352);
        let clock = WallClock::new();
        let run = Run {
            threads: Threads::One,
            clock: &clock,
            limit: Duration::from_secs(20),
            register: &|| (),
        };
        let p = QpParams {
            sq_depth: 128,
            cq_mod: 1,
            inflight: 128,
            mtu: Mtu::Mtu1024,
        };
        let a = (MacAddr([2, 0, 0, 0, 0, 1]), "198.18.0.1".parse().unwrap());
        let b = (MacAddr([2, 0, 0, 0, 0, 2]), "198.18.0.2".parse().unwrap());
        let pts = run
            .qp_sweep(&mut pa, &mut pb, a, b, &p, 100, 2_000)
            .unwrap();
        assert_eq!(pts.len(), 2);
        for pt in &pts {
            assert!(pt.rate.complete, "{pt:?}");
            assert_eq!(pt.rate.msgs, 2_000, "{pt:?}");
            assert_eq!(pt.rate.retransmitted, 0, "{pt:?}");
            // Each WRITE a frame, and some acknowledgements.
            assert!(pt.rate.frames > 2_000, "{pt:?}");
        }
        assert_eq!(pts[0].of_one, 1.0);
        assert!(pts[1].queue_bytes_per_qp > 0);
    }
}
