//! Records from the bus read into what the handlers take ([`decode`], pure: one record in, one [`Input`]
//! out, with the key check every record passes), and a batch's calls marked where they repeat one already
//! seen.

use std::collections::HashMap;

use driftline_bus::{Consumer, Delivered, Topic};
use driftline_detectors::shape::record_from_span;
use driftline_schemas::{
    OperatorCommand, OutputDeclaration, ProbeFailure, SnapshotSource, Timestamp, ToolCallRecord,
    ToolCallSpan, ToolListRecord, OUTPUT_DECLARATION,
};
use driftline_store::RepeatLookup;

use crate::refusal::Refusal;
use crate::{repeats, Worker, WorkerError};

/// A record from the bus, read.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// A server's tool list, its tools left as text (tool-lists topic).
    ToolList(ToolListRecord<'a>),
    /// A probe that could not list a server's tools (tool-lists topic).
    ProbeFailure(Box<ProbeFailure>),
    /// An operator command: a server's on the tool-lists topic, a tool's on the spans topic, a project's on
    /// the commands topic, each in order with the data it concerns.
    Command(Box<OperatorCommand>),
    /// A tool call (spans topic); `repeat` once the batch knows it repeats a call seen before.
    Call { identity: String, call: Box<ToolCallRecord>, repeat: bool },
    /// A tool's declared output schema, published by the detector of its server (spans topic).
    Declaration(Box<OutputDeclaration>),
    /// Not a record the detector can use, with the reason.
    Unusable(Refusal),
}

/// Reads one record as its topic says it should be: a record whose key is not the one its payload implies
/// (or that has none) is unusable, since the key decides which detector holds the state.
pub(crate) fn decode(record: &Delivered) -> Input<'_> {
    let read = match record.topic {
        // Tool lists, probe failures and baseline acceptances share the server's partition, so an
        // acceptance applies in order with the lists, on the instance that owns the server.
        Topic::ToolLists => match serde_json::from_slice::<ToolListRecord>(&record.payload) {
            Ok(list) => check_key(record, &list.key().to_string()).and_then(|()| {
                // An upstream capture is of a release, and only it names one.
                match (list.source == SnapshotSource::Upstream, list.release.is_some()) {
                    (true, false) => Err("a snapshot of source upstream must name its release".to_owned()),
                    (false, true) => Err("only a snapshot of source upstream names a release".to_owned()),
                    _ => Ok(Input::ToolList(list)),
                }
            }),
            Err(err) => {
                if let Ok(failure) = serde_json::from_slice::<ProbeFailure>(&record.payload) {
                    check_key(record, &failure.key().to_string())
                        .map(|()| Input::ProbeFailure(Box::new(failure)))
                } else if let Ok(command) = serde_json::from_slice::<OperatorCommand>(&record.payload) {
                    check_key(record, &command.key()).map(|()| Input::Command(Box::new(command)))
                } else {
                    Err(format!("not a tool-list snapshot: {err}"))
                }
            }
        },
        Topic::Spans => {
            if OutputDeclaration::looks_like(&record.payload) {
                read_declaration(record)
            } else {
                let command = OperatorCommand::may_be_tool_command(&record.payload)
                    .then(|| serde_json::from_slice::<OperatorCommand>(&record.payload).ok())
                    .flatten();
                match command {
                    Some(command) => {
                        check_key(record, &command.key()).map(|()| Input::Command(Box::new(command)))
                    }
                    None => read_call(record).and_then(|call| {
                        check_key(record, &call.key().to_string()).map(|()| Input::Call {
                            identity: call.identity(),
                            call: Box::new(call),
                            repeat: false,
                        })
                    }),
                }
            }
        }
        Topic::Commands => serde_json::from_slice::<OperatorCommand>(&record.payload)
            .map_err(|err| format!("not an operator command: {err}"))
            .and_then(|command| {
                check_key(record, &command.key()).map(|()| Input::Command(Box::new(command)))
            }),
        Topic::DeadLetters => Err("dead letters are not detector input".to_owned()),
    };
    read.unwrap_or_else(|reason| Input::Unusable(Refusal::from(reason)))
}

/// A declaration record, checked like any record from the bus.
fn read_declaration(record: &Delivered) -> Result<Input<'_>, String> {
    let declaration = serde_json::from_slice::<OutputDeclaration>(&record.payload)
        .map_err(|err| format!("not an output declaration: {err}"))?;
    if declaration.kind != OUTPUT_DECLARATION {
        return Err(format!("an output declaration's type must be {OUTPUT_DECLARATION:?}"));
    }
    check_key(record, &declaration.key().to_string())?;
    Ok(Input::Declaration(Box::new(declaration)))
}

