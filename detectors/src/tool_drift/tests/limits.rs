//! Hostile lists: references that fan out, tool names calls could not carry.

use super::*;

#[test]
fn a_list_whose_references_fan_out_is_refused_and_one_that_reuses_a_definition_is_not() {
    use driftline_schemas::{ToolListLimits, ToolListTooLarge};
    let limits = ToolListLimits { max_ref_nodes: 1_000, ..Default::default() };
    let tool = |name: &str, schema: Value| json!({"name": name, "inputSchema": schema});
    // A definition referenced by three properties: each copy counts.
    let shared = json!({"type": "object", "properties": {
        "a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"}, "c": {"$ref": "#/$defs/p"}},
        "$defs": {"p": {"type": "object", "properties": {"x": {"type": "string"}}}}});
    let copied = ref_expansion(&[tool("s", shared.clone())], usize::MAX);
    assert_eq!(copied, 3 * 5, "three copies of a 5-node definition");
    assert_eq!(
        check_tool_list(&limits, &[tool("s", shared.clone()), tool("t", json!({"type": "object"}))]),
        Ok(())
    );
    // Doubling at each of 12 definitions: far more than 1,000 nodes.
    let refused = check_tool_list(&limits, &[tool("s", shared), tool("bomb", ref_bomb(12))]);
    assert!(
        matches!(refused, Err(ToolListTooLarge::RefExpansion(copied, 1_000)) if copied > 1_000),
        "{refused:?}"
    );
    // Many tools under the limit each, over it together.
    let many: Vec<Value> = (0..100).map(|i| tool(&format!("t{i}"), ref_bomb(4))).collect();
    assert!(matches!(check_tool_list(&limits, &many), Err(ToolListTooLarge::RefExpansion(..))));
    assert_eq!(check_tool_list(&ToolListLimits::default(), &many), Ok(()));
    // The worker's check of lists held as text, one tool at a time, agrees.
    let as_text = |limits: &ToolListLimits, tools: &[Value]| {
        check_tools_text(limits, &ToolsText::from_values(tools)).map_err(|err| err.to_string())
    };
    for limits in [limits, ToolListLimits::default(), ToolListLimits { max_tools: 99, ..limits }] {
        assert_eq!(as_text(&limits, &many), check_tool_list(&limits, &many).map_err(|err| err.to_string()));
    }
    let deep = (0..70).fold(json!("leaf"), |inner, _| json!({"nested": inner}));
    let listed = [tool("fine", json!({})), tool("deep", deep)];
    let refused = as_text(&ToolListLimits::default(), &listed).expect_err("too deep");
    assert_eq!(
        Err(refused),
        check_tool_list(&ToolListLimits::default(), &listed).map_err(|err| err.to_string())
    );
}

/// Tool names meet the rules of calls on every path — the values ingest and the probe check, the text the
/// worker checks — with one answer: a tool its calls could not name is refused, naming the tool.
#[test]
fn a_list_whose_tool_names_calls_could_not_carry_is_refused_on_every_path() {
    use driftline_schemas::{ToolListLimits, ToolListTooLarge};
    let limits = ToolListLimits::default();
    let as_text = |tools: &[Value]| {
        check_tools_text(&limits, &ToolsText::from_values(tools)).map_err(|err| err.to_string())
    };
    let long = "n".repeat(257);
    for (name, expected) in [
        (json!("."), "not . or .."),
        (json!(".."), "not . or .."),
        (json!("a\u{1}b"), "without control characters"),
        (json!(long), "1-256 bytes"),
        (json!(""), "1-256 bytes"),
        (json!(7), "name must be a string"),
        (Value::Null, "name must be a string"),
    ] {
        let tools = [json!({"name": "fine"}), json!({"name": name, "description": "x"})];
        let refused = check_tool_list(&limits, &tools).expect_err("a bad name");
        assert!(
            matches!(&refused, ToolListTooLarge::ToolName(1, why) if why.contains(expected)),
            "{name}: {refused}"
        );
        assert_eq!(as_text(&tools), Err(refused.to_string()), "{name}");
    }
    let nameless = [json!({"description": "no name"})];
    assert!(matches!(check_tool_list(&limits, &nameless), Err(ToolListTooLarge::ToolName(0, _))));
    // Names with `/`, spaces and any other printable characters are tools' own: accepted.
    let fine = [json!({"name": "a/b c:d@e"}), json!({"name": "ünïcode-名前"})];
    assert_eq!(check_tool_list(&limits, &fine), Ok(()));
    assert_eq!(as_text(&fine), Ok(()));
}
