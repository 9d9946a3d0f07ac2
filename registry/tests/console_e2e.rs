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

use portico_demo::process::BackendProcess;
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "console-e2e-admin-token";
const LIVE_APP: &str = "merchant-e2e";
const LIVE_SECRET: &str = "merchant-e2e-secret-0123456789";
const CLUSTER: &str = "demo-grpc";
const API: &str = "order.getorder";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A child process killed (with its output kept in a log file) when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &'static str, cmd: &mut Command, logdir: &Path) -> Proc {
        let log = logdir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Proc { name, child, log }
    }

    fn tail(&self) -> String {
        tail_of(&self.log, 40)
    }

    fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, self.tail());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `n` lines of a file.
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `target/<profile>/<name>`, next to this test's own `deps/` directory.
fn sibling_bin(name: &str, env_override: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_override) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let profile = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().unwrap()
    } else {
        deps
    };
    let bin = profile.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build --workspace --all-targets` first (./ops/test.sh does), \
         or set {env_override}",
        bin.display()
    );
    bin
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

struct Registry {
    base: String,
    http: reqwest::blocking::Client,
}

impl Registry {
    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}/api/v1{path}", self.base))
            .bearer_auth(TOKEN)
            .header("X-Portico-Operator", "console-e2e-seed");
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
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

/// Checks node, the npm dependencies and Chromium, and builds the console into `out`.
fn build_console(out: &Path) -> PathBuf {
    let ui = workspace().join("admin-ui");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node_ok,
        "node is not installed: the console end-to-end test needs Node.js and npm \
         (./ops/test.sh installs them)"
    );
    for dep in ["playwright-core", "vite", "preact", "typescript"] {
        assert!(
            ui.join("node_modules").join(dep).is_dir(),
            "admin-ui/node_modules/{dep} is missing: run ./ops/test.sh (it runs `npm ci` in \
             admin-ui/), or `cd admin-ui && npm ci`"
        );
    }
    let chromium =
        std::env::var("PORTICO_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        Path::new(&chromium).is_file(),
        "{chromium} is missing: the console end-to-end test drives Debian's Chromium \
         (./ops/test.sh installs it: apt-get install chromium), or set PORTICO_CHROMIUM"
    );
    let status = Command::new("npm")
        .args(["run", "build", "--", "--outDir"])
        .arg(out)
        .arg("--emptyOutDir")
        .current_dir(&ui)
        .status()
        .expect("running npm");
    assert!(
        status.success(),
        "`npm run build` of admin-ui failed ({status})"
    );
    assert!(out.join("index.html").is_file());
    PathBuf::from(chromium)
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
    let shots = std::env::var_os("PORTICO_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/console-screenshots"));
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    println!("console screenshots: {}", shots.display());
    eprintln!("console screenshots: {}", shots.display());

    // Prerequisites first: fail fast, and clearly, when the browser toolchain is missing.
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);
    let gateway_bin = sibling_bin("portico-gateway", "PORTICO_GATEWAY_BIN");

    // ZooKeeper, the demo backend, the registry.
    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http_grpc().unwrap();
    let grpc = backend.grpc.expect("the demo backend's gRPC address");
    let reg_port = free_port();
    let mut registry = Proc::spawn(
        "registry",
        Command::new(env!("CARGO_BIN_EXE_portico-registry"))
            .args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
            .args(["--listen", &format!("127.0.0.1:{reg_port}")])
            .arg("--zk-auth-file")
            .arg(zk.credentials().unwrap().registry_file())
            .env("PORTICO_ADMIN_TOKEN", TOKEN)
            .env("PORTICO_CONSOLE_DIR", &console_dir)
            .env("RUST_LOG", "info"),
        &logs,
    );
    let reg = Registry {
        base: format!("http://127.0.0.1:{reg_port}"),
        http: http(),
    };
    let up = wait_for(Duration::from_secs(30), || {
        reg.http
            .get(format!("{}/api/v1/health", reg.base))
            .send()
            .is_ok_and(|r| r.status().is_success())
    });
    registry.assert_alive();
    assert!(up, "the registry did not come up:\n{}", registry.tail());

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
    let (listen, sandbox, admin) = (free_port(), free_port(), free_port());
    let mut gateway = Proc::spawn(
        "gateway",
        Command::new(&gateway_bin)
            .args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
            .arg("--zk-auth-file")
            .arg(zk.credentials().unwrap().gateway_file())
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .args(["--sandbox-listen", &format!("127.0.0.1:{sandbox}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .arg("--snapshot-dir")
            .arg(work.path().join("snapshot"))
            .arg("--access-log")
            .arg(logs.join("access.log"))
            .args(["--node-id", "gw-console-e2e"]),
        &logs,
    );
    let registered = wait_for(Duration::from_secs(60), || {
        reg.get("/nodes")["nodes"].as_array().is_some_and(|n| {
            n.iter().any(|n| {
                n["sandbox_addr"] == format!("127.0.0.1:{sandbox}") && n["in_sync"] == true
            })
        })
    });
    gateway.assert_alive();
    assert!(
        registered,
        "the gateway did not register in ZooKeeper:\n{}",
        gateway.tail()
    );
    let gateway_url = format!("http://127.0.0.1:{listen}");

    // The browser run.
    let script = workspace().join("admin-ui/e2e/console.e2e.mjs");
    let proto = workspace().join("protos/demo/order.proto");
    let started = Instant::now();
    let mut node = Command::new("node")
        .arg(&script)
        .current_dir(workspace().join("admin-ui"))
        .env("CONSOLE_URL", &reg.base)
        .env("ADMIN_TOKEN", TOKEN)
        .env("GATEWAY_URL", &gateway_url)
        .env("LIVE_APP_KEY", LIVE_APP)
        .env("LIVE_APP_SECRET", LIVE_SECRET)
        .env("PROTO_FILE", &proto)
        .env("CLUSTER", CLUSTER)
        .env("SCREENSHOT_DIR", &shots)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running node");
    let stdout = node.stdout.take().unwrap();
    let echo = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
        }
    });
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(240) {
            let _ = node.kill();
            let _ = node.wait();
            panic!(
                "the browser run took more than 240 s; screenshots in {}",
                shots.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = echo.join();
    registry.assert_alive();
    gateway.assert_alive();
    assert!(
        status.success(),
        "the browser run failed ({status}); screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}\n--- gateway access log ---\n{}",
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
    let zk = ZooKeeper::start_locked();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = portico_registry::Config {
        zk_hosts: zk.connect_string(),
        zk_root: "/portico".to_owned(),
        token: Some(TOKEN.to_owned()),
        zk_auth: zk
            .credentials()
            .map(|c| portico_control::zk::ZkAuth::parse(&c.registry).unwrap()),
    };
    let (addr, _task) = rt
        .block_on(portico_registry::spawn(
            &config,
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        ))
        .unwrap();
    let reg = Registry {
        base: format!("http://{addr}"),
        http: http(),
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
    let resp = reg
        .http
        .get(format!("{}/switches", reg.base))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}
