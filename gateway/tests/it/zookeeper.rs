//! ZooKeeper mode over real processes: a real ZooKeeper (Debian's), the demo backend and the
//! gateway. Changes made in ZooKeeper (by a client or by zkCli.sh) apply without restart; the
//! gateway keeps serving when ZooKeeper dies, boots from its disk snapshot when ZooKeeper is
//! down, and recovers from an expired session. Every ZooKeeper here is locked down
//! (`ZooKeeper::start_locked`): the seeding client is the registry's identity, the gateway the
//! gateway's, zkCli the operator's (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_control::zk::auth::{create_acl, read_policy, ZkAuth};
use portico_testkit::{zkcli_as, ZooKeeper};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

const ROOT: &str = "/portico";

/// A small synchronous ZooKeeper client for seeding and editing the tree.
struct Tree {
    rt: tokio::runtime::Runtime,
    client: zk::Client,
}

impl Tree {
    /// A client with the registry's credentials (if `zk` is locked).
    fn connect(zk: &ZooKeeper) -> Tree {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let auth = zk
            .credentials()
            .map(|c| ZkAuth::parse(&c.registry).unwrap());
        let client = rt
            .block_on(ZkAuth::connector(auth.as_ref()).connect(&zk.connect_string()))
            .unwrap();
        Tree { rt, client }
    }

    /// The ACL the registry gives a new node at `path` (absolute).
    async fn acl(&self, path: &str) -> Vec<zk::Acl> {
        let policy = read_policy(&self.client, ROOT).await.unwrap();
        let rel = path
            .strip_prefix(ROOT)
            .unwrap_or("")
            .trim_start_matches('/');
        create_acl(policy.as_ref(), rel)
    }

    /// Creates or replaces `<root>/<rel>` with `data`, creating parents.
    fn put_bytes(&self, rel: &str, data: &[u8]) {
        let path = format!("{ROOT}/{rel}");
        self.rt.block_on(async {
            let mut parent = String::new();
            for part in path
                .trim_start_matches('/')
                .split('/')
                .collect::<Vec<_>>()
                .split_last()
                .unwrap()
                .1
            {
                parent.push('/');
                parent.push_str(part);
                let acl = self.acl(&parent).await;
                let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
                match self.client.create(&parent, &[], &opts).await {
                    Ok(_) | Err(zk::Error::NodeExists) => {}
                    Err(e) => panic!("create {parent}: {e}"),
                }
            }
            let acl = self.acl(&path).await;
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
            match self.client.create(&path, data, &opts).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => {
                    self.client.set_data(&path, data, None).await.unwrap();
                }
                Err(e) => panic!("create {path}: {e}"),
            }
        });
    }

    fn put(&self, rel: &str, v: &Value) {
        self.put_bytes(rel, &serde_json::to_vec(v).unwrap());
    }

    fn get(&self, rel: &str) -> Option<Value> {
        let path = format!("{ROOT}/{rel}");
        self.rt.block_on(async {
            match self.client.get_data(&path).await {
                Ok((data, _)) => serde_json::from_slice(&data).ok(),
                Err(_) => None,
            }
        })
    }
}

fn seed(tree: &Tree, backend: &BackendProcess) {
    tree.put(
        "clusters/demo-http",
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]}),
    );
    tree.put("apps/merchant-1", &json!({"secret": SECRET, "apis": ["*"]}));
    tree.put("apis/order.get", &json!({
        "id": "order.get",
        "http": {"method": "GET", "path": "/v1/orders/{order_id}"},
        "backend": {"cluster": "demo-http", "timeout_ms": 2000, "http": {"path": "/orders/{order_id}"}},
        "auth": "signature"
    }));
    tree.put(
        "apis/public.health",
        &json!({
            "id": "public.health",
            "http": {"method": "GET", "path": "/v1/health"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "none"
        }),
    );
    tree.put("ipacl", &json!({"deny": [], "allow": []}));
    tree.put_bytes("switches", b"");
}

