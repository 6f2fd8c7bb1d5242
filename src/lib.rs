//! The `driftline` binary's library: its configuration tree, which the binary, its tests and the fuzz crate
//! read the same way. The stages themselves live in their crates; `main.rs` wires them.

pub mod config;
