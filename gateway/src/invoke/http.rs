//! HTTP backends, proxied through Pingora's upstream connection pool (keepalive).
//!
//! The gateway has already read and verified the whole request body (the signature covers
//! it), so the upstream request is built in full before the breaker is asked ([`prepare`])
//! and written in one go; the response is streamed back to the merchant as it arrives. The
//! API's `timeout_ms` bounds connect and the whole exchange with the backend; every write to
//! the merchant is bounded by the listener's write timeout (`--write-timeout-ms`), so a
//! client that does not read cannot hold the API's bulkhead slot.
//!
//! The upstream request ([`prepare`]): the method and path from [`upstream_target`] (the
//! API's rewrite filled with the path variables, or the path as sent; for the router style
//! the API's own first binding), the headers of `forward.rs` (what the gateway decided
//! about the caller, nothing a client made up), `Host` (the gateway's decision, never the
//! client's: the cluster's `host`, or the endpoint's address as configured; docs/PROTOCOL.md,
//! "What backends receive") and `Content-Length`.
//!
//! The response: the backend's status and headers, except hop-by-hop ones (and those its
//! `Connection` names) and the ones that describe what runs behind the gateway (`Server`,
//! `X-Powered-By`, `X-AspNet-Version`, `X-AspNetMvc-Version`, `Via`), plus
//! `X-Portico-Request-Id`.

use crate::error::{Code, GatewayError};
use crate::invoke::forward::{self, Caller, Target};
use crate::model::{RouteMatch, Whole};
use crate::request_id;
use bytes::Bytes;
use pingora_core::connectors::http::v1::Connector;
use pingora_core::connectors::ConnectorOptions;
use pingora_core::protocols::http::client::HttpSession;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::ErrorType;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::Session;
use portico_control::template::Rewrite;
use portico_control::template::Segment;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long an idle upstream connection stays in the pool.
const UPSTREAM_IDLE: Duration = Duration::from_secs(60);

/// Response headers never passed back to the merchant: hop-by-hop ones, the backend's load
/// report (for the balancer only, docs/PROTOCOL.md), and [`forward::BACKEND_IDENTITY`].
const RESPONSE_DROPPED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "upgrade",
    "x-portico-load",
];

/// Whether the backend's response header `name` (lower-case) is dropped.
fn response_dropped(name: &str) -> bool {
    RESPONSE_DROPPED.contains(&name) || forward::BACKEND_IDENTITY.contains(&name)
}

/// An upstream request ready to send: built in full before the breaker is asked, so a
/// request that cannot be sent never counts for or against the backend.
#[derive(Debug)]
pub struct HttpRequest {
    head: Box<RequestHeader>,
    body: Bytes,
}

impl HttpRequest {
    /// The request head as it will be sent (without `Host`, which each attempt sets).
    pub fn head(&self) -> &RequestHeader {
        &self.head
    }
}

/// Builds the upstream request for `req` (see the module docs). `Err`: 400 `BAD_REQUEST`
/// when the path cannot be built (a rewrite the variables do not fit, a router-style call
/// of an API whose path needs variables).
pub fn prepare(
    req: &RequestHeader,
    route: &RouteMatch,
    rewrite: Option<&str>,
    parsed: Option<&Rewrite>,
    body: Bytes,
    caller: &Caller<'_>,
) -> Result<HttpRequest, GatewayError> {
    let (method, path_and_query) = upstream_target(req, route, rewrite, parsed)?;
    let head = build_request_header(&method, &path_and_query, req, caller, &body)?;
    Ok(HttpRequest {
        head: Box::new(head),
        body,
    })
}

/// Result of one attempt before anything was written downstream.
pub enum Attempt {
    /// The upstream answered with this header; the session to stream the body from.
    Answered(Box<HttpSession>, Duration),
    /// Could not connect; nothing was sent, so another endpoint may be tried with the
    /// request, which is handed back.
    ConnectFailed(GatewayError, HttpRequest),
    /// Failed after the request was (maybe) sent: do not retry.
    Failed(GatewayError),
}

