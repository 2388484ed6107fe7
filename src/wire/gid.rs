//! Global identifiers on RoCE v2: a port's GID is an IP address, IPv6 as
//! it is and IPv4 as an IPv4-mapped IPv6 address (IBTA Vol. 1 Annex A17
//! §17.4.1.1). The GRH of InfiniBand becomes the IP header on the wire, so
//! a GID is what the IP header's addresses carry.

use core::net::{IpAddr, Ipv6Addr};

/// A GID as 16 bytes, in network order.
pub type Gid = [u8; 16];

/// The GID of an address: IPv4 as `::ffff:a.b.c.d` (A17 §17.4.1.1).
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address of a GID (an IPv4-mapped GID gives the IPv4 address).
pub fn ip_of(gid: &Gid) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(*gid)).to_canonical()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_gids_are_mapped_and_come_back() {
        let v4: IpAddr = "198.18.0.1".parse().unwrap();
        let g = gid_of(v4);
        assert_eq!(&g[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(ip_of(&g), v4);
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(ip_of(&gid_of(v6)), v6);
    }
}
