//! Merchant apps, live and sandbox: create (key and secret generated; the secret is shown in
//! that response only), read (never the secret), change status and grants, rotate the secret,
//! delete.

use super::{
    audit, check_name, env_prefix, json_response, list_item, typed_from, validate_change, Body,
    Ctx, Reply, Route,
};
use crate::api::docs::delete_doc;
use crate::error::{ApiError, ApiResult};
use crate::server::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, patch, post};
use portico_control::v1;
use serde::Deserialize;
use serde_json::{json, Map, Value};

const fn env_of(sandbox: bool) -> Env {
    if sandbox {
        Env::Sandbox
    } else {
        Env::Live
    }
}

pub fn routes(env: Env) -> Vec<Route> {
    let p = env_prefix(env);
    let t = env.name();
    let tag = if env == Env::Live { "apps" } else { "sandbox" };
    macro_rules! h {
        ($method:ident, $f:ident) => {
            match env {
                Env::Live => $method($f::<false>),
                Env::Sandbox => $method($f::<true>),
            }
        };
    }
    vec![
        Route::new(Method::GET, format!("{p}/apps"), tag, format!("List apps ({t}); secrets are never shown"), h!(get, list_apps))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::POST, format!("{p}/apps"), tag, format!("Create an app ({t}): key and secret are generated unless given; the secret is shown in this response only"), h!(post, create_app))
            .body(Body::Json("AppCreate"))
            .reply(Reply::Json(201, "AppCredentials")),
        Route::new(Method::GET, format!("{p}/apps/{{app_key}}"), tag, format!("Get an app ({t}), without its secret"), h!(get, get_app))
            .reply(Reply::Json(200, "AppView")),
        Route::new(Method::PATCH, format!("{p}/apps/{{app_key}}"), tag, format!("Change an app's name, status, granted APIs or rate limits ({t})"), h!(patch, patch_app))
            .body(Body::Json("AppPatch"))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::DELETE, format!("{p}/apps/{{app_key}}"), tag, format!("Delete an app ({t})"), h!(delete, delete_app))
            .reply(Reply::Empty)
            .conditional(),
        Route::new(Method::POST, format!("{p}/apps/{{app_key}}/disable"), tag, format!("Disable an app ({t}): its calls get 403 APP_DISABLED"), h!(post, disable_app))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, format!("{p}/apps/{{app_key}}/enable"), tag, format!("Enable an app again ({t})"), h!(post, enable_app))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, format!("{p}/apps/{{app_key}}/grant"), tag, format!("Grant APIs to an app ({t}); `*` grants all"), h!(post, grant_app))
            .body(Body::Json("ApiIds"))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, format!("{p}/apps/{{app_key}}/revoke"), tag, format!("Revoke APIs from an app ({t})"), h!(post, revoke_app))
            .body(Body::Json("ApiIds"))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, format!("{p}/apps/{{app_key}}/rotate-secret"), tag, format!("Replace an app's secret ({t}); the new secret is shown in this response only"), h!(post, rotate_app))
            .reply(Reply::Json(200, "AppCredentials"))
            .conditional(),
    ]
}

/// A new random secret: 24 random bytes as 48 hex digits.
pub fn new_secret() -> ApiResult<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(hex::encode(bytes))
}

fn new_app_key() -> ApiResult<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(format!("no randomness: {e}")))?;
    Ok(format!("app-{}", hex::encode(bytes)))
}

/// An app document without its secret.
fn redacted(value: &Value) -> Value {
    let mut v = value.clone();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("secret");
    }
    v
}

fn with_etag(mut response: Response, version: i32) -> Response {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(axum::http::header::ETAG, v);
    }
    response
}

async fn list_apps<const SB: bool>(State(state): State<Shared>) -> ApiResult<Response> {
    let docs = state.store.list_docs(&env_of(SB).path("apps")).await?;
    let items: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| {
            let mut item = list_item(name, &doc.stat, &doc.data);
            if let Some(d) = item.get_mut("document") {
                *d = redacted(d);
            }
            if let Some(obj) = item.as_object_mut() {
                obj.remove("raw");
            }
            item
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items }),
        None,
    ))
}

