//! HTTP backends, proxied through Pingora's upstream connection pool (keepalive).
//!
//! The gateway has already read and verified the whole request body (the signature covers
//! it), so the upstream request is written in one go; the response is streamed back to the
//! merchant as it arrives. The API's `timeout_ms` bounds connect and the whole exchange.

use crate::error::{Code, GatewayError};
use crate::request_id;
use bytes::Bytes;
use pingora_core::connectors::http::Connector;
use pingora_core::connectors::ConnectorOptions;
use pingora_core::protocols::http::client::HttpSession;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::ErrorType;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::Session;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long an idle upstream connection stays in the pool.
const UPSTREAM_IDLE: Duration = Duration::from_secs(60);

/// Request headers that describe one hop and are never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

/// What the upstream request carries besides the original headers.
pub struct Outgoing<'a> {
    pub method: &'a http::Method,
    /// The upstream path and query (already rewritten).
    pub path_and_query: &'a str,
    pub headers: &'a http::HeaderMap,
    pub body: Bytes,
    pub request_id: &'a str,
    pub client_ip: Option<std::net::IpAddr>,
    pub app_key: Option<&'a str>,
}

/// How a forwarded call ended, for the breaker and the access log.
#[derive(Debug)]
pub struct Forwarded {
    pub status: u16,
    /// Time until the response header arrived.
    pub latency: Duration,
}

/// Result of one attempt before anything was written downstream.
pub enum Attempt {
    /// The upstream answered with this header; the session to stream the body from.
    Answered(Box<HttpSession>, Duration),
    /// Could not connect; nothing was sent, so another endpoint may be tried.
    ConnectFailed(GatewayError),
    /// Failed after the request was (maybe) sent: do not retry.
    Failed(GatewayError),
}

/// Pingora's pooled connector, shared by every API (pools are per endpoint).
pub struct HttpInvoker {
    connector: Connector,
}

impl Default for HttpInvoker {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpInvoker {
    pub fn new() -> Self {
        HttpInvoker {
            connector: Connector::new(Some(ConnectorOptions::new(1024))),
        }
    }

    fn peer(addr: SocketAddr, timeout: Duration) -> HttpPeer {
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(timeout);
        peer.options.total_connection_timeout = Some(timeout);
        peer.options.read_timeout = Some(timeout);
        peer.options.write_timeout = Some(timeout);
        peer.options.idle_timeout = Some(UPSTREAM_IDLE);
        peer
    }

    /// Sends the request to `addr` and waits for the response header, within `deadline`.
    pub async fn attempt(
        &self,
        addr: SocketAddr,
        out: &Outgoing<'_>,
        deadline: Instant,
    ) -> Attempt {
        let started = Instant::now();
        let left = deadline.saturating_duration_since(started);
        if left.is_zero() {
            return Attempt::Failed(timeout_error(addr));
        }
        let peer = Self::peer(addr, left);
        let mut upstream =
            match tokio::time::timeout(left, self.connector.get_http_session(&peer)).await {
                Err(_) => return Attempt::ConnectFailed(timeout_error(addr)),
                Ok(Err(e)) => {
                    let err = match e.etype() {
                        ErrorType::ConnectTimedout => timeout_error(addr),
                        _ => GatewayError::new(
                            Code::UpstreamError,
                            format!("cannot connect to {addr}: {}", e.etype().as_str()),
                        ),
                    };
                    return Attempt::ConnectFailed(err);
                }
                Ok(Ok((session, _reused))) => session,
            };
        let header = match build_request_header(out, addr) {
            Ok(h) => h,
            Err(e) => return Attempt::Failed(e),
        };
        let exchange = async {
            upstream.write_request_header(Box::new(header)).await?;
            if !out.body.is_empty() {
                upstream.write_request_body(out.body.clone(), true).await?;
            }
            upstream.finish_request_body().await?;
            upstream.read_response_header().await?;
            Ok::<(), Box<pingora_error::Error>>(())
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, exchange).await {
            Err(_) => Attempt::Failed(timeout_error(addr)),
            Ok(Err(e)) => Attempt::Failed(match e.etype() {
                ErrorType::ReadTimedout | ErrorType::WriteTimedout => timeout_error(addr),
                _ => GatewayError::new(
                    Code::UpstreamError,
                    format!("upstream {addr} failed: {}", e.etype().as_str()),
                ),
            }),
            Ok(Ok(())) => Attempt::Answered(Box::new(upstream), started.elapsed()),
        }
    }

