//! The input files of the HPCC ns-3 simulator (repository
//! alibaba-edu/High-Precision-Congestion-Control, `simulation/mix/` and
//! `traffic_gen/`), read as the lab reads them: the topology file of the
//! `hpcc` topology kind and the flow list of the `flow-file` workload.
//! (Its flow-size CDF files, rows of `size cumulative_percent`, are read by
//! the `cdf` workload's own parser, [`crate::sim::lab::workload::Cdf`].)
//!
//! This module owns the two formats, their checks and their errors, each
//! naming the line at fault. Tokens are separated by spaces or tabs;
//! blank lines are skipped; there are no comments.
//!
//! **Topology file** (`fat.txt`, `topology.txt`):
//!
//! ```text
//! 6 2 5              node count, switch count, link count
//! 4 5                the switches' node ids (the other nodes are hosts)
//! 0 4 100Gbps 1us 0  a link: node, node, rate, one-way delay, error rate
//! ...
//! ```
//!
//! Node ids run from 0 to the node count - 1. Rates take a unit of bits
//! (`bps`, `Kbps`/`kbps`, `Mbps`, `Gbps`, `Tbps`, or `b/s` ...) or bytes
//! (`Bps`, `GBps`, `B/s` ...) per second, as ns-3's `DataRate` writes
//! them; delays a unit of `s`, `ms`, `us`, `ns` or `ps`. The error rate
//! must be 0: the simulated fabric drops no frame at random. Every host
//! has exactly one link, to a switch; switches may have parallel links.
//!
//! **Flow list** (`flow.txt`, what `traffic_gen.py` writes):
//!
//! ```text
//! 3                  the flow count
//! 0 5 3 100 200000 2.000001   src, dst, priority, dst port, bytes, start (s)
//! ...
//! ```
//!
//! The source and destination are node ids; the priority (0..=7) and the
//! destination port (0..=65535) are checked and not used (the lab sends
//! every flow on `[transport] priority`, each over its own QP). Flows may
//! come in any order.
//!
//! Both headers' counts are checked against the lines that follow.

use super::{MAX_BYTES, MAX_DELAY_NS, MAX_FLOWS, MAX_HOSTS, MAX_LINKS, MAX_RATE_BPS, MAX_SWITCHES};
use std::fmt;
use std::io::Read;
use std::path::Path;

/// The largest topology or flow-list file read, bytes.
pub const MAX_HPCC_FILE: u64 = 64 << 20;

/// What is wrong with a file, and on which line (from 1; 0: the file as
/// a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// The line at fault, from 1; 0: the whole file.
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.msg)
        } else {
            write!(f, "line {}: {}", self.line, self.msg)
        }
    }
}

impl std::error::Error for LineError {}

fn at(line: usize, msg: impl Into<String>) -> LineError {
    LineError {
        line,
        msg: msg.into(),
    }
}

/// Reads the file at `path` (at most [`MAX_HPCC_FILE`] bytes) and parses
/// it with `parse`; the error is `path:line: what`.
pub(crate) fn load<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, LineError>,
) -> Result<T, String> {
    let p = path.display();
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_HPCC_FILE + 1).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {p}: {e}"))?;
    if text.len() as u64 > MAX_HPCC_FILE {
        return Err(format!("{p} is above {MAX_HPCC_FILE} bytes"));
    }
    parse(&text).map_err(|e| match e.line {
        0 => format!("{p}: {}", e.msg),
        l => format!("{p}:{l}: {}", e.msg),
    })
}

/// The non-blank lines of `text`: (line number from 1, its tokens).
fn lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines().enumerate().filter_map(|(n, l)| {
        let t: Vec<&str> = l.split_whitespace().collect();
        (!t.is_empty()).then_some((n + 1, t))
    })
}

/// Token `tok` (called `what`) as an integer in `0..=max`.
fn int(line: usize, what: &str, tok: &str, max: u64) -> Result<u64, LineError> {
    match tok.parse::<u64>() {
        Ok(v) if v <= max => Ok(v),
        Ok(v) => Err(at(line, format!("{what} {v} is above {max}"))),
        Err(_) => Err(at(
            line,
            format!("{what} {tok:?} is not a whole number of at least 0"),
        )),
    }
}

/// `fields` has `n` tokens, named by `layout` in the error.
fn expect_fields(line: usize, fields: &[&str], n: usize, layout: &str) -> Result<(), LineError> {
    if fields.len() != n {
        return Err(at(
            line,
            format!("expected {n} fields ({layout}), found {}", fields.len()),
        ));
    }
    Ok(())
}

