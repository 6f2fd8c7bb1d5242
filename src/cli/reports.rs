//! `driftline diff --format sarif|github|markdown`: the report in the forms CI systems read — SARIF 2.1.0
//! for code scanning, workflow commands for GitHub annotations, Markdown for a pull-request comment.

use std::collections::BTreeMap;

use driftline_detectors::context_cost::{self, ContextCostChange};
use driftline_detectors::tool_drift::consequence;
use driftline_schemas::{Classification, SchemaChange, Severity};
use serde_json::{json, Value};

use super::ignore::{IgnoreEntry, IgnoredChange};
use super::query_value;

/// A file the report points into: its path as given and its text (for line numbers).
pub struct Source<'a> {
    pub path: &'a str,
    pub text: &'a str,
}

/// Everything a report says.
pub struct Report<'a> {
    pub old: Source<'a>,
    pub new: Source<'a>,
    pub ignore_file: Option<Source<'a>>,
    pub previous_hash: &'a str,
    pub current_hash: &'a str,
    pub changes: &'a [SchemaChange],
    pub omitted: &'a BTreeMap<Classification, u64>,
    pub ignored: &'a [IgnoredChange],
    pub expired: &'a [IgnoreEntry],
    pub context: &'a ContextCostChange,
}

const WORST_FIRST: [Classification; 3] =
    [Classification::Breaking, Classification::Warning, Classification::Compatible];

impl Report<'_> {
    /// The changes, worst first (the detector's order within a classification).
    fn worst_first(&self) -> Vec<&SchemaChange> {
        let mut changes: Vec<&SchemaChange> = self.changes.iter().collect();
        changes.sort_by_key(|change| std::cmp::Reverse(change.classification));
        changes
    }

    /// `4 changes (2 breaking, 2 warning)`.
    fn counts(&self) -> String {
        let count = |c: Classification| {
            self.changes.iter().filter(|ch| ch.classification == c).count() as u64
                + self.omitted.get(&c).copied().unwrap_or(0)
        };
        let total: u64 = WORST_FIRST.iter().map(|c| count(*c)).sum();
        let parts: Vec<String> = WORST_FIRST
            .into_iter()
            .filter(|c| count(*c) > 0)
            .map(|c| format!("{} {}", count(c), c.as_str().to_lowercase()))
            .collect();
        match total {
            0 => "no changes".to_owned(),
            n => format!("{n} change{} ({})", if n == 1 { "" } else { "s" }, parts.join(", ")),
        }
    }

    /// Where a change points: a removed tool into the old file, the rest into the new one, at the line that
    /// names the tool (line 1 for server-wide changes or lists on one line).
    fn location(&self, change: &SchemaChange) -> (&str, usize) {
        let source = if change.after.is_null() && change.path.is_empty() && !change.before.is_null() {
            &self.old
        } else {
            &self.new
        };
        (source.path, line_naming(source.text, &change.tool_name))
    }

    fn context_line(&self) -> String {
        format!(
            "Context cost ({}): {} → {} tokens, {}",
            context_cost::ENCODING,
            context_cost::grouped(self.context.before.tokens),
            context_cost::grouped(self.context.after.tokens),
            self.context.summary
        )
    }

    fn unlisted(&self) -> u64 {
        self.omitted.values().sum()
    }

    fn expired_line(&self, entry: &IgnoreEntry) -> (String, usize) {
        let line = self.ignore_file.as_ref().map_or(1, |file| entry_line(file.text, entry.entry));
        let expires = entry.expires.map(|day| day.to_string()).unwrap_or_default();
        (
            format!(
                "ignore entry {} ({}) expired on {expires} and no longer applies: {}",
                entry.entry,
                entry.describe(),
                entry.reason
            ),
            line,
        )
    }
}

/// The 1-based line holding the tool's name as a JSON string after a `"name"` key; 1 when none does.
fn line_naming(text: &str, tool: &str) -> usize {
    if tool.is_empty() {
        return 1;
    }
    let quoted = serde_json::to_string(tool).unwrap_or_default();
    text.lines()
        .position(|line| line.contains("\"name\"") && line.contains(&quoted))
        .map_or(1, |index| index + 1)
}

/// The 1-based line of the `n`th `[[ignore]]` table of an ignore file.
fn entry_line(text: &str, n: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.trim_start().starts_with("[[ignore]]"))
        .nth(n.saturating_sub(1))
        .map_or(1, |(index, _)| index + 1)
}

fn place(change: &SchemaChange) -> String {
    match (change.tool_name.is_empty(), change.path.is_empty()) {
        (true, _) => change.path.clone(),
        (false, true) => change.tool_name.clone(),
        (false, false) => format!("{} · {}", change.tool_name, change.path),
    }
}

/// The message of a change: what it is, what it means, its security flags.
fn message(change: &SchemaChange) -> String {
    let mut text = format!(
        "{} {} {}: {}",
        change.classification.as_str(),
        change.change_type,
        place(change),
        consequence(change)
    );
    for flag in &change.security_flags {
        text.push_str(&format!(" ⚠ security {} ({}): {}", flag.rule, flag.severity.as_str(), flag.excerpt));
    }
    text
}

