//! `ferroce decode`: what a capture holds, one line (or one JSON object) per
//! frame, and a verdict. [`Decoder`] turns captured frames into [`Line`]s
//! and keeps the totals; [`run`] is the command.
//!
//! A frame is one of:
//! - **RoCE**: UDP to port 4791 that parses ([`crate::wire::Frame`]); shown
//!   with its opcode, QP, PSN, extension headers and `icrc=ok|BAD`;
//! - **malformed**: UDP to port 4791 that does not parse; shown with why;
//! - **skipped**: anything else (ARP, TCP, ...), named through etherparse;
//!   also a frame the capture cut short (snaplen), which cannot be judged.
//!
//! "roce frames" in the totals counts RoCE and malformed frames together:
//! `roce = icrc ok + icrc bad + malformed`.

use crate::wire::ext::{AckSyndrome, AtomicEthRepr, DethRepr, FethRepr, RethRepr};
use crate::wire::{Error, Frame};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Totals over everything decoded so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Frames to UDP port 4791: RoCE and malformed together.
    pub roce: u64,
    /// RoCE frames whose ICRC matched.
    pub icrc_ok: u64,
    /// RoCE frames whose ICRC did not match.
    pub icrc_bad: u64,
    /// Frames to UDP port 4791 that did not parse.
    pub malformed: u64,
    /// Frames that are not RoCE, or cut short by the capture.
    pub skipped: u64,
}

impl Totals {
    /// Whether everything RoCE was well-formed with a good ICRC.
    pub fn clean(&self) -> bool {
        self.icrc_bad == 0 && self.malformed == 0
    }

    /// The summary line.
    pub fn line(&self) -> String {
        format!(
            "{} roce frames, {} icrc ok, {} icrc bad, {} malformed",
            self.roce, self.icrc_ok, self.icrc_bad, self.malformed
        )
    }
}

/// AETH fields.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AethLine {
    /// "ack", "rnr-nak", "nak" or "reserved".
    pub kind: &'static str,
    /// The syndrome byte.
    pub syndrome: u8,
    /// ACK: credit code; RNR NAK: timer code; NAK: NAK code.
    pub value: u8,
    /// NAK reason, e.g. "psn-seq-err".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nak: Option<&'static str>,
    /// The message sequence number.
    pub msn: u32,
}

/// One RoCE frame's fields, as printed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RoceLine {
    /// IP source address.
    pub src: String,
    /// IP destination address.
    pub dst: String,
    /// UDP source port (the flow's entropy).
    pub udp_sport: u16,
    /// The 802.1Q VLAN ID, if tagged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// The BTH opcode's name, e.g. "RC_SEND_ONLY" or "CNP".
    pub opcode: String,
    /// The BTH opcode byte.
    pub opcode_num: u8,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH packet sequence number (24 bits).
    pub psn: u32,
    /// BTH AckReq bit.
    pub ack_req: bool,
    /// BTH solicited-event bit.
    pub solicited: bool,
    /// BTH partition key.
    pub pkey: u16,
    /// BTH BECN bit (set on a CNP).
    pub becn: bool,
    /// IP DSCP.
    pub dscp: u8,
    /// IP ECN codepoint's name, e.g. "ect0" or "ce".
    pub ecn: &'static str,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// DETH (UD): Q_Key and source QP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deth: Option<DethRepr>,
    /// XRCETH: the XRC SRQ number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xrc_srq: Option<u32>,
    /// FETH (FLUSH): selectivity level and placement type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feth: Option<FethRepr>,
    /// RETH: virtual address, R_Key and DMA length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth: Option<RethRepr>,
    /// AtomicETH: virtual address, R_Key, swap/add and compare data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic: Option<AtomicEthRepr>,
    /// AETH, decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth: Option<AethLine>,
    /// AtomicAckETH: the original remote data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic_ack: Option<u64>,
    /// ImmDt: the immediate data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ieth: Option<u32>,
    /// Payload bytes, pad excluded.
    pub payload_len: usize,
    /// Pad bytes (BTH PadCnt).
    pub pad: u8,
    /// Whether the ICRC matched.
    pub icrc_ok: bool,
    /// The ICRC carried.
    pub icrc: u32,
    /// The ICRC computed, when it differs from the one carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc_expected: Option<u32>,
    /// ferroce's INT trailer after the IP packet (not standard; between
    /// ferroce endpoints that both asked): "collect" or "echo" and the
    /// hops' queue lengths in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub int: Option<IntLine>,
    /// ferroce's selective-repeat trailer after the IP packet (and after
    /// the INT trailer): a request's placement or a NAK's SACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sr: Option<SrLine>,
}

