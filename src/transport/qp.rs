//! The QP state machine and its attributes (IBTA §10.3.1, §11.2.5;
//! reference B.10): RESET -> INIT -> RTR -> RTS <-> SQD, any -> ERR or
//! RESET. Each transition names the attributes it requires and those it
//! allows; [`check_transition`] is the one place that says so. A missing,
//! unexpected or out-of-range attribute is an [`Error`], never a panic.

use super::Error;
use crate::wire::MacAddr;
use core::net::IpAddr;

/// QP states (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum QpState {
    /// Created or reset: no queue runs, no packet is taken.
    Reset,
    /// Initialised: receive WQEs may be posted; nothing is sent or received.
    Init,
    /// Ready to receive: the responder runs.
    Rtr,
    /// Ready to send: requester and responder run.
    Rts,
    /// Send queue drain: no new message starts.
    Sqd,
    /// Send queue error (UC / UD only; never entered by RC).
    Sqe,
    /// Error: every outstanding and new work request completes flushed.
    Err,
}

/// Path MTU (`ibv_mtu`, IBTA §9.7.7.2.x: 256..4096).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The five MTUs, smallest first.
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// The MTU of `n` bytes, if it is one of the five.
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == n)
    }
}

/// Address vector of the remote end (`ibv_ah_attr` with its GRH, which
/// RoCE requires).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// Remote GID as an IP address (an IPv4 GID is `::ffff:a.b.c.d`).
    pub dgid: IpAddr,
    /// Destination MAC address of every packet (the next hop's).
    pub dmac: MacAddr,
    /// Index of the local GID (our source address) in the device's table.
    pub sgid_index: u8,
    /// IP TTL / hop limit of every packet.
    pub hop_limit: u8,
    /// DSCP (bits 7..2) and ECN (bits 1..0) of every packet.
    pub traffic_class: u8,
    /// IPv6 flow label, 20 bits.
    pub flow_label: u32,
    /// UDP source port; `None` uses the kernel's formula over both QPNs.
    pub src_port: Option<u16>,
    /// ferroce extension, not part of `ibv_ah_attr`: the peer is a ferroce
    /// endpoint that agreed to INT telemetry on this path (its
    /// `int_telemetry` is set too), so requests carry an INT trailer for
    /// switches to stamp and responses echo what arrived
    /// ([`crate::wire::int`]). Never set it toward a peer that did not
    /// agree: a standard peer ignores the trailer, and HPCC then sees no
    /// hop.
    pub int_telemetry: bool,
    /// ferroce extension, not part of `ibv_ah_attr`: how this QP recovers
    /// lost packets ([`Recovery`]). [`Recovery::Selective`] only toward a
    /// ferroce peer that set it too.
    pub recovery: Recovery,
}

/// How a QP recovers lost packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recovery {
    /// Go-back-N (IBTA §9.7.5): the responder drops what comes ahead of
    /// its expected PSN, the requester resends from the oldest packet not
    /// acknowledged. What every RoCE peer speaks; the default.
    #[default]
    #[serde(rename = "gbn")]
    GoBackN,
    /// Selective repeat as IRN runs it (`crate::transport::selective`):
    /// the responder places SEND and WRITE packets that arrive ahead of
    /// their turn and tells the requester, which resends only what is
    /// missing. ferroce-to-ferroce only: its trailers
    /// ([`crate::wire::sr`]) mean nothing to another peer.
    #[serde(rename = "sr")]
    Selective,
}

impl Recovery {
    /// What a QP runs when this end asks for `self` and its peer for
    /// `peer`: selective repeat only if both asked.
    pub fn agreed(self, peer: Recovery) -> Recovery {
        match (self, peer) {
            (Recovery::Selective, Recovery::Selective) => Recovery::Selective,
            _ => Recovery::GoBackN,
        }
    }
}

impl core::str::FromStr for Recovery {
    type Err = String;

    /// `gbn` or `sr`, as the tools' `--recovery` and the configs spell it.
    fn from_str(s: &str) -> Result<Recovery, String> {
        match s {
            "gbn" => Ok(Recovery::GoBackN),
            "sr" => Ok(Recovery::Selective),
            _ => Err(format!("unknown loss recovery {s:?} (expected gbn or sr)")),
        }
    }
}

impl core::fmt::Display for Recovery {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Recovery::GoBackN => "gbn",
            Recovery::Selective => "sr",
        })
    }
}

