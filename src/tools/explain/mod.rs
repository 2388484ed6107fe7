//! `ferroce explain`: the story of each RC connection in a capture, for an
//! engineer debugging interop. This module owns the analysis, sans IO:
//! [`Analyzer`] takes the frames `ferroce decode` makes of a capture
//! ([`Line`]s, so nothing is parsed twice) and [`Analyzer::finish`] gives a
//! [`Report`]: per connection its two ends, what each sent, the
//! [`Event`]s (PSN gaps, NAKs, RNR NAKs, resends and what caused them,
//! CNPs) and a [`Verdict`]. `render` writes the story as text, `plot` the
//! PSN-over-time graph; [`run`] is the command.
//!
//! The rules it reads the wire by (IBTA Vol. 1; reference §B.5, §B.6, §B.9):
//! - a connection is the two directions between two IP addresses whose
//!   BTH DestQPs are each other's QPs: every frame from A to B (A's
//!   requests and A's responses to B's requests) carries B's QPN;
//! - a request PSN behind the next new one is a resend (go-back-N,
//!   §9.7.5.2); ahead of it, the PSNs between are a gap on the wire. An
//!   RDMA READ request uses one PSN per response packet (reference §B.6), so
//!   the next request may be that many PSNs on;
//! - an AETH syndrome 0x60..0x64 is a NAK (§9.7.5.2.4: 0x60 PSN sequence
//!   error, 0x61 invalid request, 0x62 remote access error, 0x63 remote
//!   operational error, 0x64 invalid RD request), 0x20..0x3f an RNR NAK
//!   whose low five bits are the RNR timer code (§9.7.5.2.8); a NAK
//!   acknowledges every PSN before its own;
//! - a resend that follows neither a NAK nor an RNR NAK is the requester's
//!   local ACK timer (§9.7.6.1.3, C9-140: 4.096 µs × 2^timeout): the
//!   silence before it is the timeout, and its exponent is implied; a
//!   resend of a PSN already acknowledged on the wire is spurious;
//! - a CNP is opcode 0x81 (A17 §17.9.3), sent to the QP whose packets were
//!   marked ECN CE;
//! - between two ferroce ends that agreed on selective repeat
//!   ([`crate::wire::sr`], not standard), a NAK PSN sequence error with a
//!   SACK trailer acknowledges every PSN before its own and one packet
//!   that arrived ahead of its turn; a run of them for the same PSN is one
//!   event, and the resends that follow skip what was SACKed.

#![deny(unsafe_code)]

pub mod plot;
pub mod render;

use super::decode::{linktype, Decoder, Line, RoceLine, Verdict as FrameKind};
use crate::wire::opcode::{Class, Position};
use crate::wire::Opcode;
use std::collections::HashMap;
use std::path::PathBuf;

/// One end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// Its IP address.
    pub ip: String,
    /// Its QPN (the DestQP of the frames sent to it); `None` when the
    /// capture holds no frame to it.
    pub qpn: Option<u32>,
}

/// What one end sent on a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    /// Every frame it sent.
    pub frames: u64,
    /// Request messages it started, by kind ("SEND", "RDMA WRITE", ...),
    /// resends not counted, in first-seen order.
    pub messages: Vec<(&'static str, u64)>,
    /// Request packets, resends included.
    pub request_packets: u64,
    /// Request packets sent again.
    pub resent_packets: u64,
    /// The PSN of its first and last new request packet.
    pub psns: Option<(u32, u32)>,
    /// The highest of its request PSNs that the peer acknowledged.
    pub acked: Option<u32>,
    /// ACKs it sent for a PSN it had acknowledged before (answers to
    /// duplicate requests).
    pub duplicate_acks: u64,
    /// CNPs it sent.
    pub cnps: u64,
    /// Frames it sent that arrived marked ECN CE.
    pub ce_marked: u64,
    /// Its requests carry ferroce's selective-repeat trailer: it recovers
    /// losses by selective repeat, not go-back-N.
    pub selective_repeat: bool,
}

impl Sent {
    /// Request messages of every kind.
    pub fn message_count(&self) -> u64 {
        self.messages.iter().map(|m| m.1).sum()
    }
}

/// What made a requester go back and send again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A NAK PSN sequence error (the only NAK that is retried).
    Nak,
    /// An RNR NAK, waited on for `wait_ns`.
    Rnr {
        /// Time from the RNR NAK to the resend.
        wait_ns: u64,
    },
    /// Nothing on the wire: the local ACK timer.
    Timeout {
        /// Time since the requester's last packet or its last answer.
        silence_ns: u64,
        /// The timeout exponent the silence implies (4.096 µs × 2^t).
        exponent: Option<u8>,
    },
    /// The PSN had been acknowledged on the wire before the resend.
    Spurious {
        /// How long before the resend its ACK passed.
        acked_before_ns: u64,
    },
}

