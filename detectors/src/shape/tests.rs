//! Tests of shape fingerprinting: table cases, conformance data and the size bound.

use driftline_schemas::ShapeOutcome;
use proptest::prelude::*;

use super::*;

const CAP: u64 = 8192;

/// The shape of `json`, or the outcome when it has none.
fn check(json: &str, expected: &str) {
    let got = fingerprint(json.as_bytes(), CAP);
    let rendered = got.shape.clone().unwrap_or_else(|| format!("<{}>", got.outcome.as_str()));
    assert_eq!(rendered, expected, "input {json:?}");
}

fn check_compact(json: &str, expected: u64) {
    assert_eq!(fingerprint(json.as_bytes(), CAP).compact_bytes, Some(expected), "input {json:?}");
}

fn nested_arrays(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn atoms() {
    check("null", "null");
    check("true", "bool");
    check("false", "bool");
    check("0", "number");
    check("-12.5e-3", "number");
    check("1e400", "number");
    check("123456789012345678901234567890", "number");
    check(r#""x""#, "string");
    check(r#""""#, "string");
}

#[test]
fn containers() {
    check("[]", "[]");
    check("{}", "{}");
    check("[1, \"a\", null]", "[number]");
    check("[[], [1]]", "[[]]");
    check(r#"[{"b":1},{"c":"x"}]"#, "[{b:number}]");
    check(r#"{"b": 1, "a": {"d": [true], "c": null}}"#, "{a:{c:null,d:[bool]},b:number}");
    check(" \n\t{ \"a\" : [ 1 , 2 ] }\r\n", "{a:[number]}");
}

#[test]
fn keys_sort_by_utf8_bytes_and_duplicates_keep_the_last() {
    check(r#"{"b":1,"B":1,"_a":1,"a":1,"":1}"#, "{:number,B:number,_a:number,a:number,b:number}");
    check(r#"{"é":1,"z":1,"😀":1}"#, "{z:number,é:number,😀:number}");
    check(r#"{"a":1,"a":"x"}"#, "{a:string}");
    check(r#"{"a":"x","b":0,"a":[1]}"#, "{a:[number],b:number}");
}

#[test]
fn keys_are_escaped() {
    check(r#"{"a:number,b":0}"#, r"{a\:number\,b:number}");
    check(r#"{"{":1,"}":2}"#, r"{\{:number,\}:number}");
    check(r#"{"a\"b":1}"#, r#"{a\"b:number}"#);
    check(r#"{"a\\b":1}"#, r"{a\\b:number}");
    check(r#"{"<x>":1,"[y]":2}"#, r"{\<x\>:number,\[y\]:number}");
    check(r#"{"line\nbreak":1}"#, r"{line\u000abreak:number}");
    check("{\"del\u{7f}\":1}", r"{del\u007f:number}");
    check("{\"c1\u{85}\":1}", r"{c1\u0085:number}");
    // Escaped key text in the input decodes before escaping for the shape.
    check(r#"{"\u0061\u003a":1}"#, r"{a\::number}");
    check(r#"{"\ud83d\ude00":1}"#, "{😀:number}");
}

#[test]
fn typed_sentinels() {
    check(r#"{"__type__":"uuid","value":"0f0e"}"#, "<typed:uuid>");
    check(r#"{"__type__":"object","class":"User","value":"x"}"#, "<typed:object:User>");
    check(r#"{"class":"User","__type__":"object"}"#, "<typed:object:User>");
    check(r#"{"__type__":"object","class":5}"#, "<typed:object>");
    check(r#"{"__type__":""}"#, "<typed:>");
    check(r#"{"__type__":5,"value":"x"}"#, "{__type__:number,value:string}");
    check(r#"{"__type__":"a","__type__":5}"#, "{__type__:number}");
    check(r#"{"__type__":"a:b","class":"c"}"#, r"<typed:a\:b:c>");
    check(r#"{"__type__":"a","class":"b:c"}"#, r"<typed:a:b\:c>");
    check(r#"{"v":{"__type__":"d\u0061te"}}"#, "{v:<typed:date>}");
    check(r#"[{"__type__":"decimal"}]"#, "[<typed:decimal>]");
    // `class` alone, or `__type__` inside an ignored element, is ordinary.
    check(r#"{"class":"x"}"#, "{class:string}");
    check(r#"[1,{"__type__":"x"}]"#, "[number]");
}

#[test]
fn outcomes() {
    check("", "<unparseable>");
    check("   ", "<unparseable>");
    check("{\"not valid", "<unparseable>");
    check("not json", "<unparseable>");
    check("NaN", "<unparseable>");
    check("01", "<unparseable>");
    check("1.", "<unparseable>");
    check("-", "<unparseable>");
    check("[1,]", "<unparseable>");
    check("{\"a\":1,}", "<unparseable>");
    check("{\"a\" 1}", "<unparseable>");
    check("[1] [2]", "<unparseable>");
    check("\"tab\there\"", "<unparseable>");
    check(r#""\ud800""#, "<unparseable>");
    check(r#""\udc00\ud800""#, "<unparseable>");
    check(r#""\x""#, "<unparseable>");
    check("tru", "<unparseable>");
    check(r#""<truncated>""#, "<truncated_sentinel>");
    check(r#""\u003ctruncated>""#, "<truncated_sentinel>");
    check(r#"{"a":"<truncated>"}"#, "{a:string}");
    assert_eq!(fingerprint(b"\xff\xfe", CAP).outcome, ShapeOutcome::Unparseable);
}

#[test]
fn depth_limit_is_128_containers() {
    check(&nested_arrays(DEPTH_LIMIT), &format!("{}number{}", "[".repeat(128), "]".repeat(128)));
    check(&nested_arrays(DEPTH_LIMIT + 1), "<too_deep>");
    check(&nested_arrays(10_000), "<too_deep>");
    // Depth counts everywhere, also in elements the shape ignores.
    check(&format!("[1,{}]", nested_arrays(DEPTH_LIMIT)), "<too_deep>");
    // Syntax errors win over depth.
    check(&"[".repeat(200), "<unparseable>");
    // A passed-over element keeps its containers' kinds past 64 levels too (in bits up to 64, then in a
    // list): objects and arrays alternating 100 deep close right, and a wrong bracket deep inside is found.
    let mixed = |depth: usize, wrong_at: Option<usize>| {
        let open: String = (0..depth).map(|i| if i % 2 == 0 { "{\"a\":" } else { "[" }).collect();
        let close: String = (0..depth)
            .rev()
            .map(|i| match (i % 2 == 0, wrong_at == Some(i)) {
                (true, false) | (false, true) => "}",
                _ => "]",
            })
            .collect();
        format!("[1,{open}0{close}]")
    };
    check(&mixed(100, None), "[number]");
    check(&mixed(100, Some(90)), "<unparseable>");
    check(&mixed(100, Some(10)), "<unparseable>");
    check(&mixed(DEPTH_LIMIT, None), "<too_deep>");
}

#[test]
fn compact_bytes_ignore_insignificant_whitespace_only() {
    check_compact(r#"{"a":1}"#, 7);
    check_compact("{ \"a\" :\n 1 }", 7);
    check_compact(r#"{"a b":" x "}"#, 13);
    check_compact(r#""\u0041""#, 8);
    check_compact("[1, 2, 3]", 7);
}

#[test]
fn byte_cap_is_strictly_greater() {
    let at_cap = fingerprint(br#"{"bb":1}"#, 8);
    assert_eq!(at_cap.outcome, ShapeOutcome::Fingerprinted);
    let over = fingerprint(br#"{"bbb":1}"#, 8);
    assert_eq!(over.outcome, ShapeOutcome::Oversized);
    assert_eq!(over.shape, None);
    assert_eq!(over.compact_bytes, Some(9));
    // The cap measures the compact form, so formatting does not matter.
    assert_eq!(fingerprint(b"{ \"bb\" : 1 }", 8).outcome, ShapeOutcome::Fingerprinted);
}

#[test]
fn hashes() {
    let got = fingerprint(br#"{"a":1,"b":"x","c":true}"#, CAP);
    assert_eq!(got.shape.as_deref(), Some("{a:number,b:string,c:bool}"));
    assert_eq!(
        got.hash().as_deref(),
        Some("32bbc0a6667adf6a6860a4cf7a736448d63d9554a64ca3f32f99691786ee2c7e")
    );
    assert_eq!(got.hex8().as_deref(), Some("32bbc0a6"));
    assert_eq!(fingerprint(b"[", CAP).hash(), None);
}

/// Arbitrary JSON values, as `serde_json::Value`, nesting a few levels.
fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        ".{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-z:,{}<>\"\\\\_ ]{0,6}", inner, 0..6)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// The same value with every number replaced and every string rewritten, structure untouched.
fn other_values(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => Value::from(if n.is_f64() { 7 } else { -42 }),
        Value::String(s) => Value::from(format!("{s}-changed")),
        Value::Bool(b) => Value::from(!b),
        Value::Array(items) => Value::Array(items.iter().map(other_values).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), other_values(v))).collect()),
        Value::Null => Value::Null,
    }
}

fn shape_of(value: &serde_json::Value) -> Option<String> {
    let text = serde_json::to_string(value).expect("serialize");
    fingerprint(text.as_bytes(), LARGEST_MAX_BYTES).shape
}

proptest! {
    #[test]
    fn shape_ignores_values(value in arb_json()) {
        let changed = other_values(&value);
        // Typed sentinels are defined by values (`__type__` strings), so leave them out here.
        let text = serde_json::to_string(&value).expect("serialize");
        prop_assume!(!text.contains("__type__"));
        prop_assert_eq!(shape_of(&value), shape_of(&changed));
    }

    #[test]
    fn shape_ignores_key_order_and_whitespace(value in arb_json()) {
        let compact = serde_json::to_string(&value).expect("serialize");
        let pretty = serde_json::to_string_pretty(&value).expect("serialize");
        // serde_json's map is sorted; reversing every object's key order must not matter.
        let reversed = reverse_keys(&value);
        let a = fingerprint(compact.as_bytes(), LARGEST_MAX_BYTES);
        let b = fingerprint(pretty.as_bytes(), LARGEST_MAX_BYTES);
        let c = fingerprint(reversed.as_bytes(), LARGEST_MAX_BYTES);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(&a, &c);
        prop_assert_eq!(a.compact_bytes, Some(compact.len() as u64));
    }

    #[test]
    fn every_number_is_number(n in any::<f64>().prop_filter("finite", |f| f.is_finite()), i in any::<i64>(), u in any::<u64>()) {
        for text in [serde_json::to_string(&n).expect("f64"), i.to_string(), u.to_string(), format!("{u}e{}", i % 500)] {
            let got = fingerprint(text.as_bytes(), CAP);
            prop_assert_eq!(got.shape.as_deref(), Some("number"), "{}", text);
        }
    }

    #[test]
    fn accepts_exactly_what_serde_json_accepts(text in "[\\[\\]{}\",:0-9a-z.eE+\\- \\\\]{0,24}") {
        let ours = fingerprint(text.as_bytes(), LARGEST_MAX_BYTES).outcome != ShapeOutcome::Unparseable;
        let theirs = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
        prop_assert_eq!(ours, theirs, "input {:?}", text);
    }

    #[test]
    fn validates_utf8_exactly_like_serde_json(
        parts in prop::collection::vec(prop::sample::select(vec![
            &b"\""[..], b"\\", b"\\u00e9", b"\\ud83d\\ude00", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xff", b"\xc3",
            b"\xed\xa0\x80", b"abcdefgh", b"a", b"{", b"}", b"[", b"]", b":", b",", b"1", b" ", b"\x01",
        ]), 0..16)
    ) {
        let bytes: Vec<u8> = parts.concat();
        let ours = fingerprint(&bytes, LARGEST_MAX_BYTES).outcome != ShapeOutcome::Unparseable;
        let theirs = serde_json::from_slice::<serde_json::Value>(&bytes).is_ok();
        prop_assert_eq!(ours, theirs, "input {:?}", String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn str_and_bytes_agree(value in arb_json()) {
        let text = serde_json::to_string(&value).expect("serialize");
        prop_assert_eq!(fingerprint_str(&text, CAP), fingerprint(text.as_bytes(), CAP));
    }

    #[test]
    fn never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = fingerprint(&bytes, 16);
    }
}

/// Serializes `value` with every object's keys written in reverse order.
fn reverse_keys(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Array(items) => format!("[{}]", items.iter().map(reverse_keys).collect::<Vec<_>>().join(",")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .rev()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).expect("key"), reverse_keys(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => serde_json::to_string(other).expect("scalar"),
    }
}

/// Values with long strings and keys (across 64-byte blocks), escapes and typed sentinels.
fn arb_long_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        "[a-z\\\\\"\u{1}\u{e9}\u{1f600} ]{0,90}".prop_map(serde_json::Value::from),
        Just(serde_json::json!({"__type__": "Dataset", "class": "x\\y"})),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-z:,\\\\\"_]{0,70}", inner, 0..6)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    /// What a window may hold per call rests on this: no shape is longer than
    /// `shape_text_bound(compact_bytes)` (keys here hold control and structural characters, which grow
    /// most when escaped).
    #[test]
    fn a_shape_is_at_most_six_times_its_value(value in arb_long_json(), key in "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}:,\\\\\"{}<>]{0,40}") {
        for value in [value.clone(), serde_json::json!({ key.clone(): value }), serde_json::json!([[{ key: 1 }]])] {
            let text = serde_json::to_string(&value).expect("serialize");
            let got = fingerprint(text.as_bytes(), LARGEST_MAX_BYTES);
            if let (Some(shape), Some(bytes)) = (&got.shape, got.compact_bytes) {
                prop_assert!(shape.len() as u64 <= crate::shape_drift::shape_text_bound(bytes), "{} bytes of shape for {}: {}", shape.len(), text, shape);
            }
        }
    }
}

#[test]
fn the_shapes_that_grow_most_stay_within_the_bound() {
    for text in [
        "1",
        "[1]",
        "[[[[1]]]]",
        "{\"\":1}",
        "{\"\":1,\"a\":0}",
        "true",
        "\"\"",
        "{\"\u{7f}\u{7f}\u{7f}\":1}",
        "{\"\u{80}\":[0]}",
        "{\":::\":0}",
    ] {
        let got = fingerprint(text.as_bytes(), LARGEST_MAX_BYTES);
        let (shape, bytes) = (got.shape.expect("a shape"), got.compact_bytes.expect("bytes"));
        assert!(shape.len() as u64 <= crate::shape_drift::shape_text_bound(bytes), "{text}: {shape}");
    }
}

/// The token walk and the byte-by-byte walk give one result, for bytes and for text.
fn check_walks_agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let bytewise = fingerprint_bytewise(bytes, CAP);
    prop_assert_eq!(&fingerprint(bytes, CAP), &bytewise, "input {:?}", String::from_utf8_lossy(bytes));
    if let Ok(text) = std::str::from_utf8(bytes) {
        prop_assert_eq!(&fingerprint_str(text, CAP), &bytewise, "input {:?}", text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn token_walk_agrees_on_json(value in arb_long_json(), pad in 0usize..70, pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&value) } else { serde_json::to_string(&value) };
        let text = format!("{}{}", " ".repeat(pad), text.expect("serialize"));
        check_walks_agree(text.as_bytes())?;
    }

    #[test]
    fn token_walk_agrees_on_damaged_json(
        value in arb_long_json(),
        pad in 0usize..70,
        at in any::<prop::sample::Index>(),
        byte in prop::sample::select(vec![b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b' ', b'\n', 1u8, 0x7f, 0xc3, 0xff, b'a', b'0', b'-', b'e', b'u']),
        delete in any::<bool>(),
    ) {
        let mut bytes = format!("{}{}", " ".repeat(pad), serde_json::to_string(&value).expect("serialize")).into_bytes();
        let at = at.index(bytes.len());
        if delete { bytes.remove(at); } else { bytes[at] = byte; }
        check_walks_agree(&bytes)?;
    }

    #[test]
    fn token_walk_agrees_on_fragments(
        parts in prop::collection::vec(prop::sample::select(vec![
            &b"\""[..], b"\\", b"\\\\", b"\\\"", b"\\u00e9", b"\\ud83d\\ude00", b"\\ud83d", b"\\u12", b"\xc3\xa9",
            b"\xff", b"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz", b"   \n   ", b"{", b"}", b"[",
            b"]", b":", b",", b"1", b"-0.5e+3", b"01", b"true", b"nul", b"null", b"\x01", b"\t", b"\"k\":", b"\"__type__\":",
        ]), 0..48)
    ) {
        check_walks_agree(&parts.concat())?;
    }
}

/// MCP 2026-07-28 interim results (`resultType: "input_required"`) are no answer of the tool's: recorded
/// without a shape, so they never enter a window or the contract check; a complete result is fingerprinted.
#[test]
fn interim_results_are_not_the_tools_answer() {
    for (raw, interim) in [
        (r#"{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create"}}}"#, true),
        (r#" { "content": [], "resultType" : "input_required" }"#, true),
        (r#"{"resultType":"complete","structuredContent":{"temp_c":21},"content":[]}"#, false),
        (r#"{"note":"input_required"}"#, false),
        (r#"["input_required"]"#, false),
        (r#"{"resultType":"input_required""#, false),
        (r#"{"resultType":{"x":"input_required"}}"#, false),
    ] {
        assert_eq!(is_interim_result(raw), interim, "{raw}");
        let span: driftline_schemas::ToolCallSpan = serde_json::from_value(serde_json::json!({
            "span_id": "s", "server": "srv", "tool": "t", "started_at": "2026-12-07T00:00:00Z",
            "duration_ms": 1, "status": "success", "return_value": serde_json::from_str::<serde_json::Value>(raw).ok(),
        }))
        .expect("a span");
        let record = record_from_span(&span, &"p".parse().expect("a project"), span.started_at);
        if interim {
            assert_eq!((record.shape_outcome, record.shape), (ShapeOutcome::Absent, None), "{raw}");
        }
    }
}

/// A span's arguments become their shape on the record, whatever became of the call; no value survives,
/// and arguments that are missing or do not fingerprint leave no shape.
#[test]
fn arguments_are_recorded_as_their_shape_only() {
    let check = |status: &str, arguments: Option<&str>, expected: Option<&str>| {
        let mut span = serde_json::json!({"span_id": "s", "server": "srv", "tool": "t",
            "started_at": "2026-12-07T00:00:00Z", "duration_ms": 1, "status": status});
        if let Some(raw) = arguments {
            span["arguments"] = serde_json::from_str(raw).expect("JSON arguments");
        }
        let span: driftline_schemas::ToolCallSpan = serde_json::from_value(span).expect("a span");
        let record = record_from_span(&span, &"p".parse().expect("a project"), span.started_at);
        assert_eq!(record.argument_shape.as_deref(), expected, "{arguments:?}");
        let text = serde_json::to_string(&record).expect("a record");
        for secret in ["hunter2", "4111"] {
            assert!(!text.contains(secret), "a value reached the record: {text}");
        }
    };
    let q = shape_of(&serde_json::json!({"q": "hunter2", "limit": 4111})).expect("a shape");
    check("success", Some(r#"{"q": "hunter2", "limit": 4111}"#), Some(&q));
    check("error", Some(r#"{"q": "hunter2", "limit": 4111}"#), Some(&q));
    check("success", None, None);
    let empty = shape_of(&serde_json::json!({})).expect("a shape");
    check("success", Some("{}"), Some(&empty));
    // Beyond the byte cap: no shape, and nothing of the value.
    let huge = format!(r#"{{"q": "{}"}}"#, "hunter2".repeat(LARGEST_MAX_BYTES as usize / 7 + 1));
    check("success", Some(&huge), None);
}
