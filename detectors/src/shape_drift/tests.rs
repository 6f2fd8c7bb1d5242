//! Tests of the return-shape detector: table cases per concern and property tests of its invariants.

use driftline_schemas::{CallStatus, DetectorThresholds, ShapeOutcome, ShapeRanking};

use super::*;

fn thresholds(min_history_calls: u32, history_window: u32) -> DetectorThresholds {
    DetectorThresholds { min_history_calls, history_window, ..Default::default() }
}

fn success(shape: &str) -> Observation<'_> {
    Observation {
        status: CallStatus::Success,
        outcome: ShapeOutcome::Fingerprinted,
        shape: Some(shape),
        compact_bytes: Some(shape.len() as u64),
    }
}

/// Feeds calls written as a compact script and returns the indices that fired. Each item is a shape,
/// `!` for a failed call, or `?` for an inconclusive (absent) value.
fn fires(calls: &[&str], thresholds: &DetectorThresholds) -> Vec<usize> {
    let mut state = ToolShapeState::default();
    let mut fired = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let observation = match *call {
            "!" => Observation {
                status: CallStatus::Error,
                outcome: ShapeOutcome::NotSuccess,
                shape: None,
                compact_bytes: None,
            },
            "?" => Observation {
                status: CallStatus::Success,
                outcome: ShapeOutcome::Absent,
                shape: None,
                compact_bytes: None,
            },
            shape => success(shape),
        };
        if state.observe(observation, thresholds).is_some() {
            fired.push(index);
        }
    }
    fired
}

