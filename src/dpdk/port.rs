//! Ethernet ports and their queues. A [`Port`] is configured, started and
//! stopped here; a [`PortQueue`] (one rx and one tx queue of it) is what the
//! engine's poll loop owns, and implements [`Backend`].
#![cfg(feature = "dpdk")]

use super::eal::Eal;
use super::error::{check, from_errno, Error, Result};
use super::ffi;
use super::lend::DmaRegion;
use super::mbuf::{free_burst, Mbuf};
use super::mempool::Mempool;
use super::netdev;
use super::options::{AfPacketArgs, DeviceSpec, MempoolOptions, PortOptions};
use crate::backend::{Backend, Burst, BURST};
use crate::wire::MacAddr;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

/// A DPDK port number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortId(pub u16);

/// The RSS hash types a port with several receive queues asks for:
/// `RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_UDP | RTE_ETH_RSS_IPV6 |
/// RTE_ETH_RSS_NONFRAG_IPV6_UDP` (rte_ethdev.h: bits 2, 5, 8, 11; macros
/// bindgen does not translate), less what the device cannot hash.
const RSS_UDP: u64 = (1 << 2) | (1 << 5) | (1 << 8) | (1 << 11);

/// A queue number within a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueId(pub u16);

/// Link state as the PMD reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Whether the link is up.
    pub up: bool,
    /// Negotiated speed in Mbit/s (0 when unknown or down).
    pub speed_mbps: u32,
    /// Whether the link runs full duplex.
    pub full_duplex: bool,
}

/// The PMD's basic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Frames received.
    pub ipackets: u64,
    /// Frames sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Frames the NIC dropped because the rx queue was full.
    pub imissed: u64,
    /// Frames received with errors.
    pub ierrors: u64,
    /// Frames the PMD failed to send.
    pub oerrors: u64,
    /// Rx failures for want of an mbuf.
    pub rx_nombuf: u64,
}

/// How large a port's frames can be, and what says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameLimit {
    /// The port's L3 MTU.
    pub mtu: u32,
    /// The largest Ethernet frame it carries (header and an 802.1Q tag
    /// included, no FCS).
    pub max_frame: usize,
    /// What sets them, in words: the interface's MTU, the ring slots, the
    /// mbufs.
    pub source: String,
}

/// A started Ethernet port; stopped and closed when the last handle drops.
#[derive(Clone)]
pub struct Port(Arc<PortInner>);

struct PortInner {
    id: PortId,
    name: String,
    opts: PortOptions,
    /// A net_af_packet device's interface and ring slot size.
    af_packet: Option<AfPacketArgs>,
    /// A net_memif device: it copies whole mbufs through its shared
    /// buffers (chaining them), whatever the ethdev MTU says.
    memif: bool,
    /// Ring drops read from the kernel so far (each read zeroes its count).
    ring_drops: std::sync::atomic::AtomicU64,
    /// For ring links: the rings both ends share, freed after both close.
    _link: Option<Arc<RingLink>>,
    pool: Mempool,
    /// Small mbufs for the segments of frames sent in place (zero-copy
    /// send: the one pointing into a region, the one holding the pad and
    /// ICRC), made at the first such frame; `None` inside if that failed.
    /// Kept apart from the frame pool so that these headers stay few and
    /// close together in the cache.
    segments: std::sync::OnceLock<Option<Mempool>>,
    _eal: Eal,
}

// SAFETY: the port is configured before it is shared and closed after the
// last handle; in between, each queue is polled by the one PortQueue that
// owns it, and the control calls we make (stats, link, MAC) are safe to call
// concurrently with the datapath in DPDK.
unsafe impl Send for PortInner {}
// SAFETY: see Send.
unsafe impl Sync for PortInner {}

