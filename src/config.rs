//! TOML configuration: the EAL, the mempool, the ports, and the settings of
//! the tools that run on them. Every table is optional and has defaults;
//! unknown keys are errors (a typo must not silently keep a default).
//!
//! ```toml
//! [eal]
//! hugepages = "auto"          # auto | on | off
//! memory_mb = 256
//!
//! [mempool]
//! mbufs = 8191
//!
//! [[port]]
//! name = "a"
//! device = "ring:link0"       # ring:NAME | a vdev spec | a PCI address
//! ip = "198.18.0.1"
//! vlan = 100                  # optional 802.1Q VLAN id (0: priority tags only)
//! vlan_pcp = 3                # its priority (PCP), default 0
//! ```

#![deny(unsafe_code)]
use crate::cc::CcConfig;
use crate::dpdk::{DeviceSpec, EalOptions, MempoolOptions, PortOptions};
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::path::Path;

/// Why a TOML file (a config, a rate-control parameter set, a lab
/// experiment) cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file cannot be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file, as given.
        path: String,
        /// What the read failed with.
        error: std::io::Error,
    },
    /// Not TOML, or not of the schema (the message has the line).
    #[error("{path}: {error}")]
    Parse {
        /// The file, or whatever names the text.
        path: String,
        /// The parser's error.
        error: Box<toml::de::Error>,
    },
}

impl FileError {
    /// A parse error of the text that `origin` names.
    pub fn parse(origin: &str, error: toml::de::Error) -> FileError {
        FileError::Parse {
            path: origin.to_string(),
            error: Box::new(error),
        }
    }
}

/// Why a config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read or parsed.
    #[error(transparent)]
    File(#[from] FileError),
    /// The config parses but a value is out of range or inconsistent.
    #[error("{path}: {msg}")]
    Invalid {
        /// The file, or whatever names the text.
        path: String,
        /// Which key, and what is wrong with it.
        msg: String,
    },
}

/// A whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The `[eal]` table: how to start DPDK.
    pub eal: EalOptions,
    /// The `[mempool]` table: the mbuf pool every port shares.
    pub mempool: MempoolOptions,
    /// The `[[port]]` tables, in file order (none by default).
    #[serde(rename = "port")]
    pub ports: Vec<PortConfig>,
    /// The `[linktest]` table: the probe stream of `ferroce linktest`.
    pub linktest: LinkTestConfig,
    /// The RC transport run of `ferroce demo`.
    pub rc: RcConfig,
    /// The tools `ferroce demo` runs against each other.
    pub tools: ToolsConfig,
    /// ECN, CNPs and rate control of every QP the tools create.
    pub congestion: CongestionTable,
}

/// The `[congestion]` table (see `transport::congestion`): ECN marking of
/// sent packets, the notification point's CNPs and the reaction point's
/// rate control. ConnectX's names and defaults.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CongestionTable {
    /// Send ECN-capable (ECT(0)).
    pub ecn: bool,
    /// Answer CE-marked packets with CNPs.
    pub notification_point: bool,
    /// At most one CNP per QP per this many microseconds.
    pub min_time_between_cnps_us: u64,
    /// `cnp_dscp`: DSCP (0..=63) of CNPs; default 48 (CS6).
    pub cnp_dscp: u8,
    /// `cnp_prio`: 802.1p priority (0..=7) of CNPs on a tagged port;
    /// default 6.
    pub cnp_prio: u8,
    /// A rate control of `CcConfig::NAMES` (`none`, `dcqcn-cx`, `timely`, ...), or a TOML file of parameters
    /// (`configs/cc/dcqcn-cx.toml` is one).
    pub rate_control: String,
    /// The rate control's line rate in Gb/s; 0: the port's link speed.
    pub line_gbps: f64,
    /// Take every Nth ECN-capable RoCE packet received as CE-marked (0:
    /// never): a congestion point for testing over links without one.
    pub mark_ce_every: u32,
}

impl Default for CongestionTable {
    fn default() -> Self {
        let np = crate::transport::NpConfig::default();
        CongestionTable {
            ecn: true,
            notification_point: np.enabled,
            min_time_between_cnps_us: np.min_time_between_cnps.as_nanos() / 1000,
            cnp_dscp: np.cnp_dscp,
            cnp_prio: np.cnp_prio,
            rate_control: "none".into(),
            line_gbps: 0.0,
            mark_ce_every: 0,
        }
    }
}

