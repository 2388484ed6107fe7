//! `ferroce bench e2e`: the RC transport end to end between two engines,
//! next to the ceilings it should be judged against, all in one run with
//! the measurements alternated round by round (this runs on noisy shared
//! machines: a ratio taken within a round holds where absolute figures
//! drift).
//!
//! What is measured, each round, in this order:
//!
//! - **a** the message rate of 64 B RDMA WRITEs between two transport
//!   devices, each on its own DPDK port (a ring pair in one process): many
//!   WRITEs in flight, unsignaled but every `cq_mod`-th (perftest's
//!   `--cq-mod`), each completion checked for success and the written bytes
//!   checked where they land after the run;
//! - **c** the same over the kernel UDP socket backend (each frame one
//!   datagram on 127.0.0.1): the kernel-stack baseline;
//! - **d** a bare echo of frames of the same size as a's WRITE frames
//!   through the same ring pair, no transport: the datapath ceiling;
//! - **e** one core copying 64 KiB messages in 4 KiB chunks and computing
//!   the CRC-32 of each chunk: the goodput ceiling (the transport copies
//!   each byte out of the sender's region and into the receiver's and
//!   computes its ICRC on both sides); then the copy alone and the CRC-32
//!   alone (e,m and e,c), from which the report derives what zero-copy
//!   send's own per-byte work (two CRCs, one copy) allows at most;
//! - **b** the goodput of 64 KiB WRITEs at path MTU 4096 (DPDK, then UDP);
//! - **f** the round-trip time of 64 B SENDs, one in flight (a SENDs, b
//!   answers with a SEND when it receives), next to the bare echo's
//!   round trip of one frame (and the same SEND ping-pong over UDP).
//!
//! Every run is bounded by a message count and a time limit, whichever
//! comes first; the report says when the limit cut a run short.
//!
//! The workloads are generic over the backend and the clock, so the tests
//! run them over the loopback and UDP backends without DPDK; `run` (with
//! the `dpdk` feature) is the command's whole job.

use crate::backend::{Backend, Burst, FrameBuf};
use crate::host::pump::pump_with;
use crate::time::{Clock, Duration, Instant};
use crate::transport::connect::{connect_qp, ConnectParams};
use crate::transport::mr::{copy_payload, RegionMemory};
use crate::transport::{
    Access, CqId, Device, DeviceConfig, MrKeys, MrSpec, Mtu, Payload, QpCaps, QpConfig, QpCounters,
    RecvWr, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use crate::wire::MacAddr;
use core::net::IpAddr;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

mod cores;
mod qps;
mod report;
pub use cores::{CorePoint, Split};
pub use qps::{live_heap, QpPoint, DEFAULT_COUNTS as QP_COUNTS};
pub use report::{E2eReport, Latency, Ratio, Round, TARGETS};

/// The size of the goodput run's messages.
pub const BIG: usize = 64 << 10;
/// Message slots per memory region: sources `[0, SLOTS)`, targets
/// `[SLOTS, 2 SLOTS)`, each [`BIG`] bytes apart. 64 slots of 64 KiB: the
/// goodput run streams through 4 MiB on each side, as does the copy+CRC
/// ceiling.
pub const SLOTS: usize = 64;
/// The chunk the copy+CRC ceiling works in: one path-MTU packet's payload.
pub const CHUNK: usize = 4096;
/// Receives each end keeps posted for the SEND ping-pong.
const RECVS: usize = 16;

/// How the two ends are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Threads {
    /// One thread polls both ends in turn.
    One,
    /// Each end has its own thread, busy-polling.
    Two,
}

/// The QP settings both engines use, whatever the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QpParams {
    /// Send work requests outstanding at most (the SQ depth).
    pub sq_depth: u32,
    /// Every this many WRITEs one is signaled.
    pub cq_mod: u32,
    /// Request PSNs in flight at most (the transport's `max_inflight`).
    pub inflight: u32,
    /// The path MTU both QPs are connected with.
    pub mtu: Mtu,
}

/// One end: a transport device with one QP, its CQ and memory region, and
/// what pumping it over a backend keeps between rounds.
pub struct Engine<T> {
    /// The transport device.
    pub dev: Device,
    /// Its one QP's number.
    pub qp: u32,
    cq: CqId,
    mr: MrKeys,
    wcs: Vec<Wc>,
    pending: Burst<T>,
    spare: Option<T>,
}

impl<T: FrameBuf> Engine<T> {
    /// A device at `mac`/`ip` with one RC QP (settings `p`), one CQ of 4096
    /// entries and a region of `2 * SLOTS * BIG` bytes; errs when `p` is out
    /// of range.
    pub fn new(mac: MacAddr, ip: IpAddr, p: &QpParams) -> anyhow::Result<Engine<T>> {
        Engine::with_memory(mac, ip, p, None)
    }

    /// [`Engine::new`] with its region in `mem` (`None`: a `Vec`); a
    /// region that lends ([`RegionMemory::lender`]) makes the engine send
    /// payloads from it in place over a port that can (zero-copy send),
    /// from [`crate::transport::ZERO_COPY_MIN`] bytes on.
    pub fn with_memory(
        mac: MacAddr,
        ip: IpAddr,
        p: &QpParams,
        mem: Option<Box<dyn RegionMemory>>,
    ) -> anyhow::Result<Engine<T>> {
        Engine::build(DeviceConfig::new(mac, ip), p, mem)
    }

    /// [`Engine::new`] as shard `shard` of a port split over several
    /// datapaths: its QP is numbered from the shard's share.
    pub fn sharded(
        mac: MacAddr,
        ip: IpAddr,
        p: &QpParams,
        shard: crate::wire::Shard,
    ) -> anyhow::Result<Engine<T>> {
        let mut cfg = DeviceConfig::new(mac, ip);
        cfg.shard = shard;
        Engine::build(cfg, p, None)
    }

