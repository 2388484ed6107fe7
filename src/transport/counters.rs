//! Counters, per QP and per device. Where the mlx5 or rxe hardware
//! counters (`/sys/class/infiniband/*/ports/1/hw_counters`) have a name
//! for the same event, the counter carries it; the doc line says whose.

use serde::Serialize;

macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }

        impl $name {
            /// Every counter with its name, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($field), self.$field)),*].into_iter()
            }

            /// Adds `o` to `self`, counter by counter.
            pub fn add(&mut self, o: &$name) {
                $(self.$field += o.$field;)*
            }
        }

        impl core::fmt::Display for $name {
            /// `name=value` for every non-zero counter.
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut first = true;
                for (n, v) in self.iter().filter(|(_, v)| *v != 0) {
                    if !first {
                        f.write_str(" ")?;
                    }
                    first = false;
                    write!(f, "{n}={v}")?;
                }
                Ok(())
            }
        }
    };
}

counters! {
    /// What one QP saw and did. The counters every packet moves come
    /// first: they share a cache line of the QP's state.
    QpCounters {
        /// Packets sent (rxe `sent_pkts`).
        sent_pkts,
        /// Packets received for this QP and accepted by its checks (rxe
        /// `rcvd_pkts`).
        rcvd_pkts,
        /// READ requests executed (mlx5 `rx_read_requests`).
        rx_read_requests,
        /// WRITE messages executed (mlx5 `rx_write_requests`).
        rx_write_requests,
        /// Atomics executed (mlx5 `rx_atomic_requests`).
        rx_atomic_requests,
        /// SEND messages received (rxe `rdma_recvs` counts packets).
        rdma_recvs,
        /// Messages whose sending started (rxe `rdma_sends` counts packets).
        rdma_sends,
        /// ACKs and NAKs sent.
        acks_sent,
        /// Packets (requests, READ responses) written with their payload
        /// left in its region for the port to send from there (zero-copy
        /// send, `Device::set_zero_copy`), not copied into the frame (a
        /// port that then cannot attach it copies it in after all).
        lent_pkts,
        /// Request packets sent again by go-back-N (mlx5 `roce_adp_retrans`
        /// counts adaptive ones; this counts all).
        retransmitted_pkts,
        /// Retries started (rxe `completer_retry_err`).
        completer_retry_err,
        /// Local ACK timer expiries (mlx5 `local_ack_timeout_err`).
        local_ack_timeout_err,
        /// NAK PSN sequence errors received (mlx5 `packet_seq_err`, rxe
        /// `rcvd_seq_err`).
        packet_seq_err,
        /// RNR NAKs received (mlx5 `rnr_nak_retry_err`, rxe `rcvd_rnr_err`).
        rnr_nak_retry_err,
        /// A READ or atomic response missing: an ACK or response beyond it
        /// arrived first (mlx5 `implied_nak_seq_err`).
        implied_nak_seq_err,
        /// Retries exhausted (rxe `retry_exceeded_err`).
        retry_exceeded_err,
        /// RNR retries exhausted (rxe `retry_rnr_exceeded_err`).
        retry_rnr_exceeded_err,
        /// NAK invalid request received (mlx5 `req_remote_invalid_request`).
        req_remote_invalid_request,
        /// NAK remote access error received (mlx5 `req_remote_access_errors`).
        req_remote_access_errors,
        /// NAK remote operational error received.
        req_remote_operational_errors,
        /// Send-queue completions with an error status (mlx5 `req_cqe_error`).
        req_cqe_error,
        /// Send-queue work requests flushed (mlx5 `req_cqe_flush_error`).
        req_cqe_flush_error,
        /// Responses that answered nothing outstanding (stale or duplicate).
        ghost_responses,
        /// Request packets ahead of the expected PSN (mlx5 `out_of_sequence`;
        /// rxe `out_of_seq_request` counts only the NAKed ones).
        out_of_sequence,
        /// NAK PSN sequence errors sent.
        seq_naks_sent,
        /// Duplicate requests answered or dropped (mlx5 / rxe
        /// `duplicate_request`).
        duplicate_request,
        /// RNR NAKs sent for want of a receive WQE (mlx5 `out_of_buffer`,
        /// rxe `send_rnr_err`).
        out_of_buffer,
        /// NAK invalid request sent.
        resp_invalid_request,
        /// NAK remote access error sent (mlx5 `resp_remote_access_errors`).
        resp_remote_access_errors,
        /// NAK remote operational error sent.
        resp_remote_operational_errors,
        /// Receives too long for their WQE (mlx5 `resp_local_length_error`).
        resp_local_length_error,
        /// Receive completions with an error status (mlx5 `resp_cqe_error`).
        resp_cqe_error,
        /// Receive work requests flushed (mlx5 `resp_cqe_flush_error`).
        resp_cqe_flush_error,
        /// ECN CE-marked packets received (mlx5
        /// `np_ecn_marked_roce_packets`).
        np_ecn_marked_roce_packets,
        /// CNPs sent by the notification point (mlx5 `np_cnp_sent`).
        np_cnp_sent,
        /// CNPs taken by the reaction point's rate control (mlx5
        /// `rp_cnp_handled`).
        rp_cnp_handled,
        /// CNPs received while the QP runs no rate control (mlx5
        /// `rp_cnp_ignored`).
        rp_cnp_ignored,
        /// Packets dropped for a P_Key mismatch.
        pkey_violation,
        /// Packets from an address other than the QP's peer.
        wrong_source,
        /// Packets dropped because of the QP's state.
        state_drops,
        /// Request packets with an opcode out of sequence or not allowed.
        opcode_errors,
        /// UD datagrams dropped for a Q_Key other than the QP's (IBTA
        /// §10.2.5, C10-17).
        qkey_violation,
        /// Responses that carried an INT echo (a path with INT telemetry;
        /// [`crate::wire::int`]).
        int_echoes,
        /// Packets on a path with INT telemetry that arrived without its
        /// trailer: the peer did not agree to INT, or sends without it.
        int_missing,
        /// Selective repeat: SEND / WRITE packets placed ahead of the
        /// expected PSN ([`crate::transport::Recovery::Selective`]).
        sr_placed_ahead,
        /// Selective repeat: packets ahead of the expected PSN that could
        /// not be placed (no place trailer, a READ or atomic, a check
        /// failed, too far ahead): dropped, as go-back-N would.
        sr_not_placed,
        /// Selective repeat: NAKs sent with a sack trailer.
        sr_sacks_sent,
        /// Selective repeat: NAKs received with a sack trailer.
        sr_sacks_received,
        /// Selective repeat: packets sent again alone, without the packets
        /// after them.
        sr_selective_resends,
        /// Selective repeat: packets a go-back-N resend skipped, because
        /// the responder had them.
        sr_resends_skipped,
        /// Selective repeat: READ responses and atomic acknowledgements
        /// taken ahead of an unanswered READ or atomic before them.
        sr_responses_ahead,
    }
}

counters! {
    /// What the device's receive path dropped before any QP saw it.
    RxCounters {
        /// Frames received.
        frames,
        /// Not RoCE v2 (another EtherType, protocol or UDP port).
        not_roce,
        /// RoCE v2 frames whose headers fail the checks of `wire`.
        malformed,
        /// Frames of another VLAN than the port's, or untagged on a VLAN
        /// port (see `transport::vlan`).
        wrong_vlan,
        /// Frames whose ICRC is wrong (dropped silently, CA17-24).
        icrc_errors,
        /// Frames taken without an ICRC check: they carry an ICRC left
        /// to the NIC, on a device that leaves it to the NIC too
        /// (`transport::path::Offload::icrc`).
        icrc_unchecked,
        /// Addressed to an IP that is not ours.
        wrong_destination,
        /// Transport we do not run (UC, XRC), or UD to an RC QP and RC to a
        /// UD one.
        unsupported_transport,
        /// No QP with that number.
        unknown_qp,
        /// CNPs received (issue of congestion control).
        cnp_received,
    }
}