/// The request id header, parsed once.
const REQUEST_ID: http::HeaderName = http::HeaderName::from_static(request_id::HEADER);

/// Headers the gateway adds to a relayed answer besides the request id.
#[derive(Debug, Default, Clone)]
pub struct Added<'a> {
    /// A header set in place of the backend's (e.g. `X-Portico-Cache: BYPASS`).
    pub replace: Option<(http::HeaderName, http::HeaderValue)>,
    /// A `Set-Cookie` added beside the backend's own (the sticky-session cookie).
    pub set_cookie: Option<&'a str>,
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

    /// Returns a finished exchange's connection to the pool (backends speak HTTP/1.1).
    async fn release(&self, upstream: HttpSession, peer: &HttpPeer) {
        if let HttpSession::H1(session) = upstream {
            self.connector
                .release_http_session(session, peer, Some(UPSTREAM_IDLE))
                .await;
        }
    }

    /// Sends `request` to `addr`, naming `host` in its `Host`, and waits for the response
    /// header, within `deadline`.
    /// Connecting is bounded by the peer's total connection timeout (the time left), the
    /// exchange (request written, response header read) by one timeout: no wrapper per
    /// step, since every wrapper moves the step's future (docs/ARCHITECTURE.md, "The invoke
    /// tier").
    pub async fn attempt(
        &self,
        addr: SocketAddr,
        host: &str,
        mut request: HttpRequest,
        deadline: Instant,
    ) -> Attempt {
        let started = Instant::now();
        let left = deadline.saturating_duration_since(started);
        if left.is_zero() {
            return Attempt::Failed(timeout_error(addr));
        }
        let peer = Self::peer(addr, left);
        // A pooled connection is the usual case; dialling (Pingora's connect and TLS
        // futures, ~9 KB of state) is boxed so that this future, and every future that
        // awaits it up to the request filter, stays small (docs/ARCHITECTURE.md, "The
        // invoke tier"): a future is moved whole at each boxing, whatever state it is in.
        let pooled = match self.connector.reused_http_session(&peer).await {
            Some(session) => Ok((HttpSession::H1(session), true)),
            None => Box::pin(self.connector.get_http_session(&peer))
                .await
                .map(|(session, reused)| (HttpSession::H1(session), reused)),
        };
        let (mut upstream, reused) = match pooled {
            Err(e) => {
                let err = match e.etype() {
                    ErrorType::ConnectTimedout => timeout_error(addr),
                    _ => GatewayError::upstream(
                        Code::UpstreamError,
                        "the backend could not be reached",
                        format!("cannot connect to {addr}: {e}"),
                    ),
                };
                return Attempt::ConnectFailed(err, request);
            }
            Ok(connected) => connected,
        };
        if let Err(e) = request.head.insert_header(http::header::HOST, host) {
            return Attempt::Failed(GatewayError::internal(format!("Host header: {e}")));
        }
        // A pooled connection the backend had closed is, for an idempotent method, as good
        // as a refused one (docs/OPERATIONS.md): keep what the retry needs, for those only.
        let retryable = reused && request.head.method.is_idempotent();
        let spare = retryable.then(|| HttpRequest {
            head: request.head.clone(),
            body: request.body.clone(),
        });
        let HttpRequest { head, body, .. } = request;
        let exchange = async {
            upstream.write_request_header(head).await?;
            if !body.is_empty() {
                upstream.write_request_body(body, true).await?;
            }
            upstream.finish_request_body().await?;
            upstream.read_response_header().await?;
            Ok::<(), Box<pingora_error::Error>>(())
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, exchange).await {
            Err(_) => Attempt::Failed(timeout_error(addr)),
            Ok(Err(e))
                if e.etype() == &ErrorType::ReadTimedout
                    || e.etype() == &ErrorType::WriteTimedout =>
            {
                Attempt::Failed(timeout_error(addr))
            }
            Ok(Err(e))
                if matches!(
                    e.etype(),
                    ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
                ) && spare.is_some() =>
            {
                let err = GatewayError::upstream(
                    Code::UpstreamError,
                    "the backend failed to answer",
                    format!("upstream {addr} closed a pooled connection: {e}"),
                );
                match spare {
                    Some(unsent) => Attempt::ConnectFailed(err, unsent),
                    None => Attempt::Failed(err),
                }
            }
            Ok(Err(e)) => Attempt::Failed(GatewayError::upstream(
                Code::UpstreamError,
                "the backend failed to answer",
                format!("upstream {addr} failed: {e}"),
            )),
            Ok(Ok(())) => Attempt::Answered(Box::new(upstream), started.elapsed()),
        }
    }

    /// Streams an answered upstream response to the merchant, adding the request id. Reads
    /// from the backend are bounded by `deadline`; each write to the merchant by the
    /// session's write timeout (`WRITE_TIMEOUT` when a client does not read). Errors after
    /// the header was written cannot be enveloped: the connection is closed. `sent` counts
    /// the body bytes written to the merchant as they go (also when the stream breaks).
    #[allow(clippy::too_many_arguments)]
    pub async fn relay(
        &self,
        session: &mut Session,
        mut upstream: Box<HttpSession>,
        addr: SocketAddr,
        request_id: &str,
        deadline: Instant,
        added: Added<'_>,
        sent: &mut u64,
    ) -> Result<u16, GatewayError> {
        let Some(resp) = upstream.response_header() else {
            return Err(GatewayError::upstream(
                Code::UpstreamError,
                "the backend failed to answer",
                format!("upstream {addr} sent no response header"),
            ));
        };
        // The answer's head is built as an `http` response head and handed to Pingora whole,
        // not header by header (docs/ARCHITECTURE.md, "The invoke tier"). Room
        // for every header added below and for the two Pingora adds when it writes the head
        // (`Connection`, and `Date` if the backend sent none), so the map never grows (a
        // rehash of every entry) on the way out.
        let extra =
            3 + usize::from(added.replace.is_some()) + usize::from(added.set_cookie.is_some());
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = resp.status;
        parts.headers.reserve(resp.headers.len() + extra);
        let named = connection_named(&resp.headers);
        let mut room = true;
        for (name, value) in resp.headers.iter() {
            if response_dropped(name.as_str()) || named.contains(name) {
                continue;
            }
            room &= parts
                .headers
                .try_append(name.clone(), value.clone())
                .is_ok();
        }
        if let Ok(id) = http::HeaderValue::from_str(request_id) {
            room &= parts.headers.try_insert(REQUEST_ID, id).is_ok();
        }
        if let Some((name, value)) = added.replace {
            room &= parts.headers.try_insert(name, value).is_ok();
        }
        if let Some(cookie) = added
            .set_cookie
            .and_then(|c| http::HeaderValue::from_str(c).ok())
        {
            room &= parts
                .headers
                .try_append(http::header::SET_COOKIE, cookie)
                .is_ok();
        }
        if !room {
            return Err(GatewayError::upstream(
                Code::UpstreamError,
                "the backend failed to answer",
                format!("upstream {addr} sent more headers than an answer may carry"),
            ));
        }
        let head = ResponseHeader::from(parts);
        let status = resp.status.as_u16();
        let end = upstream.response_done();
        let limit = session.get_write_timeout();
        write_bounded(limit, session.write_response_header(Box::new(head), end)).await?;
        // Body reads: each bounded by the time left (Pingora's own read timeout, reset per
        // read, so no read ends past the deadline); body writes: bounded by the session's
        // write timeout inside Pingora; only the end of the body (a chunked terminator,
        // which Pingora does not bound) goes through `write_bounded`.
        let mut done = end;
        while !done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timeout_error(addr));
            }
            upstream.set_read_timeout(Some(left));
            let chunk = match upstream.read_response_body().await {
                Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(timeout_error(addr)),
                Err(e) => {
                    return Err(GatewayError::upstream(
                        Code::UpstreamError,
                        "the backend failed to answer",
                        format!("reading the body from upstream {addr}: {e}"),
                    ))
                }
                Ok(c) => c,
            };
            done = chunk.is_none() || upstream.response_done();
            if let Some(data) = chunk {
                let n = data.len() as u64;
                written(session.write_response_body(Some(data), false).await)?;
                *sent += n;
            }
            if done {
                write_bounded(limit, session.write_response_body(None, true)).await?;
            }
        }
        let peer = Self::peer(addr, UPSTREAM_IDLE);
        self.release(*upstream, &peer).await;
        Ok(status)
    }
}

