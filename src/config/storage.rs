//! `[storage]`: which bus and which store a process uses.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusKind {
    /// A durable log in SQLite inside the process.
    #[default]
    Embedded,
    /// Apache Kafka (the `[kafka]` section).
    Kafka,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// SQLite in `storage.data_dir`.
    #[default]
    Sqlite,
    /// ClickHouse (the `[clickhouse]` section); tables from `driftline migrate`.
    Clickhouse,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    pub bus: BusKind,
    pub store: StoreKind,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            data_dir: PathBuf::from("./driftline-data"),
            bus: BusKind::Embedded,
            store: StoreKind::Sqlite,
        }
    }
}
