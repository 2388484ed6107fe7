//! Wireshark's `tshark` as an independent judge of the frames we build: one
//! frame for every opcode of our table (RC, UC, UD SEND with DETH, XRC, the
//! CNP), over IPv4 and over IPv6 with an 802.1Q tag, CNPs built with
//! `FrameRepr::cnp` from ECN-marked frames, and every frame two RC
//! transport devices send each other (requests, ACKs, NAKs, READ responses,
//! atomic ACKs, retransmissions), are written to a pcap with
//! `ferroce::pcap` and read back with
//! `tshark -d udp.port==4791,infiniband -T fields`.
//!
//! Per frame, tshark must agree with what we meant to build: Ethernet and
//! VLAN, IP (addresses, DSCP, ECN, DF, TTL / hop limit, flow label, and the
//! IPv4 header checksum, which tshark is asked to verify), UDP (ports,
//! length, checksum 0), every BTH field, every extension header (RETH,
//! AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, DETH) and no header we did
//! not put, the padded payload length, and the ICRC where we put it. No frame
//! may be malformed or carry expert info of severity warning or error; the
//! two exceptions tshark 4.0 needs are allowed by name, narrowly, below
//! (`unknown_to_tshark_4_0`, `ipv6_zero_udp_checksum`).
//!
//! tshark 4.0 does not verify the ICRC (it only shows the 4 bytes as
//! `infiniband.invariant.crc`), so the ICRC is also recomputed here by an
//! oracle written from A17 §17.3.3 (crc32fast, not `ferroce::wire::icrc`),
//! itself checked against frames the Linux rxe driver sent.
//!
//! tshark is required: without it the test fails and says to run
//! `scripts/setup.sh`, which installs it.

mod common;

use common::frames;
use ferroce::pcap;
use ferroce::wire::opcode::{HeaderSet, Op, OpcodeInfo, Transport};
use ferroce::wire::{Ecn, Frame, FrameRepr, IpRepr, Opcode, Psn, ROCE_UDP_PORT};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long one tshark run may take (it needs about a second).
const TSHARK_LIMIT: Duration = Duration::from_secs(120);

/// Opcodes that tshark 4.0 (checked with 4.0.17, Debian 12's) does not know:
/// its `infiniband.bth.opcode` value table stops at 0x17 for RC, so FLUSH
/// (0x1C) and ATOMIC_WRITE (0x1D) show as "Unknown"; and it names 0x80
/// "CNP" while A17 §17.9.3 (and ConnectX, rxe) use 0x81, so our CNP shows as
/// "Unknown (129)". tshark then dissects the BTH and puts everything after
/// it, ICRC included, in `infiniband.vendor` ("Vendor Specific or Unknown
/// Header Sequence"), with no expert info. For exactly these opcodes the
/// test accepts that, and checks the vendor bytes are ours byte for byte.
/// The same holds for the whole XRC transport (0xA0-0xB7, see
/// [`unknown_to_tshark_4_0`]).
const UNKNOWN_TO_TSHARK_4_0: [u8; 3] = [0x1C, 0x1D, 0x81];

/// Whether tshark 4.0 (checked with 4.0.17) falls back to vendor bytes for
/// `opcode`: those of `UNKNOWN_TO_TSHARK_4_0`, and every XRC opcode. tshark
/// 4.0.17 names the XRC opcodes in its `infiniband.bth.opcode` value table
/// ("Extended Reliable Connection (XRC) - SEND First", ...) but has no
/// header sequence for them and no XRCETH field, so it dissects the BTH and
/// shows the rest (XRCETH, RETH, ..., ICRC) as `infiniband.vendor`, with no
/// expert info.
fn unknown_to_tshark_4_0(opcode: u8) -> bool {
    UNKNOWN_TO_TSHARK_4_0.contains(&opcode) || Opcode(opcode).transport() == Transport::Xrc
}

/// Expert info severities (epan/proto.h, PI_SEVERITY_MASK values).
const PI_WARN: u64 = 0x0060_0000;
const PI_ERROR: u64 = 0x0080_0000;
/// Expert info group of checksum problems.
const PI_CHECKSUM: u64 = 0x0100_0000;

/// Every field the checks read, in the order given to tshark.
const FIELDS: &[&str] = &[
    "frame.number",
    "frame.len",
    "eth.src",
    "eth.dst",
    "vlan.id",
    "vlan.priority",
    "ip.src",
    "ip.dst",
    "ip.dsfield.dscp",
    "ip.dsfield.ecn",
    "ip.flags.df",
    "ip.ttl",
    "ip.id",
    "ip.proto",
    "ip.checksum.status",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.tclass.dscp",
    "ipv6.tclass.ecn",
    "ipv6.flow",
    "ipv6.hlim",
    "ipv6.nxt",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "udp.checksum",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    // tshark 4.0 has no FECN / BECN fields: BTH byte 4 (FECN, BECN, 6
    // reserved bits) is its first `infiniband.reserved` ("Reserved: 40"
    // for a BECN). A DETH adds a second one (its reserved byte).
    "infiniband.reserved",
    // RETH, and the VA / R_Key of an AtomicETH (tshark reuses the fields).
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.atomiceth",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.aeth",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.deth",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.vendor",
    "infiniband.invariant.crc",
    "data.len",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.group",
    "_ws.expert.message",
];

