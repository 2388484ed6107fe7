//! The DPDK layer inside one process: mbuf ownership (no leak over a million
//! alloc / free cycles), ring-link bursts, and the errors a caller gets for
//! bad input. The EAL starts once per process, so this file is one test.
#![cfg(feature = "dpdk")]

use ferroce::backend::{Backend, Burst, FrameBuf};
use ferroce::dpdk::{
    self, DeviceSpec, DmaRegion, Eal, EalOptions, HugepageMode, Mempool, MempoolOptions, Port,
    PortOptions, QueueId,
};

#[test]
fn dpdk_layer_in_one_process() {
    let opts = EalOptions {
        hugepages: HugepageMode::Off,
        memory_mb: 256,
        ..Default::default()
    };
    let devices = [
        DeviceSpec::parse("net_null0").unwrap(),
        DeviceSpec::parse("net_null1").unwrap(),
    ];
    let eal = Eal::init(&opts, &devices).expect("EAL");
    assert!(!eal.hugepages());
    assert!(matches!(
        Eal::init(&opts, &[]),
        Err(dpdk::Error::AlreadyInitialised)
    ));

    let pool = Mempool::new(
        &eal,
        "t_pool",
        &MempoolOptions {
            mbufs: 4095,
            cache: 64,
            data_room: 4352,
        },
    )
    .unwrap();
    let start = pool.available();
    assert_eq!(start, 4095);

    mbufs_do_not_leak(&pool, start);
    mbuf_bounds(&pool);
    ring_link_moves_frames(&eal, &pool);
    bad_input_is_an_error(&eal, &pool);

    assert_eq!(pool.available(), start, "every mbuf back in the pool");
}

fn mbufs_do_not_leak(pool: &Mempool, start: u32) {
    // 1M single alloc / free cycles, a third of them written to.
    for i in 0..1_000_000u32 {
        let mut m = pool.alloc().expect("mbuf");
        if i % 3 == 0 {
            m.append(64).unwrap()[0] = i as u8;
        }
    }
    assert_eq!(pool.available(), start);
    // 1M more through bursts and the bulk free.
    let mut b: Burst<dpdk::Mbuf> = Burst::new();
    for _ in 0..(1_000_000 / 32) {
        assert_eq!(pool.alloc_bulk(&mut b, 32), 32);
        dpdk::free_burst(&mut b);
        assert!(b.is_empty());
    }
    assert_eq!(pool.available(), start);
    // Exhaustion is an answer, not a crash, and nothing leaks after it.
    let mut held = Vec::new();
    while let Some(m) = pool.alloc() {
        held.push(m);
    }
    assert_eq!(held.len() as u32, start);
    assert!(pool.alloc().is_none());
    assert_eq!(pool.alloc_bulk(&mut b, 8), 0);
    drop(held);
    assert_eq!(pool.available(), start);
}

fn mbuf_bounds(pool: &Mempool) {
    let mut m = pool.alloc().unwrap();
    assert_eq!(m.data_len(), 0);
    assert_eq!(m.headroom(), usize::from(dpdk::HEADROOM));
    let room = m.tailroom();
    assert!(room >= 4352);
    assert!(
        m.append(room + 1).is_none(),
        "no room: None, and nothing changes"
    );
    assert_eq!(m.data_len(), 0);
    m.append(100).unwrap().fill(0xAB);
    m.prepend(14).unwrap().fill(0x01);
    assert_eq!(m.data_len(), 114);
    assert_eq!(&m.data()[..2], &[0x01, 0x01]);
    assert!(m.adj(14));
    assert!(!m.trim(1000));
    assert!(m.trim(10));
    assert_eq!(m.data(), &[0xAB; 90][..]);
    FrameBuf::truncate(&mut m, 5);
    assert_eq!(m.pkt_len(), 5);
    assert_eq!(m.segments().count(), 1);
    assert_eq!(m.nb_segs(), 1);
}

fn ring_link_moves_frames(eal: &Eal, pool: &Mempool) {
    let opts = PortOptions {
        rx_desc: 256,
        tx_desc: 256,
        ..Default::default()
    };
    let (a, b) = Port::ring_pair(eal, "tlink", pool, &opts).unwrap();
    assert!(a.link().unwrap().up);
    let (mut qa, mut qb) = (a.queue(QueueId(0)).unwrap(), b.queue(QueueId(0)).unwrap());
    let mut tx: Burst<dpdk::Mbuf> = Burst::new();
    for i in 0..32u8 {
        let mut m = qa.alloc().unwrap();
        m.append(1000).unwrap().fill(i);
        tx.push(m);
    }
    assert_eq!(qa.tx_burst(&mut tx), 32);
    let mut rx: Burst<dpdk::Mbuf> = Burst::new();
    let mut got = 0;
    while got < 32 {
        got += qb.rx_burst(&mut rx);
    }
    for (i, m) in rx.iter().enumerate() {
        assert_eq!(
            m.data(),
            &vec![i as u8; 1000][..],
            "frame {i} byte for byte, in order"
        );
    }
    qb.free_burst(&mut rx);
    // Fill the ring: the unsent stay in the caller's burst, in order.
    let mut sent = 0;
    let mut kept = 0;
    for round in 0..20 {
        pool.alloc_bulk(&mut tx, 32);
        for m in tx.iter_mut() {
            if m.data_len() == 0 {
                m.append(8).unwrap().fill(round);
            }
        }
        sent += qa.tx_burst(&mut tx);
        kept = tx.len();
        if kept > 0 {
            break;
        }
    }
    assert!(kept > 0, "a 256-slot ring must fill up");
    assert!(sent >= 255);
    dpdk::free_burst(&mut tx);
    let s = a.stats().unwrap();
    assert_eq!(s.opackets, 32 + sent as u64);
    lent_frames_cross_the_link(&mut qa, &mut qb);
    // Dropping both ends returns what sat in the ring to the pool.
    drop((qa, qb, a, b));
}

