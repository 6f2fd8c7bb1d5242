//! The return-value shape of DESIGN.md §3: structure without values, in one pass over the JSON bytes.
//!
//! The walk never builds a `serde_json::Value`: it validates the input as it goes, writes the shape of
//! what it keeps, and passes over everything after an array's first element without allocating. Depth is
//! tracked on an explicit stack, so no input can exhaust the call stack.

mod escape;
pub(crate) mod parse;
#[cfg(target_arch = "x86_64")]
mod tokens;
mod walk;

use driftline_schemas::{CallStatus, ProjectName, ShapeOutcome, Timestamp, ToolCallRecord, ToolCallSpan};
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
/// Invalid UTF-8 anywhere is `unparseable`.
pub fn fingerprint(json: &[u8], max_bytes: u64) -> Fingerprint {
    fingerprint_walked(walk::walk(json), max_bytes)
}

/// [`fingerprint`] for text known to be UTF-8 (a `RawValue`, a `&str`): the same result without checking
/// the encoding again. This is what ingest runs.
pub fn fingerprint_str(json: &str, max_bytes: u64) -> Fingerprint {
    fingerprint_walked(walk::walk_str(json), max_bytes)
}

/// [`fingerprint`] read byte by byte (never by tokens, whatever the CPU), for the tests and the fuzz target
/// that hold both walks to one result.
#[doc(hidden)]
pub fn fingerprint_bytewise(json: &[u8], max_bytes: u64) -> Fingerprint {
    fingerprint_walked(walk::walk_bytewise(json), max_bytes)
}

fn fingerprint_walked(walked: Result<walk::Walked, walk::Invalid>, max_bytes: u64) -> Fingerprint {
    let Ok(walked) = walked else {
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

/// Ingest's shape step (DESIGN.md §2): the span without its return value, plus the value's shape,
/// fingerprinted up to the largest cap any project may set. Detectors run the same step on raw spans that
/// other producers publish, so both paths yield identical records.
pub fn record_from_span(
    span: &ToolCallSpan,
    project: &ProjectName,
    ingested_at: Timestamp,
) -> ToolCallRecord {
    let print = match (&span.status, &span.return_value) {
        (CallStatus::Error, _) => {
            Fingerprint { outcome: ShapeOutcome::NotSuccess, shape: None, compact_bytes: None }
        }
        (CallStatus::Success, None) => Fingerprint::absent(),
        // An interim result asks the client for input: it is no answer of the tool's, so no shape of it
        // enters the tool's window or the contract check.
        (CallStatus::Success, Some(raw)) if is_interim_result(raw.get()) => Fingerprint::absent(),
        (CallStatus::Success, Some(raw)) => fingerprint_str(raw.get(), LARGEST_MAX_BYTES),
    };
    // The arguments' shape, under the same walk and cap as return values (a call's outcome does not
    // change what it was sent); arguments that do not fingerprint leave no shape.
    let argument_shape =
        span.arguments.as_deref().and_then(|raw| fingerprint_str(raw.get(), LARGEST_MAX_BYTES).shape);
    ToolCallRecord {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        project: project.clone(),
        span_id: span.span_id.clone(),
        trace_id: span.trace_id.clone(),
        session_id: span.session_id.clone(),
        agent_name: span.agent_name.clone(),
        server: span.server.clone(),
        tool: span.tool.clone(),
        started_at: span.started_at,
        duration_ms: span.duration_ms,
        status: span.status,
        error: span.error.clone(),
        ingested_at,
        shape_hash: print.hex8(),
        shape: print.shape,
        compact_bytes: print.compact_bytes,
        shape_outcome: print.outcome,
        argument_shape,
    }
}

/// Whether a recorded return value is an MCP 2026-07-28 interim result (`"resultType": "input_required"`
/// at the top of a `CallToolResult`): the server asks for input before it answers. Values that do not
/// mention `input_required` at all (nearly all) cost one substring search.
pub fn is_interim_result(raw: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(rename = "resultType", borrow, default)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    if memchr::memmem::find(raw.as_bytes(), b"input_required").is_none() || !raw.trim_start().starts_with('{')
    {
        return false;
    }
    serde_json::from_str::<Envelope<'_>>(raw)
        .is_ok_and(|envelope| envelope.result_type.as_deref() == Some("input_required"))
}

fn unparseable() -> Fingerprint {
    Fingerprint { outcome: ShapeOutcome::Unparseable, shape: None, compact_bytes: None }
}

#[cfg(test)]
mod tests;
