//! Property tests of the wire module:
//! - every `Repr` (each header alone, and whole frames over IPv4 / IPv6,
//!   with and without a VLAN tag, for every opcode of the table) survives
//!   emit -> parse unchanged, with the same payload and a good ICRC;
//! - `Frame::parse` never panics, neither on arbitrary bytes nor on
//!   mutated valid frames (sample frames and every RoCE frame of
//!   tests/vectors), and whatever it accepts can be used and re-emitted;
//! - re-emitting a parsed frame gives its canonical form (the input with
//!   the bits a `Repr` does not carry cleared, IPv4 checksum and ICRC
//!   recomputed), so a frame with a good ICRC and no such bits set
//!   re-emits byte for byte.
//!
//! Also `write_fuzz_seeds` (ignored): writes the seed corpus of the
//! cargo-fuzz target in fuzz/ (see fuzz/README.md).

mod common;

use common::frames;
use ferroce::wire::ext::{AtomicAckEth, FethRepr, Ieth, ImmDt, Xrceth};
use ferroce::wire::frame::{seal, ICRC_LEN};
use ferroce::wire::opcode::{HeaderSet, Op, OpcodeInfo};
use ferroce::wire::template::{BthVaries, HeaderTemplate};
use ferroce::wire::{
    pad_count, AckSyndrome, Aeth, AethRepr, AtomicEth, AtomicEthRepr, Bth, BthRepr, Deth, DethRepr,
    Ecn, Error, EthernetFrame, EthernetRepr, ExtHeaders, Feth, Frame, FrameRepr, IpRepr,
    Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, MacAddr, Opcode, Psn, Reth, RethRepr, UdpPacket,
    UdpRepr, VlanTag, ROCE_UDP_PORT,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::LazyLock;

const ETHERTYPE_VLAN: u16 = 0x8100;
/// Enough for any frame: the IP length fields are 16 bits.
const BIG: usize = 18 + 40 + 65_536;

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Keep failures in the report only: no proptest-regressions/ files.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------
// Strategies

fn mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

fn vlan() -> impl Strategy<Value = Option<VlanTag>> {
    prop::option::of(
        (0u8..8, any::<bool>(), 0u16..0x1000).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    )
}

/// Any Ethernet header; without a tag the EtherType cannot be 0x8100 (it
/// would be read as a tag).
fn ethernet() -> impl Strategy<Value = EthernetRepr> {
    (mac(), mac(), vlan(), any::<u16>())
        .prop_filter("0x8100 without a tag is a tag", |(_, _, v, t)| {
            v.is_some() || *t != ETHERTYPE_VLAN
        })
        .prop_map(|(dst, src, vlan, ethertype)| EthernetRepr {
            dst,
            src,
            vlan,
            ethertype,
        })
}

fn ecn() -> impl Strategy<Value = Ecn> {
    (0u8..4).prop_map(Ecn::from_bits)
}

fn ipv4(protocol: impl Strategy<Value = u8>) -> impl Strategy<Value = Ipv4Repr> {
    (
        any::<u32>(),
        any::<u32>(),
        0u8..64,
        ecn(),
        any::<u16>(),
        any::<bool>(),
        any::<u8>(),
        protocol,
    )
        .prop_map(
            |(src, dst, dscp, ecn, ident, dont_frag, ttl, protocol)| Ipv4Repr {
                src: Ipv4Addr::from(src),
                dst: Ipv4Addr::from(dst),
                dscp,
                ecn,
                ident,
                dont_frag,
                ttl,
                protocol,
            },
        )
}

fn ipv6(next_header: impl Strategy<Value = u8>) -> impl Strategy<Value = Ipv6Repr> {
    (
        any::<u128>(),
        any::<u128>(),
        0u8..64,
        ecn(),
        0u32..0x10_0000,
        any::<u8>(),
        next_header,
    )
        .prop_map(
            |(src, dst, dscp, ecn, flow_label, hop_limit, next_header)| Ipv6Repr {
                src: Ipv6Addr::from(src),
                dst: Ipv6Addr::from(dst),
                dscp,
                ecn,
                flow_label,
                hop_limit,
                next_header,
            },
        )
}

fn udp() -> impl Strategy<Value = UdpRepr> {
    any::<(u16, u16, u16)>().prop_map(|(src_port, dst_port, checksum)| UdpRepr {
        src_port,
        dst_port,
        checksum,
    })
}

fn table() -> Vec<&'static OpcodeInfo> {
    Opcode::all().collect()
}

