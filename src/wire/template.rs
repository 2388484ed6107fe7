//! A connected QP's header template: the Ethernet (and 802.1Q), IP, UDP
//! and BTH bytes every packet of the QP shares, built once from a
//! [`FrameRepr`] and patched per packet where packets differ.
//!
//! What a packet changes (and nothing else): the IP length (IPv4 total
//! length and its header checksum, updated from the sum of the fixed words
//! as RFC 1624 allows; IPv6 payload length), the UDP length, and the BTH's
//! opcode, SE bit, pad count, AckReq bit and PSN (IBTA Vol. 1 §9.2). The
//! extension headers, payload, pad bytes and ICRC follow as
//! [`FrameRepr::emit_headers`] writes them, and the bytes are the same as
//! that function's for the same packet (tested below and in
//! `tests/wire_props.rs`).
//!
//! The ICRC's share of the bytes every packet keeps is folded once too
//! ([`HeadFold`]): [`HeaderTemplate::seal`] runs the CRC over what follows
//! the BTH only, and adds the share of each varying byte from a table.

use super::bth;
use super::ext::{Aeth, AethRepr};
use super::field::{set_u16, set_u24};
use super::frame::{ExtHeaders, FrameRepr, IpRepr, ICRC_LEN};
use super::icrc::HeadFold;
use super::opcode::{HeaderSet, Op, Opcode};
use super::psn::{pad_count, Psn};
use super::{ethernet, ipv4, ipv6, udp};
use super::{Error, Result};
use core::ops::Range;

/// Bytes of the longest template: a tagged Ethernet header, IPv6, UDP,
/// BTH.
pub const MAX_LEN: usize =
    ethernet::HEADER_LEN_VLAN + ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN;

/// The fixed headers of one QP's packets, as bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderTemplate {
    bytes: [u8; MAX_LEN],
    /// Bytes used: up to and including the BTH.
    len: u8,
    /// Where the IP header starts (the Ethernet header's length).
    ip_at: u8,
    /// IPv6 (else IPv4).
    v6: bool,
    /// IPv4: the one's-complement sum of the header's words with the total
    /// length and the checksum zero, not yet folded.
    v4_sum: u32,
    /// The ICRC's share of the bytes every packet keeps, folded once.
    icrc: HeadFold,
}

/// The BTH fields that vary from packet to packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthVaries {
    /// The opcode.
    pub opcode: Opcode,
    /// The packet sequence number.
    pub psn: Psn,
    /// SE: solicited event.
    pub solicited: bool,
    /// AckReq: ask for an acknowledgement.
    pub ack_req: bool,
}

