//! The DPDK layer inside one process: mbuf ownership (no leak over a million
//! alloc / free cycles), ring-link bursts, and the errors a caller gets for
//! bad input. The EAL starts once per process, so this file is one test.
#![cfg(feature = "dpdk")]

use ferroce::backend::{Backend, Burst, FrameBuf};
use ferroce::dpdk::{
    self, DeviceSpec, Eal, EalOptions, HugepageMode, Mempool, MempoolOptions, Port, PortOptions,
    QueueId,
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
    // Dropping both ends returns what sat in the ring to the pool.
    drop((qa, qb, a, b));
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
