//! `ferroce write-bw | read-bw | send-bw | atomic-bw | write-lat |
//! read-lat | send-lat`: perftest's `ib_*` tools on a ferroce port, the
//! same on the wire and in perftest's default TCP exchange (not RDMA-CM),
//! so that either end can be perftest.
//!
//! What perftest does, and so what these do (the source is linux-rdma
//! perftest, `src/perftest_communication.c`, `perftest_resources.c` and
//! each tool's `main`; the exchange of [`crate::tools::oob::perftest`]):
//! - setup: version (we announce 6.06), page size and cache line (each
//!   side takes the larger), MTU (the smaller), then one keys message per
//!   QP and barriers of QP 0's keys, in the order of each tool's `main`
//!   (`Test::sequence`);
//! - one region for all QPs, `2 x N` slots of `max(size, page)` bytes:
//!   slot `i` is QP `i`'s local buffer, slot `N + i` the one it publishes
//!   (its `vaddr`) for the peer's WRITEs, READs and atomics;
//! - bandwidth: the client keeps `tx_depth` work requests outstanding per
//!   QP, signals one in `cq_mod`, and cycles its remote address over the
//!   slot when messages are at most half a page; the server of write, read
//!   and atomic tests is passive (it answers, it posts nothing); the
//!   client's results go to the server, which prints them;
//! - latency: write-lat is a ping-pong of WRITEs in which the listener
//!   writes first and each side watches the last byte of its slot for the
//!   sequence number; send-lat a ping-pong of SENDs the client starts;
//!   read-lat one READ at a time from the client.
//!
//! QP attributes as perftest sets them: access by verb, `min_rnr_timer`
//! 12, timeout 14 (`-u`), `retry_cnt` 7, `rnr_retry` 7, hop limit 255,
//! `max_dest_rd_atomic` = our `out_reads`, `max_rd_atomic` = the peer's.

pub mod channel;
pub mod report;
mod run;

use crate::backend::Backend;
use crate::time::Duration;
use crate::tools::exchange::{random_psn, Channel};
use crate::tools::oob::perftest::Keys;
use crate::tools::pingpong::Role;
use crate::transport::{Access, Mtu, QpCounters, Recovery};
use crate::verbs::{Context, Mr, Pd, Qp};
use anyhow::{bail, ensure, Context as _, Result};
use channel::Agreed;
use report::{BwReport, LatReport};
use std::io::Write;
use std::net::SocketAddr;

/// The seven tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
pub enum Test {
    /// `ib_write_bw`: RDMA WRITE bandwidth.
    WriteBw,
    /// `ib_read_bw`: RDMA READ bandwidth.
    ReadBw,
    /// `ib_send_bw`: SEND bandwidth.
    SendBw,
    /// `ib_atomic_bw`: FETCH_ADD or CMP_SWAP rate.
    AtomicBw,
    /// `ib_write_lat`: RDMA WRITE ping-pong latency.
    WriteLat,
    /// `ib_read_lat`: RDMA READ latency, one at a time.
    ReadLat,
    /// `ib_send_lat`: SEND ping-pong latency.
    SendLat,
}

/// The operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// SEND (with receives posted at the peer).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_ADD or CMP_SWAP.
    Atomic,
}

/// The atomic of atomic-bw (`-A`; its values are listed without help).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AtomicKind {
    /// Fetch and add (`FETCH_AND_ADD`).
    #[value(name = "FETCH_AND_ADD", help = None::<&str>)]
    FetchAndAdd,
    /// Compare and swap (`CMP_AND_SWAP`).
    #[value(name = "CMP_AND_SWAP", help = None::<&str>)]
    CmpAndSwap,
}

/// One step of the exchange before or after the data phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// One keys message per QP (each QP's own).
    KeysPerQp,
    /// Bring the QPs to RTS towards the keys just received.
    Connect,
    /// Post the receives of a SEND test.
    PostRecvs,
    /// One keys message of QP 0 (a barrier).
    Barrier,
}

