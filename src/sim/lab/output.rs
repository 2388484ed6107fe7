//! The results folder of one lab invocation: a folder per run holding CSV
//! time series, and a summary table written as aligned text, CSV and JSON.
//!
//! CSV files follow RFC 4180: comma separated, a header line first, fields
//! holding a comma, a quote or a line break quoted (quotes doubled). Numbers
//! are written in full precision (the shortest text that reads back as the
//! same `f64`); NaN and infinities as `NaN`, `inf` and `-inf`.
//!
//! Every error names the path it concerns.

#![deny(unsafe_code)]
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::fmt::{self, Display, Write as _};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Why results could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file or folder could not be created or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The results path exists and is not a folder.
    #[error("{path}: exists and is not a folder")]
    NotAFolder {
        /// The path given.
        path: PathBuf,
    },
    /// A run name that cannot be a folder name.
    #[error(
        "{name:?}: not usable as a folder name (empty, '.', '..', or holding '/', '\\\\' or NUL)"
    )]
    BadName {
        /// The name.
        name: String,
    },
    /// A CSV row whose width is not the header's.
    #[error("{path}: a row of {got} values in a file of {want} columns")]
    RowWidth {
        /// The CSV file.
        path: PathBuf,
        /// The values in the row.
        got: usize,
        /// The columns of the header.
        want: usize,
    },
    /// Two columns of a summary table have one name.
    #[error("summary table: column {name:?} appears twice")]
    DuplicateColumn {
        /// The name.
        name: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The results folder of one lab invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Results {
    dir: PathBuf,
}

impl Results {
    /// Creates `dir` (and its parents) if it does not exist; a folder that
    /// exists is used as it is (files in it are overwritten as runs write
    /// them). A path that names something other than a folder is refused.
    pub fn create(dir: &Path) -> Result<Results, OutputError> {
        if dir.exists() && !dir.is_dir() {
            return Err(OutputError::NotAFolder {
                path: dir.to_path_buf(),
            });
        }
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        Ok(Results {
            dir: dir.to_path_buf(),
        })
    }

    /// The results folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of run `name` inside the results folder, created if need
    /// be. `name` must be a single path component.
    pub fn run_dir(&self, name: &str) -> Result<PathBuf, OutputError> {
        let bad =
            name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']);
        if bad {
            return Err(OutputError::BadName { name: name.into() });
        }
        let dir = self.dir.join(name);
        if dir.exists() && !dir.is_dir() {
            return Err(OutputError::NotAFolder { path: dir });
        }
        std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        Ok(dir)
    }
}

/// A CSV file written a row at a time through a buffer: a time series, one
/// column per quantity. Call [`CsvSeries::finish`] to see write errors
/// (dropping it flushes too, but silently).
#[derive(Debug)]
pub struct CsvSeries {
    path: PathBuf,
    out: BufWriter<File>,
    columns: usize,
    rows: u64,
    line: String,
}

impl CsvSeries {
    /// Creates (or truncates) the file at `path` and writes `header`.
    pub fn create(path: &Path, header: &[&str]) -> Result<CsvSeries, OutputError> {
        let file = File::create(path).map_err(io_error(path))?;
        let mut s = CsvSeries {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(64 * 1024, file),
            columns: header.len(),
            rows: 0,
            line: String::with_capacity(256),
        };
        for (i, h) in header.iter().enumerate() {
            if i > 0 {
                s.line.push(',');
            }
            push_field(&mut s.line, h);
        }
        s.end_line()?;
        Ok(s)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a row of numbers, one per column.
    pub fn row(&mut self, values: &[f64]) -> Result<(), OutputError> {
        self.check_width(values.len())?;
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.line.push(',');
            }
            push_f64(&mut self.line, *v);
        }
        self.end_line()
    }

    /// Writes a row of values of any kind (text is quoted as needed).
    pub fn row_display(&mut self, values: &[&dyn Display]) -> Result<(), OutputError> {
        self.check_width(values.len())?;
        let mut field = String::new();
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.line.push(',');
            }
            field.clear();
            let _ = write!(field, "{v}");
            push_field(&mut self.line, &field);
        }
        self.end_line()
    }

    /// Rows written so far (the header not counted).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Flushes the file; returns the rows written.
    pub fn finish(mut self) -> Result<u64, OutputError> {
        self.out.flush().map_err(io_error(&self.path))?;
        Ok(self.rows)
    }

    fn check_width(&self, got: usize) -> Result<(), OutputError> {
        if got == self.columns {
            Ok(())
        } else {
            Err(OutputError::RowWidth {
                path: self.path.clone(),
                got,
                want: self.columns,
            })
        }
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        self.line.push('\n');
        let r = self.out.write_all(self.line.as_bytes());
        self.line.clear();
        r.map_err(io_error(&self.path))?;
        self.rows += 1;
        Ok(())
    }
}

