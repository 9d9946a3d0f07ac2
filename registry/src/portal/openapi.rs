//! The merchants' OpenAPI 3.1 document of a set of published APIs: one operation per HTTP
//! binding (the RESTful paths), one `POST /router` operation for the router style, the
//! notification endpoints (stream, WebSocket, ack) and callbacks as a webhook, the
//! signature headers as security schemes, the error envelope as shared responses carrying
//! every code of docs/PROTOCOL.md ("The error envelope"), and per operation what the portal shows besides: an
//! example request the gateway accepts as it stands (`x-portico-example`), code that signs
//! and sends it (`x-codeSamples`), the rate limits, deadline and body limit.
//!
//! Schemas: for a gRPC-backed API from its descriptor (see [`super::schema`]), through the
//! same `MethodPlan` the gateway runs, so a binding the gateway could not transcode is not
//! documented either; for an HTTP-backed API from the `request_schema` / `response_schema`
//! its owner attached (docs/OPERATIONS.md, "The merchants' portal"), else "any JSON".
//!
//! Merchant words only: the document names no repository file (merchants have the portal's
//! Signing, Errors and Notifications pages instead), no gRPC service or method, and no
//! operator's reason; `registry/tests/portal.rs` checks it.

use super::example::{example, id_like};
use super::schema::{query_parameters, text_schema, Schemas, COMPONENTS};
use super::snippets;
use portico_control::fieldpath::{self, Syntax};
use portico_control::sign::{HEADER_APP_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP};
use portico_control::template::{encode_multi, encode_segment, PathTemplate, Rewrite, Segment};
use portico_control::{v1, Api, BackendKind, Snapshot};
use portico_grpc_dynamic::transcode::{proto_type_name, MethodPlan};
use prost_reflect::{DescriptorPool, MessageDescriptor, MethodDescriptor};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The gateway's own error codes (docs/PROTOCOL.md, "The error envelope"): status, code,
/// meaning.
pub const ERROR_CODES: [(u16, &str, &str); 22] = [
    (
        400,
        "BAD_REQUEST",
        "unparseable JSON, a wrong field type, a bad path variable, a . or .. path segment, a request over a limit",
    ),
    (
        401,
        "SIGNATURE_MISSING",
        "a signature header is missing",
    ),
    (
        401,
        "SIGNATURE_INVALID",
        "the signature does not match (or a header is malformed)",
    ),
    (
        401,
        "SIGNATURE_EXPIRED",
        "the timestamp is more than 300 s from the gateway's clock",
    ),
    (
        401,
        "NONCE_REPLAYED",
        "this nonce was already used by this app within the window",
    ),
    (
        401,
        "APP_UNKNOWN",
        "reserved; no longer sent (an unknown app key answers SIGNATURE_INVALID)",
    ),
    (
        403,
        "IP_BLOCKED",
        "the caller's address is denied (or not allowed)",
    ),
    (
        403,
        "APP_FORBIDDEN",
        "the app is not granted this API",
    ),
    (
        403,
        "APP_DISABLED",
        "the app is disabled",
    ),
    (
        404,
        "API_NOT_FOUND",
        "no API at this method and path (or no such method= in the router style)",
    ),
    (
        413,
        "BODY_TOO_LARGE",
        "the body is over the limit (1 MiB unless the API sets another)",
    ),
    (
        414,
        "URI_TOO_LONG",
        "the request target (path and query) is over 8 KiB",
    ),
    (
        429,
        "RATE_LIMITED",
        "a rate limit was hit; retry after Retry-After seconds",
    ),
    (
        503,
        "API_DEGRADED",
        "the API is switched off for now (some degraded APIs answer a fallback instead)",
    ),
    (
        503,
        "CIRCUIT_OPEN",
        "the backend is failing; calls are refused for a while (Retry-After)",
    ),
    (
        503,
        "BULKHEAD_FULL",
        "the API is at its concurrency limit",
    ),
    (
        503,
        "NO_HEALTHY_UPSTREAM",
        "no backend endpoint is available (all are down or taken out by health checks)",
    ),
    (
        503,
        "BACKEND_LOADING",
        "the backend was asleep and is starting; retry after Retry-After seconds",
    ),
    (
        503,
        "NOTIFY_UNAVAILABLE",
        "notifications cannot be served right now (their store is unreachable); retry",
    ),
    (
        503,
        "CONNECTION_LIMIT",
        "the gateway is at its connection limit; the connection is closed, retry after Retry-After",
    ),
    (
        502,
        "UPSTREAM_ERROR",
        "the backend failed",
    ),
    (
        504,
        "UPSTREAM_TIMEOUT",
        "the backend did not answer within the API's deadline",
    ),
];

/// What a merchant should do about an error `code` of [`ERROR_CODES`] (the portal's Errors
/// page; docs/PROTOCOL.md, "The error envelope"). `None` for a code it does not know.
pub fn what_to_do(code: &str) -> Option<&'static str> {
    Some(match code {
        "BAD_REQUEST" => "Fix the request: the message names what is wrong. Do not retry it unchanged.",
        "SIGNATURE_MISSING" => "Send all four X-Portico-* headers (see Signing).",
        "SIGNATURE_INVALID" => "Check the app key and secret, and rebuild the string-to-sign from exactly what you send: the path as sent, the canonical query, the body bytes (see Signing).",
        "SIGNATURE_EXPIRED" => "Sync your clock with NTP and sign with the current time in milliseconds; retry with a new timestamp and nonce.",
        "NONCE_REPLAYED" => "Use a fresh random nonce for every call, retries included.",
        "APP_UNKNOWN" => "Nothing: no longer sent. An unknown app key answers SIGNATURE_INVALID.",
        "IP_BLOCKED" => "Call from an allowed address; ask your operator which addresses are allowed.",
        "APP_FORBIDDEN" => "Your app is not granted this API (or topic): ask your operator for the grant.",
        "APP_DISABLED" => "Your app is disabled: contact your operator.",
        "API_NOT_FOUND" => "Check the method and path (or the router's method=) against the catalogue.",
        "BODY_TOO_LARGE" => "Send a smaller body (the API page gives its limit).",
        "URI_TOO_LONG" => "Shorten the path and query (at most 8 KiB); send large inputs in the body.",
        "RATE_LIMITED" => "Wait Retry-After seconds, then retry with a new nonce and timestamp; spread your calls.",
        "API_DEGRADED" => "The API is paused for now: retry later with backoff; the message says more.",
        "CIRCUIT_OPEN" => "Wait Retry-After seconds, then retry with a new nonce and timestamp.",
        "BULKHEAD_FULL" => "Retry shortly with backoff (a new nonce and timestamp).",
        "NO_HEALTHY_UPSTREAM" => "Retry with backoff; quote the request id if it lasts.",
        "BACKEND_LOADING" => "Wait Retry-After seconds, then retry with a new nonce and timestamp.",
        "NOTIFY_UNAVAILABLE" => "Reconnect or retry with backoff.",
        "CONNECTION_LIMIT" => "Reconnect after Retry-After seconds.",
        "UPSTREAM_ERROR" => "Retry with backoff if the call is safe to repeat; quote the request id if it lasts.",
        "UPSTREAM_TIMEOUT" => "Retry with backoff if the call is safe to repeat; quote the request id if it lasts.",
        _ => return None,
    })
}

