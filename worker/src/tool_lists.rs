//! Reading tool-list records. Most are a probe's unchanged list, sent again as it was: a list whose text
//! holds exactly the entries of the last one read for its server is that list, taken without parsing it
//! again (nor checking its limits again: it passed them). Parsing is most of what such a record costs.

use std::collections::HashMap;
use std::sync::Arc;

use driftline_detectors::tool_drift::ServerState;
use driftline_schemas::{ServerKey, ToolListLimits, ToolListRecord, ToolListTooLarge, ToolsText};

use driftline_detectors::tool_drift::RefusedTools;

use crate::refusal::{Refusal, RefusalKind};

/// The last tool list read per server. A new record's text is compared with it byte for byte (a SHA-256
/// of the text, as before, cost as much as reading the record), so no server can pass another list off
/// as the one seen.
#[derive(Default)]
pub struct ListTexts {
    last: HashMap<ServerKey, Arc<ToolsText>>,
    /// Bytes of list text parsed since [`ListTexts::take_parsed_bytes`].
    parsed_bytes: usize,
}

impl ListTexts {
    /// The record's tools: the list read before when the text is the same, else parsed and checked,
    /// with `held()` the bytes of list text the server's project would hold beside it (the list read before
    /// is held already).
    pub fn read(
        &mut self,
        record: &ToolListRecord<'_>,
        limits: ToolListLimits,
        held: impl FnOnce() -> usize,
    ) -> Result<Arc<ToolsText>, Refusal> {
        let text = record.tools.get();
        let key = record.key();
        if let Some(tools) = self.last.get(&key).filter(|tools| tools.is_text_of(text)) {
            return Ok(Arc::clone(tools));
        }
        self.parsed_bytes = self.parsed_bytes.saturating_add(text.len());
        let tools =
            ToolsText::parse(text).map_err(|err| format!("not a tool-list snapshot: tools: {err}"))?;
        let over = |err: ToolListTooLarge| Refusal::new(RefusalKind::ListLimit, err.to_string());
        driftline_detectors::tool_drift::check_tools_text(&limits, &tools).map_err(|err| match err {
            RefusedTools::TooLarge(err) => over(err),
            unreadable => Refusal::from(unreadable.to_string()),
        })?;
        let after = held().saturating_add(tools.text_bytes());
        if after > limits.max_project_bytes {
            return Err(over(ToolListTooLarge::ProjectBytes(after, limits.max_project_bytes)));
        }
        let tools = Arc::new(tools);
        self.last.insert(key, Arc::clone(&tools));
        Ok(tools)
    }

    /// Bytes of list text parsed since the last call: lists read again as they were cost nothing.
    pub fn take_parsed_bytes(&mut self) -> usize {
        std::mem::take(&mut self.parsed_bytes)
    }

    /// Keeps only the servers whose state the worker keeps.
    pub fn retain(&mut self, keep: impl Fn(&ServerKey) -> bool) {
        self.last.retain(|key, _| keep(key));
    }
}

