//! The tokens of JSON text, found 64 bytes at a time with AVX2 (simdjson's first stage, run a chunk of
//! blocks at a time as the walk asks for tokens): the structural characters outside strings, every
//! string's opening quote, every escaping backslash inside a string, and the first byte of every run of
//! other bytes outside strings (numbers, literals, and anything that is not JSON). A string's closing
//! quote is no token: whatever token follows its opening quote (other than its escapes) lies outside it.
//! The walk jumps from token to token instead of reading every byte; whitespace is counted per block.
//!
//! A token is only a position: the walk reads the byte there and refuses what JSON does not allow, so a
//! byte classified as a token by mistake (0x0C and 0x1A read as `,` and `:` by the table lookup) is
//! refused as what it is.

use std::arch::x86_64::{
    __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8, _mm256_or_si256,
    _mm256_set1_epi8, _mm256_setr_epi8, _mm256_shuffle_epi8,
};

/// Bit `i` of each mask is byte `i` of a 64-byte block.
struct Masks {
    quote: u64,
    backslash: u64,
    whitespace: u64,
    structural: u64,
    control: u64,
}

/// Blocks classified at a time: their token masks wait in an array on the stack (a tight loop over
/// blocks runs faster than one block between every few tokens).
const CHUNK: usize = 32;

pub(super) struct Tokens<'a> {
    bytes: &'a [u8],
    /// Where the block whose tokens `bits` holds starts.
    base: usize,
    bits: u64,
    /// The token masks of the blocks classified last, from `chunk_start`; `taken` of `filled` read.
    masks: [u64; CHUNK],
    filled: usize,
    taken: usize,
    chunk_start: usize,
    /// Where the next block to classify starts.
    next: usize,
    /// All ones when the next block starts inside a string.
    in_string: u64,
    /// The next block's first byte is escaped (a block ended on an escaping backslash).
    escaped_next: u64,
    /// The last byte classified was part of a run of other bytes.
    scalar_before: u64,
    /// Insignificant whitespace in the blocks classified so far.
    pub whitespace: usize,
    /// A control character inside a string, or a backslash outside one, was seen.
    malformed: bool,
}

impl<'a> Tokens<'a> {
    /// `None` when the CPU has no AVX2 (or no POPCNT; the walk then reads byte by byte).
    pub fn new(bytes: &'a [u8]) -> Option<Self> {
        if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")) {
            return None;
        }
        Some(Tokens {
            bytes,
            base: 0,
            bits: 0,
            masks: [0; CHUNK],
            filled: 0,
            taken: 0,
            chunk_start: 0,
            next: 0,
            in_string: 0,
            escaped_next: 0,
            scalar_before: 0,
            whitespace: 0,
            malformed: false,
        })
    }

    /// The position of the next token, left to be taken.
    #[inline(always)]
    pub fn peek(&mut self) -> Option<usize> {
        while self.bits == 0 {
            if self.taken == self.filled {
                if self.next >= self.bytes.len() {
                    return None;
                }
                // Safety: `Tokens::new` checked that the CPU has AVX2 and POPCNT.
                unsafe { self.classify_chunk() };
            }
            self.bits = self.masks[self.taken];
            self.base = self.chunk_start + 64 * self.taken;
            self.taken += 1;
        }
        Some(self.base + self.bits.trailing_zeros() as usize)
    }

    /// Takes the token [`Tokens::peek`] returned.
    #[inline(always)]
    pub fn skip(&mut self) {
        self.bits &= self.bits.wrapping_sub(1);
    }

    /// The position of the next token, taken.
    #[inline(always)]
    pub fn next(&mut self) -> Option<usize> {
        let at = self.peek()?;
        self.skip();
        Some(at)
    }

    /// Whether the text was well-formed where only the blocks see it: no control character inside a
    /// string, no backslash outside one, and no string left open. Read once every token was taken.
    pub fn complete(&self) -> bool {
        !self.malformed && self.in_string == 0
    }

    /// Classifies up to [`CHUNK`] blocks from `next`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and POPCNT.
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn classify_chunk(&mut self) {
        self.chunk_start = self.next;
        self.filled = 0;
        self.taken = 0;
        let bytes = self.bytes;
        while self.filled < CHUNK {
            let Some(block) = bytes.get(self.next..).and_then(<[u8]>::first_chunk::<64>) else { break };
            // Safety: the caller's.
            let masks = unsafe { classify(block) };
            self.masks[self.filled] = self.tokens_of(&masks, 0);
            self.filled += 1;
            self.next += 64;
        }
        if self.filled < CHUNK && self.next < bytes.len() {
            // Safety: the caller's.
            self.masks[self.filled] = unsafe { self.last_block() };
            self.filled += 1;
            self.next += 64;
        }
    }

    /// The last, partial block, padded with spaces (whitespace that is not counted).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline(never)]
    unsafe fn last_block(&mut self) -> u64 {
        let rest = &self.bytes[self.next..];
        let mut block = [b' '; 64];
        block[..rest.len()].copy_from_slice(rest);
        // Safety: the caller's.
        let masks = unsafe { classify(&block) };
        self.tokens_of(&masks, u64::MAX << rest.len())
    }

    /// One block's tokens from its masks, carrying what crosses into the next block.
    #[inline]
    fn tokens_of(&mut self, masks: &Masks, padding: u64) -> u64 {
        let (escaped, escaping) = self.escapes(masks.backslash);
        let quotes = masks.quote & !escaped;
        let in_string = prefix_xor(quotes) ^ self.in_string;
        self.in_string = ((in_string as i64) >> 63) as u64;
        let outside = !in_string;
        self.malformed |= (masks.control & in_string) | (masks.backslash & outside) != 0;
        self.whitespace += (masks.whitespace & outside & !padding).count_ones() as usize;
        let other = !(masks.whitespace | masks.structural | masks.quote) & outside;
        let run_starts = other & !((other << 1) | self.scalar_before);
        self.scalar_before = other >> 63;
        (masks.structural & outside) | ((quotes | escaping) & in_string) | run_starts
    }

    /// The bytes an escaping backslash precedes (the first backslash of `\\\\` escapes the second, which
    /// escapes nothing), and the escaping backslashes: simdjson's escape scanner, without a branch per
    /// backslash.
    #[inline]
    fn escapes(&mut self, backslash: u64) -> (u64, u64) {
        const ODD_BITS: u64 = 0xAAAA_AAAA_AAAA_AAAA;
        if backslash == 0 {
            let escaped = self.escaped_next;
            self.escaped_next = 0;
            return (escaped, 0);
        }
        let potential = backslash & !self.escaped_next;
        // Runs of backslashes: the subtraction carries through each run; which bits come out set depends
        // on whether the run started on an odd or an even bit.
        let codes = (((potential << 1) | ODD_BITS).wrapping_sub(potential)) ^ ODD_BITS;
        let escaped = codes ^ (backslash | self.escaped_next);
        let escaping = codes & backslash;
        self.escaped_next = escaping >> 63;
        (escaped, escaping)
    }
}

