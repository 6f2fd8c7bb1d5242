//! The structural, direction-aware diff of two tool lists (DESIGN.md §5 "Change kinds").
//!
//! Every difference between the normalised lists is reported: by its specific kind where the table has
//! one, otherwise as `schema_changed` (WARNING) at the deepest schema that differs. So a changed
//! `schema_hash` always comes with at least one change.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use driftline_schemas::{
    ChangeType, Classification, Direction, SchemaChange, SecurityFlag, SecurityHold, Severity,
};
use serde_json::{json, Map, Value};

use super::canonical::canonical_json;
use super::classify::classify;
use super::digest::DefinitionDigest;
use super::index::{side_by_side, IndexedList, IndexedTool, ToolIndex};
use super::normal::{NormalTool, ANNOTATION_DEFAULTS};
use super::parallel::{map_ordered, Split};
use super::security::{self, review_text, TextContext, ToolNames, FREE_TEXT_PARAMETERS};
use driftline_schemas::ToolsText;

/// Diffs two declared tool lists: what changed from `old` (the accepted baseline) to `new`.
pub fn diff_tools(old: &[Value], new: &[Value]) -> Vec<SchemaChange> {
    diff_tools_listed(old, new).changes
}

/// [`diff_tools`], with the count of changes beyond what one diff lists.
pub fn diff_tools_listed(old: &[Value], new: &[Value]) -> ListedChanges {
    let (old, new) = (ToolsText::from_values(old), ToolsText::from_values(new));
    let old_index = ToolIndex::new(&old);
    let new_index = ToolIndex::reusing(&new, &[IndexedList { tools: &old, index: &old_index }]);
    diff_indexed(
        IndexedList { tools: &old, index: &old_index },
        IndexedList { tools: &new, index: &new_index },
    )
}

/// Diffs two indexed lists. Tools whose definition digests agree are unchanged; normal forms are built
/// only for the others. Lists at most [`LISTED_CHANGES_PER_KIND`] changes (and
/// [`LISTED_BYTES_PER_KIND`] of their text) of each kind of consequence and counts the rest.
/// Changes carrying a flag of medium severity or higher are held (at least WARNING).
pub fn diff_indexed(old: IndexedList<'_>, new: IndexedList<'_>) -> ListedChanges {
    diff_indexed_holding(old, new, SecurityHold::default())
}

/// [`diff_indexed`] with the project's hold: a change carrying a security flag at or above it is at least
/// WARNING, whatever its structural kind (DESIGN.md §5), so no policy but `auto` accepts it unseen.
pub fn diff_indexed_holding(old: IndexedList<'_>, new: IndexedList<'_>, hold: SecurityHold) -> ListedChanges {
    let per_kind = (LISTED_CHANGES_PER_KIND, LISTED_BYTES_PER_KIND);
    diff_indexed_within(old, new, per_kind, Split::MACHINE, hold.severity())
}

/// A change's classification once its security flags are weighed: at least WARNING when one reaches `hold`.
pub fn held_classification(
    structural: Classification,
    flags: &[SecurityFlag],
    hold: Severity,
) -> Classification {
    if flags.iter().any(|flag| flag.severity >= hold) {
        structural.max(Classification::Warning)
    } else {
        structural
    }
}

/// What the diff compares of one name: the normal forms of a changed tool, or of an added one.
enum Normals {
    Changed(NormalTool, NormalTool),
    Added(NormalTool),
}

/// A pair of the side-by-side walk: the tool of a name in the old list, in the new one.
type Pair<'t> = (Option<&'t IndexedTool>, Option<&'t IndexedTool>);

/// What one pair needs to be diffed besides its normal forms.
struct PairContext<'c> {
    tool_names: &'c ToolNames<'c>,
    /// The least flag severity that makes a change at least WARNING.
    hold: Severity,
    /// Removed tools whose definition reappears under a new name: old name -> new name.
    renamed_to: &'c HashMap<&'c str, &'c str>,
}

impl PairContext<'_> {
    /// Lists the changes of one pair (normal forms for changed and added tools, none for removed ones).
    fn visit(&self, pair: &Pair<'_>, normal: Option<&Normals>, listing: &mut Listing) {
        let Some(name) = pair.0.or(pair.1).map(|tool| &*tool.name) else { return };
        let mut differ = ToolDiffer {
            tool: name,
            tool_names: self.tool_names,
            hold: self.hold,
            listing,
            description_rewritten: false,
        };
        match (pair, normal) {
            (_, Some(Normals::Changed(before, after))) => differ.tool(&before.definition, &after.definition),
            (_, Some(Normals::Added(after))) => {
                let flags = review_tool(after, self.tool_names);
                differ.emit(ChangeType::ToolAdded, None, &Path::root(), Value::Null, json!(name), flags);
            }
            ((Some(_), None), None) => {
                let (kind, after) = match self.renamed_to.get(name) {
                    Some(renamed) => (ChangeType::ToolRenamed, json!(renamed)),
                    None => (ChangeType::ToolRemoved, Value::Null),
                };
                differ.emit(kind, None, &Path::root(), json!(name), after, vec![]);
            }
            _ => {}
        }
    }
}

/// [`diff_indexed`] listing at most `(changes, bytes)` of each kind of consequence, the compared tools
/// split over threads as `split` says (tests hold the listing to the whole, and any split to one
/// thread's).
pub(crate) fn diff_indexed_within(
    old: IndexedList<'_>,
    new: IndexedList<'_>,
    per_kind: (usize, usize),
    split: Split,
    hold: Severity,
) -> ListedChanges {
    let tool_names = ToolNames::new(new.index.tools().iter().map(|t| &*t.name).collect());
    // Both indexes are sorted by name: walked side by side, once.
    let pairs: Vec<Pair<'_>> = side_by_side(old.index, new.index).collect();
    let removed: Vec<&IndexedTool> = pairs.iter().filter_map(|pair| only_first(*pair)).collect();
    let added: Vec<&IndexedTool> = pairs.iter().filter_map(|&(a, b)| only_first((b, a))).collect();

    // A removed tool whose whole definition reappears under a new name was renamed: each removed tool (in
    // name order) takes the first added tool with its definition that no earlier one took.
    let mut by_definition: HashMap<DefinitionDigest, VecDeque<usize>> = HashMap::new();
    for (i, tool) in added.iter().enumerate() {
        by_definition.entry(tool.definition).or_default().push_back(i);
    }
    let mut renamed_to: HashMap<&str, &str> = HashMap::new();
    let mut taken: HashSet<usize> = HashSet::new();
    for gone in &removed {
        if let Some(i) = by_definition.get_mut(&gone.definition).and_then(VecDeque::pop_front) {
            taken.insert(i);
            renamed_to.entry(&gone.name).or_insert(&added[i].name);
        }
    }
    let still_added: HashSet<&str> =
        added.iter().enumerate().filter(|(i, _)| !taken.contains(i)).map(|(_, t)| &*t.name).collect();

    // The names whose normal forms the diff reads: changed tools (equal digests, equal normal forms: most
    // tools of a new list) and added ones (the new name of a renamed tool is reported with its old name).
    let compared = |pair: &Pair<'_>| match pair {
        (Some(before), Some(after)) => before.definition != after.definition,
        (None, Some(after)) => still_added.contains(&*after.name),
        _ => false,
    };
    let context = PairContext { tool_names: &tool_names, hold, renamed_to: &renamed_to };
    let normals = |pair: &Pair<'_>| match *pair {
        (Some(before), Some(after)) => Some(Normals::Changed(old.normal(before), new.normal(after))),
        (None, Some(after)) => Some(Normals::Added(new.normal(after))),
        _ => None,
    };
    // Each compared tool is diffed where its normal forms are built (and dropped: by the thread that
    // allocated them), into a listing of its own with room for a few changes of each kind that also keeps
    // the order of what it only counted; the calling thread then lists those changes in list order under
    // the diff's bounds, exactly as if it had found them itself. Where a change the tool's own listing only
    // counted would have been listed (its kind still has room in the diff's listing), or the tool found
    // changes in too many alternations of kinds, the calling thread diffs that tool again itself: at most
    // a second diff of a tool, and memory holds a run's own listings, each bounded.
    let room = ToolRoom {
        changes: per_kind.0.min(split.per_tool.changes),
        bytes: per_kind.1.min(split.per_tool.bytes),
        entries: split.per_tool.entries,
    };
    let find = |pair: &Pair<'_>| -> Option<Listing> {
        let mut own = Listing::of_one_tool(room);
        context.visit(pair, normals(pair).as_ref(), &mut own);
        own.order.as_ref().is_some_and(|order| order.len() <= room.entries).then_some(own)
    };
    let mut listing = Listing { per_kind, ..Listing::default() };
    let wanted: Vec<usize> = (0..pairs.len()).filter(|&i| compared(&pairs[i])).collect();
    let threads = (split.threads)(wanted.len());
    let mut visited = 0;
    for run in wanted.chunks(split.at_once.max(1)) {
        let mut found = map_ordered(run.len(), threads, |i, _| find(&pairs[run[i]])).into_iter();
        let end = run.last().map_or(visited, |&last| last + 1);
        for (at, pair) in pairs.iter().enumerate().take(end).skip(visited) {
            if run.binary_search(&at).is_err() {
                context.visit(pair, None, &mut listing);
                continue;
            }
            let taken = found.next().flatten().is_some_and(|own| listing.take(own));
            if !taken {
                context.visit(pair, normals(pair).as_ref(), &mut listing);
            }
        }
        visited = end;
    }
    for pair in &pairs[visited..] {
        context.visit(pair, None, &mut listing);
    }
    ListedChanges { changes: listing.changes, omitted: listing.omitted }
}

