//! Whether a declared `outputSchema` admits a return shape.
//!
//! A shape keeps structure and drops values (DESIGN.md §3), so the check is one-sided: it reports a
//! mismatch only for what the shape proves (a kind, a key present or absent, the first element of an
//! array) and admits whatever a shape cannot show (formats, patterns, bounds, later elements, `not`,
//! conditionals, references it cannot follow).
//!
//! The schema is compiled once into a graph of rules: local `$ref`s become edges, so a recursive schema
//! (a tree of nodes) is checked as deep as the shape goes, and a definition referenced many times is
//! compiled once. Every check walks that graph under a step budget, so no schema can stall a call.

use std::collections::{BTreeSet, HashMap, HashSet};

use driftline_schemas::{ReasonChange, ShapeReason};
use serde_json::{Map, Value};

use crate::shape::parse::{parse, Node, ShapePath as Path};
use crate::tool_drift::refs::decode_fragment;

/// Schema nodes one check may visit (each rule applied to one part of the shape counts one); past it
/// the check is inconclusive.
pub const STEP_BUDGET: usize = 100_000;
/// Rules a compiled schema may hold; a larger schema is too large to check (every check inconclusive).
pub const SCHEMA_NODE_LIMIT: usize = 100_000;
/// At most this many reasons are reported for one call; the first ones say enough.
pub const MAX_REASONS: usize = 50;

/// How deep rules may nest in one check: shapes nest at most 128 containers, so only a chain of
/// references applied in place gets near it.
const MAX_EVAL_DEPTH: usize = 400;
/// How deep a schema may nest as written (JSON read from text nests at most 128 anyway).
const MAX_COMPILE_DEPTH: usize = 256;

pub const MISSING_REQUIRED: &str = "required by the declared schema, missing";
pub const NOT_ALLOWED: &str = "not allowed by the declared schema";
pub const MISSING_STRUCTURED_CONTENT: &str =
    "a tool that declares an output schema must return structuredContent; missing";

/// What a declaration says about one return shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// Why not, in the order found: missing required keys, then the keys present, in key order.
    Mismatch(Vec<ShapeReason>),
    /// The shape could not be read, the schema is too large, or the check ran out of budget.
    Inconclusive,
}

/// [`CompiledOutput::check`] for a schema used once.
pub fn check(schema: &Value, shape: &str) -> Verdict {
    CompiledOutput::new(schema).check(shape)
}

/// A declared output schema, ready to check shapes against.
#[derive(Debug, Clone)]
pub struct CompiledOutput {
    nodes: Vec<Schema>,
    root: Id,
    /// The schema exceeded [`SCHEMA_NODE_LIMIT`] or nested too deep: nothing can be told from it.
    too_large: bool,
    /// The schema itself declares a `content` property, so a value with one and no `structuredContent`
    /// is not an MCP envelope.
    declares_content: bool,
}

type Id = usize;

