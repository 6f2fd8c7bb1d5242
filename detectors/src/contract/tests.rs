//! Tests of the declared-output contract check: table cases per concern and hostile schemas.

use std::time::{Duration, Instant};

use driftline_schemas::{
    CallStatus, DetectorThresholds, InputPosition, OutputDeclaration, ReasonChange, ShapeOutcome,
    ShapeRanking, ShapeReason, SignalKind, Timestamp, ToolCallRecord, OUTPUT_DECLARATION,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::*;
use crate::shape::fingerprint;
use crate::shape::parse::{parse, Node};

// ---------------------------------------------------------------------------------------------------
// The check, case by case

fn shape_of(value: &str) -> String {
    fingerprint(value.as_bytes(), 1 << 20).shape.unwrap_or_else(|| panic!("{value} has no shape"))
}

fn render(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Admitted => "admitted".to_owned(),
        Verdict::Inconclusive => "inconclusive".to_owned(),
        Verdict::Mismatch(reasons) => reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
    }
}

/// Checks the shape of `value` against `schema` (both JSON text) and compares the rendered verdict.
fn check(schema: &str, value: &str, expected: &str) {
    let schema: Value = serde_json::from_str(schema).unwrap_or_else(|e| panic!("schema {schema}: {e}"));
    let got = render(&super::check(&schema, &shape_of(value)));
    assert_eq!(got, expected, "schema {schema}\nvalue  {value}");
}

fn reasons(schema: Value, value: &str) -> Vec<ShapeReason> {
    match super::check(&schema, &shape_of(value)) {
        Verdict::Mismatch(reasons) => reasons,
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

const WEATHER: &str = r#"{"type":"object","properties":{"temp_c":{"type":"number"}},"required":["temp_c"],
    "additionalProperties":false}"#;

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
        render(&super::check(&draft7, &shape_of(r#"{"p":1}"#))),
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
        assert_eq!(super::check(&schema, &shape_of("1")), Verdict::Admitted, "{reference}");
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
        assert_eq!(super::check(&schema, shape), Verdict::Inconclusive, "{shape:?}");
    }
    // Keys out of order or repeated (not what the fingerprint writes) are still read as keys.
    assert_eq!(render(&super::check(&json!({"required": ["a", "b"]}), "{b:null,a:null,b:null}")), "admitted");
}

#[test]
fn contract_reasons_are_capped() {
    let value: Map<String, Value> = (0..200).map(|i| (format!("k{i:03}"), Value::Null)).collect();
    let found = reasons(json!({"additionalProperties": false}), &Value::Object(value).to_string());
    assert_eq!(found.len(), MAX_REASONS);
    assert_eq!(found[0].path, "k000");
}

// ---------------------------------------------------------------------------------------------------
// Budgets

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
    assert_eq!(super::check(&json!({"type": "object", "required": ["k7"]}), &shape), Verdict::Admitted);
    assert_eq!(
        render(&super::check(&json!({"required": ["zz"]}), &shape)),
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

// ---------------------------------------------------------------------------------------------------
// The shape parser, shared with the ranker

#[test]
fn contract_parser_reads_typed_sentinels() {
    let typed =
        |name: &str, class: Option<&str>| Node::Typed { name: name.into(), class: class.map(Into::into) };
    assert_eq!(parse("<typed:uuid>"), Some(typed("uuid", None)));
    assert_eq!(parse("<typed:object:User>"), Some(typed("object", Some("User"))));
    assert_eq!(parse(r"<typed:a\:b:c\>d>"), Some(typed("a:b", Some("c>d"))));
    assert_eq!(parse("<typed:>"), Some(typed("", None)));
    for json in [
        r#"{"v":{"__type__":"d\u0061te"},"w":[{"__type__":"a:b","class":"c"}]}"#,
        r#"{"__type__":"x\u0001","class":"<y>"}"#,
        r#"{"a":{"b":[{"c":"x"}]},"k:,{}":[],"\u0001":null}"#,
    ] {
        let shape = shape_of(json);
        let node = parse(&shape).unwrap_or_else(|| panic!("{shape} parses"));
        assert_eq!(node.to_string(), shape);
    }
    assert!(parse("{v:<typed:date>}").is_some_and(|node| node.has_typed()));
    assert!(parse("{v:[string]}").is_some_and(|node| !node.has_typed()));
}

#[test]
fn contract_parser_stops_at_the_fingerprint_depth() {
    let deepest = shape_of(&format!("{}{}", "[".repeat(128), "]".repeat(128)));
    assert!(parse(&deepest).is_some());
    assert_eq!(parse(&format!("[{deepest}]")), None);
    assert_eq!(parse(&"{a:".repeat(100_000)), None);
}

#[test]
fn contract_ranker_still_leaves_typed_sentinels_indeterminate() {
    use crate::shape_drift::rank;
    for (before, after) in
        [("{a:string}", "{a:<typed:datetime>}"), ("<typed:uuid>", "string"), ("[<typed:x>]", "[<typed:x>]")]
    {
        assert_eq!(rank(before, after).signal_ranking(), ShapeRanking::Indeterminate, "{before} -> {after}");
    }
    assert_eq!(rank("{a:number}", "{a:string}").signal_ranking(), ShapeRanking::Breaking);
}

// ---------------------------------------------------------------------------------------------------
// The per-tool state and its firing rule

fn thresholds(min_history_calls: u32, history_window: u32) -> DetectorThresholds {
    DetectorThresholds { min_history_calls, history_window, ..DetectorThresholds::default() }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000 + second * 1000).unwrap_or_else(|| panic!("a time"))
}

fn declaration(sequence: u64, schema: Option<Value>) -> OutputDeclaration {
    OutputDeclaration {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        kind: OUTPUT_DECLARATION.into(),
        project: "p".parse().expect("a valid name"),
        server: "srv".parse().expect("a valid name"),
        tool: "weather".parse().expect("a valid name"),
        schema_hash: schema.as_ref().map(|schema| shape_hex8(&canonical_json(schema))),
        output_schema: schema,
        declared_at: at(0),
        sequence,
    }
}

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

fn view(state: &ToolContractState, thresholds: &DetectorThresholds) -> ToolContract {
    state.view(thresholds).unwrap_or_else(|| panic!("a declaration is held"))
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

// ---------------------------------------------------------------------------------------------------
// Properties

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
        prop_assert_eq!(super::check(&schema_of(&value), &shape), Verdict::Admitted, "shape {}", shape);
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
        let verdict = super::check(&schema, &shape_of(&without.to_string()));
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
