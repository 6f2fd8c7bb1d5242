//! Tool-list snapshots as captured and carried on the bus, with what a server shows besides its tools.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ProjectName, ServerKey, ServerName, Timestamp};

fn schema_version() -> u32 {
    crate::SCHEMA_VERSION
}

/// Who captured a tool list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotSource {
    Sdk,
    Probe,
    Api,
    /// A release not yet running anywhere, installed and captured in a sandbox by the upstream watcher: the
    /// detector reports what it would change and keeps the server's state as it is.
    Upstream,
}

/// The release an `upstream` snapshot is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamRelease {
    /// `npm:@scope/name` or `pypi:name`.
    pub package: String,
    pub version: String,
    /// When the registry says it was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<Timestamp>,
    /// How an install pins the version in use (`@scope/name@1.2.3`, `name==1.2.3`), for the advice.
    pub pin: String,
    /// Why the release could not be installed or captured (then `tools` is empty and nothing is diffed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One complete `tools/list` declaration of a server. Kafka key: `project/server`.
///
/// `tools` keeps the server's JSON exactly as declared: a server that breaks the MCP spec must still be
/// diffed as far as possible (DESIGN.md §5), so the detector, not the parser, decides what it can read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolListSnapshot {
    #[serde(default = "schema_version", deserialize_with = "crate::known_schema_version")]
    pub schema_version: u32,
    pub project: ProjectName,
    pub server: ServerName,
    pub captured_at: Timestamp,
    pub source: SnapshotSource,
    /// Round trip of the probe that captured the list (probes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    pub tools: Vec<Value>,
    /// The server's instructions, prompts, resources and resource templates, where captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surfaces: Option<ServerSurfaces>,
    /// The release captured (source `upstream` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<UpstreamRelease>,
}

/// A [`ToolListSnapshot`] as read from the bus with its tools left as text: a detector that has seen the
/// same text before (a probe's unchanged list, most records) need not parse it again.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolListRecord<'a> {
    #[serde(default = "schema_version", deserialize_with = "crate::known_schema_version")]
    pub schema_version: u32,
    pub project: ProjectName,
    pub server: ServerName,
    pub captured_at: Timestamp,
    pub source: SnapshotSource,
    #[serde(default)]
    pub latency_ms: Option<f64>,
    #[serde(borrow)]
    pub tools: &'a serde_json::value::RawValue,
    #[serde(default)]
    pub surfaces: Option<ServerSurfaces>,
    /// Boxed: most records are not of a release, and the record is held by value on the worker's path.
    #[serde(default)]
    pub release: Option<Box<UpstreamRelease>>,
}

impl ToolListRecord<'_> {
    pub fn key(&self) -> ServerKey {
        ServerKey { project: self.project.clone(), server: self.server.clone() }
    }
}

/// What a server shows the model besides its tools (MCP): the `instructions` its initialize result (or
/// `server/discover`) carries, its prompts, resources and resource templates, as declared. A field left out
/// was not captured (a producer that sends tools only): the detector keeps what the last capture had.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerSurfaces {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// MCP Prompt objects (`name`, `title`, `description`, `arguments` with `required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<Value>>,
    /// MCP Resource objects (`uri`, `name`, `title`, `description`, `mimeType`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<Value>>,
    /// MCP ResourceTemplate objects (`uriTemplate`, `name`, `title`, `description`, `mimeType`).
    #[serde(default, rename = "resourceTemplates", skip_serializing_if = "Option::is_none")]
    pub resource_templates: Option<Vec<Value>>,
}

impl ServerSurfaces {
    /// Whether nothing was captured at all.
    pub fn is_uncaptured(&self) -> bool {
        self.instructions.is_none()
            && self.prompts.is_none()
            && self.resources.is_none()
            && self.resource_templates.is_none()
    }

    /// The lists with their names, for limits and messages.
    pub fn lists(&self) -> [(&'static str, Option<&Vec<Value>>); 3] {
        [
            ("prompts", self.prompts.as_ref()),
            ("resources", self.resources.as_ref()),
            ("resourceTemplates", self.resource_templates.as_ref()),
        ]
    }
}

/// A probe that could not read a server's tool list in time (key `project/server`, on the tool-lists topic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeFailure {
    #[serde(default = "schema_version", deserialize_with = "crate::known_schema_version")]
    pub schema_version: u32,
    pub project: ProjectName,
    pub server: ServerName,
    pub probed_at: Timestamp,
    pub error: String,
}

