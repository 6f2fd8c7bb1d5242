//! A list's context cost from its index, and what a new list adds to its baseline's, counting only the
//! tools whose text changed (a probe's list with one tool rewritten costs one tool's count, not a list's).

use driftline_schemas::{ContextCost, ContextCostChange, ServerSurfaces};
use serde_json::Value;

use super::index::{side_by_side, IndexedList};
use crate::context_cost::{delta, grouped, of_entry, of_instructions, OPENING};

/// Tools and instructions of a list counted whole (a baseline's first sight, or a state stored before
/// driftline counted them).
pub fn server_cost(list: IndexedList<'_>, surfaces: Option<&ServerSurfaces>) -> ContextCost {
    let entries = list.tools.entries();
    let tools = list.index.tools().iter().filter_map(|tool| entries.get(tool.at)).map(|e| of_entry(e));
    tools.fold(OPENING, |sum, cost| sum + cost) + of_instructions(surfaces)
}

/// What changed the cost between two lists, as counts of what an operator reads.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parts {
    added: u64,
    removed: u64,
    descriptions_longer: u64,
    descriptions_shorter: u64,
    larger: u64,
    smaller: u64,
    instructions: Option<bool>,
}

impl Parts {
    fn words(&self) -> Vec<String> {
        let count = |n: u64, one: &str, many: &str| match n {
            0 => None,
            1 => Some(format!("1 {one}")),
            n => Some(format!("{} {many}", grouped(n))),
        };
        let instructions = self
            .instructions
            .map(|longer| if longer { "instructions longer" } else { "instructions shorter" }.to_owned());
        [
            count(self.added, "tool added", "tools added"),
            count(self.removed, "tool removed", "tools removed"),
            count(self.descriptions_longer, "description longer", "descriptions longer"),
            count(self.descriptions_shorter, "description shorter", "descriptions shorter"),
            count(self.larger, "tool larger", "tools larger"),
            count(self.smaller, "tool smaller", "tools smaller"),
            instructions,
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// The new list's cost, from the baseline's (`before`) and the tools whose text differs, with the words
/// that say why: `+12,400 tokens (+103.3 %): 3 tools added, 2 descriptions longer`.
pub fn cost_change(
    before: ContextCost,
    (old, new): (IndexedList<'_>, IndexedList<'_>),
    (old_surfaces, new_surfaces): (Option<&ServerSurfaces>, Option<&ServerSurfaces>),
) -> ContextCostChange {
    let (mut tokens, mut bytes) = (0i64, 0i64);
    let mut add = |cost: ContextCost, sign: i64| {
        tokens += sign * cost.tokens as i64;
        bytes += sign * cost.bytes as i64;
        sign * cost.tokens as i64
    };
    let mut parts = Parts::default();
    for pair in side_by_side(old.index, new.index) {
        match pair {
            (None, Some(added)) => {
                if let Some(entry) = new.tools.entries().get(added.at) {
                    add(of_entry(entry), 1);
                    parts.added += 1;
                }
            }
            (Some(removed), None) => {
                if let Some(entry) = old.tools.entries().get(removed.at) {
                    add(of_entry(entry), -1);
                    parts.removed += 1;
                }
            }
            (Some(was), Some(is)) if text(old, was.at) != text(new, is.at) => {
                let (Some(was_entry), Some(is_entry)) =
                    (old.tools.entries().get(was.at), new.tools.entries().get(is.at))
                else {
                    continue;
                };
                let change = add(of_entry(is_entry), 1) + add(of_entry(was_entry), -1);
                let description = |list: IndexedList<'_>, at: usize| {
                    list.tools.value(at).and_then(|tool| match tool.get("description") {
                        Some(Value::String(text)) => Some(text.len()),
                        _ => None,
                    })
                };
                // Told by its description where that moved the same way as the tool's count, else by the
                // tool as a whole (a shorter description in a tool whose schema grew is a larger tool).
                let (was_text, is_text) =
                    (description(old, was.at).unwrap_or(0), description(new, is.at).unwrap_or(0));
                match change.signum() {
                    1 if is_text > was_text => parts.descriptions_longer += 1,
                    1 => parts.larger += 1,
                    -1 if is_text < was_text => parts.descriptions_shorter += 1,
                    -1 => parts.smaller += 1,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let (was, is) = (
        old_surfaces.and_then(|s| s.instructions.as_deref()),
        new_surfaces.and_then(|s| s.instructions.as_deref()),
    );
    if was != is {
        let change = add(of_instructions(new_surfaces), 1) + add(of_instructions(old_surfaces), -1);
        parts.instructions = (change != 0).then_some(change > 0);
    }
    let after = ContextCost {
        tokens: (before.tokens as i64).saturating_add(tokens).max(0) as u64,
        bytes: (before.bytes as i64).saturating_add(bytes).max(0) as u64,
    };
    let words = parts.words();
    let summary = match words.is_empty() {
        true => delta(before, after),
        false => format!("{}: {}", delta(before, after), words.join(", ")),
    };
    ContextCostChange { before, after, summary }
}

/// The project's limits on growth (`context_growth_tokens`, `context_growth_percent`; 0: off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextGrowth {
    pub tokens: u32,
    pub percent: u32,
}

impl ContextGrowth {
    /// Whether `change` grew past either limit.
    pub fn exceeded(&self, change: &ContextCostChange) -> bool {
        let grown = change.tokens_delta();
        let base = i128::from(change.before.tokens);
        grown > 0
            && ((self.tokens > 0 && grown > i64::from(self.tokens))
                || (self.percent > 0 && i128::from(grown) * 100 > base * i128::from(self.percent)))
    }
}

fn text<'a>(list: IndexedList<'a>, at: usize) -> Option<&'a str> {
    list.tools.entries().get(at).map(|entry| entry.get())
}
