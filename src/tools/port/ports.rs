//! Opening what a config describes: the EAL, one mempool, and every port
//! (ring links as pairs), ready for poll loops.

use crate::config::{Config, PortConfig};
use crate::dpdk::{self, DeviceSpec, Eal, Mempool, Port, QueueId};
use std::collections::HashMap;

/// The EAL, the mempool and the open ports of a config.
pub struct Ports {
    /// The DPDK environment, started with the chosen ports' devices.
    pub eal: Eal,
    /// The one mbuf pool every port draws from (`[mempool]` of the config).
    pub pool: Mempool,
    ports: HashMap<String, (PortConfig, Port)>,
}

impl Ports {
    /// Starts the EAL with the devices of `names` (all ports when empty) and
    /// opens those ports.
    pub fn open(cfg: &Config, names: &[&str]) -> anyhow::Result<Ports> {
        let chosen: Vec<&PortConfig> = if names.is_empty() {
            cfg.ports.iter().collect()
        } else {
            names
                .iter()
                .map(|n| {
                    cfg.port(n)
                        .ok_or_else(|| anyhow::anyhow!("the config has no port named {n:?}"))
                })
                .collect::<anyhow::Result<_>>()?
        };
        let devices: Vec<DeviceSpec> = chosen
            .iter()
            .map(|p| p.device())
            .collect::<Result<_, _>>()?;
        let eal = Eal::init(&cfg.eal, &devices)?;
        log::info!(
            "DPDK {} EAL up ({})",
            dpdk::DPDK_VERSION,
            if eal.hugepages() {
                "hugepages"
            } else {
                "no hugepages"
            }
        );
        let pool = Mempool::new(&eal, "ferroce_mbufs", &cfg.mempool)?;
        let mut ports = HashMap::new();
        let mut rings_done: Vec<String> = Vec::new();
        for (pc, dev) in chosen.iter().zip(&devices) {
            match dev {
                DeviceSpec::Ring(link) => {
                    if rings_done.contains(link) {
                        continue;
                    }
                    // Both ends of a ring link open together, in config order.
                    let ends: Vec<&PortConfig> = cfg
                        .ports
                        .iter()
                        .filter(|p| matches!(p.device(), Ok(DeviceSpec::Ring(l)) if &l == link))
                        .collect();
                    let (a, b) = Port::ring_pair(&eal, link, &pool, &ends[0].options())?;
                    ports.insert(ends[0].name.clone(), (ends[0].clone(), a));
                    ports.insert(ends[1].name.clone(), (ends[1].clone(), b));
                    rings_done.push(link.clone());
                }
                _ => {
                    let port = Port::open(&eal, dev, &pool, &pc.options())?;
                    ports.insert(pc.name.clone(), ((*pc).clone(), port));
                }
            }
        }
        Ok(Ports { eal, pool, ports })
    }

    /// The port named `name` and its config.
    pub fn port(&self, name: &str) -> anyhow::Result<(&PortConfig, &Port)> {
        self.ports
            .get(name)
            .map(|(c, p)| (c, p))
            .ok_or_else(|| anyhow::anyhow!("no open port named {name:?}"))
    }

    /// Queue 0 of port `name`, for a poll loop.
    pub fn queue(&self, name: &str) -> anyhow::Result<dpdk::PortQueue> {
        Ok(self.port(name)?.1.queue(QueueId(0))?)
    }

    /// Names of the open ports, sorted.
    pub fn port_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ports.keys().cloned().collect();
        v.sort();
        v
    }
}
