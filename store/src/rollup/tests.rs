//! Tests of the rollups: folding, latency sketches and their properties over batches.

use std::collections::BTreeMap;

use driftline_schemas::{
    CallStatus, InputPosition, ProjectName, ServerName, ShapeOutcome, Timestamp, ToolCallRecord, ToolName,
};
use proptest::prelude::*;

use super::*;

const BASE: i64 = 1_790_000_000_000 - 1_790_000_000_000 % HOUR_MS;

fn call(
    tool: &str,
    agent: Option<&str>,
    session: Option<&str>,
    started: i64,
    duration: f64,
) -> ToolCallRecord {
    ToolCallRecord {
        schema_version: 1,
        project: ProjectName::parse("p").expect("name"),
        span_id: format!("{tool}-{started}"),
        trace_id: None,
        session_id: session.map(str::to_owned),
        agent_name: agent.map(str::to_owned),
        server: ServerName::parse("srv").expect("name"),
        tool: ToolName::parse(tool).expect("name"),
        started_at: Timestamp::from_millis(BASE + started).expect("time"),
        duration_ms: duration,
        status: CallStatus::Success,
        error: None,
        ingested_at: Timestamp::from_millis(BASE + 10 * HOUR_MS).expect("time"),
        shape: Some("{a:number}".into()),
        shape_hash: Some("aaaaaaaa".into()),
        compact_bytes: Some(7),
        shape_outcome: ShapeOutcome::Fingerprinted,
        argument_shape: None,
    }
}

fn at(offset: u64) -> InputPosition {
    InputPosition { partition: 0, offset }
}

// --- latency -------------------------------------------------------------------------------------------

fn check_percentiles(values: &[f64], expected: (Option<f64>, Option<f64>)) {
    let mut sketch = LatencySketch::default();
    for value in values {
        sketch.insert(*value);
    }
    assert_eq!((sketch.percentile(0.5), sketch.percentile(0.95)), expected, "{values:?}");
}

#[test]
fn few_latencies_give_exact_nearest_rank_percentiles() {
    check_percentiles(&[], (None, None));
    check_percentiles(&[7.0], (Some(7.0), Some(7.0)));
    check_percentiles(&[3.0, 1.0, 2.0, 4.0], (Some(2.0), Some(4.0)));
    check_percentiles(&[0.0, 0.0, 5.0], (Some(0.0), Some(5.0)));
    let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
    check_percentiles(&twenty, (Some(10.0), Some(19.0)));
    // Values no validated span carries count as zero.
    check_percentiles(&[-3.0, f64::NAN, 2.0], (Some(0.0), Some(2.0)));
}

#[test]
fn many_latencies_are_binned_within_one_percent() {
    let values: Vec<f64> = (1..=10_000).map(|i| f64::from(i) * 0.37).collect();
    let mut sketch = LatencySketch::default();
    for value in &values {
        sketch.insert(*value);
    }
    assert!(!sketch.is_exact());
    assert_eq!(sketch.count(), 10_000);
    for p in [0.01, 0.5, 0.95, 0.99, 1.0] {
        let rank = ((p * 10_000.0_f64).ceil() as usize).clamp(1, 10_000);
        let truth = values[rank - 1];
        let read = sketch.percentile(p).expect("a value");
        assert!((read - truth).abs() <= truth * LATENCY_ACCURACY * 1.0001, "p{p}: {read} vs {truth}");
    }
}

fn latencies(values: &[f64]) -> LatencySketch {
    let mut sketch = LatencySketch::default();
    values.iter().for_each(|v| sketch.insert(*v));
    sketch
}

