use super::*;

fn run(cfg: SimConfig, seed: u64) -> Report {
    SimRun::new(cfg).unwrap().run(seed, None)
}

#[test]
fn parsers_take_good_input_and_name_bad_input() {
    assert_eq!(
        parse_ops("send,write,read,atomic").unwrap(),
        Op::ALL.to_vec()
    );
    assert_eq!(parse_ops("all").unwrap(), Op::ALL.to_vec());
    assert_eq!(
        parse_ops("send,fetch"),
        Err(ConfigError::UnknownOp("fetch".into()))
    );
    assert_eq!(parse_ops(","), Err(ConfigError::NoOps));
    assert_eq!(parse_size("64-4096").unwrap(), (64, 4096));
    assert_eq!(parse_size("4K").unwrap(), (4096, 4096));
    assert_eq!(parse_size("0-1M").unwrap(), (0, 1 << 20));
    assert_eq!(
        parse_size("9-3"),
        Err(ConfigError::SizeOrder { min: 9, max: 3 })
    );
    assert!(parse_size("x-3").is_err());
    assert_eq!(parse_rate("100G").unwrap(), 100_000_000_000);
    assert_eq!(parse_rate("25gbps").unwrap(), 25_000_000_000);
    assert_eq!(parse_rate("1.5M").unwrap(), 1_500_000);
    assert_eq!(parse_rate("inf").unwrap(), 0);
    assert!(parse_rate("fast").is_err());
    assert_eq!(parse_duration("1us").unwrap(), Duration::from_micros(1));
    assert_eq!(
        parse_duration("2.5ms").unwrap(),
        Duration::from_micros(2500)
    );
    assert_eq!(parse_duration("0ns").unwrap(), Duration::ZERO);
    assert!(parse_duration("5").is_err());
    assert_eq!(parse_seeds("1-100").unwrap(), (1, 100));
    assert_eq!(parse_seeds("7").unwrap(), (7, 7));
    assert!(parse_seeds("9-1").is_err());
}

#[test]
fn the_constructor_refuses_bad_configs() {
    let bad = |f: &dyn Fn(&mut SimConfig)| {
        let mut c = SimConfig::default();
        f(&mut c);
        SimRun::new(c).unwrap_err()
    };
    assert_eq!(
        bad(&|c| c.link.loss = 1.5),
        ConfigError::BadProbability {
            field: "loss",
            value: 1.5
        }
    );
    assert!(matches!(
        bad(&|c| c.link.corrupt = f64::NAN),
        ConfigError::BadProbability {
            field: "corrupt",
            ..
        }
    ));
    assert_eq!(bad(&|c| c.mtu = 1500), ConfigError::BadMtu(1500));
    assert_eq!(
        bad(&|c| {
            c.size_min = 10;
            c.size_max = 5
        }),
        ConfigError::SizeOrder { min: 10, max: 5 }
    );
    assert_eq!(
        bad(&|c| c.size_max = MAX_SIZE + 1),
        ConfigError::SizeTooLarge(MAX_SIZE + 1)
    );
    assert_eq!(bad(&|c| c.ops.clear()), ConfigError::NoOps);
    assert_eq!(bad(&|c| c.msgs = 0), ConfigError::NoMessages);
    assert_eq!(bad(&|c| c.qps = 0), ConfigError::BadQps(0));
    assert_eq!(bad(&|c| c.window = 0), ConfigError::BadWindow(0));
    assert_eq!(bad(&|c| c.timeout = Some(0)), ConfigError::BadTimeout(0));
    assert_eq!(bad(&|c| c.retry_cnt = 8), ConfigError::BadRetryCnt(8));
}