impl Test {
    /// The seven tools, bandwidth tests first.
    pub const ALL: [Test; 7] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::AtomicBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
    ];

    /// The operation the test measures.
    pub fn verb(self) -> Verb {
        match self {
            Test::WriteBw | Test::WriteLat => Verb::Write,
            Test::ReadBw | Test::ReadLat => Verb::Read,
            Test::SendBw | Test::SendLat => Verb::Send,
            Test::AtomicBw => Verb::Atomic,
        }
    }

    /// Whether it is a bandwidth test (else a latency test).
    pub fn is_bw(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw
        )
    }

    /// The subcommand's name (`ib_` + this with `_` is perftest's).
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write-bw",
            Test::ReadBw => "read-bw",
            Test::SendBw => "send-bw",
            Test::AtomicBw => "atomic-bw",
            Test::WriteLat => "write-lat",
            Test::ReadLat => "read-lat",
            Test::SendLat => "send-lat",
        }
    }

    /// The exchange before the data phase (each tool's `main`).
    fn sequence(self) -> &'static [Step] {
        use Step::*;
        match self {
            Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
                &[KeysPerQp, Connect, KeysPerQp, Barrier]
            }
            Test::SendBw => &[KeysPerQp, Connect, Barrier, KeysPerQp, PostRecvs, Barrier],
            Test::WriteLat | Test::ReadLat => &[Barrier, KeysPerQp, Connect, KeysPerQp, Barrier],
            Test::SendLat => &[KeysPerQp, Connect, Barrier, KeysPerQp, PostRecvs, Barrier],
        }
    }
}

/// The options perftest's tools share (`perftest_parameters.c`), with its
/// defaults where `None`.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Which tool.
    pub test: Test,
    /// `-s`: bytes per message (default 65536 for bandwidth, 2 for
    /// latency, 8 for atomics).
    pub size: Option<u64>,
    /// `-n`: messages per QP (default 5000 for write-bw, else 1000).
    pub iters: Option<u64>,
    /// `-D`: run this many seconds instead of a count (bandwidth tests).
    pub duration: Option<u32>,
    /// `-m`: the path MTU we offer (default: the port's active MTU).
    pub mtu: Option<Mtu>,
    /// `-x`: the GID index.
    pub gid_index: u8,
    /// `-q`: QPs (bandwidth tests).
    pub qps: u32,
    /// `-t`: outstanding work requests per QP (default 128, 1 for latency).
    pub tx_depth: Option<u32>,
    /// `-r`: receives posted per QP (default 512 for SEND tests).
    pub rx_depth: Option<u32>,
    /// `-Q`: one completion per this many work requests (default 100,
    /// forced to 1 above 8 KiB messages).
    pub cq_mod: Option<u32>,
    /// `-A`: the atomic of atomic-bw.
    pub atomic: AtomicKind,
    /// `--report_gbits`.
    pub report_gbits: bool,
    /// `-p`: the TCP port of the exchange.
    pub tcp_port: u16,
    /// The server accepts on this listener instead of `tcp_port`, when
    /// the caller bound one.
    pub listener: Option<std::sync::Arc<std::net::TcpListener>>,
    /// Longest wait for the peer at any one step.
    pub timeout: std::time::Duration,
    /// The device name the banner shows.
    pub device: String,
    /// `-R`: connect by RDMA-CM, the control channel included (the port
    /// is `tcp_port`'s number, in RDMA-CM's TCP port space).
    pub rdma_cm: bool,
    /// Keep every rate decision of our QPs for [`Report::cc_trace`].
    pub cc_trace: bool,
    /// The loss recovery this end asks for; selective repeat is used
    /// only when the peer (ferroce) asked for it too
    /// ([`Report::recovery`] says what ran).
    pub recovery: Recovery,
    /// `-u`: the local ACK timeout of the test QPs, 4.096 µs × 2^u (IBTA
    /// §9.7.6.1.3; default 14, about 67 ms). Not with `-R`, whose QPs
    /// take RDMA-CM's path values.
    pub qp_timeout: Option<u8>,
}

