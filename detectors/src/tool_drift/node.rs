//! A JSON value read from a tool's text without copying it: what the definition writer reads.
//!
//! Building a `serde_json::Value` allocates a string per string and a B-tree per object, and that was most
//! of the cost of digesting a tool from its text (a 680-byte tool of the tools50 pair: ≈ 4.5 µs of a
//! ≈ 6 µs digest). A [`Node`] borrows its strings from the text (only strings with escapes are decoded,
//! by serde_json) and keeps an object's members in one vector, sorted by key as `serde_json::Map`
//! iterates them, the later of two members with one key kept — so the writer reads a tool the same way
//! whichever form it came from.
//!
//! [`parse`] reads text serde_json has validated (a `RawValue`). It answers `None` for anything it does
//! not read exactly as serde_json would (nesting deeper than [`MAX_DEPTH`], text that is no JSON): the
//! caller then parses the text into a `Value`, so the result never depends on which reader ran.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Deeper than any schema of a real server, and below serde_json's recursion limit (128), so a text
/// this reader accepts is one serde_json accepts too.
pub(super) const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node<'a> {
    Null,
    Bool(bool),
    /// As serde_json reads the number and `Number::as_f64` answers (what the canonical writer prints).
    Number(f64),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Object<'a>),
}

/// An object's members sorted by key (UTF-8 bytes), one per key.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Object<'a> {
    members: Vec<(Cow<'a, str>, Node<'a>)>,
}