/// Bit `i` set when an odd number of bits `0..=i` are set: between an opening quote (included) and its
/// closing quote (not included).
#[inline]
fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn classify(block: &[u8; 64]) -> Masks {
    // Safety (of the loads): the block holds 64 bytes; each unaligned load reads 32 of them.
    let (low, high) = unsafe {
        (_mm256_loadu_si256(block.as_ptr().cast()), _mm256_loadu_si256(block.as_ptr().add(32).cast()))
    };
    // Looked up by the low four bits (bytes of 0x80 and above look up zero): a byte is whitespace when
    // the table holds it at its low four bits.
    let whitespace_table = _mm256_setr_epi8(
        0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0x09, 0x0A, 0, 0, 0x0D, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0x09, 0x0A,
        0, 0, 0x0D, 0, 0,
    );
    // `[` and `]` are `{` and `}` without bit 0x20: the byte with that bit set is looked up.
    let structural_table = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3A, 0x7B, 0x2C, 0x7D, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3A, 0x7B,
        0x2C, 0x7D, 0, 0,
    );
    let (quote, backslash, bit_20, below_20) = (
        _mm256_set1_epi8(b'"' as i8),
        _mm256_set1_epi8(b'\\' as i8),
        _mm256_set1_epi8(0x20),
        _mm256_set1_epi8(0x1F),
    );
    // One mask from the two halves' comparisons.
    macro_rules! mask {
        (|$v:ident| $compare:expr) => {{
            let bits_of = |$v: __m256i| _mm256_movemask_epi8($compare) as u32 as u64;
            bits_of(low) | bits_of(high) << 32
        }};
    }
    Masks {
        quote: mask!(|v| _mm256_cmpeq_epi8(v, quote)),
        backslash: mask!(|v| _mm256_cmpeq_epi8(v, backslash)),
        whitespace: mask!(|v| _mm256_cmpeq_epi8(_mm256_shuffle_epi8(whitespace_table, v), v)),
        structural: mask!(|v| {
            let folded = _mm256_or_si256(v, bit_20);
            _mm256_cmpeq_epi8(_mm256_shuffle_epi8(structural_table, folded), folded)
        }),
        control: mask!(|v| _mm256_cmpeq_epi8(_mm256_min_epu8(v, below_20), v)),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The escapes the slow way: one backslash at a time, in order.
    fn escapes_one_by_one(backslash: u64, escaped_first: u64) -> (u64, u64, u64) {
        let (mut escaped, mut escaping, mut next) = (escaped_first, 0u64, 0u64);
        for at in 0..64 {
            if backslash >> at & 1 == 0 || escaped >> at & 1 == 1 {
                continue;
            }
            escaping |= 1 << at;
            if at == 63 {
                next = 1;
            } else {
                escaped |= 1 << (at + 1);
            }
        }
        (escaped, escaping, next)
    }

    fn tokens() -> Option<Tokens<'static>> {
        Tokens::new(b"")
    }

    proptest! {
        #[test]
        fn escapes_are_found_as_one_at_a_time(
            runs in prop::collection::vec((0u32..6, 0u32..4), 0..20),
            escaped_first in 0u64..2,
        ) {
            // Runs of backslashes apart by other bytes.
            let (mut backslash, mut at) = (0u64, 0u32);
            for (run, gap) in runs {
                for _ in 0..run {
                    if at < 64 { backslash |= 1 << at; }
                    at += 1;
                }
                at += gap;
            }
            let Some(mut tokens) = tokens() else { return Ok(()) };
            tokens.escaped_next = escaped_first;
            let (escaped, escaping) = tokens.escapes(backslash);
            let (want_escaped, want_escaping, want_next) = escapes_one_by_one(backslash, escaped_first);
            // Only the escaped bytes that are not themselves backslashes matter outside the run, but the
            // scanner is exact on both.
            prop_assert_eq!(escaping, want_escaping);
            prop_assert_eq!(escaped, want_escaped);
            prop_assert_eq!(tokens.escaped_next, want_next);
        }
    }
}
