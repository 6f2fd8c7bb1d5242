//! The return-value shape of DESIGN.md §3: structure without values, in one pass over the JSON bytes.
//!
//! The walk never builds a `serde_json::Value`: it validates the input as it goes, writes the shape of
//! what it keeps, and passes over everything after an array's first element without allocating. Depth is
//! tracked on an explicit stack, so no input can exhaust the call stack.

mod escape;
mod walk;

use driftline_schemas::ShapeOutcome;
use sha2::{Digest, Sha256};

pub use escape::escape_key_into;

/// Containers may nest this deep; one more is `too_deep`.
pub const DEPTH_LIMIT: usize = 128;
/// The string SDKs send in place of a value they cut.
pub const TRUNCATED_SENTINEL: &str = "<truncated>";
/// The largest `tool_return_value_max_bytes` a project may set; ingest fingerprints up to this.
pub const LARGEST_MAX_BYTES: u64 = 1_048_576;

/// The result of fingerprinting one return value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub outcome: ShapeOutcome,
    /// Present only when `outcome` is `fingerprinted`.
    pub shape: Option<String>,
    /// Length of the value's compact JSON encoding; `None` when absent or not JSON.
    pub compact_bytes: Option<u64>,
}

impl Fingerprint {
    pub fn absent() -> Self {
        Fingerprint { outcome: ShapeOutcome::Absent, shape: None, compact_bytes: None }
    }

    /// Full lowercase hex SHA-256 of the shape.
    pub fn hash(&self) -> Option<String> {
        self.shape.as_deref().map(shape_hash)
    }

    /// First 8 hex digits of the hash.
    pub fn hex8(&self) -> Option<String> {
        self.shape.as_deref().map(shape_hex8)
    }
}

/// Lowercase hex SHA-256 of a shape string.
pub fn shape_hash(shape: &str) -> String {
    hex::encode(Sha256::digest(shape.as_bytes()))
}

/// First 8 hex digits of [`shape_hash`].
pub fn shape_hex8(shape: &str) -> String {
    driftline_schemas::hex8(&Sha256::digest(shape.as_bytes()))
}

/// Fingerprints a return value given as JSON bytes.
///
/// `max_bytes` is the cap on the compact encoding; a value strictly longer is `oversized`. Precedence
/// when several apply: `unparseable`, then `too_deep`, then `truncated_sentinel`, then `oversized`.
pub fn fingerprint(json: &[u8], max_bytes: u64) -> Fingerprint {
    match std::str::from_utf8(json) {
        Ok(text) => fingerprint_str(text, max_bytes),
        Err(_) => unparseable(),
    }
}

/// [`fingerprint`] for input already known to be UTF-8 (a `RawValue`, a `&str`).
pub fn fingerprint_str(json: &str, max_bytes: u64) -> Fingerprint {
    let Ok(walked) = walk::walk(json) else {
        return unparseable();
    };
    let compact_bytes = Some(walked.compact_bytes);
    let (outcome, shape) = match walked.shape {
        None => (ShapeOutcome::TooDeep, None),
        Some(_) if walked.is_truncated_sentinel => (ShapeOutcome::TruncatedSentinel, None),
        Some(_) if walked.compact_bytes > max_bytes => (ShapeOutcome::Oversized, None),
        Some(shape) => (ShapeOutcome::Fingerprinted, Some(shape)),
    };
    Fingerprint { outcome, shape, compact_bytes }
}

fn unparseable() -> Fingerprint {
    Fingerprint { outcome: ShapeOutcome::Unparseable, shape: None, compact_bytes: None }
}

#[cfg(test)]
mod tests;
