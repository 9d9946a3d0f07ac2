//! One registry killed (docs/operations/cluster.md, "Running a cluster", "portico-registry"): two
//! `portico-registry` processes on one locked ZooKeeper tree, a gateway on it; the first
//! registry is killed with SIGKILL, and the second keeps serving the console (its page and
//! the API the console reads) and the `portico` CLI; a switch flipped through the survivor
//! with the CLI reaches the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::procs::{
    admin_call as call, http_with_timeout, spawn_gateway, spawn_registry, GatewayProc, RegistryProc,
};
use crate::common::{cli_outcome, portico_cli};
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How long a switch flipped through the surviving registry may take to reach the gateway.
const SWITCH_BOUND: Duration = Duration::from_secs(5);

/// The `portico` CLI against registry `base`: (success, stdout, stderr).
fn portico(base: &str, args: &[&str]) -> (bool, String, String) {
    cli_outcome(
        portico_cli(base, "registry-killed-test", args)
            .output()
            .unwrap(),
    )
}

#[test]
fn a_registry_killed_leaves_the_other_serving_the_console_and_the_cli() {
    let logs = tempfile::tempdir().unwrap();
    let zk = ZooKeeper::on_shared_locked();
    let RegistryProc {
        proc: mut first,
        base: base1,
    } = spawn_registry(&zk, "registry-1", logs.path(), |_| {});
    let RegistryProc {
        proc: mut second,
        base: base2,
    } = spawn_registry(&zk, "registry-2", logs.path(), |_| {});
    let http = || http_with_timeout(Duration::from_secs(10));

    // An API answered by its switch's fallback (its backend is nowhere), set up through the
    // first registry.
    let cluster = json!({"protocol": "http",
                         "endpoints": [{"addr": format!("127.0.0.1:{}", free_port())}]});
    for path in ["/clusters/nowhere", "/sandbox/clusters/nowhere"] {
        let (s, b) = call(&base1, reqwest::Method::PUT, path, Some(cluster.clone()));
        assert_eq!(s, 201, "{b:#}");
    }
    let api = json!({"id": "ping.get", "http": {"method": "GET", "path": "/v1/ping"},
                     "backend": {"cluster": "nowhere", "http": {}}, "auth": "none"});
    let (s, b) = call(&base1, reqwest::Method::POST, "/sandbox/apis", Some(api));
    assert_eq!(s, 201, "{b:#}");
    let (s, b) = call(
        &base1,
        reqwest::Method::POST,
        "/apis/ping.get/publish",
        Some(json!({})),
    );
    assert_eq!(s, 200, "{b:#}");
    let (ok, out, err) = portico(
        &base1,
        &[
            "switch",
            "ping.get",
            "on",
            "--reason",
            "before",
            "--fallback-status",
            "200",
            "--fallback-body",
            r#"{"v":1}"#,
        ],
    );
    assert!(ok, "{out}{err}");

    let GatewayProc {
        proc: _gateway,
        url: gw,
        ..
    } = spawn_gateway(&zk, "gw-1", logs.path(), |cmd| {
        cmd.args(["--access-log", "off"]);
    });
    let served = || -> Option<u64> {
        let r = http().get(format!("{gw}/v1/ping")).send().ok()?;
        r.json::<Value>().ok()?["v"].as_u64()
    };
    assert!(
        wait_for(Duration::from_secs(30), || served() == Some(1)),
        "the gateway never served the first switch"
    );

    // SIGKILL the first registry.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(call(&base1, reqwest::Method::GET, "/health", None).0, 0);

    // The survivor serves the console: its page and the API the console reads.
    second.assert_alive();
    let page = http().get(format!("{base2}/")).send().unwrap();
    assert_eq!(page.status(), 200);
    assert!(page
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap_or_default().starts_with("text/html")));
    for path in ["/apis", "/switches", "/nodes", "/clusters", "/audit"] {
        let (s, b) = call(&base2, reqwest::Method::GET, path, None);
        assert_eq!(s, 200, "GET {path} on the survivor: {b:#}");
    }
    let (_, nodes) = call(&base2, reqwest::Method::GET, "/nodes", None);
    assert!(nodes.to_string().contains("gw-1"), "{nodes:#}");

    // And the CLI: status, and a switch flipped through the survivor reaches the gateway.
    let (ok, out, err) = portico(&base2, &["status"]);
    assert!(ok && out.contains("gw-1"), "{out}{err}");
    let (ok, out, err) = portico(
        &base2,
        &[
            "switch",
            "ping.get",
            "on",
            "--reason",
            "after the loss",
            "--fallback-status",
            "200",
            "--fallback-body",
            r#"{"v":2}"#,
        ],
    );
    assert!(ok, "{out}{err}");
    let flipped = Instant::now();
    assert!(
        wait_for(Duration::from_secs(30), || served() == Some(2)),
        "the switch flipped through the surviving registry never reached the gateway"
    );
    let took = flipped.elapsed();
    eprintln!("registry-1 killed: the switch flipped through registry-2 served after {took:?}");
    assert!(took < SWITCH_BOUND, "{took:?}");
    // The CLI pointed at the dead registry says so.
    let (ok, _, err) = portico(&base1, &["status"]);
    assert!(!ok, "{err}");
    second.assert_alive();
}
