//! Generic gRPC invocation against the real demo gRPC services (in process, on a free
//! port): every transcoding rule over the wire, status mapping, deadlines, connection
//! failures, the response size limit, metadata, and the standalone example's gRPC APIs
//! (which this test loads, so they stay valid and in step with the demo descriptor set).
//!
//! The route stage is emulated here by matching the APIs' own path templates, so these
//! tests exercise exactly what the pipeline hands to `GrpcInvoker::call`.
//!
//! `PORTICO_UPDATE_EXAMPLES=1 cargo test -p portico-gateway --test it grpc_invoke::example_tree` rewrites
//! `ops/examples/standalone/descriptors/<sha256>.pb` and the `descriptor` of the example's
//! gRPC APIs after the demo protos change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use portico_control::{build_snapshot, BackendKind, Snapshot, Tree};
use portico_demo::grpc::{self as demo, GrpcStats};
use portico_gateway::error::{Code, GatewayError, Side};
use portico_gateway::invoke::grpc::{GrpcConfig, GrpcInvoker, GrpcMethods};
use portico_gateway::model::{RouteMatch, Whole};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether the invoke tier counts `e` as a backend failure for the breaker.
fn is_backend_failure(e: &GatewayError) -> bool {
    e.code.side() == Side::Upstream
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/examples/standalone")
}

fn descriptor_sha() -> String {
    hex::encode(Sha256::digest(demo::descriptor_set_bytes()))
}

