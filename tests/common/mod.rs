//! Helpers shared by the integration tests: running the `ferroce` binary with
//! a deadline, temporary configs, and resources (network namespaces,
//! hugepages) that are always given back, also when a test fails.

#![allow(dead_code)]

pub mod doc_tables;
pub mod frames;
pub mod lends;
pub mod oracle;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn ferroce() -> &'static str {
    env!("CARGO_BIN_EXE_ferroce")
}

/// Sets a sysctl of network namespace `ns` (its /proc/sys/net, without
/// procps' `sysctl`, which a minimal Debian lacks).
pub fn netns_sysctl(ns: &str, key: &str, value: &str) -> Result<(), String> {
    let st = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            r#"echo "$1" > "/proc/sys/$2""#,
            "-",
        ])
        .args([value, key])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("netns {ns}: /proc/sys/{key} = {value}: {st}"))
    }
}

/// Sends `signal` (e.g. "TERM") to process `pid`, with the shell's own
/// `kill` (procps' is not on a minimal Debian).
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -{signal} {pid}")])
        .stderr(Stdio::null())
        .status();
}

pub fn is_root() -> bool {
    // SAFETY-free check: /proc/self/status names the effective uid.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// A finished child: exit code, stdout, stderr.
#[derive(Debug)]
pub struct Output {
    /// The process's ID (e.g. in the name of its DPDK runtime directory).
    pub pid: u32,
    pub code: Option<i32>,
    /// How it ended: "exit N", "signal N" or "killed at the deadline".
    pub how: String,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    pub fn all(&self) -> String {
        format!(
            "{}\n--- stdout\n{}--- stderr\n{}",
            self.how, self.stdout, self.stderr
        )
    }
}

/// A child process that is killed (by its PID) if still running on drop.
/// Its stdout and stderr are read as they come, so that a test can wait
/// for a line (`wait_for`) while the process runs.
pub struct Running {
    child: Option<Child>,
    deadline: Instant,
    /// What the process wrote so far: (stdout, stderr), and the threads
    /// reading them (they end when the process closes its side).
    seen: Arc<Mutex<(Vec<u8>, Vec<u8>)>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

pub fn spawn(cmd: &mut Command, limit: Duration) -> Running {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let seen = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let read = |mut from: Box<dyn Read + Send>, err: bool| {
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if err { &mut s.1 } else { &mut s.0 }.extend_from_slice(&buf[..n]);
            }
        })
    };
    let readers = vec![
        read(Box::new(child.stdout.take().unwrap()), false),
        read(Box::new(child.stderr.take().unwrap()), true),
    ];
    Running {
        child: Some(child),
        deadline: Instant::now() + limit,
        seen,
        readers,
    }
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Whether the process has ended (its output is still to be read with
    /// `wait`).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.as_mut().unwrap().try_wait(), Ok(Some(_)))
    }

    /// Waits until the process has written a line with `text` on stdout
    /// or stderr, for at most `limit`, and returns what follows `text` on
    /// that line; an error saying what it wrote instead if it exits first
    /// or the time runs out (the process keeps running; drop it to kill
    /// it).
    pub fn wait_for(&mut self, text: &str, limit: Duration) -> Result<String, String> {
        let end = Instant::now() + limit;
        loop {
            let exited = self.has_exited();
            {
                let s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                let (out, err) = (String::from_utf8_lossy(&s.0), String::from_utf8_lossy(&s.1));
                let rest = |all: &str| {
                    let at = all.find(text)? + text.len();
                    let line = all[at..].split('\n').next()?;
                    // Only a whole line: the rest may still be coming.
                    all[at + line.len()..]
                        .starts_with('\n')
                        .then(|| line.to_string())
                };
                if let Some(r) = rest(&out).or_else(|| rest(&err)) {
                    return Ok(r);
                }
                if exited || Instant::now() >= end {
                    let why = if exited {
                        "exited".to_string()
                    } else {
                        format!("is still running after {limit:?}")
                    };
                    return Err(format!(
                        "waiting for {text:?}: the process {why} without writing it\n--- stdout\n{}--- stderr\n{}",
                        out, err
                    ));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the process exits or its deadline passes (then kills it).
    pub fn wait(mut self) -> Output {
        let mut child = self.child.take().unwrap();
        let pid = child.id();
        let (code, how) = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                use std::os::unix::process::ExitStatusExt;
                let how = match (st.code(), st.signal()) {
                    (Some(c), _) => format!("exit {c}"),
                    (None, Some(s)) => format!("signal {s}"),
                    _ => format!("{st}"),
                };
                break (st.code(), how);
            }
            if Instant::now() >= self.deadline {
                let _ = child.kill();
                let _ = child.wait();
                break (None, "killed at the deadline".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let (out, err) = std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        );
        Output {
            pid,
            code,
            how,
            stdout,
            stderr,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `ferroce ARGS` to completion within `limit`.
pub fn run(args: &[&str], limit: Duration) -> Output {
    spawn(Command::new(ferroce()).args(args), limit).wait()
}

/// A temporary directory holding config files.
pub struct TempDir(pub tempfile::TempDir);

impl TempDir {
    pub fn new() -> TempDir {
        TempDir(tempfile::tempdir().expect("tempdir"))
    }
    pub fn path(&self) -> &Path {
        self.0.path()
    }
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, text).expect("write config");
        p
    }
}

fn ip(args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2)")
}

pub fn ip_ok(args: &[&str]) {
    let o = ip(args);
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A config with one port `m` on net_memif (shared memory between two
/// processes through `socket`; `role` server or client), no hugepages.
pub fn memif_config(socket: &str, role: &str, ip: &str) -> String {
    format!(
        "[eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
         [[port]]\nname = \"m\"\ndevice = \"net_memif0,role={role},id=0,bsize=8192,socket={socket},socket-abstract=no\"\nip = \"{ip}\"\n"
    )
}

/// A config with one port `p` on net_af_packet over `veth0` (of a
/// [`VethPair`] namespace), no hugepages.
pub fn af_packet_config(ip: &str) -> String {
    format!(
        "[eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
         [[port]]\nname = \"p\"\n\
         device = \"net_af_packet0,iface=veth0,framesz=4352,blocksz=69632,framecnt=512,qdisc_bypass=1\"\n\
         ip = \"{ip}\"\n"
    )
}

/// Two network namespaces joined by a veth pair (`veth0` in each), removed on
/// drop (deleting a namespace deletes its end of the veth).
pub struct VethPair {
    pub ns: [String; 2],
}

impl VethPair {
    pub fn new(tag: &str, mtu: u16) -> VethPair {
        let pid = std::process::id();
        let ns = [format!("fr-{tag}-{pid}-a"), format!("fr-{tag}-{pid}-b")];
        let pair = VethPair { ns: ns.clone() };
        for n in &ns {
            ip_ok(&["netns", "add", n]);
        }
        let (va, vb) = (format!("fra{pid}"), format!("frb{pid}"));
        ip_ok(&[
            "link", "add", &va, "netns", &ns[0], "type", "veth", "peer", "name", &vb, "netns",
            &ns[1],
        ]);
        for (n, v) in ns.iter().zip([&va, &vb]) {
            ip_ok(&["-n", n, "link", "set", v, "name", "veth0"]);
            ip_ok(&[
                "-n",
                n,
                "link",
                "set",
                "veth0",
                "mtu",
                &mtu.to_string(),
                "up",
            ]);
            ip_ok(&["-n", n, "link", "set", "lo", "up"]);
            // No IPv6: keeps the kernel's neighbour discovery off the link.
            let _ = netns_sysctl(n, "net/ipv6/conf/veth0/disable_ipv6", "1");
        }
        pair
    }

    /// Gives each side's kernel an address on `veth0` (for a TCP
    /// exchange beside ferroce's own RoCE addresses on the same link).
    pub fn kernel_addrs(&self, addrs: [&str; 2]) {
        for (n, a) in self.ns.iter().zip(addrs) {
            ip_ok(&["-n", n, "addr", "add", a, "dev", "veth0"]);
        }
    }

    /// `ip netns exec NS ferroce ARGS`
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, side: usize, args: &[S]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[side], ferroce()])
            .args(args);
        c
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// The kernel's hugepage pool, set for a test and put back on drop.
pub struct HugepageReservation {
    before: u64,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

pub fn read_u64(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

pub fn meminfo(field: &str) -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl HugepageReservation {
    /// Adds `pages` 2 MiB pages to the pool; `None` if the kernel gave fewer.
    pub fn add(pages: u64) -> Option<HugepageReservation> {
        let before = read_u64(NR_HUGEPAGES);
        let r = HugepageReservation { before };
        std::fs::write(NR_HUGEPAGES, (before + pages).to_string()).ok()?;
        (read_u64(NR_HUGEPAGES) >= before + pages).then_some(r)
    }
}

impl Drop for HugepageReservation {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.before.to_string());
    }
}

/// The runtime directories under /var/run/dpdk made since `before` that
/// the processes `ours` may have left: other programs on the machine run
/// DPDK beside the test (another test run, the interop suite), and a
/// directory `ferroce-PID` (the prefix of a ferroce without hugepages) of
/// a process not in `ours` is theirs.
pub fn dpdk_dirs_left(before: &[String], ours: &[u32]) -> Vec<String> {
    dpdk_runtime_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .filter(
            |d| match d.strip_prefix("ferroce-").and_then(|p| p.parse().ok()) {
                Some(pid) => ours.contains(&pid),
                None => true,
            },
        )
        .collect()
}

/// The directories DPDK made under /var/run/dpdk (runtime files).
pub fn dpdk_runtime_dirs() -> Vec<String> {
    std::fs::read_dir("/var/run/dpdk")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The arguments of one end of `ferroce linktest`.
pub fn linktest_args(
    config: &Path,
    port: &str,
    role: &str,
    count: u64,
    payload: usize,
    extra: &[&str],
) -> Vec<String> {
    let mut v: Vec<String> = [
        "linktest",
        "--config",
        config.to_str().unwrap(),
        "--port",
        port,
        "--role",
        role,
    ]
    .map(String::from)
    .to_vec();
    v.extend([
        "--count".into(),
        count.to_string(),
        "--payload".into(),
        payload.to_string(),
    ]);
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// Runs a link test: the answerer first (it may have to set up the link),
/// then, once it says its port is open, the sender (which sends each probe
/// once: one sent to a port not yet open would be lost); both must exit 0
/// having verified all `count` probes. Either process still running when
/// this fails is killed.
pub fn linktest_pair(mut answerer: Command, mut sender: Command, count: u64, what: &str) {
    let mut a = spawn(&mut answerer, Duration::from_secs(90));
    if let Err(e) = a.wait_for(": ready", Duration::from_secs(30)) {
        panic!("{what}: the answerer never got ready: {e}");
    }
    let s = spawn(&mut sender, Duration::from_secs(90)).wait();
    let a = a.wait();
    assert!(s.ok(), "{what}: sender failed:\n{}", s.all());
    assert!(a.ok(), "{what}: answerer failed:\n{}", a.all());
    let want = format!("verified {count} mismatched 0");
    assert!(s.stdout.contains(&want), "{what}: sender:\n{}", s.all());
    assert!(a.stdout.contains(&want), "{what}: answerer:\n{}", a.all());
}
