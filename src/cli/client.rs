//! Client commands against a running server (`--url`, `--api-key`, or `DRIFTLINE_URL`,
//! `DRIFTLINE_API_KEY`). Exit codes: 0 ok; 1 the answer reports a problem (`health`: a server is not UP;
//! `drift`: an open BREAKING event); 2 usage; 3 the server could not be reached or answered with an error.

use super::releases::{release_column, release_summary};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use comfy_table::{presets, Table};
use driftline_detectors::context_cost;
use driftline_schemas::api::{
    AcceptResult, ContractReport, ContractState, DeadLetterCount, DriftImpact, ServerHealth, ThresholdsView,
    ToolSchema,
};
use driftline_schemas::{
    BaselinePolicy, Classification, EventStatus, SchemaChange, SchemaDriftEvent, ServerStatus,
    ServerSurfaces, UpcomingRelease,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{query_value, Format, Unreachable, EXIT_DRIFT, EXIT_OK};

pub const EXIT_UNREACHABLE: u8 = 3;

#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// Server address.
    #[arg(long, env = "DRIFTLINE_URL", default_value = "http://127.0.0.1:8000", global = true)]
    pub url: String,
    /// Ingest address when ingest runs apart from the API (`driftline ingest`); default: --url.
    #[arg(long, env = "DRIFTLINE_INGEST_URL", global = true)]
    pub ingest_url: Option<String>,
    /// API key (sent as `Authorization: Bearer …`).
    #[arg(long, env = "DRIFTLINE_API_KEY", global = true, hide_env_values = true)]
    pub api_key: Option<String>,
    #[arg(long, value_enum, default_value_t, global = true)]
    pub format: Format,
}

pub struct Api {
    connection: Connection,
    agent: ureq::Agent,
}

impl Api {
    pub fn new(connection: Connection) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Api { connection, agent }
    }

    pub fn format(&self) -> Format {
        self.connection.format
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.connection.url.trim_end_matches('/'))
    }

    fn finish(
        &self,
        what: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut response = response.map_err(|err| {
            Unreachable(format!("cannot reach driftline at {}: {err}", self.connection.url))
        })?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status >= 400 {
            let message = body
                .get("error")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| body.to_string());
            return Err(Unreachable(format!("{what} failed: HTTP {status}: {message}")).into());
        }
        Ok((status, body))
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let mut request = self.agent.get(self.url(path));
        if let Some(key) = &self.connection.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let (_, body) = self.finish(&format!("GET {path}"), request.call())?;
        serde_json::from_value(body).with_context(|| format!("unexpected answer from GET {path}"))
    }

    pub fn delete(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        // Keyless servers take no request a cross-site form could send: name the JSON type, as for POST.
        let mut request = self.agent.delete(self.url(path)).header("Content-Type", "application/json");
        if let Some(key) = &self.connection.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        self.finish(&format!("DELETE {path}"), request.call())
    }

    pub fn send(&self, method: &str, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        // Spans and tool lists go to ingest; operator commands (POST under /api) to the API.
        let ingest = path.starts_with("/v1/") || (method == "PUT" && path.ends_with("/tools"));
        let url = match (&self.connection.ingest_url, ingest) {
            (Some(base), true) => format!("{}{path}", base.trim_end_matches('/')),
            _ => self.url(path),
        };
        let mut request = if method == "PUT" { self.agent.put(url) } else { self.agent.post(url) };
        request = request.header("Content-Type", "application/json");
        if let Some(key) = &self.connection.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        self.finish(&format!("{method} {path}"), request.send(body.to_string().as_bytes()))
    }
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn health(api: &Api, server: Option<&str>, wide: bool) -> anyhow::Result<ExitCode> {
    let servers: Vec<ServerHealth> = match server {
        Some(name) => vec![api.get(&format!("/api/health/servers/{name}"))?],
        None => api.get("/api/health/servers")?,
    };
    let healthy = servers.iter().filter(|s| s.status == ServerStatus::Up).count();
    match api.format() {
        Format::Json => print_json(&servers)?,
        Format::Text => {
            // The releases the upstream watcher captured, where it runs (a driftline without one has none).
            let releases: Vec<UpcomingRelease> =
                if wide { api.get("/api/upstream").unwrap_or_default() } else { Vec::new() };
            println!("{}", health_table(&servers, wide, &releases));
            // What the detector could not use: calls of tools beyond a limit among them.
            let dead: Vec<DeadLetterCount> = api.get("/api/health/dead-letters")?;
            print!("{}", dead_letter_lines(&dead));
        }
    }
    Ok(ExitCode::from(if healthy == servers.len() { EXIT_OK } else { EXIT_DRIFT }))
}

