//! The OpenAPI 3 document of `/api/v1`, generated from the route descriptions
//! ([`crate::route::Route`], listed by [`crate::api::routes`]), the schemas of the v1 documents
//! generated from the `portico_control::v1` types, and hand-written schemas of the API's own
//! messages.

use crate::route::{Body, Param, Reply, Route};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// A document name (API id, cluster, app key), as [`crate::input::check_name`] takes it.
const NAME_PATTERN: &str = "^[A-Za-z0-9._-]{1,128}$";
/// A switch name: an API id, or `<api_id>@<label>` for a key-level switch.
const SWITCH_PATTERN: &str = "^[A-Za-z0-9._-]{1,128}(@[A-Za-z0-9._-]{1,128})?$";

/// The longest backend deadline (ms) a document may ask for.
const MAX_TIMEOUT_MS: u64 = portico_control::validate::MAX_TIMEOUT_MS;

/// A document name, or `*` (every API).
const GRANT_PATTERN: &str = "^([*]|[A-Za-z0-9._-]{1,128})$";

/// An `If-Match` value the registry reads: `*`, or a znode version as sent in `ETag` (`"3"`,
/// also `W/"3"` or bare `3`).
const IF_MATCH_PATTERN: &str = "^[*]$|^(W/)?\"[0-9]{1,9}\"$|^[0-9]{1,9}$";

/// The document of the routes the server mounted, built once at start-up and handed to the
/// route that serves it (as a request extension).
#[derive(Debug, Clone)]
pub struct Served(pub Arc<Value>);

/// The OpenAPI document of `routes` (served at `/api/v1/openapi.json`).
pub fn document(routes: &[Route]) -> Value {
    let mut paths = Map::new();
    for route in routes {
        let entry = paths.entry(route.path.clone()).or_insert_with(|| json!({}));
        if let Some(obj) = entry.as_object_mut() {
            let mut op = operation(route);
            let links = links(route, routes);
            if let (false, Reply::Json(status, _)) = (links.is_empty(), route.reply) {
                op["responses"][status.to_string()]["links"] = Value::Object(links);
            }
            obj.insert(route.method.as_str().to_ascii_lowercase(), op);
        }
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Portico registry admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Stateless admin API over the ZooKeeper configuration tree (docs/OPERATIONS.md, 'The configuration tree'). \
                Single documents come back as themselves with their znode version as ETag; send it back as \
                If-Match to write only over that version (409 CONFLICT otherwise). Errors are \
                {code, message, request_id[, details]}."
        },
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": components(),
    })
}

/// The operation object of one route.
fn operation(route: &Route) -> Value {
    let mut op = json!({
        "operationId": operation_id(route.method.as_str(), &route.path),
        "summary": route.summary,
        "tags": [route.tag],
        "parameters": parameters(route),
        "responses": responses(route),
    });
    if route.public {
        op["security"] = json!([]);
    }
    if let Some(body) = request_body(route.body) {
        op["requestBody"] = body;
    }
    op
}

/// The links of a route that creates a resource ([`Route::created_id`]): to every route under
/// `path/{param}`, with `param` taken from where the new id is.
fn links(route: &Route, routes: &[Route]) -> Map<String, Value> {
    let mut links = Map::new();
    let Some(id) = route.created_id else {
        return links;
    };
    let prefix = format!("{}/{{", route.path);
    for target in routes.iter().filter(|t| t.path.starts_with(&prefix)) {
        let Some(param) = target.path[prefix.len()..].split('}').next() else {
            continue;
        };
        let target_id = operation_id(target.method.as_str(), &target.path);
        links.insert(
            target_id.clone(),
            json!({"operationId": target_id, "parameters": {param: id}}),
        );
    }
    links
}

/// Path variables (`{version}` an integer, others names), query parameters, the
/// precondition headers of conditional routes, and the operator and request id headers.
fn parameters(route: &Route) -> Vec<Value> {
    let mut parameters: Vec<Value> = route
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| {
            let schema = if name == "version" {
                json!({"type": "integer", "minimum": 1, "maximum": u64::MAX})
            } else if route.tag == "switches" && name == "api_id" {
                // Key-level switches: `<api_id>@<label>` (api/switches.rs).
                json!({"type": "string", "pattern": SWITCH_PATTERN})
            } else {
                name_schema()
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    for q in &route.query {
        let schema = match q.param {
            Param::Text => json!({"type": "string"}),
            Param::Name => name_schema(),
            Param::Flag => json!({"type": "boolean"}),
            Param::Count => json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
            Param::OneOf(words) => json!({"type": "string", "enum": words}),
        };
        parameters.push(json!({
            "name": q.name, "in": "query", "required": false,
            "description": q.description, "schema": schema
        }));
    }
    if route.conditional {
        parameters.push(json!({"$ref": "#/components/parameters/IfMatch"}));
        parameters.push(json!({"$ref": "#/components/parameters/IfNoneMatch"}));
    }
    parameters.push(json!({"$ref": "#/components/parameters/Operator"}));
    parameters.push(json!({"$ref": "#/components/parameters/RequestId"}));
    parameters
}

/// The success response, and the error envelopes the route can answer (401 unless public).
fn responses(route: &Route) -> Map<String, Value> {
    let mut responses = Map::new();
    match route.reply {
        Reply::Json(status, schema) => {
            let success = json!({
                "description": "success",
                "headers": {"ETag": {"$ref": "#/components/headers/ETag"}},
                "content": {"application/json": {"schema": schema_ref(schema)}}
            });
            // A PUT creates the document when it is not there yet (api/documents.rs,
            // `write_json`): 201, with the same body.
            if route.method == axum::http::Method::PUT && status == 200 {
                let mut created = success.clone();
                created["description"] = json!("created");
                responses.insert("201".to_owned(), created);
            }
            responses.insert(status.to_string(), success);
        }
        Reply::JsonOrHtml(schema) => {
            responses.insert(
                "200".to_owned(),
                json!({"description": "success: JSON, or an HTML page with ?format=html", "content": {
                    "application/json": {"schema": schema_ref(schema)},
                    "text/html": {"schema": {"type": "string"}}}}),
            );
        }
        Reply::Binary => {
            responses.insert(
                "200".to_owned(),
                json!({"description": "success", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}),
            );
        }
        Reply::Empty => {
            responses.insert("204".to_owned(), json!({"description": "done"}));
        }
    }
    let mut errors = vec!["400", "404", "409", "422", "503"];
    if !route.public {
        errors.push("401");
    }
    if route.body != Body::None {
        errors.push("413");
    }
    if route.calls_out {
        errors.push("502");
    }
    for status in errors {
        responses.insert(
            status.to_owned(),
            json!({"$ref": format!("#/components/responses/Error{status}")}),
        );
    }
    // Liveness answers its own body when ZooKeeper is unreachable (api/ops.rs, `health`).
    if route.reply == Reply::Json(200, "Health") {
        responses.insert(
            "503".to_owned(),
            json!({"description": "ZooKeeper is unreachable", "content": {"application/json": {"schema": schema_ref("Health")}}}),
        );
    }
    responses
}

/// The schema of a document name.
fn name_schema() -> Value {
    json!({"type": "string", "pattern": NAME_PATTERN})
}

fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_ascii_lowercase();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        let seg = seg.trim_start_matches('{').trim_end_matches('}');
        id.push('_');
        id.extend(
            seg.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
        );
    }
    id
}

