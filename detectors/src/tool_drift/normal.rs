//! The normal form of a tool list: what a client can observe, not how the server spelled it.
//!
//! Both the hash and the diff read this form, so two lists hash alike exactly when the diff finds
//! nothing between them. Normalising removes every difference that changes nothing for a client:
//! tool metadata at its MCP default, schema annotations, local `$ref`s (expanded, see `refs.rs`), and
//! constraints written in one of several equivalent ways (`equivalences.rs`, one row each).

use serde_json::{Map, Value};

use super::canonical::sort_unique;
use super::equivalences::EQUIVALENCES;
use super::keywords::{keywords_present, SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS};
use super::refs::inline_local_refs;

/// A tool as the detector reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalTool {
    pub name: String,
    /// The tool object without `name`.
    pub definition: Map<String, Value>,
}

/// Normalises a declared tool list: entries that are not objects with a string `name` are not tools and
/// are left out; of two tools with one name the later wins (as with duplicate JSON keys). Sorted by name.
pub fn normalize_tools(tools: &[Value]) -> Vec<NormalTool> {
    let mut normal: Vec<NormalTool> = Vec::with_capacity(tools.len());
    // Where each name sits in `normal`, so a later duplicate replaces it without a scan.
    let mut position: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for tool in tools {
        let Some((name, object)) = tool_of(tool) else { continue };
        let tool = normalize_tool(name, object);
        match position.get(name) {
            Some(&at) => normal[at] = tool,
            None => {
                position.insert(name, normal.len());
                normal.push(tool);
            }
        }
    }
    normal.sort_by(|a, b| a.name.cmp(&b.name));
    normal
}

/// An entry of a tool list that is a tool: an object with a string `name`.
pub fn tool_of(entry: &Value) -> Option<(&str, &Map<String, Value>)> {
    let object = entry.as_object()?;
    Some((object.get("name")?.as_str()?, object))
}

/// One tool's normal form (its `name` already read from it): the members that say something copied, then
/// normalised as [`normalize_tool_owned`] does.
pub fn normalize_tool(name: &str, object: &Map<String, Value>) -> NormalTool {
    let kept = object.iter().filter(|(key, value)| says_something(key, value));
    normalize_tool_owned(name, kept.map(|(key, value)| (key.clone(), value.clone())).collect())
}

/// Members a tool's normal form leaves out whatever their value: its name (read apart), `_meta`, nulls.
fn says_something(key: &str, value: &Value) -> bool {
    !(key == "name" || key == "_meta" || value.is_null())
}

/// One tool's normal form from a tool read for this alone: its members are moved into the normal form
/// rather than copied (the diff reads each changed tool this way; copying was a fifth of its time).
pub fn normalize_tool_owned(name: &str, object: Map<String, Value>) -> NormalTool {
    let mut definition = Map::new();
    for (key, value) in object {
        if !says_something(&key, &value) {
            continue;
        }
        let value = match (key.as_str(), value) {
            ("description" | "title", Value::String(text)) if is_layout_free(&text) => Value::String(text),
            ("description" | "title", Value::String(text)) => Value::String(layout_free(&text)),
            ("inputSchema" | "outputSchema", value) => normalize_root_schema_owned(value),
            ("annotations", value) => match normalize_annotations(&value) {
                Some(value) => value,
                None => continue,
            },
            ("execution", value) => match normalize_execution(&value) {
                Some(value) => value,
                None => continue,
            },
            (_, value) => value,
        };
        definition.insert(key, value);
    }
    // MCP requires both schemas to be of type object; saying so or not is no change.
    let input = definition.entry("inputSchema").or_insert_with(|| Value::Object(Map::new()));
    if let Some(schema) = input.as_object_mut() {
        schema.entry("type").or_insert_with(|| Value::String("object".into()));
    }
    if let Some(schema) = definition.get_mut("outputSchema").and_then(Value::as_object_mut) {
        schema.entry("type").or_insert_with(|| Value::String("object".into()));
    }
    NormalTool { name: name.to_owned(), definition }
}

