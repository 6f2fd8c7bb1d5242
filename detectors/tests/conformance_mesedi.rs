//! Mesedi's return-shape vectors (shared/conformance/mesedi_shape_vectors.json), per the README there.

mod common;

use std::collections::{BTreeMap, HashSet};

use common::{conformance_file, str_field};
use driftline_detectors::shape::{self, fingerprint, shape_hex8, LARGEST_MAX_BYTES};
use driftline_detectors::shape_drift::{self, rank, Ranking, SignalGroups, ToolShapeState};
use driftline_schemas::{DetectorThresholds, InputPosition, ShapeOutcome, Timestamp, ToolCallSpan};
use serde_json::{json, Value};

fn vectors() -> Value {
    conformance_file("mesedi_shape_vectors.json")
}

/// Deliberate difference: driftline escapes `\ : , { } [ ] < > "` and control characters in keys and
/// typed-sentinel names (DESIGN.md §3), so these Mesedi shapes come out differently (and no longer
/// collide). Mesedi's shape on the left, driftline's on the right.
const ESCAPED_SHAPES: &[(&str, &str)] = &[
    ("{a:b:number}", r"{a\:b:number}"),
    ("{x,y:bool}", r"{x\,y:bool}"),
    ("{{:number,}:number}", r"{\{:number,\}:number}"),
    ("{a\"b:number,line\nbreak:number}", r#"{a\"b:number,line\u000abreak:number}"#),
    ("<typed:a:b:c>", r"<typed:a\:b:c>|<typed:a:b\:c>"),
    ("{a:number,b:number}", r"{a\:number\,b:number}"),
];

/// Keys and sentinel names anywhere in `value` that driftline writes escaped.
fn has_escaped_text(value: &Value) -> bool {
    let special = |s: &str| s.chars().any(|c| "\\:,{}[]<>\"".contains(c) || c.is_control());
    match value {
        Value::Object(map) => {
            let sentinel = map.get("__type__").and_then(Value::as_str).is_some();
            map.iter().any(|(k, v)| {
                (!sentinel && special(k))
                    || (sentinel && (k == "__type__" || k == "class") && v.as_str().is_some_and(special))
                    || (!sentinel && has_escaped_text(v))
            })
        }
        Value::Array(items) => items.first().is_some_and(has_escaped_text),
        _ => false,
    }
}

fn shape_of(value: &Value) -> Option<String> {
    let text = serde_json::to_string(value).expect("serialize");
    fingerprint(text.as_bytes(), LARGEST_MAX_BYTES).shape
}

#[test]
fn shapes_match_mesedi_for_ordinary_keys() {
    let vectors = vectors();
    let cases = vectors["shapes"].as_array().expect("shapes");
    assert_eq!(cases.len(), 78);
    let mut escaped_seen = HashSet::new();
    for case in cases {
        let note = str_field(case, "note");
        let mesedi_shape = str_field(case, "shape");
        let got = shape_of(&case["value"]).unwrap_or_else(|| panic!("{note}: no shape"));
        if has_escaped_text(&case["value"]) {
            let (_, ours) = ESCAPED_SHAPES
                .iter()
                .find(|(theirs, _)| *theirs == mesedi_shape)
                .unwrap_or_else(|| panic!("{note}: escaped keys but not listed"));
            assert!(ours.split('|').any(|o| o == got), "{note}: driftline shape {got}, expected {ours}");
            assert_ne!(shape_hex8(&got), str_field(case, "hex8"), "{note}");
            escaped_seen.insert(mesedi_shape);
        } else {
            assert_eq!(got, mesedi_shape, "{note}");
            assert_eq!(shape_hex8(&got), str_field(case, "hex8"), "{note}");
            assert_eq!(shape::shape_hash(&got), str_field(case, "sha256"), "{note}");
        }
    }
    assert_eq!(escaped_seen.len(), ESCAPED_SHAPES.len(), "every listed difference is exercised");
}

#[test]
fn the_key_collision_pair_gets_two_shapes() {
    let a = shape_of(&json!({"a": 1, "b": 2})).expect("shape");
    let b = shape_of(&json!({"a:number,b": 0})).expect("shape");
    assert_eq!(a, "{a:number,b:number}");
    assert_ne!(a, b, "Mesedi gives both {a}; driftline escapes the second key");
}

#[test]
fn refusals() {
    let vectors = vectors();
    for case in vectors["refusals"].as_array().expect("refusals") {
        let raw = str_field(case, "raw");
        let got = fingerprint(raw.as_bytes(), LARGEST_MAX_BYTES);
        match raw {
            // Deliberate difference: Mesedi refuses numbers beyond float64; a number is a number here.
            "1e400" => assert_eq!(got.shape.as_deref(), Some("number"), "Mesedi refuses {raw}"),
            "[1,1e400]" => assert_eq!(got.shape.as_deref(), Some("[number]"), "Mesedi refuses {raw}"),
            _ => assert_eq!(got.outcome, ShapeOutcome::Unparseable, "{raw:?}"),
        }
    }
}

#[test]
fn generated_deep_nesting_is_too_deep() {
    let vectors = vectors();
    for case in vectors["generated_shapes"].as_array().expect("generated") {
        let depth = case["depth"].as_u64().expect("depth") as usize;
        let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        // Mesedi: a shape at 10,000 and a refusal past it; driftline stops at 128 (DESIGN.md §3).
        assert_eq!(
            fingerprint(text.as_bytes(), LARGEST_MAX_BYTES).outcome,
            ShapeOutcome::TooDeep,
            "depth {depth}"
        );
    }
}

fn ranking_name(ranking: Ranking) -> &'static str {
    match ranking {
        Ranking::Ranked(r) => r.as_str(),
        Ranking::Unchanged => "unchanged",
    }
}