/// At most this many changes of one kind of consequence (a classification with the worst security flag
/// it carries) are listed in one diff; the rest are counted in [`ListedChanges::omitted`]. A few
/// kilobytes of input can differ in hundreds of thousands of places (two long enums) and every change
/// repeats its tool's name and path: listing them all made a 1.5 MB list pair a 78 MB event.
pub const LISTED_CHANGES_PER_KIND: usize = 1_000;

/// At most this much text (names, paths, strings before and after) is listed per kind of consequence:
/// names and paths can be long, and each change repeats them.
pub const LISTED_BYTES_PER_KIND: usize = 1 << 20;

/// The changes one diff lists, in list order, and the count of those it does not list. The first change
/// of each kind of consequence is always listed, so the worst classification and the worst security flag
/// among the listed changes are those among all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListedChanges {
    pub changes: Vec<SchemaChange>,
    pub omitted: BTreeMap<Classification, u64>,
}

impl ListedChanges {
    /// Every change found, listed or not.
    pub fn total(&self) -> u64 {
        self.changes.len() as u64 + self.omitted.values().sum::<u64>()
    }
}

/// Kinds of consequence: classification × worst security flag (none, low, medium, high).
const KINDS: usize = 3 * 4;

#[derive(Default)]
struct Listing {
    /// At most this many changes and bytes listed per kind of consequence.
    per_kind: (usize, usize),
    changes: Vec<SchemaChange>,
    /// Changes and bytes listed per kind of consequence.
    listed: [(usize, usize); KINDS],
    omitted: BTreeMap<Classification, u64>,
    /// Changes found so far, listed or not.
    found: usize,
    /// Where an unlisted change is written, for the caller to refine and nobody to read.
    unlisted: Option<SchemaChange>,
    /// A tool's own listing: what it found, listed or counted, in order (for [`Listing::take`]); past
    /// `entries` it stops keeping it (and cannot be taken).
    order: Option<Vec<Found>>,
    entries: usize,
}

/// A change a tool's own listing found: listed (the next of its changes), or counted (a stretch of
/// changes of one kind, the smallest of them `least` bytes).
#[derive(Clone, Copy)]
enum Found {
    Listed { kind: usize, size: usize },
    Counted { kind: usize, classification: Classification, count: u64, least: usize },
}

/// The room of one tool's own listing on another thread: changes and bytes listed of each kind, and
/// entries of its order (listed changes and stretches of counted ones).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolRoom {
    pub changes: usize,
    pub bytes: usize,
    pub entries: usize,
}

impl ToolRoom {
    /// Room for everything (a tool's own listing that is never diffed again).
    #[cfg(test)]
    pub const UNBOUNDED: ToolRoom = ToolRoom { changes: usize::MAX, bytes: usize::MAX, entries: usize::MAX };
}

/// Whether a kind that listed `listed` changes of `bytes` has room for one more of `size` (the first of
/// each kind always has).
fn has_room((listed, bytes): (usize, usize), (most, most_bytes): (usize, usize), size: usize) -> bool {
    listed == 0 || (listed < most && bytes + size <= most_bytes)
}

impl Listing {
    fn of_one_tool(room: ToolRoom) -> Self {
        Listing {
            per_kind: (room.changes, room.bytes),
            order: Some(Vec::new()),
            entries: room.entries,
            ..Listing::default()
        }
    }

    /// Counts a change of `kind` and `size` found: listed if its kind has room left, else counted as
    /// omitted.
    fn admits(&mut self, kind: usize, size: usize, classification: Classification) -> bool {
        self.found += 1;
        let slot = &mut self.listed[kind];
        let listed = has_room(*slot, self.per_kind, size);
        if listed {
            slot.0 += 1;
            slot.1 += size;
        } else {
            *self.omitted.entry(classification).or_default() += 1;
        }
        if let Some(order) = self.order.as_mut().filter(|order| order.len() <= self.entries) {
            match (listed, order.last_mut()) {
                (true, _) => order.push(Found::Listed { kind, size }),
                (false, Some(Found::Counted { kind: last, count, least, .. })) if *last == kind => {
                    *count += 1;
                    *least = (*least).min(size);
                }
                (false, _) => order.push(Found::Counted { kind, classification, count: 1, least: size }),
            }
        }
        listed
    }

    /// Lists the changes a tool's own listing found, in order, as if this one had found them; false (and
    /// nothing taken) where a change it only counted would have been listed here.
    fn take(&mut self, own: Listing) -> bool {
        let Some(order) = own.order else { return false };
        // A dry run over the counts: a stretch of counted changes all stay unlisted here if the smallest
        // does (nothing is listed in between).
        let mut listed = self.listed;
        for found in &order {
            match *found {
                Found::Listed { kind, size } => {
                    if has_room(listed[kind], self.per_kind, size) {
                        listed[kind].0 += 1;
                        listed[kind].1 += size;
                    }
                }
                Found::Counted { kind, least, .. } => {
                    if has_room(listed[kind], self.per_kind, least) {
                        return false;
                    }
                }
            }
        }
        let mut changes = own.changes.into_iter();
        for found in order {
            match found {
                Found::Listed { kind, size } => {
                    let Some(change) = changes.next() else { break };
                    if self.admits(kind, size, change.classification) {
                        self.changes.push(change);
                    }
                }
                Found::Counted { classification, count, .. } => {
                    self.found += count as usize;
                    *self.omitted.entry(classification).or_default() += count;
                }
            }
        }
        true
    }
}

