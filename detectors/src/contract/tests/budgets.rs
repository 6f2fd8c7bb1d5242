//! Budgets: hostile schemas and values stop at their budget and are inconclusive, never slow.

use super::*;

fn quickly(schema: &Value, value: &str) -> Verdict {
    let compiled = CompiledOutput::new(schema);
    let shape = shape_of(value);
    let started = Instant::now();
    let verdict = compiled.check(&shape);
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    verdict
}

#[test]
fn contract_budget_stops_an_exponential_schema() {
    // Each level offers two branches that both lead to the next: 2^40 paths to a string.
    let mut defs = Map::new();
    for level in 0..40 {
        let next = format!("#/$defs/L{}", level + 1);
        defs.insert(format!("L{level}"), json!({"anyOf": [{"$ref": next}, {"$ref": next}]}));
    }
    defs.insert("L40".into(), json!({"type": "string"}));
    let schema = json!({"$ref": "#/$defs/L0", "$defs": defs});
    assert_eq!(quickly(&schema, "1"), Verdict::Inconclusive);
    assert_eq!(quickly(&schema, r#""x""#), Verdict::Admitted);
    // The same fan-out under properties, applied to every key of a wide object.
    let wide = json!({"additionalProperties": {"$ref": "#/$defs/L0"}, "$defs": schema["$defs"]});
    let value: Map<String, Value> = (0..1000).map(|i| (format!("k{i}"), json!(1))).collect();
    assert_eq!(quickly(&wide, &Value::Object(value).to_string()), Verdict::Inconclusive);
}

#[test]
fn contract_budget_stops_a_long_chain_of_references() {
    // Each definition only points at the next, 10,000 deep: nothing descends into the value.
    let mut defs = Map::new();
    for level in 0..10_000 {
        defs.insert(format!("L{level}"), json!({"$ref": format!("#/$defs/L{}", level + 1)}));
    }
    defs.insert("L10000".into(), json!({"type": "string"}));
    let schema = json!({"$ref": "#/$defs/L0", "$defs": defs});
    assert_eq!(quickly(&schema, "1"), Verdict::Inconclusive);
    // The same through one-branch anyOfs.
    let mut defs = Map::new();
    for level in 0..10_000 {
        defs.insert(format!("L{level}"), json!({"anyOf": [{"$ref": format!("#/$defs/L{}", level + 1)}]}));
    }
    defs.insert("L10000".into(), json!({"type": "string"}));
    let schema = json!({"$ref": "#/$defs/L0", "$defs": defs});
    assert_eq!(quickly(&schema, "1"), Verdict::Inconclusive);
}

#[test]
fn contract_a_wide_value_costs_no_budget_where_no_rule_applies() {
    let value: Map<String, Value> = (0..(STEP_BUDGET + 10)).map(|i| (format!("k{i}"), json!(1))).collect();
    // Wider than any cap allows, to be sure the keys alone would exceed the budget.
    let shape = fingerprint(Value::Object(value).to_string().as_bytes(), u64::MAX).shape.unwrap_or_default();
    let started = Instant::now();
    assert_eq!(
        crate::contract::check(&json!({"type": "object", "required": ["k7"]}), &shape),
        Verdict::Admitted
    );
    assert_eq!(
        render(&crate::contract::check(&json!({"required": ["zz"]}), &shape)),
        format!("zz: {MISSING_REQUIRED}")
    );
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[test]
fn contract_the_deepest_shape_is_checked() {
    // 128 nested arrays (the deepest a fingerprint goes) around a string, against "arrays all the way".
    let value = format!("{}\"x\"{}", "[".repeat(127), "]".repeat(127));
    let schema = json!({"type": "array", "items": {"$ref": "#"}});
    let expected = format!("(root){}: declared array, returned string", "[]".repeat(127));
    assert_eq!(render(&quickly(&schema, &value)), expected);
    let value = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert_eq!(quickly(&schema, &value), Verdict::Admitted);
}

#[test]
fn contract_a_schema_too_large_is_inconclusive() {
    let properties: Map<String, Value> =
        (0..=SCHEMA_NODE_LIMIT).map(|i| (format!("p{i}"), json!({"type": "string"}))).collect();
    let schema = json!({"type": "object", "properties": properties});
    assert_eq!(quickly(&schema, r#"{"p1":1}"#), Verdict::Inconclusive);
    assert_eq!(quickly(&schema, "1"), Verdict::Inconclusive);
}
