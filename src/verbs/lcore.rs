//! Datapath threads ("lcores") that own verbs contexts, and the handles
//! application threads reach them by, through lock-free rings.
//!
//! A [`Context`] runs to completion in its caller's thread: the
//! application's own `poll_cq` drives the port. This module is the other
//! mode. [`Datapath::spawn`] moves one or more contexts (each one port,
//! with its PDs, regions, CQs and QPs) onto a thread of their own, pinned
//! to a core and registered with DPDK when asked (by an injected
//! [`LcoreConfig::setup`]; `crate::dpdk::lcore::thread_setup` makes one), and
//! from then on that thread alone touches them: **every QP belongs to the
//! datapath thread that owns its context.** Application threads hold
//! [`AppContext`]s, one per context (`Clone + Send + Sync`; clone one per
//! thread or share it), and speak the verbs through them with the same
//! handles ([`Pd`], [`Mr`], [`Cq`], [`Qp`]) and the same refusals. An
//! application may hold handles of several datapaths (one per port, say);
//! a datapath may own several contexts (they then share its core).
//!
//! One port may also run on several datapaths, each with one of its
//! queue pairs and a share of its QP numbers ([`spawn_port`]): frames
//! that arrive on another datapath's queue are handed over through a
//! lock-free ring, never a lock (`crate::backend::steer`).
//!
//! # Call flow
//!
//! ```text
//!  app threads                       datapath thread (one loop, per round)
//!  post_send / post_recv ──┐
//!  control verbs (boxed    ├─ command ring ──> 1. run up to `burst` commands,
//!  closure + reply) ───────┘  (ArrayQueue,       in ring order
//!                              lock-free)     2. progress each context: frames
//!                                                in, due timers, frames out
//!  poll_cq <── completion ring per CQ <────── 3. move each CQ's completions
//!  wait_cq <── Condvar (only when armed)         into its ring; wake waiters
//!                                             4. idle? spin, yield or park
//! ```
//!
//! - [`AppContext::post_send`] / [`AppContext::post_recv`] push the work
//!   request and a copy of the QP's handle on the datapath's command ring;
//!   nothing is allocated per post beyond the work request itself. One
//!   ring serves every application thread of a datapath, first in first
//!   out, so a thread's posts and control calls run in the order it made
//!   them.
//! - Control verbs ([`AppContext::alloc_pd`], [`AppContext::reg_mr`],
//!   [`AppContext::create_qp`], [`AppContext::modify_qp`], ...; any closure
//!   with [`AppContext::run`]) travel on the same ring as a boxed closure
//!   and block on a reply channel until the datapath ran it. A closure
//!   that panics panics the caller (the datapath goes on). Calling a
//!   control verb from the datapath thread itself (inside `run`) panics:
//!   it would wait for itself.
//! - Each CQ made by [`AppContext::create_cq`] gets a completion ring
//!   (`ArrayQueue<Wc>`); [`AppContext::poll_cq`] pops from it and
//!   [`AppContext::wait_cq`] blocks until it has a completion (the
//!   `ibv_req_notify_cq` + `ibv_get_cq_event` pair in one call). The
//!   datapath pays for a wake-up only while a waiter is armed. A CQ made
//!   otherwise (a raw `Context::create_cq` inside `run`) has no ring and
//!   its completions stay in the context.
//!
//! # Errors of posts
//!
//! What can be checked at once is: a QP of another context, a full
//! command ring ([`Error::RingFull`]: retry, as after `ENOMEM` from
//! `ibv_post_send`) and a stopped datapath ([`Error::Stopped`]); those
//! return the work request in a [`Refused`]. What the transport refuses
//! later on the datapath (wrong QP state, full send or receive queue, too
//! many SGEs, inline data too long, ...) comes back as an **error
//! completion** on the QP's send (or receive) CQ ring, after every
//! completion that CQ already held: `wr_id` and `qp_num` of the request,
//! status [`WcStatus::LocLenErr`] for a size refusal, else
//! [`WcStatus::LocQpOpErr`]. The reason in full waits in the context's
//! post-error ring ([`AppContext::poll_post_error`], bounded: the oldest
//! go first when it is full, and are counted). A QP made outside
//! [`AppContext::create_qp`] has no known CQ: its refused posts are
//! reported in the post-error ring only.
//!
//! # Back-pressure
//!
//! A full completion ring holds the completions back in the transport's CQ
//! (and, when that is full too, in the QP's backlog: see
//! [`AsyncEvent::CqOverrun`]); none is lost and each CQ keeps its order.
//!
//! # Idle rounds and stopping
//!
//! [`Idle::BusyPoll`] never gives the core up (a pinned DPDK lcore);
//! [`Idle::Backoff`] (the default) spins a few idle rounds, then yields
//! the CPU, then parks for a bounded time per round (a command wakes it at
//! once; frames arriving meanwhile wait at most that long).
//!
//! The thread stops when told ([`Datapath::stop`], [`Datapath::join`]) or
//! when the last handle (the `Datapath` and every `AppContext`) drops. It
//! then runs every command already on the ring, moves the port once more
//! and gives the contexts back to `join`, with whatever work requests are
//! still outstanding (drive them with the run-to-completion verbs, or
//! `close` the ports). Later posts and control calls fail with
//! [`Error::Stopped`].

#![deny(unsafe_code)]
use crate::backend::steer::{steer, Steered, RING_DEPTH};
use crate::backend::Backend;
use crate::time::Duration;
use crate::transport::{self, CqId};
use crate::verbs::{
    self, Access, AsyncEvent, AttrMask, ConnectParams, Context, ContextConfig, Cq, GidEntry, Mr,
    Pd, PortAttr, Qp, QpAttr, QpCaps, QpCounters, QpState, RecvWr, RegionMemory, SendOp, SendWr,
    Wc, WcOpcode, WcStatus,
};
use core::net::IpAddr;
use crossbeam_queue::ArrayQueue;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::{JoinHandle, Thread};

