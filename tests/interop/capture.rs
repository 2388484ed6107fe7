//! What a run's capture must show, read with the crate's own pcap reader
//! and frame parser (every frame was already judged by `ferroce decode`):
//! traffic both ways, in the IP version of the cell's GIDs, the operations
//! the tool implies (an atomic-bw run the atomic it names), packets of the
//! path MTU, the pad of a message that is not a multiple of 4, and in the
//! payloads ferroce sent, its buffers' bytes; and, for the rerun rule,
//! whether ferroce's resends waited for the ACK timeout with rxe silent,
//! or rxe stopped in the middle of its own requests.

use crate::matrix::{Cell, Role, Tool, Variant};
use ferroce::wire::ext::{AckSyndrome, NakCode};
use ferroce::wire::opcode::{Class, Op, Opcode, Position};
use ferroce::wire::{Frame, Psn};
use std::net::IpAddr;
use std::path::Path;

/// One RoCE frame of a capture.
struct Pkt {
    /// Its record's place in the capture (unparsed records counted).
    record: usize,
    ts_ns: u64,
    from_ferroce: bool,
    /// The IP source and destination.
    ends: (IpAddr, IpAddr),
    ipv6: bool,
    class: Class,
    /// The BTH opcode (which atomic it is).
    opcode: Opcode,
    position: Position,
    psn: Psn,
    /// The BTH's AckReq bit (IBTA §9.2.8).
    ack_req: bool,
    /// An ACKNOWLEDGE that is a NAK or an RNR NAK: it acknowledges only
    /// the PSNs before its own (IBTA §9.7.5.2; the completer does the same).
    nak: bool,
    /// A NAK PSN sequence error (IBTA §9.7.5.2.1): the responder asks for
    /// its PSN and everything after it again.
    seq_nak: bool,
    dest_qp: u32,
    /// The DETH's Q_Key (UD).
    qkey: Option<u32>,
    payload: Vec<u8>,
    pad: u8,
}

fn read(pcap: &Path, ferroce_ip: IpAddr) -> Result<Vec<Pkt>, String> {
    let mut r = ferroce::pcap::open(pcap).map_err(|e| format!("{}: {e}", pcap.display()))?;
    let mut v = Vec::new();
    let mut record = 0;
    while let Some(rec) = r.next_record().map_err(|e| e.to_string())? {
        record += 1;
        let Ok(f) = Frame::parse(rec.data) else {
            continue;
        };
        let bth = f.bth();
        v.push(Pkt {
            record: record - 1,
            ts_ns: rec.ts_ns,
            from_ferroce: f.ip().src().to_canonical() == ferroce_ip,
            ends: (f.ip().src().to_canonical(), f.ip().dst().to_canonical()),
            ipv6: f.ip().ethertype() == ferroce::wire::ethernet::ETHERTYPE_IPV6,
            class: f.info.class,
            opcode: bth.opcode,
            position: f.info.position,
            psn: bth.psn,
            ack_req: f.ack_req(),
            nak: f
                .ext()
                .aeth
                .is_some_and(|a| !matches!(a.syndrome, AckSyndrome::Ack { .. })),
            seq_nak: f
                .ext()
                .aeth
                .is_some_and(|a| a.syndrome == AckSyndrome::Nak(NakCode::PsnSequenceError)),
            dest_qp: bth.dest_qp,
            qkey: f.ext().deth.map(|d| d.qkey),
            payload: f.payload.to_vec(),
            pad: f.pad,
        });
    }
    Ok(v)
}

/// The operation classes each end must send: (the requester's, the
/// responder's), where the requester is the tool's client.
fn classes(tool: Tool) -> (&'static [Class], &'static [Class]) {
    match tool {
        Tool::Pingpong | Tool::UdPingpong | Tool::SendLat => (&[Class::Send], &[Class::Send]),
        Tool::WriteLat => (&[Class::Write], &[Class::Write]),
        Tool::WriteBw => (&[Class::Write], &[Class::Ack]),
        Tool::SendBw => (&[Class::Send], &[Class::Ack]),
        Tool::ReadBw | Tool::ReadLat => (&[Class::ReadRequest], &[Class::ReadResponse]),
        Tool::AtomicBw => (&[Class::Atomic], &[Class::AtomicAck]),
        // The client SENDs buffer descriptions and answers READs; the
        // server READs, WRITEs and SENDs go-aheads.
        Tool::Rping => (
            &[Class::Send, Class::ReadResponse],
            &[Class::ReadRequest, Class::Write, Class::Send],
        ),
    }
}

fn carries_data(c: Class) -> bool {
    matches!(c, Class::Send | Class::Write | Class::ReadResponse)
}

/// An atomic-bw run of `op` (perftest's `-A`) sends that atomic and no
/// other: every atomic request is an RC COMPARE_SWAP or FETCH_ADD
/// (IBTA §9.4.5) as asked.
fn check_atomics(op: &str, pkts: &[Pkt]) -> Result<(), String> {
    let want = match op {
        "CMP_AND_SWAP" => Opcode::rc(Op::CompareSwap),
        "FETCH_AND_ADD" => Opcode::rc(Op::FetchAdd),
        _ => return Err(format!("no opcode for atomic {op}")),
    };
    match pkts
        .iter()
        .find(|p| p.class == Class::Atomic && p.opcode != want)
    {
        Some(p) => Err(format!(
            "an atomic from {} (PSN {}) has opcode {:#04x}; the run is {op} ({:#04x})",
            if p.from_ferroce { "ferroce" } else { "rxe" },
            p.psn,
            p.opcode.0,
            want.0
        )),
        None => Ok(()),
    }
}

