//! The workloads of an experiment: each `[[workload]]` table becomes a
//! deterministic list of flows ([`generate`]); and the flow-completion
//! figures that go with them ([`ideal_fct_ns`], [`slowdown_by_bucket`]).
//!
//! This module owns the kinds of workload and their keys, the flow-size
//! distributions read from CDF files ([`Cdf`]), the Poisson arrivals, and
//! the order and numbering of flows.
//!
//! # Kinds
//!
//! Every kind takes `tag` (its flows' label; default: the kind's name)
//! and `start_us` (default 0, before `duration_us`). Host lists name
//! hosts or groups, as a list or one string. Sizes are in KB of 1000
//! bytes.
//!
//! - `long`: `from`, `to` (required): one flow from each host of `from`
//!   to each other host of `to`, posting WRITEs from `start_us` until
//!   `stop_us` (default: the end of the posting phase). No size.
//! - `incast`: `senders` (default: the group `senders`), `to` (one host;
//!   default: the group `receiver`), `size_kb` (required): each sender
//!   but the receiver sends `size_kb` to it at `start_us`; with
//!   `repeat_us`, again every `repeat_us`, `count` times at most (default:
//!   as many as start before the posting phase ends). Each repetition is
//!   a `round`.
//! - `all-to-all`: `hosts` (default `all`), `size_kb`: every host sends
//!   `size_kb` to every other at `start_us`.
//! - `allreduce`: `hosts` (default `all`, at least 2; the ring in the
//!   listed order), `size_kb`, `count` (default 1), `repeat_us`: a ring
//!   all-reduce of N hosts takes 2(N-1) steps (rounds); in each, every
//!   host sends size/N (rounded up) to its successor. A host's step k+1
//!   waits (`after`) until its predecessor's step k, sent to it, has
//!   completed. `count` repetitions (a flow's `repetition`) run one
//!   after the other: each starts once every flow of the one before has
//!   completed (a barrier, as a training step's next all-reduce waits
//!   for the last), and, with `repeat_us`, not before `start_us +
//!   r x repeat_us` (repetition r from 0; without `count`, as many as
//!   start before the posting phase ends).
//! - `cdf`: `file` (required; relative to the experiment's folder),
//!   `load` (required, in (0, 1]), `hosts` (default `all`, at least 2),
//!   `stop_us` (default: the end), `max_flows` (default 100000): each
//!   host starts flows at Poisson arrivals, at the rate that fills `load`
//!   of its link with the distribution's mean size (`load x rate / (8 x
//!   mean)` flows per second, headers not counted), each to a host drawn
//!   uniformly from the others, with a size drawn from the file. Only the
//!   first `max_flows` arrivals are kept. The file may be in the HPCC
//!   simulator's format (`size cumulative_percent` rows; a last value of
//!   100 is read as percent).
//! - `flow-file`: `file` (required; relative to the experiment's folder),
//!   `hosts`, `time_zero_s` (default 0), `stop_us`: one flow per line of
//!   a flow list of the HPCC simulator (format:
//!   [`super::config::parse_flow_list`]), starting at `start_us` plus its
//!   time after `time_zero_s` (its `traffic_gen.py` starts flows at 2 s:
//!   `time_zero_s = 2`). Node id i is the host `n<i>` of an `hpcc`
//!   topology, or the i-th host of `hosts` (default `all`, in topology
//!   order: a `fat-tree`'s hosts are numbered as the HPCC simulator's
//!   `fat.txt` numbers them). A flow starting at or after the end of the
//!   posting phase is an error, unless `stop_us` is given: flows from
//!   `stop_us` on are then left out.
//! - `poisson-incast`: `fan_in`, `size_kb`, `load` (required), `hosts`
//!   (default `all`), `to` (default: drawn per incast), `stop_us`,
//!   `max_flows` (default 100000): incasts arrive as a Poisson process;
//!   in each, `fan_in` distinct hosts of `hosts` (drawn uniformly, never
//!   the receiver) send `size_kb` each to one receiver (`to`, or a host
//!   of `hosts` drawn uniformly). The rate makes the incast bytes `load`
//!   of the summed link rates of `hosts`, the basis of `cdf`'s `load`:
//!   `load x sum(rate) / (8 x fan_in x size)` incasts per second, headers
//!   not counted. So beside a `cdf` workload at load L over the same
//!   hosts, `load = L x s / (1 - s)` makes the incasts the share s of all
//!   traffic, as the HPCC paper adds incasts to its background traffic
//!   (Li et al., SIGCOMM 2019, section 5). Each incast is a `round`; only
//!   whole incasts within `max_flows` are kept.
//!
//! # Determinism
//!
//! Flows are a function of the settings, the topology and the seed. Each
//! `cdf` source draws from its own stream ([`Rng`], seeded from the seed,
//! the workload's number and the source's position), and each
//! `poisson-incast` workload from one of its own, so a workload's
//! flows do not change when another workload is added after it. The list is
//! sorted by start time, then by the order the workloads made them
//! (workload by workload, each in the order above), and numbered in that
//! order: a flow's `id` is its index, and `after` names only earlier
//! flows.

#![deny(unsafe_code)]
use super::config::{kb, us, KeyError, LabConfig, LabConfigError, TopologySpec, WorkloadKind};
use super::config::{load_flow_list, TopologyKind};
use super::config::{Names, WorkloadConfig, MAX_BYTES, MAX_DURATION_NS, MAX_FLOWS};
use crate::backend::fabric::Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Read;
use std::path::Path;

/// A `cdf` workload's `max_flows` when it gives none.
pub const DEFAULT_MAX_FLOWS: u64 = 100_000;
/// The most rows a CDF file may have.
pub const MAX_CDF_ROWS: usize = 100_000;
/// The largest CDF file read, bytes.
pub const MAX_CDF_FILE: u64 = 4 << 20;

