//! Where registered memory comes from on a DPDK port: 2 MiB hugepages
//! ([`crate::dpdk::HugeMem`]), falling back to normal pages with a log
//! line when the kernel has none free.

use crate::dpdk::{DmaRegion, HugeMem};
use crate::transport::mr::RegionMemory;

impl core::fmt::Debug for HugeMem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HugeMem")
            .field("len", &self.len())
            .field("huge", &self.is_huge())
            .finish()
    }
}

impl RegionMemory for HugeMem {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl core::fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("len", &self.as_slice().len())
            .field("huge", &self.is_huge())
            .finish()
    }
}

/// Memory a port can send from in place: a payload in it leaves by
/// reference when the device lets it (`Device::set_zero_copy`) and the
/// port can (`Backend::can_lend`).
impl RegionMemory for DmaRegion {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
    fn lender(&self) -> Option<&dyn core::any::Any> {
        Some(self)
    }
}

/// A zeroed region of `len` bytes that a port can send from in place,
/// on hugepages when there are any.
pub fn lending_region(len: usize) -> Result<Box<dyn RegionMemory>, String> {
    if len == 0 {
        return Ok(Box::new(Vec::new()));
    }
    DmaRegion::new(len)
        .map(|m| Box::new(m) as Box<dyn RegionMemory>)
        .map_err(|e| e.to_string())
}

/// A zeroed region of `len` bytes on hugepages when there are any (a
/// [`crate::verbs::RegionAlloc`]).
pub fn hugepage_region(len: usize) -> Result<Box<dyn RegionMemory>, String> {
    if len == 0 {
        return Ok(Box::new(Vec::new()));
    }
    HugeMem::new(len)
        .map(|m| Box::new(m) as Box<dyn RegionMemory>)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hugepage_region_is_zeroed_and_writable() {
        let mut r = hugepage_region(3 << 20).unwrap();
        assert_eq!(r.bytes().len(), 3 << 20);
        assert!(r.bytes().iter().all(|&b| b == 0));
        r.bytes_mut()[(3 << 20) - 1] = 7;
        assert_eq!(r.bytes()[(3 << 20) - 1], 7);
        assert!(hugepage_region(0).unwrap().bytes().is_empty());
        let mut r = lending_region(1 << 20).unwrap();
        assert!(r.lender().is_some());
        r.bytes_mut()[7] = 1;
        assert_eq!(r.bytes()[7], 1);
        assert!(lending_region(0).unwrap().bytes().is_empty());
    }
}
