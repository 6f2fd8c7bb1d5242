//! The normal form of a tool list: what a client can observe, not how the server spelled it.
//!
//! Both the hash and the diff read this form, so two lists hash alike exactly when the diff finds
//! nothing between them. Normalising removes every difference that changes nothing for a client:
//! tool metadata at its MCP default, schema annotations, local `$ref`s (expanded, see `refs.rs`), and
//! constraints written in one of several equivalent ways ([`EQUIVALENCES`], one row each).

use serde_json::{Map, Number, Value};

use super::canonical::canonical_json;
use super::keywords::{SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS};
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

/// The keywords the equivalences read, one bit each.
pub(super) mod keyword {
    pub const ALL_OF: u32 = 1 << 0;
    pub const ANY_OF: u32 = 1 << 1;
    pub const ONE_OF: u32 = 1 << 2;
    pub const CONST: u32 = 1 << 3;
    pub const ENUM: u32 = 1 << 4;
    pub const TYPE: u32 = 1 << 5;
    /// `exclusiveMinimum` / `exclusiveMaximum`.
    pub const EXCLUSIVE_BOUND: u32 = 1 << 6;
    /// `minimum` / `maximum`.
    pub const INCLUSIVE_BOUND: u32 = 1 << 7;
    /// `maxLength`, `maxItems`, `maxProperties`, `maxContains`.
    pub const SIZE_LIMIT: u32 = 1 << 8;
    /// Keywords with a default `drop_defaults` knows.
    pub const DEFAULTABLE: u32 = 1 << 9;
}

pub(super) fn keywords_present(schema: &Map<String, Value>) -> u32 {
    use keyword::*;
    schema.keys().fold(0, |present, key| {
        present
            | match key.as_str() {
                "allOf" => ALL_OF,
                "anyOf" => ANY_OF,
                "oneOf" => ONE_OF,
                "const" => CONST,
                "enum" => ENUM,
                "type" => TYPE,
                "exclusiveMinimum" | "exclusiveMaximum" => EXCLUSIVE_BOUND,
                "minimum" | "maximum" => INCLUSIVE_BOUND,
                "maxLength" | "maxItems" | "maxProperties" | "maxContains" => SIZE_LIMIT,
                "minLength"
                | "minItems"
                | "minProperties"
                | "uniqueItems"
                | "additionalProperties"
                | "items"
                | "required"
                | "properties"
                | "deprecated"
                | "readOnly"
                | "writeOnly"
                | "propertyNames" => DEFAULTABLE,
                _ => 0,
            }
    })
}

/// Sorts order-free values by their canonical JSON and drops repeats.
fn sort_unique(items: &mut Vec<Value>) {
    // Names and type names (nearly every such list) compare as their canonical JSON does without
    // writing it, as long as no character needs an escape.
    let plain = |v: &Value| v.as_str().is_some_and(|s| !s.bytes().any(needs_escape));
    if items.iter().all(plain) {
        let order =
            |a: &Value, b: &Value| quoted_cmp(a.as_str().unwrap_or_default(), b.as_str().unwrap_or_default());
        if items.windows(2).all(|pair| order(&pair[0], &pair[1]).is_lt()) {
            return;
        }
        items.sort_by(order);
        items.dedup_by(|a, b| a == b);
        return;
    }
    let mut keyed: Vec<(String, Value)> = items.drain(..).map(|v| (canonical_json(&v), v)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    items.extend(keyed.into_iter().map(|(_, v)| v));
}

fn sorted_unique(items: &[Value]) -> Vec<Value> {
    let mut items = items.to_vec();
    sort_unique(&mut items);
    items
}

/// A byte canonical JSON writes escaped.
pub(super) fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The order of two strings' canonical JSON (`"a"` against `"ab"`) when neither needs an escape: the
/// closing quote takes part where one string is a prefix of the other.
pub(super) fn quoted_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let common = a.len().min(b.len());
    a[..common].cmp(&b[..common]).then_with(|| {
        let next = |s: &[u8]| s.get(common).copied().unwrap_or(b'"');
        next(a).cmp(&next(b))
    })
}

