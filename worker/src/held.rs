//! State held per key together with the input stream (partition) it belongs to: the two move as one when
//! a consumer group moves the stream, are restored and forgotten as one, and cannot drift apart.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::Hash;

/// Each key's state, and the stream of the last record that touched it (`None` until a batch that
/// changed it is written: a key made by an operator command stays where it is).
#[derive(Debug)]
pub(crate) struct Held<K, S> {
    entries: HashMap<K, (S, Option<u32>)>,
}

impl<K, S> Default for Held<K, S> {
    fn default() -> Self {
        Held { entries: HashMap::new() }
    }
}

impl<K: Hash + Eq + Clone, S> Held<K, S> {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    pub(crate) fn get(&self, key: &K) -> Option<&S> {
        self.entries.get(key).map(|(state, _)| state)
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut S> {
        self.entries.get_mut(key).map(|(state, _)| state)
    }

    /// The stream `key` belongs to, when known.
    pub(crate) fn stream(&self, key: &K) -> Option<u32> {
        self.entries.get(key).and_then(|(_, stream)| *stream)
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &S)> {
        self.entries.iter().map(|(key, (state, _))| (key, state))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut S)> {
        self.entries.iter_mut().map(|(key, (state, _))| (key, state))
    }

    /// Keys with the stream each belongs to (those with none known left out).
    pub(crate) fn streams(&self) -> impl Iterator<Item = (&K, u32)> {
        self.entries.iter().filter_map(|(key, (_, stream))| stream.map(|s| (key, s)))
    }

    /// A state read back from the store, with its stream.
    pub(crate) fn restore(&mut self, key: K, state: S, stream: u32) {
        self.entries.insert(key, (state, Some(stream)));
    }

    /// `key`'s state, made when it is new (`added` then counts it against its project's limit).
    pub(crate) fn state_of(&mut self, key: &K, added: impl FnOnce()) -> &mut S
    where
        S: Default,
    {
        match self.entries.entry(key.clone()) {
            Entry::Occupied(held) => &mut held.into_mut().0,
            Entry::Vacant(new) => {
                added();
                &mut new.insert((S::default(), None)).0
            }
        }
    }

    /// Moves a held key to `stream` (a key not held is left alone).
    pub(crate) fn move_to(&mut self, key: &K, stream: u32) {
        if let Some((_, held)) = self.entries.get_mut(key) {
            *held = Some(stream);
        }
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<S> {
        self.entries.remove(key).map(|(state, _)| state)
    }

    /// Keeps the keys whose stream `keep` says stay (and those whose stream is not known yet).
    pub(crate) fn retain_streams(&mut self, keep: impl Fn(u32) -> bool) {
        self.entries.retain(|_, (_, stream)| stream.is_none_or(&keep));
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_stream_move_together() {
        let mut held: Held<&str, u32> = Held::default();
        held.restore("a", 1, 0);
        held.restore("b", 2, 1);
        let mut added = 0;
        *held.state_of(&"c", || added += 1) += 3;
        *held.state_of(&"a", || added += 1) += 10;
        assert_eq!((added, held.get(&"a"), held.get(&"c")), (1, Some(&11), Some(&3)));
        assert_eq!((held.stream(&"a"), held.stream(&"c")), (Some(0), None), "a new key has no stream yet");
        held.move_to(&"a", 1);
        held.move_to(&"z", 1);
        assert!(!held.contains_key(&"z"), "moving a key not held holds nothing");
        // Stream 1 moves away: its keys go with it; a key of no known stream stays.
        held.retain_streams(|stream| stream != 1);
        let mut kept: Vec<_> = held.keys().copied().collect();
        kept.sort();
        assert_eq!(kept, ["c"]);
        assert_eq!(held.remove(&"c"), Some(3));
        assert_eq!(held.len(), 0);
    }
}
