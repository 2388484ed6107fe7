//! The resolved topology of an experiment: switches, hosts and links by
//! index, host groups, and the lookups by name that the rest of the
//! description uses.

use super::fattree::FatTree;
use super::hpcc_files::HpccTopology;
use super::{
    gbps, us, KeyError, PortRef, TopologyConfig, TopologyKind, MAX_DELAY_NS, MAX_HOSTS, MAX_LINKS,
    MAX_SWITCHES,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// A link's rate and one-way propagation delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LinkSpec {
    /// The link's rate, bits per second.
    pub rate_bps: u64,
    /// The link's one-way propagation delay, nanoseconds.
    pub delay_ns: u64,
}

/// A switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwitchSpec {
    /// Its name, unique among hosts and switches.
    pub name: String,
}

/// A host and its one link, to `switch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostSpec {
    /// Its name, unique among hosts and switches.
    pub name: String,
    /// The switch it is attached to: an index in [`TopologySpec::switches`].
    pub switch: usize,
    /// Its link to that switch (both directions).
    pub link: LinkSpec,
}

/// A link between switches `a` and `b`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwitchLinkSpec {
    /// One switch: an index in [`TopologySpec::switches`].
    pub a: usize,
    /// The other switch.
    pub b: usize,
    /// The link's rate and delay (both directions).
    pub link: LinkSpec,
}

/// What a switch port leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Peer {
    /// A host attached to the switch: its index in [`TopologySpec::hosts`].
    Host(usize),
    /// Another switch, over link `link` of [`TopologySpec::links`].
    Switch {
        /// The switch at the other end: its index in [`TopologySpec::switches`].
        switch: usize,
        /// The link: its index in [`TopologySpec::links`].
        link: usize,
    },
}

/// A route's next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NextHop {
    /// A neighbouring switch (any of the links to it).
    Switch(usize),
    /// The destination host, attached to the routing switch.
    Host(usize),
}

/// A shortest path between two hosts: its link count, slowest link and
/// one-way propagation delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PathSpec {
    /// The links on the path, the two host links included.
    pub hops: usize,
    /// The rate of its slowest link, bits per second.
    pub bottleneck_bps: u64,
    /// Its one-way propagation delay over every link, nanoseconds.
    pub delay_ns: u64,
}

impl PathSpec {
    /// Twice the propagation delay: the round trip of a frame that takes
    /// no time to send.
    pub fn base_rtt_ns(&self) -> u64 {
        self.delay_ns.saturating_mul(2)
    }
}

/// A topology by index. Host names, switch names and group names are
/// looked up by [`TopologySpec::hosts_named`] and friends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopologySpec {
    /// The switches, in the order the topology makes them (a switch's index).
    pub switches: Vec<SwitchSpec>,
    /// The hosts, in the order the topology makes them (a host's index).
    pub hosts: Vec<HostSpec>,
    /// The switch-to-switch links, in the order the topology makes them.
    pub links: Vec<SwitchLinkSpec>,
    /// Group name -> hosts, in the order the group lists them.
    pub groups: BTreeMap<String, Vec<usize>>,
    /// The path MTU, bytes.
    pub mtu: u32,
}

fn check_name(key: &str, name: &str) -> Result<(), KeyError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(KeyError::new(
            key,
            format!("{name:?} is not a name: use letters, digits, '.', '_' or '-'"),
        ));
    }
    Ok(())
}

/// The error for a kind-specific key given to another kind.
fn only_for(key: &str, kind: &str, have: TopologyKind) -> KeyError {
    KeyError::new(
        format!("topology.{key}"),
        format!("is a key of {kind} topologies, not {}", have.name()),
    )
}

fn count(key: &str, v: Option<usize>, kind: TopologyKind, max: usize) -> Result<usize, KeyError> {
    let n = v.ok_or_else(|| {
        KeyError::new(
            format!("topology.{key}"),
            format!("is required by {} topologies", kind.name()),
        )
    })?;
    if n == 0 || n > max {
        return Err(KeyError::new(
            format!("topology.{key}"),
            format!("{n} is outside 1..={max}"),
        ));
    }
    Ok(n)
}