/// [`layout_free`], without building the text again when it has no layout to lose (most descriptions).
fn layout_free_copy(text: &str) -> String {
    if is_layout_free(text) {
        text.to_owned()
    } else {
        layout_free(text)
    }
}

/// Whether [`layout_free`] leaves the text as it is: words apart by single spaces, lines by one line
/// break or one blank line, nothing before the first word or after the last, no other whitespace.
pub(super) fn is_layout_free(text: &str) -> bool {
    #[derive(PartialEq)]
    enum After {
        Start,
        Word,
        Space,
        LineBreak,
        BlankLine,
    }
    let mut after = After::Start;
    for c in text.chars() {
        after = match (c, after) {
            (' ', After::Word) => After::Space,
            ('\n', After::Word) => After::LineBreak,
            ('\n', After::LineBreak) => After::BlankLine,
            (' ' | '\n', _) => return false,
            (c, _) if c.is_whitespace() => return false,
            (_, After::Start | After::Word | After::LineBreak | After::BlankLine | After::Space) => {
                After::Word
            }
        };
    }
    matches!(after, After::Start | After::Word)
}

/// Model-visible text without its layout: line endings, indentation, trailing spaces, runs of spaces and
/// blank lines say nothing, so re-indenting a description is no change. Words and line breaks stay, and
/// so does every character that is not whitespace (invisible and direction characters are the security
/// review's business).
pub fn layout_free(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else {
            blank_run = !out.is_empty();
            continue;
        };
        if !out.is_empty() {
            out.push_str(if blank_run { "\n\n" } else { "\n" });
        }
        blank_run = false;
        out.push_str(first);
        for word in words {
            out.push(' ');
            out.push_str(word);
        }
    }
    out
}

/// The MCP defaults of the tool annotation hints (2025-11-25 `ToolAnnotations`).
pub const ANNOTATION_DEFAULTS: &[(&str, bool)] =
    &[("readOnlyHint", false), ("destructiveHint", true), ("idempotentHint", false), ("openWorldHint", true)];

/// Hints whose meaning the spec limits to tools that are not read-only.
pub(super) const WRITE_ONLY_HINTS: &[&str] = &["destructiveHint", "idempotentHint"];

/// Annotations by effective value: a hint at its default says nothing, and neither do the write hints
/// of a read-only tool. `None` when nothing is left.
fn normalize_annotations(annotations: &Value) -> Option<Value> {
    let Some(object) = annotations.as_object() else { return Some(annotations.clone()) };
    let read_only = object.get("readOnlyHint") == Some(&Value::Bool(true));
    let normal: Map<String, Value> = object
        .iter()
        .filter(|(key, value)| {
            let at_default =
                ANNOTATION_DEFAULTS.iter().any(|(hint, default)| key == hint && **value == *default);
            let moot = read_only && WRITE_ONLY_HINTS.contains(&key.as_str());
            !value.is_null() && !at_default && !moot
        })
        .map(|(key, value)| match (key.as_str(), value) {
            ("title", Value::String(text)) => (key.clone(), Value::String(layout_free_copy(text))),
            _ => (key.clone(), value.clone()),
        })
        .collect();
    (!normal.is_empty()).then_some(Value::Object(normal))
}

/// `execution` without `taskSupport: "forbidden"`, the default. `None` when nothing is left.
fn normalize_execution(execution: &Value) -> Option<Value> {
    let Some(object) = execution.as_object() else { return Some(execution.clone()) };
    let normal: Map<String, Value> = object
        .iter()
        .filter(|(key, value)| !(value.is_null() || (*key == "taskSupport" && *value == "forbidden")))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    (!normal.is_empty()).then_some(Value::Object(normal))
}

