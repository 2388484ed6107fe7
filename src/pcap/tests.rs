//! Tests of the pcap reader and writer.

use super::ng::*;
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
        assert_eq!(rec.linktype, LINKTYPE_ETHERNET);
        w.write_record(&rec).unwrap();
    }
    assert_eq!(w.records(), frames.len() as u64);
    assert_eq!(w.into_inner(), original);
}

#[test]
fn write_record_refuses_another_link_type() {
    let data = frame(60, 1);
    let mut rec = Record {
        ts_ns: 1,
        orig_len: 60,
        linktype: 113,
        data: &data,
    };
    let mut w = Writer::new(Vec::new(), Precision::Nano, LINKTYPE_ETHERNET, 64).unwrap();
    match w.write_record(&rec) {
        Err(
            e @ PcapError::LinktypeMismatch {
                record: 0,
                record_linktype: 113,
                file_linktype: 1,
            },
        ) => assert!(e.to_string().contains("link type 113"), "{e}"),
        other => panic!("{other:?}"),
    }
    // The FCS bits of the header's field do not count.
    let mut w = Writer::new(Vec::new(), Precision::Nano, 0x1000_0000 | 113, 64).unwrap();
    w.write_record(&rec).unwrap();
    rec.linktype = LINKTYPE_ETHERNET;
    assert!(w.write_record(&rec).is_err());
    assert_eq!(w.records(), 1);
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
    let recs: [(u32, u32, u32, &[u8]); 2] = [(1_600_000_000, 250_000, 60, &a), (5, 7, 1500, &c)];

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
    // A pcapng magic is no bad magic: here, a cut section header.
    let pcapng = [
        0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a,
    ];
    assert!(matches!(
        Reader::new(&pcapng[..]),
        Err(PcapError::NgTruncated { block: 0 })
    ));
    let mut bad = good.clone();
    bad[0] ^= 1;
    match Reader::new(&bad[..]) {
        Err(e @ PcapError::BadMagic(0xd5c3_b2a1)) => {
            assert!(e.to_string().contains("pcapng"), "{e}")
        }
        other => panic!("{other:?}"),
    }
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

/// Reads `rounds` randomly corrupted and cut copies of `good`: each
/// gives records or an error, never a panic, never more records than
/// the bytes could hold, and a buffer that stays bounded.
fn corrupt_and_read(good: &[u8], seed: u64, rounds: usize) {
    // xorshift64: deterministic, no dependency.
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..rounds {
        let mut bad = good.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bad.len() as u64) as usize;
            bad[at] = next() as u8;
        }
        let cut = bad.len() - (next() % 64) as usize;
        if let Ok(mut r) = Reader::new(&bad[..cut]) {
            let mut n = 0;
            while let Ok(Some(rec)) = r.next_record() {
                assert!(rec.data.len() <= cut);
                n += 1;
                assert!(n <= cut / RECORD_HEADER_LEN);
            }
            assert!(r.buf.len() <= GROW_STEP, "buffer grew to {}", r.buf.len());
        }
    }
}

#[test]
fn corrupted_files_give_records_or_errors_never_panics() {
    let good = write_all(Precision::Micro, 1500, &sample());
    corrupt_and_read(&good, 0x9e37_79b9_7f4a_7c15, 5000);
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
    bytes[GLOBAL_HEADER_LEN + 8..GLOBAL_HEADER_LEN + 12].copy_from_slice(&u32::MAX.to_le_bytes());
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
    huge[GLOBAL_HEADER_LEN + 8..GLOBAL_HEADER_LEN + 12].copy_from_slice(&u32::MAX.to_le_bytes());
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
            (rec.ts_ns, rec.orig_len, rec.linktype, rec.data),
            (ts, orig, LINKTYPE_ETHERNET, data),
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
                let ts =
                    sec.parse::<u64>().unwrap() * NS_PER_SEC + frac[..9].parse::<u64>().unwrap();
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
        let mut w = Writer::new(BufWriter::new(file), precision, LINKTYPE_ETHERNET, 128).unwrap();
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

// ---- pcapng ----

/// What a test expects of a record: timestamp, original length, link
/// type, data.
type Rec = (u64, u32, u32, Vec<u8>);

fn read_recs(bytes: &[u8]) -> Result<Vec<Rec>, PcapError> {
    let mut r = Reader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push((rec.ts_ns, rec.orig_len, rec.linktype, rec.data.to_vec()));
    }
    Ok(out)
}