/// What the capture showed.
pub struct Facts {
    /// CNPs in it.
    pub cnps: u64,
    /// The AttributeIDs of the CM MADs ferroce sent, in order.
    pub ferroce_mads: Vec<u16>,
}

impl Facts {
    /// How many CM MADs with AttributeID `attr` ferroce sent.
    pub fn mads_from_ferroce(&self, attr: u16) -> usize {
        self.ferroce_mads.iter().filter(|&&a| a == attr).count()
    }
}

/// Checks the capture of one run of `cell` with `v` between ferroce and
/// the peer at `ends` (their addresses); `capture_dropped` frames of the
/// run are missing from it (tcpdump's socket lost them).
pub fn check(
    cell: &Cell,
    v: Variant,
    pcap: &Path,
    ends: (IpAddr, IpAddr),
    capture_dropped: u64,
) -> Result<Facts, String> {
    let (ferroce_ip, peer_ip) = ends;
    let pkts = read(pcap, ferroce_ip)?;
    let between = |p: &Pkt| p.ends == (ferroce_ip, peer_ip) || p.ends == (peer_ip, ferroce_ip);
    if let Some(p) = pkts.iter().find(|p| !between(p)) {
        return Err(format!(
            "a RoCE frame (PSN {}) from {} to {}; the cell's ends are {ferroce_ip} and {peer_ip}",
            p.psn, p.ends.0, p.ends.1
        ));
    }
    let ours = pkts.iter().filter(|p| p.from_ferroce).count();
    if ours == 0 || ours == pkts.len() {
        return Err(format!(
            "{} RoCE frames, {ours} from ferroce: both ends must send",
            pkts.len()
        ));
    }
    if let Some(p) = pkts.iter().find(|p| p.ipv6 != cell.ipv6) {
        return Err(format!(
            "a RoCE frame from {} (PSN {}) is {}; the cell's GIDs are {}",
            if p.from_ferroce { "ferroce" } else { "rxe" },
            p.psn,
            if p.ipv6 { "IPv6" } else { "IPv4" },
            if cell.ipv6 { "IPv6" } else { "IPv4" }
        ));
    }
    // A UD tool's datagrams all carry ibv_ud_pingpong's Q_Key, CM MADs
    // to QP1 the GSI's; nothing else carries a DETH.
    let want = |p: &Pkt| match (p.dest_qp, cell.tool.is_ud()) {
        (1, _) => Some(GSI_QKEY),
        (_, true) => Some(UD_QKEY),
        (_, false) => None,
    };
    if let Some(p) = pkts.iter().find(|p| p.qkey != want(p)) {
        let want_qkey = want(p);
        return Err(format!(
            "a {:?} packet from {} (PSN {}) has Q_Key {:x?}; the cell's is {want_qkey:x?}",
            p.class,
            if p.from_ferroce { "ferroce" } else { "rxe" },
            p.psn,
            p.qkey
        ));
    }
    // CM MADs (UD to QP1) are the connection's, not the tool's traffic.
    let ferroce_mads = pkts
        .iter()
        .filter(|p| p.dest_qp == 1 && p.from_ferroce && p.payload.len() >= 18)
        .map(|p| u16::from_be_bytes([p.payload[16], p.payload[17]]))
        .collect();
    // perftest's -R: the first connection is its control channel, whose
    // QPs (the first REQ's and REP's) carry the exchange, not the test.
    let control: Vec<u32> = if cell.cm {
        control_qpns(&pkts)?
    } else {
        Vec::new()
    };
    let pkts: Vec<Pkt> = pkts
        .into_iter()
        .filter(|p| p.dest_qp != 1 && !control.contains(&p.dest_qp))
        .collect();
    let (req, resp) = classes(cell.tool);
    let ferroce_is_client = cell.role == Role::FerroceClient;
    for (from_ferroce, want) in [(ferroce_is_client, req), (!ferroce_is_client, resp)] {
        for c in want {
            if !pkts
                .iter()
                .any(|p| p.from_ferroce == from_ferroce && p.class == *c)
            {
                return Err(format!(
                    "no {c:?} packet from {}",
                    if from_ferroce { "ferroce" } else { "rxe" }
                ));
            }
        }
    }
    // rping's SENDs are 16-byte buffer descriptions; its pings are the
    // READ responses and WRITEs.
    let pkts: Vec<Pkt> = if cell.tool == Tool::Rping {
        if let Some(p) = pkts
            .iter()
            .find(|p| p.class == Class::Send && p.payload.len() != 16)
        {
            return Err(format!(
                "an rping SEND (PSN {}) of {} B, not 16",
                p.psn,
                p.payload.len()
            ));
        }
        pkts.into_iter()
            .filter(|p| p.class != Class::Send)
            .collect()
    } else {
        pkts
    };
    let mut largest = (0, 0);
    for p in pkts.iter().filter(|p| carries_data(p.class)) {
        let l = if p.from_ferroce {
            &mut largest.0
        } else {
            &mut largest.1
        };
        *l = (*l).max(p.payload.len());
    }
    match v {
        Variant::Size(size) => {
            check_sizes(cell, size, &pkts, largest)?;
            check_bytes(cell, size, &pkts, capture_dropped)?;
        }
        Variant::Atomic(op) => check_atomics(op, &pkts)?,
    }
    Ok(Facts {
        cnps: pkts.iter().filter(|p| p.class == Class::Cnp).count() as u64,
        ferroce_mads,
    })
}

