//! Replays the requests of the real Linux rxe captures in `tests/vectors`
//! (see the README there) into our responder and checks that it answers
//! exactly as the capture's responder did, frame by frame and field by
//! field: opcode, PSN, AETH syndrome and MSN, atomic-ACK value, payload —
//! and, because the comparison is made on whole frames, every other header
//! field too (MACs, IP addresses, DSCP / ECN, TTL, DF, UDP ports and
//! checksum, P_Key, SE / M / AckReq / pad, destination QP, frame length).
//!
//! For each RC capture (UC / UD captures and the CM MADs to QP1 have no RC
//! responder and are skipped) the RC flows are found: the request frames
//! from one IP to a QPN of another, and the response frames that answer
//! them (from that IP back, to the requester's QPN, at the requests' PSNs).
//! For each flow a [`Device`] is built that *is* the responder of the
//! capture: its MAC and IP, a QP with its QPN, `rq_psn` the first PSN of the
//! request stream, the requester's QPN, MAC and IP as destination, the path
//! MTU and the access flags the tool gave its QP, memory regions with the
//! capture's R_Keys and addresses (READ regions holding the bytes rxe
//! returned), receive WRs for the SENDs. The requests are fed in capture
//! order at their capture times, every response is collected after each
//! request (rxe answers each request as it comes), and the two response
//! sequences must be equal.
//!
//! The one field that may differ is the IPv4 identification: rxe numbers
//! its datagrams (the kernel's `ip_select_ident`), we send 0; A17 leaves it
//! free because RoCE v2 packets carry DF and are never fragmented. The
//! capture's frame is re-emitted with our identification before the
//! byte-for-byte comparison, so the ICRC is compared as well.
//!
//! In the `host_peer_*` captures the peer at 198.18.0.10 is a Python
//! script, not rxe: in the flows where rxe is the requester the responses
//! compared with are that script's (they match too, and are checked for
//! the same reason: the frames are real and seen on the wire).
//!
//! At the end the executed effects are checked as well: every SEND message
//! the capture's responder acknowledged completes one receive WR with its
//! bytes, every acknowledged RDMA WRITE is in the region, and the QP ends
//! in ERR exactly when a fatal NAK was sent.
//!
//! The same comparison is made a second time with every request handled
//! before the first poll (one burst): then consecutive ACKs leave as one,
//! the last, and that is the only difference allowed.
//!
//! Last, the other direction ([`requester_replay`]): the messages of each
//! rxe requester are posted to our requester and the capture's responses
//! fed back; it must send rxe's frames. In the loss captures that checks
//! the go-back-N: rxe's NAK PSN sequence error makes ours resume at the
//! NAK'd PSN, mid-message (SEND / WRITE MIDDLE, no RETH) with the payload
//! at the right offset, and then send exactly what rxe sent.

use ferroce::pcap;
use ferroce::time::Instant;
use ferroce::transport::{
    Access, AddressVector, AttrMask, CqId, Device, DeviceConfig, Event, MrKeys, MrSpec, Mtu,
    Payload, QpAttr, QpCaps, QpState, RecvWr, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
};
use ferroce::wire::ext::{AckSyndrome, NakCode};
use ferroce::wire::opcode::{Class, Position};
use ferroce::wire::{self, Frame, IpRepr, MacAddr, Psn, Transport};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

// ----- the captures -----

/// What the tool that owned the responder's QP granted it.
#[derive(Debug, Clone, Copy)]
enum Tool {
    /// `ibv_rc_pingpong` (and the host peer, which mimics it): QP access
    /// flags 0 — it only SENDs, its one MR is LOCAL_WRITE and its R_Key
    /// never leaves the host. That is why rxe refuses the host peer's RDMA
    /// WRITE with NAK invalid request (0x61) and not remote access error.
    /// `max_dest_rd_atomic` 1, `min_rnr_timer` 12 (its `pp_connect_ctx`).
    RcPingpong,
    /// perftest: the QP access flags of `ctx_modify_qp_to_init` (SEND:
    /// remote write + local write, WRITE: remote write, READ: remote
    /// read), the same on the MR it advertises; `min_rnr_timer` 12,
    /// outstanding READs 16.
    Perftest(Access),
}

impl Tool {
    fn access(self) -> Access {
        match self {
            Tool::RcPingpong => Access::NONE,
            Tool::Perftest(a) => a,
        }
    }
    fn max_dest_rd_atomic(self) -> u8 {
        match self {
            Tool::RcPingpong => 1,
            Tool::Perftest(_) => 16,
        }
    }
    /// Whether the tool hands its R_Key and buffer address to the peer.
    fn advertises_mr(self) -> bool {
        matches!(self, Tool::Perftest(_))
    }
}

const SEND: Tool = Tool::Perftest(Access::REMOTE_WRITE.union(Access::LOCAL_WRITE));
const WRITE: Tool = Tool::Perftest(Access::REMOTE_WRITE);
const READ: Tool = Tool::Perftest(Access::REMOTE_READ);

/// One RC flow's expected size: request frames fed, response frames
/// compared, in the order the flows first appear in the capture.
type FlowCounts = (usize, usize);

struct Capture {
    name: &'static str,
    mtu: Mtu,
    tool: Tool,
    /// Connected by RDMA CM, which gives the path a flow label of its own:
    /// the QPs' UDP source ports are then not the kernel's formula over
    /// the two QPNs (the one our address vector defaults to).
    cm: bool,
    /// Flows (by index) left out of [`requester_replays`], each with its
    /// reason in the table at the end.
    requester_skips: &'static [usize],
    flows: &'static [FlowCounts],
}

/// The host-side Python peer of the `host_peer_*` captures.
const HOST_PEER: [u8; 4] = [198, 18, 0, 10];

fn is_host_peer(ip: IpAddr) -> bool {
    ip == IpAddr::from(HOST_PEER)
}

