//! A whole Portico for the portal's tests, on free 127.0.0.1 ports: a real ZooKeeper, the
//! demo backend (HTTP + gRPC), the registry binary (serving a given console build, portal
//! included) and a gateway in ZooKeeper mode with a sandbox listener. The example tree of
//! `ops/examples/standalone` (the demo APIs and apps) is imported through the registry into
//! the live and the sandbox trees, pointed at the demo backend.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use crate::common::procs::{
    http_with_timeout, spawn_gateway, spawn_registry, wait_registered, GatewayProc, RegistryProc,
};
use crate::common::{example_tree, Proc};
use portico_testkit::procs::BackendProcess;
use portico_testkit::ZooKeeper;
use std::path::Path;
use std::time::Duration;

/// The blocking client of the portal's tests (30 s per request).
pub fn http() -> reqwest::blocking::Client {
    http_with_timeout(Duration::from_secs(30))
}

pub use crate::common::TOKEN;
/// The example tree's apps (ops/examples/standalone/apps).
pub const M1: (&str, &str) = ("merchant-1", "s3cr3t-value");
pub const M2: (&str, &str) = ("merchant-2", "m2-secret-value");
/// merchant-1 in the sandbox tree: its own secret, as `./ops/up.sh` seeds it (the sandbox
/// refuses an app signing with its live secret, docs/PROTOCOL.md "The sandbox").
pub const M1_SANDBOX: (&str, &str) = ("merchant-1", "s3cr3t-value-sandbox");

/// An app document's text with its secret made the sandbox one (`<live secret>-sandbox`).
fn sandbox_secret(text: String) -> String {
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(mut v) if v["secret"].is_string() => {
            let s = format!("{}-sandbox", v["secret"].as_str().unwrap_or_default());
            v["secret"] = serde_json::Value::String(s);
            v.to_string()
        }
        _ => text,
    }
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
        let zk = ZooKeeper::on_shared();
        let backend = BackendProcess::start_http_grpc().unwrap();
        let grpc = backend.grpc.expect("the demo backend's gRPC address");

        let no_console = work.path().join("no-console");
        let RegistryProc {
            proc: registry,
            base: registry_url,
        } = spawn_registry(&zk, "registry", &logs, |cmd| {
            cmd.env("PORTICO_CONSOLE_DIR", console_dir.unwrap_or(&no_console))
                .env("RUST_LOG", "info");
        });
        let http = http();

        // The example tree, its clusters pointed at the demo backend.
        let (http_addr, grpc_addr) = (backend.http.to_string(), grpc.to_string());
        let pointed = |text: String| {
            text.replace("127.0.0.1:18081", &http_addr)
                .replace("127.0.0.1:50051", &grpc_addr)
        };
        let live = example_tree(pointed);
        let sandbox = example_tree(|text| sandbox_secret(pointed(text)));
        for (env, import) in [("live", &live), ("sandbox", &sandbox)] {
            let resp = http
                .post(format!("{registry_url}/api/v1/import?env={env}"))
                .bearer_auth(TOKEN)
                .json(import)
                .send()
                .unwrap();
            let status = resp.status();
            let text = resp.text().unwrap();
            assert!(status.is_success(), "import {env}: {status} {text}");
        }

        let sandbox = portico_testkit::free_port();
        let GatewayProc {
            proc: mut gateway,
            url: gateway_url,
            ..
        } = spawn_gateway(&zk, "gw-portal", &logs, |cmd| {
            cmd.args(["--sandbox-listen", &format!("127.0.0.1:{sandbox}")])
                .args(["--access-log", "off"]);
        });
        let registered = wait_registered(&registry_url, Duration::from_secs(60), |n| {
            n["sandbox_addr"] == format!("127.0.0.1:{sandbox}") && n["in_sync"] == true
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
            gateway_url,
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

/// An operators' reason a test sets on a switch: never shown to merchants.
pub const INTERNAL_REASON: &str = "internal: db failover ticket OPS-12";

/// What a merchant must never read in `text` (`what` names it in the failure): an operator's
/// reason, a switch path, a repository path or file, a gRPC service name (a fully qualified
/// `pkg.Service/Method`, a `pkg.v1.Service`, or one the example tree's APIs call).
pub fn assert_merchant_words(text: &str, what: &str) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found: Vec<String> = Vec::new();
    for needle in [INTERNAL_REASON, "OPS-12", "switches/"] {
        if text.contains(needle) {
            found.push(needle.to_owned());
        }
    }
    // Repository paths: `docs/`, `ops/` as a path's start (not `shops/`), a `.md` file.
    for needle in ["docs/", "ops/"] {
        for (i, _) in text.match_indices(needle) {
            if !text[..i].ends_with(word) {
                found.push(needle.to_owned());
            }
        }
    }
    for (i, _) in text.match_indices(".md") {
        let after = text[i + 3..].chars().next();
        if text[..i].ends_with(word) && !after.is_some_and(word) {
            found.push(format!(
                "a .md file near {:?}",
                &text[i.saturating_sub(20)..i + 3]
            ));
        }
    }
    // gRPC names: every service the example tree's APIs call, and any token shaped like one.
    for service in demo_grpc_services() {
        if text.contains(&service) {
            found.push(service);
        }
    }
    for token in text.split(|c: char| !(word(c) || c == '.' || c == '/')) {
        let (name, method) = token.split_once('/').unwrap_or((token, ""));
        let parts: Vec<&str> = name.split('.').collect();
        let last = parts.last().copied().unwrap_or_default();
        let qualified = parts.len() >= 2
            && parts[..parts.len() - 1]
                .iter()
                .all(|p| p.starts_with(|c: char| c.is_ascii_lowercase()))
            && last.starts_with(|c: char| c.is_ascii_uppercase());
        let versioned = parts.iter().any(|p| {
            p.len() >= 2 && p.starts_with('v') && p[1..].chars().all(|c| c.is_ascii_digit())
        });
        if qualified
            && (method.starts_with(|c: char| c.is_ascii_uppercase())
                || (versioned && last.ends_with("Service")))
        {
            found.push(token.to_owned());
        }
    }
    assert!(
        found.is_empty(),
        "{what} shows merchants {found:?}:\n{}",
        &text[..text.len().min(2000)]
    );
}

/// The gRPC services the example tree's APIs call (`backend.grpc.service`).
fn demo_grpc_services() -> Vec<String> {
    let dir = crate::common::browser::workspace().join("ops/examples/standalone/apis");
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let def: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
            def["backend"]["grpc"]["service"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
