//! Link test: one end sends a numbered stream of probe frames, the other
//! checks each byte and answers with its own probe of the same number, which
//! the first end checks in turn. It proves a datapath (port, queues, mbufs,
//! the wire between) end to end, and is what `ferroce demo` and
//! `ferroce linktest` run (`run`: the command on a DPDK port).

#[cfg(feature = "dpdk")]
pub mod run;

use super::probe::{Probe, ProbeError};
use crate::backend::poll::{Handler, Io};
use crate::backend::{Backend, FrameBuf};
use crate::time::Instant;
use crate::wire::{Frame, IpRepr, Opcode};

/// What one end saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkReport {
    /// Probe frames sent (by the answerer: answers sent).
    pub sent: u64,
    /// Probe frames received and matched byte for byte.
    pub verified: u64,
    /// Probe frames that arrived wrong (length, bytes or order).
    pub mismatched: u64,
    /// Frames that were not probes of this stream (e.g. the kernel's IPv6
    /// neighbour discovery on a veth); ignored.
    pub foreign: u64,
    /// The first few mismatches, for the error message.
    pub errors: Vec<ProbeError>,
}

impl LinkReport {
    fn mismatch(&mut self, e: ProbeError) {
        self.mismatched += 1;
        if self.errors.len() < 5 {
            self.errors.push(e);
        }
    }
}

/// Whether a frame is a probe for queue pair `dest_qp`: a RoCE v2 UD
/// SEND_ONLY over IPv4 to that QP. Anything else on the wire is foreign.
fn probe_for(frame: &[u8], dest_qp: u32) -> Option<Frame<'_>> {
    Frame::parse(frame).ok().filter(|f| {
        f.opcode() == Opcode(0x64) && f.dest_qp() == dest_qp && matches!(f.ip(), IpRepr::V4(_))
    })
}

/// The addresses of a stream are learned from its first frame: a sender may
/// not know the answerer's MAC (it then sends to broadcast), and the
/// answerer need not be told the sender's addresses. After the first frame
/// every byte is checked.
fn learn_macs(p: &mut Probe, f: &Frame<'_>) {
    let eth = f.eth();
    p.dst_mac = eth.dst.0;
    p.src_mac = eth.src.0;
}

fn learn_ips(p: &mut Probe, f: &Frame<'_>) {
    if let IpRepr::V4(ip) = f.ip() {
        p.src_ip = ip.src;
        p.dst_ip = ip.dst;
    }
}

/// The sending end: keeps at most `window` probes unanswered.
pub struct Sender {
    probe: Probe,
    answer: Probe,
    learned: bool,
    count: u64,
    window: u64,
    scratch: Vec<u8>,
    /// What this end saw so far.
    pub report: LinkReport,
}

impl Sender {
    /// Sends `probe`'s stream; answers are expected on the reversed stream
    /// (from whichever MAC the first answer comes from, to ours).
    pub fn new(probe: Probe, count: u64, window: u64) -> Sender {
        let answer = probe.reversed();
        Sender {
            probe,
            answer,
            learned: false,
            count,
            window: window.max(1),
            scratch: vec![0; answer.frame_len()],
            report: LinkReport::default(),
        }
    }

    /// Every probe sent and answered (rightly or wrongly).
    pub fn done(&self) -> bool {
        self.report.verified + self.report.mismatched >= self.count
    }
}

impl<B: Backend> Handler<B> for Sender {
    fn on_frame(&mut self, _now: Instant, frame: B::Buf, _io: &mut Io<'_, B>) -> bool {
        let f = frame.data();
        let Some(parsed) = probe_for(f, self.answer.dest_qp) else {
            self.report.foreign += 1;
            return false;
        };
        if !self.learned {
            learn_macs(&mut self.answer, &parsed);
            self.learned = true;
        }
        let seq = self.report.verified + self.report.mismatched;
        match self.answer.check(seq, f, &mut self.scratch) {
            Ok(()) => self.report.verified += 1,
            Err(e) => self.report.mismatch(e),
        }
        true
    }

    fn on_poll(&mut self, _now: Instant, io: &mut Io<'_, B>) {
        let answered = self.report.verified + self.report.mismatched;
        let len = self.probe.frame_len();
        while self.report.sent < self.count
            && self.report.sent - answered < self.window
            && io.tx_room() > 0
        {
            let Some(mut m) = io.alloc() else { return };
            let Some(buf) = m.append(len) else { return };
            if self.probe.build(self.report.sent, buf).is_err() {
                return;
            }
            if io.send(m).is_err() {
                return;
            }
            self.report.sent += 1;
        }
    }
}

/// The answering end: checks each probe of the stream in order and answers
/// with the reversed stream's probe of the same number.
pub struct Responder {
    expect: Probe,
    answer: Probe,
    our_mac: [u8; 6],
    learned: bool,
    count: u64,
    scratch: Vec<u8>,
    /// What this end saw so far.
    pub report: LinkReport,
}

