//! pcapng: sections, interfaces and the packet blocks.

use super::*;

/// pcapng block types. The Section Header Block's reads the same in both
/// byte orders, so it also serves as the file magic.
pub(super) const NG_SHB: u32 = 0x0a0d_0d0a;
pub(super) const NG_IDB: u32 = 0x0000_0001;
/// The obsolete Packet Block.
pub(super) const NG_OPB: u32 = 0x0000_0002;
pub(super) const NG_SPB: u32 = 0x0000_0003;
pub(super) const NG_EPB: u32 = 0x0000_0006;
/// The Section Header Block's byte-order magic, in the section's order.
pub(super) const NG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
pub(super) const NG_VERSION_MAJOR: u16 = 1;
/// A block's type and total length before its body, the total length again
/// after it.
pub(super) const NG_FRAMING_LEN: u32 = 12;
/// The fixed fields of an Enhanced Packet Block (interface, timestamp high
/// and low, captured and original length), and of an obsolete Packet Block
/// (the same with a 16-bit interface and a 16-bit drop count).
pub(super) const NG_EPB_FIXED: u32 = 20;
/// The fixed field of a Simple Packet Block: the original length.
pub(super) const NG_SPB_FIXED: u32 = 4;
/// The fixed fields of an Interface Description Block: link type, reserved,
/// snaplen.
pub(super) const NG_IDB_FIXED: u32 = 8;
/// The fixed fields of a Section Header Block after the byte-order magic:
/// major and minor version, section length.
pub(super) const NG_SHB_FIXED: u32 = 12;
pub(super) const OPT_ENDOFOPT: u16 = 0;
pub(super) const OPT_IF_TSRESOL: u16 = 9;
pub(super) const OPT_IF_TSOFFSET: u16 = 14;
/// `if_tsresol` when the option is absent: 10^-6 s.
pub(super) const TSRESOL_DEFAULT: u8 = 6;

/// A pcapng interface, as its Interface Description Block describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Interface {
    pub(super) linktype: u32,
    /// 0: no limit.
    pub(super) snaplen: u32,
    /// `if_tsresol`: a timestamp unit of 10^-n s, or 2^-n s if the high
    /// bit is set.
    pub(super) tsresol: u8,
    /// `if_tsoffset`: seconds to add to every timestamp.
    pub(super) tsoffset: i64,
}

impl Interface {
    pub(super) fn precision(&self) -> Precision {
        let coarse = if self.tsresol & 0x80 != 0 {
            // 2^-19 s is still coarser than 1 µs, 2^-20 s finer.
            self.tsresol & 0x7f <= 19
        } else {
            self.tsresol <= 6
        };
        if coarse {
            Precision::Micro
        } else {
            Precision::Nano
        }
    }

    /// `ticks` of this interface in nanoseconds since the epoch.
    pub(super) fn ts_ns(&self, ticks: u64) -> u64 {
        ng_ts_ns(ticks, self.tsresol, self.tsoffset)
    }
}

/// Converts a pcapng timestamp of `ticks` units of `tsresol` (10^-n s, or
/// 2^-n s with the high bit set) after `tsoffset` seconds to nanoseconds
/// since the epoch: exact (truncated below the nanosecond), saturated at 0
/// and `u64::MAX`.
pub(super) fn ng_ts_ns(ticks: u64, tsresol: u8, tsoffset: i64) -> u64 {
    let ticks = u128::from(ticks);
    let exp = u32::from(tsresol & 0x7f);
    // At most (2^64 - 1) * 10^9 < 2^94: every product below fits a u128.
    let ns = if tsresol & 0x80 != 0 {
        // ticks / 2^exp s; exp <= 127, so the shift is defined.
        (ticks * u128::from(NS_PER_SEC)) >> exp
    } else if exp <= 9 {
        ticks * 10u128.pow(9 - exp)
    } else {
        // 10^(exp - 9) past u128 (exp - 9 > 38) exceeds any ticks: 0.
        10u128.checked_pow(exp - 9).map_or(0, |unit| ticks / unit)
    };
    // |tsoffset| * 10^9 < 2^93, so the sum fits an i128 too.
    let total = ns as i128 + i128::from(tsoffset) * i128::from(NS_PER_SEC);
    u64::try_from(total.max(0)).unwrap_or(u64::MAX)
}

/// The state of a pcapng file: the current section and its interfaces.
#[derive(Debug)]
pub(super) struct Ng {
    /// The byte order of the current section.
    pub(super) order: Order,
    /// The version of the current section.
    pub(super) version: (u16, u16),
    /// The interfaces of the current section, by id.
    pub(super) interfaces: Vec<Interface>,
    /// The first interface of the file (interface 0 of the first section
    /// that has one), for [`Reader::linktype`] and the like.
    pub(super) first: Option<Interface>,
    /// The index of the block being read or next to read.
    pub(super) block: u64,
    /// The type and total length of a block whose header [`Reader::new`]
    /// read while looking for the first interface, and whose body is next.
    pub(super) peeked: Option<(u32, u32)>,
}

