//! The RC transport's CPU cost, two devices wired back to back in one
//! thread (no backend, no clock): every frame one emits the other handles.
//!
//! - `msg_64B/transport`: one signaled 64 B SEND, start to finish: post the
//!   receive and the send, the requester builds the packet, the responder
//!   checks, places and ACKs it, the completer retires it, both completions
//!   are polled. Two frames, each emitted (ICRC included) and parsed (ICRC
//!   checked).
//! - `msg_64B/wire`: the baseline in the same run: the same two frames
//!   emitted and parsed with their ICRC by `wire` alone, no transport.
//! - `pkt_4KiB/transport`: one 4 KiB packet of a 256 KiB RDMA WRITE at
//!   path MTU 4096 (64 packets + 1 ACK per message; one iteration is the
//!   whole message, throughput in bytes so it compares with the baseline),
//!   data copied out of the sender's region and into the receiver's.
//! - `pkt_4KiB/wire`: baseline: emit + parse + ICRC of one such frame, and
//!   a copy of its payload.
//! - `write_64B_qps/N`: one signaled 64 B RDMA WRITE on the next of N
//!   connected QPs (1, 100, 10,000), round-robin, start to finish: the
//!   WRITE and its ACK, the completion polled. Every point does the same
//!   work per message (a frame each way, one QP's state on each device),
//!   so the ratio of two points is what the QP count alone costs: the
//!   devices' tables and the QPs' state falling out of the caches.
//!   (`ferroce bench e2e`'s QP sweep keeps 128 WRITEs out in all, which
//!   one QP acknowledges about once per 50 and many QPs once each.)
//! - `write_64B_qps_burst/N[/prefetch]`: one signaled 64 B WRITE on each
//!   of the next 32 of N QPs (100, 10,000), the frames moved 32 at a time
//!   as the pump moves a port's bursts; `/prefetch` hints each burst's
//!   frames to the receiver first (`Device::prefetch`, as the pump does).
//!   From `PREFETCH_MIN_QPS` QPs on, the device also prefetches along its
//!   ready list, in both runs; at 100 QPs neither prefetches.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferroce::host::pump::MAX_FRAME;
use ferroce::time::Instant;
use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::opcode::Op;
use ferroce::wire::{BthRepr, Frame, FrameRepr, IpRepr, MacAddr, Opcode, Psn};
use std::hint::black_box;

struct Pair {
    a: Device,
    b: Device,
    qa: u32,
    qb: u32,
    /// Every QP of `a` and its peer on `b` (`qa`, `qb` first).
    many: Vec<(u32, u32)>,
    next: usize,
    cqa: CqId,
    cqb: CqId,
    mra: MrKeys,
    mrb: MrKeys,
    buf: Vec<u8>,
    /// A burst of frames on their way, and their lengths.
    frames: Vec<Vec<u8>>,
    lens: Vec<usize>,
    wcs: Vec<Wc>,
}

/// Frames moved at once by `write_64_burst`, as a port's burst.
const BURST: usize = 32;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

impl Pair {
    fn new(mtu: Mtu) -> Pair {
        Pair::with_qps(mtu, 1, QpCaps::default())
    }

    /// `n` connected QPs on each device, each with `caps`.
    fn with_qps(mtu: Mtu, n: usize, caps: QpCaps) -> Pair {
        let ip_a = "198.18.0.1".parse().unwrap();
        let ip_b = "198.18.0.2".parse().unwrap();
        let mut a = Device::new(DeviceConfig::new(MAC_A, ip_a)).unwrap();
        let mut b = Device::new(DeviceConfig::new(MAC_B, ip_b)).unwrap();
        let setup = |d: &mut Device| {
            let pd = d.alloc_pd();
            let cq = d.create_cq(4096).unwrap();
            let mr = d.reg_mr(MrSpec::new(pd, 1 << 20, Access::ALL)).unwrap();
            let qps: Vec<u32> = (0..n)
                .map(|_| d.create_qp(pd, cq, cq, caps).unwrap())
                .collect();
            (cq, mr, qps)
        };
        let (cqa, mra, qas) = setup(&mut a);
        let (cqb, mrb, qbs) = setup(&mut b);
        let p = ConnectParams {
            mtu,
            ..ConnectParams::default()
        };
        let many: Vec<(u32, u32)> = qas.into_iter().zip(qbs).collect();
        for &(qa, qb) in &many {
            connect_qp(&mut a, qa, qb, MAC_B, ip_b, &p, 0, 0).unwrap();
            connect_qp(&mut b, qb, qa, MAC_A, ip_a, &p, 0, 0).unwrap();
        }
        let (qa, qb) = many[0];
        Pair {
            a,
            b,
            qa,
            qb,
            many,
            next: 0,
            cqa,
            cqb,
            mra,
            mrb,
            buf: vec![0; MAX_FRAME],
            frames: vec![vec![0; MAX_FRAME]; BURST],
            lens: vec![0; BURST],
            wcs: Vec::with_capacity(64),
        }
    }

