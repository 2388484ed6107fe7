//! `ferroce rping`: librdmacm's `rping` on a ferroce host, the same over
//! RDMA-CM and on the wire (`librdmacm/examples/rping.c`), so that either
//! end can be `rping`.
//!
//! The connection is RDMA-CM's, port space TCP, port 7174 by default; both
//! ends ask and grant one RDMA READ at a time (responder resources and
//! initiator depth 1) and retry 7 times. Each end posts one receive of a
//! 16-byte buffer description before it connects or accepts. Per ping:
//!
//! 1. the client fills its start buffer (`rdma-ping-N: ` and then the
//!    letters `A`..`z` from a start that moves on by one each ping, NUL at
//!    the end) and SENDs its description: address (8 bytes), R_Key (4),
//!    size (4), all big-endian;
//! 2. the server RDMA READs that many bytes into its buffer, prints
//!    `server ping data: ...` with `-v`, and SENDs 16 zero bytes (go
//!    ahead);
//! 3. the client SENDs the description of its sink buffer;
//! 4. the server RDMA WRITEs its buffer there, then SENDs go ahead again;
//! 5. the client checks (`-V`) that the sink holds what it sent, prints
//!    `ping data: ...` with `-v`.
//!
//! After `-C` pings the client disconnects; the server ends when it is
//! disconnected. Both print `... DISCONNECT EVENT...` as rping does. A
//! server given `-C` also ends [`LAST_PING_GRACE`] after the last ping
//! without the client's DREQ: a lost DREQ is not sent again once the
//! client's process has gone (Linux's CM stops resending when its ID is
//! destroyed), and nothing else would ever come.

use crate::backend::Backend;
use crate::time::Duration;
use crate::tools::cm_link::connect_retrying;
use crate::transport::{Access, Payload, QpCaps, QpCounters, RecvWr, SendOp, SendWr, WcStatus};
use crate::verbs::cm::{CmConn, ConnParam, RdmaCmEvent};
use crate::verbs::{Context, Cq, Mr, Pd, Qp};
use anyhow::{bail, ensure, Context as _, Result};
use core::net::IpAddr;
use std::io::Write;

/// rping's port.
pub const PORT: u16 = 7174;

/// How long a server that has served `-C` pings waits for the client's
/// DREQ before it ends as disconnected.
pub const LAST_PING_GRACE: Duration = Duration::from_secs(3);

/// rping's options.
#[derive(Debug, Clone)]
pub struct RpingOpts {
    /// `-s` (server) or `-c` (client).
    pub server: bool,
    /// `-a`: the server's address (the client's peer; the server binds
    /// every address of the port).
    pub addr: IpAddr,
    /// `-p`: the port.
    pub port: u16,
    /// `-C`: pings (0: forever). A server given a count ends
    /// [`LAST_PING_GRACE`] after that many pings even without the
    /// client's DREQ.
    pub count: u32,
    /// `-S`: bytes per ping (at least `rdma-ping-N: ` and a NUL).
    pub size: u32,
    /// `-v`: print each ping's data.
    pub verbose: bool,
    /// `-V`: check each ping's data on the client.
    pub validate: bool,
    /// Our GID index.
    pub gid_index: u8,
    /// Give up after this long without progress.
    pub timeout: std::time::Duration,
}