#[test]
fn ranking() {
    let vectors = vectors();
    for case in vectors["ranking"].as_array().expect("ranking") {
        let note = str_field(case, "note");
        let expected_reasons: Vec<&str> =
            case["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect();
        // Ranking Mesedi's own shape strings gives Mesedi's answer.
        let (baseline, current) = (str_field(case, "baseline_shape"), str_field(case, "current_shape"));
        let ranked = rank(baseline, current);
        assert_eq!(ranking_name(ranked.ranking), str_field(case, "kind"), "{note}");
        assert_eq!(ranked.explanations(baseline, current), expected_reasons, "{note}");
        // And so does ranking driftline's shapes of the same values, but for the escaped key.
        if case.get("baseline").is_some() {
            let ours_baseline = shape_of(&case["baseline"]).expect("baseline shape");
            let ours_current = shape_of(&case["current"]).expect("current shape");
            let ranked = rank(&ours_baseline, &ours_current);
            let explanations = ranked.explanations(&ours_baseline, &ours_current);
            if baseline == "{a:b:number}" {
                // Deliberate difference: the escaped key parses, so the change is ranked, not guessed.
                assert_eq!(ranking_name(ranked.ranking), "breaking", "{note}");
                assert_eq!(explanations, ["a:b: removed", "c: added"], "{note}");
            } else {
                assert_eq!(ranking_name(ranked.ranking), str_field(case, "kind"), "{note}");
                assert_eq!(explanations, expected_reasons, "{note}");
            }
        }
    }
}

#[test]
fn decisions() {
    let vectors = vectors();
    let mut checked = 0;
    for case in vectors["decisions"].as_array().expect("decisions") {
        if str_field(case, "signal") != "return_shape" {
            continue; // description and definition pins are tool-list concerns, diffed structurally here
        }
        let note = str_field(case, "note");
        let min_history_calls = case["min_history_calls"].as_u64().expect("min") as u32;
        let thresholds = DetectorThresholds { min_history_calls, ..Default::default() };
        if min_history_calls < 2 {
            // Deliberate difference: Mesedi silently reverts to 10; driftline refuses the setting.
            let err = thresholds.validate().expect_err(note);
            assert!(err.to_string().starts_with("min_history_calls = 1 is out of bounds"), "{err}");
            continue;
        }
        if str_field(case, "tool").is_empty() {
            // Driftline never sees an unnamed tool: the span contract requires a name.
            let schema: Value =
                serde_json::from_str(driftline_schemas::TOOL_CALL_SPAN_JSON_SCHEMA).expect("schema");
            assert_eq!(schema["properties"]["tool"]["minLength"], 1, "{note}");
            continue;
        }
        let mut state = ToolShapeState::default();
        for (shape, count) in case["history_counts"].as_object().expect("counts") {
            for _ in 0..count.as_u64().expect("count") {
                state.observe(observation(shape), &thresholds);
            }
        }
        let fired = state.observe(observation(str_field(case, "current_hash")), &thresholds).is_some();
        assert_eq!(fired, case["fires"].as_bool().expect("fires"), "{note}");
        checked += 1;
    }
    assert_eq!(checked, 7);
}

fn observation(shape: &str) -> shape_drift::Observation<'_> {
    shape_drift::Observation {
        status: driftline_schemas::CallStatus::Success,
        outcome: ShapeOutcome::Fingerprinted,
        shape: Some(shape),
        compact_bytes: Some(shape.len() as u64),
    }
}

/// One firing as the sequence vectors describe it.
#[derive(Debug, PartialEq)]
struct Fire {
    index: usize,
    fingerprint: String,
    kind: String,
    reasons: Vec<String>,
    history: BTreeMap<String, u64>,
}

