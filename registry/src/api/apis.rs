//! APIs: drafts in the sandbox, imports that make drafts from a backend's protos, and the
//! publishing workflow (publish → history → rollback) into the live tree.

use super::{
    audit, check_name, json_response, raw_json_response, typed_from, validate_change, Body, Ctx,
    Reply, Route,
};
use crate::api::docs::{delete_doc, get_json, list_json};
use crate::error::{ApiError, ApiResult};
use crate::protos::{self, Analysis, ImportOptions};
use crate::server::Shared;
use crate::zk_store::{Env, Op, Precondition};
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use base64::Engine as _;
use portico_control::v1;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

pub fn routes() -> Vec<Route> {
    vec![
        // Published.
        Route::new(Method::GET, "/apis", "apis", "List published APIs", get(list_live))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::GET, "/apis/{id}", "apis", "Get a published API", get(get_live))
            .reply(Reply::Json(200, "ApiDefinition")),
        Route::new(Method::DELETE, "/apis/{id}", "apis", "Unpublish an API (its history is kept)", delete(unpublish))
            .reply(Reply::Empty)
            .conditional(),
        Route::new(Method::POST, "/apis/{id}/publish", "apis", "Publish the sandbox draft: validate it against the live tree, bump the version, keep it in history. If-Match applies to the live document", post(publish))
            .body(Body::Json("PublishRequest"))
            .reply(Reply::Json(200, "Published"))
            .conditional(),
        Route::new(Method::GET, "/apis/{id}/history", "apis", "List the published versions of an API", get(history))
            .reply(Reply::Json(200, "History")),
        Route::new(Method::GET, "/apis/{id}/history/{version}", "apis", "Get one published version of an API", get(history_version))
            .reply(Reply::Json(200, "ApiDefinition")),
        Route::new(Method::POST, "/apis/{id}/rollback", "apis", "Publish an earlier version again, as a new version", post(rollback))
            .body(Body::Json("RollbackRequest"))
            .reply(Reply::Json(200, "Published"))
            .conditional(),
        // Drafts.
        Route::new(Method::GET, "/sandbox/apis", "sandbox", "List draft APIs", get(list_drafts))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::POST, "/sandbox/apis", "sandbox", "Create a draft API (e.g. an HTTP-backend API defined directly)", post(create_draft))
            .body(Body::Json("ApiDefinition"))
            .reply(Reply::Json(201, "ApiDefinition")),
        Route::new(Method::GET, "/sandbox/apis/{id}", "sandbox", "Get a draft API", get(get_draft))
            .reply(Reply::Json(200, "ApiDefinition")),
        Route::new(Method::PUT, "/sandbox/apis/{id}", "sandbox", "Create or replace a draft API", put(put_draft))
            .body(Body::Json("ApiDefinition"))
            .reply(Reply::Json(200, "ApiDefinition"))
            .conditional(),
        Route::new(Method::DELETE, "/sandbox/apis/{id}", "sandbox", "Delete a draft API", delete(delete_draft))
            .reply(Reply::Empty)
            .conditional(),
        // Imports.
        Route::new(Method::POST, "/protos", "imports", "Compile .proto sources (JSON {files} or multipart) and make one draft per RPC with a google.api.http rule", post(import_protos))
            .body(Body::JsonOrMultipart("ProtoImport"))
            .reply(Reply::Json(200, "ImportResult")),
        Route::new(Method::POST, "/descriptors", "imports", "Upload a FileDescriptorSet (JSON with base64, or application/octet-stream with options in the query) and make drafts", post(import_descriptor_set))
            .body(Body::JsonOrBinary("DescriptorImport"))
            .reply(Reply::Json(200, "ImportResult"))
            .query("cluster", "octet-stream uploads: the drafts' cluster")
            .query("auth", "octet-stream uploads: signature or none")
            .query("timeout_ms", "octet-stream uploads: the drafts' backend deadline")
            .query("services", "octet-stream uploads: comma-separated service names to import"),
        Route::new(Method::POST, "/reflection", "imports", "Fetch a running backend's descriptors by gRPC server reflection and make drafts", post(import_reflection))
            .body(Body::Json("ReflectionImport"))
            .reply(Reply::Json(200, "ImportResult")),
    ]
}

