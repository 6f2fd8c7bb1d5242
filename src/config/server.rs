//! `[server]`: the HTTP listener, its hosts and its connection and body limits.

use serde::Deserialize;

use super::{at_least, within, ConfigError, LimitsConfig};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the one HTTP port (ingest, API). Without API keys it must be a loopback address.
    pub bind: String,
    /// Names clients may reach this server by (the `Host` header, without port), besides `localhost` and
    /// loopback addresses in local mode. Set, they are enforced with API keys too (421 for any other).
    pub allowed_hosts: Vec<String>,
    /// Connections open at once; further ones wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// A request's headers must arrive within this many seconds; a keep-alive connection idle this long
    /// is closed too.
    pub header_read_timeout_seconds: u64,
    /// A connection on which no byte moves either way for this many seconds is closed (a stalled upload,
    /// a client that does not read its answer).
    pub idle_timeout_seconds: u64,
    /// Connections one client address may hold at once; more are refused at accept (429).
    pub max_connections_per_peer: usize,
    /// Connections beyond `max_connections` kept for `/healthz`, `/readyz` and `/metrics` only.
    pub reserved_connections: usize,
    /// A request's whole body must arrive within this many seconds of its headers (408 otherwise).
    pub body_timeout_seconds: u64,
    /// After its first 5 seconds a body must have arrived at this average rate at least (408 otherwise).
    pub min_body_bytes_per_second: usize,
    /// Body bytes all requests together may hold at once; beyond it a request is 503 (retry).
    pub max_body_bytes_in_flight: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:8000".into(),
            allowed_hosts: Vec::new(),
            max_connections: 1024,
            header_read_timeout_seconds: 10,
            idle_timeout_seconds: 60,
            max_connections_per_peer: 256,
            reserved_connections: 32,
            body_timeout_seconds: 60,
            min_body_bytes_per_second: 1024,
            max_body_bytes_in_flight: 256 * 1024 * 1024,
        }
    }
}

impl ServerConfig {
    pub fn connection_limits(&self) -> driftline_http::ConnectionLimits {
        driftline_http::ConnectionLimits {
            max_connections: self.max_connections,
            header_read_timeout: std::time::Duration::from_secs(self.header_read_timeout_seconds),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout_seconds),
            max_connections_per_peer: self.max_connections_per_peer,
            reserved_connections: self.reserved_connections,
        }
    }

    /// How request bodies are read; `max_bytes` is the largest any route takes (`limits.max_body_bytes`).
    pub fn body_limits(&self, max_bytes: usize) -> driftline_http::BodyLimits {
        driftline_http::BodyLimits {
            max_bytes,
            timeout: std::time::Duration::from_secs(self.body_timeout_seconds),
            min_bytes_per_second: self.min_body_bytes_per_second,
            max_bytes_in_flight: self.max_body_bytes_in_flight,
        }
    }
}

impl ServerConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self, limits: &LimitsConfig) -> Result<(), ConfigError> {
        for (index, host) in self.allowed_hosts.iter().enumerate() {
            let valid = !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
            if !valid {
                invalid!("server.allowed_hosts[{index}] = {host:?}: a host name or address without port");
            }
        }
        within("server.max_connections", self.max_connections, 1..=1_000_000)?;
        // Above `max_connections` it simply does not bind.
        at_least("server.max_connections_per_peer", self.max_connections_per_peer, 1)?;
        within("server.reserved_connections", self.reserved_connections, 1..=1_024)?;
        if self.min_body_bytes_per_second > 1024 * 1024 {
            invalid!(
                "server.min_body_bytes_per_second = {} must be at most 1048576",
                self.min_body_bytes_per_second
            );
        }
        if self.max_body_bytes_in_flight < limits.max_body_bytes {
            invalid!(
                "server.max_body_bytes_in_flight = {} must be at least limits.max_body_bytes = {}",
                self.max_body_bytes_in_flight,
                limits.max_body_bytes
            );
        }
        for (key, value) in [
            ("server.header_read_timeout_seconds", self.header_read_timeout_seconds),
            ("server.idle_timeout_seconds", self.idle_timeout_seconds),
            ("server.body_timeout_seconds", self.body_timeout_seconds),
        ] {
            within(key, value, 1..=3_600)?;
        }
        Ok(())
    }
}
