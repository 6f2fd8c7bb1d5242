//! Upstream releases (issue #46) against real registry software run locally: verdaccio (npm) and pypiserver
//! (PyPI) from `scripts/upstream-registries.sh`, serving releases of small MCP servers written with the
//! official SDKs (`tests/upstream/`). `driftline upstream check` installs, sandboxes, captures and diffs;
//! the watcher inside `serve` sees a new release, records it as upcoming with its impact, notifies once, and
//! notifies no second time after kill -9.
//!
//! The tests share the two registries and reset them, so they take turns (`REGISTRIES`).

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::{json, Value};
use support::{run_cli, span, temp_dir, wait_until, Server, WebhookReceiver};

static REGISTRIES: Mutex<()> = Mutex::new(());

const WEATHER_NPM: &str = "npm:@driftline-test/weather-server";
const WEATHER_PYPI: &str = "pypi:driftline-test-weather";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn script(args: &[&str]) {
    let output = Command::new(repo().join("scripts/upstream-registries.sh"))
        .args(args)
        .output()
        .expect("run scripts/upstream-registries.sh");
    assert!(
        output.status.success(),
        "scripts/upstream-registries.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Where the registries answer, after a fresh `up` with the releases named published.
#[derive(Clone)]
struct Registries {
    npm: String,
    /// PyPI's base address (`…/simple/` is the index, `…/pypi/NAME/json` the metadata).
    pypi: String,
}

fn fresh_registries(npm: &[&str], pypi: &[(&str, &str)]) -> Registries {
    script(&["up"]);
    for dir in npm {
        script(&["publish-npm", &repo().join("tests/upstream/npm").join(dir).display().to_string()]);
    }
    for (name, version) in pypi {
        script(&["publish-pypi", name, version]);
    }
    let env = std::fs::read_to_string(repo().join("target/upstream/env")).expect("target/upstream/env");
    let value = |key: &str| {
        env.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} in target/upstream/env"))
            .to_owned()
    };
    let json = value("PYPI_JSON");
    Registries { npm: value("NPM_REGISTRY"), pypi: json.strip_suffix("pypi/").unwrap_or(&json).to_owned() }
}

fn list(name: &str) -> PathBuf {
    repo().join("tests/upstream/lists").join(name)
}

/// `driftline upstream check PACKAGE --against AGAINST` with the local registries and a cache of its own.
fn check(
    registries: &Registries,
    cache: &Path,
    package: &str,
    against: &Path,
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec![
        "upstream",
        "check",
        package,
        "--npm-registry",
        &registries.npm,
        "--pypi-url",
        &registries.pypi,
        "--cache-dir",
    ];
    let cache = cache.display().to_string();
    let against = against.display().to_string();
    args.extend([cache.as_str(), "--against", against.as_str()]);
    args.extend(extra);
    run_cli(&args)
}

fn changes_of(report: &Value) -> Vec<(String, String, String, String)> {
    let mut changes: Vec<(String, String, String, String)> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap_or_default().to_owned();
            (text("classification"), text("change_type"), text("tool_name"), text("path"))
        })
        .collect();
    changes.sort();
    changes
}

/// The changes of weather 1.1.0 against 1.0.0, on both registries.
fn weather_changes() -> Vec<(String, String, String, String)> {
    let change =
        |a: &str, b: &str, c: &str, d: &str| (a.to_owned(), b.to_owned(), c.to_owned(), d.to_owned());
    vec![
        change("BREAKING", "required_param_added", "get_forecast", "units"),
        change("BREAKING", "tool_removed", "get_alerts", ""),
        change("COMPATIBLE", "tool_added", "get_air_quality", ""),
    ]
}

const WEATHER_MCP_REGISTRY: &str =
    "mcp-registry:io.modelcontextprotocol.anonymous/driftline-test-weather-npm";

