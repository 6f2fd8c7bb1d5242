//! The SQLite store behind hooks: a test changes what a write or a lookup does, and everything else is the
//! store's own.

use std::collections::HashMap;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp, ToolKey};
use driftline_store::rollup::{Backfill, Rollup, RollupKey};
use driftline_store::{Batch, DetectorStore, RepeatLookup, Resume, SqliteStore, StoreError, Streams};

/// What a test does in place of the store's batch write and its lookup of stored calls (by default, what
/// the store does).
#[async_trait]
pub trait Hooks: Send + Sync {
    async fn apply(&self, store: &SqliteStore, batch: Batch) -> Result<(), StoreError> {
        store.apply(batch).await
    }

    async fn stored_calls(
        &self,
        store: &SqliteStore,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        store.stored_calls(identities, since).await
    }

    /// How the worker tells a call sent again (the store's own way by default).
    fn repeat_lookup(&self, store: &SqliteStore) -> RepeatLookup {
        store.repeat_lookup()
    }
}

pub struct Hooked<H> {
    pub inner: SqliteStore,
    pub hooks: H,
}

#[async_trait]
impl<H: Hooks> DetectorStore for Hooked<H> {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError> {
        self.hooks.apply(&self.inner, batch).await
    }
    async fn rollups(&self, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        self.inner.rollups(keys).await
    }
    async fn backfill_rollups(
        &self,
        tools: &[(ToolKey, InputPosition)],
        backfill: Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        self.inner.backfill_rollups(tools, backfill).await
    }
    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError> {
        self.inner.resume(streams).await
    }
    async fn stored_calls(
        &self,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        self.hooks.stored_calls(&self.inner, identities, since).await
    }
    fn repeat_lookup(&self) -> RepeatLookup {
        self.hooks.repeat_lookup(&self.inner)
    }
    async fn recent_identities(
        &self,
        streams: Streams<'_>,
        since: Timestamp,
        most_per_stream: usize,
    ) -> Result<Vec<(String, InputPosition, Timestamp)>, StoreError> {
        self.inner.recent_identities(streams, since, most_per_stream).await
    }
}
