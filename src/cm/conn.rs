//! One connection's record, and the CM messages made from it, field by
//! field as Linux's cm.c formats them (`cm_format_req`, `cm_format_rep`,
//! `cm_format_rtu`, `cm_format_mra`, `cm_format_rej`, `cm_format_dreq`,
//! `cm_format_drep`) into the layouts of IBTA §12.6 ([`crate::wire::cm`]).

use super::reason::msg;
use super::timer::Retry;
use super::{cm_ack_timeout, AcceptParams, CmConfig, CmState, ConnId, ConnectParams, MadPeer};
use crate::time::{Duration, Instant};
use crate::wire::cm::{
    private_len, CmMessage, CmPath, Drep, Dreq, Mra, Rej, Rep, Req, Rtu, INFO_LEN,
};
use crate::wire::gid_of;
use crate::wire::mad::CmMad;

/// What the agent keeps of one connection.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Our communication ID.
    pub id: ConnId,
    pub state: CmState,
    /// Where its messages go.
    pub peer: MadPeer,
    /// The transaction of the handshake (the REQ's, on both sides), then
    /// of the DREQ received: what answers carry (Linux `cm_id_priv->tid`).
    pub tid: u64,
    /// The transaction ID of the messages this side starts: REQ, DREQ
    /// (Linux `cm_form_tid`).
    pub own_tid: u64,
    /// The peer's communication ID, once known (REQ received, REP
    /// received).
    pub remote_comm_id: Option<u32>,
    pub remote_ca_guid: u64,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    /// How long a REQ, REP or DREQ of ours waits for its answer.
    pub timeout: Duration,
    /// Resends of each such message.
    pub max_retries: u8,
    /// How long the peer waits for our answer before it sends a message
    /// again (Linux's `timeout_ms` on its side): a DREQ we answered may
    /// come again this long after, if our DREP was lost.
    pub peer_wait: Duration,
    /// The path's ACK timeout exponent (Linux `av.timeout`): TimeWait's
    /// length, and a part of an MRA's wait.
    pub av_timeout: u8,
    /// The message waiting for its answer.
    pub retry: Option<Retry>,
    /// The armed deadline: a resend, or TimeWait's end.
    pub due: Option<Instant>,
}

/// The REQ of a [`super::CmAgent::connect`] (Linux `cm_format_req`, with
/// rdma_cm's response timeouts and retries).
pub(crate) fn format_req(
    cfg: &CmConfig,
    id: ConnId,
    p: &ConnectParams,
    private_data: [u8; private_len::REQ],
) -> CmMessage {
    // Linux writes the permissive LID for a routed path (hop limit > 1,
    // always so on RoCE v2) and marks a one-hop path subnet-local.
    let subnet_local = p.hop_limit <= 1;
    let lid = if subnet_local { 0 } else { 0xFFFF };
    CmMessage::Req(Req {
        local_comm_id: id.0,
        service_id: p.service_id,
        local_ca_guid: cfg.ca_guid,
        local_qkey: 0,
        local_qpn: p.qpn,
        responder_resources: p.responder_resources,
        local_eecn: 0,
        initiator_depth: p.initiator_depth,
        remote_eecn: 0,
        remote_cm_response_timeout: cfg.response_timeout,
        transport_service_type: 0,
        end_to_end_flow_control: p.flow_control,
        starting_psn: p.starting_psn,
        local_cm_response_timeout: cfg.response_timeout,
        retry_count: p.retry_count,
        pkey: p.pkey,
        path_mtu: p.path_mtu,
        rdc_exists: false,
        rnr_retry_count: p.rnr_retry_count,
        max_cm_retries: cfg.max_retries,
        srq: p.srq,
        extended_transport_type: 0,
        primary: CmPath {
            local_lid: lid,
            remote_lid: lid,
            local_gid: gid_of(p.local_gid),
            remote_gid: gid_of(p.remote_gid),
            flow_label: p.flow_label,
            packet_rate: p.packet_rate,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            sl: p.sl,
            subnet_local,
            local_ack_timeout: cm_ack_timeout(cfg.ack_delay, p.packet_life_time),
        },
        alternate: CmPath::default(),
        sap_supported: false,
        private_data,
    })
}

/// A REJ answering a message that has no connection here (Linux
/// `cm_issue_rej`): the IDs are the message's, swapped; the transaction
/// its own.
pub(crate) fn issue_rej(
    tid: u64,
    their_local: u32,
    their_remote: u32,
    rejected: u8,
    reason: u16,
    ari: &[u8],
) -> CmMad {
    CmMad::new(
        tid,
        CmMessage::Rej(rej(
            their_remote,
            their_local,
            rejected,
            reason,
            ari,
            [0; private_len::REJ],
        )),
    )
}