/// `--zk HOSTS`, with the gateway's credentials file when `zk` is locked.
fn zk_args(zk: &ZooKeeper) -> Vec<String> {
    let mut args = vec!["--zk".into(), zk.connect_string()];
    if let Some(creds) = zk.credentials() {
        args.push("--zk-auth-file".into());
        args.push(creds.gateway_file().display().to_string());
    }
    args
}

fn start_gateway(zk: &ZooKeeper, snapshot: &std::path::Path, node_id: &str) -> GatewayProcess {
    GatewayProcess::start_args(
        [
            zk_args(zk),
            vec![
                "--zk-root".into(),
                ROOT.into(),
                "--snapshot-dir".into(),
                snapshot.display().to_string(),
                "--node-id".into(),
                node_id.into(),
                "--zk-session-timeout-ms".into(),
                "4000".into(),
            ],
        ]
        .concat(),
    )
}

fn order_status(gw: &GatewayProcess) -> (u16, String) {
    let resp = signed(&client(), "GET", &gw.url("/v1/orders/1"), KEY, SECRET, None)
        .send()
        .unwrap();
    let (s, c, _) = code_of(resp);
    (s, c)
}

#[test]
fn changes_in_zookeeper_apply_without_restart() {
    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let tree = Tree::connect(&zk);
    seed(&tree, &backend);
    let snap = tempfile::tempdir().unwrap();
    let gw = start_gateway(&zk, &snap.path().join("lkg"), "gw-a");
    assert_eq!(order_status(&gw).0, 200);
    assert_eq!(
        gw.status()["config_source"].as_str().unwrap(),
        format!("zk:{}{ROOT}", zk.connect_string())
    );

    // The node registers itself, with the config version it applied.
    assert!(wait_until(Duration::from_secs(10), || {
        tree.get("nodes/gw-a").is_some_and(|n| {
            n["config_version"]["digest"] == gw.status()["config_version"]["digest"]
        })
    }));
    let node = tree.get("nodes/gw-a").unwrap();
    assert_eq!(node["addr"], gw.listen.to_string());
    assert_eq!(node["admin_addr"], gw.admin.to_string());

    // An SRE flips a switch with ZooKeeper's own CLI, as the operator identity (the registry
    // created the switch; the operator may only set it).
    tree.put("switches/order.get", &json!({"degraded": false}));
    let out = zkcli_as(
        &zk.connect_string(),
        &zk.credentials().unwrap().operator,
        &[
            "set",
            "/portico/switches/order.get",
            r#"{"degraded":true,"reason":"zkcli drill"}"#,
        ],
    );
    assert!(out.success, "{out:?}");
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw)
        == (503, "API_DEGRADED".into())));

    // A corrupt document is rejected on its own while another change applies.
    let digest = gw.digest();
    tree.put_bytes("apis/corrupt", b"\x00\xffnot json");
    tree.put("switches/order.get", &json!({"degraded": false}));
    assert!(gw.wait_for_new_config(&digest));
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw).0 == 200));
    let status = gw.status();
    assert!(
        status["rejected_documents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"] == "apis/corrupt"),
        "{status}"
    );

    // The applied tree is on disk as last-known-good.
    assert!(wait_until(Duration::from_secs(10), || snap
        .path()
        .join("lkg/apis/order.get.json")
        .exists()));
    assert!(snap.path().join("lkg/switches/order.get.json").exists());
    assert!(!snap.path().join("lkg/apis/corrupt.json").exists());
}

