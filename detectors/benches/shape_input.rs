//! The return values the shape benchmarks fingerprint (criterion's `shape/*` and the instruction counts of
//! `examples/shape_cost.rs`): both read the same bytes.

use serde_json::json;

/// A realistic return value of about `target` bytes: search results with nested objects, numbers,
/// escaped strings and arrays.
pub fn return_value(target: usize) -> Vec<u8> {
    let mut results = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < target {
        let item = json!({
            "id": format!("doc-{i}"),
            "title": format!("Result \"{i}\" — a title with unicode é and a \\ backslash"),
            "score": 0.5 + i as f64 / 1000.0,
            "rank": i,
            "tags": ["alpha", "beta", "gamma"],
            "source": {"url": format!("https://example.com/{i}"), "fetched": true, "bytes": 1024 * i},
            "snippet": null
        });
        size += item.to_string().len() + 1;
        results.push(item);
        i += 1;
    }
    let value = json!({"query": "drift", "total": results.len(), "results": results, "next": null});
    let text = serde_json::to_string_pretty(&value).expect("serialize");
    text.into_bytes()
}
