//! The Communication Management messages: the attributes of a CM MAD
//! (IBTA Vol. 1 §12.6, "Communication Management Messages"), every field
//! at its offset and width in the 232-byte data area after the MAD header
//! ([`super::mad`]).
//!
//! | attribute | message | private data |
//! | --- | --- | --- |
//! | 0x0010 | REQ, ConnectRequest (§12.6.5, table 106) | 92 B |
//! | 0x0011 | MRA, MessageReceiptAcknowledgement (§12.6.6, table 107) | 222 B |
//! | 0x0012 | REJ, ConnectReject (§12.6.7, table 108) | 148 B |
//! | 0x0013 | REP, ConnectReply (§12.6.8, table 110) | 196 B |
//! | 0x0014 | RTU, ReadyToUse (§12.6.9, table 111) | 224 B |
//! | 0x0015 | DREQ, DisconnectRequest (§12.6.10, table 112) | 220 B |
//! | 0x0016 | DREP, DisconnectReply (§12.6.11, table 113) | 224 B |
//! | 0x0017 | SIDR_REQ, ServiceIDResolutionRequest (§12.11.1, table 119) | 216 B |
//! | 0x0018 | SIDR_REP, ServiceIDResolutionResponse (§12.11.2, table 120) | 136 B |
//!
//! Bit positions follow the IBTA tables: a field of `width` bits starting
//! `n` bits into a byte starts at that byte's most significant bit plus
//! `n`. 24-bit QPNs, EECNs and PSNs share a 32-bit word with the byte
//! after them (a field or reserved). Reserved bits are not carried by the `Repr`s: they
//! are written as zero (as Linux writes them), so a message from a
//! capture re-emits byte for byte. LAP and APR (alternate paths) are not
//! handled and parse as [`MadError::UnknownAttribute`].

use super::field::{set_u16, set_u24, set_u32, set_u64, u16_at, u24_at, u32_at, u64_at};
use super::gid::Gid;
use super::mad::{MadError, Result, DATA_LEN};
use super::psn::Psn;

/// CM attribute IDs (§12.6.1).
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MessageReceiptAcknowledgement.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResolutionRequest.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResolutionResponse.
    pub const SIDR_REP: u16 = 0x0018;
}

/// Private data lengths: what is left of the 232 bytes after each
/// message's fields (§12.6.5-§12.6.11, §12.11).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// The length of REJ's ARI and SIDR_REP's additional information (72 B).
pub const INFO_LEN: usize = 72;

/// The bytes of a path MTU code (IBTA §9.4 / §7.7.7: 1 = 256 ... 5 = 4096).
pub fn path_mtu_bytes(code: u8) -> Option<u32> {
    match code {
        1..=5 => Some(128 << code),
        _ => None,
    }
}

/// `width` bits of byte `at`, starting `from_msb` bits below its top bit.
fn bits(b: &[u8], at: usize, from_msb: u32, width: u32) -> u8 {
    ((b[at] as u32 >> (8 - from_msb - width)) & ((1 << width) - 1)) as u8
}

fn bit(b: &[u8], at: usize, from_msb: u32) -> bool {
    bits(b, at, from_msb, 1) != 0
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// Writes fields into a zeroed data area, refusing values over their width.
struct W<'a>(&'a mut [u8]);

impl W<'_> {
    fn bits(&mut self, at: usize, from_msb: u32, width: u32, v: u8) -> Result<()> {
        if v as u32 >= 1 << width {
            return Err(MadError::FieldRange);
        }
        self.0[at] |= v << (8 - from_msb - width);
        Ok(())
    }
    fn flag(&mut self, at: usize, from_msb: u32, v: bool) {
        self.0[at] |= (v as u8) << (7 - from_msb);
    }
    fn u24(&mut self, at: usize, v: u32) -> Result<()> {
        if v > 0x00FF_FFFF {
            return Err(MadError::FieldRange);
        }
        set_u24(self.0, at, v);
        Ok(())
    }
    fn bytes(&mut self, at: usize, v: &[u8]) {
        self.0[at..at + v.len()].copy_from_slice(v);
    }
}

