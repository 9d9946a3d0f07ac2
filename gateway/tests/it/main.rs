//! The gateway's integration tests, in one test binary: each former `tests/*.rs` binary linked
//! the whole gateway and Pingora on its own, so a change to the gateway re-linked two dozen of
//! them. One module per area (the former file, unchanged); the helpers they share in
//! `support/`. One area: `cargo test -p portico-gateway --test it -- smuggling::`.
//!
//! All areas run in this one process, in parallel (cargo's default: one test thread per core,
//! as each former binary had), so a test changes no process-wide state (docs/operations/ops-scripts.md,
//! "Test lanes"): it sets no environment variable (a child process gets its own with
//! `Command::env`), changes no current directory, installs no signal handler and no
//! process-wide rustls provider (a TLS client builds its own with `builder_with_provider`),
//! and takes ports only from `support::free_port` (one set of handed-out ports for the whole
//! process). The interop servers of `grpc_interop` (`grpcio_server.py`, `grpcjs_server.js`,
//! `grpcjs/`, `grpcjava/`) stay in `gateway/tests/`, where ops/lib.sh installs and builds
//! them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod cluster;
mod config_garbage;
mod connections;
mod dashboards;
mod edge;
mod ensemble;
mod grpc_interop;
mod grpc_invoke;
mod hardening;
mod hot_apis;
mod invoke;
mod layers;
mod netns;
mod notify;
mod notify_trust;
mod publish;
mod readiness;
mod routing;
mod slowloris;
mod smuggling;
mod tls;
mod upgrade;
mod zk_acl;
mod zookeeper;

/// The rule above, read from the sources of every module: none calls what changes the whole
/// process (the patterns are split so that this test does not find itself).
#[test]
fn no_module_changes_process_wide_state() {
    portico_testkit::assert_no_process_wide_state(env!("CARGO_MANIFEST_DIR"), &[], 25);
}
