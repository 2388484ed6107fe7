//! The InfiniBand Communication Manager (IBTA Vol. 1 chapter 12), sans IO:
//! the agent that sets RC connections up and tears them down with CM MADs
//! (REQ, MRA, REJ, REP, RTU, DREQ, DREP) on QP1. It never reads a clock and
//! never does IO: it is handed `now`, fed the MADs QP1 received, and asked
//! for the MADs to send; the caller moves them (as the 256-byte payload of
//! a UD SEND to QP1, [`crate::wire::mad`]) and programs the QPs with what
//! the events say.
//!
//! # Driving an agent
//!
//! As for a transport device, with a `now` that never goes backwards:
//!
//! 1. [`CmAgent::handle`]`(now, from, mad)` for every MAD received on QP1
//!    (malformed ones are counted and dropped, never a panic);
//! 2. [`CmAgent::handle_timeout`]`(now)` once [`CmAgent::poll_timeout`]'s
//!    instant has come (resends, TimeWait's end);
//! 3. [`CmAgent::poll_transmit`] until `None`, sending each [`OutMad`] in
//!    order;
//! 4. [`CmAgent::poll_event`] until `None`, acting on each [`CmEvent`].
//!
//! The verbs ([`CmAgent::listen`], [`CmAgent::connect`],
//! [`CmAgent::accept`], [`CmAgent::establish`], [`CmAgent::reject`],
//! [`CmAgent::disconnect`], [`CmAgent::notify_comm_est`]) may be called
//! between any of these.
//!
//! # The state machine (IBTA §12.9)
//!
//! | side | on | from | to | sends |
//! | --- | --- | --- | --- | --- |
//! | active | `connect` | | REQ Sent | REQ, resent (§12.7) |
//! | active | MRA(REQ) | REQ Sent | MRA REQ Rcvd | waits the MRA's service timeout |
//! | active | REP | REQ Sent, MRA REQ Rcvd | REP Rcvd | event `ConnectReply` |
//! | active | `establish` | REP Rcvd, MRA REP Sent | Established | RTU |
//! | passive | REQ | (listening) | REQ Rcvd | event `ConnectRequest` |
//! | passive | `accept` | REQ Rcvd, MRA REQ Sent | REP Sent | REP, resent |
//! | passive | RTU or `notify_comm_est` | REP Sent, MRA REP Rcvd | Established | |
//! | either | `disconnect` | Established | DREQ Sent | DREQ, resent |
//! | either | DREQ | Established, REP Sent | DREQ Rcvd | event `Disconnected` |
//! | either | DREQ | DREQ Sent | TimeWait | DREP, event `Disconnected` |
//! | either | `disconnect` | DREQ Rcvd | TimeWait | DREP |
//! | either | DREP | DREQ Sent | TimeWait | event `Disconnected` |
//! | either | TimeWait over | TimeWait | (freed) | event `TimewaitExit` |
//!
//! A REJ received ends the handshake (event `Rejected`), resends that run
//! out end it as unreachable (event `Unreachable`); Linux resets such a
//! connection to idle, and so it is freed here, except where Linux goes
//! to TimeWait (a REJ "stale connection", a REJ after REP Rcvd or
//! Established, resends of a DREQ that ran out).
//!
//! # What follows Linux and what does not
//!
//! The rules are those of Linux's `drivers/infiniband/core/cm.c` as
//! rdma_cm (`cma.c`) drives it, which is what the rxe captures in
//! `tests/vectors/` were made with; each handler's doc names the case.
//!
//! - **Identifiers.** Local communication IDs are a counter XORed with a
//!   seed ([`CmConfig::id_seed`], Linux's `random_id_operand`), and a
//!   message's transaction ID is `tid_hi << 32 | local ID` (`cm_form_tid`),
//!   both laid out as Linux on a little-endian host writes them, so that
//!   the right seed gives a capture's IDs byte for byte. Answers carry the
//!   transaction ID of the message they answer (§13.4.6.4).
//! - **Timeouts** (§12.7). A REQ waits 2 × the path's packet life time
//!   plus the remote CM response timeout; a REP, and the passive side's
//!   DREQ, wait the REQ's local CM response timeout; the active side's
//!   DREQ waits as its REQ did. Each is sent at most `Max CM Retries` + 1
//!   times. The times are exact 4.096 µs × 2^x ([`cm_timeout`]) where
//!   Linux rounds them to 2^(x−8) ms.
//! - **MRA** (§12.6.6). None of the three captures holds one: rdma_cm
//!   never sends an MRA ahead, it only prepares one (Linux's
//!   `IB_CM_MRA_FLAG_DELAY`, in newer kernels `ib_prepare_cm_mra`) and
//!   sends it, service timeout 24 (≈ 68.7 s), when a duplicate REQ (or
//!   REP) shows that the peer is resending while the application has not
//!   answered.
//!   This agent does the same. An MRA received stretches the wait of the
//!   message it acknowledges to its service timeout plus the path's ACK
//!   timeout, for the rest of that message's resends (`cm_mra_handler`).
//! - **Duplicates.** A REQ is matched by the sender's communication ID
//!   and CA GUID. In REQ Rcvd or MRA REQ Sent it is answered with an MRA;
//!   in TimeWait with a REJ "stale connection"; in REP Sent with the REP
//!   again, where Linux sends nothing and waits for its own REP resend
//!   (a REQ resent means the REP was lost; answering saves a response
//!   timeout). A REP again gets the RTU again once established (an MRA
//!   while the application has not called `establish`), a DREQ again in
//!   TimeWait the DREP again.
//! - **Unknown peers.** A REQ for a service ID nobody listens on gets REJ
//!   "invalid service ID" (8); a REQ to a GID the agent does not have gets
//!   REJ "invalid GID" (12); a REQ or REP naming a QP another connection
//!   of that CA still uses gets REJ "stale connection" (10), and that
//!   connection, if established, a DREQ; a DREQ for no connection gets a
//!   DREP (`cm_issue_drep`). A REJ "timeout" of ours names our CA GUID
//!   in its ARI, by which the peer finds the connection (§12.6.7).
//! - **Disconnect.** As with rdma_cm, a DREQ received is reported
//!   (`Disconnected`) and the DREP is sent when the application calls
//!   [`CmAgent::disconnect`]; when the agent had sent its own DREQ (both
//!   sides closing at once) it answers at once, where Linux waits for the
//!   consumer.
//! - **Not handled**: LAP and APR (alternate paths; Linux refuses them on
//!   RoCE too), and SIDR (a SIDR_REQ is answered "service ID not
//!   supported"), peer-to-peer REQs.