/// Builds a pcapng file block by block, each section in its own byte
/// order.
#[derive(Clone)]
struct NgFile {
    big: bool,
    bytes: Vec<u8>,
    /// Where each block ends, and whether it is a packet block.
    blocks: Vec<(usize, bool)>,
}

impl NgFile {
    fn new() -> Self {
        NgFile {
            big: false,
            bytes: Vec::new(),
            blocks: Vec::new(),
        }
    }

    fn u16(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u32(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u64(&self, v: u64) -> [u8; 8] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    /// Options, padded, then opt_endofopt.
    fn options(&self, opts: &[(u16, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (code, value) in opts {
            b.extend_from_slice(&self.u16(*code));
            b.extend_from_slice(&self.u16(value.len() as u16));
            b.extend_from_slice(value);
            b.resize(b.len().next_multiple_of(4), 0);
        }
        if !opts.is_empty() {
            b.extend_from_slice(&[0; 4]);
        }
        b
    }

    /// A block of type `ty` around `body`, padded to 32 bits.
    fn block(&mut self, ty: u32, body: &[u8]) -> &mut Self {
        let padded = body.len().next_multiple_of(4);
        let len = self.u32((12 + padded) as u32);
        self.bytes.extend_from_slice(&self.u32(ty));
        self.bytes.extend_from_slice(&len);
        self.bytes.extend_from_slice(body);
        self.bytes.resize(self.bytes.len() + padded - body.len(), 0);
        self.bytes.extend_from_slice(&len);
        let packet = matches!(ty, NG_EPB | NG_SPB | NG_OPB);
        self.blocks.push((self.bytes.len(), packet));
        self
    }

    /// A Section Header Block in the given byte order, with an
    /// shb_userappl option and an unknown section length.
    fn shb(&mut self, big: bool) -> &mut Self {
        self.big = big;
        let mut b = Vec::new();
        b.extend_from_slice(&self.u32(NG_BYTE_ORDER_MAGIC));
        b.extend_from_slice(&self.u16(1));
        b.extend_from_slice(&self.u16(0));
        b.extend_from_slice(&self.u64(u64::MAX));
        b.extend(self.options(&[(4, b"ferroce test")]));
        self.block(NG_SHB, &b)
    }

    fn idb(&mut self, linktype: u16, snaplen: u32, opts: &[(u16, &[u8])]) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&self.u16(linktype));
        b.extend_from_slice(&[0; 2]);
        b.extend_from_slice(&self.u32(snaplen));
        b.extend(self.options(opts));
        self.block(NG_IDB, &b)
    }

    fn epb(
        &mut self,
        iface: u32,
        ticks: u64,
        data: &[u8],
        orig: u32,
        opts: &[(u16, &[u8])],
    ) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&self.u32(iface));
        b.extend_from_slice(&self.u32((ticks >> 32) as u32));
        b.extend_from_slice(&self.u32(ticks as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(&self.u32(orig));
        b.extend_from_slice(data);
        b.resize(b.len().next_multiple_of(4), 0);
        b.extend(self.options(opts));
        self.block(NG_EPB, &b)
    }

    /// An obsolete Packet Block.
    fn opb(&mut self, iface: u16, ticks: u64, data: &[u8], orig: u32) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&self.u16(iface));
        b.extend_from_slice(&self.u16(0));
        b.extend_from_slice(&self.u32((ticks >> 32) as u32));
        b.extend_from_slice(&self.u32(ticks as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(&self.u32(orig));
        b.extend_from_slice(data);
        self.block(NG_OPB, &b)
    }

    fn spb(&mut self, orig: u32, data: &[u8]) -> &mut Self {
        let mut b = self.u32(orig).to_vec();
        b.extend_from_slice(data);
        self.block(NG_SPB, &b)
    }

    /// Where block `i` starts.
    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.blocks[i - 1].0
        }
    }