impl TopologySpec {
    /// Builds the topology the `[topology]` table describes; `dir` is
    /// where a relative `file` starts (the experiment's folder).
    pub(crate) fn build(t: &TopologyConfig, dir: &Path) -> Result<TopologySpec, KeyError> {
        use TopologyKind as K;
        let host_link = t.host_link.resolve("topology.host_link")?;
        let fabric_link = match &t.fabric_link {
            Some(l) => l.resolve("topology.fabric_link")?,
            None => host_link,
        };
        if crate::transport::Mtu::from_bytes(t.mtu).is_none() {
            return Err(KeyError::new(
                "topology.mtu",
                format!("{} is not one of 256, 512, 1024, 2048, 4096", t.mtu),
            ));
        }
        let given = [
            ("senders", t.senders.is_some(), K::Incast),
            ("pairs", t.pairs.is_some(), K::Dumbbell),
            ("leaves", t.leaves.is_some(), K::LeafSpine),
            ("spines", t.spines.is_some(), K::LeafSpine),
            ("hosts_per_leaf", t.hosts_per_leaf.is_some(), K::LeafSpine),
            ("switches", t.switches.is_some(), K::Custom),
            ("hosts", t.hosts.is_some(), K::Custom),
            ("links", t.links.is_some(), K::Custom),
            ("k", t.k.is_some(), K::FatTree),
            ("pods", t.pods.is_some(), K::FatTree),
            ("tors_per_pod", t.tors_per_pod.is_some(), K::FatTree),
            ("aggs_per_pod", t.aggs_per_pod.is_some(), K::FatTree),
            ("cores", t.cores.is_some(), K::FatTree),
            ("hosts_per_tor", t.hosts_per_tor.is_some(), K::FatTree),
            ("file", t.file.is_some(), K::Hpcc),
        ];
        if let Some((key, _, kind)) = given.iter().find(|(_, g, k)| *g && *k != t.kind) {
            return Err(only_for(key, kind.name(), t.kind));
        }
        let mut topo = TopologySpec {
            switches: Vec::new(),
            hosts: Vec::new(),
            links: Vec::new(),
            groups: BTreeMap::new(),
            mtu: t.mtu,
        };
        let host = |name: String, switch: usize| HostSpec {
            name,
            switch,
            link: host_link,
        };
        match t.kind {
            K::Incast => {
                let n = count("senders", t.senders, t.kind, MAX_HOSTS - 1)?;
                topo.switches.push(SwitchSpec { name: "sw".into() });
                topo.hosts.push(host("recv".into(), 0));
                topo.hosts.extend((0..n).map(|i| host(format!("s{i}"), 0)));
                topo.groups.insert("receiver".into(), vec![0]);
                topo.groups.insert("senders".into(), (1..=n).collect());
            }
            K::Dumbbell => {
                let n = count("pairs", t.pairs, t.kind, MAX_HOSTS / 2)?;
                for side in ["left", "right"] {
                    topo.switches.push(SwitchSpec { name: side.into() });
                }
                topo.hosts.extend((0..n).map(|i| host(format!("L{i}"), 0)));
                topo.hosts.extend((0..n).map(|i| host(format!("R{i}"), 1)));
                topo.groups.insert("left".into(), (0..n).collect());
                topo.groups.insert("right".into(), (n..2 * n).collect());
                topo.links.push(SwitchLinkSpec {
                    a: 0,
                    b: 1,
                    link: fabric_link,
                });
            }
            K::LeafSpine => {
                let leaves = count("leaves", t.leaves, t.kind, MAX_SWITCHES)?;
                let spines = count("spines", t.spines, t.kind, MAX_SWITCHES)?;
                let per = count("hosts_per_leaf", t.hosts_per_leaf, t.kind, MAX_HOSTS)?;
                if leaves + spines > MAX_SWITCHES {
                    return Err(KeyError::new(
                        "topology.spines",
                        format!(
                            "{leaves} leaves and {spines} spines are more than {MAX_SWITCHES} switches"
                        ),
                    ));
                }
                if leaves * per > MAX_HOSTS {
                    return Err(KeyError::new(
                        "topology.hosts_per_leaf",
                        format!("{leaves} leaves of {per} hosts are more than {MAX_HOSTS} hosts"),
                    ));
                }
                if leaves * spines > MAX_LINKS {
                    return Err(KeyError::new(
                        "topology.spines",
                        format!(
                            "{leaves} leaves x {spines} spines are more than {MAX_LINKS} links"
                        ),
                    ));
                }
                topo.switches.extend((0..leaves).map(|l| SwitchSpec {
                    name: format!("leaf{l}"),
                }));
                topo.switches.extend((0..spines).map(|s| SwitchSpec {
                    name: format!("spine{s}"),
                }));
                for l in 0..leaves {
                    topo.hosts
                        .extend((0..per).map(|i| host(format!("h{l}-{i}"), l)));
                    topo.groups
                        .insert(format!("leaf{l}"), (l * per..(l + 1) * per).collect());
                    topo.links.extend((0..spines).map(|s| SwitchLinkSpec {
                        a: l,
                        b: leaves + s,
                        link: fabric_link,
                    }));
                }
            }
            K::Custom => topo.build_custom(t, host_link, fabric_link)?,
            K::FatTree => FatTree::from_config(t)?.build(&mut topo, host_link, fabric_link),
            K::Hpcc => topo.build_hpcc(t, dir)?,
        }
        if topo.hosts.len() > MAX_HOSTS {
            return Err(KeyError::new(
                "topology.hosts",
                format!(
                    "{} hosts are above the limit of {MAX_HOSTS}",
                    topo.hosts.len()
                ),
            ));
        }
        topo.groups
            .insert("all".into(), (0..topo.hosts.len()).collect());
        for (name, members) in &t.groups {
            let key = format!("topology.groups.{name}");
            check_name(&key, name)?;
            if topo.host_index(name).is_some() || topo.groups.contains_key(name) {
                return Err(KeyError::new(
                    key,
                    format!("{name:?} is already the name of a host or group"),
                ));
            }
            let hosts = topo
                .hosts_named(&members.0)
                .map_err(|e| KeyError::new(&key, e))?;
            if hosts.is_empty() {
                return Err(KeyError::new(key, "has no hosts"));
            }
            topo.groups.insert(name.clone(), hosts);
        }
        topo.check_connected()?;
        Ok(topo)
    }

