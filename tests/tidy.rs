//! The tidy test (rust-analyzer's, in spirit): rules about the source tree that keep it a house the next
//! engineer can live in. Each rule reads the files as text, with no build, and names every file that breaks
//! it; `rules_fail_on_what_they_forbid` shows each rule failing on a made-up breach.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates: the binary at the root, then the members.
const CRATES: [&str; 11] =
    [".", "schemas", "detectors", "bus", "store", "http", "ingest", "worker", "api", "probe", "notify"];

/// Longest product file, in lines. A file may be longer only with a reason written here, and never longer
/// than the size given: the list shrinks as files are split, it does not grow.
const MAX_LINES: usize = 800;
const LONG_FILES: &[(&str, usize, &str)] = &[];

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

/// The layers of `detectors/src/tool_drift/`, lowest first: a file uses only files of lower layers, so
/// each layer can be read knowing only those below it (`mod.rs`, which wires them, and the tests aside).
const TOOL_DRIFT_LAYERS: &[&[&str]] = &[
    &["canonical", "keywords", "node", "parallel", "classify", "explain", "security"],
    &["refs", "equivalences"],
    &["normal"],
    &["digest", "declared", "limits"],
    &["index"],
    &["hashes", "diff", "cost"],
    &["surfaces"],
    &["upcoming"],
];

/// A file's text without its inline test module (`#[cfg(test)] mod tests { … }`, last in the file).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests {").map_or(text, |at| &text[..at])
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The sibling modules `text` names after `prefix` (`super::` in a module of a folder, `crate::` at a
/// crate's root): `prefix name`, and each first name in `prefix{a, b::c}`.
fn named_after(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices(prefix) {
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                names.insert(ident(item.trim()).to_owned());
            }
        } else {
            names.insert(ident(rest).to_owned());
        }
    }
    names.remove("");
    names
}

/// For each folder of modules (a crate's `src/`, or a folder with `mod.rs`): each module (a file, or a
/// folder with `mod.rs` and what it holds) and the sibling modules it uses, by `super::`, by its path from
/// `crate::`, or from a file of a folder module by `super::super::`. Test files (`tests.rs`) and inline
/// test modules are left out.
fn sibling_uses(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    // The module path of a folder from its crate's root (`detectors/src/tool_drift` → `crate::tool_drift::`).
    let crate_path = |folder: &str| match folder.split_once("/src") {
        Some((_, "")) | None if folder.ends_with("src") => "crate::".to_owned(),
        Some((_, inner)) => format!("crate{}::", inner.replace('/', "::")),
        None => "crate::".to_owned(),
    };
    let is_root = |folder: &str| folder == "src" || folder.ends_with("/src");
    let mut add = |folder: &str, module: &str, text: &str, prefix: &str| {
        let text = without_tests(text);
        let mut used = named_after(text, prefix);
        used.extend(named_after(text, &crate_path(folder)));
        used.remove(module);
        folders.entry(folder.to_owned()).or_default().entry(module.to_owned()).or_default().extend(used);
    };
    for (path, text) in files {
        let Some((folder, file)) = path.rsplit_once('/') else { continue };
        let Some(module) = file.strip_suffix(".rs") else { continue };
        // Tests may use whatever they test: `tests.rs` and `tests/` folders are left out.
        if matches!(module, "lib" | "main" | "tests") || folder.split('/').any(|part| part == "tests") {
            continue;
        }
        let (parent, own) = folder.rsplit_once('/').unwrap_or(("", folder));
        if module == "mod" {
            // A folder module, seen from its parent folder.
            if !is_root(folder) {
                add(parent, own, text, if is_root(parent) { "crate::" } else { "super::" });
            }
            continue;
        }
        add(folder, module, text, if is_root(folder) { "crate::" } else { "super::" });
        // A file of a folder module also makes its folder use what it names in the parent folder.
        if !is_root(folder) && files.contains_key(&format!("{folder}/mod.rs")) {
            add(parent, own, text, if is_root(parent) { "crate::" } else { "super::super::" });
        }
    }
    // Only siblings count: names of items in the parent are not modules of the folder.
    for modules in folders.values_mut() {
        let known: BTreeSet<String> = modules.keys().cloned().collect();
        for used in modules.values_mut() {
            used.retain(|name| known.contains(name));
        }
    }
    folders
}

/// Rule: no module uses a sibling that uses it, directly or around a circle.
fn import_circles(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut circles = Vec::new();
    for (folder, modules) in sibling_uses(files) {
        for start in modules.keys() {
            // Depth-first from `start`, reporting a path that comes back to it.
            let mut stack = vec![vec![start.clone()]];
            while let Some(path) = stack.pop() {
                let Some(last) = path.last() else { continue };
                for next in modules.get(last).into_iter().flatten() {
                    if next == start && path.first() == path.iter().min() {
                        circles.push(format!("{folder}: {} → {start}", path.join(" → ")));
                    } else if !path.contains(next) {
                        let mut longer = path.clone();
                        longer.push(next.clone());
                        stack.push(longer);
                    }
                }
            }
        }
    }
    circles
}

/// Rule: in `folder`, each file uses only files of lower `layers`; every file has a layer.
fn layer_breaches(files: &BTreeMap<String, String>, folder: &str, layers: &[&[&str]]) -> Vec<String> {
    let layer_of = |module: &str| layers.iter().position(|layer| layer.contains(&module));
    let uses = sibling_uses(files);
    let Some(modules) = uses.get(folder) else { return vec![format!("{folder}: no modules found")] };
    let mut breaches = Vec::new();
    for (module, used) in modules {
        let Some(own) = layer_of(module) else {
            breaches.push(format!("{folder}/{module}.rs has no layer in tests/tidy.rs"));
            continue;
        };
        for other in used {
            if layer_of(other).is_none_or(|layer| layer >= own) {
                breaches.push(format!("{folder}/{module}.rs uses {other}.rs, which is not below it"));
            }
        }
    }
    breaches
}

