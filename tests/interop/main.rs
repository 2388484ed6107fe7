//! The interop suite: ferroce's tools against Linux Soft-RoCE (`rdma_rxe`)
//! and rdma-core's / perftest's tools in a QEMU guest, each in both roles,
//! at path MTU 1024 and 4096, with and without frames dropped on the bridge.
//!
//! `cargo test --release --test interop [-- FILTER...] [--list]`
//!
//! Needs root (network namespace, tap, QEMU), the guest image
//! (scripts/rxe-guest.sh builds it; this test calls it) and the packages
//! scripts/setup.sh installs. Set FERROCE_INTEROP=skip to skip it.
//!
//! Each run leaves its files in target/interop/runs/CELL.SIZE/: both tools'
//! output, the rxe hw_counters deltas, and the frames on ferroce's link
//! (frames.pcap, gzipped once it passed), checked with `ferroce decode`.
//! target/interop/results.md is the table of the cells that ran.

mod capture;
#[path = "../common/mod.rs"]
mod common;
mod lab;
mod matrix;

use lab::{last_lines, sh, Lab};
use matrix::{Cell, Role, Tool, Variant};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The guest's link MTU: path MTU 4096 needs jumbo frames; the tools pick
/// the path MTU (-m) per run.
const LINK_MTU: u16 = 9000;
/// The perftest / rc_pingpong TCP port.
const TCP_PORT: u16 = 18515;