impl Responder {
    /// `stream` is the stream the sender sends (its MACs are learned from
    /// the first probe); answers leave from `our_mac`.
    pub fn new(stream: Probe, our_mac: [u8; 6], count: u64) -> Responder {
        Responder {
            expect: stream,
            answer: stream.reversed(),
            our_mac,
            learned: false,
            count,
            scratch: vec![0; stream.frame_len()],
            report: LinkReport::default(),
        }
    }

    /// Every probe received and answered.
    pub fn done(&self) -> bool {
        self.report.sent >= self.count
    }
}

impl<B: Backend> Handler<B> for Responder {
    fn on_frame(&mut self, _now: Instant, frame: B::Buf, io: &mut Io<'_, B>) -> bool {
        let f = frame.data();
        let Some(parsed) = probe_for(f, self.expect.dest_qp) else {
            self.report.foreign += 1;
            return false;
        };
        if !self.learned {
            learn_macs(&mut self.expect, &parsed);
            learn_ips(&mut self.expect, &parsed);
            self.answer = Probe {
                src_mac: self.our_mac,
                dst_mac: self.expect.src_mac,
                ..self.expect.reversed()
            };
            self.learned = true;
        }
        let seq = self.report.verified + self.report.mismatched;
        match self.expect.check(seq, f, &mut self.scratch) {
            Ok(()) => self.report.verified += 1,
            Err(e) => self.report.mismatch(e),
        }
        drop(frame);
        // Answer from a fresh buffer (the sender checks our own build).
        let Some(mut m) = io.alloc() else { return true };
        let Some(buf) = m.append(self.answer.frame_len()) else {
            return true;
        };
        if self.answer.build(seq, buf).is_err() {
            return true;
        }
        if io.send_or_drop(m) {
            self.report.sent += 1;
        }
        true
    }

    fn on_poll(&mut self, _now: Instant, _io: &mut Io<'_, B>) {}
}

/// The options of `ferroce linktest` (those given override the config's
/// `[linktest]`). The flags that take the config's value by default have
/// no help text of their own.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct LinktestOpts {
    /// The `[[port]]` to use.
    #[arg(long, help = "The [[port]] to use")]
    pub port: String,
    /// Which end this is.
    #[arg(long, value_enum, help = None::<&str>)]
    pub role: Role,
    /// Probes to send (`linktest.count`, default 100,000).
    #[arg(long, help = None::<&str>)]
    pub count: Option<u64>,
    /// Payload bytes per probe (`linktest.payload`, default 1024).
    #[arg(long, help = None::<&str>)]
    pub payload: Option<usize>,
    /// Probes in flight at most (`linktest.window`, default 64).
    #[arg(long, help = None::<&str>)]
    pub window: Option<u64>,
    /// Give up after this many ms (`linktest.timeout_ms`, default 20,000).
    #[arg(long, help = None::<&str>)]
    pub timeout_ms: Option<u64>,
    /// The peer's IPv4 address (sender; default: ours with the last
    /// byte + 1). The answerer learns the addresses from the first probe.
    #[arg(long)]
    pub peer_ip: Option<core::net::Ipv4Addr>,
    /// The peer's MAC (default: broadcast).
    #[arg(long)]
    pub peer_mac: Option<String>,
}

/// Which end of a link test a process is (`--role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Send probes and check the answers.
    Send,
    /// Check probes and answer each.
    Answer,
}

/// A MAC address given as six hex bytes separated by ':'.
pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    use anyhow::{bail, Context as _};
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("MAC {s:?} is not six hex bytes separated by ':'");
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("MAC {s:?}"))?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::loopback;
    use crate::backend::poll::PollLoop;
    use std::net::Ipv4Addr;

    #[test]
    fn a_stream_is_verified_both_ways_over_loopback() {
        let probe = Probe {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(198, 18, 0, 1),
            dst_ip: Ipv4Addr::new(198, 18, 0, 2),
            src_qp: 0x100,
            dest_qp: 0x200,
            payload: 1024,
        };
        let (a, b) = loopback::pair(128, 2048);
        let (mut la, mut lb) = (PollLoop::new(a), PollLoop::new(b));
        let mut s = Sender::new(probe, 500, 64);
        let mut r = Responder::new(probe, [2, 0, 0, 0, 0, 9], 500);
        for _ in 0..100_000 {
            la.poll(Instant::ZERO, &mut s);
            lb.poll(Instant::ZERO, &mut r);
            if s.done() {
                break;
            }
        }
        assert_eq!(
            (s.report.sent, s.report.verified, s.report.mismatched),
            (500, 500, 0)
        );
        assert_eq!((r.report.verified, r.report.sent), (500, 500));
        assert_eq!(
            s.answer.src_mac,
            [2, 0, 0, 0, 0, 9],
            "the answerer's MAC was learned"
        );
    }
}
