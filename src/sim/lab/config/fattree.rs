//! The `fat-tree` topology: its keys, their checks and its wiring.
//!
//! Three tiers of switches. A pod holds `tors_per_pod` edge (ToR)
//! switches and `aggs_per_pod` aggregation switches, every ToR linked to
//! every aggregation switch of its pod; the `cores` core switches are
//! split into `aggs_per_pod` equal groups, and the j-th aggregation
//! switch of every pod is linked to each core of group j. A k-ary fat
//! tree (Al-Fares, Loukissas, Vahdat, "A Scalable, Commodity Data Center
//! Network Architecture", SIGCOMM 2008) is `k` pods of k/2 ToRs and k/2
//! aggregation switches, (k/2)^2 cores and k/2 hosts per ToR. The
//! 320-host fat tree of the HPCC paper's simulations (Li et al., "HPCC:
//! High Precision Congestion Control", SIGCOMM 2019, section 5) is 5 pods
//! of 4 ToRs and 4 aggregation switches, 16 cores and 16 hosts per ToR,
//! wired as this module wires it: the HPCC simulator's topology file
//! `simulation/mix/fat.txt` (repository
//! alibaba-edu/High-Precision-Congestion-Control) links each ToR to the
//! four aggregation switches of its pod, and the j-th aggregation switch
//! of each pod to cores 4j..4j+3, hosts at 100 Gb/s and switches at
//! 400 Gb/s, every link 1 us.
//!
//! Names: switches `tor0`.., `agg0`.., `core0`.., numbered across pods
//! (ToR t of pod p is `tor<p * tors_per_pod + t>`); hosts `h0`.., ToR by
//! ToR, so that host i is the HPCC simulator's node i; groups `tor<N>`
//! (the hosts of that ToR), `pod<P>` (the hosts of that pod) and `all`.
//! Links are made ToR to aggregation (ToR by ToR), then aggregation to
//! core (aggregation switch by aggregation switch), the order of
//! `fat.txt`.

use super::topology::{HostSpec, LinkSpec, SwitchLinkSpec, SwitchSpec, TopologySpec};
use super::{KeyError, TopologyConfig, MAX_HOSTS, MAX_LINKS, MAX_SWITCHES};

/// A fat tree's shape, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FatTree {
    pub pods: usize,
    pub tors_per_pod: usize,
    pub aggs_per_pod: usize,
    pub cores: usize,
    pub hosts_per_tor: usize,
}

fn key_err(key: &str, msg: impl Into<String>) -> KeyError {
    KeyError::new(format!("topology.{key}"), msg)
}

impl FatTree {
    /// The shape the `[topology]` keys give: `k`, or the five explicit
    /// keys, each at least 1, with `cores` a multiple of `aggs_per_pod`
    /// and the hosts, switches and links within the limits.
    pub(crate) fn from_config(t: &TopologyConfig) -> Result<FatTree, KeyError> {
        let explicit = [
            ("pods", t.pods),
            ("tors_per_pod", t.tors_per_pod),
            ("aggs_per_pod", t.aggs_per_pod),
            ("cores", t.cores),
            ("hosts_per_tor", t.hosts_per_tor),
        ];
        let shape = match t.k {
            Some(k) => {
                if let Some((key, _)) = explicit.iter().find(|(_, v)| v.is_some()) {
                    return Err(key_err(
                        key,
                        "is set by k (k is shorthand for pods, tors_per_pod, aggs_per_pod, \
                         cores and hosts_per_tor): give k or those, not both",
                    ));
                }
                if k < 2 || k % 2 != 0 {
                    return Err(key_err(
                        "k",
                        format!(
                            "{k} is not an even number of at least 2 (a k-ary fat tree has k/2 \
                             ToR and k/2 aggregation switches per pod)"
                        ),
                    ));
                }
                let h = k / 2;
                FatTree {
                    pods: k,
                    tors_per_pod: h,
                    aggs_per_pod: h,
                    cores: h.saturating_mul(h),
                    hosts_per_tor: h,
                }
            }
            None => {
                let get = |key: &str, v: Option<usize>| match v {
                    None => Err(key_err(
                        key,
                        "is required by fat-tree topologies (or give k, for a k-ary fat tree)",
                    )),
                    Some(0) => Err(key_err(key, "must be at least 1")),
                    Some(n) => Ok(n),
                };
                FatTree {
                    pods: get("pods", t.pods)?,
                    tors_per_pod: get("tors_per_pod", t.tors_per_pod)?,
                    aggs_per_pod: get("aggs_per_pod", t.aggs_per_pod)?,
                    cores: get("cores", t.cores)?,
                    hosts_per_tor: get("hosts_per_tor", t.hosts_per_tor)?,
                }
            }
        };
        shape.check(t.k.is_some())?;
        Ok(shape)
    }

