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

mod common;

use common::{seed_history, Proc};
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "alerts-e2e-admin-token";
const RULE: &str = "pay-idle";
const API: &str = "pay.create";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Checks node, the npm dependencies and Chromium, and builds the console into `out`.
fn build_console(out: &Path) -> PathBuf {
    let ui = workspace().join("admin-ui");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(node_ok, "node is not installed (./ops/test.sh installs it)");
    for dep in ["playwright-core", "vite", "preact", "typescript"] {
        assert!(
            ui.join("node_modules").join(dep).is_dir(),
            "admin-ui/node_modules/{dep} is missing: `cd admin-ui && npm ci`"
        );
    }
    let chromium =
        std::env::var("PORTICO_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    assert!(
        Path::new(&chromium).is_file(),
        "{chromium} is missing (apt-get install chromium), or set PORTICO_CHROMIUM"
    );
    let status = Command::new("npm")
        .args(["run", "build", "--", "--outDir"])
        .arg(out)
        .arg("--emptyOutDir")
        .current_dir(&ui)
        .status()
        .expect("running npm");
    assert!(status.success(), "`npm run build` of admin-ui failed");
    PathBuf::from(chromium)
}

fn call(base: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut req = http
        .request(method, format!("{base}/api/v1{path}"))
        .bearer_auth(TOKEN)
        .header("X-Portico-Operator", "alerts-e2e-seed");
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send() {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.json().unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

#[test]
fn console_alerts_and_reports_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-alerts-e2e-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let shots = std::env::var_os("PORTICO_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/console-screenshots"));
    std::fs::create_dir_all(&shots).unwrap();
    let console_dir = work.path().join("console");
    let chromium = build_console(&console_dir);
    let db = work.path().join("history.sqlite");
    seed_history(&db);

    let zk = ZooKeeper::start_locked();
    let reg_port = free_port();
    let mut registry = Proc::spawn(
        "registry",
        Command::new(env!("CARGO_BIN_EXE_portico-registry"))
            .args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
            .args(["--listen", &format!("127.0.0.1:{reg_port}")])
            .arg("--zk-auth-file")
            .arg(zk.credentials().unwrap().registry_file())
            .arg("--history-db")
            .arg(&db)
            .arg("--data-dir")
            .arg(work.path().join("data"))
            .env("PORTICO_ADMIN_TOKEN", TOKEN)
            .env("PORTICO_CONSOLE_DIR", &console_dir),
        &logs,
    );
    let base = format!("http://127.0.0.1:{reg_port}");
    let up = wait_for(Duration::from_secs(30), || {
        call(&base, reqwest::Method::GET, "/health", None).0 == 200
    });
    registry.assert_alive();
    assert!(up, "the registry did not come up:\n{}", registry.tail());

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

    let started = Instant::now();
    let mut node = Command::new("node")
        .arg(workspace().join("admin-ui/e2e/alerts.e2e.mjs"))
        .current_dir(workspace().join("admin-ui"))
        .env("CONSOLE_URL", &base)
        .env("ADMIN_TOKEN", TOKEN)
        .env("RULE", RULE)
        .env("API", API)
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
        if started.elapsed() > Duration::from_secs(180) {
            let _ = node.kill();
            let _ = node.wait();
            panic!("the browser run took more than 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = echo.join();
    registry.assert_alive();
    assert!(
        status.success(),
        "the browser run failed ({status}); screenshots in {}\n--- registry log ---\n{}",
        shots.display(),
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
    let (_, audit) = call(&base, reqwest::Method::GET, "/audit?limit=20", None);
    let by_console = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["action"] == "alert.put" && e["actor"] == "e2e-sre-alerts");
    assert!(by_console, "{audit:#}");
}