/// Joins the occurrences of a field that appears more than once.
const AGGREGATOR: char = '|';

/// One frame we built and what we meant it to be.
#[derive(Clone)]
struct Sample {
    what: String,
    bytes: Vec<u8>,
    repr: FrameRepr,
    payload_len: usize,
}

fn sample(what: String, mut repr: FrameRepr, payload_len: usize) -> Sample {
    // The Repr's EtherType is ignored on emit (the IP version decides).
    repr.eth.ethertype = repr.ip.ethertype();
    let p = frames::payload(payload_len);
    let mut buf = vec![0u8; repr.frame_len(p.len())];
    let n = repr.emit(&p, &mut buf).expect("emit");
    buf.truncate(n);
    Sample {
        what,
        bytes: buf,
        repr,
        payload_len,
    }
}

/// `frames::every_opcode()`, with the Repr each frame was built from.
fn every_opcode_samples() -> Vec<Sample> {
    let mut out = Vec::new();
    for make in [frames::repr_v4, frames::repr_v6_vlan] {
        for info in Opcode::all() {
            out.push(sample(String::new(), make(info), frames::payload_len(info)));
        }
    }
    let built = frames::every_opcode();
    assert_eq!(built.len(), out.len());
    for (s, (what, bytes)) in out.iter_mut().zip(built) {
        assert_eq!(s.bytes, bytes, "{what}: rebuilt differently");
        s.what = what;
    }
    out
}

fn info(op: Op) -> &'static OpcodeInfo {
    Opcode::rc(op).info().unwrap()
}

/// Two CNPs, each answering an ECN-CE marked frame: an RC SEND over IPv4,
/// an RC RDMA WRITE over IPv6 with a VLAN tag. Returned with the marked
/// frame and the dest QP given to `FrameRepr::cnp`.
fn cnp_samples() -> Vec<(Sample, FrameRepr, u32)> {
    let mut out = Vec::new();
    for (what, mut marked, qp) in [
        (
            "CNP ipv4 for a marked RC_SEND_ONLY",
            frames::repr_v4(info(Op::SendOnly)),
            0x00_00d2,
        ),
        (
            "CNP ipv6+vlan for a marked RC_RDMA_WRITE_ONLY",
            frames::repr_v6_vlan(info(Op::RdmaWriteOnly)),
            0xAB_CDEF,
        ),
    ] {
        marked.ip.set_ecn(Ecn::Ce);
        marked.bth.pkey = 0x8001;
        let cnp = FrameRepr::cnp(&marked, qp, 48);
        out.push((sample(what.to_string(), cnp, 0), marked, qp));
    }
    out
}

/// Where `tshark` is on PATH; panics (the test must not skip) if nowhere.
fn tshark_path() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("tshark"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "tshark (Wireshark) is not installed, or not on PATH: this test needs it. \
                 Run scripts/setup.sh, which installs it (Debian package tshark)."
            )
        })
}

/// A tshark command that reads no personal preferences (so a user's
/// Wireshark settings cannot change what it says).
fn tshark(config_dir: &Path) -> Command {
    let mut c = Command::new(tshark_path());
    c.env("WIRESHARK_CONFIG_DIR", config_dir);
    c
}

/// The first line of `tshark --version`, e.g. "TShark (Wireshark) 4.0.17 ...".
fn tshark_version(config_dir: &Path) -> String {
    let out = common::spawn(tshark(config_dir).arg("--version"), TSHARK_LIMIT).wait();
    assert!(out.ok(), "tshark --version:\n{}", out.all());
    out.stdout.lines().next().unwrap_or_default().to_string()
}

