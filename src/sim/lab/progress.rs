//! A progress line on stderr for simulated runs that take a while: how far
//! virtual time got, the wall time spent, and events per second.
//!
//! [`Progress::update`] is meant to be called very often (every simulator
//! step): it only counts, and reads the wall clock once every so many calls,
//! a stride it adapts so that the clock is read about every few
//! milliseconds. Nothing is shown during the first [`QUIET`] of wall time,
//! so short runs stay silent. Then, on a terminal, one line is redrawn in
//! place a few times a second; elsewhere (a log file, CI) a plain line is
//! printed each time another tenth of the virtual time is done.
//! [`Progress::finish`] (or dropping it) ends the line. A
//! [`Progress::disabled`] one never prints.
//!
//! Several runs at once on a terminal share a [`Board`]: one combined
//! line (runs done, and each run in progress with its percentage) redrawn
//! in place, and a line for each run as it ends. Off a terminal each run
//! prints its own lines, which carry its name.

#![deny(unsafe_code)]
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Wall time before anything is shown.
pub const QUIET: Duration = Duration::from_secs(2);
/// Least wall time between two redraws of the terminal line.
const REDRAW: Duration = Duration::from_millis(250);
/// Aimed-at wall time between two clock readings.
const CHECK: Duration = Duration::from_millis(4);
/// The most calls between two clock readings.
const MAX_STRIDE: u32 = 1 << 16;
/// Width of the bar, in characters.
const BAR: usize = 20;
/// Runs in progress a [`Board`]'s line names at most.
const BOARD_RUNS: usize = 4;

/// How the progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Never.
    Off,
    /// One line redrawn in place (a terminal).
    Redraw,
    /// A line per tenth of the virtual time.
    Lines,
}

/// The progress of one run.
#[derive(Debug)]
pub struct Progress {
    mode: Mode,
    label: String,
    total_ns: u64,
    start: Instant,
    last_check: Instant,
    last_draw: Option<Duration>,
    calls: u32,
    stride: u32,
    now_ns: u64,
    events: Option<u64>,
    /// Characters of the line last drawn in place.
    drawn: usize,
    /// Tenths of the virtual time already reported ([`Mode::Lines`]).
    tenths: u64,
    shown: bool,
    finished: bool,
    /// The board it reports to, and its slot there.
    board: Option<(Arc<Board>, usize)>,
}

impl Progress {
    /// Progress of a run of `total_virtual_ns` of virtual time, named
    /// `label`, shown on stderr: redrawn in place when stderr is a
    /// terminal, a line per tenth otherwise.
    pub fn new(label: impl Into<String>, total_virtual_ns: u64) -> Progress {
        let mode = if std::io::stderr().is_terminal() {
            Mode::Redraw
        } else {
            Mode::Lines
        };
        Progress::with_mode(label, total_virtual_ns, mode)
    }

    /// A progress that never shows anything (tests, `--quiet`).
    pub fn disabled() -> Progress {
        Progress::with_mode("", 0, Mode::Off)
    }

    /// Progress shown as `mode` says.
    pub fn with_mode(label: impl Into<String>, total_virtual_ns: u64, mode: Mode) -> Progress {
        let now = Instant::now();
        Progress {
            mode,
            label: label.into(),
            total_ns: total_virtual_ns,
            start: now,
            last_check: now,
            last_draw: None,
            calls: 0,
            stride: 1,
            now_ns: 0,
            events: None,
            drawn: 0,
            tenths: 0,
            shown: false,
            finished: false,
            board: None,
        }
    }

    /// How the progress is shown.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Virtual time reached `now_ns`.
    #[inline]
    pub fn update(&mut self, now_ns: u64) {
        if self.mode == Mode::Off {
            return;
        }
        self.now_ns = now_ns;
        self.calls += 1;
        if self.calls >= self.stride {
            self.check();
        }
    }

    /// Virtual time reached `now_ns` after `events` simulator events in
    /// all (shown as events per second of wall time).
    #[inline]
    pub fn update_events(&mut self, now_ns: u64, events: u64) {
        if self.mode == Mode::Off {
            return;
        }
        self.events = Some(events);
        self.update(now_ns);
    }

    /// Ends the progress line, if one was shown, with the final figures.
    pub fn finish(&mut self) {
        if self.mode == Mode::Off || self.finished {
            return;
        }
        self.finished = true;
        let wall = self.start.elapsed();
        if let Some((board, slot)) = self.board.take() {
            let last = (wall >= QUIET).then(|| format!("{} done", self.figures(wall, false)));
            board.done(slot, last);
            return;
        }
        if let Some(out) = self.end(wall) {
            emit(&out);
        }
    }

