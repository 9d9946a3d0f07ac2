//! The WebSocket transport of a notification session, `GET /notify/v1/ws` (docs/PROTOCOL.md,
//! "Notifications"; the session itself is `session.rs`, the frame codec `wsframe.rs`).
//!
//! The opening request has passed the edge (`route`, `auth`, the nonce, `permit`) like the
//! SSE stream's; here its handshake is checked (RFC 6455 §4.2.1: HTTP/1.1, `Upgrade:
//! websocket`, `Connection: Upgrade`, `Sec-WebSocket-Version: 13`, a `Sec-WebSocket-Key` of
//! 16 bytes in base64; anything else is 400 `BAD_REQUEST` in the envelope, before any
//! upgrade) and answered `101 Switching Protocols`. Pingora then reads the rest of the
//! connection as an upgraded, close-delimited body (pingora-core
//! `protocols/http/v1/server.rs`, `prepare_response_header`: a 101 to an upgrade request
//! turns the request body reader into "until closed" and the response body writer into
//! pass-through), so the frames are read with `read_request_body` and written with
//! `write_response_body`.
//!
//! Server → client: one text frame per event (the event JSON of `sse::event_json`), a ping
//! after `heartbeat` of silence, a pong for the latest ping at most
//! [`wsframe::PONGS_PER_SECOND`] times a second (a client over its control-frame budget,
//! [`wsframe::ControlBudget`], is closed with 1008), and on the gateway's close a text
//! frame `{"type":"close","reason","message"}` then a close frame ([`close_code`]).
//! Client → server: `{"type":"ack","ids":[..]}` any time; `{"type":"resume","after":"<id>"}`
//! as the first message only (the gateway waits [`RESUME_WAIT`] for it; without it the
//! session starts after the last acknowledged event, as SSE without `Last-Event-ID`).

use super::hub::{Notifier, MAX_ACK_IDS};
use super::session::{self, Close, Delivery, Transport};
use super::store::{Event, EventId};
use super::wsframe::{self, Decoder, Message, Violation};
use crate::error::GatewayError;
use crate::model::Response;
use base64::Engine as _;
use bytes::Bytes;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use serde::Deserialize;
use sha1::{Digest, Sha1};
use std::pin::Pin;
use std::time::{Duration, Instant};