#[derive(Debug, Clone, PartialEq)]
enum Schema {
    /// `true`, `{}`, or something that is not a schema: admits everything.
    Any,
    /// `false`: admits nothing.
    Never,
    Rules(Box<Rules>),
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Rules {
    /// From `type` (with OpenAPI `nullable`), `enum` and `const`; `None` when none constrains the kind.
    kinds: Option<Kinds>,
    /// Sorted by key, for binary search.
    properties: Vec<(String, Id)>,
    /// In declared order, without repeats.
    required: Vec<String>,
    /// `patternProperties` is present: a key outside `properties` may match a pattern, and regexes
    /// are not evaluated, so such keys are not judged at all.
    patterns: bool,
    additional: Option<Id>,
    unevaluated: Option<Id>,
    /// Keys that in-place applicators (`allOf`, `anyOf`, `oneOf`, `$ref`) may evaluate, sorted; `None`
    /// when that cannot be told. Only computed when `unevaluated` is set.
    evaluated: Option<Vec<String>>,
    /// The schema for an array's first element (`prefixItems[0]`, `items`, draft-4 `items[0]`).
    first_item: Option<Id>,
    /// `allOf` branches and the target of `$ref`.
    all_of: Vec<Id>,
    /// `anyOf` and `oneOf` groups.
    any_of: Vec<Vec<Id>>,
    /// Keywords that evaluate properties in ways not followed here (`if`/`then`/`else`,
    /// `dependentSchemas`, references not followed): `unevaluatedProperties` around it cannot be judged.
    opaque: bool,
}

impl CompiledOutput {
    pub fn new(schema: &Value) -> Self {
        let mut compiler = Compiler {
            root: schema,
            nodes: vec![Schema::Any],
            refs: HashMap::from([(String::new(), 0)]),
            pending: Vec::new(),
            too_large: false,
        };
        compiler.nodes[0] = compiler.compile(schema, 0);
        // References are compiled from a work list, not by recursion: a long chain of definitions
        // each pointing at the next costs a loop, not a stack.
        while let Some((id, target)) = compiler.pending.pop() {
            compiler.nodes[id] = compiler.compile(target, 0);
        }
        let mut nodes = compiler.nodes;
        let mut budget = STEP_BUDGET;
        for id in 0..nodes.len() {
            let wants = matches!(&nodes[id], Schema::Rules(rules) if rules.unevaluated.is_some());
            if wants {
                let evaluated = in_place_names(&nodes, id, &mut budget)
                    .filter(|names| !names.opaque)
                    .map(|names| names.names.into_iter().map(str::to_owned).collect());
                if let Schema::Rules(rules) = &mut nodes[id] {
                    rules.evaluated = evaluated;
                }
            }
        }
        // Whatever the schema names in place counts as declared; past the budget, assume it does (the
        // value is then checked as it is, never unwrapped on a guess).
        let declares_content = in_place_names(&nodes, 0, &mut { STEP_BUDGET })
            .is_none_or(|names| names.names.contains("content"));
        CompiledOutput { nodes, root: 0, too_large: compiler.too_large, declares_content }
    }

    /// Checks one shape string (as [`crate::shape::fingerprint`] writes it).
    ///
    /// A typed sentinel (`<typed:T>`) is admitted where it sits, by any schema but `false`: it stands
    /// for a value driftline did not look into, so nothing about its kind is proven, while the rest of
    /// the shape is still checked.
    pub fn check(&self, shape: &str) -> Verdict {
        let Some((mut eval, node)) = self.prepare(shape, "returned") else {
            return Verdict::Inconclusive;
        };
        let structured = Path::Field(&Path::Root, "structuredContent");
        let result = match envelope(&node) {
            // A whole MCP CallToolResult: the declaration describes its structured content. With a
            // `structuredContent` next to the `content` array it is one even when the declaration has a
            // `content` property of its own (the reference filesystem server's `read_file` declares
            // `{content: string}`); without one, such a value is read as the tool's own.
            Some(Some(content)) => eval.eval(self.root, content, &structured),
            Some(None) if !self.declares_content => Ok(vec![ShapeReason {
                path: structured.to_string(),
                change: ReasonChange::Removed,
                before: Some(eval.describe(self.root)),
                after: None,
                detail: Some(MISSING_STRUCTURED_CONTENT.to_owned()),
            }]),
            _ => eval.eval(self.root, &node, &Path::Root),
        };
        verdict(result)
    }

    /// Checks the shape of a call's arguments against a tool's `inputSchema` (compiled like an output
    /// schema): the value as it is, never read as a result envelope, by the same one-sided rules, so what a
    /// shape cannot show (formats, bounds, patterns, later elements) is admitted, never reported. A type
    /// reason says what was sent: `declared string, sent number`.
    pub fn check_arguments(&self, shape: &str) -> Verdict {
        let Some((mut eval, node)) = self.prepare(shape, "sent") else {
            return Verdict::Inconclusive;
        };
        verdict(eval.eval(self.root, &node, &Path::Root))
    }

