//! `make bench`: shape fingerprint throughput next to serde_json skipping the same bytes, shape-drift
//! detector updates, and tool-list diffs. `scripts/bench-summary.py` prints the figures to report.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use driftline_detectors::shape::{fingerprint_str, LARGEST_MAX_BYTES};
use driftline_detectors::shape_drift::{Observation, ToolShapeState};
use driftline_detectors::tool_drift::{
    diff_indexed, diff_tools, max_classification, BaselinePolicy, IndexedList, RecordContext, ServerState,
    ToolIndex, ToolsText,
};
use driftline_schemas::{CallStatus, DetectorThresholds, ShapeOutcome};
use serde_json::{json, Value};

#[path = "shape_input.rs"]
mod shape_input;
use shape_input::return_value;

fn shape_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("shape");
    // Longer than the other groups: the ratio of two timings is the figure, and a shared machine moves
    // each by several percent (`scripts/shape-instructions.sh` counts instructions as well).
    group.sample_size(60).measurement_time(Duration::from_secs(5));
    for (label, size) in [("1KiB", 1024), ("8KiB", 8 * 1024), ("1MiB", 1024 * 1024)] {
        // Both sides read the same `&str`, as ingest has it (a span's raw return value).
        let input = String::from_utf8(return_value(size)).expect("utf-8");
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_with_input(BenchmarkId::new("fingerprint", label), &input, |b, input| {
            b.iter(|| fingerprint_str(black_box(input), LARGEST_MAX_BYTES))
        });
        group.bench_with_input(BenchmarkId::new("serde_json_ignored_any", label), &input, |b, input| {
            b.iter(|| serde_json::from_str::<serde::de::IgnoredAny>(black_box(input)).is_ok())
        });
    }
    group.finish();
}

fn shape_drift_updates(c: &mut Criterion) {
    let thresholds = DetectorThresholds::default();
    let shapes: Vec<String> = (0..100)
        .map(|i| {
            if i % 25 == 0 {
                "{id:string,total:number}".into()
            } else {
                "{id:string,items:[{sku:string}],total:number}".into()
            }
        })
        .collect();
    let mut group = c.benchmark_group("shape_drift");
    group.throughput(Throughput::Elements(shapes.len() as u64));
    group.bench_function("observe_window_100", |b| {
        let mut state = ToolShapeState::default();
        b.iter(|| {
            for shape in &shapes {
                let call = Observation {
                    status: CallStatus::Success,
                    outcome: ShapeOutcome::Fingerprinted,
                    shape: Some(shape),
                    compact_bytes: Some(200),
                };
                black_box(state.observe(call, &thresholds));
            }
        })
    });
    group.finish();
}

/// A 50-tool list; `variant` changes some tools the way a server upgrade does.
fn tool_list(variant: bool) -> Vec<Value> {
    tool_list_of(50, variant)
}

fn tool_list_of(count: usize, variant: bool) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let mut properties = json!({
                "query": {"type": "string", "description": "What to look for", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                "format": {"type": "string", "enum": ["md", "html", "text"]},
                "filters": {"type": "object", "properties": {
                    "date_from": {"type": "string", "format": "date"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                }}
            });
            let mut required = vec!["query"];
            if variant && i % 5 == 0 {
                properties["limit"]["type"] = json!("number");
                properties["format"]["enum"] = json!(["md", "text"]);
                properties["region"] = json!({"type": "string"});
                required.push("region");
            }
            json!({"name": format!("tool_{i}"), "description": format!("Tool number {i}."),
                "inputSchema": {"type": "object", "properties": properties, "required": required},
                "annotations": {"readOnlyHint": true}})
        })
        .collect()
}

/// Everything a peer does per pair once the lists are parsed: index (normalise and hash) both, the second
/// taking the digests of tools declared as in the first, diff, and the report's JSON.
fn hash_and_diff(old: &ToolsText, new: &ToolsText) -> (usize, usize) {
    let old_index = ToolIndex::new(old);
    let old_list = IndexedList { tools: old, index: &old_index };
    let new_index = ToolIndex::reusing(new, &[old_list]);
    let (old_hash, new_hash) = (old_index.hash(), new_index.hash());
    let changes = if old_hash == new_hash {
        Vec::new()
    } else {
        diff_indexed(old_list, IndexedList { tools: new, index: &new_index }).changes
    };
    let report = serde_json::to_string(&json!({"previous_hash": old_hash, "current_hash": new_hash,
        "max_classification": max_classification(&changes), "changes": changes}))
    .expect("a report");
    (changes.len(), report.len())
}

