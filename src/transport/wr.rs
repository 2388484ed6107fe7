//! Work requests and completions: what the application posts to a QP's send
//! and receive queues and what comes back on a completion queue. The names
//! and statuses mirror libibverbs (`ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`,
//! `ibv_wc_status`) so that a verbs user finds them where expected.

use super::mr::{Lkey, Rkey};

/// A scatter/gather element: `length` bytes at `addr` of the memory region
/// `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Bytes in the element.
    pub length: u32,
    /// L_Key of the memory region that holds them.
    pub lkey: Lkey,
}

/// A work request's scatter/gather list: up to [`SGE_INLINE`] elements
/// are held in the work request itself, so posting one allocates nothing;
/// a longer list (up to the QP's `max_send_sge` / `max_recv_sge`) spills
/// to the heap.
pub type SgeList = smallvec::SmallVec<[Sge; SGE_INLINE]>;

/// Scatter/gather elements a work request holds without allocating.
pub const SGE_INLINE: usize = 2;

/// The operation of a send work request (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: the payload goes to the responder's next receive WQE.
    Send,
    /// SEND with immediate data for the receiver's completion.
    SendWithImm(u32),
    /// SEND that invalidates the responder's memory region `rkey`.
    SendWithInv(Rkey),
    /// RDMA WRITE of the payload to the responder's memory.
    Write {
        /// Virtual address to write at.
        remote_addr: u64,
        /// R_Key of the remote memory region.
        rkey: Rkey,
    },
    /// RDMA WRITE that also consumes a receive WQE and completes it with `imm`.
    WriteWithImm {
        /// Virtual address to write at.
        remote_addr: u64,
        /// R_Key of the remote memory region.
        rkey: Rkey,
        /// Immediate data for the receiver's completion.
        imm: u32,
    },
    /// RDMA READ of the remote bytes into the local elements.
    Read {
        /// Virtual address to read at.
        remote_addr: u64,
        /// R_Key of the remote memory region.
        rkey: Rkey,
    },
    /// 64-bit compare-and-swap at `remote_addr` (8-byte aligned): if the
    /// value equals `compare` it becomes `swap`; the old value lands in the
    /// (8-byte) local buffer.
    CompareSwap {
        /// Virtual address of the 8-byte target.
        remote_addr: u64,
        /// R_Key of the remote memory region.
        rkey: Rkey,
        /// The value the target must hold for the swap to happen.
        compare: u64,
        /// The value written if it does.
        swap: u64,
    },
    /// 64-bit fetch-and-add; the old value lands in the local buffer.
    FetchAdd {
        /// Virtual address of the 8-byte target.
        remote_addr: u64,
        /// R_Key of the remote memory region.
        rkey: Rkey,
        /// The addend.
        add: u64,
    },
}

impl SendOp {
    /// Whether the responder answers with data (READ, atomics).
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    /// Whether the responder takes a receive WQE for it (a SEND, a WRITE
    /// with immediate).
    pub fn consumes_recv(&self) -> bool {
        matches!(
            self,
            SendOp::Send
                | SendOp::SendWithImm(_)
                | SendOp::SendWithInv(_)
                | SendOp::WriteWithImm { .. }
        )
    }
    /// Whether this is a compare-and-swap or fetch-and-add.
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// Whether the local buffers receive data (READ, atomics).
    pub fn writes_local(&self) -> bool {
        self.is_read_or_atomic()
    }
    /// The opcode of the sender's completion for this operation.
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
    Sges(SgeList),
    /// Copied into the work request when it is posted (`IBV_SEND_INLINE`);
    /// the buffer may be reused at once. Not for READ or atomics.
    Inline(Vec<u8>),
}

impl Payload {
    /// One element (what nearly every work request carries).
    pub fn sge(sge: Sge) -> Payload {
        // Built inline at once (the `smallvec!` macro pushes, with a
        // spill path it never takes).
        Payload::Sges(SgeList::from_buf_and_len([sge; SGE_INLINE], 1))
    }
    /// The payload's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(s) => s.iter().map(|s| s.length as u64).sum(),
            Payload::Inline(b) => b.len() as u64,
        }
    }
    /// Whether the payload is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// The application's identifier, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The data to send, or where READ and atomic results go.
    pub payload: Payload,
    /// Generate a completion on success (`IBV_SEND_SIGNALED`); errors always
    /// complete.
    pub signaled: bool,
    /// Wait for every earlier READ and atomic to complete (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Set SE on the last packet (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
    /// UD: where the datagram goes (`wr.ud`); RC QPs ignore it.
    pub ud: Option<super::ud::UdDest>,
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
            ud: None,
        }
    }

    /// A signaled UD SEND (or SEND with immediate, `op`) of `payload` to
    /// `dest`.
    pub fn ud(wr_id: u64, op: SendOp, payload: Payload, dest: super::ud::UdDest) -> SendWr {
        SendWr {
            ud: Some(dest),
            ..SendWr::new(wr_id, op, payload)
        }
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// The application's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where the received bytes are scattered, in order.
    pub sges: SgeList,
}

/// Completion status (`ibv_wc_status`; the numbers are libibverbs').
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum WcStatus {
    /// The work request completed.
    Success = 0,
    /// A received message is longer than the receive WQE's buffers, or a request could not be posted for its size.
    LocLenErr = 1,
    /// Local QP operation error: the work request could not be executed or posted.
    LocQpOpErr = 2,
    /// An L_Key, its PD, access rights or bounds do not fit the work request.
    LocProtErr = 4,
    /// The QP went to the error state before the work request completed.
    WrFlushErr = 5,
    /// The responder NAKed the request as invalid (or an invalidate failed).
    RemInvReqErr = 9,
    /// The responder NAKed the request for its R_Key, bounds or rights.
    RemAccessErr = 10,
    /// The responder could not complete the request (NAK remote operational error).
    RemOpErr = 11,
    /// The transport retry count ran out without an ACK.
    RetryExcErr = 12,
    /// The RNR retry count ran out while the responder had no receive WQE.
    RnrRetryExcErr = 13,
    /// The response was malformed or a NAK code was unknown.
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
    /// A SEND completed (the requester side).
    Send,
    /// An RDMA WRITE completed.
    RdmaWrite,
    /// An RDMA READ completed; the data is in the local buffers.
    RdmaRead,
    /// A compare-and-swap completed; the old value is in the local buffer.
    CompSwap,
    /// A fetch-and-add completed; the old value is in the local buffer.
    FetchAdd,
    /// A SEND arrived into a receive WQE.
    Recv,
    /// An RDMA WRITE with immediate consumed a receive WQE.
    RecvRdmaWithImm,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Wc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// The number of the local QP it was posted to.
    pub qp_num: u32,
    /// Receive completions: bytes received (for RDMA WRITE with immediate,
    /// the length of the write).
    pub byte_len: u32,
    /// Immediate data (`IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    /// The R_Key the sender invalidated (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// UD receives: the sender's QP number (`src_qp`); the buffer starts
    /// with the 40-byte GRH (`IBV_WC_GRH`).
    pub src_qp: Option<u32>,
}