    fn build_custom(
        &mut self,
        t: &TopologyConfig,
        host_link: LinkSpec,
        fabric_link: LinkSpec,
    ) -> Result<(), KeyError> {
        let switches = t.switches.as_deref().unwrap_or_default();
        let hosts = t.hosts.as_deref().unwrap_or_default();
        let links = t.links.as_deref().unwrap_or_default();
        if switches.is_empty() {
            return Err(KeyError::new(
                "topology.switches",
                "a custom topology needs at least one switch",
            ));
        }
        if hosts.is_empty() {
            return Err(KeyError::new(
                "topology.hosts",
                "a custom topology needs at least one host",
            ));
        }
        if switches.len() > MAX_SWITCHES {
            return Err(KeyError::new(
                "topology.switches",
                format!(
                    "{} switches are above the limit of {MAX_SWITCHES}",
                    switches.len()
                ),
            ));
        }
        if links.len() > MAX_LINKS {
            return Err(KeyError::new(
                "topology.links",
                format!("{} links are above the limit of {MAX_LINKS}", links.len()),
            ));
        }
        if hosts.len() > MAX_HOSTS {
            return Err(KeyError::new(
                "topology.hosts",
                format!("{} hosts are above the limit of {MAX_HOSTS}", hosts.len()),
            ));
        }
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut taken = BTreeSet::new();
        for (i, s) in switches.iter().enumerate() {
            let key = format!("topology.switches.{i}");
            check_name(&key, s)?;
            if !taken.insert(s.as_str()) {
                return Err(KeyError::new(key, format!("{s:?} is named twice")));
            }
            names.insert(s, i);
            self.switches.push(SwitchSpec { name: s.clone() });
        }
        let link_of = |rate: Option<f64>, delay: Option<f64>, dflt: LinkSpec, key: &str| {
            Ok::<_, KeyError>(LinkSpec {
                rate_bps: match rate {
                    Some(r) => gbps(&format!("{key}.rate_gbps"), r)?,
                    None => dflt.rate_bps,
                },
                delay_ns: match delay {
                    Some(d) => us(&format!("{key}.delay_us"), d, MAX_DELAY_NS)?,
                    None => dflt.delay_ns,
                },
            })
        };
        for (i, h) in hosts.iter().enumerate() {
            let key = format!("topology.hosts.{i}");
            check_name(&format!("{key}.name"), &h.name)?;
            if !taken.insert(h.name.as_str()) {
                return Err(KeyError::new(
                    format!("{key}.name"),
                    format!("{:?} is already the name of a host or switch", h.name),
                ));
            }
            let switch = *names.get(h.switch.as_str()).ok_or_else(|| {
                KeyError::new(
                    format!("{key}.switch"),
                    format!("no switch is named {:?}", h.switch),
                )
            })?;
            let link = link_of(h.rate_gbps, h.delay_us, host_link, &key)?;
            self.hosts.push(HostSpec {
                name: h.name.clone(),
                switch,
                link,
            });
        }
        for (i, l) in links.iter().enumerate() {
            let key = format!("topology.links.{i}");
            let end = |name: &str, k: &str| {
                names.get(name).copied().ok_or_else(|| {
                    KeyError::new(format!("{key}.{k}"), format!("no switch is named {name:?}"))
                })
            };
            let (a, b) = (end(&l.a, "a")?, end(&l.b, "b")?);
            if a == b {
                return Err(KeyError::new(
                    format!("{key}.b"),
                    format!("a link joins two switches, not {} to itself", l.a),
                ));
            }
            let link = link_of(l.rate_gbps, l.delay_us, fabric_link, &key)?;
            self.links.push(SwitchLinkSpec { a, b, link });
        }
        Ok(())
    }

