//! The tables of the documentation are runs' figures: a test reads a
//! Markdown table out of a file under `docs/` and checks each cell
//! against the run it describes, so a change that moves a figure fails
//! until the table is measured again.

use std::path::Path;

/// The first Markdown table after `marker` in `doc` (a path from the
/// repository's root): each row below the header and its rule, as its
/// cells (trimmed, `**` removed).
pub fn table(doc: &str, marker: &str) -> Vec<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in {doc}"));
    text[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace("**", ""))
                .collect()
        })
        .collect()
}

/// The numbers a table cell prints, in order (thousands commas dropped),
/// each with its count of decimals.
pub fn cell_numbers(cell: &str) -> Vec<(f64, i32)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in cell.chars().chain([' ']) {
        if c.is_ascii_digit() || (c == '.' || c == ',') && !cur.is_empty() {
            cur.push(c);
        } else if !cur.is_empty() {
            let s = cur.trim_end_matches(['.', ',']).replace(',', "");
            let decimals = s.split_once('.').map_or(0, |(_, d)| d.len() as i32);
            out.push((s.parse().expect("a number"), decimals));
            cur.clear();
        }
    }
    out
}

/// What a cell of a table must print.
pub enum Cell {
    /// Words only, not checked (a run's description).
    Skip,
    /// No figure ("none", "-").
    Blank,
    /// These figures, in order, each the run's value rounded to the
    /// decimals the cell prints.
    Nums(Vec<f64>),
}

/// A cell of one figure.
pub fn one(x: f64) -> Cell {
    Cell::Nums(vec![x])
}

/// Checks one row of table `name` of `doc` against a run, a cell after
/// the row's name for each of `want`.
pub fn check_row(doc: &str, name: &str, row: &[String], want: &[Cell]) {
    assert_eq!(row.len(), want.len() + 1, "{doc} {name}: {row:?}");
    for (cell, want) in row[1..].iter().zip(want) {
        let got = cell_numbers(cell);
        let (fits, wanted) = match want {
            Cell::Skip => (true, Vec::new()),
            Cell::Blank => (got.is_empty(), Vec::new()),
            Cell::Nums(w) => (
                got.len() == w.len()
                    && got.iter().zip(w).all(|(&(doc, d), &run)| {
                        (doc - run).abs() <= 0.5 * 10f64.powi(-d) * (1.0 + 1e-9)
                    }),
                w.clone(),
            ),
        };
        assert!(
            fits,
            "{doc} {name}, row {}: the cell {cell:?} is not this run's {wanted:?} \
             (measure the table again)",
            row[0]
        );
    }
}