    /// The shape read and its evaluation set up; `None` when nothing can be told (the schema is too large,
    /// the shape does not read). `observed` words type reasons: `declared string, {observed} number`.
    fn prepare(&self, shape: &str, observed: &'static str) -> Option<(Eval<'_>, Node)> {
        if self.too_large {
            return None;
        }
        let mut node = parse(shape)?;
        normalize(&mut node);
        Some((Eval { nodes: &self.nodes, steps: 0, depth: 0, in_place: Vec::new(), observed }, node))
    }
}

fn verdict(result: Result<Vec<ShapeReason>, Exhausted>) -> Verdict {
    match result {
        Err(Exhausted) => Verdict::Inconclusive,
        Ok(reasons) if reasons.is_empty() => Verdict::Admitted,
        Ok(reasons) => Verdict::Mismatch(tidy(reasons)),
    }
}

/// `Some(structuredContent)` when the value is an MCP CallToolResult: an object whose keys are only the
/// envelope's (`content`, `isError`, `structuredContent`, `_meta`, and `resultType` of 2026-07-28, which
/// the official SDKs write on every result), with a `content` array, or — since 2026-07-28 — a
/// `resultType` or a `structuredContent` standing without `content`. Its structured content may be any
/// JSON value (an array too).
fn envelope(node: &Node) -> Option<Option<&Node>> {
    let Node::Object(fields) = node else { return None };
    let envelope_keys = fields.iter().all(|(key, _)| {
        matches!(key.as_str(), "content" | "isError" | "structuredContent" | "_meta" | "resultType")
    });
    let structured = field(fields, "structuredContent");
    let is_envelope = match field(fields, "content") {
        Some(content) => matches!(content, Node::Array(_)),
        None => structured.is_some() || field(fields, "resultType").is_some(),
    };
    (envelope_keys && is_envelope).then_some(structured)
}

/// Object fields sorted by key with duplicates dropped (the last wins, as in the fingerprint), so
/// lookups can binary-search; a shape written by the fingerprint is already so.
fn normalize(node: &mut Node) {
    match node {
        Node::Array(Some(element)) => normalize(element),
        Node::Object(fields) => {
            fields.iter_mut().for_each(|(_, child)| normalize(child));
            if !fields.windows(2).all(|pair| pair[0].0 < pair[1].0) {
                // Reversed, a stable sort puts the last of equal keys first, and dedup keeps the first.
                fields.reverse();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                fields.dedup_by(|later, kept| later.0 == kept.0);
            }
        }
        _ => {}
    }
}

fn field<'n>(fields: &'n [(String, Node)], key: &str) -> Option<&'n Node> {
    fields.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok().map(|index| &fields[index].1)
}

/// Identical reasons once (two `allOf` branches may require the same key), at most [`MAX_REASONS`].
fn tidy(reasons: Vec<ShapeReason>) -> Vec<ShapeReason> {
    let mut kept: Vec<ShapeReason> = Vec::new();
    for reason in reasons {
        if kept.len() == MAX_REASONS {
            break;
        }
        if !kept.contains(&reason) {
            kept.push(reason);
        }
    }
    kept
}

// ---------------------------------------------------------------------------------------------------
// Kinds

/// A set of JSON Schema types. `integer` is kept apart from `number` only to be named as declared:
/// a shape says `number` for both, so either admits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kinds(u8);

