//! Published APIs (`apis/<id>` in the live tree) and their history (`history/<id>/<version>`):
//! publish a sandbox draft, roll back to an earlier version, unpublish, and read both.

use super::paths::{api_rel, history_dir, history_rel};
use crate::api::audit::audit;
use crate::api::context::Ctx;
use crate::api::documents::{delete_doc, get_json};
use crate::api::reply::{json_response, raw_json_response};
use crate::api::validation::{validate_change, Change};
use crate::error::{ApiError, ApiResult, Detail};
use crate::input::{check_name, parse_json, typed_document};
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Doc, Env, Op, Precondition, Store};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, post};
use portico_control::v1;
use serde::Deserialize;
use serde_json::{json, Value};

/// The routes of published APIs and their history.
pub fn routes() -> Vec<Route> {
    vec![
        Route::new(Method::GET, "/apis", "apis", "List published APIs; each item's `served` says whether the live gateways serve it: `{nodes, refused: [{node_id, reason, kept_previous}]}`", get(list))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::GET, "/apis/{id}", "apis", "Get a published API", get(read))
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
    ]
}

async fn list(State(state): State<Shared>) -> ApiResult<Response> {
    super::drafts::list_served(&state, Env::Live).await
}

async fn read(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let what = format!("published API {id:?}");
    get_json(&state, Env::Live, &api_rel(&id), &what).await
}

/// Deletes the live document; its history stays, so it can be published again.
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

/// A body that may be empty (then `T::default()`).
fn optional_body<T: for<'de> Deserialize<'de> + Default>(body: &Bytes, what: &str) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    Ok(parse_json::<T>(body, what)?.0)
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
    let (_, value) = parse_json::<v1::ApiDefinition>(&draft.data, &format!("draft {id}"))?;
    let pre = ctx.precondition(req.expected_version)?;
    if let Some(unchanged) = unchanged_publish(&state, &id, &value, pre).await? {
        return Ok(unchanged);
    }
    let detail = json!({
        "draft_version": draft.stat.version,
        "comment": req.comment,
    });
    write_version(&state, &ctx, &id, value, pre, ("api.publish", detail)).await
}

/// A publish of a draft identical to the live version (but for `version`) is a no-op: no new
/// version, no history entry, no audit entry, no change for gateways to apply. Answers 200
/// with the live version and `"unchanged": true`; `None` when there is something to publish
/// (or the precondition fails, which the write reports).
async fn unchanged_publish(
    state: &Shared,
    id: &str,
    draft: &Value,
    pre: Precondition,
) -> ApiResult<Option<Response>> {
    let rel = api_rel(id);
    let Some(live) = state.store.get(&rel).await? else {
        return Ok(None);
    };
    let fits = match pre {
        Precondition::Any => true,
        Precondition::Version(v) => v == live.stat.version,
        Precondition::Absent => false,
    };
    let Ok(live_value) = serde_json::from_slice::<Value>(&live.data) else {
        return Ok(None);
    };
    let content = |v: &Value| {
        let mut v = v.clone();
        if let Some(obj) = v.as_object_mut() {
            obj.remove("version");
            obj.insert("id".to_owned(), Value::String(id.to_owned()));
        }
        v
    };
    if !fits || content(draft) != content(&live_value) {
        return Ok(None);
    }
    let body = json!({
        "id": id,
        "version": live_value.get("version").cloned().unwrap_or(Value::Null),
        "etag": live.stat.version.to_string(),
        "unchanged": true,
        "document": live_value,
    });
    Ok(Some(json_response(StatusCode::OK, &body, Some(&live.stat))))
}

async fn rollback(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let (req, _) = parse_json::<RollbackRequest>(&body, "rollback")?;
    let old = state
        .store
        .require(
            &history_rel(&id, req.version),
            &format!("version {} of API {id:?}", req.version),
        )
        .await?;
    let what = format!("history {id}/{}", req.version);
    let (_, value) = parse_json::<v1::ApiDefinition>(&old.data, &what)?;
    let pre = ctx.precondition(req.expected_version)?;
    let detail = json!({
        "restored_version": req.version,
        "comment": req.comment,
    });
    write_version(&state, &ctx, &id, value, pre, ("api.rollback", detail)).await
}

/// The `version` field of a stored API document, if it has one.
fn version_of(doc: Option<&Doc>) -> Option<u64> {
    doc.and_then(|d| serde_json::from_slice::<Value>(&d.data).ok())
        .and_then(|v| v.get("version").and_then(Value::as_u64))
}