/// The health table; `wide` adds each server's context cost, when it was last seen and, where the upstream
/// watcher captured releases, the release in use and the newest.
pub fn health_table(servers: &[ServerHealth], wide: bool, releases: &[UpcomingRelease]) -> String {
    let mut table = Table::new();
    let mut header = vec!["SERVER", "STATUS", "LATENCY", "TOOLS"];
    if wide {
        header.extend(["CONTEXT (o200k_base)", "LAST SEEN"]);
    }
    let with_releases = wide && !releases.is_empty();
    if with_releases {
        header.push("RELEASE (IN USE → NEWEST)");
    }
    header.extend(["HASH", "NOTE"]);
    table.load_preset(presets::NOTHING).set_header(header);
    for server in servers {
        let status = serde_json::to_value(server.status)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let mut note = server.note.clone().unwrap_or_default();
        // The dashboard's words: open events, then the changes in them by classification.
        let events = server.open_drift.breaking + server.open_drift.warning + server.open_drift.compatible;
        if events > 0 {
            let changes = server.open_changes;
            note = format!(
                "{note} ({events} open event{}: {} breaking · {} warning · {} compatible)",
                if events == 1 { "" } else { "s" },
                changes.breaking,
                changes.warning,
                changes.compatible
            );
        }
        if server.max_severity == Some(driftline_schemas::Severity::High) {
            note = format!("⚠ HIGH-SEVERITY SECURITY FLAG · {note}");
        }
        if !server.contract_mismatches.is_empty() {
            note = format!(
                "{note} (returns mismatch the declared output: {})",
                server.contract_mismatches.join(", ")
            );
        }
        let mut row = vec![
            server.server_name.clone(),
            status,
            server.latency_ms.map_or_else(|| "-".into(), |ms| format!("{ms:.0} ms")),
            server.tool_count.to_string(),
        ];
        if wide {
            row.push(server.context_cost.map_or_else(
                || "-".into(),
                |cost| {
                    format!(
                        "{} tokens, {} bytes",
                        context_cost::grouped(cost.tokens),
                        context_cost::grouped(cost.bytes)
                    )
                },
            ));
            row.push(server.last_seen.map_or_else(|| "-".into(), |at| at.to_string()));
        }
        if with_releases {
            row.push(release_column(&release_summary(
                server.schema_hash.as_deref(),
                &server.server_name,
                releases,
            )));
        }
        row.extend([server.schema_hash.clone().unwrap_or_else(|| "-".into()), note.trim().to_owned()]);
        table.add_row(row);
    }
    let healthy = servers.iter().filter(|s| s.status == ServerStatus::Up).count();
    format!("{table}\n{healthy}/{} servers healthy", servers.len())
}

/// A line per kind of record the detector refused, with the newest reason; nothing when there are none.
pub fn dead_letter_lines(counts: &[DeadLetterCount]) -> String {
    counts
        .iter()
        .map(|count| {
            format!(
                "not tracked: {} record{} ({}), the last at {}: {}\n",
                count.count,
                if count.count == 1 { "" } else { "s" },
                count.kind.replace('_', " "),
                count.last_at,
                count.last_reason
            )
        })
        .collect()
}

