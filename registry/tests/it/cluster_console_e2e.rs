//! The console's cluster view end to end, in a real headless Chromium: a locked ZooKeeper, two
//! demo backends (a primary and a standby set), a gateway in ZooKeeper mode and the registry
//! binary serving a fresh build of `admin-ui/`, all on free 127.0.0.1 ports.
//!
//! `admin-ui/e2e/cluster.e2e.mjs` signs in, opens Clusters and the cluster (both sets, the
//! gateway, the autoscale rules), fails over to standby with the button (a reason is required)
//! and back, waiting each time for the gateway's own `/status` (through the view) to say the
//! new set. Afterwards this test checks independently: the cluster document in ZooKeeper, the
//! gateway's `/status`, and the audit log (who, from, to, why).
//!
//! The same run then walks the operator workflow the console offers (docs/operations/registry.md,
//! "Draft → sandbox → publish → rollback"): a second cluster whose primary endpoint is down
//! fails over on its own, and the page shows standby (automatic, with the reason) where the
//! document says primary; an HTTP-backed API is created and edited, the demo proto imported
//! with a preview naming the API that owns its route, the conflicting draft shown refused and
//! not tried, the API's draft deleted; a cluster created, edited and deleted. This test then
//! checks the audit log and that the refusal is gone with the deleted draft. Screenshots go to
//! `target/console-screenshots/` (or `$PORTICO_SCREENSHOT_DIR`), prefixed `cluster-`.
//!
//! Needs node + `admin-ui/node_modules` and Chromium, as `console_e2e.rs` (./ops/test.sh
//! installs both); without them it fails and says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::browser::{build_console, run_script, screenshot_dir};
use crate::common::procs::{
    admin_call as call, http, in_sync, spawn_gateway, spawn_registry, wait_registered, GatewayProc,
    RegistryProc,
};
use crate::common::TOKEN;
use portico_testkit::procs::BackendProcess;
use portico_testkit::{free_port, ZooKeeper};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const CLUSTER: &str = "orders-dc";
const NODE_ID: &str = "gw-cluster-e2e";
/// A cluster whose primary endpoint refuses connections: the gateway's probes fail it over.
const AUTO_CLUSTER: &str = "auto-dc";
/// The sandbox gRPC cluster the imported drafts call.
const GRPC_CLUSTER: &str = "demo-grpc";