    fn build(
        cfg: DeviceConfig,
        p: &QpParams,
        mem: Option<Box<dyn RegionMemory>>,
    ) -> anyhow::Result<Engine<T>> {
        anyhow::ensure!(
            p.sq_depth >= 1 && p.cq_mod >= 1 && p.cq_mod <= p.sq_depth,
            "the SQ depth must be at least 1 and cq_mod in 1..=depth"
        );
        let mut dev = Device::new(cfg)?;
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096)?;
        let spec = MrSpec::new(pd, 2 * SLOTS * BIG, Access::ALL);
        let mr = match mem {
            Some(m) => {
                anyhow::ensure!(
                    m.bytes().len() == spec.len,
                    "the region must be {} bytes",
                    spec.len
                );
                if m.lender().is_some() {
                    dev.set_zero_copy(Some(crate::transport::ZERO_COPY_MIN));
                }
                dev.reg_mr_memory(spec, m)?
            }
            None => dev.reg_mr(spec)?,
        };
        let caps = QpCaps {
            max_send_wr: p.sq_depth.max(4),
            max_recv_wr: 2 * RECVS as u32,
            config: Some(QpConfig {
                max_inflight: p.inflight,
                ack_req_every: QpConfig::default().ack_req_every.min(p.inflight),
                ..QpConfig::default()
            }),
            ..QpCaps::default()
        };
        let qp = dev.create_qp(pd, cq, cq, caps)?;
        Ok(Engine {
            dev,
            qp,
            cq,
            mr,
            wcs: Vec::with_capacity(64),
            pending: Burst::new(),
            spare: None,
        })
    }

    fn pump<B: Backend<Buf = T>>(&mut self, port: &mut B, now: Instant) {
        pump_with(&mut self.dev, port, now, &mut self.pending, &mut self.spare);
    }

    /// Polls the CQ into `self.wcs`.
    fn poll(&mut self) {
        self.wcs.clear();
        self.dev.poll_cq(self.cq, 64, &mut self.wcs);
    }

    fn src(&self, slot: usize) -> u64 {
        self.mr.addr + (slot * BIG) as u64
    }

    fn dst(&self, slot: usize) -> u64 {
        self.mr.addr + ((SLOTS + slot) * BIG) as u64
    }

    fn sge(&self, addr: u64, size: u32) -> Sge {
        Sge {
            addr,
            length: size,
            lkey: self.mr.lkey,
        }
    }

    /// The QP's counters (zero when the QP is gone).
    pub fn counters(&self) -> QpCounters {
        self.dev.qp_counters(self.qp).copied().unwrap_or_default()
    }

    fn region(&self) -> &[u8] {
        self.dev.mr(self.mr.lkey).unwrap_or(&[])
    }

    fn region_mut(&mut self) -> &mut [u8] {
        self.dev.mr_mut(self.mr.lkey).unwrap_or(&mut [])
    }

    /// Keeps `RECVS` receives posted, each into its own target slot.
    fn fill_recvs(&mut self, size: u32) -> anyhow::Result<()> {
        let mut k = self.dev.recv_queue_len(self.qp);
        while k < RECVS {
            let sge = self.sge(self.dst(k % SLOTS), size);
            self.dev.post_recv(
                self.qp,
                RecvWr {
                    wr_id: k as u64,
                    sges: smallvec::smallvec![sge],
                },
            )?;
            k += 1;
        }
        Ok(())
    }
}

/// Connects the QPs of `a` and `b` (RESET -> RTS both ways).
pub fn connect<T: FrameBuf>(a: &mut Engine<T>, b: &mut Engine<T>, mtu: Mtu) -> anyhow::Result<()> {
    let p = ConnectParams {
        mtu,
        ..ConnectParams::default()
    };
    let (mac_a, ip_a) = (a.dev.config().mac, a.dev.config().gids[0]);
    let (mac_b, ip_b) = (b.dev.config().mac, b.dev.config().gids[0]);
    connect_qp(&mut a.dev, a.qp, b.qp, mac_b, ip_b, &p, 0, 0)?;
    connect_qp(&mut b.dev, b.qp, a.qp, mac_a, ip_a, &p, 0, 0)?;
    Ok(())
}

/// One end's share of a workload: what its thread does once per poll.
pub trait Side<B: Backend> {
    /// One poll: pump `port`, post and reap what the workload needs.
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B);
    /// Whether the workload is over (asked of the driving side only).
    fn done(&self) -> bool {
        false
    }
}

/// Runs `a` (the side whose `done` ends the run) and `b` until `a` is done
/// or `limit` passes; returns the time it took. With [`Threads::Two`], `b`
/// runs in a thread of its own that first calls `register` (DPDK: register
/// the thread for its mempool cache) and keeps the value while it runs.
pub fn drive<B, SA, SB, C, G>(
    threads: Threads,
    clock: &C,
    (sa, pa): (&mut SA, &mut B),
    (sb, pb): (&mut SB, &mut B),
    limit: Duration,
    register: &(dyn Fn() -> G + Sync),
) -> Duration
where
    B: Backend + Send,
    SA: Side<B>,
    SB: Side<B> + Send,
    C: Clock + Sync,
{
    match threads {
        Threads::One => {
            let t0 = clock.now();
            let end = t0 + limit;
            while !sa.done() && clock.now() < end {
                sa.step(clock, pa);
                sb.step(clock, pb);
            }
            clock.now() - t0
        }
        Threads::Two => {
            let stop = AtomicBool::new(false);
            let started = AtomicBool::new(false);
            std::thread::scope(|s| {
                let t = s.spawn(|| {
                    let _reg = register();
                    started.store(true, Ordering::Release);
                    // Bounded by the flag and, in case, twice the limit.
                    let end = clock.now() + limit + limit;
                    while !stop.load(Ordering::Acquire) && clock.now() < end {
                        sb.step(clock, pb);
                    }
                });
                let wait = clock.now() + Duration::from_secs(5);
                while !started.load(Ordering::Acquire) && clock.now() < wait {
                    std::hint::spin_loop();
                }
                let t0 = clock.now();
                let end = t0 + limit;
                while !sa.done() && clock.now() < end {
                    sa.step(clock, pa);
                }
                let took = clock.now() - t0;
                stop.store(true, Ordering::Release);
                let _ = t.join();
                took
            })
        }
    }
}

/// The requester of the rate and goodput runs: keeps `depth` WRITEs of
/// `size` bytes outstanding until `count` have completed.
struct Writer<'e, T> {
    e: &'e mut Engine<T>,
    size: u32,
    count: u64,
    depth: u64,
    cq_mod: u64,
    remote: (u64, u32),
    posted: u64,
    completed: u64,
    failure: Option<String>,
}

impl<'e, T> Writer<'e, T> {
    /// `count` WRITEs of `size` bytes from `e` to `remote` (address,
    /// R_Key), outstanding and signaled as `p` says.
    fn new(e: &'e mut Engine<T>, size: u32, count: u64, p: &QpParams, remote: (u64, u32)) -> Self {
        Writer {
            e,
            size,
            count,
            depth: u64::from(p.sq_depth),
            cq_mod: u64::from(p.cq_mod),
            remote,
            posted: 0,
            completed: 0,
            failure: None,
        }
    }
}

