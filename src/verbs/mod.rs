//! The verbs API: what an application programs against, named as in
//! libibverbs so that a verbs user recognises every concept.
//!
//! | libibverbs | here |
//! | --- | --- |
//! | `ibv_open_device` / `ibv_context` | [`Context::open`] / [`Context`] |
//! | `ibv_query_port`, `ibv_query_gid` | [`Context::query_port`], [`Context::query_gid`] |
//! | `ibv_alloc_pd` / `ibv_dealloc_pd` | [`Context::alloc_pd`] / [`Context::dealloc_pd`] |
//! | `ibv_reg_mr` / `ibv_dereg_mr` | [`Context::reg_mr`] / [`Context::dereg_mr`] |
//! | `ibv_create_cq` / `ibv_destroy_cq` | [`Context::create_cq`] / [`Context::destroy_cq`] |
//! | `ibv_poll_cq` | [`Context::poll_cq`] |
//! | `ibv_req_notify_cq` + `ibv_get_cq_event` | [`Context::wait_cq`] |
//! | `ibv_create_qp` / `ibv_destroy_qp` | [`Context::create_qp`] / [`Context::destroy_qp`] |
//! | `ibv_modify_qp` / `ibv_query_qp` | [`Context::modify_qp`] / [`Context::query_qp`] |
//! | `ibv_post_send` / `ibv_post_recv` | [`Context::post_send`] / [`Context::post_recv`] |
//! | `ibv_get_async_event` | [`Context::poll_async_event`] |
//!
//! A context is one port: the RC transport ([`crate::transport`]), the
//! port's neighbour table (ARP) and the backend queue frames move on. It
//! runs to completion in the caller's thread: every `poll_cq` (and
//! [`Context::progress`]) first moves the port's frames in and out and runs
//! the timers that are due, so an application that polls its CQ drives its
//! datapath, as with a DPDK poll-mode NIC. The other mode, datapath
//! threads that own contexts while application threads reach them through
//! lock-free rings, is [`lcore`] ([`Datapath`], [`AppContext`]).
//!
//! Handles ([`Pd`], [`Mr`], [`Cq`], [`Qp`]) are owned values: destroying
//! one consumes it, so a destroyed object cannot be named again, and a
//! handle of another context is refused ([`Error::WrongContext`]). A
//! region's memory is owned by the context while it is registered (the
//! responder writes into it); [`Context::mr`] and [`Context::mr_mut`] lend
//! it out. Destroying what is still in use fails with [`Error::Busy`] and
//! hands the handle back. Naming a destroyed QP does not compile:
//!
//! ```compile_fail
//! # use ferroce::{backend::loopback::LoopbackPort, verbs::{Context, Qp}};
//! # fn f(ctx: &mut Context<LoopbackPort>, qp: Qp) {
//! ctx.destroy_qp(qp).unwrap();
//! ctx.query_qp(&qp); // error[E0382]: borrow of moved value: `qp`
//! # }
//! ```
//!
//! As with rdma-core on RoCE, the destination MAC of a connection is not
//! the application's business: a [`QpAttr::ah_attr`] whose `dmac` is zero
//! is resolved from its GID (ARP for IPv4, Neighbor Discovery for IPv6)
//! when the QP moves to RTR.

#![deny(unsafe_code)]
use crate::backend::{Backend, Burst};
use crate::host::Host;
pub mod cm;
pub mod lcore;
use crate::host::neigh::{Lookup, NeighConfig};
use crate::host::pump::{pump_with, PumpStats};
use crate::time::{Clock, Duration, Instant};
use crate::transport::connect::connect_steps;
pub use crate::transport::connect::ConnectParams;
use crate::transport::{self, CqId, Device, DeviceConfig, MrKeys, MrSpec, PdId, QpConfig};
use crate::wire::MacAddr;
use core::net::IpAddr;
pub use lcore::{AppContext, Datapath};
use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::transport::mr::RegionMemory;
pub use crate::transport::{
    Access, AddressVector, AttrMask, Event as AsyncEvent, Mtu, Payload, QpAttr, QpCaps, QpCounters,
    QpState, QpType, RecvWr, RxCounters, SendOp, SendWr, Sge, UdDest, Wc, WcOpcode, WcStatus,
};

