//! One line of consequence per change, for people reading a drift report.

use driftline_schemas::{ChangeType, Direction, SchemaChange};

/// What a change means for the agents that use the tool.
pub fn consequence(change: &SchemaChange) -> String {
    let tool = &change.tool_name;
    let path = if change.path.is_empty() { "the input".to_owned() } else { format!("`{}`", change.path) };
    let output = change.direction == Some(Direction::Output);
    let (before, after) = (&change.before, &change.after);
    match (change.change_type, output) {
        (ChangeType::ToolRemoved, _) => format!("Agents calling {tool} will fail: the tool is gone."),
        (ChangeType::ToolAdded, _) => format!("A new tool {tool} is offered to agents."),
        (ChangeType::ToolRenamed, _) => format!("Agents calling {before} will fail until they call {after}."),
        (ChangeType::RequiredParamAdded, false) => {
            format!("Calls to {tool} without {path} will now be rejected.")
        }
        (ChangeType::RequiredParamAdded, true) => format!("Results of {tool} now always include {path}."),
        (ChangeType::OptionalParamAdded, false) => format!("Calls to {tool} may now pass {path}."),
        (ChangeType::OptionalParamAdded, true) => format!("Results of {tool} may now include {path}."),
        (ChangeType::RequiredParamRemoved, false) => {
            format!("{path} is gone: calls to {tool} that send it may be rejected or ignored.")
        }
        (ChangeType::RequiredParamRemoved, true) => {
            format!("Results of {tool} no longer include {path}; agents that read it will break.")
        }
        (ChangeType::ParamRemoved, false) => {
            format!("{path} is no longer declared; calls that send it may be rejected.")
        }
        (ChangeType::ParamRemoved, true) => format!("Results of {tool} may no longer include {path}."),
        (ChangeType::ParamBecameRequired, false) => {
            format!("Calls to {tool} that omit {path} will now be rejected.")
        }
        (ChangeType::ParamBecameRequired, true) => format!("{path} is now always present in results."),
        (ChangeType::ParamBecameOptional, false) => {
            format!("{path} may now be omitted from calls to {tool}.")
        }
        (ChangeType::ParamBecameOptional, true) => {
            format!("{path} may now be missing from results; agents that rely on it will break.")
        }
        (ChangeType::ParamTypeChanged, false) => {
            format!("{path} changed type: calls sending {before} values will be rejected.")
        }
        (ChangeType::ParamTypeChanged, true) => {
            format!("{path} changed type: agents reading {before} values will break.")
        }
        (ChangeType::ParamTypeWidened, false) => format!("{path} accepts more types than before."),
        (ChangeType::ParamTypeWidened, true) => {
            format!("{path} may now hold {after} values agents do not expect.")
        }
        (ChangeType::ParamTypeNarrowed, false) => {
            format!("{path} accepts fewer types; some valid calls will be rejected.")
        }
        (ChangeType::ParamTypeNarrowed, true) => format!("{path} holds fewer types than before."),
        (ChangeType::EnumValueRemoved, false) => {
            format!("Calls passing {before} for {path} will be rejected.")
        }
        (ChangeType::EnumValueRemoved, true) => format!("{path} no longer returns {before}."),
        (ChangeType::EnumAdded, false) => format!("{path} now accepts only the listed values."),
        (ChangeType::EnumAdded, true) => format!("{path} now returns only the listed values."),
        (ChangeType::EnumValueAdded, false) => format!("{path} accepts a new value {after}."),
        (ChangeType::EnumValueAdded, true) => {
            format!("{path} may return a new value {after} that agents do not expect.")
        }
        (ChangeType::EnumRemoved, false) => format!("{path} accepts any value now."),
        (ChangeType::EnumRemoved, true) => format!("{path} may return values outside the old list."),
        (ChangeType::ConstraintTightened, false) => {
            format!("{path} is more constrained; some previously valid calls will be rejected.")
        }
        (ChangeType::ConstraintTightened, true) => format!("{path} values are more constrained than before."),
        (ChangeType::ConstraintRelaxed, false) => format!("{path} is less constrained than before."),
        (ChangeType::ConstraintRelaxed, true) => format!("{path} may return values agents did not expect."),
        (ChangeType::PatternChanged, _) => {
            format!("The pattern of {path} changed; check that calls still match.")
        }
        (ChangeType::FormatChanged, _) => {
            format!("The format of {path} changed; check how values are written.")
        }
        (ChangeType::DefaultChanged, _) => {
            format!("Calls that omit {path} now get {after} instead of {before}.")
        }
        (ChangeType::DescriptionChanged, _) => {
            "The model reads this description: review it before trusting the tool.".to_owned()
        }
        (ChangeType::ParamDescriptionChanged, _) => {
            format!("The model reads the description of {path}: review it before trusting the tool.")
        }
        (ChangeType::TitleChanged, _) => "The title people and models see changed.".to_owned(),
        (ChangeType::AnnotationsChanged, _) => {
            "Behaviour hints changed; clients may now treat the tool differently.".to_owned()
        }
        (ChangeType::OutputSchemaAdded, _) => {
            format!("Results of {tool} are now described by an output schema.")
        }
        (ChangeType::OutputSchemaRemoved, _) => {
            format!("Results of {tool} are no longer described by an output schema.")
        }
        (ChangeType::ExecutionChanged, _) => match after.as_str() {
            Some("required") => format!("{tool} must now be called as a task; plain calls will be rejected."),
            Some("forbidden") => format!("{tool} can no longer be called as a task."),
            _ => format!("{tool} may now also be called as a task."),
        },
        (ChangeType::MetadataChanged, _) => {
            format!("Display metadata of {tool} changed; calls are unaffected.")
        }
        (ChangeType::ParamDeprecated, _) => {
            format!("{path} is deprecated: callers should stop relying on it before it is removed.")
        }
        (ChangeType::SchemaAnnotationChanged, _) => {
            format!("An annotation of {path} changed; what calls may send is unchanged.")
        }
        (ChangeType::SchemaChanged, _) => {
            "The schema changed in a way no specific rule names; compare the full schemas.".to_owned()
        }
        (ChangeType::InstructionsChanged, _) => {
            "The instructions the model reads about this server changed; review the new text.".to_owned()
        }
        (ChangeType::PromptAdded, _) => format!("A new prompt {tool} is offered."),
        (ChangeType::PromptRemoved, _) => format!("Clients using the prompt {tool} will fail: it is gone."),
        (ChangeType::PromptChanged, _) => format!("Text the model reads in the prompt {tool} changed."),
        (ChangeType::PromptArgumentAdded, _)
            if change.classification == driftline_schemas::Classification::Breaking =>
        {
            format!("Clients getting the prompt {tool} without {path} will now be refused.")
        }
        (ChangeType::PromptArgumentAdded, _) => format!("The prompt {tool} may now take {path}."),
        (ChangeType::PromptArgumentRemoved, _) => format!("The prompt {tool} no longer declares {path}."),
        (ChangeType::PromptArgumentBecameRequired, _) => {
            format!("Clients getting the prompt {tool} without {path} will now be refused.")
        }
        (ChangeType::PromptArgumentBecameOptional, _) => {
            format!("{path} of the prompt {tool} may now be left out.")
        }
        (ChangeType::ResourceAdded, _) => format!("A new resource {tool} is listed."),
        (ChangeType::ResourceRemoved, _) => format!("The resource {tool} is no longer listed."),
        (ChangeType::ResourceChanged, _) => {
            format!("What clients read about the resource {tool} changed ({path}).")
        }
        (ChangeType::ResourceTemplateAdded, _) => format!("A new resource template {tool} is offered."),
        (ChangeType::ResourceTemplateRemoved, _) => {
            format!("Clients reading resources through {tool} will fail: the template is gone.")
        }
        (ChangeType::ResourceTemplateChanged, _) => {
            format!("What clients read about the resource template {tool} changed ({path}).")
        }
        (ChangeType::ContextCostGrew, _) => {
            let tokens = |v: &serde_json::Value| crate::context_cost::grouped(v.as_u64().unwrap_or(0));
            format!(
                "The server's tools and instructions grew from {} to {} tokens, past the project's limit: \
                 every session with it spends that much more of the model's context.",
                tokens(before),
                tokens(after)
            )
        }
    }
}