impl ToolListSnapshot {
    pub fn key(&self) -> ServerKey {
        ServerKey { project: self.project.clone(), server: self.server.clone() }
    }
}

impl ProbeFailure {
    pub fn key(&self) -> ServerKey {
        ServerKey { project: self.project.clone(), server: self.server.clone() }
    }
}

/// How large a tool list may be: the detector's cost grows with it, and one record must never hold the
/// detector (and every project behind it) for long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolListLimits {
    pub max_tools: usize,
    /// Nesting of JSON values within one tool.
    pub max_depth: usize,
    /// Schema nodes the list's `$ref`s may copy in when its tools are normalised (all tools together): a
    /// few kilobytes of references can fan out to millions of nodes. Checked by the detectors' crate
    /// (`tool_drift::check_tool_list`), which expands references.
    pub max_ref_nodes: usize,
    /// Bytes of tool-list text one project's servers may hold in a detector (each server's baseline and
    /// newest list): the detector keeps them for as long as it runs, so one API key creating servers must
    /// not exhaust its memory. Checked by the worker, which knows what is held.
    pub max_project_bytes: usize,
}

impl Default for ToolListLimits {
    fn default() -> Self {
        ToolListLimits {
            max_tools: 5_000,
            max_depth: 64,
            max_ref_nodes: 1_000_000,
            max_project_bytes: 256 << 20,
        }
    }
}

/// Why a tool list is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolListTooLarge {
    #[error("{0} tools in one list; at most {1} are accepted (limits.max_tools_per_list)")]
    Tools(usize, usize),
    #[error("tool {0} is nested {1} levels deep; at most {2} are accepted (limits.max_schema_depth)")]
    Depth(usize, usize, usize),
    #[error(
        "the tools' $ref expand to more than {1} schema nodes (at least {0}); at most {1} are accepted (limits.max_ref_expansion_nodes)"
    )]
    RefExpansion(usize, usize),
    #[error(
        "with this list the project's servers would hold {0} bytes of tool lists in the detector; at most {1} are kept (limits.max_tool_list_bytes_per_project)"
    )]
    ProjectBytes(usize, usize),
    #[error("{1} {0} in one list; at most {2} are accepted (limits.max_tools_per_list)")]
    SurfaceEntries(&'static str, usize, usize),
    #[error("{0}[{1}] is nested {2} levels deep; at most {3} are accepted (limits.max_schema_depth)")]
    SurfaceDepth(&'static str, usize, usize, usize),
    /// A tool whose name spans could not carry (the rules of [`crate::ToolName`], on every path).
    #[error("tools[{0}]: {1}")]
    ToolName(usize, String),
}

/// The tool at `index` has a name its calls can carry: a string [`crate::ToolName`] accepts.
pub fn check_tool_name(index: usize, name: Option<&str>) -> Result<(), ToolListTooLarge> {
    match name {
        None => Err(ToolListTooLarge::ToolName(index, "name must be a string".to_owned())),
        Some(name) => crate::ToolName::parse(name)
            .map(|_| ())
            .map_err(|err| ToolListTooLarge::ToolName(index, err.to_string())),
    }
}

/// Nesting depth of a JSON value (a scalar is 0), without recursion: any input is safe.
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|item| (item, depth + 1))),
            _ => {}
        }
    }
    deepest
}

impl ToolListLimits {
    pub fn check(&self, tools: &[Value]) -> Result<(), ToolListTooLarge> {
        if tools.len() > self.max_tools {
            return Err(ToolListTooLarge::Tools(tools.len(), self.max_tools));
        }
        for (index, tool) in tools.iter().enumerate() {
            self.check_depth(index, tool)?;
        }
        Ok(())
    }