impl HttpInvoker {
    /// Hot APIs (docs/ARCHITECTURE.md, "The response cache"): whether an answered upstream
    /// response may be read whole for the cache: a 200 with a `Content-Length` of at most
    /// `max_body`, no `Cache-Control: no-store|private` and no `Set-Cookie`.
    pub fn collectable(upstream: &HttpSession, max_body: usize) -> bool {
        let Some(resp) = upstream.response_header() else {
            return false;
        };
        if resp.status.as_u16() != 200 || resp.headers.contains_key(http::header::SET_COOKIE) {
            return false;
        }
        let no_store = resp
            .headers
            .get_all(http::header::CACHE_CONTROL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|d| {
                let d = d.trim();
                d.eq_ignore_ascii_case("no-store") || d.eq_ignore_ascii_case("private")
            });
        let length = resp
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        !no_store && length.is_some_and(|n| n <= max_body)
    }

    /// Reads an answered upstream response whole (one that is [`Self::collectable`]) within
    /// `deadline`, for the rescue point to write: its status, its headers less the ones
    /// [`Self::relay`] drops and the framing ones, and its body.
    pub async fn read_whole(
        &self,
        mut upstream: Box<HttpSession>,
        addr: SocketAddr,
        deadline: Instant,
        max_body: usize,
    ) -> Result<Whole, GatewayError> {
        let Some(resp) = upstream.response_header() else {
            return Err(GatewayError::upstream(
                Code::UpstreamError,
                "the backend failed to answer",
                format!("upstream {addr} sent no response header"),
            ));
        };
        let status = resp.status.as_u16();
        let named = connection_named(&resp.headers);
        let headers: Vec<(String, String)> = resp
            .headers
            .iter()
            .filter(|(name, _)| {
                !response_dropped(name.as_str())
                    && !named.contains(name)
                    && *name != http::header::CONTENT_LENGTH
                    && *name != http::header::TRANSFER_ENCODING
            })
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let mut body = bytes::BytesMut::new();
        let mut done = upstream.response_done();
        while !done {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = match tokio::time::timeout(left, upstream.read_response_body()).await {
                Err(_) => return Err(timeout_error(addr)),
                Ok(Err(e)) => {
                    return Err(GatewayError::upstream(
                        Code::UpstreamError,
                        "the backend failed to answer",
                        format!("reading the body from upstream {addr}: {e}"),
                    ))
                }
                Ok(Ok(c)) => c,
            };
            if let Some(c) = &chunk {
                if body.len() + c.len() > max_body {
                    return Err(GatewayError::upstream(
                        Code::UpstreamError,
                        "the backend failed to answer",
                        format!("upstream {addr} sent more than its Content-Length"),
                    ));
                }
                body.extend_from_slice(c);
            }
            done = chunk.is_none() || upstream.response_done();
        }
        let peer = Self::peer(addr, UPSTREAM_IDLE);
        self.release(*upstream, &peer).await;
        Ok(Whole {
            status,
            headers,
            body: body.freeze(),
        })
    }
}

