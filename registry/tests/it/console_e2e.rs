//! The console end to end, in a real headless Chromium: a real ZooKeeper, the demo backend
//! (HTTP + gRPC), a gateway in ZooKeeper mode with live and sandbox listeners, and the
//! registry binary serving a fresh build of `admin-ui/`, all on free 127.0.0.1 ports.
//!
//! The test seeds what an operator would have set up before (the demo gRPC cluster, live and
//! sandbox; a sandbox app; a live merchant app) through the registry API, then runs
//! `admin-ui/e2e/console.e2e.mjs` (playwright-core driving Debian's `/usr/bin/chromium`; no
//! browser download), which signs in, uploads the demo proto, edits the policy, calls the
//! draft in the sandbox, publishes, checks the gateway answers, degrades the API from the
//! Switches page (reason required), checks the gateway answers the fallback, restores it, and
//! visits Apps and Nodes & health, saving a screenshot of each page to the folder printed
//! below (`target/console-screenshots/` by default, or `$PORTICO_SCREENSHOT_DIR`). Afterwards
//! the test checks the outcome independently: switch document, audit log, history, a signed
//! call to the gateway, per-API health figures, and the console's static serving.
//!
//! Needs node + `admin-ui/node_modules` (`npm ci`) and Chromium (`apt-get install chromium`);
//! `./ops/test.sh` installs both. Without them the test fails and says so: it never passes
//! silently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::browser::{build_console, run_script, screenshot_dir, workspace};
use crate::common::procs::{
    admin_call, http, spawn_gateway, spawn_registry, wait_registered, GatewayProc, RegistryProc,
};
use crate::common::{tail_of, TOKEN};
use portico_testkit::procs::BackendProcess;
use portico_testkit::{free_port, ZooKeeper};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const LIVE_APP: &str = "merchant-e2e";
const LIVE_SECRET: &str = "merchant-e2e-secret-0123456789";
const CLUSTER: &str = "demo-grpc";
const API: &str = "order.getorder";

/// The registry under test, through its admin API.
struct Registry {
    base: String,
}

impl Registry {
    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        admin_call(&self.base, method, path, body)
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let (status, reply) = self.call(reqwest::Method::POST, path, Some(body));
        assert!(
            (200..300).contains(&status),
            "POST {path} → {status}: {reply:#}"
        );
        reply
    }

    fn get(&self, path: &str) -> Value {
        let (status, reply) = self.call(reqwest::Method::GET, path, None);
        assert_eq!(status, 200, "GET {path}: {reply:#}");
        reply
    }
}

/// A signed call to the gateway, with the contract's signer.
fn gateway_get(base: &str, path: &str) -> (u16, String, Option<String>) {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let nonce = format!("rust-e2e-{:016x}", fastrand::u64(..));
    let signed = portico_control::sign::sign_request(
        LIVE_SECRET.as_bytes(),
        "GET",
        path,
        None,
        LIVE_APP,
        ts,
        &nonce,
        b"",
    );
    let mut req = http().get(format!("{base}{path}"));
    for (k, v) in signed.pairs() {
        req = req.header(k, v);
    }
    let resp = req.send().unwrap();
    let status = resp.status().as_u16();
    let degraded = resp
        .headers()
        .get("x-degraded")
        .map(|v| v.to_str().unwrap_or("").to_owned());
    (status, resp.text().unwrap_or_default(), degraded)
}

