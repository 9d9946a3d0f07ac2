//! The whole tree as the directory of docs/OPERATIONS.md ("The configuration tree"): exported
//! as file path → content, and imported from the same shape (validated as a whole), for
//! bootstrapping and migrating a standalone tree.

use super::audit::audit;
use super::context::Ctx;
use super::reply::json_response;
use super::validation::{validate_change, Change};
use crate::error::{ApiError, ApiResult};
use crate::route::{Body, Param, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use base64::Engine as _;
use portico_control::DocKind;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

/// `?env`: the tree an export reads or an import writes.
const ENV: Param = Param::OneOf(&["live", "sandbox"]);

/// The routes of export and import.
pub fn routes() -> Vec<Route> {
    vec![
        Route::new(Method::GET, "/export", "ops", "The tree as a configuration directory (docs/OPERATIONS.md): file path → content (UTF-8 JSON text, or base64 for descriptors)", get(export))
            .reply(Reply::Json(200, "Export"))
            .query_as("env", "live (default) or sandbox", ENV)
            .query_as("include_secrets", "true to include app secrets (audited); by default each app's secret is replaced by \"<redacted>\" (docs/SECURITY.md, \"Control plane (ZooKeeper)\")", Param::OneOf(&["true", "false"])),
        Route::new(Method::POST, "/import", "ops", "Write a configuration directory (the export's shape: file path → content) into the tree, validated as a whole the way gateways will; for bootstrapping and migrating a standalone tree", post(import))
            .body(Body::Json("Export"))
            .reply(Reply::Json(200, "Imported"))
            .query_as("env", "live (default) or sandbox", ENV),
    ]
}

/// `?env=live` (the default) or `?env=sandbox`.
fn env_param(q: &HashMap<String, String>) -> ApiResult<Env> {
    match q.get("env").map(String::as_str) {
        None | Some("live") => Ok(Env::Live),
        Some("sandbox") => Ok(Env::Sandbox),
        Some(other) => Err(ApiError::bad_request(format!(
            "env: {other:?} is not live or sandbox"
        ))),
    }
}

/// What replaces an app's secret in an export without `include_secrets=true`; an import
/// refuses it.
pub const REDACTED_SECRET: &str = "<redacted>";

/// `?include_secrets=true|false` (default false).
fn include_secrets_param(q: &HashMap<String, String>) -> ApiResult<bool> {
    match q.get("include_secrets").map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "include_secrets: {other:?} is not true or false"
        ))),
    }
}

/// An app document with its secret replaced by [`REDACTED_SECRET`] (unchanged if it is not
/// a JSON object with a secret).
fn redact_app(bytes: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(mut doc)) if doc.contains_key("secret") => {
            doc.insert("secret".to_owned(), json!(REDACTED_SECRET));
            serde_json::to_vec_pretty(&doc).unwrap_or_default()
        }
        _ => bytes.to_vec(),
    }
}

