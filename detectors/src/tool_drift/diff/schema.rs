//! Two schemas compared keyword by keyword, in the direction the data flows: types, enums, properties,
//! items, unions, bounds and the rest; what no rule covers is `schema_changed`.

use std::collections::BTreeSet;

use driftline_schemas::{ChangeType, Classification, Direction};
use serde_json::{json, Map, Value};

use crate::tool_drift::classify::classify;

use super::path::{Path, Segment};
use super::review::collect_schema_texts;
use super::tool::{ToolDiffer, HANDLED_KEYWORDS, SIZE_LOWER_BOUNDS, SIZE_UPPER_BOUNDS};
use super::types::{
    covers, declared_types, differs, keyword, lift_into_union, missing_from, numeric_bound, openness,
    or_null, pair_branches, param_summary, param_type, required_names, tightened_and_relaxed, type_union,
    Bound, Openness, Types, MCP_HEADER,
};

impl ToolDiffer<'_> {
    /// Diffs two schemas at `path`; if no rule found a difference but they differ, says so.
    pub(super) fn schema(&mut self, old: &Value, new: &Value, direction: Direction, path: &Path) {
        // An unchanged sub-schema (most of them) has nothing to report: not walked keyword by keyword.
        if old == new {
            return;
        }
        let start = self.listing.found;
        if let (Some(old_map), Some(new_map)) = (old.as_object(), new.as_object()) {
            let (old_map, new_map) = lift_into_union(old_map, new_map);
            self.schema_object(&old_map, &new_map, direction, path);
        }
        if self.listing.found == start && differs(Some(old), Some(new)) {
            self.emit(ChangeType::SchemaChanged, Some(direction), path, old.clone(), new.clone(), vec![]);
        }
    }

    pub(super) fn schema_object(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        self.types(old, new, dir, path);
        self.enums(old, new, dir, path);
        self.constant(old, new, dir, path);
        self.properties(old, new, dir, path);
        self.additional_properties(old, new, dir, path);
        self.items(old, new, dir, path);
        for keyword in ["anyOf", "oneOf"] {
            self.branches(keyword, old, new, dir, path);
        }
        self.bounds(old, new, dir, path);
        self.multiple_of(old, new, dir, path);
        self.unique_items(old, new, dir, path);
        self.pattern(old, new, dir, path);
        for (key, kind) in [("format", ChangeType::FormatChanged), ("default", ChangeType::DefaultChanged)] {
            if differs(old.get(key), new.get(key)) {
                self.emit(kind, Some(dir), path, or_null(old.get(key)), or_null(new.get(key)), vec![]);
            }
        }
        if old.get("description") != new.get("description") {
            let (before, after) = (old.get("description"), new.get("description"));
            self.description(ChangeType::ParamDescriptionChanged, Some(dir), path, before, after);
        }
        if old.get("title") != new.get("title") {
            self.title(ChangeType::TitleChanged, Some(dir), path, old.get("title"), new.get("title"), true);
        }
        self.schema_annotations(old, new, dir, path);
        self.restrictions(old, new, dir, path);
        let others: BTreeSet<&String> =
            old.keys().chain(new.keys()).filter(|k| !HANDLED_KEYWORDS.contains(&k.as_str())).collect();
        for key in others {
            if differs(old.get(key), new.get(key)) {
                // `x-…` keywords are vendor extensions (OpenAPI's convention, FastMCP's
                // `x-fastmcp-wrap-result`): no validator reads them. MCP 2026-07-28's `x-mcp-header` is
                // the exception: it mirrors the parameter into an HTTP header that servers check and
                // gateways route by, so a client that sends the call as before may now be refused.
                let (kind, classification) = if key == MCP_HEADER {
                    (ChangeType::SchemaAnnotationChanged, Classification::Warning)
                } else if key.starts_with("x-") {
                    (ChangeType::SchemaAnnotationChanged, Classification::Compatible)
                } else {
                    (ChangeType::SchemaChanged, classify(ChangeType::SchemaChanged, Some(dir)))
                };
                self.emit_as(
                    kind,
                    classification,
                    Some(dir),
                    path,
                    keyword(key, old.get(key)),
                    keyword(key, new.get(key)),
                    vec![],
                );
            }
        }
    }

    pub(super) fn types(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (declared_types(old), declared_types(new));
        let kind = match (&before, &after) {
            (Types::Unreadable | Types::Branches, _) | (_, Types::Unreadable | Types::Branches) => return,
            (a, b) if a == b => return,
            (Types::Any, _) => ChangeType::ParamTypeNarrowed,
            (_, Types::Any) => ChangeType::ParamTypeWidened,
            (Types::Set(a, _), Types::Set(b, _)) => match (covers(b, a), covers(a, b)) {
                (true, false) => ChangeType::ParamTypeWidened,
                (false, true) => ChangeType::ParamTypeNarrowed,
                _ => ChangeType::ParamTypeChanged,
            },
        };
        self.emit(kind, Some(dir), path, before.raw(), after.raw(), vec![]);
    }

    pub(super) fn enums(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        match (old.get("enum").and_then(Value::as_array), new.get("enum").and_then(Value::as_array)) {
            (None, Some(values)) => {
                self.emit(ChangeType::EnumAdded, Some(dir), path, Value::Null, json!(values), vec![]);
            }
            (Some(values), None) => {
                self.emit(ChangeType::EnumRemoved, Some(dir), path, json!(values), Value::Null, vec![]);
            }
            (Some(before), Some(after)) => {
                for gone in missing_from(before, after) {
                    self.emit(
                        ChangeType::EnumValueRemoved,
                        Some(dir),
                        path,
                        gone.clone(),
                        Value::Null,
                        vec![],
                    );
                }
                for came in missing_from(after, before) {
                    self.emit(ChangeType::EnumValueAdded, Some(dir), path, Value::Null, came.clone(), vec![]);
                }
            }
            (None, None) => {}
        }
    }

    pub(super) fn constant(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get("const"), new.get("const"));
        let kind = match (before, after) {
            (None, Some(_)) => ChangeType::ConstraintTightened,
            (Some(_), None) => ChangeType::ConstraintRelaxed,
            // Another constant both tightens and relaxes: name it by the side that breaks this direction.
            (Some(_), Some(_)) if differs(before, after) => tightened_and_relaxed(dir),
            _ => return,
        };
        self.emit(kind, Some(dir), path, keyword("const", before), keyword("const", after), vec![]);
    }

    pub(super) fn properties(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let empty = Map::new();
        let old_props = old.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let new_props = new.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let (old_required, new_required) = (required_names(old), required_names(new));
        let names: BTreeSet<&str> = old_props
            .keys()
            .chain(new_props.keys())
            .map(String::as_str)
            .chain(old_required.iter().copied())
            .chain(new_required.iter().copied())
            .collect();
        let closed = new.get("additionalProperties") == Some(&Value::Bool(false));
        let blank = Value::Object(Map::new());
        for name in names {
            let child = path.join(Segment::Property(name.to_owned()));
            let (was_required, is_required) = (old_required.contains(name), new_required.contains(name));
            let before = old_props.get(name).or(was_required.then_some(&blank));
            let after = new_props.get(name).or(is_required.then_some(&blank));
            match (before, after) {
                (None, Some(schema)) => {
                    let kind = if is_required {
                        ChangeType::RequiredParamAdded
                    } else {
                        ChangeType::OptionalParamAdded
                    };
                    let texts = {
                        let mut texts = Vec::new();
                        collect_schema_texts(schema, &mut texts);
                        texts
                    };
                    let flags = texts.into_iter().flat_map(|t| self.review(Some(&json!(t)), None)).collect();
                    let summary = param_summary(schema, is_required);
                    let change = self.emit(kind, Some(dir), &child, Value::Null, summary, flags);
                    change.param_type = Some(param_type(schema));
                }
                (Some(schema), None) => {
                    let kind = if was_required {
                        ChangeType::RequiredParamRemoved
                    } else {
                        ChangeType::ParamRemoved
                    };
                    let summary = param_summary(schema, was_required);
                    let classification =
                        if kind == ChangeType::ParamRemoved && dir == Direction::Input && closed {
                            // Sending the old parameter is now an error: the schema forbids unknown properties.
                            Classification::Breaking
                        } else {
                            classify(kind, Some(dir))
                        };
                    let change =
                        self.emit_as(kind, classification, Some(dir), &child, summary, Value::Null, vec![]);
                    change.param_type = Some(param_type(schema));
                }
                (Some(before), Some(after)) => {
                    if was_required != is_required {
                        let kind = if is_required {
                            ChangeType::ParamBecameRequired
                        } else {
                            ChangeType::ParamBecameOptional
                        };
                        let flags = vec![];
                        self.emit(
                            kind,
                            Some(dir),
                            &child,
                            json!({"required": was_required}),
                            json!({"required": is_required}),
                            flags,
                        );
                    }
                    self.schema(before, after, dir, &child);
                }
                (None, None) => {}
            }
        }
    }

    pub(super) fn additional_properties(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get("additionalProperties"), new.get("additionalProperties"));
        let kind = match (openness(before), openness(after)) {
            (Openness::Schema(a), Openness::Schema(b)) => {
                return self.schema(a, b, dir, &path.join(Segment::AdditionalProperties));
            }
            (Openness::Unreadable, _) | (_, Openness::Unreadable) => return,
            (a, b) if a.rank() == b.rank() => return,
            (a, b) if b.rank() > a.rank() => ChangeType::ConstraintTightened,
            _ => ChangeType::ConstraintRelaxed,
        };
        let key = "additionalProperties";
        self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
    }

    pub(super) fn items(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        match (old.get("items"), new.get("items")) {
            (Some(a @ Value::Object(_)), Some(b @ Value::Object(_))) => {
                self.schema(a, b, dir, &path.join(Segment::Items))
            }
            (None, Some(Value::Object(_))) => {
                let (before, after) = (keyword("items", None), keyword("items", new.get("items")));
                self.emit(ChangeType::ConstraintTightened, Some(dir), path, before, after, vec![]);
            }
            (Some(Value::Object(_)), None) => {
                let (before, after) = (keyword("items", old.get("items")), keyword("items", None));
                self.emit(ChangeType::ConstraintRelaxed, Some(dir), path, before, after, vec![]);
            }
            _ => {} // tuple forms and boolean schemas: covered by the fallback
        }
    }

    /// anyOf / oneOf: a branch removed tightens, a branch added relaxes. A union of bare types is read
    /// as a type list by [`Self::types`] instead. A branch that changed is diffed against its old self
    /// when it can be told apart from the others by its type (a nullable object that gained a
    /// property is the object's change, not a branch swapped for another).
    pub(super) fn branches(
        &mut self,
        key: &str,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get(key), new.get(key));
        let plain = |side: Option<&Value>| side.is_none() || type_union(side).is_some();
        if plain(before) && plain(after) {
            return;
        }
        match (before.and_then(Value::as_array), after.and_then(Value::as_array)) {
            (None, Some(_)) => {
                self.emit(
                    ChangeType::ConstraintTightened,
                    Some(dir),
                    path,
                    keyword(key, None),
                    keyword(key, after),
                    vec![],
                );
            }
            (Some(_), None) => {
                self.emit(
                    ChangeType::ConstraintRelaxed,
                    Some(dir),
                    path,
                    keyword(key, before),
                    keyword(key, None),
                    vec![],
                );
            }
            (Some(a), Some(b)) => {
                let (pairs, gone, came) = pair_branches(missing_from(a, b), missing_from(b, a));
                for (old_branch, new_branch) in pairs {
                    self.schema(old_branch, new_branch, dir, path);
                }
                for branch in gone {
                    self.emit(
                        ChangeType::ConstraintTightened,
                        Some(dir),
                        path,
                        json!({ key: [branch] }),
                        Value::Null,
                        vec![],
                    );
                }
                for branch in came {
                    self.emit(
                        ChangeType::ConstraintRelaxed,
                        Some(dir),
                        path,
                        Value::Null,
                        json!({ key: [branch] }),
                        vec![],
                    );
                }
            }
            (None, None) => {}
        }
    }

    /// Numeric bounds compare as intervals: `minimum` and `exclusiveMinimum` together make one lower
    /// bound (and likewise the upper), so `exclusiveMinimum: 0` → `minimum: 0` is one relaxation. Size
    /// bounds (`minLength`, `maxItems`, …) compare one by one.
    pub(super) fn bounds(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        for lower in [true, false] {
            let (before, after) = (numeric_bound(old, lower), numeric_bound(new, lower));
            let tightened = match (&before, &after) {
                (None, None) => continue,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some(a), Some(b)) if a.value == b.value && a.exclusive == b.exclusive => continue,
                (Some(a), Some(b)) if a.value == b.value => b.exclusive,
                (Some(a), Some(b)) => (b.value > a.value) == lower,
            };
            let kind =
                if tightened { ChangeType::ConstraintTightened } else { ChangeType::ConstraintRelaxed };
            let shown = |bound: Option<Bound>| match bound {
                Some(bound) => json!({ bound.keyword: bound.raw }),
                None => json!({ if lower { "minimum" } else { "maximum" }: null }),
            };
            self.emit(kind, Some(dir), path, shown(before), shown(after), vec![]);
        }
        for (keys, lower) in [(SIZE_LOWER_BOUNDS, true), (SIZE_UPPER_BOUNDS, false)] {
            for key in keys.iter().copied() {
                let (before, after) = (old.get(key), new.get(key));
                let tightened = match (before.map(Value::as_f64), after.map(Value::as_f64)) {
                    (None, None) => continue,
                    (None, Some(Some(_))) => true,
                    (Some(Some(_)), None) => false,
                    (Some(Some(a)), Some(Some(b))) if a != b => (b > a) == lower,
                    _ => continue, // equal, or not a number: the fallback reports it
                };
                let kind =
                    if tightened { ChangeType::ConstraintTightened } else { ChangeType::ConstraintRelaxed };
                self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
            }
        }
    }

    /// Keywords that can only restrict what a schema accepts (`if`/`then`/`else`, `not`, `allOf`,
    /// `dependentRequired`, `dependentSchemas`, `propertyNames`): added, they tighten; removed, they relax; rewritten, they are
    /// `schema_changed` (which way is not decidable in general).
    pub(super) fn restrictions(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        for key in
            ["if", "then", "else", "not", "allOf", "dependentRequired", "dependentSchemas", "propertyNames"]
        {
            let (before, after) = (old.get(key), new.get(key));
            let kind = match (before, after) {
                (None, Some(_)) => ChangeType::ConstraintTightened,
                (Some(_), None) => ChangeType::ConstraintRelaxed,
                (Some(_), Some(_)) if differs(before, after) => ChangeType::SchemaChanged,
                _ => continue,
            };
            self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
        }
    }

    /// `deprecated` newly set is WARNING (callers should move off the parameter); lifting it, and the
    /// other annotations (`examples`, `readOnly`, `writeOnly`), change nothing a call may send.
    pub(super) fn schema_annotations(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        for key in ["deprecated", "examples", "readOnly", "writeOnly"] {
            let (before, after) = (old.get(key), new.get(key));
            if !differs(before, after) {
                continue;
            }
            let kind = if key == "deprecated" && after == Some(&Value::Bool(true)) {
                ChangeType::ParamDeprecated
            } else {
                ChangeType::SchemaAnnotationChanged
            };
            self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
        }
    }

    pub(super) fn multiple_of(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get("multipleOf"), new.get("multipleOf"));
        let kind = match (before.and_then(Value::as_f64), after.and_then(Value::as_f64)) {
            (None, Some(_)) => ChangeType::ConstraintTightened,
            (Some(_), None) => ChangeType::ConstraintRelaxed,
            (Some(a), Some(b)) if a != b && a != 0.0 && b != 0.0 => {
                if (b / a).fract() == 0.0 {
                    ChangeType::ConstraintTightened
                } else if (a / b).fract() == 0.0 {
                    ChangeType::ConstraintRelaxed
                } else {
                    tightened_and_relaxed(dir)
                }
            }
            _ => return,
        };
        self.emit(kind, Some(dir), path, keyword("multipleOf", before), keyword("multipleOf", after), vec![]);
    }

    pub(super) fn unique_items(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let unique =
            |schema: &Map<String, Value>| schema.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false);
        let kind = match (unique(old), unique(new)) {
            (false, true) => ChangeType::ConstraintTightened,
            (true, false) => ChangeType::ConstraintRelaxed,
            _ => return,
        };
        let key = "uniqueItems";
        self.emit(kind, Some(dir), path, keyword(key, old.get(key)), keyword(key, new.get(key)), vec![]);
    }

    pub(super) fn pattern(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get("pattern"), new.get("pattern"));
        let kind = match (before, after) {
            (None, Some(_)) => ChangeType::ConstraintTightened,
            (Some(_), None) => ChangeType::ConstraintRelaxed,
            (Some(a), Some(b)) if a != b => ChangeType::PatternChanged,
            _ => return,
        };
        self.emit(kind, Some(dir), path, or_null(before), or_null(after), vec![]);
    }
}