fn schema_ref(name: &str) -> Value {
    if name == "Any" {
        json!({"type": "object"})
    } else {
        json!({"$ref": format!("#/components/schemas/{name}")})
    }
}

fn request_body(body: Body) -> Option<Value> {
    let content = match body {
        Body::None => return None,
        Body::Json(s) => json!({"application/json": {"schema": schema_ref(s)}}),
        Body::JsonOrMultipart(s) => json!({
            "application/json": {"schema": schema_ref(s)},
            "multipart/form-data": {"schema": {
                "type": "object",
                "description": "each file part (named by its import path, e.g. demo/order.proto) is a .proto source; text parts cluster, auth, timeout_ms, services (comma-separated), ids (JSON)",
                "additionalProperties": {"type": "string"}
            }}
        }),
        Body::JsonOrBinary(s) => json!({
            "application/json": {"schema": schema_ref(s)},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
        }),
    };
    Some(json!({"required": !matches!(body, Body::Json("PublishRequest")), "content": content}))
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// The reusable parts: security, parameters, headers, error responses and schemas.
fn components() -> Value {
    json!({
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "the admin token (--admin-token-file or PORTICO_ADMIN_TOKEN)"}},
        "parameters": {
            "IfMatch": {"name": "If-Match", "in": "header", "required": false, "description": "write only if the document's version (ETag) is this; `*` any version", "schema": {"type": "string", "pattern": IF_MATCH_PATTERN}},
            "IfNoneMatch": {"name": "If-None-Match", "in": "header", "required": false, "description": "`*`: create only", "schema": {"type": "string", "enum": ["*"]}},
            "Operator": {"name": "X-Portico-Operator", "in": "header", "required": false, "description": "who makes the change (audit log, switches)", "schema": {"type": "string"}},
            "RequestId": {"name": "X-Portico-Request-Id", "in": "header", "required": false, "description": "1-64 of [A-Za-z0-9._-]; echoed", "schema": {"type": "string"}}
        },
        "headers": {"ETag": {"description": "the znode version, quoted", "schema": {"type": "string"}}},
        "responses": {
            "Error400": error_response("BAD_REQUEST: unparseable JSON or bad parameter"),
            "Error401": {
                "description": "UNAUTHENTICATED: missing or wrong bearer token",
                "headers": {"WWW-Authenticate": {"description": "`Bearer realm=\"portico-registry\"`", "schema": {"type": "string"}}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            },
            "Error404": error_response("NOT_FOUND / ROUTE_NOT_FOUND"),
            "Error409": error_response("CONFLICT: version mismatch, or the document already exists"),
            "Error413": error_response("BODY_TOO_LARGE: the request body is over the limit (8 MiB), or a document over ZooKeeper's node limit (1,047,551 bytes), details naming each"),
            "Error422": error_response("VALIDATION_FAILED: details list every problem, each naming the document and field (unknown references, numbers out of range, what gateways would reject)"),
            "Error502": error_response("UPSTREAM_ERROR: what the operation calls (a gateway, a backend) could not be reached or read"),
            "Error503": error_response("ZOOKEEPER_UNAVAILABLE; for a sandbox call also NO_SANDBOX_GATEWAY (no live gateway runs a sandbox listener); for a test notification also PUBLISH_TOKEN_MISSING, PUBLISH_TOKEN_REJECTED, NO_PUBLISH_GATEWAY, NOTIFY_UNAVAILABLE")
        },
        "schemas": merged([document_schemas(), message_schemas(), import_and_ops_schemas(), cluster_ops_schemas(), observe_schemas(), notify_schemas()]),
    })
}

/// One object of the keys of every object of `parts`.
fn merged<const N: usize>(parts: [Value; N]) -> Value {
    let mut all = Map::new();
    for part in parts {
        if let Value::Object(map) = part {
            all.extend(map);
        }
    }
    Value::Object(all)
}

