//! Classic pcap files (the libpcap file format, not pcapng): a [`Reader`] and
//! a [`Writer`] for captures of whole frames with their timestamps.
//!
//! This module owns the file format only: the 24-byte global header (magic,
//! version 2.4, thiszone, sigfigs, snaplen, link type) and the 16-byte record
//! header before each frame (seconds, fraction, captured length, original
//! length). Both timestamp variants are supported: microseconds (magic
//! `0xa1b2c3d4`) and nanoseconds (magic `0xa1b23c4d`). Files are read in
//! either byte order (the magic tells which) and always written
//! little-endian, the native order of the machines ferroce runs on.
//!
//! Timestamps are `u64` nanoseconds since the Unix epoch on both sides; a
//! microsecond file keeps them to the microsecond (the nanoseconds are
//! truncated on write).
//!
//! Reading never trusts the file: a bad magic, a file that ends inside a
//! header or a frame, or a captured length beyond any sane snaplen is an
//! error ([`PcapError`]), never a panic or a huge allocation.

#![deny(unsafe_code)]

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// `LINKTYPE_ETHERNET`: frames start with the Ethernet header.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// The snaplen [`create`] writes, and the least captured length the
/// [`Reader`] accepts whatever the file's snaplen says (some writers put 0 or
/// 65535 there and still store longer frames).
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
    /// (a multiple of 1000 when read from a microsecond file).
    pub ts_ns: u64,
    /// The frame's length on the wire; more than `data.len()` when the
    /// capture kept only the first snaplen bytes.
    pub orig_len: u32,
    /// The bytes captured.
    pub data: &'a [u8],
}

/// Why a pcap file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("pcap I/O error: {0}")]
    Io(#[from] io::Error),
    /// Opening or creating a file failed.
    #[error("{}: {source}", path.display())]
    File { path: PathBuf, source: io::Error },
    /// The input ends before the 24-byte global header does.
    #[error("not a pcap file: {len} bytes, shorter than the 24-byte global header")]
    ShortHeader { len: usize },
    /// The first four bytes are no pcap magic; the value is those bytes in
    /// file order (as a hex dump shows them).
    #[error(
        "not a classic pcap file: it starts 0x{0:08x}, expected a1b2c3d4 or a1b23c4d in either \
         byte order (pcapng files start 0a0d0d0a; `editcap -F pcap` converts them)"
    )]
    BadMagic(u32),
    /// The global header names a format version other than 2.x.
    #[error("unsupported pcap format version {major}.{minor} (expected 2.4)")]
    BadVersion { major: u16, minor: u16 },
    /// The input ends inside the header or the data of record `record`
    /// (counted from 0).
    #[error("pcap record {record} (from 0) is truncated: the file ends inside its header or data")]
    Truncated { record: u64 },
    /// Record `record` (counted from 0) claims more captured bytes than the
    /// larger of the file's snaplen and 262144: the file is corrupt.
    #[error(
        "pcap record {record} (from 0) claims {len} captured bytes, more than the file's \
         snaplen and 262144 allow: the file is corrupt"
    )]
    RecordTooLong { record: u64, len: u32 },
    /// A frame to write is longer than the 32-bit length field can say.
    #[error("cannot write pcap record {record}: {len} bytes do not fit a 32-bit length")]
    FrameTooLarge { record: u64, len: usize },
    /// A timestamp to write is past the 32-bit seconds field (year 2106).
    #[error(
        "cannot write pcap record {record}: timestamp {ts_ns} ns is past the 32-bit seconds field"
    )]
    TimestampOutOfRange { record: u64, ts_ns: u64 },
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
}

/// `N` bytes of `buf` from `at` (the callers' offsets are constants inside
/// fixed-size headers).
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

