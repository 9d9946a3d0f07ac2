//! Test support: real processes on free loopback ports (the gateway, the demo backend), a
//! temporary configuration tree, and a signing client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use portico_control::sign;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use portico_testkit::procs::BackendProcess;

/// The merchant used by most tests (the app of the signing examples in docs/PROTOCOL.md).
pub const KEY: &str = "merchant-1";
pub const SECRET: &str = "s3cr3t-value";

/// Free loopback ports and condition polling come from the shared test kit.
#[allow(unused_imports)]
pub use portico_testkit::{free_port, sibling_bin, wait_for as wait_until};

/// The admin token the registries of the gateway's tests run with.
pub const REGISTRY_TOKEN: &str = "test-admin-token-0123456789";

/// A `portico-registry` on a free port against `zk` (with the registry's credentials when
/// `zk` is locked), admin token [`REGISTRY_TOKEN`], started by the shared test kit
/// ([`portico_testkit::procs::spawn_registry`]; its log in a temporary directory, its tail
/// shown if it does not come up); killed on drop. Its admin calls are made as `operator`
/// (the `X-Portico-Operator` header, recorded as `updated_by` and in the audit).
pub struct Registry {
    proc: portico_testkit::procs::RegistryProc,
    /// `http://127.0.0.1:<port>/api/v1`.
    pub url: String,
    operator: &'static str,
    _logs: tempfile::TempDir,
}

impl Registry {
    /// Starts it and waits (30 s) until `/api/v1/health` answers 200.
    pub fn start(zk: &portico_testkit::ZooKeeper, operator: &'static str) -> Registry {
        let logs = tempfile::tempdir().expect("tempdir");
        let proc = portico_testkit::procs::spawn_registry(
            zk,
            "registry",
            logs.path(),
            REGISTRY_TOKEN,
            |cmd| {
                cmd.env("PORTICO_LOG", "warn");
            },
        );
        Registry {
            url: format!("{}/api/v1", proc.base),
            proc,
            operator,
            _logs: logs,
        }
    }

    /// `method path` on the admin API with `body`: (status, JSON reply or null).
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let mut req = client()
            .request(m, format!("{}{path}", self.url))
            .bearer_auth(REGISTRY_TOKEN)
            .header("X-Portico-Operator", self.operator);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().expect("a call to the registry");
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }
}

/// A temporary configuration directory (docs/operations/config-tree.md, "The configuration tree").
pub struct ConfigTree {
    pub dir: tempfile::TempDir,
}

