//! The type algebra the schema rules read: which values a schema admits (types, unions, discriminated
//! branches, bounds, openness), and small helpers over schema maps.

use std::borrow::Cow;
use std::collections::BTreeSet;

use driftline_schemas::{ChangeType, Direction};
use serde_json::{json, Map, Value};

use crate::tool_drift::canonical::canonical_json;

/// The 2026-07-28 keyword that sends a parameter as an HTTP header too.
pub(super) const MCP_HEADER: &str = "x-mcp-header";

/// Pairs the branches only one side has by what tells them apart — the union's discriminator first (a
/// property every such branch fixes to one value), then types and property names, then types alone —
/// where exactly one branch on each side has that signature; returns the pairs and the branches left on
/// each side. Linear in the number of branches, however many a schema lists.
#[allow(clippy::type_complexity)]
pub(super) fn pair_branches<'a>(
    mut gone: Vec<&'a Value>,
    mut came: Vec<&'a Value>,
) -> (Vec<(&'a Value, &'a Value)>, Vec<&'a Value>, Vec<&'a Value>) {
    let mut pairs = Vec::new();
    let discriminator = discriminator(&gone, &came);
    let passes: [&dyn Fn(&Value) -> Option<String>; 3] = [
        &|branch| discriminator.as_deref().and_then(|key| discriminated(branch, key)),
        &|branch| branch_signature(branch, true),
        &|branch| branch_signature(branch, false),
    ];
    for signature_of in passes {
        let signed = |list: &[&Value]| -> Vec<Option<String>> {
            list.iter().map(|branch| signature_of(branch)).collect()
        };
        let count = |signatures: &[Option<String>]| {
            let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
            for signature in signatures.iter().flatten() {
                *counts.entry(signature.clone()).or_default() += 1;
            }
            counts
        };
        let (gone_signatures, came_signatures) = (signed(&gone), signed(&came));
        let (gone_counts, came_counts) = (count(&gone_signatures), count(&came_signatures));
        let came_at: std::collections::HashMap<&str, usize> = came_signatures
            .iter()
            .enumerate()
            .filter_map(|(index, signature)| Some((signature.as_deref()?, index)))
            .collect();
        let mut paired = vec![false; came.len()];
        let mut unpaired = Vec::new();
        for (branch, signature) in gone.iter().zip(&gone_signatures) {
            let unique =
                signature.as_deref().filter(|s| gone_counts[*s] == 1 && came_counts.get(*s) == Some(&1));
            match unique.and_then(|s| came_at.get(s)) {
                Some(&index) => {
                    paired[index] = true;
                    pairs.push((*branch, came[index]));
                }
                None => unpaired.push(*branch),
            }
        }
        gone = unpaired;
        came = came.into_iter().zip(paired).filter(|(_, paired)| !paired).map(|(branch, _)| branch).collect();
    }
    (pairs, gone, came)
}

/// The property every branch of both sides fixes to a single value (`const`, a one-value `enum` in the
/// normal form): what a discriminated union's branches are told apart by. The first by name, if several.
pub(super) fn discriminator(gone: &[&Value], came: &[&Value]) -> Option<String> {
    let fixed = |branch: &Value| -> BTreeSet<String> {
        let properties = branch.get("properties").and_then(Value::as_object);
        properties
            .into_iter()
            .flatten()
            .filter(|(_, schema)| single_value(schema).is_some())
            .map(|(name, _)| name.clone())
            .collect()
    };
    if gone.is_empty() || came.is_empty() {
        return None;
    }
    let mut branches = gone.iter().chain(came);
    let mut common = fixed(branches.next()?);
    for branch in branches {
        let own = fixed(branch);
        common.retain(|name| own.contains(name));
        if common.is_empty() {
            return None;
        }
    }
    common.into_iter().next()
}

/// The one value a schema admits (`const`, or an `enum` of one), as canonical JSON.
pub(super) fn single_value(schema: &Value) -> Option<String> {
    match (schema.get("const"), schema.get("enum").and_then(Value::as_array).map(Vec::as_slice)) {
        (Some(value), _) | (None, Some([value])) => Some(canonical_json(value)),
        _ => None,
    }
}

/// A branch's discriminator value.
pub(super) fn discriminated(branch: &Value, key: &str) -> Option<String> {
    single_value(branch.get("properties")?.get(key)?)
}

