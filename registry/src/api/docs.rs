//! Clusters, switches, the IP ACL and descriptors, in the live tree and in the sandbox.

use super::{
    audit, check_name, env_prefix, flag, json_response, list_item, parse_json, raw_json_response,
    validate_change, Body, Ctx, Reply, Route,
};
use crate::error::{ApiError, ApiResult};
use crate::server::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use portico_control::v1;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::HashMap;

const fn env_of(sandbox: bool) -> Env {
    if sandbox {
        Env::Sandbox
    } else {
        Env::Live
    }
}

pub fn routes(env: Env) -> Vec<Route> {
    let p = env_prefix(env);
    let t = match env {
        Env::Live => "live",
        Env::Sandbox => "sandbox",
    };
    macro_rules! h {
        ($method:ident, $f:ident) => {
            match env {
                Env::Live => $method($f::<false>),
                Env::Sandbox => $method($f::<true>),
            }
        };
    }
    let tag_c = if env == Env::Live {
        "clusters"
    } else {
        "sandbox"
    };
    let tag_s = if env == Env::Live {
        "switches"
    } else {
        "sandbox"
    };
    let tag_i = if env == Env::Live { "ipacl" } else { "sandbox" };
    let tag_d = if env == Env::Live {
        "descriptors"
    } else {
        "sandbox"
    };
    vec![
        Route::new(Method::GET, format!("{p}/clusters"), tag_c, format!("List clusters ({t})"), h!(get, list_clusters))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::POST, format!("{p}/clusters"), tag_c, format!("Create a cluster ({t}); the body carries its `name`"), h!(post, create_cluster))
            .body(Body::Json("NamedCluster"))
            .reply(Reply::Json(201, "Cluster")),
        Route::new(Method::GET, format!("{p}/clusters/{{name}}"), tag_c, format!("Get a cluster ({t})"), h!(get, get_cluster))
            .reply(Reply::Json(200, "Cluster")),
        Route::new(Method::PUT, format!("{p}/clusters/{{name}}"), tag_c, format!("Create or replace a cluster ({t})"), h!(put, put_cluster))
            .body(Body::Json("Cluster"))
            .reply(Reply::Json(200, "Cluster"))
            .conditional(),
        Route::new(Method::DELETE, format!("{p}/clusters/{{name}}"), tag_c, format!("Delete a cluster ({t}); refused while APIs use it unless force=true"), h!(delete, delete_cluster))
            .reply(Reply::Empty)
            .query("force", "delete even if documents would be rejected")
            .conditional(),
        Route::new(Method::GET, format!("{p}/switches"), tag_s, format!("List degradation switches ({t})"), h!(get, list_switches))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::GET, format!("{p}/switches/{{api_id}}"), tag_s, format!("Get an API's switch ({t})"), h!(get, get_switch))
            .reply(Reply::Json(200, "Switch")),
        Route::new(Method::PUT, format!("{p}/switches/{{api_id}}"), tag_s, format!("Turn an API's switch on or off ({t}): degraded, reason, fallback; who and when are recorded"), h!(put, put_switch))
            .body(Body::Json("Switch"))
            .reply(Reply::Json(200, "Switch"))
            .conditional(),
        Route::new(Method::DELETE, format!("{p}/switches/{{api_id}}"), tag_s, format!("Remove an API's switch ({t})"), h!(delete, delete_switch))
            .reply(Reply::Empty)
            .conditional(),
        Route::new(Method::GET, format!("{p}/ipacl"), tag_i, format!("Get the IP ACL ({t})"), h!(get, get_ipacl))
            .reply(Reply::Json(200, "IpAcl")),
        Route::new(Method::PUT, format!("{p}/ipacl"), tag_i, format!("Replace the IP ACL ({t})"), h!(put, put_ipacl))
            .body(Body::Json("IpAcl"))
            .reply(Reply::Json(200, "IpAcl"))
            .conditional(),
        Route::new(Method::GET, format!("{p}/descriptors"), tag_d, format!("List stored FileDescriptorSets ({t})"), h!(get, list_descriptors))
            .reply(Reply::Json(200, "DescriptorList")),
        Route::new(Method::GET, format!("{p}/descriptors/{{sha256}}"), tag_d, format!("Download a stored FileDescriptorSet ({t})"), h!(get, get_descriptor))
            .reply(Reply::Binary),
    ]
}

// ---- shared document helpers ------------------------------------------------------------

