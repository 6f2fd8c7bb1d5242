//! Input positions and the deterministic output ids derived from them (DESIGN.md §2).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where an input record sits in its source: a Kafka partition and offset, or (embedded) partition 0
/// and the bus sequence number. Together with the record key it identifies the record for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InputPosition {
    pub partition: u32,
    pub offset: u64,
}

/// The kind of output a record produced; part of the id so one record can produce several outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputKind {
    SchemaDriftEvent,
    ShapeDriftSignal,
    BaselineAcceptance,
    ToolCall,
    /// A server's DOWN or UP transition, for the notifier.
    Transition,
    /// A tool's returns stopped meeting its declared output schema (a shape signal of its own kind).
    DeclaredOutputMismatch,
    /// A release not yet running, captured in a sandbox and diffed against the server's baseline.
    UpcomingRelease,
}

impl OutputKind {
    fn prefix(self) -> &'static str {
        match self {
            OutputKind::SchemaDriftEvent => "drift",
            OutputKind::ShapeDriftSignal => "shape",
            OutputKind::BaselineAcceptance => "accept",
            OutputKind::ToolCall => "call",
            OutputKind::Transition => "transition",
            OutputKind::DeclaredOutputMismatch => "mismatch",
            OutputKind::UpcomingRelease => "upcoming",
        }
    }
}

/// Deterministic output id (DESIGN.md §2): a hash of the record key, its source position and the output
/// kind. Replaying the same input yields the same ids, so storage can deduplicate on them.
///
/// The form is `<prefix>-<32 hex>` (128 bits of SHA-256): `drift-…`, `shape-…`, `accept-…`.
pub fn derive_id(kind: OutputKind, record_key: &str, position: InputPosition) -> String {
    let mut hasher = Sha256::new();
    hasher.update(kind.prefix().as_bytes());
    hasher.update([0]);
    hasher.update(record_key.as_bytes());
    hasher.update([0]);
    hasher.update(position.partition.to_be_bytes());
    hasher.update(position.offset.to_be_bytes());
    let digest = hasher.finalize();
    format!("{}-{}", kind.prefix(), hex::encode(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: InputPosition = InputPosition { partition: 3, offset: 42 };

    #[test]
    fn same_inputs_same_id() {
        let first = derive_id(OutputKind::SchemaDriftEvent, "default/search-mcp", AT);
        assert_eq!(first, derive_id(OutputKind::SchemaDriftEvent, "default/search-mcp", AT));
        assert!(first.starts_with("drift-"));
        assert_eq!(first.len(), "drift-".len() + 32);
    }

    #[test]
    fn every_part_changes_the_id() {
        let base = derive_id(OutputKind::SchemaDriftEvent, "default/a", AT);
        let others = [
            derive_id(OutputKind::ShapeDriftSignal, "default/a", AT),
            derive_id(OutputKind::SchemaDriftEvent, "default/b", AT),
            derive_id(OutputKind::SchemaDriftEvent, "default/a", InputPosition { partition: 4, offset: 42 }),
            derive_id(OutputKind::SchemaDriftEvent, "default/a", InputPosition { partition: 3, offset: 43 }),
        ];
        for other in others {
            assert_ne!(base[base.len() - 32..], other[other.len() - 32..]);
        }
    }
}
