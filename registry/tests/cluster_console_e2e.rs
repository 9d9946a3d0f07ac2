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

use common::{sibling_bin, Proc};
use portico_demo::process::BackendProcess;
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "cluster-e2e-admin-token";
const CLUSTER: &str = "orders-dc";
const NODE_ID: &str = "gw-cluster-e2e";

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

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn call(base: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http()
        .request(method, format!("{base}/api/v1{path}"))
        .bearer_auth(TOKEN)
        .header("X-Portico-Operator", "cluster-e2e-seed");
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

#[test]
fn console_cluster_view_fails_over_in_chromium() {
    let work = tempfile::Builder::new()
        .prefix("portico-cluster-e2e-")
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
    let gateway_bin = sibling_bin("portico-gateway");

    let zk = ZooKeeper::start_locked();
    let primary = BackendProcess::start_http().unwrap();
    let standby = BackendProcess::start_http().unwrap();
    let reg_port = free_port();
    let mut registry = Proc::spawn(
        "registry",
        Command::new(env!("CARGO_BIN_EXE_portico-registry"))
            .args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
            .args(["--listen", &format!("127.0.0.1:{reg_port}")])
            .arg("--zk-auth-file")
            .arg(zk.credentials().unwrap().registry_file())
            .env("PORTICO_ADMIN_TOKEN", TOKEN)
            .env("PORTICO_CONSOLE_DIR", &console_dir),
        &logs,
    );
    let base = format!("http://127.0.0.1:{reg_port}");
    let up = wait_for(Duration::from_secs(30), || {
        http()
            .get(format!("{base}/api/v1/health"))
            .send()
            .is_ok_and(|r| r.status().is_success())
    });
    registry.assert_alive();
    assert!(up, "the registry did not come up:\n{}", registry.tail());

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

    let (listen, admin) = (free_port(), free_port());
    let mut gateway = Proc::spawn(
        "gateway",
        Command::new(&gateway_bin)
            .args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
            .arg("--zk-auth-file")
            .arg(zk.credentials().unwrap().gateway_file())
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .arg("--snapshot-dir")
            .arg(work.path().join("snapshot"))
            .args(["--node-id", NODE_ID]),
        &logs,
    );
    let in_sync = || {
        let (_, nodes) = call(&base, reqwest::Method::GET, "/nodes", None);
        nodes["nodes"].as_array().is_some_and(|n| {
            n.iter()
                .any(|n| n["node_id"] == NODE_ID && n["in_sync"] == true)
        })
    };
    let registered = wait_for(Duration::from_secs(60), in_sync);
    gateway.assert_alive();
    assert!(
        registered,
        "the gateway did not register:\n{}",
        gateway.tail()
    );

    let started = Instant::now();
    let mut node = Command::new("node")
        .arg(workspace().join("admin-ui/e2e/cluster.e2e.mjs"))
        .current_dir(workspace().join("admin-ui"))
        .env("CONSOLE_URL", &base)
        .env("ADMIN_TOKEN", TOKEN)
        .env("CLUSTER", CLUSTER)
        .env("NODE_ID", NODE_ID)
        .env("PRIMARY", primary.http.to_string())
        .env("STANDBY", standby.http.to_string())
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
    gateway.assert_alive();
    assert!(
        status.success(),
        "the browser run failed ({status}); screenshots in {}\n--- registry log ---\n{}\n--- gateway log ---\n{}",
        shots.display(),
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
        wait_for(Duration::from_secs(5), in_sync),
        "the gateway is behind the tree"
    );
    let served = http()
        .get(format!("http://127.0.0.1:{admin}/status"))
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
