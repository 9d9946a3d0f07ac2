//! Property tests of request signing (docs/PROTOCOL.md, "Signing a request"): the canonical
//! query and the signature never panic, the canonical query is its own canonical query, and
//! the worked examples of docs/PROTOCOL.md (read from the document itself) stay exact however
//! their query is written. `PROPTEST_CASES=N` runs more cases.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_control::sign::{canonical_query, sign, string_to_sign, verify};
use proptest::prelude::*;

const PROTOCOL: &str = include_str!("../../../docs/PROTOCOL.md");

/// One worked example of docs/PROTOCOL.md.
#[derive(Debug)]
struct Example {
    method: String,
    path: String,
    query: Option<String>,
    app_key: String,
    secret: String,
    timestamp: String,
    nonce: String,
    body: String,
    string_to_sign: String,
    signature: String,
}

/// The text of the section that starts at `heading`, up to the next heading.
fn section(heading: &str) -> &'static str {
    let start = PROTOCOL.find(heading).expect(heading);
    let rest = &PROTOCOL[start + heading.len()..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    &rest[..end]
}

/// The fenced code blocks of `text`, in order.
fn fenced(text: &str) -> Vec<String> {
    text.split("```")
        .skip(1)
        .step_by(2)
        .map(|b| b.trim_matches('\n').to_owned())
        .collect()
}

/// The inline code spans of the prose of `text` (outside fenced blocks), in order.
fn inline(text: &str) -> Vec<String> {
    text.split("```")
        .step_by(2)
        .flat_map(|prose| {
            prose
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The code span right after "the signature is" in `text`.
fn signature_in(text: &str) -> String {
    let at = text.find("the signature is").expect("the signature is");
    inline(&text[at..])[0].clone()
}

fn examples() -> Vec<Example> {
    let s1 = section("### Worked example 1");
    let (b1, i1) = (fenced(s1), inline(s1));
    // The prose opens with the app key, secret, timestamp and nonce.
    let (method, target) = b1[0].split_once(' ').unwrap();
    let (path, query) = target.split_once('?').unwrap();
    let one = Example {
        method: method.into(),
        path: path.into(),
        query: Some(query.into()),
        app_key: i1[0].clone(),
        secret: i1[1].clone(),
        timestamp: i1[2].clone(),
        nonce: i1[3].clone(),
        body: String::new(),
        string_to_sign: b1.last().unwrap().clone(),
        signature: signature_in(s1),
    };
    let s2 = section("### Worked example 2");
    let (b2, i2) = (fenced(s2), inline(s2));
    let (method, path) = b2[0].split_once(' ').unwrap();
    let two = Example {
        method: method.into(),
        path: path.into(),
        query: None,
        app_key: one.app_key.clone(),
        secret: one.secret.clone(),
        timestamp: one.timestamp.clone(),
        nonce: i2[0].clone(),
        body: i2[1].clone(),
        string_to_sign: b2[1].clone(),
        signature: signature_in(s2),
    };
    vec![one, two]
}

fn sts_of(e: &Example, query: Option<&str>) -> String {
    string_to_sign(
        &e.method,
        &e.path,
        query,
        &e.app_key,
        &e.timestamp,
        &e.nonce,
        e.body.as_bytes(),
    )
}

#[test]
fn the_worked_examples_of_protocol_md_are_exact() {
    let ex = examples();
    assert_eq!(ex[0].app_key, "merchant-1", "{:?}", ex[0]);
    assert_eq!(ex[0].signature.len(), 64, "{:?}", ex[0]);
    assert_eq!(ex[1].body.len(), 23, "{:?}", ex[1]);
    for e in &ex {
        let sts = sts_of(e, e.query.as_deref());
        assert_eq!(sts, e.string_to_sign, "{e:?}");
        assert_eq!(sign(e.secret.as_bytes(), &sts), e.signature, "{e:?}");
        assert!(verify(e.secret.as_bytes(), &sts, &e.signature));
    }
}

/// Ways to write the same query part: an unreserved byte escaped (`%41` for `A`), an escape
/// in lower case, a reserved byte in another spelling is NOT among them (that changes the
/// bytes signed).
fn respell(part: &str, escape_unreserved: bool, lower_hex: bool) -> String {
    let mut out = String::new();
    let b = part.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%' && i + 2 < b.len() {
            let esc = &part[i..i + 3];
            out.push_str(&if lower_hex {
                esc.to_ascii_lowercase()
            } else {
                esc.to_owned()
            });
            i += 3;
            continue;
        }
        if escape_unreserved && c.is_ascii_alphanumeric() {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(char::from(c));
        }
        i += 1;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Any query: an answer, never a panic; the answer is its own canonical query and holds
    /// only unreserved bytes, escapes, `=` and `&`.
    #[test]
    fn canonical_query_is_idempotent(q in any::<String>()) {
        let c = canonical_query(&q);
        prop_assert_eq!(canonical_query(&c), c.clone());
        prop_assert!(c.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%=&".contains(&b)), "{}", c);
    }

    #[test]
    fn query_like_text_is_idempotent(q in "[a-c=&%+2Ff€ ]{0,24}") {
        let c = canonical_query(&q);
        prop_assert_eq!(canonical_query(&c), c);
    }

    /// The first worked example signs the same however its query parts are ordered, spaced
    /// with empty parts, or spelled.
    #[test]
    fn worked_example_survives_respelling(
        order in Just((0..5).collect::<Vec<usize>>()).prop_shuffle(),
        empties in prop::collection::vec(0..3usize, 6),
        escape in prop::collection::vec(any::<bool>(), 5),
        lower in any::<bool>(),
    ) {
        let e = &examples()[0];
        let parts: Vec<&str> = e.query.as_deref().unwrap().split('&').collect();
        prop_assert_eq!(parts.len(), 5);
        let mut q = String::new();
        for (k, &i) in order.iter().enumerate() {
            q.push_str(&"&".repeat(empties[k]));
            if k > 0 {
                q.push('&');
            }
            let (name, value) = parts[i].split_once('=').unwrap();
            q.push_str(&respell(name, escape[i], lower));
            q.push('=');
            q.push_str(&respell(value, escape[i], lower));
        }
        q.push_str(&"&".repeat(empties[5]));
        let sts = sts_of(e, Some(&q));
        prop_assert_eq!(&sts, &e.string_to_sign, "{}", q);
        prop_assert_eq!(sign(e.secret.as_bytes(), &sts), e.signature.clone());
    }

    /// Any request and secret: the signature verifies (in either case), a changed one does
    /// not, and any text as a signature is an answer, never a panic.
    #[test]
    fn signatures_verify_and_never_panic(
        method in any::<String>(),
        path in any::<String>(),
        query in prop::option::of(any::<String>()),
        secret in any::<Vec<u8>>(),
        body in any::<Vec<u8>>(),
        junk in any::<String>(),
        flip in 0..64usize,
    ) {
        let sts = string_to_sign(&method, &path, query.as_deref(), "k", "1", "nnnnnnnn", &body);
        let sig = sign(&secret, &sts);
        prop_assert!(verify(&secret, &sts, &sig));
        prop_assert!(verify(&secret, &sts, &sig.to_ascii_uppercase()));
        let mut changed = sig.clone().into_bytes();
        changed[flip] = if changed[flip] == b'0' { b'1' } else { b'0' };
        prop_assert!(!verify(&secret, &sts, std::str::from_utf8(&changed).unwrap()));
        let _ = verify(&secret, &sts, &junk);
    }
}
