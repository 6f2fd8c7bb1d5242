//! Decoding of every input message (span, ingest record, tool-list snapshot, probe failure, operator
//! command): never panics, and what decodes re-encodes to the same message. A span that passes its
//! checks goes through ingest's shape step.
#![no_main]

use driftline_detectors::shape::record_from_span;
use driftline_schemas::{
    OperatorCommand, ProbeFailure, ProjectName, ToolCallRecord, ToolCallSpan, ToolListSnapshot,
};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) -> Option<T> {
    let message: T = serde_json::from_slice(data).ok()?;
    let again: T = serde_json::from_slice(&serde_json::to_vec(&message).expect("encodes"))
        .expect("what was read is read again");
    assert_eq!(again, message);
    Some(message)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(span) = serde_json::from_slice::<ToolCallSpan>(data) {
        if span.check().is_ok() {
            let project = span.project.clone().unwrap_or_else(ProjectName::default_project);
            let record = record_from_span(&span, &project, span.started_at);
            let again: ToolCallRecord =
                serde_json::from_slice(&serde_json::to_vec(&record).expect("encodes")).expect("reads back");
            assert_eq!(again, record);
        }
    }
    round_trip::<ToolCallRecord>(data);
    round_trip::<ToolListSnapshot>(data);
    round_trip::<ProbeFailure>(data);
    round_trip::<OperatorCommand>(data);
});
