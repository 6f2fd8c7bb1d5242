//! The identities of the calls each stream carried within the repeat window, held by the worker that owns
//! the stream, so that a call sent again (a client's retry, a producer's duplicate) is told without asking
//! the store ([`RepeatLookup::Remember`](driftline_store::RepeatLookup)). A call's key decides its stream,
//! so every repeat of a call reaches the worker holding the first. Loaded from the store, by stream and
//! time, when the worker takes a stream; kept in step with the batches after that.
//!
//! Bounded twice: by the window (identities older than `repeat_window_hours` in bus time leave) and by
//! `detector.repeat_memory_bytes` (beyond it the oldest leave early). A call repeating one that left early
//! is counted again: how many left early is `driftline_worker_repeat_identities_evicted_total`, and how far
//! back repeats are still told is `driftline_worker_repeat_horizon_seconds`.

use std::collections::{HashMap, VecDeque};

use driftline_schemas::InputPosition;

/// Bytes one identity takes here at most: its key and position in the map (33 B a slot, up to 2.3 slots an
/// entry as the map grows by doubling) and its entry in the order of arrival (24 B, up to twice as
/// allocated); about 100 B on average. Tested: [`RecentCalls::allocated_bytes`] stays within it.
pub const BYTES_PER_IDENTITY: usize = 128;

/// An identity (32 hex digits of SHA-256) as a number; any other text by a digest of it.
pub fn identity_key(identity: &str) -> u128 {
    match u128::from_str_radix(identity, 16) {
        Ok(key) if identity.len() == 32 => key,
        _ => {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(identity.as_bytes());
            let mut first = [0u8; 16];
            first.copy_from_slice(&digest[..16]);
            u128::from_be_bytes(first)
        }
    }
}

#[derive(Debug)]
pub struct RecentCalls {
    first: HashMap<u128, InputPosition>,
    /// (bus time in ms, identity as two halves: 24 bytes where a `u128` would align the pair to 32), in
    /// the order remembered.
    order: VecDeque<(i64, u64, u64)>,
    window_ms: i64,
    capacity: usize,
    /// Identities that left before their window ended, since the last [`RecentCalls::take_evicted`].
    evicted: u64,
}

impl RecentCalls {
    pub fn new(window_ms: i64, memory_bytes: usize) -> Self {
        RecentCalls {
            first: HashMap::new(),
            order: VecDeque::new(),
            window_ms,
            capacity: (memory_bytes / BYTES_PER_IDENTITY).max(1),
            evicted: 0,
        }
    }

    /// Where the call `key` was first carried, if it is remembered.
    pub fn find(&self, key: u128) -> Option<InputPosition> {
        self.first.get(&key).copied()
    }

    /// Remembers a call carried at `position` at bus time `at_ms` (a key held already keeps its first
    /// position), then lets go of what the window and the memory bound no longer hold.
    pub fn remember(&mut self, key: u128, position: InputPosition, at_ms: i64) {
        if let std::collections::hash_map::Entry::Vacant(new) = self.first.entry(key) {
            new.insert(position);
            self.order.push_back((at_ms, (key >> 64) as u64, key as u64));
        }
        let oldest_kept = at_ms.saturating_sub(self.window_ms);
        while let Some(&(at, high, low)) = self.order.front() {
            let key = (u128::from(high) << 64) | u128::from(low);
            let expired = at < oldest_kept;
            if !expired && self.order.len() <= self.capacity {
                break;
            }
            self.order.pop_front();
            self.first.remove(&key);
            self.evicted += u64::from(!expired);
        }
    }

    /// Keeps the calls of the streams this worker still reads.
    pub fn retain_streams(&mut self, keep: impl Fn(u32) -> bool) {
        self.first.retain(|_, position| keep(position.partition));
        let first = &self.first;
        self.order
            .retain(|(_, high, low)| first.contains_key(&((u128::from(*high) << 64) | u128::from(*low))));
    }

    pub fn clear(&mut self) {
        self.first.clear();
        self.order.clear();
    }

