//! The Unreliable Datagram transport (IBTA Vol. 1 §9.8.3, §10.2.5;
//! A17 §17.8 for the GRH of RoCE v2): one QP talks to any other UD QP.
//!
//! - A message is one SEND ONLY (or SEND ONLY with immediate) packet of at
//!   most the port's MTU ([`super::DeviceConfig::port_mtu`]), with a DETH
//!   carrying the Q_Key and the source QP (§9.8.3.1). Nothing is
//!   acknowledged: a send completes once its packet is written out, and
//!   the PSN simply counts packets (§9.8.3.1.1).
//! - Each work request names its destination ([`UdDest`]): an address
//!   handle the device holds ([`super::Device::create_ah`]: the peer's GID
//!   and next-hop MAC, our GID, hop limit, traffic class, flow label; its
//!   headers built once), the remote QP and its Q_Key. A Q_Key with the
//!   high bit set means "the QP's own" (§10.2.5, C10-15).
//! - A datagram is received if the QP can receive (RTR, RTS, SQD), its
//!   P_Key matches and its Q_Key is the QP's (§10.2.5, C10-17; else
//!   `qkey_violation`). It takes the next receive WQE; with none posted
//!   it is dropped (`out_of_buffer`: no RNR for UD), and one longer than
//!   the WQE's 40 + payload bytes is dropped too, the WQE kept
//!   (`resp_local_length_error`), as rxe does (class D, `rxe_resp.c`).
//! - The first 40 bytes of every receive buffer hold the GRH as
//!   libibverbs gives it on RoCE v2 ([`crate::wire::Frame::grh`]); the
//!   completion's length counts them and names the source QP.
//!
//! UD packets are not paced, answer CE marks with no CNP and are Not-ECT
//! unless the address handle's traffic class says otherwise: the
//! notification point and the rate control are RC's. Their UDP source
//! port is rxe's per-QP one ([`crate::wire::udp::qp_source_port`]).

use super::mr::{Access, KeyMap};
use super::path::build_path;
use super::path::{Packet, Path};
use super::qp::{AddressVector, QpAttr, QpState};
use super::wr::{Payload, SendOp, Wc, WcOpcode, WcStatus};
use super::{pkey_match, Cq, DeviceConfig, Error, Qp};
use crate::wire::opcode::Op;
use crate::wire::{udp, Ecn, ExtHeaders, Frame, Opcode};

/// The Q_Key of QP1, the general services QP that carries CM MADs
/// (IBTA §13.5.1.1: 0x80010000).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// QP1's number: the general services interface (GSI, IBTA §13.5.1). A UD
/// QP may be created with it ([`super::QpCaps::qpn`]).
pub const GSI_QPN: u32 = 1;

/// Bytes of the GRH area at the head of a UD receive buffer.
pub const GRH_LEN: usize = 40;

/// An address handle's number on its device (`ibv_ah`); never 0, so that
/// a work request's `Option<UdDest>` costs no tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AhId(pub core::num::NonZeroU32);

/// An address handle: where a UD QP's datagrams go, with the headers they
/// share (built once, when it is created).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ah {
    pub av: AddressVector,
    /// The headers of its datagrams; the P_Key, destination QP and UDP
    /// source port are each datagram's.
    pub path: Path,
}

impl Ah {
    /// Checks `av` against the device and builds its headers.
    pub fn new(cfg: &DeviceConfig, av: &AddressVector) -> Result<Ah, Error> {
        if av.sgid_index as usize >= cfg.gids.len() {
            return Err(Error::InvalidAttr("sgid_index beyond the GID table"));
        }
        if av.flow_label > 0xF_FFFF {
            return Err(Error::InvalidAttr("flow_label is 20 bits"));
        }
        if av.dmac.0[0] & 1 != 0 {
            return Err(Error::InvalidAttr("dmac is a multicast address"));
        }
        let mut path = build_path(cfg, 0, &QpAttr::default(), av)?;
        // No rate control reacts for UD: its ECN bits are the address
        // handle's, never ECT by default.
        path.ip.set_ecn(Ecn::from_bits(av.traffic_class & 3));
        let path = path.with_template();
        Ok(Ah { av: *av, path })
    }
}

