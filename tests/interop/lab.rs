//! The lab: one Soft-RoCE guest (Linux `rdma_rxe` in QEMU) and a veth for
//! ferroce, on a bridge in a private network namespace.
//!
//! ```text
//!  netns ferroce-rxe-PID
//!    br0 198.18.0.1/24   the kernel's end: the tools' TCP exchange
//!     |-- tap0 ---- QEMU guest: eth0 198.18.0.2, rxe0 on it
//!     `-- fr0br ==veth== fr0   ferroce's port (net_af_packet), RoCE as
//!                              198.18.0.10; no kernel address on fr0
//! ```
//!
//! Everything the lab starts is a child of this process, started under
//! `setpriv --pdeathsig KILL` so that it cannot outlive a killed test run,
//! and stopped by its PID when the lab is dropped (also on a panic); the
//! namespace goes with its bridge, taps and veths. A lab left behind by a
//! run that was killed outright is cleared by the next one (its PIDs are
//! recorded in the run directory).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HOST_IP: &str = "198.18.0.1";
pub const GUEST_IP: &str = "198.18.0.2";
pub const FERROCE_IP: &str = "198.18.0.10";
/// The IPv6 addresses of the IPv6 cells (2001:2::/48, RFC 5180's
/// benchmarking range): the guest's eth0 and ferroce's GID 1.
pub const GUEST_IP6: &str = "2001:2::2";
pub const FERROCE_IP6: &str = "2001:2::10";
/// ferroce's end of the veth, and its other end on the bridge.
pub const VETH: &str = "fr0";
const VETH_BR: &str = "fr0br";
const TAP: &str = "tap0";
const GUEST_MAC: &str = "52:54:00:12:00:02";

pub type Result<T> = std::result::Result<T, String>;