/// A gRPC backend's non-OK statuses as the gateway answers them (docs/PROTOCOL.md): status
/// name, HTTP status, in code order. The gateway's own mapping
/// ([`portico_grpc_dynamic::code_name_and_status`]), so the document cannot drift from it.
pub fn grpc_codes() -> impl Iterator<Item = (&'static str, u16)> {
    (1..=16).map(|n| portico_grpc_dynamic::code_name_and_status(tonic::Code::from_i32(n)))
}

/// Who a document is for.
#[derive(Debug, Clone, Copy)]
pub enum Audience<'a> {
    /// Anyone: `GET /portal/openapi.json`.
    Public,
    /// One app, by its key: `GET /portal/apps/<key>/openapi.json`.
    App(&'a str, &'a v1::App),
}

/// Where merchants send calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Servers {
    /// The live gateways' base URLs (`http://host:port`).
    pub live: Vec<String>,
    /// Their sandbox listeners' base URLs.
    pub sandbox: Vec<String>,
}

/// The document of `apis` (all of `snapshot`), for `audience`.
pub fn document(
    snapshot: &Snapshot,
    apis: &[Arc<Api>],
    servers: &Servers,
    audience: Audience<'_>,
) -> Value {
    let mut builder = Builder {
        schemas: Schemas::default(),
        pools: HashMap::new(),
        snapshot,
    };
    let base_url = servers
        .live
        .first()
        .cloned()
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let app_key = match audience {
        Audience::App(key, _) => key.to_owned(),
        Audience::Public => "your-app-key".to_owned(),
    };
    let described: Vec<Described> = apis.iter().filter_map(|a| builder.describe(a)).collect();
    let root_for_examples =
        |schemas: &BTreeMap<String, Value>| json!({"components": {"schemas": schemas}});
    // Schemas are complete once every API is described; examples resolve against them.
    let mut components: BTreeMap<String, Value> = builder.schemas.into_components();
    for d in &described {
        for (name, schema) in &d.extra_components {
            components.insert(name.clone(), schema.clone());
        }
    }
    components.insert("Error".to_owned(), error_schema());
    let root = root_for_examples(&components);

    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut router_bodies = Vec::new();
    let mut router_examples = Map::new();
    let mut router_ids = Vec::new();
    for d in &described {
        for op in &d.operations {
            let op_value = op.render(d, &root, &base_url, &app_key);
            paths
                .entry(op.openapi_path.clone())
                .or_default()
                .insert(op.method.to_ascii_lowercase(), op_value);
        }
        if let Some(router) = &d.router {
            router_ids.push(d.api.id.clone());
            let mut body = router.clone();
            if let Some(obj) = body.as_object_mut() {
                obj.insert(
                    "title".into(),
                    json!(format!("{} (router style)", d.api.id)),
                );
            }
            router_bodies.push(body);
            if let Some(ex) = example(router, &root, None) {
                router_examples.insert(
                    d.api.id.clone(),
                    json!({"summary": format!("POST /router?method={}", d.api.id), "value": ex}),
                );
            }
        }
    }
    if !router_ids.is_empty() {
        paths.insert(
            "/router".to_owned(),
            router_operation(&router_ids, router_bodies, router_examples)
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
    }

    let (title, intro) = match audience {
        Audience::Public => (
            "Portico open APIs".to_owned(),
            "Every published API that merchants can call: the public ones (no signature) and \
             those granted to at least one app."
                .to_owned(),
        ),
        Audience::App(key, app) => {
            let limits: Vec<String> = app
                .rate_limits
                .iter()
                .map(|l| format!("{} per {}", l.limit, per_word(l.per)))
                .collect();
            (
                format!("Portico open APIs for app {key}"),
                format!(
                    "The APIs app `{key}` can call: those granted to it and the public ones.{}",
                    if limits.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " The app's own rate limit, across all its calls: {}.",
                            limits.join(", ")
                        )
                    }
                ),
            )
        }
    };
    let mut server_list: Vec<Value> = servers
        .live
        .iter()
        .map(|u| json!({"url": u, "description": "gateway (live)"}))
        .collect();
    server_list.extend(servers.sandbox.iter().map(
        |u| json!({"url": u, "description": "gateway sandbox listener (drafts and sandbox apps)"}),
    ));
    if server_list.is_empty() {
        server_list
            .push(json!({"url": base_url, "description": "gateway (no live node registered now)"}));
    }
    let mut doc = json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": title,
            "version": format!("config {}", if snapshot.version.digest.is_empty() { "empty" } else { &snapshot.version.digest }),
            "description": format!(
                "{intro}\n\nSigned APIs need the four `X-Portico-*` headers of the portal's \
                 Signing page (`/portal/#/signing`). Every API also \
                 answers the router style, `POST /router?method=<api id>` with the whole request as \
                 the JSON body, where its backend allows. Errors the gateway makes itself come as \
                 `{{\"code\", \"message\", \"request_id\"}}`; branch on the status and `code` \
                 (every code, with what to do, on the portal's Errors page, `/portal/#/errors`). \
                 Notifications (events pushed to your app) are under `/notify/v1/` and, for apps \
                 that receive callbacks, the `notification` webhook: see the portal's \
                 Notifications page (`/portal/#/notifications`)."
            ),
        },
        "servers": server_list,
        "tags": tags(&described),
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": security_schemes(),
            "responses": error_responses(),
            "parameters": {
                "RequestId": {
                    "name": "X-Portico-Request-Id",
                    "in": "header",
                    "required": false,
                    "description": "Your own request id (1–64 of A-Z a-z 0-9 . _ -), kept and returned; the gateway makes one otherwise.",
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
                },
            },
        },
        "x-portico-error-codes": ERROR_CODES
            .iter()
            .map(|(status, code, meaning)| json!({"status": status, "code": code, "meaning": meaning, "what_to_do": what_to_do(code)}))
            .collect::<Vec<_>>(),
        "x-portico-grpc-codes": grpc_codes_table(),
    });
    if let Audience::App(key, _) = audience {
        doc["x-portico-app"] = json!(key);
    }
    add_notifications(&mut doc, snapshot, audience);
    doc
}