fn kind_of(classification: Classification, flags: &[SecurityFlag]) -> usize {
    let classification = match classification {
        Classification::Compatible => 0,
        Classification::Warning => 1,
        Classification::Breaking => 2,
    };
    let worst = flags.iter().map(|flag| flag.severity).max().map_or(0, |severity| match severity {
        Severity::Low => 1,
        Severity::Medium => 2,
        Severity::High => 3,
    });
    classification * 4 + worst
}

fn text_len(value: &Value) -> usize {
    value.as_str().map_or(0, str::len)
}

/// The tool of a pair that only the first list holds.
fn only_first<'a>(pair: (Option<&'a IndexedTool>, Option<&'a IndexedTool>)) -> Option<&'a IndexedTool> {
    match pair {
        (Some(tool), None) => Some(tool),
        _ => None,
    }
}

/// First-sight review of a tool: every model-visible text in it.
pub fn review_tool(tool: &NormalTool, tool_names: &ToolNames<'_>) -> Vec<SecurityFlag> {
    let context = TextContext { previous: None, own_tool: &tool.name, tool_names: Some(tool_names) };
    let mut flags = Vec::new();
    let mut texts: Vec<&str> = ["description", "title"]
        .iter()
        .filter_map(|key| tool.definition.get(*key).and_then(Value::as_str))
        .collect();
    if let Some(title) =
        tool.definition.get("annotations").and_then(|a| a.get("title")).and_then(Value::as_str)
    {
        texts.push(title);
    }
    for key in ["inputSchema", "outputSchema"] {
        if let Some(schema) = tool.definition.get(key) {
            collect_schema_texts(schema, &mut texts);
        }
    }
    for text in texts {
        flags.extend(review_text(text, context));
    }
    flags
}

fn collect_schema_texts<'a>(schema: &'a Value, texts: &mut Vec<&'a str>) {
    let Some(object) = schema.as_object() else { return };
    for key in ["description", "title"] {
        if let Some(text) = object.get(key).and_then(Value::as_str) {
            texts.push(text);
        }
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for property in properties.values() {
            collect_schema_texts(property, texts);
        }
    }
    if let Some(items) = object.get("items") {
        collect_schema_texts(items, texts);
    }
}

/// A location inside a tool: `filters.date_from`, `rows[]`, `meta.*` (additional properties).
#[derive(Debug, Clone, Default)]
struct Path {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone)]
enum Segment {
    Property(String),
    Items,
    AdditionalProperties,
    /// A tool field that is not a parameter (`annotations`, `execution`, `icons`).
    Field(String),
}

impl Path {
    fn root() -> Self {
        Path::default()
    }

    fn join(&self, segment: Segment) -> Path {
        let mut segments = self.segments.clone();
        segments.push(segment);
        Path { segments }
    }

    fn param_name(&self) -> Option<String> {
        match self.segments.first() {
            Some(Segment::Property(name)) => Some(name.clone()),
            _ => None,
        }
    }

    /// The length of [`Path::render`]'s text, without writing it.
    fn text_len(&self) -> usize {
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

    fn render(&self) -> String {
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

fn push_dotted(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(name);
}

/// Keywords with a rule of their own; every other keyword that differs is `schema_changed`.
const HANDLED_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "oneOf",
    "multipleOf",
    "uniqueItems",
    "pattern",
    "format",
    "default",
    "description",
    "title",
    "deprecated",
    "examples",
    "readOnly",
    "writeOnly",
    "if",
    "then",
    "else",
    "not",
    "allOf",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
];
const SIZE_LOWER_BOUNDS: &[&str] = &["minLength", "minItems", "minProperties", "minContains"];
const SIZE_UPPER_BOUNDS: &[&str] = &["maxLength", "maxItems", "maxProperties", "maxContains"];
const TOOL_FIELDS: &[&str] =
    &["description", "title", "annotations", "execution", "inputSchema", "outputSchema"];

struct ToolDiffer<'a> {
    tool: &'a str,
    tool_names: &'a ToolNames<'a>,
    /// The least flag severity that makes a change at least WARNING.
    hold: Severity,
    listing: &'a mut Listing,
    /// The tool's own description changed (diffed before anything else of the tool).
    description_rewritten: bool,
}

impl ToolDiffer<'_> {
    /// Records a change classified by the table; the caller may refine the returned change.
    fn emit(
        &mut self,
        change_type: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        before: Value,
        after: Value,
        security_flags: Vec<SecurityFlag>,
    ) -> &mut SchemaChange {
        let classification = classify(change_type, direction);
        self.emit_as(change_type, classification, direction, path, before, after, security_flags)
    }

    /// Records a change whose classification the caller decided. Listed if its kind of consequence has
    /// room left, otherwise only counted: its name and path are not even written out.
    #[allow(clippy::too_many_arguments)]
    fn emit_as(
        &mut self,
        change_type: ChangeType,
        classification: Classification,
        direction: Option<Direction>,
        path: &Path,
        before: Value,
        after: Value,
        mut security_flags: Vec<SecurityFlag>,
    ) -> &mut SchemaChange {
        if change_type == ChangeType::DescriptionChanged {
            self.description_rewritten = true;
        }
        if self.description_rewritten {
            self.flag_exfiltration_parameter(change_type, direction, path, &after, &mut security_flags);
        }
        let classification = held_classification(classification, &security_flags, self.hold);
        let listing = &mut *self.listing;
        let kind = kind_of(classification, &security_flags);
        let size = self.tool.len() + 2 * path.text_len() + 2 * (text_len(&before) + text_len(&after));
        let change = SchemaChange::new(
            change_type,
            classification,
            String::new(),
            String::new(),
            direction,
            (before, after),
            security_flags,
        );
        if !listing.admits(kind, size, classification) {
            return listing.unlisted.insert(change);
        }
        listing.changes.push(SchemaChange {
            tool_name: self.tool.to_owned(),
            param_name: path.param_name(),
            path: path.render(),
            ..change
        });
        let last = listing.changes.len() - 1;
        &mut listing.changes[last]
    }

    /// A description (of the tool or of a schema) changed: WARNING, with both texts reviewed.
    fn description(
        &mut self,
        kind: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        before: Option<&Value>,
        after: Option<&Value>,
    ) {
        let flags = self.review(after, before);
        let change = self.emit(kind, direction, path, or_null(before), or_null(after), flags);
        change.old_description = Some(before.and_then(Value::as_str).unwrap_or_default().to_owned());
        change.new_description = Some(after.and_then(Value::as_str).unwrap_or_default().to_owned());
    }

    /// A title is what people see: a new one is COMPATIBLE unless the review flags it, a rewritten one
    /// WARNING (a rename in disguise or poisoning), a dropped one COMPATIBLE. Inside a schema a title is
    /// a label generated from the name: COMPATIBLE unless flagged.
    fn title(
        &mut self,
        change_type: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        before: Option<&Value>,
        after: Option<&Value>,
        in_schema: bool,
    ) {
        let flags = self.review(after, before);
        let rewritten = before.is_some() && after.is_some() && !in_schema;
        let classification =
            if rewritten || !flags.is_empty() { Classification::Warning } else { Classification::Compatible };
        self.emit_as(change_type, classification, direction, path, or_null(before), or_null(after), flags);
    }

    fn review(&self, new: Option<&Value>, old: Option<&Value>) -> Vec<SecurityFlag> {
        let Some(text) = new.and_then(Value::as_str) else { return Vec::new() };
        let context = TextContext {
            previous: old.and_then(Value::as_str),
            own_tool: self.tool,
            tool_names: Some(self.tool_names),
        };
        review_text(text, context)
    }

