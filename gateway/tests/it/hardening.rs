//! Hardening of the edge (docs/SECURITY.md) over real processes: the gateway and the demo backend
//! on loopback sockets. What backends receive (docs/PROTOCOL.md, "What backends receive"), what
//! failures tell merchants, bounded pre-auth work, a slow reader and the bulkhead, transcoding
//! refusals and the breaker, router-style HTTP calls, and the connection cap (docs/SECURITY.md
//! lists which test covers which defence).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use serde_json::{json, Value};
use sha2::Digest;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Env {
    _tree: ConfigTree,
    backend: BackendProcess,
    gw: GatewayProcess,
    http: reqwest::blocking::Client,
    /// A loopback port nothing listens on (the `dead` clusters).
    dead_port: u16,
}

/// The demo backend (HTTP and gRPC), and a gateway with the APIs these tests call, plus
/// whatever `extra` adds; `args` are extra gateway flags.
fn env(extra: impl FnOnce(&ConfigTree), args: &[&str]) -> Env {
    let backend = BackendProcess::start_http_grpc().expect("demo backend");
    let grpc = backend.grpc.expect("grpc listener").to_string();
    let dead_port = free_port();
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
    // The same backend under a name of its own (`host`): what its `Host` says.
    t.put(
        "clusters/http-named",
        &json!({"protocol": "http", "host": "orders.internal", "endpoints": [{"addr": backend.http.to_string()}]}),
    );
    t.put(
        "clusters/dead",
        &json!({"protocol": "http", "endpoints": [{"addr": format!("127.0.0.1:{dead_port}")}]}),
    );
    t.put(
        "clusters/grpc-dead",
        &json!({"protocol": "grpc", "endpoints": [{"addr": format!("127.0.0.1:{dead_port}")}]}),
    );
    t.put("apps/merchant-1", &json!({"secret": SECRET, "apis": ["*"]}));
    let grpc_api = |method: &str| json!({"service": "demo.order.v1.OrderService", "method": method, "descriptor": sha});
    let apis = [
        json!({"id": "echo.open", "http": {"method": "GET", "path": "/open/echo"},
               "backend": {"cluster": "http", "http": {"path": "/echo"}}, "auth": "none"}),
        json!({"id": "echo.signed", "http": {"method": "GET", "path": "/signed/echo"},
               "backend": {"cluster": "http", "http": {"path": "/echo"}}, "auth": "signature"}),
        json!({"id": "echo.named", "http": {"method": "GET", "path": "/named/echo"},
               "backend": {"cluster": "http-named", "http": {"path": "/echo"}}, "auth": "none"}),
        json!({"id": "order.get", "http": {"method": "GET", "path": "/grpc/v1/orders/{order_id}"},
               "backend": {"cluster": "grpc", "timeout_ms": 2000, "grpc": grpc_api("GetOrder")},
               "auth": "signature"}),
        json!({"id": "order.open", "http": {"method": "GET", "path": "/grpc/open/orders/{order_id}"},
               "backend": {"cluster": "grpc", "timeout_ms": 300, "grpc": grpc_api("GetOrder")},
               "auth": "none"}),
        json!({"id": "order.create", "http": {"method": "POST", "path": "/grpc/v1/orders", "body": "*"},
               "backend": {"cluster": "grpc", "timeout_ms": 2000, "grpc": grpc_api("CreateOrder")},
               "auth": "none",
               "policy": {"breaker": {"consecutive_failures": 2, "open_ms": 60000}}}),
        json!({"id": "items.get", "http": {"method": "GET", "path": "/items/{id}"},
               "backend": {"cluster": "http", "http": {}}, "auth": "none"}),
        json!({"id": "things.put", "http": {"method": "PUT", "path": "/echo/things:batchPut"},
               "backend": {"cluster": "http", "http": {}}, "auth": "none"}),
        json!({"id": "things.rewritten", "http": {"method": "DELETE", "path": "/v1/things"},
               "backend": {"cluster": "http", "http": {"path": "/echo/rewritten"}}, "auth": "none"}),
        json!({"id": "things.one", "http": {"method": "GET", "path": "/echo/things/{id}"},
               "backend": {"cluster": "http", "http": {}}, "auth": "none"}),
        json!({"id": "bytes", "http": {"method": "GET", "path": "/bytes/{n}"},
               "backend": {"cluster": "http", "timeout_ms": 60000, "http": {}}, "auth": "none",
               "policy": {"bulkhead": {"max_concurrent": 1}}}),
        json!({"id": "slow", "http": {"method": "GET", "path": "/slow/echo"},
               "backend": {"cluster": "http", "timeout_ms": 300, "http": {"path": "/echo"}},
               "auth": "none"}),
        json!({"id": "dead", "http": {"method": "GET", "path": "/dead"},
               "backend": {"cluster": "dead", "timeout_ms": 1000, "http": {}}, "auth": "none"}),
        json!({"id": "grpc.dead", "http": {"method": "GET", "path": "/grpc/dead/{order_id}"},
               "backend": {"cluster": "grpc-dead", "timeout_ms": 1000, "grpc": grpc_api("GetOrder")},
               "auth": "none"}),
    ];
    for api in apis {
        t.put(&format!("apis/{}", api["id"].as_str().unwrap()), &api);
    }
    extra(&t);
    let gw = GatewayProcess::start(t.path(), args);
    Env {
        _tree: t,
        backend,
        gw,
        http: client(),
        dead_port,
    }
}