/// The UDP source port a QP of ours must be given to send what the
/// capture shows: `None` (our default, the kernel's formula over both
/// QPNs, which is what rxe uses) unless the capture's sender had another
/// reason — RDMA CM's flow label, or the host peer's fixed port 49443.
fn source_port(cap: &Capture, ip: IpAddr, qpn: u32, dest_qpn: u32, seen: u16) -> Option<u16> {
    if seen == wire::udp::kernel_source_port(qpn, dest_qpn) {
        return None;
    }
    assert!(
        cap.cm || is_host_peer(ip),
        "{}: {ip} QP {qpn:#x} sends from UDP port {seen}, not the kernel's",
        cap.name
    );
    Some(seen)
}

/// A RoCE frame of a capture.
struct Rec {
    /// 1-based record number, as `ferroce decode` prints it.
    no: usize,
    /// Capture time, ns since the first record.
    t: u64,
    data: Vec<u8>,
}

impl Rec {
    fn frame(&self) -> Frame<'_> {
        Frame::parse(&self.data).expect("checked when loaded")
    }
}

/// The RC frames of a capture (UD / UC frames, CM MADs included, are left
/// out; ARP and TCP are not RoCE). Every RoCE frame must parse and carry a
/// right ICRC.
fn load(name: &str) -> Vec<Rec> {
    let path = format!("{}/tests/vectors/{name}.pcap", env!("CARGO_MANIFEST_DIR"));
    let mut r = pcap::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    let mut no = 0;
    let mut t0 = None;
    let mut last = 0;
    while let Some(rec) = r.next_record().unwrap() {
        no += 1;
        let t = rec.ts_ns - *t0.get_or_insert(rec.ts_ns);
        assert!(t >= last, "{name}: record {no} goes back in time");
        last = t;
        let f = match Frame::parse(rec.data) {
            Ok(f) => f,
            Err(wire::Error::NotRoce) => continue,
            Err(e) => panic!("{name}: record {no}: {e}"),
        };
        assert!(f.icrc_ok(), "{name}: record {no}: ICRC");
        if f.info.transport == Transport::Rc {
            out.push(Rec {
                no,
                t,
                data: rec.data.to_vec(),
            });
        }
    }
    out
}

// ----- flows -----

/// One direction of one RC connection: a requester (IP, QPN) sending to a
/// responder (IP, QPN), the requests in capture order and the responder's
/// answers in capture order (indices into the capture's RC frames).
#[derive(Debug)]
struct Flow {
    req_ip: IpAddr,
    req_mac: MacAddr,
    req_qpn: u32,
    resp_ip: IpAddr,
    resp_mac: MacAddr,
    resp_qpn: u32,
    /// The UDP source ports of the requester's and the responder's QP.
    req_sport: u16,
    resp_sport: u16,
    requests: Vec<usize>,
    responses: Vec<usize>,
}

/// PSNs a request occupies (a READ: one per response packet).
fn request_psns(f: &Frame<'_>, mtu: u32) -> u32 {
    match f.ext().reth {
        Some(r) if f.info.class == Class::ReadRequest => r.dma_len.div_ceil(mtu).max(1),
        _ => 1,
    }
}

/// Splits a capture's RC frames into flows. The requester's QPN is not in
/// a request; it is the destination QPN of the responses, and a response
/// belongs to the request stream whose PSNs it carries (every ACK, NAK and
/// READ response names a PSN of a request: the one acknowledged, the one
/// expected, or one of a READ's).
fn flows(recs: &[Rec], mtu: u32) -> Vec<Flow> {
    let mut groups: Vec<((IpAddr, IpAddr, u32), Vec<usize>)> = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let f = r.frame();
        if !f.info.is_request() {
            continue;
        }
        let ip = f.ip();
        let key = (ip.src(), ip.dst(), f.dest_qp());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let mut out = Vec::new();
    for ((req_ip, resp_ip, resp_qpn), requests) in groups {
        let mut psns = HashSet::new();
        for &i in &requests {
            let f = recs[i].frame();
            for k in 0..request_psns(&f, mtu) {
                psns.insert(f.psn().add(k).value());
            }
        }
        let mut by_qpn: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, r) in recs.iter().enumerate() {
            let f = r.frame();
            let ip = f.ip();
            if !f.info.is_request() && ip.src() == resp_ip && ip.dst() == req_ip {
                by_qpn.entry(f.dest_qp()).or_default().push(i);
            }
        }
        let matching: Vec<(u32, Vec<usize>)> = by_qpn
            .into_iter()
            .filter(|(_, v)| {
                v.iter()
                    .all(|&i| psns.contains(&recs[i].frame().psn().value()))
            })
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "flow {req_ip} -> {resp_ip} QP {resp_qpn:#x}: one set of responses must match its PSNs"
        );
        let (req_qpn, responses) = matching.into_iter().next().unwrap();
        let rq = recs[requests[0]].frame();
        let port = |v: &[usize]| {
            let p: HashSet<u16> = v.iter().map(|&i| recs[i].frame().udp().src_port).collect();
            assert_eq!(p.len(), 1, "a QP's source port is constant");
            p.into_iter().next().unwrap()
        };
        out.push(Flow {
            req_ip,
            req_mac: rq.eth().src,
            req_qpn,
            resp_ip,
            resp_mac: rq.eth().dst,
            resp_qpn,
            req_sport: port(&requests),
            resp_sport: port(&responses),
            requests,
            responses,
        });
    }
    out
}

// ----- the responder under test -----

/// Size of each receive WR's buffer: more than any message in the
/// captures (ibv_rc_pingpong posts exactly `-s` bytes; a larger buffer
/// changes nothing on the wire).
const RECV_LEN: u64 = 1 << 16;

struct Responder {
    dev: Device,
    qpn: u32,
    cq: CqId,
    /// Receive buffers: WR `i` is at `recv.addr + i * RECV_LEN`.
    recv: Option<MrKeys>,
    /// Regions made from the capture's R_Keys.
    remote: Vec<MrKeys>,
}