async fn export(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    ctx: Ctx,
) -> ApiResult<Response> {
    let env = env_param(&q)?;
    let include_secrets = include_secrets_param(&q)?;
    let tree = state.store.tree(env).await?;
    let mut files = BTreeMap::new();
    let mut apps = 0usize;
    for (path, bytes) in &tree.docs {
        let Some((kind, _)) = DocKind::classify(path) else {
            continue;
        };
        let file = format!("{path}.{}", kind.file_ext());
        let redacted;
        let bytes = if kind == DocKind::App {
            apps += 1;
            if include_secrets {
                bytes
            } else {
                redacted = redact_app(bytes);
                &redacted
            }
        } else {
            bytes
        };
        let entry = match (kind, std::str::from_utf8(bytes)) {
            (DocKind::Descriptor, _) | (_, Err(_)) => json!({
                "encoding": "base64",
                "content": base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
            (_, Ok(text)) => json!({"encoding": "utf-8", "content": text}),
        };
        files.insert(file, entry);
    }
    // Who exported what, and whether the secrets left with it (docs/SECURITY.md).
    let detail = json!({
        "include_secrets": include_secrets,
        "apps": apps,
        "files": files.len(),
        "generation": tree.generation,
    });
    audit(
        &state,
        &ctx,
        &ctx.actor(None),
        "tree.export",
        env.name(),
        detail,
    )
    .await;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "env": env.name(),
            "generation": tree.generation,
            "secrets": if include_secrets { "included" } else { "redacted" },
            "files": files,
        }),
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

/// The bytes of one exported file: a string is UTF-8 text; an object has `encoding`
/// (`utf-8`, the default, or `base64`) and `content`.
fn file_bytes(file: &str, entry: &Value) -> ApiResult<Vec<u8>> {
    let (encoding, content) = match entry {
        Value::String(text) => ("utf-8", text.as_str()),
        other => (
            other["encoding"].as_str().unwrap_or("utf-8"),
            other["content"].as_str().unwrap_or_default(),
        ),
    };
    match encoding {
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(content)
            .map_err(|e| ApiError::bad_request(format!("import: {file}: bad base64: {e}"))),
        "utf-8" => Ok(content.as_bytes().to_vec()),
        other => Err(ApiError::bad_request(format!(
            "import: {file}: unknown encoding {other:?} (utf-8 or base64)"
        ))),
    }
}

/// The changes an import's `files` make (400 for a file that is not a document of the tree).
fn changes_of(files: &Map<String, Value>) -> ApiResult<Vec<Change>> {
    let mut changes = Vec::with_capacity(files.len());
    for (file, entry) in files {
        let rel = tree_path_of(file).ok_or_else(|| {
            ApiError::bad_request(format!(
                "import: {file:?} is not a document of the tree (apis/<id>.json, clusters/<name>.json, apps/<key>.json, switches/<id>.json, ipacl.json, descriptors/<sha256>.pb)"
            ))
        })?;
        let bytes = file_bytes(file, entry)?;
        if rel.starts_with("apps/") && redacted_secret(&bytes) {
            return Err(ApiError::bad_request(format!(
                "import: {file}: the secret was redacted by the export; export with include_secrets=true (or set the secret) to import apps"
            )));
        }
        changes.push((rel, Some(bytes)));
    }
    Ok(changes)
}

/// Whether an app document carries [`REDACTED_SECRET`] as its secret.
fn redacted_secret(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes)
        .is_ok_and(|doc| doc.get("secret").and_then(Value::as_str) == Some(REDACTED_SECRET))
}

/// Where a document goes in the write order: descriptors and clusters first, so a gateway
/// reading mid-import never sees an API whose references are missing (it would reject the API
/// until the next read).
fn write_rank(rel: &str) -> u8 {
    match DocKind::classify(rel).map(|(k, _)| k) {
        Some(DocKind::Descriptor) => 0,
        Some(DocKind::Cluster) => 1,
        Some(DocKind::IpAcl) | Some(DocKind::App) => 2,
        Some(DocKind::Topic) => 3,
        Some(DocKind::Api) => 4,
        _ => 5,
    }
}

async fn import(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let env = env_param(&q)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("import: not valid JSON: {e}")))?;
    let files = value["files"]
        .as_object()
        .ok_or_else(|| ApiError::bad_request("import: a `files` object is required"))?;
    let mut changes = changes_of(files)?;
    if changes.is_empty() {
        return Err(ApiError::bad_request("import: no files"));
    }
    // Validated as a whole: every imported document must be accepted, and nothing accepted now
    // may be rejected after.
    validate_change(&state, env, &changes).await?;
    changes.sort_by_key(|(rel, _)| write_rank(rel));
    let mut written = Vec::with_capacity(changes.len());
    for (rel, bytes) in &changes {
        if let Some(bytes) = bytes {
            let path = env.path(rel);
            state.store.put(&path, bytes, Precondition::Any).await?;
            written.push(rel.clone());
        }
    }
    let detail = json!({"documents": written});
    audit(
        &state,
        &ctx,
        &ctx.actor(None),
        "tree.import",
        env.name(),
        detail,
    )
    .await;
    Ok(json_response(
        StatusCode::OK,
        &json!({"env": env.name(), "imported": written}),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn imported_files_decode_and_order_for_gateways() {
        let files = json!({
            "apis/a.json": "{}",
            "clusters/c.json": {"encoding": "utf-8", "content": "{\"x\":1}"},
            "descriptors/ab.pb": {"encoding": "base64", "content": "AAE="},
        });
        let mut changes = changes_of(files.as_object().unwrap()).unwrap();
        changes.sort_by_key(|(rel, _)| write_rank(rel));
        let order: Vec<&str> = changes.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(order, ["descriptors/ab", "clusters/c", "apis/a"]);
        assert_eq!(changes[0].1.as_deref(), Some(&[0u8, 1][..]));
        assert_eq!(changes[1].1.as_deref(), Some(&b"{\"x\":1}"[..]));
        let bad = json!({"apis/a.json": {"encoding": "rot13", "content": ""}});
        assert!(changes_of(bad.as_object().unwrap()).is_err());
        let stray = json!({"README.md": "hi"});
        assert!(changes_of(stray.as_object().unwrap()).is_err());
    }
}
