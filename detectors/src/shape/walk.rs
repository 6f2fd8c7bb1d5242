//! One pass over JSON text: validation, compact size, depth, and the shape of what the shape keeps.

use std::borrow::Cow;

use super::{escape_key_into, DEPTH_LIMIT, TRUNCATED_SENTINEL};

/// The input is not JSON.
#[derive(Debug)]
pub struct Invalid;

pub struct Walked {
    /// `None` when the input nests deeper than [`DEPTH_LIMIT`].
    pub shape: Option<String>,
    pub compact_bytes: u64,
    pub is_truncated_sentinel: bool,
}

/// Walks JSON bytes. UTF-8 is checked where it matters: inside strings (anywhere else a non-ASCII byte is
/// a syntax error), and only for strings that hold non-ASCII bytes.
pub fn walk(json: &[u8]) -> Result<Walked, Invalid> {
    walk_text(json, None)
}

/// [`walk`] over text already known to be UTF-8: nothing is checked again, and the strings the shape keeps
/// (keys) are sliced from it.
pub fn walk_str(json: &str) -> Result<Walked, Invalid> {
    walk_text(json.as_bytes(), Some(json))
}

fn walk_text<'a>(json: &'a [u8], text: Option<&'a str>) -> Result<Walked, Invalid> {
    let mut walker = Walker {
        bytes: json,
        text,
        spare_entries: Vec::new(),
        pos: 0,
        whitespace: 0,
        containers: Vec::with_capacity(16),
        frames: Vec::with_capacity(16),
        too_deep: false,
        result: None,
    };
    walker.run::<true>()?;
    let compact_bytes = (json.len() - walker.whitespace) as u64;
    if walker.too_deep {
        return Ok(Walked { shape: None, compact_bytes, is_truncated_sentinel: false });
    }
    let result = walker.result.ok_or(Invalid)?;
    let is_truncated_sentinel = result.string_value.as_deref() == Some(TRUNCATED_SENTINEL);
    Ok(Walked { shape: Some(result.text.into_owned()), compact_bytes, is_truncated_sentinel })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Array,
    Object,
}

/// The shape of one value, as its parent receives it.
struct Shaped<'a> {
    text: Cow<'static, str>,
    /// The decoded string, kept only where the shape needs it: a top-level string (the truncation
    /// sentinel) and the values of `__type__` and `class` (typed sentinels).
    string_value: Option<Cow<'a, str>>,
}

impl Shaped<'_> {
    fn atom(text: &'static str) -> Self {
        Shaped { text: Cow::Borrowed(text), string_value: None }
    }
}

/// A container whose shape is being built.
enum Frame<'a> {
    Array { first: Option<Cow<'static, str>> },
    Object { entries: Vec<(Cow<'a, str>, Shaped<'a>)>, pending_key: Option<Cow<'a, str>> },
}

struct Walker<'a> {
    bytes: &'a [u8],
    /// The same bytes as text, when the caller has them so: strings the shape keeps are sliced from it, and
    /// no UTF-8 is checked. Without it, every string holding non-ASCII bytes is checked.
    text: Option<&'a str>,
    /// Entry lists of closed objects, emptied, for the next object to fill (one allocation per depth, not
    /// per object).
    spare_entries: Vec<Vec<(Cow<'a, str>, Shaped<'a>)>>,
    pos: usize,
    whitespace: usize,
    /// Every open container, for validation and depth.
    containers: Vec<Container>,
    /// The open containers whose shape is being built (a prefix of `containers`).
    frames: Vec<Frame<'a>>,
    too_deep: bool,
    result: Option<Shaped<'a>>,
}

