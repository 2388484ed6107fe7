//! Whole RoCE v2 frames: Ethernet | IPv4 or IPv6 | UDP 4791 | BTH |
//! extension headers | payload | pad | ICRC (A17 §17.3; reference B.1).
//!
//! [`Frame::parse`] checks a received frame's structure in one pass and
//! returns a checked view of it: the payload borrowed, every header read on
//! demand (cheap accessors for the hot fields, [`Frame::repr`] for all of
//! them). The ICRC is checked separately
//! ([`Frame::icrc_ok`]) so that a caller can count the two failures apart.
//! [`FrameRepr::emit`] writes a frame into a caller's buffer, lengths, IPv4
//! checksum, pad and ICRC included; [`FrameRepr::emit_headers`] +
//! [`seal`] let the payload be written in place between the two.
//!
//! Rules applied on parse (each failure is its own [`Error`]):
//! - EtherType IPv4 or IPv6 (one 802.1Q tag allowed), IP protocol / next
//!   header UDP, UDP destination port 4791; anything else is
//!   [`Error::NotRoce`];
//! - IPv4: IHL 5 (CA17-3), not a fragment, right header checksum; IP and
//!   UDP lengths agree with each other and fit the frame (bytes after the
//!   IP packet, such as Ethernet padding or an FCS, are ignored);
//! - BTH: TVer 0, an opcode of the table; the opcode's extension headers
//!   and the ICRC fit; no payload on opcodes that carry none; the pad count
//!   aligns the payload to 4 bytes.
//!
//! Rules applied on emit: the opcode's headers and only those; pad count
//! `(-len) & 3` with zero pad bytes; IPv4 total length and checksum; IPv6
//! payload length; UDP length through the ICRC; the ICRC. The Repr's values
//! are written as given, so a RoCE v2 sender sets DF, UDP checksum 0 and a
//! per-QP source port (see [`FrameRepr::roce`]).

use super::bth::{self, Bth, BthRepr};
use super::ethernet::{self, EthernetFrame, EthernetRepr, MacAddr, VlanTag};
use super::ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth, FethRepr, Ieth,
    ImmDt, Reth, RethRepr, Xrceth,
};
use super::field::{set_u24, set_u32, set_u64};
use super::icrc;
use super::ipv4::{self, Ecn, Ipv4Packet, Ipv4Repr};
use super::ipv6::{self, Ipv6Packet, Ipv6Repr};
use super::opcode::{HeaderSet, Opcode, OpcodeInfo};
use super::psn::pad_count;
use super::udp::{self, UdpPacket, UdpRepr, ROCE_UDP_PORT};
use super::{Error, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::ops::Range;

/// The ICRC's length.
pub const ICRC_LEN: usize = 4;

/// The IP header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    /// An IPv4 header (RoCE v2 over IPv4).
    V4(Ipv4Repr),
    /// An IPv6 header (RoCE v2 over IPv6).
    V6(Ipv6Repr),
}

impl IpRepr {
    /// The IPv4 header of a RoCE v2 packet (A17 §17.3.1.1): DF set (CA17-7),
    /// TTL 64, UDP, IP ID 0 (any value will do: never fragmented).
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr, dscp: u8, ecn: Ecn) -> IpRepr {
        IpRepr::V4(Ipv4Repr {
            src,
            dst,
            dscp,
            ecn,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: ipv4::PROTO_UDP,
        })
    }

    /// The IPv6 header of a RoCE v2 packet (A17 §17.3.1.2): hop limit 64,
    /// next header UDP, the flow label of the QP's flow.
    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, dscp: u8, ecn: Ecn, flow_label: u32) -> IpRepr {
        IpRepr::V6(Ipv6Repr {
            src,
            dst,
            dscp,
            ecn,
            flow_label,
            hop_limit: 64,
            next_header: ipv4::PROTO_UDP,
        })
    }

    /// The IP header's length: 20 (IPv4, no options) or 40 (IPv6).
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => ipv4::HEADER_LEN,
            IpRepr::V6(_) => ipv6::HEADER_LEN,
        }
    }
    /// The Ethernet type that announces this IP version.
    pub fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ethernet::ETHERTYPE_IPV4,
            IpRepr::V6(_) => ethernet::ETHERTYPE_IPV6,
        }
    }
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src.into(),
            IpRepr::V6(r) => r.src.into(),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst.into(),
            IpRepr::V6(r) => r.dst.into(),
        }
    }
    /// The ECN field (RFC 3168).
    pub fn ecn(&self) -> Ecn {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.ecn,
        }
    }
    /// Sets the ECN field.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        match self {
            IpRepr::V4(r) => r.ecn = ecn,
            IpRepr::V6(r) => r.ecn = ecn,
        }
    }
    /// The DSCP, 6 bits (RFC 2474).
    pub fn dscp(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.dscp,
            IpRepr::V6(r) => r.dscp,
        }
    }
    /// Sets the DSCP.
    pub fn set_dscp(&mut self, dscp: u8) {
        match self {
            IpRepr::V4(r) => r.dscp = dscp,
            IpRepr::V6(r) => r.dscp = dscp,
        }
    }
    /// TTL (IPv4) or hop limit (IPv6).
    pub fn ttl(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.ttl,
            IpRepr::V6(r) => r.hop_limit,
        }
    }
    /// The same header with source and destination exchanged.
    pub fn reversed(&self) -> IpRepr {
        match *self {
            IpRepr::V4(r) => IpRepr::V4(Ipv4Repr {
                src: r.dst,
                dst: r.src,
                ..r
            }),
            IpRepr::V6(r) => IpRepr::V6(Ipv6Repr {
                src: r.dst,
                dst: r.src,
                ..r
            }),
        }
    }
    pub(super) fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        match self {
            IpRepr::V4(r) => r.emit(buf, payload_len),
            IpRepr::V6(r) => r.emit(buf, payload_len),
        }
    }
}

