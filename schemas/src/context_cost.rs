//! What a server's declarations cost a model's context (the figures; counting is the detectors').

use serde::{Deserialize, Serialize};

/// A size in a model's context: tokens of the `o200k_base` encoding, and bytes of compact JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContextCost {
    pub tokens: u64,
    pub bytes: u64,
}

impl std::ops::Add for ContextCost {
    type Output = ContextCost;

    fn add(self, other: ContextCost) -> ContextCost {
        ContextCost {
            tokens: self.tokens.saturating_add(other.tokens),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

/// What a drift event's list costs next to its baseline, and why, in words:
/// `+12,400 tokens (+103.3 %): 3 tools added, 2 descriptions longer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContextCostChange {
    pub before: ContextCost,
    pub after: ContextCost,
    pub summary: String,
}

impl ContextCostChange {
    /// Tokens gained (negative: saved).
    pub fn tokens_delta(&self) -> i64 {
        (self.after.tokens as i64).saturating_sub(self.before.tokens as i64)
    }
}