impl Opts {
    /// `test` with perftest's defaults: TCP port 18515, one QP, GID index
    /// 0, FETCH_AND_ADD, MiB/s, a 60 s timeout, device "ferroce0".
    pub fn new(test: Test) -> Opts {
        Opts {
            test,
            size: None,
            iters: None,
            duration: None,
            mtu: None,
            gid_index: 0,
            qps: 1,
            tx_depth: None,
            rx_depth: None,
            cq_mod: None,
            atomic: AtomicKind::FetchAndAdd,
            report_gbits: false,
            tcp_port: 18515,
            listener: None,
            timeout: std::time::Duration::from_secs(60),
            device: "ferroce0".into(),
            rdma_cm: false,
            cc_trace: false,
            recovery: Recovery::GoBackN,
            qp_timeout: None,
        }
    }
}

/// The options with perftest's defaults and dependencies applied
/// (`init_perftest_params`, `force_dependecies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Which tool.
    pub test: Test,
    /// Bytes per message.
    pub size: u64,
    /// Messages per QP (0 with a duration).
    pub iters: u64,
    /// Seconds to run instead of a count (bandwidth tests).
    pub duration: Option<u32>,
    /// QPs (1 for latency tests).
    pub qps: u32,
    /// Work requests outstanding per QP (capped at `iters` in a counted run).
    pub tx_depth: u32,
    /// Receives posted per QP (1 unless a SEND test; capped like `tx_depth`).
    pub rx_depth: u32,
    /// One completion per this many work requests, in `1..=tx_depth`.
    pub cq_mod: u32,
    /// The atomic of atomic-bw.
    pub atomic: AtomicKind,
    /// Report Gbit/s instead of MiB/s.
    pub gbits: bool,
    /// The local ACK timeout's exponent (`-u`).
    pub qp_timeout: u8,
}

/// perftest's default `-u`: 4.096 µs × 2^14, about 67 ms.
const DEFAULT_QP_TIMEOUT: u8 = 14;

/// Page size and cache line we announce (`check_sys_data`).
const PAGE: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// Messages above this many bytes get a completion each
/// (`MSG_SIZE_CQ_MOD_LIMIT`).
const CQ_MOD_LIMIT: u64 = 8192;

impl Params {
    /// Applies the defaults to `o`; errs on options perftest (or we)
    /// reject, naming the flag.
    pub fn from_opts(o: &Opts) -> Result<Params> {
        let t = o.test;
        let size = o.size.unwrap_or(match t {
            Test::AtomicBw => 8,
            _ if t.is_bw() => 65536,
            _ => 2,
        });
        ensure!(
            size > 0 && size <= 1 << 31,
            "-s {size}: from 1 byte to 2 GiB"
        );
        ensure!(t != Test::AtomicBw || size == 8, "-s: atomics are 8 bytes");
        ensure!(o.qps >= 1 && o.qps <= 1024, "-q {}: 1 to 1024 QPs", o.qps);
        ensure!(t.is_bw() || o.qps == 1, "-q: latency tests use one QP");
        ensure!(
            o.duration.is_none() || t.is_bw(),
            "-D: duration runs are for bandwidth tests here"
        );
        let iters = match o.duration {
            Some(d) => {
                ensure!(d > 0, "-D: at least one second");
                0
            }
            None => o
                .iters
                .unwrap_or(if t == Test::WriteBw { 5000 } else { 1000 }),
        };
        ensure!(
            o.duration.is_some() || iters >= 5 || t.is_bw(),
            "-n {iters}: a latency test needs at least 5 iterations"
        );
        ensure!(
            o.duration.is_some() || iters >= 1,
            "-n: at least one iteration"
        );
        let cap = |v: u32| if iters > 0 { v.min(iters as u32) } else { v };
        let tx_depth = cap(o.tx_depth.unwrap_or(if t.is_bw() { 128 } else { 1 })).max(1);
        let rx_depth = cap(o
            .rx_depth
            .unwrap_or(if t.verb() == Verb::Send { 512 } else { 1 }))
        .max(1);
        let mut cq_mod = o.cq_mod.unwrap_or(if size > CQ_MOD_LIMIT || !t.is_bw() {
            1
        } else {
            100
        });
        cq_mod = cq_mod.clamp(1, tx_depth);
        if let Some(u) = o.qp_timeout {
            ensure!(u <= 31, "-u {u}: the ACK timeout's exponent is 0 to 31");
            ensure!(
                !o.rdma_cm,
                "-u with -R: the QPs take RDMA-CM's ACK timeout from its path"
            );
        }
        Ok(Params {
            test: t,
            size,
            iters,
            duration: o.duration,
            qps: o.qps,
            tx_depth,
            rx_depth,
            cq_mod,
            atomic: o.atomic,
            gbits: o.report_gbits,
            qp_timeout: o.qp_timeout.unwrap_or(DEFAULT_QP_TIMEOUT),
        })
    }

