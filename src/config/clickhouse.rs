//! `[clickhouse]`: the ClickHouse HTTP interface, and the store settings it gives.

use driftline_schemas::Secret;
use serde::Deserialize;

use super::{present, ConfigError};

/// The ClickHouse HTTP interface (`storage.store = "clickhouse"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClickHouseConfig {
    pub url: String,
    /// Created by `driftline migrate` when missing.
    pub database: String,
    pub user: Option<String>,
    /// Better from the environment: DRIFTLINE__CLICKHOUSE__PASSWORD.
    pub password: Option<Secret>,
}

impl Default for ClickHouseConfig {
    fn default() -> Self {
        ClickHouseConfig {
            url: "http://127.0.0.1:18123".into(),
            database: "driftline".into(),
            user: None,
            password: None,
        }
    }
}

impl ClickHouseConfig {
    pub fn settings(&self) -> driftline_store::ClickHouseSettings {
        driftline_store::ClickHouseSettings {
            url: self.url.clone(),
            database: self.database.clone(),
            user: present(&self.user).map(str::to_owned),
            password: Secret::present(&self.password).cloned(),
        }
    }
}

impl ClickHouseConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            invalid!("clickhouse.url = {:?} must be an http:// or https:// address", self.url);
        }
        if self.database.is_empty() || !self.database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            invalid!("clickhouse.database = {:?}: use letters, digits and _", self.database);
        }
        Ok(())
    }
}
