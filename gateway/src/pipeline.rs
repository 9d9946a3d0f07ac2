//! The request pipeline, top to bottom, in one function ([`handle`]): the edge stages in
//! request order, then the hand-over to the invoke tier ([`invoke::call`]).
//!
//! ```mermaid
//! flowchart TD
//!     A[request head read by Pingora] --> FR[framing: CL/TE, bare LF, Host]
//!     FR -->|BAD_REQUEST 400, connection closed| R[rescue: envelope]
//!     FR --> L[header limits]
//!     L -->|BAD_REQUEST 400| R
//!     L --> B[ip_acl]
//!     B -->|IP_BLOCKED 403| R
//!     B --> C[route]
//!     C -->|BAD_REQUEST 400 / API_NOT_FOUND 404 / URI_TOO_LONG 414| R
//!     C --> AH[auth on the head: headers, timestamp, nonce form, active app]
//!     AH -->|401 codes, body unread| R
//!     AH -->|no active app: body hashed, never kept; SIGNATURE_INVALID 401| R
//!     AH --> D[100-continue if expected; read body, bounded]
//!     D -->|BODY_TOO_LARGE 413| R
//!     D --> E[auth]
//!     E -->|401 codes; sandbox: an app signing with its live secret| R
//!     E --> N[nonce claimed cluster-wide, with Redis]
//!     N -->|NONCE_REPLAYED 401| R
//!     N --> F[permit]
//!     F -->|APP_DISABLED / APP_FORBIDDEN 403| R
//!     F -->|/notify/v1/stream, /notify/v1/ws, /notify/v1/ack| NT[notify: SSE, WebSocket or ack]
//!     NT -->|ack: Response::Whole| W
//!     NT -->|stream: written until closed| S
//!     F --> G[rate_limit]
//!     G -->|RATE_LIMITED 429| R
//!     G --> H[degrade]
//!     H -->|fallback: Response::Whole| W[rescue point writes it]
//!     H -->|API_DEGRADED 503| R
//!     H --> K[cache: GET / read-only, policy.cache or a hot key]
//!     K -->|fresh entry: HIT, or 304 on If-None-Match| W
//!     K --> I[invoke::call: prepare the backend request]
//!     I -->|path, transcoding: BAD_REQUEST 400| R
//!     I --> J[bulkhead, breaker, balance]
//!     J -->|503| R
//!     J -->|http: streamed, bytes counted| S[Response::Streamed]
//!     J -->|grpc: transcoded JSON| W
//!     J -->|502 / 504 / gRPC status| R
//!     J -->|cacheable 200: read whole| F2[cache.finish: store, ETag, MISS / 304]
//!     S --> F3[cache.finish: streamed bytes to the hot-key detector]
//!     F2 --> W
//! ```
//!
//! Every stage reads the same `Runtime`, loaded once at the top. Nothing here waits on
//! ZooKeeper, a lock or a disk; only with Redis configured does a signed call wait for one
//! Redis round trip (its nonce, bounded by `fleet::REDIS_TIMEOUT`).