    /// The nodes of an HPCC simulator topology file, named `n<id>`: the
    /// switches and the hosts each in id order, the links in file order;
    /// a group per switch with hosts, named after it.
    fn build_hpcc(&mut self, t: &TopologyConfig, dir: &Path) -> Result<(), KeyError> {
        let file = t.file.as_ref().ok_or_else(|| {
            KeyError::new(
                "topology.file",
                "is required by hpcc topologies (the HPCC simulator's topology file)",
            )
        })?;
        if t.fabric_link.is_some() {
            return Err(KeyError::new(
                "topology.fabric_link",
                "is not used by hpcc topologies: their file gives every link's rate and delay",
            ));
        }
        let h =
            HpccTopology::load(&dir.join(file)).map_err(|e| KeyError::new("topology.file", e))?;
        let mut index = vec![0; h.nodes];
        for id in (0..h.nodes).filter(|&i| h.is_switch[i]) {
            index[id] = self.switches.len();
            self.switches.push(SwitchSpec {
                name: format!("n{id}"),
            });
        }
        let mut host_links = vec![None; h.nodes];
        for l in &h.links {
            let link = LinkSpec {
                rate_bps: l.rate_bps,
                delay_ns: l.delay_ns,
            };
            match (h.is_switch[l.a], h.is_switch[l.b]) {
                (true, true) => self.links.push(SwitchLinkSpec {
                    a: index[l.a],
                    b: index[l.b],
                    link,
                }),
                (true, false) => host_links[l.b] = Some((index[l.a], link)),
                _ => host_links[l.a] = Some((index[l.b], link)),
            }
        }
        for id in (0..h.nodes).filter(|&i| !h.is_switch[i]) {
            // The parser gave every host its one link.
            let Some((switch, link)) = host_links[id] else {
                continue;
            };
            let host = self.hosts.len();
            self.hosts.push(HostSpec {
                name: format!("n{id}"),
                switch,
                link,
            });
            let group = self.switches[switch].name.clone();
            self.groups.entry(group).or_default().push(host);
        }
        Ok(())
    }

    /// Every switch reaches every other over switch-to-switch links.
    fn check_connected(&self) -> Result<(), KeyError> {
        let adj = self.adjacency();
        let mut seen = vec![false; self.switches.len()];
        let mut queue = VecDeque::from([0]);
        seen[0] = true;
        while let Some(s) = queue.pop_front() {
            for &(t, _) in &adj[s] {
                if !std::mem::replace(&mut seen[t], true) {
                    queue.push_back(t);
                }
            }
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(KeyError::new(
                "topology.links",
                format!(
                    "switch {} is not connected to switch {}",
                    self.switches[i].name, self.switches[0].name
                ),
            ));
        }
        Ok(())
    }

    /// For each switch, (neighbour switch, link index) in link order.
    fn adjacency(&self) -> Vec<Vec<(usize, usize)>> {
        let mut adj = vec![Vec::new(); self.switches.len()];
        for (i, l) in self.links.iter().enumerate() {
            adj[l.a].push((l.b, i));
            adj[l.b].push((l.a, i));
        }
        adj
    }

    /// The host called `name`.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }

    /// The switch called `name`.
    pub fn switch_index(&self, name: &str) -> Option<usize> {
        self.switches.iter().position(|s| s.name == name)
    }

    /// The hosts `names` name, each a host or a group, in order, without
    /// repeats. The error names what is neither.
    pub fn hosts_named(&self, names: &[String]) -> Result<Vec<usize>, String> {
        let mut out = Vec::new();
        let mut seen = vec![false; self.hosts.len()];
        let mut add = |h: usize, out: &mut Vec<usize>| {
            if !std::mem::replace(&mut seen[h], true) {
                out.push(h);
            }
        };
        for n in names {
            if let Some(h) = self.host_index(n) {
                add(h, &mut out);
            } else if let Some(g) = self.groups.get(n) {
                for &h in g {
                    add(h, &mut out);
                }
            } else {
                return Err(format!("no host or group is named {n:?}"));
            }
        }
        Ok(out)
    }

    /// Indices of the links between switches `a` and `b`, in link order.
    pub fn links_between(&self, a: usize, b: usize) -> Vec<usize> {
        self.links
            .iter()
            .enumerate()
            .filter(|(_, l)| (l.a, l.b) == (a, b) || (l.a, l.b) == (b, a))
            .map(|(i, _)| i)
            .collect()
    }

