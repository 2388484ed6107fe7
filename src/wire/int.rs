//! ferroce's in-band network telemetry (INT) trailer: per-hop records
//! (timestamp, bytes sent, queue length, link rate) that switches stamp
//! into a data packet and the responder echoes back in its
//! acknowledgements, as HPCC needs (Li et al., "HPCC: High Precision
//! Congestion Control", SIGCOMM 2019, §3.2).
//!
//! **Not standard RoCE.** It is sent only on a QP whose two ends both
//! asked for it (the QP attribute `int_telemetry`), never toward an
//! unknown peer. It sits where a standard receiver does not look: after
//! the IP packet, as an Ethernet trailer. The RoCE v2 frame in front of
//! it is unchanged, its lengths and ICRC included (A17 §17.3.3), so a
//! capture of it still decodes as RoCE v2 (with a trailer), and
//! [`Frame::parse`](super::Frame::parse) ignores bytes after the IP
//! packet. Its bytes count on the wire like any others: the overhead HPCC
//! pays for INT.
//!
//! # Layout (big-endian, [`LEN`] = 44 bytes)
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..2 | magic `0xF1 0x7E` |
//! | 2 | kind: 1 collect (a request: switches push hops), 2 echo (an acknowledgement: switches leave it) |
//! | 3 | hops pushed, 0..=[`MAX_HOPS`]; bit 7 set once a switch found no room |
//! | 4..44 | [`MAX_HOPS`] records of 8 bytes, the first pushed first |
//!
//! A record packs into 64 bits, from the top: link rate code (4 bits,
//! [`RATE_CODES_GBPS`], 15: unknown), timestamp (24 bits, ns, wraps every
//! 16.8 ms), bytes sent by the egress port before this packet (20 bits, in
//! [`BYTES_UNIT`]-byte units, wraps every 128 MiB), bytes queued at the
//! port as the packet leaves (16 bits, in [`BYTES_UNIT`] units, saturating
//! at 8 MiB). The same budget as the HPCC simulator's 8-byte hop
//! (`int-header.h`: 5 hops and a hop count, 42 bytes); the field widths
//! and units are ours, chosen so that the differences HPCC takes between
//! two acknowledgements never wrap at 800 Gb/s within 1 ms.

use super::ethernet::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, HEADER_LEN, HEADER_LEN_VLAN,
};
use super::udp::ROCE_UDP_PORT;

/// The trailer's length.
pub const LEN: usize = 4 + 8 * MAX_HOPS;
/// The most hops one trailer records.
pub const MAX_HOPS: usize = 5;
/// The unit of the bytes-sent and queue fields.
pub const BYTES_UNIT: u64 = 128;
/// The link rates a record can name, Gb/s, by code (0..=8).
pub const RATE_CODES_GBPS: [u64; 9] = [1, 10, 25, 40, 50, 100, 200, 400, 800];
/// The rate code of a link whose rate is not in [`RATE_CODES_GBPS`].
pub const RATE_UNKNOWN: u8 = 15;

const MAGIC: [u8; 2] = [0xF1, 0x7E];
const KIND_COLLECT: u8 = 1;
const KIND_ECHO: u8 = 2;
const OVERFLOW: u8 = 0x80;
const TS_MASK: u64 = (1 << 24) - 1;
const TX_MASK: u64 = (1 << 20) - 1;

/// One hop's record as a switch stamped it (the packed, wrapping values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntHop {
    /// The egress link's rate code ([`rate_code`]).
    pub rate_code: u8,
    /// Departure time, ns modulo 2^24.
    pub ts: u32,
    /// Bytes the port sent before this packet, in [`BYTES_UNIT`]s modulo
    /// 2^20.
    pub tx_units: u32,
    /// Bytes queued at the port as the packet left, in [`BYTES_UNIT`]s
    /// (saturated at 2^16 − 1).
    pub qlen_units: u16,
}

