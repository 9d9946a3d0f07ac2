//! The edge over real HTTP: a real gateway process in standalone mode, the real demo backend,
//! free loopback ports. Each test builds its own tree so tests never share state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A tree with the demo backend behind a few APIs, three apps, a switch and an IP ACL.
fn standard_tree(backend: &BackendProcess) -> ConfigTree {
    let t = ConfigTree::new();
    t.put("clusters/demo-http", &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string(), "weight": 1}]}));
    t.put(
        "clusters/dead-http",
        &json!({"protocol": "http", "endpoints": [{"addr": format!("127.0.0.1:{}", free_port())}]}),
    );
    t.put(
        "apps/merchant-1",
        &json!({"secret": SECRET, "status": "active", "apis": ["*"]}),
    );
    t.put(
        "apps/merchant-2",
        &json!({"secret": "another-secret", "status": "active", "apis": ["order.get"]}),
    );
    t.put(
        "apps/merchant-off",
        &json!({"secret": "disabled-secret", "status": "disabled", "apis": ["*"]}),
    );
    t.put("apis/order.get", &json!({
        "id": "order.get", "version": 1,
        "http": {"method": "GET", "path": "/v1/orders/{order_id}"},
        "backend": {"cluster": "demo-http", "timeout_ms": 2000, "http": {"path": "/orders/{order_id}"}},
        "auth": "signature"
    }));
    t.put(
        "apis/order.create",
        &json!({
            "id": "order.create", "version": 1,
            "http": {"method": "POST", "path": "/v1/orders", "body": "*"},
            "backend": {"cluster": "demo-http", "timeout_ms": 2000, "http": {"path": "/orders"}},
            "auth": "signature"
        }),
    );
    t.put("apis/echo.any", &json!({
        "id": "echo.any",
        "http": {"method": "GET", "path": "/v1/echo/{rest=**}"},
        "backend": {"cluster": "demo-http", "timeout_ms": 300, "http": {"path": "/echo/{rest}"}},
        "auth": "signature"
    }));
    t.put(
        "apis/public.health",
        &json!({
            "id": "public.health",
            "http": {"method": "GET", "path": "/v1/health"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "none"
        }),
    );
    t.put(
        "apis/limited.get",
        &json!({
            "id": "limited.get",
            "http": {"method": "GET", "path": "/v1/limited"},
            "backend": {"cluster": "demo-http", "http": {"path": "/health"}},
            "auth": "signature",
            "policy": {"rate_limits": [{"key": "app", "limit": 2, "per": "minute"}]}
        }),
    );
    t.put(
        "apis/dead.get",
        &json!({
            "id": "dead.get",
            "http": {"method": "GET", "path": "/v1/dead"},
            "backend": {"cluster": "dead-http", "timeout_ms": 500, "http": {}},
            "auth": "signature"
        }),
    );
    t.put(
        "apis/small.post",
        &json!({
            "id": "small.post",
            "http": {"method": "POST", "path": "/v1/small", "body": "*"},
            "backend": {"cluster": "demo-http", "http": {"path": "/echo"}},
            "auth": "signature",
            "policy": {"max_body_bytes": 16}
        }),
    );
    t.put(
        "apis/promo.list",
        &json!({
            "id": "promo.list",
            "http": {"method": "GET", "path": "/v1/promos"},
            "backend": {"cluster": "demo-http", "http": {"path": "/echo"}},
            "auth": "signature"
        }),
    );
    t.put(
        "apis/stock.get",
        &json!({
            "id": "stock.get",
            "http": {"method": "GET", "path": "/v1/stock"},
            "backend": {"cluster": "demo-http", "http": {"path": "/echo"}},
            "auth": "signature"
        }),
    );
    t.put(
        "switches/promo.list",
        &json!({
            "degraded": true, "reason": "db failover", "updated_by": "sre-alice",
            "fallback": {"status": 200, "headers": {"X-Degraded": "1"}, "body": {"items": []}}
        }),
    );
    t.put(
        "switches/stock.get",
        &json!({"degraded": true, "reason": "inventory maintenance"}),
    );
    t.put(
        "ipacl",
        &json!({"deny": ["127.0.0.66/32", "2001:db8::/32"], "allow": []}),
    );
    t
}

