//! Mergeable summaries a rollup row keeps instead of its calls: latency percentiles, distinct sessions and
//! the shapes returned. Each is exact while small and approximate (with a known error) beyond, merges in
//! any order to the same result, and has a compact binary encoding of its own (a version byte first).
//!
//! The encodings are ours rather than a crate's serde layout: rows are stored for 30 days and read by
//! other versions of driftline, so the bytes must not change with a dependency.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("stored {what} cannot be read: {why}")]
pub struct SketchError {
    what: &'static str,
    why: &'static str,
}

pub(super) fn bad(what: &'static str, why: &'static str) -> SketchError {
    SketchError { what, why }
}

/// Latencies (ms): the values themselves up to [`LatencySketch::EXACT_LIMIT`], then a DDSketch
/// (Masson, Rim, Lee 2019): logarithmic bins whose every value is within 1 % of the bin's representative,
/// so any percentile read is within 1 % of a value of the true rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LatencySketch {
    repr: Latencies,
}

#[derive(Debug, Clone, PartialEq)]
enum Latencies {
    /// Sorted.
    Exact(Vec<f64>),
    Binned {
        /// Values too small for a bin (zero, or below [`MIN_BINNED_MS`]).
        zeros: u64,
        bins: BTreeMap<i32, u64>,
    },
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies::Exact(Vec::new())
    }
}

/// Relative accuracy of a binned latency.
pub const LATENCY_ACCURACY: f64 = 0.01;
/// Below this a latency counts as zero once binned (a microsecond is below what spans carry).
const MIN_BINNED_MS: f64 = 1e-6;

fn gamma() -> f64 {
    (1.0 + LATENCY_ACCURACY) / (1.0 - LATENCY_ACCURACY)
}

fn bin_of(value: f64) -> i32 {
    (value.ln() / gamma().ln()).ceil() as i32
}

/// The value a bin stands for: within [`LATENCY_ACCURACY`] of everything in it.
fn bin_value(bin: i32) -> f64 {
    let g = gamma();
    2.0 * g.powi(bin) / (g + 1.0)
}

/// Non-finite and negative inputs (which validated spans never carry) count as zero.
fn clean(value: f64) -> f64 {
    if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    }
}

impl LatencySketch {
    /// Up to this many values are kept as they are (percentiles are then exact).
    pub const EXACT_LIMIT: usize = 64;

    pub fn count(&self) -> u64 {
        match &self.repr {
            Latencies::Exact(values) => values.len() as u64,
            Latencies::Binned { zeros, bins } => zeros + bins.values().sum::<u64>(),
        }
    }

    pub fn is_exact(&self) -> bool {
        matches!(self.repr, Latencies::Exact(_))
    }

    pub fn insert(&mut self, value: f64) {
        let value = clean(value);
        match &mut self.repr {
            Latencies::Exact(values) if values.len() < Self::EXACT_LIMIT => {
                let at = values.partition_point(|v| v.total_cmp(&value).is_le());
                values.insert(at, value);
            }
            Latencies::Exact(_) => {
                self.switch_to_bins();
                self.insert(value);
            }
            Latencies::Binned { zeros, bins } => add_binned(zeros, bins, value, 1),
        }
    }

    /// Both sets of values: exact while the two together fit [`Self::EXACT_LIMIT`], else binned.
    pub fn merge(&mut self, other: &LatencySketch) {
        match (&mut self.repr, &other.repr) {
            (Latencies::Exact(mine), Latencies::Exact(theirs))
                if mine.len() + theirs.len() <= Self::EXACT_LIMIT =>
            {
                mine.extend_from_slice(theirs);
                mine.sort_by(f64::total_cmp);
            }
            (Latencies::Exact(_), _) => {
                self.switch_to_bins();
                self.merge(other);
            }
            (Latencies::Binned { zeros, bins }, Latencies::Exact(theirs)) => {
                for value in theirs {
                    add_binned(zeros, bins, *value, 1);
                }
            }
            (Latencies::Binned { zeros, bins }, Latencies::Binned { zeros: z, bins: b }) => {
                *zeros += z;
                for (bin, n) in b {
                    *bins.entry(*bin).or_default() += n;
                }
            }
        }
    }

    fn switch_to_bins(&mut self) {
        if let Latencies::Exact(values) = &self.repr {
            let (mut zeros, mut bins) = (0, BTreeMap::new());
            for value in values {
                add_binned(&mut zeros, &mut bins, *value, 1);
            }
            self.repr = Latencies::Binned { zeros, bins };
        }
    }