/// A rate with an ns-3 `DataRate` unit, in bits per second (1..=the
/// fastest link).
pub(crate) fn parse_rate(tok: &str) -> Result<u64, String> {
    let split = tok
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+'))
        .unwrap_or(tok.len());
    let (num, unit) = tok.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("rate {tok:?} is not a number with a unit such as Gbps"))?;
    let (prefix, base) = if let Some(p) = unit.strip_suffix("bps").or(unit.strip_suffix("b/s")) {
        (p, 1.0)
    } else if let Some(p) = unit.strip_suffix("Bps").or(unit.strip_suffix("B/s")) {
        (p, 8.0)
    } else {
        return Err(format!(
            "rate {tok:?} has no unit of bps, Kbps, Mbps, Gbps, Tbps (or b/s, Bps, B/s)"
        ));
    };
    let scale = match prefix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => {
            return Err(format!(
                "rate {tok:?}: unit prefix {prefix:?} is not one of k, K, M, G, T"
            ))
        }
    };
    let bps = v * base * scale;
    if !(bps >= 1.0 && bps <= MAX_RATE_BPS as f64) {
        return Err(format!(
            "rate {tok:?} is outside 1 bps..={} Gbps",
            MAX_RATE_BPS / 1_000_000_000
        ));
    }
    Ok(bps.round() as u64)
}

/// A time with an ns-3 `Time` unit, in nanoseconds (at most the longest
/// link delay).
pub(crate) fn parse_delay(tok: &str) -> Result<u64, String> {
    let split = tok
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(tok.len());
    let (num, unit) = tok.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("delay {tok:?} is not a number with a unit such as us"))?;
    let scale = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        "ps" => 1e-3,
        "" => return Err(format!("delay {tok:?} needs a unit: s, ms, us, ns or ps")),
        _ => {
            return Err(format!(
                "delay {tok:?}: unit {unit:?} is not one of s, ms, us, ns, ps"
            ))
        }
    };
    let ns = v * scale;
    if !(ns >= 0.0 && ns <= MAX_DELAY_NS as f64) {
        return Err(format!(
            "delay {tok:?} is outside 0..={} ms",
            MAX_DELAY_NS / 1_000_000
        ));
    }
    Ok(ns.round() as u64)
}

/// A link of a topology file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HpccLink {
    /// One node id.
    pub a: usize,
    /// The other.
    pub b: usize,
    /// Its rate, bits per second.
    pub rate_bps: u64,
    /// Its one-way delay, nanoseconds.
    pub delay_ns: u64,
    /// Its line in the file.
    pub line: usize,
}

/// A topology file, checked: every host has one link, to a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HpccTopology {
    /// The node count; ids run from 0.
    pub nodes: usize,
    /// Per node id: a switch?
    pub is_switch: Vec<bool>,
    /// The links, in file order.
    pub links: Vec<HpccLink>,
}

impl HpccTopology {
    /// Parses a topology file (see the module docs).
    pub fn parse(text: &str) -> Result<HpccTopology, LineError> {
        let mut it = lines(text);
        let (l1, head) = it.next().ok_or_else(|| at(0, "is empty"))?;
        expect_fields(l1, &head, 3, "node count, switch count, link count")?;
        let max_nodes = (MAX_HOSTS + MAX_SWITCHES) as u64;
        let nodes = int(l1, "node count", head[0], max_nodes)? as usize;
        let switches = int(l1, "switch count", head[1], MAX_SWITCHES as u64)? as usize;
        let links = int(l1, "link count", head[2], (MAX_HOSTS + MAX_LINKS) as u64)? as usize;
        if switches == 0 {
            return Err(at(l1, "the switch count is 0: a topology needs a switch"));
        }
        if switches >= nodes {
            return Err(at(
                l1,
                format!("{switches} switches among {nodes} nodes leave no host"),
            ));
        }
        if nodes - switches > MAX_HOSTS {
            return Err(at(
                l1,
                format!(
                    "{} hosts ({nodes} nodes, {switches} switches) are above the limit of \
                     {MAX_HOSTS}",
                    nodes - switches
                ),
            ));
        }
        let (l2, ids) = it
            .next()
            .ok_or_else(|| at(0, "ends before the line of switch ids (line 2)"))?;
        if ids.len() != switches {
            return Err(at(
                l2,
                format!(
                    "lists {} switch ids; line {l1} says {switches} switches",
                    ids.len()
                ),
            ));
        }
        let mut is_switch = vec![false; nodes];
        for tok in ids {
            let id = int(l2, "switch id", tok, nodes as u64 - 1)? as usize;
            if std::mem::replace(&mut is_switch[id], true) {
                return Err(at(l2, format!("switch id {id} is listed twice")));
            }
        }
        // Per host: the line of its link.
        let mut host_link: Vec<Option<usize>> = vec![None; nodes];
        let mut out = Vec::with_capacity(links);
        let mut switch_links = 0usize;
        for (n, f) in it {
            if out.len() == links {
                return Err(at(
                    n,
                    format!("a link past the {links} that line {l1} announces"),
                ));
            }
            expect_fields(n, &f, 5, "node, node, rate, delay, error rate")?;
            let a = int(n, "node", f[0], nodes as u64 - 1)? as usize;
            let b = int(n, "node", f[1], nodes as u64 - 1)? as usize;
            if a == b {
                return Err(at(n, format!("links node {a} to itself")));
            }
            let rate_bps = parse_rate(f[2]).map_err(|e| at(n, e))?;
            let delay_ns = parse_delay(f[3]).map_err(|e| at(n, e))?;
            match f[4].parse::<f64>() {
                Ok(0.0) => {}
                Ok(e) => {
                    return Err(at(
                        n,
                        format!(
                            "error rate {e}: the simulated fabric drops no frame at random; \
                             only 0 is supported"
                        ),
                    ))
                }
                Err(_) => return Err(at(n, format!("error rate {:?} is not a number", f[4]))),
            }
            match (is_switch[a], is_switch[b]) {
                (false, false) => {
                    return Err(at(
                        n,
                        format!(
                            "links two hosts ({a} and {b}, neither on line {l2}'s switch \
                             list); a host links to a switch"
                        ),
                    ))
                }
                (true, true) => switch_links += 1,
                _ => {
                    let h = if is_switch[a] { b } else { a };
                    if let Some(first) = host_link[h] {
                        return Err(at(
                            n,
                            format!(
                                "host {h} already has a link (line {first}); a host has one link"
                            ),
                        ));
                    }
                    host_link[h] = Some(n);
                }
            }
            if switch_links > MAX_LINKS {
                return Err(at(
                    n,
                    format!("more than {MAX_LINKS} switch-to-switch links"),
                ));
            }
            out.push(HpccLink {
                a,
                b,
                rate_bps,
                delay_ns,
                line: n,
            });
        }
        if out.len() != links {
            return Err(at(
                0,
                format!(
                    "line {l1} announces {links} links, but {} follow",
                    out.len()
                ),
            ));
        }
        if let Some(h) = (0..nodes).find(|&h| !is_switch[h] && host_link[h].is_none()) {
            return Err(at(
                0,
                format!("node {h} is a host (not on line {l2}'s switch list) with no link"),
            ));
        }
        Ok(HpccTopology {
            nodes,
            is_switch,
            links: out,
        })
    }

