//! The offline CLI as a user runs it: outputs and exit codes (0 ok, 1 drift at --fail-on, 2 usage/input).

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn driftline(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start driftline");
    // A command that fails on its arguments exits without reading stdin: a broken pipe here is expected.
    if let Err(err) = child.stdin.take().expect("stdin").write_all(stdin) {
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {err}");
    }
    let output = child.wait_with_output().expect("run driftline");
    Run {
        code: output.status.code().expect("exit code"),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    }
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tool-lists").join(name).display().to_string()
}

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("driftline-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write temp file");
    path
}

/// Compares with a golden file; `UPDATE_GOLDEN=1` rewrites it.
fn check_golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
    }
    let expected =
        std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("missing golden {}", path.display()));
    assert_eq!(actual, expected, "output differs from {} (UPDATE_GOLDEN=1 rewrites it)", path.display());
}

fn json_out(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|err| panic!("stdout is not JSON ({err}): {}", run.stdout))
}

/// `shape` in json: the whole output object.
fn check_shape(input: &str, extra: &[&str], expected: Value) {
    let mut args = vec!["shape", "--format", "json"];
    args.extend_from_slice(extra);
    let run = driftline(&args, input.as_bytes());
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert_eq!(json_out(&run), expected, "input {input:?}");
}

#[test]
fn shape_outputs() {
    check_shape(
        r#"{"a": 1}"#,
        &[],
        json!({"outcome": "fingerprinted", "shape": "{a:number}",
            "hash": sha("{a:number}"),
            "hex8": "9db01548", "compact_bytes": 7}),
    );
    check_shape(
        r#""<truncated>""#,
        &[],
        json!({"outcome": "truncated_sentinel", "shape": null, "hash": null, "hex8": null, "compact_bytes": 13}),
    );
    check_shape(
        "{oops",
        &[],
        json!({"outcome": "unparseable", "shape": null, "hash": null, "hex8": null, "compact_bytes": null}),
    );
    check_shape(
        r#"{"bbb":1}"#,
        &["--max-bytes", "8"],
        json!({"outcome": "oversized", "shape": null, "hash": null, "hex8": null, "compact_bytes": 9}),
    );
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    check_shape(
        &deep,
        &[],
        json!({"outcome": "too_deep", "shape": null, "hash": null, "hex8": null, "compact_bytes": 258}),
    );
}

fn sha(text: &str) -> String {
    driftline_detectors::shape::shape_hash(text)
}