/// What a verb refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The transport refused (bad attribute, wrong state, full queue...).
    #[error(transparent)]
    Verb(#[from] transport::Error),
    /// The connection manager refused (RDMA-CM verbs).
    #[error("connection manager: {0}")]
    Cm(crate::cm::CmError),
    /// The handle was made by another context.
    #[error("the handle belongs to another context")]
    WrongContext,
    /// The object is still in use; the text says by what.
    #[error("still in use: {0}")]
    Busy(&'static str),
    /// The GID table has no entry at this index.
    #[error("no GID at index {0}")]
    NoSuchGid(u8),
    /// ARP or Neighbor Discovery found no MAC for this address; the text
    /// says why (no answer at all, or none in time).
    #[error("cannot resolve the MAC of {0}: {1}")]
    Unresolved(IpAddr, &'static str),
    /// A path MTU larger than the port's frames carry (`active_mtu`).
    #[error(
        "path MTU {asked} is more than this port carries: path MTU at most {active}, frames up to {max_frame} B ({source_})"
    )]
    PathMtu {
        /// The path MTU asked for, in bytes.
        asked: u32,
        /// The port's `active_mtu`, in bytes.
        active: u32,
        /// The largest frame the port carries.
        max_frame: u32,
        /// What bounds it.
        source_: Box<str>,
    },
    /// The context's region allocator could not provide the memory.
    #[error("memory for a {len}-byte region: {why}")]
    NoMemory {
        /// Bytes asked for.
        len: usize,
        /// The allocator's reason.
        why: String,
    },
}

/// A refused destroy: why, and the handle back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Refused<H> {
    /// Why the destroy was refused.
    pub error: Error,
    /// The handle, still valid.
    pub handle: H,
}

/// A protection domain (`ibv_pd`).
#[derive(Debug, PartialEq, Eq)]
pub struct Pd {
    ctx: u32,
    id: PdId,
}

/// A registered memory region (`ibv_mr`): its keys and address.
#[derive(Debug, PartialEq, Eq)]
pub struct Mr {
    ctx: u32,
    keys: MrKeys,
}

impl Mr {
    /// Its local key, for SGEs of this context's work requests.
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    /// Its remote key, for a peer's RDMA READ, WRITE and atomics.
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    /// The virtual address of its first byte (what a peer puts in a RETH).
    pub fn addr(&self) -> u64 {
        self.keys.addr
    }
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.keys.len
    }
    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.keys.len == 0
    }
    /// The SGE of its bytes `offset..offset + len`, or `None` when they
    /// are not all inside it.
    pub fn sge(&self, offset: usize, len: u32) -> Option<Sge> {
        let end = offset.checked_add(len as usize)?;
        (end <= self.keys.len).then_some(Sge {
            addr: self.keys.addr + offset as u64,
            length: len,
            lkey: self.keys.lkey,
        })
    }
}

/// A completion queue (`ibv_cq`).
#[derive(Debug, PartialEq, Eq)]
pub struct Cq {
    ctx: u32,
    id: CqId,
    cqe: usize,
}

impl Cq {
    /// The completions it holds before it overruns.
    pub fn cqe(&self) -> usize {
        self.cqe
    }
}

/// An address handle (`ibv_ah`): where a UD QP's datagrams go, its
/// next-hop MAC resolved when it was created.
#[derive(Debug, PartialEq, Eq)]
pub struct Ah {
    ctx: u32,
    id: transport::AhId,
    av: AddressVector,
}

impl Ah {
    /// Its address vector, MAC included.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The destination of a UD send to QP `remote_qpn` with Q_Key
    /// `remote_qkey` (`wr.ud`).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            ah: self.id,
            remote_qpn,
            remote_qkey,
        }
    }
}

/// A queue pair (`ibv_qp`), RC or UD as its [`QpCaps::qp_type`] says.
#[derive(Debug, PartialEq, Eq)]
pub struct Qp {
    ctx: u32,
    qpn: u32,
}

impl Qp {
    /// Its QP number (`qp_num`).
    pub fn num(&self) -> u32 {
        self.qpn
    }
}

