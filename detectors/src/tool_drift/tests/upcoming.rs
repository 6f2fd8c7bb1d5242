//! Upcoming releases: diffed against the baseline, reported once per release, list and baseline, and the
//! server's own state untouched.

use super::*;
use driftline_schemas::{UpcomingRelease, UpstreamRelease};

fn release(version: &str, error: Option<&str>) -> UpstreamRelease {
    UpstreamRelease {
        package: "npm:@scope/server".into(),
        version: version.into(),
        released_at: None,
        pin: format!("@scope/server@{version}"),
        error: error.map(String::from),
    }
}

fn list(tools: Value) -> Arc<ToolsText> {
    Arc::new(ToolsText::from_values(tools.as_array().map(Vec::as_slice).unwrap_or_default()))
}

const V1: &str = r#"[{"name": "forecast", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                     {"name": "alerts", "inputSchema": {"type": "object"}}]"#;
const V2: &str = r#"[{"name": "forecast", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}, "units": {"type": "string"}}, "required": ["city", "units"]}}]"#;

fn value(text: &str) -> Value {
    serde_json::from_str(text).expect("json")
}

/// One step: a release (version, capture error) with its list, or None with the running server's list.
type Step<'a> = (Option<(&'a str, Option<&'a str>)>, &'a str);

/// Observes `steps` in order; answers per release what was reported (None when nothing), and checks that
/// no release touches the server's baseline, newest snapshot, open events or status.
fn observe(steps: &[Step]) -> Vec<Option<UpcomingRelease>> {
    let mut state = ServerState::default();
    let mut reported = Vec::new();
    for (offset, (step, tools)) in steps.iter().enumerate() {
        let context = context(offset as u64 + 1);
        match step {
            None => {
                state.observe_tools(list(value(tools)), context, Acceptance::default());
            }
            Some((version, error)) => {
                let server = |state: &ServerState| {
                    (
                        state.baseline.clone(),
                        state.observed.clone(),
                        state.open_events.clone(),
                        state.status(),
                    )
                };
                let before = server(&state);
                let upcoming = state.observe_release(
                    list(value(tools)),
                    None,
                    &release(version, *error),
                    context,
                    Acceptance::default(),
                );
                assert_eq!(before, server(&state), "a release leaves the server's state as it was");
                reported.push(upcoming);
            }
        }
    }
    reported
}

/// What was reported per release: None, or its rendered changes (`error: …` for a failed capture).
fn check(steps: &[Step], expected: &[Option<Vec<&str>>]) {
    let rendered = |u: UpcomingRelease| match &u.error {
        Some(error) => vec![format!("error: {error}")],
        None => u
            .changes
            .iter()
            .map(|c| {
                format!("{} {} {} {}", c.classification.as_str(), c.change_type, c.tool_name, c.path)
                    .trim_end()
                    .to_owned()
            })
            .collect(),
    };
    let reported: Vec<Option<Vec<String>>> = observe(steps).into_iter().map(|u| u.map(rendered)).collect();
    let expected: Vec<Option<Vec<String>>> = expected
        .iter()
        .map(|e| e.as_ref().map(|lines| lines.iter().map(|l| l.to_string()).collect()))
        .collect();
    assert_eq!(reported, expected);
}

#[test]
fn a_release_is_diffed_against_the_baseline_once() {
    let breaking = vec!["BREAKING tool_removed alerts", "BREAKING required_param_added forecast units"];
    // The same release captured twice (a watcher restarted before it noted it) is reported once.
    check(
        &[(None, V1), (Some(("2.0.0", None)), V2), (Some(("2.0.0", None)), V2)],
        &[Some(breaking.clone()), None],
    );
    // The release that runs now: reported with no change.
    check(&[(None, V1), (Some(("1.0.0", None)), V1)], &[Some(vec![])]);
    // Without a baseline there is nothing to diff against: reported with no change.
    check(&[(Some(("1.0.0", None)), V1)], &[Some(vec![])]);
    // The server running the release (its new list open as drift, the baseline as it was) does not make
    // the release news again.
    check(
        &[(None, V1), (Some(("2.0.0", None)), V2), (None, V2), (Some(("2.0.0", None)), V2)],
        &[Some(breaking), None],
    );
    // A release that could not be captured is reported as such, once, and diffed when it is captured.
    check(
        &[
            (None, V1),
            (Some(("2.0.0", Some("install: timed out"))), "[]"),
            (Some(("2.0.0", Some("install: timed out"))), "[]"),
        ],
        &[Some(vec!["error: install: timed out"]), None],
    );
}

/// The advice pins the release whose list the server runs, once a captured release had that list: the
/// last release's pin.
fn check_pin(steps: &[Step], expected_pin: &str) {
    let pin = observe(steps).pop().flatten().map(|u| u.pin);
    assert_eq!(pin.as_deref(), Some(expected_pin), "{steps:?}");
}

#[test]
fn the_pin_names_the_release_in_use() {
    check_pin(&[(None, V1), (Some(("1.0.0", None)), V1), (Some(("2.0.0", None)), V2)], "@scope/server@1.0.0");
    // No release seen had the server's list: the version in use is unknown.
    check_pin(&[(None, V1), (Some(("2.0.0", None)), V2)], "");
    // A failed capture tells nothing of its list.
    check_pin(&[(None, V1), (Some(("1.0.0", Some("timed out"))), "[]"), (Some(("2.0.0", None)), V2)], "");
    // The release that runs now needs no pin.
    check_pin(&[(None, V1), (Some(("1.0.0", None)), V1), (Some(("1.0.0", None)), V2)], "");
}
