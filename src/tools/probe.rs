//! Probe frames: genuine RoCE v2 packets (UD SEND_ONLY with a DETH, IBTA
//! Vol. 1 §9.2 / A17) whose payload is a pattern derived from a sequence
//! number, so a receiver can rebuild and compare every byte. The link tests
//! and `ferroce demo` use them to prove a datapath end to end.

use crate::wire::opcode::Op;
use crate::wire::{frame, BthRepr, DethRepr, Ecn, FrameRepr, IpRepr, MacAddr, Opcode, Psn};
use std::net::Ipv4Addr;

/// Headers before the payload (Ethernet, IPv4, UDP, BTH, DETH), and the
/// ICRC after it.
pub const OVERHEAD: usize = crate::wire::len::UD_V4;
const HEADERS: usize = OVERHEAD - crate::wire::len::ICRC;
/// DSCP 26 with ECT(0): traffic class 106, as ConnectX deployments use.
const DSCP: u8 = 26;
const PROBE_QKEY: u32 = 0x1111_1111;

/// The addresses and size of a stream of probe frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Ethernet source address of every probe.
    pub src_mac: [u8; 6],
    /// Ethernet destination address of every probe.
    pub dst_mac: [u8; 6],
    /// IPv4 source address.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination address.
    pub dst_ip: Ipv4Addr,
    /// Sending QP: the DETH source QP (its low 24 bits); its low 14 bits
    /// also make the UDP source port (`0xC000 | qp`).
    pub src_qp: u32,
    /// The BTH destination QP.
    pub dest_qp: u32,
    /// Payload bytes (at least 8: the sequence number).
    pub payload: usize,
}

/// Why a received frame is not the expected probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The frame (or the scratch buffer, or 0 if the probe could not be
    /// built) is not the probe's length.
    #[error("frame of {got} bytes, expected {want}")]
    Length {
        /// Bytes found.
        got: usize,
        /// Bytes of the probe frame ([`Probe::frame_len`]).
        want: usize,
    },
    /// The frame has the right length but a byte differs.
    #[error("frame differs from probe {seq} at byte {at}")]
    Mismatch {
        /// Sequence number of the expected probe.
        seq: u64,
        /// Offset of the first differing byte in the frame.
        at: usize,
    },
}

impl Probe {
    fn payload_len(&self) -> usize {
        self.payload.max(8)
    }

    /// The headers of probe `seq`: UD SEND_ONLY to `dest_qp` with a DETH
    /// naming `src_qp`, the IP ID and PSN taken from `seq`.
    fn repr(&self, seq: u64) -> FrameRepr {
        let bth = BthRepr::new(Opcode::ud(Op::SendOnly), self.dest_qp, Psn::new(seq as u32));
        let mut r = FrameRepr::roce(
            MacAddr(self.src_mac),
            MacAddr(self.dst_mac),
            IpRepr::v4(self.src_ip, self.dst_ip, DSCP, Ecn::Ect0),
            0xC000 | (self.src_qp as u16 & 0x3FFF),
            bth,
        );
        if let IpRepr::V4(ip) = &mut r.ip {
            ip.ident = seq as u16;
        }
        r.ext.deth = Some(DethRepr {
            qkey: PROBE_QKEY,
            src_qp: self.src_qp & 0x00FF_FFFF,
        });
        r
    }

    /// Bytes of every probe frame: headers, payload (at least 8), BTH pad
    /// and ICRC; no FCS.
    pub fn frame_len(&self) -> usize {
        self.repr(0).frame_len(self.payload_len())
    }

    /// Writes probe `seq` into `buf`, which must hold `frame_len()` bytes.
    pub fn build(&self, seq: u64, buf: &mut [u8]) -> Result<(), crate::wire::Error> {
        let r = self.repr(seq);
        let len = r.frame_len(self.payload_len());
        let buf = buf
            .get_mut(..len)
            .ok_or(crate::wire::Error::BufferTooSmall)?;
        let at = r.emit_headers(self.payload_len(), buf)?;
        fill_payload(seq, &mut buf[at]);
        frame::seal(buf, r.eth.header_len())?;
        Ok(())
    }