/// How a QP of ours is connected (RESET -> INIT -> RTR -> RTS).
struct Conn {
    tool: Tool,
    mtu: Mtu,
    av: AddressVector,
    dest_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    /// Local ACK timeout exponent.
    timeout: u8,
}

/// A device that sends what rxe sends: rxe leaves the traffic class's ECN
/// bits as they are (Not-ECT here), where ours marks ECT(0) by default.
fn rxe_like(mac: MacAddr, ip: IpAddr) -> DeviceConfig {
    let mut cfg = DeviceConfig::new(mac, ip);
    cfg.congestion.ecn = false;
    cfg
}

fn connect(dev: &mut Device, qpn: u32, c: Conn) {
    let Conn {
        tool,
        mtu,
        av,
        dest_qpn,
        rq_psn,
        sq_psn,
        timeout,
    } = c;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: tool.access(),
        ..QpAttr::default()
    };
    dev.modify_qp(
        qpn,
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.ah_attr = Some(av);
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = tool.max_dest_rd_atomic();
    a.min_rnr_timer = 12;
    dev.modify_qp(qpn, &a, AttrMask::RC_RTR).unwrap();
    a.qp_state = QpState::Rts;
    a.timeout = timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = tool.max_dest_rd_atomic();
    dev.modify_qp(
        qpn,
        &a,
        AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

/// The lowest PSN of a request stream (the first one sent; in
/// host_peer_psn_gap the first request *seen* is one ahead of it).
fn first_psn(recs: &[Rec], requests: &[usize]) -> Psn {
    requests
        .iter()
        .map(|&i| recs[i].frame().psn())
        .reduce(|a, b| if b.before(a) { b } else { a })
        .unwrap()
}

/// The byte ranges each R_Key of the flow's requests covers: (rkey ->
/// (lowest VA, highest end)).
fn remote_ranges(recs: &[Rec], flow: &Flow) -> BTreeMap<u32, (u64, u64)> {
    let mut m: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for &i in &flow.requests {
        let f = recs[i].frame();
        let ext = f.ext();
        let (va, len, rkey) = match (ext.reth, ext.atomic) {
            (Some(r), _) => (r.va, r.dma_len as u64, r.rkey),
            (None, Some(a)) => (a.va, 8, a.rkey),
            _ => continue,
        };
        let e = m.entry(rkey).or_insert((va, va + len));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va + len);
    }
    m
}

fn build_responder(cap: &Capture, recs: &[Rec], flow: &Flow) -> Responder {
    let mtu = cap.mtu.bytes();
    let mut dev = Device::new(rxe_like(flow.resp_mac, flow.resp_ip)).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1 << 16).unwrap();
    // The responder's own requests, if it sends any, start its SQ PSN.
    let own: Vec<usize> = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            let f = r.frame();
            f.info.is_request()
                && f.ip().src() == flow.resp_ip
                && f.ip().dst() == flow.req_ip
                && f.dest_qp() == flow.req_qpn
        })
        .map(|(i, _)| i)
        .collect();
    let sq_psn = if own.is_empty() {
        0
    } else {
        first_psn(recs, &own).value()
    };
    let sends = flow
        .requests
        .iter()
        .filter(|&&i| {
            let f = recs[i].frame();
            (f.info.class == Class::Send || f.info.has_immediate()) && f.info.starts_message()
        })
        .count();
    let qpn = dev
        .create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                qpn: Some(flow.resp_qpn),
                max_recv_wr: sends.max(1) as u32,
                ..QpCaps::default()
            },
        )
        .unwrap();
    assert_eq!(qpn, flow.resp_qpn);
    let av = AddressVector {
        dgid: flow.req_ip,
        dmac: flow.req_mac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        src_port: source_port(
            cap,
            flow.resp_ip,
            flow.resp_qpn,
            flow.req_qpn,
            flow.resp_sport,
        ),
        int_telemetry: false,
        recovery: ferroce::transport::Recovery::GoBackN,
    };
    let rq_psn = first_psn(recs, &flow.requests).value();
    let conn = Conn {
        tool: cap.tool,
        mtu: cap.mtu,
        av,
        dest_qpn: flow.req_qpn,
        rq_psn,
        sq_psn,
        timeout: 14,
    };
    connect(&mut dev, qpn, conn);

    // Regions under the capture's R_Keys.
    let mut remote = Vec::new();
    if cap.tool.advertises_mr() {
        for (rkey, (lo, hi)) in remote_ranges(recs, flow) {
            let keys = dev
                .reg_mr(MrSpec {
                    pd,
                    len: (hi - lo) as usize,
                    access: Access::LOCAL_WRITE | cap.tool.access(),
                    addr: Some(lo),
                    key: Some(rkey),
                })
                .unwrap();
            remote.push(keys);
        }
        // READ regions hold what rxe read out of them: each READ response
        // packet's payload at its request's VA + (PSN - request PSN) * MTU.
        let mut filled: HashMap<(u32, u64), u8> = HashMap::new();
        for &i in &flow.responses {
            let f = recs[i].frame();
            if f.info.class != Class::ReadResponse {
                continue;
            }
            let req = flow
                .requests
                .iter()
                .rev()
                .filter(|&&j| j < i)
                .map(|&j| recs[j].frame())
                .find(|q| {
                    q.info.class == Class::ReadRequest
                        && f.psn().in_range(q.psn(), request_psns(q, mtu))
                })
                .expect("a READ response answers an earlier READ request");
            let reth = req.ext().reth.unwrap();
            let va = reth.va + f.psn().diff(req.psn()) as u64 * mtu as u64;
            let mr = remote.iter().find(|k| k.rkey == reth.rkey).unwrap();
            let bytes = dev.mr_mut(mr.lkey).unwrap();
            for (k, &b) in f.payload.iter().enumerate() {
                let at = va + k as u64;
                if let Some(&old) = filled.get(&(reth.rkey, at)) {
                    assert_eq!(old, b, "two READs of {at:#x} returned different bytes");
                }
                filled.insert((reth.rkey, at), b);
                bytes[(at - mr.addr) as usize] = b;
            }
        }
    }

    // Receive WRs for the SENDs (and WRITEs with immediate).
    let recv = if sends > 0 {
        let keys = dev
            .reg_mr(MrSpec::new(
                pd,
                (sends as u64 * RECV_LEN) as usize,
                Access::LOCAL_WRITE,
            ))
            .unwrap();
        for k in 0..sends as u64 {
            dev.post_recv(
                qpn,
                RecvWr {
                    wr_id: k,
                    sges: smallvec::smallvec![Sge {
                        addr: keys.addr + k * RECV_LEN,
                        length: RECV_LEN as u32,
                        lkey: keys.lkey,
                    }],
                },
            )
            .unwrap();
        }
        Some(keys)
    } else {
        None
    };
    Responder {
        dev,
        qpn,
        cq,
        recv,
        remote,
    }
}

