use ferroce::backend::sim::LinkConfig;
use ferroce::engine::rc::{ConnectParams, SimNet};
use ferroce::time::Duration;
use ferroce::transport::*;
use ferroce::wire::MacAddr;

#[test]
fn send_write_read_atomic_over_a_clean_link() {
    let mut net = SimNet::new(1);
    let a = net
        .add_host(DeviceConfig::new(
            MacAddr([2, 0, 0, 0, 0, 1]),
            "198.18.0.1".parse().unwrap(),
        ))
        .unwrap();
    let b = net
        .add_host(DeviceConfig::new(
            MacAddr([2, 0, 0, 0, 0, 2]),
            "198.18.0.2".parse().unwrap(),
        ))
        .unwrap();
    net.connect(a, b, LinkConfig::default()).unwrap();
    let mut setup = |i: usize| {
        let d = &mut net.hosts[i].dev;
        let pd = d.alloc_pd();
        let cq = d.create_cq(1024).unwrap();
        let mr = d
            .reg_mr(MrSpec {
                pd,
                len: 1 << 16,
                access: Access::ALL,
                addr: None,
                key: None,
            })
            .unwrap();
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        (cq, mr, qp)
    };
    let (cqa, mra, qa) = setup(a);
    let (cqb, mrb, qb) = setup(b);
    net.connect_qps(a, qa, b, qb, &ConnectParams::default())
        .unwrap();
    for (i, x) in net.hosts[a]
        .dev
        .mr_mut(mra.lkey)
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        *x = i as u8;
    }
    net.hosts[b]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 7,
                sges: vec![Sge {
                    addr: mrb.addr,
                    length: 8192,
                    lkey: mrb.lkey,
                }],
            },
        )
        .unwrap();
    let sge = |off: u64, len: u32| Sge {
        addr: mra.addr + off,
        length: len,
        lkey: mra.lkey,
    };
    let dev = &mut net.hosts[a].dev;
    dev.post_send(
        qa,
        SendWr::new(1, SendOp::Send, Payload::Sges(vec![sge(0, 5000)])),
    )
    .unwrap();
    dev.post_send(
        qa,
        SendWr::new(
            2,
            SendOp::Write {
                remote_addr: mrb.addr + 10000,
                rkey: mrb.rkey,
            },
            Payload::Sges(vec![sge(100, 3000)]),
        ),
    )
    .unwrap();
    dev.post_send(
        qa,
        SendWr::new(
            3,
            SendOp::Read {
                remote_addr: mrb.addr + 10000,
                rkey: mrb.rkey,
            },
            Payload::Sges(vec![sge(20000, 3000)]),
        ),
    )
    .unwrap();
    dev.post_send(
        qa,
        SendWr::new(
            4,
            SendOp::FetchAdd {
                remote_addr: mrb.addr + 40000,
                rkey: mrb.rkey,
                add: 5,
            },
            Payload::Sges(vec![sge(30000, 8)]),
        ),
    )
    .unwrap();
    dev.post_send(
        qa,
        SendWr::new(
            5,
            SendOp::FetchAdd {
                remote_addr: mrb.addr + 40000,
                rkey: mrb.rkey,
                add: 5,
            },
            Payload::Sges(vec![sge(30008, 8)]),
        ),
    )
    .unwrap();
    let mut wcs = Vec::new();
    let ok = net.run_until(Duration::from_secs(1), |n| {
        n.hosts[a].dev.poll_cq(cqa, 16, &mut wcs);
        n.hosts[b].dev.poll_cq(cqb, 16, &mut wcs);
        wcs.len() == 6
    });
    println!(
        "{:?}\n{}\n{}",
        wcs,
        net.hosts[a].dev.counters(),
        net.hosts[b].dev.counters()
    );
    assert!(ok);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let ma = net.hosts[a].dev.mr(mra.lkey).unwrap().to_vec();
    let mb = net.hosts[b].dev.mr(mrb.lkey).unwrap();
    assert_eq!(&mb[..5000], &ma[..5000]);
    assert_eq!(&mb[10000..13000], &ma[100..3100]);
    assert_eq!(&ma[20000..23000], &ma[100..3100]);
    assert_eq!(
        &ma[30000..30016],
        &[0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(&mb[40000..40008], &10u64.to_le_bytes());
}
