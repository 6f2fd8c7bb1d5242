//! One pass over JSON text: validation, compact size, depth, and the shape of what the shape keeps.
//!
//! The shape is written into one buffer as the walk goes: an array's shape is `[`, its first element's
//! shape in place, `]`; an object's members are written as they come (`{key:shape,…`) and, only when their
//! keys did not come in order (or it may be a typed sentinel), rewritten once behind them in key order and
//! moved back. Everything the shape ignores (an array's elements after the first) is passed over by a tighter
//! loop that only validates and counts. A walk allocates the shape buffer, a frame and an entry list; keys
//! are ranges of the input unless they hold escapes (then of one buffer of decoded strings).
//!
//! Two walks share the grammar and every step that builds the shape: on x86-64 with AVX2 the walk goes from
//! token to token (`run_tokens`, tokens from `tokens.rs`, whitespace and strings checked a block at a time);
//! elsewhere it reads byte by byte (`run`), the reference the tests and the fuzz target hold the other to.

#[cfg(target_arch = "x86_64")]
mod by_tokens;
mod cursor;

use super::{DEPTH_LIMIT, TRUNCATED_SENTINEL};
use cursor::Cursor;

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

/// The tokens of text known to be UTF-8, where the CPU can find them a block at a time (x86-64 with
/// AVX2). Bytes not known to be UTF-8 are checked first: anything but UTF-8 is not JSON.
#[cfg(target_arch = "x86_64")]
fn tokens_of<'a>(json: &'a [u8], text: Option<&'a str>) -> Option<super::tokens::Tokens<'a>> {
    if text.is_none() && std::str::from_utf8(json).is_err() {
        return None; // read byte by byte, which refuses it where it is
    }
    super::tokens::Tokens::new(json)
}

#[cfg(not(target_arch = "x86_64"))]
fn tokens_of<'a>(_: &'a [u8], _: Option<&'a str>) -> Option<std::convert::Infallible> {
    None
}

/// [`walk`] byte by byte, whatever the CPU: the tests hold the token walk to it.
pub fn walk_bytewise(json: &[u8]) -> Result<Walked, Invalid> {
    walk_with(json, None, false)
}

fn walk_text<'a>(json: &'a [u8], text: Option<&'a str>) -> Result<Walked, Invalid> {
    walk_with(json, text, true)
}

fn walk_with<'a>(json: &'a [u8], text: Option<&'a str>, by_tokens: bool) -> Result<Walked, Invalid> {
    let mut walker = Walker {
        cur: Cursor { bytes: json, pos: 0, whitespace: 0, check_utf8: text.is_none() },
        text,
        out: Vec::with_capacity(512),
        frames: Vec::with_capacity(8),
        entries: Vec::with_capacity(16),
        decoded: String::new(),
        building: true,
        too_deep: false,
        top_string: None,
    };
    let whitespace = match tokens_of(json, text).filter(|_| by_tokens) {
        Some(mut tokens) => {
            walker.run_tokens(&mut tokens)?;
            if !tokens.complete() {
                return Err(Invalid);
            }
            tokens.whitespace
        }
        None => {
            walker.run()?;
            walker.cur.whitespace
        }
    };
    let compact_bytes = (json.len() - whitespace) as u64;
    if walker.too_deep {
        return Ok(Walked { shape: None, compact_bytes, is_truncated_sentinel: false });
    }
    let is_truncated_sentinel =
        walker.top_string.is_some_and(|text| walker.bytes_of(text) == TRUNCATED_SENTINEL.as_bytes());
    // Everything written is ASCII structure, atoms' names and keys taken from valid UTF-8.
    let shape = String::from_utf8(walker.out).map_err(|_| Invalid)?;
    Ok(Walked { shape: Some(shape), compact_bytes, is_truncated_sentinel })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Array,
    Object,
}

/// A decoded string the shape keeps: a range of the input (a string without escapes) or of the decoded
/// strings' buffer.
#[derive(Clone, Copy)]
struct Text {
    start: usize,
    end: usize,
    decoded: bool,
}

/// An open container of the part being built (past [`DEPTH_LIMIT`], only its kind matters).
struct Frame {
    kind: Container,
    /// Where its shape starts in the buffer.
    start: usize,
    /// Its members in the entry list (objects).
    entries_start: usize,
    /// The key whose value is being read (objects).
    key: Option<Text>,
    /// A member `__type__` holds a string: the object may be a typed sentinel.
    typed: bool,
    /// Its members so far came in key order, each key after the one before: the shape written as they came
    /// is the object's (most objects), and nothing is rewritten when it closes.
    in_order: bool,
}