/// Sends everything the device has to send at `now`, running its timers
/// when due (the call order at the top of `transport`).
fn drain(dev: &mut Device, now: Instant, out: &mut Vec<Vec<u8>>) {
    let mut buf = vec![0u8; 9216];
    loop {
        if dev.poll_timeout().is_some_and(|t| t <= now) {
            dev.handle_timeout(now);
        }
        match dev.poll_transmit(now, &mut buf) {
            Some(n) => out.push(buf[..n].to_vec()),
            None => break,
        }
    }
}

// ----- comparison -----

/// One line per frame, for failure messages.
fn describe(f: &Frame<'_>) -> String {
    let ext = f.ext();
    let mut s = format!(
        "{} qp={:#x} psn={} A={}",
        f.info.op_name,
        f.dest_qp(),
        f.psn(),
        f.ack_req() as u8
    );
    if let Some(a) = ext.aeth {
        s += &format!(" aeth={:#04x}/msn={}", a.syndrome.to_byte(), a.msn);
    }
    if let Some(v) = ext.atomic_ack {
        s += &format!(" orig={v:#x}");
    }
    s += &format!(" len={}", f.payload.len());
    s
}

/// Our frame must be rxe's, byte for byte, but for the IPv4
/// identification (see the top of the file): rxe's frame is re-emitted
/// with ours, which recomputes its IP checksum and ICRC.
fn same_frame(ours: &[u8], theirs: &[u8]) -> Result<(), String> {
    let a = Frame::parse(ours).map_err(|e| format!("ours does not parse: {e}"))?;
    if !a.icrc_ok() {
        return Err("our ICRC is wrong".into());
    }
    let b = Frame::parse(theirs).unwrap();
    let mut rb = b.repr();
    if let (IpRepr::V4(x), IpRepr::V4(y)) = (&a.repr().ip, &mut rb.ip) {
        y.ident = x.ident;
    }
    let ra = a.repr();
    // Field-level checks first, for a readable message.
    let fields = [
        ("opcode", ra.bth.opcode.0 as u64, rb.bth.opcode.0 as u64),
        ("PSN", ra.bth.psn.value() as u64, rb.bth.psn.value() as u64),
        (
            "AETH syndrome",
            ra.ext.aeth.map_or(0x100, |x| x.syndrome.to_byte() as u64),
            rb.ext.aeth.map_or(0x100, |x| x.syndrome.to_byte() as u64),
        ),
        (
            "MSN",
            ra.ext.aeth.map_or(u64::MAX, |x| x.msn as u64),
            rb.ext.aeth.map_or(u64::MAX, |x| x.msn as u64),
        ),
        (
            "atomic ACK value",
            ra.ext.atomic_ack.unwrap_or(0),
            rb.ext.atomic_ack.unwrap_or(0),
        ),
        (
            "payload length",
            a.payload.len() as u64,
            b.payload.len() as u64,
        ),
    ];
    for (name, x, y) in fields {
        if x != y {
            return Err(format!("{name}: ours {x:#x}, theirs {y:#x}"));
        }
    }
    if a.payload != b.payload {
        return Err("payload bytes differ".into());
    }
    if ra != rb {
        return Err(format!("headers differ:\n  ours   {ra:?}\n  theirs {rb:?}"));
    }
    let mut again = vec![0u8; theirs.len() + 64];
    let n = rb.emit(b.payload, &mut again).unwrap();
    if ours != &again[..n] {
        return Err("bytes differ (pad or ICRC)".into());
    }
    Ok(())
}

// ----- the effects -----

/// What the capture says the responder executed: the SEND messages and
/// RDMA WRITEs it acknowledged, each rebuilt from the last copy of each of
/// its packets that reached it before the ACK (a retransmitted MIDDLE
/// replaces a lost one; host_peer_psn_gap's rejected SEND ONLY is replaced
/// by the SEND MIDDLE of the same PSN).
#[derive(Debug, Default)]
struct Executed {
    /// Each SEND's bytes, in order.
    sends: Vec<Vec<u8>>,
    /// Each WRITE: (rkey, va, bytes), in order.
    writes: Vec<(u32, u64, Vec<u8>)>,
}

