//! The admin API's input limits (docs/SECURITY.md, "Admin API (registry)"): oversized bodies,
//! deeply nested JSON, huge path parameters and invalid UTF-8 (in the path, the query, the
//! headers and the body) are each answered with a 4xx in the error envelope, and the registry
//! keeps serving. Against a real ZooKeeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{registry, Reply, TOKEN};
use portico_registry::MAX_BODY_BYTES;
use portico_testkit::ZooKeeper;
use reqwest::header::HeaderValue;
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Asserts a 4xx envelope with `status` and `code`, with the request id.
#[track_caller]
fn assert_envelope(r: &Reply, status: u16, code: &str, what: &str) {
    assert_eq!(r.status.as_u16(), status, "{what}: {:?}", r.body);
    assert_eq!(r.code(), code, "{what}: {:?}", r.body);
    assert!(
        r.body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}"
    );
    assert!(
        r.body["request_id"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}"
    );
}

/// Sends `len` bytes of spaces as a chunked body to `base` + `path` (with the token) over a
/// plain connection; returns the answer's status and body.
async fn chunked_put(base: &str, path: &str, len: usize) -> (u16, String) {
    let url = reqwest::Url::parse(&format!("{base}{path}")).unwrap();
    let addr = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT {} HTTP/1.1\r\nHost: registry\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        url.path()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    // The server may answer and stop reading before the end: a failed write ends the body.
    while sent < len {
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(&chunk);
        frame.extend_from_slice(b"\r\n");
        if conn.write_all(&frame).await.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let _ = conn.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        conn.read_to_end(&mut answer),
    )
    .await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_nested_huge_and_non_utf8_input_is_a_4xx_envelope() {
    let zk = ZooKeeper::on_shared();
    let reg = registry(&zk).await;
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:9", "weight": 1}]});
    reg.put("/clusters/c1", &cluster).await.expect(201);

    // Bodies over the limit: 413 BODY_TOO_LARGE, whatever the content type, declared length
    // or not.
    let big = vec![b' '; MAX_BODY_BYTES + 1];
    for (method, path, content_type) in [
        (Method::PUT, "/clusters/c1", "application/json"),
        (Method::POST, "/import", "application/json"),
        (Method::POST, "/descriptors", "application/octet-stream"),
        (Method::POST, "/sandbox/call", "application/json"),
    ] {
        let r = reg
            .send(
                reg.request(method.clone(), path)
                    .header("content-type", content_type)
                    .body(big.clone()),
            )
            .await;
        assert_envelope(&r, 413, "BODY_TOO_LARGE", &format!("{method} {path}"));
    }
    let r = reg
        .send(
            reg.request(Method::POST, "/protos")
                .header("content-type", "multipart/form-data; boundary=XyZ")
                .body(big.clone()),
        )
        .await;
    assert_envelope(&r, 413, "BODY_TOO_LARGE", "multipart upload");
    // Chunked, with no declared length: cut off at the limit all the same.
    let (status, body) = chunked_put(&reg.base, "/clusters/c1", MAX_BODY_BYTES + 64 * 1024).await;
    assert_eq!(status, 413, "chunked: {body}");
    assert!(body.contains("BODY_TOO_LARGE"), "chunked: {body}");
    // Just under the limit is read (and then refused for what it is).
    let mut under = b"{\"protocol\": \"http\", \"endpoints\": []}".to_vec();
    under.resize(MAX_BODY_BYTES, b' ');
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/c1")
                .header("content-type", "application/json")
                .body(under),
        )
        .await;
    assert!(
        r.status.is_client_error() && r.status != 413,
        "{:?}",
        r.body
    );

    // JSON nested far deeper than any document: 400, not a stack overflow.
    for depth in [200, 100_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let body = format!(r#"{{"protocol": "http", "endpoints": [], "x": {nested}}}"#);
        for (method, path) in [
            (Method::PUT, "/clusters/c2"),
            (Method::PUT, "/sandbox/apis/deep"),
            (Method::POST, "/import"),
            (Method::POST, "/apps"),
            (Method::PATCH, "/apps/none"),
            (Method::POST, "/sandbox/call"),
        ] {
            let r = reg
                .send(
                    reg.request(method.clone(), path)
                        .header("content-type", "application/json")
                        .body(body.clone()),
                )
                .await;
            assert!(
                r.status.is_client_error(),
                "{method} {path}, depth {depth}: {} {:?}",
                r.status,
                r.body
            );
            assert!(r.body["request_id"].is_string(), "{method} {path}");
        }
    }
    reg.get("/clusters/c2").await.expect(404);

    // Huge path parameters: a name is 1-128 characters, a version a number.
    for len in [129, 4096, 60_000] {
        let name = "a".repeat(len);
        for path in [
            format!("/clusters/{name}"),
            format!("/apis/{name}"),
            format!("/apps/{name}"),
            format!("/switches/{name}"),
            format!("/sandbox/apis/{name}"),
        ] {
            let r = reg.get(&path).await;
            assert_envelope(&r, 400, "BAD_REQUEST", &format!("GET ({len} chars)"));
            let r = reg.put(&path, &cluster).await;
            assert!(r.status.is_client_error(), "PUT {len}: {}", r.status);
        }
    }
    for version in ["0", "-1", "18446744073709551616", "1e3", "x"] {
        let r = reg.get(&format!("/apis/a/history/{version}")).await;
        assert!(
            r.status.is_client_error() && r.body["request_id"].is_string(),
            "version {version}: {} {:?}",
            r.status,
            r.body
        );
    }

    // Invalid UTF-8, percent-encoded in the path and the query.
    let r = reg.get("/clusters/%FF%FE").await;
    assert_envelope(&r, 400, "BAD_REQUEST", "path");
    let r = reg.get("/export?env=%FF").await;
    assert_envelope(&r, 400, "BAD_REQUEST", "query");
    let r = reg.get("/audit?limit=%C0%80").await;
    assert_envelope(&r, 400, "BAD_REQUEST", "query");
    // ... in the body.
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/c3")
                .header("content-type", "application/json")
                .body(b"{\"protocol\": \"http\xff\", \"endpoints\": []}".to_vec()),
        )
        .await;
    assert_envelope(&r, 400, "BAD_REQUEST", "body");
    // ... in the headers the registry reads.
    let bytes = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/c1")
                .header("If-Match", bytes.clone())
                .json(&cluster),
        )
        .await;
    assert_envelope(&r, 400, "BAD_REQUEST", "If-Match");
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/c1")
                .header("If-None-Match", bytes.clone())
                .json(&cluster),
        )
        .await;
    assert_envelope(&r, 400, "BAD_REQUEST", "If-None-Match");
    // An unreadable operator or request id is ignored (the token's owner is the actor; a new
    // request id is made).
    let r = reg
        .send(
            reg.request(Method::PUT, "/clusters/c1")
                .header("X-Portico-Operator", bytes.clone())
                .header("X-Portico-Request-Id", bytes.clone())
                .json(&cluster),
        )
        .await
        .expect(200);
    assert!(r.request_id.is_some_and(|id| id.starts_with("reg-")));

    // Still serving, with the token.
    reg.get("/clusters/c1").await.expect(200);
    let health = reqwest::get(format!("{}/health", reg.base)).await.unwrap();
    assert!(health.status().is_success());
}
