//! Shared helpers of the registry's integration tests: a real ZooKeeper, registries on free
//! ports, an authenticated HTTP client.
#![allow(dead_code)]

pub mod browser;
pub mod procs;

use portico_control::zk::ZkAuth;
use portico_registry::Config;
use portico_testkit::ZooKeeper;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

pub const TOKEN: &str = "test-admin-token";

/// The registry's credentials of a locked ZooKeeper (`None` for an open one).
pub fn registry_auth(zk: &ZooKeeper) -> Option<ZkAuth> {
    zk.credentials()
        .map(|c| ZkAuth::parse(&c.registry).unwrap())
}

/// The gateways' credentials of a locked ZooKeeper (`None` for an open one).
pub fn gateway_auth(zk: &ZooKeeper) -> Option<ZkAuth> {
    zk.credentials().map(|c| ZkAuth::parse(&c.gateway).unwrap())
}

/// A registry on a free port, talking to `zk` under its root (with the registry's credentials
/// if `zk` is locked: most registry tests run against `ZooKeeper::on_shared_locked`).
pub async fn registry(zk: &ZooKeeper) -> Registry {
    registry_as(zk, registry_auth(zk)).await
}

/// A registry on a free port, talking to `zk` with the credentials `zk_auth`.
pub async fn registry_as(zk: &ZooKeeper, zk_auth: Option<ZkAuth>) -> Registry {
    let config = Config {
        zk_hosts: zk.connect_string(),
        zk_root: zk.root().to_owned(),
        token: Some(TOKEN.to_owned()),
        zk_auth,
    };
    let (addr, _task) = portico_registry::spawn(&config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    Registry {
        base: format!("http://{addr}/api/v1"),
        http: reqwest::Client::new(),
    }
}

pub struct Registry {
    pub base: String,
    pub http: reqwest::Client,
}

/// A response: status, headers and the JSON body (Null if not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub etag: Option<String>,
    pub request_id: Option<String>,
    pub body: Value,
    pub bytes: Vec<u8>,
}

impl Reply {
    /// The error code of an envelope.
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }

    /// The ETag as a plain version string (`"3"` → `3`).
    pub fn version(&self) -> String {
        self.etag
            .clone()
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned()
    }

    #[track_caller]
    pub fn expect(self, status: u16) -> Reply {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected reply: {:#?}",
            self.body
        );
        self
    }
}

