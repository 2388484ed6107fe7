//! The data phases of the seven tools (perftest's `run_iter_bw`,
//! `run_iter_bw_server`, `run_iter_lat_write`, `run_iter_lat`,
//! `run_iter_lat_send`).

use super::report::{peak_ns, BwReport, LatReport};
use super::{AtomicKind, Setup, Test, Verb};
use crate::backend::Backend;
use crate::time::{Duration, Instant};
use crate::verbs::{Context, Payload, RecvWr, SendOp, SendWr, Wc, WcStatus};
use anyhow::{bail, Result};

/// Above this many messages perftest measures no peak (it would cost
/// more than the run).
const PEAK_LIMIT: u64 = 20_000;

/// A wait that gives up after `limit` without progress.
struct Watch {
    limit: Duration,
    last: Instant,
}

impl Watch {
    fn new<B: Backend>(ctx: &Context<B>, limit: Duration) -> Watch {
        Watch {
            limit,
            last: ctx.now(),
        }
    }
    fn moved(&mut self, now: Instant) {
        self.last = now;
    }
    fn check(&self, now: Instant, what: &dyn Fn() -> String) -> Result<()> {
        if now > self.last + self.limit {
            bail!("{} (nothing happened for {})", what(), self.limit);
        }
        Ok(())
    }
}

/// Fails on an error completion (perftest: "Completion with error").
fn check(wc: &Wc, errors: &mut u64) -> Result<()> {
    if wc.status != WcStatus::Success {
        *errors += 1;
        bail!(
            "completion with error: {} ({}) for wr_id {:#x} on QP {:#x}",
            wc.status,
            wc.status as u32,
            wc.wr_id,
            wc.qp_num
        );
    }
    Ok(())
}

/// The work request of message `k` of QP `i` in a bandwidth test.
fn bw_wr(s: &Setup, i: usize, k: u64, signaled: bool) -> SendWr {
    let off = match s.p.stride(&s.a) {
        Some((inc, slots)) => (k % slots) * inc,
        None => 0,
    };
    let remote = &s.remote[i];
    let raddr = remote.vaddr + off;
    let op = match s.p.test.verb() {
        Verb::Write => SendOp::Write {
            remote_addr: raddr,
            rkey: remote.rkey,
        },
        Verb::Read => SendOp::Read {
            remote_addr: raddr,
            rkey: remote.rkey,
        },
        Verb::Send => SendOp::Send,
        Verb::Atomic => match s.p.atomic {
            AtomicKind::FetchAndAdd => SendOp::FetchAdd {
                remote_addr: raddr,
                rkey: remote.rkey,
                add: 1,
            },
            AtomicKind::CmpAndSwap => SendOp::CompareSwap {
                remote_addr: raddr,
                rkey: remote.rkey,
                compare: 0,
                swap: 0,
            },
        },
    };
    let sge =
        s.mr.sge((s.local_off(i) + off) as usize, s.p.size as u32)
            .expect("the local slot is inside the region");
    // The wr_id says which QP and how many of its messages are done
    // once it completes.
    let mut wr = SendWr::new((i as u64) << 40 | (k + 1), op, Payload::sge(sge));
    wr.signaled = signaled;
    wr
}

