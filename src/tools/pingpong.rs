//! `ferroce pingpong` and `ferroce ud-pingpong`: rdma-core's
//! `ibv_rc_pingpong` and `ibv_ud_pingpong` on a ferroce host, the same on
//! the wire and in their TCP exchange, so that either end can be the other
//! tool.
//!
//! As `ibv_rc_pingpong` does (rdma-core `libibverbs/examples/rc_pingpong.c`):
//! a QP with local-write access only, a random 24-bit first PSN, `rx_depth`
//! receives posted (and topped up), SEND messages of `size` bytes of 0x7b;
//! the client sends first, each side sends its next message once its last
//! send and a receive have completed; `iters` each way. Connection:
//! path MTU as asked, `min_rnr_timer` 12, `max_dest_rd_atomic` 1, timeout
//! 14, `retry_cnt` 7, `rnr_retry` 7, `max_rd_atomic` 1. The exchange is
//! [`crate::tools::oob::pingpong`]: the client writes its address, reads the
//! server's, writes `done`; the server reads, connects, writes, reads
//! `done`. The peer's MAC comes from ARP (the verbs context resolves the
//! GID's address when the QP moves to RTR). As in rc_pingpong.c, the QP
//! goes to INIT and its receives are posted before the exchange: the peer
//! may send as soon as it has our address, and a SEND that finds no
//! receive is answered with an RNR NAK (IBTA §9.7.5.2.8).
//!
//! With [`QpType::Ud`] it is `ibv_ud_pingpong` (`ud_pingpong.c`): a UD QP
//! with Q_Key 0x11111111 ([`UD_QKEY`]), a buffer of `size` + 40 bytes of
//! 0x7b, receives of all of it (the GRH area first), SENDs of its last
//! `size` bytes to the peer's QP through an address handle made once the
//! peer's GID is known (the server before it answers, the client after the
//! exchange), and no path MTU: `size` must fit the port's MTU. Its hop
//! limit is 64, not the 1 ud_pingpong.c asks: on RoCE the kernel replaces
//! an address handle's hop limit with its route's (`ib_resolve_eth_dmac`),
//! and rxe's datagrams carry 64. A lost datagram stalls the ping-pong, as
//! it stalls `ibv_ud_pingpong`: the tool has no retry.

use super::exchange::{random_psn, Channel};
use crate::backend::Backend;
use crate::time::Duration;
use crate::tools::oob::pingpong;
use crate::transport::connect::init_attr;
use crate::transport::{
    Access, AddressVector, AttrMask, Mtu, Payload, QpAttr, QpCaps, QpCounters, QpState, QpType,
    RecvWr, SendOp, SendWr, WcStatus,
};
use crate::verbs::{Ah, ConnectParams, Context, Cq, Mr, Pd, Qp};
use crate::wire::ip_of;
use anyhow::{bail, ensure, Context as _, Result};
use core::net::IpAddr;
use std::io::Write;
use std::net::SocketAddr;

/// The byte `ibv_rc_pingpong` fills its buffer with.
pub const FILL: u8 = 0x7b;

/// The Q_Key of `ibv_ud_pingpong`'s QPs (and of every datagram it sends).
pub const UD_QKEY: u32 = 0x1111_1111;

/// The GRH area in front of a UD receive ([`crate::transport::ud::GRH_LEN`]).
const GRH: u32 = crate::transport::ud::GRH_LEN as u32;

/// What to run (`ibv_rc_pingpong`'s options and defaults).
#[derive(Debug, Clone)]
pub struct PingpongOpts {
    /// `-s`: bytes per message.
    pub size: u32,
    /// `-n`: messages each way.
    pub iters: u32,
    /// `-m`: path MTU.
    pub mtu: Mtu,
    /// `-r`: receives posted.
    pub rx_depth: u32,
    /// `-p`: the TCP port of the exchange.
    pub tcp_port: u16,
    /// The server accepts on this listener instead of `tcp_port`, when
    /// the caller bound one.
    pub listener: Option<std::sync::Arc<std::net::TcpListener>>,
    /// `-g`: the GID index.
    pub gid_index: u8,
    /// Give up after this long (the exchange and the run each).
    pub timeout: std::time::Duration,
    /// RC (`ibv_rc_pingpong`) or UD (`ibv_ud_pingpong`, which ignores
    /// `mtu`).
    pub qp_type: QpType,
}

