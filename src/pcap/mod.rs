//! Capture files: a [`Reader`] of classic pcap (the libpcap file format) and
//! pcapng (Wireshark's default), and a [`Writer`] of classic pcap only.
//!
//! # Classic pcap
//!
//! A 24-byte global header (magic, version 2.4, thiszone, sigfigs, snaplen,
//! link type), then a 16-byte record header before each frame (seconds,
//! fraction, captured length, original length). Both timestamp variants are
//! supported: microseconds (magic `0xa1b2c3d4`) and nanoseconds (magic
//! `0xa1b23c4d`). Files are read in either byte order (the magic tells
//! which) and always written little-endian, the native order of the machines
//! ferroce runs on.
//!
//! # pcapng
//!
//! Read only, after the IETF draft `draft-ietf-opsawg-pcapng`: a file is one
//! or more sections, each a Section Header Block (type `0x0a0d0d0a`, byte
//! order magic `0x1a2b3c4d` in either order) followed by blocks in that
//! section's byte order. Each section has its own interfaces, described by
//! Interface Description Blocks: a link type, a snaplen, and the
//! `if_tsresol` (default 10^-6 s) and `if_tsoffset` options that give the
//! unit and the origin of its timestamps. Frames come in Enhanced Packet
//! Blocks, Simple Packet Blocks (interface 0, no timestamp: 0) and the
//! obsolete Packet Blocks; every other block (name resolution, interface
//! statistics, decryption secrets, custom, unknown) is skipped by its length.
//! Each [`Record`] carries its interface's link type.
//!
//! # Both
//!
//! The reader tells the two formats apart by the first four bytes, in
//! [`Reader::new`] and [`open`]. Timestamps are `u64` nanoseconds since the
//! Unix epoch on both sides, converted exactly from the file's unit
//! (truncated below the nanosecond, saturated at 0 and `u64::MAX`); a
//! microsecond file keeps them to the microsecond (the nanoseconds are
//! truncated on write).
//!
//! Reading never trusts the file: a bad magic, a file that ends inside a
//! header, a block or a frame, a length that contradicts another, or a frame
//! of an interface the section does not describe is an error ([`PcapError`]),
//! never a panic or a huge allocation.

#![deny(unsafe_code)]

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

mod classic;
mod ng;
#[cfg(test)]
mod tests;

use classic::Classic;
use ng::{Ng, NG_SHB};

/// `LINKTYPE_ETHERNET`: frames start with the Ethernet header.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// The snaplen [`create`] writes, and the least captured length the
/// [`Reader`] accepts in a classic file whatever its snaplen says (some
/// writers put 0 or 65535 there and still store longer frames).
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// The magic of microsecond files, as a `u32` in the file's byte order.
const MAGIC_MICRO: u32 = 0xa1b2_c3d4;
/// The magic of nanosecond files.
const MAGIC_NANO: u32 = 0xa1b2_3c4d;

const VERSION_MAJOR: u16 = 2;
const VERSION_MINOR: u16 = 4;

/// Bytes in the global header at the start of the file.
const GLOBAL_HEADER_LEN: usize = 24;
/// Bytes in the header before each record's data.
const RECORD_HEADER_LEN: usize = 16;

/// The first read of a record's data grows the buffer to at most this many
/// bytes beyond what the file has been shown to hold, so a corrupt length
/// below the limit costs memory only as far as the file really goes.
const GROW_STEP: usize = 256 * 1024;

const NS_PER_SEC: u64 = 1_000_000_000;
const NS_PER_US: u64 = 1_000;

/// The unit of the fractional part of each timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Microseconds (magic `0xa1b2c3d4`), the common variant.
    Micro,
    /// Nanoseconds (magic `0xa1b23c4d`).
    Nano,
}

impl Precision {
    fn magic(self) -> u32 {
        match self {
            Precision::Micro => MAGIC_MICRO,
            Precision::Nano => MAGIC_NANO,
        }
    }

    /// Nanoseconds per unit of the fractional field.
    fn ns_per_unit(self) -> u64 {
        match self {
            Precision::Micro => NS_PER_US,
            Precision::Nano => 1,
        }
    }
}

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// When the frame was captured, in nanoseconds since the Unix epoch
    /// (a multiple of 1000 when read from a microsecond file; 0 for a
    /// pcapng Simple Packet Block, which has no timestamp).
    pub ts_ns: u64,
    /// The frame's length on the wire; more than `data.len()` when the
    /// capture kept only the first snaplen bytes.
    pub orig_len: u32,
    /// The link type of the frame ([`LINKTYPE_ETHERNET`] for Ethernet): in
    /// a classic file the file's (low 16 bits, as [`Reader::linktype`]), in
    /// pcapng that of the frame's interface.
    pub linktype: u32,
    /// The bytes captured.
    pub data: &'a [u8],
}

