//! The request pipeline, top to bottom, in one function ([`handle`]).
//!
//! ```mermaid
//! flowchart TD
//!     A[request head read by Pingora] --> B[ip_acl]
//!     B -->|IP_BLOCKED 403| R[rescue: envelope]
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
//!     H -->|fallback or API_DEGRADED 503| S[canned reply]
//!     H --> I[bulkhead]
//!     I -->|BULKHEAD_FULL 503| R
//!     I --> J[breaker]
//!     J -->|CIRCUIT_OPEN 503| R
//!     J --> K[balance]
//!     K -->|NO_HEALTHY_UPSTREAM 503| R
//!     K --> L{backend}
//!     L -->|http| M[Pingora upstream pool, streamed back]
//!     L -->|grpc| N[transcode + tonic call, JSON answer]
//!     M -->|UPSTREAM_ERROR 502 / UPSTREAM_TIMEOUT 504| R
//!     N -->|gRPC status mapped / 502 / 504| R
//! ```
//!
//! Every stage reads the same `Runtime`, loaded once at the top. Nothing here waits on
//! ZooKeeper, a lock or a disk.

use crate::edge::{EdgeCtx, EdgeRequest, Flow, Reply, RouteMatch, Stage};
use crate::error::{Code, GatewayError};
use crate::invoke::http::{Attempt, Outgoing};
use crate::invoke::Answer;
use crate::runtime::{ApiRuntime, Plane, Runtime};
use bytes::{Bytes, BytesMut};
use pingora_proxy::Session;
use portico_control::BackendKind;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest time the whole request body may take to arrive.
const BODY_READ_DEADLINE: Duration = Duration::from_secs(30);
/// At most this many request headers.
pub const MAX_HEADERS: usize = 100;
/// At most this many bytes of request headers (names + values).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// What the pipeline did with a request that was not refused.
pub enum Handled {
    /// A reply for the rescue point to write (a fallback, a transcoded answer).
    Reply(Reply),
    /// A whole answer from a gRPC backend.
    Answer(Answer),
    /// An HTTP backend's response, already streamed to the merchant with this status.
    Streamed(u16),
}

/// Per-request state kept by the proxy for logging and metrics.
#[derive(Debug)]
pub struct RequestCtx {
    pub request_id: String,
    pub started: Instant,
    pub edge: EdgeCtx,
    /// The backend endpoint called, if any.
    pub upstream: Option<std::net::SocketAddr>,
    pub upstream_latency: Option<Duration>,
    /// The envelope code of a refusal, or `OK`.
    pub code: &'static str,
    pub status: u16,
    /// The routed API's metric series (set after `route`).
    pub api_metrics: Option<Arc<crate::runtime::ApiMetrics>>,
}

