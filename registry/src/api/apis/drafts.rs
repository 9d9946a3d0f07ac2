//! Draft APIs (`sandbox/apis/<id>`): written directly (an HTTP-backend API, say) or made by
//! the imports; served by gateways' sandbox listeners and published from here.

use super::paths::api_rel;
use crate::api::context::Ctx;
use crate::api::documents::{delete_doc, get_json, write_json, Write};
use crate::api::reply::{json_response, list_item};
use crate::error::{ApiError, ApiResult, Detail};
use crate::input::{check_name, typed_document};
use crate::route::{Body, Reply, Route};
use crate::served::api_refusals;
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use portico_control::v1;
use serde_json::{json, Value};

/// The routes of drafts.
pub fn routes() -> Vec<Route> {
    vec![
        Route::new(
            Method::GET,
            "/sandbox/apis",
            "sandbox",
            "List draft APIs; each item's `served` says whether the sandbox serves it: `{nodes, \
             refused: [{node_id, reason, kept_previous}]}` (node `registry`: the registry's own \
             build of the sandbox tree)",
            get(list),
        )
        .reply(Reply::Json(200, "List")),
        Route::new(
            Method::GET,
            "/sandbox/apis/{id}/served",
            "sandbox",
            "Whether the sandbox serves a draft: `{id, nodes, refused: [{node_id, reason, \
             kept_previous}]}`; a refused draft cannot be tried (POST /sandbox/call answers 409 \
             DRAFT_REFUSED)",
            get(served),
        )
        .reply(Reply::Json(200, "Served")),
        Route::new(
            Method::POST,
            "/sandbox/apis",
            "sandbox",
            "Create a draft API (e.g. an HTTP-backend API defined directly)",
            post(create),
        )
        .body(Body::Json("ApiDefinition"))
        .reply(Reply::Json(201, "ApiDefinition"))
        .creates("$response.body#/id"),
        Route::new(
            Method::GET,
            "/sandbox/apis/{id}",
            "sandbox",
            "Get a draft API",
            get(read),
        )
        .reply(Reply::Json(200, "ApiDefinition")),
        Route::new(
            Method::PUT,
            "/sandbox/apis/{id}",
            "sandbox",
            "Create or replace a draft API",
            put(replace),
        )
        .body(Body::Json("ApiDefinition"))
        .reply(Reply::Json(200, "ApiDefinition"))
        .conditional(),
        Route::new(
            Method::DELETE,
            "/sandbox/apis/{id}",
            "sandbox",
            "Delete a draft API",
            delete(remove),
        )
        .reply(Reply::Empty)
        .conditional(),
    ]
}

async fn list(State(state): State<Shared>) -> ApiResult<Response> {
    list_served(&state, Env::Sandbox).await
}

/// The env's APIs as a list, each item with its `served` object ([`super::served`]).
pub async fn list_served(state: &Shared, env: Env) -> ApiResult<Response> {
    let refusals = api_refusals(state, env).await?;
    let docs = state.store.list_docs(&env.path("apis")).await?;
    let items: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| {
            let mut item = list_item(name, &doc.stat, &doc.data);
            item["served"] = refusals.served(name);
            item
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items }),
        None,
    ))
}

/// `GET /sandbox/apis/{id}/served`: the draft's refusals (404 when there is no draft).
async fn served(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    state
        .store
        .require(
            &Env::Sandbox.path(&api_rel(&id)),
            &format!("draft API {id:?}"),
        )
        .await?;
    let refusals = api_refusals(&state, Env::Sandbox).await?;
    let mut body = refusals.served(&id);
    body["id"] = json!(id);
    Ok(json_response(StatusCode::OK, &body, None))
}

async fn read(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let what = format!("draft API {id:?}");
    get_json(&state, Env::Sandbox, &api_rel(&id), &what).await
}

/// Checks a draft body: JSON object fitting ApiDefinition, `id` equal to the path's (filled in
/// when absent), `version` 0 when absent.
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
                vec![Detail {
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
    let _: v1::ApiDefinition = typed_document(&value, "api")?;
    Ok((id, value))
}

async fn create(State(state): State<Shared>, ctx: Ctx, body: Bytes) -> ApiResult<Response> {
    let (id, value) = draft_value(&body, None)?;
    let write = Write {
        env: Env::Sandbox,
        rel: &api_rel(&id),
        value: &value,
        pre: Precondition::Absent,
        action: "draft.create",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}

async fn replace(
    State(state): State<Shared>,
    Path(id): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let (id, value) = draft_value(&body, Some(&id))?;
    let write = Write {
        env: Env::Sandbox,
        rel: &api_rel(&id),
        value: &value,
        pre: ctx.precondition(None)?,
        action: "draft.put",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}

async fn remove(
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
        assert_eq!(v["version"], 0);
        let e = draft_value(
            br#"{"id":"a","http":{"method":"GET"},"backend":{"cluster":"c"}}"#,
            None,
        )
        .unwrap_err();
        assert_eq!(e.code, "VALIDATION_FAILED");
        assert!(e.message.contains("http"), "{}", e.message);
    }
}
