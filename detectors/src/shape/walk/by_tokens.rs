//! The walk from token to token (x86-64 with AVX2): the grammar and the shape of `Walker::run`, without
//! reading the bytes between tokens (whitespace and string contents; `tokens.rs` counts and checks those a
//! block at a time).

use super::cursor::Cursor;
use super::{Container, Invalid, Kinds, Text, Walker, DEPTH_LIMIT};

/// Whether a number or a literal may end before this byte: whitespace, a structural character, a quote,
/// or the end of the text (anything else would continue it).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(super) fn ends_atom(byte: Option<&u8>) -> bool {
    matches!(byte, None | Some(b' ' | b'\t' | b'\n' | b'\r' | b'{' | b'}' | b'[' | b']' | b':' | b',' | b'"'))
}

#[cfg(target_arch = "x86_64")]
impl Walker<'_> {
    /// [`Walker::run`] from token to token: the same grammar, the same shape, without reading the bytes
    /// between tokens (whitespace and string contents; the tokens count and check those a block at a time).
    pub(super) fn run_tokens(
        &mut self,
        tokens: &mut crate::shape::tokens::Tokens<'_>,
    ) -> Result<(), Invalid> {
        let bytes = self.cur.bytes;
        let mut at = tokens.next().ok_or(Invalid)?;
        'value: loop {
            let start = self.out.len();
            match bytes[at] {
                b'{' => {
                    self.open(Container::Object);
                    let next = tokens.next().ok_or(Invalid)?;
                    if bytes[next] == b'}' {
                        self.close_object();
                    } else {
                        self.key_at(next, tokens)?;
                        at = tokens.next().ok_or(Invalid)?;
                        continue 'value;
                    }
                }
                b'[' => {
                    self.open(Container::Array);
                    let next = tokens.next().ok_or(Invalid)?;
                    if bytes[next] == b']' {
                        self.close_array();
                    } else {
                        at = next;
                        continue 'value;
                    }
                }
                b'"' => {
                    let value = if self.building && self.keeps_string_value() {
                        self.kept_string_at(at, tokens)?
                    } else {
                        pass_string(bytes, tokens)?;
                        None
                    };
                    self.atom(b"string");
                    self.deliver(start, value);
                }
                byte => {
                    self.atom_at(at, byte)?;
                    self.deliver(start, None);
                }
            }
            // A value ended: close containers until one continues, or the input's value is complete.
            loop {
                let Some(kind) = self.frames.last().map(|f| f.kind) else {
                    return if tokens.next().is_none() { Ok(()) } else { Err(Invalid) };
                };
                let next = tokens.next().ok_or(Invalid)?;
                match (bytes[next], kind) {
                    (b',', Container::Object) => {
                        let key = tokens.next().ok_or(Invalid)?;
                        self.key_at(key, tokens)?;
                        at = tokens.next().ok_or(Invalid)?;
                        continue 'value;
                    }
                    (b',', Container::Array) => {
                        // The shape holds an array's first element only: the rest is passed over.
                        if pass_elements(bytes, tokens, self.frames.len())? {
                            self.too_deep = true;
                            self.building = false;
                        }
                        self.close_array();
                    }
                    (b'}', Container::Object) => self.close_object(),
                    (b']', Container::Array) => self.close_array(),
                    _ => return Err(Invalid),
                }
            }
        }
    }

    /// The value of the atom (number or literal) whose first byte is at `at`.
    #[inline]
    fn atom_at(&mut self, at: usize, byte: u8) -> Result<(), Invalid> {
        let shape: &[u8] = match byte {
            b'-' | b'0'..=b'9' => b"number",
            b't' | b'f' => b"bool",
            b'n' => b"null",
            _ => return Err(Invalid),
        };
        self.cur.pos = at;
        pass_atom(&mut self.cur, byte)?;
        self.atom(shape);
        Ok(())
    }

    /// `"key" :` with the key's opening quote at `at`, keeping the key when the object is being built.
    #[inline]
    fn key_at(&mut self, at: usize, tokens: &mut crate::shape::tokens::Tokens<'_>) -> Result<(), Invalid> {
        let bytes = self.cur.bytes;
        if bytes[at] != b'"' {
            return Err(Invalid);
        }
        if !self.building {
            return pass_key(bytes, tokens, at);
        }
        let colon = tokens.peek().ok_or(Invalid)?;
        let key = match bytes[colon] {
            // No escape: the key ends at the last quote before the colon (whitespace may lie between).
            b':' => {
                tokens.skip();
                let mut end = colon;
                while end > at + 1 && matches!(bytes[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
                    end -= 1;
                }
                Some(Text { start: at + 1, end: end - 1, decoded: false })
            }
            _ => {
                let key = self.kept_string_at(at, tokens)?;
                match tokens.next() {
                    Some(colon) if bytes[colon] == b':' => key,
                    _ => return Err(Invalid),
                }
            }
        };
        self.take_key(key);
        Ok(())
    }

    /// The string whose opening quote is at `at`, read (and decoded) from the bytes as the byte-by-byte walk
    /// reads it; its escape tokens are passed.
    fn kept_string_at(
        &mut self,
        at: usize,
        tokens: &mut crate::shape::tokens::Tokens<'_>,
    ) -> Result<Option<Text>, Invalid> {
        self.cur.pos = at + 1;
        let text = self.string(true)?;
        let end = self.cur.pos;
        while tokens.peek().is_some_and(|next| next < end) {
            tokens.skip();
        }
        Ok(text)
    }
}

