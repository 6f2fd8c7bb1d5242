//! Records from the bus read into what the handlers take: span records (calls, declarations, tool
//! commands) with repeats marked, and the key check every record passes.

use std::collections::HashMap;

use driftline_bus::{Consumer, Delivered, Topic};
use driftline_detectors::shape::record_from_span;
use driftline_schemas::{
    OperatorCommand, OutputDeclaration, Timestamp, ToolCallRecord, ToolCallSpan, OUTPUT_DECLARATION,
};
use driftline_store::RepeatLookup;

use crate::{repeats, Worker, WorkerError};

/// A span record, read.
pub(crate) enum SpanRecord {
    Call {
        identity: String,
        call: Box<ToolCallRecord>,
        repeat: bool,
    },
    /// A tool's declared output schema, published by the detector of its server.
    Declaration(Box<OutputDeclaration>),
    /// An operator command about one tool (forgetting it), in order with its calls.
    Command(Box<OperatorCommand>),
    Unusable(String),
}

/// A declaration record, checked like any record from the bus.
pub(crate) fn read_declaration(record: &Delivered) -> SpanRecord {
    let read = serde_json::from_slice::<OutputDeclaration>(&record.payload)
        .map_err(|err| format!("not an output declaration: {err}"))
        .and_then(|declaration| {
            if declaration.kind != OUTPUT_DECLARATION {
                return Err(format!("an output declaration's type must be {OUTPUT_DECLARATION:?}"));
            }
            check_key(record, &declaration.key().to_string()).map(|()| declaration)
        });
    match read {
        Ok(declaration) => SpanRecord::Declaration(Box::new(declaration)),
        Err(reason) => SpanRecord::Unusable(reason),
    }
}

/// A record's key decides its partition, and the partition decides which detector holds the state: a
/// record keyed for another stream (or not keyed) would be counted in the wrong state, so it is refused.
pub(crate) fn check_key(record: &Delivered, expected: &str) -> Result<(), String> {
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
    /// The calls of a batch's span records, read once (`None` for other topics), with the calls that
    /// repeat one already stored from another record (a client's retry), or one earlier in the batch,
    /// marked as repeats. A replayed record finds its own position stored: it is no repeat.
    pub(crate) async fn read_calls(
        &self,
        records: &[Delivered],
    ) -> Result<Vec<Option<SpanRecord>>, WorkerError> {
        let mut calls: Vec<Option<SpanRecord>> = records
            .iter()
            .map(|record| {
                (record.topic == Topic::Spans).then(|| {
                    if OutputDeclaration::looks_like(&record.payload) {
                        return read_declaration(record);
                    }
                    if OperatorCommand::may_be_tool_command(&record.payload) {
                        if let Ok(command) = serde_json::from_slice::<OperatorCommand>(&record.payload) {
                            return SpanRecord::Command(Box::new(command));
                        }
                    }
                    self.read_call(record)
                        .and_then(|call| check_key(record, &call.key().to_string()).map(|()| call))
                        .map(|call| (call.identity(), call))
                        .map(|(identity, call)| SpanRecord::Call {
                            identity,
                            call: Box::new(call),
                            repeat: false,
                        })
                        .unwrap_or_else(SpanRecord::Unusable)
                })
            })
            .collect();
        let identities: Vec<String> = calls
            .iter()
            .filter_map(|c| match c {
                Some(SpanRecord::Call { identity, .. }) => Some(identity.clone()),
                _ => None,
            })
            .collect();
        if identities.is_empty() {
            return Ok(calls);
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
        for (record, call) in records.iter().zip(calls.iter_mut()) {
            if let Some(SpanRecord::Call { identity, repeat, .. }) = call {
                let in_flight = self.in_flight.as_ref().and_then(|batch| batch.identities.get(identity));
                let remembered = self.recent.find(repeats::identity_key(identity));
                let first = stored.get(identity).or(in_flight).copied().or(remembered);
                let elsewhere = first.is_some_and(|at| at != record.position);
                *repeat = elsewhere || !seen.insert(identity.clone());
            }
        }
        Ok(calls)
    }

    /// A record from ingest, or a raw span from another producer: checked and fingerprinted here exactly as
    /// ingest would.
    pub(crate) fn read_call(&self, record: &Delivered) -> Result<ToolCallRecord, String> {
        if let Ok(call) = serde_json::from_slice::<ToolCallRecord>(&record.payload) {
            return Ok(call);
        }
        let span: ToolCallSpan =
            serde_json::from_slice(&record.payload).map_err(|err| format!("not a tool-call span: {err}"))?;
        span.check()?;
        // The published schema requires `project` of other producers (ingest sets it from the API key).
        let project =
            span.project.clone().ok_or("project is required (schemas/json/tool-call-span.v1.json)")?;
        Ok(record_from_span(&span, &project, record.appended_at))
    }
}
