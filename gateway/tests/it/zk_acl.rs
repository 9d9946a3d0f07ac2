//! ZooKeeper locked down (docs/SECURITY.md, "Control plane (ZooKeeper)"): a real ZooKeeper
//! with the ACLs `portico zk lockdown` sets, real gateway processes, zkCli as the SREs use it.
//!
//! - nobody without credentials reads an app or writes anything (create under every folder,
//!   set on every kind, delete, setAcl);
//! - a gateway with its credentials serves the tree and registers `nodes/<id>`, and cannot
//!   write `switches/` or `apps/`;
//! - a gateway with wrong or no credentials says so (log, `/status`, `/readyz` 503) and keeps
//!   serving its disk snapshot, which is private (0700/0600);
//! - the operator flips a switch with zkCli after `addauth digest`, and cannot read secrets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_control::zk::auth::{create_acl, read_policy, ZkAuth};
use portico_testkit::{zkcli, zkcli_as, ZooKeeper};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;
use zookeeper_client as zk;

const ROOT: &str = "/portico";

/// Runs a future on a fresh current-thread runtime.
fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn connect(zk: &ZooKeeper, auth: Option<&str>) -> zk::Client {
    let auth = auth.map(|a| ZkAuth::parse(a).unwrap());
    ZkAuth::connector(auth.as_ref())
        .connect(&zk.connect_string())
        .await
        .unwrap()
}

/// Writes `rel` as the registry does: parents first, each with the policy's ACL.
async fn put(client: &zk::Client, rel: &str, data: &[u8]) {
    let policy = read_policy(client, ROOT).await.unwrap();
    assert!(policy.is_some(), "the tree is locked");
    let mut path = ROOT.to_owned();
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        path.push('/');
        path.push_str(part);
        let here = parts[..=i].join("/");
        let acl = create_acl(policy.as_ref(), &here);
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        let bytes: &[u8] = if i + 1 == parts.len() { data } else { &[] };
        match client.create(&path, bytes, &opts).await {
            Ok(_) => {}
            Err(zk::Error::NodeExists) if i + 1 < parts.len() => {}
            Err(zk::Error::NodeExists) => {
                client.set_data(&path, bytes, None).await.unwrap();
            }
            Err(e) => panic!("create {path}: {e}"),
        }
    }
}

/// The tree of the zookeeper tests, plus what only the registry writes.
async fn seed(client: &zk::Client, backend: &BackendProcess) {
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]});
    let docs: Vec<(&str, Value)> = vec![
        ("clusters/demo-http", cluster.clone()),
        ("apps/merchant-1", json!({"secret": SECRET, "apis": ["*"]})),
        (
            "apis/order.get",
            json!({
                "id": "order.get",
                "http": {"method": "GET", "path": "/v1/orders/{order_id}"},
                "backend": {"cluster": "demo-http", "timeout_ms": 2000, "http": {"path": "/orders/{order_id}"}},
                "auth": "signature"
            }),
        ),
        ("switches/order.get", json!({"degraded": false})),
        ("ipacl", json!({"deny": [], "allow": []})),
        ("history/apps/merchant-1/1", json!({"secret": SECRET})),
        ("audit/entry-0000000001", json!({"action": "seed"})),
        (
            "sandbox/apps/sandbox-app",
            json!({"secret": "sandbox-secret"}),
        ),
        ("sandbox/clusters/demo-http", cluster),
    ];
    for (rel, v) in docs {
        put(client, rel, &serde_json::to_vec(&v).unwrap()).await;
    }
    put(client, &descriptor_path(), DESCRIPTOR).await;
}

/// An (empty) descriptor set, named by its SHA-256 as the tree requires.
const DESCRIPTOR: &[u8] = b"";

fn descriptor_path() -> String {
    use sha2::Digest as _;
    format!(
        "descriptors/{}",
        hex::encode(sha2::Sha256::digest(DESCRIPTOR))
    )
}

