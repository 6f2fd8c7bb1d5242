//! Property tests: the diff against itself, the hash against the normal form, digests written straight
//! from the text against the normal form, indexes built from known lists against fresh ones.

use super::*;

/// Arbitrary JSON, including what no MCP server should send.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-5i64..5).prop_map(Value::from),
        prop::sample::select(vec![json!(0.5), json!(9007199254740991u64), json!(-1e300)]),
        prop::sample::select(vec![
            "string",
            "integer",
            "number",
            "object",
            "null",
            "a",
            "b",
            "#",
            "#/$defs/a",
            "#/$defs/b",
            "#/definitions/a",
            "#/properties/x",
            "forbidden",
            "optional",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "type",
                    "properties",
                    "required",
                    "enum",
                    "items",
                    "anyOf",
                    "description",
                    "maximum",
                    "additionalProperties",
                    "default",
                    "x",
                    "y",
                    "a",
                    "b",
                    "$ref",
                    "$defs",
                    "definitions",
                    "oneOf",
                    "allOf",
                    "const",
                    "minimum",
                    "exclusiveMinimum",
                    "minLength",
                    "title",
                    "deprecated",
                    "$schema"
                ])
                .prop_map(String::from),
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_tools() -> impl Strategy<Value = Vec<Value>> {
    let hints = prop::collection::btree_map(
        prop::sample::select(vec!["readOnlyHint", "destructiveHint", "idempotentHint", "title"])
            .prop_map(String::from),
        any::<bool>().prop_map(Value::from),
        0..3,
    );
    let tool =
        (prop::sample::select(vec!["a", "b", "c"]), arb_json(), arb_json(), any::<bool>(), hints, arb_json())
            .prop_map(|(name, schema, description, with_output, hints, execution)| {
                let mut tool = json!({"name": name, "inputSchema": schema, "description": description});
                if with_output {
                    tool["outputSchema"] = json!({"type": "object"});
                }
                if !hints.is_empty() {
                    tool["annotations"] = Value::Object(hints.into_iter().collect());
                }
                if execution.is_string() {
                    tool["execution"] = json!({"taskSupport": execution});
                }
                tool
            });
    prop::collection::vec(prop_oneof![tool, arb_json()], 0..4)
}

/// Every object's keys in reverse order (no meaning in JSON).
fn shuffle_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().rev().map(|(k, v)| (k.clone(), shuffle_keys(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(shuffle_keys).collect()),
        other => other.clone(),
    }
}

/// Keys reversed, and `required` / `enum` reversed wherever a schema sits (not inside data such as `default`).
fn shuffle_schema(value: &Value) -> Value {
    let Value::Object(map) = value else { return shuffle_keys(value) };
    let mut out = serde_json::Map::new();
    for (key, v) in map.iter().rev() {
        let v = match (key.as_str(), v) {
            ("required" | "enum", Value::Array(items)) => {
                Value::Array(items.iter().rev().map(shuffle_keys).collect())
            }
            ("properties", Value::Object(props)) => {
                Value::Object(props.iter().rev().map(|(k, s)| (k.clone(), shuffle_schema(s))).collect())
            }
            ("items" | "additionalProperties" | "not", _) => shuffle_schema(v),
            ("anyOf" | "oneOf" | "allOf", Value::Array(items)) => {
                Value::Array(items.iter().map(shuffle_schema).collect())
            }
            _ => shuffle_keys(v),
        };
        out.insert(key.clone(), v);
    }
    Value::Object(out)
}

fn shuffle_tool(tool: &Value) -> Value {
    let Value::Object(map) = tool else { return shuffle_keys(tool) };
    let shuffled = map.iter().rev().map(|(k, v)| {
        let v = if k == "inputSchema" || k == "outputSchema" { shuffle_schema(v) } else { shuffle_keys(v) };
        (k.clone(), v)
    });
    Value::Object(shuffled.collect())
}

