//! Which JSON Schema keywords hold sub-schemas: the one table the walks over a schema read (the normal
//! form and `$ref` expansion), so that a keyword added here is walked by both.

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
