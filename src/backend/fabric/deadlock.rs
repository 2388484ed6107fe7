//! PFC deadlock detection: finding a cyclic buffer dependency among
//! switches, where every queue of a cycle waits for the next one.
//!
//! The wait-for graph has a node per switch egress priority queue
//! (egress link X -> Y, priority p) that is paused by PFC, holds frames,
//! and has sent none for the detection window
//! ([`Fabric::set_deadlock_window`], default [`DEFAULT_DEADLOCK_WINDOW`]):
//! since the later of its pause's start and its last frame's departure.
//! An edge goes from (X -> Y, p) to (Y -> Z, p) when the latter is a node
//! and holds a frame of priority p that came into Y by the port of the
//! link X -> Y: that frame is part of what keeps Y's ingress above XOFF,
//! and it cannot leave while Y -> Z is paused. A cycle in this graph is a
//! deadlock: no queue of it can move until another one of it does.
//!
//! The check runs at the switches' pause refresh times (never per frame),
//! so a deadlock is found within half a pause time after its queues have
//! stalled for the window. Each cycle is reported once while it lasts
//! ([`Fabric::deadlocks`]); one that clears and forms again is reported
//! again. A deadlock keeps its pauses refreshed for ever, so a deadlocked
//! fabric is never idle: drive it with [`Fabric::advance_to`], not
//! [`Fabric::run_until_idle`].

use std::fmt;

use super::sched::PRIORITIES;
use super::{Endpoint, Fabric, SimError, SwitchId};
use crate::time::{Duration, Instant};

/// How long the queues of a cycle must have stalled before it is reported,
/// unless [`Fabric::set_deadlock_window`] says otherwise.
pub const DEFAULT_DEADLOCK_WINDOW: Duration = Duration::from_millis(1);

/// One queue of a deadlock cycle: a switch's egress port and priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DeadlockHop {
    /// The switch that holds the queue (serialised as its index).
    #[serde(serialize_with = "serialize_switch")]
    pub switch: SwitchId,
    /// The switch's egress port (numbered from 0 in connection order).
    pub port: usize,
    /// The priority (0-7) of the queue on that port.
    pub priority: u8,
}

/// A PFC deadlock: when it was found and its cycle of queues, each paused
/// by the switch its link leads to, which holds frames for the next one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadlockReport {
    /// The virtual time of the check that found it.
    #[serde(rename = "at_ns", serialize_with = "serialize_instant")]
    pub at: Instant,
    /// The queues in the order they wait on one another (the last waits
    /// on the first); it starts at the lowest-numbered link direction.
    pub cycle: Vec<DeadlockHop>,
}

fn serialize_switch<S: serde::Serializer>(s: &SwitchId, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_u64(s.index() as u64)
}

fn serialize_instant<S: serde::Serializer>(t: &Instant, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_u64(t.as_nanos())
}

impl fmt::Display for DeadlockHop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} port {} prio {}",
            self.switch, self.port, self.priority
        )
    }
}

impl fmt::Display for DeadlockReport {
    /// `PFC deadlock at 3.214 ms: switch 0 port 2 prio 3 -> switch 1 port
    /// 1 prio 3 -> switch 0 port 2 prio 3` (the first queue again closes
    /// the cycle).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.at.as_nanos() as f64 / 1e6;
        write!(f, "PFC deadlock at {ms:.3} ms: ")?;
        for hop in &self.cycle {
            write!(f, "{hop} -> ")?;
        }
        match self.cycle.first() {
            Some(first) => write!(f, "{first}"),
            None => write!(f, "(empty)"),
        }
    }
}

/// The detector's settings and findings.
#[derive(Debug)]
pub(super) struct DeadlockDetector {
    window: Option<Duration>,
    reports: Vec<DeadlockReport>,
    /// The cycles found by the last check, as (channel index, priority),
    /// so that a lasting one is reported once.
    live: Vec<Vec<(usize, u8)>>,
}

impl Default for DeadlockDetector {
    fn default() -> Self {
        DeadlockDetector {
            window: Some(DEFAULT_DEADLOCK_WINDOW),
            reports: Vec::new(),
            live: Vec::new(),
        }
    }
}

impl DeadlockDetector {
    pub(super) fn reports(&self) -> &[DeadlockReport] {
        &self.reports
    }
}