#[test]
fn console_end_to_end_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-console-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let shots = screenshot_dir();
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    println!("console screenshots: {}", shots.display());
    eprintln!("console screenshots: {}", shots.display());

    // Prerequisites first: fail fast, and clearly, when the browser toolchain is missing.
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);
    assert!(console_dir.join("index.html").is_file());

    // ZooKeeper, the demo backend, the registry.
    let zk = ZooKeeper::on_shared_locked();
    let backend = BackendProcess::start_http_grpc().unwrap();
    let grpc = backend.grpc.expect("the demo backend's gRPC address");
    let RegistryProc {
        proc: mut registry,
        base,
    } = spawn_registry(&zk, "registry", &logs, |cmd| {
        cmd.env("PORTICO_CONSOLE_DIR", &console_dir)
            .env("RUST_LOG", "info");
    });
    let reg = Registry { base };

    // What an operator set up before: the cluster (live and sandbox) and two apps.
    let cluster =
        json!({"name": CLUSTER, "protocol": "grpc", "endpoints": [{"addr": grpc.to_string()}]});
    reg.post("/clusters", cluster.clone());
    reg.post("/sandbox/clusters", cluster);
    reg.post(
        "/sandbox/apps",
        json!({"app_key": "sandbox-e2e", "name": "console sandbox", "apis": ["*"]}),
    );
    reg.post(
        "/apps",
        json!({"app_key": LIVE_APP, "secret": LIVE_SECRET, "name": "E2E merchant", "apis": ["*"]}),
    );

    // The gateway, in ZooKeeper mode, with a sandbox listener.
    let sandbox = free_port();
    let GatewayProc {
        proc: mut gateway,
        url: gateway_url,
        ..
    } = spawn_gateway(&zk, "gw-console-e2e", &logs, |cmd| {
        cmd.args(["--sandbox-listen", &format!("127.0.0.1:{sandbox}")])
            .arg("--access-log")
            .arg(logs.join("access.log"));
    });
    let registered = wait_registered(&reg.base, Duration::from_secs(60), |n| {
        n["sandbox_addr"] == format!("127.0.0.1:{sandbox}") && n["in_sync"] == true
    });
    gateway.assert_alive();
    assert!(
        registered,
        "the gateway did not register in ZooKeeper:\n{}",
        gateway.tail()
    );

    // The browser run.
    let proto = workspace().join("protos/demo/order.proto");
    let env = BTreeMap::from([
        ("CONSOLE_URL", reg.base.clone()),
        ("ADMIN_TOKEN", TOKEN.to_owned()),
        ("GATEWAY_URL", gateway_url.clone()),
        ("LIVE_APP_KEY", LIVE_APP.to_owned()),
        ("LIVE_APP_SECRET", LIVE_SECRET.to_owned()),
        ("PROTO_FILE", proto.display().to_string()),
        ("CLUSTER", CLUSTER.to_owned()),
    ]);
    let started = Instant::now();
    let passed = run_script("console.e2e.mjs", &chromium, &env, Duration::from_secs(240));
    registry.assert_alive();
    gateway.assert_alive();
    assert!(
        passed,
        "the browser run failed; screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}\n--- gateway access log ---\n{}",
        shots.display(),
        registry.tail(),
        gateway.tail(),
        tail_of(&logs.join("access.log"), 60)
    );

    // Independent checks of what the console did.
    let sw = reg.get(&format!("/switches/{API}"));
    assert_eq!(sw["degraded"], false, "{sw:#}");
    assert_eq!(sw["reason"], "e2e: DB healthy again");
    assert_eq!(sw["updated_by"], "e2e-sre");
    assert_eq!(sw["fallback"]["body"]["fallback"], true, "{sw:#}");
    let audit = reg.get("/audit?limit=200");
    let actions: Vec<(String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or("").to_owned(),
                e["actor"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    for action in [
        "api.import",
        "draft.put",
        "api.publish",
        "api.rollback",
        "switch.on",
        "switch.off",
        "app.create",
    ] {
        assert!(
            actions
                .iter()
                .any(|(a, who)| a == action && who == "e2e-sre"),
            "no {action} by e2e-sre in the audit log: {actions:?}"
        );
    }
    let history = reg.get(&format!("/apis/{API}/history"));
    // v1, v2 (timeout 1200), then v1 again as v3.
    assert_eq!(history["live_version"], 3, "{history:#}");
    let live = reg.get(&format!("/apis/{API}"));
    assert_eq!(live["policy"]["bulkhead"]["max_concurrent"], 32, "{live:#}");
    assert_eq!(live["backend"]["timeout_ms"], 1500);
    let (status, body, degraded) = gateway_get(&gateway_url, "/v1/orders/42");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("42") && degraded.is_none(), "{body}");
    let health = reg.get("/health/apis?series=none");
    let row = health["apis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["api"] == API)
        .cloned()
        .unwrap_or_else(|| panic!("{API} missing from /health/apis: {health:#}"));
    assert_eq!(row["published"], true);
    assert_eq!(row["breaker"], "closed", "{row:#}");
    assert!(
        health["nodes"][0]["ok"] == true,
        "the registry could not scrape the gateway: {health:#}"
    );

    // The console's static serving: deep links are the app, a missing asset is a 404, the API
    // keeps its envelope, and the console needs no token.
    let h = http();
    for path in ["/", "/switches", "/apis/order.getorder"] {
        let resp = h.get(format!("{}{path}", reg.base)).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        assert!(resp.text().unwrap().contains("<div id=\"app\">"), "{path}");
    }
    let resp = h
        .get(format!("{}/assets/missing-123.js", reg.base))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let resp = h
        .get(format!("{}/api/v1/no-such-route", reg.base))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let resp = h.get(format!("{}/api/v1/apis", reg.base)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 401, "the API still wants the token");

    let pngs = std::fs::read_dir(&shots)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "png"))
        })
        .count();
    assert!(pngs >= 10, "only {pngs} screenshots in {}", shots.display());
    println!(
        "console e2e passed in {:.1} s; {pngs} screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
}

