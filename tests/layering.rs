//! The house rules of `ARCHITECTURE.md`, checked on the source so the
//! layout cannot drift back:
//!
//! - `unsafe` only in the DPDK module, each use justified by a
//!   `// SAFETY:` line;
//! - a leaf of it that imports nothing ([`LEAVES`]: the prefetch hint)
//!   may be imported from any layer;
//! - the layers point one way (time → wire → cc → transport → host →
//!   verbs → tools → bin; cm on wire beside the transport; backend and
//!   dpdk to the side; sim beside verbs):
//!   [`MAY`] lists, per folder, what it may import, and the binary
//!   imports only tools, sim and config;
//! - the sans-IO core reads no clock and starts no thread;
//! - sizes: no file over 1,500 lines but test files, no function over 150
//!   lines outside tests, the binary's `main.rs` at most 600 lines.
//!
//! The checker is plain functions over (path, text) pairs; its own tests
//! below feed it deliberate bad imports and long functions and expect it to
//! refuse them.

use std::path::{Path, PathBuf};

/// Per layer (a folder or file under `src/`, `bin` for `src/bin/`), the
/// other crate modules it may import; every other one is refused.
#[rustfmt::skip]
const MAY: &[(&str, &[&str])] = &[
    ("time", &[]),
    ("wire", &["time"]),
    ("cc", &["time", "wire"]),
    ("pcap", &["time", "wire"]),
    ("transport", &["time", "wire", "cc"]),
    ("cm", &["time", "wire"]),
    ("backend", &["time", "wire", "pcap"]),
    ("dpdk", &["time", "wire", "backend"]),
    ("host", &["time", "wire", "cc", "pcap", "transport", "cm", "backend"]),
    ("verbs", &["time", "wire", "cc", "pcap", "transport", "cm", "backend", "host"]),
    ("sim", &["time", "wire", "cc", "pcap", "transport", "cm", "backend", "host", "verbs",
              "config"]),
    ("config", &["time", "wire", "cc", "pcap", "transport", "backend", "dpdk"]),
    ("tools", &["time", "wire", "cc", "pcap", "transport", "cm", "backend", "dpdk", "host", "verbs",
                "sim", "config"]),
];

/// The crate's top-level modules.
const MODULES: &[&str] = &[
    "time",
    "wire",
    "cc",
    "pcap",
    "transport",
    "cm",
    "backend",
    "dpdk",
    "host",
    "verbs",
    "sim",
    "tools",
    "config",
];

/// Leaf modules any layer may import, wherever they sit: each imports no
/// module of the crate itself (checked below). `dpdk::prefetch` is the
/// prefetch hint (DPDK's `rte_prefetch1`, one instruction), kept with the
/// crate's other `unsafe` code and built without DPDK too.
const LEAVES: &[(&str, &str)] = &[("crate::dpdk::prefetch", "src/dpdk/prefetch.rs")];

/// What the binary may import from the library: nothing else.
const BIN_MAY_USE: &[&str] = &["tools", "sim", "config"];

/// Per layer, the parts of `std` it must not use: the protocol core is
/// driven with an explicit `now` and runs on its caller's thread.
const NEVER_STD: &[(&str, &[&str])] = &[
    ("time", &["std::time"]),
    ("wire", &["std::time", "std::thread"]),
    ("cc", &["std::time", "std::thread"]),
    ("transport", &["std::time", "std::thread"]),
    ("cm", &["std::time", "std::thread"]),
];

const MAX_FILE_LINES: usize = 1500;
const MAX_FN_LINES: usize = 150;
const MAX_MAIN_LINES: usize = 600;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every source file under `src/`, as (path from the repository root, text).
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.strip_prefix(root).unwrap().display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect()
}

/// The layer a source file belongs to: its first folder (or file stem)
/// under `src/`, `bin` for the binary, `None` for `lib.rs`.
fn layer_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("src/")?;
    let first = rest.split('/').next()?;
    let first = first.strip_suffix(".rs").unwrap_or(first);
    (first != "lib").then_some(first)
}

