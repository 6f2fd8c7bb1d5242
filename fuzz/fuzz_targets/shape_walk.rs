//! The return-value shape walk on any bytes: it never panics, agrees with serde_json on what is JSON,
//! reads text the same with or without its UTF-8 check, and the same from token to token (AVX2) as byte by
//! byte.
#![no_main]

use driftline_detectors::shape::{fingerprint, fingerprint_bytewise, fingerprint_str, LARGEST_MAX_BYTES};
use driftline_schemas::ShapeOutcome;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let print = fingerprint(data, LARGEST_MAX_BYTES);
    // The reference builds a tree: ignoring a value, serde_json skips strings without checking their UTF-8.
    let serde = serde_json::from_slice::<serde_json::Value>(data);
    let serde_reads = serde.is_ok();
    // Where serde_json stops short of the JSON grammar: nesting past its depth limit, and numbers beyond
    // f64 (`1E400` is JSON, and a `number` to driftline; serde_json refuses it as out of range).
    let serde_stops_short = matches!(&serde, Err(err)
        if err.to_string().contains("recursion limit") || err.to_string().contains("number out of range"));
    match print.outcome {
        // A shape is only ever computed from JSON.
        ShapeOutcome::Fingerprinted | ShapeOutcome::Oversized | ShapeOutcome::TruncatedSentinel => assert!(
            serde_reads || serde_stops_short,
            "fingerprinted what serde_json refuses: {:?}",
            String::from_utf8_lossy(data)
        ),
        // What serde_json reads (it stops at depth 128 itself) is never called unparseable.
        ShapeOutcome::Unparseable => {
            assert!(!serde_reads, "unparseable, but serde_json reads it: {:?}", String::from_utf8_lossy(data))
        }
        _ => {}
    }
    assert_eq!(print.shape.is_some(), print.outcome == ShapeOutcome::Fingerprinted);
    assert_eq!(fingerprint_bytewise(data, LARGEST_MAX_BYTES), print, "the token walk differs");
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(fingerprint_str(text, LARGEST_MAX_BYTES), print, "the &str path differs");
    }
});