fn api_rel(id: &str) -> String {
    format!("apis/{id}")
}

// ---- published --------------------------------------------------------------------------

async fn list_live(State(state): State<Shared>) -> ApiResult<Response> {
    list_json(&state, Env::Live, "apis").await
}

async fn get_live(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    get_json(
        &state,
        Env::Live,
        &api_rel(&id),
        &format!("published API {id:?}"),
    )
    .await
}

async fn unpublish(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    delete_doc(
        &state,
        &ctx,
        Env::Live,
        &api_rel(&id),
        true,
        "api.unpublish",
    )
    .await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishRequest {
    /// The live document's ETag this publish expects (as `If-Match`).
    #[serde(default)]
    expected_version: Option<i64>,
    /// Free text kept in the audit log.
    #[serde(default)]
    comment: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RollbackRequest {
    /// The published version to restore.
    version: u64,
    #[serde(default)]
    expected_version: Option<i64>,
    #[serde(default)]
    comment: Option<String>,
}

fn optional_body<T: for<'de> Deserialize<'de> + Default>(body: &Bytes, what: &str) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    Ok(super::parse_json::<T>(body, what)?.0)
}

async fn publish(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let req: PublishRequest = optional_body(&body, "publish")?;
    let draft = state
        .store
        .require(
            &Env::Sandbox.path(&api_rel(&id)),
            &format!("draft API {id:?} (sandbox/apis/{id})"),
        )
        .await?;
    let (_, value) = super::parse_json::<v1::ApiDefinition>(&draft.data, &format!("draft {id}"))?;
    let pre = ctx.precondition(req.expected_version)?;
    let published = write_version(
        &state,
        &ctx,
        &id,
        value,
        pre,
        "api.publish",
        json!({
            "draft_version": draft.stat.version,
            "comment": req.comment,
        }),
    )
    .await?;
    Ok(published)
}

async fn rollback(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let (req, _) = super::parse_json::<RollbackRequest>(&body, "rollback")?;
    let old = state
        .store
        .require(
            &format!("history/{id}/{}", req.version),
            &format!("version {} of API {id:?}", req.version),
        )
        .await?;
    let (_, value) = super::parse_json::<v1::ApiDefinition>(
        &old.data,
        &format!("history {id}/{}", req.version),
    )?;
    let pre = ctx.precondition(req.expected_version)?;
    write_version(
        &state,
        &ctx,
        &id,
        value,
        pre,
        "api.rollback",
        json!({
            "restored_version": req.version,
            "comment": req.comment,
        }),
    )
    .await
}

/// Writes `value` as the next published version of `id`: validated against the live tree,
/// `version` set to one more than any version so far, the live document and the history entry
/// (and the descriptor, if the live tree lacks it) written in one ZooKeeper transaction.
async fn write_version(
    state: &Shared,
    ctx: &Ctx,
    id: &str,
    mut value: Value,
    pre: Precondition,
    action: &str,
    mut detail: Value,
) -> ApiResult<Response> {
    let store = &state.store;
    let rel = api_rel(id);
    let live = store.get(&rel).await?;
    let current_version = live
        .as_ref()
        .and_then(|d| serde_json::from_slice::<Value>(&d.data).ok())
        .and_then(|v| v.get("version").and_then(Value::as_u64))
        .unwrap_or(0);
    let history = store.list(&format!("history/{id}")).await?;
    let max_history = history
        .iter()
        .filter_map(|v| v.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let next = current_version.max(max_history) + 1;
    let obj = value
        .as_object_mut()
        .ok_or_else(|| ApiError::invalid("the API document is not a JSON object", vec![]))?;
    obj.insert("id".to_owned(), Value::String(id.to_owned()));
    obj.insert("version".to_owned(), json!(next));
    let def: v1::ApiDefinition = typed_from(&value, "api")?;
    let data = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;

    // The descriptor a gRPC API needs must be in the live tree too.
    let mut changes = vec![(rel.clone(), Some(data.clone()))];
    let mut ops = Vec::new();
    if let Some(grpc) = &def.backend.grpc {
        check_name("backend.grpc.descriptor", &grpc.descriptor)?;
        let drel = format!("descriptors/{}", grpc.descriptor);
        if store.stat(&drel).await?.is_none() {
            let sandbox = store.get(&Env::Sandbox.path(&drel)).await?.ok_or_else(|| {
                ApiError::invalid(
                    format!(
                        "backend.grpc.descriptor: no descriptor {} in the live tree or the sandbox",
                        grpc.descriptor
                    ),
                    vec![crate::error::Detail {
                        path: Some(rel.clone()),
                        field: Some("backend.grpc.descriptor".to_owned()),
                        reason: "descriptor not found".to_owned(),
                    }],
                )
            })?;
            changes.push((drel.clone(), Some(sandbox.data.clone())));
            ops.push(Op::Create {
                rel: drel,
                data: sandbox.data,
            });
        }
    }
    validate_change(state, Env::Live, &changes).await?;

    // Compare-and-set against what was read (or what the caller expects).
    let expected = match pre {
        Precondition::Version(v) => Some(v),
        Precondition::Absent => {
            if live.is_some() {
                return Err(ApiError::conflict(format!(
                    "API {id:?} is already published"
                )));
            }
            None
        }
        Precondition::Any => live.as_ref().map(|d| d.stat.version),
    };
    match (expected, &live) {
        (Some(v), Some(_)) => ops.push(Op::Set {
            rel: rel.clone(),
            data: data.clone(),
            version: v,
        }),
        (Some(_), None) => {
            return Err(ApiError::conflict(format!(
                "API {id:?} is not published (it was deleted?): read it again"
            )))
        }
        (None, _) => ops.push(Op::Create {
            rel: rel.clone(),
            data: data.clone(),
        }),
    }
    store.ensure_dir(&format!("history/{id}")).await?;
    if ops
        .iter()
        .any(|op| matches!(op, Op::Create { rel, .. } if rel.starts_with("descriptors/")))
    {
        store.ensure_dir("descriptors").await?;
    }
    store.ensure_dir("apis").await?;
    ops.push(Op::Create {
        rel: format!("history/{id}/{next}"),
        data: data.clone(),
    });
    store.multi(&ops).await.map_err(|e| {
        if e.code == "CONFLICT" {
            ApiError::conflict(format!(
                "API {id:?} was published or changed concurrently; read it again and retry ({})",
                e.message
            ))
        } else {
            e
        }
    })?;
    let stat = store
        .stat(&rel)
        .await?
        .ok_or_else(|| ApiError::conflict(format!("API {id:?} vanished right after publishing")))?;
    if let Some(d) = detail.as_object_mut() {
        d.insert("version".to_owned(), json!(next));
        d.insert("previous_version".to_owned(), json!(current_version));
    }
    audit(state, ctx, &ctx.actor(None), action, &rel, detail).await;
    let body = json!({
        "id": id,
        "version": next,
        "etag": stat.version.to_string(),
        "document": value,
    });
    Ok(json_response(StatusCode::OK, &body, Some(&stat)))
}

async fn history(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let names = state.store.list(&format!("history/{id}")).await?;
    let mut versions: Vec<u64> = names.iter().filter_map(|n| n.parse().ok()).collect();
    versions.sort_unstable();
    if versions.is_empty() {
        return Err(ApiError::not_found(format!(
            "API {id:?} has never been published"
        )));
    }
    let live = state.store.get(&api_rel(&id)).await?;
    let live_version = live
        .as_ref()
        .and_then(|d| serde_json::from_slice::<Value>(&d.data).ok())
        .and_then(|v| v.get("version").and_then(Value::as_u64));
    let mut items = Vec::new();
    for v in versions {
        if let Some(stat) = state.store.stat(&format!("history/{id}/{v}")).await? {
            items.push(json!({
                "version": v,
                "published_at": portico_control::clock::rfc3339_ms(stat.ctime),
                "live": live_version == Some(v),
            }));
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"id": id, "live_version": live_version, "versions": items}),
        None,
    ))
}

