//! Tests of the configuration tree that need no process around it: credentials used and never shown.

use super::*;
use driftline_schemas::Secret;

#[test]
fn credentials_reach_their_clients_and_never_print() {
    let config = Config::from_toml(
        r#"
        [clickhouse]
        password = "ch-pass-1"
        [kafka]
        security_protocol = "sasl_ssl"
        sasl_mechanism = "PLAIN"
        sasl_username = "user"
        sasl_password = "kafka-pass-2"
        [[notify.webhooks]]
        url = "https://hooks.example.com/services/T/B/token-3"
        secret = "hook-secret-4"
        "#,
    )
    .expect("a valid configuration");
    let clickhouse = config.clickhouse.settings();
    let kafka = config.kafka.settings();
    assert_eq!(clickhouse.password.as_ref().map(Secret::expose), Some("ch-pass-1"));
    assert!(kafka.client_properties.0.contains(&("sasl.password".to_owned(), "kafka-pass-2".to_owned())));
    assert_eq!(config.notify.webhooks[0].secret.as_ref().map(Secret::expose), Some("hook-secret-4"));
    let shown = format!("{config:?}\n{clickhouse:?}\n{kafka:?}");
    for credential in ["ch-pass-1", "kafka-pass-2", "token-3", "hook-secret-4"] {
        assert!(!shown.contains(credential), "{credential} printed:\n{shown}");
    }
    assert!(shown.contains("Secret(***)") && shown.contains("https://hooks.example.com/…"), "{shown}");
}

/// Reads `toml` and expects it refused with exactly `expected`, or accepted when `expected` is empty.
fn check(toml: &str, expected: &str) {
    match Config::from_toml(toml) {
        Ok(_) => assert!(expected.is_empty(), "{toml:?} was accepted; expected {expected:?}"),
        Err(err) => assert_eq!(err.to_string(), expected, "{toml:?}"),
    }
}

#[test]
fn each_key_is_refused_outside_its_range_with_a_message_naming_it() {
    check("", "");
    check(
        "[detector]\nrepeat_window_hours = 0",
        "detector.repeat_window_hours = 0 is out of bounds: it must be in [1, 720]",
    );
    check("[detector]\nrepeat_window_hours = 720", "");
    check(
        "[detector]\nmax_batch_records = 100001",
        "detector.max_batch_records = 100001 is out of bounds: it must be in [1, 100000]",
    );
    check(
        "[detector]\ntest_batch_pause_ms = 10001",
        "detector.test_batch_pause_ms = 10001 is out of bounds: it must be in [0, 10000]",
    );
    check(
        "[limits]\nmax_schema_depth = 7",
        "limits.max_schema_depth = 7 is out of bounds: it must be in [8, 128]",
    );
    check("[limits]\nmax_schema_depth = 128", "");
    check("[limits]\nmax_spans_per_batch = 0", "limits.max_spans_per_batch = 0 must be at least 1");
    check(
        "[server]\nreserved_connections = 1025",
        "server.reserved_connections = 1025 is out of bounds: it must be in [1, 1024]",
    );
    check(
        "[server]\nidle_timeout_seconds = 0",
        "server.idle_timeout_seconds = 0 is out of bounds: it must be in [1, 3600]",
    );
    check("[server]\nmax_connections_per_peer = 0", "server.max_connections_per_peer = 0 must be at least 1");
    check(
        "[kafka]\npartitions = 65537",
        "kafka.partitions = 65537 is out of bounds: it must be in [1, 65536]",
    );
    check(
        "[kafka]\nsession_timeout_ms = 5999",
        "kafka.session_timeout_ms = 5999 is out of bounds: it must be in [6000, 300000]",
    );
    check(
        "[notify]\nmax_attempts = 101",
        "notify.max_attempts = 101 is out of bounds: it must be in [1, 100]",
    );
    check("[probe]\ntimeout_seconds = 0", "probe.timeout_seconds = 0 must be at least 1");
    check(
        "[detector]\ncontext_growth_percent = 10001",
        "detector.context_growth_percent = 10001 is out of bounds: it must be in [0, 10000] (0 turns it off)",
    );
    let server =
        |address: &str, name: &str| format!("[[otlp.servers]]\naddress = {address:?}\nserver = {name:?}\n");
    check(&(server("tools.internal:8080", "search-mcp") + &server("https://gw.example/mcp", "gateway")), "");
    check(&server("", "search-mcp"), "otlp.servers[0].address is empty");
    check(
        &(server("10.0.0.7", "a") + &server("10.0.0.7", "b")),
        "otlp.servers[1].address = \"10.0.0.7\" is listed twice",
    );
    let bad = Config::from_toml(&server("10.0.0.7", "../etc")).map(|_| ()).unwrap_err().to_string();
    assert!(bad.starts_with("otlp.servers[0].server = \"../etc\": "), "{bad}");
    check(
        "[server]\nbind = \"nowhere\"",
        "server.bind = \"nowhere\" is not an address like 127.0.0.1:8000: invalid socket address syntax",
    );
    let unknown = Config::from_toml("[detector]\nno_such_key = 1").map(|_| ()).unwrap_err().to_string();
    assert!(unknown.starts_with("invalid configuration: detector: unknown field `no_such_key`"), "{unknown}");
}