/// The headers the demo's `/echo` received.
fn echoed(resp: reqwest::blocking::Response) -> BTreeMap<String, String> {
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().unwrap();
    serde_json::from_value(v["headers"].clone()).unwrap()
}

/// The metadata the demo's gRPC service received (`x-demo-echo-metadata`).
fn received(resp: &reqwest::blocking::Response) -> BTreeMap<String, String> {
    let raw = resp
        .headers()
        .get("grpc-metadata-x-demo-metadata")
        .expect("the demo echoes the metadata")
        .to_str()
        .unwrap();
    portico_demo::grpc::received_metadata(raw).unwrap()
}

/// What a forging client adds to its request.
fn forge(req: reqwest::blocking::RequestBuilder) -> reqwest::blocking::RequestBuilder {
    req.header("X-Portico-App", "admin")
        .header("X-Portico-Anything", "forged")
        .header("grpc-metadata-x-portico-app", "admin")
        .header("grpc-metadata-x-portico-appkey", "admin")
        .header("X-Forwarded-For", "6.6.6.6")
        .header("X-Forwarded-Proto", "https")
        .header("X-Real-IP", "6.6.6.6")
        .header("Forwarded", "for=6.6.6.6;proto=https")
        .header("Connection", "keep-alive, X-Hop-Secret")
        .header("X-Hop-Secret", "for the next hop only")
        .header("X-Tenant", "t1")
        .header("Host", "admin.internal")
        .header("X-HTTP-Method-Override", "DELETE")
        .header("X-HTTP-Method", "DELETE")
        .header("X-Method-Override", "DELETE")
        .header("X-Original-URL", "/admin/drop-all")
        .header("X-Rewrite-URL", "/admin/drop-all")
}

const SIGNATURE_HEADERS: &[&str] = &[
    "x-portico-appkey",
    "x-portico-timestamp",
    "x-portico-nonce",
    "x-portico-signature",
];

/// Keys that must never reach a backend from a forging client (besides the signature ones).
const FORGED: &[&str] = &[
    "x-portico-anything",
    "grpc-metadata-x-portico-app",
    "grpc-metadata-x-portico-appkey",
    "x-real-ip",
    "forwarded",
    "x-hop-secret",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
];

