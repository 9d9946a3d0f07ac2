//! The processes of the registry's end-to-end tests: the `portico-registry` binary and the
//! gateway binary in ZooKeeper mode, on free 127.0.0.1 ports, with the locked ZooKeeper's
//! credentials when the test's ZooKeeper is locked; a blocking HTTP client and an
//! authenticated admin call for tests that drive them from plain threads.

use super::{sibling_bin, Proc, TOKEN};
use portico_testkit::{free_port, wait_for, ZooKeeper};
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

/// The registry binary's command on `zk` (`/portico`, with the registry's credentials when
/// `zk` is locked) listening on 127.0.0.1:`port`; the caller adds the admin token and the rest.
pub fn registry_command(zk: &ZooKeeper, port: u16) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_portico-registry"));
    cmd.args(["--zk", &zk.connect_string(), "--zk-root", "/portico"])
        .args(["--listen", &format!("127.0.0.1:{port}")]);
    if let Some(c) = zk.credentials() {
        cmd.arg("--zk-auth-file").arg(c.registry_file());
    }
    cmd
}

/// A running registry binary.
pub struct RegistryProc {
    pub proc: Proc,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

/// Starts the registry binary as `name` (its log in `logs`) with the admin token [`TOKEN`],
/// `configure` adding its own flags and environment, and waits (30 s) until
/// `/api/v1/health` answers 200.
pub fn spawn_registry(
    zk: &ZooKeeper,
    name: &'static str,
    logs: &Path,
    configure: impl FnOnce(&mut Command),
) -> RegistryProc {
    let port = free_port();
    let mut cmd = registry_command(zk, port);
    cmd.env("PORTICO_ADMIN_TOKEN", TOKEN);
    configure(&mut cmd);
    let mut proc = Proc::spawn(name, &mut cmd, logs);
    let base = format!("http://127.0.0.1:{port}");
    let up = wait_for(Duration::from_secs(30), || {
        admin_call(&base, reqwest::Method::GET, "/health", None).0 == 200
    });
    proc.assert_alive();
    assert!(up, "{name} did not come up:\n{}", proc.tail());
    RegistryProc { proc, base }
}

/// A running gateway binary in ZooKeeper mode.
pub struct GatewayProc {
    pub proc: Proc,
    /// `http://127.0.0.1:<port>` of the traffic listener.
    pub url: String,
    /// `http://127.0.0.1:<port>` of the admin listener.
    pub admin: String,
}

/// Starts the gateway binary as node `node_id` on `zk` (with the gateways' credentials when
/// `zk` is locked), traffic and admin listeners on free ports, its snapshot in
/// `work/snapshot-<node_id>` and its log in `work`; `configure` adds its own flags. Does not
/// wait: see [`wait_registered`].
pub fn spawn_gateway(
    zk: &ZooKeeper,
    node_id: &str,
    work: &Path,
    configure: impl FnOnce(&mut Command),
) -> GatewayProc {
    let (listen, admin) = (free_port(), free_port());
    let mut cmd = Command::new(sibling_bin("portico-gateway"));
    cmd.args(["--zk", &zk.connect_string(), "--zk-root", "/portico"]);
    if let Some(c) = zk.credentials() {
        cmd.arg("--zk-auth-file").arg(c.gateway_file());
    }
    cmd.args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .arg("--snapshot-dir")
        .arg(work.join(format!("snapshot-{node_id}")))
        .args(["--node-id", node_id]);
    configure(&mut cmd);
    // The internal listener defaults to a fixed port (127.0.0.1:9181): off unless asked.
    if !cmd.get_args().any(|a| a == "--internal-listen") {
        cmd.args(["--internal-listen", "off"]);
    }
    GatewayProc {
        proc: Proc::spawn("gateway", &mut cmd, work),
        url: format!("http://127.0.0.1:{listen}"),
        admin: format!("http://127.0.0.1:{admin}"),
    }
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
