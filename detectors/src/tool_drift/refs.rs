//! Local `$ref` resolution: a schema is compared by what it accepts, not by how it is spelled, so a
//! definition moved behind `$ref: "#/$defs/…"` (or inlined again, or renamed) reads the same.
//!
//! Every `$ref` that is a JSON pointer into the same schema (`#/$defs/X`, `#/definitions/X`,
//! `#/properties/a/items`, `#`) is replaced by the schema it points to. A reference back into a
//! definition that is being expanded (a recursive schema) is not followed: it becomes a marker naming
//! how many expansions up it points (`#recursive/0` is the innermost), so recursive definitions compare
//! by position and depth, never by name, and never loop. Expansion stops at a node budget, so a schema
//! whose references fan out exponentially costs bounded time and memory; references past the budget,
//! and references that point nowhere or outside the schema, are kept as written.

use serde_json::{Map, Value};

use super::keywords::{SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS};

/// How many JSON nodes the expansion of one schema may copy in.
const INLINE_BUDGET: usize = 50_000;

/// How deep in the expanded schema a reference is still followed. A chain of definitions each pointing
/// at the next would otherwise nest (and recurse) as deep as the chain is long.
const MAX_DEPTH: usize = 64;

/// Keywords that only annotate: on a `$ref` with siblings, the sibling's value wins over the target's.
const ANNOTATIONS: &[&str] =
    &["description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"];

/// A schema with its local references expanded.
#[derive(Debug, PartialEq)]
pub struct Inlined {
    pub schema: Value,
    /// Every local reference was followed, so `$defs` / `definitions` no longer say anything.
    pub complete: bool,
    /// Nodes the expansion copied in.
    pub copied: usize,
}

/// `schema` with every local reference it can follow replaced by what it points to. Definitions
/// (`$defs`, `definitions`) are left as written; they only matter where they are referenced.
pub fn inline_local_refs(schema: &Value) -> Inlined {
    let mut inliner = Inliner {
        root: schema,
        expanding: vec![String::new()],
        budget: INLINE_BUDGET,
        complete: true,
        depth: 0,
    };
    let schema = inliner.walk(schema);
    Inlined { schema, complete: inliner.complete, copied: INLINE_BUDGET - inliner.budget }
}

struct Inliner<'a> {
    root: &'a Value,
    /// Pointers of the definitions being expanded, outermost first (the root is "").
    expanding: Vec<String>,
    budget: usize,
    complete: bool,
    /// Schemas entered and not yet left.
    depth: usize,
}

impl Inliner<'_> {
    fn walk(&mut self, schema: &Value) -> Value {
        self.depth += 1;
        let walked = self.walk_object(schema);
        self.depth -= 1;
        walked
    }

    fn walk_object(&mut self, schema: &Value) -> Value {
        let Some(object) = schema.as_object() else { return schema.clone() };
        let mut siblings = Map::new();
        for (key, value) in object {
            if key == "$ref" {
                continue;
            }
            let walked = match (key.as_str(), value) {
                ("$defs" | "definitions", value) => value.clone(),
                (k, Value::Object(map)) if SCHEMA_MAP_KEYWORDS.contains(&k) => {
                    Value::Object(map.iter().map(|(name, s)| (name.clone(), self.walk(s))).collect())
                }
                (k, Value::Array(items)) if SCHEMA_LIST_KEYWORDS.contains(&k) || k == "items" => {
                    Value::Array(items.iter().map(|s| self.walk(s)).collect())
                }
                (k, value) if SCHEMA_KEYWORDS.contains(&k) => self.walk(value),
                (_, value) => value.clone(),
            };
            siblings.insert(key.clone(), walked);
        }
        match object.get("$ref") {
            Some(Value::String(reference)) => match self.follow(reference) {
                Some(target) => merge(target, siblings),
                None => {
                    siblings.insert("$ref".into(), Value::String(reference.clone()));
                    Value::Object(siblings)
                }
            },
            Some(other) => {
                siblings.insert("$ref".into(), other.clone());
                Value::Object(siblings)
            }
            None => Value::Object(siblings),
        }
    }

    /// The expanded target of a local reference, a recursion marker, or `None` to keep it as written.
    fn follow(&mut self, reference: &str) -> Option<Value> {
        let Some(pointer) = reference.strip_prefix('#').and_then(decode_fragment) else {
            // Another document or an anchor: not ours to read.
            return None;
        };
        if let Some(depth) = self.expanding.iter().rev().position(|p| *p == pointer) {
            return Some(Value::Object(Map::from_iter([(
                "$ref".to_owned(),
                Value::String(format!("#recursive/{depth}")),
            )])));
        }
        let target = self.root.pointer(&pointer)?;
        let size = node_count(target, self.budget);
        if size >= self.budget || self.depth > MAX_DEPTH {
            self.complete = false;
            return None;
        }
        self.budget -= size;
        self.expanding.push(pointer);
        let expanded = self.walk(target);
        self.expanding.pop();
        Some(expanded)
    }
}

/// A `$ref` with sibling keywords: the target's keywords and the siblings', as one schema when they do
/// not contradict each other (annotations on the `$ref` win), otherwise both under `allOf`.
fn merge(target: Value, siblings: Map<String, Value>) -> Value {
    if siblings.is_empty() {
        return target;
    }
    let Value::Object(mut merged) = target else {
        return Value::Object(Map::from_iter([(
            "allOf".to_owned(),
            Value::Array(vec![target, Value::Object(siblings)]),
        )]));
    };
    let conflict = siblings.iter().any(|(key, value)| {
        !ANNOTATIONS.contains(&key.as_str()) && merged.get(key).is_some_and(|existing| existing != value)
    });
    if conflict {
        return Value::Object(Map::from_iter([(
            "allOf".to_owned(),
            Value::Array(vec![Value::Object(merged), Value::Object(siblings)]),
        )]));
    }
    merged.extend(siblings);
    Value::Object(merged)
}

