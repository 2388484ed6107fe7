//! The UDP header of RoCE v2 (A17 §17.3.2; reference B.1): destination
//! port 4791; the source port is constant per connected QP and chosen from
//! 0xC000..=0xFFFF (the kernel's flow-label convention), used by switches
//! for ECMP; the checksum is sent as 0 (A17 §17.3.2.4) and not checked.

use super::field::{set_u16, u16_at};
use super::{view, Error, Result};

/// The IANA port of RoCE v2.
pub const ROCE_UDP_PORT: u16 = 4791;
/// UDP header length.
pub const HEADER_LEN: usize = 8;

view!(
    /// A checked view of an 8-byte UDP header.
    UdpPacket,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Source port; RoCE v2 senders vary it per flow for ECMP entropy.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 0)
    }
    /// Destination port, 4791 for RoCE v2.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }
    /// Length from the UDP header through the end of the datagram.
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }
    /// Whether the datagram carries no payload (length at most the header's).
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    /// Checksum as carried; RoCE v2 sends 0.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }
}

/// The UDP header as plain values (the length is derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port; varied per QP flow for ECMP entropy.
    pub src_port: u16,
    /// Destination port, [`ROCE_UDP_PORT`] for RoCE v2.
    pub dst_port: u16,
    /// Sent as 0 by RoCE v2 (kept as read so a parsed frame re-emits
    /// exactly).
    pub checksum: u16,
}

impl UdpRepr {
    /// The RoCE v2 header for a QP whose flow uses source port `src_port`.
    pub fn roce(src_port: u16) -> UdpRepr {
        UdpRepr {
            src_port,
            dst_port: ROCE_UDP_PORT,
            checksum: 0,
        }
    }

    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> UdpRepr {
        UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            checksum: p.checksum(),
        }
    }

    /// The header's length, always [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header for `payload_len` bytes after it.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let len = u16::try_from(HEADER_LEN + payload_len).map_err(|_| Error::FieldRange)?;
        set_u16(buf, 0, self.src_port);
        set_u16(buf, 2, self.dst_port);
        set_u16(buf, 4, len);
        set_u16(buf, 6, self.checksum);
        Ok(HEADER_LEN)
    }
}

/// The UDP source port the Linux kernel derives for a RoCE v2 QP pair
/// (include/rdma/ib_verbs.h `rdma_calc_flow_label` and
/// `rdma_flow_label_to_udp_sport`): symmetric in the two QPNs, in
/// 0xC000..=0xFFFF.
pub fn kernel_source_port(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = (lqpn as u64) * (rqpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0x000F_FFFF) as u32;
    let fl_low = fl & 0x03FFF;
    let fl_high = fl & 0xFC000;
    ((fl_low ^ (fl_high >> 14)) as u16) | 0xC000
}

/// The UDP source port rxe gives a QP when it is created (its
/// `rxe_qp_init_req`: 0xC000 plus 14 bits of the kernel's `hash_32` of
/// the QPN, a multiplicative hash by 0x61C88647); RC QPs trade it for
/// [`kernel_source_port`] when their peer is known, UD QPs keep it for
/// every datagram.
pub fn qp_source_port(qpn: u32) -> u16 {
    let hash14 = qpn.wrapping_mul(0x61C8_8647) >> (32 - 14);
    0xC000 | (hash14 & 0x3FFF) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = UdpRepr::roce(0xC123);
        let mut b = [0u8; 8];
        r.emit(&mut b, 100).unwrap();
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.len(), 108);
        assert_eq!(UdpRepr::parse(&p), r);
        assert_eq!(r.emit(&mut b, 70_000), Err(Error::FieldRange));
    }

    #[test]
    fn qp_source_port_is_rxes() {
        // tests/vectors/ud_pingpong.pcap: QP 0x19 sends from port 58149.
        assert_eq!(qp_source_port(0x19), 58149);
        assert!((0..1 << 24)
            .step_by(9973)
            .all(|q| qp_source_port(q) >= 0xC000));
    }

    #[test]
    fn kernel_source_port_is_symmetric_and_in_range() {
        for (a, b) in [(0x11, 0x12), (1, 0xFFFFFF), (0x1234, 0x99)] {
            let p = kernel_source_port(a, b);
            assert_eq!(p, kernel_source_port(b, a));
            assert!(p >= 0xC000);
        }
    }
}