/// The source without comments (docs may name any module).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate modules `code` names through `prefix` (`crate` or, in the
/// binary, `ferroce`): `prefix::NAME` and each top-level name of a
/// `prefix::{A, b::C}` group.
fn imported_modules(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let pat = format!("{prefix}::");
    let mut at = 0;
    while let Some(i) = code[at..].find(&pat) {
        let start = at + i;
        at = start + pat.len();
        // A whole path segment only: not `my_crate::`.
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut name = String::new();
            let mut expect_name = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if depth == 0 && expect_name && (c.is_alphanumeric() || c == '_') => {
                        name.push(c)
                    }
                    _ if depth == 0 && expect_name && !name.is_empty() => {
                        out.push(std::mem::take(&mut name));
                        expect_name = false;
                    }
                    _ => {}
                }
            }
            if !name.is_empty() {
                out.push(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}

/// Every import that breaks the layer rules, as `path: layer imports X`.
fn import_violations(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in files {
        let Some(layer) = layer_of(path) else {
            continue;
        };
        let mut code = code(text);
        for (leaf, _) in LEAVES {
            code = code.replace(leaf, "");
        }
        if layer == "bin" {
            for m in imported_modules(&code, "ferroce") {
                if !BIN_MAY_USE.contains(&m.as_str()) {
                    bad.push(format!("{path}: the binary imports ferroce::{m}"));
                }
            }
            continue;
        }
        let may = MAY
            .iter()
            .find(|(l, _)| *l == layer)
            .map_or(&[][..], |(_, m)| *m);
        for m in imported_modules(&code, "crate") {
            if m != layer && MODULES.contains(&m.as_str()) && !may.contains(&m.as_str()) {
                bad.push(format!("{path}: {layer} imports crate::{m}"));
            }
        }
        let never_std = NEVER_STD
            .iter()
            .find(|(l, _)| *l == layer)
            .map_or(&[][..], |(_, n)| *n);
        for s in never_std {
            if code.contains(s) {
                bad.push(format!("{path}: {layer} uses {s}"));
            }
        }
    }
    bad
}

/// Whether a file holds tests only (`tests.rs`, `*_tests.rs`).
fn is_test_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// Functions longer than [`MAX_FN_LINES`] outside `#[cfg(test)]` modules,
/// as (first line, length, signature).
fn long_functions(text: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        // Skip a test module whole.
        if t.starts_with("#[cfg(test)]") {
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim_start().starts_with("#[") {
                j += 1;
            }
            if j < lines.len() && lines[j].trim_start().starts_with("mod ") {
                let close = format!("{}}}", &line[..indent(line)]);
                while j < lines.len() && lines[j] != close {
                    j += 1;
                }
                i = j + 1;
                continue;
            }
        }
        let sig = t
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("const ")
            .trim_start_matches("async ")
            .trim_start_matches("unsafe ")
            .trim_start_matches("extern \"C\" ");
        if sig.starts_with("fn ") && !line.trim_end().ends_with(';') {
            let close = format!("{}}}", &line[..indent(line)]);
            let end = (i..lines.len()).find(|&j| lines[j] == close || (j == i && t.ends_with('}')));
            if let Some(end) = end {
                let n = end - i + 1;
                if n > MAX_FN_LINES {
                    out.push((i + 1, n, t.to_string()));
                }
            }
        }
        i += 1;
    }
    out
}

/// Files and functions over the size limits.
fn size_violations(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in files {
        let n = text.lines().count();
        if n > MAX_FILE_LINES && !is_test_file(path) {
            bad.push(format!("{path}: {n} lines (at most {MAX_FILE_LINES})"));
        }
        if path == "src/bin/ferroce/main.rs" && n > MAX_MAIN_LINES {
            bad.push(format!("{path}: {n} lines (at most {MAX_MAIN_LINES})"));
        }
        if is_test_file(path) {
            continue;
        }
        for (line, len, sig) in long_functions(text) {
            bad.push(format!(
                "{path}:{line}: a function of {len} lines (at most {MAX_FN_LINES}): {sig}"
            ));
        }
    }
    bad
}

/// Lines of code (comments dropped) that use the `unsafe` keyword.
fn unsafe_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or("");
            code.split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == "unsafe")
        })
        .collect()
}