struct Env {
    tree: ConfigTree,
    backend: BackendProcess,
    gw: GatewayProcess,
    http: reqwest::blocking::Client,
}

fn env() -> Env {
    let backend = BackendProcess::start_http().expect("demo backend");
    let tree = standard_tree(&backend);
    let gw = GatewayProcess::start(tree.path(), &[]);
    Env {
        tree,
        backend,
        gw,
        http: client(),
    }
}

/// docs/SECURITY.md, "Replays": without Redis, a signed call accepted before a restart is never
/// accepted again after it (the nonces died with the process; calls signed before the new
/// process started are refused, docs/SECURITY.md, "Replays").
#[test]
fn a_call_captured_before_a_restart_is_refused_after_it() {
    let mut e = env();
    let (ts, n) = (now_ms(), nonce());
    let call = |gw: &GatewayProcess| {
        signed_at(
            &e.http,
            "GET",
            &gw.url("/v1/orders/42"),
            KEY,
            SECRET,
            None,
            ts,
            &n,
        )
        .send()
        .unwrap()
    };
    assert_eq!(call(&e.gw).status(), 200);
    assert_eq!(code_of(call(&e.gw)).1, "NONCE_REPLAYED");
    // The same gateway, restarted on the same configuration.
    e.gw = GatewayProcess::start(e.tree.path(), &[]);
    let (s, c, v) = code_of(call(&e.gw));
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_EXPIRED"), "{v}");
    // A call signed now is served.
    let fresh = signed(
        &e.http,
        "GET",
        &e.gw.url("/v1/orders/42"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    assert_eq!(fresh.status(), 200);
}

#[test]
fn signed_get_reaches_the_backend_with_the_rewritten_path() {
    let e = env();
    let resp = signed(
        &e.http,
        "GET",
        &e.gw.url("/v1/orders/42"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-portico-request-id").is_some());
    let v: Value = resp.json().unwrap();
    assert_eq!(v["order_id"], "42");
    // Access log line with the API, app and upstream.
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&e.gw.access_log)
            .unwrap_or_default()
            .contains("\"api\":\"order.get\"")
    }));
    let line = std::fs::read_to_string(&e.gw.access_log).unwrap();
    let rec: Value = serde_json::from_str(line.lines().last().unwrap()).unwrap();
    assert_eq!(rec["app_key"], KEY);
    assert_eq!(rec["status"], 200);
    assert_eq!(rec["upstream"], e.backend.http.to_string());
    assert!(rec["latency_us"].as_u64().unwrap() > 0);
}