fn repeat(shape: &'static str, n: usize) -> Vec<&'static str> {
    vec![shape; n]
}

fn check(calls: Vec<&str>, thresholds: DetectorThresholds, expected: &[usize]) {
    assert_eq!(fires(&calls, &thresholds), expected, "calls {calls:?}");
}

#[test]
fn fires_only_with_enough_history() {
    check([repeat("A", 9), vec!["B"]].concat(), thresholds(10, 100), &[]);
    check([repeat("A", 10), vec!["B"]].concat(), thresholds(10, 100), &[10]);
    check([repeat("A", 2), vec!["B"]].concat(), thresholds(2, 10), &[2]);
}

#[test]
fn two_thirds_exactly_counts_and_is_checked_before_insertion() {
    // Index 2 still primes (2 < 3); before index 3 the window is A, A, X: A is exactly 2/3.
    check(vec!["A", "A", "X", "B"], thresholds(3, 10), &[3]);
    // 19 A and 10 X: 19/29 < 2/3, no fire; one more A: 20/30 fires.
    let mut calls = [repeat("A", 19), repeat("X", 10)].concat();
    check([calls.clone(), vec!["B"]].concat(), thresholds(10, 100), &(19..29).collect::<Vec<_>>());
    calls.push("A");
    let fired = fires(&[calls.clone(), vec!["B"]].concat(), &thresholds(10, 100));
    assert_eq!(fired.last(), Some(&30));
}

#[test]
fn a_persistent_new_shape_becomes_the_baseline_by_itself() {
    // B fires while A keeps two thirds (indices 10..=14), then takes over; A coming back fires.
    let calls = [repeat("A", 10), repeat("B", 21), vec!["A"]].concat();
    check(calls, thresholds(10, 100), &[10, 11, 12, 13, 14, 15, 31]);
}

#[test]
fn inconclusive_and_failed_calls_take_no_slot() {
    let calls = [repeat("A", 5), repeat("?", 50), repeat("!", 50), repeat("A", 5), vec!["B"]].concat();
    check(calls, thresholds(10, 10), &[110]);
}

#[test]
fn the_window_slides() {
    // With a window of 10, eleven Bs push every A out: B is the baseline, A fires.
    let calls = [repeat("A", 10), repeat("B", 10), vec!["A"]].concat();
    let fired = fires(&calls, &thresholds(10, 10));
    assert_eq!(fired.first(), Some(&10));
    assert_eq!(fired.last(), Some(&20));
}

#[test]
fn the_project_byte_cap_applies_to_fingerprinted_records() {
    let mut state = ToolShapeState::default();
    let capped = DetectorThresholds { tool_return_value_max_bytes: 9, ..thresholds(2, 10) };
    let big = Observation { compact_bytes: Some(10), ..success("A") };
    assert!(state.observe(big, &capped).is_none());
    assert_eq!(state.telemetry.oversized, 1);
    assert_eq!(state.telemetry.fingerprinted, 0);
    assert_eq!(state.window_size(), 0);
}

#[test]
fn telemetry_counts_every_outcome() {
    let mut state = ToolShapeState::default();
    let limits = thresholds(10, 100);
    for outcome in ShapeOutcome::ALL {
        let status =
            if outcome == ShapeOutcome::NotSuccess { CallStatus::Error } else { CallStatus::Success };
        let shape = (outcome == ShapeOutcome::Fingerprinted).then_some("A");
        state.observe(Observation { status, outcome, shape, compact_bytes: Some(1) }, &limits);
    }
    let t = state.telemetry;
    assert_eq!(t.successful_calls, 6);
    assert_eq!(
        [
            t.fingerprinted,
            t.oversized,
            t.truncated_sentinel,
            t.unparseable,
            t.too_deep,
            t.absent,
            t.not_success
        ],
        [1; 7]
    );
}

#[test]
fn status() {
    let limits = thresholds(10, 100);
    let mut state = ToolShapeState::default();
    assert_eq!(state.status(&limits).to_string(), "priming 0/10");
    for _ in 0..4 {
        state.observe(success("{a:number}"), &limits);
    }
    assert_eq!(state.status(&limits).to_string(), "priming 4/10");
    for _ in 0..30 {
        state.observe(success("{a:number}"), &limits);
    }
    state.observe(success("{b:number}"), &limits);
    assert_eq!(state.status(&limits).to_string(), "stable · 9db01548 · 97%");
    for _ in 0..20 {
        state.observe(success("{b:number}"), &limits);
    }
    assert_eq!(state.status(&limits).to_string(), "heterogeneous");
}

#[test]
fn shrinking_the_window_drops_the_oldest() {
    let limits = thresholds(10, 100);
    let mut state = ToolShapeState::default();
    for shape in [repeat("A", 20), repeat("B", 20)].concat() {
        state.observe(success(shape), &limits);
    }
    state.shrink_to(10);
    assert_eq!(state.window_counts(), vec![("B", 10)]);
    assert_eq!(state.status(&limits).to_string(), format!("stable · {} · 100%", shape_hex8("B")));
}

#[test]
fn firing_carries_baseline_counts_and_ranking() {
    let limits = thresholds(10, 100);
    let mut state = ToolShapeState::default();
    for _ in 0..12 {
        state.observe(success("{price:number}"), &limits);
    }
    let firing = state.observe(success("{currency:string,price:number}"), &limits).expect("fires");
    assert_eq!((firing.baseline_count, firing.window_size), (12, 12));
    assert_eq!(firing.baseline_shape, "{price:number}");
    assert_eq!(firing.ranked.signal_ranking(), ShapeRanking::Compatible);
}

#[test]
fn state_is_compact_and_round_trips() {
    let limits = thresholds(10, 100);
    let mut state = ToolShapeState::default();
    let a = r#"{"id":"x","items":[{"sku":"a","qty":1,"price":2.5}],"total":10,"currency":"USD","ok":true}"#;
    let b = r#"{"id":"x","items":[],"total":10,"currency":"USD"}"#;
    for i in 0..250 {
        let json = if i % 5 == 0 { b } else { a };
        let shape = crate::shape::fingerprint(json.as_bytes(), 8192).shape.expect("shape");
        state.observe(success(&shape), &limits);
    }
    assert_eq!(state.window_size(), 100);
    let size = state.size_bytes();
    assert!(size <= 2048, "state holds {size} bytes at window 100");
    let text = serde_json::to_string(&state).expect("serialize");
    let back: ToolShapeState = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, state);
}

#[test]
fn signal_is_addressed_deterministically() {
    let record = driftline_schemas::ToolCallRecord {
        schema_version: 1,
        project: "p".parse().expect("a valid name"),
        span_id: "span-9".into(),
        trace_id: None,
        session_id: None,
        agent_name: None,
        server: "srv".parse().expect("a valid name"),
        tool: "weather".parse().expect("a valid name"),
        started_at: driftline_schemas::Timestamp::parse("2026-01-01T00:00:00Z").expect("time"),
        duration_ms: 1.0,
        status: CallStatus::Success,
        error: None,
        ingested_at: driftline_schemas::Timestamp::parse("2026-01-01T00:00:01Z").expect("time"),
        shape: Some("{temp:string}".into()),
        shape_hash: Some(shape_hex8("{temp:string}")),
        compact_bytes: Some(14),
        shape_outcome: ShapeOutcome::Fingerprinted,
        argument_shape: None,
    };
    let firing = Firing {
        shape: "{temp:string}".into(),
        baseline_shape: "{temp:number}".into(),
        baseline_digest: digest("{temp:number}"),
        baseline_count: 10,
        window_size: 10,
        ranked: rank("{temp:number}", "{temp:string}"),
    };
    let position = driftline_schemas::InputPosition { partition: 0, offset: 7 };
    let first = signal(&record, position, firing.clone());
    assert_eq!(first, signal(&record, position, firing));
    assert_eq!(first.fingerprint, format!("tool_schema_drift:weather:{}", shape_hex8("{temp:string}")));
    assert_eq!(first.detected_at.to_string(), "2026-01-01T00:00:01.000Z");
    assert_eq!(first.baseline_hash, shape_hex8("{temp:number}"), "the digest begins with the hash");
    assert_eq!(first.reasons[0].to_string(), "temp: number -> string");
}

