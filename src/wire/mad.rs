//! Management datagrams: the common MAD header (IBTA Vol. 1 §13.4.2) and
//! a whole Communication Management MAD (management class 0x07, §12.6),
//! the header followed by one CM attribute of [`super::cm`].
//!
//! On RoCE v2 a MAD travels as the 256-byte payload of a UD SEND ONLY to
//! QP1, the general services interface (§13.5; its DETH carries the Q_Key
//! [`GSI_QKEY`]), inside an ordinary RoCE v2 frame. The header:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0 | BaseVersion (1) |
//! | 1 | MgmtClass (0x07 = CM) |
//! | 2 | ClassVersion (2 for CM) |
//! | 3 | R (0x80, response) and Method (0x7F) |
//! | 4-5 | Status |
//! | 6-7 | ClassSpecific |
//! | 8-15 | TransactionID |
//! | 16-17 | AttributeID |
//! | 18-19 | reserved |
//! | 20-23 | AttributeModifier |
//!
//! The rest of the 256 bytes is the class's data; for CM, the attribute's
//! fields and its private data (§12.6.1).
//!
//! Parsing never panics: bytes that are not such a MAD give a [`MadError`].

use super::cm::CmMessage;
use super::field::{set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};

/// A MAD's length: header and data (§13.4.1); a UD payload to QP1.
pub const MAD_LEN: usize = 256;
/// The common MAD header's length (§13.4.2).
pub const HEADER_LEN: usize = 24;
/// The class data after the header (§13.4.1): 232 bytes.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;
/// The only base version (§13.4.2).
pub const BASE_VERSION: u8 = 1;
/// Management class of Communication Management (§13.4.4).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version Linux sends and expects (§12.6.1).
pub const CM_CLASS_VERSION: u8 = 2;
/// The QP number of the general services interface (§13.5.1).
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1 (§13.5.1): 0x8001_0000.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// MAD methods (§13.4.5); CM uses [`method::SEND`].
pub mod method {
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Send: every CM message (§12.6.1).
    pub const SEND: u8 = 0x03;
    /// GetResp (Get with the response bit).
    pub const GET_RESP: u8 = 0x81;
}

/// Why bytes are not a (well-formed) CM MAD, or a value that cannot be
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    /// Fewer bytes than a MAD (256) or a header needs.
    #[error("truncated: a MAD is {MAD_LEN} bytes")]
    Truncated,
    /// A base version other than 1.
    #[error("MAD base version {0} (must be 1)")]
    BadBaseVersion(u8),
    /// A management class other than CM.
    #[error("management class {0:#04x} is not CM (0x07)")]
    NotCm(u8),
    /// A CM class version other than 2.
    #[error("CM class version {0} (must be 2)")]
    BadClassVersion(u8),
    /// An attribute ID that is not one of the CM messages handled here.
    #[error("unknown CM attribute {0:#06x}")]
    UnknownAttribute(u16),
    /// The header's attribute ID is not its message's.
    #[error("the header's attribute ID is not the message's")]
    AttributeMismatch,
    /// rdma_cm private data with an unknown version.
    #[error("rdma_cm private data version {0} (must be 0)")]
    BadCmaVersion(u8),
    /// rdma_cm private data with an IP version other than 4 or 6.
    #[error("rdma_cm private data IP version {0}")]
    BadIpVersion(u8),
    /// A value that does not fit its field (a QPN over 24 bits, ...), or
    /// addresses of two families.
    #[error("a value does not fit its field")]
    FieldRange,
    /// The output buffer is smaller than the MAD.
    #[error("buffer too small for the MAD")]
    BufferTooSmall,
}

/// The result of parsing or emitting a MAD.
pub type Result<T> = core::result::Result<T, MadError>;

/// The common MAD header as plain values (§13.4.2). The 16 reserved bits
/// at bytes 18-19 are written as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadRepr {
    /// Base version, 1.
    pub base_version: u8,
    /// Management class (0x07 = CM).
    pub mgmt_class: u8,
    /// Class version (2 for CM).
    pub class_version: u8,
    /// Method, with the response bit 0x80 (§13.4.5).
    pub method: u8,
    /// Status (§13.4.7).
    pub status: u16,
    /// Class-specific field (unused by CM).
    pub class_specific: u16,
    /// Transaction ID: the requester's, echoed in the answer (§13.4.6.4).
    pub transaction_id: u64,
    /// Attribute ID: which CM message ([`super::cm::attr`]).
    pub attribute_id: u16,
    /// Attribute modifier.
    pub attribute_modifier: u32,
}