/// Bytes of list text `key`'s project holds beside a new list of `key`: every other server's baseline and
/// newest list, and this server's baseline (the new list takes the newest one's place).
pub fn held_beside<'a>(
    servers: impl IntoIterator<Item = (&'a ServerKey, &'a ServerState)>,
    key: &ServerKey,
) -> usize {
    servers
        .into_iter()
        .filter(|(other, _)| other.project == key.project)
        .map(|(other, state)| match state.list_bytes() {
            (baseline, _) if other == key => baseline,
            (baseline, newest) => baseline + newest,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &str) -> ToolListRecord<'_> {
        serde_json::from_str(payload).expect("a tool-list record")
    }

    fn payload(tools: &str) -> String {
        format!(
            r#"{{"project":"p","server":"s","captured_at":"2026-03-26T08:15:42.000Z","source":"probe","tools":{tools}}}"#
        )
    }

    #[test]
    fn a_list_sent_again_is_the_list_read_before() {
        let mut texts = ListTexts::default();
        let limits = ToolListLimits::default();
        let first = payload(r#"[{"name":"a"}]"#);
        let read = texts.read(&record(&first), limits, || 0).expect("a list");
        let again = texts.read(&record(&first), limits, || 0).expect("a list");
        assert!(Arc::ptr_eq(&read, &again), "the same text is not parsed again");
        assert_eq!(texts.take_parsed_bytes(), r#"[{"name":"a"}]"#.len());
        // Whitespace between entries changes no entry: the same list.
        let spaced = payload("[\n  {\"name\":\"a\"}\n]");
        let same = texts.read(&record(&spaced), limits, || 0).expect("a list");
        assert!(Arc::ptr_eq(&read, &same), "a list re-laid between its entries is parsed again");
        assert_eq!(texts.take_parsed_bytes(), 0);
        // Another entry's text (even one that parses to the same tool) is read afresh.
        let spaced = payload(r#"[{"name": "a"}]"#);
        let other = texts.read(&record(&spaced), limits, || 0).expect("a list");
        assert!(!Arc::ptr_eq(&read, &other));
        assert_eq!(read.values(), other.values());
        let changed = texts.read(&record(&payload(r#"[{"name":"b"}]"#)), limits, || 0).expect("a list");
        assert_eq!(changed.value(0), Some(serde_json::json!({"name": "b"})));
    }

    #[test]
    fn lists_are_checked_before_they_are_remembered() {
        let mut texts = ListTexts::default();
        let limits = ToolListLimits { max_tools: 1, max_depth: 64, ..Default::default() };
        let two = payload(r#"[{"name":"a"},{"name":"b"}]"#);
        for _ in 0..2 {
            let refused = texts.read(&record(&two), limits, || 0).expect_err("over the limit");
            assert!(refused.reason.contains("limits.max_tools_per_list"), "{refused}");
            assert_eq!(refused.kind, RefusalKind::ListLimit);
        }
        let not_a_list = payload(r#"{"name":"a"}"#);
        let refused = texts.read(&record(&not_a_list), limits, || 0).expect_err("not a list");
        assert!(refused.reason.starts_with("not a tool-list snapshot"), "{refused}");
        assert_eq!(refused.kind, RefusalKind::Unusable);
    }

    /// A list that would take its project past `limits.max_tool_list_bytes_per_project` is refused, and
    /// not remembered: sent again, it is counted again.
    #[test]
    fn a_project_holds_at_most_its_budget_of_list_text() {
        let limits = ToolListLimits { max_project_bytes: 100, ..Default::default() };
        let mut texts = ListTexts::default();
        let tools = r#"[{"name":"a","description":"0123456789"}]"#;
        let list_bytes = tools.len() - 2;
        let text = payload(tools);
        let counted = std::cell::Cell::new(0);
        let held = |bytes: usize| {
            let counted = &counted;
            move || {
                counted.set(counted.get() + 1);
                bytes
            }
        };
        for _ in 0..2 {
            let refused = texts.read(&record(&text), limits, held(101 - list_bytes)).expect_err("over");
            assert!(refused.reason.contains("would hold 101 bytes"), "{refused}");
            assert!(refused.reason.contains("limits.max_tool_list_bytes_per_project"), "{refused}");
        }
        assert_eq!(counted.get(), 2, "a refused list is not remembered");
        texts.read(&record(&text), limits, held(100 - list_bytes)).expect("at the limit");
        texts.read(&record(&text), limits, held(usize::MAX)).expect("held already: not counted again");
        assert_eq!(counted.get(), 3);
    }

    /// What a project holds beside a server's new list: other servers' baselines and newest lists, the
    /// server's own baseline (its newest list is the one replaced), nothing of other projects.
    #[test]
    fn held_bytes_are_counted_per_project() {
        use driftline_detectors::tool_drift::{BaselinePolicy, RecordContext};
        use driftline_schemas::{InputPosition, Timestamp};
        let context = RecordContext {
            project: "p",
            server: "s",
            position: InputPosition { partition: 0, offset: 0 },
            at: Timestamp::from_millis(0).expect("a time"),
        };
        let state = |lists: &[&str]| {
            let mut state = ServerState::default();
            for list in lists {
                let tools = Arc::new(ToolsText::parse(list).expect("a list"));
                state.observe_tools(tools, context, BaselinePolicy::Manual);
            }
            state
        };
        let (a, b, c, d) =
            (r#"[{"name":"a"}]"#, r#"[{"name":"bb"}]"#, r#"[{"name":"ccc"}]"#, r#"[{"name":"d"}]"#);
        let bytes = |list: &str| list.len() - 2;
        let key = |text: &str| ServerKey::parse(text).expect("a key");
        let servers =
            [(key("p/one"), state(&[a, b])), (key("p/two"), state(&[c])), (key("q/three"), state(&[d]))];
        assert_eq!(servers[0].1.list_bytes(), (bytes(a), bytes(b)));
        let held = |of: &str| held_beside(servers.iter().map(|(k, s)| (k, s)), &key(of));
        assert_eq!(held("p/one"), bytes(a) + bytes(c));
        assert_eq!(held("p/two"), bytes(a) + bytes(b) + bytes(c));
        assert_eq!(held("p/new"), bytes(a) + bytes(b) + bytes(c));
        assert_eq!(held("q/new"), bytes(d));
    }
}
