//! Tests of the ClickHouse store's pure parts; its behaviour is tested on the real engine by
//! `tests/store_contract.rs`.

use super::*;

#[test]
fn migration_files_split_into_statements_without_comments() {
    let parts = statements(MIGRATIONS[0]);
    assert!(parts.len() >= 10, "{parts:?}");
    assert!(parts.iter().all(|s| s.starts_with("CREATE TABLE IF NOT EXISTS")), "{parts:?}");
    assert!(parts.iter().all(|s| !s.contains("--")), "{parts:?}");
}
