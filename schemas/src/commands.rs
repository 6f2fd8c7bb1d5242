use serde::{Deserialize, Serialize};

use crate::{DetectorThresholds, ProjectName, ServerKey, ServerName};

/// An operator command, published to the `commands` topic so that the detector owning the key applies
/// it in order with the data (DESIGN.md §1). Key: `project/server` for a server, `project` otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum OperatorCommand {
    AcceptBaseline { id: String, project: ProjectName, server: ServerName, accepted_by: String },
    SetThresholds { id: String, project: ProjectName, thresholds: DetectorThresholds },
}

impl OperatorCommand {
    pub fn id(&self) -> &str {
        match self {
            OperatorCommand::AcceptBaseline { id, .. } | OperatorCommand::SetThresholds { id, .. } => id,
        }
    }

    /// The bus key: the server's key, or the project's name for a project-wide command.
    pub fn key(&self) -> String {
        match self {
            OperatorCommand::AcceptBaseline { project, server, .. } => {
                ServerKey::new(project.clone(), server.clone()).to_string()
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