/// The requester of a bandwidth test: `tx_depth` outstanding per QP, one
/// completion per `cq_mod`, until `iters` per QP are done or the duration
/// has passed.
pub fn bw_client<B: Backend>(
    ctx: &mut Context<B>,
    s: &Setup,
    limit: Duration,
    errors: &mut u64,
) -> Result<BwReport> {
    let p = &s.p;
    let n = s.qps.len();
    let total = p.iters * n as u64;
    let measure_peak = p.duration.is_none() && total <= PEAK_LIMIT;
    let mut posted = Vec::with_capacity(if measure_peak { total as usize } else { 0 });
    let mut completed = Vec::with_capacity(posted.capacity());
    let (mut scnt, mut ccnt) = (vec![0u64; n], vec![0u64; n]);
    let start = ctx.now();
    let (end, window) = match p.duration {
        Some(d) => {
            let d = Duration::from_secs(d as u64);
            let margin = Duration::from_nanos(d.as_nanos() / 4);
            (
                Some(start + d),
                Some((
                    start + margin,
                    start + Duration::from_nanos(d.as_nanos() - margin.as_nanos()),
                )),
            )
        }
        None => (None, None),
    };
    let (mut first_post, mut last_done) = (None::<Instant>, start);
    let mut sampled = 0u64;
    let mut watch = Watch::new(ctx, limit);
    let mut wcs: Vec<Wc> = Vec::with_capacity(64);
    loop {
        let now = ctx.now();
        let posting = match end {
            Some(e) => now < e,
            None => true,
        };
        for i in 0..n {
            while posting
                && (p.iters == 0 || scnt[i] < p.iters)
                && scnt[i] - ccnt[i] < p.tx_depth as u64
            {
                let k = scnt[i];
                let last = p.iters > 0 && k + 1 == p.iters;
                let signaled = (k + 1) % p.cq_mod as u64 == 0 || last;
                ctx.post_send(&s.qps[i], bw_wr(s, i, k, signaled))?;
                let t = ctx.now();
                first_post.get_or_insert(t);
                if measure_peak {
                    posted.push(t.as_nanos());
                }
                scnt[i] += 1;
            }
        }
        wcs.clear();
        ctx.poll_cq(&s.scq, 64, &mut wcs)?;
        let now = ctx.now();
        for wc in &wcs {
            check(wc, errors)?;
            let i = (wc.wr_id >> 40) as usize;
            let done = wc.wr_id & ((1 << 40) - 1);
            let newly = done.saturating_sub(ccnt[i]);
            ccnt[i] = ccnt[i].max(done);
            if measure_peak {
                completed.extend(std::iter::repeat(now.as_nanos()).take(newly as usize));
            }
            if let Some((a, b)) = window {
                if now >= a && now < b {
                    sampled += newly;
                }
            }
            last_done = now;
            watch.moved(now);
        }
        let finished = match end {
            // Unsignaled requests complete silently: the send queues say
            // when the last has.
            Some(e) => now >= e && s.qps.iter().all(|q| ctx.send_queue_len(q) == 0),
            None => ccnt.iter().all(|&c| c >= p.iters),
        };
        if finished {
            break;
        }
        watch.check(now, &|| {
            format!(
                "{} of {} messages completed",
                ccnt.iter().sum::<u64>(),
                if total > 0 { total } else { scnt.iter().sum() }
            )
        })?;
    }
    Ok(match window {
        Some((a, b)) => BwReport::new(p.size, sampled, (b - a).as_nanos(), None, p.gbits),
        None => {
            let t0 = first_post.unwrap_or(start);
            let peak = if measure_peak {
                peak_ns(&posted, &completed, p.cq_mod as usize)
            } else {
                None
            };
            BwReport::new(p.size, total, (last_done - t0).as_nanos(), peak, p.gbits)
        }
    })
}

/// The receive of message `k` on QP `i` (into its published slot).
fn recv_wr(s: &Setup, i: usize) -> RecvWr {
    RecvWr {
        wr_id: i as u64,
        sges: smallvec::smallvec![s
            .mr
            .sge(s.published_off(i) as usize, s.p.size as u32)
            .expect("the published slot is inside the region")],
    }
}

/// Receives a SEND test starts with: `rx_depth` per QP (at most the
/// messages to come). The client of send-bw receives nothing.
pub fn post_initial_recvs<B: Backend>(ctx: &mut Context<B>, s: &Setup) -> Result<()> {
    if s.p.test == Test::SendBw && !s.server {
        return Ok(());
    }
    for (i, qp) in s.qps.iter().enumerate() {
        for _ in 0..initial_recvs(s) {
            ctx.post_recv(qp, recv_wr(s, i))?;
        }
    }
    Ok(())
}