impl Default for PingpongOpts {
    fn default() -> PingpongOpts {
        PingpongOpts {
            size: 4096,
            iters: 1000,
            mtu: Mtu::Mtu1024,
            rx_depth: 500,
            tcp_port: 18515,
            listener: None,
            gid_index: 0,
            timeout: std::time::Duration::from_secs(30),
            qp_type: QpType::Rc,
        }
    }
}

/// Which end.
#[derive(Debug, Clone)]
pub enum Role {
    /// Waits for a client on the TCP port (of every address).
    Server,
    /// Connects to the server at this address (TCP).
    Client(IpAddr),
}

/// What happened.
#[derive(Debug, Clone)]
pub struct PingpongReport {
    /// Our QP's address as sent in the exchange (LID 0, QPN, first PSN, GID).
    pub local: pingpong::Dest,
    /// The peer's address as received in the exchange.
    pub remote: pingpong::Dest,
    /// Context-clock time of the ping-pong, from once the receives are
    /// posted to the last completion (`iters` each way).
    pub elapsed: Duration,
    /// The QP's counters at the end, once the last ACK had 50 ms to leave.
    pub counters: QpCounters,
    /// Messages received whose bytes were not all 0x7b.
    pub bad_payloads: u32,
}

impl PingpongReport {
    /// `ibv_rc_pingpong`'s lines.
    pub fn print(&self, opts: &PingpongOpts, out: &mut dyn Write) -> std::io::Result<()> {
        let secs = self.elapsed.as_secs_f64();
        let bytes = opts.size as u64 * opts.iters as u64 * 2;
        writeln!(
            out,
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
            bytes,
            secs,
            bytes as f64 * 8.0 / secs.max(1e-9) / 1e6
        )?;
        writeln!(
            out,
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            opts.iters,
            secs,
            secs * 1e6 / opts.iters.max(1) as f64
        )
    }
}

/// `ibv_rc_pingpong`'s address line.
pub fn address_line(which: &str, d: &pingpong::Dest) -> String {
    address_line_of(QpType::Rc, which, d)
}

/// The address line of `ibv_rc_pingpong` or (for UD) `ibv_ud_pingpong`,
/// whose local line has a colon before the GID.
pub fn address_line_of(ty: QpType, which: &str, d: &pingpong::Dest) -> String {
    let gid = match ip_of(&d.gid) {
        IpAddr::V4(v4) => format!("::ffff:{v4}"),
        IpAddr::V6(v6) => v6.to_string(),
    };
    // "local address:" takes one more space, to line up with "remote".
    let sep = if which.len() < 6 { "  " } else { " " };
    let before_gid = if ty == QpType::Ud && which == "local" {
        ":"
    } else {
        ","
    };
    format!(
        "  {which} address:{sep}LID {:#06x}, QPN {:#08x}, PSN {:#08x}{before_gid} GID {gid}",
        d.lid, d.qpn, d.psn
    )
}

