//! RoCE v2 byte layouts: every header ferroce sends or accepts, the opcode
//! table, PSN arithmetic, the ICRC and whole-frame parse / emit.
//!
//! Each header has two faces, as in smoltcp's wire module:
//! - a **view** (`Bth<T>`, `Ipv4Packet<T>`, ...) over any `T: AsRef<[u8]>`,
//!   whose `new_checked` proves the length once; after that no accessor can
//!   panic. Setters exist when `T: AsMut<[u8]>`.
//! - a plain **`Repr`** value (`BthRepr`, `Ipv4Repr`, ...) with `parse` from a
//!   view, `emit` into a view, and the header's length.
//!
//! [`Frame::parse`] takes a whole Ethernet frame apart into a [`Frame`]
//! (every header's `Repr` plus the borrowed payload) and [`FrameRepr::emit`]
//! builds one into a caller's buffer, ICRC included, without allocating.
//! Where each rule comes from: IBTA Vol. 1 ch. 9 (BTH and extension headers)
//! and Annex A17 (RoCE v2: IP/UDP encapsulation, ICRC, ECN, CNP), summarised
//! in the project's reference notes B.1 to B.8.
//!
//! | file | owns |
//! | --- | --- |
//! | [`ethernet`] | Ethernet II with an optional 802.1Q tag |
//! | [`ipv4`], [`ipv6`] | the IP headers, ECN and DSCP (A17 §17.3.1) |
//! | [`udp`] | the UDP header, port 4791 (A17 §17.3.2) |
//! | [`opcode`] | the opcode table: which headers each opcode carries |
//! | [`bth`] | the base transport header (IBTA §9.2) |
//! | [`ext`] | RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, XRCETH, FETH, CNP |
//! | [`psn`] | 24-bit PSN arithmetic (IBTA §9.7.1) and the pad count |
//! | [`icrc`] | the invariant CRC (A17 §17.3.3) |
//! | [`frame`] | whole-frame parse / emit (A17 §17.3); `peek_dest_qp`, a received frame's QP from its headers alone |
//! | [`shard`] | which of a port's datapaths owns a QP number (QPN mod N; QP0, QP1 and non-RoCE frames: datapath 0) |
//! | [`template`] | a QP's headers as bytes, built once and patched per packet (the lengths, the IPv4 checksum, the BTH's varying fields) |
//! | [`int`] | ferroce's INT trailer between ferroce endpoints that both asked for it (not standard) |
//! | [`sr`] | ferroce's selective-repeat trailer, between ferroce endpoints that both asked for it (not standard) |
//! | [`caps`] | the capability tail by which two ferroce endpoints ask each other for INT or selective repeat |
//! | [`arp`] | ARP for IPv4 over Ethernet (RFC 826) |
//! | [`ndp`] | IPv6 Neighbor Solicitation / Advertisement (RFC 4861) |
//! | [`mad`] | the common MAD header (IBTA §13.4.2) and whole CM MADs, the UD payload to QP1 |
//! | [`cm`] | the CM messages REQ ... SIDR_REP with every field (IBTA §12.6, §12.11) |
//! | [`cma`] | rdma_cm's service IDs and REQ private-data header (IBTA Annex A11) |

#![deny(unsafe_code)]

pub mod arp;
pub mod bth;
pub mod caps;
pub mod cm;
pub mod cma;
pub mod ethernet;
pub mod ext;
pub mod frame;
pub mod gid;
pub mod icrc;
pub mod int;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod ndp;
pub mod opcode;
pub mod psn;
pub mod shard;
pub mod sr;
pub mod template;
pub mod udp;

