//! A tool's two versions compared field by field: description, title, annotations, execution, and the
//! schemas handed to `schema.rs`; each change emitted into the listing.

use std::collections::BTreeSet;

use driftline_schemas::{ChangeType, Classification, Direction, SchemaChange, SecurityFlag, Severity};
use serde_json::{json, Map, Value};

use super::held_classification;
use super::listing::{kind_of, text_len, Listing};
use super::path::{Path, Segment};
use super::review::annotation_risk;
use super::types::{differs, differs_map, or_null};
use crate::tool_drift::classify::classify;
use crate::tool_drift::normal::ANNOTATION_DEFAULTS;
use crate::tool_drift::security::{self, review_text, TextContext, ToolNames, FREE_TEXT_PARAMETERS};

/// Keywords with a rule of their own; every other keyword that differs is `schema_changed`.
pub(super) const HANDLED_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "oneOf",
    "multipleOf",
    "uniqueItems",
    "pattern",
    "format",
    "default",
    "description",
    "title",
    "deprecated",
    "examples",
    "readOnly",
    "writeOnly",
    "if",
    "then",
    "else",
    "not",
    "allOf",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
];

pub(super) const SIZE_LOWER_BOUNDS: &[&str] = &["minLength", "minItems", "minProperties", "minContains"];

pub(super) const SIZE_UPPER_BOUNDS: &[&str] = &["maxLength", "maxItems", "maxProperties", "maxContains"];

pub(super) const TOOL_FIELDS: &[&str] =
    &["description", "title", "annotations", "execution", "inputSchema", "outputSchema"];

pub(super) struct ToolDiffer<'a> {
    pub(super) tool: &'a str,
    pub(super) tool_names: &'a ToolNames<'a>,
    /// The least flag severity that makes a change at least WARNING.
    pub(super) hold: Severity,
    pub(super) listing: &'a mut Listing,
    /// The tool's own description changed (diffed before anything else of the tool).
    pub(super) description_rewritten: bool,
}

