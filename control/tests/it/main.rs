//! The control crate's integration tests, in one test binary (one link instead of one per
//! former `tests/*.rs` file): one module per area. One area: `cargo test -p portico-control
//! --test it -- zk_source::`.
//!
//! All areas run in this one process, in parallel, so a test changes no process-wide state
//! (docs/operations/ops-scripts.md, "Test lanes"): no environment variable, current directory,
//! signal handler or process-wide rustls provider. The ZooKeeper tests (`zk_source`) each start
//! their own server: they stop, restart, pause and kill it, and write the fixed `/portico`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod layers;
mod prop_sign;
mod prop_snapshot;
mod prop_template;
mod zk_source;

/// The rule above, read from the sources of every module: none calls what changes the whole
/// process (the patterns are split so that this test does not find itself).
#[test]
fn no_module_changes_process_wide_state() {
    let forbidden = [
        ["set", "_var("].concat(),
        ["remove", "_var("].concat(),
        ["set_current", "_dir("].concat(),
        ["install", "_default("].concat(),
        ["signal_hook", "::"].concat(),
        ["libc::", "signal("].concat(),
        ["libc::", "sigaction("].concat(),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut dirs = vec![root.clone()];
    let (mut read, mut found) = (0, Vec::new());
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            read += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            for (no, line) in text.lines().enumerate() {
                for f in forbidden.iter().filter(|f| line.contains(f.as_str())) {
                    let rel = path.strip_prefix(&root).unwrap().display();
                    found.push(format!("it/{rel}:{}: {f}", no + 1));
                }
            }
        }
    }
    assert!(read >= 6, "only {read} files read under {}", root.display());
    assert!(
        found.is_empty(),
        "process-wide state changed by a test module (all modules share one process):\n{}",
        found.join("\n")
    );
}