/// Where a UD send goes (`ibv_send_wr.wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// The address handle.
    pub ah: AhId,
    /// The remote QP number.
    pub remote_qpn: u32,
    /// The remote QP's Q_Key; with bit 31 set the sending QP's own Q_Key
    /// goes instead (§10.2.5).
    pub remote_qkey: u32,
}

/// Checks a send work request for a UD QP when it is posted: SEND or
/// SEND with immediate, with a destination, of at most the port's MTU.
pub(super) fn check_post(
    cfg: &DeviceConfig,
    ahs: &KeyMap<Ah>,
    op: &SendOp,
    dest: Option<&UdDest>,
    len: u64,
) -> Result<(), Error> {
    if !matches!(op, SendOp::Send | SendOp::SendWithImm(_)) {
        return Err(Error::InvalidArgument(
            "a UD QP sends SEND and SEND with immediate only",
        ));
    }
    let Some(d) = dest else {
        return Err(Error::InvalidArgument(
            "a UD send names its destination (address handle, QPN, Q_Key)",
        ));
    };
    if !ahs.contains_key(&d.ah.0.get()) {
        return Err(Error::NoSuchAh);
    }
    if d.remote_qpn > 0x00FF_FFFF {
        return Err(Error::InvalidArgument("remote_qpn is 24 bits"));
    }
    if len > cfg.port_mtu.bytes() as u64 {
        return Err(Error::InvalidArgument(
            "a UD message is one packet: at most the port's MTU",
        ));
    }
    Ok(())
}

/// Sends the next datagram of a UD QP in RTS into `buf`; the work request
/// completes at once (signaled ones on the send CQ).
pub(super) fn transmit(
    qp: &mut Qp,
    cfg: &DeviceConfig,
    ahs: &KeyMap<Ah>,
    mrs: &super::MrTable,
    cqs: &mut [Cq],
    buf: &mut [u8],
) -> Option<usize> {
    if qp.state != QpState::Rts {
        return None;
    }
    loop {
        let w = qp.req.sq.front()?;
        let d = w.wr.ud?;
        // An address handle destroyed since the post fails the send.
        let path = ahs.get(&d.ah.0.get()).map(|ah| Path {
            int: false,
            dest_qp: d.remote_qpn,
            pkey: cfg.pkeys[qp.attr.pkey_index as usize],
            src_port: ah
                .av
                .src_port
                .unwrap_or_else(|| udp::qp_source_port(qp.qpn)),
            // The fields change per datagram: no template.
            tmpl: None,
            ..ah.path
        });
        let qkey = if d.remote_qkey & 0x8000_0000 != 0 {
            qp.attr.qkey
        } else {
            d.remote_qkey
        };
        let mut ext = ExtHeaders {
            deth: Some(crate::wire::DethRepr {
                qkey,
                src_qp: qp.qpn,
            }),
            ..ExtHeaders::default()
        };
        let opcode = match w.wr.op {
            SendOp::SendWithImm(imm) => {
                ext.imm = Some(imm);
                Opcode::ud(Op::SendOnlyWithImmediate)
            }
            _ => Opcode::ud(Op::SendOnly),
        };
        let pkt = Packet {
            opcode,
            psn: qp.req.psn,
            // rxe sets AckReq on its GSI QP's datagrams (that QP is not of
            // type UD there) and on no other UD QP's; receivers ignore it
            // on UD. Ours do the same, so that MADs match rxe's.
            ack_req: qp.qpn == GSI_QPN,
            solicited: w.wr.solicited,
            ext,
            int: None,
            sr: None,
        };
        let mut gathered = Ok(());
        let sent = path.and_then(|p| {
            p.emit(&pkt, w.len as usize, buf, |dst| match &w.wr.payload {
                Payload::Inline(b) => dst.copy_from_slice(b),
                Payload::Sges(s) => gathered = mrs.gather(qp.pd, s, 0, dst),
            })
        });
        let w = qp.req.sq.pop_front()?;
        let status = match (sent, gathered) {
            (Some(_), Ok(())) => WcStatus::Success,
            // No address handle, or a region gone since the post.
            (None, _) => WcStatus::LocQpOpErr,
            (Some(_), Err(_)) => WcStatus::LocProtErr,
        };
        if status == WcStatus::Success {
            qp.counters.sent_pkts += 1;
            qp.counters.rdma_sends += 1;
            qp.req.psn = qp.req.psn.add(1);
        } else {
            qp.counters.req_cqe_error += 1;
        }
        if w.wr.signaled || status != WcStatus::Success {
            let wc = Wc {
                wr_id: w.wr.wr_id,
                status,
                opcode: WcOpcode::Send,
                qp_num: qp.qpn,
                byte_len: w.len,
                imm_data: None,
                invalidated_rkey: None,
                src_qp: None,
            };
            qp.complete(cqs, qp.send_cq, wc);
        }
        if status == WcStatus::Success {
            return sent;
        }
    }
}

