//! Cluster operations (docs/operations/clusters.md, "Failover, autoscale and sleep marking") end to end,
//! real processes only: a locked ZooKeeper, registries on free ports, the gateway binary in
//! ZooKeeper mode, demo backends, and a small HTTP receiver standing in for the autoscale webhook's
//! and `sleep_url`'s owner (the external party).
//!
//! - manual failover through the API and the `portico` CLI: the cluster document's `active`
//!   changes in ZooKeeper, the gateway applies it within 1 s, bad requests are 400s, the audit
//!   log says who, from, to and why;
//! - autoscale: signed requests through the gateway above a rule fire the webhook once per
//!   cooldown with the documented payload, even with two registries evaluating; a failed
//!   webhook call is recorded; the events are listed;
//! - sleep marking: an idle cluster with `sleep.sleep_url` gets it POSTed once per idle period.
//!
//! The autoscale test's registries are `portico-registry` processes at a short cadence
//! (`--evaluation-interval-ms`; the cadence is process-wide, and this test process runs other
//! areas' in-process registries at the default one): the test waits on their evaluations (the
//! cluster overview's `evaluated_at_ms`), never on a long fixed sleep.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::procs::{spawn_gateway, spawn_registry, GatewayProc, RegistryProc};
use crate::common::{cli_outcome, registry, signed_get, Registry};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Json;
use portico_testkit::procs::BackendProcess;
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const APP: &str = "merchant-ops";
const SECRET: &str = "merchant-ops-secret-0123456789";