    #[cold]
    fn check(&mut self) {
        self.calls = 0;
        let now = Instant::now();
        let since = now.duration_since(self.last_check);
        self.last_check = now;
        if since < CHECK / 2 {
            self.stride = (self.stride * 2).min(MAX_STRIDE);
        } else if since > CHECK * 4 {
            self.stride = (self.stride / 2).max(1);
        }
        if let Some((board, slot)) = &self.board {
            let frac = fraction(self.now_ns, self.total_ns);
            board.report(*slot, &self.label, frac, now);
            return;
        }
        if let Some(out) = self.step(now.duration_since(self.start)) {
            emit(&out);
        }
    }

    /// What to print, if anything, at `wall` time since the start.
    fn step(&mut self, wall: Duration) -> Option<String> {
        if self.finished || wall < QUIET {
            return None;
        }
        match self.mode {
            Mode::Off => None,
            Mode::Redraw => {
                if self.last_draw.is_some_and(|t| wall < t + REDRAW) {
                    return None;
                }
                self.last_draw = Some(wall);
                Some(self.redraw(wall, true))
            }
            Mode::Lines => {
                let tenths = tenths(self.now_ns, self.total_ns);
                if tenths <= self.tenths {
                    return None;
                }
                self.tenths = tenths;
                self.shown = true;
                let s = self.figures(wall, false);
                Some(format!("{s}\n"))
            }
        }
    }

    /// What ends the output at `wall`: the final figures, if anything was
    /// shown (or the run took longer than [`QUIET`]).
    fn end(&mut self, wall: Duration) -> Option<String> {
        match self.mode {
            Mode::Off => None,
            Mode::Redraw if self.shown => Some(format!("{}\n", self.redraw(wall, false))),
            Mode::Lines if self.shown || wall >= QUIET => {
                self.shown = true;
                let s = self.figures(wall, false);
                Some(format!("{s} done\n"))
            }
            _ => None,
        }
    }

    /// `\r`, the line, and spaces over what is left of the previous one.
    fn redraw(&mut self, wall: Duration, bar: bool) -> String {
        self.shown = true;
        let s = self.figures(wall, bar);
        let n = s.chars().count();
        let pad = self.drawn.saturating_sub(n);
        self.drawn = n;
        format!("\r{s}{}", " ".repeat(pad))
    }