/// The extension headers of one packet; which ones are present must match
/// the opcode's row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// DETH: Q_Key and source QP (UD).
    pub deth: Option<DethRepr>,
    /// XRCETH: the XRC SRQ number, 24 bits (XRC requests).
    pub xrceth: Option<u32>,
    /// FETH: FLUSH selectivity and placement.
    pub feth: Option<FethRepr>,
    /// RETH: VA, R_Key, DMA length (RDMA WRITE, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic: Option<AtomicEthRepr>,
    /// AETH: syndrome and MSN (ACKs, READ responses).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: the remote value before the atomic operation.
    pub atomic_ack: Option<u64>,
    /// Immediate data as read in network order.
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// The set of headers present (the CNP block is implied by the opcode).
    pub fn set(&self) -> HeaderSet {
        let mut s = HeaderSet::NONE;
        let mut add = |on: bool, h| {
            if on {
                s = s.union(h)
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.xrceth.is_some(), HeaderSet::XRCETH);
        add(self.feth.is_some(), HeaderSet::FETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.imm.is_some(), HeaderSet::IMMDT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        s
    }

    /// Reads the headers of `set` from the start of `b`, which the caller
    /// has checked holds `set.len()` bytes.
    fn parse(set: HeaderSet, b: &[u8]) -> ExtHeaders {
        let mut e = ExtHeaders::default();
        let mut off = 0;
        let mut take = |h: HeaderSet, n: usize| -> Option<&[u8]> {
            set.contains(h).then(|| {
                let s = &b[off..off + n];
                off += n;
                s
            })
        };
        e.deth = take(HeaderSet::DETH, 8).map(|s| DethRepr::parse(&Deth::new_unchecked(s)));
        e.xrceth = take(HeaderSet::XRCETH, 4).map(|s| Xrceth::new_unchecked(s).srq());
        e.feth = take(HeaderSet::FETH, 4).map(|s| FethRepr::parse(&Feth::new_unchecked(s)));
        e.reth = take(HeaderSet::RETH, 16).map(|s| RethRepr::parse(&Reth::new_unchecked(s)));
        e.atomic = take(HeaderSet::ATOMIC_ETH, 28)
            .map(|s| AtomicEthRepr::parse(&AtomicEth::new_unchecked(s)));
        e.aeth = take(HeaderSet::AETH, 4).map(|s| AethRepr::parse(&Aeth::new_unchecked(s)));
        e.atomic_ack =
            take(HeaderSet::ATOMIC_ACK_ETH, 8).map(|s| AtomicAckEth::new_unchecked(s).orig());
        e.imm = take(HeaderSet::IMMDT, 4).map(|s| ImmDt::new_unchecked(s).imm());
        e.ieth = take(HeaderSet::IETH, 4).map(|s| Ieth::new_unchecked(s).rkey());
        e
    }

    /// Writes the headers (and, for a CNP, its 16 zero bytes) into `b`,
    /// which holds exactly their length.
    pub(super) fn emit(&self, cnp: bool, b: &mut [u8]) -> Result<()> {
        let mut off = 0;
        let mut next = |n: usize| {
            let r = off..off + n;
            off += n;
            r
        };
        if let Some(h) = self.deth {
            h.emit(&mut b[next(8)])?;
        }
        if let Some(v) = self.xrceth {
            if v > 0x00FF_FFFF {
                return Err(Error::FieldRange);
            }
            let b = &mut b[next(4)];
            b[0] = 0;
            set_u24(b, 1, v);
        }
        if let Some(h) = self.feth {
            h.emit(&mut b[next(4)])?;
        }
        if let Some(h) = self.reth {
            h.emit(&mut b[next(16)]);
        }
        if let Some(h) = self.atomic {
            h.emit(&mut b[next(28)]);
        }
        if let Some(h) = self.aeth {
            h.emit(&mut b[next(4)])?;
        }
        if let Some(v) = self.atomic_ack {
            set_u64(&mut b[next(8)], 0, v);
        }
        if let Some(v) = self.imm {
            set_u32(&mut b[next(4)], 0, v);
        }
        if let Some(v) = self.ieth {
            set_u32(&mut b[next(4)], 0, v);
        }
        if cnp {
            b[next(16)].fill(0);
        }
        Ok(())
    }
}

/// Every header of a RoCE v2 frame, as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Its `ethertype` is ignored on emit (the IP version decides).
    pub eth: EthernetRepr,
    /// The IPv4 or IPv6 header.
    pub ip: IpRepr,
    /// The UDP header (destination port 4791).
    pub udp: UdpRepr,
    /// The base transport header.
    pub bth: BthRepr,
    /// The extension headers after the BTH.
    pub ext: ExtHeaders,
}

/// A parsed frame: a checked view of its bytes. [`Frame::parse`] proves the
/// whole structure once; then the headers are read on demand, each accessor
/// infallible and cheap ([`Frame::opcode`], [`Frame::psn`], ...), or all at
/// once as a [`FrameRepr`] ([`Frame::repr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The frame from its Ethernet header through its ICRC.
    bytes: &'a [u8],
    /// Where the IP header starts.
    pub ip_offset: usize,
    /// Where the BTH starts.
    bth_offset: usize,
    /// The opcode's row of the table.
    pub info: &'static OpcodeInfo,
    /// The payload without its pad bytes.
    pub payload: &'a [u8],
    /// The BTH pad count.
    pub pad: u8,
    /// The ICRC as carried (its 4 bytes read least-significant first).
    pub icrc: u32,
    /// A frame received in parts ([`Frame::parse_parts`]): its pad bytes,
    /// which follow the payload there; `None` for a frame in one piece.
    parts_pad: Option<&'a [u8]>,
}

#[inline(always)]
fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

/// Checks an IPv4 header at `l3` (A17 §17.3.1.1) of a frame `avail` bytes
/// long, whose headers `frame` holds; returns where the UDP header starts
/// and where the IP packet ends. `NotRoce` unless UDP to port 4791.
#[inline(always)]
fn check_ipv4(frame: &[u8], l3: usize, avail: usize) -> Result<(usize, usize)> {
    let Some(h) = frame.get(l3..).and_then(|b| b.first_chunk::<20>()) else {
        return Err(Error::Truncated);
    };
    if h[0] >> 4 != 4 || h[9] != ipv4::PROTO_UDP {
        return Err(Error::NotRoce);
    }
    // A later fragment has no UDP header: not recognisably RoCE.
    let frag = be16(h, 6);
    if frag & 0x1FFF != 0 {
        return Err(Error::NotRoce);
    }
    let ihl = (h[0] & 0x0F) as usize * 4;
    match frame.get(l3 + ihl + 2..l3 + ihl + 4) {
        Some(d) if d == ROCE_UDP_PORT.to_be_bytes() => {}
        Some(_) => return Err(Error::NotRoce),
        None => return Err(Error::Truncated),
    }
    Ipv4Repr::check(&Ipv4Packet::new_unchecked(&h[..]))?;
    let total = be16(h, 2) as usize;
    if l3 + total > avail {
        return Err(Error::Truncated);
    }
    Ok((l3 + ipv4::HEADER_LEN, l3 + total))
}