/// Zero-copy send over the link: a frame whose payload is an mbuf
/// pointing into a region arrives in three segments holding the same
/// bytes; the region counts it in flight until the receiver frees it, and
/// a region dropped while a frame still points into it stays mapped.
fn lent_frames_cross_the_link(qa: &mut dpdk::PortQueue, qb: &mut dpdk::PortQueue) {
    use ferroce::backend::Layout;
    assert!(qa.can_lend());
    // Empty the ring the test above filled.
    let mut rx: Burst<dpdk::Mbuf> = Burst::new();
    while qb.rx_burst(&mut rx) > 0 {
        qb.free_burst(&mut rx);
    }
    let mut region = DmaRegion::new(1 << 20).unwrap();
    for (i, x) in region.as_mut_slice().iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }
    let send = |qa: &mut dpdk::PortQueue, region: &DmaRegion, offset: usize| {
        let mut m = qa.alloc().unwrap();
        let w = m.append(64 + 6).unwrap();
        w[..64].fill(0xAB);
        w[64..].fill(0xCD);
        assert!(qa.attach(&mut m, 64, region, offset, 3000));
        let mut tx: Burst<dpdk::Mbuf> = Burst::new();
        tx.push(m);
        assert_eq!(qa.tx_burst(&mut tx), 1);
    };
    let recv = |qb: &mut dpdk::PortQueue| {
        let mut rx: Burst<dpdk::Mbuf> = Burst::new();
        while qb.rx_burst(&mut rx) == 0 {}
        rx
    };
    send(qa, &region, 1000);
    assert_eq!(region.in_flight(), 1);
    let mut rx = recv(qb);
    let want: Vec<u8> = (1000..4000).map(|i| (i % 251) as u8).collect();
    match rx[0].layout() {
        Layout::Three([h, p, t]) => {
            assert_eq!((h, p, t), (&[0xAB; 64][..], &want[..], &[0xCD; 6][..]));
        }
        other => panic!("a lent frame in three segments, not {other:?}"),
    }
    let mut whole = [0u8; 4096];
    assert_eq!(rx[0].read_into(&mut whole), Some(64 + 3000 + 6));
    qb.free_burst(&mut rx);
    assert_eq!(region.in_flight(), 0);
    // Memory that is not a DmaRegion is not attached.
    let mut m = qa.alloc().unwrap();
    m.append(70).unwrap();
    assert!(!qa.attach(&mut m, 64, &vec![0u8; 4096], 0, 100));
    assert_eq!(m.nb_segs(), 1);
    // Dropped with a frame in flight: the frame still reads its bytes.
    send(qa, &region, 0);
    drop(region);
    let mut rx = recv(qb);
    let want: Vec<u8> = (0..3000).map(|i| (i % 251) as u8).collect();
    assert!(matches!(rx[0].layout(), Layout::Three([_, p, _]) if p == &want[..]));
    qb.free_burst(&mut rx);
}

fn bad_input_is_an_error(eal: &Eal, pool: &Mempool) {
    let e = Port::open(
        eal,
        &DeviceSpec::parse("net_memif9").unwrap(),
        pool,
        &PortOptions::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(e, dpdk::Error::PortNotFound(_)), "{e}");
    // A failed open closes the device (net_null1 here).
    let too_many = PortOptions {
        rx_queues: 5000,
        ..Default::default()
    };
    let e = Port::open(
        eal,
        &DeviceSpec::parse("net_null1").unwrap(),
        pool,
        &too_many,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("queues"), "{e}");
    let e = Port::open(
        eal,
        &DeviceSpec::parse("ring:x").unwrap(),
        pool,
        &PortOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("ring_pair"), "{e}");
    let n = Port::open(
        eal,
        &DeviceSpec::parse("net_null0").unwrap(),
        pool,
        &PortOptions::default(),
    )
    .unwrap();
    assert!(n.queue(QueueId(1)).is_err());
    let e = Mempool::new(eal, "t_pool", &MempoolOptions::default())
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("rte_pktmbuf_pool_create"),
        "a duplicate pool name: {e}"
    );
}