impl HeaderTemplate {
    /// The template of `r`'s Ethernet, IP, UDP and BTH headers (its BTH's
    /// opcode, PSN, SE and AckReq are overwritten by every packet; its
    /// extension headers are not part of the template).
    pub fn new(r: &FrameRepr) -> Result<HeaderTemplate> {
        let mut bytes = [0u8; MAX_LEN];
        let eth = ethernet::EthernetRepr {
            ethertype: r.ip.ethertype(),
            ..r.eth
        };
        let mut off = eth.emit(&mut bytes)?;
        let ip_at = off;
        let v6 = matches!(r.ip, IpRepr::V6(_));
        off +=
            r.ip.emit(&mut bytes[off..], udp::HEADER_LEN + bth::HEADER_LEN)?;
        off += r.udp.emit(&mut bytes[off..], bth::HEADER_LEN)?;
        off += r.bth.emit(&mut bytes[off..], 0)?;
        let mut v4_sum = 0;
        if !v6 {
            let h = &mut bytes[ip_at..ip_at + ipv4::HEADER_LEN];
            set_u16(h, 2, 0);
            set_u16(h, 10, 0);
            v4_sum = h
                .chunks_exact(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
        }
        let icrc = HeadFold::new(&bytes[ip_at..off]).map_err(|_| Error::Truncated)?;
        Ok(HeaderTemplate {
            bytes,
            len: off as u8,
            ip_at: ip_at as u8,
            v6,
            v4_sum,
            icrc,
        })
    }

    /// Bytes of the template: every header up to the BTH's end.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the template is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The Ethernet header's length: where the IP header starts.
    pub fn eth_len(&self) -> usize {
        self.ip_at as usize
    }

    /// The length of the frame of a packet of `opcode` with a payload of
    /// `payload_len` bytes (pad and ICRC included).
    pub fn frame_len(&self, opcode: Opcode, payload_len: usize) -> usize {
        let ext = opcode.info().map_or(0, |i| i.headers_len as usize);
        self.len() + ext + payload_len + pad_count(payload_len) as usize + ICRC_LEN
    }

    /// Writes the headers of one packet into `buf` (its extension headers
    /// `ext`, which must be those its opcode carries, and the pad bytes
    /// after a payload of `payload_len` bytes); returns where the payload
    /// goes. Write it there, then seal the frame (`buf[..frame_len]`).
    pub fn emit_headers(
        &self,
        v: &BthVaries,
        ext: &ExtHeaders,
        payload_len: usize,
        buf: &mut [u8],
    ) -> Result<Range<usize>> {
        let info = v.opcode.info().ok_or(Error::UnknownOpcode(v.opcode.0))?;
        if info.headers.contains(HeaderSet::CNP)
            || ext.set() != info.headers
            || (!info.payload && payload_len != 0)
        {
            return Err(Error::HeadersMismatch);
        }
        let hl = info.headers_len as usize;
        let n = self.patch(v, hl, payload_len, buf)?;
        ext.emit(false, &mut buf[n..n + hl])?;
        let payload = n + hl..n + hl + payload_len;
        // Most payloads need no pad: no call to memset for none.
        let pad = pad_count(payload_len) as usize;
        if pad != 0 {
            buf[payload.end..payload.end + pad].fill(0);
        }
        Ok(payload)
    }

    /// Writes the headers of an RC Acknowledge with `aeth` and `psn`
    /// (IBTA Vol. 1 §9.7.5.1: a BTH and an AETH, no payload, AckReq and
    /// SE clear) and returns the frame's length through its ICRC; seal it
    /// then. The same bytes as [`HeaderTemplate::emit_headers`] with the
    /// opcode Acknowledge and only `aeth` among the extension headers,
    /// without looking up and checking the opcode's headers: every ACK a
    /// responder sends is one.
    pub fn emit_ack(&self, psn: Psn, aeth: &AethRepr, buf: &mut [u8]) -> Result<usize> {
        let v = BthVaries {
            opcode: Opcode::rc(Op::Acknowledge),
            psn,
            solicited: false,
            ack_req: false,
        };
        let hl = Aeth::<&[u8]>::LEN;
        let n = self.patch(&v, hl, 0, buf)?;
        aeth.emit(&mut buf[n..n + hl])?;
        Ok(n + hl + ICRC_LEN)
    }

    /// Copies the template into `buf` and patches what one packet changes
    /// (the lengths, the IPv4 checksum, the BTH's varying fields) for
    /// `hl` bytes of extension headers and `payload_len` of payload; returns
    /// where the extension headers go.
    #[inline]
    fn patch(&self, v: &BthVaries, hl: usize, payload_len: usize, buf: &mut [u8]) -> Result<usize> {
        let pad = pad_count(payload_len);
        let n = self.len();
        let total = n + hl + payload_len + pad as usize + ICRC_LEN;
        if buf.len() < total {
            return Err(Error::BufferTooSmall);
        }
        let b = &mut buf[..n];
        b.copy_from_slice(&self.bytes[..n]);
        let ip = self.ip_at as usize;
        let ip_len = if self.v6 {
            ipv6::HEADER_LEN
        } else {
            ipv4::HEADER_LEN
        };
        let udp_at = ip + ip_len;
        let udp_len = u16::try_from(total - udp_at).map_err(|_| Error::FieldRange)?;
        if self.v6 {
            set_u16(b, ip + 4, udp_len);
        } else {
            let len = u16::try_from(total - ip).map_err(|_| Error::FieldRange)?;
            set_u16(b, ip + 2, len);
            set_u16(b, ip + 10, !fold(self.v4_sum + u32::from(len)));
        }
        set_u16(b, udp_at + 4, udp_len);
        let t = udp_at + udp::HEADER_LEN;
        b[t] = v.opcode.0;
        // SE, pad count; MigReq and TVer as the template has them.
        b[t + 1] = (v.solicited as u8) << 7 | (b[t + 1] & 0x4F) | pad << 4;
        b[t + 8] = (v.ack_req as u8) << 7;
        set_u24(b, t + 9, v.psn.value());
        Ok(n)
    }

    /// Writes the ICRC of a frame of this template's QP built at the start
    /// of `frame` by [`HeaderTemplate::emit_headers`] (payload and pad in
    /// place; its last 4 bytes the ICRC's), from the template's folded
    /// prefix: the CRC runs over what follows the BTH only.
    pub fn seal(&self, frame: &mut [u8]) -> Result<u32> {
        let n = frame.len().checked_sub(ICRC_LEN).ok_or(Error::Truncated)?;
        let ip = frame.get(self.ip_at as usize..n).ok_or(Error::Truncated)?;
        let c = self.icrc.compute(ip, &[]).map_err(|_| Error::Truncated)?;
        frame[n..].copy_from_slice(&c.to_le_bytes());
        Ok(c)
    }

    /// The ICRC of a frame of this template's QP held in parts: its
    /// headers from the IP header on (as [`HeaderTemplate::emit_headers`]
    /// wrote them, extension headers included), then each of `rest` in
    /// order (the payload, the pad), without the ICRC.
    pub fn icrc_parts(&self, ip_head: &[u8], rest: &[&[u8]]) -> Result<u32> {
        self.icrc
            .compute(ip_head, rest)
            .map_err(|_| Error::Truncated)
    }
}

/// Folds a one's-complement sum to 16 bits.
fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ext::{AckSyndrome, RethRepr};
    use crate::wire::{BthRepr, Ecn, MacAddr, VlanTag};

