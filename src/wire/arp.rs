//! ARP for IPv4 over Ethernet (RFC 826): how a RoCE v2 host on IPv4 learns
//! its peers' MACs and tells them its own. A checked view ([`ArpPacket`]),
//! a plain [`ArpRepr`] with `parse` / `emit`, the reply a host owes a
//! request ([`ArpRepr::reply`]), and whole frames ([`ArpRepr::emit_frame`],
//! padded to Ethernet's 60-byte minimum).

use super::ethernet::{EthernetRepr, MacAddr, VlanTag, ETHERTYPE_ARP, ETHERTYPE_IPV4};
use super::field::{set_u16, u16_at};
use super::{view, Error, Result};
use core::net::Ipv4Addr;

/// Hardware type Ethernet (RFC 826 `ar$hrd` 1).
pub const HTYPE_ETHERNET: u16 = 1;
/// ARP packet length for Ethernet / IPv4.
pub const LEN: usize = 28;
/// Shortest Ethernet frame without FCS: ARP frames are padded to it.
pub const MIN_FRAME: usize = 60;

view!(
    /// An ARP packet for Ethernet / IPv4 (28 bytes).
    ArpPacket,
    LEN
);

impl<T: AsRef<[u8]>> ArpPacket<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// `ar$hrd`.
    pub fn htype(&self) -> u16 {
        u16_at(self.b(), 0)
    }
    /// `ar$pro`.
    pub fn ptype(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// `ar$hln`.
    pub fn hlen(&self) -> u8 {
        self.b()[4]
    }
    /// `ar$pln`.
    pub fn plen(&self) -> u8 {
        self.b()[5]
    }
    /// `ar$op`: 1 request, 2 reply.
    pub fn oper(&self) -> u16 {
        u16_at(self.b(), 6)
    }
    fn mac(&self, at: usize) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.b()[at..at + 6]);
        MacAddr(m)
    }
    fn ip(&self, at: usize) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
    }
    /// Sender hardware address.
    pub fn sha(&self) -> MacAddr {
        self.mac(8)
    }
    /// Sender protocol address.
    pub fn spa(&self) -> Ipv4Addr {
        self.ip(14)
    }
    /// Target hardware address.
    pub fn tha(&self) -> MacAddr {
        self.mac(18)
    }
    /// Target protocol address.
    pub fn tpa(&self) -> Ipv4Addr {
        self.ip(24)
    }
}

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// Who has `tpa`? (operation 1, RFC 826).
    Request,
    /// `spa` is at `sha` (operation 2).
    Reply,
}

/// An Ethernet / IPv4 ARP packet as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware (MAC) address.
    pub sha: MacAddr,
    /// Sender protocol (IPv4) address.
    pub spa: Ipv4Addr,
    /// Target hardware address (ignored in a request).
    pub tha: MacAddr,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

