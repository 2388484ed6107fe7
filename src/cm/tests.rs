//! Unit tests: the time values, the IDs as Linux forms them, and what the
//! verbs refuse. The exchanges between agents are in `tests/cm_agent.rs`.

use super::*;
use crate::wire::cm::{attr, CmMessage};
use crate::wire::mad::MadError;
use crate::wire::Psn;

const A: IpAddr = IpAddr::V4(core::net::Ipv4Addr::new(198, 18, 0, 3));
const B: IpAddr = IpAddr::V4(core::net::Ipv4Addr::new(198, 18, 0, 2));

fn agent(seed: u32) -> CmAgent {
    let mut cfg = CmConfig::new(0x5254_00ff_fe18_0003, vec![A]);
    cfg.id_seed = seed;
    cfg.tid_hi = 2;
    CmAgent::new(cfg)
}

fn params() -> ConnectParams {
    ConnectParams::new(0x0106_4853, A, B, 0x13, Psn::new(0x37874a))
}

fn sent(a: &mut CmAgent) -> CmMad {
    let out = a.poll_transmit().expect("a MAD");
    CmMad::parse(&out.mad).unwrap()
}

#[test]
fn cm_times_are_4096_ns_times_a_power_of_two() {
    assert_eq!(cm_timeout(0).as_nanos(), 4096);
    assert_eq!(cm_timeout(20).as_nanos(), 4_294_967_296);
    assert_eq!(cm_timeout(24).as_nanos(), 68_719_476_736);
    assert_eq!(cm_timeout(40), cm_timeout(31));
}

#[test]
fn the_ack_timeout_rounds_as_linux() {
    // rdma_cm on rxe: packet life time 18, ACK delay 15 -> 19 (the
    // captures' REQs).
    assert_eq!(cm_ack_timeout(15, 18), 19);
    assert_eq!(cm_ack_timeout(15, 14), 16);
    assert_eq!(cm_ack_timeout(20, 5), 20);
    assert_eq!(cm_ack_timeout(20, 18), 21);
    assert_eq!(cm_ack_timeout(31, 31), 31);
    assert_eq!(cm_ack_timeout(0, 0), 2);
}

/// Seed 0x3b51c8f0 and MAD agent 2 give the comm IDs and transaction IDs
/// of the client in ib_write_bw_rdmacm_mtu4096: the counter XORed with
/// the seed, its bytes reversed on the wire.
#[test]
fn ids_and_transaction_ids_are_formed_as_linux_forms_them() {
    let mut a = agent(0x3b51_c8f0);
    let now = Instant::ZERO;
    let first = a.connect(now, params()).unwrap();
    let m = sent(&mut a);
    assert_eq!(first.comm_id(), 0xf0c8_513b);
    assert_eq!(m.hdr.transaction_id, 0x2_3b51_c8f0);
    let mut p = params();
    p.qpn = 0x14;
    let second = a.connect(now, p).unwrap();
    let m = sent(&mut a);
    assert_eq!(second.comm_id(), 0xf1c8_513b);
    assert_eq!(m.hdr.transaction_id, 0x2_3b51_c8f1);
    let CmMessage::Req(r) = m.msg else {
        panic!("{m:?}")
    };
    assert_eq!(r.local_comm_id, 0xf1c8_513b);
}

#[test]
fn comm_id_zero_is_never_handed_out() {
    let mut a = agent(0);
    let id = a.connect(Instant::ZERO, params()).unwrap();
    assert_eq!(id.comm_id(), 0x0100_0000);
}

#[test]
fn the_defaults_are_linuxs() {
    let c = CmConfig::new(1, vec![]);
    assert_eq!(
        (
            c.response_timeout,
            c.max_retries,
            c.ack_delay,
            c.mra_service_timeout
        ),
        (20, 15, 15, 24)
    );
    assert_ne!(c.id_seed, CmConfig::new(2, vec![]).id_seed);
    let a = CmAgent::new(CmConfig {
        response_timeout: 99,
        max_retries: 99,
        ..c
    });
    assert_eq!(
        (a.config().response_timeout, a.config().max_retries),
        (31, 15)
    );
}