impl Default for RpingOpts {
    fn default() -> RpingOpts {
        RpingOpts {
            server: true,
            addr: IpAddr::from([0, 0, 0, 0]),
            port: PORT,
            count: 0,
            size: 64,
            verbose: false,
            validate: false,
            gid_index: 0,
            timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// What happened.
#[derive(Debug, Clone)]
pub struct RpingReport {
    /// Pings completed.
    pub pings: u32,
    /// Pings whose data came back different (`-V`).
    pub bad: u32,
    /// The QP's counters at the end.
    pub counters: QpCounters,
}

/// The work request IDs of the two kinds of completion we wait for.
const RECV: u64 = 1;
const SEND: u64 = 2;
const RDMA: u64 = 3;
/// Bytes of a buffer description.
const INFO: usize = 16;
/// rping's `RPING_MSG_FMT` without its number.
const MSG: &str = "rdma-ping-";

/// The bytes of ping `n` whose letters start at `start`, `size` long.
pub fn ping_data(n: u32, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("{MSG}{n}: ").into_bytes();
    b.truncate(size);
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

/// The text rping prints of a buffer: up to its first NUL.
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The resources of one end: a CQ, the 16-byte receive and send buffers
/// and the data buffers (the client's start and sink, the server's one).
struct Ends {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    recv: Mr,
    send: Mr,
    rdma: Mr,
    start: Option<Mr>,
}

impl Ends {
    fn create<B: Backend>(ctx: &mut Context<B>, o: &RpingOpts) -> Result<Ends> {
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(32)?;
        let caps = QpCaps {
            max_send_wr: 16,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCaps::default()
        };
        let qp = ctx.create_qp(&pd, &cq, &cq, caps)?;
        let recv = ctx.reg_mr(&pd, INFO, Access::LOCAL_WRITE)?;
        let send = ctx.reg_mr(&pd, INFO, Access::NONE)?;
        let remote = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let rdma = ctx.reg_mr(&pd, o.size as usize, remote)?;
        let start = if o.server {
            None
        } else {
            Some(ctx.reg_mr(&pd, o.size as usize, remote)?)
        };
        Ok(Ends {
            pd,
            cq,
            qp,
            recv,
            send,
            rdma,
            start,
        })
    }

    fn post_recv<B: Backend>(&self, ctx: &mut Context<B>) -> Result<()> {
        let wr = RecvWr {
            wr_id: RECV,
            sges: smallvec::smallvec![self.recv.sge(0, INFO as u32).expect("16 bytes")],
        };
        Ok(ctx.post_recv(&self.qp, wr)?)
    }

    /// SENDs the description of `mr` (or 16 zero bytes).
    fn send_info<B: Backend>(&self, ctx: &mut Context<B>, mr: Option<&Mr>) -> Result<()> {
        let mut b = [0u8; INFO];
        if let Some(m) = mr {
            b[..8].copy_from_slice(&m.addr().to_be_bytes());
            b[8..12].copy_from_slice(&m.rkey().to_be_bytes());
            b[12..].copy_from_slice(&(m.len() as u32).to_be_bytes());
        }
        ctx.mr_mut(&self.send)?.copy_from_slice(&b);
        let sge = self.send.sge(0, INFO as u32).expect("16 bytes");
        Ok(ctx.post_send(&self.qp, SendWr::new(SEND, SendOp::Send, Payload::sge(sge)))?)
    }

    fn destroy<B: Backend>(self, ctx: &mut Context<B>) {
        let _ = ctx.destroy_qp(self.qp);
        for m in [
            Some(self.recv),
            Some(self.send),
            Some(self.rdma),
            self.start,
        ]
        .into_iter()
        .flatten()
        {
            let _ = ctx.dereg_mr(m);
        }
        let _ = ctx.destroy_cq(self.cq);
        let _ = ctx.dealloc_pd(self.pd);
    }
}

/// Runs one end on `ctx`, printing rping's lines to `out`.
pub fn run<B: Backend>(
    ctx: &mut Context<B>,
    o: &RpingOpts,
    out: &mut dyn Write,
) -> Result<RpingReport> {
    let min = format!("{MSG}0: ").len() as u32 + 1;
    ensure!(o.size >= min, "-S {}: at least {min} bytes", o.size);
    let limit = Duration::from_nanos(o.timeout.as_nanos() as u64);
    let e = Ends::create(ctx, o)?;
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        ..ConnParam::default()
    };
    ctx.rdma_init_qp(&e.qp, param.responder_resources)?;
    e.post_recv(ctx)?;
    let conn = if o.server {
        ctx.rdma_listen(o.port)?;
        eprintln!("listening on RDMA-CM port {}", o.port);
        let conn = match next_event(ctx, limit)? {
            RdmaCmEvent::ConnectRequest { conn, .. } => conn,
            ev => bail!("waiting for a connection: {ev:?}"),
        };
        ctx.rdma_accept(conn, &e.qp, &param)?;
        conn
    } else {
        // Again while the server's port is not listened on yet, as the
        // TCP tools try again; rping itself gives up at once.
        connect_retrying(ctx, &e.qp, o.addr, o.port, o.gid_index, &param, limit)?
    };
    if o.server {
        match next_event(ctx, limit)? {
            RdmaCmEvent::Established { .. } => {}
            ev => bail!("connecting: {ev:?}"),
        }
    }
    let r = if o.server {
        serve(ctx, &e, conn, o, limit, out)
    } else {
        ping(ctx, &e, conn, o, limit, out)
    };
    let counters = ctx.qp_counters(&e.qp).unwrap_or_default();
    e.destroy(ctx);
    let (pings, bad) = r?;
    Ok(RpingReport {
        pings,
        bad,
        counters,
    })
}

/// The next RDMA-CM event, or an error after `limit`.
fn next_event<B: Backend>(ctx: &mut Context<B>, limit: Duration) -> Result<RdmaCmEvent> {
    ctx.rdma_get_cm_event(limit)
        .with_context(|| format!("no RDMA-CM event in {limit}"))
}

/// What the wait for a completion found.
enum Got {
    Done,
    Disconnected,
}

/// The next completion with `wr_id` (others are taken on the way: a send
/// completes before or after the receive it led to), or the peer's
/// disconnect.
fn wait<B: Backend>(ctx: &mut Context<B>, e: &Ends, wr_id: u64, limit: Duration) -> Result<Got> {
    let end = ctx.now() + limit;
    let mut wcs = Vec::new();
    loop {
        wcs.clear();
        ctx.poll_cq(&e.cq, 1, &mut wcs)?;
        if let Some(wc) = wcs.first() {
            // Flushed work requests are a disconnect's, as rping takes them.
            if wc.status == WcStatus::WrFlushErr {
                continue;
            }
            if wc.status != WcStatus::Success {
                bail!(
                    "cq completion failed status {} ({})",
                    wc.status,
                    wc.status as u32
                );
            }
            if wc.wr_id == wr_id {
                return Ok(Got::Done);
            }
            continue;
        }
        if let Some(RdmaCmEvent::Disconnected { .. }) = ctx.rdma_poll_cm_event() {
            return Ok(Got::Disconnected);
        }
        ensure!(ctx.now() < end, "no completion in {limit}");
    }
}

/// The client's pings.
fn ping<B: Backend>(
    ctx: &mut Context<B>,
    e: &Ends,
    conn: CmConn,
    o: &RpingOpts,
    limit: Duration,
    out: &mut dyn Write,
) -> Result<(u32, u32)> {
    let start_mr = e.start.as_ref().expect("the client has a start buffer");
    let (mut start, mut bad, mut n) = (b'A', 0u32, 0u32);
    while o.count == 0 || n < o.count {
        let data = ping_data(n, start, o.size as usize);
        start = if start >= b'z' { b'A' } else { start + 1 };
        ctx.mr_mut(start_mr)?.copy_from_slice(&data);
        e.send_info(ctx, Some(start_mr))?;
        for step in ["go ahead after the READ", "the WRITE's go ahead"] {
            if let Got::Disconnected = wait(ctx, e, RECV, limit)? {
                bail!("disconnected while waiting for {step}");
            }
            e.post_recv(ctx)?;
            if step.starts_with("go") {
                e.send_info(ctx, Some(&e.rdma))?;
            }
        }
        let got = ctx.mr(&e.rdma)?.to_vec();
        if o.validate && got != data {
            writeln!(out, "data mismatch!")?;
            bad += 1;
        }
        if o.verbose {
            writeln!(out, "ping data: {}", text(&got))?;
        }
        n += 1;
    }
    ctx.rdma_disconnect(conn)?;
    loop {
        match next_event(ctx, limit)? {
            RdmaCmEvent::Disconnected { .. } => break,
            RdmaCmEvent::TimewaitExit { .. } => {}
            ev => bail!("disconnecting: {ev:?}"),
        }
    }
    writeln!(out, "client DISCONNECT EVENT...")?;
    Ok((n, bad))
}

/// The server's side of each ping, until the client disconnects.
fn serve<B: Backend>(
    ctx: &mut Context<B>,
    e: &Ends,
    conn: CmConn,
    o: &RpingOpts,
    limit: Duration,
    out: &mut dyn Write,
) -> Result<(u32, u32)> {
    let mut n = 0u32;
    loop {
        // The client's start buffer: READ it.
        if !serve_step(ctx, e, o, true, limit)? {
            break;
        }
        if o.verbose {
            writeln!(out, "server ping data: {}", text(ctx.mr(&e.rdma)?))?;
        }
        e.send_info(ctx, None)?;
        // Its sink: WRITE ours there.
        if !serve_step(ctx, e, o, false, limit)? {
            break;
        }
        e.send_info(ctx, None)?;
        n += 1;
        if n == o.count {
            if !disconnected_within(ctx, e, limit.min(LAST_PING_GRACE))? {
                eprintln!(
                    "no disconnect from the client {LAST_PING_GRACE} after its last ping \
                     (-C {}): taking it as disconnected",
                    o.count
                );
            }
            break;
        }
    }
    writeln!(out, "server DISCONNECT EVENT...")?;
    ctx.rdma_disconnect(conn)?;
    // ferroce's rping client waits for our DREP (librdmacm's rping
    // destroys its ID instead): if it was lost, answer the DREQ's resend.
    crate::tools::cm_link::answer_resent_dreqs(ctx, |_| false);
    Ok((n, 0))
}

/// Whether the peer disconnects within `grace`; completions that come
/// meanwhile (the last go ahead's, flushed receives) are taken.
fn disconnected_within<B: Backend>(
    ctx: &mut Context<B>,
    e: &Ends,
    grace: Duration,
) -> Result<bool> {
    let end = ctx.now() + grace;
    let mut wcs = Vec::new();
    while ctx.now() < end {
        if let Some(RdmaCmEvent::Disconnected { .. }) = ctx.rdma_poll_cm_event() {
            return Ok(true);
        }
        wcs.clear();
        ctx.poll_cq(&e.cq, 1, &mut wcs)?;
    }
    Ok(false)
}

/// The server's half of a step: the client's buffer description, then an
/// RDMA READ of that buffer into ours (`read`) or a WRITE of ours to it;
/// `false` if the client disconnected instead.
fn serve_step<B: Backend>(
    ctx: &mut Context<B>,
    e: &Ends,
    o: &RpingOpts,
    read: bool,
    limit: Duration,
) -> Result<bool> {
    let Got::Done = wait(ctx, e, RECV, limit)? else {
        return Ok(false);
    };
    let (remote_addr, rkey, len) = info(ctx.mr(&e.recv)?);
    e.post_recv(ctx)?;
    let op = if read {
        SendOp::Read { remote_addr, rkey }
    } else {
        SendOp::Write { remote_addr, rkey }
    };
    rdma(ctx, e, op, len.min(o.size), limit)?;
    Ok(true)
}

/// An RDMA READ into, or WRITE from, the server's buffer; waits for it.
fn rdma<B: Backend>(
    ctx: &mut Context<B>,
    e: &Ends,
    op: SendOp,
    len: u32,
    limit: Duration,
) -> Result<()> {
    let sge = e.rdma.sge(0, len).context("the ping is larger than -S")?;
    ctx.post_send(&e.qp, SendWr::new(RDMA, op, Payload::sge(sge)))?;
    match wait(ctx, e, RDMA, limit)? {
        Got::Done => Ok(()),
        Got::Disconnected => bail!("disconnected during an RDMA operation"),
    }
}

/// A buffer description: address, R_Key, size.
fn info(b: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(b[..8].try_into().expect("16 bytes")),
        u32::from_be_bytes(b[8..12].try_into().expect("16 bytes")),
        u32::from_be_bytes(b[12..16].try_into().expect("16 bytes")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback::{self, LoopbackPort};
    use crate::backend::WallClock;
    use crate::verbs::ContextConfig;
    use crate::wire::MacAddr;
    use core::net::Ipv4Addr;

    /// rping's bytes (tests/vectors' rping_cm.client.txt: `-S 100`).
    #[test]
    fn ping_data_is_rpings() {
        let d = ping_data(1, b'B', 100);
        assert_eq!(d.len(), 100);
        assert_eq!(
            text(&d),
            "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]"
        );
    }

    fn ctx(port: LoopbackPort, last: u8) -> Context<LoopbackPort> {
        let cfg = ContextConfig::new(
            MacAddr([2, 0, 0, 0, 0, last]),
            Ipv4Addr::new(198, 18, 0, last).into(),
        );
        Context::open(port, Box::new(WallClock::new()), cfg).unwrap()
    }

    /// A server on its own thread (198.18.0.2 on `port`): its result and
    /// what it printed.
    fn serve_on(
        port: LoopbackPort,
        o: RpingOpts,
    ) -> std::thread::JoinHandle<(Result<RpingReport>, String)> {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let r = run(&mut ctx(port, 2), &o, &mut out);
            (r, String::from_utf8(out).unwrap())
        })
    }

    /// Server and client on two threads over an in-process link: three
    /// pings, validated, printed as rping prints them.
    #[test]
    fn server_and_client_ping_over_a_loopback_link() {
        let _one = crate::tools::spinning_pair();
        let (pa, pb) = loopback::pair(256, 4352);
        let o = RpingOpts {
            count: 3,
            size: 100,
            verbose: true,
            validate: true,
            timeout: std::time::Duration::from_secs(20),
            ..RpingOpts::default()
        };
        let server = serve_on(pa, o.clone());
        let oc = RpingOpts {
            server: false,
            addr: Ipv4Addr::new(198, 18, 0, 2).into(),
            ..o
        };
        // The client tries again until the server listens.
        let mut out = Vec::new();
        let rc = run(&mut ctx(pb, 3), &oc, &mut out);
        let rc = rc.unwrap_or_else(|e| panic!("client: {e:#}"));
        let (rs, out_s) = server.join().unwrap();
        let rs = rs.unwrap_or_else(|e| panic!("server: {e:#}"));
        let out_c = String::from_utf8(out).unwrap();
        assert_eq!((rc.pings, rc.bad, rs.pings), (3, 0, 3));
        assert!(out_c.contains("ping data: rdma-ping-2: CDEFG"), "{out_c}");
        assert!(out_c.ends_with("client DISCONNECT EVENT...\n"), "{out_c}");
        assert!(
            out_s.contains("server ping data: rdma-ping-0: ABCDE"),
            "{out_s}"
        );
        assert!(out_s.ends_with("server DISCONNECT EVENT...\n"), "{out_s}");
    }

    /// The client's DREQ never arrives: a server given `-C` still ends,
    /// `LAST_PING_GRACE` after the last ping, with every ping served.
    #[test]
    fn a_server_with_a_count_ends_when_the_clients_dreq_is_lost() {
        let _one = crate::tools::spinning_pair();
        let (pa, pb) = loopback::pair(256, 4352);
        let o = RpingOpts {
            count: 2,
            size: 64,
            verbose: true,
            timeout: std::time::Duration::from_secs(20),
            ..RpingOpts::default()
        };
        let server = serve_on(pa, o.clone());
        let oc = RpingOpts {
            server: false,
            addr: Ipv4Addr::new(198, 18, 0, 2).into(),
            // The client gives up waiting for its DREP.
            timeout: std::time::Duration::from_secs(2),
            ..o
        };
        let cfg = ContextConfig::new(
            MacAddr([2, 0, 0, 0, 0, 3]),
            Ipv4Addr::new(198, 18, 0, 3).into(),
        );
        // A CM MAD (to QP1) whose attribute ID is the DREQ's, 0x0015:
        // IPv4, UDP, the BTH (destination QP at 5..8), the DETH, then the
        // MAD (attribute ID at 16..18).
        let dreq = |d: &[u8]| d.len() > 80 && d[47..50] == [0, 0, 1] && d[78..80] == [0, 0x15];
        let port = loopback::Lossy::new(pb, dreq);
        let mut c = Context::open(port, Box::new(WallClock::new()), cfg).unwrap();
        // Its DREQ unanswered, the client ends on its timeout (or the
        // CM's, as disconnected): either is fine here.
        let mut out_c = Vec::new();
        let _ = run(&mut c, &oc, &mut out_c);
        assert!(
            String::from_utf8(out_c).unwrap().contains("rdma-ping-1: "),
            "the client pinged twice"
        );
        drop(c);
        let started = std::time::Instant::now();
        let (rs, out_s) = server.join().unwrap();
        let rs = rs.unwrap_or_else(|e| panic!("server: {e:#}"));
        assert_eq!(rs.pings, 2);
        assert!(out_s.ends_with("server DISCONNECT EVENT...\n"), "{out_s}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
}