/// What a call through an [`AppContext`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The verb itself refused (as in run-to-completion mode).
    #[error(transparent)]
    Verb(#[from] verbs::Error),
    /// The command ring had no room; try again.
    #[error("the datapath's command ring is full")]
    RingFull,
    /// The datapath thread has stopped.
    #[error("the datapath thread has stopped")]
    Stopped,
    /// The CQ has no completion ring: it was not made by
    /// [`AppContext::create_cq`], or it was destroyed.
    #[error("the CQ has no completion ring")]
    NoRing,
}

/// A refused call: why, and what was passed (a handle or a work request)
/// back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Refused<T> {
    /// Why the call was refused.
    pub error: Error,
    /// What was passed: the handle (still valid) or the work request.
    pub handle: T,
}

/// Which queue a refused post was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkQueue {
    /// The send queue (`post_send`).
    Send,
    /// The receive queue (`post_recv`).
    Recv,
}

/// A post the transport refused on the datapath thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostError {
    /// The QP it was posted to.
    pub qp_num: u32,
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Which of the QP's queues it was for.
    pub queue: WorkQueue,
    /// Why the transport refused it.
    pub error: verbs::Error,
    /// Whether an error completion went to the QP's CQ ring for it.
    pub completed: bool,
}

/// What a datapath thread does in rounds that moved nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Never gives the core up: a pinned DPDK lcore.
    BusyPoll,
    /// Spins for `spin` idle rounds in a row, then yields the CPU for
    /// `yields` more, then parks for at most `park` in each idle round (a
    /// command or a stop wakes it at once; frames arriving meanwhile wait
    /// at most that long).
    Backoff {
        /// Idle rounds in a row spent spinning (default 64).
        spin: u32,
        /// Idle rounds after those that yield the CPU (default 64).
        yields: u32,
        /// Longest park per idle round after that (default 200 µs).
        park: Duration,
    },
}

impl Default for Idle {
    fn default() -> Idle {
        Idle::Backoff {
            spin: 64,
            yields: 64,
            park: Duration::from_micros(200),
        }
    }
}

/// How to run a datapath thread.
#[derive(Clone)]
pub struct LcoreConfig {
    /// The thread's name.
    pub name: String,
    /// What the thread does in rounds that moved nothing (default
    /// [`Idle::Backoff`]).
    pub idle: Idle,
    /// Room of the command ring (posts and control calls in flight).
    pub commands: usize,
    /// Most commands run per round, so that a flood of posts does not
    /// starve the port.
    pub burst: usize,
    /// Room of each context's post-error ring.
    pub post_errors: usize,
    /// What the thread runs on itself before its loop: pin it to a CPU,
    /// register it with DPDK's EAL (an lcore id, per-lcore mempool caches);
    /// `None` for neither. Injected so that this layer never names DPDK:
    /// `crate::dpdk::lcore::thread_setup` makes one.
    pub setup: Option<ThreadSetup>,
}

/// A datapath thread's setup, run on that thread before its loop; what it
/// returns (a registration guard, say) lives until the loop ends, and an
/// error stops the spawn with that message.
pub type ThreadSetup = Arc<dyn Fn() -> Result<Box<dyn core::any::Any>, String> + Send + Sync>;

impl core::fmt::Debug for LcoreConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("LcoreConfig");
        d.field("name", &self.name)
            .field("idle", &self.idle)
            .field("commands", &self.commands)
            .field("burst", &self.burst)
            .field("post_errors", &self.post_errors);
        d.field("setup", &self.setup.as_ref().map(|_| "injected"));
        d.finish()
    }
}

impl Default for LcoreConfig {
    fn default() -> LcoreConfig {
        LcoreConfig {
            name: "ferroce-lcore".into(),
            idle: Idle::default(),
            commands: 1024,
            burst: 64,
            post_errors: 256,
            setup: None,
        }
    }
}

/// What a datapath thread has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatapathStats {
    /// Rounds of the loop: commands, then each context's port, then its
    /// completion rings.
    pub rounds: u64,
    /// Rounds that moved no frame, ran no command and moved no completion.
    pub idle_rounds: u64,
    /// Commands taken off the ring and run (posts and control calls).
    pub commands: u64,
    /// Completions moved into completion rings.
    pub completions: u64,
    /// Times the thread parked in an idle round ([`Idle::Backoff`] only).
    pub parks: u64,
}

#[derive(Default)]
struct Stats {
    rounds: AtomicU64,
    idle_rounds: AtomicU64,
    commands: AtomicU64,
    completions: AtomicU64,
    parks: AtomicU64,
}

impl Stats {
    /// Publishes the thread's own counts (only it writes them).
    fn publish(&self, s: &DatapathStats) {
        self.rounds.store(s.rounds, Ordering::Relaxed);
        self.idle_rounds.store(s.idle_rounds, Ordering::Relaxed);
        self.commands.store(s.commands, Ordering::Relaxed);
        self.completions.store(s.completions, Ordering::Relaxed);
        self.parks.store(s.parks, Ordering::Relaxed);
    }

    fn read(&self) -> DatapathStats {
        DatapathStats {
            rounds: self.rounds.load(Ordering::Relaxed),
            idle_rounds: self.idle_rounds.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            completions: self.completions.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
        }
    }
}

// ----- completion rings -----

const RING_OPEN: u8 = 0;
const RING_DESTROYED: u8 = 1;
const RING_STOPPED: u8 = 2;

/// One CQ's completions on their way to the application.
struct CqRing {
    q: ArrayQueue<Wc>,
    /// Threads blocked in `wait`: the datapath signals only when nonzero.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    state: AtomicU8,
    /// The CQ holds completions the ring had no room for: a poll that
    /// makes room wakes the datapath to move them.
    held: AtomicBool,
    datapath: Thread,
}

