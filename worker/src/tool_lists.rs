//! Reading tool-list records. Most are a probe's unchanged list, sent again as it was: a list whose text
//! has the SHA-256 of the last one read for its server is that list, taken without parsing it again
//! (nor checking its limits again: it passed them). Parsing is most of what such a record costs.

use std::collections::HashMap;
use std::sync::Arc;

use driftline_schemas::{ServerKey, ToolListLimits, ToolListRecord, ToolsText};
use sha2::{Digest, Sha256};

/// The last tool list read per server, by the SHA-256 of its text (a collision-resistant hash: a server
/// cannot craft another list that passes for the one seen).
#[derive(Default)]
pub struct ListTexts {
    last: HashMap<ServerKey, ([u8; 32], Arc<ToolsText>)>,
    /// Bytes of list text parsed since [`ListTexts::take_parsed_bytes`].
    parsed_bytes: usize,
}

impl ListTexts {
    /// The record's tools: the list read before when the text is the same, else parsed and checked.
    pub fn read(
        &mut self,
        record: &ToolListRecord<'_>,
        limits: ToolListLimits,
    ) -> Result<Arc<ToolsText>, String> {
        let text = record.tools.get();
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let key = record.key();
        if let Some((seen, tools)) = self.last.get(&key) {
            if *seen == digest {
                return Ok(Arc::clone(tools));
            }
        }
        self.parsed_bytes = self.parsed_bytes.saturating_add(text.len());
        let tools =
            ToolsText::parse(text).map_err(|err| format!("not a tool-list snapshot: tools: {err}"))?;
        driftline_detectors::tool_drift::check_tools_text(&limits, &tools).map_err(|err| err.to_string())?;
        let tools = Arc::new(tools);
        self.last.insert(key, (digest, Arc::clone(&tools)));
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
        let read = texts.read(&record(&first), limits).expect("a list");
        let again = texts.read(&record(&first), limits).expect("a list");
        assert!(Arc::ptr_eq(&read, &again), "the same text is not parsed again");
        assert_eq!(texts.take_parsed_bytes(), r#"[{"name":"a"}]"#.len());
        // Another text (even one that parses to the same list) is read afresh.
        let spaced = payload(r#"[ {"name": "a"} ]"#);
        let other = texts.read(&record(&spaced), limits).expect("a list");
        assert!(!Arc::ptr_eq(&read, &other));
        assert_eq!(read.values(), other.values());
        let changed = texts.read(&record(&payload(r#"[{"name":"b"}]"#)), limits).expect("a list");
        assert_eq!(changed.value(0), Some(serde_json::json!({"name": "b"})));
    }

    #[test]
    fn lists_are_checked_before_they_are_remembered() {
        let mut texts = ListTexts::default();
        let limits = ToolListLimits { max_tools: 1, max_depth: 64, ..Default::default() };
        let two = payload(r#"[{"name":"a"},{"name":"b"}]"#);
        for _ in 0..2 {
            let refused = texts.read(&record(&two), limits).expect_err("over the limit");
            assert!(refused.contains("limits.max_tools_per_list"), "{refused}");
        }
        let not_a_list = payload(r#"{"name":"a"}"#);
        let refused = texts.read(&record(&not_a_list), limits).expect_err("not a list");
        assert!(refused.starts_with("not a tool-list snapshot"), "{refused}");
    }
}
