//! Tool-list drift as stored and answered: classifications, change kinds, security flags (DESIGN.md §5).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Timestamp, ToolsText};

/// How much a change can hurt an agent. Ordered: `Compatible < Warning < Breaking`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Classification {
    Compatible,
    Warning,
    Breaking,
}

impl Classification {
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::Compatible => "COMPATIBLE",
            Classification::Warning => "WARNING",
            Classification::Breaking => "BREAKING",
        }
    }
}

impl fmt::Display for Classification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which side of the contract a schema describes: what the agent sends, or what it reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Input,
    Output,
}

/// Every kind of tool-list change (DESIGN.md §5 table), plus `schema_changed` for a difference no
/// specific kind describes (an unknown keyword, `$ref`, `allOf`, …), so that a changed hash always comes
/// with at least one change.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChangeType {
    ToolRemoved,
    ToolAdded,
    ToolRenamed,
    RequiredParamAdded,
    OptionalParamAdded,
    RequiredParamRemoved,
    ParamRemoved,
    ParamBecameRequired,
    ParamBecameOptional,
    ParamTypeChanged,
    ParamTypeWidened,
    ParamTypeNarrowed,
    EnumValueRemoved,
    EnumAdded,
    EnumValueAdded,
    EnumRemoved,
    ConstraintTightened,
    ConstraintRelaxed,
    PatternChanged,
    FormatChanged,
    DefaultChanged,
    DescriptionChanged,
    ParamDescriptionChanged,
    TitleChanged,
    AnnotationsChanged,
    OutputSchemaAdded,
    OutputSchemaRemoved,
    /// `execution.taskSupport` changed (MCP 2025-11-25 tasks).
    ExecutionChanged,
    /// Tool metadata no rule reads (`icons`, fields newer than this version): display only.
    MetadataChanged,
    /// A parameter newly marked `deprecated`.
    ParamDeprecated,
    /// A schema annotation (`examples`, `readOnly`, `writeOnly`, `deprecated` lifted): no effect on calls.
    SchemaAnnotationChanged,
    SchemaChanged,
    /// The server's `instructions` (what the model reads about the server as a whole) changed.
    InstructionsChanged,
    PromptAdded,
    PromptRemoved,
    /// A prompt's or one of its arguments' title or description changed.
    PromptChanged,
    PromptArgumentAdded,
    PromptArgumentRemoved,
    PromptArgumentBecameRequired,
    PromptArgumentBecameOptional,
    ResourceAdded,
    ResourceRemoved,
    /// A resource's name, texts or `mimeType` changed.
    ResourceChanged,
    ResourceTemplateAdded,
    ResourceTemplateRemoved,
    ResourceTemplateChanged,
    /// The server's declarations grew in a model's context beyond the project's setting
    /// (`context_growth_tokens` / `context_growth_percent`).
    ContextCostGrew,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::ToolRemoved => "tool_removed",
            ChangeType::ToolAdded => "tool_added",
            ChangeType::ToolRenamed => "tool_renamed",
            ChangeType::RequiredParamAdded => "required_param_added",
            ChangeType::OptionalParamAdded => "optional_param_added",
            ChangeType::RequiredParamRemoved => "required_param_removed",
            ChangeType::ParamRemoved => "param_removed",
            ChangeType::ParamBecameRequired => "param_became_required",
            ChangeType::ParamBecameOptional => "param_became_optional",
            ChangeType::ParamTypeChanged => "param_type_changed",
            ChangeType::ParamTypeWidened => "param_type_widened",
            ChangeType::ParamTypeNarrowed => "param_type_narrowed",
            ChangeType::EnumValueRemoved => "enum_value_removed",
            ChangeType::EnumAdded => "enum_added",
            ChangeType::EnumValueAdded => "enum_value_added",
            ChangeType::EnumRemoved => "enum_removed",
            ChangeType::ConstraintTightened => "constraint_tightened",
            ChangeType::ConstraintRelaxed => "constraint_relaxed",
            ChangeType::PatternChanged => "pattern_changed",
            ChangeType::FormatChanged => "format_changed",
            ChangeType::DefaultChanged => "default_changed",
            ChangeType::DescriptionChanged => "description_changed",
            ChangeType::ParamDescriptionChanged => "param_description_changed",
            ChangeType::TitleChanged => "title_changed",
            ChangeType::AnnotationsChanged => "annotations_changed",
            ChangeType::OutputSchemaAdded => "output_schema_added",
            ChangeType::OutputSchemaRemoved => "output_schema_removed",
            ChangeType::ExecutionChanged => "execution_changed",
            ChangeType::MetadataChanged => "metadata_changed",
            ChangeType::ParamDeprecated => "param_deprecated",
            ChangeType::SchemaAnnotationChanged => "schema_annotation_changed",
            ChangeType::SchemaChanged => "schema_changed",
            ChangeType::InstructionsChanged => "instructions_changed",
            ChangeType::PromptAdded => "prompt_added",
            ChangeType::PromptRemoved => "prompt_removed",
            ChangeType::PromptChanged => "prompt_changed",
            ChangeType::PromptArgumentAdded => "prompt_argument_added",
            ChangeType::PromptArgumentRemoved => "prompt_argument_removed",
            ChangeType::PromptArgumentBecameRequired => "prompt_argument_became_required",
            ChangeType::PromptArgumentBecameOptional => "prompt_argument_became_optional",
            ChangeType::ResourceAdded => "resource_added",
            ChangeType::ResourceRemoved => "resource_removed",
            ChangeType::ResourceChanged => "resource_changed",
            ChangeType::ResourceTemplateAdded => "resource_template_added",
            ChangeType::ResourceTemplateRemoved => "resource_template_removed",
            ChangeType::ResourceTemplateChanged => "resource_template_changed",
            ChangeType::ContextCostGrew => "context_cost_grew",
        }
    }
}

