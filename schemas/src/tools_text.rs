//! A declared tool list held as text: each entry's JSON as the server sent it.
//!
//! The detector keeps every server's baseline and newest list for as long as it runs. As `serde_json::Value`
//! trees a list takes about twenty times its text (ten servers declaring 2.7 MB lists took 600 MB); as text
//! it takes its size. Entries are parsed when something reads them: the index reads names, a digest or a
//! diff reads a tool whose text is new, a store reads the fields it keeps.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// A tool list as text, one JSON text per entry. Serialises as the JSON array it is (so state stored with
/// `Vec<Value>` reads back as it was written); equal when the texts are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolsText(Vec<Box<RawValue>>);

impl PartialEq for ToolsText {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| a.get() == b.get())
    }
}

impl ToolsText {
    /// A JSON array's entries, validated and kept as text.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Parsed values written back as text (compact).
    pub fn from_values(tools: &[Value]) -> Self {
        ToolsText(tools.iter().filter_map(|tool| serde_json::value::to_raw_value(tool).ok()).collect())
    }

    pub fn entries(&self) -> &[Box<RawValue>] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes of text held (what the list costs in memory, give or take a pointer per entry).
    pub fn text_bytes(&self) -> usize {
        self.0.iter().map(|entry| entry.get().len()).sum()
    }

    /// One entry parsed; `None` past the end or for an entry serde_json cannot build (nested deeper than
    /// its recursion limit: the limits refuse such lists before they are kept).
    pub fn value(&self, at: usize) -> Option<Value> {
        self.0.get(at).and_then(|entry| serde_json::from_str(entry.get()).ok())
    }

    /// Every entry parsed (an entry that cannot be is `null`): for the few readers that want the list
    /// whole, such as a drift event.
    pub fn values(&self) -> Vec<Value> {
        self.0.iter().map(|entry| serde_json::from_str(entry.get()).unwrap_or(Value::Null)).collect()
    }

    /// Whether `text` is a JSON array of exactly these entries, whatever whitespace lies between them:
    /// parsing it would give this list. A comparison of bytes, so a list sent again as it was costs no
    /// parse and no digest of its text.
    pub fn is_text_of(&self, text: &str) -> bool {
        let Some(mut rest) = text.trim_start_matches(JSON_WHITESPACE).strip_prefix('[') else { return false };
        for (at, entry) in self.0.iter().enumerate() {
            rest = rest.trim_start_matches(JSON_WHITESPACE);
            if at > 0 {
                let Some(after) = rest.strip_prefix(',') else { return false };
                rest = after.trim_start_matches(JSON_WHITESPACE);
            }
            // What follows an entry must be a comma or the end: `1` starts `12` but is not it.
            let Some(after) = rest.strip_prefix(entry.get()) else { return false };
            rest = after;
        }
        (rest.trim_start_matches(JSON_WHITESPACE).strip_prefix(']'))
            .is_some_and(|end| end.trim_start_matches(JSON_WHITESPACE).is_empty())
    }

    /// The tools' names in list order, `None` for an entry that is no tool (not an object with a string
    /// `name`; of two `name` members the later counts, as when the entry is parsed).
    pub fn names(&self) -> impl Iterator<Item = Option<String>> + '_ {
        self.0.iter().map(|entry| name_of(entry))
    }

    /// What the stores keep of each tool (entries that are no tools skipped).
    pub fn declared(&self) -> impl Iterator<Item = DeclaredTool> + '_ {
        self.0.iter().filter_map(|entry| {
            let fields = read_fields(entry, true)?;
            Some(DeclaredTool {
                name: fields.name?,
                description: fields.description,
                input_schema: fields.input_schema,
            })
        })
    }
}

/// What JSON counts as whitespace between tokens.
const JSON_WHITESPACE: &[char] = &[' ', '\t', '\n', '\r'];

/// A shared list read by any deserializer (text held as text needs serde_json's own; a message already
/// parsed into a `Value`, as the CLI reads answers, is written back as text).
pub fn shared_from_any<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<std::sync::Arc<ToolsText>, D::Error> {
    let tools = Vec::<Value>::deserialize(deserializer)?;
    Ok(std::sync::Arc::new(ToolsText::from_values(&tools)))
}

