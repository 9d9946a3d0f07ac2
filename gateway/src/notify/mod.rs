//! Notifications: a downlink from backends to merchants (docs/PROTOCOL.md, "Notifications";
//! docs/operations/notifications.md, "Notifications").
//!
//! - Backends publish on the internal listener (`internal.rs`, `POST
//!   /internal/v1/notifications`, a bearer token), for one app or every app granted a topic.
//! - Events wait in the [`store::Store`]: Redis Streams with `--redis` (any node serves any
//!   app), else a bounded queue per app on this node.
//! - A merchant holds a signed Server-Sent Events stream (`GET /notify/v1/stream`) or
//!   WebSocket (`GET /notify/v1/ws`): the opening request goes through the edge (`ip_acl`,
//!   `route`, `auth`, the nonce, `permit`) like any call, then [`Notifier::serve`] serves it
//!   instead of a backend: the session logic (`session.rs`) over one of two transports
//!   (`sse.rs`; `ws.rs` with the frame codec `wsframe.rs`). Acks are WebSocket messages or
//!   signed `POST /notify/v1/ack` calls to any node.
//!
//! The notifier reads the live plane's snapshot, handed to it on every reload
//! ([`Notifier::apply`]), so a revoked grant closes the app's stream within a poll.
//!
//! The notifier's state, which every file here shares, is `hub.rs` (of them it imports the
//! store only); this file holds only the entry point that hands a request to its transport
//! ([`Notifier::serve`]), so no file here imports it back.

pub mod callback;
pub mod grpc;
mod hub;
pub mod internal;
mod publisher;
pub mod session;
pub mod sse;
pub mod store;
pub mod ws;
pub mod wsframe;

use crate::error::{Code, GatewayError};
use crate::model::{Response, Whole};
use bytes::Bytes;
use pingora_proxy::Session;
use serde::Deserialize;
use store::EventId;

pub use hub::{
    granted, granted_topics, Config, Notifier, NotifyMetrics, PublishRequest, Published,
    MAX_ACK_IDS, MAX_DEAD_LETTERS, MAX_KEY_CHARS, MAX_PAYLOAD_BYTES, POLL_WHEN_SUBSCRIBED,
};

/// The body of `POST /notify/v1/ack`.
#[derive(Debug, Deserialize)]
struct AckRequest {
    ids: Vec<String>,
}

impl Notifier {
    /// Request phase, after `permit`: serves a notification endpoint for the authenticated
    /// `app_key`: the SSE stream (`sse.rs`; `Response::Streamed(200)` once it ends), the
    /// WebSocket (`ws.rs`; `Response::Streamed(101)` once it ends) or an ack
    /// (`Response::Whole` `{"acked": n}`). Refusals, before any stream or upgrade: 400 (a bad
    /// body, `Last-Event-ID` or WebSocket handshake), 403 `APP_FORBIDDEN` (an app that
    /// receives callbacks), 503 `CONNECTION_LIMIT`, `NOTIFY_UNAVAILABLE`.
    pub async fn serve(
        &self,
        api_id: &str,
        session: &mut Session,
        app_key: &str,
        body: &[u8],
        request_id: &str,
    ) -> Result<Response, GatewayError> {
        if api_id == crate::model::NOTIFY_ACK.2 {
            return self.ack(app_key, body).await;
        }
        if api_id == crate::model::NOTIFY_WS.2 {
            return ws::serve(self, session, app_key, request_id).await;
        }
        sse::serve(self, session, app_key, request_id).await
    }

    async fn ack(&self, app_key: &str, body: &[u8]) -> Result<Response, GatewayError> {
        let req: AckRequest = serde_json::from_slice(body).map_err(|e| {
            GatewayError::bad_request(format!("ack: expected {{\"ids\": [..]}}: {e}"))
        })?;
        if req.ids.len() > MAX_ACK_IDS {
            return Err(GatewayError::bad_request(format!(
                "ids: at most {MAX_ACK_IDS} per ack"
            )));
        }
        let ids = req
            .ids
            .iter()
            .map(|s| {
                EventId::parse(s).ok_or_else(|| {
                    GatewayError::bad_request(format!("ids: {s:?} is not an event id"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = self.ack_ids(app_key, &ids).await.map_err(|e| {
            GatewayError::new(Code::NotifyUnavailable, "the notification store failed")
                .with_detail(e)
        })?;
        let body = serde_json::json!({"acked": n}).to_string();
        Ok(Response::Whole(Whole {
            status: 200,
            headers: Vec::new(),
            body: Bytes::from(body),
        }))
    }
}