    fn tool(&mut self, old: &Map<String, Value>, new: &Map<String, Value>) {
        let start = self.listing.found;
        let root = Path::root();
        if old.get("description") != new.get("description") {
            self.description(
                ChangeType::DescriptionChanged,
                None,
                &root,
                old.get("description"),
                new.get("description"),
            );
        }
        if old.get("title") != new.get("title") {
            self.title(ChangeType::TitleChanged, None, &root, old.get("title"), new.get("title"), false);
        }
        self.annotations(old.get("annotations"), new.get("annotations"));
        self.execution(old.get("execution"), new.get("execution"));
        let empty = Value::Object(Map::new());
        let input = (old.get("inputSchema").unwrap_or(&empty), new.get("inputSchema").unwrap_or(&empty));
        self.schema(input.0, input.1, Direction::Input, &root);
        match (old.get("outputSchema"), new.get("outputSchema")) {
            (None, Some(_)) => {
                self.emit(
                    ChangeType::OutputSchemaAdded,
                    Some(Direction::Output),
                    &root,
                    Value::Null,
                    Value::Null,
                    vec![],
                );
            }
            (Some(_), None) => {
                self.emit(
                    ChangeType::OutputSchemaRemoved,
                    Some(Direction::Output),
                    &root,
                    Value::Null,
                    Value::Null,
                    vec![],
                );
            }
            (Some(before), Some(after)) => self.schema(before, after, Direction::Output, &root),
            (None, None) => {}
        }
        // Metadata no rule reads (`icons`, fields newer than this version): shown, never relied on.
        let others: BTreeSet<&String> =
            old.keys().chain(new.keys()).filter(|k| !TOOL_FIELDS.contains(&k.as_str())).collect();
        for key in others {
            if differs(old.get(key), new.get(key)) {
                let path = Path::root().join(Segment::Field(key.clone()));
                self.emit(
                    ChangeType::MetadataChanged,
                    None,
                    &path,
                    or_null(old.get(key)),
                    or_null(new.get(key)),
                    vec![],
                );
            }
        }
        if self.listing.found == start && differs_map(old, new) {
            self.emit(ChangeType::SchemaChanged, None, &root, Value::Null, Value::Null, vec![]);
        }
    }

    /// `execution.taskSupport` ("forbidden" by default): the ways a client may call the tool. Offering
    /// another way is COMPATIBLE; taking one away (requiring a task, or refusing one) is BREAKING.
    fn execution(&mut self, old: Option<&Value>, new: Option<&Value>) {
        if !differs(old, new) {
            return;
        }
        let base = Path::root().join(Segment::Field("execution".into()));
        fn support(execution: Option<&Value>) -> Option<&str> {
            match execution.map(|e| e.get("taskSupport")) {
                None | Some(None) => Some("forbidden"),
                Some(Some(Value::String(s))) => Some(s.as_str()),
                Some(Some(_)) => None,
            }
        }
        let modes = |support: Option<&str>| match support {
            Some("forbidden") => Some((true, false)),
            Some("optional") => Some((true, true)),
            Some("required") => Some((false, true)),
            _ => None,
        };
        let (before, after) = (support(old), support(new));
        if before != after {
            let classification = match (modes(before), modes(after)) {
                (Some((plain_a, task_a)), Some((plain_b, task_b))) => {
                    if (plain_a && !plain_b) || (task_a && !task_b) {
                        Classification::Breaking
                    } else {
                        Classification::Compatible
                    }
                }
                _ => Classification::Warning,
            };
            let path = base.join(Segment::Property("taskSupport".into()));
            let (before, after) = (json!(before), json!(after));
            self.emit_as(ChangeType::ExecutionChanged, classification, None, &path, before, after, vec![]);
        }
        // Anything else under `execution` is newer than this version: metadata.
        let strip = |execution: Option<&Value>| {
            execution.and_then(Value::as_object).map(|o| {
                let mut o = o.clone();
                o.remove("taskSupport");
                Value::Object(o)
            })
        };
        let (rest_old, rest_new) = (strip(old), strip(new));
        let non_objects = !old.is_none_or(Value::is_object) || !new.is_none_or(Value::is_object);
        if non_objects
            || differs(
                rest_old.as_ref().filter(|v| v != &&json!({})),
                rest_new.as_ref().filter(|v| v != &&json!({})),
            )
        {
            self.emit(ChangeType::MetadataChanged, None, &base, or_null(old), or_null(new), vec![]);
        }
    }

    /// A new free-text parameter (note, context, …) arriving with a rewritten description is how a
    /// poisoned tool asks the model to hand over what it knows. Called for the tool's changes after its
    /// description's (the first thing diffed).
    fn flag_exfiltration_parameter(
        &self,
        change_type: ChangeType,
        direction: Option<Direction>,
        path: &Path,
        after: &Value,
        flags: &mut Vec<SecurityFlag>,
    ) {
        let added = matches!(change_type, ChangeType::OptionalParamAdded | ChangeType::RequiredParamAdded);
        let name = match path.segments.as_slice() {
            [Segment::Property(name)] if !name.contains(['.', '[']) => name,
            _ => return,
        };
        let top_level = direction == Some(Direction::Input);
        let free_text = match after.get("type") {
            None | Some(Value::Null) => true,
            Some(Value::String(t)) => t == "string",
            Some(_) => false,
        };
        let named = FREE_TEXT_PARAMETERS.contains(&name.to_lowercase().as_str());
        if added && top_level && free_text && named {
            flags.push(SecurityFlag {
                rule: security::EXFILTRATION_PARAMETER.to_owned(),
                severity: Severity::High,
                excerpt: format!("new parameter `{name}` added with a description change"),
            });
        }
    }

    /// Tool annotations by effective value (the normal form dropped hints at their MCP default). The
    /// safety hints (`readOnlyHint`, `destructiveHint`) are WARNING either way: toward risk is flagged,
    /// and a tool newly claiming to be safe may be auto-approved by clients. The others are COMPATIBLE.
    fn annotations(&mut self, old: Option<&Value>, new: Option<&Value>) {
        let empty = Map::new();
        let base = Path::root().join(Segment::Field("annotations".into()));
        let (old_map, new_map) = match (old, new) {
            (None | Some(Value::Object(_)), None | Some(Value::Object(_))) => (
                old.and_then(Value::as_object).unwrap_or(&empty),
                new.and_then(Value::as_object).unwrap_or(&empty),
            ),
            _ => {
                if old != new {
                    self.emit(
                        ChangeType::AnnotationsChanged,
                        None,
                        &base,
                        or_null(old),
                        or_null(new),
                        vec![],
                    );
                }
                return;
            }
        };
        let mut risk = annotation_risk(old_map, new_map);
        let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
        for key in keys {
            let (before, after) = (old_map.get(key), new_map.get(key));
            if before == after {
                continue;
            }
            let path = base.join(Segment::Property(key.clone()));
            if key == "title" {
                self.title(ChangeType::AnnotationsChanged, None, &path, before, after, false);
                continue;
            }
            let effective =
                |value: Option<&Value>| match ANNOTATION_DEFAULTS.iter().find(|(hint, _)| hint == key) {
                    Some((_, default)) => value.cloned().unwrap_or(Value::Bool(*default)),
                    None => or_null(value),
                };
            let safety = key == "readOnlyHint" || key == "destructiveHint";
            let flags = if safety { std::mem::take(&mut risk) } else { Vec::new() };
            let classification = if safety {
                classify(ChangeType::AnnotationsChanged, None)
            } else {
                Classification::Compatible
            };
            let (before, after) = (effective(before), effective(after));
            self.emit_as(ChangeType::AnnotationsChanged, classification, None, &path, before, after, flags);
        }
    }

