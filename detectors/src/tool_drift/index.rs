//! A tool list indexed once: its tools by name, each with the digest of its normal definition, and the
//! list's `schema_hash` computed from those digests.
//!
//! Both the hash and the diff read this index. A tool declared exactly as in a list indexed before (the
//! baseline, the newest snapshot, the other side of a pair) takes its digest from there, so a new list
//! costs a comparison per unchanged tool and a digest per changed one; the diff builds normal forms only
//! for the tools whose digests differ.

use std::collections::HashMap;

use driftline_schemas::{name_of, ToolsText};
use foldhash::fast::RandomState;
use sha2::{Digest, Sha256};

use super::canonical::write_string;
use super::digest::{definition_digest, entry_digest, DefinitionDigest};
use super::normal::{normalize_tool_owned, NormalTool};
use super::parallel::{map_ordered, threads_for};

/// One tool of an indexed list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedTool {
    pub name: Box<str>,
    /// Where the tool sits in the declared list (of two tools with one name, the later wins).
    pub at: usize,
    /// SHA-256 of the canonical JSON of its normal definition (everything but the name): equal for a tool
    /// that was only renamed.
    pub definition: DefinitionDigest,
}

/// A declared tool list's tools by name with their definition digests, and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolIndex {
    /// Sorted by name (UTF-8 bytes), one per name.
    tools: Vec<IndexedTool>,
    hash: [u8; 32],
}

/// A declared list with its index: what the diff reads.
#[derive(Debug, Clone, Copy)]
pub struct IndexedList<'a> {
    pub tools: &'a ToolsText,
    pub index: &'a ToolIndex,
}

impl IndexedList<'_> {
    /// The normal form of one of the list's tools, built for the diff (its entry parsed again).
    pub fn normal(&self, tool: &IndexedTool) -> NormalTool {
        match self.tools.value(tool.at) {
            Some(serde_json::Value::Object(object)) if object.get("name").is_some_and(|n| n.is_string()) => {
                normalize_tool_owned(&tool.name, object)
            }
            _ => NormalTool { name: tool.name.to_string(), definition: serde_json::Map::new() },
        }
    }
}

impl ToolIndex {
    /// Indexes a declared list: entries that are not objects with a string `name` are not tools.
    pub fn new(tools: &ToolsText) -> Self {
        Self::reusing(tools, &[])
    }

    /// [`ToolIndex::new`] over `threads` threads (a test holds any split to the same index).
    #[cfg(test)]
    pub(super) fn new_over(tools: &ToolsText, threads: fn(usize) -> usize) -> Self {
        Self::reusing_over(tools, &[], threads)
    }

