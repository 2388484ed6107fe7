//! RDMA-CM on a verbs context: connecting RC QPs by IP address and port as
//! librdmacm does (`rdma_listen`, `rdma_connect`, `rdma_accept`,
//! `rdma_reject`, `rdma_disconnect`, `rdma_get_cm_event`), over the
//! InfiniBand CM ([`crate::cm`]) whose MADs travel as UD SENDs between
//! QP1s (IBTA §13.5.1; RoCE v2 annex A17).
//!
//! The first RDMA-CM verb on a context sets up its general services QP:
//! QP1, a UD QP with Q_Key 0x80010000, 64 receives of 40 + 256 bytes, its
//! own CQ and region, and the context's CM agent (CA GUID: the EUI-64 of
//! the port's MAC, as rxe's node GUID). From then on every
//! [`Context::progress`] also moves the agent's MADs: received MADs in
//! (the sender's GID read from the GRH area), due CM timers, MADs out
//! through an address handle per peer (a MAD to a peer whose MAC is not
//! known yet waits for ARP / Neighbor Discovery without blocking).
//!
//! The QP steps are the kernel's rdma_cm's (`cma.c`, `cm.c`'s
//! `ib_cm_init_qp_attr`): a QP in RESET goes to INIT with remote READ and
//! WRITE access (`RDMA_PS_TCP`); the passive side programs RTR and RTS from
//! the REQ before it sends its REP; the active side programs them from the
//! REP, then sends the RTU. RTR takes `min_rnr_timer` 0 as Linux sets it;
//! RTS the REQ's (passive) or REP's (active) retry counts and the local
//! ACK timeout of the path. The path MTU is the smaller of the port's
//! active MTU and the one asked (`rdma_cm` takes the interface's).
//!
//! Not here yet: UD QPs over RDMA-CM (SIDR), the datapath-thread
//! `AppContext`, and `notify_comm_est` (a passive side whose RTU is lost
//! waits for the active side's resend of the RTU after its REP resend).

use super::{Context, Error, Qp};
use crate::backend::Backend;
use crate::cm::{self, CmAgent, CmConfig, CmEvent as AgentEvent, ConnId, MadPeer, OutMad};
use crate::host::neigh::Lookup;
use crate::time::Instant;
use crate::transport::ud::{GRH_LEN, GSI_QKEY, GSI_QPN};
use crate::transport::{
    Access, AddressVector, AhId, AttrMask, CqId, MrKeys, MrSpec, Mtu, Payload, QpAttr, QpCaps,
    QpState, QpType, Recovery, RecvWr, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus,
};
use crate::wire::caps;
use crate::wire::cma::{port_space, CmaHdr, ServiceId};
use crate::wire::{MacAddr, Psn};
use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};

/// Receives posted on QP1.
const GSI_SLOTS: usize = 64;
/// A receive: the GRH area and one MAD.
const SLOT: usize = GRH_LEN + crate::wire::mad::MAD_LEN;
/// Bytes of the application's data in a REQ after rdma_cm's header.
pub const REQ_PRIVATE_MAX: usize = 56;
/// Bytes of the application's data in a REP.
pub const REP_PRIVATE_MAX: usize = crate::wire::cm::private_len::REP;

/// The private data `data` with ferroce's capability tail for `recovery`
/// at the end of a message's `max` bytes, when it asks for selective
/// repeat (the application's data must then leave the tail's bytes
/// free); `data` alone otherwise.
fn with_caps(data: &[u8], max: usize, recovery: Recovery) -> Result<Vec<u8>, Error> {
    if recovery == Recovery::GoBackN {
        return Ok(data.to_vec());
    }
    let room = max - caps::LEN;
    if data.len() > room {
        return Err(Error::Cm(cm::CmError::PrivateDataTooLong {
            len: data.len(),
            max: room,
        }));
    }
    let mut v = vec![0u8; max];
    v[..data.len()].copy_from_slice(data);
    caps::emit(&mut v, caps::SELECTIVE_REPEAT);
    Ok(v)
}

