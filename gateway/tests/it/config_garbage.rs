//! Over real processes: configuration can never panic or stall the gateway (docs/ARCHITECTURE.md,
//! "Configuration"). A bad document (written with ZooKeeper's own CLI, or lying in the tree at a
//! restart) is rejected alone and listed in `/status` with its path and reason; later changes keep
//! applying; a gateway (re)started with garbage in its tree boots and serves the rest.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};
use std::time::Duration;
use zookeeper_client as zk;

const ROOT: &str = "/portico";

/// The rewrite that panicked the control thread: a `%` followed by a multi-byte character.
const BAD_REWRITE: &str = "/x/%€{id}";

/// A small synchronous ZooKeeper client for seeding the tree and reading it back.
struct ZkTree {
    rt: tokio::runtime::Runtime,
    client: zk::Client,
}

impl ZkTree {
    fn connect(connect: &str) -> ZkTree {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // A long session: with the default (a few seconds) a loaded 2-core machine made a
        // `create` give up after 2.4 s; a test's seeding waits for ZooKeeper, not a deadline.
        let client = rt
            .block_on(
                zk::Client::connector()
                    .with_session_timeout(Duration::from_secs(30))
                    .connect(connect),
            )
            .unwrap();
        ZkTree { rt, client }
    }

    /// Creates or replaces `<root>/<rel>` with `data`, creating parents.
    fn put_bytes(&self, rel: &str, data: &[u8]) {
        let path = format!("{ROOT}/{rel}");
        self.rt.block_on(async {
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            let mut parent = String::new();
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            for part in &parts[..parts.len() - 1] {
                parent.push('/');
                parent.push_str(part);
                match self.client.create(&parent, &[], &opts).await {
                    Ok(_) | Err(zk::Error::NodeExists) => {}
                    Err(e) => panic!("create {parent}: {e}"),
                }
            }
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

    fn get_bytes(&self, rel: &str) -> Option<Vec<u8>> {
        let path = format!("{ROOT}/{rel}");
        self.rt
            .block_on(async { self.client.get_data(&path).await.ok().map(|(d, _)| d) })
    }
}

fn cluster(backend: &BackendProcess) -> Value {
    json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]})
}

fn order_get() -> Value {
    json!({
        "id": "order.get",
        "http": {"method": "GET", "path": "/v1/orders/{order_id}"},
        "backend": {"cluster": "demo-http", "timeout_ms": 2000, "http": {"path": "/orders/{order_id}"}},
        "auth": "signature"
    })
}

/// An API whose rewrite is `rewrite`.
fn api_with_rewrite(id: &str, path: &str, rewrite: &str) -> Value {
    json!({
        "id": id,
        "http": {"method": "GET", "path": path},
        "backend": {"cluster": "demo-http", "http": {"path": rewrite}},
        "auth": "none"
    })
}

fn app() -> Value {
    json!({"secret": SECRET, "apis": ["*"]})
}

fn seed_zk(tree: &ZkTree, backend: &BackendProcess) {
    tree.put("clusters/demo-http", &cluster(backend));
    tree.put("apps/merchant-1", &app());
    tree.put("apis/order.get", &order_get());
    tree.put("switches/order.get", &json!({"degraded": false}));
}

fn start_zk_gateway(zk: &ZooKeeper, snapshot: &std::path::Path) -> GatewayProcess {
    GatewayProcess::start_args(vec![
        "--zk".into(),
        zk.connect_string(),
        "--zk-root".into(),
        ROOT.into(),
        "--snapshot-dir".into(),
        snapshot.display().to_string(),
        "--node-id".into(),
        "gw-garbage".into(),
        "--zk-session-timeout-ms".into(),
        "4000".into(),
    ])
}

fn order_status(gw: &GatewayProcess) -> (u16, String) {
    let resp = signed(&client(), "GET", &gw.url("/v1/orders/1"), KEY, SECRET, None)
        .send()
        .unwrap();
    let (s, c, _) = code_of(resp);
    (s, c)
}

/// The rejected documents `/status` lists: path → reason.
fn rejected(gw: &GatewayProcess) -> Vec<(String, String)> {
    gw.status()["rejected_documents"]
        .as_array()
        .expect("rejected_documents")
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap_or_default().to_owned(),
                r["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn reason_of<'a>(list: &'a [(String, String)], path: &str) -> &'a str {
    list.iter()
        .find(|(p, _)| p == path)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("{path} is not among the rejected documents: {list:#?}"))
}

/// Every reason is a real one (the field at fault), never a check that panicked.
fn assert_plain_reasons(list: &[(String, String)]) {
    for (path, reason) in list {
        assert!(!reason.is_empty(), "{path}: empty reason");
        assert!(
            !reason.starts_with("internal error"),
            "{path}: a check panicked: {reason}"
        );
    }
}