/// Checks an IPv6 header at `l3` (A17 §17.3.1.2), as [`check_ipv4`].
#[inline(always)]
fn check_ipv6(frame: &[u8], l3: usize, avail: usize) -> Result<(usize, usize)> {
    let Some(h) = frame.get(l3..).and_then(|b| b.first_chunk::<40>()) else {
        return Err(Error::Truncated);
    };
    if h[0] >> 4 != 6 || h[6] != ipv4::PROTO_UDP {
        return Err(Error::NotRoce);
    }
    let udp = l3 + ipv6::HEADER_LEN;
    match frame.get(udp + 2..udp + 4) {
        Some(d) if d == ROCE_UDP_PORT.to_be_bytes() => {}
        Some(_) => return Err(Error::NotRoce),
        None => return Err(Error::Truncated),
    }
    let end = udp + be16(h, 4) as usize;
    if end > avail {
        return Err(Error::Truncated);
    }
    Ok((udp, end))
}

/// Where a frame's IP header, UDP header and IP packet's end are, from its
/// headers in `frame` and its whole length `avail`.
#[inline(always)]
fn locate(frame: &[u8], avail: usize) -> Result<(usize, usize, usize)> {
    let Some(eth) = frame.first_chunk::<14>() else {
        return Err(Error::Truncated);
    };
    let (ethertype, l3) = match be16(eth, 12) {
        ethernet::ETHERTYPE_VLAN => match frame.get(16..18) {
            Some(t) => (u16::from_be_bytes([t[0], t[1]]), ethernet::HEADER_LEN_VLAN),
            None => return Err(Error::Truncated),
        },
        t => (t, ethernet::HEADER_LEN),
    };
    let (udp, end) = match ethertype {
        ethernet::ETHERTYPE_IPV4 => check_ipv4(frame, l3, avail)?,
        ethernet::ETHERTYPE_IPV6 => check_ipv6(frame, l3, avail)?,
        _ => return Err(Error::NotRoce),
    };
    Ok((l3, udp, end))
}

/// The BTH destination QP of a frame that looks like RoCE v2 (Ethernet,
/// an optional 802.1Q tag, IPv4 without options or IPv6, UDP to port 4791,
/// A17 §17.3), read from its headers in `head` alone; `None` for anything
/// else (ARP, Neighbor Discovery, other UDP, fragments, a short head).
///
/// Nothing else is checked (lengths, checksums, the ICRC): this is for
/// steering a received frame to the datapath that owns its QP, which then
/// parses it in full ([`Frame::parse`]) and counts what is wrong with it.
#[inline]
pub fn peek_dest_qp(head: &[u8]) -> Option<u32> {
    let eth = head.first_chunk::<14>()?;
    let (ethertype, l3) = match be16(eth, 12) {
        ethernet::ETHERTYPE_VLAN => {
            let t = head.get(16..18)?;
            (u16::from_be_bytes([t[0], t[1]]), ethernet::HEADER_LEN_VLAN)
        }
        t => (t, ethernet::HEADER_LEN),
    };
    let udp = match ethertype {
        ethernet::ETHERTYPE_IPV4 => {
            let h = head.get(l3..)?.first_chunk::<20>()?;
            let plain = h[0] == 0x45 && h[9] == ipv4::PROTO_UDP;
            if !plain || be16(h, 6) & 0x1FFF != 0 {
                return None;
            }
            l3 + ipv4::HEADER_LEN
        }
        ethernet::ETHERTYPE_IPV6 => {
            let h = head.get(l3..)?.first_chunk::<40>()?;
            if h[0] >> 4 != 6 || h[6] != ipv4::PROTO_UDP {
                return None;
            }
            l3 + ipv6::HEADER_LEN
        }
        _ => return None,
    };
    let d = head
        .get(udp..)?
        .first_chunk::<{ udp::HEADER_LEN + bth::HEADER_LEN }>()?;
    if be16(d, 2) != ROCE_UDP_PORT {
        return None;
    }
    let b = udp::HEADER_LEN;
    Some(u32::from_be_bytes([0, d[b + 5], d[b + 6], d[b + 7]]))
}