fn main() -> ExitCode {
    let mut filters = Vec::new();
    let mut list = false;
    let mut write_docs = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--list" => list = true,
            "--write-docs" => write_docs = true,
            // libtest's options that cargo passes on (--test-threads, -q).
            s if s.starts_with('-') => {}
            s => filters.push(s.to_string()),
        }
    }
    let cells: Vec<Cell> = Cell::all()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.id().contains(f.as_str())))
        .collect();
    if list {
        for c in &cells {
            println!("{}: test", c.id());
        }
        return ExitCode::SUCCESS;
    }
    // The capture checks on captures whose truth is known, first.
    if let Err(e) =
        capture::self_test(&root().join("tests/vectors")).and_then(|()| rping_self_test())
    {
        println!("interop: FAILED: {e}");
        return ExitCode::FAILURE;
    }
    if std::env::var("FERROCE_INTEROP").as_deref() == Ok("skip") {
        println!("interop: skipped (FERROCE_INTEROP=skip)");
        return ExitCode::SUCCESS;
    }
    if !common::is_root() {
        println!("interop: skipped: needs root (network namespace, tap, QEMU)");
        return ExitCode::SUCCESS;
    }
    for p in ["qemu-system-x86_64", "setpriv", "nft", "tcpdump"] {
        if sh(Command::new("sh").args(["-c", &format!("command -v {p}")])).is_err() {
            println!("interop: FAILED: {p} is missing; scripts/setup.sh installs it");
            return ExitCode::FAILURE;
        }
    }
    let docs = (write_docs && filters.is_empty()).then(|| root().join("docs/interop.md"));
    if write_docs && docs.is_none() {
        println!("interop: --write-docs needs the whole matrix (no filter)");
        return ExitCode::FAILURE;
    }
    match run(&cells, docs.as_deref()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            println!("interop: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What came of one cell.
struct Outcome {
    cell: Cell,
    /// The variants run, and the first failure.
    ran: Vec<Variant>,
    failure: Option<String>,
    secs: f64,
    /// Frames the bridge dropped (towards rxe, from rxe).
    drops: (u64, u64),
    /// Frames ferroce's host lost before its transport saw them.
    host_drops: u64,
    /// Runs made again, and why.
    reruns: Vec<String>,
}

fn run(cells: &[Cell], docs: Option<&Path>) -> Result<bool, String> {
    let t0 = Instant::now();
    let image = root().join("target/rxe-guest");
    sh(Command::new(root().join("scripts/rxe-guest.sh")).arg(&image))
        .map_err(|e| format!("building the guest image: {e}"))?;
    let out = root().join("target/interop");
    let runs = out.join("runs");
    let _ = fs::remove_dir_all(&runs);
    fs::create_dir_all(&runs).map_err(|e| e.to_string())?;
    let config = out.join("ferroce.toml");
    fs::write(&config, ferroce_config()).map_err(|e| e.to_string())?;
    let mut lab = Lab::start(&image, &out.join("lab"), LINK_MTU)?;
    println!("\nrunning {} interop cells", cells.len());
    let mut outcomes = Vec::new();
    for cell in cells {
        let t = Instant::now();
        let mut o = Outcome {
            cell: *cell,
            ran: Vec::new(),
            failure: None,
            secs: 0.0,
            drops: (0, 0),
            host_drops: 0,
            reruns: Vec::new(),
        };
        for v in cell.variants() {
            o.ran.push(v);
            let dir = runs.join(format!("{}.{v}", cell.slug()));
            let mut result = run_one(&mut lab, cell, v, &config, &dir);
            // What the loss rule dropped in this run (read before the
            // next run resets it).
            let run_drops = lab.drops().unwrap_or((1, 1));
            if let Some(why) = result
                .as_ref()
                .err()
                .and_then(|f| not_ours(cell, v, f, &dir, run_drops))
            {
                // A failure that says nothing of either transport: run it
                // again, once, and say so (here and in the table).
                println!("  {} {v}: {why}; running it again", cell.id());
                o.reruns.push(format!("{v}: {why}"));
                // In a new guest: a stalled rxe can stay stalled after its
                // tool is killed (seen: the next ib_send_lat hung before
                // connecting).
                drop(lab);
                lab = Lab::start(&image, &out.join("lab"), LINK_MTU)?;
                result = run_one(&mut lab, cell, v, &config, &dir);
            }
            match result {
                Ok(r) => {
                    o.drops.0 += r.drops.0;
                    o.drops.1 += r.drops.1;
                    o.host_drops += r.host_drops;
                }
                Err(f) => {
                    o.failure = Some(format!(
                        "{} {v}: step {}: {}\n    files: {}",
                        cell.id(),
                        f.step,
                        f.detail,
                        dir.display()
                    ));
                    // A new guest: a peer left running would hold the TCP
                    // port, and an rxe QP can outlive its killed process
                    // and go on resending (seen: 20 s of one message's
                    // resends), which would be in the next cells' captures.
                    drop(lab);
                    lab = Lab::start(&image, &out.join("lab"), LINK_MTU)?;
                    break;
                }
            }
        }
        let (to_rxe, from_rxe) = cell.data_directions();
        if o.failure.is_none()
            && cell.loss.is_some()
            && ((to_rxe && o.drops.0 == 0) || (from_rxe && o.drops.1 == 0))
        {
            o.failure = Some(format!(
                "{}: step loss: the bridge dropped {} frames towards rxe and {} from it; each direction that \
                 carries data must lose some",
                cell.id(),
                o.drops.0,
                o.drops.1
            ));
        }
        o.secs = t.elapsed().as_secs_f64();
        let sizes: Vec<String> = o.ran.iter().map(|v| v.to_string()).collect();
        println!(
            "test interop {} [{}] ... {} ({:.1} s{})",
            cell.id(),
            sizes.join(" "),
            if o.failure.is_none() { "ok" } else { "FAILED" },
            o.secs,
            if cell.loss.is_some() {
                format!(", dropped {} / {}", o.drops.0, o.drops.1)
            } else {
                String::new()
            } + &if o.host_drops > 0 {
                format!(", {} lost on ferroce's host", o.host_drops)
            } else {
                String::new()
            } + &if o.reruns.is_empty() {
                String::new()
            } else {
                format!(", {} rerun", o.reruns.len())
            }
        );
        outcomes.push(o);
    }
    drop(lab);
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.failure.is_some()).collect();
    let table = results_table(&outcomes);
    fs::write(out.join("results.md"), &table).map_err(|e| e.to_string())?;
    if let (Some(docs), true) = (docs, failed.is_empty()) {
        write_docs(docs, &table)?;
        println!("interop: the table in {} is this run's", docs.display());
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for o in &failed {
            println!("  {}", o.failure.as_deref().unwrap_or(""));
        }
    }
    println!(
        "\ninterop: {} passed, {} failed, in {:.0} s; table in {}",
        outcomes.len() - failed.len(),
        failed.len(),
        t0.elapsed().as_secs_f64(),
        out.join("results.md").display()
    );
    Ok(failed.is_empty())
}

/// ferroce's config: the veth into the bridge through net_af_packet.
/// Its ring slots fit a path-MTU-4096 frame (see configs/af-packet.toml).
fn ferroce_config() -> String {
    format!(
        "# Written by tests/interop: ferroce's end of the veth into the rxe guest's bridge.\n\
         [eal]\nhugepages = \"off\"\nmemory_mb = 256\n\n\
         [[port]]\nname = \"p\"\n\
         device = \"net_af_packet0,iface={},framesz=4352,blocksz=69632,framecnt=512,qdisc_bypass=1\"\n\
         ip = \"{}\"\ngids = [\"{}\"]\n",
        lab::VETH,
        lab::FERROCE_IP,
        lab::FERROCE_IP6
    )
}

struct Failure {
    step: &'static str,
    detail: String,
}

fn fail(step: &'static str, detail: impl Into<String>) -> Failure {
    Failure {
        step,
        detail: detail.into(),
    }
}

/// Starts ferroce in the lab's namespace, killed at `limit` or when
/// dropped (tests/common's Running).
fn spawn_ferroce(lab: &Lab, args: &[String], limit: Duration) -> common::Running {
    common::spawn(
        lab.in_ns_tethered(common::ferroce())
            .args(args)
            .stdin(Stdio::null()),
        limit,
    )
}

/// Waits until ferroce listens on the tools' TCP port (in its namespace),
/// or for an RDMA-CM tool, until it says it listens.
fn wait_listening(
    mut f: common::Running,
    rdma_cm: bool,
    limit: Duration,
    out: &Path,
) -> Result<common::Running, Failure> {
    if rdma_cm {
        return match f.wait_for("listening on RDMA-CM port", limit) {
            Ok(_) => Ok(f),
            Err(e) => {
                let o = f.wait();
                let _ = fs::write(out, o.all());
                Err(fail("ferroce listen", e))
            }
        };
    }
    let want = format!(":{TCP_PORT:04X} ");
    let t = Instant::now();
    loop {
        let tcp = fs::read_to_string(format!("/proc/{}/net/tcp", f.pid())).unwrap_or_default();
        if tcp
            .lines()
            .any(|l| l.split_whitespace().nth(3) == Some("0A") && l.contains(&want))
        {
            return Ok(f);
        }
        if f.has_exited() {
            let o = f.wait();
            let _ = fs::write(out, o.all());
            return Err(fail(
                "ferroce listen",
                format!(
                    "ferroce ended ({}) before listening:\n{}",
                    o.how,
                    last_lines(&o.all(), 15)
                ),
            ));
        }
        if t.elapsed() > limit {
            return Err(fail("ferroce listen", "not listening after 20 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The guest job of a run: the tool between two readings of rxe's
/// hw_counters (written next to the job's log).
fn peer_job(cmd: &str) -> String {
    format!(
        "J=${{0%.taken}}\n\
         C=/sys/class/infiniband/rxe0/ports/1/hw_counters\n\
         for f in $C/*; do echo \"${{f##*/}} $(cat $f)\"; done > $J.before\n\
         {cmd}\n\
         rc=$?\n\
         for f in $C/*; do echo \"${{f##*/}} $(cat $f)\"; done > $J.after\n\
         exit $rc\n"
    )
}

fn counter_delta(before: &str, after: &str) -> Vec<(String, i64)> {
    let parse = |s: &str| -> Vec<(String, i64)> {
        s.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    };
    let b = parse(before);
    parse(after)
        .into_iter()
        .map(|(k, a)| {
            let was = b
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| *v)
                .unwrap_or(0);
            (k, a - was)
        })
        .collect()
}

/// Why a failed run says nothing of either transport, if the evidence
/// shows it; `None` (no rerun) otherwise:
/// - the peer's perftest tool gave up on its report because it could not
///   calibrate its cycle counter under emulation (`get_cpu_mhz()`, then
///   "Can't produce a report"), after ferroce's end had passed all its
///   own checks (the failing step is the peer's exit, or ferroce's next
///   exchange finding the peer gone) and the capture's story is clean;
/// - without loss, rxe counted only duplicates, ferroce counted ACK
///   timeouts, and the capture shows every resend of ferroce's came a full
///   ACK timeout after the first sending with nothing from rxe
///   acknowledging it in between: the emulated guest stalled. A resend
///   sooner, or after an acknowledgement, is ferroce's bug and fails;
/// - the same stall in any run that ferroce ended with its retries
///   exhausted: a loss cell's rule would have had to take seven sends of
///   one PSN, or seven of rxe's answers, in a row (1 in 200^7);
/// - ferroce gave up waiting for the peer (its data or its next control
///   message) while the capture's story is clean: every request of both
///   ends acknowledged, nothing refused, so nothing was owed to the peer;
///   or while the capture ends in the middle of the peer's requests, the
///   unacknowledged ones in sequence right after ferroce's last ACK, none
///   with AckReq, none sent again: ferroce owed nothing, and the peer
///   neither went on nor let its ACK timer resend (or the same of the
///   peer's go-back after ferroce's NAK of a lost packet);
/// - in a loss cell of ibv_rc_pingpong, which has no closing handshake,
///   the loss rule dropped something, the peer finished every iteration
///   (so it received ferroce's last message) and exited, and ferroce ran
///   out of retries on exactly that last message, never acknowledged: its
///   ACK was lost and the peer's QP was gone before ferroce's resend
///   (ibv_rc_pingpong fails the same way on a lossy link); or the mirror,
///   ferroce finished every iteration and the peer ran out of retries on
///   its own last message, which the capture shows ferroce acknowledged
///   before the peer sent it again;
/// - the CM MAD a loss cell drops (ferroce's DREP to the peer's DREQ) was
///   never sent because the random loss had already taken the peer's DREQ:
///   the capture shows no DREQ of the peer's and one of ferroce's, so the
///   teardown went the other way round and the cell's drop had nothing to
///   take;
/// - rping on the guest finished every ping, was told the connection was
///   down, and then exited 255 on its own CM thread's
///   `rdma_get_cm_event: Bad file descriptor`: that thread still reads
///   the event channel that rping's main thread closes as it exits, and
///   whichever ends first decides the exit code ([`rping_raced_exit`]);
///   ferroce's end had passed (the failing step is the peer's exit).
fn not_ours(
    cell: &Cell,
    v: Variant,
    f: &Failure,
    dir: &Path,
    run_drops: (u64, u64),
) -> Option<String> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
    if cell.tool == Tool::Rping
        && f.step == "peer"
        && rping_raced_exit(&read("peer.out"), cell.iters(v))
    {
        return Some(
            "rping finished every ping and its disconnect, then its CM thread read the event channel rping was closing (EBADF, exit 255)".into(),
        );
    }
    // ferroce then finds the peer gone at its next exchange: closed, or
    // reset (perftest exits with ferroce's message unread in its socket).
    let ours_done = f.step == "peer"
        || (f.step == "ferroce"
            && (f.detail.contains("the peer closed the TCP connection")
                || f.detail.contains("Connection reset by peer")));
    if ours_done && read("peer.out").contains("Can't produce a report") {
        return match explain_clean(&dir.join("frames.pcap")) {
            Ok(()) => {
                Some("perftest on rxe could not calibrate its clock after a clean transfer".into())
            }
            Err(e) => {
                println!("  {}: no rerun: {e}", cell.id());
                None
            }
        };
    }
    // ferroce waited for the peer, and the capture shows every request of
    // either end acknowledged and none refused: the peer's tool sent
    // nothing more (rxe or the emulated guest stalled). Or it ends in the
    // middle of the peer's requests, none asking for an ACK and none sent
    // again: rxe's requester stopped and its ACK timer never fired (seen
    // once in some 400 runs, 1 MiB SENDs under CE marks, ibv_rc_pingpong
    // hung with it). A request of rxe's left unanswered, or one of ours,
    // shows in the story and fails.
    let waited_on_peer = f.step == "ferroce"
        && (f.detail.contains("(nothing happened for ")
            || f.detail.contains("no message from the peer in ")
            || f.detail.contains("timed out after "));
    if waited_on_peer {
        let pcap = dir.join("frames.pcap");
        return match explain_clean(&pcap) {
            Ok(()) => Some(
                "the peer sent nothing more with every request acknowledged (clean capture)".into(),
            ),
            Err(e) => match capture::peer_stopped_unasked(&pcap, ferroce_ip(cell)) {
                Ok(n) => Some(format!(
                    "rxe stopped {n} packets into its requests, none asking for an ACK, and never sent them again"
                )),
                Err(why) => {
                    println!("  {}: no rerun: {why}; {e}", cell.id());
                    None
                }
            },
        };
    }
    if f.step == "loss" && f.detail.contains("dropped 0 times") && run_drops != (0, 0) {
        let ip = ferroce_ip(cell);
        return match capture::dreqs(&dir.join("frames.pcap"), ip) {
            Ok((0, ours)) if ours > 0 => Some(
                "the random loss took the peer's DREQ, so ferroce disconnected first and sent no DREP to drop".into(),
            ),
            Ok((theirs, ours)) => {
                println!(
                    "  {}: no rerun: {theirs} DREQs of the peer's, {ours} of ferroce's",
                    cell.id()
                );
                None
            }
            Err(e) => {
                println!("  {}: no rerun: {e}", cell.id());
                None
            }
        };
    }
    let last_ack_lost = cell.tool == Tool::Pingpong
        && cell.loss.is_some()
        && run_drops != (0, 0)
        && f.step == "ferroce"
        && f.detail.contains("transport retry counter exceeded")
        && read("peer.out").contains(" iters in ");
    if last_ack_lost {
        let ip = ferroce_ip(cell);
        return match capture::unacked_only_last_message(&dir.join("frames.pcap"), ip) {
            Ok(n) => Some(format!(
                "the ACK of ferroce's last message ({n} packets) was lost after ibv_rc_pingpong had finished"
            )),
            Err(e) => {
                println!("  {}: no rerun: {e}", cell.id());
                None
            }
        };
    }
    let peers_last_ack_lost = cell.tool == Tool::Pingpong
        && cell.loss.is_some()
        && run_drops != (0, 0)
        && f.step == "peer"
        && read("peer.out").contains("transport retry counter exceeded")
        && read("ferroce.out").contains(" iters in ");
    if peers_last_ack_lost {
        let ip = ferroce_ip(cell);
        return match capture::peer_resent_acked_last_message(&dir.join("frames.pcap"), ip) {
            Ok(n) => Some(format!(
                "ferroce's ACK of ibv_rc_pingpong's last message was lost after ferroce had finished ({n} resends after it)"
            )),
            Err(e) => {
                println!("  {}: no rerun: {e}", cell.id());
                None
            }
        };
    }
    let no_loss_stall = cell.loss.is_none()
        && f.step == "rxe counters"
        && f.detail.contains("duplicate_request")
        && f.detail.matches('+').count() == 1
        && read("ferroce.out").contains("local_ack_timeout_err=");
    // ferroce gave up on a request rxe never answered: with or without
    // the loss rule (which would have had to drop seven sends of one PSN,
    // or rxe's answers to them, in a row), a guest that went silent.
    let retry_stall = f.step == "ferroce" && f.detail.contains("transport retry counter exceeded");
    if no_loss_stall || retry_stall {
        let ip = ferroce_ip(cell);
        return match capture::resends_waited(&dir.join("frames.pcap"), ip, cell.ack_timeout_ns()) {
            Ok(n) if n > 0 => Some(format!(
                "the guest stalled: ferroce resent {n} requests, each a full ACK timeout after the first with rxe silent"
            )),
            Ok(_) => None,
            Err(e) => {
                println!("  {}: no rerun: {e}", cell.id());
                None
            }
        };
    }
    None
}

/// Whether rping's output `out` shows `count` pings done, the connection
/// torn down ("DISCONNECT EVENT..."), and only after that its CM thread's
/// `rdma_get_cm_event` failing on the closed channel. Its stdout and
/// stderr share one stream, so the lines may interleave mid-line.
fn rping_raced_exit(out: &str, count: u32) -> bool {
    let last = format!("ping data: rdma-ping-{}: ", count.saturating_sub(1));
    let server_last = format!("server {last}");
    let (Some(down), Some(ebadf)) = (
        out.find("DISCONNECT EVENT..."),
        out.rfind("rdma_get_cm_event: Bad file descriptor"),
    ) else {
        return false;
    };
    count > 0
        && down < ebadf
        && out
            .lines()
            .any(|l| l.starts_with(&last) || l.starts_with(&server_last))
}

/// [`rping_raced_exit`] on outputs whose truth is known: the one seen in
/// a check of the whole suite (shortened), and that output with a ping
/// missing, with the failure before the disconnect, and without it.
fn rping_self_test() -> Result<(), String> {
    let raced = "ping data: rdma-ping-0: ABCD\nping data: rdma-ping-1: BCDExyzclient DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\nFGHIJ\n";
    let cases = [
        (raced, 2, true),
        (raced, 3, false),
        ("ping data: rdma-ping-0: A\nrdma_get_cm_event: Bad file descriptor\nclient DISCONNECT EVENT...\n", 1, false),
        ("ping data: rdma-ping-0: A\nclient DISCONNECT EVENT...\n", 1, false),
        ("server ping data: rdma-ping-0: A\nserver DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\n", 1, true),
    ];
    for (i, (out, count, want)) in cases.into_iter().enumerate() {
        if rping_raced_exit(out, count) != want {
            return Err(format!(
                "rping exit self-test: case {i} ({count} pings) should be {want}"
            ));
        }
    }
    Ok(())
}

/// `ferroce explain` of a run's capture: every request acknowledged, no
/// error; its story otherwise.
fn explain_clean(pcap: &Path) -> Result<(), String> {
    let out = Command::new(common::ferroce())
        .arg("explain")
        .arg(pcap)
        .output()
        .map_err(|e| e.to_string())?;
    let story = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = fs::write(pcap.with_extension("explain.txt"), &story);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the capture's story is not clean:\n{}",
            last_lines(&story, 6)
        ))
    }
}

/// ferroce's address and the guest's in `cell` (their GIDs').
fn addresses(cell: &Cell) -> (std::net::IpAddr, std::net::IpAddr) {
    let (ours, guest) = if cell.ipv6 {
        (lab::FERROCE_IP6, lab::GUEST_IP6)
    } else {
        (lab::FERROCE_IP, lab::GUEST_IP)
    };
    (
        ours.parse().expect("an address"),
        guest.parse().expect("an address"),
    )
}

/// ferroce's address in the cell's captures.
fn ferroce_ip(cell: &Cell) -> std::net::IpAddr {
    addresses(cell).0
}

/// What a passing run counted.
struct RunFacts {
    /// Frames the bridge dropped (towards rxe, from rxe).
    drops: (u64, u64),
    /// Frames ferroce's host lost before its transport saw them.
    host_drops: u64,
}

/// The frames ferroce's `--stats` line `host:` says its host lost.
fn host_drops(ours: &str) -> u64 {
    ours.lines()
        .filter(|l| l.trim_start().starts_with("host:"))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| w.split_once('=')?.1.parse::<u64>().ok())
        .sum()
}

