//! `driftline replay`: a file of spans run through the return-shape detector offline.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::Args;
use driftline_detectors::shape::record_from_span;
use driftline_detectors::shape_drift::{signal, ToolShapeState};
use driftline_schemas::{
    DetectorThresholds, InputPosition, ProjectName, ShapeRanking, ShapeReason, ToolCallSpan, ToolKey,
};
use serde::Serialize;

use super::EXIT_OK;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A file of ToolCallSpan objects, one per line (JSON Lines); blank lines are skipped.
    spans: PathBuf,
    #[arg(long)]
    min_history_calls: Option<u32>,
    #[arg(long)]
    history_window: Option<u32>,
    /// The project's tool_return_value_max_bytes.
    #[arg(long)]
    max_bytes: Option<u32>,
}

/// One signal, as printed.
#[derive(Serialize)]
struct ReplayLine<'a> {
    index: usize,
    fingerprint: &'a str,
    server: &'a str,
    tool: &'a str,
    shape: &'a str,
    shape_hash: &'a str,
    baseline_hash: &'a str,
    baseline_count: u32,
    window_size: u32,
    ranking: ShapeRanking,
    reasons: &'a [ShapeReason],
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let defaults = DetectorThresholds::default();
    let thresholds = DetectorThresholds {
        min_history_calls: args.min_history_calls.unwrap_or(defaults.min_history_calls),
        history_window: args.history_window.unwrap_or(defaults.history_window),
        tool_return_value_max_bytes: args.max_bytes.unwrap_or(defaults.tool_return_value_max_bytes),
        ..defaults
    };
    thresholds.validate()?;
    let file =
        std::fs::File::open(&args.spans).with_context(|| format!("cannot read {}", args.spans.display()))?;
    let mut states: HashMap<ToolKey, ToolShapeState> = HashMap::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line_number = index + 1;
        let name = args.spans.display();
        let line = line.with_context(|| format!("{name}:{line_number}: cannot read line"))?;
        if line.trim().is_empty() {
            continue;
        }
        let span: ToolCallSpan = serde_json::from_str(&line)
            .map_err(|err| anyhow!("{name}:{line_number}: invalid span: {err}"))?;
        let project = span.project.clone().unwrap_or_else(ProjectName::default_project);
        // Replayed spans have no ingest time; their start time stands in for it.
        let record = record_from_span(&span, &project, span.started_at);
        let state = states.entry(record.key()).or_default();
        if let Some(firing) = state.observe((&record).into(), &thresholds) {
            let position = InputPosition { partition: 0, offset: index as u64 };
            let signal = signal(&record, position, firing);
            let printed = ReplayLine {
                index,
                fingerprint: &signal.fingerprint,
                server: &signal.server,
                tool: &signal.tool,
                shape: &signal.shape,
                shape_hash: &signal.shape_hash,
                baseline_hash: &signal.baseline_hash,
                baseline_count: signal.baseline_count,
                window_size: signal.window_size,
                ranking: signal.ranking,
                reasons: &signal.reasons,
            };
            writeln!(out, "{}", serde_json::to_string(&printed)?)?;
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
