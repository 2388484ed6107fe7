//! A tool's control channel over RDMA-CM (perftest's `-R`,
//! `perftest_communication.c`'s `rdma_cm` data exchange): one RC QP of
//! depth 1 connected by RDMA-CM (no READs either way), whose messages are
//! single SENDs of at most 56 bytes (the size of perftest's
//! `pingpong_dest`), strictly alternating: one receive is posted at a
//! time, again as soon as a message arrived, and each SEND waits for its
//! completion (the peer's ACK). The client writes first.
//!
//! Also here: the connect and accept of the tools' RDMA-CM connections,
//! and the client's retry while the server's port is not listened on yet.

use crate::backend::Backend;
use crate::time::Duration;
use crate::transport::{Access, Payload, QpCaps, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};
use crate::verbs::cm::{CmConn, ConnParam, RdmaCmEvent};
use crate::verbs::{Context, Cq, Mr, Pd, Qp};
use anyhow::{bail, ensure, Context as _, Result};
use core::net::IpAddr;

/// The largest message (perftest's `sizeof(struct pingpong_dest)`).
pub const MAX_MSG: usize = 56;

/// The control connection.
pub struct CmLink {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    rx: Mr,
    tx: Mr,
    conn: Option<CmConn>,
    /// A message that arrived while we waited for our SEND's completion
    /// (its ACK was late): its length, for the next `recv`.
    early: std::cell::Cell<Option<u32>>,
}

/// The next RDMA-CM event that `want` takes (others are set aside: the
/// ESTABLISHED of a connection already in use, say), or an error after
/// `limit`.
pub fn wait_event<B: Backend, T>(
    ctx: &mut Context<B>,
    limit: Duration,
    what: &str,
    mut want: impl FnMut(&RdmaCmEvent) -> Option<T>,
) -> Result<T> {
    let end = ctx.now() + limit;
    loop {
        let left = end.saturating_since(ctx.now());
        ensure!(left > Duration::ZERO, "{what}: no RDMA-CM event in {limit}");
        if let Some(e) = ctx.rdma_get_cm_event(left) {
            if let Some(v) = want(&e) {
                return Ok(v);
            }
            if let RdmaCmEvent::Rejected { .. }
            | RdmaCmEvent::Unreachable { .. }
            | RdmaCmEvent::ConnectError { .. } = &e
            {
                bail!("{what}: {e:?}");
            }
        }
    }
}

/// Keeps driving `ctx` while a peer may still send again a DREQ we
/// answered ([`Context::rdma_cm_answering_until`]: one of the peer's CM
/// waits after our last DREP), unless `done` takes an event that shows the
/// peer has finished first. A tool calls it before it ends: Linux's CM
/// answers from the kernel once its process has ended, ours does not, and
/// a peer whose DREP was lost would wait out all its resends (15 × 4.3 s
/// with rdma_cm's values) for a DISCONNECTED event.
pub fn answer_resent_dreqs<B: Backend>(
    ctx: &mut Context<B>,
    mut done: impl FnMut(&RdmaCmEvent) -> bool,
) {
    while let Some(until) = ctx.rdma_cm_answering_until() {
        let left = until.saturating_since(ctx.now());
        if left == Duration::ZERO {
            return;
        }
        if ctx.rdma_get_cm_event(left).is_some_and(|e| done(&e)) {
            return;
        }
    }
}

/// Connects `qp` to `addr`:`port`, trying again while nobody listens there
/// yet (REJ "invalid service ID"), as the tools' TCP clients try again
/// while the server does not listen; returns once it is established.
pub fn connect_retrying<B: Backend>(
    ctx: &mut Context<B>,
    qp: &Qp,
    addr: IpAddr,
    port: u16,
    gid_index: u8,
    param: &ConnParam,
    limit: Duration,
) -> Result<CmConn> {
    let end = ctx.now() + limit;
    loop {
        let conn = ctx.rdma_connect(qp, addr, port, gid_index, param)?;
        let left = end.saturating_since(ctx.now());
        let ev = ctx
            .rdma_get_cm_event(left)
            .with_context(|| format!("connecting to {addr}:{port}: no answer in {limit}"))?;
        match ev {
            RdmaCmEvent::Established { conn: c, .. } if c == conn => return Ok(conn),
            RdmaCmEvent::Rejected { reason: 8, .. } if ctx.now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            ev => bail!("connecting to {addr}:{port}: {ev:?}"),
        }
    }
}

/// Waits for a connection request on a port already listened on and
/// accepts it with `qp`.
pub fn accept<B: Backend>(
    ctx: &mut Context<B>,
    qp: &Qp,
    param: &ConnParam,
    limit: Duration,
) -> Result<(CmConn, ConnParam)> {
    let (conn, asked) = wait_event(ctx, limit, "waiting for a connection", |e| match e {
        RdmaCmEvent::ConnectRequest { conn, param, .. } => Some((*conn, param.clone())),
        _ => None,
    })?;
    ctx.rdma_accept(conn, qp, param)?;
    Ok((conn, asked))
}