proptest! {
    #[test]
    fn latency_merges_in_any_order_to_the_sketch_of_all_values(
        parts in prop::collection::vec(prop::collection::vec(0.0f64..10_000.0, 0..50), 1..6),
    ) {
        let all: Vec<f64> = parts.iter().flatten().copied().collect();
        let whole = latencies(&all);
        let mut forward = LatencySketch::default();
        parts.iter().for_each(|p| forward.merge(&latencies(p)));
        let mut backward = LatencySketch::default();
        parts.iter().rev().for_each(|p| backward.merge(&latencies(p)));
        for p in [0.5, 0.95] {
            prop_assert_eq!(forward.percentile(p), whole.percentile(p));
            prop_assert_eq!(backward.percentile(p), whole.percentile(p));
        }
        prop_assert_eq!(forward.count(), all.len() as u64);
    }

    #[test]
    fn latency_merged_from_encodings_equals_merging_decoded_sketches(
        parts in prop::collection::vec(prop::collection::vec(0.0f64..10_000.0, 0..80), 0..8),
    ) {
        let mut decoded = LatencySketch::default();
        let mut streamed = LatencyMerge::default();
        for part in &parts {
            let bytes = latencies(part).encode();
            decoded.merge(&LatencySketch::decode(&bytes).unwrap());
            streamed.add_encoded(&bytes).unwrap();
        }
        prop_assert_eq!(streamed.finish(), decoded);
    }

    #[test]
    fn latency_encoding_round_trips(values in prop::collection::vec(0.0f64..1e7, 0..200)) {
        let sketch = latencies(&values);
        prop_assert_eq!(LatencySketch::decode(&sketch.encode()), Ok(sketch));
    }

    #[test]
    fn sketches_refuse_garbage_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = LatencySketch::decode(&bytes);
        let _ = SessionSketch::decode(&bytes);
        let _ = ShapeCounts::decode(&bytes);
    }
}