fn executed(recs: &[Rec], flow: &Flow) -> Executed {
    let mut ex = Executed::default();
    let mut last_copy: HashMap<u32, usize> = HashMap::new();
    let mut acked: HashSet<u32> = HashSet::new();
    let mut req = flow.requests.iter().peekable();
    for &r in &flow.responses {
        while let Some(&&i) = req.peek() {
            if i > r {
                break;
            }
            last_copy.insert(recs[i].frame().psn().value(), i);
            req.next();
        }
        let resp = recs[r].frame();
        let positive = resp.ext().aeth.is_some_and(|a| a.syndrome.is_ack());
        if resp.info.class != Class::Ack || !positive || !acked.insert(resp.psn().value()) {
            continue;
        }
        let Some(&end) = last_copy.get(&resp.psn().value()) else {
            continue;
        };
        let f = recs[end].frame();
        if !matches!(f.info.class, Class::Send | Class::Write) || !f.info.ends_message() {
            continue;
        }
        let mut parts = vec![end];
        let mut psn = f.psn();
        while !recs[*parts.last().unwrap()].frame().info.starts_message() {
            psn = psn.sub(1);
            parts.push(last_copy[&psn.value()]);
        }
        parts.reverse();
        let bytes: Vec<u8> = parts
            .iter()
            .flat_map(|&i| recs[i].frame().payload.to_vec())
            .collect();
        if f.info.class == Class::Send {
            ex.sends.push(bytes);
        } else {
            let reth = recs[parts[0]].frame().ext().reth.unwrap();
            ex.writes.push((reth.rkey, reth.va, bytes));
        }
    }
    ex
}

fn check_effects(name: &str, cap: &Capture, recs: &[Rec], flow: &Flow, r: &mut Responder) {
    let ex = executed(recs, flow);
    let mut wcs: Vec<Wc> = Vec::new();
    while r.dev.poll_cq(r.cq, 1024, &mut wcs) > 0 {}
    let got: Vec<&Wc> = wcs
        .iter()
        .filter(|w| w.status == WcStatus::Success)
        .collect();
    assert_eq!(got.len(), ex.sends.len(), "{name}: receive completions");
    for (w, want) in got.iter().zip(&ex.sends) {
        assert_eq!(w.opcode, WcOpcode::Recv);
        assert_eq!(w.byte_len as usize, want.len(), "{name}: SEND length");
        let keys = r.recv.unwrap();
        let at = (w.wr_id * RECV_LEN) as usize;
        let buf = &r.dev.mr(keys.lkey).unwrap()[at..at + want.len()];
        assert!(buf == &want[..], "{name}: SEND bytes of WR {}", w.wr_id);
    }
    if cap.tool.advertises_mr() {
        // Replay the WRITEs on an image of each region they touched and
        // compare (READ regions are compared on the wire).
        for k in &r.remote {
            if ex.writes.iter().all(|w| w.0 != k.rkey) {
                continue;
            }
            let mut image = vec![0u8; k.len];
            for (rkey, va, bytes) in &ex.writes {
                if *rkey == k.rkey {
                    let o = (va - k.addr) as usize;
                    image[o..o + bytes.len()].copy_from_slice(bytes);
                }
            }
            assert!(
                r.dev.mr(k.lkey).unwrap() == &image[..],
                "{name}: region {:#x} after the WRITEs",
                k.rkey
            );
        }
    }
    let fatal = flow.responses.iter().any(|&i| {
        recs[i].frame().ext().aeth.is_some_and(|a| {
            matches!(
                a.syndrome,
                AckSyndrome::Nak(
                    NakCode::InvalidRequest
                        | NakCode::RemoteAccessError
                        | NakCode::RemoteOperationalError
                )
            )
        })
    });
    let (state, _) = r.dev.query_qp(r.qpn).unwrap();
    if fatal {
        assert_eq!(state, QpState::Err, "{name}: a fatal NAK errors the QP");
        assert_eq!(
            r.dev.poll_event(),
            Some(Event::QpError {
                qpn: r.qpn,
                status: WcStatus::RemInvReqErr
            })
        );
    } else {
        assert_eq!(state, QpState::Rts, "{name}: QP state");
        assert_eq!(r.dev.poll_event(), None);
    }
}

// ----- the replay -----

/// Compares our frames with the capture's, in order; on a difference the
/// message shows both sequences side by side. `after[k]` is the capture
/// record our frame `k` was sent in reaction to.
///
/// With `causal`, our frame `k` must also have been sent no later than
/// rxe's: after a request that came before rxe's frame `k` (rxe cannot
/// answer a request it has not received, so a later one means we waited
/// for something rxe did not).
fn compare(what: &str, ours: &[Vec<u8>], theirs: &[&Rec], after: &[usize], causal: bool) {
    let mut report = String::new();
    let mut bad = None;
    for k in 0..ours.len().max(theirs.len()) {
        let a = ours
            .get(k)
            .map(|b| Frame::parse(b).map_or_else(|e| format!("unparsable: {e}"), |f| describe(&f)));
        let b = theirs.get(k).map(|r| describe(&r.frame()));
        report += &format!(
            "  {k:3}: ours {:58} | rxe #{:<3} {}\n",
            a.as_deref().unwrap_or("-"),
            theirs.get(k).map_or(0, |r| r.no),
            b.as_deref().unwrap_or("-")
        );
        if bad.is_none() {
            bad = match (ours.get(k), theirs.get(k)) {
                (Some(_), Some(y)) if causal && after.get(k) > Some(&y.no) => Some(format!(
                    "frame {k} sent after record #{}, rxe's before it",
                    after.get(k).unwrap()
                )),
                (Some(x), Some(y)) => same_frame(x, &y.data)
                    .err()
                    .map(|e| format!("frame {k} (after record #{}): {e}", after.get(k).unwrap())),
                (Some(_), None) => Some(format!("extra frame {k}")),
                (None, Some(_)) => Some(format!("missing frame {k}")),
                (None, None) => None,
            };
        }
    }
    if let Some(e) = bad {
        panic!("{what}: {e}\n{report}");
    }
}

fn is_positive_ack(f: &Frame<'_>) -> bool {
    f.info.class == Class::Ack && f.ext().aeth.is_some_and(|a| a.syndrome.is_ack())
}

/// What a responder that coalesces consecutive ACKs (ours, when it is
/// polled once for many requests) sends instead of `frames`: an ACK
/// directly after an ACK replaces it (ACKs are cumulative).
fn coalesced<'a>(frames: &[&'a Rec]) -> Vec<&'a Rec> {
    let mut out: Vec<&Rec> = Vec::new();
    for &r in frames {
        let prev_ack = out.last().is_some_and(|p| is_positive_ack(&p.frame()));
        if prev_ack && is_positive_ack(&r.frame()) {
            out.pop();
        }
        out.push(r);
    }
    out
}

