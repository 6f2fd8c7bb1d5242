//! Spans as the emitters people run write them (tests/emitters/*.json, OTLP JSON, each with a note on where it
//! comes from), mapped to tool calls: each fixture's tool calls (server, tool, agent, session, outcome,
//! result and arguments), its skipped spans by reason and its rejections are held to `*.expected.json`
//! (`UPDATE_GOLDEN=1` rewrites them).

use std::path::Path;

use driftline_ingest::otlp::{map_request, ServerNames};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::{json, Value};

fn summary(request: &ExportTraceServiceRequest) -> Value {
    let mapped = map_request(request, &ServerNames::default());
    let calls: Vec<Value> = mapped
        .spans
        .iter()
        .map(|span| {
            let span = serde_json::to_value(span).unwrap_or_default();
            json!({"server": span["server"], "tool": span["tool"], "agent_name": span["agent_name"],
                "session_id": span["session_id"], "span_id": span["span_id"], "status": span["status"],
                "error": span["error"], "return_value": span["return_value"], "arguments": span["arguments"]})
        })
        .collect();
    let skipped: serde_json::Map<String, Value> = mapped
        .skipped
        .0
        .iter()
        .map(|(reason, (count, example))| {
            (reason.as_str().to_owned(), json!({"count": count, "example": example}))
        })
        .collect();
    json!({"tool_calls": calls, "skipped": skipped, "rejected": mapped.rejected})
}

#[test]
fn each_emitters_spans_map_to_the_right_calls() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emitters");
    let mut fixtures: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/emitters")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.to_str().is_some_and(|p| p.ends_with(".json") && !p.ends_with(".expected.json")))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 3, "{fixtures:?}");
    for fixture in fixtures {
        let text = std::fs::read_to_string(&fixture).expect("a fixture");
        let request: ExportTraceServiceRequest =
            serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", fixture.display()));
        let actual = serde_json::to_string_pretty(&summary(&request)).expect("JSON") + "\n";
        let expected_path = fixture.with_extension("expected.json");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&expected_path, &actual).expect("write the expected mapping");
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        assert!(
            actual == expected,
            "{} maps differently from {}:\n{actual}",
            fixture.display(),
            expected_path.display()
        );
    }
}
