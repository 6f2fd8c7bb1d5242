//! OTLP/HTTP trace export decoding and the mapping to tool-call spans, on any bytes: the first byte picks
//! protobuf (even) or JSON (odd). Never panics; a mapped span that passes its checks is fingerprinted.
#![no_main]

use driftline_detectors::shape::record_from_span;
use driftline_ingest::otlp;
use driftline_schemas::ProjectName;
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let request = if selector % 2 == 0 {
        ExportTraceServiceRequest::decode(body).ok()
    } else {
        serde_json::from_slice::<ExportTraceServiceRequest>(body).ok()
    };
    let Some(request) = request else { return };
    // An `otlp.servers` table, so that names by address and by URL prefix are taken too.
    let Ok(mapped_name) = driftline_schemas::ServerName::parse("mapped".to_owned()) else { return };
    let names = otlp::ServerNames::new(vec![
        ("tools.internal:8080".to_owned(), mapped_name.clone()),
        ("https://gw.example/mcp".to_owned(), mapped_name),
    ]);
    let mapped = otlp::map_request(&request, &names);
    for span in &mapped.spans {
        if span.check().is_ok() {
            let record = record_from_span(span, &ProjectName::default_project(), span.started_at);
            assert_eq!(record.span_id, span.span_id);
        }
    }
});