/// Lists a folder of JSON documents.
pub async fn list_json(state: &Shared, env: Env, dir: &str) -> ApiResult<Response> {
    let docs = state.store.list_docs(&env.path(dir)).await?;
    let items: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| list_item(name, &doc.stat, &doc.data))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items }),
        None,
    ))
}

/// Answers one stored JSON document as itself, with its ETag.
pub async fn get_json(state: &Shared, env: Env, rel: &str, what: &str) -> ApiResult<Response> {
    let doc = state.store.require(&env.path(rel), what).await?;
    Ok(raw_json_response(StatusCode::OK, doc.data, Some(&doc.stat)))
}

/// Validates and writes a JSON document (`value`, already checked to fit its type), audits it,
/// and answers it with its ETag (201 when created).
#[allow(clippy::too_many_arguments)]
pub async fn write_json(
    state: &Shared,
    ctx: &Ctx,
    env: Env,
    rel: &str,
    value: &Value,
    pre: Precondition,
    action: &str,
    actor: &str,
) -> ApiResult<Response> {
    let data = serde_json::to_vec(value).map_err(|e| ApiError::internal(e.to_string()))?;
    check_precondition(state, env, rel, pre).await?;
    validate_change(state, env, &[(rel.to_owned(), Some(data.clone()))]).await?;
    let written = state.store.put(&env.path(rel), &data, pre).await?;
    audit(
        state,
        ctx,
        actor,
        action,
        &env.path(rel),
        json!({"version": written.stat.version, "created": written.created}),
    )
    .await;
    let status = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(raw_json_response(status, data, Some(&written.stat)))
}

/// Answers 409 / 404 before validating when the precondition already fails (ZooKeeper
/// enforces it again at the write).
pub async fn check_precondition(
    state: &Shared,
    env: Env,
    rel: &str,
    pre: Precondition,
) -> ApiResult<()> {
    let path = env.path(rel);
    let stat = match pre {
        Precondition::Any => return Ok(()),
        _ => state.store.stat(&path).await?,
    };
    match (pre, stat) {
        (Precondition::Absent, Some(_)) => {
            Err(ApiError::conflict(format!("{path} already exists")))
        }
        (Precondition::Version(_), None) => {
            Err(ApiError::not_found(format!("{path} does not exist")))
        }
        (Precondition::Version(v), Some(s)) if s.version != v => Err(ApiError::conflict(format!(
            "{path} is at version {} (If-Match said {v}): read it again and retry",
            s.version
        ))),
        _ => Ok(()),
    }
}

/// Deletes a document after checking that nothing else would be rejected (unless `force`).
pub async fn delete_doc(
    state: &Shared,
    ctx: &Ctx,
    env: Env,
    rel: &str,
    force: bool,
    action: &str,
) -> ApiResult<Response> {
    let pre = ctx.precondition(None)?;
    if state.store.stat(&env.path(rel)).await?.is_none() {
        return Err(ApiError::not_found(format!(
            "{} does not exist",
            env.path(rel)
        )));
    }
    if !force {
        validate_change(state, env, &[(rel.to_owned(), None)]).await?;
    }
    state.store.delete(&env.path(rel), pre).await?;
    audit(
        state,
        ctx,
        &ctx.actor(None),
        action,
        &env.path(rel),
        json!({}),
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn typed<T: DeserializeOwned>(bytes: &[u8], what: &str) -> ApiResult<(T, Value)> {
    let (t, v) = parse_json::<T>(bytes, what)?;
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "{what}: must be a JSON object"
        )));
    }
    Ok((t, v))
}

// ---- clusters ---------------------------------------------------------------------------

async fn list_clusters<const SB: bool>(State(state): State<Shared>) -> ApiResult<Response> {
    list_json(&state, env_of(SB), "clusters").await
}

async fn get_cluster<const SB: bool>(
    State(state): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    get_json(
        &state,
        env_of(SB),
        &format!("clusters/{name}"),
        &format!("cluster {name:?}"),
    )
    .await
}

async fn create_cluster<const SB: bool>(
    State(state): State<Shared>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let mut value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("cluster: not valid JSON: {e}")))?;
    let name = value
        .as_object_mut()
        .and_then(|o| o.remove("name"))
        .and_then(|n| n.as_str().map(str::to_owned))
        .ok_or_else(|| ApiError::bad_request("cluster: the body needs a string `name`"))?;
    check_name("cluster", &name)?;
    let _: v1::Cluster = super::typed_from(&value, "cluster")?;
    write_json(
        &state,
        &ctx,
        env_of(SB),
        &format!("clusters/{name}"),
        &value,
        Precondition::Absent,
        "cluster.create",
        &ctx.actor(None),
    )
    .await
}

