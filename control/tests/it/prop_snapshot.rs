//! Property tests of `build_snapshot` over arbitrary documents at arbitrary tree paths
//! (docs/ARCHITECTURE.md, "Configuration": a bad document is rejected alone and never blocks the
//! rest of the tree). Documents are random bytes, mangled documents of the example tree
//! (ops/examples/standalone), or entries a source could not read; beside them stand a few good
//! documents that must always be accepted. `PROPTEST_CASES=N` runs more cases.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_control::source::read_tree;
use portico_control::{build_snapshot, Snapshot, Tree};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

/// Good documents that every generated tree holds at paths it did not write.
const GOOD: [(&str, &str); 4] = [
    (
        "clusters/zz-prop-good",
        r#"{"protocol":"http","endpoints":[{"addr":"127.0.0.1:1"}]}"#,
    ),
    (
        "apis/zz-prop-good",
        r#"{"id":"zz-prop-good","http":{"method":"GET","path":"/zz-prop-good/{id}"},"backend":{"cluster":"zz-prop-good","http":{"path":"/x/{id}"}}}"#,
    ),
    ("apps/zz-prop-good", r#"{"secret":"zz-prop-good-secret"}"#),
    ("switches/zz-prop-good", r#"{"degraded":true}"#),
];

/// The example tree's documents (path, bytes).
fn example() -> &'static Vec<(String, Vec<u8>)> {
    static EXAMPLE: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    EXAMPLE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/examples/standalone");
        let tree = read_tree(&dir).expect("the example tree");
        assert!(tree.docs.len() > 10, "{:?}", tree.docs.keys());
        tree.docs.into_iter().collect()
    })
}

/// A tree path: of a kind folder with a plain or odd name, `ipacl`, or any text.
fn path() -> impl Strategy<Value = String> {
    let dir = prop::sample::select(vec![
        "apis",
        "clusters",
        "apps",
        "switches",
        "descriptors",
        "nodes",
    ]);
    let name = prop_oneof![
        "[a-z0-9._-]{1,10}",
        any::<String>(),
        Just("..".to_owned()),
        Just(".hidden".to_owned()),
    ];
    prop_oneof![
        4 => (dir, name).prop_map(|(d, n)| format!("{d}/{n}")),
        1 => Just("ipacl".to_owned()),
        1 => any::<String>(),
        1 => prop::sample::select(vec!["apis", "clusters", "apps", "switches", "descriptors"]).prop_map(str::to_owned),
    ]
}

/// What a generated entry holds.
#[derive(Debug, Clone)]
enum Content {
    Bytes(Vec<u8>),
    Unreadable(String),
}

/// Document bytes: random, or an example document with a slice replaced, truncated, or a
/// value swapped for deep nesting.
fn content() -> impl Strategy<Value = Content> {
    let n = example().len();
    let mangled = (
        0..n,
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        any::<Vec<u8>>(),
    )
        .prop_map(|(i, a, b, junk)| {
            let doc = &example()[i].1;
            let (x, y) = (a.index(doc.len() + 1), b.index(doc.len() + 1));
            let (from, to) = (x.min(y), x.max(y));
            let mut out = doc[..from].to_vec();
            out.extend_from_slice(&junk);
            out.extend_from_slice(&doc[to..]);
            out
        });
    let truncated = (0..n, any::<prop::sample::Index>()).prop_map(|(i, at)| {
        let doc = &example()[i].1;
        doc[..at.index(doc.len() + 1)].to_vec()
    });
    let nested = (0..n, 100..3000usize).prop_map(|(i, depth)| {
        let doc = String::from_utf8_lossy(&example()[i].1).into_owned();
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        doc.replacen("\"GET\"", &deep, 1)
            .replacen("true", &deep, 1)
            .replacen("\"http\"", &deep, 1)
            .into_bytes()
    });
    let retyped = (0..n, 0..n).prop_map(|(i, j)| {
        example()[j]
            .1
            .clone()
            .into_iter()
            .chain(example()[i].1.clone())
            .collect()
    });
    prop_oneof![
        2 => any::<Vec<u8>>().prop_map(Content::Bytes),
        3 => mangled.prop_map(Content::Bytes),
        2 => truncated.prop_map(Content::Bytes),
        1 => nested.prop_map(Content::Bytes),
        1 => retyped.prop_map(Content::Bytes),
        1 => (0..n).prop_map(|i| Content::Bytes(example()[i].1.clone())),
        1 => any::<String>().prop_map(Content::Unreadable),
    ]
}

fn entries() -> impl Strategy<Value = Vec<(String, Content)>> {
    let anywhere = (path(), content());
    // Also at the example's own paths, so that documents meet what they refer to.
    let at_example = (0..example().len(), content()).prop_map(|(i, c)| (example()[i].0.clone(), c));
    prop::collection::vec(prop_oneof![anywhere, at_example], 0..12)
}

/// The tree: the example tree, overwritten by the entries, plus the good documents.
fn tree_of(entries: &[(String, Content)], with_example: bool) -> (Tree, BTreeSet<String>) {
    let mut tree = Tree {
        generation: 3,
        ..Tree::default()
    };
    if with_example {
        for (p, b) in example() {
            tree.insert(p, b.clone());
        }
    }
    let mut written = BTreeSet::new();
    for (p, c) in entries {
        written.insert(p.clone());
        match c {
            Content::Bytes(b) => {
                tree.docs.remove(p);
                tree.insert(p, b.clone());
            }
            Content::Unreadable(why) => {
                tree.docs.remove(p);
                tree.insert_unreadable(p, why.clone());
            }
        }
    }
    for (p, doc) in GOOD {
        if !written.contains(p) {
            tree.insert(p, doc.as_bytes().to_vec());
        }
    }
    (tree, written)
}

