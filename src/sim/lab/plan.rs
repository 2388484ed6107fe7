//! The expansion of an experiment file of `ferroce lab` into runs: its
//! variants and sweep applied to the file's TOML ([`LabFile::plan`]),
//! each run named, read and resolved.

use super::config::{parse_error, LabConfig, LabConfigError, SweepConfig, VariantConfig, MAX_RUNS};
use super::resolve::Resolved;
use crate::config::read_text;
use serde::Deserialize;
use std::path::Path;

/// An experiment file: the experiment as written, its variants and its
/// sweep. [`LabFile::plan`] expands it into runs.
#[derive(Debug, Clone)]
pub struct LabFile {
    /// The experiment without variants or sweep.
    pub base: LabConfig,
    /// The `[[variant]]` tables, in file order.
    pub variants: Vec<VariantConfig>,
    /// The `[sweep]` table, if any.
    pub sweep: Option<SweepConfig>,
    /// `base` as TOML, for applying variants and sweep values.
    table: toml::Table,
    /// [`source_hash`] of the file's text.
    hash: String,
}

#[derive(Deserialize)]
struct Overrides {
    #[serde(default, rename = "variant")]
    variants: Vec<VariantConfig>,
    #[serde(default)]
    sweep: Option<SweepConfig>,
}

/// The expansion of an experiment file: every run, resolved.
#[derive(Debug, Clone)]
pub struct LabPlan {
    /// The experiment's `name`.
    pub name: String,
    /// The experiment's `description`.
    pub description: String,
    /// The swept key, if the file sweeps one.
    pub sweep_key: Option<String>,
    /// The variants' names, in file order (empty when there are none).
    pub variants: Vec<String>,
    /// Every variant with every sweep value, in that order.
    pub runs: Vec<Run>,
    /// [`source_hash`] of the experiment file's text: which file the runs
    /// of a split experiment came from, for the merge to check.
    pub source_hash: String,
}

/// One run of an experiment.
#[derive(Debug, Clone)]
pub struct Run {
    /// Unique within the plan; made of `[A-Za-z0-9._=+-]`.
    pub name: String,
    /// Its variant's name; `None` when the file has no variants.
    pub variant: Option<String>,
    /// The sweep's value for this run.
    pub sweep_value: Option<toml::Value>,
    /// The settings, variant and sweep applied.
    pub config: LabConfig,
    /// `config` checked and resolved.
    pub resolved: Resolved,
}

impl LabPlan {
    /// Reads, expands and checks the experiment file at `path`.
    pub fn load(path: &Path) -> Result<LabPlan, LabConfigError> {
        LabFile::load(path)?.plan()
    }
}

impl LabFile {
    /// Reads the experiment file at `path` (relative paths in it start
    /// from its folder).
    pub fn load(path: &Path) -> Result<LabFile, LabConfigError> {
        let (text, p) = read_text(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        LabFile::parse(&text, &p, dir)
    }

    /// Parses an experiment file; `origin` names it in errors, `dir` is
    /// where its relative paths start.
    pub fn parse(text: &str, origin: &str, dir: &Path) -> Result<LabFile, LabConfigError> {
        let base = LabConfig::parse(text, origin, dir)?;
        let o: Overrides = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_error(origin, e))?;
        table.remove("variant");
        table.remove("sweep");
        Ok(LabFile {
            base,
            variants: o.variants,
            sweep: o.sweep,
            table,
            hash: source_hash(text),
        })
    }

    fn error(&self, key: impl Into<String>, msg: impl Into<String>) -> LabConfigError {
        self.base.error(key, msg)
    }