impl CqRing {
    /// A ring of `len` fed by the calling (datapath) thread.
    fn new(len: usize) -> CqRing {
        CqRing {
            q: ArrayQueue::new(len.max(1)),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            state: AtomicU8::new(RING_OPEN),
            held: AtomicBool::new(false),
            datapath: std::thread::current(),
        }
    }

    fn poll(&self, max: usize, out: &mut Vec<Wc>) -> usize {
        let mut n = 0;
        while n < max {
            let Some(w) = self.q.pop() else { break };
            out.push(w);
            n += 1;
        }
        if n > 0 && self.held.load(Ordering::Relaxed) {
            self.datapath.unpark();
        }
        n
    }

    /// Called by the datapath after it pushed completions.
    fn notify(&self) {
        // Pairs with the fence in `wait`: either the waiter sees the
        // completion, or the datapath sees the waiter.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
    }

    fn close(&self, state: u8) {
        self.state.store(state, Ordering::SeqCst);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }

    fn closed(&self) -> Option<Error> {
        match self.state.load(Ordering::SeqCst) {
            RING_OPEN => None,
            RING_DESTROYED => Some(Error::NoRing),
            _ => Some(Error::Stopped),
        }
    }

    fn wait(&self, timeout: Duration) -> Result<bool, Error> {
        if !self.q.is_empty() {
            return Ok(true);
        }
        let timeout = std::time::Duration::from_nanos(timeout.as_nanos());
        let end = std::time::Instant::now().checked_add(timeout);
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let r = loop {
            if !self.q.is_empty() {
                break Ok(true);
            }
            if let Some(e) = self.closed() {
                break Err(e);
            }
            let left = match end {
                Some(end) => end.saturating_duration_since(std::time::Instant::now()),
                None => timeout,
            };
            if left.is_zero() {
                break Ok(false);
            }
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

/// A CQ's completion ring, to poll or wait on without looking the CQ up
/// each time (what [`AppContext::poll_cq`] and [`AppContext::wait_cq`] do
/// through it).
#[derive(Clone)]
pub struct Completions(Arc<CqRing>);

impl Completions {
    /// Takes up to `max` completions, oldest first, into `out`.
    pub fn poll(&self, max: usize, out: &mut Vec<Wc>) -> usize {
        self.0.poll(max, out)
    }

    /// Blocks until a completion waits or `timeout` passes; returns
    /// whether one waits. Fails when the ring is empty and closed (CQ
    /// destroyed, datapath stopped).
    pub fn wait(&self, timeout: Duration) -> Result<bool, Error> {
        self.0.wait(timeout)
    }

    /// Completions waiting in the ring.
    pub fn len(&self) -> usize {
        self.0.q.len()
    }

    /// Whether no completion waits in the ring.
    pub fn is_empty(&self) -> bool {
        self.0.q.is_empty()
    }

    /// How many the ring holds.
    pub fn capacity(&self) -> usize {
        self.0.q.capacity()
    }
}

// ----- what the threads share -----

/// One context's part of what the threads share.
struct LaneShared {
    ctx_id: u32,
    rings: RwLock<HashMap<CqId, Arc<CqRing>>>,
    post_errors: ArrayQueue<PostError>,
    post_errors_lost: AtomicU64,
}

type ControlFn<B> = Box<dyn FnOnce(&mut Lane<B>) + Send>;

enum Command<B: Backend> {
    PostSend { lane: usize, qp: Qp, wr: SendWr },
    PostRecv { lane: usize, qp: Qp, wr: RecvWr },
    Control { lane: usize, f: ControlFn<B> },
}

/// The gate's top bit: the datapath takes no more commands.
const EXITED: usize = 1 << (usize::BITS - 1);

struct Shared<B: Backend> {
    commands: ArrayQueue<Command<B>>,
    /// [`EXITED`], plus how many threads are between checking it and
    /// pushing a command: the datapath closes the gate, waits for them,
    /// then runs what they pushed; a command is either run or refused.
    gate: AtomicUsize,
    stop: AtomicBool,
    /// Live handles: the `Datapath` and every `AppContext`.
    handles: AtomicUsize,
    /// The datapath is (about to be) parked: a pusher unparks it.
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
    lanes: Vec<Arc<LaneShared>>,
    stats: Stats,
}

impl<B: Backend> Shared<B> {
    /// Queues `cmd`, or gives it back with why not (by value: a refusal
    /// allocates nothing).
    #[allow(clippy::result_large_err)]
    fn push(&self, cmd: Command<B>) -> Result<(), (Error, Command<B>)> {
        if self.gate.fetch_add(1, Ordering::SeqCst) & EXITED != 0 {
            self.gate.fetch_sub(1, Ordering::SeqCst);
            return Err((Error::Stopped, cmd));
        }
        let r = self.commands.push(cmd);
        self.gate.fetch_sub(1, Ordering::SeqCst);
        match r {
            Ok(()) => {
                self.wake_if_sleeping();
                Ok(())
            }
            Err(cmd) => Err((Error::RingFull, cmd)),
        }
    }

    fn wake_if_sleeping(&self) {
        // Pairs with the store and re-check before `park_timeout`.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.unpark();
        }
    }

    fn unpark(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unpark();
    }

    /// Takes a handle away; the last one stops the thread. Returns whether
    /// it was the last.
    fn release(&self) -> bool {
        let last = self.handles.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.request_stop();
        }
        last
    }

    /// Refuses commands from now on; returns once every thread that got
    /// past the gate has pushed.
    fn close_gate(&self) {
        self.gate.fetch_or(EXITED, Ordering::SeqCst);
        while self.gate.load(Ordering::SeqCst) & !EXITED != 0 {
            std::thread::yield_now();
        }
    }

    fn exited(&self) -> bool {
        self.gate.load(Ordering::SeqCst) & EXITED != 0
    }
}

// ----- the datapath thread's side -----

/// A CQ whose completions go to a ring.
struct Feed {
    cq: Cq,
    ring: Arc<CqRing>,
    /// Completions taken from the CQ that the ring had no room for yet
    /// (only error completions of refused posts, and what was ahead of
    /// them), in order, ahead of what the CQ still holds.
    overflow: VecDeque<Wc>,
    /// What `ring.held` was last set to.
    held: bool,
}

/// One context on its datapath thread.
struct Lane<B: Backend> {
    ctx: Context<B>,
    shared: Arc<LaneShared>,
    feeds: Vec<Feed>,
    /// The send and receive CQ of each QP made through an `AppContext`.
    qps: HashMap<u32, (CqId, CqId)>,
    scratch: Vec<Wc>,
}

impl<B: Backend> Lane<B> {
    /// Moves completions from CQs to their rings as room allows; returns
    /// how many moved.
    fn feed(&mut self) -> usize {
        let mut moved = 0;
        for f in &mut self.feeds {
            let mut n = 0;
            while let Some(&w) = f.overflow.front() {
                if f.ring.q.push(w).is_err() {
                    break;
                }
                f.overflow.pop_front();
                n += 1;
            }
            if f.overflow.is_empty() {
                let room = f.ring.q.capacity() - f.ring.q.len();
                if room > 0 && self.ctx.device().cq_len(f.cq.cq_id()) > 0 {
                    self.scratch.clear();
                    let _ = self.ctx.poll_cq_only(&f.cq, room, &mut self.scratch);
                    for &w in &self.scratch {
                        // Only the datapath pushes: the room counted is
                        // there (kept in order all the same, should it
                        // not be).
                        match f.ring.q.push(w) {
                            Ok(()) => n += 1,
                            Err(w) => f.overflow.push_back(w),
                        }
                    }
                }
            }
            let held = !f.overflow.is_empty() || self.ctx.device().cq_len(f.cq.cq_id()) > 0;
            if held != f.held {
                f.held = held;
                f.ring.held.store(held, Ordering::Relaxed);
            }
            if n > 0 {
                f.ring.notify();
                moved += n;
            }
        }
        moved
    }