    /// Diffs two schemas at `path`; if no rule found a difference but they differ, says so.
    fn schema(&mut self, old: &Value, new: &Value, direction: Direction, path: &Path) {
        // An unchanged sub-schema (most of them) has nothing to report: not walked keyword by keyword.
        if old == new {
            return;
        }
        let start = self.listing.found;
        if let (Some(old_map), Some(new_map)) = (old.as_object(), new.as_object()) {
            let (old_map, new_map) = lift_into_union(old_map, new_map);
            self.schema_object(&old_map, &new_map, direction, path);
        }
        if self.listing.found == start && differs(Some(old), Some(new)) {
            self.emit(ChangeType::SchemaChanged, Some(direction), path, old.clone(), new.clone(), vec![]);
        }
    }

    fn schema_object(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        self.types(old, new, dir, path);
        self.enums(old, new, dir, path);
        self.constant(old, new, dir, path);
        self.properties(old, new, dir, path);
        self.additional_properties(old, new, dir, path);
        self.items(old, new, dir, path);
        for keyword in ["anyOf", "oneOf"] {
            self.branches(keyword, old, new, dir, path);
        }
        self.bounds(old, new, dir, path);
        self.multiple_of(old, new, dir, path);
        self.unique_items(old, new, dir, path);
        self.pattern(old, new, dir, path);
        for (key, kind) in [("format", ChangeType::FormatChanged), ("default", ChangeType::DefaultChanged)] {
            if differs(old.get(key), new.get(key)) {
                self.emit(kind, Some(dir), path, or_null(old.get(key)), or_null(new.get(key)), vec![]);
            }
        }
        if old.get("description") != new.get("description") {
            let (before, after) = (old.get("description"), new.get("description"));
            self.description(ChangeType::ParamDescriptionChanged, Some(dir), path, before, after);
        }
        if old.get("title") != new.get("title") {
            self.title(ChangeType::TitleChanged, Some(dir), path, old.get("title"), new.get("title"), true);
        }
        self.schema_annotations(old, new, dir, path);
        self.restrictions(old, new, dir, path);
        let others: BTreeSet<&String> =
            old.keys().chain(new.keys()).filter(|k| !HANDLED_KEYWORDS.contains(&k.as_str())).collect();
        for key in others {
            if differs(old.get(key), new.get(key)) {
                // `x-…` keywords are vendor extensions (OpenAPI's convention, FastMCP's
                // `x-fastmcp-wrap-result`): no validator reads them. MCP 2026-07-28's `x-mcp-header` is
                // the exception: it mirrors the parameter into an HTTP header that servers check and
                // gateways route by, so a client that sends the call as before may now be refused.
                let (kind, classification) = if key == MCP_HEADER {
                    (ChangeType::SchemaAnnotationChanged, Classification::Warning)
                } else if key.starts_with("x-") {
                    (ChangeType::SchemaAnnotationChanged, Classification::Compatible)
                } else {
                    (ChangeType::SchemaChanged, classify(ChangeType::SchemaChanged, Some(dir)))
                };
                self.emit_as(
                    kind,
                    classification,
                    Some(dir),
                    path,
                    keyword(key, old.get(key)),
                    keyword(key, new.get(key)),
                    vec![],
                );
            }
        }
    }

    fn types(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, dir: Direction, path: &Path) {
        let (before, after) = (declared_types(old), declared_types(new));
        let kind = match (&before, &after) {
            (Types::Unreadable | Types::Branches, _) | (_, Types::Unreadable | Types::Branches) => return,
            (a, b) if a == b => return,
            (Types::Any, _) => ChangeType::ParamTypeNarrowed,
            (_, Types::Any) => ChangeType::ParamTypeWidened,
            (Types::Set(a, _), Types::Set(b, _)) => match (covers(b, a), covers(a, b)) {
                (true, false) => ChangeType::ParamTypeWidened,
                (false, true) => ChangeType::ParamTypeNarrowed,
                _ => ChangeType::ParamTypeChanged,
            },
        };
        self.emit(kind, Some(dir), path, before.raw(), after.raw(), vec![]);
    }

    fn enums(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, dir: Direction, path: &Path) {
        match (old.get("enum").and_then(Value::as_array), new.get("enum").and_then(Value::as_array)) {
            (None, Some(values)) => {
                self.emit(ChangeType::EnumAdded, Some(dir), path, Value::Null, json!(values), vec![]);
            }
            (Some(values), None) => {
                self.emit(ChangeType::EnumRemoved, Some(dir), path, json!(values), Value::Null, vec![]);
            }
            (Some(before), Some(after)) => {
                for gone in missing_from(before, after) {
                    self.emit(
                        ChangeType::EnumValueRemoved,
                        Some(dir),
                        path,
                        gone.clone(),
                        Value::Null,
                        vec![],
                    );
                }
                for came in missing_from(after, before) {
                    self.emit(ChangeType::EnumValueAdded, Some(dir), path, Value::Null, came.clone(), vec![]);
                }
            }
            (None, None) => {}
        }
    }

    fn constant(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, dir: Direction, path: &Path) {
        let (before, after) = (old.get("const"), new.get("const"));
        let kind = match (before, after) {
            (None, Some(_)) => ChangeType::ConstraintTightened,
            (Some(_), None) => ChangeType::ConstraintRelaxed,
            // Another constant both tightens and relaxes: name it by the side that breaks this direction.
            (Some(_), Some(_)) if differs(before, after) => tightened_and_relaxed(dir),
            _ => return,
        };
        self.emit(kind, Some(dir), path, keyword("const", before), keyword("const", after), vec![]);
    }

    fn properties(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let empty = Map::new();
        let old_props = old.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let new_props = new.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let (old_required, new_required) = (required_names(old), required_names(new));
        let names: BTreeSet<&str> = old_props
            .keys()
            .chain(new_props.keys())
            .map(String::as_str)
            .chain(old_required.iter().copied())
            .chain(new_required.iter().copied())
            .collect();
        let closed = new.get("additionalProperties") == Some(&Value::Bool(false));
        let blank = Value::Object(Map::new());
        for name in names {
            let child = path.join(Segment::Property(name.to_owned()));
            let (was_required, is_required) = (old_required.contains(name), new_required.contains(name));
            let before = old_props.get(name).or(was_required.then_some(&blank));
            let after = new_props.get(name).or(is_required.then_some(&blank));
            match (before, after) {
                (None, Some(schema)) => {
                    let kind = if is_required {
                        ChangeType::RequiredParamAdded
                    } else {
                        ChangeType::OptionalParamAdded
                    };
                    let texts = {
                        let mut texts = Vec::new();
                        collect_schema_texts(schema, &mut texts);
                        texts
                    };
                    let flags = texts.into_iter().flat_map(|t| self.review(Some(&json!(t)), None)).collect();
                    let summary = param_summary(schema, is_required);
                    let change = self.emit(kind, Some(dir), &child, Value::Null, summary, flags);
                    change.param_type = Some(param_type(schema));
                }
                (Some(schema), None) => {
                    let kind = if was_required {
                        ChangeType::RequiredParamRemoved
                    } else {
                        ChangeType::ParamRemoved
                    };
                    let summary = param_summary(schema, was_required);
                    let classification =
                        if kind == ChangeType::ParamRemoved && dir == Direction::Input && closed {
                            // Sending the old parameter is now an error: the schema forbids unknown properties.
                            Classification::Breaking
                        } else {
                            classify(kind, Some(dir))
                        };
                    let change =
                        self.emit_as(kind, classification, Some(dir), &child, summary, Value::Null, vec![]);
                    change.param_type = Some(param_type(schema));
                }
                (Some(before), Some(after)) => {
                    if was_required != is_required {
                        let kind = if is_required {
                            ChangeType::ParamBecameRequired
                        } else {
                            ChangeType::ParamBecameOptional
                        };
                        let flags = vec![];
                        self.emit(
                            kind,
                            Some(dir),
                            &child,
                            json!({"required": was_required}),
                            json!({"required": is_required}),
                            flags,
                        );
                    }
                    self.schema(before, after, dir, &child);
                }
                (None, None) => {}
            }
        }
    }

