//! Classic pcap: the global header and the records after it.

use super::*;

/// The state of a classic pcap file.
#[derive(Debug)]
pub(super) struct Classic {
    pub(super) order: Order,
    pub(super) precision: Precision,
    pub(super) version: (u16, u16),
    pub(super) snaplen: u32,
    pub(super) linktype: u32,
    /// The largest captured length accepted.
    pub(super) limit: u32,
    /// The index of the next record.
    pub(super) record: u64,
}

impl Classic {
    /// Reads the rest of the global header after its magic.
    pub(super) fn new<R: Read>(inner: &mut R, magic: [u8; 4]) -> Result<Self, PcapError> {
        let magic_le = u32::from_le_bytes(magic);
        let (order, precision) = match magic_le {
            MAGIC_MICRO => (Order::Little, Precision::Micro),
            MAGIC_NANO => (Order::Little, Precision::Nano),
            m if m.swap_bytes() == MAGIC_MICRO => (Order::Big, Precision::Micro),
            m if m.swap_bytes() == MAGIC_NANO => (Order::Big, Precision::Nano),
            m => return Err(PcapError::BadMagic(m.swap_bytes())),
        };
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[..4].copy_from_slice(&magic);
        let n = 4 + read_full(inner, &mut h[4..])?;
        if n < GLOBAL_HEADER_LEN {
            return Err(PcapError::ShortHeader { len: n });
        }
        let major = order.u16(bytes(&h, 4));
        let minor = order.u16(bytes(&h, 6));
        if major != VERSION_MAJOR {
            return Err(PcapError::BadVersion { major, minor });
        }
        // Bytes 8..16 are thiszone and sigfigs: always 0 in practice, unused.
        let snaplen = order.u32(bytes(&h, 16));
        let linktype = order.u32(bytes(&h, 20));
        Ok(Classic {
            order,
            precision,
            version: (major, minor),
            snaplen,
            linktype,
            limit: snaplen.max(DEFAULT_SNAPLEN),
            record: 0,
        })
    }

    /// Reads one record into `buf`.
    pub(super) fn read_record<R: Read>(
        &mut self,
        inner: &mut R,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Frame>, PcapError> {
        let record = self.record;
        let mut h = [0u8; RECORD_HEADER_LEN];
        match read_full(inner, &mut h)? {
            0 => return Ok(None),
            RECORD_HEADER_LEN => {}
            _ => return Err(PcapError::Truncated { record }),
        }
        let sec = u64::from(self.order.u32(bytes(&h, 0)));
        let frac = u64::from(self.order.u32(bytes(&h, 4)));
        let incl_len = self.order.u32(bytes(&h, 8));
        let orig_len = self.order.u32(bytes(&h, 12));
        if incl_len > self.limit {
            return Err(PcapError::RecordTooLong {
                record,
                len: incl_len,
            });
        }
        // No overflow: (2^32 - 1) * 10^9 + (2^32 - 1) * 10^3 < 2^64. A
        // fraction of a second or more (a sloppy writer) is kept as it is.
        let ts_ns = sec * NS_PER_SEC + frac * self.precision.ns_per_unit();
        let len = incl_len as usize;
        if !fill(inner, buf, len)? {
            return Err(PcapError::Truncated { record });
        }
        self.record += 1;
        Ok(Some(Frame {
            ts_ns,
            orig_len,
            len,
            linktype: self.linktype & 0xffff,
        }))
    }
}