/// A member of an object being built: its key and where its value's shape sits in the buffer.
#[derive(Clone, Copy)]
struct Entry {
    key: Text,
    /// The key's first eight bytes, big-endian, zero-padded: most keys sort by this alone.
    prefix: u64,
    shape: (usize, usize),
    /// The decoded string value, kept only for `__type__` and `class` (typed sentinels).
    string: Option<Text>,
}

struct Walker<'a> {
    cur: Cursor<'a>,
    /// The same bytes as text, when the caller has them so: strings the shape keeps are sliced from it, and
    /// no UTF-8 is checked. Without it, every string holding non-ASCII bytes is checked.
    text: Option<&'a str>,
    /// The shape written so far.
    out: Vec<u8>,
    frames: Vec<Frame>,
    entries: Vec<Entry>,
    /// Kept strings that held escapes, decoded.
    decoded: String,
    /// False once the input nests too deep: the rest is only validated.
    building: bool,
    too_deep: bool,
    /// A top-level string, decoded (the truncation sentinel).
    top_string: Option<Text>,
}

/// The kinds of the containers open inside one passed-over value: the first 64 in bits, deeper ones in a
/// list (only inputs nested that deep pay for it).
struct Kinds {
    depth: usize,
    bits: u64,
    deeper: Vec<Container>,
}

impl Kinds {
    fn new() -> Self {
        Kinds { depth: 0, bits: 0, deeper: Vec::new() }
    }

    #[inline]
    fn push(&mut self, kind: Container) {
        if self.depth < 64 {
            let bit = 1u64 << self.depth;
            self.bits = if kind == Container::Object { self.bits | bit } else { self.bits & !bit };
        } else {
            self.deeper.push(kind);
        }
        self.depth += 1;
    }

    #[inline]
    fn top(&self) -> Option<Container> {
        let top = self.depth.checked_sub(1)?;
        if top < 64 {
            Some(if self.bits >> top & 1 == 1 { Container::Object } else { Container::Array })
        } else {
            self.deeper.last().copied()
        }
    }

    #[inline]
    fn pop(&mut self) {
        if self.depth > 64 {
            self.deeper.pop();
        }
        self.depth = self.depth.saturating_sub(1);
    }
}