fn bth(opcode: Opcode) -> impl Strategy<Value = BthRepr> {
    (
        any::<[bool; 5]>(),
        any::<u16>(),
        0u32..0x100_0000,
        any::<u32>(),
    )
        .prop_map(move |(f, pkey, dest_qp, psn)| BthRepr {
            opcode,
            solicited: f[0],
            mig_req: f[1],
            pkey,
            fecn: f[2],
            becn: f[3],
            dest_qp,
            ack_req: f[4],
            psn: Psn::new(psn),
        })
}

fn any_bth() -> impl Strategy<Value = BthRepr> {
    prop::sample::select(table()).prop_flat_map(|i| bth(i.opcode))
}

fn reth() -> impl Strategy<Value = RethRepr> {
    any::<(u64, u32, u32)>().prop_map(|(va, rkey, dma_len)| RethRepr { va, rkey, dma_len })
}

/// Any syndrome byte, so every variant of `AckSyndrome` (reserved ones too).
fn aeth() -> impl Strategy<Value = AethRepr> {
    (any::<u8>(), 0u32..0x100_0000).prop_map(|(b, msn)| AethRepr {
        syndrome: AckSyndrome::from_byte(b),
        msn,
    })
}

fn atomic() -> impl Strategy<Value = AtomicEthRepr> {
    any::<(u64, u32, u64, u64)>().prop_map(|(va, rkey, swap_add, compare)| AtomicEthRepr {
        va,
        rkey,
        swap_add,
        compare,
    })
}

fn deth() -> impl Strategy<Value = DethRepr> {
    (any::<u32>(), 0u32..0x100_0000).prop_map(|(qkey, src_qp)| DethRepr { qkey, src_qp })
}

fn feth() -> impl Strategy<Value = FethRepr> {
    (0u8..4, 0u8..16).prop_map(|(selectivity, placement)| FethRepr {
        selectivity,
        placement,
    })
}

/// The extension headers of `set` (as `frames::ext_for` picks them), with
/// random values.
fn ext(set: HeaderSet) -> impl Strategy<Value = ExtHeaders> {
    (
        deth(),
        feth(),
        reth(),
        atomic(),
        aeth(),
        any::<(u64, u32, u32)>(),
        0u32..0x100_0000,
    )
        .prop_map(move |(d, f, r, a, ae, (aa, imm, ieth), x)| {
            let on = |h| set.contains(h);
            ExtHeaders {
                deth: on(HeaderSet::DETH).then_some(d),
                xrceth: on(HeaderSet::XRCETH).then_some(x),
                feth: on(HeaderSet::FETH).then_some(f),
                reth: on(HeaderSet::RETH).then_some(r),
                atomic: on(HeaderSet::ATOMIC_ETH).then_some(a),
                aeth: on(HeaderSet::AETH).then_some(ae),
                atomic_ack: on(HeaderSet::ATOMIC_ACK_ETH).then_some(aa),
                imm: on(HeaderSet::IMMDT).then_some(imm),
                ieth: on(HeaderSet::IETH).then_some(ieth),
            }
        })
}

/// `len` pseudo-random bytes from `seed` (cheaper than proptest's
/// byte-by-byte vectors for 4 KiB payloads).
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A whole RoCE v2 frame: any opcode of the table, its extension headers
/// with random values, IPv4 or IPv6, tagged or not, and a payload of a
/// length the opcode allows (none, or 0 to 4096 bytes).
fn frame() -> impl Strategy<Value = (FrameRepr, Vec<u8>)> {
    prop::sample::select(table()).prop_flat_map(|info| {
        let max: usize = if info.payload { 4096 } else { 0 };
        let ip = prop_oneof![
            ipv4(Just(17)).prop_map(IpRepr::V4),
            ipv6(Just(17)).prop_map(IpRepr::V6),
        ];
        let udp = (any::<u16>(), any::<u16>()).prop_map(|(p, c)| UdpRepr {
            checksum: c,
            ..UdpRepr::roce(p)
        });
        (
            ethernet(),
            ip,
            udp,
            bth(info.opcode),
            ext(info.headers),
            0..=max,
            any::<u64>(),
        )
            .prop_map(|(mut eth, ip, udp, bth, ext, len, seed)| {
                // What parse reads back: emit writes the IP version's.
                eth.ethertype = ip.ethertype();
                let r = FrameRepr {
                    eth,
                    ip,
                    udp,
                    bth,
                    ext,
                };
                (r, bytes(len, seed))
            })
    })
}

