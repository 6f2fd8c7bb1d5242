//! `make bench`: what the detector does with a tool-list record of the shared tools50 pair
//! (../shared/bench, DRIFTLINE_BENCH_DIR) — read the record (its tools taken from the list read before when
//! their text is the same), then observe the list against the server's baseline — for a probe's
//! unchanged list and for its changed one.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use driftline_detectors::tool_drift::{BaselinePolicy, RecordContext, ServerState};
use driftline_schemas::{InputPosition, Timestamp, ToolListLimits, ToolListRecord};
use driftline_worker::tool_lists::ListTexts;

fn record(tools: &str) -> String {
    format!(
        r#"{{"project":"p","server":"s","captured_at":"2026-03-26T08:15:42.000Z","source":"probe","tools":{tools}}}"#
    )
}

fn parse(payload: &str) -> ToolListRecord<'_> {
    serde_json::from_str(payload).expect("a tool-list record")
}

fn tool_list_records(c: &mut Criterion) {
    let dir = std::env::var("DRIFTLINE_BENCH_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/bench").to_owned());
    let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).ok();
    let (Some(old), Some(new)) = (read("tools50_old.json"), read("tools50_new.json")) else {
        eprintln!("{dir}/tools50_*.json not found: tool_lists benchmarks skipped");
        return;
    };
    let (old, new) = (record(&old), record(&new));
    let context = RecordContext {
        project: "p",
        server: "s",
        position: InputPosition { partition: 0, offset: 0 },
        at: Timestamp::from_millis(0).expect("a time"),
    };
    let limits = ToolListLimits::default();
    // The server's baseline, as the worker holds it after reading the old list.
    let mut texts = ListTexts::default();
    let mut state = ServerState::default();
    let tools = texts.read(&parse(&old), limits, || 0).expect("a list");
    state.observe_tools(tools, context, BaselinePolicy::Manual);

    let mut group = c.benchmark_group("tool_lists");
    group.throughput(Throughput::Elements(1));
    group.bench_function("record_unchanged_tools50", |b| {
        b.iter(|| {
            let tools = texts.read(&parse(black_box(&old)), limits, || 0).expect("a list");
            state.observe_tools(tools, context, BaselinePolicy::Manual).tool_count
        })
    });
    group.bench_function("record_changed_tools50", |b| {
        b.iter(|| {
            // Each time a list not read before, against the same baseline.
            let (mut texts, mut state) = (ListTexts::default(), state.clone());
            let tools = texts.read(&parse(black_box(&new)), limits, || 0).expect("a list");
            state.observe_tools(tools, context, BaselinePolicy::Manual).outputs.len()
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

criterion_group! { name = benches; config = config(); targets = tool_list_records }
criterion_main!(benches);
