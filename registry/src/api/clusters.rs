//! Backend clusters (`clusters/<name>`), in the live tree and in the sandbox.

use super::context::Ctx;
use super::documents::{delete_doc, get_json, list_json, write_json, Write};
use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, flag, parse_document, typed_document};
use crate::route::{Body, Param, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use axum::Extension;
use portico_control::v1;
use serde_json::Value;
use std::collections::HashMap;

/// The routes, env-neutral (see [`crate::route::in_each_env`]).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "clusters";
    vec![
        Route::new(
            Method::GET,
            "/clusters",
            TAG,
            "List clusters ({env})",
            get(list),
        )
        .reply(Reply::Json(200, "List")),
        Route::new(
            Method::POST,
            "/clusters",
            TAG,
            "Create a cluster ({env}); the body carries its `name`",
            post(create),
        )
        .body(Body::Json("NamedCluster"))
        .reply(Reply::Json(201, "Cluster"))
        .creates("$request.body#/name"),
        Route::new(
            Method::GET,
            "/clusters/{name}",
            TAG,
            "Get a cluster ({env})",
            get(read),
        )
        .reply(Reply::Json(200, "Cluster")),
        Route::new(
            Method::PUT,
            "/clusters/{name}",
            TAG,
            "Create or replace a cluster ({env})",
            put(replace),
        )
        .body(Body::Json("Cluster"))
        .reply(Reply::Json(200, "Cluster"))
        .conditional(),
        Route::new(
            Method::DELETE,
            "/clusters/{name}",
            TAG,
            "Delete a cluster ({env}); refused while APIs use it unless force=true",
            delete(remove),
        )
        .reply(Reply::Empty)
        .query_as(
            "force",
            "delete even if documents would be rejected",
            Param::Flag,
        )
        .conditional(),
    ]
}

fn rel(name: &str) -> String {
    format!("clusters/{name}")
}

async fn list(State(state): State<Shared>, Extension(env): Extension<Env>) -> ApiResult<Response> {
    list_json(&state, env, "clusters").await
}

async fn read(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    get_json(&state, env, &rel(&name), &format!("cluster {name:?}")).await
}

/// `POST /clusters`: the name comes in the body and is not part of the stored document.
async fn create(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
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
    let _: v1::Cluster = typed_document(&value, "cluster")?;
    let write = Write {
        env,
        rel: &rel(&name),
        value: &value,
        pre: Precondition::Absent,
        action: "cluster.create",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}

async fn replace(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(name): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    let (_, value) = parse_document::<v1::Cluster>(&body, "cluster")?;
    let write = Write {
        env,
        rel: &rel(&name),
        value: &value,
        pre: ctx.precondition(None)?,
        action: "cluster.put",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}

async fn remove(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    let force = flag(&q, "force");
    delete_doc(&state, &ctx, env, &rel(&name), force, "cluster.delete").await
}