#[test]
fn a_non_ascii_rewrite_written_with_zkcli_is_rejected_alone_and_switches_still_apply() {
    let zk = ZooKeeper::start();
    let backend = BackendProcess::start_http().unwrap();
    let tree = ZkTree::connect(&zk.connect_string());
    seed_zk(&tree, &backend);
    let snap = tempfile::tempdir().unwrap();
    let gw = start_zk_gateway(&zk, &snap.path().join("lkg"));
    assert_eq!(order_status(&gw).0, 200);

    // The document of the incident, written with ZooKeeper's own CLI.
    let bad = api_with_rewrite("web.bad", "/v1/bad/{id}", BAD_REWRITE).to_string();
    let out = zkcli_utf8(
        &zk.connect_string(),
        &["create", "/portico/apis/web.bad", &bad],
    );
    assert!(out.success, "{out:?}");
    let stored = tree.get_bytes("apis/web.bad").expect("web.bad written");
    assert!(
        String::from_utf8_lossy(&stored).contains(BAD_REWRITE),
        "zkCli stored {:?}",
        String::from_utf8_lossy(&stored)
    );
    assert!(wait_until(Duration::from_secs(10), || rejected(&gw)
        .iter()
        .any(|(p, _)| p == "apis/web.bad")));
    let list = rejected(&gw);
    let reason = reason_of(&list, "apis/web.bad");
    assert!(
        reason.starts_with("backend.http.path:") && reason.contains("percent-encoding"),
        "{reason}"
    );
    assert_plain_reasons(&list);

    // The SRE's switch, flipped on and back off with zkCli, applies both times.
    for (degraded, want) in [(true, (503, "API_DEGRADED")), (false, (200, ""))] {
        let doc = json!({"degraded": degraded, "reason": "zkcli drill"}).to_string();
        let out = zkcli_utf8(
            &zk.connect_string(),
            &["set", "/portico/switches/order.get", &doc],
        );
        assert!(out.success, "{out:?}");
        assert!(
            wait_until(Duration::from_secs(10), || {
                let (s, c) = order_status(&gw);
                s == want.0 && (want.1.is_empty() || c == want.1)
            }),
            "switch degraded={degraded} did not apply: {:?}",
            order_status(&gw)
        );
    }
    // The bad API is not served; the gateway still is.
    let resp = client().get(gw.url("/v1/bad/1")).send().unwrap();
    assert_eq!(resp.status(), 404);
    assert!(rejected(&gw).iter().any(|(p, _)| p == "apis/web.bad"));
}

/// Garbage documents for a tree: (tree path, bytes). `big` is the size of the large one.
fn garbage(big: usize) -> Vec<(String, Vec<u8>)> {
    let not_protobuf = b"\xff\xfe this is not a FileDescriptorSet \x00\x01".to_vec();
    let long = api_with_rewrite("x.long", &"/a".repeat(10_000), "/x").to_string();
    let mut large = br#"{"secret": "short", "name": ""#.to_vec();
    large.resize(big - 2, b'x');
    large.extend_from_slice(br#""}"#);
    vec![
        (
            "apis/web.bad".to_owned(),
            api_with_rewrite("web.bad", "/v1/bad/{id}", BAD_REWRITE)
                .to_string()
                .into_bytes(),
        ),
        (
            "apis/x.utf8".to_owned(),
            b"{\"id\": \"x.utf8\", \"http\": \xff\xfe\xfd}".to_vec(),
        ),
        (
            "apis/x.truncated".to_owned(),
            br#"{"id": "x.truncated", "http": {"method": "GET", "pa"#.to_vec(),
        ),
        ("apps/x.big".to_owned(), large),
        ("apis/x.long".to_owned(), long.into_bytes()),
        (
            // Named by its SHA-256, as a descriptor must be, so that it is decoded.
            format!(
                "descriptors/{}",
                portico_control::sign::body_digest(&not_protobuf)
            ),
            not_protobuf,
        ),
        ("apis/odd name €%{}".to_owned(), b"{}".to_vec()),
    ]
}

fn assert_serves_and_lists(gw: &GatewayProcess, garbage: &[(String, Vec<u8>)]) {
    assert_eq!(order_status(gw).0, 200, "the good API is not served");
    let list = rejected(gw);
    for (path, _) in garbage {
        let reason = reason_of(&list, path);
        assert!(!reason.is_empty(), "{path}");
    }
    assert_plain_reasons(&list);
    assert!(reason_of(&list, "apis/x.long").contains("longer than"));
    assert!(reason_of(&list, "apps/x.big").starts_with("secret:"));
    let descriptor = garbage
        .iter()
        .find(|(p, _)| p.starts_with("descriptors/"))
        .unwrap();
    assert!(reason_of(&list, &descriptor.0).contains("FileDescriptorSet"));
}

#[test]
fn a_gateway_restarted_with_garbage_in_zookeeper_boots_and_serves_the_rest() {
    let zk = ZooKeeper::start();
    let backend = BackendProcess::start_http().unwrap();
    let tree = ZkTree::connect(&zk.connect_string());
    seed_zk(&tree, &backend);
    let snap = tempfile::tempdir().unwrap();
    let lkg = snap.path().join("lkg");
    let gw = start_zk_gateway(&zk, &lkg);
    assert_eq!(order_status(&gw).0, 200);
    // ZooKeeper refuses a node of 1 MiB or more (jute.maxbuffer): just under it.
    let junk = garbage(1_000_000);
    for (path, bytes) in &junk {
        tree.put_bytes(path, bytes);
    }
    assert!(wait_until(Duration::from_secs(15), || {
        let list = rejected(&gw);
        junk.iter().all(|(p, _)| list.iter().any(|(q, _)| q == p))
    }));
    assert_serves_and_lists(&gw, &junk);
    drop(gw);

    // Restarted with all of it in the tree (and in front of its disk snapshot).
    let gw = start_zk_gateway(&zk, &lkg);
    assert!(wait_until(Duration::from_secs(15), || {
        let list = rejected(&gw);
        junk.iter().all(|(p, _)| list.iter().any(|(q, _)| q == p))
    }));
    assert_serves_and_lists(&gw, &junk);
    // And a change still applies.
    tree.put("switches/order.get", &json!({"degraded": true}));
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw)
        == (503, "API_DEGRADED".into())));
}