async fn put_cluster<const SB: bool>(
    State(state): State<Shared>,
    Path(name): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    let (_, value) = typed::<v1::Cluster>(&body, "cluster")?;
    let pre = ctx.precondition(None)?;
    write_json(
        &state,
        &ctx,
        env_of(SB),
        &format!("clusters/{name}"),
        &value,
        pre,
        "cluster.put",
        &ctx.actor(None),
    )
    .await
}

async fn delete_cluster<const SB: bool>(
    State(state): State<Shared>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    delete_doc(
        &state,
        &ctx,
        env_of(SB),
        &format!("clusters/{name}"),
        flag(&q, "force"),
        "cluster.delete",
    )
    .await
}

// ---- switches ---------------------------------------------------------------------------

async fn list_switches<const SB: bool>(State(state): State<Shared>) -> ApiResult<Response> {
    list_json(&state, env_of(SB), "switches").await
}

async fn get_switch<const SB: bool>(
    State(state): State<Shared>,
    Path(api_id): Path<String>,
) -> ApiResult<Response> {
    check_name("api id", &api_id)?;
    get_json(
        &state,
        env_of(SB),
        &format!("switches/{api_id}"),
        &format!("switch {api_id:?}"),
    )
    .await
}

async fn put_switch<const SB: bool>(
    State(state): State<Shared>,
    Path(api_id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("api id", &api_id)?;
    let (switch, mut value) = typed::<v1::Switch>(&body, "switch")?;
    let actor = ctx.actor(switch.updated_by.as_deref());
    if let Some(obj) = value.as_object_mut() {
        obj.insert("updated_by".to_owned(), Value::String(actor.clone()));
        obj.insert(
            "updated_at".to_owned(),
            Value::String(portico_control::clock::now_rfc3339()),
        );
    }
    let pre = ctx.precondition(None)?;
    let action = if switch.degraded {
        "switch.on"
    } else {
        "switch.off"
    };
    write_json(
        &state,
        &ctx,
        env_of(SB),
        &format!("switches/{api_id}"),
        &value,
        pre,
        action,
        &actor,
    )
    .await
}

async fn delete_switch<const SB: bool>(
    State(state): State<Shared>,
    Path(api_id): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("api id", &api_id)?;
    delete_doc(
        &state,
        &ctx,
        env_of(SB),
        &format!("switches/{api_id}"),
        false,
        "switch.delete",
    )
    .await
}

// ---- ipacl ------------------------------------------------------------------------------

async fn get_ipacl<const SB: bool>(State(state): State<Shared>) -> ApiResult<Response> {
    let env = env_of(SB);
    match state.store.get(&env.path("ipacl")).await? {
        Some(doc) => Ok(raw_json_response(StatusCode::OK, doc.data, Some(&doc.stat))),
        None => Ok(json_response(StatusCode::OK, &v1::IpAcl::default(), None)),
    }
}

async fn put_ipacl<const SB: bool>(
    State(state): State<Shared>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (_, value) = typed::<v1::IpAcl>(&body, "ipacl")?;
    let pre = ctx.precondition(None)?;
    write_json(
        &state,
        &ctx,
        env_of(SB),
        "ipacl",
        &value,
        pre,
        "ipacl.put",
        &ctx.actor(None),
    )
    .await
}

// ---- descriptors ------------------------------------------------------------------------

async fn list_descriptors<const SB: bool>(State(state): State<Shared>) -> ApiResult<Response> {
    let env = env_of(SB);
    let names = state.store.list(&env.path("descriptors")).await?;
    let mut items = Vec::new();
    for name in names {
        if let Some(stat) = state
            .store
            .stat(&env.path(&format!("descriptors/{name}")))
            .await?
        {
            items.push(json!({"sha256": name, "bytes": stat.data_length}));
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items }),
        None,
    ))
}

async fn get_descriptor<const SB: bool>(
    State(state): State<Shared>,
    Path(sha): Path<String>,
) -> ApiResult<Response> {
    check_name("descriptor", &sha)?;
    let doc = state
        .store
        .require(
            &env_of(SB).path(&format!("descriptors/{sha}")),
            &format!("descriptor {sha}"),
        )
        .await?;
    let mut response = (StatusCode::OK, doc.data).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(response)
}