// ---------------------------------------------------------------------------
// Single headers: emit, then parse on the view

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn ethernet_round_trips(r in ethernet()) {
        let mut b = [0u8; 18];
        let n = r.emit(&mut b).unwrap();
        prop_assert_eq!(n, r.header_len());
        let v = EthernetFrame::new_checked(&b[..n]).unwrap();
        prop_assert_eq!(v.header_len(), n);
        prop_assert_eq!(EthernetRepr::parse(&v), r);
        prop_assert!(r.emit(&mut b[..n - 1]).is_err());
    }

    #[test]
    fn ipv4_round_trips(r in ipv4(any::<u8>()), len in 0usize..=65_515) {
        let mut b = [0u8; 20];
        prop_assert_eq!(r.emit(&mut b, len), Ok(20));
        let v = Ipv4Packet::new_checked(&b[..]).unwrap();
        prop_assert!(v.checksum_ok());
        prop_assert_eq!(v.total_len() as usize, 20 + len);
        prop_assert_eq!((v.version(), v.ihl(), v.more_frags(), v.frag_offset()), (4, 5, false, 0));
        prop_assert_eq!(v.tos(), r.dscp << 2 | r.ecn.bits());
        prop_assert_eq!(Ipv4Repr::parse(&v), Ok(r));
        prop_assert_eq!(r.emit(&mut b, 65_516 + len), Err(Error::FieldRange));
    }

    #[test]
    fn ipv6_round_trips(r in ipv6(any::<u8>()), len in 0usize..=65_535) {
        let mut b = [0u8; 40];
        prop_assert_eq!(r.emit(&mut b, len), Ok(40));
        let v = Ipv6Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(v.payload_len() as usize, len);
        prop_assert_eq!(v.traffic_class(), r.dscp << 2 | r.ecn.bits());
        prop_assert_eq!(Ipv6Repr::parse(&v), Ok(r));
        prop_assert_eq!(r.emit(&mut b, 65_536 + len), Err(Error::FieldRange));
    }

    #[test]
    fn udp_round_trips(r in udp(), len in 0usize..=65_527) {
        let mut b = [0u8; 8];
        prop_assert_eq!(r.emit(&mut b, len), Ok(8));
        let v = UdpPacket::new_checked(&b[..]).unwrap();
        prop_assert_eq!(v.len() as usize, 8 + len);
        prop_assert_eq!(UdpRepr::parse(&v), r);
        prop_assert_eq!(r.emit(&mut b, 65_528 + len), Err(Error::FieldRange));
    }

    #[test]
    fn bth_round_trips(r in any_bth(), pad in 0u8..4) {
        let mut b = [0u8; 12];
        prop_assert_eq!(r.emit(&mut b, pad), Ok(12));
        let v = Bth::new_checked(&b[..]).unwrap();
        prop_assert_eq!((v.pad(), v.tver()), (pad, 0));
        prop_assert_eq!(BthRepr::parse(&v), Ok(r));
        // The reserved bits are written as zero.
        prop_assert_eq!((b[4] & 0x3F, b[8] & 0x7F), (0, 0));
        prop_assert_eq!(r.emit(&mut b, 4), Err(Error::FieldRange));
    }

    #[test]
    fn extension_headers_round_trip(
        re in reth(),
        ae in aeth(),
        at in atomic(),
        de in deth(),
        fe in feth(),
        (aa, imm, ieth) in any::<(u64, u32, u32)>(),
        srq in any::<u32>(),
    ) {
        let mut b = [0xA5u8; 28];
        re.emit(&mut b[..16]);
        prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&b[..16]).unwrap()), re);

        let mut b = [0xA5u8; 28];
        ae.emit(&mut b[..4]).unwrap();
        let v = Aeth::new_checked(&b[..4]).unwrap();
        prop_assert_eq!(AethRepr::parse(&v), ae);
        prop_assert_eq!(b[0], ae.syndrome.to_byte());
        let big = AethRepr { msn: ae.msn | 0x100_0000, ..ae };
        prop_assert_eq!(big.emit(&mut b[..4]), Err(Error::FieldRange));

        let mut b = [0xA5u8; 28];
        at.emit(&mut b);
        prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()), at);

        let mut b = [0xA5u8; 28];
        de.emit(&mut b[..8]).unwrap();
        prop_assert_eq!(b[4], 0, "DETH reserved byte");
        prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&b[..8]).unwrap()), de);
        let big = DethRepr { src_qp: de.src_qp | 0x100_0000, ..de };
        prop_assert_eq!(big.emit(&mut b[..8]), Err(Error::FieldRange));

        let mut b = [0xA5u8; 28];
        fe.emit(&mut b[..4]).unwrap();
        prop_assert_eq!(&b[..3], &[0, 0, 0], "FETH reserved bytes");
        prop_assert_eq!(FethRepr::parse(&Feth::new_checked(&b[..4]).unwrap()), fe);

        // AtomicAckETH, ImmDt and IETH are plain network-order values.
        let v = aa.to_be_bytes();
        prop_assert_eq!(AtomicAckEth::new_checked(&v[..]).unwrap().orig(), aa);
        let v = imm.to_be_bytes();
        prop_assert_eq!(ImmDt::new_checked(&v[..]).unwrap().imm(), imm);
        let v = ieth.to_be_bytes();
        prop_assert_eq!(Ieth::new_checked(&v[..]).unwrap().rkey(), ieth);
        prop_assert!(Ieth::new_checked(&v[..3]).is_err());

        // XRCETH: a reserved byte, then 24 bits of SRQ number.
        let v = srq.to_be_bytes();
        prop_assert_eq!(Xrceth::new_checked(&v[..]).unwrap().srq(), srq & 0xFF_FFFF);
        prop_assert!(Xrceth::new_checked(&v[..3]).is_err());
    }
}