impl ArpRepr {
    /// Reads an Ethernet / IPv4 request or reply; anything else (another
    /// hardware or protocol type, other address lengths, another
    /// operation) is [`Error::FieldRange`].
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        if p.htype() != HTYPE_ETHERNET
            || p.ptype() != ETHERTYPE_IPV4
            || p.hlen() != 6
            || p.plen() != 4
        {
            return Err(Error::FieldRange);
        }
        let op = match p.oper() {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            _ => return Err(Error::FieldRange),
        };
        Ok(ArpRepr {
            op,
            sha: p.sha(),
            spa: p.spa(),
            tha: p.tha(),
            tpa: p.tpa(),
        })
    }

    /// A request for `target` from `mac` / `ip` (target MAC unknown: zero).
    pub fn request(mac: MacAddr, ip: Ipv4Addr, target: Ipv4Addr) -> ArpRepr {
        ArpRepr {
            op: ArpOp::Request,
            sha: mac,
            spa: ip,
            tha: MacAddr([0; 6]),
            tpa: target,
        }
    }

    /// The reply a host with `mac` and `ip` owes this packet: only a
    /// request for `ip` gets one.
    pub fn reply(&self, mac: MacAddr, ip: Ipv4Addr) -> Option<ArpRepr> {
        (self.op == ArpOp::Request && self.tpa == ip).then_some(ArpRepr {
            op: ArpOp::Reply,
            sha: mac,
            spa: ip,
            tha: self.sha,
            tpa: self.spa,
        })
    }

    /// Writes the 28-byte packet.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let b = buf.get_mut(..LEN).ok_or(Error::BufferTooSmall)?;
        set_u16(b, 0, HTYPE_ETHERNET);
        set_u16(b, 2, ETHERTYPE_IPV4);
        b[4] = 6;
        b[5] = 4;
        set_u16(
            b,
            6,
            match self.op {
                ArpOp::Request => 1,
                ArpOp::Reply => 2,
            },
        );
        b[8..14].copy_from_slice(&self.sha.0);
        b[14..18].copy_from_slice(&self.spa.octets());
        b[18..24].copy_from_slice(&self.tha.0);
        b[24..28].copy_from_slice(&self.tpa.octets());
        Ok(LEN)
    }

    /// Writes a whole frame: a request to the broadcast address, a reply
    /// to its target; zero padding to 60 bytes. Returns its length.
    pub fn emit_frame(&self, buf: &mut [u8]) -> Result<usize> {
        let dst = match self.op {
            ArpOp::Request => MacAddr::BROADCAST,
            ArpOp::Reply => self.tha,
        };
        self.emit_frame_to(dst, buf)
    }

    /// Writes a whole frame to `dst` (a request to a known MAC is how a
    /// host re-checks a neighbour, RFC 1122 §2.3.2.1); zero padding to 60
    /// bytes. Returns its length.
    pub fn emit_frame_to(&self, dst: MacAddr, buf: &mut [u8]) -> Result<usize> {
        self.emit_frame_tagged(dst, None, buf)
    }

    /// [`ArpRepr::emit_frame_to`] with an 802.1Q tag when `vlan` is given
    /// (ARP on a VLAN is tagged like the VLAN's IP traffic, IEEE 802.1Q
    /// §9); still padded to 60 bytes, the tag inside them, as Linux sends.
    pub fn emit_frame_tagged(
        &self,
        dst: MacAddr,
        vlan: Option<VlanTag>,
        buf: &mut [u8],
    ) -> Result<usize> {
        if buf.len() < MIN_FRAME {
            return Err(Error::BufferTooSmall);
        }
        let eth = EthernetRepr {
            dst,
            src: self.sha,
            vlan,
            ethertype: ETHERTYPE_ARP,
        };
        let n = eth.emit(buf)?;
        let m = self.emit(&mut buf[n..])?;
        buf[n + m..MIN_FRAME].fill(0);
        Ok(MIN_FRAME.max(n + m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::EthernetFrame;

    /// Frame 1 of tests/vectors/rc_pingpong.pcap: g2 asks who has
    /// 198.18.0.2 (42 bytes as captured, before padding by the NIC).
    const REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x18, 0x00, 0x03, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x18, 0x00, 0x03, 198, 18, 0,
        3, 0, 0, 0, 0, 0, 0, 198, 18, 0, 2,
    ];

    #[test]
    fn request_and_reply_as_linux_sends_them() {
        let eth = EthernetFrame::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(eth.ethertype(), ETHERTYPE_ARP);
        let p = ArpPacket::new_checked(eth.payload()).unwrap();
        let req = ArpRepr::parse(&p).unwrap();
        let g2 = MacAddr([0x52, 0x54, 0x00, 0x18, 0x00, 0x03]);
        assert_eq!(
            req,
            ArpRepr::request(
                g2,
                Ipv4Addr::new(198, 18, 0, 3),
                Ipv4Addr::new(198, 18, 0, 2)
            )
        );
        let mut out = [0u8; 64];
        let n = req.emit_frame(&mut out).unwrap();
        assert_eq!(n, 60);
        assert_eq!(&out[..42], &REQUEST[..]);
        assert!(out[42..60].iter().all(|&b| b == 0));

        let g1 = MacAddr([0x52, 0x54, 0x00, 0x18, 0x00, 0x02]);
        let rep = req.reply(g1, Ipv4Addr::new(198, 18, 0, 2)).unwrap();
        assert_eq!(rep.tha, g2);
        assert_eq!(req.reply(g1, Ipv4Addr::new(198, 18, 0, 9)), None);
        assert_eq!(rep.reply(g1, Ipv4Addr::new(198, 18, 0, 2)), None);
        let n = rep.emit_frame(&mut out).unwrap();
        let eth = EthernetFrame::new_checked(&out[..n]).unwrap();
        assert_eq!(eth.dst(), g2);
        let back = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn a_tagged_frame_carries_the_tag_and_is_still_60_bytes() {
        let eth = EthernetFrame::new_checked(&REQUEST[..]).unwrap();
        let req = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        let tag = VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        };
        let mut out = [0u8; 64];
        let n = req
            .emit_frame_tagged(MacAddr::BROADCAST, Some(tag), &mut out)
            .unwrap();
        assert_eq!(n, 60);
        assert_eq!(&out[12..18], &[0x81, 0x00, 0x60, 100, 0x08, 0x06]);
        assert_eq!(&out[18..46], &REQUEST[14..42]);
        let eth = EthernetFrame::new_checked(&out[..n]).unwrap();
        assert_eq!(eth.vlan(), Some(tag));
        assert_eq!(eth.ethertype(), ETHERTYPE_ARP);
        let back = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn other_kinds_and_short_buffers_are_errors() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[14..41]).err(),
            Some(Error::Truncated)
        );
        let mut b = REQUEST;
        b[14 + 7] = 3; // RARP request
        let p = ArpPacket::new_checked(&b[14..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), Err(Error::FieldRange));
        let mut b = REQUEST;
        b[14 + 3] = 0xdd; // protocol type 0x86dd
        let p = ArpPacket::new_checked(&b[14..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), Err(Error::FieldRange));
        let r = ArpRepr::request(MacAddr([2; 6]), Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
        assert_eq!(r.emit_frame(&mut [0u8; 59]), Err(Error::BufferTooSmall));
        assert_eq!(r.emit(&mut [0u8; 27]), Err(Error::BufferTooSmall));
    }
}