/// What a peer's REQ or REP private data asks for: selective repeat when
/// it ends with ferroce's capability tail with that bit.
fn asked(private_data: &[u8]) -> Recovery {
    match caps::parse(private_data) {
        Some(b) if b & caps::SELECTIVE_REPEAT != 0 => Recovery::Selective,
        _ => Recovery::GoBackN,
    }
}

/// An RDMA-CM connection's handle (`rdma_cm_id` of a connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmConn(ConnId);

impl CmConn {
    /// Its local communication ID (as its CM messages carry it).
    pub fn comm_id(self) -> u32 {
        self.0.comm_id()
    }
}

/// What a connection asks or grants (`rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data for the peer: at most 56 bytes in a connect (after
    /// rdma_cm's 36-byte header), 196 in an accept, 148 in a reject.
    pub private_data: Vec<u8>,
    /// RDMA READs / atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA READs / atomics we issue at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits, 7 = forever).
    pub rnr_retry_count: u8,
    /// Loss recovery. In a connect or accept: what this end asks for;
    /// selective repeat runs only when both ends are ferroce and asked
    /// (ferroce's capability tail at the end of the REQ's and the REP's
    /// private data, [`crate::wire::caps`]; it takes 4 of the private
    /// data's bytes, so the application then has 52 in a connect and 192
    /// in an accept), otherwise the QP runs go-back-N. In a
    /// [`RdmaCmEvent::ConnectRequest`]: what the peer asked for.
    /// [`Context::query_qp`]'s address vector says what the QP runs.
    pub recovery: Recovery,
}

impl Default for ConnParam {
    /// librdmacm's usual values: no READs, retry and RNR retry 7.
    fn default() -> ConnParam {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            recovery: Recovery::GoBackN,
        }
    }
}

/// An RDMA-CM event (`rdma_cm_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaCmEvent {
    /// A peer connects to a port we listen on
    /// (`RDMA_CM_EVENT_CONNECT_REQUEST`): answer with
    /// [`Context::rdma_accept`] or [`Context::rdma_reject`].
    ConnectRequest {
        /// The new connection.
        conn: CmConn,
        /// The peer's address and source port (rdma_cm's header).
        from: (IpAddr, u16),
        /// The port it connected to.
        port: u16,
        /// What it asks: its private data (after rdma_cm's header), the
        /// READs it will issue (our `responder_resources`) and accept (our
        /// `initiator_depth`), its retry counts.
        param: ConnParam,
        /// Its QP number.
        remote_qpn: u32,
    },
    /// The connection is up (`RDMA_CM_EVENT_ESTABLISHED`); the REP's
    /// private data for the active side.
    Established {
        /// The connection.
        conn: CmConn,
        /// The peer's private data (the REP's, on the active side).
        private_data: Vec<u8>,
    },
    /// The peer refused (`RDMA_CM_EVENT_REJECTED`).
    Rejected {
        /// The connection.
        conn: CmConn,
        /// The REJ reason (IBTA §12.6.7; 28: the application's, 8: nobody
        /// listens on the port).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The REP came but our QP could not take its values
    /// (`RDMA_CM_EVENT_CONNECT_ERROR`); a REJ went back.
    ConnectError {
        /// The connection.
        conn: CmConn,
        /// Why the QP refused.
        error: String,
    },
    /// No answer through every resend (`RDMA_CM_EVENT_UNREACHABLE`).
    Unreachable {
        /// The connection.
        conn: CmConn,
    },
    /// The connection is down (`RDMA_CM_EVENT_DISCONNECTED`); answer a
    /// peer's with [`Context::rdma_disconnect`].
    Disconnected {
        /// The connection.
        conn: CmConn,
    },
    /// The connection's IDs are free again (`RDMA_CM_EVENT_TIMEWAIT_EXIT`).
    TimewaitExit {
        /// The connection.
        conn: CmConn,
    },
}