impl RequestCtx {
    pub fn new() -> Self {
        RequestCtx {
            request_id: String::new(),
            started: Instant::now(),
            edge: EdgeCtx::default(),
            upstream: None,
            upstream_latency: None,
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
        match Stage::apply(&$stage, $req, $ctx) {
            Flow::Continue => {}
            Flow::Respond(Reply::Error(e)) => return Err(e),
            Flow::Respond(reply) => return Ok(Handled::Reply(reply)),
        }
    };
}

/// The pipeline: edge stages in request order, then the invoke tier.
pub async fn handle(
    plane: &Plane,
    session: &mut Session,
    ctx: &mut RequestCtx,
) -> Result<Handled, GatewayError> {
    let rt = plane.current.load_full();
    let now = portico_control::clock::now_ms();
    // Ambiguous framing and oversized heads are refused with the connection closed.
    crate::edge::framing::check(session)?;
    check_header_limits(session.req_header()).inspect_err(|_| session.set_keepalive(None))?;

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
    ctx.api_metrics = rt.apis.get(&route.api.id).map(|a| a.metrics.clone());
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
    invoke(plane, &rt, session, ctx, &route, body).await
}

async fn invoke(
    plane: &Plane,
    rt: &Arc<Runtime>,
    session: &mut Session,
    ctx: &mut RequestCtx,
    route: &RouteMatch,
    body: Bytes,
) -> Result<Handled, GatewayError> {
    let api = &route.api;
    let api_rt: &ApiRuntime = rt.apis.get(&api.id).ok_or_else(|| {
        GatewayError::new(
            Code::NoHealthyUpstream,
            format!("cluster {} has no endpoints", api.cluster),
        )
    })?;
    let _permit = api_rt.bulkhead.acquire().await?;
    let timeout = Duration::from_millis(api.timeout_ms);
    let ticket = api_rt.breaker.try_acquire_with_timeout(timeout)?;
    let deadline = Instant::now() + timeout;

    match &api.backend {
        BackendKind::Http { path } => {
            let upstream_path = upstream_path(session, route, path.as_deref())?;
            let req = session.req_header();
            let out = Outgoing {
                method: &req.method,
                path_and_query: &upstream_path,
                headers: &req.headers,
                body,
                request_id: &ctx.request_id,
                client_ip: ctx.edge.client_ip,
                app_key: ctx.edge.app_key.as_deref(),
            };
            // Pick an endpoint; on a connect failure (nothing sent) try one other.
            let mut tried: Vec<&str> = Vec::with_capacity(2);
            let mut last_err = None;
            let mut answered = None;
            for _ in 0..2 {
                let Some(name) = api_rt.balancer.pick_excluding(&tried) else {
                    break;
                };
                tried.push(name);
                let Some(addr) = api_rt.addrs.get(name).copied() else {
                    continue;
                };
                ctx.upstream = Some(addr);
                match plane.shared.http.attempt(addr, &out, deadline).await {
                    Attempt::Answered(up, latency) => {
                        answered = Some((up, latency, addr));
                        break;
                    }
                    Attempt::ConnectFailed(e) => last_err = Some(e),
                    Attempt::Failed(e) => {
                        last_err = Some(e);
                        break;
                    }
                }
            }
            let Some((upstream, latency, addr)) = answered else {
                ticket.failure();
                return Err(last_err.unwrap_or_else(|| {
                    GatewayError::new(
                        Code::NoHealthyUpstream,
                        format!("cluster {} has no usable endpoint", api.cluster),
                    )
                }));
            };
            ctx.upstream_latency = Some(latency);
            let status = upstream
                .response_header()
                .map(|h| h.status.as_u16())
                .unwrap_or(502);
            if status >= 500 {
                ticket.failure();
            } else {
                ticket.success(latency);
            }
            let status = plane
                .shared
                .http
                .relay(session, upstream, addr, &ctx.request_id, deadline)
                .await?;
            Ok(Handled::Streamed(status))
        }
        BackendKind::Grpc { .. } => {
            let method = rt.grpc.get(&api.id).ok_or_else(|| {
                GatewayError::new(
                    Code::Internal,
                    format!("API {} has no prepared gRPC method", api.id),
                )
            })?;
            let Some(name) = api_rt.balancer.pick_excluding(&[]) else {
                ticket.failure();
                return Err(GatewayError::new(
                    Code::NoHealthyUpstream,
                    format!("cluster {} has no endpoints", api.cluster),
                ));
            };
            let started = Instant::now();
            let timeout = deadline.saturating_duration_since(started);
            let req = session.req_header();
            let query = req.uri.query();
            let result = plane
                .shared
                .grpc
                .call(
                    &method,
                    route,
                    query,
                    &body,
                    &req.headers,
                    name,
                    timeout,
                    &ctx.request_id,
                )
                .await;
            let latency = started.elapsed();
            ctx.upstream = api_rt.addrs.get(name).copied();
            ctx.upstream_latency = Some(latency);
            match &result {
                Err(e) if crate::invoke::grpc::is_backend_failure(e) => ticket.failure(),
                _ => ticket.success(latency),
            }
            result.map(Handled::Answer)
        }
    }
}

/// The upstream path for an HTTP backend: the rewrite template filled with the path
/// variables, or the path as sent (router-style calls go to the rewrite or `/`), plus the query.
fn upstream_path(
    session: &Session,
    route: &RouteMatch,
    rewrite: Option<&str>,
) -> Result<String, GatewayError> {
    let req = session.req_header();
    let path = match (rewrite, route.binding) {
        (Some(rewrite), Some(i)) => {
            let template = &route
                .api
                .bindings
                .get(i)
                .ok_or_else(|| GatewayError::new(Code::Internal, "binding out of range"))?
                .template;
            portico_control::template::render_rewrite(rewrite, template, &route.vars)
                .map_err(|e| GatewayError::bad_request(format!("path variables: {e}")))?
        }
        // Router style has no path variables: a rewrite that needs one cannot be served.
        (Some(rewrite), None) => portico_control::template::render_path(rewrite, &route.vars)
            .map_err(|e| {
                GatewayError::bad_request(format!(
                    "API {} needs path variables; call it by its RESTful path ({e})",
                    route.api.id
                ))
            })?,
        (None, _) if route.router_style => "/".to_owned(),
        (None, _) => req.uri.path().to_owned(),
    };
    let query = if route.router_style {
        None
    } else {
        req.uri.query()
    };
    Ok(match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    })
}

fn check_header_limits(req: &pingora_http::RequestHeader) -> Result<(), GatewayError> {
    if req.headers.len() > MAX_HEADERS {
        return Err(GatewayError::bad_request(format!(
            "too many headers (more than {MAX_HEADERS})"
        )));
    }
    let bytes: usize = req
        .headers
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

/// Reads the whole request body, refusing more than `limit` bytes with 413 `BODY_TOO_LARGE`.
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
    crate::edge::framing::continue_if_expected(session).await?;
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(chunk) = crate::edge::framing::read_body_chunk(session).await? {
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
