//! Connecting an RC QP: the attributes both ends agree on
//! ([`ConnectParams`]) and the RESET → INIT → RTR → RTS steps
//! (IBTA Vol. 1 §10.3.1, §11.2.4.2 `ibv_modify_qp`) that bring it up.

use crate::transport::{Access, AddressVector, AttrMask, Device, Mtu, QpAttr, QpState};
use crate::wire::MacAddr;
use core::net::IpAddr;

/// The attributes two QPs are connected with: what [`connect_steps`] sets
/// besides the addresses and the PSNs, which each side picks for itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// Path MTU of both QPs.
    pub mtu: Mtu,
    /// Local ACK timeout exponent: 4.096 µs x 2^timeout, 0 = none.
    pub timeout: u8,
    /// Transport retries before a work request fails, 0..7.
    pub retry_cnt: u8,
    /// RNR retries before a work request fails, 0..7; 7 = forever.
    pub rnr_retry: u8,
    /// RNR NAK timer code each responder sends (IBTA Vol. 1 §9.7.5.2.8).
    pub min_rnr_timer: u8,
    /// READ and atomic requests outstanding at most, each way.
    pub max_rd_atomic: u8,
    /// Remote access each responder grants.
    pub access: Access,
    /// DSCP and ECN bits of every packet; default
    /// [`DEFAULT_TRAFFIC_CLASS`](crate::transport::congestion::DEFAULT_TRAFFIC_CLASS).
    pub traffic_class: u8,
    /// Which of our GIDs the packets leave from (the address vector's
    /// `sgid_index`, the tools' `-g` / `-x`); of the same IP version as
    /// the peer's GID.
    pub sgid_index: u8,
    /// Both ends agree to INT telemetry
    /// ([`AddressVector::int_telemetry`]): only between ferroce endpoints
    /// that both asked for it.
    pub int_telemetry: bool,
    /// Loss recovery ([`AddressVector::recovery`]): selective repeat only
    /// between ferroce endpoints that both asked for it.
    pub recovery: super::Recovery,
}

impl Default for ConnectParams {
    fn default() -> ConnectParams {
        ConnectParams {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            traffic_class: crate::transport::congestion::DEFAULT_TRAFFIC_CLASS,
            sgid_index: 0,
            int_telemetry: false,
            recovery: crate::transport::Recovery::GoBackN,
        }
    }
}

/// The RESET to INIT attributes (mask [`AttrMask::RC_INIT`]): P_Key index
/// 0, port 1 and `access`. A QP in INIT takes receives (IBTA §10.3.1), so
/// a tool posts them here, before the peer can send.
pub fn init_attr(access: Access) -> QpAttr {
    QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: access,
        ..QpAttr::default()
    }
}

/// The three `ibv_modify_qp` calls that bring an RC QP from RESET through
/// INIT and RTR to RTS towards `remote_qpn` at `remote_ip` (`remote_mac`;
/// zero for "resolve it"), sending from PSN `sq_psn` and expecting
/// `rq_psn`, with `p`'s attributes (as ibv_rc_pingpong and perftest do).
pub fn connect_steps(
    remote_qpn: u32,
    remote_mac: MacAddr,
    remote_ip: IpAddr,
    p: &ConnectParams,
    sq_psn: u32,
    rq_psn: u32,
) -> [(QpAttr, AttrMask); 3] {
    let init = init_attr(p.access);
    let mut rtr = init;
    rtr.qp_state = QpState::Rtr;
    rtr.ah_attr = Some(AddressVector {
        dgid: remote_ip,
        dmac: remote_mac,
        sgid_index: p.sgid_index,
        hop_limit: 64,
        traffic_class: p.traffic_class,
        flow_label: 0,
        src_port: None,
        recovery: p.recovery,
        int_telemetry: p.int_telemetry,
    });
    rtr.path_mtu = p.mtu;
    rtr.dest_qp_num = remote_qpn;
    rtr.rq_psn = rq_psn;
    rtr.max_dest_rd_atomic = p.max_rd_atomic;
    rtr.min_rnr_timer = p.min_rnr_timer;
    let mut rts = rtr;
    rts.qp_state = QpState::Rts;
    rts.timeout = p.timeout;
    rts.retry_cnt = p.retry_cnt;
    rts.rnr_retry = p.rnr_retry;
    rts.sq_psn = sq_psn;
    rts.max_rd_atomic = p.max_rd_atomic;
    [
        (init, AttrMask::RC_INIT),
        (rtr, AttrMask::RC_RTR),
        (rts, AttrMask::RC_RTS),
    ]
}

/// Brings QP `qpn` of `dev` to RTS with [`connect_steps`].
#[allow(clippy::too_many_arguments)]
pub fn connect_qp(
    dev: &mut Device,
    qpn: u32,
    remote_qpn: u32,
    remote_mac: MacAddr,
    remote_ip: IpAddr,
    p: &ConnectParams,
    sq_psn: u32,
    rq_psn: u32,
) -> Result<(), crate::transport::Error> {
    for (attr, mask) in connect_steps(remote_qpn, remote_mac, remote_ip, p, sq_psn, rq_psn) {
        dev.modify_qp(qpn, &attr, mask)?;
    }
    Ok(())
}