    /// The sequence number a received probe carries (no check).
    pub fn seq_of(frame: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(
            frame.get(HEADERS..HEADERS + 8)?.try_into().ok()?,
        ))
    }

    /// Checks that `frame` is exactly probe `seq` of this stream, byte for
    /// byte (ICRC included). `scratch` must hold `frame_len()` bytes.
    pub fn check(&self, seq: u64, frame: &[u8], scratch: &mut [u8]) -> Result<(), ProbeError> {
        let want = self.frame_len();
        if frame.len() != want {
            return Err(ProbeError::Length {
                got: frame.len(),
                want,
            });
        }
        let Some(expect) = scratch.get_mut(..want) else {
            return Err(ProbeError::Length {
                got: scratch.len(),
                want,
            });
        };
        if self.build(seq, expect).is_err() {
            return Err(ProbeError::Length { got: 0, want });
        }
        match frame.iter().zip(expect.iter()).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(at) => Err(ProbeError::Mismatch { seq, at }),
        }
    }

    /// The same stream seen from the other end (addresses swapped).
    pub fn reversed(&self) -> Probe {
        Probe {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_qp: self.dest_qp,
            dest_qp: self.src_qp,
            payload: self.payload,
        }
    }
}

/// 8 KiB of fixed pseudo-random bytes; a probe's payload is a window into
/// it that starts at an offset derived from its sequence number.
static PATTERN: std::sync::LazyLock<[u8; 8192]> = std::sync::LazyLock::new(|| {
    let mut p = [0u8; 8192];
    let mut x: u32 = 0x9E37_79B9;
    for b in p.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    p
});

fn fill_payload(seq: u64, p: &mut [u8]) {
    p[..8].copy_from_slice(&seq.to_be_bytes());
    let rest = &mut p[8..];
    let mut off = (seq.wrapping_mul(2_654_435_761) % 4096) as usize;
    for chunk in rest.chunks_mut(4096) {
        chunk.copy_from_slice(&PATTERN[off..off + chunk.len()]);
        off = (off + 1) % 4096;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(payload: usize) -> Probe {
        Probe {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(198, 18, 0, 1),
            dst_ip: Ipv4Addr::new(198, 18, 0, 2),
            src_qp: 0x11,
            dest_qp: 0x12,
            payload,
        }
    }

    #[test]
    fn probes_are_valid_roce_and_check_byte_for_byte() {
        for payload in [8, 9, 61, 1024, 4096] {
            let p = probe(payload);
            let mut f = vec![0u8; p.frame_len()];
            p.build(77, &mut f).unwrap();
            assert_eq!(f.len() % 4, 2, "eth 14 + 4-aligned RoCE packet");
            let parsed = crate::wire::Frame::parse(&f).unwrap();
            assert!(parsed.icrc_ok());
            assert_eq!(parsed.repr().bth.opcode, Opcode(0x64));
            assert_eq!(
                parsed.repr().ip.dscp() << 2 | parsed.repr().ip.ecn().bits(),
                106
            );
            assert_eq!(Probe::seq_of(&f), Some(77));
            let mut scratch = vec![0u8; p.frame_len()];
            assert_eq!(p.check(77, &f, &mut scratch), Ok(()));
            assert!(matches!(
                p.check(78, &f, &mut scratch),
                Err(ProbeError::Mismatch { .. })
            ));
            let last = f.len() - 5;
            f[last] ^= 0x40;
            assert!(matches!(
                p.check(77, &f, &mut scratch),
                Err(ProbeError::Mismatch { .. })
            ));
            assert!(matches!(
                p.check(77, &f[1..], &mut scratch),
                Err(ProbeError::Length { .. })
            ));
        }
    }
}
