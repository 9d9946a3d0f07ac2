//! The registry's admin API under a property-based fuzzer: **schemathesis** (PyPI) reads the
//! OpenAPI document the registry serves (`/api/v1/openapi.json`, generated from the route
//! table in `registry/src/openapi.rs`) and sends generated requests to every operation, with
//! the admin token, checking each answer (docs/SECURITY.md, "Admin API (registry)"):
//!
//! - `not_a_server_error`: no 5xx, ever (and no crash: the registry process must be alive and
//!   healthy afterwards, and its log must hold no panic);
//! - `status_code_conformance`, `content_type_conformance`, `response_headers_conformance`,
//!   `response_schema_conformance`: the answer is one the document lists, in its shape;
//! - `ignored_auth`: an operation that requires the token answers 401 without it.
//!
//! It runs the examples, coverage, fuzzing and stateful phases (the stateful phase follows the
//! document's links from creating routes to the created resource). Against a real ZooKeeper
//! and the real `portico-registry` binary, after importing `ops/examples/standalone` into the
//! live and the sandbox trees, so the fuzzer meets existing documents too.
//!
//! Knobs (environment):
//! - `PORTICO_SCHEMATHESIS`: the `st` command (default `.run/venv/bin/st`, which
//!   `./ops/test.sh` installs; else `st` on `PATH`);
//! - `PORTICO_SCHEMATHESIS_EXAMPLES`: examples per operation (default 12);
//! - `PORTICO_SCHEMATHESIS_SEED`: the seed (default fixed, so a failure reproduces);
//! - `PORTICO_SCHEMATHESIS_MAX_TIME`: a time budget in seconds for the fuzzing and stateful
//!   phases to repeat until spent (unset: one pass), for long runs by hand.
//!
//! Without schemathesis the test fails and says how to install it: it never passes silently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::browser::workspace;
use crate::common::procs::{http_with_timeout, registry_command};
use crate::common::{example_tree, tail_of, Proc};
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "schemathesis-admin-token-0123456789";
const DEFAULT_EXAMPLES: u32 = 12;
const DEFAULT_SEED: u64 = 20_261_130;

