//! The tidy test (rust-analyzer's, in spirit): rules about the source tree that keep it a house the next
//! engineer can live in. Each rule reads the files as text, with no build, and names every file that breaks
//! it; `rules_fail_on_what_they_forbid` shows each rule failing on a made-up breach.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The workspace's crates: the binary at the root, then the members.
const CRATES: [&str; 11] =
    [".", "schemas", "detectors", "bus", "store", "http", "ingest", "worker", "api", "probe", "notify"];

/// Longest product file, in lines. A file may be longer only with a reason written here, and never longer
/// than the size given: the list shrinks as files are split, it does not grow.
const MAX_LINES: usize = 800;
const LONG_FILES: &[(&str, usize, &str)] = &[
    ("detectors/src/tool_drift/tests.rs", 2060, "one table of tool-list cases; to be split by concern (#43)"),
    (
        "detectors/src/tool_drift/diff.rs",
        1700,
        "paths, type algebra and listing in one file; to be split (#43)",
    ),
    ("detectors/src/contract/tests.rs", 1160, "one table of declared-output cases; to be split by concern"),
    (
        "detectors/src/shape/walk.rs",
        1160,
        "the single-pass shape walker: one state machine over the bytes, kept whole",
    ),
    (
        "detectors/src/tool_drift/normal.rs",
        1130,
        "the normal form with its keyword tables; to be split (#43)",
    ),
    (
        "detectors/src/tool_drift/security.rs",
        970,
        "the security review's rules with their word tables; to be split (#43)",
    ),
    ("src/config.rs", 840, "one typed configuration tree; to validate per section (#43)"),
];

/// Dependencies a crate declares that no source names as `name::`, `use name` or `"name"` (serde's `with`).
/// Reasons for the ones that are used another way.
const DEPENDENCIES_USED_OTHERWISE: &[(&str, &str, &str)] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.rs` files under `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "node_modules" && name != ".git" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Product files: each crate's `src/`, relative to the root, with their text.
fn product_files() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for krate in CRATES {
        let mut found = Vec::new();
        rust_files(&root().join(krate).join("src"), &mut found);
        for path in found {
            let relative = path.strip_prefix(root()).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{relative}: {err}"));
            files.insert(relative, text);
        }
    }
    files
}

/// Rule: a product file opens with a module comment saying what it owns.
fn missing_module_comments(files: &BTreeMap<String, String>) -> Vec<String> {
    files
        .iter()
        .filter(|(_, text)| !text.trim_start().starts_with("//!"))
        .map(|(path, _)| path.clone())
        .collect()
}

/// Rule: no product file over `MAX_LINES` unless listed with a reason, and no listed file past its size.
fn too_long(files: &BTreeMap<String, String>, allowed: &[(&str, usize, &str)]) -> Vec<String> {
    files
        .iter()
        .filter_map(|(path, text)| {
            let lines = text.lines().count();
            let limit = allowed.iter().find(|(p, _, _)| p == path).map_or(MAX_LINES, |(_, l, _)| *l);
            (lines > limit).then(|| format!("{path}: {lines} lines (at most {limit})"))
        })
        .collect()
}

/// The names in a Cargo.toml's `[dependencies]` (and, when `dev`, `[dev-dependencies]`) sections.
fn declared_dependencies(manifest: &str, section: &str) -> Vec<String> {
    let mut in_section = false;
    let mut names = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_section = line == format!("[{section}]");
            continue;
        }
        if !in_section || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name: String =
            line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// Whether `text` names the crate `name` as code does.
fn names_crate(text: &str, name: &str) -> bool {
    let ident = name.replace('-', "_");
    text.contains(&format!("{ident}::"))
        || text.contains(&format!("use {ident};"))
        || text.contains(&format!("use {ident} as"))
        || text.contains(&format!("\"{ident}\""))
}