impl CongestionTable {
    /// The transport's settings, for a port whose link runs at
    /// `link_mbps` (0 when unknown).
    pub fn resolve(&self, link_mbps: u32) -> Result<crate::transport::CongestionConfig, String> {
        use crate::transport::{CongestionConfig, NpConfig};
        if self.cnp_dscp > 63 {
            return Err(format!(
                "congestion.cnp_dscp {} is outside 0..=63",
                self.cnp_dscp
            ));
        }
        if self.cnp_prio > 7 {
            return Err(format!(
                "congestion.cnp_prio {} is outside 0..=7",
                self.cnp_prio
            ));
        }
        if !(self.line_gbps >= 0.0 && self.line_gbps <= 10_000.0) {
            return Err(format!(
                "congestion.line_gbps {} is outside 0..=10000",
                self.line_gbps
            ));
        }
        let rp = rate_control(&self.rate_control)?;
        let line_bps = if self.line_gbps > 0.0 {
            (self.line_gbps * 1e9) as u64
        } else {
            u64::from(link_mbps) * 1_000_000
        };
        Ok(CongestionConfig {
            ecn: self.ecn,
            np: NpConfig {
                enabled: self.notification_point,
                min_time_between_cnps: crate::time::Duration::from_micros(
                    self.min_time_between_cnps_us,
                ),
                cnp_dscp: self.cnp_dscp,
                cnp_prio: self.cnp_prio,
                mark_ce_every: self.mark_ce_every,
            },
            rp,
            line_bps,
            trace: false,
            int_host_hop: false,
        })
    }
}

/// A rate control by name, or loaded from a TOML file of its parameters.
fn rate_control(s: &str) -> Result<crate::cc::CcConfig, String> {
    match crate::cc::CcConfig::by_name_or_file(s) {
        Some(r) => r.map_err(|e| format!("congestion.rate_control: {e}")),
        None => Err(format!(
            "congestion.rate_control {s:?} is none of {} or a .toml file",
            crate::cc::CcConfig::NAMES.join(", ")
        )),
    }
}

/// The text of the file at `path` and its name for errors.
pub fn read_text(path: &Path) -> Result<(String, String), FileError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| FileError::Read {
        path: p.clone(),
        error,
    })?;
    Ok((text, p))
}

/// The `[tools]` table: `ferroce demo` runs pingpong, write-bw, read-bw,
/// send-lat and atomic-bw between its two ports, recording one end.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Run them (false: skip).
    pub run: bool,
    /// Messages per tool (its `-n`).
    pub iters: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (the ports' MTU permitting).
    pub mtu: u32,
    /// Where the second port's frames are recorded ("" for nowhere).
    pub pcap: String,
    /// Give up on a tool after this many milliseconds without progress.
    pub timeout_ms: u64,
    /// The first of the five TCP ports of the exchanges when the two ends
    /// are two processes (`ferroce demo` on a one-port config).
    pub tcp_port: u16,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            run: true,
            iters: 1000,
            mtu: 4096,
            pcap: "ferroce-demo.pcap".into(),
            timeout_ms: 30_000,
            tcp_port: 18515,
        }
    }
}

/// The `[rc]` table: the RC transport run of `ferroce demo` (one QP pair,
/// a verified cycle of WRITE, READ, SEND and FETCH_ADD).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RcConfig {
    /// Work requests to run (0: skip the run).
    pub msgs: u64,
    /// Bytes per WRITE, READ and SEND.
    pub size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    pub mtu: u32,
    /// Work requests outstanding at once (1..=32).
    pub window: u32,
    /// Give up after this many milliseconds.
    pub timeout_ms: u64,
}

impl Default for RcConfig {
    fn default() -> Self {
        RcConfig {
            msgs: 20_000,
            size: 4096,
            mtu: 1024,
            window: 32,
            timeout_ms: 30_000,
        }
    }
}

