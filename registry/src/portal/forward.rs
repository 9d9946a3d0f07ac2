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
//!
//! The route is anonymous, so it is fenced (docs/SECURITY.md, "The registry and the
//! internet"): at most `--portal-try-per-minute` calls per client address (IPv6 by /64; 429
//! `RATE_LIMITED` with `Retry-After` past it), the answer relayed up to
//! [`crate::sandbox_call::MAX_SHOWN_BODY`] bytes as it streams in (never buffered whole), and
//! the merchant's address passed on as `X-Forwarded-For`, as a trusted proxy does: the
//! sandbox listener's IP deny list and per-IP limits see the merchant, not the registry, when
//! the registry is one of the sandbox tree's `ipacl.trusted_proxies` (`./ops/up.sh` makes it
//! one). The answer names the public sandbox URL (`--portal-sandbox-url`), never the node's
//! address.
//!
//! The path goes out exactly as typed ([`send_exact`], on a connection of its own): no
//! resolving of `.` and `..` segments, no merging of `//`, no re-encoding, as a merchant's own
//! client sends it (docs/PROTOCOL.md, "Signing a request": the path is signed as sent). So
//! "try it" shows what the gateway answers such a path (`400 BAD_REQUEST` for a dot
//! segment), never the answer of another path an HTTP library made of it.

use crate::error::{ApiError, ApiResult};
use crate::sandbox_call::{pick, Received, MAX_SHOWN_BODY};
use crate::state::Shared;
use futures::StreamExt as _;
use portico_control::sign::{HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use portico_control::validate::METHODS;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Try-it calls per client address and minute, by default (`--portal-try-per-minute`).
pub const DEFAULT_TRY_PER_MINUTE: u32 = 30;
static PER_MINUTE: AtomicU32 = AtomicU32::new(DEFAULT_TRY_PER_MINUTE);
/// Client addresses tracked at most (idle ones are dropped first; past it, calls from new
/// addresses wait until some are).
const MAX_TRACKED: usize = 100_000;

/// Sets the per-address rate (0: try-it is off).
pub fn set_try_per_minute(n: u32) {
    PER_MINUTE.store(n, Ordering::Relaxed);
}

/// The address a client is limited under: IPv4 as is (IPv4-mapped IPv6 too), IPv6 by /64.
fn limit_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

/// Per-address token buckets: (tokens, last refill).
type Buckets = HashMap<IpAddr, (f64, Instant)>;

fn buckets() -> &'static Mutex<Buckets> {
    static B: std::sync::OnceLock<Mutex<Buckets>> = std::sync::OnceLock::new();
    B.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Takes one call from `ip`'s bucket (`per_minute` a minute, bursts of as many); `Err` with
/// the seconds to wait.
fn take(map: &mut Buckets, ip: IpAddr, per_minute: u32, now: Instant) -> Result<(), u64> {
    if per_minute == 0 {
        return Err(60);
    }
    let cap = f64::from(per_minute);
    let rate = cap / 60.0;
    if map.len() >= MAX_TRACKED && !map.contains_key(&ip) {
        map.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < cap);
        if map.len() >= MAX_TRACKED {
            return Err(60);
        }
    }
    let (tokens, at) = map.entry(ip).or_insert((cap, now));
    *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(cap);
    *at = now;
    if *tokens >= 1.0 {
        *tokens -= 1.0;
        Ok(())
    } else {
        Err(((1.0 - *tokens) / rate).ceil().max(1.0) as u64)
    }
}

/// The 429 `RATE_LIMITED` answer (with `Retry-After`) when `client` may not make another
/// try-it call now, else `None` (`client` `None`: a registry served without its listener,
/// counted as one client).
pub fn admit(client: Option<IpAddr>) -> Option<axum::response::Response> {
    use axum::response::IntoResponse;
    let ip = client.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let per_minute = PER_MINUTE.load(Ordering::Relaxed);
    let mut map = buckets().lock().unwrap_or_else(|e| e.into_inner());
    let wait = take(&mut map, limit_key(ip), per_minute, Instant::now()).err()?;
    {
        let mut response = ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMITED",
            format!(
                "too many try-it calls from your address (at most {per_minute} a minute); retry in {wait} s"
            ),
        )
        .into_response();
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, wait.into());
        Some(response)
    }
}

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
    // Only the form of a request target is checked: the path is sent as typed (a `..`,
    // a `//`), on a connection to the sandbox listener alone, for the gateway to judge.
    if !req.path.starts_with('/') || !visible(&req.path) {
        return Err(ApiError::bad_request(
            "path: must start with / and hold visible ASCII only (percent-encode the rest)",
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
///
/// `client`: the merchant's address (the TCP peer), passed on as `X-Forwarded-For` (`None`
/// only for a registry served without its listener); the caller has [`admit`]ted it.
pub async fn forward(
    state: &Shared,
    request_id: &str,
    client: Option<IpAddr>,
    req: TryRequest,
) -> ApiResult<Value> {
    check(&req)?;
    let node = pick::node(state, None).await?;
    let addr = node.sandbox_addr.as_deref().unwrap_or_default();
    let url = match req.query.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => format!("http://{addr}{}?{q}", req.path),
        None => format!("http://{addr}{}", req.path),
    };
    let method = http::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| ApiError::bad_request("method: not an HTTP method"))?;
    let target = match req.query.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => format!("{}?{q}", req.path),
        None => req.path.clone(),
    };
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
    if let Some(ip) = client {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        headers.push(("X-Forwarded-For".to_owned(), ip.to_string()));
    }
    let body = req.body.clone().unwrap_or_default();
    let received = send_exact(addr, method, &target, &headers, body.as_bytes())
        .await
        .map_err(|cause| {
            // Never the node's address: merchants see the public sandbox URL only.
            let cause = if addr.is_empty() {
                cause
            } else {
                cause.replace(addr, "-")
            };
            ApiError::bad_gateway(format!(
                "calling the sandbox listener of gateway node {}: {cause}",
                node.node_id
            ))
        })?;
    let shown_url = {
        let base = super::catalog::public_sandbox_base(&node);
        let path_and_query = url
            .strip_prefix("http://")
            .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or("/");
        format!("{base}{path_and_query}")
    };
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
        "request": {"method": req.method, "url": shown_url, "headers": sent, "body": body},
        "response": received.to_json(),
        "latency_ms": received.latency_ms,
    }))
}

