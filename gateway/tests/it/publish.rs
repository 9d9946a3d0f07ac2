//! The publishing workflow end to end over real processes: a real ZooKeeper, the registry,
//! the demo backend and a gateway with a sandbox listener. A backend team uploads its .proto,
//! calls the draft on the sandbox listener, publishes, and the API answers on the live
//! listener without a restart; a rollback and a switch through the registry apply too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = REGISTRY_TOKEN;

/// `--zk-auth-file FILE` for a locked ZooKeeper (the file `which` picks), nothing otherwise.
fn zk_auth(
    zk: &ZooKeeper,
    which: impl Fn(&portico_testkit::ZkCredentials) -> PathBuf,
) -> Vec<String> {
    zk.credentials()
        .map(|c| vec!["--zk-auth-file".into(), which(c).display().to_string()])
        .unwrap_or_default()
}

fn proto_files() -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../protos");
    let mut files = serde_json::Map::new();
    for rel in [
        "demo/order.proto",
        "google/api/annotations.proto",
        "google/api/http.proto",
    ] {
        files.insert(
            rel.into(),
            Value::String(std::fs::read_to_string(root.join(rel)).unwrap()),
        );
    }
    Value::Object(files)
}

#[test]
fn upload_try_in_sandbox_publish_roll_back_and_switch() {
    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http_grpc().unwrap();
    let registry = Registry::start(&zk, "test-team");
    let grpc = backend.grpc.unwrap().to_string();

    // Clusters and apps, in both trees.
    for env in ["", "/sandbox"] {
        let (s, v) = registry.call(
            "PUT",
            &format!("{env}/clusters/demo-grpc"),
            Some(json!({"protocol": "grpc", "endpoints": [{"addr": grpc}]})),
        );
        assert!(s == 200 || s == 201, "{s} {v}");
    }
    let (s, v) = registry.call(
        "POST",
        "/sandbox/apps",
        Some(json!({"app_key": "team-sandbox", "secret": "sandbox-secret-1", "apis": ["*"]})),
    );
    assert!(s == 200 || s == 201, "{s} {v}");
    let (s, v) = registry.call(
        "POST",
        "/apps",
        Some(json!({"app_key": KEY, "secret": SECRET, "apis": ["*"]})),
    );
    assert!(s == 200 || s == 201, "{s} {v}");

    let snap = tempfile::tempdir().unwrap();
    let sandbox: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let gw = GatewayProcess::start_args(
        [
            zk_auth(&zk, |c| c.gateway_file()),
            vec![
                "--zk".into(),
                zk.connect_string(),
                "--snapshot-dir".into(),
                snap.path().join("lkg").display().to_string(),
                "--sandbox-listen".into(),
                sandbox.to_string(),
                "--node-id".into(),
                "gw-publish".into(),
            ],
        ]
        .concat(),
    );

    // Upload the .proto: one draft per annotated RPC.
    let (s, v) = registry.call(
        "POST",
        "/protos",
        Some(json!({"files": proto_files(), "cluster": "demo-grpc"})),
    );
    assert!(s == 200 || s == 201, "{s} {v}");
    let drafts: Vec<String> = v["drafts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(drafts.contains(&"order.getorder".to_owned()), "{v}");

    // The draft answers on the sandbox listener, with a sandbox app, and not on the live one.
    let c = client();
    let sandbox_url = format!("http://{sandbox}/v1/orders/42");
    assert!(
        wait_until(Duration::from_secs(10), || {
            signed(
                &c,
                "GET",
                &sandbox_url,
                "team-sandbox",
                "sandbox-secret-1",
                None,
            )
            .send()
            .is_ok_and(|r| r.status() == 200)
        }),
        "the draft never answered on the sandbox listener"
    );
    let (s, code, _) = code_of(
        signed(&c, "GET", &gw.url("/v1/orders/42"), KEY, SECRET, None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, code.as_str()), (404, "API_NOT_FOUND"));

    // Publish: live on the gateway without a restart.
    let started = Instant::now();
    let (s, v) = registry.call(
        "POST",
        "/apis/order.getorder/publish",
        Some(json!({"comment": "first release"})),
    );
    assert!(s == 200 || s == 201, "{s} {v}");
    assert!(
        wait_until(Duration::from_secs(10), || {
            signed(&c, "GET", &gw.url("/v1/orders/42"), KEY, SECRET, None)
                .send()
                .is_ok_and(|r| r.status() == 200)
        }),
        "the published API never answered on the live listener"
    );
    eprintln!("publish → live: {:?}", started.elapsed());
    let v: Value = signed(&c, "GET", &gw.url("/v1/orders/42"), KEY, SECRET, None)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["orderId"], "42");

    // Version 2 changes the path; rolling back to version 1 restores it.
    let (s, mut draft) = registry.call("GET", "/sandbox/apis/order.getorder", None);
    assert_eq!(s, 200);
    draft["http"]["path"] = json!("/v2/orders/{order_id}");
    let (s, v) = registry.call("PUT", "/sandbox/apis/order.getorder", Some(draft));
    assert!(s == 200 || s == 201, "{s} {v}");
    let (s, v) = registry.call("POST", "/apis/order.getorder/publish", None);
    assert!(s == 200 || s == 201, "{s} {v}");
    assert!(wait_until(Duration::from_secs(10), || {
        signed(&c, "GET", &gw.url("/v2/orders/1"), KEY, SECRET, None)
            .send()
            .is_ok_and(|r| r.status() == 200)
    }));
    let (s, v) = registry.call(
        "POST",
        "/apis/order.getorder/rollback",
        Some(json!({"version": 1})),
    );
    assert!(s == 200 || s == 201, "{s} {v}");
    assert!(wait_until(Duration::from_secs(10), || {
        signed(&c, "GET", &gw.url("/v1/orders/1"), KEY, SECRET, None)
            .send()
            .is_ok_and(|r| r.status() == 200)
    }));
    let (s, v) = registry.call("GET", "/apis/order.getorder/history", None);
    assert_eq!(s, 200);
    assert!(v["versions"].as_array().unwrap().len() >= 3, "{v}");

    // An SRE degrades it through the registry; the gateway answers the fallback.
    let (s, v) = registry.call("PUT", "/switches/order.getorder", Some(json!({
        "degraded": true, "reason": "drill", "fallback": {"status": 200, "body": {"degraded": true}}
    })));
    assert!(s == 200 || s == 201, "{s} {v}");
    assert!(wait_until(Duration::from_secs(10), || {
        signed(&c, "GET", &gw.url("/v1/orders/1"), KEY, SECRET, None)
            .send()
            .is_ok_and(|r| {
                r.json::<Value>()
                    .is_ok_and(|v| v == json!({"degraded": true}))
            })
    }));

    // The registry sees the node with the current configuration.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (_, v) = registry.call("GET", "/nodes", None);
            v.to_string().contains("gw-publish") && v.to_string().contains("\"in_sync\":true")
        }),
        "{}",
        registry.call("GET", "/nodes", None).1
    );
    // Every change is in the audit log.
    let (_, audit) = registry.call("GET", "/audit", None);
    let text = audit.to_string();
    assert!(text.contains("test-team"), "{text}");
}