/// Two spellings of one constraint, and the rewrite that turns the first into the second. Applied in
/// this order to every schema object, after its subschemas are normalised.
pub struct Equivalence {
    pub name: &'static str,
    /// A schema written one way …
    pub example: &'static str,
    /// … and the same schema written the normal way.
    pub same_as: &'static str,
    /// The keywords (bits of `keyword`) whose presence the rewrite needs to change anything.
    reads: u32,
    rewrite: fn(&mut Map<String, Value>),
}

/// The largest integer JSON numbers hold exactly (2^53 − 1); schema libraries write it for "no bound".
pub const SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

pub const EQUIVALENCES: &[Equivalence] = &[
    Equivalence {
        name: "a one-branch allOf/anyOf/oneOf is its branch",
        example: r#"{"allOf": [{"type": "string"}], "description": "d"}"#,
        same_as: r#"{"type": "string", "description": "d"}"#,
        reads: keyword::ALL_OF | keyword::ANY_OF | keyword::ONE_OF,
        rewrite: merge_single_branch,
    },
    Equivalence {
        name: "an anyOf inside an anyOf is part of it",
        example: r#"{"anyOf": [{"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 2}]}, {"type": "object", "required": ["a"]}]}"#,
        same_as: r#"{"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 2}, {"type": "object", "required": ["a"]}]}"#,
        reads: keyword::ANY_OF,
        rewrite: flatten_nested_any_of,
    },
    Equivalence {
        name: "an anyOf branch another branch accepts wholly adds nothing",
        example: r#"{"anyOf": [{"type": "string", "minLength": 3}, {"type": ["null", "string"]}, {"type": "object", "required": ["a"]}, {"type": "string", "minLength": 3}]}"#,
        same_as: r#"{"anyOf": [{"type": ["null", "string"]}, {"type": "object", "required": ["a"]}]}"#,
        reads: keyword::ANY_OF,
        rewrite: drop_redundant_branches,
    },
    Equivalence {
        name: "a union of value lists is one value list",
        example: r#"{"anyOf": [{"type": "string", "const": "off"}, {"type": "string", "enum": ["strict"]}], "default": "off"}"#,
        same_as: r#"{"type": "string", "enum": ["off", "strict"], "default": "off"}"#,
        reads: keyword::ANY_OF | keyword::ONE_OF,
        rewrite: value_list_union,
    },
    Equivalence {
        name: "anyOf/oneOf of bare types is a type list",
        example: r#"{"anyOf": [{"type": "string"}, {"type": "null"}]}"#,
        same_as: r#"{"type": ["null", "string"]}"#,
        reads: keyword::ANY_OF | keyword::ONE_OF,
        rewrite: bare_type_union,
    },
    Equivalence {
        name: "const is a one-value enum",
        example: r#"{"const": "a"}"#,
        same_as: r#"{"enum": ["a"]}"#,
        reads: keyword::CONST,
        rewrite: const_as_enum,
    },
    Equivalence {
        name: "an enum implies the type of its values",
        example: r#"{"type": "number", "enum": [1, 2]}"#,
        same_as: r#"{"enum": [1, 2]}"#,
        reads: keyword::ENUM,
        rewrite: enum_implies_type,
    },
    Equivalence {
        name: "integer within number is number; every type is no type",
        example: r#"{"type": ["integer", "number"]}"#,
        same_as: r#"{"type": "number"}"#,
        reads: keyword::TYPE,
        rewrite: implied_type_list,
    },
    Equivalence {
        name: "draft-4 boolean exclusive bounds are numeric exclusive bounds",
        example: r#"{"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": false}"#,
        same_as: r#"{"type": "number", "exclusiveMinimum": 0, "maximum": 9}"#,
        reads: keyword::EXCLUSIVE_BOUND,
        rewrite: draft4_exclusive_bounds,
    },
    Equivalence {
        name: "bounds at or beyond the safe-integer limit constrain nothing",
        example: r#"{"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991, "maxLength": 9007199254740991}"#,
        same_as: r#"{"type": "integer"}"#,
        reads: keyword::INCLUSIVE_BOUND | keyword::EXCLUSIVE_BOUND | keyword::SIZE_LIMIT,
        rewrite: unbounded_limits,
    },
    Equivalence {
        name: "integer bounds compare as integer sets",
        example: r#"{"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10.5, "minimum": -3}"#,
        same_as: r#"{"type": "integer", "minimum": 1, "maximum": 10}"#,
        reads: keyword::INCLUSIVE_BOUND | keyword::EXCLUSIVE_BOUND,
        rewrite: integer_bounds,
    },
    Equivalence {
        name: "keywords at their default say nothing",
        example: r#"{"minLength": 0, "minItems": 0, "minProperties": 0, "uniqueItems": false, "additionalProperties": true, "items": {}, "required": [], "properties": {}, "deprecated": false, "readOnly": false, "writeOnly": false, "propertyNames": {"type": "string"}}"#,
        same_as: r#"{}"#,
        reads: keyword::DEFAULTABLE,
        rewrite: drop_defaults,
    },
];

