//! Per-project detector settings: shape thresholds, baseline policy and security hold (DESIGN.md §4, §5).

use serde::{Deserialize, Serialize};

/// What a project does with a new tool list (DESIGN.md §5): wait for an operator (`manual`), accept
/// it at once after recording its event (`auto`), or accept it at once only when every change is
/// COMPATIBLE (`compatible`, the default: safe upgrades never page anyone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BaselinePolicy {
    Manual,
    Auto,
    #[default]
    Compatible,
}

impl BaselinePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            BaselinePolicy::Manual => "manual",
            BaselinePolicy::Auto => "auto",
            BaselinePolicy::Compatible => "compatible",
        }
    }
}

/// The least severity of a security flag that holds a change for a person (DESIGN.md §5): a change
/// carrying such a flag is at least WARNING whatever its structural kind, so the `compatible` policy never
/// accepts it and a webhook sends it by default. `medium` by default; a project may raise it to `high`,
/// never lower it (low flags are hints, not reasons to page anyone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecurityHold {
    #[default]
    Medium,
    High,
}

impl SecurityHold {
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityHold::Medium => "medium",
            SecurityHold::High => "high",
        }
    }

    /// The least severity held.
    pub fn severity(self) -> crate::Severity {
        match self {
            SecurityHold::Medium => crate::Severity::Medium,
            SecurityHold::High => crate::Severity::High,
        }
    }
}

/// Per-project detector settings: the return-shape detector's thresholds (DESIGN.md §4) and the
/// tool-list baseline policy (§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorThresholds {
    /// Conclusive calls in the window before the tool can fire.
    pub min_history_calls: u32,
    /// How many conclusive shapes the window keeps.
    pub history_window: u32,
    /// Return values whose compact JSON is strictly longer than this are `oversized`.
    pub tool_return_value_max_bytes: u32,
    /// When a new tool list becomes the baseline without an operator.
    pub baseline: BaselinePolicy,
    /// The least security-flag severity that holds a change for a person.
    pub security_hold: SecurityHold,
    /// Keep the shapes of the arguments calls send (never their values), per tool, agent and hour, to
    /// check them against a new input schema. Off: spans' arguments are dropped unread.
    pub argument_shapes: bool,
    /// A new tool list (with the server's instructions) that costs a model's context more than this many
    /// tokens beyond its baseline carries a WARNING change of its own, `context_cost_grew`. 0: off.
    pub context_growth_tokens: u32,
    /// The same, as a share of the baseline's tokens, in percent. 0: off. Either limit reached raises it.
    pub context_growth_percent: u32,
}

impl Default for DetectorThresholds {
    fn default() -> Self {
        Self {
            min_history_calls: 10,
            history_window: 100,
            tool_return_value_max_bytes: 8192,
            baseline: BaselinePolicy::default(),
            security_hold: SecurityHold::default(),
            argument_shapes: true,
            context_growth_tokens: 0,
            context_growth_percent: 0,
        }
    }
}

/// A threshold outside its bounds, naming the key and the bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value} is out of bounds: it must be in [{min}, {max}]{extra}")]
pub struct ThresholdError {
    pub key: &'static str,
    pub value: u64,
    pub min: u64,
    pub max: u64,
    /// Why the lower bound is what it is, when it depends on another key.
    pub extra: String,
}

impl DetectorThresholds {
    pub const MIN_HISTORY_CALLS: (u32, u32) = (2, 1000);
    pub const HISTORY_WINDOW_MAX: u32 = 10_000;
    pub const MAX_BYTES: (u32, u32) = (1, 1_048_576);
    /// 0 (off) to a list five times the 5 MB list limit's worth of tokens.
    pub const CONTEXT_GROWTH_TOKENS_MAX: u32 = 10_000_000;
    pub const CONTEXT_GROWTH_PERCENT_MAX: u32 = 10_000;