    /// Reports a post the transport refused.
    fn post_failed(
        &mut self,
        qp_num: u32,
        wr_id: u64,
        queue: WorkQueue,
        opcode: WcOpcode,
        error: verbs::Error,
    ) {
        let status = match error {
            verbs::Error::Verb(transport::Error::TooManySge | transport::Error::InlineTooLong) => {
                WcStatus::LocLenErr
            }
            _ => WcStatus::LocQpOpErr,
        };
        let cq = self.qps.get(&qp_num).map(|&(s, r)| match queue {
            WorkQueue::Send => s,
            WorkQueue::Recv => r,
        });
        let feed = cq.and_then(|c| self.feeds.iter_mut().find(|f| f.cq.cq_id() == c));
        let completed = match feed {
            Some(f) => {
                // Behind every completion the CQ (and the QPs' backlog
                // for it) already holds.
                loop {
                    self.scratch.clear();
                    let n = self
                        .ctx
                        .poll_cq_only(&f.cq, usize::MAX, &mut self.scratch)
                        .unwrap_or(0);
                    f.overflow.extend(self.scratch.drain(..));
                    if n == 0 {
                        break;
                    }
                }
                f.overflow.push_back(Wc {
                    wr_id,
                    status,
                    opcode,
                    qp_num,
                    byte_len: 0,
                    imm_data: None,
                    invalidated_rkey: None,
                    src_qp: None,
                });
                true
            }
            None => false,
        };
        let e = PostError {
            qp_num,
            wr_id,
            queue,
            error,
            completed,
        };
        if self.shared.post_errors.force_push(e).is_some() {
            self.shared.post_errors_lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn execute(&mut self, cmd: Command<B>) {
        match cmd {
            Command::PostSend { qp, wr, .. } => {
                let (wr_id, opcode) = (wr.wr_id, send_opcode(&wr.op));
                if let Err(e) = self.ctx.post_send(&qp, wr) {
                    self.post_failed(qp.num(), wr_id, WorkQueue::Send, opcode, e);
                }
            }
            Command::PostRecv { qp, wr, .. } => {
                let wr_id = wr.wr_id;
                if let Err(e) = self.ctx.post_recv(&qp, wr) {
                    self.post_failed(qp.num(), wr_id, WorkQueue::Recv, WcOpcode::Recv, e);
                }
            }
            Command::Control { f, .. } => f(self),
        }
    }
}

fn send_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
        SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
    }
}

fn lane_of<B: Backend>(cmd: &Command<B>) -> usize {
    match cmd {
        Command::PostSend { lane, .. }
        | Command::PostRecv { lane, .. }
        | Command::Control { lane, .. } => *lane,
    }
}

/// Closes the gate and the rings when the thread ends, however it ends:
/// commands it could not run are dropped (a control caller then gets
/// `Stopped`), waiters wake.
struct ExitGuard<'a, B: Backend>(&'a Shared<B>);

impl<B: Backend> Drop for ExitGuard<'_, B> {
    fn drop(&mut self) {
        self.0.close_gate();
        while self.0.commands.pop().is_some() {}
        for lane in &self.0.lanes {
            let rings = lane.rings.read().unwrap_or_else(|e| e.into_inner());
            for r in rings.values() {
                r.close(RING_STOPPED);
            }
        }
    }
}

