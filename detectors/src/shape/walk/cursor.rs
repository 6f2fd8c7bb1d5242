//! The byte cursor both walks read with: whitespace, strings (with their escapes and UTF-8 checks),
//! numbers and literals, one byte at a time; a `Copy` value, so the loops that pass over values keep it in
//! registers.

use super::{utf8, Invalid};

/// Where the walk is in the input, and the whitespace it passed: a value of its own, so that the loop that
/// passes over values keeps it in registers.
#[derive(Clone, Copy)]
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    pub(super) whitespace: usize,
    /// The bytes are not known to be UTF-8: strings holding non-ASCII bytes are checked.
    pub(super) check_utf8: bool,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub(super) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Passes over insignificant whitespace, counting it; runs of spaces (indentation) eight at a time.
    #[inline]
    pub(super) fn skip_whitespace(&mut self) {
        const SPACES: u64 = 0x2020_2020_2020_2020;
        let (bytes, start) = (self.bytes, self.pos);
        let mut pos = start;
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(pos) {
            pos += 1;
            while let Some(chunk) = bytes.get(pos..pos + 8) {
                let spaces = u64::from_le_bytes(chunk.try_into().unwrap_or_default()) ^ SPACES;
                if spaces != 0 {
                    pos += (spaces.trailing_zeros() / 8) as usize;
                    break;
                }
                pos += 8;
            }
        }
        self.pos = pos;
        self.whitespace += pos - start;
    }

    /// Reads `"key" :` of a value passed over.
    #[inline]
    pub(super) fn skip_key(&mut self) -> Result<(), Invalid> {
        if self.peek() != Some(b'"') {
            return Err(Invalid);
        }
        self.pos += 1;
        self.skip_string()?;
        self.colon()
    }

    #[inline]
    pub(super) fn colon(&mut self) -> Result<(), Invalid> {
        self.skip_whitespace();
        if self.peek() != Some(b':') {
            return Err(Invalid);
        }
        self.pos += 1;
        Ok(())
    }

    /// Validates a string body the shape does not keep.
    #[inline]
    pub(super) fn skip_string(&mut self) -> Result<(), Invalid> {
        if !self.check_utf8 {
            return self.skip_string_of::<false>();
        }
        self.skip_string_of::<true>()
    }

    /// [`Walker::skip_string`], checking UTF-8 when `CHECK` (bytes not known to be text).
    #[inline]
    pub(super) fn skip_string_of<const CHECK: bool>(&mut self) -> Result<(), Invalid> {
        let start = self.pos;
        let mut non_ascii = false;
        loop {
            non_ascii |= self.skip_plain_string_bytes::<CHECK>();
            match self.peek() {
                Some(b'"') => break,
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape()?;
                }
                _ => return Err(Invalid),
            }
        }
        // Escapes are ASCII, so checking the raw bytes checks every run between them.
        if CHECK && non_ascii {
            utf8(&self.bytes[start..self.pos])?;
        }
        self.pos += 1;
        Ok(())
    }

    /// Advances to the next `"`, `\` or control byte, eight bytes at a time where it can. Returns
    /// whether it passed a non-ASCII byte, when `NON_ASCII` (else false).
    #[inline]
    pub(super) fn skip_plain_string_bytes<const NON_ASCII: bool>(&mut self) -> bool {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let bytes = self.bytes;
        let mut pos = self.pos;
        let mut high_bits = 0u64;
        while let Some(chunk) = bytes.get(pos..pos + 8) {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            let quote = word ^ (ONES * u64::from(b'"'));
            let backslash = word ^ (ONES * u64::from(b'\\'));
            // `x - ONES & !x & HIGH` marks the zero bytes of `x` (exactly, up to the first one); on
            // `word` with 0x20 in place of ONES it marks the bytes below 0x20.
            let stops = ((quote.wrapping_sub(ONES) & !quote)
                | (backslash.wrapping_sub(ONES) & !backslash)
                | (word.wrapping_sub(ONES * 0x20) & !word))
                & HIGH;
            if stops != 0 {
                let offset = stops.trailing_zeros() / 8;
                self.pos = pos + offset as usize;
                if !NON_ASCII {
                    return false;
                }
                // Only the bytes before the stop were passed.
                let passed = if offset == 0 { 0 } else { word & (u64::MAX >> (64 - 8 * offset)) };
                return (high_bits | passed) & HIGH != 0;
            }
            if NON_ASCII {
                high_bits |= word;
            }
            pos += 8;
        }
        while let Some(&byte) = bytes.get(pos) {
            if byte == b'"' || byte == b'\\' || byte < 0x20 {
                break;
            }
            high_bits |= u64::from(byte);
            pos += 1;
        }
        self.pos = pos;
        NON_ASCII && high_bits & HIGH != 0
    }

    /// Reads an escape after its backslash.
    pub(super) fn escape(&mut self) -> Result<char, Invalid> {
        let byte = self.peek().ok_or(Invalid)?;
        self.pos += 1;
        Ok(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(Invalid);
                        }
                        self.pos += 2;
                        let low = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(Invalid);
                        }
                        let code = 0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                        char::from_u32(code).ok_or(Invalid)?
                    }
                    0xDC00..=0xDFFF => return Err(Invalid),
                    _ => char::from_u32(u32::from(unit)).ok_or(Invalid)?,
                }
            }
            _ => return Err(Invalid),
        })
    }

    pub(super) fn hex4(&mut self) -> Result<u16, Invalid> {
        let digits = self.bytes.get(self.pos..self.pos + 4).ok_or(Invalid)?;
        let mut value: u16 = 0;
        for &digit in digits {
            let nibble = (digit as char).to_digit(16).ok_or(Invalid)?;
            value = value << 4 | nibble as u16;
        }
        self.pos += 4;
        Ok(value)
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` — any magnitude is a number.
    #[inline]
    pub(super) fn number(&mut self) -> Result<(), Invalid> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Invalid),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.required_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        Ok(())
    }

    #[inline]
    pub(super) fn digits(&mut self) {
        let bytes = self.bytes;
        let mut pos = self.pos;
        while let Some(b'0'..=b'9') = bytes.get(pos) {
            pos += 1;
        }
        self.pos = pos;
    }

    #[inline]
    pub(super) fn required_digits(&mut self) -> Result<(), Invalid> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            Err(Invalid)
        } else {
            Ok(())
        }
    }

    #[inline]
    pub(super) fn expect(&mut self, word: &[u8]) -> Result<(), Invalid> {
        if self.bytes.get(self.pos..self.pos + word.len()) != Some(word) {
            return Err(Invalid);
        }
        self.pos += word.len();
        Ok(())
    }
}
