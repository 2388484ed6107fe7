//! Region memory that a port could send from in place (zero-copy send),
//! for the transport's tests without a DPDK port.

use ferroce::transport::mr::RegionMemory;

/// A `Vec` region whose memory lends (`RegionMemory::lender`).
#[derive(Debug)]
pub struct Lends(pub Vec<u8>);

impl RegionMemory for Lends {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn lender(&self) -> Option<&dyn core::any::Any> {
        Some(self)
    }
}