async fn get_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    check_name("app key", &key)?;
    let env = env_of(SB);
    let doc = state
        .store
        .require(&env.path(&format!("apps/{key}")), &format!("app {key:?}"))
        .await?;
    let value: Value = serde_json::from_slice(&doc.data)
        .map_err(|e| ApiError::internal(format!("stored app {key:?} is not JSON: {e}")))?;
    Ok(json_response(
        StatusCode::OK,
        &redacted(&value),
        Some(&doc.stat),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppCreate {
    #[serde(default)]
    app_key: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// A chosen secret (at least 8 characters); generated when absent.
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    status: Option<v1::AppStatus>,
    #[serde(default)]
    apis: Option<Vec<String>>,
    #[serde(default)]
    rate_limits: Option<Vec<v1::AppRateLimit>>,
}

async fn create_app<const SB: bool>(
    State(state): State<Shared>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let env = env_of(SB);
    let value: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("app: not valid JSON: {e}")))?
    };
    let req: AppCreate = typed_from(&value, "app")?;
    let key = match req.app_key {
        Some(k) => k,
        None => new_app_key()?,
    };
    check_name("app key", &key)?;
    let secret = match req.secret {
        Some(s) => s,
        None => new_secret()?,
    };
    let app = v1::App {
        secret: secret.clone(),
        status: req.status.unwrap_or_default(),
        apis: req.apis.unwrap_or_default(),
        rate_limits: req.rate_limits.unwrap_or_default(),
        name: req.name,
    };
    let doc = serde_json::to_value(&app).map_err(|e| ApiError::internal(e.to_string()))?;
    let data = serde_json::to_vec(&doc).map_err(|e| ApiError::internal(e.to_string()))?;
    let rel = format!("apps/{key}");
    validate_change(&state, env, &[(rel.clone(), Some(data.clone()))]).await?;
    let written = state
        .store
        .put(&env.path(&rel), &data, Precondition::Absent)
        .await?;
    audit(
        &state,
        &ctx,
        &ctx.actor(None),
        "app.create",
        &env.path(&rel),
        json!({}),
    )
    .await;
    let body = json!({
        "app_key": key,
        "secret": secret,
        "etag": written.stat.version.to_string(),
        "app": redacted(&doc),
    });
    Ok(with_etag(
        json_response(StatusCode::CREATED, &body, None),
        written.stat.version,
    ))
}

/// Reads an app, applies `change` to its JSON, validates and writes it back under the request's
/// precondition (or, without one, under the version just read, so a concurrent change is a 409).
async fn modify_app(
    state: &Shared,
    ctx: &Ctx,
    env: Env,
    key: &str,
    action: &str,
    change: impl FnOnce(&mut Map<String, Value>) -> ApiResult<()>,
) -> ApiResult<(Value, i32)> {
    check_name("app key", key)?;
    let rel = format!("apps/{key}");
    let doc = state
        .store
        .require(&env.path(&rel), &format!("app {key:?}"))
        .await?;
    let mut value: Value = serde_json::from_slice(&doc.data)
        .map_err(|e| ApiError::internal(format!("stored app {key:?} is not JSON: {e}")))?;
    let pre = match ctx.precondition(None)? {
        Precondition::Any => Precondition::Version(doc.stat.version),
        Precondition::Absent => {
            return Err(ApiError::conflict(format!("app {key:?} already exists")))
        }
        p => p,
    };
    let obj = value
        .as_object_mut()
        .ok_or_else(|| ApiError::internal(format!("stored app {key:?} is not an object")))?;
    change(obj)?;
    let _: v1::App = typed_from(&value, "app")?;
    let data = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;
    validate_change(state, env, &[(rel.clone(), Some(data.clone()))]).await?;
    let written = state.store.put(&env.path(&rel), &data, pre).await?;
    audit(
        state,
        ctx,
        &ctx.actor(None),
        action,
        &env.path(&rel),
        json!({}),
    )
    .await;
    Ok((value, written.stat.version))
}