/// Reads a classic pcap file record by record.
///
/// After an error or the end of the file, [`Reader::next_record`] returns
/// `Ok(None)`.
#[derive(Debug)]
pub struct Reader<R: Read> {
    inner: R,
    order: Order,
    precision: Precision,
    version: (u16, u16),
    snaplen: u32,
    linktype: u32,
    /// The largest captured length accepted.
    limit: u32,
    /// Holds the current record's data; grows, never shrinks.
    buf: Vec<u8>,
    /// The index of the next record.
    record: u64,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the global header.
    pub fn new(mut inner: R) -> Result<Self, PcapError> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        let n = read_full(&mut inner, &mut h)?;
        if n < 4 {
            return Err(PcapError::ShortHeader { len: n });
        }
        let magic_le = u32::from_le_bytes(bytes(&h, 0));
        let (order, precision) = match magic_le {
            MAGIC_MICRO => (Order::Little, Precision::Micro),
            MAGIC_NANO => (Order::Little, Precision::Nano),
            m if m.swap_bytes() == MAGIC_MICRO => (Order::Big, Precision::Micro),
            m if m.swap_bytes() == MAGIC_NANO => (Order::Big, Precision::Nano),
            m => return Err(PcapError::BadMagic(m.swap_bytes())),
        };
        if n < GLOBAL_HEADER_LEN {
            return Err(PcapError::ShortHeader { len: n });
        }
        let major = order.u16(bytes(&h, 4));
        let minor = order.u16(bytes(&h, 6));
        if major != VERSION_MAJOR {
            return Err(PcapError::BadVersion { major, minor });
        }
        // Bytes 8..16 are thiszone and sigfigs: always 0 in practice, unused.
        let snaplen = order.u32(bytes(&h, 16));
        let linktype = order.u32(bytes(&h, 20));
        Ok(Reader {
            inner,
            order,
            precision,
            version: (major, minor),
            snaplen,
            linktype,
            limit: snaplen.max(DEFAULT_SNAPLEN),
            buf: Vec::new(),
            record: 0,
            done: false,
        })
    }

    /// The link type of every frame (`LINKTYPE_ETHERNET` for Ethernet): the
    /// low 16 bits of the header field (the high bits may carry FCS
    /// information, which this reader ignores).
    pub fn linktype(&self) -> u32 {
        self.linktype & 0xffff
    }

    /// The snaplen the file was captured with, as its header says.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// The unit of the file's timestamps.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The format version of the file, `(major, minor)`; major is always 2.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Whether the file is big-endian.
    pub fn is_big_endian(&self) -> bool {
        self.order == Order::Big
    }

    /// The next record, or `None` at the end of the file. The record borrows
    /// the reader's buffer, which is reused from one record to the next.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, PcapError> {
        if self.done {
            return Ok(None);
        }
        match self.read_record() {
            Ok(Some((ts_ns, orig_len, len))) => {
                self.record += 1;
                Ok(Some(Record {
                    ts_ns,
                    orig_len,
                    data: &self.buf[..len],
                }))
            }
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

    /// Reads one record into `buf`; returns its timestamp, original length
    /// and captured length.
    fn read_record(&mut self) -> Result<Option<(u64, u32, usize)>, PcapError> {
        let record = self.record;
        let mut h = [0u8; RECORD_HEADER_LEN];
        match read_full(&mut self.inner, &mut h)? {
            0 => return Ok(None),
            RECORD_HEADER_LEN => {}
            _ => return Err(PcapError::Truncated { record }),
        }
        let sec = u64::from(self.order.u32(bytes(&h, 0)));
        let frac = u64::from(self.order.u32(bytes(&h, 4)));
        let incl_len = self.order.u32(bytes(&h, 8));
        let orig_len = self.order.u32(bytes(&h, 12));
        if incl_len > self.limit {
            return Err(PcapError::RecordTooLong {
                record,
                len: incl_len,
            });
        }
        // No overflow: (2^32 - 1) * 10^9 + (2^32 - 1) * 10^3 < 2^64. A
        // fraction of a second or more (a sloppy writer) is kept as it is.
        let ts_ns = sec * NS_PER_SEC + frac * self.precision.ns_per_unit();

        let len = incl_len as usize;
        let mut filled = 0;
        while filled < len {
            // Grow at most GROW_STEP (or double) past what has been read, so
            // memory follows the bytes the file really holds.
            let end = len.min(self.buf.len().max(filled.saturating_mul(2)).max(GROW_STEP));
            if self.buf.len() < end {
                self.buf.resize(end, 0);
            }
            let got = read_full(&mut self.inner, &mut self.buf[filled..end])?;
            if got < end - filled {
                return Err(PcapError::Truncated { record });
            }
            filled = end;
        }
        Ok(Some((ts_ns, orig_len, len)))
    }
}