fn initial_recvs(s: &Setup) -> u64 {
    let d = s.p.rx_depth as u64;
    if s.p.iters > 0 {
        d.min(s.p.iters)
    } else {
        d
    }
}

/// The receiver of send-bw: counts `iters` receives per QP (re-posting up
/// to that many), timing from the first.
pub fn send_bw_server<B: Backend>(
    ctx: &mut Context<B>,
    s: &Setup,
    limit: Duration,
    errors: &mut u64,
    bad: &mut u64,
) -> Result<BwReport> {
    let p = &s.p;
    let n = s.qps.len();
    let mut rcnt = vec![0u64; n];
    let mut posted = vec![initial_recvs(s); n];
    let (mut first, mut last) = (None::<Instant>, ctx.now());
    let end_of = |f: Instant| p.duration.map(|d| f + Duration::from_secs(d as u64));
    let mut watch = Watch::new(ctx, limit);
    let mut wcs: Vec<Wc> = Vec::with_capacity(64);
    loop {
        wcs.clear();
        ctx.poll_cq(&s.rcq, 64, &mut wcs)?;
        let now = ctx.now();
        for wc in &wcs {
            check(wc, errors)?;
            let i = wc.wr_id as usize;
            first.get_or_insert(now);
            last = now;
            watch.moved(now);
            rcnt[i] += 1;
            if wc.byte_len as u64 != p.size {
                *bad += 1;
            }
            if p.iters == 0 || posted[i] < p.iters {
                ctx.post_recv(&s.qps[i], recv_wr(s, i))?;
                posted[i] += 1;
            }
        }
        let done = match first.and_then(end_of) {
            Some(e) => now >= e,
            None => p.iters > 0 && rcnt.iter().all(|&r| r >= p.iters),
        };
        if done {
            break;
        }
        watch.check(now, &|| {
            format!(
                "{} of {} messages received",
                rcnt.iter().sum::<u64>(),
                p.iters * n as u64
            )
        })?;
    }
    let total: u64 = rcnt.iter().sum();
    let t0 = first.unwrap_or(last);
    Ok(BwReport::new(
        p.size,
        total,
        (last - t0).as_nanos(),
        None,
        p.gbits,
    ))
}

/// What a latency loop keeps: the post times, the watch on progress, a
/// completion buffer, and QP 0's local buffer.
struct Lat {
    posted: Vec<u64>,
    watch: Watch,
    wcs: Vec<Wc>,
    sge: crate::verbs::Sge,
}

impl Lat {
    fn new<B: Backend>(ctx: &Context<B>, s: &Setup, limit: Duration) -> Lat {
        Lat {
            posted: Vec::with_capacity(s.p.iters as usize),
            watch: Watch::new(ctx, limit),
            wcs: Vec::with_capacity(1),
            sge: s
                .mr
                .sge(s.local_off(0) as usize, s.p.size as u32)
                .expect("the local slot is inside the region"),
        }
    }

    /// Posts `op` of the whole message on QP 0, noting when.
    fn post<B: Backend>(
        &mut self,
        ctx: &mut Context<B>,
        s: &Setup,
        id: u64,
        op: SendOp,
    ) -> Result<()> {
        self.posted.push(ctx.now().as_nanos());
        let wr = SendWr::new(id, op, Payload::sge(self.sge));
        Ok(ctx.post_send(&s.qps[0], wr)?)
    }

    /// Drives `ctx` until a completion on `cq` arrives; fails on an error
    /// one or after `limit` without any.
    fn complete<B: Backend>(
        &mut self,
        ctx: &mut Context<B>,
        cq: &crate::verbs::Cq,
        errors: &mut u64,
        what: &dyn Fn() -> String,
    ) -> Result<Wc> {
        loop {
            self.wcs.clear();
            if ctx.poll_cq(cq, 1, &mut self.wcs)? == 1 {
                self.watch.moved(ctx.now());
                let wc = self.wcs[0];
                check(&wc, errors)?;
                return Ok(wc);
            }
            self.watch.check(ctx.now(), what)?;
        }
    }