impl<'a> Frame<'a> {
    /// Takes a whole Ethernet frame (without FCS) apart and checks its
    /// structure (the rules at the top of this module); bytes after the IP
    /// packet are ignored. The ICRC is [`Frame::icrc_ok`]'s job.
    #[inline]
    pub fn parse(frame: &'a [u8]) -> Result<Frame<'a>> {
        let (l3, udp, end) = locate(frame, frame.len())?;
        let bytes = &frame[..end];
        let dgram = &bytes[udp..];
        if dgram.len() < udp::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if be16(dgram, 4) as usize != dgram.len() {
            return Err(Error::BadLength);
        }
        let Some(bth) = dgram[udp::HEADER_LEN..].first_chunk::<{ bth::HEADER_LEN }>() else {
            return Err(Error::Truncated);
        };
        let tver = bth[1] & 0x0F;
        if tver != 0 {
            return Err(Error::BadTver(tver));
        }
        let info = opcode_info(Opcode(bth[0]))?;
        let bth_offset = udp + udp::HEADER_LEN;
        let rest = &bytes[bth_offset + bth::HEADER_LEN..];
        let hl = info.headers_len as usize;
        if rest.len() < hl + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let (padded, icrc) = rest[hl..].split_at(rest.len() - hl - ICRC_LEN);
        let pad = (bth[1] >> 4) & 3;
        if padded.len() & 3 != 0 || pad as usize > padded.len() {
            return Err(Error::BadPad);
        }
        if !info.payload && !padded.is_empty() {
            return Err(Error::BadLength);
        }
        Ok(Frame {
            bytes,
            ip_offset: l3,
            bth_offset,
            info,
            payload: &padded[..padded.len() - pad as usize],
            pad,
            icrc: u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]),
            parts_pad: None,
        })
    }

    /// Takes apart a frame received in three parts, as a zero-copy sender
    /// sends it: `head` holds every header (Ethernet through the last
    /// extension header, nothing more), `payload` the payload, and `tail`
    /// the pad bytes and the ICRC. The same rules as [`Frame::parse`], and
    /// the IP packet must end with `tail` (a frame in parts carries no
    /// trailer). [`Frame::payload`] is then `payload` itself, and
    /// [`Frame::bytes`] the headers only.
    pub fn parse_parts(head: &'a [u8], payload: &'a [u8], tail: &'a [u8]) -> Result<Frame<'a>> {
        let total = head.len() + payload.len() + tail.len();
        let (l3, udp, end) = locate(head, total)?;
        if end != total {
            return Err(Error::BadLength);
        }
        if be16(head, udp + 4) as usize != end - udp {
            return Err(Error::BadLength);
        }
        let bth_offset = udp + udp::HEADER_LEN;
        let Some(bth) = head
            .get(bth_offset..)
            .and_then(|b| b.first_chunk::<{ bth::HEADER_LEN }>())
        else {
            return Err(Error::Truncated);
        };
        let tver = bth[1] & 0x0F;
        if tver != 0 {
            return Err(Error::BadTver(tver));
        }
        let info = opcode_info(Opcode(bth[0]))?;
        if bth_offset + bth::HEADER_LEN + info.headers_len as usize != head.len() {
            return Err(Error::BadLength);
        }
        let pad = (bth[1] >> 4) & 3;
        if tail.len() != pad as usize + ICRC_LEN {
            return Err(Error::BadLength);
        }
        if (payload.len() + pad as usize) & 3 != 0 {
            return Err(Error::BadPad);
        }
        if !info.payload && !payload.is_empty() {
            return Err(Error::BadLength);
        }
        let (pads, icrc) = tail.split_at(pad as usize);
        Ok(Frame {
            bytes: head,
            ip_offset: l3,
            bth_offset,
            info,
            payload,
            pad,
            icrc: u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]),
            parts_pad: Some(pads),
        })
    }

    /// The frame's bytes from its Ethernet header through its ICRC; of a
    /// frame in parts ([`Frame::parse_parts`]), its headers.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The BTH as a view.
    #[inline]
    pub fn bth_view(&self) -> Bth<&'a [u8]> {
        Bth::new_unchecked(&self.bytes[self.bth_offset..])
    }

    #[inline]
    /// The BTH opcode.
    pub fn opcode(&self) -> Opcode {
        self.info.opcode
    }

    #[inline]
    /// The BTH destination QP, 24 bits.
    pub fn dest_qp(&self) -> u32 {
        self.bth_view().dest_qp()
    }

    #[inline]
    /// The BTH packet sequence number.
    pub fn psn(&self) -> super::Psn {
        self.bth_view().psn()
    }

    #[inline]
    /// The BTH AckReq bit.
    pub fn ack_req(&self) -> bool {
        self.bth_view().ack_req()
    }

    /// The IP header's ECN bits (CE asks for a CNP, A17 §17.9.3).
    #[inline]
    pub fn ecn(&self) -> Ecn {
        let b = &self.bytes[self.ip_offset..];
        match b[0] >> 4 {
            4 => Ecn::from_bits(b[1]),
            _ => Ecn::from_bits(b[1] >> 4),
        }
    }

    /// The IP source address, read alone (no whole-header repr).
    #[inline]
    pub fn src(&self) -> IpAddr {
        let b = &self.bytes[self.ip_offset..];
        match b[0] >> 4 {
            4 => IpAddr::from(<[u8; 4]>::try_from(&b[12..16]).expect("4 bytes")),
            _ => IpAddr::from(<[u8; 16]>::try_from(&b[8..24]).expect("16 bytes")),
        }
    }

    /// The IP destination address, read alone.
    #[inline]
    pub fn dst(&self) -> IpAddr {
        let b = &self.bytes[self.ip_offset..];
        match b[0] >> 4 {
            4 => IpAddr::from(<[u8; 4]>::try_from(&b[16..20]).expect("4 bytes")),
            _ => IpAddr::from(<[u8; 16]>::try_from(&b[24..40]).expect("16 bytes")),
        }
    }

    /// The IP header's TTL (IPv4) or hop limit (IPv6): one byte read.
    #[inline]
    pub fn ttl(&self) -> u8 {
        let b = &self.bytes[self.ip_offset..];
        match b[0] >> 4 {
            4 => b[8],
            _ => b[7],
        }
    }

    /// The frame's 802.1Q tag, if it has one.
    #[inline]
    pub fn vlan(&self) -> Option<VlanTag> {
        (self.ip_offset == ethernet::HEADER_LEN_VLAN)
            .then(|| VlanTag::from_tci(u16::from_be_bytes([self.bytes[14], self.bytes[15]])))
    }

    /// The Ethernet header as plain values.
    pub fn eth(&self) -> EthernetRepr {
        // Cannot fail: parse checked the header, tag included.
        EthernetFrame::new_checked(self.bytes)
            .map(|e| EthernetRepr::parse(&e))
            .unwrap_or(EthernetRepr {
                dst: MacAddr::default(),
                src: MacAddr::default(),
                vlan: None,
                ethertype: 0,
            })
    }

    /// The IP header as plain values.
    pub fn ip(&self) -> IpRepr {
        let b = &self.bytes[self.ip_offset..];
        if b[0] >> 4 == 4 {
            IpRepr::V4(Ipv4Repr::read(&Ipv4Packet::new_unchecked(b)))
        } else {
            IpRepr::V6(Ipv6Repr::read(&Ipv6Packet::new_unchecked(b)))
        }
    }

    /// The 40 bytes a UD receive buffer starts with (libibverbs' GRH
    /// area, `IBV_WC_GRH`): on RoCE v2 the frame's IPv6 header as
    /// received, or 20 zero bytes and its 20-byte IPv4 header (on RoCE v2
    /// the IP header stands in for the GRH; the layout is the Linux
    /// kernel's `rdma_network_hdr`, which rxe copies and
    /// `ibv_get_ah_from_wc` reads).
    pub fn grh(&self) -> [u8; 40] {
        let mut g = [0u8; 40];
        let b = &self.bytes[self.ip_offset..];
        if b[0] >> 4 == 4 {
            g[20..].copy_from_slice(&b[..20]);
        } else {
            g.copy_from_slice(&b[..40]);
        }
        g
    }

    /// The UDP header as plain values.
    pub fn udp(&self) -> UdpRepr {
        UdpRepr::parse(&UdpPacket::new_unchecked(
            &self.bytes[self.bth_offset - udp::HEADER_LEN..],
        ))
    }

    /// The BTH as plain values.
    pub fn bth(&self) -> BthRepr {
        BthRepr::read(&self.bth_view())
    }

    /// The extension headers the opcode carries.
    pub fn ext(&self) -> ExtHeaders {
        let at = self.bth_offset + bth::HEADER_LEN;
        ExtHeaders::parse(self.info.headers, &self.bytes[at..])
    }

    /// The `n` bytes of extension header `h` (a single header of
    /// [`HeaderSet`]) if the opcode carries it, found at its place after
    /// the BTH without reading the others (parse checked their length).
    #[inline]
    fn ext_bytes(&self, h: HeaderSet, n: usize) -> Option<&'a [u8]> {
        let set = self.info.headers;
        if !set.contains(h) {
            return None;
        }
        let at = self.bth_offset + bth::HEADER_LEN + set.before(h).len();
        self.bytes.get(at..at + n)
    }

    /// The AETH, if the opcode carries one: [`Frame::ext`]'s `aeth`.
    #[inline]
    pub fn aeth(&self) -> Option<AethRepr> {
        self.ext_bytes(HeaderSet::AETH, 4)
            .map(|s| AethRepr::parse(&Aeth::new_unchecked(s)))
    }

    /// The RETH, if the opcode carries one: [`Frame::ext`]'s `reth`.
    #[inline]
    pub fn reth(&self) -> Option<RethRepr> {
        self.ext_bytes(HeaderSet::RETH, 16)
            .map(|s| RethRepr::parse(&Reth::new_unchecked(s)))
    }

    /// The immediate data, if the opcode carries it: [`Frame::ext`]'s
    /// `imm`.
    #[inline]
    pub fn imm(&self) -> Option<u32> {
        self.ext_bytes(HeaderSet::IMMDT, 4)
            .map(|s| ImmDt::new_unchecked(s).imm())
    }

    /// The R_Key to invalidate, if the opcode carries an IETH:
    /// [`Frame::ext`]'s `ieth`.
    #[inline]
    pub fn ieth(&self) -> Option<u32> {
        self.ext_bytes(HeaderSet::IETH, 4)
            .map(|s| Ieth::new_unchecked(s).rkey())
    }

    /// Every header as plain values.
    pub fn repr(&self) -> FrameRepr {
        FrameRepr {
            eth: self.eth(),
            ip: self.ip(),
            udp: self.udp(),
            bth: self.bth(),
            ext: self.ext(),
        }
    }

    /// Whether the carried ICRC is the one the bytes give (A17 §17.3.3).
    #[inline]
    pub fn icrc_ok(&self) -> bool {
        self.icrc_expected() == self.icrc
    }

    /// The ICRC the bytes should carry.
    #[inline]
    pub fn icrc_expected(&self) -> u32 {
        // Cannot fail: parse checked the IP header and the BTH.
        let sum = match self.parts_pad {
            None => {
                let n = self.bytes.len() - ICRC_LEN;
                icrc::compute(&self.bytes[self.ip_offset..n])
            }
            Some(pads) => icrc::compute_parts(&self.bytes[self.ip_offset..], &[self.payload, pads]),
        };
        sum.unwrap_or(!self.icrc)
    }

    /// The frame's length up to and including the ICRC.
    pub fn len(&self) -> usize {
        match self.parts_pad {
            None => self.bytes.len(),
            Some(pads) => self.bytes.len() + self.payload.len() + pads.len() + ICRC_LEN,
        }
    }

    /// Always false: a parsed frame holds at least its headers.
    pub fn is_empty(&self) -> bool {
        false
    }
}