impl CmLink {
    fn create<B: Backend>(ctx: &mut Context<B>) -> Result<CmLink> {
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(8)?;
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCaps::default()
        };
        let qp = ctx.create_qp(&pd, &cq, &cq, caps)?;
        let rx = ctx.reg_mr(&pd, MAX_MSG, Access::LOCAL_WRITE)?;
        let tx = ctx.reg_mr(&pd, MAX_MSG, Access::LOCAL_WRITE)?;
        ctx.rdma_init_qp(&qp, 0)?;
        let l = CmLink {
            pd,
            cq,
            qp,
            rx,
            tx,
            conn: None,
            early: std::cell::Cell::new(None),
        };
        l.post_recv(ctx)?;
        Ok(l)
    }

    /// The server's side: listens on `port` (if not yet) and takes the
    /// first connection.
    pub fn accept<B: Backend>(ctx: &mut Context<B>, port: u16, limit: Duration) -> Result<CmLink> {
        let mut l = CmLink::create(ctx)?;
        ctx.rdma_listen(port)
            .with_context(|| format!("listening on RDMA-CM port {port}"))?;
        eprintln!("listening on RDMA-CM port {port}");
        l.conn = Some(accept(ctx, &l.qp, &ConnParam::default(), limit)?.0);
        Ok(l)
    }

    /// The client's side: connects to `addr`:`port` from GID `gid_index`.
    pub fn connect<B: Backend>(
        ctx: &mut Context<B>,
        addr: IpAddr,
        port: u16,
        gid_index: u8,
        limit: Duration,
    ) -> Result<CmLink> {
        let mut l = CmLink::create(ctx)?;
        l.conn = Some(connect_retrying(
            ctx,
            &l.qp,
            addr,
            port,
            gid_index,
            &ConnParam::default(),
            limit,
        )?);
        Ok(l)
    }

    fn post_recv<B: Backend>(&self, ctx: &mut Context<B>) -> Result<()> {
        let wr = RecvWr {
            wr_id: 0,
            sges: smallvec::smallvec![self.rx.sge(0, MAX_MSG as u32).expect("56 bytes")],
        };
        Ok(ctx.post_recv(&self.qp, wr)?)
    }

    /// The next completion of a receive (`recv`) or of our SEND; a
    /// receive that completes first while we wait for the SEND is kept for
    /// the next wait for one.
    fn wait<B: Backend>(&self, ctx: &mut Context<B>, recv: bool, limit: Duration) -> Result<u32> {
        if recv {
            if let Some(n) = self.early.take() {
                return Ok(n);
            }
        }
        let end = ctx.now() + limit;
        let mut wcs = Vec::new();
        loop {
            wcs.clear();
            ctx.poll_cq(&self.cq, 1, &mut wcs)?;
            if let Some(wc) = wcs.first() {
                ensure!(
                    wc.status == WcStatus::Success,
                    "the control channel failed: {} ({})",
                    wc.status,
                    wc.status as u32
                );
                let is_recv = wc.opcode == WcOpcode::Recv;
                if is_recv == recv {
                    return Ok(wc.byte_len);
                }
                if is_recv {
                    self.early.set(Some(wc.byte_len));
                }
                continue;
            }
            ensure!(
                ctx.now() < end,
                "{} in {limit}",
                if recv {
                    "no message from the peer"
                } else {
                    "the peer took no message"
                }
            );
        }
    }

    /// SENDs `msg` and waits until it is acknowledged.
    pub fn send<B: Backend>(
        &self,
        ctx: &mut Context<B>,
        msg: &[u8],
        limit: Duration,
    ) -> Result<()> {
        ensure!(msg.len() <= MAX_MSG, "a control message of {} B", msg.len());
        ctx.mr_mut(&self.tx)?[..msg.len()].copy_from_slice(msg);
        let sge = self.tx.sge(0, msg.len() as u32).expect("fits");
        ctx.post_send(&self.qp, SendWr::new(1, SendOp::Send, Payload::sge(sge)))?;
        self.wait(ctx, false, limit)?;
        Ok(())
    }

    /// The peer's next message, `n` bytes of it (zeros past what came);
    /// the receive is posted again at once.
    pub fn recv<B: Backend>(
        &self,
        ctx: &mut Context<B>,
        n: usize,
        limit: Duration,
    ) -> Result<Vec<u8>> {
        let got = self.wait(ctx, true, limit)? as usize;
        let mut b = vec![0u8; n];
        let m = got.min(n).min(MAX_MSG);
        b[..m].copy_from_slice(&ctx.mr(&self.rx)?[..m]);
        self.post_recv(ctx)?;
        Ok(b)
    }

    /// The end: if we answered the peer's DREQs on the test connections,
    /// we wait until the peer closes this connection (perftest closes it
    /// once its test connections are down, so our DREPs came) or can no
    /// longer resend one ([`answer_resent_dreqs`]); then a DREQ on the
    /// control connection (perftest leaves it to process exit, which sends
    /// one DREQ), or the DREP to the peer's, a short wait for the answer,
    /// and the resources freed.
    pub fn close<B: Backend>(self, ctx: &mut Context<B>) {
        if let Some(c) = self.conn {
            answer_resent_dreqs(
                ctx,
                |e| matches!(e, RdmaCmEvent::Disconnected { conn } if *conn == c),
            );
            let _ = ctx.rdma_disconnect(c);
            let _ = wait_event(ctx, Duration::from_millis(300), "closing", |e| {
                matches!(e, RdmaCmEvent::Disconnected { conn } if *conn == c).then_some(())
            });
        }
        let _ = ctx.destroy_qp(self.qp);
        let _ = ctx.dereg_mr(self.rx);
        let _ = ctx.dereg_mr(self.tx);
        let _ = ctx.destroy_cq(self.cq);
        let _ = ctx.dealloc_pd(self.pd);
    }
}