/// An INT trailer, as printed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IntLine {
    /// "collect" (a request's) or "echo" (an acknowledgement's).
    pub kind: &'static str,
    /// Each hop's queue length in bytes, first hop first.
    pub qlen: Vec<u64>,
    /// More hops than the trailer has room for.
    pub overflow: bool,
}

/// A selective-repeat trailer, as printed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SrLine {
    /// A request's: the message the packet belongs to.
    Place {
        /// The message's first PSN.
        first_psn: u32,
        /// Its receive sequence number.
        rsn: u32,
        /// A WRITE's R_Key (0 for a SEND).
        rkey: u32,
        /// A WRITE's address of its first byte.
        va: u64,
        /// The message's length.
        len: u32,
    },
    /// A NAK's: the PSN that arrived ahead of its turn.
    Sack {
        /// That PSN.
        psn: u32,
    },
}

/// The INT and selective-repeat trailers after the IP packet of `data`,
/// as the transport reads them (INT first).
fn trailers(data: &[u8]) -> (Option<IntLine>, Option<SrLine>) {
    use crate::wire::int::{self, Trailer};
    use crate::wire::sr::SrTrailer;
    let Some(mut rest) = int::trailer_offset(data).and_then(|at| data.get(at..)) else {
        return (None, None);
    };
    let int = Trailer::parse(rest).map(|t| {
        rest = &rest[int::LEN..];
        let (kind, s) = match t {
            Trailer::Collect(s) => ("collect", s),
            Trailer::Echo(s) => ("echo", s),
        };
        IntLine {
            kind,
            qlen: s.hops().iter().map(|h| h.qlen_bytes()).collect(),
            overflow: s.overflow,
        }
    });
    let sr = SrTrailer::parse(rest).map(|t| match t {
        SrTrailer::Place(p) => SrLine::Place {
            first_psn: p.first_psn.value(),
            rsn: p.rsn,
            rkey: p.rkey,
            va: p.va,
            len: p.len,
        },
        SrTrailer::Sack(psn) => SrLine::Sack { psn: psn.value() },
    });
    (int, sr)
}

/// What a frame turned out to be.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Verdict {
    /// A RoCE frame that parsed.
    Roce(Box<RoceLine>),
    /// UDP to port 4791 that does not parse.
    Malformed {
        /// IP source address ("?" when unknown).
        src: String,
        /// IP destination address ("?" when unknown).
        dst: String,
        /// Why it does not parse.
        error: String,
    },
    /// Not RoCE, or cut short by the capture.
    Skipped {
        /// What it is, e.g. "ARP Request" or "IPv4 TCP ...".
        what: String,
    },
}

/// One decoded frame.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Line {
    /// 1-based index within its file.
    pub frame: u64,
    /// Capture time since the Unix epoch, ns.
    pub ts_ns: u64,
    /// Seconds since the first frame of the file.
    pub time: f64,
    /// The frame's length on the wire, in bytes.
    pub len: usize,
    /// What the frame turned out to be.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Link types of captures the decoder reads (tcpdump.org/linktypes.html).
pub mod linktype {
    /// Ethernet II.
    pub const ETHERNET: u32 = 1;
    /// Raw IPv4 or IPv6, no link header.
    pub const RAW: u32 = 101;
    /// Linux "cooked" capture v1 (`tcpdump -i any` on older libpcap).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux "cooked" capture v2 (`tcpdump -i any`).
    pub const LINUX_SLL2: u32 = 276;

    /// Whether the decoder can read frames of this link type.
    pub fn supported(lt: u32) -> bool {
        matches!(lt, ETHERNET | RAW | LINUX_SLL | IPV4 | IPV6 | LINUX_SLL2)
    }
}

/// Decodes frames one at a time and keeps the totals.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The totals over every frame decoded so far.
    pub totals: Totals,
    first_ts: Option<u64>,
    index: u64,
    /// An Ethernet frame rebuilt from another link type's frame.
    scratch: Vec<u8>,
}

impl Decoder {
    /// A decoder with zero totals.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Starts a new file: frame numbers and relative times restart.
    pub fn next_file(&mut self) {
        self.first_ts = None;
        self.index = 0;
    }