/// One `[[port]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// How tools refer to the port (`--port NAME`).
    pub name: String,
    /// `ring:LINK`, a vdev spec (`net_memif0,role=server,...`) or a PCI address.
    pub device: String,
    /// Our IPv4 address on this port: GID index 0 (`::ffff:ip`).
    #[serde(default = "default_ip")]
    pub ip: Ipv4Addr,
    /// More addresses of ours, IPv6 or IPv4: GID indices 1, 2, ... (the
    /// tools' `-g` / `-x`), e.g. `gids = ["2001:2::10"]`.
    #[serde(default)]
    pub gids: Vec<std::net::IpAddr>,
    /// CPU to pin this port's datapath thread to.
    #[serde(default)]
    pub core: Option<usize>,
    /// `rx_queues`: receive queues to set up (at least 1); default 1.
    #[serde(default = "one")]
    pub rx_queues: u16,
    /// `tx_queues`: transmit queues to set up (at least 1); default 1.
    #[serde(default = "one")]
    pub tx_queues: u16,
    /// `rx_desc`: descriptors per receive queue; default 1024.
    #[serde(default = "desc")]
    pub rx_desc: u16,
    /// `tx_desc`: descriptors per transmit queue; default 1024.
    #[serde(default = "desc")]
    pub tx_desc: u16,
    /// `mtu`: L3 MTU in bytes to set (68..=9600); absent: keep the
    /// device's.
    #[serde(default)]
    pub mtu: Option<u16>,
    /// `promiscuous`: receive frames for any destination MAC; default true.
    #[serde(default = "yes")]
    pub promiscuous: bool,
    /// 802.1Q VLAN id of the port's RoCE, ARP and Neighbor Discovery
    /// frames (1..=4094; 0: priority tags only); frames of other VLANs
    /// are dropped. Absent: untagged.
    #[serde(default)]
    pub vlan: Option<u16>,
    /// Priority code point (802.1p priority, 0..=7) of the VLAN's tags.
    #[serde(default)]
    pub vlan_pcp: u8,
    /// `zero_copy`: send SEND, WRITE and READ response payloads of 512
    /// bytes or more from their memory region in place, an mbuf pointing into the region, rather
    /// than copied into the frame; default false. Only where the port can
    /// (an in-process ring link or net_memif); elsewhere payloads are copied.
    #[serde(default)]
    pub zero_copy: bool,
}

fn default_ip() -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 1)
}
fn one() -> u16 {
    1
}
fn desc() -> u16 {
    1024
}
fn yes() -> bool {
    true
}

impl PortConfig {
    /// The port's VLAN, if it has one.
    pub fn vlan(&self) -> Option<crate::transport::Vlan> {
        self.vlan
            .map(|id| crate::transport::Vlan::new(id, self.vlan_pcp))
    }

    /// The port's GID table: `ip` at index 0, then `gids`.
    pub fn gid_table(&self) -> Vec<std::net::IpAddr> {
        std::iter::once(self.ip.into())
            .chain(self.gids.iter().map(|g| g.to_canonical()))
            .collect()
    }

    /// The `device` string parsed: a ring link, a vdev or a PCI device.
    pub fn device(&self) -> Result<DeviceSpec, crate::dpdk::InvalidOption> {
        DeviceSpec::parse(&self.device)
    }

    /// The queue, descriptor, MTU and promiscuity settings to open the
    /// port with.
    pub fn options(&self) -> PortOptions {
        PortOptions {
            rx_queues: self.rx_queues,
            tx_queues: self.tx_queues,
            rx_desc: self.rx_desc,
            tx_desc: self.tx_desc,
            mtu: self.mtu,
            promiscuous: self.promiscuous,
        }
    }
}

/// The `[linktest]` table: the probe stream of `ferroce linktest` and `demo`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkTestConfig {
    /// Probes to send.
    pub count: u64,
    /// Payload bytes per probe (a RoCE path MTU is 256..4096).
    pub payload: usize,
    /// Probes in flight at most.
    pub window: u64,
    /// Give up after this many milliseconds.
    pub timeout_ms: u64,
}

impl Default for LinkTestConfig {
    fn default() -> Self {
        LinkTestConfig {
            count: 100_000,
            payload: 1024,
            window: 64,
            timeout_ms: 20_000,
        }
    }
}

