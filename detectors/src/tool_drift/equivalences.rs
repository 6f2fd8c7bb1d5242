//! The table of equivalent constraints: two spellings of one constraint and the rewrite that turns the
//! first into the second (DESIGN.md §5 "Normal form"), applied to every schema object of the normal form.

use serde_json::{Map, Number, Value};

use super::canonical::sorted_unique;
use super::keywords::keyword;

/// Two spellings of one constraint, and the rewrite that turns the first into the second. Applied in
/// this order to every schema object, after its subschemas are normalised.
pub struct Equivalence {
    pub name: &'static str,
    /// A schema written one way …
    pub example: &'static str,
    /// … and the same schema written the normal way.
    pub same_as: &'static str,
    /// The keywords (bits of `keyword`) whose presence the rewrite needs to change anything.
    pub(super) reads: u32,
    pub(super) rewrite: fn(&mut Map<String, Value>),
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
