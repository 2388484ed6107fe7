//! IPv6 Neighbor Discovery for Ethernet (RFC 4861): the Neighbor
//! Solicitation and Neighbor Advertisement messages through which a RoCE v2
//! host on IPv6 learns its peers' MACs and tells them its own, as ARP does
//! for IPv4 ([`super::arp`]).
//!
//! Three layers, as elsewhere in `wire`:
//! - [`NdpPacket`], a checked view of the ICMPv6 message (RFC 4861 §4.3,
//!   §4.4): type, code, checksum, the advertisement's flags, the target
//!   address and the options after it;
//! - [`NdpRepr`], the message as plain values, with `parse` (every
//!   validity check of RFC 4861 §7.1.1 / §7.1.2, the checksum included)
//!   and `emit` (checksum included);
//! - [`NdpFrame`], a whole Ethernet frame (optionally 802.1Q tagged) with
//!   its IPv6 header: `parse` says `Ok(None)` for any frame that is not a
//!   solicitation or advertisement, so a receive path can ask it first.
//!
//! Addressing (RFC 4861 §7.2.2, RFC 4291 §2.7.1, RFC 2464 §7): a host
//! resolving `target` multicasts the solicitation to `target`'s
//! solicited-node address ([`solicited_node`]) at the MAC that address maps
//! to ([`multicast_mac`], 33:33:ff:xx:xx:xx); a host re-checking a known
//! neighbour sends it unicast. The answer goes unicast to the solicitor.
//! Every Neighbor Discovery packet is sent with hop limit 255 and a
//! receiver drops any other (RFC 4861 §7.1: it proves the packet was not
//! forwarded by a router).

use super::ethernet::{EthernetFrame, EthernetRepr, MacAddr, VlanTag, ETHERTYPE_IPV6};
use super::ipv4::Ecn;
use super::ipv6::{self, Ipv6Packet, Ipv6Repr};
use super::{view, Error, Result};
use core::net::Ipv6Addr;

/// IPv6 next header of ICMPv6 (RFC 4443).
pub const NEXT_HEADER_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation (RFC 4861 §4.3).
pub const TYPE_NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement (RFC 4861 §4.4).
pub const TYPE_NEIGHBOR_ADVERT: u8 = 136;
/// The only hop limit a Neighbor Discovery packet is sent or accepted with
/// (RFC 4861 §7.1.1, §7.1.2).
pub const HOP_LIMIT: u8 = 255;
/// Option type Source Link-Layer Address (RFC 4861 §4.6.1).
pub const OPT_SOURCE_LLADDR: u8 = 1;
/// Option type Target Link-Layer Address (RFC 4861 §4.6.1).
pub const OPT_TARGET_LLADDR: u8 = 2;
/// A solicitation or advertisement without options: type, code, checksum,
/// 4 bytes of flags / reserved, the 16-byte target (RFC 4861 §4.3, §4.4).
pub const HEADER_LEN: usize = 24;
/// A link-layer address option for Ethernet: type, length 1 (in units of
/// 8 bytes), the 6-byte MAC (RFC 4861 §4.6.1, RFC 2464 §8).
pub const LLADDR_OPT_LEN: usize = 8;

const FLAG_ROUTER: u8 = 0x80;
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;

/// The solicited-node multicast address of `a`: ff02::1:ff00:0/104 with
/// the low 24 bits of `a` (RFC 4291 §2.7.1). A solicitation for `a` is sent
/// there (RFC 4861 §7.2.2).
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// Whether `a` is a solicited-node multicast address (RFC 4291 §2.7.1).
pub fn is_solicited_node(a: &Ipv6Addr) -> bool {
    a.octets()[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff]
}