pub use arp::{ArpOp, ArpPacket, ArpRepr};
pub use bth::{Bth, BthRepr};
pub use cm::CmMessage;
pub use cma::{CmaHdr, ServiceId};
pub use ethernet::{EthernetFrame, EthernetRepr, MacAddr, VlanTag};
pub use ext::{
    AckSyndrome, Aeth, AethRepr, AtomicAckEth, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth,
    NakCode, Reth, RethRepr, Xrceth,
};
pub use frame::{ExtHeaders, Frame, FrameRepr, IpRepr};
pub use gid::{gid_of, ip_of, Gid};
pub use ipv4::{Ecn, Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use mad::{CmMad, MadError, MadRepr};
pub use ndp::{NaFlags, NdpFrame, NdpPacket, NdpRepr};
pub use opcode::{HeaderSet, Opcode, OpcodeInfo, Transport};
pub use psn::{pad_count, Psn};
pub use shard::Shard;
pub use udp::{UdpPacket, UdpRepr, ROCE_UDP_PORT};

/// Header lengths by name, and the sums callers need, so that no one adds
/// up a frame's overhead by hand (IBTA Vol. 1 §9.2–§9.3, Annex A17
/// §17.2–§17.3; IEEE 802.3 and 802.1Q for Ethernet).
pub mod len {
    /// Ethernet II header.
    pub const ETH: usize = super::ethernet::HEADER_LEN;
    /// Ethernet II header with one 802.1Q tag.
    pub const ETH_VLAN: usize = super::ethernet::HEADER_LEN_VLAN;
    /// Ethernet frame check sequence (not part of the frames we write).
    pub const FCS: usize = 4;
    /// IPv4 header without options.
    pub const IPV4: usize = super::ipv4::HEADER_LEN;
    /// IPv6 header without extension headers.
    pub const IPV6: usize = super::ipv6::HEADER_LEN;
    /// UDP header.
    pub const UDP: usize = super::udp::HEADER_LEN;
    /// Base transport header (§9.2).
    pub const BTH: usize = super::bth::HEADER_LEN;
    /// RDMA extended transport header (§9.3.3).
    pub const RETH: usize = super::Reth::<&[u8]>::LEN;
    /// Datagram extended transport header (§9.3.2).
    pub const DETH: usize = super::Deth::<&[u8]>::LEN;
    /// Atomic extended transport header (§9.3.4), the largest one.
    pub const ATOMIC_ETH: usize = super::AtomicEth::<&[u8]>::LEN;
    /// Invariant CRC at the end of every RoCE v2 packet (A17 §17.3.3).
    pub const ICRC: usize = super::frame::ICRC_LEN;
    /// Everything before the extension headers of an untagged IPv4 RoCE v2
    /// frame: Ethernet, IPv4, UDP, BTH (54 B).
    pub const ROCE_V4: usize = ETH + IPV4 + UDP + BTH;
    /// The same at its largest: Ethernet with a VLAN tag, IPv6, UDP, BTH
    /// (78 B).
    pub const ROCE_MAX: usize = ETH_VLAN + IPV6 + UDP + BTH;
    /// Headers and ICRC around the payload of an untagged IPv4 UD SEND_ONLY
    /// (a DETH after the BTH; 66 B).
    pub const UD_V4: usize = ROCE_V4 + DETH + ICRC;
}

/// Why bytes are not a (well-formed) RoCE v2 frame, or a buffer too small.
///
/// [`Error::NotRoce`] is the one "not for us" answer (a valid frame of
/// another protocol); every other variant means a malformed RoCE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than a header, or a length field, needs.
    #[error("truncated: fewer bytes than the headers or length fields need")]
    Truncated,
    /// A well-formed frame that is not RoCE v2 (not IPv4/IPv6 + UDP to 4791).
    #[error("not a RoCE v2 frame")]
    NotRoce,
    /// IPv4 with options (IHL != 5; A17 CA17-3 / CA17-24 say drop).
    #[error("IPv4 header with options (IHL != 5)")]
    Ipv4Options,
    /// An IP fragment (RoCE v2 packets are sent with DF and never fragmented).
    #[error("IP fragment")]
    Fragmented,
    /// The IPv4 header checksum does not match.
    #[error("IPv4 header checksum mismatch")]
    Ipv4Checksum,
    /// IP and UDP length fields disagree with each other or with the frame.
    #[error("IP / UDP length fields disagree")]
    BadLength,
    /// An opcode the opcode table does not know.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// BTH TVer other than 0 (IBTA §9.2, C9-?: drop).
    #[error("BTH transport version {0} (must be 0)")]
    BadTver(u8),
    /// Pad count that does not align the payload to 4 bytes (IBTA §9.2).
    #[error("pad count does not align the payload to 4 bytes")]
    BadPad,
    /// A `Repr` whose extension headers do not match its opcode.
    #[error("extension headers do not match the opcode")]
    HeadersMismatch,
    /// A value that does not fit its field (e.g. a QPN over 24 bits).
    #[error("a value does not fit its field")]
    FieldRange,
    /// The output buffer is smaller than the frame.
    #[error("buffer too small for the frame")]
    BufferTooSmall,
    /// The ICMPv6 checksum of a Neighbor Discovery message does not match
    /// (RFC 4443 §2.3; such a message is dropped, RFC 4861 §7.1).
    #[error("ICMPv6 checksum mismatch")]
    Icmpv6Checksum,
}

/// The result of parsing or emitting a wire layout.
pub type Result<T> = core::result::Result<T, Error>;

/// Big-endian field access on slices whose length was checked before.
pub(crate) mod field {
    #[inline]
    pub fn u16_at(b: &[u8], i: usize) -> u16 {
        u16::from_be_bytes([b[i], b[i + 1]])
    }
    #[inline]
    pub fn u24_at(b: &[u8], i: usize) -> u32 {
        u32::from_be_bytes([0, b[i], b[i + 1], b[i + 2]])
    }
    #[inline]
    pub fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }
    #[inline]
    pub fn u64_at(b: &[u8], i: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        u64::from_be_bytes(a)
    }
    #[inline]
    pub fn set_u16(b: &mut [u8], i: usize, v: u16) {
        b[i..i + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u24(b: &mut [u8], i: usize, v: u32) {
        b[i..i + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    #[inline]
    pub fn set_u32(b: &mut [u8], i: usize, v: u32) {
        b[i..i + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u64(b: &mut [u8], i: usize, v: u64) {
        b[i..i + 8].copy_from_slice(&v.to_be_bytes());
    }
}

/// Defines a view type over a byte buffer with `new_unchecked`,
/// `new_checked` (length proven once), `into_inner` and `as_bytes`.
macro_rules! view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// The header's length in bytes.
            pub const LEN: usize = $len;

            /// Wraps `buffer` without checking its length; accessors may
            /// then panic on a short buffer. Prefer `new_checked`.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps `buffer` if it holds at least the whole header.
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                if buffer.as_ref().len() < Self::LEN {
                    Err($crate::wire::Error::Truncated)
                } else {
                    Ok($name { buffer })
                }
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's own bytes.
            pub fn header_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..Self::LEN]
            }

            /// The bytes after the header.
            pub fn rest(&self) -> &[u8] {
                &self.buffer.as_ref()[Self::LEN..]
            }
        }
    };
}
pub(crate) use view;
