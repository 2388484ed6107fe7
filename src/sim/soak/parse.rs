//! The units of `ferroce sim`'s command line: operation lists, sizes,
//! rates, durations and seed ranges.

use super::{ConfigError, Op};
use crate::time::Duration;

/// The operations of a comma-separated list (`send,write,read,atomic`;
/// `all` for the four). Repeats weigh an operation more.
pub fn parse_ops(s: &str) -> Result<Vec<Op>, ConfigError> {
    let mut ops = Vec::new();
    for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match w.to_ascii_lowercase().as_str() {
            "send" => ops.push(Op::Send),
            "write" => ops.push(Op::Write),
            "read" => ops.push(Op::Read),
            "atomic" | "atomics" => ops.push(Op::Atomic),
            "all" => ops.extend(Op::ALL),
            _ => return Err(ConfigError::UnknownOp(w.to_string())),
        }
    }
    if ops.is_empty() {
        return Err(ConfigError::NoOps);
    }
    Ok(ops)
}

/// `MIN-MAX` or one size, in bytes, with an optional `K` / `M` suffix
/// (binary: 4K = 4096).
pub fn parse_size(s: &str) -> Result<(u32, u32), ConfigError> {
    let bad = || ConfigError::BadSize(s.to_string());
    let one = |t: &str| -> Result<u32, ConfigError> {
        let t = t.trim();
        let (num, mul) = match t.char_indices().last() {
            Some((i, 'k' | 'K')) => (&t[..i], 1024u64),
            Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
            _ => (t, 1),
        };
        let v: u64 = num.parse().map_err(|_| bad())?;
        u32::try_from(v.checked_mul(mul).ok_or_else(bad)?).map_err(|_| bad())
    };
    let (min, max) = match s.split_once('-') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let v = one(s)?;
            (v, v)
        }
    };
    if min > max {
        return Err(ConfigError::SizeOrder { min, max });
    }
    Ok((min, max))
}

/// A rate in bits per second: `100G`, `25g`, `10Gbps`, `400M`, `1000000`
/// (plain bits per second); `0` or `inf` for no serialisation time.
pub fn parse_rate(s: &str) -> Result<u64, ConfigError> {
    let bad = |why| ConfigError::BadValue {
        what: "rate",
        text: s.to_string(),
        why,
    };
    let t = s.trim().to_ascii_lowercase();
    if t == "inf" {
        return Ok(0);
    }
    let t = t
        .strip_suffix("bps")
        .or_else(|| t.strip_suffix("b/s"))
        .unwrap_or(&t);
    let (num, mul) = match t.chars().last() {
        Some('t') => (&t[..t.len() - 1], 1e12),
        Some('g') => (&t[..t.len() - 1], 1e9),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('k') => (&t[..t.len() - 1], 1e3),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| bad("expected a number with an optional K, M, G or T (e.g. 100G)"))?;
    let bps = v * mul;
    if !(0.0..=1e15).contains(&bps) {
        return Err(bad("out of range (0 to 1000T)"));
    }
    Ok(bps.round() as u64)
}

/// A duration: a number with `ns`, `us`, `ms` or `s` (`1us`, `2.5ms`).
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    let bad = |why| ConfigError::BadValue {
        what: "duration",
        text: s.to_string(),
        why,
    };
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(bad("expected a unit: ns, us, ms or s (e.g. 1us)"));
    };
    let v: f64 = num.trim().parse().map_err(|_| bad("not a number"))?;
    let ns = v * mul;
    if !(0.0..=1e15).contains(&ns) {
        return Err(bad("out of range"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// `A-B` (inclusive) or one seed.
pub fn parse_seeds(s: &str) -> Result<(u64, u64), ConfigError> {
    let bad = |why| ConfigError::BadValue {
        what: "seeds",
        text: s.to_string(),
        why,
    };
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| bad("expected A-B, two whole numbers"))
    };
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let v = num(s)?;
            (v, v)
        }
    };
    if a > b {
        return Err(bad("the first seed is larger than the last"));
    }
    Ok((a, b))
}
