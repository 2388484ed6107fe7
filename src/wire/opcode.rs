//! The opcode table: what each BTH opcode means and which extension headers
//! follow the BTH (IBTA Vol. 1 §9.2.1 table 38 and §9.3; include/rdma/
//! ib_pack.h; rxe_opcode.c; reference B.3). The one place that says so:
//! parse, emit and the transport all ask [`Opcode::info`].
//!
//! An opcode is a transport (bits 7..5: RC 000, UC 001, RD 010, UD 011,
//! CNP 100, XRC 101) plus an operation (bits 4..0). RoCE v2 adds the CNP,
//! opcode 0x81 (A17 §17.9.3).
//!
//! The table holds RC (the operations of table 38 plus FLUSH and
//! ATOMIC_WRITE), UC (SEND and RDMA WRITE), UD (SEND ONLY, with DETH), XRC
//! and the CNP. XRC (0xA0-0xB7, IBTA §9.2 table 38) offers RC's operations
//! 0x00-0x14, 0x16 and 0x17 (not FLUSH or ATOMIC_WRITE); every XRC request
//! (SEND, RDMA WRITE, RDMA READ request, the atomics) carries an XRCETH
//! (§9.3, the XRC SRQ number) right after the BTH, before any RETH,
//! AtomicETH, ImmDt or IETH; XRC responses (READ responses, ACKs) carry
//! none, as on RC. RD is not in the table.

use core::fmt;

/// The transport service of an opcode (its bits 7..5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (bits 7..5 = 000).
    Rc,
    /// Unreliable Connected (001).
    Uc,
    /// Reliable Datagram (010); not in the table.
    Rd,
    /// Unreliable Datagram (011).
    Ud,
    /// RoCE v2 congestion notification (100, A17 §17.9.3).
    Cnp,
    /// Extended Reliable Connected (101).
    Xrc,
    /// Bits 7..5 = 110 or 111, reserved by IBTA.
    Reserved,
}

impl Transport {
    /// The transport's upper-case abbreviation, e.g. `"RC"`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Reserved => "RESERVED",
        }
    }

    /// The transport's opcode base (its bits 7..5).
    pub const fn base(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Rd => 0x40,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
            Transport::Xrc => 0xA0,
            Transport::Reserved => 0xE0,
        }
    }
}

/// The extension headers after the BTH, as a set. On the wire they come in
/// the order of the constants below, which is also their bit order (IBTA
/// §9.2, A17 §17.9.3): DETH, XRCETH, FETH, RETH, AtomicETH, AETH,
/// AtomicAckETH, ImmDt, IETH, then the CNP block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// The empty set: no extension headers.
    pub const NONE: HeaderSet = HeaderSet(0);
    /// Datagram ETH, 8 B (UD).
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    /// XRC ETH, 4 B (every XRC request): the XRC SRQ number.
    pub const XRCETH: HeaderSet = HeaderSet(1 << 1);
    /// Flush ETH, 4 B (FLUSH).
    pub const FETH: HeaderSet = HeaderSet(1 << 2);
    /// RDMA ETH, 16 B.
    pub const RETH: HeaderSet = HeaderSet(1 << 3);
    /// Atomic ETH, 28 B.
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 4);
    /// ACK ETH, 4 B.
    pub const AETH: HeaderSet = HeaderSet(1 << 5);
    /// Atomic ACK ETH, 8 B.
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 6);
    /// Immediate data, 4 B.
    pub const IMMDT: HeaderSet = HeaderSet(1 << 7);
    /// Invalidate ETH, 4 B.
    pub const IETH: HeaderSet = HeaderSet(1 << 8);
    /// The CNP's 16 reserved bytes.
    pub const CNP: HeaderSet = HeaderSet(1 << 9);

    /// Both sets' headers.
    pub const fn union(self, o: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | o.0)
    }
    /// Whether every header of `o` is in this set.
    pub const fn contains(self, o: HeaderSet) -> bool {
        self.0 & o.0 == o.0
    }
    /// Total length of the headers in the set (one table lookup).
    pub const fn len(self) -> usize {
        SET_LEN[(self.0 & 0x3FF) as usize] as usize
    }
    /// The headers of the set that come before header `h` (one of the
    /// single headers above) on the wire: where `h` starts, after the BTH,
    /// is their [`HeaderSet::len`].
    pub const fn before(self, h: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 & h.0.wrapping_sub(1))
    }
    /// Whether the set holds no header.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// [`HeaderSet::len`] of every set, indexed by its bits: the sum of the
