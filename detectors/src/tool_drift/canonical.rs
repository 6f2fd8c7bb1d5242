//! Canonical JSON (RFC 8785) and the writers of its parts: the base layer every hash of `tool_drift`
//! writes through.

use std::cmp::Ordering;

use serde_json::{Map, Value};

/// RFC 8785 (JCS) serialization: keys sorted by UTF-16 code units, no whitespace, numbers as ECMAScript
/// writes IEEE doubles, strings with the minimal JSON escapes.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(&mut out, value);
    out
}

fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(number) => write_number(out, number),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, None),
    }
}

/// A number as JCS writes it: serde_json holds finite numbers only; big integers round to the nearest
/// double, as JCS says.
pub(super) fn write_number(out: &mut String, number: &serde_json::Number) {
    write_float(out, number.as_f64().unwrap_or(0.0));
}

/// A finite number as JCS writes it.
pub(super) fn write_float(out: &mut String, number: f64) {
    // Whole numbers below 2^53 (most numbers of a schema: bounds, lengths) print as their digits in
    // ECMAScript too (`-0` as `0`); the shortest-digits algorithm is for the rest.
    if number.fract() == 0.0 && number.abs() < 9_007_199_254_740_992.0 {
        out.push_str(itoa::Buffer::new().format(number as i64));
    } else {
        out.push_str(ryu_js::Buffer::new().format_finite(number));
    }
}