    fn additional_properties(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get("additionalProperties"), new.get("additionalProperties"));
        let kind = match (openness(before), openness(after)) {
            (Openness::Schema(a), Openness::Schema(b)) => {
                return self.schema(a, b, dir, &path.join(Segment::AdditionalProperties));
            }
            (Openness::Unreadable, _) | (_, Openness::Unreadable) => return,
            (a, b) if a.rank() == b.rank() => return,
            (a, b) if b.rank() > a.rank() => ChangeType::ConstraintTightened,
            _ => ChangeType::ConstraintRelaxed,
        };
        let key = "additionalProperties";
        self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
    }

    fn items(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, dir: Direction, path: &Path) {
        match (old.get("items"), new.get("items")) {
            (Some(a @ Value::Object(_)), Some(b @ Value::Object(_))) => {
                self.schema(a, b, dir, &path.join(Segment::Items))
            }
            (None, Some(Value::Object(_))) => {
                let (before, after) = (keyword("items", None), keyword("items", new.get("items")));
                self.emit(ChangeType::ConstraintTightened, Some(dir), path, before, after, vec![]);
            }
            (Some(Value::Object(_)), None) => {
                let (before, after) = (keyword("items", old.get("items")), keyword("items", None));
                self.emit(ChangeType::ConstraintRelaxed, Some(dir), path, before, after, vec![]);
            }
            _ => {} // tuple forms and boolean schemas: covered by the fallback
        }
    }

    /// anyOf / oneOf: a branch removed tightens, a branch added relaxes. A union of bare types is read
    /// as a type list by [`Self::types`] instead. A branch that changed is diffed against its old self
    /// when it can be told apart from the others by its type (a nullable object that gained a
    /// property is the object's change, not a branch swapped for another).
    fn branches(
        &mut self,
        key: &str,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get(key), new.get(key));
        let plain = |side: Option<&Value>| side.is_none() || type_union(side).is_some();
        if plain(before) && plain(after) {
            return;
        }
        match (before.and_then(Value::as_array), after.and_then(Value::as_array)) {
            (None, Some(_)) => {
                self.emit(
                    ChangeType::ConstraintTightened,
                    Some(dir),
                    path,
                    keyword(key, None),
                    keyword(key, after),
                    vec![],
                );
            }
            (Some(_), None) => {
                self.emit(
                    ChangeType::ConstraintRelaxed,
                    Some(dir),
                    path,
                    keyword(key, before),
                    keyword(key, None),
                    vec![],
                );
            }
            (Some(a), Some(b)) => {
                let (pairs, gone, came) = pair_branches(missing_from(a, b), missing_from(b, a));
                for (old_branch, new_branch) in pairs {
                    self.schema(old_branch, new_branch, dir, path);
                }
                for branch in gone {
                    self.emit(
                        ChangeType::ConstraintTightened,
                        Some(dir),
                        path,
                        json!({ key: [branch] }),
                        Value::Null,
                        vec![],
                    );
                }
                for branch in came {
                    self.emit(
                        ChangeType::ConstraintRelaxed,
                        Some(dir),
                        path,
                        Value::Null,
                        json!({ key: [branch] }),
                        vec![],
                    );
                }
            }
            (None, None) => {}
        }
    }

    /// Numeric bounds compare as intervals: `minimum` and `exclusiveMinimum` together make one lower
    /// bound (and likewise the upper), so `exclusiveMinimum: 0` → `minimum: 0` is one relaxation. Size
    /// bounds (`minLength`, `maxItems`, …) compare one by one.
    fn bounds(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, dir: Direction, path: &Path) {
        for lower in [true, false] {
            let (before, after) = (numeric_bound(old, lower), numeric_bound(new, lower));
            let tightened = match (&before, &after) {
                (None, None) => continue,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some(a), Some(b)) if a.value == b.value && a.exclusive == b.exclusive => continue,
                (Some(a), Some(b)) if a.value == b.value => b.exclusive,
                (Some(a), Some(b)) => (b.value > a.value) == lower,
            };
            let kind =
                if tightened { ChangeType::ConstraintTightened } else { ChangeType::ConstraintRelaxed };
            let shown = |bound: Option<Bound>| match bound {
                Some(bound) => json!({ bound.keyword: bound.raw }),
                None => json!({ if lower { "minimum" } else { "maximum" }: null }),
            };
            self.emit(kind, Some(dir), path, shown(before), shown(after), vec![]);
        }
        for (keys, lower) in [(SIZE_LOWER_BOUNDS, true), (SIZE_UPPER_BOUNDS, false)] {
            for key in keys.iter().copied() {
                let (before, after) = (old.get(key), new.get(key));
                let tightened = match (before.map(Value::as_f64), after.map(Value::as_f64)) {
                    (None, None) => continue,
                    (None, Some(Some(_))) => true,
                    (Some(Some(_)), None) => false,
                    (Some(Some(a)), Some(Some(b))) if a != b => (b > a) == lower,
                    _ => continue, // equal, or not a number: the fallback reports it
                };
                let kind =
                    if tightened { ChangeType::ConstraintTightened } else { ChangeType::ConstraintRelaxed };
                self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
            }
        }
    }

    /// Keywords that can only restrict what a schema accepts (`if`/`then`/`else`, `not`, `allOf`,
    /// `dependentRequired`, `dependentSchemas`, `propertyNames`): added, they tighten; removed, they relax; rewritten, they are
    /// `schema_changed` (which way is not decidable in general).
    fn restrictions(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        for key in
            ["if", "then", "else", "not", "allOf", "dependentRequired", "dependentSchemas", "propertyNames"]
        {
            let (before, after) = (old.get(key), new.get(key));
            let kind = match (before, after) {
                (None, Some(_)) => ChangeType::ConstraintTightened,
                (Some(_), None) => ChangeType::ConstraintRelaxed,
                (Some(_), Some(_)) if differs(before, after) => ChangeType::SchemaChanged,
                _ => continue,
            };
            self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
        }
    }

    /// `deprecated` newly set is WARNING (callers should move off the parameter); lifting it, and the
    /// other annotations (`examples`, `readOnly`, `writeOnly`), change nothing a call may send.
    fn schema_annotations(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        for key in ["deprecated", "examples", "readOnly", "writeOnly"] {
            let (before, after) = (old.get(key), new.get(key));
            if !differs(before, after) {
                continue;
            }
            let kind = if key == "deprecated" && after == Some(&Value::Bool(true)) {
                ChangeType::ParamDeprecated
            } else {
                ChangeType::SchemaAnnotationChanged
            };
            self.emit(kind, Some(dir), path, keyword(key, before), keyword(key, after), vec![]);
        }
    }

    fn multiple_of(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let (before, after) = (old.get("multipleOf"), new.get("multipleOf"));
        let kind = match (before.and_then(Value::as_f64), after.and_then(Value::as_f64)) {
            (None, Some(_)) => ChangeType::ConstraintTightened,
            (Some(_), None) => ChangeType::ConstraintRelaxed,
            (Some(a), Some(b)) if a != b && a != 0.0 && b != 0.0 => {
                if (b / a).fract() == 0.0 {
                    ChangeType::ConstraintTightened
                } else if (a / b).fract() == 0.0 {
                    ChangeType::ConstraintRelaxed
                } else {
                    tightened_and_relaxed(dir)
                }
            }
            _ => return,
        };
        self.emit(kind, Some(dir), path, keyword("multipleOf", before), keyword("multipleOf", after), vec![]);
    }

    fn unique_items(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        dir: Direction,
        path: &Path,
    ) {
        let unique =
            |schema: &Map<String, Value>| schema.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false);
        let kind = match (unique(old), unique(new)) {
            (false, true) => ChangeType::ConstraintTightened,
            (true, false) => ChangeType::ConstraintRelaxed,
            _ => return,
        };
        let key = "uniqueItems";
        self.emit(kind, Some(dir), path, keyword(key, old.get(key)), keyword(key, new.get(key)), vec![]);
    }

    fn pattern(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, dir: Direction, path: &Path) {
        let (before, after) = (old.get("pattern"), new.get("pattern"));
        let kind = match (before, after) {
            (None, Some(_)) => ChangeType::ConstraintTightened,
            (Some(_), None) => ChangeType::ConstraintRelaxed,
            (Some(a), Some(b)) if a != b => ChangeType::PatternChanged,
            _ => return,
        };
        self.emit(kind, Some(dir), path, or_null(before), or_null(after), vec![]);
    }
}

