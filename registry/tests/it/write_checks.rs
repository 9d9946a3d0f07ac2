//! Every write is checked before it lands (docs/operations/registry.md, "What the registry refuses before
//! writing"), with every problem reported at once. Unknown references (a switch, an alert rule or
//! an app grant naming no API, a topic granted to no app, an API on no cluster) and numbers out of
//! their documented ranges are refused with 422 and the list of all problems in `details`; nothing
//! is written; the CLI prints each problem and exits non-zero. A document over ZooKeeper's node
//! limit is 413 (not a dropped session reported as "ZooKeeper unavailable"), and the limit is the
//! real one. Against a real ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{cli_outcome, portico_cli, registry, Reply};
use portico_registry::api::checks::{JUTE_MAXBUFFER, MAX_DOCUMENT_BYTES};
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};

/// The `(path, field)` of each problem of a 422.
fn problems(r: &Reply) -> Vec<(String, String)> {
    assert_eq!(r.status.as_u16(), 422, "{:#}", r.body);
    assert_eq!(r.code(), "VALIDATION_FAILED", "{:#}", r.body);
    r.body["details"]
        .as_array()
        .expect("details")
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap_or("").to_owned(),
                d["field"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(p, f)| ((*p).to_owned(), (*f).to_owned()))
        .collect()
}

const CLUSTER: &str = r#"{"protocol":"http","endpoints":[{"addr":"127.0.0.1:1"}]}"#;