proptest! {
    #[test]
    fn the_diff_of_a_list_with_itself_is_empty(list in arb_tools()) {
        prop_assert!(diff_tools(&list, &list).is_empty());
    }

    #[test]
    fn the_hash_ignores_key_order_and_order_free_arrays(list in arb_tools()) {
        // Of two tools with one name the later wins, so keep one per name before reversing the list.
        let mut seen = std::collections::BTreeSet::new();
        let list: Vec<Value> =
            list.into_iter().filter(|t| seen.insert(t.get("name").and_then(Value::as_str).map(String::from))).collect();
        let reordered: Vec<Value> = list.iter().rev().map(shuffle_tool).collect();
        prop_assert_eq!(schema_hash(&list), schema_hash(&reordered));
        prop_assert!(diff_tools(&list, &reordered).is_empty());
    }

    /// A list seen before (the baseline, or the newest snapshot) skips normalising: every sequence of
    /// lists, probe failures and acceptances under every policy gives the outputs, hashes, counts and state
    /// that normalising each list gives.
    #[test]
    fn lists_seen_before_are_observed_as_if_normalised(
        lists in prop::collection::vec(arb_tools(), 1..4),
        steps in prop::collection::vec((0usize..4, 0u8..6), 1..12),
        policy in prop::sample::select(vec![BaselinePolicy::Manual, BaselinePolicy::Auto, BaselinePolicy::Compatible]),
    ) {
        let (mut fast, mut reference) = (ServerState::default(), ServerState::default());
        for (offset, (list, action)) in steps.into_iter().enumerate() {
            let at = context(offset as u64);
            match action {
                0 => {
                    fast.probe_failed("down");
                    reference.probe_failed("down");
                }
                1 => prop_assert_eq!(fast.accept("op", at), reference.accept("op", at)),
                _ => {
                    let snapshot = snapshot(Value::Array(lists[list % lists.len()].clone()));
                    let (a, b) = (fast.observe_list(&snapshot, at, policy), reference.observe_list_indexing(std::sync::Arc::new(ToolsText::from_values(&snapshot.tools)), None, at, policy.into()));
                    prop_assert_eq!(&a.outputs, &b.outputs);
                    prop_assert_eq!((&a.hash, a.tool_count), (&b.hash, b.tool_count));
                }
            }
            prop_assert_eq!(&fast, &reference);
        }
    }

    /// A schema compared with itself rewritten through equivalent union forms — in a one-branch union,
    /// beside a narrower copy of itself, beside itself — has the same hash and no change.
    #[test]
    fn a_schema_rewritten_as_an_equivalent_union_is_no_change(
        schema in arb_simple_schema(),
        form in 0u8..4,
        extra in pick(vec![json!({"minLength": 3}), json!({"required": ["zz"]}), json!({"maxItems": 2})]),
    ) {
        let Some(object) = schema.as_object().filter(|o| !o.is_empty()) else { return Ok(()) };
        // Texts inside stay with the schema (a branch with a text of its own is never dropped).
        let mut narrower = object.clone();
        let Some((key, value)) = extra.as_object().and_then(|e| e.iter().next()) else { return Ok(()) };
        if narrower.contains_key(key) || ["description", "title", "$ref", "$defs", "anyOf", "oneOf", "allOf"].iter().any(|k| object.contains_key(*k)) {
            return Ok(());
        }
        narrower.insert(key.clone(), value.clone());
        let rewritten = match form {
            0 => json!({"anyOf": [schema]}),
            1 => json!({"anyOf": [schema, Value::Object(narrower)]}),
            2 => json!({"anyOf": [Value::Object(narrower), schema]}),
            _ => json!({"anyOf": [schema, schema]}),
        };
        let old = tools(json!([{"name": "t", "inputSchema": {"type": "object", "properties": {"p": schema}}}]));
        let new = tools(json!([{"name": "t", "inputSchema": {"type": "object", "properties": {"p": rewritten}}}]));
        prop_assert_eq!(render(&diff_tools(&old, &new)), Vec::<String>::new());
        prop_assert_eq!(schema_hash(&old), schema_hash(&new));
    }

    #[test]
    fn a_bounded_listing_is_the_whole_diff_cut_short_and_counted(
        old in arb_tools(),
        new in arb_tools(),
        most in 1usize..4,
        most_bytes in prop::sample::select(vec![0usize, 40, 400, usize::MAX]),
        per_tool in 1usize..3,
        entries in 0usize..4,
    ) {
        let (old, new) = (ToolsText::from_values(&old), ToolsText::from_values(&new));
        let old_index = ToolIndex::new(&old);
        let new_index = ToolIndex::reusing(&new, &[IndexedList { tools: &old, index: &old_index }]);
        let (old, new) =
            (IndexedList { tools: &old, index: &old_index }, IndexedList { tools: &new, index: &new_index });
        let whole = diff::diff_indexed_within(old, new, (usize::MAX, usize::MAX), Split::MACHINE, Severity::Medium);
        prop_assert!(whole.omitted.is_empty());
        let room = ToolRoom { changes: per_tool, bytes: most_bytes, entries };
        let split = Split { threads: |_| 3, at_once: 2, per_tool: room };
        let cut = diff::diff_indexed_within(old, new, (most, most_bytes), split, Severity::Medium);
        // Changes found tool by tool on other threads are listed as one thread listing them all would.
        let one = Split { threads: |_| 1, at_once: usize::MAX, per_tool: ToolRoom::UNBOUNDED };
        prop_assert_eq!(&cut, &diff::diff_indexed_within(old, new, (most, most_bytes), one, Severity::Medium));
        // The listed changes are the whole diff's, in its order, and the rest are counted by classification.
        let mut rest = whole.changes.iter();
        for change in &cut.changes {
            prop_assert!(rest.any(|c| c == change), "{:?} is not in the whole diff, in order", change);
        }
        let mut counted = cut.omitted.clone();
        for change in &cut.changes {
            *counted.entry(change.classification).or_default() += 1;
        }
        let mut all: std::collections::BTreeMap<Classification, u64> = Default::default();
        for change in &whole.changes {
            *all.entry(change.classification).or_default() += 1;
        }
        prop_assert_eq!(counted, all);
        prop_assert_eq!(cut.total(), whole.total());
        // The worst of everything is listed.
        prop_assert_eq!(max_classification(&cut.changes), max_classification(&whole.changes));
        prop_assert_eq!(max_severity(&cut.changes), max_severity(&whole.changes));
        prop_assert_eq!(cut.changes.is_empty(), whole.changes.is_empty());
    }

    /// Indexing and diffing split over threads, tools diffed a few at a time into listings of their own
    /// (too small for some: diffed again), give what one thread diffing them all gives, in the same order.
    #[test]
    fn any_split_indexes_and_diffs_as_one_thread(
        old in prop::collection::vec(arb_tools(), 0..12),
        new in prop::collection::vec(arb_tools(), 0..12),
        threads in 2usize..5,
        at_once in 1usize..6,
        per_tool in (1usize..4, prop::sample::select(vec![0usize, 40, 400, usize::MAX]), 0usize..4),
    ) {
        // Many names: the tools of each generated list get a suffix (of five, so names recur).
        let named = |lists: Vec<Vec<Value>>| -> ToolsText {
            let tools: Vec<Value> = (lists.into_iter().enumerate())
                .flat_map(|(i, list)| list.into_iter().map(move |mut tool| {
                    if let Some(name) = tool.get("name").and_then(Value::as_str).map(str::to_owned) {
                        tool["name"] = json!(format!("{name}{}", i % 5));
                    }
                    tool
                }))
                .collect();
            ToolsText::from_values(&tools)
        };
        let (old, new) = (named(old), named(new));
        let threads: fn(usize) -> usize = match threads { 2 => |_| 2, 3 => |_| 3, _ => |_| 4 };
        let one = Split { threads: |_| 1, at_once: usize::MAX, per_tool: ToolRoom::UNBOUNDED };
        let per_tool = ToolRoom { changes: per_tool.0, bytes: per_tool.1, entries: per_tool.2 };
        let split = Split { threads, at_once, per_tool };
        let old_index = ToolIndex::new_over(&old, one.threads);
        prop_assert_eq!(&ToolIndex::new_over(&old, split.threads), &old_index);
        let known = [IndexedList { tools: &old, index: &old_index }];
        let new_index = ToolIndex::reusing_over(&new, &known, one.threads);
        prop_assert_eq!(&ToolIndex::reusing_over(&new, &known, split.threads), &new_index);
        let (old, new) = (known[0], IndexedList { tools: &new, index: &new_index });
        let whole = (usize::MAX, usize::MAX);
        prop_assert_eq!(diff::diff_indexed_within(old, new, whole, split, Severity::Medium), diff::diff_indexed_within(old, new, whole, one, Severity::Medium));
    }

    /// The worker's check of a list held as text (the borrowed reader where it can) refuses what the check
    /// of values refuses, with the same reason, at any limits: depth either side of the reader's own
    /// nesting limit, references or none.
    #[test]
    fn a_list_held_as_text_is_checked_as_its_values(
        list in arb_tools(),
        simple in prop::collection::vec(arb_simple_tool(), 0..3),
        nesting in 0usize..4,
        max_depth in prop::sample::select(vec![0usize, 1, 2, 3, 5, 8, 63, 64, 65, 66, 80]),
        max_ref_nodes in prop::sample::select(vec![0usize, 3, 50, 100_000]),
        bomb in 0usize..5,
    ) {
        let deep = [60usize, 64, 65, 70][nesting];
        let deep = (0..deep).fold(json!({"$ref": "#"}), |inner, _| json!({"n": inner}));
        let mut tools: Vec<Value> = list.into_iter().chain(simple).collect();
        tools.push(json!({"name": "deep", "inputSchema": deep}));
        tools.push(json!({"name": "bomb", "inputSchema": ref_bomb(bomb)}));
        let limits = driftline_schemas::ToolListLimits { max_depth, max_ref_nodes, ..Default::default() };
        let as_text = check_tools_text(&limits, &ToolsText::from_values(&tools)).map_err(|err| err.to_string());
        prop_assert_eq!(as_text, check_tool_list(&limits, &tools).map_err(|err| err.to_string()));
    }

    #[test]
    fn a_changed_hash_always_comes_with_a_change(old in arb_tools(), new in arb_tools()) {
        let changes = diff_tools(&old, &new);
        prop_assert_eq!(schema_hash(&old) != schema_hash(&new), !changes.is_empty(), "changes {:?}", render(&changes));
    }
}

