//! Tests of `tool_drift`, by concern; the helpers every table shares are here.

mod context_cost;
mod kinds;
mod lifecycle;
mod limits;
mod listing;
mod meaning;
mod properties;
mod upcoming;

use driftline_schemas::{
    ChangeType, EventStatus, InputPosition, ServerStatus, SnapshotSource, Timestamp, ToolListSnapshot,
};
use proptest::prelude::*;
use serde_json::{json, Value};

use super::diff::Split;
use super::diff::ToolRoom;
use super::*;

/// One line per change: `CLASSIFICATION change_type tool path before -> after [flags]`.
fn render(changes: &[SchemaChange]) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            let flags: Vec<&str> = c.security_flags.iter().map(|f| f.rule.as_str()).collect();
            let mut line = format!(
                "{} {} {} {} {} -> {}",
                c.classification, c.change_type, c.tool_name, c.path, c.before, c.after
            );
            if !flags.is_empty() {
                line.push_str(&format!(" [{}]", flags.join(",")));
            }
            line
        })
        .collect()
}

fn tools(value: Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// Diffs a one-tool list whose input schema goes from `old` to `new`.
fn check_input(old: Value, new: Value, expected: &[&str]) {
    let old = tools(json!([{"name": "t", "inputSchema": old}]));
    let new = tools(json!([{"name": "t", "inputSchema": new}]));
    assert_eq!(render(&diff_tools(&old, &new)), expected);
}

fn check_output(old: Value, new: Value, expected: &[&str]) {
    let old = tools(json!([{"name": "t", "outputSchema": old}]));
    let new = tools(json!([{"name": "t", "outputSchema": new}]));
    assert_eq!(render(&diff_tools(&old, &new)), expected);
}

fn check(old: Value, new: Value, expected: &[&str]) {
    assert_eq!(render(&diff_tools(&tools(old), &tools(new))), expected);
}

fn obj(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn snapshot(tools: Value) -> ToolListSnapshot {
    ToolListSnapshot {
        schema_version: 1,
        project: "p".parse().expect("a valid name"),
        server: "s".parse().expect("a valid name"),
        captured_at: Timestamp::from_millis(0).expect("time"),
        source: SnapshotSource::Probe,
        latency_ms: None,
        tools: tools.as_array().cloned().unwrap_or_default(),
        surfaces: None,
        release: None,
    }
}

fn context(offset: u64) -> RecordContext<'static> {
    RecordContext {
        project: "p",
        server: "s",
        position: InputPosition { partition: 0, offset },
        at: Timestamp::from_millis(offset as i64 * 1000).expect("time"),
    }
}

/// A schema whose definitions each reference the next twice: `2^depth` leaves once expanded.
fn ref_bomb(depth: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..depth {
        let next = format!("#/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
        );
    }
    defs.insert(format!("d{depth}"), json!({"type": "string"}));
    json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs})
}