/// One path of a REQ, primary or alternate: 44 bytes (§12.6.5 table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmPath {
    /// Local port LID (0xFFFF, the permissive LID, on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID: on RoCE v2 the source IP (A17 §17.4.1.1).
    pub local_gid: Gid,
    /// Remote port GID: the destination IP.
    pub remote_gid: Gid,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Packet rate, 6 bits (§9.7.4.2 rate code).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level, 4 bits.
    pub sl: u8,
    /// Subnet local: the peer is on this subnet (no GRH needed on IB).
    pub subnet_local: bool,
    /// Local ACK timeout, 5 bits (4.096 µs × 2^n).
    pub local_ack_timeout: u8,
}

impl CmPath {
    /// The length of a path in a REQ.
    pub const LEN: usize = 44;

    fn parse(b: &[u8], at: usize) -> CmPath {
        CmPath {
            local_lid: u16_at(b, at),
            remote_lid: u16_at(b, at + 2),
            local_gid: array(b, at + 4),
            remote_gid: array(b, at + 20),
            flow_label: u32_at(b, at + 36) >> 12,
            packet_rate: bits(b, at + 39, 2, 6),
            traffic_class: b[at + 40],
            hop_limit: b[at + 41],
            sl: bits(b, at + 42, 0, 4),
            subnet_local: bit(b, at + 42, 4),
            local_ack_timeout: bits(b, at + 43, 0, 5),
        }
    }

    fn emit(&self, w: &mut W<'_>, at: usize) -> Result<()> {
        set_u16(w.0, at, self.local_lid);
        set_u16(w.0, at + 2, self.remote_lid);
        w.bytes(at + 4, &self.local_gid);
        w.bytes(at + 20, &self.remote_gid);
        if self.flow_label > 0xF_FFFF {
            return Err(MadError::FieldRange);
        }
        set_u32(w.0, at + 36, self.flow_label << 12);
        w.bits(at + 39, 2, 6, self.packet_rate)?;
        w.0[at + 40] = self.traffic_class;
        w.0[at + 41] = self.hop_limit;
        w.bits(at + 42, 0, 4, self.sl)?;
        w.flag(at + 42, 4, self.subnet_local);
        w.bits(at + 43, 0, 5, self.local_ack_timeout)
    }
}

/// ConnectRequest (§12.6.5 table 106): the active side's QP, the PSN it
/// expects first and the paths, sent to a service ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    /// Local communication ID: the sender's handle of the connection.
    pub local_comm_id: u32,
    /// Service ID the request is for (rdma_cm: [`super::cma::ServiceId`]).
    pub service_id: u64,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key (UD / RD).
    pub local_qkey: u32,
    /// The sender's QPN, 24 bits.
    pub local_qpn: u32,
    /// Responder resources: RDMA READs / atomics the sender accepts.
    pub responder_resources: u8,
    /// Local EE context number, 24 bits (RD only).
    pub local_eecn: u32,
    /// Initiator depth: RDMA READs / atomics the sender issues at once.
    pub initiator_depth: u8,
    /// Remote EE context number, 24 bits (RD only).
    pub remote_eecn: u32,
    /// Remote CM response timeout, 5 bits (4.096 µs × 2^n).
    pub remote_cm_response_timeout: u8,
    /// Transport service type, 2 bits (0 RC, 1 UC, 2 RD).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// Starting PSN: the PSN the sender's receive queue expects first, so
    /// the one the peer's first request carries (as Linux sets up the
    /// QPs; the rxe captures show the passive side starting there).
    pub starting_psn: Psn,
    /// Local CM response timeout, 5 bits.
    pub local_cm_response_timeout: u8,
    /// Retry count, 3 bits.
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU code, 4 bits ([`path_mtu_bytes`]).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count, 3 bits.
    pub rnr_retry_count: u8,
    /// Max CM retries, 4 bits.
    pub max_cm_retries: u8,
    /// The sender's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type, 3 bits (XRC).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary: CmPath,
    /// The alternate path (all zero when there is none).
    pub alternate: CmPath,
    /// Send alternate path supported.
    pub sap_supported: bool,
    /// Private data (rdma_cm: [`super::cma::CmaHdr`] first).
    pub private_data: [u8; private_len::REQ],
}

