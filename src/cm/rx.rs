//! The receive side: each CM MAD to its handler, which finds the
//! connection the way Linux's cm.c does (`cm_acquire_id`: our ID, and the
//! peer's when we know it), checks that its state takes the message
//! (IBTA §12.9), answers duplicates, and moves the state on. Whatever
//! matches nothing is counted and dropped.

use super::conn::{issue_drep, issue_rej, Conn};
use super::reason::{self, msg};
use super::{
    cm_ack_timeout, cm_timeout, CmAgent, CmEvent, CmState, ConnId, MadPeer, RepInfo, ReqInfo,
};
use crate::time::Instant;
use crate::wire::cm::{attr, private_len, CmMessage, Drep, Dreq, Mra, Rej, Rep, Req, Rtu};
use crate::wire::cm::{SidrRep, SidrReq, INFO_LEN};
use crate::wire::mad::{method, CmMad, GSI_QPN};
use crate::wire::{gid_of, ip_of};

/// SIDR_REP status "service ID not supported" (§12.11.2).
const SIDR_UNSUPPORTED: u8 = 1;

impl CmAgent {
    /// Takes a MAD received on QP1 (the UD payload, 256 bytes) from
    /// `from`. Anything that is not a well-formed CM Send of a handled
    /// attribute is counted ([`super::CmCounters`]) and dropped.
    pub fn handle(&mut self, now: Instant, from: MadPeer, mad: &[u8]) {
        let m = match CmMad::parse(mad) {
            Ok(m) => m,
            Err(e) => return self.counters.parse_error(e),
        };
        if m.hdr.method != method::SEND {
            self.counters.bad_method += 1;
            return;
        }
        self.counters.rx.bump(m.hdr.attribute_id);
        let tid = m.hdr.transaction_id;
        match &m.msg {
            CmMessage::Req(r) => self.on_req(now, from, tid, r),
            CmMessage::Mra(r) => self.on_mra(now, r),
            CmMessage::Rej(r) => self.on_rej(now, r),
            CmMessage::Rep(r) => self.on_rep(now, from, tid, r),
            CmMessage::Rtu(r) => self.on_rtu(r),
            CmMessage::Dreq(r) => self.on_dreq(now, from, tid, r),
            CmMessage::Drep(r) => self.on_drep(now, r),
            CmMessage::SidrReq(r) => self.on_sidr_req(from, tid, r),
            CmMessage::SidrRep(_) => self.counters.unmatched += 1,
        }
    }

    /// The connection with our ID `local` whose peer ID is `remote`
    /// (`None`: not known yet), as Linux's `cm_acquire_id`.
    fn lookup(&self, local: u32, remote: Option<u32>) -> Option<ConnId> {
        let c = self.conns.get(&ConnId(local))?;
        (c.remote_comm_id == remote).then_some(c.id)
    }

    /// The connection with that peer ID on that peer CA (Linux's
    /// remote ID table).
    fn find_remote(&self, remote: u32, guid: u64) -> Option<ConnId> {
        let mut it = self.conns.values();
        it.find(|c| c.remote_comm_id == Some(remote) && c.remote_ca_guid == guid)
            .map(|c| c.id)
    }

    /// A connection other than `except`, not in TimeWait, to that QP of
    /// that CA (Linux's remote QPN table).
    fn find_remote_qpn(&self, qpn: u32, guid: u64, except: Option<ConnId>) -> Option<ConnId> {
        let mut it = self.conns.values();
        it.find(|c| {
            c.state != CmState::TimeWait
                && c.remote_comm_id.is_some()
                && (c.remote_qpn, c.remote_ca_guid) == (qpn, guid)
                && Some(c.id) != except
        })
        .map(|c| c.id)
    }