#[test]
fn verbs_refuse_what_the_state_or_the_fields_do_not_allow() {
    let mut a = agent(7);
    let now = Instant::ZERO;
    assert_eq!(a.listen(9), Ok(()));
    assert_eq!(a.listen(9), Err(CmError::AlreadyListening(9)));
    assert_eq!(a.unlisten(9), Ok(()));
    assert_eq!(a.unlisten(9), Err(CmError::NotListening(9)));
    assert_eq!(a.establish(ConnId(5)), Err(CmError::NoSuchConn));
    let mut p = params();
    p.private_data = vec![1; 93];
    assert_eq!(
        a.connect(now, p),
        Err(CmError::PrivateDataTooLong { len: 93, max: 92 })
    );
    let mut p = params();
    p.qpn = 1 << 24;
    assert_eq!(a.connect(now, p), Err(CmError::Field(MadError::FieldRange)));
    assert_eq!(a.connections(), 0);
    assert!(a.poll_transmit().is_none());
    let id = a.connect(now, params()).unwrap();
    assert_eq!(a.state(id), Some(CmState::ReqSent));
    assert_eq!(a.establish(id), Err(CmError::WrongState(CmState::ReqSent)));
    assert_eq!(
        a.accept(now, id, AcceptParams::new(1, Psn::new(1))),
        Err(CmError::WrongState(CmState::ReqSent))
    );
    assert_eq!(
        a.disconnect(now, id),
        Err(CmError::WrongState(CmState::ReqSent))
    );
    assert_eq!(
        a.notify_comm_est(id),
        Err(CmError::WrongState(CmState::ReqSent))
    );
}

/// Giving up on a REQ before an answer (Linux `ib_send_cm_rej` in REQ
/// Sent): a REJ naming no message, and the connection is gone.
#[test]
fn rejecting_our_own_req_frees_the_connection() {
    let mut a = agent(7);
    let now = Instant::ZERO;
    let id = a.connect(now, params()).unwrap();
    let req = sent(&mut a);
    a.reject(now, id, reason::CONSUMER_DEFINED, b"bye").unwrap();
    let m = sent(&mut a);
    let CmMessage::Rej(r) = m.msg else {
        panic!("{m:?}")
    };
    assert_eq!(m.hdr.transaction_id, req.hdr.transaction_id);
    assert_eq!((r.local_comm_id, r.remote_comm_id), (id.comm_id(), 0));
    assert_eq!((r.message_rejected, r.reason), (reason::msg::OTHER, 28));
    assert_eq!(&r.private_data[..3], b"bye");
    assert_eq!(a.state(id), None);
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(a.counters().rej_sent.get(&28), Some(&1));
    assert_eq!(a.counters().tx.get(attr::REJ), 1);
}

#[test]
fn reject_reasons_have_linuxs_names() {
    assert_eq!(
        reason::name(reason::INVALID_SERVICE_ID),
        "invalid service ID"
    );
    assert_eq!(reason::name(reason::TIMEOUT), "timeout");
    assert_eq!(reason::name(reason::STALE_CONN), "stale conn");
    assert_eq!(reason::name(reason::CONSUMER_DEFINED), "consumer defined");
    assert_eq!(
        reason::name(reason::INVALID_ALT_FLOW_LABEL),
        "invalid alt flow label"
    );
    assert_eq!(reason::name(0), "unrecognized reason");
    assert_eq!(reason::name(34), "unrecognized reason");
}

#[test]
fn attribute_counts_ignore_other_attributes() {
    let mut c = AttrCounts::default();
    c.bump(attr::REQ);
    c.bump(attr::SIDR_REP);
    c.bump(0x19);
    c.bump(0x0F);
    assert_eq!(
        (c.get(attr::REQ), c.get(attr::SIDR_REP), c.get(0x19)),
        (1, 1, 0)
    );
    assert_eq!(c.total(), 2);
}
