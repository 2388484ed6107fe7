//! PNG charts of a lab's results: lines (a rate or a queue over time, a
//! figure over a swept parameter) and grouped bars (a figure per category,
//! one bar per variant).
//!
//! Charts are drawn into a memory buffer and encoded as PNG; their text
//! uses a TrueType font read at run time (`FERROCE_FONT`, else the first of
//! a few standard paths, such as Debian's `fonts-dejavu-core`). Without a
//! font, writing a chart fails with [`PlotError::Font`], which a caller
//! reports as a warning: the CSV files carry the same data.
//!
//! Bad data never panics: points with a NaN or infinite coordinate (and,
//! on a logarithmic axis, values that are not positive) are left out, axis
//! ranges come from what is left, and a chart with nothing left to draw is
//! still a valid PNG saying "no data".

#![deny(unsafe_code)]
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::register_font;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Width of every chart, in pixels.
pub const WIDTH: u32 = 1200;
/// Height of every chart, in pixels.
pub const HEIGHT: u32 = 700;
/// The environment variable naming the TTF font file for the charts' text.
pub const FONT_ENV: &str = "FERROCE_FONT";
/// Where a font is looked for when `FERROCE_FONT` is not set, in order.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];
/// The most series (lines or bar groups) a chart gives a legend to.
pub const MAX_LEGEND: usize = 16;

/// Size of tick labels, in pixels.
const LABEL_SIZE: i32 = 16;
/// The family name the font is registered under: give it to plotters'
/// text styles in a drawing passed to [`render_png`].
pub const FAMILY: &str = "sans-serif";

/// Why a chart was not written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No font for the chart's text.
    #[error(transparent)]
    Font(#[from] FontError),
    /// Creating or writing the PNG file failed.
    #[error("{path}: {source}")]
    Io {
        /// The PNG file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// Drawing the chart or encoding it as PNG failed.
    #[error("{path}: cannot draw the chart: {msg}")]
    Draw {
        /// The PNG file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
}

/// Why no font is available for the charts' text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FontError {
    /// No candidate font file could be read, and `FERROCE_FONT` is unset or empty.
    #[error(
        "no font for the plots' text (looked for {tried}); install fonts-dejavu-core \
         or set {FONT_ENV} to a TrueType font file"
    )]
    NotFound {
        /// The files looked for, comma separated.
        tried: String,
    },
    /// The file `FERROCE_FONT` names cannot be read.
    #[error("{FONT_ENV}={path}: {msg}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        msg: String,
    },
    /// The file is not a TrueType or OpenType font.
    #[error("{path}: not a TrueType or OpenType font")]
    Invalid {
        /// The file.
        path: PathBuf,
    },
}

/// One line of a [`LinePlot`]: its legend name and its (x, y) points, in
/// the order they are joined.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// Its (x, y) points, joined in this order.
    pub points: Vec<(f64, f64)>,
}

/// Lines over a shared x axis: a rate or a queue depth over time (up to
/// dozens of lines), or a figure over a swept parameter (`markers` on).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinePlot {
    /// The chart's title.
    pub title: String,
    /// The x axis' label.
    pub x_label: String,
    /// The y axis' label.
    pub y_label: String,
    /// The lines, in legend order.
    pub series: Vec<Series>,
    /// A logarithmic y axis (values that are not positive are left out).
    pub log_y: bool,
    /// A logarithmic x axis (likewise).
    pub log_x: bool,
    /// Marks every point with a dot (for a few points per line, such as a
    /// sweep). A line of a single point is always marked.
    pub markers: bool,
}

/// Grouped bars: one group of bars per category on the x axis, one bar per
/// group in each (say a percentile per size bucket, one bar per variant).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BarPlot {
    /// The chart's title.
    pub title: String,
    /// The x axis' label.
    pub x_label: String,
    /// The y axis' label.
    pub y_label: String,
    /// The categories, left to right along the x axis.
    pub categories: Vec<String>,
    /// (legend name, one value per category). A missing or NaN value
    /// leaves its bar out.
    pub groups: Vec<(String, Vec<f64>)>,
    /// A logarithmic y axis: bars rise from the axis' bottom.
    pub log_y: bool,
}