fn opcode_info(op: Opcode) -> Result<&'static OpcodeInfo> {
    op.info().ok_or(Error::UnknownOpcode(op.0))
}

impl FrameRepr {
    /// A RoCE v2 frame as A17 wants it (reference B.1): UDP destination
    /// port 4791 with checksum 0, the QP's constant source port (see
    /// [`super::udp::kernel_source_port`]), no VLAN, extension headers empty
    /// (fill `ext` to match the opcode). `ip` from [`IpRepr::v4`] or
    /// [`IpRepr::v6`].
    pub fn roce(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        ip: IpRepr,
        src_port: u16,
        bth: BthRepr,
    ) -> FrameRepr {
        FrameRepr {
            eth: EthernetRepr {
                dst: dst_mac,
                src: src_mac,
                vlan: None,
                ethertype: ip.ethertype(),
            },
            ip,
            udp: UdpRepr::roce(src_port),
            bth,
            ext: ExtHeaders::default(),
        }
    }

    /// The CNP that answers `marked`, a received packet with ECN CE, as a
    /// ConnectX NIC sends it (A17 §17.9.3; reference B.8): addresses
    /// reversed, opcode 0x81, BECN set, P_Key copied, `dest_qp` = the QP
    /// that sent the marked packet, PSN 0, 16 zero bytes; sent with
    /// `dscp` (ConnectX cnp_dscp: 48) and not ECN-capable.
    pub fn cnp(marked: &FrameRepr, dest_qp: u32, dscp: u8) -> FrameRepr {
        let mut ip = marked.ip.reversed();
        ip.set_dscp(dscp);
        ip.set_ecn(Ecn::NotEct);
        let mut bth = BthRepr::new(Opcode::CNP, dest_qp, super::Psn::new(0));
        bth.pkey = marked.bth.pkey;
        bth.becn = true;
        FrameRepr {
            eth: EthernetRepr {
                dst: marked.eth.src,
                src: marked.eth.dst,
                ..marked.eth
            },
            ip,
            udp: UdpRepr::roce(marked.udp.src_port),
            bth,
            ext: ExtHeaders::default(),
        }
    }

    /// Length of every header before the payload.
    pub fn header_len(&self) -> usize {
        let ext = self.bth.opcode.info().map_or(0, |i| i.headers_len as usize);
        self.eth.header_len() + self.ip.header_len() + udp::HEADER_LEN + bth::HEADER_LEN + ext
    }