impl Port {
    /// Configures and starts the port behind `device` (a vdev or PCI function
    /// the EAL was given). Ring links are made with [`Port::ring_pair`].
    pub fn open(
        eal: &Eal,
        device: &DeviceSpec,
        pool: &Mempool,
        opts: &PortOptions,
    ) -> Result<Port> {
        if let DeviceSpec::Ring(name) = device {
            return Err(Error::Invalid(format!(
                "ring link {name:?}: open both ends with Port::ring_pair"
            )));
        }
        let name = device.port_name();
        let cname =
            CString::new(name).map_err(|_| Error::Invalid(format!("port name {name:?}")))?;
        let mut id = 0u16;
        // SAFETY: cname is a valid C string and id a valid out pointer.
        let ret = unsafe { ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret != 0 {
            return Err(Error::PortNotFound(name.to_string()));
        }
        let inner = PortInner {
            id: PortId(id),
            name: name.to_string(),
            opts: opts.clone(),
            af_packet: device.af_packet(),
            memif: device.port_name().starts_with("net_memif"),
            ring_drops: Default::default(),
            _link: None,
            pool: pool.clone(),
            segments: Default::default(),
            _eal: eal.clone(),
        };
        inner.setup()?;
        Ok(Port(Arc::new(inner)))
    }

    /// Two ports joined by rings inside this process: what one transmits the
    /// other receives (DPDK's ring PMD, `rte_eth_from_rings`).
    pub fn ring_pair(
        eal: &Eal,
        link: &str,
        pool: &Mempool,
        opts: &PortOptions,
    ) -> Result<(Port, Port)> {
        let nq = opts.rx_queues.max(opts.tx_queues).max(1);
        let ring_size = u32::from(opts.rx_desc.max(64)).next_power_of_two();
        let mut rings = RingLink {
            ab: Vec::new(),
            ba: Vec::new(),
        };
        for q in 0..nq {
            rings
                .ab
                .push(make_ring(&format!("{link}_ab{q}"), ring_size, eal)?);
            rings
                .ba
                .push(make_ring(&format!("{link}_ba{q}"), ring_size, eal)?);
        }
        let rings = Arc::new(rings);
        let a = Self::from_rings(eal, &format!("{link}_a"), &rings, false, pool, opts)?;
        let b = Self::from_rings(eal, &format!("{link}_b"), &rings, true, pool, opts)?;
        Ok((a, b))
    }

    fn from_rings(
        eal: &Eal,
        name: &str,
        rings: &Arc<RingLink>,
        b_end: bool,
        pool: &Mempool,
        opts: &PortOptions,
    ) -> Result<Port> {
        let cname =
            CString::new(name).map_err(|_| Error::Invalid(format!("port name {name:?}")))?;
        let (rx, tx) = if b_end {
            (&rings.ab, &rings.ba)
        } else {
            (&rings.ba, &rings.ab)
        };
        let mut rxp: Vec<*mut ffi::rte_ring> = rx.iter().map(|r| r.as_ptr()).collect();
        let mut txp: Vec<*mut ffi::rte_ring> = tx.iter().map(|r| r.as_ptr()).collect();
        // SAFETY: the ring arrays hold valid rings that outlive the port
        // (each end holds the RingLink, which frees them after both close).
        let ret = unsafe {
            ffi::rte_eth_from_rings(
                cname.as_ptr(),
                rxp.as_mut_ptr(),
                rxp.len() as u32,
                txp.as_mut_ptr(),
                txp.len() as u32,
                eal.socket_id() as u32,
            )
        };
        if ret < 0 {
            return Err(from_errno("rte_eth_from_rings"));
        }
        let inner = PortInner {
            id: PortId(ret as u16),
            name: name.to_string(),
            opts: opts.clone(),
            af_packet: None,
            memif: false,
            ring_drops: Default::default(),
            _link: Some(rings.clone()),
            pool: pool.clone(),
            segments: Default::default(),
            _eal: eal.clone(),
        };
        inner.setup()?;
        Ok(Port(Arc::new(inner)))
    }

    /// The DPDK port id.
    pub fn id(&self) -> PortId {
        self.0.id
    }

    /// The DPDK port name (for a ring link, the link name and `_a` / `_b`).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The options the port was configured with.
    pub fn options(&self) -> &PortOptions {
        &self.0.opts
    }

    /// The mempool its receive queues allocate mbufs from.
    pub fn mempool(&self) -> &Mempool {
        &self.0.pool
    }

    /// The port's MAC address (`rte_eth_macaddr_get`).
    pub fn mac(&self) -> Result<MacAddr> {
        let mut a = ffi::rte_ether_addr::default();
        // SAFETY: valid port id and out pointer.
        check("rte_eth_macaddr_get", unsafe {
            ffi::rte_eth_macaddr_get(self.0.id.0, &mut a)
        })?;
        Ok(MacAddr(a.addr_bytes))
    }

    /// The port's MTU (`rte_eth_dev_get_mtu`).
    pub fn mtu(&self) -> Result<u16> {
        let mut mtu = 0u16;
        // SAFETY: valid port id and out pointer.
        check("rte_eth_dev_get_mtu", unsafe {
            ffi::rte_eth_dev_get_mtu(self.0.id.0, &mut mtu)
        })?;
        Ok(mtu)
    }

    /// How large its frames can be. A net_af_packet port carries what
    /// both the kernel interface (its MTU) and a ring slot (`framesz` less
    /// the kernel's 66 bytes) hold; the ethdev MTU (1500, the PMD's
    /// `max_rx_pktlen` of 1518) says nothing there. Any other port carries
    /// its ethdev MTU, but a net_memif port, which copies whole mbufs
    /// through its shared buffers. All are bounded by the mbufs' data
    /// room.
    pub fn frame_limit(&self) -> Result<FrameLimit> {
        const ETH: usize = crate::wire::len::ETH;
        const ETH_VLAN: usize = crate::wire::len::ETH_VLAN;
        let room = usize::from(self.0.pool.data_room());
        let (mtu, max_frame, mut source) = match &self.0.af_packet {
            Some(a) => {
                let kernel = netdev::if_mtu(&a.iface).map_err(|e| {
                    Error::Invalid(format!("the MTU of interface {:?}: {e}", a.iface))
                })?;
                let slot = a.max_frame() as usize;
                let max_frame = (kernel as usize + ETH_VLAN).min(slot);
                let mtu = kernel.min(slot.saturating_sub(ETH) as u32);
                let source = if kernel as usize + ETH <= slot {
                    format!(
                        "MTU {kernel} of interface {} (ring slots of {} B hold frames up to {slot} B)",
                        a.iface, a.framesz
                    )
                } else {
                    format!(
                        "ring slots of {} B (framesz) hold frames up to {slot} B; interface {} has MTU {kernel}",
                        a.framesz, a.iface
                    )
                };
                (mtu, max_frame, source)
            }
            None if self.0.memif => (
                room.saturating_sub(ETH) as u32,
                room,
                format!(
                    "net_memif carries whole mbufs of {room} B (mempool data_room); its ethdev MTU does not bound it"
                ),
            ),
            None => {
                let mtu = u32::from(self.mtu()?);
                (
                    mtu,
                    mtu as usize + ETH_VLAN,
                    format!("MTU {mtu} of the DPDK port"),
                )
            }
        };
        if room < max_frame {
            source.push_str(&format!("; mbufs hold {room} B (mempool data_room)"));
        }
        Ok(FrameLimit {
            mtu,
            max_frame: max_frame.min(room),
            source,
        })
    }

    /// Frames lost on the receive path before the PMD saw them and that the
    /// PMD does not count: for a net_af_packet port, those its packet
    /// sockets' rings dropped when full (summed over the port's life);
    /// `None` for other ports (their drops are in [`Port::stats`]).
    pub fn ring_drops(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let a = self.0.af_packet.as_ref()?;
        let ifindex = netdev::if_index(&a.iface).ok()?;
        let new = netdev::packet_ring_drops(ifindex)?;
        Some(self.0.ring_drops.fetch_add(new, Ordering::Relaxed) + new)
    }

    /// Link state, without waiting (`rte_eth_link_get_nowait`).
    pub fn link(&self) -> Result<LinkStatus> {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid port id and out pointer.
        check("rte_eth_link_get_nowait", unsafe {
            ffi::rte_eth_link_get_nowait(self.0.id.0, &mut l)
        })?;
        Ok(LinkStatus {
            up: l.link_status() != 0,
            speed_mbps: l.link_speed,
            full_duplex: l.link_duplex() != 0,
        })
    }

    /// Polls the link state until it is up or `timeout` passes.
    pub fn wait_link_up(&self, timeout: std::time::Duration) -> Result<LinkStatus> {
        self.wait_link(true, timeout)
    }

    /// Polls the link state until it is down (e.g. a memif peer left) or
    /// `timeout` passes.
    pub fn wait_link_down(&self, timeout: std::time::Duration) -> Result<LinkStatus> {
        self.wait_link(false, timeout)
    }

    fn wait_link(&self, up: bool, timeout: std::time::Duration) -> Result<LinkStatus> {
        let start = std::time::Instant::now();
        loop {
            let l = self.link()?;
            if l.up == up || start.elapsed() >= timeout {
                return Ok(l);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The PMD's basic counters (`rte_eth_stats_get`).
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port id and out pointer.
        check("rte_eth_stats_get", unsafe {
            ffi::rte_eth_stats_get(self.0.id.0, &mut s)
        })?;
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Zeroes the PMD's basic counters (`rte_eth_stats_reset`).
    pub fn reset_stats(&self) -> Result<()> {
        // SAFETY: valid port id.
        check("rte_eth_stats_reset", unsafe {
            ffi::rte_eth_stats_reset(self.0.id.0)
        })?;
        Ok(())
    }

    /// The (rx, tx) queue pair `q` as a backend for one poll loop. Each
    /// queue must be owned by one `PortQueue` at a time.
    pub fn queue(&self, q: QueueId) -> Result<PortQueue> {
        if q.0 >= self.0.opts.rx_queues || q.0 >= self.0.opts.tx_queues {
            return Err(Error::Invalid(format!(
                "port {} has no queue {}",
                self.0.name, q.0
            )));
        }
        Ok(PortQueue {
            port: self.clone(),
            id: self.0.id.0,
            q: q.0,
        })
    }
}

/// The per-lcore cache of the segment pool: DPDK's largest
/// (`RTE_MEMPOOL_CACHE_MAX_SIZE`). Each frame sent in place holds two
/// segments until its receiver frees it, so a window of 256 frames keeps
/// 512 out. A cache that cannot hold them spills into the pool's ring and
/// refills from the ring's far end, with mbufs long out of the CPU's
/// caches: with the default 256 that cost a miss or two per segment, and
/// the 64 KiB zero-copy goodput of `ferroce bench e2e` rose about 15%
/// with this size.
const SEGMENT_CACHE: u32 = 512;

impl PortInner {
    /// The pool of segment mbufs ([`PortInner::segments`]), made on first
    /// use: as many mbufs as the frame pool, 64 bytes of data room each,
    /// and the largest per-lcore cache DPDK has ([`SEGMENT_CACHE`]).
    fn segment_pool(&self) -> Option<&Mempool> {
        self.segments
            .get_or_init(|| {
                let opts = MempoolOptions {
                    mbufs: self.pool.size(),
                    data_room: 64,
                    cache: SEGMENT_CACHE,
                };
                match Mempool::new(&self._eal, &format!("fsegs_{}", self.id.0), &opts) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        log::warn!(
                            "port {}: no pool for zero-copy segments ({e}): payloads are copied",
                            self.name
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    fn setup(&self) -> Result<()> {
        let port = self.id.0;
        let mut info = ffi::rte_eth_dev_info::default();
        // SAFETY: valid port id and out pointer.
        check("rte_eth_dev_info_get", unsafe {
            ffi::rte_eth_dev_info_get(port, &mut info)
        })?;
        let o = &self.opts;
        if o.rx_queues == 0
            || o.tx_queues == 0
            || o.rx_queues > info.max_rx_queues
            || o.tx_queues > info.max_tx_queues
        {
            return Err(Error::Invalid(format!(
                "port {}: {} rx / {} tx queues asked, the device has 1..={} / 1..={}",
                self.name, o.rx_queues, o.tx_queues, info.max_rx_queues, info.max_tx_queues
            )));
        }
        let mut conf = ffi::rte_eth_conf::default();
        // Several receive queues: RSS over the UDP 5-tuple, where the
        // device hashes at all. RoCE v2 senders pick a UDP source port per
        // QP (A17 §17.3.2.1), so a QP's frames stay on one queue; the
        // datapath that polls it hands them on to their QP's owner
        // (`crate::backend::steer`) when that is another.
        let rss_hf = RSS_UDP & info.flow_type_rss_offloads;
        if o.rx_queues > 1 && rss_hf != 0 {
            conf.rxmode.mq_mode = ffi::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        match (o.mtu, &self.af_packet) {
            (Some(mtu), None) => conf.rxmode.mtu = u32::from(mtu),
            (Some(mtu), Some(a)) => set_af_packet_mtu(&self.name, a, mtu)?,
            (None, _) => {}
        }
        // SAFETY: valid port id; conf is a fully initialised config.
        check("rte_eth_dev_configure", unsafe {
            ffi::rte_eth_dev_configure(port, o.rx_queues, o.tx_queues, &conf)
        })?;
        let (mut nrx, mut ntx) = (o.rx_desc, o.tx_desc);
        // SAFETY: valid port id and out pointers.
        check("rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
            ffi::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut nrx, &mut ntx)
        })?;
        // SAFETY: valid port id.
        let socket = unsafe { ffi::rte_eth_dev_socket_id(port) };
        let socket = if socket < 0 {
            ffi::SOCKET_ID_ANY
        } else {
            socket
        } as u32;
        for q in 0..o.rx_queues {
            // SAFETY: configured port; NULL rxconf takes the PMD default; the
            // pool outlives the port (we hold a handle to it).
            check("rte_eth_rx_queue_setup", unsafe {
                ffi::rte_eth_rx_queue_setup(
                    port,
                    q,
                    nrx,
                    socket,
                    std::ptr::null(),
                    self.pool.as_ptr(),
                )
            })?;
        }
        for q in 0..o.tx_queues {
            // SAFETY: configured port; NULL txconf takes the PMD default.
            check("rte_eth_tx_queue_setup", unsafe {
                ffi::rte_eth_tx_queue_setup(port, q, ntx, socket, std::ptr::null())
            })?;
        }
        if let (Some(mtu), None) = (o.mtu, &self.af_packet) {
            // SAFETY: valid port id.
            let ret = unsafe { ffi::rte_eth_dev_set_mtu(port, mtu) };
            if ret < 0 && ret != -(libc::ENOTSUP) {
                check("rte_eth_dev_set_mtu", ret)?;
            }
        }
        if o.promiscuous {
            // SAFETY: valid port id. Not every PMD supports it; that is fine.
            let _ = unsafe { ffi::rte_eth_promiscuous_enable(port) };
        }
        // SAFETY: configured port with all queues set up.
        check("rte_eth_dev_start", unsafe { ffi::rte_eth_dev_start(port) })?;
        Ok(())
    }
}

/// A config's `mtu` on a net_af_packet port: the ethdev refuses any MTU
/// over 1500 (the PMD's `max_rx_pktlen` is 1518) though the ring carries
/// more, so the MTU goes to the kernel interface, as the PMD's own MTU
/// call would set it, if a ring slot holds its frames.
fn set_af_packet_mtu(port: &str, a: &AfPacketArgs, mtu: u16) -> Result<()> {
    let frame = u32::from(mtu) + crate::wire::len::ETH_VLAN as u32;
    if frame > a.max_frame() {
        return Err(Error::Invalid(format!(
            "port {port}: mtu {mtu} makes frames of up to {frame} B, but net_af_packet's ring \
             slots (framesz {}) hold {} B; give framesz >= {} (and a blocksz that is a multiple of it)",
            a.framesz,
            a.max_frame(),
            (frame + super::options::AF_PACKET_SLOT_OVERHEAD).next_multiple_of(16)
        )));
    }
    let now = netdev::if_mtu(&a.iface)
        .map_err(|e| Error::Invalid(format!("port {port}: interface {:?}: {e}", a.iface)))?;
    if now != u32::from(mtu) {
        netdev::set_if_mtu(&a.iface, u32::from(mtu)).map_err(|e| {
            Error::Invalid(format!(
                "port {port}: setting the MTU of interface {:?} from {now} to {mtu}: {e}",
                a.iface
            ))
        })?;
        log::info!("port {port}: interface {} MTU {now} -> {mtu}", a.iface);
    }
    Ok(())
}

impl Drop for PortInner {
    fn drop(&mut self) {
        // No interrupt callback (net_memif's control channel) may run on
        // this port while it closes (see intr.rs); if the interrupt thread
        // cannot be held, the port closes all the same.
        let _held = super::intr::hold(std::time::Duration::from_secs(1));
        // SAFETY: the last handle is gone, so no queue is polled any more.
        unsafe {
            let _ = ffi::rte_eth_dev_stop(self.id.0);
            let _ = ffi::rte_eth_dev_close(self.id.0);
        }
        // `link` drops after this: the rings go with the last end.
    }
}

/// The rings of an in-process link: `ab` carries a -> b, `ba` b -> a.
struct RingLink {
    ab: Vec<NonNull<ffi::rte_ring>>,
    ba: Vec<NonNull<ffi::rte_ring>>,
}

// SAFETY: rings are multi-thread safe DPDK objects; each is used by one
// producer and one consumer port queue.
unsafe impl Send for RingLink {}
// SAFETY: see Send.
unsafe impl Sync for RingLink {}

impl Drop for RingLink {
    fn drop(&mut self) {
        for r in self.ab.iter().chain(&self.ba) {
            // Frames sent but never received go back to their pool.
            drain_ring(*r);
            // SAFETY: both ports of the link are closed (each held this
            // RingLink), so nothing uses the ring any more.
            unsafe { ffi::rte_ring_free(r.as_ptr()) }
        }
    }
}

fn make_ring(name: &str, size: u32, eal: &Eal) -> Result<NonNull<ffi::rte_ring>> {
    let cname = CString::new(name).map_err(|_| Error::Invalid(format!("ring name {name:?}")))?;
    // SAFETY: valid C string; single-producer / single-consumer flags suit
    // one queue owner per end.
    let r = unsafe {
        ffi::rte_ring_create(
            cname.as_ptr(),
            size,
            eal.socket_id(),
            ffi::RING_F_SP_ENQ | ffi::RING_F_SC_DEQ,
        )
    };
    NonNull::new(r).ok_or_else(|| from_errno("rte_ring_create"))
}

fn drain_ring(r: NonNull<ffi::rte_ring>) {
    let mut raw = [std::ptr::null_mut::<std::ffi::c_void>(); BURST];
    loop {
        // SAFETY: r is a live ring of mbuf pointers; raw has room for BURST.
        let n =
            unsafe { ffi::ferroce_ring_dequeue_burst(r.as_ptr(), raw.as_mut_ptr(), BURST as u32) };
        if n == 0 {
            break;
        }
        for p in &raw[..n as usize] {
            // SAFETY: every pointer in the ring is an mbuf a port enqueued and
            // nobody else will dequeue.
            unsafe { ffi::ferroce_pktmbuf_free(*p as *mut ffi::rte_mbuf) }
        }
    }
}

/// One rx queue and one tx queue of a port, owned by one poll loop.
pub struct PortQueue {
    port: Port,
    id: u16,
    q: u16,
}

impl PortQueue {
    /// The port the queue belongs to.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// The queue's index on its port.
    pub fn queue_id(&self) -> QueueId {
        QueueId(self.q)
    }
}

impl Backend for PortQueue {
    type Buf = Mbuf;

    #[inline]
    fn rx_burst(&mut self, out: &mut Burst<Mbuf>) -> usize {
        let len = out.len();
        let want = out.remaining_capacity();
        if want == 0 {
            return 0;
        }
        // SAFETY: Mbuf is repr(transparent) over a non-null mbuf pointer, so
        // the burst's spare capacity is an array of `want` pointer slots that
        // rx_burst fills; the first n become owned Mbufs via set_len. This
        // PortQueue is the only poller of rx queue q. The prefetch only
        // reads those n mbufs (and the segments chained to them), ours now.
        unsafe {
            let slots = out.as_mut_ptr().add(len) as *mut *mut ffi::rte_mbuf;
            let n = ffi::ferroce_rx_burst(self.id, self.q, slots, want as u16);
            if n > 1 {
                // What handling the burst reads starts loading at once, so
                // that its misses overlap instead of coming one per frame.
                ffi::ferroce_prefetch_burst(slots, n);
            }
            let n = usize::from(n);
            out.set_len(len + n);
            n
        }
    }

    #[inline]
    fn alloc(&mut self) -> Option<Mbuf> {
        self.port.0.pool.alloc()
    }

    #[inline]
    fn tx_burst(&mut self, frames: &mut Burst<Mbuf>) -> usize {
        let n = frames.len();
        if n == 0 {
            return 0;
        }
        // SAFETY: Mbuf is repr(transparent) over a non-null mbuf pointer, so
        // the burst is an array of n owned mbuf pointers. The PMD takes
        // ownership of the first `sent`; we then forget them (set_len) and
        // move the unsent to the front. This PortQueue is the only user of
        // tx queue q.
        unsafe {
            let base = frames.as_mut_ptr();
            let sent = usize::from(ffi::ferroce_tx_burst(
                self.id,
                self.q,
                base as *mut *mut ffi::rte_mbuf,
                n as u16,
            ));
            frames.set_len(0);
            if sent < n {
                std::ptr::copy(base.add(sent), base, n - sent);
            }
            frames.set_len(n - sent);
            sent
        }
    }

    #[inline]
    fn free_burst(&mut self, frames: &mut Burst<Mbuf>) {
        free_burst(frames);
    }

    /// A ring link's queues lend (the peer reads a chained mbuf's
    /// segments by their addresses), and net_memif's (it copies each
    /// segment into its shared buffers). A NIC would need the region
    /// registered for DMA (`rte_extmem_register`, `rte_dev_dma_map`),
    /// which ferroce does not do yet: its frames are copied.
    fn can_lend(&self) -> bool {
        self.port.0._link.is_some() || self.port.0.memif
    }

    fn attach(
        &mut self,
        frame: &mut Mbuf,
        head: usize,
        mem: &dyn core::any::Any,
        offset: usize,
        len: usize,
    ) -> bool {
        let Some(region) = mem.downcast_ref::<DmaRegion>() else {
            return false;
        };
        if !self.can_lend() {
            return false;
        }
        let Some(pool) = self.port.0.segment_pool() else {
            return false;
        };
        region.lend(pool, frame, head, offset, len)
    }
}