    /// Every run: each variant with each sweep value, checked and
    /// resolved.
    pub fn plan(&self) -> Result<LabPlan, LabConfigError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, v) in self.variants.iter().enumerate() {
            if v.name.is_empty() || !v.name.chars().all(name_char) {
                return Err(self.error(
                    format!("variant.{i}.name"),
                    format!("{:?} must be letters, digits, '.', '_' or '-'", v.name),
                ));
            }
            if !names.insert(v.name.as_str()) {
                return Err(self.error(
                    format!("variant.{i}.name"),
                    format!("two variants are named {:?}", v.name),
                ));
            }
            for (k, value) in &v.set {
                self.check_override(k, value, &format!("set by variant {}", v.name))?;
            }
        }
        let mut labels = Vec::new();
        if let Some(s) = &self.sweep {
            if s.values.is_empty() {
                return Err(self.error("sweep.values", "needs at least one value"));
            }
            let mut seen = std::collections::BTreeSet::new();
            for value in &s.values {
                let label = value_label(value).ok_or_else(|| {
                    self.error(
                        "sweep.values",
                        format!("{value} is not a number, string or boolean"),
                    )
                })?;
                if !seen.insert(label.clone()) {
                    return Err(self.error("sweep.values", format!("{value} is listed twice")));
                }
                labels.push(label);
            }
            for value in &s.values {
                self.check_override(&s.key, value, &format!("swept to {value}"))?;
            }
        }
        let n = self
            .variants
            .len()
            .max(1)
            .saturating_mul(labels.len().max(1));
        if n > MAX_RUNS {
            return Err(self.error(
                "sweep.values",
                format!("variants x values make {n} runs, above the limit of {MAX_RUNS}"),
            ));
        }

        let variants: Vec<Option<&VariantConfig>> = if self.variants.is_empty() {
            vec![None]
        } else {
            self.variants.iter().map(Some).collect()
        };
        let values: Vec<Option<(&toml::Value, &str)>> = match &self.sweep {
            None => vec![None],
            Some(s) => s
                .values
                .iter()
                .zip(&labels)
                .map(|(v, l)| Some((v, l.as_str())))
                .collect(),
        };
        let key_label = self
            .sweep
            .as_ref()
            .map(|s| sanitize(s.key.rsplit('.').next().unwrap_or(&s.key)));
        let mut runs = Vec::with_capacity(n);
        let mut run_names = std::collections::BTreeSet::new();
        for v in &variants {
            for x in &values {
                let name = match (v, x, &key_label) {
                    (Some(v), Some((_, l)), Some(k)) => format!("{}-{k}={l}", v.name),
                    (Some(v), _, _) => v.name.clone(),
                    (None, Some((_, l)), Some(k)) => format!("{k}={l}"),
                    _ => sanitize(&self.base.name),
                };
                if !run_names.insert(name.clone()) {
                    return Err(self.error(
                        "sweep.values",
                        format!("two runs would be named {name}: make the values distinct"),
                    ));
                }
                let mut table = self.table.clone();
                let mut keys = Vec::new();
                if let Some(v) = v {
                    for (k, value) in &v.set {
                        set_key(&mut table, k, value.clone()).map_err(|m| self.error(k, m))?;
                        keys.push(k.as_str());
                    }
                }
                if let (Some((value, _)), Some(s)) = (x, &self.sweep) {
                    set_key(&mut table, &s.key, (*value).clone())
                        .map_err(|m| self.error(&s.key, m))?;
                    keys.push(s.key.as_str());
                }
                let mut config: LabConfig =
                    toml::Value::Table(table)
                        .try_into()
                        .map_err(|e: toml::de::Error| {
                            self.error(keys.join(", "), e.message().to_string())
                                .in_run(&name)
                        })?;
                config.origin = self.base.origin.clone();
                config.dir = self.base.dir.clone();
                let resolved = config.resolve().map_err(|e| {
                    if v.is_some() || x.is_some() {
                        e.in_run(&name)
                    } else {
                        e
                    }
                })?;
                runs.push(Run {
                    name,
                    variant: v.map(|v| v.name.clone()),
                    sweep_value: x.map(|(value, _)| value.clone()),
                    config,
                    resolved,
                });
            }
        }
        Ok(LabPlan {
            name: self.base.name.clone(),
            description: self.base.description.clone(),
            sweep_key: self.sweep.as_ref().map(|s| s.key.clone()),
            variants: self.variants.iter().map(|v| v.name.clone()).collect(),
            runs,
            source_hash: self.hash.clone(),
        })
    }

    /// Checks that `key` can be set to `value` on its own: a key of the
    /// schema, a value of its type.
    fn check_override(
        &self,
        key: &str,
        value: &toml::Value,
        what: &str,
    ) -> Result<(), LabConfigError> {
        let first = key.split('.').next().unwrap_or("");
        if matches!(first, "name" | "variant" | "sweep") {
            return Err(self.error(key, format!("{first} cannot be set ({what})")));
        }
        let mut table = self.table.clone();
        set_key(&mut table, key, value.clone())
            .map_err(|m| self.error(key, format!("{m} ({what})")))?;
        toml::Value::Table(table)
            .try_into::<LabConfig>()
            .map_err(|e| self.error(key, format!("{} ({what})", e.message())))?;
        Ok(())
    }
}