    /// Streams an answered upstream response to the merchant, adding the request id.
    /// Errors after the header was written cannot be enveloped: the connection is closed.
    pub async fn relay(
        &self,
        session: &mut Session,
        mut upstream: Box<HttpSession>,
        addr: SocketAddr,
        request_id: &str,
        deadline: Instant,
    ) -> Result<u16, GatewayError> {
        let Some(resp) = upstream.response_header() else {
            return Err(GatewayError::new(
                Code::UpstreamError,
                "upstream sent no response header",
            ));
        };
        let mut head = ResponseHeader::build(resp.status, Some(resp.headers.len() + 1))
            .map_err(|e| GatewayError::new(Code::Internal, e.to_string()))?;
        for (name, value) in resp.headers.iter() {
            let n = name.as_str();
            if matches!(
                n,
                "connection" | "keep-alive" | "proxy-connection" | "upgrade"
            ) {
                continue;
            }
            let _ = head.append_header(name.clone(), value.clone());
        }
        let _ = head.insert_header(request_id::HEADER, request_id);
        let status = resp.status.as_u16();
        let end = upstream.response_done();
        session
            .write_response_header(Box::new(head), end)
            .await
            .map_err(|e| GatewayError::new(Code::Internal, format!("writing response: {e}")))?;
        let mut done = end;
        while !done {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = match tokio::time::timeout(left, upstream.read_response_body()).await {
                Err(_) => return Err(timeout_error(addr)),
                Ok(Err(e)) => {
                    return Err(GatewayError::new(
                        Code::UpstreamError,
                        format!("reading upstream body: {e}"),
                    ))
                }
                Ok(Ok(c)) => c,
            };
            done = chunk.is_none() || upstream.response_done();
            session
                .write_response_body(chunk, done)
                .await
                .map_err(|e| {
                    GatewayError::new(Code::Internal, format!("writing response body: {e}"))
                })?;
        }
        let peer = Self::peer(addr, UPSTREAM_IDLE);
        self.connector
            .release_http_session(*upstream, &peer, Some(UPSTREAM_IDLE))
            .await;
        Ok(status)
    }
}

fn timeout_error(addr: SocketAddr) -> GatewayError {
    GatewayError::new(
        Code::UpstreamTimeout,
        format!("upstream {addr} did not answer in time"),
    )
}

fn build_request_header(
    out: &Outgoing<'_>,
    addr: SocketAddr,
) -> Result<RequestHeader, GatewayError> {
    let internal = |e: pingora_error::BError| GatewayError::new(Code::Internal, e.to_string());
    let mut h = RequestHeader::build(
        out.method.clone(),
        out.path_and_query.as_bytes(),
        Some(out.headers.len() + 4),
    )
    .map_err(internal)?;
    for (name, value) in out.headers.iter() {
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        h.append_header(name.clone(), value.clone())
            .map_err(internal)?;
    }
    if !out.headers.contains_key(http::header::HOST) {
        h.insert_header(http::header::HOST, addr.to_string())
            .map_err(internal)?;
    }
    if !out.body.is_empty()
        || matches!(
            *out.method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        )
    {
        h.insert_header(http::header::CONTENT_LENGTH, out.body.len().to_string())
            .map_err(internal)?;
    }
    if let Some(ip) = out.client_ip {
        let xff = match out
            .headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
        {
            Some(prev) => format!("{prev}, {ip}"),
            None => ip.to_string(),
        };
        h.insert_header("x-forwarded-for", xff).map_err(internal)?;
    }
    h.insert_header(request_id::HEADER, out.request_id)
        .map_err(internal)?;
    if let Some(app) = out.app_key {
        h.insert_header("x-portico-app", app).map_err(internal)?;
    }
    Ok(h)
}