/// Rule: a crate's metrics are counted only in its `events.rs`, where each event writes its log line with
/// them (`metrics.rs` defines them). A metric named or labelled anywhere else is counted apart from a log.
fn metrics_counted_outside_events(files: &BTreeMap<String, String>) -> Vec<String> {
    let names_a_metric = |text: &str| {
        text.match_indices("metrics::")
            .any(|(at, _)| text[at + "metrics::".len()..].starts_with(|c: char| c.is_ascii_uppercase()))
            || text.contains(".with_label_values(")
    };
    files
        .iter()
        .filter(|(path, _)| !path.ends_with("/events.rs") && !path.ends_with("/metrics.rs"))
        .filter(|(_, text)| names_a_metric(without_tests(text)))
        .map(|(path, _)| path.clone())
        .collect()
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
    let files = product_files();
    let long = too_long(&files, LONG_FILES);
    assert!(long.is_empty(), "split these, or give a reason in tests/tidy.rs:\n{}", long.join("\n"));
    // A file split below the limit leaves the list, so the list says only what is true.
    for &(path, limit, reason) in LONG_FILES {
        assert!(!reason.is_empty(), "{path}: a long file needs a reason");
        let text = files.get(path).unwrap_or_else(|| panic!("{path} is listed as long but does not exist"));
        let lines = text.lines().count();
        assert!(lines > MAX_LINES, "{path} has {lines} lines now: take it off the list in tests/tidy.rs");
        assert!(limit < lines + 50, "{path}: its limit {limit} leaves room to grow; set it near {lines}");
    }
}

#[test]
fn metrics_are_counted_only_by_events() {
    let outside = metrics_counted_outside_events(&product_files());
    assert!(
        outside.is_empty(),
        "metrics counted outside an events.rs (add an event that logs and counts):\n{}",
        outside.join("\n")
    );
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
fn no_module_uses_a_sibling_that_uses_it() {
    let circles = import_circles(&product_files());
    assert!(
        circles.is_empty(),
        "modules that use each other (move the shared item down):\n{}",
        circles.join("\n")
    );
}

#[test]
fn tool_drift_files_use_only_lower_layers() {
    let breaches = layer_breaches(&product_files(), "detectors/src/tool_drift", TOOL_DRIFT_LAYERS);
    assert!(breaches.is_empty(), "{}", breaches.join("\n"));
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

    let circle: BTreeMap<String, String> = [
        ("a/src/one.rs", "//! One.\nuse crate::two::Two;\n"),
        (
            "a/src/two.rs",
            "//! Two.\nuse crate::{one, three};\n#[cfg(test)]\nmod tests {\n    use crate::four;\n}\n",
        ),
        ("a/src/three.rs", "//! Three.\n"),
        ("a/src/four.rs", "//! Four.\nuse crate::two;\n"),
        ("a/src/f/mod.rs", "//! F.\n"),
        ("a/src/f/low.rs", "//! Low.\nuse super::high::H;\n"),
        ("a/src/f/high.rs", "//! High.\nuse super::low;\n"),
        ("a/src/f/g/mod.rs", "//! G, a folder module.\n"),
        ("a/src/f/g/inner.rs", "//! Inner.\nuse super::super::low;\n"),
        ("a/src/f/lower.rs", "//! Lower.\nuse crate::f::g::Inner;\n"),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_owned(), text.to_owned()))
    .collect();
    assert_eq!(import_circles(&circle), ["a/src: one → two → one", "a/src/f: high → low → high"]);
    let uses = sibling_uses(&circle);
    let folder = &uses["a/src/f"];
    let names = |module: &str| folder[module].iter().cloned().collect::<Vec<_>>();
    assert_eq!(
        (names("g"), names("lower")),
        (vec!["low".to_owned()], vec!["g".to_owned()]),
        "a folder module's uses"
    );
    assert_eq!(
        layer_breaches(&circle, "a/src/f", &[&["low"], &["high", "g"], &["lower"]]),
        ["a/src/f/low.rs uses high.rs, which is not below it"]
    );
    assert_eq!(
        layer_breaches(&circle, "a/src/f", &[&["low", "g", "lower"]]),
        [
            "a/src/f/g.rs uses low.rs, which is not below it",
            "a/src/f/high.rs has no layer in tests/tidy.rs",
            "a/src/f/low.rs uses high.rs, which is not below it",
            "a/src/f/lower.rs uses g.rs, which is not below it",
        ]
    );

    let counted: BTreeMap<String, String> = [
        ("a/src/events.rs", "//! Events.\nmetrics::SENT.with_label_values(&[\"x\"]).inc();\n"),
        ("a/src/metrics.rs", "//! Metrics.\npub static SENT: () = ();\n"),
        ("a/src/send.rs", "//! Send.\nmetrics::SENT.inc();\n"),
        ("a/src/label.rs", "//! Label.\nSENT.with_label_values(&[\"x\"]).inc();\n"),
        ("a/src/quiet.rs", "//! Quiet.\nuse crate::metrics;\nfn f() { metrics::gather(); }\n"),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_owned(), text.to_owned()))
    .collect();
    assert_eq!(metrics_counted_outside_events(&counted), ["a/src/label.rs", "a/src/send.rs"]);

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