impl fmt::Display for ChangeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Low,
    Medium,
    High,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }
}

/// A finding of the security review of model-visible text (DESIGN.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecurityFlag {
    pub rule: String,
    pub severity: Severity,
    /// The matched text with a little context; invisible characters are written as `\u{…}`.
    pub excerpt: String,
}

/// One structural difference between a baseline tool list and a new one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SchemaChange {
    pub change_type: ChangeType,
    pub classification: Classification,
    pub tool_name: String,
    /// The top-level parameter the change is under, if any.
    pub param_name: Option<String>,
    /// Where in the schema: `filters.date_from`, `rows[]`, `annotations.readOnlyHint`; empty for the tool.
    pub path: String,
    /// `None` for changes to the tool itself (added, removed, description, …).
    pub direction: Option<Direction>,
    /// Only the value that changed (a type, a flag, a description), never a whole schema.
    pub before: Value,
    pub after: Value,
    pub security_flags: Vec<SecurityFlag>,
    /// The parameter's JSON Schema type on `*_param_added` / `*_param_removed` (`"string | null"`,
    /// `"any"`), as the documented drift-history API names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_type: Option<String>,
    /// The text before and after on description changes, as the documented drift-history API names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_description: Option<String>,
}

impl SchemaChange {
    /// A change of `change_type` at `path` of `name` (a tool, a prompt, a resource), with nothing of a
    /// parameter's type or descriptions filled in yet.
    pub fn new(
        change_type: ChangeType,
        classification: Classification,
        name: String,
        path: String,
        direction: Option<Direction>,
        (before, after): (Value, Value),
        security_flags: Vec<SecurityFlag>,
    ) -> SchemaChange {
        SchemaChange {
            change_type,
            classification,
            tool_name: name,
            param_name: None,
            path,
            direction,
            before,
            after,
            security_flags,
            param_type: None,
            old_description: None,
            new_description: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventStatus {
    Open,
    Accepted,
    Reverted,
}

/// One detected drift of a server's tool list against its accepted baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SchemaDriftEvent {
    pub id: String,
    pub project: String,
    pub server_name: String,
    pub detected_at: Timestamp,
    /// Hash of the accepted baseline the snapshot was diffed against.
    pub previous_hash: String,
    pub current_hash: String,
    pub status: EventStatus,
    /// The changes found, in tool-name order; at most 1,000 of each kind of consequence (classification
    /// and worst security flag) and 1 MiB of their text: the rest are counted in `omitted_changes`.
    pub changes: Vec<SchemaChange>,
    /// Changes found but not listed in `changes`, by classification (absent when all are listed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, u64>)]
    pub omitted_changes: BTreeMap<Classification, u64>,
    /// The worst classification among `changes`.
    pub max_classification: Option<Classification>,
    /// The worst security flag among `changes`; `high` must be shown wherever the event is.
    pub max_severity: Option<Severity>,
    #[serde(default)]
    pub accepted_by: Option<String>,
    #[serde(default)]
    pub accepted_at: Option<Timestamp>,
    /// Both full tool lists, for the "view full schemas" toggle (the texts the detector's state holds,
    /// shared, not copied: lists can be large).
    #[schema(value_type = Vec<Value>)]
    #[serde(default, deserialize_with = "crate::tools_text::shared_from_any")]
    pub previous_tools: Arc<ToolsText>,
    #[schema(value_type = Vec<Value>)]
    #[serde(default, deserialize_with = "crate::tools_text::shared_from_any")]
    pub current_tools: Arc<ToolsText>,
    /// `previous_tools` and `current_tools` were left out of this answer (empty): a history answers with
    /// the lists of its newest events only, up to a budget of text; the event alone has them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lists_omitted: bool,
    /// What the new list (tools and instructions) costs a model's context next to the baseline; absent on
    /// events recorded before driftline counted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_cost: Option<crate::ContextCostChange>,
}

impl SchemaDriftEvent {
    /// Leaves the tool lists out (see `lists_omitted`).
    pub fn without_lists(mut self) -> Self {
        self.previous_tools = Arc::default();
        self.current_tools = Arc::default();
        self.lists_omitted = true;
        self
    }
}

/// Health of a server as seen by the tool-list detector (and probes, when configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ServerStatus {
    Up,
    Degraded,
    Down,
    Unknown,
}
