//! The request model: the types the edge stages, the invoke tier, the pipeline and the rescue
//! point hand to one another. It sits below `edge` and `invoke` so that neither imports the
//! other (docs/ARCHITECTURE.md, "Gateway layers").
//!
//! - [`RouteMatch`]: what the `route` stage found, read by later stages and by the invoke tier.
//! - [`Response`]: the one shape of an answer, from a stage or the invoke tier to the rescue
//!   point in `proxy.rs`; a refusal travels beside it as a `GatewayError`.

use crate::error::GatewayError;
use bytes::Bytes;
use portico_control::Api;
use std::sync::Arc;

/// The header telling merchants how an answer of an API with a cache or hot-key policy was
/// served: `HIT`, `MISS` or `BYPASS` (docs/PROTOCOL.md; set by `edge::cache`, and by the
/// invoke tier on a streamed answer).
pub const CACHE_HEADER: &str = "x-portico-cache";
/// The header carrying the app auth verified, towards backends (`invoke/forward.rs`) and in
/// `Vary` (`edge/cache.rs`).
pub const APP_HEADER: &str = "x-portico-app";
/// [`CACHE_HEADER`], parsed at compile time.
pub const CACHE_HEADER_NAME: http::HeaderName = http::HeaderName::from_static(CACHE_HEADER);

/// What a route match found: the API, which binding matched, and the path variables.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    pub api: Arc<Api>,
    /// Index into `api.bindings`; `None` for the `/router?method=` style.
    pub binding: Option<usize>,
    /// Path variables: field path (`order_id`, `parent.name`) → percent-decoded value.
    pub vars: Vec<(String, String)>,
    /// Whether the request came in the open-platform router style.
    pub router_style: bool,
}

/// The gateway's own notification endpoints (docs/PROTOCOL.md, "Notifications"): signed
/// and permitted like any API (the `route` stage matches them before the configured APIs,
/// `/notify/v1/` is reserved), then served by `notify/` instead of a backend.
pub const NOTIFY_STREAM: (&str, &str, &str) = ("GET", "/notify/v1/stream", "portico.notify.stream");
pub const NOTIFY_WS: (&str, &str, &str) = ("GET", "/notify/v1/ws", "portico.notify.ws");
pub const NOTIFY_ACK: (&str, &str, &str) = ("POST", "/notify/v1/ack", "portico.notify.ack");
/// Every notification endpoint, as the `route` stage matches them.
pub const NOTIFY_ENDPOINTS: [(&str, &str, &str); 3] = [NOTIFY_STREAM, NOTIFY_WS, NOTIFY_ACK];

/// Whether `api_id` is one of the notification endpoints.
pub fn is_notify_api(api_id: &str) -> bool {
    NOTIFY_ENDPOINTS.iter().any(|e| e.2 == api_id)
}

/// The built-in API of a notification endpoint `(method, path, id)`: signed, no backend.
/// `None` only if the v1 document could not hold it (a bug: the endpoint is then not routed).
pub fn notify_api((method, path, id): (&str, &str, &str)) -> Option<Api> {
    // Read as a v1 document, so that optional fields the contract gains take their defaults.
    let definition: portico_control::v1::ApiDefinition =
        serde_json::from_value(serde_json::json!({
            "id": id,
            "version": 1,
            "http": {"method": method, "path": path},
            "backend": {"cluster": ""},
            "auth": "signature",
            "description": "notifications (served by the gateway)",
        }))
        .ok()?;
    Some(Api {
        id: id.to_owned(),
        version: 1,
        bindings: Vec::new(),
        backend: portico_control::BackendKind::Http { path: None },
        cluster: String::new(),
        timeout_ms: portico_control::v1::DEFAULT_TIMEOUT_MS,
        auth: portico_control::v1::AuthMode::Signature,
        policy: portico_control::v1::Policy::default(),
        definition,
    })
}

/// How a request is answered when it is not refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// A whole response, for the rescue point to write: a degradation fallback, a transcoded
    /// gRPC reply.
    Whole(Whole),
    /// An HTTP backend's response, already streamed to the merchant with this status.
    Streamed(u16),
}

/// A response written in one go: status, headers besides the ones the gateway always sets
/// (`content-length`, the request id, `content-type: application/json` unless given), body.
#[derive(Debug, Clone, PartialEq)]
pub struct Whole {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Whole {
    /// The error envelope of `error` (docs/PROTOCOL.md, "The error envelope"), with
    /// `Retry-After` when the error sets one.
    pub fn envelope(error: &GatewayError, request_id: &str) -> Whole {
        let headers = error
            .retry_after
            .map(|secs| vec![("retry-after".to_owned(), secs.to_string())])
            .unwrap_or_default();
        Whole {
            status: error.status(),
            headers,
            body: Bytes::from(error.envelope(request_id)),
        }
    }
}

impl From<Whole> for Response {
    fn from(whole: Whole) -> Self {
        Response::Whole(whole)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn an_envelope_carries_status_code_and_retry_after() {
        let e = GatewayError::new(Code::RateLimited, "slow down").with_retry_after(7);
        let w = Whole::envelope(&e, "rid-9");
        assert_eq!(w.status, 429);
        assert_eq!(w.headers, vec![("retry-after".to_owned(), "7".to_owned())]);
        let v: serde_json::Value = serde_json::from_slice(&w.body).unwrap();
        assert_eq!(v["code"], "RATE_LIMITED");
        assert_eq!(v["message"], "slow down");
        assert_eq!(v["request_id"], "rid-9");
        let plain = Whole::envelope(&GatewayError::bad_request("x"), "r");
        assert_eq!(plain.status, 400);
        assert!(plain.headers.is_empty());
    }
}

// ---- the reset signal of an HTTP/2 stream ----------------------------------------------------
// Set by the listener's HTTP/2 accept loop, read by the request phase (`proxy.rs`): it lives
// here, below both, so neither imports the other (docs/ARCHITECTURE.md, "Gateway layers").

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use tokio::sync::Notify;

tokio::task_local! {
    /// The reset signal of the HTTP/2 stream a task serves (set by the HTTP/2 accept loop,
    /// `listener/h2.rs`, around each stream's task; absent for HTTP/1).
    pub static STREAM: std::sync::Arc<StreamReset>;
}

/// The reset signal of the HTTP/2 stream the current task serves, if it is one: the request
/// phase races its pipeline against it (`proxy.rs`), so a stream the client resets stops its
/// work at once: the backend call is dropped (cancelled) and its bulkhead permit freed.
pub fn current_stream() -> Option<std::sync::Arc<StreamReset>> {
    STREAM.try_with(std::sync::Arc::clone).ok()
}

/// Fired when the client resets one stream.
#[derive(Debug, Default)]
pub struct StreamReset {
    fired: AtomicBool,
    notify: Notify,
}

impl StreamReset {
    /// Fires the signal (the HTTP/2 accept loop, `listener/h2.rs`).
    pub fn fire(&self) {
        self.fired.store(true, AtomicOrdering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the client has reset the stream.
    pub fn is_reset(&self) -> bool {
        self.fired.load(AtomicOrdering::Acquire)
    }

    /// Resolves once the client has reset the stream (at once if it has).
    pub async fn reset(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_reset() {
            return;
        }
        notified.await;
    }
}
