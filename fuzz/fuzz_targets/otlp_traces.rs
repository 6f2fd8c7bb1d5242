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
    let mapped = otlp::map_request(&request);
    for span in &mapped.spans {
        if span.check().is_ok() {
            let record = record_from_span(span, &ProjectName::default_project(), span.started_at);
            assert_eq!(record.span_id, span.span_id);
        }
    }
});
