//! `driftline diff --ignore FILE`: changes a team accepted on purpose, each with its reason and, optionally,
//! the day it stops applying. Ignored changes are reported as ignored, never dropped; an entry past its day
//! suppresses nothing and is itself a warning.
//!
//! ```toml
//! [[ignore]]
//! tool = "search_web"                 # any of tool, change, path (and server) — at least one of the first three
//! change = "required_param_added"     # a change kind
//! path = "filters"                    # where in the tool
//! reason = "planner sends filters since v2.3"
//! expires = 2027-03-01                # optional (TOML date, or "2027-03-01")
//! ```

use std::path::Path;

use anyhow::{anyhow, Context};
use chrono::NaiveDate;
use driftline_schemas::{ChangeType, SchemaChange};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IgnoreFile {
    #[serde(default)]
    ignore: Vec<RawEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    server: Option<String>,
    tool: Option<String>,
    change: Option<String>,
    path: Option<String>,
    reason: Option<String>,
    expires: Option<toml::Value>,
}

/// One entry of the file, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IgnoreEntry {
    /// 1-based, as people count the file's `[[ignore]]` tables.
    pub entry: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<NaiveDate>,
}

impl IgnoreEntry {
    fn matches(&self, server: Option<&str>, change: &SchemaChange) -> bool {
        let server_matches = self.server.as_deref().is_none_or(|wanted| server == Some(wanted));
        server_matches
            && self.tool.as_deref().is_none_or(|tool| tool == change.tool_name)
            && self.change.is_none_or(|kind| kind == change.change_type)
            && self.path.as_deref().is_none_or(|path| path == change.path)
    }

    /// What the entry names, in words: `tool search_web, required_param_added at filters`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(server) = &self.server {
            parts.push(format!("server {server}"));
        }
        if let Some(tool) = &self.tool {
            parts.push(format!("tool {tool}"));
        }
        if let Some(change) = self.change {
            parts.push(change.as_str().to_owned());
        }
        if let Some(path) = &self.path {
            parts.push(format!("at {path}"));
        }
        parts.join(", ")
    }
}

/// A change left out of the verdict by an entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IgnoredChange {
    pub change: SchemaChange,
    pub entry: usize,
    pub reason: String,
}

/// The changes after the entries: those that count, those ignored (with the entry's reason), and the
/// entries past their day.
#[derive(Debug, Default)]
pub struct Applied {
    pub kept: Vec<SchemaChange>,
    pub ignored: Vec<IgnoredChange>,
    pub expired: Vec<IgnoreEntry>,
}

/// Reads and checks an ignore file; errors name the file, the entry and the key.
pub fn load(path: &Path) -> anyhow::Result<Vec<IgnoreEntry>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text).with_context(|| format!("ignore file {}", path.display()))
}

pub fn parse(text: &str) -> anyhow::Result<Vec<IgnoreEntry>> {
    let file: IgnoreFile = toml::from_str(text).map_err(|err| anyhow!("{}", err.message()))?;
    file.ignore.into_iter().enumerate().map(|(index, raw)| checked(index + 1, raw)).collect()
}

fn checked(entry: usize, raw: RawEntry) -> anyhow::Result<IgnoreEntry> {
    let at = |what: String| anyhow!("entry {entry}: {what}");
    let reason =
        raw.reason.filter(|r| !r.trim().is_empty()).ok_or_else(|| at("`reason` is required".into()))?;
    if raw.tool.is_none() && raw.change.is_none() && raw.path.is_none() {
        return Err(at(
            "name at least one of `tool`, `change`, `path` (an entry ignoring everything is refused)".into(),
        ));
    }
    let change = raw
        .change
        .map(|kind| {
            serde_json::from_value::<ChangeType>(serde_json::Value::String(kind.clone())).map_err(|_| {
                at(format!("`change = {kind:?}` is not a change kind (e.g. required_param_added)"))
            })
        })
        .transpose()?;
    let expires = raw
        .expires
        .map(|value| {
            let text = match &value {
                toml::Value::String(text) => text.clone(),
                toml::Value::Datetime(date) => date.to_string(),
                other => other.to_string(),
            };
            NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                .map_err(|_| at(format!("`expires = {value}` is not a date (YYYY-MM-DD)")))
        })
        .transpose()?;
    Ok(IgnoreEntry { entry, server: raw.server, tool: raw.tool, change, path: raw.path, reason, expires })
}

