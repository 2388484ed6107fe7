//! perftest's console output and its arithmetic (`perftest_parameters.c`:
//! `ctx_print_test_info`, `print_report_bw`, `print_report_lat`;
//! `perftest_communication.c`: `ctx_print_pingpong_data`), in the form of
//! perftest 6.06, the version whose exchange the tools speak.

use crate::tools::oob::perftest::Keys;
use std::io::{self, Write};

/// 87 dashes (`RESULT_LINE`).
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// One bandwidth result (`struct bw_report_data`).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct BwReport {
    /// Bytes per message.
    pub size: u64,
    /// Messages counted (all QPs).
    pub iters: u64,
    /// Best rate over any run of consecutive messages (0: not measured).
    pub bw_peak: f64,
    /// The rate over the whole run (MiB/s, or Gbit/s with `gbits`).
    pub bw_avg: f64,
    /// Million messages per second.
    pub msg_rate: f64,
    /// Whether `bw_*` are in Gbit/s (else MiB/s).
    #[serde(skip)]
    pub gbits: bool,
}

impl BwReport {
    /// The averages of `msgs` messages of `size` bytes in `ns`.
    pub fn new(
        size: u64,
        msgs: u64,
        ns: u64,
        peak_ns_per_msg: Option<f64>,
        gbits: bool,
    ) -> BwReport {
        let secs = (ns.max(1)) as f64 / 1e9;
        let unit = |bytes_per_sec: f64| {
            if gbits {
                bytes_per_sec * 8.0 / 1e9
            } else {
                bytes_per_sec / (1u64 << 20) as f64
            }
        };
        BwReport {
            size,
            iters: msgs,
            bw_peak: peak_ns_per_msg.map_or(0.0, |t| unit(size as f64 / (t.max(1e-3) / 1e9))),
            bw_avg: unit(size as f64 * msgs as f64 / secs),
            msg_rate: msgs as f64 / secs / 1e6,
            gbits,
        }
    }

    /// The table header (`RESULT_FMT` / `RESULT_FMT_G`).
    pub fn header(gbits: bool) -> &'static str {
        if gbits {
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        } else {
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        }
    }

    /// The row (`REPORT_FMT`, or `REPORT_FMT_EXT` for a tiny Gbit/s
    /// average).
    pub fn row(&self) -> String {
        if self.gbits && self.bw_avg < 0.1 {
            format!(
                " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
                self.size, self.iters, self.bw_peak, self.bw_avg, self.msg_rate
            )
        } else {
            format!(
                " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                self.size, self.iters, self.bw_peak, self.bw_avg, self.msg_rate
            )
        }
    }
}

/// The best per-message time over runs of consecutive messages: the least
/// of `(completed[j] - posted[i]) / (j - i + 1)` over `i <= j`, with `j`
/// at the messages whose completion was seen (every `cq_mod`-th), as
/// perftest's `print_report_bw` computes its peak.
pub fn peak_ns(posted: &[u64], completed: &[u64], cq_mod: usize) -> Option<f64> {
    let n = posted.len().min(completed.len());
    let step = cq_mod.max(1);
    let mut best: Option<f64> = None;
    for (i, &p) in posted[..n].iter().enumerate() {
        let mut j = (i + 1).div_ceil(step) * step - 1;
        while j < n {
            let t = completed[j].saturating_sub(p) as f64 / (j - i + 1) as f64;
            best = Some(match best {
                Some(b) if b <= t => b,
                _ => t,
            });
            j += step;
        }
    }
    best
}

/// One latency result (`print_report_lat`), in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct LatReport {
    /// Bytes per message.
    pub size: u64,
    /// Posts measured (one more than the samples).
    pub iters: u64,
    /// The smallest sample.
    pub t_min: f64,
    /// The first sample above those kept (the tail's smaller one), as
    /// perftest takes it.
    pub t_max: f64,
    /// The median of the samples kept.
    pub t_typical: f64,
    /// The mean of the samples kept.
    pub t_avg: f64,
    /// The standard deviation of the samples kept (population).
    pub t_stdev: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
}

/// Samples dropped from the top (`LAT_MEASURE_TAIL`).
const TAIL: usize = 2;