/// Runs a command to completion; its stderr in the error.
pub fn sh(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Stops a child by its PID: SIGTERM, then SIGKILL after `grace`.
pub fn stop(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    crate::common::signal(child.id(), "TERM");
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub struct Lab {
    pub ns: String,
    /// Where the lab keeps its state (guest share, console, PIDs).
    dir: PathBuf,
    qemu: Option<Child>,
    pub guest: Guest,
    /// One in `every` RoCE frame is dropped on the bridge in each direction.
    loss: Option<u32>,
    ce: bool,
    /// The index of the guest's IPv6 GID (GUEST_IP6) in rxe0's table.
    pub guest_gid6: Option<u8>,
    /// The Ethernet MTU of every link now (bridge, tap, veth, guest).
    link_mtu: u16,
}

impl Lab {
    /// Boots the guest of `image` (scripts/rxe-guest.sh) with `mtu` on its
    /// link, and waits until its rxe device is up.
    pub fn start(image: &Path, dir: &Path, mtu: u16) -> Result<Lab> {
        clear_stale(dir);
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ns = format!("ferroce-rxe-{}", std::process::id());
        let share = dir.join("share");
        let _ = fs::remove_dir_all(&share);
        fs::create_dir_all(share.join("jobs")).map_err(|e| e.to_string())?;
        fs::write(dir.join("ns"), &ns).map_err(|e| e.to_string())?;
        let mut lab = Lab {
            ns: ns.clone(),
            dir: dir.to_path_buf(),
            qemu: None,
            guest: Guest {
                jobs: share.join("jobs"),
                next: std::cell::Cell::new(0),
            },
            loss: None,
            ce: false,
            guest_gid6: None,
            // Unknown until the first run sets it and reads back rxe0's
            // active_mtu (set_link_mtu).
            link_mtu: 0,
        };
        sh(Command::new("ip").args(["netns", "add", &ns]))?;
        // No IPv6 on the lab's links: only the tools' frames in captures.
        for key in ["all", "default"] {
            crate::common::netns_sysctl(&ns, &format!("net/ipv6/conf/{key}/disable_ipv6"), "1")?;
        }
        for line in [
            "ip link set lo up".to_string(),
            format!("ip link add br0 mtu {mtu} type bridge stp_state 0 forward_delay 0"),
            format!("ip addr add {HOST_IP}/24 dev br0"),
            "ip link set br0 up".into(),
            format!("ip tuntap add dev {TAP} mode tap"),
            format!("ip link set {TAP} mtu {mtu} master br0 up"),
            format!("ip link add {VETH} mtu {mtu} type veth peer name {VETH_BR} mtu {mtu}"),
            format!("ip link set {VETH_BR} master br0 up"),
            format!("ip link set {VETH} up"),
        ] {
            let args: Vec<&str> = line.split_whitespace().collect();
            sh(lab.in_ns(args[0]).args(&args[1..]))?;
        }
        let console = dir.join("console.log");
        let log = fs::File::create(dir.join("qemu.log")).map_err(|e| e.to_string())?;
        let mut q = Command::new("ip");
        q.args(["netns", "exec", &ns, "setpriv", "--pdeathsig", "KILL", "--"]);
        q.arg("qemu-system-x86_64");
        q.args(["-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "1024"]);
        q.args(["-nodefaults", "-display", "none", "-no-reboot"]);
        q.arg("-serial").arg(format!("file:{}", console.display()));
        q.arg("-kernel").arg(image.join("vmlinuz"));
        q.arg("-initrd").arg(image.join("initrd.gz"));
        q.arg("-append").arg(format!(
            "console=ttyS0 panic=-1 quiet ferroce.name=rxe1 ferroce.ip={GUEST_IP}/24 ferroce.mtu={mtu} ferroce.ip6={GUEST_IP6}/64"
        ));
        q.arg("-netdev")
            .arg(format!("tap,id=n0,ifname={TAP},script=no,downscript=no"));
        q.arg("-device")
            .arg(format!("virtio-net-pci,netdev=n0,mac={GUEST_MAC}"));
        q.arg("-virtfs").arg(format!(
            "local,path={},mount_tag=share,security_model=none,id=share",
            share.display()
        ));
        let child = q
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("qemu-system-x86_64: {e}"))?;
        fs::write(dir.join("qemu.pid"), child.id().to_string()).map_err(|e| e.to_string())?;
        lab.qemu = Some(child);
        let t = Instant::now();
        while !share.join("ready").exists() {
            if let Some(q) = &mut lab.qemu {
                if let Ok(Some(st)) = q.try_wait() {
                    return Err(format!(
                        "qemu ended ({st}) before the guest was ready: {}",
                        tail(&dir.join("qemu.log"), 10)
                    ));
                }
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!(
                    "the guest was not ready after 120 s; its console:\n{}",
                    tail(&console, 20)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "interop: guest up in {:.1} s: {}",
            t.elapsed().as_secs_f64(),
            fs::read_to_string(share.join("ready"))
                .unwrap_or_default()
                .trim()
        );
        lab.guest_gid6 = lab.find_gid(GUEST_IP6);
        Ok(lab)
    }

    /// The index of `ip`'s RoCE v2 GID in the guest's rxe0 table (sysfs
    /// writes GIDs as eight groups of four hex digits).
    fn find_gid(&self, ip: &str) -> Option<u8> {
        let want: std::net::Ipv6Addr = ip.parse().ok()?;
        let out = self.guest.run(
            "cd /sys/class/infiniband/rxe0/ports/1/gids && for i in *; do echo $i $(cat $i); done",
            Duration::from_secs(10),
        );
        let found = out.log.lines().find_map(|l| {
            let (i, g) = l.split_once(' ')?;
            (g.trim().parse::<std::net::Ipv6Addr>().ok()? == want).then(|| i.parse().ok())?
        });
        eprintln!("interop: the guest's GID {ip} is index {found:?}");
        found
    }

    /// A command run inside the lab's namespace.
    pub fn in_ns(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }

    /// Like `in_ns`, tethered to this process.
    pub fn in_ns_tethered(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.ns,
            "setpriv",
            "--pdeathsig",
            "KILL",
            "--",
        ]);
        c.arg(program);
        c
    }

    /// Drops RoCE frames (UDP port 4791) that the bridge forwards, in each
    /// direction with its own counters (an nftables bridge table): the
    /// (`every`/2)-th frame, so a short run sees a drop too, then each
    /// frame with probability 1/`every`. The drops are random, not one in
    /// every `every` frames: a strictly periodic drop falls in step with
    /// go-back-N (a window of about `every`/2 frames resent per loss puts
    /// the same packet under the drop again and again, until the sender's
    /// retries run out), which no real network does. `None` removes the
    /// rules. The count starts afresh each time.
    /// Sets the Ethernet MTU of every link (ferroce's veth, the bridge,
    /// the tap and the guest's eth0, whose rxe device follows it) and
    /// checks that rxe0's active MTU became `path_mtu`: RDMA-CM takes a
    /// connection's path MTU from the interface, not from the tools.
    pub fn set_link_mtu(&mut self, mtu: u16, path_mtu: u16) -> Result<()> {
        if mtu == self.link_mtu {
            return Ok(());
        }
        for dev in [VETH, VETH_BR, TAP, "br0"] {
            sh(self
                .in_ns("ip")
                .args(["link", "set", "dev", dev, "mtu", &mtu.to_string()]))?;
        }
        let out = self.guest.run(
            &format!("ip link set dev eth0 mtu {mtu} && ibv_devinfo -d rxe0 | grep active_mtu"),
            Duration::from_secs(20),
        );
        self.link_mtu = mtu;
        if !out.log.contains(&format!("{path_mtu} (")) {
            return Err(format!(
                "the guest's eth0 at MTU {mtu} did not give rxe0 active_mtu {path_mtu}: {}",
                out.log.trim()
            ));
        }
        Ok(())
    }

    /// Drops one RoCE frame in `every` each way (the `every / 2`-th, then
    /// at random); with `cm_drop`, also the first CM MAD of that
    /// attribute ferroce sends (a UD frame to QP1: BTH DestQP at bit 104
    /// of the UDP header, the MAD's AttributeID at bit 352).
    pub fn set_loss(&mut self, every: Option<u32>, cm_drop: Option<u16>) -> Result<()> {
        if self.loss.take().is_some() {
            sh(self
                .in_ns("nft")
                .args(["delete", "table", "bridge", "ferroce_loss"]))?;
        }
        let Some(n) = every else { return Ok(()) };
        let rule = |iif: &str| {
            format!(
                "iifname \"{iif}\" udp dport 4791 numgen inc mod 1000000000 == {} counter drop\n  \
                 iifname \"{iif}\" udp dport 4791 numgen random mod {n} == 0 counter drop",
                n / 2
            )
        };
        let cm = cm_drop.map_or(String::new(), |attr| {
            format!(
                "iifname \"{VETH_BR}\" udp dport 4791 @th,104,24 1 @th,352,16 {attr} \
                 numgen inc mod 1000000000 == 0 counter drop comment \"cm\"\n  "
            )
        });
        let table = format!(
            "table bridge ferroce_loss {{\n chain forward {{\n  type filter hook forward priority 0;\n  {cm}{}\n  {}\n }}\n}}\n",
            rule(VETH_BR),
            rule(TAP)
        );
        let path = self.dir.join("loss.nft");
        fs::write(&path, table).map_err(|e| e.to_string())?;
        sh(self.in_ns("nft").arg("-f").arg(&path))?;
        self.loss = Some(n);
        Ok(())
    }

    /// Sets (`on`) or stops setting CE in the IP header of every RoCE frame
    /// from the guest (an nftables bridge rule; it fixes the IPv4 header
    /// checksum, and the ICRC does not cover the ECN bits).
    pub fn set_ce_marking(&mut self, on: bool) -> Result<()> {
        if self.ce {
            sh(self
                .in_ns("nft")
                .args(["delete", "table", "bridge", "ferroce_ce"]))?;
            self.ce = false;
        }
        if !on {
            return Ok(());
        }
        let table = format!(
            "table bridge ferroce_ce {{\n chain forward {{\n  type filter hook forward priority -10;\n  \
             iifname \"{TAP}\" udp dport 4791 ip ecn set ce counter\n }}\n}}\n"
        );
        let path = self.dir.join("ce.nft");
        fs::write(&path, table).map_err(|e| e.to_string())?;
        sh(self.in_ns("nft").arg("-f").arg(&path))?;
        self.ce = true;
        Ok(())
    }

    /// Frames dropped so far (towards the guest, from the guest).
    pub fn drops(&self) -> Result<(u64, u64)> {
        if self.loss.is_none() {
            return Ok((0, 0));
        }
        let t = sh(self
            .in_ns("nft")
            .args(["list", "table", "bridge", "ferroce_loss"]))?;
        let count = |iif: &str| {
            t.lines()
                .filter(|l| l.contains(&format!("\"{iif}\"")))
                .filter_map(|l| l.split("packets ").nth(1))
                .filter_map(|s| s.split_whitespace().next())
                .filter_map(|s| s.parse::<u64>().ok())
                .sum()
        };
        Ok((count(VETH_BR), count(TAP)))
    }

    /// How many CM MADs the `cm_drop` rule of [`Lab::set_loss`] dropped.
    pub fn cm_drops(&self) -> Result<u64> {
        if self.loss.is_none() {
            return Ok(0);
        }
        let t = sh(self
            .in_ns("nft")
            .args(["list", "table", "bridge", "ferroce_loss"]))?;
        Ok(t.lines()
            .filter(|l| l.contains("comment \"cm\""))
            .filter_map(|l| l.split("packets ").nth(1))
            .filter_map(|s| s.split_whitespace().next())
            .filter_map(|s| s.parse::<u64>().ok())
            .sum())
    }

    /// Records every frame on ferroce's link, as the bridge sees it
    /// (tcpdump on the veth's bridge end: all ferroce sends, before any
    /// drop, and all the bridge hands it).
    pub fn capture(&self, path: &Path) -> Result<Capture> {
        let log = path.with_extension("tcpdump.log");
        let err = fs::File::create(&log).map_err(|e| e.to_string())?;
        let child = self
            .in_ns_tethered("tcpdump")
            // -Z root: tcpdump would otherwise switch to its own user, and a
            // change of user clears the parent-death signal that tethers it.
            .args(["-i", VETH_BR, "-n", "-s", "0", "-B", "65536", "-Z", "root"])
            .args(["--immediate-mode", "-U", "-w"])
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("tcpdump: {e}"))?;
        // tcpdump says "listening on" once its socket is bound.
        let t = Instant::now();
        while !fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening on")
        {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(format!("tcpdump did not start: {}", tail(&log, 5)));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Capture { child, log })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(q) = &mut self.qemu {
            stop(q, Duration::from_secs(3));
        }
        let _ = fs::remove_file(self.dir.join("qemu.pid"));
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.ns])
            .status();
        let _ = fs::remove_file(self.dir.join("ns"));
    }
}

