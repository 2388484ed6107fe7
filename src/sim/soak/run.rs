//! One seed of `ferroce sim`: the two hosts and their QP pairs set up,
//! driven until done or stuck, every completion and every byte checked.

use super::report::Report;
use super::{needed_timeout, Op, SimRun, A, B, NAMES};
use crate::backend::fabric::Rng;
use crate::sim::net::SimNet;
use crate::time::{Duration, Instant};
use crate::transport::connect::ConnectParams;
use crate::transport::{
    ack_timeout, Access, CqId, DeviceConfig, Event, MrKeys, MrSpec, Payload, QpCaps, QpCounters,
    RecvWr, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use crate::wire::MacAddr;
use std::collections::VecDeque;

/// Atomic target words per QP pair.
const WORDS: usize = 4;
/// Bytes past each message that must stay untouched.
const GUARD: usize = 8;
/// What unwritten destination bytes hold.
const POISON: u8 = 0xA5;

/// A work request posted on A and not yet completed.
#[derive(Debug)]
struct Pending {
    wr_id: u64,
    slot: usize,
    len: u32,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send,
    /// The data's seed (also for a SEND's check at B).
    Write {
        data: u64,
    },
    Read {
        /// Offset in B's read region.
        from: usize,
    },
    CmpSwap {
        word: usize,
        orig: u64,
    },
    FetchAdd {
        word: usize,
        orig: u64,
    },
}

impl Kind {
    fn opcode(self) -> WcOpcode {
        match self {
            Kind::Send => WcOpcode::Send,
            Kind::Write { .. } => WcOpcode::RdmaWrite,
            Kind::Read { .. } => WcOpcode::RdmaRead,
            Kind::CmpSwap { .. } => WcOpcode::CompSwap,
            Kind::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A SEND B must receive, in order.
#[derive(Debug)]
struct Expected {
    wr_id: u64,
    data: u64,
    len: u32,
}

/// Where things are in a pair's memory regions (offsets).
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Bytes per slot (the largest message and its guard, rounded up).
    slot: usize,
    window: usize,
    recvs: usize,
    // A's region.
    a_src: usize,
    a_dst: usize,
    a_len: usize,
    // B's region.
    b_recv: usize,
    b_write: usize,
    b_read: usize,
    b_read_len: usize,
    pub(super) b_words: usize,
    b_len: usize,
}

impl Layout {
    fn new(size_max: u32, window: u32, recvs: Option<u32>) -> Layout {
        let slot = (size_max as usize + GUARD).div_ceil(64) * 64;
        let window = window as usize;
        let recvs = recvs.map_or(window + 8, |n| n as usize);
        let a_src = 0;
        let a_dst = a_src + window * slot;
        let a_len = a_dst + window * slot;
        let b_recv = 0;
        let b_write = b_recv + recvs * slot;
        let b_read = b_write + window * slot;
        let b_read_len = size_max as usize + 4096;
        let b_words = (b_read + b_read_len).div_ceil(64) * 64;
        let b_len = b_words + WORDS * 8 + 64;
        Layout {
            slot,
            window,
            recvs,
            a_src,
            a_dst,
            a_len,
            b_recv,
            b_write,
            b_read,
            b_read_len,
            b_words,
            b_len,
        }
    }
}

/// One direction of a QP pair: the requester's QP (on host `req`) posts,
/// the responder's (on host `resp`) answers. The `a` fields are the
/// requester's, the `b` fields the responder's.
pub(super) struct Pair {
    req: usize,
    resp: usize,
    qa: u32,
    qb: u32,
    /// The requester's send CQ and the responder's receive CQ.
    cqa: CqId,
    cqb: CqId,
    mra: MrKeys,
    pub(super) mrb: MrKeys,
    /// Messages this flow runs, and how many are posted.
    quota: u64,
    posted: u64,
    done: u64,
    pending: VecDeque<Pending>,
    free: Vec<usize>,
    expected: VecDeque<Expected>,
    /// The receive slot whose completion comes next.
    next_recv: usize,
    /// The atomic words as the model has them.
    words: [u64; WORDS],
    /// B's read region as filled.
    read_src: Vec<u8>,
    /// Receive slots to post again, and when.
    reposts: VecDeque<(Instant, usize)>,
}

impl Pair {
    /// The requester's QP, named for messages.
    fn a(&self) -> String {
        format!("{} qp {:#x}", NAMES[self.req], self.qa)
    }
    /// The responder's QP.
    fn b(&self) -> String {
        format!("{} qp {:#x}", NAMES[self.resp], self.qb)
    }
}

pub(super) struct Run<'a> {
    sim: &'a SimRun,
    pub(super) net: SimNet,
    pub(super) pairs: Vec<Pair>,
    pub(super) lay: Layout,
    rng: Rng,
    seed: u64,
    scratch: Vec<u8>,
    wcs: Vec<Wc>,
    /// The last instant a completion arrived.
    last_progress: Instant,
}

/// Fills `buf` with the pattern of `seed` (splitmix64 words).
fn fill(seed: u64, buf: &mut [u8]) {
    let mut s = seed;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&splitmix(&mut s).to_le_bytes());
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let w = splitmix(&mut s).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&w[..n]);
    }
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where two byte strings first differ.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    a.iter().zip(b).position(|(x, y)| x != y).or_else(|| {
        if a.len() == b.len() {
            None
        } else {
            Some(a.len().min(b.len()))
        }
    })
}