/// Sorts `changes` by the entries on `today`: an entry applies through its `expires` day.
pub fn apply(
    entries: &[IgnoreEntry],
    server: Option<&str>,
    changes: Vec<SchemaChange>,
    today: NaiveDate,
) -> Applied {
    let (live, expired): (Vec<&IgnoreEntry>, Vec<&IgnoreEntry>) =
        entries.iter().partition(|entry| entry.expires.is_none_or(|day| today <= day));
    let mut applied = Applied { expired: expired.into_iter().cloned().collect(), ..Applied::default() };
    for change in changes {
        match live.iter().find(|entry| entry.matches(server, &change)) {
            Some(entry) => applied.ignored.push(IgnoredChange {
                change,
                entry: entry.entry,
                reason: entry.reason.clone(),
            }),
            None => applied.kept.push(change),
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use driftline_schemas::Classification;
    use serde_json::json;

    fn change(kind: ChangeType, tool: &str, path: &str) -> SchemaChange {
        SchemaChange::new(
            kind,
            Classification::Breaking,
            tool.into(),
            path.into(),
            None,
            (json!(null), json!(null)),
            vec![],
        )
    }

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("a date")
    }

    /// Which of three changes an ignore file leaves out on 2026-12-07, and which entries expired.
    fn check(file: &str, server: Option<&str>, ignored: &[&str], expired: &[usize]) {
        let changes = vec![
            change(ChangeType::RequiredParamAdded, "search_web", "filters"),
            change(ChangeType::ToolRemoved, "fetch", ""),
            change(ChangeType::RequiredParamAdded, "search_images", "filters"),
        ];
        let entries = parse(file).unwrap_or_else(|err| panic!("{file}: {err:#}"));
        let applied = apply(&entries, server, changes, day("2026-12-07"));
        let names: Vec<String> = applied
            .ignored
            .iter()
            .map(|i| format!("{}:{}", i.change.tool_name, i.change.change_type))
            .collect();
        assert_eq!(names, ignored, "{file}");
        assert_eq!(applied.kept.len() + applied.ignored.len(), 3, "no change is dropped");
        assert_eq!(applied.expired.iter().map(|e| e.entry).collect::<Vec<_>>(), expired, "{file}");
    }

    #[test]
    fn an_entry_ignores_exactly_what_it_names() {
        let entry = |fields: &str| format!("[[ignore]]\n{fields}\nreason = \"on purpose\"\n");
        check(&entry("tool = \"search_web\""), None, &["search_web:required_param_added"], &[]);
        check(
            &entry("change = \"required_param_added\""),
            None,
            &["search_web:required_param_added", "search_images:required_param_added"],
            &[],
        );
        check(
            &entry("change = \"required_param_added\"\npath = \"filters\"\ntool = \"search_images\""),
            None,
            &["search_images:required_param_added"],
            &[],
        );
        check(&entry("tool = \"fetch\"\nchange = \"tool_added\""), None, &[], &[]);
        check(&entry("tool = \"fetch\"\nserver = \"search-mcp\""), None, &[], &[]);
        check(
            &entry("tool = \"fetch\"\nserver = \"search-mcp\""),
            Some("search-mcp"),
            &["fetch:tool_removed"],
            &[],
        );
        check("", None, &[], &[]);
    }

    #[test]
    fn an_entry_past_its_day_suppresses_nothing_and_is_reported() {
        let file = "[[ignore]]\ntool = \"fetch\"\nreason = \"r\"\nexpires = 2026-12-06\n\n\
                    [[ignore]]\ntool = \"search_web\"\nreason = \"r\"\nexpires = \"2026-12-07\"\n";
        check(file, None, &["search_web:required_param_added"], &[1]);
    }

    #[test]
    fn bad_files_are_refused_naming_the_entry_and_the_key() {
        let refused = |file: &str, message: &str| {
            let err = format!("{:#}", parse(file).expect_err(file));
            assert!(err.contains(message), "{file}: {err}");
        };
        refused("[[ignore]]\ntool = \"a\"\n", "entry 1: `reason` is required");
        refused("[[ignore]]\nreason = \"r\"\n", "entry 1: name at least one of `tool`, `change`, `path`");
        refused("[[ignore]]\ntool = \"a\"\nreason = \"r\"\n[[ignore]]\nchange = \"tool_vanished\"\nreason = \"r\"\n", "entry 2: `change = \"tool_vanished\"` is not a change kind");
        refused("[[ignore]]\ntool = \"a\"\nreason = \"r\"\nexpires = \"next week\"\n", "is not a date");
        refused("[[ignore]]\ntool = \"a\"\nreason = \"r\"\nuntil = 2027-01-01\n", "unknown field `until`");
        refused("ignore = 3", "invalid type");
    }
}