impl LinePlot {
    /// Writes the chart as a [`WIDTH`] x [`HEIGHT`] PNG file at `path`.
    pub fn write_png(&self, path: &Path) -> Result<(), PlotError> {
        render(path, |buf| self.draw(buf))
    }

    fn draw(&self, buf: &mut [u8]) -> Result<(), String> {
        let root = BitMapBackend::with_buffer(buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(text)?;
        let lines: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .filter_map(|&(x, y)| Some((y_value(x, self.log_x)?, y_value(y, self.log_y)?)))
                    .collect()
            })
            .collect();
        let xs = lines.iter().flatten().map(|p| p.0);
        let ys = lines.iter().flatten().map(|p| p.1);
        let (Some(xr), Some(yr)) = (span(xs), span(ys)) else {
            return no_data(&root, &self.title);
        };
        let x = if self.log_x {
            Axis::log(xr)
        } else {
            Axis::linear(xr, if self.markers { 0.03 } else { 0.0 }, false)
        };
        let y = if self.log_y {
            Axis::log(yr)
        } else {
            Axis::linear(yr, 0.05, true)
        };
        let mut chart = chart(&root, &self.title, &x, &y)?;
        let (x_fmt, y_fmt) = (|v: &f64| x.label(*v), |v: &f64| y.label(*v));
        let labels = (self.x_label.as_str(), self.y_label.as_str());
        mesh(&mut chart, labels, &x_fmt, &y_fmt, true)?;
        let legend =
            self.series.len() <= MAX_LEGEND && self.series.iter().any(|s| !s.name.is_empty());
        let width = if self.series.len() <= MAX_LEGEND {
            2
        } else {
            1
        };
        for (i, (s, pts)) in self.series.iter().zip(&lines).enumerate() {
            let c = colour(i);
            let drawn = chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(width)))
                .map_err(text)?;
            if legend && !s.name.is_empty() {
                drawn.label(s.name.as_str()).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 24, y)], c.stroke_width(3))
                });
            }
            if self.markers || pts.len() == 1 {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(text)?;
            }
        }
        if legend {
            legend_box(&mut chart)?;
        }
        root.present().map_err(text)
    }
}

impl BarPlot {
    /// Writes the chart as a [`WIDTH`] x [`HEIGHT`] PNG file at `path`.
    pub fn write_png(&self, path: &Path) -> Result<(), PlotError> {
        render(path, |buf| self.draw(buf))
    }

    fn draw(&self, buf: &mut [u8]) -> Result<(), String> {
        let root = BitMapBackend::with_buffer(buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(text)?;
        let n = self.categories.len();
        // (group, category, value) of every bar that is drawn.
        let bars: Vec<(usize, usize, f64)> = self
            .groups
            .iter()
            .enumerate()
            .flat_map(|(g, (_, vals))| {
                vals.iter()
                    .take(n)
                    .enumerate()
                    .filter_map(move |(c, &v)| Some((g, c, y_value(v, self.log_y)?)))
            })
            .collect();
        let Some(yr) = span(bars.iter().map(|b| b.2)) else {
            return no_data(&root, &self.title);
        };
        let y = if self.log_y {
            // Half a decade below the smallest bar at least, so that it shows.
            Axis::log((yr.0 - 0.5, yr.1))
        } else {
            // Bars rise from zero, which the axis must show.
            Axis::linear((yr.0.min(0.0), yr.1.max(0.0)), 0.05, true)
        };
        let x = Axis {
            lo: 0.0,
            hi: n as f64,
            ticks: (0..n).map(|i| i as f64 + 0.5).collect(),
            log: false,
        };
        let mut chart = chart(&root, &self.title, &x, &y)?;
        let names = &self.categories;
        let cat = |v: &f64| {
            let i = v.floor();
            if i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        };
        let y_fmt = |v: &f64| y.label(*v);
        let labels = (self.x_label.as_str(), self.y_label.as_str());
        mesh(&mut chart, labels, &cat, &y_fmt, false)?;
        let k = self.groups.len().max(1) as f64;
        let (pad, slot) = (0.12, 0.76 / k);
        let base = if self.log_y { y.lo } else { 0.0 };
        for (g, (name, _)) in self.groups.iter().enumerate() {
            let c = colour(g);
            let x0 = pad + slot * g as f64;
            let drawn = chart
                .draw_series(bars.iter().filter(|b| b.0 == g).map(|&(_, ci, v)| {
                    let left = ci as f64 + x0;
                    Rectangle::new([(left, base), (left + slot * 0.92, v)], c.filled())
                }))
                .map_err(text)?;
            if self.groups.len() <= MAX_LEGEND && !name.is_empty() {
                drawn.label(name.as_str()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled())
                });
            }
        }
        if self.groups.len() <= MAX_LEGEND && self.groups.iter().any(|g| !g.0.is_empty()) {
            legend_box(&mut chart)?;
        }
        root.present().map_err(text)
    }
}