impl IntHop {
    /// The record a port of `rate_bps` stamps at `now_ns`, having sent
    /// `tx_bytes` before this packet and holding `qlen_bytes` behind it.
    pub fn stamp(rate_bps: u64, now_ns: u64, tx_bytes: u64, qlen_bytes: u64) -> IntHop {
        IntHop {
            rate_code: rate_code(rate_bps),
            ts: (now_ns & TS_MASK) as u32,
            tx_units: ((tx_bytes / BYTES_UNIT) & TX_MASK) as u32,
            qlen_units: (qlen_bytes / BYTES_UNIT).min(u64::from(u16::MAX)) as u16,
        }
    }

    /// The link's rate, bits per second (`None`: not known).
    pub fn rate_bps(&self) -> Option<u64> {
        RATE_CODES_GBPS
            .get(usize::from(self.rate_code))
            .map(|g| g * 1_000_000_000)
    }

    /// The queue, bytes (to within [`BYTES_UNIT`]).
    pub fn qlen_bytes(&self) -> u64 {
        u64::from(self.qlen_units) * BYTES_UNIT
    }

    /// Nanoseconds from `earlier`'s stamp to this one (modulo 2^24).
    pub fn ns_since(&self, earlier: &IntHop) -> u64 {
        u64::from(self.ts.wrapping_sub(earlier.ts)) & TS_MASK
    }

    /// Bytes the port sent from `earlier`'s stamp to this one (modulo
    /// 2^20 units).
    pub fn bytes_since(&self, earlier: &IntHop) -> u64 {
        (u64::from(self.tx_units.wrapping_sub(earlier.tx_units)) & TX_MASK) * BYTES_UNIT
    }

    fn pack(&self) -> u64 {
        u64::from(self.rate_code & 0xF) << 60
            | (u64::from(self.ts) & TS_MASK) << 36
            | (u64::from(self.tx_units) & TX_MASK) << 16
            | u64::from(self.qlen_units)
    }

    fn unpack(v: u64) -> IntHop {
        IntHop {
            rate_code: (v >> 60) as u8,
            ts: ((v >> 36) & TS_MASK) as u32,
            tx_units: ((v >> 16) & TX_MASK) as u32,
            qlen_units: v as u16,
        }
    }
}

/// The code of `rate_bps` in [`RATE_CODES_GBPS`], or [`RATE_UNKNOWN`].
pub fn rate_code(rate_bps: u64) -> u8 {
    RATE_CODES_GBPS
        .iter()
        .position(|g| g * 1_000_000_000 == rate_bps)
        .map_or(RATE_UNKNOWN, |i| i as u8)
}

/// The hops of one trailer, the first pushed (nearest the sender) first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntStack {
    /// Hops recorded.
    pub n: u8,
    /// A switch found the trailer full (more than [`MAX_HOPS`] hops).
    pub overflow: bool,
    /// The records; `hops[..n]` are valid.
    pub hops: [IntHop; MAX_HOPS],
}

impl IntStack {
    /// The valid records.
    pub fn hops(&self) -> &[IntHop] {
        &self.hops[..usize::from(self.n)]
    }

    /// Appends a record (what a switch does); `false` when full.
    pub fn push(&mut self, hop: IntHop) -> bool {
        match self.hops.get_mut(usize::from(self.n)) {
            Some(h) => {
                *h = hop;
                self.n += 1;
                true
            }
            None => {
                self.overflow = true;
                false
            }
        }
    }
}

/// What a trailer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trailer {
    /// A request's: switches on the way push their hops.
    Collect(IntStack),
    /// An acknowledgement's: the hops its request collected, returned.
    Echo(IntStack),
}

