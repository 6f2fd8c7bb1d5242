//! `[probe]`: the MCP servers driftline probes itself.

use serde::Deserialize;

use super::{at_least, ConfigError};

/// Active probing of MCP servers (Streamable HTTP, SSE or stdio): their tool lists and whether they answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// The project probe results belong to.
    pub project: driftline_schemas::ProjectName,
    pub interval_seconds: u64,
    /// Connecting, and each complete tools/list, must finish within this; otherwise the server is DOWN.
    pub timeout_seconds: u64,
    /// `[[probe.servers]] name = "search-mcp", url = "http://…/mcp", headers = { Authorization = "Bearer …" }`,
    /// or `name = "files", command = "npx", args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]`.
    pub servers: Vec<driftline_probe::ProbeTarget>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            project: driftline_schemas::ProjectName::default_project(),
            interval_seconds: 60,
            timeout_seconds: 10,
            servers: Vec::new(),
        }
    }
}

impl ProbeConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        at_least("probe.interval_seconds", self.interval_seconds, 1)?;
        at_least("probe.timeout_seconds", self.timeout_seconds, 1)?;
        for (index, target) in self.servers.iter().enumerate() {
            if let Err(reason) = target.endpoint() {
                invalid!("probe.servers[{index}] ({}): {reason}", target.name);
            }
        }
        let mut names = std::collections::HashSet::new();
        if let Some(target) = self.servers.iter().find(|t| !names.insert(t.name.as_str())) {
            invalid!("probe.servers: the name {:?} is used twice", target.name);
        }
        Ok(())
    }
}