/// A fingerprint of an experiment file's text, `fnv1a64:` and 16 hex
/// digits (64-bit FNV-1a): enough to tell two files apart, not a
/// cryptographic hash. Files the experiment reads (a CDF's CSV) are not
/// part of it.
pub fn source_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// `s` with every character a run name does not take replaced by `_`.
fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if name_char(c) || matches!(c, '=' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "run".into()
    } else {
        out
    }
}

/// How a sweep value appears in run names; `None` for a value that is
/// not a number, string or boolean.
fn value_label(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(sanitize(&f.to_string())),
        toml::Value::String(s) => Some(sanitize(s)),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Sets the dotted `key` of `table` to `value` (see the module docs).
pub(crate) fn set_key(
    table: &mut toml::Table,
    key: &str,
    value: toml::Value,
) -> Result<(), String> {
    let path: Vec<&str> = key.split('.').collect();
    if path.iter().any(|s| s.is_empty()) {
        return Err(format!("{key:?} is not a dotted key"));
    }
    set_in_table(table, &path, 0, value)
}

/// Sets `path[depth..]` of `t`, the table at `path[..depth]`.
fn set_in_table(
    t: &mut toml::Table,
    path: &[&str],
    depth: usize,
    value: toml::Value,
) -> Result<(), String> {
    let seg = path[depth];
    if depth + 1 == path.len() {
        match t.get_mut(seg) {
            Some(old) => merge(old, value),
            None => {
                t.insert(seg.to_string(), value);
            }
        }
        return Ok(());
    }
    let child = t
        .entry(seg.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    set_in_value(child, path, depth + 1, value)
}

/// Sets `path[depth..]` of `node`, the value at `path[..depth]`.
fn set_in_value(
    node: &mut toml::Value,
    path: &[&str],
    depth: usize,
    value: toml::Value,
) -> Result<(), String> {
    let here = path[..depth].join(".");
    match node {
        toml::Value::Table(t) => set_in_table(t, path, depth, value),
        toml::Value::Array(a) => {
            let seg = path[depth];
            let i: usize = seg.parse().map_err(|_| {
                format!("{here} is a list: its entries are numbered from 0 ({here}.0)")
            })?;
            let n = a.len();
            let entry = a.get_mut(i).ok_or_else(|| {
                format!("{here} has {n} entries (numbered from 0), so no {here}.{i}")
            })?;
            if depth + 1 == path.len() {
                merge(entry, value);
                Ok(())
            } else {
                set_in_value(entry, path, depth + 1, value)
            }
        }
        other => Err(format!("{here} is a {}, not a table", other.type_str())),
    }
}

/// Puts `value` in place of `old`: a table merges into a table, anything
/// else replaces.
fn merge(old: &mut toml::Value, value: toml::Value) {
    match (old, value) {
        (toml::Value::Table(old), toml::Value::Table(new)) => {
            for (k, v) in new {
                match old.get_mut(&k) {
                    Some(o) => merge(o, v),
                    None => {
                        old.insert(k, v);
                    }
                }
            }
        }
        (old, value) => *old = value,
    }
}