#[test]
fn shape_reads_a_file_and_prints_text() {
    let path = temp_file("value.json", r#"{"rows": [{"id": 1}], "ok": true}"#);
    let run = driftline(&["shape", path.to_str().expect("path")], b"");
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.starts_with("outcome        fingerprinted\nshape          {ok:bool,rows:[{id:number}]}\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn shape_usage_and_io_errors_exit_2() {
    let missing = driftline(&["shape", "/nonexistent/value.json"], b"");
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("cannot read /nonexistent/value.json"), "{}", missing.stderr);
    let bad_cap = driftline(&["shape", "--max-bytes", "0"], b"1");
    assert_eq!(bad_cap.code, 2);
    assert!(
        bad_cap.stderr.contains("--max-bytes = 0 is out of bounds: it must be in [1, 1048576]"),
        "{}",
        bad_cap.stderr
    );
    assert_eq!(driftline(&["shape", "--format", "yaml"], b"1").code, 2);
}

#[test]
fn diff_text_report() {
    let run = driftline(&["diff", &data("search-v1.json"), &data("search-v2.json")], b"");
    assert_eq!(run.code, 0, "no --fail-on: exit 0; stderr {}", run.stderr);
    check_golden("diff-search.txt", &run.stdout);
}

/// `--context-growth-tokens/--context-growth-percent`: a list that grew past either is a WARNING change of its
/// own, which `--fail-on warning` fails on.
#[test]
fn diff_raises_a_context_growth_past_the_limit() {
    let (v1, v2) = (data("search-v1.json"), data("search-v2.json"));
    let check = |limits: &[&str], raised: bool| {
        let mut args = vec!["diff", &v1, &v2, "--format", "json"];
        args.extend_from_slice(limits);
        let run = driftline(&args, b"");
        let out = json_out(&run);
        let grew = out["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .filter(|c| c["change_type"] == "context_cost_grew")
            .map(|c| (c["classification"].clone(), c["before"].clone(), c["after"].clone()))
            .collect::<Vec<_>>();
        let expected = if raised { vec![(json!("WARNING"), json!(47), json!(74))] } else { vec![] };
        assert_eq!(grew, expected, "{limits:?}");
    };
    check(&[], false);
    check(&["--context-growth-tokens", "27"], false);
    check(&["--context-growth-tokens", "26"], true);
    check(&["--context-growth-percent", "58"], false);
    check(&["--context-growth-percent", "57"], true);
    // In text, with its consequence; and `--fail-on warning` fails on it alone when it is the worst.
    let shrink = driftline(&["diff", &v2, &v1, "--context-growth-tokens", "1"], b"");
    assert!(!shrink.stdout.contains("context_cost_grew"), "a list that shrank: {}", shrink.stdout);
    let run = driftline(&["diff", &v1, &v2, "--context-growth-tokens", "1"], b"");
    assert!(run.stdout.contains("WARNING    context_cost_grew"), "{}", run.stdout);
    assert!(run.stdout.contains("grew from 47 to 74 tokens, past the project's limit"), "{}", run.stdout);
    // A tool added is COMPATIBLE: only the growth makes it fail `--fail-on warning`.
    let tools = temp_file("growth-old.json", r#"[{"name": "a"}]"#);
    let grown =
        temp_file("growth-new.json", r#"[{"name": "a"}, {"name": "b", "description": "A second tool."}]"#);
    let (tools, grown) = (tools.to_str().expect("path"), grown.to_str().expect("path"));
    let run = driftline(&["diff", tools, grown, "--fail-on", "warning"], b"");
    assert_eq!(run.code, 0, "a tool added: {}", run.stdout);
    let run =
        driftline(&["diff", tools, grown, "--fail-on", "warning", "--context-growth-percent", "50"], b"");
    assert_eq!(run.code, 1, "grown past 50 %: {}", run.stdout);
    let bad = driftline(&["diff", tools, grown, "--context-growth-percent", "10001"], b"");
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--context-growth-percent"), "{}", bad.stderr);
}

#[test]
fn diff_json_report() {
    let run = driftline(&["diff", &data("search-v1.json"), &data("search-v2.json"), "--format", "json"], b"");
    assert_eq!(run.code, 0);
    let out = json_out(&run);
    assert_eq!(out["max_classification"], "BREAKING");
    assert_eq!(out["previous_hash"].as_str().map(str::len), Some(8));
    let keys: Vec<&String> = out.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["changes", "context_cost", "current_hash", "max_classification", "previous_hash"]);
    // What each list costs a model's context, in tokens and bytes, and why it changed.
    assert_eq!(
        out["context_cost"],
        json!({"encoding": "o200k_base", "before": {"tokens": 47, "bytes": 189}, "after": {"tokens": 74, "bytes": 295},
            "summary": "+27 tokens (+57.4 %): 1 tool removed, 1 description longer"})
    );
    let first = &out["changes"][0];
    let fields: Vec<&String> = first.as_object().expect("change").keys().collect();
    assert_eq!(
        fields,
        [
            "after",
            "before",
            "change_type",
            "classification",
            "direction",
            "param_name",
            "path",
            "security_flags",
            "tool_name"
        ]
    );
    check_golden("diff-search.json", &serde_json::to_string_pretty(&out).expect("json"));
}

#[test]
fn diff_exit_codes_are_equal_across_formats() {
    let (v1, v2) = (data("search-v1.json"), data("search-v2.json"));
    // v1 -> v1: nothing; v1 -> v2: breaking; a compatible-only change; a warning-only change.
    let compatible = temp_file("compatible.json", r#"{"tools": [{"name": "a"}, {"name": "b"}]}"#);
    let base = temp_file("base.json", r#"{"tools": [{"name": "a"}]}"#);
    let warning = temp_file("warning.json", r#"[{"name": "a", "description": "now described"}]"#);
    let cases: &[(&str, &str, Option<&str>, i32)] = &[
        (&v1, &v1, Some("compatible"), 0),
        (&v1, &v2, None, 0),
        (&v1, &v2, Some("breaking"), 1),
        (&v1, &v2, Some("compatible"), 1),
        (base.to_str().expect("p"), compatible.to_str().expect("p"), Some("breaking"), 0),
        (base.to_str().expect("p"), compatible.to_str().expect("p"), Some("warning"), 0),
        (base.to_str().expect("p"), compatible.to_str().expect("p"), Some("compatible"), 1),
        (base.to_str().expect("p"), warning.to_str().expect("p"), Some("warning"), 1),
        (base.to_str().expect("p"), warning.to_str().expect("p"), Some("breaking"), 0),
    ];
    for (old, new, fail_on, expected) in cases {
        for format in ["text", "json"] {
            let mut args = vec!["diff", old, new, "--format", format];
            if let Some(level) = fail_on {
                args.extend(["--fail-on", level]);
            }
            let run = driftline(&args, b"");
            assert_eq!(run.code, *expected, "{args:?}: {}", run.stderr);
        }
    }
}

#[test]
fn diff_input_errors_exit_2() {
    let not_json = temp_file("not.json", "{");
    let wrong = temp_file("wrong.json", r#"{"result": {"items": []}}"#);
    for (file, message) in [
        (not_json.to_str().expect("p").to_owned(), "is not valid JSON"),
        (wrong.to_str().expect("p").to_owned(), "expected a tools array"),
        ("/nonexistent.json".to_owned(), "cannot read /nonexistent.json"),
    ] {
        for format in ["text", "json"] {
            let run = driftline(&["diff", &data("search-v1.json"), &file, "--format", format], b"");
            assert_eq!(run.code, 2, "{file}");
            assert!(run.stderr.contains(message), "{file}: {}", run.stderr);
            assert!(run.stdout.is_empty());
        }
    }
    // References fanning out past the server's limit (1,000,000 copied nodes): refused at once.
    let bomb: Vec<Value> =
        (0..40).map(|i| json!({"name": format!("t{i}"), "inputSchema": support::ref_bomb(20)})).collect();
    let bomb = temp_file("bomb.json", &Value::Array(bomb).to_string());
    let run = driftline(&["diff", &data("search-v1.json"), bomb.to_str().expect("path")], b"");
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("limits.max_ref_expansion_nodes"), "{}", run.stderr);
    assert_eq!(driftline(&["diff", &data("search-v1.json")], b"").code, 2);
    assert_eq!(driftline(&["diff", "a", "b", "--fail-on", "sometimes"], b"").code, 2);
}

#[test]
fn diff_reads_a_tools_array_a_tools_object_and_a_tools_list_response_alike() {
    let tools: Value =
        serde_json::from_str(&std::fs::read_to_string(data("search-v2.json")).expect("read")).expect("json");
    let expected = driftline(&["diff", &data("search-v1.json"), &data("search-v2.json")], b"");
    assert!(expected.stdout.contains("Schema drift"), "{}", expected.stdout);
    for (name, wrapped) in [
        ("tools-object.json", json!({"tools": tools})),
        ("tools-response.json", json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}})),
    ] {
        let file = temp_file(name, &wrapped.to_string());
        let run = driftline(&["diff", &data("search-v1.json"), file.to_str().expect("path")], b"");
        assert_eq!((run.code, &run.stdout), (expected.code, &expected.stdout), "{name}");
    }
}

/// One tool whose `mode` enum holds 3,000 values, each `prefix` and a number.
fn wide_enum(prefix: &str) -> String {
    let values: Vec<String> = (0..3_000).map(|i| format!("{prefix}{i}")).collect();
    json!([{"name": "pick", "inputSchema": {"type": "object",
        "properties": {"mode": {"type": "string", "enum": values}}}}])
    .to_string()
}

#[test]
fn diff_lists_a_bounded_number_of_changes_and_counts_the_rest() {
    // An enum rewritten whole: 3,000 values removed (BREAKING), 3,000 added (COMPATIBLE).
    let (old, new) =
        (temp_file("wide-old.json", &wide_enum("a")), temp_file("wide-new.json", &wide_enum("b")));
    let (old, new) = (old.to_str().expect("path"), new.to_str().expect("path"));
    let run = driftline(&["diff", old, new, "--fail-on", "breaking"], b"");
    assert_eq!(run.code, 1, "breaking drift: exit 1; stderr {}", run.stderr);
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(first.ends_with(": 6000 changes (3000 breaking, 3000 compatible)"), "{first}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[lines.len().saturating_sub(3)..],
        [
            "  … and 4000 more changes not listed (2000 breaking, 2000 compatible): at most 1000 of each kind are listed.",
            "",
            "Context cost (o200k_base): 11,025 → 11,025 tokens, no change in tokens; 22,988 → 22,988 bytes",
        ]
    );
    let out = json_out(&driftline(&["diff", old, new, "--format", "json"], b""));
    assert_eq!(out["changes"].as_array().map(Vec::len), Some(2_000));
    assert_eq!(out["omitted_changes"], json!({"COMPATIBLE": 2_000, "BREAKING": 2_000}));
}

/// A reader that stops early (`driftline diff … | head -1`) ends the command quietly: no panic, no
/// backtrace, as any Unix filter (the exit is SIGPIPE's).
#[test]
fn diff_piped_into_a_reader_that_stops_early_ends_quietly() {
    let (old, new) =
        (temp_file("piped-old.json", &wide_enum("a")), temp_file("piped-new.json", &wide_enum("b")));
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(["diff", old.to_str().expect("path"), new.to_str().expect("path")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start driftline");
    // Read one line, then close the pipe: the report (2,000 listed changes) is far longer than a pipe holds.
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("first line");
    assert!(first.contains("6000 changes"), "{first}");
    drop(stdout);
    let output = child.wait_with_output().expect("run driftline");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "a closed pipe panics: {stderr}");
    assert!(stderr.is_empty(), "nothing on stderr: {stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        const SIGPIPE: i32 = 13;
        assert_eq!(output.status.signal(), Some(SIGPIPE), "ended by SIGPIPE: {:?}", output.status);
    }
}

fn span(id: usize, value: Value) -> String {
    json!({"span_id": format!("s{id}"), "server": "weather", "tool": "lookup",
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 3, "status": "success", "return_value": value})
    .to_string()
}

#[test]
fn replay_prints_one_line_per_signal() {
    let mut lines: Vec<String> = (0..10).map(|i| span(i, json!({"temp": 21.5, "city": "x"}))).collect();
    lines.push(String::new());
    lines.push(
        json!({"span_id": "e", "server": "weather", "tool": "lookup", "started_at": "2026-01-01T00:00:00Z",
        "duration_ms": 1, "status": "error", "error": "boom"})
        .to_string(),
    );
    lines.push(span(12, json!({"temp": "hot", "city": "x"})));
    let path = temp_file("spans.jsonl", &lines.join("\n"));
    let run = driftline(&["replay", path.to_str().expect("path")], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let signals: Vec<Value> =
        run.stdout.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(
        signals,
        [
            json!({"index": 12, "fingerprint": "tool_schema_drift:lookup:dbefa976", "server": "weather", "tool": "lookup",
            "shape": "{city:string,temp:string}", "shape_hash": "dbefa976", "baseline_hash": "a18bbd45",
            "baseline_count": 10, "window_size": 10, "ranking": "breaking",
            "reasons": [{"path": "temp", "change": "type_changed", "before": "number", "after": "string"}]})
        ]
    );
    // Thresholds change the answer: with more history required nothing fires.
    let run = driftline(
        &["replay", path.to_str().expect("path"), "--min-history-calls", "11", "--history-window", "20"],
        b"",
    );
    assert_eq!((run.code, run.stdout.as_str()), (0, ""));
    // With a byte cap below the value size every value is oversized: nothing conclusive, nothing fires.
    let run = driftline(&["replay", path.to_str().expect("path"), "--max-bytes", "10"], b"");
    assert_eq!((run.code, run.stdout.as_str()), (0, ""));
}

#[test]
fn replay_errors_exit_2() {
    let mut lines: Vec<String> = (0..10).map(|i| span(i, json!({"v": 1}))).collect();
    lines.push(span(10, json!({"v": "s"})));
    lines.push("{not json".to_owned());
    lines.push(span(12, json!({"v": "s"})));
    let path = temp_file("bad.jsonl", &lines.join("\n"));
    let path = path.to_str().expect("path");
    let run = driftline(&["replay", path], b"");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains(&format!("{path}:12: invalid span")), "{}", run.stderr);
    // Signals before the bad line were printed; nothing for it or after it.
    let indices: Vec<u64> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json")["index"].as_u64().expect("index"))
        .collect();
    assert_eq!(indices, [10]);

    let run = driftline(&["replay", path, "--history-window", "5"], b"");
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("history_window = 5 is out of bounds: it must be in [10, 10000]"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
    let wrong_field = temp_file(
        "field.jsonl",
        r#"{"span_id":"s","server":"a","tool":"t","started_at":"2026-01-01T00:00:00Z","duration_ms":1,"status":"ok"}"#,
    );
    let run = driftline(&["replay", wrong_field.to_str().expect("path")], b"");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains(":1: invalid span: unknown variant `ok`"), "{}", run.stderr);
}

const V1: &str = "examples/tool-lists/search-v1.json";
const V2: &str = "examples/tool-lists/search-v2.json";
const IGNORE: &str = "tests/data/diff-ignore.toml";

/// The SARIF 2.1.0 schema as published by OASIS, from the `serde-sarif` crate's sources (a dev-dependency,
/// pinned by Cargo.lock), located with `cargo metadata`.
fn sarif_schema() -> Value {
    let metadata = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    let metadata: Value = serde_json::from_slice(&metadata.stdout).expect("metadata JSON");
    let manifest = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "serde-sarif")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("serde-sarif among the packages");
    let schema = Path::new(manifest).with_file_name("src/schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema).expect("the schema")).expect("JSON");
    assert_eq!(
        schema["$id"],
        "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"
    );
    schema
}

#[test]
fn diff_sarif_validates_against_the_published_schema() {
    // The published file fails its meta-schema on the `language` pattern, which has a stray `]` (its errata
    // replace it): that pattern is read as the errata write it, the rest as published.
    let published = sarif_schema().to_string();
    let erratum = r#""^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$""#;
    assert!(published.matches(erratum).count() >= 2, "the erratum is where it was");
    let schema: Value =
        serde_json::from_str(&published.replace(erratum, r#""^[a-zA-Z]{2}(-[a-zA-Z]{2})?$""#)).expect("JSON");
    let validator = jsonschema::validator_for(&schema).expect("a validator");
    let run = driftline(&["diff", V1, V2, "--format", "sarif", "--ignore", IGNORE], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let log = json_out(&run);
    let errors: Vec<String> =
        validator.iter_errors(&log).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // And the crate's types generated from the same schema read it.
    let typed: serde_sarif::sarif::Sarif =
        serde_json::from_value(log.clone()).expect("serde-sarif reads the log");
    assert_eq!(typed.runs[0].results.as_ref().map(Vec::len), Some(5));
    let results = log["runs"][0]["results"].as_array().expect("results");
    let summary: Vec<(&str, &str, bool)> = results
        .iter()
        .map(|r| {
            (
                r["ruleId"].as_str().unwrap_or(""),
                r["level"].as_str().unwrap_or(""),
                r.get("suppressions").is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("required_param_added", "error", false),
            ("description_changed", "warning", false),
            ("optional_param_added", "warning", false),
            ("tool_removed", "error", true),
            ("expired_ignore", "warning", false),
        ]
    );
    // Each result points at the line naming its tool; the removed tool at the old file's.
    let location = |i: usize| {
        let physical = &results[i]["locations"][0]["physicalLocation"];
        (
            physical["artifactLocation"]["uri"].as_str().unwrap_or("").to_owned(),
            physical["region"]["startLine"].as_u64(),
        )
    };
    let line_of = |file: &str, needle: &str| {
        std::fs::read_to_string(file)
            .expect("file")
            .lines()
            .position(|l| l.contains(needle))
            .map(|i| i as u64 + 1)
    };
    assert_eq!(location(0), (V2.to_owned(), line_of(V2, "\"search_web\"")));
    assert_eq!(location(3), (V1.to_owned(), line_of(V1, "\"fetch\"")));
    assert_eq!(location(4), (IGNORE.to_owned(), line_of(IGNORE, "[[ignore]]").map(|first| first + 6)));
    assert_eq!(
        results[3]["suppressions"][0]["justification"],
        "fetch moved to the web-mcp server; the agents were switched over"
    );
    // Without changes, a valid log with no results.
    let same = driftline(&["diff", V1, V1, "--format", "sarif"], b"");
    let log = json_out(&same);
    assert!(validator.is_valid(&log));
    assert_eq!(log["runs"][0]["results"], json!([]));
}

#[test]
fn diff_github_annotations() {
    let run = driftline(&["diff", V1, V2, "--format", "github", "--ignore", IGNORE], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    check_golden("diff-search.github.txt", &run.stdout);
    assert!(run.stdout.lines().all(|l| l.starts_with("::")), "only workflow commands: {}", run.stdout);
}

#[test]
fn diff_markdown_summary() {
    let run = driftline(&["diff", V1, V2, "--format", "markdown", "--ignore", IGNORE], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    check_golden("diff-search.md", &run.stdout);
}

/// An entry suppresses exactly its change, in every format and in the verdict; one past its day suppresses
/// nothing and is a warning of its own.
#[test]
fn diff_ignore_file() {
    let ignore = |file: &str| temp_file("ignore.toml", file);
    // The one BREAKING change but the removed tool: ignoring it leaves `required_param_added`.
    let fetch = ignore("[[ignore]]\ntool = \"fetch\"\nchange = \"tool_removed\"\nreason = \"moved\"\n");
    let fetch = fetch.to_str().expect("path");
    let run = driftline(&["diff", V1, V2, "--format", "json", "--ignore", fetch], b"");
    let out = json_out(&run);
    let kinds: Vec<&str> = out["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["change_type"].as_str())
        .collect();
    assert!(!kinds.contains(&"tool_removed") && kinds.contains(&"required_param_added"), "{kinds:?}");
    assert_eq!(out["ignored"][0]["change"]["change_type"], "tool_removed");
    assert_eq!((&out["ignored"][0]["entry"], &out["ignored"][0]["reason"]), (&json!(1), &json!("moved")));
    let text = driftline(&["diff", V1, V2, "--ignore", fetch], b"");
    assert!(text.stdout.contains("Ignored BREAKING tool_removed fetch (entry 1: moved)"), "{}", text.stdout);
    assert!(!text.stdout.contains("BREAKING   tool_removed"), "{}", text.stdout);
    // Both BREAKING changes ignored: `--fail-on breaking` passes.
    let both = ignore("[[ignore]]\ntool = \"fetch\"\nreason = \"moved\"\n\n[[ignore]]\nchange = \"required_param_added\"\npath = \"filters\"\nreason = \"callers updated\"\n");
    let both = both.to_str().expect("path");
    assert_eq!(driftline(&["diff", V1, V2, "--fail-on", "breaking"], b"").code, 1);
    assert_eq!(driftline(&["diff", V1, V2, "--fail-on", "breaking", "--ignore", both], b"").code, 0);
    assert_eq!(
        driftline(&["diff", V1, V2, "--fail-on", "warning", "--ignore", both], b"").code,
        1,
        "warnings remain"
    );
    // Past its day: it ignores nothing, says so on stderr and counts as a warning.
    let past = ignore("[[ignore]]\ntool = \"fetch\"\nreason = \"moved\"\nexpires = 2020-01-01\n");
    let past = past.to_str().expect("path");
    let run = driftline(&["diff", V1, V1, "--fail-on", "warning", "--ignore", past], b"");
    assert_eq!(run.code, 1, "an expired entry is a warning: {}", run.stderr);
    assert!(
        run.stderr.contains(
            "warning: ignore entry 1 (tool fetch) expired on 2020-01-01 and no longer applies: moved"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(driftline(&["diff", V1, V1, "--fail-on", "breaking", "--ignore", past], b"").code, 0);
    let out = json_out(&driftline(&["diff", V1, V2, "--format", "json", "--ignore", past], b""));
    assert_eq!(out["expired_ignores"][0]["entry"], 1);
    assert!(out.get("ignored").is_none(), "{out}");
    // A bad file is refused before anything is compared.
    let bad = ignore("[[ignore]]\ntool = \"fetch\"\n");
    let run = driftline(&["diff", V1, V2, "--ignore", bad.to_str().expect("path")], b"");
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("entry 1: `reason` is required"), "{}", run.stderr);
}