/// One connection as this side sees it.
#[derive(Debug)]
struct Conn {
    /// Our QP, once given (connect, accept).
    qpn: Option<u32>,
    /// The PSN our QP expects first (our REQ's / REP's starting PSN).
    rq_psn: u32,
    mtu: Mtu,
    peer: IpAddr,
    sgid_index: u8,
    param: ConnParam,
    /// The REQ, on the passive side until accepted.
    req: Option<Box<cm::ReqInfo>>,
    /// The REP's private data, on the active side until established.
    rep_private: Option<Vec<u8>>,
}

/// The general services QP and the CM agent of a context.
#[derive(Debug)]
pub(super) struct Gsi {
    agent: CmAgent,
    cq: CqId,
    mr: MrKeys,
    ahs: HashMap<(IpAddr, u8), AhId>,
    /// MADs waiting for their peer's MAC.
    waiting: VecDeque<OutMad>,
    events: VecDeque<RdmaCmEvent>,
    conns: HashMap<ConnId, Conn>,
    /// The source port of our next connect (rdma_cm binds an ephemeral one).
    next_port: u16,
}

/// The EUI-64 of a MAC: rxe's node GUID, and so the CA GUID its CM uses.
pub fn ca_guid(mac: MacAddr) -> u64 {
    let m = mac.0;
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

impl<B: Backend> Context<B> {
    /// Sets up QP1 and the CM agent, once.
    fn gsi(&mut self) -> Result<&mut Gsi, Error> {
        if self.cm.is_none() {
            let g = self.open_gsi()?;
            self.cm = Some(Box::new(g));
        }
        Ok(self.cm.as_mut().expect("set above"))
    }

    fn open_gsi(&mut self) -> Result<Gsi, Error> {
        let dev = &mut self.host.dev;
        if !dev.config().shard.owns(GSI_QPN) {
            return Err(Error::Verb(crate::transport::Error::InvalidArgument(
                "RDMA-CM runs on a port's first datapath, which owns QP1 and gets its MADs",
            )));
        }
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4 * GSI_SLOTS)?;
        let mr = dev.reg_mr(MrSpec::new(pd, GSI_SLOTS * SLOT, Access::LOCAL_WRITE))?;
        let caps = QpCaps {
            qp_type: QpType::Ud,
            qpn: Some(GSI_QPN),
            max_send_wr: 2 * GSI_SLOTS as u32,
            max_recv_wr: GSI_SLOTS as u32,
            ..QpCaps::default()
        };
        let qp = dev.create_qp(pd, cq, cq, caps)?;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qkey: GSI_QKEY,
            ..QpAttr::default()
        };
        dev.modify_qp(qp, &a, AttrMask::UD_INIT)?;
        a.qp_state = QpState::Rtr;
        dev.modify_qp(qp, &a, AttrMask::STATE)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = 0;
        dev.modify_qp(qp, &a, AttrMask::UD_RTS)?;
        for slot in 0..GSI_SLOTS {
            dev.post_recv(qp, slot_recv(&mr, slot))?;
        }
        let cfg = dev.config();
        let mut cc = CmConfig::new(ca_guid(cfg.mac), cfg.gids.clone());
        // IDs that differ from run to run, as Linux's random seed makes them.
        let seed = random_u32(0);
        cc.id_seed = seed;
        cc.tid_hi = seed.rotate_left(13);
        Ok(Gsi {
            agent: CmAgent::new(cc),
            cq,
            mr,
            ahs: HashMap::new(),
            waiting: VecDeque::new(),
            events: VecDeque::new(),
            conns: HashMap::new(),
            next_port: 0xC000 | (seed as u16 & 0x3FFF),
        })
    }

    /// Listens for connections to `port` on every address of the port
    /// (`rdma_bind_addr` + `rdma_listen`, port space TCP).
    pub fn rdma_listen(&mut self, port: u16) -> Result<(), Error> {
        let sid = ServiceId {
            port_space: port_space::TCP,
            port,
        };
        self.gsi()?.agent.listen(sid.to_u64()).map_err(Error::Cm)
    }

    /// Connects `qp` (an RC QP in RESET or INIT) to whoever listens on
    /// `dst`:`port`, from our GID `sgid_index` (`rdma_resolve_addr`,
    /// `rdma_resolve_route`, `rdma_connect`): resolves the peer's MAC,
    /// sends the REQ; [`RdmaCmEvent::Established`] or a failure follows.
    pub fn rdma_connect(
        &mut self,
        qp: &Qp,
        dst: IpAddr,
        port: u16,
        sgid_index: u8,
        param: &ConnParam,
    ) -> Result<CmConn, Error> {
        self.mine(qp.ctx)?;
        if param.private_data.len() > REQ_PRIVATE_MAX {
            return Err(Error::Cm(cm::CmError::PrivateDataTooLong {
                len: param.private_data.len(),
                max: REQ_PRIVATE_MAX,
            }));
        }
        let src = self.query_gid(sgid_index)?.ip;
        let dst = dst.to_canonical();
        self.resolve(dst)?;
        self.qp_to_init(qp.qpn, param.responder_resources)?;
        let mtu = self.active_mtu;
        let rq_psn = random_psn(qp.qpn);
        let g = self.gsi()?;
        let src_port = g.next_port;
        g.next_port = 0xC000 | (g.next_port.wrapping_add(1) & 0x3FFF);
        let hdr = CmaHdr { src_port, src, dst };
        let mut private = vec![0u8; CmaHdr::LEN];
        hdr.emit(&mut private)
            .map_err(|e| Error::Cm(cm::CmError::Field(e)))?;
        private.extend_from_slice(&with_caps(
            &param.private_data,
            REQ_PRIVATE_MAX,
            param.recovery,
        )?);
        let sid = ServiceId {
            port_space: port_space::TCP,
            port,
        };
        let mut p = cm::ConnectParams::new(sid.to_u64(), src, dst, qp.qpn, Psn::new(rq_psn));
        p.path_mtu = mtu as u8;
        p.responder_resources = param.responder_resources;
        p.initiator_depth = param.initiator_depth;
        p.retry_count = param.retry_count;
        p.rnr_retry_count = param.rnr_retry_count;
        p.private_data = private;
        let now = self.clock.now();
        let g = self.gsi()?;
        let id = g.agent.connect(now, p).map_err(Error::Cm)?;
        g.conns.insert(
            id,
            Conn {
                qpn: Some(qp.qpn),
                rq_psn,
                mtu,
                peer: dst,
                sgid_index,
                param: param.clone(),
                req: None,
                rep_private: None,
            },
        );
        self.progress();
        Ok(CmConn(id))
    }

    /// Accepts a connection request with `qp` (`rdma_accept`): the QP goes
    /// to RTR and RTS with the REQ's values, then the REP goes out;
    /// [`RdmaCmEvent::Established`] follows the peer's RTU.
    pub fn rdma_accept(&mut self, conn: CmConn, qp: &Qp, param: &ConnParam) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        let (req, sgid_index) = {
            let g = self.gsi()?;
            let c = g
                .conns
                .get_mut(&conn.0)
                .ok_or(Error::Cm(cm::CmError::NoSuchConn))?;
            let req = c.req.take().ok_or(Error::Cm(cm::CmError::NoSuchConn))?;
            (req, c.sgid_index)
        };
        let mtu = Mtu::ALL
            .into_iter()
            .find(|m| *m as u8 == req.path_mtu)
            .unwrap_or(Mtu::Mtu1024)
            .min(self.active_mtu);
        let rq_psn = random_psn(qp.qpn);
        let max = self.host.dev.config().max_qp_rd_atom;
        let resp = param
            .responder_resources
            .min(req.responder_resources)
            .min(max);
        let init = param.initiator_depth.min(req.initiator_depth).min(max);
        let peer = req.from.gid.to_canonical();
        let recovery = param.recovery.agreed(asked(&req.private_data));
        let private_data = with_caps(&param.private_data, REP_PRIVATE_MAX, recovery)?;
        let steps = ProgramQp {
            peer,
            sgid_index,
            mtu,
            remote_qpn: req.remote_qpn,
            rq_psn,
            sq_psn: req.starting_psn.value(),
            max_dest_rd_atomic: resp,
            max_rd_atomic: init,
            timeout: req.path.local_ack_timeout,
            retry_cnt: req.retry_count,
            rnr_retry: req.rnr_retry_count,
            recovery,
        };
        self.qp_to_init(qp.qpn, resp)?;
        self.program(qp.qpn, &steps)?;
        let mut a = cm::AcceptParams::new(qp.qpn, Psn::new(rq_psn));
        a.responder_resources = resp;
        a.initiator_depth = init;
        a.rnr_retry_count = param.rnr_retry_count;
        a.private_data = private_data;
        let now = self.clock.now();
        let g = self.gsi()?;
        g.agent.accept(now, conn.0, a).map_err(Error::Cm)?;
        if let Some(c) = g.conns.get_mut(&conn.0) {
            c.qpn = Some(qp.qpn);
            c.rq_psn = rq_psn;
            c.mtu = mtu;
            c.param = param.clone();
        }
        self.progress();
        Ok(())
    }

    /// Refuses a connection request (`rdma_reject`): REJ with reason
    /// "consumer defined" (28) and `private_data`.
    pub fn rdma_reject(&mut self, conn: CmConn, private_data: &[u8]) -> Result<(), Error> {
        let now = self.clock.now();
        let g = self.gsi()?;
        g.agent
            .reject(now, conn.0, cm::reason::CONSUMER_DEFINED, private_data)
            .map_err(Error::Cm)?;
        g.conns.remove(&conn.0);
        self.progress();
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the connection's QP goes to ERR
    /// (its work requests flush), and a DREQ goes out, or the DREP that
    /// answers the peer's DREQ.
    pub fn rdma_disconnect(&mut self, conn: CmConn) -> Result<(), Error> {
        let now = self.clock.now();
        let g = self.gsi()?;
        let qpn = g.conns.get(&conn.0).and_then(|c| c.qpn);
        g.agent.disconnect(now, conn.0).map_err(Error::Cm)?;
        if let Some(q) = qpn {
            let err = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            let _ = self.host.dev.modify_qp(q, &err, AttrMask::STATE);
        }
        self.progress();
        Ok(())
    }

    /// The next RDMA-CM event, driving the port until one comes or
    /// `timeout` passes (`rdma_get_cm_event` with a timeout).
    pub fn rdma_get_cm_event(&mut self, timeout: crate::time::Duration) -> Option<RdmaCmEvent> {
        self.gsi().ok()?;
        self.progress_until(timeout, |c| {
            c.cm.as_ref().is_some_and(|g| !g.events.is_empty())
        });
        self.cm.as_mut()?.events.pop_front()
    }

    /// The next RDMA-CM event after one round on the port, if any (the
    /// non-blocking `rdma_get_cm_event`).
    pub fn rdma_poll_cm_event(&mut self) -> Option<RdmaCmEvent> {
        self.gsi().ok()?;
        self.progress();
        self.cm.as_mut()?.events.pop_front()
    }

    /// Until when a peer may still send again a DREQ this context answered
    /// (its DREP lost): Linux's CM answers from the kernel after the
    /// process ended, ours only while the context is driven. `None`: no
    /// DREQ answered. See [`cm::CmAgent::answering_until`].
    pub fn rdma_cm_answering_until(&self) -> Option<Instant> {
        self.cm.as_ref()?.agent.answering_until()
    }

    /// The CM agent's counters (malformed MADs, resends, REJs by reason).
    pub fn cm_counters(&self) -> Option<&cm::CmCounters> {
        self.cm.as_ref().map(|g| g.agent.counters())
    }

    /// Takes `qp` from RESET to INIT as librdmacm's `rdma_create_qp`
    /// leaves it, so that receives can be posted before connecting: remote
    /// WRITE access, and READ and atomics too if it will accept any
    /// (`responder_resources` > 0, as Linux's `cm_init_qp_init_attr`). A QP
    /// already past RESET is left as it is. `rdma_connect` and
    /// `rdma_accept` do this themselves.
    pub fn rdma_init_qp(&mut self, qp: &Qp, responder_resources: u8) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        self.qp_to_init(qp.qpn, responder_resources)
    }

    fn qp_to_init(&mut self, qpn: u32, responder_resources: u8) -> Result<(), Error> {
        let (state, _) = self.host.dev.query_qp(qpn)?;
        if state == QpState::Reset {
            let mut access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
            if responder_resources > 0 {
                access = access | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
            }
            let a = QpAttr {
                qp_state: QpState::Init,
                qp_access_flags: access,
                ..QpAttr::default()
            };
            self.host.dev.modify_qp(qpn, &a, AttrMask::RC_INIT)?;
        }
        Ok(())
    }

    /// INIT → RTR → RTS with `p` (the peer's MAC known).
    fn program(&mut self, qpn: u32, p: &ProgramQp) -> Result<(), Error> {
        let now = self.clock.now();
        let dmac = match self.host.neigh.lookup(p.peer, now) {
            Lookup::Found(m) => m,
            _ => self.resolve(p.peer)?,
        };
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: p.mtu,
            dest_qp_num: p.remote_qpn,
            rq_psn: p.rq_psn,
            max_dest_rd_atomic: p.max_dest_rd_atomic,
            min_rnr_timer: 0,
            ah_attr: Some(AddressVector {
                dgid: p.peer,
                dmac,
                sgid_index: p.sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                src_port: None,
                int_telemetry: false,
                recovery: p.recovery,
            }),
            ..QpAttr::default()
        };
        self.host.dev.modify_qp(qpn, &a, AttrMask::RC_RTR)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = p.sq_psn;
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt.min(7);
        a.rnr_retry = p.rnr_retry.min(7);
        a.max_rd_atomic = p.max_rd_atomic;
        self.host.dev.modify_qp(qpn, &a, AttrMask::RC_RTS)?;
        Ok(())
    }

    /// One round of the CM: MADs received on QP1 in, due timers, MADs
    /// out, agent events turned into QP steps and [`RdmaCmEvent`]s.
    /// Returns whether it posted MADs to send.
    pub(super) fn cm_round(&mut self, now: Instant) -> bool {
        let Some(mut g) = self.cm.take() else {
            return false;
        };
        self.cm_receive(&mut g, now);
        if g.agent.poll_timeout().is_some_and(|t| t <= now) {
            g.agent.handle_timeout(now);
        }
        while let Some(ev) = g.agent.poll_event() {
            self.cm_event(&mut g, now, ev);
        }
        while let Some(m) = g.agent.poll_transmit() {
            g.waiting.push_back(m);
        }
        let posted = self.cm_send(&mut g, now);
        self.cm = Some(g);
        posted
    }

    fn cm_receive(&mut self, g: &mut Gsi, now: Instant) {
        let mut wcs = Vec::new();
        self.host.dev.poll_cq(g.cq, 4 * GSI_SLOTS, &mut wcs);
        for wc in wcs {
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = wc.wr_id as usize;
            if wc.status == WcStatus::Success {
                if let Some(mem) = self.host.dev.mr(g.mr.lkey) {
                    let b = &mem[slot * SLOT..(slot + 1) * SLOT];
                    let (from, to) = grh_addrs(&b[..GRH_LEN]);
                    let peer = MadPeer {
                        gid: from,
                        local_gid: to,
                        qpn: wc.src_qp.unwrap_or(GSI_QPN),
                        pkey: crate::wire::bth::DEFAULT_PKEY,
                    };
                    let len = (wc.byte_len as usize).min(SLOT);
                    g.agent.handle(now, peer, &b[GRH_LEN..len]);
                }
            }
            if wc.status != WcStatus::WrFlushErr {
                let _ = self.host.dev.post_recv(GSI_QPN, slot_recv(&g.mr, slot));
            }
        }
    }

    fn cm_send(&mut self, g: &mut Gsi, now: Instant) -> bool {
        let mut keep = VecDeque::new();
        let mut posted = false;
        while let Some(m) = g.waiting.pop_front() {
            let to = m.to.gid.to_canonical();
            let sgid = self
                .host
                .dev
                .config()
                .gids
                .iter()
                .position(|x| *x == m.to.local_gid.to_canonical())
                .unwrap_or(0) as u8;
            let ah = match g.ahs.get(&(to, sgid)) {
                Some(&ah) => ah,
                None => match self.host.neigh.lookup(to, now) {
                    Lookup::Found(dmac) => {
                        let av = AddressVector {
                            dgid: to,
                            dmac,
                            sgid_index: sgid,
                            hop_limit: 64,
                            traffic_class: 0,
                            flow_label: 0,
                            src_port: None,
                            recovery: crate::transport::Recovery::GoBackN,
                            int_telemetry: false,
                        };
                        match self.host.dev.create_ah(&av) {
                            Ok(ah) => {
                                g.ahs.insert((to, sgid), ah);
                                ah
                            }
                            Err(_) => continue,
                        }
                    }
                    // The MAD waits for the neighbour's answer; a failed
                    // lookup drops it (the agent resends or times out).
                    Lookup::Failed => continue,
                    _ => {
                        keep.push_back(m);
                        continue;
                    }
                },
            };
            let dest = UdDest {
                ah,
                remote_qpn: GSI_QPN,
                remote_qkey: GSI_QKEY,
            };
            let mut wr = SendWr::ud(0, SendOp::Send, Payload::Inline(m.mad.to_vec()), dest);
            wr.signaled = false;
            if self.host.dev.post_send(GSI_QPN, wr).is_err() {
                keep.push_back(m);
            } else {
                posted = true;
            }
        }
        g.waiting = keep;
        posted
    }

    fn cm_event(&mut self, g: &mut Gsi, now: Instant, ev: AgentEvent) {
        let out = match ev {
            AgentEvent::ConnectRequest { id, info } => {
                let hdr = CmaHdr::parse(&info.private_data).ok();
                let port = ServiceId::from_u64(info.service_id).map_or(0, |s| s.port);
                let sgid_index = self
                    .host
                    .dev
                    .config()
                    .gids
                    .iter()
                    .position(|x| *x == info.from.local_gid.to_canonical())
                    .unwrap_or(0) as u8;
                let private = info.private_data.get(CmaHdr::LEN..).unwrap_or(&[]).to_vec();
                let param = ConnParam {
                    private_data: private,
                    responder_resources: info.responder_resources,
                    initiator_depth: info.initiator_depth,
                    retry_count: info.retry_count,
                    rnr_retry_count: info.rnr_retry_count,
                    recovery: asked(&info.private_data),
                };
                let from = (
                    hdr.map_or(info.from.gid, |h| h.src),
                    hdr.map_or(0, |h| h.src_port),
                );
                let remote_qpn = info.remote_qpn;
                g.conns.insert(
                    id,
                    Conn {
                        qpn: None,
                        rq_psn: 0,
                        mtu: Mtu::Mtu1024,
                        peer: info.from.gid.to_canonical(),
                        sgid_index,
                        param: param.clone(),
                        req: Some(info),
                        rep_private: None,
                    },
                );
                RdmaCmEvent::ConnectRequest {
                    conn: CmConn(id),
                    from,
                    port,
                    param,
                    remote_qpn,
                }
            }
            AgentEvent::ConnectReply { id, info } => {
                let Some(c) = g.conns.get(&id) else {
                    return;
                };
                let (Some(qpn), peer, sgid_index, mtu, rq_psn) =
                    (c.qpn, c.peer, c.sgid_index, c.mtu, c.rq_psn)
                else {
                    return;
                };
                // The peer may grant more READs than this device keeps.
                let max = self.host.dev.config().max_qp_rd_atom;
                let steps = ProgramQp {
                    peer,
                    sgid_index,
                    mtu,
                    remote_qpn: info.remote_qpn,
                    rq_psn,
                    sq_psn: info.starting_psn.value(),
                    max_dest_rd_atomic: info.responder_resources.min(max),
                    max_rd_atomic: info.initiator_depth.min(max),
                    timeout: info.local_ack_timeout,
                    retry_cnt: c.param.retry_count,
                    rnr_retry: info.rnr_retry_count,
                    // Selective repeat only if we asked and the REP says
                    // the peer did too.
                    recovery: c.param.recovery.agreed(asked(&info.private_data)),
                };
                if let Err(e) = self.program(qpn, &steps) {
                    // As librdmacm: the QP could not take the REP's values,
                    // so the connection is refused (REJ, consumer defined).
                    let _ = g.agent.reject(now, id, cm::reason::CONSUMER_DEFINED, &[]);
                    g.conns.remove(&id);
                    RdmaCmEvent::ConnectError {
                        conn: CmConn(id),
                        error: e.to_string(),
                    }
                } else {
                    // The agent sends the RTU and reports Established,
                    // which carries the REP's private data out.
                    if let Some(c) = g.conns.get_mut(&id) {
                        c.rep_private = Some(info.private_data.clone());
                    }
                    let _ = g.agent.establish(id);
                    return;
                }
            }
            AgentEvent::Established { id } => RdmaCmEvent::Established {
                conn: CmConn(id),
                private_data: g
                    .conns
                    .get_mut(&id)
                    .and_then(|c| c.rep_private.take())
                    .unwrap_or_default(),
            },
            AgentEvent::Rejected {
                id,
                reason,
                private_data,
                ..
            } => RdmaCmEvent::Rejected {
                conn: CmConn(id),
                reason,
                private_data,
            },
            AgentEvent::Unreachable { id, .. } => {
                g.conns.remove(&id);
                RdmaCmEvent::Unreachable { conn: CmConn(id) }
            }
            // As with librdmacm, the QP stays as it is until the
            // application calls rdma_disconnect.
            AgentEvent::Disconnected { id, .. } => RdmaCmEvent::Disconnected { conn: CmConn(id) },
            AgentEvent::TimewaitExit { id } => {
                g.conns.remove(&id);
                RdmaCmEvent::TimewaitExit { conn: CmConn(id) }
            }
        };
        g.events.push_back(out);
    }
}