impl Kinds {
    const NULL: u8 = 1;
    const BOOLEAN: u8 = 2;
    const INTEGER: u8 = 4;
    const NUMBER: u8 = 8;
    const STRING: u8 = 16;
    const ARRAY: u8 = 32;
    const OBJECT: u8 = 64;
    /// The order kinds are named in: containers first, `null` last (`string|null`).
    const NAMES: [(u8, &'static str); 7] = [
        (Self::OBJECT, "object"),
        (Self::ARRAY, "array"),
        (Self::STRING, "string"),
        (Self::NUMBER, "number"),
        (Self::INTEGER, "integer"),
        (Self::BOOLEAN, "boolean"),
        (Self::NULL, "null"),
    ];

    fn of_name(name: &str) -> Option<Kinds> {
        Self::NAMES.iter().find(|(_, n)| *n == name).map(|(bit, _)| Kinds(*bit))
    }

    fn of_value(value: &Value) -> Kinds {
        Kinds(match value {
            Value::Null => Self::NULL,
            Value::Bool(_) => Self::BOOLEAN,
            // Named `number` even when integral: a listed `3` reads as a number, and `integer` from
            // `type` still narrows it (see `intersect`).
            Value::Number(_) => Self::NUMBER,
            Value::String(_) => Self::STRING,
            Value::Array(_) => Self::ARRAY,
            Value::Object(_) => Self::OBJECT,
        })
    }

    fn union(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    /// Both constraints at once; integers are numbers, so `number` and `integer` meet in `integer`.
    fn intersect(self, other: Kinds) -> Kinds {
        let mut bits = self.0 & other.0;
        let has = |kinds: Kinds, bit: u8| kinds.0 & bit != 0;
        if (has(self, Self::NUMBER) && has(other, Self::INTEGER))
            || (has(other, Self::NUMBER) && has(self, Self::INTEGER))
        {
            bits |= Self::INTEGER;
        }
        Kinds(bits)
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn admits(self, node: &Node) -> bool {
        let bits = match node {
            Node::Atom("null") => Self::NULL,
            Node::Atom("bool") => Self::BOOLEAN,
            Node::Atom("number") => Self::INTEGER | Self::NUMBER,
            Node::Atom(_) => Self::STRING,
            Node::Array(_) => Self::ARRAY,
            Node::Object(_) => Self::OBJECT,
            // A sentinel's kind is not known, so no kind is proven wrong.
            Node::Typed { .. } => return true,
        };
        self.0 & bits != 0
    }

    /// The declared kinds joined by `|` (`number` covers `integer`).
    fn names(self) -> String {
        let number = self.0 & Self::NUMBER != 0;
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0 && !(*bit == Self::INTEGER && number))
            .map(|(_, name)| *name)
            .collect();
        names.join("|")
    }
}

/// What `type`, `nullable`, `enum` and `const` leave admitted; `None` when they do not constrain it.
fn declared_kinds(map: &Map<String, Value>) -> Option<Kinds> {
    let mut kinds = match map.get("type") {
        Some(Value::String(name)) => Kinds::of_name(name),
        // An unknown or malformed entry (draft-3 `any`, a schema in the list) makes the list unreadable.
        Some(Value::Array(names)) if !names.is_empty() => names.iter().try_fold(Kinds(0), |kinds, name| {
            name.as_str().and_then(Kinds::of_name).map(|kind| kinds.union(kind))
        }),
        _ => None,
    };
    let listed = match (map.get("enum"), map.get("const")) {
        (_, Some(value)) => Some(Kinds::of_value(value)),
        (Some(Value::Array(values)), None) => {
            Some(values.iter().fold(Kinds(0), |kinds, value| kinds.union(Kinds::of_value(value))))
        }
        _ => None,
    };
    if let Some(listed) = listed {
        kinds = Some(kinds.map_or(listed, |declared| declared.intersect(listed)));
    }
    // OpenAPI's `nullable: true` admits null whatever else is said (3.0 left its reading with `enum`
    // open; admitting is the reading that never reports a mismatch the author did not mean).
    if map.get("nullable") == Some(&Value::Bool(true)) {
        kinds = kinds.map(|kinds| kinds.union(Kinds(Kinds::NULL)));
    }
    kinds
}

// ---------------------------------------------------------------------------------------------------
// Compiling

struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Schema>,
    /// Decoded JSON pointers already given a node.
    refs: HashMap<String, Id>,
    /// References given a node whose schema is still to compile.
    pending: Vec<(Id, &'a Value)>,
    too_large: bool,
}

impl<'a> Compiler<'a> {
    fn child(&mut self, value: &'a Value, depth: usize) -> Id {
        let schema = self.compile(value, depth + 1);
        self.nodes.push(schema);
        self.nodes.len() - 1
    }

    fn compile(&mut self, value: &'a Value, depth: usize) -> Schema {
        if self.nodes.len() >= SCHEMA_NODE_LIMIT || depth > MAX_COMPILE_DEPTH {
            self.too_large = true;
            return Schema::Any;
        }
        match value {
            Value::Bool(false) => Schema::Never,
            Value::Object(map) => self.rules(map, depth),
            _ => Schema::Any,
        }
    }

    fn rules(&mut self, map: &'a Map<String, Value>, depth: usize) -> Schema {
        let mut rules = Rules { kinds: declared_kinds(map), ..Rules::default() };
        if let Some(Value::Object(properties)) = map.get("properties") {
            for (key, schema) in properties {
                let id = self.child(schema, depth);
                rules.properties.push((key.clone(), id));
            }
            rules.properties.sort_by(|a, b| a.0.cmp(&b.0));
        }
        if let Some(Value::Array(required)) = map.get("required") {
            let mut seen = HashSet::new();
            for key in required.iter().filter_map(Value::as_str) {
                if seen.insert(key) {
                    rules.required.push(key.to_owned());
                }
            }
        }
        rules.patterns = matches!(map.get("patternProperties"), Some(Value::Object(p)) if !p.is_empty());
        rules.additional = map.get("additionalProperties").map(|schema| self.child(schema, depth));
        rules.unevaluated = map.get("unevaluatedProperties").map(|schema| self.child(schema, depth));
        rules.first_item = match (map.get("prefixItems"), map.get("items")) {
            (Some(Value::Array(prefix)), _) if !prefix.is_empty() => Some(self.child(&prefix[0], depth)),
            (_, Some(Value::Array(tuple))) => match tuple.first() {
                Some(first) => Some(self.child(first, depth)),
                // An empty draft-4 tuple: every element falls to `additionalItems`.
                None => map.get("additionalItems").map(|schema| self.child(schema, depth)),
            },
            (_, Some(items)) => Some(self.child(items, depth)),
            _ => None,
        };
        if let Some(Value::Array(branches)) = map.get("allOf") {
            rules.all_of = branches.iter().map(|branch| self.child(branch, depth)).collect();
        }
        for keyword in ["anyOf", "oneOf"] {
            // oneOf's "exactly one" cannot be proven from a shape: it reads as anyOf.
            if let Some(Value::Array(branches)) = map.get(keyword) {
                if !branches.is_empty() {
                    rules.any_of.push(branches.iter().map(|branch| self.child(branch, depth)).collect());
                }
            }
        }
        match map.get("$ref") {
            Some(Value::String(reference)) => match self.reference(reference) {
                // Siblings of `$ref` apply beside it (2019-09 on; in draft-7 they are meant alike).
                Some(target) => rules.all_of.push(target),
                None => rules.opaque = true,
            },
            Some(_) => rules.opaque = true,
            None => {}
        }
        let opaque_keywords =
            ["if", "then", "else", "dependentSchemas", "dependencies", "$dynamicRef", "$recursiveRef"];
        if opaque_keywords.iter().any(|keyword| map.contains_key(*keyword)) {
            rules.opaque = true;
        }
        if rules == Rules::default() {
            Schema::Any
        } else {
            Schema::Rules(Box::new(rules))
        }
    }

    /// The node of a local reference (`#`, `#/$defs/X`, any JSON pointer into the document), compiled
    /// later; `None` for another document, an anchor, or a pointer to nothing.
    fn reference(&mut self, reference: &str) -> Option<Id> {
        let pointer = reference.strip_prefix('#').and_then(decode_fragment)?;
        if let Some(&id) = self.refs.get(&pointer) {
            return Some(id);
        }
        let target = self.root.pointer(&pointer)?;
        self.nodes.push(Schema::Any);
        let id = self.nodes.len() - 1;
        self.refs.insert(pointer, id);
        self.pending.push((id, target));
        Some(id)
    }
}

struct InPlace<'n> {
    names: BTreeSet<&'n str>,
    /// Something in place evaluates properties in a way not followed here.
    opaque: bool,
}

/// The property names `start` and the schemas it applies in place declare; `None` past `budget`.
fn in_place_names<'n>(nodes: &'n [Schema], start: Id, budget: &mut usize) -> Option<InPlace<'n>> {
    let mut found = InPlace { names: BTreeSet::new(), opaque: false };
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        *budget = budget.checked_sub(1)?;
        let Schema::Rules(rules) = &nodes[id] else { continue };
        found.names.extend(rules.properties.iter().map(|(key, _)| key.as_str()));
        // Beside `start`, these evaluate every key (or keys by pattern): all are evaluated.
        let evaluates_all = rules.patterns || rules.additional.is_some() || rules.unevaluated.is_some();
        found.opaque |= rules.opaque || (id != start && evaluates_all);
        stack.extend(&rules.all_of);
        stack.extend(rules.any_of.iter().flatten());
    }
    Some(found)
}