fn replay(cap: &Capture) {
    let name = cap.name;
    let recs = load(name);
    let mtu = cap.mtu.bytes();
    // The path MTU is the capture's: FIRST and MIDDLE packets carry it.
    for r in &recs {
        let f = r.frame();
        if matches!(
            f.info.class,
            Class::Send | Class::Write | Class::ReadResponse
        ) && matches!(f.info.position, Position::First | Position::Middle)
        {
            assert_eq!(f.payload.len() as u32, mtu, "{name}: path MTU");
        }
    }
    let flows = flows(&recs, mtu);
    let counts: Vec<FlowCounts> = flows
        .iter()
        .map(|f| (f.requests.len(), f.responses.len()))
        .collect();
    assert_eq!(counts, cap.flows, "{name}: flows (requests, responses)");
    let total: usize = counts.iter().map(|(a, b)| a + b).sum();
    assert_eq!(total, recs.len(), "{name}: every RC frame is in a flow");

    for flow in &flows {
        let what = format!(
            "{name}: {} QP {:#x} -> {} QP {:#x}",
            flow.req_ip, flow.req_qpn, flow.resp_ip, flow.resp_qpn
        );
        let theirs: Vec<&Rec> = flow.responses.iter().map(|&i| &recs[i]).collect();

        // 1. Strict: each request fed and answered before the next, as rxe
        //    does; the responses must be rxe's, frame for frame.
        let mut r = build_responder(cap, &recs, flow);
        let mut ours: Vec<Vec<u8>> = Vec::new();
        let mut after: Vec<usize> = Vec::new();
        for &i in &flow.requests {
            let now = Instant::from_nanos(recs[i].t);
            r.dev.handle(now, &recs[i].data);
            drain(&mut r.dev, now, &mut ours);
            after.resize(ours.len(), recs[i].no);
        }
        let rx = r.dev.rx_counters();
        assert_eq!(
            (
                rx.malformed,
                rx.icrc_errors,
                rx.unknown_qp,
                rx.wrong_destination
            ),
            (0, 0, 0, 0),
            "{what}: every request reached the QP"
        );
        compare(&what, &ours, &theirs, &after, true);
        check_effects(&what, cap, &recs, flow, &mut r);

        // 2. In one burst: every request handled before the first poll.
        //    The one allowed difference: consecutive ACKs leave as one,
        //    the last (cumulative, so nothing is lost; the coalescing the
        //    responder docs describe).
        let mut r = build_responder(cap, &recs, flow);
        let mut now = Instant::ZERO;
        for &i in &flow.requests {
            now = Instant::from_nanos(recs[i].t);
            r.dev.handle(now, &recs[i].data);
        }
        let mut ours = Vec::new();
        drain(&mut r.dev, now, &mut ours);
        let last = recs[*flow.requests.last().unwrap()].no;
        compare(
            &format!("{what} (one burst)"),
            &ours,
            &coalesced(&theirs),
            &vec![last; ours.len()],
            false,
        );
        check_effects(&what, cap, &recs, flow, &mut r);
    }
    requester_replays(cap, &recs, &flows);
}

// ----- the requester -----

/// A message of the capture's requester, rebuilt from its packets.
struct Message {
    /// Capture index of the first copy of its first packet.
    first: usize,
    op: SendOp,
    /// Bytes sent (SEND / WRITE) or the READ's length.
    bytes: Vec<u8>,
    len: u32,
}

/// The messages of a request stream, in PSN order, each from the first
/// copy of each of its packets (every copy of a PSN is the same frame,
/// checked here, but for the IP identification).
fn messages(recs: &[Rec], flow: &Flow) -> Vec<Message> {
    let mut copies: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &i in &flow.requests {
        copies
            .entry(recs[i].frame().psn().value())
            .or_default()
            .push(i);
    }
    for v in copies.values() {
        for &j in &v[1..] {
            if let Err(e) = same_frame(&recs[v[0]].data, &recs[j].data) {
                panic!("records #{} and #{}: {e}", recs[v[0]].no, recs[j].no);
            }
        }
    }
    let mut out = Vec::new();
    let mut started = HashSet::new();
    for &i in &flow.requests {
        let f = recs[i].frame();
        if !f.info.starts_message() || !started.insert(f.psn().value()) {
            continue;
        }
        let ext = f.ext();
        let mut bytes = Vec::new();
        let mut psn = f.psn();
        loop {
            let g = recs[copies[&psn.value()][0]].frame();
            bytes.extend_from_slice(g.payload);
            if g.info.ends_message() || g.info.class == Class::ReadRequest {
                break;
            }
            psn = psn.add(1);
        }
        assert!(
            ext.imm.is_none() && ext.ieth.is_none(),
            "not in the captures"
        );
        let (op, len) = match f.info.class {
            Class::Send => (SendOp::Send, bytes.len() as u32),
            Class::Write => {
                let r = ext.reth.unwrap();
                assert_eq!(r.dma_len as usize, bytes.len());
                (
                    SendOp::Write {
                        remote_addr: r.va,
                        rkey: r.rkey,
                    },
                    r.dma_len,
                )
            }
            Class::ReadRequest => {
                let r = ext.reth.unwrap();
                (
                    SendOp::Read {
                        remote_addr: r.va,
                        rkey: r.rkey,
                    },
                    r.dma_len,
                )
            }
            c => panic!("no {c:?} in the captures"),
        };
        out.push(Message {
            first: i,
            op,
            bytes,
            len,
        });
    }
    out
}

