//! The wire hot path: whole-frame parse, ICRC verify and emit of an RC
//! SEND_ONLY frame over IPv4 with a 64 B and a 4096 B payload (the sample
//! frames of `ferroce bench wire`, `tools::bench::wire`), next to the
//! baseline `crc32fast::hash` over the same bytes (the IP packet without its
//! ICRC), in one run. One criterion iteration = one frame; every bench of a
//! group sets `Throughput::Bytes` to the whole frame's length, so the
//! throughputs of one size compare directly. `icrc_fold`: the same ICRC
//! from a QP's folded header prefix (`icrc::HeadFold`, as a connected
//! QP's header template seals its packets).
//!
//! Targets: `parse+icrc` of the 4096 B frame within 1.3x of `crc32fast`
//! over the same bytes; `parse` of the 64 B frame under 30 ns.

use criterion::{criterion_group, criterion_main, Bencher, Criterion, Throughput};
use ferroce::tools::bench::wire::{sample, SIZES};
use ferroce::wire::frame::seal;
use ferroce::wire::{icrc, Frame};
use std::hint::black_box;

/// `b.iter` with the routine's output passed through `std::hint::black_box`
/// and `()` handed to criterion: without its `real_blackbox` feature,
/// criterion's own `black_box` is a `read_volatile` of the whole output,
/// lowered to one load per field (about 140 loads for the 256-byte
/// `Result<Frame>`, some 20 ns here), which would be timed with the parse.
fn iter<O>(b: &mut Bencher, mut f: impl FnMut() -> O) {
    b.iter(|| {
        black_box(f());
    })
}

fn wire(c: &mut Criterion) {
    for len in SIZES {
        let s = sample(len).expect("sample frame");
        let (repr, payload, frame) = (&s.repr, &s.payload, &s.frame);
        let ip_offset = repr.eth.header_len();
        let n = frame.len();
        let parsed = Frame::parse(frame).expect("parse");
        assert!(parsed.icrc_ok() && parsed.payload == &payload[..]);
        // The IP packet without its ICRC: what icrc::compute and the
        // crc32fast baseline read.
        let ip = s.ip();
        let mut out = vec![0u8; n];

        let mut g = c.benchmark_group(format!("wire_{len}B"));
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_function("parse", |b| iter(b, || Frame::parse(black_box(&frame[..]))));
        g.bench_function("parse+icrc", |b| {
            iter(b, || {
                Frame::parse(black_box(&frame[..])).map(|f| f.icrc_ok())
            })
        });
        g.bench_function("icrc", |b| iter(b, || icrc::compute(black_box(ip))));
        g.bench_function("crc32fast", |b| iter(b, || crc32fast::hash(black_box(ip))));
        let fold = icrc::HeadFold::new(ip).unwrap();
        g.bench_function("icrc_fold", |b| {
            iter(b, || black_box(&fold).compute(black_box(ip), &[]))
        });
        g.bench_function("emit", |b| {
            iter(b, || {
                black_box(repr).emit(black_box(&payload[..]), black_box(&mut out[..]))
            })
        });
        g.bench_function("emit_headers+seal", |b| {
            iter(b, || {
                let r = black_box(repr);
                let out = black_box(&mut out[..]);
                r.emit_headers(black_box(len), out)?;
                seal(&mut out[..r.frame_len(len)], ip_offset)
            })
        });
        g.finish();
    }
}

criterion_group!(benches, wire);
criterion_main!(benches);