mod conn;
mod counters;
mod event;
mod params;
pub mod reason;
mod rx;
mod timer;

#[cfg(test)]
mod tests;

pub use counters::{AttrCounts, CmCounters};
pub use event::{CmEvent, RepInfo, ReqInfo};
pub use params::{AcceptParams, CmConfig, ConnectParams};
pub use timer::{cm_ack_timeout, cm_timeout};

use crate::time::{Duration, Instant};
use crate::wire::cm::private_len;
use crate::wire::mad::{CmMad, MadError, GSI_QPN, MAD_LEN};
use conn::Conn;
use core::net::IpAddr;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A connection's handle: its local communication ID as it travels in the
/// messages (`Local Communication ID`, §12.6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub(crate) u32);

impl ConnId {
    /// The local communication ID, as the messages carry it.
    pub fn comm_id(self) -> u32 {
        self.0
    }

    /// The handle of local communication ID `comm_id` (as read from a
    /// message); it may name no connection.
    pub fn from_comm_id(comm_id: u32) -> ConnId {
        ConnId(comm_id)
    }
}

/// The two ends of a MAD on QP1: the peer's GID and the agent's own (as
/// IP addresses, A17 §17.4.1.1), the peer's QP (1, the GSI) and the P_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadPeer {
    /// The peer's GID: where a MAD came from, or goes to.
    pub gid: IpAddr,
    /// The agent's GID: where a MAD was sent to, or is sent from.
    pub local_gid: IpAddr,
    /// The peer's QP: a received MAD's source QP; always 1 (the GSI) for
    /// one to send, as Linux answers to QP1 whatever the source.
    pub qpn: u32,
    /// The P_Key of the UD SEND.
    pub pkey: u16,
}