/// Replays a flow into our requester: the capture's messages are posted as
/// work requests and the capture's responses fed back at their times; every
/// frame we send must be rxe's frame of the same PSN, and in the same
/// order. Returns the number of frames compared.
///
/// Timing: rxe's requester kept sending new packets after a NAK arrived,
/// until its completer had run (in ib_write_bw_loss the NAK is record 23,
/// but records 24-36 are new packets and the go-back-N starts at record
/// 37). Our requester reacts to the NAK at once. So the messages rxe had
/// started before it went back are posted at the start (ours then goes
/// back over all of them, as rxe did), later ones when the capture shows
/// their first packet. Before the go-back-N we may send a few packets rxe
/// sent only after it (ib_write_bw_loss: PSNs 225..227); each is still
/// compared with rxe's copy of that PSN. From the go-back-N on, the
/// sequence must be rxe's exactly: it starts at the NAK'd PSN, mid-message
/// (a MIDDLE, no RETH) with the payload at the right offset.
///
/// Our ACK timer is set to 1.07 s (18): none of rxe's did fire in these
/// flows, and the retransmissions under test are the NAK-driven ones.
fn requester_replay(cap: &Capture, recs: &[Rec], flow: &Flow) -> usize {
    let what = format!(
        "{}: requester {} QP {:#x} -> {} QP {:#x}",
        cap.name, flow.req_ip, flow.req_qpn, flow.resp_ip, flow.resp_qpn
    );
    let msgs = messages(recs, flow);
    let mut dev = Device::new(rxe_like(flow.req_mac, flow.req_ip)).unwrap();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1 << 12).unwrap();
    let slot = |k: usize| k as u64 * RECV_LEN;
    let local = dev
        .reg_mr(MrSpec::new(
            pd,
            (msgs.len() as u64 * RECV_LEN) as usize,
            Access::LOCAL_WRITE,
        ))
        .unwrap();
    for (k, m) in msgs.iter().enumerate() {
        let at = slot(k) as usize;
        dev.mr_mut(local.lkey).unwrap()[at..at + m.bytes.len()].copy_from_slice(&m.bytes);
    }
    let qpn = dev
        .create_qp(
            pd,
            cq,
            cq,
            QpCaps {
                qpn: Some(flow.req_qpn),
                ..QpCaps::default()
            },
        )
        .unwrap();
    let av = AddressVector {
        dgid: flow.resp_ip,
        dmac: flow.resp_mac,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        src_port: source_port(
            cap,
            flow.req_ip,
            flow.req_qpn,
            flow.resp_qpn,
            flow.req_sport,
        ),
        recovery: ferroce::transport::Recovery::GoBackN,
        int_telemetry: false,
    };
    let sq_psn = first_psn(recs, &flow.requests).value();
    let conn = Conn {
        tool: cap.tool,
        mtu: cap.mtu,
        av,
        dest_qpn: flow.resp_qpn,
        rq_psn: 0,
        sq_psn,
        timeout: 18,
    };
    connect(&mut dev, qpn, conn);

    // Where rxe went back, if it did: the first request not after every
    // earlier one; a NAK PSN sequence error for that PSN came before it.
    let mut back = flow.requests.len();
    let mut max = recs[flow.requests[0]].frame().psn();
    for (k, &i) in flow.requests.iter().enumerate().skip(1) {
        let p = recs[i].frame().psn();
        if !p.after(max) {
            back = k;
            break;
        }
        max = p;
    }
    let back_at = flow.requests.get(back).copied().unwrap_or(usize::MAX);
    let nak = (back_at != usize::MAX).then(|| {
        let psn = recs[back_at].frame().psn();
        let nak = flow.responses.iter().rev().find(|&&i| i < back_at).copied();
        assert!(
            nak.is_some_and(|i| {
                let f = recs[i].frame();
                f.psn() == psn
                    && f.ext().aeth.map(|a| a.syndrome)
                        == Some(AckSyndrome::Nak(NakCode::PsnSequenceError))
            }),
            "{what}: rxe went back to {psn} after a NAK PSN sequence error for it"
        );
        nak.unwrap()
    });

    let post = |dev: &mut Device, k: usize| {
        let m = &msgs[k];
        let wr = SendWr::new(
            k as u64,
            m.op,
            Payload::sge(Sge {
                addr: local.addr + slot(k),
                length: m.len,
                lkey: local.lkey,
            }),
        );
        dev.post_send(qpn, wr).unwrap();
    };
    // Events in capture order: posts of the later messages, responses.
    let mut events: Vec<(usize, Option<usize>)> =
        flow.responses.iter().map(|&i| (i, None)).collect();
    let t0 = Instant::from_nanos(recs[flow.requests[0]].t);
    for (k, m) in msgs.iter().enumerate() {
        if m.first < back_at {
            post(&mut dev, k);
        } else {
            events.push((m.first, Some(k)));
        }
    }
    events.sort();
    let mut ours = Vec::new();
    let mut after = Vec::new();
    drain(&mut dev, t0, &mut ours);
    after.resize(ours.len(), recs[flow.requests[0]].no);
    // Where our go-back-N starts: what we send after the NAK.
    let mut split = 0;
    for (i, msg) in events {
        let now = Instant::from_nanos(recs[i].t);
        match msg {
            Some(k) => post(&mut dev, k),
            None => dev.handle(now, &recs[i].data),
        }
        if Some(i) == nak {
            split = ours.len();
        }
        drain(&mut dev, now, &mut ours);
        after.resize(ours.len(), recs[i].no);
    }

    // Every frame is rxe's frame of its PSN.
    let mut by_psn: HashMap<u32, usize> = HashMap::new();
    for &i in &flow.requests {
        by_psn.entry(recs[i].frame().psn().value()).or_insert(i);
    }
    for (k, b) in ours.iter().enumerate() {
        let f = Frame::parse(b).unwrap_or_else(|e| panic!("{what}: frame {k}: {e}"));
        let Some(&j) = by_psn.get(&f.psn().value()) else {
            panic!(
                "{what}: frame {k} ({}) has a PSN rxe never sent",
                describe(&f)
            );
        };
        if let Err(e) = same_frame(b, &recs[j].data) {
            panic!("{what}: frame {k} vs record #{}: {e}", recs[j].no);
        }
    }
    // From the go-back-N on (or from the start), the order is rxe's.
    let theirs: Vec<&Rec> = if back_at == usize::MAX {
        flow.requests.iter().map(|&i| &recs[i]).collect()
    } else {
        flow.requests[back..].iter().map(|&i| &recs[i]).collect()
    };
    let from = split;
    compare(&what, &ours[from..], &theirs, &after[from..], false);
    // Before it, PSNs in order from the first, without a gap.
    for (k, b) in ours[..from].iter().enumerate() {
        let p = Frame::parse(b).unwrap().psn();
        assert_eq!(p, Psn::new(sq_psn).add(k as u32), "{what}: frame {k}");
    }

    // Every work request completed, READs with rxe's bytes.
    let mut wcs = Vec::new();
    while dev.poll_cq(cq, 1024, &mut wcs) > 0 {}
    assert_eq!(wcs.len(), msgs.len(), "{what}: completions {wcs:?}");
    for (k, w) in wcs.iter().enumerate() {
        assert_eq!((w.wr_id, w.status), (k as u64, WcStatus::Success), "{what}");
        let m = &msgs[k];
        if let SendOp::Read { .. } = m.op {
            let at = slot(k) as usize;
            let got = &dev.mr(local.lkey).unwrap()[at..at + m.len as usize];
            let psn0 = recs[m.first].frame().psn();
            let want: Vec<u8> = flow
                .responses
                .iter()
                .map(|&i| recs[i].frame())
                .filter(|f| {
                    f.psn()
                        .in_range(psn0, request_psns(&recs[m.first].frame(), cap.mtu.bytes()))
                })
                .flat_map(|f| f.payload.to_vec())
                .collect();
            assert!(got == &want[..], "{what}: READ {k} bytes");
        }
    }
    assert_eq!(dev.send_queue_len(qpn), 0);
    assert_eq!(dev.poll_event(), None);
    ours.len()
}