/// The Ethernet address an IPv6 multicast address is sent to: 33:33 and
/// the address's low 32 bits (RFC 2464 §7).
pub fn multicast_mac(a: &Ipv6Addr) -> MacAddr {
    let o = a.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The all-nodes multicast address ff02::1, where an advertisement
/// answering a solicitation from the unspecified address goes (RFC 4861
/// §7.2.4).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The ICMPv6 checksum of `msg` (its checksum field taken as it is) sent
/// from `src` to `dst`: the 16-bit one's complement of the one's complement
/// sum over the IPv6 pseudo-header (RFC 8200 §8.1: source, destination,
/// upper-layer length, next header 58) and the message (RFC 4443 §2.3).
/// Over a message whose checksum field is zero this is the value to write;
/// over a received message it is zero when the checksum is right.
pub fn checksum(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        let mut pairs = b.chunks_exact(2);
        for p in &mut pairs {
            sum += u16::from_be_bytes([p[0], p[1]]) as u64;
        }
        if let [last] = pairs.remainder() {
            sum += (*last as u64) << 8;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&(msg.len() as u32).to_be_bytes());
    add(&[0, 0, 0, NEXT_HEADER_ICMPV6]);
    add(msg);
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

view!(
    /// A checked view of a Neighbor Solicitation or Advertisement: the
    /// whole ICMPv6 message (the IPv6 payload), options included.
    NdpPacket,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> NdpPacket<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// ICMPv6 type: 135 solicitation, 136 advertisement.
    pub fn msg_type(&self) -> u8 {
        self.b()[0]
    }
    /// ICMPv6 code (0 for both messages).
    pub fn code(&self) -> u8 {
        self.b()[1]
    }
    /// ICMPv6 checksum over the pseudo-header and message (RFC 4443 §2.3).
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }
    /// Advertisement: the router flag (RFC 4861 §4.4 R).
    pub fn router(&self) -> bool {
        self.b()[4] & FLAG_ROUTER != 0
    }
    /// Advertisement: sent in answer to a solicitation (§4.4 S).
    pub fn solicited(&self) -> bool {
        self.b()[4] & FLAG_SOLICITED != 0
    }
    /// Advertisement: replaces a cached link-layer address (§4.4 O).
    pub fn override_flag(&self) -> bool {
        self.b()[4] & FLAG_OVERRIDE != 0
    }
    /// The address being solicited or advertised.
    pub fn target(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }
    /// The options after the target (RFC 4861 §4.6).
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    /// The MAC of the first link-layer address option of type `kind`
    /// (RFC 4861 §4.6.1); options of other types, and link-layer options
    /// of another length than Ethernet's, are skipped (§4.6: "silently
    /// ignore"). An option of length 0, or one that runs past the message,
    /// makes the message invalid (§7.1.1, §7.1.2).
    pub fn lladdr_option(&self, kind: u8) -> Result<Option<MacAddr>> {
        let mut found = None;
        let mut rest = self.options();
        while !rest.is_empty() {
            if rest.len() < 2 {
                return Err(Error::Truncated);
            }
            let len = rest[1] as usize * 8;
            if len == 0 {
                return Err(Error::FieldRange);
            }
            let opt = rest.get(..len).ok_or(Error::Truncated)?;
            if opt[0] == kind && len == LLADDR_OPT_LEN && found.is_none() {
                let mut m = [0u8; 6];
                m.copy_from_slice(&opt[2..8]);
                found = Some(MacAddr(m));
            }
            rest = &rest[len..];
        }
        Ok(found)
    }
}

/// The flags of a Neighbor Advertisement (RFC 4861 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NaFlags {
    /// R: the sender is a router.
    pub router: bool,
    /// S: an answer to a solicitation.
    pub solicited: bool,
    /// O: the link-layer address replaces a cached one.
    pub override_: bool,
}

/// A Neighbor Solicitation or Advertisement as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpRepr {
    /// "What is the link-layer address of `target`?" (RFC 4861 §4.3),
    /// with the solicitor's own (Source Link-Layer Address option).
    NeighborSolicit {
        /// The address whose link-layer address is asked for.
        target: Ipv6Addr,
        /// The solicitor's link-layer address, if the option is present.
        lladdr: Option<MacAddr>,
    },
    /// "`target` is at `lladdr`" (RFC 4861 §4.4; Target Link-Layer
    /// Address option).
    NeighborAdvert {
        /// The R, S and O flags.
        flags: NaFlags,
        /// The address the advertisement is about.
        target: Ipv6Addr,
        /// Its link-layer address, if the option is present.
        lladdr: Option<MacAddr>,
    },
}

