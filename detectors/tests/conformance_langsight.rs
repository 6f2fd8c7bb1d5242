//! LangSight's tool-list drift vectors (shared/conformance/langsight_*.json), per the README there.

mod common;

use std::collections::BTreeSet;

use common::{conformance_file, str_field};
use driftline_detectors::tool_drift::{
    definition_hash, diff_tools, normalize_tools, schema_hash, short_hash, BaselinePolicy, RecordContext,
    ServerState, ToolListOutput,
};
use driftline_schemas::{
    Classification, InputPosition, SchemaChange, ServerStatus, SnapshotSource, Timestamp, ToolListSnapshot,
};
use serde_json::{json, Value};

/// The change kinds LangSight knows; "exact" vectors are exact on these, driftline may add others.
const LANGSIGHT_KINDS: &[&str] = &[
    "tool_removed",
    "tool_added",
    "required_param_added",
    "required_param_removed",
    "optional_param_added",
    "param_type_changed",
    "description_changed",
];

fn tools(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// A change reduced to the fields a vector asserts.
fn fields(change: &Value, asserted: &[String]) -> Vec<(String, Value)> {
    asserted
        .iter()
        .filter(|f| !matches!(f.as_str(), "old_value" | "new_value"))
        .map(|f| (f.clone(), change.get(f).cloned().unwrap_or(Value::Null)))
        .collect()
}

fn as_json(change: &SchemaChange) -> Value {
    let mut value = serde_json::to_value(change).expect("serialize");
    value["change_type"] = json!(change.change_type.as_str());
    value["classification"] = json!(change.classification.as_str());
    value
}

/// Rewrites LangSight's expectation where driftline deliberately differs (README): a parameter that
/// stays but flips between required and optional, and a tool renamed with an identical definition.
/// Returns the rewritten changes and whether anything was rewritten.
fn translate(expected: &[Value], old: &[Value], new: &[Value]) -> (Vec<Value>, bool) {
    let property = |list: &[Value], param: &str| {
        list.iter().any(|t| t["inputSchema"]["properties"].get(param).is_some())
    };
    let renamed = {
        let (old, new) = (normalize_tools(old), normalize_tools(new));
        let gone: Vec<_> = old.iter().filter(|t| !new.iter().any(|n| n.name == t.name)).collect();
        let came: Vec<_> = new.iter().filter(|t| !old.iter().any(|o| o.name == t.name)).collect();
        gone.len() == 1 && came.len() == 1 && definition_hash(gone[0]) == definition_hash(came[0])
    };
    let mut changed = false;
    let mut out = Vec::new();
    for change in expected {
        let kind = str_field(change, "change_type");
        let param = change["param_name"].as_str().unwrap_or_default();
        let mut change = change.clone();
        match kind {
            "required_param_removed" if property(new, param) => {
                change["change_type"] = json!("param_became_optional");
                change["classification"] = json!("COMPATIBLE");
            }
            "required_param_added" if property(old, param) => {
                change["change_type"] = json!("param_became_required");
            }
            "tool_removed" if renamed => change["change_type"] = json!("tool_renamed"),
            "tool_added" if renamed => {
                changed = true;
                continue; // folded into tool_renamed
            }
            _ => {
                out.push(change);
                continue;
            }
        }
        changed = true;
        out.push(change);
    }
    (out, changed)
}

/// The vectors whose expectation `translate` rewrites, each a difference the README names.
const DELIBERATE_DIFFERENCES: &[&str] =
    &["required_param_removed_is_breaking", "tool_removed_and_added_simultaneously"];

fn snapshot(tools: Vec<Value>) -> ToolListSnapshot {
    ToolListSnapshot {
        schema_version: 1,
        project: "default".parse().expect("a valid name"),
        server: "pg".parse().expect("a valid name"),
        captured_at: Timestamp::from_millis(0).expect("time"),
        source: SnapshotSource::Probe,
        latency_ms: None,
        tools,
        surfaces: None,
        release: None,
    }
}

fn context(offset: u64) -> RecordContext<'static> {
    RecordContext {
        project: "default",
        server: "pg",
        position: InputPosition { partition: 0, offset },
        at: Timestamp::from_millis(offset as i64).expect("time"),
    }
}