/// Frees the detector state of a server (and its tools) or of one tool (admin key).
pub fn forget(api: &Api, server: &str, tool: Option<&str>) -> anyhow::Result<ExitCode> {
    let path = match tool {
        Some(tool) => format!("/api/tools/{}/{}/state", query_value(server), query_value(tool)),
        None => format!("/api/servers/{}/state", query_value(server)),
    };
    let (status, body) = api.delete(&path)?;
    let what = tool.map_or_else(|| server.to_owned(), |tool| format!("{server}/{tool}"));
    match api.format() {
        Format::Json => print_json(&body)?,
        Format::Text if status == 202 => {
            println!("Forgetting {what} is queued; it applies in order with the data.")
        }
        Format::Text => {
            let held = body.get("forgotten").and_then(Value::as_bool).unwrap_or(false);
            let tools = body.get("tools").and_then(Value::as_u64);
            match (held, tools) {
                (true, _) => {
                    println!("Forgot the detector state of {what}; it starts afresh when seen again.")
                }
                (false, _) => println!("No detector state held for {what}."),
            }
            if let Some(tools) = tools.filter(|&n| n > 0) {
                println!("Asked to forget {tools} tool{} of {server}.", if tools == 1 { "" } else { "s" });
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// The newest drift event of a server as a structural diff, with the agents each change affects.
pub fn drift(api: &Api, server: &str, hours: u32) -> anyhow::Result<ExitCode> {
    let history: Vec<SchemaDriftEvent> =
        api.get(&format!("/api/health/servers/{server}/drift-history?limit=1"))?;
    let Some(event) = history.first() else {
        match api.format() {
            Format::Json => print_json(&Value::Null)?,
            Format::Text => println!("No drift recorded for {server}."),
        }
        return Ok(ExitCode::from(EXIT_OK));
    };
    let mut impact: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut impacts = Vec::new();
    let tools: std::collections::BTreeSet<&str> = event
        .changes
        .iter()
        // Server-wide changes (instructions, context cost) name no tool.
        .filter(|c| c.classification != Classification::Compatible && !c.tool_name.is_empty())
        .map(|c| c.tool_name.as_str())
        .collect();
    for tool in tools {
        let answer: DriftImpact = api.get(&format!(
            "/api/health/servers/{server}/drift-impact?tool_name={}&hours={hours}",
            query_value(tool)
        ))?;
        impact.insert(tool.to_owned(), impact_lines(&answer));
        impacts.push(answer);
    }
    match api.format() {
        Format::Json => print_json(&serde_json::json!({"event": event, "impact": impacts}))?,
        Format::Text => {
            let status = match event.status {
                EventStatus::Open => "open".to_owned(),
                EventStatus::Accepted => {
                    format!("accepted by {}", event.accepted_by.as_deref().unwrap_or("?"))
                }
                EventStatus::Reverted => "reverted".to_owned(),
            };
            println!("{server} · detected {} · {status}", event.detected_at);
            print!(
                "{}",
                super::diff::render_changes(
                    &event.previous_hash,
                    &event.current_hash,
                    &event.changes,
                    &event.omitted_changes,
                    &impact
                )
            );
            if let Some(cost) = &event.context_cost {
                println!(
                    "\nContext cost ({}): {} → {} tokens, {}",
                    context_cost::ENCODING,
                    context_cost::grouped(cost.before.tokens),
                    context_cost::grouped(cost.after.tokens),
                    cost.summary
                );
            }
        }
    }
    let breaking_open =
        event.status == EventStatus::Open && event.max_classification == Some(Classification::Breaking);
    Ok(ExitCode::from(if breaking_open { EXIT_DRIFT } else { EXIT_OK }))
}

fn impact_lines(impact: &DriftImpact) -> Vec<String> {
    if impact.consumers.is_empty() {
        return vec![impact.message.clone().unwrap_or_default()];
    }
    impact
        .consumers
        .iter()
        .map(|c| {
            let risk = serde_json::to_value(c.risk)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let line = format!(
                "{} — {} sessions, {} calls, {} errors in {}h ({risk} risk)",
                c.agent_name, c.session_count, c.call_count, c.error_count, impact.window_hours
            );
            match c.arguments.as_ref().filter(|check| check.rejected_calls > 0) {
                Some(_) => format!("{line}: {}", real_calls(c)),
                None => line,
            }
        })
        .collect()
}

/// What the tool's current input schema says of an agent's real calls, in words (shared with notifications).
pub fn real_calls(consumer: &driftline_schemas::api::ToolConsumer) -> String {
    consumer.real_calls()
}

/// The documented consumer-impact report: which agents call a tool, and what to do about its open drift.
pub fn drift_impact(api: &Api, server: &str, tool: &str, hours: u32) -> anyhow::Result<ExitCode> {
    let impact: DriftImpact = api.get(&format!(
        "/api/health/servers/{server}/drift-impact?tool_name={}&hours={hours}",
        query_value(tool)
    ))?;
    let history: Vec<SchemaDriftEvent> =
        api.get(&format!("/api/health/servers/{server}/drift-history?limit=100"))?;
    // The newest open event that changes this tool, and its worst change for the tool.
    let open = history
        .iter()
        .find(|e| e.status == EventStatus::Open && e.changes.iter().any(|c| c.tool_name == tool));
    let worst =
        open.and_then(|e| e.changes.iter().filter(|c| c.tool_name == tool).max_by_key(|c| c.classification));
    match api.format() {
        Format::Json => print_json(&impact)?,
        Format::Text => print!("{}", impact_report(&impact, open, worst)),
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// The text of `drift-impact`, as the documented CLI prints it.
pub fn impact_report(
    impact: &DriftImpact,
    open: Option<&SchemaDriftEvent>,
    worst: Option<&SchemaChange>,
) -> String {
    let (server, tool) = (&impact.server_name, &impact.tool_name);
    let mut out = format!("Consumer Impact — {server} / {tool}\n");
    let change = match worst {
        Some(change) => {
            match change.param_name.as_deref().or((!change.path.is_empty()).then_some(change.path.as_str())) {
                Some(param) => format!("{} ({param})", change.change_type),
                None => change.change_type.to_string(),
            }
        }
        None => "none open".to_owned(),
    };
    out.push_str(&format!("Tool: {tool} | Change: {change}\n"));
    out.push_str(&format!("Window: last {} hours\n\n", impact.window_hours));
    if let Some(message) = &impact.message {
        out.push_str(&format!("{message}\n"));
    } else {
        let mut table = Table::new();
        table.load_preset(presets::UTF8_FULL_CONDENSED).set_header([
            "Agent",
            "Sessions",
            "Calls",
            "Errors",
            "Avg latency",
            "Last called",
            "Risk",
        ]);
        for c in &impact.consumers {
            let risk = serde_json::to_value(c.risk)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            table.add_row([
                c.agent_name.clone(),
                c.session_count.to_string(),
                c.call_count.to_string(),
                c.error_count.to_string(),
                format!("{:.0} ms", c.avg_latency_ms),
                c.last_called_at.to_string(),
                risk,
            ]);
        }
        out.push_str(&format!("{table}\n"));
        if impact.consumers.iter().any(|c| c.arguments.is_some()) {
            out.push_str("\nReal calls against the current input schema:\n");
            for c in &impact.consumers {
                out.push_str(&format!("  {}: {}\n", c.agent_name, real_calls(c)));
            }
        }
    }
    out.push_str(&format!(
        "\nTotal: {} sessions affected in the last {}h.\n",
        impact.total_sessions, impact.window_hours
    ));
    let breaking = open.is_some_and(|e| {
        e.changes.iter().any(|c| c.tool_name == *tool && c.classification == Classification::Breaking)
    });
    if let (true, Some(event)) = (breaking, open) {
        let rejected: Vec<String> = impact
            .consumers
            .iter()
            .filter(|c| c.arguments.as_ref().is_some_and(|check| check.rejected_calls > 0))
            .map(|c| format!("{}: {}", c.agent_name, real_calls(c)))
            .collect();
        let why = match rejected.is_empty() {
            true => String::new(),
            false => format!("{}. ", rejected.join("; ")),
        };
        out.push_str(&format!(
            "Recommendation: {why}Update callers or roll back {server} to {}.\n",
            event.previous_hash
        ));
    }
    out
}

/// The project's detector settings; with `--baseline` or `--security-hold`, changes them first (admin key).
pub fn settings(
    api: &Api,
    baseline: Option<BaselinePolicy>,
    hold: Option<driftline_schemas::SecurityHold>,
) -> anyhow::Result<ExitCode> {
    let mut body = serde_json::Map::new();
    if let Some(policy) = baseline {
        body.insert("baseline".into(), serde_json::json!(policy));
    }
    if let Some(hold) = hold {
        body.insert("security_hold".into(), serde_json::json!(hold));
    }
    let view: ThresholdsView = match body.is_empty() {
        false => {
            let body = Value::Object(body);
            let (_, answer) = api.send("PUT", "/api/settings/detector-thresholds", &body)?;
            serde_json::from_value(answer)
                .context("unexpected answer from PUT /api/settings/detector-thresholds")?
        }
        true => api.get("/api/settings/detector-thresholds")?,
    };
    match api.format() {
        Format::Json => print_json(&view)?,
        Format::Text => {
            let t = view.thresholds;
            println!("baseline policy: {}", t.baseline.as_str());
            println!("security hold: {}", t.security_hold.as_str());
            println!("min_history_calls: {}", t.min_history_calls);
            println!("history_window: {}", t.history_window);
            println!("tool_return_value_max_bytes: {}", t.tool_return_value_max_bytes);
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

pub fn drift_accept(api: &Api, server: &str) -> anyhow::Result<ExitCode> {
    let (status, body) =
        api.send("POST", &format!("/api/health/servers/{server}/drift-accept"), &Value::Null)?;
    match api.format() {
        Format::Json => print_json(&body)?,
        Format::Text if status == 202 => {
            println!("Accept of {server} is queued; it applies in order with the data.")
        }
        Format::Text => {
            let result: AcceptResult =
                serde_json::from_value(body).context("unexpected answer from drift-accept")?;
            if result.accepted {
                println!(
                    "Accepted {server}: baseline {} → {} ({} event{} accepted by {}).",
                    result.previous_hash.unwrap_or_default(),
                    result.new_hash.unwrap_or_default(),
                    result.event_ids.len(),
                    if result.event_ids.len() == 1 { "" } else { "s" },
                    result.accepted_by
                );
            } else {
                println!("Nothing to accept: {server} matches its baseline.");
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// Declared vs observed for one tool; exit 1 while its returns mostly mismatch the declaration.
pub fn contract(api: &Api, server: &str, tool: &str) -> anyhow::Result<ExitCode> {
    let report: ContractReport =
        api.get(&format!("/api/tools/{}/{}/contract", query_value(server), query_value(tool)))?;
    let mismatch = report.contract.as_ref().is_some_and(|c| c.state == ContractState::Mismatch);
    match api.format() {
        Format::Json => print_json(&report)?,
        Format::Text => print!("{}", contract_report(&report)),
    }
    Ok(ExitCode::from(if mismatch { EXIT_DRIFT } else { EXIT_OK }))
}

/// The text form of `driftline contract`.
pub fn contract_report(report: &ContractReport) -> String {
    let mut out = format!("Contract — {} / {}\n", report.server, report.tool);
    let Some(contract) = &report.contract else {
        out.push_str("Declared: no outputSchema in the accepted tool list — nothing to check.\n");
        if let Some(shape) = &report.observed_shape {
            out.push_str(&format!("Observed: {shape}\n"));
        }
        return out;
    };
    let schema = serde_json::to_string(&contract.declared_schema).unwrap_or_default();
    out.push_str(&format!(
        "Declared: {} (since {}) {schema}\n",
        contract.declared_hash, contract.declared_at
    ));
    match (&report.observed_shape, report.observed_share) {
        (Some(shape), Some(share)) => {
            out.push_str(&format!("Observed: {shape} ({:.0}% of the window)\n", share * 100.0))
        }
        _ => out.push_str("Observed: no dominant shape yet\n"),
    }
    let agreement = match report.agrees {
        Some(true) => "yes".to_owned(),
        Some(false) => {
            let why: Vec<String> = report.disagreements.iter().map(ToString::to_string).collect();
            format!("no — {}", why.join("; "))
        }
        None => "not known yet".to_owned(),
    };
    out.push_str(&format!("Agrees: {agreement}\n"));
    out.push_str(&format!(
        "State: {} · {} checked · {} mismatched · {} inconclusive · window {}/{} mismatched\n",
        contract.state.as_str(),
        contract.checked,
        contract.mismatched,
        contract.inconclusive,
        contract.window_mismatches,
        contract.window_size
    ));
    if let Some(last) = &contract.last_mismatch {
        let why: Vec<String> = last.reasons.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "Last mismatch: {} (span {}) {} — {}\n",
            last.at,
            last.span_id,
            last.shape,
            why.join("; ")
        ));
    }
    for group in &report.signal_groups {
        out.push_str(&format!(
            "Signal: {} · {} occurrence(s) · first {} · last {}\n",
            group.fingerprint, group.occurrences, group.first_seen, group.last_seen
        ));
    }
    if contract.state == ContractState::Mismatch {
        out.push_str("BREAKING: clients that validate structured results against the declared schema will reject these returns.\n");
    }
    out
}

pub fn schema(api: &Api, server: &str) -> anyhow::Result<ExitCode> {
    let tools: Vec<ToolSchema> = api.get(&format!("/api/servers/{server}/tools"))?;
    match api.format() {
        Format::Json => print_json(&tools)?,
        Format::Text => {
            let surfaces: ServerSurfaces = api.get(&format!("/api/servers/{server}/surfaces"))?;
            print!("{}", schema_text(server, &tools, &surfaces));
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// A server's tools with their parameters, then what it shows the model besides them.
fn schema_text(server: &str, tools: &[ToolSchema], surfaces: &ServerSurfaces) -> String {
    let mut out = format!("{server} · {} tools\n", tools.len());
    for tool in tools {
        out.push_str(&format!("\n  {}  {}\n", tool.tool_name, tool.description.as_deref().unwrap_or("")));
        let required: Vec<&str> = tool.input_schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for (name, param) in tool.input_schema["properties"].as_object().into_iter().flatten() {
            let kind = match &param["type"] {
                Value::String(t) => t.clone(),
                Value::Null => "any".into(),
                other => other.to_string(),
            };
            let badge = if required.contains(&name.as_str()) { "required" } else { "optional" };
            let description = param["description"].as_str().unwrap_or("");
            out.push_str(&format!("    {name:<20} {kind:<10} {badge:<9} {description}\n"));
        }
    }
    if let Some(instructions) = &surfaces.instructions {
        out.push_str("\nInstructions\n");
        for line in instructions.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    let text = |value: &Value, key: &str| value[key].as_str().unwrap_or("").to_owned();
    for (title, items) in surfaces.lists() {
        let Some(items) = items.filter(|items| !items.is_empty()) else { continue };
        out.push_str(&format!("\n{title} · {}\n", items.len()));
        for item in items {
            let name = [text(item, "name"), text(item, "uri"), text(item, "uriTemplate")]
                .into_iter()
                .find(|name| !name.is_empty())
                .unwrap_or_default();
            let location = [text(item, "uri"), text(item, "uriTemplate")].into_iter().find(|l| !l.is_empty());
            let about = [text(item, "description"), text(item, "title")]
                .into_iter()
                .find(|about| !about.is_empty())
                .unwrap_or_default();
            match location.filter(|location| *location != name) {
                Some(location) => out.push_str(&format!("\n  {name}  {location}  {about}\n")),
                None => out.push_str(&format!("\n  {name}  {about}\n")),
            }
            for argument in item["arguments"].as_array().into_iter().flatten() {
                let badge = if argument["required"] == Value::Bool(true) { "required" } else { "optional" };
                out.push_str(&format!(
                    "    {:<20} {badge:<9} {}\n",
                    text(argument, "name"),
                    text(argument, "description")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schema_shows_tools_then_instructions_prompts_and_resources() {
        let tools: Vec<ToolSchema> =
            serde_json::from_value(json!([{"server_name": "docs", "tool_name": "query",
            "description": "Runs a read query", "captured_at": "2026-12-07T00:00:00Z", "input_schema": {
            "type": "object", "required": ["sql"], "properties": {"sql": {"type": "string"}, "limit": {}}}}]))
            .expect("tools");
        let surfaces: ServerSurfaces = serde_json::from_value(json!({
            "instructions": "Use query for reads only.\nNever write.",
            "prompts": [{"name": "review_code", "description": "Reviews a diff",
                "arguments": [{"name": "diff", "required": true, "description": "the diff"}, {"name": "style"}]}],
            "resources": [{"uri": "db://schema", "name": "schema", "title": "Schema"}],
            "resourceTemplates": [{"uriTemplate": "db://tables/{t}", "description": "one table"}]}))
        .expect("surfaces");
        check_golden("schema_surfaces.txt", &schema_text("docs", &tools, &surfaces));
        let tools_only = schema_text("docs", &tools, &ServerSurfaces::default());
        assert!(
            tools_only.contains("sql")
                && !tools_only.contains("Instructions")
                && !tools_only.contains("Prompts")
        );
    }

    fn check_golden(name: &str, actual: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, actual).expect("write golden");
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(actual, expected, "differs from {} (UPDATE_GOLDEN=1 rewrites it)", path.display());
    }

    fn impact(consumers: Value, total: u64, message: Option<&str>) -> DriftImpact {
        serde_json::from_value(
            json!({"server_name": "search-mcp", "tool_name": "search_web", "window_hours": 24,
            "consumers": consumers, "total_sessions": total, "message": message}),
        )
        .expect("impact")
    }

    fn event(status: &str, classification: &str) -> SchemaDriftEvent {
        serde_json::from_value(json!({"id": "drift-1", "project": "default", "server_name": "search-mcp",
            "detected_at": "2026-03-26T08:15:42.000Z", "previous_hash": "a9e31f77", "current_hash": "c4b7d91e",
            "status": status, "max_classification": classification, "max_severity": null,
            "previous_tools": [], "current_tools": [],
            "changes": [{"change_type": "required_param_added", "classification": classification,
                "tool_name": "search_web", "param_name": "filters", "path": "filters", "direction": "input",
                "before": null, "after": {"type": "object", "required": true}, "security_flags": [],
                "param_type": "object"}]}))
        .expect("event")
    }

    #[test]
    fn the_documented_consumer_impact_report() {
        let consumers = json!([
            {"agent_name": "planner", "session_count": 12, "call_count": 24, "error_count": 0,
             "avg_latency_ms": 180.0, "last_called_at": "2026-03-26T08:15:42.000Z", "risk": "HIGH"},
            {"agent_name": "researcher", "session_count": 3, "call_count": 3, "error_count": 1,
             "avg_latency_ms": 920.4, "last_called_at": "2026-03-26T07:00:00.000Z", "risk": "MEDIUM"}]);
        let open = event("open", "BREAKING");
        let report = impact_report(&impact(consumers, 15, None), Some(&open), open.changes.first());
        check_golden("drift-impact.txt", &report);
    }

    #[test]
    fn the_consumer_impact_report_with_real_calls() {
        let consumers = json!([
            {"agent_name": "planner", "session_count": 12, "call_count": 24, "error_count": 0,
             "avg_latency_ms": 180.0, "last_called_at": "2026-03-26T08:15:42.000Z", "risk": "HIGH",
             "arguments": {"rejected_calls": 23, "accepted_calls": 1, "unknown_calls": 0,
                "reasons": ["filters: required by the declared schema, missing"]}},
            {"agent_name": "researcher", "session_count": 30, "call_count": 30, "error_count": 1,
             "avg_latency_ms": 920.4, "last_called_at": "2026-03-26T07:00:00.000Z", "risk": "MEDIUM",
             "arguments": {"rejected_calls": 0, "accepted_calls": 30, "unknown_calls": 0, "reasons": []}},
            {"agent_name": "legacy", "session_count": 3, "call_count": 3, "error_count": 0,
             "avg_latency_ms": 20.0, "last_called_at": "2026-03-26T07:00:00.000Z", "risk": "MEDIUM"}]);
        let open = event("open", "BREAKING");
        let report = impact_report(&impact(consumers, 45, None), Some(&open), open.changes.first());
        check_golden("drift-impact-real-calls.txt", &report);
    }

    #[test]
    fn tool_names_are_encoded_in_queries() {
        assert_eq!(query_value("search_web-2.v"), "search_web-2.v");
        assert_eq!(query_value("a&hours=1#x y/é"), "a%26hours%3D1%23x%20y%2F%C3%A9");
    }

    #[test]
    fn no_recommendation_without_open_breaking_drift() {
        let unused = impact(json!([]), 0, Some(driftline_schemas::api::NO_RECENT_CALLERS));
        let report = impact_report(&unused, None, None);
        assert!(report.contains("Tool: search_web | Change: none open\n"), "{report}");
        assert!(report.contains("No recent callers — tool may be unused.\n"), "{report}");
        assert!(report.contains("Total: 0 sessions affected in the last 24h.\n"), "{report}");
        assert!(!report.contains("Recommendation"), "{report}");
        let warning = event("open", "WARNING");
        let report = impact_report(&unused, Some(&warning), warning.changes.first());
        assert!(!report.contains("Recommendation"), "{report}");
    }
}