/// Something that happened on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// PSNs of requests that never appeared: `missing` of them from `psn`.
    Gap {
        /// The first missing PSN.
        psn: u32,
        /// How many.
        missing: u32,
    },
    /// A NAK (syndrome 0x60..0x7f) for `psn`.
    Nak {
        /// The PSN it carries.
        psn: u32,
        /// The AETH syndrome byte, e.g. 0x60.
        syndrome: u8,
        /// The opcode of the request it refuses, when the capture has it.
        request: Option<Opcode>,
    },
    /// Selective repeat: NAKs PSN sequence error for `psn` (every PSN
    /// before it arrived) with SACKs for `count` packets from `first` to
    /// `last` that arrived ahead of their turn.
    Sack {
        /// The cumulative PSN the NAKs carry.
        psn: u32,
        /// The first PSN SACKed.
        first: u32,
        /// The last PSN SACKed.
        last: u32,
        /// SACK NAKs in the run.
        count: u32,
    },
    /// An RNR NAK for `psn`.
    RnrNak {
        /// The PSN it carries.
        psn: u32,
        /// The RNR timer code (§9.7.5.2.8).
        timer: u8,
    },
    /// Go-back-N: `packets` resent from `psn`, because of `cause`.
    Resend {
        /// The first PSN resent.
        psn: u32,
        /// Packets resent before new ones followed.
        packets: u32,
        /// What triggered it.
        cause: Cause,
    },
    /// A CNP to the event's end.
    Cnp,
}

/// One event of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Capture time, ns since the Unix epoch.
    pub t_ns: u64,
    /// The frame that shows it (1-based).
    pub frame: u64,
    /// The index in [`Connection::ends`] of the requester it concerns
    /// (for a CNP: the end it is sent to).
    pub end: usize,
    /// What happened.
    pub what: What,
}

/// How a connection ended, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A NAK the requester cannot retry (0x61..0x64): the QP is in error.
    NakError {
        /// The requester that got it.
        end: usize,
        /// The AETH syndrome.
        syndrome: u8,
        /// The PSN refused.
        psn: u32,
        /// The request at that PSN, when captured.
        request: Option<Opcode>,
    },
    /// The same PSN sent again and again with no answer until the end.
    RetryExceeded {
        /// The requester.
        end: usize,
        /// The PSN never acknowledged.
        psn: u32,
        /// Times it was sent.
        tries: u32,
        /// The last PSN the peer acknowledged.
        last_ack: Option<u32>,
        /// The mean silence before each resend.
        silence_ns: u64,
    },
    /// RNR NAKs: the responder had no receive posted.
    Rnr {
        /// The requester that got them.
        end: usize,
        /// How many.
        naks: u32,
        /// Whether the capture ends still waiting (RNR retries exhausted).
        exceeded: bool,
    },
    /// Requests not acknowledged when the capture ends, never resent.
    Unanswered {
        /// The requester.
        end: usize,
        /// The first PSN not acknowledged.
        psn: u32,
        /// Request PSNs not acknowledged.
        outstanding: u64,
    },
    /// Losses, and go-back-N recovered from them.
    Recovered {
        /// PSN gaps on the wire.
        gaps: u32,
        /// NAK PSN sequence errors.
        seq_naks: u32,
        /// Resends after a timeout.
        timeouts: u32,
        /// Go-back-N resends in all.
        resends: u32,
    },
    /// Every request acknowledged, but some resent after their ACK passed.
    Spurious {
        /// Spurious resends.
        resends: u32,
        /// ACKs sent again for duplicate requests.
        duplicate_acks: u64,
    },
    /// Every request acknowledged, nothing lost.
    Clean {
        /// Request messages both ways.
        messages: u64,
    },
}

impl Verdict {
    /// Its kind's short name: "clean", "spurious", "recovered",
    /// "unanswered", "rnr", "retry-exceeded" or "nak-error".
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::NakError { .. } => "nak-error",
            Verdict::RetryExceeded { .. } => "retry-exceeded",
            Verdict::Rnr { .. } => "rnr",
            Verdict::Unanswered { .. } => "unanswered",
            Verdict::Recovered { .. } => "recovered",
            Verdict::Spurious { .. } => "spurious",
            Verdict::Clean { .. } => "clean",
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Verdict::NakError { .. } => 0,
            Verdict::RetryExceeded { .. } => 1,
            Verdict::Rnr { .. } => 2,
            Verdict::Unanswered { .. } => 3,
            Verdict::Recovered { .. } => 4,
            Verdict::Spurious { .. } => 5,
            Verdict::Clean { .. } => 6,
        }
    }
}

/// A PSN series for the plot: (capture time ns, PSN unwrapped, relative
/// to the requester's first PSN).
pub type Points = Vec<(u64, i64)>;

/// One requester's PSNs over time, for the plot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// Its request packets.
    pub requests: Points,
    /// The PSNs its peer acknowledged or answered with.
    pub acks: Points,
    /// Where each of the connection's events for this end sits.
    pub marks: Vec<(u64, i64, What)>,
}

/// One RC connection: two ends, what each sent, what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Its two ends, in the order their first frame appeared.
    pub ends: [End; 2],
    /// What each end sent (same index).
    pub sent: [Sent; 2],
    /// Everything noteworthy, in capture order.
    pub events: Vec<Event>,
    /// Each end's requests and their acknowledgements over time.
    pub traces: [Trace; 2],
    /// Capture times of its first and last frames, ns.
    pub span_ns: (u64, u64),
    /// The outcome.
    pub verdict: Verdict,
}

