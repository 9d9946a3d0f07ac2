//! The IP ACL (`ipacl`), in the live tree and in the sandbox. An absent ACL reads as the empty
//! one (everything allowed).

use super::context::Ctx;
use super::documents::{write_json, Write};
use super::reply::{json_response, raw_json_response};
use crate::error::ApiResult;
use crate::input::parse_document;
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use crate::zk_store::Env;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, put};
use axum::Extension;
use portico_control::v1;

/// The routes, env-neutral (see [`crate::route::in_each_env`]).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "ipacl";
    vec![
        Route::new(
            Method::GET,
            "/ipacl",
            TAG,
            "Get the IP ACL ({env})",
            get(read),
        )
        .reply(Reply::Json(200, "IpAcl")),
        Route::new(
            Method::PUT,
            "/ipacl",
            TAG,
            "Replace the IP ACL ({env})",
            put(replace),
        )
        .body(Body::Json("IpAcl"))
        .reply(Reply::Json(200, "IpAcl"))
        .conditional(),
    ]
}

async fn read(State(state): State<Shared>, Extension(env): Extension<Env>) -> ApiResult<Response> {
    match state.store.get(&env.path("ipacl")).await? {
        Some(doc) => Ok(raw_json_response(StatusCode::OK, doc.data, Some(&doc.stat))),
        None => Ok(json_response(StatusCode::OK, &v1::IpAcl::default(), None)),
    }
}

async fn replace(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (_, value) = parse_document::<v1::IpAcl>(&body, "ipacl")?;
    let write = Write {
        env,
        rel: "ipacl",
        value: &value,
        pre: ctx.precondition(None)?,
        action: "ipacl.put",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}
