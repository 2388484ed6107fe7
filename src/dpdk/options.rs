//! What the DPDK layer is configured with: plain data, parsed from TOML and
//! checked without DPDK, so it builds with or without the `dpdk` feature.

#![deny(unsafe_code)]

/// A bad option value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidOption(pub String);

type Result<T> = std::result::Result<T, InvalidOption>;

/// Whether the EAL should use hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HugepageMode {
    /// Hugepages when the kernel has enough free ones, else `--no-huge`.
    #[default]
    Auto,
    /// Hugepages or fail.
    On,
    /// Always `--no-huge` (works unprivileged and anywhere; slower).
    Off,
}

/// How to start the EAL (the `[eal]` table of a config file).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EalOptions {
    /// The EAL's core list (`-l`). Empty (the default): lcore 0 on CPU 0
    /// for the EAL, the main thread then free to run on any CPU (a port's
    /// `core` pins its datapath thread).
    pub lcores: String,
    /// Whether to use hugepages: on, off, or auto (when enough are free).
    pub hugepages: HugepageMode,
    /// Memory to reserve in MiB (`-m`); with hugepages, 0 lets the EAL grow on demand.
    pub memory_mb: u32,
    /// A `--file-prefix` for multi-process setups; `None` runs `--in-memory`.
    pub file_prefix: Option<String>,
    /// The EAL's `--log-level` (e.g. "*:warning", "pmd.net.memif:debug").
    pub log_level: String,
    /// Any further EAL arguments, verbatim.
    pub extra_args: Vec<String>,
}

impl Default for EalOptions {
    fn default() -> Self {
        EalOptions {
            lcores: String::new(),
            hugepages: HugepageMode::Auto,
            memory_mb: 256,
            file_prefix: None,
            log_level: "*:warning".into(),
            extra_args: Vec::new(),
        }
    }
}

/// Where a port comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// A virtual device given to the EAL as `--vdev` (e.g.
    /// `net_memif0,role=server,socket=/tmp/f.sock`).
    Vdev(String),
    /// A PCI function given to the EAL as `-a` (e.g. `0000:03:00.0` with
    /// optional `,key=value` device arguments).
    Pci(String),
    /// One end of an in-process link of two rings (`ring:NAME`): two ports
    /// naming the same link are cross-connected.
    Ring(String),
}

impl DeviceSpec {
    /// Parses `ring:NAME`, a PCI address (`[dddd:]bb:dd.f[,args]`) or a vdev spec.
    pub fn parse(spec: &str) -> Result<DeviceSpec> {
        let spec = spec.trim();
        if let Some(name) = spec.strip_prefix("ring:") {
            if name.is_empty() || name.len() > 20 {
                return Err(InvalidOption(format!(
                    "ring link name {name:?} must be 1..=20 characters"
                )));
            }
            return Ok(DeviceSpec::Ring(name.to_string()));
        }
        let head = spec.split(',').next().unwrap_or("");
        if head.is_empty() {
            return Err(InvalidOption("empty device spec".into()));
        }
        if is_pci_address(head) {
            Ok(DeviceSpec::Pci(spec.to_string()))
        } else {
            Ok(DeviceSpec::Vdev(spec.to_string()))
        }
    }

    /// The name DPDK gives the port (what `rte_eth_dev_get_port_by_name` takes).
    pub fn port_name(&self) -> &str {
        match self {
            DeviceSpec::Vdev(s) | DeviceSpec::Pci(s) => s.split(',').next().unwrap_or(""),
            DeviceSpec::Ring(s) => s,
        }
    }
}

/// What the kernel puts in front of each received frame in a TPACKET_V2
/// ring slot of a raw packet socket: the 32-byte `tpacket2_hdr` and the
/// 20-byte `sockaddr_ll` (`TPACKET2_HDRLEN`), 16 aligned up together with
/// the Ethernet header to the next 16 bytes, less that header: 66 bytes.
/// The kernel cuts what does not fit (linux/net/packet/af_packet.c,
/// `tpacket_rcv`: `macoff`).
pub const AF_PACKET_SLOT_OVERHEAD: u32 = 66;

/// net_af_packet's ring slot size when `framesz` is not given.
pub const AF_PACKET_DEFAULT_FRAMESZ: u32 = 2048;

/// The arguments of a net_af_packet device that bound its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketArgs {
    /// The kernel interface (`iface=`).
    pub iface: String,
    /// Bytes per ring slot (`framesz=`, default 2048).
    pub framesz: u32,
}

impl AfPacketArgs {
    /// The largest frame (Ethernet header on, no FCS) a ring slot holds.
    pub fn max_frame(&self) -> u32 {
        self.framesz.saturating_sub(AF_PACKET_SLOT_OVERHEAD)
    }
}

