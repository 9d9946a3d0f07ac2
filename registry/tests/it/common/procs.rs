//! The processes of the registry's end-to-end tests: the `portico-registry` binary and the
//! gateway binary in ZooKeeper mode, started by the shared test kit
//! ([`portico_testkit::procs`]); a blocking HTTP client and an authenticated admin call for
//! tests that drive them from plain threads.

use super::TOKEN;
#[allow(unused_imports)]
pub use portico_testkit::procs::{registry_command, spawn_gateway, GatewayProc, RegistryProc};
use portico_testkit::{wait_for, ZooKeeper};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A blocking client that never goes through a proxy, with a 20 s request timeout.
pub fn http() -> reqwest::blocking::Client {
    http_with_timeout(Duration::from_secs(20))
}

/// A blocking client that never goes through a proxy, with the request timeout `timeout`.
pub fn http_with_timeout(timeout: Duration) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .unwrap()
}

/// An admin API call on registry `base` (`http://host:port`) with [`TOKEN`]: the status and
/// the JSON body (Null if not JSON); `(0, Null)` when the registry cannot be reached.
pub fn admin_call(
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http()
        .request(method, format!("{base}/api/v1{path}"))
        .bearer_auth(TOKEN)
        .header("X-Portico-Operator", "registry-test-seed");
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

/// Starts the registry binary as `name` (its log in `logs`) with the admin token [`TOKEN`],
/// `configure` adding its own flags and environment, and waits (30 s) until
/// `/api/v1/health` answers 200 ([`portico_testkit::procs::spawn_registry`]).
pub fn spawn_registry(
    zk: &ZooKeeper,
    name: &'static str,
    logs: &Path,
    configure: impl FnOnce(&mut Command),
) -> RegistryProc {
    portico_testkit::procs::spawn_registry(zk, name, logs, TOKEN, configure)
}

/// Whether registry `base` lists a node for which `node` holds, within `timeout`.
pub fn wait_registered(base: &str, timeout: Duration, node: impl Fn(&Value) -> bool) -> bool {
    wait_for(timeout, || {
        let (_, nodes) = admin_call(base, reqwest::Method::GET, "/nodes", None);
        nodes["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(&node))
    })
}

/// The node `node_id`, registered and serving the tree's current generation.
pub fn in_sync(node_id: &str) -> impl Fn(&Value) -> bool + '_ {
    move |n| n["node_id"] == node_id && n["in_sync"] == true
}
