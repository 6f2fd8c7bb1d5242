//! Tool-list normalise, hash and diff on any JSON: `[old, new]` (two lists) or one list (diffed with
//! itself). Never panics; a list never differs from itself; equal hashes mean no change. Every declared
//! output schema compiles and checks shapes without panicking, the same way twice.
#![no_main]

use driftline_detectors::contract::CompiledOutput;
use driftline_detectors::tool_drift::{declared_outputs, diff_tools, schema_hash};
use driftline_schemas::ToolListLimits;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(parts)) = serde_json::from_slice::<Value>(data) else { return };
    let (old, new) = match parts.as_slice() {
        [Value::Array(old), Value::Array(new)] => (old.clone(), new.clone()),
        _ => (parts.clone(), parts),
    };
    // Lists beyond the limits never reach the detector (ingest and the worker refuse them).
    let limits = ToolListLimits::default();
    if limits.check(&old).is_err() || limits.check(&new).is_err() {
        return;
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
    for output in declared_outputs(&new).values() {
        let compiled = CompiledOutput::new(&output.schema);
        for shape in SHAPES {
            assert_eq!(compiled.check(shape), compiled.check(shape), "the check is deterministic");
        }
    }
});
