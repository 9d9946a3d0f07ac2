//! No route of the admin API answers without the admin token (docs/SECURITY.md, "Admin API
//! (registry)"): every operation of the served OpenAPI document (every method × path, path
//! parameters filled with names of documents that exist) is called without `Authorization`,
//! with wrong tokens and with malformed headers, and must answer 401 `UNAUTHENTICATED` in the
//! envelope, before reading the body; only the documented public routes (health, the OpenAPI
//! document) and the console's static files answer without it. Against a real ZooKeeper holding
//! the documents the paths name, so a route that skipped the check would answer 200.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{registry, TOKEN};
use portico_testkit::ZooKeeper;
use reqwest::header::{HeaderValue, AUTHORIZATION};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The path of an operation with its parameters filled: `{version}` 1, names `auth.probe`
/// (which the test creates wherever a document can be).
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|seg| match seg {
            "{version}" => "1",
            s if s.starts_with('{') => "auth.probe",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The `Authorization` headers that must not open a protected route (none: no header).
fn bad_credentials() -> Vec<(&'static str, Vec<HeaderValue>)> {
    let h = |s: String| HeaderValue::from_str(&s).unwrap();
    let short = &TOKEN[..TOKEN.len() - 1];
    vec![
        ("no header", vec![]),
        ("wrong token", vec![h("Bearer wrong-token".into())]),
        ("empty token", vec![h("Bearer ".into())]),
        ("scheme only", vec![h("Bearer".into())]),
        ("token without scheme", vec![h(TOKEN.into())]),
        ("token plus a byte", vec![h(format!("Bearer {TOKEN}x"))]),
        ("token less a byte", vec![h(format!("Bearer {short}"))]),
        ("token plus %00", vec![h(format!("Bearer {TOKEN}%00"))]),
        ("basic scheme", vec![h(format!("Basic {TOKEN}"))]),
        ("other scheme", vec![h(format!("Token {TOKEN}"))]),
        (
            "not UTF-8",
            vec![HeaderValue::from_bytes(b"Bearer \xff\xfe\xfd").unwrap()],
        ),
        ("huge", vec![h(format!("Bearer {}", "A".repeat(16 * 1024)))]),
        (
            "two headers, right one second",
            vec![h("Bearer wrong".into()), h(format!("Bearer {TOKEN}"))],
        ),
        (
            "two headers, right one first",
            vec![h(format!("Bearer {TOKEN}")), h("Bearer wrong".into())],
        ),
    ]
}

/// Asserts `resp` is 401 `UNAUTHENTICATED` in the envelope, with the request id echoed.
async fn assert_unauthenticated(resp: reqwest::Response, what: &str) {
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {text}");
    assert_eq!(
        headers.get("www-authenticate").map(|v| v.to_str().unwrap()),
        Some("Bearer realm=\"portico-registry\""),
        "{what}"
    );
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"),
        "{what}"
    );
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{what}: {text}"));
    assert_eq!(body["code"], "UNAUTHENTICATED", "{what}: {body}");
    assert!(
        body["message"].as_str().is_some_and(|m| m.len() > 5),
        "{what}: {body}"
    );
    let id = body["request_id"].as_str().unwrap_or("");
    assert!(!id.is_empty(), "{what}: {body}");
    assert_eq!(headers["x-portico-request-id"], id, "{what}");
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "message", "request_id"], "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_answers_without_the_token() {
    let zk = ZooKeeper::on_shared();
    let reg = registry(&zk).await;
    let anon = reqwest::Client::new();
    let origin = reg.base.trim_end_matches("/api/v1").to_owned();

    // Documents the paths name exist in both planes, so a route that skipped the check would
    // answer with them.
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:9", "weight": 1}]});
    for prefix in ["", "/sandbox"] {
        reg.put(&format!("{prefix}/clusters/auth.probe"), &cluster)
            .await
            .expect(201);
        reg.post(
            &format!("{prefix}/apps"),
            &json!({"app_key": "auth.probe", "secret": "auth-probe-secret"}),
        )
        .await
        .expect(201);
    }

    // The document is public; it lists the operations to walk.
    let resp = anon
        .get(format!("{}/openapi.json", reg.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let doc: Value = resp.json().await.unwrap();
    let mut operations = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let public = op.get("security") == Some(&json!([]));
            operations.push((
                method.to_ascii_uppercase(),
                path.clone(),
                public,
                op.clone(),
            ));
        }
    }
    assert!(operations.len() >= 60, "{} operations", operations.len());
    let public: Vec<String> = operations
        .iter()
        .filter(|o| o.2)
        .map(|o| format!("{} {}", o.0, o.1))
        .collect();
    assert_eq!(public, ["GET /health", "GET /openapi.json"]);

    let mut checked = 0;
    for (method, path, is_public, op) in &operations {
        let url = format!("{}{}", reg.base, concrete(path));
        let m = Method::from_bytes(method.as_bytes()).unwrap();
        if *is_public {
            let resp = anon.request(m, &url).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{method} {path} is public");
            continue;
        }
        assert!(
            op["responses"]["401"].is_object(),
            "{method} {path}: 401 is not documented"
        );
        for (what, values) in bad_credentials() {
            let mut req = anon
                .request(m.clone(), &url)
                .header("content-type", "application/json")
                .header("X-Portico-Request-Id", "auth-walk-1")
                // A body the route would take, and one it would reject: neither is read.
                .body(r#"{"name": "auth.probe", "protocol": "http", "endpoints": []}"#);
            for v in values {
                req = req.header(AUTHORIZATION, v);
            }
            let resp = req.send().await.unwrap();
            assert_unauthenticated(resp, &format!("{method} {path} ({what})")).await;
            checked += 1;
        }
        // The right token opens it (in any case of the scheme): the 401s above were the
        // token's doing, not the route's.
        let resp = anon
            .request(m.clone(), &url)
            .header(AUTHORIZATION, format!("bEARER {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_ne!(
            resp.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path} refuses the right token"
        );
    }
    assert!(checked > 800, "{checked} requests checked");

    // Methods and paths the document does not list, under /api: 401 too (no route probing).
    for (m, path) in [
        (Method::PATCH, "/api/v1/clusters"),
        (Method::HEAD, "/api/v1/apps"),
        (Method::OPTIONS, "/api/v1/apis"),
        (Method::GET, "/api/v1/no-such-route"),
        (Method::GET, "/api/v2/apps"),
        (Method::GET, "/api/v1/health/apis"),
        (Method::GET, "/api/v1/health/"),
        (Method::GET, "/api/v1/openapi.json/x"),
    ] {
        let resp = anon
            .request(m.clone(), format!("{origin}{path}"))
            .send()
            .await
            .unwrap();
        if m == Method::HEAD {
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "HEAD {path}");
        } else {
            assert_unauthenticated(resp, &format!("{m} {path}")).await;
        }
    }

    // Another method on a public path is just not allowed.
    let resp = anon
        .delete(format!("{origin}/api/v1/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "METHOD_NOT_ALLOWED");

    // Spellings of a protected path that might slip past the check: none answers API data.
    for path in [
        "//api/v1/apps",
        "/api/v1//apps",
        "/api/v1/apps/",
        "/api/v1/./apps",
        "/api/v1/%61pps",
        "/api/v1/health/../apps",
        "/api/v1/openapi.json/../apps",
        "/API/v1/apps",
        "/api/v1/apps%2F",
        "/api/v1/health%2F..%2Fapps",
    ] {
        let resp = anon.get(format!("{origin}{path}")).send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(
            !status.is_success() || !text.contains("auth.probe"),
            "GET {path} without the token answered {status}: {text}"
        );
        assert!(!status.is_server_error(), "GET {path}: {status}");
    }

    // The console's static files are public (built or not, never 401).
    for path in ["/", "/index.html", "/switches"] {
        let resp = anon.get(format!("{origin}{path}")).send().await.unwrap();
        assert_ne!(resp.status(), StatusCode::UNAUTHORIZED, "GET {path}");
        assert!(!resp.status().is_server_error(), "GET {path}");
    }
}