/// Runs one write to the merchant within `limit` (none: unbounded). A write that does not
/// finish in time is `WRITE_TIMEOUT`; one that fails is an internal error for the log (the
/// merchant is gone or the response broke).
pub async fn write_bounded(
    limit: Option<Duration>,
    write: impl Future<Output = pingora_error::Result<()>>,
) -> Result<(), GatewayError> {
    match limit {
        Some(limit) => match crate::deadline::within(limit, write).await {
            Some(r) => written(r),
            None => Err(GatewayError::upstream(
                Code::WriteTimeout,
                "the response was not read in time",
                format!("a write to the client did not finish within {limit:?}"),
            )),
        },
        None => written(write.await),
    }
}

/// A write to the merchant as the gateway reports it: Pingora's write timeout is
/// `WRITE_TIMEOUT`; any other failure an internal error for the log (the merchant is gone or
/// the response broke).
fn written(result: pingora_error::Result<()>) -> Result<(), GatewayError> {
    result.map_err(|e| match e.etype() {
        ErrorType::WriteTimedout => GatewayError::upstream(
            Code::WriteTimeout,
            "the response was not read in time",
            format!("writing the response: {e}"),
        ),
        _ => GatewayError::internal(format!("writing the response: {e}")),
    })
}

/// The response headers its `Connection` header names.
fn connection_named(headers: &http::HeaderMap) -> Vec<http::HeaderName> {
    let mut named = Vec::new();
    for value in headers.get_all(http::header::CONNECTION) {
        for token in value.as_bytes().split(|&b| b == b',') {
            if let Ok(name) = http::HeaderName::from_bytes(token.trim_ascii()) {
                if headers.contains_key(&name) && !named.contains(&name) {
                    named.push(name);
                }
            }
        }
    }
    named
}