impl Fabric {
    /// How long a cycle's queues must have stalled before it counts as a
    /// deadlock (default [`DEFAULT_DEADLOCK_WINDOW`]); `None` turns
    /// detection off. A window of zero is refused.
    pub fn set_deadlock_window(&mut self, window: Option<Duration>) -> Result<(), SimError> {
        if window == Some(Duration::ZERO) {
            return Err(SimError::DeadlockWindowZero);
        }
        self.deadlock.window = window;
        Ok(())
    }

    /// Builds the wait-for graph of stalled switch queues and reports its
    /// new cycles (see the module docs).
    pub(super) fn check_deadlocks(&mut self) {
        let Some(window) = self.deadlock.window else {
            return;
        };
        let now = self.now;
        let mut nodes: Vec<(usize, u8)> = Vec::new();
        for (i, c) in self.channels.iter().enumerate() {
            if !matches!(c.from, Endpoint::Switch { .. }) {
                continue;
            }
            let paused = c.queue.paused_classes();
            for p in 0..PRIORITIES as u8 {
                if paused & (1 << p) == 0 {
                    continue;
                }
                if let Some(since) = c.queue.stalled_since(p) {
                    if now.saturating_since(since) >= window {
                        nodes.push((i, p));
                    }
                }
            }
        }
        if nodes.is_empty() {
            self.deadlock.live.clear();
            return;
        }
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (u, &(i, p)) in nodes.iter().enumerate() {
            let Endpoint::Switch { switch: y, port } = self.channels[i].to else {
                continue;
            };
            for (v, &(j, q)) in nodes.iter().enumerate() {
                let c = &self.channels[j];
                if q == p
                    && matches!(c.from, Endpoint::Switch { switch, .. } if switch == y)
                    && c.queue.holds_from(p, port as u32)
                {
                    adj[u].push(v);
                }
            }
        }
        let mut found: Vec<Vec<(usize, u8)>> = cycles(&adj)
            .into_iter()
            .map(|cyc| {
                let mut c: Vec<(usize, u8)> = cyc.into_iter().map(|u| nodes[u]).collect();
                let first = (0..c.len()).min_by_key(|&k| c[k]).unwrap_or(0);
                c.rotate_left(first);
                c
            })
            .collect();
        found.sort();
        found.dedup();
        for cyc in &found {
            if self.deadlock.live.contains(cyc) {
                continue;
            }
            let cycle = cyc
                .iter()
                .filter_map(|&(i, priority)| match self.channels[i].from {
                    Endpoint::Switch { switch, port } => Some(DeadlockHop {
                        switch,
                        port,
                        priority,
                    }),
                    Endpoint::Host(_) => None,
                })
                .collect();
            self.deadlock
                .reports
                .push(DeadlockReport { at: now, cycle });
        }
        self.deadlock.live = found;
    }
}

/// The cycles a depth-first search meets as back edges, each as its
/// nodes in edge order (every cycle of the graph shares a node with one
/// of these; enough to say that there is a deadlock and where).
fn cycles(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const NEW: u8 = 0;
    const OPEN: u8 = 1;
    let mut state = vec![NEW; adj.len()];
    let mut found = Vec::new();
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for s in 0..adj.len() {
        if state[s] != NEW {
            continue;
        }
        state[s] = OPEN;
        stack.push((s, 0));
        while let Some(top) = stack.last_mut() {
            let (u, k) = *top;
            let Some(&v) = adj[u].get(k) else {
                state[u] = 2;
                stack.pop();
                continue;
            };
            top.1 += 1;
            match state[v] {
                NEW => {
                    state[v] = OPEN;
                    stack.push((v, 0));
                }
                OPEN => {
                    if let Some(at) = stack.iter().position(|&(w, _)| w == v) {
                        found.push(stack[at..].iter().map(|&(w, _)| w).collect());
                    }
                }
                _ => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::cycles;

    #[test]
    fn back_edges_give_the_cycles_and_nothing_else() {
        // 0 -> 1 -> 2 -> 0, 2 -> 3 (a dead end), 4 -> 4, 5 -> 1.
        let adj = vec![vec![1], vec![2], vec![3, 0], vec![], vec![4], vec![1]];
        assert_eq!(cycles(&adj), vec![vec![0, 1, 2], vec![4]]);
        assert!(cycles(&[vec![1], vec![2], vec![]]).is_empty());
        assert!(cycles(&[]).is_empty());
    }
}
