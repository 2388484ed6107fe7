//! What the agent reports ([`CmEvent`]) and the fields of the REQ and REP
//! it reports them with, turned to the receiver's side as Linux's
//! `cm_format_req_event` and `cm_format_rep_event` turn them.

use super::{ConnId, MadPeer};
use crate::wire::cm::CmPath;
use crate::wire::Psn;

/// What happened to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listened service ID: answer with
    /// [`CmAgent::accept`](super::CmAgent::accept) or [`CmAgent::reject`](super::CmAgent::reject).
    ConnectRequest {
        /// The new connection.
        id: ConnId,
        /// The REQ's fields.
        info: Box<ReqInfo>,
    },
    /// The REP to a [`CmAgent::connect`](super::CmAgent::connect): program the QP, then
    /// [`CmAgent::establish`](super::CmAgent::establish) (or [`CmAgent::reject`](super::CmAgent::reject)).
    ConnectReply {
        /// The connection.
        id: ConnId,
        /// The REP's fields.
        info: Box<RepInfo>,
    },
    /// Connected: an RTU came (passive), traffic came
    /// ([`CmAgent::notify_comm_est`](super::CmAgent::notify_comm_est)), or [`CmAgent::establish`](super::CmAgent::establish) sent the
    /// RTU (active).
    Established {
        /// The connection.
        id: ConnId,
    },
    /// The peer refused. Unless the connection had got past the handshake
    /// or the reason is "stale connection", it is freed with this event.
    Rejected {
        /// The connection.
        id: ConnId,
        /// The reason ([`super::reason`]).
        reason: u16,
        /// The additional rejection information (its meaningful length).
        ari: Vec<u8>,
        /// The REJ's private data (148 bytes).
        private_data: Vec<u8>,
    },
    /// The REQ or the REP went unanswered through every resend; the
    /// connection is freed (Linux `IB_CM_REQ_ERROR` / `IB_CM_REP_ERROR`,
    /// rdma_cm's `RDMA_CM_EVENT_UNREACHABLE`).
    Unreachable {
        /// The connection.
        id: ConnId,
        /// The attribute that went unanswered: REQ or REP.
        unanswered: u16,
    },
    /// The connection is down: the peer sent a DREQ (answer it with
    /// [`CmAgent::disconnect`](super::CmAgent::disconnect)), answered ours with a DREP, or never
    /// answered ours (`timed_out`, Linux `IB_CM_DREQ_ERROR`).
    Disconnected {
        /// The connection.
        id: ConnId,
        /// Our DREQ went unanswered through every resend.
        timed_out: bool,
    },
    /// TimeWait is over: the connection is freed and its ID may be used
    /// again.
    TimewaitExit {
        /// The connection.
        id: ConnId,
    },
}

/// The fields of a REQ, from the receiver's side (as Linux's
/// `ib_cm_req_event_param` turns them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// Where it came from.
    pub from: MadPeer,
    /// The service ID asked for.
    pub service_id: u64,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// The peer's QP: the destination QP to program.
    pub remote_qpn: u32,
    /// The transport service type (0 RC, 1 UC, 2 RD).
    pub transport_service_type: u8,
    /// The PSN the peer's receive queue expects first: our QP's send PSN.
    pub starting_psn: Psn,
    /// RDMA READs / atomics we must accept at once: the REQ's initiator
    /// depth.
    pub responder_resources: u8,
    /// RDMA READs / atomics we may issue at once: the REQ's responder
    /// resources.
    pub initiator_depth: u8,
    /// Path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// P_Key.
    pub pkey: u16,
    /// Retry count for our QP.
    pub retry_count: u8,
    /// RNR retry count for our QP.
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The primary path as the REQ gives it (its local GID is the peer's).
    pub path: CmPath,
    /// The REQ's private data (92 bytes; rdma_cm's header first).
    pub private_data: Vec<u8>,
}

/// The fields of a REP, from the receiver's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepInfo {
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// The peer's QP: the destination QP to program.
    pub remote_qpn: u32,
    /// The PSN the peer's receive queue expects first: our QP's send PSN.
    pub starting_psn: Psn,
    /// RDMA READs / atomics we must accept at once: the REP's initiator
    /// depth.
    pub responder_resources: u8,
    /// RDMA READs / atomics we may issue at once: the REP's responder
    /// resources.
    pub initiator_depth: u8,
    /// The peer CA's ACK delay exponent.
    pub target_ack_delay: u8,
    /// Failover accepted (0 yes, 1 no alternate path, 2 rejected).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count for our QP.
    pub rnr_retry_count: u8,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The local ACK timeout for our QP: the path's, adjusted for the
    /// peer's ACK delay (Linux `cm_rep_handler`).
    pub local_ack_timeout: u8,
    /// The REP's private data (196 bytes).
    pub private_data: Vec<u8>,
}