impl<'a> Run<'a> {
    pub(super) fn setup(sim: &'a SimRun, seed: u64, r: &mut Report) -> Result<Run<'a>, String> {
        let cfg = &sim.cfg;
        let mut net = SimNet::new(seed);
        let err = |e: crate::transport::Error| e.to_string();
        let a = net
            .add_host(DeviceConfig::new(
                MacAddr([2, 0, 0, 0, 0, 1]),
                "198.18.0.1".parse().expect("an IPv4 address"),
            ))
            .map_err(err)?;
        let b = net
            .add_host(DeviceConfig::new(
                MacAddr([2, 0, 0, 0, 0, 2]),
                "198.18.0.2".parse().expect("an IPv4 address"),
            ))
            .map_err(err)?;
        debug_assert_eq!((a, b), (A, B));
        net.connect(a, b, cfg.link).map_err(|e| e.to_string())?;
        let lay = Layout::new(cfg.size_max, cfg.window, cfg.recvs);
        // The workload's own generator, apart from the fabric's.
        let mut rng = Rng::new(seed ^ 0x5eed_f00d_cafe_0001);
        let mut pairs = Vec::new();
        let dirs: &[(usize, usize)] = if cfg.bidir {
            &[(A, B), (B, A)]
        } else {
            &[(A, B)]
        };
        let flows = cfg.qps as u64 * dirs.len() as u64;
        for k in 0..cfg.qps {
            // One QP on each host, with its own send and receive CQs.
            let mut ends = Vec::new();
            for h in [A, B] {
                let d = &mut net.hosts[h].dev;
                let pd = d.alloc_pd();
                let scq = d.create_cq(lay.window + 16).map_err(err)?;
                let rcq = d.create_cq(lay.recvs + 16).map_err(err)?;
                let caps = QpCaps {
                    max_send_wr: cfg.window.max(16),
                    max_recv_wr: lay.recvs as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                    ..QpCaps::default()
                };
                let qp = d.create_qp(pd, scq, rcq, caps).map_err(err)?;
                ends.push((pd, scq, rcq, qp));
            }
            // Start A's PSNs just before the 24-bit wrap on even seeds.
            let psn_a = if (seed + k as u64) % 2 == 0 {
                0xFF_FFFF - rng.below(4096) as u32
            } else {
                rng.below(1 << 24) as u32
            };
            let p = ConnectParams {
                mtu: sim.mtu,
                timeout: sim.timeout,
                retry_cnt: cfg.retry_cnt,
                recovery: cfg.recovery,
                ..ConnectParams::default()
            };
            let psn_b = rng.below(1 << 24) as u32;
            net.connect_qps(A, ends[A].3, B, ends[B].3, &p, (psn_a, psn_b))
                .map_err(err)?;
            for &(req, resp) in dirs {
                let f = pairs.len() as u64;
                let quota = cfg.msgs / flows + u64::from(f < cfg.msgs % flows);
                let reg = |net: &mut SimNet, h: usize, len: usize| {
                    net.hosts[h]
                        .dev
                        .reg_mr(MrSpec {
                            pd: ends[h].0,
                            len,
                            access: Access::ALL,
                            addr: None,
                            key: None,
                        })
                        .map_err(err)
                };
                let mra = reg(&mut net, req, lay.a_len)?;
                let mrb = reg(&mut net, resp, lay.b_len)?;
                // Poison every destination; fill the read region and words.
                net.hosts[req]
                    .dev
                    .mr_mut(mra.lkey)
                    .ok_or("the requester's region")?
                    .fill(POISON);
                let mut read_src = vec![0u8; lay.b_read_len];
                fill(rng.next_u64(), &mut read_src);
                let mut words = [0u64; WORDS];
                for w in &mut words {
                    // Near the top now and then, so that fetch-and-add
                    // wraps.
                    *w = if rng.below(4) == 0 {
                        u64::MAX - rng.below(16)
                    } else {
                        rng.next_u64()
                    };
                }
                let mb = net.hosts[resp]
                    .dev
                    .mr_mut(mrb.lkey)
                    .ok_or("the responder's region")?;
                mb.fill(POISON);
                mb[lay.b_read..lay.b_read + lay.b_read_len].copy_from_slice(&read_src);
                for (i, w) in words.iter().enumerate() {
                    let at = lay.b_words + 8 * i;
                    mb[at..at + 8].copy_from_slice(&w.to_le_bytes());
                }
                let mut pair = Pair {
                    req,
                    resp,
                    qa: ends[req].3,
                    qb: ends[resp].3,
                    cqa: ends[req].1,
                    cqb: ends[resp].2,
                    mra,
                    mrb,
                    quota,
                    posted: 0,
                    done: 0,
                    pending: VecDeque::new(),
                    free: (0..lay.window).rev().collect(),
                    expected: VecDeque::new(),
                    next_recv: 0,
                    words,
                    read_src,
                    reposts: VecDeque::new(),
                };
                for slot in 0..lay.recvs {
                    post_recv(&mut net, &mut pair, &lay, slot).map_err(err)?;
                }
                pairs.push(pair);
            }
        }
        let _ = r;
        Ok(Run {
            sim,
            net,
            pairs,
            lay,
            rng,
            seed,
            scratch: Vec::with_capacity(lay.slot),
            wcs: Vec::with_capacity(256),
            last_progress: Instant::ZERO,
        })
    }

    fn all_done(&self) -> bool {
        self.pairs
            .iter()
            .all(|p| p.done == p.quota && p.expected.is_empty())
    }

    /// Runs until done, the first error, or a limit.
    pub(super) fn drive(&mut self, r: &mut Report) {
        let cfg = &self.sim.cfg;
        let timeout = ack_timeout(self.sim.timeout).unwrap_or(Duration::from_millis(100));
        // No completion for this long is a stall: the transport would have
        // given up (retry_cnt + 1 timeouts) several times over, a receive
        // buffer come back, the link drained its queues.
        let stall = Duration::from_millis(100)
            .max(timeout.saturating_mul(4 * (cfg.retry_cnt as u64 + 1)))
            .max(cfg.recv_delay.saturating_mul(4))
            .max(Duration::from_nanos(
                8 * (cfg.link.delay.as_nanos() + cfg.link.reorder_delay.as_nanos()),
            ))
            .max(needed_timeout(cfg).saturating_mul(4));
        let end = self.net.now() + cfg.time_limit;
        // Steps: generous for the packets the run needs, but finite. A
        // receive buffer that comes back late makes the sender retry every
        // RNR timer (10 us here) with its whole window meanwhile.
        let per_msg = cfg.size_max as u64 / self.sim.mtu.bytes() as u64 + 2;
        let mut max_steps = 200 * per_msg * cfg.msgs + 1_000_000;
        if cfg.recv_delay > Duration::ZERO {
            let rounds = cfg.recv_delay.as_nanos() / 10_000 + 1;
            max_steps = max_steps.saturating_add(
                (4 * rounds * cfg.window as u64 * per_msg).saturating_mul(cfg.msgs),
            );
        }
        let mut steps = 0u64;
        let mut same_instant = 0u64;
        loop {
            steps += 1;
            if steps > max_steps {
                r.hang = Some(format!(
                    "no end after {max_steps} steps at {}",
                    self.vtime()
                ));
                return;
            }
            if !self.net.pump_until_quiet(1_000_000) {
                r.hang = Some(format!("frames never stop at {}", self.vtime()));
                return;
            }
            let moved = self.step(r);
            if self.failed(r) {
                return;
            }
            if self.all_done() {
                return;
            }
            if moved {
                continue;
            }
            let now = self.net.now();
            if now.saturating_since(self.last_progress) > stall {
                r.hang = Some(format!(
                    "stalled: no completion from {} to {} ({})",
                    Duration::from_nanos(self.last_progress.as_nanos()),
                    self.vtime(),
                    self.outstanding()
                ));
                return;
            }
            let next = match (self.net.next_time(), self.next_repost()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let Some(t) = next else {
                r.hang = Some(format!(
                    "nothing left to happen at {} ({})",
                    self.vtime(),
                    self.outstanding()
                ));
                return;
            };
            if t > end {
                r.hang = Some(format!(
                    "time limit: {} of virtual time ({})",
                    cfg.time_limit,
                    self.outstanding()
                ));
                return;
            }
            if !self.net.advance_towards(t, &mut same_instant, 100_000) {
                r.hang = Some(format!("time does not advance at {}", self.vtime()));
                return;
            }
        }
    }

    fn vtime(&self) -> Duration {
        Duration::from_nanos(self.net.now().as_nanos())
    }

    fn outstanding(&self) -> String {
        let p: Vec<String> = self
            .pairs
            .iter()
            .map(|p| {
                format!(
                    "qp {:#x}: {}/{} done, {} outstanding, {} sends unreceived",
                    p.qa,
                    p.done,
                    p.quota,
                    p.pending.len(),
                    p.expected.len()
                )
            })
            .collect();
        p.join("; ")
    }

    fn failed(&self, r: &Report) -> bool {
        r.error_completions > 0 || r.mismatches > 0 || !r.problems.is_empty()
    }

    /// Completions and events in, new work out; whether anything moved.
    fn step(&mut self, r: &mut Report) -> bool {
        let mut moved = false;
        for h in [A, B] {
            while let Some(ev) = self.net.hosts[h].dev.poll_event() {
                match ev {
                    Event::QpError { qpn, status } => r.problem(format!(
                        "host {} QP {qpn:#x} went to ERR: {status}",
                        NAMES[h]
                    )),
                    Event::SqDrained { .. } | Event::CqOverrun { .. } => {}
                }
            }
        }
        for i in 0..self.pairs.len() {
            moved |= self.poll_b(i, r);
            moved |= self.repost(i, r);
            moved |= self.poll_a(i, r);
            moved |= self.post(i, r);
        }
        moved
    }

    /// Every completion waiting on `cq` of host `host` (in the reused
    /// buffer: hand it back to `self.wcs`), noting progress if any.
    fn completions(&mut self, host: usize, cq: CqId) -> Vec<Wc> {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        self.net.hosts[host].dev.poll_cq(cq, usize::MAX, &mut wcs);
        if !wcs.is_empty() {
            self.last_progress = self.net.now();
        }
        wcs
    }

    /// B's receive completions: the next expected SEND, byte for byte.
    fn poll_b(&mut self, i: usize, r: &mut Report) -> bool {
        let (host, cq) = (self.pairs[i].resp, self.pairs[i].cqb);
        let wcs = self.completions(host, cq);
        let moved = !wcs.is_empty();
        for wc in &wcs {
            let p = &mut self.pairs[i];
            if wc.status != WcStatus::Success {
                r.error_completions += 1;
                r.problem(format!(
                    "{}: receive {} completed with {} ({:?})",
                    p.b(),
                    wc.wr_id,
                    wc.status,
                    wc.opcode
                ));
                continue;
            }
            let slot = wc.wr_id as usize;
            if slot != p.next_recv || wc.opcode != WcOpcode::Recv || wc.qp_num != p.qb {
                r.mismatch(format!(
                    "{}: receive completion {:?} {} on qp {:#x}, expected Recv {} on {:#x}",
                    p.b(),
                    wc.opcode,
                    wc.wr_id,
                    wc.qp_num,
                    p.next_recv,
                    p.qb
                ));
                continue;
            }
            p.next_recv = (p.next_recv + 1) % self.lay.recvs;
            let Some(e) = p.expected.pop_front() else {
                r.mismatch(format!(
                    "{}: receive {} completed with no SEND outstanding",
                    p.b(),
                    wc.wr_id
                ));
                continue;
            };
            let at = self.lay.b_recv + slot * self.lay.slot;
            let len = e.len as usize;
            let ok_len = wc.byte_len == e.len;
            self.scratch.clear();
            self.scratch.resize(len, 0);
            fill(e.data, &mut self.scratch);
            let mb = self.net.hosts[p.resp].dev.mr(p.mrb.lkey).unwrap_or(&[]);
            let got = &mb[at..at + len];
            let guard = &mb[at + len..at + len + GUARD];
            if !ok_len {
                r.mismatch(format!(
                    "{}: SEND {} received with byte_len {}, sent {}",
                    p.b(),
                    e.wr_id,
                    wc.byte_len,
                    e.len
                ));
            } else if let Some(d) = first_diff(got, &self.scratch) {
                r.mismatch(format!(
                    "{}: SEND {} ({} B) differs at byte {d}",
                    p.b(),
                    e.wr_id,
                    e.len
                ));
            } else if guard.iter().any(|&x| x != POISON) {
                r.mismatch(format!(
                    "{}: SEND {} ({} B) wrote past its end",
                    p.b(),
                    e.wr_id,
                    e.len
                ));
            } else {
                r.bytes_verified += e.len as u64;
            }
            // Poison what it wrote, and give the buffer back.
            if let Some(mb) = self.net.hosts[p.resp].dev.mr_mut(p.mrb.lkey) {
                mb[at..at + len].fill(POISON);
            }
            let due = self.net.now() + self.sim.cfg.recv_delay;
            p.reposts.push_back((due, slot));
        }
        self.wcs = wcs;
        moved
    }

    /// Posts B's receive buffers again once their delay is over.
    fn repost(&mut self, i: usize, r: &mut Report) -> bool {
        let now = self.net.now();
        let p = &mut self.pairs[i];
        let mut moved = false;
        while let Some(&(due, slot)) = p.reposts.front() {
            if due > now {
                break;
            }
            p.reposts.pop_front();
            if let Err(e) = post_recv(&mut self.net, p, &self.lay, slot) {
                r.problem(format!("{}: post_recv: {e}", p.b()));
            }
            moved = true;
        }
        moved
    }

    /// The next instant the harness itself has something to do.
    fn next_repost(&self) -> Option<Instant> {
        self.pairs
            .iter()
            .filter_map(|p| p.reposts.front().map(|&(t, _)| t))
            .min()
    }

    /// A's send completions: in posting order, each checked at its
    /// destination.
    fn poll_a(&mut self, i: usize, r: &mut Report) -> bool {
        let (host, cq) = (self.pairs[i].req, self.pairs[i].cqa);
        let wcs = self.completions(host, cq);
        let moved = !wcs.is_empty();
        for wc in &wcs {
            let p = &mut self.pairs[i];
            if wc.status != WcStatus::Success {
                r.error_completions += 1;
                r.problem(format!(
                    "{}: work request {} ({:?}) completed with {}",
                    p.a(),
                    wc.wr_id,
                    wc.opcode,
                    wc.status
                ));
                continue;
            }
            let Some(w) = p.pending.pop_front() else {
                r.mismatch(format!(
                    "{}: completion {} with nothing outstanding",
                    p.a(),
                    wc.wr_id
                ));
                continue;
            };
            if wc.wr_id != w.wr_id || wc.opcode != w.kind.opcode() || wc.qp_num != p.qa {
                r.mismatch(format!(
                    "{}: completion {} {:?} out of order: expected {} {:?}",
                    p.a(),
                    wc.wr_id,
                    wc.opcode,
                    w.wr_id,
                    w.kind.opcode()
                ));
                continue;
            }
            let (ma, mb) = {
                let hs = &self.net.hosts;
                (
                    hs[p.req].dev.mr(p.mra.lkey).unwrap_or(&[]),
                    hs[p.resp].dev.mr(p.mrb.lkey).unwrap_or(&[]),
                )
            };
            let len = w.len as usize;
            let dst = self.lay.a_dst + w.slot * self.lay.slot;
            let what = |k: &str| format!("{}: {k} {} ({} B)", p.a(), w.wr_id, w.len);
            let bad: Option<String> = match w.kind {
                Kind::Send => None, // checked at B
                Kind::Write { data } => {
                    let at = self.lay.b_write + w.slot * self.lay.slot;
                    self.scratch.clear();
                    self.scratch.resize(len, 0);
                    fill(data, &mut self.scratch);
                    if let Some(d) = first_diff(&mb[at..at + len], &self.scratch) {
                        Some(format!("{}: B's memory differs at byte {d}", what("WRITE")))
                    } else if mb[at + len..at + len + GUARD].iter().any(|&x| x != POISON) {
                        Some(format!("{}: wrote past its end", what("WRITE")))
                    } else {
                        None
                    }
                }
                Kind::Read { from } => {
                    if let Some(d) = first_diff(&ma[dst..dst + len], &p.read_src[from..from + len])
                    {
                        Some(format!(
                            "{} from offset {from}: differs at byte {d}",
                            what("READ")
                        ))
                    } else if ma[dst + len..dst + len + GUARD]
                        .iter()
                        .any(|&x| x != POISON)
                    {
                        Some(format!("{}: wrote past its end", what("READ")))
                    } else {
                        None
                    }
                }
                Kind::CmpSwap { orig, word } | Kind::FetchAdd { orig, word } => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&ma[dst..dst + 8]);
                    let got = u64::from_le_bytes(b);
                    if got != orig {
                        Some(format!(
                            "{} on word {word}: returned {got:#x}, the model says {orig:#x}",
                            what(if matches!(w.kind, Kind::CmpSwap { .. }) {
                                "CMP_SWAP"
                            } else {
                                "FETCH_ADD"
                            })
                        ))
                    } else if ma[dst + 8..dst + 8 + GUARD].iter().any(|&x| x != POISON) {
                        Some(format!("{}: wrote past its 8 bytes", what("atomic")))
                    } else {
                        None
                    }
                }
            };
            // Poison what the destination may hold before the slot is reused.
            if let (Some(ma), true) = (
                self.net.hosts[p.req].dev.mr_mut(p.mra.lkey),
                matches!(
                    w.kind,
                    Kind::Read { .. } | Kind::CmpSwap { .. } | Kind::FetchAdd { .. }
                ),
            ) {
                ma[dst..dst + len.max(8)].fill(POISON);
            }
            if let Kind::Write { .. } = w.kind {
                let at = self.lay.b_write + w.slot * self.lay.slot;
                if let Some(mb) = self.net.hosts[p.resp].dev.mr_mut(p.mrb.lkey) {
                    mb[at..at + len].fill(POISON);
                }
            }
            match bad {
                Some(s) => r.mismatch(s),
                None => {
                    p.done += 1;
                    r.completed += 1;
                    match w.kind {
                        Kind::Send => r.ops.send += 1,
                        Kind::Write { .. } => {
                            r.ops.write += 1;
                            r.bytes_verified += len as u64;
                        }
                        Kind::Read { .. } => {
                            r.ops.read += 1;
                            r.bytes_verified += len as u64;
                        }
                        Kind::CmpSwap { .. } => {
                            r.ops.cmp_swap += 1;
                            r.bytes_verified += 8;
                        }
                        Kind::FetchAdd { .. } => {
                            r.ops.fetch_add += 1;
                            r.bytes_verified += 8;
                        }
                    }
                }
            }
            p.free.push(w.slot);
        }
        self.wcs = wcs;
        moved
    }