#[test]
fn zookeeper_dying_under_load_fails_no_request() {
    let mut zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let tree = Tree::connect(&zk);
    seed(&tree, &backend);
    tree.put(
        "switches/public.health",
        &json!({"degraded": true, "reason": "kept while zk is down",
        "fallback": {"status": 200, "body": {"degraded": true}}}),
    );
    let snap = tempfile::tempdir().unwrap();
    let gw = start_gateway(&zk, &snap.path().join("lkg"), "gw-b");

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (stop, ok, failed, url) = (
                stop.clone(),
                ok.clone(),
                failed.clone(),
                gw.url("/v1/orders/5"),
            );
            s.spawn(move || {
                let c = client();
                while !stop.load(Ordering::Relaxed) {
                    match signed(&c, "GET", &url, KEY, SECRET, None).send() {
                        Ok(r) if r.status() == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failed.lock().unwrap().push(r.status().as_u16().to_string()),
                        Err(e) => failed.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        zk.kill();
        // Under load, the gateway sees ZooKeeper go, then serves on: 20 more answers.
        let state = || gw.status()["zookeeper"]["state"].clone();
        let seen = wait_until(Duration::from_secs(30), || state() != "connected");
        let served = ok.load(Ordering::Relaxed);
        let more = seen
            && wait_until(Duration::from_secs(20), || {
                ok.load(Ordering::Relaxed) >= served + 20
            });
        if !more {
            stop.store(true, Ordering::Relaxed);
        }
        assert!(seen, "the gateway never saw ZooKeeper go: {}", state());
        assert!(more, "no traffic served after ZooKeeper went");
        // The switch is still enforced with ZooKeeper gone.
        let v: Value = client()
            .get(gw.url("/v1/health"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(v, json!({"degraded": true}));
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        failed.lock().unwrap().is_empty(),
        "failed requests: {:?}",
        failed.lock().unwrap()
    );
    assert!(ok.load(Ordering::Relaxed) > 20);

    // ZooKeeper back: a change made afterwards is applied.
    zk.start_again();
    assert!(zk.wait_ready(Duration::from_secs(30)));
    let tree = Tree::connect(&zk);
    tree.put("switches/public.health", &json!({"degraded": false}));
    assert!(wait_until(Duration::from_secs(20), || {
        client()
            .get(gw.url("/v1/health"))
            .send()
            .unwrap()
            .json::<Value>()
            .unwrap()["status"]
            == "ok"
    }));
}

#[test]
fn a_gateway_restarted_with_zookeeper_down_serves_its_snapshot() {
    let mut zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let tree = Tree::connect(&zk);
    seed(&tree, &backend);
    let snap = tempfile::tempdir().unwrap();
    let lkg = snap.path().join("lkg");
    let gw = start_gateway(&zk, &lkg, "gw-c");
    assert_eq!(order_status(&gw).0, 200);
    assert!(wait_until(Duration::from_secs(10), || lkg
        .join("apis/order.get.json")
        .exists()));
    drop(gw);
    drop(tree);

    zk.stop();
    let gw = start_gateway(&zk, &lkg, "gw-c");
    assert_eq!(
        order_status(&gw).0,
        200,
        "the gateway did not serve its snapshot"
    );
    let status = gw.status();
    assert!(
        status["config_source"]
            .as_str()
            .unwrap()
            .starts_with("snapshot:"),
        "{status}"
    );
    assert_ne!(status["zookeeper"]["state"], "connected");

    // ZooKeeper back: the gateway moves to it, and later changes apply.
    zk.start_again();
    assert!(zk.wait_ready(Duration::from_secs(30)));
    assert!(wait_until(Duration::from_secs(30), || gw.status()
        ["config_source"]
        .as_str()
        .unwrap()
        .starts_with("zk:")));
    let tree = Tree::connect(&zk);
    tree.put("switches/order.get", &json!({"degraded": true}));
    assert!(wait_until(Duration::from_secs(20), || order_status(&gw)
        == (503, "API_DEGRADED".into())));
}

#[test]
fn an_expired_session_is_replaced_and_the_node_re_registered() {
    let mut zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let tree = Tree::connect(&zk);
    seed(&tree, &backend);
    drop(tree);
    let snap = tempfile::tempdir().unwrap();
    let gw = start_gateway(&zk, &snap.path().join("lkg"), "gw-d");
    assert!(wait_until(Duration::from_secs(10), || gw.status()
        ["zookeeper"]["state"]
        == "connected"));
    let first_session = gw.status()["zookeeper"]["session_id"].clone();

    // Paused past the session timeout (4 s): the session expires when ZooKeeper resumes.
    zk.pause();
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(
        order_status(&gw).0,
        200,
        "traffic must not depend on ZooKeeper"
    );
    zk.resume();

    assert!(
        wait_until(Duration::from_secs(30), || {
            let s = gw.status();
            s["zookeeper"]["state"] == "connected" && s["zookeeper"]["session_id"] != first_session
        }),
        "no new session: {}",
        gw.status()
    );
    let tree = Tree::connect(&zk);
    assert!(
        wait_until(Duration::from_secs(15), || tree.get("nodes/gw-d").is_some()),
        "node not re-registered"
    );
    tree.put("switches/order.get", &json!({"degraded": true}));
    assert!(wait_until(Duration::from_secs(15), || order_status(&gw)
        == (503, "API_DEGRADED".into())));
}

#[test]
fn the_sandbox_listener_serves_drafts_only() {
    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let tree = Tree::connect(&zk);
    seed(&tree, &backend);
    tree.put(
        "sandbox/clusters/demo-http",
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]}),
    );
    tree.put(
        "sandbox/apps/sandbox-app",
        &json!({"secret": "sandbox-secret-1", "apis": ["*"]}),
    );
    tree.put(
        "sandbox/apis/draft.get",
        &json!({
            "id": "draft.get",
            "http": {"method": "GET", "path": "/v1/draft/{id}"},
            "backend": {"cluster": "demo-http", "http": {"path": "/orders/{id}"}},
            "auth": "signature"
        }),
    );
    let sandbox: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let snap = tempfile::tempdir().unwrap();
    let gw = GatewayProcess::start_args(
        [
            zk_args(&zk),
            vec![
                "--snapshot-dir".into(),
                snap.path().join("lkg").display().to_string(),
                "--sandbox-listen".into(),
                sandbox.to_string(),
            ],
        ]
        .concat(),
    );
    let c = client();
    assert!(wait_until(Duration::from_secs(10), || gw.status()
        ["sandbox"]["apis_loaded"]
        == 1));
    let url = format!("http://{sandbox}/v1/draft/77");
    let resp = signed(&c, "GET", &url, "sandbox-app", "sandbox-secret-1", None)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().unwrap()["order_id"], "77");
    // Sandbox apps do not exist on the live plane, and drafts are not live.
    let (s, c2, _) = code_of(
        signed(&c, "GET", &gw.url("/v1/draft/77"), KEY, SECRET, None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c2.as_str()), (404, "API_NOT_FOUND"));
    let (s, c2, _) = code_of(
        signed(
            &c,
            "GET",
            &gw.url("/v1/orders/1"),
            "sandbox-app",
            "sandbox-secret-1",
            None,
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c2.as_str()), (401, "SIGNATURE_INVALID"));
    // docs/SECURITY.md, "Replays": an app whose sandbox secret is its live secret is refused by the
    // sandbox, so a call signed for one plane is never good on the other.
    tree.put(
        "sandbox/apps/merchant-1",
        &json!({"secret": SECRET, "apis": ["*"]}),
    );
    assert!(wait_until(Duration::from_secs(10), || gw.status()
        ["sandbox"]["apps_loaded"]
        == 2));
    let (s, c2, v) = code_of(signed(&c, "GET", &url, KEY, SECRET, None).send().unwrap());
    assert_eq!((s, c2.as_str()), (401, "SIGNATURE_INVALID"), "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("sandbox secret"),
        "{v}"
    );
    tree.put(
        "sandbox/apps/merchant-1",
        &json!({"secret": "merchant-1-sandbox-secret", "apis": ["*"]}),
    );
    assert!(wait_until(Duration::from_secs(10), || {
        signed(&c, "GET", &url, KEY, "merchant-1-sandbox-secret", None)
            .send()
            .is_ok_and(|r| r.status() == 200)
    }));
}