fn merge_single_branch(schema: &mut Map<String, Value>) {
    for key in ["allOf", "anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = schema.get(key) else { continue };
        let [Value::Object(branch)] = branches.as_slice() else { continue };
        if branch.keys().any(|k| schema.contains_key(k)) {
            continue;
        }
        let branch = branch.clone();
        schema.remove(key);
        schema.extend(branch);
    }
}

fn flatten_nested_any_of(schema: &mut Map<String, Value>) {
    let Some(Value::Array(branches)) = schema.get("anyOf") else { return };
    let nested = |b: &Value| {
        b.as_object().is_some_and(|o| o.len() == 1 && o.get("anyOf").is_some_and(Value::is_array))
    };
    if !branches.iter().any(nested) {
        return;
    }
    let mut flat = Vec::with_capacity(branches.len());
    for branch in branches {
        match branch.get("anyOf").and_then(Value::as_array) {
            Some(inner) if nested(branch) => flat.extend(inner.iter().cloned()),
            _ => flat.push(branch.clone()),
        }
    }
    schema.insert("anyOf".into(), Value::Array(flat));
}

/// Branches of one `anyOf` the pairwise check compares at most, and the nodes they may hold together: a
/// larger union is left as written. The check compares branches pairwise, and every enclosing union
/// compares its nested ones again, so both bounds keep a list's cost linear in its size whatever its
/// nesting (real unions have a handful of small branches).
const REDUNDANCY_BRANCHES: usize = 16;
const REDUNDANCY_NODES: usize = 512;

/// Whether the values hold at most `limit` JSON nodes together, counted without recursion and stopping
/// past it.
fn nodes_within<'v>(values: impl IntoIterator<Item = &'v Value>, limit: usize) -> bool {
    let mut stack: Vec<&Value> = values.into_iter().collect();
    let mut count = 0usize;
    while let Some(value) = stack.pop() {
        count += 1;
        if count > limit {
            return false;
        }
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(members) => stack.extend(members.values()),
            _ => {}
        }
    }
    true
}

/// An `anyOf` accepts what any branch accepts, so a branch whose values another branch accepts too adds
/// nothing (of equal branches the first stays); a union left with one branch is that branch. Not for
/// `oneOf`, where a value two branches accept is refused. Only what [`accepts_all_of`] can decide counts.
fn drop_redundant_branches(schema: &mut Map<String, Value>) {
    let Some(Value::Array(branches)) = schema.get("anyOf") else { return };
    if branches.len() < 2 || branches.len() > REDUNDANCY_BRANCHES {
        return;
    }
    if !nodes_within(branches, REDUNDANCY_NODES) {
        return;
    }
    let redundant: Vec<bool> = (0..branches.len())
        .map(|j| {
            (0..branches.len()).any(|i| {
                i != j
                    && accepts_all_of(&branches[i], &branches[j])
                    // Of two that accept each other, the earlier one stays.
                    && (i < j || !accepts_all_of(&branches[j], &branches[i]))
            })
        })
        .collect();
    if !redundant.contains(&true) {
        return;
    }
    let kept: Vec<Value> = branches
        .iter()
        .zip(&redundant)
        .filter(|(_, gone)| !**gone)
        .map(|(branch, _)| branch.clone())
        .collect();
    schema.insert("anyOf".into(), Value::Array(kept));
    merge_single_branch(schema);
}

