//! What a tool list may hold before the detector normalises it: its size, its tools' names, their nesting,
//! and the nodes its `$ref`s copy in; checked on values (ingest, the probe) and on text (the worker).

use driftline_schemas::ToolsText;
use serde_json::Value;

use super::node;
use super::normal::ref_expansion;

/// A tool list within `limits`: its size, its tools' names (the rules calls meet), their nesting
/// ([`ToolListLimits::check`]), and the nodes its references copy in when its tools are normalised
/// (counted by expanding them, up to just past the limit).
pub fn check_tool_list(
    limits: &driftline_schemas::ToolListLimits,
    tools: &[Value],
) -> Result<(), driftline_schemas::ToolListTooLarge> {
    check_tool_list_work(limits, tools, 0).map(|_| ())
}

/// [`check_tool_list`], answering what normalising the list costs the detector, in [`list_work`] units,
/// for a list of `text_bytes`.
pub fn check_tool_list_work(
    limits: &driftline_schemas::ToolListLimits,
    tools: &[Value],
    text_bytes: usize,
) -> Result<u64, driftline_schemas::ToolListTooLarge> {
    if tools.len() > limits.max_tools {
        return Err(driftline_schemas::ToolListTooLarge::Tools(tools.len(), limits.max_tools));
    }
    for (index, tool) in tools.iter().enumerate() {
        driftline_schemas::check_tool_name(index, tool.get("name").and_then(Value::as_str))?;
    }
    limits.check(tools)?;
    let mut copied = 0;
    refs_within(limits, tools, &mut copied)?;
    Ok(list_work(text_bytes, copied))
}

/// What a tool list costs the detector, in bytes of schema read: its text, and 16 bytes for each node its
/// `$ref`s copy in (a node is about that much text), which normalising walks as if written out.
pub fn list_work(text_bytes: usize, copied_nodes: usize) -> u64 {
    (text_bytes as u64).saturating_add((copied_nodes as u64).saturating_mul(16))
}

/// Adds the nodes the references of `tools` copy in to `copied`, refusing once the total is beyond the limit.
fn refs_within(
    limits: &driftline_schemas::ToolListLimits,
    tools: &[Value],
    copied: &mut usize,
) -> Result<(), driftline_schemas::ToolListTooLarge> {
    *copied = copied.saturating_add(ref_expansion(tools, limits.max_ref_nodes.saturating_sub(*copied)));
    if *copied > limits.max_ref_nodes {
        return Err(driftline_schemas::ToolListTooLarge::RefExpansion(*copied, limits.max_ref_nodes));
    }
    Ok(())
}

/// Why a list held as text is refused ([`check_tools_text`]).
#[derive(Debug, thiserror::Error)]
pub enum RefusedTools {
    #[error("not a tool-list snapshot: tools[{0}]: {1}")]
    Unreadable(usize, serde_json::Error),
    #[error(transparent)]
    TooLarge(#[from] driftline_schemas::ToolListTooLarge),
}

/// [`check_tool_list`] for a list held as text: its entries parsed one at a time (a list of 5 MB never
/// exists as values whole), each readable as a value.
pub fn check_tools_text(
    limits: &driftline_schemas::ToolListLimits,
    tools: &ToolsText,
) -> Result<(), RefusedTools> {
    use driftline_schemas::ToolListTooLarge;
    if tools.len() > limits.max_tools {
        return Err(ToolListTooLarge::Tools(tools.len(), limits.max_tools).into());
    }
    // Names first, as for values: the same list gets the same answer on every path.
    for (index, entry) in tools.entries().iter().enumerate() {
        driftline_schemas::check_tool_name(index, driftline_schemas::name_of(entry).as_deref())?;
    }
    let mut copied = 0usize;
    for (index, entry) in tools.entries().iter().enumerate() {
        // Most tools pass at a glance (one pass over the text, nothing built).
        if node::plainly_within(entry.get(), limits.max_depth) {
            continue;
        }
        // The others are checked without building values: the borrowed reader gives their depth, and a
        // tool that mentions no `$ref` copies nothing in. One it does not take (nested past its own limit),
        // or one with references to expand, is read as a value.
        if let Some(tool) = node::parse(entry.get()) {
            let depth = tool.depth();
            if depth > limits.max_depth {
                return Err(ToolListTooLarge::Depth(index, depth, limits.max_depth).into());
            }
            if !tool.mentions_ref() {
                continue;
            }
        }
        let tool: Value =
            serde_json::from_str(entry.get()).map_err(|err| RefusedTools::Unreadable(index, err))?;
        limits.check_depth(index, &tool)?;
        refs_within(limits, std::slice::from_ref(&tool), &mut copied)?;
    }
    Ok(())
}