#[test]
fn drift_vectors() {
    let vectors = conformance_file("langsight_drift_vectors.json");
    let cases = vectors.as_array().expect("cases");
    assert_eq!(cases.len(), 31);
    let mut translated = Vec::new();
    for case in cases {
        let name = str_field(case, "name");
        let (old, new) = (tools(&case["old_tools"]), tools(&case["new_tools"]));
        let changes = diff_tools(&old, &new);
        let got: Vec<Value> = changes.iter().map(as_json).collect();
        let asserted: Vec<String> = case["asserted_fields"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f.as_str().map(String::from)).collect())
            .unwrap_or_default();
        let asserted_kinds: Vec<&str> = case["asserted_kinds"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let (expected, rewritten) =
            translate(case["expected_changes"].as_array().map(Vec::as_slice).unwrap_or(&[]), &old, &new);
        if rewritten {
            translated.push(name);
        }
        let kinds_of = |list: &[Value]| -> Vec<String> {
            list.iter().map(|c| str_field(c, "change_type").to_owned()).collect()
        };
        let project = |list: &[Value]| -> Vec<Vec<(String, Value)>> {
            let mut projected: Vec<_> = list.iter().map(|c| fields(c, &asserted)).collect();
            projected.sort_by_key(|f| format!("{f:?}"));
            projected
        };
        let has_breaking = changes.iter().any(|c| c.classification == Classification::Breaking);
        match str_field(case, "assertion") {
            "exact" => {
                let ours: Vec<Value> = got
                    .iter()
                    .filter(|c| {
                        let kind = str_field(c, "change_type");
                        LANGSIGHT_KINDS.contains(&kind)
                            || expected.iter().any(|e| str_field(e, "change_type") == kind)
                    })
                    .cloned()
                    .collect();
                assert_eq!(project(&ours), project(&expected), "{name}");
                assert!(got.iter().all(|c| c["change_type"] != "schema_changed"), "{name}: {got:?}");
            }
            "exactly_one_of_kind" => {
                let kinds: Vec<String> = kinds_of(&expected);
                let ours: Vec<Value> = got
                    .iter()
                    .filter(|c| kinds.contains(&str_field(c, "change_type").to_owned()))
                    .cloned()
                    .collect();
                assert_eq!(project(&ours), project(&expected), "{name}");
            }
            "contains" => {
                let ours = project(&got);
                for want in project(&expected) {
                    assert!(ours.contains(&want), "{name}: missing {want:?} in {ours:?}");
                }
                for absent in case["expected_absent"].as_array().into_iter().flatten() {
                    assert!(!ours.contains(&fields(absent, &asserted)), "{name}: unexpected {absent}");
                }
            }
            "none_of_kind" => {
                assert!(
                    got.iter().all(|c| !asserted_kinds.contains(&str_field(c, "change_type"))),
                    "{name}: {got:?}"
                );
            }
            "kinds_contain" => {
                let ours: BTreeSet<String> = kinds_of(&got).into_iter().collect();
                for kind in kinds_of(&expected) {
                    assert!(ours.contains(&kind), "{name}: no {kind} in {ours:?}");
                }
            }
            "has_breaking_only" | "any_breaking" | "none_breaking" => {
                assert_eq!(has_breaking, case["expected_has_breaking"].as_bool().expect("flag"), "{name}");
            }
            "all_changes_on_tool" => {
                let only = str_field(case, "only_tool");
                assert!(
                    !changes.is_empty() && changes.iter().all(|c| c.tool_name == only),
                    "{name}: {got:?}"
                );
            }
            "non_empty" => assert!(!changes.is_empty(), "{name}"),
            "hash_equal" => {
                let equal = schema_hash(&old) == schema_hash(&new);
                assert_eq!(equal, case["expected_hash_equal"].as_bool().expect("flag"), "{name}");
                assert_eq!(equal, changes.is_empty(), "{name}: a changed hash comes with changes");
            }
            "side_effects_only" | "status_only" => {
                // LangSight's tracker saves a snapshot and a drift event; driftline's lifecycle emits
                // one drift event whose hashes are the baseline's and the new list's.
                let mut state = ServerState::default();
                state.observe(&snapshot(old.clone()), context(0), BaselinePolicy::Manual);
                let outputs = state.observe(&snapshot(new.clone()), context(1), BaselinePolicy::Manual);
                let events: Vec<_> = outputs
                    .iter()
                    .filter_map(|o| match o {
                        ToolListOutput::DriftEvent(e) => Some(e),
                        _ => None,
                    })
                    .collect();
                let drifted = schema_hash(&old) != schema_hash(&new);
                assert_eq!(events.len(), usize::from(drifted), "{name}");
                if let Some(event) = events.first() {
                    assert_eq!(event.server_name, "pg");
                    assert_eq!(event.previous_hash, short_hash(&schema_hash(&old)), "{name}");
                    assert_eq!(event.current_hash, short_hash(&schema_hash(&new)), "{name}");
                    let names: BTreeSet<String> = event.current_tools.names().flatten().collect();
                    let expected_names: BTreeSet<String> =
                        new.iter().filter_map(|t| t["name"].as_str()).map(str::to_owned).collect();
                    assert_eq!(names, expected_names, "{name}");
                }
                if let Some(status) = case["expected_status"].as_str() {
                    let want = if status == "up" { ServerStatus::Up } else { ServerStatus::Degraded };
                    assert_eq!(state.status(), want, "{name}");
                }
            }
            other => panic!("{name}: unknown assertion {other}"),
        }
        if case.get("expected_drifted").is_some() {
            assert!(!changes.is_empty(), "{name}: drifted");
        }
    }
    assert_eq!(translated, DELIBERATE_DIFFERENCES);
}

