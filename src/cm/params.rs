//! What the application gives the agent: its settings ([`CmConfig`]), a
//! connection request ([`ConnectParams`]) and an answer to one
//! ([`AcceptParams`]), with the values Linux's rdma_cm uses by default.

use crate::time::Duration;
use crate::wire::Psn;
use core::net::IpAddr;

/// What a [`CmAgent::connect`](super::CmAgent::connect) asks for: the REQ's fields that are the
/// application's (Linux `ib_cm_req_param` and its primary path). The
/// response timeouts and `Max CM Retries` are the agent's
/// ([`CmConfig`]), as rdma_cm sets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The service ID to connect to (rdma_cm: [`crate::wire::cma::ServiceId`]).
    pub service_id: u64,
    /// Our GID (an address [`CmConfig::local_gids`] has).
    pub local_gid: IpAddr,
    /// The peer's GID.
    pub remote_gid: IpAddr,
    /// Our QP.
    pub qpn: u32,
    /// The PSN our receive queue expects first.
    pub starting_psn: Psn,
    /// Path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDMA READs / atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA READs / atomics we issue at once.
    pub initiator_depth: u8,
    /// Retry count, 3 bits.
    pub retry_count: u8,
    /// RNR retry count, 3 bits.
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// P_Key.
    pub pkey: u16,
    /// The path's flow label, 20 bits.
    pub flow_label: u32,
    /// The path's traffic class.
    pub traffic_class: u8,
    /// The path's hop limit; at most 1 marks the peer subnet-local.
    pub hop_limit: u8,
    /// The path's service level, 4 bits.
    pub sl: u8,
    /// The path's packet rate code, 6 bits.
    pub packet_rate: u8,
    /// The path's packet life time exponent (rdma_cm on RoCE: 18 in Linux
    /// 6.1, as in the captures; newer kernels use 16).
    pub packet_life_time: u8,
    /// Private data, at most 92 bytes (rdma_cm: its 36-byte header and 56
    /// of the application's).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// A request for an RC connection with rdma_cm's defaults on RoCE:
    /// path MTU 1024, no RDMA READ resources, retry and RNR retry counts
    /// 7, P_Key 0xFFFF, hop limit 64, packet life time 18, no private
    /// data.
    pub fn new(
        service_id: u64,
        local_gid: IpAddr,
        remote_gid: IpAddr,
        qpn: u32,
        starting_psn: Psn,
    ) -> ConnectParams {
        ConnectParams {
            service_id,
            local_gid,
            remote_gid,
            qpn,
            starting_psn,
            path_mtu: 3,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            flow_control: false,
            srq: false,
            pkey: 0xFFFF,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            packet_rate: 0,
            packet_life_time: 18,
            private_data: Vec::new(),
        }
    }
}

/// What a [`CmAgent::accept`](super::CmAgent::accept) answers: the REP's fields that are the
/// application's (Linux `ib_cm_rep_param`). The target ACK delay is the
/// agent's ([`CmConfig::ack_delay`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Our QP.
    pub qpn: u32,
    /// The PSN our receive queue expects first.
    pub starting_psn: Psn,
    /// RDMA READs / atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA READs / atomics we issue at once.
    pub initiator_depth: u8,
    /// RNR retry count, 3 bits.
    pub rnr_retry_count: u8,
    /// Failover accepted, 2 bits (0: rdma_cm's value).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
}

impl AcceptParams {
    /// An answer with rdma_cm's defaults: no RDMA READ resources, RNR
    /// retry count 7, no private data.
    pub fn new(qpn: u32, starting_psn: Psn) -> AcceptParams {
        AcceptParams {
            qpn,
            starting_psn,
            responder_resources: 0,
            initiator_depth: 0,
            rnr_retry_count: 7,
            failover_accepted: 0,
            flow_control: false,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// An agent's settings: its CA and the values Linux's rdma_cm uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// The CA's node GUID (rxe: the EUI-64 of the MAC).
    pub ca_guid: u64,
    /// The port's GIDs as addresses. A REQ to another GID is refused with
    /// REJ "invalid GID"; an empty list takes any.
    pub local_gids: Vec<IpAddr>,
    /// The CM response timeout exponent put in a REQ, both the remote and
    /// the local one (rdma_cm: 20, ≈ 4.3 s).
    pub response_timeout: u8,
    /// `Max CM Retries` put in a REQ, 4 bits (rdma_cm: 15).
    pub max_retries: u8,
    /// The CA's ACK delay exponent: a REP's target ACK delay, and a part
    /// of a REQ's local ACK timeout (rxe: 15).
    pub ack_delay: u8,
    /// The service timeout of the MRAs sent for duplicates (Linux: 24,
    /// ≈ 68.7 s).
    pub mra_service_timeout: u8,
    /// How long TimeWait lasts; `None`: as Linux, the path's ACK timeout
    /// (4.096 µs × 2^(packet life time + 1), adjusted on the active side
    /// for the peer's ACK delay).
    pub timewait: Option<Duration>,
    /// XORed with a counter into each local communication ID (Linux's
    /// `random_id_operand`, random at boot); fixed, it makes IDs
    /// deterministic.
    pub id_seed: u32,
    /// The high half of the transaction IDs of the messages the agent
    /// starts (Linux: the MAD agent's number, 2 in the captures).
    pub tid_hi: u32,
}

impl CmConfig {
    /// rdma_cm's response timeout exponent.
    pub const RESPONSE_TIMEOUT: u8 = 20;
    /// rdma_cm's `Max CM Retries`.
    pub const MAX_RETRIES: u8 = 15;
    /// rxe's ACK delay exponent.
    pub const ACK_DELAY: u8 = 15;
    /// Linux's MRA service timeout exponent.
    pub const MRA_SERVICE_TIMEOUT: u8 = 24;

    /// Linux's values for a CA, with an ID seed made from its GUID.
    pub fn new(ca_guid: u64, local_gids: Vec<IpAddr>) -> CmConfig {
        // A fixed mix of the GUID (splitmix64's finalizer): distinct CAs
        // get distinct ID sequences, and a run is reproducible.
        let mut z = ca_guid.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        CmConfig {
            ca_guid,
            local_gids,
            response_timeout: Self::RESPONSE_TIMEOUT,
            max_retries: Self::MAX_RETRIES,
            ack_delay: Self::ACK_DELAY,
            mra_service_timeout: Self::MRA_SERVICE_TIMEOUT,
            timewait: None,
            id_seed: (z ^ (z >> 31)) as u32,
            tid_hi: 1,
        }
    }
}