/// A tool's input or output schema: local references expanded (their definitions dropped once every
/// reference was followed), then every schema inside normalised.
pub fn normalize_root_schema(schema: &Value) -> Value {
    // Most schemas hold no reference: expanding them would only copy them (and follow nothing, so every
    // reference is followed and definitions say nothing).
    if !mentions_ref(schema) {
        return normalize(schema, true);
    }
    let mut inlined = inline_local_refs(schema);
    normalize_in_place(&mut inlined.schema, inlined.complete);
    inlined.schema
}

/// [`normalize_root_schema`] of a schema the caller gives up: normalised where it lies.
fn normalize_root_schema_owned(mut schema: Value) -> Value {
    if mentions_ref(&schema) {
        return normalize_root_schema(&schema);
    }
    normalize_in_place(&mut schema, true);
    schema
}

/// Nodes the normal forms of `tools` copy in by expanding references, counted up to just past `limit`
/// (the count stops at the first schema that takes it beyond): what a list costs beyond its own size.
pub fn ref_expansion(tools: &[Value], limit: usize) -> usize {
    let mut copied = 0usize;
    for tool in tools.iter().filter_map(Value::as_object) {
        for key in ["inputSchema", "outputSchema"] {
            if let Some(schema) = tool.get(key).filter(|schema| mentions_ref(schema)) {
                copied = copied.saturating_add(inline_local_refs(schema).copied);
                if copied > limit {
                    return copied;
                }
            }
        }
    }
    copied
}

/// Whether a `$ref` key appears anywhere (also where it is no keyword: a property named `$ref` only
/// costs the fast path).
pub(super) fn mentions_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(mentions_ref),
        Value::Array(items) => items.iter().any(mentions_ref),
        _ => false,
    }
}

/// Normalises a schema that holds no references (or whose references stay as written).
pub fn normalize_schema(schema: &Value) -> Value {
    normalize(schema, false)
}

fn normalize(schema: &Value, drop_definitions: bool) -> Value {
    let mut schema = schema.clone();
    normalize_in_place(&mut schema, drop_definitions);
    schema
}