    /// Decodes one captured Ethernet frame; `orig_len` is its length on
    /// the wire (more than `data.len()` when the capture cut it).
    pub fn frame(&mut self, ts_ns: u64, orig_len: usize, data: &[u8]) -> Line {
        self.frame_of(linktype::ETHERNET, ts_ns, orig_len, data)
    }

    /// Decodes one captured frame of link type `lt` (see [`linktype`]):
    /// other link layers are rebuilt as Ethernet (unknown MACs as zeros).
    pub fn frame_of(&mut self, lt: u32, ts_ns: u64, orig_len: usize, data: &[u8]) -> Line {
        self.index += 1;
        let first = *self.first_ts.get_or_insert(ts_ns);
        let mut scratch = std::mem::take(&mut self.scratch);
        let verdict = match as_ethernet(lt, data, &mut scratch) {
            Ok(eth) => {
                // The rebuilt frame differs in length from the captured one.
                let orig = orig_len + eth.len() - data.len();
                self.verdict(orig, eth)
            }
            Err(what) => {
                self.totals.skipped += 1;
                Verdict::Skipped { what }
            }
        };
        self.scratch = scratch;
        Line {
            frame: self.index,
            ts_ns,
            time: ts_ns.saturating_sub(first) as f64 / 1e9,
            len: orig_len,
            verdict,
        }
    }

    fn verdict(&mut self, orig_len: usize, data: &[u8]) -> Verdict {
        let t = &mut self.totals;
        match Frame::parse(data) {
            Ok(f) => {
                t.roce += 1;
                let mut line = roce_line(&f);
                (line.int, line.sr) = trailers(data);
                if line.icrc_ok {
                    t.icrc_ok += 1;
                } else {
                    t.icrc_bad += 1;
                }
                Verdict::Roce(Box::new(line))
            }
            Err(Error::NotRoce) => {
                t.skipped += 1;
                Verdict::Skipped {
                    what: describe_other(data),
                }
            }
            Err(_) if data.len() < orig_len => {
                t.skipped += 1;
                Verdict::Skipped {
                    what: format!(
                        "cut by the capture ({} of {orig_len} bytes): {}",
                        data.len(),
                        describe_other(data)
                    ),
                }
            }
            Err(e) => {
                t.roce += 1;
                t.malformed += 1;
                let (src, dst) = addresses(data);
                Verdict::Malformed {
                    src,
                    dst,
                    error: e.to_string(),
                }
            }
        }
    }
}

/// The frame as Ethernet: itself for Ethernet, else rebuilt in `scratch`.
fn as_ethernet<'a>(lt: u32, data: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], String> {
    let (src, ethertype, payload): ([u8; 6], u16, &[u8]) = match lt {
        linktype::ETHERNET => return Ok(data),
        linktype::LINUX_SLL | linktype::LINUX_SLL2 => {
            let (hdr, proto_at, addr_len_at, addr_at) = if lt == linktype::LINUX_SLL {
                (16, 14, 4, 6)
            } else {
                (20, 0, 11, 12)
            };
            if data.len() < hdr {
                return Err("cooked capture header cut short".into());
            }
            let mut src = [0u8; 6];
            let alen = if lt == linktype::LINUX_SLL {
                u16::from_be_bytes([data[addr_len_at], data[addr_len_at + 1]]) as usize
            } else {
                data[addr_len_at] as usize
            };
            if alen == 6 {
                src.copy_from_slice(&data[addr_at..addr_at + 6]);
            }
            let proto = u16::from_be_bytes([data[proto_at], data[proto_at + 1]]);
            (src, proto, &data[hdr..])
        }
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => {
            let ty = match data.first().map(|b| b >> 4) {
                Some(4) => crate::wire::ethernet::ETHERTYPE_IPV4,
                Some(6) => crate::wire::ethernet::ETHERTYPE_IPV6,
                _ => return Err("raw capture that is neither IPv4 nor IPv6".into()),
            };
            ([0; 6], ty, data)
        }
        other => return Err(format!("link type {other} not decoded")),
    };
    scratch.clear();
    scratch.extend_from_slice(&[0; 6]);
    scratch.extend_from_slice(&src);
    scratch.extend_from_slice(&ethertype.to_be_bytes());
    scratch.extend_from_slice(payload);
    Ok(scratch)
}

