//! The console's "try it": `POST /api/v1/sandbox/call`.
//!
//! The registry makes the call a merchant would make, against a live gateway node's sandbox
//! listener (its `sandbox_addr`, from `<root>/nodes/*`), signed per DESIGN.md §3.1 with a
//! sandbox app's secret (`<root>/sandbox/apps/<key>`), and answers what was sent and what came
//! back: `{request: {method, url, headers, body}, response: {status, headers, body}, latency_ms}`.
//! The secret never leaves the registry; the signature headers and the string-to-sign are
//! shown, for debugging a merchant's own signer.
//!
//! The request names an API (`api_id`: its draft gives the method, and the path when it has no
//! variables) and/or `method` + `path` (with the query, or `query` apart). `app_key` is the
//! sandbox app to sign with; without it, the first active sandbox app granted the API (or
//! `*`) is used, and an API whose `auth` is `none` is called unsigned. `body` is sent as is
//! when a string, as JSON otherwise.

use crate::api::context::Ctx;
use crate::api::reply::json_response;
use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, parse_json};
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use crate::zk_store::Env;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::post;
use base64::Engine as _;
use portico_control::sign::sign_request;
use portico_control::v1;
use portico_control::zk::NodeInfo;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest response body shown (the rest is cut, and `truncated` says so).
const MAX_SHOWN_BODY: usize = 1024 * 1024;

pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::POST,
        "/sandbox/call",
        "sandbox",
        "Try an API in the sandbox: the registry signs the request with a sandbox app's secret \
         (§3.1) and sends it to a live gateway's sandbox listener; answers the request sent, \
         the response (status, headers, body) and the latency. Body: {api_id?, method?, \
         path?, query?, body?, headers?, app_key?, node_id?}",
        post(call),
    )
    .body(Body::Json("Any"))
    .reply(Reply::Json(200, "Any"))]
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallRequest {
    /// A draft API (`sandbox/apis/<id>`): gives the method, and the path if it has no variables.
    #[serde(default)]
    api_id: Option<String>,
    #[serde(default)]
    method: Option<String>,
    /// The path as sent, optionally with `?query`.
    #[serde(default)]
    path: Option<String>,
    /// The raw query (without `?`), if not in `path`.
    #[serde(default)]
    query: Option<String>,
    /// A string is sent as is; any other JSON value is sent as JSON.
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The sandbox app to sign with.
    #[serde(default)]
    app_key: Option<String>,
    /// The gateway node to call (default: the first live node with a sandbox listener).
    #[serde(default)]
    node_id: Option<String>,
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

/// A nonce of §3.1: `console-` and 16 random hex digits.
fn nonce() -> String {
    format!("console-{:016x}", fastrand::u64(..))
}

/// Headers the caller may not set: the signature's own and hop-by-hop ones.
fn reserved_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("x-portico-")
        || matches!(
            n.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding" | "upgrade" | "te"
        )
}

