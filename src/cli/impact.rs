//! `driftline impact SERVER NEW_LIST.json`: which of a server's real, observed calls a candidate tool list
//! would reject, before it ships. Records nothing: each tool's input schema is checked against the
//! argument shapes driftline kept of its calls; a tool the candidate drops fails every call.

use std::path::PathBuf;
use std::process::ExitCode;

use driftline_schemas::api::{DriftImpact, ToolSchema};
use serde_json::{json, Value};

use super::client::{self, real_calls, Api};
use super::{Format, EXIT_DRIFT, EXIT_OK};

#[derive(Debug, clap::Args)]
pub struct ImpactArgs {
    /// The server as driftline knows it.
    server: String,
    /// The candidate list: a tools array, `{"tools": [...]}`, or a tools/list response (`driftline capture`).
    list: PathBuf,
    /// The window of observed calls, in hours [1, 720].
    #[arg(long, default_value_t = 24)]
    hours: u32,
    #[command(flatten)]
    connection: client::Connection,
}

/// One tool of the candidate (or of the server, when the candidate drops it) with its observed callers.
#[derive(serde::Serialize)]
struct ToolImpact {
    tool_name: String,
    /// `checked`: against the candidate's input schema; `removed`: the candidate drops the tool.
    candidate: &'static str,
    rejected_calls: u64,
    impact: DriftImpact,
}

pub fn run(args: ImpactArgs) -> anyhow::Result<ExitCode> {
    let api = Api::new(args.connection);
    let (server, hours) = (args.server.as_str(), args.hours);
    let candidate = super::diff::load_tools(&args.list)?.values();
    let current: Vec<ToolSchema> = api.get(&format!("/api/servers/{}/tools", super::query_value(server)))?;
    let mut tools = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for tool in &candidate {
        let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
        named.insert(name.to_owned());
        let schema = tool.get("inputSchema").cloned().unwrap_or_else(|| json!({}));
        let body = json!({"tool_name": name, "input_schema": schema, "hours": hours});
        let path = format!("/api/health/servers/{}/drift-impact", super::query_value(server));
        let (_, answer) = api.send("POST", &path, &body)?;
        let impact: DriftImpact = serde_json::from_value(answer)?;
        let rejected =
            impact.consumers.iter().filter_map(|c| c.arguments.as_ref()).map(|a| a.rejected_calls).sum();
        tools.push(ToolImpact {
            tool_name: name.to_owned(),
            candidate: "checked",
            rejected_calls: rejected,
            impact,
        });
    }
    for dropped in current.iter().filter(|tool| !named.contains(&tool.tool_name)) {
        let impact: DriftImpact = api.get(&format!(
            "/api/health/servers/{}/drift-impact?tool_name={}&hours={hours}",
            super::query_value(server),
            super::query_value(&dropped.tool_name)
        ))?;
        let rejected = impact.consumers.iter().map(|c| c.call_count).sum();
        tools.push(ToolImpact {
            tool_name: dropped.tool_name.clone(),
            candidate: "removed",
            rejected_calls: rejected,
            impact,
        });
    }
    let rejected: u64 = tools.iter().map(|t| t.rejected_calls).sum();
    match api.format() {
        Format::Json => println!("{}", serde_json::to_string_pretty(&tools)?),
        Format::Text => print!("{}", report(server, hours, &tools)),
    }
    Ok(ExitCode::from(if rejected > 0 { EXIT_DRIFT } else { EXIT_OK }))
}

fn report(server: &str, hours: u32, tools: &[ToolImpact]) -> String {
    let mut out = format!("Impact of the candidate list on {server}'s calls of the last {hours} hours\n\n");
    for tool in tools.iter().filter(|t| !t.impact.consumers.is_empty()) {
        out.push_str(&format!("{}:\n", tool.tool_name));
        for consumer in &tool.impact.consumers {
            let verdict = match tool.candidate {
                "removed" => {
                    format!("all {} calls would fail — the candidate removes the tool", consumer.call_count)
                }
                _ => real_calls(consumer),
            };
            out.push_str(&format!("  {}: {verdict}\n", consumer.agent_name));
        }
    }
    let rejected: u64 = tools.iter().map(|t| t.rejected_calls).sum();
    let unknown: u64 = tools
        .iter()
        .filter(|t| t.candidate == "checked")
        .flat_map(|t| &t.impact.consumers)
        .map(|c| c.arguments.as_ref().map_or(c.call_count, |a| a.unknown_calls))
        .sum();
    if unknown > 0 {
        out.push_str(&format!(
            "{unknown} calls could not be checked: their spans recorded no arguments (send `arguments`, or \
             `gen_ai.tool.call.arguments` over OTLP).\n"
        ));
    }
    let quiet = tools.iter().filter(|t| t.impact.consumers.is_empty()).count();
    if quiet > 0 {
        out.push_str(&format!("{quiet} tools had no calls in the window.\n"));
    }
    out.push_str(&match rejected {
        0 => "\nNo observed call would be rejected.\n".to_owned(),
        n => format!("\n{n} observed calls would be rejected: update the callers before this list ships.\n"),
    });
    out
}