/// The datapath thread's loop.
fn run<B: Backend>(
    shared: &Shared<B>,
    contexts: Vec<Context<B>>,
    idle_policy: Idle,
    burst: usize,
) -> Vec<Context<B>> {
    let guard = ExitGuard(shared);
    let mut lanes: Vec<Lane<B>> = contexts
        .into_iter()
        .zip(&shared.lanes)
        .map(|(ctx, s)| Lane {
            ctx,
            shared: s.clone(),
            feeds: Vec::new(),
            qps: HashMap::new(),
            scratch: Vec::new(),
        })
        .collect();
    let mut st = DatapathStats::default();
    let mut idle: u32 = 0;
    let round = |lanes: &mut [Lane<B>], st: &mut DatapathStats, max: usize| {
        let mut work = 0;
        for _ in 0..max {
            let Some(cmd) = shared.commands.pop() else {
                break;
            };
            let i = lane_of(&cmd);
            lanes[i].execute(cmd);
            st.commands += 1;
            work += 1;
        }
        for l in lanes.iter_mut() {
            let p = l.ctx.progress();
            work += p.rx + p.tx;
            let n = l.feed();
            st.completions += n as u64;
            work += n;
        }
        st.rounds += 1;
        work
    };
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        let work = round(&mut lanes, &mut st, burst);
        if stopping {
            break;
        }
        if work > 0 {
            idle = 0;
        } else {
            st.idle_rounds += 1;
            idle = idle.saturating_add(1);
            match idle_policy {
                Idle::BusyPoll => core::hint::spin_loop(),
                Idle::Backoff { spin, yields, park } => {
                    if idle <= spin {
                        core::hint::spin_loop();
                    } else if idle - spin <= yields {
                        std::thread::yield_now();
                    } else {
                        shared.sleeping.store(true, Ordering::SeqCst);
                        fence(Ordering::SeqCst);
                        if shared.commands.is_empty() && !shared.stop.load(Ordering::SeqCst) {
                            st.parks += 1;
                            shared.stats.publish(&st);
                            std::thread::park_timeout(std::time::Duration::from_nanos(
                                park.as_nanos(),
                            ));
                        }
                        shared.sleeping.store(false, Ordering::SeqCst);
                    }
                }
            }
        }
        shared.stats.publish(&st);
    }
    // Whatever got past the gate runs; then the port moves once more.
    shared.close_gate();
    round(&mut lanes, &mut st, usize::MAX);
    shared.stats.publish(&st);
    drop(guard);
    lanes.into_iter().map(|l| l.ctx).collect()
}

// ----- the owner's handle -----

/// A datapath thread that owns one or more contexts.
pub struct Datapath<B: Backend + 'static> {
    shared: Arc<Shared<B>>,
    thread: Option<JoinHandle<Vec<Context<B>>>>,
}

/// A datapath that did not start, with its contexts back.
#[derive(thiserror::Error)]
#[error("the datapath thread did not start: {error}")]
pub struct SpawnError<B: Backend> {
    /// Why: the thread could not be created, or its setup failed.
    pub error: String,
    /// The contexts given to `spawn`, in their order.
    pub contexts: Vec<Context<B>>,
}

impl<B: Backend> core::fmt::Debug for SpawnError<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SpawnError")
            .field("error", &self.error)
            .field("contexts", &self.contexts)
            .finish()
    }
}

impl<B: Backend + 'static> Datapath<B>
where
    Context<B>: Send,
{
    /// Starts a thread that owns `contexts` (context `i` is reached by
    /// [`Datapath::context`]`(i)`), pinned and registered as `cfg` says.
    pub fn spawn(contexts: Vec<Context<B>>, cfg: LcoreConfig) -> Result<Self, SpawnError<B>> {
        let lanes = contexts
            .iter()
            .map(|c| {
                Arc::new(LaneShared {
                    ctx_id: c.id(),
                    rings: RwLock::new(HashMap::new()),
                    post_errors: ArrayQueue::new(cfg.post_errors.max(1)),
                    post_errors_lost: AtomicU64::new(0),
                })
            })
            .collect();
        let shared = Arc::new(Shared {
            commands: ArrayQueue::new(cfg.commands.max(1)),
            gate: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            handles: AtomicUsize::new(1),
            sleeping: AtomicBool::new(false),
            thread: OnceLock::new(),
            lanes,
            stats: Stats::default(),
        });
        // The contexts follow on a channel, so that a thread that cannot
        // be created leaves them with us.
        let (give, take) = mpsc::sync_channel::<Vec<Context<B>>>(1);
        let (ready_tx, ready) = mpsc::sync_channel::<Result<(), String>>(1);
        let sh = shared.clone();
        let (idle, burst) = (cfg.idle, cfg.burst.max(1));
        let spawned = std::thread::Builder::new()
            .name(cfg.name.clone())
            .spawn(move || {
                let Ok(contexts) = take.recv() else {
                    return Vec::new();
                };
                let setup = cfg.setup.as_ref().map_or(Ok(None), |f| f().map(Some));
                match setup {
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        contexts
                    }
                    // Pinned and registered until the loop ends.
                    Ok(_setup) => {
                        let _ = ready_tx.send(Ok(()));
                        run(&sh, contexts, idle, burst)
                    }
                }
            });
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                return Err(SpawnError {
                    error: e.to_string(),
                    contexts,
                })
            }
        };
        let _ = shared.thread.set(thread.thread().clone());
        let _ = give.send(contexts);
        match ready.recv() {
            Ok(Ok(())) => Ok(Datapath {
                shared,
                thread: Some(thread),
            }),
            Ok(Err(error)) => Err(SpawnError {
                error,
                contexts: thread.join().unwrap_or_default(),
            }),
            Err(_) => Err(SpawnError {
                error: "the thread ended before it started".into(),
                contexts: thread.join().unwrap_or_default(),
            }),
        }
    }
}