/// What tells a union's branch apart from its siblings: its types (a union inside counts as one kind),
/// and with `by_properties` also the names of its properties. `None` for a branch that is no schema.
pub(super) fn branch_signature(branch: &Value, by_properties: bool) -> Option<String> {
    let object = branch.as_object()?;
    let types = match declared_types(object) {
        Types::Set(set, _) => set.into_iter().collect::<Vec<_>>().join("|"),
        Types::Any => String::new(),
        Types::Branches => "<union>".to_owned(),
        Types::Unreadable => return None,
    };
    if !by_properties {
        return Some(types);
    }
    let mut names: Vec<&str> = object
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    names.sort_unstable();
    Some(format!("{types}:{}", names.join(",")))
}

/// Keywords that describe a schema without constraining it: they stay outside a lifted union.
pub(super) const NOT_CONSTRAINTS: &[&str] =
    &["description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly"];

/// When one side is a union (`anyOf`/`oneOf` of more than bare types) and the other is not, the other
/// is read as a union of one branch, so `string | object` → `string` is one branch removed rather than
/// a union removed (which would read as relaxed), and `X` → `anyOf: [X, string]` is one branch added
/// (X may itself be a union of the other kind). Only one side is ever lifted. A schema without
/// constraints stays as it is: it accepts everything, more than any union.
pub(super) fn lift_into_union<'a>(
    old: &'a Map<String, Value>,
    new: &'a Map<String, Value>,
) -> (SchemaView<'a>, SchemaView<'a>) {
    // Only a union that is the whole schema: `{type: object, properties, oneOf: [{required: [a]}, …]}` is
    // an object with an extra rule, not a choice between alternatives.
    let union = |s: &Map<String, Value>, key: &str| {
        s.contains_key(key)
            && type_union(s.get(key)).is_none()
            && s.keys().all(|k| k == key || NOT_CONSTRAINTS.contains(&k.as_str()))
    };
    for key in ["anyOf", "oneOf"] {
        match (union(old, key), union(new, key)) {
            (true, false) if !new.contains_key(key) => return (Cow::Borrowed(old), lift(new, key, old)),
            (false, true) if !old.contains_key(key) => return (lift(old, key, new), Cow::Borrowed(new)),
            _ => {}
        }
    }
    (Cow::Borrowed(old), Cow::Borrowed(new))
}

/// A schema as written, or a rewritten copy of it.
pub(super) type SchemaView<'a> = Cow<'a, Map<String, Value>>;

/// `schema` as `{key: [schema]}`. An annotation (a description, …) stays outside the branch where the
/// union has it outside too, and goes in with the rest where the union carries it in its branches.
pub(super) fn lift<'a>(
    schema: &'a Map<String, Value>,
    key: &str,
    union: &Map<String, Value>,
) -> SchemaView<'a> {
    if schema.keys().all(|k| NOT_CONSTRAINTS.contains(&k.as_str())) {
        return Cow::Borrowed(schema);
    }
    let (outside, core): (Map<String, Value>, Map<String, Value>) = schema
        .clone()
        .into_iter()
        .partition(|(k, _)| NOT_CONSTRAINTS.contains(&k.as_str()) && union.contains_key(k));
    let mut lifted = outside;
    lifted.insert(key.to_owned(), Value::Array(vec![Value::Object(core)]));
    Cow::Owned(lifted)
}

/// One end of a numeric interval, and how the schema wrote it.
pub(super) struct Bound {
    pub(super) value: f64,
    pub(super) exclusive: bool,
    pub(super) keyword: &'static str,
    pub(super) raw: Value,
}

/// The tighter of `minimum` / `exclusiveMinimum` (or of the maxima); a bound that is not a number is
/// left to the fallback.
pub(super) fn numeric_bound(schema: &Map<String, Value>, lower: bool) -> Option<Bound> {
    let (inclusive, exclusive) =
        if lower { ("minimum", "exclusiveMinimum") } else { ("maximum", "exclusiveMaximum") };
    let read = |keyword: &'static str, is_exclusive: bool| {
        let raw = schema.get(keyword)?;
        Some(Bound { value: raw.as_f64()?, exclusive: is_exclusive, keyword, raw: raw.clone() })
    };
    match (read(inclusive, false), read(exclusive, true)) {
        (Some(a), Some(b)) => {
            let b_tighter = if lower { b.value >= a.value } else { b.value <= a.value };
            Some(if b_tighter { b } else { a })
        }
        (a, b) => a.or(b),
    }
}

#[derive(Debug, PartialEq)]
pub(super) enum Types {
    /// No type constraint.
    Any,
    /// The allowed types, and the value as written (for before/after).
    Set(BTreeSet<String>, Value),
    /// A `type` that is neither a string nor a list of strings: diffed by the fallback.
    Unreadable,
    /// No `type`, but anyOf/oneOf branches that are more than bare types: diffed as branches.
    Branches,
}