/// How a GID entry is used (`ibv_gid_type`); ferroce speaks RoCE v2 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// RoCE v2: RoCE over UDP/IP (`IBV_GID_TYPE_ROCE_V2`).
    RoceV2,
}

/// One entry of the port's GID table (`ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index in the table.
    pub index: u8,
    /// The GID's 16 bytes (an IPv4 address as `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    /// The IP address the GID stands for (IPv4 when it is IPv4-mapped).
    pub ip: IpAddr,
    /// Always [`GidType::RoceV2`].
    pub gid_type: GidType,
}

/// What `ibv_query_port` tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// The port's MAC address.
    pub mac: MacAddr,
    /// The largest path MTU the port's frames can carry (`active_mtu`).
    pub active_mtu: Mtu,
    /// The largest frame the port carries (Ethernet header included).
    pub max_frame: usize,
    /// What bounds `max_frame`, in words (see [`ContextConfig::frame_source`]).
    pub frame_source: String,
    /// Entries in the GID table.
    pub gid_tbl_len: usize,
    /// Entries in the P_Key table.
    pub pkey_tbl_len: usize,
}

/// Where a region's memory comes from.
pub type RegionAlloc = fn(usize) -> Result<Box<dyn RegionMemory>, String>;

/// Plain heap memory, its first byte on a cache line or a page (as
/// `MrTable::register`'s; what tests and the simulator use).
pub fn heap_region(len: usize) -> Result<Box<dyn RegionMemory>, String> {
    Ok(Box::new(crate::transport::mr::AlignedBytes::zeroed(len)))
}

/// How to open a context.
#[derive(Debug, Clone)]
pub struct ContextConfig {
    /// The port's MAC address, the source of every frame.
    pub mac: MacAddr,
    /// The GID table, index 0 first (IPv4 addresses for IPv4 GIDs).
    pub gids: Vec<IpAddr>,
    /// The largest frame the port carries, Ethernet header included: it
    /// bounds the path MTU (`active_mtu`).
    pub max_frame: usize,
    /// What sets `max_frame`, in words, for messages that name the limit
    /// (e.g. "MTU 1500 of interface veth0").
    pub frame_source: String,
    /// Timers of the neighbour table (ARP and Neighbor Discovery).
    pub neigh: NeighConfig,
    /// Neighbours known in advance (never resolved, never aged).
    pub static_neigh: Vec<(IpAddr, MacAddr)>,
    /// Transport tunables of new QPs.
    pub qp: QpConfig,
    /// Most READ / atomic requests outstanding per QP.
    pub max_qp_rd_atom: u8,
    /// ECN, CNPs and rate control.
    pub congestion: crate::transport::CongestionConfig,
    /// Where region memory comes from (hugepages on a DPDK port, see
    /// `crate::tools::port::memory`).
    pub region_alloc: RegionAlloc,
    /// How long [`Context::modify_qp`] waits for ARP to resolve a peer.
    pub resolve_timeout: Duration,
    /// The port's 802.1Q VLAN: every frame tagged, other VLANs dropped.
    pub vlan: Option<transport::Vlan>,
    /// Zero-copy send: request payloads of at least this many bytes leave
    /// from their region in place, where `region_alloc` gives memory a
    /// port can send from and the port can
    /// (`crate::backend::Backend::can_lend`); `None`: always copied.
    pub zero_copy_min: Option<usize>,
    /// Which of the port's datapaths this context is, when several share
    /// the port (its queue a [`crate::backend::steer::Steered`] one): its
    /// QPs get the numbers it owns, and only the first answers ARP and
    /// Neighbor Discovery. Default: the port's only one.
    pub shard: crate::wire::Shard,
}

impl ContextConfig {
    /// The defaults for a port with MAC `mac` and the one GID `ip`: frames
    /// up to [`crate::host::pump::MAX_FRAME`], heap regions, 16 READs or
    /// atomics outstanding, 3 s to resolve a peer's MAC, untagged.
    pub fn new(mac: MacAddr, ip: IpAddr) -> ContextConfig {
        ContextConfig {
            mac,
            gids: vec![ip.to_canonical()],
            max_frame: crate::host::pump::MAX_FRAME,
            frame_source: "the default frame size".into(),
            neigh: NeighConfig::default(),
            static_neigh: Vec::new(),
            qp: QpConfig::default(),
            max_qp_rd_atom: 16,
            congestion: crate::transport::CongestionConfig::default(),
            region_alloc: heap_region,
            resolve_timeout: Duration::from_secs(3),
            vlan: None,
            zero_copy_min: None,
            shard: crate::wire::Shard::default(),
        }
    }
}

