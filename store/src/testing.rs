//! A store behind hooks, for tests (the `testing` feature): a test changes what a batch write, a rollup
//! read or a lookup of stored calls does, and every other method — `sync` and `expire` included — is the
//! inner store's own. One wrapper for every test that needs a store that fails, half writes or forgets.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp, ToolKey};

use crate::rollup::{Backfill, Rollup, RollupKey};
use crate::{Batch, DetectorStore, RepeatLookup, Resume, StoreError, Streams};

/// What a test does in place of the store; each method does what the store does unless a test says
/// otherwise.
#[async_trait]
pub trait Hooks<S: DetectorStore + ?Sized>: Send + Sync {
    async fn apply(&self, store: &S, batch: Batch) -> Result<(), StoreError> {
        store.apply(batch).await
    }

    async fn rollups(&self, store: &S, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        store.rollups(keys).await
    }

    async fn backfill_rollups(
        &self,
        store: &S,
        tools: &[(ToolKey, InputPosition)],
        backfill: Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        store.backfill_rollups(tools, backfill).await
    }

    async fn stored_calls(
        &self,
        store: &S,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        store.stored_calls(identities, since).await
    }

    fn repeat_lookup(&self, store: &S) -> RepeatLookup {
        store.repeat_lookup()
    }
}

/// The store `inner` with `hooks` in front of it.
pub struct Hooked<S: ?Sized, H> {
    pub inner: Arc<S>,
    pub hooks: H,
}

#[async_trait]
impl<S: DetectorStore + ?Sized, H: Hooks<S>> DetectorStore for Hooked<S, H> {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError> {
        self.hooks.apply(&self.inner, batch).await
    }
    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError> {
        self.inner.resume(streams).await
    }
    async fn rollups(&self, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        self.hooks.rollups(&self.inner, keys).await
    }
    async fn backfill_rollups(
        &self,
        tools: &[(ToolKey, InputPosition)],
        backfill: Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        self.hooks.backfill_rollups(&self.inner, tools, backfill).await
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
    async fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync().await
    }
    async fn expire(&self, now: Timestamp) -> Result<u64, StoreError> {
        self.inner.expire(now).await
    }
}