#[test]
fn signed_post_forwards_the_body_and_query() {
    let e = env();
    let body = br#"{"item":"book","qty":2}"#;
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
    assert_eq!(v["created"]["item"], "book");

    let resp = signed(
        &e.http,
        "GET",
        &e.gw.url("/v1/echo/a/b%20c?x=1&y=2"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().unwrap();
    assert_eq!(v["query"], "x=1&y=2");
    assert!(v["path"].as_str().unwrap().starts_with("/echo/a/b"), "{v}");
    assert!(v["headers"]["x-portico-request-id"].is_string());
}

#[test]
fn request_id_is_kept_when_well_formed_and_made_otherwise() {
    let e = env();
    let resp = e
        .http
        .get(e.gw.url("/v1/health"))
        .header("X-Portico-Request-Id", "abc.DEF-123_x")
        .send()
        .unwrap();
    assert_eq!(resp.headers()["x-portico-request-id"], "abc.DEF-123_x");
    let resp = e
        .http
        .get(e.gw.url("/v1/health"))
        .header("X-Portico-Request-Id", "bad id!")
        .send()
        .unwrap();
    let rid = resp.headers()["x-portico-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(rid, "bad id!");
    assert!(!rid.is_empty());
    // Refusals carry it in the envelope too.
    let resp = e
        .http
        .get(e.gw.url("/nope"))
        .header("X-Portico-Request-Id", "rid-404")
        .send()
        .unwrap();
    let (status, code, v) = code_of(resp);
    assert_eq!((status, code.as_str()), (404, "API_NOT_FOUND"));
    assert_eq!(v["request_id"], "rid-404");
}

#[test]
fn signature_failures_are_401_and_never_reach_the_backend() {
    let e = env();
    let url = e.gw.url("/v1/orders/42");
    let before = backend_requests(&e.backend);

    let (s, c, _) = code_of(e.http.get(&url).send().unwrap());
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_MISSING"));

    let (s, c, _) = code_of(
        signed(&e.http, "GET", &url, KEY, "wrong-secret", None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_INVALID"));

    let old = now_ms() - 301_000;
    let (s, c, _) = code_of(
        signed_at(&e.http, "GET", &url, KEY, SECRET, None, old, &nonce())
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_EXPIRED"));
    let future = now_ms() + 301_000;
    let (s, c, _) = code_of(
        signed_at(&e.http, "GET", &url, KEY, SECRET, None, future, &nonce())
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_EXPIRED"));

    // An unknown app key and a known key's wrong signature cannot be told apart (docs/SECURITY.md,
    // "Threat model"): same status, code and message, the app key and nonce aside.
    let (ts, n) = (now_ms(), nonce());
    let (s, c, unknown) = code_of(
        signed_at(&e.http, "GET", &url, "nobody-9", SECRET, None, ts, &n)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_INVALID"));
    let (s2, c2, wrong) = code_of(
        signed_at(&e.http, "GET", &url, KEY, "not-the-secret", None, ts, &n)
            .send()
            .unwrap(),
    );
    assert_eq!((s2, c2), (s, c));
    let text =
        |v: &serde_json::Value, key: &str| v["message"].as_str().unwrap().replace(key, "KEY");
    assert_eq!(text(&unknown, "nobody-9"), text(&wrong, KEY));

    // A body that differs from the signed one.
    let sent = signed(
        &e.http,
        "POST",
        &e.gw.url("/v1/orders"),
        KEY,
        SECRET,
        Some(b"{\"qty\":1}"),
    )
    .body("{\"qty\":9}")
    .send()
    .unwrap();
    let (s, c, _) = code_of(sent);
    assert_eq!((s, c.as_str()), (401, "SIGNATURE_INVALID"));

    assert_eq!(
        backend_requests(&e.backend),
        before,
        "the backend was touched"
    );
}

#[test]
fn a_replayed_nonce_is_refused() {
    let e = env();
    let url = e.gw.url("/v1/orders/7");
    let ts = now_ms();
    let n = nonce();
    let first = signed_at(&e.http, "GET", &url, KEY, SECRET, None, ts, &n)
        .send()
        .unwrap();
    assert_eq!(first.status(), 200);
    let before = backend_requests(&e.backend);
    let (s, c, _) = code_of(
        signed_at(&e.http, "GET", &url, KEY, SECRET, None, ts, &n)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (401, "NONCE_REPLAYED"));
    assert_eq!(backend_requests(&e.backend), before);
}

#[test]
fn permissions_and_ip_acl_are_403() {
    let e = env();
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/orders"),
            "merchant-2",
            "another-secret",
            Some(b"{}"),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (403, "APP_FORBIDDEN"));
    let ok = signed(
        &e.http,
        "GET",
        &e.gw.url("/v1/orders/1"),
        "merchant-2",
        "another-secret",
        None,
    )
    .send()
    .unwrap();
    assert_eq!(ok.status(), 200);
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "GET",
            &e.gw.url("/v1/orders/1"),
            "merchant-off",
            "disabled-secret",
            None,
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (403, "APP_DISABLED"));

    let blocked = reqwest::blocking::Client::builder()
        .local_address("127.0.0.66".parse::<std::net::IpAddr>().unwrap())
        .no_proxy()
        .build()
        .unwrap();
    let before = backend_requests(&e.backend);
    let (s, c, _) = code_of(blocked.get(e.gw.url("/v1/health")).send().unwrap());
    assert_eq!((s, c.as_str()), (403, "IP_BLOCKED"));
    assert_eq!(backend_requests(&e.backend), before);
}

#[test]
fn unknown_routes_and_dot_segments() {
    let e = env();
    let (s, c, _) = code_of(e.http.get(e.gw.url("/v2/none")).send().unwrap());
    assert_eq!((s, c.as_str()), (404, "API_NOT_FOUND"));
    // HTTP clients resolve dot segments before sending, so these go over a raw socket.
    for p in [
        "/v1/orders/../echo/x",
        "/v1/orders/%2e%2e/x",
        "/v1/./health",
        "/v1/orders/%2E",
        "/v1/echo/a/%2E%2e/b",
    ] {
        let (status, body) = raw_get(e.gw.listen, p);
        assert_eq!(status, 400, "{p}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["code"], "BAD_REQUEST", "{p}");
    }
    assert_eq!(backend_requests(&e.backend), 0);
}

/// Sends `GET path` exactly as given and returns the status and body.
fn raw_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        sock,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

#[test]
fn router_style_calls_the_same_api() {
    let e = env();
    let body = br#"{"item":"pen","qty":1}"#;
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
    let v: Value = resp.json().unwrap();
    assert_eq!(v["created"]["item"], "pen");
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/router?method=no.such"),
            KEY,
            SECRET,
            Some(b"{}"),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (404, "API_NOT_FOUND"));
}

#[test]
fn oversize_bodies_are_413() {
    let e = env();
    let before = backend_requests(&e.backend);
    let big = vec![b'x'; 64];
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/small"),
            KEY,
            SECRET,
            Some(&big),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (413, "BODY_TOO_LARGE"));
    // The gateway-wide default (1 MiB).
    let huge = vec![b'x'; 1024 * 1024 + 1];
    let (s, c, _) = code_of(
        signed(
            &e.http,
            "POST",
            &e.gw.url("/v1/orders"),
            KEY,
            SECRET,
            Some(&huge),
        )
        .send()
        .unwrap(),
    );
    assert_eq!((s, c.as_str()), (413, "BODY_TOO_LARGE"));
    assert_eq!(backend_requests(&e.backend), before);
}

#[test]
fn rate_limits_answer_429_with_retry_after() {
    let e = env();
    let url = e.gw.url("/v1/limited");
    for _ in 0..2 {
        assert_eq!(
            signed(&e.http, "GET", &url, KEY, SECRET, None)
                .send()
                .unwrap()
                .status(),
            200
        );
    }
    let resp = signed(&e.http, "GET", &url, KEY, SECRET, None)
        .send()
        .unwrap();
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    let (s, c, _) = code_of(resp);
    assert_eq!((s, c.as_str()), (429, "RATE_LIMITED"));
}

#[test]
fn degraded_apis_answer_their_fallback_without_the_backend() {
    let e = env();
    let before = backend_requests(&e.backend);
    let resp = signed(&e.http, "GET", &e.gw.url("/v1/promos"), KEY, SECRET, None)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-degraded"], "1");
    assert!(resp.headers().get("x-portico-request-id").is_some());
    let v: Value = resp.json().unwrap();
    assert_eq!(v, json!({"items": []}));
    let (s, c, v) = code_of(
        signed(&e.http, "GET", &e.gw.url("/v1/stock"), KEY, SECRET, None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (503, "API_DEGRADED"));
    // The switch's public message; its reason is for operators only (docs/SECURITY.md, "No
    // internals in answers").
    assert_eq!(v["message"], "the API is temporarily unavailable", "{v}");
    assert!(!v.to_string().contains("inventory maintenance"), "{v}");
    assert_eq!(backend_requests(&e.backend), before);
    // Both are counted as deliberate degradations, the fallback under its own code
    // (docs/operations/history-and-reports.md, "Availability and degraded answers"), and neither as a rejection.
    let metrics = e.gw.metrics();
    let line = |needle: &str| {
        metrics
            .lines()
            .any(|l| l.contains(needle) && !l.starts_with('#'))
    };
    assert!(
        line("portico_requests_total{api=\"promo.list\",code=\"DEGRADED_FALLBACK\",plane=\"live\",status=\"200\"}"),
        "{metrics}"
    );
    assert!(
        line("code=\"API_DEGRADED\",plane=\"live\",status=\"503\"}"),
        "{metrics}"
    );
    assert!(
        !line("portico_rejections_total{code=\"DEGRADED_FALLBACK\""),
        "{metrics}"
    );
}

#[test]
fn upstream_failures_are_502_and_504() {
    let e = env();
    let (s, c, _) = code_of(
        signed(&e.http, "GET", &e.gw.url("/v1/dead"), KEY, SECRET, None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (502, "UPSTREAM_ERROR"));
    let started = std::time::Instant::now();
    let slow = signed(
        &e.http,
        "GET",
        &e.gw.url("/v1/echo/slow"),
        KEY,
        SECRET,
        None,
    )
    .header("X-Demo-Delay-Ms", "3000");
    let (s, c, _) = code_of(slow.send().unwrap());
    assert_eq!((s, c.as_str()), (504, "UPSTREAM_TIMEOUT"));
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the 300 ms deadline was not enforced"
    );
    // Backend errors pass through as the backend's answer.
    let resp = signed(
        &e.http,
        "GET",
        &e.gw.url("/v1/echo/x?status=500"),
        KEY,
        SECRET,
        None,
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 500);
}

#[test]
fn an_edited_file_applies_without_restart() {
    let e = env();
    let url = e.gw.url("/v1/orders/1");
    assert_eq!(
        signed(&e.http, "GET", &url, KEY, SECRET, None)
            .send()
            .unwrap()
            .status(),
        200
    );
    let digest = e.gw.digest();
    e.tree.put(
        "switches/order.get",
        &json!({"degraded": true, "reason": "flash sale"}),
    );
    assert!(e.gw.wait_for_new_config(&digest));
    let (s, c, _) = code_of(
        signed(&e.http, "GET", &url, KEY, SECRET, None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (503, "API_DEGRADED"));
    let digest = e.gw.digest();
    e.tree
        .put("switches/order.get", &json!({"degraded": false}));
    assert!(e.gw.wait_for_new_config(&digest));
    assert_eq!(
        signed(&e.http, "GET", &url, KEY, SECRET, None)
            .send()
            .unwrap()
            .status(),
        200
    );
}

#[test]
fn a_broken_document_is_rejected_alone() {
    let e = env();
    let digest = e.gw.digest();
    // Another team breaks its API document, and breaks an existing one ...
    e.tree.put_raw("apis/broken.new", b"{ this is not json");
    e.tree.put(
        "apis/order.create",
        &json!({"id": "order.create", "http": {"method": "POST", "path": "/v1/orders"},
        "backend": {"cluster": "no-such-cluster", "http": {}}}),
    );
    // ... while an SRE flips a switch: the switch must apply.
    e.tree.put(
        "switches/order.get",
        &json!({"degraded": true, "reason": "sre switch"}),
    );
    assert!(e.gw.wait_for_new_config(&digest));
    let (s, c, _) = code_of(
        signed(&e.http, "GET", &e.gw.url("/v1/orders/1"), KEY, SECRET, None)
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (503, "API_DEGRADED"));
    // The broken update of order.create is refused and its last good version still serves.
    let resp = signed(
        &e.http,
        "POST",
        &e.gw.url("/v1/orders"),
        KEY,
        SECRET,
        Some(b"{\"a\":1}"),
    )
    .send()
    .unwrap();
    assert_eq!(resp.status(), 200);
    let status = e.gw.status();
    let rejected: Vec<String> = status["rejected_documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect();
    assert!(rejected.contains(&"apis/broken.new".to_owned()), "{status}");
    assert!(
        rejected.contains(&"apis/order.create".to_owned()),
        "{status}"
    );
    let metrics = e.gw.metrics();
    assert!(
        metrics.contains("portico_config_rejected_documents{plane=\"live\"} 2"),
        "{metrics}"
    );
    // Other APIs keep serving.
    assert_eq!(
        e.http.get(e.gw.url("/v1/health")).send().unwrap().status(),
        200
    );
}

#[test]
fn admin_endpoints_report_health_status_and_metrics() {
    let e = env();
    let _ = signed(&e.http, "GET", &e.gw.url("/v1/orders/9"), KEY, SECRET, None)
        .send()
        .unwrap();
    let h = e
        .http
        .get(format!("http://{}/healthz", e.gw.admin))
        .send()
        .unwrap();
    assert_eq!(h.status(), 200);
    let status = e.gw.status();
    assert_eq!(status["ready"], true);
    assert!(status["apis_loaded"].as_u64().unwrap() >= 8);
    assert!(status["config_source"]
        .as_str()
        .unwrap()
        .starts_with("dir:"));
    let m = e.gw.metrics();
    assert!(
        m.contains(
            "portico_requests_total{api=\"order.get\",code=\"OK\",plane=\"live\",status=\"200\"} 1"
        ),
        "{m}"
    );
    assert!(m.contains("portico_request_duration_seconds_bucket{api=\"order.get\""));
    assert!(m.contains("portico_config_generation"));
}
