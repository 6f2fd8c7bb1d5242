//! `[otlp]`: how OTLP trace ingest names servers that client spans know only by their address.

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
}

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
        self.server_names().map(|_| ())
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
