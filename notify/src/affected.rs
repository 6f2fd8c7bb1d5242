//! Who a drift touches, for its notification: the agents that called each changed tool in the last day,
//! and what the new input schema makes of their real calls where they recorded arguments. Read from the
//! store's traffic when the notification is first sent.

use driftline_schemas::{Classification, Notification, NotificationKind, Timestamp};
use driftline_store::{ImpactQuery, QueryStore};

/// Changed tools looked up per notification, and lines it carries at most.
const MAX_TOOLS: usize = 5;
const MAX_LINES: usize = 10;
/// The window of calls a notification speaks of.
const HOURS: u32 = 24;

/// One line per agent of each BREAKING or WARNING tool of a drift notification, most calls first; none for
/// other notifications. A store that cannot answer leaves the notification without them (it is still sent).
pub(crate) async fn affected_agents(
    store: &dyn QueryStore,
    notification: &Notification,
    now: Timestamp,
) -> Vec<String> {
    let upcoming = notification.kind == NotificationKind::Upcoming;
    if notification.kind != NotificationKind::Drift && !upcoming {
        return Vec::new();
    }
    let mut tools: Vec<&str> = Vec::new();
    for change in &notification.top_changes {
        let serious = matches!(change.classification, Classification::Breaking | Classification::Warning);
        // Server-wide changes (instructions, context cost) name no tool.
        let named = !change.tool_name.is_empty();
        if serious && named && !tools.contains(&change.tool_name.as_str()) && tools.len() < MAX_TOOLS {
            tools.push(&change.tool_name);
        }
    }
    let mut lines = Vec::new();
    for tool in tools {
        let query = ImpactQuery {
            project: &notification.project,
            server: &notification.server_name,
            tool,
            hours: HOURS,
            now,
            high_risk_sessions: u64::MAX,
            input_schema: None,
        };
        let impact = match store.drift_impact(query).await {
            Ok(impact) => impact,
            Err(err) => {
                tracing::warn!(notification = %notification.id, tool, error = %err, "affected agents cannot be read; sent without them");
                return Vec::new();
            }
        };
        for consumer in &impact.consumers {
            let calls = consumer.call_count;
            // An upcoming release's schemas are not the tool's yet: its callers are counted, not checked.
            let line = match consumer.arguments {
                Some(_) if !upcoming => {
                    format!("{tool}: {} — {}", consumer.agent_name, consumer.real_calls())
                }
                _ => format!(
                    "{tool}: {} — {calls} call{} in {HOURS}h",
                    consumer.agent_name,
                    if calls == 1 { "" } else { "s" }
                ),
            };
            lines.push(line);
        }
    }
    lines.truncate(MAX_LINES);
    lines
}