/// Everything `explain` found in a capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The RC connections, in the order their first frame appeared.
    pub connections: Vec<Connection>,
    /// Frames read.
    pub frames: u64,
    /// RoCE frames of RC connections (and CNPs).
    pub rc_frames: u64,
    /// RoCE frames of other services (UD, UC, ...), not analysed.
    pub other_roce: u64,
    /// Frames to UDP port 4791 that did not parse.
    pub malformed: u64,
    /// Frames that are not RoCE (skipped).
    pub skipped: u64,
    /// Capture time of the first frame, ns.
    pub start_ns: u64,
}

/// A RoCE frame of an RC connection, as the analysis needs it.
#[derive(Debug, Clone)]
struct Pkt {
    frame: u64,
    t_ns: u64,
    src: String,
    dst: String,
    opcode: Opcode,
    qp: u32,
    psn: u32,
    syndrome: Option<u8>,
    dma_len: Option<u32>,
    payload: usize,
    ce: bool,
    /// A selective-repeat SACK's PSN (on a NAK).
    sack: Option<u32>,
    /// A request with a selective-repeat placement trailer.
    placed: bool,
}

impl Pkt {
    fn of(frame: u64, t_ns: u64, r: &RoceLine) -> Pkt {
        Pkt {
            frame,
            t_ns,
            src: r.src.clone(),
            dst: r.dst.clone(),
            opcode: Opcode(r.opcode_num),
            qp: r.dest_qp,
            psn: r.psn,
            syndrome: r.aeth.as_ref().map(|a| a.syndrome),
            dma_len: r.reth.map(|r| r.dma_len),
            payload: r.payload_len,
            ce: r.ecn == "ce",
            sack: match r.sr {
                Some(super::decode::SrLine::Sack { psn }) => Some(psn),
                _ => None,
            },
            placed: matches!(r.sr, Some(super::decode::SrLine::Place { .. })),
        }
    }

    fn class(&self) -> Option<Class> {
        self.opcode.info().map(|i| i.class)
    }

    fn position(&self) -> Option<Position> {
        self.opcode.info().map(|i| i.position)
    }
}

/// Takes a capture's decoded frames one at a time; [`Analyzer::finish`]
/// tells their story.
#[derive(Debug, Default)]
pub struct Analyzer {
    pkts: Vec<Pkt>,
    report: Report,
    started: bool,
}

impl Analyzer {
    /// Nothing seen yet.
    pub fn new() -> Analyzer {
        Analyzer::default()
    }

    /// One decoded frame.
    pub fn push(&mut self, line: &Line) {
        let r = &mut self.report;
        r.frames += 1;
        if !self.started {
            self.started = true;
            r.start_ns = line.ts_ns;
        }
        match &line.verdict {
            FrameKind::Skipped { .. } => r.skipped += 1,
            FrameKind::Malformed { .. } => r.malformed += 1,
            FrameKind::Roce(roce) => {
                let op = Opcode(roce.opcode_num);
                let rc = op == Opcode::CNP || op.transport() == crate::wire::opcode::Transport::Rc;
                if rc {
                    r.rc_frames += 1;
                    self.pkts.push(Pkt::of(line.frame, line.ts_ns, roce));
                } else {
                    r.other_roce += 1;
                }
            }
        }
    }

    /// The report: connections paired, each direction analysed.
    pub fn finish(mut self) -> Report {
        let pmtu = infer_pmtu(&self.pkts);
        for (ends, idx) in pair_flows(&self.pkts) {
            let pkts: Vec<&Pkt> = idx.iter().map(|&i| &self.pkts[i]).collect();
            self.report.connections.push(analyse(ends, &pkts, pmtu));
        }
        self.report
    }
}

/// The path MTU: the payload of a FIRST or MIDDLE packet, which carries
/// exactly one (§9.7.4.1.x; reference §B.6); `None` if none is captured.
fn infer_pmtu(pkts: &[Pkt]) -> Option<u32> {
    pkts.iter()
        .filter(|p| matches!(p.position(), Some(Position::First | Position::Middle)))
        .map(|p| p.payload as u32)
        .filter(|&n| n >= 256)
        .max()
}

/// A direction's frames: (source, destination, DestQP).
type FlowKey = (String, String, u32);

/// Groups the packets into connections: each flow (source, destination,
/// DestQP) with the reverse flow that answers it best (responses whose
/// PSNs fall among its requests'), else alone.
fn pair_flows(pkts: &[Pkt]) -> Vec<([End; 2], Vec<usize>)> {
    let mut order: Vec<FlowKey> = Vec::new();
    let mut members: HashMap<FlowKey, Vec<usize>> = HashMap::new();
    for (i, p) in pkts.iter().enumerate() {
        let k = (p.src.clone(), p.dst.clone(), p.qp);
        members.entry(k.clone()).or_insert_with(|| {
            order.push(k);
            Vec::new()
        });
        members
            .get_mut(&(p.src.clone(), p.dst.clone(), p.qp))
            .unwrap()
            .push(i);
    }
    let range = |k: &FlowKey| -> Option<(u32, u32)> {
        let req = members[k]
            .iter()
            .map(|&i| &pkts[i])
            .filter(|p| is_request(p));
        req.fold(None, |acc, p| match acc {
            None => Some((p.psn, p.psn)),
            Some((lo, hi)) => Some((lo.min(p.psn), hi.max(p.psn))),
        })
    };
    let answers = |from: &FlowKey, to: &FlowKey| -> usize {
        let Some((lo, hi)) = range(to) else { return 0 };
        members[from]
            .iter()
            .filter(|&&i| !is_request(&pkts[i]) && (lo..=hi).contains(&pkts[i].psn))
            .count()
    };
    let mut paired: HashMap<FlowKey, bool> = HashMap::new();
    let mut out = Vec::new();
    for k in &order {
        if paired.contains_key(k) {
            continue;
        }
        let best = order
            .iter()
            .filter(|r| r.0 == k.1 && r.1 == k.0 && !paired.contains_key(*r))
            .max_by_key(|r| {
                (
                    answers(r, k) + answers(k, r),
                    std::cmp::Reverse(index_of(&order, r)),
                )
            });
        paired.insert(k.clone(), true);
        let (a, b) = (k.0.clone(), k.1.clone());
        let mut idx = members[k].clone();
        let mut ends = [
            End { ip: a, qpn: None },
            End {
                ip: b,
                qpn: Some(k.2),
            },
        ];
        if let Some(r) = best {
            paired.insert(r.clone(), true);
            ends[0].qpn = Some(r.2);
            idx.extend_from_slice(&members[r]);
            idx.sort_unstable();
        }
        out.push((ends, idx));
    }
    out
}

