//! The internal listener (`--internal-listen`, default 127.0.0.1:9181; never the merchant
//! listener): `POST /internal/v1/notifications` for backends (docs/operations/notifications.md,
//! "Notifications") and, over HTTP/2 on the same port, the gRPC
//! `portico.notify.v1.Notify/Publish` (`grpc.rs`).
//!
//! Authenticated by `Authorization: Bearer <publisher token>` (`--publish-token-file` or
//! `PORTICO_PUBLISH_TOKEN`), compared in constant time; without a token configured the
//! endpoint answers 503 `NOTIFY_UNAVAILABLE` saying so. Errors are the envelope of
//! docs/PROTOCOL.md with the request id of `X-Portico-Request-Id` (kept or made).

use super::hub::PublishRequest;
use super::publisher::authorize;
pub use super::publisher::InternalState;
use crate::error::GatewayError;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

/// The largest publish request body.
pub const MAX_PUBLISH_BODY: usize = 1024 * 1024;

/// The internal listener's routes.
pub fn router(state: InternalState) -> Router {
    Router::new()
        .route("/internal/v1/notifications", post(publish))
        .route(super::grpc::PUBLISH_PATH, post(super::grpc::publish))
        .layer(DefaultBodyLimit::max(MAX_PUBLISH_BODY))
        .with_state(state)
}

fn envelope(e: &GatewayError, request_id: &str) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(detail) = e.log_detail() {
        tracing::warn!(
            request_id,
            code = e.code.as_str(),
            detail,
            "notify: publish failed"
        );
    }
    let mut resp = (
        status,
        [
            ("content-type", "application/json"),
            (crate::request_id::HEADER, request_id),
        ],
        e.envelope(request_id),
    )
        .into_response();
    if let Some(secs) = e.retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    resp
}

/// `POST /internal/v1/notifications`: `{app?, topic, id?, payload, ttl_s?}` → 200
/// `{"events": [{"app", "id"}]}`, an event carrying `"duplicate": true` when its `id` was
/// already published (the original event's id; nothing new stored).
async fn publish(State(state): State<InternalState>, headers: HeaderMap, body: Bytes) -> Response {
    let request_id = crate::request_id::keep_or_make(&headers);
    let answer = async {
        authorize(&state, &headers)?;
        let req: PublishRequest = serde_json::from_slice(&body).map_err(|e| {
            GatewayError::bad_request(format!(
                "expected {{\"app\"?, \"topic\", \"id\"?, \"payload\", \"ttl_s\"?}}: {e}"
            ))
        })?;
        state.notifier.publish(req).await
    }
    .await;
    match answer {
        Ok(events) => {
            let events: Vec<serde_json::Value> = events
                .into_iter()
                .map(|p| {
                    let mut v = serde_json::json!({"app": p.app, "id": p.id.to_string()});
                    if p.duplicate {
                        v["duplicate"] = true.into();
                    }
                    v
                })
                .collect();
            (
                StatusCode::OK,
                [(crate::request_id::HEADER, request_id.as_str())],
                axum::Json(serde_json::json!({ "events": events })),
            )
                .into_response()
        }
        Err(e) => envelope(&e, &request_id),
    }
}

/// Reads the publisher token: the file's first line (trimmed) when given, else
/// `PORTICO_PUBLISH_TOKEN`; an empty token counts as none.
pub fn read_token(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let raw = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--publish-token-file {}: {e}", path.display()))?,
        None => std::env::var("PORTICO_PUBLISH_TOKEN").unwrap_or_default(),
    };
    let token = raw.lines().next().unwrap_or_default().trim().to_owned();
    Ok((!token.is_empty()).then_some(token))
}

/// Serves `router` on `listener`, HTTP/1.1 and HTTP/2 (prior knowledge, for gRPC) alike,
/// until the process ends: `axum::serve`, as the admin listener (its connections are
/// HTTP/1.1 or HTTP/2 by their first bytes).
pub async fn serve(listener: tokio::net::TcpListener, router: Router) {
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "internal listener failed");
    }
}