/// Keywords that tell a reader about a schema without constraining its values.
const ANNOTATIONS: &[&str] =
    &["description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"];

/// Keywords whose meaning depends on siblings: `additionalProperties` on `properties`, `items` on
/// `prefixItems`, `then` on `if`, … A schema holding one accepts a superset of another only when those
/// siblings are the same on both.
const DEPENDENT: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "items",
    "then",
    "else",
    "minContains",
    "maxContains",
];
const DEPENDED_ON: &[&str] = &[
    "properties",
    "patternProperties",
    "prefixItems",
    "items",
    "if",
    "contains",
    "allOf",
    "anyOf",
    "oneOf",
    "$ref",
    "dependentSchemas",
];

/// Keywords that declare a value's structure: a branch is only dropped for one that declares the same.
const STRUCTURE: &[&str] = &[
    "properties",
    "patternProperties",
    "additionalProperties",
    "items",
    "prefixItems",
    "$defs",
    "definitions",
];

/// Whether normalised schema `wide` accepts every value `narrow` accepts, as far as keywords tell without
/// evaluating them: every constraint of `wide` stands in `narrow` with the same value (more constraints
/// only narrow, keywords being a conjunction), its `type` at least as wide, with the siblings a dependent
/// keyword reads alike on both; `true` and `{}` accept everything. `narrow`'s texts must be `wide`'s (a
/// branch is never dropped with a description of its own: that would hide text from the review).
pub(crate) fn accepts_all_of(wide: &Value, narrow: &Value) -> bool {
    let (wide, narrow) = match (wide, narrow) {
        (Value::Bool(true), Value::Object(narrow)) => {
            return narrow.keys().all(|k| !ANNOTATIONS.contains(&k.as_str()))
        }
        (_, Value::Bool(_)) | (Value::Bool(_), _) => return wide == narrow,
        (Value::Object(wide), Value::Object(narrow)) => (wide, narrow),
        _ => return false,
    };
    let texts_kept =
        narrow.iter().filter(|(k, _)| ANNOTATIONS.contains(&k.as_str())).all(|(k, v)| wide.get(k) == Some(v));
    if !texts_kept {
        return false;
    }
    // A branch that declares structure the wider one does not (properties, items) is kept: the diff pairs
    // it with its counterpart across releases, and its parameters stay visible.
    if STRUCTURE.iter().any(|k| wide.get(*k) != narrow.get(*k)) {
        return false;
    }
    let depends = wide.keys().any(|k| DEPENDENT.contains(&k.as_str()));
    if depends && DEPENDED_ON.iter().any(|k| wide.get(*k) != narrow.get(*k)) {
        return false;
    }
    wide.iter().filter(|(k, _)| !ANNOTATIONS.contains(&k.as_str())).all(|(key, value)| match key.as_str() {
        "type" => narrow.get("type").is_some_and(|types| types == value || type_within(types, value)),
        // Fewer values, more required keys: narrower.
        "enum" => narrow
            .get("enum")
            .and_then(Value::as_array)
            .zip(value.as_array())
            .is_some_and(|(few, many)| few.iter().all(|v| many.contains(v))),
        "required" => narrow
            .get("required")
            .and_then(Value::as_array)
            .zip(value.as_array())
            .is_some_and(|(more, fewer)| fewer.iter().all(|k| more.contains(k))),
        _ => narrow.get(key) == Some(value),
    })
}

/// Whether every type of `narrow` is one of `wide`'s (an `integer` is a `number`).
fn type_within(narrow: &Value, wide: &Value) -> bool {
    let names = |types: &Value| -> Option<Vec<String>> {
        match types {
            Value::String(t) => Some(vec![t.clone()]),
            Value::Array(items) => items.iter().map(|t| t.as_str().map(str::to_owned)).collect(),
            _ => None,
        }
    };
    let (Some(narrow), Some(wide)) = (names(narrow), names(wide)) else { return false };
    narrow.iter().all(|t| wide.contains(t) || (t == "integer" && wide.iter().any(|w| w == "number")))
}