/// The QPs of the first RDMA-CM connection: the Local QPN of the first
/// REQ (CM offset 32, after the 24-byte MAD header) and of the first REP
/// (CM offset 12).
fn control_qpns(pkts: &[Pkt]) -> Result<Vec<u32>, String> {
    let first = |attr: u16, at: usize| {
        pkts.iter()
            .filter(|p| p.dest_qp == 1 && p.payload.len() >= 256)
            .find(|p| u16::from_be_bytes([p.payload[16], p.payload[17]]) == attr)
            .map(|p| {
                let b = &p.payload[24 + at..24 + at + 3];
                u32::from_be_bytes([0, b[0], b[1], b[2]])
            })
    };
    match (first(0x0010, 32), first(0x0013, 12)) {
        (Some(a), Some(b)) => Ok(vec![a, b]),
        _ => Err("no REQ and REP in an RDMA-CM cell's capture".into()),
    }
}

/// Packets of a message longer than the path MTU carry the MTU but the
/// last; a shorter message goes in one packet of its size; the pad makes
/// the last payload a multiple of 4 (IBTA §9.2.5, §9.7.2 C9-24..C9-26).
fn check_sizes(
    cell: &Cell,
    size: usize,
    pkts: &[Pkt],
    largest: (usize, usize),
) -> Result<(), String> {
    let mtu = cell.mtu as usize;
    let want_largest = size.min(mtu);
    for (who, got) in [("ferroce", largest.0), ("rxe", largest.1)] {
        if got != 0 && got != want_largest {
            return Err(format!(
                "the largest payload from {who} is {got} B; {size} B messages at path MTU {mtu} make {want_largest} B packets"
            ));
        }
    }
    if largest.0.max(largest.1) != want_largest {
        return Err(format!(
            "no payload of {want_largest} B (largest {largest:?}) for {size} B messages at path MTU {mtu}"
        ));
    }
    let tail = match size % mtu {
        0 => mtu,
        t => t,
    };
    for p in pkts.iter().filter(|p| carries_data(p.class)) {
        let len = p.payload.len();
        let ok = match p.position {
            Position::First | Position::Middle => len == mtu && p.pad == 0,
            Position::Last | Position::Only => p.pad as usize == (4 - len % 4) % 4 && len == tail,
        };
        if !ok {
            return Err(format!(
                "a {:?} {:?} packet (PSN {}) carries {len} B with pad {}; {size} B messages at path MTU {mtu} make \
                 {mtu} B packets and a last one of {tail} B",
                p.class, p.position, p.psn, p.pad
            ));
        }
    }
    Ok(())
}

/// ibv_ud_pingpong's Q_Key.
const UD_QKEY: u32 = 0x1111_1111;
/// QP1's Q_Key (IBTA §13.5.1.1), on every CM MAD.
const GSI_QKEY: u32 = 0x8001_0000;

/// The bytes of the payloads: ibv_rc_pingpong, ibv_ud_pingpong and
/// ferroce's two pingpongs send 0x7b only; ferroce's perftest buffers hold byte `i % 251` at offset
/// `i`, so each of its packets continues that count, and the packets of
/// one message continue each other (`mtu` bytes per PSN). rxe's perftest
/// sends random bytes; write-lat's buffers are zeroes and poll flags.
/// A packet a whole message's packets or more past the nearest start
/// before it lost its start to the capture when tcpdump dropped frames,
/// and is not judged; with none dropped, ferroce sent it without a start.
fn check_bytes(cell: &Cell, size: usize, pkts: &[Pkt], capture_dropped: u64) -> Result<(), String> {
    const PERIOD: usize = 251;
    let mtu = cell.mtu as usize;
    if matches!(cell.tool, Tool::Pingpong | Tool::UdPingpong) {
        if let Some(p) = pkts
            .iter()
            .filter(|p| p.class == Class::Send)
            .find(|p| p.payload.iter().any(|&b| b != 0x7b))
        {
            return Err(format!(
                "a SEND from {} (PSN {}) carries bytes other than 0x7b",
                if p.from_ferroce { "ferroce" } else { "rxe" },
                p.psn
            ));
        }
        return Ok(());
    }
    if matches!(cell.tool, Tool::WriteLat | Tool::AtomicBw) {
        return Ok(());
    }
    if cell.tool == Tool::Rping {
        return check_rping_bytes(size, pkts, cell.loss.is_some() || capture_dropped > 0);
    }
    // Per QP, every message start seen: (QP, PSN, first byte). A packet
    // belongs to the nearest start at or before its PSN (go-back-N resends
    // a message's middle after later messages began).
    let mut starts: Vec<(u32, Psn, u8)> = Vec::new();
    let data = || {
        pkts.iter()
            .filter(|p| p.from_ferroce && carries_data(p.class) && !p.payload.is_empty())
    };
    for p in data() {
        let b = &p.payload;
        if let Some(k) = (1..b.len()).find(|&k| b[k] as usize != (b[k - 1] as usize + 1) % PERIOD) {
            return Err(format!(
                "ferroce's {:?} packet PSN {}: byte {k} is {:#04x} after {:#04x}; its buffer counts modulo {PERIOD}",
                p.class,
                p.psn,
                b[k],
                b[k - 1]
            ));
        }
        if matches!(p.position, Position::First | Position::Only) {
            starts.push((p.dest_qp, p.psn, b[0]));
        }
    }
    for p in data().filter(|p| matches!(p.position, Position::Middle | Position::Last)) {
        let start = starts
            .iter()
            .filter(|s| s.0 == p.dest_qp && !s.1.after(p.psn))
            .min_by_key(|s| p.psn.diff(s.1));
        let Some(&(_, psn0, b0)) = start else {
            continue;
        };
        let k = p.psn.diff(psn0) as usize;
        let per_message = size.div_ceil(mtu).max(1);
        if k >= per_message {
            if capture_dropped > 0 {
                continue;
            }
            return Err(format!(
                "ferroce's {:?} {:?} packet PSN {} is {k} packets past the nearest message start (PSN {psn0}); \
                 a {size} B message at path MTU {mtu} has {per_message}, and the capture lost no frame",
                p.class, p.position, p.psn
            ));
        }
        let want = ((b0 as usize + k * mtu) % PERIOD) as u8;
        if p.payload[0] != want {
            return Err(format!(
                "ferroce's {:?} packet PSN {} starts with {:#04x}; {k} packets into the message that began with \
                 {b0:#04x} at PSN {psn0} it must be {want:#04x}",
                p.class, p.psn, p.payload[0]
            ));
        }
    }
    Ok(())
}