    /// The value at nearest rank `ceil(p · n)` (1-based), `None` when empty: exact while the values are
    /// kept, else within 1 % of the value of that rank.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((p * n as f64).ceil() as u64).clamp(1, n);
        match &self.repr {
            Latencies::Exact(values) => values.get(rank as usize - 1).copied(),
            Latencies::Binned { zeros, bins } => {
                if rank <= *zeros {
                    return Some(0.0);
                }
                let mut seen = *zeros;
                for (bin, count) in bins {
                    seen += count;
                    if seen >= rank {
                        return Some(bin_value(*bin));
                    }
                }
                bins.keys().next_back().map(|bin| bin_value(*bin))
            }
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match &self.repr {
            Latencies::Exact(values) => {
                out.push(1);
                varint(&mut out, values.len() as u64);
                for value in values {
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
            Latencies::Binned { zeros, bins } => {
                out.push(2);
                varint(&mut out, *zeros);
                varint(&mut out, bins.len() as u64);
                let mut previous = 0i64;
                for (bin, count) in bins {
                    varint(&mut out, zigzag(i64::from(*bin) - previous));
                    varint(&mut out, *count);
                    previous = i64::from(*bin);
                }
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        let mut merge = LatencyMerge::default();
        merge.add_encoded(bytes)?;
        Ok(merge.finish())
    }
}

/// Bins a stored sketch can hold: those of the values from [`MIN_BINNED_MS`] to `f64::MAX` (a dense
/// count of every bin in range costs at most a few hundred kilobytes).
fn bin_range() -> std::ops::RangeInclusive<i64> {
    i64::from(bin_of(MIN_BINNED_MS))..=i64::from(bin_of(f64::MAX))
}

/// Many encoded latency sketches merged straight from their bytes into dense bin counts: what a read of
/// thousands of rows does (a timeline's day of minute rows), without a map per row. The result equals
/// decoding each and [`LatencySketch::merge`]-ing them in order; decoding one sketch is merging it alone.
#[derive(Debug, Default)]
pub struct LatencyMerge {
    exact: Vec<f64>,
    binned: bool,
    zeros: u64,
    /// Counts of the bins from `first_bin` on.
    first_bin: i32,
    counts: Vec<u64>,
}

impl LatencyMerge {
    pub fn add_encoded(&mut self, bytes: &[u8]) -> Result<(), SketchError> {
        const WHAT: &str = "latency sketch";
        let mut reader = Reader { bytes, what: WHAT };
        match reader.byte()? {
            1 => {
                let n = reader.length(8)?;
                if !self.binned && self.exact.len() + n > LatencySketch::EXACT_LIMIT {
                    self.switch_to_bins();
                }
                for _ in 0..n {
                    let value = clean(f64::from_le_bytes(reader.array()?));
                    if self.binned {
                        self.add_value(value);
                    } else {
                        self.exact.push(value);
                    }
                }
            }
            2 => {
                self.switch_to_bins();
                self.zeros += reader.varint()?;
                let n = reader.length(2)?;
                let range = bin_range();
                let mut previous = 0i64;
                for _ in 0..n {
                    let bin = previous.saturating_add(unzigzag(reader.varint()?));
                    if !range.contains(&bin) {
                        return Err(bad(WHAT, "bin out of range"));
                    }
                    self.add_bin(bin as i32, reader.varint()?);
                    previous = bin;
                }
            }
            _ => return Err(bad(WHAT, "unknown version")),
        }
        reader.end()
    }

    pub fn finish(mut self) -> LatencySketch {
        if !self.binned {
            self.exact.sort_by(f64::total_cmp);
            return LatencySketch { repr: Latencies::Exact(self.exact) };
        }
        let bins = (self.first_bin..).zip(self.counts).filter(|(_, count)| *count > 0).collect();
        LatencySketch { repr: Latencies::Binned { zeros: self.zeros, bins } }
    }

    fn switch_to_bins(&mut self) {
        if !self.binned {
            self.binned = true;
            for value in std::mem::take(&mut self.exact) {
                self.add_value(value);
            }
        }
    }

    fn add_value(&mut self, value: f64) {
        if value < MIN_BINNED_MS {
            self.zeros += 1;
        } else {
            self.add_bin(bin_of(value), 1);
        }
    }

    fn add_bin(&mut self, bin: i32, n: u64) {
        if self.counts.is_empty() {
            self.first_bin = bin;
        } else if bin < self.first_bin {
            let grow = (self.first_bin - bin) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.first_bin = bin;
        }
        let at = (bin - self.first_bin) as usize;
        if at >= self.counts.len() {
            self.counts.resize(at + 1, 0);
        }
        self.counts[at] += n;
    }
}

fn add_binned(zeros: &mut u64, bins: &mut BTreeMap<i32, u64>, value: f64, n: u64) {
    let value = clean(value);
    if value < MIN_BINNED_MS {
        *zeros += n;
    } else {
        *bins.entry(bin_of(value)).or_default() += n;
    }
}

/// Distinct sessions: their 64-bit hashes while few, then a HyperLogLog of 4,096 registers (a standard
/// error of 1.6 %). A union of exact sets stays exact up to the limit it is given.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionSketch {
    repr: Sessions,
}

#[derive(Debug, Clone, PartialEq)]
enum Sessions {
    Exact(BTreeSet<u64>),
    Registers(Box<[u8; HLL_REGISTERS]>),
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::Exact(BTreeSet::new())
    }
}

const HLL_BITS: u32 = 12;
const HLL_REGISTERS: usize = 1 << HLL_BITS;

/// The stable 64-bit hash of a session id (the first 8 bytes of its SHA-256).
pub fn session_hash(session: &str) -> u64 {
    let digest = Sha256::digest(session.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

impl SessionSketch {
    /// A stored row keeps at most this many hashes (2 KiB) before it turns into registers (4 KiB).
    pub const STORED_EXACT_LIMIT: usize = 256;
    /// A union made for one answer stays exact up to this many sessions.
    pub const READ_EXACT_LIMIT: usize = 1 << 20;

    pub fn insert(&mut self, hash: u64, limit: usize) {
        match &mut self.repr {
            Sessions::Exact(set) => {
                set.insert(hash);
                if set.len() > limit {
                    self.switch_to_registers();
                }
            }
            Sessions::Registers(registers) => add_register(registers, hash),
        }
    }

    pub fn merge(&mut self, other: &SessionSketch, limit: usize) {
        match (&mut self.repr, &other.repr) {
            (Sessions::Exact(mine), Sessions::Exact(theirs)) => {
                mine.extend(theirs.iter().copied());
                if mine.len() > limit {
                    self.switch_to_registers();
                }
            }
            (Sessions::Exact(_), Sessions::Registers(_)) => {
                self.switch_to_registers();
                self.merge(other, limit);
            }
            (Sessions::Registers(registers), Sessions::Exact(theirs)) => {
                for hash in theirs {
                    add_register(registers, *hash);
                }
            }
            (Sessions::Registers(mine), Sessions::Registers(theirs)) => {
                for (m, t) in mine.iter_mut().zip(theirs.iter()) {
                    *m = (*m).max(*t);
                }
            }
        }
    }

    fn switch_to_registers(&mut self) {
        if let Sessions::Exact(set) = &self.repr {
            let mut registers = Box::new([0u8; HLL_REGISTERS]);
            for hash in set {
                add_register(&mut registers, *hash);
            }
            self.repr = Sessions::Registers(registers);
        }
    }

    pub fn is_exact(&self) -> bool {
        matches!(self.repr, Sessions::Exact(_))
    }

    /// How many distinct sessions: exact while the hashes are kept, else estimated from the registers with
    /// Ertl's improved raw estimator ("New cardinality estimation algorithms for HyperLogLog sketches",
    /// 2017), which needs neither bias tables nor a switch to linear counting.
    pub fn estimate(&self) -> u64 {
        match &self.repr {
            Sessions::Exact(set) => set.len() as u64,
            Sessions::Registers(registers) => {
                let q = 64 - HLL_BITS as usize;
                let mut histogram = vec![0f64; q + 2];
                for register in registers.iter() {
                    histogram[usize::from(*register).min(q + 1)] += 1.0;
                }
                let m = HLL_REGISTERS as f64;
                let mut z = m * tau(1.0 - histogram[q + 1] / m);
                for k in (1..=q).rev() {
                    z = 0.5 * (z + histogram[k]);
                }
                z += m * sigma(histogram[0] / m);
                let alpha = 1.0 / (2.0 * std::f64::consts::LN_2);
                (alpha * m * m / z).round() as u64
            }
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match &self.repr {
            Sessions::Exact(set) => {
                out.push(1);
                varint(&mut out, set.len() as u64);
                let mut previous = 0u64;
                for hash in set {
                    varint(&mut out, hash - previous);
                    previous = *hash;
                }
            }
            Sessions::Registers(registers) => {
                out.push(2);
                out.extend_from_slice(registers.as_slice());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        const WHAT: &str = "session sketch";
        let mut reader = Reader { bytes, what: WHAT };
        let repr = match reader.byte()? {
            1 => {
                let n = reader.length(1)?;
                let mut set = BTreeSet::new();
                let mut previous = 0u64;
                for _ in 0..n {
                    previous = previous
                        .checked_add(reader.varint()?)
                        .ok_or_else(|| bad(WHAT, "hash out of range"))?;
                    set.insert(previous);
                }
                Sessions::Exact(set)
            }
            2 => {
                let registers: [u8; HLL_REGISTERS] = reader.array()?;
                if registers.iter().any(|r| u32::from(*r) > 65 - HLL_BITS) {
                    return Err(bad(WHAT, "register out of range"));
                }
                Sessions::Registers(Box::new(registers))
            }
            _ => return Err(bad(WHAT, "unknown version")),
        };
        reader.end()?;
        Ok(SessionSketch { repr })
    }
}

/// σ(x) = x + Σ_{k≥1} x^(2^k) · 2^(k−1) (Ertl 2017).
fn sigma(mut x: f64) -> f64 {
    if x >= 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if z == before {
            return z;
        }
    }
}

/// τ(x) = (1 − x − Σ_{k≥1} (1 − x^(2^−k))² · 2^−k) / 3 (Ertl 2017).
fn tau(mut x: f64) -> f64 {
    if x <= 0.0 || x >= 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == before {
            return z / 3.0;
        }
    }
}

fn add_register(registers: &mut [u8; HLL_REGISTERS], hash: u64) {
    let index = (hash >> (64 - HLL_BITS)) as usize;
    let rest = hash << HLL_BITS;
    // The position of the first 1 bit of the remaining 52 bits (53 when they are all 0).
    let rank = (rest.leading_zeros().min(64 - HLL_BITS) + 1) as u8;
    registers[index] = registers[index].max(rank);
}

/// How often each return shape (by hash) came back, for the dominant shape's share: every shape up to
/// [`ShapeCounts::LIMIT`], the calls of any further shapes in `other`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShapeCounts {
    counts: BTreeMap<String, u64>,
    other: u64,
}

impl ShapeCounts {
    /// Shapes a stored row tells apart; a bucket with more is heterogeneous whatever the others are.
    pub const LIMIT: usize = 16;

    pub fn insert(&mut self, hash: &str) {
        if let Some(count) = self.counts.get_mut(hash) {
            *count += 1;
        } else if self.counts.len() < Self::LIMIT {
            self.counts.insert(hash.to_owned(), 1);
        } else {
            self.other += 1;
        }
    }

    /// For an answer: counts of the same shape add up (no limit: the rows read are bounded).
    pub fn merge(&mut self, other: &ShapeCounts) {
        for (hash, n) in &other.counts {
            *self.counts.entry(hash.clone()).or_default() += n;
        }
        self.other += other.other;
    }

    /// Calls with any shape.
    pub fn total(&self) -> u64 {
        self.counts.values().sum::<u64>() + self.other
    }

    /// Calls with the most frequent shape told apart.
    pub fn dominant(&self) -> u64 {
        self.counts.values().copied().max().unwrap_or(0)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![1];
        varint(&mut out, self.other);
        varint(&mut out, self.counts.len() as u64);
        for (hash, n) in &self.counts {
            varint(&mut out, hash.len() as u64);
            out.extend_from_slice(hash.as_bytes());
            varint(&mut out, *n);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SketchError> {
        const WHAT: &str = "shape counts";
        let mut reader = Reader { bytes, what: WHAT };
        if reader.byte()? != 1 {
            return Err(bad(WHAT, "unknown version"));
        }
        let other = reader.varint()?;
        let n = reader.length(2)?;
        let mut counts = BTreeMap::new();
        for _ in 0..n {
            let len = reader.length(1)?;
            let hash =
                std::str::from_utf8(reader.take(len)?).map_err(|_| bad(WHAT, "hash is not text"))?.to_owned();
            *counts.entry(hash).or_default() += reader.varint()?;
        }
        reader.end()?;
        Ok(ShapeCounts { counts, other })
    }
}

pub(super) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Reads what the encoders above wrote; every length is checked against the bytes left.
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) what: &'static str,
}

impl Reader<'_> {
    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], SketchError> {
        if self.bytes.len() < n {
            return Err(bad(self.what, "ends early"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(super) fn byte(&mut self) -> Result<u8, SketchError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SketchError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub(super) fn varint(&mut self) -> Result<u64, SketchError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(bad(self.what, "number too long"))
    }

    /// A count of items, each at least `min_bytes` long: never more than the bytes left could hold.
    pub(super) fn length(&mut self, min_bytes: usize) -> Result<usize, SketchError> {
        let n = self.varint()?;
        if n > (self.bytes.len() / min_bytes.max(1)) as u64 {
            return Err(bad(self.what, "count beyond its bytes"));
        }
        Ok(n as usize)
    }

    pub(super) fn end(&self) -> Result<(), SketchError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(bad(self.what, "trailing bytes"))
        }
    }
}