    /// A server's other surfaces within the same limits as its tools: as many entries per list, as deep.
    pub fn check_surfaces(&self, surfaces: &ServerSurfaces) -> Result<(), ToolListTooLarge> {
        for (name, list) in surfaces.lists() {
            let Some(list) = list else { continue };
            if list.len() > self.max_tools {
                return Err(ToolListTooLarge::SurfaceEntries(name, list.len(), self.max_tools));
            }
            for (index, entry) in list.iter().enumerate() {
                let depth = json_depth(entry);
                if depth > self.max_depth {
                    return Err(ToolListTooLarge::SurfaceDepth(name, index, depth, self.max_depth));
                }
            }
        }
        Ok(())
    }

    /// The nesting of the list's tool at `index`.
    pub fn check_depth(&self, index: usize, tool: &Value) -> Result<(), ToolListTooLarge> {
        let depth = json_depth(tool);
        if depth > self.max_depth {
            return Err(ToolListTooLarge::Depth(index, depth, self.max_depth));
        }
        Ok(())
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn limits() {
        let limits = ToolListLimits { max_tools: 2, max_depth: 3, ..Default::default() };
        let tool = |depth: usize| (0..depth).fold(Value::Null, |inner, _| serde_json::json!({"a": inner}));
        assert_eq!(limits.check(&[tool(1), tool(3)]), Ok(()));
        assert_eq!(limits.check(&[tool(1), tool(1), tool(1)]), Err(ToolListTooLarge::Tools(3, 2)));
        assert_eq!(limits.check(&[tool(1), tool(4)]), Err(ToolListTooLarge::Depth(1, 4, 3)));
        assert_eq!(json_depth(&tool(1_000)), 1_000);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record (tools as text) reads every field a snapshot writes, alike, and refuses what a snapshot
    /// refuses: the two declarations must not drift apart.
    #[test]
    fn a_record_reads_what_a_snapshot_reads() {
        let text = r#"{"schema_version":1,"project":"p","server":"s","captured_at":"2026-03-26T08:15:42.000Z",
            "source":"probe","latency_ms":12.5,"tools":[{"name":"a","inputSchema":{"type":"object"}}]}"#;
        let snapshot: ToolListSnapshot = serde_json::from_str(text).expect("a snapshot");
        let written = serde_json::to_string(&snapshot).expect("serialize");
        let record: ToolListRecord<'_> = serde_json::from_str(&written).expect("a record");
        assert_eq!(
            (record.schema_version, &record.project, &record.server, record.captured_at, record.source),
            (
                snapshot.schema_version,
                &snapshot.project,
                &snapshot.server,
                snapshot.captured_at,
                snapshot.source
            )
        );
        assert_eq!(record.latency_ms, snapshot.latency_ms);
        let tools: Vec<Value> = serde_json::from_str(record.tools.get()).expect("tools");
        assert_eq!(tools, snapshot.tools);
        for refused in [
            text.replace(r#""source":"probe""#, r#""source":"probe","extra":1"#),
            text.replace(r#""schema_version":1"#, r#""schema_version":2"#),
            text.replace(r#""project":"p""#, r#""project":"../p""#),
        ] {
            assert!(serde_json::from_str::<ToolListSnapshot>(&refused).is_err(), "{refused}");
            assert!(serde_json::from_str::<ToolListRecord<'_>>(&refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn snapshot_round_trips_the_design_example() {
        let text = r#"{"project":"default","server":"search-mcp","captured_at":"2026-03-26T08:15:42.000Z",
            "source":"sdk","tools":[{"name":"search_web","inputSchema":{"type":"object"}}]}"#;
        let snapshot: ToolListSnapshot = serde_json::from_str(text).expect("valid snapshot");
        assert_eq!(snapshot.schema_version, 1);
        assert_eq!(snapshot.key().to_string(), "default/search-mcp");
        let again: ToolListSnapshot =
            serde_json::from_str(&serde_json::to_string(&snapshot).expect("serialize")).expect("parse");
        assert_eq!(again, snapshot);
    }

    #[test]
    fn unknown_snapshot_fields_are_rejected() {
        let text = r#"{"project":"p","server":"s","captured_at":"2026-03-26T08:15:42Z","source":"sdk",
            "tools":[],"tool":[]}"#;
        let err = serde_json::from_str::<ToolListSnapshot>(text).expect_err("unknown field");
        assert!(err.to_string().contains("unknown field `tool`"), "{err}");
    }
}