/// rping's pings, both ways (rxe's and ferroce's alike): each READ
/// response or WRITE message is ping K's bytes (`rdma-ping-K: `, then the
/// letters `A`..`z` from the K-th on, NUL last), K read from its first
/// packet; a later packet of the message continues them by the path MTU
/// per PSN. With frames lost (`lossy`), a packet whose message start is not
/// in the capture (the nearest one before it is another message's) is not
/// judged.
fn check_rping_bytes(size: usize, pkts: &[Pkt], lossy: bool) -> Result<(), String> {
    let mtu = pkts
        .iter()
        .filter(|p| matches!(p.position, Position::First))
        .map(|p| p.payload.len())
        .max()
        .unwrap_or(size);
    let ping = |k: usize| -> Vec<u8> {
        let mut b = format!("rdma-ping-{k}: ").into_bytes();
        let mut c = b'A' + (k % 58) as u8;
        while b.len() < size {
            b.push(c);
            c = if c >= b'z' { b'A' } else { c + 1 };
        }
        b.truncate(size);
        b[size - 1] = 0;
        b
    };
    // Per (direction, destination QP): the message start at or before a
    // packet, and its ping number.
    let mut starts: Vec<(bool, u32, Psn, usize)> = Vec::new();
    for p in pkts
        .iter()
        .filter(|p| matches!(p.class, Class::ReadResponse | Class::Write))
    {
        let k = if matches!(p.position, Position::First | Position::Only) {
            let text = String::from_utf8_lossy(&p.payload[..p.payload.len().min(24)]).into_owned();
            let k = text
                .strip_prefix("rdma-ping-")
                .and_then(|t| t.split(':').next())
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    format!(
                        "a ping (PSN {}) that does not start rdma-ping-N: {text:?}",
                        p.psn
                    )
                })?;
            starts.push((p.from_ferroce, p.dest_qp, p.psn, k));
            Some((p.psn, k))
        } else {
            starts
                .iter()
                .filter(|s| s.0 == p.from_ferroce && s.1 == p.dest_qp && !s.2.after(p.psn))
                .min_by_key(|s| p.psn.diff(s.2))
                .map(|s| (s.2, s.3))
        };
        let Some((psn0, k)) = k else { continue };
        let off = p.psn.diff(psn0) as usize * mtu;
        let want = ping(k);
        if off + p.payload.len() > want.len() && lossy {
            continue;
        }
        if off + p.payload.len() > want.len() || p.payload[..] != want[off..off + p.payload.len()] {
            return Err(format!(
                "{}'s {:?} packet PSN {} is not ping {k}'s bytes {off}..{}",
                if p.from_ferroce { "ferroce" } else { "rxe" },
                p.class,
                p.psn,
                off + p.payload.len()
            ));
        }
    }
    Ok(())
}