#[test]
fn forged_identity_and_signatures_never_reach_an_http_backend() {
    let e = env(|_| {}, &[]);
    // auth: none — the client's own X-Portico-App is not passed on, and none is added.
    let resp = forge(e.http.get(e.gw.url("/open/echo"))).send().unwrap();
    // The demo says `Server: portico-demo` and `X-Powered-By: axum`; merchants do not hear it.
    for k in ["server", "x-powered-by"] {
        assert!(resp.headers().get(k).is_none(), "{k}: {:?}", resp.headers());
    }
    let h = echoed(resp);
    assert!(!h.contains_key("x-portico-app"), "{h:?}");
    for k in FORGED {
        assert!(!h.contains_key(*k), "{k} reached the backend: {h:?}");
    }
    // The peer (127.0.0.1) is not a trusted proxy: the client is the peer, whatever it says.
    assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{h:?}");
    assert_eq!(h["x-forwarded-proto"], "http", "{h:?}");
    assert_eq!(h["x-tenant"], "t1");
    assert!(h["x-portico-request-id"].len() >= 8);
    // docs/SECURITY.md, "Header hygiene towards backends": the Host is the gateway's (the endpoint
    // as configured), not the client's; a cluster with `host` names that.
    assert_eq!(h["host"], e.backend.http.to_string(), "{h:?}");
    let named = echoed(forge(e.http.get(e.gw.url("/named/echo"))).send().unwrap());
    assert_eq!(named["host"], "orders.internal", "{named:?}");
    for k in FORGED {
        assert!(
            !named.contains_key(*k),
            "{k} reached the backend: {named:?}"
        );
    }

    // A signed call: X-Portico-App is the verified app; no signature header is passed on.
    let url = e.gw.url("/signed/echo");
    let h = echoed(
        forge(signed(&e.http, "GET", &url, KEY, SECRET, None))
            .header("X-Portico-Request-Id", "rid-hygiene-1")
            .send()
            .unwrap(),
    );
    assert_eq!(h["x-portico-app"], KEY, "{h:?}");
    assert_eq!(h["x-portico-request-id"], "rid-hygiene-1");
    for k in SIGNATURE_HEADERS.iter().chain(FORGED) {
        assert!(!h.contains_key(*k), "{k} reached the backend: {h:?}");
    }
    assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{h:?}");
    // A badly formed request id is replaced, not passed on.
    let h = echoed(
        e.http
            .get(e.gw.url("/open/echo"))
            .header("X-Portico-Request-Id", "bad id with spaces")
            .send()
            .unwrap(),
    );
    assert_ne!(h["x-portico-request-id"], "bad id with spaces");
}

#[test]
fn a_trusted_proxy_chain_is_passed_on_as_the_gateway_decided() {
    let e = env(
        |t| {
            t.put(
                "ipacl",
                &json!({"deny": [], "allow": [], "trusted_proxies": ["127.0.0.1/32", "10.0.0.0/8"]}),
            )
        },
        &[],
    );
    let xff = |value: &[u8]| {
        let v = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        let h = echoed(
            e.http
                .get(e.gw.url("/open/echo"))
                .header("X-Forwarded-For", v)
                .header("X-Forwarded-Proto", "https")
                .send()
                .unwrap(),
        );
        (h["x-forwarded-for"].clone(), h["x-forwarded-proto"].clone())
    };
    // The client is the right-most untrusted hop; the backend sees it and the trusted
    // proxies after it, nothing a client wrote further left.
    assert_eq!(
        xff(b"6.6.6.6, 203.0.113.9, 10.1.2.3"),
        ("203.0.113.9, 10.1.2.3, 127.0.0.1".into(), "https".into())
    );
    // A non-ASCII hop made up by the client is one malformed hop: the client a trusted proxy
    // appended after it is still the client (not the proxy).
    assert_eq!(
        xff("1.1.1.1, \u{e9}t\u{e9}, 203.0.113.9".as_bytes()).0,
        "203.0.113.9, 127.0.0.1"
    );
    assert_eq!(xff(b"\xff\xfe, 198.51.100.4").0, "198.51.100.4, 127.0.0.1");
    // Nothing to believe: the peer is the client.
    assert_eq!(xff(b"not-an-address").0, "127.0.0.1");
}

