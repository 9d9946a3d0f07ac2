//! The console's cluster view end to end, in a real headless Chromium: a locked ZooKeeper, two
//! demo backends (a primary and a standby set), a gateway in ZooKeeper mode and the registry
//! binary serving a fresh build of `admin-ui/`, all on free 127.0.0.1 ports.
//!
//! `admin-ui/e2e/cluster.e2e.mjs` signs in, opens Clusters and the cluster (both sets, the
//! gateway, the autoscale rules), fails over to standby with the button (a reason is required)
//! and back, waiting each time for the gateway's own `/status` (through the view) to say the
//! new set. Afterwards this test checks independently: the cluster document in ZooKeeper, the
//! gateway's `/status`, and the audit log (who, from, to, why). Screenshots go to
//! `target/console-screenshots/` (or `$PORTICO_SCREENSHOT_DIR`), prefixed `cluster-`.
//!
//! Needs node + `admin-ui/node_modules` and Chromium, as `console_e2e.rs` (./ops/test.sh
//! installs both); without them it fails and says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::browser::{build_console, run_script, screenshot_dir};
use common::procs::{
    admin_call as call, http, in_sync, spawn_gateway, spawn_registry, wait_registered, GatewayProc,
    RegistryProc,
};
use common::TOKEN;
use portico_demo::process::BackendProcess;
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const CLUSTER: &str = "orders-dc";
const NODE_ID: &str = "gw-cluster-e2e";

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

    let zk = ZooKeeper::start_locked();
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
    let (status, reply) = call(&base, reqwest::Method::POST, "/clusters", Some(cluster));
    assert_eq!(status, 201, "{reply:#}");

    let GatewayProc {
        proc: mut gateway,
        admin,
        ..
    } = spawn_gateway(&zk, NODE_ID, &logs, |_| {});
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
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=20", None);
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
}
