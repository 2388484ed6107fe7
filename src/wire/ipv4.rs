//! The IPv4 header as RoCE v2 uses it (A17 §17.3.1.1; reference B.1): no
//! options (IHL 5, CA17-3), DF set (CA17-7), never fragmented, DSCP from the
//! traffic class, ECN '10' (ECT(0)) when congestion control is on, total
//! length through the ICRC. ECN codepoints are RFC 3168's.

use super::field::{set_u16, u16_at};
use super::{view, Error, Result};
use core::net::Ipv4Addr;

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv4 header length without options (the only one RoCE v2 allows).
pub const HEADER_LEN: usize = 20;

/// The two ECN bits of the IP header (RFC 3168 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub enum Ecn {
    /// '00': the sender does not do ECN.
    #[default]
    NotEct,
    /// '01'.
    Ect1,
    /// '10': what ConnectX-style senders use (traffic class 106).
    Ect0,
    /// '11': congestion experienced; a RoCE v2 receiver answers with a CNP
    /// (A17 §17.9.3, CA17-44).
    Ce,
}

impl Ecn {
    /// The ECN codepoint of the low two bits of `b` (RFC 3168 §5).
    pub fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit codepoint.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// Whether a switch may mark this packet CE instead of dropping it.
    pub fn is_ect(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }

    /// Lower-case name for logs and decode output, e.g. `"ce"`.
    pub fn name(self) -> &'static str {
        match self {
            Ecn::NotEct => "not-ect",
            Ecn::Ect1 => "ect1",
            Ecn::Ect0 => "ect0",
            Ecn::Ce => "ce",
        }
    }
}

view!(
    /// A checked view of a 20-byte IPv4 header (options are not read).
    Ipv4Packet,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// IP version, 4 for a valid header.
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// Header length in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.b()[0] & 0x0F
    }
    /// Differentiated services code point, 6 bits (RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.b()[1] >> 2
    }
    /// The ECN field, the TOS byte's low two bits (RFC 3168).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.b()[1])
    }
    /// The whole TOS byte (DSCP and ECN), e.g. 106 = DSCP 26 + ECT(0).
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }
    /// Total length: header and payload, in bytes.
    pub fn total_len(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// Identification (RFC 791).
    pub fn ident(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    /// Don't fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }
    /// More fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.b(), 6) & 0x1FFF
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    /// Protocol of the payload, 17 for UDP.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    /// Header checksum as carried.
    pub fn checksum(&self) -> u16 {
        u16_at(self.b(), 10)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
    /// Whether the header checksum (over the 20 bytes) is right.
    #[inline]
    pub fn checksum_ok(&self) -> bool {
        sum(&self.b()[..HEADER_LEN]) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the ECN bits and fixes the checksum incrementally (RFC 1624), as
    /// a switch marking CE does.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let b = self.buffer.as_mut();
        let old = u16_at(b, 0);
        b[1] = (b[1] & !3) | ecn.bits();
        let new = u16_at(b, 0);
        let c = !u16_at(b, 10);
        let c = add1(add1(c, !old), new);
        set_u16(b, 10, !c);
    }

    /// Sets the TTL and fixes the checksum incrementally (RFC 1624), as a
    /// router forwarding the packet does.
    pub fn set_ttl(&mut self, ttl: u8) {
        let b = self.buffer.as_mut();
        let old = u16_at(b, 8);
        b[8] = ttl;
        let new = u16_at(b, 8);
        let c = !u16_at(b, 10);
        let c = add1(add1(c, !old), new);
        set_u16(b, 10, !c);
    }
}

fn add1(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xFFFF) + (s >> 16)) as u16
}

/// Ones' complement sum of the 16-bit words of an IPv4 header (RFC 1071),
/// not complemented. Two folds suffice: a header has at most 30 words.
#[inline]
fn sum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for w in b.chunks_exact(2) {
        s += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    let s = (s & 0xFFFF) + (s >> 16);
    ((s & 0xFFFF) + (s >> 16)) as u16
}