// ---------------------------------------------------------------------------
// Whole frames

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn frames_round_trip((r, payload) in frame(), cut in any::<Index>()) {
        let n = r.frame_len(payload.len());
        let mut buf = vec![0u8; n + 7];
        prop_assert_eq!(r.emit(&payload, &mut buf), Ok(n));
        prop_assert_eq!(r.emit(&payload, &mut buf[..n - 1]), Err(Error::BufferTooSmall));
        let bytes = &buf[..n];
        let f = Frame::parse(bytes).unwrap();
        prop_assert_eq!(f.repr(), r);
        prop_assert_eq!(f.payload, &payload[..]);
        prop_assert!(f.icrc_ok());
        prop_assert_eq!(f.icrc, f.icrc_expected());
        prop_assert_eq!(f.len(), n);
        prop_assert_eq!(f.pad, pad_count(payload.len()));
        prop_assert_eq!(f.info.opcode, r.bth.opcode);
        prop_assert_eq!(f.ip_offset, r.eth.header_len());
        prop_assert_eq!((f.src(), f.dst()), (r.ip.src(), r.ip.dst()));
        // Each extension header read alone is the one read with the rest.
        let ext = f.ext();
        prop_assert_eq!((f.aeth(), f.reth()), (ext.aeth, ext.reth));
        prop_assert_eq!((f.imm(), f.ieth()), (ext.imm, ext.ieth));
        if let Err(e) = common::oracle::agrees(bytes, &f) {
            return Err(TestCaseError::fail(e));
        }
        // Trailing bytes (Ethernet padding, an FCS) change nothing.
        let g = Frame::parse(&buf).unwrap();
        prop_assert_eq!((g.repr(), g.payload, g.len()), (r, &payload[..], n));
        // Every proper prefix is refused.
        prop_assert!(Frame::parse(&bytes[..cut.index(n)]).is_err());
        // emit_headers + payload + seal builds the same bytes.
        let mut other = vec![0xEEu8; n];
        let at = r.emit_headers(payload.len(), &mut other).unwrap();
        other[at].copy_from_slice(&payload);
        seal(&mut other, r.eth.header_len()).unwrap();
        prop_assert_eq!(&other[..], bytes);
        // So does a header template built from the same headers and
        // patched with this packet's BTH fields and lengths.
        if !r.bth.opcode.info().is_some_and(|i| i.headers.contains(HeaderSet::CNP)) {
            let t = HeaderTemplate::new(&r).unwrap();
            let v = BthVaries {
                opcode: r.bth.opcode,
                psn: r.bth.psn,
                solicited: r.bth.solicited,
                ack_req: r.bth.ack_req,
            };
            let mut other = vec![0xEEu8; n];
            let at = t.emit_headers(&v, &r.ext, payload.len(), &mut other).unwrap();
            other[at].copy_from_slice(&payload);
            seal(&mut other, t.eth_len()).unwrap();
            prop_assert_eq!(&other[..], bytes);
            // An RC Acknowledge (AckReq and SE clear) has its own writer.
            let plain_ack = r.bth.opcode == Opcode::rc(Op::Acknowledge)
                && !r.bth.solicited
                && !r.bth.ack_req;
            if let (true, Some(aeth)) = (plain_ack, r.ext.aeth) {
                let mut ack = vec![0xEEu8; n];
                prop_assert_eq!(t.emit_ack(r.bth.psn, &aeth, &mut ack), Ok(n));
                t.seal(&mut ack).unwrap();
                prop_assert_eq!(&ack[..], bytes);
            }
        }
        // Re-emitting the parsed frame gives the same bytes.
        prop_assert_eq!(reemit(&f)?, bytes);
    }

    #[test]
    fn not_udp_4791_is_not_roce(
        (r, payload) in frame(),
        proto in any::<u8>(),
        port in any::<u16>(),
        which in any::<bool>(),
    ) {
        let mut r = r;
        if which {
            prop_assume!(proto != 17);
            match &mut r.ip {
                IpRepr::V4(ip) => ip.protocol = proto,
                IpRepr::V6(ip) => ip.next_header = proto,
            }
        } else {
            prop_assume!(port != ROCE_UDP_PORT);
            r.udp.dst_port = port;
        }
        let mut buf = vec![0u8; r.frame_len(payload.len())];
        let n = r.emit(&payload, &mut buf).unwrap();
        prop_assert_eq!(Frame::parse(&buf[..n]), Err(Error::NotRoce));
    }
}