/// Notifications across the gateways and the console's test send
/// ([`crate::api::notifications`]; docs/operations/notifications.md, "Notifications").
fn notify_schemas() -> Value {
    json!({
    "Notifications": {"type": "object", "required": ["store", "apps", "dead_letters", "nodes", "test_send"], "properties": {
        "store": {"type": ["string", "null"], "description": "redis, memory, mixed (nodes differ), or null without a readable gateway"},
        "apps": {"type": "array", "items": {"type": "object", "properties": {
            "app": {"type": "string"}, "connections": {"type": "integer", "description": "streams open, all nodes"},
            "backlog": {"type": ["integer", "null"], "description": "notifications not acknowledged (Redis: the shared stream's; memory: summed over the nodes' queues)"},
            "callback": {"type": "boolean", "description": "the app receives callbacks (callback_url)"},
            "nodes": {"type": "array", "items": {"type": "object", "properties": {
                "node_id": {"type": "string"}, "connections": {"type": "integer"},
                "since_ms": {"type": ["integer", "null"]}, "backlog": {"type": "integer"}}}}}}},
        "dead_letters": {"type": "array", "description": "callbacks that never succeeded, newest first, at most 200", "items": {"type": "object", "properties": {
            "app": {"type": "string"}, "id": {"type": "string"}, "topic": {"type": "string"}, "attempts": {"type": "integer"},
            "last_error": {"type": "string"}, "at_ms": {"type": "integer"}, "node_id": {"type": "string"}}}},
        "dead_letters_total": {"type": "integer"},
        "nodes": {"type": "array", "items": {"type": "object", "properties": {
            "node_id": {"type": "string"}, "ok": {"type": "boolean"}, "error": {"type": "string"},
            "internal_addr": {"type": ["string", "null"]}, "store": {"type": "string"}, "streams": {"type": "integer"},
            "dead_letters_total": {"type": "integer"}, "note": {"type": "string"}}}},
        "test_send": {"type": "object", "properties": {"available": {"type": "boolean"}, "reason": {"type": "string"}}}}},
    "NotificationTest": {"type": "object", "additionalProperties": false, "required": ["app", "topic", "payload"], "properties": {
        "app": {"type": "string", "pattern": NAME_PATTERN, "description": "the app to receive the event (granted the topic)"},
        "topic": {"type": "string", "pattern": NAME_PATTERN},
        "payload": {"description": "any JSON value, at most 64 KiB"},
        "node_id": {"type": "string", "pattern": NAME_PATTERN, "description": "the gateway that publishes (default: the first with an internal listener)"}}},
    "NotificationTestResult": {"type": "object", "required": ["app", "topic", "id", "node_id"], "properties": {
        "app": {"type": "string"}, "topic": {"type": "string"},
        "id": {"type": "string", "description": "the event id the gateway assigned (what the merchant receives and acks)"},
        "node_id": {"type": "string"}}}
    })
}

/// Alert rules, the alerting state and reports ([`crate::api::alerts`], [`crate::api::reports`];
/// docs/operations/alerts.md, "Alerts" and "Reports").
fn observe_schemas() -> Value {
    let num = json!({"type": ["number", "null"]});
    let figures = json!({"type": "object", "properties": {
        "api": {"type": "string"}, "owner": {"type": "string"}, "calls": {"type": "integer"}, "errors": {"type": "integer"},
        "availability": num, "p50_ms": num, "p90_ms": num, "p99_ms": num, "p999_ms": num,
        "top_errors": {"type": "array", "items": {"type": "object", "properties": {"status": {"type": "integer"}, "code": {"type": "string"}, "count": {"type": "integer"}}}},
        "breaker_openings": {"type": "integer"}, "switch_flips": {"type": "integer"},
        "change": {"type": "object", "properties": {"previous_calls": {"type": "integer"}, "previous_availability": num, "previous_p99_ms": num,
            "calls_pct": num, "availability_pts": num, "p99_pct": num}},
        "series": {"type": "array", "items": {"type": "object", "properties": {"at_ms": {"type": "integer"}, "calls": {"type": "integer"}, "errors": {"type": "integer"}}}}}});
    json!({
    "Alerting": {"type": "object", "properties": {
        "evaluating": {"type": "boolean"}, "leader": {"type": "boolean", "description": "this registry sends the notifications"},
        "evaluated_at_ms": {"type": ["integer", "null"]}, "rules": {"type": "integer"}, "problem": {"type": ["string", "null"]},
        "alerts": {"type": "array", "items": {"type": "object", "properties": {
            "rule": {"type": "string"}, "api": {"type": "string"}, "condition": {"type": "string"}, "severity": {"type": "string"},
            "state": {"type": "string", "enum": ["pending", "firing", "resolving"]}, "value": num, "threshold": {"type": "number"},
            "started_at_ms": {"type": "integer"}, "fired_at_ms": {"type": ["integer", "null"]}, "summary": {"type": "string"}}}},
        "events": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "at_ms": {"type": "integer"}, "rule": {"type": "string"}, "api": {"type": "string"},
            "condition": {"type": "string"}, "severity": {"type": "string"}, "state": {"type": "string", "enum": ["firing", "resolved"]},
            "value": num, "threshold": {"type": "number"}, "started_at_ms": {"type": "integer"}, "notifications": {}}}}}},
    "Report": {"type": "object", "properties": {
        "period": {"type": "string", "enum": ["day", "week"]}, "from_ms": {"type": "integer"}, "to_ms": {"type": "integer"},
        "generated_at": {"type": "string"}, "platform": figures.clone(), "apis": {"type": "array", "items": figures},
        "slowest": {"type": "array", "items": {"type": "object", "properties": {"api": {"type": "string"}, "p99_ms": {"type": "number"}}}}}},
    "ReportsSent": {"type": "object", "properties": {
        "period": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}},
        "mails": {"type": "array", "items": {"type": "object", "properties": {
            "to": {"type": "string"}, "apis": {"type": "array", "items": {"type": "string"}}, "sent": {"type": "boolean"}, "error": {"type": "string"}}}}}}
    })
}