/// The IPv4 header as plain values (lengths and checksum are derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Differentiated services code point (6 bits); 26 in ConnectX
    /// deployments (traffic class 106), 48 for CNPs.
    pub dscp: u8,
    /// ECN field (RFC 3168); CE asks the receiver for a CNP (A17 §17.9.3).
    pub ecn: Ecn,
    /// Identification; RoCE v2 packets are never fragmented, so any value.
    pub ident: u16,
    /// Don't fragment: set on every RoCE v2 packet (CA17-7).
    pub dont_frag: bool,
    /// Time to live = the address vector's hop limit.
    pub ttl: u8,
    /// Protocol of the payload: [`PROTO_UDP`] for RoCE v2.
    pub protocol: u8,
}

impl Ipv4Repr {
    /// Reads a header that RoCE v2 may carry ([`Ipv4Repr::check`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        Ipv4Repr::check(p)?;
        Ok(Ipv4Repr::read(p))
    }

    /// Whether RoCE v2 may carry this header: version 4, no options
    /// (CA17-3), not a fragment, a total length that covers the header, a
    /// right checksum.
    #[inline]
    pub fn check<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<()> {
        if p.version() != 4 {
            return Err(Error::NotRoce);
        }
        if p.ihl() != 5 {
            return Err(Error::Ipv4Options);
        }
        if p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Fragmented);
        }
        if (p.total_len() as usize) < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if !p.checksum_ok() {
            return Err(Error::Ipv4Checksum);
        }
        Ok(())
    }

    /// The fields as they are, unchecked (for a header checked before).
    pub fn read<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Ipv4Repr {
        Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            protocol: p.protocol(),
        }
    }

    /// The header's length, always [`HEADER_LEN`] (no options).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header, checksum included, for `payload_len` bytes after
    /// it; returns its length.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let total = u16::try_from(HEADER_LEN + payload_len).map_err(|_| Error::FieldRange)?;
        if self.dscp > 63 {
            return Err(Error::FieldRange);
        }
        let b = &mut buf[..HEADER_LEN];
        b[0] = 0x45;
        b[1] = self.dscp << 2 | self.ecn.bits();
        set_u16(b, 2, total);
        set_u16(b, 4, self.ident);
        set_u16(b, 6, if self.dont_frag { 0x4000 } else { 0 });
        b[8] = self.ttl;
        b[9] = self.protocol;
        set_u16(b, 10, 0);
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let c = !sum(b);
        set_u16(b, 10, c);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(198, 18, 0, 2),
            dst: Ipv4Addr::new(198, 18, 0, 3),
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 0x1234,
            dont_frag: true,
            ttl: 64,
            protocol: PROTO_UDP,
        }
    }

    #[test]
    fn emit_parse_round_trip_with_a_valid_checksum() {
        let mut b = [0u8; 20];
        repr().emit(&mut b, 100).unwrap();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.checksum_ok());
        assert_eq!(p.total_len(), 120);
        assert_eq!(p.tos(), 106);
        assert_eq!(Ipv4Repr::parse(&p), Ok(repr()));
    }

    #[test]
    fn marking_ce_keeps_the_checksum_right() {
        let mut b = [0u8; 20];
        repr().emit(&mut b, 100).unwrap();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_ecn(Ecn::Ce);
        assert!(p.checksum_ok());
        assert_eq!(p.ecn(), Ecn::Ce);
        let mut want = [0u8; 20];
        Ipv4Repr {
            ecn: Ecn::Ce,
            ..repr()
        }
        .emit(&mut want, 100)
        .unwrap();
        assert_eq!(b, want);
    }

    #[test]
    fn lowering_the_ttl_keeps_the_checksum_right() {
        let mut b = [0u8; 20];
        repr().emit(&mut b, 100).unwrap();
        for ttl in [63u8, 1, 0, 255] {
            let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
            p.set_ttl(ttl);
            assert!(p.checksum_ok(), "ttl {ttl}");
            let mut want = [0u8; 20];
            Ipv4Repr { ttl, ..repr() }.emit(&mut want, 100).unwrap();
            assert_eq!(b, want, "ttl {ttl}");
        }
    }

    #[test]
    fn options_fragments_and_bad_checksums_are_refused() {
        let mut b = [0u8; 20];
        repr().emit(&mut b, 0).unwrap();
        let mut c = b;
        c[0] = 0x46;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&c[..])),
            Err(Error::Ipv4Options)
        );
        let mut c = b;
        c[6] |= 0x20;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&c[..])),
            Err(Error::Fragmented)
        );
        let mut c = b;
        c[12] ^= 1;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&c[..])),
            Err(Error::Ipv4Checksum)
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated
        );
    }
}