impl MadRepr {
    /// A CM header of method Send with status 0, as CM sends every message.
    pub fn cm(transaction_id: u64, attribute_id: u16) -> MadRepr {
        MadRepr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    /// Reads the header of any class; checks only the length and the base
    /// version.
    pub fn parse(b: &[u8]) -> Result<MadRepr> {
        if b.len() < HEADER_LEN {
            return Err(MadError::Truncated);
        }
        if b[0] != BASE_VERSION {
            return Err(MadError::BadBaseVersion(b[0]));
        }
        Ok(MadRepr {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: u16_at(b, 4),
            class_specific: u16_at(b, 6),
            transaction_id: u64_at(b, 8),
            attribute_id: u16_at(b, 16),
            attribute_modifier: u32_at(b, 20),
        })
    }

    /// Writes the header; returns its length.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        if b.len() < HEADER_LEN {
            return Err(MadError::BufferTooSmall);
        }
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        set_u16(b, 4, self.status);
        set_u16(b, 6, self.class_specific);
        set_u64(b, 8, self.transaction_id);
        set_u16(b, 16, self.attribute_id);
        set_u16(b, 18, 0);
        set_u32(b, 20, self.attribute_modifier);
        Ok(HEADER_LEN)
    }
}

/// A whole CM MAD: the header and the message its attribute ID names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMad {
    /// The common MAD header.
    pub hdr: MadRepr,
    /// The CM message in the data area.
    pub msg: CmMessage,
}

impl CmMad {
    /// A CM MAD of method Send with the header's attribute ID the message's.
    pub fn new(transaction_id: u64, msg: CmMessage) -> CmMad {
        CmMad {
            hdr: MadRepr::cm(transaction_id, msg.attribute_id()),
            msg,
        }
    }

    /// Reads a CM MAD from the first [`MAD_LEN`] bytes of `b` (a UD
    /// payload to QP1): base version 1, class CM, class version 2, and a
    /// known attribute.
    pub fn parse(b: &[u8]) -> Result<CmMad> {
        if b.len() < MAD_LEN {
            return Err(MadError::Truncated);
        }
        let hdr = MadRepr::parse(b)?;
        if hdr.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::NotCm(hdr.mgmt_class));
        }
        if hdr.class_version != CM_CLASS_VERSION {
            return Err(MadError::BadClassVersion(hdr.class_version));
        }
        let msg = CmMessage::parse(hdr.attribute_id, &b[HEADER_LEN..MAD_LEN])?;
        Ok(CmMad { hdr, msg })
    }

    /// Writes the 256-byte MAD; returns [`MAD_LEN`]. Reserved bits are
    /// written as zero.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        if b.len() < MAD_LEN {
            return Err(MadError::BufferTooSmall);
        }
        if self.hdr.attribute_id != self.msg.attribute_id() {
            return Err(MadError::AttributeMismatch);
        }
        self.hdr.emit(b)?;
        self.msg.emit(&mut b[HEADER_LEN..MAD_LEN])?;
        Ok(MAD_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::cm::{attr, Drep};

    #[test]
    fn the_header_round_trips_and_checks_the_base_version() {
        let h = MadRepr::cm(0x2_3b51_c8f0, attr::REQ);
        let mut b = [0xAAu8; HEADER_LEN];
        assert_eq!(h.emit(&mut b), Ok(HEADER_LEN));
        assert_eq!(&b[..4], &[1, 7, 2, 3]);
        assert_eq!(&b[16..20], &[0, 0x10, 0, 0]);
        assert_eq!(MadRepr::parse(&b), Ok(h));
        b[0] = 2;
        assert_eq!(MadRepr::parse(&b), Err(MadError::BadBaseVersion(2)));
        assert_eq!(MadRepr::parse(&b[..23]), Err(MadError::Truncated));
    }

    #[test]
    fn a_cm_mad_refuses_other_classes_versions_and_attributes() {
        let m = CmMad::new(7, CmMessage::Drep(Drep::new(1, 2)));
        let mut b = [0u8; MAD_LEN];
        assert_eq!(m.emit(&mut b), Ok(MAD_LEN));
        assert_eq!(CmMad::parse(&b).as_ref(), Ok(&m));
        assert_eq!(CmMad::parse(&b[..255]), Err(MadError::Truncated));
        let mut c = b;
        c[1] = 0x81;
        assert_eq!(CmMad::parse(&c), Err(MadError::NotCm(0x81)));
        let mut c = b;
        c[2] = 1;
        assert_eq!(CmMad::parse(&c), Err(MadError::BadClassVersion(1)));
        let mut c = b;
        c[17] = 0x19;
        assert_eq!(CmMad::parse(&c), Err(MadError::UnknownAttribute(0x19)));
        let mut wrong = m.clone();
        wrong.hdr.attribute_id = attr::REQ;
        assert_eq!(wrong.emit(&mut b), Err(MadError::AttributeMismatch));
        assert_eq!(m.emit(&mut b[..255]), Err(MadError::BufferTooSmall));
    }
}
