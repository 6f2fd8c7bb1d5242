//! Reading a shape string (DESIGN.md §3) back into a tree, for the ranker and the contract check.

use std::fmt::{self, Write};

use super::{escape_key_into, DEPTH_LIMIT};

/// A parsed shape. Object fields keep the order the shape wrote them in (sorted by key bytes when the
/// shape came from [`crate::shape::fingerprint`]); keys, type names and classes are unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    /// `null`, `bool`, `number` or `string`.
    Atom(&'static str),
    /// `[]` (`None`) or the shape of the first element.
    Array(Option<Box<Node>>),
    Object(Vec<(String, Node)>),
    /// `<typed:T>` or `<typed:T:C>`: a value driftline did not look into.
    Typed {
        name: String,
        class: Option<String>,
    },
}

impl Node {
    /// The kind as people read it: `null`, `bool`, `number`, `string`, `array`, `object` or `typed`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Node::Atom(kind) => kind,
            Node::Array(_) => "array",
            Node::Object(_) => "object",
            Node::Typed { .. } => "typed",
        }
    }

    /// Whether a typed sentinel sits anywhere in this shape.
    pub(crate) fn has_typed(&self) -> bool {
        match self {
            Node::Atom(_) => false,
            Node::Array(element) => element.as_deref().is_some_and(Node::has_typed),
            Node::Object(fields) => fields.iter().any(|(_, node)| node.has_typed()),
            Node::Typed { .. } => true,
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let escaped = |text: &str| {
            let mut out = String::new();
            escape_key_into(&mut out, text);
            out
        };
        match self {
            Node::Atom(kind) => f.write_str(kind),
            Node::Array(None) => f.write_str("[]"),
            Node::Array(Some(element)) => write!(f, "[{element}]"),
            Node::Object(fields) => {
                f.write_char('{')?;
                for (index, (key, node)) in fields.iter().enumerate() {
                    if index > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{}:{node}", escaped(key))?;
                }
                f.write_char('}')
            }
            Node::Typed { name, class } => {
                write!(f, "<typed:{}", escaped(name))?;
                if let Some(class) = class {
                    write!(f, ":{}", escaped(class))?;
                }
                f.write_char('>')
            }
        }
    }
}

/// Parses a shape string written by [`crate::shape`]; `None` when it is empty or malformed, or nests
/// containers deeper than a fingerprint ever does (so no input can exhaust the stack).
pub(crate) fn parse(text: &str) -> Option<Node> {
    let mut parser = Parser { chars: text.chars().peekable(), depth: 0 };
    let node = parser.node()?;
    parser.chars.next().is_none().then_some(node)
}

struct Parser<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    /// Containers open around the current position.
    depth: usize,
}

impl Parser<'_> {
    fn node(&mut self) -> Option<Node> {
        match *self.chars.peek()? {
            '[' => {
                self.chars.next();
                self.enter()?;
                let node = if self.eat(']') {
                    Node::Array(None)
                } else {
                    let element = self.node()?;
                    self.eat(']').then(|| Node::Array(Some(Box::new(element))))?
                };
                self.depth -= 1;
                Some(node)
            }
            '{' => {
                self.chars.next();
                self.enter()?;
                let mut fields = Vec::new();
                if !self.eat('}') {
                    loop {
                        let (key, _) = self.escaped_until(&[':'])?;
                        let node = self.node()?;
                        fields.push((key, node));
                        if self.eat('}') {
                            break;
                        }
                        if !self.eat(',') {
                            return None;
                        }
                    }
                }
                self.depth -= 1;
                Some(Node::Object(fields))
            }
            '<' => {
                if !self.word("<typed:") {
                    return None;
                }
                let (name, end) = self.escaped_until(&[':', '>'])?;
                let class = match end {
                    ':' => Some(self.escaped_until(&['>'])?.0),
                    _ => None,
                };
                Some(Node::Typed { name, class })
            }
            _ => {
                for atom in ["null", "bool", "number", "string"] {
                    if self.word(atom) {
                        return Some(Node::Atom(atom));
                    }
                }
                None
            }
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= DEPTH_LIMIT).then_some(())
    }

    fn eat(&mut self, expected: char) -> bool {
        self.chars.next_if_eq(&expected).is_some()
    }

    fn word(&mut self, word: &str) -> bool {
        let mut lookahead = self.chars.clone();
        if word.chars().all(|c| lookahead.next() == Some(c)) {
            self.chars = lookahead;
            true
        } else {
            false
        }
    }

    /// Escaped text (a key, a type name, a class) up to the first unescaped character of `ends`, which
    /// is consumed and returned with the unescaped text. Any other unescaped structural character
    /// makes the shape malformed.
    fn escaped_until(&mut self, ends: &[char]) -> Option<(String, char)> {
        let mut text = String::new();
        loop {
            match self.chars.next()? {
                c if ends.contains(&c) => return Some((text, c)),
                '\\' => match self.chars.next()? {
                    'u' => {
                        let hex: String = (0..4).filter_map(|_| self.chars.next()).collect();
                        text.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    c => text.push(c),
                },
                ':' | ',' | '{' | '}' | '[' | ']' | '<' | '>' | '"' => return None,
                c => text.push(c),
            }
        }
    }
}

/// Where in a value a shape difference sits, as people read it: `(root)`, `result.id`, `rows[].a`.
pub(crate) enum ShapePath<'a> {
    Root,
    Field(&'a ShapePath<'a>, &'a str),
    Elements(&'a ShapePath<'a>),
}

impl fmt::Display for ShapePath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapePath::Root => f.write_str("(root)"),
            ShapePath::Field(ShapePath::Root, key) => f.write_str(key),
            ShapePath::Field(parent, key) => write!(f, "{parent}.{key}"),
            ShapePath::Elements(parent) => write!(f, "{parent}[]"),
        }
    }
}