#[test]
fn console_cluster_view_fails_over_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-cluster-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);

    let zk = ZooKeeper::on_shared_locked();
    let primary = BackendProcess::start_http().unwrap();
    let standby = BackendProcess::start_http().unwrap();
    let RegistryProc {
        proc: mut registry,
        base,
    } = spawn_registry(&zk, "registry", &logs, |cmd| {
        cmd.env("PORTICO_CONSOLE_DIR", &console_dir);
    });

    let cluster = json!({
        "name": CLUSTER,
        "protocol": "http",
        "endpoints": [{"addr": primary.http.to_string()}],
        "standby": {"endpoints": [{"addr": standby.http.to_string()}], "failback": "manual"},
        "autoscale": {"webhook": "http://127.0.0.1:9/scale", "cooldown_s": 60,
                      "rules": [{"rps_above": 1000.0, "for_s": 30, "action": "up"}]},
    });
    let (status, reply) = call(
        &base,
        reqwest::Method::POST,
        "/clusters",
        Some(cluster.clone()),
    );
    assert_eq!(status, 201, "{reply:#}");
    // Drafts call sandbox clusters: the HTTP one for the API made in the console, a gRPC one
    // for the imported drafts.
    let grpc =
        json!({"name": GRPC_CLUSTER, "protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:1"}]});
    for (path, body) in [
        ("/sandbox/clusters", cluster),
        ("/sandbox/clusters", grpc),
        (
            "/clusters",
            json!({
                "name": AUTO_CLUSTER, "protocol": "http",
                "endpoints": [{"addr": format!("127.0.0.1:{}", free_port())}],
                "health_check": {"path": "/healthz", "interval_ms": 200, "timeout_ms": 200,
                                 "unhealthy_after": 1, "healthy_after": 1},
                "standby": {"endpoints": [{"addr": standby.http.to_string()}], "failover_below": 0.5},
            }),
        ),
    ] {
        let (status, reply) = call(&base, reqwest::Method::POST, path, Some(body));
        assert_eq!(status, 201, "{path}: {reply:#}");
    }

    let GatewayProc {
        proc: mut gateway,
        admin,
        ..
    } = spawn_gateway(&zk, NODE_ID, &logs, |cmd| {
        cmd.args(["--sandbox-listen", &format!("127.0.0.1:{}", free_port())]);
    });
    let registered = wait_registered(&base, Duration::from_secs(60), in_sync(NODE_ID));
    gateway.assert_alive();
    assert!(
        registered,
        "the gateway did not register:\n{}",
        gateway.tail()
    );

    let env = BTreeMap::from([
        ("CONSOLE_URL", base.clone()),
        ("ADMIN_TOKEN", TOKEN.to_owned()),
        ("CLUSTER", CLUSTER.to_owned()),
        ("NODE_ID", NODE_ID.to_owned()),
        ("PRIMARY", primary.http.to_string()),
        ("STANDBY", standby.http.to_string()),
        ("AUTO_CLUSTER", AUTO_CLUSTER.to_owned()),
        ("GRPC_CLUSTER", GRPC_CLUSTER.to_owned()),
        (
            "PROTO",
            crate::common::browser::workspace()
                .join("protos/demo/order.proto")
                .display()
                .to_string(),
        ),
    ]);
    let passed = run_script("cluster.e2e.mjs", &chromium, &env, Duration::from_secs(180));
    registry.assert_alive();
    gateway.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}",
        screenshot_dir().display(),
        registry.tail(),
        gateway.tail()
    );

    // Independently: ZooKeeper has primary back, the gateway serves the latest tree, the audit
    // log has both moves by the console's operator with their reasons.
    let (_, doc) = call(
        &base,
        reqwest::Method::GET,
        &format!("/clusters/{CLUSTER}"),
        None,
    );
    assert_eq!(doc["active"], "primary", "{doc:#}");
    assert_eq!(doc["standby"]["failback"], "manual", "other fields kept");
    assert!(
        wait_registered(&base, Duration::from_secs(5), in_sync(NODE_ID)),
        "the gateway is behind the tree"
    );
    let served = http()
        .get(format!("{admin}/status"))
        .send()
        .unwrap()
        .json::<Value>()
        .unwrap();
    assert_eq!(
        served["clusters"][CLUSTER]["active"], "primary",
        "{:#}",
        served["clusters"]
    );
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=200", None);
    let moves: Vec<&Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "cluster.failover")
        .collect();
    assert_eq!(moves.len(), 2, "{audit:#}");
    assert_eq!(moves[1]["actor"], "e2e-sre-clusters");
    assert_eq!(moves[1]["detail"]["to"], "standby");
    assert_eq!(
        moves[1]["detail"]["reason"],
        "e2e: primary data centre drill"
    );
    assert_eq!(moves[0]["detail"]["from"], "standby");
    assert_eq!(moves[0]["detail"]["to"], "primary");

    // The workflow, as the audit log tells it: the console's operator made the API, edited it,
    // imported, deleted the draft; made, edited and deleted a cluster.
    let mine: Vec<(String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == "e2e-sre-clusters")
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["target"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    for (action, target) in [
        ("draft.create", "sandbox/apis/checkout.create"),
        ("draft.put", "sandbox/apis/checkout.create"),
        ("draft.delete", "sandbox/apis/checkout.create"),
        ("cluster.create", "clusters/e2e-web"),
        ("cluster.create", "sandbox/clusters/e2e-web"),
        ("cluster.put", "clusters/e2e-web"),
        ("cluster.delete", "clusters/e2e-web"),
    ] {
        assert!(
            mine.iter().any(|(a, t)| a == action && t.ends_with(target)),
            "no {action} of {target} in {mine:?}"
        );
    }
    assert!(mine.iter().any(|(a, _)| a == "api.import"), "{mine:?}");
    // With the API that owned POST /v1/orders deleted, the imported draft is served: neither
    // the registry's check nor the gateway's sandbox refuses it any more.
    let freed = (0..50).any(|_| {
        let (_, served) = call(
            &base,
            reqwest::Method::GET,
            "/sandbox/apis/order.createorder/served",
            None,
        );
        if served["refused"] == json!([]) && served["nodes"] == 1 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
        false
    });
    assert!(freed, "order.createorder still refused");
}