impl NdpRepr {
    /// Reads a solicitation or advertisement that came from `src` to `dst`
    /// with `hop_limit`, after the validity checks of RFC 4861 §7.1.1 (NS)
    /// and §7.1.2 (NA): hop limit 255, the right checksum, code 0, a target
    /// that is not multicast, no option of length 0; a solicitation from
    /// the unspecified address (duplicate address detection) goes to a
    /// solicited-node address and has no source link-layer option; an
    /// advertisement to a multicast address is not solicited.
    ///
    /// Errors: [`Error::Icmpv6Checksum`] for the checksum,
    /// [`Error::Truncated`] for an option cut short, [`Error::FieldRange`]
    /// for every other rule (and for an ICMPv6 type that is neither).
    pub fn parse<T: AsRef<[u8]>>(
        p: &NdpPacket<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        hop_limit: u8,
    ) -> Result<NdpRepr> {
        if hop_limit != HOP_LIMIT || p.code() != 0 {
            return Err(Error::FieldRange);
        }
        if checksum(src, dst, p.buffer.as_ref()) != 0 {
            return Err(Error::Icmpv6Checksum);
        }
        let target = p.target();
        if target.is_multicast() {
            return Err(Error::FieldRange);
        }
        match p.msg_type() {
            TYPE_NEIGHBOR_SOLICIT => {
                let lladdr = p.lladdr_option(OPT_SOURCE_LLADDR)?;
                if src.is_unspecified() && (!is_solicited_node(dst) || lladdr.is_some()) {
                    return Err(Error::FieldRange);
                }
                Ok(NdpRepr::NeighborSolicit { target, lladdr })
            }
            TYPE_NEIGHBOR_ADVERT => {
                let flags = NaFlags {
                    router: p.router(),
                    solicited: p.solicited(),
                    override_: p.override_flag(),
                };
                if dst.is_multicast() && flags.solicited {
                    return Err(Error::FieldRange);
                }
                let lladdr = p.lladdr_option(OPT_TARGET_LLADDR)?;
                Ok(NdpRepr::NeighborAdvert {
                    flags,
                    target,
                    lladdr,
                })
            }
            _ => Err(Error::FieldRange),
        }
    }

    /// The address solicited or advertised.
    pub fn target(&self) -> Ipv6Addr {
        match *self {
            NdpRepr::NeighborSolicit { target, .. } | NdpRepr::NeighborAdvert { target, .. } => {
                target
            }
        }
    }

    /// The link-layer address the message carries (the sender's for a
    /// solicitation, the target's for an advertisement).
    pub fn lladdr(&self) -> Option<MacAddr> {
        match *self {
            NdpRepr::NeighborSolicit { lladdr, .. } | NdpRepr::NeighborAdvert { lladdr, .. } => {
                lladdr
            }
        }
    }

    /// The message's length: 24 bytes, 32 with a link-layer option.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.lladdr().map_or(0, |_| LLADDR_OPT_LEN)
    }

    /// Writes the message sent from `src` to `dst` into `buf`, checksum
    /// included (reserved bits zero); returns its length.
    pub fn emit(&self, src: &Ipv6Addr, dst: &Ipv6Addr, buf: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        let b = buf.get_mut(..n).ok_or(Error::BufferTooSmall)?;
        b.fill(0);
        let (ty, opt) = match *self {
            NdpRepr::NeighborSolicit { .. } => (TYPE_NEIGHBOR_SOLICIT, OPT_SOURCE_LLADDR),
            NdpRepr::NeighborAdvert { flags, .. } => {
                b[4] = if flags.router { FLAG_ROUTER } else { 0 }
                    | if flags.solicited { FLAG_SOLICITED } else { 0 }
                    | if flags.override_ { FLAG_OVERRIDE } else { 0 };
                (TYPE_NEIGHBOR_ADVERT, OPT_TARGET_LLADDR)
            }
        };
        b[0] = ty;
        b[8..24].copy_from_slice(&self.target().octets());
        if let Some(mac) = self.lladdr() {
            b[24] = opt;
            b[25] = (LLADDR_OPT_LEN / 8) as u8;
            b[26..32].copy_from_slice(&mac.0);
        }
        let c = checksum(src, dst, b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
        Ok(n)
    }
}

/// A Neighbor Discovery message in a whole Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdpFrame {
    /// Ethernet addresses and tag (the EtherType is IPv6's).
    pub eth: EthernetRepr,
    /// IPv6 source and destination (hop limit 255, traffic class and flow
    /// label 0 on emit).
    pub src: Ipv6Addr,
    /// IPv6 destination.
    pub dst: Ipv6Addr,
    /// The solicitation or advertisement.
    pub ndp: NdpRepr,
}