    /// Overwrites the 32-bit field at `at` bytes into block `i`, in the
    /// current byte order.
    fn patch(&mut self, i: usize, at: usize, v: u32) -> &mut Self {
        let at = self.start(i) + at;
        let v = self.u32(v);
        self.bytes[at..at + 4].copy_from_slice(&v);
        self
    }
}

/// `if_tsresol` 2^-20 s.
const TSRESOL_2_20: u8 = 0x80 | 20;
const LINKTYPE_LINUX_SLL: u16 = 113;

/// Two sections (the second in the other byte order), two interfaces
/// with different resolutions in the first, every packet block type,
/// and blocks to skip; with the records they hold.
fn sample_ng(big: bool) -> (NgFile, Vec<Rec>) {
    let mut f = NgFile::new();
    let mut want = Vec::new();
    // Blocks 0 and 1: the section, interface 0 (Ethernet, ns, with an
    // if_name to skip).
    f.shb(big);
    f.idb(1, 0, &[(2, b"eth0"), (OPT_IF_TSRESOL, &[9])]);
    // Block 2: interface 1, Linux cooked capture, 2^-20 s, 1.7e9 s
    // offset, a description.
    let offset = f.u64(1_700_000_000);
    let opts: [(u16, &[u8]); 3] = [
        (OPT_IF_TSRESOL, &[TSRESOL_2_20]),
        (OPT_IF_TSOFFSET, &offset),
        (3, b"ab"),
    ];
    f.idb(LINKTYPE_LINUX_SLL, 128, &opts);
    // Block 3: name resolution, skipped.
    f.block(4, &[1, 0, 8, 0, 10, 0, 0, 1, b'h', 0, 0, 0, 0, 0, 0, 0]);
    // Block 4.
    let a = frame(60, 1);
    f.epb(0, 1_700_000_000_123_456_789, &a, 60, &[]);
    want.push((1_700_000_000_123_456_789, 60, 1, a));
    // Block 5: an unknown type, 5 bytes of body (padded), skipped.
    f.block(0x0000_0bad, &[1, 2, 3, 4, 5]);
    // Block 6: 5.5 s in units of 2^-20 s, after the 1.7e9 s offset; an
    // odd length (padded) and options (epb_flags, opt_comment).
    let b = frame(61, 2);
    let flags = f.u32(1);
    f.epb(1, 11 << 19, &b, 61, &[(2, &flags), (1, b"hi")]);
    want.push((1_700_000_005_500_000_000, 61, 113, b));
    // Block 7: one unit of 2^-20 s, 953.67 ns, truncated; cut to 128
    // bytes.
    let c = frame(1514, 3);
    f.epb(1, 1, &c[..128], 1514, &[]);
    want.push((1_700_000_000_000_000_953, 1514, 113, c[..128].to_vec()));
    // Block 8: interface statistics, skipped.
    let mut isb = f.u32(0).to_vec();
    isb.extend_from_slice(&[0; 8]);
    f.block(5, &isb);
    // Block 9: a simple packet, no timestamp.
    let d = frame(60, 4);
    f.spb(60, &d);
    want.push((0, 60, 1, d));
    // Block 10: 64 of 1514 bytes stored; the block's room says how many.
    let e = frame(64, 5);
    f.spb(1514, &e);
    want.push((0, 1514, 1, e));
    // Block 11: an obsolete packet block.
    let g = frame(62, 6);
    f.opb(0, 42, &g, 62);
    want.push((42, 62, 1, g));
    // Block 12: a custom block (may be copied), skipped.
    f.block(0x4000_0bad, &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]);

    // Blocks 13 and 14: section 2, in the other byte order; its
    // interfaces start again. Interface 0: microseconds, snaplen 64.
    f.shb(!big);
    f.idb(1, 64, &[]);
    // Block 15.
    let h = frame(60, 7);
    f.epb(0, 1_700_000_002_000_001, &h, 60, &[]);
    want.push((1_700_000_002_000_001_000, 60, 1, h));
    // Block 16: a 100-byte frame in a simple packet block is cut to the
    // snaplen of interface 0.
    let i = frame(100, 8);
    f.spb(100, &i);
    want.push((0, 100, 1, i[..64].to_vec()));
    // Block 17: decryption secrets, skipped.
    let mut dsb = f.u32(0x544c_534b).to_vec();
    dsb.extend_from_slice(&f.u32(3));
    dsb.extend_from_slice(b"key");
    f.block(0x0a, &dsb);
    (f, want)
}