impl Config {
    /// Reads, parses and checks the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let (text, p) = read_text(path)?;
        Config::parse(&text, &p)
    }

    /// Parses and checks a config; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| FileError::parse(origin, e))?;
        cfg.check().map_err(|msg| ConfigError::Invalid {
            path: origin.to_string(),
            msg,
        })?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        let mut names = std::collections::HashSet::new();
        let mut links: std::collections::HashMap<String, usize> = Default::default();
        for p in &self.ports {
            if !names.insert(p.name.as_str()) {
                return Err(format!("two ports are named {:?}", p.name));
            }
            if let DeviceSpec::Ring(l) =
                p.device().map_err(|e| format!("port {:?}: {e}", p.name))?
            {
                *links.entry(l).or_default() += 1;
            }
            if p.rx_queues == 0 || p.tx_queues == 0 {
                return Err(format!(
                    "port {:?}: a port needs at least one rx and one tx queue",
                    p.name
                ));
            }
            if let Some(v) = p.vlan() {
                v.check().map_err(|e| format!("port {:?}: {e}", p.name))?;
            } else if p.vlan_pcp != 0 {
                return Err(format!(
                    "port {:?}: vlan_pcp needs a vlan (0 for priority tags only)",
                    p.name
                ));
            }
            if let Some(mtu) = p.mtu {
                if !(68..=9600).contains(&mtu) {
                    return Err(format!("port {:?}: mtu {mtu} is outside 68..=9600", p.name));
                }
            }
        }
        if let Some((l, n)) = links.iter().find(|(_, n)| **n != 2) {
            return Err(format!(
                "ring link {l:?} has {n} end(s); it needs exactly two ports"
            ));
        }
        self.congestion.resolve(0)?;
        if self.mempool.mbufs < 64 {
            return Err("mempool.mbufs must be at least 64".into());
        }
        let rc = &self.rc;
        if crate::transport::Mtu::from_bytes(rc.mtu).is_none() {
            return Err(format!(
                "rc.mtu {} is not a path MTU (256, 512, 1024, 2048 or 4096)",
                rc.mtu
            ));
        }
        if rc.size == 0 || !(1..=32).contains(&rc.window) {
            return Err("rc.size must be positive and rc.window in 1..=32".into());
        }
        let lt = &self.linktest;
        if !(8..=9000).contains(&lt.payload) {
            return Err(format!(
                "linktest.payload {} is outside 8..=9000",
                lt.payload
            ));
        }
        let frame = crate::wire::len::UD_V4 + lt.payload + 3;
        if frame > usize::from(self.mempool.data_room) {
            return Err(format!(
                "linktest.payload {} makes {frame}-byte frames, more than mempool.data_room {}",
                lt.payload, self.mempool.data_room
            ));
        }
        Ok(())
    }

    /// The `[[port]]` named `name`, if any.
    pub fn port(&self, name: &str) -> Option<&PortConfig> {
        self.ports.iter().find(|p| p.name == name)
    }
}

impl CcConfig {
    /// Reads a rate-control config file: `algorithm = "NAME"` and that
    /// algorithm's parameters (`configs/cc/dcqcn-cx.toml`,
    /// `configs/cc/dcqcn-paper.toml`); absent parameters keep their defaults.
    pub fn load(path: &Path) -> Result<CcConfig, ConfigError> {
        let (text, p) = read_text(path)?;
        CcConfig::parse(&text, &p)
    }

    /// The rate control `s` names (`none`, `dcqcn-cx`, `dcqcn-paper`, any
    /// case) with its defaults, or the one a `.toml` file of parameters
    /// holds; `None` when `s` is neither.
    pub fn by_name_or_file(s: &str) -> Option<Result<CcConfig, ConfigError>> {
        let s = s.trim();
        if let Some(c) = CcConfig::from_name(&s.to_ascii_lowercase()) {
            return Some(Ok(c));
        }
        s.ends_with(".toml").then(|| CcConfig::load(Path::new(s)))
    }

    /// Parses and checks a rate-control config given as text.
    pub fn from_toml(text: &str) -> Result<CcConfig, ConfigError> {
        CcConfig::parse(text, "rate-control config")
    }

