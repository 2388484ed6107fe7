//! What a switch does to an IP packet's TTL (IPv4) or hop limit (IPv6)
//! as it forwards the frame: it lowers it by one, as a router does, so
//! that a receiver can tell how many switches a packet crossed.
//!
//! - **Decrement**: IPv4 (RFC 1812 §5.3.1) and IPv6 (RFC 8200 §3) alike,
//!   a packet that arrives with a TTL of 0 or 1 would leave with 0: it
//!   is dropped ([`Hop::Expired`]); any other is forwarded with one less,
//!   the IPv4 header checksum updated incrementally (RFC 1624), as ECN
//!   marking does.
//! - **Neighbour Discovery is left alone**: a receiver refuses an NDP
//!   message whose hop limit is not 255 (RFC 4861 §7.1), because NDP
//!   never crosses a router. The fabric's switches stand for one link as
//!   far as address resolution goes (they forward by MAC), so its
//!   ICMPv6 types 133 to 137 keep their hop limit. ARP is not IP.
//! - **Non-IP frames**, and IP frames too short for their header, pass
//!   unchanged.
//! - **ICRC**: RoCE v2's invariant CRC covers the IP header with its TTL /
//!   hop limit and checksum replaced by ones (reference B.7), so a RoCE
//!   frame keeps a valid ICRC.

use super::EcnField;
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::{Ipv6Packet, HEADER_LEN as IPV6_HEADER_LEN};
use crate::wire::ndp::NEXT_HEADER_ICMPV6;

/// What happens to a frame a switch forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hop {
    /// It goes on (its TTL one lower, if it is IP).
    Forward,
    /// Its TTL or hop limit ran out: it is dropped.
    Expired,
}

/// Lowers the TTL / hop limit of the IP packet in `frame` by one (see the
/// module docs), or says it expired (the frame is then left unchanged).
pub(super) fn forward(frame: &mut [u8]) -> Hop {
    match EcnField::find(frame) {
        Some(EcnField::Ipv4(at)) => {
            let mut p = Ipv4Packet::new_unchecked(&mut frame[at..]);
            match p.ttl() {
                0 | 1 => Hop::Expired,
                ttl => {
                    p.set_ttl(ttl - 1);
                    Hop::Forward
                }
            }
        }
        Some(EcnField::Ipv6(at)) => {
            if is_ndp(&frame[at..]) {
                return Hop::Forward;
            }
            let mut p = Ipv6Packet::new_unchecked(&mut frame[at..]);
            match p.hop_limit() {
                0 | 1 => Hop::Expired,
                h => {
                    p.set_hop_limit(h - 1);
                    Hop::Forward
                }
            }
        }
        None => Hop::Forward,
    }
}

/// Whether an IPv6 packet (header at `ip[0]`) is an NDP message: ICMPv6
/// (no extension header) of type 133 to 137 (RFC 4861 §4).
fn is_ndp(ip: &[u8]) -> bool {
    let p = Ipv6Packet::new_unchecked(ip);
    p.next_header() == NEXT_HEADER_ICMPV6
        && ip
            .get(IPV6_HEADER_LEN)
            .is_some_and(|t| (133..=137).contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::{Ecn, Ipv4Repr, PROTO_UDP};
    use crate::wire::ipv6::Ipv6Repr;
    use core::net::{Ipv4Addr, Ipv6Addr};

    const ETH: usize = 14;

    fn v4(ttl: u8) -> Vec<u8> {
        let mut f = vec![0u8; ETH + 28];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        Ipv4Repr {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 0,
            dont_frag: true,
            ttl,
            protocol: PROTO_UDP,
        }
        .emit(&mut f[ETH..], 8)
        .unwrap();
        f
    }

    fn v6(hop_limit: u8, next_header: u8, icmp_type: u8) -> Vec<u8> {
        let mut f = vec![0u8; ETH + 48];
        f[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
        Ipv6Repr {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
            dscp: 26,
            ecn: Ecn::Ect0,
            flow_label: 7,
            hop_limit,
            next_header,
        }
        .emit(&mut f[ETH..], 8)
        .unwrap();
        f[ETH + 40] = icmp_type;
        f
    }

    #[test]
    fn an_ipv4_ttl_drops_by_one_with_a_valid_checksum_and_expires_at_one() {
        let mut f = v4(64);
        assert_eq!(forward(&mut f), Hop::Forward);
        let p = Ipv4Packet::new_checked(&f[ETH..]).unwrap();
        assert_eq!(p.ttl(), 63);
        assert!(p.checksum_ok());
        assert_eq!(f, v4(63));
        for ttl in [0, 1] {
            let mut f = v4(ttl);
            assert_eq!(forward(&mut f), Hop::Expired, "ttl {ttl}");
            assert_eq!(f, v4(ttl), "left alone");
        }
        let mut f = v4(2);
        assert_eq!(forward(&mut f), Hop::Forward);
        assert_eq!(f, v4(1));
    }

    #[test]
    fn an_ipv6_hop_limit_drops_by_one_but_ndp_keeps_255() {
        let mut f = v6(64, PROTO_UDP, 0);
        assert_eq!(forward(&mut f), Hop::Forward);
        assert_eq!(f, v6(63, PROTO_UDP, 0));
        let mut f = v6(1, PROTO_UDP, 0);
        assert_eq!(forward(&mut f), Hop::Expired);
        for t in 133..=137 {
            let mut f = v6(255, NEXT_HEADER_ICMPV6, t);
            assert_eq!(forward(&mut f), Hop::Forward);
            assert_eq!(f, v6(255, NEXT_HEADER_ICMPV6, t), "NDP type {t}");
        }
        // Other ICMPv6 (an echo request, 128) is routed as any packet.
        let mut f = v6(64, NEXT_HEADER_ICMPV6, 128);
        forward(&mut f);
        assert_eq!(f, v6(63, NEXT_HEADER_ICMPV6, 128));
    }

    #[test]
    fn non_ip_and_short_frames_pass_unchanged() {
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let before = arp.clone();
        assert_eq!(forward(&mut arp), Hop::Forward);
        assert_eq!(arp, before);
        let mut short = v4(64);
        short.truncate(ETH + 10);
        let before = short.clone();
        assert_eq!(forward(&mut short), Hop::Forward);
        assert_eq!(short, before);
    }
}
