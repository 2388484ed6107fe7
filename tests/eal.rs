//! The EAL starts with and without hugepages and leaves nothing behind: no
//! runtime files under /var/run/dpdk and no hugepages held after exit.
//! `ferroce demo` must work on a machine with no hugepages configured.
#![cfg(feature = "dpdk")]

mod common;
use common::*;
use std::sync::Mutex;
use std::time::Duration;

/// The tests here change or depend on the machine's hugepage pool.
static MACHINE: Mutex<()> = Mutex::new(());

const RING_PORTS: &str =
    "[[port]]\nname = \"a\"\ndevice = \"ring:l\"\n[[port]]\nname = \"b\"\ndevice = \"ring:l\"\n";

#[test]
fn demo_runs_on_the_defaults_and_without_hugepages() {
    let _g = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let before = dpdk_runtime_dirs();
    let no_free_pages = meminfo("HugePages_Free:") == 0;
    let o = run(&["demo", "--count", "20000"], Duration::from_secs(120));
    let mut ours = vec![o.pid];
    assert!(o.ok(), "{}", o.all());
    assert!(
        o.stdout.contains("20000 verified at b") && o.stdout.contains("20000 verified at a"),
        "{}",
        o.all()
    );
    assert!(o.stdout.contains("8191 of 8191 mbufs free"), "{}", o.all());
    if no_free_pages {
        // The fallback is announced in one line.
        assert_eq!(
            o.stderr.matches("falling back to --no-huge").count(),
            1,
            "{}",
            o.all()
        );
    }
    // Forced off, whatever the machine has.
    let dir = TempDir::new();
    let cfg = dir.write(
        "off.toml",
        &format!("[eal]\nhugepages = \"off\"\n{RING_PORTS}"),
    );
    let o = run(
        &["demo", "--config", cfg.to_str().unwrap(), "--count", "5000"],
        Duration::from_secs(60),
    );
    ours.push(o.pid);
    assert!(o.ok() && o.stdout.contains("no hugepages"), "{}", o.all());
    assert_eq!(
        dpdk_dirs_left(&before, &ours),
        Vec::<String>::new(),
        "runtime files left under /var/run/dpdk"
    );
}

/// The EAL and the memory regions on hugepages the test reserves, and
/// every page given back. Fails, rather than passing on the fallback, when
/// the kernel cannot give it the pages.
#[test]
#[ignore = "needs root: reserves 128 hugepages (scripts/test.sh runs it as root)"]
fn eal_on_hugepages_gives_every_page_back() {
    assert!(is_root(), "needs root to reserve hugepages");
    let _g = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let before_dirs = dpdk_runtime_dirs();
    let total_before = read_u64("/proc/sys/vm/nr_hugepages");
    let pid;
    {
        let Some(_pages) = HugepageReservation::add(128) else {
            panic!(
                "the kernel could not reserve 128 more 2 MiB hugepages (/proc/sys/vm/nr_hugepages \
                 was {total_before}): this test shows nothing without them"
            );
        };
        let free_before = meminfo("HugePages_Free:");
        let dir = TempDir::new();
        let cfg = dir.write(
            "huge.toml",
            &format!("[eal]\nhugepages = \"on\"\nmemory_mb = 0\n{RING_PORTS}"),
        );
        // At the default log level, so that a fallback's line shows.
        let mut demo = std::process::Command::new(ferroce());
        demo.env("RUST_LOG", "info").args([
            "demo",
            "--config",
            cfg.to_str().unwrap(),
            "--count",
            "20000",
        ]);
        let o = spawn(&mut demo, Duration::from_secs(60)).wait();
        pid = o.pid;
        assert!(o.ok(), "{}", o.all());
        assert!(
            o.stdout.contains(", hugepages (") && !o.stderr.contains("falling back"),
            "the EAL did not run on hugepages:\n{}",
            o.all()
        );
        // The memory regions too (they fall back to normal pages, with a
        // line, when no hugepage is free).
        assert!(
            !o.stderr.contains("using normal pages"),
            "the memory regions were not on hugepages:\n{}",
            o.all()
        );
        assert_eq!(
            meminfo("HugePages_Free:"),
            free_before,
            "hugepages still held after exit"
        );
    }
    assert_eq!(
        read_u64("/proc/sys/vm/nr_hugepages"),
        total_before,
        "hugepage pool put back"
    );
    assert_eq!(
        dpdk_dirs_left(&before_dirs, &[pid]),
        Vec::<String>::new(),
        "runtime files left under /var/run/dpdk"
    );
}