/// A MAD to send to QP1 of `to.gid`, from `to.local_gid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutMad {
    /// Where it goes.
    pub to: MadPeer,
    /// The 256 bytes: the UD payload.
    pub mad: [u8; MAD_LEN],
}

/// A connection's state (IBTA §12.9, the passive and active sides'
/// state diagrams; Linux `enum ib_cm_state`). Idle and Listen are not
/// states of a connection here: an idle connection is freed, listening is
/// per service ID ([`CmAgent::listen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP, REJ or MRA.
    ReqSent,
    /// Active: the passive side sent an MRA for the REQ.
    MraReqRcvd,
    /// Passive: REQ received, the application has not answered.
    ReqRcvd,
    /// Passive: REQ received, an MRA sent for a duplicate of it.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU (or traffic).
    RepSent,
    /// Passive: the active side sent an MRA for the REP.
    MraRepRcvd,
    /// Active: REP received, the application has not called `establish`.
    RepRcvd,
    /// Active: REP received, an MRA sent for a duplicate of it.
    MraRepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the application has not called `disconnect`.
    DreqRcvd,
    /// Disconnected; the IDs stay reserved until it ends (§12.9).
    TimeWait,
}

/// What a verb refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No connection has that ID (never had, or it was freed).
    #[error("no such connection")]
    NoSuchConn,
    /// The connection's state does not allow the verb.
    #[error("not allowed in state {0:?}")]
    WrongState(CmState),
    /// Someone already listens on the service ID.
    #[error("already listening on service ID {0:#x}")]
    AlreadyListening(u64),
    /// Nobody listens on the service ID.
    #[error("not listening on service ID {0:#x}")]
    NotListening(u64),
    /// More private data than the message has room for.
    #[error("{len} bytes of private data, at most {max}")]
    PrivateDataTooLong {
        /// The length given.
        len: usize,
        /// The message's room.
        max: usize,
    },
    /// A value does not fit its field (a QPN over 24 bits, ...).
    #[error("a field is out of range: {0}")]
    Field(MadError),
}

/// A Communication Manager for one port: listeners, connections, the
/// MADs to send and the events to report. See the module docs.
#[derive(Debug)]
pub struct CmAgent {
    cfg: CmConfig,
    listening: BTreeSet<u64>,
    conns: BTreeMap<ConnId, Conn>,
    /// Every armed deadline: (when, whose).
    timers: BTreeSet<(Instant, ConnId)>,
    /// The counter of local IDs (Linux's `local_id_next`).
    next_id: u32,
    tx: VecDeque<OutMad>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
    /// Until when a peer may send again a DREQ this agent answered.
    answer_until: Option<Instant>,
}

/// `data` in a zeroed array of the message's private data length.
fn private<const N: usize>(data: &[u8]) -> Result<[u8; N], CmError> {
    if data.len() > N {
        return Err(CmError::PrivateDataTooLong {
            len: data.len(),
            max: N,
        });
    }
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    Ok(a)
}

impl CmAgent {
    /// An agent listening on nothing. Exponents over their field widths
    /// are clamped (timeouts to 31, retries to 15).
    pub fn new(mut cfg: CmConfig) -> CmAgent {
        cfg.response_timeout = cfg.response_timeout.min(31);
        cfg.ack_delay = cfg.ack_delay.min(31);
        cfg.mra_service_timeout = cfg.mra_service_timeout.min(31);
        cfg.max_retries = cfg.max_retries.min(15);
        CmAgent {
            cfg,
            listening: BTreeSet::new(),
            conns: BTreeMap::new(),
            timers: BTreeSet::new(),
            next_id: 0,
            tx: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
            answer_until: None,
        }
    }

