//! The text of `ferroce explain`: per connection its ends, what each sent,
//! its events in capture order, and a verdict line.

use super::{Cause, Connection, End, Event, Report, Verdict, What};
use crate::wire::ext::rnr_timer_ns;
use crate::wire::Opcode;
use std::fmt::Write as _;

/// The NAK code of an AETH syndrome 0x60..0x64, by name (IBTA §9.7.5.2.4).
pub fn nak_name(syndrome: u8) -> &'static str {
    match syndrome {
        0x60 => "PSN sequence error",
        0x61 => "invalid request",
        0x62 => "remote access error",
        0x63 => "remote operational error",
        0x64 => "invalid RD request",
        _ => "reserved NAK code",
    }
}

/// A duration in ms, with as many decimals as it needs.
fn ms(ns: u64) -> String {
    let v = ns as f64 / 1e6;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 1.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.3} ms")
    }
}

fn end(e: &End) -> String {
    match e.qpn {
        Some(q) => format!("{} QP {q:#08x}", e.ip),
        None => format!("{} QP ?", e.ip),
    }
}

/// "RDMA WRITE (RC_RDMA_WRITE_ONLY)" for a request opcode.
fn request_name(op: Opcode) -> String {
    match op.info() {
        Some(i) => format!("{} ({op})", super::kind_name(i.class)),
        None => format!("opcode {:#04x}", op.0),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The whole story: every connection, then what was not analysed.
pub fn story(r: &Report) -> String {
    let mut s = String::new();
    for (n, c) in r.connections.iter().enumerate() {
        connection(&mut s, n + 1, c, r.start_ns);
    }
    let _ = writeln!(
        s,
        "{} frames: {} RC RoCE, {} other RoCE (UD, UC) not analysed, {} malformed, {} not RoCE (skipped)",
        r.frames, r.rc_frames, r.other_roce, r.malformed, r.skipped
    );
    s
}

fn connection(s: &mut String, n: usize, c: &Connection, start: u64) {
    let frames = c.sent[0].frames + c.sent[1].frames;
    let _ = writeln!(
        s,
        "connection {n}: {} <-> {}, {} over {}",
        end(&c.ends[0]),
        end(&c.ends[1]),
        plural(frames, "frame", "frames"),
        ms(c.span_ns.1 - c.span_ns.0)
    );
    for i in 0..2 {
        direction(s, c, i);
    }
    for e in &c.events {
        if e.what != What::Cnp {
            let _ = writeln!(s, "  {}", event(c, e, start));
        }
    }
    let _ = writeln!(s, "  verdict: {}", verdict(c));
}

/// One line per sending end: its messages, PSNs, acknowledgements, CNPs
/// and CE marks.
fn direction(s: &mut String, c: &Connection, i: usize) {
    let t = &c.sent[i];
    let mut line = format!("  {} -> {}:", c.ends[i].ip, c.ends[1 - i].ip);
    if t.messages.is_empty() {
        line.push_str(" no requests");
    } else {
        let kinds: Vec<String> = t.messages.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let _ = write!(
            line,
            " {} in {}",
            kinds.join(", "),
            plural(t.request_packets, "packet", "packets")
        );
        if t.resent_packets > 0 {
            let _ = write!(line, " ({} resent)", t.resent_packets);
        }
        if t.selective_repeat {
            line.push_str(" by selective repeat");
        }
        if let Some((a, b)) = t.psns {
            let _ = write!(line, ", PSN {a:#08x}..{b:#08x}");
        }
        match t.acked {
            Some(a) => {
                let _ = write!(line, ", acknowledged to {a:#08x}");
            }
            None => line.push_str(", nothing acknowledged"),
        }
    }
    if t.duplicate_acks > 0 {
        let _ = write!(
            line,
            "; {} for duplicate requests",
            plural(t.duplicate_acks, "ACK", "ACKs")
        );
    }
    let _ = write!(line, "; {} sent", plural(t.cnps, "CNP", "CNPs"));
    let _ = write!(line, ", {} CE-marked", t.ce_marked);
    let _ = writeln!(s, "{line}");
}

fn event(c: &Connection, e: &Event, start: u64) -> String {
    // The time as `ferroce decode` shows it: seconds since the first frame.
    let at = format!(
        "{:11.6} frame {:>5}:",
        e.t_ns.saturating_sub(start) as f64 / 1e9,
        e.frame
    );
    let (me, peer) = (&c.ends[e.end].ip, &c.ends[1 - e.end].ip);
    let what = match e.what {
        What::Gap { psn, missing } => format!(
            "PSN gap: {} from {me} never seen from {psn:#08x} (lost before the capture point, or never sent)",
            plural(missing as u64, "request packet", "request packets")
        ),
        What::Nak {
            psn,
            syndrome,
            request,
        } => {
            let to = request.map_or(String::new(), |op| format!(" to {}", request_name(op)));
            format!(
                "{peer} sends NAK {syndrome:#04x} ({}){to} at PSN {psn:#08x}",
                nak_name(syndrome)
            )
        }
        What::Sack {
            psn,
            first,
            last,
            count,
        } => {
            let range = if first == last {
                format!("PSN {first:#08x}")
            } else {
                format!("PSNs {first:#08x}..{last:#08x}")
            };
            format!(
                "{peer} sends {} (selective repeat): everything before PSN {psn:#08x} arrived, and {range} ahead of it",
                plural(count as u64, "SACK NAK", "SACK NAKs")
            )
        }
        What::RnrNak { psn, timer } => format!(
            "{peer} sends RNR NAK at PSN {psn:#08x}, timer code {timer} ({}): no receive posted",
            ms(rnr_timer_ns(timer))
        ),
        What::Resend { psn, packets, cause } => {
            let n = plural(packets as u64, "packet", "packets");
            let why = match cause {
                Cause::Nak => "after the NAK".to_string(),
                Cause::Rnr { wait_ns } => format!("after waiting {} on the RNR NAK", ms(wait_ns)),
                Cause::Timeout {
                    silence_ns,
                    exponent,
                } => {
                    let mut w = format!("after {} of silence: timeout", ms(silence_ns));
                    if let Some(t) = exponent {
                        let _ = write!(
                            w,
                            " (implies ACK timeout exponent {t}: 4.096 µs × 2^{t} = {})",
                            ms(4096u64 << t)
                        );
                    }
                    w
                }
                Cause::Spurious { acked_before_ns } => format!(
                    "{} after its ACK was on the wire: spurious (a duplicate, not loss on the path)",
                    ms(acked_before_ns)
                ),
            };
            if c.sent[e.end].selective_repeat {
                format!("{me} resends {n} from PSN {psn:#08x}, skipping what was SACKed, {why}")
            } else {
                format!("{me} goes back to PSN {psn:#08x} and resends {n} {why}")
            }
        }
        What::Cnp => format!("CNP from {peer} to {me}"),
    };
    format!("{at} {what}")
}

/// The verdict line's text.
pub fn verdict(c: &Connection) -> String {
    let ip = |i: usize| c.ends[i].ip.as_str();
    match c.verdict {
        Verdict::Clean { messages } => format!(
            "clean: {}, every request acknowledged",
            plural(messages, "message", "messages")
        ),
        Verdict::Spurious {
            resends,
            duplicate_acks,
        } => format!(
            "clean, with {}: every request acknowledged; the resent PSNs had already been \
             acknowledged ({} answered the duplicates) — a slow requester or a late ACK, not loss",
            plural(resends as u64, "spurious retransmission", "spurious retransmissions"),
            plural(duplicate_acks, "duplicate ACK", "duplicate ACKs")
        ),
        Verdict::Recovered {
            gaps,
            seq_naks,
            timeouts,
            resends,
        } => {
            let mut parts = Vec::new();
            for (n, one, many) in [
                (gaps, "gap", "gaps"),
                (seq_naks, "NAK sequence error", "NAK sequence errors"),
                (timeouts, "timeout", "timeouts"),
            ] {
                if n > 0 {
                    parts.push(plural(n as u64, one, many));
                }
            }
            let how = if c.sent.iter().any(|t| t.selective_repeat) {
                "selective repeat"
            } else {
                "go-back-N"
            };
            parts.push(format!(
                "{how} ({})",
                plural(resends as u64, "resend", "resends")
            ));
            format!("recovered from loss: {}", parts.join(", "))
        }
        Verdict::Rnr {
            end,
            naks,
            exceeded,
        } => format!(
            "RNR: {} to {}, receiver {} had no receive posted{}",
            plural(naks as u64, "RNR NAK", "RNR NAKs"),
            ip(end),
            ip(1 - end),
            if exceeded {
                "; the capture ends still waiting (RNR retries exhausted?)"
            } else {
                "; recovered once one was posted"
            }
        ),
        Verdict::Unanswered {
            end,
            psn,
            outstanding,
        } => format!(
            "unanswered: the capture ends with {} from {} not acknowledged, from PSN {psn:#08x}, never resent",
            plural(outstanding, "request PSN", "request PSNs"),
            ip(end)
        ),
        Verdict::RetryExceeded {
            end,
            psn,
            tries,
            last_ack,
            silence_ns,
        } => format!(
            "retry exceeded: PSN {psn:#08x} sent {tries} times by {}, never acknowledged; last ACK {}; \
             peer silent {} per try — the peer did not receive it (drop on path) or dropped it \
             (check its out_of_sequence / duplicate_request)",
            ip(end),
            last_ack.map_or("none".to_string(), |a| format!("PSN {a:#08x}")),
            ms(silence_ns)
        ),
        Verdict::NakError {
            end,
            syndrome,
            psn,
            request,
        } => {
            let what = match syndrome {
                0x62 => "remote access error",
                0x63 => "remote operational error",
                _ => "request refused",
            };
            format!(
                "{what}: NAK {syndrome:#04x} ({}) to {} at PSN {psn:#08x} from {}; {}'s QP is in error",
                nak_name(syndrome),
                request.map_or("a request not in the capture".to_string(), request_name),
                ip(end),
                ip(end)
            )
        }
    }
}