    fn figures(&self, wall: Duration, bar: bool) -> String {
        let line = Line {
            label: &self.label,
            now_ns: self.now_ns,
            total_ns: self.total_ns,
            wall,
            events: self.events,
        };
        line.render(bar)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn emit(s: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(s.as_bytes());
    let _ = e.flush();
}

/// The share of `total` that `now` reached (0 to 1); `None` when `total`
/// is 0.
fn fraction(now: u64, total: u64) -> Option<f64> {
    (total > 0).then(|| (now as f64 / total as f64).clamp(0.0, 1.0))
}

/// The progress of several runs at once on a terminal, as one line
/// redrawn in place: `[3/12 done]  pfc-size_kb=16 42%  dcqcn-size_kb=64 17%
/// wall 12.3 s`. Each run reports to it through a [`Progress`] from
/// [`Board::progress`]; a run that ends after [`QUIET`] gets a line of
/// its own above it. Nothing is drawn in the first [`QUIET`] of wall time.
#[derive(Debug)]
pub struct Board {
    start: Instant,
    state: Mutex<BoardState>,
}

#[derive(Debug, Default)]
struct BoardState {
    runs: usize,
    done: usize,
    /// The runs in progress by slot: name and share done.
    active: BTreeMap<usize, (String, Option<f64>)>,
    last_draw: Option<Instant>,
    /// Characters of the line last drawn.
    drawn: usize,
}

impl Board {
    /// A board for `runs` runs.
    pub fn new(runs: usize) -> Arc<Board> {
        Arc::new(Board {
            start: Instant::now(),
            state: Mutex::new(BoardState {
                runs,
                ..BoardState::default()
            }),
        })
    }

    /// The progress of run `label` (of `total_virtual_ns`), shown on this
    /// board in `slot` (its place in the plan: runs are listed in that
    /// order).
    pub fn progress(
        self: &Arc<Board>,
        slot: usize,
        label: impl Into<String>,
        total_virtual_ns: u64,
    ) -> Progress {
        let label = label.into();
        self.lock().active.insert(slot, (label.clone(), Some(0.0)));
        let mut p = Progress::with_mode(label, total_virtual_ns, Mode::Redraw);
        p.board = Some((Arc::clone(self), slot));
        p
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BoardState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `slot` got to `frac`; redraws the line when it is due.
    fn report(&self, slot: usize, label: &str, frac: Option<f64>, now: Instant) {
        let mut st = self.lock();
        st.active.insert(slot, (label.to_string(), frac));
        let wall = now.duration_since(self.start);
        if wall < QUIET || st.last_draw.is_some_and(|t| now < t + REDRAW) {
            return;
        }
        st.last_draw = Some(now);
        let out = st.redraw(None, wall);
        drop(st);
        emit(&out);
    }

    /// Run `slot` ended; `last`: its final line, to print above the board.
    fn done(&self, slot: usize, last: Option<String>) {
        let mut st = self.lock();
        st.active.remove(&slot);
        st.done += 1;
        let wall = self.start.elapsed();
        if wall < QUIET && last.is_none() {
            return;
        }
        st.last_draw = Some(Instant::now());
        let out = st.redraw(last.as_deref(), wall);
        drop(st);
        emit(&out);
    }
}

impl BoardState {
    /// `\r`, `above` (if any) on a line of its own, then the board's line
    /// (none once every run is done), padded over the previous one.
    fn redraw(&mut self, above: Option<&str>, wall: Duration) -> String {
        let mut out = String::from("\r");
        let mut pad = self.drawn;
        if let Some(a) = above {
            out.push_str(a);
            out.push_str(&" ".repeat(pad.saturating_sub(a.chars().count())));
            out.push('\n');
            pad = 0;
        }
        if self.done < self.runs {
            let line = board_line(self.done, self.runs, &self.active, wall);
            let n = line.chars().count();
            out.push_str(&line);
            out.push_str(&" ".repeat(pad.saturating_sub(n)));
            self.drawn = n;
        } else {
            out.push_str(&" ".repeat(pad));
            out.push('\r');
            self.drawn = 0;
        }
        out
    }
}

/// The board's line: `[3/12 done]`, the first [`BOARD_RUNS`] runs in
/// progress with their percentage, how many more, and the wall time.
fn board_line(
    done: usize,
    runs: usize,
    active: &BTreeMap<usize, (String, Option<f64>)>,
    wall: Duration,
) -> String {
    let mut s = format!("[{done}/{runs} done]");
    for (name, frac) in active.values().take(BOARD_RUNS) {
        s.push_str("  ");
        s.push_str(name);
        if let Some(f) = frac {
            s.push_str(&format!(" {:.0}%", (f * 100.0).floor()));
        }
    }
    if active.len() > BOARD_RUNS {
        s.push_str(&format!("  +{} more", active.len() - BOARD_RUNS));
    }
    s.push_str("  wall ");
    s.push_str(&wall_time(wall));
    s
}

/// Whole tenths of `total` that `now` reached (0 to 10).
fn tenths(now: u64, total: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    (u128::from(now.min(total)) * 10 / u128::from(total)) as u64
}

/// The figures of one progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line<'a> {
    /// What is running (a run's name); empty: nothing shown.
    pub label: &'a str,
    /// The virtual time reached, nanoseconds.
    pub now_ns: u64,
    /// The virtual time to reach, nanoseconds; 0: unknown (no bar, no percentage).
    pub total_ns: u64,
    /// The wall-clock time so far.
    pub wall: Duration,
    /// Simulator events so far, shown per wall second; `None`: not shown.
    pub events: Option<u64>,
}

impl Line<'_> {
    /// The line, with a bar of the virtual time done when `bar`:
    /// `incast [#####.....]  42%  4.20 ms of 10.00 ms  wall 12.3 s  left 17 s  1.52 M events/s`
    pub fn render(&self, bar: bool) -> String {
        let mut s = String::with_capacity(120);
        if !self.label.is_empty() {
            s.push_str(self.label);
            s.push(' ');
        }
        let frac = if self.total_ns == 0 {
            None
        } else {
            Some((self.now_ns as f64 / self.total_ns as f64).clamp(0.0, 1.0))
        };
        if let (true, Some(f)) = (bar, frac) {
            let full = ((f * BAR as f64) as usize).min(BAR);
            s.push('[');
            s.extend(std::iter::repeat('#').take(full));
            s.extend(std::iter::repeat('.').take(BAR - full));
            s.push_str("] ");
        }
        if let Some(f) = frac {
            s.push_str(&format!("{:3.0}%  ", (f * 100.0).floor()));
        }
        s.push_str(&virtual_time(self.now_ns));
        if self.total_ns > 0 {
            s.push_str(" of ");
            s.push_str(&virtual_time(self.total_ns));
        }
        s.push_str(" virtual  wall ");
        s.push_str(&wall_time(self.wall));
        if let Some(f) = frac.filter(|f| (0.01..1.0).contains(f)) {
            let left = self.wall.as_secs_f64() * (1.0 - f) / f;
            s.push_str("  left ");
            s.push_str(&wall_time(Duration::from_secs_f64(left.min(1e9))));
        }
        if let Some(ev) = self.events {
            let secs = self.wall.as_secs_f64();
            if secs > 0.0 {
                s.push_str("  ");
                s.push_str(&si(ev as f64 / secs));
                s.push_str("events/s");
            }
        }
        s
    }
}

/// Virtual time in a unit that suits it: `750 ns`, `12.50 us`, `4.20 ms`,
/// `1.500 s`.
fn virtual_time(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.3} s", v / 1e9)
    }
}