/// The official MCP Registry (`scripts/mcp-registry.sh`, built from its Go module) with both versions of
/// the npm weather server published; its address.
fn fresh_mcp_registry() -> String {
    let run = |args: &[&str]| {
        let output = Command::new(repo().join("scripts/mcp-registry.sh"))
            .args(args)
            .output()
            .expect("run scripts/mcp-registry.sh");
        assert!(
            output.status.success(),
            "scripts/mcp-registry.sh {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(&["up"]);
    for version in ["1.0.0", "1.1.0"] {
        let file = repo().join(format!("tests/upstream/mcp-registry/weather-npm-{version}.json"));
        run(&["publish", &file.display().to_string()]);
    }
    let env =
        std::fs::read_to_string(repo().join("target/mcp-registry/env")).expect("target/mcp-registry/env");
    env.lines()
        .find_map(|line| line.strip_prefix("MCP_REGISTRY="))
        .expect("MCP_REGISTRY in target/mcp-registry/env")
        .to_owned()
}

#[test]
fn check_follows_an_mcp_registry_name_to_its_package() {
    let _turn = REGISTRIES.lock().unwrap_or_else(|e| e.into_inner());
    let registries = fresh_registries(&["weather-1.0.0", "weather-1.1.0"], &[]);
    let mcp_registry = fresh_mcp_registry();
    let cache = temp_dir("upstream-check-mcp-registry");
    let baseline = list("weather-npm-1.0.0.json");
    let extra = |more: &'static [&'static str]| {
        let mut args = vec!["--mcp-registry", mcp_registry.as_str(), "--format", "json"];
        args.extend(more);
        args
    };
    // The registry's 1.0.0 names the package's 1.0.0: the list the baseline was captured from.
    let (code, stdout, stderr) =
        check(&registries, &cache, &format!("{WEATHER_MCP_REGISTRY}@1.0.0"), &baseline, &extra(&[]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("runs @driftline-test/weather-server@1.0.0"), "{stderr}");
    // Its newest names 1.1.0, which breaks two tools.
    let (code, stdout, stderr) = check(&registries, &cache, WEATHER_MCP_REGISTRY, &baseline, &extra(&[]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("runs @driftline-test/weather-server@1.1.0"), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("json report");
    assert_eq!(changes_of(&report), weather_changes());
    // A server the registry does not list, and a version it does not have: it could not check (3).
    for missing in [
        "mcp-registry:io.modelcontextprotocol.anonymous/no-such-server".to_owned(),
        format!("{WEATHER_MCP_REGISTRY}@9.9.9"),
    ] {
        let (code, stdout, stderr) = check(&registries, &cache, &missing, &baseline, &extra(&[]));
        assert_eq!(code, 3, "{missing}: {stdout}{stderr}");
    }
    // A name that is not one is a usage error before anything is asked.
    let (code, _, stderr) = check(&registries, &cache, "mcp-registry:../etc", &baseline, &extra(&[]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not an MCP Registry server name"), "{stderr}");
    // The watcher follows the name too: the registry's newest version names 1.1.0, captured as the
    // server's upcoming release (the package's, with its pin), with the server's status untouched.
    let data = temp_dir("upstream-watch-mcp-registry");
    let server = Server::start(&data, None, &[]);
    let tools: Value = serde_json::from_slice(&std::fs::read(&baseline).expect("list")).expect("json");
    let reply = server.client(None).put_json("/api/servers/weather/tools", &json!({ "tools": tools }));
    assert_eq!(reply.0, 202, "{}", reply.1);
    server.client(None).wait_for("/api/health/servers/weather", "the baseline", |h| h["tool_count"] == 2);
    let _ = server.terminate();
    let config = data.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\npackage = \"{WEATHER_MCP_REGISTRY}\"\nserver = \"weather\"\n\n\
             [upstream_watcher]\nnpm_registry = \"{}\"\nmcp_registry = \"{mcp_registry}\"\n\
             mcp_registry_interval_seconds = 1\n",
            registries.npm
        ),
    )
    .expect("write the configuration");
    let server = Server::start(&data, Some(&config), &[]);
    let client = server.client(None);
    let releases =
        client.wait_for_within(180, "/api/upstream", "the registry's newest release", |releases| {
            releases.as_array().is_some_and(|r| r.iter().any(|r| r["version"] == "1.1.0"))
        });
    let release =
        releases.as_array().and_then(|r| r.iter().find(|r| r["version"] == "1.1.0")).expect("1.1.0");
    assert_eq!(release["package"], WEATHER_NPM, "{release}");
    assert_eq!(changes_of(release), weather_changes(), "{release}");
    let health = client.get("/api/health/servers/weather").1;
    assert_eq!(health["status"], "UP", "{health}");
    server.kill();
    let _ = Command::new(repo().join("scripts/mcp-registry.sh")).arg("down").output();
}

#[test]
fn check_exits_1_on_a_breaking_release_0_on_the_same_and_3_when_it_cannot_install() {
    let _turn = REGISTRIES.lock().unwrap_or_else(|e| e.into_inner());
    let registries = fresh_registries(
        &["weather-1.0.0", "weather-1.1.0"],
        &[("driftline-test-weather", "1.0.0"), ("driftline-test-weather", "1.1.0")],
    );
    let cache = temp_dir("upstream-check");
    // Two checks of one version at once on one cache: one installs, the other waits for it.
    let together: Vec<_> = (0..2)
        .map(|_| {
            let (registries, cache) = (registries.clone(), cache.clone());
            std::thread::spawn(move || {
                check(
                    &registries,
                    &cache,
                    &format!("{WEATHER_NPM}@1.0.0"),
                    &list("weather-npm-1.0.0.json"),
                    &[],
                )
            })
        })
        .collect();
    for run in together {
        let (code, stdout, stderr) = run.join().expect("a check");
        assert_eq!(code, 0, "concurrent checks of one version: {stdout}{stderr}");
    }
    for (package, baseline) in
        [(WEATHER_NPM, "weather-npm-1.0.0.json"), (WEATHER_PYPI, "weather-pypi-1.0.0.json")]
    {
        // The release the baseline was captured from: nothing changed.
        let (code, stdout, stderr) =
            check(&registries, &cache, &format!("{package}@1.0.0"), &list(baseline), &["--format", "json"]);
        assert_eq!(code, 0, "{package}@1.0.0 against its own list: {stdout}{stderr}");
        let report: Value = serde_json::from_str(&stdout).expect("json report");
        assert_eq!(changes_of(&report), Vec::new(), "{package}@1.0.0");
        // No version: the newest, 1.1.0, which breaks two tools.
        let (code, stdout, stderr) =
            check(&registries, &cache, package, &list(baseline), &["--format", "json"]);
        assert_eq!(code, 1, "{package} (newest) against 1.0.0: {stdout}{stderr}");
        assert!(stderr.contains("1.1.0"), "the newest release is named: {stderr}");
        let report: Value = serde_json::from_str(&stdout).expect("json report");
        assert_eq!(report["max_classification"], "BREAKING");
        assert_eq!(changes_of(&report), weather_changes(), "{package} 1.1.0");
        // --fail-on compatible also fails on it; the text report names the changes.
        let (code, stdout, _) = check(&registries, &cache, &format!("{package}@1.1.0"), &list(baseline), &[]);
        assert_eq!(code, 1);
        assert!(stdout.contains("required_param_added") && stdout.contains("get_alerts"), "{stdout}");
    }
    // A version the registry does not have cannot be installed: exit 3, with the installer's reason.
    let (code, _, stderr) =
        check(&registries, &cache, &format!("{WEATHER_NPM}@9.9.9"), &list("weather-npm-1.0.0.json"), &[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("install") && stderr.contains("9.9.9"), "{stderr}");
    let (code, _, stderr) =
        check(&registries, &cache, &format!("{WEATHER_PYPI}@9.9.9"), &list("weather-pypi-1.0.0.json"), &[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("install"), "{stderr}");
    // A package no registry knows: exit 3; a name that is no package name: exit 2, before anything runs.
    let (code, _, stderr) =
        check(&registries, &cache, "npm:@driftline-test/nothing-here", &list("weather-npm-1.0.0.json"), &[]);
    assert_eq!(code, 3, "{stderr}");
    let (code, _, stderr) = check(&registries, &cache, "npm:../../etc", &list("weather-npm-1.0.0.json"), &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a valid npm package name"), "{stderr}");
    assert!(!cache.join("installs").join("..").join("etc").exists());
}

#[test]
fn a_sandboxed_server_cannot_reach_the_network_or_write_outside_its_scratch() {
    let _turn = REGISTRIES.lock().unwrap_or_else(|e| e.into_inner());
    let registries = fresh_registries(&["sandbox-probe-1.0.0"], &[]);
    let cache = temp_dir("upstream-sandbox");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    // A host file the server is told to write: it must not appear. The package's own directory is
    // visible to it, read-only.
    let outside = temp_dir("upstream-sandbox-outside").join("written-by-the-server.txt");
    let install = cache.join("installs/npm-@driftline-test+sandbox-probe/1.0.0/written-by-the-server.txt");
    let empty = cache.join("empty.json");
    std::fs::write(&empty, "[]").expect("write");
    let captured = cache.join("captured.json");
    for target in [&outside, &install] {
        let (code, stdout, stderr) = check(
            &registries,
            &cache,
            "npm:@driftline-test/sandbox-probe@1.0.0",
            &empty,
            &[
                "--out",
                &captured.display().to_string(),
                "--env",
                &format!("PROBE_CONNECT=127.0.0.1:{port}"),
                // A private address with no route: nothing leaves the machine either way.
                "--env",
                "PROBE_PUBLIC=10.255.255.1:80",
                "--env",
                &format!("PROBE_WRITE_OUTSIDE={}", target.display()),
            ],
        );
        assert_eq!(code, 0, "the probe server is captured: {stdout}{stderr}");
        let tools: Value =
            serde_json::from_slice(&std::fs::read(&captured).expect("captured list")).expect("json");
        let report = tools[0]["description"].as_str().expect("the sandbox report").to_owned();
        let outcome = |name: &str| {
            report
                .split("; ")
                .find_map(|part| part.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{name} in {report:?}"))
                .to_owned()
        };
        assert_ne!(outcome("connect"), "ok", "loopback of the host is not reachable: {report}");
        assert_ne!(outcome("public"), "ok", "no route out: {report}");
        assert!(outcome("outside").starts_with("error:"), "{target:?} is not writable: {report}");
        assert_eq!(outcome("tmp"), "ok", "its own /tmp is writable: {report}");
        assert_eq!(outcome("home"), "ok", "its scratch home is writable: {report}");
        assert!(!target.exists(), "{} was written on the host", target.display());
        assert!(listener.accept().is_err(), "the host's listener was connected to from the sandbox");
    }
    // Nothing it wrote is left: the scratch directory goes with the run.
    let scratch = cache.join("scratch");
    let left: Vec<_> =
        std::fs::read_dir(&scratch).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
}

#[test]
fn without_a_sandbox_nothing_runs() {
    // PATH holds node, npm and python, but no bwrap: the check refuses before installing anything.
    let bin = temp_dir("upstream-no-bwrap");
    for program in ["node", "npm", "python3", "prlimit"] {
        if let Some(found) = which(program) {
            let _ = std::os::unix::fs::symlink(found, bin.join(program));
        }
    }
    let cache = temp_dir("upstream-no-bwrap-cache");
    let output = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args([
            "upstream",
            "check",
            "npm:@driftline-test/weather-server@1.0.0",
            "--npm-registry",
            "http://127.0.0.1:9/",
        ])
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--against")
        .arg(list("weather-npm-1.0.0.json"))
        .env("PATH", &bin)
        .output()
        .expect("run driftline");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no sandbox") && stderr.contains("bwrap"), "{stderr}");
    assert!(!cache.join("installs").exists(), "nothing was installed");
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

#[test]
fn the_watcher_reports_an_upcoming_release_with_its_impact_once_across_kill_9() {
    let _turn = REGISTRIES.lock().unwrap_or_else(|e| e.into_inner());
    let registries = fresh_registries(&["weather-1.0.0"], &[("driftline-test-weather", "1.0.0")]);
    let data = temp_dir("upstream-watcher");
    let hook = WebhookReceiver::start(0);
    // What the servers run now: their 1.0.0 lists as baselines, and a day of calls by two agents.
    let server = Server::start(&data, None, &[]);
    let client = server.client(None);
    for (name, file) in [("weather", "weather-npm-1.0.0.json"), ("weather-py", "weather-pypi-1.0.0.json")] {
        let tools: Value = serde_json::from_slice(&std::fs::read(list(file)).expect("list")).expect("json");
        let reply = client.put_json(&format!("/api/servers/{name}/tools"), &json!({ "tools": tools }));
        assert_eq!(reply.0, 202, "{}", reply.1);
    }
    let mut spans = Vec::new();
    for (index, agent) in ["planner", "planner", "researcher"].iter().enumerate() {
        let mut call = span(&format!("alerts-{index}"), "get_alerts", json!({"alerts": []}));
        call["server"] = json!("weather");
        call["agent_name"] = json!(agent);
        call["arguments"] = json!({"state": "CA"});
        spans.push(call);
    }
    let reply = client.post_json("/v1/spans", &json!(spans));
    assert_eq!(reply.0, 202, "{}", reply.1);
    client.wait_for("/api/tools", "the calls of get_alerts", |tools| {
        tools.as_array().is_some_and(|t| t.iter().any(|t| t["tool"] == "get_alerts" && t["calls"] == 3))
    });
    let _ = server.terminate();
    // The same deployment, now watching both packages (checked every second) and notifying a webhook.
    let config = data.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\npackage = \"{WEATHER_NPM}\"\nserver = \"weather\"\n\n\
             [[upstream]]\npackage = \"{WEATHER_PYPI}\"\nserver = \"weather-py\"\n\n\
             [upstream_watcher]\nnpm_registry = \"{}\"\npypi_url = \"{}\"\nnpm_interval_seconds = 1\npypi_interval_seconds = 1\n\n\
             [[notify.webhooks]]\nurl = \"{}\"\n",
            registries.npm, registries.pypi, hook.url
        ),
    )
    .expect("write the configuration");
    let mut server = Server::start(&data, Some(&config), &[]);
    let client = server.client(None);
    // First sight: each package's newest release is what runs; recorded, with no change and no notification.
    let upstream = client.wait_for_within(180, "/api/upstream", "both 1.0.0 releases", |releases| {
        releases.as_array().is_some_and(|r| r.len() == 2 && r.iter().all(|r| r["version"] == "1.0.0"))
    });
    for release in upstream.as_array().expect("array") {
        assert_eq!(release["changes"], json!([]), "{release}");
        assert!(release["baseline_hash"].is_string(), "diffed against the baseline: {release}");
    }
    // The next releases are published: the watcher sees them, captures them in the sandbox, and the detector
    // reports what they would break.
    script(&["publish-npm", &repo().join("tests/upstream/npm/weather-1.1.0").display().to_string()]);
    script(&["publish-pypi", "driftline-test-weather", "1.1.0"]);
    let upstream = client.wait_for_within(180, "/api/upstream", "both 1.1.0 releases", |releases| {
        releases.as_array().is_some_and(|r| r.iter().filter(|r| r["version"] == "1.1.0").count() == 2)
    });
    for release in upstream.as_array().expect("array").iter().filter(|r| r["version"] == "1.1.0") {
        assert_eq!(release["max_classification"], "BREAKING", "{release}");
        assert_eq!(changes_of(release), weather_changes(), "{release}");
        assert!(release["released_at"].is_string(), "the registry's publish time: {release}");
        assert!(
            release["context_cost"]["summary"].as_str().is_some_and(|s| s.contains("1 tool removed")),
            "{release}"
        );
    }
    // The server's own status is untouched: the release is upcoming, not drift.
    let health = client.get("/api/health/servers").1;
    for server in health.as_array().expect("servers") {
        assert_eq!(server["status"], "UP", "{server}");
    }
    // The impact: who called the tools 1.1.0 breaks.
    let page = client.get("/api/upstream/weather").1;
    assert_eq!(page["releases"][0]["version"], "1.1.0");
    assert!(page["releases"][0]["release_tools"].as_array().is_some_and(|t| t.len() == 2), "{page}");
    let alerts =
        page["impact"].as_array().expect("impact").iter().find(|i| i["tool_name"] == "get_alerts").cloned();
    let alerts = alerts.unwrap_or_else(|| panic!("get_alerts in the impact: {page}"));
    assert_eq!(alerts["removed"], true);
    assert_eq!(alerts["rejected_calls"], 3);
    let agents: Vec<&str> = alerts["impact"]["consumers"]
        .as_array()
        .expect("consumers")
        .iter()
        .filter_map(|c| c["agent_name"].as_str())
        .collect();
    assert_eq!(agents.len(), 2, "planner and researcher: {alerts}");
    assert!(
        alerts["impact"]["consumers"].as_array().is_some_and(|c| c.iter().all(|c| c["risk"] == "HIGH")),
        "every caller of a removed tool is at high risk: {alerts}"
    );
    // One notification per release that changes something, with the pin and the agents.
    let upcoming = |r: &support::Received| r.json()["kind"] == "upcoming";
    let first = hook.wait_for(60, "the upcoming notification of weather", |r| {
        upcoming(r) && r.json()["server_name"] == "weather"
    });
    let body = first.json();
    assert_eq!(body["classification"], "BREAKING");
    assert_eq!(body["release"], format!("{WEATHER_NPM} 1.1.0"));
    assert!(
        body["note"].as_str().is_some_and(|n| n.contains("pin it: @driftline-test/weather-server@1.0.0")),
        "{body}"
    );
    let affected = body["affected_agents"].as_array().expect("affected agents");
    assert!(affected.iter().any(|a| a.as_str().is_some_and(|a| a.contains("planner"))), "{body}");
    hook.wait_for(60, "the upcoming notification of weather-py", |r| {
        upcoming(r) && r.json()["server_name"] == "weather-py"
    });
    // kill -9 as if the watcher had not noted what it published: it captures and publishes both releases
    // again, and nothing is reported or sent twice.
    let state = data.join("upstream/watch-state.json");
    assert!(state.is_file(), "the watcher keeps its state in the cache");
    let _ = std::fs::remove_file(&state);
    server.crash_and_restart();
    wait_until(120, "the watcher to handle 1.1.0 of both packages again", || {
        let text = std::fs::read_to_string(&state).unwrap_or_default();
        let handled = text.matches("\"1.1.0\"").count();
        if handled >= 4 {
            Ok(())
        } else {
            Err(format!("state: {text}"))
        }
    });
    let client = server.client(None);
    // A drift of another server, published after the releases were published again: once its notification
    // has arrived, anything the republished releases made would have been sent before it.
    let marker = |description: &str| json!({ "tools": [{"name": "ping", "description": description, "inputSchema": {"type": "object"}}] });
    for description in ["first", "second"] {
        let reply = client.put_json("/api/servers/marker/tools", &marker(description));
        assert_eq!(reply.0, 202, "{}", reply.1);
        client.wait_for("/api/health/servers/marker", "the marker list", |health| health["tool_count"] == 1);
    }
    hook.wait_for(60, "the marker's drift notification", |r| {
        r.json()["kind"] == "drift" && r.json()["server_name"] == "marker"
    });
    let releases = client.get("/api/upstream").1;
    assert_eq!(
        releases.as_array().map(Vec::len),
        Some(4),
        "two releases of each package, once each: {releases}"
    );
    let sent: Vec<Value> = hook.received().iter().filter(|r| upcoming(r)).map(|r| r.json()).collect();
    assert_eq!(sent.len(), 2, "one upcoming notification per server: {sent:?}");

    // The CLI: the release in use (its list is the server's) and the newest, with the verdict and the pin.
    let (code, stdout, stderr) = run_cli(&["upstream", "list", "--url", &server.url]);
    assert_eq!(code, 1, "a newest release breaks something: {stdout}{stderr}");
    let weather =
        stdout.lines().find(|l| l.trim_start().starts_with("weather ")).unwrap_or_else(|| panic!("{stdout}"));
    for part in ["1.0.0", "1.1.0", "BREAKING (2 breaking", "@driftline-test/weather-server@1.0.0"] {
        assert!(weather.contains(part), "{part} in {weather:?}");
    }
    let (_, stdout, _) = run_cli(&["health", "--wide", "--url", &server.url]);
    assert!(stdout.contains("1.0.0 → 1.1.0 (BREAKING)"), "{stdout}");
    // Accepted ahead: when weather runs 1.1.0, its list becomes the baseline without drift-accept.
    let (code, stdout, stderr) = run_cli(&["upstream", "accept", "weather", "1.1.0", "--url", &server.url]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // Hostile requests change nothing: a name that is a path, a body that is not the one asked for, a form
    // posted from another site.
    assert_eq!(client.get("/api/upstream/..%2F..%2Fetc").0, 400);
    let accept = "/api/upstream/weather/accept";
    for body in [&b"{\"version\": 1}"[..], b"{\"version\": \"1.1.0\", \"extra\": 1}", b"[]"] {
        let (status, reply) = client.send("POST", accept, body);
        assert_eq!(status, 400, "{reply}");
        assert!(reply["error"].as_str().is_some_and(|e| e.contains("version")), "{reply}");
    }
    let form = [("Origin", "http://evil.example"), ("Content-Type", "application/x-www-form-urlencoded")];
    assert_eq!(client.send_with("POST", accept, b"version=1.1.0", &form).0, 403);
    let (code, _, stderr) = run_cli(&["upstream", "accept", "weather", "7.7.7", "--url", &server.url]);
    assert_eq!(code, 3, "no such release: {stderr}");
    assert!(stderr.contains("no captured release"), "{stderr}");
    let release_tools = page["releases"][0]["release_tools"].clone();
    let reply = client.put_json("/api/servers/weather/tools", &json!({ "tools": release_tools }));
    assert_eq!(reply.0, 202, "{}", reply.1);
    let history = client.wait_for(
        "/api/health/servers/weather/drift-history",
        "the release's drift event",
        |history| history.as_array().is_some_and(|events| !events.is_empty()),
    );
    let event = &history[0];
    assert_eq!(event["status"], "accepted", "{event}");
    assert!(event["accepted_by"].as_str().is_some_and(|by| by.contains("ahead, release 1.1.0")), "{event}");
    let health = client.get("/api/health/servers/weather").1;
    assert_eq!(health["status"], "UP", "{health}");
    assert_eq!(health["schema_hash"], page["releases"][0]["release_hash"], "{health}");
    server.kill();
}