    /// The agent's settings.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// Takes REQs for `service_id` (Linux `ib_cm_listen` with an exact
    /// match, as rdma_cm listens).
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listening.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    /// Stops taking REQs for `service_id`; its connections go on.
    pub fn unlisten(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listening.remove(&service_id) {
            return Err(CmError::NotListening(service_id));
        }
        Ok(())
    }

    /// Sends a REQ (Linux `ib_send_cm_req`, as `cma_connect_ib` fills it):
    /// the connection is in REQ Sent, and the REQ is resent until a REP,
    /// REJ or MRA comes.
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> Result<ConnId, CmError> {
        let private_data = private::<{ private_len::REQ }>(&p.private_data)?;
        let (id, raw) = self.peek_id();
        let own_tid = self.own_tid(raw);
        let req = conn::format_req(&self.cfg, id, &p, private_data);
        let out = self.emit(self.peer_of(&p), &CmMad::new(own_tid, req))?;
        self.next_id = self.next_id.wrapping_add(1);
        // 2 × packet life time + the remote's response time (Linux's
        // timeout_ms for a REQ).
        let life = cm_timeout(p.packet_life_time);
        let c = Conn {
            id,
            state: CmState::ReqSent,
            peer: out.to,
            tid: own_tid,
            own_tid,
            remote_comm_id: None,
            remote_ca_guid: 0,
            local_qpn: p.qpn,
            remote_qpn: 0,
            timeout: life.saturating_mul(2) + cm_timeout(self.cfg.response_timeout),
            max_retries: self.cfg.max_retries,
            // The passive side waits the response time our REQ gives
            // (Linux `cm_req_handler`).
            peer_wait: cm_timeout(self.cfg.response_timeout),
            av_timeout: (p.packet_life_time + 1).min(31),
            retry: None,
            due: None,
        };
        self.conns.insert(id, c);
        self.send_retried(now, id, out);
        Ok(id)
    }

    /// Answers a REQ with a REP (Linux `ib_send_cm_rep`): REP Sent, the
    /// REP resent until an RTU, traffic ([`CmAgent::notify_comm_est`]), a
    /// REJ or an MRA comes.
    pub fn accept(&mut self, now: Instant, id: ConnId, p: AcceptParams) -> Result<(), CmError> {
        let c = self.conn_in(id, &[CmState::ReqRcvd, CmState::MraReqSent])?;
        let private_data = private::<{ private_len::REP }>(&p.private_data)?;
        let mad = c.format_rep(&self.cfg, &p, private_data);
        let out = self.emit(c.peer, &mad)?;
        let c = self.conns.get_mut(&id).ok_or(CmError::NoSuchConn)?;
        c.state = CmState::RepSent;
        c.local_qpn = p.qpn;
        self.send_retried(now, id, out);
        Ok(())
    }