/// An object's members in JCS order, with one more string member (`name`, kept apart from a tool's
/// definition) written as if it were in the map, so no tool is copied to be hashed.
pub(super) fn write_object(out: &mut String, map: &Map<String, Value>, extra: Option<(&str, &str)>) {
    // The map iterates its keys by UTF-8 bytes, which is their order by UTF-16 code units unless a key
    // holds a character beyond the Basic Multilingual Plane (four UTF-8 bytes, a surrogate pair): then,
    // and only then, the members are sorted anew.
    let beyond_bmp = |key: &str| key.bytes().any(|byte| byte >= 0xF0);
    if !map.keys().any(|key| beyond_bmp(key)) && !extra.is_some_and(|(key, _)| beyond_bmp(key)) {
        let mut pending = extra;
        let mut first = true;
        let mut member = |out: &mut String, key: &str| {
            out.push(if first { '{' } else { ',' });
            first = false;
            write_string(out, key);
            out.push(':');
        };
        for (key, value) in map {
            if let Some((extra_key, text)) = pending.filter(|(extra_key, _)| key.as_str() >= *extra_key) {
                member(out, extra_key);
                write_string(out, text);
                pending = None;
                if key == extra_key {
                    continue;
                }
            }
            member(out, key);
            write_canonical(out, value);
        }
        if let Some((extra_key, text)) = pending {
            member(out, extra_key);
            write_string(out, text);
        }
        if first {
            out.push('{');
        }
        out.push('}');
        return;
    }
    let mut entries: Vec<(&str, Member<'_>)> =
        map.iter().map(|(k, v)| (k.as_str(), Member::Value(v))).collect();
    if let Some((key, text)) = extra {
        entries.retain(|(k, _)| *k != key);
        entries.push((key, Member::Text(text)));
    }
    entries.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
    out.push('{');
    for (index, (key, member)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        match member {
            Member::Value(item) => write_canonical(out, item),
            Member::Text(text) => write_string(out, text),
        }
    }
    out.push('}');
}

enum Member<'a> {
    Value(&'a Value),
    Text(&'a str),
}

/// The minimal JSON escapes JCS requires (as serde_json writes them): `"`, `\\`, and controls (short forms
/// where they exist, otherwise lowercase \u00xx); everything else as UTF-8, copied a run at a time.
pub(super) fn write_string(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    let mut plain = 0;
    let mut index = 0;
    while index < bytes.len() {
        // Eight bytes at a time past text that needs no escape (nearly all of it).
        if let Some(word) = bytes.get(index..index + 8) {
            let word =
                u64::from_le_bytes([word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7]]);
            if !any_escape(word) {
                index += 8;
                continue;
            }
        }
        let byte = bytes[index];
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => {
                index += 1;
                continue;
            }
        };
        out.push_str(&text[plain..index]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push_str(escape);
        }
        index += 1;
        plain = index;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

/// Whether any of eight bytes is a control, `"` or `\\` (the classic bit tricks: a byte below n, a zero
/// byte after xor; exact for the word as a whole).
fn any_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    (below_space | zero_byte(word ^ (ONES * u64::from(b'"'))) | zero_byte(word ^ (ONES * u64::from(b'\\'))))
        != 0
}

/// JCS orders keys by UTF-16 code units; for ASCII keys (nearly all) that is byte order.
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Sorts order-free values by their canonical JSON and drops repeats.
pub(super) fn sort_unique(items: &mut Vec<Value>) {
    // Names and type names (nearly every such list) compare as their canonical JSON does without
    // writing it, as long as no character needs an escape.
    let plain = |v: &Value| v.as_str().is_some_and(|s| !s.bytes().any(needs_escape));
    if items.iter().all(plain) {
        let order =
            |a: &Value, b: &Value| quoted_cmp(a.as_str().unwrap_or_default(), b.as_str().unwrap_or_default());
        if items.windows(2).all(|pair| order(&pair[0], &pair[1]).is_lt()) {
            return;
        }
        items.sort_by(order);
        items.dedup_by(|a, b| a == b);
        return;
    }
    let mut keyed: Vec<(String, Value)> = items.drain(..).map(|v| (canonical_json(&v), v)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    items.extend(keyed.into_iter().map(|(_, v)| v));
}

pub(super) fn sorted_unique(items: &[Value]) -> Vec<Value> {
    let mut items = items.to_vec();
    sort_unique(&mut items);
    items
}

/// A byte canonical JSON writes escaped.
pub(super) fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The order of two strings' canonical JSON (`"a"` against `"ab"`) when neither needs an escape: the
/// closing quote takes part where one string is a prefix of the other.
pub(super) fn quoted_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let common = a.len().min(b.len());
    a[..common].cmp(&b[..common]).then_with(|| {
        let next = |s: &[u8]| s.get(common).copied().unwrap_or(b'"');
        next(a).cmp(&next(b))
    })
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy;
    use serde_json::json;

    use super::*;

    fn check(input: Value, expected: &str) {
        assert_eq!(canonical_json(&input), expected);
    }

    #[test]
    fn jcs_numbers_strings_and_key_order() {
        check(json!(10.0), "10");
        check(json!(1e21), "1e+21");
        check(json!(0.000001), "0.000001");
        check(json!(1e-7), "1e-7");
        check(json!(-0.0), "0");
        check(json!(123456789012345678u64), "123456789012345680");
        check(json!("\u{7f}é\n\u{1}"), "\"\u{7f}é\\n\\u0001\"");
        // Every escape as serde_json writes it (JCS's minimal escapes), around runs of plain text.
        let every: String = (0u8..0x80).map(char::from).chain("é\u{1f600}\u{e000}".chars()).collect();
        check(json!(every.clone()), &Value::String(every).to_string());
        check(json!({"b": 1, "a": [true, null], "": {}}), r#"{"":{},"a":[true,null],"b":1}"#);
        // U+E000 sorts after U+1F600 in UTF-8 but before it in UTF-16 (a surrogate pair starts 0xD83D).
        check(json!({"\u{e000}": 1, "\u{1f600}": 2}), "{\"\u{1f600}\":2,\"\u{e000}\":1}");
    }

    /// JCS of an object of small integers, the slow way: members sorted by UTF-16 code units.
    fn jcs_reference(map: &Map<String, Value>) -> String {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        let members: Vec<String> =
            members.iter().map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), v)).collect();
        format!("{{{}}}", members.join(","))
    }

    proptest::proptest! {
        /// Whole numbers take a shortcut; every number still reads as ECMAScript prints it.
        #[test]
        fn numbers_as_ecmascript_prints_them(
            number in proptest::prop_oneof![
                proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
                (-9_007_199_254_740_993i64..9_007_199_254_740_993).prop_map(|n| n as f64),
                (-1e22f64..1e22).prop_map(f64::trunc),
            ]
        ) {
            let mut out = String::new();
            write_float(&mut out, number);
            let mut buffer = ryu_js::Buffer::new();
            proptest::prop_assert_eq!(out.as_str(), buffer.format_finite(number));
        }

        /// Strings are written eight bytes at a time where nothing needs an escape; whatever the mix,
        /// the text is serde_json's.
        #[test]
        fn strings_as_serde_json_writes_them(text in "([a-z \"\\\\\u{1}-\u{1f}\u{7f}\u{e9}\u{1f600}]{0,12}){0,4}") {
            proptest::prop_assert_eq!(canonical_json(&json!(text.clone())), Value::String(text).to_string());
        }

        /// Members are written straight from the map's order unless a key holds a character beyond the
        /// BMP; a tool's name (kept apart from its definition) lands where the map would put it.
        #[test]
        fn members_in_utf16_order_with_and_without_the_name(
            keys in proptest::collection::btree_set("[a-z\u{e9}\u{e000}\u{1f600}]{0,3}|name|nam|namf", 0..7)
        ) {
            let map: Map<String, Value> = keys.iter().enumerate().map(|(i, k)| (k.clone(), json!(i))).collect();
            proptest::prop_assert_eq!(canonical_json(&Value::Object(map.clone())), jcs_reference(&map));
            let mut with_name = map.clone();
            with_name.insert("name".into(), json!(99));
            let mut written = String::new();
            write_object(&mut written, &map, Some(("name", "@@@@")));
            proptest::prop_assert_eq!(written.replace("\"@@@@\"", "99"), jcs_reference(&with_name));
        }
    }
}
