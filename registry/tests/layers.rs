//! The registry's layering (docs/ARCHITECTURE.md, "Registry layers"): the layer table in
//! `src/lib.rs`'s doc comment holds (a module imports only modules of a lower layer), and no
//! modules or files import each other, round or through others. Read from the sources,
//! outside their `#[cfg(test)]` items (tests may build fixtures from any layer).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_testkit::source_graph::{describe, layers_from_doc, SourceGraph};

fn graph() -> SourceGraph {
    let graph = SourceGraph::of_crate(env!("CARGO_MANIFEST_DIR"));
    assert!(
        graph.files().len() >= 60,
        "only {} files read",
        graph.files().len()
    );
    graph
}

#[test]
fn modules_import_only_modules_below_them() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let layers = layers_from_doc(&lib);
    assert!(
        layers.len() >= 20,
        "the table in src/lib.rs names {layers:?}"
    );
    let layers: Vec<(&str, u8)> = layers.iter().map(|(m, l)| (m.as_str(), *l)).collect();
    let wrong = graph().layer_violations(&layers);
    assert!(
        wrong.is_empty(),
        "imports against the layer table of src/lib.rs:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_modules_import_each_other() {
    let circles = graph().module_circles();
    assert!(
        circles.is_empty(),
        "circles between the registry's modules:\n{}",
        describe(&circles)
    );
}

#[test]
fn no_files_import_each_other() {
    let circles = graph().file_circles();
    assert!(
        circles.is_empty(),
        "circles between the registry's files:\n{}",
        describe(&circles)
    );
}