fn app_view(value: &Value, version: i32) -> Response {
    with_etag(
        json_response(StatusCode::OK, &redacted(value), None),
        version,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    status: Option<v1::AppStatus>,
    #[serde(default)]
    apis: Option<Vec<String>>,
    #[serde(default)]
    rate_limits: Option<Vec<v1::AppRateLimit>>,
}

async fn patch_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let raw: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("app patch: not valid JSON: {e}")))?;
    if raw.get("secret").is_some() {
        return Err(ApiError::bad_request(
            "app patch: the secret cannot be set; use POST .../rotate-secret",
        ));
    }
    let patch: AppPatch = typed_from(&raw, "app patch")?;
    let (value, version) = modify_app(&state, &ctx, env_of(SB), &key, "app.update", |obj| {
        if let Some(name) = patch.name {
            obj.insert("name".to_owned(), Value::String(name));
        }
        if let Some(status) = patch.status {
            obj.insert("status".to_owned(), json!(status));
        }
        if let Some(apis) = patch.apis {
            obj.insert("apis".to_owned(), json!(apis));
        }
        if let Some(limits) = patch.rate_limits {
            obj.insert("rate_limits".to_owned(), json!(limits));
        }
        Ok(())
    })
    .await?;
    Ok(app_view(&value, version))
}

async fn set_status(
    state: Shared,
    ctx: Ctx,
    env: Env,
    key: String,
    status: v1::AppStatus,
) -> ApiResult<Response> {
    let action = match status {
        v1::AppStatus::Active => "app.enable",
        v1::AppStatus::Disabled => "app.disable",
    };
    let (value, version) = modify_app(&state, &ctx, env, &key, action, |obj| {
        obj.insert("status".to_owned(), json!(status));
        Ok(())
    })
    .await?;
    Ok(app_view(&value, version))
}

async fn disable_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    set_status(state, ctx, env_of(SB), key, v1::AppStatus::Disabled).await
}

async fn enable_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    set_status(state, ctx, env_of(SB), key, v1::AppStatus::Active).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiIds {
    apis: Vec<String>,
}

fn current_apis(obj: &Map<String, Value>) -> Vec<String> {
    obj.get("apis")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn grant_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (ids, _) = super::parse_json::<ApiIds>(&body, "grant")?;
    for id in &ids.apis {
        if id != "*" {
            check_name("api id", id)?;
        }
    }
    let (value, version) = modify_app(&state, &ctx, env_of(SB), &key, "app.grant", |obj| {
        let mut apis = current_apis(obj);
        for id in ids.apis {
            if !apis.contains(&id) {
                apis.push(id);
            }
        }
        obj.insert("apis".to_owned(), json!(apis));
        Ok(())
    })
    .await?;
    Ok(app_view(&value, version))
}

async fn revoke_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (ids, _) = super::parse_json::<ApiIds>(&body, "revoke")?;
    let (value, version) = modify_app(&state, &ctx, env_of(SB), &key, "app.revoke", |obj| {
        let apis: Vec<String> = current_apis(obj)
            .into_iter()
            .filter(|a| !ids.apis.contains(a))
            .collect();
        obj.insert("apis".to_owned(), json!(apis));
        Ok(())
    })
    .await?;
    Ok(app_view(&value, version))
}

async fn rotate_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    let secret = new_secret()?;
    let new = secret.clone();
    let (value, version) = modify_app(&state, &ctx, env_of(SB), &key, "app.rotate_secret", |obj| {
        obj.insert("secret".to_owned(), Value::String(new));
        Ok(())
    })
    .await?;
    let body = json!({
        "app_key": key,
        "secret": secret,
        "etag": version.to_string(),
        "app": redacted(&value),
    });
    Ok(with_etag(
        json_response(StatusCode::OK, &body, None),
        version,
    ))
}

async fn delete_app<const SB: bool>(
    State(state): State<Shared>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("app key", &key)?;
    delete_doc(
        &state,
        &ctx,
        env_of(SB),
        &format!("apps/{key}"),
        true,
        "app.delete",
    )
    .await
}
