//! ferroce's selective-repeat trailer: what a responder needs to place a
//! SEND or WRITE packet that arrives ahead of its turn, and what it tells
//! the requester of such a packet, so that a loss costs one resend rather
//! than a window (the scheme of IRN: Mittal et al., "Revisiting Network
//! Support for RDMA", SIGCOMM 2018, §3 and §5.2).
//!
//! **Not standard RoCE.** It is sent only on a QP whose two ends both
//! asked for selective repeat (the address vector's `recovery`), never
//! toward an unknown peer. Like the INT trailer ([`super::int`]) it sits
//! after the IP packet, where a standard receiver does not look, after
//! the INT trailer when the path has both; the RoCE v2 frame in front of
//! it is unchanged, lengths and ICRC included (A17 §17.3.3), so a capture
//! still decodes as RoCE v2 and the acknowledgement that carries a
//! selective acknowledgement is a standard NAK PSN sequence error
//! (IBTA §9.7.5.2.4) to any reader that ignores the trailer.
//!
//! # Layout (big-endian)
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..2 | magic `0xF1 0x5E` |
//! | 2 | kind: 1 place (a request), 2 sack (an acknowledgement) |
//!
//! then, for *place* ([`PLACE_LEN`] = 29 bytes in all), the message the
//! packet belongs to, which the FIRST packet's headers name and a MIDDLE
//! or LAST does not (IRN §5.2 adds the same to every packet):
//!
//! | bytes | field |
//! | --- | --- |
//! | 3..6 | the message's first PSN |
//! | 6..9 | its receive sequence number: how many messages that consume a receive WQE came before it on the QP (modulo 2^24) |
//! | 9..13 | a WRITE's R_Key (0 for a SEND) |
//! | 13..21 | a WRITE's virtual address of its first byte (0 for a SEND) |
//! | 21..25 | the message's length in bytes |
//!
//! and for *sack* ([`SACK_LEN`] = 10 bytes in all): bytes 3..6, the PSN
//! of the packet received out of order that this NAK answers. The NAK's
//! own PSN is the responder's expected PSN: every packet before it has
//! arrived (the cumulative acknowledgement).
//!
//! Both end with a CRC-32 (IEEE 802.3) of the trailer's bytes before it:
//! the ICRC ends where the trailer begins, and a flipped bit in an
//! unchecked address would write a message's data elsewhere. A trailer
//! whose CRC does not match is no trailer: the packet is not placed ahead
//! of its turn, the NAK is taken as a plain one.
//!
//! The place trailer is as short as it is so that the largest request of
//! a 4096-byte path MTU over IPv6 (a WRITE ONLY with immediate) still
//! fits the 4224-byte frame buffers.

use super::Psn;

/// A place trailer's length.
pub const PLACE_LEN: usize = 29;
/// A sack trailer's length.
pub const SACK_LEN: usize = 10;
/// The longest trailer.
pub const MAX_LEN: usize = PLACE_LEN;

const MAGIC: [u8; 2] = [0xF1, 0x5E];
const KIND_PLACE: u8 = 1;
const KIND_SACK: u8 = 2;
const MASK_24: u32 = 0x00FF_FFFF;

/// Where a request packet's message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Placement {
    /// The PSN of the message's first packet: a packet's offset in the
    /// message is its PSN's distance from it times the path MTU.
    pub first_psn: Psn,
    /// Messages that consumed a receive WQE before this one (24 bits,
    /// wrapping): the receive WQE a SEND (or a WRITE with immediate) takes.
    pub rsn: u32,
    /// A WRITE's R_Key.
    pub rkey: u32,
    /// A WRITE's address of its first byte.
    pub va: u64,
    /// The message's length.
    pub len: u32,
}

/// What a trailer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrTrailer {
    /// A request's: its message.
    Place(Placement),
    /// A NAK's: the packet received out of order.
    Sack(Psn),
}

fn u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

fn put_u24(b: &mut [u8], v: u32) {
    b.copy_from_slice(&(v & MASK_24).to_be_bytes()[1..]);
}

