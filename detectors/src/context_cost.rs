//! What a server's declarations cost a model's context: the size of its tools (and its instructions) in
//! tokens of OpenAI's `o200k_base` encoding (GPT-4o, GPT-4.1, the o-series), counted with GitHub's
//! `bpe-openai` crate, and in bytes.
//!
//! Each tool is counted on its own as a client hands it to a model, in compact JSON (an SDK re-serialises
//! what the server sent, so a server's own whitespace is not counted), one per name as the detector reads
//! the list. A list's cost is the sum of its tools', so a new list's cost is its baseline's plus what its
//! changed tools add: the detector counts only those (tool_drift's `cost.rs`). Counted whole, the array
//! merges the punctuation between tools and comes to about one token per tool less.
//! Other models' tokenizers differ by some percent; a growth is what an operator reads, and it shows in any.
//! `bpe-openai` gives tiktoken's counts (tests/context_cost.rs holds them equal on every real list) in
//! linear time on any text, where tiktoken is superlinear on a long run without a break (a description of
//! one repeated letter).

use std::collections::HashMap;

use driftline_schemas::{name_of, ServerSurfaces, ToolsText};
use serde_json::value::RawValue;

pub use driftline_schemas::{ContextCost, ContextCostChange};

/// The encoding counted.
pub const ENCODING: &str = "o200k_base";

/// Tokens and bytes of `text` as it stands.
pub fn of_text(text: &str) -> ContextCost {
    ContextCost { tokens: bpe_openai::o200k_base().count(text) as u64, bytes: text.len() as u64 }
}

/// One tool, in compact JSON, with the comma (or bracket) that follows it in a list.
pub fn of_entry(entry: &RawValue) -> ContextCost {
    let compact = match serde_json::from_str::<serde_json::Value>(entry.get()) {
        Ok(value) => value.to_string(),
        Err(_) => entry.get().to_owned(),
    };
    let cost = of_text(&compact);
    ContextCost { bytes: cost.bytes + 1, ..cost }
}

/// A list's tools, one per name (the later of two, as the detector reads them); entries that are not
/// tools are not counted. One byte for the opening bracket.
pub fn of_tools(tools: &ToolsText) -> ContextCost {
    let entries = tools.entries();
    let mut last_of_name: HashMap<String, usize> = HashMap::new();
    for (at, entry) in entries.iter().enumerate() {
        if let Some(name) = name_of(entry) {
            last_of_name.insert(name, at);
        }
    }
    last_of_name.into_values().map(|at| of_entry(&entries[at])).fold(OPENING, |sum, cost| sum + cost)
}

/// The list's own bytes beside its tools'.
pub const OPENING: ContextCost = ContextCost { tokens: 0, bytes: 1 };

/// The server's instructions (a host puts them in the model's context with the tools; prompts and
/// resources are listed for the user, so they are not counted).
pub fn of_instructions(surfaces: Option<&ServerSurfaces>) -> ContextCost {
    surfaces.and_then(|s| s.instructions.as_deref()).map(of_text).unwrap_or_default()
}

/// `+12,400 tokens (+102.3 %)`, `-80 tokens (-1.0 %)`, `no change in tokens`.
pub fn delta(before: ContextCost, after: ContextCost) -> String {
    let change = after.tokens as i64 - before.tokens as i64;
    if change == 0 {
        return "no change in tokens".to_owned();
    }
    let sign = if change > 0 { '+' } else { '-' };
    let percent = match before.tokens {
        0 => String::new(),
        base => format!(" ({sign}{:.1} %)", change.unsigned_abs() as f64 * 100.0 / base as f64),
    };
    format!("{sign}{} tokens{percent}", grouped(change.unsigned_abs()))
}

/// `12400` as `12,400`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_counted_tool_by_tool_as_a_client_sends_them() {
        let tools = ToolsText::parse(
            "[{\"name\": \"search\",\n  \"description\": \"Search the web\"}, {\"name\":\"fetch\"}, 3]",
        )
        .expect("tools");
        let cost = of_tools(&tools);
        let (search, fetch) = (r#"{"name":"search","description":"Search the web"}"#, r#"{"name":"fetch"}"#);
        let tokens = of_text(search).tokens + of_text(fetch).tokens;
        // The bytes are the compact array's: `[`, each tool and the comma or bracket after it.
        let array = format!("[{search},{fetch}]");
        assert_eq!(cost, ContextCost { tokens, bytes: array.len() as u64 });
        assert!(cost.tokens > 10 && cost.tokens < cost.bytes, "{cost:?}");
        assert_eq!(of_tools(&ToolsText::parse("[]").expect("tools")), OPENING);
        // One per name, the later kept.
        let twice =
            ToolsText::parse(r#"[{"name":"a","description":"long long long"},{"name":"a"}]"#).expect("tools");
        assert_eq!(of_tools(&twice), OPENING + of_entry(&twice.entries()[1]));
    }

    #[test]
    fn instructions_count_as_their_text() {
        let surfaces =
            ServerSurfaces { instructions: Some("Use search first.".into()), ..Default::default() };
        assert_eq!(of_instructions(Some(&surfaces)), of_text("Use search first."));
        assert_eq!(of_instructions(None), ContextCost::default());
    }

    #[test]
    fn deltas_read_as_an_operator_says_them() {
        let cost = |tokens| ContextCost { tokens, bytes: 0 };
        assert_eq!(delta(cost(12_000), cost(24_400)), "+12,400 tokens (+103.3 %)");
        assert_eq!(delta(cost(8_000), cost(7_920)), "-80 tokens (-1.0 %)");
        assert_eq!(delta(cost(0), cost(1_234_567)), "+1,234,567 tokens");
        assert_eq!(delta(cost(5), cost(5)), "no change in tokens");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
    }
}
