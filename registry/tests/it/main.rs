//! The registry's integration tests, in one test binary: each former `tests/*.rs` binary linked
//! the whole registry (and the CLI's dependencies) on its own, so a change to the registry
//! re-linked two dozen of them. One module per area (the former file); the helpers they share
//! in `common/` (ZooKeeper, registries, the CLI, processes, the browser) and `portal_world/`
//! (the portal's merchants and apps). One area: `cargo test -p portico-registry --test it --
//! portal::`.
//!
//! All areas run in this one process, in parallel, so a test changes no process-wide state
//! (docs/operations/ops-scripts.md, "Test lanes"): it sets no environment variable (a child
//! process gets its own with `Command::env`), changes no current directory, installs no signal
//! handler and no process-wide rustls provider, and leaves the registry's evaluation cadence
//! (`portico_registry::cadence`) at its default: a test that needs a shorter one runs
//! `portico-registry` processes with `--evaluation-interval-ms` (cluster_ops, alerts). Ports
//! come only from `portico_testkit::free_port` (one set of handed-out ports for the process).
//!
//! One ZooKeeper serves the whole process: a test takes a tree of its own on it
//! (`ZooKeeper::on_shared`, `ZooKeeper::on_shared_locked` for one locked down with fresh
//! credentials), under a root of its own (`/t-<n>-<random>/portico`, `zk.root()`, which the
//! helpers of `common/` hand to in-process registries and as `--zk-root` to processes). Tests
//! that stop their ZooKeeper or drive `ops/zkcli.sh` and zkCli at the fixed `/portico`
//! (zk_lockdown, first_run's zkcli test, the ZooKeeper-down tests of registry_api and
//! internet) start their own (`ZooKeeper::start`, `ZooKeeper::start_locked`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod portal_world;

mod admin_auth;
mod alerts;
mod alerts_console_e2e;
mod cli;
mod cluster_console_e2e;
mod cluster_ops;
mod console_e2e;
mod first_run;
mod hot_keys_console_e2e;
mod input_limits;
mod internet;
mod layers;
mod notifications_console_e2e;
mod portal;
mod portal_e2e;
mod prometheus_rules;
mod publish_unchanged;
mod registry_api;
mod registry_killed;
mod reports;
mod schemathesis;
mod write_checks;
mod zk_lockdown;

/// The rule above, read from the sources of every module: none calls what changes the whole
/// process (the patterns are split so that this test does not find itself).
#[test]
fn no_module_changes_process_wide_state() {
    portico_testkit::assert_no_process_wide_state(
        env!("CARGO_MANIFEST_DIR"),
        &[["set", "_interval("].concat()],
        28,
    );
}
