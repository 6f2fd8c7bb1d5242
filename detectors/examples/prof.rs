// Profiling harness for the shape walk: `cargo run --release --example prof -- <approx bytes> <iterations>`.
fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (target, iterations) =
        (args.first().copied().unwrap_or(1 << 20), args.get(1).copied().unwrap_or(200));
    let mut results = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < target {
        let item = serde_json::json!({"id": format!("doc-{i}"), "title": format!("Result \"{i}\" — a title with unicode é and a \\ backslash"),
            "score": 0.5 + i as f64 / 1000.0, "rank": i, "tags": ["alpha", "beta", "gamma"],
            "source": {"url": format!("https://example.com/{i}"), "fetched": true, "bytes": 1024 * i}, "snippet": null});
        size += item.to_string().len();
        results.push(item);
        i += 1;
    }
    let v = serde_json::json!({"query": "drift", "results": results});
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    let mut n = 0;
    for _ in 0..iterations {
        n += driftline_detectors::shape::fingerprint(text.as_bytes(), 1 << 30).compact_bytes.unwrap_or(0);
    }
    println!("{n} {}", text.len());
}
