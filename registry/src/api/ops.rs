//! Operations: health, the OpenAPI document, the audit log, live gateway nodes, export.

use super::{json_response, Reply, Route};
use crate::error::{ApiError, ApiResult};
use crate::server::Shared;
use crate::store::Env;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use base64::Engine as _;
use portico_control::zk::NodeInfo;
use portico_control::DocKind;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

pub fn routes() -> Vec<Route> {
    vec![
        Route::new(Method::GET, "/openapi.json", "meta", "This OpenAPI 3 document", get(openapi))
            .reply(Reply::Json(200, "Any"))
            .public(),
        Route::new(Method::GET, "/health", "meta", "Liveness and ZooKeeper reachability", get(health))
            .reply(Reply::Json(200, "Health"))
            .public(),
        Route::new(Method::GET, "/audit", "ops", "The audit log, newest first", get(audit_log))
            .reply(Reply::Json(200, "AuditLog"))
            .query("limit", "entries to return (default 100, at most 1000)")
            .query("before", "only entries older than this entry id (for paging)"),
        Route::new(Method::GET, "/nodes", "ops", "Live gateway nodes with their applied config version and lag", get(nodes))
            .reply(Reply::Json(200, "Nodes")),
        Route::new(Method::GET, "/export", "ops", "The tree as the §3.3 directory: file path → content (UTF-8 JSON text, or base64 for descriptors)", get(export))
            .reply(Reply::Json(200, "Export"))
            .query("env", "live (default) or sandbox"),
    ]
}

async fn openapi() -> Response {
    json_response(StatusCode::OK, &crate::openapi::document(), None)
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

async fn audit_log(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let limit = match q.get("limit") {
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request(format!("limit: {l:?} is not a number")))?
            .clamp(1, 1000),
        None => 100,
    };
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

async fn nodes(State(state): State<Shared>) -> ApiResult<Response> {
    let tree = state.store.tree(Env::Live).await?;
    let generation = tree.generation;
    let digest = portico_control::build_snapshot(&tree, None).version.digest;
    let docs = state.store.list_docs("nodes").await?;
    let now = time::OffsetDateTime::now_utc();
    let mut nodes = Vec::new();
    for (name, doc) in docs {
        let info: NodeInfo = match serde_json::from_slice(&doc.data) {
            Ok(info) => info,
            Err(e) => {
                nodes.push(
                    json!({"node_id": name, "error": format!("unreadable node document: {e}")}),
                );
                continue;
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
        nodes.push(v);
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"generation": generation, "digest": digest, "nodes": nodes}),
        None,
    ))
}

async fn export(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let env = match q.get("env").map(String::as_str) {
        None | Some("live") => Env::Live,
        Some("sandbox") => Env::Sandbox,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "env: {other:?} is not live or sandbox"
            )))
        }
    };
    let tree = state.store.tree(env).await?;
    let mut files = BTreeMap::new();
    for (path, bytes) in &tree.docs {
        let Some((kind, _)) = DocKind::classify(path) else {
            continue;
        };
        let file = format!("{path}.{}", kind.file_ext());
        let entry = match (kind, std::str::from_utf8(bytes)) {
            (DocKind::Descriptor, _) | (_, Err(_)) => json!({
                "encoding": "base64",
                "content": base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
            (_, Ok(text)) => json!({"encoding": "utf-8", "content": text}),
        };
        files.insert(file, entry);
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"env": env.name(), "generation": tree.generation, "files": files}),
        None,
    ))
}