/// Failover, the cluster overview and autoscale events ([`crate::api::cluster_ops`];
/// docs/operations/clusters.md, "Failover runbook" and "Autoscale").
fn cluster_ops_schemas() -> Value {
    let event = json!({"type": "object", "properties": {
        "id": {"type": "string"}, "kind": {"type": "string", "enum": ["autoscale", "sleep"]},
        "at": {"type": "string", "format": "date-time"}, "action": {"type": "string"}, "rps": {"type": "number"},
        "rule": {"type": "integer", "description": "index of the rule in autoscale.rules, from 0"},
        "webhook": {"type": "string"}, "sleep_url": {"type": "string"}, "idle_s": {"type": "integer"},
        "outcome": {"type": "string", "enum": ["pending", "ok", "failed"]}, "status": {"type": "integer"}, "error": {"type": "string"}}});
    json!({
    "Failover": {"type": "object", "additionalProperties": false, "required": ["to", "reason"], "properties": {
        "to": {"type": "string", "enum": ["primary", "standby"], "description": "the set that serves; `standby` needs a cluster with standby.endpoints"},
        "reason": {"type": "string", "minLength": 1, "maxLength": 500, "pattern": "\\S", "description": "why (audited)"}}},
    "ClusterEvents": {"type": "object", "properties": {"items": {"type": "array", "items": event.clone()}}},
    "ClusterOverview": {"type": "object", "properties": {
        "name": {"type": "string"}, "etag": {"type": "string"}, "cluster": {"$ref": "#/components/schemas/Cluster"},
        "active": {"type": "string", "enum": ["primary", "standby"]},
        "sets": {"type": "object", "properties": {"primary": {"type": "array"}, "standby": {"type": "array"}}},
        "gateways": {"type": "array", "items": {"type": "object", "properties": {
            "node_id": {"type": "string"}, "admin_addr": {"type": "string"}, "config_version": {"type": "object"},
            "active": {"type": "string", "description": "primary, standby, or unknown (a gateway that does not report clusters, or could not be read)"},
            "reason": {"type": "string", "nullable": true, "description": "why the gateway serves that set (its /status clusters.<name>.reason)"},
            "endpoints": {"type": "array", "items": {"type": "object", "properties": {
                "addr": {"type": "string"}, "set": {"type": "string", "enum": ["primary", "standby"]},
                "healthy": {"type": "boolean"}, "load": {"type": "number", "nullable": true}}}},
            "status": {"type": "object", "description": "the gateway's /status clusters.<name> as it is"},
            "note": {"type": "string"}, "error": {"type": "string"}}}},
        "rps": {"type": "number", "nullable": true, "description": "requests per second over the last 10 s, summed over the cluster's live APIs and every gateway (null: not evaluated)"},
        "evaluated_at_ms": {"type": "integer", "nullable": true, "description": "when this registry last evaluated the clusters' autoscale and sleep rules (Unix ms at its start; its webhook and sleep_url calls were done by then; null: not yet)"},
        "events": {"type": "array", "items": event}}}
    })
}

/// The v1 documents of the tree (docs/operations/config-tree.md, "The configuration tree"), and every type
/// they use: generated from the `portico_control::v1` types the gateways parse
/// ([`portico_control::v1::openapi_schemas`]), never written here. `NamedCluster` is the body of
/// `POST /clusters`: a cluster with its name.
fn document_schemas() -> Value {
    let mut schemas = portico_control::v1::openapi_schemas();
    schemas.insert(
        "NamedCluster".to_owned(),
        json!({"allOf": [{"$ref": "#/components/schemas/Cluster"}, {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "pattern": NAME_PATTERN}}}]}),
    );
    Value::Object(schemas)
}

