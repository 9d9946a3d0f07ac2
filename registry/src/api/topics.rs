//! Notification topics (`topics/<name>`), in the live tree and in the sandbox: who owns a
//! topic, which apps it is granted to (`["*"]`: every app) and how long its events are kept
//! (docs/operations/notifications.md, "Notifications").

use super::context::Ctx;
use super::documents::{delete_doc, get_json, list_json, write_json, Write};
use crate::error::ApiResult;
use crate::input::{check_name, parse_document};
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use crate::zk_store::Env;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::Response;
use axum::routing::{delete, get, put};
use axum::Extension;
use portico_control::v1;

/// The routes, env-neutral (see [`crate::route::in_each_env`]).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "topics";
    vec![
        Route::new(Method::GET, "/topics", TAG, "List notification topics ({env})", get(list))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::GET, "/topics/{name}", TAG, "Get a notification topic ({env})", get(read))
            .reply(Reply::Json(200, "Topic")),
        Route::new(Method::PUT, "/topics/{name}", TAG, "Create or replace a notification topic ({env}): owner, description, apps granted, retention_s", put(replace))
            .body(Body::Json("Topic"))
            .reply(Reply::Json(200, "Topic"))
            .conditional(),
        Route::new(Method::DELETE, "/topics/{name}", TAG, "Delete a notification topic ({env}); open streams lose it within a second", delete(remove))
            .reply(Reply::Empty)
            .conditional(),
    ]
}

fn rel(name: &str) -> String {
    format!("topics/{name}")
}

async fn list(State(state): State<Shared>, Extension(env): Extension<Env>) -> ApiResult<Response> {
    list_json(&state, env, "topics").await
}

async fn read(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    check_name("topic", &name)?;
    get_json(&state, env, &rel(&name), &format!("topic {name:?}")).await
}

async fn replace(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(name): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("topic", &name)?;
    let (_, value) = parse_document::<v1::Topic>(&body, "topic")?;
    let write = Write {
        env,
        rel: &rel(&name),
        value: &value,
        pre: ctx.precondition(None)?,
        action: "topic.put",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}

async fn remove(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(name): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("topic", &name)?;
    delete_doc(&state, &ctx, env, &rel(&name), false, "topic.delete").await
}