async fn history_version(
    State(state): State<Shared>,
    Path((id, version)): Path<(String, u64)>,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let doc = state
        .store
        .require(
            &format!("history/{id}/{version}"),
            &format!("version {version} of API {id:?}"),
        )
        .await?;
    Ok(raw_json_response(StatusCode::OK, doc.data, Some(&doc.stat)))
}

// ---- drafts -----------------------------------------------------------------------------

async fn list_drafts(State(state): State<Shared>) -> ApiResult<Response> {
    list_json(&state, Env::Sandbox, "apis").await
}

async fn get_draft(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    get_json(
        &state,
        Env::Sandbox,
        &api_rel(&id),
        &format!("draft API {id:?}"),
    )
    .await
}

/// Checks a draft body: JSON object fitting ApiDefinition, `id` equal to the path's (filled in
/// when absent).
fn draft_value(body: &[u8], id: Option<&str>) -> ApiResult<(String, Value)> {
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("api: not valid JSON: {e}")))?;
    let obj = value
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("api: must be a JSON object"))?;
    let body_id = obj.get("id").and_then(Value::as_str).map(str::to_owned);
    let id = match (id, body_id) {
        (Some(path_id), Some(b)) if b != path_id => {
            return Err(ApiError::invalid(
                format!("api: id {b:?} differs from the id in the path {path_id:?}"),
                vec![crate::error::Detail {
                    path: None,
                    field: Some("id".to_owned()),
                    reason: "must equal the path's id".to_owned(),
                }],
            ))
        }
        (Some(path_id), _) => path_id.to_owned(),
        (None, Some(b)) => b,
        (None, None) => return Err(ApiError::bad_request("api: the body needs an `id`")),
    };
    check_name("api id", &id)?;
    obj.insert("id".to_owned(), Value::String(id.clone()));
    obj.entry("version").or_insert(json!(0));
    let _: v1::ApiDefinition = typed_from(&value, "api")?;
    Ok((id, value))
}