/// The 2026-07-28 keyword that sends a parameter as an HTTP header too.
const MCP_HEADER: &str = "x-mcp-header";

/// Pairs the branches only one side has by what tells them apart — the union's discriminator first (a
/// property every such branch fixes to one value), then types and property names, then types alone —
/// where exactly one branch on each side has that signature; returns the pairs and the branches left on
/// each side. Linear in the number of branches, however many a schema lists.
#[allow(clippy::type_complexity)]
fn pair_branches<'a>(
    mut gone: Vec<&'a Value>,
    mut came: Vec<&'a Value>,
) -> (Vec<(&'a Value, &'a Value)>, Vec<&'a Value>, Vec<&'a Value>) {
    let mut pairs = Vec::new();
    let discriminator = discriminator(&gone, &came);
    let passes: [&dyn Fn(&Value) -> Option<String>; 3] = [
        &|branch| discriminator.as_deref().and_then(|key| discriminated(branch, key)),
        &|branch| branch_signature(branch, true),
        &|branch| branch_signature(branch, false),
    ];
    for signature_of in passes {
        let signed = |list: &[&Value]| -> Vec<Option<String>> {
            list.iter().map(|branch| signature_of(branch)).collect()
        };
        let count = |signatures: &[Option<String>]| {
            let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
            for signature in signatures.iter().flatten() {
                *counts.entry(signature.clone()).or_default() += 1;
            }
            counts
        };
        let (gone_signatures, came_signatures) = (signed(&gone), signed(&came));
        let (gone_counts, came_counts) = (count(&gone_signatures), count(&came_signatures));
        let came_at: std::collections::HashMap<&str, usize> = came_signatures
            .iter()
            .enumerate()
            .filter_map(|(index, signature)| Some((signature.as_deref()?, index)))
            .collect();
        let mut paired = vec![false; came.len()];
        let mut unpaired = Vec::new();
        for (branch, signature) in gone.iter().zip(&gone_signatures) {
            let unique =
                signature.as_deref().filter(|s| gone_counts[*s] == 1 && came_counts.get(*s) == Some(&1));
            match unique.and_then(|s| came_at.get(s)) {
                Some(&index) => {
                    paired[index] = true;
                    pairs.push((*branch, came[index]));
                }
                None => unpaired.push(*branch),
            }
        }
        gone = unpaired;
        came = came.into_iter().zip(paired).filter(|(_, paired)| !paired).map(|(branch, _)| branch).collect();
    }
    (pairs, gone, came)
}

/// The property every branch of both sides fixes to a single value (`const`, a one-value `enum` in the
/// normal form): what a discriminated union's branches are told apart by. The first by name, if several.
fn discriminator(gone: &[&Value], came: &[&Value]) -> Option<String> {
    let fixed = |branch: &Value| -> BTreeSet<String> {
        let properties = branch.get("properties").and_then(Value::as_object);
        properties
            .into_iter()
            .flatten()
            .filter(|(_, schema)| single_value(schema).is_some())
            .map(|(name, _)| name.clone())
            .collect()
    };
    if gone.is_empty() || came.is_empty() {
        return None;
    }
    let mut branches = gone.iter().chain(came);
    let mut common = fixed(branches.next()?);
    for branch in branches {
        let own = fixed(branch);
        common.retain(|name| own.contains(name));
        if common.is_empty() {
            return None;
        }
    }
    common.into_iter().next()
}

/// The one value a schema admits (`const`, or an `enum` of one), as canonical JSON.
fn single_value(schema: &Value) -> Option<String> {
    match (schema.get("const"), schema.get("enum").and_then(Value::as_array).map(Vec::as_slice)) {
        (Some(value), _) | (None, Some([value])) => Some(canonical_json(value)),
        _ => None,
    }
}

/// A branch's discriminator value.
fn discriminated(branch: &Value, key: &str) -> Option<String> {
    single_value(branch.get("properties")?.get(key)?)
}

/// What tells a union's branch apart from its siblings: its types (a union inside counts as one kind),
/// and with `by_properties` also the names of its properties. `None` for a branch that is no schema.
fn branch_signature(branch: &Value, by_properties: bool) -> Option<String> {
    let object = branch.as_object()?;
    let types = match declared_types(object) {
        Types::Set(set, _) => set.into_iter().collect::<Vec<_>>().join("|"),
        Types::Any => String::new(),
        Types::Branches => "<union>".to_owned(),
        Types::Unreadable => return None,
    };
    if !by_properties {
        return Some(types);
    }
    let mut names: Vec<&str> = object
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    names.sort_unstable();
    Some(format!("{types}:{}", names.join(",")))
}

/// Keywords that describe a schema without constraining it: they stay outside a lifted union.
const NOT_CONSTRAINTS: &[&str] =
    &["description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly"];

/// When one side is a union (`anyOf`/`oneOf` of more than bare types) and the other is not, the other
/// is read as a union of one branch, so `string | object` → `string` is one branch removed rather than
/// a union removed (which would read as relaxed), and `X` → `anyOf: [X, string]` is one branch added
/// (X may itself be a union of the other kind). Only one side is ever lifted. A schema without
/// constraints stays as it is: it accepts everything, more than any union.
fn lift_into_union<'a>(
    old: &'a Map<String, Value>,
    new: &'a Map<String, Value>,
) -> (SchemaView<'a>, SchemaView<'a>) {
    // Only a union that is the whole schema: `{type: object, properties, oneOf: [{required: [a]}, …]}` is
    // an object with an extra rule, not a choice between alternatives.
    let union = |s: &Map<String, Value>, key: &str| {
        s.contains_key(key)
            && type_union(s.get(key)).is_none()
            && s.keys().all(|k| k == key || NOT_CONSTRAINTS.contains(&k.as_str()))
    };
    for key in ["anyOf", "oneOf"] {
        match (union(old, key), union(new, key)) {
            (true, false) if !new.contains_key(key) => return (Cow::Borrowed(old), lift(new, key, old)),
            (false, true) if !old.contains_key(key) => return (lift(old, key, new), Cow::Borrowed(new)),
            _ => {}
        }
    }
    (Cow::Borrowed(old), Cow::Borrowed(new))
}