fn index_of(order: &[FlowKey], k: &FlowKey) -> usize {
    order.iter().position(|o| o == k).unwrap_or(usize::MAX)
}

fn is_request(p: &Pkt) -> bool {
    p.opcode.info().is_some_and(|i| i.is_request())
}

/// The message kind a request opcode starts.
fn kind_name(class: Class) -> &'static str {
    match class {
        Class::Send => "SEND",
        Class::Write => "RDMA WRITE",
        Class::ReadRequest => "RDMA READ",
        Class::Atomic => "ATOMIC",
        Class::Flush => "FLUSH",
        Class::AtomicWrite => "ATOMIC WRITE",
        Class::ReadResponse | Class::Ack | Class::AtomicAck | Class::Cnp => "response",
    }
}

/// `b` unwrapped next to `reference`: the 24-bit PSN nearest to it
/// (reference §B.6's signed 24-bit difference).
fn unwrap(b: u32, reference: i64) -> i64 {
    let r = (reference & 0xFF_FFFF) as u32;
    let d = ((b.wrapping_sub(r) << 8) as i32) >> 8;
    reference + d as i64
}

fn wire(u: i64) -> u32 {
    (u & 0xFF_FFFF) as u32
}

/// The local ACK timeout exponent a silence implies: the nearest t with
/// 4.096 µs × 2^t (§9.7.6.1.3), if in 1..=31.
pub fn implied_exponent(silence_ns: u64) -> Option<u8> {
    if silence_ns < 4_096 {
        return None;
    }
    let t = (silence_ns as f64 / 4_096.0).log2().round();
    (1.0..=31.0).contains(&t).then_some(t as u8)
}

/// A go-back-N resend in progress.
#[derive(Debug, Clone, Copy)]
struct Episode {
    /// The index of its `Resend` event.
    event: usize,
    /// The last PSN it sent, and the next new PSN when it began.
    last: i64,
    old_next: i64,
}

/// One requester's state while its packets and its peer's answers go by.
#[derive(Debug, Default)]
struct Requester {
    /// The PSN unwrapping reference and the first PSN (origin of the plot).
    reference: Option<i64>,
    origin: i64,
    /// The next new PSN, and how many more a READ before it may use.
    next: Option<i64>,
    slack: i64,
    lowest: i64,
    acked: Option<i64>,
    acked_at: u64,
    last_tx: u64,
    last_rx: u64,
    episode: Option<Episode>,
    nak: bool,
    rnr: Option<u64>,
    sends: HashMap<i64, u32>,
    ops: HashMap<i64, Opcode>,
    fatal: Option<(u8, i64)>,
    rnr_naks: u32,
    rnr_pending: bool,
    timeouts: Vec<u64>,
    /// The event of the SACK run in progress and its cumulative PSN.
    sack_run: Option<(usize, i64)>,
}

impl Requester {
    fn unwrap(&mut self, psn: u32) -> i64 {
        let u = match self.reference {
            None => {
                self.origin = psn as i64;
                self.lowest = psn as i64;
                psn as i64
            }
            Some(r) => unwrap(psn, r),
        };
        self.reference = Some(u);
        u
    }
}

/// Builds a connection's story from its packets, in capture order.
struct Story<'a> {
    ends: [End; 2],
    sent: [Sent; 2],
    events: Vec<Event>,
    traces: [Trace; 2],
    req: [Requester; 2],
    pmtu: Option<u32>,
    pkt: Option<&'a Pkt>,
}

fn analyse(ends: [End; 2], pkts: &[&Pkt], pmtu: Option<u32>) -> Connection {
    let mut s = Story {
        ends,
        sent: Default::default(),
        events: Vec::new(),
        traces: Default::default(),
        req: Default::default(),
        pmtu,
        pkt: None,
    };
    for p in pkts {
        s.pkt = Some(p);
        let from = usize::from(p.src != s.ends[0].ip || p.qp != s.ends[1].qpn.unwrap_or(p.qp));
        s.sent[from].frames += 1;
        if p.ce {
            s.sent[from].ce_marked += 1;
        }
        if p.opcode == Opcode::CNP {
            s.sent[from].cnps += 1;
            let to = 1 - from;
            let y = s.req[to].reference.map_or(0, |r| r - s.req[to].origin);
            s.event(to, What::Cnp, y);
        } else if is_request(p) {
            s.request(from, p);
        } else {
            s.response(1 - from, p);
        }
    }
    let span_ns = (
        pkts.first().map_or(0, |p| p.t_ns),
        pkts.last().map_or(0, |p| p.t_ns),
    );
    let verdict = s.verdict();
    Connection {
        ends: s.ends,
        sent: s.sent,
        events: s.events,
        traces: s.traces,
        span_ns,
        verdict,
    }
}