impl LatReport {
    /// From the post times (ns) of `iters` messages: each gap between
    /// consecutive posts is one exchange, divided by `rtt_factor` (2 when a
    /// gap is a round trip of two messages, as in write-lat and send-lat).
    /// `None` with fewer than four posts.
    pub fn from_posts(size: u64, posted: &[u64], rtt_factor: f64) -> Option<LatReport> {
        let mut d: Vec<f64> = posted
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]) as f64 / 1e3 / rtt_factor)
            .collect();
        if d.len() <= TAIL + 1 {
            return None;
        }
        d.sort_by(|a, b| a.total_cmp(b));
        let m = d.len() - TAIL;
        let avg = d[..m].iter().sum::<f64>() / m as f64;
        let var = d[..m].iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / m as f64;
        let median = if m % 2 == 1 {
            d[m / 2]
        } else {
            (d[m / 2 - 1] + d[m / 2]) / 2.0
        };
        let pct = |p: f64| d[((p * m as f64).ceil() as usize).min(d.len() - 1)];
        Some(LatReport {
            size,
            iters: posted.len() as u64,
            t_min: d[0],
            t_max: d[m],
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: pct(0.99),
            p999: pct(0.999),
        })
    }

    /// The table header (`RESULT_FMT_LAT`).
    pub const HEADER: &'static str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

    /// The row (`REPORT_FMT_LAT`).
    pub fn row(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.size,
            self.iters,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.p99,
            self.p999
        )
    }
}

/// What the banner says.
pub struct Banner<'a> {
    /// The test's title, e.g. "RDMA_Write BW Test".
    pub title: &'a str,
    /// `Device`: the device name.
    pub device: &'a str,
    /// `Number of qps`.
    pub qps: u32,
    /// `TX depth`, when shown.
    pub tx_depth: Option<u32>,
    /// `RX depth`, when shown.
    pub rx_depth: Option<u32>,
    /// `CQ Moderation`, when shown.
    pub cq_mod: Option<u32>,
    /// `Mtu`: the path MTU in bytes.
    pub mtu_bytes: u32,
    /// `rdma_cm QPs` and `Data ex. method`: connected by RDMA-CM (`-R`).
    pub rdma_cm: bool,
    /// `GID index`.
    pub gid_index: u8,
    /// `Outstand reads` for READ and atomics, else `Max inline data`.
    pub out_reads: Option<u16>,
    /// Both ends agreed on selective repeat: a `Recovery` line (ferroce's
    /// own; absent in go-back-N, so the banner stays perftest's).
    pub selective_repeat: bool,
}

/// The test description (`ctx_print_test_info`).
pub fn print_banner(b: &Banner<'_>, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(out, "{RESULT_LINE}")?;
    writeln!(out, "                    {}", b.title)?;
    writeln!(
        out,
        " Dual-port       : OFF\t\tDevice         : {}",
        b.device
    )?;
    writeln!(out, " Number of qps   : {}\t\tTransport type : IB", b.qps)?;
    writeln!(out, " Connection type : RC\t\tUsing SRQ      : OFF")?;
    writeln!(out, " PCIe relax order: OFF")?;
    writeln!(out, " ibv_wr* API     : OFF")?;
    if let Some(t) = b.tx_depth {
        writeln!(out, " TX depth        : {t}")?;
    }
    if let Some(r) = b.rx_depth {
        writeln!(out, " RX depth        : {r}")?;
    }
    if let Some(c) = b.cq_mod {
        writeln!(out, " CQ Moderation   : {c}")?;
    }
    writeln!(out, " Mtu             : {}[B]", b.mtu_bytes)?;
    writeln!(out, " Link type       : Ethernet")?;
    writeln!(out, " GID index       : {}", b.gid_index)?;
    match b.out_reads {
        Some(o) => writeln!(out, " Outstand reads  : {o}")?,
        None => writeln!(out, " Max inline data : 0[B]")?,
    }
    if b.rdma_cm {
        writeln!(out, " rdma_cm QPs\t : ON")?;
        writeln!(out, " Data ex. method : rdma_cm")?;
    } else {
        writeln!(out, " rdma_cm QPs\t : OFF")?;
        writeln!(out, " Data ex. method : Ethernet")?;
    }
    if b.selective_repeat {
        writeln!(
            out,
            " Recovery        : selective repeat (both ends ferroce)"
        )?;
    }
    writeln!(out, "{RESULT_LINE}")
}