impl Req {
    fn parse(b: &[u8]) -> Req {
        Req {
            local_comm_id: u32_at(b, 0),
            service_id: u64_at(b, 8),
            local_ca_guid: u64_at(b, 16),
            local_qkey: u32_at(b, 28),
            local_qpn: u24_at(b, 32),
            responder_resources: b[35],
            local_eecn: u24_at(b, 36),
            initiator_depth: b[39],
            remote_eecn: u24_at(b, 40),
            remote_cm_response_timeout: bits(b, 43, 0, 5),
            transport_service_type: bits(b, 43, 5, 2),
            end_to_end_flow_control: bit(b, 43, 7),
            starting_psn: Psn::new(u24_at(b, 44)),
            local_cm_response_timeout: bits(b, 47, 0, 5),
            retry_count: bits(b, 47, 5, 3),
            pkey: u16_at(b, 48),
            path_mtu: bits(b, 50, 0, 4),
            rdc_exists: bit(b, 50, 4),
            rnr_retry_count: bits(b, 50, 5, 3),
            max_cm_retries: bits(b, 51, 0, 4),
            srq: bit(b, 51, 4),
            extended_transport_type: bits(b, 51, 5, 3),
            primary: CmPath::parse(b, 52),
            alternate: CmPath::parse(b, 96),
            sap_supported: bit(b, 139, 5),
            private_data: array(b, 140),
        }
    }

    fn emit(&self, w: &mut W<'_>) -> Result<()> {
        set_u32(w.0, 0, self.local_comm_id);
        set_u64(w.0, 8, self.service_id);
        set_u64(w.0, 16, self.local_ca_guid);
        set_u32(w.0, 28, self.local_qkey);
        w.u24(32, self.local_qpn)?;
        w.0[35] = self.responder_resources;
        w.u24(36, self.local_eecn)?;
        w.0[39] = self.initiator_depth;
        w.u24(40, self.remote_eecn)?;
        w.bits(43, 0, 5, self.remote_cm_response_timeout)?;
        w.bits(43, 5, 2, self.transport_service_type)?;
        w.flag(43, 7, self.end_to_end_flow_control);
        w.u24(44, self.starting_psn.value())?;
        w.bits(47, 0, 5, self.local_cm_response_timeout)?;
        w.bits(47, 5, 3, self.retry_count)?;
        set_u16(w.0, 48, self.pkey);
        w.bits(50, 0, 4, self.path_mtu)?;
        w.flag(50, 4, self.rdc_exists);
        w.bits(50, 5, 3, self.rnr_retry_count)?;
        w.bits(51, 0, 4, self.max_cm_retries)?;
        w.flag(51, 4, self.srq);
        w.bits(51, 5, 3, self.extended_transport_type)?;
        self.primary.emit(w, 52)?;
        self.alternate.emit(w, 96)?;
        w.flag(139, 5, self.sap_supported);
        w.bytes(140, &self.private_data);
        Ok(())
    }
}

/// MessageReceiptAcknowledgement (§12.6.6 table 107): "your message
/// arrived, the answer will take longer".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mra {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The message acknowledged, 2 bits (0 REQ, 1 REP, 2 LAP).
    pub message_mraed: u8,
    /// Service timeout, 5 bits.
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; private_len::MRA],
}

impl Mra {
    fn parse(b: &[u8]) -> Mra {
        Mra {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            message_mraed: bits(b, 8, 0, 2),
            service_timeout: bits(b, 9, 0, 5),
            private_data: array(b, 10),
        }
    }

    fn emit(&self, w: &mut W<'_>) -> Result<()> {
        set_u32(w.0, 0, self.local_comm_id);
        set_u32(w.0, 4, self.remote_comm_id);
        w.bits(8, 0, 2, self.message_mraed)?;
        w.bits(9, 0, 5, self.service_timeout)?;
        w.bytes(10, &self.private_data);
        Ok(())
    }
}

/// ConnectReject (§12.6.7 table 108).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rej {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID (0 if the REQ's sender is not yet known).
    pub remote_comm_id: u32,
    /// The message rejected, 2 bits (0 REQ, 1 REP, 2 none).
    pub message_rejected: u8,
    /// Length of the meaningful part of the ARI, 7 bits.
    pub rejected_info_length: u8,
    /// Reason (table 109; 28 = consumer reject).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; INFO_LEN],
    /// Private data.
    pub private_data: [u8; private_len::REJ],
}

impl Rej {
    fn parse(b: &[u8]) -> Rej {
        Rej {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            message_rejected: bits(b, 8, 0, 2),
            rejected_info_length: bits(b, 9, 0, 7),
            reason: u16_at(b, 10),
            ari: array(b, 12),
            private_data: array(b, 84),
        }
    }

