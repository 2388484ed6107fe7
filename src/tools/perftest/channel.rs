//! perftest's exchange on the [`Channel`]: the setup every tool starts
//! with, keys and barriers, and the results of a bandwidth test
//! (`perftest_communication.c`; message formats in
//! [`crate::tools::oob::perftest`]).

use crate::backend::Backend;
use crate::time::Duration;
use crate::tools::exchange::Channel;
use crate::tools::oob::perftest::{self as pt, Keys};
use crate::transport::Recovery;
use crate::verbs::Context;
use anyhow::{bail, Context as _, Result};

/// One keys exchange (`ctx_hand_shake`): a QP's keys, or QP 0's as a
/// barrier.
pub fn keys<B: Backend>(ch: &mut Channel, ctx: &mut Context<B>, mine: &Keys) -> Result<Keys> {
    if ch.is_cm() {
        // Over RDMA-CM, `struct pingpong_dest` itself (`rdma_write_keys`).
        let r = ch.exchange(ctx, &mine.emit_binary())?;
        return Keys::parse_binary(&r).context("the peer's keys");
    }
    let r = ch.exchange(ctx, &mine.emit())?;
    Keys::parse(&r).context("the peer's keys")
}

/// A barrier that may wait as long as the peer's run takes (the passive
/// server's wait for the client to finish).
pub fn barrier_after_run<B: Backend>(
    ch: &mut Channel,
    ctx: &mut Context<B>,
    mine: &Keys,
    run_limit: Duration,
) -> Result<Keys> {
    let l = ch.limit(run_limit);
    let r = keys(ch, ctx, mine);
    ch.limit(l);
    r
}

/// One 8-byte value of the results exchange (`xchg_bw_reports`).
pub fn exchange_u64<B: Backend>(ch: &mut Channel, ctx: &mut Context<B>, v: u64) -> Result<u64> {
    let r = ch.exchange(ctx, &v.to_be_bytes())?;
    Ok(u64::from_be_bytes(r[..8].try_into()?))
}

/// What the setup exchanges agreed on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agreed {
    /// The peer's version (`atof` of its string).
    pub peer_version: f64,
    /// max(ours, theirs): the buffer cycle (page size).
    pub cycle_buffer: u32,
    /// max(ours, theirs): the cache line.
    pub cache_line: u32,
    /// min(ours, theirs): the `ibv_mtu` value, 1..5.
    pub mtu: u8,
    /// Both ends asked for INT telemetry on the test QPs (both are ferroce
    /// and run a rate control that needs it).
    pub int: bool,
    /// The test QPs' loss recovery: selective repeat when both ends asked
    /// for it (both are ferroce and were given `--recovery sr`), otherwise
    /// go-back-N.
    pub recovery: Recovery,
}

/// The setup every tool starts with: versions, system data, MTU
/// (`exchange_versions`, `check_sys_data`, `check_mtu`).
pub fn setup<B: Backend>(
    ch: &mut Channel,
    ctx: &mut Context<B>,
    cycle_buffer: u32,
    cache_line: u32,
    mtu: u8,
    want_int: bool,
    want_sr: bool,
) -> Result<Agreed> {
    let caps = (if want_int { pt::CAP_INT } else { 0 }) | (if want_sr { pt::CAP_SR } else { 0 });
    let v = ch.exchange(ctx, &pt::version_with_caps(pt::VERSION, caps))?;
    let peer_version = pt::parse_version(&v).context("the peer's version")?;
    let peer_caps = pt::parse_caps(&v).unwrap_or(0);
    let peer_int = peer_caps & pt::CAP_INT != 0;
    match (want_int, peer_int) {
        (true, false) => bail!(
            "this end's rate control needs INT telemetry and the peer did not ask for it (it is \
             not ferroce, or runs another rate control): INT is sent only to a ferroce peer \
             that asked for it; run the same rate control on both ends"
        ),
        (false, true) => bail!(
            "the peer asked for INT telemetry (its rate control needs it) and this end runs a \
             rate control without it: run the same rate control on both ends"
        ),
        _ => {}
    }
    if peer_version < 5.70 {
        bail!("the peer's perftest version {peer_version} is older than 5.70, which this exchange needs");
    }
    if (peer_version * 100.0).round() as i64 == 628 {
        bail!(
            "the peer is perftest {peer_version}, which always negotiates parameters in a 320-byte \
             message this tool does not speak; use a perftest other than 6.28"
        );
    }
    let cyc = pt::parse_int(&ch.exchange(ctx, &pt::int(cycle_buffer as i32))?)?;
    let cl = pt::parse_int(&ch.exchange(ctx, &pt::int(cache_line as i32))?)?;
    let m = pt::parse_mtu(&ch.exchange(ctx, &pt::mtu(mtu))?).context("the peer's MTU")?;
    Ok(Agreed {
        peer_version,
        cycle_buffer: cycle_buffer.max(cyc.max(0) as u32),
        cache_line: cache_line.max(cl.max(0) as u32),
        mtu: mtu.min(m),
        int: want_int && peer_int,
        // Unlike INT, a one-sided ask is no error: the QPs stay go-back-N,
        // the mode every RoCE peer speaks.
        recovery: if want_sr && peer_caps & pt::CAP_SR != 0 {
            Recovery::Selective
        } else {
            Recovery::GoBackN
        },
    })
}
