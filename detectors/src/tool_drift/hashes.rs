//! The hashes of a tool list and of a tool (DESIGN.md §5 "Canonical hash"), the slow way from the normal
//! form and the fast way from the declarations ([`ToolIndex`]).
//!
//! The hash reads the normal form of `normal.rs`, as the diff does, so that two lists hash alike
//! exactly when the diff finds nothing between them.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canonical::write_object;
use super::digest::DefinitionDigest;
use super::index::{list_hash, ToolIndex};
use super::normal::NormalTool;

/// The `schema_hash` of a normalised tool list (sorted by name, one tool per name), from each tool's
/// normal form: what [`ToolIndex`] computes from the declarations, the slow way.
pub fn tools_hash(tools: &[NormalTool]) -> String {
    let digests: Vec<DefinitionDigest> = tools.iter().map(definition_digest_of).collect();
    hex::encode(list_hash(tools.iter().zip(&digests).map(|(tool, digest)| (tool.name.as_str(), digest))))
}

/// Hash of everything but the name: equal for a tool that was only renamed.
pub fn definition_hash(tool: &NormalTool) -> String {
    hex::encode(definition_digest_of(tool))
}

fn definition_digest_of(tool: &NormalTool) -> DefinitionDigest {
    let mut text = String::new();
    write_object(&mut text, &tool.definition, None);
    Sha256::digest(text.as_bytes()).into()
}

/// `schema_hash` of a declared tool list.
pub fn schema_hash(tools: &[Value]) -> String {
    ToolIndex::new(&driftline_schemas::ToolsText::from_values(tools)).hash()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hash_ignores_tool_order_key_order_meta_and_missing_input_schema() {
        let a =
            json!([{"name": "x", "inputSchema": {"type": "object", "required": ["p", "q"]}}, {"name": "y"}]);
        let b = json!([{"name": "y", "inputSchema": {}, "_meta": {"v": 2}},
            {"inputSchema": {"required": ["q", "p"], "type": "object"}, "name": "x"}]);
        assert_eq!(schema_hash(a.as_array().expect("a")), schema_hash(b.as_array().expect("b")));
        let c = json!([{"name": "x", "inputSchema": {"type": "object", "required": ["p"]}}, {"name": "y"}]);
        assert_ne!(schema_hash(a.as_array().expect("a")), schema_hash(c.as_array().expect("c")));
    }
}
