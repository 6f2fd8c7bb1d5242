//! The security review of a tool as the diff runs it: every model-visible text of the tool, and the
//! annotations whose change makes a tool riskier.

use driftline_schemas::{SecurityFlag, Severity};
use serde_json::{Map, Value};

use crate::tool_drift::normal::NormalTool;
use crate::tool_drift::security::{self, review_text, TextContext, ToolNames};

/// First-sight review of a tool: every model-visible text in it.
pub fn review_tool(tool: &NormalTool, tool_names: &ToolNames<'_>) -> Vec<SecurityFlag> {
    let context = TextContext { previous: None, own_tool: &tool.name, tool_names: Some(tool_names) };
    let mut flags = Vec::new();
    let mut texts: Vec<&str> = ["description", "title"]
        .iter()
        .filter_map(|key| tool.definition.get(*key).and_then(Value::as_str))
        .collect();
    if let Some(title) =
        tool.definition.get("annotations").and_then(|a| a.get("title")).and_then(Value::as_str)
    {
        texts.push(title);
    }
    for key in ["inputSchema", "outputSchema"] {
        if let Some(schema) = tool.definition.get(key) {
            collect_schema_texts(schema, &mut texts);
        }
    }
    for text in texts {
        flags.extend(review_text(text, context));
    }
    flags
}

pub(super) fn collect_schema_texts<'a>(schema: &'a Value, texts: &mut Vec<&'a str>) {
    let Some(object) = schema.as_object() else { return };
    for key in ["description", "title"] {
        if let Some(text) = object.get(key).and_then(Value::as_str) {
            texts.push(text);
        }
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for property in properties.values() {
            collect_schema_texts(property, texts);
        }
    }
    if let Some(items) = object.get("items") {
        collect_schema_texts(items, texts);
    }
}

/// Effective annotation hints (MCP defaults: readOnlyHint false, destructiveHint true unless read-only);
/// a move toward risk is flagged.
pub(super) fn annotation_risk(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<SecurityFlag> {
    let read_only = |a: &Map<String, Value>| a.get("readOnlyHint").and_then(Value::as_bool).unwrap_or(false);
    let destructive = |a: &Map<String, Value>| {
        !read_only(a) && a.get("destructiveHint").and_then(Value::as_bool).unwrap_or(true)
    };
    let mut flags = Vec::new();
    let mut risk = |excerpt: &str| {
        flags.push(SecurityFlag {
            rule: security::ANNOTATION_RISK.to_owned(),
            severity: Severity::Medium,
            excerpt: excerpt.to_owned(),
        })
    };
    if read_only(old) && !read_only(new) {
        risk("readOnlyHint: true -> false");
    }
    if !destructive(old) && destructive(new) {
        risk("destructiveHint: false -> true");
    }
    flags
}