/// A value from a few that sit at the edges of what normalising reads.
fn pick(values: Vec<Value>) -> impl Strategy<Value = Value> {
    prop::sample::select(values)
}

/// Texts with and without layout to lose.
fn arb_text() -> impl Strategy<Value = Value> {
    pick(vec![
        json!("Search the web."),
        json!("  two  spaces\n"),
        json!("line\r\nbreak\n\n\npara"),
        json!("tab\there"),
        json!(""),
        json!("quote \" and \\ backslash"),
        json!(3),
    ])
}

/// Schemas mostly within what the direct writer handles, with the keywords and values around its edges
/// (and some beyond them: a `$ref`, a union, `const`, a `type` list, keys beyond the BMP).
fn arb_simple_schema() -> impl Strategy<Value = Value> {
    let names = || {
        prop::collection::vec(
            pick(vec![json!("a"), json!("b"), json!("c"), json!("a b"), json!("é"), json!("x\"y"), json!(1)]),
            0..4,
        )
        .prop_map(Value::Array)
    };
    let bound = || {
        pick(vec![
            json!(0),
            json!(1),
            json!(1.5),
            json!(-0.0),
            json!(-1e300),
            json!(1e300),
            json!(9007199254740991u64),
            json!(-9007199254740991i64),
            json!(9007199254740990u64),
            json!("5"),
        ])
    };
    let leaf_schema = pick(vec![
        json!({}),
        json!({"type": "string"}),
        json!({"type": "integer", "minimum": 0}),
        json!({"$comment": "only a comment"}),
        json!(true),
        json!(false),
        json!({"$ref": "#/$defs/a"}),
        json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
        json!("not a schema"),
    ]);
    leaf_schema.prop_recursive(3, 24, 6, move |inner| {
        let member = prop_oneof![
            pick(vec![
                json!("string"),
                json!("integer"),
                json!("number"),
                json!("object"),
                json!(["string", "null"]),
                json!(5)
            ])
            .prop_map(|v| ("type".to_owned(), v)),
            names().prop_map(|v| ("required".to_owned(), v)),
            names().prop_map(|v| ("enum".to_owned(), v)),
            (pick(vec![json!("minimum"), json!("maximum")]), bound())
                .prop_map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v)),
            (
                pick(vec![
                    json!("minLength"),
                    json!("minItems"),
                    json!("minProperties"),
                    json!("maxLength"),
                    json!("maxItems")
                ]),
                pick(vec![json!(0), json!(0.0), json!(1), json!(9007199254740991u64), json!(1e300)])
            )
                .prop_map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v)),
            (pick(vec![json!("uniqueItems"), json!("deprecated"), json!("readOnly")]), any::<bool>())
                .prop_map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), json!(v))),
            (
                pick(vec![
                    json!("items"),
                    json!("additionalProperties"),
                    json!("propertyNames"),
                    json!("not")
                ]),
                inner.clone()
            )
                .prop_map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v)),
            prop::collection::btree_map(
                pick(vec![json!("a"), json!("b"), json!("description"), json!("$ref"), json!("\u{1f600}")])
                    .prop_map(|k| k.as_str().unwrap_or_default().to_owned()),
                inner.clone(),
                0..3
            )
            .prop_map(|m| ("properties".to_owned(), Value::Object(m.into_iter().collect()))),
            prop::collection::vec(inner.clone(), 0..3).prop_map(|v| ("items".to_owned(), Value::Array(v))),
            (pick(vec![json!("description"), json!("title")]), arb_text())
                .prop_map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v)),
            (
                pick(vec![
                    json!("$schema"),
                    json!("$comment"),
                    json!("$defs"),
                    json!("default"),
                    json!("format"),
                    json!("const"),
                    json!("exclusiveMinimum")
                ]),
                pick(vec![
                    json!("x"),
                    json!({"a": {"type": "string"}}),
                    json!({"$ref": "#"}),
                    json!(1),
                    json!({"required": ["b", "a"]})
                ])
            )
                .prop_map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v)),
        ];
        prop::collection::vec(member, 0..6).prop_map(|members| Value::Object(members.into_iter().collect()))
    })
}