/// Headers in front of a RoCE v2 payload at most: Ethernet + VLAN, IPv6,
/// UDP, BTH, RETH, ICRC.
const MAX_OVERHEAD: usize =
    crate::wire::len::ROCE_MAX + crate::wire::len::RETH + crate::wire::len::ICRC;

/// The largest path MTU whose packets, with every header they may carry
/// (802.1Q, IPv6, RETH), fit in frames of `max_frame` bytes: a port's
/// `active_mtu`.
pub fn active_mtu(max_frame: usize) -> Mtu {
    [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
        .into_iter()
        .find(|m| m.bytes() as usize + MAX_OVERHEAD <= max_frame)
        .unwrap_or(Mtu::Mtu256)
}

static NEXT_CONTEXT: AtomicU32 = AtomicU32::new(1);

/// One port's verbs context, run to completion in the caller's thread.
pub struct Context<B: Backend> {
    id: u32,
    host: Host,
    port: B,
    clock: Box<dyn Clock + Send>,
    pending: Burst<B::Buf>,
    spare: Option<B::Buf>,
    active_mtu: Mtu,
    max_frame: usize,
    frame_source: String,
    region_alloc: RegionAlloc,
    resolve_timeout: Duration,
    moved: PumpStats,
    /// QP1 and the CM agent, once an RDMA-CM verb was called ([`cm`]).
    cm: Option<Box<cm::Gsi>>,
}

impl<B: Backend> core::fmt::Debug for Context<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.id)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Context<B> {
    /// Opens a context on `port` (`ibv_open_device`), reading time from
    /// `clock`.
    pub fn open(port: B, clock: Box<dyn Clock + Send>, cfg: ContextConfig) -> Result<Self, Error> {
        let active_mtu = active_mtu(cfg.max_frame);
        let mut dc = DeviceConfig::new(
            cfg.mac,
            cfg.gids.first().copied().ok_or(Error::NoSuchGid(0))?,
        );
        dc.gids = cfg.gids.iter().map(|g| g.to_canonical()).collect();
        dc.qp = cfg.qp;
        dc.max_qp_rd_atom = cfg.max_qp_rd_atom;
        dc.vlan = cfg.vlan;
        dc.congestion = cfg.congestion;
        dc.port_mtu = active_mtu;
        dc.shard = cfg.shard;
        let neigh = NeighConfig {
            answer: cfg.neigh.answer && cfg.shard.index == 0,
            ..cfg.neigh
        };
        let mut host = Host::new(dc, neigh)?;
        host.dev.set_zero_copy(cfg.zero_copy_min);
        for &(ip, mac) in &cfg.static_neigh {
            host.neigh.add_static(ip.to_canonical(), mac);
        }
        Ok(Context {
            id: NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed),
            host,
            port,
            clock,
            pending: Burst::new(),
            spare: None,
            active_mtu,
            max_frame: cfg.max_frame,
            frame_source: cfg.frame_source,
            region_alloc: cfg.region_alloc,
            resolve_timeout: cfg.resolve_timeout,
            moved: PumpStats::default(),
            cm: None,
        })
    }

    fn mine(&self, ctx: u32) -> Result<(), Error> {
        if ctx == self.id {
            Ok(())
        } else {
            Err(Error::WrongContext)
        }
    }

    /// The clock's now.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    // ----- device and port -----

    /// The port's MAC, active MTU and table sizes (`ibv_query_port`).
    pub fn query_port(&self) -> PortAttr {
        let c = self.host.dev.config();
        PortAttr {
            mac: c.mac,
            active_mtu: self.active_mtu,
            max_frame: self.max_frame,
            frame_source: self.frame_source.clone(),
            gid_tbl_len: c.gids.len(),
            pkey_tbl_len: c.pkeys.len(),
        }
    }

    /// Whether the port's frames carry path MTU `mtu`: [`Error::PathMtu`],
    /// naming the limit, if it is above `active_mtu`.
    pub fn check_path_mtu(&self, mtu: Mtu) -> Result<(), Error> {
        if mtu <= self.active_mtu {
            return Ok(());
        }
        Err(Error::PathMtu {
            asked: mtu.bytes(),
            active: self.active_mtu.bytes(),
            max_frame: self.max_frame as u32,
            source_: self.frame_source.as_str().into(),
        })
    }

    /// Entry `index` of the GID table (`ibv_query_gid_ex`).
    pub fn query_gid(&self, index: u8) -> Result<GidEntry, Error> {
        let ip = *self
            .host
            .dev
            .config()
            .gids
            .get(index as usize)
            .ok_or(Error::NoSuchGid(index))?;
        Ok(GidEntry {
            index,
            gid: crate::wire::gid_of(ip),
            ip,
            gid_type: GidType::RoceV2,
        })
    }

    // ----- protection domains and memory -----

    /// A new protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> Pd {
        Pd {
            ctx: self.id,
            id: self.host.dev.alloc_pd(),
        }
    }

    /// Frees a PD no QP or region uses.
    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<(), Refused<Pd>> {
        let r = self
            .mine(pd.ctx)
            .and_then(|_| self.host.dev.dealloc_pd(pd.id).map_err(busy));
        r.map_err(|error| Refused { error, handle: pd })
    }

    /// Registers a zeroed region of `len` bytes from the context's region
    /// memory (hugepages on a DPDK port) with `access`.
    pub fn reg_mr(&mut self, pd: &Pd, len: usize, access: Access) -> Result<Mr, Error> {
        let mem = (self.region_alloc)(len).map_err(|why| Error::NoMemory { len, why })?;
        self.reg_mr_memory(pd, mem, access)
    }

    /// Registers memory the application allocated (its length is the
    /// region's); the context owns it until [`Context::dereg_mr`].
    pub fn reg_mr_memory(
        &mut self,
        pd: &Pd,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<Mr, Error> {
        self.mine(pd.ctx)?;
        let spec = MrSpec {
            pd: pd.id,
            len: 0,
            access,
            addr: None,
            key: None,
        };
        let keys = self.host.dev.reg_mr_memory(spec, mem)?;
        Ok(Mr { ctx: self.id, keys })
    }

    /// Deregisters a region no posted work request names.
    pub fn dereg_mr(&mut self, mr: Mr) -> Result<(), Refused<Mr>> {
        let r = self.mine(mr.ctx).and_then(|_| {
            if self.host.dev.mr_in_use(mr.keys.lkey) {
                return Err(Error::Busy("a posted work request names this region"));
            }
            self.host
                .dev
                .dereg_mr(mr.keys.lkey)
                .then_some(())
                .ok_or(Error::Verb(transport::Error::NoSuchMr))
        });
        r.map_err(|error| Refused { error, handle: mr })
    }

    /// A region's bytes.
    pub fn mr(&self, mr: &Mr) -> Result<&[u8], Error> {
        self.mine(mr.ctx)?;
        self.host
            .dev
            .mr(mr.keys.lkey)
            .ok_or(Error::Verb(transport::Error::NoSuchMr))
    }

    /// A region's bytes, to write.
    pub fn mr_mut(&mut self, mr: &Mr) -> Result<&mut [u8], Error> {
        self.mine(mr.ctx)?;
        self.host
            .dev
            .mr_mut(mr.keys.lkey)
            .ok_or(Error::Verb(transport::Error::NoSuchMr))
    }

    // ----- completion queues -----

    /// A CQ holding `cqe` completions (`ibv_create_cq`).
    pub fn create_cq(&mut self, cqe: usize) -> Result<Cq, Error> {
        let id = self.host.dev.create_cq(cqe)?;
        Ok(Cq {
            ctx: self.id,
            id,
            cqe,
        })
    }

    /// Destroys a CQ no QP uses.
    pub fn destroy_cq(&mut self, cq: Cq) -> Result<(), Refused<Cq>> {
        let r = self
            .mine(cq.ctx)
            .and_then(|_| self.host.dev.destroy_cq(cq.id).map_err(busy));
        r.map_err(|error| Refused { error, handle: cq })
    }

    /// Moves the port's frames and due timers once, then takes up to `max`
    /// completions of `cq`, oldest first, into `out` (`ibv_poll_cq`).
    pub fn poll_cq(&mut self, cq: &Cq, max: usize, out: &mut Vec<Wc>) -> Result<usize, Error> {
        self.mine(cq.ctx)?;
        self.progress();
        Ok(self.host.dev.poll_cq(cq.id, max, out))
    }

    /// Takes completions of `cq` without moving frames first.
    pub fn poll_cq_only(&mut self, cq: &Cq, max: usize, out: &mut Vec<Wc>) -> Result<usize, Error> {
        self.mine(cq.ctx)?;
        Ok(self.host.dev.poll_cq(cq.id, max, out))
    }

    /// Drives the port until `cq` has a completion or `timeout` passes,
    /// yielding the CPU between rounds in which nothing moved (the
    /// run-to-completion form of `ibv_req_notify_cq` + `ibv_get_cq_event`).
    /// Returns whether a completion is waiting.
    pub fn wait_cq(&mut self, cq: &Cq, timeout: Duration) -> Result<bool, Error> {
        self.mine(cq.ctx)?;
        Ok(self.progress_until(timeout, |c| c.host.dev.cq_len(cq.id) > 0))
    }

    // ----- queue pairs -----

    /// An RC QP in RESET (`ibv_create_qp`).
    pub fn create_qp(
        &mut self,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<Qp, Error> {
        self.mine(pd.ctx)?;
        self.mine(send_cq.ctx)?;
        self.mine(recv_cq.ctx)?;
        let qpn = self
            .host
            .dev
            .create_qp(pd.id, send_cq.id, recv_cq.id, caps)?;
        Ok(Qp { ctx: self.id, qpn })
    }

    /// An address handle for `av` (`ibv_create_ah`): its GID index must be
    /// in the table and of the same IP version as `dgid`; a zero `dmac` is
    /// resolved from the GID (ARP or Neighbor Discovery) now, as rdma-core
    /// does on RoCE.
    pub fn create_ah(&mut self, av: &AddressVector) -> Result<Ah, Error> {
        let sgid = self.query_gid(av.sgid_index)?.ip;
        if sgid.to_canonical().is_ipv4() != av.dgid.to_canonical().is_ipv4() {
            return Err(Error::Verb(transport::Error::InvalidAttr(
                "dgid and sgid are of different IP versions",
            )));
        }
        let mut av = *av;
        if av.dmac == MacAddr([0; 6]) {
            av.dmac = self.resolve(av.dgid)?;
        }
        let id = self.host.dev.create_ah(&av)?;
        Ok(Ah {
            ctx: self.id,
            id,
            av,
        })
    }

    /// Destroys an address handle (`ibv_destroy_ah`).
    pub fn destroy_ah(&mut self, ah: Ah) -> Result<(), Refused<Ah>> {
        let r = self
            .mine(ah.ctx)
            .and_then(|_| self.host.dev.destroy_ah(ah.id).map_err(Error::from));
        r.map_err(|error| Refused { error, handle: ah })
    }

    /// `ibv_modify_qp`: the attributes `mask` names, checked against the
    /// transition (IBTA §10.3 / B.10). An address vector with a zero
    /// `dmac` gets its MAC from ARP first.
    pub fn modify_qp(&mut self, qp: &Qp, attr: &QpAttr, mask: AttrMask) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        if mask.contains(AttrMask::PATH_MTU) {
            self.check_path_mtu(attr.path_mtu)?;
        }
        let mut attr = *attr;
        if mask.contains(AttrMask::AV) {
            if let Some(av) = attr.ah_attr.as_mut() {
                if av.dmac == MacAddr([0; 6]) {
                    av.dmac = self.resolve(av.dgid)?;
                }
            }
        }
        Ok(self.host.dev.modify_qp(qp.qpn, &attr, mask)?)
    }

    /// Brings `qp` from RESET through INIT and RTR to RTS towards the
    /// remote QP `remote_qpn` at `remote` (whose MAC ARP finds), sending
    /// from PSN `sq_psn` and expecting `rq_psn`: the three `ibv_modify_qp`
    /// calls of every RC connection, with `p`'s attributes.
    pub fn connect(
        &mut self,
        qp: &Qp,
        remote_qpn: u32,
        remote: IpAddr,
        p: &ConnectParams,
        sq_psn: u32,
        rq_psn: u32,
    ) -> Result<(), Error> {
        let zero = MacAddr([0; 6]);
        for (attr, mask) in connect_steps(remote_qpn, zero, remote, p, sq_psn, rq_psn) {
            self.modify_qp(qp, &attr, mask)?;
        }
        Ok(())
    }

    /// The QP's state and attributes (`ibv_query_qp`).
    pub fn query_qp(&self, qp: &Qp) -> Result<(QpState, QpAttr), Error> {
        self.mine(qp.ctx)?;
        Ok(self.host.dev.query_qp(qp.qpn)?)
    }

    /// Destroys a QP; its outstanding work requests go with it, without
    /// completions (move it to ERR and poll first to get them flushed).
    pub fn destroy_qp(&mut self, qp: Qp) -> Result<(), Refused<Qp>> {
        let r = self
            .mine(qp.ctx)
            .and_then(|_| self.host.dev.destroy_qp(qp.qpn).map_err(Error::from));
        r.map_err(|error| Refused { error, handle: qp })
    }

    /// Posts a send work request (`ibv_post_send`); in ERR it completes at
    /// once with a flush error.
    pub fn post_send(&mut self, qp: &Qp, wr: SendWr) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        Ok(self.host.dev.post_send(qp.qpn, wr)?)
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qp: &Qp, wr: RecvWr) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        Ok(self.host.dev.post_recv(qp.qpn, wr)?)
    }

    /// Send work requests posted and not yet completed.
    pub fn send_queue_len(&self, qp: &Qp) -> usize {
        self.host.dev.send_queue_len(qp.qpn)
    }

    /// Receive work requests posted and not yet consumed.
    pub fn recv_queue_len(&self, qp: &Qp) -> usize {
        self.host.dev.recv_queue_len(qp.qpn)
    }

    /// The next asynchronous event (`ibv_get_async_event`).
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.host.dev.poll_event()
    }

    // ----- the datapath -----

    /// One round on the port: received frames in, due timers, frames out.
    pub fn progress(&mut self) -> PumpStats {
        let now = self.clock.now();
        let st = pump_with(
            &mut self.host,
            &mut self.port,
            now,
            &mut self.pending,
            &mut self.spare,
        );
        self.moved.rx += st.rx;
        self.moved.tx += st.tx;
        if self.cm.is_some() && self.cm_round(now) {
            // The MADs the CM just posted leave now, not a round later
            // (a DREP posted just before the application exits, say).
            let more = pump_with(
                &mut self.host,
                &mut self.port,
                now,
                &mut self.pending,
                &mut self.spare,
            );
            self.moved.rx += more.rx;
            self.moved.tx += more.tx;
            return PumpStats {
                rx: st.rx + more.rx,
                tx: st.tx + more.tx,
            };
        }
        st
    }

    /// Drives the port until `done` says so or `timeout` passes; returns
    /// whether it did.
    pub fn progress_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let end = self.clock.now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            if self.clock.now() >= end {
                return false;
            }
            let st = self.progress();
            if st.rx == 0 && st.tx == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// The MAC of `ip`, by ARP or IPv6 Neighbor Discovery (driving the
    /// port meanwhile).
    pub fn resolve(&mut self, ip: IpAddr) -> Result<MacAddr, Error> {
        let ip = ip.to_canonical();
        let mut found = Err(Error::Unresolved(ip, "no answer in time"));
        let limit = self.resolve_timeout;
        self.progress_until(limit, |c| {
            let now = c.clock.now();
            match c.host.lookup(ip, now) {
                Lookup::Found(m) => found = Ok(m),
                Lookup::Failed => found = Err(Error::Unresolved(ip, "no answer")),
                Lookup::Pending => return false,
            }
            true
        });
        found
    }

    /// Frames moved since the context opened.
    pub fn moved(&self) -> PumpStats {
        self.moved
    }

    // ----- observability -----

    /// What the QP has seen and done so far.
    pub fn qp_counters(&self, qp: &Qp) -> Result<QpCounters, Error> {
        self.mine(qp.ctx)?;
        self.host
            .dev
            .qp_counters(qp.qpn)
            .copied()
            .ok_or(Error::Verb(transport::Error::NoSuchQp))
    }

    /// Every QP's counters summed, destroyed ones included.
    pub fn counters(&self) -> QpCounters {
        self.host.dev.counters()
    }

    /// The QP's reaction point now: rate, target rate, α and stages.
    pub fn cc_state(&self, qp: &Qp) -> Result<crate::cc::CcState, Error> {
        self.mine(qp.ctx)?;
        self.host
            .dev
            .cc_state(qp.qpn)
            .ok_or(Error::Verb(transport::Error::NoSuchQp))
    }

    /// Starts or stops keeping the QP's rate-decision records.
    pub fn set_cc_trace(&mut self, qp: &Qp, on: bool) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        self.host.dev.set_cc_trace(qp.qpn, on);
        Ok(())
    }

    /// Moves the QP's rate-decision records into `out` (kept when
    /// `ContextConfig::congestion.trace` is on, or `set_cc_trace`).
    pub fn drain_cc_trace(
        &mut self,
        qp: &Qp,
        out: &mut Vec<crate::cc::TraceRecord>,
    ) -> Result<(), Error> {
        self.mine(qp.ctx)?;
        self.host.dev.drain_cc_trace(qp.qpn, out);
        Ok(())
    }

    /// Received frames the device dropped before any QP saw them.
    pub fn rx_counters(&self) -> &RxCounters {
        self.host.dev.rx_counters()
    }

    /// The neighbour table's counters.
    pub fn neigh_counters(&self) -> &crate::host::neigh::NeighCounters {
        self.host.neigh.counters()
    }

    /// The transport device underneath, for what the verbs do not cover.
    pub fn device(&self) -> &Device {
        &self.host.dev
    }

    /// The transport device underneath, to change.
    pub fn device_mut(&mut self) -> &mut Device {
        &mut self.host.dev
    }

    /// The backend the context moves frames on.
    pub fn port(&self) -> &B {
        &self.port
    }

    /// Sends what is still queued (for at most `timeout`) and gives the
    /// port back.
    pub fn close(mut self, timeout: Duration) -> B {
        let _ = self.progress_until(timeout, |c| c.pending.is_empty());
        self.port
    }
}