async fn call(State(state): State<Shared>, ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let (req, _) = parse_json::<CallRequest>(&body, "sandbox call")?;
    let store = &state.store;

    // The API, if named.
    let draft: Option<v1::ApiDefinition> = match &req.api_id {
        Some(id) => {
            check_name("api_id", id)?;
            let doc = store
                .require(
                    &Env::Sandbox.path(&format!("apis/{id}")),
                    &format!("draft API {id:?} (import or create it first)"),
                )
                .await?;
            Some(parse_json::<v1::ApiDefinition>(&doc.data, &format!("draft {id}"))?.0)
        }
        None => None,
    };

    // Method, path and query.
    let method = req
        .method
        .clone()
        .or_else(|| draft.as_ref().map(|d| d.http.method.clone()))
        .ok_or_else(|| ApiError::bad_request("method: required without api_id"))?
        .to_ascii_uppercase();
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| ApiError::bad_request(format!("method: {method:?} is not an HTTP method")))?;
    let raw_path = match (&req.path, &draft) {
        (Some(p), _) if !p.trim().is_empty() => p.trim().to_owned(),
        (_, Some(d)) if !d.http.path.contains('{') => d.http.path.clone(),
        (_, Some(d)) => {
            return Err(ApiError::bad_request(format!(
                "path: the API's path template {} has variables: give the path with them filled in",
                d.http.path
            )))
        }
        (_, None) => return Err(ApiError::bad_request("path: required without api_id")),
    };
    let (path, query) = match raw_path.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (raw_path.clone(), None),
    };
    let query = query
        .or_else(|| req.query.clone())
        .map(|q| q.trim_start_matches('?').to_owned())
        .filter(|q| !q.is_empty());
    if !path.starts_with('/') {
        return Err(ApiError::bad_request(format!(
            "path: {path:?} must start with /"
        )));
    }
    if path.contains(char::is_whitespace)
        || query
            .as_deref()
            .is_some_and(|q| q.contains(char::is_whitespace))
    {
        return Err(ApiError::bad_request(
            "path: spaces must be percent-encoded (%20)",
        ));
    }
    for name in req.headers.keys() {
        if reserved_header(name) {
            return Err(ApiError::bad_request(format!(
                "headers: {name} is set by the registry"
            )));
        }
    }

    // The body bytes.
    let body_bytes: Vec<u8> = match &req.body {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.clone().into_bytes(),
        Some(v) => serde_json::to_vec(v).map_err(|e| ApiError::internal(e.to_string()))?,
    };

    // The app to sign with.
    let unsigned =
        req.app_key.is_none() && draft.as_ref().is_some_and(|d| d.auth == v1::AuthMode::None);
    let app = if unsigned {
        None
    } else {
        Some(pick_app(&state, req.app_key.as_deref(), req.api_id.as_deref()).await?)
    };

    // The gateway node.
    let node = pick_node(&state, req.node_id.as_deref()).await?;
    let sandbox_addr = node.sandbox_addr.clone().unwrap_or_default();
    let url = match &query {
        Some(q) => format!("http://{sandbox_addr}{path}?{q}"),
        None => format!("http://{sandbox_addr}{path}"),
    };

    // Headers, then the signature over exactly what is sent.
    let mut headers: Vec<(String, String)> = Vec::new();
    let has_content_type = req
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("content-type"));
    if !body_bytes.is_empty() && !has_content_type {
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
    }
    headers.extend(req.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut string_to_sign = None;
    if let Some((key, secret)) = &app {
        let signed = sign_request(
            secret.as_bytes(),
            method.as_str(),
            &path,
            query.as_deref(),
            key,
            portico_control::clock::now_ms(),
            &nonce(),
            &body_bytes,
        );
        for (name, value) in signed.pairs() {
            headers.push((name.to_owned(), value.to_owned()));
        }
        string_to_sign = Some(signed.string_to_sign.clone());
    }
    let request_id = format!("{}-try", ctx.request_id);
    let request_id = if request_id.len() <= 64 {
        request_id
    } else {
        ctx.request_id.clone()
    };
    headers.push(("X-Portico-Request-Id".to_owned(), request_id));

    let timeout_ms = draft
        .as_ref()
        .map(|d| d.backend.timeout_ms)
        .unwrap_or(v1::DEFAULT_TIMEOUT_MS)
        .saturating_add(5_000)
        .min(65_000);
    let mut builder = client()?
        .request(method.clone(), &url)
        .timeout(Duration::from_millis(timeout_ms));
    for (k, v) in &headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    if !body_bytes.is_empty() {
        builder = builder.body(body_bytes.clone());
    }
    let started = Instant::now();
    let sent = builder.send().await;
    let resp = sent.map_err(|e| {
        ApiError::bad_gateway(format!(
            "calling the sandbox listener of gateway node {} at {sandbox_addr}: {e}",
            node.node_id
        ))
    })?;
    let status = resp.status();
    let mut resp_headers = Map::new();
    for (name, value) in resp.headers() {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match resp_headers.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                resp_headers.insert(name.as_str().to_owned(), Value::String(v));
            }
        }
    }
    let bytes = resp.bytes().await.map_err(|e| {
        ApiError::bad_gateway(format!(
            "reading the sandbox response from gateway node {}: {e}",
            node.node_id
        ))
    })?;
    let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    let (shown, truncated) = if bytes.len() > MAX_SHOWN_BODY {
        (&bytes[..MAX_SHOWN_BODY], true)
    } else {
        (&bytes[..], false)
    };
    let (body_text, encoding) = match std::str::from_utf8(shown) {
        Ok(s) => (s.to_owned(), "utf-8"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(shown),
            "base64",
        ),
    };
    let request_body = match std::str::from_utf8(&body_bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => base64::engine::general_purpose::STANDARD.encode(&body_bytes),
    };
    let request_headers: Map<String, Value> = headers
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let out = json!({
        "request": {
            "method": method.as_str(),
            "url": url,
            "headers": request_headers,
            "body": request_body,
            "app_key": app.as_ref().map(|(k, _)| k.clone()),
            "string_to_sign": string_to_sign,
        },
        "response": {
            "status": status.as_u16(),
            "headers": resp_headers,
            "body": body_text,
            "body_encoding": encoding,
            "body_bytes": bytes.len(),
            "truncated": truncated,
        },
        "latency_ms": latency_ms,
        "node_id": node.node_id,
        "api_id": req.api_id,
    });
    Ok(json_response(StatusCode::OK, &out, None))
}

