//! Tests of the declared-output contract check, by concern; the helpers they share are here.

mod arguments;
mod budgets;
mod check;
mod parser;
mod properties;
mod state;

use std::time::{Duration, Instant};

use driftline_schemas::{
    CallStatus, DetectorThresholds, InputPosition, OutputDeclaration, ReasonChange, ShapeOutcome,
    ShapeRanking, ShapeReason, SignalKind, Timestamp, ToolCallRecord, OUTPUT_DECLARATION,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;
use crate::shape::fingerprint;
use crate::shape::parse::{parse, Node};

fn shape_of(value: &str) -> String {
    fingerprint(value.as_bytes(), 1 << 20).shape.unwrap_or_else(|| panic!("{value} has no shape"))
}

fn render(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Admitted => "admitted".to_owned(),
        Verdict::Inconclusive => "inconclusive".to_owned(),
        Verdict::Mismatch(reasons) => reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
    }
}

/// Checks the shape of `value` against `schema` (both JSON text) and compares the rendered verdict.
fn check(schema: &str, value: &str, expected: &str) {
    let schema: Value = serde_json::from_str(schema).unwrap_or_else(|e| panic!("schema {schema}: {e}"));
    let got = render(&super::check(&schema, &shape_of(value)));
    assert_eq!(got, expected, "schema {schema}\nvalue  {value}");
}

fn reasons(schema: Value, value: &str) -> Vec<ShapeReason> {
    match super::check(&schema, &shape_of(value)) {
        Verdict::Mismatch(reasons) => reasons,
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

const WEATHER: &str = r#"{"type":"object","properties":{"temp_c":{"type":"number"}},"required":["temp_c"],
    "additionalProperties":false}"#;

fn thresholds(min_history_calls: u32, history_window: u32) -> DetectorThresholds {
    DetectorThresholds { min_history_calls, history_window, ..DetectorThresholds::default() }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000 + second * 1000).unwrap_or_else(|| panic!("a time"))
}

fn declaration(sequence: u64, schema: Option<Value>) -> OutputDeclaration {
    OutputDeclaration {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        kind: OUTPUT_DECLARATION.into(),
        project: "p".parse().expect("a valid name"),
        server: "srv".parse().expect("a valid name"),
        tool: "weather".parse().expect("a valid name"),
        schema_hash: schema.as_ref().map(|schema| shape_hex8(&canonical_json(schema))),
        output_schema: schema,
        declared_at: at(0),
        sequence,
    }
}

fn view(state: &ToolContractState, thresholds: &DetectorThresholds) -> ToolContract {
    state.view(thresholds).unwrap_or_else(|| panic!("a declaration is held"))
}
