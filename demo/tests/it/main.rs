//! The demo backend's integration tests, in one test binary (one link instead of one per
//! former `tests/*.rs` file): one module per area. One area: `cargo test -p portico-demo
//! --test it -- demo_backend::`.
//!
//! All areas run in this one process, in parallel, so a test changes no process-wide state
//! (docs/operations/ops-scripts.md, "Test lanes"): no environment variable, current directory,
//! signal handler or process-wide rustls provider.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod demo_backend;
mod example_config;

/// The rule above, read from the sources of every module: none calls what changes the whole
/// process (the patterns are split so that this test does not find itself).
#[test]
fn no_module_changes_process_wide_state() {
    portico_testkit::assert_no_process_wide_state(env!("CARGO_MANIFEST_DIR"), &[], 3);
}