type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<Axis, Axis>>;

fn chart<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    title: &str,
    x: &Axis,
    y: &Axis,
) -> Result<Chart<'a, 'b>, String> {
    ChartBuilder::on(root)
        .caption(title, (FAMILY, 26))
        .margin(18)
        .margin_right(40)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d(x.clone(), y.clone())
        .map_err(text)
}

/// Draws the grid, the tick labels (by `x_fmt` and `y_fmt`) and the
/// axis names; vertical grid lines only with `x_mesh`.
fn mesh<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    (x_label, y_label): (&str, &str),
    x_fmt: &dyn Fn(&f64) -> String,
    y_fmt: &dyn Fn(&f64) -> String,
    x_mesh: bool,
) -> Result<(), String> {
    let mut m = chart.configure_mesh();
    if !x_mesh {
        m.disable_x_mesh();
    }
    m.x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(x_fmt)
        .y_label_formatter(y_fmt)
        .label_style((FAMILY, LABEL_SIZE))
        // The glyph renderer draws text about a quarter of its size above
        // the anchor it is given: bring the y labels level with their ticks.
        .y_label_offset(LABEL_SIZE / 4)
        .axis_desc_style((FAMILY, 20))
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(text)
}

fn legend_box<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font((FAMILY, 15))
        .draw()
        .map_err(text)
}

/// A chart with nothing to draw: its title and "no data".
fn no_data(
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
) -> Result<(), String> {
    let area = root
        .margin(18, 18, 18, 18)
        .titled(title, (FAMILY, 26))
        .map_err(text)?;
    let (w, h) = area.dim_in_pixel();
    let style = TextStyle::from((FAMILY, 30).into_font())
        .color(&RGBColor(120, 120, 120))
        .pos(plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Center,
        ));
    area.draw_text("no data", &style, (w as i32 / 2, h as i32 / 2))
        .map_err(text)?;
    root.present().map_err(text)
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The value a chart plots for `v`: none when it cannot be drawn, its
/// decimal logarithm on a logarithmic axis.
fn y_value(v: f64, log: bool) -> Option<f64> {
    match (v.is_finite(), log) {
        (false, _) => None,
        (true, false) => Some(v),
        (true, true) => (v > 0.0).then(|| v.log10()),
    }
}

/// The smallest and largest of `vals`, if any.
fn span(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    vals.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// One axis: its range in plotted units, where its labelled ticks sit, and
/// whether plotted values are decimal logarithms.
#[derive(Debug, Clone, PartialEq)]
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    log: bool,
}

