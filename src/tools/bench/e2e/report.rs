//! The report of `ferroce bench e2e`: each round's figures, the
//! round-trip percentiles, the ratios against their targets, and the table
//! printed from them.

use super::{CorePoint, E2eOpts, QpPoint, Rate, Threads, CHUNK};
use crate::sim::stats::{median, percentile};
use serde::Serialize;
use std::fmt::Write as _;

/// Round-trip percentiles, over the samples of every round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Round trips measured.
    pub samples: u64,
    /// The median round trip, in µs.
    pub p50_us: f64,
    /// The 99th-percentile round trip, in µs.
    pub p99_us: f64,
}

impl Latency {
    /// The percentiles of `v`, round trips in ns.
    pub fn of(mut v: Vec<u64>) -> Latency {
        v.sort_unstable();
        Latency {
            samples: v.len() as u64,
            p50_us: percentile(&v, 50.0) as f64 / 1e3,
            p99_us: percentile(&v, 99.0) as f64 / 1e3,
        }
    }
}

/// One round's rate figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Round {
    /// a: 64 B WRITEs between the engines over DPDK.
    pub engine_64: Rate,
    /// c: the same over the UDP socket backend.
    pub udp_64: Rate,
    /// d: the bare echo of frames of the same size.
    pub echo: Rate,
    /// e: one core's copy + CRC-32.
    pub copy_crc: Rate,
    /// e,m: the copy alone.
    pub copy: Rate,
    /// e,c: the CRC-32 alone.
    pub crc: Rate,
    /// b: 64 KiB WRITEs over DPDK.
    pub engine_64k: Rate,
    /// b,z: the same, the writer sending from its region in place
    /// (zero-copy send).
    pub engine_64k_zc: Rate,
    /// b over UDP.
    pub udp_64k: Rate,
}

impl Round {
    /// The three ratios the targets are about.
    fn ratios(&self) -> [f64; 4] {
        [
            self.engine_64.msgs_per_s() / self.udp_64.msgs_per_s(),
            self.engine_64.frames_per_s() / self.echo.frames_per_s(),
            self.engine_64k.gbit_per_s() / self.copy_crc.gbit_per_s(),
            self.engine_64k_zc.gbit_per_s() / self.copy_crc.gbit_per_s(),
        ]
    }

    /// The most zero-copy send's goodput can be of the ceiling (e) when
    /// nothing but its per-byte work costs: each byte's CRC at both ends
    /// (the ICRC) and its copy into the receiver's region, at the rates
    /// of e,c and e,m (`None` before they ran).
    pub fn zero_copy_bound(&self) -> Option<f64> {
        let (crc, copy) = (self.crc.gbit_per_s(), self.copy.gbit_per_s());
        (crc > 0.0 && copy > 0.0 && self.copy_crc.gbit_per_s() > 0.0)
            .then(|| 1.0 / (2.0 / crc + 1.0 / copy) / self.copy_crc.gbit_per_s())
    }
}

/// A ratio against its target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    /// What is divided by what (a [`TARGETS`] name).
    pub name: &'static str,
    /// Median over rounds of the ratio taken within each round.
    pub median: f64,
    /// The smallest round's ratio.
    pub min: f64,
    /// The largest round's ratio.
    pub max: f64,
    /// The ratio the median should reach.
    pub target: f64,
    /// Whether the median reached the target.
    pub met: bool,
}

/// Everything `ferroce bench e2e` measured.
#[derive(Debug, Clone, Serialize)]
pub struct E2eReport {
    /// What was run.
    pub opts: E2eOpts,
    /// Bytes of one 64 B WRITE frame (the echo's frame size).
    pub frame_len_64: usize,
    /// Whether the EAL ran on hugepages (false: the `--no-huge` fallback).
    pub hugepages: bool,
    /// The UDP sockets' receive and send buffers as the kernel granted them.
    pub udp_socket_buffers: (usize, usize),
    /// The measured rounds' rate figures (the warm-up round left out).
    pub rounds: Vec<Round>,
    /// f: the 64 B SEND ping-pong between the engines over DPDK.
    pub send_lat: Latency,
    /// f: the bare echo's round trip of one frame.
    pub echo_rtt: Latency,
    /// f: the 64 B SEND ping-pong over the UDP socket backend.
    pub udp_send_lat: Latency,
    /// The ratios against [`TARGETS`], in its order.
    pub ratios: Vec<Ratio>,
    /// Runs the time limit cut short (name and round).
    pub cut_short: Vec<String>,
    /// The QP-count sweep (the first point is its baseline).
    pub qp_sweep: Vec<QpPoint>,
    /// The cores sweep (the first point, 1 lcore, is each round's
    /// baseline).
    pub cores: Vec<CorePoint>,
}