impl DeviceSpec {
    /// The interface and slot size of a net_af_packet vdev
    /// (`net_af_packet0,iface=veth0,framesz=4352,...`; `eth_af_packet` is
    /// its alias); `None` for any other device.
    pub fn af_packet(&self) -> Option<AfPacketArgs> {
        let DeviceSpec::Vdev(spec) = self else {
            return None;
        };
        let mut parts = spec.split(',');
        let head = parts.next()?;
        if !(head.starts_with("net_af_packet") || head.starts_with("eth_af_packet")) {
            return None;
        }
        let mut a = AfPacketArgs {
            iface: String::new(),
            framesz: AF_PACKET_DEFAULT_FRAMESZ,
        };
        for kv in parts {
            match kv.split_once('=') {
                Some(("iface", v)) => a.iface = v.trim().to_string(),
                Some(("framesz", v)) => {
                    a.framesz = v.trim().parse().unwrap_or(AF_PACKET_DEFAULT_FRAMESZ)
                }
                _ => {}
            }
        }
        Some(a)
    }
}

fn is_pci_address(s: &str) -> bool {
    // dddd:bb:dd.f or bb:dd.f, hex digits
    let parts: Vec<&str> = s.split(':').collect();
    let (bus, devfn) = match parts.as_slice() {
        [dom, bus, devfn] if dom.len() == 4 && dom.chars().all(|c| c.is_ascii_hexdigit()) => {
            (bus, devfn)
        }
        [bus, devfn] => (bus, devfn),
        _ => return false,
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    bus.len() == 2
        && dev.len() == 2
        && func.len() == 1
        && [*bus, dev, func]
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Free hugepages of the default size and whether a hugetlbfs is mounted,
/// read from /proc (no privilege needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugepageState {
    /// Free hugepages of the default size (`HugePages_Free`).
    pub free_pages: u64,
    /// The default hugepage size in KiB (`Hugepagesize`).
    pub page_kib: u64,
    /// Whether a hugetlbfs is mounted.
    pub hugetlbfs_mounted: bool,
}

impl HugepageState {
    /// Reads /proc/meminfo and /proc/mounts; missing files read as none.
    pub fn read() -> HugepageState {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |name: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        HugepageState {
            free_pages: field("HugePages_Free:"),
            page_kib: field("Hugepagesize:"),
            hugetlbfs_mounted: mounts
                .lines()
                .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs")),
        }
    }

    /// Free hugepage memory in MiB.
    pub fn free_mib(&self) -> u64 {
        self.free_pages * self.page_kib / 1024
    }
}

/// The EAL argument list for these options, devices and hugepage state, and
/// whether it uses hugepages. Pure, so it is tested without starting DPDK.
pub fn eal_args(
    opts: &EalOptions,
    devices: &[DeviceSpec],
    huge: HugepageState,
) -> Result<(Vec<String>, bool)> {
    let lcores = if opts.lcores.is_empty() {
        "0".to_string()
    } else {
        opts.lcores.clone()
    };
    let mut a: Vec<String> = vec!["ferroce".into(), "-l".into(), lcores];
    a.push("--no-telemetry".into());
    a.push(format!("--log-level={}", opts.log_level));
    let need_mib = u64::from(opts.memory_mb.max(64));
    let use_huge = match opts.hugepages {
        HugepageMode::Off => false,
        HugepageMode::On => {
            if huge.free_mib() == 0 {
                return Err(InvalidOption(
                    "hugepages = \"on\" but the kernel has no free hugepages \
                     (echo N > /proc/sys/vm/nr_hugepages)"
                        .into(),
                ));
            }
            true
        }
        HugepageMode::Auto => {
            let ok = huge.free_mib() >= need_mib
                && (huge.hugetlbfs_mounted || opts.file_prefix.is_none());
            if !ok {
                log::info!(
                    "no hugepages available ({} MiB free, {} MiB wanted{}): falling back to --no-huge -m {} (slower DMA memory, fine for virtual devices)",
                    huge.free_mib(),
                    need_mib,
                    if huge.hugetlbfs_mounted { "" } else { ", no hugetlbfs mounted" },
                    need_mib
                );
            }
            ok
        }
    };
    // Leave nothing behind: `--in-memory` with hugepages; `--no-huge` cannot
    // be combined with it, so there `--no-shconf` keeps the shared config
    // out of the file system.
    match (&opts.file_prefix, use_huge) {
        (Some(p), _) => a.extend(["--file-prefix".into(), p.clone()]),
        (None, true) => a.push("--in-memory".into()),
        (None, false) => a.extend([
            "--no-shconf".into(),
            "--file-prefix".into(),
            format!("ferroce-{}", std::process::id()),
        ]),
    }
    if use_huge {
        if opts.memory_mb > 0 && opts.hugepages == HugepageMode::On {
            a.extend(["-m".into(), opts.memory_mb.to_string()]);
        }
    } else {
        a.extend(["--no-huge".into(), "-m".into(), need_mib.to_string()]);
    }
    let mut any_pci = false;
    for d in devices {
        match d {
            DeviceSpec::Vdev(s) => a.extend(["--vdev".into(), s.clone()]),
            DeviceSpec::Pci(s) => {
                any_pci = true;
                a.extend(["-a".into(), s.clone()]);
            }
            DeviceSpec::Ring(_) => {}
        }
    }
    if !any_pci {
        a.push("--no-pci".into());
    }
    a.extend(opts.extra_args.iter().cloned());
    Ok((a, use_huge))
}

/// Sizes of a pool (the `[mempool]` table of a config file).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MempoolOptions {
    /// Number of mbufs (best as 2^k - 1).
    pub mbufs: u32,
    /// Per-lcore cache size.
    pub cache: u32,
    /// Bytes of data room per mbuf after the 128 B headroom: room for one
    /// RoCE frame at path MTU 4096 (4096 + headers + ICRC) by default.
    pub data_room: u16,
}