impl Axis {
    /// A linear axis over `(lo, hi)` widened by `margin` of its span on
    /// each side; `snap` extends it to whole tick steps (and keeps a range
    /// of values that are all zero or more starting at zero).
    fn linear((lo, hi): (f64, f64), margin: f64, snap: bool) -> Axis {
        // A span that stays finite (values past this are drawn off the edge).
        let (lo, hi) = (lo.max(-1e300), hi.min(1e300));
        let (mut lo, mut hi) = if hi - lo > f64::EPSILON * lo.abs().max(hi.abs()) {
            let m = (hi - lo) * margin;
            let nonneg = lo >= 0.0;
            let lo = if snap && nonneg { 0.0 } else { lo - m };
            (lo, hi + m)
        } else {
            // One value: a range around it.
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            if snap && lo >= 0.0 {
                (0.0, lo + d.max(lo))
            } else {
                (lo - d, lo + d)
            }
        };
        let step = nice_step((hi - lo) / 8.0);
        if snap {
            lo = (lo / step).floor() * step;
            hi = (hi / step).ceil() * step;
        }
        let first = (lo / step).ceil() as i64;
        let last = (hi / step).floor() as i64;
        let ticks = (first..=last.min(first + 40))
            .map(|i| i as f64 * step)
            .collect();
        Axis {
            lo,
            hi,
            ticks,
            log: false,
        }
    }

    /// A logarithmic axis over decimal logarithms `(lo, hi)`: whole
    /// decades, with ticks at 1, 2 and 5 times a power of ten when few.
    fn log((lo, hi): (f64, f64)) -> Axis {
        let lo = lo.floor();
        let hi = hi.ceil().max(lo + 1.0);
        let decades = (hi - lo) as i64;
        let mults: &[f64] = if decades <= 3 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        let every = (decades / 10 + 1).max(1);
        let ticks = (0..=decades)
            .filter(|d| d % every == 0)
            .flat_map(|d| mults.iter().map(move |m| lo + d as f64 + m.log10()))
            .filter(|&t| t <= hi + 1e-9)
            .collect();
        Axis {
            lo,
            hi,
            ticks,
            log: true,
        }
    }