fn roce_line(f: &Frame<'_>) -> RoceLine {
    let r = &f.repr();
    let e = &r.ext;
    let icrc_ok = f.icrc_ok();
    RoceLine {
        src: r.ip.src().to_string(),
        dst: r.ip.dst().to_string(),
        udp_sport: r.udp.src_port,
        vlan: r.eth.vlan.map(|v| v.vid),
        opcode: r.bth.opcode.to_string(),
        opcode_num: r.bth.opcode.0,
        dest_qp: r.bth.dest_qp,
        psn: r.bth.psn.value(),
        ack_req: r.bth.ack_req,
        solicited: r.bth.solicited,
        pkey: r.bth.pkey,
        becn: r.bth.becn,
        dscp: r.ip.dscp(),
        ecn: r.ip.ecn().name(),
        ttl: r.ip.ttl(),
        deth: e.deth,
        xrc_srq: e.xrceth,
        feth: e.feth,
        reth: e.reth,
        atomic: e.atomic,
        aeth: e.aeth.map(|a| {
            let (kind, value, nak) = match a.syndrome {
                AckSyndrome::Ack { credit } => ("ack", credit, None),
                AckSyndrome::RnrNak { timer } => ("rnr-nak", timer, None),
                AckSyndrome::Nak(c) => ("nak", c.code(), Some(c.name())),
                AckSyndrome::Reserved(b) => ("reserved", b, None),
            };
            AethLine {
                kind,
                syndrome: a.syndrome.to_byte(),
                value,
                nak,
                msn: a.msn,
            }
        }),
        atomic_ack: e.atomic_ack,
        imm: e.imm,
        ieth: e.ieth,
        payload_len: f.payload.len(),
        pad: f.pad,
        icrc_ok,
        icrc: f.icrc,
        icrc_expected: (!icrc_ok).then(|| f.icrc_expected()),
        int: None,
        sr: None,
    }
}

/// Source and destination of a frame that is not (valid) RoCE, as far as
/// etherparse can tell.
fn addresses(data: &[u8]) -> (String, String) {
    use etherparse::{NetSlice, SlicedPacket};
    match SlicedPacket::from_ethernet(data).ok().and_then(|p| p.net) {
        Some(NetSlice::Ipv4(ip)) => (
            ip.header().source_addr().to_string(),
            ip.header().destination_addr().to_string(),
        ),
        Some(NetSlice::Ipv6(ip)) => (
            ip.header().source_addr().to_string(),
            ip.header().destination_addr().to_string(),
        ),
        _ => ("?".into(), "?".into()),
    }
}

/// A short name for a frame that is not RoCE (the slow path: etherparse).
pub fn describe_other(data: &[u8]) -> String {
    use etherparse::{LinkSlice, NetSlice, SlicedPacket, TransportSlice};
    let p = match SlicedPacket::from_ethernet(data) {
        Ok(p) => p,
        Err(e) => return format!("not decodable ({e})"),
    };
    let (src, dst, ip) = match &p.net {
        Some(NetSlice::Arp(a)) => {
            return format!("ARP {:?}", a.operation());
        }
        Some(NetSlice::Ipv4(ip)) => (
            ip.header().source_addr().to_string(),
            ip.header().destination_addr().to_string(),
            "IPv4",
        ),
        Some(NetSlice::Ipv6(ip)) => (
            ip.header().source_addr().to_string(),
            ip.header().destination_addr().to_string(),
            "IPv6",
        ),
        None => {
            let ty = match &p.link {
                Some(LinkSlice::Ethernet2(e)) => format!("{:#06x}", e.ether_type().0),
                _ => "?".into(),
            };
            return format!("EtherType {ty}");
        }
    };
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => format!(
            "{ip} TCP {src}:{} -> {dst}:{}",
            t.source_port(),
            t.destination_port()
        ),
        Some(TransportSlice::Udp(u)) => format!(
            "{ip} UDP {src}:{} -> {dst}:{}",
            u.source_port(),
            u.destination_port()
        ),
        Some(TransportSlice::Icmpv4(_)) | Some(TransportSlice::Icmpv6(_)) => {
            format!("{ip} ICMP {src} -> {dst}")
        }
        _ => format!("{ip} {src} -> {dst}"),
    }
}