/// The notification endpoints (docs/PROTOCOL.md, "Notifications") as operations under
/// `/notify/v1/`, callbacks as the `notification` webhook, and `x-portico-notifications`:
/// for an app's document the topics granted to it and how it receives them; for the public
/// document how an app lists its topics.
fn add_notifications(doc: &mut Value, snapshot: &Snapshot, audience: Audience<'_>) {
    let error = |name: &str| json!({"$ref": format!("#/components/responses/{name}")});
    let signed_get = |summary: &str, description: &str, ok: Value| {
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
    };
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
    paths["/notify/v1/ack"] = json!({"post": {
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
        "responses": ack_responses,
    }});
    doc["components"]["schemas"]["NotificationEvent"] = json!({
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
    });
    let header = |name: &str, description: &str| json!({"name": name, "in": "header", "required": true, "description": description, "schema": {"type": "string"}});
    doc["webhooks"] = json!({"notification": {"post": {
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
    }}});
    if let Some(tags) = doc["tags"].as_array_mut() {
        tags.push(json!({"name": "notifications", "description": "Events pushed to your app: a stream, a WebSocket or callbacks."}));
    }
    doc["x-portico-notifications"] = match audience {
        Audience::App(key, app) => json!({
            "topics": snapshot.granted_topics(key),
            "delivery": if app.callback_url.is_some() { "callback" } else { "stream or websocket" },
        }),
        Audience::Public => json!({
            "topics": null,
            "how_to_list": "Sign in with your app key and secret on the portal's My app page, or GET /portal/apps/<your app key>/openapi.json signed as any call: its x-portico-notifications.topics lists the topics granted to your app.",
        }),
    };
}

fn per_word(per: v1::Per) -> &'static str {
    match per {
        v1::Per::Second => "second",
        v1::Per::Minute => "minute",
    }
}

/// The gRPC status names and their HTTP statuses.
fn grpc_codes_table() -> Value {
    grpc_codes()
        .map(|(name, status)| json!({"code": name, "status": status}))
        .collect()
}

/// One tag per API-id family (the id up to its last dot: `grpc.order`, `order`).
fn tags(described: &[Described]) -> Vec<Value> {
    let mut names: Vec<String> = described.iter().map(|d| tag_of(&d.api.id)).collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|n| json!({"name": n})).collect()
}

fn tag_of(id: &str) -> String {
    match id.rsplit_once('.') {
        Some((family, _)) => family.to_owned(),
        None => id.to_owned(),
    }
}

struct Builder<'s> {
    schemas: Schemas,
    pools: HashMap<String, Option<DescriptorPool>>,
    snapshot: &'s Snapshot,
}

/// An API, described.
struct Described {
    api: Arc<Api>,
    /// Whether a gRPC method backs it (its name is never shown).
    grpc: bool,
    operations: Vec<Operation>,
    /// The router-style body, when the API can be called that way.
    router: Option<Value>,
    /// The router-style answer.
    router_reply: Option<Value>,
    /// Component schemas of its own (an HTTP API's attached schemas).
    extra_components: Vec<(String, Value)>,
}

/// One binding as an operation.
struct Operation {
    binding: usize,
    method: String,
    openapi_path: String,
    template: PathTemplate,
    parameters: Vec<Value>,
    /// Path variable → example value (decoded).
    path_examples: Vec<(String, String)>,
    body: Option<Value>,
    body_required: bool,
    reply: Value,
    grpc: bool,
}

