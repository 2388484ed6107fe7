//! Protection domains and memory regions: who may touch which bytes.
//!
//! A memory region owns its bytes (the engine's registered memory) and is
//! known by a virtual address range and a key: the L_Key names it in local
//! scatter/gather elements, the R_Key in a peer's RETH or AtomicETH. Every
//! access is checked here, in one place (IBTA §10.6, o10-27 and C9-88..):
//! the key must name a valid region of the QP's protection domain, the
//! region must grant the access (local write, remote read / write /
//! atomic), and the range must lie inside it. Atomics operate on 8-byte
//! aligned little-endian words, as on the x86 hosts RoCE NICs sit in.

use super::wr::Sge;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A local key (names a region in an SGE).
pub type Lkey = u32;
/// A remote key (names a region in a RETH / AtomicETH / IETH).
pub type Rkey = u32;

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// Access rights of a memory region or a QP (`ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Access(u32);

impl Access {
    /// No access beyond local read.
    pub const NONE: Access = Access(0);
    /// Local writes: a receive, a READ response or an atomic result may land here.
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA WRITE here.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may RDMA READ from here.
    pub const REMOTE_READ: Access = Access(4);
    /// Peers may run atomics on 8-byte words here.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// May be invalidated by a peer's SEND with invalidate.
    pub const REMOTE_INVALIDATE: Access = Access(1 << 8);
    /// Every right above.
    pub const ALL: Access = Access(1 | 2 | 4 | 8 | (1 << 8));

    /// Both sets' rights.
    pub const fn union(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
    /// Whether every right of `o` is in this set.
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }
    /// The `ibv_access_flags` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// The rights of `ibv_access_flags` bits `b`; unknown bits are dropped.
    pub const fn from_bits(b: u32) -> Access {
        Access(b & Access::ALL.0)
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        self.union(o)
    }
}

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    #[error("no memory region with key {0:#x}")]
    /// No region has the key (the key).
    NoSuchKey(u32),
    #[error("memory region {0:#x} was invalidated")]
    /// The region was invalidated (the key).
    Invalidated(u32),
    #[error("memory region {0:#x} belongs to another protection domain")]
    /// The region belongs to another protection domain (the key).
    WrongPd(u32),
    #[error("memory region {0:#x} does not grant the access")]
    /// The region does not grant the access (the key).
    NotPermitted(u32),
    #[error("range outside memory region {0:#x}")]
    /// The range is not inside the region (the key).
    OutOfBounds(u32),
    #[error("atomic address not 8-byte aligned")]
    /// An atomic's address is not 8-byte aligned.
    Misaligned,
}

/// How to register a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrSpec {
    /// Protection domain the region belongs to.
    pub pd: PdId,
    /// Length in bytes.
    pub len: usize,
    /// Rights the region grants.
    pub access: Access,
    /// Virtual address of the first byte; `None` picks a fresh range.
    pub addr: Option<u64>,
    /// The key (L_Key = R_Key); `None` picks a fresh one. Chosen keys let a
    /// test reproduce a capture's R_Keys.
    pub key: Option<u32>,
}

impl MrSpec {
    /// `len` bytes in `pd` granting `access`, at a fresh address with a
    /// fresh key.
    pub fn new(pd: PdId, len: usize, access: Access) -> MrSpec {
        MrSpec {
            pd,
            len,
            access,
            addr: None,
            key: None,
        }
    }
}

/// The keys and address of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Key that names the region in local scatter/gather elements.
    pub lkey: Lkey,
    /// Key that names the region in a peer's RETH, AtomicETH or IETH.
    pub rkey: Rkey,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
}

/// The memory a region's bytes live in: aligned heap bytes
/// ([`AlignedBytes`]) by default, hugepages
/// when the engine registers them (`crate::dpdk::HugeMem`).
pub trait RegionMemory: Send + core::fmt::Debug {
    /// The region's bytes.
    fn bytes(&self) -> &[u8];
    /// The region's bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The memory as a port can send from in place (zero-copy send): an
    /// object the port's backend recognises (DPDK's `DmaRegion`, which an
    /// mbuf can point into); `None` (the default): payloads are copied
    /// into the frame.
    fn lender(&self) -> Option<&dyn core::any::Any> {
        None
    }
}

