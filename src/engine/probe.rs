//! Probe frames: genuine RoCE v2 packets (UD SEND_ONLY with a DETH, IBTA
//! Vol. 1 §9.2 / A17) whose payload is a pattern derived from a sequence
//! number, so a receiver can rebuild and compare every byte. The link tests
//! and `ferroce demo` use them to prove a datapath end to end.

use crate::wire::icrc;
use std::net::Ipv4Addr;

const ETH: usize = 14;
const IPV4: usize = 20;
const UDP: usize = 8;
const BTH: usize = 12;
const DETH: usize = 8;
/// Headers before the payload, and the ICRC after it.
pub const OVERHEAD: usize = ETH + IPV4 + UDP + BTH + DETH + 4;
/// The RoCE v2 UDP port (A17 §17.3.2).
pub const ROCE_UDP_PORT: u16 = 4791;
const UD_SEND_ONLY: u8 = 0x64;
/// Traffic class 106: DSCP 26 with ECT(0), as ConnectX deployments use.
const TOS: u8 = 106;
const PROBE_QKEY: u32 = 0x1111_1111;

/// The addresses and size of a stream of probe frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_qp: u32,
    pub dest_qp: u32,
    /// Payload bytes (at least 8: the sequence number).
    pub payload: usize,
}

/// Why a received frame is not the expected probe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("frame of {got} bytes, expected {want}")]
    Length { got: usize, want: usize },
    #[error("frame differs from probe {seq} at byte {at}")]
    Mismatch { seq: u64, at: usize },
}

impl Probe {
    pub fn frame_len(&self) -> usize {
        OVERHEAD + self.payload.max(8) + pad(self.payload.max(8))
    }

    /// Writes probe `seq` into `buf`, which must be `frame_len()` bytes.
    pub fn build(&self, seq: u64, buf: &mut [u8]) {
        let payload = self.payload.max(8);
        let pad = pad(payload);
        assert_eq!(buf.len(), self.frame_len(), "probe buffer size");
        buf[0..6].copy_from_slice(&self.dst_mac);
        buf[6..12].copy_from_slice(&self.src_mac);
        buf[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip_total = (buf.len() - ETH) as u16;
        let ip = &mut buf[ETH..ETH + IPV4];
        ip[0] = 0x45;
        ip[1] = TOS;
        ip[2..4].copy_from_slice(&ip_total.to_be_bytes());
        ip[4..6].copy_from_slice(&(seq as u16).to_be_bytes()); // identification
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF (CA17-7)
        ip[8] = 64;
        ip[9] = 17;
        ip[10..12].fill(0);
        ip[12..16].copy_from_slice(&self.src_ip.octets());
        ip[16..20].copy_from_slice(&self.dst_ip.octets());
        let csum = ipv4_checksum(ip);
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
        let u = &mut buf[ETH + IPV4..ETH + IPV4 + UDP];
        u[0..2].copy_from_slice(&(0xC000 | (self.src_qp as u16 & 0x3FFF)).to_be_bytes());
        u[2..4].copy_from_slice(&ROCE_UDP_PORT.to_be_bytes());
        u[4..6].copy_from_slice(&(ip_total - IPV4 as u16).to_be_bytes());
        u[6..8].fill(0); // UDP checksum 0 (A17 §17.3.2.4)
        let b = &mut buf[ETH + IPV4 + UDP..ETH + IPV4 + UDP + BTH];
        b[0] = UD_SEND_ONLY;
        b[1] = (pad as u8) << 4;
        b[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
        b[4..8].copy_from_slice(&(self.dest_qp & 0xFF_FFFF).to_be_bytes());
        b[8..12].copy_from_slice(&((seq as u32) & 0xFF_FFFF).to_be_bytes());
        let d = &mut buf[ETH + IPV4 + UDP + BTH..ETH + IPV4 + UDP + BTH + DETH];
        d[0..4].copy_from_slice(&PROBE_QKEY.to_be_bytes());
        d[4..8].copy_from_slice(&(self.src_qp & 0xFF_FFFF).to_be_bytes());
        let p0 = OVERHEAD - 4;
        fill_payload(seq, &mut buf[p0..p0 + payload]);
        buf[p0 + payload..p0 + payload + pad].fill(0);
        let end = buf.len() - 4;
        let crc = icrc::compute(&buf[ETH..end]).expect("a probe is a well-formed IPv4 RoCE packet");
        buf[end..].copy_from_slice(&crc.to_le_bytes());
    }

    /// The sequence number a received probe carries (no check).
    pub fn seq_of(frame: &[u8]) -> Option<u64> {
        let p0 = OVERHEAD - 4;
        Some(u64::from_be_bytes(frame.get(p0..p0 + 8)?.try_into().ok()?))
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
        let expect = &mut scratch[..want];
        self.build(seq, expect);
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

fn pad(payload: usize) -> usize {
    payload.wrapping_neg() & 3
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

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
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
            p.build(77, &mut f);
            assert_eq!(f.len() % 4, 2, "eth 14 + 4-aligned RoCE packet");
            assert_eq!(icrc::verify(&f[14..]), Ok(true));
            assert_eq!(ipv4_checksum(&f[14..34]), 0);
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