/// What tshark said of one frame: each field's occurrences.
struct Row(HashMap<&'static str, Vec<String>>);

impl Row {
    fn all(&self, f: &str) -> &[String] {
        self.0.get(f).map_or(&[], |v| v.as_slice())
    }
    fn first(&self, f: &str) -> Option<&str> {
        self.all(f).first().map(String::as_str)
    }
    fn last(&self, f: &str) -> Option<&str> {
        self.all(f).last().map(String::as_str)
    }
}

/// Writes `samples` to a pcap and has tshark dissect it: one Row a frame.
fn dissect(samples: &[Sample]) -> (String, Vec<Row>) {
    let dir = common::TempDir::new();
    let config = dir.path().join("wireshark-config");
    std::fs::create_dir(&config).unwrap();
    let version = tshark_version(&config);
    let file = dir.path().join("frames.pcap");
    let mut w = pcap::create(&file, pcap::Precision::Nano).expect("create pcap");
    for (i, s) in samples.iter().enumerate() {
        w.write(1_700_000_000_000_000_000 + i as u64 * 1_000, &s.bytes)
            .expect("write pcap");
    }
    w.flush().expect("flush pcap");
    drop(w);

    let mut cmd = tshark(&config);
    cmd.arg("-n")
        .arg("-r")
        .arg(&file)
        .args(["-d", "udp.port==4791,infiniband"])
        // Have tshark verify our IPv4 header checksums too.
        .args(["-o", "ip.check_checksum:TRUE"])
        // Payload bytes are the application's: tshark's RPC-over-RDMA
        // heuristic would judge a short SEND payload as a broken RPC
        // message, which says nothing of the RoCE framing under it.
        .args(["--disable-protocol", "rpcordma"])
        .args(["-T", "fields", "-E", "header=n", "-E", "separator=/t"])
        .args(["-E", "occurrence=a"])
        .arg(format!("-Eaggregator={AGGREGATOR}"));
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = common::spawn(&mut cmd, TSHARK_LIMIT).wait();
    assert!(out.ok(), "{version}: tshark failed:\n{}", out.all());
    let rows: Vec<Row> = out
        .stdout
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), FIELDS.len(), "tshark line {line:?}");
            Row(FIELDS
                .iter()
                .zip(cols)
                .map(|(f, v)| {
                    let v = if v.is_empty() {
                        Vec::new()
                    } else {
                        v.split(AGGREGATOR).map(str::to_string).collect()
                    };
                    (*f, v)
                })
                .collect())
        })
        .collect();
    assert_eq!(
        rows.len(),
        samples.len(),
        "{version}: tshark gave {} frames for {}:\n{}",
        rows.len(),
        samples.len(),
        out.all()
    );
    (version, rows)
}

/// A tshark number: "0x..." in hex, else decimal.
fn num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A tshark boolean: 4.0 prints 1 / 0, later versions True / False.
fn flag(s: &str) -> Option<bool> {
    match s {
        "1" | "True" | "true" => Some(true),
        "0" | "False" | "false" => Some(false),
        _ => None,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// The ICRC of an IP packet (header through the byte before the ICRC), as
/// A17 §17.3.3 defines it: CRC-32 over 8 bytes of 0xFF for the LRH, then
/// the packet with its variant fields set to ones (IPv4: TOS, TTL, header
/// checksum; IPv6: traffic class, flow label, hop limit; the UDP checksum;
/// BTH byte 4). Returned as the 4 bytes on the wire (least significant
/// first, as rxe sends them). Written apart from `ferroce::wire::icrc`.
fn icrc_oracle(ip_packet: &[u8]) -> [u8; 4] {
    let mut m = ip_packet.to_vec();
    let ip_len = match m[0] >> 4 {
        4 => {
            assert_eq!(m[0] & 0x0F, 5, "IPv4 options");
            m[1] = 0xFF; // TOS
            m[8] = 0xFF; // TTL
            m[10] = 0xFF; // header checksum
            m[11] = 0xFF;
            20
        }
        6 => {
            m[0] |= 0x0F; // traffic class, high nibble
            m[1] = 0xFF; // traffic class, low nibble; flow label
            m[2] = 0xFF;
            m[3] = 0xFF;
            m[7] = 0xFF; // hop limit
            40
        }
        v => panic!("IP version {v}"),
    };
    m[ip_len + 6] = 0xFF; // UDP checksum
    m[ip_len + 7] = 0xFF;
    m[ip_len + 8 + 4] = 0xFF; // BTH: FECN, BECN, reserved
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xFF; 8]);
    h.update(&m);
    h.finalize().to_le_bytes()
}

/// Where the IP packet of an Ethernet frame starts and ends, read from the
/// EtherType and the IP length fields (not with `ferroce::wire`).
fn ip_packet_bounds(frame: &[u8]) -> Option<(usize, usize)> {
    let mut at = 12;
    let mut ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
    if ethertype == 0x8100 {
        at += 4;
        ethertype = u16::from_be_bytes([frame[at], frame[at + 1]]);
    }
    let ip = at + 2;
    let (hdr, total) = match ethertype {
        0x0800 => (
            20,
            u16::from_be_bytes([frame[ip + 2], frame[ip + 3]]) as usize,
        ),
        0x86DD => (
            40,
            40 + u16::from_be_bytes([frame[ip + 4], frame[ip + 5]]) as usize,
        ),
        _ => return None,
    };
    let proto = if ethertype == 0x0800 {
        frame[ip + 9]
    } else {
        frame[ip + 6]
    };
    let dport = u16::from_be_bytes([frame[ip + hdr + 2], frame[ip + hdr + 3]]);
    (proto == 17 && dport == ROCE_UDP_PORT).then_some((ip, ip + total))
}