fn tool_list_diff(c: &mut Criterion) {
    let (old, new) = (tool_list(false), tool_list(true));
    let mut group = c.benchmark_group("tool_drift");
    group.throughput(Throughput::Elements(1));
    group.bench_function("diff_50_tools", |b| b.iter(|| diff_tools(black_box(&old), black_box(&new))));

    // The shared pair (../shared/bench, DRIFTLINE_BENCH_DIR): everything a peer does per pair, from text to
    // report — parse both, normalise, hash both, diff, the report's JSON.
    let dir = std::env::var("DRIFTLINE_BENCH_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/bench").to_owned());
    let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).ok();
    if let (Some(old_text), Some(new_text)) = (read("tools50_old.json"), read("tools50_new.json")) {
        // The detector holds lists as text, one JSON text per tool (parsed where a tool's text is new).
        let parse = |text: &str| -> ToolsText { ToolsText::parse(text).expect("a tool list") };
        let pair = |old_text: &str, new_text: &str| hash_and_diff(&parse(old_text), &parse(new_text));
        let (changes, _) = pair(&old_text, &new_text);
        eprintln!("tools50 pair: {changes} changes found");
        group.bench_function("hash_and_diff_tools50", |b| {
            b.iter(|| pair(black_box(&old_text), black_box(&new_text)))
        });
        // The same from lists already parsed (what a peer's figure on parsed lists compares with).
        let (old_list, new_list) = (parse(&old_text), parse(&new_text));
        group.bench_function("hash_and_diff_parsed_tools50", |b| {
            b.iter(|| hash_and_diff(black_box(&old_list), black_box(&new_list)))
        });
        // References measured in the same run: parsing the two texts into values (serde_json), and only
        // validating them (serde_json to `IgnoredAny`, the least any reader of the text does).
        group.bench_function("serde_json_parse_tools50_pair", |b| {
            let parse = |text: &str| -> Vec<Value> { serde_json::from_str(text).expect("a tool list") };
            b.iter(|| (parse(black_box(&old_text)).len(), parse(black_box(&new_text)).len()))
        });
        group.bench_function("serde_json_ignored_any_tools50_pair", |b| {
            b.iter(|| {
                serde_json::from_str::<serde::de::IgnoredAny>(black_box(&old_text)).is_ok()
                    && serde_json::from_str::<serde::de::IgnoredAny>(black_box(&new_text)).is_ok()
            })
        });
        let context = RecordContext {
            project: "p",
            server: "s",
            position: driftline_schemas::InputPosition { partition: 0, offset: 0 },
            at: driftline_schemas::Timestamp::from_millis(0).expect("a time"),
        };
        let mut state = ServerState::default();
        state.observe_tools(Arc::new(old_list.clone()), context, BaselinePolicy::Manual);
        // What the detector does with a probe's changed list (parsed) against its indexed baseline: index
        // it, hash, diff, the event.
        let changed = Arc::new(new_list.clone());
        group.bench_function("observe_changed_parsed_tools50", |b| {
            b.iter(|| {
                let mut state = state.clone();
                state
                    .observe_tools(Arc::clone(black_box(&changed)), context, BaselinePolicy::Manual)
                    .outputs
                    .len()
            })
        });
        // What the detector does with a probe's unchanged list: parse it and observe it against the
        // baseline (equal as sent: no index, no hash).
        group.bench_function("observe_unchanged_tools50", |b| {
            b.iter(|| {
                let tools = ToolsText::parse(black_box(&old_text)).expect("a tool list");
                state.observe_tools(Arc::new(tools), context, BaselinePolicy::Manual).tool_count
            })
        });
        // The unchanged-list path of a pair: parse both, index both (the second takes every digest from the
        // first), compare the hashes.
        group.bench_function("hash_unchanged_tools50", |b| {
            b.iter(|| pair(black_box(&old_text), black_box(&old_text)))
        });
    } else {
        eprintln!("{dir}/tools50_*.json not found: tool_drift/hash_and_diff_tools50 skipped");
    }
    for count in [1_000, 10_000] {
        let (old, new) = (
            ToolsText::from_values(&tool_list_of(count, false)),
            ToolsText::from_values(&tool_list_of(count, true)),
        );
        group.bench_function(BenchmarkId::new("hash_and_diff_tools", count), |b| {
            b.iter(|| hash_and_diff(black_box(&old), black_box(&new)))
        });
    }
    // The diff's worst case for its split: every changed tool has more changes of one kind (40 types
    // flipped) than a tool's own listing holds on another thread, so the calling thread diffs it again.
    let crowded = |variant: bool| -> ToolsText {
        let mut tools = tool_list_of(10_000, variant);
        for (i, tool) in tools.iter_mut().enumerate() {
            for k in 0..40 {
                let flipped = variant && i % 5 == 0;
                tool["inputSchema"]["properties"][format!("p{k}")] =
                    json!({"type": if flipped { "integer" } else { "string" }});
            }
        }
        ToolsText::from_values(&tools)
    };
    let (old, new) = (crowded(false), crowded(true));
    group.bench_function(BenchmarkId::new("hash_and_diff_tools_crowded", 10_000), |b| {
        b.iter(|| hash_and_diff(black_box(&old), black_box(&new)))
    });
    group.finish();
}