fn zk_args(zk: &ZooKeeper, auth_file: Option<&Path>) -> Vec<String> {
    let mut args = vec![
        "--zk".into(),
        zk.connect_string(),
        "--zk-session-timeout-ms".into(),
        "4000".into(),
    ];
    if let Some(f) = auth_file {
        args.extend(["--zk-auth-file".into(), f.display().to_string()]);
    }
    args
}

fn order_status(gw: &GatewayProcess) -> (u16, String) {
    let resp = signed(&client(), "GET", &gw.url("/v1/orders/1"), KEY, SECRET, None)
        .send()
        .unwrap();
    let (s, c, _) = code_of(resp);
    (s, c)
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Every folder under `dir` is 0700 and every file 0600.
fn assert_private(dir: &Path) {
    let real = std::fs::canonicalize(dir).unwrap();
    assert_eq!(mode(&real), 0o700, "{}", real.display());
    for entry in std::fs::read_dir(&real).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            assert_private(&path);
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
}

#[test]
fn without_credentials_nothing_can_be_read_or_written() {
    let zk = ZooKeeper::start_locked();
    let creds = zk.credentials().unwrap();
    let backend = BackendProcess::start_http().unwrap();
    block(async {
        let registry = connect(&zk, Some(&creds.registry)).await;
        seed(&registry, &backend).await;
        let anonymous = connect(&zk, None).await;
        let gateway = connect(&zk, Some(&creds.gateway)).await;
        let operator = connect(&zk, Some(&creds.operator)).await;
        let wrong = connect(&zk, Some("portico-registry:wrong-password")).await;
        let abs = |rel: &str| {
            if rel.is_empty() {
                ROOT.to_owned()
            } else {
                format!("{ROOT}/{rel}")
            }
        };
        let folders = [
            "",
            "apis",
            "clusters",
            "apps",
            "switches",
            "descriptors",
            "nodes",
            "history",
            "audit",
            "sandbox",
            "sandbox/apps",
        ];
        let descriptor = descriptor_path();
        let docs = [
            descriptor.as_str(),
            "apis/order.get",
            "clusters/demo-http",
            "apps/merchant-1",
            "switches/order.get",
            "ipacl",
            "history/apps/merchant-1/1",
            "audit/entry-0000000001",
            "sandbox/apps/sandbox-app",
        ];
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        for who in [&anonymous, &wrong] {
            // Reads: secrets (live, sandbox, history), and everything else too.
            for rel in docs {
                let e = who.get_data(&abs(rel)).await.unwrap_err();
                assert_eq!(e, zk::Error::NoAuth, "get {rel}");
            }
            for rel in folders {
                let e = who.get_children(&abs(rel)).await.unwrap_err();
                assert_eq!(e, zk::Error::NoAuth, "ls {rel}");
                let e = who
                    .create(&format!("{}/intruder", abs(rel)), b"{}", &open)
                    .await
                    .unwrap_err();
                assert_eq!(e, zk::Error::NoAuth, "create under {rel}");
            }
            for rel in docs {
                let e = who.set_data(&abs(rel), b"{}", None).await.unwrap_err();
                assert_eq!(e, zk::Error::NoAuth, "set {rel}");
                let e = who.delete(&abs(rel), None).await.unwrap_err();
                assert_eq!(e, zk::Error::NoAuth, "delete {rel}");
                let e = who
                    .set_acl(&abs(rel), &zk::Acls::anyone_all(), None)
                    .await
                    .unwrap_err();
                assert_eq!(e, zk::Error::NoAuth, "setAcl {rel}");
            }
        }
        // The gateway reads the served tree (secrets included: it verifies signatures) and
        // writes nothing of it; history and audit are not its business.
        for rel in [
            "apis/order.get",
            "apps/merchant-1",
            "switches/order.get",
            "ipacl",
        ] {
            gateway.get_data(&abs(rel)).await.unwrap();
        }
        for rel in ["switches/order.get", "apps/merchant-1", "apis/order.get"] {
            let e = gateway.set_data(&abs(rel), b"{}", None).await.unwrap_err();
            assert_eq!(e, zk::Error::NoAuth, "gateway set {rel}");
        }
        for rel in ["apps", "switches", "apis", ""] {
            let e = gateway
                .create(&format!("{}/x", abs(rel)), b"{}", &open)
                .await
                .unwrap_err();
            assert_eq!(e, zk::Error::NoAuth, "gateway create under {rel}");
        }
        let e = gateway.get_data(&abs("history/apps/merchant-1/1")).await;
        assert_eq!(e.unwrap_err(), zk::Error::NoAuth);
        // The operator flips switches, reads the served tree, and never an app's secret.
        operator
            .set_data(&abs("switches/order.get"), br#"{"degraded":false}"#, None)
            .await
            .unwrap();
        operator.get_data(&abs("apis/order.get")).await.unwrap();
        for rel in [
            "apps/merchant-1",
            "sandbox/apps/sandbox-app",
            "history/apps/merchant-1/1",
        ] {
            let e = operator.get_data(&abs(rel)).await.unwrap_err();
            assert_eq!(e, zk::Error::NoAuth, "operator get {rel}");
        }
        let e = operator.set_data(&abs("apis/order.get"), b"{}", None).await;
        assert_eq!(e.unwrap_err(), zk::Error::NoAuth);
        // Nor may it create a switch: zkCli would create it open to the world.
        let e = operator
            .create(&abs("switches/new.api"), b"{}", &open)
            .await
            .unwrap_err();
        assert_eq!(e, zk::Error::NoAuth);
        // No node carries a world entry.
        for rel in folders.iter().chain(docs.iter()) {
            let (acl, _) = registry.get_acl(&abs(rel)).await.unwrap();
            assert!(acl.iter().all(|a| a.scheme() == "digest"), "{rel}: {acl:?}");
        }
    });
}

#[test]
fn gateways_with_credentials_serve_register_and_obey_the_operator() {
    let zk = ZooKeeper::start_locked();
    let creds = zk.credentials().unwrap();
    let backend = BackendProcess::start_http().unwrap();
    block(async {
        let registry = connect(&zk, Some(&creds.registry)).await;
        seed(&registry, &backend).await;
    });
    let snap = tempfile::tempdir().unwrap();
    let lkg = snap.path().join("lkg");
    let mut args = zk_args(&zk, Some(&creds.gateway_file()));
    args.extend([
        "--node-id".into(),
        "gw-acl".into(),
        "--snapshot-dir".into(),
        lkg.display().to_string(),
    ]);
    let gw = GatewayProcess::start_args(args);
    assert_eq!(order_status(&gw).0, 200);
    assert_eq!(gw.status()["zookeeper"]["state"], "connected");

    // Its node is registered with the gateway's cdrwa and the operator's r, nobody else's.
    let node = format!("{ROOT}/nodes/gw-acl");
    let acl = block(async {
        let registry = connect(&zk, Some(&creds.registry)).await;
        for _ in 0..500 {
            if let Ok((acl, _)) = registry.get_acl(&node).await {
                return acl;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{node} never registered");
    });
    let perm = |who: &str| {
        let id = portico_testkit::digest_id(who);
        acl.iter().find(|a| a.id() == id).map(|a| a.permission())
    };
    assert_eq!(perm(&creds.gateway), Some(zk::Permission::ALL), "{acl:?}");
    assert_eq!(perm(&creds.operator), Some(zk::Permission::READ), "{acl:?}");
    assert!(acl.iter().all(|a| a.scheme() == "digest"), "{acl:?}");

    // The SREs' drill: zkCli, `addauth digest` as the operator, `set` the switch.
    let connect = zk.connect_string();
    let out = zkcli(
        &connect,
        &["set", "/portico/switches/order.get", r#"{"degraded":true}"#],
    );
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("Insufficient permission"),
        "{out:?}"
    );
    assert_eq!(order_status(&gw).0, 200);
    let out = zkcli_as(
        &connect,
        &creds.operator,
        &[
            "set",
            "/portico/switches/order.get",
            r#"{"degraded":true,"reason":"drill"}"#,
        ],
    );
    assert!(out.success, "{out:?}");
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw)
        == (503, "API_DEGRADED".into())));
    let out = zkcli_as(
        &connect,
        &creds.operator,
        &["get", "/portico/apps/merchant-1"],
    );
    assert!(!out.success && !out.stdout.contains(SECRET), "{out:?}");

    // The last-known-good snapshot holds the secrets: private.
    assert!(wait_until(Duration::from_secs(10), || lkg
        .join("switches/order.get.json")
        .exists()));
    assert_private(&lkg);
}

#[test]
fn wrong_or_no_credentials_fail_clearly_and_the_snapshot_keeps_serving() {
    let zk = ZooKeeper::start_locked();
    let creds = zk.credentials().unwrap();
    let backend = BackendProcess::start_http().unwrap();
    block(async {
        let registry = connect(&zk, Some(&creds.registry)).await;
        seed(&registry, &backend).await;
    });
    let snap = tempfile::tempdir().unwrap();
    let lkg = snap.path().join("lkg");
    let with_snapshot = |auth: Option<&Path>| {
        let mut args = zk_args(&zk, auth);
        args.extend(["--snapshot-dir".into(), lkg.display().to_string()]);
        args
    };
    // A first run with the right credentials leaves a snapshot.
    {
        let gw = GatewayProcess::start_args(with_snapshot(Some(&creds.gateway_file())));
        assert_eq!(order_status(&gw).0, 200);
        assert!(wait_until(Duration::from_secs(10), || lkg
            .join("apps/merchant-1.json")
            .exists()));
    }
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong");
    portico_testkit::write_private(&wrong, "portico-gateway:not-the-password\n");
    for (label, auth) in [("wrong", Some(wrong.as_path())), ("none", None)] {
        let gw = GatewayProcess::spawn_args(with_snapshot(auth));
        let admin = client();
        let refused = wait_until(Duration::from_secs(30), || {
            admin
                .get(format!("http://{}/status", gw.admin))
                .send()
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .is_some_and(|s| s["zookeeper"]["state"] == "unauthorized")
        });
        assert!(refused, "{label}: {}", gw.status());
        let status = gw.status();
        let error = status["zookeeper"]["last_error"].as_str().unwrap_or("");
        assert!(
            error.contains("NoAuth") && error.contains("--zk-auth-file"),
            "{label}: {status}"
        );
        // Out of rotation for the refusal (once the traffic listener is up: before that
        // `/readyz` says the listener is not accepting yet, also a 503).
        let mut last = String::new();
        let out_of_rotation = wait_until(Duration::from_secs(30), || {
            let Ok(ready) = admin.get(format!("http://{}/readyz", gw.admin)).send() else {
                return false;
            };
            let code = ready.status().as_u16();
            last = format!("{code} {}", ready.text().unwrap_or_default());
            code == 503 && last.contains("refused access")
        });
        assert!(out_of_rotation, "{label}: /readyz said {last:?}");
        // Still serving what it had.
        assert!(
            wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(
                gw.listen
            )
            .is_ok()),
            "{label}: listener"
        );
        assert_eq!(order_status(&gw).0, 200, "{label}");
        assert!(
            status["config_source"]
                .as_str()
                .is_some_and(|s| s.starts_with("snapshot:")),
            "{label}: {status}"
        );
    }
    // The credentials file must be private.
    let loose = dir.path().join("loose");
    std::fs::write(&loose, &creds.gateway).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portico-gateway"))
        .args(zk_args(&zk, Some(&loose)))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("chmod 600"), "{stderr}");
}