    /// [`ToolIndex::new`], taking the name and digest of every tool whose text is an indexed tool's in one
    /// of `known`: only tools with new text are parsed and digested.
    pub fn reusing(tools: &ToolsText, known: &[IndexedList<'_>]) -> Self {
        Self::reusing_over(tools, known, threads_for)
    }

    /// [`ToolIndex::reusing`], the tools to digest split over `threads(count)` threads.
    pub(super) fn reusing_over(
        tools: &ToolsText,
        known: &[IndexedList<'_>],
        threads: fn(usize) -> usize,
    ) -> Self {
        if known.is_empty() {
            return Self::fresh(tools, threads);
        }
        let entries = tools.entries();
        // A tool declared exactly as an indexed tool of a known list takes that one's name and digest
        // without its text being read. Lists mostly keep their order, so the tool at its own place is
        // compared first; the others are looked up by their text (the table is built at the first miss).
        let at_place: Vec<Vec<Option<&IndexedTool>>> = known
            .iter()
            .map(|list| {
                let mut places = vec![None; list.tools.entries().len()];
                for tool in list.index.tools() {
                    if let Some(place) = places.get_mut(tool.at) {
                        *place = Some(tool);
                    }
                }
                places
            })
            .collect();
        let by_text = std::sync::OnceLock::new();
        let known_as_declared = |at: usize| {
            let declared = entries[at].get();
            let in_place = known.iter().zip(&at_place).find_map(|(list, places)| {
                let tool = (*places.get(at)?)?;
                (list.tools.entries().get(at)?.get() == declared).then_some(tool)
            });
            in_place.or_else(|| {
                // Seeded per process: texts a server chose cannot be made to collide.
                let by_text: &HashMap<&str, &IndexedTool, RandomState> = by_text.get_or_init(|| {
                    let known_tools = known.iter().map(|list| list.index.len()).sum();
                    let mut by_text = HashMap::with_capacity_and_hasher(known_tools, RandomState::default());
                    for list in known {
                        for tool in list.index.tools() {
                            if let Some(text) = list.tools.entries().get(tool.at) {
                                by_text.entry(text.get()).or_insert(tool);
                            }
                        }
                    }
                    by_text
                });
                by_text.get(declared).copied()
            })
        };
        // The others' names are read from their text; only they are parsed and digested.
        let mut named: Vec<(Box<str>, usize, Option<DefinitionDigest>)> =
            map_ordered(entries.len(), threads(entries.len()), |at, _| match known_as_declared(at) {
                Some(tool) => Some((tool.name.clone(), at, Some(tool.definition))),
                None => Some((name_of(&entries[at])?.into_boxed_str(), at, None)),
            })
            .into_iter()
            .flatten()
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        later_of_each_name(&mut named, |(name, _, _)| name, |(_, at, _)| *at);
        // The rest are digested from their text.
        let new: Vec<usize> = (0..named.len()).filter(|&i| named[i].2.is_none()).collect();
        let mut digested = map_ordered(new.len(), threads(new.len()), |i, scratch| {
            let (name, at, _) = &named[new[i]];
            match entry_digest(&entries[*at], scratch) {
                Some((_, definition)) => definition,
                // Its name was read, so it parses: only a tool nested past serde_json's recursion
                // limit (refused by the limits before any list is kept) lands here.
                None => definition_digest(name, &serde_json::Map::new(), scratch),
            }
        })
        .into_iter();
        let indexed: Vec<IndexedTool> = named
            .into_iter()
            .map(|(name, at, definition)| {
                let definition = definition.or_else(|| digested.next()).unwrap_or_default();
                IndexedTool { name, at, definition }
            })
            .collect();
        Self::of(indexed)
    }

    /// A list with nothing to reuse: each tool read once from its text, in list order, for its name and
    /// digest.
    fn fresh(tools: &ToolsText, threads: fn(usize) -> usize) -> Self {
        let entries = tools.entries();
        let mut indexed: Vec<IndexedTool> =
            map_ordered(entries.len(), threads(entries.len()), |at, scratch| {
                let (name, definition) = entry_digest(&entries[at], scratch)?;
                Some(IndexedTool { name: name.into(), at, definition })
            })
            .into_iter()
            .flatten()
            .collect();
        indexed.sort_by(|a, b| a.name.cmp(&b.name));
        later_of_each_name(&mut indexed, |tool| &tool.name, |tool| tool.at);
        Self::of(indexed)
    }

    fn of(tools: Vec<IndexedTool>) -> Self {
        let hash = list_hash(tools.iter().map(|tool| (&*tool.name, &tool.definition)));
        ToolIndex { tools, hash }
    }

    pub fn get(&self, name: &str) -> Option<&IndexedTool> {
        self.tools.binary_search_by(|tool| (*tool.name).cmp(name)).ok().map(|at| &self.tools[at])
    }

    /// The tools, sorted by name.
    pub fn tools(&self) -> &[IndexedTool] {
        &self.tools
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The list's `schema_hash`, in lowercase hex.
    pub fn hash(&self) -> String {
        hex::encode(self.hash)
    }
}

/// Keeps one entry per name of a list sorted by name (stably): the one declared last, as with duplicate
/// JSON keys.
fn later_of_each_name<T>(sorted: &mut Vec<T>, name: impl Fn(&T) -> &str, at: impl Fn(&T) -> usize) {
    sorted.dedup_by(|later, kept| {
        let same = name(later) == name(kept);
        if same && at(later) > at(kept) {
            std::mem::swap(later, kept);
        }
        same
    });
}

/// `schema_hash`: SHA-256 of the canonical JSON array of `[name, definition digest in hex]` pairs, sorted by
/// name — a hash of the tools' hashes, so that a list costs one digest per tool not seen before.
pub(super) fn list_hash<'a>(tools: impl Iterator<Item = (&'a str, &'a DefinitionDigest)>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    let mut text = String::with_capacity(128);
    let mut hex = [0u8; 64];
    text.push('[');
    for (index, (name, definition)) in tools.enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push('[');
        write_string(&mut text, name);
        text.push_str(",\"");
        if hex::encode_to_slice(definition, &mut hex).is_ok() {
            text.push_str(std::str::from_utf8(&hex).unwrap_or_default());
        }
        text.push_str("\"]");
        if text.len() > 4096 {
            hasher.update(text.as_bytes());
            text.clear();
        }
    }
    text.push(']');
    hasher.update(text.as_bytes());
    hasher.finalize().into()
}

/// The tools of two indexed lists side by side in name order: those of one list only, and pairs.
pub(super) fn side_by_side<'a>(
    old: &'a ToolIndex,
    new: &'a ToolIndex,
) -> impl Iterator<Item = (Option<&'a IndexedTool>, Option<&'a IndexedTool>)> + 'a {
    let (mut old, mut new) = (old.tools.iter().peekable(), new.tools.iter().peekable());
    std::iter::from_fn(move || match (old.peek(), new.peek()) {
        (Some(a), Some(b)) => Some(match a.name.cmp(&b.name) {
            std::cmp::Ordering::Less => (old.next(), None),
            std::cmp::Ordering::Greater => (None, new.next()),
            std::cmp::Ordering::Equal => (old.next(), new.next()),
        }),
        (Some(_), None) => Some((old.next(), None)),
        (None, Some(_)) => Some((None, new.next())),
        (None, None) => None,
    })
}