/// The upstream method, path and query for an HTTP backend:
///
/// - a RESTful call: the method as sent; the API's rewrite filled with the path variables,
///   or the path as sent; the query as sent;
/// - a router-style call (`POST /router?method=<id>`, no path variables, a query naming the
///   API): the API's first binding's method (`POST` when it binds any method) and its
///   rewrite, or its path when that is a plain path (no variables or wildcards); no query.
///
/// `Err`: 400 `BAD_REQUEST` when a variable does not fit the rewrite, or when a router-style
/// call's API needs path variables (the rewrite or template text goes to the log only).
pub fn upstream_target(
    req: &RequestHeader,
    route: &RouteMatch,
    rewrite: Option<&str>,
    parsed: Option<&Rewrite>,
) -> Result<(http::Method, String), GatewayError> {
    let api = &route.api;
    if route.router_style {
        let first = api.bindings.first();
        let method = match first.map(|b| b.method.as_str()) {
            None | Some("*") => http::Method::POST,
            Some(m) => http::Method::from_bytes(m.as_bytes())
                .map_err(|e| GatewayError::internal(format!("API {} method {m}: {e}", api.id)))?,
        };
        let needs_variables = || {
            GatewayError::bad_request(format!(
                "API {} cannot be called in the router style: its path needs path variables; \
                 call it by its RESTful path",
                api.id
            ))
        };
        let path = match (rewrite, first) {
            (Some(rewrite), _) => portico_control::template::render_path(rewrite, &[])
                .map_err(|e| needs_variables().with_detail(e))?,
            (None, Some(b)) => {
                let t = &b.template;
                let plain = t.variables().is_empty()
                    && t.segments()
                        .iter()
                        .all(|s| matches!(s, Segment::Literal(_)));
                if !plain {
                    return Err(needs_variables().with_detail(format!("template {}", t.raw)));
                }
                t.raw.clone()
            }
            (None, None) => {
                return Err(GatewayError::internal(format!(
                    "API {} has no binding",
                    api.id
                )))
            }
        };
        return Ok((method, path));
    }
    let path = match (rewrite, route.binding) {
        (Some(rewrite), Some(i)) => {
            let template = &api
                .bindings
                .get(i)
                .ok_or_else(|| GatewayError::internal(format!("API {} binding {i}", api.id)))?
                .template;
            let rendered = match parsed {
                // Parsed once per snapshot (`ApiRuntime::rewrite`).
                Some(r) => r
                    .render(template, &route.vars)
                    .map_err(|f| format!("rewrite path {rewrite:?}: no value for {{{f}}}")),
                None => portico_control::template::render_rewrite(rewrite, template, &route.vars),
            };
            rendered.map_err(|e| {
                GatewayError::bad_request("the path variables do not fit the API").with_detail(e)
            })?
        }
        _ => req.uri.path().to_owned(),
    };
    let path_and_query = match req.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    Ok((req.method.clone(), path_and_query))
}

