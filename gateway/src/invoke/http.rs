//! HTTP backends, proxied through Pingora's upstream connection pool (keepalive).
//!
//! The gateway has already read and verified the whole request body (the signature covers
//! it), so the upstream request is written in one go; the response is streamed back to the
//! merchant as it arrives. The API's `timeout_ms` bounds connect and the whole exchange.
//!
//! The upstream request: the path from [`upstream_path`] (the API's rewrite filled with the
//! path variables, or the path as sent), the merchant's headers without hop-by-hop ones,
//! `Host` (the endpoint's address when the merchant sent none), `Content-Length`,
//! `X-Forwarded-For` with the client's address appended, `X-Portico-Request-Id`, and
//! `X-Portico-App` (the calling app's key on signed calls).

use crate::error::{Code, GatewayError};
use crate::model::RouteMatch;
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

/// The upstream path and query for an HTTP backend: the API's rewrite template filled with the
/// path variables, or the path as sent; the query as sent. Router-style calls (which have no
/// path variables and whose query names the API) go to the rewrite, or `/`, without a query.
/// `Err`: 400 `BAD_REQUEST` when a variable does not fit the rewrite.
pub fn upstream_path(
    uri: &http::Uri,
    route: &RouteMatch,
    rewrite: Option<&str>,
) -> Result<String, GatewayError> {
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
        (None, _) => uri.path().to_owned(),
    };
    let query = if route.router_style {
        None
    } else {
        uri.query()
    };
    Ok(match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    })
}

fn timeout_error(addr: SocketAddr) -> GatewayError {
    GatewayError::new(
        Code::UpstreamTimeout,
        format!("upstream {addr} did not answer in time"),
    )
}

/// The upstream request head for `out` sent to `addr` (see the module docs).
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

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn the_path_as_sent_with_its_query_without_a_rewrite() {
        let r = route(&[("GET", "/v1/items/{id}")], &[("id", "a b")], false);
        assert_eq!(
            upstream_path(&uri("/v1/items/a%20b?x=1&y"), &r, None).unwrap(),
            "/v1/items/a%20b?x=1&y"
        );
        assert_eq!(
            upstream_path(&uri("/v1/items/7"), &r, None).unwrap(),
            "/v1/items/7"
        );
    }

    #[test]
    fn a_rewrite_is_filled_from_the_path_variables() {
        let r = route(
            &[("GET", "/v1/items/{id}/{rest=**}")],
            &[("id", "a b"), ("rest", "x/y%2Fz")],
            false,
        );
        let got = upstream_path(
            &uri("/v1/items/a%20b/x/y%2Fz?q=1"),
            &r,
            Some("/in/{id}/files/{rest}"),
        )
        .unwrap();
        // A single-segment value is encoded whole; a `**` value keeps its slashes (and a
        // `%2F` it carried stays encoded).
        assert_eq!(got, "/in/a%20b/files/x/y%2Fz?q=1");
        let e = upstream_path(&uri("/v1/items/1/2"), &r, Some("/in/{missing}")).unwrap_err();
        assert_eq!(e.code, Code::BadRequest);
        assert!(e.message.contains("missing"), "{}", e.message);
    }

    #[test]
    fn router_style_goes_to_the_rewrite_or_the_root_without_the_query() {
        let r = route(&[("GET", "/v1/items")], &[], true);
        let sent = uri("/router?method=items&x=1");
        assert_eq!(upstream_path(&sent, &r, None).unwrap(), "/");
        assert_eq!(
            upstream_path(&sent, &r, Some("/internal/items")).unwrap(),
            "/internal/items"
        );
        // A rewrite that needs a path variable cannot be called in the router style.
        let e = upstream_path(&sent, &r, Some("/internal/{id}")).unwrap_err();
        assert_eq!(e.code, Code::BadRequest);
        assert!(e.message.contains("RESTful path"), "{}", e.message);
    }

    fn outgoing<'a>(
        method: &'a http::Method,
        headers: &'a http::HeaderMap,
        body: &'static [u8],
        client_ip: Option<std::net::IpAddr>,
        app_key: Option<&'a str>,
    ) -> Outgoing<'a> {
        Outgoing {
            method,
            path_and_query: "/in/7?x=1",
            headers,
            body: Bytes::from_static(body),
            request_id: "rid-1",
            client_ip,
            app_key,
        }
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
        let mut headers = http::HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("content-length", "999"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
            ("expect", "100-continue"),
            ("x-portico-request-id", "spoofed"),
            ("x-portico-app", "spoofed"),
            ("accept", "application/json"),
            ("x-forwarded-for", "198.51.100.1"),
        ] {
            headers.append(k, http::HeaderValue::from_static(v));
        }
        let method = http::Method::POST;
        let client = Some("192.0.2.7".parse().unwrap());
        let out = outgoing(&method, &headers, b"{\"a\":1}", client, Some("merchant-1"));
        let addr: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let h = build_request_header(&out, addr).unwrap();
        assert_eq!(h.method, http::Method::POST);
        assert_eq!(h.uri.to_string(), "/in/7?x=1");
        for gone in [
            "connection",
            "keep-alive",
            "transfer-encoding",
            "upgrade",
            "te",
            "expect",
        ] {
            assert!(header(&h, gone).is_empty(), "{gone} was forwarded");
        }
        assert_eq!(header(&h, "content-length"), ["7"]);
        assert_eq!(header(&h, "accept"), ["application/json"]);
        assert_eq!(header(&h, "host"), ["127.0.0.1:8081"]);
        assert_eq!(header(&h, "x-forwarded-for"), ["198.51.100.1, 192.0.2.7"]);
        assert_eq!(header(&h, "x-portico-request-id"), ["rid-1"]);
        assert_eq!(header(&h, "x-portico-app"), ["merchant-1"]);
    }

    #[test]
    fn a_bodiless_get_keeps_the_host_and_has_no_length_or_caller_headers() {
        let mut headers = http::HeaderMap::new();
        headers.insert("host", http::HeaderValue::from_static("api.example"));
        let method = http::Method::GET;
        let out = outgoing(&method, &headers, b"", None, None);
        let h = build_request_header(&out, "127.0.0.1:1".parse().unwrap()).unwrap();
        assert_eq!(header(&h, "host"), ["api.example"]);
        assert!(header(&h, "content-length").is_empty());
        assert!(header(&h, "x-forwarded-for").is_empty());
        assert!(header(&h, "x-portico-app").is_empty());
        assert_eq!(header(&h, "x-portico-request-id"), ["rid-1"]);
        // A POST without a body still says so.
        let post = http::Method::POST;
        let out = outgoing(&post, &headers, b"", None, None);
        let h = build_request_header(&out, "127.0.0.1:1".parse().unwrap()).unwrap();
        assert_eq!(header(&h, "content-length"), ["0"]);
    }
}
