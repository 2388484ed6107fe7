//! The base transport header, 12 bytes (IBTA Vol. 1 §9.2; reference B.2).
//!
//! | byte | field |
//! | --- | --- |
//! | 0 | OpCode |
//! | 1 | SE (0x80), MigReq (0x40), PadCnt (0x30), TVer (0x0F, must be 0) |
//! | 2-3 | P_Key |
//! | 4 | FECN (0x80), BECN (0x40), reserved: "resv8a", outside the ICRC |
//! | 5-7 | DestQP |
//! | 8 | AckReq (0x80), reserved (0x7F) |
//! | 9-11 | PSN |

use super::field::{set_u16, set_u24, u16_at, u24_at};
use super::opcode::Opcode;
use super::psn::Psn;
use super::{view, Error, Result};

/// BTH length.
pub const HEADER_LEN: usize = 12;
/// The default partition key (full membership of the default partition).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

view!(
    /// A checked view of a BTH.
    Bth,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Operation code, byte 0 (§9.2.1).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[0])
    }
    /// Solicited event (§9.2.2).
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }
    /// Migration request (§9.2.3); ConnectX-3 Pro sets it in ACKs, so it is
    /// carried, never validated.
    pub fn mig_req(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }
    /// Pad count: 0-3 bytes after the payload (§9.2.4).
    pub fn pad(&self) -> u8 {
        (self.b()[1] >> 4) & 3
    }
    /// Transport header version (§9.2.5); 0 is the only one.
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0x0F
    }
    /// Partition key (§9.2.6).
    pub fn pkey(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// Forward ECN; unused and ignored on RoCE v2 (A17 CA17-29).
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }
    /// Backward ECN; set in CNPs as ConnectX does (reference B.8).
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }
    /// Destination QP number, 24 bits (§9.2.7).
    pub fn dest_qp(&self) -> u32 {
        u24_at(self.b(), 5)
    }
    /// Acknowledge request (§9.2.8).
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }
    /// Packet sequence number (§9.2.9).
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), 9))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the PSN in place (retransmission of a built packet; the ICRC
    /// must be sealed again afterwards).
    pub fn set_psn(&mut self, psn: Psn) {
        set_u24(self.buffer.as_mut(), 9, psn.value());
    }
}

/// The BTH as plain values. The pad count is not here: it follows from
/// the payload length ([`super::pad_count`]) and is written by the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// Operation code (§9.2.1).
    pub opcode: Opcode,
    /// Solicited event (§9.2.2).
    pub solicited: bool,
    /// Migration request (§9.2.3).
    pub mig_req: bool,
    /// Partition key (§9.2.6).
    pub pkey: u16,
    /// Forward ECN; unused on RoCE v2 (A17 CA17-29).
    pub fecn: bool,
    /// Backward ECN; set in CNPs (reference B.8).
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    /// Acknowledge request (§9.2.8).
    pub ack_req: bool,
    /// Packet sequence number (§9.2.9).
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH with the default P_Key and every flag clear.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads a BTH with a known opcode and TVer 0.
    pub fn parse<T: AsRef<[u8]>>(b: &Bth<T>) -> Result<BthRepr> {
        if b.tver() != 0 {
            return Err(Error::BadTver(b.tver()));
        }
        let opcode = b.opcode();
        if opcode.info().is_none() {
            return Err(Error::UnknownOpcode(opcode.0));
        }
        Ok(BthRepr::read(b))
    }

    /// The fields as they are, unchecked (for a header checked before).
    pub fn read<T: AsRef<[u8]>>(b: &Bth<T>) -> BthRepr {
        BthRepr {
            opcode: b.opcode(),
            solicited: b.solicited(),
            mig_req: b.mig_req(),
            pkey: b.pkey(),
            fecn: b.fecn(),
            becn: b.becn(),
            dest_qp: b.dest_qp(),
            ack_req: b.ack_req(),
            psn: b.psn(),
        }
    }

    /// The BTH's length, always [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the BTH with pad count `pad`; returns its length.
    pub fn emit(&self, buf: &mut [u8], pad: u8) -> Result<usize> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        if self.dest_qp > 0x00FF_FFFF || pad > 3 {
            return Err(Error::FieldRange);
        }
        buf[0] = self.opcode.0;
        buf[1] = (self.solicited as u8) << 7 | (self.mig_req as u8) << 6 | pad << 4;
        set_u16(buf, 2, self.pkey);
        buf[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6;
        set_u24(buf, 5, self.dest_qp);
        buf[8] = (self.ack_req as u8) << 7;
        set_u24(buf, 9, self.psn.value());
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BTH of a real ConnectX CNP (reference B.8).
    const CX_CNP: [u8; 12] = [0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0xd2, 0, 0, 0, 0];

    #[test]
    fn parses_a_connectx_cnp_bth() {
        let b = Bth::new_checked(&CX_CNP[..]).unwrap();
        let r = BthRepr::parse(&b).unwrap();
        assert_eq!(r.opcode, Opcode::CNP);
        assert!(r.becn && !r.fecn);
        assert_eq!(r.dest_qp, 0xd2);
        assert_eq!(r.pkey, 0xffff);
        let mut out = [0u8; 12];
        r.emit(&mut out, 0).unwrap();
        assert_eq!(out, CX_CNP);
    }

    #[test]
    fn tver_and_unknown_opcodes_are_refused() {
        let mut b = CX_CNP;
        b[1] = 1;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&b[..])),
            Err(Error::BadTver(1))
        );
        b[1] = 0;
        b[0] = 0x15;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&b[..])),
            Err(Error::UnknownOpcode(0x15))
        );
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let r = BthRepr::new(Opcode(4), 1 << 24, Psn::new(0));
        assert_eq!(r.emit(&mut [0; 12], 0), Err(Error::FieldRange));
    }
}