/// The gateway's `/status`.
async fn status(admin: &str) -> Value {
    match reqwest::get(format!("{admin}/status")).await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Waits until the gateway registered and serves the live tree's current generation.
async fn wait_in_sync(reg: &Registry, admin: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let tree = reg.get("/nodes").await.body["generation"].as_i64();
        let served = status(admin).await["config_version"]["generation"].as_i64();
        if tree.is_some() && served >= tree {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A live cluster with an HTTP API on it and a live app, as an operator would set it up.
async fn seed(reg: &Registry, cluster: &str, doc: &Value, api: &str) {
    reg.put(&format!("/clusters/{cluster}"), doc)
        .await
        .expect(201);
    reg.put(&format!("/sandbox/clusters/{cluster}"), doc)
        .await
        .expect(201);
    reg.post(
        "/sandbox/apis",
        &json!({"id": api, "http": {"method": "GET", "path": format!("/v1/{api}")},
                "backend": {"cluster": cluster, "http": {"path": "/health"}}}),
    )
    .await
    .expect(201);
    reg.post(&format!("/apis/{api}/publish"), &json!({}))
        .await
        .expect(200);
    let app = json!({"app_key": APP, "secret": SECRET, "name": "ops merchant", "apis": ["*"]});
    let r = reg.post("/apps", &app).await;
    assert!(matches!(r.status.as_u16(), 201 | 409), "{:#?}", r.body);
}

/// Waits until the gateway's traffic listener accepts connections: `/readyz` (and so
/// `wait_in_sync`) can answer a moment before the traffic listener is bound.
async fn wait_listening(base: &str) {
    let addr = base.trim_start_matches("http://").to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway's traffic listener {addr} did not open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `portico` CLI against `reg`, as operator `sre-cli`: (success, stdout, stderr).
async fn portico(reg: &Registry, args: &[&str]) -> (bool, String, String) {
    let cmd = crate::common::portico_cli(&reg.base, "sre-cli", args);
    cli_outcome(tokio::process::Command::from(cmd).output().await.unwrap())
}

/// The set a gateway's `/status` says it serves for `cluster`, if it reports clusters.
fn served_set(status: &Value, cluster: &str) -> Option<String> {
    status
        .pointer(&format!("/clusters/{cluster}/active"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// After a failover: the gateway's `/status` says it serves `set` for `cluster` within 1 s.
async fn assert_reaches_gateway(admin: &str, cluster: &str, set: &str, since: Instant) {
    let deadline = since + Duration::from_secs(1);
    let mut last = Value::Null;
    while Instant::now() < deadline {
        last = status(admin).await;
        if served_set(&last, cluster).as_deref() == Some(set) {
            println!(
                "failover to {set} served by the gateway {:?} after the request",
                since.elapsed()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the gateway did not serve {set} within 1 s: {:#}",
        last.pointer(&format!("/clusters/{cluster}"))
            .unwrap_or(&last)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_through_the_api_and_the_cli() {
    let work = tempfile::tempdir().unwrap();
    let zk = ZooKeeper::on_shared_locked();
    let reg = registry(&zk).await;
    let primary = BackendProcess::start_http().unwrap();
    let standby = BackendProcess::start_http().unwrap();
    let doc = json!({
        "protocol": "http",
        "endpoints": [{"addr": primary.http.to_string()}],
        "balancing": "round_robin",
        "standby": {"endpoints": [{"addr": standby.http.to_string()}], "failback": "manual"},
    });
    seed(&reg, "orders", &doc, "orders.ping").await;
    reg.put(
        "/clusters/plain",
        &json!({"protocol": "http", "endpoints": [{"addr": primary.http.to_string()}]}),
    )
    .await
    .expect(201);
    let GatewayProc {
        proc: mut gw,
        url: base,
        admin,
    } = spawn_gateway(&zk, "gw-failover", work.path(), |_| {});
    let synced = wait_in_sync(&reg, &admin, Duration::from_secs(60)).await;
    gw.assert_alive();
    assert!(synced, "the gateway did not come up:\n{}", gw.tail());
    wait_listening(&base).await;
    let http = reqwest::Client::new();
    assert_eq!(
        signed_get(&http, &base, "/v1/orders.ping", (APP, SECRET)).await,
        200
    );

    // Bad requests are 400s and change nothing.
    let before = reg.get("/clusters/orders").await.expect(200);
    for (body, why) in [
        (json!({"to": "standby"}), "reason"),
        (json!({"to": "standby", "reason": "   "}), "reason"),
        (json!({"to": "elsewhere", "reason": "x"}), "primary"),
        (
            json!({"to": "standby", "reason": "x", "force": true}),
            "force",
        ),
        (json!("standby"), "object"),
    ] {
        let r = reg
            .post("/clusters/orders/failover", &body)
            .await
            .expect(400);
        assert_eq!(r.code(), "BAD_REQUEST");
        assert!(
            r.body["message"].as_str().unwrap().contains(why),
            "{body}: {:#}",
            r.body
        );
    }
    let r = reg
        .post(
            "/clusters/plain/failover",
            &json!({"to": "standby", "reason": "dc1 down"}),
        )
        .await
        .expect(400);
    assert!(r.body["message"].as_str().unwrap().contains("no standby"));
    reg.post(
        "/clusters/missing/failover",
        &json!({"to": "standby", "reason": "x"}),
    )
    .await
    .expect(404);
    let stale = reg
        .send(
            reg.request(reqwest::Method::POST, "/clusters/orders/failover")
                .header("If-Match", "\"999\"")
                .json(&json!({"to": "standby", "reason": "x"})),
        )
        .await;
    assert_eq!(stale.status.as_u16(), 409, "{:#}", stale.body);
    assert_eq!(reg.get("/clusters/orders").await.body, before.body);

    // The API: standby serves; every other field is kept; the version moved by one.
    let sent = Instant::now();
    let r = reg
        .send(
            reg.request(reqwest::Method::POST, "/clusters/orders/failover")
                .header("X-Portico-Operator", "sre-alice")
                .json(&json!({"to": "standby", "reason": "dc1 maintenance"})),
        )
        .await
        .expect(200);
    assert_eq!(r.body["active"], "standby");
    let stored = reg.get("/clusters/orders").await.expect(200);
    let mut expected = doc.clone();
    expected["active"] = json!("standby");
    assert_eq!(stored.body, expected, "only `active` changes");
    assert_eq!(
        stored.version().parse::<i64>().unwrap(),
        before.version().parse::<i64>().unwrap() + 1
    );
    assert_reaches_gateway(&admin, "orders", "standby", sent).await;
    assert_eq!(
        signed_get(&http, &base, "/v1/orders.ping", (APP, SECRET)).await,
        200
    );

    // The CLI moves it back.
    let sent = Instant::now();
    let (ok, out, err) = portico(
        &reg,
        &["failover", "orders", "primary", "--reason", "dc1 back"],
    )
    .await;
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("primary serves now"), "{out}");
    assert_eq!(reg.get("/clusters/orders").await.body["active"], "primary");
    assert_reaches_gateway(&admin, "orders", "primary", sent).await;
    let (ok, _, err) = portico(&reg, &["failover", "plain", "standby", "--reason", "x"]).await;
    assert!(!ok && err.contains("no standby"), "{err}");
    let (ok, _, err) = portico(&reg, &["failover", "orders", "standby"]).await;
    assert!(!ok && err.contains("--reason"), "{err}");

    // The audit log: who, from, to and why, newest first.
    let audit = reg.get("/audit?limit=50").await.expect(200);
    let failovers: Vec<&Value> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "cluster.failover")
        .collect();
    assert_eq!(failovers.len(), 2, "{:#}", audit.body);
    assert_eq!(failovers[0]["actor"], "sre-cli");
    assert_eq!(failovers[0]["detail"]["from"], "standby");
    assert_eq!(failovers[0]["detail"]["to"], "primary");
    assert_eq!(failovers[0]["detail"]["reason"], "dc1 back");
    assert_eq!(failovers[1]["actor"], "sre-alice");
    assert_eq!(failovers[1]["detail"]["from"], "primary");
    assert_eq!(failovers[1]["detail"]["reason"], "dc1 maintenance");

    // The overview shows the sets and the gateway's view.
    let o = reg.get("/clusters/orders/overview").await.expect(200);
    assert_eq!(o.body["active"], "primary");
    assert_eq!(
        o.body["sets"]["standby"][0]["addr"],
        standby.http.to_string()
    );
    let gws = o.body["gateways"].as_array().unwrap();
    assert_eq!(gws.len(), 1, "{:#}", o.body);
    assert_eq!(gws[0]["node_id"], "gw-failover");
    assert!(gws[0]["error"].is_null(), "{:#}", o.body);
    assert_eq!(gws[0]["active"], "primary", "{:#}", o.body);
    let eps = gws[0]["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 2, "{:#}", o.body);
    assert!(eps
        .iter()
        .any(|e| e["set"] == "standby" && e["addr"] == standby.http.to_string()));
    assert!(eps.iter().all(|e| e["healthy"] == true), "{:#}", o.body);
    gw.assert_alive();
}

/// What the receiver got: (when, path, body).
type Received = Arc<Mutex<Vec<(Instant, String, Value)>>>;

/// The webhook's and sleep_url's owner: records every POST; the first `/scale` call fails
/// with 500 (a failed webhook is recorded too).
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    async fn take(
        State(got): State<Received>,
        uri: axum::http::Uri,
        Json(body): Json<Value>,
    ) -> StatusCode {
        let mut got = got.lock().unwrap();
        let first_scale = uri.path() == "/scale" && !got.iter().any(|(_, p, _)| p == "/scale");
        got.push((Instant::now(), uri.path().to_owned(), body));
        if first_scale {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    }
    let app = axum::Router::new()
        .route("/scale", post(take))
        .route("/sleep", post(take))
        .route("/wake", post(take))
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

fn calls(got: &Received, path: &str) -> Vec<(Instant, Value)> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|(_, p, _)| p == path)
        .map(|(t, _, b)| (*t, b.clone()))
        .collect()
}

/// The registries' cadence in this file: scrapes and evaluations every 250 ms, windows of
/// 1.25 s (the production 2 s and 10 s are the same five rounds).
const INTERVAL: Duration = Duration::from_millis(250);

/// A `portico-registry` process at [`INTERVAL`] (its data in `work/<name>`): the process,
/// kept running while held, and its API.
fn registry_process(zk: &ZooKeeper, name: &'static str, work: &Path) -> (RegistryProc, Registry) {
    let proc = tokio::task::block_in_place(|| {
        spawn_registry(zk, name, work, |cmd| {
            cmd.arg("--data-dir")
                .arg(work.join(name))
                .arg("--evaluation-interval-ms")
                .arg(INTERVAL.as_millis().to_string());
        })
    });
    let api = Registry {
        base: format!("{}/api/v1", proc.base),
        http: reqwest::Client::new(),
    };
    (proc, api)
}

/// One registry's last evaluation of `cluster`: (its rate, when it evaluated, Unix ms).
async fn evaluation(reg: &Registry, cluster: &str) -> (Option<f64>, Option<u64>) {
    let o = reg
        .get(&format!("/clusters/{cluster}/overview"))
        .await
        .expect(200);
    (o.body["rps"].as_f64(), o.body["evaluated_at_ms"].as_u64())
}

/// Waits until every registry has evaluated `cluster` in a round that started at `at_ms` or
/// later (Unix ms; the calls that round decided on are made by then) and `rate` holds of its
/// rate then: an event, not a span of wall time.
async fn wait_evaluated(
    regs: &[&Registry],
    cluster: &str,
    at_ms: u64,
    rate: impl Fn(f64) -> bool,
    what: &str,
) -> Vec<f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    'wait: loop {
        let mut rates = Vec::new();
        for reg in regs {
            match evaluation(reg, cluster).await {
                (Some(rps), Some(at)) if at >= at_ms && rate(rps) => rates.push(rps),
                last => {
                    assert!(
                        Instant::now() < deadline,
                        "{what}: a registry's last evaluation is {last:?}, wanted one from {at_ms}"
                    );
                    tokio::time::sleep(INTERVAL / 5).await;
                    continue 'wait;
                }
            }
        }
        return rates;
    }
}

fn now_ms() -> u64 {
    portico_control::clock::now_ms()
}

/// The Unix ms of a payload's RFC 3339 `at`.
fn at_ms(body: &Value) -> u64 {
    let at = body["at"].as_str().unwrap();
    let t = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn autoscale_fires_once_per_cooldown_and_idle_clusters_are_put_to_sleep() {
    const COOLDOWN_S: u64 = 2;
    const FOR_S: u64 = 1;
    const THRESHOLD: f64 = 5.0;
    const LOAD: Duration = Duration::from_secs(7);
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let zk = ZooKeeper::on_shared_locked();
    println!("ZooKeeper up after {:?}", started.elapsed());
    // Two registries evaluate the same tree: the webhook must still fire once per cooldown.
    // Registry processes: the cadence is process-wide, and this test process runs the other
    // areas' in-process registries at the default one.
    let (_reg_proc, reg) = registry_process(&zk, "registry-a", work.path());
    let (_other_proc, other) = registry_process(&zk, "registry-b", work.path());
    let regs = [&reg, &other];
    let backend = BackendProcess::start_http().unwrap();
    let (hook, got) = receiver().await;
    let doc = json!({
        "protocol": "http",
        "endpoints": [{"addr": backend.http.to_string()}],
        "autoscale": {"webhook": format!("{hook}/scale"), "cooldown_s": COOLDOWN_S,
                      "rules": [{"rps_above": THRESHOLD, "for_s": FOR_S, "action": "up"}]},
    });
    seed(&reg, "shop", &doc, "shop.ping").await;
    let GatewayProc {
        proc: mut gw,
        url: base,
        admin,
    } = spawn_gateway(&zk, "gw-autoscale", work.path(), |_| {});
    let synced = wait_in_sync(&reg, &admin, Duration::from_secs(60)).await;
    gw.assert_alive();
    assert!(synced, "the gateway did not come up:\n{}", gw.tail());
    wait_listening(&base).await;
    println!(
        "registries and the gateway up after {:?}",
        started.elapsed()
    );

    // No load, no firing: both registries evaluate an idle cluster for longer than `for_s`.
    let idle_from = now_ms();
    wait_evaluated(&regs, "shop", idle_from, |r| r == 0.0, "an idle rate").await;
    wait_evaluated(
        &regs,
        "shop",
        now_ms() + FOR_S * 1000 + 2 * INTERVAL.as_millis() as u64,
        |r| r == 0.0,
        "an idle cluster evaluated for longer than for_s",
    )
    .await;
    assert!(calls(&got, "/scale").is_empty());

    // ~25 signed requests per second.
    let http = reqwest::Client::new();
    let load_start = Instant::now();
    let mut failed = 0;
    let mut sent = 0;
    while load_start.elapsed() < LOAD {
        let tick = Instant::now();
        if signed_get(&http, &base, "/v1/shop.ping", (APP, SECRET)).await != 200 {
            failed += 1;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(40).saturating_sub(tick.elapsed())).await;
    }
    let load_end = Instant::now();
    assert_eq!(failed, 0, "{failed} of {sent} requests failed");
    let rps = sent as f64 / load_end.duration_since(load_start).as_secs_f64();
    println!("load: {sent} signed requests, {rps:.1}/s");
    // What the test offered must be well above the rule, or the firings prove nothing.
    assert!(
        rps > THRESHOLD * 2.0,
        "this machine offered {rps:.1}/s, not enough above the rule's {THRESHOLD}/s"
    );
    // The rate decays over the window; once both registries read it below the rule, nothing
    // fires any more (a registry reads its next rate only after its last round's calls).
    wait_evaluated(
        &regs,
        "shop",
        now_ms(),
        |r| r <= THRESHOLD,
        "the rate below the rule after the load",
    )
    .await;
    let quiet_from = Instant::now();
    let fired = calls(&got, "/scale");
    println!(
        "webhook calls at {:?}, decayed {:?} after the load",
        fired
            .iter()
            .map(|(t, _)| t.duration_since(load_start))
            .collect::<Vec<_>>(),
        quiet_from.duration_since(load_end)
    );
    // Past the cooldown of the last firing, both registries evaluate again: still nothing.
    let last_fired = fired.iter().map(|(_, b)| at_ms(b)).max().unwrap_or(0);
    wait_evaluated(
        &regs,
        "shop",
        (last_fired + COOLDOWN_S * 1000).max(now_ms()) + 2 * INTERVAL.as_millis() as u64,
        |r| r <= THRESHOLD,
        "rounds past the cooldown without load",
    )
    .await;
    assert_eq!(
        calls(&got, "/scale").len(),
        fired.len(),
        "the webhook fired after the load had gone: {:#?}",
        calls(&got, "/scale")
    );
    // The load held the rule for all but its first `for_s` and the window's ramp: at least
    // two cooldowns' worth.
    assert!(
        fired.len() >= 2,
        "{LOAD:?} above the rule with a {COOLDOWN_S} s cooldown fires at least twice: {fired:#?}"
    );
    assert!(
        fired.len() as u64 <= LOAD.as_secs() / COOLDOWN_S + 2,
        "{fired:#?}"
    );
    // The cooldown, on the registries' own clock: the firings' `at` (taken when a registry
    // claims the firing) are at least `cooldown_s` apart, whichever registry fired.
    let ats: Vec<u64> = fired.iter().map(|(_, b)| at_ms(b)).collect();
    for pair in ats.windows(2) {
        assert!(
            pair[1] >= pair[0] + COOLDOWN_S * 1000,
            "two firings {} ms apart, inside the {COOLDOWN_S} s cooldown: {fired:#?}",
            pair[1].saturating_sub(pair[0])
        );
    }
    assert!(fired[0].0 > load_start);
    for (_, body) in &fired {
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["action", "at", "cluster", "rps", "rule"], "{body}");
        assert_eq!(body["cluster"], "shop");
        assert_eq!(body["action"], "up");
        assert_eq!(body["rule"], 0);
        assert!(body["rps"].as_f64().unwrap() > THRESHOLD, "{body}");
        assert!(body["rps"].as_f64().unwrap() < rps * 1.5, "{body}");
        assert!(body["at"].as_str().unwrap().ends_with('Z'), "{body}");
    }

    // The events (newest first) and the audit log: the first call failed (500), the rest ok.
    let events = reg.get("/clusters/shop/autoscale/events").await.expect(200);
    let items = events.body["items"].as_array().unwrap();
    assert_eq!(items.len(), fired.len(), "{:#}", events.body);
    let oldest = items.last().unwrap();
    assert_eq!(oldest["outcome"], "failed", "{oldest:#}");
    assert!(oldest["error"].as_str().unwrap().contains("500"));
    assert!(items[..items.len() - 1]
        .iter()
        .all(|e| e["outcome"] == "ok" && e["kind"] == "autoscale"));
    let actions = reg.audit_actions(200).await;
    assert_eq!(
        actions.iter().filter(|a| *a == "cluster.autoscale").count(),
        fired.len()
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| *a == "cluster.autoscale.webhook_failed")
            .count(),
        1
    );
    let o = reg.get("/clusters/shop/overview").await.expect(200);
    assert_eq!(o.body["events"].as_array().unwrap().len(), fired.len());
    assert!(o.body["rps"].as_f64().is_some(), "{:#}", o.body);

    // Sleep marking: with sleep_url and idle_s 1, the idle cluster is put to sleep once.
    const IDLE_S: u64 = 1;
    let mut with_sleep = reg.get("/clusters/shop").await.expect(200).body;
    with_sleep["sleep"] = json!({"wake_url": format!("{hook}/wake"),
                                 "sleep_url": format!("{hook}/sleep"), "idle_s": IDLE_S});
    // `sleep` needs active health checks (they tell the gateway when the backend is awake).
    with_sleep["health_check"] = json!({"path": "/healthz", "interval_ms": 500});
    let put_at = Instant::now();
    reg.put("/clusters/shop", &with_sleep).await.expect(200);
    assert!(
        wait_for_calls(&got, "/sleep", 1, Duration::from_secs(20)).await,
        "sleep_url was not called"
    );
    let slept = calls(&got, "/sleep");
    assert!(slept[0].0.duration_since(put_at) >= Duration::from_secs(IDLE_S));
    assert_eq!(slept[0].1["cluster"], "shop");
    assert_eq!(slept[0].1["idle_s"], IDLE_S);
    // Still idle for two more idle periods, both registries evaluating: not called again.
    wait_evaluated(
        &regs,
        "shop",
        now_ms() + 2 * IDLE_S * 1000,
        |r| r == 0.0,
        "rounds two idle periods after the sleep call",
    )
    .await;
    assert_eq!(
        calls(&got, "/sleep").len(),
        1,
        "called again while still idle"
    );
    // Traffic, then idle again: called once more.
    assert_eq!(
        signed_get(&http, &base, "/v1/shop.ping", (APP, SECRET)).await,
        200
    );
    assert!(
        wait_for_calls(&got, "/sleep", 2, Duration::from_secs(20)).await,
        "sleep_url was not called after the next idle period"
    );
    // The audit record is written after the call returns: wait for it.
    let deadline = Instant::now() + Duration::from_secs(15);
    let sleeps = loop {
        let audit = reg.get("/audit?limit=200").await.expect(200);
        let sleeps = audit.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"] == "cluster.sleep")
            .count();
        if sleeps >= 2 || Instant::now() > deadline {
            break sleeps;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(sleeps, 2);
    assert!(calls(&got, "/wake").is_empty(), "the registry never wakes");
    gw.assert_alive();
}

async fn wait_for_calls(got: &Received, path: &str, n: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if calls(got, path).len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
