//! The notification endpoints (docs/PROTOCOL.md, "Notifications") as operations under
//! `/notify/v1/`, callbacks as the `notification` webhook, and `x-portico-notifications`:
//! for an app's document the topics granted to it and how it receives them; for the public
//! document how an app lists its topics.

use super::security::security_requirement;
use portico_control::sign::{HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use portico_control::{v1, Snapshot};
use serde_json::{json, Value};

/// Adds the notification endpoints, the `NotificationEvent` schema, the webhook and the
/// `notifications` tag to `doc`; `app` is the app (key, document) the document is for, `None`
/// for the public document.
pub(super) fn add_notifications(
    doc: &mut Value,
    snapshot: &Snapshot,
    app: Option<(&str, &v1::App)>,
) {
    let (stream_responses, ws_responses, ack_responses) = responses();
    let paths = &mut doc["paths"];
    paths["/notify/v1/stream"] = signed_get(
        "notify.stream",
        "Receive your app's events as Server-Sent Events. Keep the connection open; acknowledge each event with POST /notify/v1/ack; reconnect with Last-Event-ID. 403 APP_FORBIDDEN when the app is granted no topic or receives callbacks.",
        stream_responses,
    );
    paths["/notify/v1/ws"] = signed_get(
        "notify.ws",
        "Receive your app's events over a WebSocket (RFC 6455, HTTP/1.1 upgrade). The opening request is signed like any call; acks and resume travel on the socket.",
        ws_responses,
    );
    paths["/notify/v1/ack"] = ack_operation(ack_responses);
    doc["components"]["schemas"]["NotificationEvent"] = event_schema();
    doc["webhooks"] = callback_webhook();
    if let Some(tags) = doc["tags"].as_array_mut() {
        tags.push(json!({"name": "notifications", "description": "Events pushed to your app: a stream, a WebSocket or callbacks."}));
    }
    doc["x-portico-notifications"] = match app {
        Some((key, app)) => json!({
            "topics": snapshot.granted_topics(key),
            "delivery": if app.callback_url.is_some() { "callback" } else { "stream or websocket" },
        }),
        None => json!({
            "topics": null,
            "how_to_list": "Sign in with your app key and secret on the portal's My app page, or GET /portal/apps/<your app key>/openapi.json signed as any call: its x-portico-notifications.topics lists the topics granted to your app.",
        }),
    };
}

/// A signed `GET` of a notification endpoint: `summary` is its operation id, the first
/// sentence of `description` its summary; `ok` its responses.
fn signed_get(summary: &str, description: &str, ok: Value) -> Value {
    json!({"get": {
        "operationId": summary.to_owned(),
        "summary": description.split(". ").next().unwrap_or(description),
        "description": description,
        "tags": ["notifications"],
        "parameters": [
            {"name": "Last-Event-ID", "in": "header", "required": false,
             "description": "The id of the last event you acknowledged: delivery resumes after it.",
             "schema": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}},
            {"$ref": "#/components/parameters/RequestId"},
        ],
        "security": security_requirement(),
        "responses": ok,
    }})
}

/// The responses of the stream, the WebSocket and the ack: each its own success and the
/// shared error responses they can answer.
fn responses() -> (Value, Value, Value) {
    let error = |name: &str| json!({"$ref": format!("#/components/responses/{name}")});
    let mut stream_responses = json!({
        "200": {"description": "The event stream: `id:`, `event: notification`, `data:` (a NotificationEvent) per event; a line starting with `:` is a heartbeat; `event: close` with `{\"reason\", \"message\"}` before the gateway closes it.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}}},
    });
    let mut ws_responses = json!({
        "101": {"description": "Switching Protocols: one text message per event (a NotificationEvent); send `{\"type\": \"ack\", \"ids\": [...]}` and, first, optionally `{\"type\": \"resume\", \"after\": \"<id>\"}`."},
    });
    let mut ack_responses = json!({
        "200": {"description": "The number of ids that were waiting.",
                "content": {"application/json": {"schema": {"type": "object", "required": ["acked"],
                    "properties": {"acked": {"type": "integer", "minimum": 0}}}}}},
    });
    for (status, name) in [
        (400, "BadRequest"),
        (401, "Unauthorized"),
        (403, "Forbidden"),
        (429, "TooManyRequests"),
        (503, "ServiceUnavailable"),
    ] {
        for r in [&mut stream_responses, &mut ws_responses, &mut ack_responses] {
            r[status.to_string()] = error(name);
        }
    }
    (stream_responses, ws_responses, ack_responses)
}

/// `POST /notify/v1/ack`.
fn ack_operation(responses: Value) -> Value {
    json!({"post": {
        "operationId": "notify.ack",
        "summary": "Acknowledge events by id",
        "description": "Acknowledges delivered events (at most 10,000 ids), on any gateway. An event not acknowledged within 30 s is sent again.",
        "tags": ["notifications"],
        "parameters": [{"$ref": "#/components/parameters/RequestId"}],
        "requestBody": {"required": true, "content": {"application/json": {
            "schema": {"type": "object", "required": ["ids"], "properties": {"ids": {
                "type": "array", "maxItems": 10000, "items": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}}}},
            "example": {"ids": ["1796000000000-0"]},
        }}},
        "security": security_requirement(),
        "responses": responses,
    }})
}

/// One event as delivered (`NotificationEvent`).
fn event_schema() -> Value {
    json!({
        "title": "NotificationEvent",
        "type": "object",
        "description": "One event: delivered at least once, in publish order per app; handle it idempotently by `id`.",
        "required": ["id", "topic", "published_at", "payload"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+-[0-9]+$", "description": "`<ms>-<seq>`, growing with publish order."},
            "topic": {"type": "string"},
            "published_at": {"type": "string", "format": "date-time"},
            "payload": {"description": "The publisher's JSON."},
            "key": {"type": "string", "description": "The publisher's own id of the event, when it gave one."},
        },
    })
}

/// The `notification` webhook: an event POSTed to an app's callback URL, signed.
fn callback_webhook() -> Value {
    let header = |name: &str, description: &str| json!({"name": name, "in": "header", "required": true, "description": description, "schema": {"type": "string"}});
    json!({"notification": {"post": {
        "operationId": "notify.callback",
        "summary": "An event POSTed to your app's callback URL",
        "description": "Sent when your operator set a callback URL for your app. Verify the signature: HMAC-SHA256 with your app's secret of the line PORTICO-CALLBACK-v1, a line feed, then the seven lines a request to your URL would sign (POST, the path and canonical query as received, your app key, the timestamp, the nonce, SHA-256 of the raw body); refuse a timestamp more than 300 s from your clock and a nonce seen in the last 300 s. Answer any 2xx once the event is stored: anything else (or no answer within 5 s) is retried after 1 s, 2 s, 4 s, ... up to 10 tries.",
        "tags": ["notifications"],
        "parameters": [
            header(HEADER_APP_KEY, "Your app key."),
            header(HEADER_TIMESTAMP, "Unix epoch milliseconds of this try."),
            header(HEADER_NONCE, "A fresh nonce per try."),
            header(HEADER_SIGNATURE, "Lowercase hex HMAC-SHA256 (your secret) of the callback string-to-sign."),
            header("X-Portico-Event-Id", "The event's id."),
        ],
        "requestBody": {"required": true, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/NotificationEvent"}}}},
        "responses": {"2XX": {"description": "Stored: the event is acknowledged."}},
    }}})
}