fn sarif_level(classification: Classification) -> &'static str {
    match classification {
        Classification::Breaking => "error",
        Classification::Warning => "warning",
        Classification::Compatible => "note",
    }
}

/// A SARIF 2.1.0 log of one run: a result per change (ignored ones carry a suppression with the reason),
/// one per expired ignore entry; rules are the change kinds met.
pub fn sarif(report: &Report<'_>) -> Value {
    let mut rules: BTreeMap<String, Value> = BTreeMap::new();
    let mut result = |change: &SchemaChange, suppression: Option<&str>| {
        rules.entry(change.change_type.as_str().to_owned()).or_insert_with(|| {
            json!({"id": change.change_type.as_str(),
                "shortDescription": {"text": format!("tool-list change: {}", change.change_type.as_str().replace('_', " "))},
                "defaultConfiguration": {"level": sarif_level(change.classification)}})
        });
        let (path, line) = report.location(change);
        let mut logical = json!({"name": if change.tool_name.is_empty() { "server" } else { change.tool_name.as_str() },
            "kind": if change.tool_name.is_empty() { "module" } else { "function" }});
        if !change.path.is_empty() {
            logical["fullyQualifiedName"] = json!(format!("{}/{}", change.tool_name, change.path));
        }
        let mut result = json!({
            "ruleId": change.change_type.as_str(),
            "level": sarif_level(change.classification),
            "message": {"text": message(change)},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(path)}, "region": {"startLine": line}},
                "logicalLocations": [logical]}],
            "partialFingerprints": {"driftlineChange/v1": format!("{}:{}:{}", change.tool_name, change.change_type, change.path)},
            "properties": {"classification": change.classification.as_str(),
                "securityFlags": change.security_flags.iter().map(|f| json!({"rule": f.rule, "severity": f.severity.as_str(), "excerpt": f.excerpt})).collect::<Vec<_>>()},
        });
        if let Some(reason) = suppression {
            result["suppressions"] = json!([{"kind": "external", "justification": reason}]);
        }
        result
    };
    let mut results: Vec<Value> =
        report.worst_first().into_iter().map(|change| result(change, None)).collect();
    results.extend(report.ignored.iter().map(|ignored| result(&ignored.change, Some(&ignored.reason))));
    if !report.expired.is_empty() {
        rules.insert(
            "expired_ignore".into(),
            json!({"id": "expired_ignore",
            "shortDescription": {"text": "an ignore entry past its expiry day"},
            "defaultConfiguration": {"level": "warning"}}),
        );
    }
    for entry in report.expired {
        let (text, line) = report.expired_line(entry);
        let path = report.ignore_file.as_ref().map_or("driftline-ignore.toml", |file| file.path);
        results.push(json!({"ruleId": "expired_ignore", "level": "warning", "message": {"text": text},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(path)}, "region": {"startLine": line}}}]}));
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "driftline", "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://modelcontextprotocol.io/specification",
                "rules": rules.into_values().collect::<Vec<_>>()}},
            "results": results,
            "properties": {"previousHash": report.previous_hash, "currentHash": report.current_hash,
                "summary": report.counts(), "unlistedChanges": report.unlisted(),
                "contextCost": {"encoding": context_cost::ENCODING, "before": report.context.before,
                    "after": report.context.after, "summary": report.context.summary}},
        }],
    })
}

/// A path as a SARIF URI reference: relative paths stay relative (code scanning resolves them against the
/// repository), with `/` separators.
fn uri(path: &str) -> String {
    let path = path.replace('\\', "/");
    let encoded = path.split('/').map(query_value).collect::<Vec<_>>().join("/");
    if path.starts_with('/') {
        format!("file://{encoded}")
    } else {
        encoded
    }
}

/// GitHub workflow commands: an annotation per change (error, warning, notice by classification), a notice
/// per ignored change with its reason, a warning per expired entry, then the summary and the context cost.
pub fn github(report: &Report<'_>) -> String {
    let mut out = String::new();
    let mut command = |kind: &str, file: &str, line: usize, title: &str, text: &str| {
        out.push_str(&format!(
            "::{kind} file={},line={line},title={}::{}\n",
            property(file),
            property(title),
            data(text)
        ));
    };
    for change in report.worst_first() {
        let kind = match change.classification {
            Classification::Breaking => "error",
            Classification::Warning => "warning",
            Classification::Compatible => "notice",
        };
        let (path, line) = report.location(change);
        let title = format!("{} {} {}", change.classification.as_str(), change.change_type, place(change));
        command(kind, path, line, &title, &message(change));
    }
    for ignored in report.ignored {
        let (path, line) = report.location(&ignored.change);
        let change = &ignored.change;
        let title = format!("ignored {} {}", change.change_type, place(change));
        command(
            "notice",
            path,
            line,
            &title,
            &format!("{} (ignore entry {}: {})", message(change), ignored.entry, ignored.reason),
        );
    }
    for entry in report.expired {
        let (text, line) = report.expired_line(entry);
        let path = report.ignore_file.as_ref().map_or("driftline-ignore.toml", |file| file.path);
        command("warning", path, line, &format!("expired ignore entry {}", entry.entry), &text);
    }
    let unlisted = match report.unlisted() {
        0 => String::new(),
        n => format!("; {n} more not listed"),
    };
    out.push_str(&format!(
        "::notice title=driftline::{}\n",
        data(&format!(
            "Schema drift {} → {}: {}{unlisted}, {} ignored. {}",
            report.previous_hash,
            report.current_hash,
            report.counts(),
            report.ignored.len(),
            report.context_line()
        ))
    ));
    out
}

