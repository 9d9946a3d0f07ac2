//! The console's "try it" (served at `POST /api/v1/sandbox/call` by [`crate::api::sandbox`]).
//!
//! The registry makes the call a merchant would make, against a live gateway node's sandbox
//! listener (its `sandbox_addr`, from `<root>/nodes/*`), signed as docs/PROTOCOL.md ("Signing a
//! request") says with a sandbox app's secret (`<root>/sandbox/apps/<key>`), and answers what
//! was sent and what came back: `{request: {method, url, headers, body}, response: {status,
//! headers, body}, latency_ms}`. The secret never leaves the registry; the signature headers
//! and the string-to-sign are shown, for debugging a merchant's own signer.
//!
//! The request names an API (`api_id`: its draft gives the method, and the path when it has no
//! variables) and/or `method` + `path` (with the query, or `query` apart). `app_key` is the
//! sandbox app to sign with; without it, the first active sandbox app granted the API (or
//! `*`) is used, and an API whose `auth` is `none` is called unsigned. `body` is sent as is
//! when a string, as JSON otherwise.
//!
//! A draft the sandbox refuses (the registry's build of the sandbox tree, or any gateway's
//! sandbox plane, says so) is not called: 409 `DRAFT_REFUSED` with every reason
//! ([`crate::served`]).
//!
//! - [`prepare`]: what is sent (method, path, query, body, headers, signature);
//! - [`pick`]: the sandbox app to sign with and the gateway node to call.

pub mod pick;
pub mod prepare;

use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, parse_json};
use crate::state::Shared;
use crate::zk_store::Env;
use base64::Engine as _;
use portico_control::v1;
use portico_control::zk::NodeInfo;
pub use prepare::CallRequest;
use prepare::{Outgoing, Target};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest response body relayed and shown: the body is read as it streams in and no further
/// than this (the connection is then dropped, and `truncated` says so), so a large or endless
/// answer costs the registry this much memory at most.
pub const MAX_SHOWN_BODY: usize = 1024 * 1024;

/// What came back from the gateway.
pub struct Received {
    status: u16,
    headers: Map<String, Value>,
    /// At most [`MAX_SHOWN_BODY`] bytes.
    bytes: Vec<u8>,
    /// Whether the body went on past [`MAX_SHOWN_BODY`] (not read further).
    truncated: bool,
    /// From sending to the body read (to its end or the cap), in milliseconds (one decimal).
    pub latency_ms: f64,
}

