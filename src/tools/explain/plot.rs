//! `ferroce explain --plot`: a sequence graph per connection, as
//! Wireshark's TCP stream graphs draw one. One panel per connection,
//! stacked top to bottom in one PNG (at most [`MAX_PANELS`]; the story
//! still tells the rest). In each panel, time (ms since the capture's
//! first frame) runs along x and the PSN, unwrapped and counted from each
//! requester's first, up y: each end's request packets and the PSNs its
//! peer acknowledged, and marks for PSN gaps, NAKs, RNR NAKs, resends,
//! timeouts and CNPs. The font and the PNG encoding are the lab's
//! ([`crate::sim::lab::plot::render_png`]).

use super::{Cause, Connection, Report, What};
use crate::sim::lab::plot::{render_png, PlotError, FAMILY};
use plotters::prelude::*;
use std::path::Path;

/// Width of the image, in pixels.
pub const WIDTH: u32 = 1200;
/// Height of one connection's panel, in pixels.
pub const PANEL_HEIGHT: u32 = 480;
/// The most panels drawn.
pub const MAX_PANELS: usize = 12;

const REQ: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(44, 160, 44)];
const ACK: [RGBColor; 2] = [RGBColor(140, 190, 230), RGBColor(150, 220, 140)];
const NAK: RGBColor = RGBColor(214, 39, 40);
const RESEND: RGBColor = RGBColor(255, 127, 14);
const TIMEOUT: RGBColor = RGBColor(148, 103, 189);
const CNP: RGBColor = RGBColor(227, 119, 194);
const GAP: RGBColor = RGBColor(0, 0, 0);
const RNR: RGBColor = RGBColor(140, 86, 75);

/// Writes the report's sequence graphs to `path` as one PNG.
pub fn write_png(r: &Report, path: &Path) -> Result<(), PlotError> {
    let n = r.connections.len().clamp(1, MAX_PANELS);
    let height = PANEL_HEIGHT * n as u32;
    render_png(path, (WIDTH, height), |buf| {
        let root = BitMapBackend::with_buffer(buf, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(text)?;
        let panels = root.split_evenly((n, 1));
        for (i, (c, area)) in r.connections.iter().zip(&panels).enumerate() {
            panel(area, i + 1, c, r.start_ns)?;
        }
        root.present().map_err(text)
    })
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// The kinds of mark, each with its legend name and colour.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Gap,
    Nak,
    Rnr,
    Resend,
    Timeout,
    Cnp,
}

impl Mark {
    fn of(w: &What) -> Mark {
        match w {
            What::Gap { .. } => Mark::Gap,
            What::Nak { .. } | What::Sack { .. } => Mark::Nak,
            What::RnrNak { .. } => Mark::Rnr,
            What::Resend {
                cause: Cause::Timeout { .. },
                ..
            } => Mark::Timeout,
            What::Resend { .. } => Mark::Resend,
            What::Cnp => Mark::Cnp,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mark::Gap => "PSN gap",
            Mark::Nak => "NAK",
            Mark::Rnr => "RNR NAK",
            Mark::Resend => "resend (NAK, RNR, spurious)",
            Mark::Timeout => "resend after timeout",
            Mark::Cnp => "CNP",
        }
    }
}

fn panel(area: &Area<'_>, n: usize, c: &Connection, start: u64) -> Result<(), String> {
    let x = |t: u64| t.saturating_sub(start) as f64 / 1e6;
    let mut xs = vec![x(c.span_ns.0), x(c.span_ns.1)];
    let mut ys = vec![0.0];
    for t in &c.traces {
        for &(tt, y) in t.requests.iter().chain(&t.acks) {
            xs.push(x(tt));
            ys.push(y as f64);
        }
        ys.extend(t.marks.iter().map(|m| m.1 as f64));
    }
    let (x0, x1) = bounds(&xs);
    let (y0, y1) = bounds(&ys);
    let title = format!(
        "connection {n}: {} <-> {} ({})",
        c.ends[0].ip,
        c.ends[1].ip,
        c.verdict.kind()
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 22))
        .margin(14)
        .margin_right(30)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc("time since the first frame (ms)")
        .y_desc("PSN from the requester's first")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(text)?;
    for (i, t) in c.traces.iter().enumerate() {
        let (me, peer) = (&c.ends[i].ip, &c.ends[1 - i].ip);
        let series = [
            (&t.requests, REQ[i], format!("requests {me} -> {peer}")),
            (
                &t.acks,
                ACK[i],
                format!("ACK / response PSNs {peer} -> {me}"),
            ),
        ];
        for (pts, colour, name) in series {
            if pts.is_empty() {
                continue;
            }
            let pts: Vec<(f64, f64)> = pts.iter().map(|&(tt, y)| (x(tt), y as f64)).collect();
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 2, colour.filled())))
                .map_err(text)?
                .label(name)
                .legend(move |(a, b)| Circle::new((a + 8, b), 4, colour.filled()));
        }
    }
    let marks = |kind: Mark| -> Vec<(f64, f64)> {
        c.traces
            .iter()
            .flat_map(|t| t.marks.iter())
            .filter(|m| Mark::of(&m.2) == kind)
            .map(|m| (x(m.0), m.1 as f64))
            .collect()
    };
    // One series per kind of mark, each its own shape (plotters needs
    // each shape's concrete type, hence the macro).
    macro_rules! marks {
        ($kind:expr, |$p:ident| $shape:expr) => {
            let at = marks($kind);
            if !at.is_empty() {
                chart
                    .draw_series(at.into_iter().map(|$p| $shape))
                    .map_err(text)?
                    .label($kind.name())
                    .legend(move |(a, b)| {
                        let $p = (a + 8, b);
                        $shape
                    });
            }
        };
    }
    marks!(Mark::Gap, |p| Cross::new(p, 7, GAP.stroke_width(1)));
    marks!(Mark::Nak, |p| Cross::new(p, 7, NAK.stroke_width(3)));
    marks!(Mark::Rnr, |p| Circle::new(p, 6, RNR.filled()));
    marks!(Mark::Resend, |p| TriangleMarker::new(p, 7, RESEND.filled()));
    marks!(Mark::Timeout, |p| Circle::new(
        p,
        9,
        TIMEOUT.stroke_width(3)
    ));
    marks!(Mark::Cnp, |p| TriangleMarker::new(
        p,
        5,
        CNP.stroke_width(2)
    ));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font((FAMILY, 13))
        .draw()
        .map_err(text)
}

/// A range around the values with a margin; never empty.
fn bounds(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(0.5);
    (lo - pad, hi + pad)
}