#[test]
fn a_gateway_started_on_a_directory_with_garbage_boots_and_serves_the_rest() {
    let backend = BackendProcess::start_http().unwrap();
    let tree = ConfigTree::new();
    tree.put("clusters/demo-http", &cluster(&backend));
    tree.put("apps/merchant-1", &app());
    tree.put("apis/order.get", &order_get());
    let junk = garbage(1 << 20);
    for (path, bytes) in &junk {
        write_document(tree.path(), path, bytes);
    }
    // Things that are no documents at all at document paths.
    std::fs::create_dir_all(tree.path().join("apis/a.folder.json")).unwrap();
    std::os::unix::fs::symlink("nowhere", tree.path().join("apis/dangling.json")).unwrap();
    let not_utf8 = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"x\xff.json");
    std::fs::write(tree.path().join("apis").join(not_utf8), b"{}").unwrap();

    let gw = GatewayProcess::start(tree.path(), &[]);
    assert_serves_and_lists(&gw, &junk);
    let list = rejected(&gw);
    assert!(reason_of(&list, "apis/a.folder").contains("not a regular file"));
    assert!(reason_of(&list, "apis/dangling").contains("cannot be read"));
    assert!(reason_of(&list, "apis/x\u{fffd}").contains("not UTF-8"));
    drop(gw);

    // Restarted on the same tree; then a change applies beside the garbage.
    let gw = GatewayProcess::start(tree.path(), &[]);
    assert_serves_and_lists(&gw, &junk);
    let digest = gw.digest();
    tree.put("switches/order.get", &json!({"degraded": true}));
    assert!(gw.wait_for_new_config(&digest));
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw)
        == (503, "API_DEGRADED".into())));
}

#[test]
fn a_node_the_gateway_may_not_read_is_rejected_alone_and_never_stalls_the_tree() {
    let zk = ZooKeeper::start();
    let backend = BackendProcess::start_http().unwrap();
    let tree = ZkTree::connect(&zk.connect_string());
    seed_zk(&tree, &backend);
    let snap = tempfile::tempdir().unwrap();
    let gw = start_zk_gateway(&zk, &snap.path().join("lkg"));
    assert_eq!(order_status(&gw).0, 200);

    // Someone creates a document only they may read (a digest ACL the gateway lacks).
    tree.rt.block_on(async {
        let owner = zk::Client::connector()
            .with_auth("digest", b"someone:secret")
            .connect(&zk.connect_string())
            .await
            .unwrap();
        let private = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
        owner
            .create("/portico/apps/hidden", b"{}", &private)
            .await
            .unwrap();
    });
    // ZooKeeper may not even tell the gateway about it (no READ, no event); either way the
    // rest of the tree keeps applying.
    tree.put("switches/order.get", &json!({"degraded": true}));
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw)
        == (503, "API_DEGRADED".into())));
    // A restart reads the whole tree: the hidden node is rejected alone, with why, and
    // changes keep applying.
    drop(gw);
    let gw = start_zk_gateway(&zk, &snap.path().join("lkg"));
    assert!(wait_until(Duration::from_secs(10), || rejected(&gw)
        .iter()
        .any(|(p, _)| p == "apps/hidden")));
    let list = rejected(&gw);
    assert!(
        reason_of(&list, "apps/hidden").contains("not authorized"),
        "{list:?}"
    );
    tree.put("switches/order.get", &json!({"degraded": false}));
    assert!(wait_until(Duration::from_secs(10), || order_status(&gw).0 == 200));
    assert!(rejected(&gw).iter().any(|(p, _)| p == "apps/hidden"));
    assert!(gw.status()["config_source"]
        .as_str()
        .is_some_and(|s| s.starts_with("zk:")));
}
