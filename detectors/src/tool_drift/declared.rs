//! The output schemas a tool list declares, and which of them a baseline change alters: what the
//! server's detector publishes to each tool's partition (`OutputDeclaration`).

use std::collections::BTreeMap;

use driftline_schemas::ToolsText;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canonical::canonical_json;

/// A tool's declared `outputSchema` and the hex8 of its canonical JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredOutput {
    pub schema: Value,
    pub hash: String,
}

impl DeclaredOutput {
    pub fn new(schema: Value) -> Self {
        let digest = Sha256::digest(canonical_json(&schema).as_bytes());
        DeclaredOutput { hash: hex::encode(&digest[..4]), schema }
    }
}

/// Every tool's declared output schema in a raw tool list, by name. Entries that are not tools (no string
/// `name`) are skipped and of two tools with one name the later wins, as the normal form reads a list; a
/// `null` or non-schema `outputSchema` declares nothing.
pub fn declared_outputs(tools: &ToolsText) -> BTreeMap<String, DeclaredOutput> {
    let mut declared = BTreeMap::new();
    for tool in tools.entries().iter().filter_map(|entry| serde_json::from_str::<Value>(entry.get()).ok()) {
        let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
        match tool.get("outputSchema") {
            Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                declared.insert(name.to_owned(), DeclaredOutput::new(schema.clone()));
            }
            _ => {
                declared.remove(name);
            }
        }
    }
    declared
}

/// What changed between two baselines' declarations: each tool whose declared output is new, different
/// or gone (`None`), in name order.
pub fn changed_declarations(
    before: &BTreeMap<String, DeclaredOutput>,
    after: &BTreeMap<String, DeclaredOutput>,
) -> Vec<(String, Option<DeclaredOutput>)> {
    let mut changed: Vec<(String, Option<DeclaredOutput>)> = after
        .iter()
        .filter(|(name, output)| before.get(*name).is_none_or(|old| old.hash != output.hash))
        .map(|(name, output)| (name.clone(), Some(output.clone())))
        .collect();
    changed.extend(before.keys().filter(|name| !after.contains_key(*name)).map(|name| (name.clone(), None)));
    changed.sort_by(|a, b| a.0.cmp(&b.0));
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names(changed: &[(String, Option<DeclaredOutput>)]) -> Vec<String> {
        changed
            .iter()
            .map(|(name, output)| {
                format!("{name}:{}", if output.is_some() { "declared" } else { "withdrawn" })
            })
            .collect()
    }

    #[test]
    fn reads_declarations_and_their_changes() {
        let old = declared_outputs(&ToolsText::from_values(&[
            json!({"name": "a", "outputSchema": {"type": "object"}}),
            json!({"name": "b", "outputSchema": {"type": "object", "properties": {"x": {"type": "number"}}}}),
            json!({"name": "c", "outputSchema": {"type": "object"}}),
            json!({"name": "d"}),
            json!({"title": "not a tool", "outputSchema": {}}),
        ]));
        assert_eq!(old.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        let new = declared_outputs(&ToolsText::from_values(&[
            json!({"name": "a", "outputSchema": {"type": "object"}}),
            json!({"name": "b", "outputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}),
            json!({"name": "d", "outputSchema": true}),
            json!({"name": "e", "outputSchema": null}),
        ]));
        assert_eq!(names(&changed_declarations(&old, &new)), ["b:declared", "c:withdrawn", "d:declared"]);
        assert!(changed_declarations(&new, &new).is_empty());
        // Key order does not change the hash.
        let reordered =
            DeclaredOutput::new(json!({"properties": {"x": {"type": "number"}}, "type": "object"}));
        assert_eq!(reordered.hash, old["b"].hash);
    }

    #[test]
    fn a_later_tool_of_the_same_name_wins() {
        let declared = declared_outputs(&ToolsText::from_values(&[
            json!({"name": "a", "outputSchema": {"type": "object"}}),
            json!({"name": "a"}),
        ]));
        assert!(declared.is_empty());
    }
}
