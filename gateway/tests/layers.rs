//! The gateway's layering (docs/ARCHITECTURE.md, "Gateway layers"): a module imports only
//! modules below it, and `edge` and `invoke` never import each other. Read from the sources,
//! outside their `#[cfg(test)]` modules (tests may build fixtures from any layer).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;

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

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The source of `text` before its unit tests.
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The crate modules `text` names as `crate::<module>`.
fn crate_imports(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .map(|(i, _)| {
            text[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .collect()
}

/// Every `.rs` file under `dir`, as (path relative to `src`, contents).
fn sources(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).unwrap().display().to_string();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn modules_import_only_modules_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, text) in &files {
        let top = path.split(['/', '.']).next().unwrap_or_default().to_owned();
        if matches!(top.as_str(), "lib" | "main" | "testing") {
            continue;
        }
        let own = layer(&top).unwrap_or_else(|| panic!("{path}: module {top} has no layer"));
        checked += 1;
        for import in crate_imports(without_tests(text)) {
            if import == top {
                continue;
            }
            let theirs =
                layer(&import).unwrap_or_else(|| panic!("{path}: crate::{import} has no layer"));
            if theirs >= own {
                wrong.push(format!("{path} ({top}) imports crate::{import}"));
            }
        }
    }
    assert!(checked >= 20, "only {checked} files checked");
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_sees_a_bad_import() {
    let text = "use crate::proxy::Gateway;\n#[cfg(test)]\nmod tests { use crate::runtime; }";
    assert_eq!(
        crate_imports(without_tests(text)),
        BTreeSet::from(["proxy".to_owned()])
    );
    assert!(layer("proxy") > layer("invoke"));
}