    /// The statistics, `rtt_factor` messages per gap between posts.
    fn report(&self, s: &Setup, rtt_factor: f64) -> Result<LatReport> {
        LatReport::from_posts(s.p.size, &self.posted, rtt_factor)
            .ok_or_else(|| anyhow::anyhow!("too few iterations"))
    }
}

/// write-lat: WRITEs back and forth, each side watching the last byte of
/// its slot for the peer's sequence number; the listener writes first.
pub fn write_lat<B: Backend>(
    ctx: &mut Context<B>,
    s: &Setup,
    limit: Duration,
    errors: &mut u64,
) -> Result<LatReport> {
    let p = &s.p;
    let size = p.size as usize;
    let post_off = s.local_off(0) as usize + size - 1;
    let poll_off = s.published_off(0) as usize + size - 1;
    let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
    let mut lat = Lat::new(ctx, s, limit);
    let write = SendOp::Write {
        remote_addr: s.remote[0].vaddr,
        rkey: s.remote[0].rkey,
    };
    while scnt < p.iters || rcnt < p.iters || ccnt < p.iters {
        if rcnt < p.iters && !(s.server && scnt == 0) {
            rcnt += 1;
            let want = rcnt as u8;
            loop {
                if ctx.mr(&s.mr)?[poll_off] == want {
                    lat.watch.moved(ctx.now());
                    break;
                }
                ctx.progress();
                lat.watch.check(ctx.now(), &|| {
                    format!("no WRITE {rcnt} of {} from the peer", p.iters)
                })?;
            }
        }
        if scnt < p.iters {
            scnt += 1;
            ctx.mr_mut(&s.mr)?[post_off] = scnt as u8;
            lat.post(ctx, s, scnt, write)?;
        }
        if ccnt < p.iters {
            lat.complete(ctx, &s.scq, errors, &|| "no ACK of our WRITE".into())?;
            ccnt += 1;
        }
    }
    lat.report(s, 2.0)
}

/// read-lat: one READ at a time from the peer's slot.
pub fn read_lat<B: Backend>(
    ctx: &mut Context<B>,
    s: &Setup,
    limit: Duration,
    errors: &mut u64,
) -> Result<LatReport> {
    let mut lat = Lat::new(ctx, s, limit);
    let read = SendOp::Read {
        remote_addr: s.remote[0].vaddr,
        rkey: s.remote[0].rkey,
    };
    for k in 0..s.p.iters {
        lat.post(ctx, s, k, read)?;
        lat.complete(ctx, &s.scq, errors, &|| {
            format!("READ {k} did not complete")
        })?;
    }
    lat.report(s, 1.0)
}

/// send-lat: SENDs back and forth, the client first; each side re-posts
/// its receives up to `iters` in all.
pub fn send_lat<B: Backend>(
    ctx: &mut Context<B>,
    s: &Setup,
    limit: Duration,
    errors: &mut u64,
    bad: &mut u64,
) -> Result<LatReport> {
    let p = &s.p;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let depth = initial_recvs(s);
    let mut lat = Lat::new(ctx, s, limit);
    while scnt < p.iters || rcnt < p.iters {
        if rcnt < p.iters && (s.server || scnt > 0) {
            let wc = lat.complete(ctx, &s.rcq, errors, &|| {
                format!("no SEND {} from the peer", rcnt + 1)
            })?;
            if wc.byte_len as u64 != p.size {
                *bad += 1;
            }
            rcnt += 1;
            if rcnt + depth <= p.iters {
                ctx.post_recv(&s.qps[0], recv_wr(s, 0))?;
            }
        }
        if scnt < p.iters {
            scnt += 1;
            lat.post(ctx, s, scnt, SendOp::Send)?;
            lat.complete(ctx, &s.scq, errors, &|| "no ACK of our SEND".into())?;
        }
    }
    lat.report(s, 2.0)
}
