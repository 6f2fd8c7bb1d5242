//! Observed calls' argument shapes against a tool's new `inputSchema`: what a release would reject.

use super::*;

/// Checks `arguments` (a JSON value, as an agent sent it) against `schema`, expecting `expected`
/// ("admitted", "inconclusive" or the reasons joined by "; ").
fn check_sent(schema: &str, arguments: &str, expected: &str) {
    let schema: Value = serde_json::from_str(schema).unwrap_or_else(|e| panic!("schema {schema}: {e}"));
    let got = render(&CompiledOutput::new(&schema).check_arguments(&shape_of(arguments)));
    assert_eq!(got, expected, "schema {schema}\narguments {arguments}");
}

const SEARCH_V2: &str = r#"{"type":"object","properties":{"query":{"type":"string"},
    "filters":{"type":"object","properties":{"site":{"type":"string"}}},
    "limit":{"type":"integer","minimum":1},"mode":{"enum":["fast","deep"]}},
    "required":["query","filters"],"additionalProperties":false}"#;

#[test]
fn a_newly_required_parameter_rejects_calls_without_it() {
    check_sent(SEARCH_V2, r#"{"query":"x","filters":{"site":"a.org"}}"#, "admitted");
    check_sent(SEARCH_V2, r#"{"query":"x"}"#, &format!("filters: {MISSING_REQUIRED}"));
    // In the order the schema lists them.
    check_sent(SEARCH_V2, "{}", &format!("query: {MISSING_REQUIRED}; filters: {MISSING_REQUIRED}"));
}

#[test]
fn types_and_removed_parameters_are_told_as_sent() {
    check_sent(SEARCH_V2, r#"{"query":1,"filters":{}}"#, "query: declared string, sent number");
    check_sent(SEARCH_V2, r#"{"query":"x","filters":{},"page":2}"#, &format!("page: {NOT_ALLOWED}"));
    check_sent(
        SEARCH_V2,
        r#"{"query":"x","filters":{"site":3}}"#,
        "filters.site: declared string, sent number",
    );
    check_sent(SEARCH_V2, r#"[]"#, "(root): declared object, sent array");
}

#[test]
fn what_a_shape_cannot_show_is_admitted() {
    // Bounds, enum members of the right kind and formats are values, which a shape does not keep.
    check_sent(SEARCH_V2, r#"{"query":"x","filters":{},"limit":0}"#, "admitted");
    check_sent(SEARCH_V2, r#"{"query":"x","filters":{},"mode":"slowest"}"#, "admitted");
    check_sent(
        r#"{"type":"object","properties":{"at":{"type":"string","format":"date-time"}}}"#,
        r#"{"at":"soon"}"#,
        "admitted",
    );
    // An enum of strings does not take a number, which a shape does show.
    check_sent(SEARCH_V2, r#"{"query":"x","filters":{},"mode":1}"#, "mode: declared string, sent number");
}

#[test]
fn an_arguments_object_is_never_read_as_a_result_envelope() {
    // A tool whose parameters are named like a CallToolResult's fields is checked on them, as sent.
    let schema =
        r#"{"type":"object","properties":{"content":{"type":"array"}},"required":["content","isError"]}"#;
    check_sent(schema, r#"{"content":[],"isError":false}"#, "admitted");
    check_sent(schema, r#"{"content":[]}"#, &format!("isError: {MISSING_REQUIRED}"));
}

#[test]
fn schemas_that_say_nothing_admit_every_call() {
    for schema in ["{}", "true", r#"{"type":"object"}"#, r#"{"type":"object","additionalProperties":true}"#] {
        check_sent(schema, r#"{"anything":{"at":[1]}}"#, "admitted");
    }
    check_sent("false", "{}", "(root): not allowed by the declared schema");
}