/// Tools around the edges of what the direct writer handles.
fn arb_simple_tool() -> impl Strategy<Value = Value> {
    let hints = prop::collection::btree_map(
        pick(vec![
            json!("readOnlyHint"),
            json!("destructiveHint"),
            json!("idempotentHint"),
            json!("openWorldHint"),
            json!("title"),
        ])
        .prop_map(|k| k.as_str().unwrap_or_default().to_owned()),
        pick(vec![json!(true), json!(false), json!(null), json!("  A  title ")]),
        0..4,
    );
    (
        prop::option::of(arb_simple_schema()),
        prop::option::of(arb_simple_schema()),
        prop::option::of(arb_text()),
        prop::option::of(hints),
        prop::option::of(pick(vec![
            json!({"taskSupport": "forbidden"}),
            json!({"taskSupport": "optional"}),
            json!({"taskSupport": null}),
            json!("odd"),
        ])),
        prop::option::of(pick(vec![
            json!({"v": 1}),
            json!(null),
            json!([{"src": "x"}]),
            json!({"\u{1f600}": 1, "\u{e000}": 2}),
        ])),
    )
        .prop_map(|(input, output, description, hints, execution, extra)| {
            let mut tool = json!({"name": "t"});
            let mut set = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    tool[key] = value;
                }
            };
            set("inputSchema", input);
            set("outputSchema", output);
            set("description", description);
            set("annotations", hints.map(|h| Value::Object(h.into_iter().collect())));
            set("execution", execution);
            set("icons", extra.clone());
            set("_meta", extra);
            tool
        })
}

