//! Zero-copy send in the transport, sans IO: a device whose region lends
//! its memory (`RegionMemory::lender`) writes request packets with their
//! payload left in the region (`Device::poll_transmit_parts`), and the
//! receiver takes them in three parts (`Device::handle_parts`).
//!
//! The frame such a sender puts on the wire (its headers, the payload read
//! from the region, its pad and ICRC) must be byte for byte the frame a
//! copying sender writes, for every opcode that carries a payload, every
//! pad count and both path MTUs; what cannot be lent (several SGEs, inline
//! data, payloads under the threshold) is copied as before. The DPDK side
//! (an mbuf pointing into the region) is tested in `tests/bench_e2e.rs`.

use core::net::IpAddr;

use ferroce::transport::connect::{connect_qp, ConnectParams};
use ferroce::transport::*;
use ferroce::wire::{Frame, MacAddr};

mod common;
use common::lends::Lends;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const REGION: usize = 1 << 20;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([198, 18, 0, last])
}

struct End {
    dev: Device,
    qp: u32,
    cq: CqId,
    mr: MrKeys,
}

fn end(mac: MacAddr, last: u8, lends: bool) -> End {
    let mut dev = Device::new(DeviceConfig::new(mac, ip(last))).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1024).unwrap();
    let pattern: Vec<u8> = (0..REGION)
        .map(|i| (i * 7 + usize::from(last)) as u8)
        .collect();
    let spec = MrSpec::new(pd, REGION, Access::ALL);
    let mr = if lends {
        dev.reg_mr_memory(spec, Box::new(Lends(pattern))).unwrap()
    } else {
        dev.reg_mr_memory(spec, Box::new(pattern)).unwrap()
    };
    let qp = dev.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
    End { dev, qp, cq, mr }
}

/// Two connected ends; `a` lends payloads of at least `min` bytes when
/// `min` is set.
fn pair(mtu: Mtu, min: Option<usize>) -> (End, End) {
    pair_lending(mtu, min, None)
}

/// Two connected ends, each lending payloads of at least its minimum.
fn pair_lending(mtu: Mtu, min: Option<usize>, b_min: Option<usize>) -> (End, End) {
    let mut a = end(MAC_A, 1, min.is_some());
    let mut b = end(MAC_B, 2, b_min.is_some());
    b.dev.set_zero_copy(b_min);
    let p = ConnectParams {
        mtu,
        ..ConnectParams::default()
    };
    connect_qp(&mut a.dev, a.qp, b.qp, MAC_B, ip(2), &p, 0, 0).unwrap();
    connect_qp(&mut b.dev, b.qp, a.qp, MAC_A, ip(1), &p, 0, 0).unwrap();
    a.dev.set_zero_copy(min);
    (a, b)
}

/// Moves frames both ways until both ends are quiet; returns every frame
/// `a` sent, whole (a lent one put together from its three parts, as the
/// wire carries it), and how many were lent. `b` takes lent frames in
/// parts.
fn shuttle(a: &mut End, b: &mut End) -> (Vec<Vec<u8>>, usize) {
    let (sent, lent, _) = shuttle_both(a, b);
    (sent, lent)
}

/// [`shuttle`], with every frame `b` sent too, whole.
fn shuttle_both(a: &mut End, b: &mut End) -> (Vec<Vec<u8>>, usize, Vec<Vec<u8>>) {
    let (mut sent, mut b_sent) = (Vec::new(), Vec::new());
    let mut lent = 0;
    loop {
        let n = (sent.len(), b_sent.len());
        lent += one_way(&mut a.dev, &mut b.dev, &mut sent);
        one_way(&mut b.dev, &mut a.dev, &mut b_sent);
        if (sent.len(), b_sent.len()) == n {
            return (sent, lent, b_sent);
        }
    }
}