impl Ng {
    /// Reads the first Section Header Block, whose type has been read, then
    /// the blocks after it up to the first Interface Description Block, so
    /// that the reader knows the file's first link type before the frames.
    /// Stops earlier at a packet block (keeping its header for
    /// [`Ng::next_frame`]), and at the end of the input (then true).
    pub(super) fn new<R: Read>(
        inner: &mut R,
        buf: &mut Vec<u8>,
        magic: [u8; 4],
    ) -> Result<(Self, bool), PcapError> {
        let mut ng = Ng {
            order: Order::Little,
            version: (0, 0),
            interfaces: Vec::new(),
            first: None,
            block: 0,
            peeked: None,
        };
        let (ty, len) = ng.header_after_type(inner, magic)?;
        ng.body(inner, buf, ty, len)?;
        loop {
            match ng.next_header(inner)? {
                None => return Ok((ng, true)),
                Some((ty @ (NG_EPB | NG_SPB | NG_OPB), len)) => {
                    ng.peeked = Some((ty, len));
                    return Ok((ng, false));
                }
                Some((ty, len)) => {
                    ng.body(inner, buf, ty, len)?;
                    if ty == NG_IDB {
                        return Ok((ng, false));
                    }
                }
            }
        }
    }

    /// Reads blocks until a frame, which it leaves in `buf`.
    pub(super) fn next_frame<R: Read>(
        &mut self,
        inner: &mut R,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Frame>, PcapError> {
        // Each turn reads at least 12 bytes: the loop ends with the input.
        while let Some((ty, len)) = self.next_header(inner)? {
            if let Some(frame) = self.body(inner, buf, ty, len)? {
                return Ok(Some(frame));
            }
        }
        Ok(None)
    }

    /// The type and total length of the next block, `None` at a clean end
    /// of the input (between blocks).
    pub(super) fn next_header<R: Read>(
        &mut self,
        inner: &mut R,
    ) -> Result<Option<(u32, u32)>, PcapError> {
        if let Some(h) = self.peeked.take() {
            return Ok(Some(h));
        }
        let mut t = [0u8; 4];
        match read_full(inner, &mut t)? {
            0 => Ok(None),
            4 => self.header_after_type(inner, t).map(Some),
            _ => Err(PcapError::NgTruncated { block: self.block }),
        }
    }

    /// Reads the total length of a block whose type bytes are `t`, and
    /// checks it. A Section Header Block starts a section: this reads its
    /// byte-order magic too and switches to that order.
    pub(super) fn header_after_type<R: Read>(
        &mut self,
        inner: &mut R,
        t: [u8; 4],
    ) -> Result<(u32, u32), PcapError> {
        let block = self.block;
        let mut l = [0u8; 4];
        if read_full(inner, &mut l)? < 4 {
            return Err(PcapError::NgTruncated { block });
        }
        // The section header's type reads the same in both orders.
        let ty = if t == NG_SHB.to_be_bytes() {
            let mut m = [0u8; 4];
            if read_full(inner, &mut m)? < 4 {
                return Err(PcapError::NgTruncated { block });
            }
            self.order = match u32::from_le_bytes(m) {
                NG_BYTE_ORDER_MAGIC => Order::Little,
                x if x.swap_bytes() == NG_BYTE_ORDER_MAGIC => Order::Big,
                _ => {
                    return Err(PcapError::NgBadByteOrder {
                        block,
                        magic: u32::from_be_bytes(m),
                    })
                }
            };
            NG_SHB
        } else {
            self.order.u32(t)
        };
        let len = self.order.u32(l);
        let fixed = match ty {
            NG_SHB => 4 + NG_SHB_FIXED,
            NG_IDB => NG_IDB_FIXED,
            NG_EPB | NG_OPB => NG_EPB_FIXED,
            NG_SPB => NG_SPB_FIXED,
            _ => 0,
        };
        if len % 4 != 0 || len < NG_FRAMING_LEN + fixed {
            return Err(PcapError::NgBadBlockLength {
                block,
                block_type: ty,
                len,
            });
        }
        Ok((ty, len))
    }

    /// Reads the body and the trailing length of block `ty` of total length
    /// `len` (checked by [`Ng::header_after_type`]); `Some` for a frame,
    /// left in `buf`.
    pub(super) fn body<R: Read>(
        &mut self,
        inner: &mut R,
        buf: &mut Vec<u8>,
        ty: u32,
        len: u32,
    ) -> Result<Option<Frame>, PcapError> {
        let block = self.block;
        let truncated = PcapError::NgTruncated { block };
        let order = self.order;
        // The bytes between the header and the trailing length.
        let body = len - NG_FRAMING_LEN;
        let mut frame = None;
        // What is left of the body after the fields read below.
        let rest = match ty {
            NG_SHB => {
                let mut h = [0u8; NG_SHB_FIXED as usize];
                if read_full(inner, &mut h)? < h.len() {
                    return Err(truncated);
                }
                // Then the section length (unused: this reader does not
                // seek) and options (none used).
                let major = order.u16(bytes(&h, 0));
                let minor = order.u16(bytes(&h, 2));
                if major != NG_VERSION_MAJOR {
                    return Err(PcapError::NgBadVersion {
                        block,
                        major,
                        minor,
                    });
                }
                self.version = (major, minor);
                self.interfaces.clear();
                // The byte-order magic was read with the header.
                body - 4 - NG_SHB_FIXED
            }
            NG_IDB => {
                if !fill(inner, buf, body as usize)? {
                    return Err(truncated);
                }
                let iface = parse_idb(order, &buf[..body as usize], block)?;
                self.first.get_or_insert(iface);
                self.interfaces.push(iface);
                0
            }
            NG_EPB | NG_OPB => {
                let mut h = [0u8; NG_EPB_FIXED as usize];
                if read_full(inner, &mut h)? < h.len() {
                    return Err(truncated);
                }
                let interface = if ty == NG_EPB {
                    order.u32(bytes(&h, 0))
                } else {
                    // A 16-bit interface id, then a 16-bit drop count.
                    u32::from(order.u16(bytes(&h, 0)))
                };
                let ticks =
                    u64::from(order.u32(bytes(&h, 4))) << 32 | u64::from(order.u32(bytes(&h, 8)));
                let captured = order.u32(bytes(&h, 12));
                let orig_len = order.u32(bytes(&h, 16));
                let iface = self.interface(interface)?;
                let room = body - NG_EPB_FIXED;
                if captured > room {
                    return Err(PcapError::NgCapturedBeyondBlock {
                        block,
                        captured,
                        room,
                    });
                }
                if !fill(inner, buf, captured as usize)? {
                    return Err(truncated);
                }
                frame = Some(Frame {
                    ts_ns: iface.ts_ns(ticks),
                    orig_len,
                    len: captured as usize,
                    linktype: iface.linktype,
                });
                // The padding to 32 bits and the options.
                room - captured
            }
            NG_SPB => {
                let mut h = [0u8; NG_SPB_FIXED as usize];
                if read_full(inner, &mut h)? < h.len() {
                    return Err(truncated);
                }
                let orig_len = order.u32(bytes(&h, 0));
                let iface = self.interface(0)?;
                // No captured length: the frame, cut to the snaplen, fills
                // the block but for its padding.
                let room = body - NG_SPB_FIXED;
                let mut captured = orig_len.min(room);
                if iface.snaplen != 0 {
                    captured = captured.min(iface.snaplen);
                }
                if !fill(inner, buf, captured as usize)? {
                    return Err(truncated);
                }
                frame = Some(Frame {
                    ts_ns: 0,
                    orig_len,
                    len: captured as usize,
                    linktype: iface.linktype,
                });
                room - captured
            }
            // Name resolution, interface statistics, decryption secrets,
            // custom and unknown blocks.
            _ => body,
        };
        if !skip(inner, u64::from(rest))? {
            return Err(truncated);
        }
        let mut t = [0u8; 4];
        if read_full(inner, &mut t)? < 4 {
            return Err(truncated);
        }
        let tail = order.u32(t);
        if tail != len {
            return Err(PcapError::NgLengthMismatch {
                block,
                head: len,
                tail,
            });
        }
        self.block += 1;
        Ok(frame)
    }

    /// Interface `id` of the current section.
    pub(super) fn interface(&self, id: u32) -> Result<Interface, PcapError> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.interfaces.get(i))
            .copied()
            .ok_or(PcapError::NgUnknownInterface {
                block: self.block,
                interface: id,
                count: self.interfaces.len(),
            })
    }
}