/// Why a pcap or pcapng file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("pcap I/O error: {0}")]
    /// Reading or writing the underlying stream failed.
    Io(#[from] io::Error),
    /// Opening or creating a file failed.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// The input ends before the 24-byte global header does (or, for any
    /// format, before its 4-byte magic).
    #[error("not a pcap file: {len} bytes, shorter than the 24-byte global header")]
    ShortHeader {
        /// Bytes in the input.
        len: usize,
    },
    /// The first four bytes are no pcap or pcapng magic; the value is those
    /// bytes in file order (as a hex dump shows them).
    #[error(
        "not a pcap or pcapng file: it starts 0x{0:08x}, expected a1b2c3d4 or a1b23c4d in \
         either byte order (classic pcap) or 0a0d0d0a (pcapng)"
    )]
    BadMagic(u32),
    /// The global header names a format version other than 2.x.
    #[error("unsupported pcap format version {major}.{minor} (expected 2.4)")]
    BadVersion {
        /// Major version in the header.
        major: u16,
        /// Minor version in the header.
        minor: u16,
    },
    /// The input ends inside the header or the data of record `record`
    /// (counted from 0).
    #[error("pcap record {record} (from 0) is truncated: the file ends inside its header or data")]
    Truncated {
        /// The record, counted from 0.
        record: u64,
    },
    /// Record `record` (counted from 0) claims more captured bytes than the
    /// larger of the file's snaplen and 262144: the file is corrupt.
    #[error(
        "pcap record {record} (from 0) claims {len} captured bytes, more than the file's \
         snaplen and 262144 allow: the file is corrupt"
    )]
    RecordTooLong {
        /// The record, counted from 0.
        record: u64,
        /// The captured length it claims.
        len: u32,
    },
    /// The input ends inside pcapng block `block` (counted from 0, the
    /// first Section Header Block being block 0).
    #[error("pcapng block {block} (from 0) is truncated: the file ends inside it")]
    NgTruncated {
        /// The block, counted from 0.
        block: u64,
    },
    /// A pcapng block's total length is not a multiple of 4, or too short
    /// for the fixed fields of its type.
    #[error(
        "pcapng block {block} (from 0, type 0x{block_type:08x}) has a total length of {len} \
         bytes: not a multiple of 4 or shorter than its fixed fields; the file is corrupt"
    )]
    NgBadBlockLength {
        /// The block, counted from 0.
        block: u64,
        /// Its block type.
        block_type: u32,
        /// Its total length field.
        len: u32,
    },
    /// The total length at the end of a pcapng block differs from the one
    /// at its start.
    #[error(
        "pcapng block {block} (from 0) starts with a total length of {head} bytes but ends \
         with {tail}: the file is corrupt"
    )]
    NgLengthMismatch {
        /// The block, counted from 0.
        block: u64,
        /// Total length at the block's start.
        head: u32,
        /// Total length at the block's end.
        tail: u32,
    },
    /// A pcapng Section Header Block's byte-order magic is neither
    /// `1a2b3c4d` nor `4d3c2b1a`; the value is its bytes in file order.
    #[error(
        "pcapng block {block} (from 0) is a section header with byte-order magic 0x{magic:08x}, \
         expected 1a2b3c4d in either byte order"
    )]
    NgBadByteOrder {
        /// The block, counted from 0.
        block: u64,
        /// The byte-order magic, in file order.
        magic: u32,
    },
    /// A pcapng section's major version is not 1.
    #[error(
        "pcapng block {block} (from 0): unsupported section version {major}.{minor} (expected 1.0)"
    )]
    NgBadVersion {
        /// The block, counted from 0.
        block: u64,
        /// Major version in the section header.
        major: u16,
        /// Minor version in the section header.
        minor: u16,
    },
    /// A pcapng packet block names an interface its section has not
    /// described (yet): `count` interfaces are known.
    #[error(
        "pcapng block {block} (from 0) is a packet of interface {interface}, but its section \
         describes only {count} interface(s) before it"
    )]
    NgUnknownInterface {
        /// The block, counted from 0.
        block: u64,
        /// The interface ID it names.
        interface: u32,
        /// Interfaces the section has described before it.
        count: usize,
    },
    /// A pcapng packet block claims more captured bytes than it holds.
    #[error(
        "pcapng block {block} (from 0) claims {captured} captured bytes but has room for \
         {room}: the file is corrupt"
    )]
    NgCapturedBeyondBlock {
        /// The block, counted from 0.
        block: u64,
        /// Captured length it claims.
        captured: u32,
        /// Bytes the block has room for.
        room: u32,
    },
    /// An option of a pcapng Interface Description Block runs past the end
    /// of the block, or has the wrong length for its code (`if_tsresol`
    /// takes 1 byte, `if_tsoffset` 8).
    #[error(
        "pcapng block {block} (from 0): interface option {code} of {len} bytes is malformed \
         (past the end of the block or the wrong size for its code)"
    )]
    NgBadOption {
        /// The block, counted from 0.
        block: u64,
        /// The option code.
        code: u16,
        /// The option's length.
        len: u16,
    },
    /// A frame to write is longer than the 32-bit length field can say.
    #[error("cannot write pcap record {record}: {len} bytes do not fit a 32-bit length")]
    FrameTooLarge {
        /// The record, counted from 0.
        record: u64,
        /// The frame's length.
        len: usize,
    },
    /// A timestamp to write is past the 32-bit seconds field (year 2106).
    #[error(
        "cannot write pcap record {record}: timestamp {ts_ns} ns is past the 32-bit seconds field"
    )]
    TimestampOutOfRange {
        /// The record, counted from 0.
        record: u64,
        /// The timestamp, in ns since the Unix epoch.
        ts_ns: u64,
    },
    /// A record to write has another link type than the file: a classic
    /// pcap file has one for all its frames.
    #[error(
        "cannot write pcap record {record}: its link type {record_linktype} is not the file's \
         ({file_linktype})"
    )]
    LinktypeMismatch {
        /// The record, counted from 0.
        record: u64,
        /// The record's link type.
        record_linktype: u32,
        /// The file's link type.
        file_linktype: u32,
    },
    /// A writer needs a snaplen of at least one byte.
    #[error("pcap snaplen must be at least 1")]
    ZeroSnaplen,
}

