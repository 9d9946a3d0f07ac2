//! Notifications as the console sees them (docs/operations/notifications.md, "Notifications"):
//!
//! - `GET /notifications`: every live gateway's `/status` `notify` block merged into the
//!   store in use, per node (streams, dead letters), per app (connections per node, backlog)
//!   and the callbacks' dead letters (newest first, at most [`MAX_DEAD_LETTERS`]);
//! - `POST /notifications/test`: the console's "send test event", published through one live
//!   gateway's internal listener (`internal_addr` of its `nodes/<id>` registration) with the
//!   registry's publisher token (`--publish-token-file`, `PORTICO_PUBLISH_TOKEN`), audited.
//!
//! Topics themselves are documents (`/topics`, [`super::topics`]).

use super::audit::audit;
use super::context::Ctx;
use super::reply::json_response;
use crate::error::{ApiError, ApiResult};
use crate::gateway_status;
use crate::gateway_status::live_nodes;
use crate::input::{check_name, parse_object};
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use portico_control::status::GatewayStatus;
use portico_control::zk::NodeInfo;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Dead letters listed at most (each gateway reports its latest 100).
pub const MAX_DEAD_LETTERS: usize = 200;
/// How long the gateway may take to store a test event.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest test payload, as JSON text (the gateway's own limit is 256 KiB).
const MAX_TEST_PAYLOAD: usize = 64 * 1024;

/// The routes.
pub fn routes() -> Vec<Route> {
    const TAG: &str = "notifications";
    vec![
        Route::new(
            Method::GET,
            "/notifications",
            TAG,
            "Notifications across the live gateways' /status: the store, per node the streams \
             it holds and its dead letters, per app the connections (per node) and the backlog, \
             the callbacks' dead letters (newest first, at most 200), and whether this registry \
             can send test events; gateways that cannot be read are listed with the error",
            get(overview),
        )
        .reply(Reply::Json(200, "Notifications")),
        Route::new(
            Method::POST,
            "/notifications/test",
            TAG,
            "Send a test notification {app, topic, payload, node_id?} through a live gateway's \
             internal listener with the registry's publisher token; answers the event id the \
             gateway assigned. 422 when the gateway refuses the event (no such topic, the app \
             not granted it), 503 without a publisher token or a gateway with an internal \
             listener",
            post(send_test),
        )
        .body(Body::Json("NotificationTest"))
        .reply(Reply::Json(200, "NotificationTestResult"))
        .calls_out(),
    ]
}

/// One app as merged across gateways.
#[derive(Debug, Default)]
struct AppView {
    connections: u64,
    /// Per node: `{node_id, connections, since_ms?, backlog?}`.
    nodes: BTreeMap<String, Map<String, Value>>,
    backlogs: Vec<u64>,
    callback: bool,
}

