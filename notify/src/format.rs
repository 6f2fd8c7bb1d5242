//! The request bodies: the notification as JSON, or a Slack incoming-webhook message (blocks). Pure.

use driftline_schemas::{Classification, Notification, NotificationKind};
use serde_json::{json, Value};

/// Slack section text may hold 3,000 characters; server text is cut well before.
const MAX_TEXT: usize = 2800;
const MAX_NOTE: usize = 500;

/// Where the dashboard shows the server, when `public_url` is set.
pub fn dashboard_url(public_url: Option<&str>, notification: &Notification) -> Option<String> {
    let base = public_url?.trim_end_matches('/');
    let server = percent_encode(&notification.server_name);
    Some(match (notification.kind, &notification.tool) {
        (NotificationKind::DeclaredOutputMismatch, Some(tool)) => {
            format!("{base}/#/servers/{server}/timeline/{}", percent_encode(tool))
        }
        (NotificationKind::Upcoming, _) => format!("{base}/#/upcoming/{server}"),
        _ => format!("{base}/#/servers/{server}/drift"),
    })
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn json_body(notification: &Notification, public_url: Option<&str>) -> Value {
    let mut body = serde_json::to_value(notification).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut body {
        map.insert("dashboard_url".into(), json!(dashboard_url(public_url, notification)));
    }
    body
}

/// Text from a server (names, descriptions, errors) is shown as text: Slack's control characters escaped,
/// and cut to `max` characters.
fn escape(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == max {
            out.push('…');
            break;
        }
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\''),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn headline(notification: &Notification) -> String {
    let server = escape(&notification.server_name, 100);
    match notification.kind {
        NotificationKind::Drift => {
            let worst = notification.classification.map_or("NO-CHANGE", |c| c.as_str());
            format!("{worst} tool-list drift on {server}")
        }
        NotificationKind::Down => format!("{server} is DOWN"),
        NotificationKind::Up => format!("{server} is UP again"),
        NotificationKind::DeclaredOutputMismatch => {
            let tool = escape(notification.tool.as_deref().unwrap_or("?"), 100);
            format!("BREAKING: {tool} on {server} returns what its declared output schema does not allow")
        }
        NotificationKind::Upcoming => {
            let release = escape(notification.release.as_deref().unwrap_or("the next release"), 160);
            // "would BREAK 2 tools of files", "would change 1 tool of files (WARNING)".
            let (verb, mark) = match notification.classification {
                Some(Classification::Breaking) => ("BREAK", String::new()),
                Some(other) => ("change", format!(" ({})", other.as_str())),
                None => ("change", String::new()),
            };
            let worst_class = notification.classification;
            let mut tools: Vec<&str> = notification
                .top_changes
                .iter()
                .filter(|change| Some(change.classification) == worst_class && !change.tool_name.is_empty())
                .map(|change| change.tool_name.as_str())
                .collect();
            tools.sort_unstable();
            tools.dedup();
            match tools.len() {
                0 => format!("{release} would {verb} {server}{mark}"),
                1 => format!("{release} would {verb} 1 tool of {server}{mark}"),
                n => format!("{release} would {verb} {n} tools of {server}{mark}"),
            }
        }
    }
}

pub fn slack_body(notification: &Notification, public_url: Option<&str>) -> Value {
    let mut blocks =
        vec![json!({"type": "header", "text": {"type": "plain_text", "text": headline(notification)}})];
    let mut fields = vec![
        json!({"type": "mrkdwn", "text": format!("*Server*\n{}", escape(&notification.server_name, 100))}),
        json!({"type": "mrkdwn", "text": format!("*Project*\n{}", escape(&notification.project, 100))}),
    ];
    if matches!(notification.kind, NotificationKind::Drift | NotificationKind::Upcoming) {
        let c = notification.counts;
        fields.push(json!({"type": "mrkdwn", "text": format!("*Worst*\n{}",
            notification.classification.map_or("none", |c| c.as_str()))}));
        fields.push(json!({"type": "mrkdwn", "text": format!(
            "*Changes*\n{} breaking · {} warning · {} compatible", c.breaking, c.warning, c.compatible)}));
    }
    blocks.push(json!({"type": "section", "fields": fields}));
    if !notification.top_changes.is_empty() {
        let total =
            notification.counts.breaking + notification.counts.warning + notification.counts.compatible;
        let mut lines: Vec<String> = notification
            .top_changes
            .iter()
            .map(|change| {
                let kind = serde_json::to_value(change.change_type)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let place = if change.path.is_empty() {
                    String::new()
                } else {
                    format!(" `{}`", escape(&change.path, 120))
                };
                format!(
                    "• *{}* `{}` {kind}{place}",
                    change.classification.as_str(),
                    escape(&change.tool_name, 120)
                )
            })
            .collect();
        if total as usize > lines.len() {
            lines.push(format!("… and {} more", total as usize - lines.len()));
        }
        blocks.push(
            json!({"type": "section", "text": {"type": "mrkdwn", "text": escape_len(lines.join("\n"))}}),
        );
    }
    if !notification.security_flags.is_empty() {
        let severity = notification
            .max_severity
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut lines = vec![format!(
            ":warning: *{} security flag(s)*, worst {severity}",
            notification.security_flags_total
        )];
        lines.extend(notification.security_flags.iter().take(5).map(|(tool, flag)| {
            format!("• `{}` {}: {}", escape(tool, 120), escape(&flag.rule, 80), escape(&flag.excerpt, 200))
        }));
        blocks.push(
            json!({"type": "section", "text": {"type": "mrkdwn", "text": escape_len(lines.join("\n"))}}),
        );
    }
    if let Some(cost) = &notification.context_cost {
        let text = format!("*Context cost*: {}", escape(cost, 300));
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": text}}));
    }
    if !notification.affected_agents.is_empty() {
        let mut lines = vec!["*Affected agents (24h)*".to_owned()];
        lines.extend(notification.affected_agents.iter().map(|line| format!("• {}", escape(line, 300))));
        blocks.push(
            json!({"type": "section", "text": {"type": "mrkdwn", "text": escape_len(lines.join("\n"))}}),
        );
    }
    if let Some(note) = &notification.note {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": escape(note, MAX_NOTE)}}));
    }
    if let Some(url) = dashboard_url(public_url, notification) {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("<{url}|Open in driftline>")}}));
    }
    json!({"text": headline(notification), "blocks": blocks})
}