/// The longest client message (all its fragments), in bytes; longer: close 1009.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// How long the gateway waits after the upgrade for a first `resume` message.
pub const RESUME_WAIT: Duration = Duration::from_millis(500);
/// A client that has sent nothing (not even a pong) for this many heartbeats after a ping is
/// taken for dead and closed (4008 `no_pong`).
const DEAD_AFTER_HEARTBEATS: u32 = 2;
/// How long the gateway waits for the client's close frame after sending its own.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// RFC 6455 §1.3: appended to the key before hashing.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The close status code of each gateway close reason (docs/PROTOCOL.md, "Notifications").
pub fn close_code(reason: &str) -> u16 {
    match reason {
        "slow_consumer" => 1008,
        "revoked" => 4003,
        "replaced" => 4009,
        "no_pong" => 4008,
        _ => 1011,
    }
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` (RFC 6455 §4.2.2).
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Checks the opening handshake; answers the `Sec-WebSocket-Accept` value.
fn handshake(session: &Session) -> Result<String, GatewayError> {
    let bad = |m: &str| GatewayError::bad_request(m.to_owned());
    let req = session.req_header();
    let has_token = |name: &str, token: &str| {
        req.headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if session.is_http2() || req.version != http::Version::HTTP_11 {
        return Err(bad("a WebSocket opens over HTTP/1.1"));
    }
    if !has_token("upgrade", "websocket") || !has_token("connection", "upgrade") {
        return Err(bad(
            "not a WebSocket opening: Upgrade: websocket and Connection: Upgrade are required (SSE is /notify/v1/stream)",
        ));
    }
    let version = req
        .headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if version != Some("13") {
        return Err(bad("Sec-WebSocket-Version must be 13"));
    }
    let key = req
        .headers
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .unwrap_or_default();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(key)
        .unwrap_or_default();
    if decoded.len() != 16 {
        return Err(bad(
            "Sec-WebSocket-Key must be 16 random bytes in base64 (RFC 6455 §4.1)",
        ));
    }
    Ok(accept_key(key))
}

/// A message from the merchant.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ClientMessage {
    Ack {
        ids: Vec<String>,
    },
    Resume {
        #[serde(default)]
        after: Option<String>,
    },
}

/// Serves the WebSocket until the merchant goes away or the gateway closes it.
pub async fn serve(
    n: &Notifier,
    session: &mut Session,
    app: &str,
    request_id: &str,
) -> Result<Response, GatewayError> {
    let accept = handshake(session)?;
    let header_resume = match session
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
    let token = n.hold(app).await;

    let mut head = ResponseHeader::build(101, Some(4))
        .map_err(|e| GatewayError::internal(format!("response header: {e}")))?;
    let _ = head.insert_header("upgrade", "websocket");
    let _ = head.insert_header("connection", "Upgrade");
    let _ = head.insert_header("sec-websocket-accept", accept);
    let _ = head.insert_header(crate::request_id::HEADER, request_id);
    session.set_keepalive(None);
    if session
        .write_response_header(Box::new(head), false)
        .await
        .is_err()
    {
        n.release(app, token);
        return Ok(Response::Streamed(101));
    }
    let mut ws = Ws {
        session,
        decoder: Decoder::new(MAX_MESSAGE_BYTES),
        heartbeat: n.config.heartbeat,
        unanswered_ping: None,
        closed: false,
        started: Instant::now(),
        control: wsframe::ControlBudget::new(0),
    };
    let end = async {
        let last_acked = match header_resume {
            Some(id) => Some(id),
            None => match ws.first(n, app).await {
                Ok(after) => after,
                Err(()) => return None,
            },
        };
        let resumed = match n.store.resume(app, last_acked).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(app, error = %e, "notify: resuming from the store failed");
                return Some(Close {
                    reason: "unavailable",
                    message: "the notification store failed; reconnect later".into(),
                });
            }
        };
        Delivery::new(n, app, token).run(&mut ws, resumed).await
    }
    .await;
    if let Some(close) = &end {
        n.metrics.closed.with_label_values(&[close.reason]).inc();
        tracing::info!(app, reason = close.reason, message = %close.message, "notify: WebSocket closed by the gateway");
        ws.close(close).await;
    } else {
        ws.finish().await;
    }
    n.release(app, token);
    Ok(Response::Streamed(101))
}

/// The WebSocket transport over the upgraded connection.
struct Ws<'a> {
    session: &'a mut Session,
    decoder: Decoder,
    heartbeat: Duration,
    /// Since when a ping waits for the client to send anything (a pong or any frame).
    unanswered_ping: Option<Instant>,
    /// Whether the closing handshake is done (nothing more may be written).
    closed: bool,
    /// The clock of `control`.
    started: Instant,
    /// The client's control frames: pongs coalesced and rate-limited, floods closed.
    control: wsframe::ControlBudget,
}

/// What reading the client found.
enum Heard {
    Acks(Vec<EventId>),
    Resume(Option<EventId>),
    /// Nothing (a ping answered, a pong).
    Nothing,
}

impl Ws<'_> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts a control frame of the client's (a ping's payload, or `None` for a pong);
    /// over the budget, closes with 1008.
    async fn control_frame(&mut self, ping: Option<Vec<u8>>) -> Result<(), ()> {
        let now = self.now_ms();
        if let Err(v) = self.control.received(now, ping) {
            tracing::info!(
                reason = v.reason(),
                "notify: WebSocket closed for a control-frame flood"
            );
            self.violation(v).await;
            return Err(());
        }
        Ok(())
    }

    /// Writes the pong of the latest ping if one is due and allowed now.
    async fn flush_pong(&mut self) -> Result<(), ()> {
        let now = self.now_ms();
        if let Some(payload) = self.control.take_pong(now) {
            self.send(wsframe::encode(wsframe::OP_PONG, &payload))
                .await?;
        }
        Ok(())
    }

    async fn send(&mut self, frame: Vec<u8>) -> Result<(), ()> {
        if self.closed {
            return Err(());
        }
        self.session
            .write_response_body(Some(Bytes::from(frame)), false)
            .await
            .map_err(|_| ())
    }

    /// Closes with `code` (a protocol error of the client's, or the answer to its close).
    async fn refuse(&mut self, code: u16, reason: &str) {
        let _ = self.send(wsframe::encode_close(code, reason)).await;
        self.closed = true;
        self.finish().await;
    }

    /// Ends the connection (the response body, hence the upgraded stream).
    async fn finish(&mut self) {
        self.closed = true;
        let _ = self.session.write_response_body(None, true).await;
    }

    /// Reads until a message is whole; `Err` when the session must end (the client is
    /// gone, closed, or broke the protocol: it has been told).
    async fn read_message(&mut self) -> Result<Message, ()> {
        loop {
            match self.decoder.next_message() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => {}
                Err(v) => {
                    self.violation(v).await;
                    return Err(());
                }
            }
            match self.session.read_request_body().await {
                Ok(Some(bytes)) => {
                    self.unanswered_ping = None;
                    self.decoder.feed(&bytes);
                }
                Ok(None) | Err(_) => {
                    self.closed = true;
                    return Err(());
                }
            }
        }
    }

    async fn violation(&mut self, v: Violation) {
        tracing::debug!(reason = v.reason(), "notify: WebSocket protocol error");
        self.refuse(v.close_code(), v.reason()).await;
    }

    /// Handles one message; `first` allows `resume`.
    async fn handle(&mut self, m: Message, first: bool) -> Result<Heard, ()> {
        match m {
            Message::Ping(p) => {
                self.control_frame(Some(p)).await?;
                Ok(Heard::Nothing)
            }
            Message::Pong => {
                self.control_frame(None).await?;
                Ok(Heard::Nothing)
            }
            Message::Binary => {
                self.refuse(1003, "binary messages are not accepted; send JSON text")
                    .await;
                Err(())
            }
            Message::Close(code, _) => {
                // Echo the status (RFC 6455 §5.5.1); 1005 (none given) is answered with 1000.
                self.refuse(code.filter(|c| *c != 1005).unwrap_or(1000), "")
                    .await;
                Err(())
            }
            Message::Text(text) => match serde_json::from_str::<ClientMessage>(&text) {
                Ok(ClientMessage::Ack { ids }) => {
                    if ids.len() > MAX_ACK_IDS {
                        self.refuse(1008, "too many ids in one ack").await;
                        return Err(());
                    }
                    let mut out = Vec::with_capacity(ids.len());
                    for id in &ids {
                        let Some(id) = EventId::parse(id) else {
                            self.refuse(1008, "ack: ids must be event ids (<ms>-<seq>)")
                                .await;
                            return Err(());
                        };
                        out.push(id);
                    }
                    Ok(Heard::Acks(out))
                }
                Ok(ClientMessage::Resume { after }) if first => {
                    match after.as_deref().map(EventId::parse) {
                        None => Ok(Heard::Resume(None)),
                        Some(Some(id)) => Ok(Heard::Resume(Some(id))),
                        Some(None) => {
                            self.refuse(1008, "resume: after must be an event id (<ms>-<seq>)")
                                .await;
                            Err(())
                        }
                    }
                }
                Ok(ClientMessage::Resume { .. }) => {
                    self.refuse(1008, "resume must be the first message").await;
                    Err(())
                }
                Err(_) => {
                    self.refuse(
                        1008,
                        "expected {\"type\":\"ack\",\"ids\":[..]} or {\"type\":\"resume\",\"after\":\"<id>\"}",
                    )
                    .await;
                    Err(())
                }
            },
        }
    }

    /// The first message, waited for at most [`RESUME_WAIT`]: `resume` gives the point to
    /// resume after; an ack is applied and the session starts after the last acked event.
    async fn first(&mut self, n: &Notifier, app: &str) -> Result<Option<EventId>, ()> {
        let deadline = tokio::time::Instant::now() + RESUME_WAIT;
        loop {
            let m = match tokio::time::timeout_at(deadline, self.read_message()).await {
                Err(_) => return Ok(None),
                Ok(m) => m?,
            };
            let heard = self.handle(m, true).await?;
            self.flush_pong().await?;
            match heard {
                Heard::Nothing => {}
                Heard::Resume(after) => return Ok(after),
                Heard::Acks(ids) => {
                    if let Err(e) = n.ack_ids(app, &ids).await {
                        tracing::warn!(app, error = %e, "notify: an ack failed");
                    }
                    return Ok(None);
                }
            }
        }
    }
}

impl Transport for Ws<'_> {
    async fn events(&mut self, events: &[&Event]) -> Result<(), ()> {
        let mut out = Vec::new();
        for e in events {
            out.extend(wsframe::encode(
                wsframe::OP_TEXT,
                super::sse::event_json(e).as_bytes(),
            ));
        }
        self.send(out).await
    }

    async fn heartbeat(&mut self) -> Result<(), ()> {
        if self
            .unanswered_ping
            .is_some_and(|t| t.elapsed() > self.heartbeat * DEAD_AFTER_HEARTBEATS)
        {
            let _ = self
                .send(
                    wsframe::encode(
                        wsframe::OP_TEXT,
                        serde_json::json!({"type": "close", "reason": "no_pong", "message": "no pong to the gateway's pings"}).to_string().as_bytes(),
                    ),
                )
                .await;
            self.refuse(close_code("no_pong"), "no_pong").await;
            return Err(());
        }
        self.unanswered_ping.get_or_insert_with(Instant::now);
        self.send(wsframe::encode(wsframe::OP_PING, b"")).await
    }

    async fn wait(
        &mut self,
        wait: Duration,
        mut woken: Pin<&mut tokio::sync::futures::Notified<'_>>,
    ) -> Result<Vec<EventId>, ()> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut acks = Vec::new();
        loop {
            // Every whole message already read first.
            loop {
                match self.decoder.next_message() {
                    Ok(Some(m)) => {
                        if let Heard::Acks(ids) = self.handle(m, false).await? {
                            acks.extend(ids);
                        }
                    }
                    Ok(None) => break,
                    Err(v) => {
                        self.violation(v).await;
                        return Err(());
                    }
                }
            }
            self.flush_pong().await?;
            if !acks.is_empty() {
                return Ok(acks);
            }
            // A pong held back by the pong rate is written when it may be.
            let pong_wait = self
                .control
                .pong_wait_ms(self.now_ms())
                .map(Duration::from_millis);
            // Reading is cancel-safe: a read not finished has taken nothing off the socket.
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(acks),
                _ = tokio::time::sleep(pong_wait.unwrap_or_default()), if pong_wait.is_some() => {}
                _ = woken.as_mut() => return Ok(acks),
                read = self.session.read_request_body() => match read {
                    Ok(Some(bytes)) => {
                        self.unanswered_ping = None;
                        self.decoder.feed(&bytes);
                    }
                    Ok(None) | Err(_) => {
                        self.closed = true;
                        return Err(());
                    }
                },
            }
        }
    }

    async fn close(&mut self, close: &Close) {
        let notice =
            serde_json::json!({"type": "close", "reason": close.reason, "message": close.message});
        let _ = self
            .send(wsframe::encode(
                wsframe::OP_TEXT,
                notice.to_string().as_bytes(),
            ))
            .await;
        let _ = self
            .send(wsframe::encode_close(
                close_code(close.reason),
                close.reason,
            ))
            .await;
        // Nothing more may be sent (a protocol error while draining is not answered).
        self.closed = true;
        // The closing handshake: wait a little for the client's close frame, then end.
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while let Ok(m) = self.read_message().await {
                if matches!(m, Message::Close(..)) {
                    break;
                }
            }
        })
        .await;
        self.finish().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_is_rfc_6455s_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn close_codes_are_distinct() {
        let reasons = [
            "slow_consumer",
            "revoked",
            "replaced",
            "no_pong",
            "unavailable",
        ];
        let mut codes: Vec<u16> = reasons.iter().map(|r| close_code(r)).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), reasons.len());
        assert_eq!(close_code("slow_consumer"), 1008);
    }
}
