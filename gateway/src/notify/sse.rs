//! The Server-Sent Events transport of a notification session, `GET /notify/v1/stream`
//! (docs/PROTOCOL.md, "Notifications"; the session itself is `session.rs`): each event as
//! `id: <event id>` / `event: notification` / `data: <JSON>`; a comment line after
//! `heartbeat` of silence; the gateway's close as `event: close` / `data: {"reason",
//! "message"}`. The merchant cannot talk back on it: acks are `POST /notify/v1/ack`, and a
//! reconnect resumes after `Last-Event-ID`.

use super::hub::Notifier;
use super::session::{self, Close, Delivery, Transport};
use super::store::{Event, EventId};
use crate::error::{Code, GatewayError};
use crate::model::Response;
use bytes::Bytes;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use std::fmt::Write as _;
use std::pin::Pin;
use std::time::Duration;

/// `published_at` as RFC 3339 with milliseconds.
fn rfc3339(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The JSON of one event as merchants receive it (stream and callback alike).
pub fn event_json(e: &Event) -> String {
    let payload: serde_json::Value =
        serde_json::from_str(&e.payload).unwrap_or(serde_json::Value::Null);
    let mut v = serde_json::json!({
        "id": e.id.to_string(),
        "topic": e.topic,
        "published_at": rfc3339(e.published_at_ms),
        "payload": payload,
    });
    if let (Some(k), Some(obj)) = (&e.key, v.as_object_mut()) {
        obj.insert("key".into(), k.clone().into());
    }
    v.to_string()
}

fn frame(out: &mut String, e: &Event) {
    let _ = write!(
        out,
        "id: {}\nevent: notification\ndata: {}\n\n",
        e.id,
        event_json(e)
    );
}

fn close_frame(c: &Close) -> String {
    format!(
        "event: close\ndata: {}\n\n",
        serde_json::json!({"reason": c.reason, "message": c.message})
    )
}

/// Serves the stream until the merchant goes away or the gateway closes it.
pub async fn serve(
    n: &Notifier,
    session: &mut Session,
    app: &str,
    request_id: &str,
) -> Result<Response, GatewayError> {
    let last_acked = match session
        .req_header()
        .headers
        .get("last-event-id")
        .map(|v| v.to_str().ok().and_then(EventId::parse))
    {
        None => None,
        Some(Some(id)) => Some(id),
        Some(None) => {
            return Err(GatewayError::bad_request(
                "Last-Event-ID must be an event id (<ms>-<seq>)",
            ))
        }
    };
    let _open = session::open(n, app)?;
    let unavailable = |e: String| {
        GatewayError::new(Code::NotifyUnavailable, "the notification store failed").with_detail(e)
    };
    let token = n.hold(app).await;
    let resumed = match n.store.resume(app, last_acked).await {
        Ok(r) => r,
        Err(e) => {
            n.release(app, token);
            return Err(unavailable(e));
        }
    };

    let mut head = ResponseHeader::build(200, Some(6))
        .map_err(|e| GatewayError::internal(format!("response header: {e}")))?;
    let _ = head.insert_header("content-type", "text/event-stream; charset=utf-8");
    let _ = head.insert_header("cache-control", "no-store");
    let _ = head.insert_header("x-accel-buffering", "no");
    let _ = head.insert_header(crate::request_id::HEADER, request_id);
    if !session.is_http2() {
        let _ = head.insert_header("transfer-encoding", "chunked");
    }
    session.set_keepalive(None);
    if session
        .write_response_header(Box::new(head), false)
        .await
        .is_err()
    {
        n.release(app, token);
        return Ok(Response::Streamed(200));
    }
    let mut sse = Sse { session };
    if sse
        .write("retry: 1000\n: connected\n\n".to_owned())
        .await
        .is_ok()
    {
        let end = Delivery::new(n, app, token).run(&mut sse, resumed).await;
        if let Some(close) = &end {
            n.metrics.closed.with_label_values(&[close.reason]).inc();
            tracing::info!(app, reason = close.reason, message = %close.message, "notify: stream closed by the gateway");
            sse.close(close).await;
        }
    }
    n.release(app, token);
    Ok(Response::Streamed(200))
}

/// The SSE transport: the response body of the stream.
struct Sse<'a> {
    session: &'a mut Session,
}

impl Sse<'_> {
    async fn write(&mut self, text: String) -> Result<(), ()> {
        self.session
            .write_response_body(Some(Bytes::from(text)), false)
            .await
            .map_err(|_| ())
    }
}

impl Transport for Sse<'_> {
    async fn events(&mut self, events: &[&Event]) -> Result<(), ()> {
        let mut text = String::new();
        for e in events {
            frame(&mut text, e);
        }
        self.write(text).await
    }

    async fn heartbeat(&mut self) -> Result<(), ()> {
        self.write(": heartbeat\n\n".to_owned()).await
    }

    async fn wait(
        &mut self,
        wait: Duration,
        woken: Pin<&mut tokio::sync::futures::Notified<'_>>,
    ) -> Result<Vec<EventId>, ()> {
        let _ = tokio::time::timeout(wait, woken).await;
        Ok(Vec::new())
    }

    async fn close(&mut self, close: &Close) {
        let _ = self.write(close_frame(close)).await;
        let _ = self.session.write_response_body(None, true).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_id_topic_time_and_payload() {
        let e = Event {
            id: EventId {
                ms: 1_796_000_000_000,
                seq: 3,
            },
            topic: "orders".into(),
            payload: r#"{"order":42}"#.into(),
            published_at_ms: 1_796_000_000_000,
            expires_at_ms: 0,
            key: Some("k-1".into()),
        };
        let mut out = String::new();
        frame(&mut out, &e);
        let (head, data) = out.split_once("data: ").unwrap();
        assert_eq!(head, "id: 1796000000000-3\nevent: notification\n");
        let v: serde_json::Value = serde_json::from_str(data.trim_end()).unwrap();
        assert_eq!(v["id"], "1796000000000-3");
        assert_eq!(v["topic"], "orders");
        assert_eq!(v["payload"]["order"], 42);
        assert_eq!(v["key"], "k-1");
        assert!(v["published_at"].as_str().unwrap().starts_with("2026-"));
        let c = close_frame(&Close {
            reason: "revoked",
            message: "m".into(),
        });
        assert!(c.starts_with("event: close\ndata: {"));
    }
}
