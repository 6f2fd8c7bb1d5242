//! Ranking a shape change from a structural diff of the baseline and the new shape (DESIGN.md §4.5).

use driftline_schemas::{ReasonChange, ShapeRanking, ShapeReason};

use crate::shape::parse::{parse, Node, ShapePath as Path};

/// Why a pair of shapes could not be ranked.
pub const EMPTY_SHAPE: &str = "one of the two shapes is empty, so nothing can be compared";
pub const UNREADABLE_SHAPE: &str =
    "a shape string could not be parsed, so the difference cannot be ranked without guessing";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranked {
    pub ranking: Ranking,
    pub reasons: Vec<ShapeReason>,
}

/// [`ShapeRanking`] plus `Unchanged`, which a firing never has but a direct comparison can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    Ranked(ShapeRanking),
    Unchanged,
}

impl Ranked {
    /// The ranking a signal carries (`unchanged` cannot fire; it reads as compatible).
    pub fn signal_ranking(&self) -> ShapeRanking {
        match self.ranking {
            Ranking::Ranked(ranking) => ranking,
            Ranking::Unchanged => ShapeRanking::Compatible,
        }
    }

    /// The reasons as people read them; for an indeterminate pair, why it could not be ranked.
    pub fn explanations(&self, baseline: &str, current: &str) -> Vec<String> {
        match self.ranking {
            Ranking::Ranked(ShapeRanking::Indeterminate) if baseline.is_empty() || current.is_empty() => {
                vec![EMPTY_SHAPE.to_owned()]
            }
            Ranking::Ranked(ShapeRanking::Indeterminate) => vec![UNREADABLE_SHAPE.to_owned()],
            _ => self.reasons.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Ranks `current` against `baseline`: a removed field or a changed type is breaking, only added fields
/// is compatible; an empty or unreadable shape, or one with a typed sentinel, is indeterminate.
pub fn rank(baseline: &str, current: &str) -> Ranked {
    let indeterminate = Ranked { ranking: Ranking::Ranked(ShapeRanking::Indeterminate), reasons: Vec::new() };
    let (Some(before), Some(after)) = (parse(baseline), parse(current)) else {
        return indeterminate;
    };
    // A typed sentinel stands for a value driftline did not look into: nothing to rank it by.
    if before.has_typed() || after.has_typed() {
        return indeterminate;
    }
    let mut reasons = Vec::new();
    diff(&before, &after, &Path::Root, &mut reasons);
    let ranking = if reasons.is_empty() {
        Ranking::Unchanged
    } else if reasons.iter().any(|r| r.change != ReasonChange::Added) {
        Ranking::Ranked(ShapeRanking::Breaking)
    } else {
        Ranking::Ranked(ShapeRanking::Compatible)
    };
    Ranked { ranking, reasons }
}

fn reason(
    path: &Path<'_>,
    change: ReasonChange,
    before: Option<String>,
    after: Option<String>,
) -> ShapeReason {
    ShapeReason { path: path.to_string(), change, before, after, detail: None }
}

/// Removed fields and type changes in the baseline's key order, then added fields.
fn diff(before: &Node, after: &Node, path: &Path<'_>, out: &mut Vec<ShapeReason>) {
    match (before, after) {
        (Node::Object(old), Node::Object(new)) => {
            for (key, old_node) in old {
                let field = Path::Field(path, key);
                match new.iter().find(|(k, _)| k == key) {
                    Some((_, new_node)) => diff(old_node, new_node, &field, out),
                    None => out.push(reason(&field, ReasonChange::Removed, Some(old_node.to_string()), None)),
                }
            }
            for (key, new_node) in new {
                if !old.iter().any(|(k, _)| k == key) {
                    let field = Path::Field(path, key);
                    out.push(reason(&field, ReasonChange::Added, None, Some(new_node.to_string())));
                }
            }
        }
        (Node::Array(old), Node::Array(new)) => match (old, new) {
            (Some(old), Some(new)) => diff(old, new, &Path::Elements(path), out),
            (None, Some(_)) => {
                out.push(reason(path, ReasonChange::Added, Some(before.to_string()), Some(after.to_string())))
            }
            (Some(_), None) => out.push(reason(
                path,
                ReasonChange::Removed,
                Some(before.to_string()),
                Some(after.to_string()),
            )),
            (None, None) => {}
        },
        _ if before.kind() != after.kind() => out.push(reason(
            path,
            ReasonChange::TypeChanged,
            Some(before.kind().to_owned()),
            Some(after.kind().to_owned()),
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks `baseline` → `current` and renders `kind: reason; reason`.
    fn check(baseline: &str, current: &str, expected: &str) {
        let ranked = rank(baseline, current);
        let kind = match ranked.ranking {
            Ranking::Ranked(r) => r.as_str(),
            Ranking::Unchanged => "unchanged",
        };
        let got = format!("{kind}: {}", ranked.explanations(baseline, current).join("; "));
        assert_eq!(got, expected, "{baseline} -> {current}");
    }

    #[test]
    fn ranks() {
        check("{a:number}", "{a:number}", "unchanged: ");
        check("{a:number,b:number}", "{a:number}", "breaking: b: removed");
        check("{a:number}", "{a:string}", "breaking: a: number -> string");
        check("{a:number}", "{a:number,b:bool}", "compatible: b: added");
        check(
            "{a:number,b:number}",
            "{a:string,c:null}",
            "breaking: a: number -> string; b: removed; c: added",
        );
        check("{r:{id:number}}", "{r:{id:string}}", "breaking: r.id: number -> string");
        check("{rows:[{a:number}]}", "{rows:[{a:string}]}", "breaking: rows[].a: number -> string");
        check("[number]", "[string]", "breaking: (root)[]: number -> string");
        check("{a:number}", "[number]", "breaking: (root): object -> array");
        check("{rows:[]}", "{rows:[number]}", "compatible: rows: was empty, now populated");
        check("{rows:[number]}", "{rows:[]}", "breaking: rows: elements gone");
        check("[[number]]", "[[]]", "breaking: (root)[]: elements gone");
        check("null", "{}", "breaking: (root): null -> object");
    }

    #[test]
    fn escaped_keys_are_read_back() {
        check(r"{a\:b:number}", r"{a\:b:string}", "breaking: a:b: number -> string");
        check(r"{x\u000ay:number}", "{}", "breaking: x\ny: removed");
        let ranked = rank(r"{a\,b:number}", "{}");
        assert_eq!(ranked.reasons[0].before.as_deref(), Some("number"));
    }

    #[test]
    fn indeterminate() {
        check("", "{a:number}", &format!("indeterminate: {EMPTY_SHAPE}"));
        check("{a:number}", "", &format!("indeterminate: {EMPTY_SHAPE}"));
        check("{a:number}", "{a:", &format!("indeterminate: {UNREADABLE_SHAPE}"));
        check("{a:string}", "{a:<typed:datetime>}", &format!("indeterminate: {UNREADABLE_SHAPE}"));
        check("<typed:uuid>", "string", &format!("indeterminate: {UNREADABLE_SHAPE}"));
        check("{a:b:number}", "{c:number}", &format!("indeterminate: {UNREADABLE_SHAPE}"));
        check("{a:number}x", "{a:number}", &format!("indeterminate: {UNREADABLE_SHAPE}"));
    }

    #[test]
    fn parse_round_trips_what_the_fingerprint_writes() {
        for json in [r#"{"a":{"b":[{"c":"x"}]},"k:,{}":[],"\u0001":null}"#, "[[1]]", "{}", "true"] {
            let shape = crate::shape::fingerprint(json.as_bytes(), 8192).shape.expect("shape");
            let node = parse(&shape).expect("parses");
            assert_eq!(node.to_string(), shape);
        }
    }
}