/// The targets: engine / UDP message rate, engine / echo frame rate,
/// goodput / copy+CRC, with the payload copied and sent in place.
pub const TARGETS: [(&str, f64); 4] = [
    ("engine / UDP-backend 64 B message rate", 10.0),
    ("engine / bare-echo 64 B frame rate", 0.5),
    ("64 KiB goodput / copy+CRC-32 limit", 0.7),
    ("64 KiB goodput, zero-copy send / copy+CRC-32", 0.6),
];

impl E2eReport {
    /// Notes each run of round `round` that the time limit cut short; `lat`:
    /// whether the DPDK send-lat, echo and UDP send-lat runs finished.
    pub fn note_cut_short(&mut self, round: usize, rd: &Round, lat: [bool; 3]) {
        for (name, all) in [
            ("engine 64 B WRITE, DPDK", rd.engine_64.complete),
            ("engine 64 B WRITE, UDP", rd.udp_64.complete),
            ("bare echo", rd.echo.complete),
            ("memcpy + CRC-32", rd.copy_crc.complete),
            ("engine 64 KiB WRITE, DPDK", rd.engine_64k.complete),
            (
                "engine 64 KiB WRITE, DPDK, zero-copy",
                rd.engine_64k_zc.complete,
            ),
            ("engine 64 KiB WRITE, UDP", rd.udp_64k.complete),
            ("send-lat, DPDK", lat[0]),
            ("echo round trip", lat[1]),
            ("send-lat, UDP", lat[2]),
        ] {
            if !all {
                self.cut_short.push(format!("round {round}: {name}"));
            }
        }
    }

    /// Fills the ratios from the rounds.
    pub fn summarise(&mut self) {
        self.ratios = TARGETS
            .iter()
            .enumerate()
            .map(|(k, &(name, target))| {
                let v: Vec<f64> = self.rounds.iter().map(|r| r.ratios()[k]).collect();
                let med = median(v.clone());
                Ratio {
                    name,
                    median: med,
                    min: v.iter().copied().fold(f64::INFINITY, f64::min),
                    max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    target,
                    met: med >= target,
                }
            })
            .collect();
    }

    /// The table `ferroce bench e2e` prints.
    pub fn table(&self) -> String {
        let mut s = String::new();
        self.heading(&mut s);
        self.rates(&mut s);
        self.round_trips(&mut s);
        self.sweep_lines(&mut s);
        self.core_lines(&mut s);
        self.ratio_lines(&mut s);
        for c in &self.cut_short {
            let _ = writeln!(s, "  note: {c} stopped at the time limit before its count");
        }
        s
    }

    /// What ran: rounds, threads, memory, QP settings.
    fn heading(&self, s: &mut String) {
        let o = &self.opts;
        let _ = writeln!(
            s,
            "ferroce bench e2e: {} rounds, {}, DPDK ring pair ({}); figures are medians over rounds [min .. max]",
            self.rounds.len(),
            match o.threads {
                Threads::One => "one thread drives both engines",
                Threads::Two => "a thread per engine",
            },
            if self.hugepages {
                "hugepages"
            } else {
                "no hugepages"
            },
        );
        let _ = writeln!(
            s,
            "  QP: SQ depth {}, 1 in {} WRITEs signaled, {} PSNs in flight, path MTU {}; UDP socket buffers {} / {} B",
            o.qp.sq_depth,
            o.qp.cq_mod,
            o.qp.inflight,
            o.qp.mtu.bytes(),
            self.udp_socket_buffers.0,
            self.udp_socket_buffers.1
        );
    }