impl SrTrailer {
    /// Its length on the wire.
    pub fn len(&self) -> usize {
        match self {
            SrTrailer::Place(_) => PLACE_LEN,
            SrTrailer::Sack(_) => SACK_LEN,
        }
    }

    /// Never empty (clippy's pair of [`SrTrailer::len`]).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Reads the trailer that starts `tail`; `None` when there is none (a
    /// standard frame, padding, a bad magic, kind, length or CRC).
    pub fn parse(tail: &[u8]) -> Option<SrTrailer> {
        let h = tail.get(..3)?;
        if h[..2] != MAGIC {
            return None;
        }
        let n = match h[2] {
            KIND_PLACE => PLACE_LEN,
            KIND_SACK => SACK_LEN,
            _ => return None,
        };
        let t = tail.get(..n)?;
        let crc = u32::from_be_bytes(t[n - 4..].try_into().ok()?);
        if crc32fast::hash(&t[..n - 4]) != crc {
            return None;
        }
        let be32 = |at: usize| u32::from_be_bytes([t[at], t[at + 1], t[at + 2], t[at + 3]]);
        Some(match h[2] {
            KIND_PLACE => SrTrailer::Place(Placement {
                first_psn: Psn::new(u24(&t[3..6])),
                rsn: u24(&t[6..9]),
                rkey: be32(9),
                va: u64::from_be_bytes(t[13..21].try_into().ok()?),
                len: be32(21),
            }),
            _ => SrTrailer::Sack(Psn::new(u24(&t[3..6]))),
        })
    }

    /// Writes the trailer at the start of `buf`; `None` if it does not fit.
    pub fn emit(&self, buf: &mut [u8]) -> Option<()> {
        let b = buf.get_mut(..self.len())?;
        b[..2].copy_from_slice(&MAGIC);
        match self {
            SrTrailer::Place(p) => {
                b[2] = KIND_PLACE;
                put_u24(&mut b[3..6], p.first_psn.value());
                put_u24(&mut b[6..9], p.rsn);
                b[9..13].copy_from_slice(&p.rkey.to_be_bytes());
                b[13..21].copy_from_slice(&p.va.to_be_bytes());
                b[21..25].copy_from_slice(&p.len.to_be_bytes());
            }
            SrTrailer::Sack(psn) => {
                b[2] = KIND_SACK;
                put_u24(&mut b[3..6], psn.value());
            }
        }
        let n = b.len();
        let crc = crc32fast::hash(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_be_bytes());
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_round_trip_and_anything_else_is_no_trailer() {
        let place = SrTrailer::Place(Placement {
            first_psn: Psn::new(0xAB_CDEF),
            rsn: 7,
            rkey: 0x1234_5678,
            va: 0x7F00_0000_1000,
            len: 70_000,
        });
        let sack = SrTrailer::Sack(Psn::new(0x00_0102));
        for t in [place, sack] {
            let mut b = [0u8; MAX_LEN + 3];
            t.emit(&mut b).unwrap();
            assert_eq!(SrTrailer::parse(&b[..t.len()]), Some(t));
            assert_eq!(SrTrailer::parse(&b[..t.len() - 1]), None, "truncated");
            let mut bad = b;
            bad[0] = 0;
            assert_eq!(SrTrailer::parse(&bad), None, "magic");
            let mut bad = b;
            bad[2] = 9;
            assert_eq!(SrTrailer::parse(&bad), None, "kind");
            let mut bad = b;
            bad[5] ^= 0x10;
            assert_eq!(SrTrailer::parse(&bad), None, "a flipped bit");
        }
        assert_eq!(
            hex(&{
                let mut b = [0u8; SACK_LEN];
                sack.emit(&mut b).unwrap();
                b
            }),
            format!(
                "f15e02000102{:08x}",
                crc32fast::hash(&[0xf1, 0x5e, 2, 0, 1, 2])
            )
        );
        assert_eq!(SrTrailer::parse(&[0u8; 40]), None, "Ethernet padding");
        assert!(sack.emit(&mut [0u8; 7]).is_none());
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
