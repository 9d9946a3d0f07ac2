//! Alerts end to end (docs/operations/alerts.md, "Alerts"), real processes only: a locked ZooKeeper, two
//! `portico-registry` processes (both evaluate, one sends), the gateway binary, a demo backend
//! slowed by its fault injection, and a small webhook receiver standing in for the receiver's
//! owner.
//!
//! An alert on TP99 fires once while the backend is slow and resolves once after it recovers:
//! exactly one signed webhook call each (HMAC-SHA256 over the body with the shared secret), no
//! duplicates while it stays firing, and both registries list the firing and the resolution.
//!
//! The registries run at a short cadence (`--evaluation-interval-ms`): scrapes and rounds every
//! 250 ms over windows of 1.25 s (the production 2 s and 10 s are the same five rounds). Where
//! the test shows that something does not happen, it waits for both registries to have
//! evaluated again (their `/alerting` `evaluated_at_ms`), never on a long fixed sleep.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::procs::{registry_command, spawn_gateway, GatewayProc};
use crate::common::{registry, signed_get, Proc, Registry, TOKEN};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, Mac};
use portico_testkit::procs::BackendProcess;
use portico_testkit::{free_port, write_private, ZooKeeper};
use serde_json::{json, Value};
use sha2::Sha256;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const APP: &str = "merchant-alerts";
const SECRET: &str = "merchant-alerts-secret-0123456789";
const HOOK_SECRET: &str = "webhook-shared-secret-for-tests";
/// The registries' evaluation interval.
const INTERVAL: Duration = Duration::from_millis(250);
/// The rule's `for_s`: longer than the window, so one slow request on a loaded machine (it
/// stays in the window for 1.25 s) cannot fire the alert while the backend is fast.
const FOR_S: u64 = 2;

