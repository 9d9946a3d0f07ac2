//! The gateway's ZooKeeper source and node registration against a real ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_control::zk::{join_path, read_tree, NodeInfo, ZkSource, ZkState};
use portico_control::{ConfigSource, ConfigVersion, Tree};
use portico_testkit::{zkcli, ZooKeeper};
use std::time::Duration;
use tokio::sync::mpsc;
use zookeeper_client as zk;

const WAIT: Duration = Duration::from_secs(30);

async fn client(zk: &ZooKeeper) -> zk::Client {
    zk::Client::connect(&zk.connect_string()).await.unwrap()
}

async fn put(client: &zk::Client, path: &str, data: &[u8]) {
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    if let Some((parent, _)) = path.rsplit_once('/') {
        if !parent.is_empty() {
            portico_control::zk::ensure_path(client, parent, &opts)
                .await
                .unwrap();
        }
    }
    match client.create(path, data, &opts).await {
        Ok(_) => {}
        Err(zk::Error::NodeExists) => {
            client.set_data(path, data, None).await.unwrap();
        }
        Err(e) => panic!("create {path}: {e}"),
    }
}

/// Receives trees until one satisfies `pred`.
async fn recv_until(
    rx: &mut mpsc::Receiver<Tree>,
    what: &str,
    pred: impl Fn(&Tree) -> bool,
) -> Tree {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(tree)) if pred(&tree) => return tree,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("source ended while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

async fn wait_until<F: Fn() -> bool>(what: &str, f: F) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn_source(source: &ZkSource) -> mpsc::Receiver<Tree> {
    let (tx, rx) = mpsc::channel(16);
    let source = source.clone();
    tokio::spawn(async move { source.run(tx).await });
    rx
}

fn doc<'a>(tree: &'a Tree, path: &str) -> Option<&'a str> {
    tree.docs.get(path).map(|b| std::str::from_utf8(b).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_tree_changes_corrupt_docs_and_sandbox() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    put(&c, "/portico/apis/order.get", br#"{"id":"order.get"}"#).await;
    put(
        &c,
        "/portico/clusters/order-svc",
        br#"{"protocol":"http","endpoints":[]}"#,
    )
    .await;
    put(&c, "/portico/ipacl", br#"{"deny":[],"allow":[]}"#).await;
    put(&c, "/portico/descriptors/abc", &[0u8, 1, 2, 255]).await;
    put(
        &c,
        "/portico/sandbox/apis/draft.one",
        br#"{"id":"draft.one"}"#,
    )
    .await;
    put(&c, "/portico/history/order.get/1", br#"{"id":"order.get"}"#).await;
    put(&c, "/portico/nodes/other", b"{}").await;

    let source = ZkSource::new(&zk.connect_string(), "/portico");
    assert_eq!(
        source.describe(),
        format!("zk:{}/portico", zk.connect_string())
    );
    let mut rx = spawn_source(&source);
    let first = recv_until(&mut rx, "first tree", |_| true).await;
    let paths: Vec<&str> = first.docs.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "apis/order.get",
            "clusters/order-svc",
            "descriptors/abc",
            "ipacl"
        ]
    );
    assert_eq!(first.docs["descriptors/abc"], vec![0u8, 1, 2, 255]);
    assert!(first.generation > 0);
    assert_eq!(source.state().state, ZkState::Connected);

    // The registry computes the same generation from the same state.
    let direct = read_tree(&c, "/portico").await.unwrap();
    assert_eq!(direct, first);

    // A change arrives, with a higher generation.
    put(&c, "/portico/switches/order.get", br#"{"degraded":true}"#).await;
    let t = recv_until(&mut rx, "switch", |t| {
        t.docs.contains_key("switches/order.get")
    })
    .await;
    assert!(t.generation > first.generation);
    assert_eq!(doc(&t, "switches/order.get"), Some(r#"{"degraded":true}"#));

    // A corrupt document arrives as its bytes (validation rejects it elsewhere).
    put(&c, "/portico/apis/bad", b"{not json").await;
    let t2 = recv_until(&mut rx, "corrupt doc", |t| t.docs.contains_key("apis/bad")).await;
    assert_eq!(doc(&t2, "apis/bad"), Some("{not json"));
    assert!(t2.generation > t.generation);

    // A deletion arrives and the generation still grows.
    c.delete("/portico/apis/bad", None).await.unwrap();
    let t3 = recv_until(&mut rx, "deletion", |t| !t.docs.contains_key("apis/bad")).await;
    assert!(t3.generation > t2.generation);
    assert_eq!(
        read_tree(&c, "/portico").await.unwrap().generation,
        t3.generation
    );

    // ipacl data change.
    put(&c, "/portico/ipacl", br#"{"deny":["203.0.113.0/24"]}"#).await;
    recv_until(&mut rx, "ipacl", |t| {
        doc(t, "ipacl").is_some_and(|d| d.contains("203.0.113"))
    })
    .await;

    // Sandbox, node and history changes do not produce a new live tree; the next live one
    // does not contain them.
    put(&c, "/portico/sandbox/apis/draft.two", b"{}").await;
    put(&c, "/portico/nodes/other", br#"{"x":1}"#).await;
    put(&c, "/portico/apis/marker", b"{}").await;
    let t4 = recv_until(&mut rx, "marker", |t| t.docs.contains_key("apis/marker")).await;
    assert!(t4
        .docs
        .keys()
        .all(|k| !k.starts_with("sandbox") && !k.starts_with("nodes")));

    // The sandbox tree is the same shape under <root>/sandbox.
    let sandbox = ZkSource::new(&zk.connect_string(), "/portico/sandbox/");
    let mut srx = spawn_source(&sandbox);
    let s = recv_until(&mut srx, "sandbox tree", |_| true).await;
    let paths: Vec<&str> = s.docs.keys().map(String::as_str).collect();
    assert_eq!(paths, ["apis/draft.one", "apis/draft.two"]);
    put(&c, "/portico/sandbox/apps/sb-app", br#"{"secret":"x"}"#).await;
    recv_until(&mut srx, "sandbox app", |t| {
        t.docs.contains_key("apps/sb-app")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_set_with_zkcli_is_reported() {
    let zk = ZooKeeper::start();
    let source = ZkSource::new(&zk.connect_string(), "/portico");
    let mut rx = spawn_source(&source);
    // Root missing: an empty tree.
    let first = recv_until(&mut rx, "empty tree", |_| true).await;
    assert!(first.docs.is_empty());

    let connect = zk.connect_string();
    let body = r#"{"degraded": true, "reason": "db failover", "updated_by": "sre-alice"}"#;
    let out = tokio::task::spawn_blocking(move || {
        for p in ["/portico", "/portico/switches"] {
            zkcli(&connect, &["create", p, ""]);
        }
        zkcli(&connect, &["create", "/portico/switches/order.get", body])
    })
    .await
    .unwrap();
    assert!(out.success, "{out:?}");
    let t = recv_until(&mut rx, "zkcli switch", |t| {
        t.docs.contains_key("switches/order.get")
    })
    .await;
    assert_eq!(doc(&t, "switches/order.get"), Some(body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_at_start_then_restart_and_reconnect() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_default())
        .with_test_writer()
        .try_init();
    let mut zk = ZooKeeper::start();
    {
        let c = client(&zk).await;
        put(&c, "/portico/apis/a", b"{}").await;
    }
    zk.stop();

    let source = ZkSource::new(&zk.connect_string(), "/portico");
    let mut rx = spawn_source(&source);
    // Retrying in the background, with the error visible; no tree yet.
    wait_until("a connect error", || source.state().last_error.is_some()).await;
    assert_eq!(source.state().state, ZkState::Connecting);
    assert!(rx.try_recv().is_err());

    zk.start_again();
    let t = recv_until(&mut rx, "tree after ZooKeeper appears", |_| true).await;
    assert!(t.docs.contains_key("apis/a"));
    assert_eq!(source.state().state, ZkState::Connected);

    // Restart (same port and data): the session survives; a later change is applied.
    zk.restart();
    {
        let c = client(&zk).await;
        put(&c, "/portico/apis/b", b"{}").await;
    }
    recv_until(&mut rx, "change after restart", |t| {
        t.docs.contains_key("apis/b")
    })
    .await;
    wait_until("connected again", || {
        source.state().state == ZkState::Connected
    })
    .await;

    // Killed, a change is made by... nobody can while it is down; after it is back, changes made
    // right after the reconnect arrive (the full re-read covers any missed event).
    zk.kill();
    wait_until("disconnected", || {
        source.state().state != ZkState::Connected
    })
    .await;
    zk.start_again();
    {
        let c = client(&zk).await;
        c.delete("/portico/apis/a", None).await.unwrap();
    }
    recv_until(&mut rx, "deletion after kill", |t| {
        !t.docs.contains_key("apis/a")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registration_and_session_expiry() {
    let mut zk = ZooKeeper::start();
    let source = ZkSource::new(&zk.connect_string(), "/portico")
        .with_session_timeout(Duration::from_secs(2));
    let mut info = NodeInfo::new("gw-1", "127.0.0.1:8080", "127.0.0.1:9180");
    info.sandbox_addr = Some("127.0.0.1:8081".to_owned());
    source.register_node(info);
    let mut rx = spawn_source(&source);
    recv_until(&mut rx, "first tree", |_| true).await;

    let c = client(&zk).await;
    let path = join_path("/portico", "nodes/gw-1");
    let read_node = |c: zk::Client, path: String| async move {
        match c.get_data(&path).await {
            Ok((data, stat)) => Some((serde_json::from_slice::<NodeInfo>(&data).unwrap(), stat)),
            Err(_) => None,
        }
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    let (node, stat) = loop {
        if let Some(found) = read_node(c.clone(), path.clone()).await {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node never registered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(node.node_id, "gw-1");
    assert_eq!(node.sandbox_addr.as_deref(), Some("127.0.0.1:8081"));
    assert_ne!(stat.ephemeral_owner, 0, "registration must be ephemeral");

    // Applied versions are written.
    let v = ConfigVersion {
        generation: 42,
        digest: "0123456789abcdef".to_owned(),
    };
    source.set_applied(&v);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (n, _) = read_node(c.clone(), path.clone()).await.unwrap();
        if n.config_version == v {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "applied version never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(c);

    // Pause ZooKeeper past the session timeout: the session expires; a new one is made, the node
    // re-registered with the same applied version, and later changes are applied.
    let session_before = source.state().session_id.clone();
    zk.pause();
    tokio::time::sleep(Duration::from_secs(5)).await;
    zk.resume();
    wait_until("a new session", || {
        source.state().sessions >= 2 && source.state().state == ZkState::Connected
    })
    .await;
    assert_ne!(source.state().session_id, session_before);

    let c = client(&zk).await;
    let own = source.state().session_id.clone().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some((n, stat)) = read_node(c.clone(), path.clone()).await {
            if format!("{:#x}", stat.ephemeral_owner) == own {
                assert_eq!(n.config_version, v);
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node not re-registered on the new session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    put(&c, "/portico/switches/x", b"{}").await;
    recv_until(&mut rx, "change after expiry", |t| {
        t.docs.contains_key("switches/x")
    })
    .await;

    // Deregistration removes the node.
    source.deregister_node();
    let deadline = tokio::time::Instant::now() + WAIT;
    while read_node(c.clone(), path.clone()).await.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "node not removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints the time from a ZooKeeper write to the tree reaching the receiver (not an assertion:
/// `cargo test -p portico-control --test zk_source -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn push_latency_report() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    put(&c, "/portico/switches/s", b"{}").await;
    let source = ZkSource::new(&zk.connect_string(), "/portico");
    let mut rx = spawn_source(&source);
    recv_until(&mut rx, "first tree", |_| true).await;
    let mut samples = Vec::new();
    for i in 0..300u32 {
        let body = format!("{{\"degraded\":{},\"n\":{i}}}", i % 2 == 0);
        let start = std::time::Instant::now();
        c.set_data("/portico/switches/s", body.as_bytes(), None)
            .await
            .unwrap();
        recv_until(&mut rx, "change", |t| {
            doc(t, "switches/s") == Some(body.as_str())
        })
        .await;
        samples.push(start.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "write→tree latency over {} writes: p50 {:?} p99 {:?} max {:?}",
        samples.len(),
        p(0.5),
        p(0.99),
        samples[samples.len() - 1]
    );
}