/// Stops the QEMU and removes the namespace of a lab whose run was killed
/// before it could (the PID is checked to still be that QEMU).
fn clear_stale(dir: &Path) {
    if let Ok(pid) = fs::read_to_string(dir.join("qemu.pid")) {
        let pid = pid.trim();
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("qemu-system") && cmdline.contains(&*dir.to_string_lossy()) {
            eprintln!("interop: stopping the guest of an earlier run (pid {pid})");
            if let Ok(pid) = pid.parse() {
                crate::common::signal(pid, "KILL");
            }
        }
        let _ = fs::remove_file(dir.join("qemu.pid"));
    }
    if let Ok(ns) = fs::read_to_string(dir.join("ns")) {
        let _ = Command::new("ip")
            .args(["netns", "delete", ns.trim()])
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_file(dir.join("ns"));
    }
}

pub struct Capture {
    child: Child,
    log: PathBuf,
}

impl Capture {
    /// Stops tcpdump (it writes out what it has on SIGTERM) and returns
    /// the frames its socket lost ("N packets dropped by kernel", the
    /// socket's PACKET_STATISTICS), which the capture does not hold.
    pub fn finish(mut self) -> u64 {
        // Let the last frames reach the socket first.
        std::thread::sleep(Duration::from_millis(100));
        stop(&mut self.child, Duration::from_secs(5));
        capture_dropped(&fs::read_to_string(&self.log).unwrap_or_default())
    }
}