/// Writes `value` as the next published version of `id`: validated against the live tree,
/// `version` set to one more than any version so far, the live document and the history entry
/// (and the descriptor, if the live tree lacks it) written in one ZooKeeper transaction.
/// `audit` is the audit log's action and detail.
async fn write_version(
    state: &Shared,
    ctx: &Ctx,
    id: &str,
    mut value: Value,
    pre: Precondition,
    (action, mut detail): (&str, Value),
) -> ApiResult<Response> {
    let store = &state.store;
    let rel = api_rel(id);
    let live = store.get(&rel).await?;
    let current_version = version_of(live.as_ref()).unwrap_or(0);
    let history = store.list(&history_dir(id)).await?;
    let max_history = history.iter().filter_map(|v| v.parse::<u64>().ok()).max();
    let next = current_version.max(max_history.unwrap_or(0)) + 1;
    let obj = value
        .as_object_mut()
        .ok_or_else(|| ApiError::invalid("the API document is not a JSON object", vec![]))?;
    obj.insert("id".to_owned(), Value::String(id.to_owned()));
    obj.insert("version".to_owned(), json!(next));
    let def: v1::ApiDefinition = typed_document(&value, "api")?;
    let data = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;

    let mut changes: Vec<Change> = vec![(rel.clone(), Some(data.clone()))];
    let mut ops = Vec::new();
    if let Some((change, op)) = missing_descriptor(store, &rel, &def).await? {
        changes.push(change);
        ops.push(op);
    }
    validate_change(state, Env::Live, &changes).await?;
    ops.push(live_write(id, &rel, &data, pre, live.as_ref())?);
    ops.push(Op::Create {
        rel: history_rel(id, next),
        data,
    });
    commit(store, id, &ops).await?;
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

/// The descriptor a gRPC API needs must be in the live tree too: when it is not, its copy from
/// the sandbox (as a change to validate and a write of the transaction). 422 when neither tree
/// has it.
async fn missing_descriptor(
    store: &Store,
    rel: &str,
    def: &v1::ApiDefinition,
) -> ApiResult<Option<(Change, Op)>> {
    let Some(grpc) = &def.backend.grpc else {
        return Ok(None);
    };
    check_name("backend.grpc.descriptor", &grpc.descriptor)?;
    let drel = format!("descriptors/{}", grpc.descriptor);
    if store.stat(&drel).await?.is_some() {
        return Ok(None);
    }
    let sandbox = store.get(&Env::Sandbox.path(&drel)).await?.ok_or_else(|| {
        ApiError::invalid(
            format!(
                "backend.grpc.descriptor: no descriptor {} in the live tree or the sandbox",
                grpc.descriptor
            ),
            vec![Detail {
                path: Some(rel.to_owned()),
                field: Some("backend.grpc.descriptor".to_owned()),
                reason: "descriptor not found".to_owned(),
            }],
        )
    })?;
    let change = (drel.clone(), Some(sandbox.data.clone()));
    let op = Op::Create {
        rel: drel,
        data: sandbox.data,
    };
    Ok(Some((change, op)))
}

/// The write of the live document: compare-and-set against what was read (or against what the
/// caller expects), or a create when nothing is published.
fn live_write(
    id: &str,
    rel: &str,
    data: &[u8],
    pre: Precondition,
    live: Option<&Doc>,
) -> ApiResult<Op> {
    let expected = match pre {
        Precondition::Version(v) => Some(v),
        Precondition::Absent if live.is_some() => {
            return Err(ApiError::conflict(format!(
                "API {id:?} is already published"
            )))
        }
        Precondition::Absent => None,
        Precondition::Any => live.map(|d| d.stat.version),
    };
    match (expected, live) {
        (Some(version), Some(_)) => Ok(Op::Set {
            rel: rel.to_owned(),
            data: data.to_vec(),
            version,
        }),
        (Some(_), None) => Err(ApiError::conflict(format!(
            "API {id:?} is not published (it was deleted?): read it again"
        ))),
        (None, _) => Ok(Op::Create {
            rel: rel.to_owned(),
            data: data.to_vec(),
        }),
    }
}

/// Runs the publishing transaction (after making the folders it writes into); a conflict says
/// the API changed concurrently.
async fn commit(store: &Store, id: &str, ops: &[Op]) -> ApiResult<()> {
    store.ensure_dir(&history_dir(id)).await?;
    let writes_descriptor = ops
        .iter()
        .any(|op| matches!(op, Op::Create { rel, .. } if rel.starts_with("descriptors/")));
    if writes_descriptor {
        store.ensure_dir("descriptors").await?;
    }
    store.ensure_dir("apis").await?;
    store.multi(ops).await.map_err(|e| {
        if e.code == "CONFLICT" {
            ApiError::conflict(format!(
                "API {id:?} was published or changed concurrently; read it again and retry ({})",
                e.message
            ))
        } else {
            e
        }
    })?;
    Ok(())
}

/// The published versions of an API, which one is live, and when each was published.
async fn history(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let names = state.store.list(&history_dir(&id)).await?;
    let mut versions: Vec<u64> = names.iter().filter_map(|n| n.parse().ok()).collect();
    versions.sort_unstable();
    if versions.is_empty() {
        return Err(ApiError::not_found(format!(
            "API {id:?} has never been published"
        )));
    }
    let live = state.store.get(&api_rel(&id)).await?;
    let live_version = version_of(live.as_ref());
    let mut items = Vec::new();
    for v in versions {
        if let Some(stat) = state.store.stat(&history_rel(&id, v)).await? {
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
            &history_rel(&id, version),
            &format!("version {version} of API {id:?}"),
        )
        .await?;
    Ok(raw_json_response(StatusCode::OK, doc.data, Some(&doc.stat)))
}
