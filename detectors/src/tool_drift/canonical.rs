//! Canonical form and hash of a tool list (DESIGN.md §5 "Canonical hash").
//!
//! Tools are normalised once, and both the hash and the diff read the normalised form, so that two
//! lists hash alike exactly when the diff finds nothing between them.

use std::cmp::Ordering;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// A tool as the detector reads it: `_meta` and null members dropped, a missing `inputSchema` read as
/// `{}`, and every order-free array in its schemas sorted.
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
    for tool in tools {
        let Some(object) = tool.as_object() else { continue };
        let Some(name) = object.get("name").and_then(Value::as_str) else { continue };
        let mut definition = Map::new();
        for (key, value) in object {
            if key == "name" || key == "_meta" || value.is_null() {
                continue;
            }
            let value = match key.as_str() {
                "inputSchema" | "outputSchema" => normalize_schema(value),
                _ => value.clone(),
            };
            definition.insert(key.clone(), value);
        }
        // MCP requires both schemas to be of type object; saying so or not is no change.
        let input = definition.entry("inputSchema").or_insert_with(|| Value::Object(Map::new()));
        if let Some(schema) = input.as_object_mut() {
            schema.entry("type").or_insert_with(|| Value::String("object".into()));
        }
        if let Some(schema) = definition.get_mut("outputSchema").and_then(Value::as_object_mut) {
            schema.entry("type").or_insert_with(|| Value::String("object".into()));
        }
        normal.retain(|t| t.name != name);
        normal.push(NormalTool { name: name.to_owned(), definition });
    }
    normal.sort_by(|a, b| a.name.cmp(&b.name));
    normal
}

/// Keywords whose value is a schema, a map of schemas, or a list of schemas (JSON Schema 2020-12 and
/// the drafts MCP servers still send).
const SCHEMA_KEYWORDS: &[&str] = &[
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
];
const SCHEMA_MAP_KEYWORDS: &[&str] =
    &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];
const SCHEMA_LIST_KEYWORDS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];

/// Sorts (and dedupes) the arrays whose order carries no meaning — `required`, `enum`, a `type` list —
/// wherever a schema can sit; a one-element `type` list becomes the plain type. Data (`default`,
/// `const`, `examples`) is left as written.
pub fn normalize_schema(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else { return schema.clone() };
    let mut out = Map::new();
    for (key, value) in object {
        let normal = match (key.as_str(), value) {
            ("required" | "enum", Value::Array(items)) => Value::Array(sorted_unique(items)),
            ("type", Value::Array(items)) => match sorted_unique(items).as_slice() {
                [single] => single.clone(),
                many => Value::Array(many.to_vec()),
            },
            (k, Value::Object(map)) if SCHEMA_MAP_KEYWORDS.contains(&k) => {
                Value::Object(map.iter().map(|(name, s)| (name.clone(), normalize_schema(s))).collect())
            }
            (k, Value::Array(items)) if SCHEMA_LIST_KEYWORDS.contains(&k) || k == "items" => {
                Value::Array(items.iter().map(normalize_schema).collect())
            }
            (k, value) if SCHEMA_KEYWORDS.contains(&k) => normalize_schema(value),
            (_, value) => value.clone(),
        };
        out.insert(key.clone(), normal);
    }
    Value::Object(out)
}

fn sorted_unique(items: &[Value]) -> Vec<Value> {
    let mut keyed: Vec<(String, &Value)> = items.iter().map(|v| (canonical_json(v), v)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    keyed.into_iter().map(|(_, v)| v.clone()).collect()
}

/// RFC 8785 (JCS) serialization: keys sorted by UTF-16 code units, no whitespace, numbers as ECMAScript
/// writes IEEE doubles, strings with the minimal JSON escapes.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(&mut out, value);
    out
}

fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(number) => {
            // serde_json holds finite numbers only; big integers round to the nearest double, as JCS says.
            let float = number.as_f64().unwrap_or(0.0);
            out.push_str(ryu_js::Buffer::new().format_finite(float));
        }
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| utf16_cmp(a.0, b.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_canonical(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, text: &str) {
    // serde_json escapes exactly what JCS requires: `"`, `\`, and controls (short forms where they exist,
    // otherwise lowercase \u00xx), and writes everything else as UTF-8.
    out.push_str(&Value::String(text.to_owned()).to_string());
}

fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The `schema_hash` of a normalised tool list: SHA-256 of the canonical JSON array of its tools, in
/// lowercase hex.
pub fn tools_hash(tools: &[NormalTool]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"[");
    for (index, tool) in tools.iter().enumerate() {
        if index > 0 {
            hasher.update(b",");
        }
        let mut object = tool.definition.clone();
        object.insert("name".into(), Value::String(tool.name.clone()));
        hasher.update(canonical_json(&Value::Object(object)).as_bytes());
    }
    hasher.update(b"]");
    hex::encode(hasher.finalize())
}

/// Hash of everything but the name: equal for a tool that was only renamed.
pub fn definition_hash(tool: &NormalTool) -> String {
    hex::encode(Sha256::digest(canonical_json(&Value::Object(tool.definition.clone())).as_bytes()))
}

/// `schema_hash` of a declared tool list.
pub fn schema_hash(tools: &[Value]) -> String {
    tools_hash(&normalize_tools(tools))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(input: Value, expected: &str) {
        assert_eq!(canonical_json(&input), expected);
    }

    #[test]
    fn jcs_numbers_strings_and_key_order() {
        check(json!(10.0), "10");
        check(json!(1e21), "1e+21");
        check(json!(0.000001), "0.000001");
        check(json!(1e-7), "1e-7");
        check(json!(-0.0), "0");
        check(json!(123456789012345678u64), "123456789012345680");
        check(json!("\u{7f}é\n\u{1}"), "\"\u{7f}é\\n\\u0001\"");
        check(json!({"b": 1, "a": [true, null], "": {}}), r#"{"":{},"a":[true,null],"b":1}"#);
        // U+E000 sorts after U+1F600 in UTF-8 but before it in UTF-16 (a surrogate pair starts 0xD83D).
        check(json!({"\u{e000}": 1, "\u{1f600}": 2}), "{\"\u{1f600}\":2,\"\u{e000}\":1}");
    }

    #[test]
    fn order_free_arrays_are_sorted_where_schemas_sit() {
        let schema = json!({"type": ["string", "null", "string"], "required": ["b", "a"],
            "properties": {"f": {"enum": [3, 1, 2], "default": [3, 1]}, "g": {"type": ["integer"]}},
            "anyOf": [{"required": ["y", "x"]}]});
        assert_eq!(
            normalize_schema(&schema),
            json!({"type": ["null", "string"], "required": ["a", "b"],
                "properties": {"f": {"enum": [1, 2, 3], "default": [3, 1]}, "g": {"type": "integer"}},
                "anyOf": [{"required": ["x", "y"]}]})
        );
    }

    #[test]
    fn normalisation() {
        let tools = json!([
            {"name": "b", "description": null, "_meta": {"x": 1}},
            "not a tool",
            {"description": "no name"},
            {"name": "a", "inputSchema": {"type": "object"}},
            {"name": "b", "description": "later wins"}
        ]);
        let normal = normalize_tools(tools.as_array().expect("array"));
        let names: Vec<&str> = normal.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            Value::Object(normal[1].definition.clone()),
            json!({"description": "later wins", "inputSchema": {"type": "object"}})
        );
    }

    #[test]
    fn hash_ignores_tool_order_key_order_meta_and_missing_input_schema() {
        let a =
            json!([{"name": "x", "inputSchema": {"type": "object", "required": ["p", "q"]}}, {"name": "y"}]);
        let b = json!([{"name": "y", "inputSchema": {}, "_meta": {"v": 2}},
            {"inputSchema": {"required": ["q", "p"], "type": "object"}, "name": "x"}]);
        assert_eq!(schema_hash(a.as_array().expect("a")), schema_hash(b.as_array().expect("b")));
        let c = json!([{"name": "x", "inputSchema": {"type": "object", "required": ["p"]}}, {"name": "y"}]);
        assert_ne!(schema_hash(a.as_array().expect("a")), schema_hash(c.as_array().expect("c")));
    }
}