/// The canonical JSON of a tool's normal form, the slow way.
fn normal_form_text(tool: &Value) -> String {
    let Some((name, object)) = normal::tool_of(tool) else { return String::new() };
    canonical_json(&Value::Object(normalize_tool(name, object).definition))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The direct writer and the normal form write every tool alike.
    #[test]
    fn definitions_are_written_as_their_normal_form(tool in arb_simple_tool()) {
        let (name, object) = normal::tool_of(&tool).expect("a tool");
        let mut text = String::new();
        definition_text(name, object, &mut text);
        prop_assert_eq!(text, normal_form_text(&tool));
    }

    #[test]
    fn arbitrary_tools_are_written_as_their_normal_form(schema in arb_json(), output in arb_json()) {
        let tool = json!({"name": "t", "inputSchema": schema, "outputSchema": output});
        let (name, object) = normal::tool_of(&tool).expect("a tool");
        let mut text = String::new();
        definition_text(name, object, &mut text);
        prop_assert_eq!(text, normal_form_text(&tool));
    }
}

/// A tool's text as a server might write it: members in reverse order, each object's last member also
/// declared first as `0` (the later wins), `o` and `s` escaped in every string and key.
fn scrambled(value: &Value) -> String {
    let string = |text: &str| {
        serde_json::to_string(text).unwrap_or_default().replace('o', "\\u006f").replace('s', "\\u0073")
    };
    match value {
        Value::String(text) => string(text),
        Value::Array(items) => format!("[ {} ]", items.iter().map(scrambled).collect::<Vec<_>>().join(" , ")),
        Value::Object(map) => {
            let mut members: Vec<String> = map
                .iter()
                .rev()
                .map(|(key, value)| format!("{}: {}", string(key), scrambled(value)))
                .collect();
            if let Some(last) = map.keys().next_back() {
                members.insert(0, format!("{}:0", string(last)));
            }
            format!("{{\n{}\n}}", members.join(",\n"))
        }
        other => other.to_string(),
    }
}