/// sizes of its headers, by bit DETH 8, XRCETH 4, FETH 4, RETH 16,
/// AtomicETH 28, AETH 4, AtomicAckETH 8, ImmDt 4, IETH 4 and CNP's 16
/// reserved bytes (IBTA Vol. 1 §9.3; A17 §17.9.2).
const SET_LEN: [u8; 1024] = {
    let sizes = [8u8, 4, 4, 16, 28, 4, 8, 4, 4, 16];
    let mut t = [0u8; 1024];
    let mut set = 0;
    while set < 1024 {
        let mut i = 0;
        while i < sizes.len() {
            if set & (1 << i) != 0 {
                t[set] += sizes[i];
            }
            i += 1;
        }
        set += 1;
    }
    t
};

/// The operation of an opcode (its bits 4..0), ib_pack.h's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// First packet of a multi-packet SEND.
    SendFirst = 0x00,
    /// A middle packet of a SEND.
    SendMiddle = 0x01,
    /// Last packet of a SEND.
    SendLast = 0x02,
    /// Last packet of a SEND, with immediate data.
    SendLastWithImmediate = 0x03,
    /// A single-packet SEND.
    SendOnly = 0x04,
    /// A single-packet SEND with immediate data.
    SendOnlyWithImmediate = 0x05,
    /// First packet of a multi-packet RDMA WRITE (carries the RETH).
    RdmaWriteFirst = 0x06,
    /// A middle packet of an RDMA WRITE.
    RdmaWriteMiddle = 0x07,
    /// Last packet of an RDMA WRITE.
    RdmaWriteLast = 0x08,
    /// Last packet of an RDMA WRITE, with immediate data.
    RdmaWriteLastWithImmediate = 0x09,
    /// A single-packet RDMA WRITE (carries the RETH).
    RdmaWriteOnly = 0x0A,
    /// A single-packet RDMA WRITE with immediate data.
    RdmaWriteOnlyWithImmediate = 0x0B,
    /// RDMA READ request (RETH, no payload).
    RdmaReadRequest = 0x0C,
    /// First packet of a multi-packet READ response (carries an AETH).
    RdmaReadResponseFirst = 0x0D,
    /// A middle packet of a READ response (no AETH).
    RdmaReadResponseMiddle = 0x0E,
    /// Last packet of a READ response (carries an AETH).
    RdmaReadResponseLast = 0x0F,
    /// A single-packet READ response (carries an AETH).
    RdmaReadResponseOnly = 0x10,
    /// ACK or NAK (AETH).
    Acknowledge = 0x11,
    /// Response to an atomic (AETH + AtomicAckETH).
    AtomicAcknowledge = 0x12,
    /// Atomic compare-and-swap request (AtomicETH).
    CompareSwap = 0x13,
    /// Atomic fetch-and-add request (AtomicETH).
    FetchAdd = 0x14,
    /// Last packet of a SEND that invalidates an rkey (IETH).
    SendLastWithInvalidate = 0x16,
    /// A single-packet SEND that invalidates an rkey (IETH).
    SendOnlyWithInvalidate = 0x17,
    /// FLUSH request (FETH + RETH).
    Flush = 0x1C,
    /// ATOMIC WRITE request (RETH + 8-byte payload).
    AtomicWrite = 0x1D,
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last packet of a message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The message's one packet.
    Only,
}