/// Appends `s` as one CSV field, quoted when it must be.
fn push_field(line: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        line.push('"');
        for c in s.chars() {
            if c == '"' {
                line.push('"');
            }
            line.push(c);
        }
        line.push('"');
    } else {
        line.push_str(s);
    }
}

/// Appends `v` in the shortest text that reads back as the same value,
/// with an exponent only for very large or small magnitudes.
fn push_f64(line: &mut String, v: f64) {
    let a = v.abs();
    // Whole numbers (times in ns, bytes, counts: most of a series) are
    // written as integers, the same text as `{v}` gives and several times
    // faster than the shortest-float search.
    if (1.0..1e16).contains(&a) && v.fract() == 0.0 {
        let _ = write!(line, "{}", v as i64);
        return;
    }
    let _ = if a == 0.0 || !a.is_finite() || (1e-5..1e16).contains(&a) {
        write!(line, "{v}")
    } else {
        write!(line, "{v:e}")
    };
}

/// One column of a [`SummaryTable`]: its name and unit (empty for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name: the header's start, and the key in JSON.
    pub name: String,
    /// Its unit, shown after the name in parentheses; empty: none.
    pub unit: String,
}

impl Column {
    /// A column of `name` in `unit` (empty for none).
    pub fn new(name: impl Into<String>, unit: impl Into<String>) -> Column {
        Column {
            name: name.into(),
            unit: unit.into(),
        }
    }

    /// The header: the name, then the unit in parentheses if any.
    pub fn header(&self) -> String {
        if self.unit.is_empty() {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, self.unit)
        }
    }
}

/// One value of a [`SummaryTable`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Text, shown as it is.
    Text(String),
    /// An integer.
    Int(i64),
    /// A number and the decimals it is shown with in the text table (CSV
    /// and JSON carry it in full). NaN shows as `-` and is empty in CSV,
    /// `null` in JSON.
    Float(f64, usize),
}

impl Cell {
    fn is_number(&self) -> bool {
        !matches!(self, Cell::Text(_))
    }

    /// The cell as shown in the text table.
    fn shown(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Float(v, _) if v.is_nan() => "-".into(),
            Cell::Float(v, d) => format!("{v:.*}", (*d).min(17)),
        }
    }

    /// The cell as a CSV field (unquoted).
    fn plain(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Float(v, _) if v.is_nan() => String::new(),
            Cell::Float(v, _) => {
                let mut s = String::new();
                push_f64(&mut s, *v);
                s
            }
        }
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Text(s.into())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}

impl From<i64> for Cell {
    fn from(v: i64) -> Cell {
        Cell::Int(v)
    }
}

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cell::Text(t) => s.serialize_str(t),
            Cell::Int(i) => s.serialize_i64(*i),
            // JSON has no NaN or infinity.
            Cell::Float(v, _) if !v.is_finite() => s.serialize_none(),
            Cell::Float(v, _) => s.serialize_f64(*v),
        }
    }
}

/// A table of results, one row per run: shown as aligned text (numbers to
/// the right), and written as `summary.txt`, `summary.csv` and
/// `summary.json` (an array of objects keyed by column name, in column
/// order). A row shorter than the columns has blanks (JSON: `null`) at its
/// end; cells past the last column are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SummaryTable {
    /// The columns, in order.
    pub columns: Vec<Column>,
    /// One row per run, cells in column order.
    pub rows: Vec<Vec<Cell>>,
}

/// The files [`SummaryTable::write`] writes.
pub const SUMMARY_FILES: [&str; 3] = ["summary.txt", "summary.csv", "summary.json"];

impl SummaryTable {
    /// Writes `summary.txt`, `summary.csv` and `summary.json` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), OutputError> {
        self.check()?;
        let [txt, csv, json] = SUMMARY_FILES.map(|f| dir.join(f));
        std::fs::write(&txt, self.to_string()).map_err(io_error(&txt))?;
        std::fs::write(&csv, self.to_csv()).map_err(io_error(&csv))?;
        let mut text =
            serde_json::to_string_pretty(&JsonRows(self)).map_err(|e| OutputError::Io {
                path: json.clone(),
                source: e.into(),
            })?;
        text.push('\n');
        std::fs::write(&json, text).map_err(io_error(&json))
    }

    /// The table as CSV: a header of names with units, then plain values.
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        for (i, c) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_field(&mut out, &c.header());
        }
        out.push('\n');
        for row in &self.rows {
            for i in 0..self.columns.len() {
                if i > 0 {
                    out.push(',');
                }
                push_field(&mut out, &row.get(i).map(Cell::plain).unwrap_or_default());
            }
            out.push('\n');
        }
        out
    }

    fn check(&self) -> Result<(), OutputError> {
        for (i, c) in self.columns.iter().enumerate() {
            if self.columns[..i].iter().any(|d| d.name == c.name) {
                return Err(OutputError::DuplicateColumn {
                    name: c.name.clone(),
                });
            }
        }
        Ok(())
    }
}

