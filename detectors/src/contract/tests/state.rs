//! The per-tool state and its firing rule: two thirds of the window, re-arming, declarations in order.

use super::*;

/// `A` is admitted and `M` mismatched by this schema.
fn schema_a() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})
}

fn declared(sequence: u64) -> ToolContractState {
    let mut state = ToolContractState::default();
    assert!(state.declare(&declaration(sequence, Some(schema_a()))));
    state
}

/// One call written as a letter: `A` admitted, `M` mismatched, `?` absent, `!` failed, `O` oversized,
/// `U` an unreadable shape.
fn observation(call: char) -> Observation<'static> {
    let (status, outcome, shape, compact_bytes) = match call {
        'A' => (CallStatus::Success, ShapeOutcome::Fingerprinted, Some("{a:number}"), Some(7)),
        'M' => (CallStatus::Success, ShapeOutcome::Fingerprinted, Some("{a:string}"), Some(9)),
        '?' => (CallStatus::Success, ShapeOutcome::Absent, None, None),
        '!' => (CallStatus::Error, ShapeOutcome::NotSuccess, None, None),
        'O' => (CallStatus::Success, ShapeOutcome::Fingerprinted, Some("{a:string}"), Some(1 << 20)),
        'U' => (CallStatus::Success, ShapeOutcome::Fingerprinted, Some("{a:"), Some(9)),
        other => panic!("no call {other:?}"),
    };
    Observation { status, outcome, shape, compact_bytes }
}

/// Feeds the calls of `script` and returns the indices that fired.
fn run(state: &mut ToolContractState, script: &str, thresholds: &DetectorThresholds) -> Vec<usize> {
    let mut fired = Vec::new();
    for (index, call) in script.chars().enumerate() {
        let span = format!("span-{index}");
        if state.observe(observation(call), &span, at(index as i64), thresholds).is_some() {
            fired.push(index);
        }
    }
    fired
}

#[test]
fn contract_fires_once_when_mismatches_reach_two_thirds() {
    let limits = thresholds(10, 100);
    let mut state = declared(1);
    let script = format!("{}{}", "A".repeat(6), "M".repeat(12));
    assert_eq!(run(&mut state, &script, &limits), vec![17]);
    let contract = view(&state, &limits);
    assert_eq!((contract.checked, contract.mismatched, contract.inconclusive), (18, 12, 0));
    assert_eq!((contract.window_size, contract.window_mismatches), (18, 12));
    assert_eq!(contract.state, ContractState::Mismatch);
    let last = contract.last_mismatch.unwrap_or_else(|| panic!("a last mismatch"));
    assert_eq!((last.shape.as_str(), last.span_id.as_str(), last.at), ("{a:string}", "span-17", at(17)));
    assert_eq!(last.reasons[0].to_string(), "a: declared number, returned string");
    // More mismatches: no more firings.
    assert_eq!(run(&mut state, &"M".repeat(30), &limits), Vec::<usize>::new());
}