async fn create_draft(State(state): State<Shared>, ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let (id, value) = draft_value(&body, None)?;
    super::docs::write_json(
        &state,
        &ctx,
        Env::Sandbox,
        &api_rel(&id),
        &value,
        Precondition::Absent,
        "draft.create",
        &ctx.actor(None),
    )
    .await
}

async fn put_draft(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let (id, value) = draft_value(&body, Some(&id))?;
    let pre = ctx.precondition(None)?;
    super::docs::write_json(
        &state,
        &ctx,
        Env::Sandbox,
        &api_rel(&id),
        &value,
        pre,
        "draft.put",
        &ctx.actor(None),
    )
    .await
}

async fn delete_draft(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    delete_doc(
        &state,
        &ctx,
        Env::Sandbox,
        &api_rel(&id),
        true,
        "draft.delete",
    )
    .await
}

// ---- imports ----------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct ProtoImport {
    files: BTreeMap<String, String>,
    #[serde(flatten)]
    options: ImportOptions,
}

#[derive(Debug, Deserialize)]
struct DescriptorImport {
    /// The encoded FileDescriptorSet, base64 (standard alphabet).
    descriptor_set: String,
    #[serde(flatten)]
    options: ImportOptions,
}

#[derive(Debug, Deserialize)]
struct ReflectionImport {
    /// The backend's gRPC address, `host:port`.
    addr: String,
    #[serde(flatten)]
    options: ImportOptions,
}

