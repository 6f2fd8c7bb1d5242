//! A tool's definition hash, written without building its normal form where the normal form would only
//! drop, sort and re-lay what the declaration holds.
//!
//! Normalising copies a tool into a new tree (most of the cost of hashing a list), yet most tools of a
//! real list come out of it with the same members, some dropped (annotations, keywords at their default)
//! and some sorted (`required`, `enum`). For those, this writer emits the canonical JSON of the normal
//! definition straight from the declaration. Anything else — a `$ref`, a union, `const`, exclusive bounds,
//! a `type` list, a key beyond the Basic Multilingual Plane — is handed to the normal form
//! ([`normalize_tool`]). The property tests and every real server's list hold both to the same bytes.
//!
//! The writer reads a [`Node`]: borrowed from a tool's text as a list holds it ([`entry_digest`], no
//! `Value` built) or from a `Value` ([`definition_text`]); both are read alike.

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::canonical::{needs_escape, quoted_cmp, write_float, write_object, write_string};
use super::equivalences::SAFE_INTEGER;
use super::node::{self, Node, Object};
use super::normal::{
    is_layout_free, layout_free, normalize_tool, tool_of, ANNOTATION_DEFAULTS, WRITE_ONLY_HINTS,
};

/// SHA-256 of a tool's normal definition (everything but its name) in canonical JSON.
pub type DefinitionDigest = [u8; 32];

/// How [`definition_text`] wrote a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Straight from the declaration.
    Directly,
    /// From the tool's normal form, built for it.
    FromNormalForm,
}

/// The canonical JSON of a tool's normal definition, into `out` (cleared first).
pub fn definition_text(name: &str, tool: &Map<String, Value>, out: &mut String) -> Written {
    out.clear();
    if (Writer { out: &mut *out }).tool(&Object::of_map(tool)).is_ok() {
        return Written::Directly;
    }
    out.clear();
    write_object(out, &normalize_tool(name, tool).definition, None);
    Written::FromNormalForm
}

/// The [`DefinitionDigest`] of a declared tool; `scratch` is reused between calls.
pub fn definition_digest(name: &str, tool: &Map<String, Value>, scratch: &mut String) -> DefinitionDigest {
    definition_text(name, tool, scratch);
    Sha256::digest(scratch.as_bytes()).into()
}

/// A list entry's tool name and [`DefinitionDigest`] read from its text — as [`definition_digest`] of the
/// entry parsed, without building a `Value` where the writer can read the text itself; `None` for an entry
/// that is no tool (not an object with a string `name`).
pub fn entry_digest(entry: &RawValue, scratch: &mut String) -> Option<(String, DefinitionDigest)> {
    let from_value = |scratch: &mut String| {
        let value: Value = serde_json::from_str(entry.get()).ok()?;
        let (name, object) = tool_of(&value)?;
        Some((name.to_owned(), definition_digest(name, object, scratch)))
    };
    let Some(node) = node::parse(entry.get()) else { return from_value(scratch) };
    let Node::Object(tool) = &node else { return None };
    let Some(Node::String(name)) = tool.get("name") else { return None };
    scratch.clear();
    if (Writer { out: &mut *scratch }).tool(tool).is_err() {
        return from_value(scratch);
    }
    Some((name.to_string(), Sha256::digest(scratch.as_bytes()).into()))
}

/// The declaration holds something only the normal form handles.
struct Unsupported;

type Direct = Result<(), Unsupported>;

struct Writer<'o> {
    out: &'o mut String,
}

/// The members of one object being written: the separator before each, the braces around them.
struct Members {
    first: bool,
}

impl Members {
    fn open() -> Self {
        Members { first: true }
    }

    fn key(&mut self, out: &mut String, key: &str) {
        out.push(if self.first { '{' } else { ',' });
        self.first = false;
        write_string(out, key);
        out.push(':');
    }

    fn close(self, out: &mut String) {
        if self.first {
            out.push('{');
        }
        out.push('}');
    }

    /// Where the next member would start, to take it back (a member whose value came out at its default).
    fn mark(&self, out: &str) -> (usize, bool) {
        (out.len(), self.first)
    }

    fn take_back(&mut self, out: &mut String, (len, first): (usize, bool)) {
        out.truncate(len);
        self.first = first;
    }
}

/// A key the writer cannot place: beyond the Basic Multilingual Plane (JCS orders such keys by UTF-16
/// code units, not as the map iterates them), or a reference inside a schema (expanded by the normal form).
fn unsupported_key(key: &str, in_schema: bool) -> bool {
    key.bytes().any(|byte| byte >= 0xF0) || (in_schema && key == "$ref")
}

/// An order-free list of names, sorted and without repeats, when every item is a string needing no escape.
fn plain_sorted<'n>(items: &'n [Node<'_>]) -> Result<Vec<&'n str>, Unsupported> {
    let mut names = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Node::String(text) if !text.bytes().any(needs_escape) => names.push(&**text),
            _ => return Err(Unsupported),
        }
    }
    if !names.windows(2).all(|pair| quoted_cmp(pair[0], pair[1]).is_lt()) {
        names.sort_by(|a, b| quoted_cmp(a, b));
        names.dedup();
    }
    Ok(names)
}

