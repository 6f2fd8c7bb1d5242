//! Operator commands and dead letters: the records the API and the worker send each other over the bus.

use serde::{Deserialize, Serialize};

use crate::{DetectorThresholds, ProjectName, ServerKey, ServerName, ToolKey, ToolName};

/// An operator command, published to the `commands` topic so that the detector owning the key applies
/// it in order with the data (DESIGN.md §1). Key: `project/server` for a server, `project` otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum OperatorCommand {
    AcceptBaseline {
        id: String,
        project: ProjectName,
        server: ServerName,
        accepted_by: String,
    },
    /// Accepts an upcoming release ahead: when a list equal to the release's arrives, it becomes the
    /// baseline at once (its drift event recorded as accepted). Rides the server's tool-list partition.
    AcceptRelease {
        id: String,
        project: ProjectName,
        server: ServerName,
        version: String,
        /// The release's list (short hash) as the upstream watcher captured it.
        release_hash: String,
        accepted_by: String,
    },
    SetThresholds {
        id: String,
        project: ProjectName,
        thresholds: DetectorThresholds,
    },
    /// Drops a server's detector state (its baseline and newest list; the next list starts a new
    /// baseline): it rides the server's tool-list partition, so the detector owning the server applies it.
    ForgetServer {
        id: String,
        project: ProjectName,
        server: ServerName,
        by: String,
    },
    /// Drops a tool's detector state (its return-shape window and contract check): it rides the tool's
    /// span partition, in order with its calls.
    ForgetTool {
        id: String,
        project: ProjectName,
        server: ServerName,
        tool: ToolName,
        by: String,
    },
}

impl OperatorCommand {
    pub fn id(&self) -> &str {
        match self {
            OperatorCommand::AcceptBaseline { id, .. }
            | OperatorCommand::AcceptRelease { id, .. }
            | OperatorCommand::SetThresholds { id, .. }
            | OperatorCommand::ForgetServer { id, .. }
            | OperatorCommand::ForgetTool { id, .. } => id,
        }
    }

    /// Whether a record on the spans topic may be a command about a tool (then it is read as one first;
    /// a record that does not read as a command is read as a span).
    pub fn may_be_tool_command(payload: &[u8]) -> bool {
        memchr::memmem::find(payload, br#""command":"forget_tool""#).is_some()
    }

    /// The bus key: the server's key, or the project's name for a project-wide command.
    pub fn key(&self) -> String {
        match self {
            OperatorCommand::AcceptBaseline { project, server, .. }
            | OperatorCommand::AcceptRelease { project, server, .. }
            | OperatorCommand::ForgetServer { project, server, .. } => {
                ServerKey::new(project.clone(), server.clone()).to_string()
            }
            OperatorCommand::ForgetTool { project, server, tool, .. } => {
                ToolKey { project: project.clone(), server: server.clone(), tool: tool.clone() }.to_string()
            }
            OperatorCommand::SetThresholds { project, .. } => project.to_string(),
        }
    }
}

/// An input record the detectors could not use, published to the `dead-letters` topic (key: the record's
/// key) so that its partition keeps flowing and nothing is dropped silently (DESIGN.md §8, §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetter {
    pub schema_version: u32,
    /// `tool-lists`, `spans` or `commands`.
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub key: String,
    pub reason: String,
    /// The record as published, when it is UTF-8 ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// ... else its bytes in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_hex: Option<String>,
    /// When the bus accepted the record.
    pub appended_at: crate::Timestamp,
}