/// `anyOf`/`oneOf` whose branches only list values (`enum`, after `const` became a one-value enum, with an
/// optional `type`) accept exactly the union of the values. A `oneOf` only when no value is in two
/// branches (a value matching two branches of a oneOf is refused).
fn value_list_union(schema: &mut Map<String, Value>) {
    if schema.contains_key("enum") {
        return;
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = schema.get(key) else { continue };
        let mut values = Vec::new();
        for branch in branches {
            let Some(object) = branch.as_object() else { return };
            let listed = match (object.get("enum"), object.get("const")) {
                (Some(Value::Array(listed)), None) => listed.clone(),
                (None, Some(value)) => vec![value.clone()],
                _ => return,
            };
            if object.keys().any(|k| !matches!(k.as_str(), "enum" | "const" | "type"))
                || object.get("type").is_some_and(|t| !listed.iter().all(|v| admits(t, v)))
            {
                return;
            }
            values.extend(listed);
        }
        let union = sorted_unique(&values);
        if values.is_empty() || (key == "oneOf" && union.len() != values.len()) {
            return;
        }
        schema.remove(key);
        schema.insert("enum".into(), Value::Array(union));
        return;
    }
}

fn bare_type_union(schema: &mut Map<String, Value>) {
    if schema.contains_key("type") {
        return;
    }
    for key in ["anyOf", "oneOf"] {
        let Some(types) = schema.get(key).and_then(bare_types) else { continue };
        schema.remove(key);
        let mut types = sorted_unique(&types);
        let value = if types.len() == 1 { types.remove(0) } else { Value::Array(types) };
        schema.insert("type".into(), value);
        return;
    }
}

/// The types of a list of `{"type": …}` branches, or `None` if any branch says more.
fn bare_types(branches: &Value) -> Option<Vec<Value>> {
    let mut types = Vec::new();
    for branch in branches.as_array()? {
        let object = branch.as_object()?;
        if object.len() != 1 {
            return None;
        }
        match object.get("type")? {
            Value::String(t) => types.push(Value::String(t.clone())),
            Value::Array(items) if items.iter().all(Value::is_string) => types.extend(items.iter().cloned()),
            _ => return None,
        }
    }
    (!types.is_empty()).then_some(types)
}

fn const_as_enum(schema: &mut Map<String, Value>) {
    if schema.contains_key("enum") {
        return;
    }
    if let Some(value) = schema.remove("const") {
        schema.insert("enum".into(), Value::Array(vec![value]));
    }
}

/// The JSON Schema type of a value (integers are `integer`).
fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            "integer"
        }
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether a `type` (string or list) admits a value.
fn admits(declared: &Value, value: &Value) -> bool {
    let value_type = type_of(value);
    let allows = |t: &Value| t == value_type || (t == "number" && value_type == "integer");
    match declared {
        Value::String(_) => allows(declared),
        Value::Array(types) => types.iter().any(allows),
        _ => false,
    }
}

fn enum_implies_type(schema: &mut Map<String, Value>) {
    let Some(Value::Array(values)) = schema.get("enum") else { return };
    if values.is_empty() {
        return;
    }
    if let Some(declared) = schema.get("type") {
        if !values.iter().all(|v| admits(declared, v)) {
            return; // the type rules some values out: it says something
        }
    }
    let mut types: Vec<&str> = values.iter().map(type_of).collect();
    if types.contains(&"number") {
        types.retain(|t| *t != "integer");
    }
    types.sort_unstable();
    types.dedup();
    let value = match types.as_slice() {
        [single] => Value::String((*single).to_owned()),
        many => Value::Array(many.iter().map(|t| Value::String((*t).to_owned())).collect()),
    };
    schema.insert("type".into(), value);
}

const ALL_TYPES: &[&str] = &["array", "boolean", "null", "number", "object", "string"];

fn implied_type_list(schema: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = schema.get("type") else { return };
    let mut names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
    if names.len() != types.len() {
        return;
    }
    if names.contains(&"number") {
        names.retain(|t| *t != "integer");
    }
    if ALL_TYPES.iter().all(|t| names.contains(t)) {
        schema.remove("type");
        return;
    }
    let value = match names.as_slice() {
        [single] => Value::String((*single).to_owned()),
        many => Value::Array(many.iter().map(|t| Value::String((*t).to_owned())).collect()),
    };
    schema.insert("type".into(), value);
}