impl Trailer {
    /// Reads the trailer that starts `tail` (the bytes after the IP
    /// packet); `None` when there is none (a standard frame, Ethernet
    /// padding, a bad magic, kind or hop count).
    pub fn parse(tail: &[u8]) -> Option<Trailer> {
        let t = tail.get(..LEN)?;
        if t[..2] != MAGIC {
            return None;
        }
        let n = t[3] & !OVERFLOW;
        if usize::from(n) > MAX_HOPS {
            return None;
        }
        let mut s = IntStack {
            n,
            overflow: t[3] & OVERFLOW != 0,
            hops: [IntHop::default(); MAX_HOPS],
        };
        for (i, h) in s.hops.iter_mut().take(usize::from(n)).enumerate() {
            let at = 4 + 8 * i;
            let b: [u8; 8] = t[at..at + 8].try_into().ok()?;
            *h = IntHop::unpack(u64::from_be_bytes(b));
        }
        match t[2] {
            KIND_COLLECT => Some(Trailer::Collect(s)),
            KIND_ECHO => Some(Trailer::Echo(s)),
            _ => None,
        }
    }

    /// Writes the trailer into `buf[..LEN]`; `None` if `buf` is shorter.
    pub fn emit(&self, buf: &mut [u8]) -> Option<()> {
        let t = buf.get_mut(..LEN)?;
        let (kind, s) = match self {
            Trailer::Collect(s) => (KIND_COLLECT, s),
            Trailer::Echo(s) => (KIND_ECHO, s),
        };
        t.fill(0);
        t[..2].copy_from_slice(&MAGIC);
        t[2] = kind;
        t[3] = s.n.min(MAX_HOPS as u8) | if s.overflow { OVERFLOW } else { 0 };
        for (i, h) in s.hops().iter().enumerate() {
            let at = 4 + 8 * i;
            t[at..at + 8].copy_from_slice(&h.pack().to_be_bytes());
        }
        Some(())
    }
}

/// Where the INT trailer of a RoCE v2 frame would start: the end of its
/// IP packet, for an IPv4 or IPv6 packet (one 802.1Q tag allowed) to UDP
/// port 4791; `None` for anything else or a frame too short to tell.
/// Reads only the Ethernet, IP and UDP headers, as a switch would.
pub fn trailer_offset(frame: &[u8]) -> Option<usize> {
    let be16 = |at: usize| Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]));
    let (ethertype, l3) = match be16(12)? {
        ETHERTYPE_VLAN => (be16(16)?, HEADER_LEN_VLAN),
        t => (t, HEADER_LEN),
    };
    let (udp, end) = match ethertype {
        ETHERTYPE_IPV4 => {
            let ihl = usize::from(frame.get(l3)? & 0xF) * 4;
            if *frame.get(l3 + 9)? != 17 {
                return None;
            }
            (l3 + ihl, l3 + usize::from(be16(l3 + 2)?))
        }
        ETHERTYPE_IPV6 => {
            if *frame.get(l3 + 6)? != 17 {
                return None;
            }
            (l3 + 40, l3 + 40 + usize::from(be16(l3 + 4)?))
        }
        _ => return None,
    };
    (be16(udp + 2)? == ROCE_UDP_PORT && end <= frame.len()).then_some(end)
}

