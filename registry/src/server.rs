//! The registry's HTTP server: the router (every route of [`crate::api`] under `/api/v1`, with
//! their OpenAPI document, and the console as the fallback), the request middleware (request id, bearer authentication, the
//! error envelope of docs/PROTOCOL.md, "The error envelope") and start-up.
//!
//! Nothing else in the crate imports this module: it sits on top.

use crate::api;
use crate::error::{ApiError, Envelope, ErrorBody};
pub use crate::listener::Limits;
use crate::openapi;
use crate::state::{AppState, Config, RequestId, Shared, REQUEST_ID_HEADER};
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest request body (proto sources and descriptor sets included).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What the middleware needs: the state (for the token) and the paths reachable without the
/// token.
#[derive(Clone)]
struct Gate {
    state: Shared,
    /// `/api/v1` paths of the routes marked public (a public route's path has no variables).
    public: Arc<BTreeSet<String>>,
}

/// The whole application: `/api/v1/...` plus the middleware.
pub fn router(state: Shared) -> Router {
    let routes = api::routes();
    let public = routes
        .iter()
        .filter(|r| r.public)
        .map(|r| format!("/api/v1{}", r.path))
        .collect();
    let served = openapi::Served(Arc::new(openapi::document(&routes)));
    let mut api = Router::new();
    for route in routes {
        api = api.route(&route.path, route.handler);
    }
    let api = api.layer(Extension(served));
    let gate = Gate {
        state: state.clone(),
        public: Arc::new(public),
    };
    Router::new()
        .nest("/api/v1", api)
        // The merchants' portal: public (outside /api/, see `is_public`), no admin token.
        .merge(crate::portal::router())
        .fallback(crate::console::fallback)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(gate, context))
        .with_state(state)
}

/// Serves `router(state)` on `listener` until the process ends, with the autoscale task
/// ([`crate::autoscale`]) running beside it, under the default [`Limits`].
pub async fn serve(listener: tokio::net::TcpListener, state: Shared) -> std::io::Result<()> {
    serve_with(listener, state, Limits::default()).await
}

/// [`serve`] with the listener's `limits` (timeouts and connection caps,
/// [`crate::listener`]).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: Shared,
    limits: Limits,
) -> std::io::Result<()> {
    crate::autoscale::start(&state);
    crate::listener::serve(listener, router(state), limits).await
}

/// Starts a registry on `addr` (use port 0 for a free one) on the current runtime; returns the
/// bound address. For tests and embedding.
pub async fn spawn(
    config: &Config,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let state = AppState::new(config);
    Ok((bound, tokio::spawn(serve(listener, state))))
}

fn valid_request_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn new_request_id() -> String {
    format!("reg-{:016x}", fastrand::u64(..))
}

/// Whether `path` is reachable without the token: a public route of the API, or anything
/// outside `/api/` (the console's static files; the console itself asks for the token).
fn is_public(gate: &Gate, path: &str) -> bool {
    gate.public.contains(path) || !path.starts_with("/api/")
}

/// Constant-time comparison of the presented and the configured token: every byte of the
/// configured token is compared whatever the presented one holds, and the differences are
/// accumulated without an early exit, so the time taken depends on the configured token's
/// length only, never on how many leading bytes a guess got right (docs/SECURITY.md, "Admin
/// API (registry)").
fn token_matches(presented: &[u8], expected: &[u8]) -> bool {
    let mut diff = presented.len() ^ expected.len();
    for (i, e) in expected.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(0);
        diff |= usize::from(p ^ e);
    }
    std::hint::black_box(diff) == 0
}

/// Checks the admin token: exactly one `Authorization: Bearer <token>` header (the scheme in
/// any case, RFC 7235) carrying the configured token.
fn authenticate(state: &AppState, req: &Request) -> Result<(), ApiError> {
    let Some(expected) = state.token.as_deref() else {
        return Ok(());
    };
    let mut values = req.headers().get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(ApiError::unauthenticated(
            if req.headers().contains_key(header::AUTHORIZATION) {
                "send one Authorization header, not several"
            } else {
                "missing Authorization: Bearer <admin token>"
            },
        ));
    };
    let value = value.to_str().unwrap_or("");
    let presented = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if token_matches(token.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::unauthenticated("the admin token is not valid")),
        None => Err(ApiError::unauthenticated(
            "the Authorization header must be `Bearer <admin token>`",
        )),
    }
}