#[test]
fn unsafe_lives_only_in_the_dpdk_module_and_is_justified() {
    let mut outside = Vec::new();
    let mut unjustified = Vec::new();
    for (path, text) in sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in unsafe_lines(&text) {
            if line.contains("unsafe_code") || line.contains("unsafe_op_in_unsafe_fn") {
                continue; // lint attributes
            }
            if !path.starts_with("src/dpdk/") || path == "src/dpdk/options.rs" {
                outside.push(format!("{path}:{}", i + 1));
                continue;
            }
            // A SAFETY comment (or a `# Safety` doc for an unsafe fn) within
            // the few lines above.
            let window = &lines[i.saturating_sub(6)..i];
            let ok = window
                .iter()
                .any(|l| l.contains("SAFETY:") || l.contains("# Safety"))
                || line.contains("SAFETY:")
                || path == "src/dpdk/ffi.rs";
            if !ok {
                unjustified.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(outside.is_empty(), "unsafe outside src/dpdk: {outside:?}");
    assert!(
        unjustified.is_empty(),
        "unsafe without a // SAFETY: line:\n{}",
        unjustified.join("\n")
    );
}

#[test]
fn every_module_but_dpdk_denies_unsafe() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    assert!(lib.contains("#![deny(unsafe_code)]"));
    let dpdk =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/dpdk/mod.rs")).unwrap();
    assert!(dpdk.contains("#![allow(unsafe_code)]"));
}

#[test]
fn every_source_file_belongs_to_a_known_layer() {
    let known: Vec<&str> = MAY.iter().map(|(l, _)| *l).chain(["bin"]).collect();
    for (path, _) in sources() {
        if let Some(layer) = layer_of(&path) {
            assert!(
                known.contains(&layer),
                "{path}: layer {layer} has no rules in tests/layering.rs"
            );
        }
    }
}

/// The tree as it stands keeps the layer rules and the size limits.
#[test]
fn every_layer_imports_only_what_is_below_it_and_nothing_is_too_long() {
    let files = sources();
    type Check = fn(&[(String, String)]) -> Vec<String>;
    let checks: [(&str, Check); 2] = [
        ("layer rules broken", import_violations),
        ("over the size limits", size_violations),
    ];
    for (what, check) in checks {
        let bad = check(&files);
        assert!(bad.is_empty(), "{what}:\n{}", bad.join("\n"));
    }
}

#[test]
fn there_is_no_engine_folder_and_the_binary_lives_in_src_bin() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(!root.join("src/engine").exists());
    assert!(!root.join("src/main.rs").exists());
    assert!(root.join("src/bin/ferroce/main.rs").exists());
    assert!(root.join("ARCHITECTURE.md").exists());
}

// ----- the checker refuses what it should -----

fn one(path: &str, text: &str) -> Vec<(String, String)> {
    vec![(path.to_string(), text.to_string())]
}

/// Deliberate bad imports, each with the one complaint it must draw.
const BAD_IMPORTS: &[(&str, &str, &str)] = &[
    // verbs must never name DPDK (its pinning is injected).
    (
        "src/verbs/x.rs",
        "use crate::dpdk::Eal;\n",
        "verbs imports crate::dpdk",
    ),
    // config never imports tools, also inside a group.
    (
        "src/config.rs",
        "use crate::{transport::Mtu, tools::probe::OVERHEAD};\n",
        "config imports crate::tools",
    ),
    // The binary imports tools, sim and config only.
    (
        "src/bin/ferroce/main.rs",
        "use ferroce::tools::decode;\nuse ferroce::wire::Frame;\n",
        "the binary imports ferroce::wire",
    ),
    // Below never imports above: the transport, a backend, the sim.
    (
        "src/transport/qp.rs",
        "fn f() { crate::host::pump::MAX_FRAME; }",
        "transport imports crate::host",
    ),
    (
        "src/backend/fabric/x.rs",
        "use crate::transport::Device;",
        "backend imports crate::transport",
    ),
    (
        "src/sim/lab/x.rs",
        "use crate::tools::probe;",
        "sim imports crate::tools",
    ),
    // The core reads no clock.
    (
        "src/transport/x.rs",
        "let t = std::time::Instant::now();",
        "transport uses std::time",
    ),
    // The CM agent sits on the wire format alone: no transport, no host,
    // no clock, no thread.
    (
        "src/cm/x.rs",
        "use crate::transport::Device;",
        "cm imports crate::transport",
    ),
    (
        "src/cm/x.rs",
        "use crate::{wire::cm::Req, host::Host};",
        "cm imports crate::host",
    ),
    (
        "src/cm/x.rs",
        "std::thread::sleep(d);",
        "cm uses std::thread",
    ),
    // Nothing below the host knows the CM.
    (
        "src/transport/x.rs",
        "use crate::cm::CmAgent;",
        "transport imports crate::cm",
    ),
];