/// What must hold of a snapshot built from `tree` (over `previous`).
fn check(
    tree: &Tree,
    previous: Option<&Snapshot>,
    snap: &Snapshot,
    written: &BTreeSet<String>,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(snap.version.generation, tree.generation);
    let mut rejected = BTreeSet::new();
    for r in &snap.rejected {
        prop_assert!(!r.internal, "a check panicked on {}: {}", r.path, r.reason);
        prop_assert!(rejected.insert(r.path.clone()), "{} rejected twice", r.path);
        if r.kept_previous {
            prop_assert!(previous.is_some_and(|p| p.accepted.contains_key(&r.path)));
        }
    }
    for (p, bytes) in &snap.accepted {
        let fresh = tree.docs.get(p).is_some_and(|b| b == bytes.as_ref());
        let kept = previous
            .and_then(|prev| prev.accepted.get(p))
            .is_some_and(|b| b == bytes);
        prop_assert!(fresh || kept, "{} accepted with bytes it never had", p);
        prop_assert!(
            !(fresh && rejected.contains(p)),
            "{} accepted and rejected",
            p
        );
    }
    for p in tree.docs.keys().chain(tree.unreadable.keys()) {
        prop_assert!(
            (snap.accepted.contains_key(p) && !tree.unreadable.contains_key(p))
                || rejected.contains(p),
            "{} neither accepted nor rejected",
            p
        );
    }
    for (p, _) in GOOD {
        if written.contains(p) {
            continue;
        }
        let why = snap.rejected.iter().find(|r| r.path == p);
        let excused = why.is_some_and(|r| {
            p.starts_with("apis/")
                && (r.reason.contains("already bound by API") || written.contains(GOOD[0].0))
        });
        prop_assert!(
            why.is_none() || excused,
            "good document rejected: {:?}",
            why
        );
    }
    Ok(())
}

/// Whole trees are slow to build in a debug test binary: 96 cases unless `PROPTEST_CASES`
/// says otherwise.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Garbage among good documents: never a panic, the good ones accepted, every document
    /// accounted for, kept versions real, and rebuilding on the result stable.
    #[test]
    fn garbage_never_blocks_the_good(entries in entries(), with_example in any::<bool>()) {
        let (tree, written) = tree_of(&entries, with_example);
        let alone = build_snapshot(&tree, None);
        check(&tree, None, &alone, &written)?;

        let (base_tree, _) = tree_of(&[], with_example);
        let base = build_snapshot(&base_tree, None);
        let over = build_snapshot(&tree, Some(&base));
        check(&tree, Some(&base), &over, &written)?;
        let again = build_snapshot(&tree, Some(&over));
        check(&tree, Some(&over), &again, &written)?;
        prop_assert_eq!(&again.version, &over.version);
        // The example documents nobody touched are still there.
        for (p, _) in example() {
            if !written.contains(p) && with_example && !p.starts_with("apis/") {
                prop_assert!(over.accepted.contains_key(p), "{} lost", p);
            }
        }
    }
}

/// The garbage of the integration test, in one tree: each rejected, the rest accepted.
#[test]
fn named_garbage_is_rejected_alone() {
    let (mut tree, _) = tree_of(&[], true);
    let deep = format!(
        r#"{{"degraded": true, "fallback": {{"body": {}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let long_template = format!(
        r#"{{"id":"x.long","http":{{"method":"GET","path":"{}"}},"backend":{{"cluster":"demo-http","http":{{}}}}}}"#,
        "/a".repeat(10_000)
    );
    // 1 MiB of a valid app but for its secret.
    let mut big = br#"{"secret": "short", "name": ""#.to_vec();
    big.resize(1 << 20, b'x');
    big.extend_from_slice(br#""}"#);
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("apis/x.utf8", b"\xff\xfe{\"id\": \"x.utf8\"}".to_vec()),
        (
            "apis/x.truncated",
            br#"{"id": "x.truncated", "http": {"meth"#.to_vec(),
        ),
        ("apis/x.long", long_template.into_bytes()),
        ("apps/x.big", big),
        ("switches/x.deep", deep.into_bytes()),
        (
            "descriptors/0000000000000000000000000000000000000000000000000000000000000000",
            b"not protobuf".to_vec(),
        ),
        ("apis/odd name\u{202e}\n%", b"{}".to_vec()),
    ];
    for (p, b) in &garbage {
        assert!(tree.insert(p, b.clone()), "{p}");
    }
    let s = build_snapshot(&tree, None);
    let rejected: BTreeSet<&str> = s.rejected.iter().map(|r| r.path.as_str()).collect();
    for (p, _) in &garbage {
        assert!(rejected.contains(p), "{p} not rejected: {:?}", s.rejected);
    }
    assert!(s.rejected.iter().all(|r| !r.internal));
    for (p, _) in GOOD {
        assert!(s.accepted.contains_key(p), "{p}: {:?}", s.rejected);
    }
    assert!(s.apis.contains_key("order.get"), "{:?}", s.rejected);
}
