//! REJ reasons (IBTA Vol. 1 §12.6.7, table 109), numbered as on the
//! wire, with the names Linux gives them (`enum ib_cm_rej_reason`).

/// No QP available.
pub const NO_QP: u16 = 1;
/// No EE context available.
pub const NO_EEC: u16 = 2;
/// No resources available.
pub const NO_RESOURCES: u16 = 3;
/// Timeout: the sender gave up waiting (ARI: its CA GUID).
pub const TIMEOUT: u16 = 4;
/// Unsupported request.
pub const UNSUPPORTED: u16 = 5;
/// Invalid communication ID.
pub const INVALID_COMM_ID: u16 = 6;
/// Invalid communication instance.
pub const INVALID_COMM_INSTANCE: u16 = 7;
/// Invalid service ID: nobody listens on it.
pub const INVALID_SERVICE_ID: u16 = 8;
/// Invalid transport service type.
pub const INVALID_TRANSPORT_TYPE: u16 = 9;
/// Stale connection: the IDs or the QP belong to a connection that is
/// still known (or in TimeWait).
pub const STALE_CONN: u16 = 10;
/// RDC does not exist.
pub const RDC_NOT_EXIST: u16 = 11;
/// Primary remote port GID rejected (ARI: a GID the port has).
pub const INVALID_GID: u16 = 12;
/// Primary remote port LID rejected.
pub const INVALID_LID: u16 = 13;
/// Primary SL rejected.
pub const INVALID_SL: u16 = 14;
/// Primary traffic class rejected.
pub const INVALID_TRAFFIC_CLASS: u16 = 15;
/// Primary hop limit rejected.
pub const INVALID_HOP_LIMIT: u16 = 16;
/// Primary packet rate rejected.
pub const INVALID_PACKET_RATE: u16 = 17;
/// Alternate remote port GID rejected.
pub const INVALID_ALT_GID: u16 = 18;
/// Alternate remote port LID rejected.
pub const INVALID_ALT_LID: u16 = 19;
/// Alternate SL rejected.
pub const INVALID_ALT_SL: u16 = 20;
/// Alternate traffic class rejected.
pub const INVALID_ALT_TRAFFIC_CLASS: u16 = 21;
/// Alternate hop limit rejected.
pub const INVALID_ALT_HOP_LIMIT: u16 = 22;
/// Alternate packet rate rejected.
pub const INVALID_ALT_PACKET_RATE: u16 = 23;
/// Port CM redirection.
pub const PORT_CM_REDIRECT: u16 = 24;
/// Port redirection.
pub const PORT_REDIRECT: u16 = 25;
/// Invalid path MTU.
pub const INVALID_MTU: u16 = 26;
/// Insufficient responder resources.
pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
/// Consumer defined: the application said no (private data may say why).
pub const CONSUMER_DEFINED: u16 = 28;
/// Invalid RNR retry count.
pub const INVALID_RNR_RETRY: u16 = 29;
/// Duplicate local communication ID.
pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
/// Invalid class version.
pub const INVALID_CLASS_VERSION: u16 = 31;
/// Invalid primary flow label.
pub const INVALID_FLOW_LABEL: u16 = 32;
/// Invalid alternate flow label.
pub const INVALID_ALT_FLOW_LABEL: u16 = 33;

/// The name of a reason (Linux's `ibcm_reject_msg`), or
/// "unrecognized reason".
pub fn name(reason: u16) -> &'static str {
    const NAMES: [&str; 33] = [
        "no QP",
        "no EEC",
        "no resources",
        "timeout",
        "unsupported",
        "invalid comm ID",
        "invalid comm instance",
        "invalid service ID",
        "invalid transport type",
        "stale conn",
        "RDC not exist",
        "invalid GID",
        "invalid LID",
        "invalid SL",
        "invalid traffic class",
        "invalid hop limit",
        "invalid packet rate",
        "invalid alt GID",
        "invalid alt LID",
        "invalid alt SL",
        "invalid alt traffic class",
        "invalid alt hop limit",
        "invalid alt packet rate",
        "port CM redirect",
        "port redirect",
        "invalid MTU",
        "insufficient resp resources",
        "consumer defined",
        "invalid RNR retry",
        "duplicate local comm ID",
        "invalid class version",
        "invalid flow label",
        "invalid alt flow label",
    ];
    (reason as usize)
        .checked_sub(1)
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("unrecognized reason")
}

/// The "message rejected" field of a REJ (§12.6.7 table 108) and the
/// "message MRAed" field of an MRA (§12.6.6 table 107).
pub mod msg {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (a LAP for an MRA; none for a REJ).
    pub const OTHER: u8 = 2;
}