impl<B: Backend> Side<B> for Writer<'_, B::Buf> {
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B) {
        let now = clock.now();
        while self.posted < self.count && self.posted - self.completed < self.depth {
            let n = self.posted;
            let slot = (n % SLOTS as u64) as usize;
            let wr = SendWr {
                wr_id: n,
                op: SendOp::Write {
                    remote_addr: self.remote.0 + (slot * BIG) as u64,
                    rkey: self.remote.1,
                },
                payload: Payload::sge(self.e.sge(self.e.src(slot), self.size)),
                signaled: (n + 1) % self.cq_mod == 0 || n + 1 == self.count,
                fence: false,
                solicited: false,
                ud: None,
            };
            if let Err(err) = self.e.dev.post_send(self.e.qp, wr) {
                self.failure = Some(format!("post_send of WRITE {n}: {err}"));
                return;
            }
            self.posted += 1;
        }
        self.e.pump(port, now);
        self.e.poll();
        for wc in &self.e.wcs {
            if wc.status != WcStatus::Success {
                self.failure.get_or_insert_with(|| {
                    format!("wr {}: {:?} {}", wc.wr_id, wc.opcode, wc.status)
                });
            } else if wc.opcode == WcOpcode::RdmaWrite {
                // A signaled completion retires every WRITE before it.
                self.completed = self.completed.max(wc.wr_id + 1);
            }
        }
    }

    fn done(&self) -> bool {
        self.completed >= self.count || self.failure.is_some()
    }
}

/// An end that only answers: pumps its device and checks completions.
struct Passive<'e, T> {
    e: &'e mut Engine<T>,
    failure: Option<String>,
}

impl<B: Backend> Side<B> for Passive<'_, B::Buf> {
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B) {
        self.e.pump(port, clock.now());
        self.e.poll();
        for wc in &self.e.wcs {
            if wc.status != WcStatus::Success {
                self.failure.get_or_insert_with(|| {
                    format!("wr {}: {:?} {}", wc.wr_id, wc.opcode, wc.status)
                });
            }
        }
    }
}

/// One end of the SEND ping-pong: the pinger sends, waits for the answer
/// and records the round trip; the ponger answers every SEND it receives.
struct PingPong<'e, T> {
    e: &'e mut Engine<T>,
    size: u32,
    pinger: bool,
    iters: u64,
    done: u64,
    in_flight: bool,
    t0: Instant,
    samples: Vec<u64>,
    failure: Option<String>,
}

impl<T: FrameBuf> PingPong<'_, T> {
    fn send(&mut self) {
        let sge = self.e.sge(self.e.src(0), self.size);
        let wr = SendWr::new(self.done, SendOp::Send, Payload::sge(sge));
        if let Err(err) = self.e.dev.post_send(self.e.qp, wr) {
            self.failure = Some(format!("post_send of SEND {}: {err}", self.done));
        }
    }
}

impl<B: Backend> Side<B> for PingPong<'_, B::Buf> {
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B) {
        let now = clock.now();
        if self.pinger && !self.in_flight && self.done < self.iters {
            self.t0 = now;
            self.in_flight = true;
            self.send();
        }
        self.e.pump(port, now);
        self.e.poll();
        let mut got = 0;
        for wc in &self.e.wcs {
            if wc.status != WcStatus::Success {
                self.failure.get_or_insert_with(|| {
                    format!("wr {}: {:?} {}", wc.wr_id, wc.opcode, wc.status)
                });
            } else if wc.opcode == WcOpcode::Recv {
                if wc.byte_len != self.size {
                    self.failure
                        .get_or_insert_with(|| format!("received {} B", wc.byte_len));
                }
                got += 1;
            }
        }
        if got == 0 {
            return;
        }
        if self.pinger {
            self.samples.push((clock.now() - self.t0).as_nanos());
            self.done += 1;
            self.in_flight = false;
        } else {
            for _ in 0..got {
                self.send();
                self.done += 1;
            }
        }
        if let Err(err) = self.e.fill_recvs(self.size) {
            self.failure
                .get_or_insert_with(|| format!("post_recv: {err}"));
        }
    }

    fn done(&self) -> bool {
        (self.pinger && self.done >= self.iters) || self.failure.is_some()
    }
}

/// The bare echo's source: frames of `frame_len` bytes carrying a sequence
/// number, at most `window` out, until `count` came back; with a window of
/// one it records each round trip.
struct EchoSource<T> {
    frame_len: usize,
    count: u64,
    window: u64,
    sent: u64,
    received: u64,
    out_of_order: u64,
    pending: Burst<T>,
    t0: Instant,
    samples: Vec<u64>,
    failure: Option<String>,
}

impl<B: Backend> Side<B> for EchoSource<B::Buf> {
    fn step<C: Clock>(&mut self, clock: &C, port: &mut B) {
        let now = clock.now();
        while !self.pending.is_full() {
            let queued = self.sent + self.pending.len() as u64;
            if queued >= self.count || queued - self.received >= self.window {
                break;
            }
            let Some(mut f) = port.alloc() else { break };
            match f.append(self.frame_len) {
                Some(d) => d[..8].copy_from_slice(&queued.to_be_bytes()),
                None => {
                    self.failure = Some(format!("no room for a {} B frame", self.frame_len));
                    return;
                }
            }
            self.pending.push(f);
            self.t0 = now;
        }
        if !self.pending.is_empty() {
            self.sent += port.tx_burst(&mut self.pending) as u64;
        }
        let mut rx: Burst<B::Buf> = Burst::new();
        if port.rx_burst(&mut rx) > 0 {
            let t = clock.now();
            for f in rx.iter() {
                let seq = f
                    .data()
                    .get(..8)
                    .map(|s| u64::from_be_bytes(s.try_into().unwrap_or_default()));
                if seq != Some(self.received) || f.len() != self.frame_len {
                    self.out_of_order += 1;
                }
                self.received += 1;
                if self.window == 1 {
                    self.samples.push((t - self.t0).as_nanos());
                }
            }
            port.free_burst(&mut rx);
        }
        if self.out_of_order > 0 {
            self.failure = Some(format!(
                "{} echoed frames out of order or changed",
                self.out_of_order
            ));
        }
    }