/// Rule: every dependency a crate declares is named by its sources (dev-dependencies: by its tests and
/// benches too).
fn unused_dependencies(krate: &Path, used_otherwise: &[(&str, &str, &str)]) -> Vec<String> {
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap_or_default();
    let mut unused = Vec::new();
    for (section, dirs) in
        [("dependencies", &["src"][..]), ("dev-dependencies", &["src", "tests", "benches"][..])]
    {
        let mut text = String::new();
        for dir in dirs {
            let mut found = Vec::new();
            rust_files(&krate.join(dir), &mut found);
            for path in found {
                text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
            }
        }
        let label = krate.strip_prefix(root()).unwrap_or(krate).to_string_lossy().to_string();
        let label = if label.is_empty() { ".".to_string() } else { label };
        for name in declared_dependencies(&manifest, section) {
            let excused = used_otherwise.iter().any(|(k, n, _)| *k == label && *n == name);
            if !excused && !names_crate(&text, &name) {
                unused.push(format!("{label}: {section} {name}"));
            }
        }
    }
    unused
}

#[test]
fn every_product_file_opens_with_a_module_comment() {
    let missing = missing_module_comments(&product_files());
    assert!(
        missing.is_empty(),
        "files without a `//!` comment saying what they own:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_product_file_is_longer_than_its_limit() {
    let long = too_long(&product_files(), LONG_FILES);
    assert!(long.is_empty(), "split these, or give a reason in tests/tidy.rs:\n{}", long.join("\n"));
}

#[test]
fn every_listed_long_file_exists_and_is_still_long() {
    // A file split below the limit leaves the list, so the list says only what is true.
    let files = product_files();
    for &(path, limit, reason) in LONG_FILES {
        assert!(!reason.is_empty(), "{path}: a long file needs a reason");
        let text = files.get(path).unwrap_or_else(|| panic!("{path} is listed as long but does not exist"));
        let lines = text.lines().count();
        assert!(lines > MAX_LINES, "{path} has {lines} lines now: take it off the list in tests/tidy.rs");
        assert!(limit < lines + 50, "{path}: its limit {limit} leaves room to grow; set it near {lines}");
    }
}

#[test]
fn no_crate_declares_a_dependency_it_does_not_use() {
    let unused: Vec<String> = CRATES
        .iter()
        .flat_map(|krate| unused_dependencies(&root().join(krate), DEPENDENCIES_USED_OTHERWISE))
        .collect();
    assert!(unused.is_empty(), "declared but never named in the crate's sources:\n{}", unused.join("\n"));
}

#[test]
fn rules_fail_on_what_they_forbid() {
    let files: BTreeMap<String, String> = [
        ("a/src/lib.rs".to_string(), "//! Owns a.\nfn a() {}\n".to_string()),
        ("a/src/bare.rs".to_string(), "use std::fmt;\n".to_string()),
        ("a/src/long.rs".to_string(), format!("//! Long.\n{}", "fn f() {}\n".repeat(MAX_LINES))),
        ("a/src/listed.rs".to_string(), format!("//! Listed.\n{}", "fn f() {}\n".repeat(900))),
    ]
    .into_iter()
    .collect();
    assert_eq!(missing_module_comments(&files), ["a/src/bare.rs"]);
    assert_eq!(
        too_long(&files, &[("a/src/listed.rs", 901, "why")]),
        ["a/src/long.rs: 801 lines (at most 800)"]
    );
    assert_eq!(too_long(&files, &[("a/src/listed.rs", 900, "why")]).len(), 2, "a listed file past its size");

    let dir = std::env::temp_dir().join(format!("driftline-tidy-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src")).expect("temp crate");
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"a\"\n\n[dependencies]\nserde.workspace = true\nhex = \"0.4\"\nserde_bytes = \"0.11\"\n\n[dev-dependencies]\nproptest = \"1\"\n",
    )
    .expect("manifest");
    std::fs::write(
        dir.join("src/lib.rs"),
        "//! A.\nuse serde::Serialize;\n#[serde(with = \"serde_bytes\")]\n",
    )
    .expect("source");
    let unused = unused_dependencies(&dir, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(unused.len(), 2, "{unused:?}");
    assert!(
        unused[0].ends_with("dependencies hex") && unused[1].ends_with("dev-dependencies proptest"),
        "{unused:?}"
    );
}