impl<'a> Walker<'a> {
    /// Reads the one value of the input (building its shape) and checks that nothing follows it.
    fn run(&mut self) -> Result<(), Invalid> {
        'value: loop {
            // A value starts here.
            self.cur.skip_whitespace();
            let start = self.out.len();
            match self.cur.peek().ok_or(Invalid)? {
                b'{' => {
                    self.cur.pos += 1;
                    self.open(Container::Object);
                    self.cur.skip_whitespace();
                    if self.cur.peek() == Some(b'}') {
                        self.cur.pos += 1;
                        self.close_object();
                    } else {
                        self.key()?;
                        continue 'value;
                    }
                }
                b'[' => {
                    self.cur.pos += 1;
                    self.open(Container::Array);
                    self.cur.skip_whitespace();
                    if self.cur.peek() == Some(b']') {
                        self.cur.pos += 1;
                        self.close_array();
                    } else {
                        continue 'value;
                    }
                }
                b'"' => {
                    self.cur.pos += 1;
                    let value = self.string(self.building && self.keeps_string_value())?;
                    self.atom(b"string");
                    self.deliver(start, value);
                }
                b'-' | b'0'..=b'9' => {
                    self.cur.number()?;
                    self.atom(b"number");
                    self.deliver(start, None);
                }
                b't' => self.literal(b"true", b"bool", start)?,
                b'f' => self.literal(b"false", b"bool", start)?,
                b'n' => self.literal(b"null", b"null", start)?,
                _ => return Err(Invalid),
            }
            // A value ended: close containers until one continues, or the input's value is complete.
            loop {
                self.cur.skip_whitespace();
                let Some(kind) = self.frames.last().map(|f| f.kind) else {
                    return if self.cur.pos == self.cur.bytes.len() { Ok(()) } else { Err(Invalid) };
                };
                match (self.cur.peek(), kind) {
                    (Some(b','), Container::Object) => {
                        self.cur.pos += 1;
                        self.cur.skip_whitespace();
                        self.key()?;
                        continue 'value;
                    }
                    (Some(b','), Container::Array) => {
                        // The shape holds an array's first element only: the rest is passed over.
                        self.cur.pos += 1;
                        loop {
                            self.skip_value()?;
                            self.cur.skip_whitespace();
                            match self.cur.peek() {
                                Some(b',') => self.cur.pos += 1,
                                Some(b']') => break,
                                _ => return Err(Invalid),
                            }
                        }
                        self.cur.pos += 1;
                        self.close_array();
                    }
                    (Some(b'}'), Container::Object) => {
                        self.cur.pos += 1;
                        self.close_object();
                    }
                    (Some(b']'), Container::Array) => {
                        self.cur.pos += 1;
                        self.close_array();
                    }
                    _ => return Err(Invalid),
                }
            }
        }
    }

    /// Passes over one whole value: validates it, counts its whitespace and nesting, builds nothing.
    fn skip_value(&mut self) -> Result<(), Invalid> {
        let mut cursor = self.cur;
        let passed = pass_value(&mut cursor, self.frames.len());
        self.cur = cursor;
        if passed? {
            self.too_deep = true;
            self.building = false;
        }
        Ok(())
    }

    fn keeps_string_value(&self) -> bool {
        match self.frames.last() {
            None => true,
            Some(Frame { key: Some(key), .. }) => matches!(self.bytes_of(*key), b"__type__" | b"class"),
            Some(_) => false,
        }
    }

    #[inline]
    fn bytes_of(&self, text: Text) -> &[u8] {
        text_bytes(self.cur.bytes, &self.decoded, text)
    }

    fn open(&mut self, kind: Container) {
        if self.frames.len() >= DEPTH_LIMIT {
            self.too_deep = true;
            self.building = false;
        }
        let start = self.out.len();
        if self.building {
            self.out.push(if kind == Container::Array { b'[' } else { b'{' });
        }
        let entries_start = self.entries.len();
        self.frames.push(Frame { kind, start, entries_start, key: None, typed: false, in_order: true });
    }

    fn close_array(&mut self) {
        let Some(frame) = self.frames.pop() else { return };
        if self.building {
            self.out.push(b']');
            self.deliver(frame.start, None);
        }
    }

    fn close_object(&mut self) {
        let Some(frame) = self.frames.pop() else { return };
        if !self.building {
            return;
        }
        if frame.in_order && !frame.typed {
            self.out.push(b'}');
            self.entries.truncate(frame.entries_start);
            self.deliver(frame.start, None);
            return;
        }
        let end = self.out.len();
        let (bytes, decoded, out) = (self.cur.bytes, self.decoded.as_str(), &mut self.out);
        let of = |text: Text| text_bytes(bytes, decoded, text);
        let order = |a: &Entry, b: &Entry| a.prefix.cmp(&b.prefix).then_with(|| of(a.key).cmp(of(b.key)));
        let members = &mut self.entries[frame.entries_start..];
        // Stable, so that of equal keys the last one read stays last: duplicate keys, the last wins.
        members.sort_by(order);
        let members = &*members;
        let kept =
            |index: usize| members.get(index + 1).is_none_or(|next| order(next, &members[index]).is_ne());
        let string_of = |name: &[u8]| {
            (0..members.len())
                .filter(|&i| kept(i) && of(members[i].key) == name)
                .find_map(|i| members[i].string)
        };
        // The object's shape is written behind its members' shapes, then moved to where it starts.
        out.reserve(
            end - frame.start + members.iter().map(|m| m.key.end - m.key.start + 2).sum::<usize>() + 2,
        );
        match frame.typed.then(|| string_of(b"__type__")).flatten() {
            Some(type_name) => {
                out.extend_from_slice(b"<typed:");
                escape_key_into(out, of(type_name));
                if let Some(class) = string_of(b"class") {
                    out.push(b':');
                    escape_key_into(out, of(class));
                }
                out.push(b'>');
            }
            None => {
                out.push(b'{');
                for member in (0..members.len()).filter(|&i| kept(i)).map(|i| members[i]) {
                    if out.len() > end + 1 {
                        out.push(b',');
                    }
                    escape_key_into(out, of(member.key));
                    out.push(b':');
                    append_within(out, member.shape.0, member.shape.1);
                }
                out.push(b'}');
            }
        }
        out.copy_within(end.., frame.start);
        out.truncate(frame.start + (out.len() - end));
        self.entries.truncate(frame.entries_start);
        self.deliver(frame.start, None);
    }

    fn atom(&mut self, name: &[u8]) {
        if self.building {
            append(&mut self.out, name);
        }
    }

    /// A value whose shape starts at `start` in the buffer is complete: its parent takes it.
    #[inline]
    fn deliver(&mut self, start: usize, string: Option<Text>) {
        if !self.building {
            return;
        }
        let end = self.out.len();
        match self.frames.last_mut() {
            None => self.top_string = string,
            Some(Frame { kind: Container::Array, .. }) => {}
            Some(frame) => {
                let key = frame.key.take().unwrap_or(Text { start: 0, end: 0, decoded: false });
                // A kept string's key is `__type__` or `class`.
                frame.typed |= string.is_some() && key.end - key.start == "__type__".len();
                let key_bytes = text_bytes(self.cur.bytes, &self.decoded, key);
                let prefix = match (key.decoded, self.cur.bytes.get(key.start..key.start + 8)) {
                    // Eight bytes of the input from the key's start, those past its end masked off.
                    (false, Some(word)) => {
                        let word = u64::from_be_bytes(word.try_into().unwrap_or_default());
                        let len = key_bytes.len();
                        if len >= 8 {
                            word
                        } else {
                            word & !(u64::MAX >> (8 * len))
                        }
                    }
                    _ => prefix_of(key_bytes),
                };
                if frame.in_order && self.entries.len() > frame.entries_start {
                    if let Some(last) = self.entries.last() {
                        let before = text_bytes(self.cur.bytes, &self.decoded, last.key);
                        frame.in_order = (last.prefix, before) < (prefix, key_bytes);
                    }
                }
                self.entries.push(Entry { key, prefix, shape: (start, end), string });
            }
        }
    }

    /// Reads `"key" :`, keeping the key when the object is being built.
    #[inline]
    fn key(&mut self) -> Result<(), Invalid> {
        if self.cur.peek() != Some(b'"') {
            return Err(Invalid);
        }
        self.cur.pos += 1;
        let key = self.string(self.building)?;
        self.take_key(key);
        self.cur.colon()
    }

    /// The key of the member being read: kept in the frame, and written into the shape as it comes (an
    /// object whose keys come in order needs nothing more).
    #[inline]
    fn take_key(&mut self, key: Option<Text>) {
        let (true, Some(frame), Some(key)) = (self.building, self.frames.last_mut(), key) else { return };
        frame.key = Some(key);
        if self.entries.len() > frame.entries_start {
            self.out.push(b',');
        }
        escape_key_into(&mut self.out, text_bytes(self.cur.bytes, &self.decoded, key));
        self.out.push(b':');
    }

    /// Reads a string body after its opening quote; decodes it only when `keep` (a string with escapes
    /// into the decoded strings' buffer; without, it stays a range of the input).
    fn string(&mut self, keep: bool) -> Result<Option<Text>, Invalid> {
        if !keep {
            self.cur.skip_string()?;
            return Ok(None);
        }
        let start = self.cur.pos;
        // Where this string's decoded text starts, once it has an escape.
        let mut decoded: Option<usize> = None;
        loop {
            let run_start = self.cur.pos;
            let non_ascii = match self.text {
                Some(_) => self.cur.skip_plain_string_bytes::<false>(),
                None => self.cur.skip_plain_string_bytes::<true>(),
            };
            let byte = self.cur.peek().ok_or(Invalid)?;
            if non_ascii {
                utf8(&self.cur.bytes[run_start..self.cur.pos])?;
            }
            if decoded.is_some() {
                self.decode_run(run_start)?;
            }
            match byte {
                b'"' => {
                    let end = self.cur.pos;
                    self.cur.pos += 1;
                    return Ok(Some(match decoded {
                        Some(from) => Text { start: from, end: self.decoded.len(), decoded: true },
                        None => Text { start, end, decoded: false },
                    }));
                }
                b'\\' => {
                    if decoded.is_none() {
                        decoded = Some(self.decoded.len());
                        self.decode_run(start)?;
                    }
                    self.cur.pos += 1;
                    let c = self.cur.escape()?;
                    self.decoded.push(c);
                }
                _ => return Err(Invalid),
            }
        }
    }

    /// Appends the string bytes `start..pos` (checked UTF-8, no escapes) to the decoded strings.
    fn decode_run(&mut self, start: usize) -> Result<(), Invalid> {
        let run = match self.text {
            Some(text) => text.get(start..self.cur.pos).ok_or(Invalid)?,
            None => utf8(&self.cur.bytes[start..self.cur.pos])?,
        };
        self.decoded.push_str(run);
        Ok(())
    }

    fn literal(&mut self, word: &[u8], shape: &[u8], start: usize) -> Result<(), Invalid> {
        self.cur.expect(word)?;
        self.atom(shape);
        self.deliver(start, None);
        Ok(())
    }
}

