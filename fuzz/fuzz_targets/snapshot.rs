//! Whole trees: documents at any paths with any bytes (see `portico_fuzz::documents`), beside
//! a few good ones. Building never panics, no check panics inside (that would be reported as
//! an internal error), every document is accepted or rejected, kept versions are real, the
//! good documents are accepted, and a rebuild on its own result is stable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portico_control::{build_snapshot, Snapshot, Tree};
use portico_fuzz::{check_snapshot, documents, GOOD};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The good documents alone, built once: the previous snapshot of every run.
fn base() -> &'static Snapshot {
    static BASE: OnceLock<Snapshot> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut good = Tree::default();
        for (path, doc) in GOOD {
            good.insert(path, doc.as_bytes().to_vec());
        }
        build_snapshot(&good, None)
    })
}

fuzz_target!(|data: &[u8]| {
    let mut tree = Tree {
        generation: 1,
        ..Tree::default()
    };
    let mut written = BTreeSet::new();
    for (path, read) in documents(data) {
        written.insert(path.clone());
        match read {
            Ok(bytes) => {
                tree.insert(&path, bytes);
            }
            Err(why) => tree.insert_unreadable(&path, why),
        }
    }
    for (path, doc) in GOOD {
        if !written.contains(path) {
            tree.insert(path, doc.as_bytes().to_vec());
        }
    }
    let alone = build_snapshot(&tree, None);
    check_snapshot(&tree, None, &alone, &written);
    let base = base();
    let over = build_snapshot(&tree, Some(base));
    check_snapshot(&tree, Some(base), &over, &written);
    let again = build_snapshot(&tree, Some(&over));
    check_snapshot(&tree, Some(&over), &again, &written);
    assert_eq!(
        again.version.digest, over.version.digest,
        "a rebuild changed the digest"
    );
});
