//! What every real server's pinned list costs a model's context (tests/real/lists): tokens and bytes of
//! each release, held to `tests/real/context_cost.json` so that a change of the count shows in review
//! (`UPDATE_GOLDEN=1` rewrites it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use driftline_detectors::context_cost::{ContextCost, ENCODING};
use driftline_schemas::ToolsText;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/real")
}

#[test]
fn every_real_list_has_its_token_count() {
    let mut costs: BTreeMap<String, ContextCost> = BTreeMap::new();
    for server in std::fs::read_dir(corpus().join("lists")).expect("tests/real/lists") {
        let server = server.expect("a server").path();
        for list in std::fs::read_dir(&server).expect("a server's lists") {
            let path = list.expect("a list").path();
            let text =
                std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            let tools = ToolsText::parse(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            let name = format!(
                "{}@{}",
                server.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                path.file_stem().and_then(|n| n.to_str()).unwrap_or("?")
            );
            costs.insert(name, ContextCost::of_tools(&tools));
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