impl Builder<'_> {
    fn pool(&mut self, sha: &str) -> Option<DescriptorPool> {
        if let Some(p) = self.pools.get(sha) {
            return p.clone();
        }
        let pool = self
            .snapshot
            .descriptors
            .get(sha)
            .and_then(|bytes| DescriptorPool::decode(bytes.as_slice()).ok());
        self.pools.insert(sha.to_owned(), pool.clone());
        pool
    }

    fn method(&mut self, api: &Api) -> Option<MethodDescriptor> {
        let BackendKind::Grpc {
            service,
            method,
            descriptor,
        } = &api.backend
        else {
            return None;
        };
        let pool = self.pool(descriptor)?;
        let service = pool.get_service_by_name(service)?;
        let found = service.methods().find(|m| m.name() == method);
        found
    }

    fn describe(&mut self, api: &Arc<Api>) -> Option<Described> {
        match &api.backend {
            BackendKind::Grpc { .. } => {
                let md = self.method(api)?;
                // What the gateway runs: a binding it cannot plan is not served, so not shown.
                MethodPlan::for_api(&md, api).ok()?;
                let input = md.input();
                let output = md.output();
                let mut operations = Vec::new();
                for (i, b) in api.bindings.iter().enumerate() {
                    operations.push(self.grpc_operation(api, i, b, &input, &output));
                }
                let router = Some(self.schemas.message(&input));
                let router_reply = Some(self.schemas.message(&output));
                Some(Described {
                    api: api.clone(),
                    grpc: true,
                    operations,
                    router,
                    router_reply,
                    extra_components: Vec::new(),
                })
            }
            BackendKind::Http { path } => {
                let def = &api.definition;
                let mut extra = Vec::new();
                let request = def.request_schema.as_ref().map(|s| {
                    let name = format!("{}.Request", api.id);
                    extra.push((name.clone(), rebase_refs(s, &name)));
                    json!({"$ref": format!("{COMPONENTS}{name}")})
                });
                let reply = match def.response_schema.as_ref() {
                    Some(s) => {
                        let name = format!("{}.Response", api.id);
                        extra.push((name.clone(), rebase_refs(s, &name)));
                        json!({"$ref": format!("{COMPONENTS}{name}")})
                    }
                    None => {
                        json!({"description": "The backend's answer (its owner has not described it)."})
                    }
                };
                let operations = api
                    .bindings
                    .iter()
                    .enumerate()
                    .map(|(i, b)| http_operation(i, b, request.clone(), reply.clone()))
                    .collect();
                let router_ok = match path {
                    None => true,
                    Some(p) => Rewrite::parse(p).is_ok_and(|r| r.fields().next().is_none()),
                };
                Some(Described {
                    api: api.clone(),
                    grpc: false,
                    operations,
                    router: router_ok.then(|| {
                        request.clone().unwrap_or_else(
                            || json!({"description": "Passed on to the backend as it is."}),
                        )
                    }),
                    router_reply: router_ok.then(|| reply.clone()),
                    extra_components: extra,
                })
            }
        }
    }

    fn grpc_operation(
        &mut self,
        api: &Api,
        index: usize,
        binding: &portico_control::Binding,
        input: &MessageDescriptor,
        output: &MessageDescriptor,
    ) -> Operation {
        let template = &binding.template;
        let (openapi_path, wildcards) = openapi_path(template);
        let mut parameters = Vec::new();
        let mut path_examples = Vec::new();
        let mut bound = Vec::new();
        for v in template.variables() {
            let leaf = fieldpath::resolve(input, &v.field_path, Syntax::Rule).ok();
            if let Some(l) = &leaf {
                bound.push(l.proto_path());
            }
            let single = is_single(template, v);
            let (schema, value) = match (&leaf, single) {
                (Some(l), true) => {
                    let kind = l.leaf().kind();
                    let schema = text_schema(&kind).unwrap_or_else(|| json!({"type": "string"}));
                    let value = text_example(&schema, &v.field_path);
                    (schema, value)
                }
                _ => multi_segment(template, v),
            };
            parameters.push(path_parameter(
                &v.field_path,
                schema,
                &value,
                leaf.map(|l| proto_type_name(&l.leaf().kind())),
            ));
            path_examples.push((v.field_path.clone(), value));
        }
        parameters.extend(wildcards.iter().map(wildcard_parameter));
        let (body, body_field, star) = match binding.body.as_deref().map(str::trim) {
            None | Some("") => (None, None, false),
            Some("*") => (Some(self.schemas.message(input)), None, true),
            Some(name) => match fieldpath::lookup(input, name, Syntax::Request) {
                Some(fd) => (
                    Some(self.schemas.field(&fd)),
                    Some(fd.name().to_owned()),
                    false,
                ),
                None => (None, None, false),
            },
        };
        for q in query_parameters(input, &bound, body_field.as_deref(), star) {
            let mut p = json!({
                "name": q.name,
                "in": "query",
                "required": false,
                "description": format!("{} Proto field `{}`.", q.description, q.proto_path),
                "schema": q.schema,
            });
            if q.style == "deepObject" {
                p["style"] = json!("deepObject");
                p["explode"] = json!(true);
            } else if p["schema"]["type"] == "array" {
                p["style"] = json!("form");
                p["explode"] = json!(true);
            }
            parameters.push(p);
        }
        let reply = match binding.response_body.as_deref().map(str::trim) {
            None | Some("") => self.schemas.message(output),
            Some(name) => match fieldpath::lookup(output, name, Syntax::Request) {
                Some(fd) => self.schemas.field(&fd),
                None => self.schemas.message(output),
            },
        };
        let _ = api;
        Operation {
            binding: index,
            method: binding.method.clone(),
            openapi_path,
            template: template.clone(),
            parameters,
            path_examples,
            body,
            body_required: false,
            reply,
            grpc: true,
        }
    }
}

/// An HTTP-backed API's binding: path variables as strings, the attached schemas.
fn http_operation(
    index: usize,
    binding: &portico_control::Binding,
    request: Option<Value>,
    reply: Value,
) -> Operation {
    let template = &binding.template;
    let (openapi_path, wildcards) = openapi_path(template);
    let mut parameters = Vec::new();
    let mut path_examples = Vec::new();
    for v in template.variables() {
        let (schema, value) = if is_single(template, v) {
            let schema = json!({"type": "string"});
            let value = text_example(&schema, &v.field_path);
            (schema, value)
        } else {
            multi_segment(template, v)
        };
        parameters.push(path_parameter(&v.field_path, schema, &value, None));
        path_examples.push((v.field_path.clone(), value));
    }
    parameters.extend(wildcards.iter().map(wildcard_parameter));
    let takes_body =
        matches!(binding.method.as_str(), "POST" | "PUT" | "PATCH") || binding.body.is_some();
    let body = match request {
        Some(schema) if takes_body || binding.body.is_some() => Some(schema),
        Some(_) => None,
        None if takes_body => Some(
            json!({"description": "Any JSON the backend takes (its owner has not described it)."}),
        ),
        None => None,
    };
    let body_required = body.as_ref().is_some_and(|b| b.get("$ref").is_some());
    Operation {
        binding: index,
        method: binding.method.clone(),
        openapi_path,
        template: template.clone(),
        parameters,
        path_examples,
        body,
        body_required,
        reply,
        grpc: false,
    }
}