// ---------------------------------------------------------------------------
// Parse never panics; whatever it accepts re-emits to its canonical form

/// Emits `f` again (into a buffer big enough for any frame) and checks that
/// the result parses to the same frame with a good ICRC.
fn reemit(f: &Frame<'_>) -> Result<Vec<u8>, TestCaseError> {
    let mut buf = vec![0u8; BIG];
    let n = match f.repr().emit(f.payload, &mut buf) {
        Ok(n) => n,
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "a parsed frame does not emit: {e} ({f:?})"
            )))
        }
    };
    prop_assert_eq!(n, f.len(), "re-emitted length");
    prop_assert_eq!(n, f.repr().frame_len(f.payload.len()));
    buf.truncate(n);
    let g = Frame::parse(&buf).map_err(|e| TestCaseError::fail(format!("re-parse: {e}")))?;
    prop_assert_eq!(g.repr(), f.repr());
    prop_assert_eq!(g.payload, f.payload);
    prop_assert_eq!(g.pad, f.pad);
    prop_assert!(g.icrc_ok());
    Ok(buf)
}

/// RFC 1071 checksum of a 20-byte IPv4 header whose checksum field is 0.
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks_exact(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}

fn fix_ipv4_checksum(b: &mut [u8], ip: usize) {
    if let Some(h) = b.get_mut(ip..ip + 20) {
        h[10] = 0;
        h[11] = 0;
        let c = ipv4_checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// What re-emitting the parsed frame `f` of `orig` must give: its bytes
/// through the ICRC with every bit no `Repr` carries cleared (IPv4 reserved
/// flag; BTH resv8a's low 6 bits and byte 8's low 7; DETH byte 4; XRCETH
/// byte 0; FETH bytes 0-2 and bits 7-6 of byte 3; the CNP's 16 bytes; the
/// pad bytes),
/// then the IPv4 checksum and the ICRC recomputed.
fn canonical(orig: &[u8], f: &Frame<'_>) -> Vec<u8> {
    let mut c = orig[..f.len()].to_vec();
    let ip = f.ip_offset;
    let bth = ip + f.repr().ip.header_len() + 8;
    let ext = bth + 12;
    let h = f.info.headers;
    c[bth + 4] &= 0xC0;
    c[bth + 8] &= 0x80;
    if h.contains(HeaderSet::DETH) {
        c[ext + 4] = 0;
    }
    if h.contains(HeaderSet::XRCETH) {
        c[xrceth_at(ext, h)] = 0;
    }
    if h.contains(HeaderSet::FETH) {
        let o = feth_at(ext, h);
        c[o..o + 3].fill(0);
        c[o + 3] &= 0x3F;
    }
    let end = ext + h.len();
    if h.contains(HeaderSet::CNP) {
        c[end - 16..end].fill(0);
    }
    let pad = end + f.payload.len();
    c[pad..pad + f.pad as usize].fill(0);
    if let IpRepr::V4(_) = f.repr().ip {
        c[ip + 6] &= !0x80;
        fix_ipv4_checksum(&mut c, ip);
    }
    let n = c.len();
    seal(&mut c, ip).unwrap();
    debug_assert_eq!(n, f.len());
    c
}

/// Where the XRCETH of header set `h` starts, the extension headers
/// starting at `ext` (after a DETH, if any).
fn xrceth_at(ext: usize, h: HeaderSet) -> usize {
    ext + if h.contains(HeaderSet::DETH) { 8 } else { 0 }
}

/// Where the FETH of header set `h` starts (after a DETH and an XRCETH).
fn feth_at(ext: usize, h: HeaderSet) -> usize {
    xrceth_at(ext, h) + if h.contains(HeaderSet::XRCETH) { 4 } else { 0 }
}

/// What happened to one input, for the coverage counts.
#[derive(Debug, Default)]
struct Outcome {
    parsed: bool,
    icrc_ok: bool,
    /// ICRC good and re-emitted byte for byte.
    exact: bool,
}

/// Parses `bytes`; if that works, uses the frame every way a caller may
/// and checks the re-emission.
fn check(bytes: &[u8]) -> Result<Outcome, TestCaseError> {
    let Ok(f) = Frame::parse(bytes) else {
        return Ok(Outcome::default());
    };
    let icrc_ok = f.icrc_ok();
    let _ = f.icrc_expected();
    prop_assert!(f.len() <= bytes.len());
    prop_assert!(!f.is_empty());
    prop_assert!(f.len() >= f.ip_offset + f.repr().ip.header_len() + 8 + 12 + ICRC_LEN);
    let _ = format!("{:?} {}", f.repr(), f.repr().bth.opcode);
    let re = reemit(&f)?;
    let canon = canonical(bytes, &f);
    prop_assert_eq!(&re, &canon, "re-emitted bytes are not the canonical form");
    let exact = re[..] == bytes[..f.len()];
    if icrc_ok && canon[..] == bytes[..f.len()] {
        // The property as stated: good ICRC, nothing non-canonical.
        prop_assert!(exact);
    }
    Ok(Outcome {
        parsed: true,
        icrc_ok,
        exact: exact && icrc_ok,
    })
}

proptest! {
    #![proptest_config(config(20_000))]

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..160)) {
        check(&b)?;
    }

    /// Random bytes behind a valid Ethernet + IP + UDP 4791 prefix, so that
    /// parse gets past the headers that random bytes rarely pass.
    #[test]
    fn random_bytes_after_a_valid_prefix_never_panic(
        s in any::<Index>(),
        keep in any::<Index>(),
        tail in prop::collection::vec(any::<u8>(), 0..96),
    ) {
        let sample = &SAMPLES[s.index(SAMPLES.len())];
        let f = Frame::parse(sample).unwrap();
        let hdrs = f.ip_offset + f.repr().ip.header_len() + 8;
        let mut b = sample[..hdrs + keep.index(sample.len() - hdrs + 1)].to_vec();
        b.extend_from_slice(&tail);
        check(&b)?;
    }
}