impl Received {
    /// The answer's `response` part: `{status, headers, body, body_encoding, body_bytes,
    /// truncated}` (`body_bytes`: the bytes shown, at most [`MAX_SHOWN_BODY`]).
    pub fn to_json(&self) -> Value {
        let (body, encoding) = shown(&self.bytes);
        json!({
            "status": self.status,
            "headers": self.headers,
            "body": body,
            "body_encoding": encoding,
            "body_bytes": self.bytes.len(),
            "truncated": self.truncated,
        })
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// An answer read by another sender (the portal's, which keeps the path exactly as
    /// typed: `crate::portal::forward`); `bytes` at most [`MAX_SHOWN_BODY`].
    pub fn new(
        status: u16,
        headers: Map<String, Value>,
        bytes: Vec<u8>,
        truncated: bool,
        latency_ms: f64,
    ) -> Received {
        Received {
            status,
            headers,
            bytes,
            truncated,
            latency_ms,
        }
    }
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

/// Makes the call `req` describes; `request_id` is the registry request's (the call carries
/// it with `-try` added). Answers what was sent and what came back.
pub async fn call(state: &Shared, request_id: &str, req: CallRequest) -> ApiResult<Value> {
    let draft = load_draft(state, req.api_id.as_deref()).await?;
    if let Some(id) = req.api_id.as_deref() {
        // A draft the sandbox refuses is not served: the call would reach whatever the sandbox
        // serves on that route (another API) and report its answer as the draft's.
        let refusals = crate::served::api_refusals(state, Env::Sandbox).await?;
        crate::served::refuse_try(id, refusals.of(id))?;
    }
    let target = Target::of(&req, draft.as_ref())?;
    prepare::check_headers(&req.headers)?;
    let body = prepare::body_bytes(req.body.as_ref())?;
    let unsigned =
        req.app_key.is_none() && draft.as_ref().is_some_and(|d| d.auth == v1::AuthMode::None);
    let app = if unsigned {
        None
    } else {
        Some(pick::app(state, req.app_key.as_deref(), req.api_id.as_deref()).await?)
    };
    let node = pick::node(state, req.node_id.as_deref()).await?;
    let sandbox_addr = node.sandbox_addr.clone().unwrap_or_default();
    let call_id = format!("{request_id}-try");
    let call_id = if call_id.len() <= 64 {
        call_id
    } else {
        request_id.to_owned()
    };
    let out = Outgoing::new(
        &target,
        &sandbox_addr,
        &req.headers,
        &body,
        app.as_ref(),
        &call_id,
    );
    let timeout_ms = draft
        .as_ref()
        .map(|d| d.backend.timeout_ms)
        .unwrap_or(v1::DEFAULT_TIMEOUT_MS)
        .saturating_add(5_000)
        .min(65_000);
    let received = send(
        out.method.clone(),
        &out.url,
        &out.headers,
        &body,
        Duration::from_millis(timeout_ms),
        &node,
    )
    .await?;
    let mut answer = answer(out, &body, received);
    answer["node_id"] = json!(node.node_id);
    answer["api_id"] = json!(req.api_id);
    Ok(answer)
}

/// The draft `api_id` names, if any (404 when there is none).
async fn load_draft(state: &Shared, api_id: Option<&str>) -> ApiResult<Option<v1::ApiDefinition>> {
    let Some(id) = api_id else {
        return Ok(None);
    };
    check_name("api_id", id)?;
    let doc = state
        .store
        .require(
            &Env::Sandbox.path(&format!("apis/{id}")),
            &format!("draft API {id:?} (import or create it first)"),
        )
        .await?;
    Ok(Some(
        parse_json::<v1::ApiDefinition>(&doc.data, &format!("draft {id}"))?.0,
    ))
}

/// Sends a request to `node`'s sandbox listener and reads the answer up to
/// [`MAX_SHOWN_BODY`] (502
/// `UPSTREAM_ERROR` when the node cannot be reached or read). Both "try it"s send through
/// here: the console's ([`call`]) and the portal's (`crate::portal::forward`).
pub async fn send(
    method: reqwest::Method,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Duration,
    node: &NodeInfo,
) -> ApiResult<Received> {
    let mut builder = client()?.request(method, url).timeout(timeout);
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    if !body.is_empty() {
        builder = builder.body(body.to_vec());
    }
    let started = Instant::now();
    let resp = builder.send().await.map_err(|e| {
        ApiError::bad_gateway(format!(
            "calling the sandbox listener of gateway node {} at {}: {}",
            node.node_id,
            node.sandbox_addr.as_deref().unwrap_or_default(),
            error_chain(&e.without_url())
        ))
    })?;
    let status = resp.status().as_u16();
    let mut headers = Map::new();
    for (name, value) in resp.headers() {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(v));
            }
        }
    }
    let mut resp = resp;
    let mut bytes: Vec<u8> = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = resp.chunk().await.map_err(|e| {
        ApiError::bad_gateway(format!(
            "reading the sandbox response from gateway node {}: {e}",
            node.node_id
        ))
    })? {
        let room = MAX_SHOWN_BODY - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    Ok(Received {
        status,
        headers,
        bytes,
        truncated,
        latency_ms,
    })
}

/// An error with its sources (reqwest's own text leaves out why the request failed).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Text as is when it is UTF-8, else base64; and which it is.
fn shown(bytes: &[u8]) -> (String, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), "utf-8"),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(bytes),
            "base64",
        ),
    }
}

/// The answer: the request as sent (with the app and the string-to-sign) and the response.
fn answer(out: Outgoing, body: &[u8], received: Received) -> Value {
    let request_headers: Map<String, Value> = out
        .headers
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    json!({
        "request": {
            "method": out.method.as_str(),
            "url": out.url,
            "headers": request_headers,
            "body": shown(body).0,
            "app_key": out.app_key,
            "string_to_sign": out.string_to_sign,
        },
        "response": received.to_json(),
        "latency_ms": received.latency_ms,
    })
}