/// Calls of id-keyed shapes (a new shape per call, 8 KB each): the tool holds its dominant shape's text
/// and at most the budget of others, not a text per call.
#[test]
fn id_keyed_shapes_hold_the_text_budget_not_a_text_per_call() {
    let thresholds = thresholds(5, 10_000);
    let mut state = ToolShapeState::default();
    let stable = format!("{{\"items\":[{}]}}", "\"string\",".repeat(100));
    for _ in 0..50 {
        state.observe(success(&stable), &thresholds);
    }
    for call in 0..300 {
        let shape = format!("{{\"u_{call:06x}\":{}}}", "\"x\"".repeat(2_700));
        state.observe(success(&shape), &thresholds);
    }
    let texts: usize = state.slots.iter().map(|s| s.shape.len()).sum();
    assert!(texts <= SHAPE_TEXT_BYTES_PER_TOOL + stable.len() + 8_200, "{texts} bytes of text");
    assert_eq!(state.window_size(), 350);
    assert!(state.size_bytes() < 128 * 1024, "{} bytes", state.size_bytes());
    // A dropped shape called again has its text back, and a state round-trips with its digests.
    let again = format!("{{\"u_{:06x}\":{}}}", 0, "\"x\"".repeat(2_700));
    state.observe(success(&again), &thresholds);
    assert!(state.slots.iter().any(|s| *s.shape == again));
    let stored = serde_json::to_string(&state).expect("state");
    assert_eq!(serde_json::from_str::<ToolShapeState>(&stored).expect("state"), state);
}

/// A state stored before shapes had digests (text only) loads with them.
#[test]
fn a_state_stored_without_digests_loads() {
    let thresholds = thresholds(3, 100);
    let mut state = ToolShapeState::default();
    for shape in ["A", "A", "B"] {
        state.observe(success(shape), &thresholds);
    }
    let mut old = serde_json::to_value(&state).expect("state");
    for slot in old["slots"].as_array_mut().expect("slots") {
        slot.as_object_mut().expect("slot").remove("digest");
    }
    let mut loaded: ToolShapeState = serde_json::from_value(old).expect("old state");
    assert_eq!(loaded, state);
    assert_eq!(loaded.observe(success("A"), &thresholds), None, "A is the baseline");
    assert!(loaded.observe(success("C"), &thresholds).is_some(), "C is new against A (3 of 4)");
}

/// The one case where a dropped text can be a baseline: an admin shrinks the window so that a shape that
/// lost its text while not dominant holds two thirds of what remains. The signal still fires as with
/// texts kept, with the baseline's hash and counts; only its text (and so the ranking) is missing.
#[test]
fn a_window_shrunk_under_a_dropped_text_still_fires_with_the_baseline_hash() {
    let wide = thresholds(2, 8);
    let (mut bounded, mut unbounded) = (ToolShapeState::default(), ToolShapeState::default());
    for shape in ["A", "A", "A", "A", "B", "B", "B", "C"] {
        bounded.observe_within(success(shape), &wide, 0);
        unbounded.observe_within(success(shape), &wide, usize::MAX);
    }
    let narrow = thresholds(2, 4);
    bounded.shrink_to(4);
    unbounded.shrink_to(4);
    let kept = unbounded.observe_within(success("D"), &narrow, usize::MAX).expect("fires");
    let dropped = bounded.observe_within(success("D"), &narrow, 0).expect("fires too");
    assert_eq!((kept.baseline_shape.as_str(), dropped.baseline_shape.as_str()), ("B", ""));
    assert_eq!(dropped.baseline_hash(), shape_hex8("B"));
    assert_eq!((dropped.baseline_count, dropped.window_size), (kept.baseline_count, kept.window_size));
}