/// Merges the `notify` blocks of `statuses` (node id, `/status`) into `{store, apps,
/// dead_letters, dead_letters_total}`, and per node its own summary.
fn merge(statuses: &[(String, GatewayStatus)]) -> (Value, BTreeMap<String, Value>) {
    let mut stores: Vec<String> = Vec::new();
    let mut apps: BTreeMap<String, AppView> = BTreeMap::new();
    let mut dead: Vec<(u64, Value)> = Vec::new();
    let mut dead_total = 0u64;
    let mut per_node = BTreeMap::new();
    for (node, status) in statuses {
        let Some(n) = &status.notify else {
            per_node.insert(
                node.clone(),
                json!({"note": "the gateway reports no notifications (an older version)"}),
            );
            continue;
        };
        let store = match n.store.as_str() {
            "" => "unknown".to_owned(),
            s => s.to_owned(),
        };
        if !stores.contains(&store) {
            stores.push(store.clone());
        }
        for s in n.streams.iter().filter(|s| !s.app.is_empty()) {
            let view = apps.entry(s.app.clone()).or_default();
            view.connections += 1;
            let entry = view.nodes.entry(node.clone()).or_default();
            let c = entry
                .get("connections")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            entry.insert("connections".into(), (c + 1).into());
            entry.insert("since_ms".into(), s.since_ms.into());
        }
        for (app, &b) in &n.backlog {
            let view = apps.entry(app.clone()).or_default();
            view.backlogs.push(b);
            view.nodes
                .entry(node.clone())
                .or_default()
                .insert("backlog".into(), b.into());
        }
        for app in &n.callbacks {
            apps.entry(app.clone()).or_default().callback = true;
        }
        for d in &n.dead_letters {
            let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("node_id".into(), node.clone().into());
            }
            dead.push((d.at_ms, v));
        }
        dead_total += n.dead_letters_total;
        let mut summary = json!({
            "store": store,
            "streams": n.streams.len(),
            "dead_letters_total": n.dead_letters_total,
            "max_backlog": n.max_backlog,
            "ack_timeout_ms": n.ack_timeout_ms,
        });
        for (key, v) in [
            ("memory_max_events", n.memory_max_events),
            ("memory_dropped", n.memory_dropped),
        ] {
            if let Some(v) = v {
                summary[key] = v.into();
            }
        }
        per_node.insert(node.clone(), summary);
    }
    // One Redis stream per app is shared by every node: each reports the same backlog. In
    // memory, every node keeps its own queue: the backlogs add up.
    let shared_store = stores.iter().all(|s| s == "redis");
    let apps: Vec<Value> = apps
        .into_iter()
        .map(|(app, v)| {
            let backlog = if v.backlogs.is_empty() {
                Value::Null
            } else if shared_store {
                v.backlogs.iter().copied().max().unwrap_or(0).into()
            } else {
                v.backlogs.iter().sum::<u64>().into()
            };
            let nodes: Vec<Value> = v
                .nodes
                .into_iter()
                .map(|(node, mut m)| {
                    m.insert("node_id".into(), node.into());
                    m.entry("connections").or_insert(0.into());
                    Value::Object(m)
                })
                .collect();
            json!({
                "app": app,
                "connections": v.connections,
                "backlog": backlog,
                "callback": v.callback,
                "nodes": nodes,
            })
        })
        .collect();
    // Newest first (a stable sort: equal times keep the nodes' order).
    dead.sort_by_key(|d| std::cmp::Reverse(d.0));
    dead.truncate(MAX_DEAD_LETTERS);
    let dead: Vec<Value> = dead.into_iter().map(|(_, d)| d).collect();
    let store = match stores.as_slice() {
        [] => Value::Null,
        [one] => one.clone().into(),
        _ => "mixed".into(),
    };
    (
        json!({
            "store": store,
            "apps": apps,
            "dead_letters": dead,
            "dead_letters_total": dead_total,
        }),
        per_node,
    )
}

async fn overview(State(state): State<Shared>) -> ApiResult<Response> {
    let reads = gateway_status::read_all(&state).await?;
    let infos: Vec<NodeInfo> = reads.iter().map(|(i, _)| i.clone()).collect();
    let (nodes, statuses) = gateway_status::split(reads);
    let (mut body, per_node) = merge(&statuses);
    let nodes: Vec<Value> = nodes
        .into_iter()
        .zip(&infos)
        .map(|(mut n, info)| {
            n["internal_addr"] = json!(info.internal_addr);
            if let Some(Value::Object(summary)) = per_node.get(&info.node_id) {
                for (k, v) in summary {
                    n[k] = v.clone();
                }
            }
            n
        })
        .collect();
    let publishers = infos.iter().filter(|i| i.internal_addr.is_some()).count();
    body["nodes"] = Value::Array(nodes);
    body["test_send"] = match test_send_blocker(state.publish_token.get().is_some(), publishers) {
        None => json!({"available": true}),
        Some(why) => json!({"available": false, "reason": why}),
    };
    Ok(json_response(StatusCode::OK, &body, None))
}