/// The JSON pointer of a URI fragment: percent-decoded; `None` when it is not a pointer (an anchor).
pub(crate) fn decode_fragment(fragment: &str) -> Option<String> {
    let bytes = fragment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = fragment.get(index + 1..index + 3)?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    let pointer = String::from_utf8(decoded).ok()?;
    (pointer.is_empty() || pointer.starts_with('/')).then_some(pointer)
}

/// Nodes in `value`, counting no further than `limit`.
fn node_count(value: &Value, limit: usize) -> usize {
    let mut count = 0;
    let mut pending = vec![value];
    while let Some(node) = pending.pop() {
        count += 1;
        if count >= limit {
            return limit;
        }
        match node {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.values()),
            _ => {}
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(schema: Value, expected: Value) {
        assert_eq!(inline_local_refs(&schema).schema, expected);
    }

    #[test]
    fn definitions_are_inlined_where_they_are_used() {
        check(
            json!({"type": "object", "properties": {"parent": {"$ref": "#/$defs/Parent"}},
                "$defs": {"Parent": {"type": "object", "properties": {"page_id": {"type": "string"}}}}}),
            json!({"type": "object",
                "properties": {"parent": {"type": "object", "properties": {"page_id": {"type": "string"}}}},
                "$defs": {"Parent": {"type": "object", "properties": {"page_id": {"type": "string"}}}}}),
        );
        // draft-07 `definitions`, pointer escapes and percent-encoding, a pointer to any schema inside.
        check(
            json!({"properties": {"a": {"$ref": "#/definitions/a~1b%20c"}, "b": {"$ref": "#/properties/c"},
                "c": {"type": "integer"}}, "definitions": {"a/b c": {"type": "string"}}}),
            json!({"properties": {"a": {"type": "string"}, "b": {"type": "integer"},
                "c": {"type": "integer"}}, "definitions": {"a/b c": {"type": "string"}}}),
        );
    }

    #[test]
    fn siblings_merge_or_stand_beside_the_target() {
        check(
            json!({"properties": {"p": {"$ref": "#/$defs/P", "description": "on the ref"}},
                "$defs": {"P": {"type": "string", "description": "on the definition"}}}),
            json!({"properties": {"p": {"type": "string", "description": "on the ref"}},
                "$defs": {"P": {"type": "string", "description": "on the definition"}}}),
        );
        check(
            json!({"properties": {"p": {"$ref": "#/$defs/P", "type": "integer"}},
                "$defs": {"P": {"type": "string"}}}),
            json!({"properties": {"p": {"allOf": [{"type": "string"}, {"type": "integer"}]}},
                "$defs": {"P": {"type": "string"}}}),
        );
    }

    #[test]
    fn recursion_becomes_a_marker_by_depth() {
        let node = |defs: &str| {
            json!({"$ref": format!("#/{defs}/Node"), defs: {"Node": {"type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": format!("#/{defs}/Node")}}}}}})
        };
        let expanded = inline_local_refs(&node("$defs")).schema;
        assert_eq!(expanded["properties"]["children"]["items"], json!({"$ref": "#recursive/0"}));
        // Renaming the recursive definition reads the same once the definitions are dropped.
        let renamed = inline_local_refs(&node("definitions")).schema;
        assert_eq!(expanded["properties"], renamed["properties"]);
        check(
            json!({"properties": {"self": {"$ref": "#"}}}),
            json!({"properties": {"self": {"$ref": "#recursive/0"}}}),
        );
    }

    #[test]
    fn references_it_cannot_follow_stay_as_written() {
        for reference in ["#/$defs/missing", "https://example.com/schema", "#anchor", "#/%zz"] {
            check(json!({"$ref": reference}), json!({"$ref": reference}));
        }
        check(json!({"$ref": 7}), json!({"$ref": 7}));
    }

    #[test]
    fn a_long_chain_of_definitions_stops_at_the_depth_limit() {
        // Each definition holds the next: expanded in full, 10,000 levels deep.
        let mut defs = Map::new();
        for level in 0..10_000 {
            let next = format!("#/$defs/L{}", level + 1);
            defs.insert(
                format!("L{level}"),
                json!({"type": "object", "properties": {"next": {"$ref": next}}}),
            );
        }
        defs.insert("L10000".into(), json!({"type": "string"}));
        let expanded = inline_local_refs(&json!({"$ref": "#/$defs/L0", "$defs": defs}));
        assert!(!expanded.complete);
        let mut depth = 0;
        let mut node = &expanded.schema;
        while let Some(next) = node.get("properties").and_then(|p| p.get("next")) {
            depth += 1;
            node = next;
        }
        assert!((MAX_DEPTH / 2..=MAX_DEPTH).contains(&depth), "expanded {depth} levels");
        assert_eq!(node["$ref"].as_str().map(|r| r.starts_with("#/$defs/L")), Some(true), "{node}");
    }

    #[test]
    fn exponential_fan_out_stops_at_the_budget() {
        // Each level references the next twice: 2^40 nodes if expanded naively.
        let mut defs = Map::new();
        for level in 0..40 {
            let next = format!("#/$defs/L{}", level + 1);
            defs.insert(format!("L{level}"), json!({"anyOf": [{"$ref": next}, {"$ref": next}]}));
        }
        defs.insert("L40".into(), json!({"type": "string"}));
        let schema = json!({"$ref": "#/$defs/L0", "$defs": defs});
        let expanded = inline_local_refs(&schema);
        assert!(!expanded.complete);
        assert!(node_count(&expanded.schema, usize::MAX) < 4 * INLINE_BUDGET);
    }
}