/// Collects disagreements between tshark and what we built.
struct Checker<'a> {
    row: &'a Row,
    problems: Vec<String>,
}

impl Checker<'_> {
    fn fail(&mut self, msg: String) {
        self.problems.push(msg);
    }

    /// The field's first occurrence, read as a number, is `want`.
    fn num(&mut self, f: &str, want: u64) {
        match self.row.first(f) {
            Some(v) if num(v) == Some(want) => {}
            got => self.fail(format!("{f}: tshark {got:?}, ours {want} ({want:#x})")),
        }
    }

    fn flag(&mut self, f: &str, want: bool) {
        match self.row.first(f) {
            Some(v) if flag(v) == Some(want) => {}
            got => self.fail(format!("{f}: tshark {got:?}, ours {want}")),
        }
    }

    fn text(&mut self, f: &str, want: &str) {
        match self.row.first(f) {
            Some(v) if v.eq_ignore_ascii_case(want) => {}
            got => self.fail(format!("{f}: tshark {got:?}, ours {want:?}")),
        }
    }

    fn addr<A: std::str::FromStr + PartialEq + std::fmt::Debug>(&mut self, f: &str, want: A) {
        let got = self.row.first(f);
        if got.and_then(|v| v.parse::<A>().ok()).as_ref() != Some(&want) {
            self.fail(format!("{f}: tshark {got:?}, ours {want:?}"));
        }
    }

    fn absent(&mut self, f: &str) {
        if let Some(v) = self.row.first(f) {
            self.fail(format!(
                "{f}: tshark shows {v:?}, where we put no such field"
            ));
        }
    }
}

/// Whether an expert item is tshark's UDP dissector refusing a zero UDP
/// checksum over IPv6 ("Illegal checksum value (0)", error, checksum
/// group): RFC 8200 §8.1's default rule. RoCE v2 sends the UDP checksum as
/// 0 over IPv6 too (A17 §17.3.2.4, reference B.1; rxe's prepare6() does the
/// same), as RFC 6935 / 6936 allow for tunnel protocols, and Wireshark has
/// a preference for exactly that case (`udp.ignore_ipv6_zero_checksum`,
/// off by default). Allowed on IPv6 frames only, and only this one item;
/// the test still asserts `udp.checksum` is 0 on every frame.
fn ipv6_zero_udp_checksum(sev: u64, group: u64, msg: &str) -> bool {
    sev == PI_ERROR && group == PI_CHECKSUM && msg == "Illegal checksum value (0)"
}

