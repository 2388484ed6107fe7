//! perftest's `-R`: the test QPs connected by RDMA-CM
//! (`perftest_communication.c`'s `create_rdma_cm_connection`), between two
//! all-zero `pingpong_dest` exchanges on the control channel, and their
//! disconnect at the end (`rdma_cm_disconnect_nodes`).
//!
//! Each test QP is one more RDMA-CM connection to the same port as the
//! control channel's. It asks and grants `out_reads` READs / atomics for a
//! READ or atomic test and none otherwise (Linux then gives the QP no
//! remote READ access), with retry and RNR retry 7; the server's QP gets
//! `min_rnr_timer` 12 once accepted, as perftest sets it. At the end the
//! client disconnects each test connection and the server answers, or
//! disconnects too if it gets there first: perftest up to 4.5 disconnects
//! from both sides (`rdma_cm_disconnect_nodes`), later versions from the
//! server only, and the client waits for it.

use super::{out_reads, Setup};
use crate::backend::Backend;
use crate::time::Duration;
use crate::tools::cm_link::{accept, connect_retrying, wait_event};
use crate::tools::exchange::Channel;
use crate::tools::oob::perftest::BINARY_LEN;
use crate::tools::pingpong::Role;
use crate::transport::{AttrMask, QpAttr, QpState};
use crate::verbs::cm::{CmConn, ConnParam, RdmaCmEvent};
use crate::verbs::Context;
use anyhow::{Context as _, Result};

/// Connects every test QP by RDMA-CM: the zero exchange before, one
/// connection per QP, the zero exchange after.
pub fn connect_test_qps<B: Backend>(
    ctx: &mut Context<B>,
    ch: &mut Channel,
    s: &Setup,
    role: &Role,
    opts: &super::Opts,
    limit: Duration,
) -> Result<Vec<CmConn>> {
    let zeros = [0u8; BINARY_LEN];
    ch.exchange(ctx, &zeros)
        .context("the exchange before the test connections")?;
    let reads = match s.p.test.verb() {
        super::Verb::Read | super::Verb::Atomic => out_reads(ctx, &s.p).min(255) as u8,
        _ => 0,
    };
    // Both ends asked for selective repeat in the version exchange; the
    // REQ and REP say it again (ferroce's tail of their private data).
    let recovery = s.a.recovery;
    let param = ConnParam {
        responder_resources: reads,
        initiator_depth: reads,
        recovery,
        ..ConnParam::default()
    };
    let mut conns = Vec::new();
    for qp in &s.qps {
        let conn = match role {
            Role::Client(ip) => {
                connect_retrying(ctx, qp, *ip, opts.tcp_port, opts.gid_index, &param, limit)?
            }
            Role::Server => {
                let (conn, _) = accept(ctx, qp, &param, limit)?;
                let a = QpAttr {
                    qp_state: QpState::Rts,
                    min_rnr_timer: 12,
                    ..QpAttr::default()
                };
                ctx.modify_qp(qp, &a, AttrMask::STATE | AttrMask::MIN_RNR_TIMER)?;
                conn
            }
        };
        conns.push(conn);
    }
    ch.exchange(ctx, &zeros)
        .context("the exchange after the test connections")?;
    Ok(conns)
}

/// Disconnects the test connections: a DREQ from each side that has not
/// had the peer's (a DREP answers one that came; the server first gives
/// the client's DREQs half a second), then up to `limit` for each to be
/// down. A lost DREQ is sent again only after the response time the
/// peer's REQ gave (rdma_cm: 4.3 s), and a perftest client waits for our
/// DREQs without end, so the wait is not cut shorter.
pub fn disconnect<B: Backend>(
    ctx: &mut Context<B>,
    conns: &[CmConn],
    server: bool,
    limit: Duration,
) {
    let mut down = Vec::new();
    let take = |e: &RdmaCmEvent, down: &mut Vec<CmConn>| match e {
        RdmaCmEvent::Disconnected { conn } if conns.contains(conn) => {
            down.push(*conn);
            (down.len() == conns.len()).then_some(())
        }
        _ => None,
    };
    if server {
        let wait = Duration::from_millis(500).min(limit);
        let _ = wait_event(ctx, wait, "the client's disconnect", |e| take(e, &mut down));
    }
    for &c in conns {
        let _ = ctx.rdma_disconnect(c);
    }
    if down.len() < conns.len() {
        let _ = wait_event(ctx, limit, "disconnecting", |e| take(e, &mut down));
    }
}