    fn done(&self) -> bool {
        self.received >= self.count || self.failure.is_some()
    }
}

/// The bare echo's other end: every frame straight back, no copy.
struct Reflector<T> {
    pending: Burst<T>,
}

impl<B: Backend> Side<B> for Reflector<B::Buf> {
    fn step<C: Clock>(&mut self, _: &C, port: &mut B) {
        if !self.pending.is_full() {
            port.rx_burst(&mut self.pending);
        }
        if !self.pending.is_empty() {
            port.tx_burst(&mut self.pending);
        }
    }
}

/// What one rate or goodput run measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rate {
    /// Messages (or echoed frames) completed.
    pub msgs: u64,
    /// Frames carried, both directions (requests and ACKs; for the echo,
    /// each frame out and back).
    pub frames: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Wall time of the run, in seconds.
    pub secs: f64,
    /// Request packets sent again (go-back-N).
    pub retransmitted: u64,
    /// Request packets whose payload left from the region in place
    /// (zero-copy send).
    pub lent: u64,
    /// Whether the run finished its count (false: the time limit cut it).
    pub complete: bool,
}

impl Rate {
    /// Messages per second.
    pub fn msgs_per_s(&self) -> f64 {
        self.msgs as f64 / self.secs.max(1e-9)
    }
    /// Frames per second, both directions.
    pub fn frames_per_s(&self) -> f64 {
        self.frames as f64 / self.secs.max(1e-9)
    }
    /// Payload goodput, in Gbit/s (10^9 bits per second).
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs.max(1e-9) / 1e9
    }
}

/// The length of the frame that carries a `size`-byte RDMA WRITE_ONLY over
/// IPv4 (no VLAN), ICRC included: what the bare echo bounces.
pub fn write_frame_len(size: usize) -> usize {
    use crate::wire::opcode::Op;
    use crate::wire::{BthRepr, Ecn, FrameRepr, IpRepr, Opcode, Psn};
    let ip = core::net::Ipv4Addr::UNSPECIFIED;
    let bth = BthRepr::new(Opcode::rc(Op::RdmaWriteOnly), 0, Psn::new(0));
    FrameRepr::roce(
        MacAddr([0; 6]),
        MacAddr([0; 6]),
        IpRepr::v4(ip, ip, 0, Ecn::NotEct),
        0,
        bth,
    )
    .frame_len(size)
}

/// Before a rate run: `a`'s sources get a pattern of this round, `b`'s
/// targets are cleared, so that what lands is this run's.
fn prepare<T: FrameBuf>(a: &mut Engine<T>, b: &mut Engine<T>, round: u64) {
    for (i, x) in a.region_mut()[..SLOTS * BIG].iter_mut().enumerate() {
        *x = (i as u64).wrapping_mul(31).wrapping_add(round * 7 + 1) as u8;
    }
    b.region_mut()[SLOTS * BIG..].fill(0);
}

/// After a run: every target slot of the first `n` WRITEs holds its source.
fn verify<T: FrameBuf>(a: &Engine<T>, b: &Engine<T>, size: usize, n: u64) -> Option<String> {
    let (ra, rb) = (a.region(), b.region());
    for slot in 0..(n as usize).min(SLOTS) {
        let src = &ra[slot * BIG..][..size];
        let dst = &rb[(SLOTS + slot) * BIG..][..size];
        if src != dst {
            return Some(format!("WRITE slot {slot}: the bytes at the target differ"));
        }
    }
    None
}

/// Drives every end of `ends` (an engine and its port), one thread, until
/// none has send work outstanding (or a second passed): leaves the QPs
/// quiet between runs.
fn settle<B: Backend, C: Clock>(
    clock: &C,
    ends: &mut [(&mut Engine<B::Buf>, &mut B)],
) -> anyhow::Result<()> {
    let end = clock.now() + Duration::from_secs(1);
    loop {
        let quiet = ends
            .iter()
            .all(|(e, _)| e.dev.send_queue_len(e.qp) == 0 && e.pending.is_empty());
        if quiet {
            return Ok(());
        }
        anyhow::ensure!(clock.now() < end, "the QPs did not settle within 1 s");
        for (e, p) in ends.iter_mut() {
            let mut s = Passive { e, failure: None };
            s.step(clock, &mut **p);
            if let Some(f) = s.failure {
                anyhow::bail!("{f}");
            }
        }
    }
}

/// What a workload needs besides the two ends.
pub struct Run<'c, C, G> {
    /// How the two ends are driven.
    pub threads: Threads,
    /// The clock runs are timed on.
    pub clock: &'c C,
    /// The time limit of each run.
    pub limit: Duration,
    /// What the second end's thread calls first (see [`drive`]).
    pub register: &'c (dyn Fn() -> G + Sync),
}

