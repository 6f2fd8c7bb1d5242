//! The shape parser, shared with the ranker.

use super::*;

#[test]
fn contract_parser_reads_typed_sentinels() {
    let typed =
        |name: &str, class: Option<&str>| Node::Typed { name: name.into(), class: class.map(Into::into) };
    assert_eq!(parse("<typed:uuid>"), Some(typed("uuid", None)));
    assert_eq!(parse("<typed:object:User>"), Some(typed("object", Some("User"))));
    assert_eq!(parse(r"<typed:a\:b:c\>d>"), Some(typed("a:b", Some("c>d"))));
    assert_eq!(parse("<typed:>"), Some(typed("", None)));
    for json in [
        r#"{"v":{"__type__":"d\u0061te"},"w":[{"__type__":"a:b","class":"c"}]}"#,
        r#"{"__type__":"x\u0001","class":"<y>"}"#,
        r#"{"a":{"b":[{"c":"x"}]},"k:,{}":[],"\u0001":null}"#,
    ] {
        let shape = shape_of(json);
        let node = parse(&shape).unwrap_or_else(|| panic!("{shape} parses"));
        assert_eq!(node.to_string(), shape);
    }
    assert!(parse("{v:<typed:date>}").is_some_and(|node| node.has_typed()));
    assert!(parse("{v:[string]}").is_some_and(|node| !node.has_typed()));
}

#[test]
fn contract_parser_stops_at_the_fingerprint_depth() {
    let deepest = shape_of(&format!("{}{}", "[".repeat(128), "]".repeat(128)));
    assert!(parse(&deepest).is_some());
    assert_eq!(parse(&format!("[{deepest}]")), None);
    assert_eq!(parse(&"{a:".repeat(100_000)), None);
}

#[test]
fn contract_ranker_still_leaves_typed_sentinels_indeterminate() {
    use crate::shape_drift::rank;
    for (before, after) in
        [("{a:string}", "{a:<typed:datetime>}"), ("<typed:uuid>", "string"), ("[<typed:x>]", "[<typed:x>]")]
    {
        assert_eq!(rank(before, after).signal_ranking(), ShapeRanking::Indeterminate, "{before} -> {after}");
    }
    assert_eq!(rank("{a:number}", "{a:string}").signal_ranking(), ShapeRanking::Breaking);
}