    /// perftest's `BUFF_SIZE`: a slot.
    fn slot(&self, cycle_buffer: u32) -> u64 {
        self.size.max(cycle_buffer as u64)
    }

    /// The stride of the remote address in a bandwidth test, or `None`
    /// when every message goes to the start of the slot
    /// (`increase_rem_addr`: messages of at most half a page cycle over
    /// the page in cache-line-rounded steps).
    fn stride(&self, a: &Agreed) -> Option<(u64, u64)> {
        if !self.test.is_bw() || self.size > (a.cycle_buffer / 2) as u64 {
            return None;
        }
        let cl = a.cache_line.max(1) as u64;
        let inc = if self.size > cl {
            self.size.div_ceil(cl) * cl
        } else {
            cl
        };
        Some((inc, (a.cycle_buffer as u64 / inc).max(1)))
    }

    fn access(&self) -> Access {
        Access::LOCAL_WRITE
            | match self.test.verb() {
                Verb::Write => Access::REMOTE_WRITE,
                Verb::Read => Access::REMOTE_READ,
                Verb::Atomic => Access::REMOTE_ATOMIC,
                Verb::Send => Access::REMOTE_WRITE,
            }
    }

    fn title(&self) -> String {
        let what = match self.test.verb() {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => match self.atomic {
                AtomicKind::FetchAndAdd => "Atomic FETCH_AND_ADD",
                AtomicKind::CmpAndSwap => "Atomic CMP_AND_SWAP",
            },
        };
        let kind = if self.test.is_bw() { "BW" } else { "Latency" };
        format!("{what} {kind} Test")
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A bandwidth test's figures.
    Bw(BwReport),
    /// A latency test's figures.
    Lat(LatReport),
    /// The passive side of a latency test prints no numbers.
    None,
}

/// What happened, for the caller to print and check.
#[derive(Debug, Clone)]
pub struct Report {
    /// The parameters the run used.
    pub params: Params,
    /// Our QPs' keys, as sent to the peer.
    pub local: Vec<Keys>,
    /// The peer's QPs' keys, as received.
    pub remote: Vec<Keys>,
    /// The figures (the passive side of a latency test has none).
    pub outcome: Outcome,
    /// The QPs' counters, summed.
    pub counters: QpCounters,
    /// Messages whose bytes were not what the peer sent (the SEND
    /// receiver checks the pattern ferroce sends; perftest sends random
    /// bytes, so this counts only between two ferroce ends).
    pub bad_payloads: u64,
    /// Work requests that completed with an error.
    pub errors: u64,
    /// With `Opts::cc_trace`: each QP's number and its rate decisions.
    pub cc_trace: Vec<(u32, Vec<crate::cc::TraceRecord>)>,
    /// The loss recovery the test QPs ran: selective repeat only when both
    /// ends asked for it.
    pub recovery: Recovery,
}

/// The resources of a run.
struct Setup {
    p: Params,
    a: Agreed,
    pd: Pd,
    mr: Mr,
    qps: Vec<Qp>,
    scq: crate::verbs::Cq,
    rcq: crate::verbs::Cq,
    local: Vec<Keys>,
    remote: Vec<Keys>,
    server: bool,
    /// Our GID index (`-x`): the QPs' source address.
    gid_index: u8,
}

impl Setup {
    /// Registers the region (2 x N slots, each rounded up to the cache
    /// line, filled as perftest fills it), creates the CQs and the QPs,
    /// and makes each QP's keys.
    fn create<B: Backend>(
        ctx: &mut Context<B>,
        p: Params,
        a: Agreed,
        server: bool,
        gid_index: u8,
    ) -> Result<Setup> {
        let slot = p.slot(a.cycle_buffer);
        let cl = a.cache_line.max(1) as u64;
        let rounded = slot.div_ceil(cl) * cl;
        let len = rounded * 2 * p.qps as u64;
        let pd = ctx.alloc_pd();
        let mr = ctx
            .reg_mr(&pd, len as usize, p.access())
            .context("registering the test buffer")?;
        // perftest fills its buffer with random bytes (write-lat: zeroes,
        // its last byte is the poll flag); ours holds [`PATTERN`], which a
        // capture can check: every payload we send continues it.
        if p.test != Test::WriteLat {
            for (i, b) in ctx.mr_mut(&mr)?.iter_mut().enumerate() {
                *b = pattern_byte(i);
            }
        }
        let depth = (p.tx_depth as usize) * p.qps as usize;
        let scq = ctx.create_cq(depth.max(1) + 16)?;
        let rcq = ctx.create_cq((p.rx_depth as usize) * p.qps as usize + 16)?;
        let out_reads = out_reads(ctx, &p);
        let gid = ctx.query_gid(gid_index)?;
        let mut qps = Vec::new();
        let mut local = Vec::new();
        for i in 0..p.qps {
            let caps = crate::transport::QpCaps {
                max_send_wr: p.tx_depth.max(1),
                max_recv_wr: p.rx_depth.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
                ..Default::default()
            };
            let qp = ctx.create_qp(&pd, &scq, &rcq, caps)?;
            local.push(Keys {
                lid: 0,
                out_reads,
                qpn: qp.num(),
                psn: random_psn(i),
                rkey: mr.rkey(),
                vaddr: mr.addr() + (p.qps as u64 + i as u64) * slot,
                gid: gid.gid,
                srqn: 0,
            });
            qps.push(qp);
        }
        Ok(Setup {
            p,
            a,
            pd,
            mr,
            qps,
            scq,
            rcq,
            local,
            remote: Vec::new(),
            server,
            gid_index,
        })
    }