/// A record from ingest, or a raw span from another producer: checked and fingerprinted here exactly as
/// ingest would.
fn read_call(record: &Delivered) -> Result<ToolCallRecord, String> {
    if let Ok(call) = serde_json::from_slice::<ToolCallRecord>(&record.payload) {
        return Ok(call);
    }
    let span: ToolCallSpan =
        serde_json::from_slice(&record.payload).map_err(|err| format!("not a tool-call span: {err}"))?;
    span.check()?;
    // The published schema requires `project` of other producers (ingest sets it from the API key).
    let project = span.project.clone().ok_or("project is required (schemas/json/tool-call-span.v1.json)")?;
    Ok(record_from_span(&span, &project, record.appended_at))
}

/// A record's key decides its partition, and the partition decides which detector holds the state: a
/// record keyed for another stream (or not keyed) would be counted in the wrong state, so it is refused.
fn check_key(record: &Delivered, expected: &str) -> Result<(), String> {
    if record.key.is_empty() {
        return Err(format!("the record has no key; it must be keyed {expected:?}"));
    }
    if record.key != expected {
        let shown: String = record.key.chars().take(200).collect();
        return Err(format!("key {shown:?} does not match the payload, which is keyed {expected:?}"));
    }
    Ok(())
}

impl<C: Consumer> Worker<C> {
    /// A batch's records, each read once, with the calls that repeat one already stored from another
    /// record (a client's retry), or one earlier in the batch, marked as repeats. A replayed record finds
    /// its own position stored: it is no repeat.
    pub(crate) async fn read_inputs<'r>(
        &self,
        records: &'r [Delivered],
    ) -> Result<Vec<Input<'r>>, WorkerError> {
        let mut inputs: Vec<Input<'r>> = records.iter().map(decode).collect();
        let identities: Vec<String> = inputs
            .iter()
            .filter_map(|input| match input {
                Input::Call { identity, .. } => Some(identity.clone()),
                _ => None,
            })
            .collect();
        if identities.is_empty() {
            return Ok(inputs);
        }
        let earliest = records.iter().map(|r| r.appended_at.as_millis()).min().unwrap_or_default();
        let window = i64::from(self.settings.repeat_window_hours) * 3_600_000;
        let since =
            Timestamp::from_millis(earliest.saturating_sub(window)).unwrap_or_else(|| records[0].appended_at);
        let stored = match self.store.repeat_lookup() {
            RepeatLookup::Store => self.store.stored_calls(&identities, since).await?,
            // Every call this worker's streams carried in the window is in `recent`.
            RepeatLookup::Remember => HashMap::new(),
        };
        let mut seen = std::collections::HashSet::new();
        for (record, input) in records.iter().zip(inputs.iter_mut()) {
            if let Input::Call { identity, repeat, .. } = input {
                let in_flight = self.in_flight.as_ref().and_then(|batch| batch.identities.get(identity));
                let remembered = self.recent.find(repeats::identity_key(identity));
                let first = stored.get(identity).or(in_flight).copied().or(remembered);
                let elsewhere = first.is_some_and(|at| at != record.position);
                *repeat = elsewhere || !seen.insert(identity.clone());
            }
        }
        Ok(inputs)
    }
}

#[cfg(test)]
mod tests {
    use driftline_schemas::InputPosition;

    use super::*;

    /// What a record reads as, in a line: the kind and its key, or why it is unusable.
    fn check(topic: Topic, key: &str, payload: &str, expected: &str) {
        let record = Delivered {
            topic,
            key: key.to_owned(),
            payload: payload.as_bytes().to_vec(),
            position: InputPosition { partition: 0, offset: 7 },
            appended_at: Timestamp::from_millis(1_767_225_600_000).expect("a time"),
        };
        let read = match decode(&record) {
            Input::ToolList(list) => format!("tool list {}", list.key()),
            Input::ProbeFailure(failure) => format!("probe failure {}", failure.key()),
            Input::Command(command) => format!("command {}", command.key()),
            Input::Call { call, repeat, .. } => format!("call {} repeat={repeat}", call.key()),
            Input::Declaration(declaration) => format!("declaration {}", declaration.key()),
            Input::Unusable(refusal) => format!("unusable ({}): {}", refusal.kind.as_str(), refusal.reason),
        };
        assert!(
            read.starts_with(expected),
            "{topic:?} {key:?} {payload}\n  read: {read}\n  expected: {expected}…"
        );
    }