/// Every check of one frame; returns its problems (empty: tshark agrees)
/// and how many expert items were allowed.
fn check(s: &Sample, row: &Row) -> (Vec<String>, usize) {
    let r = &s.repr;
    let ours = Frame::parse(&s.bytes).expect("our own frame parses");
    assert_eq!(ours.repr(), *r, "{}: parse(emit(r)) != r", s.what);
    assert_eq!(ours.payload.len(), s.payload_len, "{}", s.what);
    assert!(ours.icrc_ok(), "{}: our ICRC check fails", s.what);

    let mut c = Checker {
        row,
        problems: Vec::new(),
    };
    c.num("frame.len", s.bytes.len() as u64);

    // Ethernet, VLAN.
    c.text("eth.src", &r.eth.src.to_string());
    c.text("eth.dst", &r.eth.dst.to_string());
    match r.eth.vlan {
        Some(tag) => {
            c.num("vlan.id", tag.vid.into());
            c.num("vlan.priority", tag.pcp.into());
        }
        None => c.absent("vlan.id"),
    }

    // IP.
    let is_v6 = matches!(r.ip, IpRepr::V6(_));
    match r.ip {
        IpRepr::V4(ip) => {
            c.addr::<Ipv4Addr>("ip.src", ip.src);
            c.addr::<Ipv4Addr>("ip.dst", ip.dst);
            c.num("ip.dsfield.dscp", ip.dscp.into());
            c.num("ip.dsfield.ecn", ip.ecn.bits().into());
            c.flag("ip.flags.df", ip.dont_frag);
            c.num("ip.ttl", ip.ttl.into());
            c.num("ip.id", ip.ident.into());
            c.num("ip.proto", 17);
            // 1 = PROTO_CHECKSUM_E_GOOD: tshark verified it.
            c.num("ip.checksum.status", 1);
            c.absent("ipv6.src");
        }
        IpRepr::V6(ip) => {
            c.addr::<Ipv6Addr>("ipv6.src", ip.src);
            c.addr::<Ipv6Addr>("ipv6.dst", ip.dst);
            c.num("ipv6.tclass.dscp", ip.dscp.into());
            c.num("ipv6.tclass.ecn", ip.ecn.bits().into());
            c.num("ipv6.flow", ip.flow_label.into());
            c.num("ipv6.hlim", ip.hop_limit.into());
            c.num("ipv6.nxt", 17);
            c.absent("ip.src");
        }
    }

    // UDP: RoCE v2 port, the QP's source port, checksum 0, the length
    // through the ICRC.
    let (ip_start, ip_end) = ip_packet_bounds(&s.bytes).expect("a RoCE v2 frame");
    assert_eq!(ip_end, s.bytes.len(), "{}", s.what);
    let udp_start = ip_start + r.ip.header_len();
    c.num("udp.srcport", r.udp.src_port.into());
    c.num("udp.dstport", ROCE_UDP_PORT.into());
    c.num("udp.dstport", r.udp.dst_port.into());
    c.num("udp.length", (ip_end - udp_start) as u64);
    c.num("udp.checksum", 0);

    // BTH.
    let b = &r.bth;
    c.num("infiniband.bth.opcode", b.opcode.0.into());
    c.flag("infiniband.bth.se", b.solicited);
    c.flag("infiniband.bth.m", b.mig_req);
    c.num("infiniband.bth.padcnt", ours.pad.into());
    c.num("infiniband.bth.tver", 0);
    c.num("infiniband.bth.p_key", b.pkey.into());
    c.num("infiniband.bth.destqp", b.dest_qp.into());
    c.flag("infiniband.bth.a", b.ack_req);
    c.num("infiniband.bth.psn", b.psn.value().into());
    let byte4 = (u8::from(b.fecn) << 7) | (u8::from(b.becn) << 6);
    c.text("infiniband.reserved", &format!("{byte4:02x}"));

    // After the BTH: the extension headers, the payload and the ICRC.
    let bth_end = udp_start + 8 + 12;
    let icrc = &s.bytes[ip_end - 4..];
    let oracle = icrc_oracle(&s.bytes[ip_start..ip_end - 4]);
    if icrc != oracle {
        c.fail(format!(
            "ICRC: we carry {}, A17 gives {}",
            hex(icrc),
            hex(&oracle)
        ));
    }
    let unknown = row.first("infiniband.vendor").is_some();
    if unknown {
        if !unknown_to_tshark_4_0(b.opcode.0) {
            c.fail(format!(
                "tshark does not know opcode {:#04x} (infiniband.vendor present)",
                b.opcode.0
            ));
        }
        // All of it, ICRC included, is ours byte for byte.
        let want = hex(&s.bytes[bth_end..ip_end]);
        if row.last("infiniband.vendor") != Some(want.as_str()) {
            c.fail(format!(
                "infiniband.vendor: tshark {:?}, ours {want:?}",
                row.last("infiniband.vendor")
            ));
        }
    } else {
        // tshark shows the ICRC's 4 bytes as a big-endian number.
        let want = u32::from_be_bytes(icrc.try_into().unwrap());
        c.num("infiniband.invariant.crc", want.into());
        let padded = s.payload_len + ours.pad as usize;
        if padded > 0 {
            c.num("data.len", padded as u64);
        } else {
            c.absent("data.len");
        }
        let e = &r.ext;
        match (e.reth, e.atomic) {
            (Some(h), None) => {
                c.num("infiniband.reth.va", h.va);
                c.num("infiniband.reth.r_key", h.rkey.into());
                c.num("infiniband.reth.dmalen", h.dma_len.into());
            }
            (None, Some(h)) => {
                c.num("infiniband.reth.va", h.va);
                c.num("infiniband.reth.r_key", h.rkey.into());
                c.absent("infiniband.reth.dmalen");
            }
            (None, None) => c.absent("infiniband.reth.va"),
            (Some(_), Some(_)) => c.fail("RETH and AtomicETH both".into()),
        }
        match e.atomic {
            Some(h) => {
                c.num("infiniband.atomiceth.swapdt", h.swap_add);
                c.num("infiniband.atomiceth.cmpdt", h.compare);
            }
            None => c.absent("infiniband.atomiceth"),
        }
        match e.aeth {
            Some(h) => {
                c.num("infiniband.aeth.syndrome", h.syndrome.to_byte().into());
                c.num("infiniband.aeth.msn", h.msn.into());
            }
            None => c.absent("infiniband.aeth"),
        }
        match e.atomic_ack {
            Some(v) => c.num("infiniband.atomicacketh.origremdt", v),
            None => c.absent("infiniband.atomicacketh.origremdt"),
        }
        match e.imm {
            Some(v) => c.text("infiniband.immdt", &format!("{v:08x}")),
            None => c.absent("infiniband.immdt"),
        }
        match e.ieth {
            Some(v) => c.text("infiniband.ieth", &format!("{v:08x}")),
            None => c.absent("infiniband.ieth"),
        }
        match e.deth {
            Some(h) => {
                c.num("infiniband.deth.q_key", h.qkey.into());
                c.num("infiniband.deth.srcqp", h.src_qp.into());
            }
            None => c.absent("infiniband.deth"),
        }
        // (A FETH only comes with FLUSH, which tshark 4.0 does not know.)
        assert!(e.feth.is_none() || UNKNOWN_TO_TSHARK_4_0.contains(&b.opcode.0));
    }
    if b.opcode.info().unwrap().headers.contains(HeaderSet::CNP) {
        // The CNP's 16 reserved bytes are zero (checked through the vendor
        // bytes above when tshark does not know the opcode).
        assert_eq!(&s.bytes[bth_end..bth_end + 16], &[0u8; 16]);
    }

    // Nothing malformed, no expert warning or error.
    if !row.all("_ws.malformed").is_empty() {
        c.fail(format!("_ws.malformed: {:?}", row.all("_ws.malformed")));
    }
    let sev = row.all("_ws.expert.severity");
    let group = row.all("_ws.expert.group");
    let msg = row.all("_ws.expert.message");
    let mut allowed = 0;
    for (i, sv) in sev.iter().enumerate() {
        let sv = num(sv).unwrap_or(u64::MAX);
        let gr = group.get(i).and_then(|g| num(g)).unwrap_or(0);
        let m = msg.get(i).map_or("", String::as_str);
        if sv < PI_WARN {
            println!("{}: tshark note (severity {sv:#x}): {m}", s.what);
        } else if is_v6 && ipv6_zero_udp_checksum(sv, gr, m) {
            allowed += 1;
        } else {
            c.fail(format!(
                "expert info: {m:?} (severity {sv:#x}, group {gr:#x})"
            ));
        }
    }
    (c.problems, allowed)
}