#[test]
fn contract_the_firing_carries_the_window() {
    let limits = thresholds(3, 100);
    let mut state = declared(1);
    run(&mut state, "AM", &limits);
    let firing = state.observe(observation('M'), "span-x", at(3), &limits);
    assert_eq!(
        firing,
        Some(MismatchFiring {
            shape: "{a:string}".into(),
            reasons: reasons(schema_a(), r#"{"a":"x"}"#),
            mismatches: 2,
            window_size: 3,
        })
    );
}

#[test]
fn contract_exactly_two_thirds_fires() {
    let limits = thresholds(3, 100);
    assert_eq!(run(&mut declared(1), "AMM", &limits), vec![2]);
    assert_eq!(run(&mut declared(1), "AAMMMM", &limits), vec![5]);
    // Not enough calls yet, or an admitted call: no firing.
    assert_eq!(run(&mut declared(1), "MM", &limits), Vec::<usize>::new());
    assert_eq!(run(&mut declared(1), "MMMA", &thresholds(4, 100)), Vec::<usize>::new());
}

#[test]
fn contract_rearms_when_mismatches_stop_dominating() {
    let limits = thresholds(3, 3);
    assert_eq!(run(&mut declared(1), "MMMAAMM", &limits), vec![2, 6]);
    // Still dominating after one admitted call: stays disarmed.
    assert_eq!(run(&mut declared(1), "MMMAMM", &limits), vec![2]);
    assert_eq!(run(&mut declared(1), &"M".repeat(20), &limits), vec![2]);
}

#[test]
fn contract_inconclusive_calls_do_not_enter_the_window() {
    let limits = thresholds(3, 100);
    let mut state = declared(1);
    assert_eq!(run(&mut state, "M?M!OUM", &limits), vec![6]);
    let contract = view(&state, &limits);
    // `!` did not succeed: not counted at all; `?`, `O` (oversized for 8192) and `U` are inconclusive.
    assert_eq!((contract.checked, contract.mismatched, contract.inconclusive), (3, 3, 3));
    assert_eq!(contract.window_size, 3);
    // A check that cannot conclude counts as inconclusive too.
    let mut defs = Map::new();
    for level in 0..40 {
        let next = format!("#/$defs/L{}", level + 1);
        defs.insert(format!("L{level}"), json!({"anyOf": [{"$ref": next}, {"$ref": next}]}));
    }
    defs.insert("L40".into(), json!({"type": "string"}));
    let mut state = ToolContractState::default();
    state.declare(&declaration(1, Some(json!({"$ref": "#/$defs/L0", "$defs": defs}))));
    assert_eq!(run(&mut state, "AAA", &limits), Vec::<usize>::new());
    let contract = view(&state, &limits);
    assert_eq!((contract.checked, contract.inconclusive, contract.window_size), (0, 3, 0));
}

#[test]
fn contract_nothing_is_checked_without_a_declaration() {
    let limits = thresholds(3, 100);
    let mut state = ToolContractState::default();
    assert_eq!(run(&mut state, "MMMMM", &limits), Vec::<usize>::new());
    assert_eq!(state, ToolContractState::default());
    assert_eq!(state.view(&limits), None);
    assert!(state.declared().is_none());
}

#[test]
fn contract_an_old_declaration_changes_nothing() {
    let limits = thresholds(3, 100);
    let mut state = declared(5);
    run(&mut state, "AMM", &limits);
    let before = state.clone();
    assert!(!state.declare(&declaration(5, Some(json!(true)))));
    assert!(!state.declare(&declaration(4, None)));
    assert_eq!(state, before);
    assert_eq!(state.declared().map(|d| d.sequence), Some(5));
}

#[test]
fn contract_a_new_declaration_resets_and_rearms() {
    let limits = thresholds(3, 100);
    let mut state = declared(5);
    assert_eq!(run(&mut state, "AMM", &limits), vec![2]);
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    assert!(state.declare(&declaration(6, Some(schema.clone()))));
    let declared = state.declared().cloned().unwrap_or_else(|| panic!("declared"));
    assert_eq!((declared.schema, declared.sequence), (schema, 6));
    let contract = view(&state, &limits);
    assert_eq!((contract.checked, contract.mismatched, contract.window_size), (0, 0, 0));
    assert_eq!((contract.state, contract.last_mismatch), (ContractState::Priming, None));
    // Under the new declaration `A` is the mismatch, and it fires again.
    assert_eq!(run(&mut state, "AAA", &limits), vec![2]);
}

#[test]
fn contract_the_same_schema_again_keeps_what_was_learnt() {
    let limits = thresholds(3, 100);
    let mut state = declared(5);
    assert_eq!(run(&mut state, "AMM", &limits), vec![2]);
    assert!(state.declare(&declaration(9, Some(schema_a()))));
    assert_eq!(state.declared().map(|d| d.sequence), Some(9));
    assert_eq!(view(&state, &limits).checked, 3);
    // Still disarmed: the same mismatch against the same declaration fires no second signal.
    assert_eq!(run(&mut state, "M", &limits), Vec::<usize>::new());
    assert!(!state.declare(&declaration(8, Some(json!(false)))));
}

#[test]
fn contract_withdrawal_stops_checking() {
    let limits = thresholds(3, 100);
    let mut state = declared(5);
    run(&mut state, "AMM", &limits);
    assert!(state.declare(&declaration(6, None)));
    assert!(state.declared().is_none());
    assert_eq!(state.view(&limits), None);
    let withdrawn = state.clone();
    assert_eq!(run(&mut state, "MMMM", &limits), Vec::<usize>::new());
    assert_eq!(state, withdrawn);
    // A replay of the withdrawn declaration stays old.
    assert!(!state.declare(&declaration(5, Some(schema_a()))));
    assert!(state.declared().is_none());
    assert!(state.declare(&declaration(7, Some(schema_a()))));
    assert_eq!(run(&mut state, "AMM", &limits), vec![2]);
}

#[test]
fn contract_a_declaration_without_its_hash_gets_one() {
    let mut declaration = declaration(1, Some(schema_a()));
    let expected = declaration.schema_hash.take();
    let mut state = ToolContractState::default();
    state.declare(&declaration);
    assert_eq!(state.declared().map(|d| d.hash.clone()), expected);
}

#[test]
fn contract_view_reads_the_window() {
    let limits = thresholds(4, 100);
    let mut state = declared(1);
    run(&mut state, "AMA", &limits);
    assert_eq!(view(&state, &limits).state, ContractState::Priming);
    run(&mut state, "A", &limits);
    assert_eq!(view(&state, &limits).state, ContractState::Agrees);
    let contract = view(&state, &limits);
    assert_eq!(contract.declared_schema, schema_a());
    assert_eq!(contract.declared_hash, shape_hex8(&canonical_json(&schema_a())));
    assert_eq!(contract.declared_at, at(0));
    run(&mut state, "MMMM", &limits);
    // 5 of 8: not yet two thirds.
    assert_eq!(view(&state, &limits).state, ContractState::Agrees);
    run(&mut state, "M", &limits);
    assert_eq!(view(&state, &limits).state, ContractState::Mismatch);
    // A smaller window reads only its newest calls.
    let smaller = thresholds(4, 4);
    assert_eq!((view(&state, &smaller).window_size, view(&state, &smaller).window_mismatches), (4, 4));
}

#[test]
fn contract_the_window_slides_and_shrinks() {
    let limits = thresholds(3, 10);
    let mut state = declared(1);
    run(&mut state, &format!("{}{}", "M".repeat(10), "A".repeat(6)), &limits);
    let contract = view(&state, &limits);
    assert_eq!((contract.window_size, contract.window_mismatches), (10, 4));
    assert_eq!((contract.checked, contract.mismatched), (16, 10));
    state.shrink_to(4);
    assert_eq!((view(&state, &limits).window_size, view(&state, &limits).window_mismatches), (4, 0));
    state.shrink_to(0);
    assert_eq!(view(&state, &limits).window_size, 0);
    // A smaller history_window takes effect at the next call.
    run(&mut state, "MMMMMM", &limits);
    run(&mut state, "M", &thresholds(3, 5));
    assert_eq!(view(&state, &limits).window_size, 5);
}

#[test]
fn contract_state_round_trips_and_stays_small() {
    let limits = thresholds(10, 100);
    let mut state = declared(3);
    let script: String = (0..100).map(|i| if i % 3 == 0 { 'M' } else { 'A' }).collect();
    run(&mut state, &script, &limits);
    let text = serde_json::to_string(&state).expect("serialize");
    let schema = serde_json::to_string(&schema_a()).expect("serialize");
    assert!(
        text.len() - schema.len() < 2048,
        "{} bytes besides the schema: {text}",
        text.len() - schema.len()
    );
    assert!(text.contains(r#""window":"1001001"#), "{text}");
    let mut back: ToolContractState = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, state);
    // The compiled declaration is rebuilt on the first call after reading the state back.
    let more = "M".repeat(49);
    assert_eq!(run(&mut back, &more, &limits), run(&mut state, &more, &limits));
    assert_eq!(back, state);
    assert_eq!(
        serde_json::from_str::<ToolContractState>("{}").expect("deserialize"),
        ToolContractState::default()
    );
    assert!(serde_json::from_str::<ToolContractState>(r#"{"window":"01x"}"#).is_err());
}

#[test]
fn contract_signal_is_addressed_deterministically() {
    let record = ToolCallRecord {
        schema_version: 1,
        project: "p".parse().expect("a valid name"),
        span_id: "span-9".into(),
        trace_id: None,
        session_id: None,
        agent_name: None,
        server: "srv".parse().expect("a valid name"),
        tool: "weather".parse().expect("a valid name"),
        started_at: at(0),
        duration_ms: 1.0,
        status: CallStatus::Success,
        error: None,
        ingested_at: at(1),
        shape: Some("{temp:string}".into()),
        shape_hash: Some(shape_hex8("{temp:string}")),
        compact_bytes: Some(14),
        shape_outcome: ShapeOutcome::Fingerprinted,
        argument_shape: None,
    };
    let mut state = ToolContractState::default();
    let weather: Value = serde_json::from_str(WEATHER).expect("schema");
    state.declare(&declaration(1, Some(weather.clone())));
    let limits = thresholds(2, 10);
    let mut firing = None;
    for second in 0..2 {
        firing = state.observe(Observation::from(&record), "span-9", at(second), &limits);
    }
    let firing = firing.unwrap_or_else(|| panic!("fires"));
    let declared = state.declared().cloned().unwrap_or_else(|| panic!("declared"));
    let position = InputPosition { partition: 0, offset: 7 };
    let signal = signal(&record, position, firing.clone(), &declared);
    assert_eq!(signal, super::signal(&record, position, firing, &declared));
    assert!(signal.id.starts_with("mismatch-"), "{}", signal.id);
    assert_eq!(signal.kind, SignalKind::DeclaredOutputMismatch);
    assert_eq!(
        signal.fingerprint,
        format!("declared_output_mismatch:weather:{}", shape_hex8("{temp:string}"))
    );
    assert_eq!(
        (signal.shape.as_str(), signal.shape_hash.clone()),
        ("{temp:string}", shape_hex8("{temp:string}"))
    );
    assert_eq!(signal.baseline_shape, canonical_json(&weather));
    assert_eq!(signal.baseline_hash, declared.hash);
    assert_eq!((signal.baseline_count, signal.window_size), (0, 2));
    assert_eq!(signal.ranking, ShapeRanking::Breaking);
    assert_eq!(signal.detected_at, at(1));
    assert_eq!(signal.call_started_at, Some(at(0)));
    assert_eq!(signal.span_id, "span-9");
    let explained: Vec<String> = signal.reasons.iter().map(ToString::to_string).collect();
    assert_eq!(explained, [format!("temp_c: {MISSING_REQUIRED}"), format!("temp: {NOT_ALLOWED}")]);
}

#[test]
fn contract_agrees_with_the_observed_shape() {
    let declared = Declared {
        schema: serde_json::from_str(WEATHER).expect("schema"),
        hash: "00000000".into(),
        declared_at: at(0),
        sequence: 1,
    };
    assert_eq!(agrees(&declared, "{temp_c:number}"), (Some(true), Vec::new()));
    let (agreed, why) = agrees(&declared, "{temp:string}");
    assert_eq!((agreed, why.len()), (Some(false), 2));
    assert_eq!(agrees(&declared, "{temp_c:"), (None, Vec::new()));
}
