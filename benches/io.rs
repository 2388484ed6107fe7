//! rx+tx bursts through our Port / Mbuf layer on an in-process ring link,
//! next to the same loop written against the C shim (the baseline), in one
//! run. One criterion iteration = one frame sent and received.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroce::config::{self, Config};
use ferroce::dpdk;
use ferroce::tools::port::ports::Ports;
use std::time::Instant;

fn io(c: &mut Criterion) {
    let cfg = Config::parse(config::DEMO, "demo").expect("demo config");
    let dp = Ports::open(&cfg, &["a", "b"]).expect("ring link");
    let _reg = dpdk::lcore::register_current_thread(&dp.eal).expect("register");
    let (_, pa) = dp.port("a").unwrap();
    let (_, pb) = dp.port("b").unwrap();
    let (pa, pb) = (pa.clone(), pb.clone());
    let mut qa = dp.queue("a").unwrap();
    let mut qb = dp.queue("b").unwrap();
    let pool = dp.pool.clone();
    let mut g = c.benchmark_group("io_ring");
    g.throughput(Throughput::Elements(1));
    for len in [64usize, 1082] {
        g.bench_function(format!("bare_shim_{len}B"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                dpdk::bare::io_loop(&pa, &pb, len as u16, iters);
                t.elapsed()
            })
        });
        g.bench_function(format!("port_layer_{len}B"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                ferroce::backend::poll::io_loop_with(&mut qa, &mut qb, len, iters, |_, out, n| {
                    pool.alloc_bulk(out, n);
                });
                t.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, io);
criterion_main!(benches);