// ----- for the threaded engine (`crate::verbs::lcore`) -----
//
// It runs verbs on a datapath thread for application threads: it routes a
// handle by its context and names it there by a crate-private copy that
// never reaches the application (the application's handle stays the one
// that owns the object).

impl<B: Backend> Context<B> {
    pub(crate) fn id(&self) -> u32 {
        self.id
    }
}

impl Pd {
    pub(crate) fn alias(&self) -> Pd {
        Pd {
            ctx: self.ctx,
            id: self.id,
        }
    }
}

impl Mr {
    pub(crate) fn alias(&self) -> Mr {
        Mr {
            ctx: self.ctx,
            keys: self.keys,
        }
    }
}

impl Cq {
    pub(crate) fn alias(&self) -> Cq {
        Cq {
            ctx: self.ctx,
            id: self.id,
            cqe: self.cqe,
        }
    }
    pub(crate) fn context_id(&self) -> u32 {
        self.ctx
    }
    pub(crate) fn cq_id(&self) -> CqId {
        self.id
    }
}

impl Qp {
    pub(crate) fn alias(&self) -> Qp {
        Qp {
            ctx: self.ctx,
            qpn: self.qpn,
        }
    }
    pub(crate) fn context_id(&self) -> u32 {
        self.ctx
    }
}

/// `Busy` for a transport refusal that says so.
fn busy(e: transport::Error) -> Error {
    match e {
        transport::Error::Busy(why) => Error::Busy(why),
        e => Error::Verb(e),
    }
}

#[cfg(test)]
mod tests;
