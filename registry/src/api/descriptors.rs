//! Stored FileDescriptorSets (`descriptors/<sha256>`), in the live tree and in the sandbox:
//! listed and downloaded here; uploaded through the imports ([`super::apis`]) and copied to the
//! live tree by publishing.

use super::reply::json_response;
use crate::error::ApiResult;
use crate::input::check_name;
use crate::route::{Reply, Route};
use crate::state::Shared;
use crate::zk_store::Env;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use serde_json::json;

/// The routes, env-neutral (see [`crate::route::in_each_env`]).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "descriptors";
    vec![
        Route::new(
            Method::GET,
            "/descriptors",
            TAG,
            "List stored FileDescriptorSets ({env})",
            get(list),
        )
        .reply(Reply::Json(200, "DescriptorList")),
        Route::new(
            Method::GET,
            "/descriptors/{sha256}",
            TAG,
            "Download a stored FileDescriptorSet ({env})",
            get(download),
        )
        .reply(Reply::Binary),
    ]
}

/// `{"items": [{"sha256", "bytes"}]}`: names and sizes, not the sets themselves.
async fn list(State(state): State<Shared>, Extension(env): Extension<Env>) -> ApiResult<Response> {
    let names = state.store.list(&env.path("descriptors")).await?;
    let mut items = Vec::new();
    for name in names {
        let path = env.path(&format!("descriptors/{name}"));
        if let Some(stat) = state.store.stat(&path).await? {
            items.push(json!({"sha256": name, "bytes": stat.data_length}));
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items }),
        None,
    ))
}

async fn download(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(sha): Path<String>,
) -> ApiResult<Response> {
    check_name("descriptor", &sha)?;
    let path = env.path(&format!("descriptors/{sha}"));
    let doc = state
        .store
        .require(&path, &format!("descriptor {sha}"))
        .await?;
    let mut response = (StatusCode::OK, doc.data).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(response)
}