impl Registry {
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let etag = header("etag");
        let request_id = header("x-portico-request-id");
        let bytes = resp.bytes().await.unwrap().to_vec();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            etag,
            request_id,
            body,
            bytes,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.request(Method::GET, path)).await
    }

    pub async fn json(&self, method: Method, path: &str, body: &Value) -> Reply {
        self.send(self.request(method, path).json(body)).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.json(Method::POST, path, body).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.json(Method::PUT, path, body).await
    }

    pub async fn put_if(&self, path: &str, etag: &str, body: &Value) -> Reply {
        self.send(
            self.request(Method::PUT, path)
                .header("If-Match", format!("\"{etag}\""))
                .json(body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(self.request(Method::DELETE, path)).await
    }

    /// The actions of the audit log's newest `limit` entries, newest first.
    pub async fn audit_actions(&self, limit: u32) -> Vec<String> {
        let audit = self.get(&format!("/audit?limit={limit}")).await.expect(200);
        audit.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The `portico` CLI's command against registry `base` (with or without its `/api/v1`), with
/// [`TOKEN`], acting as `operator`; the caller adds how it runs.
pub fn portico_cli(base: &str, operator: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portico"));
    cmd.arg("--registry")
        .arg(base.trim_end_matches("/api/v1"))
        .args(args)
        .env("PORTICO_ADMIN_TOKEN", TOKEN)
        .env("PORTICO_OPERATOR", operator);
    cmd
}

/// What a CLI run answered: (success, stdout, stderr).
pub fn cli_outcome(out: std::process::Output) -> (bool, String, String) {
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A GET of `base` + `path` signed as `app` (key, secret) with a fresh nonce: the status, or
/// 0 when the gateway cannot be reached.
pub async fn signed_get(http: &reqwest::Client, base: &str, path: &str, app: (&str, &str)) -> u16 {
    let (key, secret) = app;
    let nonce = format!("test-{:016x}", fastrand::u64(..));
    let signed = portico_control::sign::sign_request(
        secret.as_bytes(),
        "GET",
        path,
        None,
        key,
        portico_control::clock::now_ms(),
        &nonce,
        b"",
    );
    let mut req = http.get(format!("{base}{path}"));
    for (k, v) in signed.pairs() {
        req = req.header(k, v);
    }
    req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// `ops/examples/standalone` as an import body (`{"files": {path: {encoding, content}}}`):
/// its JSON documents as text passed through `rewrite`, its descriptor sets in base64.
pub fn example_tree(rewrite: impl Fn(String) -> String) -> Value {
    use base64::Engine as _;
    let root = browser::workspace().join("ops/examples/standalone");
    let mut files = serde_json::Map::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let bytes = std::fs::read(&path).unwrap();
            let content = if rel.ends_with(".pb") {
                serde_json::json!({"encoding": "base64",
                       "content": base64::engine::general_purpose::STANDARD.encode(&bytes)})
            } else if rel.ends_with(".json") {
                serde_json::json!({"encoding": "utf-8",
                       "content": rewrite(String::from_utf8(bytes).unwrap())})
            } else {
                continue;
            };
            files.insert(rel, content);
        }
    }
    serde_json::json!({ "files": files })
}

/// The demo order service's .proto source (from the demo crate).
pub const ORDER_PROTO: &str = include_str!("../../../../protos/demo/order.proto");

/// Child processes with their logs kept, and `target/<profile>/` binaries, from the shared
/// test kit.
#[allow(unused_imports)]
pub use portico_testkit::{
    procs::{tail_of, Proc},
    sibling_bin,
};

/// A history rollup of `api` at Unix minute `minute`: calls by (status, code), and a latency
/// histogram (non-cumulative counts by upper bound in seconds).
pub fn rollup(
    api: &str,
    minute: i64,
    answers: &[(u16, &str, u64)],
    latency: &[(f64, u64)],
) -> portico_registry::history::Rollup {
    portico_registry::history::Rollup {
        api: api.to_owned(),
        minute,
        answers: answers
            .iter()
            .map(|(s, c, n)| ((*s, (*c).to_owned()), *n))
            .collect::<std::collections::BTreeMap<_, _>>(),
        latency: latency.to_vec(),
        ..portico_registry::history::Rollup::default()
    }
}

/// Writes the synthetic history: minutes well inside the current and the previous day, so a
/// minute boundary passing during the test changes nothing.
pub fn seed_history(path: &Path) {
    use portico_registry::history::{HistoryStore, Limits};
    let store = HistoryStore::open(path, Limits::default()).unwrap();
    let now_min = (portico_control::clock::now_ms() / 60_000) as i64;
    let mut rows = Vec::new();
    // pay.create, this day: 1000 minutes of 100 calls (97 OK, 2 502, 1 429), latency
    // 50 in (0, 5] ms, 40 in (5, 10], 9 in (10, 50], 1 in (50, 500].
    for i in 0..1000 {
        let mut r = rollup(
            "pay.create",
            now_min - 60 - i,
            &[
                (200, "OK", 97),
                (502, "UPSTREAM_ERROR", 2),
                (429, "RATE_LIMITED", 1),
            ],
            &[(0.005, 50), (0.01, 40), (0.05, 9), (0.5, 1)],
        );
        if i < 3 {
            r.breaker_openings = 1;
        }
        if i == 10 {
            r.switch_flips = 2;
        }
        rows.push(r);
    }
    // pay.create, the previous day: 500 minutes of 100 calls, all OK.
    for i in 0..500 {
        rows.push(rollup(
            "pay.create",
            now_min - 24 * 60 - 60 - i,
            &[(200, "OK", 100)],
            &[(0.005, 100)],
        ));
    }
    // pay.query, this day: 10 minutes of 10 calls in (0, 100] ms.
    for i in 0..10 {
        rows.push(rollup(
            "pay.query",
            now_min - 120 - i,
            &[(200, "OK", 10)],
            &[(0.1, 10)],
        ));
    }
    store.add(&rows).unwrap();
}