/// What an opcode is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// SEND (any position, with or without immediate or invalidate).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACK or NAK.
    Ack,
    /// Atomic acknowledge.
    AtomicAck,
    /// Atomic request (compare-and-swap or fetch-and-add).
    Atomic,
    /// FLUSH request.
    Flush,
    /// ATOMIC WRITE request.
    AtomicWrite,
    /// Congestion notification packet.
    Cnp,
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode byte this row describes.
    pub opcode: Opcode,
    /// Its transport service (bits 7..5).
    pub transport: Transport,
    /// ib_pack.h's operation name, e.g. `SEND_FIRST`.
    pub op_name: &'static str,
    /// What the operation is for.
    pub class: Class,
    /// Where the packet sits in its message.
    pub position: Position,
    /// Extension headers after the BTH.
    pub headers: HeaderSet,
    /// Their total length in bytes.
    pub headers_len: u8,
    /// Whether a payload may follow the headers.
    pub payload: bool,
}

impl OpcodeInfo {
    /// Sent by a requester (a responder sends ACKs and READ responses).
    pub fn is_request(&self) -> bool {
        !matches!(
            self.class,
            Class::ReadResponse | Class::Ack | Class::AtomicAck | Class::Cnp
        )
    }
    /// Carries immediate data for the receiver's completion.
    pub fn has_immediate(&self) -> bool {
        self.headers.contains(HeaderSet::IMMDT)
    }
    /// Starts a message (FIRST or ONLY).
    pub fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }
    /// Ends a message (LAST or ONLY).
    pub fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

/// A BTH opcode byte. Any value can be held; [`Opcode::info`] says whether
/// the table knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

impl Opcode {
    /// The RoCE v2 congestion notification packet (A17 §17.9.3).
    pub const CNP: Opcode = Opcode(0x81);

    /// The opcode of operation `op` on transport `t`.
    pub const fn new(t: Transport, op: Op) -> Opcode {
        Opcode(t.base() | op as u8)
    }
    /// `op` on RC.
    pub const fn rc(op: Op) -> Opcode {
        Opcode::new(Transport::Rc, op)
    }
    /// `op` on UC.
    pub const fn uc(op: Op) -> Opcode {
        Opcode::new(Transport::Uc, op)
    }
    /// `op` on UD.
    pub const fn ud(op: Op) -> Opcode {
        Opcode::new(Transport::Ud, op)
    }
    /// `op` on XRC.
    pub const fn xrc(op: Op) -> Opcode {
        Opcode::new(Transport::Xrc, op)
    }

    /// The transport service of bits 7..5.
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Reserved,
        }
    }

    /// The table's row, or `None` for an opcode RoCE v2 peers do not send.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// Every opcode the table knows, in numeric order.
    pub fn all() -> impl Iterator<Item = &'static OpcodeInfo> {
        TABLE.iter().flatten()
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) if i.transport == Transport::Cnp => f.write_str("CNP"),
            Some(i) => write!(f, "{}_{}", i.transport.name(), i.op_name),
            None => write!(f, "OPCODE_{:#04x}", self.0),
        }
    }
}

const H: HeaderSet = HeaderSet::NONE;
const R: HeaderSet = HeaderSet::RETH;
const A: HeaderSet = HeaderSet::AETH;
const I: HeaderSet = HeaderSet::IMMDT;