/// The count on tcpdump's "N packets dropped by kernel" line (0 without
/// one).
fn capture_dropped(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.trim().strip_suffix(" packets dropped by kernel"))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

impl Drop for Capture {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(1));
    }
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    last_lines(&fs::read_to_string(path).unwrap_or_default(), n)
}

/// The last `n` lines of `s`.
pub fn last_lines(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// Runs shell scripts in the guest through its 9p share (see
/// tests/interop/guest-init.sh).
pub struct Guest {
    jobs: PathBuf,
    next: std::cell::Cell<u32>,
}

/// A finished guest job.
pub struct JobOut {
    /// Its exit status; None if it did not end in time.
    pub code: Option<i32>,
    pub log: String,
}

impl JobOut {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

pub struct Job {
    base: PathBuf,
}

impl Guest {
    /// Starts `script` in the guest. It runs as `sh /share/jobs/ID.taken`,
    /// so `${0%.taken}.NAME` names a file the host reads with Job::file.
    pub fn spawn(&self, script: &str) -> Job {
        let id = self.next.get();
        self.next.set(id + 1);
        let base = self.jobs.join(format!("j{id}"));
        let part = base.with_extension("part");
        fs::write(&part, script).expect("writing a guest job");
        fs::rename(&part, base.with_extension("job")).expect("handing over a guest job");
        Job { base }
    }

    pub fn run(&self, script: &str, limit: Duration) -> JobOut {
        self.spawn(script).wait(limit)
    }
}

impl Job {
    /// Waits for the job's end, at most `limit`.
    pub fn wait(&self, limit: Duration) -> JobOut {
        let exit = self.base.with_extension("exit");
        let t = Instant::now();
        while !exit.exists() && t.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = fs::read_to_string(self.base.with_extension("log")).unwrap_or_default();
        let code = fs::read_to_string(&exit)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        JobOut { code, log }
    }

    /// A file the job wrote next to its log (`$JOB.NAME` in its script).
    pub fn file(&self, name: &str) -> String {
        fs::read_to_string(self.base.with_extension(name)).unwrap_or_default()
    }
}