impl Story<'_> {
    fn event(&mut self, end: usize, what: What, y: i64) {
        let p = self.pkt.expect("a packet is being handled");
        self.events.push(Event {
            t_ns: p.t_ns,
            frame: p.frame,
            end,
            what,
        });
        self.traces[end].marks.push((p.t_ns, y, what));
    }

    /// How many PSNs a request uses: one, or one per response packet of a
    /// READ (`slack` when the path MTU is not known: up to one per 256 B).
    fn span(&self, p: &Pkt) -> (i64, i64) {
        if p.class() != Some(Class::ReadRequest) {
            return (1, 0);
        }
        let len = p.dma_len.unwrap_or(0).max(1) as i64;
        match self.pmtu {
            Some(m) => ((len + m as i64 - 1) / m as i64, 0),
            None => (1, (len + 255) / 256 - 1),
        }
    }

    fn request(&mut self, i: usize, p: &Pkt) {
        let u = self.req[i].unwrap(p.psn);
        let (span, slack) = self.span(p);
        let origin = self.req[i].origin;
        self.traces[i].requests.push((p.t_ns, u - origin));
        let sent = &mut self.sent[i];
        sent.request_packets += 1;
        sent.selective_repeat |= p.placed;
        *self.req[i].sends.entry(u).or_insert(0) += 1;
        self.req[i].ops.insert(u, p.opcode);
        let next = self.req[i].next.unwrap_or(u);
        if u >= next {
            if u > next + self.req[i].slack {
                let missing = (u - next) as u32;
                self.event(
                    i,
                    What::Gap {
                        psn: wire(next),
                        missing,
                    },
                    next - origin,
                );
            }
            self.req[i].episode = None;
            self.req[i].slack = slack;
            self.new_request(i, p);
        } else {
            self.resend(i, p, u, next);
        }
        let r = &mut self.req[i];
        r.next = Some(r.next.unwrap_or(u).max(u + span));
        r.lowest = r.lowest.min(u);
        r.last_tx = p.t_ns;
    }

    /// Counts a new request packet of requester `i`.
    fn new_request(&mut self, i: usize, p: &Pkt) {
        let sent = &mut self.sent[i];
        sent.psns = Some(match sent.psns {
            None => (p.psn, p.psn),
            Some((first, _)) => (first, p.psn),
        });
        if matches!(p.position(), Some(Position::First | Position::Only)) {
            let kind = kind_name(p.class().unwrap_or(Class::Send));
            match sent.messages.iter_mut().find(|m| m.0 == kind) {
                Some(m) => m.1 += 1,
                None => sent.messages.push((kind, 1)),
            }
        }
    }

    fn resend(&mut self, i: usize, p: &Pkt, u: i64, next: i64) {
        self.sent[i].resent_packets += 1;
        if let Some(ep) = self.req[i].episode.as_mut() {
            if u > ep.last && u < ep.old_next {
                ep.last = u;
                if let What::Resend { packets, .. } = &mut self.events[ep.event].what {
                    *packets += 1;
                }
                return;
            }
        }
        let r = &mut self.req[i];
        let cause = if std::mem::take(&mut r.nak) {
            Cause::Nak
        } else if let Some(at) = r.rnr.take() {
            Cause::Rnr {
                wait_ns: p.t_ns.saturating_sub(at),
            }
        } else if r.acked.is_some_and(|a| a >= u) {
            Cause::Spurious {
                acked_before_ns: p.t_ns.saturating_sub(r.acked_at),
            }
        } else {
            let silence_ns = p.t_ns.saturating_sub(r.last_tx.max(r.last_rx));
            r.timeouts.push(silence_ns);
            Cause::Timeout {
                silence_ns,
                exponent: implied_exponent(silence_ns),
            }
        };
        let r = &mut self.req[i];
        r.episode = Some(Episode {
            event: self.events.len(),
            last: u,
            old_next: next,
        });
        let what = What::Resend {
            psn: p.psn,
            packets: 1,
            cause,
        };
        let y = u - r.origin;
        self.event(i, what, y);
    }

    /// A response from the peer of requester `i`: an ACK, NAK, RNR NAK,
    /// READ response or atomic ACK.
    fn response(&mut self, i: usize, p: &Pkt) {
        let u = self.req[i].unwrap(p.psn);
        let origin = self.req[i].origin;
        self.req[i].last_rx = p.t_ns;
        let syndrome = p.syndrome.unwrap_or(0);
        match (p.syndrome.is_some(), syndrome >> 5) {
            (true, 1) => {
                let r = &mut self.req[i];
                r.rnr_naks += 1;
                r.rnr = Some(p.t_ns);
                r.rnr_pending = true;
                self.ack_to(i, u - 1, p);
                let timer = syndrome & 0x1F;
                self.event(i, What::RnrNak { psn: p.psn, timer }, u - origin);
            }
            (true, 3) if syndrome == 0x60 && p.sack.is_some() => {
                self.sack(i, u, p);
            }
            (true, 3) => {
                let r = &mut self.req[i];
                if syndrome == 0x60 {
                    r.nak = true;
                    if u < r.lowest {
                        let missing = (r.lowest - u) as u32;
                        self.event(
                            i,
                            What::Gap {
                                psn: p.psn,
                                missing,
                            },
                            u - origin,
                        );
                    }
                } else if self.req[i].fatal.is_none() {
                    self.req[i].fatal = Some((syndrome, u));
                }
                self.ack_to(i, u - 1, p);
                let request = self.req[i].ops.get(&u).copied();
                let what = What::Nak {
                    psn: p.psn,
                    syndrome,
                    request,
                };
                self.event(i, what, u - origin);
            }
            _ => {
                let ack = p.class() == Some(Class::Ack);
                if ack && self.req[i].acked.is_some_and(|a| a >= u) {
                    self.sent[1 - i].duplicate_acks += 1;
                }
                self.req[i].rnr_pending = false;
                self.ack_to(i, u, p);
                self.traces[i].acks.push((p.t_ns, u - origin));
            }
        }
    }

    /// A selective-repeat SACK NAK at cumulative PSN `u`: it starts a run
    /// of SACKs, or joins the run for the same PSN.
    fn sack(&mut self, i: usize, u: i64, p: &Pkt) {
        let sacked = p.sack.unwrap_or(p.psn);
        self.ack_to(i, u - 1, p);
        if let Some((e, at)) = self.req[i].sack_run {
            if at == u {
                if let What::Sack { last, count, .. } = &mut self.events[e].what {
                    *last = sacked;
                    *count += 1;
                }
                return;
            }
        }
        let r = &mut self.req[i];
        r.nak = true;
        r.sack_run = Some((self.events.len(), u));
        let what = What::Sack {
            psn: p.psn,
            first: sacked,
            last: sacked,
            count: 1,
        };
        self.event(i, what, u - self.req[i].origin);
    }

    /// Requester `i`'s PSNs up to `u` are acknowledged (those it sent).
    fn ack_to(&mut self, i: usize, u: i64, p: &Pkt) {
        let r = &mut self.req[i];
        if u >= r.lowest && r.acked.map_or(true, |a| u > a) {
            r.acked = Some(u);
            r.acked_at = p.t_ns;
            self.sent[i].acked = Some(wire(u));
        }
    }

    /// The worst of both requesters' outcomes.
    fn verdict(&self) -> Verdict {
        let v = [self.outcome(0), self.outcome(1)];
        let worst = if v[1].rank() < v[0].rank() {
            v[1]
        } else {
            v[0]
        };
        match worst {
            Verdict::Clean { .. } => Verdict::Clean {
                messages: self.sent[0].message_count() + self.sent[1].message_count(),
            },
            Verdict::Recovered { .. } | Verdict::Spurious { .. } => Self::merge(v[0], v[1], worst),
            w => w,
        }
    }

    /// Both requesters' counts, when the worst is `Recovered` or
    /// `Spurious` (the other then is one of those or `Clean`).
    fn merge(a: Verdict, b: Verdict, worst: Verdict) -> Verdict {
        match (a, b) {
            (
                Verdict::Recovered {
                    gaps,
                    seq_naks,
                    timeouts,
                    resends,
                },
                Verdict::Recovered {
                    gaps: g,
                    seq_naks: n,
                    timeouts: t,
                    resends: r,
                },
            ) => Verdict::Recovered {
                gaps: gaps + g,
                seq_naks: seq_naks + n,
                timeouts: timeouts + t,
                resends: resends + r,
            },
            (
                Verdict::Spurious {
                    resends,
                    duplicate_acks,
                },
                Verdict::Spurious {
                    resends: r,
                    duplicate_acks: d,
                },
            ) => Verdict::Spurious {
                resends: resends + r,
                duplicate_acks: duplicate_acks + d,
            },
            _ => worst,
        }
    }

    /// Requester `i`'s outcome.
    fn outcome(&self, i: usize) -> Verdict {
        let r = &self.req[i];
        if let Some((syndrome, u)) = r.fatal {
            return Verdict::NakError {
                end: i,
                syndrome,
                psn: wire(u),
                request: r.ops.get(&u).copied(),
            };
        }
        let mine = self.events.iter().filter(|e| e.end == i);
        let (mut gaps, mut seq_naks, mut timeouts, mut resends, mut spurious) = (0, 0, 0, 0, 0);
        for e in mine {
            match e.what {
                What::Gap { .. } => gaps += 1,
                What::Nak { syndrome: 0x60, .. } | What::Sack { .. } => seq_naks += 1,
                What::Resend { cause, .. } => match cause {
                    Cause::Spurious { .. } => spurious += 1,
                    Cause::Timeout { .. } => {
                        timeouts += 1;
                        resends += 1
                    }
                    _ => resends += 1,
                },
                _ => {}
            }
        }
        if let Some(next) = r.next {
            let first = r.acked.map_or(r.lowest, |a| a + 1);
            if first < next {
                let tries = r.sends.get(&first).copied().unwrap_or(0);
                if r.rnr_pending && r.rnr_naks > 0 {
                    return Verdict::Rnr {
                        end: i,
                        naks: r.rnr_naks,
                        exceeded: true,
                    };
                }
                if tries >= 2 && !r.timeouts.is_empty() {
                    let n = r.timeouts.len() as u64;
                    return Verdict::RetryExceeded {
                        end: i,
                        psn: wire(first),
                        tries,
                        last_ack: r.acked.map(wire),
                        silence_ns: r.timeouts.iter().sum::<u64>() / n,
                    };
                }
                return Verdict::Unanswered {
                    end: i,
                    psn: wire(first),
                    outstanding: (next - first) as u64,
                };
            }
        }
        if r.rnr_naks > 0 {
            return Verdict::Rnr {
                end: i,
                naks: r.rnr_naks,
                exceeded: false,
            };
        }
        if gaps + seq_naks + resends > 0 {
            return Verdict::Recovered {
                gaps,
                seq_naks,
                timeouts,
                resends,
            };
        }
        if spurious > 0 {
            return Verdict::Spurious {
                resends: spurious,
                duplicate_acks: self.sent[1 - i].duplicate_acks,
            };
        }
        Verdict::Clean { messages: 0 }
    }
}

