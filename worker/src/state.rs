//! Held state written back: the keys a batch changed, serialised once per batch with the views the API
//! reads, each under the stream of the record that last touched it.

use std::collections::BTreeMap;

use driftline_bus::{Consumer, Delivered, Message};
use driftline_schemas::{ServerKey, ToolKey};
use driftline_store::{Batch, DetectorState, Forgotten, ToolShapeRow};

use crate::views::tool_view;
use crate::{Worker, WorkerError};

/// What processing a batch's records builds: the batch to store, the keys whose state changed, and the
/// declared outputs to publish before the batch is stored. Each handler takes it with the record.
#[derive(Default)]
pub(crate) struct Outputs {
    pub(crate) batch: Batch,
    pub(crate) dirty: Dirty,
    pub(crate) declarations: Vec<Message>,
}

/// Keys whose state a batch changed, with the stream of the record that changed it (none when an
/// operator command did, which leaves the key where it is).
#[derive(Default)]
pub(crate) struct Dirty {
    pub(crate) servers: BTreeMap<ServerKey, Option<u32>>,
    pub(crate) tools: BTreeMap<ToolKey, Option<u32>>,
}

impl Dirty {
    pub(crate) fn server(&mut self, key: ServerKey, record: &Delivered) {
        self.servers.insert(key, Some(record.position.partition));
    }

    pub(crate) fn tool(&mut self, key: ToolKey, record: &Delivered) {
        self.tools.insert(key, Some(record.position.partition));
    }
}

impl<C: Consumer> Worker<C> {
    /// Serialises every state a record changed, once per batch, with the views the API reads; each key
    /// belongs to the stream of the last record that touched it.
    pub(crate) fn flush_state(&mut self, batch: &mut Batch, dirty: &Dirty) -> Result<(), WorkerError> {
        for (key, stream) in &dirty.servers {
            if let Some(stream) = stream {
                self.servers.move_to(key, *stream);
            }
        }
        for (key, stream) in &dirty.tools {
            if let Some(stream) = stream {
                self.tools.move_to(key, *stream);
            }
        }
        // A key forgotten and then seen again within the batch is written, not forgotten.
        let (servers, tools) = (&self.servers, &self.tools);
        batch.forgotten.retain(|forgotten| match forgotten {
            Forgotten::Server(key) => !servers.contains_key(key),
            Forgotten::Tool(key) => !tools.contains_key(key),
        });
        let row = |kind: &str, key: String, stream: Option<&u32>, json: String| DetectorState {
            kind: kind.to_owned(),
            key,
            stream: stream.copied().unwrap_or_default(),
            state: json,
        };
        for key in dirty.servers.keys() {
            if let Some(state) = self.servers.get(key) {
                let json = serde_json::to_string(state)
                    .map_err(|err| WorkerError::State { key: key.to_string(), reason: err.to_string() })?;
                batch.states.push(row("server", key.to_string(), self.servers.stream(key).as_ref(), json));
            }
        }
        for key in dirty.tools.keys() {
            let Some(state) = self.tools.get(key) else { continue };
            let json = serde_json::to_string(state)
                .map_err(|err| WorkerError::State { key: key.to_string(), reason: err.to_string() })?;
            batch.states.push(row("tool", key.to_string(), self.tools.stream(key).as_ref(), json));
            let thresholds = self.thresholds_of(&key.project);
            batch.tool_shapes.push(ToolShapeRow {
                project: key.project.to_string(),
                shape: tool_view(&key.server, &key.tool, state, &thresholds),
            });
        }
        Ok(())
    }
}