/// One flow: `src` sends `bytes` to `dst` from `start_ns`, once every
/// flow of `after` has completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowSpec {
    /// Its index in the list.
    pub id: usize,
    /// The sending host: an index in [`TopologySpec::hosts`].
    pub src: usize,
    /// The receiving host: an index in [`TopologySpec::hosts`].
    pub dst: usize,
    /// `None`: a long flow, which posts until `stop_ns`.
    pub bytes: Option<u64>,
    /// When it may start, nanoseconds from the run's start.
    pub start_ns: u64,
    /// When a long flow stops posting.
    pub stop_ns: Option<u64>,
    /// Flows that must have completed before this one starts.
    pub after: Vec<usize>,
    /// Index of its `[[workload]]`.
    pub workload: usize,
    /// Its incast repetition or all-reduce step (0 otherwise).
    pub round: u32,
    /// An all-reduce's flows: which of its repetitions this flow is
    /// part of (`round` is its step). `None` for other kinds.
    pub repetition: Option<u32>,
    /// Its label: its workload's `tag`, or the kind's name.
    pub tag: String,
}

/// A workload, checked and resolved.
enum Plan {
    Long {
        from: Vec<usize>,
        to: Vec<usize>,
        start: u64,
        stop: u64,
    },
    Incast {
        senders: Vec<usize>,
        to: usize,
        bytes: u64,
        start: u64,
        every: u64,
        rounds: u64,
    },
    AllToAll {
        hosts: Vec<usize>,
        bytes: u64,
        start: u64,
    },
    Allreduce {
        hosts: Vec<usize>,
        chunk: u64,
        start: u64,
        /// The earliest start of each repetition after the first, ns.
        every: u64,
        repetitions: u64,
    },
    Cdf {
        hosts: Vec<usize>,
        cdf: Cdf,
        load: f64,
        start: u64,
        stop: u64,
        max_flows: u64,
    },
    /// (src, dst, bytes, start_ns), in file order.
    FlowFile {
        flows: Vec<(usize, usize, u64, u64)>,
    },
    PoissonIncast {
        hosts: Vec<usize>,
        to: Option<usize>,
        fan_in: usize,
        bytes: u64,
        /// Incasts per nanosecond.
        lambda: f64,
        start: u64,
        stop: u64,
        max_flows: u64,
    },
}

struct Prepared {
    plan: Plan,
    /// The most flows it makes.
    flows: u64,
    tag: String,
}

/// The keys each kind takes besides `kind`.
fn keys_of(kind: WorkloadKind) -> &'static [&'static str] {
    match kind {
        WorkloadKind::Long => &["tag", "from", "to", "start_us", "stop_us"],
        WorkloadKind::Incast => &[
            "tag",
            "senders",
            "to",
            "size_kb",
            "start_us",
            "repeat_us",
            "count",
        ],
        WorkloadKind::AllToAll => &["tag", "hosts", "size_kb", "start_us"],
        WorkloadKind::Allreduce => &["tag", "hosts", "size_kb", "start_us", "repeat_us", "count"],
        WorkloadKind::Cdf => &[
            "tag",
            "hosts",
            "file",
            "load",
            "start_us",
            "stop_us",
            "max_flows",
        ],
        WorkloadKind::FlowFile => &["tag", "file", "hosts", "start_us", "stop_us", "time_zero_s"],
        WorkloadKind::PoissonIncast => &[
            "tag",
            "hosts",
            "to",
            "fan_in",
            "size_kb",
            "load",
            "start_us",
            "stop_us",
            "max_flows",
        ],
    }
}

fn given(w: &WorkloadConfig) -> [(&'static str, bool); 15] {
    [
        ("tag", w.tag.is_some()),
        ("from", w.from.is_some()),
        ("to", w.to.is_some()),
        ("senders", w.senders.is_some()),
        ("hosts", w.hosts.is_some()),
        ("size_kb", w.size_kb.is_some()),
        ("start_us", w.start_us.is_some()),
        ("stop_us", w.stop_us.is_some()),
        ("repeat_us", w.repeat_us.is_some()),
        ("count", w.count.is_some()),
        ("file", w.file.is_some()),
        ("load", w.load.is_some()),
        ("max_flows", w.max_flows.is_some()),
        ("fan_in", w.fan_in.is_some()),
        ("time_zero_s", w.time_zero_s.is_some()),
    ]
}

fn duration_ns(cfg: &LabConfig) -> Result<u64, KeyError> {
    match us("duration_us", cfg.duration_us, MAX_DURATION_NS)? {
        0 => Err(KeyError::new("duration_us", "must be above 0")),
        d => Ok(d),
    }
}

/// One `[[workload]]` being checked: its table, its number and the
/// topology its host names are looked up in.
struct Check<'a> {
    cfg: &'a LabConfig,
    w: &'a WorkloadConfig,
    i: usize,
    topo: &'a TopologySpec,
}