/// Attributes of a QP (`ibv_qp_attr`); [`AttrMask`] says which are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// The state to move to.
    pub qp_state: QpState,
    /// The state the caller believes the QP is in; checked when given.
    pub cur_qp_state: QpState,
    /// Index of the P_Key in the device's table.
    pub pkey_index: u16,
    /// Physical port, from 1.
    pub port_num: u8,
    /// Remote access the responder grants (RDMA WRITE, READ, atomics).
    pub qp_access_flags: super::Access,
    /// Path MTU: the largest payload of one packet.
    pub path_mtu: Mtu,
    /// Destination QP number (IBTA Vol. 1 §9.2 BTH DestQP).
    pub dest_qp_num: u32,
    /// Expected PSN of the first incoming request (RTR).
    pub rq_psn: u32,
    /// PSN of the first request sent (RTS).
    pub sq_psn: u32,
    /// READ and atomic requests the responder holds outstanding at most.
    pub max_dest_rd_atomic: u8,
    /// READ and atomic requests the requester keeps outstanding at most.
    pub max_rd_atomic: u8,
    /// RNR NAK timer code the responder sends (reference B.5).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent: 4.096 µs x 2^timeout, 0 = none.
    pub timeout: u8,
    /// Transport retries after a timeout or sequence NAK before failing, 0..7.
    pub retry_cnt: u8,
    /// 7 = retry forever.
    pub rnr_retry: u8,
    /// Address vector of the remote end; required for RTR.
    pub ah_attr: Option<AddressVector>,
    /// Kept as given; the drained event is raised whether or not it is set.
    pub en_sqd_async_notify: bool,
    /// UD: the Q_Key a datagram must carry to be received, and the one
    /// sent when a work request's Q_Key has its high bit set (IBTA §10.2.5).
    pub qkey: u32,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: super::Access::NONE,
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            ah_attr: None,
            en_sqd_async_notify: false,
            qkey: 0,
        }
    }
}

/// A QP's transport service (`ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum QpType {
    /// Reliable Connected.
    #[default]
    Rc,
    /// Unreliable Datagram: SEND only, one packet a message, each work
    /// request naming its destination ([`super::ud`]).
    Ud,
}

/// Which attributes a `modify_qp` gives (`ibv_qp_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct AttrMask(u32);

impl AttrMask {
    /// [`QpAttr::qp_state`] is given.
    pub const STATE: AttrMask = AttrMask(1 << 0);
    /// [`QpAttr::cur_qp_state`] is given.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// [`QpAttr::en_sqd_async_notify`] is given.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// [`QpAttr::qp_access_flags`] is given.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// [`QpAttr::pkey_index`] is given.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// [`QpAttr::port_num`] is given.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// [`QpAttr::qkey`] is given (UD).
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// [`QpAttr::ah_attr`] is given.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// [`QpAttr::path_mtu`] is given.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// [`QpAttr::timeout`] is given.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// [`QpAttr::retry_cnt`] is given.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// [`QpAttr::rnr_retry`] is given.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// [`QpAttr::rq_psn`] is given.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// [`QpAttr::max_rd_atomic`] is given.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// An alternate path: allowed where IBTA allows it, then ignored (no path migration).
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// [`QpAttr::min_rnr_timer`] is given.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// [`QpAttr::sq_psn`] is given.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// [`QpAttr::max_dest_rd_atomic`] is given.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// Path migration state: allowed where IBTA allows it, then ignored.
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// [`QpAttr::dest_qp_num`] is given.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    /// No attribute.
    pub const NONE: AttrMask = AttrMask(0);

    /// What an RC QP's RESET → INIT transition requires (IBTA Vol. 1
    /// §11.2.5.2, "QP state transition attributes").
    pub const RC_INIT: AttrMask = m(&[
        AttrMask::STATE,
        AttrMask::PKEY_INDEX,
        AttrMask::PORT,
        AttrMask::ACCESS_FLAGS,
    ]);
    /// What an RC QP's INIT → RTR transition requires (§11.2.5.2).
    pub const RC_RTR: AttrMask = m(&[
        AttrMask::STATE,
        AttrMask::AV,
        AttrMask::PATH_MTU,
        AttrMask::DEST_QPN,
        AttrMask::RQ_PSN,
        AttrMask::MAX_DEST_RD_ATOMIC,
        AttrMask::MIN_RNR_TIMER,
    ]);
    /// What an RC QP's RTR → RTS transition requires (§11.2.5.2).
    pub const RC_RTS: AttrMask = m(&[
        AttrMask::STATE,
        AttrMask::TIMEOUT,
        AttrMask::RETRY_CNT,
        AttrMask::RNR_RETRY,
        AttrMask::SQ_PSN,
        AttrMask::MAX_QP_RD_ATOMIC,
    ]);