/// Runs one end on `ctx`, printing the address lines to `out`; the
/// caller prints the report.
pub fn run<B: Backend>(
    ctx: &mut Context<B>,
    role: &Role,
    opts: &PingpongOpts,
    out: &mut dyn Write,
) -> Result<PingpongReport> {
    ensure!(opts.size > 0, "-s: the message size must be positive");
    ensure!(opts.iters > 0, "-n: at least one iteration");
    ensure!(opts.rx_depth >= 2, "-r: rx_depth must be at least 2");
    if opts.qp_type == QpType::Ud {
        let mtu = ctx.query_port().active_mtu.bytes();
        ensure!(
            opts.size <= mtu,
            "-s {}: Requested size larger than port MTU ({mtu})",
            opts.size
        );
    } else {
        ctx.check_path_mtu(opts.mtu)
            .with_context(|| format!("-m {}", opts.mtu.bytes()))?;
    }
    let limit = Duration::from_nanos(opts.timeout.as_nanos() as u64);
    let o = Objects::create(ctx, opts)?;
    match opts.qp_type {
        QpType::Rc => ctx.modify_qp(&o.qp, &init_attr(Access::LOCAL_WRITE), AttrMask::RC_INIT)?,
        QpType::Ud => {
            let attr = QpAttr {
                qp_state: QpState::Init,
                qkey: UD_QKEY,
                ..QpAttr::default()
            };
            ctx.modify_qp(&o.qp, &attr, AttrMask::UD_INIT)?
        }
    }
    for _ in 0..opts.rx_depth {
        ctx.post_recv(&o.qp, o.recv(opts))?;
    }
    let gid = ctx.query_gid(opts.gid_index)?;
    let local = pingpong::Dest {
        lid: 0,
        qpn: o.qp.num(),
        psn: random_psn(0),
        gid: gid.gid,
    };
    let (remote, ah) = exchange(ctx, role, opts, limit, &o.qp, &local)?;
    writeln!(out, "{}", address_line_of(opts.qp_type, "local", &local))?;
    writeln!(out, "{}", address_line_of(opts.qp_type, "remote", &remote))?;
    let send = match &ah {
        Some(ah) => {
            let sge = o.mr.sge(GRH as usize, opts.size).context("our region")?;
            let dest = ah.dest(remote.qpn, UD_QKEY);
            SendWr::ud(SEND, SendOp::Send, Payload::sge(sge), dest)
        }
        None => {
            let sge = o.mr.sge(0, opts.size).context("our region")?;
            SendWr::new(SEND, SendOp::Send, Payload::sge(sge))
        }
    };
    let (elapsed, bad) = ping_pong(ctx, role, opts, limit, &o, &send)?;
    if let Some(ah) = ah {
        ctx.destroy_ah(ah).map_err(|e| e.error)?;
    }
    // Answer the peer's resends if our last ACK was lost.
    super::exchange::linger(ctx, &[&o.qp]);
    let counters = ctx.qp_counters(&o.qp)?;
    o.destroy(ctx)?;
    Ok(PingpongReport {
        local,
        remote,
        elapsed,
        counters,
        bad_payloads: bad,
    })
}

/// What one end runs on: a PD, one CQ for sends and receives, a region of
/// `size` bytes of [`FILL`] (UD: 40 more, for the GRH) with local-write
/// access, and the QP.
struct Objects {
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

impl Objects {
    fn create<B: Backend>(ctx: &mut Context<B>, opts: &PingpongOpts) -> Result<Objects> {
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(opts.rx_depth as usize + 2)?;
        let mr = ctx.reg_mr(&pd, recv_len(opts) as usize, Access::LOCAL_WRITE)?;
        ctx.mr_mut(&mr)?.fill(FILL);
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: opts.rx_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            qp_type: opts.qp_type,
            ..QpCaps::default()
        };
        let qp = ctx.create_qp(&pd, &cq, &cq, caps)?;
        Ok(Objects { pd, cq, mr, qp })
    }

    /// One receive into the whole region.
    fn recv(&self, opts: &PingpongOpts) -> RecvWr {
        let len = recv_len(opts);
        RecvWr {
            wr_id: RECV,
            sges: smallvec::smallvec![self.mr.sge(0, len).expect("the region is this long")],
        }
    }

    fn destroy<B: Backend>(self, ctx: &mut Context<B>) -> Result<()> {
        ctx.destroy_qp(self.qp).map_err(|e| e.error)?;
        let _ = ctx.dereg_mr(self.mr);
        let _ = ctx.destroy_cq(self.cq);
        let _ = ctx.dealloc_pd(self.pd);
        Ok(())
    }
}

/// Bytes a receive takes: the message, and for UD the GRH before it.
fn recv_len(opts: &PingpongOpts) -> u32 {
    match opts.qp_type {
        QpType::Rc => opts.size,
        QpType::Ud => opts.size + GRH,
    }
}