fn timeout_error(addr: SocketAddr) -> GatewayError {
    GatewayError::upstream(
        Code::UpstreamTimeout,
        "the backend did not answer in time",
        format!("upstream {addr} did not answer in time"),
    )
}

/// The upstream request head: `method` and `path_and_query`, the headers of `forward.rs`
/// written straight in (no intermediate map; names without their original case), and
/// `Content-Length` for a body (or any POST, PUT, PATCH).
fn build_request_header(
    method: &http::Method,
    path_and_query: &str,
    req: &RequestHeader,
    caller: &Caller<'_>,
    body: &Bytes,
) -> Result<RequestHeader, GatewayError> {
    let internal =
        |e: pingora_error::BError| GatewayError::internal(format!("request header: {e}"));
    let head = RequestHeader::build_no_case(method.clone(), path_and_query.as_bytes(), Some(0))
        .map_err(internal)?;
    // The headers go straight into the head's `HeaderMap`, not through Pingora's
    // `append_header` (docs/ARCHITECTURE.md, "The invoke tier": what that costs). The head is
    // taken apart for that only when its target
    // lives in its `Uri` (origin-form, which `upstream_target` always makes), so putting it
    // back together loses nothing; any other target keeps Pingora's own path.
    let origin_form =
        path_and_query.starts_with('/') && head.raw_path() == path_and_query.as_bytes();
    let with_body = !body.is_empty()
        || matches!(
            *method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        );
    if !origin_form {
        return build_request_header_slowly(head, req, caller, body, with_body);
    }
    let mut parts: http::request::Parts = head.into();
    parts.headers.reserve(req.headers.len() + 5);
    let mut failed = false;
    forward::each_backend_header(&req.headers, caller, Target::Http, |name, value| {
        failed |= parts.headers.try_append(name, value).is_err();
    });
    if with_body {
        failed |= parts
            .headers
            .try_insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from(body.len()),
            )
            .is_err();
    }
    if failed {
        return Err(GatewayError::internal("request header: too many headers"));
    }
    Ok(RequestHeader::from(parts))
}