/// Why a test event cannot be sent (`None`: it can).
fn test_send_blocker(token: bool, publishers: usize) -> Option<String> {
    if !token {
        return Some(
            "this registry has no publisher token: start it with --publish-token-file FILE or \
             PORTICO_PUBLISH_TOKEN, the token the gateways are given"
                .into(),
        );
    }
    if publishers == 0 {
        return Some(
            "no live gateway registers an internal listener (--internal-listen; gateways \
             older than this registry do not register it)"
                .into(),
        );
    }
    None
}

/// The body of `POST /notifications/test`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestRequest {
    app: String,
    topic: String,
    payload: Value,
    #[serde(default)]
    node_id: Option<String>,
}

/// The gateway's envelope codes a refused publish may carry, as the registry answers them.
fn gateway_code(code: &str) -> &'static str {
    match code {
        "TOPIC_NOT_FOUND" => "TOPIC_NOT_FOUND",
        "APP_FORBIDDEN" => "APP_FORBIDDEN",
        "BAD_REQUEST" => "BAD_REQUEST",
        "BODY_TOO_LARGE" => "BODY_TOO_LARGE",
        "NOTIFY_UNAVAILABLE" => "NOTIFY_UNAVAILABLE",
        _ => "PUBLISH_REFUSED",
    }
}

/// Maps the gateway's refusal (`status`, its envelope) to the registry's answer: 4xx → 422
/// with the gateway's code, 401 → 503 `PUBLISH_TOKEN_REJECTED`, 503 → 503, else 502.
fn refused(node: &str, status: u16, envelope: &Value) -> ApiError {
    let code = envelope["code"].as_str().unwrap_or("");
    let message = envelope["message"].as_str().unwrap_or("");
    let rid = envelope["request_id"].as_str().unwrap_or("");
    let said = format!("gateway {node} answered {status} {code}: {message} (its request id {rid})");
    match status {
        401 | 403 if code == "UNAUTHORIZED" => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PUBLISH_TOKEN_REJECTED",
            format!(
                "{said}: the registry's publisher token is not the gateways' (--publish-token-file)"
            ),
        ),
        400..=499 => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, gateway_code(code), said),
        503 => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, gateway_code(code), said),
        _ => ApiError::bad_gateway(said),
    }
}

/// The gateway that publishes: `wanted` (404 when not live, 503 without an internal
/// listener), else the first live node with one.
fn choose_node(nodes: Vec<NodeInfo>, wanted: Option<&str>) -> ApiResult<(NodeInfo, String)> {
    let total = nodes.len();
    let mut candidates = nodes.into_iter().filter(|n| match wanted {
        Some(id) => n.node_id == id,
        None => true,
    });
    if let Some(id) = wanted {
        let Some(node) = candidates.next() else {
            return Err(ApiError::not_found(format!(
                "gateway node {id:?} is not live"
            )));
        };
        return match node.internal_addr.clone().filter(|a| !a.is_empty()) {
            Some(addr) => Ok((node, addr)),
            None => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_PUBLISH_GATEWAY",
                format!("gateway node {id:?} registers no internal listener (--internal-listen)"),
            )),
        };
    }
    candidates
        .find_map(|n| {
            let addr = n.internal_addr.clone().filter(|a| !a.is_empty())?;
            Some((n, addr))
        })
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_PUBLISH_GATEWAY",
                format!(
                    "no live gateway registers an internal listener ({total} node(s) live): \
                     start gateways with --internal-listen (older gateways do not register it)"
                ),
            )
        })
}