use crate::edge::auth::Head;
use crate::edge::{EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use crate::invoke::{self, CacheHint, Call, Caller, Upstream};
use crate::model::{is_notify_api, Response};
use crate::observe::metrics::ApiMetrics;
use crate::runtime::{Plane, PlaneKind};
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
    /// What went wrong, for operators (the access log's `detail`): addresses and transport
    /// errors the envelope does not tell.
    pub detail: Option<String>,
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
            detail: None,
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
    // Ambiguous framing and oversized heads are refused with the connection closed.
    crate::edge::framing::check(session)?;
    check_header_limits(&session.req_header().headers)
        .inspect_err(|_| session.set_keepalive(None))?;

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
        .ok_or_else(|| GatewayError::internal("route stage set no API"))?;
    ctx.api_metrics = rt.metrics.get(&route.api.id).cloned();
    let limit = route
        .api
        .policy
        .max_body_bytes
        .unwrap_or(plane.shared.default_max_body);
    // The cheap signature checks on the head, before a byte of the body is kept: an unsigned,
    // stale or malformed call is refused unread, and one naming no active app is hashed as
    // it streams by, never buffered (docs/SECURITY.md, "Bounded work before authentication").
    let head = rt
        .edge
        .auth
        .check_head(&edge_request(session, &[], now), &route.api)?;
    if head == Head::HashOnly {
        let digest = hash_body(session, limit).await?;
        let req = edge_request(session, &[], now);
        return Err(rt.edge.auth.refuse_unread(&req, &digest));
    }
    let body = read_body(session, limit).await?;

    // Edge, with the body: who is calling, may they, how often, is the API switched off. The
    // notification endpoints leave after `permit` (docs/PROTOCOL.md, "Notifications").
    let notify = is_notify_api(&route.api.id);
    {
        let req = edge_request(session, &body, now);
        stage!(rt.edge.auth, &req, &mut ctx.edge);
        // A call signed for one plane is never accepted on the other.
        plane.check_plane_secret(&ctx.edge)?;
        // With Redis, the nonce `auth` found fresh on this node is recorded cluster-wide
        // (one round trip per signed call; fails open when Redis is down).
        if let Some(claim) = ctx.edge.nonce_claim.take() {
            plane.shared.fleet.claim_nonce(&claim).await?;
        }
        stage!(rt.edge.permit, &req, &mut ctx.edge);
        if !notify {
            stage!(rt.edge.rate_limit, &req, &mut ctx.edge);
            stage!(rt.edge.degrade, &req, &mut ctx.edge);
            stage!(rt.edge.cache, &req, &mut ctx.edge);
        }
    }
    // Notifications: a signed, permitted stream (SSE or WebSocket) or ack is served by the
    // notify module instead of a backend (live plane only).
    if notify {
        if plane.kind != PlaneKind::Live {
            return Err(GatewayError::new(
                Code::ApiNotFound,
                "notifications are served on the live listener only",
            ));
        }
        let app = ctx.edge.app_key.as_deref().unwrap_or_default();
        return plane
            .shared
            .notify
            .serve(&route.api.id, session, app, &body, &ctx.request_id)
            .await;
    }
    let ticket = ctx.edge.cache.take();
    let cache = CacheHint {
        collect: ticket.as_ref().and_then(|t| t.collect()),
        mark_bypass: ticket.is_some(),
    };

    // Invoke: prepare → bulkhead → breaker → balance → backend.
    let call = Call {
        route: &route,
        body,
        caller: Caller {
            request_id: &ctx.request_id,
            app_key: ctx.edge.app_key.as_deref(),
            client_ip: ctx.edge.client_ip,
            proxies: &ctx.edge.proxies,
            peer_trusted: ctx.edge.peer_trusted,
            scheme: scheme(session),
        },
        cache,
    };
    let clients = &plane.shared.clients;
    let answer = invoke::call(clients, &rt.invoke, session, call, &mut ctx.upstream).await;
    // Hot APIs: count the answer's bytes, store a cacheable answer, mark it MISS or BYPASS.
    rt.edge.cache.finish(
        ticket,
        answer,
        ctx.upstream.body_bytes,
        now,
        &session.req_header().headers,
    )
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

/// The scheme the request reached the gateway on: `https` over TLS, else `http`.
fn scheme(session: &Session) -> &'static str {
    let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
    if tls {
        "https"
    } else {
        "http"
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
    let mut buf = BytesMut::new();
    consume_body(session, limit, |chunk| buf.extend_from_slice(chunk)).await?;
    Ok(buf.freeze())
}

/// The lowercase hex SHA-256 of the request body, read as [`read_body`] reads it but not
/// kept: each chunk is hashed and dropped.
async fn hash_body(session: &mut Session, limit: u64) -> Result<String, GatewayError> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    consume_body(session, limit, |chunk| hasher.update(chunk)).await?;
    Ok(hex::encode(hasher.finalize()))
}