    /// The label of a tick at plotted value `v`.
    fn label(&self, v: f64) -> String {
        if self.log {
            number(10f64.powf(v))
        } else {
            number(v)
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (from, to): (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        if span.is_nan() || span <= 0.0 {
            return from + (to - from) / 2;
        }
        // Far outside values land just off the drawing area (clipped).
        let f = ((v - self.lo) / span).clamp(-1.0, 2.0);
        from + (f * f64::from(to - from)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// A step of 1, 2 or 5 times a power of ten, no smaller than `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// A short label for `v`: at most four significant digits, no trailing
/// zeros, an exponent for very large or small magnitudes.
fn number(v: f64) -> String {
    let a = v.abs();
    if a < 1e-12 {
        return "0".into();
    }
    if !(1e-3..1e6).contains(&a) {
        let s = format!("{v:.3e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{e}", trim(m));
    }
    let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
    trim(&format!("{v:.decimals$}")).to_string()
}

fn trim(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The colour of series `i`: ten distinct colours, then hues spread by the
/// golden ratio in three lightnesses, so that dozens of lines differ.
fn colour(i: usize) -> RGBColor {
    const FIRST: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    if let Some(&(r, g, b)) = FIRST.get(i) {
        return RGBColor(r, g, b);
    }
    let h = ((i as f64) * 0.618_033_988_75).fract();
    let l = [0.42, 0.28, 0.58][i % 3];
    hsl(h, 0.75, l)
}

fn hsl(h: f64, s: f64, l: f64) -> RGBColor {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h * 6.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let u = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    RGBColor(u(r), u(g), u(b))
}

/// Draws with `draw` into an RGB buffer and writes it to `path` as PNG.
fn render(
    path: &Path,
    draw: impl FnOnce(&mut [u8]) -> Result<(), String>,
) -> Result<(), PlotError> {
    render_png(path, (WIDTH, HEIGHT), draw)
}

/// Finds the font (once per process), lets `draw` draw into a `width` x
/// `height` RGB buffer (with plotters' `BitMapBackend::with_buffer`, text
/// in [`FAMILY`]) and writes it to `path` as PNG: how another tool's chart
/// shares the lab's font and encoding.
pub fn render_png(
    path: &Path,
    (width, height): (u32, u32),
    draw: impl FnOnce(&mut [u8]) -> Result<(), String>,
) -> Result<(), PlotError> {
    ensure_font()?;
    let mut buf = vec![0u8; (width * height * 3) as usize];
    draw(&mut buf).map_err(|msg| PlotError::Draw {
        path: path.to_path_buf(),
        msg,
    })?;
    let io = |source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut out = BufWriter::new(File::create(path).map_err(io)?);
    encode(&mut out, (width, height), &buf).map_err(|e| match e {
        png::EncodingError::IoError(e) => io(e),
        e => PlotError::Draw {
            path: path.to_path_buf(),
            msg: e.to_string(),
        },
    })?;
    out.flush().map_err(io)
}

fn encode(
    out: &mut impl Write,
    (width, height): (u32, u32),
    rgb: &[u8],
) -> Result<(), png::EncodingError> {
    let mut enc = png::Encoder::new(out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut w = enc.write_header()?;
    w.write_image_data(rgb)?;
    w.finish()
}

/// Finds and registers the charts' font, once per process.
fn ensure_font() -> Result<(), FontError> {
    static FONT: OnceLock<Result<(), FontError>> = OnceLock::new();
    FONT.get_or_init(|| {
        let env = std::env::var_os(FONT_ENV);
        let paths: Vec<&Path> = FONT_PATHS.iter().map(Path::new).collect();
        let (path, bytes) = find_font(env.as_deref(), &paths)?;
        // The font table keeps its fonts for the life of the process; this
        // runs at most once.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font(FAMILY, FontStyle::Normal, bytes).map_err(|_| FontError::Invalid { path })
    })
    .clone()
}

/// Reads the font file: `env` (the value of `FERROCE_FONT`) when set, else
/// the first of `candidates` that can be read. Returns its path and bytes.
pub fn find_font(
    env: Option<&OsStr>,
    candidates: &[&Path],
) -> Result<(PathBuf, Vec<u8>), FontError> {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(p);
        let bytes = std::fs::read(&path).map_err(|e| FontError::Unreadable {
            path: path.clone(),
            msg: e.to_string(),
        })?;
        return checked(path, bytes);
    }
    for p in candidates {
        if let Ok(bytes) = std::fs::read(p) {
            return checked(p.to_path_buf(), bytes);
        }
    }
    let tried = candidates
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Err(FontError::NotFound { tried })
}

/// `bytes` if they start like a TrueType or OpenType font.
fn checked(path: PathBuf, bytes: Vec<u8>) -> Result<(PathBuf, Vec<u8>), FontError> {
    let magic: &[&[u8; 4]] = &[b"\x00\x01\x00\x00", b"OTTO", b"true", b"ttcf"];
    if bytes.len() >= 12 && magic.iter().any(|m| bytes.starts_with(*m)) {
        Ok((path, bytes))
    } else {
        Err(FontError::Invalid { path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

    fn assert_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.starts_with(PNG_SIGNATURE), "{}", path.display());
        // An IHDR chunk of the chart's size follows the signature.
        assert_eq!(&bytes[12..16], b"IHDR");
        assert_eq!(&bytes[16..20], &WIDTH.to_be_bytes());
        assert_eq!(&bytes[20..24], &HEIGHT.to_be_bytes());
        assert!(
            bytes.len() > 2_000 && bytes.len() < 3_000_000,
            "{}",
            bytes.len()
        );
    }

    fn flows(n: usize, points: usize) -> Vec<Series> {
        (0..n)
            .map(|f| Series {
                name: format!("flow {f}"),
                points: (0..points)
                    .map(|i| {
                        let t = i as f64 * 0.01;
                        (
                            t,
                            25.0 + 20.0 * ((t + f as f64) * 0.7).sin() / (1.0 + f as f64 * 0.1),
                        )
                    })
                    .collect(),
            })
            .collect()
    }

    fn line(series: Vec<Series>) -> LinePlot {
        LinePlot {
            title: "rate per flow".into(),
            x_label: "time (ms)".into(),
            y_label: "rate (Gbit/s)".into(),
            series,
            ..Default::default()
        }
    }

    #[test]
    fn line_charts_are_pngs() {
        let dir = tempfile::tempdir().unwrap();
        for (name, plot) in [
            ("few.png", line(flows(4, 500))),
            ("many.png", line(flows(64, 200))),
            (
                "sweep.png",
                LinePlot {
                    markers: true,
                    log_y: true,
                    ..line(vec![
                        Series {
                            name: "dcqcn".into(),
                            points: vec![(2.0, 1.5), (4.0, 3.0), (8.0, 9.0), (16.0, 40.0)],
                        },
                        Series {
                            name: "none".into(),
                            points: vec![(2.0, 1.1), (4.0, 12.0), (8.0, 300.0), (16.0, 2e4)],
                        },
                    ])
                },
            ),
        ] {
            let p = dir.path().join(name);
            plot.write_png(&p).unwrap();
            assert_png(&p);
        }
    }

    #[test]
    fn bar_charts_are_pngs() {
        let dir = tempfile::tempdir().unwrap();
        let cats: Vec<String> = ["<4K", "4K-64K", "64K-1M", ">1M"].map(String::from).into();
        for log_y in [false, true] {
            let plot = BarPlot {
                title: "FCT slowdown p99".into(),
                x_label: "message size".into(),
                y_label: "slowdown".into(),
                categories: cats.clone(),
                groups: vec![
                    ("dcqcn".into(), vec![1.2, 3.5, 8.0, 2.0]),
                    ("none".into(), vec![4.0, 30.0, f64::NAN]),
                    ("fixed".into(), vec![0.0, -1.0, 5.0, 1e3, 7.0]),
                ],
                log_y,
            };
            let p = dir.path().join(format!("bars-{log_y}.png"));
            plot.write_png(&p).unwrap();
            assert_png(&p);
        }
    }

    #[test]
    fn degenerate_data_still_gives_a_chart() {
        let dir = tempfile::tempdir().unwrap();
        let s = |points: Vec<(f64, f64)>| Series {
            name: "s".into(),
            points,
        };
        let cases: Vec<LinePlot> = vec![
            line(vec![]),
            line(vec![s(vec![]), s(vec![])]),
            line(vec![s(vec![(1.0, 2.0)])]),
            line(vec![s(vec![(0.0, 0.0), (1.0, 0.0), (2.0, 0.0)])]),
            line(vec![s(vec![(5.0, 1.0), (5.0, 3.0)])]),
            line(vec![s(vec![
                (f64::NAN, 1.0),
                (1.0, f64::INFINITY),
                (2.0, f64::NAN),
            ])]),
            line(vec![s(vec![(0.0, -5.0), (1.0, -5.0)])]),
            line(vec![s(vec![(0.0, 1e-300), (1e300, 1e300)])]),
            line(vec![s(vec![(0.0, f64::MIN_POSITIVE), (1.0, f64::MAX)])]),
            line(vec![s(vec![(f64::MIN, f64::MIN), (f64::MAX, f64::MAX)])]),
            line(vec![s(vec![(1e15, 3.0), (1e15 + 1.0, 3.0 + 1e-15)])]),
            LinePlot {
                log_y: true,
                ..line(vec![s(vec![(0.0, 0.0), (1.0, -3.0)])])
            },
            LinePlot {
                log_y: true,
                ..line(vec![s(vec![(0.0, 7.0)])])
            },
        ];
        for (i, plot) in cases.iter().enumerate() {
            let p = dir.path().join(format!("line{i}.png"));
            plot.write_png(&p)
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
            assert_png(&p);
        }
        let bars = [
            BarPlot::default(),
            BarPlot {
                categories: vec!["a".into()],
                ..Default::default()
            },
            BarPlot {
                categories: vec!["a".into(), "b".into()],
                groups: vec![("g".into(), vec![0.0, 0.0])],
                ..Default::default()
            },
            BarPlot {
                categories: vec!["a".into()],
                groups: vec![("g".into(), vec![0.0])],
                log_y: true,
                ..Default::default()
            },
        ];
        for (i, plot) in bars.iter().enumerate() {
            let p = dir.path().join(format!("bar{i}.png"));
            plot.write_png(&p)
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
            assert_png(&p);
        }
    }

    #[test]
    fn an_unwritable_path_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("x.png");
        let e = line(flows(1, 10)).write_png(&p).unwrap_err();
        assert!(matches!(e, PlotError::Io { .. }), "{e}");
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn a_missing_font_is_an_error_that_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.ttf");
        let b = dir.path().join("b.ttf");
        let e = find_font(None, &[&a, &b]).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, FontError::NotFound { .. }));
        assert!(msg.contains("a.ttf") && msg.contains("b.ttf"), "{msg}");
        assert!(
            msg.contains("fonts-dejavu-core") && msg.contains(FONT_ENV),
            "{msg}"
        );

        // The variable, when set, is the only place looked at.
        let e = find_font(Some(a.as_os_str()), &[]).unwrap_err();
        assert!(matches!(e, FontError::Unreadable { .. }), "{e}");
        assert!(e.to_string().contains("a.ttf"), "{e}");

        std::fs::write(&b, b"not a font at all").unwrap();
        let e = find_font(Some(b.as_os_str()), &[]).unwrap_err();
        assert_eq!(e, FontError::Invalid { path: b.clone() });
        let e = find_font(None, &[&a, &b]).unwrap_err();
        assert_eq!(e, FontError::Invalid { path: b });
    }

    #[test]
    fn a_font_is_found_in_the_first_readable_place() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.ttf");
        let mut bytes = b"\x00\x01\x00\x00".to_vec();
        bytes.resize(64, 0);
        std::fs::write(&good, &bytes).unwrap();
        let missing = dir.path().join("missing.ttf");
        let (p, b) = find_font(None, &[&missing, &good]).unwrap();
        assert_eq!((p, b), (good.clone(), bytes.clone()));
        // An empty variable counts as unset.
        assert_eq!(find_font(Some(OsStr::new("")), &[&good]).unwrap().0, good);
    }

    #[test]
    fn axes_have_round_ticks_inside_their_range() {
        let a = Axis::linear((0.3, 97.0), 0.05, true);
        assert_eq!(a.lo, 0.0);
        assert!(a.hi >= 97.0 * 1.05 && a.hi <= 150.0, "{a:?}");
        assert_eq!((a.ticks.first(), a.ticks.last()), (Some(&0.0), Some(&a.hi)));
        assert!(a.ticks.iter().all(|&t| t >= a.lo && t <= a.hi));
        let a = Axis::linear((-2.0, 2.0), 0.05, true);
        assert!(a.lo < -2.0 && a.hi > 2.0);
        let a = Axis::linear((3.0, 3.0), 0.0, false);
        assert!(a.lo < 3.0 && a.hi > 3.0 && !a.ticks.is_empty());
        let a = Axis::linear((0.0, 0.0), 0.05, true);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let a = Axis::linear((f64::MIN, f64::MAX), 0.05, true);
        assert!(a.lo.is_finite() && a.hi.is_finite() && a.lo < a.hi, "{a:?}");
        assert!(!a.ticks.is_empty() && a.ticks.len() <= 41);

        let l = Axis::log((0.1f64.log10(), 40f64.log10()));
        assert_eq!((l.lo, l.hi), (-1.0, 2.0));
        let labels: Vec<String> = l.ticks.iter().map(|&t| l.label(t)).collect();
        assert_eq!(
            labels,
            ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50", "100"]
        );
        let wide = Axis::log((-3.0, 12.0));
        assert!(wide.ticks.len() <= 16);
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(25.0), "25");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(1.0 / 3.0), "0.3333");
        assert_eq!(number(1234.5678), "1235");
        assert_eq!(number(-40.0), "-40");
        assert_eq!(number(2_500_000.0), "2.5e6");
        assert_eq!(number(0.0001), "1e-4");
    }

    #[test]
    fn colours_are_distinct() {
        let c: Vec<RGBColor> = (0..64).map(colour).collect();
        for i in 0..c.len() {
            for j in 0..i {
                assert_ne!(c[i], c[j], "{i} {j}");
            }
        }
    }
}