    /// The rates and ceilings, a to e: each round's, as median [min .. max].
    fn rates(&self, s: &mut String) {
        let o = &self.opts;
        let col = |f: &dyn Fn(&Round) -> f64| -> (f64, f64, f64) {
            let v: Vec<f64> = self.rounds.iter().map(f).collect();
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (median(v), min, max)
        };
        let retrans = |f: &dyn Fn(&Round) -> &Rate| -> u64 {
            self.rounds.iter().map(|r| f(r).retransmitted).sum()
        };
        let _ = writeln!(
            s,
            "\n  {:<4}{:<48} {:>9} {:<11} {:>20}  note",
            "", "rate", "median", "unit", "[min .. max]"
        );
        let mut row =
            |tag: &str, name: String, (m, lo, hi): (f64, f64, f64), unit: &str, note: String| {
                let _ = writeln!(
                    s,
                    "  {:<4}{:<48} {:>9.3} {:<11} {:>20}  {}",
                    tag,
                    name,
                    m,
                    unit,
                    format!("[{lo:.3} .. {hi:.3}]"),
                    note
                );
            };
        let fl = self.frame_len_64;
        row(
            "a",
            "engine 64 B WRITE, DPDK".into(),
            col(&|r| r.engine_64.msgs_per_s() / 1e6),
            "M msgs/s",
            format!(
                "{:.3} M frames/s both ways, {} retransmitted",
                col(&|r| r.engine_64.frames_per_s() / 1e6).0,
                retrans(&|r| &r.engine_64)
            ),
        );
        row(
            "c",
            "engine 64 B WRITE, UDP socket backend".into(),
            col(&|r| r.udp_64.msgs_per_s() / 1e6),
            "M msgs/s",
            format!(
                "{:.3} M frames/s both ways, {} retransmitted",
                col(&|r| r.udp_64.frames_per_s() / 1e6).0,
                retrans(&|r| &r.udp_64)
            ),
        );
        row(
            "d",
            format!("bare DPDK echo, {fl} B frames"),
            col(&|r| r.echo.frames_per_s() / 1e6),
            "M frames/s",
            format!(
                "both ways ({:.3} M echoes/s)",
                col(&|r| r.echo.msgs_per_s() / 1e6).0
            ),
        );
        row(
            "b",
            format!("engine 64 KiB WRITE, DPDK, MTU {}", o.qp.mtu.bytes()),
            col(&|r| r.engine_64k.gbit_per_s()),
            "Gbit/s",
            format!("goodput, {} retransmitted", retrans(&|r| &r.engine_64k)),
        );
        row(
            "b,z",
            "the same, zero-copy send".into(),
            col(&|r| r.engine_64k_zc.gbit_per_s()),
            "Gbit/s",
            format!(
                "goodput, {} of {} frames (both ways) sent from the region in place, {} retransmitted",
                self.rounds.iter().map(|r| r.engine_64k_zc.lent).sum::<u64>(),
                self.rounds.iter().map(|r| r.engine_64k_zc.frames).sum::<u64>(),
                retrans(&|r| &r.engine_64k_zc)
            ),
        );
        row(
            "b,c",
            "engine 64 KiB WRITE, UDP socket backend".into(),
            col(&|r| r.udp_64k.gbit_per_s()),
            "Gbit/s",
            format!("goodput, {} retransmitted", retrans(&|r| &r.udp_64k)),
        );
        row(
            "e",
            format!(
                "memcpy + CRC-32, 64 KiB in {} KiB chunks, 1 core",
                CHUNK >> 10
            ),
            col(&|r| r.copy_crc.gbit_per_s()),
            "Gbit/s",
            "the goodput ceiling".into(),
        );
        row(
            "e,m",
            "the copy alone".into(),
            col(&|r| r.copy.gbit_per_s()),
            "Gbit/s",
            String::new(),
        );
        row(
            "e,c",
            "the CRC-32 alone".into(),
            col(&|r| r.crc.gbit_per_s()),
            "Gbit/s",
            String::new(),
        );
    }