/// How many request packets of ferroce's the peer never acknowledged, if
/// they are exactly the packets of ferroce's last message (first sent
/// after every other request, from its first packet to its last), else
/// why not: a tool without a closing handshake (ibv_rc_pingpong) leaves
/// that message's ACK as the last frame of the run, and a loss of it
/// strands ferroce's resends once the peer's QP is gone.
pub fn unacked_only_last_message(pcap: &Path, ferroce_ip: IpAddr) -> Result<usize, String> {
    let pkts = read(pcap, ferroce_ip)?;
    let is_request = |p: &Pkt| {
        matches!(
            p.class,
            Class::Send | Class::Write | Class::ReadRequest | Class::Atomic
        )
    };
    // ferroce's requests in the order first sent.
    let mut firsts: Vec<&Pkt> = Vec::new();
    for p in pkts.iter().filter(|p| p.from_ferroce && is_request(p)) {
        if !firsts
            .iter()
            .any(|q| q.dest_qp == p.dest_qp && q.psn == p.psn)
        {
            firsts.push(p);
        }
    }
    // The newest PSN the peer acknowledged (a NAK only those before it).
    let mut acked: Option<Psn> = None;
    for p in pkts
        .iter()
        .filter(|p| !p.from_ferroce && p.class == Class::Ack)
    {
        let upto = if p.nak { p.psn.sub(1) } else { p.psn };
        if !acked.is_some_and(|a| !upto.after(a)) {
            acked = Some(upto);
        }
    }
    let unacked = |p: &Pkt| !acked.is_some_and(|a| !p.psn.after(a));
    let n = firsts.iter().filter(|p| unacked(p)).count();
    let tail = &firsts[firsts.len() - n..];
    if n == 0 {
        return Err("every request of ferroce's was acknowledged".into());
    }
    if !tail.iter().all(|p| unacked(p)) {
        return Err("a request other than the last ones was never acknowledged".into());
    }
    let starts = matches!(tail[0].position, Position::First | Position::Only);
    let ends = matches!(tail[n - 1].position, Position::Last | Position::Only);
    let one_message = tail[1..]
        .iter()
        .all(|p| !matches!(p.position, Position::First | Position::Only));
    if !(starts && ends && one_message) {
        return Err(format!(
            "the {n} unacknowledged requests are not one whole last message"
        ));
    }
    Ok(n)
}

/// Whether every request ferroce sent again went out at least `timeout`
/// after its first sending with nothing from rxe acknowledging it in
/// between: what a stalled guest looks like. A resend sooner, or after
/// an acknowledgement covering it, is ferroce's fault. `Err` says which.
///
/// Go-back-N resends from the oldest unacknowledged request onwards
/// (IBTA §9.7.5.1): only the head of such a run of resends waited the
/// full timeout; the requests after it in the run were first sent later
/// and go again with it. A resend that follows the resend of the PSN
/// just before it, on the same QP with no other request of ferroce's in
/// between, belongs to the run and is timed by its head.
pub fn resends_waited(pcap: &Path, ferroce_ip: IpAddr, timeout_ns: u64) -> Result<usize, String> {
    let pkts = read(pcap, ferroce_ip)?;
    let mut first: std::collections::HashMap<(u32, u32), u64> = Default::default();
    let mut resends = 0;
    // The last request ferroce sent: (QP, PSN, whether it was a resend).
    let mut last: Option<(u32, Psn, bool)> = None;
    for (i, p) in pkts.iter().enumerate() {
        if !p.from_ferroce
            || !matches!(
                p.class,
                Class::Send | Class::Write | Class::ReadRequest | Class::Atomic
            )
        {
            continue;
        }
        let key = (p.dest_qp, p.psn.value());
        let prev = last.replace((p.dest_qp, p.psn, first.contains_key(&key)));
        let Some(&t0) = first.get(&key) else {
            first.insert(key, p.ts_ns);
            continue;
        };
        resends += 1;
        let in_run = prev
            .is_some_and(|(qp, psn, resent)| resent && qp == p.dest_qp && psn.diff(p.psn) == -1);
        if !in_run && p.ts_ns.saturating_sub(t0) < timeout_ns * 9 / 10 {
            return Err(format!(
                "ferroce sent PSN {} again {:.1} ms after the first time, before its {:.1} ms ACK timeout",
                p.psn,
                (p.ts_ns - t0) as f64 / 1e6,
                timeout_ns as f64 / 1e6
            ));
        }
        let acked = pkts[..i].iter().any(|a| {
            !a.from_ferroce
                && a.ts_ns > t0
                && matches!(a.class, Class::Ack | Class::ReadResponse | Class::AtomicAck)
                && if a.nak {
                    p.psn.before(a.psn)
                } else {
                    !a.psn.before(p.psn)
                }
        });
        if acked {
            return Err(format!(
                "ferroce sent PSN {} again though rxe had acknowledged it",
                p.psn
            ));
        }
    }
    Ok(resends)
}

