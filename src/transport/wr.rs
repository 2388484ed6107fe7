//! Work requests and completions: what the application posts to a QP's send
//! and receive queues and what comes back on a completion queue. The names
//! and statuses mirror libibverbs (`ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`,
//! `ibv_wc_status`) so that a verbs user finds them where expected.

use super::mr::{Lkey, Rkey};

/// A scatter/gather element: `length` bytes at `addr` of the memory region
/// `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: Lkey,
}

/// The operation of a send work request (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendWithImm(u32),
    /// SEND that invalidates the responder's memory region `rkey`.
    SendWithInv(Rkey),
    Write {
        remote_addr: u64,
        rkey: Rkey,
    },
    WriteWithImm {
        remote_addr: u64,
        rkey: Rkey,
        imm: u32,
    },
    Read {
        remote_addr: u64,
        rkey: Rkey,
    },
    /// 64-bit compare-and-swap at `remote_addr` (8-byte aligned): if the
    /// value equals `compare` it becomes `swap`; the old value lands in the
    /// (8-byte) local buffer.
    CompareSwap {
        remote_addr: u64,
        rkey: Rkey,
        compare: u64,
        swap: u64,
    },
    /// 64-bit fetch-and-add; the old value lands in the local buffer.
    FetchAdd {
        remote_addr: u64,
        rkey: Rkey,
        add: u64,
    },
}

impl SendOp {
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// Whether the local buffers receive data (READ, atomics).
    pub fn writes_local(&self) -> bool {
        self.is_read_or_atomic()
    }
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// Where a send work request's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Gathered from (or, for READ and atomics, scattered to) these
    /// elements, in order.
    Sges(Vec<Sge>),
    /// Copied into the work request when it is posted (`IBV_SEND_INLINE`);
    /// the buffer may be reused at once. Not for READ or atomics.
    Inline(Vec<u8>),
}

impl Payload {
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(s) => s.iter().map(|s| s.length as u64).sum(),
            Payload::Inline(b) => b.len() as u64,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub payload: Payload,
    /// Generate a completion on success (`IBV_SEND_SIGNALED`); errors always
    /// complete.
    pub signaled: bool,
    /// Wait for every earlier READ and atomic to complete (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Set SE on the last packet (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

impl SendWr {
    /// A signaled work request without fence or solicited event.
    pub fn new(wr_id: u64, op: SendOp, payload: Payload) -> SendWr {
        SendWr {
            wr_id,
            op,
            payload,
            signaled: true,
            fence: false,
            solicited: false,
        }
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// Completion status (`ibv_wc_status`; the numbers are libibverbs').
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocProtErr = 4,
    WrFlushErr = 5,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    BadRespErr = 8,
}

impl WcStatus {
    /// libibverbs' `ibv_wc_status_str` wording.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a completion completes (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub qp_num: u32,
    /// Receive completions: bytes received (for RDMA WRITE with immediate,
    /// the length of the write).
    pub byte_len: u32,
    /// Immediate data (`IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    /// The R_Key the sender invalidated (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
}