/// A workflow command's message: `%`, CR and LF escaped.
fn data(text: &str) -> String {
    text.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A workflow command's property value: also `:` and `,`.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

/// A Markdown summary for a pull request: counts, the worst changes first in a table, security flags,
/// the context cost, ignored changes and expired entries.
pub fn markdown(report: &Report<'_>) -> String {
    let mut out = format!(
        "### driftline: `{}` → `{}` — {}\n\n",
        code(report.old.path),
        code(report.new.path),
        report.counts()
    );
    let high = report
        .changes
        .iter()
        .flat_map(|c| &c.security_flags)
        .filter(|f| f.severity == Severity::High)
        .count();
    if high > 0 {
        out.push_str(&format!(
            "> ⚠ **{high} high-severity security flag{}**: review the model-visible text before accepting.\n\n",
            if high == 1 { "" } else { "s" }
        ));
    }
    if !report.changes.is_empty() {
        out.push_str("| | change | where | what it means |\n|---|---|---|---|\n");
        for change in report.worst_first() {
            let badge = match change.classification {
                Classification::Breaking => "🔴 **BREAKING**",
                Classification::Warning => "🟡 WARNING",
                Classification::Compatible => "🟢 COMPATIBLE",
            };
            let mut meaning = cell(&consequence(change));
            for flag in &change.security_flags {
                meaning.push_str(&format!(
                    "<br>⚠ `{}` ({}): {}",
                    flag.rule,
                    flag.severity.as_str(),
                    cell(&flag.excerpt)
                ));
            }
            out.push_str(&format!(
                "| {badge} | `{}` | `{}` | {meaning} |\n",
                change.change_type,
                code(&place(change))
            ));
        }
        out.push('\n');
    }
    if report.unlisted() > 0 {
        out.push_str(&format!("… and {} more changes not listed.\n\n", report.unlisted()));
    }
    out.push_str(&format!("{}\n", cell(&report.context_line())));
    if !report.ignored.is_empty() {
        out.push_str(&format!("\n<details><summary>{} ignored change{}</summary>\n\n| change | where | reason |\n|---|---|---|\n",
            report.ignored.len(), if report.ignored.len() == 1 { "" } else { "s" }));
        for ignored in report.ignored {
            out.push_str(&format!(
                "| `{}` {} | `{}` | {} (entry {}) |\n",
                ignored.change.change_type,
                ignored.change.classification.as_str(),
                code(&place(&ignored.change)),
                cell(&ignored.reason),
                ignored.entry
            ));
        }
        out.push_str("\n</details>\n");
    }
    for entry in report.expired {
        out.push_str(&format!("\n> ⚠ {}\n", cell(&report.expired_line(entry).0)));
    }
    out
}

/// Text from a server or a file inside a code span: no backticks, one line, bounded.
fn code(text: &str) -> String {
    bounded(&text.replace('`', "'").replace(['\r', '\n'], " ").replace('|', "\\|"))
}

/// Text from a server in a table cell: one line, no HTML, no column breaks, bounded.
fn cell(text: &str) -> String {
    bounded(
        &text
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('|', "\\|")
            .replace(['\r', '\n'], " "),
    )
}

fn bounded(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_tool() {
        let text =
            "[\n  {\n    \"name\": \"search\",\n    \"description\": \"x\"\n  },\n  {\"name\": \"fetch\"}\n]";
        assert_eq!(line_naming(text, "search"), 3);
        assert_eq!(line_naming(text, "fetch"), 6);
        assert_eq!(line_naming(text, "gone"), 1);
        assert_eq!(line_naming(text, ""), 1);
        assert_eq!(entry_line("# x\n[[ignore]]\na = 1\n\n [[ignore]]\n", 2), 5);
    }

    #[test]
    fn workflow_command_values_are_escaped() {
        assert_eq!(data("50%\nnext"), "50%25%0Anext");
        assert_eq!(property("a:b,c"), "a%3Ab%2Cc");
    }

    #[test]
    fn markdown_cells_hold_server_text_as_text() {
        assert_eq!(cell("<img src=x onerror=alert(1)> | x\ny"), "&lt;img src=x onerror=alert(1)&gt; \\| x y");
        assert_eq!(code("a`b"), "a'b");
        assert_eq!(bounded(&"é".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn uris_stay_relative_and_are_encoded() {
        assert_eq!(uri("lists/new tools.json"), "lists/new%20tools.json");
        assert_eq!(uri("/abs/x.json"), "file:///abs/x.json");
        assert_eq!(uri("a\\b.json"), "a/b.json");
    }
}
