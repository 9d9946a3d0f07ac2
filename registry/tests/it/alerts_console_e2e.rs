//! The console's Alerts and Reports pages end to end, in a real headless Chromium: a locked
//! ZooKeeper and the registry binary (serving a fresh build of `admin-ui/`) on a history store
//! holding a synthetic day (`common::seed_history`), with a published API that has no traffic
//! and a `qps_below` rule on it, so an alert fires (console only: no receivers).
//!
//! `admin-ui/e2e/alerts.e2e.mjs` signs in, sees the banner, the alert firing, its rule and its
//! history, saves a rule through the form (and sees a bad one refused), then reads the day's
//! and the week's reports. Afterwards this test checks the rule the console saved in the tree.
//! Screenshots go to `target/console-screenshots/` (or `$PORTICO_SCREENSHOT_DIR`), prefixed
//! `alerts-`. Needs node + `admin-ui/node_modules` and Chromium, as `console_e2e.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::browser::{build_console, run_script, screenshot_dir};
use crate::common::procs::{admin_call as call, spawn_registry, RegistryProc};
use crate::common::{seed_history, TOKEN};
use portico_testkit::{wait_for, ZooKeeper};
use serde_json::json;
use std::time::Duration;

const RULE: &str = "pay-idle";
const API: &str = "pay.create";

#[test]
fn console_alerts_and_reports_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-alerts-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);
    let db = work.path().join("history.sqlite");
    seed_history(&db);
    // Half an hour ago, 5000 deliberately degraded answers (a switch on): reported apart, they
    // leave the API's availability at 98 % (docs/operations/history-and-reports.md, "Availability and degraded
    // answers").
    {
        use portico_registry::history::{HistoryStore, Limits};
        let store = HistoryStore::open(&db, Limits::default()).unwrap();
        let now_min = (portico_control::clock::now_ms() / 60_000) as i64;
        store
            .add(&[crate::common::rollup(
                API,
                now_min - 30,
                &[(503, "API_DEGRADED", 5000)],
                &[],
            )])
            .unwrap();
    }

    let zk = ZooKeeper::on_shared_locked();
    let RegistryProc {
        proc: mut registry,
        base,
    } = spawn_registry(&zk, "registry", &logs, |cmd| {
        cmd.arg("--history-db")
            .arg(&db)
            .arg("--data-dir")
            .arg(work.path().join("data"))
            .env("PORTICO_CONSOLE_DIR", &console_dir);
    });

    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:9"}]});
    for path in ["/clusters/pay", "/sandbox/clusters/pay"] {
        let (s, r) = call(&base, reqwest::Method::PUT, path, Some(cluster.clone()));
        assert_eq!(s, 201, "{r:#}");
    }
    let api = json!({"id": API, "http": {"method": "POST", "path": "/v1/pay.create"},
        "backend": {"cluster": "pay", "http": {}}, "owner": "owner-pay@example.com"});
    let (s, r) = call(&base, reqwest::Method::POST, "/sandbox/apis", Some(api));
    assert_eq!(s, 201, "{r:#}");
    let (s, r) = call(
        &base,
        reqwest::Method::POST,
        &format!("/apis/{API}/publish"),
        Some(json!({})),
    );
    assert_eq!(s, 200, "{r:#}");
    let rule = json!({"api": API, "condition": "qps_below", "threshold": 1, "for_s": 0, "severity": "ticket"});
    let (s, r) = call(
        &base,
        reqwest::Method::PUT,
        &format!("/alerts/{RULE}"),
        Some(rule),
    );
    assert_eq!(s, 201, "{r:#}");
    let firing = wait_for(Duration::from_secs(60), || {
        let (_, a) = call(&base, reqwest::Method::GET, "/alerting", None);
        a["alerts"].as_array().is_some_and(|l| {
            l.iter()
                .any(|x| x["rule"] == RULE && x["state"] == "firing")
        })
    });
    assert!(
        firing,
        "the idle API's alert did not fire:\n{}",
        registry.tail()
    );

    let env = std::collections::BTreeMap::from([
        ("CONSOLE_URL", base.clone()),
        ("ADMIN_TOKEN", TOKEN.to_owned()),
        ("RULE", RULE.to_owned()),
        ("API", API.to_owned()),
    ]);
    let passed = run_script("alerts.e2e.mjs", &chromium, &env, Duration::from_secs(180));
    registry.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n--- registry log ---\n{}",
        screenshot_dir().display(),
        registry.tail()
    );

    // Independently: the rule saved through the console is in the tree, the bad one is not.
    let (s, doc) = call(&base, reqwest::Method::GET, "/alerts/e2e-slow", None);
    assert_eq!(s, 200, "{doc:#}");
    assert_eq!(doc["condition"], "tp99_ms_above");
    assert_eq!(doc["threshold"], 250);
    assert_eq!(
        call(&base, reqwest::Method::GET, "/alerts/e2e-bad", None).0,
        404
    );
    // Removed through the confirmation; the one cancelled is kept (checked above).
    assert_eq!(
        call(&base, reqwest::Method::GET, "/alerts/e2e-gone", None).0,
        404
    );
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=20", None);
    let by_console = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["action"] == "alert.put" && e["actor"] == "e2e-sre-alerts");
    assert!(by_console, "{audit:#}");
}
