//! The registry's HTTP server: shared state, the request middleware (request id, bearer
//! authentication, the error envelope) and start-up.

use crate::api;
use crate::error::{ApiError, Envelope, ErrorBody};
use crate::zk_store::Store;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;

/// The header carrying the request id, as on the gateway.
pub const REQUEST_ID_HEADER: &str = "x-portico-request-id";
/// Who made a change, for the audit log and switches (`X-Portico-Operator: sre-alice`).
pub const OPERATOR_HEADER: &str = "x-portico-operator";
/// Largest request body (proto sources and descriptor sets included).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// How a registry runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// ZooKeeper connect string.
    pub zk_hosts: String,
    /// Root of the tree (default `/portico`).
    pub zk_root: String,
    /// The admin bearer token; `None` only with `--insecure-no-auth`.
    pub token: Option<String>,
}

/// State shared by every request.
pub struct AppState {
    pub store: Store,
    pub token: Option<String>,
}

pub type Shared = Arc<AppState>;

/// The request id of the current request.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl AppState {
    pub fn new(config: &Config) -> Shared {
        Arc::new(AppState {
            store: Store::new(&config.zk_hosts, &config.zk_root),
            token: config.token.clone(),
        })
    }
}

/// The whole application: `/api/v1/...` plus the middleware.
pub fn router(state: Shared) -> Router {
    let mut api = Router::new();
    for route in api::routes() {
        api = api.route(&route.path, route.handler);
    }
    Router::new()
        .nest("/api/v1", api)
        .fallback(crate::console::fallback)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(state.clone(), context))
        .with_state(state)
}

/// Serves `router(state)` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, state: Shared) -> std::io::Result<()> {
    axum::serve(listener, router(state)).await
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

/// Routes reachable without the token: the OpenAPI document, health, and everything outside
/// `/api/` (the console's static files; the console itself asks for the token).
fn is_public(path: &str) -> bool {
    matches!(path, "/api/v1/openapi.json" | "/api/v1/health") || !path.starts_with("/api/")
}

/// Constant-time comparison of the presented and the configured token.
fn token_matches(presented: &[u8], expected: &[u8]) -> bool {
    let mut diff = presented.len() ^ expected.len();
    for (i, e) in expected.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(0);
        diff |= usize::from(p ^ e);
    }
    diff == 0
}

fn authenticate(state: &AppState, req: &Request) -> Result<(), ApiError> {
    let Some(expected) = state.token.as_deref() else {
        return Ok(());
    };
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Err(ApiError::unauthenticated(
            "missing Authorization: Bearer <admin token>",
        ));
    };
    let value = value.to_str().unwrap_or("");
    let presented = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim);
    match presented {
        Some(token) if token_matches(token.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::unauthenticated("the admin token is not valid")),
        None => Err(ApiError::unauthenticated(
            "the Authorization header must be `Bearer <admin token>`",
        )),
    }
}

/// Request id in, authentication, handler, envelope out.
async fn context(State(state): State<Shared>, mut req: Request, next: Next) -> Response {
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
    let mut response = if is_public(&path) {
        next.run(req).await
    } else {
        match authenticate(&state, &req) {
            Ok(()) => next.run(req).await,
            Err(e) => e.into_response(),
        }
    };
    let status = response.status();
    let error = response.extensions_mut().remove::<ErrorBody>();
    let error = match error {
        Some(e) => Some(e),
        // Errors made by axum itself (405, 413, ...): give them the envelope too.
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
    if let Some(error) = error {
        let envelope = Envelope {
            code: error.code,
            message: &error.message,
            request_id: &request_id,
            details: &error.details,
        };
        let body = serde_json::to_vec(&envelope).unwrap_or_default();
        let (mut parts, _) = response.into_parts();
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        parts.headers.remove(header::CONTENT_LENGTH);
        response = Response::from_parts(parts, Body::from(body));
        if status.is_server_error() {
            tracing::warn!(%method, %path, status = status.as_u16(), code = error.code, message = %error.message, request_id = %request_id, "request failed");
        }
    }
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    response
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
        assert!(valid_request_id("a-b_c.1"));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id("a b"));
    }
}
