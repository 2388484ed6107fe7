//! The IPv6 header as RoCE v2 uses it (A17 §17.3.1.2; reference B.1):
//! next header UDP (no extension headers), traffic class = DSCP + ECN from
//! the address vector, flow label and hop limit from the address vector,
//! payload length from the UDP header through the ICRC.

use super::field::{set_u16, u16_at, u32_at};
use super::ipv4::Ecn;
use super::{view, Error, Result};
use core::net::Ipv6Addr;

/// IPv6 header length.
pub const HEADER_LEN: usize = 40;

view!(
    /// A checked view of a 40-byte IPv6 header.
    Ipv6Packet,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// IP version, 6 for a valid header.
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// The traffic class byte (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        ((u16_at(self.b(), 0) >> 4) & 0xFF) as u8
    }
    /// Differentiated services code point, the traffic class's high 6 bits.
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }
    /// The ECN field, the traffic class's low two bits (RFC 3168).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }
    /// Flow label, 20 bits (RFC 6437).
    pub fn flow_label(&self) -> u32 {
        u32_at(self.b(), 0) & 0x000F_FFFF
    }
    /// Payload length: the bytes after the 40-byte header.
    pub fn payload_len(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    /// Next header, 17 for UDP.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        Ipv6Addr::from(a)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the ECN bits (IPv6 has no header checksum).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let b = self.buffer.as_mut();
        b[1] = (b[1] & !0x30) | ecn.bits() << 4;
    }
    /// Sets the hop limit (no checksum to fix).
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[7] = hop_limit;
    }
}

/// The IPv6 header as plain values (the payload length is derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// DSCP (6 bits) of the traffic class.
    pub dscp: u8,
    /// ECN (2 bits) of the traffic class.
    pub ecn: Ecn,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit = the address vector's hop limit.
    pub hop_limit: u8,
    /// Next header: UDP (17) for RoCE v2.
    pub next_header: u8,
}

impl Ipv6Repr {
    /// Reads a header with version 6 (`NotRoce` otherwise).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        if p.version() != 6 {
            return Err(Error::NotRoce);
        }
        Ok(Ipv6Repr::read(p))
    }

    /// The fields as they are, unchecked (for a header checked before).
    pub fn read<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Ipv6Repr {
        Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
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
        let len = u16::try_from(payload_len).map_err(|_| Error::FieldRange)?;
        if self.dscp > 63 || self.flow_label > 0x000F_FFFF {
            return Err(Error::FieldRange);
        }
        let tc = (self.dscp << 2 | self.ecn.bits()) as u32;
        let w = 6u32 << 28 | tc << 20 | self.flow_label;
        buf[0..4].copy_from_slice(&w.to_be_bytes());
        set_u16(buf, 4, len);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src.octets());
        buf[24..40].copy_from_slice(&self.dst.octets());
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_ecn_marking() {
        let r = Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "::ffff:198.18.0.2".parse().unwrap(),
            dscp: 26,
            ecn: Ecn::Ect0,
            flow_label: 0xABCDE,
            hop_limit: 64,
            next_header: 17,
        };
        let mut b = [0u8; 40];
        r.emit(&mut b, 300).unwrap();
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.traffic_class(), 106);
        assert_eq!(p.payload_len(), 300);
        assert_eq!(Ipv6Repr::parse(&p), Ok(r));
        p.set_ecn(Ecn::Ce);
        assert_eq!(p.ecn(), Ecn::Ce);
        assert_eq!(p.dscp(), 26);
        assert_eq!(p.flow_label(), 0xABCDE);
        assert!(Ipv6Packet::new_checked(&b[..39]).is_err());
    }
}
