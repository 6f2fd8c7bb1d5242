//! Tool-list normalise, hash and diff on any JSON: `[old, new]` (two lists) or one list (diffed with
//! itself). Never panics; a list never differs from itself; equal hashes mean no change; every tool's
//! definition is written alike straight from the declaration and from its normal form, and digested alike
//! from its text as sent (members in any order, repeated, escaped) and from its value. Every declared
//! output schema compiles and checks shapes without panicking, the same way twice. A list held as text is
//! checked against the limits as its values are.
#![no_main]

use driftline_detectors::contract::CompiledOutput;
use driftline_detectors::tool_drift::{
    canonical_json, check_tool_list, check_tools_text, declared_outputs, definition_digest, definition_text,
    diff_tools, entry_digest, normalize_tool, schema_hash,
};
use driftline_schemas::{ToolListLimits, ToolsText};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(parts)) = serde_json::from_slice::<Value>(data) else { return };
    let (old, new) = match parts.as_slice() {
        [Value::Array(old), Value::Array(new)] => (old.clone(), new.clone()),
        _ => (parts.clone(), parts),
    };
    // The worker's check of the input's own text (the borrowed reader where it can) answers as the check
    // of its values, at the default limits and at small ones.
    if let Some(entries) = std::str::from_utf8(data).ok().and_then(|text| ToolsText::parse(text).ok()) {
        let values = entries.values();
        let small = ToolListLimits { max_depth: 3, max_ref_nodes: 10, ..ToolListLimits::default() };
        for limits in [ToolListLimits::default(), small] {
            let as_text = check_tools_text(&limits, &entries).map_err(|err| err.to_string());
            assert_eq!(as_text, check_tool_list(&limits, &values).map_err(|err| err.to_string()));
        }
    }
    // Lists beyond the limits never reach the detector (ingest and the worker refuse them).
    let limits = ToolListLimits::default();
    if check_tool_list(&limits, &old).is_err() || check_tool_list(&limits, &new).is_err() {
        return;
    }
    let mut text = String::new();
    for tool in old.iter().chain(&new) {
        let Some(object) = tool.as_object() else { continue };
        let Some(name) = object.get("name").and_then(Value::as_str) else { continue };
        definition_text(name, object, &mut text);
        let normal = canonical_json(&Value::Object(normalize_tool(name, object).definition));
        assert_eq!(text, normal, "the hash and the diff read one normal form");
    }
    // The input's own text, as the detector holds lists: each entry digested from its text.
    if let Some(entries) = std::str::from_utf8(data).ok().and_then(|text| ToolsText::parse(text).ok()) {
        for entry in entries.entries() {
            let Ok(value) = serde_json::from_str::<Value>(entry.get()) else { continue };
            let expected = value.as_object().and_then(|object| {
                let name = object.get("name")?.as_str()?;
                Some((name.to_owned(), definition_digest(name, object, &mut text)))
            });
            assert_eq!(entry_digest(entry, &mut text), expected, "a tool's text digests as its value");
        }
    }
    let (old_hash, new_hash) = (schema_hash(&old), schema_hash(&new));
    assert_eq!(old_hash, schema_hash(&old), "the hash is deterministic");
    assert!(diff_tools(&old, &old).is_empty(), "a list differs from itself");
    let changes = diff_tools(&old, &new);
    if old_hash == new_hash {
        assert!(changes.is_empty(), "equal hashes, yet changes: {changes:?}");
    }
    // Declarations come from servers: a hostile one must not crash or stall the contract check.
    const SHAPES: [&str; 6] =
        ["{}", "null", "[number]", "{a:string,b:[{c:bool}]}", "{content:[{text:string}],structuredContent:{x:number}}", "<typed:t>"];
    for output in declared_outputs(&ToolsText::from_values(&new)).values() {
        let compiled = CompiledOutput::new(&output.schema);
        for shape in SHAPES {
            assert_eq!(compiled.check(shape), compiled.check(shape), "the check is deterministic");
        }
    }
});