/// Rewrites the local `$ref`s (`#/$defs/A`) of a schema placed at
/// `#/components/schemas/<name>` so they still point inside it.
fn rebase_refs(schema: &Value, name: &str) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("$ref" | "$dynamicRef", Value::String(r)) if r.starts_with('#') => {
                            Value::String(format!("{COMPONENTS}{name}{}", &r[1..]))
                        }
                        _ => rebase_refs(v, name),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| rebase_refs(v, name)).collect()),
        other => other.clone(),
    }
}

/// Whether variable `v` covers exactly one `*` segment (a plain `{x}`).
fn is_single(template: &PathTemplate, v: &portico_control::template::Variable) -> bool {
    v.end == v.start + 1 && template.segments().get(v.start) == Some(&Segment::Single)
}

/// A multi-segment variable (`{name=shops/*/products/*}`, `{path=**}`): a pattern and an
/// example that fits it (`shops/s1/products/p1`).
fn multi_segment(
    template: &PathTemplate,
    v: &portico_control::template::Variable,
) -> (Value, String) {
    let segs = template.segments().get(v.start..v.end).unwrap_or(&[]);
    let mut pattern = Vec::new();
    let mut example = Vec::new();
    let mut previous = String::new();
    for seg in segs {
        match seg {
            Segment::Literal(l) => {
                pattern.push(regex_escape(l));
                example.push(l.clone());
                previous = l.clone();
            }
            Segment::Single => {
                pattern.push("[^/]+".to_owned());
                let initial = previous.chars().next().unwrap_or('x');
                example.push(format!("{initial}1"));
            }
            Segment::Multi => {
                pattern.push(".*".to_owned());
                example.push("a/b.txt".to_owned());
            }
        }
    }
    // A trailing `**` variable covers every remaining segment (possibly none).
    if segs.is_empty() && template.segments().last() == Some(&Segment::Multi) {
        pattern.push(".*".to_owned());
        example.push("a/b.txt".to_owned());
    }
    let schema = json!({
        "type": "string",
        "pattern": format!("^{}$", pattern.join("/")),
    });
    (schema, example.join("/"))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The example text of a single-segment value of `schema`.
fn text_example(schema: &Value, field_path: &str) -> String {
    let root = json!({});
    match example(schema, &root, Some(field_path)) {
        Some(Value::String(s)) if s == "example" && id_like(field_path) => "42".to_owned(),
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => "42".to_owned(),
        Some(v) => v.to_string(),
    }
}

fn path_parameter(name: &str, schema: Value, example: &str, proto_type: Option<String>) -> Value {
    let multi = schema
        .get("pattern")
        .is_some_and(|p| p.as_str().is_some_and(|p| p.contains('/')));
    let mut description = match &proto_type {
        Some(t) => format!("Path variable: field `{name}` ({t})."),
        None => format!("Path variable `{name}`."),
    };
    if multi {
        description.push_str(" It spans several path segments: send its `/` as they are.");
    }
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": description,
        "schema": schema,
        "example": example,
    })
}

fn wildcard_parameter(name: &String) -> Value {
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": "Any path segment(s) here (a wildcard of the path template; not passed to the backend).",
        "schema": {"type": "string"},
        "example": "x",
    })
}

