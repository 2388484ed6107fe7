//! The module rules of DESIGN.md, checked on the source: `unsafe` only in
//! the DPDK module and each use justified; the protocol core (wire,
//! transport, cc) free of clocks, backends and DPDK; backends free of the
//! transport.

use std::path::{Path, PathBuf};

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

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
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

/// The source without comments (docs may name other modules).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_protocol_core_imports_no_clock_backend_or_dpdk() {
    for (path, text) in sources() {
        let text = code(&text);
        let core = ["src/wire", "src/transport", "src/cc"]
            .iter()
            .any(|m| path.starts_with(m));
        if core {
            for banned in [
                "std::time",
                "crate::backend",
                "crate::dpdk",
                "crate::engine",
                "std::thread",
            ] {
                assert!(!text.contains(banned), "{path} uses {banned}");
            }
        }
        if path.starts_with("src/backend") {
            for banned in ["crate::transport", "crate::dpdk", "crate::engine"] {
                assert!(!text.contains(banned), "{path} uses {banned}");
            }
        }
        if path.starts_with("src/time") {
            assert!(!text.contains("std::time"), "{path} uses std::time");
        }
    }
}

#[test]
fn every_module_but_dpdk_denies_unsafe() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    assert!(lib.contains("#![deny(unsafe_code)]"));
    let dpdk =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/dpdk/mod.rs")).unwrap();
    assert!(dpdk.contains("#![allow(unsafe_code)]"));
}