/// The checks above on real rxe captures (tests/vectors; g1 198.18.0.2
/// served, g2 198.18.0.3 was the client), where the right answer is
/// known: each must pass what holds and refuse what does not, or the
/// suite's verdicts would mean nothing.
pub fn self_test(vectors: &Path) -> Result<(), String> {
    let (g1, g2): (IpAddr, IpAddr) = ("198.18.0.2".parse().unwrap(), "198.18.0.3".parse().unwrap());
    let cell = Cell::plain;
    let (server, client) = (Role::FerroceServer, Role::FerroceClient);
    let size = Variant::Size;
    // (capture, cell, variant, "ferroce", the error expected or ""); rxe's
    // perftest sends random bytes, not ferroce's count; the captures are
    // IPv4.
    #[rustfmt::skip]
    let cases: [(&str, Cell, Variant, IpAddr, &str); 10] = [
        ("rc_pingpong_mtu4096", cell(Tool::Pingpong, client, 4096), size(16384), g2, ""),
        ("rc_pingpong_mtu4096", cell(Tool::Pingpong, client, 1024), size(16384), g2, "largest payload"),
        ("ib_read_bw_mtu4096", cell(Tool::ReadBw, client, 4096), size(16384), g2, ""),
        ("ib_read_bw", cell(Tool::ReadBw, client, 4096), size(4096), g2, "largest payload"),
        ("ib_write_bw", cell(Tool::WriteBw, server, 1024), size(4096), g1, ""),
        ("ib_write_bw", cell(Tool::WriteBw, client, 1024), size(4096), g2, "counts modulo"),
        ("ib_write_bw", cell(Tool::SendBw, server, 1024), size(4096), g1, "no Send packet"),
        ("ib_write_bw", Cell { ipv6: true, ..cell(Tool::WriteBw, server, 1024) }, size(4096), g1, "is IPv4"),
        ("ud_pingpong", cell(Tool::UdPingpong, client, 1024), size(1024), g2, ""),
        ("ud_pingpong", cell(Tool::Pingpong, client, 1024), size(1024), g2, "Q_Key"),
    ];
    for (name, c, v, ip, want) in cases {
        let peer = if ip == g1 { g2 } else { g1 };
        let got = check(&c, v, &vectors.join(format!("{name}.pcap")), (ip, peer), 0);
        match (&got, want) {
            (Ok(_), "") => {}
            (Err(e), w) if !w.is_empty() && e.contains(w) => {}
            _ => {
                return Err(format!(
                    "capture check self-test: {name} as {} {v}: got {:?}, want {}",
                    c.id(),
                    got.map(|_| "pass"),
                    if want.is_empty() { "pass" } else { want }
                ))
            }
        }
    }
    // A frame to or from a third address is not the cell's.
    let other: IpAddr = "198.18.0.4".parse().unwrap();
    let c = cell(Tool::WriteBw, server, 1024);
    match check(
        &c,
        size(4096),
        &vectors.join("ib_write_bw.pcap"),
        (g1, other),
        0,
    ) {
        Err(e) if e.contains("the cell's ends") => {}
        got => {
            return Err(format!(
                "capture check self-test: ib_write_bw with a peer at {other}: got {:?}",
                got.map(|_| "pass")
            ))
        }
    }
    // The rerun rule: a resend after a NAK (ib_write_bw_loss, g2) or of a
    // request already acknowledged (ib_send_lat's spurious one, g1) is
    // not a stall.
    for (name, ip) in [("ib_write_bw_loss", g2), ("ib_send_lat", g1)] {
        if resends_waited(&vectors.join(format!("{name}.pcap")), ip, 4096 << 14).is_ok() {
            return Err(format!(
                "capture check self-test: {name}'s resend taken for a stall"
            ));
        }
    }
    // The last-ACK rule: rc_pingpong at MTU 4096 (16 KiB messages) as
    // captured has every request acknowledged; without the client's last
    // ACK, only the server's last message (4 packets) is unacknowledged.
    let whole = vectors.join("rc_pingpong_mtu4096.pcap");
    if unacked_only_last_message(&whole, g1).is_ok() {
        return Err(
            "capture check self-test: a clean rc_pingpong taken for a lost last ACK".into(),
        );
    }
    let cut = std::env::temp_dir().join(format!("ferroce-last-ack-{}.pcap", std::process::id()));
    without_last_ack(&whole, &cut, g2)?;
    let got = unacked_only_last_message(&cut, g1);
    let _ = std::fs::remove_file(&cut);
    if got != Ok(4) {
        return Err(format!(
            "capture check self-test: rc_pingpong without its last ACK: {got:?}, want Ok(4)"
        ));
    }
    // Its mirror: in the whole capture the client sent nothing after the
    // server's last ACK.
    if peer_resent_acked_last_message(&whole, g1).is_ok() {
        return Err(
            "capture check self-test: rc_pingpong's end taken for a resend after the last ACK"
                .into(),
        );
    }
    // The stalled-peer rule: the whole capture has every request of both
    // ends acknowledged; cut before the client's last LAST packet (its
    // AckReq), the client's FIRST and two MIDDLEs are left unacknowledged
    // and never asked to be; cut after it, an ACK was owed.
    if peer_stopped_unasked(&whole, g1).is_ok() {
        return Err("capture check self-test: a clean rc_pingpong taken for a stalled peer".into());
    }
    let cut = std::env::temp_dir().join(format!("ferroce-stalled-{}.pcap", std::process::id()));
    before_last_message_end(&whole, &cut, g2)?;
    let got = peer_stopped_unasked(&cut, g1);
    let _ = std::fs::remove_file(&cut);
    if got != Ok(3) {
        return Err(format!(
            "capture check self-test: rc_pingpong stopped before the client's last LAST: {got:?}, want Ok(3)"
        ));
    }
    let cut = std::env::temp_dir().join(format!("ferroce-owed-ack-{}.pcap", std::process::id()));
    without_last_ack(&whole, &cut, g1)?;
    let got = peer_stopped_unasked(&cut, g1);
    let _ = std::fs::remove_file(&cut);
    if !got.as_ref().is_err_and(|e| e.contains("asked for an ACK")) {
        return Err(format!(
            "capture check self-test: rc_pingpong without the server's last ACK: {got:?}, want the ACK owed"
        ));
    }
    // Its go-back case: ib_write_bw_loss (g2 wrote, g1 NAKed the lost
    // PSN) recovered, so whole it is no stall; cut one packet into g2's
    // go-back, g2 stopped there; cut at the NAK, g2 never went back.
    let loss = vectors.join("ib_write_bw_loss.pcap");
    if peer_stopped_unasked(&loss, g1).is_ok() {
        return Err(
            "capture check self-test: a recovered ib_write_bw_loss taken for a stalled peer".into(),
        );
    }
    for (k, want) in [(1, Ok(1)), (0, Err("never went back"))] {
        let cut = std::env::temp_dir().join(format!("ferroce-go-back-{}.pcap", std::process::id()));
        into_go_back(&loss, &cut, g2, k)?;
        let got = peer_stopped_unasked(&cut, g1);
        let _ = std::fs::remove_file(&cut);
        let holds = match (&got, want) {
            (Ok(n), Ok(w)) => *n == w,
            (Err(e), Err(w)) => e.contains(w),
            _ => false,
        };
        if !holds {
            return Err(format!(
                "capture check self-test: ib_write_bw_loss {k} packets into the go-back: {got:?}, want {want:?}"
            ));
        }
    }
    // ib_write_bw -R disconnects with a DREQ each way.
    match dreqs(&vectors.join("ib_write_bw_rdmacm_mtu4096.pcap"), g1) {
        Ok((a, b)) if a > 0 && b > 0 => {}
        got => {
            return Err(format!(
                "capture check self-test: ib_write_bw_rdmacm_mtu4096's DREQs: {got:?}"
            ))
        }
    }
    Ok(())
}

