//! The portal's "try it": `POST /portal/try` forwards a request the merchant's browser has
//! already signed (with a sandbox app's secret, by WebCrypto) to a live gateway node's
//! sandbox listener, and answers what came back.
//!
//! Why a forwarder: the gateway answers no CORS preflight, and its sandbox listener's address
//! (`nodes/<id>`'s `sandbox_addr`) is the registry's to know, often on an internal network.
//! The registry never sees the secret: it passes on the four signature headers as they are,
//! and the gateway verifies them as for any call. What can pass is narrow: only to a
//! registered sandbox listener (never the live plane, never another address), a path and
//! query on it, the signature, request id and `Content-Type` headers, and a body of at most
//! [`MAX_BODY_BYTES`].

use crate::error::{ApiError, ApiResult};
use crate::sandbox_call::pick;
use crate::state::Shared;
use portico_control::sign::{HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use portico_control::validate::METHODS;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest body forwarded (the gateway's default body limit).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Largest answer body shown.
const MAX_SHOWN_BODY: usize = 1024 * 1024;
/// How long the sandbox call may take (the longest deadline an API may set is longer; the
/// sandbox is for trying, not for slow calls).
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the portal asks to send.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TryRequest {
    /// The HTTP method.
    pub method: String,
    /// The path exactly as signed (percent-encoded), without the query.
    pub path: String,
    /// The raw query, without `?`.
    #[serde(default)]
    pub query: Option<String>,
    /// The signature headers, `X-Portico-Request-Id`, `Content-Type`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body exactly as signed.
    #[serde(default)]
    pub body: Option<String>,
}

const PASSED: [&str; 6] = [
    HEADER_APP_KEY,
    HEADER_TIMESTAMP,
    HEADER_NONCE,
    HEADER_SIGNATURE,
    "X-Portico-Request-Id",
    "Content-Type",
];

/// Checks `req` (400 naming what is wrong).
fn check(req: &TryRequest) -> ApiResult<()> {
    if !METHODS.contains(&req.method.as_str()) {
        return Err(ApiError::bad_request(format!(
            "method: {:?} is not one of {}",
            req.method,
            METHODS.join("/")
        )));
    }
    let visible = |s: &str| s.bytes().all(|b| b.is_ascii_graphic());
    if !req.path.starts_with('/') || req.path.starts_with("//") || !visible(&req.path) {
        return Err(ApiError::bad_request(
            "path: must start with a single / and hold visible ASCII only (percent-encode the rest)",
        ));
    }
    if req.path.contains(['?', '#']) {
        return Err(ApiError::bad_request("path: give the query in `query`"));
    }
    if let Some(q) = &req.query {
        if !visible(q) || q.contains('#') {
            return Err(ApiError::bad_request("query: visible ASCII only, no #"));
        }
    }
    for (name, value) in &req.headers {
        if !PASSED.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            return Err(ApiError::bad_request(format!(
                "headers: {name} is not passed on (only {})",
                PASSED.join(", ")
            )));
        }
        if value.bytes().any(|b| !(b == b' ' || b.is_ascii_graphic())) {
            return Err(ApiError::bad_request(format!(
                "headers: {name}: visible ASCII only"
            )));
        }
    }
    if req.body.as_ref().is_some_and(|b| b.len() > MAX_BODY_BYTES) {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "BODY_TOO_LARGE",
            format!("body: at most {MAX_BODY_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn client() -> ApiResult<&'static reqwest::Client> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c);
    }
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ApiError::internal(format!("HTTP client: {e}")))?;
    Ok(CLIENT.get_or_init(|| c))
}

/// Sends `req` to the first live node's sandbox listener; answers `{node_id, request: {method,
/// url, headers, body}, response: {status, headers, body, body_encoding, truncated},
/// latency_ms}`. 503 `NO_SANDBOX_GATEWAY` when no node runs one, 502 `UPSTREAM_ERROR` when
/// it cannot be reached.
pub async fn forward(state: &Shared, request_id: &str, req: TryRequest) -> ApiResult<Value> {
    check(&req)?;
    let node = pick::node(state, None).await?;
    let addr = node.sandbox_addr.clone().unwrap_or_default();
    let url = match req.query.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => format!("http://{addr}{}?{q}", req.path),
        None => format!("http://{addr}{}", req.path),
    };
    let method = reqwest::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| ApiError::bad_request("method: not an HTTP method"))?;
    let mut builder = client()?.request(method, &url).timeout(TIMEOUT);
    let mut sent = Map::new();
    let has_id = req
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("x-portico-request-id"));
    let mut headers: Vec<(String, String)> = req.headers.clone().into_iter().collect();
    if !has_id {
        headers.push((
            "X-Portico-Request-Id".to_owned(),
            format!("{request_id}-portal"),
        ));
    }
    for (k, v) in &headers {
        builder = builder.header(k.as_str(), v.as_str());
        sent.insert(k.clone(), json!(v));
    }
    let body = req.body.clone().unwrap_or_default();
    if !body.is_empty() {
        builder = builder.body(body.clone());
    }
    let started = Instant::now();
    let resp = builder.send().await.map_err(|e| {
        ApiError::bad_gateway(format!(
            "calling the sandbox listener of gateway node {} at {addr}: {e}",
            node.node_id
        ))
    })?;
    let status = resp.status().as_u16();
    let mut response_headers = Map::new();
    for (name, value) in resp.headers() {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match response_headers.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                response_headers.insert(name.as_str().to_owned(), Value::String(v));
            }
        }
    }
    let bytes = resp.bytes().await.map_err(|e| {
        ApiError::bad_gateway(format!(
            "reading the sandbox answer of gateway node {}: {e}",
            node.node_id
        ))
    })?;
    let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    tracing::info!(
        request_id,
        node = %node.node_id,
        method = %req.method,
        path = %req.path,
        app_key = req.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(HEADER_APP_KEY)).map(|(_, v)| v.as_str()).unwrap_or(""),
        status,
        latency_ms,
        "portal try-it forwarded to the sandbox"
    );
    let cut = bytes.len().min(MAX_SHOWN_BODY);
    let (text, encoding) = match std::str::from_utf8(&bytes[..cut]) {
        Ok(s) => (s.to_owned(), "utf-8"),
        Err(_) => {
            use base64::Engine as _;
            (
                base64::engine::general_purpose::STANDARD.encode(&bytes[..cut]),
                "base64",
            )
        }
    };
    Ok(json!({
        "node_id": node.node_id,
        "request": {"method": req.method, "url": url, "headers": sent, "body": body},
        "response": {
            "status": status,
            "headers": response_headers,
            "body": text,
            "body_encoding": encoding,
            "body_bytes": bytes.len(),
            "truncated": bytes.len() > MAX_SHOWN_BODY,
        },
        "latency_ms": latency_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> TryRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_narrow_requests_pass() {
        let ok = req(
            json!({"method": "GET", "path": "/v1/orders/42", "query": "a=1",
            "headers": {"X-Portico-AppKey": "k", "x-portico-signature": "ab", "Content-Type": "application/json"}}),
        );
        check(&ok).unwrap();
        for bad in [
            json!({"method": "CONNECT", "path": "/x"}),
            json!({"method": "GET", "path": "x"}),
            json!({"method": "GET", "path": "//evil.example/x"}),
            json!({"method": "GET", "path": "/a b"}),
            json!({"method": "GET", "path": "/a?b=1"}),
            json!({"method": "GET", "path": "/a", "headers": {"Host": "evil"}}),
            json!({"method": "GET", "path": "/a", "headers": {"Authorization": "Bearer x"}}),
            json!({"method": "GET", "path": "/a", "headers": {"X-Portico-Nonce": "a\r\nb"}}),
        ] {
            assert!(check(&req(bad.clone())).is_err(), "{bad}");
        }
        let big =
            req(json!({"method": "POST", "path": "/a", "body": "x".repeat(MAX_BODY_BYTES + 1)}));
        assert_eq!(check(&big).unwrap_err().code, "BODY_TOO_LARGE");
    }
}
