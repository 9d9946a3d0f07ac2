//! What both publishing entries of the internal listener share (docs/operations/notifications.md,
//! "Notifications"): its state and the publisher token check, used by the JSON route
//! (`internal.rs`) and the gRPC `Publish` (`grpc.rs`).

use super::hub::Notifier;
use crate::error::{Code, GatewayError};
use axum::http::HeaderMap;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What the internal listener serves with.
#[derive(Clone)]
pub struct InternalState {
    pub notifier: Arc<Notifier>,
    /// The publisher token; `None`: publishing is refused with 503.
    pub token: Option<Arc<String>>,
}

/// Checks the bearer token: 503 without one configured, 401 `UNAUTHORIZED` when missing or
/// wrong.
pub(super) fn authorize(state: &InternalState, headers: &HeaderMap) -> Result<(), GatewayError> {
    let Some(token) = &state.token else {
        return Err(GatewayError::new(
            Code::NotifyUnavailable,
            "publishing is off: no publisher token is configured (--publish-token-file or PORTICO_PUBLISH_TOKEN)",
        ));
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if given.is_empty() || !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        return Err(GatewayError::new(
            Code::Unauthorized,
            "Authorization: Bearer <publisher token> is missing or wrong",
        ));
    }
    Ok(())
}