/// Checks every sample against its row; panics with all the problems.
fn check_all(version: &str, samples: &[Sample], rows: &[Row]) {
    let mut report = String::new();
    let mut failed = 0;
    let mut allowed_total = 0;
    for (i, (s, row)) in samples.iter().zip(rows).enumerate() {
        let (problems, allowed) = check(s, row);
        allowed_total += allowed;
        let unknown = row.first("infiniband.vendor").is_some();
        println!(
            "frame {:>2} {:<45} opcode {:>3} {}{}",
            i + 1,
            s.what,
            row.first("infiniband.bth.opcode").unwrap_or("?"),
            if problems.is_empty() {
                "ok"
            } else {
                "DISAGREES"
            },
            if unknown {
                " (opcode unknown to this tshark)"
            } else {
                ""
            },
        );
        if !problems.is_empty() {
            failed += 1;
            let _ = writeln!(report, "frame {} ({}):", i + 1, s.what);
            for p in problems {
                let _ = writeln!(report, "    {p}");
            }
        }
    }
    println!(
        "{version}: {} frames, {failed} disagreeing; {allowed_total} IPv6 zero-UDP-checksum \
         expert items allowed",
        samples.len()
    );
    assert!(
        failed == 0,
        "{version} disagrees with {failed} of {} frames:\n{report}",
        samples.len()
    );
}

#[test]
fn every_opcode_decodes_in_tshark_as_we_built_it() {
    let samples = every_opcode_samples();
    // RC (all of ours), UC, UD SEND with DETH, XRC, the CNP; IPv4 and IPv6.
    assert_eq!(samples.len(), 2 * Opcode::all().count());
    let (version, rows) = dissect(&samples);
    check_all(&version, &samples, &rows);

    // What tshark knows, it decoded: only the opcodes named in
    // UNKNOWN_TO_TSHARK_4_0 and the XRC ones may have fallen back to vendor
    // bytes (also checked frame by frame above).
    let unknown: Vec<String> = samples
        .iter()
        .zip(&rows)
        .filter(|(_, r)| r.first("infiniband.vendor").is_some())
        .map(|(s, _)| s.what.clone())
        .collect();
    println!("{version} does not know: {unknown:?}");
    let allowed = Opcode::all()
        .filter(|i| unknown_to_tshark_4_0(i.opcode.0))
        .count();
    assert!(unknown.len() <= 2 * allowed, "{unknown:?}");
}

