//! `driftline diff`: two tool lists from files compared offline, and the drift report people read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::{Args, ValueEnum};
use driftline_detectors::context_cost::{self, ContextCostChange};
use driftline_detectors::tool_drift::{
    carried, check_tools_text, consequence, context_growth_change, cost_change, diff_indexed, diff_surfaces,
    max_classification, server_cost, server_hash, short_hash, ContextGrowth, IndexedList, ToolIndex,
};
use driftline_schemas::{Classification, SchemaChange, ServerSurfaces, Severity, ToolsText};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::ignore::{self, IgnoreEntry, IgnoredChange};
use super::reports;
use super::{read_input, EXIT_DRIFT, EXIT_OK};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline: a tools array, {"tools": [...]}, or a JSON-RPC tools/list response.
    old: PathBuf,
    /// The new tool list, in any of the same forms (or --url).
    #[arg(required_unless_present = "url")]
    new: Option<PathBuf>,
    /// Capture the new list from this live server (Streamable HTTP) instead of a file:
    /// `driftline diff --url URL BASELINE.json`.
    #[arg(long, conflicts_with = "new")]
    url: Option<String>,
    /// A request header for --url, as NAME=VALUE; repeat for more.
    #[arg(long = "header", value_name = "NAME=VALUE", requires = "url")]
    headers: Vec<String>,
    /// With --url: also write the captured list to FILE (the reports then point into it).
    #[arg(long, value_name = "FILE", requires = "url")]
    out: Option<PathBuf>,
    /// With --url: seconds to connect, and then to read every page of the lists.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    #[command(flatten)]
    pub report: ReportArgs,
}

/// How a diff is reported and judged: shared by `diff` and `upstream check`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// text, json, or for CI: sarif (SARIF 2.1.0 for code scanning), github (workflow-command annotations),
    /// markdown (a pull-request comment, worst changes first).
    #[arg(long, value_enum, default_value_t)]
    pub format: DiffFormat,
    /// Changes accepted on purpose: a TOML file of `[[ignore]]` entries (`tool`, `change`, `path`, `server`,
    /// a `reason`, an optional `expires` day). Ignored changes are reported as ignored; an expired entry
    /// suppresses nothing and is a warning.
    #[arg(long, value_name = "FILE")]
    pub ignore: Option<PathBuf>,
    /// The server the lists are of, for ignore entries that name one.
    #[arg(long)]
    pub server: Option<String>,
    /// Exit 1 when a change at or above this classification exists (otherwise the exit code is 0).
    #[arg(long, value_enum)]
    pub fail_on: Option<FailOn>,
    /// A new list (tools and instructions) costing a model's context more than this many tokens beyond
    /// the old one is a WARNING change, `context_cost_grew` (as the project setting of that name). 0: off.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000_000))]
    pub context_growth_tokens: u32,
    /// The same, in percent of the old list's tokens. 0: off.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub context_growth_percent: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    #[default]
    Text,
    Json,
    Sarif,
    Github,
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Breaking,
    Warning,
    Compatible,
}

impl FailOn {
    fn threshold(self) -> Classification {
        match self {
            FailOn::Breaking => Classification::Breaking,
            FailOn::Warning => Classification::Warning,
            FailOn::Compatible => Classification::Compatible,
        }
    }
}

#[derive(Serialize)]
struct DiffOutput<'a> {
    previous_hash: String,
    current_hash: String,
    max_classification: Option<Classification>,
    changes: &'a [SchemaChange],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    omitted_changes: &'a BTreeMap<Classification, u64>,
    /// What each list costs a model's context (`o200k_base` tokens and bytes of the tools array).
    context_cost: CostChange,
    /// Changes an ignore entry left out of the verdict, each with the entry's number and reason.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    ignored: &'a [IgnoredChange],
    /// Ignore entries past their day: they suppress nothing, and count as a WARNING for `--fail-on`.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    expired_ignores: &'a [IgnoreEntry],
}

#[derive(Serialize)]
struct CostChange {
    encoding: &'static str,
    #[serde(flatten)]
    change: ContextCostChange,
}

pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let old_text = read_input(Some(&args.old))?;
    let old_path = args.old.display().to_string();
    // The new list: a file, or captured from a live server (kept in --out when given).
    let (new_text, new_path) = match (&args.new, &args.url) {
        (Some(path), _) => (read_input(Some(path))?, path.display().to_string()),
        (None, Some(url)) => {
            let text = super::capture::capture_url(url, &args.headers, args.timeout)?;
            match &args.out {
                Some(path) => {
                    std::fs::write(path, &text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    (text.into_bytes(), path.display().to_string())
                }
                None => (text.into_bytes(), url.clone()),
            }
        }
        (None, None) => return Err(anyhow!("give the new list's file, or --url URL")),
    };
    report(Input { text: old_text, path: old_path }, Input { text: new_text, path: new_path }, &args.report)
}

/// A list to compare: its bytes, and how reports name it (a file's path, or an address).
pub struct Input {
    pub text: Vec<u8>,
    pub path: String,
}

/// Compares two lists, prints the report `args` ask for, and answers the exit code `--fail-on` gives.
pub fn report(old: Input, new: Input, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let entries = args.ignore.as_deref().map(ignore::load).transpose()?.unwrap_or_default();
    let (Input { text: old_text, path: old_path }, Input { text: new_text, path: new_path }) = (old, new);
    let ((old, old_surfaces), (new, new_surfaces)) =
        (server_from(&old_text, &old_path)?, server_from(&new_text, &new_path)?);
    // A file of tools only says nothing of the rest: the other file's surfaces stand for it.
    let new_surfaces = carried(new_surfaces.as_ref(), old_surfaces.as_ref());
    let old_surfaces = carried(old_surfaces.as_ref(), new_surfaces.as_ref());
    // Each list indexed once: the hashes and the diff read the same indexes, and the new list takes the
    // digests of tools declared as in the old one.
    let old_index = ToolIndex::new(&old);
    let old_list = IndexedList { tools: &old, index: &old_index };
    let new_index = ToolIndex::reusing(&new, &[old_list]);
    let new_list = IndexedList { tools: &new, index: &new_index };
    let mut listed = diff_indexed(old_list, new_list);
    let (surface_changes, surface_omitted) =
        diff_surfaces(old_surfaces.as_ref(), new_surfaces.as_ref(), Severity::Medium);
    listed.changes.extend(surface_changes);
    for (classification, count) in surface_omitted {
        *listed.omitted.entry(classification).or_default() += count;
    }
    // Counted as the detector counts a new list: the old whole, the new from the tools that changed.
    let before = server_cost(old_list, old_surfaces.as_ref());
    let cost = cost_change(before, (old_list, new_list), (old_surfaces.as_ref(), new_surfaces.as_ref()));
    let growth = ContextGrowth { tokens: args.context_growth_tokens, percent: args.context_growth_percent };
    if growth.exceeded(&cost) {
        listed.changes.push(context_growth_change(&cost));
    }
    let today = chrono::Utc::now().date_naive();
    let applied = ignore::apply(&entries, args.server.as_deref(), std::mem::take(&mut listed.changes), today);
    listed.changes = applied.kept;
    let output = DiffOutput {
        previous_hash: short_hash(&server_hash(&old_index.hash(), old_surfaces.as_ref())),
        current_hash: short_hash(&server_hash(&new_index.hash(), new_surfaces.as_ref())),
        max_classification: max_classification(&listed.changes),
        changes: &listed.changes,
        omitted_changes: &listed.omitted,
        context_cost: CostChange { encoding: context_cost::ENCODING, change: cost },
        ignored: &applied.ignored,
        expired_ignores: &applied.expired,
    };
    let text_of = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let (old_text, new_text) = (String::from_utf8_lossy(&old_text), String::from_utf8_lossy(&new_text));
    let ignore_text = args.ignore.as_deref().map(text_of).unwrap_or_default();
    let ignore_path = args.ignore.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
    let report = || reports::Report {
        old: reports::Source { path: &old_path, text: &old_text },
        new: reports::Source { path: &new_path, text: &new_text },
        ignore_file: args.ignore.as_ref().map(|_| reports::Source { path: &ignore_path, text: &ignore_text }),
        previous_hash: &output.previous_hash,
        current_hash: &output.current_hash,
        changes: output.changes,
        omitted: output.omitted_changes,
        ignored: output.ignored,
        expired: output.expired_ignores,
        context: &output.context_cost.change,
    };
    match args.format {
        DiffFormat::Json => println!("{}", serde_json::to_string_pretty(&output)?),
        DiffFormat::Sarif => println!("{}", serde_json::to_string_pretty(&reports::sarif(&report()))?),
        DiffFormat::Github => print!("{}", reports::github(&report())),
        DiffFormat::Markdown => print!("{}", reports::markdown(&report())),
        DiffFormat::Text => {
            print!(
                "{}",
                render_changes(
                    &output.previous_hash,
                    &output.current_hash,
                    output.changes,
                    output.omitted_changes,
                    &Default::default()
                )
            );
            let ContextCostChange { before, after, summary } = &output.context_cost.change;
            println!(
                "\nContext cost ({}): {} → {} tokens, {summary}; {} → {} bytes",
                context_cost::ENCODING,
                context_cost::grouped(before.tokens),
                context_cost::grouped(after.tokens),
                context_cost::grouped(before.bytes),
                context_cost::grouped(after.bytes),
            );
            for ignored in output.ignored {
                let change = &ignored.change;
                let place = if change.path.is_empty() {
                    change.tool_name.clone()
                } else {
                    format!("{} · {}", change.tool_name, change.path)
                };
                println!(
                    "Ignored {} {} {place} (entry {}: {})",
                    change.classification.as_str(),
                    change.change_type,
                    ignored.entry,
                    ignored.reason
                );
            }
        }
    }
    for entry in output.expired_ignores {
        let day = entry.expires.map(|day| day.to_string()).unwrap_or_default();
        eprintln!(
            "warning: ignore entry {} ({}) expired on {day} and no longer applies: {}",
            entry.entry,
            entry.describe(),
            entry.reason
        );
    }
    // An expired entry is a warning of its own.
    let expired = (!output.expired_ignores.is_empty()).then_some(Classification::Warning);
    let failed = match (args.fail_on, output.max_classification.max(expired)) {
        (Some(fail_on), Some(worst)) => worst >= fail_on.threshold(),
        _ => false,
    };
    Ok(ExitCode::from(if failed { EXIT_DRIFT } else { EXIT_OK }))
}