/// Checks the number or literal at the cursor, whose first byte is `byte`, and that nothing continues it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn pass_atom(cursor: &mut Cursor<'_>, byte: u8) -> Result<(), Invalid> {
    match byte {
        b'-' | b'0'..=b'9' => cursor.number()?,
        b't' => cursor.expect(b"true")?,
        b'f' => cursor.expect(b"false")?,
        b'n' => cursor.expect(b"null")?,
        _ => return Err(Invalid),
    }
    if ends_atom(cursor.bytes.get(cursor.pos)) {
        Ok(())
    } else {
        Err(Invalid)
    }
}

/// Passes over an array's elements after its first, from token to token, up to and including its `]`:
/// checks them and says whether they nest deeper than [`DEPTH_LIMIT`] (`depth` containers are open, the
/// array among them).
#[cfg(target_arch = "x86_64")]
pub(super) fn pass_elements(
    bytes: &[u8],
    tokens: &mut crate::shape::tokens::Tokens<'_>,
    depth: usize,
) -> Result<bool, Invalid> {
    // The array itself is the outermost container here.
    let mut kinds = Kinds::new();
    kinds.push(Container::Array);
    let outside = depth - 1;
    let mut too_deep = false;
    let mut cursor = Cursor { bytes, pos: 0, whitespace: 0, check_utf8: false };
    // A value's first token, when it was taken to see whether its container was empty.
    let mut pending: Option<usize> = None;
    loop {
        // A value starts here.
        let at = match pending.take() {
            Some(at) => at,
            None => tokens.next().ok_or(Invalid)?,
        };
        match bytes[at] {
            byte @ (b'{' | b'[') => {
                let kind = if byte == b'{' { Container::Object } else { Container::Array };
                kinds.push(kind);
                too_deep |= outside + kinds.depth > DEPTH_LIMIT;
                let next = tokens.next().ok_or(Invalid)?;
                let closing = if kind == Container::Object { b'}' } else { b']' };
                if bytes[next] == closing {
                    kinds.pop();
                } else {
                    if kind == Container::Object {
                        pass_key(bytes, tokens, next)?;
                    } else {
                        pending = Some(next);
                    }
                    continue;
                }
            }
            b'"' => pass_string(bytes, tokens)?,
            byte => {
                cursor.pos = at;
                pass_atom(&mut cursor, byte)?;
            }
        }
        // A value ended: close containers until one continues, or the array is closed.
        loop {
            let Some(kind) = kinds.top() else { return Ok(too_deep) };
            let next = tokens.next().ok_or(Invalid)?;
            match (bytes[next], kind) {
                (b',', Container::Object) => {
                    let key = tokens.next().ok_or(Invalid)?;
                    pass_key(bytes, tokens, key)?;
                    break;
                }
                (b',', Container::Array) => break,
                (b'}', Container::Object) | (b']', Container::Array) => kinds.pop(),
                _ => return Err(Invalid),
            }
        }
    }
}

/// `"key" :` passed over, the key's opening quote at `at`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn pass_key(
    bytes: &[u8],
    tokens: &mut crate::shape::tokens::Tokens<'_>,
    at: usize,
) -> Result<(), Invalid> {
    if bytes[at] != b'"' {
        return Err(Invalid);
    }
    pass_string(bytes, tokens)?;
    match tokens.next() {
        Some(colon) if bytes[colon] == b':' => Ok(()),
        _ => Err(Invalid),
    }
}

/// A string passed over after its opening quote: its escapes (the tokens that follow it inside it)
/// checked. The token after the string is left to be taken.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn pass_string(
    bytes: &[u8],
    tokens: &mut crate::shape::tokens::Tokens<'_>,
) -> Result<(), Invalid> {
    let mut checked = 0;
    while let Some(next) = tokens.peek() {
        if bytes[next] != b'\\' {
            break;
        }
        tokens.skip();
        // The second backslash of a surrogate pair was checked with the first.
        if next >= checked {
            let mut cursor = Cursor { bytes, pos: next + 1, whitespace: 0, check_utf8: false };
            cursor.escape()?;
            checked = cursor.pos;
        }
    }
    Ok(())
}
