//! The shapes of the arguments an agent's calls sent, per agent row: each distinct shape once (its text,
//! so a new input schema can be checked against it) with how many calls sent it. Never a value: a shape
//! keeps keys and kinds only. Bounded per row: [`ArgumentShapes::LIMIT`] shapes of at most
//! [`ArgumentShapes::MAX_SHAPE_BYTES`] each; calls with further or larger shapes are counted in `other`
//! (checked by no schema: reported as not known, never as rejected).

use std::collections::BTreeMap;

use super::sketch::{bad, varint, Reader};
use super::SketchError;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ArgumentShapes {
    /// Shape text → calls that sent it.
    shapes: BTreeMap<String, u64>,
    /// Calls whose arguments had a shape beyond the limits.
    other: u64,
}

impl ArgumentShapes {
    /// Distinct shapes a stored row keeps. With [`Self::MAX_SHAPE_BYTES`], at most 8 KiB a row: the
    /// detector's rollup cache (20,000 rows) then holds at most 160 MiB of them however calls are shaped,
    /// and real tools' arguments (a few keys) take tens of bytes.
    pub const LIMIT: usize = 8;
    /// Longest shape a row keeps (about 30 parameters; a larger one is counted in `other`).
    pub const MAX_SHAPE_BYTES: usize = 1024;

    pub fn insert(&mut self, shape: &str) {
        if let Some(count) = self.shapes.get_mut(shape) {
            *count += 1;
        } else if self.shapes.len() < Self::LIMIT && shape.len() <= Self::MAX_SHAPE_BYTES {
            self.shapes.insert(shape.to_owned(), 1);
        } else {
            self.other += 1;
        }
    }

    /// For an answer: the counts of one shape add up (no limit: the rows read are bounded).
    pub fn merge(&mut self, other: &ArgumentShapes) {
        for (shape, n) in &other.shapes {
            *self.shapes.entry(shape.clone()).or_default() += n;
        }
        self.other += other.other;
    }

    /// Each shape kept with the calls that sent it.
    pub fn shapes(&self) -> impl Iterator<Item = (&str, u64)> {
        self.shapes.iter().map(|(shape, n)| (shape.as_str(), *n))
    }

    /// Calls with arguments whose shape was not kept.
    pub fn other(&self) -> u64 {
        self.other
    }

    /// Calls with recorded arguments.
    pub fn total(&self) -> u64 {
        self.shapes.values().sum::<u64>() + self.other
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    pub fn encode(&self) -> Vec<u8> {
        if self.is_empty() {
            // Rows written before argument shapes existed hold nothing: the same bytes.
            return Vec::new();
        }
        let mut out = vec![1];
        varint(&mut out, self.other);
        varint(&mut out, self.shapes.len() as u64);
        for (shape, n) in &self.shapes {
            varint(&mut out, shape.len() as u64);
            out.extend_from_slice(shape.as_bytes());
            varint(&mut out, *n);
        }
        out
    }

    /// Reads [`ArgumentShapes::encode`]'s bytes; no bytes (a row from before argument shapes) is none.
    pub fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        const WHAT: &str = "argument shapes";
        if bytes.is_empty() {
            return Ok(ArgumentShapes::default());
        }
        let mut reader = Reader { bytes, what: WHAT };
        if reader.byte()? != 1 {
            return Err(bad(WHAT, "unknown version"));
        }
        let other = reader.varint()?;
        let n = reader.length(2)?;
        let mut shapes = BTreeMap::new();
        for _ in 0..n {
            let len = reader.length(1)?;
            let shape = std::str::from_utf8(reader.take(len)?)
                .map_err(|_| bad(WHAT, "shape is not text"))?
                .to_owned();
            *shapes.entry(shape).or_default() += reader.varint()?;
        }
        reader.end()?;
        Ok(ArgumentShapes { shapes, other })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_counted_within_their_limits() {
        let mut shapes = ArgumentShapes::default();
        for i in 0..20 {
            shapes.insert(&format!("{{\"k{i}\":\"string\"}}"));
        }
        shapes.insert("{\"k0\":\"string\"}");
        shapes.insert(&"x".repeat(ArgumentShapes::MAX_SHAPE_BYTES + 1));
        assert_eq!(shapes.shapes().count(), ArgumentShapes::LIMIT);
        assert_eq!(shapes.shapes().find(|(s, _)| *s == "{\"k0\":\"string\"}").map(|(_, n)| n), Some(2));
        assert_eq!((shapes.other(), shapes.total()), (13, 22));
    }

    #[test]
    fn encoding_reads_back_and_refuses_damage() {
        let mut shapes = ArgumentShapes::default();
        shapes.insert("{\"q\":\"string\"}");
        shapes.insert("{\"q\":\"string\"}");
        shapes.insert("{}");
        let bytes = shapes.encode();
        assert_eq!(ArgumentShapes::decode(&bytes), Ok(shapes.clone()));
        assert_eq!(ArgumentShapes::decode(&[]), Ok(ArgumentShapes::default()));
        assert_eq!(ArgumentShapes::default().encode(), Vec::<u8>::new());
        for cut in 1..bytes.len() {
            assert!(ArgumentShapes::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(ArgumentShapes::decode(&[2, 0, 0]).is_err(), "an unknown version");
        let mut merged = shapes.clone();
        merged.merge(&shapes);
        assert_eq!(merged.total(), 6);
    }
}