/// Accepts a tools array, `{"tools": [...]}`, or `{"result": {"tools": [...]}}`; the tools are kept as text.
/// A file's tools, and what the server declares besides them where the file holds it (`driftline
/// capture`'s object form, or a PUT body: `instructions`, `prompts`, `resources`, `resourceTemplates`).
fn server_from(bytes: &[u8], name: &str) -> anyhow::Result<(ToolsText, Option<ServerSurfaces>)> {
    let tools = tools_from(bytes, name)?;
    #[derive(Deserialize)]
    struct Declared {
        instructions: Option<String>,
        prompts: Option<Vec<Value>>,
        resources: Option<Vec<Value>>,
        #[serde(rename = "resourceTemplates")]
        resource_templates: Option<Vec<Value>>,
    }
    let surfaces = match bytes.first() {
        Some(b'{') => serde_json::from_slice::<Declared>(bytes)
            .ok()
            .map(|d| ServerSurfaces {
                instructions: d.instructions,
                prompts: d.prompts,
                resources: d.resources,
                resource_templates: d.resource_templates,
            })
            .filter(|surfaces| !surfaces.is_uncaptured()),
        _ => None,
    };
    Ok((tools, surfaces))
}

pub(super) fn load_tools(path: &Path) -> anyhow::Result<ToolsText> {
    tools_from(&read_input(Some(path))?, &path.display().to_string())
}

/// A list's tools from its text; `name` (a path, a URL) words the errors.
fn tools_from(bytes: &[u8], name: &str) -> anyhow::Result<ToolsText> {
    #[derive(Deserialize)]
    struct Wrapped<'a> {
        #[serde(borrow)]
        tools: Option<&'a RawValue>,
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    let not_json = || format!("{name} is not valid JSON");
    let text = std::str::from_utf8(bytes).with_context(not_json)?;
    let whole: &RawValue = serde_json::from_str(text).with_context(not_json)?;
    fn wrapped(text: &str) -> Option<Wrapped<'_>> {
        serde_json::from_str(text).ok()
    }
    let tools = match whole.get().as_bytes().first() {
        Some(b'[') => Some(whole),
        Some(b'{') => wrapped(whole.get()).and_then(|outer| {
            outer.tools.or_else(|| outer.result.and_then(|result| wrapped(result.get())?.tools))
        }),
        _ => None,
    };
    let Some(tools) = tools.and_then(|tools| ToolsText::parse(tools.get()).ok()) else {
        return Err(anyhow!(
            "{name}: expected a tools array, {{\"tools\": [...]}}, or a tools/list response {{\"result\": {{\"tools\": [...]}}}}"
        ));
    };
    // Files may hold lists of any length, but not references fanning out to millions of nodes (minutes
    // of work): the server's default for those.
    let limits = driftline_schemas::ToolListLimits {
        max_tools: usize::MAX,
        max_depth: usize::MAX,
        ..Default::default()
    };
    check_tools_text(&limits, &tools).with_context(|| name.to_owned())?;
    Ok(tools)
}