/// One port on several datapath lcores: queue pair `i` of the port
/// (`queues[i]`) becomes shard `i` of its QP numbers
/// ([`crate::wire::Shard`]), its received frames steered to the shard
/// that owns their QP ([`crate::backend::steer::steer`], rings of
/// `RING_DEPTH` frames), with a context opened on it with `cfg` and that
/// shard (`clock()` its clock), on a datapath thread of its own set up by
/// `lcore(i)` (pin thread `i` to a core of its own, register it with the
/// EAL). The port's address is the same on every datapath; an
/// application creates each QP on the datapath it wants it to run on,
/// and connects it as usual (peers are resolved by each datapath, the
/// first answering for the port).
///
/// Fails, with every thread already started stopped, when the queue
/// count is not 1 to [`crate::wire::Shard::MAX`], a context does not
/// open, or a thread does not start.
pub fn spawn_port<B>(
    queues: Vec<B>,
    cfg: &ContextConfig,
    clock: &dyn Fn() -> Box<dyn crate::time::Clock + Send>,
    lcore: &dyn Fn(usize) -> LcoreConfig,
) -> Result<Vec<Datapath<Steered<B>>>, String>
where
    B: Backend + Send + 'static,
    B::Buf: Send,
{
    let steered = steer(queues, RING_DEPTH)?;
    let mut out = Vec::with_capacity(steered.len());
    for (i, q) in steered.into_iter().enumerate() {
        let c = ContextConfig {
            shard: q.shard(),
            ..cfg.clone()
        };
        let ctx = Context::open(q, clock(), c).map_err(|e| format!("datapath {i}: {e}"))?;
        let dp = Datapath::spawn(vec![ctx], lcore(i)).map_err(|e| format!("datapath {i}: {e}"))?;
        out.push(dp);
    }
    Ok(out)
}

impl<B: Backend + 'static> Datapath<B> {
    /// A handle on context `index` (in the order given to `spawn`).
    pub fn context(&self, index: usize) -> Option<AppContext<B>> {
        (index < self.shared.lanes.len()).then(|| AppContext::new(self.shared.clone(), index))
    }

    /// A handle on each context, in the order given to `spawn`.
    pub fn contexts(&self) -> Vec<AppContext<B>> {
        (0..self.len())
            .map(|i| AppContext::new(self.shared.clone(), i))
            .collect()
    }

    /// How many contexts the thread owns.
    pub fn len(&self) -> usize {
        self.shared.lanes.len()
    }

    /// Whether the thread owns no context.
    pub fn is_empty(&self) -> bool {
        self.shared.lanes.is_empty()
    }

    /// Asks the thread to stop (it finishes the commands queued so far);
    /// does not wait.
    pub fn stop(&self) {
        self.shared.request_stop();
    }

    /// Whether the thread still takes commands.
    pub fn is_running(&self) -> bool {
        !self.shared.exited()
    }

    /// The thread that owns the contexts (and so their QPs).
    pub fn thread(&self) -> &Thread {
        self.shared.thread.get().expect("set at spawn")
    }

    /// The thread's counts as it last published them (each round, and
    /// before it parks).
    pub fn stats(&self) -> DatapathStats {
        self.shared.stats.read()
    }

    /// Stops the thread, waits for it, and gives the contexts back (in
    /// the order given to `spawn`). `Err` carries the thread's panic.
    pub fn join(mut self) -> std::thread::Result<Vec<Context<B>>> {
        self.shared.request_stop();
        let t = self.thread.take().expect("joined once");
        t.join()
    }
}

impl<B: Backend + 'static> Drop for Datapath<B> {
    /// The last handle stops the thread and waits for it (the contexts
    /// close with it); otherwise the thread runs on for the others.
    fn drop(&mut self) {
        if self.shared.release() {
            if let Some(t) = self.thread.take() {
                // Not when dropped on the datapath thread itself (in a
                // `run` closure): it ends on its own.
                if t.thread().id() != std::thread::current().id() {
                    let _ = t.join();
                }
            }
        }
    }
}

// ----- the application's handle -----

/// An application thread's handle on one context of a [`Datapath`]: the
/// verbs, run on the datapath thread. `Clone + Send + Sync`.
pub struct AppContext<B: Backend + 'static> {
    shared: Arc<Shared<B>>,
    lane: usize,
}

impl<B: Backend + 'static> Clone for AppContext<B> {
    fn clone(&self) -> Self {
        AppContext::new(self.shared.clone(), self.lane)
    }
}

impl<B: Backend + 'static> Drop for AppContext<B> {
    fn drop(&mut self) {
        self.shared.release();
    }
}

impl<B: Backend + 'static> core::fmt::Debug for AppContext<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AppContext")
            .field("index", &self.lane)
            .field("context", &self.lane().ctx_id)
            .finish_non_exhaustive()
    }
}