/// Request id in, authentication, handler, envelope out.
async fn context(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let request_id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| valid_request_id(v))
        .map(str::to_owned)
        .unwrap_or_else(new_request_id);
    req.extensions_mut().insert(RequestId(request_id.clone()));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let response = if is_public(&gate, &path) {
        next.run(req).await
    } else {
        match authenticate(&gate.state, &req) {
            Ok(()) => next.run(req).await,
            Err(e) => {
                let mut response = e.into_response();
                // RFC 6750: say which scheme the API takes.
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"portico-registry\""),
                );
                response
            }
        }
    };
    let mut response = match error_of(response) {
        (response, Some(error)) => {
            let status = response.status();
            if status.is_server_error() {
                tracing::warn!(%method, %path, status = status.as_u16(), code = error.code, message = %error.message, request_id = %request_id, "request failed");
            }
            with_envelope(response, &error, &request_id)
        }
        (response, None) => response,
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    response
}

/// The error a response carries: an [`ApiError`]'s, or for an error axum made itself (405,
/// 413, ...) one made from its status.
fn error_of(mut response: Response) -> (Response, Option<ErrorBody>) {
    let status = response.status();
    let error = match response.extensions_mut().remove::<ErrorBody>() {
        Some(e) => Some(e),
        None if (status.is_client_error() || status.is_server_error())
            && !response
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/json")) =>
        {
            Some(envelope_for_status(status))
        }
        None => None,
    };
    (response, error)
}

/// `response` with the error envelope as its body.
fn with_envelope(response: Response, error: &ErrorBody, request_id: &str) -> Response {
    let envelope = Envelope {
        code: error.code,
        message: &error.message,
        request_id,
        details: &error.details,
    };
    let body = serde_json::to_vec(&envelope).unwrap_or_default();
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

fn envelope_for_status(status: StatusCode) -> ErrorBody {
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            ("METHOD_NOT_ALLOWED", "method not allowed on this route")
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("BODY_TOO_LARGE", "the request body is too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ("BAD_REQUEST", "unsupported Content-Type for this route")
        }
        s if s.is_client_error() => ("BAD_REQUEST", "the request is not valid"),
        _ => ("INTERNAL", "internal error"),
    };
    ErrorBody {
        code,
        message: message.to_owned(),
        details: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_ids() {
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abd", b"abc"));
        assert!(!token_matches(b"ab", b"abc"));
        assert!(!token_matches(b"abcd", b"abc"));
        assert!(!token_matches(b"", b"abc"));
        assert!(!token_matches(b"abc\0", b"abc"));
        assert!(!token_matches(b"", b"\0"));
        assert!(valid_request_id("a-b_c.1"));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id("a b"));
    }

    #[test]
    fn only_the_routes_marked_public_skip_the_token() {
        let public: BTreeSet<String> = api::routes()
            .iter()
            .filter(|r| r.public)
            .map(|r| format!("/api/v1{}", r.path))
            .collect();
        assert_eq!(
            public.iter().map(String::as_str).collect::<Vec<_>>(),
            ["/api/v1/health", "/api/v1/openapi.json"]
        );
        let gate = Gate {
            state: AppState::new(&Config {
                zk_hosts: "127.0.0.1:1".into(),
                zk_root: "/portico".into(),
                token: Some("t".into()),
                zk_auth: None,
            }),
            public: Arc::new(public),
        };
        assert!(is_public(&gate, "/api/v1/health"));
        assert!(is_public(&gate, "/assets/app.js"));
        assert!(!is_public(&gate, "/api/v1/health/apis"));
        assert!(!is_public(&gate, "/api/v1/apps"));
    }
}