/// The drift report people read; `omitted` counts the changes found but not listed, `impact` holds lines
/// to print under the changes of each tool.
pub fn render_changes(
    previous_hash: &str,
    current_hash: &str,
    changes: &[SchemaChange],
    omitted: &BTreeMap<Classification, u64>,
    impact: &BTreeMap<String, Vec<String>>,
) -> String {
    let mut out = String::new();
    if changes.is_empty() {
        out.push_str(&format!("No drift: schema hash {current_hash} unchanged.\n"));
        return out;
    }
    const WORST_FIRST: [Classification; 3] =
        [Classification::Breaking, Classification::Warning, Classification::Compatible];
    let count = |c: Classification| {
        changes.iter().filter(|ch| ch.classification == c).count() as u64
            + omitted.get(&c).copied().unwrap_or(0)
    };
    let summary: Vec<String> = WORST_FIRST
        .into_iter()
        .filter(|c| count(*c) > 0)
        .map(|c| format!("{} {}", count(c), c.as_str().to_lowercase()))
        .collect();
    let total = changes.len() as u64 + omitted.values().sum::<u64>();
    out.push_str(&format!(
        "Schema drift {} → {}: {} change{} ({})\n",
        previous_hash,
        current_hash,
        total,
        if total == 1 { "" } else { "s" },
        summary.join(", ")
    ));
    let high =
        changes.iter().flat_map(|c| &c.security_flags).filter(|f| f.severity == Severity::High).count();
    if high > 0 {
        out.push_str(&format!(
            "⚠ {high} high-severity security flag{}: review the model-visible text before accepting.\n",
            if high == 1 { "" } else { "s" }
        ));
    }
    for change in changes {
        out.push('\n');
        let location = if change.path.is_empty() {
            change.tool_name.clone()
        } else {
            format!("{} · {}", change.tool_name, change.path)
        };
        out.push_str(&format!(
            "  {:<10} {:<26} {}\n",
            change.classification.as_str(),
            change.change_type.as_str(),
            location
        ));
        if !(change.before.is_null() && change.after.is_null()) {
            out.push_str(&format!("  {:<10} before: {}\n", "", compact(&change.before)));
            out.push_str(&format!("  {:<10} after:  {}\n", "", compact(&change.after)));
        }
        out.push_str(&format!("  {:<10} {}\n", "", consequence(change)));
        if change.classification != Classification::Compatible {
            for line in impact.get(&change.tool_name).into_iter().flatten() {
                out.push_str(&format!("  {:<10} Impact: {line}\n", ""));
            }
        }
        for flag in &change.security_flags {
            out.push_str(&format!(
                "  {:<10} ⚠ security {} ({}): {}\n",
                "",
                flag.rule,
                flag.severity.as_str(),
                flag.excerpt
            ));
        }
    }
    let unlisted: Vec<String> = WORST_FIRST
        .into_iter()
        .filter_map(|c| {
            omitted.get(&c).filter(|n| **n > 0).map(|n| format!("{n} {}", c.as_str().to_lowercase()))
        })
        .collect();
    if !unlisted.is_empty() {
        out.push_str(&format!(
            "\n  … and {} more change{} not listed ({}): at most {} of each kind are listed.\n",
            total - changes.len() as u64,
            if total - changes.len() as u64 == 1 { "" } else { "s" },
            unlisted.join(", "),
            driftline_detectors::tool_drift::LISTED_CHANGES_PER_KIND
        ));
    }
    out
}

fn compact(value: &Value) -> String {
    match value {
        Value::Null => "(absent)".to_owned(),
        other => other.to_string(),
    }
}