/// The API's own messages: errors, lists, apps, publishing.
fn message_schemas() -> Value {
    json!({
    "Error": {"type": "object", "required": ["code", "message", "request_id"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}, "request_id": {"type": "string"},
        "details": {"type": "array", "description": "every problem found (a 422 or 413 lists them all, not only the first): the tree path, the field, what is wrong",
            "items": {"type": "object", "properties": {
            "path": {"type": "string"}, "field": {"type": "string"}, "reason": {"type": "string"}}}}
    }},
    "List": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "string"}, "etag": {"type": "string"}, "document": {"type": "object"}, "error": {"type": "string"},
        "raw": {"type": "string", "description": "the stored text of a document that is not JSON"},
        "written_at": {"type": "string", "description": "switches, apps, topics, clusters: when the document was last written (its znode's mtime, RFC 3339), by the registry or not"},
        "served": {"oneOf": [{"$ref": "#/components/schemas/Served"}], "nullable": true,
            "description": "switches, apps, topics, clusters: what the live gateways serve of the document; null when they could not be listed"}}}},
        "nodes": {"type": "array", "description": "switches, apps, topics, clusters: the live gateways read for `served`", "items": {"type": "object", "properties": {
            "node_id": {"type": "string"}, "ok": {"type": "boolean"}, "error": {"type": "string"}}}}}},
    "Served": {"type": "object", "description": "what the live gateways serve of one document (docs/operations/registry.md, \"What the gateways serve\")", "properties": {
        "nodes": {"type": "integer", "description": "gateways that answered for this env (the sandbox: those with a sandbox listener)"},
        "refused": {"type": "array", "description": "the gateways refusing the document: they do not serve it", "items": {"$ref": "#/components/schemas/Refusal"}},
        "degraded": {"type": ["boolean", "null"], "description": "switches: whether the gateways serve it degraded; null when they differ or none answered"},
        "degraded_on": {"type": "array", "items": {"type": "string"}, "description": "switches: the nodes serving it degraded"},
        "active": {"type": ["string", "null"], "description": "clusters: the side the gateways serve (primary, standby); null when they differ or none answered"},
        "sides": {"type": "array", "description": "clusters: the side each gateway serves", "items": {"type": "object", "properties": {
            "node_id": {"type": "string"}, "active": {"type": "string", "enum": ["primary", "standby"]},
            "reason": {"type": "string", "enum": ["manual", "auto"], "description": "manual: the document's active; auto: automatic failover"}}}}}},
    "Refusal": {"type": "object", "properties": {
        "node_id": {"type": "string"}, "reason": {"type": "string"},
        "kept_previous": {"type": "boolean", "description": "whether the gateway still serves the last version it accepted"},
        "kept": {"type": "object", "description": "that version, as the gateway describes it: updated_by, updated_at, version, degraded, active (when the document has them), digest (SHA-256 of its bytes)"}}},
    "AppView": {"type": "object", "description": "an app without its secret", "properties": {
        "name": {"type": "string"}, "status": {"type": "string", "enum": ["active", "disabled"]},
        "apis": {"type": "array", "items": {"type": "string"}},
        "rate_limits": {"type": "array", "items": {"$ref": "#/components/schemas/AppRateLimit"}},
        "topics": {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}},
        "callback_url": {"type": "string", "pattern": "^https?://[A-Za-z0-9.:_-]+(/[A-Za-z0-9._~/?&=%:-]*)?$", "maxLength": 2048}}},
    "AppCreate": {"type": "object", "properties": {
        "app_key": {"type": "string", "pattern": NAME_PATTERN}, "name": {"type": "string"}, "secret": {"type": "string", "minLength": 8},
        "status": {"type": "string", "enum": ["active", "disabled"]},
        "apis": {"type": "array", "items": {"type": "string", "pattern": GRANT_PATTERN}},
        "rate_limits": {"type": "array", "items": {"$ref": "#/components/schemas/AppRateLimit"}},
        "topics": {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}},
        "callback_url": {"type": "string", "pattern": "^https?://[A-Za-z0-9.:_-]+(/[A-Za-z0-9._~/?&=%:-]*)?$", "maxLength": 2048}}},
    "AppPatch": {"type": "object", "properties": {
        "name": {"type": "string"}, "status": {"type": "string", "enum": ["active", "disabled"]},
        "apis": {"type": "array", "items": {"type": "string", "pattern": GRANT_PATTERN}},
        "rate_limits": {"type": "array", "items": {"$ref": "#/components/schemas/AppRateLimit"}},
        "topics": {"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}},
        "callback_url": {"type": "string", "pattern": "^https?://[A-Za-z0-9.:_-]+(/[A-Za-z0-9._~/?&=%:-]*)?$", "maxLength": 2048}}},
    "AppCredentials": {"type": "object", "required": ["app_key", "secret"], "properties": {
        "app_key": {"type": "string"}, "secret": {"type": "string", "description": "shown only in this response"},
        "etag": {"type": "string"}, "app": {"$ref": "#/components/schemas/AppView"}}},
    "ApiIds": {"type": "object", "required": ["apis"], "properties": {"apis": {"type": "array", "items": {"type": "string"}}}},
    "PublishRequest": {"type": "object", "properties": {
        "expected_version": {"type": "integer", "description": "the live document's ETag (as If-Match)"}, "comment": {"type": "string"}}},
    "RollbackRequest": {"type": "object", "required": ["version"], "properties": {
        "version": {"type": "integer"}, "expected_version": {"type": "integer"}, "comment": {"type": "string"}}},
    "Published": {"type": "object", "properties": {
        "id": {"type": "string"}, "version": {"type": "integer"}, "etag": {"type": "string"},
        "unchanged": {"type": "boolean", "description": "true when the draft was the live version already: nothing was published (no new version)"},
        "document": {"$ref": "#/components/schemas/ApiDefinition"}}},
    "History": {"type": "object", "properties": {
        "id": {"type": "string"}, "live_version": {"type": "integer", "nullable": true},
        "versions": {"type": "array", "items": {"type": "object", "properties": {
            "version": {"type": "integer"}, "published_at": {"type": "string", "format": "date-time"}, "live": {"type": "boolean"}}}}}}
    })
}