#[test]
fn grpc_metadata_carries_only_what_the_gateway_decided() {
    let e = env(|_| {}, &[]);
    let url = e.gw.url("/grpc/v1/orders/42");
    let resp = forge(signed(&e.http, "GET", &url, KEY, SECRET, None))
        .header("grpc-metadata-x-demo-echo-metadata", "1")
        .header("grpc-metadata-tenant", "t2")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let md = received(&resp);
    assert_eq!(md["x-portico-app"], KEY, "{md:?}");
    assert_eq!(md["x-forwarded-for"], "127.0.0.1", "{md:?}");
    assert_eq!(md["tenant"], "t2");
    // An allow-list (docs/PROTOCOL.md, "What backends receive"): a plain client header is not
    // metadata.
    assert!(!md.contains_key("x-tenant"), "{md:?}");
    for k in SIGNATURE_HEADERS.iter().chain(&[
        "x-portico-anything",
        "x-real-ip",
        "forwarded",
        "x-hop-secret",
    ]) {
        assert!(!md.contains_key(*k), "{k} reached the gRPC backend: {md:?}");
    }
    // auth: none over gRPC: no x-portico-app at all, even forged as grpc-metadata-.
    let resp = forge(e.http.get(e.gw.url("/grpc/open/orders/7")))
        .header("grpc-metadata-x-demo-echo-metadata", "1")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let md = received(&resp);
    assert!(!md.contains_key("x-portico-app"), "{md:?}");
    assert!(!md.contains_key("x-portico-appkey"), "{md:?}");
}

/// The body of an error answer, checked to name no address, port or transport error.
fn assert_no_internals(what: &str, resp: reqwest::blocking::Response, e: &Env) -> Value {
    let status = resp.status().as_u16();
    let body = resp.text().unwrap();
    let ports = [
        e.dead_port.to_string(),
        e.backend.http.port().to_string(),
        e.backend.grpc.unwrap().port().to_string(),
    ];
    assert!(!body.contains("127.0.0.1"), "{what}: {body}");
    for p in &ports {
        assert!(!body.contains(p.as_str()), "{what}: port {p} in {body}");
    }
    for word in ["cluster", "dead", "refused", "tcp", "transport", "injected"] {
        assert!(
            !body.to_lowercase().contains(word),
            "{what}: {word} in {body}"
        );
    }
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["request_id"].is_string() && v["message"].is_string(),
        "{body}"
    );
    assert!(status >= 500, "{what}: {status} {body}");
    v
}

#[test]
fn failures_name_no_addresses_but_the_access_log_does() {
    let e = env(|_| {}, &[]);
    let v = assert_no_internals(
        "http 502",
        e.http.get(e.gw.url("/dead")).send().unwrap(),
        &e,
    );
    assert_eq!(v["code"], "UPSTREAM_ERROR");
    let dead_rid = v["request_id"].as_str().unwrap().to_owned();
    let v = assert_no_internals(
        "grpc 502",
        e.http.get(e.gw.url("/grpc/dead/1")).send().unwrap(),
        &e,
    );
    assert_eq!(v["code"], "UPSTREAM_ERROR");
    let v = assert_no_internals(
        "http 504",
        e.http
            .get(e.gw.url("/slow/echo"))
            .header("X-Demo-Delay-Ms", "3000")
            .send()
            .unwrap(),
        &e,
    );
    assert_eq!(v["code"], "UPSTREAM_TIMEOUT");
    assert_eq!(v["message"], "the backend did not answer in time");
    let v = assert_no_internals(
        "grpc 504",
        e.http
            .get(e.gw.url("/grpc/open/orders/1"))
            .header("grpc-metadata-x-demo-delay-ms", "3000")
            .send()
            .unwrap(),
        &e,
    );
    assert_eq!(v["code"], "UPSTREAM_TIMEOUT");
    // A backend's own UNAVAILABLE (its message could be a proxy's or a transport's).
    let v = assert_no_internals(
        "grpc 503",
        e.http
            .get(e.gw.url("/grpc/open/orders/1"))
            .header("grpc-metadata-x-demo-status", "UNAVAILABLE")
            .send()
            .unwrap(),
        &e,
    );
    assert_eq!(v["code"], "UNAVAILABLE");
    // A deliberate status keeps the backend's message: it is meant for the merchant.
    let (s, c, v) = code_of(
        e.http
            .get(e.gw.url("/grpc/open/orders/missing"))
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (404, "NOT_FOUND"));
    assert!(v["message"].as_str().unwrap().contains("missing"), "{v}");
    // The access log has what the answer left out, under the request id.
    let dead = format!("127.0.0.1:{}", e.dead_port);
    let logged = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&e.gw.access_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|r| {
                r["request_id"] == dead_rid.as_str()
                    && r["detail"].as_str().is_some_and(|d| d.contains(&dead))
            })
    });
    assert!(logged, "no access log detail naming {dead} for {dead_rid}");
}