#[test]
fn a_cnp_for_a_marked_frame_decodes_in_tshark_with_becn() {
    let cnps = cnp_samples();
    let samples: Vec<Sample> = cnps.iter().map(|(s, _, _)| s.clone()).collect();
    let (version, rows) = dissect(&samples);
    check_all(&version, &samples, &rows);
    for ((s, marked, qp), row) in cnps.iter().zip(&rows) {
        let w = &s.what;
        // Opcode 0x81 (tshark 4.0 prints the number and calls it Unknown,
        // see UNKNOWN_TO_TSHARK_4_0), BECN set in BTH byte 4, the dest QP
        // the marked frame came from, PSN 0, the marked frame's P_Key.
        assert_eq!(row.first("infiniband.bth.opcode"), Some("129"), "{w}");
        assert_eq!(row.first("infiniband.reserved"), Some("40"), "{w}: BECN");
        assert_eq!(
            row.first("infiniband.bth.destqp").and_then(num),
            Some(u64::from(*qp)),
            "{w}"
        );
        assert_eq!(row.first("infiniband.bth.psn"), Some("0"), "{w}");
        assert_eq!(
            row.first("infiniband.bth.p_key").and_then(num),
            Some(0x8001),
            "{w}"
        );
        // Sent back to the marked frame's sender, DSCP 48, not ECN-capable.
        let (src, dst, dscp, ecn) = match marked.ip {
            IpRepr::V4(_) => ("ip.src", "ip.dst", "ip.dsfield.dscp", "ip.dsfield.ecn"),
            IpRepr::V6(_) => (
                "ipv6.src",
                "ipv6.dst",
                "ipv6.tclass.dscp",
                "ipv6.tclass.ecn",
            ),
        };
        let ip = |f| {
            row.first(f)
                .and_then(|a| a.parse::<std::net::IpAddr>().ok())
        };
        assert_eq!(ip(src), Some(marked.ip.dst()), "{w}");
        assert_eq!(ip(dst), Some(marked.ip.src()), "{w}");
        assert_eq!(row.first(dscp), Some("48"), "{w}");
        assert_eq!(row.first(ecn), Some("0"), "{w}");
        assert_eq!(row.first("eth.dst"), Some(&*marked.eth.src.to_string()));
        assert_eq!(
            row.first("udp.srcport").and_then(num),
            Some(marked.udp.src_port.into())
        );
        assert_eq!(s.repr.bth.psn, Psn::new(0));
    }
}