impl Display for SummaryTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.columns.len();
        let headers: Vec<String> = self.columns.iter().map(Column::header).collect();
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                (0..n)
                    .map(|i| r.get(i).map(Cell::shown).unwrap_or_default())
                    .collect()
            })
            .collect();
        let width = |i: usize| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([headers[i].chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..n).map(width).collect();
        // A column of numbers has its header to the right too.
        let numeric: Vec<bool> = (0..n)
            .map(|i| {
                let mut vals = self.rows.iter().filter_map(|r| r.get(i));
                vals.clone().next().is_some() && vals.all(Cell::is_number)
            })
            .collect();
        let line = |f: &mut fmt::Formatter<'_>,
                    fields: &mut dyn Iterator<Item = (String, bool)>| {
            let mut s = String::new();
            for (i, (text, right)) in fields.enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = widths[i].saturating_sub(text.chars().count());
                if right {
                    s.extend(std::iter::repeat(' ').take(pad));
                    s.push_str(&text);
                } else {
                    s.push_str(&text);
                    s.extend(std::iter::repeat(' ').take(pad));
                }
            }
            writeln!(f, "{}", s.trim_end())
        };
        line(f, &mut headers.iter().cloned().zip(numeric.iter().copied()))?;
        line(f, &mut widths.iter().map(|w| ("-".repeat(*w), false)))?;
        for (r, row) in self.rows.iter().zip(&cells) {
            let right = (0..n).map(|i| r.get(i).is_some_and(Cell::is_number));
            line(f, &mut row.iter().cloned().zip(right))?;
        }
        Ok(())
    }
}

/// The table's rows as JSON objects, keys in column order.
struct JsonRows<'a>(&'a SummaryTable);

impl Serialize for JsonRows<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.rows.iter().map(|row| JsonRow(&self.0.columns, row)))
    }
}

struct JsonRow<'a>(&'a [Column], &'a [Cell]);

impl Serialize for JsonRow<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (i, c) in self.0.iter().enumerate() {
            m.serialize_entry(&c.name, &self.1.get(i))?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> SummaryTable {
        SummaryTable {
            columns: vec![
                Column::new("run", ""),
                Column::new("flows", ""),
                Column::new("goodput", "Gbit/s"),
                Column::new("p99 slowdown", ""),
            ],
            rows: vec![
                vec![
                    "dcqcn".into(),
                    Cell::Int(16),
                    Cell::Float(94.123456, 2),
                    Cell::Float(3.5, 1),
                ],
                vec![
                    "none, no pfc".into(),
                    Cell::Int(128),
                    Cell::Float(7.0, 2),
                    Cell::Float(f64::NAN, 1),
                ],
                vec!["short".into()],
            ],
        }
    }