    /// Answers a received message of transaction `tid`: the answer
    /// carries it (§13.4.6.4) and goes where the message came from.
    fn reply(&mut self, to: MadPeer, tid: u64, mut mad: CmMad) {
        mad.hdr.transaction_id = tid;
        if let CmMessage::Rej(r) = &mad.msg {
            *self.counters.rej_sent.entry(r.reason).or_default() += 1;
        }
        self.send(to, &mad);
    }

    /// A REQ (passive side; Linux `cm_req_handler`, `cm_match_req`): a
    /// duplicate goes to [`CmAgent::dup_req`]; a QP still connected is
    /// refused as stale; a service ID nobody listens on or a GID the
    /// agent does not have is refused; anything else is a new connection
    /// in REQ Rcvd, reported.
    fn on_req(&mut self, now: Instant, from: MadPeer, tid: u64, r: &Req) {
        if let Some(id) = self.find_remote(r.local_comm_id, r.local_ca_guid) {
            return self.dup_req(id, from, tid);
        }
        let refuse = |reason, ari: &[u8]| issue_rej(tid, r.local_comm_id, 0, msg::REQ, reason, ari);
        if let Some(old) = self.find_remote_qpn(r.local_qpn, r.local_ca_guid, None) {
            self.counters.stale += 1;
            self.reply(from, tid, refuse(reason::STALE_CONN, &[]));
            if self.state(old) == Some(CmState::Established) {
                let _ = self.disconnect(now, old);
            }
            return;
        }
        if !self.listening.contains(&r.service_id) {
            return self.reply(from, tid, refuse(reason::INVALID_SERVICE_ID, &[]));
        }
        let to = ip_of(&r.primary.remote_gid);
        if let Some(&first) = self.cfg.local_gids.first() {
            if !self.cfg.local_gids.contains(&to) {
                // Linux names a GID the port has (its index 0) in the ARI.
                let ari = gid_of(first);
                return self.reply(from, tid, refuse(reason::INVALID_GID, &ari));
            }
        }
        let (id, raw) = self.peek_id();
        self.next_id = self.next_id.wrapping_add(1);
        let c = Conn {
            id,
            state: CmState::ReqRcvd,
            peer: MadPeer {
                qpn: GSI_QPN,
                ..from
            },
            tid,
            own_tid: self.own_tid(raw),
            remote_comm_id: Some(r.local_comm_id),
            remote_ca_guid: r.local_ca_guid,
            local_qpn: 0,
            remote_qpn: r.local_qpn,
            // The active side's response time; its retries (Linux).
            timeout: cm_timeout(r.local_cm_response_timeout),
            max_retries: r.max_cm_retries,
            // The active side's own wait (Linux `ib_send_cm_req`): twice
            // the packet life time (the ACK timeout less one) and the
            // response time it asked of us.
            peer_wait: cm_timeout(r.primary.local_ack_timeout.saturating_sub(1)).saturating_mul(2)
                + cm_timeout(r.remote_cm_response_timeout),
            // Linux takes the path's life time as the REQ's ACK timeout
            // less one, and adds one back.
            av_timeout: r.primary.local_ack_timeout.max(1),
            retry: None,
            due: None,
        };
        self.conns.insert(id, c);
        let info = Box::new(req_info(from, r));
        self.events.push_back(CmEvent::ConnectRequest { id, info });
    }