/// How many request packets the peer sent after ferroce's last ACK of
/// them, if the capture ends in the middle of the peer's requests with
/// nothing owed by ferroce, else why not: every request of ferroce's
/// acknowledged, and the peer's unacknowledged packets one run of
/// consecutive PSNs right after the last one ferroce acknowledged, each
/// sent once and none asking for an ACK (ferroce, like rxe's responder,
/// ACKs when AckReq asks and coalesces the rest; a gap would have owed a
/// NAK). Or, where ferroce's last word was a NAK PSN sequence error for
/// a packet lost on the way: the peer's packets before its go-back are
/// that first pass (ferroce owes no second NAK for them, IBTA §9.7.5.2.1),
/// and the go-back itself is such a run from the NAKed PSN, sent after the
/// NAK. A requester that stops there and never resends has neither gone
/// on nor let its ACK timer fire: it stalled.
pub fn peer_stopped_unasked(pcap: &Path, ferroce_ip: IpAddr) -> Result<usize, String> {
    let pkts = read(pcap, ferroce_ip)?;
    // RC requests (a DETH marks UD: CM MADs, which have no ACK).
    let is_request = |p: &Pkt| {
        p.qkey.is_none()
            && matches!(
                p.class,
                Class::Send | Class::Write | Class::ReadRequest | Class::Atomic
            )
    };
    // The newest PSN each end acknowledged of the other's (a NAK only
    // those before it), and the index of the ACK that said so.
    let acked_by = |by_ferroce: bool| {
        let mut acked: Option<(Psn, usize)> = None;
        for (i, p) in pkts.iter().enumerate() {
            if p.from_ferroce != by_ferroce || p.class != Class::Ack {
                continue;
            }
            let upto = if p.nak { p.psn.sub(1) } else { p.psn };
            // (The last of equals: a NAK after the ACK of the PSN before.)
            if !acked.is_some_and(|(a, _)| a.after(upto)) {
                acked = Some((upto, i));
            }
        }
        acked
    };
    let unacked = |p: &Pkt, acked: Option<Psn>| !acked.is_some_and(|a| !p.psn.after(a));
    let by_peer = acked_by(false).map(|(a, _)| a);
    if let Some(p) = pkts
        .iter()
        .filter(|p| p.from_ferroce && is_request(p))
        .find(|p| unacked(p, by_peer))
    {
        return Err(format!(
            "ferroce's request PSN {} was never acknowledged",
            p.psn
        ));
    }
    let Some((acked, at)) = acked_by(true) else {
        return Err("ferroce acknowledged no request of the peer's".into());
    };
    let tail: Vec<(usize, &Pkt)> = pkts
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.from_ferroce && is_request(p))
        .filter(|(_, p)| unacked(p, Some(acked)))
        .collect();
    if tail.is_empty() {
        return Err("ferroce acknowledged every request of the peer's".into());
    }
    let next = acked.add(1);
    // After a NAK PSN sequence error for `next`, the run starts where the
    // peer goes back to it (its first sending of `next` was lost).
    let run = if pkts[at].seq_nak {
        let Some(back) = tail.iter().position(|(i, p)| *i > at && p.psn == next) else {
            return Err(format!(
                "the peer never went back to PSN {next} after ferroce's NAK"
            ));
        };
        if tail[..back].iter().any(|(_, p)| p.psn == next) {
            return Err(format!("ferroce NAKed PSN {next}, which the peer had sent"));
        }
        &tail[back..]
    } else {
        &tail[..]
    };
    for (k, (_, p)) in run.iter().enumerate() {
        if p.psn != acked.add(k as u32 + 1) {
            return Err(format!(
                "the peer's unacknowledged PSN {} is not the next after {} (sent again, or after a gap)",
                p.psn,
                acked.add(k as u32)
            ));
        }
        if p.ack_req {
            return Err(format!(
                "the peer's PSN {} asked for an ACK that ferroce did not send",
                p.psn
            ));
        }
    }
    Ok(run.len())
}

