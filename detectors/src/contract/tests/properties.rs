//! Properties of the check and the state.

use super::*;

/// Any JSON value a fingerprint reads as a plain shape: no `__type__` keys, no `"<truncated>"`.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(json_key(), inner, 0..5)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// Keys with the characters a shape escapes.
fn json_key() -> impl Strategy<Value = String> {
    "[ab:,{}<>\\[\\]\"\\\\. \u{1}\u{85}]{0,3}"
}

/// A schema declaring exactly the structure of `value`: every key required, no other key allowed.
fn schema_of(value: &Value) -> Value {
    match value {
        Value::Null => json!({"type": "null"}),
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(number) if number.is_i64() || number.is_u64() => json!({"type": "integer"}),
        Value::Number(_) => json!({"type": "number"}),
        Value::String(_) => json!({"type": "string"}),
        Value::Array(items) => match items.first() {
            Some(first) => json!({"type": "array", "items": schema_of(first)}),
            None => json!({"type": "array"}),
        },
        Value::Object(fields) => json!({
            "type": "object",
            "properties": fields.iter().map(|(key, value)| (key.clone(), schema_of(value))).collect::<Map<_, _>>(),
            "required": fields.keys().cloned().collect::<Vec<_>>(),
            "additionalProperties": false,
        }),
    }
}

proptest! {
    #[test]
    fn contract_a_value_meets_the_schema_of_its_own_structure(value in json_value()) {
        let shape = shape_of(&value.to_string());
        prop_assert_eq!(crate::contract::check(&schema_of(&value), &shape), Verdict::Admitted, "shape {}", shape);
    }

    #[test]
    fn contract_a_missing_required_key_is_named(
        fields in prop::collection::btree_map(json_key(), json_value(), 1..6),
        pick in any::<prop::sample::Index>(),
    ) {
        let value = Value::Object(fields.into_iter().collect());
        let schema = schema_of(&value);
        let mut without = value.clone();
        let keys: Vec<String> = value.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
        let key = pick.get(&keys).clone();
        if let Value::Object(fields) = &mut without {
            fields.remove(&key);
        }
        let verdict = crate::contract::check(&schema, &shape_of(&without.to_string()));
        let expected = vec![ShapeReason {
            path: key.clone(),
            change: ReasonChange::Removed,
            before: Some(schema["properties"][&key]["type"].as_str().unwrap_or("?").to_owned()),
            after: None,
            detail: Some(MISSING_REQUIRED.to_owned()),
        }];
        prop_assert_eq!(verdict, Verdict::Mismatch(expected));
    }
}

/// The last mismatch keeps ten reasons, each text clipped, so a tool's contract state stays within
/// [`ToolContractState::worst_case_bytes`] whatever the returns (declarations aside: the list budget
/// bounds them).
#[test]
fn contract_state_stays_within_its_worst_case() {
    for max_bytes in [64u32, 8192, 65_536] {
        let limits = DetectorThresholds { tool_return_value_max_bytes: max_bytes, ..thresholds(2, 100) };
        let mut state = ToolContractState::default();
        let strict = json!({"type": "object", "additionalProperties": false});
        assert!(state.declare(&declaration(1, Some(strict))));
        // Many long keys, none allowed: as many reasons as the check gives, each with a long path.
        let key_bytes = (max_bytes as usize / 40).max(1);
        let value: Map<String, Value> =
            (0..30).map(|i| (format!("{i:02}{}", "k".repeat(key_bytes)), json!(1))).collect();
        let text = serde_json::to_string(&Value::Object(value)).expect("json");
        let shape = fingerprint(text.as_bytes(), 1 << 20).shape.expect("a shape");
        for call in 0..250 {
            let observation = Observation {
                status: CallStatus::Success,
                outcome: ShapeOutcome::Fingerprinted,
                shape: Some(&shape),
                compact_bytes: Some(text.len().min(max_bytes as usize) as u64),
            };
            state.observe(observation, &"s".repeat(256), at(call), &limits);
        }
        let last = view(&state, &limits).last_mismatch.expect("mismatches");
        assert_eq!(last.reasons.len(), LAST_MISMATCH_REASONS.min(30));
        assert!(
            last.reasons.iter().all(|r| r.path.len() <= REASON_TEXT_BYTES),
            "{:?}",
            last.reasons[0].path.len()
        );
        let held = state.size_bytes();
        assert!(held as u64 <= ToolContractState::worst_case_bytes(&limits), "{max_bytes}: {held}");
    }
}