impl ConfigTree {
    pub fn new() -> Self {
        ConfigTree {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a document (`apis/order.get` → `apis/order.get.json`) atomically (temp + rename),
    /// as an editor or a deploy tool would.
    pub fn put(&self, doc: &str, value: &Value) {
        self.put_raw(
            doc,
            serde_json::to_vec_pretty(value).expect("json").as_slice(),
        );
    }

    /// Writes raw bytes as a document's file.
    pub fn put_raw(&self, doc: &str, bytes: &[u8]) {
        let file = self.dir.path().join(format!("{doc}.json"));
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        let tmp = file.with_extension("json.tmp~");
        std::fs::write(&tmp, bytes).expect("write");
        std::fs::rename(&tmp, &file).expect("rename");
    }

    pub fn remove(&self, doc: &str) {
        let _ = std::fs::remove_file(self.dir.path().join(format!("{doc}.json")));
    }
}

/// A running `portico-gateway`, started by the shared test kit
/// ([`portico_testkit::procs::start_gateway`]); killed when dropped. Its log is kept in a
/// temporary directory beside the access log, and its tail shown if it does not get ready.
pub struct GatewayProcess {
    proc: portico_testkit::procs::GatewayProc,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub access_log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl GatewayProcess {
    /// Starts the gateway in standalone mode on `tree` and waits for `/readyz`.
    pub fn start(tree: &Path, extra: &[&str]) -> Self {
        let mut args: Vec<String> = vec!["--config-dir".into(), tree.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_args(args)
    }

    /// Starts the gateway with these arguments (plus listeners and the access log) and waits
    /// until `/readyz` answers 200.
    pub fn start_args(args: Vec<String>) -> Self {
        let gw = Self::spawn_args(args);
        gw.wait_ready();
        gw
    }

    /// Starts the gateway without waiting for `/readyz` (a gateway expected not to be ready).
    pub fn spawn_args(args: Vec<String>) -> Self {
        let logdir = tempfile::tempdir().expect("tempdir");
        let access_log = logdir.path().join("access.log");
        let proc = portico_testkit::procs::start_gateway("gateway", logdir.path(), |cmd| {
            cmd.args(&args)
                .arg("--access-log")
                .arg(&access_log)
                .args(["--threads", "2"])
                .env(
                    "PORTICO_LOG",
                    "warn,portico_gateway=info,portico_control=info",
                );
        });
        let addr =
            |url: &str| -> SocketAddr { url.trim_start_matches("http://").parse().expect("addr") };
        GatewayProcess {
            listen: addr(&proc.url),
            admin: addr(&proc.admin),
            proc,
            access_log,
            _logdir: logdir,
        }
    }

    /// Waits for `/readyz` and the traffic listener.
    pub fn wait_ready(&self) {
        let gw = self;
        let client = client();
        let ready = wait_until(Duration::from_secs(30), || {
            client
                .get(format!("http://{}/readyz", gw.admin))
                .send()
                .map(|r| r.status() == 200)
                .unwrap_or(false)
        });
        assert!(
            ready,
            "gateway never became ready:\n{}",
            gw.proc.proc.tail()
        );
        // The traffic listener comes up with Pingora's services; wait for it too.
        assert!(
            wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(
                gw.listen
            )
            .is_ok()),
            "gateway listener never opened:\n{}",
            gw.proc.proc.tail()
        );
    }

    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{}", self.listen, path_and_query)
    }

    pub fn status(&self) -> Value {
        client()
            .get(format!("http://{}/status", self.admin))
            .send()
            .expect("status")
            .json()
            .expect("status json")
    }

    pub fn metrics(&self) -> String {
        client()
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .expect("metrics")
            .text()
            .expect("metrics text")
    }

    /// Waits until the applied configuration's digest differs from `old`.
    pub fn wait_for_new_config(&self, old: &str) -> bool {
        wait_until(Duration::from_secs(10), || {
            self.status()["config_version"]["digest"].as_str() != Some(old)
        })
    }

    pub fn digest(&self) -> String {
        self.status()["config_version"]["digest"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn pid(&self) -> u32 {
        self.proc.proc.pid()
    }
}

/// A configuration with one API, `GET /v1/ping` (`ping.get`, no auth), switched off with a
/// `200 {"pong": true}` fallback: answered by the gateway alone, its backend never reached.
pub fn degraded_ping_tree() -> ConfigTree {
    let tree = ConfigTree::new();
    tree.put(
        "clusters/nowhere",
        &serde_json::json!({"protocol": "http", "endpoints": [{"addr": format!("127.0.0.1:{}", free_port())}]}),
    );
    tree.put(
        "apis/ping.get",
        &serde_json::json!({"id": "ping.get", "http": {"method": "GET", "path": "/v1/ping"},
                "backend": {"cluster": "nowhere", "http": {}}, "auth": "none"}),
    );
    tree.put(
        "switches/ping.get",
        &serde_json::json!({"degraded": true, "fallback": {"status": 200, "body": {"pong": true}}}),
    );
    tree
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .no_proxy()
        .build()
        .expect("client")
}

/// A signed request (docs/PROTOCOL.md, "Signing a request") for `url` (path and query are signed as
/// sent).
pub fn signed(
    client: &reqwest::blocking::Client,
    method: &str,
    url: &str,
    key: &str,
    secret: &str,
    body: Option<&[u8]>,
) -> reqwest::blocking::RequestBuilder {
    signed_at(client, method, url, key, secret, body, now_ms(), &nonce())
}

#[allow(clippy::too_many_arguments)]
pub fn signed_at(
    client: &reqwest::blocking::Client,
    method: &str,
    url: &str,
    key: &str,
    secret: &str,
    body: Option<&[u8]>,
    ts_ms: u64,
    nonce: &str,
) -> reqwest::blocking::RequestBuilder {
    let parsed = reqwest::Url::parse(url).expect("url");
    let path = parsed.path().to_owned();
    let query = parsed.query().map(str::to_owned);
    let body = body.unwrap_or_default();
    let ts = ts_ms.to_string();
    let sts = sign::string_to_sign(method, &path, query.as_deref(), key, &ts, nonce, body);
    let sig = sign::sign(secret.as_bytes(), &sts);
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    client
        .request(m, url)
        .header(sign::HEADER_APP_KEY, key)
        .header(sign::HEADER_TIMESTAMP, ts)
        .header(sign::HEADER_NONCE, nonce)
        .header(sign::HEADER_SIGNATURE, sig)
        .body(body.to_vec())
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

pub fn nonce() -> String {
    format!("n{:024x}", fastrand_u128())
}

fn fastrand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let s = std::collections::hash_map::RandomState::new();
    let mut h = s.build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    let a = h.finish() as u128;
    let mut h2 = s.build_hasher();
    h2.write_u64(a as u64 ^ 0x9e37_79b9_7f4a_7c15);
    (a << 64) | h2.finish() as u128
}

/// The envelope code of a response body.
pub fn code_of(resp: reqwest::blocking::Response) -> (u16, String, Value) {
    let status = resp.status().as_u16();
    let v: Value = resp.json().unwrap_or(Value::Null);
    (status, v["code"].as_str().unwrap_or_default().to_owned(), v)
}

/// Requests the demo backend has seen.
pub fn backend_requests(backend: &BackendProcess) -> u64 {
    let v: Value = client()
        .get(format!("{}/__stats", backend.http_url()))
        .send()
        .expect("stats")
        .json()
        .expect("stats json");
    v["requests"].as_u64().unwrap_or(0)
}

/// Writes `bytes` as the file of tree document `tree_path` under `root` (`apis/x` →
/// `apis/x.json`, `descriptors/<sha>` → `descriptors/<sha>.pb`), creating folders.
pub fn write_document(root: &Path, tree_path: &str, bytes: &[u8]) {
    let rel = portico_control::source::file_path_for(tree_path)
        .unwrap_or_else(|| panic!("{tree_path} is not a document path"));
    let file = root.join(rel);
    std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
    std::fs::write(&file, bytes).expect("write");
}

/// `portico_testkit::zkcli` with a UTF-8 locale, so that non-ASCII arguments reach ZooKeeper
/// as UTF-8 whatever the locale of the test run (the JVM decodes arguments by the locale).
pub fn zkcli_utf8(connect: &str, args: &[&str]) -> portico_testkit::ZkCliOutput {
    let output = Command::new(portico_testkit::zk_home().join("bin/zkCli.sh"))
        .arg("-server")
        .arg(connect)
        .args(args)
        .env("LC_ALL", "C.UTF-8")
        .env("LANG", "C.UTF-8")
        .env("JMXDISABLE", "true")
        .env(
            "CLIENT_JVMFLAGS",
            "-Xmx128m -XX:+UseSerialGC -Dfile.encoding=UTF-8 -Dsun.jnu.encoding=UTF-8",
        )
        .stdin(Stdio::null())
        .output()
        .expect("run zkCli.sh");
    let stdout = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| {
            !(l.starts_with("Connecting to ")
                || l.starts_with("WATCHER::")
                || l.starts_with("WatchedEvent state:"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    portico_testkit::ZkCliOutput {
        success: output.status.success(),
        stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
pub mod routing;
pub mod zk;