/// A tool's digest from its text (as the index reads it) is its digest from its value, however written.
fn check_entry_digest(tool: &Value) -> Result<(), TestCaseError> {
    let (name, object) = normal::tool_of(tool).expect("a tool");
    let mut scratch = String::new();
    let expected = (name.to_owned(), definition_digest(name, object, &mut scratch));
    for text in [tool.to_string(), serde_json::to_string_pretty(tool).unwrap_or_default(), scrambled(tool)] {
        prop_assert_eq!(&serde_json::from_str::<Value>(&text).ok(), &Some(tool.clone()), "{}", text);
        let entry = serde_json::value::RawValue::from_string(text.clone()).expect("json");
        prop_assert_eq!(entry_digest(&entry, &mut scratch), Some(expected.clone()), "{}", text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn a_tool_is_digested_alike_from_its_text_and_its_value(tool in arb_simple_tool()) {
        check_entry_digest(&tool)?;
    }

    #[test]
    fn any_schema_is_digested_alike_from_its_text_and_its_value(schema in arb_json(), output in arb_json()) {
        check_entry_digest(&json!({"name": "t", "inputSchema": schema, "outputSchema": output}))?;
    }
}

#[test]
fn entries_that_are_no_tools_have_no_digest() {
    let mut scratch = String::new();
    for entry in ["1", "[]", r#"{"name": 1}"#, r#"{"description": "d"}"#, r#"{"name": "a", "name": null}"#] {
        let entry = serde_json::value::RawValue::from_string(entry.to_owned()).expect("json");
        assert_eq!(entry_digest(&entry, &mut scratch), None, "{entry}");
    }
    // Nested deeper than the text reader goes: read as a value, as before.
    let deep =
        format!(r#"{{"name": "d", "inputSchema": {{"default": {}1{}}}}}"#, "[".repeat(100), "]".repeat(100));
    let value: Value = serde_json::from_str(&deep).expect("within serde_json's limit");
    check_entry_digest(&value).expect("the same digest");
}

proptest! {
    /// A list's hash from its index is the hash of its normal forms; an index taking digests from lists
    /// indexed before equals one built afresh.
    #[test]
    fn indexes_agree_with_normal_forms_and_with_each_other(
        old in prop::collection::vec(prop_oneof![arb_simple_tool(), arb_tools().prop_map(|l| l.into_iter().next().unwrap_or_default())], 0..5),
        new in prop::collection::vec(prop_oneof![arb_simple_tool(), arb_tools().prop_map(|l| l.into_iter().next().unwrap_or_default())], 0..5),
        keep in prop::collection::vec(any::<bool>(), 5),
    ) {
        let rename = |list: Vec<Value>, base: usize| -> Vec<Value> {
            list.into_iter().enumerate().map(|(i, mut tool)| {
                if tool.is_object() { tool["name"] = json!(format!("t{}", (i + base) % 4)); }
                tool
            }).collect()
        };
        let old = rename(old, 0);
        // Some of the old tools again, as declared: their digests come from the old index.
        let mut new = rename(new, 2);
        new.extend(old.iter().zip(&keep).filter(|(_, k)| **k).map(|(t, _)| t.clone()));
        let (old_text, new_text) = (ToolsText::from_values(&old), ToolsText::from_values(&new));
        let old_index = ToolIndex::new(&old_text);
        prop_assert_eq!(old_index.hash(), tools_hash(&normalize_tools(&old)));
        let reused = ToolIndex::reusing(&new_text, &[IndexedList { tools: &old_text, index: &old_index }]);
        prop_assert_eq!(&reused, &ToolIndex::new(&new_text));
        prop_assert_eq!(reused.hash(), tools_hash(&normalize_tools(&new)));
        // The same tools in other text (indented): nothing is reused, nothing differs.
        let pretty = ToolsText::parse(&serde_json::to_string_pretty(&new).unwrap_or_default()).unwrap_or_default();
        prop_assert_eq!(&ToolIndex::reusing(&pretty, &[IndexedList { tools: &old_text, index: &old_index }]), &reused);
        // The old list edited in place (tools kept at their places, others replaced, names recurring): the
        // kept ones are taken by place, from either known list, and the index is the one built afresh.
        let mut in_place = old.clone();
        for ((tool, keep), other) in in_place.iter_mut().zip(&keep).zip(new.iter().cycle()) {
            if !keep {
                *tool = other.clone();
            }
        }
        let in_place_text = ToolsText::from_values(&in_place);
        let fresh = ToolIndex::new(&in_place_text);
        let old_list = IndexedList { tools: &old_text, index: &old_index };
        let new_list = IndexedList { tools: &new_text, index: &reused };
        for known in [vec![old_list], vec![new_list, old_list], vec![new_list]] {
            prop_assert_eq!(&ToolIndex::reusing(&in_place_text, &known), &fresh);
        }
    }
}

#[test]
fn simple_tools_are_written_directly() {
    let check = |tool: Value, expected: Written| {
        let (name, object) = normal::tool_of(&tool).expect("a tool");
        let mut text = String::new();
        assert_eq!(definition_text(name, object, &mut text), expected, "{tool}");
        assert_eq!(text, normal_form_text(&tool), "{tool}");
    };
    check(
        json!({"name": "search", "description": "Search  the web.\n", "annotations": {"readOnlyHint": true, "destructiveHint": false},
            "inputSchema": {"type": "object", "$schema": "x", "required": ["q", "limit"],
                "properties": {"q": {"type": "string", "minLength": 0}, "limit": {"type": "integer", "maximum": 100},
                    "mode": {"enum": ["b", "a"]}}, "additionalProperties": false}}),
        Written::Directly,
    );
    check(json!({"name": "bare"}), Written::Directly);
    check(
        json!({"name": "r", "inputSchema": {"properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {}}}}),
        Written::FromNormalForm,
    );
    check(
        json!({"name": "u", "inputSchema": {"properties": {"p": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}),
        Written::FromNormalForm,
    );
}