/// The console's own routes without a browser or a gateway: what `/sandbox/call` and
/// `/health/apis` answer when something is missing, and that the console needs no token.
#[test]
fn console_routes_explain_what_is_missing() {
    let zk = ZooKeeper::on_shared_locked();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = rt.block_on(crate::common::registry(&zk)).base;
    let reg = Registry {
        base: api.trim_end_matches("/api/v1").to_owned(),
    };
    let call = |body: Value| reg.call(reqwest::Method::POST, "/sandbox/call", Some(body));

    // Without a draft, a method and a path: which field is missing.
    let (status, reply) = call(json!({}));
    assert_eq!((status, reply["code"].as_str()), (400, Some("BAD_REQUEST")));
    assert!(
        reply["message"].as_str().unwrap().contains("method"),
        "{reply}"
    );
    let (status, reply) = call(json!({"api_id": "nope"}));
    assert_eq!(status, 404, "{reply}");
    let (status, reply) = call(json!({"unknown": 1}));
    assert_eq!(
        (status, reply["code"].as_str()),
        (422, Some("VALIDATION_FAILED"))
    );

    // A draft whose path has variables needs the filled path.
    reg.post(
        "/sandbox/clusters",
        json!({"name": "c", "protocol": "http", "endpoints": [{"addr": "127.0.0.1:9"}]}),
    );
    reg.post(
        "/sandbox/apis",
        json!({"id": "t.get", "http": {"method": "GET", "path": "/t/{id}"}, "backend": {"cluster": "c", "http": {}}}),
    );
    let (status, reply) = call(json!({"api_id": "t.get"}));
    assert_eq!(status, 400, "{reply}");
    assert!(
        reply["message"].as_str().unwrap().contains("/t/{id}"),
        "{reply}"
    );
    // No sandbox app to sign with, then no gateway to call: each said plainly.
    let (status, reply) = call(json!({"api_id": "t.get", "path": "/t/1"}));
    assert_eq!(
        (status, reply["code"].as_str()),
        (422, Some("SANDBOX_APP_MISSING")),
        "{reply}"
    );
    reg.post("/sandbox/apps", json!({"app_key": "sb", "apis": ["*"]}));
    let (status, reply) = call(json!({"api_id": "t.get", "path": "/t/1"}));
    assert_eq!(
        (status, reply["code"].as_str()),
        (503, Some("NO_SANDBOX_GATEWAY")),
        "{reply}"
    );
    let (status, reply) =
        call(json!({"api_id": "t.get", "path": "/t/1", "headers": {"X-Portico-Signature": "x"}}));
    assert_eq!(status, 400, "{reply}");

    // Health with no gateway: empty, warming up, and parameters checked.
    let health = reg.get("/health/apis");
    assert_eq!(health["nodes"], json!([]), "{health:#}");
    assert_eq!(health["totals"]["requests"], 0.0);
    let (status, _) = reg.call(reqwest::Method::GET, "/health/apis?window=soon", None);
    assert_eq!(status, 400);
    let (status, _) = reg.call(reqwest::Method::GET, "/health/apis?plane=moon", None);
    assert_eq!(status, 400);

    // Both routes are in the OpenAPI document; the console's pages need no token.
    let doc = reg.get("/openapi.json");
    assert!(doc["paths"]["/sandbox/call"]["post"].is_object());
    assert!(doc["paths"]["/health/apis"]["get"].is_object());
    let resp = http().get(format!("{}/switches", reg.base)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}
