//! Forgetting state: a tool or server on an operator's command, and tools unseen for too long.

use std::time::Duration;

use driftline_bus::Consumer;
use driftline_schemas::{ServerKey, Timestamp, ToolKey};
use driftline_store::{Batch, Forgotten};

use crate::events::{Emit, QuarantinedKeys, UnseenToolsForgotten};
use crate::state::Outputs;
use crate::Worker;

impl<C: Consumer> Worker<C> {
    /// Drops a tool's state (and a quarantine of its key): its project's limits count it no more, and the
    /// store drops its state and shape view with this batch. Whether there was any.
    pub(crate) fn forget_tool(&mut self, key: &ToolKey, batch: &mut Batch) -> bool {
        let quarantined = self.quarantined.remove(&key.to_string()).is_some();
        let held = self.tools.remove(key).is_some();
        if held {
            self.keys_held.tool_removed(key);
        }
        if held || quarantined {
            batch.forgotten.push(Forgotten::Tool(key.clone()));
            QuarantinedKeys(self.quarantined.len()).emit();
        }
        held || quarantined
    }

    /// [`Worker::forget_tool`] for a server: its baselines and lists go, the next list starts afresh.
    pub(crate) fn forget_server(&mut self, key: &ServerKey, batch: &mut Batch) -> bool {
        let quarantined = self.quarantined.remove(&key.to_string()).is_some();
        let held = self.servers.remove(key).is_some();
        self.list_texts.retain(|listed| listed != key);
        if held {
            self.keys_held.server_removed(key);
        }
        if held || quarantined {
            batch.forgotten.push(Forgotten::Server(key.clone()));
            QuarantinedKeys(self.quarantined.len()).emit();
        }
        held || quarantined
    }

    /// Forgets the tools whose last call is older than `forget_unseen_tools_after` at `now` (bus time),
    /// at most once a minute of bus time. A tool restored from state stored without `last_seen` counts
    /// from now (written with this batch).
    pub(crate) fn forget_unseen_tools(&mut self, now: Timestamp, out: &mut Outputs) {
        let after = self.settings.forget_unseen_tools_after;
        let every = (after / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
        if self.swept_at.is_some_and(|at| now.as_millis() - at.as_millis() < every.as_millis() as i64) {
            return;
        }
        self.swept_at = Some(now);
        let cutoff = now.as_millis().saturating_sub(after.as_millis() as i64);
        let mut unseen = Vec::new();
        let mut unstamped = Vec::new();
        for (key, state) in self.tools.iter_mut() {
            match state.last_seen {
                Some(at) if at.as_millis() < cutoff => unseen.push(key.clone()),
                Some(_) => {}
                None => {
                    state.last_seen = Some(now);
                    unstamped.push(key.clone());
                }
            }
        }
        for key in unstamped {
            let stream = self.tools.stream(&key);
            out.dirty.tools.insert(key, stream);
        }
        for key in &unseen {
            self.forget_tool(key, &mut out.batch);
            out.dirty.tools.remove(key);
        }
        if !unseen.is_empty() {
            UnseenToolsForgotten { tools: unseen.len(), unseen_for_seconds: after.as_secs() }.emit();
        }
    }
}