#[test]
fn the_auto_timeout_is_10_at_the_defaults_and_grows_on_slow_links() {
    let c = SimConfig::default();
    assert_eq!(auto_timeout(&c), 10);
    let slow = SimConfig {
        link: LinkConfig {
            rate_bps: 1_000_000_000,
            ..LinkConfig::default()
        },
        size_max: 1 << 20,
        ..SimConfig::default()
    };
    let t = auto_timeout(&slow);
    assert!(t > 10, "{t}");
}

#[test]
fn a_clean_mix_verifies_every_byte() {
    let r = run(
        SimConfig {
            msgs: 400,
            ..SimConfig::default()
        },
        1,
    );
    assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
    assert_eq!(r.completed, 400);
    assert_eq!(r.retransmitted, 0);
    assert!(r.ops.send > 0 && r.ops.write > 0 && r.ops.read > 0);
    assert!(r.ops.cmp_swap > 0 && r.ops.fetch_add > 0);
    let sizes: u64 = r.bytes_verified;
    assert!(sizes > 400 * 1000, "{sizes}");
}

#[test]
fn the_checks_catch_a_corrupted_destination() {
    // Run, then break one remote word behind the model's back: the
    // final check must see it.
    let sim = SimRun::new(SimConfig {
        msgs: 50,
        ops: vec![Op::Atomic],
        ..SimConfig::default()
    })
    .unwrap();
    let mut r = Report::new(3, &sim);
    let mut run = Run::setup(&sim, 3, &mut r).unwrap();
    run.drive(&mut r);
    assert!(r.ok(), "{:?}", r.problems);
    let (lkey, at) = (run.pairs[0].mrb.lkey, run.lay.b_words);
    run.net.hosts[B].dev.mr_mut(lkey).unwrap()[at] ^= 1;
    run.finish(&mut r);
    assert!(!r.ok());
    assert_eq!(r.mismatches, 1, "{:?}", r.problems);
}

/// Regression: a 12 KiB WRITE (three 4 KiB packets) behind a queue
/// that holds two of them. The first try loses the LAST packet; every
/// retry resends FIRST and MIDDLE, which the responder already has
/// (duplicates without AckReq), and the queue drops the LAST again.
/// Unless the responder ACKs those duplicates, the requester never
/// learns of its progress and fails with RetryExcErr after 8 timeouts.
#[test]
fn a_retry_of_duplicates_without_ackreq_progresses() {
    let r = run(
        SimConfig {
            ops: vec![Op::Write],
            msgs: 1,
            size_min: 12288,
            size_max: 12288,
            mtu: 4096,
            link: LinkConfig {
                queue_bytes: Some(9000),
                ..LinkConfig::default()
            },
            ..SimConfig::default()
        },
        1,
    );
    assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
    assert_eq!(r.timeouts, 2, "{}", r.line());
}

/// Both directions on two QP pairs, with too few receive buffers
/// coming back late: RNR NAKs on top of the faults.
#[test]
fn both_directions_and_rnr_under_faults_verify() {
    let r = run(
        SimConfig {
            msgs: 600,
            qps: 2,
            bidir: true,
            recvs: Some(2),
            recv_delay: Duration::from_micros(3),
            link: LinkConfig {
                loss: 0.01,
                reorder: 0.01,
                dup: 0.01,
                corrupt: 0.002,
                ..LinkConfig::default()
            },
            ..SimConfig::default()
        },
        9,
    );
    assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
    assert!(r.rnr_naks > 0, "{}", r.line());
    assert_eq!(r.completed, 600);
}

#[test]
fn several_qps_and_faults_verify() {
    let r = run(
        SimConfig {
            msgs: 600,
            qps: 3,
            size_min: 0,
            size_max: 3000,
            mtu: 256,
            link: LinkConfig {
                loss: 0.02,
                reorder: 0.02,
                dup: 0.02,
                corrupt: 0.005,
                ..LinkConfig::default()
            },
            ..SimConfig::default()
        },
        5,
    );
    assert!(r.ok(), "{}\n{:#?}", r.line(), r.problems);
    assert!(r.retransmitted > 0);
}