/// Runs [`requester_replay`] on every flow whose requester is rxe (the
/// host peer's requests were made up by a script: its PSN gap and bad R_Key
/// are not something a requester does), but for `requester_skips`.
fn requester_replays(cap: &Capture, recs: &[Rec], flows: &[Flow]) {
    for (k, flow) in flows.iter().enumerate() {
        if is_host_peer(flow.req_ip) || cap.requester_skips.contains(&k) {
            continue;
        }
        requester_replay(cap, recs, flow);
    }
}

macro_rules! captures {
    ($($test:ident: $mtu:ident, $tool:expr, cm: $cm:literal, requester_skips: $skip:expr,
        [$(($q:literal, $a:literal)),*];)*) => {
        $(
            #[test]
            fn $test() {
                replay(&Capture {
                    name: stringify!($test),
                    mtu: Mtu::$mtu,
                    tool: $tool,
                    cm: $cm,
                    requester_skips: &$skip,
                    flows: &[$(($q, $a)),*],
                });
            }
        )*
    };
}

// Each capture's RC flows in order of appearance: (requests fed, responses
// compared). Both directions of a ping-pong are flows of their own.
// `requester_skips`: flows whose requester is not replayed, and why.
captures! {
    rc_pingpong: Mtu1024, Tool::RcPingpong, cm: false, requester_skips: [],
        [(20, 5), (20, 5)];
    rc_pingpong_mtu4096: Mtu4096, Tool::RcPingpong, cm: false, requester_skips: [],
        [(12, 3), (12, 3)];
    rc_pingpong_loss: Mtu1024, Tool::RcPingpong, cm: false, requester_skips: [],
        [(21, 6), (20, 5)];
    ib_send_bw: Mtu1024, SEND, cm: false, requester_skips: [], [(20, 5)];
    ib_send_bw_rdmacm: Mtu1024, SEND, cm: true, requester_skips: [],
        [(11, 11), (11, 11), (20, 5)];
    // Flow 1 (198.18.0.2's requests) holds rxe's spurious retransmission
    // of PSN 11282845 after a timer fired on a slow emulated CPU while the
    // ACK was on its way: a timeout retransmission our requester has no
    // reason to make at the capture's times. Its responder side (the
    // duplicate re-ACKed with the current MSN) is checked above.
    ib_send_lat: Mtu1024, SEND, cm: false, requester_skips: [1], [(5, 5), (6, 6)];
    ib_write_bw: Mtu1024, WRITE, cm: false, requester_skips: [], [(20, 5)];
    ib_write_bw_loss: Mtu1024, WRITE, cm: false, requester_skips: [], [(34, 6)];
    ib_write_lat: Mtu1024, WRITE, cm: false, requester_skips: [], [(5, 5), (5, 5)];
    ib_read_bw: Mtu1024, READ, cm: false, requester_skips: [], [(5, 20)];
    ib_read_bw_mtu4096: Mtu4096, READ, cm: false, requester_skips: [], [(5, 20)];
    ib_read_lat: Mtu1024, READ, cm: false, requester_skips: [], [(5, 5)];
    host_peer_rc_pingpong: Mtu1024, Tool::RcPingpong, cm: false, requester_skips: [],
        [(20, 5), (20, 5)];
    host_peer_send_only: Mtu1024, Tool::RcPingpong, cm: false, requester_skips: [],
        [(3, 3), (3, 3)];
    host_peer_psn_gap: Mtu1024, Tool::RcPingpong, cm: false, requester_skips: [],
        [(21, 6), (20, 5)];
    host_peer_bad_rkey: Mtu1024, Tool::RcPingpong, cm: false, requester_skips: [],
        [(9, 3), (8, 2)];
}

/// The UC and UD captures have no RC frame (nothing to replay).
#[test]
fn uc_and_ud_captures_have_no_rc_frames() {
    for name in ["uc_pingpong", "ud_pingpong"] {
        assert!(load(name).is_empty(), "{name}");
    }
}
