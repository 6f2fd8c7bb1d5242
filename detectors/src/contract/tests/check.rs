//! The check, case by case: each keyword of JSON Schema against shapes, and the envelopes of MCP results.

use super::*;

#[test]
fn contract_the_weather_example() {
    check(WEATHER, r#"{"temp":"21C"}"#, &format!("temp_c: {MISSING_REQUIRED}; temp: {NOT_ALLOWED}"));
    check(WEATHER, r#"{"temp_c":21.5}"#, "admitted");
    let schema = serde_json::from_str(WEATHER).expect("schema");
    assert_eq!(
        reasons(schema, r#"{"temp":"21C"}"#),
        vec![
            ShapeReason {
                path: "temp_c".into(),
                change: ReasonChange::Removed,
                before: Some("number".into()),
                after: None,
                detail: Some(MISSING_REQUIRED.into()),
            },
            ShapeReason {
                path: "temp".into(),
                change: ReasonChange::Added,
                before: None,
                after: Some("string".into()),
                detail: Some(NOT_ALLOWED.into()),
            },
        ]
    );
}

#[test]
fn contract_boolean_schemas() {
    check("true", "1", "admitted");
    check("{}", r#"{"a":[1]}"#, "admitted");
    check("false", "1", "(root): not allowed by the declared schema");
    check("false", "[]", "(root): not allowed by the declared schema");
    // Not a schema at all: nothing can be told from it.
    check(r#""string""#, "1", "admitted");
    check("[1]", "1", "admitted");
}

#[test]
fn contract_types() {
    check(r#"{"type":"string"}"#, r#""x""#, "admitted");
    check(r#"{"type":"string"}"#, "1", "(root): declared string, returned number");
    check(r#"{"type":"boolean"}"#, "null", "(root): declared boolean, returned null");
    check(r#"{"type":"null"}"#, "true", "(root): declared null, returned bool");
    check(r#"{"type":"object"}"#, "[1]", "(root): declared object, returned array");
    check(r#"{"type":"array"}"#, "{}", "(root): declared array, returned object");
    let schema = json!({"type": "string"});
    assert_eq!(
        reasons(schema, "{}"),
        vec![ShapeReason {
            path: "(root)".into(),
            change: ReasonChange::TypeChanged,
            before: Some("string".into()),
            after: Some("object".into()),
            detail: Some("declared string, returned object".into()),
        }]
    );
}

#[test]
fn contract_integer_admits_any_number() {
    // A shape says `number` for 1 and 1.5 alike, so `integer` cannot be shown wrong by a number.
    check(r#"{"type":"integer"}"#, "1.5", "admitted");
    check(r#"{"type":"integer"}"#, "1", "admitted");
    check(r#"{"type":"integer"}"#, r#""1""#, "(root): declared integer, returned string");
    check(r#"{"type":["integer","number"]}"#, r#""1""#, "(root): declared number, returned string");
}

#[test]
fn contract_nullable_and_type_lists() {
    check(r#"{"type":"string","nullable":true}"#, "null", "admitted");
    check(r#"{"type":"string"}"#, "null", "(root): declared string, returned null");
    check(r#"{"type":"string","nullable":true}"#, "1", "(root): declared string|null, returned number");
    check(r#"{"type":["string","null"]}"#, "null", "admitted");
    check(r#"{"type":["null","string"]}"#, "5", "(root): declared string|null, returned number");
    check(r#"{"type":["object","array"]}"#, "[]", "admitted");
    // Unknown or malformed type names constrain nothing.
    check(r#"{"type":"any"}"#, "1", "admitted");
    check(r#"{"type":["string","any"]}"#, "1", "admitted");
    check(r#"{"type":5}"#, "1", "admitted");
    check(r#"{"type":[]}"#, "1", "admitted");
}

#[test]
fn contract_enum_and_const_limit_the_kinds() {
    check(r#"{"enum":["a","b"]}"#, r#""c""#, "admitted");
    check(r#"{"enum":["a","b"]}"#, "1", "(root): declared string, returned number");
    check(r#"{"enum":["a",null]}"#, "null", "admitted");
    check(r#"{"enum":["a",1]}"#, "true", "(root): declared string|number, returned bool");
    check(r#"{"const":3}"#, r#""x""#, "(root): declared number, returned string");
    check(r#"{"const":null}"#, "null", "admitted");
    check(r#"{"const":{"a":1}}"#, "[]", "(root): declared object, returned array");
    check(r#"{"type":"integer","enum":[1,2]}"#, r#""1""#, "(root): declared integer, returned string");
    check(r#"{"type":["string","null"],"enum":["a"]}"#, "null", "(root): declared string, returned null");
    // Contradictions admit nothing.
    check(r#"{"type":"string","enum":[1,2]}"#, r#""x""#, "(root): not allowed by the declared schema");
    check(r#"{"enum":[]}"#, "1", "(root): not allowed by the declared schema");
}

#[test]
fn contract_required_keys() {
    check(r#"{"required":["a","b"]}"#, r#"{"a":1}"#, "b: required by the declared schema, missing");
    check(r#"{"required":["a","a"]}"#, "{}", "a: required by the declared schema, missing");
    // `required` says nothing about values that are not objects.
    check(r#"{"required":["a"]}"#, "1", "admitted");
    let missing = |schema: Value| reasons(schema, "{}")[0].before.clone();
    assert_eq!(missing(json!({"required": ["a"]})), Some("value".into()));
    assert_eq!(missing(json!({"required": ["a"], "properties": {"a": {}}})), Some("value".into()));
    assert_eq!(
        missing(json!({"required": ["a"], "properties": {"a": {"type": ["string", "null"]}}})),
        Some("string|null".into())
    );
    assert_eq!(
        missing(
            json!({"required": ["a"], "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}})
        ),
        Some("string|null".into())
    );
}

#[test]
fn contract_additional_properties() {
    let closed = r#"{"properties":{"a":{}},"additionalProperties":false}"#;
    check(closed, r#"{"a":1}"#, "admitted");
    check(closed, r#"{"a":1,"b":2,"c":[1]}"#, &format!("b: {NOT_ALLOWED}; c: {NOT_ALLOWED}"));
    assert_eq!(
        reasons(serde_json::from_str(closed).expect("schema"), r#"{"c":[1]}"#)[0].after,
        Some("[number]".into())
    );
    check(r#"{"additionalProperties":false}"#, "{}", "admitted");
    // Keys may match a pattern, and patterns are not evaluated: nothing extra is judged.
    check(
        r#"{"properties":{"a":{}},"patternProperties":{"^x":{}},"additionalProperties":false}"#,
        r#"{"a":1,"b":2}"#,
        "admitted",
    );
    check(
        r#"{"properties":{"a":{}},"additionalProperties":{"type":"number"}}"#,
        r#"{"a":"x","b":"y","c":1}"#,
        "b: declared number, returned string",
    );
    check(r#"{"properties":{"a":false}}"#, r#"{"a":1}"#, &format!("a: {NOT_ALLOWED}"));
}

#[test]
fn contract_unevaluated_properties() {
    check(
        r#"{"properties":{"a":{}},"unevaluatedProperties":false}"#,
        r#"{"a":1,"b":2}"#,
        &format!("b: {NOT_ALLOWED}"),
    );
    // Keys declared by in-place applicators are evaluated.
    let composed = r##"{"allOf":[{"properties":{"b":{}}}],"anyOf":[{"properties":{"c":{}}},{}],
        "$ref":"#/$defs/D","$defs":{"D":{"properties":{"d":{}}}},
        "properties":{"a":{}},"unevaluatedProperties":false}"##;
    check(composed, r#"{"a":1,"b":1,"c":1,"d":1}"#, "admitted");
    check(composed, r#"{"a":1,"e":1}"#, &format!("e: {NOT_ALLOWED}"));
    check(
        r#"{"properties":{"a":{}},"unevaluatedProperties":{"type":"string"}}"#,
        r#"{"a":1,"b":2}"#,
        "b: declared string, returned number",
    );
    // What else may evaluate keys is not followed: nothing extra is judged.
    for opaque in [
        r#"{"if":{"properties":{"a":{}}},"then":{"properties":{"b":{}}},"unevaluatedProperties":false}"#,
        r#"{"patternProperties":{"^b":{}},"unevaluatedProperties":false}"#,
        r#"{"allOf":[{"additionalProperties":true}],"unevaluatedProperties":false}"#,
        r#"{"$ref":"https://example.com/base.json","unevaluatedProperties":false}"#,
    ] {
        check(opaque, r#"{"b":1}"#, "admitted");
    }
}

#[test]
fn contract_nested_objects_and_paths() {
    check(
        r#"{"properties":{"a":{"properties":{"b":{"type":"string"}},"required":["c"]}}}"#,
        r#"{"a":{"b":1}}"#,
        "a.c: required by the declared schema, missing; a.b: declared string, returned number",
    );
    // `properties` constrains objects only.
    check(r#"{"properties":{"a":{"type":"string"}}}"#, r#""text""#, "admitted");
    check(r#"{"properties":{"a":{"type":"string"}}}"#, r#"{"b":1}"#, "admitted");
    // Escaped keys are read back as they were.
    check(
        r#"{"properties":{"a:b":{"type":"number"}},"required":["x,y"]}"#,
        r#"{"a:b":"s"}"#,
        "x,y: required by the declared schema, missing; a:b: declared number, returned string",
    );
    check(r#"{"required":["line\nbreak"]}"#, "{}", "line\nbreak: required by the declared schema, missing");
}

#[test]
fn contract_arrays_check_the_first_element() {
    let rows = r#"{"properties":{"rows":{"type":"array","items":{"properties":{"a":{"type":"number"}}}}}}"#;
    check(rows, r#"{"rows":[{"a":"x"},{"a":1}]}"#, "rows[].a: declared number, returned string");
    // Only the first element is in the shape.
    check(rows, r#"{"rows":[{"a":1},{"a":"x"}]}"#, "admitted");
    check(rows, r#"{"rows":[]}"#, "admitted");
    check(
        r#"{"type":"array","items":{"type":"string"}}"#,
        "[1]",
        "(root)[]: declared string, returned number",
    );
    check(
        r#"{"items":{"items":{"type":"string"}}}"#,
        "[[1]]",
        "(root)[][]: declared string, returned number",
    );
    check(r#"{"type":"array","items":false}"#, "[1]", "(root)[]: not allowed by the declared schema");
    check(r#"{"type":"array","items":false}"#, "[]", "admitted");
    // Bounds and `contains` need more than the first element.
    check(
        r#"{"type":"array","minItems":5,"maxItems":0,"contains":{"type":"number"}}"#,
        r#"["a"]"#,
        "admitted",
    );
}

#[test]
fn contract_tuples() {
    let prefix = r#"{"prefixItems":[{"type":"string"},{"type":"number"}],"items":{"type":"null"}}"#;
    check(prefix, r#"["a","b"]"#, "admitted");
    check(prefix, r#"[1,"b"]"#, "(root)[]: declared string, returned number");
    check(r#"{"prefixItems":[],"items":{"type":"null"}}"#, "[1]", "(root)[]: declared null, returned number");
    // Draft 4 tuples.
    check(r#"{"items":[{"type":"string"}]}"#, "[1]", "(root)[]: declared string, returned number");
    check(
        r#"{"items":[],"additionalItems":{"type":"string"}}"#,
        "[1]",
        "(root)[]: declared string, returned number",
    );
    check(r#"{"items":[]}"#, "[1]", "admitted");
}

#[test]
fn contract_any_of_and_one_of() {
    let either = r#"{"anyOf":[{"type":"object","required":["a","b"]},{"type":"object","required":["c"]}]}"#;
    check(either, r#"{"c":1}"#, "admitted");
    check(either, r#"{"a":1,"b":1}"#, "admitted");
    // The closest branch: fewest reasons, the first of equals.
    check(either, r#"{"d":1}"#, "c: required by the declared schema, missing");
    check(
        r#"{"oneOf":[{"required":["a"]},{"required":["b"]}]}"#,
        "{}",
        "a: required by the declared schema, missing",
    );
    // oneOf's "exactly one" cannot be shown: two matching branches admit.
    check(r#"{"oneOf":[{"type":"number"},{"type":"integer"}]}"#, "1", "admitted");
    // Branches that only disagree on this value's kind make one reason naming every kind.
    check(
        r#"{"anyOf":[{"type":"string"},{"type":"null"}]}"#,
        "1",
        "(root): declared string|null, returned number",
    );
    check(
        r#"{"properties":{"a":{"oneOf":[{"type":"string"},{"type":["integer","null"]}]}}}"#,
        r#"{"a":true}"#,
        "a: declared string|integer|null, returned bool",
    );
    check(r#"{"anyOf":[]}"#, "1", "admitted");
}

#[test]
fn contract_all_of() {
    check(
        r#"{"allOf":[{"required":["a"]},{"required":["b"]},{"required":["a"]}]}"#,
        "{}",
        "a: required by the declared schema, missing; b: required by the declared schema, missing",
    );
    check(
        r#"{"allOf":[{"type":"object"},{"properties":{"a":{"type":"string"}}}]}"#,
        r#"{"a":"x"}"#,
        "admitted",
    );
    check(
        r#"{"allOf":[{"type":"object"},{"properties":{"a":{"type":"string"}}}]}"#,
        r#"{"a":1}"#,
        "a: declared string, returned number",
    );
}

#[test]
fn contract_local_references() {
    check(
        r##"{"$ref":"#/$defs/Out","$defs":{"Out":{"type":"object","properties":{"t":{"type":"number"}},"required":["t"]}}}"##,
        r#"{"t":"x"}"#,
        "t: declared number, returned string",
    );
    let draft7 = json!({"type": "object", "properties": {"p": {"$ref": "#/definitions/P"}}, "required": ["p"],
        "definitions": {"P": {"type": "string"}}});
    assert_eq!(reasons(draft7.clone(), "{}")[0].before, Some("string".into()));
    assert_eq!(
        render(&crate::contract::check(&draft7, &shape_of(r#"{"p":1}"#))),
        "p: declared string, returned number"
    );
    // Pointer escapes and percent-encoding, a pointer to any schema inside.
    check(
        r##"{"properties":{"a":{"$ref":"#/definitions/a~1b%20c"},"b":{"$ref":"#/properties/c"},"c":{"type":"integer"}},
            "definitions":{"a/b c":{"type":"string"}}}"##,
        r#"{"a":1,"b":"x"}"#,
        "a: declared string, returned number; b: declared integer, returned string",
    );
    // Siblings of a reference apply beside it.
    check(
        r##"{"$ref":"#/$defs/S","type":"object","$defs":{"S":{"required":["a"]}}}"##,
        "1",
        "(root): declared object, returned number",
    );
    check(
        r##"{"$ref":"#/$defs/S","type":"object","$defs":{"S":{"required":["a"]}}}"##,
        "{}",
        "a: required by the declared schema, missing",
    );
}

#[test]
fn contract_references_it_cannot_follow_admit() {
    for reference in ["https://example.com/s.json", "other.json#/a", "#anchor", "#/$defs/missing", "#/%zz"] {
        let schema = json!({"$ref": reference});
        assert_eq!(crate::contract::check(&schema, &shape_of("1")), Verdict::Admitted, "{reference}");
    }
    check(r#"{"$ref":7}"#, "1", "admitted");
    check(r##"{"$dynamicRef":"#node"}"##, "1", "admitted");
    // The rest of the schema still applies.
    check(
        r#"{"$ref":"https://example.com/s.json","type":"object"}"#,
        "1",
        "(root): declared object, returned number",
    );
}

#[test]
fn contract_recursive_schemas_are_checked_as_deep_as_the_shape() {
    let tree = r##"{"$ref":"#/$defs/Node","$defs":{"Node":{"type":"object","required":["name"],
        "properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/Node"}}}}}}"##;
    check(
        tree,
        r#"{"name":"r","children":[{"name":"a","children":[{"name":"b","children":[]}]}]}"#,
        "admitted",
    );
    check(
        tree,
        r#"{"name":"r","children":[{"name":"a","children":[{"name":5}]}]}"#,
        "children[].children[].name: declared string, returned number",
    );
    check(
        tree,
        r#"{"children":[{}]}"#,
        &format!("name: {MISSING_REQUIRED}; children[].name: {MISSING_REQUIRED}"),
    );
    check(
        r##"{"type":"object","properties":{"self":{"$ref":"#"}}}"##,
        r#"{"self":{"self":1}}"#,
        "self.self: declared object, returned number",
    );
    // A cycle that never enters the value adds nothing and does not loop.
    let cycle = r##"{"$ref":"#/$defs/A","$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A","type":"string"}}}"##;
    check(cycle, r#""x""#, "admitted");
    check(cycle, "1", "(root): declared string, returned number");
    check(r##"{"allOf":[{"$ref":"#"}],"type":"string"}"##, "1", "(root): declared string, returned number");
}

#[test]
fn contract_what_a_shape_cannot_show_admits() {
    for schema in [
        r#"{"type":"string","format":"date-time","pattern":"^x","minLength":100,"maxLength":0}"#,
        r#"{"not":{"type":"string"}}"#,
        r#"{"if":{"type":"string"},"then":false,"else":false}"#,
        r#"{"x-custom":1,"description":"anything","propertyNames":{"maxLength":0}}"#,
        r#"{"type":"string","contentMediaType":"application/json"}"#,
    ] {
        check(schema, r#""a""#, "admitted");
    }
    check(r#"{"type":"number","minimum":10,"maximum":0,"multipleOf":7}"#, "1", "admitted");
    check(r#"{"type":"object","minProperties":9,"maxProperties":0}"#, r#"{"a":1}"#, "admitted");
}

#[test]
fn contract_typed_sentinels_admit_where_they_sit() {
    // The sentinel stands for a value driftline did not look into: no kind is proven ...
    check(r#"{"type":"string","format":"uuid"}"#, r#"{"__type__":"uuid","value":"0f0e"}"#, "admitted");
    check(r#"{"type":"array"}"#, r#"{"__type__":"decimal"}"#, "admitted");
    // ... while the rest of the shape is checked, and a key holding one is still present.
    check(
        r#"{"properties":{"when":{"type":"string"},"n":{"type":"number"}}}"#,
        r#"{"when":{"__type__":"datetime"},"n":"x"}"#,
        "n: declared number, returned string",
    );
    check(
        r#"{"properties":{"a":{}},"additionalProperties":false}"#,
        r#"{"a":1,"b":{"__type__":"x","class":"Y"}}"#,
        "b: not allowed by the declared schema",
    );
    check("false", r#"{"__type__":"x"}"#, "(root): not allowed by the declared schema");
    check(r#"{"items":{"type":"number"}}"#, r#"[{"__type__":"decimal"}]"#, "admitted");
}

#[test]
fn contract_call_tool_result_envelope() {
    // The whole MCP result: the declaration describes its structuredContent.
    check(
        WEATHER,
        r#"{"content":[{"type":"text","text":"{\"temp_c\":21}"}],"structuredContent":{"temp_c":21},"isError":false}"#,
        "admitted",
    );
    check(
        WEATHER,
        r#"{"content":[],"structuredContent":{"temp":"x"},"_meta":{}}"#,
        &format!("structuredContent.temp_c: {MISSING_REQUIRED}; structuredContent.temp: {NOT_ALLOWED}"),
    );
    check(
        WEATHER,
        r#"{"content":[{"type":"text","text":"21"}],"isError":false}"#,
        &format!("structuredContent: {MISSING_STRUCTURED_CONTENT}"),
    );
    let schema = serde_json::from_str(WEATHER).expect("schema");
    assert_eq!(
        reasons(schema, r#"{"content":[]}"#),
        vec![ShapeReason {
            path: "structuredContent".into(),
            change: ReasonChange::Removed,
            before: Some("object".into()),
            after: None,
            detail: Some(MISSING_STRUCTURED_CONTENT.into()),
        }]
    );
    check(
        r#"{"type":"object","required":["temp_c"]}"#,
        r#"{"content":[],"structuredContent":[1]}"#,
        "structuredContent: declared object, returned array",
    );
    // Not an envelope: another key, or `content` that is not an array.
    check(
        WEATHER,
        r#"{"content":[],"other":1}"#,
        &format!("temp_c: {MISSING_REQUIRED}; content: {NOT_ALLOWED}; other: {NOT_ALLOWED}"),
    );
    check(WEATHER, r#"{"content":"x"}"#, &format!("temp_c: {MISSING_REQUIRED}; content: {NOT_ALLOWED}"));
    // A schema that declares `content` itself describes the value as it is.
    let own = r#"{"type":"object","properties":{"content":{"type":"array"}},"required":["content"]}"#;
    check(own, r#"{"content":[]}"#, "admitted");
    check(
        r#"{"allOf":[{"properties":{"content":{"type":"array","items":{"type":"string"}}}}]}"#,
        r#"{"content":[1]}"#,
        "content[]: declared string, returned number",
    );
    // …unless a `structuredContent` sits next to a `content` array: then the value is the envelope (the
    // reference filesystem server's read_file declares `{content: string}`).
    let read_file = r#"{"type":"object","properties":{"content":{"type":"string"}},"required":["content"],"additionalProperties":false}"#;
    check(
        read_file,
        r#"{"content":[{"type":"text","text":"x"}],"structuredContent":{"content":"x"},"isError":false}"#,
        "admitted",
    );
    check(
        read_file,
        r#"{"content":[{"type":"text","text":"x"}],"structuredContent":{"text":"x"}}"#,
        &format!("structuredContent.content: {MISSING_REQUIRED}; structuredContent.text: {NOT_ALLOWED}"),
    );
    check(read_file, r#"{"content":"x"}"#, "admitted");
}

/// Results of MCP 2026-07-28 (and of SDKs that write its fields on every result): `resultType` and a
/// `_meta` with the server's info are envelope, `content` may be left out beside `structuredContent`,
/// and the structured content may be an array.
#[test]
fn contract_envelopes_of_2026_07_28() {
    check(
        WEATHER,
        r#"{"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}},"content":[{"type":"text","text":"21"}],"structuredContent":{"temp_c":21}}"#,
        "admitted",
    );
    check(WEATHER, r#"{"resultType":"complete","structuredContent":{"temp_c":21}}"#, "admitted");
    check(WEATHER, r#"{"structuredContent":{"temp_c":21}}"#, "admitted");
    check(
        WEATHER,
        r#"{"resultType":"complete","structuredContent":{"temp":21}}"#,
        &format!("structuredContent.temp_c: {MISSING_REQUIRED}; structuredContent.temp: {NOT_ALLOWED}"),
    );
    check(
        WEATHER,
        r#"{"resultType":"complete","content":[{"type":"text","text":"21"}]}"#,
        &format!("structuredContent: {MISSING_STRUCTURED_CONTENT}"),
    );
    let rows = r#"{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}}"#;
    check(rows, r#"{"resultType":"complete","content":[],"structuredContent":[{"id":"a"}]}"#, "admitted");
    check(rows, r#"{"content":[],"structuredContent":[{"id":"a"}]}"#, "admitted");
    check(
        rows,
        r#"{"resultType":"complete","content":[],"structuredContent":[{"name":"a"}]}"#,
        &format!("structuredContent[].id: {MISSING_REQUIRED}"),
    );
}

#[test]
fn contract_unreadable_shapes_are_inconclusive() {
    let schema = json!({"type": "object"});
    for shape in ["", "{a:", "{a:number}x", "<typed:x", "<typo:x>", "<typed:a:b:c>", "nul", "{a:b:number}"] {
        assert_eq!(crate::contract::check(&schema, shape), Verdict::Inconclusive, "{shape:?}");
    }
    // Keys out of order or repeated (not what the fingerprint writes) are still read as keys.
    assert_eq!(
        render(&crate::contract::check(&json!({"required": ["a", "b"]}), "{b:null,a:null,b:null}")),
        "admitted"
    );
}

#[test]
fn contract_reasons_are_capped() {
    let value: Map<String, Value> = (0..200).map(|i| (format!("k{i:03}"), Value::Null)).collect();
    let found = reasons(json!({"additionalProperties": false}), &Value::Object(value).to_string());
    assert_eq!(found.len(), MAX_REASONS);
    assert_eq!(found[0].path, "k000");
}