/// Wall time: `3.4 s`, `2 min 05 s`, `1 h 02 min`.
fn wall_time(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{:.1} s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, (s % 3600) / 60)
    }
}

/// `v` with an SI prefix and a trailing space: `950 `, `1.52 k`, `3.07 M`.
fn si(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.0} ")
    } else if v < 1e6 {
        format!("{:.2} k", v / 1e3)
    } else if v < 1e9 {
        format!("{:.2} M", v / 1e6)
    } else {
        format!("{:.2} G", v / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn the_line_shows_the_figures() {
        let l = Line {
            label: "incast-16",
            now_ns: 4_200_000,
            total_ns: 10 * MS,
            wall: secs(12.3),
            events: Some(18_696_000),
        };
        assert_eq!(
            l.render(true),
            "incast-16 [########............]  42%  4.20 ms of 10.00 ms virtual  wall 12.3 s  \
             left 17.0 s  1.52 Mevents/s"
        );
        assert_eq!(
            l.render(false),
            "incast-16  42%  4.20 ms of 10.00 ms virtual  wall 12.3 s  left 17.0 s  1.52 Mevents/s"
        );
        let done = Line {
            now_ns: 10 * MS,
            events: None,
            wall: secs(125.0),
            ..l
        };
        assert_eq!(
            done.render(true),
            "incast-16 [####################] 100%  10.00 ms of 10.00 ms virtual  wall 2 min 05 s"
        );
        // No total: no percentage, bar nor estimate; past the total: 100%.
        let open = Line {
            total_ns: 0,
            label: "",
            ..l
        };
        assert_eq!(
            open.render(true),
            "4.20 ms virtual  wall 12.3 s  1.52 Mevents/s"
        );
        let past = Line {
            now_ns: 30 * MS,
            events: None,
            ..l
        };
        assert!(past.render(true).contains("] 100%  30.00 ms of 10.00 ms"));
        // Nothing done yet: no estimate, no division by zero.
        let start = Line {
            now_ns: 0,
            wall: Duration::ZERO,
            ..l
        };
        assert_eq!(
            start.render(false),
            "incast-16   0%  0 ns of 10.00 ms virtual  wall 0.0 s"
        );
    }

    #[test]
    fn units_suit_the_magnitude() {
        assert_eq!(virtual_time(750), "750 ns");
        assert_eq!(virtual_time(12_500), "12.50 us");
        assert_eq!(virtual_time(1_500_000_000), "1.500 s");
        assert_eq!(wall_time(secs(3.45)), "3.5 s");
        assert_eq!(wall_time(secs(3725.0)), "1 h 02 min");
        assert_eq!(si(950.0), "950 ");
        assert_eq!(si(1520.0), "1.52 k");
        assert_eq!(si(4.5e9), "4.50 G");
    }

    #[test]
    fn nothing_is_shown_in_the_first_seconds() {
        for mode in [Mode::Redraw, Mode::Lines] {
            let mut p = Progress::with_mode("r", 10 * MS, mode);
            p.now_ns = 9 * MS;
            assert_eq!(p.step(secs(0.5)), None);
            assert_eq!(p.step(secs(1.9)), None);
            // A run over before the quiet time ends silently.
            assert_eq!(p.end(secs(1.9)), None);
            p.finished = true;
        }
    }

    #[test]
    fn a_terminal_line_is_redrawn_a_few_times_a_second() {
        let mut p = Progress::with_mode("r", 10 * MS, Mode::Redraw);
        p.now_ns = 5 * MS;
        let first = p.step(secs(2.0)).unwrap();
        assert!(
            first.starts_with("\r") && !first.contains('\n'),
            "{first:?}"
        );
        assert_eq!(p.step(secs(2.1)), None);
        p.now_ns = 6 * MS;
        let second = p.step(secs(2.3)).unwrap();
        assert!(second.contains("60%"), "{second:?}");
        // A shorter line covers what is left of the longer one.
        p.label.clear();
        let third = p.step(secs(2.6)).unwrap();
        assert_eq!(third.chars().count(), second.chars().count());
        let end = p.end(secs(3.0)).unwrap();
        assert!(end.starts_with('\r') && end.ends_with('\n'), "{end:?}");
        assert!(!end.contains('['), "the final line has no bar: {end:?}");
        p.finished = true;
    }

    #[test]
    fn a_log_gets_a_line_per_tenth() {
        let mut p = Progress::with_mode("r", 10 * MS, Mode::Lines);
        let mut lines = Vec::new();
        for i in 0..=100u64 {
            p.now_ns = i * MS / 10;
            // The quiet time ends at 34% of the virtual time.
            if let Some(s) = p.step(secs(i as f64 / 17.0)) {
                lines.push(s);
            }
        }
        lines.extend(p.end(secs(6.0)));
        p.finished = true;
        // 34%, then each tenth from 40% to 100%, then the end.
        assert_eq!(lines.len(), 9, "{lines:?}");
        assert!(lines[0].contains(" 34% "), "{lines:?}");
        assert!(lines[1].contains(" 40% "), "{lines:?}");
        assert!(lines[7].contains("100% "), "{lines:?}");
        assert!(lines[8].ends_with(" done\n"), "{lines:?}");
        assert!(lines.iter().all(|l| !l.contains('\r') && l.ends_with('\n')));
    }

    #[test]
    fn disabled_never_shows_anything() {
        let mut p = Progress::disabled();
        assert_eq!(p.mode(), Mode::Off);
        p.now_ns = 1;
        assert_eq!(p.step(secs(100.0)), None);
        assert_eq!(p.end(secs(100.0)), None);
        // update is a no-op: not even the clock stride moves.
        for i in 0..10_000 {
            p.update_events(i, i);
        }
        assert_eq!((p.calls, p.stride, p.now_ns, p.events), (0, 1, 1, None));
        p.finish();
        assert!(!p.shown);
    }

    #[test]
    fn a_board_shows_the_runs_in_progress_on_one_line() {
        let mut active = BTreeMap::new();
        active.insert(4, ("pfc-size_kb=16".to_string(), Some(0.429)));
        active.insert(2, ("dcqcn-size_kb=64".to_string(), Some(0.17)));
        assert_eq!(
            board_line(3, 12, &active, secs(12.3)),
            "[3/12 done]  dcqcn-size_kb=64 17%  pfc-size_kb=16 42%  wall 12.3 s"
        );
        for i in 10..15 {
            active.insert(i, (format!("r{i}"), None));
        }
        assert_eq!(
            board_line(3, 12, &active, secs(1.0)),
            "[3/12 done]  dcqcn-size_kb=64 17%  pfc-size_kb=16 42%  r10  r11  +3 more  wall 1.0 s"
        );
    }

    #[test]
    fn a_run_that_ends_gets_its_line_above_the_board() {
        let mut st = BoardState {
            runs: 2,
            ..BoardState::default()
        };
        st.active.insert(0, ("a".into(), Some(0.5)));
        st.active.insert(1, ("b".into(), Some(0.25)));
        let first = st.redraw(None, secs(3.0));
        assert_eq!(first, "\r[0/2 done]  a 50%  b 25%  wall 3.0 s");
        st.active.remove(&0);
        st.done = 1;
        let second = st.redraw(Some("a 100%  done"), secs(4.0));
        let lines: Vec<&str> = second.split('\n').collect();
        assert_eq!(lines.len(), 2, "{second:?}");
        // The ended run's line covers the longer board line it replaces.
        assert_eq!(lines[0].chars().count(), first.chars().count());
        assert_eq!(lines[1], "[1/2 done]  b 25%  wall 4.0 s");
        st.active.clear();
        st.done = 2;
        // The last run over: the board's line is wiped, nothing is left on it.
        let last = st.redraw(None, secs(5.0));
        assert!(last.trim().is_empty() && !last.contains('\n'), "{last:?}");
    }

    #[test]
    fn the_clock_is_read_less_often_when_calls_are_quick() {
        // A quick run ends well inside the quiet time: nothing is printed.
        let mut p = Progress::with_mode("r", u64::MAX, Mode::Lines);
        for i in 0..200_000 {
            p.update(i);
        }
        assert!(p.stride > 64, "stride {}", p.stride);
        assert!(!p.shown);
        p.finished = true;
    }
}