/// Every frame `from` has, into `to`, a lent one in its three parts;
/// each frame whole in `log`. Returns how many were lent.
fn one_way(from: &mut Device, to: &mut Device, log: &mut Vec<Vec<u8>>) -> usize {
    let now = ferroce::time::Instant::ZERO;
    let mut buf = [0u8; 9216];
    let mut lent = 0;
    while let Some(t) = from.poll_transmit_parts(now, &mut buf) {
        match t.lent {
            Some(l) => {
                lent += 1;
                assert!(from.lent(&l).is_some(), "its region lends");
                let payload = &from.mr(l.lkey).unwrap()[l.offset..l.offset + l.len];
                let (head, tail) = (&buf[..l.head], &buf[l.head..t.len]);
                assert!(to.handle_parts(now, head, payload, tail));
                log.push([head, payload, tail].concat());
            }
            None => {
                to.handle(now, &buf[..t.len]);
                log.push(buf[..t.len].to_vec());
            }
        }
    }
    lent
}

fn sge(e: &End, at: u64, len: u32) -> Sge {
    Sge {
        addr: e.mr.addr + at,
        length: len,
        lkey: e.mr.lkey,
    }
}

/// Posts the same mix of messages on `a` (and the receives on `b`):
/// WRITEs and SENDs of every pad count, single- and multi-packet, one in
/// two SGEs and one inline.
fn post_mix(a: &mut End, b: &mut End) -> usize {
    let lens = [1u32, 2, 3, 4, 63, 257, 1024, 1500, 4096, 9001];
    let mut n = 0;
    for (i, &len) in lens.iter().enumerate() {
        let at = 4096 * i as u64 + 3;
        let write = SendOp::Write {
            remote_addr: b.mr.addr + 65536 + at,
            rkey: b.mr.rkey,
        };
        let wr = SendWr::new(n, write, Payload::sge(sge(a, at, len)));
        a.dev.post_send(a.qp, wr).unwrap();
        n += 1;
        let rsge = sge(b, 512 * 1024 + at, len);
        b.dev
            .post_recv(
                b.qp,
                RecvWr {
                    wr_id: n,
                    sges: smallvec::smallvec![rsge],
                },
            )
            .unwrap();
        let op = if i % 2 == 0 {
            SendOp::Send
        } else {
            SendOp::SendWithImm(0x1234_5678)
        };
        a.dev
            .post_send(a.qp, SendWr::new(n, op, Payload::sge(sge(a, at, len))))
            .unwrap();
        n += 1;
    }
    // Two SGEs, and inline bytes: copied.
    let two = Payload::Sges(smallvec::smallvec![sge(a, 0, 700), sge(a, 9000, 700)]);
    let write = SendOp::Write {
        remote_addr: b.mr.addr + 300_000,
        rkey: b.mr.rkey,
    };
    a.dev.post_send(a.qp, SendWr::new(n, write, two)).unwrap();
    n += 1;
    let write = SendOp::Write {
        remote_addr: b.mr.addr + 310_000,
        rkey: b.mr.rkey,
    };
    let inline = Payload::Inline(vec![9u8; 100]);
    a.dev
        .post_send(a.qp, SendWr::new(n, write, inline))
        .unwrap();
    n as usize + 1
}

fn completions(e: &mut End) -> Vec<Wc> {
    let mut wcs = Vec::new();
    e.dev.poll_cq(e.cq, 4096, &mut wcs);
    wcs
}