impl<C: Clock + Sync, G> Run<'_, C, G> {
    /// `count` WRITEs of `size` bytes from `a` to `b`, `p.sq_depth`
    /// outstanding; the bytes checked where they land. `round` varies the
    /// data.
    pub fn write_rate<B: Backend + Send>(
        &self,
        (a, pa): (&mut Engine<B::Buf>, &mut B),
        (b, pb): (&mut Engine<B::Buf>, &mut B),
        size: u32,
        count: u64,
        p: &QpParams,
        round: u64,
    ) -> anyhow::Result<Rate>
    where
        B::Buf: Send,
    {
        anyhow::ensure!(
            size >= 1 && size as usize <= BIG && count >= 1,
            "WRITEs of 1..={BIG} B, at least one"
        );
        prepare(a, b, round);
        let (ca, cb) = (a.counters(), b.counters());
        let remote = (b.dst(0), b.mr.rkey);
        let mut w = Writer::new(a, size, count, p, remote);
        let mut s = Passive {
            e: b,
            failure: None,
        };
        let took = drive(
            self.threads,
            self.clock,
            (&mut w, pa),
            (&mut s, pb),
            self.limit,
            self.register,
        );
        if let Some(f) = w.failure.or(s.failure) {
            anyhow::bail!("{size} B WRITEs: {f}");
        }
        let completed = w.completed;
        let (da, db) = (a.counters(), b.counters());
        settle(self.clock, &mut [(a, pa), (b, pb)])?;
        anyhow::ensure!(completed > 0, "{size} B WRITEs: none completed in {took}");
        if let Some(f) = verify(a, b, size as usize, completed) {
            anyhow::bail!("{size} B WRITEs: {f}");
        }
        Ok(Rate {
            msgs: completed,
            frames: (da.sent_pkts - ca.sent_pkts) + (db.sent_pkts - cb.sent_pkts),
            bytes: completed * u64::from(size),
            secs: took.as_secs_f64(),
            retransmitted: da.retransmitted_pkts - ca.retransmitted_pkts,
            lent: da.lent_pkts - ca.lent_pkts,
            complete: completed >= count,
        })
    }

    /// `iters` round trips of a `size`-byte SEND from `a` answered by one
    /// from `b`; returns each round trip in ns (and whether all ran).
    pub fn send_lat<B: Backend + Send>(
        &self,
        (a, pa): (&mut Engine<B::Buf>, &mut B),
        (b, pb): (&mut Engine<B::Buf>, &mut B),
        size: u32,
        iters: u64,
    ) -> anyhow::Result<(Vec<u64>, bool)>
    where
        B::Buf: Send,
    {
        anyhow::ensure!(size as usize <= BIG && iters >= 1, "bad SEND size or count");
        a.fill_recvs(size)?;
        b.fill_recvs(size)?;
        let mut ping = PingPong {
            e: a,
            size,
            pinger: true,
            iters,
            done: 0,
            in_flight: false,
            t0: Instant::ZERO,
            samples: Vec::with_capacity(iters as usize),
            failure: None,
        };
        let mut pong = PingPong {
            e: b,
            size,
            pinger: false,
            iters,
            done: 0,
            in_flight: false,
            t0: Instant::ZERO,
            samples: Vec::new(),
            failure: None,
        };
        drive(
            self.threads,
            self.clock,
            (&mut ping, pa),
            (&mut pong, pb),
            self.limit,
            self.register,
        );
        if let Some(f) = ping.failure.or(pong.failure) {
            anyhow::bail!("{size} B SEND ping-pong: {f}");
        }
        let samples = ping.samples;
        settle(self.clock, &mut [(a, pa), (b, pb)])?;
        anyhow::ensure!(
            !samples.is_empty(),
            "{size} B SEND ping-pong: no round trip"
        );
        let all = samples.len() as u64 >= iters;
        Ok((samples, all))
    }

    /// `count` frames of `frame_len` bytes from `pa` echoed back by `pb`,
    /// `window` out at a time.
    pub fn echo_rate<B: Backend + Send>(
        &self,
        pa: &mut B,
        pb: &mut B,
        frame_len: usize,
        count: u64,
        window: u64,
    ) -> anyhow::Result<Rate>
    where
        B::Buf: Send,
    {
        let (received, _, took) = self.echo(pa, pb, frame_len, count, window)?;
        Ok(Rate {
            msgs: received,
            frames: 2 * received,
            bytes: received * frame_len as u64,
            secs: took.as_secs_f64(),
            retransmitted: 0,
            lent: 0,
            complete: received >= count,
        })
    }

    /// `iters` round trips of one frame; each in ns.
    pub fn echo_rtt<B: Backend + Send>(
        &self,
        pa: &mut B,
        pb: &mut B,
        frame_len: usize,
        iters: u64,
    ) -> anyhow::Result<(Vec<u64>, bool)>
    where
        B::Buf: Send,
    {
        let (received, samples, _) = self.echo(pa, pb, frame_len, iters, 1)?;
        Ok((samples, received >= iters))
    }

    fn echo<B: Backend + Send>(
        &self,
        pa: &mut B,
        pb: &mut B,
        frame_len: usize,
        count: u64,
        window: u64,
    ) -> anyhow::Result<(u64, Vec<u64>, Duration)>
    where
        B::Buf: Send,
    {
        anyhow::ensure!(
            frame_len >= 8 && count >= 1 && window >= 1,
            "echo: frames of at least 8 B"
        );
        let mut src = EchoSource {
            frame_len,
            count,
            window,
            sent: 0,
            received: 0,
            out_of_order: 0,
            pending: Burst::new(),
            t0: Instant::ZERO,
            samples: Vec::with_capacity(if window == 1 { count as usize } else { 0 }),
            failure: None,
        };
        let mut refl = Reflector {
            pending: Burst::new(),
        };
        let took = drive(
            self.threads,
            self.clock,
            (&mut src, &mut *pa),
            (&mut refl, &mut *pb),
            self.limit,
            self.register,
        );
        let received = src.received;
        // Whatever is still on its way is received and dropped here.
        let end = self.clock.now() + Duration::from_millis(200);
        let mut rx = Burst::new();
        while (src.received < src.sent || !refl.pending.is_empty()) && self.clock.now() < end {
            refl.step(self.clock, pb);
            let n = pa.rx_burst(&mut rx) as u64;
            src.received += n;
            pa.free_burst(&mut rx);
        }
        pa.free_burst(&mut src.pending);
        pb.free_burst(&mut refl.pending);
        if let Some(f) = src.failure.take() {
            anyhow::bail!("echo of {frame_len} B frames: {f}");
        }
        anyhow::ensure!(received > 0, "echo: no frame came back in {took}");
        Ok((received, src.samples, took))
    }
}

/// What the goodput ceiling's core does with each [`CHUNK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingWork {
    /// Copies it, then computes the CRC-32 of the copy: the ceiling (e).
    CopyCrc,
    /// Copies it only (e,m).
    Copy,
    /// Computes the CRC-32 of the source only (e,c).
    Crc,
}

/// One core's copy + CRC-32 rate (or either alone, as `work` says):
/// `count` messages of `msg` bytes copied from `src` to `dst` (slot by
/// slot, [`SLOTS`] slots each) in [`CHUNK`] pieces, each piece's CRC-32
/// computed after its copy. The copy is the transport's own
/// ([`copy_payload`]).
pub fn copy_crc<C: Clock>(
    clock: &C,
    src: &[u8],
    dst: &mut [u8],
    msg: usize,
    count: u64,
    limit: Duration,
    work: CeilingWork,
) -> Rate {
    let slots = (src.len().min(dst.len()) / msg).max(1);
    let mut acc = 0u32;
    let t0 = clock.now();
    let end = t0 + limit;
    let mut n = 0u64;
    while n < count && clock.now() < end {
        let slot = (n as usize % slots) * msg;
        let (s, d) = (&src[slot..slot + msg], &mut dst[slot..slot + msg]);
        for (sc, dc) in s.chunks(CHUNK).zip(d.chunks_mut(CHUNK)) {
            match work {
                CeilingWork::CopyCrc => {
                    copy_payload(dc, sc);
                    acc ^= crc32fast::hash(dc);
                }
                CeilingWork::Copy => copy_payload(dc, sc),
                CeilingWork::Crc => acc ^= crc32fast::hash(sc),
            }
        }
        // The copy alone (e,m) is read by nothing: keep it from being
        // optimised away.
        std::hint::black_box(&mut *d);
        n += 1;
    }
    let took = clock.now() - t0;
    std::hint::black_box(acc);
    Rate {
        msgs: n,
        frames: 0,
        bytes: n * msg as u64,
        secs: took.as_secs_f64(),
        retransmitted: 0,
        lent: 0,
        complete: n >= count,
    }
}

