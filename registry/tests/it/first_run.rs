//! The first run works as written (README.md, "Quick start", "What to try next"). `portico import
//! tree` (run by `ops/up.sh`) loads every kind the tree holds, topics and alert rules included (the
//! README's notification quick start needs `topics/orders`); the CLI reads the token files
//! `.run/env` names (`PORTICO_ADMIN_TOKEN_FILE`); `./ops/zkcli.sh` exits non-zero on a zkCli error
//! and refuses a document write that is not JSON. Against a real ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{browser::workspace, cli_outcome, portico_cli, registry, TOKEN};
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// Copies the directory tree `from` into `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_tree_loads_every_kind_with_the_token_file_env_names() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("config");
    copy_dir(&workspace().join("ops/examples/standalone"), &tree);
    std::fs::create_dir_all(tree.join("alerts")).unwrap();
    let rule = json!({"api": "order.get", "condition": "availability_below", "threshold": 0.99});
    std::fs::write(
        tree.join("alerts/order-availability.json"),
        rule.to_string(),
    )
    .unwrap();
    assert!(
        tree.join("topics/orders.json").is_file(),
        "the example tree has a topic"
    );
    // The token as ops/up.sh hands it over: a file named by PORTICO_ADMIN_TOKEN_FILE.
    let token_file = work.path().join("admin-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();

    let mut cmd = portico_cli(
        &reg.base,
        "ops-up",
        &["import", "tree", tree.to_str().unwrap()],
    );
    cmd.env_remove("PORTICO_ADMIN_TOKEN")
        .env("PORTICO_ADMIN_TOKEN_FILE", &token_file);
    let (ok, stdout, stderr) =
        cli_outcome(tokio::process::Command::from(cmd).output().await.unwrap());
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains("topics 1") && stdout.contains("alerts 1") && stdout.contains("apis "),
        "{stdout}"
    );
    let topic = reg.get("/topics/orders").await.expect(200);
    assert_eq!(topic.body["apps"], json!(["merchant-1"]));
    let alert = reg.get("/alerts/order-availability").await.expect(200);
    assert_eq!(alert.body["api"], "order.get");
    // Every document of the directory is in the tree.
    let exported = reg.get("/export").await.expect(200);
    let files = exported.body["files"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for kind in ["apis", "clusters", "apps", "switches", "descriptors"] {
        let n = std::fs::read_dir(tree.join(kind)).unwrap().count();
        let got = files
            .keys()
            .filter(|k| k.starts_with(&format!("{kind}/")))
            .count();
        assert_eq!(got, n, "{kind}: {got} of {n} imported");
    }

    // The help says which kinds are read.
    let help = Command::new(env!("CARGO_BIN_EXE_portico"))
        .args(["import", "tree", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("topics/") && help.contains("alerts/"),
        "{help}"
    );

    // A token file that cannot be read is named.
    let mut cmd = portico_cli(&reg.base, "ops-up", &["switch", "order.get", "off"]);
    cmd.env_remove("PORTICO_ADMIN_TOKEN")
        .env("PORTICO_ADMIN_TOKEN_FILE", work.path().join("missing"));
    let (ok, _, stderr) = cli_outcome(tokio::process::Command::from(cmd).output().await.unwrap());
    assert!(!ok && stderr.contains("missing"), "{stderr}");
}

/// Runs `./ops/zkcli.sh args...` as the operator of `zk`: (exit code, stdout, stderr).
fn zkcli(zk: &ZooKeeper, run_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let creds = zk.credentials().unwrap();
    let out = Command::new(workspace().join("ops/zkcli.sh"))
        .args(args)
        .env("PORTICO_ZK", zk.connect_string())
        .env("PORTICO_ZK_AUTH_FILE", creds.operator_file())
        .env("PORTICO_RUN_DIR", run_dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkcli_exits_non_zero_on_errors_and_refuses_a_document_that_is_not_json() {
    let zk = ZooKeeper::start_locked();
    let reg = registry(&zk).await;
    let run_dir = tempfile::tempdir().unwrap();
    reg.put(
        "/clusters/c",
        &json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}]}),
    )
    .await
    .expect(201);
    let api = json!({"id": "promo.list", "http": {"method": "GET", "path": "/p"},
        "backend": {"cluster": "c", "http": {}}});
    let files = json!({"files": {"apis/promo.list.json": {"encoding": "utf-8", "content": api.to_string()}}});
    reg.post("/import?env=live", &files).await.expect(200);
    reg.put(
        "/switches/promo.list",
        &json!({"degraded": true, "reason": "drill"}),
    )
    .await
    .expect(201);
    let degraded = |v: &Value| v["degraded"].clone();

    // The issue's typo: refused before zkCli runs, the switch still on.
    let (code, out, err) = zkcli(
        &zk,
        run_dir.path(),
        &["set", "/portico/switches/promo.list", r#"{"degraded":fals"#],
    );
    assert_eq!(code, 2, "stdout: {out}\nstderr: {err}");
    assert!(err.contains("not valid JSON"), "{err}");
    let sw = reg.get("/switches/promo.list").await.expect(200);
    assert_eq!(degraded(&sw.body), json!(true));

    // zkCli errors: exit 1 with zkCli's message.
    let (code, out, err) = zkcli(&zk, run_dir.path(), &["get", "/portico/switches/nope"]);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("Node does not exist"), "{out}");
    let (code, out, err) = zkcli(&zk, run_dir.path(), &["create", "/portico/stray", "{}"]);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("Insufficient permission"), "{out}");
    let (code, out, _) = zkcli(&zk, run_dir.path(), &["frobnicate", "/portico"]);
    assert_eq!(code, 1, "{out}");

    // What works still exits 0.
    let (code, out, err) = zkcli(
        &zk,
        run_dir.path(),
        &["get", "/portico/switches/promo.list"],
    );
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("\"degraded\":true"), "{out}");
}