/// Why `explain` cannot tell a story.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The capture holds no RoCE frame of an RC connection.
    #[error("{path}: no RoCE RC frames in {frames} frames ({other} other RoCE, {malformed} malformed, {skipped} not RoCE)")]
    NoRoce {
        /// The capture.
        path: String,
        /// Frames read.
        frames: u64,
        /// RoCE frames of other services.
        other: u64,
        /// Malformed RoCE frames.
        malformed: u64,
        /// Frames that are not RoCE.
        skipped: u64,
    },
}

/// The options of `ferroce explain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ExplainOpts {
    /// The capture (classic pcap or pcapng).
    pub file: PathBuf,
    /// Also draw each connection's PSNs over time into this PNG (one panel
    /// per connection, stacked).
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
}

/// Reads a capture and analyses it.
pub fn explain_file(path: &std::path::Path) -> anyhow::Result<Report> {
    use anyhow::{bail, Context as _};
    let mut r = crate::pcap::open(path).with_context(|| format!("{}", path.display()))?;
    let lt = r.linktype();
    if !r.is_pcapng() && !linktype::supported(lt) {
        bail!(
            "{}: link type {lt} is not one explain reads (Ethernet, Linux cooked v1/v2, raw IP)",
            path.display()
        );
    }
    let mut d = Decoder::new();
    let mut a = Analyzer::new();
    while let Some(rec) = r
        .next_record()
        .with_context(|| format!("{}", path.display()))?
    {
        a.push(&d.frame_of(rec.linktype, rec.ts_ns, rec.orig_len as usize, rec.data));
    }
    let report = a.finish();
    if report.connections.is_empty() {
        return Err(ExplainError::NoRoce {
            path: path.display().to_string(),
            frames: report.frames,
            other: report.other_roce,
            malformed: report.malformed,
            skipped: report.skipped,
        }
        .into());
    }
    Ok(report)
}