impl Types {
    pub(super) fn raw(&self) -> Value {
        match self {
            Types::Set(_, raw) => raw.clone(),
            _ => Value::Null,
        }
    }
}

pub(super) fn declared_types(schema: &Map<String, Value>) -> Types {
    match schema.get("type") {
        Some(Value::String(t)) => Types::Set(BTreeSet::from([t.clone()]), json!(t)),
        Some(Value::Array(items)) => match items.iter().map(|t| t.as_str().map(String::from)).collect() {
            Some(set) => Types::Set(set, Value::Array(items.clone())),
            None => Types::Unreadable,
        },
        Some(_) => Types::Unreadable,
        None => {
            let union = ["anyOf", "oneOf"].iter().find_map(|k| type_union(schema.get(*k)));
            match union {
                Some(set) => {
                    let raw = Value::Array(set.iter().map(|t| json!(t)).collect());
                    Types::Set(set, raw)
                }
                None if schema.contains_key("anyOf") || schema.contains_key("oneOf") => Types::Branches,
                None => Types::Any,
            }
        }
    }
}

/// `anyOf: [{"type": "string"}, {"type": "null"}]` is a type list written long-hand.
pub(super) fn type_union(branches: Option<&Value>) -> Option<BTreeSet<String>> {
    let branches = branches?.as_array()?;
    let mut set = BTreeSet::new();
    for branch in branches {
        let object = branch.as_object()?;
        if object.len() != 1 {
            return None;
        }
        match object.get("type")? {
            Value::String(t) => {
                set.insert(t.clone());
            }
            Value::Array(items) => {
                for t in items {
                    set.insert(t.as_str()?.to_owned());
                }
            }
            _ => return None,
        }
    }
    (!set.is_empty()).then_some(set)
}

/// Whether every value of type set `b` is allowed by type set `a` (a number accepts an integer).
pub(super) fn covers(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    b.iter().all(|t| a.contains(t) || (t == "integer" && a.contains("number")))
}

#[derive(Debug)]
pub(super) enum Openness<'a> {
    Open,
    Schema(&'a Value),
    Closed,
    Unreadable,
}

impl Openness<'_> {
    /// How much an object may hold beyond its declared properties: more is looser.
    pub(super) fn rank(&self) -> u8 {
        match self {
            Openness::Open => 0,
            Openness::Schema(_) => 1,
            Openness::Closed => 2,
            Openness::Unreadable => 3,
        }
    }
}

pub(super) fn openness(value: Option<&Value>) -> Openness<'_> {
    match value {
        None | Some(Value::Bool(true)) => Openness::Open,
        Some(Value::Bool(false)) => Openness::Closed,
        Some(schema @ Value::Object(_)) => Openness::Schema(schema),
        Some(_) => Openness::Unreadable,
    }
}

pub(super) fn tightened_and_relaxed(dir: Direction) -> ChangeType {
    match dir {
        Direction::Input => ChangeType::ConstraintTightened,
        Direction::Output => ChangeType::ConstraintRelaxed,
    }
}

pub(super) fn required_names(schema: &Map<String, Value>) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(super) fn param_summary(schema: &Value, required: bool) -> Value {
    json!({"type": schema.get("type").cloned().unwrap_or(Value::Null), "required": required})
}

/// A parameter's type as people read it: `string`, `string | null`, `any` when unconstrained.
pub(super) fn param_type(schema: &Value) -> String {
    match schema.as_object().map(declared_types) {
        Some(Types::Set(set, _)) => set.into_iter().collect::<Vec<_>>().join(" | "),
        Some(Types::Branches) => "union".to_owned(),
        _ => "any".to_owned(),
    }
}

pub(super) fn missing_from<'a>(values: &'a [Value], other: &[Value]) -> Vec<&'a Value> {
    let others: BTreeSet<String> = other.iter().map(canonical_json).collect();
    values.iter().filter(|v| !others.contains(&canonical_json(v))).collect()
}

pub(super) fn or_null(value: Option<&Value>) -> Value {
    value.cloned().unwrap_or(Value::Null)
}

pub(super) fn keyword(key: &str, value: Option<&Value>) -> Value {
    json!({ key: or_null(value) })
}

/// Whether two values differ canonically (`1` and `1.0` do not).
pub(super) fn differs(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a != b && canonical_json(a) != canonical_json(b),
        (None, None) => false,
        _ => true,
    }
}

pub(super) fn differs_map(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    differs(Some(&Value::Object(a.clone())), Some(&Value::Object(b.clone())))
}