impl Line {
    /// The one-line text form.
    pub fn text(&self) -> String {
        let mut s = format!("{:5} {:11.6} ", self.frame, self.time);
        match &self.verdict {
            Verdict::Skipped { what } => {
                let _ = write!(s, "skipped: {what}");
            }
            Verdict::Malformed { src, dst, error } => {
                let _ = write!(s, "{src} -> {dst} MALFORMED: {error}");
            }
            Verdict::Roce(r) => {
                // An IPv6 source gets brackets before its port.
                let src = if r.src.contains(':') {
                    format!("[{}]", r.src)
                } else {
                    r.src.clone()
                };
                let _ = write!(
                    s,
                    "{src}:{} -> {} {} qp={:#08x} psn={} A={}",
                    r.udp_sport, r.dst, r.opcode, r.dest_qp, r.psn, r.ack_req as u8
                );
                if r.solicited {
                    s.push_str(" SE=1");
                }
                if r.pkey != 0xFFFF {
                    let _ = write!(s, " pkey={:#06x}", r.pkey);
                }
                if r.becn {
                    s.push_str(" BECN=1");
                }
                if let Some(v) = r.vlan {
                    let _ = write!(s, " vlan={v}");
                }
                if let Some(d) = &r.deth {
                    let _ = write!(s, " deth(qkey={:#x} src_qp={:#x})", d.qkey, d.src_qp);
                }
                if let Some(v) = r.xrc_srq {
                    let _ = write!(s, " xrc_srq={v:#x}");
                }
                if let Some(x) = &r.feth {
                    let _ = write!(
                        s,
                        " feth(selectivity={} placement={})",
                        x.selectivity, x.placement
                    );
                }
                if let Some(x) = &r.reth {
                    let _ = write!(
                        s,
                        " reth(va={:#x} rkey={:#x} len={})",
                        x.va, x.rkey, x.dma_len
                    );
                }
                if let Some(a) = &r.atomic {
                    let _ = write!(
                        s,
                        " atomic(va={:#x} rkey={:#x} swap_add={:#x} compare={:#x})",
                        a.va, a.rkey, a.swap_add, a.compare
                    );
                }
                if let Some(a) = &r.aeth {
                    match (a.kind, a.nak) {
                        ("ack", _) => {
                            let _ = write!(s, " aeth(ack credit={} msn={})", a.value, a.msn);
                        }
                        ("rnr-nak", _) => {
                            let _ = write!(s, " aeth(rnr-nak timer={} msn={})", a.value, a.msn);
                        }
                        (_, Some(n)) => {
                            let _ = write!(s, " aeth(nak {n} msn={})", a.msn);
                        }
                        _ => {
                            let _ = write!(s, " aeth({:#04x} msn={})", a.syndrome, a.msn);
                        }
                    }
                }
                if let Some(v) = r.atomic_ack {
                    let _ = write!(s, " orig={v:#x}");
                }
                if let Some(v) = r.imm {
                    let _ = write!(s, " imm={v:#010x}");
                }
                if let Some(v) = r.ieth {
                    let _ = write!(s, " invalidate_rkey={v:#x}");
                }
                let _ = write!(
                    s,
                    " len={} pad={} ecn={} icrc={}",
                    r.payload_len,
                    r.pad,
                    r.ecn,
                    if r.icrc_ok { "ok" } else { "BAD" }
                );
                if let Some(want) = r.icrc_expected {
                    let _ = write!(s, " (carried {:#010x}, expected {want:#010x})", r.icrc);
                }
                if let Some(t) = &r.int {
                    let q: Vec<String> = t.qlen.iter().map(u64::to_string).collect();
                    let more = if t.overflow { ",+" } else { "" };
                    let _ = write!(s, " int({} qlen=[{}{more}])", t.kind, q.join(","));
                }
                match &r.sr {
                    Some(SrLine::Place {
                        first_psn,
                        rsn,
                        rkey,
                        va,
                        len,
                    }) => {
                        let _ = write!(s, " sr(place first_psn={first_psn} rsn={rsn} len={len}");
                        if *rkey != 0 {
                            let _ = write!(s, " rkey={rkey:#x} va={va:#x}");
                        }
                        s.push(')');
                    }
                    Some(SrLine::Sack { psn }) => {
                        let _ = write!(s, " sr(sack psn={psn})");
                    }
                    None => {}
                }
            }
        }
        s
    }
}