    /// Checks every bound; the first violation is returned.
    pub fn validate(&self) -> Result<(), ThresholdError> {
        let (min_calls, max_calls) = Self::MIN_HISTORY_CALLS;
        check("min_history_calls", self.min_history_calls, min_calls, max_calls, String::new())?;
        let window_min = self.min_history_calls.max(10);
        check(
            "history_window",
            self.history_window,
            window_min,
            Self::HISTORY_WINDOW_MAX,
            format!(" (the lower bound is max(10, min_history_calls = {}))", self.min_history_calls),
        )?;
        let (min_bytes, max_bytes) = Self::MAX_BYTES;
        check(
            "tool_return_value_max_bytes",
            self.tool_return_value_max_bytes,
            min_bytes,
            max_bytes,
            String::new(),
        )?;
        let off = " (0 turns it off)".to_owned();
        check(
            "context_growth_tokens",
            self.context_growth_tokens,
            0,
            Self::CONTEXT_GROWTH_TOKENS_MAX,
            off.clone(),
        )?;
        check("context_growth_percent", self.context_growth_percent, 0, Self::CONTEXT_GROWTH_PERCENT_MAX, off)
    }
}

fn check(key: &'static str, value: u32, min: u32, max: u32, extra: String) -> Result<(), ThresholdError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ThresholdError { key, value: value.into(), min: min.into(), max: max.into(), extra })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(min_history_calls: u32, history_window: u32, max_bytes: u32, expected: Result<(), &str>) {
        let thresholds = DetectorThresholds {
            min_history_calls,
            history_window,
            tool_return_value_max_bytes: max_bytes,
            ..Default::default()
        };
        let got = thresholds.validate().map_err(|err| err.to_string());
        match (got, expected) {
            (Ok(()), Ok(())) => {}
            (Err(got), Err(want)) => assert_eq!(got, want),
            (got, want) => panic!("{thresholds:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn bounds() {
        check(10, 100, 8192, Ok(()));
        check(2, 10, 1, Ok(()));
        check(1000, 10_000, 1_048_576, Ok(()));
        check(1, 100, 8192, Err("min_history_calls = 1 is out of bounds: it must be in [2, 1000]"));
        check(1001, 10_000, 8192, Err("min_history_calls = 1001 is out of bounds: it must be in [2, 1000]"));
        check(
            10,
            9,
            8192,
            Err("history_window = 9 is out of bounds: it must be in [10, 10000] (the lower bound is max(10, min_history_calls = 10))"),
        );
        check(
            101,
            100,
            8192,
            Err("history_window = 100 is out of bounds: it must be in [101, 10000] (the lower bound is max(10, min_history_calls = 101))"),
        );
        check(10, 10_001, 8192, Err("history_window = 10001 is out of bounds: it must be in [10, 10000] (the lower bound is max(10, min_history_calls = 10))"));
        check(
            10,
            100,
            0,
            Err("tool_return_value_max_bytes = 0 is out of bounds: it must be in [1, 1048576]"),
        );
        check(
            10,
            100,
            1_048_577,
            Err("tool_return_value_max_bytes = 1048577 is out of bounds: it must be in [1, 1048576]"),
        );
        let growth = |tokens, percent| {
            let thresholds = DetectorThresholds {
                context_growth_tokens: tokens,
                context_growth_percent: percent,
                ..Default::default()
            };
            thresholds.validate().map_err(|err| err.to_string())
        };
        assert_eq!(growth(0, 0), Ok(()));
        assert_eq!(growth(10_000_000, 10_000), Ok(()));
        assert_eq!(
            growth(10_000_001, 0),
            Err("context_growth_tokens = 10000001 is out of bounds: it must be in [0, 10000000] (0 turns it off)".to_owned())
        );
        assert_eq!(
            growth(0, 10_001),
            Err("context_growth_percent = 10001 is out of bounds: it must be in [0, 10000] (0 turns it off)"
                .to_owned())
        );
    }

    #[test]
    fn missing_keys_take_defaults_and_unknown_keys_are_rejected() {
        let partial: DetectorThresholds =
            serde_json::from_str(r#"{"min_history_calls": 5}"#).expect("partial");
        assert_eq!(partial, DetectorThresholds { min_history_calls: 5, ..Default::default() });
        assert!(serde_json::from_str::<DetectorThresholds>(r#"{"window": 5}"#).is_err());
        let high: DetectorThresholds = serde_json::from_str(r#"{"security_hold": "high"}"#).expect("high");
        assert_eq!(high.security_hold, SecurityHold::High);
        // The hold is never lowered below medium: there is no such value.
        let low = serde_json::from_str::<DetectorThresholds>(r#"{"security_hold": "low"}"#);
        assert!(low.is_err_and(|err| err.to_string().contains("expected `medium` or `high`")));
    }
}