    pub fn len(&self) -> usize {
        self.first.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// How many identities can be held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bus time of the oldest identity held.
    pub fn oldest(&self) -> Option<i64> {
        self.order.front().map(|(at, _, _)| *at)
    }

    /// Bytes allocated for what is held: what `detector.repeat_memory_bytes` bounds.
    pub fn allocated_bytes(&self) -> usize {
        // A hashbrown slot: the entry and one control byte.
        self.first.capacity() * (std::mem::size_of::<(u128, InputPosition)>() + 1)
            + self.order.capacity() * std::mem::size_of::<(i64, u64, u64)>()
    }

    pub fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(partition: u32, offset: u64) -> InputPosition {
        InputPosition { partition, offset }
    }

    #[test]
    fn a_call_is_found_until_its_window_ends_or_memory_lets_it_go() {
        let mut recent = RecentCalls::new(1000, 3 * BYTES_PER_IDENTITY);
        recent.remember(1, at(0, 1), 0);
        recent.remember(1, at(0, 9), 10);
        assert_eq!(recent.find(1), Some(at(0, 1)), "the first position stays");
        recent.remember(2, at(1, 2), 500);
        recent.remember(3, at(0, 3), 1000);
        assert_eq!((recent.find(1), recent.len()), (Some(at(0, 1)), 3), "the window includes its end");
        recent.remember(4, at(0, 4), 1001);
        assert_eq!(recent.find(1), None, "out of the window");
        assert_eq!(recent.take_evicted(), 0, "leaving with the window is no eviction");
        // Memory holds three: the oldest goes early, and is counted.
        recent.remember(5, at(0, 5), 1002);
        assert_eq!((recent.find(2), recent.take_evicted()), (None, 1));
        assert_eq!(recent.oldest(), Some(1000));
        recent.retain_streams(|stream| stream == 1);
        assert!(recent.is_empty());
    }

    /// However many are held, what is allocated stays within [`BYTES_PER_IDENTITY`] each, so the memory
    /// bound holds (at the sizes where the map and the ring have just doubled too).
    #[test]
    fn the_memory_held_stays_within_its_bound() {
        let budget = 300_000 * BYTES_PER_IDENTITY;
        let mut recent = RecentCalls::new(i64::MAX / 2, budget);
        let mut most = 0f64;
        for key in 0..400_000u128 {
            recent.remember(key * 7919, at(0, key as u64), key as i64);
            if key % 997 == 0 || recent.len() == recent.capacity() {
                let per = recent.allocated_bytes() as f64 / recent.len() as f64;
                if recent.len() >= 1000 {
                    most = most.max(per);
                }
                assert!(
                    recent.allocated_bytes() <= recent.len().max(8) * BYTES_PER_IDENTITY,
                    "{} held, {} B",
                    recent.len(),
                    recent.allocated_bytes()
                );
            }
        }
        assert_eq!(recent.len(), 300_000);
        assert!(recent.allocated_bytes() <= budget, "{}", recent.allocated_bytes());
        println!("at most {most:.0} B an identity");
    }

    proptest! {
        /// Against a model that keeps everything: a call is found exactly when its first carrying is
        /// within the window of the newest and among the `capacity` newest distinct calls.
        #[test]
        fn the_memory_agrees_with_keeping_everything(
            calls in prop::collection::vec((0u128..40, 0i64..50), 1..300),
            window in 1i64..400,
            capacity in 1usize..30,
        ) {
            let mut recent = RecentCalls::new(window, capacity * BYTES_PER_IDENTITY);
            let mut model: Vec<(u128, i64, u64)> = Vec::new();
            let mut now = 0i64;
            for (offset, (key, step)) in calls.into_iter().enumerate() {
                now += step;
                let offset = offset as u64;
                if !model.iter().any(|(k, _, _)| *k == key) {
                    model.push((key, now, offset));
                }
                recent.remember(key, at(0, offset), now);
                model.retain(|(_, at, _)| *at >= now - window);
                while model.len() > capacity {
                    model.remove(0);
                }
                for probe in 0u128..40 {
                    let expected = model.iter().find(|(k, _, _)| *k == probe).map(|(_, _, o)| at(0, *o));
                    prop_assert_eq!(recent.find(probe), expected, "key {} at {}", probe, now);
                }
            }
        }
    }
}