    fn slot(&self) -> u64 {
        self.p.slot(self.a.cycle_buffer)
    }
    /// Offset of QP `i`'s local buffer in the region.
    fn local_off(&self, i: usize) -> u64 {
        i as u64 * self.slot()
    }
    /// Offset of QP `i`'s published slot.
    fn published_off(&self, i: usize) -> u64 {
        (self.p.qps as u64 + i as u64) * self.slot()
    }

    /// The QPs' counters, summed.
    fn counters<B: Backend>(&self, ctx: &Context<B>) -> Result<QpCounters> {
        let mut counters = QpCounters::default();
        for qp in &self.qps {
            counters.add(&ctx.qp_counters(qp)?);
        }
        Ok(counters)
    }

    /// Destroys every resource, leaving the context as we found it (the
    /// demo runs tool after tool). Returns the keys, ours and the peer's.
    fn destroy<B: Backend>(self, ctx: &mut Context<B>) -> Result<(Vec<Keys>, Vec<Keys>)> {
        for qp in self.qps {
            ctx.destroy_qp(qp).map_err(|e| e.error)?;
        }
        ctx.dereg_mr(self.mr).map_err(|e| e.error)?;
        ctx.destroy_cq(self.scq).map_err(|e| e.error)?;
        ctx.destroy_cq(self.rcq).map_err(|e| e.error)?;
        ctx.dealloc_pd(self.pd).map_err(|e| e.error)?;
        Ok((self.local, self.remote))
    }
}

/// The READs and atomics a QP takes at once as the responder: the
/// device's limit for read and atomic tests, 1 otherwise.
fn out_reads<B: Backend>(ctx: &Context<B>, p: &Params) -> u16 {
    match p.test.verb() {
        Verb::Read | Verb::Atomic => ctx.device().config().max_qp_rd_atom as u16,
        _ => 1,
    }
}

/// The period of the bytes in our test buffers: byte `i` is `i % 251`
/// (a prime, so a payload's bytes show where in the buffer it began and
/// that none was skipped or repeated).
pub const PATTERN: usize = 251;

/// Byte `i` of a test buffer.
pub fn pattern_byte(i: usize) -> u8 {
    (i % PATTERN) as u8
}

/// Runs one end of `opts.test` on `ctx`, printing as perftest does.
pub fn run<B: Backend>(
    ctx: &mut Context<B>,
    role: &Role,
    opts: &Opts,
    out: &mut dyn Write,
) -> Result<Report> {
    let p = Params::from_opts(opts)?;
    let limit = Duration::from_nanos(opts.timeout.as_nanos() as u64);
    let want = opts.mtu.unwrap_or(ctx.query_port().active_mtu);
    ctx.check_path_mtu(want)
        .with_context(|| format!("-m {}", want.bytes()))?;
    let server = matches!(role, Role::Server);
    if server {
        writeln!(out, "\n************************************")?;
        writeln!(out, "* Waiting for client to connect... *")?;
        writeln!(out, "************************************")?;
    }
    let mut ch = match (role, opts.rdma_cm) {
        (Role::Server, false) => {
            Channel::accept(ctx, opts.listener.as_deref(), opts.tcp_port, limit)?
        }
        (Role::Client(ip), false) => {
            Channel::connect(ctx, SocketAddr::new(*ip, opts.tcp_port), limit)?
        }
        (Role::Server, true) => Channel::cm_accept(ctx, opts.tcp_port, limit)?,
        (Role::Client(ip), true) => {
            Channel::cm_connect(ctx, *ip, opts.tcp_port, opts.gid_index, limit)?
        }
    };
    let want_int = ctx.device().config().congestion.rp.needs_int();
    if want_int && opts.rdma_cm {
        bail!(
            "INT telemetry (which this end's rate control needs) is not carried on connections \
             made by RDMA-CM (-R): use the TCP exchange"
        );
    }
    let want_sr = opts.recovery == Recovery::Selective;
    let a = channel::setup(
        &mut ch, ctx, PAGE, CACHE_LINE, want as u8, want_int, want_sr,
    )?;
    if want_sr && a.recovery != Recovery::Selective {
        writeln!(
            out,
            " Selective repeat: the peer did not ask for it (it is not ferroce, or was not given \
             --recovery sr); the QPs run go-back-N"
        )?;
    }
    let mtu = Mtu::ALL[(a.mtu.clamp(1, 5) - 1) as usize];
    let mut s = Setup::create(ctx, p, a, server, opts.gid_index)?;
    let out_reads = out_reads(ctx, &p);
    let test_conns = if opts.rdma_cm {
        cm::connect_test_qps(ctx, &mut ch, &s, role, opts, limit)?
    } else {
        Vec::new()
    };
    report::print_banner(
        &report::Banner {
            title: &p.title(),
            device: &opts.device,
            qps: p.qps,
            tx_depth: (!server || !p.test.is_bw()).then_some(p.tx_depth),
            rx_depth: (p.test.verb() == Verb::Send && (server || !p.test.is_bw()))
                .then_some(p.rx_depth),
            cq_mod: p.test.is_bw().then_some(p.cq_mod),
            mtu_bytes: mtu.bytes(),
            gid_index: opts.gid_index,
            out_reads: matches!(p.test.verb(), Verb::Read | Verb::Atomic).then_some(out_reads),
            rdma_cm: opts.rdma_cm,
            selective_repeat: s.a.recovery == Recovery::Selective,
        },
        out,
    )?;
    before_run(ctx, &mut ch, &mut s, mtu)?;
    if opts.cc_trace {
        for qp in &s.qps {
            ctx.set_cc_trace(qp, true)?;
        }
    }
    print_keys(&s, out)?;
    let mut errors = 0;
    let mut bad = 0;
    let outcome = data_phase(ctx, &mut ch, &mut s, limit, out, &mut errors, &mut bad)?;
    // Answer the peer's resends if our last ACKs were lost.
    let qps: Vec<&Qp> = s.qps.iter().collect();
    crate::tools::exchange::linger(ctx, &qps);
    cm::disconnect(ctx, &test_conns, server, limit);
    ch.close(ctx);
    let counters = s.counters(ctx)?;
    let mut cc_trace = Vec::new();
    if opts.cc_trace {
        for qp in &s.qps {
            let mut t = Vec::new();
            ctx.drain_cc_trace(qp, &mut t)?;
            cc_trace.push((qp.num(), t));
        }
    }
    // What the QPs ran, as the transport has it (the TCP exchange's
    // agreement, or the RDMA-CM REQ / REP with -R).
    let recovery = match s.qps.first() {
        Some(qp) => ctx
            .query_qp(qp)?
            .1
            .ah_attr
            .map_or(Recovery::GoBackN, |a| a.recovery),
        None => Recovery::GoBackN,
    };
    let (local, remote) = s.destroy(ctx)?;
    Ok(Report {
        params: p,
        local,
        remote,
        outcome,
        counters,
        bad_payloads: bad,
        errors,
        cc_trace,
        recovery,
    })
}

/// The exchange before the data phase, in the order of the tool's `main`
/// (`Test::sequence`).
fn before_run<B: Backend>(
    ctx: &mut Context<B>,
    ch: &mut Channel,
    s: &mut Setup,
    mtu: Mtu,
) -> Result<()> {
    for step in s.p.test.sequence() {
        match step {
            Step::KeysPerQp => {
                let mut remote = Vec::new();
                for k in s.local.clone() {
                    remote.push(channel::keys(ch, ctx, &k)?);
                }
                s.remote = remote;
            }
            Step::Connect => {
                check_gids(&s.local[0], &s.remote[0])?;
                // With -R the QPs were connected by RDMA-CM already.
                if !ch.is_cm() {
                    connect(ctx, s, mtu)?;
                }
            }
            Step::PostRecvs => run::post_initial_recvs(ctx, s)?,
            Step::Barrier => {
                let k = channel::keys(ch, ctx, &s.local[0])?;
                match s.remote.first_mut() {
                    Some(r) => *r = k,
                    None => s.remote.push(k),
                }
            }
        }
    }
    Ok(())
}

/// Every QP's keys, ours then the peer's, and the line under them.
fn print_keys(s: &Setup, out: &mut dyn Write) -> Result<()> {
    let rdma = matches!(s.p.test.verb(), Verb::Write | Verb::Read);
    let read = s.p.test.verb() == Verb::Read;
    for k in &s.local {
        report::print_keys("local", k, rdma, read, out)?;
    }
    for k in &s.remote {
        report::print_keys("remote", k, rdma, read, out)?;
    }
    writeln!(out, "{}", report::RESULT_LINE)?;
    Ok(())
}

/// The measurement and the exchange after it, printing the table.
fn data_phase<B: Backend>(
    ctx: &mut Context<B>,
    ch: &mut Channel,
    s: &mut Setup,
    limit: Duration,
    out: &mut dyn Write,
    errors: &mut u64,
    bad: &mut u64,
) -> Result<Outcome> {
    let (p, server) = (s.p, s.server);
    let run_limit = limit + Duration::from_secs(p.duration.unwrap_or(0) as u64);
    let outcome = match (p.test, server) {
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, false) => {
            writeln!(out, "{}", BwReport::header(p.gbits))?;
            let r = run::bw_client(ctx, s, limit, errors)?;
            writeln!(out, "{}", r.row())?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            s.remote[0] = channel::keys(ch, ctx, &s.local[0])?;
            exchange_reports(ch, ctx, &r)?;
            s.remote[0] = channel::keys(ch, ctx, &s.local[0])?;
            Outcome::Bw(r)
        }
        (Test::WriteBw | Test::ReadBw | Test::AtomicBw, true) => {
            writeln!(out, "{}", BwReport::header(p.gbits))?;
            // Passive: answer the client's requests until it is done.
            s.remote[0] = channel::barrier_after_run(ch, ctx, &s.local[0], run_limit)?;
            let mut r = exchange_reports(ch, ctx, &BwReport::default())?;
            r.gbits = p.gbits;
            writeln!(out, "{}", r.row())?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            s.remote[0] = channel::keys(ch, ctx, &s.local[0])?;
            Outcome::Bw(r)
        }
        (Test::SendBw, _) => {
            writeln!(out, "{}", BwReport::header(p.gbits))?;
            let r = if server {
                run::send_bw_server(ctx, s, limit, errors, bad)?
            } else {
                run::bw_client(ctx, s, limit, errors)?
            };
            writeln!(out, "{}", r.row())?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            s.remote[0] = channel::barrier_after_run(ch, ctx, &s.local[0], run_limit)?;
            Outcome::Bw(r)
        }
        (Test::WriteLat, _) => {
            writeln!(out, "{}", LatReport::HEADER)?;
            let r = run::write_lat(ctx, s, limit, errors)?;
            writeln!(out, "{}", r.row())?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            Outcome::Lat(r)
        }
        (Test::ReadLat, false) => {
            writeln!(out, "{}", LatReport::HEADER)?;
            let r = run::read_lat(ctx, s, limit, errors)?;
            writeln!(out, "{}", r.row())?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            s.remote[0] = channel::keys(ch, ctx, &s.local[0])?;
            Outcome::Lat(r)
        }
        (Test::ReadLat, true) => {
            s.remote[0] = channel::barrier_after_run(ch, ctx, &s.local[0], run_limit)?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            Outcome::None
        }
        (Test::SendLat, _) => {
            writeln!(out, "{}", LatReport::HEADER)?;
            let r = run::send_lat(ctx, s, limit, errors, bad)?;
            writeln!(out, "{}", r.row())?;
            writeln!(out, "{}", report::RESULT_LINE)?;
            s.remote[0] = channel::keys(ch, ctx, &s.local[0])?;
            Outcome::Lat(r)
        }
    };
    Ok(outcome)
}

