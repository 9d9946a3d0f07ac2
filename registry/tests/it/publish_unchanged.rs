//! docs/operations/registry.md, "Draft → sandbox → publish → rollback": `portico publish` of a draft
//! identical to the live version is a no-op: it says so, makes no new version, no history entry and
//! no audit entry; a changed draft still publishes a new version. Against a real ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{cli_outcome, portico_cli, registry};
use portico_testkit::ZooKeeper;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_an_unchanged_draft_publishes_nothing() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:1"}]});
    reg.put("/clusters/web", &cluster).await.expect(201);
    reg.put("/sandbox/clusters/web", &cluster).await.expect(201);
    let api = |timeout: u64| {
        json!({"id": "web.x", "http": {"method": "GET", "path": "/x"},
               "backend": {"cluster": "web", "timeout_ms": timeout, "http": {}}})
    };
    reg.post("/sandbox/apis", &api(1000)).await.expect(201);
    let first = reg
        .post("/apis/web.x/publish", &json!({}))
        .await
        .expect(200);
    assert_eq!(first.body["version"], 1);
    assert!(first.body.get("unchanged").is_none(), "{:#}", first.body);
    let audits = reg.audit_actions(100).await.len();

    // The same draft again: 200, unchanged, still version 1, nothing written.
    let again = reg
        .post("/apis/web.x/publish", &json!({}))
        .await
        .expect(200);
    assert_eq!(again.body["unchanged"], true, "{:#}", again.body);
    assert_eq!(again.body["version"], 1);
    let history = reg.get("/apis/web.x/history").await.expect(200);
    assert_eq!(history.body["versions"].as_array().unwrap().len(), 1);
    assert_eq!(
        reg.get("/apis/web.x").await.expect(200).version(),
        first.version()
    );
    assert_eq!(reg.audit_actions(100).await.len(), audits);

    // From the CLI: says so, exit 0.
    let out = tokio::process::Command::from(portico_cli(&reg.base, "t", &["publish", "web.x"]))
        .output()
        .await
        .unwrap();
    let (ok, stdout, stderr) = cli_outcome(out);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("web.x unchanged") && stdout.contains("nothing published"),
        "{stdout}"
    );
    let history = reg.get("/apis/web.x/history").await.expect(200);
    assert_eq!(history.body["versions"].as_array().unwrap().len(), 1);

    // A stale If-Match is still a conflict, unchanged or not.
    let stale = reg
        .send(
            reg.request(reqwest::Method::POST, "/apis/web.x/publish")
                .header("If-Match", "\"7\"")
                .json(&json!({})),
        )
        .await;
    assert_eq!(stale.status.as_u16(), 409, "{:#}", stale.body);

    // A changed draft publishes version 2.
    let draft = reg.get("/sandbox/apis/web.x").await.expect(200);
    reg.put_if("/sandbox/apis/web.x", &draft.version(), &api(2000))
        .await
        .expect(200);
    let second = reg
        .post("/apis/web.x/publish", &json!({}))
        .await
        .expect(200);
    assert_eq!(second.body["version"], 2);
    assert!(second.body.get("unchanged").is_none());
}
