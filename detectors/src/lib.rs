//! Drift detection as pure functions: `(state, input, time) -> (state, outputs)`.
//!
//! Nothing here performs I/O or reads a clock; time arrives as an argument. The same code runs in the
//! embedded service, in the Kafka detector group, and in the offline CLI.

pub mod context_cost;
pub mod contract;
pub mod shape;
pub mod shape_drift;
pub mod tool_drift;

/// The most bytes one tool's detector state can hold under `thresholds` — its return-shape window, its
/// contract check (the declaration aside: a copy of list text, which the list budget bounds), and its key
/// held twice (state and stream maps, each entry with a map slot at twice the entries at most) — what a
/// project's `limits.max_state_bytes_per_project` counts per tool.
pub fn tool_state_worst_case_bytes(thresholds: &driftline_schemas::DetectorThresholds) -> u64 {
    use std::mem::size_of;
    // Names: a project ≤ 128 bytes, a server and a tool ≤ 256 each.
    let key = (128 + 256 + 256 + size_of::<driftline_schemas::ToolKey>()) as u64;
    let slots = 2
        * (size_of::<(driftline_schemas::ToolKey, shape_drift::ToolShapeState, contract::ToolContractState)>(
        ) + size_of::<(driftline_schemas::ToolKey, u32)>()) as u64;
    shape_drift::ToolShapeState::worst_case_bytes(thresholds)
        + contract::ToolContractState::worst_case_bytes(thresholds)
        + 2 * key
        + slots
}