/// A state filled the worst way at `history_window` and `max_bytes` — every call a new shape of the
/// longest text a value within `max_bytes` can have, after (when `dominant`) a baseline of that length —
/// never holds more than [`ToolShapeState::worst_case_bytes`], which is what a project's byte budget
/// counts per tool.
fn check_worst_case(history_window: u32, max_bytes: u32, dominant: bool) {
    let limits = DetectorThresholds {
        min_history_calls: 2,
        history_window,
        tool_return_value_max_bytes: max_bytes,
        ..Default::default()
    };
    let longest = shape_text_bound(u64::from(max_bytes)) as usize;
    let bound = ToolShapeState::worst_case_bytes(&limits) as usize;
    let mut state = ToolShapeState::default();
    let calls = 2 * history_window as usize + 3;
    let baseline = if dominant { calls * 2 / 3 } else { 0 };
    let mut most = 0;
    for call in 0..calls {
        let tag = if call < baseline { "base".to_owned() } else { format!("{call:x}-") };
        let shape = format!("{tag}{}", "x".repeat(longest - tag.len()));
        let observation = Observation { compact_bytes: Some(u64::from(max_bytes)), ..success(&shape) };
        state.observe(observation, &limits);
        most = most.max(state.size_bytes());
    }
    assert!(most <= bound, "window {history_window}, {max_bytes} B values: held {most} B, bound {bound} B");
    // One byte more than a value of `max_bytes` can have is not the walk's: it never enters the window.
    let too_long = "y".repeat(longest + 1);
    let before = state.clone();
    state.observe(Observation { compact_bytes: Some(u64::from(max_bytes)), ..success(&too_long) }, &limits);
    assert_eq!(state.window_counts(), before.window_counts());
    assert_eq!(state.telemetry.unparseable, before.telemetry.unparseable + 1);
}

#[test]
fn a_tools_state_stays_within_its_worst_case_at_the_bounds() {
    for (window, max_bytes) in
        [(10, 1), (10, 8192), (100, 8192), (100, 65_536), (1000, 64), (2000, 16), (10, 1_048_576)]
    {
        check_worst_case(window, max_bytes, false);
        check_worst_case(window, max_bytes, true);
    }
    // An admin who shrinks the window gets the memory of the longer one back.
    let wide = DetectorThresholds { history_window: 2000, ..Default::default() };
    let mut state = ToolShapeState::default();
    for call in 0..2000 {
        state.observe(success(&format!("{call}")), &wide);
    }
    let narrow = DetectorThresholds { history_window: 10, ..Default::default() };
    state.fit_to(narrow.history_window);
    assert!(state.size_bytes() as u64 <= ToolShapeState::worst_case_bytes(&narrow), "{}", state.size_bytes());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// The text budget changes no verdict: with texts of non-dominant shapes dropped down to a budget of
    /// none, every call fires (with the same baseline text, counts and ranking) or not exactly as with
    /// texts unbounded, and the statuses agree.
    #[test]
    fn the_text_budget_changes_no_verdict(
        calls in proptest::collection::vec((0u8..6, 1usize..40), 1..400),
        min_history in 1u32..20,
        window in 2u32..60,
        shrink_at in proptest::option::of(0usize..400),
        budget in 0usize..64,
    ) {
        let mut thresholds = thresholds(min_history, window);
        let (mut bounded, mut unbounded) = (ToolShapeState::default(), ToolShapeState::default());
        for (index, (kind, size)) in calls.into_iter().enumerate() {
            if Some(index) == shrink_at {
                // An admin shrinks the window: the oldest go; verdicts must still agree.
                thresholds.history_window = (window / 2).max(1);
                bounded.shrink_to(thresholds.history_window);
                unbounded.shrink_to(thresholds.history_window);
            }
            let shape = format!("{{\"k{kind}\":\"{}\"}}", "s".repeat(size * usize::from(kind % 2)));
            let a = bounded.observe_within(success(&shape), &thresholds, budget);
            let b = unbounded.observe_within(success(&shape), &thresholds, usize::MAX);
            let shrunk = shrink_at.is_some_and(|at| at <= index);
            match (&a, &b) {
                // After a shrink a baseline may lack its text (see the test above): the same signal.
                (Some(a), Some(b)) if shrunk && a.baseline_shape.is_empty() => {
                    proptest::prop_assert_eq!(a.baseline_hash(), b.baseline_hash());
                    proptest::prop_assert_eq!((a.baseline_count, a.window_size), (b.baseline_count, b.window_size));
                }
                _ => proptest::prop_assert_eq!(a, b, "call {}", index),
            }
            let statuses = (bounded.status(&thresholds), unbounded.status(&thresholds));
            match statuses {
                (ShapeStatus::Stable { hex8: x, count: c, .. }, ShapeStatus::Stable { hex8: y, count: d, .. }) if shrunk => {
                    proptest::prop_assert_eq!((x, c), (y, d));
                }
                (x, y) => proptest::prop_assert_eq!(x, y),
            }
        }
    }
}