// ---------------------------------------------------------------------------------------------------
// Checking

/// The step budget or the depth ran out.
struct Exhausted;

struct Eval<'c> {
    nodes: &'c [Schema],
    steps: usize,
    depth: usize,
    /// Rules being applied to the current part of the shape, to cut a reference cycle that never
    /// descends into the shape (re-applying a rule already being applied proves nothing new).
    in_place: Vec<Id>,
    /// How a type reason names what the value was: `returned` (outputs) or `sent` (arguments).
    observed: &'static str,
}

type Reasons = Result<Vec<ShapeReason>, Exhausted>;

impl<'c> Eval<'c> {
    fn step(&mut self) -> Result<(), Exhausted> {
        self.steps += 1;
        if self.steps > STEP_BUDGET {
            Err(Exhausted)
        } else {
            Ok(())
        }
    }

    /// Applies rule `id` to `node` in place (the same part of the shape).
    fn eval(&mut self, id: Id, node: &Node, path: &Path<'_>) -> Reasons {
        self.step()?;
        if self.in_place.contains(&id) {
            return Ok(Vec::new());
        }
        if self.depth >= MAX_EVAL_DEPTH {
            return Err(Exhausted);
        }
        self.depth += 1;
        self.in_place.push(id);
        let reasons = self.apply(id, node, path);
        self.in_place.pop();
        self.depth -= 1;
        reasons
    }