/// Reads one HTTP/1 response (head and `Content-Length` body) from `s`.
fn read_response(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if buf.len() >= end + 4 + len {
                return String::from_utf8_lossy(&buf[..end + 4 + len]).into_owned();
            }
        }
        let n = s.read(&mut chunk).expect("read a response");
        assert!(
            n > 0,
            "connection closed: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn get_on(s: &mut TcpStream, path: &str) -> String {
    write!(s, "GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n").unwrap();
    read_response(s)
}

#[test]
fn a_client_that_does_not_read_frees_the_bulkhead() {
    let e = env(|_| {}, &["--write-timeout-ms", "1500"]);
    // 64 MiB: far more than the socket buffers between the gateway and a client that
    // never reads.
    let mut stuck = TcpStream::connect(e.gw.listen).unwrap();
    write!(
        stuck,
        "GET /bytes/{} HTTP/1.1\r\nHost: gw\r\n\r\n",
        64 * 1024 * 1024
    )
    .unwrap();
    // The answer is under way: the backend served it, and the API's one slot is held.
    assert!(wait_until(Duration::from_secs(20), || {
        backend_requests(&e.backend) >= 1
    }));
    let started = Instant::now();
    let mut saw_full = false;
    let freed = wait_until(Duration::from_secs(30), || {
        let resp = e.http.get(e.gw.url("/bytes/10")).send().unwrap();
        match resp.status().as_u16() {
            200 => true,
            503 => {
                let (_, code, _) = code_of(resp);
                assert_eq!(code, "BULKHEAD_FULL");
                saw_full = true;
                false
            }
            s => panic!("unexpected {s}"),
        }
    });
    assert!(saw_full, "the stuck answer never held the bulkhead");
    assert!(
        freed,
        "the bulkhead was still held after {:?}",
        started.elapsed()
    );
    // The access log says why the stuck answer ended.
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&e.gw.access_log)
            .unwrap_or_default()
            .contains("\"code\":\"WRITE_TIMEOUT\"")
    }));
    drop(stuck);
}

#[test]
fn transcoding_refusals_do_not_move_the_breaker() {
    let e = env(|_| {}, &[]);
    let url = e.gw.url("/grpc/v1/orders");
    let post = |body: &str, fault: Option<&str>| {
        let mut r = e.http.post(&url).body(body.to_owned());
        if let Some(f) = fault {
            r = r.header("grpc-metadata-x-demo-status", f);
        }
        code_of(r.send().unwrap())
    };
    let good = r#"{"item":"book","qty":1}"#;
    // consecutive_failures: 2. One failure, then refusals that never reach the backend...
    assert_eq!(post(good, Some("UNAVAILABLE")).1, "UNAVAILABLE");
    for bad in [r#"{"qty":"many"}"#, "not json", r#"{"item":["x"]}"#] {
        let (s, c, _) = post(bad, None);
        assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"), "{bad}");
    }
    // ...did not count as successes: the next failure is the second in a row.
    assert_eq!(post(good, Some("UNAVAILABLE")).1, "UNAVAILABLE");
    assert_eq!(post(good, None).1, "CIRCUIT_OPEN");
    assert_eq!(e.gw.status()["invoke"]["order.create"]["breaker"], "open");
}