#[test]
fn the_checker_refuses_a_deliberate_bad_import() {
    for (path, text, complaint) in BAD_IMPORTS {
        let bad = import_violations(&one(path, text));
        assert_eq!(bad, [format!("{path}: {complaint}")], "{text}");
    }
}

#[test]
fn the_checker_lets_comments_and_allowed_imports_pass() {
    let ok = "//! See [`crate::dpdk::Eal`] for how it is pinned.\n\
              use crate::host::Host; // not crate::tools\n\
              use crate::{transport::Device, wire::MacAddr};\n\
              use crate::cm::CmAgent;\n\
              use other_crate::tools::X;\n";
    assert!(import_violations(&one("src/verbs/x.rs", ok)).is_empty());
    let cm = "use crate::time::Instant;\nuse crate::wire::{cm::Req, mad::CmMad};\n";
    assert!(import_violations(&one("src/cm/x.rs", cm)).is_empty());
    assert!(import_violations(&one("src/tools/x.rs", "use crate::dpdk::Port;")).is_empty());
    // A leaf, from any layer; the rest of its folder stays refused.
    let leaf = "crate::dpdk::prefetch::prefetch(qp);\n";
    assert!(import_violations(&one("src/transport/x.rs", leaf)).is_empty());
    let other = "use crate::dpdk::Port;\n";
    assert_eq!(
        import_violations(&one("src/transport/x.rs", other)),
        ["src/transport/x.rs: transport imports crate::dpdk"]
    );
}

#[test]
fn every_leaf_imports_no_module_of_the_crate() {
    for (leaf, path) in LEAVES {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
        let code = code(&text);
        let used = imported_modules(&code, "crate");
        assert!(used.is_empty(), "{leaf} imports {used:?}");
        assert!(!code.contains("super::"), "{leaf} imports its parent");
    }
}

#[test]
fn the_checker_refuses_long_functions_and_files() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n);
    // 1 signature + 149 body + 1 closing brace = 151 lines.
    let long = format!("pub fn f() {{\n{}}}\n", body(149));
    let bad = size_violations(&one("src/wire/x.rs", &long));
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("a function of 151 lines"), "{bad:?}");
    let fits = format!("fn f() {{\n{}}}\n", body(148));
    assert!(size_violations(&one("src/wire/x.rs", &fits)).is_empty());
    // Methods count too; tests do not.
    let method = format!("impl A {{\n    fn g(&self) {{\n{}    }}\n}}\n", body(160));
    assert_eq!(size_violations(&one("src/wire/x.rs", &method)).len(), 1);
    let test = format!(
        "#[cfg(test)]\nmod tests {{\n    fn g() {{\n{}    }}\n}}\n",
        body(160)
    );
    assert!(size_violations(&one("src/wire/x.rs", &test)).is_empty());
    // A file of 1,501 lines, unless it holds tests.
    let big = "const A: u8 = 0;\n".repeat(1501);
    assert_eq!(size_violations(&one("src/wire/x.rs", &big)).len(), 1);
    assert!(size_violations(&one("src/wire/x_tests.rs", &big)).is_empty());
    // The binary's main.rs stays thin.
    let main = "const A: u8 = 0;\n".repeat(601);
    assert_eq!(
        size_violations(&one("src/bin/ferroce/main.rs", &main)).len(),
        1
    );
}

/// Tests that need root are ignored with a reason that starts "needs
/// root", and scripts/test.sh runs them, as root, by naming their test
/// binaries: a
/// test file with such a test that the script does not name would never
/// run in CI.
#[test]
fn every_test_file_with_root_tests_is_run_by_test_sh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    rust_files(&root.join("src"), &mut files);
    let mut missing = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // Spelled in two pieces so that this file does not match itself.
        if !text.contains(concat!("#[ignore = \"needs ", "root")) {
            continue;
        }
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let name = rel
            .strip_prefix("tests/")
            .and_then(|n| n.strip_suffix(".rs"))
            .filter(|n| !n.contains('/'));
        match name {
            Some(n) if script.contains(&format!("--test {n} ")) => {}
            _ => missing.push(rel),
        }
    }
    assert!(
        missing.is_empty(),
        "root-only tests that scripts/test.sh does not run: {missing:?} (name their test binary in its root step)"
    );
}