    /// Applies rule `id` to a part inside the current one.
    fn descend(&mut self, id: Id, node: &Node, path: &Path<'_>) -> Reasons {
        let outer = std::mem::take(&mut self.in_place);
        let reasons = self.eval(id, node, path);
        self.in_place = outer;
        reasons
    }

    fn apply(&mut self, id: Id, node: &Node, path: &Path<'_>) -> Reasons {
        let nodes = self.nodes;
        let rules = match &nodes[id] {
            Schema::Any => return Ok(Vec::new()),
            Schema::Never => return Ok(vec![not_allowed(path, node)]),
            Schema::Rules(rules) => rules,
        };
        if let Some(kinds) = rules.kinds {
            if kinds.is_empty() {
                return Ok(vec![not_allowed(path, node)]);
            }
            if !kinds.admits(node) {
                return Ok(vec![type_changed(path, kinds.names(), node.kind(), self.observed)]);
            }
        }
        let mut reasons = Vec::new();
        match node {
            // Nothing inside a sentinel is known.
            Node::Typed { .. } => return Ok(reasons),
            Node::Object(fields) => self.object(rules, fields, path, &mut reasons)?,
            Node::Array(Some(element)) => {
                if let Some(item) = rules.first_item {
                    reasons.extend(self.descend(item, element, &Path::Elements(path))?);
                }
            }
            Node::Array(None) | Node::Atom(_) => {}
        }
        for &branch in &rules.all_of {
            reasons.extend(self.eval(branch, node, path)?);
        }
        for group in &rules.any_of {
            reasons.extend(self.any_of(group, node, path)?);
        }
        Ok(reasons)
    }