#[test]
fn truncated_or_padded_encodings_are_refused() {
    let bytes = latencies(&[1.0, 2.0]).encode();
    assert!(LatencySketch::decode(&bytes[..bytes.len() - 1]).is_err());
    assert!(LatencySketch::decode(&[bytes.clone(), vec![0]].concat()).is_err());
    assert!(LatencySketch::decode(&[9]).is_err());
    // A bin no latency falls in (a dense merge would allocate for every bin up to it).
    let far_bin = [2, 0, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f, 1];
    assert!(LatencySketch::decode(&far_bin).is_err());
    assert!(LatencyMerge::default().add_encoded(&far_bin).is_err());
    // A count far beyond the bytes that follow allocates nothing.
    assert!(SessionSketch::decode(&[1, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
}

// --- sessions ------------------------------------------------------------------------------------------

fn sessions(range: std::ops::Range<u32>, limit: usize) -> SessionSketch {
    let mut sketch = SessionSketch::default();
    for i in range {
        sketch.insert(session_hash(&format!("session-{i}")), limit);
    }
    sketch
}

#[test]
fn sessions_are_counted_exactly_up_to_the_limit() {
    let sketch = sessions(0..256, SessionSketch::STORED_EXACT_LIMIT);
    assert!(sketch.is_exact());
    assert_eq!(sketch.estimate(), 256);
    let mut twice = sketch.clone();
    twice.merge(&sessions(0..256, SessionSketch::STORED_EXACT_LIMIT), SessionSketch::READ_EXACT_LIMIT);
    assert_eq!(twice.estimate(), 256, "the same sessions count once");
    let mut union = sessions(0..200, 256);
    union.merge(&sessions(100..300, 256), SessionSketch::READ_EXACT_LIMIT);
    assert!(union.is_exact());
    assert_eq!(union.estimate(), 300);
}

#[test]
fn many_sessions_are_estimated_within_five_percent() {
    for n in [300u32, 2_000, 5_000, 10_000, 20_000, 100_000, 1_000_000] {
        let sketch = sessions(0..n, SessionSketch::STORED_EXACT_LIMIT);
        assert!(!sketch.is_exact());
        let estimate = sketch.estimate() as f64;
        assert!((estimate - f64::from(n)).abs() <= 0.05 * f64::from(n), "{n}: {estimate}");
        assert_eq!(SessionSketch::decode(&sketch.encode()), Ok(sketch));
    }
}

proptest! {
    #[test]
    fn session_unions_do_not_depend_on_order(
        parts in prop::collection::vec(prop::collection::vec(0u32..2_000, 0..300), 1..5),
    ) {
        let sketch = |ids: &[u32]| {
            let mut s = SessionSketch::default();
            ids.iter().for_each(|i| s.insert(session_hash(&i.to_string()), SessionSketch::STORED_EXACT_LIMIT));
            s
        };
        let all: Vec<u32> = parts.iter().flatten().copied().collect();
        let mut forward = SessionSketch::default();
        parts.iter().for_each(|p| forward.merge(&sketch(p), SessionSketch::STORED_EXACT_LIMIT));
        let mut backward = SessionSketch::default();
        parts.iter().rev().for_each(|p| backward.merge(&sketch(p), SessionSketch::STORED_EXACT_LIMIT));
        prop_assert_eq!(&forward, &sketch(&all));
        prop_assert_eq!(&backward, &sketch(&all));
        prop_assert_eq!(SessionSketch::decode(&forward.encode()), Ok(forward));
    }
}

// --- shapes --------------------------------------------------------------------------------------------

#[test]
fn shape_counts_keep_the_dominant_shape_and_the_rest() {
    let mut shapes = ShapeCounts::default();
    for hash in ["a", "b", "a", "a"] {
        shapes.insert(hash);
    }
    assert_eq!((shapes.total(), shapes.dominant()), (4, 3));
    let mut many = ShapeCounts::default();
    for i in 0..20 {
        many.insert(&format!("h{i}"));
    }
    many.insert("h0");
    assert_eq!((many.total(), many.dominant()), (21, 2), "shapes beyond the limit still count");
    shapes.merge(&many);
    assert_eq!((shapes.total(), shapes.dominant()), (25, 3));
    assert_eq!(ShapeCounts::decode(&many.encode()), Ok(many));
}

// --- folding -------------------------------------------------------------------------------------------

#[test]
fn a_call_counts_when_it_started_unless_the_clock_was_ahead_or_it_is_too_old() {
    let check = |started: i64, expected: Option<i64>| {
        let c = call("t", None, None, started, 1.0);
        assert_eq!(call_time(&(&c).into()), expected.map(|e| BASE + e), "{started}");
    };
    check(5 * HOUR_MS, Some(5 * HOUR_MS));
    check(11 * HOUR_MS, Some(10 * HOUR_MS));
    check(10 * HOUR_MS - MAX_CALL_AGE_MS, Some(10 * HOUR_MS - MAX_CALL_AGE_MS));
    check(10 * HOUR_MS - MAX_CALL_AGE_MS - 1, None);
    assert!(keys_of(&(&call("t", None, None, 10 * HOUR_MS - MAX_CALL_AGE_MS - 1, 1.0)).into()).is_empty());
}

#[test]
fn a_call_folds_into_its_tool_and_agent_rows_per_minute_and_hour() {
    let keys = keys_of(&(&call("t", None, Some("s"), 90 * MINUTE_MS + 5, 1.0)).into());
    let summary: Vec<(Option<&str>, i64, i64)> =
        keys.iter().map(|k| (k.agent.as_deref(), k.granularity_ms, k.bucket_ms - BASE)).collect();
    assert_eq!(
        summary,
        [
            (None, MINUTE_MS, 90 * MINUTE_MS),
            (Some(UNKNOWN_AGENT), MINUTE_MS, 90 * MINUTE_MS),
            (None, HOUR_MS, HOUR_MS),
            (Some(UNKNOWN_AGENT), HOUR_MS, HOUR_MS),
        ]
    );
}

#[test]
fn a_row_skips_what_it_includes() {
    let record = call("t", Some("a"), Some("s"), 0, 2.0);
    let c = CallFacts::from(&record);
    let key = keys_of(&c).swap_remove(1);
    let mut row = Rollup::empty(key);
    assert!(row.fold(&c, BASE, at(5)));
    assert!(!row.fold(&c, BASE, at(5)), "the same record again");
    assert!(!row.fold(&c, BASE, at(3)), "an earlier record of the same partition");
    assert!(row.fold(&c, BASE, InputPosition { partition: 1, offset: 0 }), "another partition");
    assert!(row.fold(&c, BASE, InputPosition { partition: 1, offset: 1 }));
    assert_eq!((row.calls, row.duration_sum_ms, row.sessions.estimate()), (3, 6.0, 1));
}

#[test]
fn rows_must_be_loaded_before_folding() {
    let mut cache = RollupCache::default();
    let c = call("t", None, None, 0, 1.0);
    assert!(cache.fold([(&c, at(1))]).is_err());
    let missing = cache.missing([&c]);
    assert_eq!(missing.len(), 4);
    cache.hold(missing, Vec::new());
    assert!(cache.missing([&c]).is_empty());
    assert_eq!(cache.fold([(&c, at(1))]).expect("loaded").len(), 4);
}

#[test]
fn trimming_keeps_the_rows_just_written() {
    let mut cache = RollupCache::new(4);
    let old = call("t", None, None, 0, 1.0);
    let new = call("t", None, None, 5 * HOUR_MS, 1.0);
    for c in [&old, &new] {
        let missing = cache.missing([c]);
        cache.hold(missing, Vec::new());
    }
    let written = cache.fold([(&new, at(1))]).expect("loaded");
    assert_eq!(cache.len(), 8);
    cache.trim(&written);
    assert_eq!(cache.len(), 4);
    assert!(cache.missing([&new]).is_empty());
}

/// What a store holds of rollups: rows by key, and the position its last stored batch included.
#[derive(Default)]
struct ModelStore {
    rows: BTreeMap<RollupKey, Rollup>,
    position: Option<u64>,
}

/// One batch of calls through a detector: load what the cache misses, fold, then store the rows (all of
/// them, or when `crash` only the first `crash.1` of them and no position).
fn run_batch(
    store: &mut ModelStore,
    cache: &mut RollupCache,
    calls: &[(ToolCallRecord, InputPosition)],
    crash: Option<usize>,
) {
    let missing = cache.missing(calls.iter().map(|(c, _)| c));
    let found = missing.iter().filter_map(|k| store.rows.get(k).cloned()).collect();
    cache.hold(missing, found);
    let rows = cache.fold(calls.iter().map(|(c, p)| (c, *p))).expect("loaded");
    match crash {
        None => {
            for row in &rows {
                store.rows.insert(row.key.clone(), row.clone());
            }
            store.position = calls.last().map(|(_, p)| p.offset).or(store.position);
            cache.trim(&rows);
        }
        Some(stored) => {
            for row in rows.iter().take(stored) {
                store.rows.insert(row.key.clone(), row.clone());
            }
            cache.clear();
        }
    }
}

fn arbitrary_calls() -> impl Strategy<Value = Vec<ToolCallRecord>> {
    let one = (0usize..3, 0usize..4, 0usize..6, -3i64..30, 0u32..500, any::<bool>());
    prop::collection::vec(one, 1..120).prop_map(|calls| {
        calls
            .into_iter()
            .map(|(tool, agent, session, minute, duration, error)| {
                let agent = ["a", "b", "c"].get(agent).copied();
                let session = format!("s{session}");
                let mut c = call(
                    ["t0", "t1", "t2"][tool],
                    agent,
                    Some(&session),
                    9 * HOUR_MS + minute * 7 * MINUTE_MS,
                    f64::from(duration) / 4.0,
                );
                if error {
                    c.status = CallStatus::Error;
                    c.shape_outcome = ShapeOutcome::NotSuccess;
                }
                c
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any split into batches, with crashes that store some rows of a batch but not its position, gives
    /// the rows of folding every call once.
    #[test]
    fn replays_after_crashes_count_every_call_once(
        calls in arbitrary_calls(),
        cuts in prop::collection::vec((1usize..20, prop::option::of(0usize..12)), 1..40),
        limit in 1usize..40,
    ) {
        let positioned: Vec<(ToolCallRecord, InputPosition)> =
            calls.into_iter().enumerate().map(|(i, c)| (c, at(i as u64 + 1))).collect();
        let mut once = RollupCache::default();
        let mut expected = ModelStore::default();
        run_batch(&mut expected, &mut once, &positioned, None);

        let mut store = ModelStore::default();
        let mut cache = RollupCache::new(limit);
        let mut cuts = cuts.into_iter().cycle();
        let mut crashed_at = std::collections::HashSet::new();
        loop {
            let next = store.position.map_or(0, |p| p as usize);
            if next >= positioned.len() {
                break;
            }
            let (size, crash) = cuts.next().expect("cycled");
            // A batch crashes at most once from one position: the detector gets through eventually.
            let crash = crash.filter(|_| crashed_at.insert(next));
            let batch = &positioned[next..(next + size).min(positioned.len())];
            run_batch(&mut store, &mut cache, batch, crash);
        }
        prop_assert_eq!(&store.rows, &expected.rows);
        // And the rows add up to the calls: four rows per call, each counted once.
        let total: u64 = store.rows.values().filter(|r| r.key.agent.is_none() && r.key.granularity_ms == HOUR_MS).map(|r| r.calls).sum();
        prop_assert_eq!(total, positioned.len() as u64);
    }
}

// --- windows -------------------------------------------------------------------------------------------

#[test]
fn windows_start_on_the_minute_or_beyond_two_days_on_the_hour() {
    let check = |now: i64, hours: u32, from: i64, hours_from: i64| {
        assert_eq!(
            window(BASE + now, hours),
            Window { from_ms: BASE + from, hours_from_ms: BASE + hours_from },
            "now +{now} ms, {hours} h"
        );
    };
    let minute = MINUTE_MS;
    check(30 * minute + 5_000, 1, -30 * minute, 0);
    check(30 * minute, 24, -24 * HOUR_MS + 30 * minute, -23 * HOUR_MS);
    check(0, 24, -24 * HOUR_MS, -24 * HOUR_MS);
    check(30 * minute + 1, 48, -48 * HOUR_MS + 30 * minute, -47 * HOUR_MS);
    check(30 * minute + 1, 49, -49 * HOUR_MS, -49 * HOUR_MS);
    check(59 * minute, 720, -720 * HOUR_MS, -720 * HOUR_MS);
}

#[test]
fn timelines_read_hour_rows_for_whole_hours_and_minute_rows_for_whole_minutes() {
    assert_eq!(timeline_granularity(BASE, HOUR_MS), Some(HOUR_MS));
    assert_eq!(timeline_granularity(BASE, 6 * HOUR_MS), Some(HOUR_MS));
    assert_eq!(timeline_granularity(BASE + 30 * MINUTE_MS, HOUR_MS), Some(MINUTE_MS));
    assert_eq!(timeline_granularity(BASE, 30 * MINUTE_MS), Some(MINUTE_MS));
    assert_eq!(timeline_granularity(BASE, 90_000), None);
    assert_eq!(timeline_granularity(BASE + 1, MINUTE_MS), None);
}

#[test]
fn impact_sums_an_agents_rows_and_counts_sessions_across_them() {
    let row = |agent: &str, calls: u64, ids: std::ops::Range<u32>, last: i64| AgentRow {
        agent: agent.into(),
        calls,
        errors: 1,
        duration_sum_ms: calls as f64 * 10.0,
        last_call_ms: last,
        sessions: sessions(ids, SessionSketch::STORED_EXACT_LIMIT).encode(),
        arguments: {
            let mut shapes = ArgumentShapes::default();
            (0..calls).for_each(|_| shapes.insert(&format!("{{\"{agent}\":\"string\"}}")));
            shapes.encode()
        },
    };
    let (agents, total) =
        agent_stats(vec![row("b", 2, 0..2, 5), row("a", 3, 0..3, 7), row("b", 4, 1..4, 9)]).expect("rows");
    let summary: Vec<_> = agents
        .iter()
        .map(|a| {
            (
                a.agent.as_str(),
                a.sessions,
                a.calls,
                a.errors,
                a.avg_latency_ms,
                a.last_call_ms,
                a.arguments.total(),
            )
        })
        .collect();
    assert_eq!(summary, vec![("b", 4, 6, 2, 10.0, 9, 6), ("a", 3, 3, 1, 10.0, 7, 3)]);
    assert_eq!(total, 4);
}

#[test]
fn timeline_buckets_merge_the_rows_inside_them() {
    let row = |minute: i64, values: &[f64], hashes: &[&str]| {
        let mut shapes = ShapeCounts::default();
        hashes.iter().for_each(|h| shapes.insert(h));
        BucketRow {
            bucket_ms: BASE + minute * MINUTE_MS,
            calls: values.len() as u64,
            errors: 0,
            latency: latencies(values).encode(),
            shapes: shapes.encode(),
        }
    };
    let buckets = bucket_aggregates(
        BASE,
        10 * MINUTE_MS,
        vec![row(0, &[1.0, 2.0], &["a", "b"]), row(9, &[3.0, 4.0], &["a"]), row(10, &[5.0], &[])],
    )
    .expect("rows");
    let first = buckets[&0];
    assert_eq!((first.calls, first.fingerprinted, first.dominant), (4, 3, 2));
    assert_eq!((first.p50_ms, first.p95_ms), (Some(2.0), Some(4.0)));
    assert_eq!((buckets[&1].calls, buckets[&1].fingerprinted, buckets[&1].p50_ms), (1, 0, Some(5.0)));
}

#[test]
fn a_backfill_counts_the_stored_calls_and_live_calls_continue_it() {
    let calls: Vec<ToolCallRecord> = (0..40)
        .map(|i| {
            let agent = ["a", "b"][i % 2];
            call(
                ["t0", "t1"][i % 3 % 2],
                Some(agent),
                Some(&format!("s{}", i % 5)),
                (i as i64) * 7 * MINUTE_MS,
                1.5,
            )
        })
        .collect();
    let positioned: Vec<(ToolCallRecord, InputPosition)> =
        calls.into_iter().enumerate().map(|(i, c)| (c, at(i as u64 + 1))).collect();
    let mut expected = ModelStore::default();
    run_batch(&mut expected, &mut RollupCache::default(), &positioned, None);

    // The first 25 calls were stored by a detector that kept no rollups.
    let mut backfill = Backfill::new(BASE + 10 * HOUR_MS);
    for (c, _) in &positioned[..25] {
        backfill.add(&c.into(), at(25));
    }
    let mut store = ModelStore { position: Some(25), ..Default::default() };
    for row in backfill.finish() {
        assert_eq!(row.through, Some(at(25)));
        store.rows.insert(row.key.clone(), row);
    }
    // The upgraded detector replays from its stored position... and from before it (a group's offsets).
    run_batch(&mut store, &mut RollupCache::default(), &positioned[20..], None);
    let without_through = |rows: &BTreeMap<RollupKey, Rollup>| -> Vec<Rollup> {
        rows.values().cloned().map(|r| Rollup { through: None, ..r }).collect()
    };
    assert_eq!(without_through(&store.rows), without_through(&expected.rows));
}

#[test]
fn a_backfill_builds_only_rows_a_window_can_read() {
    let now = BASE + 100 * HOUR_MS;
    let mut backfill = Backfill::new(now);
    let mut old = call("t", None, None, 0, 1.0);
    old.ingested_at = Timestamp::from_millis(now).expect("time");
    backfill.add(&(&old).into(), at(1));
    // 100 hours old: past minute rows' retention, within hour rows'.
    let kept: Vec<i64> = backfill.finish().iter().map(|r| r.key.granularity_ms).collect();
    assert_eq!(kept, [HOUR_MS, HOUR_MS]);
}
