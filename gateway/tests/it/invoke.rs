//! The invoke tier over real processes: transcoded gRPC calls through the gateway, per-API
//! bulkheads and circuit breakers on real calls, and isolation of a hanging backend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use serde_json::{json, Value};
use sha2::Digest;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Env {
    tree: ConfigTree,
    backend: BackendProcess,
    gw: GatewayProcess,
    http: reqwest::blocking::Client,
}

fn env(extra: impl FnOnce(&ConfigTree, &str)) -> Env {
    let backend = BackendProcess::start_http_grpc().expect("demo backend");
    let grpc = backend.grpc.expect("grpc listener").to_string();
    let t = ConfigTree::new();
    let fds = portico_demo::descriptor_set_bytes();
    let sha = hex::encode(sha2::Sha256::digest(fds));
    std::fs::create_dir_all(t.path().join("descriptors")).unwrap();
    std::fs::write(t.path().join(format!("descriptors/{sha}.pb")), fds).unwrap();
    t.put(
        "clusters/grpc",
        &json!({"protocol": "grpc", "endpoints": [{"addr": grpc}]}),
    );
    t.put(
        "clusters/http",
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]}),
    );
    t.put("apps/merchant-1", &json!({"secret": SECRET, "apis": ["*"]}));
    t.put("apis/order.get", &json!({
        "id": "order.get",
        "http": {"method": "GET", "path": "/v1/orders/{order_id}",
                 "additional_bindings": [{"method": "GET", "path": "/v1/shops/{shop.id}/orders/{order_id}"}]},
        "backend": {"cluster": "grpc", "timeout_ms": 1000,
                    "grpc": {"service": "demo.order.v1.OrderService", "method": "GetOrder", "descriptor": sha}},
        "auth": "signature"
    }));
    t.put("apis/order.create", &json!({
        "id": "order.create",
        "http": {"method": "POST", "path": "/v1/orders", "body": "*"},
        "backend": {"cluster": "grpc", "timeout_ms": 1000,
                    "grpc": {"service": "demo.order.v1.OrderService", "method": "CreateOrder", "descriptor": sha}},
        "auth": "signature"
    }));
    extra(&t, &sha);
    let gw = GatewayProcess::start(t.path(), &[]);
    Env {
        tree: t,
        backend,
        gw,
        http: client(),
    }
}

fn get(e: &Env, path: &str) -> reqwest::blocking::RequestBuilder {
    signed(&e.http, "GET", &e.gw.url(path), KEY, SECRET, None)
}

#[test]
fn transcoded_grpc_calls_answer_json() {
    let e = env(|_, _| {});
    let resp = get(&e, "/v1/orders/42")
        .header("X-Portico-Request-Id", "rid-grpc-1")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.headers()["x-portico-request-id"], "rid-grpc-1");
    let v: Value = resp.json().unwrap();
    assert_eq!(v["orderId"], "42", "{v}");
    assert_eq!(v["requestId"], "rid-grpc-1", "{v}");

    // An additional binding with a nested path variable.
    let v: Value = get(&e, "/v1/shops/s-9/orders/7")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["orderId"], "7", "{v}");

    // body: "*" with a signed body, through the RESTful path and the router style.
    let body = br#"{"item":"book","qty":2,"unknownField":true}"#;
    let resp = signed(
        &e.http,
        "POST",
        &e.gw.url("/v1/orders"),
        KEY,
        SECRET,
        Some(body),
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().unwrap();
    assert_eq!(v["item"], "book", "{v}");
    let resp = signed(
        &e.http,
        "POST",
        &e.gw.url("/router?method=order.create"),
        KEY,
        SECRET,
        Some(body),
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
}

#[test]
fn grpc_statuses_and_bad_input_map_to_the_envelope() {
    let e = env(|_, _| {});
    let (s, c, v) = code_of(get(&e, "/v1/orders/missing").send().unwrap());
    assert_eq!((s, c.as_str()), (404, "NOT_FOUND"));
    assert!(v["message"].as_str().unwrap().contains("not found"), "{v}");
    assert!(v["request_id"].is_string());

    let bad = br#"{"item":"book","qty":0}"#;
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/orders"),
            KEY,
            SECRET,
            Some(bad),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (400, "INVALID_ARGUMENT"));

    let (s, c, _) = code_of(
        get(&e, "/v1/orders/1")
            .header("grpc-metadata-x-demo-status", "UNAVAILABLE")
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (503, "UNAVAILABLE"));

    // Wrong JSON type: a 400 naming the field.
    let wrong = br#"{"item":"book","qty":"lots"}"#;
    let (s, c, v) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/orders"),
            KEY,
            SECRET,
            Some(wrong),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"));
    assert!(v["message"].as_str().unwrap().contains("qty"), "{v}");

    // Unparseable JSON and a 100k-deep body: 400, never a crash.
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/orders"),
            KEY,
            SECRET,
            Some(b"{not json"),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/orders"),
            KEY,
            SECRET,
            Some(deep.as_bytes()),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"));
    // The gateway is still there.
    assert_eq!(get(&e, "/v1/orders/1").send().unwrap().status(), 200);

    // A deadline beyond the API's timeout: 504.
    let (s, c, _) = code_of(
        get(&e, "/v1/orders/1")
            .header("grpc-metadata-x-demo-delay-ms", "3000")
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (504, "UPSTREAM_TIMEOUT"));
}