/// A UD datagram for `qp` (already checked to be its QP, of type UD):
/// the checks of the module doc, then the GRH and payload into the next
/// receive WQE and a completion on the receive CQ.
pub(super) fn receive(
    qp: &mut Qp,
    pkeys: &[u16],
    mrs: &mut super::MrTable,
    cqs: &mut [Cq],
    f: &Frame<'_>,
) {
    if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
        qp.counters.state_drops += 1;
        return;
    }
    if !pkey_match(f.bth_view().pkey(), pkeys[qp.attr.pkey_index as usize]) {
        qp.counters.pkey_violation += 1;
        return;
    }
    let Some(deth) = f.ext().deth else {
        qp.counters.opcode_errors += 1;
        return;
    };
    if deth.qkey != qp.attr.qkey {
        qp.counters.qkey_violation += 1;
        return;
    }
    qp.counters.rcvd_pkts += 1;
    let Some(wqe) = qp.resp.rq.front() else {
        qp.counters.out_of_buffer += 1;
        return;
    };
    let len = GRH_LEN + f.payload.len();
    if wqe.len < len as u64 {
        qp.counters.resp_local_length_error += 1;
        return;
    }
    if mrs
        .check_sges(qp.pd, &wqe.sges, Access::LOCAL_WRITE)
        .is_err()
    {
        // The WQE's buffers are gone or not writable: its completion says
        // so and the datagram is dropped.
        let wqe = qp.resp.rq.pop_front().expect("front exists");
        qp.counters.resp_cqe_error += 1;
        let wc = recv_wc(
            qp.qpn,
            wqe.wr_id,
            WcStatus::LocProtErr,
            0,
            None,
            deth.src_qp,
        );
        qp.complete(cqs, qp.recv_cq, wc);
        return;
    }
    let wqe = qp.resp.rq.pop_front().expect("front exists");
    mrs.scatter(&wqe.sges, 0, &f.grh());
    mrs.scatter(&wqe.sges, GRH_LEN as u64, f.payload);
    qp.counters.rdma_recvs += 1;
    let wc = recv_wc(
        qp.qpn,
        wqe.wr_id,
        WcStatus::Success,
        len as u32,
        f.ext().imm,
        deth.src_qp,
    );
    qp.complete(cqs, qp.recv_cq, wc);
}

fn recv_wc(qpn: u32, wr_id: u64, status: WcStatus, len: u32, imm: Option<u32>, src: u32) -> Wc {
    Wc {
        wr_id,
        status,
        opcode: WcOpcode::Recv,
        qp_num: qpn,
        byte_len: len,
        imm_data: imm,
        invalidated_rkey: None,
        src_qp: Some(src),
    }
}