/// Hands each chunk of the request body to `sink`, with the limits of [`read_body`].
async fn consume_body(
    session: &mut Session,
    limit: u64,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), GatewayError> {
    let too_large = || {
        GatewayError::new(
            Code::BodyTooLarge,
            format!("request body larger than {limit} bytes"),
        )
    };
    if session.is_body_empty() {
        // No body by the request's framing (RFC 9112 §6.3: a GET without Content-Length
        // or Transfer-Encoding): nothing to read, and no deadline that could fire.
        return Ok(());
    }
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
    let mut read_bytes: u64 = 0;
    let read = async {
        while let Some(chunk) = crate::edge::framing::read_body_chunk(session).await? {
            read_bytes += chunk.len() as u64;
            if read_bytes > limit {
                return Err(too_large());
            }
            sink(&chunk);
        }
        Ok(())
    };
    match crate::deadline::within(BODY_READ_DEADLINE, read).await {
        None => Err(GatewayError::bad_request(
            "request body not received in time",
        )),
        Some(r) => r,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::Whole;
    use crate::testing::{
        closed_addr, cluster_doc, http_api_doc, plane, session, tree, written, Backend,
    };
    use portico_control::build_snapshot;
    use serde_json::{json, Value};

    /// A plane serving `docs`.
    fn serving(docs: &[(&str, Value)]) -> Plane {
        let plane = plane();
        let snapshot = build_snapshot(&tree(docs), None);
        assert!(snapshot.rejected.is_empty(), "{:?}", snapshot.rejected);
        plane.apply(Arc::new(snapshot));
        plane
    }

    /// Runs the pipeline on the raw request `raw` with request id `rid-7`.
    async fn run(plane: &Plane, raw: &str) -> (Result<Response, GatewayError>, RequestCtx, String) {
        let (mut session, client) = session(raw.as_bytes()).await;
        let mut ctx = RequestCtx::new();
        ctx.request_id = "rid-7".to_owned();
        let result = handle(plane, &mut session, &mut ctx).await;
        let out = written(session, client).await;
        (result, ctx, out)
    }

    fn code(result: &Result<Response, GatewayError>) -> &'static str {
        match result {
            Ok(_) => "OK",
            Err(e) => e.code.as_str(),
        }
    }

    fn signed_api(id: &str) -> Value {
        let mut doc = http_api_doc(id, "c", None, json!({"max_body_bytes": 16}));
        doc["auth"] = json!("signature");
        doc
    }

    fn switch_on(fallback: bool) -> Value {
        if fallback {
            json!({"degraded": true, "fallback": {"status": 200, "body": {"items": []}}})
        } else {
            json!({"degraded": true, "reason": "maintenance"})
        }
    }

    #[test]
    fn header_limits_count_headers_and_bytes() {
        let mut headers = http::HeaderMap::new();
        for i in 0..MAX_HEADERS {
            headers.insert(
                http::HeaderName::from_bytes(format!("x-h{i}").as_bytes()).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        assert!(check_header_limits(&headers).is_ok());
        headers.insert("x-one-more", http::HeaderValue::from_static("v"));
        let e = check_header_limits(&headers).unwrap_err();
        assert_eq!((e.status(), e.code.clone()), (400, Code::BadRequest));

        let mut big = http::HeaderMap::new();
        let name = "x-big";
        let fits = "a".repeat(MAX_HEADER_BYTES - name.len());
        big.insert(name, http::HeaderValue::from_str(&fits).unwrap());
        assert!(check_header_limits(&big).is_ok());
        big.insert("x", http::HeaderValue::from_static("1"));
        let e = check_header_limits(&big).unwrap_err();
        assert!(e.message.contains("larger than"), "{}", e.message);
    }

    #[tokio::test]
    async fn refusals_come_in_stage_order() {
        let cluster = ("clusters/c", cluster_doc(&[closed_addr()]));
        // ip_acl before route: with an allow list, an unknown client address is refused
        // before the path is even looked at.
        let acl = serving(&[("ipacl", json!({"allow": ["10.0.0.0/8"]})), cluster.clone()]);
        let (r, _, _) = run(&acl, "GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert_eq!(code(&r), "IP_BLOCKED");

        let plane = serving(&[
            ("apis/signed", signed_api("signed")),
            ("apis/off", signed_api("off")),
            ("switches/off", switch_on(true)),
            cluster,
        ]);
        let (r, ctx, _) = run(&plane, "GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert_eq!(code(&r), "API_NOT_FOUND");
        assert!(ctx.api_metrics.is_none());
        // The head's signature checks before the body: an unsigned call is refused unread,
        // whatever its body (docs/SECURITY.md, "Bounded work before authentication") ...
        let big = "POST /v1/signed/x HTTP/1.1\r\nhost: x\r\ncontent-length: 17\r\n\r\n";
        let (r, ctx, _) = run(&plane, big).await;
        assert_eq!(code(&r), "SIGNATURE_MISSING");
        assert!(ctx.api_metrics.is_some());
        // ... then the body limit, before the signature itself is checked.
        let now = portico_control::clock::now_ms();
        let head = format!(
            "x-portico-appkey: merchant-1\r\nx-portico-timestamp: {now}\r\n\
             x-portico-nonce: n0nce-0001\r\nx-portico-signature: {}\r\n",
            "0".repeat(64)
        );
        let big_signed =
            format!("POST /v1/signed/x HTTP/1.1\r\nhost: x\r\n{head}content-length: 17\r\n\r\n");
        let (r, _, _) = run(&plane, &big_signed).await;
        assert_eq!(code(&r), "BODY_TOO_LARGE");
        let small = "POST /v1/signed/x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        let (r, _, _) = run(&plane, small).await;
        assert_eq!(code(&r), "SIGNATURE_MISSING");
        // auth before degrade: a switched-off signed API still wants a signature.
        let (r, _, _) = run(&plane, "GET /v1/off HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert_eq!(code(&r), "SIGNATURE_MISSING");
        // Too many headers: refused before any stage.
        let mut flood = String::from("GET /nowhere HTTP/1.1\r\nhost: x\r\n");
        for i in 0..MAX_HEADERS {
            flood.push_str(&format!("x-h{i}: v\r\n"));
        }
        flood.push_str("\r\n");
        let (r, _, _) = run(&plane, &flood).await;
        assert_eq!(code(&r), "BAD_REQUEST");
    }

    #[tokio::test]
    async fn nothing_of_an_unauthenticated_body_is_kept() {
        let cluster = ("clusters/c", cluster_doc(&[closed_addr()]));
        let mut open = signed_api("signed");
        open["policy"] = json!({});
        let plane = serving(&[("apis/signed", open), cluster]);
        // An unsigned call announcing a body it never sends: answered at once, unread (a
        // read would wait out the 30 s body deadline).
        let unsigned = "POST /v1/signed/x HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n{";
        let (r, _, _) = tokio::time::timeout(Duration::from_secs(5), run(&plane, unsigned))
            .await
            .expect("answered without reading the body");
        assert_eq!(code(&r), "SIGNATURE_MISSING");
        // A stale timestamp likewise.
        let stale = "POST /v1/signed/x HTTP/1.1\r\nhost: x\r\nx-portico-appkey: a\r\n\
                     x-portico-timestamp: 1000\r\nx-portico-nonce: n0nce-0001\r\n\
                     x-portico-signature: 00\r\ncontent-length: 100000\r\n\r\n{";
        let (r, _, _) = tokio::time::timeout(Duration::from_secs(5), run(&plane, stale))
            .await
            .expect("answered without reading the body");
        assert_eq!(code(&r), "SIGNATURE_EXPIRED");
        // An unknown app key: the body is hashed as it streams by, and the answer is a wrong
        // signature's, over the body's real digest.
        let now = portico_control::clock::now_ms();
        let raw = format!(
            "POST /v1/signed/x HTTP/1.1\r\nhost: x\r\nx-portico-appkey: nobody\r\n\
             x-portico-timestamp: {now}\r\nx-portico-nonce: n0nce-0001\r\n\
             x-portico-signature: {}\r\ncontent-length: 2\r\n\r\n{{}}",
            "0".repeat(64)
        );
        let (r, ctx, _) = run(&plane, &raw).await;
        let e = r.unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (401, "SIGNATURE_INVALID"));
        let digest = portico_control::sign::body_digest(b"{}");
        assert!(e.message.ends_with(&format!("{digest}\"")), "{}", e.message);
        assert_eq!(e.detail.as_deref(), Some("unknown app key"));
        assert!(ctx.edge.app_key.is_none());
    }

    #[tokio::test]
    async fn the_sandbox_refuses_an_app_signing_with_its_live_secret() {
        let docs = |secret: &str| {
            vec![
                ("apis/signed", {
                    let mut d = signed_api("signed");
                    d["policy"] = json!({});
                    d
                }),
                ("clusters/c", cluster_doc(&[closed_addr()])),
                ("apps/m1", json!({"secret": secret, "apis": ["*"]})),
            ]
        };
        let live = Arc::new(serving(&docs("live-secret")));
        let sandbox = Plane::new(PlaneKind::Sandbox, crate::testing::shared());
        let _ = sandbox.live.set(Arc::downgrade(&live));
        let signed_call = |secret: &str, nonce: &str| {
            let now = portico_control::clock::now_ms();
            let h = portico_control::sign::sign_request(
                secret.as_bytes(),
                "GET",
                "/v1/signed",
                None,
                "m1",
                now,
                nonce,
                b"",
            );
            let mut raw = String::from("GET /v1/signed HTTP/1.1\r\nhost: x\r\n");
            for (k, v) in h.pairs() {
                raw.push_str(&format!("{k}: {v}\r\n"));
            }
            raw.push_str("\r\n");
            raw
        };
        // The same secret in both trees: the sandbox refuses the call, which would be as good
        // on live.
        sandbox.apply(Arc::new(build_snapshot(&tree(&docs("live-secret")), None)));
        let (r, _, _) = run(&sandbox, &signed_call("live-secret", "nonce-sb-0001")).await;
        let e = r.unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (401, "SIGNATURE_INVALID"));
        assert!(e.message.contains("sandbox secret"), "{}", e.message);
        // A sandbox secret of its own: signed with it, the call passes auth (and fails later,
        // at the closed backend); signed with the live one, it is a wrong signature.
        sandbox.apply(Arc::new(build_snapshot(
            &tree(&docs("sandbox-secret")),
            None,
        )));
        let (r, _, _) = run(&sandbox, &signed_call("sandbox-secret", "nonce-sb-0002")).await;
        assert_eq!(code(&r), "UPSTREAM_ERROR");
        let (r, _, _) = run(&sandbox, &signed_call("live-secret", "nonce-sb-0003")).await;
        assert_eq!(code(&r), "SIGNATURE_INVALID");
        // The live plane is untouched by the rule.
        let (r, _, _) = run(&live, &signed_call("live-secret", "nonce-sb-0004")).await;
        assert_eq!(code(&r), "UPSTREAM_ERROR");
    }

    #[tokio::test]
    async fn a_degraded_api_answers_without_its_backend() {
        let backend = Backend::start(200, "from backend").await;
        let plane = serving(&[
            ("apis/promo", http_api_doc("promo", "c", None, json!({}))),
            ("apis/down", http_api_doc("down", "c", None, json!({}))),
            ("switches/promo", switch_on(true)),
            ("switches/down", switch_on(false)),
            ("clusters/c", cluster_doc(&[backend.addr.to_string()])),
        ]);
        let (r, ctx, _) = run(&plane, "GET /v1/promo HTTP/1.1\r\nhost: x\r\n\r\n").await;
        match r.unwrap() {
            Response::Whole(Whole { status, body, .. }) => {
                assert_eq!(status, 200);
                assert_eq!(&body[..], br#"{"items":[]}"#);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(ctx.upstream, Upstream::default());
        let (r, _, _) = run(&plane, "GET /v1/down HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let e = r.unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (503, "API_DEGRADED"));
        // The operators' reason is for the access log; merchants read the public message.
        assert!(e
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("maintenance"));
        assert_eq!(e.message, "the API is temporarily unavailable");
        assert!(backend.heads().is_empty());
    }

    #[tokio::test]
    async fn an_admitted_call_is_handed_to_the_backend_and_streamed_back() {
        let backend = Backend::start(201, "made").await;
        let plane = serving(&[
            ("apis/a", http_api_doc("a", "c", None, json!({}))),
            ("clusters/c", cluster_doc(&[backend.addr.to_string()])),
        ]);
        let raw = "POST /v1/a/x/y?q=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 7\r\n\r\n{\"k\":1}";
        let (r, ctx, out) = run(&plane, raw).await;
        assert_eq!(r.unwrap(), Response::Streamed(201));
        assert_eq!(ctx.upstream.addr, Some(backend.addr));
        assert!(ctx.upstream.latency.is_some());
        let heads = backend.heads();
        assert_eq!(heads.len(), 1);
        let seen = heads[0].to_ascii_lowercase();
        assert!(
            seen.starts_with("post /v1/a/x/y?q=1 http/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains("x-portico-request-id: rid-7\r\n"), "{seen}");
        assert!(seen.ends_with("\r\n\r\n{\"k\":1}"), "{seen}");
        assert!(out.starts_with("HTTP/1.1 201"), "{out}");
        assert!(
            out.to_ascii_lowercase()
                .contains("x-portico-request-id: rid-7\r\n"),
            "{out}"
        );
        assert!(out.ends_with("made"), "{out}");
    }

    #[tokio::test]
    async fn an_unreachable_backend_is_502_naming_the_endpoint_tried() {
        let closed = closed_addr();
        let plane = serving(&[
            ("apis/a", http_api_doc("a", "c", None, json!({}))),
            ("clusters/c", cluster_doc(std::slice::from_ref(&closed))),
        ]);
        let (r, ctx, _) = run(&plane, "GET /v1/a HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let e = r.unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (502, "UPSTREAM_ERROR"));
        assert_eq!(ctx.upstream.addr.map(|a| a.to_string()), Some(closed));
        assert_eq!(ctx.upstream.latency, None);
    }
}
