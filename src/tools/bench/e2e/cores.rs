//! The cores sweep of `ferroce bench e2e`: the 64 B RDMA WRITE rate of
//! one engine split over 1, 2, ... N datapath lcores, each lcore owning
//! one queue pair of the port and the QPs its shard numbers
//! ([`crate::wire::Shard`]), received frames steered to their QP's lcore
//! ([`crate::backend::steer`]).
//!
//! Both engines (writer and answerer) are split the same way over a ring
//! pair of N queue pairs; lcore `i` drives shard `i` of each, so N lcores
//! are N threads. Each shard has one QP and runs as many WRITEs as the
//! 1-lcore point in all, `depth` outstanding and one in `cq_mod`
//! signaled, as run (a).
//! Two pairings:
//!
//! - **aligned**: writer shard `i`'s QP is connected to answerer shard
//!   `i`'s, so its frames arrive on the queue its owner polls (what RSS
//!   or a flow rule does on a NIC at best);
//! - **crossed**: writer shard `i` to answerer shard `i + 1 mod N`, so
//!   every frame arrives on another lcore's queue and crosses a steering
//!   ring (the worst case of software dispatch).
//!
//! Each round runs every point once; a point's ratio is taken against
//! the 1-lcore point of the same round.

use super::{prepare, settle, verify, Engine, Passive, QpParams, Rate, Run, Side, Writer};
use crate::backend::steer::{steer, Steered, RING_DEPTH};
use crate::backend::Backend;
use crate::time::{Clock, Duration};
use crate::transport::connect::{connect_qp, ConnectParams};
use crate::wire::MacAddr;
use core::net::IpAddr;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// One point of the sweep, over the rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CorePoint {
    /// Datapath lcores per engine (threads in all).
    pub lcores: usize,
    /// Whether every frame crossed a steering ring (see the module doc).
    pub crossed: bool,
    /// The median round's run.
    pub rate: Rate,
    /// This point's message rate over the 1-lcore point's of the same
    /// round: median, min, max over rounds.
    pub of_one: [f64; 3],
    /// Frames steered from the queue they arrived on to their QP's lcore,
    /// every round.
    pub handed_on: u64,
}

/// Two engines, each split over the queue pairs of its port.
pub struct Split<B: Backend> {
    a: Vec<Engine<B::Buf>>,
    b: Vec<Engine<B::Buf>>,
    pa: Vec<Steered<B>>,
    pb: Vec<Steered<B>>,
    crossed: bool,
}

impl<B: Backend> Split<B> {
    /// Engines `a` (on queues `qa`) and `b` (on `qb`), one shard per
    /// queue pair and one QP per shard, connected aligned or crossed.
    pub fn new(
        (qa, (mac_a, ip_a)): (Vec<B>, (MacAddr, IpAddr)),
        (qb, (mac_b, ip_b)): (Vec<B>, (MacAddr, IpAddr)),
        p: &QpParams,
        crossed: bool,
    ) -> anyhow::Result<Split<B>> {
        anyhow::ensure!(
            !qa.is_empty() && qa.len() == qb.len(),
            "both engines need the same number of queue pairs"
        );
        let pa = steer(qa, RING_DEPTH).map_err(anyhow::Error::msg)?;
        let pb = steer(qb, RING_DEPTH).map_err(anyhow::Error::msg)?;
        let mut a = Vec::with_capacity(pa.len());
        let mut b = Vec::with_capacity(pb.len());
        for (sa, sb) in pa.iter().zip(&pb) {
            a.push(Engine::sharded(mac_a, ip_a, p, sa.shard())?);
            b.push(Engine::sharded(mac_b, ip_b, p, sb.shard())?);
        }
        let mut s = Split {
            a,
            b,
            pa,
            pb,
            crossed,
        };
        let cp = ConnectParams {
            mtu: p.mtu,
            ..ConnectParams::default()
        };
        for i in 0..s.a.len() {
            let j = s.peer(i);
            let (qpa, qpb) = (s.a[i].qp, s.b[j].qp);
            connect_qp(&mut s.a[i].dev, qpa, qpb, mac_b, ip_b, &cp, 0, 0)?;
            connect_qp(&mut s.b[j].dev, qpb, qpa, mac_a, ip_a, &cp, 0, 0)?;
        }
        Ok(s)
    }

    /// Datapath lcores per engine.
    pub fn lcores(&self) -> usize {
        self.a.len()
    }

    /// The answerer shard writer shard `i` is connected to.
    fn peer(&self, i: usize) -> usize {
        if self.crossed {
            (i + 1) % self.a.len()
        } else {
            i
        }
    }

    fn handed_on(&self) -> u64 {
        self.pa
            .iter()
            .chain(&self.pb)
            .map(|p| p.counters().handed_on)
            .sum()
    }

    /// Drives every shard from this thread until no send work is left
    /// (at most a second).
    fn settle<C: Clock>(&mut self, clock: &C) -> anyhow::Result<()> {
        let writers = self.a.iter_mut().zip(&mut self.pa);
        let mut ends: Vec<_> = writers.chain(self.b.iter_mut().zip(&mut self.pb)).collect();
        settle(clock, &mut ends)
    }

