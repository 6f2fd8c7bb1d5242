//! DESIGN.md §5's change table: how bad each kind of change is, per direction.
//!
//! The input schema is what the agent sends: what makes a previously valid call invalid is BREAKING.
//! The output schema is what the agent reads: what it may now receive that it could not before is BREAKING.

use driftline_schemas::{ChangeType, Classification, Direction};

use Classification::{Breaking as B, Compatible as C, Warning as W};

/// `(input, output)` classification of a change kind. Tool-level kinds (no direction) use the first.
const fn table(kind: ChangeType) -> (Classification, Classification) {
    match kind {
        ChangeType::ToolRemoved => (B, B),
        ChangeType::ToolAdded => (C, C),
        ChangeType::ToolRenamed => (B, B),
        ChangeType::RequiredParamAdded => (B, C),
        ChangeType::OptionalParamAdded => (C, C),
        ChangeType::RequiredParamRemoved => (B, B),
        // BREAKING instead when the input schema forbids additional properties (see `classify_removal`).
        ChangeType::ParamRemoved => (W, W),
        ChangeType::ParamBecameRequired => (B, C),
        ChangeType::ParamBecameOptional => (C, B),
        ChangeType::ParamTypeChanged => (B, B),
        ChangeType::ParamTypeWidened => (C, B),
        ChangeType::ParamTypeNarrowed => (B, C),
        ChangeType::EnumValueRemoved => (B, C),
        ChangeType::EnumAdded => (B, C),
        ChangeType::EnumValueAdded => (C, W),
        ChangeType::EnumRemoved => (C, B),
        ChangeType::ConstraintTightened => (B, C),
        ChangeType::ConstraintRelaxed => (C, B),
        ChangeType::PatternChanged
        | ChangeType::FormatChanged
        | ChangeType::DefaultChanged
        | ChangeType::DescriptionChanged
        | ChangeType::ParamDescriptionChanged
        | ChangeType::TitleChanged
        | ChangeType::AnnotationsChanged
        | ChangeType::SchemaChanged => (W, W),
        ChangeType::OutputSchemaAdded => (C, C),
        ChangeType::OutputSchemaRemoved => (W, W),
        // The diff refines these by what changed (see `diff/`): a task mode taken away is BREAKING,
        // a title added unflagged or an idempotent/open-world hint is COMPATIBLE.
        ChangeType::ExecutionChanged => (C, C),
        ChangeType::MetadataChanged => (C, C),
        ChangeType::ParamDeprecated => (W, W),
        ChangeType::SchemaAnnotationChanged => (C, C),
        // A server's other surfaces (no direction): by what a client relies on. A prompt argument added is
        // refined by `surfaces.rs` (required: BREAKING).
        ChangeType::InstructionsChanged | ChangeType::PromptChanged => (W, W),
        ChangeType::ResourceChanged | ChangeType::ResourceTemplateChanged => (W, W),
        ChangeType::PromptAdded | ChangeType::ResourceAdded | ChangeType::ResourceTemplateAdded => (C, C),
        ChangeType::PromptRemoved | ChangeType::ResourceTemplateRemoved => (B, B),
        // A concrete resource list is often content (files, rows) more than contract.
        ChangeType::ResourceRemoved => (W, W),
        ChangeType::PromptArgumentAdded | ChangeType::PromptArgumentBecameOptional => (C, C),
        ChangeType::PromptArgumentRemoved => (W, W),
        ChangeType::PromptArgumentBecameRequired => (B, B),
        // Raised only past the project's setting: a list that grew that much is worth a look.
        ChangeType::ContextCostGrew => (W, W),
    }
}

pub fn classify(kind: ChangeType, direction: Option<Direction>) -> Classification {
    let (input, output) = table(kind);
    match direction {
        Some(Direction::Output) => output,
        Some(Direction::Input) | None => input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: ChangeType, input: Classification, output: Classification) {
        assert_eq!(classify(kind, Some(Direction::Input)), input, "{kind} input");
        assert_eq!(classify(kind, Some(Direction::Output)), output, "{kind} output");
    }

    #[test]
    fn the_design_table() {
        check(ChangeType::RequiredParamAdded, B, C);
        check(ChangeType::OptionalParamAdded, C, C);
        check(ChangeType::RequiredParamRemoved, B, B);
        check(ChangeType::ParamRemoved, W, W);
        check(ChangeType::ParamBecameRequired, B, C);
        check(ChangeType::ParamBecameOptional, C, B);
        check(ChangeType::ParamTypeChanged, B, B);
        check(ChangeType::ParamTypeWidened, C, B);
        check(ChangeType::ParamTypeNarrowed, B, C);
        check(ChangeType::EnumValueRemoved, B, C);
        check(ChangeType::EnumAdded, B, C);
        check(ChangeType::EnumValueAdded, C, W);
        check(ChangeType::EnumRemoved, C, B);
        check(ChangeType::ConstraintTightened, B, C);
        check(ChangeType::ConstraintRelaxed, C, B);
        for warning in [ChangeType::PatternChanged, ChangeType::FormatChanged, ChangeType::DefaultChanged] {
            check(warning, W, W);
        }
        assert_eq!(classify(ChangeType::ToolRemoved, None), B);
        assert_eq!(classify(ChangeType::ToolAdded, None), C);
        assert_eq!(classify(ChangeType::ToolRenamed, None), B);
        assert_eq!(classify(ChangeType::AnnotationsChanged, None), W);
        assert_eq!(classify(ChangeType::OutputSchemaAdded, Some(Direction::Output)), C);
        assert_eq!(classify(ChangeType::OutputSchemaRemoved, Some(Direction::Output)), W);
    }
}