    /// Reads and parses the topology file at `path`; the error names it
    /// and the line.
    pub fn load(path: &Path) -> Result<HpccTopology, String> {
        load(path, HpccTopology::parse)
    }
}

/// A flow of a flow list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccFlow {
    /// The sending node's id.
    pub src: usize,
    /// The receiving node's id.
    pub dst: usize,
    /// Its size, bytes.
    pub bytes: u64,
    /// When it starts, seconds (the file's time).
    pub start_s: f64,
    /// Its line in the file.
    pub line: usize,
}

/// Parses a flow list (see the module docs): the flows in file order.
pub fn parse_flow_list(text: &str) -> Result<Vec<HpccFlow>, LineError> {
    let mut it = lines(text);
    let (l1, head) = it.next().ok_or_else(|| at(0, "is empty"))?;
    expect_fields(l1, &head, 1, "the flow count")?;
    let count = int(l1, "flow count", head[0], MAX_FLOWS)? as usize;
    let mut flows = Vec::with_capacity(count.min(1 << 16));
    let node_max = (MAX_HOSTS + MAX_SWITCHES) as u64;
    for (n, f) in it {
        if flows.len() == count {
            return Err(at(
                n,
                format!("a flow past the {count} that line {l1} announces"),
            ));
        }
        expect_fields(
            n,
            &f,
            6,
            "src, dst, priority, dst port, size in bytes, start in seconds",
        )?;
        let src = int(n, "src", f[0], node_max)? as usize;
        let dst = int(n, "dst", f[1], node_max)? as usize;
        if src == dst {
            return Err(at(n, format!("src and dst are the same node, {src}")));
        }
        int(n, "priority", f[2], 7)?;
        int(n, "dst port", f[3], 65_535)?;
        let bytes = int(n, "size", f[4], MAX_BYTES)?;
        if bytes == 0 {
            return Err(at(n, "size 0: a flow sends at least one byte"));
        }
        let start_s = match f[5].parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => t,
            _ => {
                return Err(at(
                    n,
                    format!(
                        "start time {:?} is not a number of seconds of at least 0",
                        f[5]
                    ),
                ))
            }
        };
        flows.push(HpccFlow {
            src,
            dst,
            bytes,
            start_s,
            line: n,
        });
    }
    if flows.len() != count {
        return Err(at(
            0,
            format!(
                "line {l1} announces {count} flows, but {} follow",
                flows.len()
            ),
        ));
    }
    Ok(flows)
}

/// Reads and parses the flow list at `path`; the error names it and the
/// line.
pub fn load_flow_list(path: &Path) -> Result<Vec<HpccFlow>, String> {
    load(path, parse_flow_list)
}