fn draft4_exclusive_bounds(schema: &mut Map<String, Value>) {
    for (inclusive, exclusive) in [("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")] {
        match schema.get(exclusive) {
            Some(Value::Bool(true)) => {
                schema.remove(exclusive);
                if let Some(bound) = schema.remove(inclusive) {
                    schema.insert(exclusive.into(), bound);
                }
            }
            Some(Value::Bool(false)) => {
                schema.remove(exclusive);
            }
            _ => {}
        }
    }
}

fn unbounded_limits(schema: &mut Map<String, Value>) {
    let beyond = |value: Option<&Value>, lower: bool| {
        value
            .and_then(Value::as_f64)
            .is_some_and(|v| if lower { v <= -SAFE_INTEGER } else { v >= SAFE_INTEGER })
    };
    for key in ["minimum", "exclusiveMinimum"] {
        if beyond(schema.get(key), true) {
            schema.remove(key);
        }
    }
    for key in ["maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"] {
        if beyond(schema.get(key), false) {
            schema.remove(key);
        }
    }
}

/// Whether the schema's numbers are all integers (`integer`, possibly with `null`).
fn integers_only(schema: &Map<String, Value>) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(types)) => {
            types.iter().any(|t| t == "integer") && !types.iter().any(|t| t == "number")
        }
        _ => false,
    }
}

fn integer_bounds(schema: &mut Map<String, Value>) {
    if !integers_only(schema) {
        return;
    }
    let number = |key: &str, schema: &Map<String, Value>| schema.get(key).and_then(Value::as_f64);
    // The smallest integer allowed: above an exclusive bound, at or above an inclusive one.
    let lower = [
        number("minimum", schema).map(f64::ceil),
        number("exclusiveMinimum", schema).map(|n| n.floor() + 1.0),
    ]
    .into_iter()
    .flatten()
    .reduce(f64::max);
    let upper = [
        number("maximum", schema).map(f64::floor),
        number("exclusiveMaximum", schema).map(|n| n.ceil() - 1.0),
    ]
    .into_iter()
    .flatten()
    .reduce(f64::min);
    for (bound, inclusive, exclusive) in
        [(lower, "minimum", "exclusiveMinimum"), (upper, "maximum", "exclusiveMaximum")]
    {
        let Some(bound) = bound else { continue };
        schema.remove(exclusive);
        schema.insert(inclusive.into(), integer_value(bound));
    }
}

fn integer_value(value: f64) -> Value {
    if value.abs() < SAFE_INTEGER {
        // In range, so the cast is exact.
        Value::Number(Number::from(value as i64))
    } else {
        Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

fn drop_defaults(schema: &mut Map<String, Value>) {
    let zero = |v: &Value| v.as_f64() == Some(0.0);
    let empty_object = |v: &Value| v.as_object().is_some_and(Map::is_empty);
    type IsDefault<'a> = &'a dyn Fn(&Value) -> bool;
    let defaults: [(&str, IsDefault); 12] = [
        ("minLength", &zero),
        ("minItems", &zero),
        ("minProperties", &zero),
        ("uniqueItems", &|v| *v == Value::Bool(false)),
        ("additionalProperties", &|v| *v == Value::Bool(true) || empty_object(v)),
        ("items", &|v| *v == Value::Bool(true) || empty_object(v)),
        ("required", &|v| v.as_array().is_some_and(Vec::is_empty)),
        ("properties", &empty_object),
        ("deprecated", &|v| *v == Value::Bool(false)),
        ("readOnly", &|v| *v == Value::Bool(false)),
        ("writeOnly", &|v| *v == Value::Bool(false)),
        // Object keys are always strings (zod 4 writes this for every record).
        ("propertyNames", &|v| empty_object(v) || *v == serde_json::json!({"type": "string"})),
    ];
    for (key, is_default) in defaults {
        if schema.get(key).is_some_and(is_default) {
            schema.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