/// The path MTU ferroce's port carries, from its `--stats` line
/// (`port: mtu 1500, frames up to 1518 B, path MTU up to 1024 (...)`).
fn port_mtu(out: &str) -> Option<u32> {
    let l = out.lines().find(|l| l.trim_start().starts_with("port: "))?;
    let (_, rest) = l.split_once("path MTU up to ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// perftest's banner line ` Mtu             : 4096[B]`: the path MTU the
/// tool connected with.
fn printed_mtu(out: &str) -> Option<u32> {
    out.lines()
        .find(|l| l.trim_start().starts_with("Mtu "))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().trim_end_matches("[B]").parse().ok())
}

/// One run: both tools, the capture, and every check. Returns the frames
/// dropped (towards rxe, from rxe).
fn run_one(
    lab: &mut Lab,
    cell: &Cell,
    v: Variant,
    config: &Path,
    dir: &Path,
) -> Result<RunFacts, Failure> {
    fs::create_dir_all(dir).map_err(|e| fail("setup", e.to_string()))?;
    let config = config.to_string_lossy().into_owned();
    // RDMA-CM tools get the cell's path MTU from the links' MTU, and a UD
    // cell's MTU is both ports' (ferroce's follows its interface's MTU,
    // rxe0's active_mtu the guest's eth0, which set_link_mtu checks).
    let (link, path) = match (cell.uses_rdma_cm() || cell.tool.is_ud(), cell.mtu) {
        (true, 256..=1024) => (1500, 1024),
        (true, 2048) => (3000, 2048),
        _ => (LINK_MTU, 4096),
    };
    lab.set_link_mtu(link, path)
        .map_err(|e| fail("link mtu", e))?;
    lab.set_loss(cell.loss, cell.cm_drop())
        .map_err(|e| fail("loss rule", e))?;
    lab.set_ce_marking(cell.ce)
        .map_err(|e| fail("ce rule", e))?;
    let pcap = dir.join("frames.pcap");
    let capture = lab.capture(&pcap).map_err(|e| fail("capture", e))?;
    let limit = Duration::from_millis(cell.limit_ms(v) + 10_000);
    let gid = match (cell.ipv6, lab.guest_gid6) {
        (false, _) => 1,
        (true, Some(g)) => g,
        (true, None) => {
            return Err(fail(
                "setup",
                format!("the guest has no GID {}", lab::GUEST_IP6),
            ))
        }
    };
    let ferroce_out = dir.join("ferroce.out");
    let (ferroce, job) = match cell.role {
        Role::FerroceServer => {
            let f = spawn_ferroce(lab, &cell.ferroce_args(v, &config, None), limit);
            let f = wait_listening(
                f,
                cell.uses_rdma_cm(),
                Duration::from_secs(20),
                &ferroce_out,
            )?;
            // The TCP exchanges reach ferroce's namespace at the bridge's
            // address; RDMA-CM reaches ferroce's own GID.
            let at = if cell.uses_rdma_cm() {
                lab::FERROCE_IP
            } else {
                lab::HOST_IP
            };
            let job = lab
                .guest
                .spawn(&peer_job(&cell.peer_command(v, Some(at), gid)));
            (f, job)
        }
        Role::FerroceClient => {
            let job = lab.guest.spawn(&peer_job(&cell.peer_command(v, None, gid)));
            // Our client tries again until the guest's server listens.
            let args = cell.ferroce_args(v, &config, Some(lab::GUEST_IP));
            (spawn_ferroce(lab, &args, limit), job)
        }
    };
    let ours = ferroce.wait();
    fs::write(&ferroce_out, ours.all()).map_err(|e| fail("setup", e.to_string()))?;
    let ours = if ours.ok() {
        Ok(ours.stdout)
    } else {
        Err(fail(
            "ferroce",
            format!("ferroce {}:\n{}", ours.how, last_lines(&ours.all(), 15)),
        ))
    };
    let peer = job.wait(if ours.is_ok() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(5)
    });
    let capture_dropped = capture.finish();
    // Saved before any check, so that a failure leaves the peer's side too.
    fs::write(dir.join("peer.out"), &peer.log).map_err(|e| fail("setup", e.to_string()))?;
    let drops = lab.drops().map_err(|e| fail("loss rule", e))?;
    let cm_drops = lab.cm_drops().map_err(|e| fail("loss rule", e))?;
    // (ferroce's own failure, if any, says more and comes first.)
    if ours.is_ok() && cell.cm_drop().is_some() && cm_drops != 1 {
        return Err(fail(
            "loss",
            format!("the CM MAD to drop was dropped {cm_drops} times, not once"),
        ));
    }
    // A failure of ferroce's says what the peer and the capture saw too:
    // the run's files stay on the machine that ran it.
    let ours = ours.map_err(|mut f| {
        let kernel = lab.guest.run("dmesg | tail -n 6", Duration::from_secs(10));
        f.detail += &format!(
            "\n--- the guest's kernel, last lines:\n{}\n--- {} ({}):\n{}\n--- the capture's story (ferroce explain):\n{}",
            kernel.log.trim_end(),
            cell.tool.peer(),
            match peer.code {
                Some(c) => format!("exit {c}"),
                None => "did not end".into(),
            },
            last_lines(&peer.log, 8),
            match explain_clean(&pcap) {
                Ok(()) => "every request acknowledged, no error".into(),
                Err(e) => e,
            }
        );
        f
    })?;
    if !peer.ok() {
        return Err(fail(
            "peer",
            format!(
                "{} {}:\n{}",
                cell.tool.peer(),
                match peer.code {
                    Some(c) => format!("exit {c}"),
                    None => "did not end".into(),
                },
                last_lines(&peer.log, 15)
            ),
        ));
    }
    // Every end prints the result line but read-lat's server, which only
    // answers READs.
    let want = cell.result_line(v);
    // rping's server prints its ping data after "server ".
    let server_want = format!("server {want}");
    let prints = |l: &str| l.starts_with(&want) || l.starts_with(&server_want);
    let server_prints = cell.tool != Tool::ReadLat;
    let (ours_prints, peer_prints) = match cell.role {
        Role::FerroceServer => (server_prints, true),
        Role::FerroceClient => (true, server_prints),
    };
    if ours_prints && !ours.lines().any(prints) {
        return Err(fail(
            "result",
            format!(
                "ferroce printed no line starting {want:?}:\n{}",
                last_lines(&ours, 8)
            ),
        ));
    }
    if peer_prints && !peer.log.lines().any(prints) {
        return Err(fail(
            "result",
            format!(
                "{} printed no line starting {want:?}:\n{}",
                cell.tool.peer(),
                last_lines(&peer.log, 8)
            ),
        ));
    }
    // Both tools say the path MTU they connected with (ibv_rc_pingpong
    // and rping print none: their packets in the capture show it). UD has none: the
    // cell's MTU is the ports', rxe0's read back when the link was set,
    // ferroce's in its --stats line, and the datagrams in the capture
    // fill it.
    let mtus = match cell.tool {
        Tool::UdPingpong => vec![("ferroce's port carries".to_string(), port_mtu(&ours))],
        Tool::Pingpong | Tool::Rping => Vec::new(),
        _ => vec![
            ("ferroce printed".to_string(), printed_mtu(&ours)),
            (
                format!("{} printed", cell.tool.peer()),
                printed_mtu(&peer.log),
            ),
        ],
    };
    for (who, got) in mtus {
        if got != Some(u32::from(cell.mtu)) {
            return Err(fail(
                "mtu",
                format!("{who} path MTU {got:?}; the cell is MTU {}", cell.mtu),
            ));
        }
    }
    let host_drops = host_drops(&ours);
    let delta = counter_delta(&job.file("before"), &job.file("after"));
    let shown: Vec<String> = delta
        .iter()
        .filter(|(_, d)| *d != 0)
        .map(|(k, d)| format!("{k} {d}"))
        .collect();
    fs::write(
        dir.join("rxe-counters.txt"),
        format!(
            "# rxe0 hw_counters moved by this run; bridge drops to rxe {} from rxe {}; lost on ferroce's host {}; \
             missing from the capture {}\n{}\n",
            drops.0,
            drops.1,
            host_drops,
            capture_dropped,
            shown.join("\n")
        ),
    )
    .map_err(|e| fail("setup", e.to_string()))?;
    matrix::check_rxe_counters(cell, &delta, host_drops > 0)
        .map_err(|e| fail("rxe counters", e))?;
    let decoded = check_pcap(&pcap)?;
    if cell.asks_selective_repeat() {
        check_stayed_go_back_n(&ours, &decoded)?;
    }
    let ends = addresses(cell);
    let facts =
        capture::check(cell, v, &pcap, ends, capture_dropped).map_err(|e| fail("capture", e))?;
    if let Some(attr) = cell.cm_drop() {
        if facts.mads_from_ferroce(attr) < 2 {
            return Err(fail(
                "capture",
                format!("ferroce's first CM MAD {attr:#06x} was dropped and not sent again"),
            ));
        }
    }
    if cell.ce {
        check_cnps(&ours, facts.cnps)?;
    }
    let _ = Command::new("gzip").arg("-1f").arg(&pcap).status();
    Ok(RunFacts { drops, host_drops })
}