    /// What a UD QP's RESET -> INIT requires (IBTA §11.2.5.2).
    pub const UD_INIT: AttrMask = m(&[
        AttrMask::STATE,
        AttrMask::PKEY_INDEX,
        AttrMask::PORT,
        AttrMask::QKEY,
    ]);
    /// What a UD QP's RTR -> RTS requires.
    pub const UD_RTS: AttrMask = m(&[AttrMask::STATE, AttrMask::SQ_PSN]);

    const NAMES: [(AttrMask, &'static str); 20] = [
        (AttrMask::STATE, "STATE"),
        (AttrMask::CUR_STATE, "CUR_STATE"),
        (AttrMask::EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"),
        (AttrMask::ACCESS_FLAGS, "ACCESS_FLAGS"),
        (AttrMask::PKEY_INDEX, "PKEY_INDEX"),
        (AttrMask::PORT, "PORT"),
        (AttrMask::QKEY, "QKEY"),
        (AttrMask::AV, "AV"),
        (AttrMask::PATH_MTU, "PATH_MTU"),
        (AttrMask::TIMEOUT, "TIMEOUT"),
        (AttrMask::RETRY_CNT, "RETRY_CNT"),
        (AttrMask::RNR_RETRY, "RNR_RETRY"),
        (AttrMask::RQ_PSN, "RQ_PSN"),
        (AttrMask::MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
        (AttrMask::ALT_PATH, "ALT_PATH"),
        (AttrMask::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
        (AttrMask::SQ_PSN, "SQ_PSN"),
        (AttrMask::MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
        (AttrMask::PATH_MIG_STATE, "PATH_MIG_STATE"),
        (AttrMask::DEST_QPN, "DEST_QPN"),
    ];

    /// Both masks' attributes.
    pub const fn union(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 | o.0)
    }
    /// Whether every attribute of `o` is in this mask.
    pub const fn contains(self, o: AttrMask) -> bool {
        self.0 & o.0 == o.0
    }
    const fn minus(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 & !o.0)
    }
    /// The name of the lowest attribute in the mask.
    fn first_name(self) -> &'static str {
        AttrMask::NAMES
            .iter()
            .find(|(m, _)| self.0 & m.0 != 0)
            .map_or("?", |(_, n)| n)
    }
}

impl core::ops::BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, o: AttrMask) -> AttrMask {
        self.union(o)
    }
}

const fn m(list: &[AttrMask]) -> AttrMask {
    let mut v = 0;
    let mut i = 0;
    while i < list.len() {
        v |= list[i].0;
        i += 1;
    }
    AttrMask(v)
}

/// The attributes an RC transition requires and those it allows
/// (reference B.10; IBTA §11.2.5.2 table "QP state transition
/// attributes"); `None` if the transition does not exist.
pub fn transition_attrs(from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    const RTS_OPT: AttrMask = m(&[
        AttrMask::CUR_STATE,
        AttrMask::ACCESS_FLAGS,
        AttrMask::MIN_RNR_TIMER,
        AttrMask::ALT_PATH,
        AttrMask::PATH_MIG_STATE,
    ]);
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (AttrMask::STATE, AttrMask::CUR_STATE),
        (Reset, Init) => (AttrMask::RC_INIT, AttrMask::NONE),
        (Init, Init) => (
            AttrMask::STATE,
            m(&[AttrMask::PKEY_INDEX, AttrMask::PORT, AttrMask::ACCESS_FLAGS]),
        ),
        (Init, Rtr) => (
            AttrMask::RC_RTR,
            m(&[
                AttrMask::ALT_PATH,
                AttrMask::ACCESS_FLAGS,
                AttrMask::PKEY_INDEX,
            ]),
        ),
        (Rtr, Rts) => (AttrMask::RC_RTS, RTS_OPT),
        (Rts, Rts) | (Sqd, Rts) => (AttrMask::STATE, RTS_OPT),
        (Rts, Sqd) => (AttrMask::STATE, AttrMask::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            AttrMask::STATE,
            RTS_OPT.union(m(&[
                AttrMask::AV,
                AttrMask::TIMEOUT,
                AttrMask::RETRY_CNT,
                AttrMask::RNR_RETRY,
                AttrMask::MAX_QP_RD_ATOMIC,
                AttrMask::MAX_DEST_RD_ATOMIC,
                AttrMask::PKEY_INDEX,
                AttrMask::PORT,
            ])),
        ),
        _ => return None,
    })
}