/// Opens a pcap file for reading and reads its global header.
pub fn open(path: impl AsRef<Path>) -> Result<Reader<BufReader<File>>, PcapError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| PcapError::File {
        path: path.to_path_buf(),
        source,
    })?;
    Reader::new(BufReader::new(file))
}

/// Writes a classic pcap file, little-endian.
///
/// The writer adds no buffering of its own: give it a `BufWriter` (as
/// [`create`] does) and call [`Writer::flush`] to see write errors.
#[derive(Debug)]
pub struct Writer<W: Write> {
    inner: W,
    precision: Precision,
    snaplen: u32,
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
    /// its original length (raised to `data.len()` if it says less).
    pub fn write_record(&mut self, rec: &Record<'_>) -> Result<(), PcapError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal Ethernet frame of `len` bytes (at least 14): broadcast
    /// destination, a local source, an experimental EtherType, and a payload
    /// that counts from `seed`.
    fn frame(len: usize, seed: u8) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, seed]);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.extend((0..len.saturating_sub(14)).map(|i| seed.wrapping_add(i as u8)));
        f
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(u64, u32, Vec<u8>)>, PcapError> {
        let mut r = Reader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push((rec.ts_ns, rec.orig_len, rec.data.to_vec()));
        }
        Ok(out)
    }

    fn write_all(precision: Precision, snaplen: u32, frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), precision, LINKTYPE_ETHERNET, snaplen).unwrap();
        for (ts, f) in frames {
            w.write(*ts, f).unwrap();
        }
        w.flush().unwrap();
        w.into_inner()
    }

    fn sample() -> Vec<(u64, Vec<u8>)> {
        vec![
            (1_700_000_000_123_456_789, frame(60, 1)),
            (1_700_000_000_123_457_000, frame(1514, 2)),
            (1_700_000_001_000_000_001, frame(14, 3)),
            (0, frame(98, 4)),
            (
                u64::from(u32::MAX) * NS_PER_SEC + 999_999_999,
                frame(200, 5),
            ),
        ]
    }

    #[test]
    fn round_trip_nanoseconds_keeps_every_field() {
        let frames = sample();
        let bytes = write_all(Precision::Nano, DEFAULT_SNAPLEN, &frames);
        assert_eq!(&bytes[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        let r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.precision(), Precision::Nano);
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        assert_eq!(r.snaplen(), DEFAULT_SNAPLEN);
        assert_eq!(r.version(), (2, 4));
        assert!(!r.is_big_endian());
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), frames.len());
        for ((ts, f), (gts, glen, gdata)) in frames.iter().zip(&got) {
            assert_eq!(gts, ts);
            assert_eq!(*glen as usize, f.len());
            assert_eq!(gdata, f);
        }
    }

    #[test]
    fn round_trip_microseconds_truncates_to_the_microsecond() {
        let frames = sample();
        let bytes = write_all(Precision::Micro, DEFAULT_SNAPLEN, &frames);
        assert_eq!(&bytes[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(
            Reader::new(&bytes[..]).unwrap().precision(),
            Precision::Micro
        );
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), frames.len());
        for ((ts, f), (gts, glen, gdata)) in frames.iter().zip(&got) {
            assert_eq!(*gts, ts / 1000 * 1000);
            assert_eq!(*glen as usize, f.len());
            assert_eq!(gdata, f);
        }
        assert_eq!(got[0].0, 1_700_000_000_123_456_000);
        assert_eq!(got[2].0, 1_700_000_001_000_000_000);
    }

    #[test]
    fn write_record_copies_a_file() {
        let frames = sample();
        let original = write_all(Precision::Nano, 100, &frames);
        let mut r = Reader::new(&original[..]).unwrap();
        let mut w = Writer::new(Vec::new(), Precision::Nano, r.linktype(), r.snaplen()).unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            w.write_record(&rec).unwrap();
        }
        assert_eq!(w.records(), frames.len() as u64);
        assert_eq!(w.into_inner(), original);
    }

    #[test]
    fn timestamps_past_2106_and_zero_snaplen_are_refused() {
        let mut w = Writer::new(Vec::new(), Precision::Nano, LINKTYPE_ETHERNET, 64).unwrap();
        let err = w.write((u64::from(u32::MAX) + 1) * NS_PER_SEC, &frame(60, 0));
        assert!(matches!(
            err,
            Err(PcapError::TimestampOutOfRange { record: 0, .. })
        ));
        assert!(matches!(
            Writer::new(Vec::new(), Precision::Micro, LINKTYPE_ETHERNET, 0),
            Err(PcapError::ZeroSnaplen)
        ));
    }

    /// A file built field by field in big-endian order, as a big-endian
    /// machine's libpcap writes it.
    fn big_endian_file(magic: u32, records: &[(u32, u32, u32, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&magic.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&65535u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        for (sec, frac, orig, data) in records {
            b.extend_from_slice(&sec.to_be_bytes());
            b.extend_from_slice(&frac.to_be_bytes());
            b.extend_from_slice(&(data.len() as u32).to_be_bytes());
            b.extend_from_slice(&orig.to_be_bytes());
            b.extend_from_slice(data);
        }
        b
    }

    #[test]
    fn big_endian_files_read_in_both_precisions() {
        let a = frame(60, 7);
        let c = frame(64, 8);
        let recs: [(u32, u32, u32, &[u8]); 2] =
            [(1_600_000_000, 250_000, 60, &a), (5, 7, 1500, &c)];

        let micro = big_endian_file(MAGIC_MICRO, &recs);
        assert_eq!(&micro[0..4], &[0xa1, 0xb2, 0xc3, 0xd4]);
        let r = Reader::new(&micro[..]).unwrap();
        assert!(r.is_big_endian());
        assert_eq!(r.precision(), Precision::Micro);
        assert_eq!(r.snaplen(), 65535);
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        assert_eq!(r.version(), (2, 4));
        let got = read_all(&micro).unwrap();
        assert_eq!(
            got,
            vec![
                (1_600_000_000_250_000_000, 60, a.clone()),
                (5_000_007_000, 1500, c.clone()),
            ]
        );

        let nano = big_endian_file(MAGIC_NANO, &recs);
        let r = Reader::new(&nano[..]).unwrap();
        assert!(r.is_big_endian());
        assert_eq!(r.precision(), Precision::Nano);
        let got = read_all(&nano).unwrap();
        assert_eq!(
            got,
            vec![(1_600_000_000_000_250_000, 60, a), (5_000_000_007, 1500, c),]
        );
    }

    #[test]
    fn short_global_header_and_bad_magic_are_errors() {
        let good = write_all(Precision::Micro, DEFAULT_SNAPLEN, &[]);
        assert_eq!(good.len(), GLOBAL_HEADER_LEN);
        assert!(read_all(&good).unwrap().is_empty());
        for n in 0..GLOBAL_HEADER_LEN {
            match Reader::new(&good[..n]) {
                Err(PcapError::ShortHeader { len }) => assert_eq!(len, n),
                other => panic!("{n} bytes: {other:?}"),
            }
        }
        let pcapng = [
            0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a,
        ];
        match Reader::new(&pcapng[..]) {
            Err(e @ PcapError::BadMagic(0x0a0d_0d0a)) => {
                assert!(e.to_string().contains("pcapng"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(matches!(
            Reader::new(&bad[..]),
            Err(PcapError::BadMagic(0xd5c3_b2a1))
        ));
        let mut v1 = good;
        v1[4] = 1;
        assert!(matches!(
            Reader::new(&v1[..]),
            Err(PcapError::BadVersion { major: 1, minor: 4 })
        ));
    }

    #[test]
    fn every_prefix_reads_to_a_clean_end_or_a_truncation() {
        let frames = sample();
        let bytes = write_all(Precision::Nano, DEFAULT_SNAPLEN, &frames);
        // Record boundaries: where the file may end cleanly.
        let mut ends = vec![GLOBAL_HEADER_LEN];
        for (_, f) in &frames {
            ends.push(ends.last().unwrap() + RECORD_HEADER_LEN + f.len());
        }
        assert_eq!(*ends.last().unwrap(), bytes.len());
        for n in GLOBAL_HEADER_LEN..=bytes.len() {
            let mut r = Reader::new(&bytes[..n]).unwrap();
            let mut count = 0u64;
            let end = loop {
                match r.next_record() {
                    Ok(Some(_)) => count += 1,
                    other => break other.map(|_| ()),
                }
            };
            let whole = ends.iter().filter(|&&e| e <= n).count() as u64 - 1;
            assert_eq!(count, whole, "prefix {n}");
            if ends.contains(&n) {
                assert!(end.is_ok(), "prefix {n}: {end:?}");
            } else {
                match end {
                    Err(PcapError::Truncated { record }) => assert_eq!(record, whole),
                    other => panic!("prefix {n}: {other:?}"),
                }
            }
            // Fused: after the end or an error, only None.
            assert!(matches!(r.next_record(), Ok(None)));
        }
    }

    #[test]
    fn corrupted_files_give_records_or_errors_never_panics() {
        let frames = sample();
        let good = write_all(Precision::Micro, 1500, &frames);
        // xorshift64: deterministic, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..5000 {
            let mut bad = good.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bad.len() as u64) as usize;
                bad[at] = next() as u8;
            }
            let cut = bad.len() - (next() % 64) as usize;
            if let Ok(mut r) = Reader::new(&bad[..cut]) {
                let mut n = 0;
                while let Ok(Some(rec)) = r.next_record() {
                    assert!(rec.data.len() <= DEFAULT_SNAPLEN as usize);
                    n += 1;
                    assert!(n <= bad.len() / RECORD_HEADER_LEN);
                }
            }
        }
    }

    #[test]
    fn a_truncated_record_header_and_body_name_the_record() {
        let frames = sample();
        let bytes = write_all(Precision::Micro, DEFAULT_SNAPLEN, &frames);
        let first = GLOBAL_HEADER_LEN + RECORD_HEADER_LEN + frames[0].1.len();
        // Cut inside record 1's header.
        let e = read_all(&bytes[..first + 5]).unwrap_err();
        assert!(matches!(e, PcapError::Truncated { record: 1 }), "{e:?}");
        // Cut inside record 1's data.
        let e = read_all(&bytes[..first + RECORD_HEADER_LEN + 100]).unwrap_err();
        assert!(matches!(e, PcapError::Truncated { record: 1 }), "{e:?}");
        assert!(e.to_string().contains("record 1"), "{e}");
    }

    #[test]
    fn an_absurd_captured_length_is_refused_without_allocating_it() {
        let mut bytes = write_all(Precision::Micro, 1500, &[(0, frame(60, 0))]);
        // Record 0's incl_len: 4 GiB - 1.
        bytes[GLOBAL_HEADER_LEN + 8..GLOBAL_HEADER_LEN + 12]
            .copy_from_slice(&u32::MAX.to_le_bytes());
        match read_all(&bytes) {
            Err(
                e @ PcapError::RecordTooLong {
                    record: 0,
                    len: u32::MAX,
                },
            ) => {
                assert!(e.to_string().contains("corrupt"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        // Just past the limit (snaplen 1500 is below 262144).
        bytes[GLOBAL_HEADER_LEN + 8..GLOBAL_HEADER_LEN + 12]
            .copy_from_slice(&(DEFAULT_SNAPLEN + 1).to_le_bytes());
        assert!(matches!(
            read_all(&bytes),
            Err(PcapError::RecordTooLong { record: 0, len }) if len == DEFAULT_SNAPLEN + 1
        ));
        // At the limit it is merely truncated (the file holds 60 bytes).
        bytes[GLOBAL_HEADER_LEN + 8..GLOBAL_HEADER_LEN + 12]
            .copy_from_slice(&DEFAULT_SNAPLEN.to_le_bytes());
        assert!(matches!(
            read_all(&bytes),
            Err(PcapError::Truncated { record: 0 })
        ));

        // A header claiming a 4 GiB snaplen allows a 4 GiB record, but the
        // reader grows its buffer only as far as the data goes.
        let mut huge = write_all(Precision::Micro, u32::MAX, &[(0, frame(60, 0))]);
        huge[GLOBAL_HEADER_LEN + 8..GLOBAL_HEADER_LEN + 12]
            .copy_from_slice(&u32::MAX.to_le_bytes());
        let mut r = Reader::new(&huge[..]).unwrap();
        assert!(matches!(
            r.next_record(),
            Err(PcapError::Truncated { record: 0 })
        ));
        assert!(r.buf.len() <= GROW_STEP, "buffer grew to {}", r.buf.len());
    }

    #[test]
    fn frames_past_snaplen_are_cut_and_keep_their_length() {
        let frames = vec![(1, frame(60, 1)), (2, frame(128, 2)), (3, frame(1514, 3))];
        let bytes = write_all(Precision::Nano, 128, &frames);
        let r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.snaplen(), 128);
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (1, 60, frames[0].1.clone()));
        assert_eq!(got[1], (2, 128, frames[1].1.clone()));
        assert_eq!(got[2], (3, 1514, frames[2].1[..128].to_vec()));
        assert_eq!(
            bytes.len(),
            GLOBAL_HEADER_LEN + 3 * RECORD_HEADER_LEN + 60 + 128 + 128
        );
    }

    #[test]
    fn the_buffer_is_reused_between_records() {
        let frames = vec![(1, frame(1514, 1)), (2, frame(60, 2)), (3, frame(1000, 3))];
        let bytes = write_all(Precision::Micro, DEFAULT_SNAPLEN, &frames);
        let mut r = Reader::new(&bytes[..]).unwrap();
        let first = r.next_record().unwrap().unwrap().data.as_ptr();
        let cap = r.buf.capacity();
        while let Some(rec) = r.next_record().unwrap() {
            assert_eq!(rec.data.as_ptr(), first);
        }
        assert_eq!(r.buf.capacity(), cap);
    }

    #[test]
    fn the_rxe_capture_reads_like_a_hand_walk() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/rc_pingpong.pcap"
        );
        let raw = std::fs::read(path).unwrap();
        // Walk the file by hand: little-endian, 24-byte header, then
        // 16-byte record headers with incl_len at offset 8.
        assert_eq!(&raw[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        let mut walked = Vec::new();
        let mut at = GLOBAL_HEADER_LEN;
        while at < raw.len() {
            let le = |o: usize| u32::from_le_bytes(raw[at + o..at + o + 4].try_into().unwrap());
            let (sec, usec, incl, orig) = (le(0), le(4), le(8) as usize, le(12));
            let data = &raw[at + RECORD_HEADER_LEN..at + RECORD_HEADER_LEN + incl];
            walked.push((
                u64::from(sec) * NS_PER_SEC + u64::from(usec) * 1000,
                orig,
                data,
            ));
            at += RECORD_HEADER_LEN + incl;
        }
        assert_eq!(at, raw.len());
        assert!(walked.len() > 10, "{} records", walked.len());

        let mut r = open(path).unwrap();
        assert_eq!(r.precision(), Precision::Micro);
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        assert!(!r.is_big_endian());
        let mut n = 0;
        while let Some(rec) = r.next_record().unwrap() {
            let (ts, orig, data) = walked[n];
            assert_eq!(
                (rec.ts_ns, rec.orig_len, rec.data),
                (ts, orig, data),
                "record {n}"
            );
            n += 1;
        }
        assert_eq!(n, walked.len());
    }

    #[test]
    fn open_and_create_name_the_path_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pcap");
        let e = open(&missing).unwrap_err();
        assert!(matches!(e, PcapError::File { .. }));
        assert!(e.to_string().contains("missing.pcap"), "{e}");
        let e = create(dir.path().join("no/such/dir.pcap"), Precision::Micro).unwrap_err();
        assert!(e.to_string().contains("dir.pcap"), "{e}");
    }

    /// What tshark says of each frame: length, captured length, timestamp
    /// in nanoseconds since the epoch.
    type Seen = (usize, usize, u64);

    /// Runs `tshark -r FILE -T fields -e frame.len -e frame.cap_len -e
    /// frame.time_epoch`; `None` if tshark is not installed.
    fn tshark_frames(file: &Path) -> Option<Vec<Seen>> {
        let out = match std::process::Command::new("tshark")
            .arg("-r")
            .arg(file)
            .args(["-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"])
            .args(["-e", "frame.time_epoch"])
            .output()
        {
            Ok(out) => out,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => panic!("cannot run tshark: {e}"),
        };
        assert!(
            out.status.success(),
            "tshark failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        Some(
            text.lines()
                .map(|l| {
                    let f: Vec<&str> = l.split('\t').map(str::trim).collect();
                    assert_eq!(f.len(), 3, "tshark line {l:?}");
                    // SECONDS.FRACTION, the fraction 6 or 9 digits.
                    let (sec, frac) = f[2].split_once('.').unwrap_or((f[2], "0"));
                    let frac = format!("{frac:0<9}");
                    let ts = sec.parse::<u64>().unwrap() * NS_PER_SEC
                        + frac[..9].parse::<u64>().unwrap();
                    (f[0].parse().unwrap(), f[1].parse().unwrap(), ts)
                })
                .collect(),
        )
    }

    #[test]
    fn tshark_reads_what_the_writer_writes() {
        let dir = tempfile::tempdir().unwrap();
        let frames = [
            frame(60, 1),
            frame(98, 2),
            frame(1514, 3),
            frame(9014, 4),
            frame(64, 5),
        ];
        let t0 = 1_700_000_000_000_000_000u64;
        for precision in [Precision::Micro, Precision::Nano] {
            // Through create(): snaplen 262144, nothing cut.
            let path = dir.path().join(format!("{precision:?}.pcap"));
            let mut w = create(&path, precision).unwrap();
            for (i, f) in frames.iter().enumerate() {
                w.write(t0 + i as u64 * 1_234_567, f).unwrap();
            }
            w.flush().unwrap();
            drop(w);
            // And a snaplen of 128.
            let cut_path = dir.path().join(format!("{precision:?}-128.pcap"));
            let file = File::create(&cut_path).unwrap();
            let mut w =
                Writer::new(BufWriter::new(file), precision, LINKTYPE_ETHERNET, 128).unwrap();
            for (i, f) in frames.iter().enumerate() {
                w.write(t0 + i as u64, f).unwrap();
            }
            w.flush().unwrap();
            drop(w);

            let Some(got) = tshark_frames(&path) else {
                println!("note: tshark is not on PATH; skipping the tshark check");
                return;
            };
            let unit = precision.ns_per_unit();
            let want: Vec<Seen> = frames
                .iter()
                .enumerate()
                .map(|(i, f)| (f.len(), f.len(), (t0 + i as u64 * 1_234_567) / unit * unit))
                .collect();
            assert_eq!(got, want, "{precision:?}");
            let got = tshark_frames(&cut_path).unwrap();
            let want: Vec<Seen> = frames
                .iter()
                .enumerate()
                .map(|(i, f)| (f.len(), f.len().min(128), (t0 + i as u64) / unit * unit))
                .collect();
            assert_eq!(got, want, "{precision:?}, snaplen 128");
        }
    }
}
