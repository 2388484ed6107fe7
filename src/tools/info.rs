//! `ferroce info`: what DPDK sees of a config: the DPDK version, the
//! hugepages, the EAL arguments, and every port's id, device, MAC,
//! address and link, and its MTU, largest frame and path MTU with what
//! bounds them.

use crate::config::Config;
use crate::dpdk;
use crate::tools::port::ports::Ports;
use anyhow::Result;

/// `ferroce info`: opens the config's EAL and ports and prints them;
/// Ok(true) unless they cannot be opened (an error).
pub fn run(cfg: &Config) -> Result<bool> {
    let h = dpdk::HugepageState::read();
    println!("DPDK {} (built against)", dpdk::DPDK_VERSION);
    println!(
        "hugepages: {} free of {} KiB, hugetlbfs {}",
        h.free_pages,
        h.page_kib,
        if h.hugetlbfs_mounted {
            "mounted"
        } else {
            "not mounted"
        }
    );
    let dp = Ports::open(cfg, &[])?;
    println!("EAL: {}", dp.eal.args().join(" "));
    for name in dp.port_names() {
        let (pc, p) = dp.port(&name)?;
        let link = p.wait_link_up(std::time::Duration::from_millis(500))?;
        println!(
            "port {name}: id {} device {} mac {} ip {} link {} {} Mb/s",
            p.id().0,
            pc.device,
            p.mac()?,
            pc.ip,
            if link.up { "up" } else { "down" },
            link.speed_mbps
        );
        if !pc.gids.is_empty() {
            let gids: Vec<String> = pc
                .gid_table()
                .into_iter()
                .enumerate()
                .map(|(i, g)| format!("{i} {}", std::net::Ipv6Addr::from(crate::wire::gid_of(g))))
                .collect();
            println!("port {name}: gids {}", gids.join(", "));
        }
        match p.frame_limit() {
            Ok(l) => println!("port {name}: {}", crate::tools::port::describe_limit(&l)),
            Err(e) => println!("port {name}: mtu ? ({e})"),
        }
    }
    Ok(true)
}