/// The example's gRPC API documents (`apis/grpc.*.json`), as (file, JSON).
fn example_grpc_apis() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(example_dir().join("apis")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.starts_with("grpc.") && name.ends_with(".json") {
            let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            out.push((path, v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The example tree names the current demo descriptor set (or, with
/// `PORTICO_UPDATE_EXAMPLES=1`, is made to).
#[test]
fn example_tree_has_the_current_descriptor_set() {
    let sha = descriptor_sha();
    let dir = example_dir().join("descriptors");
    let file = dir.join(format!("{sha}.pb"));
    let update = std::env::var("PORTICO_UPDATE_EXAMPLES").is_ok_and(|v| v == "1");
    if update {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&file, demo::descriptor_set_bytes()).unwrap();
        for (path, mut v) in example_grpc_apis() {
            v["backend"]["grpc"]["descriptor"] = json!(sha);
            let text = serde_json::to_string_pretty(&v).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
        }
    }
    let hint = "run PORTICO_UPDATE_EXAMPLES=1 cargo test -p portico-gateway --test it grpc_invoke::example_tree";
    let on_disk =
        std::fs::read(&file).unwrap_or_else(|_| panic!("{} is missing: {hint}", file.display()));
    assert_eq!(on_disk, demo::descriptor_set_bytes(), "{hint}");
    let apis = example_grpc_apis();
    assert!(apis.len() >= 10);
    for (path, v) in apis {
        assert_eq!(
            v["backend"]["grpc"]["descriptor"],
            json!(sha),
            "{}: {hint}",
            path.display()
        );
    }
}

/// A snapshot of the example's gRPC APIs, its cluster and the demo descriptor set.
fn snapshot() -> Snapshot {
    let mut tree = Tree::default();
    let sha = descriptor_sha();
    tree.insert(
        &format!("descriptors/{sha}"),
        demo::descriptor_set_bytes().to_vec(),
    );
    tree.insert(
        "clusters/demo-grpc",
        std::fs::read(example_dir().join("clusters/demo-grpc.json")).unwrap(),
    );
    for (path, _) in example_grpc_apis() {
        let id = path.file_stem().unwrap().to_str().unwrap();
        tree.insert(&format!("apis/{id}"), std::fs::read(&path).unwrap());
    }
    let snap = build_snapshot(&tree, None);
    assert!(snap.rejected.is_empty(), "rejected: {:#?}", snap.rejected);
    snap
}

struct Harness {
    snap: Snapshot,
    methods: GrpcMethods,
    invoker: GrpcInvoker,
    addr: SocketAddr,
    stats: Arc<GrpcStats>,
    timeout: Duration,
}

impl Harness {
    async fn start() -> Harness {
        Self::start_with(GrpcConfig::default()).await
    }

    async fn start_with(config: GrpcConfig) -> Harness {
        let stats = Arc::new(GrpcStats::default());
        let (addr, _task) = demo::spawn(stats.clone()).await.unwrap();
        let snap = snapshot();
        let methods = GrpcMethods::build(&snap, None);
        assert!(methods.problems().is_empty(), "{:?}", methods.problems());
        Harness {
            snap,
            methods,
            invoker: GrpcInvoker::with_config(config),
            addr,
            stats,
            timeout: Duration::from_secs(5),
        }
    }

    /// What the route stage would find for `method path`.
    fn route(&self, method: &str, path: &str) -> RouteMatch {
        for api in self.snap.apis.values() {
            for (i, b) in api.bindings.iter().enumerate() {
                if b.method != method {
                    continue;
                }
                if let Some(vars) = b.template.match_path(path) {
                    return RouteMatch {
                        api: api.clone(),
                        binding: Some(i),
                        vars,
                        router_style: false,
                    };
                }
            }
        }
        panic!("no API for {method} {path}");
    }

    async fn call_route(
        &self,
        route: &RouteMatch,
        query: Option<&str>,
        body: &str,
        headers: &[(&str, &str)],
        addr: &str,
    ) -> Result<Whole, GatewayError> {
        let method = self.methods.get(&route.api.id).unwrap();
        let mut h = http::HeaderMap::new();
        for (k, v) in headers {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        self.invoker
            .call(
                &method,
                route,
                query,
                body.as_bytes(),
                &h,
                addr,
                self.timeout,
                "rid-test-1",
            )
            .await
    }

    async fn call(
        &self,
        method: &str,
        uri: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Result<Whole, GatewayError> {
        let (path, query) = match uri.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (uri, None),
        };
        let route = self.route(method, path);
        self.call_route(&route, query, body, headers, &self.addr.to_string())
            .await
    }

    /// Calls and expects a 200 JSON answer.
    async fn ok(&self, method: &str, uri: &str, body: &str) -> Value {
        let a = self
            .call(method, uri, body, &[])
            .await
            .unwrap_or_else(|e| panic!("{method} {uri}: {e}"));
        assert_eq!(a.status, 200);
        assert!(a
            .headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == "application/json"));
        serde_json::from_slice(&a.body).unwrap()
    }
}

fn err(r: Result<Whole, GatewayError>) -> GatewayError {
    match r {
        Ok(a) => panic!(
            "expected an error, got {} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        ),
        Err(e) => e,
    }
}

#[tokio::test]
async fn path_variables_and_proto3_json_replies() {
    let h = Harness::start().await;
    let v = h.ok("GET", "/grpc/v1/orders/42", "").await;
    assert_eq!(v["orderId"], "42");
    assert_eq!(v["shop"], json!({"id": "shop-1", "name": "Demo Shop"}));
    assert_eq!(v["status"], "ORDER_STATUS_PAID");
    assert_eq!(v["totalCents"], "4200");
    assert_eq!(v["sequence"], "18446744073709551615");
    assert_eq!(v["createdAt"], "2026-01-02T03:04:05Z");
    assert_eq!(v["shipWithin"], "86400s");
    assert_eq!(
        v["attributes"],
        json!({"gift": true, "channel": "web", "score": 4.5})
    );
    assert_eq!(v["note"], "leave at the door");
    assert_eq!(v["labels"], json!({"source": "demo"}));
    assert_eq!(v["items"][0]["unitPrice"]["units"], "21");
    assert_eq!(v["requestId"], "rid-test-1");
    // Defaults are left out.
    assert!(v.get("cancelReason").is_none() && v.get("refunded").is_none());

    // additional_bindings, with a nested path variable; percent-decoded by the route.
    let v = h.ok("GET", "/grpc/v1/shops/s%209/orders/7", "").await;
    assert_eq!(v["orderId"], "7");
    assert_eq!(v["shop"]["id"], "s 9");
}

#[tokio::test]
async fn resource_names_and_double_star() {
    let h = Harness::start().await;
    let v = h.ok("GET", "/grpc/v1/shops/s1/products/p1", "").await;
    assert_eq!(v["name"], "shops/s1/products/p1");
    assert_eq!(v["category"], "CATEGORY_BOOKS");
    assert_eq!(v["stock"], "9007199254740993");
    assert_eq!(v["rating"], 4.5);
    assert_eq!(v["thumbnail"], "iVBORw0=");
    let v = h
        .ok("GET", "/grpc/v1/shops/s1/products?pageSize=5&category=CATEGORY_MUSIC&price.min_cents=100&tags=a&tags=b", "")
        .await;
    assert_eq!(v["products"][0]["name"], "shops/s1/products/p1");
    assert_eq!(
        v["query"],
        json!({"parent": "shops/s1", "pageSize": 5, "category": "CATEGORY_MUSIC",
               "price": {"minCents": "100"}, "tags": ["a", "b"]})
    );
    let v = h
        .ok("GET", "/grpc/v1/files/images/2024/cover.png", "")
        .await;
    assert_eq!(
        v,
        json!({"path": "images/2024/cover.png", "size": "2100", "contentType": "image/png"})
    );
    let e = err(h
        .call("GET", "/grpc/v1/shops/s1/products/missing", "", &[])
        .await);
    assert_eq!((e.status(), e.code.as_str()), (404, "NOT_FOUND"), "{e}");
    assert_eq!(e.message, "product shops/s1/products/missing not found");
}

#[tokio::test]
async fn body_star_body_field_custom_verb_and_response_body() {
    let h = Harness::start().await;
    // body "*", unknown fields ignored, 64-bit ints as numbers or strings, WKT.
    let v = h
        .ok(
            "POST",
            "/grpc/v1/orders",
            r#"{"item": "book", "qty": 2, "total_cents": 12, "sequence": "7", "unknown": {"x": 1},
                "shipWithin": "1.5s", "note": "hi", "status": 3, "attributes": {"k": [1, "a"]}}"#,
        )
        .await;
    assert!(v["orderId"].as_str().unwrap().starts_with("ord-"));
    assert_eq!(v["item"], "book");
    assert_eq!(v["totalCents"], "12");
    assert_eq!(v["sequence"], "7");
    assert_eq!(v["shipWithin"], "1.500s");
    assert_eq!(v["note"], "hi");
    assert_eq!(v["status"], "ORDER_STATUS_SHIPPED");
    assert_eq!(v["attributes"], json!({"k": [1.0, "a"]}));

    // body "order", path variable inside it, the rest (a FieldMask) from the query.
    let v = h
        .ok(
            "PATCH",
            "/grpc/v1/orders/42?update_mask=item,qty&order.item=ignored",
            r#"{"item": "pen", "qty": 3, "labels": {"a": "b"}}"#,
        )
        .await;
    assert_eq!(v["orderId"], "42");
    assert_eq!(v["item"], "pen");
    assert_eq!(v["labels"], json!({"a": "b", "update_mask": "item,qty"}));

    // body "product" with a resource-name path variable.
    let v = h
        .ok(
            "PATCH",
            "/grpc/v1/shops/s1/products/p9",
            r#"{"title": "T", "priceCents": "5"}"#,
        )
        .await;
    assert_eq!(
        v,
        json!({"name": "shops/s1/products/p9", "title": "T", "priceCents": "5"})
    );

    // A custom verb.
    let v = h
        .ok(
            "POST",
            "/grpc/v1/orders/42:cancel",
            r#"{"reason": "late", "refund": true}"#,
        )
        .await;
    assert_eq!(v["status"], "ORDER_STATUS_CANCELLED");
    assert_eq!(v["cancelReason"], "late");
    assert_eq!(v["refunded"], true);
    let v = h
        .ok("POST", "/grpc/v1/products:search", r#"{"query": "rust"}"#)
        .await;
    assert_eq!(v["products"][0]["title"], "rust");

    // response_body.
    let a = h
        .call("GET", "/grpc/v1/orders/42/status", "", &[])
        .await
        .unwrap();
    assert_eq!(&a.body[..], br#""ORDER_STATUS_PAID""#);
}

#[tokio::test]
async fn query_parameters_over_the_wire() {
    let h = Harness::start().await;
    let q = "statuses=ORDER_STATUS_PAID&statuses=1&tags=a&tags=b%20c&pageSize=3\
             &filter.min_total_cents=9007199254740993&filter.createdAfter=2026-01-01T00:00:00Z\
             &include_cancelled=false&after_sequence=18446744073709551615&ids=1&ids=2\
             &min_rating=4.5&descending=true&not_a_field=1";
    let v = h.ok("GET", &format!("/grpc/v1/orders?{q}"), "").await;
    assert_eq!(
        v["query"],
        json!({
            "statuses": ["ORDER_STATUS_PAID", "ORDER_STATUS_PENDING"],
            "tags": ["a", "b c"],
            "pageSize": 3,
            "filter": {"minTotalCents": "9007199254740993", "createdAfter": "2026-01-01T00:00:00Z"},
            "includeCancelled": false,
            "afterSequence": "18446744073709551615",
            "ids": ["1", "2"],
            "minRating": 4.5,
            "descending": true,
        })
    );
    // A path variable wins over a query parameter for the same field.
    let v = h
        .ok("GET", "/grpc/v1/shops/s1/orders?shop.id=s2&shop.name=N", "")
        .await;
    assert_eq!(v["query"]["shop"], json!({"id": "s1", "name": "N"}));
}

#[tokio::test]
async fn router_style_takes_the_body_as_the_request() {
    let h = Harness::start().await;
    let mut route = h.route("GET", "/grpc/v1/orders/1");
    route.binding = None;
    route.vars.clear();
    route.router_style = true;
    let a = h
        .call_route(
            &route,
            Some("method=grpc.order.get"),
            r#"{"order_id": "77", "shop": {"id": "s3"}}"#,
            &[],
            &h.addr.to_string(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["orderId"], "77");
    assert_eq!(v["shop"]["id"], "s3");
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_and_never_reaches_the_backend() {
    let h = Harness::start().await;
    let cases = [
        (
            "POST",
            "/grpc/v1/orders",
            r#"{"item": "book", "qty": "abc"}"#,
            r#"field "qty": invalid value "abc" for int32"#,
        ),
        (
            "POST",
            "/grpc/v1/orders",
            r#"{"items": [{"unitPrice": {"units": "x"}}]}"#,
            r#"field "items[0].unit_price.units": invalid value "x" for int64"#,
        ),
        (
            "POST",
            "/grpc/v1/orders",
            r#"{"item": "#,
            "invalid JSON body",
        ),
        (
            "GET",
            "/grpc/v1/orders?pageSize=ten",
            "",
            r#"field "page_size": invalid value "ten" for int32"#,
        ),
        (
            "GET",
            "/grpc/v1/orders?filter.created_after=never",
            "",
            r#"field "filter.created_after": invalid value "never""#,
        ),
    ];
    for (method, uri, body, want) in cases {
        let e = err(h.call(method, uri, body, &[]).await);
        assert_eq!(e.code, Code::BadRequest, "{method} {uri}: {e}");
        assert!(e.message.starts_with(want), "{method} {uri}: {}", e.message);
        assert!(!is_backend_failure(&e));
    }
    let deep = format!(
        r#"{{"attributes": {{"a": {}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = err(h.call("POST", "/grpc/v1/orders", &deep, &[]).await);
    assert_eq!(e.code, Code::BadRequest);
    assert!(e.message.contains("nested deeper"), "{}", e.message);
    assert_eq!(h.stats.requests.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn grpc_statuses_map_to_http() {
    let h = Harness::start().await;
    let e = err(h.call("GET", "/grpc/v1/orders/missing", "", &[]).await);
    assert_eq!((e.status(), e.code.as_str()), (404, "NOT_FOUND"));
    assert_eq!(e.message, "order missing not found");
    assert!(!is_backend_failure(&e));
    let e = err(h
        .call("POST", "/grpc/v1/orders", r#"{"qty": 0}"#, &[])
        .await);
    assert_eq!((e.status(), e.code.as_str()), (400, "INVALID_ARGUMENT"));
    assert_eq!(e.message, "qty must be positive");
    let e = err(h
        .call(
            "POST",
            "/grpc/v1/orders",
            r#"{"item": "duplicate", "qty": 1}"#,
            &[],
        )
        .await);
    assert_eq!((e.status(), e.code.as_str()), (409, "ALREADY_EXISTS"));

    for (injected, status, name, failure) in [
        ("UNAVAILABLE", 503, "UNAVAILABLE", true),
        ("14", 503, "UNAVAILABLE", true),
        ("internal", 500, "INTERNAL", true),
        ("2", 500, "UNKNOWN", true),
        ("DEADLINE_EXCEEDED", 504, "DEADLINE_EXCEEDED", true),
        ("7", 403, "PERMISSION_DENIED", false),
        ("UNAUTHENTICATED", 401, "UNAUTHENTICATED", false),
        ("RESOURCE_EXHAUSTED", 429, "RESOURCE_EXHAUSTED", false),
        ("UNIMPLEMENTED", 501, "UNIMPLEMENTED", false),
        ("ABORTED", 409, "ABORTED", false),
        ("FAILED_PRECONDITION", 500, "FAILED_PRECONDITION", false),
    ] {
        let e = err(h
            .call(
                "GET",
                "/grpc/v1/orders/1",
                "",
                &[("grpc-metadata-x-demo-status", injected)],
            )
            .await);
        assert_eq!((e.status(), e.code.as_str()), (status, name), "{injected}");
        assert_eq!(is_backend_failure(&e), failure, "{injected}");
        if failure {
            // Statuses that mean the backend failed (often written by its transport or a
            // proxy) keep their message for the access log (docs/SECURITY.md, "No internals
            // in answers").
            assert!(!e.message.contains("injected"), "{injected}: {}", e.message);
            assert!(e
                .detail
                .as_deref()
                .unwrap()
                .contains(&format!("injected {name}")));
        } else {
            assert_eq!(e.message, format!("injected {name}"));
        }
    }
}

#[tokio::test]
async fn metadata_is_passed_both_ways() {
    let h = Harness::start().await;
    let a = h
        .call(
            "GET",
            "/grpc/v1/orders/5",
            "",
            &[
                ("x-portico-request-id", "spoofed"),
                ("grpc-metadata-x-demo-delay-ms", "1"),
            ],
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(v["requestId"], "rid-test-1");
    let instance = h.addr.to_string();
    assert!(
        a.headers
            .iter()
            .any(|(k, v)| k == "grpc-metadata-x-demo-instance" && *v == instance),
        "{:?}",
        a.headers
    );
}

#[tokio::test]
async fn deadline_is_the_apis_timeout() {
    let mut h = Harness::start().await;
    h.timeout = Duration::from_millis(200);
    for header in [
        ("grpc-metadata-x-demo-delay-ms", "3000"),
        ("grpc-metadata-x-demo-hang", "1"),
    ] {
        let started = Instant::now();
        let e = err(h.call("GET", "/grpc/v1/orders/1", "", &[header]).await);
        let took = started.elapsed();
        assert_eq!(e.code, Code::UpstreamTimeout, "{header:?}: {e}");
        assert_eq!(e.status(), 504);
        assert!(is_backend_failure(&e));
        assert!(
            took < Duration::from_millis(1500),
            "{header:?} took {took:?}"
        );
    }
    // The backend sees the abandoned calls end (the stream is reset, nothing piles up).
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stats.in_flight.load(Ordering::Relaxed) != 0 {
        assert!(
            Instant::now() < deadline,
            "calls still in flight at the backend"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fast call on the same channel is unaffected.
    h.timeout = Duration::from_secs(5);
    h.ok("GET", "/grpc/v1/orders/1", "").await;
}

#[tokio::test]
async fn connection_failures_are_502_and_recover() {
    let h = Harness::start().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let route = h.route("GET", "/grpc/v1/orders/1");
    let started = Instant::now();
    let e = err(h.call_route(&route, None, "", &[], &closed).await);
    assert_eq!(e.code, Code::UpstreamError, "{e}");
    assert_eq!(e.status(), 502);
    assert!(is_backend_failure(&e));
    assert!(started.elapsed() < Duration::from_secs(2));
    // Again (the channel re-dials), then the healthy endpoint still answers.
    let e = err(h.call_route(&route, None, "", &[], &closed).await);
    assert_eq!(e.code, Code::UpstreamError, "{e}");
    h.ok("GET", "/grpc/v1/orders/1", "").await;
    let e = err(h.call_route(&route, None, "", &[], "not a host:port").await);
    assert_eq!(e.code, Code::UpstreamError, "{e}");
}

#[tokio::test]
async fn replies_over_the_size_limit_are_502() {
    let h = Harness::start_with(GrpcConfig {
        max_response_bytes: 100,
        ..GrpcConfig::default()
    })
    .await;
    let e = err(h.call("GET", "/grpc/v1/orders/1", "", &[]).await);
    assert_eq!(e.code, Code::UpstreamError, "{e}");
    assert_eq!(e.message, "the backend's answer is too large");
    assert!(
        e.detail.as_deref().unwrap().contains("more than 100 bytes"),
        "{e:?}"
    );
    // A small reply still fits.
    let a = h
        .call("GET", "/grpc/v1/files/a.txt", "", &[])
        .await
        .unwrap();
    assert_eq!(a.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_channel() {
    let h = Arc::new(Harness::start().await);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let v = h.ok("GET", &format!("/grpc/v1/orders/{i}"), "").await;
            assert_eq!(v["orderId"], i.to_string());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(h.stats.requests.load(Ordering::Relaxed), 64);
}

#[test]
fn methods_are_prepared_once_per_descriptor_and_reused() {
    let snap = snapshot();
    let first = GrpcMethods::build(&snap, None);
    let grpc_apis = snap
        .apis
        .values()
        .filter(|a| matches!(a.backend, BackendKind::Grpc { .. }))
        .count();
    assert_eq!(first.len(), grpc_apis);
    let again = GrpcMethods::build(&snap, Some(&first));
    let m = again.get("grpc.order.get").unwrap();
    assert_eq!(m.path.as_str(), "/demo.order.v1.OrderService/GetOrder");
    assert!(again.get("nope").is_none());
}