/// Passes over one whole value at `cursor` (its containers nested inside `depth` open ones): validates
/// it and counts its whitespace. True when it nests deeper than [`DEPTH_LIMIT`].
fn pass_value(cursor: &mut Cursor<'_>, depth: usize) -> Result<bool, Invalid> {
    let mut kinds = Kinds::new();
    let mut too_deep = false;
    loop {
        cursor.skip_whitespace();
        match cursor.peek().ok_or(Invalid)? {
            byte @ (b'{' | b'[') => {
                cursor.pos += 1;
                let kind = if byte == b'{' { Container::Object } else { Container::Array };
                kinds.push(kind);
                too_deep |= depth + kinds.depth > DEPTH_LIMIT;
                cursor.skip_whitespace();
                let closing = if kind == Container::Object { b'}' } else { b']' };
                if cursor.peek() == Some(closing) {
                    cursor.pos += 1;
                    kinds.pop();
                } else {
                    if kind == Container::Object {
                        cursor.skip_key()?;
                    }
                    continue;
                }
            }
            b'"' => {
                cursor.pos += 1;
                cursor.skip_string()?;
            }
            b'-' | b'0'..=b'9' => cursor.number()?,
            b't' => cursor.expect(b"true")?,
            b'f' => cursor.expect(b"false")?,
            b'n' => cursor.expect(b"null")?,
            _ => return Err(Invalid),
        }
        loop {
            let Some(kind) = kinds.top() else { return Ok(too_deep) };
            cursor.skip_whitespace();
            match (cursor.peek(), kind) {
                (Some(b','), _) => {
                    cursor.pos += 1;
                    if kind == Container::Object {
                        cursor.skip_whitespace();
                        cursor.skip_key()?;
                    }
                    break;
                }
                (Some(b'}'), Container::Object) | (Some(b']'), Container::Array) => {
                    cursor.pos += 1;
                    kinds.pop();
                }
                _ => return Err(Invalid),
            }
        }
    }
}