/// The API's own messages: imports, descriptors, health, audit, nodes, export.
fn import_and_ops_schemas() -> Value {
    json!({
    "ImportOptions": {"type": "object", "required": ["cluster"], "properties": {
        "cluster": {"type": "string", "pattern": NAME_PATTERN}, "auth": {"type": "string", "enum": ["signature", "none"]},
        "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS}, "services": {"type": "array", "items": {"type": "string"}},
        "ids": {"type": "object", "additionalProperties": {"type": "string"}, "description": "API id by RPC (pkg.Service/Method)"},
        "dry_run": {"type": "boolean", "description": "preview only (as the dry_run query flag)"},
        "overwrite": {"type": "boolean", "description": "replace drafts that exist and differ (as the overwrite query flag)"}}},
    "ProtoImport": {"allOf": [{"$ref": "#/components/schemas/ImportOptions"}, {"type": "object", "required": ["files"], "properties": {
        "files": {"type": "object", "additionalProperties": {"type": "string"}, "description": "import path → .proto source"}}}]},
    "DescriptorImport": {"allOf": [{"$ref": "#/components/schemas/ImportOptions"}, {"type": "object", "required": ["descriptor_set"], "properties": {
        "descriptor_set": {"type": "string", "format": "byte"}}}]},
    "ReflectionImport": {"allOf": [{"$ref": "#/components/schemas/ImportOptions"}, {"type": "object", "required": ["addr"], "properties": {
        "addr": {"type": "string", "description": "host:port of the gRPC backend"}}}]},
    "ImportResult": {"type": "object", "properties": {
        "dry_run": {"type": "boolean", "description": "true: a preview, nothing was written"},
        "descriptor": {"type": "string"}, "descriptor_bytes": {"type": "integer"},
        "services": {"type": "array", "items": {"type": "string"}},
        "drafts": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "rpc": {"type": "string"}, "created": {"type": "boolean"}, "etag": {"type": "string"},
            "state": {"type": "string", "enum": ["new", "changed", "unchanged"], "description": "changed: the draft exists and differs (written only with overwrite)"},
            "conflicts": {"type": "array", "description": "routes another API binds (env: sandbox, or live: publishing would be refused)", "items": {"type": "object", "properties": {
                "api": {"type": "string"}, "route": {"type": "string"}, "env": {"type": "string", "enum": ["live", "sandbox"]}}}},
            "http": {"$ref": "#/components/schemas/HttpRule"}}}},
        "skipped": {"type": "array", "items": {"type": "object", "properties": {"method": {"type": "string"}, "reason": {"type": "string"}}}},
        "problems": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}, "reason": {"type": "string"}}}}}},
    "Served": {"type": "object", "description": "whether the gateways serve a document as the tree holds it", "properties": {
        "id": {"type": "string"}, "nodes": {"type": "integer", "description": "gateways read for the env"},
        "refused": {"type": "array", "items": {"type": "object", "properties": {
            "node_id": {"type": "string", "description": "a gateway node, or registry (its own build of the tree)"},
            "reason": {"type": "string"}, "kept_previous": {"type": "boolean"}}}}}},
    "DescriptorList": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
        "sha256": {"type": "string"}, "bytes": {"type": "integer"}}}}}},
    "Health": {"type": "object", "properties": {"status": {"type": "string"}, "zookeeper": {"type": "string"}, "root": {"type": "string"}}},
    "AuditLog": {"type": "object", "properties": {
        "entries": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "at": {"type": "string", "format": "date-time"}, "actor": {"type": "string"},
            "action": {"type": "string"}, "target": {"type": "string"}, "request_id": {"type": "string"}, "detail": {"type": "object"}}}},
        "next_before": {"type": "string", "nullable": true}}},
    "Imported": {"type": "object", "required": ["env", "imported"], "properties": {
        "env": {"type": "string", "enum": ["live", "sandbox"]},
        "imported": {"type": "array", "items": {"type": "string"}, "description": "tree paths written, in write order"}}},
    "SandboxCall": {"type": "object", "additionalProperties": false, "description": "a call to the draft on a gateway's sandbox listener", "properties": {
        "api_id": {"type": "string", "pattern": NAME_PATTERN, "description": "the draft (gives the method, and the path if it has no variables)"},
        "method": {"type": "string"}, "path": {"type": "string", "description": "as sent, optionally with ?query"},
        "query": {"type": "string"}, "body": {"description": "a string is sent as is, any other JSON value as JSON"},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "app_key": {"type": "string", "description": "the sandbox app to sign with"},
        "node_id": {"type": "string", "description": "the gateway node (default: the first with a sandbox listener)"}}},
    "SandboxCallResult": {"type": "object", "required": ["request", "response", "latency_ms"], "properties": {
        "request": {"type": "object", "properties": {
            "method": {"type": "string"}, "url": {"type": "string"}, "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string"}, "app_key": {"type": "string", "nullable": true}, "string_to_sign": {"type": "string", "nullable": true}}},
        "response": {"type": "object", "properties": {
            "status": {"type": "integer"}, "headers": {"type": "object"}, "body": {"type": "string"},
            "body_encoding": {"type": "string"}, "body_bytes": {"type": "integer"}, "truncated": {"type": "boolean"}}},
        "latency_ms": {"type": "number"}, "node_id": {"type": "string"}, "api_id": {"type": "string", "nullable": true}}},
    "Nodes": {"type": "object", "properties": {
        "generation": {"type": "integer", "description": "the live tree's current generation"},
        "digest": {"type": "string"},
        "nodes": {"type": "array", "items": {"type": "object", "properties": {
            "node_id": {"type": "string"}, "addr": {"type": "string"}, "admin_addr": {"type": "string"}, "sandbox_addr": {"type": "string"},
            "internal_addr": {"type": "string", "description": "the internal listener (notifications are published there), when the gateway runs one"},
            "started_at": {"type": "string"}, "updated_at": {"type": "string"},
            "config_version": {"type": "object", "properties": {"generation": {"type": "integer"}, "digest": {"type": "string"}}},
            "in_sync": {"type": "boolean", "description": "on the tree's current generation (documents it refuses are listed apart)"}, "lag_zxid": {"type": "integer"}, "updated_ms_ago": {"type": "integer"},
            "rejected_documents": {"type": "array", "description": "the live documents the node refuses, as its /status says (path, reason, kept_previous, kept)", "items": {"type": "object"}},
            "sandbox_rejected_documents": {"type": "array", "description": "the same for its sandbox plane", "items": {"type": "object"}},
            "status_error": {"type": "string", "description": "why the node's /status could not be read"}}}}}},
    "Export": {"type": "object", "properties": {
        "env": {"type": "string"}, "generation": {"type": "integer"},
        "files": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "encoding": {"type": "string", "enum": ["utf-8", "base64"]}, "content": {"type": "string"}}}}}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;
    use axum::routing::get;

    fn sample_routes() -> Vec<Route> {
        vec![
            Route::new(Method::GET, "/open", "meta", "Open", get(|| async {})).public(),
            Route::new(
                Method::PUT,
                "/apis/{id}/history/{version}",
                "apis",
                "Put",
                get(|| async {}),
            )
            .body(Body::Json("PublishRequest"))
            .reply(Reply::Empty)
            .query("force", "even so")
            .conditional(),
        ]
    }

    #[test]
    fn operations_follow_the_route_descriptions() {
        let doc = document(&sample_routes());
        let open = &doc["paths"]["/open"]["get"];
        assert_eq!(open["operationId"], "get_open");
        assert_eq!(open["security"], json!([]));
        assert!(open["responses"].get("401").is_none());
        assert!(open["responses"]["200"].is_object());

        let put = &doc["paths"]["/apis/{id}/history/{version}"]["put"];
        assert_eq!(put["operationId"], "put_apis_id_history_version");
        assert_eq!(put["tags"], json!(["apis"]));
        assert!(put.get("security").is_none());
        assert!(put["responses"]["401"].is_object());
        assert!(put["responses"]["204"].is_object());
        let params = put["parameters"].as_array().unwrap();
        assert_eq!(params[0]["name"], "id");
        assert_eq!(params[0]["schema"]["type"], "string");
        assert_eq!(params[1]["name"], "version");
        assert_eq!(params[1]["schema"]["type"], "integer");
        assert_eq!(params[2]["in"], "query");
        let refs: Vec<&str> = params[3..]
            .iter()
            .filter_map(|p| p["$ref"].as_str())
            .collect();
        assert_eq!(
            refs,
            [
                "#/components/parameters/IfMatch",
                "#/components/parameters/IfNoneMatch",
                "#/components/parameters/Operator",
                "#/components/parameters/RequestId"
            ]
        );
        // A publish body may be empty.
        assert_eq!(put["requestBody"]["required"], false);
    }

    /// Every `$ref` in `value`.
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => refs(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_of_the_served_document_resolves() {
        let doc = document(&crate::api::routes());
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(all.len() > 50, "{}", all.len());
        for r in all {
            let pointer = r.strip_prefix('#').unwrap_or(r);
            assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
        }
    }

    #[test]
    fn only_operations_that_call_out_list_502() {
        let doc = document(&crate::api::routes());
        let mut listing: Vec<&str> = Vec::new();
        for ops in doc["paths"].as_object().unwrap().values() {
            for op in ops.as_object().unwrap().values() {
                if op["responses"].get("502").is_some() {
                    listing.push(op["operationId"].as_str().unwrap());
                }
            }
        }
        listing.sort_unstable();
        assert_eq!(
            listing,
            [
                "post_notifications_test",
                "post_reflection",
                "post_sandbox_call"
            ]
        );
    }

    #[test]
    fn creating_routes_link_to_their_resource() {
        let doc = document(&crate::api::routes());
        let links = &doc["paths"]["/apps"]["post"]["responses"]["201"]["links"];
        let get = &links["get_apps_app_key"];
        assert_eq!(get["operationId"], "get_apps_app_key");
        assert_eq!(
            get["parameters"]["app_key"], "$response.body#/app_key",
            "{links:#}"
        );
        let links = &doc["paths"]["/clusters"]["post"]["responses"]["201"]["links"];
        assert_eq!(
            links["delete_clusters_name"]["parameters"]["name"],
            "$request.body#/name"
        );
    }

    /// `schema` with OpenAPI 3.0's `nullable: true` spelled as JSON Schema does (`null` among
    /// the types), so that a validator reads it as the gateway's parser does.
    fn nullable_as_null_type(schema: &mut Value) {
        match schema {
            Value::Object(map) => {
                if map.remove("nullable") == Some(Value::Bool(true)) {
                    if let Some(Value::String(t)) = map.get("type").cloned() {
                        map.insert("type".to_owned(), json!([t, "null"]));
                    }
                    if let Some(Value::Array(values)) = map.get_mut("enum") {
                        if !values.contains(&Value::Null) {
                            values.push(Value::Null);
                        }
                    }
                }
                map.values_mut().for_each(nullable_as_null_type);
            }
            Value::Array(items) => items.iter_mut().for_each(nullable_as_null_type),
            _ => {}
        }
    }

    /// A validator of the served schema `name`, read as OpenAPI 3.0 reads it (draft 4's
    /// boolean `exclusiveMinimum`, `nullable`).
    fn served_validator(name: &str) -> jsonschema::Validator {
        let doc = document(&crate::api::routes());
        let mut rooted = json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "allOf": [{"$ref": format!("#/components/schemas/{name}")}],
            "components": doc["components"],
        });
        nullable_as_null_type(&mut rooted);
        jsonschema::draft4::new(&rooted).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The schema of a document of the tree, by its path (`apis/x`, `ipacl`); `None` for
    /// descriptors, which are not JSON.
    fn schema_of(path: &str) -> Option<&'static str> {
        use portico_control::DocKind;
        let (kind, _) = DocKind::classify(path)?;
        Some(match kind {
            DocKind::Api => "ApiDefinition",
            DocKind::Cluster => "Cluster",
            DocKind::App => "App",
            DocKind::Switch => "Switch",
            DocKind::Topic => "Topic",
            DocKind::IpAcl => "IpAcl",
            DocKind::Alert => "AlertRule",
            DocKind::Descriptor => return None,
        })
    }

    /// The documents of `ops/examples/standalone`, by tree path.
    fn example_tree() -> portico_control::Tree {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/examples/standalone");
        let mut tree = portico_control::Tree::default();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let rel = path.strip_prefix(&root).unwrap().with_extension("");
                let rel = rel.to_str().unwrap().replace('\\', "/");
                assert!(tree.insert(&rel, std::fs::read(&path).unwrap()), "{rel}");
            }
        }
        tree
    }

    /// Why the served schema refuses `doc`, if it does.
    fn schema_refusal(name: &str, doc: &Value) -> Option<String> {
        let errors: Vec<String> = served_validator(name)
            .iter_errors(doc)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    /// Why the gateways' validation refuses the document at `path` of `tree`, if it does.
    fn gateway_refusal(tree: &portico_control::Tree, path: &str) -> Option<String> {
        let snap = portico_control::build_snapshot(tree, None);
        snap.rejected
            .iter()
            .find(|r| r.path == path)
            .map(|r| r.reason.clone())
    }

    #[test]
    fn every_example_document_validates_against_the_served_schema() {
        let tree = example_tree();
        let mut checked = 0;
        for (path, bytes) in &tree.docs {
            let Some(name) = schema_of(path) else {
                continue;
            };
            let doc: Value = serde_json::from_slice(bytes).unwrap();
            if let Some(why) = schema_refusal(name, &doc) {
                panic!("{path} does not validate against {name}: {why}");
            }
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} documents");
        // And the gateways serve every one of them.
        let rejected = portico_control::build_snapshot(&tree, None).rejected;
        assert!(rejected.is_empty(), "{rejected:?}");
    }

    /// The served schemas and the gateways' validation agree on documents that differ from
    /// an example by an unknown field or a wrong type: both refuse, or (an unknown field where
    /// the v1 contract ignores it, a `null` where a field is optional) both accept.
    #[test]
    fn served_schemas_and_the_gateways_agree_on_unknown_fields_and_wrong_types() {
        let cases: [(&str, &str, Value, bool); 13] = [
            (
                "clusters/demo-grpc",
                "/grpc",
                json!({"keepalive": 1}),
                false,
            ),
            (
                "clusters/demo-grpc",
                "/grpc",
                json!({"connect_timeout_ms": 500}),
                true,
            ),
            (
                "clusters/demo-http",
                "/endpoints",
                json!("127.0.0.1:1"),
                false,
            ),
            (
                "clusters/demo-http",
                "/a_later_field",
                json!({"any": 1}),
                true,
            ),
            (
                "apis/order.get",
                "/backend/timeout_ms",
                json!("3000"),
                false,
            ),
            ("apis/order.get", "/policy/read_only", json!("yes"), false),
            ("apis/order.get", "/policy/read_only", json!(true), true),
            (
                "apis/order.get",
                "/policy/cache",
                json!({"ttl_ms": 1000, "shared": true}),
                true,
            ),
            ("apis/order.get", "/description", Value::Null, true),
            ("apps/merchant-1", "/status", json!("paused"), false),
            ("switches/promo.list", "/degraded", json!("true"), false),
            ("topics/orders", "/retention_s", json!(-1), false),
            ("topics/orders", "/apps", json!("*"), false),
        ];
        let base = example_tree();
        for (path, pointer, value, accepted) in cases {
            let mut doc: Value = serde_json::from_slice(&base.docs[path]).unwrap();
            let (parent, field) = pointer.rsplit_once('/').unwrap();
            doc.pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .unwrap_or_else(|| panic!("{path}: no {parent}"))
                .insert(field.to_owned(), value.clone());
            let mut tree = base.clone();
            tree.insert(path, serde_json::to_vec(&doc).unwrap());
            let by_schema = schema_refusal(schema_of(path).unwrap(), &doc);
            let by_gateway = gateway_refusal(&tree, path);
            assert_eq!(
                (by_schema.is_none(), by_gateway.is_none()),
                (accepted, accepted),
                "{path} with {pointer} = {value}: schema {by_schema:?}, gateways {by_gateway:?}"
            );
        }
    }

    /// The served document as checked in for the console's generated types
    /// (`admin-ui/src/generated/openapi.json`, read by `admin-ui/build.sh`): this test fails
    /// when it is stale, and `PORTICO_WRITE_OPENAPI=1` rewrites it (docs/operations/registry.md, "The
    /// admin API's schemas").
    #[test]
    fn the_consoles_copy_of_the_document_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../admin-ui/src/generated/openapi.json");
        let mut doc = document(&crate::api::routes());
        // Not part of the contract: a version bump alone does not make the copy stale.
        doc["info"]["version"] = json!("0");
        let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        if std::env::var_os("PORTICO_WRITE_OPENAPI").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == text,
            "{} is not the document the registry serves: run \
             `PORTICO_WRITE_OPENAPI=1 cargo test -p portico-registry --lib the_consoles_copy`, \
             then `cd admin-ui && npm run gen:api`",
            path.display()
        );
    }

    #[test]
    fn schemas_of_every_part_are_merged() {
        let schemas = &components()["schemas"];
        for name in [
            "ApiDefinition",
            "Error",
            "AppCredentials",
            "ImportResult",
            "Export",
        ] {
            assert!(schemas[name].is_object(), "{name}");
        }
    }
}