    /// Passes frames both ways until both devices are quiet.
    fn shuttle(&mut self) {
        let now = Instant::ZERO;
        loop {
            let mut moved = false;
            while let Some(n) = self.a.poll_transmit(now, &mut self.buf) {
                self.b.handle(now, &self.buf[..n]);
                moved = true;
            }
            while let Some(n) = self.b.poll_transmit(now, &mut self.buf) {
                self.a.handle(now, &self.buf[..n]);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    fn send_64(&mut self) {
        let rsge = Sge {
            addr: self.mrb.addr,
            length: 64,
            lkey: self.mrb.lkey,
        };
        self.b
            .post_recv(
                self.qb,
                RecvWr {
                    wr_id: 1,
                    sges: smallvec::smallvec![rsge],
                },
            )
            .unwrap();
        let sge = Sge {
            addr: self.mra.addr,
            length: 64,
            lkey: self.mra.lkey,
        };
        self.a
            .post_send(self.qa, SendWr::new(2, SendOp::Send, Payload::sge(sge)))
            .unwrap();
        self.shuttle();
        self.wcs.clear();
        self.a.poll_cq(self.cqa, 4, &mut self.wcs);
        self.b.poll_cq(self.cqb, 4, &mut self.wcs);
        assert_eq!(self.wcs.len(), 2);
    }

    /// A WRITE of `len` bytes from the start of `a`'s region to the start
    /// of `b`'s.
    fn write_wr(&self, wr_id: u64, len: u32) -> SendWr {
        let sge = Sge {
            addr: self.mra.addr,
            length: len,
            lkey: self.mra.lkey,
        };
        let op = SendOp::Write {
            remote_addr: self.mrb.addr,
            rkey: self.mrb.rkey,
        };
        SendWr::new(wr_id, op, Payload::sge(sge))
    }

    /// Posts one signaled 64 B WRITE on the next QP, round-robin.
    fn post_64_next(&mut self) {
        let (qa, _) = self.many[self.next];
        self.next = (self.next + 1) % self.many.len();
        let wr = self.write_wr(4, 64);
        self.a.post_send(qa, wr).unwrap();
    }

    /// One signaled 64 B WRITE on the next QP, to its completion.
    fn write_64_next(&mut self) {
        self.post_64_next();
        self.shuttle();
        self.wcs.clear();
        self.a.poll_cq(self.cqa, 4, &mut self.wcs);
        assert_eq!(self.wcs.len(), 1);
    }

    /// One signaled 64 B WRITE on each of the next [`BURST`] QPs, the
    /// frames moved a burst at a time as the pump moves them: all of one
    /// device's frames written, then handed to the other, each QP they
    /// name prefetched first when `prefetch`.
    fn write_64_burst(&mut self, prefetch: bool) {
        for _ in 0..BURST {
            self.post_64_next();
        }
        let now = Instant::ZERO;
        let mut done = 0;
        while done < BURST {
            for to_b in [true, false] {
                let (from, to) = if to_b {
                    (&mut self.a, &mut self.b)
                } else {
                    (&mut self.b, &mut self.a)
                };
                let mut n = 0;
                while n < BURST {
                    let Some(len) = from.poll_transmit(now, &mut self.frames[n]) else {
                        break;
                    };
                    self.lens[n] = len;
                    n += 1;
                }
                if prefetch {
                    for f in &self.frames[..n] {
                        to.prefetch(f);
                    }
                }
                for (f, &len) in self.frames[..n].iter().zip(&self.lens) {
                    to.handle(now, &f[..len]);
                }
            }
            self.wcs.clear();
            done += self.a.poll_cq(self.cqa, BURST, &mut self.wcs);
        }
    }

    fn write_256k(&mut self) {
        let wr = self.write_wr(3, 256 << 10);
        self.a.post_send(self.qa, wr).unwrap();
        self.shuttle();
        self.wcs.clear();
        self.a.poll_cq(self.cqa, 4, &mut self.wcs);
        assert_eq!(self.wcs.len(), 1);
    }
}

fn frame(op: Op, len: usize) -> (FrameRepr, Vec<u8>) {
    let mut bth = BthRepr::new(Opcode::rc(op), 0x12, Psn::new(5));
    bth.ack_req = true;
    let mut r = FrameRepr::roce(
        MAC_A,
        MAC_B,
        IpRepr::v4(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            0,
            ferroce::wire::Ecn::NotEct,
        ),
        0xC001,
        bth,
    );
    if op == Op::Acknowledge {
        r.ext.aeth = Some(ferroce::wire::ext::AethRepr {
            syndrome: ferroce::wire::ext::AckSyndrome::Ack { credit: 31 },
            msn: 1,
        });
    }
    (r, vec![0x5a; len])
}

fn wire_round(r: &FrameRepr, payload: &[u8], buf: &mut [u8], dst: &mut [u8]) -> bool {
    let n = r.emit(payload, buf).unwrap();
    let f = Frame::parse(&buf[..n]).unwrap();
    dst[..f.payload.len()].copy_from_slice(f.payload);
    f.icrc_ok()
}

fn transport(c: &mut Criterion) {
    let mut g = c.benchmark_group("msg_64B");
    g.throughput(Throughput::Elements(1));
    let mut p = Pair::new(Mtu::Mtu1024);
    g.bench_function("transport", |b| b.iter(|| p.send_64()));
    let (send, pl) = frame(Op::SendOnly, 64);
    let (ack, _) = frame(Op::Acknowledge, 0);
    let mut buf = vec![0u8; MAX_FRAME];
    let mut dst = vec![0u8; 4096];
    g.bench_function("wire", |b| {
        b.iter(|| {
            black_box(wire_round(black_box(&send), &pl, &mut buf, &mut dst));
            black_box(wire_round(black_box(&ack), &[], &mut buf, &mut dst));
        })
    });
    g.finish();

    let mut g = c.benchmark_group("pkt_4KiB");
    g.throughput(Throughput::Bytes(256 << 10));
    let mut p = Pair::new(Mtu::Mtu4096);
    g.bench_function("transport", |b| b.iter(|| p.write_256k()));
    g.throughput(Throughput::Bytes(4096));
    let (mid, pl) = frame(Op::RdmaWriteMiddle, 4096);
    g.bench_function("wire", |b| {
        b.iter(|| black_box(wire_round(black_box(&mid), &pl, &mut buf, &mut dst)))
    });
    g.finish();

    let mut g = c.benchmark_group("write_64B_qps");
    g.throughput(Throughput::Elements(1));
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
        ..QpCaps::default()
    };
    for n in [1usize, 100, 10_000] {
        let mut p = Pair::with_qps(Mtu::Mtu1024, n, caps);
        g.bench_function(n.to_string(), |b| b.iter(|| p.write_64_next()));
    }
    g.finish();

    let mut g = c.benchmark_group("write_64B_qps_burst");
    g.throughput(Throughput::Elements(BURST as u64));
    for n in [100usize, 10_000] {
        let mut p = Pair::with_qps(Mtu::Mtu1024, n, caps);
        for pf in [false, true] {
            let name = format!("{n}{}", if pf { "/prefetch" } else { "" });
            g.bench_function(name, |b| b.iter(|| p.write_64_burst(pf)));
        }
    }
    g.finish();
}

criterion_group!(benches, transport);
criterion_main!(benches);