/// The attributes a UD transition requires and those it allows (IBTA
/// §11.2.5.2, the UD column: a P_Key, a port and a Q_Key at INIT, nothing
/// more at RTR, the first PSN at RTS; the Q_Key may change on the way);
/// `None` if the transition does not exist.
pub fn ud_transition_attrs(from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    let q = AttrMask::QKEY;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (AttrMask::STATE, AttrMask::CUR_STATE),
        (Reset, Init) => (AttrMask::UD_INIT, AttrMask::NONE),
        (Init, Init) => (
            AttrMask::STATE,
            m(&[AttrMask::PKEY_INDEX, AttrMask::PORT, q]),
        ),
        (Init, Rtr) => (AttrMask::STATE, m(&[AttrMask::PKEY_INDEX, q])),
        (Rtr, Rts) => (AttrMask::UD_RTS, m(&[AttrMask::CUR_STATE, q])),
        (Rts, Rts) | (Sqd, Rts) => (AttrMask::STATE, m(&[AttrMask::CUR_STATE, q])),
        (Rts, Sqd) => (AttrMask::STATE, AttrMask::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            AttrMask::STATE,
            m(&[AttrMask::CUR_STATE, AttrMask::PKEY_INDEX, q]),
        ),
        _ => return None,
    })
}

/// Device limits a QP's attributes are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest `max_rd_atomic` and `max_dest_rd_atomic` allowed.
    pub max_rd_atomic: u8,
    /// Entries in the P_Key table.
    pub pkeys: usize,
    /// Entries in the GID table.
    pub gids: usize,
}

/// Checks a `modify_qp` of an RC QP from `cur` with `attr` / `mask`; the
/// error names what is wrong.
pub fn check_transition(
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    lim: &Limits,
) -> Result<QpState, Error> {
    check_transition_of(QpType::Rc, cur, attr, mask, lim)
}

/// Checks a `modify_qp` of a QP of type `ty` from `cur` with `attr` /
/// `mask`; the error names what is wrong.
pub fn check_transition_of(
    ty: QpType,
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    lim: &Limits,
) -> Result<QpState, Error> {
    let to = if mask.contains(AttrMask::STATE) {
        attr.qp_state
    } else {
        cur
    };
    if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != cur {
        return Err(Error::InvalidAttr(
            "CUR_STATE does not match the QP's state",
        ));
    }
    let attrs = match ty {
        QpType::Rc => transition_attrs(cur, to),
        QpType::Ud => ud_transition_attrs(cur, to),
    };
    let (req, opt) = attrs.ok_or(Error::InvalidTransition { from: cur, to })?;
    let missing = req.minus(mask);
    if missing != AttrMask::NONE {
        return Err(Error::MissingAttr(missing.first_name()));
    }
    let extra = mask.minus(req.union(opt));
    if extra != AttrMask::NONE {
        return Err(Error::UnexpectedAttr(extra.first_name()));
    }
    let range = |on: AttrMask, ok: bool, what: &'static str| {
        if mask.contains(on) && !ok {
            Err(Error::InvalidAttr(what))
        } else {
            Ok(())
        }
    };
    range(AttrMask::PORT, attr.port_num == 1, "port_num must be 1")?;
    range(
        AttrMask::PKEY_INDEX,
        (attr.pkey_index as usize) < lim.pkeys,
        "pkey_index beyond the P_Key table",
    )?;
    range(
        AttrMask::DEST_QPN,
        attr.dest_qp_num <= 0x00FF_FFFF,
        "dest_qp_num is 24 bits",
    )?;
    range(
        AttrMask::RQ_PSN,
        attr.rq_psn <= 0x00FF_FFFF,
        "rq_psn is 24 bits",
    )?;
    range(
        AttrMask::SQ_PSN,
        attr.sq_psn <= 0x00FF_FFFF,
        "sq_psn is 24 bits",
    )?;
    range(AttrMask::TIMEOUT, attr.timeout <= 31, "timeout is 0..31")?;
    range(
        AttrMask::RETRY_CNT,
        attr.retry_cnt <= 7,
        "retry_cnt is 0..7",
    )?;
    range(
        AttrMask::RNR_RETRY,
        attr.rnr_retry <= 7,
        "rnr_retry is 0..7",
    )?;
    range(
        AttrMask::MIN_RNR_TIMER,
        attr.min_rnr_timer <= 31,
        "min_rnr_timer is 0..31",
    )?;
    range(
        AttrMask::MAX_QP_RD_ATOMIC,
        attr.max_rd_atomic <= lim.max_rd_atomic,
        "max_rd_atomic above the device's limit",
    )?;
    range(
        AttrMask::MAX_DEST_RD_ATOMIC,
        attr.max_dest_rd_atomic <= lim.max_rd_atomic,
        "max_dest_rd_atomic above the device's limit",
    )?;
    if mask.contains(AttrMask::AV) {
        let av = attr
            .ah_attr
            .as_ref()
            .ok_or(Error::InvalidAttr("AV given without an address vector"))?;
        if av.sgid_index as usize >= lim.gids {
            return Err(Error::InvalidAttr("sgid_index beyond the GID table"));
        }
        if av.flow_label > 0xF_FFFF {
            return Err(Error::InvalidAttr("flow_label is 20 bits"));
        }
        if av.dmac.0[0] & 1 != 0 {
            return Err(Error::InvalidAttr("dmac is a multicast address"));
        }
    }
    Ok(to)
}

