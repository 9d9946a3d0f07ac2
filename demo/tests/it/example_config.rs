//! The standalone example tree (`ops/examples/standalone`, what `ops/up.sh` serves) is valid:
//! every document is accepted by the same validation the gateway runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use portico_control::{build_snapshot, Tree};

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/examples/standalone")
}

/// Reads a configuration directory (docs/operations/config-tree.md, "The configuration tree"):
/// `<dir>/<name>.json` → `<dir>/<name>`, `ipacl.json` → `ipacl`.
fn read_tree(root: &Path) -> Tree {
    let mut tree = Tree::default();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            let doc = rel
                .strip_suffix(".json")
                .or_else(|| rel.strip_suffix(".pb"))
                .unwrap_or_else(|| panic!("unexpected file {rel}"));
            assert!(
                tree.insert(doc, std::fs::read(&path).unwrap()),
                "{rel} is not a document of a served tree"
            );
        }
    }
    tree
}

#[test]
fn standalone_example_is_valid() {
    let tree = read_tree(&example_dir());
    let snap = build_snapshot(&tree, None);
    assert!(snap.rejected.is_empty(), "rejected: {:#?}", snap.rejected);
    for api in [
        "order.get",
        "order.create",
        "echo.any",
        "health.ping",
        "promo.list",
    ] {
        assert!(snap.apis.contains_key(api), "missing API {api}");
    }
    assert_eq!(snap.apps.len(), 3);
    assert!(snap.switches["promo.list"].degraded);
    assert!(!snap.switches["order.create"].degraded);
    assert_eq!(snap.ipacl.deny.len(), 1);
}
