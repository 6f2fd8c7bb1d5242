//! `[auth]`: per-project API keys, inline or from a file of their own.

use std::path::PathBuf;

use driftline_http::ApiKey;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `[[auth.keys]] project = "…", scopes = ["ingest", "read", "admin"], sha256 = "<hex of the key>"`.
    pub keys: Vec<ApiKey>,
    /// More keys, as `[[keys]]` tables in a TOML file of their own (a mounted Kubernetes Secret).
    pub keys_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeysFile {
    #[serde(default)]
    pub(super) keys: Vec<ApiKey>,
}

impl AuthConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (index, key) in self.keys.iter().enumerate() {
            if key.sha256.len() != 64 || !key.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                invalid!("auth.keys[{index}].sha256 must be 64 hex digits (the SHA-256 of the key)");
            }
            if key.scopes.is_empty() {
                invalid!("auth.keys[{index}] needs at least one scope");
            }
        }
        Ok(())
    }
}