impl<'a> Object<'a> {
    /// Members as read, in any order, keys possibly repeated (the later wins, as in `serde_json::Map`).
    fn from_members(mut members: Vec<(Cow<'a, str>, Node<'a>)>) -> Self {
        if !members.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            members.sort_by(|a, b| a.0.cmp(&b.0));
            members.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(later, kept);
                }
                same
            });
        }
        Object { members }
    }

    /// A map's members, borrowed (already sorted and unique).
    pub(super) fn of_map(map: &'a Map<String, Value>) -> Self {
        Object {
            members: map
                .iter()
                .map(|(key, value)| (Cow::Borrowed(key.as_str()), Node::of_value(value)))
                .collect(),
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&Node<'a>> {
        self.members.binary_search_by(|(member, _)| (**member).cmp(key)).ok().map(|at| &self.members[at].1)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &Node<'a>)> {
        self.members.iter().map(|(key, value)| (&**key, value))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl<'a> Node<'a> {
    /// A value, borrowed.
    pub(super) fn of_value(value: &'a Value) -> Self {
        match value {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(number) => Node::Number(number.as_f64().unwrap_or(0.0)),
            Value::String(text) => Node::String(Cow::Borrowed(text)),
            Value::Array(items) => Node::Array(items.iter().map(Node::of_value).collect()),
            Value::Object(map) => Node::Object(Object::of_map(map)),
        }
    }

    pub(super) fn as_f64(&self) -> Option<f64> {
        match self {
            Node::Number(number) => Some(*number),
            _ => None,
        }
    }

    /// Its nesting as `driftline_schemas::json_depth` counts it: 0 for a scalar, one more per level.
    pub(super) fn depth(&self) -> usize {
        match self {
            Node::Array(items) => items.iter().map(|item| item.depth() + 1).max().unwrap_or(0),
            Node::Object(object) => object.iter().map(|(_, value)| value.depth() + 1).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Whether a `$ref` member sits anywhere in it.
    pub(super) fn mentions_ref(&self) -> bool {
        match self {
            Node::Object(object) => {
                object.get("$ref").is_some() || object.iter().any(|(_, value)| value.mentions_ref())
            }
            Node::Array(items) => items.iter().any(Node::mentions_ref),
            _ => false,
        }
    }
}

/// Reads one JSON text (validated by serde_json); `None` where serde_json might read it otherwise.
pub(super) fn parse(text: &str) -> Option<Node<'_>> {
    let mut reader = Reader { text, at: 0, depth: 0 };
    let node = reader.value()?;
    reader.skip_whitespace();
    (reader.at == text.len()).then_some(node)
}

/// Whether a tool's text (validated by serde_json, as [`parse`] takes it) certainly nests no deeper than
/// `max_depth`, holds no `$ref` member and reads as a value, told in one pass that builds nothing: the
/// containers open at once bound its depth from above; a `$ref` anywhere in the text, an escape that could
/// spell one or that serde_json might refuse (a lone surrogate), or a number it might refuse (an exponent,
/// or long) answers no, and the tree decides. Most tools of real lists answer yes.
pub(super) fn plainly_within(text: &str, max_depth: usize) -> bool {
    let bytes = text.as_bytes();
    if memchr::memmem::find(bytes, b"$ref").is_some() {
        return false;
    }
    let max_open = max_depth.min(MAX_DEPTH);
    let (mut open, mut at) = (0usize, 0usize);
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => {
                at += 1;
                loop {
                    let Some(next) = bytes.get(at..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                    else {
                        return false;
                    };
                    at += next;
                    if bytes[at] == b'"' {
                        break;
                    }
                    if bytes.get(at + 1) == Some(&b'u') {
                        let hex = bytes.get(at + 2..at + 6).and_then(|hex| std::str::from_utf8(hex).ok());
                        match hex.and_then(|hex| u32::from_str_radix(hex, 16).ok()) {
                            Some(0x24 | 0x72 | 0x65 | 0x66 | 0xD800..=0xDFFF) | None => return false,
                            Some(_) => at += 6,
                        }
                    } else {
                        at += 2;
                    }
                }
            }
            b'{' | b'[' => {
                open += 1;
                if open > max_open {
                    return false;
                }
            }
            b'}' | b']' => open = open.saturating_sub(1),
            b'-' | b'0'..=b'9' => {
                let token = bytes[at..]
                    .iter()
                    .take_while(|b| matches!(b, b'0'..=b'9' | b'.' | b'-' | b'+' | b'e' | b'E'));
                let (mut len, mut exponent) = (0usize, false);
                for b in token {
                    len += 1;
                    exponent |= matches!(b, b'e' | b'E');
                }
                if exponent || len > 20 {
                    return false;
                }
                at += len;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    true
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next_token(&mut self) -> Option<u8> {
        self.skip_whitespace();
        let byte = *self.bytes().get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn value(&mut self) -> Option<Node<'a>> {
        match self.next_token()? {
            b'{' => self.nested(Self::object),
            b'[' => self.nested(Self::array),
            b'"' => self.string().map(Node::String),
            b't' => self.literal("rue", Node::Bool(true)),
            b'f' => self.literal("alse", Node::Bool(false)),
            b'n' => self.literal("ull", Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn nested(&mut self, read: fn(&mut Self) -> Option<Node<'a>>) -> Option<Node<'a>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let node = read(self);
        self.depth -= 1;
        node
    }

    fn literal(&mut self, rest: &str, node: Node<'a>) -> Option<Node<'a>> {
        let end = self.at.checked_add(rest.len())?;
        (self.bytes().get(self.at..end)? == rest.as_bytes()).then(|| {
            self.at = end;
            node
        })
    }

    /// After `{`.
    fn object(&mut self) -> Option<Node<'a>> {
        let mut members = Vec::new();
        match self.next_token()? {
            b'}' => return Some(Node::Object(Object::default())),
            b'"' => {}
            _ => return None,
        }
        loop {
            let key = self.string()?;
            if self.next_token()? != b':' {
                return None;
            }
            let value = self.value()?;
            members.push((key, value));
            match self.next_token()? {
                b',' if self.next_token()? == b'"' => {}
                b'}' => return Some(Node::Object(Object::from_members(members))),
                _ => return None,
            }
        }
    }

    /// After `[`.
    fn array(&mut self) -> Option<Node<'a>> {
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.bytes().get(self.at) == Some(&b']') {
            self.at += 1;
            return Some(Node::Array(items));
        }
        loop {
            items.push(self.value()?);
            match self.next_token()? {
                b',' => {}
                b']' => return Some(Node::Array(items)),
                _ => return None,
            }
        }
    }

    /// After the opening quote: the text itself unless it holds an escape (then serde_json decodes it).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.at;
        let bytes = self.bytes();
        let mut escaped = false;
        let mut at = start;
        loop {
            at += memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
            if bytes[at] == b'"' {
                break;
            }
            escaped = true;
            at += 2;
        }
        self.at = at + 1;
        let raw = self.text.get(start..at)?;
        if raw.bytes().any(|byte| byte < 0x20) {
            return None;
        }
        if !escaped {
            return Some(Cow::Borrowed(raw));
        }
        serde_json::from_str::<String>(self.text.get(start - 1..at + 1)?).ok().map(Cow::Owned)
    }

    /// After a number's first byte.
    fn number(&mut self) -> Option<Node<'a>> {
        let start = self.at - 1;
        let bytes = self.bytes();
        let mut end = self.at;
        while let Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') = bytes.get(end) {
            end += 1;
        }
        self.at = end;
        let token = self.text.get(start..end)?;
        // A small whole number is exact as a double; anything else is read by serde_json itself, whose
        // float parsing (not always the nearest double) the writer must reproduce.
        let plain = token.len() <= 15
            && token.bytes().all(|b| b.is_ascii_digit())
            && !(token.len() > 1 && token.starts_with('0'));
        if plain {
            return token.parse::<u64>().ok().map(|n| Node::Number(n as f64));
        }
        token.parse::<serde_json::Number>().ok()?.as_f64().map(Node::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `text` reads as serde_json reads it (the same node as its `Value`), or not at all.
    fn check(text: &str, expected: Option<&str>) {
        let node = parse(text);
        match expected {
            None => assert_eq!(node, None, "{text}"),
            Some(value) => {
                let value: Value = serde_json::from_str(value).expect("the expected value");
                assert_eq!(node, Some(Node::of_value(&value)), "{text}");
            }
        }
    }

    #[test]
    fn reads_as_serde_json_does() {
        check(
            r#" {"b": 1, "a": [true, false, null], "c": {}} "#,
            Some(r#"{"a":[true,false,null],"b":1,"c":{}}"#),
        );
        check(r#"{"k": 1, "k": 2}"#, Some(r#"{"k": 2}"#));
        check(r#"{"k": 1, "j": 0, "k": 2}"#, Some(r#"{"j": 0, "k": 2}"#));
        check(r#""a\"b\u00e9\n""#, Some(r#""a\"b\u00e9\n""#));
        check(r#"{"\u0061": "x", "a": "y"}"#, Some(r#"{"a": "y"}"#));
        check(
            "[1.5e3, -0, 0, 12345678901234567890, 0.1, -7]",
            Some("[1500, -0.0, 0, 12345678901234567890, 0.1, -7]"),
        );
        check("[]", Some("[]"));
        check(r#""é😀""#, Some(r#""é😀""#));
        check(
            &format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH)),
            Some(&format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH))),
        );
        check(&format!("{}1{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1)), None);
        for invalid in ["", "[1,]", "{\"a\" 1}", "tru", "[1 2]", "{\"a\":1,}", "\"\u{1}\"", "\"open", "1 x"] {
            check(invalid, None);
        }
    }

    /// JSON text as a server might write it: members in any order, keys repeated, escapes, numbers of any
    /// form, whitespace anywhere.
    fn json_text() -> impl Strategy<Value = String> {
        let space = "[ \n\t]{0,2}";
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
            "[a-c\"\\\\\u{1}é😀 ]{0,6}".prop_map(|text| serde_json::to_string(&text).expect("a string")),
            Just(r#""\u0061\/\ud83d\ude00""#.to_owned()),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec((space, inner.clone()), 0..5).prop_map(|items| {
                    let items: Vec<String> =
                        items.into_iter().map(|(space, item)| format!("{space}{item}")).collect();
                    format!("[{}]", items.join(","))
                }),
                prop::collection::vec(("(a|b|c|ab|é|😀|\\\\u0062)", space, inner), 0..6).prop_map(
                    |members| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(key, space, value)| format!("\"{key}\"{space}:{value}"))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }
                ),
            ]
        })
    }

    /// [`json_text`] with what [`plainly_within`] must notice: `$ref` keys and strings, escapes that spell
    /// one, lone surrogates, numbers serde_json refuses.
    fn tool_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            4 => json_text(),
            1 => prop::sample::select(vec![
                r##"{"$ref":"#/$defs/a"}"##,
                r#"{"\u0024ref":"a"}"#,
                r#"{"$r\u0065f":1}"#,
                r#"{"\u0024r\u0065\u0066":1}"#,
                r#""see $ref""#,
                r#""\ud800""#,
                r#""\udc00 \u00e9""#,
                "1e400",
                "-1E-999",
                "123456789012345678901234567890",
                "0.5",
                "[[[[[[]]]]]]",
            ])
            .prop_map(str::to_owned),
        ];
        prop::collection::vec(("(a|\\$ref|b)", leaf), 0..4).prop_map(|members| {
            let members: Vec<String> =
                members.into_iter().map(|(key, value)| format!("\"{key}\":{value}")).collect();
            format!("{{{}}}", members.join(","))
        })
    }

    proptest! {
        /// A text that answers yes at a glance is one the tree reads, nesting within the depth, with no
        /// `$ref` member: what the full check would have passed.
        #[test]
        fn a_plain_text_is_what_the_tree_passes(text in tool_text(), max_depth in 0usize..8) {
            prop_assume!(serde_json::from_str::<&serde_json::value::RawValue>(&text).is_ok());
            if plainly_within(&text, max_depth) {
                let node = parse(&text);
                prop_assert!(node.is_some(), "{}", text);
                let node = node.unwrap_or(Node::Null);
                prop_assert!(node.depth() <= max_depth, "{} nests {} deep", text, node.depth());
                prop_assert!(!node.mentions_ref(), "{}", text);
                prop_assert!(serde_json::from_str::<Value>(&text).is_ok(), "{}", text);
            }
        }

        /// Any text reads as serde_json reads it: the same node as its `Value`, or nothing where serde_json
        /// refuses it.
        #[test]
        fn reads_as_serde_json_reads(text in json_text()) {
            match serde_json::from_str::<Value>(&text) {
                Ok(value) => prop_assert_eq!(parse(&text), Some(Node::of_value(&value)), "{}", text),
                Err(_) => prop_assert_eq!(parse(&text), None, "{}", text),
            }
        }
    }
}