    /// Reads `algorithm`, then that algorithm's parameters from the text
    /// with the `algorithm` line blanked, so that errors name the key and
    /// the line and column of the original.
    fn parse(text: &str, origin: &str) -> Result<CcConfig, ConfigError> {
        #[derive(Deserialize)]
        struct Head {
            algorithm: toml::Spanned<String>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct NoParams {}

        let parse_error = |e: toml::de::Error| FileError::parse(origin, e);
        let invalid = |msg: String| ConfigError::Invalid {
            path: origin.to_string(),
            msg,
        };
        let head: Head = toml::from_str(text).map_err(parse_error)?;
        let name = head.algorithm.get_ref();
        let params = blank_lines(text, head.algorithm.span());
        let cfg = match CcConfig::from_name(name) {
            Some(CcConfig::None) => {
                toml::from_str::<NoParams>(&params).map_err(parse_error)?;
                CcConfig::None
            }
            Some(CcConfig::DcqcnCx(_)) => {
                CcConfig::DcqcnCx(toml::from_str(&params).map_err(parse_error)?)
            }
            Some(CcConfig::DcqcnPaper(_)) => {
                CcConfig::DcqcnPaper(toml::from_str(&params).map_err(parse_error)?)
            }
            Some(CcConfig::Timely(_)) => {
                CcConfig::Timely(toml::from_str(&params).map_err(parse_error)?)
            }
            Some(CcConfig::Dctcp(_)) => {
                CcConfig::Dctcp(toml::from_str(&params).map_err(parse_error)?)
            }
            Some(CcConfig::Hpcc(_)) => {
                CcConfig::Hpcc(toml::from_str(&params).map_err(parse_error)?)
            }
            Some(CcConfig::Swift(_)) => {
                CcConfig::Swift(toml::from_str(&params).map_err(parse_error)?)
            }
            None => {
                return Err(invalid(format!(
                    "unknown algorithm {name:?}, expected one of {:?}",
                    CcConfig::NAMES
                )))
            }
        };
        cfg.check()
            .map_err(|msg| invalid(format!("{name}: {msg}")))?;
        Ok(cfg)
    }
}

/// `text` with the whole lines that `span` touches turned into spaces
/// (line breaks kept), so positions in the rest stay those of `text`.
fn blank_lines(text: &str, span: std::ops::Range<usize>) -> String {
    let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let end = text[span.end..]
        .find('\n')
        .map_or(text.len(), |i| span.end + i);
    let blank = text[start..end]
        .chars()
        .map(|c| if c == '\n' || c == '\r' { c } else { ' ' });
    text[..start]
        .chars()
        .chain(blank)
        .chain(text[end..].chars())
        .collect()
}

/// The config `ferroce demo` uses when given none: two ports joined by an
/// in-process ring link.
pub const DEMO: &str = include_str!("../configs/demo.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_config_parses() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/configs");
        let mut n = 0;
        let cc = std::fs::read_dir(format!("{dir}/cc")).unwrap();
        for e in std::fs::read_dir(dir).unwrap().chain(cc) {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                // Rate-control configs name their algorithm at the top.
                let text = std::fs::read_to_string(&path).unwrap();
                let table: toml::Table = text.parse().unwrap();
                let loaded = if table.contains_key("algorithm") {
                    CcConfig::load(&path).map(drop)
                } else {
                    Config::load(&path).map(drop)
                };
                loaded.unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 6, "only {n} configs");
    }

    #[test]
    fn the_congestion_table_reaches_the_transport() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/cc");
        let c = Config::parse(
            &format!(
                "[congestion]\necn = false\nmin_time_between_cnps_us = 50\ncnp_dscp = 46\n\
                 cnp_prio = 3\nrate_control = \"{dir}/dcqcn-paper.toml\"\n"
            ),
            "t.toml",
        )
        .unwrap();
        let t = c.congestion.resolve(25_000).unwrap();
        assert!(!t.ecn);
        assert_eq!(
            t.np.min_time_between_cnps,
            crate::time::Duration::from_micros(50)
        );
        assert_eq!((t.np.cnp_dscp, t.np.cnp_prio), (46, 3));
        assert_eq!(t.rp.name(), "dcqcn-paper");
        assert_eq!(t.line_bps, 25_000_000_000);
        // Defaults: ConnectX's NP, no rate control, the link's speed.
        let d = Config::default().congestion.resolve(100_000).unwrap();
        assert!(d.ecn && d.np.enabled);
        assert_eq!(d.np, crate::transport::NpConfig::default());
        assert_eq!(d.rp.name(), "none");
        let g = CongestionTable {
            line_gbps: 40.0,
            rate_control: "dcqcn-cx".into(),
            ..CongestionTable::default()
        };
        let r = g.resolve(100_000).unwrap();
        assert_eq!((r.line_bps, r.rp.name()), (40_000_000_000, "dcqcn-cx"));
    }

    #[test]
    fn congestion_mistakes_are_named() {
        let e = |t: &str| Config::parse(t, "t.toml").unwrap_err().to_string();
        assert!(e("[congestion]\ncnp_dscp = 64").contains("cnp_dscp"));
        assert!(e("[congestion]\ncnp_prio = 8").contains("cnp_prio"));
        assert!(e("[congestion]\nrate_control = \"cubic\"").contains("dcqcn-cx"));
        assert!(e("[congestion]\nrate_control = \"/nonexistent.toml\"").contains("nonexistent"));
        assert!(e("[congestion]\nline_gbps = -1").contains("line_gbps"));
        assert!(e("[congestion]\ncnp = 1").contains("unknown field"));
    }

    #[test]
    fn mistakes_are_named() {
        let e = |t: &str| Config::parse(t, "t.toml").unwrap_err().to_string();
        assert!(e("[eal]\nhugepage = \"on\"").contains("unknown field"));
        assert!(e("[[port]]\nname=\"a\"\ndevice=\"ring:x\"").contains("needs exactly two"));
        assert!(e("[[port]]\nname=\"a\"\ndevice=\"net_null0\"\n[[port]]\nname=\"a\"\ndevice=\"net_null1\"").contains("two ports"));
        assert!(e("[[port]]\nname=\"a\"\ndevice=\"net_null0\"\nmtu=20").contains("mtu"));
        assert!(e("[linktest]\npayload=5000").contains("data_room"));
        assert!(e("[eal]\nhugepages = \"sometimes\"").contains("unknown variant"));
        let port = "[[port]]\nname=\"a\"\ndevice=\"net_null0\"\n";
        assert!(e(&format!("{port}vlan=4095")).contains("VLAN id"));
        assert!(e(&format!("{port}vlan=5\nvlan_pcp=8")).contains("PCP"));
        assert!(e(&format!("{port}vlan_pcp=3")).contains("needs a vlan"));
    }

    /// Rate-control configs (named `cc` so `cargo test cc::` runs them).
    mod cc {
        use crate::cc::{CcConfig, CxParams, DctcpParams, PaperParams, SwiftParams, TimelyParams};
        use std::path::Path;

        fn path(file: &str) -> std::path::PathBuf {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("configs/cc")
                .join(file)
        }

        fn shipped(file: &str) -> CcConfig {
            CcConfig::load(&path(file)).unwrap_or_else(|e| panic!("{e}"))
        }

        fn error(text: &str) -> String {
            CcConfig::from_toml(text).unwrap_err().to_string()
        }

        #[test]
        fn the_shipped_files_load_and_are_the_defaults() {
            assert_eq!(
                shipped("dcqcn-cx.toml"),
                CcConfig::DcqcnCx(CxParams::default())
            );
            assert_eq!(
                shipped("dcqcn-paper.toml"),
                CcConfig::DcqcnPaper(PaperParams::default())
            );
            assert_eq!(
                shipped("timely.toml"),
                CcConfig::Timely(TimelyParams::default())
            );
            assert_eq!(
                shipped("dctcp.toml"),
                CcConfig::Dctcp(DctcpParams::default())
            );
            assert_eq!(
                shipped("swift.toml"),
                CcConfig::Swift(SwiftParams::default())
            );
        }

        #[test]
        fn the_shipped_files_list_every_parameter() {
            for name in ["dcqcn-cx", "dcqcn-paper", "timely", "dctcp", "swift"] {
                let file = format!("{name}.toml");
                let text = std::fs::read_to_string(path(&file)).unwrap();
                let listed: toml::Table = text.parse().unwrap();
                let default = CcConfig::from_name(name).unwrap();
                let all = toml::Table::try_from(&default).unwrap();
                let listed: Vec<_> = listed.keys().collect();
                let all: Vec<_> = all.keys().collect();
                assert_eq!(listed, all, "{file}");
            }
        }

        #[test]
        fn absent_keys_keep_their_defaults() {
            let c = CcConfig::from_toml("algorithm = \"dcqcn-cx\"\nrpg_time_reset = 55").unwrap();
            let want = CxParams {
                rpg_time_reset: 55,
                ..CxParams::default()
            };
            assert_eq!(c, CcConfig::DcqcnCx(want));
            let c = CcConfig::from_toml("algorithm = \"dcqcn-paper\"\ng = 0.0625").unwrap();
            let want = PaperParams {
                g: 0.0625,
                ..PaperParams::default()
            };
            assert_eq!(c, CcConfig::DcqcnPaper(want));
            assert_eq!(
                CcConfig::from_toml("algorithm = \"none\"").unwrap(),
                CcConfig::None
            );
        }

        #[test]
        fn names_go_both_ways() {
            for name in CcConfig::NAMES {
                assert_eq!(CcConfig::from_name(name).unwrap().name(), name);
            }
            assert_eq!(CcConfig::from_name("dcqcn"), None);
        }

        #[test]
        fn mistakes_are_named_not_panics() {
            let cx = |kv: &str| error(&format!("algorithm = \"dcqcn-cx\"\n{kv}"));
            let paper = |kv: &str| error(&format!("algorithm = \"dcqcn-paper\"\n{kv}"));
            assert!(cx("rpg_time_rest = 300").contains("unknown field `rpg_time_rest`"));
            assert!(paper("rpg_time_reset = 300").contains("unknown field"));
            assert!(error("algorithm = \"timelier\"").contains("unknown algorithm \"timelier\""));
            let timely = |kv: &str| error(&format!("algorithm = \"timely\"\n{kv}"));
            assert!(timely("beta = 1.5").contains("beta 1.5 is outside (0, 1]"));
            assert!(timely("t_low_us = 900").contains("t_low_us 900 must be below t_high_us"));
            let swift = |kv: &str| error(&format!("algorithm = \"swift\"\n{kv}"));
            assert!(swift("max_mdf = 1.0").contains("max_mdf 1 is outside (0, 1)"));
            assert!(swift("fs_min_cwnd = 300").contains("fs_max_cwnd 256 must be above"));
            assert!(swift("target_us = 10").contains("unknown field `target_us`"));
            assert!(error("rpg_gd = 11").contains("missing field `algorithm`"));
            assert!(error("algorithm = \"none\"\nrpg_gd = 11").contains("unknown field `rpg_gd`"));
            assert!(cx("rpg_min_dec_fac = 101").contains("rpg_min_dec_fac 101 is above"));
            assert!(cx("dce_tcp_g = 1025").contains("dce_tcp_g 1025 is above"));
            assert!(cx("initial_alpha_value = 2000").contains("initial_alpha_value"));
            assert!(cx("rpg_gd = 64").contains("rpg_gd 64 is above"));
            // The key and its line, as the user wrote them.
            assert!(cx("rpg_gd = -1").contains("line 2, column 10"));
            assert!(cx("rpg_gd = -1").contains("rpg_gd = -1"));
            for zero in [
                "rpg_time_reset",
                "dce_tcp_rtt",
                "rate_reduce_monitor_period",
                "rpg_min_rate",
                "rpg_ai_rate",
                "rpg_hai_rate",
            ] {
                assert!(cx(&format!("{zero} = 0")).contains(&format!("{zero} must be")));
            }
            assert!(cx("rpg_max_rate = 5\nrpg_min_rate = 10").contains("below rpg_min_rate"));
            assert!(cx("rpg_threshold = \"one\"").contains("rpg_threshold"));
            for g in ["0.0", "1.0", "-0.5", "1.5", "nan"] {
                assert!(paper(&format!("g = {g}")).contains("outside (0, 1)"), "{g}");
            }
            assert!(paper("initial_alpha = 1.5").contains("initial_alpha"));
            assert!(paper("alpha_timer_us = 0").contains("alpha_timer_us must be"));
            assert!(paper("rate_timer_us = 0").contains("rate_timer_us must be"));
            assert!(paper("min_rate_mbps = 0").contains("min_rate_mbps must be"));
            assert!(cx("rpg_gd = 64").starts_with("rate-control config: dcqcn-cx:"));
        }

        #[test]
        fn a_missing_file_is_an_error() {
            let e = CcConfig::load(Path::new("/nonexistent/cc.toml")).unwrap_err();
            assert!(e.to_string().contains("cannot read"));
        }
    }

    #[test]
    fn a_port_may_be_on_a_vlan() {
        let port = "[[port]]\nname=\"a\"\ndevice=\"net_null0\"\n";
        let c = Config::parse(&format!("{port}vlan=100\nvlan_pcp=3"), "t").unwrap();
        assert_eq!(
            c.port("a").unwrap().vlan(),
            Some(crate::transport::Vlan::new(100, 3))
        );
        let c = Config::parse(port, "t").unwrap();
        assert_eq!(c.port("a").unwrap().vlan(), None);
    }
}
