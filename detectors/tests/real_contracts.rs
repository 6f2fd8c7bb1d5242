//! Declared output schemas of real MCP servers (tests/real/lists/, 172 of them across 13 servers) held
//! to the contract check: a value built to meet a declaration is admitted, wrapped in a `CallToolResult`
//! too, and a value missing a property the declaration requires is a mismatch naming it. A false
//! mismatch here would be a BREAKING signal users get for a server that keeps its word.

use std::path::{Path, PathBuf};

use driftline_detectors::contract::{check, Verdict};
use driftline_detectors::shape::{fingerprint, LARGEST_MAX_BYTES};
use serde_json::{json, Map, Value};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/real/lists")
}

/// Every (file, tool, declared output schema) of the corpus.
fn declarations() -> Vec<(String, String, Value)> {
    let mut found = Vec::new();
    let mut servers: Vec<_> = std::fs::read_dir(corpus()).expect("tests/real/lists").flatten().collect();
    servers.sort_by_key(|entry| entry.path());
    for server in servers {
        let mut releases: Vec<_> = std::fs::read_dir(server.path()).expect("a server").flatten().collect();
        releases.sort_by_key(|entry| entry.path());
        for release in releases {
            let path = release.path();
            let text = std::fs::read_to_string(&path).expect("a list");
            let Ok(Value::Array(tools)) = serde_json::from_str::<Value>(&text) else { continue };
            for tool in tools {
                if let (Some(name), Some(schema @ Value::Object(_))) =
                    (tool["name"].as_str(), tool.get("outputSchema"))
                {
                    let file = path.strip_prefix(corpus()).unwrap_or(&path).display().to_string();
                    found.push((file, name.to_owned(), schema.clone()));
                }
            }
        }
    }
    found
}

/// The local definition a `$ref` names (`#/$defs/x`, `#/definitions/x`, any pointer).
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

/// A value that meets `schema`: every declared property present, the first type of a list, the first
/// non-null branch of a union, the first value of an enum; `None` past a depth (a recursive definition).
fn instance(root: &Value, schema: &Value, depth: usize) -> Option<Value> {
    if depth > 12 {
        return None;
    }
    let Value::Object(map) = schema else { return Some(json!("x")) };
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        return instance(root, resolve(root, reference)?, depth + 1);
    }
    if let Some(value) = map.get("const") {
        return Some(value.clone());
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        return values.first().cloned();
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get(union) {
            let not_null = |b: &&Value| b.get("type") != Some(&json!("null"));
            let branch = branches.iter().find(not_null).or(branches.first())?;
            return instance(root, branch, depth + 1);
        }
    }
    if let Some(Value::Array(branches)) = map.get("allOf") {
        let mut merged = Map::new();
        for branch in branches {
            if let Some(Value::Object(part)) = instance(root, branch, depth + 1) {
                merged.extend(part);
            }
        }
        return Some(Value::Object(merged));
    }
    let kind = match map.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => {
            kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null")
        }
        _ if map.contains_key("properties") => "object",
        _ if map.contains_key("items") => "array",
        _ => "string",
    };
    Some(match kind {
        "object" => {
            let mut object = Map::new();
            for (key, property) in map.get("properties").and_then(Value::as_object).into_iter().flatten() {
                if let Some(value) = instance(root, property, depth + 1) {
                    object.insert(key.clone(), value);
                }
            }
            Value::Object(object)
        }
        "array" => match map.get("items").and_then(|items| instance(root, items, depth + 1)) {
            Some(item) => json!([item]),
            None => json!([]),
        },
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("x"),
    })
}

fn verdict(schema: &Value, value: &Value) -> Verdict {
    let shape = fingerprint(value.to_string().as_bytes(), LARGEST_MAX_BYTES).shape.expect("a shape");
    check(schema, &shape)
}

#[test]
fn real_declarations_admit_what_they_declare_and_name_what_is_missing() {
    let declarations = declarations();
    assert!(declarations.len() >= 150, "the corpus holds the declared outputs: {}", declarations.len());
    let mut named = 0;
    for (file, tool, schema) in &declarations {
        let place = format!("{file} {tool}");
        let value = instance(schema, schema, 0).unwrap_or_else(|| panic!("{place}: no instance"));
        assert_eq!(verdict(schema, &value), Verdict::Admitted, "{place}: {value} against {schema}");
        // A whole CallToolResult as the recorded value is read at its structuredContent.
        let result = json!({"content": [{"type": "text", "text": value.to_string()}], "structuredContent": value,
            "isError": false});
        assert_eq!(verdict(schema, &result), Verdict::Admitted, "{place}: the envelope of {value}");
        // A required top-level property taken away is named (where the root is a plain object).
        let required = schema["required"].as_array().and_then(|r| r.first()).and_then(Value::as_str);
        if let (Some(key), Value::Object(mut object)) = (required, value.clone()) {
            if schema.get("anyOf").is_none() && schema.get("oneOf").is_none() && object.remove(key).is_some()
            {
                match verdict(schema, &Value::Object(object)) {
                    Verdict::Mismatch(reasons) => {
                        assert!(reasons.iter().any(|r| r.path == key), "{place}: {reasons:?} lacks {key}");
                        named += 1;
                    }
                    other => panic!("{place}: {key} removed, yet {other:?}"),
                }
            }
        }
    }
    assert!(named >= 50, "the required-property check ran on {named} declarations");
}