    /// Length of the whole frame for a payload of `payload_len` bytes.
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + pad_count(payload_len) as usize + ICRC_LEN
    }

    /// Writes every header for a payload of `payload_len` bytes, and the
    /// zero pad bytes, into `buf`; returns where the payload goes. Write the
    /// payload there, then [`seal`] the frame (`buf[..frame_len]`).
    pub fn emit_headers(&self, payload_len: usize, buf: &mut [u8]) -> Result<Range<usize>> {
        let info = opcode_info(self.bth.opcode)?;
        let cnp = info.headers.contains(HeaderSet::CNP);
        let want = if cnp { HeaderSet::NONE } else { info.headers };
        if self.ext.set() != want || (!info.payload && payload_len != 0) {
            return Err(Error::HeadersMismatch);
        }
        let total = self.frame_len(payload_len);
        if buf.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let pad = pad_count(payload_len);
        let eth = EthernetRepr {
            ethertype: self.ip.ethertype(),
            ..self.eth
        };
        let mut off = eth.emit(buf)?;
        let ip_len = self.ip.header_len();
        let udp_len = total - off - ip_len;
        off += self.ip.emit(&mut buf[off..], udp_len)?;
        off += self.udp.emit(&mut buf[off..], udp_len - udp::HEADER_LEN)?;
        off += self.bth.emit(&mut buf[off..], pad)?;
        let hl = info.headers_len as usize;
        self.ext.emit(cnp, &mut buf[off..off + hl])?;
        off += hl;
        let payload = off..off + payload_len;
        if pad != 0 {
            buf[payload.end..payload.end + pad as usize].fill(0);
        }
        Ok(payload)
    }

    /// Writes the whole frame with `payload` into `buf`; returns its length.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let at = self.emit_headers(payload.len(), buf)?;
        buf[at.clone()].copy_from_slice(payload);
        let len = self.frame_len(payload.len());
        seal(&mut buf[..len], self.eth.header_len())?;
        Ok(len)
    }
}

/// Computes and writes the ICRC of a built frame whose IP header starts at
/// `ip_offset` and whose last 4 bytes are the ICRC.
pub fn seal(frame: &mut [u8], ip_offset: usize) -> Result<u32> {
    let ip = frame.get_mut(ip_offset..).ok_or(Error::Truncated)?;
    icrc::seal(ip).map_err(|_| Error::Truncated)
}

/// The ICRC field of a frame whose sender left the ICRC to its NIC
/// ([`seal_offloaded`]): nobody computed it. A receiver that offloads the
/// check too takes such a frame unchecked; one that does not finds it
/// wrong (unless the real ICRC happens to be 0 as well).
pub const OFFLOADED_ICRC: u32 = 0;

/// Seals a built frame as a sender that offloads the ICRC to its NIC
/// does: the last 4 bytes get [`OFFLOADED_ICRC`], nothing is computed.
pub fn seal_offloaded(frame: &mut [u8]) -> Result<()> {
    let n = frame.len().checked_sub(ICRC_LEN).ok_or(Error::Truncated)?;
    frame[n..].copy_from_slice(&OFFLOADED_ICRC.to_le_bytes());
    Ok(())
}

