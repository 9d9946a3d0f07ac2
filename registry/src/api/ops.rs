//! Operations: health, the OpenAPI document, the audit log, live gateway nodes, export.

use super::{audit, json_response, validate_change, Body, Ctx, Reply, Route};
use crate::error::{ApiError, ApiResult};
use crate::server::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
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
        Route::new(Method::POST, "/import", "ops", "Write a §3.3 directory (the export's shape: file path → content) into the tree, validated as a whole the way gateways will; for bootstrapping and migrating a standalone tree", post(import_tree))
            .body(Body::Json("Export"))
            .reply(Reply::Json(200, "Any"))
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

/// The tree path of an exported file path: `apis/x.json` → `apis/x`, `descriptors/<sha>.pb`
/// → `descriptors/<sha>`, `ipacl.json` → `ipacl`; `None` for anything else.
fn tree_path_of(file: &str) -> Option<String> {
    let rel = file
        .strip_suffix(".json")
        .or_else(|| file.strip_suffix(".pb"))?;
    let (kind, _) = DocKind::classify(rel)?;
    (file.ends_with(kind.file_ext())).then(|| rel.to_owned())
}

async fn import_tree(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    ctx: Ctx,
    body: Bytes,
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
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("import: not valid JSON: {e}")))?;
    let files = value["files"]
        .as_object()
        .ok_or_else(|| ApiError::bad_request("import: a `files` object is required"))?;
    let mut changes: Vec<(String, Option<Vec<u8>>)> = Vec::with_capacity(files.len());
    for (file, entry) in files {
        let rel = tree_path_of(file).ok_or_else(|| {
            ApiError::bad_request(format!(
                "import: {file:?} is not a document of the tree (apis/<id>.json, clusters/<name>.json, apps/<key>.json, switches/<id>.json, ipacl.json, descriptors/<sha256>.pb)"
            ))
        })?;
        let (encoding, content) = match entry {
            Value::String(text) => ("utf-8", text.as_str()),
            other => (
                other["encoding"].as_str().unwrap_or("utf-8"),
                other["content"].as_str().unwrap_or_default(),
            ),
        };
        let bytes = match encoding {
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| ApiError::bad_request(format!("import: {file}: bad base64: {e}")))?,
            "utf-8" => content.as_bytes().to_vec(),
            other => {
                return Err(ApiError::bad_request(format!(
                    "import: {file}: unknown encoding {other:?} (utf-8 or base64)"
                )))
            }
        };
        changes.push((rel, Some(bytes)));
    }
    if changes.is_empty() {
        return Err(ApiError::bad_request("import: no files"));
    }
    // Validated as a whole: every imported document must be accepted, and nothing accepted now
    // may be rejected after.
    validate_change(&state, env, &changes).await?;
    // Descriptors and clusters first, so a gateway reading mid-import never sees an API whose
    // references are missing (it would reject the API until the next read).
    changes.sort_by_key(|(rel, _)| match DocKind::classify(rel).map(|(k, _)| k) {
        Some(DocKind::Descriptor) => 0,
        Some(DocKind::Cluster) => 1,
        Some(DocKind::IpAcl) | Some(DocKind::App) => 2,
        Some(DocKind::Api) => 3,
        _ => 4,
    });
    let mut written = Vec::with_capacity(changes.len());
    for (rel, bytes) in &changes {
        if let Some(bytes) = bytes {
            state
                .store
                .put(&env.path(rel), bytes, Precondition::Any)
                .await?;
            written.push(rel.clone());
        }
    }
    let actor = ctx.actor(None);
    audit(
        &state,
        &ctx,
        &actor,
        "tree.import",
        env.name(),
        json!({"documents": written}),
    )
    .await;
    Ok(json_response(
        StatusCode::OK,
        &json!({"env": env.name(), "imported": written}),
        None,
    ))
}

#[cfg(test)]
mod import_tests {
    use super::tree_path_of;

    #[test]
    fn file_paths_map_to_tree_paths() {
        assert_eq!(
            tree_path_of("apis/order.get.json").as_deref(),
            Some("apis/order.get")
        );
        assert_eq!(tree_path_of("ipacl.json").as_deref(), Some("ipacl"));
        assert_eq!(
            tree_path_of("descriptors/ab.pb").as_deref(),
            Some("descriptors/ab")
        );
        assert_eq!(tree_path_of("descriptors/ab.json"), None);
        assert_eq!(tree_path_of("apis/x.pb"), None);
        assert_eq!(tree_path_of("nodes/gw.json"), None);
        assert_eq!(tree_path_of("VERSION"), None);
    }
}