/// With rxe's frames marked CE, ferroce must have counted them and sent
/// CNPs (its `--stats` line), and the capture must hold them; the run
/// itself passing shows they broke nothing at rxe.
fn check_cnps(ours: &str, in_capture: u64) -> Result<(), Failure> {
    let counter = |name: &str| -> u64 {
        ours.split_whitespace()
            .filter_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .filter_map(|v| v.parse::<u64>().ok())
            .sum()
    };
    let marked = counter("np_ecn_marked_roce_packets");
    let sent = counter("np_cnp_sent");
    if marked == 0 || sent == 0 || in_capture == 0 {
        return Err(fail(
            "cnp",
            format!(
                "rxe's frames arrived marked CE: ferroce counted {marked} marked, sent {sent} CNPs, \
                 the capture holds {in_capture}; all must be > 0"
            ),
        ));
    }
    Ok(())
}

/// ferroce asked for selective repeat and rxe did not: ferroce must say
/// its QPs run go-back-N, and no frame of the capture may carry its
/// selective-repeat trailer (`ferroce decode` would name it `sr(...)`).
fn check_stayed_go_back_n(ours: &str, decoded: &str) -> Result<(), Failure> {
    if !ours.contains("the peer did not ask for it") || ours.contains(" Recovery ") {
        return Err(fail(
            "selective repeat",
            format!(
                "ferroce asked for selective repeat and rxe did not; ferroce did not say it stays \
                 go-back-N:\n{}",
                last_lines(ours, 20)
            ),
        ));
    }
    if let Some(l) = decoded.lines().find(|l| l.contains(" sr(")) {
        return Err(fail(
            "selective repeat",
            format!("a frame to or from rxe carries ferroce's selective-repeat trailer: {l}"),
        ));
    }
    Ok(())
}