/// Sends one request to `addr` (`host:port`) over HTTP/1.1 on a connection of its own, with
/// `target` (path and query) on the request line byte for byte, and reads the answer up to
/// [`MAX_SHOWN_BODY`] within [`TIMEOUT`]. `Err`: why, for the 502.
async fn send_exact(
    addr: &str,
    method: http::Method,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Received, String> {
    let started = Instant::now();
    let exchange = async {
        let uri = http::uri::PathAndQuery::try_from(target)
            .map(|pq| {
                let mut parts = http::uri::Parts::default();
                parts.path_and_query = Some(pq);
                parts
            })
            .map_err(|e| format!("the path: {e}"))
            .and_then(|parts| http::Uri::from_parts(parts).map_err(|e| format!("the path: {e}")))?;
        let mut request = http::Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::HOST, addr);
        for (k, v) in headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let request = request
            .body(axum::body::Body::from(body.to_vec()))
            .map_err(|e| format!("the request: {e}"))?;
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
        let driver = tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("sending: {e}"));
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                driver.abort();
                return Err(e);
            }
        };
        let status = response.status().as_u16();
        let mut shown_headers = Map::new();
        for (name, value) in response.headers() {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match shown_headers.get_mut(name.as_str()) {
                Some(Value::String(prev)) => {
                    prev.push_str(", ");
                    prev.push_str(&v);
                }
                _ => {
                    shown_headers.insert(name.as_str().to_owned(), Value::String(v));
                }
            }
        }
        let mut data = axum::body::Body::new(response.into_body()).into_data_stream();
        let mut bytes: Vec<u8> = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = data.next().await {
            let chunk = chunk.map_err(|e| format!("reading the answer: {e}"))?;
            let room = MAX_SHOWN_BODY - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        // Past the cap the connection is dropped, not read to its end.
        driver.abort();
        Ok((status, shown_headers, bytes, truncated))
    };
    let (status, headers, bytes, truncated) = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {} s", TIMEOUT.as_secs()))??;
    let latency_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    Ok(Received::new(status, headers, bytes, truncated, latency_ms))
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
            json!({"method": "GET", "path": "/a b"}),
            json!({"method": "GET", "path": "/a?b=1"}),
            json!({"method": "GET", "path": "/a", "headers": {"Host": "evil"}}),
            json!({"method": "GET", "path": "/a", "headers": {"Authorization": "Bearer x"}}),
            json!({"method": "GET", "path": "/a", "headers": {"X-Portico-Nonce": "a\r\nb"}}),
        ] {
            assert!(check(&req(bad.clone())).is_err(), "{bad}");
        }
        // Sent as typed, for the gateway to judge (it refuses dot segments with 400).
        for typed in [
            "/v1/../admin",
            "//v1/orders",
            "/v1/%2e%2e/x",
            "/v1/./orders",
        ] {
            check(&req(json!({"method": "GET", "path": typed}))).unwrap();
        }
        let big =
            req(json!({"method": "POST", "path": "/a", "body": "x".repeat(MAX_BODY_BYTES + 1)}));
        assert_eq!(check(&big).unwrap_err().code, "BODY_TOO_LARGE");
    }

    /// The request line carries the path as typed: no `..` resolved, no `//` merged.
    #[tokio::test]
    async fn the_path_goes_out_exactly_as_typed() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let mut lines = Vec::new();
            for _ in 0..3 {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                lines.push(head.lines().next().unwrap_or_default().to_owned());
                conn.write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                )
                .await
                .unwrap();
            }
            lines
        });
        for target in ["/v1/../admin", "//v1//orders?a=1", "/v1/%2e%2E/x"] {
            let got = send_exact(&addr, http::Method::GET, target, &[], b"")
                .await
                .unwrap();
            assert_eq!(got.status(), 400);
        }
        assert_eq!(
            server.await.unwrap(),
            [
                "GET /v1/../admin HTTP/1.1",
                "GET //v1//orders?a=1 HTTP/1.1",
                "GET /v1/%2e%2E/x HTTP/1.1"
            ]
        );
    }

    #[test]
    fn try_calls_are_limited_per_address() {
        let mut map = Buckets::new();
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 {
            take(&mut map, a, 3, t0).unwrap();
        }
        let wait = take(&mut map, a, 3, t0).unwrap_err();
        assert_eq!(wait, 20, "one token in 20 s at 3 a minute");
        take(&mut map, b, 3, t0).unwrap();
        take(&mut map, a, 3, t0 + Duration::from_secs(20)).unwrap();
        assert!(take(&mut map, a, 0, t0).is_err(), "0: off");
        let v6a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(limit_key(v6a), limit_key(v6b), "one /64");
        assert_eq!(
            limit_key("::ffff:192.0.2.1".parse().unwrap()),
            a,
            "IPv4-mapped is IPv4"
        );
    }
}