    fn emit(&self, w: &mut W<'_>) -> Result<()> {
        set_u32(w.0, 0, self.local_comm_id);
        set_u32(w.0, 4, self.remote_comm_id);
        w.bits(8, 0, 2, self.message_rejected)?;
        w.bits(9, 0, 7, self.rejected_info_length)?;
        set_u16(w.0, 10, self.reason);
        w.bytes(12, &self.ari);
        w.bytes(84, &self.private_data);
        Ok(())
    }
}

/// ConnectReply (§12.6.8 table 110): the passive side's QP and the PSN it
/// expects first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rep {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID: the REQ's local one.
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// The sender's QPN, 24 bits.
    pub local_qpn: u32,
    /// Local EE context number, 24 bits.
    pub local_eecn: u32,
    /// Starting PSN: the PSN the sender's receive queue expects first, so
    /// the one the active side's first request carries.
    pub starting_psn: Psn,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay, 5 bits.
    pub target_ack_delay: u8,
    /// Failover accepted, 2 bits.
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count, 3 bits.
    pub rnr_retry_count: u8,
    /// The sender's QP uses an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; private_len::REP],
}

impl Rep {
    fn parse(b: &[u8]) -> Rep {
        Rep {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            local_qkey: u32_at(b, 8),
            local_qpn: u24_at(b, 12),
            local_eecn: u24_at(b, 16),
            starting_psn: Psn::new(u24_at(b, 20)),
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: bits(b, 26, 0, 5),
            failover_accepted: bits(b, 26, 5, 2),
            end_to_end_flow_control: bit(b, 26, 7),
            rnr_retry_count: bits(b, 27, 0, 3),
            srq: bit(b, 27, 3),
            local_ca_guid: u64_at(b, 28),
            private_data: array(b, 36),
        }
    }

    fn emit(&self, w: &mut W<'_>) -> Result<()> {
        set_u32(w.0, 0, self.local_comm_id);
        set_u32(w.0, 4, self.remote_comm_id);
        set_u32(w.0, 8, self.local_qkey);
        w.u24(12, self.local_qpn)?;
        w.u24(16, self.local_eecn)?;
        w.u24(20, self.starting_psn.value())?;
        w.0[24] = self.responder_resources;
        w.0[25] = self.initiator_depth;
        w.bits(26, 0, 5, self.target_ack_delay)?;
        w.bits(26, 5, 2, self.failover_accepted)?;
        w.flag(26, 7, self.end_to_end_flow_control);
        w.bits(27, 0, 3, self.rnr_retry_count)?;
        w.flag(27, 3, self.srq);
        set_u64(w.0, 28, self.local_ca_guid);
        w.bytes(36, &self.private_data);
        Ok(())
    }
}

/// The two communication IDs and private data: RTU (§12.6.9 table 111)
/// and DREP (§12.6.11 table 113) have exactly these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids224 {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; private_len::RTU],
}

/// ReadyToUse (§12.6.9).
pub type Rtu = Ids224;
/// DisconnectReply (§12.6.11).
pub type Drep = Ids224;

impl Ids224 {
    /// The message with no private data.
    pub fn new(local_comm_id: u32, remote_comm_id: u32) -> Ids224 {
        Ids224 {
            local_comm_id,
            remote_comm_id,
            private_data: [0; private_len::RTU],
        }
    }

    fn parse(b: &[u8]) -> Ids224 {
        Ids224 {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            private_data: array(b, 8),
        }
    }

    fn emit(&self, w: &mut W<'_>) {
        set_u32(w.0, 0, self.local_comm_id);
        set_u32(w.0, 4, self.remote_comm_id);
        w.bytes(8, &self.private_data);
    }
}

/// DisconnectRequest (§12.6.10 table 112).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dreq {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (or EECN), 24 bits.
    pub remote_qpn_eecn: u32,
    /// Private data.
    pub private_data: [u8; private_len::DREQ],
}

impl Dreq {
    fn parse(b: &[u8]) -> Dreq {
        Dreq {
            local_comm_id: u32_at(b, 0),
            remote_comm_id: u32_at(b, 4),
            remote_qpn_eecn: u24_at(b, 8),
            private_data: array(b, 12),
        }
    }

    fn emit(&self, w: &mut W<'_>) -> Result<()> {
        set_u32(w.0, 0, self.local_comm_id);
        set_u32(w.0, 4, self.remote_comm_id);
        w.u24(8, self.remote_qpn_eecn)?;
        w.bytes(12, &self.private_data);
        Ok(())
    }
}