/// `ferroce decode` must find RoCE frames, every one well formed with a
/// right ICRC; returns its lines.
fn check_pcap(pcap: &Path) -> Result<String, Failure> {
    let out = Command::new(common::ferroce())
        .arg("decode")
        .arg(pcap)
        .output()
        .map_err(|e| fail("pcap", e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let totals = text.lines().last().unwrap_or("").to_string();
    let frames: u64 = totals
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if !out.status.success() || frames == 0 {
        let decoded = pcap.with_extension("decode.txt");
        let _ = fs::write(&decoded, &*text);
        return Err(fail(
            "pcap",
            format!(
                "ferroce decode {}: {totals} {}(lines in {})",
                pcap.display(),
                String::from_utf8_lossy(&out.stderr),
                decoded.display()
            ),
        ));
    }
    Ok(text.into_owned())
}

/// The tables of docs/interop.md: one row per tool and role, one column
/// per path MTU and loss; then the spot cells; then every rerun.
fn results_table(outcomes: &[Outcome]) -> String {
    let verdict = |o: &Outcome| {
        let sizes: Vec<String> = o.ran.iter().map(|v| v.to_string()).collect();
        let mut notes = vec![sizes.join(", ")];
        if o.host_drops > 0 {
            notes.push(format!("{} lost on ferroce's host", o.host_drops));
        }
        if !o.reruns.is_empty() {
            notes.push(format!("{} rerun", o.reruns.len()));
        }
        format!(
            " {} ({}) |",
            if o.failure.is_none() {
                "pass"
            } else {
                "**fail**"
            },
            notes.join("; ")
        )
    };
    let role_name = |r: Role| match r {
        Role::FerroceServer => "ferroce server",
        Role::FerroceClient => "ferroce client",
    };
    let mut s = String::from(
        "| peer | tool | role | MTU 1024 | MTU 2048 | MTU 4096 | MTU 1024, loss | MTU 4096, loss | MTU 1024, CE marked |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for tool in Tool::ALL {
        for role in [Role::FerroceServer, Role::FerroceClient] {
            let mut row = format!(
                "| rxe ({}) | {} | {} |",
                tool.peer(),
                tool.name(),
                role_name(role)
            );
            for (mtu, loss, ce) in [
                (1024, false, false),
                (2048, false, false),
                (4096, false, false),
                (1024, true, false),
                (4096, true, false),
                (1024, false, true),
            ] {
                let cell = outcomes.iter().find(|o| {
                    !o.cell.ipv6
                        && !o.cell.cm
                        && o.cell.tool == tool
                        && o.cell.role == role
                        && o.cell.mtu == mtu
                        && o.cell.loss.is_some() == loss
                        && o.cell.ce == ce
                });
                row.push_str(&match cell {
                    None if ce && !matrix::CE_TOOLS.contains(&tool) => " — |".into(),
                    None if loss && !tool.has_loss_cells() => " — |".into(),
                    None => " not run |".into(),
                    Some(o) => verdict(o),
                });
            }
            s.push_str(&row);
            s.push('\n');
        }
    }
    // The cells outside the grid: one table each, a row per cell; `what`
    // fills the columns between the role and the result.
    let side_table =
        |s: &mut String, head: &str, cells: Vec<&Outcome>, what: &dyn Fn(&Cell) -> String| {
            if cells.is_empty() {
                return;
            }
            let cols = head.matches('|').count() - 1;
            s.push_str(&format!("\n{head}\n{}|\n", "| --- ".repeat(cols)));
            for o in cells {
                s.push_str(&format!(
                    "| rxe ({}) | {} | {} | {} |{}\n",
                    o.cell.tool.peer(),
                    o.cell.tool.name(),
                    role_name(o.cell.role),
                    what(&o.cell),
                    verdict(o)
                ));
            }
        };
    side_table(
        &mut s,
        "| peer | tool | role | path MTU | result |",
        outcomes.iter().filter(|o| o.cell.is_spot()).collect(),
        &|c| c.mtu.to_string(),
    );
    side_table(
        &mut s,
        "| peer | tool | role | connection | path MTU | loss | result |",
        outcomes.iter().filter(|o| o.cell.cm).collect(),
        &|c| format!("RDMA-CM (`-R`) | {} | {}", c.mtu, c.loss_name()),
    );
    side_table(
        &mut s,
        "| peer | tool | role | GIDs | path MTU | result |",
        outcomes.iter().filter(|o| o.cell.ipv6).collect(),
        &|c| format!("{} ↔ {} | {}", lab::FERROCE_IP6, lab::GUEST_IP6, c.mtu),
    );
    let reruns: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.reruns
                .iter()
                .map(move |r| format!("- {} {r}", o.cell.id()))
        })
        .collect();
    s.push_str(&format!(
        "\n{} cells, {} passed; {} runs made again:\n",
        outcomes.len(),
        outcomes.iter().filter(|o| o.failure.is_none()).count(),
        reruns.len()
    ));
    for r in reruns {
        s.push_str(&r);
        s.push('\n');
    }
    s
}

/// The markers around the generated tables in docs/interop.md.
const TABLE_BEGIN: &str =
    "<!-- interop results: generated by `cargo test --release --test interop -- --write-docs` -->";
const TABLE_END: &str = "<!-- end of interop results -->";

/// Puts `table` between the markers of `docs`.
fn write_docs(docs: &Path, table: &str) -> Result<(), String> {
    let text = fs::read_to_string(docs).map_err(|e| format!("{}: {e}", docs.display()))?;
    let (Some(a), Some(b)) = (text.find(TABLE_BEGIN), text.find(TABLE_END)) else {
        return Err(format!("{} has no interop results markers", docs.display()));
    };
    let new = format!("{}{TABLE_BEGIN}\n\n{table}\n{}", &text[..a], &text[b..]);
    fs::write(docs, new).map_err(|e| format!("{}: {e}", docs.display()))
}
