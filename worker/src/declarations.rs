//! Declared output schemas a server's baseline change publishes, keyed by tool, so each reaches the tool's
//! state in order with its calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use driftline_bus::{Delivered, Message, Topic};
use driftline_detectors::tool_drift::{changed_declarations, declared_outputs, DeclaredOutput, ServerState};
use driftline_schemas::{
    OutputDeclaration, ProjectName, ServerName, ToolName, ToolsText, OUTPUT_DECLARATION,
};

/// A server's baseline before a record, to tell which declared outputs the record changed (read only when
/// the baseline did change: most records leave it as it was).
pub(crate) struct DeclaredBefore {
    hash: Option<String>,
    tools: Option<Arc<ToolsText>>,
}

impl DeclaredBefore {
    pub(crate) fn of(state: &ServerState) -> Self {
        DeclaredBefore {
            hash: state.baseline.as_ref().map(|b| b.hash.clone()),
            tools: state.baseline.as_ref().map(|b| Arc::clone(&b.tools)),
        }
    }

    /// The declarations to publish after the record: those the baseline change altered, or, once, all of
    /// them for a server whose state never published any (the first baseline, or state stored by an older
    /// driftline).
    pub(crate) fn changes(self, state: &mut ServerState) -> Vec<(String, Option<DeclaredOutput>)> {
        let Some(baseline) = &state.baseline else { return Vec::new() };
        if !state.declarations_published {
            state.declarations_published = true;
            return changed_declarations(&BTreeMap::new(), &declared_outputs(&baseline.tools));
        }
        if self.hash.as_deref() == Some(baseline.hash.as_str()) {
            return Vec::new();
        }
        let before = self.tools.as_deref().map(declared_outputs).unwrap_or_default();
        changed_declarations(&before, &declared_outputs(&baseline.tools))
    }
}

/// The declaration records of one baseline change (or of a whole baseline, `everything`), keyed by tool.
pub(crate) fn declaration_messages(
    project: &ProjectName,
    server: &ServerName,
    changed: Vec<(String, Option<DeclaredOutput>)>,
    record: &Delivered,
) -> Vec<Message> {
    changed
        .into_iter()
        .filter_map(|(tool, output)| {
            // A tool list may name tools that are not valid tool names: they get no calls either.
            let tool = ToolName::parse(tool).ok()?;
            let declaration = OutputDeclaration {
                schema_version: driftline_schemas::SCHEMA_VERSION,
                kind: OUTPUT_DECLARATION.to_owned(),
                project: project.clone(),
                server: server.clone(),
                tool,
                schema_hash: output.as_ref().map(|o| o.hash.clone()),
                output_schema: output.map(|o| o.schema),
                declared_at: record.appended_at,
                sequence: record.position.offset,
            };
            let key = declaration.key().to_string();
            serde_json::to_vec(&declaration).ok().map(|payload| Message { topic: Topic::Spans, key, payload })
        })
        .collect()
}