/// The options of `ferroce decode`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct DecodeOpts {
    /// Capture files (classic pcap or pcapng).
    #[arg(required = true, help = "Classic pcap files (Ethernet)")]
    pub files: Vec<PathBuf>,
    /// One JSON object per frame (and a last one with the totals).
    #[arg(long)]
    pub json: bool,
}

/// `ferroce decode`: every frame of every file, then the totals, on
/// stdout. Ok(false) (exit 1) when a RoCE frame is malformed or has a bad
/// ICRC.
pub fn run(opts: &DecodeOpts) -> anyhow::Result<bool> {
    use anyhow::{bail, Context as _};
    use std::io::Write;
    let (files, json) = (&opts.files, opts.json);
    let mut d = Decoder::new();
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for path in files {
        let mut r = crate::pcap::open(path).with_context(|| format!("{}", path.display()))?;
        let lt = r.linktype();
        // (A pcapng names a link type per interface; its frames are judged
        // one by one, and those of other link types listed as skipped.)
        if !r.is_pcapng() && !linktype::supported(lt) {
            bail!(
                "{}: link type {lt} is not one decode reads (Ethernet, Linux cooked v1/v2, raw IP)",
                path.display()
            );
        }
        d.next_file();
        if !json && files.len() > 1 {
            writeln!(out, "# {}", path.display())?;
        }
        while let Some(rec) = r
            .next_record()
            .with_context(|| format!("reading {}", path.display()))?
        {
            let line = d.frame_of(rec.linktype, rec.ts_ns, rec.orig_len as usize, rec.data);
            if json {
                let mut v = serde_json::to_value(&line)?;
                v["file"] = path.display().to_string().into();
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", line.text())?;
            }
        }
    }
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "kind": "totals", "totals": d.totals })
        )?;
    } else {
        writeln!(out, "{}", d.totals.line())?;
    }
    out.flush()?;
    Ok(d.totals.clean())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::opcode::Op;
    use crate::wire::{BthRepr, Ecn, FrameRepr, IpRepr, MacAddr, Opcode, Psn};

    fn frame() -> Vec<u8> {
        let mut bth = BthRepr::new(Opcode::rc(Op::SendOnly), 0x11, Psn::new(5));
        bth.ack_req = true;
        let r = FrameRepr::roce(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            IpRepr::v4(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                26,
                Ecn::Ce,
            ),
            0xC000,
            bth,
        );
        let mut b = vec![0u8; 100];
        let n = r.emit(b"12345", &mut b).unwrap();
        b.truncate(n);
        b
    }

    /// ferroce's trailers after the IP packet are named, the INT one
    /// first; the RoCE frame in front stays good; a trailer whose CRC does
    /// not hold is no trailer (as the transport reads it).
    #[test]
    fn int_and_selective_repeat_trailers_are_named() {
        use crate::wire::int::{IntHop, IntStack, Trailer, LEN};
        use crate::wire::sr::{Placement, SrTrailer};
        let mut f = frame();
        let mut s = IntStack::default();
        s.push(IntHop::stamp(100_000_000_000, 5, 1000, 2560));
        let mut t = [0u8; LEN];
        Trailer::Collect(s).emit(&mut t).unwrap();
        f.extend_from_slice(&t);
        let p = SrTrailer::Place(Placement {
            first_psn: Psn::new(3),
            rsn: 7,
            rkey: 0x1234,
            va: 0x1000,
            len: 5000,
        });
        let mut t = [0u8; 29];
        p.emit(&mut t).unwrap();
        f.extend_from_slice(&t);
        let mut d = Decoder::new();
        let l = d.frame(1_000, f.len(), &f).text();
        assert!(l.contains(" icrc=ok int(collect qlen=[2560]) sr(place first_psn=3 rsn=7 len=5000 rkey=0x1234 va=0x1000)"), "{l}");
        let mut sack = frame();
        let mut t = [0u8; 10];
        SrTrailer::Sack(Psn::new(9)).emit(&mut t).unwrap();
        sack.extend_from_slice(&t);
        let l = d.frame(2_000, sack.len(), &sack);
        assert!(l.text().ends_with(" sr(sack psn=9)"), "{}", l.text());
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["sr"]["kind"], "sack");
        let n = sack.len();
        sack[n - 1] ^= 1;
        let l = d.frame(3_000, sack.len(), &sack).text();
        assert!(!l.contains("sr("), "{l}");
        assert!(d.totals.clean());
    }

    #[test]
    fn good_bad_malformed_and_cut_frames_are_told_apart() {
        let mut d = Decoder::new();
        let good = frame();
        let l = d.frame(1_000, good.len(), &good);
        let t = l.text();
        assert!(t.contains("RC_SEND_ONLY qp=0x000011 psn=5 A=1"), "{t}");
        assert!(t.contains("len=5 pad=3 ecn=ce icrc=ok"), "{t}");
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 6] ^= 1;
        assert!(d.frame(2_000, n, &bad).text().contains("icrc=BAD"));
        let mut mal = good.clone();
        mal[14 + 20 + 8] = 0x15;
        let t = d.frame(3_000, n, &mal).text();
        assert!(t.contains("MALFORMED: unknown opcode 0x15"), "{t}");
        let t = d.frame(4_000, n, &good[..60]).text();
        assert!(t.contains("skipped: cut by the capture"), "{t}");
        let t = d.frame(5_000, n, &good[..60]).text();
        assert!(t.contains("0.000004"), "{t}");
        assert_eq!(
            d.totals,
            Totals {
                roce: 3,
                icrc_ok: 1,
                icrc_bad: 1,
                malformed: 1,
                skipped: 2
            }
        );
        assert!(!d.totals.clean());
        assert_eq!(
            d.totals.line(),
            "3 roce frames, 1 icrc ok, 1 icrc bad, 1 malformed"
        );
    }

    #[test]
    fn cooked_and_raw_captures_decode_like_ethernet() {
        let eth = frame();
        let mut d = Decoder::new();
        let want = d.frame(0, eth.len(), &eth).text();
        let want = &want[want.find("198.18").unwrap()..];
        // SLL: packet type, ARPHRD_ETHER, address length 6, address, proto.
        let mut sll = vec![0, 0, 0, 1, 0, 6];
        sll.extend_from_slice(&eth[6..12]);
        sll.extend_from_slice(&[0, 0]);
        sll.extend_from_slice(&eth[12..]);
        // SLL2: proto, reserved, ifindex, ARPHRD, packet type, addr len, addr.
        let mut sll2 = eth[12..14].to_vec();
        sll2.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6]);
        sll2.extend_from_slice(&eth[6..12]);
        sll2.extend_from_slice(&[0, 0]);
        sll2.extend_from_slice(&eth[14..]);
        let raw = eth[14..].to_vec();
        for (lt, f) in [
            (linktype::LINUX_SLL, sll),
            (linktype::LINUX_SLL2, sll2),
            (linktype::RAW, raw.clone()),
            (linktype::IPV4, raw),
        ] {
            let t = d.frame_of(lt, 0, f.len(), &f).text();
            assert!(t.ends_with(want), "link type {lt}: {t}");
        }
        let t = d.frame_of(147, 0, 3, &[1, 2, 3]).text();
        assert!(t.contains("skipped: link type 147"), "{t}");
        assert_eq!(d.totals.icrc_ok, 5);
    }

    #[test]
    fn json_has_the_fields() {
        let mut d = Decoder::new();
        let good = frame();
        let v = serde_json::to_value(d.frame(7, good.len(), &good)).unwrap();
        assert_eq!(v["kind"], "roce");
        assert_eq!(v["opcode"], "RC_SEND_ONLY");
        assert_eq!(v["dest_qp"], 0x11);
        assert_eq!(v["icrc_ok"], true);
        assert_eq!(v["ecn"], "ce");
        assert!(v.get("xrc_srq").is_none());
    }

    #[test]
    fn an_xrc_request_shows_its_srq() {
        let bth = BthRepr::new(Opcode::xrc(Op::SendOnly), 0x11, Psn::new(5));
        let mut r = FrameRepr::roce(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            IpRepr::v4(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                26,
                Ecn::Ect0,
            ),
            0xC000,
            bth,
        );
        r.ext.xrceth = Some(0xABCDEF);
        let mut b = vec![0u8; 100];
        let n = r.emit(b"1234", &mut b).unwrap();
        let mut d = Decoder::new();
        let l = d.frame(0, n, &b[..n]);
        let t = l.text();
        assert!(t.contains("XRC_SEND_ONLY qp=0x000011"), "{t}");
        assert!(t.contains(" xrc_srq=0xabcdef len=4 pad=0"), "{t}");
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["xrc_srq"], 0xABCDEF);
        assert_eq!(v["opcode_num"], 0xA4);
        assert!(d.totals.clean());
    }
}