#[test]
fn lent_payloads_make_the_frames_a_copying_sender_makes() {
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let (mut a, mut b) = pair(mtu, None);
        let (mut za, mut zb) = pair(mtu, Some(1));
        let msgs = post_mix(&mut a, &mut b);
        assert_eq!(post_mix(&mut za, &mut zb), msgs);
        let (copied, none) = shuttle(&mut a, &mut b);
        let (zero, lent) = shuttle(&mut za, &mut zb);
        assert_eq!(none, 0);
        assert_eq!(copied.len(), zero.len());
        for (i, (c, z)) in copied.iter().zip(&zero).enumerate() {
            assert_eq!(c, z, "frame {i} at {mtu:?}");
            assert!(Frame::parse(z).unwrap().icrc_ok());
        }
        // Every packet whose payload lies in one SGE was lent: all but the
        // two-SGE WRITE's first packet (it spans both SGEs; at MTU 1024 its
        // second lies in the second SGE alone) and the inline WRITE.
        assert_eq!(lent, copied.len() - 2, "at {mtu:?}");
        let c = za.dev.qp_counters(za.qp).unwrap();
        assert_eq!(c.lent_pkts as usize, lent);
        assert_eq!(zb.dev.rx_counters().icrc_errors, 0);
        // The same completions and the same bytes landed.
        let (wa, wb) = (completions(&mut a), completions(&mut b));
        assert_eq!(wa.len(), msgs);
        assert!(wa.iter().chain(&wb).all(|w| w.status == WcStatus::Success));
        assert_eq!(completions(&mut za).len(), wa.len());
        assert_eq!(completions(&mut zb).len(), wb.len());
        assert_eq!(zb.dev.mr(zb.mr.lkey), b.dev.mr(b.mr.lkey), "at {mtu:?}");
    }
}

#[test]
fn payloads_under_the_threshold_and_poll_transmit_copy() {
    let (mut a, mut b) = pair(Mtu::Mtu4096, Some(2048));
    post_mix(&mut a, &mut b);
    let (frames, lent) = shuttle(&mut a, &mut b);
    // Only 4096 and 9001 (three packets of 4096, 4096, 809: the last one
    // under the threshold) reach 2048 bytes: two messages each way.
    assert_eq!(lent, 2 * (1 + 2));
    assert!(frames.len() > lent);
    // poll_transmit writes whole frames whatever the setting.
    let (mut a, mut b) = pair(Mtu::Mtu4096, Some(1));
    post_mix(&mut a, &mut b);
    let mut buf = vec![0u8; 9216];
    let now = ferroce::time::Instant::ZERO;
    let n = a.dev.poll_transmit(now, &mut buf).unwrap();
    assert!(Frame::parse(&buf[..n]).unwrap().icrc_ok());
    assert_eq!(a.dev.qp_counters(a.qp).unwrap().lent_pkts, 0);
}

#[test]
fn a_frame_in_parts_with_a_bad_icrc_or_cut_is_counted_and_dropped() {
    let (mut a, mut b) = pair(Mtu::Mtu4096, Some(1));
    let write = SendOp::Write {
        remote_addr: b.mr.addr,
        rkey: b.mr.rkey,
    };
    a.dev
        .post_send(a.qp, SendWr::new(1, write, Payload::sge(sge(&a, 0, 1000))))
        .unwrap();
    let mut buf = vec![0u8; 9216];
    let now = ferroce::time::Instant::ZERO;
    let t = a.dev.poll_transmit_parts(now, &mut buf).unwrap();
    let l = t.lent.unwrap();
    let mut payload = a.dev.mr(l.lkey).unwrap()[l.offset..l.offset + l.len].to_vec();
    let (head, tail) = (&buf[..l.head], &buf[l.head..t.len]);
    // Parts cut elsewhere are not taken (the driver hands the frame
    // whole to `handle`, which judges it).
    assert!(!b
        .dev
        .handle_parts(now, &head[..head.len() - 1], &payload, tail));
    assert_eq!(b.dev.rx_counters().frames, 0);
    // A flipped payload bit: an ICRC error, nothing written.
    let before = b.dev.mr(b.mr.lkey).unwrap()[..1000].to_vec();
    payload[10] ^= 1;
    assert!(b.dev.handle_parts(now, head, &payload, tail));
    assert_eq!(b.dev.rx_counters().icrc_errors, 1);
    assert_eq!(&b.dev.mr(b.mr.lkey).unwrap()[..1000], &before[..]);
    payload[10] ^= 1;
    assert!(b.dev.handle_parts(now, head, &payload, tail));
    assert_eq!(&b.dev.mr(b.mr.lkey).unwrap()[..1000], &payload[..]);
    assert_eq!(b.dev.qp_counters(b.qp).unwrap().rcvd_pkts, 1);
}