/// What counting a list's tokens costs, next to what the detector does with that list when it arrives new
/// (read it, normalise and hash every tool): on the largest list of tests/real (by tokens).
fn context_cost(c: &mut Criterion) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/real/lists/firecrawl/3.26.0.json");
    let Ok(text) = std::fs::read_to_string(path) else { return };
    let tools = ToolsText::parse(&text).expect("a tool list");
    let mut group = c.benchmark_group("context_cost");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tokens_largest_real_list", |b| {
        b.iter(|| driftline_detectors::context_cost::of_tools(black_box(&tools)))
    });
    // The reference tokenizer on the same texts (the same counts: tests/context_cost.rs).
    let reference = tiktoken_rs::o200k_base().expect("the o200k_base ranks");
    let compact: Vec<String> = tools
        .entries()
        .iter()
        .map(|entry| serde_json::from_str::<Value>(entry.get()).expect("a tool").to_string())
        .collect();
    group.bench_function("tiktoken_largest_real_list", |b| {
        b.iter(|| compact.iter().map(|text| reference.encode_ordinary(black_box(text)).len()).sum::<usize>())
    });
    group.bench_function("bpe_openai_largest_real_list", |b| {
        b.iter(|| {
            compact
                .iter()
                .map(|text| driftline_detectors::context_cost::of_text(black_box(text)).tokens)
                .sum::<u64>()
        })
    });
    // A hostile description: one letter repeated over 1 MB, one pre-token for both tokenizers.
    let run = "a".repeat(1 << 20);
    group.bench_function("tiktoken_1MB_run", |b| b.iter(|| reference.encode_ordinary(black_box(&run)).len()));
    group.bench_function("bpe_openai_1MB_run", |b| {
        b.iter(|| driftline_detectors::context_cost::of_text(black_box(&run)).tokens)
    });
    group.bench_function("index_largest_real_list", |b| {
        b.iter(|| {
            let tools = ToolsText::parse(black_box(&text)).expect("a tool list");
            ToolIndex::new(&tools).hash()
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

/// The security review of hostile descriptions of about 1 MB (a tool list may hold 5 MB): names glued into
/// longer words, for the shadowing search over 2,000 tool names; URLs without end, and URLs that the
/// previous text holds only at its end. Each once cost the text's length times the names or the URLs.
fn hostile_reviews(c: &mut Criterion) {
    use driftline_detectors::tool_drift::security::{review_text, TextContext, ToolNames};
    let mut group = c.benchmark_group("security_review");
    group.sample_size(10);
    let names: Vec<String> = (0..2000).map(|i| format!("tool{i:04}")).collect();
    let glued: String = names.iter().map(|n| format!("x{n}x ")).collect::<String>().repeat(80);
    let tool_names = ToolNames::new(names.iter().map(String::as_str).collect());
    group.throughput(Throughput::Bytes(glued.len() as u64));
    group.bench_function("names_glued_1MB", |b| {
        b.iter(|| {
            let context = TextContext { previous: None, own_tool: "tool0000", tool_names: Some(&tool_names) };
            review_text(black_box(&glued), context).len()
        })
    });
    let previous = format!(
        "{} {}",
        "x".repeat(500_000),
        (0..50_000).map(|i| format!("http://a{i} ")).collect::<String>()
    );
    let urls = format!(
        "{}{}",
        (0..50_000).map(|i| format!("http://a{i} ")).collect::<String>(),
        "http://".repeat(50_000)
    );
    group.throughput(Throughput::Bytes(urls.len() as u64));
    group.bench_function("urls_1MB", |b| {
        b.iter(|| {
            let context = TextContext { previous: Some(&previous), own_tool: "t", tool_names: None };
            review_text(black_box(&urls), context).len()
        })
    });
    group.finish();
}

criterion_group! { name = benches; config = config(); targets = shape_throughput, shape_drift_updates, tool_list_diff, hostile_reviews, context_cost }
criterion_main!(benches);
