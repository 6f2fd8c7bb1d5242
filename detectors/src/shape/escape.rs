//! Key escaping in shapes: the one place that decides how an object key is written into a shape string.

/// Appends `key` escaped so that no two different structures share a shape (DESIGN.md §3): a backslash
/// before each of `\ : , { } [ ] < > "`, control characters as `\u00xx`. Ordinary keys are copied as is.
pub fn escape_key_into(out: &mut String, key: &str) {
    if !key.bytes().any(needs_escape_byte) {
        out.push_str(key);
        return;
    }
    for c in key.chars() {
        if is_structural(c) {
            out.push('\\');
            out.push(c);
        } else if c.is_control() {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
}

fn is_structural(c: char) -> bool {
    matches!(c, '\\' | ':' | ',' | '{' | '}' | '[' | ']' | '<' | '>' | '"')
}

// A conservative byte test: true for every byte that can start an escaped character. 0xC2 leads the
// UTF-8 encoding of U+0080..U+00BF, which holds the C1 controls.
const fn escape_byte(byte: u8) -> bool {
    byte < 0x20
        || byte == 0x7f
        || byte == 0xc2
        || matches!(byte, b'\\' | b':' | b',' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b'"')
}

/// [`escape_byte`] of every byte, looked up (every key of every shape is tested).
const ESCAPE_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = escape_byte(byte as u8);
        byte += 1;
    }
    table
};

#[inline]
pub(super) fn needs_escape_byte(byte: u8) -> bool {
    ESCAPE_BYTES[byte as usize]
}
