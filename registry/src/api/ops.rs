//! Operations: the OpenAPI document, liveness, the audit log and the live gateway nodes.

use super::reply::json_response;
use crate::error::ApiResult;
use crate::input::count;
use crate::openapi::Served;
use crate::route::{Param, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Doc, Env};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Extension;
use portico_control::zk::NodeInfo;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The routes of operations.
pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/openapi.json",
            "meta",
            "This OpenAPI 3 document",
            get(openapi),
        )
        .reply(Reply::Json(200, "Any"))
        .public(),
        Route::new(
            Method::GET,
            "/health",
            "meta",
            "Liveness and ZooKeeper reachability",
            get(health),
        )
        .reply(Reply::Json(200, "Health"))
        .public(),
        Route::new(
            Method::GET,
            "/audit",
            "ops",
            "The audit log, newest first",
            get(audit_log),
        )
        .reply(Reply::Json(200, "AuditLog"))
        .query_as(
            "limit",
            "entries to return (default 100, at most 1000)",
            Param::Count,
        )
        .query(
            "before",
            "only entries older than this entry id (for paging)",
        ),
        Route::new(
            Method::GET,
            "/nodes",
            "ops",
            "Live gateway nodes with their applied config version and lag",
            get(nodes),
        )
        .reply(Reply::Json(200, "Nodes")),
    ]
}

/// The OpenAPI document of every route, as the server built it.
async fn openapi(Extension(served): Extension<Served>) -> Response {
    json_response(StatusCode::OK, &*served.0, None)
}

async fn health(State(state): State<Shared>) -> Response {
    let zk = state.store.healthy().await;
    let body = json!({
        "status": if zk { "ok" } else { "degraded" },
        "zookeeper": if zk { "connected" } else { "unreachable" },
        "root": state.store.root(),
    });
    let status = if zk {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &body, None)
}

/// `?limit` newest entries (older than `?before`), newest first, each with its `id`;
/// `next_before` pages further back.
async fn audit_log(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let limit = count(&q, "limit", 100, 1000)?;
    let mut names = state.store.list("audit").await?;
    names.sort();
    if let Some(before) = q.get("before") {
        names.retain(|n| n.as_str() < before.as_str());
    }
    let start = names.len().saturating_sub(limit);
    let chosen = &names[start..];
    let mut entries = Vec::with_capacity(chosen.len());
    for name in chosen.iter().rev() {
        if let Some(doc) = state.store.get(&format!("audit/{name}")).await? {
            let mut entry: Value = serde_json::from_slice(&doc.data).unwrap_or(Value::Null);
            if let Some(obj) = entry.as_object_mut() {
                obj.insert("id".to_owned(), Value::String(name.clone()));
            }
            entries.push(entry);
        }
    }
    let next_before = if start > 0 {
        chosen.first().cloned()
    } else {
        None
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"entries": entries, "next_before": next_before}),
        None,
    ))
}

/// The live gateway nodes (`nodes/<id>`), each with whether it serves the live tree's current
/// generation and how far behind it is.
async fn nodes(State(state): State<Shared>) -> ApiResult<Response> {
    let tree = state.store.tree(Env::Live).await?;
    let generation = tree.generation;
    let digest = portico_control::build_snapshot(&tree, None).version.digest;
    let docs = state.store.list_docs("nodes").await?;
    let now = time::OffsetDateTime::now_utc();
    let mut nodes: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| node_view(name, doc, generation, now))
        .collect();
    // What each node refuses (docs/operations/registry.md, "What the gateways serve"): a node on the
    // current generation that refuses documents is not "in sync" with the tree.
    let reads = crate::gateway_status::read_all(&state)
        .await
        .unwrap_or_default();
    for node in &mut nodes {
        let Some(id) = node["node_id"].as_str().map(str::to_owned) else {
            continue;
        };
        match reads.iter().find(|(info, _)| info.node_id == id) {
            Some((_, Ok(status))) => {
                node["rejected_documents"] = rejected_of(Some(&status.live));
                node["sandbox_rejected_documents"] = rejected_of(status.sandbox.as_ref());
            }
            Some((_, Err(e))) => node["status_error"] = Value::String(e.clone()),
            None => {}
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"generation": generation, "digest": digest, "nodes": nodes}),
        None,
    ))
}

/// A plane's `rejected_documents` as its `/status` has them (`[]` without the plane).
fn rejected_of(plane: Option<&portico_control::status::PlaneStatus>) -> Value {
    plane.map_or_else(
        || json!([]),
        |p| serde_json::to_value(&p.rejected_documents).unwrap_or_else(|_| json!([])),
    )
}

/// One node's document, with `ephemeral`, `in_sync`, `lag_zxid` and `updated_ms_ago` added.
fn node_view(name: &str, doc: &Doc, generation: u64, now: time::OffsetDateTime) -> Value {
    let info: NodeInfo = match serde_json::from_slice(&doc.data) {
        Ok(info) => info,
        Err(e) => {
            return json!({"node_id": name, "error": format!("unreadable node document: {e}")})
        }
    };
    let applied = info.config_version.generation;
    let updated_ms_ago = time::OffsetDateTime::parse(
        &info.updated_at,
        &time::format_description::well_known::Rfc3339,
    )
    .ok()
    .map(|t| (now - t).whole_milliseconds().max(0));
    let mut v = serde_json::to_value(&info).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("ephemeral".to_owned(), json!(doc.stat.ephemeral_owner != 0));
        obj.insert("in_sync".to_owned(), json!(applied >= generation));
        obj.insert(
            "lag_zxid".to_owned(),
            json!(generation.saturating_sub(applied)),
        );
        obj.insert("updated_ms_ago".to_owned(), json!(updated_ms_ago));
    }
    v
}