/// ServiceIDResolutionRequest (§12.11.1 table 119): which UD QP serves a
/// service ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReq {
    /// Request ID, echoed in the answer.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service ID asked about.
    pub service_id: u64,
    /// Private data.
    pub private_data: [u8; private_len::SIDR_REQ],
}

impl SidrReq {
    fn parse(b: &[u8]) -> SidrReq {
        SidrReq {
            request_id: u32_at(b, 0),
            pkey: u16_at(b, 4),
            service_id: u64_at(b, 8),
            private_data: array(b, 16),
        }
    }

    fn emit(&self, w: &mut W<'_>) {
        set_u32(w.0, 0, self.request_id);
        set_u16(w.0, 4, self.pkey);
        set_u64(w.0, 8, self.service_id);
        w.bytes(16, &self.private_data);
    }
}

/// ServiceIDResolutionResponse (§12.11.2 table 120).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRep {
    /// The request's ID.
    pub request_id: u32,
    /// Status (0 = valid QPN and Q_Key).
    pub status: u8,
    /// Length of the meaningful part of the additional information.
    pub additional_info_length: u8,
    /// The UD QP serving the service, 24 bits.
    pub qpn: u32,
    /// The service ID.
    pub service_id: u64,
    /// The QP's Q_Key.
    pub qkey: u32,
    /// Additional information.
    pub additional_info: [u8; INFO_LEN],
    /// Private data.
    pub private_data: [u8; private_len::SIDR_REP],
}

impl SidrRep {
    fn parse(b: &[u8]) -> SidrRep {
        SidrRep {
            request_id: u32_at(b, 0),
            status: b[4],
            additional_info_length: b[5],
            qpn: u24_at(b, 8),
            service_id: u64_at(b, 12),
            qkey: u32_at(b, 20),
            additional_info: array(b, 24),
            private_data: array(b, 96),
        }
    }

    fn emit(&self, w: &mut W<'_>) -> Result<()> {
        set_u32(w.0, 0, self.request_id);
        w.0[4] = self.status;
        w.0[5] = self.additional_info_length;
        w.u24(8, self.qpn)?;
        set_u64(w.0, 12, self.service_id);
        set_u32(w.0, 20, self.qkey);
        w.bytes(24, &self.additional_info);
        w.bytes(96, &self.private_data);
        Ok(())
    }
}

/// One CM message, by attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    /// ConnectRequest, 0x0010.
    Req(Req),
    /// MessageReceiptAcknowledgement, 0x0011.
    Mra(Mra),
    /// ConnectReject, 0x0012.
    Rej(Rej),
    /// ConnectReply, 0x0013.
    Rep(Rep),
    /// ReadyToUse, 0x0014.
    Rtu(Rtu),
    /// DisconnectRequest, 0x0015.
    Dreq(Dreq),
    /// DisconnectReply, 0x0016.
    Drep(Drep),
    /// ServiceIDResolutionRequest, 0x0017.
    SidrReq(SidrReq),
    /// ServiceIDResolutionResponse, 0x0018.
    SidrRep(SidrRep),
}