    fn reprs() -> Vec<FrameRepr> {
        let v4 = IpRepr::v4(
            [198, 18, 0, 1].into(),
            [198, 18, 0, 2].into(),
            26,
            Ecn::Ect0,
        );
        let v6 = IpRepr::v6(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            46,
            Ecn::NotEct,
            0x12345,
        );
        let mut out = Vec::new();
        for ip in [v4, v6] {
            for vlan in [
                None,
                Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 100,
                }),
            ] {
                let mut bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x00AB_CDEF, Psn::new(0));
                bth.pkey = 0x8001;
                let mut r = FrameRepr::roce(
                    MacAddr([2, 0, 0, 0, 0, 1]),
                    MacAddr([2, 0, 0, 0, 0, 2]),
                    ip,
                    0xC123,
                    bth,
                );
                r.eth.vlan = vlan;
                out.push(r);
            }
        }
        out
    }

    /// For every IP version, tag, opcode shape, payload length around the
    /// pad boundaries and flag: the template's bytes are
    /// `FrameRepr::emit_headers`'s.
    #[test]
    fn a_template_writes_the_bytes_the_repr_writes() {
        let reth = RethRepr {
            va: 0x1_0000_2000,
            rkey: 0x1234,
            dma_len: 4099,
        };
        let shapes = [
            (Op::SendOnly, ExtHeaders::default()),
            (Op::SendMiddle, ExtHeaders::default()),
            (
                Op::RdmaWriteFirst,
                ExtHeaders {
                    reth: Some(reth),
                    ..ExtHeaders::default()
                },
            ),
            (
                Op::Acknowledge,
                ExtHeaders {
                    aeth: Some(AethRepr {
                        syndrome: AckSyndrome::Ack { credit: 31 },
                        msn: 7,
                    }),
                    ..ExtHeaders::default()
                },
            ),
        ];
        for base in reprs() {
            let t = HeaderTemplate::new(&base).unwrap();
            assert_eq!(t.eth_len(), base.eth.header_len());
            for (op, ext) in shapes {
                let opcode = Opcode::rc(op);
                let lens: &[usize] = if opcode.info().unwrap().payload {
                    &[0, 1, 2, 3, 4, 63, 64, 1024, 4096]
                } else {
                    &[0]
                };
                for &len in lens {
                    for (psn, se, ack) in [(0, false, false), (0xFF_FFFF, true, true)] {
                        let v = BthVaries {
                            opcode,
                            psn: Psn::new(psn),
                            solicited: se,
                            ack_req: ack,
                        };
                        let mut r = base;
                        r.bth.opcode = opcode;
                        r.bth.psn = v.psn;
                        r.bth.solicited = se;
                        r.bth.ack_req = ack;
                        r.ext = ext;
                        let mut want = vec![0xEE; 4300];
                        let mut got = vec![0xEE; 4300];
                        let a = r.emit_headers(len, &mut want).unwrap();
                        let b = t.emit_headers(&v, &ext, len, &mut got).unwrap();
                        assert_eq!(a, b, "{op:?} {len}");
                        let n = r.frame_len(len);
                        assert_eq!(t.frame_len(opcode, len), n);
                        assert_eq!(want[..n], got[..n], "{op:?} {len} B {:?}", base.ip);
                        // The folded ICRC is the one computed whole.
                        let whole = crate::wire::frame::seal(&mut want[..n], t.eth_len());
                        assert_eq!(t.seal(&mut got[..n]), whole);
                        let ip = &got[t.eth_len()..n - ICRC_LEN];
                        let (head, rest) = ip.split_at(b.start - t.eth_len());
                        assert_eq!(t.icrc_parts(head, &[rest]).ok(), whole.ok());
                        assert_eq!(want[..n], got[..n]);
                    }
                }
            }
        }
    }

    /// An ACK written by `emit_ack` is byte for byte the general path's,
    /// ICRC included, for every IP version, tag, syndrome and PSN edge.
    #[test]
    fn emit_ack_writes_the_acknowledge_emit_headers_writes() {
        let syndromes = [
            AckSyndrome::Ack { credit: 31 },
            AckSyndrome::Ack { credit: 0 },
            AckSyndrome::RnrNak { timer: 14 },
            AckSyndrome::Nak(crate::wire::ext::NakCode::PsnSequenceError),
            AckSyndrome::Nak(crate::wire::ext::NakCode::RemoteAccessError),
        ];
        for base in reprs() {
            let t = HeaderTemplate::new(&base).unwrap();
            for syndrome in syndromes {
                for (psn, msn) in [(0, 0), (1, 7), (0xFF_FFFF, 0xFF_FFFF)] {
                    let aeth = AethRepr { syndrome, msn };
                    let v = BthVaries {
                        opcode: Opcode::rc(Op::Acknowledge),
                        psn: Psn::new(psn),
                        solicited: false,
                        ack_req: false,
                    };
                    let ext = ExtHeaders {
                        aeth: Some(aeth),
                        ..ExtHeaders::default()
                    };
                    let mut want = vec![0xEE; 200];
                    let mut got = vec![0xEE; 200];
                    t.emit_headers(&v, &ext, 0, &mut want).unwrap();
                    let n = t.frame_len(v.opcode, 0);
                    assert_eq!(t.emit_ack(v.psn, &aeth, &mut got), Ok(n));
                    assert_eq!(t.seal(&mut want[..n]), t.seal(&mut got[..n]));
                    assert_eq!(want, got, "{syndrome:?} {psn} {:?}", base.ip);
                }
            }
            // Too small a buffer is refused, nothing panics.
            let aeth = AethRepr {
                syndrome: AckSyndrome::Ack { credit: 31 },
                msn: 1,
            };
            let n = t.frame_len(Opcode::rc(Op::Acknowledge), 0);
            assert_eq!(
                t.emit_ack(Psn::new(0), &aeth, &mut vec![0; n - 1]),
                Err(Error::BufferTooSmall)
            );
        }
    }

    #[test]
    fn a_template_refuses_what_the_repr_refuses() {
        let t = HeaderTemplate::new(&reprs()[0]).unwrap();
        let v = BthVaries {
            opcode: Opcode::rc(Op::RdmaWriteOnly),
            psn: Psn::new(1),
            solicited: false,
            ack_req: false,
        };
        let mut buf = [0u8; 9000];
        // A WRITE without its RETH.
        let e = t.emit_headers(&v, &ExtHeaders::default(), 8, &mut buf);
        assert_eq!(e, Err(Error::HeadersMismatch));
        // Too small a buffer.
        let ext = ExtHeaders {
            reth: Some(RethRepr {
                va: 0,
                rkey: 1,
                dma_len: 8,
            }),
            ..ExtHeaders::default()
        };
        assert_eq!(
            t.emit_headers(&v, &ext, 8, &mut buf[..60]),
            Err(Error::BufferTooSmall)
        );
        // An IPv4 length past 16 bits.
        assert_eq!(
            t.emit_headers(&v, &ext, 70_000, &mut vec![0u8; 80_000]),
            Err(Error::FieldRange)
        );
    }
}
