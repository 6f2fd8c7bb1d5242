//! What every real server's pinned list costs a model's context (tests/real/lists): tokens and bytes of
//! each release, held to `tests/real/context_cost.json` so that a change of the count shows in review
//! (`UPDATE_GOLDEN=1` rewrites it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use driftline_detectors::context_cost::{self, ContextCost, ENCODING};
use driftline_detectors::tool_drift::{BaselinePolicy, RecordContext, ServerState};
use driftline_schemas::{InputPosition, Timestamp, ToolsText};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/real")
}

/// Every pinned list, by server, oldest release first (as the file names sort).
fn lists() -> BTreeMap<String, Vec<(String, ToolsText)>> {
    let mut servers = BTreeMap::new();
    for server in std::fs::read_dir(corpus().join("lists")).expect("tests/real/lists") {
        let server = server.expect("a server").path();
        let name = server.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_owned();
        let mut releases = Vec::new();
        for list in std::fs::read_dir(&server).expect("a server's lists") {
            let path = list.expect("a list").path();
            let text =
                std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            let tools = ToolsText::parse(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            releases.push((path.file_stem().and_then(|n| n.to_str()).unwrap_or("?").to_owned(), tools));
        }
        releases.sort_by(|a, b| a.0.cmp(&b.0));
        servers.insert(name, releases);
    }
    servers
}

#[test]
fn every_real_list_has_its_token_count() {
    let mut costs: BTreeMap<String, ContextCost> = BTreeMap::new();
    for (server, releases) in lists() {
        for (release, tools) in releases {
            costs.insert(format!("{server}@{release}"), context_cost::of_tools(&tools));
        }
    }
    assert!(costs.len() >= 50, "only {} lists", costs.len());
    // Tokens are fewer than bytes and grow with them: a count that went wrong shows as an outlier.
    for (name, cost) in &costs {
        assert!(cost.tokens > 0 && cost.tokens < cost.bytes, "{name}: {cost:?}");
    }
    let golden = corpus().join("context_cost.json");
    let text = serde_json::to_string_pretty(&serde_json::json!({"encoding": ENCODING, "lists": costs}))
        .expect("JSON")
        + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &text).expect("write the golden file");
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(text == expected, "token counts differ from {} (review, then UPDATE_GOLDEN=1)", golden.display());
}

/// The detector counts a new release from its baseline's count and its changed tools only: on every real
/// server's releases in order, that equals counting the release whole.
#[test]
fn a_release_counted_from_its_baseline_equals_it_counted_whole() {
    let mut pairs = 0;
    for (server, releases) in lists() {
        let mut state = ServerState::default();
        for (offset, (release, tools)) in releases.into_iter().enumerate() {
            let whole = context_cost::of_tools(&tools);
            let context = RecordContext {
                project: "p",
                server: &server,
                position: InputPosition { partition: 0, offset: offset as u64 },
                at: Timestamp::from_millis(0).expect("a time"),
            };
            // `auto`: each release becomes the baseline the next one is counted from.
            let observed = state.observe_tools(Arc::new(tools), context, BaselinePolicy::Auto);
            assert_eq!(observed.context, whole, "{server}@{release}");
            pairs += usize::from(offset > 0);
        }
    }
    assert!(pairs >= 40, "only {pairs} pairs");
}

/// The counts are tiktoken's (the reference tokenizer), tool by tool, on every real list.
#[test]
fn the_counts_are_the_reference_tokenizers() {
    let reference = tiktoken_rs::o200k_base().expect("the o200k_base ranks");
    let mut tools_counted = 0;
    for (server, releases) in lists() {
        for (release, tools) in releases {
            for entry in tools.entries() {
                let compact =
                    serde_json::from_str::<serde_json::Value>(entry.get()).expect("a tool").to_string();
                let expected = reference.encode_ordinary(&compact).len() as u64;
                assert_eq!(
                    context_cost::of_text(&compact).tokens,
                    expected,
                    "{server}@{release}: {compact:.80}"
                );
                tools_counted += 1;
            }
        }
    }
    assert!(tools_counted > 1_000, "only {tools_counted} tools");
}