impl<'a> Walker<'a> {
    /// Reads one value (and, at the top, checks that nothing follows it). `BUILD` walks with the shape
    /// being built; a value the shape ignores is read by the `BUILD = false` copy of this loop, which
    /// only validates and counts.
    fn run<const BUILD: bool>(&mut self) -> Result<(), Invalid> {
        let base = self.containers.len();
        loop {
            // A value starts here.
            self.skip_whitespace();
            let byte = self.peek().ok_or(Invalid)?;
            if BUILD && !self.wants_value() {
                self.run::<false>()?;
            } else {
                match byte {
                    b'{' | b'[' => {
                        self.pos += 1;
                        let container = if byte == b'{' { Container::Object } else { Container::Array };
                        self.open::<BUILD>(container);
                        self.skip_whitespace();
                        let closing = if container == Container::Object { b'}' } else { b']' };
                        if self.peek() == Some(closing) {
                            self.pos += 1;
                            self.close::<BUILD>();
                        } else {
                            if container == Container::Object {
                                self.key::<BUILD>()?;
                            }
                            continue;
                        }
                    }
                    b'"' => {
                        self.pos += 1;
                        let keep = BUILD && self.keeps_string_value();
                        let value = self.string(keep)?;
                        if BUILD {
                            self.deliver(Shaped { text: Cow::Borrowed("string"), string_value: value });
                        }
                    }
                    b'-' | b'0'..=b'9' => {
                        self.number()?;
                        if BUILD {
                            self.deliver(Shaped::atom("number"));
                        }
                    }
                    b't' => self.literal::<BUILD>(b"true", "bool")?,
                    b'f' => self.literal::<BUILD>(b"false", "bool")?,
                    b'n' => self.literal::<BUILD>(b"null", "null")?,
                    _ => return Err(Invalid),
                }
            }
            // A value ended: close containers until one continues, or this walk's value is complete.
            loop {
                self.skip_whitespace();
                if self.containers.len() == base {
                    return if base > 0 || self.pos == self.bytes.len() { Ok(()) } else { Err(Invalid) };
                }
                let container = self.containers[self.containers.len() - 1];
                let closing = if container == Container::Object { b'}' } else { b']' };
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if container == Container::Object {
                            self.skip_whitespace();
                            self.key::<BUILD>()?;
                        }
                        break;
                    }
                    Some(byte) if byte == closing => {
                        self.pos += 1;
                        self.close::<BUILD>();
                    }
                    _ => return Err(Invalid),
                }
            }
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        let (bytes, start) = (self.bytes, self.pos);
        let mut pos = start;
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(pos) {
            pos += 1;
        }
        self.pos = pos;
        self.whitespace += pos - start;
    }

    /// Whether the value starting now is part of the shape.
    fn wants_value(&self) -> bool {
        if self.too_deep {
            return false;
        }
        match self.frames.last() {
            None => self.containers.is_empty(),
            Some(Frame::Array { first }) => first.is_none(),
            Some(Frame::Object { .. }) => true,
        }
    }

    fn keeps_string_value(&self) -> bool {
        match self.frames.last() {
            None => true,
            Some(Frame::Object { pending_key: Some(key), .. }) => key == "__type__" || key == "class",
            Some(_) => false,
        }
    }

    fn open<const BUILD: bool>(&mut self, container: Container) {
        self.containers.push(container);
        if self.containers.len() > DEPTH_LIMIT {
            self.too_deep = true;
        } else if BUILD && !self.too_deep {
            self.frames.push(match container {
                Container::Array => Frame::Array { first: None },
                Container::Object => {
                    Frame::Object { entries: self.spare_entries.pop().unwrap_or_default(), pending_key: None }
                }
            });
        }
    }

    fn close<const BUILD: bool>(&mut self) {
        self.containers.pop();
        if !BUILD || self.too_deep {
            return;
        }
        let shaped = match self.frames.pop() {
            Some(Frame::Array { first }) => array_shape(first),
            Some(Frame::Object { mut entries, .. }) => {
                let shaped = object_shape(&mut entries);
                entries.clear();
                self.spare_entries.push(entries);
                shaped
            }
            None => return,
        };
        self.deliver(shaped);
    }

    fn deliver(&mut self, shaped: Shaped<'a>) {
        match self.frames.last_mut() {
            None => self.result = Some(shaped),
            Some(Frame::Array { first }) => *first = Some(shaped.text),
            Some(Frame::Object { entries, pending_key }) => {
                let key = pending_key.take().unwrap_or_default();
                entries.push((key, shaped));
            }
        }
    }

    /// Reads `"key" :`, keeping the key when the object is being built.
    fn key<const BUILD: bool>(&mut self) -> Result<(), Invalid> {
        if self.peek() != Some(b'"') {
            return Err(Invalid);
        }
        self.pos += 1;
        let building = BUILD && !self.too_deep;
        let key = self.string(building)?;
        if let (true, Some(Frame::Object { pending_key, .. })) = (building, self.frames.last_mut()) {
            *pending_key = key;
        }
        self.skip_whitespace();
        if self.peek() != Some(b':') {
            return Err(Invalid);
        }
        self.pos += 1;
        Ok(())
    }

    /// Reads a string body after its opening quote; decodes it only when `keep`.
    fn string(&mut self, keep: bool) -> Result<Option<Cow<'a, str>>, Invalid> {
        if !keep {
            self.skip_string()?;
            return Ok(None);
        }
        let start = self.pos;
        let mut decoded: Option<String> = None;
        loop {
            let run_start = self.pos;
            self.skip_plain_string_bytes();
            let byte = self.peek().ok_or(Invalid)?;
            if let Some(out) = decoded.as_mut() {
                out.push_str(self.str_at(run_start, self.pos)?);
            }
            match byte {
                b'"' => {
                    let end = self.pos;
                    self.pos += 1;
                    return Ok(Some(match decoded {
                        Some(out) => Cow::Owned(out),
                        None => Cow::Borrowed(self.str_at(start, end)?),
                    }));
                }
                b'\\' => {
                    if decoded.is_none() {
                        decoded = Some(self.str_at(start, self.pos)?.to_owned());
                    }
                    self.pos += 1;
                    let c = self.escape()?;
                    if let Some(out) = decoded.as_mut() {
                        out.push(c);
                    }
                }
                _ => return Err(Invalid),
            }
        }
    }

    /// The bytes `start..end` of a string body as text: sliced from the text when the walk has it (both
    /// ends sit next to ASCII, so on character boundaries), checked otherwise.
    #[inline]
    fn str_at(&self, start: usize, end: usize) -> Result<&'a str, Invalid> {
        match self.text {
            Some(text) => text.get(start..end).ok_or(Invalid),
            None => utf8(&self.bytes[start..end]),
        }
    }

    /// Validates a string body the shape does not keep.
    fn skip_string(&mut self) -> Result<(), Invalid> {
        let start = self.pos;
        let mut non_ascii = false;
        loop {
            non_ascii |= self.skip_plain_string_bytes();
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
        if non_ascii && self.text.is_none() {
            utf8(&self.bytes[start..self.pos])?;
        }
        self.pos += 1;
        Ok(())
    }

    /// Advances to the next `"`, `\` or control byte, eight bytes at a time where it can. Returns
    /// whether it passed a non-ASCII byte.
    #[inline]
    fn skip_plain_string_bytes(&mut self) -> bool {
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
                // Only the bytes before the stop were passed.
                let passed = if offset == 0 { 0 } else { word & (u64::MAX >> (64 - 8 * offset)) };
                self.pos = pos + offset as usize;
                return (high_bits | passed) & HIGH != 0;
            }
            high_bits |= word;
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
        high_bits & HIGH != 0
    }

    /// Reads an escape after its backslash.
    fn escape(&mut self) -> Result<char, Invalid> {
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

    fn hex4(&mut self) -> Result<u16, Invalid> {
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
    fn number(&mut self) -> Result<(), Invalid> {
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

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), Invalid> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            Err(Invalid)
        } else {
            Ok(())
        }
    }

    fn literal<const BUILD: bool>(&mut self, word: &[u8], shape: &'static str) -> Result<(), Invalid> {
        if self.bytes.get(self.pos..self.pos + word.len()) != Some(word) {
            return Err(Invalid);
        }
        self.pos += word.len();
        if BUILD {
            self.deliver(Shaped::atom(shape));
        }
        Ok(())
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, Invalid> {
    std::str::from_utf8(bytes).map_err(|_| Invalid)
}

fn array_shape(first: Option<Cow<'static, str>>) -> Shaped<'static> {
    let text = match first {
        None => Cow::Borrowed("[]"),
        Some(element) => {
            let mut text = String::with_capacity(element.len() + 2);
            text.push('[');
            text.push_str(&element);
            text.push(']');
            Cow::Owned(text)
        }
    };
    Shaped { text, string_value: None }
}

fn object_shape<'a>(entries: &mut Vec<(Cow<'a, str>, Shaped<'a>)>) -> Shaped<'a> {
    // Stable sort, then keep the last of each run of equal keys: duplicate keys, the last wins (`dedup_by`
    // keeps the first of a run, so the later entry is swapped into its place before it is dropped).
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
    let unique = &*entries;
    let string_of = |name: &str| {
        unique.iter().find(|(key, _)| key == name).and_then(|(_, shaped)| shaped.string_value.as_deref())
    };
    if let Some(type_name) = string_of("__type__") {
        let mut text = String::from("<typed:");
        escape_key_into(&mut text, type_name);
        if let Some(class) = string_of("class") {
            text.push(':');
            escape_key_into(&mut text, class);
        }
        text.push('>');
        return Shaped { text: Cow::Owned(text), string_value: None };
    }
    let mut text =
        String::with_capacity(2 + unique.iter().map(|(k, s)| k.len() + s.text.len() + 2).sum::<usize>());
    text.push('{');
    for (index, (key, shaped)) in unique.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        escape_key_into(&mut text, key);
        text.push(':');
        text.push_str(&shaped.text);
    }
    text.push('}');
    Shaped { text: Cow::Owned(text), string_value: None }
}