/// The TCP exchange of addresses, connecting `qp` to the peer's on the
/// way (the server before it answers, the client before it closes).
/// Returns the peer's address, and for UD the address handle to it.
fn exchange<B: Backend>(
    ctx: &mut Context<B>,
    role: &Role,
    opts: &PingpongOpts,
    limit: Duration,
    qp: &Qp,
    local: &pingpong::Dest,
) -> Result<(pingpong::Dest, Option<Ah>)> {
    let params = ConnectParams {
        mtu: opts.mtu,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        access: Access::LOCAL_WRITE,
        sgid_index: opts.gid_index,
        ..ConnectParams::default()
    };
    let connect = |ctx: &mut Context<B>, remote: &pingpong::Dest| -> Result<Option<Ah>> {
        if opts.qp_type == QpType::Ud {
            return ud_connect(ctx, qp, opts.gid_index, local.psn, remote).map(Some);
        }
        ctx.connect(
            qp,
            remote.qpn,
            ip_of(&remote.gid),
            &params,
            local.psn,
            remote.psn,
        )
        .context("connecting the QP")?;
        Ok(None)
    };
    let remote = match role {
        Role::Client(server) => {
            let addr = SocketAddr::new(*server, opts.tcp_port);
            let mut ch = Channel::connect(ctx, addr, limit)?;
            ch.write(ctx, &local.emit())?;
            let remote = pingpong::Dest::parse(&ch.read(ctx, pingpong::MSG_LEN)?)?;
            ch.write(ctx, pingpong::DONE)?;
            let ah = connect(ctx, &remote)?;
            ch.close(ctx);
            (remote, ah)
        }
        Role::Server => {
            let mut ch = Channel::accept(ctx, opts.listener.as_deref(), opts.tcp_port, limit)?;
            let remote = pingpong::Dest::parse(&ch.read(ctx, pingpong::MSG_LEN)?)?;
            let ah = connect(ctx, &remote)?;
            ch.write(ctx, &local.emit())?;
            let done = ch.read(ctx, pingpong::DONE.len())?;
            ensure!(done == pingpong::DONE, "the client did not say done");
            ch.close(ctx);
            (remote, ah)
        }
    };
    Ok(remote)
}

/// ud_pingpong.c's `pp_connect_ctx`: the UD QP to RTR and to RTS with
/// our first PSN, then an address handle to the peer's GID from ours at
/// `gid_index` (its MAC resolved now).
fn ud_connect<B: Backend>(
    ctx: &mut Context<B>,
    qp: &Qp,
    gid_index: u8,
    sq_psn: u32,
    remote: &pingpong::Dest,
) -> Result<Ah> {
    let mut attr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    ctx.modify_qp(qp, &attr, AttrMask::STATE)?;
    attr.qp_state = QpState::Rts;
    attr.sq_psn = sq_psn;
    ctx.modify_qp(qp, &attr, AttrMask::UD_RTS)?;
    let av = AddressVector {
        dgid: ip_of(&remote.gid),
        dmac: crate::wire::MacAddr([0; 6]),
        sgid_index: gid_index,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        src_port: None,
        int_telemetry: false,
        recovery: crate::transport::Recovery::GoBackN,
    };
    ctx.create_ah(&av).context("creating the address handle")
}

/// The work request IDs: rc_pingpong.c's `PINGPONG_RECV_WRID` and
/// `PINGPONG_SEND_WRID`.
const RECV: u64 = 1;
const SEND: u64 = 2;