impl NdpFrame {
    /// Reads a whole frame. `Ok(None)`: not recognisably a Neighbor
    /// Solicitation or Advertisement (another EtherType, IPv6 next header
    /// or ICMPv6 type, or cut before the ICMPv6 type; IPv6 extension
    /// headers are not followed). An error: a solicitation or advertisement
    /// that fails a check of [`NdpRepr::parse`], or is cut short. Bytes
    /// after the IPv6 packet (Ethernet padding) are ignored.
    pub fn parse(frame: &[u8]) -> Result<Option<NdpFrame>> {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return Ok(None);
        };
        if eth.ethertype() != ETHERTYPE_IPV6 {
            return Ok(None);
        }
        let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else {
            return Ok(None);
        };
        if ip.version() != 6 || ip.next_header() != NEXT_HEADER_ICMPV6 {
            return Ok(None);
        }
        let payload = &ip.rest();
        match payload.first() {
            Some(&(TYPE_NEIGHBOR_SOLICIT | TYPE_NEIGHBOR_ADVERT)) => {}
            _ => return Ok(None),
        }
        let msg = payload
            .get(..ip.payload_len() as usize)
            .ok_or(Error::Truncated)?;
        let p = NdpPacket::new_checked(msg)?;
        let (src, dst) = (ip.src(), ip.dst());
        let ndp = NdpRepr::parse(&p, &src, &dst, ip.hop_limit())?;
        Ok(Some(NdpFrame {
            eth: EthernetRepr::parse(&eth),
            src,
            dst,
            ndp,
        }))
    }

    /// The frame's length.
    pub fn frame_len(&self) -> usize {
        self.eth.header_len() + ipv6::HEADER_LEN + self.ndp.buffer_len()
    }

    /// Writes the whole frame into `buf`; returns its length (at least 78
    /// bytes: no Ethernet padding is needed).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.frame_len();
        if buf.len() < n {
            return Err(Error::BufferTooSmall);
        }
        let eth = EthernetRepr {
            ethertype: ETHERTYPE_IPV6,
            ..self.eth
        };
        let mut off = eth.emit(buf)?;
        let ip = Ipv6Repr {
            src: self.src,
            dst: self.dst,
            dscp: 0,
            ecn: Ecn::NotEct,
            flow_label: 0,
            hop_limit: HOP_LIMIT,
            next_header: NEXT_HEADER_ICMPV6,
        };
        off += ip.emit(&mut buf[off..], self.ndp.buffer_len())?;
        off += self.ndp.emit(&self.src, &self.dst, &mut buf[off..])?;
        Ok(off)
    }

    /// A solicitation for `target` from `mac` / `src` (RFC 4861 §7.2.2):
    /// to `target`'s solicited-node address when `to` is `None` (address
    /// resolution), else unicast to `target` at the MAC `to` (the
    /// unreachability check of a known neighbour, §7.3.3). Carries our MAC
    /// as its source link-layer option.
    pub fn solicit(
        mac: MacAddr,
        vlan: Option<VlanTag>,
        src: Ipv6Addr,
        target: Ipv6Addr,
        to: Option<MacAddr>,
    ) -> NdpFrame {
        let (dst, dmac) = match to {
            Some(m) => (target, m),
            None => {
                let d = solicited_node(&target);
                (d, multicast_mac(&d))
            }
        };
        NdpFrame {
            eth: EthernetRepr {
                dst: dmac,
                src: mac,
                vlan,
                ethertype: ETHERTYPE_IPV6,
            },
            src,
            dst,
            ndp: NdpRepr::NeighborSolicit {
                target,
                lladdr: Some(mac),
            },
        }
    }

    /// The advertisement a host with `mac` owes this frame if it is a
    /// solicitation for one of its addresses (the caller checks the target
    /// is ours): from the target, with our MAC as the target link-layer
    /// option and the override flag; solicited and unicast to the
    /// solicitor (at its source link-layer option, else at the frame's
    /// Ethernet source), or, to a solicitor without an address (duplicate
    /// address detection), unsolicited to all nodes (RFC 4861 §7.2.4).
    pub fn reply(&self, mac: MacAddr, vlan: Option<VlanTag>) -> Option<NdpFrame> {
        let NdpRepr::NeighborSolicit { target, lladdr } = self.ndp else {
            return None;
        };
        let (dst, dmac, solicited) = if self.src.is_unspecified() {
            (ALL_NODES, multicast_mac(&ALL_NODES), false)
        } else {
            (self.src, lladdr.unwrap_or(self.eth.src), true)
        };
        Some(NdpFrame {
            eth: EthernetRepr {
                dst: dmac,
                src: mac,
                vlan,
                ethertype: ETHERTYPE_IPV6,
            },
            src: target,
            dst,
            ndp: NdpRepr::NeighborAdvert {
                flags: NaFlags {
                    router: false,
                    solicited,
                    override_: true,
                },
                target,
                lladdr: Some(mac),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv6Addr = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0, 1);
    const B: Ipv6Addr = Ipv6Addr::new(0xfd18, 0, 0, 0, 0, 0, 0xab, 0xcd02);
    const MA: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
    const MB: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x02]);

    #[test]
    fn solicited_node_addresses_and_their_macs() {
        let s = solicited_node(&B);
        assert_eq!(s, "ff02::1:ffab:cd02".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(&s));
        assert!(!is_solicited_node(&ALL_NODES));
        assert_eq!(
            multicast_mac(&s),
            MacAddr([0x33, 0x33, 0xff, 0xab, 0xcd, 0x02])
        );
        assert_eq!(multicast_mac(&ALL_NODES), MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    }

    /// A solicitation for B from A, byte by byte as RFC 4861 §4.3 lays it
    /// out; the checksum worked by hand below.
    #[test]
    fn a_solicitation_byte_for_byte() {
        let f = NdpFrame::solicit(MA, None, A, B, None);
        let mut buf = [0u8; 128];
        let n = f.emit(&mut buf).unwrap();
        assert_eq!(n, 14 + 40 + 32);
        #[rustfmt::skip]
        let want: [u8; 86] = [
            // Ethernet: 33:33:ff:ab:cd:02 <- 02:00:00:00:00:01, IPv6.
            0x33, 0x33, 0xff, 0xab, 0xcd, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x86, 0xdd,
            // IPv6: version 6, traffic class 0, flow label 0; payload 32,
            // next header 58, hop limit 255; fd18::1 -> ff02::1:ffab:cd02.
            0x60, 0, 0, 0, 0, 32, 58, 255,
            0xfd, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
            0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0xab, 0xcd, 0x02,
            // ICMPv6: type 135, code 0, checksum, reserved.
            135, 0, 0xe2, 0x0f, 0, 0, 0, 0,
            // Target fd18::ab:cd02.
            0xfd, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0x02,
            // Source link-layer address option: type 1, 1 x 8 bytes, MAC.
            1, 1, 0x02, 0, 0, 0, 0, 0x01,
        ];
        // The checksum by hand (RFC 1071): the 16-bit words of the
        // pseudo-header, fd18 + 0001 (source) + ff02 + 0001 + ffab + cd02
        // (destination) + 0020 (length 32) + 003a (next header 58), and of
        // the message, 8700 + fd18 + 00ab + cd02 + 0101 + 0200 + 0001, sum
        // to 0x6_1dea; folded, 0x1dea + 6 = 0x1df0; complemented, 0xe20f.
        assert_eq!(&buf[..n], &want[..]);
        assert_eq!(checksum(&A, &solicited_node(&B), &buf[54..n]), 0);
        let back = NdpFrame::parse(&buf[..n]).unwrap().unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn the_reply_to_a_solicitation_is_a_solicited_override_advert() {
        let ns = NdpFrame::solicit(MA, None, A, B, None);
        let tag = Some(VlanTag {
            pcp: 5,
            dei: false,
            vid: 42,
        });
        let na = ns.reply(MB, tag).unwrap();
        assert_eq!(na.eth.dst, MA);
        assert_eq!(na.eth.vlan, tag);
        assert_eq!((na.src, na.dst), (B, A));
        let flags = NaFlags {
            router: false,
            solicited: true,
            override_: true,
        };
        assert_eq!(
            na.ndp,
            NdpRepr::NeighborAdvert {
                flags,
                target: B,
                lladdr: Some(MB)
            }
        );
        let mut buf = [0u8; 128];
        let n = na.emit(&mut buf).unwrap();
        assert_eq!(n, 18 + 40 + 32);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0xa0, 42, 0x86, 0xdd]);
        assert_eq!(buf[18 + 40], 136);
        assert_eq!(buf[18 + 40 + 4], 0x60, "S and O");
        assert_eq!(NdpFrame::parse(&buf[..n]).unwrap(), Some(na));
        // An advertisement owes nothing; duplicate address detection gets
        // an unsolicited advertisement to all nodes.
        assert_eq!(na.reply(MA, None), None);
        let dad = NdpFrame {
            src: Ipv6Addr::UNSPECIFIED,
            ndp: NdpRepr::NeighborSolicit {
                target: B,
                lladdr: None,
            },
            ..ns
        };
        let r = dad.reply(MB, None).unwrap();
        assert_eq!((r.dst, r.eth.dst), (ALL_NODES, multicast_mac(&ALL_NODES)));
        assert!(matches!(r.ndp, NdpRepr::NeighborAdvert { flags, .. } if !flags.solicited));
        let n = r.emit(&mut buf).unwrap();
        assert!(NdpFrame::parse(&buf[..n]).unwrap().is_some());
    }

    #[test]
    fn rfc_4861_validity_checks() {
        let ns = NdpFrame::solicit(MA, None, A, B, None);
        let mut good = [0u8; 128];
        let n = ns.emit(&mut good).unwrap();
        let good = &good[..n];
        let at = 14 + 40;
        let parse = |f: &[u8]| NdpFrame::parse(f);
        let reseal = |f: &mut Vec<u8>| {
            f[at + 2..at + 4].fill(0);
            let p = Ipv6Packet::new_checked(&f[14..]).unwrap();
            let c = checksum(&p.src(), &p.dst(), &f[at..]);
            f[at + 2..at + 4].copy_from_slice(&c.to_be_bytes());
        };
        // Hop limit other than 255: forwarded by a router, dropped.
        let mut f = good.to_vec();
        f[14 + 7] = 64;
        assert_eq!(parse(&f), Err(Error::FieldRange));
        // A flipped bit breaks the checksum.
        let mut f = good.to_vec();
        f[n - 1] ^= 1;
        assert_eq!(parse(&f), Err(Error::Icmpv6Checksum));
        // Code other than 0.
        let mut f = good.to_vec();
        f[at + 1] = 1;
        reseal(&mut f);
        assert_eq!(parse(&f), Err(Error::FieldRange));
        // A multicast target.
        let mut f = good.to_vec();
        f[at + 8] = 0xff;
        reseal(&mut f);
        assert_eq!(parse(&f), Err(Error::FieldRange));
        // An option of length 0.
        let mut f = good.to_vec();
        f[at + 25] = 0;
        reseal(&mut f);
        assert_eq!(parse(&f), Err(Error::FieldRange));
        // An option running past the message.
        let mut f = good.to_vec();
        f[at + 25] = 2;
        reseal(&mut f);
        assert_eq!(parse(&f), Err(Error::Truncated));
        // An unknown option is skipped; the link-layer one is still found.
        let mut f = good.to_vec();
        f.extend_from_slice(&[99, 1, 0, 0, 0, 0, 0, 0]);
        f[14 + 5] += 8;
        reseal(&mut f);
        assert_eq!(parse(&f).unwrap().unwrap().ndp.lladdr(), Some(MA));
        // A solicited advertisement to a multicast address.
        let mut na = ns.reply(MB, None).unwrap();
        na.dst = ALL_NODES;
        let mut b = [0u8; 128];
        let m = na.emit(&mut b).unwrap();
        assert_eq!(parse(&b[..m]), Err(Error::FieldRange));
        // Duplicate address detection with a source link-layer option.
        let dad = NdpFrame {
            src: Ipv6Addr::UNSPECIFIED,
            ..ns
        };
        let m = dad.emit(&mut b).unwrap();
        assert_eq!(parse(&b[..m]), Err(Error::FieldRange));
        // Cut before the ICMPv6 type: not recognisably ours; after it:
        // truncated. Never a panic.
        for cut in 0..n {
            let want_err = cut > at;
            assert_eq!(parse(&good[..cut]).is_err(), want_err, "cut at {cut}");
            if !want_err {
                assert_eq!(parse(&good[..cut]), Ok(None));
            }
        }
        // Ethernet padding after the packet is ignored.
        let mut f = good.to_vec();
        f.extend_from_slice(&[0; 10]);
        assert_eq!(parse(&f).unwrap(), Some(ns));
    }

    #[test]
    fn other_frames_are_not_neighbour_discovery() {
        let ns = NdpFrame::solicit(MA, None, A, B, None);
        let mut b = [0u8; 128];
        let n = ns.emit(&mut b).unwrap();
        // An echo request (ICMPv6 type 128), UDP, IPv4.
        let mut f = b[..n].to_vec();
        f[54] = 128;
        assert_eq!(NdpFrame::parse(&f), Ok(None));
        let mut f = b[..n].to_vec();
        f[14 + 6] = 17;
        assert_eq!(NdpFrame::parse(&f), Ok(None));
        let mut f = b[..n].to_vec();
        f[12..14].copy_from_slice(&[8, 0]);
        assert_eq!(NdpFrame::parse(&f), Ok(None));
        assert_eq!(ns.emit(&mut b[..85]), Err(Error::BufferTooSmall));
    }
}
