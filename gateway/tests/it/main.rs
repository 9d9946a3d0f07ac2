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
    assert!(
        read >= 25,
        "only {read} files read under {}",
        root.display()
    );
    assert!(
        found.is_empty(),
        "process-wide state changed by a test module (all modules share one process):\n{}",
        found.join("\n")
    );
}