/// The sandbox app `(key, secret)` to sign with: `wanted`, else the first active one granted
/// `api_id` (or `*`).
async fn pick_app(
    state: &Shared,
    wanted: Option<&str>,
    api_id: Option<&str>,
) -> ApiResult<(String, String)> {
    let store = &state.store;
    if let Some(key) = wanted {
        check_name("app_key", key)?;
        let doc = store
            .require(
                &Env::Sandbox.path(&format!("apps/{key}")),
                &format!("sandbox app {key:?}"),
            )
            .await?;
        let app: v1::App = serde_json::from_slice(&doc.data).map_err(|e| {
            ApiError::internal(format!("stored sandbox app {key:?} is not valid: {e}"))
        })?;
        return Ok((key.to_owned(), app.secret));
    }
    let docs = store.list_docs(&Env::Sandbox.path("apps")).await?;
    let mut fallback = None;
    for (key, doc) in docs {
        let Ok(app) = serde_json::from_slice::<v1::App>(&doc.data) else {
            continue;
        };
        if app.status != v1::AppStatus::Active {
            continue;
        }
        let granted = app
            .apis
            .iter()
            .any(|a| a == "*" || Some(a.as_str()) == api_id);
        if granted {
            return Ok((key, app.secret));
        }
        if fallback.is_none() {
            fallback = Some((key, app.secret));
        }
    }
    // An active app not granted the API still shows the gateway's APP_FORBIDDEN, which is
    // what a merchant would see.
    fallback.ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "SANDBOX_APP_MISSING",
            "no active sandbox app to sign with: create one (Apps → sandbox) and grant it the API",
        )
    })
}

/// The live gateway node to call: `wanted`, else the first with a sandbox listener.
async fn pick_node(state: &Shared, wanted: Option<&str>) -> ApiResult<NodeInfo> {
    let docs = state.store.list_docs("nodes").await?;
    let nodes: Vec<NodeInfo> = docs
        .iter()
        .filter_map(|(_, d)| serde_json::from_slice::<NodeInfo>(&d.data).ok())
        .collect();
    if let Some(id) = wanted {
        let node = nodes
            .into_iter()
            .find(|n| n.node_id == id)
            .ok_or_else(|| ApiError::not_found(format!("gateway node {id:?} is not live")))?;
        if node.sandbox_addr.is_none() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_SANDBOX_GATEWAY",
                format!("gateway node {id:?} runs no sandbox listener (--sandbox-listen)"),
            ));
        }
        return Ok(node);
    }
    let total = nodes.len();
    nodes
        .into_iter()
        .find(|n| n.sandbox_addr.as_deref().is_some_and(|a| !a.is_empty()))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_SANDBOX_GATEWAY",
                format!(
                    "no live gateway node runs a sandbox listener ({total} node(s) live): start \
                     one with --sandbox-listen"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_valid() {
        let n = nonce();
        assert!(portico_control::sign::valid_nonce(&n), "{n}");
    }

    #[test]
    fn reserved_headers() {
        assert!(reserved_header("X-Portico-Signature"));
        assert!(reserved_header("host"));
        assert!(!reserved_header("X-Demo-Delay-Ms"));
        assert!(!reserved_header("Content-Type"));
    }

    #[test]
    fn call_requests_parse() {
        let (r, _) = parse_json::<CallRequest>(
            br#"{"api_id":"order.getorder","path":"/v1/orders/42?x=1","body":{"a":1},"headers":{"X-Demo":"1"}}"#,
            "call",
        )
        .unwrap();
        assert_eq!(r.api_id.as_deref(), Some("order.getorder"));
        assert_eq!(r.headers["X-Demo"], "1");
        let e = parse_json::<CallRequest>(br#"{"nope":1}"#, "call").unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
    }
}
