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