/// Gives a RoCE v2 frame whose ICRC field holds [`OFFLOADED_ICRC`] its
/// real ICRC, as the sender's NIC would have put it on the wire (for a
/// capture, or before a simulated fault changes its bytes). Returns
/// whether it wrote one: frames that are not RoCE v2, malformed or carry
/// another ICRC are left as they are. Bytes after the IP packet (an INT
/// trailer) are not covered, as on the wire.
pub fn complete_offloaded_icrc(frame: &mut [u8]) -> bool {
    let (ip_offset, end) = match Frame::parse(frame) {
        Ok(f) if f.icrc == OFFLOADED_ICRC => (f.ip_offset, f.len()),
        _ => return false,
    };
    seal(&mut frame[..end], ip_offset).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ext::{AckSyndrome, NakCode};
    use crate::wire::opcode::Op;
    use crate::wire::Psn;

    fn base(op: Opcode) -> FrameRepr {
        let mut b = BthRepr::new(op, 0x12, Psn::new(0xABCDEF));
        b.ack_req = true;
        FrameRepr::roce(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            IpRepr::v4(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                26,
                Ecn::Ect0,
            ),
            0xC001,
            b,
        )
    }

    #[test]
    fn a_frame_in_parts_parses_as_the_whole_and_bad_cuts_are_refused() {
        for (op, reth) in [
            (Op::SendOnly, false),
            (Op::RdmaWriteOnly, true),
            (Op::SendMiddle, false),
        ] {
            for (len, v6) in [1usize, 2, 3, 4, 61, 1024]
                .into_iter()
                .flat_map(|l| [(l, false), (l, true)])
            {
                let mut r = base(Opcode::rc(op));
                if v6 {
                    r.ip = IpRepr::v6(
                        "fd00::1".parse().unwrap(),
                        "fd00::2".parse().unwrap(),
                        26,
                        Ecn::Ect0,
                        0x12345,
                    );
                }
                if reth {
                    r.ext.reth = Some(RethRepr {
                        va: 0x1000,
                        rkey: 0x77,
                        dma_len: len as u32,
                    });
                }
                let payload: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5A).collect();
                let mut buf = vec![0u8; 2048];
                let n = r.emit(&payload, &mut buf).unwrap();
                let whole = Frame::parse(&buf[..n]).unwrap();
                assert!(whole.icrc_ok());
                let h = r.header_len();
                let (head, rest) = buf[..n].split_at(h);
                let (pl, tail) = rest.split_at(len);
                let parts = Frame::parse_parts(head, pl, tail).unwrap();
                assert!(parts.icrc_ok(), "{op:?} {len} v6 {v6}");
                assert_eq!(parts.payload, whole.payload);
                assert_eq!(parts.len(), whole.len());
                assert_eq!(
                    (parts.psn(), parts.pad, parts.icrc),
                    (whole.psn(), whole.pad, whole.icrc)
                );
                assert_eq!(parts.repr(), whole.repr());
                // A flipped payload bit fails the ICRC, as in one piece.
                let mut bad = pl.to_vec();
                bad[0] ^= 1;
                assert!(!Frame::parse_parts(head, &bad, tail).unwrap().icrc_ok());
                // Cuts elsewhere than at the payload are refused.
                assert!(Frame::parse_parts(&head[..h - 1], &rest[..len + 1], tail).is_err());
                assert!(Frame::parse_parts(head, &pl[..len - 1], tail).is_err());
                assert!(Frame::parse_parts(head, pl, &tail[1..]).is_err());
                assert!(Frame::parse_parts(&head[..20], &[], &[]).is_err());
            }
        }
    }

    #[test]
    fn emit_then_parse_gives_the_same_frame() {
        let mut r = base(Opcode::rc(Op::RdmaWriteOnlyWithImmediate));
        r.ext.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x77,
            dma_len: 5,
        });
        r.ext.imm = Some(0xCAFEBABE);
        let mut buf = [0u8; 256];
        let n = r.emit(b"hello", &mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 8 + 12 + 16 + 4 + 8 + 4);
        let f = Frame::parse(&buf[..n]).unwrap();
        assert_eq!(f.repr(), r);
        assert_eq!(f.payload, b"hello");
        assert_eq!(f.pad, 3);
        assert!(f.icrc_ok());
        assert_eq!(f.len(), n);
    }

    /// A frame sealed as an offloading NIC's driver leaves it carries a
    /// zero ICRC that fails the check; completing it writes the ICRC a full
    /// seal gives, and leaves a frame that already has one alone.
    #[test]
    fn an_offloaded_frame_gets_the_icrc_a_full_seal_writes() {
        let mut r = base(Opcode::rc(Op::RdmaWriteOnly));
        r.ext.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x77,
            dma_len: 5,
        });
        let mut full = [0u8; 256];
        let n = r.emit(b"hello", &mut full).unwrap();
        let mut off = [0xAAu8; 256];
        let at = r.emit_headers(5, &mut off).unwrap();
        off[at].copy_from_slice(b"hello");
        seal_offloaded(&mut off[..n]).unwrap();
        let f = Frame::parse(&off[..n]).unwrap();
        assert_eq!(f.icrc, OFFLOADED_ICRC);
        assert!(!f.icrc_ok());
        assert_eq!(&off[..n - ICRC_LEN], &full[..n - ICRC_LEN]);
        assert!(complete_offloaded_icrc(&mut off[..n]));
        assert_eq!(&off[..n], &full[..n]);
        assert!(!complete_offloaded_icrc(&mut off[..n]), "already sealed");
        assert!(!complete_offloaded_icrc(&mut [0u8; 10]), "not RoCE");
    }

    /// RoCE v2 over IPv6 with an 802.1Q tag (A17 §17.3.1.2, reference
    /// B.1 / B.7): the tag and the IPv6 fields round-trip, and the ICRC
    /// covers none of the fields a network may rewrite (traffic class,
    /// flow label, hop limit) but does cover the payload length.
    #[test]
    fn a_tagged_ipv6_frame_round_trips_with_its_variant_fields_masked() {
        let mut r = base(Opcode::rc(Op::SendOnly));
        r.ip = IpRepr::v6(
            "fd18::1".parse().unwrap(),
            "fd18::2".parse().unwrap(),
            26,
            Ecn::Ect0,
            0xABCDE,
        );
        let tag = VlanTag {
            pcp: 3,
            dei: false,
            vid: 0xFFE,
        };
        r.eth.vlan = Some(tag);
        r.eth.ethertype = ethernet::ETHERTYPE_IPV6;
        let mut buf = [0u8; 256];
        let n = r.emit(b"hello", &mut buf).unwrap();
        assert_eq!(n, 18 + 40 + 8 + 12 + 8 + 4);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x6F, 0xFE, 0x86, 0xDD]);
        let f = Frame::parse(&buf[..n]).unwrap();
        assert_eq!(f.vlan(), Some(tag));
        assert_eq!(f.eth().vlan, Some(tag));
        assert_eq!(f.repr(), r);
        assert!(f.icrc_ok());
        // IPv6 payload length: UDP header through the ICRC.
        assert_eq!(u16::from_be_bytes([buf[22], buf[23]]) as usize, n - 18 - 40);
        // Traffic class (DSCP and ECN), flow label and hop limit rewritten:
        // the ICRC still holds.
        let mut g = buf[..n].to_vec();
        g[18] = 0x6F;
        g[19] = 0xFF;
        g[20] = 0x12;
        g[21] = 0x34;
        g[25] = 1;
        let f = Frame::parse(&g).unwrap();
        assert!(f.icrc_ok());
        assert_eq!(f.ecn(), Ecn::Ce);
        // Addresses are covered.
        let mut g = buf[..n].to_vec();
        g[18 + 23] ^= 1;
        assert!(!Frame::parse(&g).unwrap().icrc_ok());
        // An untagged frame has no tag.
        let mut u = r;
        u.eth.vlan = None;
        let m = u.emit(b"hello", &mut buf).unwrap();
        assert_eq!(Frame::parse(&buf[..m]).unwrap().vlan(), None);
    }

    /// The steering peek reads the QP through a VLAN tag and over IPv6,
    /// and names none for IPv4 with options, a fragment or another port.
    #[test]
    fn peek_dest_qp_reads_tagged_ipv6_and_refuses_what_is_not_plain_roce() {
        let mut r = base(Opcode::rc(Op::SendOnly));
        r.bth.dest_qp = 0x00AB_CDEF;
        let mut buf = [0u8; 256];
        let n = r.emit(b"hello", &mut buf).unwrap();
        assert_eq!(peek_dest_qp(&buf[..n]), Some(0x00AB_CDEF));
        let mut g = buf[..n].to_vec();
        g[14] = 0x46; // IHL 6: options, which RoCE v2 frames never carry
        assert_eq!(peek_dest_qp(&g), None);
        let mut g = buf[..n].to_vec();
        g[14 + 7] = 1; // a later fragment
        assert_eq!(peek_dest_qp(&g), None);
        let mut g = buf[..n].to_vec();
        g[14 + 20 + 3] ^= 1; // UDP port 4790
        assert_eq!(peek_dest_qp(&g), None);
        r.ip = IpRepr::v6(
            "fd18::1".parse().unwrap(),
            "fd18::2".parse().unwrap(),
            0,
            Ecn::NotEct,
            7,
        );
        r.eth.vlan = Some(VlanTag {
            pcp: 0,
            dei: false,
            vid: 5,
        });
        r.eth.ethertype = ethernet::ETHERTYPE_IPV6;
        let n = r.emit(b"hello", &mut buf).unwrap();
        assert_eq!(peek_dest_qp(&buf[..n]), Some(0x00AB_CDEF));
        assert_eq!(peek_dest_qp(&buf[..18 + 40 + 8 + 11]), None);
        assert_eq!(peek_dest_qp(&buf[..18 + 40 + 8 + 12]), Some(0x00AB_CDEF));
    }

    #[test]
    fn headers_must_match_the_opcode() {
        let mut r = base(Opcode::rc(Op::Acknowledge));
        let mut buf = [0u8; 128];
        assert_eq!(r.emit(&[], &mut buf), Err(Error::HeadersMismatch));
        r.ext.aeth = Some(AethRepr {
            syndrome: AckSyndrome::Nak(NakCode::PsnSequenceError),
            msn: 3,
        });
        assert_eq!(r.emit(b"x", &mut buf), Err(Error::HeadersMismatch));
        let n = r.emit(&[], &mut buf).unwrap();
        assert_eq!(n, 62);
        assert_eq!(r.emit(&[], &mut buf[..61]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn a_cnp_is_the_connectx_cnp() {
        let mut marked = base(Opcode::rc(Op::SendOnly));
        marked.ip.set_ecn(Ecn::Ce);
        marked.bth.pkey = 0x8001;
        let c = FrameRepr::cnp(&marked, 0xd2, 48);
        let mut buf = [0u8; 128];
        let n = c.emit(&[], &mut buf).unwrap();
        let bth = &buf[42..54];
        assert_eq!(bth, [0x81, 0, 0x80, 0x01, 0x40, 0, 0, 0xd2, 0, 0, 0, 0]);
        assert_eq!(&buf[54..70], &[0u8; 16]);
        assert_eq!(n, 74);
        let f = Frame::parse(&buf[..n]).unwrap();
        assert!(f.icrc_ok());
        assert_eq!(f.repr().ip.dscp(), 48);
        assert_eq!(f.repr().ip.dst(), marked.ip.src());
        assert_eq!(f.repr().eth.dst, marked.eth.src);
    }

    #[test]
    fn malformed_frames_get_their_own_errors() {
        let mut r = base(Opcode::rc(Op::SendOnly));
        let mut buf = [0u8; 128];
        let n = r.emit(b"abcd", &mut buf).unwrap();
        let f = &buf[..n];
        for cut in 0..n {
            assert!(Frame::parse(&f[..cut]).is_err(), "cut at {cut}");
        }
        let mut e = [0u8; 128];
        let m = r.emit(&[], &mut e).unwrap();
        e[43] |= 0x10; // pad 1 with no payload
        assert_eq!(Frame::parse(&e[..m]), Err(Error::BadPad));
        let mut g = f.to_vec();
        g[42] = 0x15;
        assert_eq!(Frame::parse(&g), Err(Error::UnknownOpcode(0x15)));
        let mut g = f.to_vec();
        g[37] = 0xB8; // UDP port 4792
        assert_eq!(Frame::parse(&g), Err(Error::NotRoce));
        let mut g = f.to_vec();
        g[n - 1] ^= 1;
        assert!(!Frame::parse(&g).unwrap().icrc_ok());
        // Ethernet padding after the IP packet is ignored.
        let mut g = f.to_vec();
        g.extend_from_slice(&[0; 6]);
        assert_eq!(Frame::parse(&g).unwrap().len(), n);
        r.ext.deth = Some(DethRepr::default());
        assert_eq!(r.emit(&[], &mut buf), Err(Error::HeadersMismatch));
    }

    #[test]
    fn an_xrc_request_carries_an_xrceth_before_its_reth() {
        let mut r = base(Opcode::xrc(Op::RdmaWriteFirst));
        let reth = RethRepr {
            va: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            dma_len: 0x2000,
        };
        r.ext.reth = Some(reth);
        let mut buf = [0u8; 512];
        // The XRCETH is required, and only 24 bits fit.
        assert_eq!(r.emit(&[0; 256], &mut buf), Err(Error::HeadersMismatch));
        r.ext.xrceth = Some(0x100_0000);
        assert_eq!(r.emit(&[0; 256], &mut buf), Err(Error::FieldRange));
        r.ext.xrceth = Some(0xABCDEF);
        let payload: Vec<u8> = (0..=255).collect();
        let n = r.emit(&payload, &mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 8 + 12 + 4 + 16 + 256 + 4);
        let bth = 14 + 20 + 8;
        assert_eq!(buf[bth], 0xA6);
        // XRCETH at BTH+12: reserved byte 0, then the SRQ number.
        assert_eq!(&buf[bth + 12..bth + 16], &[0x00, 0xAB, 0xCD, 0xEF]);
        // RETH at BTH+16: VA, R_Key, DMA length.
        assert_eq!(
            &buf[bth + 16..bth + 32],
            &[1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0x20, 0]
        );
        assert_eq!(&buf[bth + 32..bth + 32 + 256], &payload[..]);
        let f = Frame::parse(&buf[..n]).unwrap();
        assert!(f.icrc_ok());
        assert_eq!(f.repr(), r);
        assert_eq!(f.ext().xrceth, Some(0xABCDEF));
        assert_eq!(f.ext().reth, Some(reth));
        assert_eq!(f.payload, &payload[..]);
        // The reserved byte is ignored on parse and written as zero.
        let mut g = buf[..n].to_vec();
        g[bth + 12] = 0xFF;
        seal(&mut g, 14).unwrap();
        let f = Frame::parse(&g).unwrap();
        assert_eq!(f.ext().xrceth, Some(0xABCDEF));
        let mut again = [0u8; 512];
        assert_eq!(f.repr().emit(f.payload, &mut again), Ok(n));
        assert_eq!(&again[..n], &buf[..n]);

        // An XRC ACKNOWLEDGE has an AETH and no XRCETH.
        let mut a = base(Opcode::xrc(Op::Acknowledge));
        a.ext.aeth = Some(AethRepr {
            syndrome: AckSyndrome::Ack { credit: 0x1F },
            msn: 9,
        });
        a.ext.xrceth = Some(1);
        assert_eq!(a.emit(&[], &mut buf), Err(Error::HeadersMismatch));
        a.ext.xrceth = None;
        let n = a.emit(&[], &mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 8 + 12 + 4 + 4);
        assert_eq!(&buf[bth + 12..bth + 16], &[0x1F, 0, 0, 9], "AETH at BTH+12");
        let f = Frame::parse(&buf[..n]).unwrap();
        assert!(f.icrc_ok());
        assert_eq!(f.repr(), a);
        assert_eq!(f.ext().xrceth, None);
    }
}