/// A tool's name read from its text, parsing nothing else.
pub fn name_of(entry: &RawValue) -> Option<String> {
    read_fields(entry, false)?.name
}

/// The members of a tool the stores keep, as `Value::get` reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredTool {
    pub name: String,
    /// The description when it is a string.
    pub description: Option<String>,
    /// `inputSchema` as declared, `None` when absent.
    pub input_schema: Option<Value>,
}

#[derive(Default)]
struct Fields {
    name: Option<String>,
    description: Option<String>,
    input_schema: Option<Value>,
}

fn read_fields(entry: &RawValue, all: bool) -> Option<Fields> {
    let mut deserializer = serde_json::Deserializer::from_str(entry.get());
    deserializer.deserialize_any(FieldsVisitor { all }).ok().flatten()
}

#[derive(Deserialize)]
#[serde(field_identifier)]
enum Member {
    #[serde(rename = "name")]
    Name,
    #[serde(rename = "description")]
    Description,
    #[serde(rename = "inputSchema")]
    InputSchema,
    #[serde(other)]
    Other,
}

/// `Some(fields)` for an object, `None` for any other value.
struct FieldsVisitor {
    all: bool,
}

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Option<Fields>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Fields::default();
        while let Some(member) = map.next_key::<Member>()? {
            match member {
                // The later of two members wins, whatever its type (as in a parsed `Map`).
                Member::Name => fields.name = map.next_value::<Value>()?.as_str().map(str::to_owned),
                Member::Description if self.all => {
                    fields.description = map.next_value::<Value>()?.as_str().map(str::to_owned)
                }
                Member::InputSchema if self.all => fields.input_schema = Some(map.next_value::<Value>()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(fields))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn check_is_text_of(list: &str, text: &str, expected: bool) {
        assert_eq!(ToolsText::parse(list).expect("a list").is_text_of(text), expected, "{list} as {text:?}");
    }

    #[test]
    fn a_text_is_the_list_whose_entries_it_holds_exactly() {
        let list = r#"[{"name":"a"},1,"s"]"#;
        check_is_text_of(list, list, true);
        check_is_text_of(list, " \n[ {\"name\":\"a\"} ,\r\n1\t,\"s\" ]\n", true);
        check_is_text_of(list, r#"[{"name":"b"},1,"s"]"#, false);
        check_is_text_of(list, r#"[{"name": "a"},1,"s"]"#, false);
        check_is_text_of(list, r#"[{"name":"a"},12,"s"]"#, false);
        check_is_text_of(list, r#"[{"name":"a"},1.5,"s"]"#, false);
        check_is_text_of(list, r#"[{"name":"a"},1e3,"s"]"#, false);
        check_is_text_of(list, r#"[{"name":"a"},1]"#, false);
        check_is_text_of(list, r#"[{"name":"a"},1,"s",null]"#, false);
        check_is_text_of(list, r#"[{"name":"a"},1,"s"] x"#, false);
        check_is_text_of(list, r#"[{"name":"a"} 1,"s"]"#, false);
        check_is_text_of(list, r#"{"name":"a"}"#, false);
        check_is_text_of("[]", " [ ] ", true);
        check_is_text_of("[]", "[1]", false);
        check_is_text_of("[1]", "[]", false);
        check_is_text_of("[1]", "", false);
    }

    /// Lists of a few recurring entries (numbers that start one another among them), written with any
    /// whitespace: a text is a list's exactly when it parses to that list.
    fn arb_list_text() -> impl Strategy<Value = String> {
        let entry =
            prop::sample::select(vec!["1", "12", "1.5", "true", "\"a\"", r#"{"name":"a"}"#, "[]", "[1]"]);
        let space = prop::sample::select(vec!["", " ", "\n", "\t\r\n "]);
        prop::collection::vec((entry, space.clone(), space), 0..4).prop_map(|entries| {
            let inner: Vec<String> =
                entries.iter().map(|(entry, before, after)| format!("{before}{entry}{after}")).collect();
            format!("[{}]", inner.join(","))
        })
    }

    proptest! {
        #[test]
        fn a_text_is_a_list_exactly_when_it_parses_to_it(a in arb_list_text(), b in arb_list_text()) {
            let (list_a, list_b) = (text(&a), text(&b));
            prop_assert!(list_a.is_text_of(&a));
            prop_assert_eq!(list_a.is_text_of(&b), list_a == list_b, "{} as {}", a, b);
        }
    }

    fn text(tools: &str) -> ToolsText {
        ToolsText::parse(tools).expect("a JSON array")
    }

    /// Names, descriptions and input schemas read from text are what `Value::get` reads from the parsed
    /// entry, for tools and for entries that are none.
    #[test]
    fn fields_read_from_text_are_the_parsed_entrys() {
        let list = r#"[
            {"name": "a", "description": "d", "inputSchema": {"type": "object"}, "x": [1, {"y": 2}]},
            {"name": "first", "name": "second"},
            {"name": "gone", "name": 7},
            {"name": 7, "name": "back"},
            {"name": "esc\u0061ped", "description": 3},
            {"description": "no name"},
            "a string", 12, null, true, [1, 2], {}
        ]"#;
        let tools = text(list);
        let parsed: Vec<Value> = serde_json::from_str(list).expect("parses");
        assert_eq!(tools.values(), parsed);
        let names: Vec<Option<String>> = tools.names().collect();
        let expected: Vec<Option<String>> =
            parsed.iter().map(|tool| tool.get("name").and_then(Value::as_str).map(str::to_owned)).collect();
        assert_eq!(names, expected);
        let declared: Vec<DeclaredTool> = tools.declared().collect();
        let expected: Vec<DeclaredTool> = parsed
            .iter()
            .filter_map(|tool| {
                Some(DeclaredTool {
                    name: tool.get("name")?.as_str()?.to_owned(),
                    description: tool.get("description").and_then(Value::as_str).map(str::to_owned),
                    input_schema: tool.get("inputSchema").cloned(),
                })
            })
            .collect();
        assert_eq!(declared, expected);
        assert_eq!(
            declared.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["a", "second", "back", "escaped"]
        );
    }

    #[test]
    fn text_round_trips_and_compares_as_text() {
        let tools = text(r#"[ {"name": "a"}, {"name":"b"} ]"#);
        assert_eq!(serde_json::to_string(&tools).expect("serialises"), r#"[{"name": "a"},{"name":"b"}]"#);
        let from_values = ToolsText::from_values(&[json!({"name": "a"}), json!({"name": "b"})]);
        assert_ne!(tools, from_values, "whitespace differs");
        assert_eq!(tools.values(), from_values.values());
        assert_eq!(from_values, text(r#"[{"name":"a"},{"name":"b"}]"#));
        assert_eq!(tools.text_bytes(), r#"{"name": "a"}{"name":"b"}"#.len());
        assert!(ToolsText::parse(r#"{"name":"a"}"#).is_err(), "not an array");
        assert!(ToolsText::parse(r#"[{"name":"a"]"#).is_err(), "not JSON");
    }

    /// A drift event's lists are written as text and read back by serde_json from text or from a
    /// `Value` (the CLI reads API answers so).
    #[test]
    fn shared_lists_read_from_text_and_from_values() {
        #[derive(Serialize, Deserialize)]
        struct Event {
            #[serde(deserialize_with = "shared_from_any")]
            tools: std::sync::Arc<ToolsText>,
        }
        let event = Event { tools: std::sync::Arc::new(text(r#"[{"name": "a", "x": [1]}]"#)) };
        let written = serde_json::to_string(&event).expect("serialises");
        assert_eq!(written, r#"{"tools":[{"name": "a", "x": [1]}]}"#);
        let from_text: Event = serde_json::from_str(&written).expect("from text");
        let value: Value = serde_json::from_str(&written).expect("a value");
        let from_value: Event = serde_json::from_value(value).expect("from a value");
        for read in [from_text, from_value] {
            assert_eq!(read.tools.values(), vec![json!({"name": "a", "x": [1]})]);
        }
    }
}
