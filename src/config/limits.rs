//! `[limits]`: bounds on what clients may send and what a project may hold.

use serde::Deserialize;

use super::{at_least, within, ConfigError};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_body_bytes: usize,
    pub max_spans_per_batch: usize,
    /// Tools in one list (ingest 413; from Kafka a dead letter; from a probe a failed probe). [1, 1000000]
    pub max_tools_per_list: usize,
    /// Nesting of JSON values within one tool (400 / dead letter). [8, 128]
    pub max_schema_depth: usize,
    /// Schema nodes a list's `$ref`s may copy in when normalised, all tools together (413 / dead letter).
    /// [1000, 100000000]
    pub max_ref_expansion_nodes: usize,
    /// Bytes of tool-list text one project's servers may hold in a detector: baselines and newest lists
    /// (a list beyond it is a dead letter). [1048576, 1099511627776]
    pub max_tool_list_bytes_per_project: usize,
    /// Servers one project may hold detector state for, per detector process (a record adding one more is a
    /// dead letter). [1, 10000000]
    pub max_servers_per_project: usize,
    /// Tools one project may hold detector state for (return-shape windows), per detector process (a call
    /// of one more is a dead letter). [1, 100000000]
    pub max_tools_per_project: usize,
    /// Bytes of tool state (return-shape windows, contract checks) one project may hold per detector
    /// process, counting each tool at its worst case under the project's settings: fewer tools fit when a
    /// project admin raises `history_window` or `tool_return_value_max_bytes`, and a change that would put
    /// the tools held beyond it is refused. [1048576, 1099511627776]
    pub max_state_bytes_per_project: u64,
    /// Tool-list work one project may send through ingest per second, in bytes of schema the detector reads
    /// (a list's text, and 16 bytes per node its `$ref`s copy in); beyond it and the burst, a PUT is 429
    /// with Retry-After. Per ingest process. [1024, 1099511627776]
    pub tool_list_work_per_second: u64,
    /// What a project may send at once; at least one list of the largest cost the list limits allow.
    pub tool_list_work_burst: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let tool_lists = driftline_schemas::ToolListLimits::default();
        let keys = driftline_schemas::KeyLimits::default();
        LimitsConfig {
            max_body_bytes: 5 * 1024 * 1024,
            max_spans_per_batch: 1000,
            max_tools_per_list: tool_lists.max_tools,
            max_schema_depth: tool_lists.max_depth,
            max_ref_expansion_nodes: tool_lists.max_ref_nodes,
            max_tool_list_bytes_per_project: tool_lists.max_project_bytes,
            max_servers_per_project: keys.servers,
            max_tools_per_project: keys.tools,
            max_state_bytes_per_project: keys.state_bytes,
            tool_list_work_per_second: driftline_schemas::ListWorkLimits::default().per_second,
            tool_list_work_burst: driftline_schemas::ListWorkLimits::default().burst,
        }
    }
}

impl LimitsConfig {
    pub fn keys(&self) -> driftline_schemas::KeyLimits {
        driftline_schemas::KeyLimits {
            servers: self.max_servers_per_project,
            tools: self.max_tools_per_project,
            state_bytes: self.max_state_bytes_per_project,
        }
    }

    pub fn list_work(&self) -> driftline_schemas::ListWorkLimits {
        driftline_schemas::ListWorkLimits {
            per_second: self.tool_list_work_per_second,
            burst: self.tool_list_work_burst,
        }
    }

    pub fn tool_lists(&self) -> driftline_schemas::ToolListLimits {
        driftline_schemas::ToolListLimits {
            max_tools: self.max_tools_per_list,
            max_depth: self.max_schema_depth,
            max_ref_nodes: self.max_ref_expansion_nodes,
            max_project_bytes: self.max_tool_list_bytes_per_project,
        }
    }
}

impl LimitsConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        at_least("limits.max_spans_per_batch", self.max_spans_per_batch, 1)?;
        at_least("limits.max_body_bytes", self.max_body_bytes, 1)?;
        within("limits.max_tools_per_list", self.max_tools_per_list, 1..=1_000_000)?;
        within("limits.max_schema_depth", self.max_schema_depth, 8..=128)?;
        within("limits.max_ref_expansion_nodes", self.max_ref_expansion_nodes, 1_000..=100_000_000)?;
        within(
            "limits.max_tool_list_bytes_per_project",
            self.max_tool_list_bytes_per_project,
            1 << 20..=1 << 40,
        )?;
        within("limits.max_servers_per_project", self.max_servers_per_project, 1..=10_000_000)?;
        within("limits.max_tools_per_project", self.max_tools_per_project, 1..=100_000_000)?;
        within("limits.max_state_bytes_per_project", self.max_state_bytes_per_project, 1 << 20..=1 << 40)?;
        within("limits.tool_list_work_per_second", self.tool_list_work_per_second, 1024..=1 << 40)?;
        // A full bucket must let the costliest list the limits allow through.
        let costliest =
            driftline_detectors::tool_drift::list_work(self.max_body_bytes, self.max_ref_expansion_nodes);
        if self.tool_list_work_burst < costliest {
            invalid!(
                "limits.tool_list_work_burst = {} is less than the costliest list the limits allow ({costliest}: limits.max_body_bytes = {} and 16 bytes for each of limits.max_ref_expansion_nodes = {})",
                self.tool_list_work_burst,
                self.max_body_bytes,
                self.max_ref_expansion_nodes
            );
        }
        Ok(())
    }
}