/// `portico import tree` loads a standalone tree (the example up.sh starts from) into ZooKeeper
/// through the registry, and a ZooKeeper-mode gateway serves it.
#[test]
fn a_standalone_tree_imports_into_zookeeper() {
    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http_grpc().unwrap();
    let registry = Registry::start(&zk, "test-team");
    // The example tree, pointed at this test's backend.
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/examples/standalone");
    let tree = tempfile::tempdir().unwrap();
    copy_dir(&example, tree.path());
    for (file, addr) in [
        ("clusters/demo-http.json", backend.http),
        ("clusters/demo-grpc.json", backend.grpc.unwrap()),
    ] {
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(tree.path().join(file)).unwrap()).unwrap();
        v["endpoints"] = json!([{"addr": addr.to_string()}]);
        std::fs::write(tree.path().join(file), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let cli = sibling_bin("portico");
    let out = Command::new(&cli)
        .args([
            "--registry",
            registry.url.trim_end_matches("/api/v1"),
            "import",
            "tree",
        ])
        .arg(tree.path())
        .env("PORTICO_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported"));

    let snap = tempfile::tempdir().unwrap();
    let gw = GatewayProcess::start_args(
        [
            zk_auth(&zk, |c| c.gateway_file()),
            vec![
                "--zk".into(),
                zk.connect_string(),
                "--snapshot-dir".into(),
                snap.path().join("lkg").display().to_string(),
            ],
        ]
        .concat(),
    );
    let c = client();
    assert!(wait_until(Duration::from_secs(10), || c
        .get(gw.url("/grpc/v1/orders/42"))
        .send()
        .is_ok_and(|r| r.status() == 200)));
    assert_eq!(c.get(gw.url("/v1/health")).send().unwrap().status(), 200);
    assert!(
        gw.status()["rejected_documents"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{}",
        gw.status()
    );

    // A tree with a broken document is refused whole, naming it.
    std::fs::write(
        tree.path().join("apis/broken.json"),
        b"{\"id\": \"broken\"}",
    )
    .unwrap();
    let out = Command::new(&cli)
        .args([
            "--registry",
            registry.url.trim_end_matches("/api/v1"),
            "import",
            "tree",
        ])
        .arg(tree.path())
        .env("PORTICO_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("apis/broken"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
