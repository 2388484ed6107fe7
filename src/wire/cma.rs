//! What rdma_cm (the IP-based connection manager of Linux and librdmacm)
//! puts into CM messages: the service ID made from a port space and a
//! port, and the header at the start of a REQ's private data (IBTA Vol. 1
//! Annex A11, "RDMA IP CM Service"; Linux
//! drivers/infiniband/core/cma.c).
//!
//! Service ID (Annex A11): `0x0000_0000_01PP_PPPP`: the byte 0x01, the port
//! space (0x06 TCP, 0x11 UDP, 0x3F IB) and the 16-bit destination port:
//! `(port_space << 16) | port` with the port spaces of rdma_cm
//! ([`port_space`]).
//!
//! REQ private data header (A11.4, 36 bytes):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0 | version: major (high nibble) and minor, 0 |
//! | 1 | IP version in the high nibble (4 or 6), low nibble reserved |
//! | 2-3 | source port of the active side |
//! | 4-19 | source IP: IPv6, or IPv4 in bytes 16-19 after 12 zero bytes |
//! | 20-35 | destination IP, the same way |
//!
//! The destination port is not in the header: it is the service ID's.
//! The application's own private data follows (56 bytes in a REQ).

use super::mad::{MadError, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// rdma_cm port spaces (Linux `enum rdma_ucm_port_space`).
pub mod port_space {
    /// IPoIB.
    pub const IPOIB: u16 = 0x0002;
    /// Connected, reliable: RC QPs (`RDMA_PS_TCP`).
    pub const TCP: u16 = 0x0106;
    /// Datagrams: UD QPs (`RDMA_PS_UDP`).
    pub const UDP: u16 = 0x0111;
    /// Any QP type (`RDMA_PS_IB`).
    pub const IB: u16 = 0x013F;
}

/// An rdma_cm service ID taken apart (Annex A11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServiceId {
    /// Port space ([`port_space`]), 0x01XX.
    pub port_space: u16,
    /// The listening (destination) port.
    pub port: u16,
}

impl ServiceId {
    /// The 64-bit service ID.
    pub fn to_u64(self) -> u64 {
        (self.port_space as u64) << 16 | self.port as u64
    }

    /// A service ID of the IP CM form `0x0000_0000_01PP_PPPP`, or `None`.
    pub fn from_u64(sid: u64) -> Option<ServiceId> {
        if sid >> 24 != 0x01 {
            return None;
        }
        Some(ServiceId {
            port_space: (sid >> 16) as u16,
            port: sid as u16,
        })
    }
}

/// The rdma_cm header's version (cma.c `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;

/// The rdma_cm header of a REQ's private data (A11.4) as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    /// The active side's source port.
    pub src_port: u16,
    /// The active side's IP address.
    pub src: IpAddr,
    /// The passive side's IP address.
    pub dst: IpAddr,
}

impl CmaHdr {
    /// The header's length.
    pub const LEN: usize = 36;

    /// Reads the header from the start of a REQ's private data.
    pub fn parse(b: &[u8]) -> Result<CmaHdr> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        if b[0] != CMA_VERSION {
            return Err(MadError::BadCmaVersion(b[0]));
        }
        let addr = |at: usize| -> Result<IpAddr> {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            match b[1] >> 4 {
                4 => Ok(IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(a))),
                v => Err(MadError::BadIpVersion(v)),
            }
        };
        Ok(CmaHdr {
            src_port: u16::from_be_bytes([b[2], b[3]]),
            src: addr(4)?,
            dst: addr(20)?,
        })
    }

    /// Writes the header; returns its length. Both addresses must be of
    /// one family.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        if b.len() < Self::LEN {
            return Err(MadError::BufferTooSmall);
        }
        let version = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(MadError::FieldRange),
        };
        b[..Self::LEN].fill(0);
        b[0] = CMA_VERSION;
        b[1] = version << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        for (at, ip) in [(4, self.src), (20, self.dst)] {
            match ip {
                IpAddr::V4(v4) => b[at + 12..at + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => b[at..at + 16].copy_from_slice(&v6.octets()),
            }
        }
        Ok(Self::LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_of_the_tcp_port_space() {
        let s = ServiceId {
            port_space: port_space::TCP,
            port: 18515,
        };
        assert_eq!(s.to_u64(), 0x0000_0000_0106_4853);
        assert_eq!(ServiceId::from_u64(0x0000_0000_0106_4853), Some(s));
        assert_eq!(ServiceId::from_u64(0x1000_0000_0106_4853), None);
        assert_eq!(ServiceId::from_u64(0x0000_0000_0206_4853), None);
    }

    #[test]
    fn headers_of_both_families_round_trip() {
        for (src, dst) in [("198.18.0.3", "198.18.0.2"), ("fd00::3", "fd00::2")] {
            let h = CmaHdr {
                src_port: 0xc511,
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
            };
            let mut b = [0xEEu8; CmaHdr::LEN];
            assert_eq!(h.emit(&mut b), Ok(CmaHdr::LEN));
            assert_eq!(CmaHdr::parse(&b), Ok(h));
        }
        let mixed = CmaHdr {
            src_port: 1,
            src: "198.18.0.3".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
        };
        assert_eq!(mixed.emit(&mut [0; 36]), Err(MadError::FieldRange));
    }

    #[test]
    fn bad_versions_and_short_input_are_errors() {
        let mut b = [0u8; CmaHdr::LEN];
        b[1] = 0x50;
        assert_eq!(CmaHdr::parse(&b), Err(MadError::BadIpVersion(5)));
        b[0] = 1;
        assert_eq!(CmaHdr::parse(&b), Err(MadError::BadCmaVersion(1)));
        assert_eq!(CmaHdr::parse(&b[..35]), Err(MadError::Truncated));
    }
}