/// Valid frames to mutate: one per opcode over IPv4 and over IPv6 + VLAN,
/// and every RoCE frame of tests/vectors.
static SAMPLES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut v: Vec<Vec<u8>> = frames::every_opcode().into_iter().map(|(_, b)| b).collect();
    v.extend(captured().into_iter().map(|(_, b)| b));
    v
});

/// Every frame of tests/vectors/*.pcap that parses: (name, bytes).
fn captured() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        let mut r = ferroce::pcap::open(&p).unwrap();
        let mut i = 0;
        while let Some(rec) = r.next_record().unwrap() {
            if Frame::parse(rec.data).is_ok() {
                out.push((format!("{stem}-{i:03}"), rec.data.to_vec()));
            }
            i += 1;
        }
    }
    out
}

/// One change to a frame.
#[derive(Debug, Clone)]
enum Mutation {
    /// Flips one bit anywhere.
    Flip(Index, u8),
    /// Sets one byte anywhere.
    Set(Index, u8),
    /// XORs `mask & x` into a field the ICRC leaves out or a reserved
    /// field (the `Index` picks one of `fields`).
    Field(Index, u8),
    /// Adds a small delta to a length field (IP or UDP).
    Length(Index, i8),
    /// Cuts the frame.
    Truncate(Index),
    /// Appends bytes.
    Extend(Vec<u8>),
    /// Inserts bytes.
    Insert(Index, Vec<u8>),
    /// Removes up to 16 bytes.
    Remove(Index, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let small = || prop::collection::vec(any::<u8>(), 1..12);
    prop_oneof![
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::Set(i, v)),
        4 => (any::<Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::Field(i, x)),
        2 => (any::<Index>(), -8i8..=8).prop_map(|(i, d)| Mutation::Length(i, d)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => small().prop_map(Mutation::Extend),
        1 => (any::<Index>(), small()).prop_map(|(i, v)| Mutation::Insert(i, v)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Remove(i, n)),
    ]
}

/// The fields of a valid frame that `Mutation::Field` aims at: (offset,
/// mask of the bits to change).
fn fields(f: &Frame<'_>) -> Vec<(usize, u8)> {
    let mut v: Vec<(usize, u8)> = (0..12).map(|i| (i, 0xFF)).collect();
    if f.repr().eth.vlan.is_some() {
        v.extend([(14, 0xFF), (15, 0xFF)]);
    }
    let ip = f.ip_offset;
    match f.repr().ip {
        IpRepr::V4(_) => v.extend([(ip + 1, 0xFF), (ip + 8, 0xFF), (ip + 6, 0x80)]),
        IpRepr::V6(_) => v.extend([(ip, 0x0F), (ip + 1, 0xFF), (ip + 3, 0xFF), (ip + 7, 0xFF)]),
    }
    let udp = ip + f.repr().ip.header_len();
    let bth = udp + 8;
    v.extend([
        (udp + 6, 0xFF),
        (udp + 7, 0xFF),
        (bth + 4, 0xFF),
        (bth + 8, 0x7F),
    ]);
    let h = f.info.headers;
    let ext = bth + 12;
    if h.contains(HeaderSet::DETH) {
        v.push((ext + 4, 0xFF));
    }
    if h.contains(HeaderSet::XRCETH) {
        v.push((xrceth_at(ext, h), 0xFF));
    }
    if h.contains(HeaderSet::FETH) {
        let o = feth_at(ext, h);
        v.extend([(o, 0xFF), (o + 3, 0xC0)]);
    }
    let end = ext + h.len();
    if h.contains(HeaderSet::CNP) {
        v.push((end - 16, 0xFF));
    }
    let pad = end + f.payload.len();
    v.extend((pad..pad + f.pad as usize).map(|i| (i, 0xFF)));
    v
}

/// The length fields of a valid frame: (offset of the big-endian u16).
fn length_fields(f: &Frame<'_>) -> Vec<usize> {
    let ip = f.ip_offset;
    match f.repr().ip {
        IpRepr::V4(_) => vec![ip + 2, ip + 20 + 4],
        IpRepr::V6(_) => vec![ip + 4, ip + 40 + 4],
    }
}

fn apply(b: &mut Vec<u8>, m: &Mutation, fields: &[(usize, u8)], lens: &[usize]) {
    let n = b.len();
    match m {
        Mutation::Flip(i, bit) if n > 0 => b[i.index(n)] ^= 1 << bit,
        Mutation::Set(i, v) if n > 0 => b[i.index(n)] = *v,
        Mutation::Field(i, x) => {
            let (o, mask) = fields[i.index(fields.len())];
            if o < n {
                b[o] ^= mask & x;
            }
        }
        Mutation::Length(i, d) => {
            let o = lens[i.index(lens.len())];
            if o + 2 <= n {
                let v = u16::from_be_bytes([b[o], b[o + 1]]).wrapping_add_signed(*d as i16);
                b[o..o + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        Mutation::Truncate(i) => b.truncate(i.index(n + 1)),
        Mutation::Extend(v) => b.extend_from_slice(v),
        Mutation::Insert(i, v) => {
            let at = i.index(n + 1);
            b.splice(at..at, v.iter().copied());
        }
        Mutation::Remove(i, k) if n > 0 => {
            let at = i.index(n);
            let end = (at + *k as usize).min(n);
            b.drain(at..end);
        }
        _ => {}
    }
}

/// Mutated valid frames never make parse (or the use of what it accepts)
/// panic; those that parse re-emit to their canonical form, and those with
/// a good ICRC and no reserved bits set re-emit byte for byte. Optionally
/// the IPv4 checksum and then the ICRC are fixed after the mutations, so
/// that many mutants parse with a good ICRC. Counts what happened, so that
/// the property is not vacuous.
#[test]
fn mutated_frames_never_panic_and_re_emit_canonically() {
    let strategy = (
        any::<Index>(),
        prop::collection::vec(mutation(), 1..5),
        any::<bool>(),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(config(20_000));
    let counts = std::cell::Cell::new([0usize; 4]);
    let result = runner.run(&strategy, |(s, muts, fix_csum, reseal)| {
        let sample = &SAMPLES[s.index(SAMPLES.len())];
        let f = Frame::parse(sample).unwrap();
        let (fields, lens) = (fields(&f), length_fields(&f));
        let v4 = matches!(f.repr().ip, IpRepr::V4(_));
        let mut b = sample.clone();
        for m in &muts {
            apply(&mut b, m, &fields, &lens);
        }
        if fix_csum && v4 {
            fix_ipv4_checksum(&mut b, f.ip_offset);
        }
        if reseal {
            if let Ok(g) = Frame::parse(&b) {
                let (n, ip) = (g.len(), g.ip_offset);
                seal(&mut b[..n], ip).unwrap();
            }
        }
        let o = check(&b)?;
        let mut c = counts.get();
        c[0] += 1;
        c[1] += o.parsed as usize;
        c[2] += o.icrc_ok as usize;
        c[3] += o.exact as usize;
        counts.set(c);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let [all, parsed, icrc_ok, exact] = counts.get();
    eprintln!("mutants: {all}, parsed {parsed}, ICRC ok {icrc_ok}, re-emitted exactly {exact}");
    assert!(parsed * 5 > all, "too few mutants parse: {parsed} of {all}");
    assert!(
        icrc_ok * 10 > all,
        "too few with a good ICRC: {icrc_ok} of {all}"
    );
    assert!(exact * 10 > all, "too few exact: {exact} of {all}");
    assert!(
        exact < icrc_ok,
        "no ICRC-good mutant with reserved bits set"
    );
}

/// The pieces of the frame a `Repr` does not carry are exactly those
/// `canonical` clears: each one set alone in a sample frame (ICRC resealed)
/// is dropped by the re-emission, and nothing else is.
#[test]
fn reserved_bits_are_the_only_non_canonical_bits() {
    for (name, sample) in frames::every_opcode() {
        let f = Frame::parse(&sample).unwrap();
        let ip = f.ip_offset;
        let bth = ip + f.repr().ip.header_len() + 8;
        let mut b = sample.clone();
        b[bth + 4] |= 0x3F; // outside the ICRC: it stays good
        let g = Frame::parse(&b).unwrap();
        assert!(g.icrc_ok(), "{name}");
        assert_eq!(g.repr(), f.repr(), "{name}");
        assert_eq!(reemit(&g).unwrap(), sample, "{name}");
        let mut b = sample.clone();
        b[bth + 8] |= 0x7F;
        seal(&mut b, ip).unwrap();
        let g = Frame::parse(&b).unwrap();
        assert_eq!(g.repr(), f.repr(), "{name}");
        assert_eq!(reemit(&g).unwrap(), sample, "{name}");
    }
}

// ---------------------------------------------------------------------------
// Seed corpus of the fuzz target

/// Writes the seed corpus of fuzz/fuzz_targets/parse.rs: every sample frame
/// and every RoCE frame of tests/vectors, one file each, into the directory
/// named by FERROCE_FUZZ_SEEDS:
/// `FERROCE_FUZZ_SEEDS=$PWD/fuzz/corpus/parse cargo test --release --test
/// wire_props -- --ignored write_fuzz_seeds`.
#[test]
#[ignore = "writes files; run by hand for the fuzz corpus"]
fn write_fuzz_seeds() {
    let dir = PathBuf::from(
        std::env::var_os("FERROCE_FUZZ_SEEDS").expect("set FERROCE_FUZZ_SEEDS to a directory"),
    );
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds = frames::every_opcode();
    seeds.extend(captured());
    for (name, bytes) in &seeds {
        let file: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        std::fs::write(dir.join(format!("seed-{file}")), bytes).unwrap();
    }
    eprintln!("wrote {} seeds to {}", seeds.len(), dir.display());
}