#[test]
fn router_style_http_calls_reach_the_apis_own_method_and_path() {
    let e = env(|_| {}, &[]);
    let router = |id: &str| {
        e.http
            .post(e.gw.url(&format!("/router?method={id}&x=1")))
            .body("{}")
            .send()
            .unwrap()
    };
    let v: Value = router("things.put").json().unwrap();
    assert_eq!(
        (v["method"].as_str(), v["path"].as_str()),
        (Some("PUT"), Some("/echo/things:batchPut")),
        "{v}"
    );
    assert_eq!(
        v["query"],
        Value::Null,
        "the router query names the API: {v}"
    );
    let v: Value = router("things.rewritten").json().unwrap();
    assert_eq!(
        (v["method"].as_str(), v["path"].as_str()),
        (Some("DELETE"), Some("/echo/rewritten")),
        "{v}"
    );
    // A path that needs variables cannot be called in the router style.
    let (s, c, v) = code_of(router("things.one"));
    assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"));
    assert!(
        v["message"].as_str().unwrap().contains("RESTful path"),
        "{v}"
    );
}

#[test]
fn an_encoded_slash_in_a_single_segment_variable_is_refused() {
    let e = env(|_| {}, &[]);
    let before = backend_requests(&e.backend);
    for path in [
        "/items/1%2F..%2Fadmin",
        "/items/a%2fb",
        "/echo/things/x%2Fy",
    ] {
        let (s, c, _) = code_of(e.http.get(e.gw.url(path)).send().unwrap());
        assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"), "{path}");
    }
    assert_eq!(backend_requests(&e.backend), before);
}

#[test]
fn the_connection_cap_refuses_clearly() {
    let e = env(|_| {}, &["--max-connections", "2"]);
    let mut held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(e.gw.listen).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let r = get_on(&mut s, "/open/echo");
            assert!(r.starts_with("HTTP/1.1 200"), "{r}");
            s
        })
        .collect();
    // Both connections are kept alive (and still counted) between their requests.
    for s in &mut held {
        assert!(get_on(s, "/open/echo").starts_with("HTTP/1.1 200"));
    }
    let mut third = TcpStream::connect(e.gw.listen).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(third, "GET /open/echo HTTP/1.1\r\nHost: gw\r\n\r\n").unwrap();
    let mut answer = String::new();
    third.read_to_string(&mut answer).unwrap();
    let lower = answer.to_lowercase();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(lower.contains("connection: close"), "{answer}");
    assert!(answer.contains("\"code\":\"CONNECTION_LIMIT\""), "{answer}");
    assert!(lower.contains("retry-after: 1"), "{answer}");
    assert!(e
        .gw
        .metrics()
        .contains("portico_connections_refused_total{listener=\"portico-live\"} 1"));
    // A place frees when a connection closes.
    drop(held.pop());
    assert!(wait_until(Duration::from_secs(10), || {
        let Ok(mut s) = TcpStream::connect(e.gw.listen) else {
            return false;
        };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /open/echo HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut a = String::new();
        let _ = s.read_to_string(&mut a);
        a.starts_with("HTTP/1.1 200")
    }));
}

/// The least time of `runs` sends of `req` (answered with `status`), over one connection.
fn least_time(e: &Env, runs: usize, method: &str, target: &str, status: u16) -> Duration {
    let mut s = TcpStream::connect(e.gw.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_nodelay(true).unwrap();
    let request = format!("{method} {target} HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n");
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            s.write_all(request.as_bytes()).unwrap();
            let r = read_response(&mut s);
            let took = started.elapsed();
            assert!(
                r.starts_with(&format!("HTTP/1.1 {status}")),
                "{}: {r}",
                &target[..target.len().min(60)]
            );
            took
        })
        .min()
        .unwrap()
}