/// `ferroce explain`: the story of each connection on stdout, and the plot
/// when asked (without a font: a warning, and the story still). Ok(false)
/// (exit 1) when a connection did not end clean or recovered.
pub fn run(opts: &ExplainOpts) -> anyhow::Result<bool> {
    let report = explain_file(&opts.file)?;
    print!("{}", render::story(&report));
    if let Some(png) = &opts.plot {
        match plot::write_png(&report, png) {
            Ok(()) => println!("plot: {}", png.display()),
            Err(crate::sim::lab::plot::PlotError::Font(e)) => {
                log::warn!("no plot: {e}");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report.connections.iter().all(|c| {
        matches!(
            c.verdict,
            Verdict::Clean { .. } | Verdict::Recovered { .. } | Verdict::Spurious { .. }
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ext::{AckSyndrome, AethRepr, RethRepr};
    use crate::wire::opcode::Op;
    use crate::wire::{BthRepr, Ecn, FrameRepr, IpRepr, MacAddr, Psn};

    /// A frame from host `from` (1 or 2: 198.18.0.x) to the other.
    fn frame(from: u8, op: Opcode, qp: u32, psn: u32, f: impl Fn(&mut FrameRepr)) -> Vec<u8> {
        let ip = |n: u8| format!("198.18.0.{n}").parse().unwrap();
        let mut r = FrameRepr::roce(
            MacAddr([2, 0, 0, 0, 0, from]),
            MacAddr([2, 0, 0, 0, 0, 3 - from]),
            IpRepr::v4(ip(from), ip(3 - from), 26, Ecn::Ect0),
            0xC000,
            BthRepr::new(op, qp, Psn::new(psn)),
        );
        f(&mut r);
        let mut b = vec![0u8; 2048];
        let n = r.emit(&[0u8; 256][..payload_len(op)], &mut b).unwrap();
        b.truncate(n);
        b
    }

    fn payload_len(op: Opcode) -> usize {
        match op.info().map(|i| (i.class, i.position)) {
            Some((Class::Send | Class::Write, _)) => 256,
            _ => 0,
        }
    }

    fn ack(s: AckSyndrome) -> impl Fn(&mut FrameRepr) {
        move |r| {
            r.ext.aeth = Some(AethRepr {
                syndrome: s,
                msn: 1,
            })
        }
    }

    const ACK: AckSyndrome = AckSyndrome::Ack { credit: 0x1F };

    fn report(frames: &[Vec<u8>]) -> Report {
        let (mut d, mut a) = (Decoder::new(), Analyzer::new());
        for (i, f) in frames.iter().enumerate() {
            a.push(&d.frame(1_000_000 * i as u64, f.len(), f));
        }
        a.finish()
    }

    #[test]
    fn psns_unwrap_across_the_24_bit_edge() {
        assert_eq!(unwrap(0, 0xFF_FFFF), 0x100_0000);
        assert_eq!(unwrap(0xFF_FFFF, 0x100_0001), 0xFF_FFFF);
        assert_eq!(unwrap(5, 3), 5);
        assert_eq!(wire(0x100_0002), 2);
    }

    #[test]
    fn silences_imply_the_exponent() {
        // 4.096 µs × 2^14 = 67.1 ms (reference §B.9).
        assert_eq!(implied_exponent(67_108_864), Some(14));
        assert_eq!(implied_exponent(70_000_000), Some(14));
        assert_eq!(implied_exponent(8_400_000), Some(11));
        assert_eq!(implied_exponent(1_000), None);
    }

    #[test]
    fn two_qps_between_the_same_hosts_are_two_connections() {
        let send = Opcode::rc(Op::SendOnly);
        let ackop = Opcode::rc(Op::Acknowledge);
        let frames = [
            frame(1, send, 0x20, 100, |_| {}),
            frame(1, send, 0x30, 500, |_| {}),
            // The answers come back to QPs 0x31 and 0x21, in the other
            // order.
            frame(2, ackop, 0x31, 500, ack(ACK)),
            frame(2, ackop, 0x21, 100, ack(ACK)),
        ];
        let r = report(&frames);
        assert_eq!(r.connections.len(), 2, "{r:#?}");
        let c = &r.connections[0];
        assert_eq!((c.ends[0].qpn, c.ends[1].qpn), (Some(0x21), Some(0x20)));
        assert_eq!(c.verdict, Verdict::Clean { messages: 1 });
        let c = &r.connections[1];
        assert_eq!((c.ends[0].qpn, c.ends[1].qpn), (Some(0x31), Some(0x30)));
        assert_eq!(c.sent[0].acked, Some(500));
    }

    #[test]
    fn cnps_and_ce_marks_are_counted_per_direction_and_reads_use_their_psns() {
        let read = Opcode::rc(Op::RdmaReadRequest);
        let only = Opcode::rc(Op::RdmaReadResponseOnly);
        let last = Opcode::rc(Op::RdmaReadResponseLast);
        let first = Opcode::rc(Op::RdmaReadResponseFirst);
        let reth = |len: u32| {
            move |r: &mut FrameRepr| {
                r.ext.reth = Some(RethRepr {
                    va: 0,
                    rkey: 1,
                    dma_len: len,
                })
            }
        };
        let ce = |r: &mut FrameRepr| {
            r.ext.aeth = Some(AethRepr {
                syndrome: ACK,
                msn: 1,
            });
            r.ip.set_ecn(Ecn::Ce);
        };
        let cnp = |r: &mut FrameRepr| {
            r.bth.becn = true;
        };
        let frames = [
            // A READ of 1000 B: no FIRST or MIDDLE packet in the capture,
            // so the path MTU is not known; it may use up to 4 PSNs.
            frame(1, read, 0x20, 10, reth(1000)),
            frame(2, first, 0x21, 10, ce),
            frame(2, last, 0x21, 13, ack(ACK)),
            frame(1, Opcode::CNP, 0x20, 0, cnp),
            frame(1, read, 0x20, 14, reth(8)),
            frame(2, only, 0x21, 14, ack(ACK)),
        ];
        let r = report(&frames);
        assert_eq!(r.connections.len(), 1, "{r:#?}");
        let c = &r.connections[0];
        assert!(c.events.iter().all(|e| !matches!(e.what, What::Gap { .. })));
        assert_eq!(c.sent[0].messages, [("RDMA READ", 2)]);
        assert_eq!(c.sent[0].cnps, 1);
        assert_eq!(c.sent[1].ce_marked, 1);
        assert_eq!((c.sent[1].cnps, c.sent[0].ce_marked), (0, 0));
        let cnps: Vec<usize> = c
            .events
            .iter()
            .filter(|e| e.what == What::Cnp)
            .map(|e| e.end)
            .collect();
        assert_eq!(cnps, [1], "the CNP goes to the responder's end");
        assert_eq!(c.verdict, Verdict::Clean { messages: 2 });
        assert_eq!(c.sent[0].acked, Some(14));
    }

    #[test]
    fn requests_never_answered_are_unanswered() {
        let send = Opcode::rc(Op::SendOnly);
        let r = report(&[
            frame(1, send, 0x20, 7, |_| {}),
            frame(1, send, 0x20, 8, |_| {}),
        ]);
        let c = &r.connections[0];
        assert_eq!(c.ends[1].qpn, Some(0x20));
        assert_eq!(c.ends[0].qpn, None);
        assert_eq!(
            c.verdict,
            Verdict::Unanswered {
                end: 0,
                psn: 7,
                outstanding: 2
            }
        );
        assert!(render::story(&r).contains("198.18.0.1 QP ?"));
    }
}