#[test]
fn a_hand_built_pcapng_reads_in_both_byte_orders() {
    for big in [false, true] {
        let (f, want) = sample_ng(big);
        let bytes = &f.bytes;
        assert_eq!(&bytes[0..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
        let mut r = Reader::new(&bytes[..]).unwrap();
        assert!(r.is_pcapng());
        assert_eq!(r.is_big_endian(), big);
        assert_eq!(r.version(), (1, 0));
        // Interface 0, read ahead.
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        assert_eq!(r.snaplen(), 0);
        assert_eq!(r.precision(), Precision::Nano);
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            got.push((rec.ts_ns, rec.orig_len, rec.linktype, rec.data.to_vec()));
        }
        assert_eq!(got, want, "big {big}");
        // Now in the second section; the first interface still rules.
        assert_eq!(r.is_big_endian(), !big);
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        assert_eq!(r.snaplen(), 0);
        assert!(matches!(r.next_record(), Ok(None)));
    }
}

#[test]
fn pcapng_accessors_follow_the_first_interface() {
    // Microsecond resolution by default; 2^-19 s is still coarser.
    for (opts, precision) in [
        (&[][..], Precision::Micro),
        (&[(OPT_IF_TSRESOL, &[0x80 | 19][..])][..], Precision::Micro),
        (
            &[(OPT_IF_TSRESOL, &[TSRESOL_2_20][..])][..],
            Precision::Nano,
        ),
        (&[(OPT_IF_TSRESOL, &[7][..])][..], Precision::Nano),
        (&[(OPT_IF_TSRESOL, &[3][..])][..], Precision::Micro),
    ] {
        let mut f = NgFile::new();
        f.shb(true).block(0x0bad, &[]).idb(105, 2048, opts);
        let r = Reader::new(&f.bytes[..]).unwrap();
        assert_eq!(r.precision(), precision, "{opts:?}");
        assert_eq!((r.linktype(), r.snaplen()), (105, 2048));
        assert!(r.is_big_endian());
    }
    // No interface at all: an empty file, link type 0.
    let mut f = NgFile::new();
    f.shb(false);
    let mut r = Reader::new(&f.bytes[..]).unwrap();
    assert_eq!((r.linktype(), r.snaplen()), (0, 0));
    assert_eq!(r.precision(), Precision::Micro);
    assert!(matches!(r.next_record(), Ok(None)));
    // The first interface is that of the first section that has one.
    f.shb(true).idb(1, 0, &[]).idb(113, 0, &[]);
    f.epb(1, 0, &frame(14, 0), 14, &[]);
    let mut r = Reader::new(&f.bytes[..]).unwrap();
    assert_eq!(r.linktype(), 1);
    assert!(r.is_big_endian());
    assert_eq!(r.next_record().unwrap().unwrap().linktype, 113);
}

#[test]
fn pcapng_timestamps_convert_exactly_and_saturate() {
    let t = 1_700_000_000_123_456_789u64;
    assert_eq!(ng_ts_ns(t / 1000, TSRESOL_DEFAULT, 0), t / 1000 * 1000);
    assert_eq!(ng_ts_ns(t, 9, 0), t);
    assert_eq!(ng_ts_ns(t / 100, 7, 0), t / 100 * 100);
    assert_eq!(ng_ts_ns(17, 0, 0), 17 * NS_PER_SEC);
    // Picoseconds: below the nanosecond is truncated.
    assert_eq!(ng_ts_ns(1_999, 12, 0), 1);
    assert_eq!(ng_ts_ns(u64::MAX, 12, 0), u64::MAX / 1000);
    // Powers of 2: exact, then truncated.
    assert_eq!(ng_ts_ns(1 << 20, TSRESOL_2_20, 0), NS_PER_SEC);
    assert_eq!(ng_ts_ns(3, 0x80 | 30, 0), 2);
    assert_eq!(ng_ts_ns(u64::MAX, 0x80 | 64, 0), 999_999_999);
    assert_eq!(ng_ts_ns(7, 0x80, 0), 7 * NS_PER_SEC);
    // Far past any timestamp: 0, no overflow.
    assert_eq!(ng_ts_ns(u64::MAX, 127, 0), 0);
    assert_eq!(ng_ts_ns(u64::MAX, 48, 0), 0);
    assert_eq!(ng_ts_ns(u64::MAX, 0xff, 0), 0);
    // Saturation past u64::MAX and below 0.
    assert_eq!(ng_ts_ns(u64::MAX, 9, 1), u64::MAX);
    assert_eq!(ng_ts_ns(u64::MAX, 0, 0), u64::MAX);
    assert_eq!(ng_ts_ns(0, 9, i64::MAX), u64::MAX);
    assert_eq!(ng_ts_ns(5, 0, -6), 0);
    assert_eq!(ng_ts_ns(0, 0, i64::MIN), 0);
    // 2^64 - 1 s less 2^63 s is still past u64::MAX ns.
    assert_eq!(ng_ts_ns(u64::MAX, 0, i64::MIN), u64::MAX);
    assert_eq!(ng_ts_ns(1_500, 3, -1), 500_000_000);
    assert_eq!(ng_ts_ns(0, 9, 1_700_000_000), 1_700_000_000 * NS_PER_SEC);
}

/// SHB, then two Ethernet interfaces: 0 in ns, 1 in µs.
fn ng_base(big: bool) -> NgFile {
    let mut f = NgFile::new();
    f.shb(big)
        .idb(1, 0, &[(OPT_IF_TSRESOL, &[9])])
        .idb(1, 0, &[]);
    f
}

#[test]
fn pcapng_structure_errors_name_the_block() {
    for big in [false, true] {
        let data = frame(64, 1);
        // A packet of an interface the section does not have.
        let mut f = ng_base(big);
        f.epb(0, 5, &data, 64, &[]).epb(2, 0, &data, 64, &[]);
        let mut r = Reader::new(&f.bytes[..]).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().ts_ns, 5);
        match r.next_record() {
            Err(
                e @ PcapError::NgUnknownInterface {
                    block: 4,
                    interface: 2,
                    count: 2,
                },
            ) => {
                let m = e.to_string();
                assert!(m.contains("block 4") && m.contains("interface 2"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(r.next_record(), Ok(None)));
        // A new section forgets the interfaces of the last.
        let mut f = ng_base(big);
        f.shb(!big).idb(1, 0, &[]).epb(0, 1, &data, 64, &[]);
        f.epb(1, 1, &data, 64, &[]);
        assert!(matches!(
            read_recs(&f.bytes),
            Err(PcapError::NgUnknownInterface {
                block: 6,
                interface: 1,
                count: 1
            })
        ));
        // A simple packet before any interface: the header reads, the
        // frame does not.
        let mut f = NgFile::new();
        f.shb(big).spb(64, &data);
        let mut r = Reader::new(&f.bytes[..]).unwrap();
        assert_eq!(r.linktype(), 0);
        assert!(matches!(
            r.next_record(),
            Err(PcapError::NgUnknownInterface {
                block: 1,
                interface: 0,
                count: 0
            })
        ));
        // A captured length past the block (room: 64 bytes of data).
        let mut f = ng_base(big);
        f.epb(0, 0, &data, 64, &[]).patch(3, 8 + 12, 68);
        match read_recs(&f.bytes) {
            Err(
                e @ PcapError::NgCapturedBeyondBlock {
                    block: 3,
                    captured: 68,
                    room: 64,
                },
            ) => assert!(e.to_string().contains("block 3"), "{e}"),
            other => panic!("{other:?}"),
        }
        // The same in an obsolete packet block.
        let mut f = ng_base(big);
        f.opb(1, 0, &data, 64).patch(3, 8 + 12, 65);
        assert!(matches!(
            read_recs(&f.bytes),
            Err(PcapError::NgCapturedBeyondBlock {
                block: 3,
                captured: 65,
                room: 64
            })
        ));
    }
}

#[test]
fn pcapng_block_length_errors_name_the_block() {
    for big in [false, true] {
        let data = frame(64, 1);
        let mut good = ng_base(big);
        good.epb(0, 0, &data, 64, &[]).block(0x0bad, &[0; 8]);
        let epb_len = (good.start(4) - good.start(3)) as u32;
        assert_eq!(read_recs(&good.bytes).unwrap().len(), 1);

        // Not a multiple of 4, below 12, below the fixed fields.
        for (block, ty, len) in [
            (3, NG_EPB, epb_len + 2),
            (3, NG_EPB, 28),
            (4, 0x0bad, 8),
            (4, 0x0bad, 0),
            (4, 0x0bad, 13),
            (2, NG_IDB, 16),
        ] {
            let mut f = good.clone();
            f.patch(block, 4, len);
            match read_recs(&f.bytes) {
                Err(
                    e @ PcapError::NgBadBlockLength {
                        block: b,
                        block_type: t,
                        len: l,
                    },
                ) if (b, t, l) == (block as u64, ty, len) => {
                    assert!(e.to_string().contains(&format!("block {block}")), "{e}")
                }
                other => panic!("block {block} length {len}: {other:?}"),
            }
        }
        // The trailing length differs.
        let mut f = good.clone();
        f.patch(3, epb_len as usize - 4, epb_len + 4);
        match read_recs(&f.bytes) {
            Err(PcapError::NgLengthMismatch {
                block: 3,
                head,
                tail,
            }) => {
                assert_eq!((head, tail), (epb_len, epb_len + 4))
            }
            other => panic!("{other:?}"),
        }
        // A leading length 4 bytes too long reads the next block's type
        // as the trailing length.
        let mut f = good.clone();
        f.patch(3, 4, epb_len + 4);
        assert!(matches!(
            read_recs(&f.bytes),
            Err(PcapError::NgLengthMismatch {
                block: 3,
                tail: 0x0bad,
                ..
            })
        ));
        // A section header whose length is too short for its fields.
        let mut f = good.clone();
        f.patch(0, 4, 24);
        assert!(matches!(
            Reader::new(&f.bytes[..]),
            Err(PcapError::NgBadBlockLength {
                block: 0,
                block_type: NG_SHB,
                len: 24
            })
        ));
    }
}

#[test]
fn pcapng_header_and_option_errors() {
    // A bad byte-order magic, in the first section and in a later one.
    let mut f = ng_base(false);
    f.patch(0, 8, 0x1a2b_3c4e);
    match Reader::new(&f.bytes[..]) {
        Err(
            e @ PcapError::NgBadByteOrder {
                block: 0,
                magic: 0x4e3c_2b1a,
            },
        ) => assert!(e.to_string().contains("1a2b3c4d"), "{e}"),
        other => panic!("{other:?}"),
    }
    let mut f = ng_base(true);
    f.shb(false).patch(3, 8, 0);
    assert!(matches!(
        read_recs(&f.bytes),
        Err(PcapError::NgBadByteOrder { block: 3, magic: 0 })
    ));
    // Version 2.0.
    let mut f = ng_base(true);
    let at = f.start(0) + 12;
    f.bytes[at..at + 4].copy_from_slice(&[0, 2, 0, 0]);
    assert!(matches!(
        Reader::new(&f.bytes[..]),
        Err(PcapError::NgBadVersion {
            block: 0,
            major: 2,
            minor: 0
        })
    ));
    // Options of the wrong size, or past the end of the block.
    for big in [false, true] {
        for (opts, code, len) in [
            (&[(OPT_IF_TSRESOL, &[9, 0][..])][..], OPT_IF_TSRESOL, 2),
            (&[(OPT_IF_TSOFFSET, &[0; 4][..])][..], OPT_IF_TSOFFSET, 4),
            (&[(OPT_IF_TSRESOL, &[][..])][..], OPT_IF_TSRESOL, 0),
        ] {
            let mut f = NgFile::new();
            f.shb(big).idb(1, 0, &[]).idb(1, 0, opts);
            match read_recs(&f.bytes) {
                Err(
                    e @ PcapError::NgBadOption {
                        block: 2,
                        code: c,
                        len: l,
                    },
                ) if (c, l) == (code, len) => {
                    assert!(e.to_string().contains("block 2"), "{e}")
                }
                other => panic!("{opts:?}: {other:?}"),
            }
        }
        // if_name claiming 200 bytes in a block of 8.
        let mut f = NgFile::new();
        f.shb(big).idb(1, 0, &[(2, b"eth0")]);
        let at = f.start(1) + 8 + 8 + 2;
        let len = f.u16(200);
        f.bytes[at..at + 2].copy_from_slice(&len);
        assert!(matches!(
            Reader::new(&f.bytes[..]),
            Err(PcapError::NgBadOption {
                block: 1,
                code: 2,
                len: 200
            })
        ));
        // Options after opt_endofopt are not read.
        let mut f = NgFile::new();
        let mut body = f.u16(1).to_vec();
        body.extend_from_slice(&[0; 6]);
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&f.u16(OPT_IF_TSRESOL));
        body.extend_from_slice(&f.u16(7));
        f.shb(false).block(NG_IDB, &body);
        f.epb(0, 3, &frame(14, 0), 14, &[]);
        assert_eq!(read_recs(&f.bytes).unwrap()[0].0, 3000);
    }
}

#[test]
fn huge_pcapng_lengths_are_refused_without_allocating_them() {
    let data = frame(60, 1);
    // An enhanced packet block of 4 GiB, with as many captured bytes.
    let mut f = ng_base(false);
    f.epb(0, 0, &data, 60, &[]);
    f.patch(3, 4, 0xffff_fff0)
        .patch(3, 8 + 12, 0xffff_fff0 - 32);
    let mut r = Reader::new(&f.bytes[..]).unwrap();
    assert!(matches!(
        r.next_record(),
        Err(PcapError::NgTruncated { block: 3 })
    ));
    assert!(r.buf.len() <= GROW_STEP, "buffer grew to {}", r.buf.len());
    // A 4 GiB block to skip.
    let mut f = ng_base(true);
    f.block(0x0bad, &data).patch(3, 4, 0xffff_fff0);
    let mut r = Reader::new(&f.bytes[..]).unwrap();
    assert!(matches!(
        r.next_record(),
        Err(PcapError::NgTruncated { block: 3 })
    ));
    assert!(r.buf.len() <= GROW_STEP, "buffer grew to {}", r.buf.len());
    // A 4 GiB interface description, read ahead by new().
    let mut f = NgFile::new();
    f.shb(false)
        .idb(1, 0, &[(2, &data)])
        .patch(1, 4, 0xffff_fff0);
    assert!(matches!(
        Reader::new(&f.bytes[..]),
        Err(PcapError::NgTruncated { block: 1 })
    ));
    // A simple packet claiming 4 GiB in a 4 GiB block.
    let mut f = ng_base(false);
    f.spb(u32::MAX, &data).patch(3, 4, 0xffff_fff0);
    let mut r = Reader::new(&f.bytes[..]).unwrap();
    assert!(matches!(
        r.next_record(),
        Err(PcapError::NgTruncated { block: 3 })
    ));
    assert!(r.buf.len() <= GROW_STEP, "buffer grew to {}", r.buf.len());
}

#[test]
fn every_pcapng_prefix_reads_to_a_clean_end_or_a_truncation() {
    for big in [false, true] {
        let (f, want) = sample_ng(big);
        let bytes = &f.bytes;
        assert_eq!(f.blocks.last().unwrap().0, bytes.len());
        for n in 0..=bytes.len() {
            let prefix = &bytes[..n];
            let mut count = 0;
            let end = match Reader::new(prefix) {
                Err(e) => Err(e),
                Ok(mut r) => {
                    let end = loop {
                        match r.next_record() {
                            Ok(Some(rec)) => {
                                let w = &want[count];
                                assert_eq!(
                                    (rec.ts_ns, rec.orig_len, rec.linktype, rec.data),
                                    (w.0, w.1, w.2, &w.3[..])
                                );
                                count += 1;
                            }
                            other => break other.map(|_| ()),
                        }
                    };
                    // Fused: after the end or an error, only None.
                    assert!(matches!(r.next_record(), Ok(None)));
                    end
                }
            };
            let whole = f.blocks.iter().filter(|&&(e, p)| p && e <= n).count();
            assert_eq!(count, whole, "big {big}, prefix {n}");
            if n < 4 {
                assert!(matches!(end, Err(PcapError::ShortHeader { len }) if len == n));
            } else if f.blocks.iter().any(|&(e, _)| e == n) {
                assert!(end.is_ok(), "big {big}, prefix {n}: {end:?}");
            } else {
                let block = f.blocks.iter().filter(|&&(e, _)| e <= n).count() as u64;
                match end {
                    Err(PcapError::NgTruncated { block: b }) if b == block => {}
                    other => panic!("big {big}, prefix {n}: {other:?}, want block {block}"),
                }
            }
        }
    }
}

#[test]
fn corrupted_pcapng_gives_records_or_errors_never_panics() {
    let (good, _) = sample_ng(false);
    corrupt_and_read(&good.bytes, 0x2545_f491_4f6c_dd1d, 20_000);
}

/// Runs `editcap -F pcapng SRC DST`; panics (with the fix) if editcap
/// is not installed.
fn editcap_to_pcapng(src: &Path, dst: &Path) {
    let out = match std::process::Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(src)
        .arg(dst)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
            "editcap (package wireshark-common, with tshark) is not on PATH: \
             run scripts/setup.sh"
        ),
        Err(e) => panic!("cannot run editcap: {e}"),
    };
    assert!(
        out.status.success(),
        "editcap failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_rxe_capture_converted_by_editcap_reads_the_same_as_pcapng() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/rc_pingpong.pcap");
    let dir = tempfile::tempdir().unwrap();
    let ng_path = dir.path().join("rc_pingpong.pcapng");
    editcap_to_pcapng(&path, &ng_path);
    let ng_bytes = std::fs::read(&ng_path).unwrap();
    assert_eq!(&ng_bytes[0..4], &[0x0a, 0x0d, 0x0d, 0x0a]);

    let classic = read_recs(&std::fs::read(&path).unwrap()).unwrap();
    assert!(classic.len() > 10, "{} records", classic.len());
    let mut r = open(&ng_path).unwrap();
    assert!(r.is_pcapng());
    assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
    assert_eq!(r.precision(), Precision::Micro);
    // Copied back to classic pcap through write_record: the original,
    // byte for byte (editcap keeps the snaplen).
    let classic_reader = open(&path).unwrap();
    assert_eq!(r.snaplen(), classic_reader.snaplen());
    let mut w = Writer::new(
        Vec::new(),
        Precision::Micro,
        r.linktype(),
        classic_reader.snaplen(),
    )
    .unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        assert_eq!(rec.linktype, LINKTYPE_ETHERNET);
        w.write_record(&rec).unwrap();
        got.push((rec.ts_ns, rec.orig_len, rec.linktype, rec.data.to_vec()));
    }
    // Microsecond timestamps in both, so equal to the nanosecond.
    assert_eq!(got, classic);
    assert_eq!(w.into_inner(), std::fs::read(&path).unwrap());
}

#[test]
fn a_nanosecond_pcapng_from_editcap_keeps_the_nanoseconds() {
    // editcap (4.0) has no option to choose the resolution of the
    // pcapng it writes (no --set-tsresol or the like): it keeps the
    // input's, so a nanosecond classic file becomes interfaces with
    // if_tsresol 9.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("nano.pcap");
    let dst = dir.path().join("nano.pcapng");
    let frames = sample();
    std::fs::write(&src, write_all(Precision::Nano, DEFAULT_SNAPLEN, &frames)).unwrap();
    editcap_to_pcapng(&src, &dst);
    let mut r = open(&dst).unwrap();
    assert!(r.is_pcapng());
    assert_eq!(r.precision(), Precision::Nano);
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        let (ts, f) = &frames[n];
        assert_eq!(
            (rec.ts_ns, rec.orig_len, rec.linktype, rec.data),
            (*ts, f.len() as u32, LINKTYPE_ETHERNET, &f[..]),
            "record {n}"
        );
        n += 1;
    }
    assert_eq!(n, frames.len());
}
