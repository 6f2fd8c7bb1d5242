use serde::{Deserialize, Serialize};

use crate::DetectorThresholds;

/// An operator command, published to the `commands` topic so that the detector owning the key applies
/// it in order with the data (DESIGN.md §1). Key: `project/server` for a server, `project` otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum OperatorCommand {
    AcceptBaseline { id: String, project: String, server: String, accepted_by: String },
    SetThresholds { id: String, project: String, thresholds: DetectorThresholds },
}

impl OperatorCommand {
    pub fn id(&self) -> &str {
        match self {
            OperatorCommand::AcceptBaseline { id, .. } | OperatorCommand::SetThresholds { id, .. } => id,
        }
    }

    pub fn key(&self) -> String {
        match self {
            OperatorCommand::AcceptBaseline { project, server, .. } => format!("{project}/{server}"),
            OperatorCommand::SetThresholds { project, .. } => project.clone(),
        }
    }
}