/// Cases LangSight's tests do not cover, with what driftline reports instead (LangSight misses most of
/// them, and crashes on a union `type`). One line per change: `CLASSIFICATION change_type tool path`.
const EDGE_EXPECTATIONS: &[(&str, &[&str])] = &[
    ("rename_tool", &["BREAKING tool_renamed search_web "]),
    ("optional_to_required_flip", &["BREAKING param_became_required search n"]),
    ("required_to_optional_flip", &["COMPATIBLE param_became_optional search n"]),
    ("optional_param_removed", &["WARNING param_removed search n"]),
    ("required_param_removed_entirely", &["BREAKING required_param_removed search n"]),
    ("required_param_added_not_in_properties", &["BREAKING required_param_added search zz"]),
    ("type_integer_to_number_widening", &["COMPATIBLE param_type_widened search n"]),
    ("type_string_to_union_string_null", &["COMPATIBLE param_type_widened search q"]),
    ("type_union_to_union_reordered", &[]),
    ("type_string_to_anyOf_no_type", &["COMPATIBLE param_type_widened search q"]),
    ("array_items_type_changed", &["BREAKING param_type_changed search ids[]"]),
    ("enum_value_removed", &["BREAKING enum_value_removed search fmt"]),
    ("default_changed", &["WARNING default_changed search n"]),
    ("nested_object_property_type_changed", &["BREAKING param_type_changed search f.a"]),
    ("nested_required_added", &["BREAKING param_became_required search f.a"]),
    ("param_description_changed", &["WARNING param_description_changed search q"]),
    // Deliberate difference: LangSight reports `description_changed` for a trailing space; driftline compares
    // model-visible text without its layout (indentation, trailing spaces, line endings), as a reviewer reads it.
    ("tool_description_trailing_whitespace", &[]),
    ("tool_description_null_to_empty", &["WARNING description_changed search "]),
    ("inputSchema_missing_to_empty_object", &[]),
    ("inputSchema_missing_to_object_with_required", &["BREAKING required_param_added search q"]),
    ("required_array_reordered", &[]),
    ("schema_key_order_changed", &[]),
    ("tools_list_reordered", &[]),
    ("additionalProperties_false_added", &["BREAKING constraint_tightened search "]),
    ("title_or_annotations_outside_schema_ignored", &["WARNING title_changed search "]),
];

