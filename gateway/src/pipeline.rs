//! The request pipeline, top to bottom, in one function ([`handle`]): the edge stages in
//! request order, then the hand-over to the invoke tier ([`invoke::call`]).
//!
//! ```mermaid
//! flowchart TD
//!     A[request head read by Pingora] --> L[header limits]
//!     L -->|BAD_REQUEST 400| R[rescue: envelope]
//!     L --> B[ip_acl]
//!     B -->|IP_BLOCKED 403| R
//!     B --> C[route]
//!     C -->|BAD_REQUEST 400 / API_NOT_FOUND 404| R
//!     C --> D[read body, bounded]
//!     D -->|BODY_TOO_LARGE 413| R
//!     D --> E[auth]
//!     E -->|401 codes| R
//!     E --> F[permit]
//!     F -->|APP_DISABLED / APP_FORBIDDEN 403| R
//!     F --> G[rate_limit]
//!     G -->|RATE_LIMITED 429| R
//!     G --> H[degrade]
//!     H -->|fallback: Response::Whole| W[rescue point writes it]
//!     H -->|API_DEGRADED 503| R
//!     H --> I[invoke::call]
//!     I -->|bulkhead, breaker, balance: 503| R
//!     I -->|http: streamed| S[Response::Streamed]
//!     I -->|grpc: transcoded JSON| W
//!     I -->|502 / 504 / gRPC status| R
//! ```
//!
//! Every stage reads the same `Runtime`, loaded once at the top. Nothing here waits on
//! ZooKeeper, a lock or a disk.

use crate::edge::{EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use crate::invoke::{self, Call, Upstream};
use crate::model::Response;
use crate::observe::metrics::ApiMetrics;
use crate::runtime::Plane;
use bytes::{Bytes, BytesMut};
use pingora_proxy::Session;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest time the whole request body may take to arrive.
const BODY_READ_DEADLINE: Duration = Duration::from_secs(30);
/// At most this many request headers.
pub const MAX_HEADERS: usize = 100;
/// At most this many bytes of request headers (names + values).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Per-request state kept by the proxy for logging and metrics.
#[derive(Debug)]
pub struct RequestCtx {
    pub request_id: String,
    pub started: Instant,
    pub edge: EdgeCtx,
    /// The backend endpoint called, if any, and its latency.
    pub upstream: Upstream,
    /// The envelope code of a refusal, or `OK`.
    pub code: &'static str,
    pub status: u16,
    /// The routed API's metric series (set after `route`).
    pub api_metrics: Option<Arc<ApiMetrics>>,
}

impl RequestCtx {
    pub fn new() -> Self {
        RequestCtx {
            request_id: String::new(),
            started: Instant::now(),
            edge: EdgeCtx::default(),
            upstream: Upstream::default(),
            code: "OK",
            status: 0,
            api_metrics: None,
        }
    }
}

impl Default for RequestCtx {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs one stage: on `Flow::Respond` the pipeline stops and answers.
macro_rules! stage {
    ($stage:expr, $req:expr, $ctx:expr) => {
        if let Flow::Respond(answer) = Stage::apply(&$stage, $req, $ctx) {
            return answer;
        }
    };
}

/// The pipeline: edge stages in request order, then the invoke tier. `Ok` is the answer for
/// the rescue point (or the note that it was streamed); `Err` a refusal or failure.
pub async fn handle(
    plane: &Plane,
    session: &mut Session,
    ctx: &mut RequestCtx,
) -> Result<Response, GatewayError> {
    let rt = plane.current.load_full();
    let now = portico_control::clock::now_ms();
    check_header_limits(&session.req_header().headers)?;

    // Edge, before the body: cheap checks first.
    {
        let req = edge_request(session, &[], now);
        stage!(rt.edge.ip_acl, &req, &mut ctx.edge);
        stage!(rt.edge.route, &req, &mut ctx.edge);
    }
    let route = ctx
        .edge
        .route
        .clone()
        .ok_or_else(|| GatewayError::new(Code::Internal, "route stage set no API"))?;
    ctx.api_metrics = rt.metrics.get(&route.api.id).cloned();
    let limit = route
        .api
        .policy
        .max_body_bytes
        .unwrap_or(plane.shared.default_max_body);
    let body = read_body(session, limit).await?;

    // Edge, with the body: who is calling, may they, how often, is the API switched off.
    {
        let req = edge_request(session, &body, now);
        stage!(rt.edge.auth, &req, &mut ctx.edge);
        stage!(rt.edge.permit, &req, &mut ctx.edge);
        stage!(rt.edge.rate_limit, &req, &mut ctx.edge);
        stage!(rt.edge.degrade, &req, &mut ctx.edge);
    }

    // Invoke: bulkhead → breaker → balance → backend.
    let call = Call {
        route: &route,
        body,
        request_id: &ctx.request_id,
        client_ip: ctx.edge.client_ip,
        app_key: ctx.edge.app_key.as_deref(),
    };
    let clients = &plane.shared.clients;
    invoke::call(clients, &rt.invoke, session, call, &mut ctx.upstream).await
}

/// Refuses a request head with more than [`MAX_HEADERS`] headers or more than
/// [`MAX_HEADER_BYTES`] of names and values: 400 `BAD_REQUEST`.
fn check_header_limits(headers: &http::HeaderMap) -> Result<(), GatewayError> {
    if headers.len() > MAX_HEADERS {
        return Err(GatewayError::bad_request(format!(
            "too many headers (more than {MAX_HEADERS})"
        )));
    }
    let bytes: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum();
    if bytes > MAX_HEADER_BYTES {
        return Err(GatewayError::bad_request(format!(
            "request headers larger than {MAX_HEADER_BYTES} bytes"
        )));
    }
    Ok(())
}

fn edge_request<'a>(session: &'a Session, body: &'a [u8], now_ms: u64) -> EdgeRequest<'a> {
    let req = session.req_header();
    EdgeRequest {
        method: req.method.as_str(),
        path: req.uri.path(),
        query: req.uri.query(),
        headers: &req.headers,
        peer: client_peer(session),
        body,
        now_ms,
    }
}

fn client_peer(session: &Session) -> Option<IpAddr> {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
}

/// Reads the whole request body, refusing more than `limit` bytes with 413 `BODY_TOO_LARGE`
/// (on `Content-Length` before reading, and while reading), and a body not received within
/// [`BODY_READ_DEADLINE`] with 400 `BAD_REQUEST`.
async fn read_body(session: &mut Session, limit: u64) -> Result<Bytes, GatewayError> {
    let too_large = || {
        GatewayError::new(
            Code::BodyTooLarge,
            format!("request body larger than {limit} bytes"),
        )
    };
    if let Some(len) = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        if len > limit {
            return Err(too_large());
        }
    }
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(chunk) = session.read_request_body().await.map_err(|e| {
            GatewayError::bad_request(format!("reading request body: {}", e.etype().as_str()))
        })? {
            if (buf.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(BODY_READ_DEADLINE, read).await {
        Err(_) => Err(GatewayError::bad_request(
            "request body not received in time",
        )),
        Ok(r) => r.map(|()| buf.freeze()),
    }
}
