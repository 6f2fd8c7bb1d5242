//! The order a batch's records are processed in, and where a batch stops, so that no project's tool lists
//! hold the others' calls for long. Each list's cost is bounded by the list limits, not how many arrive:
//! 30 heavy lists read as one batch once held every call behind them for 27–49 s, stored nothing until the
//! end, and froze the lag gauges. Now a batch takes every record of the streams that carry no tool list
//! first (calls and commands, cheap and bounded each), then the streams that carry lists one record each in
//! turn, and once `detector.max_batch_millis` is spent it leaves the rest of those streams for the next
//! batch (at least one of their records is processed per batch). A stream's records keep their order, so
//! the stored positions stay a prefix of each stream. On Kafka, lists and calls are different streams, so
//! calls never wait behind list work beyond one batch; the embedded bus is one log, where ingest's
//! per-project budget of list work bounds what any project can queue ahead of the calls.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use driftline_bus::{Delivered, Topic};

#[derive(Debug, Default)]
pub struct Schedule {
    /// Streams with a tool list among the batch's records.
    list_streams: BTreeSet<u32>,
    /// Records left for the next batch, and their streams.
    left: BTreeSet<usize>,
    left_streams: BTreeSet<u32>,
    /// Whether a record of a list stream was processed in this batch.
    listed: bool,
}

impl Schedule {
    /// The schedule of `records`, and the order to process them in (indices into `records`).
    pub fn new(records: &[Delivered]) -> (Self, Vec<usize>) {
        let list_streams: BTreeSet<u32> =
            records.iter().filter(|r| r.topic == Topic::ToolLists).map(|r| r.position.partition).collect();
        let mut order = Vec::with_capacity(records.len());
        let mut queues: BTreeMap<u32, VecDeque<usize>> = BTreeMap::new();
        for (index, record) in records.iter().enumerate() {
            match list_streams.contains(&record.position.partition) {
                true => queues.entry(record.position.partition).or_default().push_back(index),
                false => order.push(index),
            }
        }
        while !queues.is_empty() {
            queues.retain(|_, queue| {
                if let Some(index) = queue.pop_front() {
                    order.push(index);
                }
                !queue.is_empty()
            });
        }
        (Schedule { list_streams, ..Schedule::default() }, order)
    }

    /// Whether the record at `index` is left for the next batch, `out_of_time` saying whether the
    /// batch's time is spent.
    pub fn leaves(&mut self, index: usize, record: &Delivered, out_of_time: bool) -> bool {
        let stream = record.position.partition;
        if !self.list_streams.contains(&stream) {
            return false;
        }
        if self.left_streams.contains(&stream) || (out_of_time && self.listed) {
            self.left_streams.insert(stream);
            self.left.insert(index);
            return true;
        }
        self.listed = true;
        false
    }

    /// How many records are left.
    pub fn count(&self) -> usize {
        self.left.len()
    }

    pub fn streams(&self) -> &BTreeSet<u32> {
        &self.left_streams
    }

    /// The records left, in their order.
    pub fn take(self, records: Vec<Delivered>) -> Vec<Delivered> {
        records
            .into_iter()
            .enumerate()
            .filter(|(index, _)| self.left.contains(index))
            .map(|(_, r)| r)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use driftline_schemas::{InputPosition, Timestamp};

    /// Records written `L1` (a tool list on stream 1) or `S2` (a span on stream 2), offsets in order.
    fn records(script: &str) -> Vec<Delivered> {
        script
            .split_whitespace()
            .enumerate()
            .map(|(offset, item)| {
                let topic = if item.starts_with('L') { Topic::ToolLists } else { Topic::Spans };
                let partition = item[1..].parse().expect("a stream");
                Delivered {
                    topic,
                    key: String::new(),
                    payload: Vec::new(),
                    position: InputPosition { partition, offset: offset as u64 },
                    appended_at: Timestamp::from_millis(0).expect("a time"),
                }
            })
            .collect()
    }

    /// Runs the schedule with the time spent after `budget` processed records, and answers the processed
    /// indices in order and the indices left.
    fn check(script: &str, budget: usize, processed: &[usize], left: &[usize]) {
        let records = records(script);
        let (mut schedule, order) = Schedule::new(&records);
        let mut done = Vec::new();
        for index in order {
            if !schedule.leaves(index, &records[index], done.len() >= budget) {
                done.push(index);
            }
        }
        let kept: Vec<u64> = schedule.take(records).iter().map(|r| r.position.offset).collect();
        assert_eq!(
            (done.as_slice(), kept),
            (processed, left.iter().map(|&i| i as u64).collect()),
            "{script}"
        );
    }

    #[test]
    fn calls_go_first_and_list_streams_take_turns_until_the_time_is_spent() {
        // Kafka: lists on streams 1 and 3, spans on 2. Spans first; lists in turn.
        check("L1 L1 S2 L1 L3 S2 L3", 100, &[2, 5, 0, 4, 1, 6, 3], &[]);
        // Out of time after three: spans are never left; one list processed, then the rest of each
        // list stream waits (stream 1 from its second record on, stream 3 whole after its first is left).
        check("L1 L1 S2 L1 L3 S2 L3", 3, &[2, 5, 0], &[1, 3, 4, 6]);
        // At least one list record per batch, however little time.
        check("L1 L1 S2", 0, &[2, 0], &[1]);
        // The embedded bus: one stream for all; in order, stopping once the time is spent.
        check("S0 L0 S0 L0 S0", 2, &[0, 1], &[2, 3, 4]);
        check("S0 S0 S0", 0, &[0, 1, 2], &[]);
    }
}