    /// Packets sent by every engine, and request packets the writers sent
    /// again.
    fn sent(&self) -> (u64, u64) {
        let all = self.a.iter().chain(&self.b);
        let sent = all.map(|e| e.counters().sent_pkts).sum();
        let again = self.a.iter().map(|e| e.counters().retransmitted_pkts);
        (sent, again.sum())
    }
}

/// One lcore's share: writer shard `i` and answerer shard `i`, their
/// queue pairs, and when it finished.
struct Lane<'s, B: Backend> {
    w: Writer<'s, B::Buf>,
    s: Passive<'s, B::Buf>,
    pa: &'s mut Steered<B>,
    pb: &'s mut Steered<B>,
}

/// What the lanes share while they run.
struct Race<'c, C> {
    clock: &'c C,
    lanes: usize,
    go: AtomicBool,
    ready: AtomicUsize,
    finished: AtomicUsize,
    last: AtomicU64,
    end: crate::time::Instant,
}

impl<C: Clock + Sync> Race<'_, C> {
    /// Runs `lane` until every lane's writer is done (a lane also serves
    /// the writer of another lane when crossed) or the time is up.
    fn run<B: Backend>(&self, lane: &mut Lane<'_, B>) {
        let mut mine = false;
        while self.finished.load(Ordering::Acquire) < self.lanes && self.clock.now() < self.end {
            lane.w.step(self.clock, lane.pa);
            lane.s.step(self.clock, lane.pb);
            if !mine && Side::<B>::done(&lane.w) {
                mine = true;
                let t = self.clock.now().as_nanos();
                self.last.fetch_max(t, Ordering::AcqRel);
                self.finished.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

impl<C: Clock + Sync, G> Run<'_, C, G> {
    /// `msgs` 64 B WRITEs from each writer shard (so that every point
    /// runs as long as the 1-lcore one would at perfect scaling), each on
    /// its own thread (shard 0 on this one; thread `i` first calls
    /// `pin(i)`, which it keeps while it runs); the bytes checked where
    /// they land. `round` varies the data.
    pub fn split_rate<B, G2>(
        &self,
        sp: &mut Split<B>,
        msgs: u64,
        p: &QpParams,
        round: u64,
        pin: &(dyn Fn(usize) -> G2 + Sync),
    ) -> anyhow::Result<Rate>
    where
        B: Backend + Send,
        B::Buf: Send,
    {
        let n = sp.lcores();
        let per = msgs.max(1);
        let peers: Vec<usize> = (0..n).map(|i| sp.peer(i)).collect();
        for (i, &j) in peers.iter().enumerate() {
            prepare(&mut sp.a[i], &mut sp.b[j], round);
        }
        let before = sp.sent();
        let remotes: Vec<(u64, u32)> = peers
            .iter()
            .map(|&j| (sp.b[j].dst(0), sp.b[j].mr.rkey))
            .collect();
        let mut lanes: Vec<Lane<'_, B>> =
            sp.a.iter_mut()
                .zip(sp.b.iter_mut())
                .zip(sp.pa.iter_mut().zip(sp.pb.iter_mut()))
                .zip(remotes)
                .map(|(((ea, eb), (pa, pb)), remote)| Lane {
                    w: Writer::new(ea, 64, per, p, remote),
                    s: Passive {
                        e: eb,
                        failure: None,
                    },
                    pa,
                    pb,
                })
                .collect();
        let race = Race {
            clock: self.clock,
            lanes: n,
            go: AtomicBool::new(false),
            ready: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            end: self.clock.now() + self.limit + Duration::from_secs(5),
        };
        let t0 = std::thread::scope(|s| {
            let (first, rest) = lanes.split_at_mut(1);
            for (i, lane) in rest.iter_mut().enumerate() {
                let race = &race;
                s.spawn(move || {
                    let _pinned = pin(i + 1);
                    race.ready.fetch_add(1, Ordering::AcqRel);
                    while !race.go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    race.run(lane);
                });
            }
            let wait = self.clock.now() + Duration::from_secs(5);
            while race.ready.load(Ordering::Acquire) < n - 1 && self.clock.now() < wait {
                std::hint::spin_loop();
            }
            let t0 = self.clock.now();
            race.go.store(true, Ordering::Release);
            race.run(&mut first[0]);
            t0
        });
        let mut completed = Vec::with_capacity(n);
        for l in &mut lanes {
            if let Some(f) = l.w.failure.take().or(l.s.failure.take()) {
                anyhow::bail!("{n} lcores, 64 B WRITEs: {f}");
            }
            completed.push(l.w.completed);
        }
        drop(lanes);
        let end = match race.finished.load(Ordering::Acquire) {
            k if k == n => crate::time::Instant::from_nanos(race.last.load(Ordering::Acquire)),
            _ => self.clock.now(),
        };
        let took = end.saturating_since(t0);
        let after = sp.sent();
        sp.settle(self.clock)?;
        for (i, (&j, &done)) in peers.iter().zip(&completed).enumerate() {
            if let Some(f) = verify(&sp.a[i], &sp.b[j], 64, done) {
                anyhow::bail!("{n} lcores, shard {i}: {f}");
            }
        }
        let total: u64 = completed.iter().sum();
        anyhow::ensure!(total > 0, "{n} lcores: no WRITE completed in {took}");
        Ok(Rate {
            msgs: total,
            frames: after.0 - before.0,
            bytes: total * 64,
            secs: took.as_secs_f64(),
            retransmitted: after.1 - before.1,
            lent: 0,
            complete: completed.iter().all(|&c| c >= per),
        })
    }

    /// The sweep: for every round, each split of `splits` in turn; the
    /// first split (1 lcore) is each round's baseline.
    pub fn cores_sweep<B, G2>(
        &self,
        splits: &mut [Split<B>],
        rounds: usize,
        msgs: u64,
        p: &QpParams,
        pin: &(dyn Fn(usize) -> G2 + Sync),
    ) -> anyhow::Result<Vec<CorePoint>>
    where
        B: Backend + Send,
        B::Buf: Send,
    {
        let mut runs: Vec<Vec<Rate>> = vec![Vec::new(); splits.len()];
        let handed: Vec<u64> = splits.iter().map(Split::handed_on).collect();
        // Round 0 warms up and is not recorded.
        for round in 0..=rounds {
            let m = if round == 0 { (msgs / 10).max(1) } else { msgs };
            for (k, sp) in splits.iter_mut().enumerate() {
                let r = self.split_rate(sp, m, p, round as u64, pin)?;
                if round > 0 {
                    runs[k].push(r);
                }
            }
        }
        let base: Vec<f64> = runs
            .first()
            .map_or(Vec::new(), |v| v.iter().map(Rate::msgs_per_s).collect());
        Ok(splits
            .iter()
            .zip(runs)
            .zip(handed)
            .map(|((sp, rs), h0)| {
                let ratios: Vec<f64> = rs
                    .iter()
                    .zip(&base)
                    .map(|(r, b)| r.msgs_per_s() / b.max(1e-9))
                    .collect();
                let mut by_rate = rs.clone();
                by_rate.sort_by(|x, y| x.msgs_per_s().total_cmp(&y.msgs_per_s()));
                CorePoint {
                    lcores: sp.lcores(),
                    crossed: sp.crossed,
                    rate: by_rate.get(by_rate.len() / 2).copied().unwrap_or_default(),
                    of_one: [
                        crate::sim::stats::median(ratios.clone()),
                        ratios.iter().copied().fold(f64::INFINITY, f64::min),
                        ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    ],
                    handed_on: sp.handed_on() - h0,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Threads;
    use super::*;
    use crate::backend::clock::WallClock;
    use crate::backend::loopback::{self, LoopbackPort};
    use crate::transport::Mtu;

    fn queues(n: usize) -> (Vec<LoopbackPort>, Vec<LoopbackPort>) {
        (0..n).map(|_| loopback::pair(1024, 4352)).unzip()
    }

    /// Over loopback queue pairs: every split, aligned and crossed,
    /// completes every WRITE with its bytes in place, and a crossed split
    /// steers every frame (WRITEs one way, ACKs the other).
    #[test]
    fn the_cores_sweep_completes_every_write_aligned_and_crossed() {
        let _spin = crate::tools::spinning_pair();
        let clock = WallClock::new();
        let run = Run {
            threads: Threads::One,
            clock: &clock,
            limit: Duration::from_secs(20),
            register: &|| (),
        };
        let p = QpParams {
            sq_depth: 64,
            cq_mod: 16,
            inflight: 128,
            mtu: Mtu::Mtu4096,
        };
        let a = (MacAddr([2, 0, 0, 0, 0, 1]), "198.18.0.1".parse().unwrap());
        let b = (MacAddr([2, 0, 0, 0, 0, 2]), "198.18.0.2".parse().unwrap());
        let mut splits = Vec::new();
        for (n, crossed) in [(1, false), (2, false), (2, true), (3, true)] {
            let (qa, qb) = queues(n);
            splits.push(Split::new((qa, a), (qb, b), &p, crossed).unwrap());
        }
        let pts = run.cores_sweep(&mut splits, 2, 3_000, &p, &|_| ()).unwrap();
        assert_eq!(pts.len(), 4);
        for pt in &pts {
            assert!(pt.rate.complete, "{pt:?}");
            assert_eq!(pt.rate.msgs, 3_000 * pt.lcores as u64, "{pt:?}");
            assert!(pt.rate.frames > pt.rate.msgs, "{pt:?}");
        }
        assert_eq!(pts[0].of_one[0], 1.0);
        assert_eq!((pts[0].handed_on, pts[1].handed_on), (0, 0));
        // Crossed: every frame of the timed rounds and the warm-up.
        for pt in &pts[2..] {
            assert!(pt.handed_on >= 2 * pt.rate.msgs, "{pt:?}");
        }
    }
}
