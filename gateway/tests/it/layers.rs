//! The gateway's layering (docs/ARCHITECTURE.md, "Gateway layers"): a module imports only
//! modules below it, `edge`, `invoke` and `notify` never import each other, and no modules or
//! files import each other, round or through others. Read from the sources (the real `use`
//! trees and paths, by `portico_testkit::source_graph`), outside their `#[cfg(test)]` items
//! (tests may build fixtures from any layer).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_testkit::source_graph::{describe, SourceGraph};

/// Each top-level module of `gateway/src` and its layer: higher numbers sit above.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("request_id", 0),
    ("observe", 0),
    ("tls", 0),
    ("deadline", 0),
    ("model", 1),
    ("fleet", 1),
    ("edge", 2),
    ("invoke", 2),
    ("notify", 2),
    ("runtime", 3),
    ("pipeline", 4),
    ("proxy", 5),
    ("listener", 6),
    ("admin", 6),
    ("reload", 6),
];

fn graph() -> SourceGraph {
    let graph = SourceGraph::of_crate(env!("CARGO_MANIFEST_DIR"));
    assert!(
        graph.files().len() >= 40,
        "only {} files read",
        graph.files().len()
    );
    graph
}

#[test]
fn modules_import_only_modules_below_them() {
    let wrong = graph().layer_violations(LAYERS);
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_modules_import_each_other() {
    let circles = graph().module_circles();
    assert!(
        circles.is_empty(),
        "circles between the gateway's modules:\n{}",
        describe(&circles)
    );
}

#[test]
fn no_files_import_each_other() {
    let circles = graph().file_circles();
    assert!(
        circles.is_empty(),
        "circles between the gateway's files:\n{}",
        describe(&circles)
    );
}

#[test]
fn the_check_sees_a_bad_import() {
    let graph = SourceGraph::of_sources(&[
        (
            "lib.rs",
            "pub mod invoke; pub mod proxy; #[cfg(test)] mod testing;",
        ),
        (
            "invoke.rs",
            "pub fn call() { crate::proxy::Gateway::new(); }",
        ),
        (
            "proxy.rs",
            "use crate::{invoke::{self}};\npub struct Gateway; fn f() { invoke::call() }",
        ),
        ("testing.rs", "use crate::proxy::Gateway;"),
    ]);
    let wrong = graph.layer_violations(LAYERS);
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].starts_with("invoke (layer 2) uses proxy (layer 5): invoke.rs:1"));
    let circles = describe(&graph.module_circles());
    assert!(circles.starts_with("invoke → proxy → invoke"), "{circles}");
}