/// The byte order of a file's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Little,
    Big,
}

impl Order {
    fn u16(self, b: [u8; 2]) -> u16 {
        match self {
            Order::Little => u16::from_le_bytes(b),
            Order::Big => u16::from_be_bytes(b),
        }
    }

    fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            Order::Little => u32::from_le_bytes(b),
            Order::Big => u32::from_be_bytes(b),
        }
    }

    fn u64(self, b: [u8; 8]) -> u64 {
        match self {
            Order::Little => u64::from_le_bytes(b),
            Order::Big => u64::from_be_bytes(b),
        }
    }
}

/// `N` bytes of `buf` from `at` (the callers' offsets are inside fixed-size
/// headers, or checked against the length first).
fn bytes<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at..at + N]);
    out
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Reads `len` bytes into `buf[..len]`; false if the input ends first.
/// `buf` grows at most [`GROW_STEP`] (or double) past what has been read,
/// so memory follows the bytes the file really holds, whatever `len` says.
fn fill<R: Read>(r: &mut R, buf: &mut Vec<u8>, len: usize) -> io::Result<bool> {
    let mut filled = 0;
    while filled < len {
        let end = len.min(buf.len().max(filled.saturating_mul(2)).max(GROW_STEP));
        if buf.len() < end {
            buf.resize(end, 0);
        }
        let got = read_full(r, &mut buf[filled..end])?;
        if got < end - filled {
            return Ok(false);
        }
        filled = end;
    }
    Ok(true)
}

/// Reads and drops `n` bytes (without buffering them); false if the input
/// ends first.
fn skip<R: Read>(r: &mut R, n: u64) -> io::Result<bool> {
    let got = io::copy(&mut r.by_ref().take(n), &mut io::sink())?;
    Ok(got == n)
}

/// A frame read into the reader's buffer: its timestamp, original length,
/// captured length and link type.
struct Frame {
    ts_ns: u64,
    orig_len: u32,
    len: usize,
    linktype: u32,
}

/// The format of the file a [`Reader`] reads, with its state.
#[derive(Debug)]
enum Format {
    Classic(Classic),
    Ng(Ng),
}