/// What the webhook receiver got: (headers, body).
type Calls = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn receiver() -> (String, Calls) {
    let calls: Calls = Arc::default();
    let app = axum::Router::new()
        .route(
            "/hook",
            post(
                |State(c): State<Calls>, h: HeaderMap, body: Bytes| async move {
                    c.lock().unwrap().push((h, body));
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(calls.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), calls)
}

/// A `portico-registry` process on a free port: (process, API base URL).
fn registry_process(zk: &ZooKeeper, work: &Path, name: &'static str) -> (Proc, String) {
    let port = free_port();
    let token = work.join("token");
    write_private(&token, TOKEN);
    let secret = work.join("hook-secret");
    write_private(&secret, HOOK_SECRET);
    let proc = Proc::spawn(
        name,
        registry_command(zk, port)
            .arg("--admin-token-file")
            .arg(&token)
            .arg("--data-dir")
            .arg(work.join(name))
            .arg("--webhook-secret-file")
            .arg(&secret)
            .arg("--evaluation-interval-ms")
            .arg(INTERVAL.as_millis().to_string()),
        work,
    );
    (proc, format!("http://127.0.0.1:{port}/api/v1"))
}

async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every registry has finished a round that ended `span` and three more rounds
/// after `after_ms` (Unix ms): what they decided by then is recorded (the transitions in their
/// history; a webhook is sent beside the rounds).
async fn wait_evaluated_past(regs: &[&Registry], after_ms: u64, span: Duration, what: &str) {
    let want = after_ms + span.as_millis() as u64 + 3 * INTERVAL.as_millis() as u64;
    for r in regs {
        wait_until(Duration::from_secs(60), what, || async {
            r.get("/alerting").await.body["evaluated_at_ms"]
                .as_u64()
                .is_some_and(|at| at >= want)
        })
        .await;
    }
}

fn verify(headers: &HeaderMap, body: &[u8]) -> Value {
    let sig = headers["x-portico-signature"].to_str().unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(HOOK_SECRET.as_bytes()).unwrap();
    mac.update(body);
    let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(
        sig, want,
        "the webhook's signature is HMAC-SHA256 of the body"
    );
    serde_json::from_slice(body).unwrap()
}

fn states(calls: &Calls) -> Vec<String> {
    calls
        .lock()
        .unwrap()
        .iter()
        .map(|(h, b)| verify(h, b)["state"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_backend_fires_one_signed_webhook_and_recovery_resolves_it() {
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let zk = ZooKeeper::on_shared_locked();
    println!("ZooKeeper up after {:?}", started.elapsed());
    let setup = registry(&zk).await;
    let backend = BackendProcess::start_http().unwrap();
    let (hook, calls) = receiver().await;

    // An HTTP API on the demo backend, and an app to call it.
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]});
    setup.put("/clusters/slow", &cluster).await.expect(201);
    setup
        .put("/sandbox/clusters/slow", &cluster)
        .await
        .expect(201);
    setup
        .post(
            "/sandbox/apis",
            &json!({"id": "ops.slow", "http": {"method": "GET", "path": "/v1/ops.slow"},
                "backend": {"cluster": "slow", "http": {"path": "/health"}}}),
        )
        .await
        .expect(201);
    setup
        .post("/apis/ops.slow/publish", &json!({}))
        .await
        .expect(200);
    setup
        .post(
            "/apps",
            &json!({"app_key": APP, "secret": SECRET, "name": "alerts", "apis": ["*"]}),
        )
        .await
        .expect(201);

    // Two registries evaluate; the first to enroll sends.
    let (mut reg_a, base_a) = registry_process(&zk, work.path(), "registry-a");
    let (mut reg_b, base_b) = registry_process(&zk, work.path(), "registry-b");
    let a = Registry {
        base: base_a,
        http: reqwest::Client::new(),
    };
    let b = Registry {
        base: base_b,
        http: reqwest::Client::new(),
    };
    for r in [&a, &b] {
        wait_until(Duration::from_secs(60), "a registry process", || async {
            r.request(reqwest::Method::GET, "/alerting")
                .send()
                .await
                .is_ok_and(|a| a.status().is_success())
        })
        .await;
    }

    // Rules are validated (422 naming the field) and audited like the other documents.
    let bad = a
        .put(
            "/alerts/bad",
            &json!({"condition": "availability_below", "threshold": 99.9}),
        )
        .await
        .expect(422);
    assert!(
        bad.body["message"].as_str().unwrap().contains("fraction"),
        "{:#}",
        bad.body
    );
    let rule = json!({"api": "ops.slow", "condition": "tp99_ms_above", "threshold": 200,
        "for_s": FOR_S, "severity": "page", "receivers": [{"webhook": hook}]});
    a.put("/alerts/order-slow", &rule).await.expect(201);
    assert_eq!(
        b.get("/alerts/order-slow").await.expect(200).body["threshold"],
        200
    );
    let listed = a.get("/alerts").await.expect(200);
    assert_eq!(listed.body["items"][0]["id"], "order-slow");

    let GatewayProc {
        proc: mut gw,
        url: base,
        admin,
    } = spawn_gateway(&zk, "gw-alerts", work.path(), |_| {});
    let http = reqwest::Client::new();
    wait_until(
        Duration::from_secs(90),
        "the gateway serving the API",
        || async { signed_get(&http, &base, "/v1/ops.slow", (APP, SECRET)).await == 200 },
    )
    .await;
    let _ = admin;
    println!(
        "registries and the gateway up after {:?}",
        started.elapsed()
    );

    // Steady traffic until the end of the test.
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..3 {
        let (stop, http, base) = (stop.clone(), http.clone(), base.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                signed_get(&http, &base, "/v1/ops.slow", (APP, SECRET)).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }));
    }

    // Fast: the alert stays clear (both registries evaluate the rule).
    wait_until(
        Duration::from_secs(60),
        "both registries evaluating",
        || async {
            let sa = a.get("/alerting").await.body;
            let sb = b.get("/alerting").await.body;
            sa["rules"] == 1
                && sb["rules"] == 1
                && sa["evaluated_at_ms"].is_i64()
                && sa["problem"].is_null()
        },
    )
    .await;
    let clear_from = portico_control::clock::now_ms();
    wait_evaluated_past(
        &[&a, &b],
        clear_from,
        Duration::from_secs(FOR_S),
        "rounds on the fast backend for longer than for_s",
    )
    .await;
    assert!(
        calls.lock().unwrap().is_empty(),
        "no alert while the backend is fast"
    );
    let leaders: Vec<bool> = [
        a.get("/alerting").await.body["leader"].as_bool().unwrap(),
        b.get("/alerting").await.body["leader"].as_bool().unwrap(),
    ]
    .to_vec();
    assert_eq!(
        leaders.iter().filter(|l| **l).count(),
        1,
        "exactly one leader: {leaders:?}"
    );

    // Slow the backend: 400 ms a call.
    let faults = format!("{}/__admin/faults?delay_ms=400", backend.http_url());
    http.post(&faults).send().await.unwrap();
    let slowed = Instant::now();
    wait_until(Duration::from_secs(60), "the firing webhook", || async {
        !calls.lock().unwrap().is_empty()
    })
    .await;
    println!("fired {:?} after the backend slowed", slowed.elapsed());
    let (h, body) = calls.lock().unwrap()[0].clone();
    let p = verify(&h, &body);
    assert_eq!(p["state"], "firing");
    assert_eq!(p["rule"], "order-slow");
    assert_eq!(p["api"], "ops.slow");
    assert_eq!(p["condition"], "tp99_ms_above");
    assert_eq!(p["threshold"], 200.0);
    assert_eq!(p["severity"], "page");
    assert!(p["value"].as_f64().unwrap() > 200.0, "{p:#}");
    assert!(p["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(p["resolved_at"].is_null());
    assert_eq!(h["x-portico-event"], "firing");

    // Still slow: no duplicate while it stays firing, on either registry (each evaluates on
    // its own scrapes: the other one may fire a round later).
    for r in [&a, &b] {
        wait_until(
            Duration::from_secs(30),
            "both registries firing",
            || async {
                r.get("/alerting?rule=order-slow").await.body["alerts"][0]["state"] == "firing"
            },
        )
        .await;
    }
    let fired_seen = portico_control::clock::now_ms();
    wait_evaluated_past(&[&a, &b], fired_seen, INTERVAL, "rounds while firing").await;
    assert_eq!(states(&calls), ["firing"], "one call while firing");
    for r in [&a, &b] {
        let board = r.get("/alerting?rule=order-slow").await.body;
        assert_eq!(board["alerts"][0]["state"], "firing", "{board:#}");
        assert_eq!(board["events"].as_array().unwrap().len(), 1, "{board:#}");
    }

    // Recovered: one resolved call, after the window and for_s.
    http.post(format!("{}/__admin/faults", backend.http_url()))
        .send()
        .await
        .unwrap();
    let healed = Instant::now();
    wait_until(Duration::from_secs(90), "the resolved webhook", || async {
        calls.lock().unwrap().len() >= 2
    })
    .await;
    println!(
        "resolved {:?} after the backend recovered",
        healed.elapsed()
    );
    let resolved_seen = portico_control::clock::now_ms();
    wait_evaluated_past(
        &[&a, &b],
        resolved_seen,
        INTERVAL,
        "rounds after the resolution",
    )
    .await;
    assert_eq!(
        states(&calls),
        ["firing", "resolved"],
        "exactly one call each"
    );
    let (h, body) = calls.lock().unwrap()[1].clone();
    let p = verify(&h, &body);
    assert!(p["resolved_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        h["x-portico-delivery"].to_str().unwrap(),
        p["id"].as_str().unwrap()
    );

    // Both registries recorded the firing and the resolution; the leader its notifications.
    for r in [&a, &b] {
        wait_until(
            Duration::from_secs(30),
            "both registries resolved",
            || async {
                let s = r.get("/alerting?rule=order-slow").await.body;
                s["alerts"].as_array().is_some_and(Vec::is_empty)
            },
        )
        .await;
    }
    let settled = portico_control::clock::now_ms();
    wait_evaluated_past(&[&a, &b], settled, INTERVAL, "rounds after both resolved").await;
    assert_eq!(
        states(&calls),
        ["firing", "resolved"],
        "still one call each"
    );
    for r in [&a, &b] {
        let s = r.get("/alerting?rule=order-slow").await.expect(200).body;
        let events: Vec<&str> = s["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["state"].as_str().unwrap())
            .collect();
        assert_eq!(events, ["resolved", "firing"], "{s:#}");
        assert!(s["alerts"].as_array().unwrap().is_empty(), "{s:#}");
        if s["leader"] == true {
            assert_eq!(
                s["events"][1]["notifications"]["receivers"][0]["ok"], true,
                "{s:#}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        let _ = l.await;
    }
    gw.assert_alive();
    reg_a.assert_alive();
    reg_b.assert_alive();
}