/// Normalises a copy where it lies: most of a schema is already in normal form, and rebuilding every
/// map (rather than changing the few members that differ) would cost most of the time.
fn normalize_in_place(schema: &mut Value, drop_definitions: bool) {
    let Value::Object(object) = schema else { return };
    object.retain(|key, _| match key.as_str() {
        "$defs" | "definitions" => !drop_definitions,
        "$schema" | "$id" | "$comment" | "$anchor" | "$dynamicAnchor" => false,
        _ => true,
    });
    for (key, value) in object.iter_mut() {
        match (key.as_str(), value) {
            ("required" | "enum", Value::Array(items)) => sort_unique(items),
            ("type", value @ Value::Array(_)) => {
                if let Value::Array(items) = value {
                    sort_unique(items);
                    if let [single] = items.as_mut_slice() {
                        let single = single.take();
                        *value = single;
                    }
                }
            }
            (k, Value::Object(map)) if SCHEMA_MAP_KEYWORDS.contains(&k) => {
                map.values_mut().for_each(|s| normalize_in_place(s, drop_definitions))
            }
            (k, Value::Array(items)) if SCHEMA_LIST_KEYWORDS.contains(&k) || k == "items" => {
                items.iter_mut().for_each(|s| normalize_in_place(s, drop_definitions))
            }
            (k, value) if SCHEMA_KEYWORDS.contains(&k) => normalize_in_place(value, drop_definitions),
            ("description" | "title", Value::String(text)) if !is_layout_free(text) => {
                *text = layout_free(text);
            }
            _ => {}
        }
    }
    // A rewrite runs only where a keyword it reads is present; what one rewrite changes, the next sees.
    let mut present = keywords_present(object);
    for equivalence in EQUIVALENCES {
        if present & equivalence.reads != 0 {
            (equivalence.rewrite)(object);
            present = keywords_present(object);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tool_drift::canonical::canonical_json;

    use super::*;

    #[test]
    fn every_equivalence_row_holds() {
        for row in EQUIVALENCES {
            let example: Value = serde_json::from_str(row.example).expect(row.name);
            let same_as: Value = serde_json::from_str(row.same_as).expect(row.name);
            assert_ne!(example, same_as, "{}: the example must be spelled differently", row.name);
            assert_eq!(normalize_schema(&example), normalize_schema(&same_as), "{}", row.name);
        }
    }

    /// Normalises two schemas and says whether they read the same.
    fn same(a: Value, b: Value) -> bool {
        normalize_root_schema(&a) == normalize_root_schema(&b)
    }

    #[test]
    fn equivalent_spellings() {
        let int = |extra: Value| {
            let mut schema = json!({"type": "integer"});
            schema.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
            schema
        };
        assert!(same(int(json!({"exclusiveMinimum": 0})), int(json!({"minimum": 1}))));
        assert!(same(int(json!({"minimum": 0, "exclusiveMinimum": true})), int(json!({"minimum": 1}))));
        assert!(same(int(json!({"exclusiveMaximum": 100})), int(json!({"maximum": 99}))));
        assert!(same(int(json!({"maximum": 9007199254740991u64})), int(json!({}))));
        assert!(same(int(json!({"maximum": 1e300})), int(json!({}))));
        assert!(!same(int(json!({"maximum": 9007199254740990u64})), int(json!({}))));
        // Not for numbers: 0.5 is above 0 and below 1.
        assert!(!same(
            json!({"type": "number", "exclusiveMinimum": 0}),
            json!({"type": "number", "minimum": 1})
        ));
        assert!(same(
            json!({"type": ["integer", "null"], "exclusiveMinimum": 0}),
            json!({"type": ["null", "integer"], "minimum": 1})
        ));
        assert!(same(json!({"type": "string", "minLength": 0}), json!({"type": "string"})));
        assert!(same(json!({"type": ["string"]}), json!({"type": "string"})));
        assert!(same(json!({"enum": ["a", "b"]}), json!({"type": "string", "enum": ["b", "a"]})));
        assert!(!same(json!({"enum": ["a", 1]}), json!({"type": "string", "enum": ["a", 1]})));
        assert!(same(json!({"const": 3}), json!({"type": "integer", "enum": [3]})));
        assert!(same(
            json!({"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}),
            json!({"type": ["string", "null"], "default": null})
        ));
        assert!(same(
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "$id": "x", "$comment": "c",
                "type": "object"}),
            json!({"type": "object"})
        ));
    }

    #[test]
    fn references_read_as_what_they_point_to() {
        let inline = json!({"type": "object", "properties": {"parent": {"type": "object",
            "properties": {"page_id": {"type": "string"}}, "required": ["page_id"]}}});
        let behind_defs = json!({"type": "object", "properties": {"parent": {"$ref": "#/$defs/Parent"}},
            "$defs": {"Parent": {"type": "object", "properties": {"page_id": {"type": "string"}},
                "required": ["page_id"]}}});
        let renamed = json!({"type": "object", "properties": {"parent": {"$ref": "#/definitions/P"}},
            "definitions": {"P": {"type": "object", "properties": {"page_id": {"type": "string"}},
                "required": ["page_id"]}}});
        // Pydantic v1 wraps a reference in a one-branch allOf to give it a description.
        let wrapped = json!({"type": "object", "properties": {"parent": {"allOf": [{"$ref": "#/$defs/Parent"}]}},
            "$defs": {"Parent": {"type": "object", "properties": {"page_id": {"type": "string"}},
                "required": ["page_id"]}, "Unused": {"type": "integer"}}});
        assert!(same(inline.clone(), behind_defs));
        assert!(same(inline.clone(), renamed));
        assert!(same(inline, wrapped));
    }

    proptest::proptest! {
        /// The check that spares rebuilding a text agrees with rebuilding it.
        #[test]
        fn layout_free_text_is_recognised(text in "[ab \n\r\t\u{a0}\u{2003}]{0,12}") {
            proptest::prop_assert_eq!(is_layout_free(&text), layout_free(&text) == text);
        }

        /// Lists of plain strings are sorted without writing them, in their canonical JSON's order.
        #[test]
        fn order_free_strings_sort_as_their_canonical_json(
            items in proptest::collection::vec("[ !#a-c\"\u{1}\u{e9}]{0,3}", 0..6)
        ) {
            let mut items: Vec<Value> = items.into_iter().map(Value::String).collect();
            let mut expected: Vec<(String, Value)> = items.iter().map(|v| (canonical_json(v), v.clone())).collect();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            expected.dedup_by(|a, b| a.0 == b.0);
            sort_unique(&mut items);
            proptest::prop_assert_eq!(items, expected.into_iter().map(|(_, v)| v).collect::<Vec<_>>());
        }
    }

    #[test]
    fn text_layout_is_no_change() {
        let check = |text: &str, expected: &str| assert_eq!(layout_free(text), expected, "{text:?}");
        check("  Search   the web.\r\n", "Search the web.");
        check("Line one\n    line two\n\n\n\tPara two  ", "Line one\nline two\n\nPara two");
        check("", "");
        check("a\u{200b}b \u{202e}c", "a\u{200b}b \u{202e}c");
        assert_ne!(layout_free("one line"), layout_free("one\nline"));
    }

    #[test]
    fn annotations_by_effective_value() {
        let check = |annotations: Value, expected: Option<Value>| {
            assert_eq!(normalize_annotations(&annotations), expected, "{annotations}");
        };
        check(
            json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}),
            None,
        );
        check(json!({"title": "T", "readOnlyHint": false}), Some(json!({"title": "T"})));
        check(
            json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}),
            Some(json!({"readOnlyHint": true})),
        );
        check(json!({"destructiveHint": false}), Some(json!({"destructiveHint": false})));
        check(json!("not an object"), Some(json!("not an object")));
        assert_eq!(normalize_execution(&json!({"taskSupport": "forbidden"})), None);
        assert_eq!(
            normalize_execution(&json!({"taskSupport": "optional"})),
            Some(json!({"taskSupport": "optional"}))
        );
    }

    #[test]
    fn normalisation() {
        let tools = json!([
            {"name": "b", "description": null, "_meta": {"x": 1}},
            "not a tool",
            {"description": "no name"},
            {"name": "a", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false},
                "execution": {"taskSupport": "forbidden"}},
            {"name": "b", "description": "later wins"}
        ]);
        let normal = normalize_tools(tools.as_array().expect("array"));
        let names: Vec<&str> = normal.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(Value::Object(normal[0].definition.clone()), json!({"inputSchema": {"type": "object"}}));
        assert_eq!(
            Value::Object(normal[1].definition.clone()),
            json!({"description": "later wins", "inputSchema": {"type": "object"}})
        );
    }

    #[test]
    fn order_free_arrays_are_sorted_where_schemas_sit() {
        let schema = json!({"type": ["string", "null", "string"], "required": ["b", "a"],
            "properties": {"f": {"enum": [3, 1, 2], "default": [3, 1]}, "g": {"type": ["integer"]}},
            "anyOf": [{"required": ["y", "x"]}, {"required": ["z"]}]});
        assert_eq!(
            normalize_schema(&schema),
            json!({"type": ["null", "string"], "required": ["a", "b"],
                "properties": {"f": {"type": "integer", "enum": [1, 2, 3], "default": [3, 1]},
                    "g": {"type": "integer"}},
                "anyOf": [{"required": ["x", "y"]}, {"required": ["z"]}]})
        );
    }
}