/// Reads a classic pcap or a pcapng file frame by frame.
///
/// After an error or the end of the file, [`Reader::next_record`] returns
/// `Ok(None)`.
#[derive(Debug)]
pub struct Reader<R: Read> {
    inner: R,
    format: Format,
    /// Holds the current record's data; grows, never shrinks.
    buf: Vec<u8>,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Tells the format from the first four bytes and reads the file's
    /// header: the global header of a classic file; the first Section
    /// Header Block of a pcapng file, and the blocks after it up to the
    /// first Interface Description Block (so that [`Reader::linktype`] is
    /// known before the first frame).
    pub fn new(mut inner: R) -> Result<Self, PcapError> {
        let mut magic = [0u8; 4];
        let n = read_full(&mut inner, &mut magic)?;
        if n < 4 {
            return Err(PcapError::ShortHeader { len: n });
        }
        let mut buf = Vec::new();
        let mut done = false;
        let format = if magic == NG_SHB.to_be_bytes() {
            let (ng, end) = Ng::new(&mut inner, &mut buf, magic)?;
            done = end;
            Format::Ng(ng)
        } else {
            Format::Classic(Classic::new(&mut inner, magic)?)
        };
        Ok(Reader {
            inner,
            format,
            buf,
            done,
        })
    }

    /// Whether the file is pcapng (else classic pcap).
    pub fn is_pcapng(&self) -> bool {
        matches!(self.format, Format::Ng(_))
    }

    /// The link type of the file (`LINKTYPE_ETHERNET` for Ethernet).
    ///
    /// Classic pcap: that of every frame, the low 16 bits of the header
    /// field (the high bits may carry FCS information, which this reader
    /// ignores).
    ///
    /// pcapng: that of the file's first interface (interface 0 of the first
    /// section that describes one), which [`Reader::new`] reads ahead to; 0
    /// if the file describes no interface before its first frame or its
    /// end. Other interfaces may have other link types: prefer
    /// [`Record::linktype`], which is each frame's own.
    pub fn linktype(&self) -> u32 {
        match &self.format {
            Format::Classic(c) => c.linktype & 0xffff,
            Format::Ng(ng) => ng.first.map_or(0, |i| i.linktype),
        }
    }

    /// The snaplen the file was captured with, as its header says (pcapng:
    /// that of the first interface, as for [`Reader::linktype`]; 0 means
    /// no limit there).
    pub fn snaplen(&self) -> u32 {
        match &self.format {
            Format::Classic(c) => c.snaplen,
            Format::Ng(ng) => ng.first.map_or(0, |i| i.snaplen),
        }
    }

    /// The unit of the file's timestamps. pcapng: `Micro` if the first
    /// interface's resolution (as for [`Reader::linktype`]) is 1 µs or
    /// coarser, or if there is none, else `Nano`; other interfaces may
    /// differ, and every timestamp is converted to nanoseconds anyway.
    pub fn precision(&self) -> Precision {
        match &self.format {
            Format::Classic(c) => c.precision,
            Format::Ng(ng) => ng.first.map_or(Precision::Micro, |i| i.precision()),
        }
    }

    /// The format version of the file, `(major, minor)`: major 2 for
    /// classic pcap; major 1 for pcapng (that of the current section).
    pub fn version(&self) -> (u16, u16) {
        match &self.format {
            Format::Classic(c) => c.version,
            Format::Ng(ng) => ng.version,
        }
    }

    /// Whether the file (pcapng: the current section) is big-endian.
    pub fn is_big_endian(&self) -> bool {
        let order = match &self.format {
            Format::Classic(c) => c.order,
            Format::Ng(ng) => ng.order,
        };
        order == Order::Big
    }

    /// The next record, or `None` at the end of the file. The record borrows
    /// the reader's buffer, which is reused from one record to the next.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, PcapError> {
        if self.done {
            return Ok(None);
        }
        let got = match &mut self.format {
            Format::Classic(c) => c.read_record(&mut self.inner, &mut self.buf),
            Format::Ng(ng) => ng.next_frame(&mut self.inner, &mut self.buf),
        };
        match got {
            Ok(Some(f)) => Ok(Some(Record {
                ts_ns: f.ts_ns,
                orig_len: f.orig_len,
                linktype: f.linktype,
                data: &self.buf[..f.len],
            })),
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }
}

