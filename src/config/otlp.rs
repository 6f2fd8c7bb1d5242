//! `[otlp]`: how OTLP trace ingest names servers that client spans know only by their address.

use std::net::SocketAddr;

use driftline_schemas::ServerName;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpConfig {
    /// A client span that names its server only by `server.address` (and `server.port`) or its request URL
    /// gets the name of the first entry for `host:port`, then `host`, then the longest URL prefix
    /// (`https://gw.example/mcp`). An address with no entry keeps its own name (`host:port`), which health
    /// lists: map it here to merge it with the server's other names.
    pub servers: Vec<OtlpServer>,
    /// Where OTLP/gRPC (`TraceService/Export`) listens, in `serve` and the `ingest` stage: unset, the
    /// exporters' default 127.0.0.1:4317 when it is free (a warning in the log when another process holds
    /// it); `"off"`, nowhere; an address, there, or the process does not start.
    pub grpc_bind: Option<String>,
}

/// Where OTLP/gRPC listens, decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcListen {
    Off,
    /// The default: served when the port is free.
    Default(SocketAddr),
    /// Configured: served, or the process refuses to start.
    Required(SocketAddr),
}

/// The OTLP/gRPC port the exporters use by default.
pub const DEFAULT_GRPC_BIND: &str = "127.0.0.1:4317";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpServer {
    /// `host`, `host:port`, or a URL prefix (`https://…`).
    pub address: String,
    /// The server's name, as its tool list and probe name it.
    pub server: String,
}

impl OtlpConfig {
    /// Checks the section; the error names the entry and the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.grpc_listen()?;
        self.server_names().map(|_| ())
    }

    pub fn grpc_listen(&self) -> Result<GrpcListen, ConfigError> {
        match self.grpc_bind.as_deref().map(str::trim) {
            None => Ok(GrpcListen::Default(DEFAULT_GRPC_BIND.parse().map_err(|_| {
                ConfigError::Invalid(format!("otlp.grpc_bind default {DEFAULT_GRPC_BIND} is not an address"))
            })?)),
            Some("off") => Ok(GrpcListen::Off),
            Some(address) => address.parse().map(GrpcListen::Required).map_err(|err| {
                ConfigError::Invalid(format!(
                    "otlp.grpc_bind = {address:?} is not an address like 127.0.0.1:4317 (or \"off\"): {err}"
                ))
            }),
        }
    }

    /// The table ingest reads.
    pub fn server_names(&self) -> Result<driftline_ingest::otlp::ServerNames, ConfigError> {
        let mut entries: Vec<(String, ServerName)> = Vec::new();
        for (index, entry) in self.servers.iter().enumerate() {
            let at = |what: String| ConfigError::Invalid(format!("otlp.servers[{index}].{what}"));
            let address = entry.address.trim();
            if address.is_empty() {
                return Err(at("address is empty".into()));
            }
            if entries.iter().any(|(known, _)| known == address) {
                return Err(at(format!("address = {address:?} is listed twice")));
            }
            let name = ServerName::parse(entry.server.clone())
                .map_err(|err| at(format!("server = {:?}: {err}", entry.server)))?;
            entries.push((address.to_owned(), name));
        }
        Ok(driftline_ingest::otlp::ServerNames::new(entries))
    }
}