    /// A REQ again (Linux `cm_dup_req_handler`, and see the module docs):
    /// while the application has not answered, an MRA; after our REP, the
    /// REP again; in TimeWait, REJ "stale connection".
    fn dup_req(&mut self, id: ConnId, from: MadPeer, tid: u64) {
        self.counters.rx_duplicates.bump(attr::REQ);
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => {
                let mra = c.format_mra(msg::REQ, self.cfg.mra_service_timeout);
                self.set_state(id, CmState::MraReqSent);
                self.reply(from, tid, mra);
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                if let Some(r) = &c.retry {
                    let out = (*r.out).clone();
                    self.push(out);
                }
            }
            CmState::TimeWait => {
                let rej = c.format_rej(reason::STALE_CONN, &[], [0; private_len::REJ]);
                self.reply(from, tid, rej);
            }
            _ => {}
        }
    }

    /// A REP (active side; Linux `cm_rep_handler`): in REQ Sent or MRA
    /// REQ Rcvd it is the answer (REP Rcvd, reported) unless the peer's
    /// ID is taken or its QP is still connected (refused as stale, the
    /// connection left waiting as Linux leaves it); a REP again goes to
    /// [`CmAgent::dup_rep`].
    fn on_rep(&mut self, now: Instant, from: MadPeer, tid: u64, r: &Rep) {
        let id = ConnId(r.remote_comm_id);
        let Some(c) = self.conns.get(&id) else {
            self.counters.unmatched += 1;
            return;
        };
        let waiting = matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd);
        if c.remote_comm_id == Some(r.local_comm_id) {
            return self.dup_rep(id, from, tid);
        }
        if !waiting
            || c.remote_comm_id.is_some()
            || self.find_remote(r.local_comm_id, r.local_ca_guid).is_some()
        {
            self.counters.unmatched += 1;
            return;
        }
        if let Some(old) = self.find_remote_qpn(r.local_qpn, r.local_ca_guid, Some(id)) {
            self.counters.stale += 1;
            let rej = issue_rej(
                tid,
                r.local_comm_id,
                r.remote_comm_id,
                msg::REP,
                reason::STALE_CONN,
                &[],
            );
            self.reply(from, tid, rej);
            if self.state(old) == Some(CmState::Established) {
                let _ = self.disconnect(now, old);
            }
            return;
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = CmState::RepRcvd;
        c.remote_comm_id = Some(r.local_comm_id);
        c.remote_ca_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        // The QP's ACK timeout now counts the peer's ACK delay (Linux).
        c.av_timeout = cm_ack_timeout(r.target_ack_delay, c.av_timeout.saturating_sub(1));
        let info = Box::new(rep_info(r, c.av_timeout));
        self.cancel_retry(id);
        self.events.push_back(CmEvent::ConnectReply { id, info });
    }

    /// A REP again (Linux `cm_dup_rep_handler`): the RTU again once
    /// established; an MRA while the application has not called
    /// `establish` (rdma_cm's prepared MRA).
    fn dup_rep(&mut self, id: ConnId, from: MadPeer, tid: u64) {
        self.counters.rx_duplicates.bump(attr::REP);
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        match c.state {
            CmState::Established => {
                let rtu = c.format_rtu();
                self.reply(from, tid, rtu);
            }
            CmState::RepRcvd | CmState::MraRepSent => {
                let mra = c.format_mra(msg::REP, self.cfg.mra_service_timeout);
                self.set_state(id, CmState::MraRepSent);
                self.reply(from, tid, mra);
            }
            _ => {}
        }
    }

    /// An RTU (passive side; Linux `cm_rtu_handler`): in REP Sent or MRA
    /// REP Rcvd the connection is established; otherwise a duplicate.
    fn on_rtu(&mut self, r: &Rtu) {
        let Some(id) = self.lookup(r.remote_comm_id, Some(r.local_comm_id)) else {
            self.counters.unmatched += 1;
            return;
        };
        match self.state(id) {
            Some(CmState::RepSent | CmState::MraRepRcvd) => {
                self.cancel_retry(id);
                self.set_state(id, CmState::Established);
                self.events.push_back(CmEvent::Established { id });
            }
            _ => self.counters.rx_duplicates.bump(attr::RTU),
        }
    }

    /// An MRA (Linux `cm_mra_handler`): for our REQ in REQ Sent, or our
    /// REP in REP Sent, the wait for the answer becomes the MRA's service
    /// timeout plus the path's ACK timeout, for this and every later
    /// resend.
    fn on_mra(&mut self, now: Instant, r: &Mra) {
        let id = match r.message_mraed {
            msg::REQ => self.lookup(r.remote_comm_id, None),
            msg::REP | msg::OTHER => self.lookup(r.remote_comm_id, Some(r.local_comm_id)),
            _ => None,
        };
        let Some(c) = id.and_then(|id| self.conns.get_mut(&id)) else {
            self.counters.unmatched += 1;
            return;
        };
        let next = match (c.state, r.message_mraed) {
            (CmState::ReqSent, msg::REQ) => CmState::MraReqRcvd,
            (CmState::RepSent, msg::REP) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.counters.rx_duplicates.bump(attr::MRA);
                return;
            }
            _ => {
                self.counters.unmatched += 1;
                return;
            }
        };
        let wait = cm_timeout(r.service_timeout) + cm_timeout(c.av_timeout);
        c.state = next;
        if let Some(retry) = &mut c.retry {
            retry.wait = wait;
        }
        let id = c.id;
        self.arm(id, Some(now + wait));
    }

    /// A REJ (Linux `cm_acquire_rejected_id`, `cm_rej_handler`): during the
    /// handshake the connection is freed (TimeWait for "stale
    /// connection"); after REP Rcvd, when established or disconnecting it
    /// goes to TimeWait. Reported in every case.
    fn on_rej(&mut self, now: Instant, r: &Rej) {
        use CmState::*;
        let id = if r.reason == reason::TIMEOUT {
            // The ARI names the rejecting CA; the REJ's local ID is theirs.
            let mut g = [0u8; 8];
            g.copy_from_slice(&r.ari[..8]);
            self.find_remote(r.local_comm_id, u64::from_be_bytes(g))
        } else if r.message_rejected == msg::REQ {
            self.lookup(r.remote_comm_id, None)
        } else {
            self.lookup(r.remote_comm_id, Some(r.local_comm_id))
        };
        let Some(state) = id.and_then(|id| self.state(id)) else {
            self.counters.unmatched += 1;
            return;
        };
        let timewait = match state {
            ReqSent | MraReqRcvd | RepSent | MraRepRcvd | ReqRcvd | MraReqSent => {
                r.reason == reason::STALE_CONN
            }
            DreqSent | RepRcvd | MraRepSent | Established => true,
            DreqRcvd | TimeWait => {
                self.counters.unmatched += 1;
                return;
            }
        };
        let Some(id) = id else {
            return;
        };
        *self.counters.rej_received.entry(r.reason).or_default() += 1;
        let n = (r.rejected_info_length as usize).min(INFO_LEN);
        self.events.push_back(CmEvent::Rejected {
            id,
            reason: r.reason,
            ari: r.ari[..n].to_vec(),
            private_data: r.private_data.to_vec(),
        });
        if timewait {
            self.enter_timewait(now, id);
        } else {
            self.free(id);
        }
    }

    /// A DREQ (Linux `cm_dreq_handler`): for no connection, a DREP anyway
    /// (`cm_issue_drep`); for one that names another QP, nothing; when
    /// connected (or still in REP Sent), DREQ Rcvd and reported; when we
    /// had sent our own DREQ, the DREP at once and TimeWait; in TimeWait,
    /// the DREP again.
    fn on_dreq(&mut self, now: Instant, from: MadPeer, tid: u64, r: &Dreq) {
        use CmState::*;
        let Some(id) = self.lookup(r.remote_comm_id, Some(r.local_comm_id)) else {
            self.counters.rx_duplicates.bump(attr::DREQ);
            self.counters.dreq_unknown += 1;
            self.answered(now, None);
            return self.reply(from, tid, issue_drep(tid, r));
        };
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.local_qpn != r.remote_qpn_eecn {
            self.counters.unmatched += 1;
            return;
        }
        match c.state {
            RepSent | MraRepRcvd | Established => {
                c.tid = tid;
                self.cancel_retry(id);
                self.set_state(id, DreqRcvd);
            }
            DreqSent => {
                c.tid = tid;
                let drep = c.format_drep(tid);
                self.answered(now, Some(id));
                self.reply(from, tid, drep);
                self.enter_timewait(now, id);
            }
            TimeWait => {
                let drep = c.format_drep(tid);
                self.counters.rx_duplicates.bump(attr::DREQ);
                self.answered(now, Some(id));
                return self.reply(from, tid, drep);
            }
            DreqRcvd => return self.counters.rx_duplicates.bump(attr::DREQ),
            _ => {
                self.counters.unmatched += 1;
                return;
            }
        }
        self.events.push_back(CmEvent::Disconnected {
            id,
            timed_out: false,
        });
    }

    /// A DREP (Linux `cm_drep_handler`): the answer to our DREQ, TimeWait
    /// and reported; in DREQ Rcvd, TimeWait (the application was told at
    /// the DREQ).
    fn on_drep(&mut self, now: Instant, r: &Drep) {
        let Some(id) = self.lookup(r.remote_comm_id, Some(r.local_comm_id)) else {
            self.counters.unmatched += 1;
            return;
        };
        match self.state(id) {
            Some(CmState::DreqSent) => {
                self.enter_timewait(now, id);
                self.events.push_back(CmEvent::Disconnected {
                    id,
                    timed_out: false,
                });
            }
            Some(CmState::DreqRcvd) => self.enter_timewait(now, id),
            Some(CmState::TimeWait) => self.counters.rx_duplicates.bump(attr::DREP),
            _ => self.counters.unmatched += 1,
        }
    }

    /// A SIDR_REQ: this agent resolves no service IDs to UD QPs, so every
    /// one is answered "service ID not supported" (§12.11.2; Linux answers
    /// so when nobody listens).
    fn on_sidr_req(&mut self, from: MadPeer, tid: u64, r: &SidrReq) {
        self.counters.sidr_unsupported += 1;
        let rep = SidrRep {
            request_id: r.request_id,
            status: SIDR_UNSUPPORTED,
            additional_info_length: 0,
            qpn: 0,
            service_id: r.service_id,
            qkey: 0,
            additional_info: [0; INFO_LEN],
            private_data: [0; private_len::SIDR_REP],
        };
        self.reply(from, tid, CmMad::new(tid, CmMessage::SidrRep(rep)));
    }
}