    /// The round trips, f: every round's samples together.
    fn round_trips(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n  {:<4}{:<48} {:>9} {:>11} {:>20}",
            "", "round trip, one in flight (every round's samples)", "p50 us", "p99 us", "samples"
        );
        for (tag, name, l) in [
            ("f", "send-lat 64 B SEND ping-pong, DPDK", &self.send_lat),
            ("f", "bare DPDK echo of one frame", &self.echo_rtt),
            (
                "f,c",
                "send-lat 64 B SEND ping-pong, UDP socket backend",
                &self.udp_send_lat,
            ),
        ] {
            let _ = writeln!(
                s,
                "  {:<4}{:<48} {:>9.2} {:>11.2} {:>20}",
                tag, name, l.p50_us, l.p99_us, l.samples
            );
        }
    }

    /// The QP-count sweep: each count's rate and memory per QP.
    fn sweep_lines(&self, s: &mut String) {
        let Some(one) = self.qp_sweep.first() else {
            return;
        };
        let _ = writeln!(
            s,
            "\n  {:<4}{:<48} {:>9} {:>11} {:>20}",
            "g", "64 B WRITEs round-robin over N QPs, DPDK", "M msgs/s", "of 1 QP", "engine B / QP"
        );
        for pt in &self.qp_sweep {
            let mem = match pt.engine_bytes_per_qp {
                Some(b) => format!("{b:.0}"),
                None => "not measured".into(),
            };
            let _ = writeln!(
                s,
                "  {:<4}{:<48} {:>9.3} {:>11.3} {:>20}  {:.2} frames / WRITE, {} retransmitted{}",
                "",
                format!("{} QPs", pt.qps),
                pt.rate.msgs_per_s() / 1e6,
                pt.of_one,
                mem,
                pt.rate.frames as f64 / pt.rate.msgs.max(1) as f64,
                pt.rate.retransmitted,
                if pt.rate.complete { "" } else { ", cut short" }
            );
        }
        let _ = writeln!(
            s,
            "  (one run each, {} WRITEs, {} outstanding, every one signaled; the application's queues, {} B per QP at 1 QP, not counted)",
            one.rate.msgs, super::qps::WINDOW, one.queue_bytes_per_qp
        );
    }

    /// The cores sweep: each split's rate and its ratio to 1 lcore.
    fn core_lines(&self, s: &mut String) {
        if self.cores.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "\n  {:<4}{:<48} {:>9} {:>11} {:>20}",
            "h",
            "64 B WRITEs, each engine on N lcores, DPDK",
            "M msgs/s",
            "of 1 lcore",
            "[min .. max]"
        );
        for pt in &self.cores {
            let [m, lo, hi] = pt.of_one;
            let _ = writeln!(
                s,
                "  {:<4}{:<48} {:>9.3} {:>11.3} {:>20}  {} frames steered to another lcore, {} retransmitted{}",
                "",
                format!(
                    "{} lcore{}, {}",
                    pt.lcores,
                    if pt.lcores == 1 { "" } else { "s" },
                    if pt.crossed { "crossed" } else { "aligned" }
                ),
                pt.rate.msgs_per_s() / 1e6,
                m,
                format!("[{lo:.3} .. {hi:.3}]"),
                pt.handed_on,
                pt.rate.retransmitted,
                if pt.rate.complete { "" } else { ", cut short" }
            );
        }
        let _ = writeln!(
            s,
            "  (median round of {}; one QP per lcore, lcore i drives shard i of both engines; aligned: \
             QPs paired shard i to shard i, crossed: to shard i + 1, every frame through a steering ring)",
            self.rounds.len()
        );
    }

    /// The ratios against their targets.
    fn ratio_lines(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n  {:<52} {:>9} {:>11} {:>20}",
            "ratio (each round's, then the median)", "median", "target", "[min .. max]"
        );
        for r in &self.ratios {
            let _ = writeln!(
                s,
                "  {:<52} {:>9.3} {:>11} {:>20}  {}",
                r.name,
                r.median,
                format!(">= {}", r.target),
                format!("[{:.3} .. {:.3}]", r.min, r.max),
                if r.met { "met" } else { "NOT met" }
            );
        }
        let bounds: Vec<f64> = self
            .rounds
            .iter()
            .filter_map(Round::zero_copy_bound)
            .collect();
        if !bounds.is_empty() {
            let _ = writeln!(
                s,
                "  {:<52} {:>9.3} {:>11} {:>20}  2 CRC-32 + 1 copy per byte (e,c and e,m), nothing else",
                "  the most zero-copy send's own work allows",
                median(bounds),
                "-",
                "",
            );
        }
        if let Some(last) = self.qp_sweep.last().filter(|p| p.qps > 1) {
            let _ = writeln!(
                s,
                "  {:<52} {:>9.3} {:>11} {:>20}  {}",
                format!("{} QPs / 1 QP message rate", last.qps),
                last.of_one,
                ">= 0.8",
                "",
                if last.of_one >= 0.8 { "met" } else { "NOT met" }
            );
            if let Some(b) = last.engine_bytes_per_qp {
                let _ = writeln!(
                    s,
                    "  {:<52} {:>9.0} {:>11} {:>20}  {}",
                    format!("engine bytes per QP at {} QPs", last.qps),
                    b,
                    "<= 4096",
                    "",
                    if b <= 4096.0 { "met" } else { "NOT met" }
                );
            }
        }
        let _ = writeln!(
            s,
            "  {:<52} {:>9.3} {:>11} {:>20}  p99: {:.3}",
            "send-lat / echo round trip, p50",
            self.send_lat.p50_us / self.echo_rtt.p50_us,
            "-",
            "",
            self.send_lat.p99_us / self.echo_rtt.p99_us
        );
    }
}
