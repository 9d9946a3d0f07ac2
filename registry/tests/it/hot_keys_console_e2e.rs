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

use crate::common::browser::{build_console, run_script, screenshot_dir};
use crate::common::procs::{
    admin_call as call, http, spawn_gateway, spawn_registry, GatewayProc, RegistryProc,
};
use crate::common::TOKEN;
use portico_testkit::procs::BackendProcess;
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

    let zk = ZooKeeper::on_shared_locked();
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

/// A zkCli typo in a switch (docs/operations/registry.md, "What the gateways serve", "Changes outside
/// the registry"): the API is degraded through the registry, then `{"degraded":fals` is
/// written straight into ZooKeeper as the operator would with zkCli. The gateway refuses it
/// and keeps serving the degraded version; the registry's lists say so, Nodes & health lists
/// the node's rejected document, and the audit log has the write as "outside the registry"
/// (and the registry's own write only once). The browser part is
/// `admin-ui/e2e/refused.e2e.mjs` (screenshots prefixed `refused-`).
#[test]
fn a_zkcli_typo_is_shown_refused_in_chromium() {
    const API: &str = "typo.get";
    const NODE: &str = "gw-refused-e2e";
    let started = Instant::now();
    let work = tempfile::Builder::new()
        .prefix("portico-refused-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);

    let zk = ZooKeeper::on_shared_locked();
    let RegistryProc {
        proc: mut registry,
        base,
    } = spawn_registry(&zk, "registry", &logs, |cmd| {
        cmd.env("PORTICO_CONSOLE_DIR", &console_dir);
    });
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:9"}]});
    for env in ["", "/sandbox"] {
        let (status, reply) = call(
            &base,
            reqwest::Method::PUT,
            &format!("{env}/clusters/nowhere"),
            Some(cluster.clone()),
        );
        assert_eq!(status, 201, "{env}: {reply:#}");
    }
    let api = json!({"id": API, "http": {"method": "GET", "path": "/v1/typo"},
        "backend": {"cluster": "nowhere", "http": {}}, "auth": "none"});
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
        Some(json!({"comment": "refused e2e"})),
    );
    assert_eq!(status, 200, "{reply:#}");
    let GatewayProc {
        proc: mut gateway,
        admin,
        ..
    } = spawn_gateway(&zk, NODE, &logs, |_| {});
    let status_of = || -> Value {
        http()
            .get(format!("{admin}/status"))
            .send()
            .ok()
            .and_then(|r| r.json().ok())
            .unwrap_or(Value::Null)
    };

    // Degraded through the registry, served degraded.
    let (status, reply) = call(
        &base,
        reqwest::Method::PUT,
        &format!("/switches/{API}"),
        Some(json!({"degraded": true, "reason": "db failover"})),
    );
    assert_eq!(status, 201, "{reply:#}");
    let degraded = wait_for(Duration::from_secs(60), || {
        status_of()["switches_degraded"]
            .as_array()
            .is_some_and(|s| s.iter().any(|v| v == API))
    });
    gateway.assert_alive();
    assert!(
        degraded,
        "the gateway never served {API} degraded:\n{}",
        gateway.tail()
    );

    // The typo, with zkCli as the operator.
    let creds = zk.credentials().expect("a locked ZooKeeper");
    let out = portico_testkit::zkcli_as(
        &zk.connect_string(),
        &creds.operator,
        &[
            "set",
            &format!("{}/switches/{API}", zk.root()),
            r#"{"degraded":fals"#,
        ],
    );
    assert!(out.success, "zkCli set: {}\n{}", out.stdout, out.stderr);

    // The registry's list: refused, with the reason and the served (degraded) version.
    let mut item = Value::Null;
    let refused = wait_for(Duration::from_secs(30), || {
        let (_, list) = call(&base, reqwest::Method::GET, "/switches", None);
        item = list["items"]
            .as_array()
            .and_then(|i| i.iter().find(|i| i["id"] == API).cloned())
            .unwrap_or(Value::Null);
        item["served"]["refused"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    });
    assert!(refused, "the list never showed the refusal: {item:#}");
    assert!(
        item["error"]
            .as_str()
            .unwrap()
            .starts_with("not valid JSON"),
        "{item:#}"
    );
    let refusal = &item["served"]["refused"][0];
    assert_eq!(refusal["node_id"], NODE, "{item:#}");
    assert_eq!(refusal["kept_previous"], true, "{item:#}");
    assert_eq!(refusal["kept"]["degraded"], true, "{item:#}");
    assert_eq!(
        item["served"]["degraded"], true,
        "still served degraded: {item:#}"
    );
    assert!(item["written_at"].as_str().is_some(), "{item:#}");
    // GET /nodes lists the node's rejected document.
    let (_, nodes) = call(&base, reqwest::Method::GET, "/nodes", None);
    let node = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == NODE)
        .unwrap_or_else(|| panic!("{nodes:#}"));
    assert_eq!(
        node["rejected_documents"][0]["path"],
        format!("switches/{API}"),
        "{node:#}"
    );
    // The audit log: the zkCli write once, as outside the registry and invalid; the
    // registry's own write is not reported again.
    let mut outside = Vec::new();
    let audited = wait_for(Duration::from_secs(20), || {
        let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=100", None);
        outside = audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["actor"] == "outside the registry")
            .cloned()
            .collect();
        !outside.is_empty()
    });
    assert!(
        audited,
        "no 'outside the registry' entry:\n{}",
        registry.tail()
    );
    assert_eq!(
        outside.len(),
        1,
        "one outside write, recorded once: {outside:#?}"
    );
    assert_eq!(outside[0]["target"], format!("switches/{API}"));
    assert_eq!(outside[0]["action"], "outside.write");
    assert_eq!(outside[0]["detail"]["valid"], false);
    assert!(outside[0]["detail"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("not valid JSON"));

    let env = BTreeMap::from([
        ("CONSOLE_URL", base.clone()),
        ("ADMIN_TOKEN", TOKEN.to_owned()),
        ("API", API.to_owned()),
        ("NODE_ID", NODE.to_owned()),
    ]);
    let passed = run_script("refused.e2e.mjs", &chromium, &env, Duration::from_secs(90));
    registry.assert_alive();
    gateway.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}",
        screenshot_dir().display(),
        registry.tail(),
        gateway.tail()
    );
    // Still exactly one outside entry: nothing the registry did since was reported.
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=100", None);
    let count = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == "outside the registry")
        .count();
    assert_eq!(count, 1, "{audit:#}");
    println!("refused e2e: {:.1} s", started.elapsed().as_secs_f64());
}