/// Per operation: name, class, position, headers (without DETH), payload.
const fn op_row(op: u8) -> Option<(&'static str, Class, Position, HeaderSet, bool)> {
    use Class::*;
    use Position::*;
    Some(match op {
        0x00 => ("SEND_FIRST", Send, First, H, true),
        0x01 => ("SEND_MIDDLE", Send, Middle, H, true),
        0x02 => ("SEND_LAST", Send, Last, H, true),
        0x03 => ("SEND_LAST_WITH_IMMEDIATE", Send, Last, I, true),
        0x04 => ("SEND_ONLY", Send, Only, H, true),
        0x05 => ("SEND_ONLY_WITH_IMMEDIATE", Send, Only, I, true),
        0x06 => ("RDMA_WRITE_FIRST", Write, First, R, true),
        0x07 => ("RDMA_WRITE_MIDDLE", Write, Middle, H, true),
        0x08 => ("RDMA_WRITE_LAST", Write, Last, H, true),
        0x09 => ("RDMA_WRITE_LAST_WITH_IMMEDIATE", Write, Last, I, true),
        0x0A => ("RDMA_WRITE_ONLY", Write, Only, R, true),
        0x0B => (
            "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            Write,
            Only,
            R.union(I),
            true,
        ),
        0x0C => ("RDMA_READ_REQUEST", ReadRequest, Only, R, false),
        0x0D => ("RDMA_READ_RESPONSE_FIRST", ReadResponse, First, A, true),
        0x0E => ("RDMA_READ_RESPONSE_MIDDLE", ReadResponse, Middle, H, true),
        0x0F => ("RDMA_READ_RESPONSE_LAST", ReadResponse, Last, A, true),
        0x10 => ("RDMA_READ_RESPONSE_ONLY", ReadResponse, Only, A, true),
        0x11 => ("ACKNOWLEDGE", Ack, Only, A, false),
        0x12 => (
            "ATOMIC_ACKNOWLEDGE",
            AtomicAck,
            Only,
            A.union(HeaderSet::ATOMIC_ACK_ETH),
            false,
        ),
        0x13 => ("COMPARE_SWAP", Atomic, Only, HeaderSet::ATOMIC_ETH, false),
        0x14 => ("FETCH_ADD", Atomic, Only, HeaderSet::ATOMIC_ETH, false),
        0x16 => (
            "SEND_LAST_WITH_INVALIDATE",
            Send,
            Last,
            HeaderSet::IETH,
            true,
        ),
        0x17 => (
            "SEND_ONLY_WITH_INVALIDATE",
            Send,
            Only,
            HeaderSet::IETH,
            true,
        ),
        0x1C => ("FLUSH", Flush, Only, HeaderSet::FETH.union(R), false),
        // The 8 bytes to write travel as the payload.
        0x1D => ("ATOMIC_WRITE", AtomicWrite, Only, R, true),
        _ => return None,
    })
}

const fn row(opcode: u8) -> Option<OpcodeInfo> {
    let transport = Opcode(opcode).transport();
    let op = opcode & 0x1F;
    if opcode == Opcode::CNP.0 {
        return Some(OpcodeInfo {
            opcode: Opcode::CNP,
            transport,
            op_name: "CNP",
            class: Class::Cnp,
            position: Position::Only,
            headers: HeaderSet::CNP,
            headers_len: HeaderSet::CNP.len() as u8,
            payload: false,
        });
    }
    let allowed = match transport {
        Transport::Rc => true,
        // UC: SEND and RDMA WRITE only (IBTA §9.2.1 table 38).
        Transport::Uc => op <= 0x0B,
        // UD: SEND ONLY with and without immediate, each with a DETH.
        Transport::Ud => op == 0x04 || op == 0x05,
        // XRC: RC's operations of table 38, without FLUSH / ATOMIC_WRITE.
        Transport::Xrc => op <= 0x14 || op == 0x16 || op == 0x17,
        _ => false,
    };
    if !allowed {
        return None;
    }
    let Some((op_name, class, position, mut headers, payload)) = op_row(op) else {
        return None;
    };
    if matches!(transport, Transport::Ud) {
        headers = headers.union(HeaderSet::DETH);
    }
    // XRC requests name the XRC SRQ; responses do not.
    if matches!(transport, Transport::Xrc)
        && matches!(
            class,
            Class::Send | Class::Write | Class::ReadRequest | Class::Atomic
        )
    {
        headers = headers.union(HeaderSet::XRCETH);
    }
    Some(OpcodeInfo {
        opcode: Opcode(opcode),
        transport,
        op_name,
        class,
        position,
        headers,
        headers_len: headers.len() as u8,
        payload,
    })
}