/// The ICRC oracle above gives what the Linux rxe driver put on the wire.
#[test]
fn the_icrc_oracle_agrees_with_rxe() {
    let mut checked = 0;
    for name in ["rc_pingpong.pcap", "ud_pingpong.pcap", "uc_pingpong.pcap"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/vectors")
            .join(name);
        let mut r = pcap::open(&path).expect("open rxe capture");
        while let Some(rec) = r.next_record().expect("read rxe capture") {
            let Some((start, end)) = ip_packet_bounds(rec.data) else {
                continue;
            };
            let carried = &rec.data[end - 4..end];
            assert_eq!(
                icrc_oracle(&rec.data[start..end - 4]),
                carried,
                "{name}: an rxe frame"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 30,
        "only {checked} RoCE frames in the rxe captures"
    );
}

/// The frames the RC transport itself sends, not hand-built ones: two
/// devices run SEND (with immediate and invalidate), WRITE (with
/// immediate), a multi-packet READ, both atomics, a lost packet (NAK PSN
/// sequence error and go-back-N from a MIDDLE), an RNR NAK and a NAK
/// remote access error; every frame either side wrote goes to tshark and
/// must decode as what our parser says it is.
#[test]
fn the_transports_own_frames_decode_in_tshark() {
    use ferroce::host::pump::MAX_FRAME;
    use ferroce::time::{Duration as VDuration, Instant};
    use ferroce::transport::connect::{connect_qp, ConnectParams};
    use ferroce::transport::*;
    use ferroce::wire::MacAddr;

    let (mac_a, mac_b) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
    let (ip_a, ip_b) = ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    let mut a = Device::new(DeviceConfig::new(mac_a, ip_a)).unwrap();
    let mut b = Device::new(DeviceConfig::new(mac_b, ip_b)).unwrap();
    let setup = |d: &mut Device| {
        let pd = d.alloc_pd();
        let cq = d.create_cq(256).unwrap();
        let mr = d.reg_mr(MrSpec::new(pd, 1 << 16, Access::ALL)).unwrap();
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        (pd, mr, qp)
    };
    let (_, mra, qa) = setup(&mut a);
    let (pdb, mrb, qb) = setup(&mut b);
    // The payload pattern of the hand-built samples (all zeros would look
    // like RPC-over-RDMA to tshark's heuristics).
    a.mr_mut(mra.lkey)
        .unwrap()
        .copy_from_slice(&frames::payload(1 << 16));
    // A region of b's that a SEND with invalidate may invalidate.
    let inv = b
        .reg_mr(MrSpec::new(
            pdb,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_INVALIDATE,
        ))
        .unwrap();
    let p = ConnectParams {
        traffic_class: 26 << 2 | 2, // DSCP 26, ECT(0), as ConnectX sends
        min_rnr_timer: 1,
        ..ConnectParams::default()
    };
    connect_qp(&mut a, qa, qb, mac_b, ip_b, &p, 100, 200).unwrap();
    connect_qp(&mut b, qb, qa, mac_a, ip_a, &p, 200, 100).unwrap();
    let sge = |k: &MrKeys, off: u64, len: u32| Sge {
        addr: k.addr + off,
        length: len,
        lkey: k.lkey,
    };
    let remote = |off: u64| (mrb.addr + off, mrb.rkey);
    let ops = [
        (SendOp::Send, 3000),
        (SendOp::SendWithImm(0x1234_5678), 5),
        (SendOp::SendWithInv(inv.rkey), 1),
        (
            SendOp::Write {
                remote_addr: remote(0).0,
                rkey: remote(0).1,
            },
            2500,
        ),
        (
            SendOp::WriteWithImm {
                remote_addr: remote(8192).0,
                rkey: remote(8192).1,
                imm: 9,
            },
            7,
        ),
        (
            SendOp::Read {
                remote_addr: remote(0).0,
                rkey: remote(0).1,
            },
            2100,
        ),
        (
            SendOp::CompareSwap {
                remote_addr: remote(16384).0,
                rkey: remote(16384).1,
                compare: 0,
                swap: 5,
            },
            8,
        ),
        (
            SendOp::FetchAdd {
                remote_addr: remote(16384).0,
                rkey: remote(16384).1,
                add: 3,
            },
            8,
        ),
        // No receive posted for this one at first: RNR NAK, then a retry.
        (SendOp::Send, 64),
        // A bad R_Key: NAK remote access error, the QP goes to ERR.
        (
            SendOp::Write {
                remote_addr: remote(0).0,
                rkey: 0xBAD,
            },
            16,
        ),
    ];
    for i in 0..4 {
        b.post_recv(
            qb,
            RecvWr {
                wr_id: i,
                sges: smallvec::smallvec![sge(&mrb, 32768 + i * 4096, 4096)],
            },
        )
        .unwrap();
    }
    for (i, (op, len)) in ops.iter().enumerate() {
        let w = SendWr::new(i as u64, *op, Payload::sge(sge(&mra, 0, *len)));
        a.post_send(qa, w).unwrap();
    }
    // Shuttle frames both ways in virtual time, recording each; drop the
    // first copy of the SEND's second packet (PSN 101).
    let mut samples = Vec::new();
    let mut buf = vec![0u8; MAX_FRAME];
    let mut now = Instant::ZERO;
    let mut dropped = false;
    let mut reposted = false;
    for _ in 0..10_000 {
        let mut moved = false;
        while let Some(n) = a.poll_transmit(now, &mut buf) {
            let f = buf[..n].to_vec();
            let parsed = Frame::parse(&f).unwrap();
            let (psn, op) = (parsed.psn().value(), parsed.opcode());
            samples.push(Sample {
                what: format!("a {op} psn {psn}"),
                repr: parsed.repr(),
                payload_len: parsed.payload.len(),
                bytes: f.clone(),
            });
            if psn == 101 && !dropped {
                dropped = true;
                continue;
            }
            b.handle(now, &f);
            moved = true;
        }
        while let Some(n) = b.poll_transmit(now, &mut buf) {
            let f = buf[..n].to_vec();
            let parsed = Frame::parse(&f).unwrap();
            samples.push(Sample {
                what: format!("b {} psn {}", parsed.opcode(), parsed.psn().value()),
                repr: parsed.repr(),
                payload_len: parsed.payload.len(),
                bytes: f.clone(),
            });
            a.handle(now, &f);
            moved = true;
        }
        if moved {
            continue;
        }
        if b.rx_counters().frames > 0 && !reposted && b.qp_counters(qb).unwrap().out_of_buffer > 0 {
            reposted = true;
            b.post_recv(
                qb,
                RecvWr {
                    wr_id: 9,
                    sges: smallvec::smallvec![sge(&mrb, 49152, 4096)],
                },
            )
            .unwrap();
        }
        match a.poll_timeout() {
            Some(t) => {
                now = t.max(now + VDuration::from_nanos(1));
                a.handle_timeout(now);
            }
            None => break,
        }
    }
    let ops_seen: std::collections::BTreeSet<String> = samples
        .iter()
        .map(|s| s.what.split(" psn").next().unwrap_or("").to_string())
        .collect();
    println!("{} frames: {ops_seen:?}", samples.len());
    let naks: Vec<u8> = samples
        .iter()
        .filter_map(|s| s.repr.ext.aeth)
        .map(|a| a.syndrome.to_byte())
        .filter(|&b| b & 0xE0 != 0)
        .collect();
    // A sequence NAK, an RNR NAK (timer 1) and a remote access NAK.
    assert!(
        naks.contains(&0x60) && naks.contains(&0x21) && naks.contains(&0x62),
        "{naks:x?}"
    );
    let (version, rows) = dissect(&samples);
    check_all(&version, &samples, &rows);
}