/// The OpenAPI path of a template (`/v1/{name=shops/*}/x` → `/v1/{name}/x`, bare `*` and `**`
/// → `{wildcard1}`, ...), and the wildcard parameter names.
fn openapi_path(template: &PathTemplate) -> (String, Vec<String>) {
    let segs = template.segments();
    let mut out = String::new();
    let mut wildcards = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        out.push('/');
        if let Some(v) = template.variables().iter().find(|v| v.start == i) {
            out.push_str(&format!("{{{}}}", v.field_path));
            i = v.end.max(i + 1);
            continue;
        }
        match &segs[i] {
            Segment::Literal(l) => out.push_str(&encode_segment(l)),
            Segment::Single | Segment::Multi => {
                let name = format!("wildcard{}", wildcards.len() + 1);
                out.push_str(&format!("{{{name}}}"));
                wildcards.push(name);
            }
        }
        i += 1;
    }
    // A `{x=**}` variable at the end that matched no segment in the list still shows.
    for v in template.variables() {
        if v.start >= segs.len() {
            out.push_str(&format!("/{{{}}}", v.field_path));
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    if let Some(verb) = template.verb() {
        out.push(':');
        out.push_str(&encode_segment(verb));
    }
    (out, wildcards)
}

/// The example path of a template, its variables filled from `values` (decoded).
fn example_path(template: &PathTemplate, values: &[(String, String)]) -> String {
    let segs = template.segments();
    let mut out = String::new();
    let mut i = 0;
    let value_of = |name: &str| {
        values
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "x".to_owned())
    };
    while i < segs.len() {
        out.push('/');
        if let Some(v) = template.variables().iter().find(|v| v.start == i) {
            let value = value_of(&v.field_path);
            out.push_str(&if v.multi {
                encode_multi(&value)
            } else {
                encode_segment(&value)
            });
            i = v.end.max(i + 1);
            continue;
        }
        match &segs[i] {
            Segment::Literal(l) => out.push_str(&encode_segment(l)),
            Segment::Single | Segment::Multi => out.push('x'),
        }
        i += 1;
    }
    for v in template.variables() {
        if v.start >= segs.len() {
            out.push('/');
            out.push_str(&encode_multi(&value_of(&v.field_path)));
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    if let Some(verb) = template.verb() {
        out.push(':');
        out.push_str(&encode_segment(verb));
    }
    out
}

impl Operation {
    fn render(&self, d: &Described, root: &Value, base_url: &str, app_key: &str) -> Value {
        let api = &d.api;
        let signed = api.auth == v1::AuthMode::Signature;
        let mut parameters = self.parameters.clone();
        parameters.push(json!({"$ref": "#/components/parameters/RequestId"}));
        let path = example_path(&self.template, &self.path_examples);
        let body_example = self.body.as_ref().and_then(|b| example(b, root, None));
        let body_text = body_example
            .as_ref()
            .map(|v| serde_json::to_string(v).unwrap_or_default())
            .unwrap_or_default();
        let request = snippets::Request {
            api_id: api.id.clone(),
            method: self.method.clone(),
            path: path.clone(),
            query: String::new(),
            body: body_text.clone(),
            signed,
        };
        let samples = snippets::all(&request, base_url, app_key);
        let reply_example = example(&self.reply, root, None);

        let mut responses = Map::new();
        let success_status = if self.grpc { "200" } else { "2XX" };
        let mut success = json!({
            "description": if self.grpc {
                "The reply, in proto3 JSON.".to_owned()
            } else {
                "The backend's answer, with the status it chose.".to_owned()
            },
            "headers": {"X-Portico-Request-Id": {"description": "The request id (yours, or one the gateway made).", "schema": {"type": "string"}}},
            "content": {"application/json": {"schema": self.reply.clone()}},
        });
        if let Some(ex) = &reply_example {
            success["content"]["application/json"]["example"] = ex.clone();
        }
        responses.insert(success_status.to_owned(), success);
        for (status, name) in error_statuses(signed, self.grpc) {
            responses.insert(
                status.to_string(),
                json!({"$ref": format!("#/components/responses/{name}")}),
            );
        }

        let policy = &api.policy;
        let limits: Vec<Value> = policy
            .rate_limits
            .iter()
            .map(|r| {
                json!({
                    "key": r.key.parts(),
                    "limit": r.limit,
                    "per": per_word(r.per),
                    "burst": r.burst.unwrap_or(r.limit),
                })
            })
            .collect();
        let mut description = String::new();
        if let Some(text) = &api.definition.description {
            description.push_str(text);
            description.push_str("\n\n");
        }
        description.push_str(&format!(
            "API `{}` (version {}), {}. {}",
            api.id,
            api.version,
            // Never the gRPC service or method: the backend team's internal names.
            if d.grpc {
                "backed by gRPC, transcoded by the gateway"
            } else {
                "backed by HTTP"
            },
            if signed {
                "Signed: send the four X-Portico-* headers."
            } else {
                "Public: no signature needed."
            }
        ));
        if !limits.is_empty() {
            let words: Vec<String> = policy
                .rate_limits
                .iter()
                .map(|r| {
                    format!(
                        "{} per {} per {}",
                        r.limit,
                        per_word(r.per),
                        r.key.parts().join("+")
                    )
                })
                .collect();
            description.push_str(&format!(" Rate limits: {}.", words.join("; ")));
        }
        if self.binding > 0 {
            description.push_str(&format!(
                " Another binding of the same API (binding {}).",
                self.binding
            ));
        }
        let mut op = json!({
            "operationId": if self.binding == 0 { api.id.clone() } else { format!("{}.binding{}", api.id, self.binding) },
            "summary": api.definition.description.clone().unwrap_or_else(|| api.id.clone()),
            "description": description,
            "tags": [tag_of(&api.id)],
            "parameters": parameters,
            "responses": responses,
            "security": if signed { security_requirement() } else { json!([]) },
            "x-portico-api": api.id,
            "x-portico-binding": self.binding,
            "x-portico-auth": if signed { "signature" } else { "none" },
            "x-portico-backend": if self.grpc { "grpc" } else { "http" },
            "x-portico-timeout-ms": api.timeout_ms,
            "x-portico-max-body-bytes": policy.max_body_bytes.unwrap_or(1_048_576),
            "x-portico-rate-limits": limits,
            "x-portico-example": {
                "method": self.method,
                "path": path,
                "query": "",
                "body": body_text,
                "response": reply_example,
            },
            "x-codeSamples": snippets::code_samples(&samples),
        });
        if let Some(body) = &self.body {
            let mut content = json!({"schema": body});
            if let Some(ex) = &body_example {
                content["example"] = ex.clone();
            }
            op["requestBody"] = json!({
                "required": self.body_required,
                "description": if self.grpc && self.template.variables().is_empty() {
                    "The request, in proto3 JSON.".to_owned()
                } else if self.grpc {
                    "The request, in proto3 JSON; the fields bound by the path are taken from the path.".to_owned()
                } else {
                    "The JSON body, passed on to the backend.".to_owned()
                },
                "content": {"application/json": content},
            });
        }
        if self.binding == 0 {
            if let Some(router) = &d.router {
                let ex = example(router, root, None)
                    .map(|v| serde_json::to_string(&v).unwrap_or_default())
                    .unwrap_or_default();
                op["x-portico-router"] = json!({
                    "method": "POST",
                    "path": "/router",
                    "query": format!("method={}", api.id),
                    "body": ex,
                    "reply": d.router_reply,
                });
            }
        }
        op
    }
}

/// The shared error responses: status, name.
const ERROR_RESPONSE_NAMES: [(u16, &str); 13] = [
    (400, "BadRequest"),
    (401, "Unauthorized"),
    (403, "Forbidden"),
    (404, "NotFound"),
    (409, "Conflict"),
    (413, "PayloadTooLarge"),
    (414, "UriTooLong"),
    (429, "TooManyRequests"),
    (500, "InternalError"),
    (501, "NotImplemented"),
    (502, "BadGateway"),
    (503, "ServiceUnavailable"),
    (504, "GatewayTimeout"),
];

/// The error statuses an operation may answer, with their shared response names: 401 when
/// it is signed or gRPC-backed (a gRPC backend may answer `UNAUTHENTICATED`), 409, 500 and
/// 501 only from a gRPC backend.
fn error_statuses(signed: bool, grpc: bool) -> Vec<(u16, &'static str)> {
    ERROR_RESPONSE_NAMES
        .into_iter()
        .filter(|(status, _)| match status {
            401 => signed || grpc,
            409 | 500 | 501 => grpc,
            _ => true,
        })
        .collect()
}

/// The shared error responses: per status, the envelope with the codes it can carry.
fn error_responses() -> Value {
    let mut out = Map::new();
    for (status, name) in ERROR_RESPONSE_NAMES {
        let gateway: Vec<(&str, &str)> = ERROR_CODES
            .iter()
            .filter(|(s, _, _)| *s == status)
            .map(|(_, c, m)| (*c, *m))
            .collect();
        let grpc: Vec<&str> = grpc_codes()
            .filter(|(_, s)| *s == status)
            .map(|(c, _)| c)
            .collect();
        let mut lines: Vec<String> = gateway
            .iter()
            .map(|(c, m)| format!("- `{c}`: {m}"))
            .collect();
        if !grpc.is_empty() {
            lines.push(format!(
                "- from a gRPC backend: {} (the backend's message as `message`)",
                grpc.iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut codes: Vec<&str> = gateway.iter().map(|(c, _)| *c).collect();
        codes.extend(grpc.iter().copied());
        let mut examples = Map::new();
        for (code, meaning) in &gateway {
            examples.insert(
                (*code).to_owned(),
                json!({"summary": meaning, "value": {"code": code, "message": meaning, "request_id": "9f3c2a7e5b1d4c08"}}),
            );
        }
        if let Some(code) = grpc.first() {
            examples.insert(
                (*code).to_owned(),
                json!({"summary": "a gRPC backend's status", "value": {"code": code, "message": "the backend's message", "request_id": "9f3c2a7e5b1d4c08"}}),
            );
        }
        let mut response = json!({
            "description": format!("{status}:\n{}", lines.join("\n")),
            "headers": {"X-Portico-Request-Id": {"description": "The request id; quote it when you report a problem.", "schema": {"type": "string"}}},
            "content": {"application/json": {
                "schema": {"allOf": [{"$ref": "#/components/schemas/Error"}, {"properties": {"code": {"enum": codes}}}]},
                "examples": examples,
            }},
        });
        if status == 429 || status == 503 {
            response["headers"]["Retry-After"] = json!({
                "description": "Seconds to wait before retrying (with a new nonce and timestamp).",
                "schema": {"type": "integer"},
            });
        }
        out.insert(name.to_owned(), response);
    }
    Value::Object(out)
}

/// The error envelope (docs/PROTOCOL.md, "The error envelope"; the portal's Errors page).
fn error_schema() -> Value {
    json!({
        "title": "Error",
        "type": "object",
        "description": "Every answer the gateway makes itself (rather than the backend). Branch on the HTTP status and `code`; `message` is for people and may change.",
        "required": ["code", "message", "request_id"],
        "properties": {
            "code": {"type": "string", "description": "A code of the portal's Errors page, or a gRPC status name for a gRPC-backed API."},
            "message": {"type": "string"},
            "request_id": {"type": "string"},
        },
    })
}

/// The four signature headers, each a scheme; a signed operation needs them all.
fn security_schemes() -> Value {
    let algorithm = "The signature is lowercase hex HMAC-SHA256 (key: the app's secret) of the \
        string-to-sign: seven lines joined by \\n, no \\n at the end — (1) the method, upper \
        case; (2) the path exactly as sent, without the query; (3) the canonical query: split \
        the raw query on &, skip empty parts, split each at the first = (none: empty value), \
        percent-decode name and value to bytes (+ stays +), re-encode keeping only A-Z a-z \
        0-9 - _ . ~ (every other byte as %XX, upper-case hex), sort by name then value, join \
        as name=value with & (an empty line without a query); (4) the app key; (5) the \
        timestamp as sent; (6) the nonce; (7) lowercase hex SHA-256 of the body bytes as \
        sent (of the empty string without a body). The signing guide has two worked examples.";
    json!({
        "AppKey": {"type": "apiKey", "in": "header", "name": HEADER_APP_KEY,
            "description": "Your app key, e.g. merchant-1."},
        "Timestamp": {"type": "apiKey", "in": "header", "name": HEADER_TIMESTAMP,
            "description": "The current time in Unix epoch milliseconds; at most 300 s from the gateway's clock (SIGNATURE_EXPIRED)."},
        "Nonce": {"type": "apiKey", "in": "header", "name": HEADER_NONCE,
            "description": "A fresh random string of 8–64 of A-Z a-z 0-9 _ -, never reused within 300 s (NONCE_REPLAYED)."},
        "Signature": {"type": "apiKey", "in": "header", "name": HEADER_SIGNATURE,
            "description": algorithm},
    })
}

fn security_requirement() -> Value {
    json!([{"AppKey": [], "Timestamp": [], "Nonce": [], "Signature": []}])
}

/// The one `POST /router` operation: `method=<api id>` names the API; the body is that
/// API's whole request.
fn router_operation(ids: &[String], bodies: Vec<Value>, examples: Map<String, Value>) -> Value {
    let mut statuses = Map::new();
    statuses.insert(
        "200".to_owned(),
        json!({"description": "The API's answer, as on its RESTful path (a gRPC API answers its whole reply).",
               "content": {"application/json": {"schema": {}}}}),
    );
    for (status, name) in error_statuses(true, true) {
        statuses.insert(
            status.to_string(),
            json!({"$ref": format!("#/components/responses/{name}")}),
        );
    }
    json!({"post": {
        "operationId": "router",
        "summary": "Call any API in the router style",
        "description": "The open-platform router style: `POST /router?method=<api id>` with the whole \
            request as the JSON body. For a gRPC-backed API the body is the whole request message \
            (what the RESTful form takes from the path and query are fields of it). For an \
            HTTP-backed API the body is passed on as it is; only APIs whose backend path needs no \
            path variable are listed here. Signed like any call (the path line is /router and the \
            canonical query includes method=<api id>); public APIs need no signature.",
        "tags": ["router"],
        "parameters": [
            {"name": "method", "in": "query", "required": true, "description": "The API's id.",
             "schema": {"type": "string", "enum": ids}},
            {"$ref": "#/components/parameters/RequestId"},
        ],
        "requestBody": {"required": false, "content": {"application/json": {
            "schema": {"anyOf": bodies},
            "examples": examples,
        }}},
        "responses": statuses,
        "security": [{"AppKey": [], "Timestamp": [], "Nonce": [], "Signature": []}, {}],
    }})
}

#[cfg(test)]
mod tests {

    /// The rows `| ... |` of the table under `heading` in docs/PROTOCOL.md, split in cells.
    fn protocol_table(heading: &str) -> Vec<Vec<String>> {
        let doc = include_str!("../../../docs/PROTOCOL.md");
        let start = doc
            .find(heading)
            .expect("the heading is in docs/PROTOCOL.md");
        doc[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                l.trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn an_operation_names_the_error_statuses_it_can_answer() {
        let statuses = |signed, grpc| -> Vec<u16> {
            error_statuses(signed, grpc)
                .iter()
                .map(|(s, _)| *s)
                .collect()
        };
        assert_eq!(
            statuses(false, false),
            [400, 403, 404, 413, 414, 429, 502, 503, 504]
        );
        assert_eq!(
            statuses(true, false),
            [400, 401, 403, 404, 413, 414, 429, 502, 503, 504]
        );
        assert_eq!(
            statuses(false, true),
            [400, 401, 403, 404, 409, 413, 414, 429, 500, 501, 502, 503, 504]
        );
        assert_eq!(statuses(true, true), statuses(false, true));
    }

    #[test]
    fn every_error_code_says_what_to_do() {
        for (_, code, _) in ERROR_CODES {
            let advice = what_to_do(code).unwrap_or_else(|| panic!("{code}: no advice"));
            assert!(advice.ends_with('.'), "{code}: {advice}");
        }
    }

    #[test]
    fn error_codes_are_those_of_the_protocol() {
        let mut documented: Vec<(u16, String)> = protocol_table("### The error envelope")
            .iter()
            .map(|r| (r[0].parse().unwrap(), r[1].trim_matches('`').to_owned()))
            .collect();
        let mut ours: Vec<(u16, String)> = ERROR_CODES
            .iter()
            .map(|(s, c, _)| (*s, (*c).to_owned()))
            .collect();
        documented.sort();
        ours.sort();
        assert_eq!(
            ours, documented,
            "ERROR_CODES and docs/PROTOCOL.md's envelope table differ"
        );

        let table = protocol_table("| gRPC status | HTTP |");
        let mut listed = 0;
        for row in &table {
            let status: u16 = row[1].parse().unwrap();
            for code in row[0].split(", ").filter(|c| c.starts_with('`')) {
                let code = code.trim_matches('`');
                listed += 1;
                assert!(
                    grpc_codes().any(|c| c == (code, status)),
                    "{code} → {status} of docs/PROTOCOL.md is not what the gateway answers"
                );
            }
        }
        assert!(
            listed >= 9,
            "only {listed} gRPC codes read from docs/PROTOCOL.md"
        );
        // Every shared error response an operation can name exists.
        let responses = error_responses();
        for (status, name) in error_statuses(true, true) {
            assert!(responses.get(name).is_some(), "{status} {name}");
        }
    }

    use super::*;
    use portico_control::source::dir::read_tree;

    /// The example tree of `ops/examples/standalone` (the demo APIs), validated.
    fn example_snapshot() -> Snapshot {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../ops/examples/standalone");
        let tree = read_tree(std::path::Path::new(root)).unwrap();
        let snap = portico_control::build_snapshot(&tree, None);
        assert!(snap.rejected.is_empty(), "{:?}", snap.rejected);
        snap
    }

    fn servers() -> Servers {
        Servers {
            live: vec!["http://127.0.0.1:8080".into()],
            sandbox: vec!["http://127.0.0.1:8081".into()],
        }
    }

    #[test]
    fn every_demo_api_is_documented() {
        let snap = example_snapshot();
        let apis: Vec<Arc<Api>> = snap.apis.values().cloned().collect();
        let doc = document(&snap, &apis, &servers(), Audience::Public);
        if let Ok(out) = std::env::var("PORTICO_PORTAL_DUMP") {
            std::fs::write(out, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        }
        let mut ids: Vec<String> = Vec::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                if let Some(id) = op["x-portico-api"].as_str() {
                    ids.push(id.to_owned());
                }
            }
        }
        ids.sort();
        ids.dedup();
        let want: Vec<String> = snap.apis.keys().cloned().collect();
        assert_eq!(ids, want);
        // Paths, parameters and examples of the tricky bindings.
        let get = &doc["paths"]["/grpc/v1/{name}"]["get"];
        assert_eq!(
            get["x-portico-example"]["path"],
            "/grpc/v1/shops/s1/products/p1"
        );
        assert_eq!(
            get["parameters"][0]["schema"]["pattern"],
            "^shops/[^/]+/products/[^/]+$"
        );
        let cancel = &doc["paths"]["/grpc/v1/orders/{order_id}:cancel"]["post"];
        assert_eq!(
            cancel["x-portico-example"]["path"],
            "/grpc/v1/orders/42:cancel"
        );
        let list = &doc["paths"]["/grpc/v1/orders"]["get"];
        let names: Vec<&str> = list["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for want in [
            "shop.id",
            "statuses",
            "filter.minTotalCents",
            "filter.createdAfter",
            "filter.minPrice.units",
            "includeCancelled",
            "ids",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let shop_list = &doc["paths"]["/grpc/v1/shops/{shop.id}/orders"]["get"];
        let names: Vec<&str> = shop_list["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "query")
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(
            names.contains(&"shop.name") && !names.contains(&"shop.id"),
            "{names:?}"
        );
        assert!(
            doc["paths"]["/router"]["post"]["parameters"][0]["schema"]["enum"]
                .as_array()
                .unwrap()
                .contains(&json!("grpc.order.get"))
        );
        let order = &doc["components"]["schemas"]["demo.order.v1.Order"]["properties"];
        assert_eq!(order["totalCents"]["type"], "string");
        assert_eq!(order["sequence"]["format"], "uint64");
        assert_eq!(order["labels"]["additionalProperties"]["type"], "string");
        let status = &doc["paths"]["/grpc/v1/orders/{order_id}/status"]["get"];
        assert_eq!(
            status["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/demo.order.v1.OrderStatus"
        );
    }
}