    /// Posts new work requests on pair `i` while its window has room.
    fn post(&mut self, i: usize, r: &mut Report) -> bool {
        let cfg = &self.sim.cfg;
        let lay = self.lay;
        let mut moved = false;
        loop {
            let p = &mut self.pairs[i];
            if p.posted == p.quota {
                break;
            }
            let Some(&slot) = p.free.last() else { break };
            let op = cfg.ops[self.rng.below(cfg.ops.len() as u64) as usize];
            let span = (cfg.size_max - cfg.size_min) as u64 + 1;
            let len = cfg.size_min + self.rng.below(span) as u32;
            let wr_id = (i as u64) << 40 | p.posted;
            let data = self.rng.next_u64() ^ self.seed.rotate_left(17);
            let src = lay.a_src + slot * lay.slot;
            let dst = lay.a_dst + slot * lay.slot;
            let mra = p.mra;
            let sge = |at: usize, len: u32| -> Payload {
                if len == 0 {
                    Payload::Sges(crate::transport::SgeList::new())
                } else {
                    Payload::sge(Sge {
                        addr: mra.addr + at as u64,
                        length: len,
                        lkey: mra.lkey,
                    })
                }
            };
            let (kind, op, payload, len) = match op {
                Op::Send => (Kind::Send, SendOp::Send, sge(src, len), len),
                Op::Write => (
                    Kind::Write { data },
                    SendOp::Write {
                        remote_addr: p.mrb.addr + (lay.b_write + slot * lay.slot) as u64,
                        rkey: p.mrb.rkey,
                    },
                    sge(src, len),
                    len,
                ),
                Op::Read => {
                    let from = self.rng.below((lay.b_read_len - len as usize) as u64 + 1) as usize;
                    (
                        Kind::Read { from },
                        SendOp::Read {
                            remote_addr: p.mrb.addr + (lay.b_read + from) as u64,
                            rkey: p.mrb.rkey,
                        },
                        sge(dst, len),
                        len,
                    )
                }
                Op::Atomic => {
                    let word = self.rng.below(WORDS as u64) as usize;
                    let remote_addr = p.mrb.addr + (lay.b_words + 8 * word) as u64;
                    let orig = p.words[word];
                    if self.rng.below(2) == 0 {
                        // Half the time the compare matches.
                        let compare = if self.rng.below(2) == 0 {
                            orig
                        } else {
                            self.rng.next_u64()
                        };
                        let swap = self.rng.next_u64();
                        if orig == compare {
                            p.words[word] = swap;
                        }
                        (
                            Kind::CmpSwap { word, orig },
                            SendOp::CompareSwap {
                                remote_addr,
                                rkey: p.mrb.rkey,
                                compare,
                                swap,
                            },
                            sge(dst, 8),
                            8,
                        )
                    } else {
                        let add = if self.rng.below(2) == 0 {
                            self.rng.below(1 << 16)
                        } else {
                            self.rng.next_u64()
                        };
                        p.words[word] = orig.wrapping_add(add);
                        (
                            Kind::FetchAdd { word, orig },
                            SendOp::FetchAdd {
                                remote_addr,
                                rkey: p.mrb.rkey,
                                add,
                            },
                            sge(dst, 8),
                            8,
                        )
                    }
                }
            };
            // Source data; the SEND's expected copy is the same pattern.
            if matches!(kind, Kind::Send | Kind::Write { .. }) {
                if let Some(ma) = self.net.hosts[p.req].dev.mr_mut(p.mra.lkey) {
                    fill(data, &mut ma[src..src + len as usize]);
                }
            }
            if let Kind::Send = kind {
                p.expected.push_back(Expected { wr_id, data, len });
            }
            match self.net.hosts[p.req]
                .dev
                .post_send(p.qa, SendWr::new(wr_id, op, payload))
            {
                Ok(()) => {}
                Err(e) => {
                    r.problem(format!("{}: post_send {wr_id}: {e}", p.a()));
                    return moved;
                }
            }
            p.free.pop();
            p.posted += 1;
            p.pending.push_back(Pending {
                wr_id,
                slot,
                len,
                kind,
            });
            moved = true;
        }
        moved
    }