#[cfg(test)]
#[path = "cm_tests.rs"]
mod tests;

/// The RTR and RTS values of a connection's QP.
struct ProgramQp {
    peer: IpAddr,
    sgid_index: u8,
    mtu: Mtu,
    remote_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    max_dest_rd_atomic: u8,
    max_rd_atomic: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    recovery: Recovery,
}

/// The receive of QP1's slot `slot`.
fn slot_recv(mr: &MrKeys, slot: usize) -> RecvWr {
    RecvWr {
        wr_id: slot as u64,
        sges: smallvec::smallvec![Sge {
            addr: mr.addr + (slot * SLOT) as u64,
            length: SLOT as u32,
            lkey: mr.lkey,
        }],
    }
}

/// The source and destination addresses in a UD receive's GRH area (the
/// IPv6 header, or 20 zero bytes and the IPv4 header).
fn grh_addrs(g: &[u8]) -> (IpAddr, IpAddr) {
    if g[20] >> 4 == 4 && g[..20].iter().all(|&b| b == 0) {
        let a = |i: usize| IpAddr::from([g[i], g[i + 1], g[i + 2], g[i + 3]]);
        (a(32), a(36))
    } else {
        let a = |i: usize| {
            let mut x = [0u8; 16];
            x.copy_from_slice(&g[i..i + 16]);
            IpAddr::from(x).to_canonical()
        };
        (a(8), a(24))
    }
}

/// A random 24-bit PSN (or the low 24 bits of any random need): the
/// wall clock, the process and `salt` mixed (splitmix64's finaliser).
pub fn random_psn(salt: u32) -> u32 {
    random_u32(salt) & 0xFF_FFFF
}

fn random_u32(salt: u32) -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = CALLS.fetch_add(1, Ordering::Relaxed) as u64;
    let mut x = t ^ ((std::process::id() as u64) << 32) ^ ((salt as u64) << 13) ^ (n << 47);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x as u32
}