/// A REQ's fields as its receiver sees them (Linux
/// `cm_format_req_event`: the READ resources cross over).
fn req_info(from: MadPeer, r: &Req) -> ReqInfo {
    ReqInfo {
        from,
        service_id: r.service_id,
        remote_ca_guid: r.local_ca_guid,
        remote_comm_id: r.local_comm_id,
        remote_qpn: r.local_qpn,
        transport_service_type: r.transport_service_type,
        starting_psn: r.starting_psn,
        responder_resources: r.initiator_depth,
        initiator_depth: r.responder_resources,
        path_mtu: r.path_mtu,
        pkey: r.pkey,
        retry_count: r.retry_count,
        rnr_retry_count: r.rnr_retry_count,
        flow_control: r.end_to_end_flow_control,
        srq: r.srq,
        path: r.primary,
        private_data: r.private_data.to_vec(),
    }
}

/// A REP's fields as its receiver sees them (Linux
/// `cm_format_rep_event`).
fn rep_info(r: &Rep, local_ack_timeout: u8) -> RepInfo {
    RepInfo {
        remote_ca_guid: r.local_ca_guid,
        remote_comm_id: r.local_comm_id,
        remote_qpn: r.local_qpn,
        starting_psn: r.starting_psn,
        responder_resources: r.initiator_depth,
        initiator_depth: r.responder_resources,
        target_ack_delay: r.target_ack_delay,
        failover_accepted: r.failover_accepted,
        flow_control: r.end_to_end_flow_control,
        rnr_retry_count: r.rnr_retry_count,
        srq: r.srq,
        local_ack_timeout,
        private_data: r.private_data.to_vec(),
    }
}
