//! A whole Portico for the portal's tests, on free 127.0.0.1 ports: a real ZooKeeper, the
//! demo backend (HTTP + gRPC), the registry binary (serving a given console build, portal
//! included) and a gateway in ZooKeeper mode with a sandbox listener. The example tree of
//! `ops/examples/standalone` (the demo APIs and apps) is imported through the registry into
//! the live and the sandbox trees, pointed at the demo backend.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use portico_demo::process::BackendProcess;
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const TOKEN: &str = "portal-test-admin-token";
/// The example tree's apps (ops/examples/standalone/apps).
pub const M1: (&str, &str) = ("merchant-1", "s3cr3t-value");
pub const M2: (&str, &str) = ("merchant-2", "m2-secret-value");

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A child process killed when dropped; its output goes to a log file.
pub struct Proc {
    pub name: &'static str,
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &'static str, cmd: &mut Command, logdir: &Path) -> Proc {
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

    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn assert_alive(&mut self) {
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

/// `target/<profile>/<name>`, next to this test's `deps/` directory.
pub fn sibling_bin(name: &str, env_override: &str) -> PathBuf {
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

pub fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub struct World {
    pub work: tempfile::TempDir,
    pub zk: ZooKeeper,
    pub backend: BackendProcess,
    pub registry: Proc,
    pub gateway: Proc,
    /// `http://127.0.0.1:<port>` of each.
    pub registry_url: String,
    pub gateway_url: String,
    pub sandbox_url: String,
    pub http: reqwest::blocking::Client,
}

/// The example tree as an import body (`{"files": {...}}`), its clusters pointed at `http`
/// and `grpc`.
fn example_import(http_addr: &str, grpc_addr: &str) -> Value {
    let root = workspace().join("ops/examples/standalone");
    let mut files = Map::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let bytes = std::fs::read(&path).unwrap();
            let entry = if rel.ends_with(".pb") {
                use base64::Engine as _;
                json!({"encoding": "base64", "content": base64::engine::general_purpose::STANDARD.encode(&bytes)})
            } else {
                let text = String::from_utf8(bytes)
                    .unwrap()
                    .replace("127.0.0.1:18081", http_addr)
                    .replace("127.0.0.1:50051", grpc_addr);
                json!({"encoding": "utf-8", "content": text})
            };
            files.insert(rel, entry);
        }
    }
    json!({ "files": files })
}

impl World {
    /// Starts everything; `console_dir` is the console build the registry serves (the
    /// portal's pages are in its `portal/`), if any.
    pub fn start(console_dir: Option<&Path>) -> World {
        let work = tempfile::Builder::new()
            .prefix("portico-portal-")
            .tempdir()
            .unwrap();
        let logs = work.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let gateway_bin = sibling_bin("portico-gateway", "PORTICO_GATEWAY_BIN");
        let zk = ZooKeeper::start();
        let backend = BackendProcess::start_http_grpc().unwrap();
        let grpc = backend.grpc.expect("the demo backend's gRPC address");

        let reg_port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_portico-registry"));
        cmd.args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
            .args(["--listen", &format!("127.0.0.1:{reg_port}")])
            .env("PORTICO_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "info");
        match console_dir {
            Some(dir) => {
                cmd.env("PORTICO_CONSOLE_DIR", dir);
            }
            None => {
                cmd.env("PORTICO_CONSOLE_DIR", work.path().join("no-console"));
            }
        }
        let mut registry = Proc::spawn("registry", &mut cmd, &logs);
        let registry_url = format!("http://127.0.0.1:{reg_port}");
        let http = http();
        let up = wait_for(Duration::from_secs(30), || {
            http.get(format!("{registry_url}/api/v1/health"))
                .send()
                .is_ok_and(|r| r.status().is_success())
        });
        registry.assert_alive();
        assert!(up, "the registry did not come up:\n{}", registry.tail());

        let import = example_import(&backend.http.to_string(), &grpc.to_string());
        for env in ["live", "sandbox"] {
            let resp = http
                .post(format!("{registry_url}/api/v1/import?env={env}"))
                .bearer_auth(TOKEN)
                .json(&import)
                .send()
                .unwrap();
            let status = resp.status();
            let text = resp.text().unwrap();
            assert!(status.is_success(), "import {env}: {status} {text}");
        }

        let (listen, sandbox, admin) = (free_port(), free_port(), free_port());
        let mut gateway = Proc::spawn(
            "gateway",
            Command::new(&gateway_bin)
                .args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
                .args(["--listen", &format!("127.0.0.1:{listen}")])
                .args(["--sandbox-listen", &format!("127.0.0.1:{sandbox}")])
                .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
                .arg("--snapshot-dir")
                .arg(work.path().join("snapshot"))
                .args(["--access-log", "off"])
                .args(["--node-id", "gw-portal"]),
            &logs,
        );
        let registered = wait_for(Duration::from_secs(60), || {
            http.get(format!("{registry_url}/api/v1/nodes"))
                .bearer_auth(TOKEN)
                .send()
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .is_some_and(|v| {
                    v["nodes"].as_array().is_some_and(|n| {
                        n.iter().any(|n| {
                            n["sandbox_addr"] == format!("127.0.0.1:{sandbox}")
                                && n["in_sync"] == true
                        })
                    })
                })
        });
        gateway.assert_alive();
        assert!(
            registered,
            "the gateway did not register in ZooKeeper:\n{}",
            gateway.tail()
        );
        World {
            work,
            zk,
            backend,
            registry,
            gateway,
            registry_url,
            gateway_url: format!("http://127.0.0.1:{listen}"),
            sandbox_url: format!("http://127.0.0.1:{sandbox}"),
            http,
        }
    }

    /// The logs of the registry and the gateway, for a failure message.
    pub fn logs(&self) -> String {
        format!(
            "--- registry ---\n{}\n--- gateway ---\n{}",
            self.registry.tail(),
            self.gateway.tail()
        )
    }
}

/// Sends a request to `base` + `target`, signed by `app` (key, secret) when given, and
/// answers (status, body text).
pub fn call(
    http: &reqwest::blocking::Client,
    base: &str,
    method: &str,
    target: &str,
    body: &str,
    app: Option<(&str, &str)>,
) -> (u16, String) {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let mut req = http.request(
        reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
        format!("{base}{target}"),
    );
    if let Some((key, secret)) = app {
        let nonce = format!("portal-test-{:016x}", fastrand::u64(..));
        let signed = portico_control::sign::sign_request(
            secret.as_bytes(),
            method,
            path,
            query,
            key,
            portico_control::clock::now_ms(),
            &nonce,
            body.as_bytes(),
        );
        for (k, v) in signed.pairs() {
            req = req.header(k, v);
        }
    }
    if !body.is_empty() {
        req = req
            .header("Content-Type", "application/json")
            .body(body.to_owned());
    }
    let resp = req.send().unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().unwrap_or_default())
}
