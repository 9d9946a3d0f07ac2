//! Degradation switches (`switches/<api_id>`, and key-level `switches/<api_id>@<label>` with a
//! `match`), in the live tree and in the sandbox: who turned one on or off, and when, is
//! recorded on the switch (docs/operations/degrading.md, "Degrading an API", "Key-level switches").

use super::context::Ctx;
use super::documents::{delete_doc, get_json, list_json, write_json, Write};
use crate::error::ApiResult;
use crate::error::{ApiError, Detail};
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
use serde_json::Value;

/// The routes, env-neutral (see [`crate::route::in_each_env`]).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "switches";
    vec![
        Route::new(Method::GET, "/switches", TAG, "List degradation switches ({env})", get(list))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::GET, "/switches/{api_id}", TAG, "Get an API's switch, or a key-level one <api_id>@<label> ({env})", get(read))
            .reply(Reply::Json(200, "Switch")),
        Route::new(Method::PUT, "/switches/{api_id}", TAG, "Turn an API's switch (or a key-level one, <api_id>@<label> with a match) on or off ({env}): degraded, reason, fallback, match; who and when are recorded", put(set))
            .body(Body::Json("Switch"))
            .reply(Reply::Json(200, "Switch"))
            .conditional(),
        Route::new(Method::DELETE, "/switches/{api_id}", TAG, "Remove an API's switch or a key-level one ({env})", delete(remove))
            .reply(Reply::Empty)
            .conditional(),
    ]
}

/// `<api_id>` or, for a key-level switch, `<api_id>@<label>` (each part a document name).
fn check_switch_name(name: &str) -> ApiResult<()> {
    match name.split_once('@') {
        None => check_name("api id", name),
        Some((api_id, label)) => {
            check_name("api id", api_id)?;
            check_name("switch label", label)
        }
    }
}

/// 422 `VALIDATION_FAILED` naming `field`.
fn invalid(field: &str, reason: &str) -> ApiError {
    ApiError::invalid(
        format!("switch: {field}: {reason}"),
        vec![Detail {
            path: None,
            field: Some(field.to_owned()),
            reason: reason.to_owned(),
        }],
    )
}

/// 422 unless a key-level switch that is on has a `match` and an API-wide one has none (the gateway's
/// validation says the same; this answers before anything is written).
fn check_match(name: &str, switch: &v1::Switch) -> ApiResult<()> {
    let keyed = name.contains('@');
    if keyed && switch.degraded && switch.matches.is_empty() {
        return Err(invalid(
            "match",
            "a key-level switch <api_id>@<label> needs a match (selector -> values)",
        ));
    }
    if !keyed && !switch.matches.is_empty() {
        return Err(invalid(
            "match",
            "only a key-level switch <api_id>@<label> has a match",
        ));
    }
    for (selector, values) in &switch.matches {
        portico_control::selector::Selector::parse(selector)
            .map_err(|e| invalid(&format!("match.{selector}"), &e))?;
        if values.is_empty() {
            return Err(invalid(
                &format!("match.{selector}"),
                "must list at least one value",
            ));
        }
    }
    Ok(())
}

fn rel(api_id: &str) -> String {
    format!("switches/{api_id}")
}

async fn list(State(state): State<Shared>, Extension(env): Extension<Env>) -> ApiResult<Response> {
    list_json(&state, env, "switches").await
}

async fn read(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(api_id): Path<String>,
) -> ApiResult<Response> {
    check_switch_name(&api_id)?;
    get_json(&state, env, &rel(&api_id), &format!("switch {api_id:?}")).await
}

/// `PUT`: `updated_by` (the operator header, else the body's, else `admin`) and `updated_at`
/// are set by the registry.
async fn set(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(api_id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_switch_name(&api_id)?;
    let (switch, mut value) = parse_document::<v1::Switch>(&body, "switch")?;
    check_match(&api_id, &switch)?;
    let actor = ctx.actor(switch.updated_by.as_deref());
    if let Some(obj) = value.as_object_mut() {
        obj.insert("updated_by".to_owned(), Value::String(actor.clone()));
        obj.insert(
            "updated_at".to_owned(),
            Value::String(portico_control::clock::now_rfc3339()),
        );
    }
    let write = Write {
        env,
        rel: &rel(&api_id),
        value: &value,
        pre: ctx.precondition(None)?,
        action: if switch.degraded {
            "switch.on"
        } else {
            "switch.off"
        },
        actor,
    };
    write_json(&state, &ctx, write).await
}

async fn remove(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(api_id): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_switch_name(&api_id)?;
    delete_doc(&state, &ctx, env, &rel(&api_id), false, "switch.delete").await
}
