//! What a tool list costs a model's context: its size in tokens (OpenAI's `o200k_base` encoding, the one
//! GPT-4o, GPT-4.1 and the o-series use, through the maintained `tiktoken-rs` crate) and in bytes, counted on
//! the list as a client hands it to a model: the tools array in compact JSON (an SDK re-serialises what the
//! server sent, so a server's own whitespace is not counted).
//! Other models' tokenizers differ by some percent; a growth is what an operator reads, and it shows in any.

use std::sync::LazyLock;

use driftline_schemas::ToolsText;
use serde::{Deserialize, Serialize};

/// The encoding counted.
pub const ENCODING: &str = "o200k_base";

/// Built once (a few tens of milliseconds); `None` only if the crate's embedded ranks fail to load.
static TOKENIZER: LazyLock<Option<tiktoken_rs::CoreBPE>> = LazyLock::new(|| tiktoken_rs::o200k_base().ok());

/// A tool list's size in a model's context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextCost {
    pub tokens: u64,
    pub bytes: u64,
}

impl ContextCost {
    /// The tools array in compact JSON: `[` entry `,` entry … `]`, each entry re-written without whitespace.
    pub fn of_tools(tools: &ToolsText) -> ContextCost {
        let mut text = String::with_capacity(tools.text_bytes() + tools.len() + 2);
        text.push('[');
        for (index, entry) in tools.entries().iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            match serde_json::from_str::<serde_json::Value>(entry.get()) {
                Ok(value) => text.push_str(&value.to_string()),
                Err(_) => text.push_str(entry.get()),
            }
        }
        text.push(']');
        ContextCost::of_text(&text)
    }

    pub fn of_text(text: &str) -> ContextCost {
        let tokens = TOKENIZER.as_ref().map_or(0, |bpe| bpe.encode_ordinary(text).len()) as u64;
        ContextCost { tokens, bytes: text.len() as u64 }
    }

    /// `+12,400 tokens (+102.3 %)`, `-80 tokens (-1.0 %)`, `no change`.
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
    fn a_list_is_counted_as_the_array_a_client_sends() {
        let tools = ToolsText::parse(
            "[{\"name\": \"search\",\n  \"description\": \"Search the web\"}, {\"name\":\"fetch\"}]",
        )
        .expect("tools");
        let cost = ContextCost::of_tools(&tools);
        let text = r#"[{"name":"search","description":"Search the web"},{"name":"fetch"}]"#;
        assert_eq!(cost, ContextCost::of_text(text));
        assert_eq!(cost.bytes, text.len() as u64);
        assert!(cost.tokens > 10 && cost.tokens < cost.bytes, "{cost:?}");
        assert_eq!(
            ContextCost::of_tools(&ToolsText::parse("[]").expect("tools")),
            ContextCost { tokens: 1, bytes: 2 }
        );
    }

    #[test]
    fn deltas_read_as_an_operator_says_them() {
        let cost = |tokens| ContextCost { tokens, bytes: 0 };
        assert_eq!(ContextCost::delta(cost(12_000), cost(24_400)), "+12,400 tokens (+103.3 %)");
        assert_eq!(ContextCost::delta(cost(8_000), cost(7_920)), "-80 tokens (-1.0 %)");
        assert_eq!(ContextCost::delta(cost(0), cost(1_234_567)), "+1,234,567 tokens");
        assert_eq!(ContextCost::delta(cost(5), cost(5)), "no change in tokens");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
    }
}