impl Writer<'_> {
    fn tool(&mut self, tool: &Object<'_>) -> Direct {
        let mut members = Members::open();
        // MCP's default input schema, where the declaration has none.
        let mut input_pending = true;
        for (key, value) in tool.iter() {
            if unsupported_key(key, false) {
                return Err(Unsupported);
            }
            if input_pending && key > "inputSchema" {
                members.key(self.out, "inputSchema");
                self.out.push_str(r#"{"type":"object"}"#);
                input_pending = false;
            }
            if key == "name" || key == "_meta" || *value == Node::Null {
                continue;
            }
            match (key, value) {
                ("description" | "title", Node::String(text)) => {
                    members.key(self.out, key);
                    self.text(text);
                }
                ("inputSchema" | "outputSchema", _) => {
                    input_pending &= key != "inputSchema";
                    members.key(self.out, key);
                    match value {
                        Node::Object(schema) => self.schema_object(schema, true)?,
                        other => self.verbatim(other, true)?,
                    }
                }
                ("annotations", Node::Object(annotations)) => {
                    let mark = members.mark(self.out);
                    members.key(self.out, key);
                    if !self.annotations(annotations)? {
                        members.take_back(self.out, mark);
                    }
                }
                ("execution", Node::Object(execution)) => {
                    let mark = members.mark(self.out);
                    members.key(self.out, key);
                    if !self.execution(execution)? {
                        members.take_back(self.out, mark);
                    }
                }
                _ => {
                    members.key(self.out, key);
                    self.verbatim(value, false)?;
                }
            }
        }
        if input_pending {
            members.key(self.out, "inputSchema");
            self.out.push_str(r#"{"type":"object"}"#);
        }
        members.close(self.out);
        Ok(())
    }

    /// Model-visible text without its layout.
    fn text(&mut self, text: &str) {
        if is_layout_free(text) {
            write_string(self.out, text);
        } else {
            write_string(self.out, &layout_free(text));
        }
    }

    /// Hints by effective value; false when none is left (the member is dropped).
    fn annotations(&mut self, annotations: &Object<'_>) -> Result<bool, Unsupported> {
        let read_only = annotations.get("readOnlyHint") == Some(&Node::Bool(true));
        let mut members = Members::open();
        for (key, value) in annotations.iter() {
            if unsupported_key(key, false) {
                return Err(Unsupported);
            }
            let at_default = ANNOTATION_DEFAULTS
                .iter()
                .any(|(hint, default)| key == *hint && *value == Node::Bool(*default));
            let moot = read_only && WRITE_ONLY_HINTS.contains(&key);
            if *value == Node::Null || at_default || moot {
                continue;
            }
            members.key(self.out, key);
            match (key, value) {
                ("title", Node::String(text)) => self.text(text),
                _ => self.verbatim(value, false)?,
            }
        }
        let kept = !members.first;
        members.close(self.out);
        Ok(kept)
    }

    /// `execution` without its default; false when nothing is left.
    fn execution(&mut self, execution: &Object<'_>) -> Result<bool, Unsupported> {
        let mut members = Members::open();
        for (key, value) in execution.iter() {
            if unsupported_key(key, false) {
                return Err(Unsupported);
            }
            if *value == Node::Null
                || (key == "taskSupport" && matches!(value, Node::String(s) if s == "forbidden"))
            {
                continue;
            }
            members.key(self.out, key);
            self.verbatim(value, false)?;
        }
        let kept = !members.first;
        members.close(self.out);
        Ok(kept)
    }

    /// A value where a schema sits: objects are schemas, anything else stays as it is.
    fn schema(&mut self, value: &Node<'_>) -> Direct {
        match value {
            Node::Object(schema) => self.schema_object(schema, false),
            other => self.verbatim(other, true),
        }
    }

    /// A schema object as `normalize_in_place` leaves it (a root schema also says `type: object` unless it
    /// says another type).
    fn schema_object(&mut self, schema: &Object<'_>, root: bool) -> Direct {
        let declared = schema.get("type");
        if matches!(declared, Some(Node::Array(_))) {
            return Err(Unsupported);
        }
        let integers = matches!(declared, Some(Node::String(t)) if t == "integer");
        // A root schema says `type: object` unless it says another type; an enum implies the type of its
        // values (a declared type other than a list stays as it is). `enum` sorts before `type`, so its
        // type is known before the place where `type` goes.
        let mut type_pending = (root && declared.is_none()).then_some("object");
        let mut members = Members::open();
        for (key, value) in schema.iter() {
            if unsupported_key(key, true) {
                return Err(Unsupported);
            }
            if let Some(implied) = type_pending.filter(|_| key > "type") {
                members.key(self.out, "type");
                write_string(self.out, implied);
                type_pending = None;
            }
            let number = value.as_f64();
            match (key, value) {
                // Dropped, unless they hold a reference (the normal form follows references wherever they sit).
                (
                    "$schema" | "$id" | "$comment" | "$anchor" | "$dynamicAnchor" | "$defs" | "definitions",
                    _,
                ) => {
                    if value.mentions_ref() {
                        return Err(Unsupported);
                    }
                }
                ("required", Node::Array(items)) => {
                    let names = plain_sorted(items)?;
                    if !names.is_empty() {
                        members.key(self.out, key);
                        self.names(&names);
                    }
                }
                ("enum", Node::Array(values)) => {
                    let names = plain_sorted(values)?;
                    if declared.is_none() && !names.is_empty() {
                        type_pending = Some("string");
                    }
                    members.key(self.out, key);
                    self.names(&names);
                }
                ("allOf" | "anyOf" | "oneOf" | "const" | "exclusiveMinimum" | "exclusiveMaximum", _) => {
                    return Err(Unsupported);
                }
                ("properties" | "patternProperties" | "dependentSchemas", Node::Object(map)) => {
                    if key == "properties" && map.is_empty() {
                        continue;
                    }
                    members.key(self.out, key);
                    self.schema_map(map)?;
                }
                ("prefixItems" | "items", Node::Array(items)) => {
                    members.key(self.out, key);
                    self.out.push('[');
                    for (index, item) in items.iter().enumerate() {
                        if index > 0 {
                            self.out.push(',');
                        }
                        self.schema(item)?;
                    }
                    self.out.push(']');
                }
                ("items" | "additionalProperties", Node::Bool(true)) => {}
                ("items" | "additionalProperties" | "propertyNames", Node::Object(child)) => {
                    let mark = members.mark(self.out);
                    members.key(self.out, key);
                    let start = self.out.len();
                    self.schema_object(child, false)?;
                    let written = &self.out[start..];
                    if written == "{}" || (key == "propertyNames" && written == r#"{"type":"string"}"#) {
                        members.take_back(self.out, mark);
                    }
                }
                (
                    "items"
                    | "additionalItems"
                    | "additionalProperties"
                    | "unevaluatedItems"
                    | "unevaluatedProperties"
                    | "contains"
                    | "propertyNames"
                    | "not"
                    | "if"
                    | "then"
                    | "else",
                    _,
                ) => {
                    members.key(self.out, key);
                    self.schema(value)?;
                }
                ("description" | "title", Node::String(text)) => {
                    members.key(self.out, key);
                    self.text(text);
                }
                // Bounds at or beyond the safe-integer limit constrain nothing; an integer schema's bounds
                // are rewritten as integers (the same text when they are whole already).
                ("minimum", Node::Number(_)) if number.is_some_and(|n| n <= -SAFE_INTEGER) => {}
                ("maximum", Node::Number(_)) if number.is_some_and(|n| n >= SAFE_INTEGER) => {}
                ("minimum" | "maximum", Node::Number(_))
                    if integers && number.is_some_and(|n| n.fract() != 0.0) =>
                {
                    return Err(Unsupported);
                }
                ("maxLength" | "maxItems" | "maxProperties" | "maxContains", Node::Number(_))
                    if number.is_some_and(|n| n >= SAFE_INTEGER) => {}
                // Keywords at their default say nothing.
                ("minLength" | "minItems" | "minProperties", _) if number == Some(0.0) => {}
                ("uniqueItems" | "deprecated" | "readOnly" | "writeOnly", Node::Bool(false)) => {}
                _ => {
                    members.key(self.out, key);
                    self.verbatim(value, true)?;
                }
            }
        }
        if let Some(implied) = type_pending {
            members.key(self.out, "type");
            write_string(self.out, implied);
        }
        members.close(self.out);
        Ok(())
    }

    fn schema_map(&mut self, map: &Object<'_>) -> Direct {
        let mut members = Members::open();
        for (name, schema) in map.iter() {
            if unsupported_key(name, true) {
                return Err(Unsupported);
            }
            members.key(self.out, name);
            self.schema(schema)?;
        }
        members.close(self.out);
        Ok(())
    }

    /// Strings that need no escape, as a JSON array.
    fn names(&mut self, names: &[&str]) {
        self.out.push('[');
        for (index, name) in names.iter().enumerate() {
            if index > 0 {
                self.out.push(',');
            }
            self.out.push('"');
            self.out.push_str(name);
            self.out.push('"');
        }
        self.out.push(']');
    }

    /// A value the normal form keeps as it is, in canonical JSON.
    fn verbatim(&mut self, value: &Node<'_>, in_schema: bool) -> Direct {
        match value {
            Node::Null => self.out.push_str("null"),
            Node::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Node::Number(number) => write_float(self.out, *number),
            Node::String(text) => write_string(self.out, text),
            Node::Array(items) => {
                self.out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        self.out.push(',');
                    }
                    self.verbatim(item, in_schema)?;
                }
                self.out.push(']');
            }
            Node::Object(map) => {
                let mut members = Members::open();
                for (key, item) in map.iter() {
                    if unsupported_key(key, in_schema) {
                        return Err(Unsupported);
                    }
                    members.key(self.out, key);
                    self.verbatim(item, in_schema)?;
                }
                members.close(self.out);
            }
        }
        Ok(())
    }
}