impl ToolDiffer<'_> {
    /// Records a change classified by the table; the caller may refine the returned change.
    pub(super) fn emit(
        &mut self,
        change_type: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        before: Value,
        after: Value,
        security_flags: Vec<SecurityFlag>,
    ) -> &mut SchemaChange {
        let classification = classify(change_type, direction);
        self.emit_as(change_type, classification, direction, path, before, after, security_flags)
    }

    /// Records a change whose classification the caller decided. Listed if its kind of consequence has
    /// room left, otherwise only counted: its name and path are not even written out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_as(
        &mut self,
        change_type: ChangeType,
        classification: Classification,
        direction: Option<Direction>,
        path: &Path,
        before: Value,
        after: Value,
        mut security_flags: Vec<SecurityFlag>,
    ) -> &mut SchemaChange {
        if change_type == ChangeType::DescriptionChanged {
            self.description_rewritten = true;
        }
        if self.description_rewritten {
            self.flag_exfiltration_parameter(change_type, direction, path, &after, &mut security_flags);
        }
        let classification = held_classification(classification, &security_flags, self.hold);
        let listing = &mut *self.listing;
        let kind = kind_of(classification, &security_flags);
        let size = self.tool.len() + 2 * path.text_len() + 2 * (text_len(&before) + text_len(&after));
        let change = SchemaChange::new(
            change_type,
            classification,
            String::new(),
            String::new(),
            direction,
            (before, after),
            security_flags,
        );
        if !listing.admits(kind, size, classification) {
            return listing.unlisted.insert(change);
        }
        listing.changes.push(SchemaChange {
            tool_name: self.tool.to_owned(),
            param_name: path.param_name(),
            path: path.render(),
            ..change
        });
        let last = listing.changes.len() - 1;
        &mut listing.changes[last]
    }

    /// A description (of the tool or of a schema) changed: WARNING, with both texts reviewed.
    pub(super) fn description(
        &mut self,
        kind: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        before: Option<&Value>,
        after: Option<&Value>,
    ) {
        let flags = self.review(after, before);
        let change = self.emit(kind, direction, path, or_null(before), or_null(after), flags);
        change.old_description = Some(before.and_then(Value::as_str).unwrap_or_default().to_owned());
        change.new_description = Some(after.and_then(Value::as_str).unwrap_or_default().to_owned());
    }

    /// A title is what people see: a new one is COMPATIBLE unless the review flags it, a rewritten one
    /// WARNING (a rename in disguise or poisoning), a dropped one COMPATIBLE. Inside a schema a title is
    /// a label generated from the name: COMPATIBLE unless flagged.
    pub(super) fn title(
        &mut self,
        change_type: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        before: Option<&Value>,
        after: Option<&Value>,
        in_schema: bool,
    ) {
        let flags = self.review(after, before);
        let rewritten = before.is_some() && after.is_some() && !in_schema;
        let classification =
            if rewritten || !flags.is_empty() { Classification::Warning } else { Classification::Compatible };
        self.emit_as(change_type, classification, direction, path, or_null(before), or_null(after), flags);
    }

    pub(super) fn review(&self, new: Option<&Value>, old: Option<&Value>) -> Vec<SecurityFlag> {
        let Some(text) = new.and_then(Value::as_str) else { return Vec::new() };
        let context = TextContext {
            previous: old.and_then(Value::as_str),
            own_tool: self.tool,
            tool_names: Some(self.tool_names),
        };
        review_text(text, context)
    }

    pub(super) fn tool(&mut self, old: &Map<String, Value>, new: &Map<String, Value>) {
        let start = self.listing.found;
        let root = Path::root();
        if old.get("description") != new.get("description") {
            self.description(
                ChangeType::DescriptionChanged,
                None,
                &root,
                old.get("description"),
                new.get("description"),
            );
        }
        if old.get("title") != new.get("title") {
            self.title(ChangeType::TitleChanged, None, &root, old.get("title"), new.get("title"), false);
        }
        self.annotations(old.get("annotations"), new.get("annotations"));
        self.execution(old.get("execution"), new.get("execution"));
        let empty = Value::Object(Map::new());
        let input = (old.get("inputSchema").unwrap_or(&empty), new.get("inputSchema").unwrap_or(&empty));
        self.schema(input.0, input.1, Direction::Input, &root);
        match (old.get("outputSchema"), new.get("outputSchema")) {
            (None, Some(_)) => {
                self.emit(
                    ChangeType::OutputSchemaAdded,
                    Some(Direction::Output),
                    &root,
                    Value::Null,
                    Value::Null,
                    vec![],
                );
            }
            (Some(_), None) => {
                self.emit(
                    ChangeType::OutputSchemaRemoved,
                    Some(Direction::Output),
                    &root,
                    Value::Null,
                    Value::Null,
                    vec![],
                );
            }
            (Some(before), Some(after)) => self.schema(before, after, Direction::Output, &root),
            (None, None) => {}
        }
        // Metadata no rule reads (`icons`, fields newer than this version): shown, never relied on.
        let others: BTreeSet<&String> =
            old.keys().chain(new.keys()).filter(|k| !TOOL_FIELDS.contains(&k.as_str())).collect();
        for key in others {
            if differs(old.get(key), new.get(key)) {
                let path = Path::root().join(Segment::Field(key.clone()));
                self.emit(
                    ChangeType::MetadataChanged,
                    None,
                    &path,
                    or_null(old.get(key)),
                    or_null(new.get(key)),
                    vec![],
                );
            }
        }
        if self.listing.found == start && differs_map(old, new) {
            self.emit(ChangeType::SchemaChanged, None, &root, Value::Null, Value::Null, vec![]);
        }
    }

    /// `execution.taskSupport` ("forbidden" by default): the ways a client may call the tool. Offering
    /// another way is COMPATIBLE; taking one away (requiring a task, or refusing one) is BREAKING.
    pub(super) fn execution(&mut self, old: Option<&Value>, new: Option<&Value>) {
        if !differs(old, new) {
            return;
        }
        let base = Path::root().join(Segment::Field("execution".into()));
        fn support(execution: Option<&Value>) -> Option<&str> {
            match execution.map(|e| e.get("taskSupport")) {
                None | Some(None) => Some("forbidden"),
                Some(Some(Value::String(s))) => Some(s.as_str()),
                Some(Some(_)) => None,
            }
        }
        let modes = |support: Option<&str>| match support {
            Some("forbidden") => Some((true, false)),
            Some("optional") => Some((true, true)),
            Some("required") => Some((false, true)),
            _ => None,
        };
        let (before, after) = (support(old), support(new));
        if before != after {
            let classification = match (modes(before), modes(after)) {
                (Some((plain_a, task_a)), Some((plain_b, task_b))) => {
                    if (plain_a && !plain_b) || (task_a && !task_b) {
                        Classification::Breaking
                    } else {
                        Classification::Compatible
                    }
                }
                _ => Classification::Warning,
            };
            let path = base.join(Segment::Property("taskSupport".into()));
            let (before, after) = (json!(before), json!(after));
            self.emit_as(ChangeType::ExecutionChanged, classification, None, &path, before, after, vec![]);
        }
        // Anything else under `execution` is newer than this version: metadata.
        let strip = |execution: Option<&Value>| {
            execution.and_then(Value::as_object).map(|o| {
                let mut o = o.clone();
                o.remove("taskSupport");
                Value::Object(o)
            })
        };
        let (rest_old, rest_new) = (strip(old), strip(new));
        let non_objects = !old.is_none_or(Value::is_object) || !new.is_none_or(Value::is_object);
        if non_objects
            || differs(
                rest_old.as_ref().filter(|v| v != &&json!({})),
                rest_new.as_ref().filter(|v| v != &&json!({})),
            )
        {
            self.emit(ChangeType::MetadataChanged, None, &base, or_null(old), or_null(new), vec![]);
        }
    }

    /// A new free-text parameter (note, context, …) arriving with a rewritten description is how a
    /// poisoned tool asks the model to hand over what it knows. Called for the tool's changes after its
    /// description's (the first thing diffed).
    pub(super) fn flag_exfiltration_parameter(
        &self,
        change_type: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        after: &Value,
        flags: &mut Vec<SecurityFlag>,
    ) {
        let added = matches!(change_type, ChangeType::OptionalParamAdded | ChangeType::RequiredParamAdded);
        let name = match path.segments.as_slice() {
            [Segment::Property(name)] if !name.contains(['.', '[']) => name,
            _ => return,
        };
        let top_level = direction == Some(Direction::Input);
        let free_text = match after.get("type") {
            None | Some(Value::Null) => true,
            Some(Value::String(t)) => t == "string",
            Some(_) => false,
        };
        let named = FREE_TEXT_PARAMETERS.contains(&name.to_lowercase().as_str());
        if added && top_level && free_text && named {
            flags.push(SecurityFlag {
                rule: security::EXFILTRATION_PARAMETER.to_owned(),
                severity: Severity::High,
                excerpt: format!("new parameter `{name}` added with a description change"),
            });
        }
    }

    /// Tool annotations by effective value (the normal form dropped hints at their MCP default). The
    /// safety hints (`readOnlyHint`, `destructiveHint`) are WARNING either way: toward risk is flagged,
    /// and a tool newly claiming to be safe may be auto-approved by clients. The others are COMPATIBLE.
    pub(super) fn annotations(&mut self, old: Option<&Value>, new: Option<&Value>) {
        let empty = Map::new();
        let base = Path::root().join(Segment::Field("annotations".into()));
        let (old_map, new_map) = match (old, new) {
            (None | Some(Value::Object(_)), None | Some(Value::Object(_))) => (
                old.and_then(Value::as_object).unwrap_or(&empty),
                new.and_then(Value::as_object).unwrap_or(&empty),
            ),
            _ => {
                if old != new {
                    self.emit(
                        ChangeType::AnnotationsChanged,
                        None,
                        &base,
                        or_null(old),
                        or_null(new),
                        vec![],
                    );
                }
                return;
            }
        };
        let mut risk = annotation_risk(old_map, new_map);
        let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
        for key in keys {
            let (before, after) = (old_map.get(key), new_map.get(key));
            if before == after {
                continue;
            }
            let path = base.join(Segment::Property(key.clone()));
            if key == "title" {
                self.title(ChangeType::AnnotationsChanged, None, &path, before, after, false);
                continue;
            }
            let effective =
                |value: Option<&Value>| match ANNOTATION_DEFAULTS.iter().find(|(hint, _)| hint == key) {
                    Some((_, default)) => value.cloned().unwrap_or(Value::Bool(*default)),
                    None => or_null(value),
                };
            let safety = key == "readOnlyHint" || key == "destructiveHint";
            let flags = if safety { std::mem::take(&mut risk) } else { Vec::new() };
            let classification = if safety {
                classify(ChangeType::AnnotationsChanged, None)
            } else {
                Classification::Compatible
            };
            let (before, after) = (effective(before), effective(after));
            self.emit_as(ChangeType::AnnotationsChanged, classification, None, &path, before, after, flags);
        }
    }
}