/// What a switch does to a frame leaving one of its ports: if it carries
/// a collect trailer with room, pushes `hop` into it (in place). Returns
/// whether the frame carried a collect trailer.
pub fn stamp(frame: &mut [u8], hop: IntHop) -> bool {
    let Some(at) = trailer_offset(frame) else {
        return false;
    };
    let Some(Trailer::Collect(mut s)) = Trailer::parse(&frame[at..]) else {
        return false;
    };
    s.push(hop);
    let _ = Trailer::Collect(s).emit(&mut frame[at..]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BthRepr, Ecn, FrameRepr, IpRepr, MacAddr, Opcode, Psn};
    use core::net::Ipv4Addr;

    fn frame_with(trailer: Option<Trailer>) -> Vec<u8> {
        let bth = BthRepr::new(
            Opcode::rc(crate::wire::opcode::Op::SendOnly),
            0x11,
            Psn::new(5),
        );
        let ip = IpRepr::v4(
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 18, 0, 2),
            26,
            Ecn::Ect0,
        );
        let r = FrameRepr::roce(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            ip,
            0xc000,
            bth,
        );
        let mut buf = vec![0u8; 2048];
        let n = r.emit(&[7u8; 100], &mut buf).unwrap();
        buf.truncate(n);
        if let Some(t) = trailer {
            buf.resize(n + LEN, 0);
            t.emit(&mut buf[n..]).unwrap();
        }
        buf
    }

    #[test]
    fn a_record_packs_into_eight_bytes_and_back() {
        let h = IntHop::stamp(100_000_000_000, (1 << 24) + 77, 128 * 1000 + 5, 9000);
        assert_eq!(h.rate_code, 5);
        assert_eq!(h.ts, 77);
        assert_eq!(h.tx_units, 1000);
        assert_eq!(h.qlen_units, 70);
        assert_eq!(IntHop::unpack(h.pack()), h);
        assert_eq!(h.rate_bps(), Some(100_000_000_000));
        assert_eq!(IntHop::stamp(12_345, 0, 0, 0).rate_bps(), None);
        // A queue beyond 8 MiB saturates.
        assert_eq!(IntHop::stamp(0, 0, 0, 1 << 30).qlen_units, u16::MAX);
    }

    #[test]
    fn differences_wrap_as_the_fields_do() {
        let a = IntHop::stamp(0, TS_MASK - 9, (TX_MASK - 1) * BYTES_UNIT, 0);
        let b = IntHop::stamp(0, TS_MASK + 11, (TX_MASK + 3) * BYTES_UNIT, 0);
        assert_eq!(b.ns_since(&a), 20);
        assert_eq!(b.bytes_since(&a), 4 * BYTES_UNIT);
    }

    #[test]
    fn switches_push_into_a_collect_trailer_and_leave_the_frame_valid() {
        let mut f = frame_with(Some(Trailer::Collect(IntStack::default())));
        for i in 0..7u64 {
            assert!(stamp(&mut f, IntHop::stamp(25_000_000_000, i, i * 1280, 0)));
        }
        let parsed = crate::wire::Frame::parse(&f).unwrap();
        assert!(parsed.icrc_ok(), "the RoCE frame in front is untouched");
        let at = trailer_offset(&f).unwrap();
        assert_eq!(at, parsed.bytes().len());
        let Some(Trailer::Collect(s)) = Trailer::parse(&f[at..]) else {
            panic!("no trailer");
        };
        assert_eq!(s.n as usize, MAX_HOPS);
        assert!(s.overflow);
        assert_eq!(s.hops()[3].ts, 3);
        assert_eq!(s.hops()[3].tx_units, 30);
    }

    #[test]
    fn an_echo_or_a_plain_frame_is_left_alone() {
        let mut s = IntStack::default();
        s.push(IntHop::stamp(10_000_000_000, 1, 2, 3));
        let echo = frame_with(Some(Trailer::Echo(s)));
        let mut e = echo.clone();
        assert!(!stamp(&mut e, IntHop::default()));
        assert_eq!(e, echo);
        let at = trailer_offset(&e).unwrap();
        assert_eq!(Trailer::parse(&e[at..]), Some(Trailer::Echo(s)));

        let plain = frame_with(None);
        let mut p = plain.clone();
        assert!(!stamp(&mut p, IntHop::default()));
        assert_eq!(p, plain);
        // Ethernet padding is not a trailer.
        p.extend_from_slice(&[0; LEN]);
        assert!(!stamp(&mut p, IntHop::default()));
    }

    #[test]
    fn malformed_trailers_are_not_read() {
        let mut t = [0u8; LEN];
        Trailer::Collect(IntStack::default()).emit(&mut t).unwrap();
        assert!(Trailer::parse(&t[..LEN - 1]).is_none());
        let mut bad = t;
        bad[3] = 6;
        assert!(Trailer::parse(&bad).is_none());
        let mut bad = t;
        bad[2] = 9;
        assert!(Trailer::parse(&bad).is_none());
        assert!(trailer_offset(&[0u8; 20]).is_none());
    }
}