static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = row(i as u8);
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sets_length_is_its_headers_and_before_is_what_precedes() {
        let singles = [
            (HeaderSet::DETH, 8),
            (HeaderSet::XRCETH, 4),
            (HeaderSet::FETH, 4),
            (HeaderSet::RETH, 16),
            (HeaderSet::ATOMIC_ETH, 28),
            (HeaderSet::AETH, 4),
            (HeaderSet::ATOMIC_ACK_ETH, 8),
            (HeaderSet::IMMDT, 4),
            (HeaderSet::IETH, 4),
            (HeaderSet::CNP, 16),
        ];
        for bits in 0u16..1024 {
            let set = HeaderSet(bits);
            let mut want = 0;
            for (k, &(h, n)) in singles.iter().enumerate() {
                if set.contains(h) {
                    want += n;
                }
                let before: usize = singles[..k]
                    .iter()
                    .filter(|(g, _)| set.contains(*g))
                    .map(|(_, n)| n)
                    .sum();
                assert_eq!(set.before(h).len(), before, "{bits:#b} before {k}");
            }
            assert_eq!(set.len(), want, "{bits:#b}");
        }
    }

    #[test]
    fn the_table_matches_ib_pack_h() {
        assert_eq!(Opcode::all().count(), 25 + 12 + 2 + 1 + 23);
        assert_eq!(Opcode(0x0A).to_string(), "RC_RDMA_WRITE_ONLY");
        assert_eq!(Opcode(0x24).to_string(), "UC_SEND_ONLY");
        assert_eq!(Opcode(0x64).to_string(), "UD_SEND_ONLY");
        assert_eq!(Opcode(0x81).to_string(), "CNP");
        assert_eq!(Opcode(0x15).to_string(), "OPCODE_0x15");
        assert!(Opcode(0x2C).info().is_none(), "no UC READ");
        assert!(Opcode(0x60).info().is_none(), "no UD SEND FIRST");
        let ud = Opcode(0x65).info().unwrap();
        assert_eq!(ud.headers, HeaderSet::DETH.union(HeaderSet::IMMDT));
        let rmid = Opcode::rc(Op::RdmaReadResponseMiddle).info().unwrap();
        assert!(!rmid.headers.contains(HeaderSet::AETH));
        assert_eq!(Opcode(0x12).info().unwrap().headers.len(), 12);
        assert_eq!(Opcode(0x13).info().unwrap().headers.len(), 28);
        assert_eq!(Opcode(0x81).info().unwrap().headers.len(), 16);
        assert!(Opcode(0x0F).info().unwrap().ends_message());
        assert!(!Opcode(0x0F).info().unwrap().is_request());
    }

    #[test]
    fn xrc_requests_carry_an_xrceth_and_responses_do_not() {
        let xrc: Vec<_> = Opcode::all()
            .filter(|i| i.transport == Transport::Xrc)
            .collect();
        assert_eq!(xrc.len(), 23);
        assert_eq!(xrc.first().unwrap().opcode, Opcode(0xA0));
        assert_eq!(xrc.last().unwrap().opcode, Opcode(0xB7));
        assert!(Opcode(0xB5).info().is_none());
        assert!(Opcode(0xBC).info().is_none(), "no XRC FLUSH");
        assert!(Opcode(0xBD).info().is_none(), "no XRC ATOMIC_WRITE");
        for i in &xrc {
            let rc = Opcode(i.opcode.0 & 0x1F).info().unwrap();
            assert_eq!(i.op_name, rc.op_name);
            assert_eq!(i.is_request(), rc.is_request());
            let want = if rc.is_request() {
                rc.headers.union(HeaderSet::XRCETH)
            } else {
                rc.headers
            };
            assert_eq!(i.headers, want, "{}", i.opcode);
            assert_eq!(i.headers_len as usize, want.len());
        }
        assert_eq!(Opcode(0xA6).to_string(), "XRC_RDMA_WRITE_FIRST");
        let w = Opcode(0xA6).info().unwrap();
        assert_eq!(w.headers, HeaderSet::XRCETH.union(HeaderSet::RETH));
        assert_eq!(w.headers_len, 20);
        assert_eq!(Opcode(0xB3).info().unwrap().headers_len, 32);
        assert_eq!(Opcode(0xB1).info().unwrap().headers, HeaderSet::AETH);
        assert_eq!(Opcode(0xAD).info().unwrap().headers, HeaderSet::AETH);
        assert_eq!(Opcode(0xAE).info().unwrap().headers, HeaderSet::NONE);
        assert_eq!(Opcode(0xAB).info().unwrap().headers_len, 4 + 16 + 4);
    }
}
