//! The structural, direction-aware diff of two tool lists (DESIGN.md §5 "Change kinds").
//!
//! Every difference between the normalised lists is reported: by its specific kind where the table has
//! one, otherwise as `schema_changed` (WARNING) at the deepest schema that differs. So a changed
//! `schema_hash` always comes with at least one change.

mod listing;
mod path;
mod review;
mod schema;
mod tool;
mod types;

use std::collections::{HashMap, HashSet, VecDeque};

use driftline_schemas::{
    ChangeType, Classification, SchemaChange, SecurityFlag, SecurityHold, Severity, ToolsText,
};
use serde_json::{json, Value};

use super::digest::DefinitionDigest;
use super::index::{side_by_side, IndexedList, IndexedTool, ToolIndex};
use super::normal::NormalTool;
use super::parallel::map_ordered;
use super::security::ToolNames;
use listing::Listing;
use path::Path;
use tool::ToolDiffer;

pub use listing::{ListedChanges, LISTED_BYTES_PER_KIND, LISTED_CHANGES_PER_KIND};
pub(crate) use listing::{Split, ToolRoom};
pub use review::review_tool;

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

/// The tool of a pair that only the first list holds.
fn only_first<'a>(pair: (Option<&'a IndexedTool>, Option<&'a IndexedTool>)) -> Option<&'a IndexedTool> {
    match pair {
        (Some(tool), None) => Some(tool),
        _ => None,
    }
}