/// Runs a sequence through ingest's shape step and the detector, as `driftline replay` does.
fn run_sequence(case: &Value, thresholds: &DetectorThresholds) -> (Vec<Fire>, SignalGroups) {
    let tool = str_field(case, "tool_name");
    let mut state = ToolShapeState::default();
    let mut fires = Vec::new();
    let mut groups = SignalGroups::default();
    for (index, call) in case["calls"].as_array().expect("calls").iter().enumerate() {
        let mut span = json!({"span_id": format!("s{index}"), "server": "srv", "tool": tool,
            "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1,
            "status": if call["status"] == "success" { "success" } else { "error" }});
        if let Some(value) = call.get("value") {
            span["return_value"] = value.clone();
        }
        let span: ToolCallSpan = serde_json::from_value(span).expect("span");
        let at = Timestamp::from_millis(index as i64 * 1000).expect("time");
        let record = shape::record_from_span(&span, &driftline_schemas::ProjectName::default_project(), at);
        let history: BTreeMap<String, u64> =
            state.window_counts().into_iter().map(|(s, n)| (shape_hex8(s), u64::from(n))).collect();
        if let Some(firing) = state.observe((&record).into(), thresholds) {
            let position = InputPosition { partition: 0, offset: index as u64 };
            let signal = shape_drift::signal(&record, position, firing);
            groups.add(&signal);
            fires.push(Fire {
                index,
                fingerprint: signal.fingerprint.clone(),
                kind: signal.ranking.as_str().to_owned(),
                reasons: signal.reasons.iter().map(ToString::to_string).collect(),
                history,
            });
        }
    }
    (fires, groups)
}

fn expected_fires(case: &Value) -> Vec<Fire> {
    case["expected"]["fires"]
        .as_array()
        .expect("fires")
        .iter()
        .map(|fire| Fire {
            index: fire["call_index"].as_u64().expect("index") as usize,
            fingerprint: str_field(fire, "fingerprint_key").to_owned(),
            kind: str_field(fire, "kind").to_owned(),
            reasons: fire["reasons"]
                .as_array()
                .expect("reasons")
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            history: fire["history_counts_by_hex8"]
                .as_object()
                .expect("history")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
                .collect(),
        })
        .collect()
}

fn sequence_thresholds(case: &Value) -> DetectorThresholds {
    DetectorThresholds {
        min_history_calls: case["min_history_calls"].as_u64().expect("min") as u32,
        history_window: 100,
        tool_return_value_max_bytes: case["tool_return_value_max_bytes"].as_u64().expect("cap") as u32,
        ..Default::default()
    }
}

#[test]
fn sequences() {
    let vectors = vectors();
    let cases = vectors["sequences"].as_array().expect("sequences");
    assert_eq!(cases.len(), 16);
    for case in cases {
        let name = str_field(case, "name");
        let thresholds = sequence_thresholds(case);
        let fire_indices = |thresholds: &DetectorThresholds| -> Vec<usize> {
            run_sequence(case, thresholds).0.iter().map(|f| f.index).collect()
        };
        match name {
            // Mesedi leaves out the current execution's own calls; driftline has no executions and
            // evaluates every call against the calls before it, so the drifted last call fires.
            "same_execution_is_excluded" => assert_eq!(fire_indices(&thresholds), [10], "{name}"),
            // Mesedi's 100-row window also holds calls without a value (95 of them here), leaving 5
            // usable rows; driftline's window holds conclusive shapes only, so the 10 earlier calls count.
            "null_returns_consume_window" => assert_eq!(fire_indices(&thresholds), [105], "{name}"),
            // Mesedi's window is a fixed 100 rows, so min_history_calls 101 can never be met; driftline
            // refuses a window below min_history_calls, and with one large enough the drift fires.
            "min_history_above_100_never_fires" => {
                let err = thresholds.validate().expect_err("window below min_history_calls");
                assert!(err.to_string().starts_with("history_window = 100 is out of bounds"), "{err}");
                let wide = DetectorThresholds { history_window: 101, ..thresholds };
                assert_eq!(fire_indices(&wide), [150], "{name}");
            }
            // Mesedi's unescaped keys make both values one shape; driftline tells them apart.
            "collision_is_not_drift" => assert_eq!(fire_indices(&thresholds), [10], "{name}"),
            // Everything else, including the sequences whose history ran in one shared execution
            // (weather_lookup, stock_quote, fetch_item: evaluating every call changes nothing there,
            // since the history is uniform), matches Mesedi call for call.
            _ => {
                let (fires, groups) = run_sequence(case, &thresholds);
                assert_eq!(fires, expected_fires(case), "{name}");
                let expected_groups: Vec<(String, u64, u64, u64)> = case["expected"]["failure_groups"]
                    .as_array()
                    .expect("groups")
                    .iter()
                    .map(|g| {
                        let n = |k: &str| g[k].as_u64().expect("number");
                        (
                            str_field(g, "signature").to_owned(),
                            n("first_index"),
                            n("last_index"),
                            n("affected_executions"),
                        )
                    })
                    .collect();
                let mut got_groups: Vec<(String, u64, u64, u64)> = groups
                    .iter()
                    .map(|g| {
                        let signature = format!("{}:{}", g.sample.tool, g.sample.shape_hash);
                        let index = |t: Timestamp| (t.as_millis() / 1000) as u64;
                        (signature, index(g.first_seen), index(g.last_seen), g.occurrences)
                    })
                    .collect();
                got_groups.sort_by_key(|g| g.1);
                assert_eq!(got_groups, expected_groups, "{name}");
            }
        }
    }
}
