//! The `portico` CLI against a real registry and ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{cli_outcome, portico_cli, registry};
use portico_testkit::ZooKeeper;
use serde_json::json;
use std::path::Path;

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn portico(registry_base: &str, args: &[&str]) -> Run {
    let out = tokio::process::Command::from(portico_cli(registry_base, "cli-tester", args))
        .output()
        .await
        .unwrap();
    let (ok, stdout, stderr) = cli_outcome(out);
    Run { ok, stdout, stderr }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_prints_the_contract_vectors() {
    let run = portico(
        "http://127.0.0.1:1",
        &[
            "sign",
            "--key",
            "merchant-1",
            "--secret",
            "s3cr3t-value",
            "--timestamp",
            "1796000000000",
            "--nonce",
            "n0nce-0001",
            "GET",
            "http://gw:8080/v1/orders/42?b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93",
        ],
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "X-Portico-AppKey: merchant-1\nX-Portico-Timestamp: 1796000000000\nX-Portico-Nonce: n0nce-0001\n\
         X-Portico-Signature: 769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73\n"
    );
    let run = portico(
        "http://127.0.0.1:1",
        &[
            "sign",
            "--key",
            "merchant-1",
            "--secret",
            "s3cr3t-value",
            "--timestamp",
            "1796000000000",
            "--nonce",
            "n0nce-0002",
            "--body",
            r#"{"item":"book","qty":2}"#,
            "POST",
            "/v1/orders",
        ],
    )
    .await;
    assert!(
        run.stdout
            .contains("b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107"),
        "{}",
        run.stdout
    );
    // Bad input is a clear error.
    let run = portico(
        "http://127.0.0.1:1",
        &[
            "sign", "--key", "k", "--secret", "s", "--nonce", "bad!", "GET", "/x",
        ],
    )
    .await;
    assert!(!run.ok);
    assert!(run.stderr.contains("--nonce"), "{}", run.stderr);
}

/// A tiny server that checks the signature of whatever it receives.
async fn verifying_server() -> String {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode, Uri};
    async fn check(
        method: axum::http::Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> (StatusCode, String) {
        let h = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let sts = portico_control::sign::string_to_sign(
            method.as_str(),
            uri.path(),
            uri.query(),
            &h("x-portico-appkey"),
            &h("x-portico-timestamp"),
            &h("x-portico-nonce"),
            &body,
        );
        if portico_control::sign::verify(b"s3cr3t-value", &sts, &h("x-portico-signature")) {
            (
                StatusCode::OK,
                format!(
                    "{{\"ok\":true,\"body\":{}}}",
                    String::from_utf8_lossy(&body)
                ),
            )
        } else {
            (
                StatusCode::UNAUTHORIZED,
                "{\"code\":\"SIGNATURE_INVALID\"}".to_owned(),
            )
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(check)).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_sends_a_signed_request() {
    let server = verifying_server().await;
    let url = format!("{server}/v1/orders?b=2&a=x%20y");
    let run = portico(
        "http://127.0.0.1:1",
        &[
            "call",
            "--key",
            "merchant-1",
            "--secret",
            "s3cr3t-value",
            "--body",
            r#"{"qty":2}"#,
            "POST",
            &url,
        ],
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    assert!(run.stdout.starts_with("HTTP 200 OK\n"), "{}", run.stdout);
    assert!(run.stdout.contains(r#""body":{"qty":2}"#), "{}", run.stdout);
    let run = portico(
        "http://127.0.0.1:1",
        &[
            "call",
            "--fail",
            "--key",
            "merchant-1",
            "--secret",
            "wrong-secret",
            "GET",
            &url,
        ],
    )
    .await;
    assert!(!run.ok);
    assert!(run.stdout.starts_with("HTTP 401"), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_publish_switch_status_history_export() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let cluster = json!({"protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:50051"}]});
    reg.put("/clusters/order-svc", &cluster).await.expect(201);
    reg.put("/sandbox/clusters/order-svc", &cluster)
        .await
        .expect(201);
    let base = reg.base.clone();

    // Import the demo proto, naming one API, and publish it.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../protos");
    let file = root.join("demo/order.proto");
    let run = portico(
        &base,
        &[
            "import",
            "proto",
            "--cluster",
            "order-svc",
            "--root",
            root.to_str().unwrap(),
            "--service",
            "demo.order.v1.OrderService",
            "--id",
            "demo.order.v1.OrderService/GetOrder=order.get",
            file.to_str().unwrap(),
        ],
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    assert!(run.stdout.contains("draft order.get"), "{}", run.stdout);
    let run = portico(
        &base,
        &["publish", "order.get", "--comment", "from the CLI"],
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "published order.get version 1");
    // The draft again, unchanged: nothing published, said so (tests/it/publish_unchanged.rs).
    let run = portico(&base, &["publish", "order.get"]).await;
    assert!(
        run.ok && run.stdout.contains("order.get unchanged"),
        "{}",
        run.stdout
    );
    let run = portico(&base, &["rollback", "order.get", "1"]).await;
    assert!(
        run.ok && run.stdout.contains("now version 2"),
        "{} {}",
        run.stdout,
        run.stderr
    );
    let run = portico(&base, &["history", "order.get"]).await;
    assert!(run.ok);
    assert_eq!(run.stdout.lines().count(), 3, "{}", run.stdout);
    // A clear error for a draft that does not exist.
    let run = portico(&base, &["publish", "no.such"]).await;
    assert!(!run.ok);
    assert!(
        run.stderr.contains("404 NOT_FOUND") && run.stderr.contains("draft"),
        "{}",
        run.stderr
    );

    // Switch on with a fallback, then off.
    let run = portico(&base, &["switch", "order.get", "on"]).await;
    assert!(!run.ok && run.stderr.contains("--reason"), "{}", run.stderr);
    let run = portico(
        &base,
        &[
            "switch",
            "order.get",
            "on",
            "--reason",
            "db failover",
            "--fallback-status",
            "200",
            "--fallback-body",
            r#"{"items":[]}"#,
            "--fallback-header",
            "X-Degraded: 1",
        ],
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout.contains("ON") && run.stdout.contains("cli-tester"),
        "{}",
        run.stdout
    );
    let sw = reg.get("/switches/order.get").await.expect(200);
    assert_eq!(sw.body["degraded"], true);
    assert_eq!(sw.body["reason"], "db failover");
    assert_eq!(sw.body["fallback"]["headers"]["X-Degraded"], "1");
    assert_eq!(sw.body["fallback"]["body"], json!({"items": []}));
    let run = portico(&base, &["switch", "order.get", "off"]).await;
    assert!(run.ok && run.stdout.contains("OFF"), "{}", run.stderr);

    // Status shows a registered gateway.
    let run = portico(&base, &["status"]).await;
    assert!(
        run.ok && run.stdout.contains("no gateway nodes"),
        "{}",
        run.stdout
    );
    let source = portico_control::zk::ZkSource::new(&zk.connect_string(), zk.root())
        .with_auth(crate::common::gateway_auth(&zk));
    source.register_node(portico_control::zk::NodeInfo::new(
        "gw-cli",
        "127.0.0.1:8080",
        "127.0.0.1:9180",
    ));
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let s = source.clone();
    tokio::spawn(async move { portico_control::ConfigSource::run(&s, tx).await });
    rx.recv().await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let run = portico(&base, &["status"]).await;
        assert!(run.ok, "{}", run.stderr);
        if run.stdout.contains("gw-cli") {
            assert!(run.stdout.contains("127.0.0.1:9180"), "{}", run.stdout);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gw-cli never shown: {}",
            run.stdout
        );
    }

    // Export: a directory a standalone gateway can load.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tree");
    let run = portico(&base, &["export", out.to_str().unwrap()]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(out.join("apis/order.get.json").is_file());
    assert!(out.join("clusters/order-svc.json").is_file());
    assert!(out.join("switches/order.get.json").is_file());
    let descriptors: Vec<_> = std::fs::read_dir(out.join("descriptors"))
        .unwrap()
        .collect();
    assert_eq!(descriptors.len(), 1);
    let tree = portico_control::DirSource::read_tree(&out).unwrap();
    let snapshot = portico_control::build_snapshot(&tree, None);
    assert!(snapshot.rejected.is_empty(), "{:?}", snapshot.rejected);
    assert!(snapshot.apis.contains_key("order.get"));
    // Refuses a non-empty directory without --force.
    let run = portico(&base, &["export", out.to_str().unwrap()]).await;
    assert!(!run.ok && run.stderr.contains("--force"), "{}", run.stderr);

    // Generic request, and a wrong token.
    let run = portico(&base, &["request", "GET", "/apis/order.get"]).await;
    assert!(
        run.ok && run.stdout.contains("\"version\": 2"),
        "{}",
        run.stdout
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_portico"))
        .args([
            "--registry",
            base.trim_end_matches("/api/v1"),
            "--token",
            "wrong",
            "status",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("401 UNAUTHENTICATED") && stderr.contains("--token"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_binary_needs_a_token_and_serves() {
    let bin = env!("CARGO_BIN_EXE_portico-registry");
    let out = tokio::process::Command::new(bin)
        .args(["--zk", "127.0.0.1:1", "--listen", "127.0.0.1:0"])
        .env_remove("PORTICO_ADMIN_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no admin token"));

    let zk = ZooKeeper::on_shared_locked();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "file-token\n").unwrap();
    let port = portico_testkit::free_port();
    let mut child = tokio::process::Command::new(bin)
        .args([
            "--zk",
            &zk.connect_string(),
            "--zk-root",
            zk.root(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--admin-token-file")
        .arg(&token_file)
        .arg("--zk-auth-file")
        .arg(zk.credentials().unwrap().registry_file())
        .env_remove("PORTICO_ADMIN_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}/api/v1");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the registry never became healthy"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = http
        .get(format!("{base}/apps"))
        .bearer_auth("file-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let r = http.get(format!("{base}/apps")).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    child.kill().await.unwrap();
}

/// The columns of a table's line: where each cell starts (a cell is text between runs of two
/// or more spaces).
fn cell_starts(line: &str) -> Vec<usize> {
    let chars: Vec<char> = line.chars().collect();
    let mut starts = Vec::new();
    for i in 0..chars.len() {
        let after_gap = i == 0 || (i >= 2 && chars[i - 1] == ' ' && chars[i - 2] == ' ');
        if chars[i] != ' ' && after_gap {
            starts.push(i);
        }
    }
    starts
}

/// `publish --wait` and `switch --wait` wait until every live gateway applied the change: a
/// real gateway that applies it, then the same gateway paused (SIGSTOP, well within its 6 s
/// ZooKeeper session, so still registered), named in the error with exit status 3. The
/// `history` and `status` tables are aligned (docs/operations/registry.md, "Waiting for the gateways").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_and_publish_wait_for_every_live_gateway() {
    use crate::common::procs::{in_sync, spawn_gateway, wait_registered};
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let base = reg.base.clone();
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}]});
    reg.put("/clusters/web", &cluster).await.expect(201);
    reg.put("/sandbox/clusters/web", &cluster).await.expect(201);
    let api = json!({"id": "web.wait", "http": {"method": "GET", "path": "/wait"},
                     "backend": {"cluster": "web", "timeout_ms": 1000, "http": {}}});
    reg.post("/sandbox/apis", &api).await.expect(201);

    let work = tempfile::tempdir().unwrap();
    let mut gw = spawn_gateway(&zk, "gw-wait", work.path(), |_| {});
    let b = base.trim_end_matches("/api/v1").to_owned();
    let registered = tokio::task::spawn_blocking(move || {
        wait_registered(&b, std::time::Duration::from_secs(30), in_sync("gw-wait"))
    })
    .await
    .unwrap();
    gw.proc.assert_alive();
    assert!(
        registered,
        "gw-wait never in sync: {:#}\n{}",
        reg.get("/nodes").await.body,
        gw.proc.tail()
    );

    let exit = |args: &[&str]| {
        let cmd = portico_cli(&base, "cli-tester", args);
        async move {
            let out = tokio::process::Command::from(cmd).output().await.unwrap();
            let code = out.status.code();
            let (_, stdout, stderr) = cli_outcome(out);
            (code, stdout, stderr)
        }
    };
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = exit(&["publish", "web.wait", "--wait=20"]).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("published web.wait version 1")
            && stdout.contains("applied by all 1 live gateways"),
        "{stdout}"
    );
    eprintln!("publish --wait took {:?}", started.elapsed());

    // Still refused: a switch for an API that does not exist.
    let (code, _, stderr) = exit(&["switch", "no.such.api", "on", "--reason", "x", "--wait"]).await;
    assert_ne!(code, Some(0));
    assert!(stderr.contains("no.such.api"), "{stderr}");

    // The gateway paused: the switch is written, the wait times out naming the node.
    let pid = gw.proc.child.id().to_string();
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    assert!(stop.success());
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = exit(&[
        "switch",
        "web.wait",
        "on",
        "--reason",
        "maintenance",
        "--wait=2",
    ])
    .await;
    let took = started.elapsed();
    let cont = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    assert!(cont.success());
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("ON: degraded"), "{stdout}");
    assert!(
        stderr.contains("not applied within 2s") && stderr.contains("gw-wait (serves generation"),
        "{stderr}"
    );
    assert!(took < std::time::Duration::from_secs(6), "{took:?}");

    // Resumed, it catches up: the next switch's wait succeeds.
    let (code, stdout, stderr) = exit(&["switch", "web.wait", "off", "--wait=20"]).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("applied by all 1 live gateways"),
        "{stdout}"
    );
    gw.proc.assert_alive();

    // Aligned tables: a left-aligned column's cells start under its header, a right-aligned
    // column's cells end under it.
    reg.post("/apis/web.wait/rollback", &json!({"version": 1}))
        .await
        .expect(200);
    let (_, history, _) = exit(&["history", "web.wait"]).await;
    let lines: Vec<&str> = history.lines().collect();
    assert_eq!(lines.len(), 3, "{history}");
    let published = lines[0].find("PUBLISHED").unwrap();
    let version_end = "VERSION".len();
    for row in &lines[1..] {
        assert_eq!(cell_starts(row)[1], published, "{history}");
        assert!(
            row[..version_end].trim_start().parse::<u64>().is_ok(),
            "{history}"
        );
        assert_eq!(&row[version_end..version_end + 2], "  ", "{history}");
    }
    let (_, status, _) = exit(&["status"]).await;
    let lines: Vec<&str> = status
        .lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .collect();
    assert!(lines.len() >= 2, "{status}");
    let header = cell_starts(lines[0]);
    let row = cell_starts(lines[1]);
    // NODE, ADDR, ADMIN (left-aligned) start where their headers do.
    assert_eq!(header[..3], row[..3], "{status}");
    let generation_end = lines[0].find("GENERATION").unwrap() + "GENERATION".len();
    assert!(
        lines[1][..generation_end].ends_with(|c: char| c.is_ascii_digit()),
        "{status}"
    );
}

/// `portico import --dry-run` previews (new / changed, and each route another API owns) and
/// writes nothing; a re-import that would change a draft is refused (409 WOULD_OVERWRITE,
/// naming it) until `--overwrite` confirms it (docs/operations/registry.md, "Draft → sandbox →
/// publish → rollback").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_previews_and_overwrites_a_draft_only_when_asked() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let cluster = json!({"protocol": "grpc", "endpoints": [{"addr": "127.0.0.1:50051"}]});
    reg.put("/clusters/order-svc", &cluster).await.expect(201);
    reg.put("/sandbox/clusters/order-svc", &cluster)
        .await
        .expect(201);
    // Another API already owns the route GetOrder maps to.
    let http_cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:9"}]});
    reg.put("/sandbox/clusters/web", &http_cluster)
        .await
        .expect(201);
    let other = json!({"id": "other.get", "http": {"method": "GET", "path": "/v1/orders/{order_id}"},
        "backend": {"cluster": "web", "http": {}}, "auth": "none"});
    reg.put("/sandbox/apis/other.get", &other).await.expect(201);
    let base = reg.base.clone();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../protos");
    let file = root.join("demo/order.proto");
    let import = |extra: &'static [&'static str]| {
        let mut args = vec![
            "import".to_owned(),
            "proto".to_owned(),
            "--cluster".to_owned(),
            "order-svc".to_owned(),
            "--root".to_owned(),
            root.to_str().unwrap().to_owned(),
            "--service".to_owned(),
            "demo.order.v1.OrderService".to_owned(),
            "--id".to_owned(),
            "demo.order.v1.OrderService/GetOrder=order.get".to_owned(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args.push(file.to_str().unwrap().to_owned());
        let base = base.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            portico(&base, &args).await
        }
    };

    // A preview of the first import: new, the conflict named, nothing written.
    let run = import(&["--dry-run"]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout.contains("preview (nothing written)"),
        "{}",
        run.stdout
    );
    let line = |out: &str, needle: &str| out.lines().any(|l| l.contains(needle));
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("draft order.get") && l.contains("(new)")),
        "{}",
        run.stdout
    );
    assert!(
        line(&run.stdout, "already bound by API other.get (sandbox)"),
        "{}",
        run.stdout
    );
    reg.get("/sandbox/apis/order.get").await.expect(404);

    // The import itself, then the same import with another deadline: refused, named.
    let run = import(&[]).await;
    assert!(run.ok, "{}", run.stderr);
    let before = reg.get("/sandbox/apis/order.get").await.expect(200).body;
    let run = import(&["--timeout-ms", "1234"]).await;
    assert!(!run.ok, "{}", run.stdout);
    assert!(
        run.stderr.contains("409 WOULD_OVERWRITE") && run.stderr.contains("order.get"),
        "{}",
        run.stderr
    );
    assert_eq!(
        reg.get("/sandbox/apis/order.get").await.expect(200).body,
        before
    );
    // Previewed as changed, still not written.
    let run = import(&["--timeout-ms", "1234", "--dry-run"]).await;
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("draft order.get") && l.contains("(changed)")),
        "{}",
        run.stdout
    );
    assert_eq!(
        reg.get("/sandbox/apis/order.get").await.expect(200).body,
        before
    );
    // Confirmed: replaced.
    let run = import(&["--timeout-ms", "1234", "--overwrite"]).await;
    assert!(run.ok, "{}", run.stderr);
    let after = reg.get("/sandbox/apis/order.get").await.expect(200).body;
    assert_eq!(after["backend"]["timeout_ms"], 1234, "{after:#}");
    // --publish with --dry-run is refused by the CLI itself.
    let run = import(&["--dry-run", "--publish"]).await;
    assert!(
        !run.ok && run.stderr.contains("--publish"),
        "{}",
        run.stderr
    );
}