#[test]
fn pre_auth_floods_are_answered_fast() {
    let e = env(|_| {}, &[]);
    // Generous for a debug build on a loaded machine; the issue measured 620 ms.
    let bound = Duration::from_millis(50);
    let floods: Vec<(&str, String, u16)> = vec![
        // The issue's colon flood: 60,000 colons, once 0.6 s of CPU.
        (
            "POST",
            format!("/grpc/v1/orders/4{}", ":".repeat(60_000)),
            414,
        ),
        // Just under the target limit: routed, linear.
        (
            "POST",
            format!("/grpc/v1/orders/4{}", ":".repeat(8_000)),
            404,
        ),
        (
            "GET",
            format!("/grpc/v1/orders/{}", "%41".repeat(2_600)),
            401,
        ),
        ("GET", format!("/open{}", "/s".repeat(2_000)), 400),
        (
            "GET",
            format!("/open/echo?{}", vec!["a=1"; 1_000].join("&")),
            400,
        ),
        (
            "GET",
            format!("/grpc/v1/orders/1?{}=1", vec!["f"; 2_000].join(".")),
            400,
        ),
        (
            "GET",
            format!("/grpc/v1/orders/1?{}=1", vec!["f"; 17].join(".")),
            400,
        ),
    ];
    for (method, target, status) in &floods {
        // The least of 5 sends, measured again (up to 3 times) when a burst of load on the
        // machine disturbed it: the quadratic route took 600 ms here, every time.
        let took = (0..3)
            .map(|_| least_time(&e, 5, method, target, *status))
            .find(|t| *t < bound)
            .unwrap_or(Duration::MAX);
        eprintln!("flood {method} {} bytes: {took:?}", target.len());
        assert!(
            took < bound,
            "{method} {}... ({} bytes) took {took:?}",
            &target[..40],
            target.len()
        );
    }
    // The refusals carry the envelope.
    let (s, c, _) = code_of(
        e.http
            .post(e.gw.url(&format!("/grpc/v1/orders/4{}", ":".repeat(60_000))))
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (414, "URI_TOO_LONG"));
    let (s, c, v) = code_of(
        e.http
            .get(e.gw.url(&format!("/grpc/v1/orders/1?{}=1", vec!["f"; 17].join("."))))
            .send()
            .unwrap(),
    );
    assert_eq!((s, c.as_str()), (400, "BAD_REQUEST"));
    assert!(
        v["message"].as_str().unwrap().contains("field paths"),
        "{v}"
    );
}

#[test]
fn heads_are_held_until_complete_and_capped() {
    let e = env(|_| {}, &[]);
    // A head trickled in 100-byte pieces (with 30 KiB of fields) is served as usual: the
    // gateway hands it to the HTTP parser when it is complete, not piece by piece.
    let fields: String = (0..30)
        .map(|i| format!("X-Pad-{i}: {}\r\n", "p".repeat(1000)))
        .collect();
    let head = format!("GET /open/echo HTTP/1.1\r\nHost: gw\r\n{fields}\r\n");
    let mut s = TcpStream::connect(e.gw.listen).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for piece in head.as_bytes().chunks(100) {
        s.write_all(piece).unwrap();
    }
    let r = read_response(&mut s);
    assert!(r.starts_with("HTTP/1.1 200"), "{}", &r[..r.len().min(300)]);
    assert!(r.contains("x-pad-29"), "the fields reached the backend");
    // The connection is reused for a second request as usual.
    assert!(get_on(&mut s, "/open/echo").starts_with("HTTP/1.1 200"));

    // A head over 64 KiB: 431 and the connection closed (or reset, as the client is still
    // sending), without reading the rest.
    let mut s = TcpStream::connect(e.gw.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let big = format!(
        "GET /open/echo HTTP/1.1\r\nHost: gw\r\nX-Big: {}\r\n\r\n",
        "b".repeat(70 * 1024)
    );
    let _ = s.write_all(big.as_bytes());
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
}