/// Opens a classic pcap or pcapng file for reading and reads its header
/// (see [`Reader::new`]).
pub fn open(path: impl AsRef<Path>) -> Result<Reader<BufReader<File>>, PcapError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| PcapError::File {
        path: path.to_path_buf(),
        source,
    })?;
    Reader::new(BufReader::new(file))
}

/// Writes a classic pcap file, little-endian (never pcapng).
///
/// The writer adds no buffering of its own: give it a `BufWriter` (as
/// [`create`] does) and call [`Writer::flush`] to see write errors.
#[derive(Debug)]
pub struct Writer<W: Write> {
    inner: W,
    precision: Precision,
    snaplen: u32,
    /// The header's link type.
    linktype: u32,
    /// The index of the next record.
    record: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the global header: version 2.4, thiszone and sigfigs 0.
    /// Frames longer than `snaplen` are cut to `snaplen` bytes.
    pub fn new(
        mut inner: W,
        precision: Precision,
        linktype: u32,
        snaplen: u32,
    ) -> Result<Self, PcapError> {
        if snaplen == 0 {
            return Err(PcapError::ZeroSnaplen);
        }
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        h[0..4].copy_from_slice(&precision.magic().to_le_bytes());
        h[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        h[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // 8..16: thiszone 0 (timestamps are UTC), sigfigs 0.
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&linktype.to_le_bytes());
        inner.write_all(&h)?;
        Ok(Writer {
            inner,
            precision,
            snaplen,
            linktype,
            record: 0,
        })
    }

    /// Writes a frame captured at `ts_ns` (nanoseconds since the Unix
    /// epoch; truncated to the microsecond in a microsecond file). Its
    /// original length is `data.len()`; only the first snaplen bytes are
    /// stored.
    pub fn write(&mut self, ts_ns: u64, data: &[u8]) -> Result<(), PcapError> {
        let orig_len = u32::try_from(data.len()).map_err(|_| PcapError::FrameTooLarge {
            record: self.record,
            len: data.len(),
        })?;
        self.put(ts_ns, orig_len, data)
    }

    /// Writes a record read from another file (or built by hand), keeping
    /// its original length (raised to `data.len()` if it says less). Its
    /// link type must be the file's (compared on the low 16 bits, as the
    /// [`Reader`] gives them): a classic file has only one.
    pub fn write_record(&mut self, rec: &Record<'_>) -> Result<(), PcapError> {
        if rec.linktype != self.linktype & 0xffff {
            return Err(PcapError::LinktypeMismatch {
                record: self.record,
                record_linktype: rec.linktype,
                file_linktype: self.linktype & 0xffff,
            });
        }
        let len = u32::try_from(rec.data.len()).map_err(|_| PcapError::FrameTooLarge {
            record: self.record,
            len: rec.data.len(),
        })?;
        self.put(rec.ts_ns, rec.orig_len.max(len), rec.data)
    }

    fn put(&mut self, ts_ns: u64, orig_len: u32, data: &[u8]) -> Result<(), PcapError> {
        let sec =
            u32::try_from(ts_ns / NS_PER_SEC).map_err(|_| PcapError::TimestampOutOfRange {
                record: self.record,
                ts_ns,
            })?;
        // Below 10^9, so it fits.
        let frac = ((ts_ns % NS_PER_SEC) / self.precision.ns_per_unit()) as u32;
        let stored = &data[..data.len().min(self.snaplen as usize)];
        // At most snaplen, a u32.
        let incl_len = stored.len() as u32;
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&sec.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&incl_len.to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.inner.write_all(&h)?;
        self.inner.write_all(stored)?;
        self.record += 1;
        Ok(())
    }

    /// The number of records written so far.
    pub fn records(&self) -> u64 {
        self.record
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.inner.flush()?;
        Ok(())
    }

    /// The underlying writer (not flushed).
    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// Creates (or truncates) a pcap file of Ethernet frames with snaplen
/// 262144 and writes its global header.
pub fn create(
    path: impl AsRef<Path>,
    precision: Precision,
) -> Result<Writer<BufWriter<File>>, PcapError> {
    let path = path.as_ref();
    let file = File::create(path).map_err(|source| PcapError::File {
        path: path.to_path_buf(),
        source,
    })?;
    Writer::new(
        BufWriter::new(file),
        precision,
        LINKTYPE_ETHERNET,
        DEFAULT_SNAPLEN,
    )
}
