//! Locking down an open tree (docs/operations/zookeeper.md, "Migrating an open tree"): a tree written
//! the way v1 did (every node `world:anyone cdrwa`) by a registry without credentials, then
//! `portico zk lockdown` (dry run, for real, again), then the registry and a gateway with
//! their credentials, and an anonymous client that can read nothing. Also the export audit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::registry_as;
use portico_control::zk::{ZkAuth, ZkSource};
use portico_control::ConfigSource;
use portico_testkit::{ZkCredentials, ZooKeeper};
use serde_json::json;
use std::path::Path;
use zookeeper_client as zk;

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn lockdown(zk: &ZooKeeper, registry: &Path, creds: &ZkCredentials, extra: &[&str]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_portico"))
        .args([
            "zk",
            "lockdown",
            "--zk",
            &zk.connect_string(),
            "--root",
            "/portico",
        ])
        .arg("--registry-auth-file")
        .arg(registry)
        .arg("--gateway-auth-file")
        .arg(creds.gateway_file())
        .arg("--operator-auth-file")
        .arg(creds.operator_file())
        .args(extra)
        .output()
        .await
        .unwrap();
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_tree_is_locked_and_everything_still_works() {
    let zk = ZooKeeper::start();
    let creds = ZkCredentials::generate();
    // The tree as v1 made it: a registry without credentials, a gateway registered.
    let open = registry_as(&zk, None).await;
    open.post(
        "/clusters",
        &json!({"name": "web", "protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}]}),
    )
    .await
    .expect(201);
    open.post(
        "/apps",
        &json!({"app_key": "merchant-1", "secret": "s3cr3t-value", "apis": ["*"]}),
    )
    .await
    .expect(201);
    open.post("/sandbox/apps", &json!({"app_key": "sb-1"}))
        .await
        .expect(201);
    // A switch names an existing API (tests/it/write_checks.rs).
    let web_x = json!({"id": "web.x", "http": {"method": "GET", "path": "/x"},
        "backend": {"cluster": "web", "http": {}}});
    let files =
        json!({"files": {"apis/web.x.json": {"encoding": "utf-8", "content": web_x.to_string()}}});
    open.post("/import?env=live", &files).await.expect(200);
    open.put("/switches/web.x", &json!({"degraded": false}))
        .await
        .expect(201);
    let anonymous = zk::Client::connect(&zk.connect_string()).await.unwrap();
    let (acl, _) = anonymous.get_acl("/portico/apps/merchant-1").await.unwrap();
    assert_eq!(acl, zk::Acls::anyone_all().to_vec(), "v1 trees are open");

    // A dry run says what it would do, and does nothing.
    let run = lockdown(&zk, &creds.registry_file(), &creds, &["--dry-run"]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "would set /portico/apps/merchant-1: world:anyone:cdrwa -> digest:portico-registry:"
        ),
        "{}",
        run.stdout
    );
    anonymous
        .get_data("/portico/apps/merchant-1")
        .await
        .unwrap();

    // The wrong file for a role is refused before anything changes.
    let run = lockdown(&zk, &creds.gateway_file(), &creds, &[]).await;
    assert!(
        !run.ok && run.stderr.contains("portico-registry"),
        "{}",
        run.stderr
    );
    anonymous
        .get_data("/portico/apps/merchant-1")
        .await
        .unwrap();

    // For real: nothing is readable or writable without credentials any more.
    let run = lockdown(&zk, &creds.registry_file(), &creds, &[]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(run.stdout.contains("locked"), "{}", run.stdout);
    for path in [
        "/portico",
        "/portico/apps",
        "/portico/apps/merchant-1",
        "/portico/sandbox/apps/sb-1",
        "/portico/switches/web.x",
        "/portico/audit",
    ] {
        let e = anonymous.get_data(path).await.unwrap_err();
        assert_eq!(e, zk::Error::NoAuth, "{path}");
        let e = anonymous.set_data(path, b"{}", None).await.unwrap_err();
        assert_eq!(e, zk::Error::NoAuth, "{path}");
    }
    // Idempotent.
    let run = lockdown(&zk, &creds.registry_file(), &creds, &[]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(run.stdout.contains("0 node(s) changed"), "{}", run.stdout);

    // The registry with its credentials works as before; the one without is refused clearly.
    let registry_auth = ZkAuth::parse(&creds.registry).unwrap();
    let locked = registry_as(&zk, Some(registry_auth)).await;
    locked.get("/apps/merchant-1").await.expect(200);
    locked
        .post("/apps", &json!({"app_key": "merchant-2", "apis": ["*"]}))
        .await
        .expect(201);
    locked
        .put(
            "/switches/web.x",
            &json!({"degraded": true, "reason": "after lockdown"}),
        )
        .await
        .expect(200);
    let r = open.get("/apps/merchant-1").await.expect(503);
    assert!(
        r.body["message"].as_str().unwrap().contains("credentials"),
        "{r:?}"
    );

    // A gateway with its credentials reads the locked tree, new app included.
    let gateway = ZkSource::new(&zk.connect_string(), "/portico")
        .with_auth(Some(ZkAuth::parse(&creds.gateway).unwrap()));
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let g = gateway.clone();
    tokio::spawn(async move { g.run(tx).await });
    let tree = tokio::time::timeout(std::time::Duration::from_secs(30), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(tree.unreadable.is_empty(), "{:?}", tree.unreadable);
    assert!(tree.docs.contains_key("apps/merchant-1"));
    assert!(tree.docs.contains_key("apps/merchant-2"));
    assert!(tree.docs.contains_key("switches/web.x"));

    // The export: secrets redacted unless asked for, and either way audited.
    let r = locked.get("/export").await.expect(200);
    assert_eq!(r.body["secrets"], "redacted");
    let app = r.body["files"]["apps/merchant-1.json"]["content"]
        .as_str()
        .unwrap();
    assert!(
        !app.contains("s3cr3t-value") && app.contains("<redacted>"),
        "{app}"
    );
    let r = locked
        .post("/import", &json!({"files": r.body["files"]}))
        .await;
    assert_eq!(r.status.as_u16(), 400, "{:?}", r.body);
    let r = locked
        .send(
            locked
                .request(reqwest::Method::GET, "/export?include_secrets=true")
                .header("X-Portico-Operator", "sre-alice"),
        )
        .await
        .expect(200);
    let app = r.body["files"]["apps/merchant-1.json"]["content"]
        .as_str()
        .unwrap();
    assert!(app.contains("s3cr3t-value"), "{app}");
    let audit = locked.get("/audit?limit=50").await.expect(200);
    let exports: Vec<&serde_json::Value> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "tree.export")
        .collect();
    assert_eq!(exports.len(), 2, "{:#?}", audit.body);
    let newest = exports[0];
    assert_eq!(newest["actor"], "sre-alice");
    assert_eq!(newest["detail"]["include_secrets"], true);
    assert!(newest["at"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(exports[1]["detail"]["include_secrets"], false);
}