    /// The final checks (atomic words) and the counters.
    pub(super) fn finish(&mut self, r: &mut Report) {
        if self.all_done() && r.ok() {
            for p in &self.pairs {
                let mb = self.net.hosts[p.resp].dev.mr(p.mrb.lkey).unwrap_or(&[]);
                for (k, &want) in p.words.iter().enumerate() {
                    let at = self.lay.b_words + 8 * k;
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&mb[at..at + 8]);
                    let got = u64::from_le_bytes(b);
                    if got != want {
                        r.mismatch(format!(
                            "{}: atomic word {k} ends as {got:#x}, the model says {want:#x}",
                            p.b()
                        ));
                    }
                }
                // The read region is only ever read.
                if mb[self.lay.b_read..self.lay.b_read + self.lay.b_read_len] != p.read_src[..] {
                    r.mismatch(format!("{}: the READ source region changed", p.b()));
                }
            }
        } else if !self.all_done() && r.hang.is_none() && r.problems.is_empty() {
            r.hang = Some(format!("stopped early ({})", self.outstanding()));
        }
        let mut c = QpCounters::default();
        for h in &self.net.hosts {
            c.add(&h.dev.counters());
            r.icrc_drops += h.dev.rx_counters().icrc_errors;
            r.malformed += h.dev.rx_counters().malformed;
        }
        r.retransmitted = c.retransmitted_pkts;
        r.seq_naks = c.packet_seq_err;
        r.rnr_naks = c.rnr_nak_retry_err;
        r.naks = c.packet_seq_err + c.rnr_nak_retry_err;
        r.implied_naks = c.implied_nak_seq_err;
        r.timeouts = c.local_ack_timeout_err;
        for h in [A, B] {
            if let Some(ch) = self.net.fabric.host_link(self.net.hosts[h].host) {
                r.faults.add_link(self.net.fabric.link_counters(ch));
            }
        }
        r.virtual_ns = self.net.now().as_nanos();
        r.verify = r.ok();
    }
}

fn post_recv(
    net: &mut SimNet,
    p: &mut Pair,
    lay: &Layout,
    slot: usize,
) -> Result<(), crate::transport::Error> {
    let at = lay.b_recv + slot * lay.slot;
    net.hosts[p.resp].dev.post_recv(
        p.qb,
        RecvWr {
            wr_id: slot as u64,
            sges: smallvec::smallvec![Sge {
                addr: p.mrb.addr + at as u64,
                length: (lay.slot - GUARD) as u32,
                lkey: p.mrb.lkey,
            }],
        },
    )
}