/// One QP's address line and GID line (`ctx_print_pingpong_data`): RKey
/// and VAddr for READ and WRITE tests, OUT for READ tests.
pub fn print_keys(
    side: &str,
    k: &Keys,
    rdma: bool,
    read: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    let hex = |v: u64, w: usize| {
        if v == 0 {
            format!("{:0w$}", 0)
        } else {
            format!("{v:#0w$x}")
        }
    };
    let mut line = format!(
        " {side} address: LID {} QPN {} PSN {}",
        hex(k.lid.into(), 4),
        hex(k.qpn.into(), 6),
        hex(k.psn.into(), 6)
    );
    if read {
        line.push_str(&format!(" OUT {}", hex(k.out_reads.into(), 4)));
    }
    if rdma {
        line.push_str(&format!(
            " RKey {} VAddr {}",
            hex(k.rkey.into(), 8),
            hex(k.vaddr, 16)
        ));
    }
    writeln!(out, "{line}")?;
    let gid: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
    writeln!(out, " GID: {}", gid.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_statistics_drop_the_two_largest_and_take_the_median() {
        // Gaps of 1..=9 µs (round trips of 2..=18 µs with rtt_factor 2),
        // in shuffled order, plus two outliers.
        let gaps = [5u64, 1, 9, 3, 7, 2, 8, 4, 6, 1000, 500];
        let mut posted = vec![0u64];
        for g in gaps {
            posted.push(posted.last().unwrap() + g * 2000);
        }
        let r = LatReport::from_posts(2, &posted, 2.0).unwrap();
        assert_eq!(r.iters, 12);
        assert_eq!((r.t_min, r.t_max, r.t_typical), (1.0, 500.0, 5.0));
        assert!((r.t_avg - 5.0).abs() < 1e-9, "{}", r.t_avg);
        assert!(LatReport::from_posts(2, &[0, 1, 2], 1.0).is_none());
    }

    #[test]
    fn bandwidth_in_mib_and_gbits_and_the_peak() {
        // 1000 messages of 65536 bytes in 0.1 s.
        let r = BwReport::new(65536, 1000, 100_000_000, None, false);
        assert!((r.bw_avg - 625.0).abs() < 1e-9, "{}", r.bw_avg);
        assert!((r.msg_rate - 0.01).abs() < 1e-12);
        let g = BwReport::new(65536, 1000, 100_000_000, Some(50_000.0), true);
        assert!((g.bw_avg - 5.24288).abs() < 1e-9);
        assert!((g.bw_peak - 10.48576).abs() < 1e-9);
        assert!(
            r.row().starts_with(" 65536      1000       "),
            "{}",
            r.row()
        );
        // Posted every 10, completed 5 after: the best run is one message.
        let posted: Vec<u64> = (0..10).map(|i| i * 10).collect();
        let done: Vec<u64> = posted.iter().map(|p| p + 5).collect();
        assert_eq!(peak_ns(&posted, &done, 1), Some(5.0));
        // Completions seen every 5th message only.
        assert!(peak_ns(&posted, &done, 5).unwrap() >= 5.0);
    }

    #[test]
    fn address_lines_as_perftest_prints_them() {
        let k = Keys {
            lid: 0,
            out_reads: 16,
            qpn: 0x107,
            psn: 0x7c3a3f,
            rkey: 0x1fecd9,
            vaddr: 0x7f5d9e5ba000,
            gid: crate::wire::gid_of("192.168.1.2".parse().unwrap()),
            srqn: 0,
        };
        let mut o = Vec::new();
        print_keys("local", &k, true, false, &mut o).unwrap();
        let s = String::from_utf8(o).unwrap();
        assert_eq!(
            s,
            " local address: LID 0000 QPN 0x0107 PSN 0x7c3a3f RKey 0x1fecd9 VAddr 0x007f5d9e5ba000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:02\n"
        );
    }
}