/// Payloads up to this long are always copied with one `memcpy`.
const COPY_SMALL: usize = 256;

/// Copies a payload between a region and a frame (`src` into `dst`, of
/// the same length), choosing by the destination's skew: how far it lies
/// past the source's place in a cache line. Measured on this project's
/// AMD Zen 4 machines with glibc's `memcpy` (`docs/benchmarks.md`):
///
/// - skew 1 to 15: one `memcpy` of 4 KiB took about 1,200 ns instead of
///   100 to 200 (a payload behind a 54 B header copied into an aligned
///   region is at skew 10); a loop of 64-byte moves took about 210. This
///   is that loop.
/// - any other skew, and payloads up to [`COPY_SMALL`] bytes: one `memcpy`.
#[inline]
pub fn copy_payload(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    if dst.len() <= COPY_SMALL {
        dst.copy_from_slice(src);
        return;
    }
    match (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % 64 {
        1..=15 => copy_by_lines(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// [`copy_payload`]'s loop: 64 bytes at a time, the rest at the end.
#[inline(never)]
fn copy_by_lines(dst: &mut [u8], src: &[u8]) {
    let mut d = dst.chunks_exact_mut(64);
    let mut s = src.chunks_exact(64);
    for (dl, sl) in (&mut d).zip(&mut s) {
        dl.copy_from_slice(sl);
    }
    d.into_remainder().copy_from_slice(s.remainder());
}

impl RegionMemory for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// Zeroed heap bytes that begin on a cache line, and on a page once they
/// are [`AlignedBytes::PAGE_FROM`] long, as the memory an application
/// registers with a NIC usually does (`mmap`, hugepages,
/// `posix_memalign`). A `Vec` alone begins where the allocator puts it
/// (16 B past a page for a large one on glibc), and every payload copied
/// into it from an aligned frame or region would then run at that skew
/// (see [`copy_payload`]). The `Vec` is allocated longer by the alignment
/// less one and the region's bytes are the aligned span inside it: no raw
/// allocation, no pointer casts. A large region begins on a page because
/// copies into it ran faster so (`ferroce bench e2e`'s (b): 53.7 to 54.2
/// Gbit/s against 50.9 to 52.0 on a line); a small one only on a line, so
/// its padding stays under 64 B.
#[derive(Debug)]
pub struct AlignedBytes {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBytes {
    /// The length from which a region begins on a page.
    pub const PAGE_FROM: usize = 64 << 10;

    /// Where `len` bytes begin: a multiple of this.
    pub fn align_for(len: usize) -> usize {
        if len >= Self::PAGE_FROM {
            4096
        } else {
            64
        }
    }

    /// `len` zero bytes, the first at a multiple of
    /// [`AlignedBytes::align_for`]`(len)`.
    pub fn zeroed(len: usize) -> AlignedBytes {
        let align = Self::align_for(len);
        let buf = vec![0u8; len + align - 1];
        let start = (buf.as_ptr() as usize).wrapping_neg() % align;
        AlignedBytes { buf, start, len }
    }
}

impl RegionMemory for AlignedBytes {
    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// Bytes several devices register as one region each, as one process
/// registers the same buffer with two NICs: every device reads the one
/// copy, and a device that writes to its region first gets a copy of its
/// own (`Arc::make_mut`), so no device ever sees another's writes. The
/// simulator's hosts share their send buffers this way.
#[derive(Debug, Clone)]
pub struct SharedMemory(std::sync::Arc<Vec<u8>>);

impl SharedMemory {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> SharedMemory {
        SharedMemory(std::sync::Arc::new(vec![0; len]))
    }
}

impl RegionMemory for SharedMemory {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        std::sync::Arc::make_mut(&mut self.0).as_mut_slice()
    }
}

#[derive(Debug)]
struct Mr {
    pd: PdId,
    addr: u64,
    access: Access,
    valid: bool,
    mem: Box<dyn RegionMemory>,
}

impl Mr {
    /// Whether the region lets `pd` have the access `need` to `[va, va +
    /// len)`, and where that range starts in it.
    fn admit(
        &self,
        key: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<usize, AccessError> {
        if !self.valid {
            return Err(AccessError::Invalidated(key));
        }
        if self.pd != pd {
            return Err(AccessError::WrongPd(key));
        }
        if !self.access.contains(need) {
            return Err(AccessError::NotPermitted(key));
        }
        self.range(key, va, len)
    }

    /// Offset of `[va, va + len)` inside the region.
    fn range(&self, key: u32, va: u64, len: u64) -> Result<usize, AccessError> {
        let off = va
            .checked_sub(self.addr)
            .ok_or(AccessError::OutOfBounds(key))?;
        let end = off.checked_add(len).ok_or(AccessError::OutOfBounds(key))?;
        if end > self.mem.bytes().len() as u64 {
            return Err(AccessError::OutOfBounds(key));
        }
        Ok(off as usize)
    }
}

/// A multiplicative hasher for 32-bit keys (the table is on the packet
/// path; SipHash would cost more than the lookup).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(crate) type KeyMap<V> = HashMap<u32, V, BuildHasherDefault<KeyHasher>>;

/// Protection domains and the memory regions registered in them.
#[derive(Debug, Default)]
pub struct MrTable {
    next_pd: u32,
    next_key: u32,
    next_addr: u64,
    mrs: KeyMap<Mr>,
    freed_pds: Vec<u32>,
    /// [`MrTable::write_remote`] checks but does not copy.
    discard_writes: bool,
}

/// Where fresh regions start in the virtual address space.
const FIRST_ADDR: u64 = 0x1_0000_0000;

impl MrTable {
    /// An empty table: no protection domain, no region.
    pub fn new() -> MrTable {
        MrTable {
            next_pd: 1,
            next_key: 0x100,
            next_addr: FIRST_ADDR,
            mrs: KeyMap::default(),
            freed_pds: Vec::new(),
            discard_writes: false,
        }
    }

    /// This table, with [`MrTable::write_remote`] checking every write
    /// (key, protection domain, access, bounds) but copying nothing when
    /// `discard` holds: the regions keep what they held
    /// ([`super::Offload::discard_write_payloads`]).
    pub fn discarding_writes(mut self, discard: bool) -> MrTable {
        self.discard_writes = discard;
        self
    }

    /// A new protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        let pd = PdId(self.next_pd);
        self.next_pd += 1;
        pd
    }

    /// Whether `pd` was allocated and not freed.
    pub fn pd_exists(&self, pd: PdId) -> bool {
        pd.0 != 0 && pd.0 < self.next_pd && !self.freed_pds.contains(&pd.0)
    }

    /// Whether a region is registered in `pd`.
    pub fn pd_has_regions(&self, pd: PdId) -> bool {
        self.mrs.values().any(|m| m.pd == pd)
    }

    /// Frees `pd` (the caller checked that nothing uses it).
    pub fn dealloc_pd(&mut self, pd: PdId) -> bool {
        if !self.pd_exists(pd) || self.pd_has_regions(pd) {
            return false;
        }
        self.freed_pds.push(pd.0);
        true
    }

    /// Registers a zero-filled region, its first byte on a cache line or a
    /// page ([`AlignedBytes`]).
    pub fn register(&mut self, spec: MrSpec) -> Result<MrKeys, super::Error> {
        self.register_memory(spec, Box::new(AlignedBytes::zeroed(spec.len)))
    }

    /// Registers `mem` (its length is `spec.len`'s; `spec.len` is ignored).
    pub fn register_memory(
        &mut self,
        mut spec: MrSpec,
        mem: Box<dyn RegionMemory>,
    ) -> Result<MrKeys, super::Error> {
        spec.len = mem.bytes().len();
        if !self.pd_exists(spec.pd) {
            return Err(super::Error::NoSuchPd);
        }
        if spec.len > u32::MAX as usize {
            return Err(super::Error::InvalidArgument(
                "memory region longer than 4 GiB",
            ));
        }
        // Remote write or atomic needs local write too (IBTA o10-29.2.1).
        if (spec.access.contains(Access::REMOTE_WRITE)
            || spec.access.contains(Access::REMOTE_ATOMIC))
            && !spec.access.contains(Access::LOCAL_WRITE)
        {
            return Err(super::Error::InvalidArgument(
                "remote write or atomic access needs local write",
            ));
        }
        let key = match spec.key {
            Some(k) => {
                if self.mrs.contains_key(&k) {
                    return Err(super::Error::InvalidArgument("memory region key in use"));
                }
                k
            }
            None => loop {
                let k = self.next_key;
                self.next_key = self.next_key.wrapping_add(0x100) | 1;
                if !self.mrs.contains_key(&k) {
                    break k;
                }
            },
        };
        let addr = match spec.addr {
            Some(a) => a,
            None => {
                let a = self.next_addr;
                self.next_addr += (spec.len as u64).div_ceil(4096).max(1) * 4096 + 4096;
                a
            }
        };
        if addr.checked_add(spec.len as u64).is_none() {
            return Err(super::Error::InvalidArgument("address range wraps"));
        }
        self.mrs.insert(
            key,
            Mr {
                pd: spec.pd,
                addr,
                access: spec.access,
                valid: true,
                mem,
            },
        );
        Ok(MrKeys {
            lkey: key,
            rkey: key,
            addr,
            len: spec.len,
        })
    }

    /// Removes region `key`; false if there is none.
    pub fn deregister(&mut self, key: Lkey) -> bool {
        self.mrs.remove(&key).is_some()
    }

    /// The bytes of region `key` (valid or not).
    pub fn bytes(&self, key: Lkey) -> Option<&[u8]> {
        self.mrs.get(&key).map(|m| m.mem.bytes())
    }

    /// The bytes of region `key` (valid or not), writable.
    pub fn bytes_mut(&mut self, key: Lkey) -> Option<&mut [u8]> {
        self.mrs.get_mut(&key).map(|m| m.mem.bytes_mut())
    }

    fn check(
        &self,
        key: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(&Mr, usize), AccessError> {
        let mr = self.mrs.get(&key).ok_or(AccessError::NoSuchKey(key))?;
        let off = mr.admit(key, pd, va, len, need)?;
        Ok((mr, off))
    }

    /// Checks a local SGE list for the access `need` (`NONE` to read,
    /// `LOCAL_WRITE` to be written).
    pub fn check_sges(&self, pd: PdId, sges: &[Sge], need: Access) -> Result<(), AccessError> {
        for s in sges {
            self.check(s.lkey, pd, s.addr, s.length as u64, need)?;
        }
        Ok(())
    }

    /// Checks the `len` bytes at `offset` of the data an SGE list describes
    /// for the access `need`: only the elements those bytes reach, as they
    /// are reached (a region deregistered or invalidated since the work
    /// request was posted fails here, before any byte moves).
    pub fn check_span(
        &self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        len: u64,
        need: Access,
    ) -> Result<(), AccessError> {
        for (p, _) in pieces(sges, offset, len) {
            self.check(p.lkey, pd, p.addr, p.length as u64, need)?;
        }
        Ok(())
    }

    /// Checks a remote access of `len` bytes at `va` under `rkey`.
    pub fn check_remote(
        &self,
        rkey: Rkey,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(), AccessError> {
        if need.contains(Access::REMOTE_ATOMIC) && va % 8 != 0 {
            return Err(AccessError::Misaligned);
        }
        self.check(rkey, pd, va, len, need).map(|_| ())
    }

    /// Copies bytes `offset..offset + out.len()` of the data described by
    /// `sges` into `out` (gather), checking each element it reaches as it
    /// goes (key, protection domain, validity, bounds): a region
    /// deregistered or invalidated since the work request was posted fails
    /// here, with `out` partly written.
    pub fn gather(
        &self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        for (p, at) in pieces(sges, offset, out.len() as u64) {
            let n = p.length as usize;
            let (mr, o) = self.check(p.lkey, pd, p.addr, n as u64, Access::NONE)?;
            copy_payload(&mut out[at..at + n], &mr.mem.bytes()[o..o + n]);
        }
        Ok(())
    }

    /// Where `len` bytes of `sges` from `offset` on can be sent from in
    /// place (zero-copy send): the region's key, the bytes, and where
    /// they start in the region, when they lie in one SGE of a region
    /// whose memory lends ([`RegionMemory::lender`]) and `pd` may read
    /// them; otherwise `None` and the caller copies ([`MrTable::gather`]).
    pub fn lendable(
        &self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        len: u64,
    ) -> Option<(Lkey, usize, &[u8])> {
        let mut it = pieces(sges, offset, len);
        let (p, _) = it.next()?;
        if u64::from(p.length) != len {
            return None;
        }
        let (mr, o) = self.check(p.lkey, pd, p.addr, len, Access::NONE).ok()?;
        mr.mem.lender()?;
        Some((p.lkey, o, &mr.mem.bytes()[o..o + len as usize]))
    }

    /// [`MrTable::lendable`] for a READ response: `len` bytes at `va` of
    /// region `rkey`, which `pd` may read remotely.
    pub fn lendable_remote(
        &self,
        rkey: Rkey,
        pd: PdId,
        va: u64,
        len: u64,
    ) -> Option<(Lkey, usize, &[u8])> {
        let (mr, o) = self.check(rkey, pd, va, len, Access::REMOTE_READ).ok()?;
        mr.mem.lender()?;
        Some((rkey, o, &mr.mem.bytes()[o..o + len as usize]))
    }

    /// Region `key`'s memory as its port sends from it in place and
    /// `len` of its bytes from `offset` on, in one lookup.
    pub fn lent(
        &self,
        key: Lkey,
        offset: usize,
        len: usize,
    ) -> Option<(&dyn core::any::Any, &[u8])> {
        let mem = &self.mrs.get(&key)?.mem;
        let bytes = mem.bytes().get(offset..offset.checked_add(len)?)?;
        Some((mem.lender()?, bytes))
    }

    /// [`MrTable::check_span`] for `data.len()` bytes, then, if it holds,
    /// [`MrTable::scatter`] of `data`: nothing is written unless every
    /// element the bytes reach may be. Data that lands in one element (a
    /// message's packet, usually) costs one lookup of its region.
    pub fn check_scatter(
        &mut self,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
        need: Access,
    ) -> Result<(), AccessError> {
        let len = data.len() as u64;
        let mut it = pieces(sges, offset, len);
        if let (Some((p, 0)), None) = (it.next(), it.next()) {
            if u64::from(p.length) == len {
                let mr = self
                    .mrs
                    .get_mut(&p.lkey)
                    .ok_or(AccessError::NoSuchKey(p.lkey))?;
                let o = mr.admit(p.lkey, pd, p.addr, len, need)?;
                copy_payload(&mut mr.mem.bytes_mut()[o..o + data.len()], data);
                return Ok(());
            }
        }
        self.check_span(pd, sges, offset, len, need)?;
        self.scatter(sges, offset, data);
        Ok(())
    }

    /// Copies `data` into the data described by `sges` from `offset` on
    /// (scatter). Returns false if the SGEs are too short (nothing beyond
    /// them is written).
    pub fn scatter(&mut self, sges: &[Sge], offset: u64, data: &[u8]) -> bool {
        let mut done = 0;
        for (p, at) in pieces(sges, offset, data.len() as u64) {
            let n = p.length as usize;
            if let Some(mr) = self.mrs.get_mut(&p.lkey) {
                if let Ok(o) = mr.range(p.lkey, p.addr, n as u64) {
                    copy_payload(&mut mr.mem.bytes_mut()[o..o + n], &data[at..at + n]);
                }
            }
            done = at + n;
        }
        done == data.len()
    }

    /// Reads `out.len()` bytes at `va` of region `rkey` for a peer's READ,
    /// checked as it reads (the region may have gone away since the
    /// request was).
    pub fn read_remote(
        &self,
        rkey: Rkey,
        pd: PdId,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let n = out.len();
        let (mr, o) = self.check(rkey, pd, va, n as u64, Access::REMOTE_READ)?;
        copy_payload(out, &mr.mem.bytes()[o..o + n]);
        Ok(())
    }

    /// Writes `data` at `va` of region `rkey` for a peer's WRITE, checked
    /// as it writes (the region may have gone away since the message's
    /// first packet); only checked in a table that discards writes
    /// ([`MrTable::discarding_writes`]).
    pub fn write_remote(
        &mut self,
        rkey: Rkey,
        pd: PdId,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let mr = self
            .mrs
            .get_mut(&rkey)
            .ok_or(AccessError::NoSuchKey(rkey))?;
        let o = mr.admit(rkey, pd, va, data.len() as u64, Access::REMOTE_WRITE)?;
        if !self.discard_writes {
            copy_payload(&mut mr.mem.bytes_mut()[o..o + data.len()], data);
        }
        Ok(())
    }

    /// Runs an atomic on the word at `va` of region `rkey` (checked
    /// before); returns the value before it.
    pub fn atomic(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> u64 {
        let Some(mr) = self.mrs.get_mut(&rkey) else {
            return 0;
        };
        let Ok(o) = mr.range(rkey, va, 8) else {
            return 0;
        };
        let w = &mut mr.mem.bytes_mut()[o..o + 8];
        let old = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        };
        w.copy_from_slice(&new.to_le_bytes());
        old
    }

    /// Invalidates region `rkey` on a peer's SEND with invalidate (IBTA
    /// §10.6.7.2.2): it must exist in `pd` and allow remote invalidation.
    pub fn invalidate(&mut self, rkey: Rkey, pd: PdId) -> Result<(), AccessError> {
        let mr = self
            .mrs
            .get_mut(&rkey)
            .ok_or(AccessError::NoSuchKey(rkey))?;
        if mr.pd != pd {
            return Err(AccessError::WrongPd(rkey));
        }
        if !mr.access.contains(Access::REMOTE_INVALIDATE) {
            return Err(AccessError::NotPermitted(rkey));
        }
        mr.valid = false;
        Ok(())
    }

    /// Makes an invalidated region usable again (a local re-registration).
    pub fn revalidate(&mut self, key: u32) -> bool {
        self.mrs.get_mut(&key).map(|m| m.valid = true).is_some()
    }
}

/// The parts of an SGE list that bytes `offset..offset + len` of its data
/// fall in, in order: each as an SGE of its own, with where its bytes start
/// in those `len`. Stops at the end of the list if it is shorter.
fn pieces(sges: &[Sge], mut offset: u64, len: u64) -> impl Iterator<Item = (Sge, usize)> + '_ {
    let mut done = 0u64;
    sges.iter().filter_map(move |s| {
        let l = s.length as u64;
        if done == len {
            return None;
        }
        if offset >= l {
            offset -= l;
            return None;
        }
        let n = (l - offset).min(len - done);
        let part = Sge {
            addr: s.addr.wrapping_add(offset),
            length: n as u32,
            lkey: s.lkey,
        };
        let at = done as usize;
        done += n;
        offset = 0;
        Some((part, at))
    })
}

/// An atomic operation on a remote word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Replace the word with `swap` if it equals `compare`.
    CompareSwap {
        /// The value the word must hold for the swap to happen.
        compare: u64,
        /// The value written if it does.
        swap: u64,
    },
    /// Add `add` to the word, wrapping.
    FetchAdd {
        /// The addend.
        add: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_bytes_begin_on_a_line_or_a_page_and_are_zeroed_and_writable() {
        assert_eq!(AlignedBytes::align_for(100), 64);
        assert_eq!(AlignedBytes::align_for(1 << 20), 4096);
        for len in [0, 1, 64, 4095, 4096, (64 << 10) - 1, 64 << 10, 3 << 20] {
            let mut m = AlignedBytes::zeroed(len);
            let align = AlignedBytes::align_for(len);
            assert_eq!(m.bytes().len(), len);
            assert!(m.bytes().iter().all(|&b| b == 0));
            if len > 0 {
                assert_eq!(m.bytes().as_ptr() as usize % align, 0);
                m.bytes_mut()[len - 1] = 7;
                assert_eq!(m.bytes()[len - 1], 7);
            }
        }
        let mut t = MrTable::new();
        let pd = t.alloc_pd();
        let k = t.register(MrSpec::new(pd, 100_000, Access::ALL)).unwrap();
        assert_eq!(k.len, 100_000);
    }

    #[test]
    fn copy_payload_copies_every_length_at_every_alignment() {
        let src: Vec<u8> = (0..4096 + 200).map(|i| (i * 31 + 7) as u8).collect();
        for len in [0, 1, 63, 64, COPY_SMALL, COPY_SMALL + 1, 4096, 4096 + 37] {
            // Every skew of the destination against the source (both
            // paths), and a few fixed pairs.
            let pairs = (0..64)
                .map(|k| (54, k))
                .chain([(0, 0), (0, 6), (6, 0), (63, 1)]);
            for (so, d_o) in pairs {
                let mut dst = vec![0xEEu8; len + 128];
                copy_payload(&mut dst[d_o..d_o + len], &src[so..so + len]);
                assert_eq!(&dst[d_o..d_o + len], &src[so..so + len], "{len} {so} {d_o}");
                assert!(dst[..d_o]
                    .iter()
                    .chain(&dst[d_o + len..])
                    .all(|&b| b == 0xEE));
            }
        }
    }

    fn table() -> (MrTable, PdId, MrKeys) {
        let mut t = MrTable::new();
        let pd = t.alloc_pd();
        let k = t
            .register(MrSpec {
                pd,
                len: 64,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
                addr: Some(0x1000),
                key: Some(0x77),
            })
            .unwrap();
        (t, pd, k)
    }

    #[test]
    fn shared_memory_is_read_by_every_table_and_copied_by_the_first_writer() {
        let mem = SharedMemory::zeroed(64);
        let spec = |pd| MrSpec {
            pd,
            len: 0,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            addr: Some(0x1000),
            key: Some(0x77),
        };
        let (mut a, mut b) = (MrTable::new(), MrTable::new());
        let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
        let ka = a.register_memory(spec(pa), Box::new(mem.clone())).unwrap();
        let kb = b.register_memory(spec(pb), Box::new(mem.clone())).unwrap();
        assert_eq!(ka.len, 64, "the length is the memory's");
        // Both read the one copy.
        assert!(std::ptr::eq(
            a.bytes(ka.lkey).unwrap(),
            b.bytes(kb.lkey).unwrap()
        ));
        a.bytes_mut(ka.lkey).unwrap()[3] = 9;
        assert_eq!(a.bytes(ka.lkey).unwrap()[3], 9);
        assert_eq!(b.bytes(kb.lkey).unwrap()[3], 0, "b never sees a's write");
        assert_eq!(mem.bytes()[3], 0);
        let mut out = [1u8; 8];
        b.gather(
            pb,
            &[Sge {
                addr: 0x1000,
                length: 8,
                lkey: kb.lkey,
            }],
            0,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [0; 8]);
    }

    #[test]
    fn remote_checks_key_pd_access_and_bounds() {
        let (mut t, pd, k) = table();
        assert!(t
            .check_remote(k.rkey, pd, 0x1000, 64, Access::REMOTE_WRITE)
            .is_ok());
        assert_eq!(
            t.check_remote(k.rkey, pd, 0x1000, 65, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds(0x77))
        );
        assert_eq!(
            t.check_remote(k.rkey, pd, 0xfff, 1, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds(0x77))
        );
        assert_eq!(
            t.check_remote(k.rkey, pd, 0x1000, 8, Access::REMOTE_READ),
            Err(AccessError::NotPermitted(0x77))
        );
        assert_eq!(
            t.check_remote(9, pd, 0x1000, 8, Access::REMOTE_WRITE),
            Err(AccessError::NoSuchKey(9))
        );
        let other = t.alloc_pd();
        assert_eq!(
            t.check_remote(k.rkey, other, 0x1000, 8, Access::REMOTE_WRITE),
            Err(AccessError::WrongPd(0x77))
        );
        assert_eq!(
            t.check_remote(k.rkey, pd, 0x1004, 8, Access::REMOTE_ATOMIC),
            Err(AccessError::Misaligned)
        );
        assert_eq!(
            t.check_remote(k.rkey, pd, u64::MAX, 8, Access::NONE),
            Err(AccessError::OutOfBounds(0x77))
        );
        assert_eq!(t.atomic(k.rkey, 0x1008, AtomicOp::FetchAdd { add: 5 }), 0);
        assert_eq!(t.atomic(k.rkey, 0x1008, AtomicOp::FetchAdd { add: 5 }), 5);
        assert_eq!(
            t.atomic(
                k.rkey,
                0x1008,
                AtomicOp::CompareSwap {
                    compare: 10,
                    swap: 1
                }
            ),
            10
        );
        assert_eq!(&t.bytes(k.lkey).unwrap()[8..16], &1u64.to_le_bytes());
    }

    #[test]
    fn gather_and_scatter_cross_sges() {
        let (mut t, pd, k) = table();
        let sges = [
            Sge {
                addr: 0x1000,
                length: 3,
                lkey: k.lkey,
            },
            Sge {
                addr: 0x1010,
                length: 5,
                lkey: k.lkey,
            },
        ];
        assert!(t.scatter(&sges, 2, b"abcdef"));
        assert!(!t.scatter(&sges, 7, b"xy"));
        let mut out = [0u8; 6];
        t.gather(pd, &sges, 2, &mut out).unwrap();
        assert_eq!(&out[..5], b"abcde");
        assert_eq!(out[5], b'x');
    }

    #[test]
    fn a_checked_scatter_writes_nothing_unless_the_whole_span_may_be() {
        let (mut t, pd, k) = table();
        let one = |addr, length| Sge {
            addr,
            length,
            lkey: k.lkey,
        };
        let w = Access::LOCAL_WRITE;
        // In one element, and across two.
        t.check_scatter(pd, &[one(0x1000, 8)], 2, b"abc", w)
            .unwrap();
        assert_eq!(&t.bytes(k.lkey).unwrap()[2..5], b"abc");
        let two = [one(0x1010, 2), one(0x1020, 4)];
        t.check_scatter(pd, &two, 1, b"xyz", w).unwrap();
        assert_eq!(&t.bytes(k.lkey).unwrap()[0x11..0x12], b"x");
        assert_eq!(&t.bytes(k.lkey).unwrap()[0x20..0x22], b"yz");
        // Each failure leaves the region as it was.
        let before = t.bytes(k.lkey).unwrap().to_vec();
        let other = t.alloc_pd();
        let cases = [
            (other, vec![one(0x1000, 8)], AccessError::WrongPd(0x77)),
            (pd, vec![one(0x103C, 8)], AccessError::OutOfBounds(0x77)),
            (
                pd,
                vec![one(0x1000, 2), one(0x103E, 8)],
                AccessError::OutOfBounds(0x77),
            ),
            (
                pd,
                vec![Sge {
                    addr: 0x1000,
                    length: 8,
                    lkey: 9,
                }],
                AccessError::NoSuchKey(9),
            ),
        ];
        for (pd, sges, want) in cases {
            assert_eq!(t.check_scatter(pd, &sges, 0, b"12345678", w), Err(want));
        }
        let ro = Access::REMOTE_READ;
        assert_eq!(
            t.check_scatter(pd, &[one(0x1000, 8)], 0, b"1", ro),
            Err(AccessError::NotPermitted(0x77))
        );
        assert_eq!(t.bytes(k.lkey).unwrap(), &before[..]);
    }

    #[test]
    fn invalidation_needs_the_right() {
        let (mut t, pd, k) = table();
        assert_eq!(
            t.invalidate(k.rkey, pd),
            Err(AccessError::NotPermitted(0x77))
        );
        let k2 = t
            .register(MrSpec::new(
                pd,
                8,
                Access::REMOTE_INVALIDATE | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            ))
            .unwrap();
        t.invalidate(k2.rkey, pd).unwrap();
        assert_eq!(
            t.check_remote(k2.rkey, pd, k2.addr, 8, Access::REMOTE_WRITE),
            Err(AccessError::Invalidated(k2.rkey))
        );
    }
}