/// The first QP number a device hands out (below it: QP0, QP1 and room
/// for fixed numbers a caller asks for).
pub(crate) const FIRST_QPN: u32 = 0x11;
/// The largest QP number (24 bits, IBTA §9.2).
pub(crate) const MAX_QPN: u32 = 0x00FF_FFFF;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Access;
    use QpState::{Init, Reset, Rtr, Rts, Sqd};
    const ERR: QpState = QpState::Err;

    const LIM: Limits = Limits {
        max_rd_atomic: 16,
        pkeys: 1,
        gids: 2,
    };

    fn to(s: QpState) -> QpAttr {
        QpAttr {
            qp_state: s,
            ..QpAttr::default()
        }
    }

    #[test]
    fn every_rc_transition_of_b10() {
        let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
        assert_eq!(check_transition(Reset, &to(Init), init, &LIM), Ok(Init));
        assert_eq!(
            check_transition(Reset, &to(Init), AttrMask::STATE | AttrMask::PORT, &LIM),
            Err(Error::MissingAttr("ACCESS_FLAGS"))
        );
        assert_eq!(
            check_transition(Reset, &to(Rts), AttrMask::STATE, &LIM),
            Err(Error::InvalidTransition {
                from: Reset,
                to: Rts
            })
        );
        let mut a = to(Rtr);
        a.ah_attr = Some(AddressVector {
            dgid: "198.18.0.2".parse().unwrap(),
            dmac: MacAddr([2, 0, 0, 0, 0, 2]),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            src_port: None,
            int_telemetry: false,
            recovery: crate::transport::Recovery::GoBackN,
        });
        let rtr = AttrMask::RC_RTR;
        assert_eq!(check_transition(Init, &a, rtr, &LIM), Ok(Rtr));
        assert_eq!(
            check_transition(Init, &a, rtr | AttrMask::SQ_PSN, &LIM),
            Err(Error::UnexpectedAttr("SQ_PSN"))
        );
        a.dest_qp_num = 1 << 24;
        assert!(matches!(
            check_transition(Init, &a, rtr, &LIM),
            Err(Error::InvalidAttr(_))
        ));
        let rts = AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC;
        assert_eq!(check_transition(Rtr, &to(Rts), rts, &LIM), Ok(Rts));
        let mut r = to(Rts);
        r.retry_cnt = 8;
        assert_eq!(
            check_transition(Rtr, &r, rts, &LIM),
            Err(Error::InvalidAttr("retry_cnt is 0..7"))
        );
        assert_eq!(
            check_transition(Rts, &to(Sqd), AttrMask::STATE, &LIM),
            Ok(Sqd)
        );
        assert_eq!(
            check_transition(Sqd, &to(Rts), AttrMask::STATE, &LIM),
            Ok(Rts)
        );
        for s in [Reset, Init, Rtr, Rts, Sqd, ERR] {
            assert_eq!(
                check_transition(s, &to(ERR), AttrMask::STATE, &LIM),
                Ok(ERR)
            );
            assert_eq!(
                check_transition(s, &to(Reset), AttrMask::STATE, &LIM),
                Ok(Reset)
            );
        }
        assert!(check_transition(ERR, &to(Rts), AttrMask::STATE, &LIM).is_err());
        let mut c = to(Rts);
        c.cur_qp_state = Rtr;
        c.qp_access_flags = Access::REMOTE_READ;
        assert!(check_transition(Rts, &c, AttrMask::STATE | AttrMask::CUR_STATE, &LIM).is_err());
    }

    #[test]
    fn mtu_values() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(Mtu::from_bytes(1500), None);
    }
}
