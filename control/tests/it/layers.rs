//! portico-control's layering (docs/ARCHITECTURE.md, "Control layers"): the layer table in
//! `src/lib.rs`'s doc comment holds (a module imports only modules of a lower layer), and no
//! modules or files import each other, round or through others. Read from the sources,
//! outside their `#[cfg(test)]` items (tests may build fixtures from any layer); the checks
//! are testkit's `source_graph::DocumentedLayers`, shared with the other crate.

use portico_testkit::source_graph::DocumentedLayers;

fn layers() -> DocumentedLayers {
    DocumentedLayers::read(env!("CARGO_MANIFEST_DIR"), "control", 25)
}

#[test]
fn modules_import_only_modules_below_them() {
    layers().assert_layer_table_holds(14);
}

#[test]
fn no_modules_import_each_other() {
    layers().assert_no_module_circles();
}

#[test]
fn no_files_import_each_other() {
    layers().assert_no_file_circles();
}