/// The goodput ceiling (e) and its two parts alone (e,m and e,c), each
/// over `count` messages of [`BIG`] bytes: the faster of two runs of
/// each, the three kinds taking turns, after one untimed pass of copy and
/// CRC over every slot. A ceiling is what the core can do at best, and a
/// short run is easily disturbed: a fresh `vec!` of zeros is mapped
/// lazily, so the first pass also times the kernel faulting `dst`'s pages
/// in. With 200 messages (three passes over the slots) and no warm pass,
/// the ceiling read 37 Gbit/s where its two parts alone allowed about
/// 140, and every goodput ratio read as met.
pub fn ceilings<C: Clock>(
    clock: &C,
    src: &[u8],
    dst: &mut [u8],
    count: u64,
    limit: Duration,
) -> [Rate; 3] {
    let kinds = [CeilingWork::CopyCrc, CeilingWork::Copy, CeilingWork::Crc];
    copy_crc(clock, src, dst, BIG, SLOTS as u64, limit, kinds[0]);
    let first = kinds.map(|w| copy_crc(clock, src, dst, BIG, count, limit, w));
    let second = kinds.map(|w| copy_crc(clock, src, dst, BIG, count, limit, w));
    let mut best = first;
    for (b, r) in best.iter_mut().zip(second) {
        if r.gbit_per_s() > b.gbit_per_s() {
            *b = r;
        }
    }
    best
}

/// What to run (the command line's options).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct E2eOpts {
    /// Measured rounds, after one warm-up round at a tenth of the counts.
    pub rounds: usize,
    /// 64 B WRITEs per rate run (and echoed frames per echo run).
    pub msgs: u64,
    /// 64 KiB WRITEs per goodput run (and messages of the copy+CRC run).
    pub big_msgs: u64,
    /// Round trips per latency run.
    pub lat_iters: u64,
    /// The time limit of each run, in seconds.
    pub secs: f64,
    /// The QP settings of every engine.
    pub qp: QpParams,
    /// How the two ends are driven.
    pub threads: Threads,
    /// Kernel socket buffer size asked for the UDP backend (bytes).
    pub socket_buf: usize,
    /// The QP sweep runs the counts of [`QP_COUNTS`] up to this one (0:
    /// no sweep).
    pub max_qps: usize,
    /// The cores sweep splits each engine over 1 to this many datapath
    /// lcores (0: no sweep; more than the CPUs online share them).
    pub max_lcores: usize,
}

#[cfg(feature = "dpdk")]
pub use dpdk_run::run;

#[cfg(feature = "dpdk")]
mod dpdk_run {
    use super::*;
    use crate::backend::udp::UdpPort;
    use crate::config::Config;
    use crate::dpdk::{self, PortQueue, TscClock};
    use crate::tools::port::ports::Ports;
    use anyhow::Context;

