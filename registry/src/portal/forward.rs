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
use crate::sandbox_call::{self, pick};
use crate::state::Shared;
use portico_control::sign::{HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use portico_control::validate::METHODS;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest body forwarded (the gateway's default body limit).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
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

/// Sends `req` to the first live node's sandbox listener (through the console's
/// [`sandbox_call::send`]); answers `{node_id, request: {method, url, headers, body},
/// response: {status, headers, body, body_encoding, truncated}, latency_ms}`. 503
/// `NO_SANDBOX_GATEWAY` when no node runs one, 502 `UPSTREAM_ERROR` when it cannot be reached.
pub async fn forward(state: &Shared, request_id: &str, req: TryRequest) -> ApiResult<Value> {
    check(&req)?;
    let node = pick::node(state, None).await?;
    let addr = node.sandbox_addr.as_deref().unwrap_or_default();
    let url = match req.query.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => format!("http://{addr}{}?{q}", req.path),
        None => format!("http://{addr}{}", req.path),
    };
    let method = reqwest::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| ApiError::bad_request("method: not an HTTP method"))?;
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
    let body = req.body.clone().unwrap_or_default();
    let received =
        sandbox_call::send(method, &url, &headers, body.as_bytes(), TIMEOUT, &node).await?;
    tracing::info!(
        request_id,
        node = %node.node_id,
        method = %req.method,
        path = %req.path,
        app_key = req.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(HEADER_APP_KEY)).map(|(_, v)| v.as_str()).unwrap_or(""),
        status = received.status(),
        latency_ms = received.latency_ms,
        "portal try-it forwarded to the sandbox"
    );
    let sent: Map<String, Value> = headers.into_iter().map(|(k, v)| (k, json!(v))).collect();
    Ok(json!({
        "node_id": node.node_id,
        "request": {"method": req.method, "url": url, "headers": sent, "body": body},
        "response": received.to_json(),
        "latency_ms": received.latency_ms,
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