impl<B: Backend + 'static> AppContext<B> {
    fn new(shared: Arc<Shared<B>>, lane: usize) -> Self {
        shared.handles.fetch_add(1, Ordering::Relaxed);
        AppContext { shared, lane }
    }

    fn lane(&self) -> &LaneShared {
        &self.shared.lanes[self.lane]
    }

    /// Its index in its datapath (the order given to `spawn`).
    pub fn index(&self) -> usize {
        self.lane
    }

    /// The datapath thread that owns this context and its QPs.
    pub fn thread(&self) -> &Thread {
        self.shared.thread.get().expect("set at spawn")
    }

    /// Whether the datapath still takes commands.
    pub fn is_running(&self) -> bool {
        !self.shared.exited()
    }

    // ----- control: closures run on the datapath, a reply back -----

    fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Lane<B>) -> R + Send + 'static,
    ) -> Result<R, Error> {
        if let Some(t) = self.shared.thread.get() {
            assert!(
                t.id() != std::thread::current().id(),
                "a control verb called on its own datapath thread would wait for itself"
            );
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let mut cmd = Command::Control {
            lane: self.lane,
            f: Box::new(move |l: &mut Lane<B>| {
                let r = std::panic::catch_unwind(AssertUnwindSafe(|| f(l)));
                let _ = tx.send(r);
            }),
        };
        loop {
            match self.shared.push(cmd) {
                Ok(()) => break,
                Err((Error::RingFull, c)) => {
                    cmd = c;
                    self.shared.unpark();
                    std::thread::yield_now();
                }
                Err((e, _)) => return Err(e),
            }
        }
        match rx.recv() {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Err(Error::Stopped),
        }
    }

    /// Runs `f` on the context, on its datapath thread, and returns what
    /// it returns: any verb the typed calls below do not cover. Blocks
    /// until it ran.
    pub fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Context<B>) -> R + Send + 'static,
    ) -> Result<R, Error> {
        self.call(move |l| f(&mut l.ctx))
    }

    /// [`AppContext::run`] for a verb that can refuse.
    fn verb<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Lane<B>) -> Result<R, verbs::Error> + Send + 'static,
    ) -> Result<R, Error> {
        Ok(self.call(f)??)
    }

    /// A destroy verb: the handle comes back when it is refused.
    fn destroy<H: Send + 'static>(
        &self,
        handle: H,
        alias: H,
        f: impl FnOnce(&mut Lane<B>, H) -> Result<(), verbs::Error> + Send + 'static,
    ) -> Result<(), Refused<H>> {
        match self.verb(move |l| f(l, alias)) {
            Ok(()) => Ok(()),
            Err(error) => Err(Refused { error, handle }),
        }
    }

    /// The port's MAC, active MTU and table sizes (`ibv_query_port`).
    pub fn query_port(&self) -> Result<PortAttr, Error> {
        self.call(|l| l.ctx.query_port())
    }

    /// Entry `index` of the GID table (`ibv_query_gid_ex`).
    pub fn query_gid(&self, index: u8) -> Result<GidEntry, Error> {
        self.verb(move |l| l.ctx.query_gid(index))
    }

    /// A new protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<Pd, Error> {
        self.call(|l| l.ctx.alloc_pd())
    }

    /// Frees a PD no QP or region uses.
    pub fn dealloc_pd(&self, pd: Pd) -> Result<(), Refused<Pd>> {
        let alias = pd.alias();
        self.destroy(pd, alias, |l, pd| l.ctx.dealloc_pd(pd).map_err(|r| r.error))
    }

    /// A zeroed region of `len` bytes from the context's region memory.
    pub fn reg_mr(&self, pd: &Pd, len: usize, access: Access) -> Result<Mr, Error> {
        let pd = pd.alias();
        self.verb(move |l| l.ctx.reg_mr(&pd, len, access))
    }

    /// Registers memory the application allocated (the context owns it
    /// until [`AppContext::dereg_mr`]).
    pub fn reg_mr_memory(
        &self,
        pd: &Pd,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<Mr, Error> {
        let pd = pd.alias();
        self.verb(move |l| l.ctx.reg_mr_memory(&pd, mem, access))
    }

    /// Deregisters a region no posted work request names.
    pub fn dereg_mr(&self, mr: Mr) -> Result<(), Refused<Mr>> {
        let alias = mr.alias();
        self.destroy(mr, alias, |l, mr| l.ctx.dereg_mr(mr).map_err(|r| r.error))
    }

    /// Runs `f` on the region's bytes, on the datapath thread (no copy
    /// crosses unless `f` makes one). `f` owns what it captures: move
    /// data in, return data out.
    pub fn with_mr<R: Send + 'static>(
        &self,
        mr: &Mr,
        f: impl FnOnce(&[u8]) -> R + Send + 'static,
    ) -> Result<R, Error> {
        let mr = mr.alias();
        self.verb(move |l| l.ctx.mr(&mr).map(f))
    }

    /// [`AppContext::with_mr`] with the bytes to write.
    pub fn with_mr_mut<R: Send + 'static>(
        &self,
        mr: &Mr,
        f: impl FnOnce(&mut [u8]) -> R + Send + 'static,
    ) -> Result<R, Error> {
        let mr = mr.alias();
        self.verb(move |l| l.ctx.mr_mut(&mr).map(f))
    }

    /// A CQ of `cqe` completions with a completion ring of as many.
    pub fn create_cq(&self, cqe: usize) -> Result<Cq, Error> {
        self.create_cq_with_ring(cqe, cqe)
    }

    /// A CQ of `cqe` completions whose ring holds `ring` (at least one):
    /// completions beyond wait in the CQ until the application polls.
    pub fn create_cq_with_ring(&self, cqe: usize, ring: usize) -> Result<Cq, Error> {
        self.verb(move |l| {
            let cq = l.ctx.create_cq(cqe)?;
            let r = Arc::new(CqRing::new(ring));
            l.shared
                .rings
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(cq.cq_id(), r.clone());
            l.feeds.push(Feed {
                cq: cq.alias(),
                ring: r,
                overflow: VecDeque::new(),
                held: false,
            });
            Ok(cq)
        })
    }

    /// Destroys a CQ no QP uses; completions still in its ring go with it.
    pub fn destroy_cq(&self, cq: Cq) -> Result<(), Refused<Cq>> {
        let alias = cq.alias();
        self.destroy(cq, alias, |l, cq| {
            let id = cq.cq_id();
            l.ctx.destroy_cq(cq).map_err(|r| r.error)?;
            l.feeds.retain(|f| f.cq.cq_id() != id);
            let ring = l
                .shared
                .rings
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            if let Some(r) = ring {
                r.close(RING_DESTROYED);
            }
            Ok(())
        })
    }

    /// The ring of `cq`, to poll or wait on without a lookup each time.
    pub fn completions(&self, cq: &Cq) -> Result<Completions, Error> {
        self.with_ring(cq, |r| Completions(r.clone()))
    }

    fn with_ring<R>(&self, cq: &Cq, f: impl FnOnce(&Arc<CqRing>) -> R) -> Result<R, Error> {
        let lane = self.lane();
        if cq.context_id() != lane.ctx_id {
            return Err(Error::Verb(verbs::Error::WrongContext));
        }
        let rings = lane.rings.read().unwrap_or_else(|e| e.into_inner());
        rings.get(&cq.cq_id()).map(f).ok_or(Error::NoRing)
    }

    /// Takes up to `max` completions of `cq`, oldest first, into `out`
    /// (`ibv_poll_cq`); never blocks, never waits for the datapath. The
    /// ring is found under a read lock that only `create_cq` and
    /// `destroy_cq` take for writing; [`AppContext::completions`] hands
    /// out the ring itself, for loops that want no lookup at all.
    pub fn poll_cq(&self, cq: &Cq, max: usize, out: &mut Vec<Wc>) -> Result<usize, Error> {
        self.with_ring(cq, |r| r.poll(max, out))
    }

    /// Blocks the calling thread (no spinning) until `cq` has a
    /// completion or `timeout` passes; returns whether one waits
    /// (`ibv_req_notify_cq` + `ibv_get_cq_event`).
    pub fn wait_cq(&self, cq: &Cq, timeout: Duration) -> Result<bool, Error> {
        self.with_ring(cq, |r| r.clone())?.wait(timeout)
    }

    /// An RC QP in RESET, owned by this context's datapath thread.
    pub fn create_qp(
        &self,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<Qp, Error> {
        let (pd, s, r) = (pd.alias(), send_cq.alias(), recv_cq.alias());
        self.verb(move |l| {
            let qp = l.ctx.create_qp(&pd, &s, &r, caps)?;
            l.qps.insert(qp.num(), (s.cq_id(), r.cq_id()));
            Ok(qp)
        })
    }

    /// `ibv_modify_qp`. A zero `dmac` is resolved by ARP on the datapath
    /// thread, which drives only this context's port meanwhile (up to the
    /// context's `resolve_timeout`).
    pub fn modify_qp(&self, qp: &Qp, attr: &QpAttr, mask: AttrMask) -> Result<(), Error> {
        let (qp, attr) = (qp.alias(), *attr);
        self.verb(move |l| l.ctx.modify_qp(&qp, &attr, mask))
    }

    /// RESET to RTS towards `remote_qpn` at `remote` ([`Context::connect`]).
    pub fn connect(
        &self,
        qp: &Qp,
        remote_qpn: u32,
        remote: IpAddr,
        p: &ConnectParams,
        sq_psn: u32,
        rq_psn: u32,
    ) -> Result<(), Error> {
        let (qp, p) = (qp.alias(), *p);
        self.verb(move |l| l.ctx.connect(&qp, remote_qpn, remote, &p, sq_psn, rq_psn))
    }

    /// The QP's state and attributes (`ibv_query_qp`).
    pub fn query_qp(&self, qp: &Qp) -> Result<(QpState, QpAttr), Error> {
        let qp = qp.alias();
        self.verb(move |l| l.ctx.query_qp(&qp))
    }

    /// Destroys a QP; its outstanding work requests go with it, without
    /// completions.
    pub fn destroy_qp(&self, qp: Qp) -> Result<(), Refused<Qp>> {
        let alias = qp.alias();
        self.destroy(qp, alias, |l, qp| {
            let qpn = qp.num();
            l.ctx.destroy_qp(qp).map_err(|r| r.error)?;
            l.qps.remove(&qpn);
            Ok(())
        })
    }

    /// What the QP has seen and done so far.
    pub fn qp_counters(&self, qp: &Qp) -> Result<QpCounters, Error> {
        let qp = qp.alias();
        self.verb(move |l| l.ctx.qp_counters(&qp))
    }

    /// Send work requests posted and not yet completed (those still on
    /// the command ring not counted).
    pub fn send_queue_len(&self, qp: &Qp) -> Result<usize, Error> {
        let qp = qp.alias();
        self.call(move |l| l.ctx.send_queue_len(&qp))
    }

    /// Receive work requests posted and not yet consumed (those still on
    /// the command ring not counted).
    pub fn recv_queue_len(&self, qp: &Qp) -> Result<usize, Error> {
        let qp = qp.alias();
        self.call(move |l| l.ctx.recv_queue_len(&qp))
    }

    /// The next asynchronous event (`ibv_get_async_event`, not blocking).
    pub fn poll_async_event(&self) -> Result<Option<AsyncEvent>, Error> {
        self.call(|l| l.ctx.poll_async_event())
    }

    // ----- the hot path: commands on the ring, no reply -----

    /// Queues a send work request (`ibv_post_send`). Refused at once: a
    /// QP of another context, a full command ring, a stopped datapath.
    /// What the transport refuses comes back as an error completion (see
    /// the module doc).
    // The refused request comes back by value, for the caller to post
    // again without an allocation on the hot path.
    #[allow(clippy::result_large_err)]
    pub fn post_send(&self, qp: &Qp, wr: SendWr) -> Result<(), Refused<SendWr>> {
        if qp.context_id() != self.lane().ctx_id {
            return Err(Refused {
                error: Error::Verb(verbs::Error::WrongContext),
                handle: wr,
            });
        }
        let cmd = Command::PostSend {
            lane: self.lane,
            qp: qp.alias(),
            wr,
        };
        match self.shared.push(cmd) {
            Ok(()) => Ok(()),
            Err((error, Command::PostSend { wr, .. })) => Err(Refused { error, handle: wr }),
            Err(_) => unreachable!("push gives back what it was given"),
        }
    }

    /// Queues a receive work request (`ibv_post_recv`); refusals as for
    /// [`AppContext::post_send`].
    pub fn post_recv(&self, qp: &Qp, wr: RecvWr) -> Result<(), Refused<RecvWr>> {
        if qp.context_id() != self.lane().ctx_id {
            return Err(Refused {
                error: Error::Verb(verbs::Error::WrongContext),
                handle: wr,
            });
        }
        let cmd = Command::PostRecv {
            lane: self.lane,
            qp: qp.alias(),
            wr,
        };
        match self.shared.push(cmd) {
            Ok(()) => Ok(()),
            Err((error, Command::PostRecv { wr, .. })) => Err(Refused { error, handle: wr }),
            Err(_) => unreachable!("push gives back what it was given"),
        }
    }

    /// The oldest post the transport refused on the datapath, with why.
    pub fn poll_post_error(&self) -> Option<PostError> {
        self.lane().post_errors.pop()
    }

    /// Refused posts whose [`PostError`] was pushed out of the full
    /// post-error ring unread.
    pub fn post_errors_lost(&self) -> u64 {
        self.lane().post_errors_lost.load(Ordering::Relaxed)
    }
}
