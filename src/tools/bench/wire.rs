//! `ferroce bench wire`: the wire hot path (whole-frame parse, ICRC check
//! and emit of an RC SEND_ONLY frame over IPv4) next to `crc32fast` over
//! the same bytes, the loops interleaved round by round so that the ratios
//! hold on a noisy host. The sample frame is [`sample`], which the criterion
//! version (`benches/wire.rs`) measures too.

use crate::sim::stats::median;
use crate::wire::frame::ICRC_LEN;
use crate::wire::opcode::Op;
use crate::wire::{icrc, BthRepr, Ecn, Frame, FrameRepr, IpRepr, MacAddr, Opcode, Psn};
use anyhow::{bail, Result};
use std::hint::black_box;
use std::time::Instant;

/// The payload sizes measured, in bytes.
pub const SIZES: [usize; 2] = [64, 4096];

/// The options of `ferroce bench wire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct WireOpts {
    /// Alternating rounds of each loop.
    #[arg(long, default_value_t = 41)]
    pub rounds: usize,
    /// Frames per loop and round.
    #[arg(long, default_value_t = 20_000)]
    pub iters: u32,
}

/// The frame measured: an RC SEND_ONLY with AckReq over IPv4 (ECT(0), DSCP
/// 26) and its payload of `len` bytes.
pub struct Sample {
    /// The headers the frame was emitted from.
    pub repr: FrameRepr,
    /// The payload: bytes 0, 1, 2, ... (mod 256).
    pub payload: Vec<u8>,
    /// The emitted frame, ICRC included.
    pub frame: Vec<u8>,
}

impl Sample {
    /// The IP packet without its ICRC: what `icrc::compute` and the
    /// `crc32fast` baseline read.
    pub fn ip(&self) -> &[u8] {
        &self.frame[self.repr.eth.header_len()..self.frame.len() - ICRC_LEN]
    }
}

/// The sample frame with a payload of `len` bytes.
pub fn sample(len: usize) -> Result<Sample> {
    let mut bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x12, Psn::new(1));
    bth.ack_req = true;
    let repr = FrameRepr::roce(
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        IpRepr::v4("198.18.0.1".parse()?, "198.18.0.2".parse()?, 26, Ecn::Ect0),
        0xC000,
        bth,
    );
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut frame = vec![0u8; repr.frame_len(len)];
    let n = repr.emit(&payload, &mut frame)?;
    frame.truncate(n);
    Ok(Sample {
        repr,
        payload,
        frame,
    })
}

/// `ferroce bench wire`: per payload size, each loop runs `iters` frames per
/// round, the loops alternate within a round, and the figures are medians
/// over rounds (ratios are taken within a round, then the median). Prints
/// the table; always Ok(true).
pub fn run(opts: &WireOpts) -> Result<bool> {
    let WireOpts { rounds, iters } = *opts;
    if rounds == 0 || iters == 0 {
        bail!("--rounds and --iters must be at least 1");
    }
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        t.elapsed().as_nanos() as f64 / iters as f64
    };
    println!(
        "ferroce bench wire: RC SEND_ONLY over IPv4, {rounds} rounds x {iters} frames, medians (ns per frame)"
    );
    println!(
        "{:>8} {:>10} {:>8} {:>11} {:>8} {:>8} {:>18}",
        "payload", "crc32fast", "parse", "parse+icrc", "icrc", "emit", "parse+icrc / crc"
    );
    for len in SIZES {
        let s = sample(len)?;
        let (repr, payload, frame, ip) = (&s.repr, &s.payload, &s.frame, s.ip());
        let mut out = vec![0u8; frame.len()];
        let mut v: [Vec<f64>; 6] = Default::default();
        for _ in 0..rounds {
            let crc = time(&mut || {
                black_box(crc32fast::hash(black_box(ip)));
            });
            let parse = time(&mut || {
                black_box(Frame::parse(black_box(frame)).is_ok());
            });
            let both = time(&mut || {
                black_box(Frame::parse(black_box(frame)).map(|f| f.icrc_ok()) == Ok(true));
            });
            let ic = time(&mut || {
                black_box(icrc::compute(black_box(ip)).is_ok());
            });
            let emit = time(&mut || {
                black_box(repr.emit(black_box(payload), black_box(&mut out)).is_ok());
            });
            for (k, x) in [crc, parse, both, ic, emit, both / crc]
                .into_iter()
                .enumerate()
            {
                v[k].push(x);
            }
        }
        let m: Vec<f64> = v.into_iter().map(median).collect();
        println!(
            "{:>8} {:>10.1} {:>8.1} {:>11.1} {:>8.1} {:>8.1} {:>18.2}",
            len, m[0], m[1], m[2], m[3], m[4], m[5]
        );
    }
    Ok(true)
}