fn content_type(req: &Request) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn options_from_fields(fields: &HashMap<String, String>) -> ApiResult<ImportOptions> {
    let mut options = ImportOptions {
        cluster: fields.get("cluster").cloned(),
        ..ImportOptions::default()
    };
    if let Some(auth) = fields.get("auth") {
        options.auth = Some(match auth.as_str() {
            "signature" => v1::AuthMode::Signature,
            "none" => v1::AuthMode::None,
            other => {
                return Err(ApiError::bad_request(format!(
                    "auth: {other:?} is not signature or none"
                )))
            }
        });
    }
    if let Some(t) = fields.get("timeout_ms") {
        options.timeout_ms =
            Some(t.parse().map_err(|_| {
                ApiError::bad_request(format!("timeout_ms: {t:?} is not a number"))
            })?);
    }
    if let Some(s) = fields.get("services") {
        options.services = Some(
            s.split(',')
                .map(|x| x.trim().to_owned())
                .filter(|x| !x.is_empty())
                .collect(),
        );
    }
    if let Some(ids) = fields.get("ids") {
        options.ids = serde_json::from_str(ids).map_err(|e| {
            ApiError::bad_request(format!("ids: not a JSON object of strings: {e}"))
        })?;
    }
    Ok(options)
}

async fn import_protos(State(state): State<Shared>, ctx: Ctx, req: Request) -> ApiResult<Response> {
    let (files, options) = if content_type(&req).starts_with("multipart/form-data") {
        let mut multipart = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart: {e}")))?;
        let mut files = BTreeMap::new();
        let mut fields = HashMap::new();
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart: {e}")))?
        {
            let name = field.name().unwrap_or("").to_owned();
            let file_name = field.file_name().map(str::to_owned);
            let text = field
                .text()
                .await
                .map_err(|e| ApiError::bad_request(format!("multipart part {name:?}: {e}")))?;
            match file_name {
                Some(f) if f.ends_with(".proto") => {
                    // The part name may carry the import path (`demo/order.proto`).
                    let path = if name.ends_with(".proto") { name } else { f };
                    files.insert(path, text);
                }
                _ if name.ends_with(".proto") => {
                    files.insert(name, text);
                }
                _ => {
                    fields.insert(name, text);
                }
            }
        }
        (files, options_from_fields(&fields)?)
    } else {
        let body = Bytes::from_request(req, &())
            .await
            .map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
        let (import, _) = super::parse_json::<ProtoImport>(&body, "proto import")?;
        (import.files, import.options)
    };
    let bytes = protos::compile_sources(&files)?;
    let analysis = protos::analyze(&bytes, options.services.as_deref())?;
    let source = json!({"kind": "protos", "files": files.keys().collect::<Vec<_>>()});
    make_drafts(&state, &ctx, analysis, options, source).await
}

async fn import_descriptor_set(
    State(state): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    ctx: Ctx,
    req: Request,
) -> ApiResult<Response> {
    let json_body = content_type(&req).starts_with("application/json");
    let body = Bytes::from_request(req, &())
        .await
        .map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    let (bytes, options) = if json_body {
        let (import, _) = super::parse_json::<DescriptorImport>(&body, "descriptor import")?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(import.descriptor_set.trim())
            .map_err(|e| ApiError::bad_request(format!("descriptor_set: not base64: {e}")))?;
        (bytes, import.options)
    } else {
        (body.to_vec(), options_from_fields(&query)?)
    };
    if bytes.is_empty() {
        return Err(ApiError::bad_request("the FileDescriptorSet is empty"));
    }
    let analysis = protos::analyze(&bytes, options.services.as_deref())?;
    make_drafts(
        &state,
        &ctx,
        analysis,
        options,
        json!({"kind": "descriptor_set"}),
    )
    .await
}

async fn import_reflection(
    State(state): State<Shared>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (import, _) = super::parse_json::<ReflectionImport>(&body, "reflection import")?;
    let bytes =
        protos::fetch_by_reflection(&import.addr, import.options.services.as_deref()).await?;
    let analysis = protos::analyze(&bytes, import.options.services.as_deref())?;
    make_drafts(
        &state,
        &ctx,
        analysis,
        import.options,
        json!({"kind": "reflection", "addr": import.addr}),
    )
    .await
}