/// A schema as written, or a rewritten copy of it.
type SchemaView<'a> = Cow<'a, Map<String, Value>>;

/// `schema` as `{key: [schema]}`. An annotation (a description, …) stays outside the branch where the
/// union has it outside too, and goes in with the rest where the union carries it in its branches.
fn lift<'a>(schema: &'a Map<String, Value>, key: &str, union: &Map<String, Value>) -> SchemaView<'a> {
    if schema.keys().all(|k| NOT_CONSTRAINTS.contains(&k.as_str())) {
        return Cow::Borrowed(schema);
    }
    let (outside, core): (Map<String, Value>, Map<String, Value>) = schema
        .clone()
        .into_iter()
        .partition(|(k, _)| NOT_CONSTRAINTS.contains(&k.as_str()) && union.contains_key(k));
    let mut lifted = outside;
    lifted.insert(key.to_owned(), Value::Array(vec![Value::Object(core)]));
    Cow::Owned(lifted)
}

/// One end of a numeric interval, and how the schema wrote it.
struct Bound {
    value: f64,
    exclusive: bool,
    keyword: &'static str,
    raw: Value,
}

/// The tighter of `minimum` / `exclusiveMinimum` (or of the maxima); a bound that is not a number is
/// left to the fallback.
fn numeric_bound(schema: &Map<String, Value>, lower: bool) -> Option<Bound> {
    let (inclusive, exclusive) =
        if lower { ("minimum", "exclusiveMinimum") } else { ("maximum", "exclusiveMaximum") };
    let read = |keyword: &'static str, is_exclusive: bool| {
        let raw = schema.get(keyword)?;
        Some(Bound { value: raw.as_f64()?, exclusive: is_exclusive, keyword, raw: raw.clone() })
    };
    match (read(inclusive, false), read(exclusive, true)) {
        (Some(a), Some(b)) => {
            let b_tighter = if lower { b.value >= a.value } else { b.value <= a.value };
            Some(if b_tighter { b } else { a })
        }
        (a, b) => a.or(b),
    }
}

/// Effective annotation hints (MCP defaults: readOnlyHint false, destructiveHint true unless read-only);
/// a move toward risk is flagged.
fn annotation_risk(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<SecurityFlag> {
    let read_only = |a: &Map<String, Value>| a.get("readOnlyHint").and_then(Value::as_bool).unwrap_or(false);
    let destructive = |a: &Map<String, Value>| {
        !read_only(a) && a.get("destructiveHint").and_then(Value::as_bool).unwrap_or(true)
    };
    let mut flags = Vec::new();
    let mut risk = |excerpt: &str| {
        flags.push(SecurityFlag {
            rule: security::ANNOTATION_RISK.to_owned(),
            severity: Severity::Medium,
            excerpt: excerpt.to_owned(),
        })
    };
    if read_only(old) && !read_only(new) {
        risk("readOnlyHint: true -> false");
    }
    if !destructive(old) && destructive(new) {
        risk("destructiveHint: false -> true");
    }
    flags
}

#[derive(Debug, PartialEq)]
enum Types {
    /// No type constraint.
    Any,
    /// The allowed types, and the value as written (for before/after).
    Set(BTreeSet<String>, Value),
    /// A `type` that is neither a string nor a list of strings: diffed by the fallback.
    Unreadable,
    /// No `type`, but anyOf/oneOf branches that are more than bare types: diffed as branches.
    Branches,
}

impl Types {
    fn raw(&self) -> Value {
        match self {
            Types::Set(_, raw) => raw.clone(),
            _ => Value::Null,
        }
    }
}

fn declared_types(schema: &Map<String, Value>) -> Types {
    match schema.get("type") {
        Some(Value::String(t)) => Types::Set(BTreeSet::from([t.clone()]), json!(t)),
        Some(Value::Array(items)) => match items.iter().map(|t| t.as_str().map(String::from)).collect() {
            Some(set) => Types::Set(set, Value::Array(items.clone())),
            None => Types::Unreadable,
        },
        Some(_) => Types::Unreadable,
        None => {
            let union = ["anyOf", "oneOf"].iter().find_map(|k| type_union(schema.get(*k)));
            match union {
                Some(set) => {
                    let raw = Value::Array(set.iter().map(|t| json!(t)).collect());
                    Types::Set(set, raw)
                }
                None if schema.contains_key("anyOf") || schema.contains_key("oneOf") => Types::Branches,
                None => Types::Any,
            }
        }
    }
}

/// `anyOf: [{"type": "string"}, {"type": "null"}]` is a type list written long-hand.
fn type_union(branches: Option<&Value>) -> Option<BTreeSet<String>> {
    let branches = branches?.as_array()?;
    let mut set = BTreeSet::new();
    for branch in branches {
        let object = branch.as_object()?;
        if object.len() != 1 {
            return None;
        }
        match object.get("type")? {
            Value::String(t) => {
                set.insert(t.clone());
            }
            Value::Array(items) => {
                for t in items {
                    set.insert(t.as_str()?.to_owned());
                }
            }
            _ => return None,
        }
    }
    (!set.is_empty()).then_some(set)
}

/// Whether every value of type set `b` is allowed by type set `a` (a number accepts an integer).
fn covers(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    b.iter().all(|t| a.contains(t) || (t == "integer" && a.contains("number")))
}

#[derive(Debug)]
enum Openness<'a> {
    Open,
    Schema(&'a Value),
    Closed,
    Unreadable,
}

impl Openness<'_> {
    /// How much an object may hold beyond its declared properties: more is looser.
    fn rank(&self) -> u8 {
        match self {
            Openness::Open => 0,
            Openness::Schema(_) => 1,
            Openness::Closed => 2,
            Openness::Unreadable => 3,
        }
    }
}

fn openness(value: Option<&Value>) -> Openness<'_> {
    match value {
        None | Some(Value::Bool(true)) => Openness::Open,
        Some(Value::Bool(false)) => Openness::Closed,
        Some(schema @ Value::Object(_)) => Openness::Schema(schema),
        Some(_) => Openness::Unreadable,
    }
}

fn tightened_and_relaxed(dir: Direction) -> ChangeType {
    match dir {
        Direction::Input => ChangeType::ConstraintTightened,
        Direction::Output => ChangeType::ConstraintRelaxed,
    }
}

fn required_names(schema: &Map<String, Value>) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn param_summary(schema: &Value, required: bool) -> Value {
    json!({"type": schema.get("type").cloned().unwrap_or(Value::Null), "required": required})
}

/// A parameter's type as people read it: `string`, `string | null`, `any` when unconstrained.
fn param_type(schema: &Value) -> String {
    match schema.as_object().map(declared_types) {
        Some(Types::Set(set, _)) => set.into_iter().collect::<Vec<_>>().join(" | "),
        Some(Types::Branches) => "union".to_owned(),
        _ => "any".to_owned(),
    }
}

fn missing_from<'a>(values: &'a [Value], other: &[Value]) -> Vec<&'a Value> {
    let others: BTreeSet<String> = other.iter().map(canonical_json).collect();
    values.iter().filter(|v| !others.contains(&canonical_json(v))).collect()
}

fn or_null(value: Option<&Value>) -> Value {
    value.cloned().unwrap_or(Value::Null)
}

fn keyword(key: &str, value: Option<&Value>) -> Value {
    json!({ key: or_null(value) })
}

/// Whether two values differ canonically (`1` and `1.0` do not).
fn differs(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a != b && canonical_json(a) != canonical_json(b),
        (None, None) => false,
        _ => true,
    }
}

fn differs_map(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    differs(Some(&Value::Object(a.clone())), Some(&Value::Object(b.clone())))
}
