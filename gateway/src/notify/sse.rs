//! The Server-Sent Events stream `GET /notify/v1/stream` (docs/PROTOCOL.md,
//! "Notifications"): pending events of an earlier stream first, then new ones in publish
//! order, each as `id: <event id>` / `event: notification` / `data: <JSON>`; a comment line
//! after `heartbeat` of silence; unacknowledged events again after the ack timeout. The
//! gateway ends the stream with `event: close` / `data: {"reason", "message"}` when the
//! app's grant is revoked (`revoked`), a newer stream of the app replaced it (`replaced`),
//! or the merchant let `max_backlog` delivered events wait for an ack for longer than the
//! ack timeout (`slow_consumer`). At most `max_backlog` events are unacknowledged at a
//! time: the stream sends new ones as acks make room, so nothing buffers without bound.

use super::store::{Event, EventId};
use super::{granted, Notifier};
use crate::error::{Code, GatewayError};
use crate::model::Response;
use bytes::Bytes;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Events read from the store per poll at most.
const BATCH: usize = 200;
/// How often a stream checks that it still holds its app.
const HOLD_CHECK: Duration = Duration::from_millis(500);

/// Why the gateway ended a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    pub reason: &'static str,
    pub message: String,
}

/// Counts the stream open for its lifetime.
struct Open<'a>(&'a Notifier);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.connections.dec();
    }
}

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
    let snap = n.snapshot();
    if snap.apps.get(app).is_some_and(|a| a.callback_url.is_some()) {
        return Err(GatewayError::new(
            Code::AppForbidden,
            "this app receives its notifications by callback (callback_url); it cannot open a stream",
        ));
    }
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
    if n.streams.fetch_add(1, Ordering::Relaxed) >= n.config.max_streams {
        n.streams.fetch_sub(1, Ordering::Relaxed);
        return Err(GatewayError::new(
            Code::ConnectionLimit,
            "this gateway holds as many notification streams as it may; try another",
        )
        .with_retry_after(1));
    }
    n.metrics.connections.inc();
    let _open = Open(n);
    let unavailable = |e: String| {
        GatewayError::new(Code::NotifyUnavailable, "the notification store failed").with_detail(e)
    };
    let token = n.hold(app).await;
    let resumed = n.store.resume(app, last_acked).await.map_err(unavailable)?;

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
    let mut stream = Stream {
        n,
        session,
        app,
        token,
        last_write: Instant::now(),
        last_hold_check: Instant::now(),
    };
    let end = stream.run(resumed).await;
    if let Some(close) = &end {
        n.metrics.closed.with_label_values(&[close.reason]).inc();
        tracing::info!(app, reason = close.reason, message = %close.message, "notify: stream closed by the gateway");
        let _ = stream.write(close_frame(close)).await;
        let _ = stream.session.write_response_body(None, true).await;
    }
    n.release(app, token);
    Ok(Response::Streamed(200))
}

struct Stream<'a> {
    n: &'a Notifier,
    session: &'a mut Session,
    app: &'a str,
    token: u64,
    last_write: Instant,
    last_hold_check: Instant,
}

impl Stream<'_> {
    async fn write(&mut self, text: String) -> Result<(), ()> {
        self.last_write = Instant::now();
        self.session
            .write_response_body(Some(Bytes::from(text)), false)
            .await
            .map_err(|_| ())
    }

    /// Why the stream must end now, if it must: revoked, replaced.
    async fn check(&mut self) -> Option<Close> {
        let snap = self.n.snapshot();
        let active = snap
            .apps
            .get(self.app)
            .is_some_and(|a| a.status == portico_control::v1::AppStatus::Active);
        if !active || super::granted_topics(&snap, self.app).is_empty() {
            return Some(Close {
                reason: "revoked",
                message: "this app is no longer granted any notification topic".into(),
            });
        }
        if self.last_hold_check.elapsed() >= HOLD_CHECK {
            self.last_hold_check = Instant::now();
            if !self.n.holds(self.app, self.token).await {
                return Some(Close {
                    reason: "replaced",
                    message: "a newer stream of this app was opened".into(),
                });
            }
        }
        None
    }

    /// Sends `events` (dropping expired ones and topics no longer granted, which are
    /// acknowledged); `Err` when the merchant is gone.
    async fn send(&mut self, events: Vec<Event>, again: bool) -> Result<(), ()> {
        if events.is_empty() {
            return Ok(());
        }
        let snap = self.n.snapshot();
        let now = portico_control::clock::now_ms();
        let mut text = String::new();
        let mut dropped = Vec::new();
        let mut sent = 0;
        for e in &events {
            let allowed = snap
                .apps
                .get(self.app)
                .is_some_and(|a| granted(&snap, self.app, a, &e.topic));
            if !allowed || (e.expires_at_ms > 0 && e.expires_at_ms <= now) {
                dropped.push(e.id);
                continue;
            }
            frame(&mut text, e);
            sent += 1;
        }
        if !dropped.is_empty() {
            let _ = self.n.store.ack(self.app, &dropped).await;
        }
        if text.is_empty() {
            return Ok(());
        }
        self.write(text).await?;
        if again {
            self.n.metrics.redelivered.inc_by(sent);
        } else {
            self.n.metrics.delivered.inc_by(sent);
        }
        Ok(())
    }

    /// The stream's loop; `Some(close)` when the gateway ends it, `None` when the merchant
    /// went away.
    async fn run(&mut self, resumed: Vec<Event>) -> Option<Close> {
        if self
            .write("retry: 1000\n: connected\n\n".to_owned())
            .await
            .is_err()
        {
            return None;
        }
        let mut pending = resumed.len() as u64;
        if self.send(resumed, true).await.is_err() {
            return None;
        }
        let limit = self.n.config.max_backlog;
        let mut full_since: Option<Instant> = None;
        let waker = self.n.waker(self.app);
        let ack_timeout = self.n.config.ack_timeout.as_millis() as u64;
        loop {
            if let Some(close) = self.check().await {
                return Some(close);
            }
            // Register for a wake-up before looking, so a publish in between is not missed.
            let woken = waker.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let room = usize::try_from(limit.saturating_sub(pending)).unwrap_or(BATCH);
            let batch = match self
                .n
                .store
                .poll(self.app, ack_timeout, room.min(BATCH))
                .await
            {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(app = self.app, error = %e, "notify: polling the store failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            self.n
                .metrics
                .backlog
                .with_label_values(&[self.app])
                .set(i64::try_from(batch.pending).unwrap_or(i64::MAX));
            let busy = !batch.fresh.is_empty() || !batch.redeliver.is_empty();
            if self.send(batch.redeliver, true).await.is_err()
                || self.send(batch.fresh, false).await.is_err()
            {
                return None;
            }
            pending = batch.pending;
            if pending < limit {
                full_since = None;
            } else if full_since.get_or_insert_with(Instant::now).elapsed()
                >= self.n.config.ack_timeout
            {
                return Some(Close {
                    reason: "slow_consumer",
                    message: format!(
                        "{pending} notifications have waited for an ack for more than {} ms (at most {limit} may); ack as you go, then reconnect",
                        ack_timeout
                    ),
                });
            }
            if busy {
                continue;
            }
            let heartbeat = self.n.config.heartbeat;
            let until_beat = heartbeat.saturating_sub(self.last_write.elapsed());
            if until_beat.is_zero() {
                if self.write(": heartbeat\n\n".to_owned()).await.is_err() {
                    return None;
                }
                continue;
            }
            let wait = self.n.config.poll.min(until_beat);
            let _ = tokio::time::timeout(wait, woken).await;
        }
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