/// Stores the descriptor in the sandbox and writes one draft per RPC with an HTTP rule.
async fn make_drafts(
    state: &Shared,
    ctx: &Ctx,
    analysis: Analysis,
    options: ImportOptions,
    source: Value,
) -> ApiResult<Response> {
    let cluster = options
        .cluster
        .clone()
        .ok_or_else(|| ApiError::bad_request("cluster: required (the cluster the drafts call)"))?;
    check_name("cluster", &cluster)?;
    let mut planned = Vec::new();
    for rule in &analysis.methods {
        let id = protos::id_for(rule, &options);
        check_name("api id", &id)?;
        if planned.iter().any(|(other, _): &(String, _)| *other == id) {
            return Err(ApiError::bad_request(format!(
                "two RPCs would get the API id {id:?}: name them with `ids`"
            )));
        }
        planned.push((id, rule));
    }
    let store = &state.store;
    let drel = Env::Sandbox.path(&format!("descriptors/{}", analysis.sha256));
    if store.stat(&drel).await?.is_none() {
        match store
            .put(&drel, &analysis.bytes, Precondition::Absent)
            .await
        {
            Ok(_) => {}
            Err(e) if e.code == "CONFLICT" => {}
            Err(e) => return Err(e),
        }
    }
    let mut drafts = Vec::new();
    for (id, rule) in planned {
        let rel = Env::Sandbox.path(&api_rel(&id));
        let existing = store.get(&rel).await?;
        let existing_def = existing
            .as_ref()
            .and_then(|d| serde_json::from_slice::<v1::ApiDefinition>(&d.data).ok());
        let def = protos::draft_for(
            &id,
            rule,
            &analysis.sha256,
            &cluster,
            &options,
            existing_def.as_ref(),
        );
        let data = serde_json::to_vec(&def).map_err(|e| ApiError::internal(e.to_string()))?;
        let pre = match &existing {
            Some(d) => Precondition::Version(d.stat.version),
            None => Precondition::Absent,
        };
        let written = store.put(&rel, &data, pre).await?;
        drafts.push(json!({
            "id": id,
            "rpc": format!("{}/{}", rule.service, rule.method),
            "created": written.created,
            "etag": written.stat.version.to_string(),
            "http": def.http,
        }));
    }
    // How the drafts fare in the sandbox as it is (a missing sandbox cluster, say).
    let tree = store.tree(Env::Sandbox).await?;
    let snapshot = portico_control::build_snapshot(&tree, None);
    let problems: Vec<Value> = snapshot
        .rejected
        .iter()
        .filter(|r| {
            drafts
                .iter()
                .any(|d| d["id"].as_str().is_some_and(|id| r.path == api_rel(id)))
        })
        .map(|r| json!({"path": Env::Sandbox.path(&r.path), "reason": r.reason}))
        .collect();
    audit(
        state,
        ctx,
        &ctx.actor(None),
        "api.import",
        &drel,
        json!({"source": source, "drafts": drafts.iter().map(|d| d["id"].clone()).collect::<Vec<_>>()}),
    )
    .await;
    let body = json!({
        "descriptor": analysis.sha256,
        "descriptor_bytes": analysis.bytes.len(),
        "services": analysis.services,
        "drafts": drafts,
        "skipped": analysis.skipped,
        "problems": problems,
    });
    Ok(json_response(StatusCode::OK, &body, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_ids_checked() {
        let body = br#"{"id":"a","http":{"method":"GET","path":"/a"},"backend":{"cluster":"c","http":{}}}"#;
        assert_eq!(draft_value(body, Some("a")).unwrap().0, "a");
        assert!(draft_value(body, Some("b")).is_err());
        let no_id = br#"{"http":{"method":"GET","path":"/a"},"backend":{"cluster":"c","http":{}}}"#;
        let (id, v) = draft_value(no_id, Some("x")).unwrap();
        assert_eq!(id, "x");
        assert_eq!(v["id"], "x");
        let e = draft_value(
            br#"{"id":"a","http":{"method":"GET"},"backend":{"cluster":"c"}}"#,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert!(e.message.contains("http"), "{}", e.message);
    }
}
