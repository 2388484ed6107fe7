//! The settings the incast runner ([`super::incast`]) and the lab
//! ([`super::lab`]) share: the switch's default ECN marking, the CNP
//! interval that goes with a rate control, and the limits on a WRITE and
//! on a sender's window.

use crate::backend::fabric::RedConfig;
use crate::cc::CcConfig;
use crate::time::Duration;
use crate::transport::{QpCaps, QpConfig};

/// The largest WRITE a run accepts.
pub const MAX_MESSAGE: u32 = 16 << 20;
/// The most WRITEs outstanding per sender a run accepts.
pub const MAX_WINDOW: u32 = 4096;

/// The switch's default ECN marking for a link of `rate_bps`, scaled
/// from 100 Gb/s: Kmin 50 KB, Kmax 1.6 MB (the HPCC simulator's Kmax,
/// reference C.4), Pmax 1 (NVIDIA's RoCE switch profiles mark with
/// probability 100% at the maximum threshold), decided at dequeue (as the
/// HPCC simulator's switch). The HPCC simulator's own Kmin of 400 KB and
/// Pmax of 0.2 mark so late and so rarely at 100 Gb/s that with 4 KiB
/// packets each of N flows sees its first mark only after a round of N
/// packets through a deep queue: measured here, its 8:1 and 16:1 incasts
/// held a queue of 1-1.4 MB in steady state. `RedConfig::hpcc` keeps
/// those values for comparison (`--kmin 400K --kmax 1600K --pmax 0.2`).
pub fn default_red(rate_bps: u64) -> RedConfig {
    let scale = |bytes: u128| {
        usize::try_from(bytes * u128::from(rate_bps) / 100_000_000_000).unwrap_or(usize::MAX)
    };
    RedConfig {
        kmin_bytes: scale(50_000),
        kmax_bytes: scale(1_600_000),
        pmax: 1.0,
        at_dequeue: true,
    }
}

/// The notification point's CNP interval that goes with a rate control
/// (reference B.8, C.1): 50 µs for the DCQCN paper's parameters, the
/// ConnectX default of 4 µs otherwise.
pub fn default_cnp_interval(cc: &CcConfig) -> Duration {
    if cc.name() == "dcqcn-paper" {
        Duration::from_micros(50)
    } else {
        Duration::from_micros(4)
    }
}

/// A sending QP of the incast and the lab: `window` WRITEs outstanding of
/// `packets` packets each, one SGE, one receive; room for the whole window
/// in flight (the window, not the transport's default cap, limits what a
/// sender has out), selective repeat's short timeout `rto_low_us`.
pub fn window_caps(window: u32, packets: u32, rto_low_us: u32) -> QpCaps {
    let config = QpConfig {
        max_inflight: window
            .saturating_mul(packets)
            .max(QpConfig::default().max_inflight),
        rto_low_us,
        ..QpConfig::default()
    };
    QpCaps {
        max_send_wr: window,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
        config: Some(config),
        ..QpCaps::default()
    }
}
