//! Property tests of path templates and rewrite paths (configuration can never panic:
//! docs/ARCHITECTURE.md, "Configuration"). Templates are generated as a structure, written out as
//! text, parsed, and checked against the structure; request paths are rendered from values and must
//! match them back. `PROPTEST_CASES=N` runs more cases.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_control::template::{
    decode_multi, decode_segment, encode_segment, render_path, render_rewrite, PathTemplate,
    Rewrite, Segment, MAX_TEMPLATE_BYTES,
};
use proptest::prelude::*;

/// RFC 3986 `pchar` less `%` and `:` (kept out so that a literal never looks like a verb).
fn is_plain_literal_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-._~!$&'()+,;=@".contains(&c)
}

/// Writes a literal (or verb) into template text: plain bytes as they are, the rest escaped.
fn write_literal(lit: &str) -> String {
    let mut out = String::new();
    for c in lit.bytes() {
        if is_plain_literal_byte(c) {
            out.push(char::from(c));
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// A segment inside a variable (`{x=a/*}`): a literal or `*`.
#[derive(Debug, Clone)]
enum Sub {
    Lit(String),
    Star,
}

/// A top-level part of a template.
#[derive(Debug, Clone)]
enum Part {
    Lit(String),
    Star,
    /// `{name}` or `{name=subs}`.
    Var(Vec<Sub>),
}

/// What may close a template: nothing, `**`, or `{name=prefix/**}`.
#[derive(Debug, Clone)]
enum Tail {
    None,
    Multi,
    VarMulti(Vec<String>),
}

#[derive(Debug, Clone)]
struct Shape {
    parts: Vec<Part>,
    tail: Tail,
    verb: Option<String>,
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]{1,6}",
        "[a-zA-Z0-9._~!$&'()+,;=@:-]{1,6}",
        prop::collection::vec(any::<char>(), 1..6).prop_map(String::from_iter),
    ]
    .prop_filter("a literal is not empty, '.' or '..'", |s| {
        !s.is_empty() && s != "." && s != ".."
    })
}

fn shape() -> impl Strategy<Value = Shape> {
    let sub = prop_oneof![literal().prop_map(Sub::Lit), Just(Sub::Star)];
    let part = prop_oneof![
        literal().prop_map(Part::Lit),
        Just(Part::Star),
        prop::collection::vec(sub, 0..4).prop_map(Part::Var),
    ];
    let tail = prop_oneof![
        Just(Tail::None),
        Just(Tail::Multi),
        prop::collection::vec(literal(), 0..3).prop_map(Tail::VarMulti),
    ];
    (
        prop::collection::vec(part, 0..7),
        tail,
        prop::option::of(literal()),
    )
        .prop_map(|(parts, tail, verb)| Shape { parts, tail, verb })
        .prop_filter("the template / has no verb", |s| {
            !(s.parts.is_empty() && matches!(s.tail, Tail::None) && s.verb.is_some())
        })
}

/// The expected parse of a shape: (text, segments, variables as (name, start, end, multi)).
type Expected = (String, Vec<Segment>, Vec<(String, usize, usize, bool)>);

fn write_shape(s: &Shape) -> Expected {
    let mut text = String::new();
    let mut segs = Vec::new();
    let mut vars = Vec::new();
    for (i, p) in s.parts.iter().enumerate() {
        text.push('/');
        match p {
            Part::Lit(l) => {
                text.push_str(&write_literal(l));
                segs.push(Segment::Literal(l.clone()));
            }
            Part::Star => {
                text.push('*');
                segs.push(Segment::Single);
            }
            Part::Var(subs) => {
                let name = format!("v{i}");
                let start = segs.len();
                if subs.is_empty() {
                    text.push_str(&format!("{{{name}}}"));
                    segs.push(Segment::Single);
                } else {
                    let inner: Vec<String> = subs
                        .iter()
                        .map(|sub| match sub {
                            Sub::Lit(l) => {
                                segs.push(Segment::Literal(l.clone()));
                                write_literal(l)
                            }
                            Sub::Star => {
                                segs.push(Segment::Single);
                                "*".to_owned()
                            }
                        })
                        .collect();
                    text.push_str(&format!("{{{name}={}}}", inner.join("/")));
                }
                vars.push((name, start, segs.len(), segs.len() - start != 1));
            }
        }
    }
    match &s.tail {
        Tail::None => {}
        Tail::Multi => {
            text.push_str("/**");
            segs.push(Segment::Multi);
        }
        Tail::VarMulti(prefix) => {
            let start = segs.len();
            let mut inner: Vec<String> = prefix.iter().map(|l| write_literal(l)).collect();
            segs.extend(prefix.iter().map(|l| Segment::Literal(l.clone())));
            inner.push("**".to_owned());
            segs.push(Segment::Multi);
            text.push_str(&format!("/{{tail={}}}", inner.join("/")));
            vars.push(("tail".to_owned(), start, segs.len(), true));
        }
    }
    if text.is_empty() {
        text.push('/');
    }
    if let Some(v) = &s.verb {
        text.push(':');
        text.push_str(&write_literal(v));
    }
    (text, segs, vars)
}

/// Values for a shape's free segments: `*` (alone or in a variable) and the `**` tail.
#[derive(Debug, Clone)]
struct Fill {
    singles: Vec<String>,
    tail: Vec<String>,
}

fn fill() -> impl Strategy<Value = Fill> {
    let value = any::<String>().prop_filter("a segment value is not empty", |s| !s.is_empty());
    (
        prop::collection::vec(value.clone(), 32),
        prop::collection::vec(value, 0..4),
    )
        .prop_map(|(singles, tail)| Fill { singles, tail })
}

/// The request path for `s` filled with `f`, and the variable values a match must return.
fn render_request(s: &Shape, f: &Fill) -> (String, Vec<(String, String)>) {
    let mut singles = f.singles.iter().cycle();
    let mut raw = Vec::new();
    let mut want = Vec::new();
    // A value made of several segments comes back with each segment's `/` still encoded.
    let joined = |pieces: &[String]| {
        pieces
            .iter()
            .map(|p| p.replace('/', "%2F"))
            .collect::<Vec<_>>()
            .join("/")
    };
    for (i, p) in s.parts.iter().enumerate() {
        match p {
            Part::Lit(l) => raw.push(encode_segment(l)),
            Part::Star => raw.push(encode_segment(singles.next().unwrap())),
            Part::Var(subs) => {
                let pieces: Vec<String> = if subs.is_empty() {
                    vec![singles.next().unwrap().clone()]
                } else {
                    subs.iter()
                        .map(|sub| match sub {
                            Sub::Lit(l) => l.clone(),
                            Sub::Star => singles.next().unwrap().clone(),
                        })
                        .collect()
                };
                raw.extend(pieces.iter().map(|p| encode_segment(p)));
                let value = if pieces.len() == 1 {
                    pieces[0].clone()
                } else {
                    joined(&pieces)
                };
                want.push((format!("v{i}"), value));
            }
        }
    }
    match &s.tail {
        Tail::None => {}
        Tail::Multi => raw.extend(f.tail.iter().map(|p| encode_segment(p))),
        Tail::VarMulti(prefix) => {
            let pieces: Vec<String> = prefix.iter().chain(&f.tail).cloned().collect();
            raw.extend(pieces.iter().map(|p| encode_segment(p)));
            want.push(("tail".to_owned(), joined(&pieces)));
        }
    }
    let mut path = format!("/{}", raw.join("/"));
    if let Some(v) = &s.verb {
        path.push(':');
        path.push_str(&encode_segment(v));
    }
    (path, want)
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Any text: an answer, never a panic; errors point inside the text.
    #[test]
    fn parse_and_match_never_panic(raw in any::<String>(), path in any::<String>()) {
        match PathTemplate::parse(&raw) {
            Ok(t) => {
                let _ = t.match_path(&path);
                let segs: Vec<&str> = path.split('/').collect();
                let _ = t.match_segments(&segs, t.verb());
            }
            Err(e) => prop_assert!(e.pos <= raw.len().max(MAX_TEMPLATE_BYTES), "{e}"),
        }
    }

    /// Template-like text (the characters that matter, shuffled): never a panic.
    #[test]
    fn template_like_text_never_panics(
        raw in "/[a-z{}=*/:%€.0-9A-F]{0,40}",
        path in "/[a-z/:%€.0-9A-F]{0,40}",
    ) {
        if let Ok(t) = PathTemplate::parse(&raw) {
            let _ = t.match_path(&path);
        }
    }

    /// A template written from a structure parses to that structure; its text parses back to
    /// the same template; a path rendered from values matches and gives the values back.
    #[test]
    fn structure_round_trips_and_matches_its_paths(s in shape(), f in fill()) {
        let (text, segs, vars) = write_shape(&s);
        let t = PathTemplate::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(t.segments(), segs.as_slice(), "{}", text);
        let got: Vec<(String, usize, usize, bool)> = t
            .variables()
            .iter()
            .map(|v| (v.field_path.clone(), v.start, v.end, v.multi))
            .collect();
        prop_assert_eq!(&got, &vars, "{}", text);
        prop_assert_eq!(t.verb(), s.verb.as_deref());
        let again = PathTemplate::parse(&t.to_string());
        prop_assert_eq!(again.as_ref(), Ok(&t));

        let (path, want) = render_request(&s, &f);
        // A verb needs a segment before it: `/**:v` does not match `/:v`.
        prop_assume!(!path.starts_with("/:"));
        prop_assert_eq!(t.match_path(&path), Some(want.clone()), "{} against {}", path, text);

        // Rendered back upstream through a rewrite of every variable, each value survives.
        if !want.is_empty() {
            let rewrite: String = want.iter().map(|(name, _)| format!("/{{{name}}}")).collect();
            let out = render_rewrite(&rewrite, &t, &want).unwrap();
            prop_assert!(is_upstream_path(&out), "{}", out);
            let pieces: Vec<&str> = out.split('/').skip(1).collect();
            let mut at = 0;
            for (name, value) in &want {
                let v = t.variable(name).unwrap();
                if v.multi {
                    let n = value.split('/').count();
                    let raw = pieces[at..at + n].join("/");
                    let got = decode_multi(&raw);
                    prop_assert_eq!(got.as_deref(), Some(value.as_str()));
                    at += n;
                } else {
                    let got = decode_segment(pieces[at]);
                    prop_assert_eq!(got.as_deref(), Some(value.as_str()));
                    at += 1;
                }
            }
        }
    }

    /// Any rewrite text: an answer, never a panic; one that parses renders from any values
    /// into a valid upstream path.
    #[test]
    fn rewrite_never_panics(raw in any::<String>(), value in any::<String>()) {
        check_rewrite(&raw, &value)?;
    }

    #[test]
    fn rewrite_like_text_never_panics(
        raw in "/[a-z{}%€?#/ .0-9A-F]{0,30}",
        value in any::<String>(),
    ) {
        check_rewrite(&raw, &value)?;
    }
}

fn check_rewrite(raw: &str, value: &str) -> Result<(), TestCaseError> {
    match Rewrite::parse(raw) {
        Ok(r) => {
            let vars: Vec<(String, String)> = r
                .fields()
                .map(|f| (f.to_owned(), value.to_owned()))
                .collect();
            let out = render_path(raw, &vars).map_err(TestCaseError::fail)?;
            prop_assert!(is_upstream_path(&out), "{raw:?} → {out:?}");
        }
        Err(e) => {
            prop_assert!(e.pos <= raw.len(), "{e}");
            prop_assert!(render_path(raw, &[]).is_err());
        }
    }
    Ok(())
}

/// `/` then RFC 3986 path characters, each `%` a valid escape.
fn is_upstream_path(s: &str) -> bool {
    s.starts_with('/')
        && portico_control::template::is_valid_percent_encoding(s)
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&c))
}

#[test]
fn the_issue_8_rewrite_is_an_error() {
    let e = Rewrite::parse("/x/%€{id}").unwrap_err();
    assert_eq!(e.pos, 3);
}