    /// Sends the RTU after a REP (Linux `ib_send_cm_rtu`): Established,
    /// with an `Established` event.
    pub fn establish(&mut self, id: ConnId) -> Result<(), CmError> {
        let c = self.conn_in(id, &[CmState::RepRcvd, CmState::MraRepSent])?;
        let (peer, rtu) = (c.peer, c.format_rtu());
        self.set_state(id, CmState::Established);
        self.send(peer, &rtu);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// Refuses a connection with a REJ of `reason` ([`reason`]; an
    /// application's own is [`reason::CONSUMER_DEFINED`]) carrying
    /// `private_data` (at most 148 bytes), as Linux's `ib_send_cm_rej`:
    /// before a REP was sent or after one was received the connection is
    /// freed; after our REP it goes to TimeWait.
    pub fn reject(
        &mut self,
        now: Instant,
        id: ConnId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        use CmState::*;
        let c = self.conn_in(
            id,
            &[
                ReqSent, MraReqRcvd, ReqRcvd, MraReqSent, RepRcvd, MraRepSent, RepSent, MraRepRcvd,
            ],
        )?;
        let data = private::<{ private_len::REJ }>(private_data)?;
        // A REJ "timeout" names the rejecting CA in its ARI (§12.6.7 table
        // 109): the peer finds its connection by it (Linux sends one so
        // when a connection is destroyed in REQ Sent).
        let guid = self.cfg.ca_guid.to_be_bytes();
        let ari: &[u8] = if reason == reason::TIMEOUT {
            &guid
        } else {
            &[]
        };
        let (peer, state, rej) = (c.peer, c.state, c.format_rej(reason, ari, data));
        self.send(peer, &rej);
        *self.counters.rej_sent.entry(reason).or_default() += 1;
        match state {
            RepSent | MraRepRcvd => self.enter_timewait(now, id),
            _ => self.free(id),
        }
        Ok(())
    }

    /// Disconnects: from Established sends a DREQ (Linux
    /// `ib_send_cm_dreq`), resent until a DREP comes; from DREQ Rcvd
    /// sends the DREP and goes to TimeWait (`ib_send_cm_drep`), as
    /// rdma_cm's `rdma_disconnect` does in either state.
    pub fn disconnect(&mut self, now: Instant, id: ConnId) -> Result<(), CmError> {
        let c = self.conn_in(id, &[CmState::Established, CmState::DreqRcvd])?;
        let peer = c.peer;
        if c.state == CmState::DreqRcvd {
            let drep = c.format_drep(c.tid);
            self.answered(now, Some(id));
            self.send(peer, &drep);
            self.enter_timewait(now, id);
            return Ok(());
        }
        let dreq = c.format_dreq();
        let out = self.emit(peer, &dreq)?;
        self.set_state(id, CmState::DreqSent);
        self.send_retried(now, id, out);
        Ok(())
    }

    /// Tells the agent that the passive side's QP received traffic before
    /// the RTU (the QP's communication-established event, IBTA ch. 11;
    /// Linux `ib_cm_notify(IB_EVENT_COMM_EST)`): in REP Sent it is as if
    /// the RTU had come. Already established: nothing to do.
    pub fn notify_comm_est(&mut self, id: ConnId) -> Result<(), CmError> {
        use CmState::*;
        let c = self.conn_in(id, &[RepSent, MraRepRcvd, Established])?;
        if c.state != Established {
            self.cancel_retry(id);
            self.set_state(id, Established);
            self.events.push_back(CmEvent::Established { id });
        }
        Ok(())
    }

    /// Until when a peer may still send again a DREQ this agent answered
    /// with a DREP, if that DREP was lost: one of the peer's waits and a
    /// tenth after the last DREP (IBTA §12.9: a DREQ in TimeWait is answered again).
    /// Linux's CM lives in the kernel and answers such a DREQ after its
    /// process ended; this agent lives as long as whoever drives it, so a
    /// tool that ends while a peer still waits on its DREQ keeps driving
    /// the agent until then, or the peer waits out all its retries.
    pub fn answering_until(&self) -> Option<Instant> {
        self.answer_until
    }

    /// The next MAD to send, in order.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        self.tx.pop_front()
    }

    /// The next instant [`CmAgent::handle_timeout`] must be called at:
    /// the earliest resend or end of TimeWait.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// What the agent counted.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// A connection's state; `None` once it is freed (or never was).
    pub fn state(&self, id: ConnId) -> Option<CmState> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// How many connections the agent holds (TimeWait included).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    // ----- internals shared by the verbs, the receive side and timers -----

    /// The connection `id` if it is in one of `states`.
    fn conn_in(&self, id: ConnId, states: &[CmState]) -> Result<&Conn, CmError> {
        let c = self.conns.get(&id).ok_or(CmError::NoSuchConn)?;
        if !states.contains(&c.state) {
            return Err(CmError::WrongState(c.state));
        }
        Ok(c)
    }