    fn object(
        &mut self,
        rules: &Rules,
        fields: &[(String, Node)],
        path: &Path<'_>,
        reasons: &mut Vec<ShapeReason>,
    ) -> Result<(), Exhausted> {
        for key in &rules.required {
            self.step()?;
            if field(fields, key).is_none() {
                let declared =
                    property(rules, key).map_or_else(|| "value".to_owned(), |id| self.describe(id));
                reasons.push(ShapeReason {
                    path: Path::Field(path, key).to_string(),
                    change: ReasonChange::Removed,
                    before: Some(declared),
                    after: None,
                    detail: Some(MISSING_REQUIRED.to_owned()),
                });
            }
        }
        // Keys no rule applies to cost nothing: only a rule applied counts against the budget.
        for (key, child) in fields {
            let schema = match property(rules, key) {
                Some(id) => Some(id),
                None if rules.patterns => None,
                None => rules.additional.or_else(|| {
                    let evaluated = rules.evaluated.as_ref()?;
                    rules.unevaluated.filter(|_| evaluated.binary_search(key).is_err())
                }),
            };
            if let Some(id) = schema {
                reasons.extend(self.descend(id, child, &Path::Field(path, key))?);
            }
        }
        Ok(())
    }

    /// Admitted when a branch admits; otherwise the reasons of the closest branch (fewest reasons,
    /// the first of equals). When every branch rejects only the kind of this very value, one reason
    /// names all the kinds they declare (`string|null` for an optional string).
    fn any_of(&mut self, group: &[Id], node: &Node, path: &Path<'_>) -> Reasons {
        let mut failures = Vec::with_capacity(group.len());
        for &branch in group {
            let reasons = self.eval(branch, node, path)?;
            if reasons.is_empty() {
                return Ok(reasons);
            }
            failures.push(reasons);
        }
        let here = path.to_string();
        let kind_only = |reasons: &Vec<ShapeReason>| matches!(reasons.as_slice(), [r] if r.change == ReasonChange::TypeChanged && r.path == here);
        if failures.iter().all(kind_only) {
            let mut declared: Vec<&str> = Vec::new();
            for name in failures.iter().filter_map(|r| r[0].before.as_deref()).flat_map(|b| b.split('|')) {
                if !declared.contains(&name) {
                    declared.push(name);
                }
            }
            return Ok(vec![type_changed(path, declared.join("|"), node.kind(), self.observed)]);
        }
        Ok(failures.into_iter().min_by_key(Vec::len).unwrap_or_default())
    }

    /// The declared kind of a rule for people (`string`, `string|null`), or `value` when it says none.
    fn describe(&self, mut id: Id) -> String {
        // A few hops through `$ref` / `allOf`, enough for `{"$ref": "#/$defs/X"}` properties.
        for _ in 0..8 {
            let Schema::Rules(rules) = &self.nodes[id] else { break };
            if let Some(kinds) = rules.kinds.filter(|kinds| !kinds.is_empty()) {
                return kinds.names();
            }
            if let [group] = rules.any_of.as_slice() {
                let kinds = group.iter().try_fold(Kinds(0), |all, &branch| match &self.nodes[branch] {
                    Schema::Rules(branch) => branch.kinds.map(|kinds| all.union(kinds)),
                    _ => None,
                });
                if let Some(kinds) = kinds.filter(|kinds| !kinds.is_empty()) {
                    return kinds.names();
                }
            }
            match rules.all_of.first() {
                Some(&next) => id = next,
                None => break,
            }
        }
        "value".to_owned()
    }
}

fn property(rules: &Rules, key: &str) -> Option<Id> {
    rules
        .properties
        .binary_search_by(|(k, _)| k.as_str().cmp(key))
        .ok()
        .map(|index| rules.properties[index].1)
}

fn type_changed(path: &Path<'_>, declared: String, found: &str, observed: &str) -> ShapeReason {
    ShapeReason {
        path: path.to_string(),
        change: ReasonChange::TypeChanged,
        detail: Some(format!("declared {declared}, {observed} {found}")),
        before: Some(declared),
        after: Some(found.to_owned()),
    }
}

fn not_allowed(path: &Path<'_>, node: &Node) -> ShapeReason {
    ShapeReason {
        path: path.to_string(),
        change: ReasonChange::Added,
        before: None,
        after: Some(node.to_string()),
        detail: Some(NOT_ALLOWED.to_owned()),
    }
}