/// A DREP answering a DREQ for no connection (Linux `cm_issue_drep`).
pub(crate) fn issue_drep(tid: u64, dreq: &Dreq) -> CmMad {
    CmMad::new(
        tid,
        CmMessage::Drep(Drep::new(dreq.remote_comm_id, dreq.local_comm_id)),
    )
}

fn rej(
    local: u32,
    remote: u32,
    rejected: u8,
    reason: u16,
    ari: &[u8],
    private_data: [u8; private_len::REJ],
) -> Rej {
    let n = ari.len().min(INFO_LEN);
    let mut a = [0u8; INFO_LEN];
    a[..n].copy_from_slice(&ari[..n]);
    Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: rejected,
        rejected_info_length: n as u8,
        reason,
        ari: a,
        private_data,
    }
}

impl Conn {
    fn remote(&self) -> u32 {
        self.remote_comm_id.unwrap_or(0)
    }

    /// The REP of an accept (Linux `cm_format_rep`).
    pub fn format_rep(
        &self,
        cfg: &CmConfig,
        p: &AcceptParams,
        private_data: [u8; private_len::REP],
    ) -> CmMad {
        CmMad::new(
            self.tid,
            CmMessage::Rep(Rep {
                local_comm_id: self.id.0,
                remote_comm_id: self.remote(),
                local_qkey: 0,
                local_qpn: p.qpn,
                local_eecn: 0,
                starting_psn: p.starting_psn,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                target_ack_delay: cfg.ack_delay,
                failover_accepted: p.failover_accepted,
                end_to_end_flow_control: p.flow_control,
                rnr_retry_count: p.rnr_retry_count,
                srq: p.srq,
                local_ca_guid: cfg.ca_guid,
                private_data,
            }),
        )
    }

    /// The RTU (Linux `cm_format_rtu`), in the REQ's transaction.
    pub fn format_rtu(&self) -> CmMad {
        CmMad::new(self.tid, CmMessage::Rtu(Rtu::new(self.id.0, self.remote())))
    }

    /// The DREQ (Linux `cm_format_dreq`): a transaction of our own, the
    /// peer's QP named.
    pub fn format_dreq(&self) -> CmMad {
        CmMad::new(
            self.own_tid,
            CmMessage::Dreq(Dreq {
                local_comm_id: self.id.0,
                remote_comm_id: self.remote(),
                remote_qpn_eecn: self.remote_qpn,
                private_data: [0; private_len::DREQ],
            }),
        )
    }

    /// The DREP answering a DREQ of transaction `tid`.
    pub fn format_drep(&self, tid: u64) -> CmMad {
        CmMad::new(tid, CmMessage::Drep(Drep::new(self.id.0, self.remote())))
    }

    /// An MRA for the message `mraed` ([`msg`]) with service timeout
    /// `service_timeout` (Linux `cm_format_mra`).
    pub fn format_mra(&self, mraed: u8, service_timeout: u8) -> CmMad {
        CmMad::new(
            self.tid,
            CmMessage::Mra(Mra {
                local_comm_id: self.id.0,
                remote_comm_id: self.remote(),
                message_mraed: mraed,
                service_timeout,
                private_data: [0; private_len::MRA],
            }),
        )
    }

    /// A REJ from this connection (Linux `cm_format_rej`): the message
    /// rejected follows the state (a REQ before we answered it, a REP
    /// before we confirmed it, none otherwise). Linux writes local ID 0
    /// in REQ Rcvd, a state rdma_cm leaves before its consumer can
    /// reject; this agent's REQ Rcvd stands for rdma_cm's MRA REQ Sent,
    /// so the ID is always ours.
    pub fn format_rej(
        &self,
        reason: u16,
        ari: &[u8],
        private_data: [u8; private_len::REJ],
    ) -> CmMad {
        let rejected = match self.state {
            CmState::ReqRcvd | CmState::MraReqSent => msg::REQ,
            CmState::RepRcvd | CmState::MraRepSent => msg::REP,
            _ => msg::OTHER,
        };
        CmMad::new(
            self.tid,
            CmMessage::Rej(rej(
                self.id.0,
                self.remote(),
                rejected,
                reason,
                ari,
                private_data,
            )),
        )
    }
}
