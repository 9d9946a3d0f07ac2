//! The console's hot-key view and "block this key" end to end, in a real headless Chromium: a
//! locked ZooKeeper, the demo backend, a gateway in ZooKeeper mode and the registry binary
//! serving a fresh build of `admin-ui/`, all on free 127.0.0.1 ports.
//!
//! The test publishes `sku.get` with a hot-key policy through the registry and keeps one SKU
//! busy (≈ 100 req/s against a 20 req/s threshold) while others trickle in. The browser
//! (`admin-ui/e2e/hotkeys.e2e.mjs`) opens the API's Hot keys tab, finds the busy SKU as the
//! gateway's detector reports it, and blocks it with a reason. Afterwards this test checks
//! independently: the key-level switch in the registry (its `match` selects exactly that
//! SKU, who and why recorded), the gateway answering the busy SKU with 503 `API_DEGRADED`
//! while another SKU still reaches the backend, and the audit log. Screenshots go to
//! `target/console-screenshots/` (or `$PORTICO_SCREENSHOT_DIR`), prefixed `hotkeys-`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::browser::{build_console, run_script, screenshot_dir};
use common::procs::{
    admin_call as call, http, spawn_gateway, spawn_registry, GatewayProc, RegistryProc,
};
use common::TOKEN;
use portico_demo::process::BackendProcess;
use portico_testkit::{wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODE_ID: &str = "gw-hotkeys-e2e";
const API: &str = "sku.get";
const HOT: &str = "BK-1";

/// Sends `GET /v1/skus/<sku>` at about `per_s` requests a second until `stop`; counts answers.
fn load(
    gateway: String,
    sku: &'static str,
    per_s: u64,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let client = http();
        let every = Duration::from_micros(1_000_000 / per_s);
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if client
                .get(format!("{gateway}/v1/skus/{sku}"))
                .send()
                .is_ok()
            {
                answered.fetch_add(1, Ordering::Relaxed);
            }
            next += every;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
    })
}

#[test]
fn console_hot_keys_view_blocks_a_key_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-hotkeys-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);

    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let RegistryProc {
        proc: mut registry,
        base,
    } = spawn_registry(&zk, "registry", &logs, |cmd| {
        cmd.env("PORTICO_CONSOLE_DIR", &console_dir);
    });

    // sku.get through the registry, as a backend team would: the cluster, a draft, publish.
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]});
    for env in ["", "/sandbox"] {
        let (status, reply) = call(
            &base,
            reqwest::Method::PUT,
            &format!("{env}/clusters/demo-http"),
            Some(cluster.clone()),
        );
        assert_eq!(status, 201, "{env}: {reply:#}");
    }
    let api = json!({
        "id": API,
        "http": {"method": "GET", "path": "/v1/skus/{sku}"},
        "backend": {"cluster": "demo-http", "timeout_ms": 3000, "http": {"path": "/echo/skus/{sku}"}},
        "auth": "none",
        "policy": {"hot_keys": {"key": ["path:sku"], "rate_above": 20, "top": 5}}
    });
    let (status, reply) = call(
        &base,
        reqwest::Method::PUT,
        &format!("/sandbox/apis/{API}"),
        Some(api),
    );
    assert_eq!(status, 201, "{reply:#}");
    let (status, reply) = call(
        &base,
        reqwest::Method::POST,
        &format!("/apis/{API}/publish"),
        Some(json!({"comment": "hot-key e2e"})),
    );
    assert_eq!(status, 200, "{reply:#}");

    let GatewayProc {
        proc: mut gateway,
        url: gw,
        ..
    } = spawn_gateway(&zk, NODE_ID, &logs, |_| {});
    let serving = wait_for(Duration::from_secs(60), || {
        http()
            .get(format!("{gw}/v1/skus/BK-2"))
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    gateway.assert_alive();
    assert!(
        serving,
        "the gateway does not serve {API}:\n{}",
        gateway.tail()
    );

    // One SKU busy, two cold ones trickling in.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let loaders = vec![
        load(gw.clone(), HOT, 100, stop.clone(), answered.clone()),
        load(gw.clone(), "BK-2", 2, stop.clone(), answered.clone()),
        load(gw.clone(), "BK-3", 2, stop.clone(), answered.clone()),
    ];

    let env = BTreeMap::from([
        ("CONSOLE_URL", base.clone()),
        ("ADMIN_TOKEN", TOKEN.to_owned()),
        ("API", API.to_owned()),
        ("HOT", HOT.to_owned()),
    ]);
    let passed = run_script("hotkeys.e2e.mjs", &chromium, &env, Duration::from_secs(180));
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.join().unwrap();
    }
    registry.assert_alive();
    gateway.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}",
        screenshot_dir().display(),
        registry.tail(),
        gateway.tail()
    );
    assert!(answered.load(Ordering::Relaxed) > 0);

    // Independently: the switch selects exactly the busy SKU, with who and why.
    let label = format!("{API}@hot-{HOT}");
    let (status, sw) = call(
        &base,
        reqwest::Method::GET,
        &format!("/switches/{label}"),
        None,
    );
    assert_eq!(status, 200, "{sw:#}");
    assert_eq!(sw["degraded"], true, "{sw:#}");
    assert_eq!(sw["match"], json!({"path:sku": [HOT]}), "{sw:#}");
    assert_eq!(sw["reason"], format!("e2e: {HOT} oversold"));
    assert_eq!(sw["updated_by"], "e2e-sre-hotkeys");
    // The gateway: the busy SKU is degraded, another still reaches the backend.
    let blocked = http().get(format!("{gw}/v1/skus/{HOT}")).send().unwrap();
    assert_eq!(blocked.status(), 503);
    let envelope: Value = blocked.json().unwrap();
    assert_eq!(envelope["code"], "API_DEGRADED", "{envelope:#}");
    let other = http().get(format!("{gw}/v1/skus/BK-2")).send().unwrap();
    assert_eq!(other.status(), 200);
    // The audit log has the console's write under the operator's name.
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=20", None);
    let entry = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["target"].as_str().is_some_and(|t| t.contains(&label)))
        .unwrap_or_else(|| panic!("no audit entry for {label}: {audit:#}"));
    assert_eq!(entry["actor"], "e2e-sre-hotkeys", "{entry:#}");
}