/// A key's first eight bytes, big-endian, zero-padded.
#[inline]
fn prefix_of(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(head) => u64::from_be_bytes(*head),
        None => key.iter().enumerate().fold(0, |prefix, (i, &byte)| prefix | u64::from(byte) << (56 - 8 * i)),
    }
}

/// Appends a few bytes without a call to `memcpy` (shapes are written in pieces of a few bytes: names of
/// atoms, keys, members' shapes); longer pieces are copied whole.
#[inline]
fn append(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() > 16 {
        out.extend_from_slice(bytes);
        return;
    }
    out.reserve(bytes.len());
    for &byte in bytes {
        out.push(byte);
    }
}

/// [`append`] of the buffer's own bytes `start..end`.
#[inline]
fn append_within(out: &mut Vec<u8>, start: usize, end: usize) {
    if end - start > 16 {
        out.extend_from_within(start..end);
        return;
    }
    out.reserve(end - start);
    for index in start..end {
        let byte = out[index];
        out.push(byte);
    }
}

/// The bytes of a kept string: of the input, or of the decoded strings.
#[inline]
fn text_bytes<'t>(input: &'t [u8], decoded: &'t str, text: Text) -> &'t [u8] {
    let source = if text.decoded { decoded.as_bytes() } else { input };
    source.get(text.start..text.end).unwrap_or_default()
}

fn utf8(bytes: &[u8]) -> Result<&str, Invalid> {
    std::str::from_utf8(bytes).map_err(|_| Invalid)
}

/// [`super::escape_key_into`] into the shape's bytes, for a key's UTF-8 bytes (checked when it was read).
#[inline]
fn escape_key_into(out: &mut Vec<u8>, key: &[u8]) {
    if !key.iter().any(|&byte| super::escape::needs_escape_byte(byte)) {
        out.extend_from_slice(key);
        return;
    }
    let mut escaped = String::new();
    super::escape_key_into(&mut escaped, &String::from_utf8_lossy(key));
    out.extend_from_slice(escaped.as_bytes());
}