/// The pinned version `./ops/test.sh` installs (`SCHEMATHESIS_VERSION` in ops/lib.sh).
fn pinned_version() -> String {
    let lib = std::fs::read_to_string(workspace().join("ops/lib.sh")).unwrap_or_default();
    lib.lines()
        .find_map(|l| l.strip_prefix("SCHEMATHESIS_VERSION="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "(see ops/lib.sh)".to_owned())
}

/// The `st` command, checked to run; panics saying how to install it otherwise.
fn schemathesis() -> PathBuf {
    let run_dir = std::env::var_os("PORTICO_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".run"));
    let candidates: Vec<PathBuf> = match std::env::var_os("PORTICO_SCHEMATHESIS") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec![run_dir.join("venv/bin/st"), PathBuf::from("st")],
    };
    for st in &candidates {
        let ok = Command::new(st)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return st.clone();
        }
    }
    let version = pinned_version();
    panic!(
        "schemathesis is not installed (tried {candidates:?}): the admin API fuzz test needs it. \
         Run ./ops/test.sh (it installs schemathesis=={version} into .run/venv), or by hand: \
         `python3 -m venv .run/venv && .run/venv/bin/pip install schemathesis=={version}`; \
         or point PORTICO_SCHEMATHESIS at an `st` command"
    );
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

#[test]
fn schemathesis_finds_no_server_error_and_no_route_open_without_the_token() {
    // Prerequisite first: fail fast, and clearly, when schemathesis is missing.
    let st = schemathesis();
    let examples: u32 = env_or("PORTICO_SCHEMATHESIS_EXAMPLES", DEFAULT_EXAMPLES);
    let seed: u64 = env_or("PORTICO_SCHEMATHESIS_SEED", DEFAULT_SEED);
    let max_time: Option<u64> = std::env::var("PORTICO_SCHEMATHESIS_MAX_TIME")
        .ok()
        .map(|v| v.parse().expect("PORTICO_SCHEMATHESIS_MAX_TIME: seconds"));

    let work = tempfile::Builder::new()
        .prefix("portico-schemathesis-")
        .tempdir()
        .unwrap();
    let zk = ZooKeeper::on_shared();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut registry = Proc::spawn(
        "registry",
        registry_command(&zk, port)
            // A history store, so the reports routes are exercised rather than refused.
            .arg("--data-dir")
            .arg(work.path().join("registry-data"))
            .env("PORTICO_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "info"),
        work.path(),
    );
    let http = http_with_timeout(Duration::from_secs(30));
    let healthy = |http: &reqwest::blocking::Client| {
        http.get(format!("{base}/api/v1/health"))
            .send()
            .is_ok_and(|r| r.status().is_success())
    };
    assert!(
        wait_for(Duration::from_secs(60), || healthy(&http)),
        "the registry did not become healthy:\n{}",
        tail_of(&registry.log, 40)
    );

    // A realistic tree in both planes, so the fuzzer meets existing documents.
    let tree = example_tree(|text| text);
    assert!(
        tree["files"].as_object().unwrap().len() > 20,
        "the standalone example tree: {tree}"
    );
    for env in ["live", "sandbox"] {
        let resp = http
            .post(format!("{base}/api/v1/import?env={env}"))
            .bearer_auth(TOKEN)
            .json(&tree)
            .send()
            .unwrap();
        let status = resp.status();
        let text = resp.text().unwrap();
        assert_eq!(status, 200, "import into {env}: {text}");
    }

    // A 502 is the answer of an operation that calls out (gRPC reflection of the address it
    // is given, a sandbox call through a gateway) when what it calls cannot be reached; the
    // document lists it for those operations only, and only there is it not a failure. A
    // sandbox call also answers 503 NO_SANDBOX_GATEWAY while no gateway runs a sandbox
    // listener (none does here), and a test notification 503 PUBLISH_TOKEN_MISSING (this
    // registry has no publisher token).
    let doc: Value = http
        .get(format!("{base}/api/v1/openapi.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let mut calling_out: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|ops| ops.as_object().unwrap().values())
        .filter(|op| op["responses"].get("502").is_some())
        .map(|op| op["operationId"].as_str().unwrap().to_owned())
        .collect();
    calling_out.sort_unstable();
    assert_eq!(
        calling_out,
        [
            "post_notifications_test",
            "post_reflection",
            "post_sandbox_call"
        ]
    );
    let config = work.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        "[[operations]]\ninclude-operation-id = \"post_reflection\"\n\
         checks.not_a_server_error.expected-statuses = [\"2xx\", \"3xx\", \"4xx\", \"502\"]\n\n\
         [[operations]]\ninclude-operation-id = \"post_sandbox_call\"\n\
         checks.not_a_server_error.expected-statuses = [\"2xx\", \"3xx\", \"4xx\", \"502\", \"503\"]\n\n\
         [[operations]]\ninclude-operation-id = \"post_notifications_test\"\n\
         checks.not_a_server_error.expected-statuses = [\"2xx\", \"3xx\", \"4xx\", \"502\", \"503\"]\n",
    )
    .unwrap();

    let mut cmd = Command::new(&st);
    cmd.arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{base}/api/v1/openapi.json"))
        .args(["--url", &format!("{base}/api/v1")])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--header", "X-Portico-Operator: schemathesis"])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_headers_conformance,response_schema_conformance,ignored_auth",
        ])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", &examples.to_string()])
        .args(["--seed", &seed.to_string()])
        // One worker: with several, CPython 3.11 can fail parsing in threads ("AST constructor
        // recursion depth mismatch" inside Hypothesis), an error of the tool, not the API.
        .args(["--workers", "1"])
        .args(["--request-timeout", "30"])
        .args(["--suppress-health-check", "all"])
        .args(["--report", "junit"])
        .arg("--report-dir")
        .arg(work.path().join("report"))
        .env("NO_COLOR", "1")
        .current_dir(work.path());
    if let Some(secs) = max_time {
        cmd.args(["--max-time", &secs.to_string()]);
    }
    println!("schemathesis: seed {seed}, {examples} examples per operation: {cmd:?}");
    let started = Instant::now();
    let mut run = Proc::spawn("schemathesis", &mut cmd, work.path());
    let status = run.child.wait().unwrap();
    let took = started.elapsed();
    let out = std::fs::read_to_string(&run.log).unwrap_or_default();
    // Its report, for the test log (and for measuring how long a run takes).
    println!(
        "schemathesis finished in {:.0}s ({status}):\n{out}",
        took.as_secs_f64()
    );

    // No crash: the process is alive, still healthy, and logged no panic.
    let exited = registry.child.try_wait().unwrap();
    assert!(
        exited.is_none(),
        "the registry exited during the fuzz run ({exited:?}):\n{}",
        tail_of(&registry.log, 60)
    );
    assert!(
        healthy(&http),
        "the registry is not healthy after the fuzz run:\n{}",
        tail_of(&registry.log, 60)
    );
    let log = std::fs::read_to_string(&registry.log).unwrap_or_default();
    assert!(
        !log.contains("panicked"),
        "the registry panicked during the fuzz run:\n{}",
        tail_of(&registry.log, 80)
    );

    assert!(
        status.success(),
        "schemathesis found failures (seed {seed}; reproduce with PORTICO_SCHEMATHESIS_SEED={seed} \
         cargo test -p portico-registry --test schemathesis -- --nocapture):\n{out}\n\
         --- registry log (tail) ---\n{}",
        tail_of(&registry.log, 40)
    );
    // It really ran every operation: the summary names the operations it tested.
    assert!(
        out.contains("operations") || out.contains("Operations"),
        "schemathesis output has no summary:\n{out}"
    );
}