fn api(id: &str, path: &str, cluster: &str) -> Value {
    json!({"id": id, "http": {"method": "GET", "path": path},
           "backend": {"cluster": cluster, "http": {}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_naming_unknown_references_are_refused_with_every_problem() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let cluster: Value = serde_json::from_str(CLUSTER).unwrap();
    reg.put("/clusters/c", &cluster).await.expect(201);
    let files = json!({"files": {
        "apis/order.get.json": {"encoding": "utf-8", "content": api("order.get", "/o", "c").to_string()},
    }});
    reg.post("/import?env=live", &files).await.expect(200);

    // A switch on no API: refused (it was "ON: degraded" before), not written.
    let r = reg
        .put("/switches/no-such-api", &json!({"degraded": true}))
        .await;
    assert_eq!(problems(&r), pairs(&[("switches/no-such-api", "name")]));
    reg.get("/switches/no-such-api").await.expect(404);
    // A key-level switch on no API, too; on an existing API it is fine.
    let keyed = json!({"degraded": true, "match": {"header:x-merchant": ["m1"]}});
    let r = reg.put("/switches/nope@vip", &keyed).await;
    assert_eq!(problems(&r), pairs(&[("switches/nope@vip", "name")]));
    reg.put("/switches/order.get", &json!({"degraded": true}))
        .await
        .expect(201);

    // An alert rule on no API, with its range problems listed beside it.
    let rule = json!({"api": "no-such-api", "condition": "availability_below",
                      "threshold": 2, "for_s": 100000});
    let r = reg.put("/alerts/r1", &rule).await;
    assert_eq!(
        problems(&r),
        pairs(&[
            ("alerts/r1", "api"),
            ("alerts/r1", "for_s"),
            ("alerts/r1", "threshold")
        ])
    );
    reg.get("/alerts/r1").await.expect(404);
    let ok_rule = json!({"api": "*", "condition": "availability_below", "threshold": 0.99});
    reg.put("/alerts/r2", &ok_rule).await.expect(201);

    // A topic granted to apps that do not exist: both named.
    let topic = json!({"apps": ["ghost-1", "*", "ghost-2"], "retention_s": 60});
    let r = reg.put("/topics/t", &topic).await;
    assert_eq!(
        problems(&r),
        pairs(&[("topics/t", "apps[0]"), ("topics/t", "apps[2]")])
    );
    reg.get("/topics/t").await.expect(404);

    // An app granted an API that does not exist (`*` and existing ones are fine).
    let r = reg
        .post(
            "/apps",
            &json!({"app_key": "m1", "apis": ["order.get", "*", "gone"]}),
        )
        .await;
    let got = problems(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].1.starts_with("apis["), "{got:?}");
    reg.get("/apps/m1").await.expect(404);
    reg.post(
        "/apps",
        &json!({"app_key": "m1", "apis": ["order.get", "*"]}),
    )
    .await
    .expect(201);
    let r = reg
        .post("/apps/m1/grant", &json!({"apis": ["gone", "gone-too"]}))
        .await;
    assert_eq!(problems(&r).len(), 2, "{:#}", r.body);

    // An API on no cluster, with out-of-range numbers: every problem at once (the gateways'
    // validation stops at the first).
    let mut bad = api("order.list", "/l", "no-such-cluster");
    bad["policy"] = json!({
        "bulkhead": {"max_concurrent": 99999999999999999999999.0_f64},
        "breaker": {"error_ratio": 2},
    });
    // The number as a client types it, not as f64 prints it.
    let text = bad.to_string().replace("1e+23", "99999999999999999999999");
    assert!(text.contains("99999999999999999999999"), "{text}");
    let files = json!({"files": {"apis/order.list.json": {"encoding": "utf-8", "content": text}}});
    let r = reg.post("/import?env=live", &files).await;
    assert_eq!(
        problems(&r),
        pairs(&[
            ("apis/order.list", "backend.cluster"),
            ("apis/order.list", "policy.bulkhead.max_concurrent"),
            ("apis/order.list", "policy.breaker.error_ratio"),
        ])
    );
    let reasons: Vec<&str> = r.body["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons[1].contains("between 1 and 4294967295"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("(0, 1]"), "{reasons:?}");
    assert!(r.body["message"].as_str().unwrap().contains("and 2 more"));
    reg.get("/apis/order.list").await.expect(404);

    // One import, problems in several documents: all listed.
    let files = json!({"files": {
        "switches/ghost.json": {"encoding": "utf-8", "content": "{\"degraded\":true}"},
        "topics/t.json": {"encoding": "utf-8", "content": "{\"apps\":[\"ghost\"],\"retention_s\":60}"},
        "alerts/a.json": {"encoding": "utf-8", "content": "{\"api\":\"ghost\",\"condition\":\"breaker_open\"}"},
    }});
    let r = reg.post("/import?env=live", &files).await;
    assert_eq!(
        problems(&r),
        pairs(&[
            ("alerts/a", "api"),
            ("switches/ghost", "name"),
            ("topics/t", "apps[0]")
        ])
    );

    // The CLI: every problem printed, exit non-zero, nothing recorded.
    let out = tokio::process::Command::from(portico_cli(
        &reg.base,
        "tester",
        &["switch", "no-such-api", "on", "--reason", "drill"],
    ))
    .output()
    .await
    .unwrap();
    let (ok, stdout, stderr) = cli_outcome(out);
    assert!(!ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stdout.contains("ON"), "{stdout}");
    assert!(
        stderr.contains("422 VALIDATION_FAILED") && stderr.contains("switches/no-such-api: name"),
        "{stderr}"
    );
    reg.get("/switches/no-such-api").await.expect(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_over_zookeepers_limit_is_413_and_the_limit_is_real() {
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let cluster: Value = serde_json::from_str(CLUSTER).unwrap();
    reg.put("/clusters/c", &cluster).await.expect(201);
    let files = json!({"files": {
        "apis/promo.list.json": {"encoding": "utf-8", "content": api("promo.list", "/p", "c").to_string()},
    }});
    reg.post("/import?env=live", &files).await.expect(200);

    // A 2 MB fallback body (the issue's): 413 naming the limit, not 503.
    let body = "x".repeat(2_000_000);
    let sw = json!({"degraded": true, "fallback": {"status": 200, "body": body}});
    let r = reg.put("/switches/promo.list", &sw).await;
    assert_eq!(r.status.as_u16(), 413, "{:#}", r.body);
    assert_eq!(r.code(), "BODY_TOO_LARGE");
    let m = r.body["message"].as_str().unwrap();
    assert!(
        m.contains(&MAX_DOCUMENT_BYTES.to_string()) && m.contains("jute.maxbuffer"),
        "{m}"
    );
    assert_eq!(r.body["details"][0]["path"], "switches/promo.list");
    // The session was kept: the next write lands at once.
    let small = json!({"degraded": true, "fallback": {"status": 200, "body": "soon"}});
    reg.put("/switches/promo.list", &small).await.expect(201);

    // The limit is ZooKeeper's: a document of exactly MAX_DOCUMENT_BYTES is stored by the
    // store; JUTE_MAXBUFFER bytes of data make the server drop the session.
    let auth = crate::common::registry_auth(&zk);
    let store = portico_registry::zk_store::Store::new(&zk.connect_string(), zk.root())
        .with_auth(auth.clone());
    let deep = format!("sandbox/descriptors/{}", "d".repeat(64));
    let fits = vec![b'x'; MAX_DOCUMENT_BYTES];
    let pre = portico_registry::zk_store::Precondition::Any;
    store.put(&deep, &fits, pre).await.expect("stored");
    let read = store.get(&deep).await.unwrap().unwrap();
    assert_eq!(read.data.len(), MAX_DOCUMENT_BYTES);
    let over = vec![b'x'; MAX_DOCUMENT_BYTES + 1];
    let e = store.put(&deep, &over, pre).await.unwrap_err();
    assert_eq!(e.code, "BODY_TOO_LARGE");

    // Straight to ZooKeeper, without the registry's check: the server refuses.
    let client = zookeeper_client::Client::connector()
        .with_session_timeout(std::time::Duration::from_secs(10));
    let client = match zk.credentials() {
        Some(c) => client.with_auth("digest", c.registry.as_bytes()),
        None => client,
    };
    let client = client.connect(&zk.connect_string()).await.unwrap();
    let huge = vec![b'x'; JUTE_MAXBUFFER];
    let raw = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        client.set_data(&format!("{}/{deep}", zk.root()), &huge, None),
    )
    .await;
    assert!(
        !matches!(raw, Ok(Ok(_))),
        "ZooKeeper took {JUTE_MAXBUFFER} bytes: its limit is not the one assumed"
    );
}