#[test]
fn a_full_bulkhead_refuses_at_once() {
    let e = env(|t, _| {
        t.put(
            "apis/slow.get",
            &json!({
                "id": "slow.get",
                "http": {"method": "GET", "path": "/v1/slow"},
                "backend": {"cluster": "http", "timeout_ms": 5000, "http": {"path": "/echo"}},
                "auth": "none",
                "policy": {"bulkhead": {"max_concurrent": 2}}
            }),
        );
    });
    let url = e.gw.url("/v1/slow");
    let statuses: Vec<(u16, String, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let url = url.clone();
                s.spawn(move || {
                    let started = Instant::now();
                    let resp = client()
                        .get(&url)
                        .header("X-Demo-Delay-Ms", "1500")
                        .send()
                        .unwrap();
                    let (status, code, _) = code_of(resp);
                    (status, code, started.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = statuses.iter().filter(|(s, _, _)| *s == 200).count();
    let full: Vec<_> = statuses
        .iter()
        .filter(|(_, c, _)| c == "BULKHEAD_FULL")
        .collect();
    assert_eq!(ok, 2, "{statuses:?}");
    assert_eq!(full.len(), 4, "{statuses:?}");
    for (status, _, took) in &full {
        assert_eq!(*status, 503);
        assert!(
            *took < Duration::from_millis(1400),
            "BULKHEAD_FULL waited for the backend: {took:?}"
        );
    }
}

#[test]
fn the_breaker_opens_probes_and_closes() {
    let e = env(|t, _| {
        t.put(
            "apis/flaky.get",
            &json!({
                "id": "flaky.get",
                "http": {"method": "GET", "path": "/v1/flaky"},
                "backend": {"cluster": "http", "timeout_ms": 2000, "http": {"path": "/echo"}},
                "auth": "none",
                "policy": {"breaker": {"consecutive_failures": 3, "open_ms": 1000}}
            }),
        );
    });
    let url = e.gw.url("/v1/flaky");
    for _ in 0..3 {
        let r = e
            .http
            .get(&url)
            .header("X-Demo-Status", "500")
            .send()
            .unwrap();
        assert_eq!(r.status(), 500);
    }
    // Open: answered at once, the backend untouched.
    let before = backend_requests(&e.backend);
    let resp = e.http.get(&url).send().unwrap();
    assert!(resp.headers().get("retry-after").is_some());
    let (s, c, _) = code_of(resp);
    assert_eq!((s, c.as_str()), (503, "CIRCUIT_OPEN"));
    assert_eq!(backend_requests(&e.backend), before);
    let status = e.gw.status();
    assert_eq!(status["invoke"]["flaky.get"]["breaker"], "open", "{status}");
    assert!(e
        .gw
        .metrics()
        .contains("portico_breaker_state{api=\"flaky.get\",plane=\"live\"} 1"));

    // After open_ms one probe goes through; a failing probe re-opens.
    assert!(wait_until(Duration::from_secs(5), || e.gw.status()
        ["invoke"]["flaky.get"]["breaker"]
        == "half_open"));
    let r = e
        .http
        .get(&url)
        .header("X-Demo-Status", "503")
        .send()
        .unwrap();
    assert_eq!(r.status(), 503);
    let (s, c, _) = code_of(e.http.get(&url).send().unwrap());
    assert_eq!((s, c.as_str()), (503, "CIRCUIT_OPEN"));

    // A successful probe closes it.
    assert!(wait_until(Duration::from_secs(5), || e.gw.status()
        ["invoke"]["flaky.get"]["breaker"]
        == "half_open"));
    assert_eq!(e.http.get(&url).send().unwrap().status(), 200);
    assert_eq!(e.gw.status()["invoke"]["flaky.get"]["breaker"], "closed");
    assert_eq!(e.http.get(&url).send().unwrap().status(), 200);
}

#[test]
fn grpc_breaker_trips_on_unavailable() {
    let e = env(|t, sha| {
        t.put("apis/order.status", &json!({
            "id": "order.status",
            "http": {"method": "GET", "path": "/v1/orders/{order_id}/status", "response_body": "status"},
            "backend": {"cluster": "grpc", "timeout_ms": 1000,
                        "grpc": {"service": "demo.order.v1.OrderService", "method": "GetOrderStatus", "descriptor": sha}},
            "auth": "none",
            "policy": {"breaker": {"consecutive_failures": 2, "open_ms": 60000}}
        }));
    });
    let url = e.gw.url("/v1/orders/5/status");
    let ok = e.http.get(&url).send().unwrap();
    assert_eq!(ok.status(), 200);
    for _ in 0..2 {
        let (s, c, _) = code_of(
            e.http
                .get(&url)
                .header("grpc-metadata-x-demo-status", "14")
                .send()
                .unwrap(),
        );
        assert_eq!((s, c.as_str()), (503, "UNAVAILABLE"));
    }
    let (s, c, _) = code_of(e.http.get(&url).send().unwrap());
    assert_eq!((s, c.as_str()), (503, "CIRCUIT_OPEN"));
    // Other APIs on the same backend are not affected.
    assert_eq!(get(&e, "/v1/orders/1").send().unwrap().status(), 200);
}

#[test]
fn a_hanging_backend_costs_only_its_own_api() {
    let e = env(|t, _| {
        t.put("apis/a.hang", &json!({
            "id": "a.hang",
            "http": {"method": "GET", "path": "/v1/a"},
            "backend": {"cluster": "http", "timeout_ms": 300, "http": {"path": "/echo"}},
            "auth": "none",
            "policy": {"bulkhead": {"max_concurrent": 4}, "breaker": {"consecutive_failures": 1000}}
        }));
        t.put(
            "apis/b.ok",
            &json!({
                "id": "b.ok",
                "http": {"method": "GET", "path": "/v1/b"},
                "backend": {"cluster": "http", "timeout_ms": 2000, "http": {"path": "/health"}},
                "auth": "none"
            }),
        );
    });
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a_answers = Arc::new(AtomicUsize::new(0));
    let a_bad = Arc::new(std::sync::Mutex::new(Vec::new()));
    let a_slowest = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let url_a = e.gw.url("/v1/a");
    let url_b = e.gw.url("/v1/b");
    std::thread::scope(|s| {
        // 16 callers keep A busy; its backend never answers.
        for _ in 0..16 {
            let (stop, n, bad, slowest, url) = (
                stop.clone(),
                a_answers.clone(),
                a_bad.clone(),
                a_slowest.clone(),
                url_a.clone(),
            );
            s.spawn(move || {
                let c = client();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let resp = c.get(&url).header("X-Demo-Hang", "1").send().unwrap();
                    let took = started.elapsed();
                    let (status, code, _) = code_of(resp);
                    n.fetch_add(1, Ordering::Relaxed);
                    if !matches!(
                        (status, code.as_str()),
                        (504, "UPSTREAM_TIMEOUT") | (503, "BULKHEAD_FULL")
                    ) {
                        bad.lock().unwrap().push((status, code));
                    }
                    let mut m = slowest.lock().unwrap();
                    *m = (*m).max(took);
                }
            });
        }
        // Meanwhile B answers every call.
        std::thread::sleep(Duration::from_millis(300));
        let c = client();
        let mut worst = Duration::ZERO;
        for _ in 0..100 {
            let started = Instant::now();
            let resp = c.get(&url_b).send().unwrap();
            assert_eq!(resp.status(), 200);
            worst = worst.max(started.elapsed());
        }
        stop.store(true, Ordering::Relaxed);
        // Generous: B never waits on A's pool or A's deadline.
        assert!(
            worst < Duration::from_secs(1),
            "B's slowest call took {worst:?} while A hung"
        );
    });
    assert!(
        a_bad.lock().unwrap().is_empty(),
        "A answered unexpectedly: {:?}",
        a_bad.lock().unwrap()
    );
    assert!(a_answers.load(Ordering::Relaxed) >= 16);
    // A answers within its deadline (plus scheduling slack), never piling up.
    let slowest = *a_slowest.lock().unwrap();
    assert!(
        slowest < Duration::from_secs(2),
        "A's slowest answer took {slowest:?}"
    );
    let _ = &e.tree;
}
