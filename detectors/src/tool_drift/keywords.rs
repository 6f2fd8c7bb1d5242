//! Which JSON Schema keywords hold sub-schemas: the one table the walks over a schema read (the normal
//! form and `$ref` expansion), so that a keyword added here is walked by both; and the keywords the
//! equivalences read, as bits, so a schema object is scanned once for all of them.

use serde_json::{Map, Value};

/// Keywords whose value is a schema (JSON Schema 2020-12 and the drafts MCP servers still send).
pub const SCHEMA_KEYWORDS: &[&str] = &[
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
/// Keywords whose value is a map of schemas.
pub const SCHEMA_MAP_KEYWORDS: &[&str] =
    &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];
/// Keywords whose value is a list of schemas.
pub const SCHEMA_LIST_KEYWORDS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];

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