impl Check<'_> {
    fn key(&self, k: &str) -> String {
        format!("workload.{}.{k}", self.i)
    }

    /// Every key given is one its kind takes.
    fn known_keys(&self) -> Result<(), KeyError> {
        let w = self.w;
        let allowed = keys_of(w.kind);
        if let Some((k, _)) = given(w).iter().find(|(k, g)| *g && !allowed.contains(k)) {
            return Err(KeyError::new(
                self.key(k),
                format!(
                    "is not a key of {} workloads (they take {})",
                    w.kind.name(),
                    allowed.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The hosts of key `k` (value `v`, or the group `default` when the
    /// topology has it): at least one.
    fn hosts(
        &self,
        k: &str,
        v: &Option<Names>,
        default: Option<&str>,
    ) -> Result<Vec<usize>, KeyError> {
        let topo = self.topo;
        let list = match (v, default) {
            (Some(n), _) => n.0.clone(),
            (None, Some(d)) if topo.groups.contains_key(d) => vec![d.to_string()],
            (None, Some(d)) => {
                return Err(KeyError::new(
                    self.key(k),
                    format!("is required (the topology has no group {d:?})"),
                ))
            }
            (None, None) => return Err(KeyError::new(self.key(k), "is required")),
        };
        let h = topo
            .hosts_named(&list)
            .map_err(|e| KeyError::new(self.key(k), e))?;
        if h.is_empty() {
            return Err(KeyError::new(self.key(k), "has no hosts"));
        }
        Ok(h)
    }

    /// `start_us` and `stop_us`, in nanoseconds, within the posting phase
    /// of `duration` ns.
    fn window(&self, duration: u64) -> Result<(u64, u64), KeyError> {
        let (w, cfg) = (self.w, self.cfg);
        let start = us(
            &self.key("start_us"),
            w.start_us.unwrap_or(0.0),
            MAX_DURATION_NS,
        )?;
        if start >= duration {
            return Err(KeyError::new(
                self.key("start_us"),
                format!(
                    "{} is not before the end of the posting phase (duration_us = {})",
                    w.start_us.unwrap_or(0.0),
                    cfg.duration_us
                ),
            ));
        }
        let stop = match w.stop_us {
            None => duration,
            Some(v) => {
                let s = us(&self.key("stop_us"), v, MAX_DURATION_NS)?;
                if s <= start || s > duration {
                    return Err(KeyError::new(
                        self.key("stop_us"),
                        format!(
                            "{v} is not after start_us and at most duration_us ({})",
                            cfg.duration_us
                        ),
                    ));
                }
                s
            }
        };
        Ok((start, stop))
    }

    /// `size_kb` in bytes, above 0.
    fn size(&self) -> Result<u64, KeyError> {
        let v = self
            .w
            .size_kb
            .ok_or_else(|| KeyError::new(self.key("size_kb"), "is required"))?;
        match kb(&self.key("size_kb"), v)? {
            0 => Err(KeyError::new(
                self.key("size_kb"),
                format!("{v} is not above 0"),
            )),
            b => Ok(b),
        }
    }

    /// The hosts of `hosts` (default: all), at least two.
    fn at_least_two(&self) -> Result<Vec<usize>, KeyError> {
        let h = self.hosts("hosts", &self.w.hosts, Some("all"))?;
        if h.len() < 2 {
            return Err(KeyError::new(
                self.key("hosts"),
                format!("{} workloads need at least 2 hosts", self.w.kind.name()),
            ));
        }
        Ok(h)
    }

    /// A `long` workload and its number of flows.
    fn long(&self, start: u64, stop: u64) -> Result<(Plan, u64), KeyError> {
        let from = self.hosts("from", &self.w.from, None)?;
        let to = self.hosts("to", &self.w.to, None)?;
        let mut in_to = vec![false; self.topo.hosts.len()];
        for &d in &to {
            in_to[d] = true;
        }
        let same = from.iter().filter(|&&s| in_to[s]).count() as u64;
        let flows = from.len() as u64 * to.len() as u64 - same;
        if flows == 0 {
            return Err(KeyError::new(
                self.key("to"),
                "makes no flows: from and to are the same one host",
            ));
        }
        let plan = Plan::Long {
            from,
            to,
            start,
            stop,
        };
        Ok((plan, flows))
    }

    /// An `incast` workload and its number of flows.
    fn incast(&self, start: u64, duration: u64) -> Result<(Plan, u64), KeyError> {
        let w = self.w;
        let to = self.hosts("to", &w.to, Some("receiver"))?;
        let [to] = to[..] else {
            return Err(KeyError::new(
                self.key("to"),
                format!("names {} hosts; an incast has one receiver", to.len()),
            ));
        };
        let mut senders = self.hosts("senders", &w.senders, Some("senders"))?;
        senders.retain(|&s| s != to);
        if senders.is_empty() {
            return Err(KeyError::new(
                self.key("senders"),
                "has no hosts but the receiver",
            ));
        }
        let bytes = self.size()?;
        self.count_above_0()?;
        let (every, rounds) = match w.repeat_us {
            None if w.count.unwrap_or(1) > 1 => {
                return Err(KeyError::new(
                    self.key("count"),
                    "repeats need repeat_us (the time between them)",
                ))
            }
            None => (0, 1),
            Some(_) => self.period(start, duration)?,
        };
        let flows = senders.len() as u64 * rounds;
        let plan = Plan::Incast {
            senders,
            to,
            bytes,
            start,
            every,
            rounds,
        };
        Ok((plan, flows))
    }

    /// `count` must be at least 1 when given.
    fn count_above_0(&self) -> Result<(), KeyError> {
        if self.w.count == Some(0) {
            return Err(KeyError::new(self.key("count"), "must be at least 1"));
        }
        Ok(())
    }

    /// `repeat_us` (given) in ns and the repetitions: `count`, cut to
    /// those that start before the posting phase of `duration` ns ends
    /// (all of them without `count`).
    fn period(&self, start: u64, duration: u64) -> Result<(u64, u64), KeyError> {
        let v = self.w.repeat_us.unwrap_or(0.0);
        let every = us(&self.key("repeat_us"), v, MAX_DURATION_NS)?;
        if every == 0 {
            return Err(KeyError::new(self.key("repeat_us"), "must be above 0"));
        }
        let fit = (duration - start - 1) / every + 1;
        Ok((every, self.w.count.map_or(fit, |c| c.min(fit))))
    }

    /// An `allreduce` workload and its number of flows: `count`
    /// repetitions back to back, or paced by `repeat_us`.
    fn allreduce(&self, start: u64, duration: u64) -> Result<(Plan, u64), KeyError> {
        let hosts = self.at_least_two()?;
        let n = hosts.len() as u64;
        let chunk = self.size()?.div_ceil(n);
        self.count_above_0()?;
        let (every, repetitions) = match self.w.repeat_us {
            None => (0, self.w.count.unwrap_or(1)),
            Some(_) => self.period(start, duration)?,
        };
        let flows = n * 2 * (n - 1) * repetitions;
        let plan = Plan::Allreduce {
            hosts,
            chunk,
            start,
            every,
            repetitions,
        };
        Ok((plan, flows))
    }

    /// A `cdf` workload and the most flows it makes.
    fn cdf(&self, start: u64, stop: u64) -> Result<(Plan, u64), KeyError> {
        let w = self.w;
        let hosts = self.at_least_two()?;
        let file = w
            .file
            .as_ref()
            .ok_or_else(|| KeyError::new(self.key("file"), "is required"))?;
        let cdf =
            Cdf::load(&self.cfg.dir.join(file)).map_err(|e| KeyError::new(self.key("file"), e))?;
        let load = self.load()?;
        let max_flows = self.max_flows()?;
        let plan = Plan::Cdf {
            hosts,
            cdf,
            load,
            start,
            stop,
            max_flows,
        };
        Ok((plan, max_flows))
    }
}

impl Check<'_> {
    /// `max_flows` (default [`DEFAULT_MAX_FLOWS`]), in 1..=[`MAX_FLOWS`].
    fn max_flows(&self) -> Result<u64, KeyError> {
        let max_flows = self.w.max_flows.unwrap_or(DEFAULT_MAX_FLOWS);
        if !(1..=MAX_FLOWS).contains(&max_flows) {
            return Err(KeyError::new(
                self.key("max_flows"),
                format!("{max_flows} is outside 1..={MAX_FLOWS}"),
            ));
        }
        Ok(max_flows)
    }

    /// `load`, in (0, 1].
    fn load(&self) -> Result<f64, KeyError> {
        let load = self
            .w
            .load
            .ok_or_else(|| KeyError::new(self.key("load"), "is required"))?;
        if !(load > 0.0 && load <= 1.0) {
            return Err(KeyError::new(
                self.key("load"),
                format!("{load} is outside (0, 1]"),
            ));
        }
        Ok(load)
    }

    /// A `flow-file` workload: the file's flows, each at `start` plus its
    /// time after `time_zero_s`, and their number.
    fn flow_file(&self, start: u64, stop: u64) -> Result<(Plan, u64), KeyError> {
        let w = self.w;
        let topo = self.topo;
        let file = w
            .file
            .as_ref()
            .ok_or_else(|| KeyError::new(self.key("file"), "is required"))?;
        let path = self.cfg.dir.join(file);
        let zero = w.time_zero_s.unwrap_or(0.0);
        if !(zero.is_finite() && zero >= 0.0) {
            return Err(KeyError::new(
                self.key("time_zero_s"),
                format!("{zero} is not a time of at least 0 seconds"),
            ));
        }
        // Node id -> host: the list `hosts` gives, else the hpcc
        // topology's `n<id>`, else the topology's host order.
        let by_node: Vec<Option<usize>> =
            if w.hosts.is_none() && self.cfg.topology.kind == TopologyKind::Hpcc {
                let mut v = Vec::new();
                for (h, spec) in topo.hosts.iter().enumerate() {
                    if let Some(id) = spec.name.strip_prefix('n').and_then(|i| i.parse().ok()) {
                        let id: usize = id;
                        if v.len() <= id {
                            v.resize(id + 1, None);
                        }
                        v[id] = Some(h);
                    }
                }
                v
            } else {
                self.hosts("hosts", &w.hosts, Some("all"))?
                    .into_iter()
                    .map(Some)
                    .collect()
            };
        let whose = if w.hosts.is_some() {
            "of the list `hosts`"
        } else if self.cfg.topology.kind == TopologyKind::Hpcc {
            "of the topology file"
        } else {
            "of the topology (node i is the i-th host of `all`)"
        };
        let err = |line: usize, msg: String| {
            KeyError::new(
                self.key("file"),
                format!("{}:{line}: {msg}", path.display()),
            )
        };
        let list = load_flow_list(&path).map_err(|e| KeyError::new(self.key("file"), e))?;
        let mut flows = Vec::with_capacity(list.len());
        for f in &list {
            let host = |id: usize| {
                by_node
                    .get(id)
                    .copied()
                    .flatten()
                    .ok_or_else(|| err(f.line, format!("node {id} is not a host {whose}")))
            };
            let (src, dst) = (host(f.src)?, host(f.dst)?);
            if src == dst {
                return Err(err(
                    f.line,
                    format!("nodes {} and {} are the same host", f.src, f.dst),
                ));
            }
            if f.start_s < zero {
                return Err(err(
                    f.line,
                    format!("starts at {} s, before time_zero_s ({zero} s)", f.start_s),
                ));
            }
            let after = ((f.start_s - zero) * 1e9).round();
            let at = start as f64 + after;
            if at >= stop as f64 {
                if w.stop_us.is_some() {
                    continue;
                }
                return Err(err(
                    f.line,
                    format!(
                        "starts at {} s, {} us into the run: not before the end of the posting \
                         phase (duration_us = {}); lengthen duration_us, move time_zero_s, or \
                         set stop_us to leave later flows out",
                        f.start_s,
                        at / 1e3,
                        self.cfg.duration_us
                    ),
                ));
            }
            flows.push((src, dst, f.bytes, at as u64));
        }
        let n = flows.len() as u64;
        Ok((Plan::FlowFile { flows }, n))
    }

    /// A `poisson-incast` workload and the most flows it makes.
    fn poisson_incast(&self, start: u64, stop: u64) -> Result<(Plan, u64), KeyError> {
        let w = self.w;
        let hosts = self.hosts("hosts", &w.hosts, Some("all"))?;
        let to = match &w.to {
            None => None,
            Some(_) => {
                let t = self.hosts("to", &w.to, None)?;
                let [t] = t[..] else {
                    return Err(KeyError::new(
                        self.key("to"),
                        format!("names {} hosts; an incast has one receiver", t.len()),
                    ));
                };
                Some(t)
            }
        };
        let fan_in = w
            .fan_in
            .ok_or_else(|| KeyError::new(self.key("fan_in"), "is required"))?;
        // The receiver is one of `hosts`, or `to` (which may be outside).
        let others = hosts.iter().filter(|&&h| Some(h) != to).count() as u64;
        let most = if to.is_some() {
            others
        } else {
            others.saturating_sub(1)
        };
        if fan_in == 0 || fan_in > most {
            return Err(KeyError::new(
                self.key("fan_in"),
                format!(
                    "{fan_in} is outside 1..={most}: the senders are distinct hosts of `hosts`, \
                     not the receiver"
                ),
            ));
        }
        let bytes = self.size()?;
        let load = self.load()?;
        let max_flows = self.max_flows()?;
        if max_flows < fan_in {
            return Err(KeyError::new(
                self.key("max_flows"),
                format!("{max_flows} is below fan_in ({fan_in}): not one incast fits"),
            ));
        }
        let capacity: f64 = hosts
            .iter()
            .map(|&h| self.topo.hosts[h].link.rate_bps as f64)
            .sum();
        // Incasts per nanosecond: the load's bits over an incast's.
        let lambda = load * capacity / (8.0 * fan_in as f64 * bytes as f64) / 1e9;
        let plan = Plan::PoissonIncast {
            hosts,
            to,
            fan_in: fan_in as usize,
            bytes,
            lambda,
            start,
            stop,
            max_flows,
        };
        Ok((plan, max_flows))
    }
}

fn prepare(
    cfg: &LabConfig,
    i: usize,
    topo: &TopologySpec,
    duration: u64,
) -> Result<Prepared, KeyError> {
    let w = &cfg.workloads[i];
    let c = Check { cfg, w, i, topo };
    c.known_keys()?;
    let (start, stop) = c.window(duration)?;
    let (plan, flows) = match w.kind {
        WorkloadKind::Long => c.long(start, stop)?,
        WorkloadKind::Incast => c.incast(start, duration)?,
        WorkloadKind::AllToAll => {
            let hosts = c.at_least_two()?;
            let n = hosts.len() as u64;
            let bytes = c.size()?;
            (
                Plan::AllToAll {
                    hosts,
                    bytes,
                    start,
                },
                n * (n - 1),
            )
        }
        WorkloadKind::Allreduce => c.allreduce(start, duration)?,
        WorkloadKind::Cdf => c.cdf(start, stop)?,
        WorkloadKind::FlowFile => c.flow_file(start, stop)?,
        WorkloadKind::PoissonIncast => c.poisson_incast(start, stop)?,
    };
    Ok(Prepared {
        plan,
        flows,
        tag: w.tag.clone().unwrap_or_else(|| w.kind.name().to_string()),
    })
}

fn prepare_all(cfg: &LabConfig, topo: &TopologySpec) -> Result<Vec<Prepared>, KeyError> {
    if cfg.workloads.is_empty() {
        return Err(KeyError::new("workload", "needs at least one [[workload]]"));
    }
    let duration = duration_ns(cfg)?;
    let mut total = 0u64;
    let mut out = Vec::with_capacity(cfg.workloads.len());
    for i in 0..cfg.workloads.len() {
        let p = prepare(cfg, i, topo, duration)?;
        total = total.saturating_add(p.flows);
        if total > MAX_FLOWS {
            return Err(KeyError::new(
                format!("workload.{i}"),
                format!(
                    "the workloads up to this one make up to {total} flows, above the \
                     limit of {MAX_FLOWS}"
                ),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// Checks every workload against the topology; the most flows they make.
pub(crate) fn check(cfg: &LabConfig, topo: &TopologySpec) -> Result<u64, KeyError> {
    Ok(prepare_all(cfg, topo)?.iter().map(|p| p.flows).sum())
}

/// The flows of every workload of `cfg` on `topo`, drawn with `seed`:
/// sorted by start time, `id` = index (see the module docs).
pub fn generate(
    cfg: &LabConfig,
    topo: &TopologySpec,
    seed: u64,
) -> Result<Vec<FlowSpec>, LabConfigError> {
    let prepared = prepare_all(cfg, topo).map_err(|e| cfg.invalid(e))?;
    let total: u64 = prepared.iter().map(|p| p.flows).sum();
    let mut flows: Vec<FlowSpec> = Vec::with_capacity(total as usize);
    for (w, p) in prepared.iter().enumerate() {
        emit(&mut flows, w, p, topo, seed);
    }
    // Provisional ids are positions in making order; sort and renumber.
    flows.sort_by_key(|f| (f.start_ns, f.id));
    let mut new_id = vec![0; flows.len()];
    for (i, f) in flows.iter().enumerate() {
        new_id[f.id] = i;
    }
    for (i, f) in flows.iter_mut().enumerate() {
        f.id = i;
        for a in &mut f.after {
            *a = new_id[*a];
        }
    }
    Ok(flows)
}

fn emit(out: &mut Vec<FlowSpec>, w: usize, p: &Prepared, topo: &TopologySpec, seed: u64) {
    let mut push = |src, dst, bytes, start_ns, stop_ns, after, round| {
        let id = out.len();
        out.push(FlowSpec {
            id,
            src,
            dst,
            bytes,
            start_ns,
            stop_ns,
            after,
            workload: w,
            round,
            repetition: None,
            tag: p.tag.clone(),
        });
        id
    };
    match &p.plan {
        Plan::Long {
            from,
            to,
            start,
            stop,
        } => {
            for &s in from {
                for &d in to.iter().filter(|&&d| d != s) {
                    push(s, d, None, *start, Some(*stop), Vec::new(), 0);
                }
            }
        }
        Plan::Incast {
            senders,
            to,
            bytes,
            start,
            every,
            rounds,
        } => {
            for r in 0..*rounds {
                let at = start + r * every;
                for &s in senders {
                    push(s, *to, Some(*bytes), at, None, Vec::new(), r as u32);
                }
            }
        }
        Plan::AllToAll {
            hosts,
            bytes,
            start,
        } => {
            for &s in hosts {
                for &d in hosts.iter().filter(|&&d| d != s) {
                    push(s, d, Some(*bytes), *start, None, Vec::new(), 0);
                }
            }
        }
        Plan::Allreduce { .. } => allreduce_flows(out, w, p),
        Plan::Cdf {
            hosts,
            cdf,
            load,
            start,
            stop,
            max_flows,
        } => {
            let n = hosts.len();
            let mean = cdf.mean();
            let mut rngs = Vec::with_capacity(n);
            let mut lambda = Vec::with_capacity(n);
            let mut at = Vec::with_capacity(n);
            let mut heap = BinaryHeap::with_capacity(n);
            for (pos, &h) in hosts.iter().enumerate() {
                let mut rng = Rng::new(stream_seed(seed, w, pos));
                // Arrivals per nanosecond.
                let l = load * topo.hosts[h].link.rate_bps as f64 / (8.0 * mean) / 1e9;
                let t = *start as f64 + exponential(&mut rng, l);
                rngs.push(rng);
                lambda.push(l);
                at.push(t);
                heap.push(Reverse((t as u64, pos)));
            }
            let mut made = 0u64;
            while let Some(Reverse((t, pos))) = heap.pop() {
                if t >= *stop {
                    continue;
                }
                if made == *max_flows {
                    break;
                }
                let rng = &mut rngs[pos];
                let j = rng.below(n as u64 - 1) as usize;
                let dst = hosts[if j >= pos { j + 1 } else { j }];
                let bytes = cdf.sample(rng.unit_f64());
                push(hosts[pos], dst, Some(bytes), t, None, Vec::new(), 0);
                made += 1;
                at[pos] += exponential(rng, lambda[pos]);
                heap.push(Reverse((at[pos] as u64, pos)));
            }
        }
        Plan::FlowFile { flows } => {
            for &(src, dst, bytes, at) in flows {
                push(src, dst, Some(bytes), at, None, Vec::new(), 0);
            }
        }
        Plan::PoissonIncast {
            hosts,
            to,
            fan_in,
            bytes,
            lambda,
            start,
            stop,
            max_flows,
        } => {
            let mut rng = Rng::new(stream_seed(seed, w, 0));
            let mut t = *start as f64 + exponential(&mut rng, *lambda);
            let mut made = 0u64;
            let mut round = 0u32;
            let mut pool = Vec::with_capacity(hosts.len());
            while t < *stop as f64 && made + *fan_in as u64 <= *max_flows {
                let recv = match to {
                    Some(r) => *r,
                    None => hosts[rng.below(hosts.len() as u64) as usize],
                };
                pool.clear();
                pool.extend(hosts.iter().copied().filter(|&h| h != recv));
                // The first fan_in of a partial Fisher-Yates shuffle.
                for i in 0..*fan_in {
                    let j = i + rng.below((pool.len() - i) as u64) as usize;
                    pool.swap(i, j);
                    push(
                        pool[i],
                        recv,
                        Some(*bytes),
                        t as u64,
                        None,
                        Vec::new(),
                        round,
                    );
                }
                made += *fan_in as u64;
                round = round.saturating_add(1);
                t += exponential(&mut rng, *lambda);
            }
        }
    }
}

/// The flows of `allreduce` workload `w` (see the module docs).
fn allreduce_flows(out: &mut Vec<FlowSpec>, w: usize, p: &Prepared) {
    let Plan::Allreduce {
        hosts,
        chunk,
        start,
        every,
        repetitions,
    } = &p.plan
    else {
        return;
    };
    let first = out.len();
    let n = hosts.len();
    let steps = 2 * (n - 1);
    // Step k of position p in repetition r is flow
    // first + (r * steps + k) * n + p.
    for r in 0..*repetitions as usize {
        let base = first + r * steps * n;
        for k in 0..steps {
            for pos in 0..n {
                let after = match (k, r) {
                    (0, 0) => Vec::new(),
                    // The barrier: every flow of the last step before.
                    (0, _) => (base - n..base).collect(),
                    _ => vec![base + (k - 1) * n + (pos + n - 1) % n],
                };
                out.push(FlowSpec {
                    id: out.len(),
                    src: hosts[pos],
                    dst: hosts[(pos + 1) % n],
                    bytes: Some(*chunk),
                    start_ns: start + r as u64 * every,
                    stop_ns: None,
                    after,
                    workload: w,
                    round: k as u32,
                    repetition: Some(r as u32),
                    tag: p.tag.clone(),
                });
            }
        }
    }
}

/// An exponential gap with rate `lambda` (per nanosecond), nanoseconds.
fn exponential(rng: &mut Rng, lambda: f64) -> f64 {
    let u = rng.unit_f64();
    let gap = -(1.0 - u).ln() / lambda;
    if gap.is_finite() {
        gap
    } else {
        f64::MAX
    }
}

/// The seed of stream `stream` of workload `workload`: the three mixed
/// (splitmix64's finaliser), so that nearby inputs give unrelated seeds.
fn stream_seed(seed: u64, workload: usize, stream: usize) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(seed ^ (workload as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    mix(a ^ (stream as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03))
}

/// A flow-size distribution: (size in bytes, cumulative probability)
/// points, sampled with linear interpolation between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Cdf {
    points: Vec<(f64, f64)>,
}

/// Why a CDF file cannot be used; `line` is 1-based (0: the whole file).
/// The same error as the HPCC simulator's other files give.
pub type CdfError = super::config::LineError;

impl Cdf {
    /// Reads rows of `size_bytes cumulative`, separated by commas and/or
    /// whitespace. Lines starting with `#` (and anything after a `#`) and
    /// blank lines are skipped, as is a first row of column names. Sizes
    /// and cumulative values must not decrease; the last cumulative value
    /// is 1, or 100 for a file in percent. A first row with a cumulative
    /// value above 0 puts that much probability on its size.
    pub fn parse(text: &str) -> Result<Cdf, CdfError> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut header_allowed = true;
        let mut last_line = 0;
        for (n, raw) in text.lines().enumerate() {
            let line = n + 1;
            let err = |msg: String| CdfError { line, msg };
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let fields: Vec<&str> = l
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .collect();
            let nums: Vec<Option<f64>> = fields.iter().map(|f| f.parse().ok()).collect();
            if std::mem::replace(&mut header_allowed, false) && nums.iter().all(Option::is_none) {
                continue;
            }
            if fields.len() != 2 {
                return Err(err(format!(
                    "expected two columns (size_bytes cumulative), found {}",
                    fields.len()
                )));
            }
            let (Some(size), Some(cum)) = (nums[0], nums[1]) else {
                let bad = if nums[0].is_none() {
                    fields[0]
                } else {
                    fields[1]
                };
                return Err(err(format!("{bad:?} is not a number")));
            };
            if !(size >= 0.0 && size <= MAX_BYTES as f64) {
                return Err(err(format!("size {size} is outside 0..={MAX_BYTES}")));
            }
            if !(0.0..=100.0).contains(&cum) {
                return Err(err(format!("cumulative value {cum} is outside 0..=100")));
            }
            if let Some(&(ps, pc)) = points.last() {
                if size < ps {
                    return Err(err(format!(
                        "size {size} is below the row before ({ps}): sizes must not decrease"
                    )));
                }
                if cum < pc {
                    return Err(err(format!(
                        "cumulative value {cum} is below the row before ({pc}): \
                         a CDF does not decrease"
                    )));
                }
            }
            if points.len() == MAX_CDF_ROWS {
                return Err(err(format!("more than {MAX_CDF_ROWS} rows")));
            }
            points.push((size, cum));
            last_line = line;
        }
        let Some(&(_, last)) = points.last() else {
            return Err(CdfError {
                line: 0,
                msg: "no rows of size_bytes cumulative".into(),
            });
        };
        let scale = if (last - 1.0).abs() <= 1e-6 {
            1.0
        } else if (last - 100.0).abs() <= 1e-4 {
            100.0
        } else {
            return Err(CdfError {
                line: last_line,
                msg: format!("the last cumulative value must be 1 (or 100 in percent), not {last}"),
            });
        };
        for p in &mut points {
            p.1 = (p.1 / scale).min(1.0);
        }
        if let Some(p) = points.last_mut() {
            p.1 = 1.0;
        }
        let cdf = Cdf { points };
        if cdf.mean() < 1.0 {
            return Err(CdfError {
                line: 0,
                msg: "the mean flow size is below one byte".into(),
            });
        }
        Ok(cdf)
    }

    /// Reads and parses the file at `path`; the error names it.
    pub fn load(path: &Path) -> Result<Cdf, String> {
        let p = path.display();
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CDF_FILE + 1).read_to_string(&mut text))
            .map_err(|e| format!("cannot read {p}: {e}"))?;
        if text.len() as u64 > MAX_CDF_FILE {
            return Err(format!("{p} is above {MAX_CDF_FILE} bytes"));
        }
        Cdf::parse(&text).map_err(|e| match e.line {
            0 => format!("{p}: {}", e.msg),
            l => format!("{p}:{l}: {}", e.msg),
        })
    }

    /// The (size in bytes, cumulative probability) points; the last
    /// probability is 1.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The mean size of the distribution the points describe (uniform
    /// between points, the first point's probability on its size).
    pub fn mean(&self) -> f64 {
        let p = &self.points;
        let mut m = p[0].0 * p[0].1;
        for w in p.windows(2) {
            m += (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0;
        }
        m
    }

    /// The size at probability `u` in [0, 1] (inverse transform, linear
    /// between points), rounded, at least 1 byte.
    pub fn sample(&self, u: f64) -> u64 {
        let p = &self.points;
        let u = if u.is_nan() { 0.0 } else { u.clamp(0.0, 1.0) };
        let i = p.partition_point(|&(_, c)| c < u);
        let x = if i == 0 {
            p[0].0
        } else if i >= p.len() {
            p[p.len() - 1].0
        } else {
            let ((s0, c0), (s1, c1)) = (p[i - 1], p[i]);
            s0 + (s1 - s0) * (u - c0) / (c1 - c0)
        };
        (x.round() as u64).max(1)
    }
}

/// Header bytes of every RoCE v2 data packet on an untagged IPv4 frame:
/// Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4 (IBTA A17 §17.3). The
/// simulator adds no preamble, gap or FCS.
pub const PACKET_HEADER_BYTES: u64 = 58;
/// The RETH a WRITE's first packet carries (IBTA §9.3.3).
pub const RETH_BYTES: u64 = 16;

/// Bytes on the wire for `bytes` of payload in packets of at most `mtu`:
/// the payload, every packet's headers and one RETH.
pub fn wire_bytes(bytes: u64, mtu: u32) -> u64 {
    let packets = bytes.div_ceil(u64::from(mtu.max(1))).max(1);
    bytes
        .saturating_add(packets.saturating_mul(PACKET_HEADER_BYTES))
        .saturating_add(RETH_BYTES)
}

/// The completion time of a flow of `bytes` alone on its path: its wire
/// bytes ([`wire_bytes`]) serialised at the bottleneck's `rate_bps`, plus
/// `base_rtt_ns` ([`super::config::PathSpec::base_rtt_ns`]). A lower
/// bound: store-and-forward at the other hops is not counted. `u64::MAX`
/// for a rate of 0.
pub fn ideal_fct_ns(bytes: u64, rate_bps: u64, base_rtt_ns: u64, mtu: u32) -> u64 {
    if rate_bps == 0 {
        return u64::MAX;
    }
    let bits = u128::from(wire_bytes(bytes, mtu)) * 8 * 1_000_000_000;
    let ser = bits.div_ceil(u128::from(rate_bps));
    u64::try_from(ser)
        .unwrap_or(u64::MAX)
        .saturating_add(base_rtt_ns)
}

/// Flow sizes for slowdown reporting (KB = 1000 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SizeBucket {
    /// At most 10 KB.
    #[serde(rename = "<=10KB")]
    UpTo10K,
    /// Above 10 KB, up to 100 KB.
    #[serde(rename = "10-100KB")]
    To100K,
    /// Above 100 KB, up to 1 MB.
    #[serde(rename = "100KB-1MB")]
    To1M,
    /// Above 1 MB, up to 10 MB.
    #[serde(rename = "1-10MB")]
    To10M,
    /// Above 10 MB.
    #[serde(rename = ">10MB")]
    Above10M,
}

impl SizeBucket {
    /// Every bucket, smallest first.
    pub const ALL: [SizeBucket; 5] = [
        SizeBucket::UpTo10K,
        SizeBucket::To100K,
        SizeBucket::To1M,
        SizeBucket::To10M,
        SizeBucket::Above10M,
    ];

    /// The bucket of a flow of `bytes` (upper bounds included).
    pub fn of(bytes: u64) -> SizeBucket {
        match bytes {
            0..=10_000 => SizeBucket::UpTo10K,
            10_001..=100_000 => SizeBucket::To100K,
            100_001..=1_000_000 => SizeBucket::To1M,
            1_000_001..=10_000_000 => SizeBucket::To10M,
            _ => SizeBucket::Above10M,
        }
    }

    /// Its name in reports (as it serialises).
    pub fn label(self) -> &'static str {
        match self {
            SizeBucket::UpTo10K => "<=10KB",
            SizeBucket::To100K => "10-100KB",
            SizeBucket::To1M => "100KB-1MB",
            SizeBucket::To10M => "1-10MB",
            SizeBucket::Above10M => ">10MB",
        }
    }
}

/// One completed flow: its size, completion time and ideal
/// ([`ideal_fct_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FctSample {
    /// The flow's size, bytes.
    pub bytes: u64,
    /// Its flow completion time, nanoseconds.
    pub fct_ns: u64,
    /// Its ideal completion time ([`ideal_fct_ns`]), nanoseconds.
    pub ideal_ns: u64,
}

impl FctSample {
    /// FCT over the ideal (an ideal of 0 counts as 1 ns).
    pub fn slowdown(&self) -> f64 {
        self.fct_ns as f64 / self.ideal_ns.max(1) as f64
    }
}

/// The slowdowns of one size bucket; `None` without flows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SlowdownStats {
    /// The size bucket.
    pub bucket: SizeBucket,
    /// The completed flows in it.
    pub count: usize,
    /// The mean slowdown (FCT over ideal).
    pub mean: Option<f64>,
    /// The median slowdown (nearest rank).
    pub p50: Option<f64>,
    /// The 95th percentile slowdown (nearest rank).
    pub p95: Option<f64>,
    /// The 99th percentile slowdown (nearest rank).
    pub p99: Option<f64>,
}

/// Per-bucket slowdown figures of `samples`, one entry per bucket in
/// [`SizeBucket::ALL`] order.
pub fn slowdown_by_bucket(samples: &[FctSample]) -> Vec<SlowdownStats> {
    let mut by: [Vec<f64>; 5] = Default::default();
    for s in samples {
        let b = SizeBucket::of(s.bytes);
        by[SizeBucket::ALL.iter().position(|&x| x == b).unwrap_or(4)].push(s.slowdown());
    }
    SizeBucket::ALL
        .iter()
        .zip(by.iter_mut())
        .map(|(&bucket, v)| {
            v.sort_by(f64::total_cmp);
            let pct = |p: f64| {
                let n = v.len();
                (n > 0).then(|| v[((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1])
            };
            SlowdownStats {
                bucket,
                count: v.len(),
                mean: (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
                p50: pct(50.0),
                p95: pct(95.0),
                p99: pct(99.0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
