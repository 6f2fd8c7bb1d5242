//! The published JSON Schemas and the serde types agree on what a valid input message is.

use driftline_schemas::{
    OutputDeclaration, ToolCallSpan, ToolListSnapshot, OUTPUT_DECLARATION_JSON_SCHEMA,
    TOOL_CALL_SPAN_JSON_SCHEMA, TOOL_LIST_SNAPSHOT_JSON_SCHEMA,
};
use serde_json::{json, Value};

fn validator(schema: &str) -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(schema).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema is a valid JSON Schema")
}

/// `message` is valid per the JSON Schema exactly when serde reads it, and `valid` says which.
fn check<T: serde::de::DeserializeOwned>(validator: &jsonschema::Validator, message: Value, valid: bool) {
    assert_eq!(validator.is_valid(&message), valid, "JSON Schema on {message}");
    assert_eq!(serde_json::from_value::<T>(message.clone()).is_ok(), valid, "serde on {message}");
}

fn span(change: impl FnOnce(&mut Value)) -> Value {
    let mut span = json!({"schema_version": 1, "project": "default", "span_id": "s1", "trace_id": "t1",
        "session_id": "sess", "agent_name": "planner", "server": "search-mcp", "tool": "search_web",
        "started_at": "2026-03-26T08:15:42.000Z", "duration_ms": 12.5, "status": "success",
        "return_value": {"results": [{"title": "x"}]}});
    change(&mut span);
    span
}

#[test]
fn tool_call_span() {
    let v = validator(TOOL_CALL_SPAN_JSON_SCHEMA);
    check::<ToolCallSpan>(&v, span(|_| {}), true);
    check::<ToolCallSpan>(&v, span(|s| s["return_value"] = Value::Null), true);
    check::<ToolCallSpan>(&v, span(|s| drop(s.as_object_mut().map(|o| o.remove("return_value")))), true);
    check::<ToolCallSpan>(&v, span(|s| s["status"] = json!("error")), true);
    check::<ToolCallSpan>(&v, span(|s| s["status"] = json!("ok")), false);
    check::<ToolCallSpan>(&v, span(|s| drop(s.as_object_mut().map(|o| o.remove("span_id")))), false);
    check::<ToolCallSpan>(&v, span(|s| s["duration_ms"] = json!("12")), false);
    check::<ToolCallSpan>(&v, span(|s| s["unexpected"] = json!(1)), false);
    check::<ToolCallSpan>(&v, span(|s| s["schema_version"] = json!("1")), false);
    // Names: the same rules in the schema and in the types (ProjectName, ServerName, ToolName).
    for (field, name, valid) in [
        ("project", "team-a", true),
        ("project", "a/b", false),
        ("project", "..", false),
        ("server", "npm:server@1.0", true),
        ("server", ".", false),
        ("server", "a b", false),
        ("tool", "repo/list files", true),
        ("tool", "..", false),
        ("tool", "a\nb", false),
        ("tool", "", false),
    ] {
        check::<ToolCallSpan>(&v, span(|s| s[field] = json!(name)), valid);
    }
}

fn snapshot(change: impl FnOnce(&mut Value)) -> Value {
    let mut snapshot = json!({"schema_version": 1, "project": "default", "server": "search-mcp",
        "captured_at": "2026-03-26T08:15:42.000Z", "source": "probe",
        "tools": [{"name": "search_web", "description": "Search", "inputSchema": {"type": "object"}}]});
    change(&mut snapshot);
    snapshot
}

#[test]
fn tool_list_snapshot() {
    let v = validator(TOOL_LIST_SNAPSHOT_JSON_SCHEMA);
    check::<ToolListSnapshot>(&v, snapshot(|_| {}), true);
    check::<ToolListSnapshot>(&v, snapshot(|s| s["tools"] = json!([])), true);
    check::<ToolListSnapshot>(&v, snapshot(|s| s["source"] = json!("crawler")), false);
    check::<ToolListSnapshot>(&v, snapshot(|s| s["tools"] = json!({})), false);
    check::<ToolListSnapshot>(&v, snapshot(|s| drop(s.as_object_mut().map(|o| o.remove("server")))), false);
    check::<ToolListSnapshot>(&v, snapshot(|s| s["extra"] = json!(true)), false);
    check::<ToolListSnapshot>(&v, snapshot(|s| s["project"] = json!("a/b")), false);
    check::<ToolListSnapshot>(&v, snapshot(|s| s["server"] = json!("..")), false);
}

#[test]
fn the_schema_is_stricter_than_the_detector_about_tools() {
    // The published schema asks producers for named tool objects; the detector still copes with less
    // (it skips entries that are not tools), so a bad producer cannot stop a partition.
    let v = validator(TOOL_LIST_SNAPSHOT_JSON_SCHEMA);
    let nameless = snapshot(|s| s["tools"] = json!([{"description": "no name"}]));
    assert!(!v.is_valid(&nameless));
    assert!(serde_json::from_value::<ToolListSnapshot>(nameless).is_ok());
}

fn declaration(change: impl FnOnce(&mut Value)) -> Value {
    let mut declaration = json!({"schema_version": 1, "type": "output_declaration", "project": "default",
        "server": "weather-mcp", "tool": "get_forecast",
        "output_schema": {"type": "object", "properties": {"temp_c": {"type": "number"}}},
        "schema_hash": "0a1b2c3d", "declared_at": "2026-03-26T08:15:42.000Z", "sequence": 17});
    change(&mut declaration);
    declaration
}

#[test]
fn output_declaration() {
    let v = validator(OUTPUT_DECLARATION_JSON_SCHEMA);
    check::<OutputDeclaration>(&v, declaration(|_| {}), true);
    check::<OutputDeclaration>(
        &v,
        declaration(|d| (d["output_schema"], d["schema_hash"]) = (Value::Null, Value::Null)),
        true,
    );
    check::<OutputDeclaration>(&v, declaration(|d| d["extra"] = json!(1)), false);
    check::<OutputDeclaration>(&v, declaration(|d| d["tool"] = json!("..")), false);
    check::<OutputDeclaration>(&v, declaration(|d| d["sequence"] = json!("17")), false);
    check::<OutputDeclaration>(
        &v,
        declaration(|d| drop(d.as_object_mut().map(|o| o.remove("declared_at")))),
        false,
    );
    // A span is never a declaration, and a declaration never a span.
    assert!(serde_json::from_value::<OutputDeclaration>(span(|_| {})).is_err());
    assert!(serde_json::from_value::<ToolCallSpan>(declaration(|_| {})).is_err());
    let text =
        serde_json::to_vec(&serde_json::from_value::<OutputDeclaration>(declaration(|_| {})).expect("reads"))
            .expect("writes");
    assert!(OutputDeclaration::looks_like(&text), "what driftline writes is recognised before a full parse");
}