/// The ping-pong of rc_pingpong.c's main loop, on a connected QP. Returns
/// how long it took and how many messages arrived with other bytes than
/// [`FILL`].
fn ping_pong<B: Backend>(
    ctx: &mut Context<B>,
    role: &Role,
    opts: &PingpongOpts,
    limit: Duration,
    o: &Objects,
    send_wr: &SendWr,
) -> Result<(Duration, u32)> {
    let Objects { cq, mr, qp, .. } = o;
    let send = || send_wr.clone();
    // A UD receive holds the GRH first; the message is what follows.
    let (at, want) = match opts.qp_type {
        QpType::Rc => (0, opts.size),
        QpType::Ud => (GRH as usize, opts.size + GRH),
    };
    // `run` posted rx_depth receives before the exchange.
    let mut routs = opts.rx_depth;
    let start = ctx.now();
    let end = start + limit;
    let mut pending_ops = RECV;
    if matches!(role, Role::Client(_)) {
        ctx.post_send(qp, send())?;
        pending_ops |= SEND;
    }
    let (mut rcnt, mut scnt, mut bad) = (0u32, 0u32, 0u32);
    let mut wcs = Vec::with_capacity(16);
    while rcnt < opts.iters || scnt < opts.iters {
        let now = ctx.now();
        if now > end {
            bail!(
                "timed out after {} with {scnt} of {} sent and {rcnt} received",
                limit,
                opts.iters
            );
        }
        wcs.clear();
        ctx.poll_cq(cq, 16, &mut wcs)?;
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                bail!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status,
                    wc.status as u32,
                    wc.wr_id
                );
            }
            match wc.wr_id {
                SEND => scnt += 1,
                RECV => {
                    routs -= 1;
                    if routs <= 1 {
                        while routs < opts.rx_depth {
                            ctx.post_recv(qp, o.recv(opts))?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                    let data = &ctx.mr(mr)?[at..];
                    if wc.byte_len != want || data.iter().any(|&b| b != FILL) {
                        bad += 1;
                    }
                }
                id => bail!("Completion for unknown wr_id {id}"),
            }
            pending_ops &= !wc.wr_id;
            if scnt < opts.iters && pending_ops == 0 {
                ctx.post_send(qp, send())?;
                pending_ops = RECV | SEND;
            }
        }
    }
    Ok((ctx.now() - start, bad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback::{self, LoopbackPort};
    use crate::backend::WallClock;
    use crate::verbs::ContextConfig;
    use crate::wire::gid_of;
    use crate::wire::MacAddr;
    use core::net::Ipv4Addr;

    fn ctx(port: LoopbackPort, last: u8) -> Context<LoopbackPort> {
        let cfg = ContextConfig::new(
            MacAddr([2, 0, 0, 0, 0, last]),
            Ipv4Addr::new(198, 18, 0, last).into(),
        );
        Context::open(port, Box::new(WallClock::new()), cfg).unwrap()
    }

    /// A path MTU the port's frames cannot carry is refused before anything
    /// is sent, naming what limits it.
    #[test]
    fn a_path_mtu_the_port_cannot_carry_is_an_error_naming_the_limit() {
        let (pa, _pb) = loopback::pair(16, 4352);
        let mut cfg = ContextConfig::new(
            MacAddr([2, 0, 0, 0, 0, 1]),
            Ipv4Addr::new(198, 18, 0, 1).into(),
        );
        cfg.max_frame = 1518;
        cfg.frame_source = "MTU 1500 of interface veth0".into();
        let mut c = Context::open(pa, Box::new(WallClock::new()), cfg).unwrap();
        let opts = PingpongOpts {
            mtu: Mtu::Mtu4096,
            ..PingpongOpts::default()
        };
        let e = run(&mut c, &Role::Server, &opts, &mut Vec::new()).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "-m 4096: path MTU 4096 is more than this port carries: path MTU at most 1024, \
             frames up to 1518 B (MTU 1500 of interface veth0)"
        );
    }

    /// Both ends of `qp_type` in one process, each on its own thread and
    /// end of an in-process link, the exchange over TCP on localhost:
    /// (the client's report and lines, the server's).
    fn both_ends(
        qp_type: QpType,
        size: u32,
    ) -> (PingpongOpts, PingpongReport, String, PingpongReport, String) {
        let _one = crate::tools::spinning_pair();
        let (pa, pb) = loopback::pair(1024, 4352);
        // A TCP listener of this test's own (port 0), so that no test
        // running beside it meets it on a port.
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let opts = PingpongOpts {
            size,
            iters: 200,
            tcp_port: l.local_addr().unwrap().port(),
            listener: Some(std::sync::Arc::new(l)),
            timeout: std::time::Duration::from_secs(20),
            qp_type,
            ..PingpongOpts::default()
        };
        let o2 = opts.clone();
        let server = std::thread::spawn(move || {
            let mut out = Vec::new();
            let r = run(&mut ctx(pa, 1), &Role::Server, &o2, &mut out);
            (r, String::from_utf8(out).unwrap())
        });
        // The client tries again until the server listens.
        let mut out = Vec::new();
        let client = "127.0.0.1".parse().unwrap();
        let rc = run(&mut ctx(pb, 2), &Role::Client(client), &opts, &mut out)
            .unwrap_or_else(|e| panic!("client: {e:#}"));
        let out_c = String::from_utf8(out).unwrap();
        let (rs, out_s) = server.join().unwrap();
        let rs = rs.unwrap_or_else(|e| panic!("server: {e:#}"));
        (opts, rc, out_c, rs, out_s)
    }

    /// A UD ping-pong as ibv_ud_pingpong's: every datagram arrives after
    /// its 40-byte GRH area, all 0x7b; the address lines as
    /// ud_pingpong.c prints them (tests/vectors' ud_pingpong.client.txt).
    #[test]
    fn ud_ping_pong_over_a_loopback_link() {
        let (opts, rc, out_c, rs, out_s) = both_ends(QpType::Ud, 1024);
        assert_eq!(rc.remote, rs.local);
        assert_eq!((rc.bad_payloads, rs.bad_payloads), (0, 0));
        assert_eq!((rc.counters.rdma_sends, rs.counters.rdma_recvs), (200, 200));
        assert_eq!(rc.counters.out_of_buffer + rs.counters.out_of_buffer, 0);
        assert!(out_c.contains(": GID ::ffff:198.18.0.2"), "{out_c}");
        assert!(
            out_s.contains("remote address: LID 0x0000, QPN 0x"),
            "{out_s}"
        );
        let mut lines = Vec::new();
        rc.print(&opts, &mut lines).unwrap();
        assert!(String::from_utf8(lines)
            .unwrap()
            .starts_with("409600 bytes in "));
    }

    /// A message larger than the port's MTU is refused as ud_pingpong.c
    /// refuses it.
    #[test]
    fn a_ud_message_above_the_port_mtu_is_refused() {
        let (pa, _pb) = loopback::pair(16, 4352);
        let opts = PingpongOpts {
            size: 8192,
            qp_type: QpType::Ud,
            ..PingpongOpts::default()
        };
        let e = run(&mut ctx(pa, 1), &Role::Server, &opts, &mut Vec::new()).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "-s 8192: Requested size larger than port MTU (4096)"
        );
    }

    #[test]
    fn server_and_client_ping_pong_over_a_loopback_link() {
        let (opts, rc, out_c, rs, out_s) = both_ends(QpType::Rc, 4096);
        assert_eq!(rc.remote, rs.local);
        assert_eq!(rs.remote, rc.local);
        assert_eq!((rc.bad_payloads, rs.bad_payloads), (0, 0));
        assert_eq!(rc.counters.rdma_sends, 200);
        assert_eq!(rs.counters.rdma_recvs, 200);
        // Receives are posted before the exchange: no SEND finds none.
        assert_eq!(
            (rc.counters.out_of_buffer, rs.counters.out_of_buffer),
            (0, 0)
        );
        assert!(
            out_c.starts_with("  local address:  LID 0x0000, QPN 0x"),
            "{out_c}"
        );
        assert!(out_s.contains("GID ::ffff:198.18.0.2"), "{out_s}");
        let mut lines = Vec::new();
        rc.print(&opts, &mut lines).unwrap();
        let text = String::from_utf8(lines).unwrap();
        assert!(text.starts_with("1638400 bytes in "), "{text}");
        assert!(text.contains("200 iters in "), "{text}");
        // The address lines as ibv_rc_pingpong prints them (its output in
        // tests/vectors' README: rc_pingpong.client.txt).
        let d = pingpong::Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xf365fe,
            gid: gid_of("198.18.0.3".parse().unwrap()),
        };
        assert_eq!(
            address_line("local", &d),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0xf365fe, GID ::ffff:198.18.0.3"
        );
        assert!(address_line("remote", &d).starts_with("  remote address: LID 0x0000,"));
    }
}