    #[test]
    fn text_table_is_aligned_with_numbers_to_the_right() {
        let text = table().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "run           flows  goodput (Gbit/s)  p99 slowdown",
                "------------  -----  ----------------  ------------",
                "dcqcn            16             94.12           3.5",
                "none, no pfc    128              7.00             -",
                "short",
            ]
        );
    }

    #[test]
    fn text_table_counts_characters_not_bytes() {
        let t = SummaryTable {
            columns: vec![Column::new("name", ""), Column::new("rtt", "µs")],
            rows: vec![
                vec!["α".into(), Cell::Float(1.5, 1)],
                vec!["ab".into(), Cell::Int(10)],
            ],
        };
        let s = t.to_string();
        let widths: Vec<usize> = s.lines().map(|l| l.chars().count()).collect();
        assert_eq!(widths, [14, 14, 14, 14], "{s}");
    }

    #[test]
    fn summary_csv_quotes_what_it_must() {
        let mut t = table();
        t.rows.push(vec![
            r#"say "hi""#.into(),
            Cell::Int(-1),
            Cell::Float(0.1, 0),
        ]);
        let csv = t.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines,
            [
                "run,flows,goodput (Gbit/s),p99 slowdown",
                "dcqcn,16,94.123456,3.5",
                "\"none, no pfc\",128,7,",
                "short,,,",
                r#""say ""hi""",-1,0.1,"#,
            ]
        );
    }

    #[test]
    fn summary_json_is_an_array_of_objects_in_column_order() {
        let dir = tempfile::tempdir().unwrap();
        table().write(dir.path()).unwrap();
        for f in SUMMARY_FILES {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        let text = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0],
            serde_json::json!({"run": "dcqcn", "flows": 16, "goodput": 94.123456, "p99 slowdown": 3.5})
        );
        assert_eq!(rows[1]["p99 slowdown"], serde_json::Value::Null);
        assert_eq!(rows[2]["flows"], serde_json::Value::Null);
        // Keys in column order, not sorted.
        let first = text.find("\"run\"").unwrap();
        assert!(first < text.find("\"flows\"").unwrap());
        assert!(text.find("\"goodput\"").unwrap() < text.find("\"p99 slowdown\"").unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("summary.txt")).unwrap(),
            table().to_string()
        );
    }

    #[test]
    fn a_column_named_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let t = SummaryTable {
            columns: vec![Column::new("a", ""), Column::new("a", "s")],
            rows: vec![],
        };
        let e = t.write(dir.path()).unwrap_err();
        assert!(matches!(e, OutputError::DuplicateColumn { .. }), "{e}");
    }

    proptest::proptest! {
        /// A whole number is written as the float formatting would.
        #[test]
        fn whole_numbers_are_written_as_floats_print_them(
            n in -(1i64 << 53)..(1i64 << 53),
            e in 0i32..60,
        ) {
            for v in [n as f64, n as f64 * 2f64.powi(e), (n as f64).abs() * 10f64.powi(e % 20)] {
                let mut line = String::new();
                push_f64(&mut line, v);
                let a = v.abs();
                let want = if a == 0.0 || !a.is_finite() || (1e-5..1e16).contains(&a) {
                    format!("{v}")
                } else {
                    format!("{v:e}")
                };
                proptest::prop_assert_eq!(line, want);
            }
        }
    }

    #[test]
    fn csv_series_writes_rows_and_checks_their_width() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rate.csv");
        let mut s = CsvSeries::create(&p, &["time_ns", "rate, Gbit/s"]).unwrap();
        s.row(&[0.0, 100.0]).unwrap();
        s.row(&[1e3, 0.1 + 0.2]).unwrap();
        s.row(&[f64::NAN, f64::INFINITY]).unwrap();
        s.row(&[1e20, -2.5e-9]).unwrap();
        s.row_display(&[&"a\"b", &7u64]).unwrap();
        let e = s.row(&[1.0]).unwrap_err();
        assert!(
            matches!(
                e,
                OutputError::RowWidth {
                    got: 1,
                    want: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("rate.csv"));
        assert_eq!(s.finish().unwrap(), 6);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            text,
            "time_ns,\"rate, Gbit/s\"\n0,100\n1000,0.30000000000000004\nNaN,inf\n1e20,-2.5e-9\n\"a\"\"b\",7\n"
        );
        // Every number reads back exactly.
        for (txt, v) in [
            ("0.30000000000000004", 0.1 + 0.2),
            ("1e20", 1e20),
            ("-2.5e-9", -2.5e-9),
        ] {
            assert_eq!(txt.parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn results_folder_and_run_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Results::create(&tmp.path().join("out").join("deep")).unwrap();
        assert!(r.dir().is_dir());
        // Again on the same folder: fine.
        Results::create(r.dir()).unwrap();
        let run = r.run_dir("incast-n16,dcqcn").unwrap();
        assert!(run.is_dir() && run.starts_with(r.dir()));
        assert_eq!(r.run_dir("incast-n16,dcqcn").unwrap(), run);
        for bad in ["", ".", "..", "a/b", "a\\b", "nul\0"] {
            let e = r.run_dir(bad).unwrap_err();
            assert!(matches!(e, OutputError::BadName { .. }), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_file_in_the_way_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("results");
        std::fs::write(&file, "x").unwrap();
        let e = Results::create(&file).unwrap_err();
        assert!(matches!(e, OutputError::NotAFolder { .. }));
        assert!(e.to_string().contains("results") && e.to_string().contains("not a folder"));

        let r = Results::create(&tmp.path().join("ok")).unwrap();
        std::fs::write(r.dir().join("run1"), "x").unwrap();
        assert!(matches!(
            r.run_dir("run1"),
            Err(OutputError::NotAFolder { .. })
        ));

        // A parent that is a file.
        let e = Results::create(&file.join("sub")).unwrap_err();
        assert!(e.to_string().contains("results"), "{e}");
        let e = CsvSeries::create(&file.join("a.csv"), &["x"]).unwrap_err();
        assert!(
            matches!(e, OutputError::Io { .. }) && e.to_string().contains("a.csv"),
            "{e}"
        );
        let e = table().write(&file).unwrap_err();
        assert!(e.to_string().contains("summary.txt"), "{e}");
    }
}