/// Built from escaped parts: only the length needs bounding.
fn escape_len(text: String) -> String {
    if text.chars().count() <= MAX_TEXT {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_TEXT).collect();
    cut.push('…');
    cut
}

/// `X-Driftline-Signature`: `sha256=` and the lowercase hex HMAC-SHA256 of the body under the secret.
pub fn signature(secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = match Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        // HMAC takes keys of any length.
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use driftline_schemas::{ChangeType, SchemaChange, SchemaDriftEvent, SecurityFlag, Severity, Timestamp};

    fn event() -> SchemaDriftEvent {
        let change = |change_type, classification, tool: &str, path: &str| SchemaChange {
            change_type,
            classification,
            tool_name: tool.into(),
            param_name: None,
            path: path.into(),
            direction: None,
            before: Value::Null,
            after: Value::Null,
            security_flags: Vec::new(),
            param_type: None,
            old_description: None,
            new_description: None,
        };
        let mut poisoned = change(ChangeType::DescriptionChanged, Classification::Warning, "get<page>", "");
        poisoned.security_flags.push(SecurityFlag {
            rule: "instruction_override".into(),
            severity: Severity::High,
            excerpt: "ignore <all> previous".into(),
        });
        let changes = vec![
            change(ChangeType::ToolAdded, Classification::Compatible, "fetch", ""),
            poisoned,
            change(ChangeType::ParamBecameRequired, Classification::Breaking, "search", "region"),
        ];
        SchemaDriftEvent {
            id: "drift-1".into(),
            project: "default".into(),
            server_name: "search mcp".into(),
            detected_at: Timestamp::from_millis(1_700_000_000_000).expect("a valid time"),
            previous_hash: "a".into(),
            current_hash: "b".into(),
            status: driftline_schemas::EventStatus::Open,
            changes,
            omitted_changes: Default::default(),
            max_classification: Some(Classification::Breaking),
            max_severity: Some(Severity::High),
            accepted_by: None,
            accepted_at: None,
            previous_tools: Default::default(),
            current_tools: Default::default(),
            lists_omitted: false,
            context_cost: None,
        }
    }

    #[test]
    fn a_drift_notification_carries_counts_the_worst_changes_first_and_the_flags() {
        let notification = Notification::drift(&event());
        assert_eq!(
            (notification.counts.breaking, notification.counts.warning, notification.counts.compatible),
            (1, 1, 1)
        );
        let order: Vec<Classification> = notification.top_changes.iter().map(|c| c.classification).collect();
        assert_eq!(order, [Classification::Breaking, Classification::Warning, Classification::Compatible]);
        assert_eq!(notification.security_flags.len(), 1);
    }

    #[test]
    fn changes_the_event_did_not_list_are_counted() {
        let mut event = event();
        event.omitted_changes = [(Classification::Breaking, 4_000), (Classification::Compatible, 7)].into();
        let counts = Notification::drift(&event).counts;
        assert_eq!((counts.breaking, counts.warning, counts.compatible), (4_001, 1, 8));
    }

    #[test]
    fn a_poisoned_list_of_thousands_makes_a_bounded_notification() {
        let mut event = event();
        let flagged = event.changes[1].clone();
        event.changes = (0..5_000).map(|_| flagged.clone()).collect();
        let notification = Notification::drift(&event);
        assert_eq!(notification.top_changes.len(), driftline_schemas::TOP_CHANGES);
        assert_eq!(notification.security_flags.len(), driftline_schemas::TOP_SECURITY_FLAGS);
        assert_eq!(notification.security_flags_total, 5_000);
        let body = slack_body(&notification, None).to_string();
        assert!(body.contains("5000 security flag(s)"), "{body}");
        assert!(body.len() < 10_000, "{} bytes", body.len());
        assert!(json_body(&notification, None).to_string().len() < 20_000);
    }

    #[test]
    fn affected_agents_ride_in_both_bodies_as_text() {
        let mut notification = Notification::drift(&event());
        assert!(!json_body(&notification, None).to_string().contains("affected_agents"), "none: no field");
        notification.affected_agents = vec![
            "search: planner — 23 of 24 calls would be rejected — filters: required by the declared schema, missing".into(),
            "search: <b>bot</b> — 3 calls in 24h".into(),
        ];
        assert_eq!(json_body(&notification, None)["affected_agents"][0], notification.affected_agents[0]);
        let text = slack_body(&notification, None).to_string();
        assert!(text.contains("*Affected agents (24h)*"), "{text}");
        assert!(text.contains("• search: planner — 23 of 24 calls would be rejected"), "{text}");
        assert!(text.contains("&lt;b&gt;bot&lt;/b&gt;") && !text.contains("<b>"), "{text}");
    }

    /// The headline of an upcoming release, from the event's changes under `classification`.
    fn check_upcoming_headline(classification: Option<Classification>, expected: &str) {
        let mut notification = Notification::drift(&event());
        notification.kind = NotificationKind::Upcoming;
        notification.release = Some("npm:@scope/search 2.0.0".into());
        notification.classification = classification;
        assert_eq!(headline(&notification), expected);
    }

    #[test]
    fn an_upcoming_headline_says_what_the_release_would_do() {
        check_upcoming_headline(
            Some(Classification::Breaking),
            "npm:@scope/search 2.0.0 would BREAK 1 tool of search mcp",
        );
        check_upcoming_headline(
            Some(Classification::Warning),
            "npm:@scope/search 2.0.0 would change 1 tool of search mcp (WARNING)",
        );
        check_upcoming_headline(None, "npm:@scope/search 2.0.0 would change search mcp");
    }

    #[test]
    fn the_context_cost_rides_in_both_bodies() {
        let mut event = event();
        assert!(!json_body(&Notification::drift(&event), None).to_string().contains("context_cost"));
        let cost = |tokens| driftline_schemas::ContextCost { tokens, bytes: tokens * 4 };
        event.context_cost = Some(driftline_schemas::ContextCostChange {
            before: cost(12_000),
            after: cost(24_400),
            summary: "+12,400 tokens (+103.3 %): 3 tools added, 2 descriptions longer".into(),
        });
        let notification = Notification::drift(&event);
        assert_eq!(
            json_body(&notification, None)["context_cost"],
            "+12,400 tokens (+103.3 %): 3 tools added, 2 descriptions longer"
        );
        let text = slack_body(&notification, None).to_string();
        assert!(text.contains("*Context cost*: +12,400 tokens (+103.3 %): 3 tools added"), "{text}");
    }

    #[test]
    fn slack_blocks_name_the_server_escape_server_text_and_link_the_dashboard() {
        let body = slack_body(&Notification::drift(&event()), Some("https://driftline.example/"));
        let text = body.to_string();
        assert_eq!(body["text"], "BREAKING tool-list drift on search mcp");
        assert!(text.contains("1 breaking · 1 warning · 1 compatible"), "{text}");
        assert!(text.contains("get&lt;page&gt;") && !text.contains("get<page>"), "{text}");
        assert!(text.contains("ignore &lt;all&gt; previous"), "{text}");
        assert!(
            text.contains("<https://driftline.example/#/servers/search%20mcp/drift|Open in driftline>"),
            "{text}"
        );
        let without_link = slack_body(&Notification::drift(&event()), None).to_string();
        assert!(!without_link.contains("Open in driftline"), "{without_link}");
    }

    #[test]
    fn json_bodies_are_the_notification_with_a_link() {
        let body = json_body(&Notification::drift(&event()), Some("http://h"));
        assert_eq!(body["kind"], "drift");
        assert_eq!(body["classification"], "BREAKING");
        assert_eq!(body["dashboard_url"], "http://h/#/servers/search%20mcp/drift");
    }

    #[test]
    fn a_declared_output_mismatch_names_the_tool_and_the_paths_and_links_its_timeline() {
        let signal = driftline_schemas::ShapeDriftSignal {
            id: "mismatch-1".into(),
            kind: driftline_schemas::SignalKind::DeclaredOutputMismatch,
            project: "default".into(),
            server: "weather-mcp".into(),
            tool: "get_forecast".into(),
            detected_at: driftline_schemas::Timestamp::parse("2026-03-26T08:15:42.000Z").expect("time"),
            fingerprint: "declared_output_mismatch:get_forecast:0a1b2c3d".into(),
            shape: "{temp:string}".into(),
            shape_hash: "0a1b2c3d".into(),
            baseline_shape: "{}".into(),
            baseline_hash: "12345678".into(),
            baseline_count: 6,
            window_size: 18,
            ranking: driftline_schemas::ShapeRanking::Breaking,
            reasons: vec![driftline_schemas::ShapeReason {
                path: "temp_c".into(),
                change: driftline_schemas::ReasonChange::Removed,
                before: Some("number".into()),
                after: None,
                detail: Some("required by the declared schema, missing".into()),
            }],
            span_id: "s18".into(),
            call_started_at: None,
        };
        let notification = Notification::output_mismatch(&signal);
        let body = json_body(&notification, Some("http://h"));
        assert_eq!(body["kind"], "declared_output_mismatch");
        assert_eq!(body["id"], "mismatch-1");
        assert_eq!(body["tool"], "get_forecast");
        assert_eq!(body["classification"], "BREAKING");
        assert_eq!(body["note"], "temp_c: required by the declared schema, missing");
        assert_eq!(body["dashboard_url"], "http://h/#/servers/weather-mcp/timeline/get_forecast");
        let slack = slack_body(&notification, None);
        assert_eq!(
            slack["text"],
            "BREAKING: get_forecast on weather-mcp returns what its declared output schema does not allow"
        );
        assert!(slack.to_string().contains("temp_c: required by the declared schema, missing"));
    }

    #[test]
    fn signatures_are_the_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