/// A loopback port that says it can lend but attaches nothing: the pump
/// must then copy a lent payload in, as for a port that cannot chain.
struct Refuses(ferroce::backend::loopback::LoopbackPort);

impl ferroce::backend::Backend for Refuses {
    type Buf = ferroce::backend::loopback::VecBuf;
    fn rx_burst(&mut self, out: &mut ferroce::backend::Burst<Self::Buf>) -> usize {
        self.0.rx_burst(out)
    }
    fn alloc(&mut self) -> Option<Self::Buf> {
        self.0.alloc()
    }
    fn tx_burst(&mut self, frames: &mut ferroce::backend::Burst<Self::Buf>) -> usize {
        self.0.tx_burst(frames)
    }
    fn can_lend(&self) -> bool {
        true
    }
}

#[test]
fn a_port_that_cannot_attach_gets_the_payload_copied_in() {
    use ferroce::backend::{loopback, Burst};
    use ferroce::host::pump::pump;
    let (mut a, mut b) = pair(Mtu::Mtu4096, Some(1));
    let (pa, pb) = loopback::pair(64, ferroce::host::pump::MAX_FRAME);
    let (mut pa, mut pb) = (Refuses(pa), pb);
    let write = SendOp::Write {
        remote_addr: b.mr.addr + 4096,
        rkey: b.mr.rkey,
    };
    a.dev
        .post_send(
            a.qp,
            SendWr::new(1, write, Payload::sge(sge(&a, 100, 9000))),
        )
        .unwrap();
    let (mut qa, mut qb) = (Burst::new(), Burst::new());
    let now = ferroce::time::Instant::ZERO;
    for _ in 0..10 {
        pump(&mut a.dev, &mut pa, now, &mut qa);
        pump(&mut b.dev, &mut pb, now, &mut qb);
    }
    let wcs = completions(&mut a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    // Three packets were written lent, and went out copied.
    assert_eq!(a.dev.qp_counters(a.qp).unwrap().lent_pkts, 3);
    assert_eq!(b.dev.rx_counters().icrc_errors, 0);
    let src = &a.dev.mr(a.mr.lkey).unwrap()[100..9100];
    assert_eq!(&b.dev.mr(b.mr.lkey).unwrap()[4096..4096 + 9000], src);
}

#[test]
fn read_responses_leave_from_the_region_as_a_copying_responder_writes_them() {
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let (mut a, mut b) = pair(mtu, None);
        let (mut za, mut zb) = pair_lending(mtu, None, Some(1));
        for (x, y) in [(&mut a, &b), (&mut za, &zb)] {
            for (i, len) in [1u32, 3, 600, 4096, 9001].into_iter().enumerate() {
                let read = SendOp::Read {
                    remote_addr: y.mr.addr + 20_000 * i as u64 + 5,
                    rkey: y.mr.rkey,
                };
                let wr = SendWr::new(
                    i as u64,
                    read,
                    Payload::sge(sge(x, 200_000 * i as u64, len)),
                );
                x.dev.post_send(x.qp, wr).unwrap();
            }
        }
        let (_, _, copied) = shuttle_both(&mut a, &mut b);
        let (_, _, zero) = shuttle_both(&mut za, &mut zb);
        assert_eq!(copied, zero, "the responder's frames at {mtu:?}");
        let lent = zb.dev.qp_counters(zb.qp).unwrap().lent_pkts as usize;
        // Every READ response packet carries a payload: all were lent.
        assert_eq!(lent, zero.len(), "at {mtu:?}");
        assert_eq!(completions(&mut za).len(), 5);
        assert_eq!(za.dev.mr(za.mr.lkey), a.dev.mr(a.mr.lkey), "at {mtu:?}");
        assert_eq!(za.dev.rx_counters().icrc_errors, 0);
    }
}