#[test]
fn edge_behaviour() {
    let vectors = conformance_file("langsight_drift_edge_behaviour.json");
    let cases = vectors["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), EDGE_EXPECTATIONS.len());
    for case in cases {
        let name = str_field(case, "name");
        let (old, new) = (tools(&case["old_tools"]), tools(&case["new_tools"]));
        let changes = diff_tools(&old, &new);
        let got: Vec<String> = changes
            .iter()
            .map(|c| format!("{} {} {} {}", c.classification, c.change_type, c.tool_name, c.path))
            .collect();
        let (_, expected) = EDGE_EXPECTATIONS
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no expectation for {name}"));
        assert_eq!(got, *expected, "{name}");
        // Whatever LangSight's hash did, driftline's changes exactly when something is reported.
        assert_eq!(schema_hash(&old) != schema_hash(&new), !changes.is_empty(), "{name}");
    }
    // Reordering `required` is no change, with an unchanged hash.
    let reordered = cases.iter().find(|c| c["name"] == "required_array_reordered").expect("case");
    assert_eq!(schema_hash(&tools(&reordered["old_tools"])), schema_hash(&tools(&reordered["new_tools"])));
}

/// A tool list standing for one of LangSight's opaque hash labels.
fn list_for(label: &str) -> Vec<Value> {
    vec![json!({"name": label, "inputSchema": {}})]
}

#[test]
fn tracker_sequences() {
    let vectors = conformance_file("langsight_tracker_sequences.json");
    let sequences = vectors["sequences"].as_array().expect("sequences");
    assert_eq!(sequences.len(), 15);
    for sequence in sequences {
        let name = str_field(sequence, "name");
        let expect = &sequence["expect"];
        if let Some(checks) = sequence["checks"].as_array() {
            // Checks of one server over time: statuses must match LangSight's under the auto policy
            // (LangSight moves its baseline itself); under the default manual policy the server stays
            // DEGRADED until an operator accepts.
            for policy in [BaselinePolicy::Auto, BaselinePolicy::Manual] {
                let mut state = ServerState::default();
                let mut statuses = Vec::new();
                for (offset, check) in checks.iter().enumerate() {
                    match check.as_array() {
                        Some(list) => {
                            state.observe(&snapshot(list.clone()), context(offset as u64), policy);
                        }
                        None => state.probe_failed(check.as_str().unwrap_or("probe failed")),
                    }
                    statuses.push(format!("{:?}", state.status()).to_lowercase());
                }
                let want: Vec<String> = match expect["statuses"].as_array() {
                    Some(s) => s.iter().filter_map(Value::as_str).map(String::from).collect(),
                    None => vec!["up".to_owned(); checks.len()], // history_grows: every run up
                };
                let want = match (policy, name) {
                    (BaselinePolicy::Manual, "pipeline_new_baseline_after_drift") => {
                        vec!["up".to_owned(), "degraded".into(), "degraded".into()]
                    }
                    _ => want,
                };
                assert_eq!(statuses, want, "{name} {policy:?}");
            }
            continue;
        }
        if let Some(results) = sequence["results"].as_array() {
            // Alert engine: one alert per drift, none for a repeat of the same hash, none without drift.
            let mut state = ServerState::default();
            state.observe(&snapshot(list_for("abc")), context(0), BaselinePolicy::Manual);
            let mut events = 0;
            for (offset, result) in results.iter().enumerate() {
                let outputs = match result.get("schema_hash").and_then(Value::as_str) {
                    Some(hash) => state.observe(
                        &snapshot(list_for(hash)),
                        context(offset as u64 + 1),
                        BaselinePolicy::Manual,
                    ),
                    None => {
                        state.probe_failed(str_field(result, "error"));
                        Vec::new()
                    }
                };
                events += outputs.iter().filter(|o| matches!(o, ToolListOutput::DriftEvent(_))).count();
            }
            let want = match name {
                "no_drift_alert_without_drift_text" => 0,
                _ => 1,
            };
            assert_eq!(events, want, "{name}");
            continue;
        }
        // Stored hash vs current hash, with opaque labels standing for tool lists.
        let mut state = ServerState::default();
        let mut outputs = Vec::new();
        if let Some(stored) = sequence["stored_hash"].as_str() {
            state.observe(&snapshot(list_for(stored)), context(0), BaselinePolicy::Manual);
        }
        let current = match sequence["current_tools"].as_array() {
            Some(list) => list.clone(),
            None => list_for(str_field(sequence, "current_hash")),
        };
        outputs.extend(state.observe(&snapshot(current), context(1), BaselinePolicy::Manual));
        let event = outputs.iter().find_map(|o| match o {
            ToolListOutput::DriftEvent(e) => Some(e),
            _ => None,
        });
        let drifted = expect["drifted"].as_bool().expect("drifted");
        assert_eq!(event.is_some(), drifted, "{name}");
        if sequence["stored_hash"].is_null() {
            assert!(matches!(outputs.first(), Some(ToolListOutput::BaselineEstablished { .. })), "{name}");
        }
        if let Some(event) = event {
            // LangSight can report a drift with no changes (it had no tools to diff); driftline always
            // has both lists, so every event names what changed.
            assert!(!event.changes.is_empty(), "{name}");
        }
        let want = if drifted { ServerStatus::Degraded } else { ServerStatus::Up };
        assert_eq!(state.status(), want, "{name}");
    }
}
