//! A tool's control channel over RDMA-CM (perftest's `-R`,
//! `perftest_communication.c`'s `rdma_cm` data exchange): one RC QP
//! connected by RDMA-CM (no READs either way), whose messages are
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
    /// SENDs of ours taken as delivered without their completion: the
    /// peer's next message came first, which it writes only after reading
    /// ours. Their completions, when they come, are passed over.
    implied: std::cell::Cell<u32>,
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
            // Room for SENDs taken as delivered whose ACK was lost (see
            // `wait`): a resend of one is a duplicate to the peer, which
            // drops its bytes, so the buffer may hold the next message.
            max_send_wr: 4,
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
            implied: std::cell::Cell::new(0),
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
    /// the next wait for one, and ends the wait for the SEND: messages
    /// alternate, so the peer has read ours. Its ACK may have been lost,
    /// and the peer's process may end before our resend reaches it (the
    /// last exchange of a test), which would fail a SEND the peer had.
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
                let is_recv = wc.opcode == WcOpcode::Recv;
                // A SEND already taken as delivered: its late completion
                // (send completions come in the order posted).
                if !is_recv && self.implied.get() > 0 {
                    self.implied.set(self.implied.get() - 1);
                    continue;
                }
                ensure!(
                    wc.status == WcStatus::Success,
                    "the control channel failed: {} ({})",
                    wc.status,
                    wc.status as u32
                );
                if is_recv == recv {
                    return Ok(wc.byte_len);
                }
                if is_recv {
                    // The peer's answer before our SEND's completion.
                    self.early.set(Some(wc.byte_len));
                    self.implied.set(self.implied.get() + 1);
                    return Ok(0);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback::{self, Lossy};
    use crate::backend::WallClock;
    use crate::verbs::ContextConfig;
    use crate::wire::MacAddr;
    use core::net::Ipv4Addr;

    fn ctx<B: Backend>(port: B, last: u8) -> Context<B> {
        let cfg = ContextConfig::new(
            MacAddr([2, 0, 0, 0, 0, last]),
            Ipv4Addr::new(198, 18, 0, last).into(),
        );
        Context::open(port, Box::new(WallClock::new()), cfg).unwrap()
    }

    /// The server's ACKs are all lost, so no SEND of the client ever
    /// completes; each is taken as delivered when the server's answer
    /// comes, and the exchange ends, where the client would otherwise wait
    /// out its resends and fail once the server has gone.
    #[test]
    fn a_send_whose_ack_is_lost_is_delivered_by_the_peers_answer() {
        let _one = crate::tools::spinning_pair();
        let (pa, pb) = loopback::pair(256, 4352);
        let limit = Duration::from_secs(10);
        let server = std::thread::spawn(move || -> Result<Vec<Vec<u8>>> {
            // An RC ACK (BTH opcode 0x11 after IPv4 and UDP).
            let mut c = ctx(Lossy::new(pa, |d: &[u8]| d.len() > 54 && d[42] == 0x11), 2);
            let l = CmLink::accept(&mut c, 7000, limit)?;
            let mut got = Vec::new();
            for i in 0..3u8 {
                got.push(l.recv(&mut c, 8, limit)?);
                l.send(&mut c, &[i + 100; 8], limit)?;
            }
            l.close(&mut c);
            Ok(got)
        });
        let mut c = ctx(pb, 3);
        let l =
            CmLink::connect(&mut c, Ipv4Addr::new(198, 18, 0, 2).into(), 7000, 0, limit).unwrap();
        for i in 0..3u8 {
            l.send(&mut c, &[i; 8], limit).unwrap();
            assert_eq!(l.recv(&mut c, 8, limit).unwrap(), [i + 100; 8]);
        }
        assert_eq!(l.implied.get(), 3);
        l.close(&mut c);
        let got = server.join().unwrap().unwrap();
        assert_eq!(got, [[0u8; 8], [1; 8], [2; 8]]);
    }
}
