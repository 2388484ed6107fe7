//! The extension transport headers that follow the BTH (IBTA Vol. 1 §9.3;
//! rxe_hdr.h; reference B.4, B.5) and the CNP's reserved block (A17
//! §17.9.3). Which ones a packet carries is the opcode table's business
//! ([`super::opcode`]); their order on the wire is DETH, XRCETH, FETH,
//! RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.

use super::field::{set_u24, set_u32, set_u64, u24_at, u32_at, u64_at};
use super::{view, Error, Result};

view!(
    /// RDMA extended transport header, 16 B (§9.3.3): VA, R_Key, DMA length.
    Reth,
    16
);
view!(
    /// ACK extended transport header, 4 B (§9.3.5): syndrome, MSN.
    Aeth,
    4
);
view!(
    /// Atomic extended transport header, 28 B (§9.3.4).
    AtomicEth,
    28
);
view!(
    /// Atomic ACK extended transport header, 8 B (§9.3.6): original data.
    AtomicAckEth,
    8
);
view!(
    /// Immediate data, 4 B (§9.3.7), opaque to the transport.
    ImmDt,
    4
);
view!(
    /// Invalidate extended transport header, 4 B (§9.3.8): the R_Key to
    /// invalidate.
    Ieth,
    4
);
view!(
    /// Datagram extended transport header, 8 B (§9.3.2): Q_Key, source QP.
    Deth,
    8
);
view!(
    /// XRC extended transport header, 4 B (IBTA Vol. 1 §9.3, XRCETH; XRC
    /// requests only, right after the BTH): 8 reserved bits, then the
    /// 24-bit XRC SRQ number of the receive queue the message is for.
    Xrceth,
    4
);
view!(
    /// Flush extended transport header, 4 B (IBTA 1.5 FLUSH): selectivity
    /// level and placement type.
    Feth,
    4
);
view!(
    /// The CNP's 16 reserved bytes after the BTH (A17 §17.9.3).
    Cnp,
    16
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address of the first byte to access (§9.3.3).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// R_Key of the remote memory region (§9.3.3).
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// DMA length: bytes of the whole RDMA message (§9.3.3).
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 12)
    }
}

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Syndrome: ACK, RNR NAK or NAK and its code (§9.3.5).
    pub fn syndrome(&self) -> AckSyndrome {
        AckSyndrome::from_byte(self.buffer.as_ref()[0])
    }
    /// Message sequence number, 24 bits.
    pub fn msn(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address of the 8-byte target (§9.3.4).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// R_Key of the remote memory region (§9.3.4).
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 8)
    }
    /// The swap value (CmpSwap) or the addend (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 12)
    }
    /// The value to compare with (CmpSwap; unused by FetchAdd).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 20)
    }
}

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The remote value before the atomic operation.
    pub fn orig(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The 4 bytes read in network order.
    pub fn imm(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate (§9.3.8).
    pub fn rkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Q_Key the receiving UD QP checks (§9.3.2).
    pub fn qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0)
    }
    /// Source QP, 24 bits (byte 4 is reserved).
    pub fn src_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 5)
    }
}

impl<T: AsRef<[u8]>> Xrceth<T> {
    /// XRC SRQ number, 24 bits (byte 0 is reserved).
    pub fn srq(&self) -> u32 {
        u24_at(self.buffer.as_ref(), 1)
    }
}

impl<T: AsRef<[u8]>> Feth<T> {
    /// Selectivity level (bits 5..4).
    pub fn selectivity(&self) -> u8 {
        (self.buffer.as_ref()[3] >> 4) & 3
    }
    /// Placement type (bits 3..0).
    pub fn placement(&self) -> u8 {
        self.buffer.as_ref()[3] & 0x0F
    }
}

/// A NAK's reason (AETH syndrome 011xxxxx; IBTA §9.7.5.2.4 table 45).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NakCode {
    /// 0: PSN sequence error; the PSN is the one the responder expects.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error (R_Key, bounds, permissions).
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request (not used by RC).
    InvalidRdRequest,
    /// 5..31: reserved; the raw 5-bit value.
    Reserved(u8),
}