    /// `ferroce bench e2e`: opens ports `a` and `b` of `cfg` (a ring pair),
    /// makes two engines on them and two on a UDP socket pair, and runs
    /// every measurement `opts.rounds` times, alternated, after a warm-up
    /// round at a tenth of the counts.
    pub fn run(cfg: &Config, opts: &E2eOpts) -> anyhow::Result<E2eReport> {
        anyhow::ensure!(opts.rounds >= 1, "--rounds must be at least 1");
        anyhow::ensure!(
            opts.msgs >= 1 && opts.big_msgs >= 1 && opts.lat_iters >= 1,
            "--msgs, --big-msgs and --lat-iters must be at least 1"
        );
        anyhow::ensure!(
            opts.secs > 0.0 && opts.secs <= 600.0,
            "--secs must be in (0, 600]"
        );
        let dp = Ports::open(cfg, &["a", "b"]).context(
            "bench e2e needs ports \"a\" and \"b\" (a ring pair, as in configs/demo.toml)",
        )?;
        let (ca, pa) = dp.port("a")?;
        let (cb, pb) = dp.port("b")?;
        let (mac_a, mac_b) = (pa.mac()?, pb.mac()?);
        let (ip_a, ip_b): (IpAddr, IpAddr) = (ca.ip.into(), cb.ip.into());
        let clock = TscClock::new(&dp.eal);
        let _reg = dpdk::lcore::register_current_thread(&dp.eal)?;
        let eal = dp.eal.clone();
        // The EAL pinned this thread to its lcore, and threads it starts
        // inherit that: the second end's thread goes to another CPU.
        let other = dpdk::lcore::other_cpu();
        if opts.threads == Threads::Two && other.is_none() {
            log::warn!("one CPU online: both threads of --threads 2 share it");
        }
        let register = move || {
            if let Some(id) = other {
                if let Err(e) = dpdk::lcore::pin_current_thread(id) {
                    log::warn!("could not move the second thread to CPU {id}: {e}");
                }
            }
            dpdk::lcore::register_current_thread(&eal).ok()
        };
        let mut qa: PortQueue = dp.queue("a")?;
        let mut qb: PortQueue = dp.queue("b")?;
        let (mut ua, mut ub) = UdpPort::pair(crate::host::pump::MAX_FRAME, Some(opts.socket_buf))
            .context("opening two UDP sockets on 127.0.0.1")?;
        let udp_socket_buffers = ua.socket_buffers()?;
        let p = &opts.qp;
        let mut ea = Engine::new(mac_a, ip_a, p)?;
        let mut eb = Engine::new(mac_b, ip_b, p)?;
        connect(&mut ea, &mut eb, p.mtu)?;
        let mut xa = Engine::new(mac_a, ip_a, p)?;
        let mut xb = Engine::new(mac_b, ip_b, p)?;
        connect(&mut xa, &mut xb, p.mtu)?;
        // b,z: the same goodput run, the writer sending from its region
        // in place (zero-copy send).
        let lending = crate::tools::port::memory::lending_region(2 * SLOTS * BIG)
            .map_err(|e| anyhow::anyhow!("a zero-copy region: {e}"))?;
        let mut za = Engine::with_memory(mac_a, ip_a, p, Some(lending))?;
        let mut zb = Engine::new(mac_b, ip_b, p)?;
        connect(&mut za, &mut zb, p.mtu)?;
        let src: Vec<u8> = (0..SLOTS * BIG).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; SLOTS * BIG];
        let frame_len = write_frame_len(64);
        let limit = Duration::from_nanos((opts.secs * 1e9) as u64);
        let run = Run {
            threads: opts.threads,
            clock: &clock,
            limit,
            register: &register,
        };
        let mut rep = E2eReport {
            opts: *opts,
            frame_len_64: frame_len,
            hugepages: dp.eal.hugepages(),
            udp_socket_buffers,
            rounds: Vec::with_capacity(opts.rounds),
            send_lat: Latency::default(),
            echo_rtt: Latency::default(),
            udp_send_lat: Latency::default(),
            ratios: Vec::new(),
            cut_short: Vec::new(),
            qp_sweep: Vec::new(),
            cores: Vec::new(),
        };
        let (mut lat, mut rtt, mut ulat) = (Vec::new(), Vec::new(), Vec::new());
        let window = u64::from(p.sq_depth);
        for round in 0..=opts.rounds {
            // Round 0 warms every path up and is not recorded.
            let k = if round == 0 { 10 } else { 1 };
            let (msgs, big, iters) = (
                (opts.msgs / k).max(1),
                (opts.big_msgs / k).max(1),
                (opts.lat_iters / k).max(1),
            );
            let r = round as u64;
            let mut rd = Round {
                engine_64: run.write_rate(
                    (&mut ea, &mut qa),
                    (&mut eb, &mut qb),
                    64,
                    msgs,
                    p,
                    r,
                )?,
                ..Round::default()
            };
            rd.udp_64 = run.write_rate((&mut xa, &mut ua), (&mut xb, &mut ub), 64, msgs, p, r)?;
            rd.echo = run.echo_rate(&mut qa, &mut qb, frame_len, msgs, window)?;
            [rd.copy_crc, rd.copy, rd.crc] = ceilings(&clock, &src, &mut dst, big, limit);
            rd.engine_64k = run.write_rate(
                (&mut ea, &mut qa),
                (&mut eb, &mut qb),
                BIG as u32,
                big,
                p,
                r,
            )?;
            rd.engine_64k_zc = run.write_rate(
                (&mut za, &mut qa),
                (&mut zb, &mut qb),
                BIG as u32,
                big,
                p,
                r,
            )?;
            rd.udp_64k = run.write_rate(
                (&mut xa, &mut ua),
                (&mut xb, &mut ub),
                BIG as u32,
                big,
                p,
                r,
            )?;
            let (l, all_l) = run.send_lat((&mut ea, &mut qa), (&mut eb, &mut qb), 64, iters)?;
            let (e, all_e) = run.echo_rtt(&mut qa, &mut qb, frame_len, iters)?;
            let (u, all_u) = run.send_lat((&mut xa, &mut ua), (&mut xb, &mut ub), 64, iters)?;
            if round == 0 {
                continue;
            }
            lat.extend(l);
            rtt.extend(e);
            ulat.extend(u);
            rep.note_cut_short(round, &rd, [all_l, all_e, all_u]);
            rep.rounds.push(rd);
        }
        rep.send_lat = Latency::of(lat);
        rep.echo_rtt = Latency::of(rtt);
        rep.udp_send_lat = Latency::of(ulat);
        // The engines' buffers go back to the pool before the sweep's
        // engines take the ports.
        drop((ea, eb, za, zb));
        let (a, b) = ((mac_a, ip_a), (mac_b, ip_b));
        rep.qp_sweep = run.qp_sweep(&mut qa, &mut qb, a, b, p, opts.max_qps, opts.msgs)?;
        rep.cores = cores_sweep(&run, &dp, (a, b), opts)?;
        rep.summarise();
        Ok(rep)
    }

    /// The cores sweep on ring pairs of its own, one per split: 1 to
    /// `max_lcores` queue pairs aligned, and the most crossed. Lane `i`'s
    /// thread is pinned to the `i`-th online CPU counting from this
    /// thread's, and registered with the EAL.
    fn cores_sweep<C: Clock + Sync, G>(
        run: &Run<'_, C, G>,
        dp: &Ports,
        (a, b): ((MacAddr, IpAddr), (MacAddr, IpAddr)),
        opts: &E2eOpts,
    ) -> anyhow::Result<Vec<CorePoint>> {
        let max = opts.max_lcores;
        if max == 0 {
            return Ok(Vec::new());
        }
        anyhow::ensure!(
            max <= crate::wire::Shard::MAX as usize,
            "--max-lcores is at most {}",
            crate::wire::Shard::MAX
        );
        let (_, port) = dp.port("a")?;
        let mut plan: Vec<(usize, bool)> = (1..=max).map(|k| (k, false)).collect();
        if max > 1 {
            plan.push((max, true));
        }
        let mut splits = Vec::with_capacity(plan.len());
        for (k, crossed) in plan {
            let mut o = port.options().clone();
            (o.rx_queues, o.tx_queues) = (k as u16, k as u16);
            let name = format!("cores{k}{}", if crossed { "x" } else { "" });
            let (x, y) = dpdk::Port::ring_pair(&dp.eal, &name, port.mempool(), &o)?;
            let qx = (0..k as u16)
                .map(|q| x.queue(dpdk::QueueId(q)))
                .collect::<Result<_, _>>()?;
            let qy = (0..k as u16)
                .map(|q| y.queue(dpdk::QueueId(q)))
                .collect::<Result<_, _>>()?;
            splits.push(Split::new((qx, a), (qy, b), &opts.qp, crossed)?);
        }
        let here = core_affinity::get_core_ids()
            .and_then(|v| v.first().map(|c| c.id))
            .unwrap_or(0);
        let mut cpus = dpdk::lcore::online_cpus();
        if let Some(at) = cpus.iter().position(|&c| c == here) {
            cpus.rotate_left(at);
        }
        if cpus.len() < max {
            log::warn!(
                "{} CPUs online: the cores sweep's {max} lcores share them",
                cpus.len()
            );
        }
        let eal = dp.eal.clone();
        let pin = move |lane: usize| {
            if let Some(&cpu) = cpus.get(lane % cpus.len().max(1)) {
                if let Err(e) = dpdk::lcore::pin_current_thread(cpu) {
                    log::warn!("could not pin lane {lane} to CPU {cpu}: {e}");
                }
            }
            dpdk::lcore::register_current_thread(&eal).ok()
        };
        run.cores_sweep(&mut splits, opts.rounds, opts.msgs, &opts.qp, &pin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback::{self, LoopbackPort};
    use crate::backend::udp::UdpPort;
    use crate::backend::WallClock;
    use crate::sim::stats::percentile;

    fn params() -> QpParams {
        QpParams {
            sq_depth: 64,
            cq_mod: 16,
            inflight: 128,
            mtu: Mtu::Mtu4096,
        }
    }

    fn engines<T: FrameBuf>() -> (Engine<T>, Engine<T>) {
        let p = params();
        let mut a = Engine::new(
            MacAddr([2, 0, 0, 0, 0, 1]),
            "198.18.0.1".parse().unwrap(),
            &p,
        )
        .unwrap();
        let mut b = Engine::new(
            MacAddr([2, 0, 0, 0, 0, 2]),
            "198.18.0.2".parse().unwrap(),
            &p,
        )
        .unwrap();
        connect(&mut a, &mut b, p.mtu).unwrap();
        (a, b)
    }

    fn run_all<B: Backend + Send>(pa: &mut B, pb: &mut B, threads: Threads)
    where
        B::Buf: Send,
    {
        let clock = WallClock::new();
        let run = Run {
            threads,
            clock: &clock,
            limit: Duration::from_secs(10),
            register: &|| (),
        };
        let (mut a, mut b) = engines::<B::Buf>();
        let p = params();
        for round in 1..=2 {
            let r = run
                .write_rate((&mut a, pa), (&mut b, pb), 64, 1000, &p, round)
                .unwrap();
            assert!(r.complete && r.msgs == 1000, "{r:?}");
            // Each WRITE is one packet; ACKs come back every 64 packets at
            // least. The wall clock drives the ACK timer (67 ms): a thread
            // kept off the CPU that long (tests side by side on few
            // cores) sees the window sent again, go-back-N; those frames
            // are counted apart.
            let first = r.frames - r.retransmitted;
            assert!(first > 1000 && first < 1100, "{r:?}");
            let r = run
                .write_rate((&mut a, pa), (&mut b, pb), BIG as u32, 20, &p, round)
                .unwrap();
            assert!(r.complete && r.bytes == 20 * BIG as u64, "{r:?}");
            let (s, all) = run.send_lat((&mut a, pa), (&mut b, pb), 64, 200).unwrap();
            assert!(all && s.len() == 200);
        }
        let e = run
            .echo_rate(pa, pb, write_frame_len(64), 5000, 64)
            .unwrap();
        assert!(e.complete && e.frames == 10_000, "{e:?}");
        let (s, all) = run.echo_rtt(pa, pb, write_frame_len(64), 100).unwrap();
        assert!(all && s.len() == 100);
    }

    #[test]
    fn every_workload_runs_over_a_loopback_pair_in_one_and_two_threads() {
        let _one = crate::tools::spinning_pair();
        let (mut pa, mut pb): (LoopbackPort, LoopbackPort) = loopback::pair(1024, 4352);
        run_all(&mut pa, &mut pb, Threads::One);
        run_all(&mut pa, &mut pb, Threads::Two);
    }

    #[test]
    fn every_workload_runs_over_udp_sockets() {
        let (mut pa, mut pb) = UdpPort::pair(4224, Some(4 << 20)).unwrap();
        run_all(&mut pa, &mut pb, Threads::One);
        assert_eq!(pa.stats().tx_errors + pb.stats().tx_errors, 0);
    }

    #[test]
    fn the_echo_frame_is_the_size_of_a_64_byte_write() {
        // A 64 B WRITE_ONLY over IPv4: 14 + 20 + 8 + 12 (BTH) + 16 (RETH)
        // + 64 + 4 (ICRC).
        assert_eq!(write_frame_len(64), 138);
        // And it is what the engine sends: the first frame of a WRITE.
        let (mut pa, mut pb) = loopback::pair(64, 4352);
        let (mut a, b) = engines::<loopback::VecBuf>();
        let sge = a.sge(a.src(0), 64);
        let op = SendOp::Write {
            remote_addr: b.dst(0),
            rkey: b.mr.rkey,
        };
        a.dev
            .post_send(a.qp, SendWr::new(1, op, Payload::sge(sge)))
            .unwrap();
        a.pump(&mut pa, Instant::ZERO);
        let mut rx = Burst::new();
        assert_eq!(pb.rx_burst(&mut rx), 1);
        assert_eq!(rx[0].len(), 138);
    }

    #[test]
    fn a_failed_completion_is_reported() {
        let (mut pa, mut pb) = loopback::pair(1024, 4352);
        let (mut a, mut b) = engines::<loopback::VecBuf>();
        // b's region no longer answers to its R_Key: the WRITEs fail with a
        // remote access error.
        b.mr.rkey ^= 0x55;
        let clock = WallClock::new();
        let run = Run {
            threads: Threads::One,
            clock: &clock,
            limit: Duration::from_secs(5),
            register: &|| (),
        };
        let p = params();
        let w = run.write_rate((&mut a, &mut pa), (&mut b, &mut pb), 64, 100, &p, 1);
        let e = w.unwrap_err().to_string();
        assert!(e.contains("remote access error"), "{e}");
    }

    #[test]
    fn copy_crc_counts_bytes_and_percentiles_are_nearest_rank() {
        let src = vec![1u8; 4 * BIG];
        let mut dst = vec![0u8; 4 * BIG];
        for work in [CeilingWork::Crc, CeilingWork::Copy, CeilingWork::CopyCrc] {
            let r = copy_crc(
                &WallClock::new(),
                &src,
                &mut dst,
                BIG,
                10,
                Duration::from_secs(5),
                work,
            );
            assert!(r.complete && r.bytes == 10 * BIG as u64);
            // The CRC alone writes nothing; a copy writes every slot used.
            let copied = if work == CeilingWork::Crc { 0 } else { 4 * BIG };
            assert!(dst[..copied].iter().all(|&b| b == 1));
            assert!(dst[copied..].iter().all(|&b| b == 0));
        }
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