/// Parses the body of an Interface Description Block (block `block`):
/// link type, reserved, snaplen, options.
pub(super) fn parse_idb(order: Order, b: &[u8], block: u64) -> Result<Interface, PcapError> {
    let mut iface = Interface {
        // The upper 16 bits are reserved.
        linktype: u32::from(order.u16(bytes(b, 0))),
        snaplen: order.u32(bytes(b, 4)),
        tsresol: TSRESOL_DEFAULT,
        tsoffset: 0,
    };
    let mut opts = &b[NG_IDB_FIXED as usize..];
    // Each option: code, length, value padded to 32 bits. The body is a
    // multiple of 4 bytes, so what is left always is too.
    while opts.len() >= 4 {
        let code = order.u16(bytes(opts, 0));
        let len = order.u16(bytes(opts, 2));
        if code == OPT_ENDOFOPT {
            break;
        }
        let bad = PcapError::NgBadOption { block, code, len };
        let Some(value) = opts.get(4..4 + usize::from(len)) else {
            return Err(bad);
        };
        match code {
            OPT_IF_TSRESOL => match value {
                [resol] => iface.tsresol = *resol,
                _ => return Err(bad),
            },
            OPT_IF_TSOFFSET => match <[u8; 8]>::try_from(value) {
                Ok(v) => iface.tsoffset = order.u64(v) as i64,
                Err(_) => return Err(bad),
            },
            _ => {}
        }
        let padded = (4 + usize::from(len)).next_multiple_of(4);
        // Within `opts`: it is a multiple of 4 and holds 4 + len bytes.
        opts = &opts[padded..];
    }
    Ok(iface)
}