    /// The ports of `switch`, numbered as their index here: the hosts
    /// attached to it (in host order), then its links (in link order).
    pub fn ports(&self, switch: usize) -> Vec<Peer> {
        let hosts = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.switch == switch)
            .map(|(i, _)| Peer::Host(i));
        let links = self.links.iter().enumerate().filter_map(|(i, l)| {
            if l.a == switch {
                Some(Peer::Switch {
                    switch: l.b,
                    link: i,
                })
            } else if l.b == switch {
                Some(Peer::Switch {
                    switch: l.a,
                    link: i,
                })
            } else {
                None
            }
        });
        hosts.chain(links).collect()
    }

    /// The port `spec` names: `switch:N` or `switch:neighbour[#n]`.
    pub fn port_named(&self, spec: &str) -> Result<PortRef, String> {
        let (sw, port) = spec
            .split_once(':')
            .ok_or_else(|| format!("{spec:?} is not \"switch:port\""))?;
        let switch = self
            .switch_index(sw)
            .ok_or_else(|| format!("{spec:?}: no switch is named {sw:?}"))?;
        let ports = self.ports(switch);
        if let Ok(n) = port.parse::<usize>() {
            return if n < ports.len() {
                Ok(PortRef { switch, port: n })
            } else {
                Err(format!("{spec:?}: {sw} has {} ports", ports.len()))
            };
        }
        let (peer, nth) = match port.split_once('#') {
            Some((p, n)) => (
                p,
                n.parse::<usize>()
                    .map_err(|_| format!("{spec:?}: {n:?} is not a number"))?,
            ),
            None => (port, 0),
        };
        let found = ports
            .iter()
            .enumerate()
            .filter(|(_, p)| match **p {
                Peer::Host(h) => self.hosts[h].name == peer,
                Peer::Switch { switch, .. } => self.switches[switch].name == peer,
            })
            .nth(nth);
        match found {
            Some((port, _)) => Ok(PortRef { switch, port }),
            None => {
                let to: Vec<&str> = ports
                    .iter()
                    .map(|p| match *p {
                        Peer::Host(h) => self.hosts[h].name.as_str(),
                        Peer::Switch { switch, .. } => self.switches[switch].name.as_str(),
                    })
                    .collect();
                Err(format!(
                    "{spec:?}: {sw} has no port {port:?} (its ports lead to {})",
                    to.join(", ")
                ))
            }
        }
    }

    /// A shortest path (fewest links) from host `src` to host `dst`:
    /// among those, the one with the fastest slowest link, then the
    /// least delay. `None` when `src == dst` or either is not a host.
    pub fn path(&self, src: usize, dst: usize) -> Option<PathSpec> {
        let (s, d) = (self.hosts.get(src)?, self.hosts.get(dst)?);
        if src == dst {
            return None;
        }
        let edge_rate = s.link.rate_bps.min(d.link.rate_bps);
        let edge_delay = s.link.delay_ns.saturating_add(d.link.delay_ns);
        // Best (hops, bottleneck, delay) from s's switch to each switch.
        let n = self.switches.len();
        let mut dist = vec![usize::MAX; n];
        let mut best = vec![(0u64, u64::MAX); n];
        let adj = self.adjacency();
        dist[s.switch] = 0;
        best[s.switch] = (u64::MAX, 0);
        let mut queue = VecDeque::from([s.switch]);
        while let Some(u) = queue.pop_front() {
            for &(v, li) in &adj[u] {
                let l = self.links[li].link;
                let cand = (
                    best[u].0.min(l.rate_bps),
                    best[u].1.saturating_add(l.delay_ns),
                );
                if dist[v] == usize::MAX {
                    dist[v] = dist[u] + 1;
                    best[v] = cand;
                    queue.push_back(v);
                } else if dist[v] == dist[u] + 1
                    && (cand.0 > best[v].0 || (cand.0 == best[v].0 && cand.1 < best[v].1))
                {
                    best[v] = cand;
                }
            }
        }
        if dist[d.switch] == usize::MAX {
            return None;
        }
        let (rate, delay) = best[d.switch];
        Some(PathSpec {
            hops: dist[d.switch] + 2,
            bottleneck_bps: rate.min(edge_rate),
            delay_ns: delay.saturating_add(edge_delay),
        })
    }
}

impl TopologySpec {
    /// The hosts of the group named `name`.
    pub fn group(&self, name: &str) -> Option<&[usize]> {
        self.groups.get(name).map(Vec::as_slice)
    }
}