impl NakCode {
    /// The code from the syndrome's low 5 bits.
    pub fn from_code(c: u8) -> NakCode {
        match c & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }

    /// The 5-bit code of the syndrome's bits 4..0.
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1F,
        }
    }

    /// Short name for logs and decode output, e.g. `"psn-seq-err"`.
    pub fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "psn-seq-err",
            NakCode::InvalidRequest => "invalid-request",
            NakCode::RemoteAccessError => "remote-access-err",
            NakCode::RemoteOperationalError => "remote-op-err",
            NakCode::InvalidRdRequest => "invalid-rd-request",
            NakCode::Reserved(_) => "reserved",
        }
    }
}

/// The AETH syndrome byte (IBTA §9.7.5.2.4; reference B.5): bits 7..5
/// select ACK (000), RNR NAK (001) or NAK (011); bits 4..0 are the credit
/// count code, the RNR timer code or the NAK code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckSyndrome {
    /// ACK with an end-to-end credit code (0x1F: invalid, i.e. unlimited,
    /// which rxe always sends).
    Ack {
        /// Credit count code ([`credits`]).
        credit: u8,
    },
    /// Receiver not ready; retry after the time of `timer` ([`rnr_timer_ns`]).
    RnrNak {
        /// RNR timer code ([`rnr_timer_ns`]).
        timer: u8,
    },
    /// NAK with its reason.
    Nak(NakCode),
    /// Types 010 and 1xx are reserved; the raw byte.
    Reserved(u8),
}

/// The credit code that means "credits invalid / unlimited".
pub const CREDIT_INVALID: u8 = 0x1F;

impl AckSyndrome {
    /// Decodes a syndrome byte.
    pub fn from_byte(b: u8) -> AckSyndrome {
        let v = b & 0x1F;
        match b >> 5 {
            0 => AckSyndrome::Ack { credit: v },
            1 => AckSyndrome::RnrNak { timer: v },
            3 => AckSyndrome::Nak(NakCode::from_code(v)),
            _ => AckSyndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte.
    pub fn to_byte(self) -> u8 {
        match self {
            AckSyndrome::Ack { credit } => credit & 0x1F,
            AckSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            AckSyndrome::Nak(c) => 0x60 | c.code(),
            AckSyndrome::Reserved(b) => b,
        }
    }

    /// Whether this is a positive ACK (not a NAK, RNR NAK or reserved).
    pub fn is_ack(self) -> bool {
        matches!(self, AckSyndrome::Ack { .. })
    }
}

/// Credits of an AETH credit count code (IBTA §9.7.7.2.6 table 46); `None`
/// for code 0x1F, "invalid" (no credit limit).
pub fn credits(code: u8) -> Option<u32> {
    const T: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    ];
    T.get(code as usize).copied()
}

/// The wait an RNR NAK timer code asks for, in ns (IBTA §9.7.5.2.8 table
/// 47). Code 0 is the longest, 655.36 ms.
pub fn rnr_timer_ns(code: u8) -> u64 {
    const UNITS_OF_10US: [u64; 32] = [
        65_536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1_024,
        1_536, 2_048, 3_072, 4_096, 6_144, 8_192, 12_288, 16_384, 24_576, 32_768, 49_152,
    ];
    UNITS_OF_10US[(code & 0x1F) as usize] * 10_000
}

/// RETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RethRepr {
    /// Virtual address of the first byte to access.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// DMA length: bytes of the whole RDMA message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(v: &Reth<T>) -> RethRepr {
        RethRepr {
            va: v.va(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        }
    }
    /// Writes the 16 bytes into `b` (at least 16 B long).
    pub fn emit(&self, b: &mut [u8]) {
        set_u64(b, 0, self.va);
        set_u32(b, 8, self.rkey);
        set_u32(b, 12, self.dma_len);
    }
}

/// AETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// ACK, RNR NAK or NAK and its code.
    pub syndrome: AckSyndrome,
    /// 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(v: &Aeth<T>) -> AethRepr {
        AethRepr {
            syndrome: v.syndrome(),
            msn: v.msn(),
        }
    }
    /// Writes the 4 bytes into `b`; `FieldRange` if the MSN exceeds 24 bits.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if self.msn > 0x00FF_FFFF {
            return Err(Error::FieldRange);
        }
        b[0] = self.syndrome.to_byte();
        set_u24(b, 1, self.msn);
        Ok(())
    }
}

/// AtomicETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct AtomicEthRepr {
    /// Virtual address of the 8-byte target.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// The swap value (CmpSwap) or the addend (FetchAdd).
    pub swap_add: u64,
    /// The value to compare with (CmpSwap; unused by FetchAdd).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicEth<T>) -> AtomicEthRepr {
        AtomicEthRepr {
            va: v.va(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        }
    }
    /// Writes the 28 bytes into `b` (at least 28 B long).
    pub fn emit(&self, b: &mut [u8]) {
        set_u64(b, 0, self.va);
        set_u32(b, 8, self.rkey);
        set_u64(b, 12, self.swap_add);
        set_u64(b, 20, self.compare);
    }
}

/// DETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct DethRepr {
    /// Q_Key the receiving UD QP checks.
    pub qkey: u32,
    /// 24 bits.
    pub src_qp: u32,
}

impl DethRepr {
    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(v: &Deth<T>) -> DethRepr {
        DethRepr {
            qkey: v.qkey(),
            src_qp: v.src_qp(),
        }
    }
    /// Writes the 8 bytes into `b`; `FieldRange` if the source QP exceeds 24 bits.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if self.src_qp > 0x00FF_FFFF {
            return Err(Error::FieldRange);
        }
        set_u32(b, 0, self.qkey);
        b[4] = 0;
        set_u24(b, 5, self.src_qp);
        Ok(())
    }
}

/// FETH as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct FethRepr {
    /// Selectivity level, 2 bits.
    pub selectivity: u8,
    /// Placement type, 4 bits.
    pub placement: u8,
}

impl FethRepr {
    /// Reads the view's fields.
    pub fn parse<T: AsRef<[u8]>>(v: &Feth<T>) -> FethRepr {
        FethRepr {
            selectivity: v.selectivity(),
            placement: v.placement(),
        }
    }
    /// Writes the 4 bytes into `b`; `FieldRange` if a field exceeds its bits.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if self.selectivity > 3 || self.placement > 0x0F {
            return Err(Error::FieldRange);
        }
        b[..3].fill(0);
        b[3] = self.selectivity << 4 | self.placement;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_round_trip_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(AckSyndrome::from_byte(b).to_byte(), b);
        }
        assert_eq!(
            AckSyndrome::from_byte(0x1F),
            AckSyndrome::Ack { credit: 31 }
        );
        assert_eq!(
            AckSyndrome::from_byte(0x60),
            AckSyndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            AckSyndrome::from_byte(0x62),
            AckSyndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            AckSyndrome::from_byte(0x2E),
            AckSyndrome::RnrNak { timer: 14 }
        );
    }

    #[test]
    fn timer_and_credit_tables() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        assert_eq!(credits(0), Some(0));
        assert_eq!(credits(30), Some(32768));
        assert_eq!(credits(CREDIT_INVALID), None);
    }

    #[test]
    fn headers_round_trip() {
        let mut b = [0u8; 28];
        let a = AtomicEthRepr {
            va: 0x1122334455667788,
            rkey: 0xdeadbeef,
            swap_add: 7,
            compare: u64::MAX,
        };
        a.emit(&mut b);
        assert_eq!(
            AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()),
            a
        );
        let d = DethRepr {
            qkey: 0x11111111,
            src_qp: 0xABCDEF,
        };
        d.emit(&mut b).unwrap();
        assert_eq!(DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()), d);
        let f = FethRepr {
            selectivity: 1,
            placement: 2,
        };
        f.emit(&mut b).unwrap();
        assert_eq!(FethRepr::parse(&Feth::new_checked(&b[..]).unwrap()), f);
        assert!(Reth::new_checked(&b[..15]).is_err());
        let x = Xrceth::new_checked(&[0xFF, 0xAB, 0xCD, 0xEF][..]).unwrap();
        assert_eq!(x.srq(), 0xABCDEF, "byte 0 is reserved");
        assert!(Xrceth::new_checked(&b[..3]).is_err());
    }
}