    fn set_state(&mut self, id: ConnId, state: CmState) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = state;
        }
    }

    /// The next free local ID and its value before the byte swap: Linux
    /// stores `counter ^ random_id_operand` raw in a big-endian field, so
    /// on a little-endian host the wire shows its bytes reversed. 0 is
    /// skipped (a REJ or MRA of a REQ names "no ID" with it).
    fn peek_id(&mut self) -> (ConnId, u32) {
        loop {
            let raw = self.next_id ^ self.cfg.id_seed;
            let id = ConnId(raw.swap_bytes());
            if id.0 != 0 && !self.conns.contains_key(&id) {
                return (id, raw);
            }
            self.next_id = self.next_id.wrapping_add(1);
        }
    }

    /// The transaction ID of a message this agent starts (Linux
    /// `cm_form_tid`): the MAD agent's number, then the raw local ID.
    fn own_tid(&self, raw: u32) -> u64 {
        (self.cfg.tid_hi as u64) << 32 | raw as u64
    }

    fn peer_of(&self, p: &ConnectParams) -> MadPeer {
        MadPeer {
            gid: p.remote_gid,
            local_gid: p.local_gid,
            qpn: GSI_QPN,
            pkey: p.pkey,
        }
    }

    /// The 256 bytes of `mad` for `to`, not yet sent.
    fn emit(&self, to: MadPeer, mad: &CmMad) -> Result<OutMad, CmError> {
        let mut out = OutMad {
            to: MadPeer { qpn: GSI_QPN, ..to },
            mad: [0; MAD_LEN],
        };
        mad.emit(&mut out.mad).map_err(CmError::Field)?;
        Ok(out)
    }

    /// Queues `out` and counts it.
    fn push(&mut self, out: OutMad) {
        let attr = u16::from_be_bytes([out.mad[16], out.mad[17]]);
        self.counters.tx.bump(attr);
        self.tx.push_back(out);
    }

    /// Sends a message that expects no answer. Its fields come from
    /// received messages or checked verbs, so it always emits.
    fn send(&mut self, to: MadPeer, mad: &CmMad) {
        if let Ok(out) = self.emit(to, mad) {
            self.push(out);
        }
    }

    /// Sends the message connection `id` waits an answer to, and arms its
    /// resend.
    fn send_retried(&mut self, now: Instant, id: ConnId, out: OutMad) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.retry = Some(timer::Retry {
            out: Box::new(out.clone()),
            left: c.max_retries,
            wait: c.timeout,
        });
        let due = now + c.timeout;
        self.push(out);
        self.arm(id, Some(due));
    }

    /// No more resends for connection `id`: its answer came.
    fn cancel_retry(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.retry = None;
        }
        self.arm(id, None);
    }

    /// Sets (or clears) connection `id`'s deadline.
    fn arm(&mut self, id: ConnId, due: Option<Instant>) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(old) = c.due.take() {
            self.timers.remove(&(old, id));
        }
        c.due = due;
        if let Some(t) = due {
            self.timers.insert((t, id));
        }
    }

    /// TimeWait (§12.9, Linux `cm_enter_timewait`): no more resends;
    /// the IDs stay taken until it ends.
    fn enter_timewait(&mut self, now: Instant, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = CmState::TimeWait;
        c.retry = None;
        let wait = self.cfg.timewait.unwrap_or(cm_timeout(c.av_timeout));
        self.arm(id, Some(now + wait));
    }

    /// A DREP goes out for connection `id` (`None`: a connection already
    /// forgotten, whose peer's wait is taken as our own REQ's longest).
    fn answered(&mut self, now: Instant, id: Option<ConnId>) {
        let wait = match id.and_then(|id| self.conns.get(&id)) {
            Some(c) => c.peer_wait,
            None => cm_timeout(self.cfg.response_timeout).saturating_mul(2),
        };
        // A tenth more: the resend's way here, and the peer's timer slack.
        let until = now + wait + Duration::from_nanos(wait.as_nanos() / 10);
        self.answer_until = Some(self.answer_until.map_or(until, |u| u.max(until)));
    }

    /// Forgets connection `id` (Linux: back to idle, or out of TimeWait).
    fn free(&mut self, id: ConnId) {
        self.arm(id, None);
        self.conns.remove(&id);
    }
}
