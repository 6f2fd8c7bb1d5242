//! Verdicts on real MCP servers' releases (tests/real/, captured by scripts/capture-real-servers.sh).
//!
//! For every judged pair of releases, the worst classification driftline gives each tool must be the
//! one a reviewer wrote in tests/real/pairs.json (`NONE`: the tool's text changed but nothing a client
//! can observe). The full change list of each pair is kept as a golden file under tests/real/golden/,
//! so any change of a verdict shows in review; `UPDATE_GOLDEN=1` rewrites them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use driftline_detectors::tool_drift::{
    canonical_json, definition_text, diff_tools, entry_digest, normalize_tool, schema_hash, Written,
};
use driftline_schemas::{ChangeType, Classification, SchemaChange};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/real")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn list(server: &str, version: &str) -> Vec<Value> {
    let path = corpus().join("lists").join(server).join(format!("{version}.json"));
    read_json(&path).as_array().cloned().unwrap_or_else(|| panic!("{}: not an array", path.display()))
}

/// The worst classification per tool, as a reviewer reads a diff: a renamed tool is a removal of the
/// old name (BREAKING) and a new tool under the new name (COMPATIBLE).
fn worst_per_tool(changes: &[SchemaChange]) -> BTreeMap<String, Classification> {
    let mut worst: BTreeMap<String, Classification> = BTreeMap::new();
    let mut note = |tool: &str, class: Classification| {
        let entry = worst.entry(tool.to_owned()).or_insert(class);
        *entry = (*entry).max(class);
    };
    for change in changes {
        note(&change.tool_name, change.classification);
        if change.change_type == ChangeType::ToolRenamed {
            if let Some(new_name) = change.after.as_str() {
                note(new_name, Classification::Compatible);
            }
        }
    }
    worst
}

fn label(class: Option<Classification>) -> &'static str {
    class.map_or("NONE", Classification::as_str)
}

fn render(changes: &[SchemaChange]) -> String {
    let mut out = String::new();
    for c in changes {
        let flags: Vec<&str> = c.security_flags.iter().map(|f| f.rule.as_str()).collect();
        out.push_str(&format!(
            "{} {} {} {} {} -> {}",
            c.classification, c.change_type, c.tool_name, c.path, c.before, c.after
        ));
        if !flags.is_empty() {
            out.push_str(&format!(" [{}]", flags.join(",")));
        }
        out.push('\n');
    }
    out
}

#[test]
fn verdicts_on_real_releases_match_the_reviewers() {
    let pairs = read_json(&corpus().join("pairs.json"));
    let pairs = pairs.as_array().expect("pairs.json is an array");
    assert!(pairs.len() >= 20, "at least 20 judged pairs, found {}", pairs.len());
    let servers: BTreeSet<&str> = pairs.iter().filter_map(|p| p["server"].as_str()).collect();
    assert!(servers.len() >= 15, "at least 15 servers, found {}", servers.len());

    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let golden_dir = corpus().join("golden");
    let (mut judged, mut agreed) = (0usize, 0usize);
    let mut disagreements = Vec::new();
    let mut golden_drift = Vec::new();
    for pair in pairs {
        let (server, old, new) = (
            pair["server"].as_str().expect("server"),
            pair["old"].as_str().expect("old"),
            pair["new"].as_str().expect("new"),
        );
        let name = format!("{server} {old} → {new}");
        let (before, after) = (list(server, old), list(server, new));
        let changes = diff_tools(&before, &after);
        // The hash and the diff read one normal form.
        assert_eq!(
            changes.is_empty(),
            schema_hash(&before) == schema_hash(&after),
            "{name}: hash and diff disagree"
        );
        let got = worst_per_tool(&changes);
        let expected = pair["tools"].as_object().expect("tools");
        for tool in got.keys() {
            assert!(expected.contains_key(tool), "{name}: `{tool}` changed but is not judged in pairs.json");
        }
        for (tool, judgement) in expected {
            judged += 1;
            let want = judgement["worst"].as_str().expect("worst");
            let have = label(got.get(tool).copied());
            if have == want {
                agreed += 1;
            } else {
                let why = judgement["why"].as_str().unwrap_or_default();
                disagreements.push(format!("{name} · {tool}: reviewer {want}, driftline {have} ({why})"));
            }
        }
        let golden = golden_dir.join(format!("{server}@{old}..{new}.txt"));
        let text = render(&changes);
        if update {
            std::fs::create_dir_all(&golden_dir).expect("golden dir");
            std::fs::write(&golden, &text).expect("write golden");
        } else if std::fs::read_to_string(&golden).ok().as_deref() != Some(text.as_str()) {
            golden_drift.push(golden.display().to_string());
        }
    }
    let share = agreed as f64 / judged as f64;
    println!(
        "real releases: {agreed}/{judged} tools get the reviewer's worst severity ({:.1}%)",
        share * 100.0
    );
    for line in &disagreements {
        println!("  {line}");
    }
    // BREAKING both ways is exact: every BREAKING caught, nothing BREAKING a reviewer would not call so.
    let breaking: Vec<&String> = disagreements
        .iter()
        .filter(|d| d.contains("reviewer BREAKING") || d.contains("driftline BREAKING"))
        .collect();
    assert!(breaking.is_empty(), "BREAKING verdicts differ from the reviewer's:\n{breaking:#?}");
    assert!(disagreements.is_empty(), "verdicts differ from the reviewer's:\n{disagreements:#?}");
    assert!(
        golden_drift.is_empty(),
        "change lists differ from tests/real/golden (review, then UPDATE_GOLDEN=1): {golden_drift:#?}"
    );
}