/// [`build_request_header`] through Pingora's header API, for a target that is not in
/// origin-form.
fn build_request_header_slowly(
    mut h: RequestHeader,
    req: &RequestHeader,
    caller: &Caller<'_>,
    body: &Bytes,
    with_body: bool,
) -> Result<RequestHeader, GatewayError> {
    let internal =
        |e: pingora_error::BError| GatewayError::internal(format!("request header: {e}"));
    let mut failed = None;
    forward::each_backend_header(&req.headers, caller, Target::Http, |name, value| {
        if let Err(e) = h.append_header(name, value) {
            failed.get_or_insert(e);
        }
    });
    if let Some(e) = failed {
        return Err(internal(e));
    }
    if with_body {
        h.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())
            .map_err(internal)?;
    }
    Ok(h)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::api_with;
    use portico_control::{v1, BackendKind};
    use std::sync::Arc;

    fn route(bindings: &[(&str, &str)], vars: &[(&str, &str)], router_style: bool) -> RouteMatch {
        let api = api_with(
            "items",
            bindings,
            BackendKind::Http { path: None },
            v1::Policy::default(),
            v1::AuthMode::None,
        );
        RouteMatch {
            api: Arc::new(api),
            binding: (!router_style).then_some(0),
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            router_style,
        }
    }

    fn req(method: &str, target: &str) -> RequestHeader {
        RequestHeader::build(method, target.as_bytes(), None).unwrap()
    }

    /// The upstream method and target of a call to `target`.
    fn target(
        method: &str,
        target: &str,
        r: &RouteMatch,
        rewrite: Option<&str>,
    ) -> Result<(String, String), GatewayError> {
        let raw = upstream_target(&req(method, target), r, rewrite, None);
        // The rewrite parsed once per snapshot renders the same, errors included.
        let parsed = rewrite.and_then(|t| Rewrite::parse(t).ok());
        let once = upstream_target(&req(method, target), r, rewrite, parsed.as_ref());
        match (&raw, once) {
            (Ok(a), Ok(b)) => assert_eq!(a, &b),
            (Err(a), Err(b)) => assert_eq!(
                (a.status(), a.code.as_str(), &a.message, &a.detail),
                (b.status(), b.code.as_str(), &b.message, &b.detail)
            ),
            (a, b) => panic!("{a:?} vs {b:?}"),
        }
        raw.map(|(m, p)| (m.to_string(), p))
    }

    fn pair(m: &str, p: &str) -> (String, String) {
        (m.to_owned(), p.to_owned())
    }

    #[test]
    fn the_path_as_sent_with_its_query_without_a_rewrite() {
        let r = route(&[("GET", "/v1/items/{id}")], &[("id", "a b")], false);
        assert_eq!(
            target("GET", "/v1/items/a%20b?x=1&y", &r, None).unwrap(),
            pair("GET", "/v1/items/a%20b?x=1&y")
        );
        assert_eq!(
            target("GET", "/v1/items/7", &r, None).unwrap(),
            pair("GET", "/v1/items/7")
        );
    }

    #[test]
    fn a_rewrite_is_filled_from_the_path_variables() {
        let r = route(
            &[("GET", "/v1/items/{id}/{rest=**}")],
            &[("id", "a b"), ("rest", "x/y%2Fz")],
            false,
        );
        let got = target(
            "GET",
            "/v1/items/a%20b/x/y%2Fz?q=1",
            &r,
            Some("/in/{id}/files/{rest}"),
        )
        .unwrap();
        // A single-segment value is encoded whole; a `**` value keeps its slashes (and a
        // `%2F` it carried stays encoded).
        assert_eq!(got, pair("GET", "/in/a%20b/files/x/y%2Fz?q=1"));
        let e = target("GET", "/v1/items/1/2", &r, Some("/in/{missing}")).unwrap_err();
        assert_eq!(e.code, Code::BadRequest);
        // The rewrite is the backend's business: in the log, not in the answer.
        assert!(!e.message.contains("/in/"), "{}", e.message);
        assert!(e.detail.unwrap().contains("missing"));
    }

    #[test]
    fn router_style_calls_the_apis_own_method_and_path() {
        // The first binding's method and plain path; no query (it names the API).
        let r = route(&[("PUT", "/v1/items"), ("POST", "/v2/items")], &[], true);
        let sent = "/router?method=items&x=1";
        assert_eq!(
            target("POST", sent, &r, None).unwrap(),
            pair("PUT", "/v1/items")
        );
        assert_eq!(
            target("POST", sent, &r, Some("/internal/items")).unwrap(),
            pair("PUT", "/internal/items")
        );
        // A custom verb is part of the plain path.
        let r = route(&[("POST", "/v1/items:batchGet")], &[], true);
        assert_eq!(
            target("POST", sent, &r, None).unwrap(),
            pair("POST", "/v1/items:batchGet")
        );
        // Any method: POST, as the router call came.
        let r = route(&[("*", "/hook")], &[], true);
        assert_eq!(
            target("POST", sent, &r, None).unwrap(),
            pair("POST", "/hook")
        );
        // A path or rewrite that needs variables cannot be called in the router style.
        for (bindings, rewrite) in [
            (("GET", "/v1/items/{id}"), None),
            (("GET", "/v1/items/*"), None),
            (("GET", "/v1/items"), Some("/internal/{id}")),
        ] {
            let r = route(&[bindings], &[], true);
            let e = target("POST", sent, &r, rewrite).unwrap_err();
            assert_eq!(e.code, Code::BadRequest, "{bindings:?}");
            assert!(e.message.contains("RESTful path"), "{}", e.message);
            assert!(!e.message.contains('{'), "{}", e.message);
            assert!(e.detail.is_some());
        }
    }

    fn outgoing(method: &str, headers: &[(&str, &str)], body: &'static [u8]) -> HttpRequest {
        let mut r = req(method, "/in/7?x=1");
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        let route = route(&[(method, "/in/{id}")], &[("id", "7")], false);
        let caller = Caller {
            request_id: "rid-1",
            app_key: Some("merchant-1"),
            client_ip: Some("192.0.2.7".parse().unwrap()),
            ..Caller::new("rid-1")
        };
        prepare(&r, &route, None, None, Bytes::from_static(body), &caller).unwrap()
    }

    fn header<'h>(h: &'h RequestHeader, name: &str) -> Vec<&'h str> {
        h.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn request_headers_drop_hop_by_hop_and_add_the_gateway_s_own() {
        let out = outgoing(
            "POST",
            &[
                ("connection", "keep-alive, x-secret"),
                ("x-secret", "1"),
                ("keep-alive", "timeout=5"),
                ("transfer-encoding", "chunked"),
                ("content-length", "999"),
                ("upgrade", "websocket"),
                ("te", "trailers"),
                ("expect", "100-continue"),
                ("x-portico-request-id", "spoofed"),
                ("x-portico-app", "spoofed"),
                ("x-portico-signature", "abc"),
                ("accept", "application/json"),
                ("x-forwarded-for", "198.51.100.1"),
            ],
            b"{\"a\":1}",
        );
        let h = out.head();
        assert_eq!(h.method, http::Method::POST);
        assert_eq!(h.uri.to_string(), "/in/7?x=1");
        for gone in [
            "connection",
            "x-secret",
            "keep-alive",
            "transfer-encoding",
            "upgrade",
            "te",
            "expect",
            "x-portico-signature",
        ] {
            assert!(header(h, gone).is_empty(), "{gone} was forwarded");
        }
        assert_eq!(header(h, "content-length"), ["7"]);
        assert_eq!(header(h, "accept"), ["application/json"]);
        // The client's own XFF is not passed on (its peer is not a trusted proxy).
        assert_eq!(header(h, "x-forwarded-for"), ["192.0.2.7"]);
        assert_eq!(header(h, "x-portico-request-id"), ["rid-1"]);
        assert_eq!(header(h, "x-portico-app"), ["merchant-1"]);
    }

    #[test]
    fn a_bodiless_get_has_no_length_and_never_the_clients_host() {
        let out = outgoing("GET", &[("host", "api.example")], b"");
        // Each attempt names the backend's host itself.
        assert!(header(out.head(), "host").is_empty());
        assert!(header(out.head(), "content-length").is_empty());
        // A POST without a body still says so.
        let out = outgoing("POST", &[("host", "api.example")], b"");
        assert_eq!(header(out.head(), "content-length"), ["0"]);
    }

    #[test]
    fn response_connection_names_are_found() {
        let mut h = http::HeaderMap::new();
        h.insert("connection", "close, X-Hop".parse().unwrap());
        h.insert("x-hop", "1".parse().unwrap());
        assert_eq!(
            connection_named(&h),
            vec![http::HeaderName::from_static("x-hop")]
        );
    }
}
