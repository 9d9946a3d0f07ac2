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
    portico_testkit::assert_no_process_wide_state(env!("CARGO_MANIFEST_DIR"), &[], 6);
}