    const LIST: &str = r#"{"project":"p","server":"srv","captured_at":"2026-01-01T00:00:00Z","source":"probe","tools":[{"name":"a"}]}"#;
    const FAILURE: &str =
        r#"{"project":"p","server":"srv","probed_at":"2026-01-01T00:00:00Z","error":"refused"}"#;
    const ACCEPT: &str =
        r#"{"command":"accept_baseline","id":"c1","project":"p","server":"srv","accepted_by":"ops"}"#;
    const FORGET_TOOL: &str =
        r#"{"command":"forget_tool","id":"c2","project":"p","server":"srv","tool":"t","by":"ops"}"#;
    const RECORD: &str = r#"{"project":"p","span_id":"s1","server":"srv","tool":"t","started_at":"2026-01-01T00:00:00Z","duration_ms":1,"status":"success","ingested_at":"2026-01-01T00:00:00Z","shape":"{v:number}","shape_hash":"00000000","compact_bytes":8,"shape_outcome":"fingerprinted"}"#;
    const SPAN: &str = r#"{"project":"p","span_id":"s1","server":"srv","tool":"t","started_at":"2026-01-01T00:00:00Z","duration_ms":1,"status":"success","return_value":{"v":1}}"#;
    const DECLARATION: &str = r#"{"type":"output_declaration","project":"p","server":"srv","tool":"t","output_schema":null,"schema_hash":null,"declared_at":"2026-01-01T00:00:00Z","sequence":3}"#;

    #[test]
    fn tool_list_topic() {
        check(Topic::ToolLists, "p/srv", LIST, "tool list p/srv");
        check(Topic::ToolLists, "p/srv", FAILURE, "probe failure p/srv");
        check(Topic::ToolLists, "p/srv", ACCEPT, "command p/srv");
        check(Topic::ToolLists, "p/other", LIST, r#"unusable (unusable): key "p/other" does not match"#);
        check(
            Topic::ToolLists,
            "",
            FAILURE,
            r#"unusable (unusable): the record has no key; it must be keyed "p/srv""#,
        );
        check(Topic::ToolLists, "p/x", ACCEPT, "unusable (unusable): key \"p/x\" does not match");
        // The list's own error is the one given: a record that is none of the three was meant as a list.
        check(
            Topic::ToolLists,
            "p/srv",
            r#"{"project":"p"}"#,
            "unusable (unusable): not a tool-list snapshot: missing field",
        );
        check(Topic::ToolLists, "p/srv", "\u{1}", "unusable (unusable): not a tool-list snapshot");
    }

    #[test]
    fn spans_topic() {
        check(Topic::Spans, "p/srv/t", RECORD, "call p/srv/t repeat=false");
        check(Topic::Spans, "p/srv/t", SPAN, "call p/srv/t repeat=false");
        check(
            Topic::Spans,
            "p/srv/t",
            &SPAN.replace(r#""project":"p","#, ""),
            "unusable (unusable): project is required",
        );
        check(Topic::Spans, "p/srv/u", RECORD, r#"unusable (unusable): key "p/srv/u" does not match"#);
        check(Topic::Spans, "p/srv/t", DECLARATION, "declaration p/srv/t");
        check(
            Topic::Spans,
            "p/srv/t",
            &DECLARATION.replace(r#""tool":"t""#, r#""tool":"t","x":1"#),
            "unusable (unusable): not an output declaration",
        );
        check(Topic::Spans, "p/srv/t", FORGET_TOOL, "command p/srv/t");
        check(Topic::Spans, "p/srv", FORGET_TOOL, r#"unusable (unusable): key "p/srv" does not match"#);
        check(Topic::Spans, "p/srv/t", "{}", "unusable (unusable): not a tool-call span");
    }

    #[test]
    fn commands_and_dead_letters_topics() {
        let thresholds = serde_json::json!({"command": "set_thresholds", "id": "c3", "project": "p",
            "thresholds": driftline_schemas::DetectorThresholds::default()});
        check(Topic::Commands, "p", &thresholds.to_string(), "command p");
        check(
            Topic::Commands,
            "q",
            &thresholds.to_string(),
            r#"unusable (unusable): key "q" does not match"#,
        );
        check(Topic::Commands, "p", LIST, "unusable (unusable): not an operator command");
        check(Topic::DeadLetters, "p/srv", LIST, "unusable (unusable): dead letters are not detector input");
    }
}
