//! `[kafka]`: brokers, topics, the consumer group and the connection's security.

use std::path::{Path, PathBuf};

use driftline_schemas::Secret;
use serde::Deserialize;

use super::{present, within, ConfigError};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`
    pub brokers: String,
    /// Topics are `<prefix>tool-lists`, `<prefix>spans`, `<prefix>commands`.
    pub topic_prefix: String,
    /// Partitions of each topic that `driftline topics create` (and `serve`) create.
    pub partitions: u32,
    pub replication: u32,
    /// A detector that stops heartbeating loses its partitions to the others after this long.
    pub session_timeout_ms: u32,
    /// Static group membership: a name unique per detector instance and stable across its restarts (a
    /// StatefulSet pod name), so a restarted detector takes its partitions back at once.
    pub instance_id: Option<String>,
    pub security_protocol: KafkaSecurity,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (with `sasl_plaintext` / `sasl_ssl`).
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    /// Better from the environment: DRIFTLINE__KAFKA__SASL_PASSWORD.
    pub sasl_password: Option<Secret>,
    /// CA bundle for `ssl` / `sasl_ssl`; the system's roots when unset.
    pub ssl_ca_location: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaSecurity {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:19092".into(),
            topic_prefix: "driftline.".into(),
            partitions: 4,
            replication: 1,
            session_timeout_ms: 10_000,
            instance_id: None,
            security_protocol: KafkaSecurity::Plaintext,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            ssl_ca_location: None,
        }
    }
}

impl KafkaConfig {
    pub fn settings(&self) -> driftline_bus::KafkaSettings {
        driftline_bus::KafkaSettings {
            brokers: self.brokers.clone(),
            topic_prefix: self.topic_prefix.clone(),
            partitions: self.partitions,
            replication: self.replication,
            session_timeout_ms: self.session_timeout_ms,
            instance_id: present(&self.instance_id).map(str::to_owned),
            client_properties: driftline_bus::ClientProperties(self.client_properties()),
        }
    }

    /// librdkafka properties for the connection's security, shared by producer, consumer and admin client.
    fn client_properties(&self) -> Vec<(String, String)> {
        let protocol = match self.security_protocol {
            KafkaSecurity::Plaintext => "plaintext",
            KafkaSecurity::Ssl => "ssl",
            KafkaSecurity::SaslPlaintext => "sasl_plaintext",
            KafkaSecurity::SaslSsl => "sasl_ssl",
        };
        let mut properties = vec![("security.protocol".to_owned(), protocol.to_owned())];
        let mut add = |key: &str, value: Option<&str>| {
            if let Some(value) = value {
                properties.push((key.to_owned(), value.to_owned()));
            }
        };
        add("sasl.mechanisms", present(&self.sasl_mechanism));
        add("sasl.username", present(&self.sasl_username));
        add("sasl.password", Secret::present(&self.sasl_password).map(Secret::expose));
        add("ssl.ca.location", self.ssl_ca_location.as_deref().and_then(Path::to_str));
        properties
    }
}

impl KafkaConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        within("kafka.partitions", self.partitions, 1..=65_536)?;
        within("kafka.replication", self.replication, 1..=i16::MAX as _)?;
        if let Some(mechanism) = present(&self.sasl_mechanism) {
            if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&mechanism) {
                invalid!("kafka.sasl_mechanism = {mechanism:?}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
            }
        }
        let sasl = matches!(self.security_protocol, KafkaSecurity::SaslPlaintext | KafkaSecurity::SaslSsl);
        if sasl && (present(&self.sasl_mechanism).is_none() || present(&self.sasl_username).is_none()) {
            invalid!("kafka.security_protocol = sasl_*: set kafka.sasl_mechanism and kafka.sasl_username (and the password)");
        }
        // The broker's default group limits.
        within("kafka.session_timeout_ms", self.session_timeout_ms, 6_000..=300_000)?;
        Ok(())
    }
}