/// How many times the peer sent its last message again after ferroce had
/// acknowledged all of it, if it did, else why not: the mirror of
/// [`unacked_only_last_message`], where ferroce's ACK (captured as it
/// left) was lost on the way and ferroce had ended.
pub fn peer_resent_acked_last_message(pcap: &Path, ferroce_ip: IpAddr) -> Result<usize, String> {
    let pkts = read(pcap, ferroce_ip)?;
    let is_request = |p: &Pkt| {
        matches!(
            p.class,
            Class::Send | Class::Write | Class::ReadRequest | Class::Atomic
        )
    };
    let theirs: Vec<&Pkt> = pkts
        .iter()
        .filter(|p| !p.from_ferroce && is_request(p))
        .collect();
    let last = theirs
        .iter()
        .map(|p| p.psn)
        .reduce(|a, b| if b.after(a) { b } else { a });
    let Some(last) = last else {
        return Err("the peer sent no request".into());
    };
    let Some(acked_at) = pkts
        .iter()
        .position(|p| p.from_ferroce && p.class == Class::Ack && !p.nak && !p.psn.before(last))
    else {
        return Err("ferroce never acknowledged the peer's last message".into());
    };
    let resent = pkts[acked_at..]
        .iter()
        .filter(|p| !p.from_ferroce && is_request(p))
        .count();
    match resent {
        0 => Err("the peer sent nothing after ferroce's last ACK".into()),
        n => Ok(n),
    }
}

/// The CM DREQs in a capture, (the peer's, ferroce's): MADs to QP1 whose
/// attribute ID is the DREQ's (IBTA §12.6.10, 0x0015).
pub fn dreqs(pcap: &Path, ferroce_ip: IpAddr) -> Result<(usize, usize), String> {
    let pkts = read(pcap, ferroce_ip)?;
    let dreq = |p: &&Pkt| p.dest_qp == 1 && p.payload.get(16..18) == Some(&[0x00, 0x15][..]);
    let ours = pkts.iter().filter(dreq).filter(|p| p.from_ferroce).count();
    let theirs = pkts.iter().filter(dreq).filter(|p| !p.from_ferroce).count();
    Ok((theirs, ours))
}

/// `from` copied to `to` without the last ACKNOWLEDGE that `sender` sent.
fn without_last_ack(from: &Path, to: &Path, sender: IpAddr) -> Result<(), String> {
    let mut frames = frames(from)?;
    let is_ack = |d: &[u8]| {
        Frame::parse(d)
            .is_ok_and(|f| f.info.class == Class::Ack && f.src().to_canonical() == sender)
    };
    let last = frames
        .iter()
        .rposition(|(_, d)| is_ack(d))
        .ok_or("no ACK to remove")?;
    frames.remove(last);
    write_frames(to, &frames)
}

/// `from`'s frames before the last request packet of `sender`'s that
/// ends a message, copied to `to`: a capture that stops in the middle of
/// `sender`'s last message, as if its requester had stalled there.
fn before_last_message_end(from: &Path, to: &Path, sender: IpAddr) -> Result<(), String> {
    let mut frames = frames(from)?;
    let ends = |d: &[u8]| {
        Frame::parse(d).is_ok_and(|f| {
            matches!(f.info.class, Class::Send | Class::Write)
                && f.info.position == Position::Last
                && f.src().to_canonical() == sender
        })
    };
    let last = frames
        .iter()
        .rposition(|(_, d)| ends(d))
        .ok_or("no message of several packets")?;
    frames.truncate(last);
    write_frames(to, &frames)
}

/// `from`'s frames through the `k`-th request packet `sender` sent from
/// the PSN of the first NAK PSN sequence error it received, copied to
/// `to`: a capture that stops `k` packets into `sender`'s go-back.
fn into_go_back(from: &Path, to: &Path, sender: IpAddr, k: usize) -> Result<(), String> {
    // (`from_ferroce` here: sent by `sender`.)
    let pkts = read(from, sender)?;
    let nak = pkts
        .iter()
        .position(|p| !p.from_ferroce && p.seq_nak)
        .ok_or("no NAK PSN sequence error")?;
    let mut go_back = pkts[nak..]
        .iter()
        .filter(|p| p.from_ferroce && p.class != Class::Ack)
        .skip_while(|p| p.psn != pkts[nak].psn);
    let end = match k {
        0 => go_back.next().ok_or("no go-back after the NAK")?.record,
        _ => {
            go_back
                .nth(k - 1)
                .ok_or("a go-back shorter than asked")?
                .record
                + 1
        }
    };
    let mut frames = frames(from)?;
    frames.truncate(end);
    write_frames(to, &frames)
}

/// A capture's frames: (time in ns, bytes).
fn frames(pcap: &Path) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let mut frames = Vec::new();
    let mut r = ferroce::pcap::open(pcap).map_err(|e| e.to_string())?;
    while let Some(rec) = r.next_record().map_err(|e| e.to_string())? {
        frames.push((rec.ts_ns, rec.data.to_vec()));
    }
    Ok(frames)
}

fn write_frames(to: &Path, frames: &[(u64, Vec<u8>)]) -> Result<(), String> {
    let mut w =
        ferroce::pcap::create(to, ferroce::pcap::Precision::Nano).map_err(|e| e.to_string())?;
    for (ts, d) in frames {
        w.write(*ts, d).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())
}
