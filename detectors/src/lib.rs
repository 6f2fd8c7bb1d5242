//! Drift detection as pure functions: `(state, input, time) -> (state, outputs)`.
//!
//! Nothing here performs I/O or reads a clock; time arrives as an argument. The same code runs in the
//! embedded service, in the Kafka detector group, and in the offline CLI.

pub mod contract;
pub mod shape;
pub mod shape_drift;
pub mod tool_drift;