/// Every tool of every captured list is written alike by the direct writer and by its normal form (the
/// hash reads the first, the diff the second); the direct writer takes most of them.
#[test]
fn real_tools_are_hashed_as_their_normal_form() {
    let (mut tools, mut direct) = (0usize, 0usize);
    let (mut text, mut scratch) = (String::new(), String::new());
    let servers = std::fs::read_dir(corpus().join("lists")).expect("tests/real/lists");
    for server in servers.map(|entry| entry.expect("a server").path()) {
        for version in
            std::fs::read_dir(&server).expect("a server's lists").map(|e| e.expect("a list").path())
        {
            let list = read_json(&version);
            // Within every default limit, references included (real tools copy in a few hundred nodes at most).
            let limits = driftline_schemas::ToolListLimits::default();
            let within = driftline_detectors::tool_drift::check_tool_list(
                &limits,
                list.as_array().map_or(&[], Vec::as_slice),
            );
            assert_eq!(within, Ok(()), "{}", version.display());
            // The tools' texts as captured (members in the server's order, its escapes).
            let file = std::fs::read_to_string(&version).expect("a list");
            let texts = driftline_schemas::ToolsText::parse(&file).expect("a list's entries");
            assert_eq!(Some(texts.len()), list.as_array().map(Vec::len), "{}", version.display());
            for (tool, entry) in list.as_array().into_iter().flatten().zip(texts.entries()) {
                let Some(object) = tool.as_object() else { continue };
                let Some(name) = object.get("name").and_then(Value::as_str) else { continue };
                tools += 1;
                if definition_text(name, object, &mut text) == Written::Directly {
                    direct += 1;
                }
                let normal = canonical_json(&Value::Object(normalize_tool(name, object).definition));
                assert_eq!(text, normal, "{}: tool {name}", version.display());
                // Read from its text, as the index reads it, the tool has the digest of its normal form.
                let digest: [u8; 32] = Sha256::digest(normal.as_bytes()).into();
                assert_eq!(
                    entry_digest(entry, &mut scratch),
                    Some((name.to_owned(), digest)),
                    "{}: tool {name}",
                    version.display()
                );
            }
        }
    }
    println!("real tools: {direct} of {tools} written directly");
    assert!(tools > 500, "the corpus holds {tools} tools");
}

/// The security review on every real tool as first seen (each distinct definition of the corpus once):
/// ordinary descriptions of real servers must not be held. Prints the false-flag rate by rule: a flag of
/// medium or higher on these tools holds a change for a person, so each one is a false alarm.
#[test]
fn real_descriptions_are_not_held_by_the_security_review() {
    use driftline_detectors::tool_drift::{review_tool, ToolNames};
    use driftline_schemas::Severity;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let (mut tools, mut held_tools) = (0usize, 0usize);
    let mut by_rule: BTreeMap<(String, Severity), usize> = BTreeMap::new();
    let mut held = Vec::new();
    let servers = std::fs::read_dir(corpus().join("lists")).expect("tests/real/lists");
    let mut paths: Vec<PathBuf> = servers
        .flat_map(|server| std::fs::read_dir(server.expect("a server").path()).expect("a server's lists"))
        .map(|entry| entry.expect("a list").path())
        .collect();
    paths.sort();
    for path in paths {
        let list = read_json(&path);
        let list = list.as_array().cloned().unwrap_or_default();
        let names: Vec<String> =
            list.iter().filter_map(|tool| tool["name"].as_str().map(str::to_owned)).collect();
        let tool_names = ToolNames::new(names.iter().map(String::as_str).collect());
        for tool in &list {
            let (Some(object), Some(name)) = (tool.as_object(), tool["name"].as_str()) else { continue };
            if !seen.insert(canonical_json(tool)) {
                continue;
            }
            tools += 1;
            let flags = review_tool(&normalize_tool(name, object), &tool_names);
            for flag in &flags {
                *by_rule.entry((flag.rule.clone(), flag.severity)).or_default() += 1;
            }
            let worst =
                flags.iter().filter(|flag| flag.severity >= Severity::Medium).max_by_key(|f| f.severity);
            if let Some(flag) = worst {
                held_tools += 1;
                held.push(format!(
                    "{} · {name}: {} {} «{}»",
                    path.display(),
                    flag.rule,
                    flag.severity.as_str(),
                    flag.excerpt
                ));
            }
        }
    }
    println!(
        "security review on {tools} distinct real tools: {held_tools} held ({:.2}% false flags of medium or higher)",
        100.0 * held_tools as f64 / tools.max(1) as f64
    );
    for ((rule, severity), count) in &by_rule {
        println!("  {rule} {}: {count}", severity.as_str());
    }
    for line in &held {
        println!("  held: {line}");
    }
    assert!(tools > 500, "the corpus holds {tools} distinct tools");
    assert!(held.is_empty(), "real tools held by the security review:\n{held:#?}");
}
