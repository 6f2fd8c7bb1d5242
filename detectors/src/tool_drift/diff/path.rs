//! Where in a tool a change is: the path a change names (`inputSchema.properties.a.items`), built as the
//! diff walks.

/// A location inside a tool: `filters.date_from`, `rows[]`, `meta.*` (additional properties).
#[derive(Debug, Clone, Default)]
pub(super) struct Path {
    pub(super) segments: Vec<Segment>,
}

#[derive(Debug, Clone)]
pub(super) enum Segment {
    Property(String),
    Items,
    AdditionalProperties,
    /// A tool field that is not a parameter (`annotations`, `execution`, `icons`).
    Field(String),
}

impl Path {
    pub(super) fn root() -> Self {
        Path::default()
    }

    pub(super) fn join(&self, segment: Segment) -> Path {
        let mut segments = self.segments.clone();
        segments.push(segment);
        Path { segments }
    }

    pub(super) fn param_name(&self) -> Option<String> {
        match self.segments.first() {
            Some(Segment::Property(name)) => Some(name.clone()),
            _ => None,
        }
    }

    /// The length of [`Path::render`]'s text, without writing it.
    pub(super) fn text_len(&self) -> usize {
        let names: usize = self
            .segments
            .iter()
            .map(|segment| match segment {
                Segment::Items => 2,
                Segment::Property(name) | Segment::Field(name) => name.len(),
                Segment::AdditionalProperties => 1,
            })
            .sum();
        names + self.segments.len()
    }

    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Items => out.push_str("[]"),
                Segment::Property(name) => push_dotted(&mut out, name),
                Segment::AdditionalProperties => push_dotted(&mut out, "*"),
                Segment::Field(name) => push_dotted(&mut out, name),
            }
        }
        out
    }
}

pub(super) fn push_dotted(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(name);
}