    /// Cores divide among the aggregation switches of a pod; the counts
    /// are within the limits. `by_k`: the shape came from `k` (errors
    /// name it).
    fn check(&self, by_k: bool) -> Result<(), KeyError> {
        let key = |k: &str| if by_k { "k".to_string() } else { k.to_string() };
        if self.cores % self.aggs_per_pod != 0 {
            return Err(key_err(
                "cores",
                format!(
                    "{} cores do not divide among {} aggregation switches per pod (each is \
                     linked to cores / aggs_per_pod cores)",
                    self.cores, self.aggs_per_pod
                ),
            ));
        }
        let mul = |a: usize, b: usize| a.saturating_mul(b);
        let tors = mul(self.pods, self.tors_per_pod);
        let aggs = mul(self.pods, self.aggs_per_pod);
        let hosts = mul(tors, self.hosts_per_tor);
        if hosts > MAX_HOSTS {
            return Err(key_err(
                &key("hosts_per_tor"),
                format!(
                    "{tors} ToRs of {} hosts are more than {MAX_HOSTS} hosts",
                    self.hosts_per_tor
                ),
            ));
        }
        let switches = tors.saturating_add(aggs).saturating_add(self.cores);
        if switches > MAX_SWITCHES {
            return Err(key_err(
                &key("pods"),
                format!(
                    "{tors} ToRs, {aggs} aggregation and {} core switches are more than \
                     {MAX_SWITCHES} switches",
                    self.cores
                ),
            ));
        }
        // Every ToR to every aggregation switch of its pod; every
        // aggregation switch to cores / aggs_per_pod cores.
        let links = mul(tors, self.aggs_per_pod).saturating_add(mul(self.pods, self.cores));
        if links > MAX_LINKS {
            return Err(key_err(
                &key("pods"),
                format!("the fat tree has {links} switch-to-switch links, more than {MAX_LINKS}"),
            ));
        }
        Ok(())
    }

    /// Adds the switches, hosts, links and groups to `topo` (empty).
    pub(crate) fn build(&self, topo: &mut TopologySpec, host_link: LinkSpec, fabric: LinkSpec) {
        let (p, tp, ap) = (self.pods, self.tors_per_pod, self.aggs_per_pod);
        let tors = p * tp;
        let aggs = p * ap;
        let switch = |name: String| SwitchSpec { name };
        topo.switches
            .extend((0..tors).map(|i| switch(format!("tor{i}"))));
        topo.switches
            .extend((0..aggs).map(|i| switch(format!("agg{i}"))));
        topo.switches
            .extend((0..self.cores).map(|i| switch(format!("core{i}"))));
        let agg_index = |pod: usize, j: usize| tors + pod * ap + j;
        let core_index = |c: usize| tors + aggs + c;
        let per = self.hosts_per_tor;
        for tor in 0..tors {
            topo.hosts.extend((0..per).map(|i| HostSpec {
                name: format!("h{}", tor * per + i),
                switch: tor,
                link: host_link,
            }));
            topo.groups
                .insert(format!("tor{tor}"), (tor * per..(tor + 1) * per).collect());
        }
        for pod in 0..p {
            let hosts = pod * tp * per..(pod + 1) * tp * per;
            topo.groups.insert(format!("pod{pod}"), hosts.collect());
        }
        for tor in 0..tors {
            let pod = tor / tp;
            topo.links.extend((0..ap).map(|j| SwitchLinkSpec {
                a: tor,
                b: agg_index(pod, j),
                link: fabric,
            }));
        }
        let group = self.cores / ap;
        for pod in 0..p {
            for j in 0..ap {
                topo.links.extend((0..group).map(|c| SwitchLinkSpec {
                    a: agg_index(pod, j),
                    b: core_index(j * group + c),
                    link: fabric,
                }));
            }
        }
    }
}