impl CmMessage {
    /// The message's attribute ID ([`attr`]).
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Reads the message of attribute `attribute_id` from a MAD's data
    /// area (at least [`DATA_LEN`] bytes).
    pub fn parse(attribute_id: u16, data: &[u8]) -> Result<CmMessage> {
        if data.len() < DATA_LEN {
            return Err(MadError::Truncated);
        }
        let b = &data[..DATA_LEN];
        Ok(match attribute_id {
            attr::REQ => CmMessage::Req(Req::parse(b)),
            attr::MRA => CmMessage::Mra(Mra::parse(b)),
            attr::REJ => CmMessage::Rej(Rej::parse(b)),
            attr::REP => CmMessage::Rep(Rep::parse(b)),
            attr::RTU => CmMessage::Rtu(Rtu::parse(b)),
            attr::DREQ => CmMessage::Dreq(Dreq::parse(b)),
            attr::DREP => CmMessage::Drep(Drep::parse(b)),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::parse(b)),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::parse(b)),
            a => return Err(MadError::UnknownAttribute(a)),
        })
    }

    /// Writes the message into the first [`DATA_LEN`] bytes of `data`,
    /// reserved bits zero.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize> {
        if data.len() < DATA_LEN {
            return Err(MadError::BufferTooSmall);
        }
        let mut w = W(&mut data[..DATA_LEN]);
        w.0.fill(0);
        match self {
            CmMessage::Req(m) => m.emit(&mut w)?,
            CmMessage::Mra(m) => m.emit(&mut w)?,
            CmMessage::Rej(m) => m.emit(&mut w)?,
            CmMessage::Rep(m) => m.emit(&mut w)?,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.emit(&mut w),
            CmMessage::Dreq(m) => m.emit(&mut w)?,
            CmMessage::SidrReq(m) => m.emit(&mut w),
            CmMessage::SidrRep(m) => m.emit(&mut w)?,
        }
        Ok(DATA_LEN)
    }

    /// The message's private data.
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmMessage::Req(m) => &m.private_data,
            CmMessage::Mra(m) => &m.private_data,
            CmMessage::Rej(m) => &m.private_data,
            CmMessage::Rep(m) => &m.private_data,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => &m.private_data,
            CmMessage::Dreq(m) => &m.private_data,
            CmMessage::SidrReq(m) => &m.private_data,
            CmMessage::SidrRep(m) => &m.private_data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A REQ read from distinct bytes finds its fields where table 106
    /// puts them, and survives emit -> parse.
    #[test]
    fn a_req_with_every_field_set_round_trips_at_the_table_offsets() {
        let mut b = [0x5Au8; DATA_LEN];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 ^ 0xA5;
        }
        let req = match CmMessage::parse(attr::REQ, &b).unwrap() {
            CmMessage::Req(r) => r,
            m => panic!("{m:?}"),
        };
        assert_eq!(req.local_qpn, u24_at(&b, 32));
        assert_eq!(req.starting_psn.value(), u24_at(&b, 44));
        assert_eq!(req.path_mtu, b[50] >> 4);
        assert_eq!(req.primary.flow_label, u32_at(&b, 88) >> 12);
        assert_eq!(req.alternate.local_gid[..], b[100..116]);
        assert_eq!(req.private_data[..], b[140..]);
        let m = CmMessage::Req(req);
        let mut out = [0xFFu8; DATA_LEN];
        m.emit(&mut out).unwrap();
        assert_eq!(CmMessage::parse(attr::REQ, &out).unwrap(), m);
        // Reserved bytes are zero after emit: 4..8 and 24..28.
        assert_eq!(&out[4..8], &[0; 4]);
        assert_eq!(&out[24..28], &[0; 4]);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let b = [0u8; DATA_LEN];
        let CmMessage::Req(mut r) = CmMessage::parse(attr::REQ, &b).unwrap() else {
            unreachable!()
        };
        r.local_qpn = 1 << 24;
        let mut out = [0u8; DATA_LEN];
        assert_eq!(
            CmMessage::Req(r.clone()).emit(&mut out),
            Err(MadError::FieldRange)
        );
        r.local_qpn = 1;
        r.primary.flow_label = 1 << 20;
        assert_eq!(
            CmMessage::Req(r.clone()).emit(&mut out),
            Err(MadError::FieldRange)
        );
        r.primary.flow_label = 0;
        r.retry_count = 8;
        assert_eq!(CmMessage::Req(r).emit(&mut out), Err(MadError::FieldRange));
    }

    #[test]
    fn every_attribute_parses_and_its_canonical_form_parses_back() {
        for a in attr::REQ..=attr::SIDR_REP {
            let mut b = [0u8; DATA_LEN];
            for (i, x) in b.iter_mut().enumerate() {
                *x = (i * 7 + a as usize) as u8;
            }
            let m = CmMessage::parse(a, &b).unwrap();
            assert_eq!(m.attribute_id(), a);
            let mut out = [0u8; DATA_LEN];
            m.emit(&mut out).unwrap();
            // Parsing the canonical form gives the same message back.
            assert_eq!(CmMessage::parse(a, &out).unwrap(), m, "{a:#x}");
        }
        assert_eq!(
            CmMessage::parse(0x19, &[0; DATA_LEN]),
            Err(MadError::UnknownAttribute(0x19))
        );
        assert_eq!(
            CmMessage::parse(attr::RTU, &[0; 10]),
            Err(MadError::Truncated)
        );
    }

    #[test]
    fn path_mtu_codes() {
        assert_eq!(path_mtu_bytes(1), Some(256));
        assert_eq!(path_mtu_bytes(5), Some(4096));
        assert_eq!(path_mtu_bytes(0), None);
        assert_eq!(path_mtu_bytes(6), None);
    }
}