impl Default for MempoolOptions {
    fn default() -> Self {
        MempoolOptions {
            mbufs: 8191,
            cache: 256,
            data_room: 4352,
        }
    }
}

/// How to set a port up (the per-port part of a config file).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PortOptions {
    /// Receive queues to set up.
    pub rx_queues: u16,
    /// Transmit queues to set up.
    pub tx_queues: u16,
    /// Descriptors per receive queue.
    pub rx_desc: u16,
    /// Descriptors per transmit queue.
    pub tx_desc: u16,
    /// L3 MTU to set; `None` keeps the device's. RoCE at path MTU 4096 needs
    /// at least 4096 + 82 bytes (headers and ICRC).
    pub mtu: Option<u16>,
    /// Whether to receive frames for any destination MAC.
    pub promiscuous: bool,
}

impl Default for PortOptions {
    fn default() -> Self {
        PortOptions {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            promiscuous: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_HUGE: HugepageState = HugepageState {
        free_pages: 0,
        page_kib: 2048,
        hugetlbfs_mounted: false,
    };
    const HUGE: HugepageState = HugepageState {
        free_pages: 512,
        page_kib: 2048,
        hugetlbfs_mounted: true,
    };

    #[test]
    fn af_packet_args_bound_the_frame() {
        let d = DeviceSpec::parse("net_af_packet0,iface=veth0,framesz=4352,blocksz=69632").unwrap();
        let a = d.af_packet().unwrap();
        assert_eq!(
            (a.iface.as_str(), a.framesz, a.max_frame()),
            ("veth0", 4352, 4286)
        );
        // The default slot: 2048 - 66 bytes.
        let d = DeviceSpec::parse("eth_af_packet1,iface=fr0").unwrap();
        assert_eq!(d.af_packet().unwrap().max_frame(), 1982);
        assert_eq!(DeviceSpec::parse("net_null0").unwrap().af_packet(), None);
        assert_eq!(DeviceSpec::Ring("net_af_packet".into()).af_packet(), None);
    }

    #[test]
    fn device_specs_parse() {
        assert_eq!(
            DeviceSpec::parse("ring:l0").unwrap(),
            DeviceSpec::Ring("l0".into())
        );
        assert_eq!(
            DeviceSpec::parse("0000:03:00.1").unwrap(),
            DeviceSpec::Pci("0000:03:00.1".into())
        );
        assert_eq!(
            DeviceSpec::parse("03:00.1,dv_flow_en=1")
                .unwrap()
                .port_name(),
            "03:00.1"
        );
        let m = DeviceSpec::parse("net_memif0,role=server,socket=/tmp/x.sock").unwrap();
        assert_eq!(m.port_name(), "net_memif0");
        assert!(matches!(m, DeviceSpec::Vdev(_)));
        assert!(DeviceSpec::parse("").is_err());
        assert!(DeviceSpec::parse("ring:").is_err());
    }

    #[test]
    fn auto_falls_back_to_no_huge_without_hugepages() {
        let (a, huge) = eal_args(&EalOptions::default(), &[], NO_HUGE).unwrap();
        assert!(!huge);
        let s = a.join(" ");
        assert!(s.contains("--no-huge -m 256"), "{s}");
        assert!(
            s.contains("--no-shconf") && s.contains("--no-pci") && s.contains("--no-telemetry")
        );
        assert!(
            !s.contains("--in-memory"),
            "--in-memory is incompatible with --no-huge"
        );
    }

    #[test]
    fn auto_uses_hugepages_when_free_and_on_fails_without() {
        let (a, huge) = eal_args(&EalOptions::default(), &[], HUGE).unwrap();
        assert!(huge && !a.iter().any(|x| x == "--no-huge"));
        assert!(a.iter().any(|x| x == "--in-memory"));
        let on = EalOptions {
            hugepages: HugepageMode::On,
            ..Default::default()
        };
        assert!(eal_args(&on, &[], NO_HUGE).is_err());
    }

    #[test]
    fn devices_become_eal_arguments() {
        let devs = [
            DeviceSpec::parse("net_null0").unwrap(),
            DeviceSpec::parse("0000:01:00.0").unwrap(),
            DeviceSpec::parse("ring:x").unwrap(),
        ];
        let opts = EalOptions {
            file_prefix: Some("p1".into()),
            ..Default::default()
        };
        let (a, _) = eal_args(&opts, &devs, NO_HUGE).unwrap();
        let s = a.join(" ");
        assert!(
            s.contains("--vdev net_null0")
                && s.contains("-a 0000:01:00.0")
                && s.contains("--file-prefix p1")
        );
        assert!(!s.contains("--no-pci") && !s.contains("--in-memory"));
    }
}