async fn send_test(State(state): State<Shared>, ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let (req, _) = parse_object::<TestRequest>(&body, "test notification")?;
    check_name("app", &req.app)?;
    check_name("topic", &req.topic)?;
    if let Some(id) = &req.node_id {
        check_name("node_id", id)?;
    }
    let payload_len = serde_json::to_vec(&req.payload).map_or(0, |v| v.len());
    if payload_len > MAX_TEST_PAYLOAD {
        return Err(ApiError::too_large(format!(
            "payload: larger than {MAX_TEST_PAYLOAD} bytes"
        )));
    }
    let Some(token) = state.publish_token.get() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PUBLISH_TOKEN_MISSING",
            test_send_blocker(false, 0).unwrap_or_default(),
        ));
    };
    let (node, addr) = choose_node(live_nodes(&state).await?, req.node_id.as_deref())?;
    let client = gateway_status::client(PUBLISH_TIMEOUT)?;
    let url = format!("http://{addr}/internal/v1/notifications");
    let resp = client
        .post(&url)
        .bearer_auth(token)
        .header(crate::state::REQUEST_ID_HEADER, &ctx.request_id)
        .json(&json!({"app": req.app, "topic": req.topic, "payload": req.payload}))
        .send()
        .await
        .map_err(|e| ApiError::bad_gateway(format!("gateway {} ({url}): {e}", node.node_id)))?;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await.unwrap_or(Value::Null);
    if status != 200 {
        return Err(refused(&node.node_id, status, &answer));
    }
    let id = answer["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["app"] == req.app.as_str()))
        .and_then(|e| e["id"].as_str())
        .ok_or_else(|| {
            ApiError::bad_gateway(format!(
                "gateway {} answered 200 without an event for {:?}: {answer}",
                node.node_id, req.app
            ))
        })?
        .to_owned();
    let actor = ctx.actor(None);
    let detail =
        json!({"app": req.app, "id": id, "node_id": node.node_id, "payload_bytes": payload_len});
    audit(
        &state,
        &ctx,
        &actor,
        "notification.test",
        &format!("topics/{}", req.topic),
        detail,
    )
    .await;
    tracing::info!(app = %req.app, topic = %req.topic, %id, node = %node.node_id, %actor, "test notification sent");
    let body = json!({"app": req.app, "topic": req.topic, "id": id, "node_id": node.node_id});
    Ok(json_response(StatusCode::OK, &body, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway's `/status` with the `notify` block `notify` (read as the registry reads it).
    fn with_notify(notify: Value) -> GatewayStatus {
        GatewayStatus {
            notify: Some(serde_json::from_value(notify).unwrap()),
            ..GatewayStatus::default()
        }
    }

    #[test]
    fn nodes_merge_per_app_with_dead_letters_newest_first() {
        let a = with_notify(json!({
            "store": "redis",
            "streams": [{"app": "m1", "since_ms": 5}],
            "backlog": {"m1": 3, "m2": 7},
            "callbacks": ["m2"],
            "dead_letters": [{"app": "m2", "id": "1-0", "topic": "orders", "at_ms": 10}],
            "dead_letters_total": 1
        }));
        let b = with_notify(json!({
            "store": "redis",
            "streams": [{"app": "m3", "since_ms": 9}],
            "backlog": {"m1": 3, "m2": 7},
            "dead_letters": [{"app": "m2", "id": "2-0", "topic": "orders", "at_ms": 20}],
            "dead_letters_total": 4
        }));
        let (merged, per_node) = merge(&[
            ("gw-a".into(), a),
            ("gw-b".into(), b),
            ("gw-old".into(), GatewayStatus::default()),
        ]);
        assert_eq!(merged["store"], "redis");
        assert_eq!(merged["dead_letters_total"], 5);
        let dead = merged["dead_letters"].as_array().unwrap();
        assert_eq!(dead[0]["id"], "2-0");
        assert_eq!(dead[0]["node_id"], "gw-b");
        assert_eq!(dead[1]["id"], "1-0");
        let apps = merged["apps"].as_array().unwrap();
        let m1 = apps.iter().find(|a| a["app"] == "m1").unwrap();
        assert_eq!(m1["connections"], 1);
        // Redis: one shared stream per app, so not added up across nodes.
        assert_eq!(m1["backlog"], 3);
        assert_eq!(
            m1["nodes"],
            json!([{"node_id": "gw-a", "connections": 1, "since_ms": 5, "backlog": 3},
                   {"node_id": "gw-b", "connections": 0, "backlog": 3}])
        );
        let m2 = apps.iter().find(|a| a["app"] == "m2").unwrap();
        assert_eq!(
            (m2["connections"].as_u64(), m2["callback"].as_bool()),
            (Some(0), Some(true))
        );
        assert_eq!(per_node["gw-a"]["streams"], 1);
        assert!(per_node["gw-old"]["note"].is_string());
    }

    #[test]
    fn memory_backlogs_add_up_and_dead_letters_are_bounded() {
        let many: Vec<Value> = (0..150)
            .map(|i| json!({"app": "m", "id": format!("{i}"), "at_ms": i}))
            .collect();
        let node = |b: u64| {
            with_notify(
                json!({"store": "memory", "streams": [], "backlog": {"m": b},
                              "dead_letters": many.clone(), "dead_letters_total": 150}),
            )
        };
        let (merged, _) = merge(&[("a".into(), node(2)), ("b".into(), node(5))]);
        assert_eq!(merged["apps"][0]["backlog"], 7);
        assert_eq!(
            merged["dead_letters"].as_array().unwrap().len(),
            MAX_DEAD_LETTERS
        );
        assert_eq!(merged["dead_letters"][0]["at_ms"], 149);
        let (none, _) = merge(&[]);
        assert_eq!(none["store"], Value::Null);
    }

    #[test]
    fn refusals_map_to_clear_answers() {
        let env = |code: &str| json!({"code": code, "message": "why", "request_id": "r1"});
        let e = refused("gw", 404, &env("TOPIC_NOT_FOUND"));
        assert_eq!((e.status.as_u16(), e.code), (422, "TOPIC_NOT_FOUND"));
        assert!(
            e.message.contains("why") && e.message.contains("r1"),
            "{}",
            e.message
        );
        let e = refused("gw", 403, &env("APP_FORBIDDEN"));
        assert_eq!((e.status.as_u16(), e.code), (422, "APP_FORBIDDEN"));
        let e = refused("gw", 401, &env("UNAUTHORIZED"));
        assert_eq!((e.status.as_u16(), e.code), (503, "PUBLISH_TOKEN_REJECTED"));
        let e = refused("gw", 503, &env("NOTIFY_UNAVAILABLE"));
        assert_eq!((e.status.as_u16(), e.code), (503, "NOTIFY_UNAVAILABLE"));
        let e = refused("gw", 500, &Value::Null);
        assert_eq!((e.status.as_u16(), e.code), (502, "UPSTREAM_ERROR"));
    }

    #[test]
    fn the_publishing_node_has_an_internal_listener() {
        let node = |id: &str, internal: Option<&str>| {
            let mut n = NodeInfo::new(id, "127.0.0.1:1", "127.0.0.1:2");
            n.internal_addr = internal.map(str::to_owned);
            n
        };
        let nodes = || vec![node("a", None), node("b", Some("127.0.0.1:9181"))];
        assert_eq!(choose_node(nodes(), None).unwrap().0.node_id, "b");
        assert_eq!(choose_node(nodes(), Some("b")).unwrap().1, "127.0.0.1:9181");
        assert_eq!(
            choose_node(nodes(), Some("a")).unwrap_err().code,
            "NO_PUBLISH_GATEWAY"
        );
        assert_eq!(
            choose_node(nodes(), Some("z")).unwrap_err().status.as_u16(),
            404
        );
        let e = choose_node(vec![node("a", None)], None).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (503, "NO_PUBLISH_GATEWAY"));
        assert!(test_send_blocker(false, 3)
            .unwrap()
            .contains("--publish-token-file"));
        assert_eq!(test_send_blocker(true, 1), None);
    }
}