/// perftest's `ctx_check_gid_compatibility`: both GIDs IPv4-mapped, or
/// neither.
fn check_gids(a: &Keys, b: &Keys) -> Result<()> {
    let v4 = |k: &Keys| k.gid[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    if v4(a) != v4(b) {
        bail!("Found Incompatibility issue with GID types: ours and the peer's are not both IPv4-mapped");
    }
    Ok(())
}

/// Brings every QP to RTS towards its peer, with perftest's attributes.
fn connect<B: Backend>(ctx: &mut Context<B>, s: &Setup, mtu: Mtu) -> Result<()> {
    use crate::transport::connect::{connect_steps, ConnectParams};
    let params = ConnectParams {
        mtu,
        timeout: s.p.qp_timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        access: s.p.access(),
        sgid_index: s.gid_index,
        int_telemetry: s.a.int,
        recovery: s.a.recovery,
        ..ConnectParams::default()
    };
    let max = ctx.device().config().max_qp_rd_atom;
    for (i, qp) in s.qps.iter().enumerate() {
        let (l, r) = (&s.local[i], &s.remote[i]);
        let ip = crate::wire::ip_of(&r.gid);
        let zero = crate::wire::MacAddr([0; 6]);
        for (mut attr, mask) in connect_steps(r.qpn, zero, ip, &params, l.psn, r.psn) {
            attr.max_dest_rd_atomic = (l.out_reads as u8).max(1);
            attr.max_rd_atomic = (r.out_reads.min(max as u16) as u8).max(1);
            if let Some(av) = attr.ah_attr.as_mut() {
                av.hop_limit = 0xFF;
            }
            ctx.modify_qp(qp, &attr, mask)
                .with_context(|| format!("connecting QP {:#x}", qp.num()))?;
        }
    }
    Ok(())
}

/// `xchg_bw_reports`: size, iterations, peak, average, message rate, each
/// as 8 big-endian bytes, the client's first.
fn exchange_reports<B: Backend>(
    ch: &mut Channel,
    ctx: &mut Context<B>,
    mine: &BwReport,
) -> Result<BwReport> {
    let size = channel::exchange_u64(ch, ctx, mine.size)?;
    let iters = channel::exchange_u64(ch, ctx, mine.iters)?;
    let peak = f64::from_bits(channel::exchange_u64(ch, ctx, mine.bw_peak.to_bits())?);
    let avg = f64::from_bits(channel::exchange_u64(ch, ctx, mine.bw_avg.to_bits())?);
    let rate = f64::from_bits(channel::exchange_u64(ch, ctx, mine.msg_rate.to_bits())?);
    Ok(BwReport {
        size,
        iters,
        bw_peak: peak,
        bw_avg: avg,
        msg_rate: rate,
        gbits: mine.gbits,
    })
}

mod cm;
#[cfg(test)]
mod tests;
