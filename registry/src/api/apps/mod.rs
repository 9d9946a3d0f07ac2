//! Merchant apps (`apps/<app_key>`), live and sandbox: create (key and secret generated; the
//! secret is shown in that response only), read (never the secret), change status and grants,
//! rotate the secret, delete. What is done to the document itself is in [`document`].

pub mod document;

use super::audit::audit;
use super::context::Ctx;
use super::documents::{attach_served, delete_doc};
use super::reply::{json_response, list_item, with_etag};
use super::validation::validate_change;
use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, parse_json, typed_document, typed_from};
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, patch, post};
use axum::Extension;
use document::{AppCreate, AppPatch};
use portico_control::v1;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The routes, env-neutral (see [`crate::route::in_each_env`]).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "apps";
    vec![
        Route::new(Method::GET, "/apps", TAG, "List apps ({env}); secrets are never shown", get(list))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::POST, "/apps", TAG, "Create an app ({env}): key and secret are generated unless given; the secret is shown in this response only", post(create))
            .body(Body::Json("AppCreate"))
            .reply(Reply::Json(201, "AppCredentials"))
            .creates("$response.body#/app_key"),
        Route::new(Method::GET, "/apps/{app_key}", TAG, "Get an app ({env}), without its secret", get(read))
            .reply(Reply::Json(200, "AppView")),
        Route::new(Method::PATCH, "/apps/{app_key}", TAG, "Change an app's name, status, granted APIs or rate limits ({env})", patch(update))
            .body(Body::Json("AppPatch"))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::DELETE, "/apps/{app_key}", TAG, "Delete an app ({env})", delete(remove))
            .reply(Reply::Empty)
            .conditional(),
        Route::new(Method::POST, "/apps/{app_key}/disable", TAG, "Disable an app ({env}): its calls get 403 APP_DISABLED", post(disable))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, "/apps/{app_key}/enable", TAG, "Enable an app again ({env})", post(enable))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, "/apps/{app_key}/grant", TAG, "Grant APIs to an app ({env}); `*` grants all", post(grant))
            .body(Body::Json("ApiIds"))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, "/apps/{app_key}/revoke", TAG, "Revoke APIs from an app ({env})", post(revoke))
            .body(Body::Json("ApiIds"))
            .reply(Reply::Json(200, "AppView"))
            .conditional(),
        Route::new(Method::POST, "/apps/{app_key}/rotate-secret", TAG, "Replace an app's secret ({env}); the new secret is shown in this response only", post(rotate_secret))
            .reply(Reply::Json(200, "AppCredentials"))
            .conditional(),
    ]
}

fn rel(key: &str) -> String {
    format!("apps/{key}")
}

async fn list(State(state): State<Shared>, Extension(env): Extension<Env>) -> ApiResult<Response> {
    let docs = state.store.list_docs(&env.path("apps")).await?;
    let mut items: Vec<Value> = docs
        .iter()
        .map(|(name, doc)| {
            let mut item = list_item(name, &doc.stat, &doc.data);
            if let Some(d) = item.get_mut("document") {
                *d = document::redacted(d);
            }
            // An unreadable document's raw text could hold the secret.
            if let Some(obj) = item.as_object_mut() {
                obj.remove("raw");
            }
            item
        })
        .collect();
    // What the gateways serve of each app (docs/operations/registry.md, "What the gateways serve").
    let written = docs.iter().map(|(_, d)| d.stat.mtime);
    let nodes = attach_served(&state, env, "apps", &mut items, written).await;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "items": items, "nodes": nodes }),
        None,
    ))
}

async fn read(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    check_name("app key", &key)?;
    let doc = state
        .store
        .require(&env.path(&rel(&key)), &format!("app {key:?}"))
        .await?;
    let value: Value = serde_json::from_slice(&doc.data)
        .map_err(|e| ApiError::internal(format!("stored app {key:?} is not JSON: {e}")))?;
    Ok(json_response(
        StatusCode::OK,
        &document::redacted(&value),
        Some(&doc.stat),
    ))
}

async fn create(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let value: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("app: not valid JSON: {e}")))?
    };
    let (key, app) = typed_from::<AppCreate>(&value, "app")?.into_app()?;
    check_name("app key", &key)?;
    let doc = serde_json::to_value(&app).map_err(|e| ApiError::internal(e.to_string()))?;
    let data = serde_json::to_vec(&doc).map_err(|e| ApiError::internal(e.to_string()))?;
    let rel = rel(&key);
    validate_change(&state, env, &[(rel.clone(), Some(data.clone()))]).await?;
    let path = env.path(&rel);
    let written = state.store.put(&path, &data, Precondition::Absent).await?;
    audit(
        &state,
        &ctx,
        &ctx.actor(None),
        "app.create",
        &path,
        json!({}),
    )
    .await;
    let version = written.stat.version;
    let body = document::credentials(&key, &app.secret, version, &doc);
    Ok(with_etag(
        json_response(StatusCode::CREATED, &body, None),
        version,
    ))
}

/// Reads an app, applies `change` to its JSON, validates and writes it back under the request's
/// precondition (or, without one, under the version just read, so a concurrent change is a 409).
async fn modify(
    state: &Shared,
    ctx: &Ctx,
    env: Env,
    key: &str,
    action: &str,
    change: impl FnOnce(&mut Map<String, Value>),
) -> ApiResult<(Value, i32)> {
    check_name("app key", key)?;
    let path = env.path(&rel(key));
    let doc = state.store.require(&path, &format!("app {key:?}")).await?;
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
    change(obj);
    let _: v1::App = typed_document(&value, "app")?;
    let data = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;
    validate_change(state, env, &[(rel(key), Some(data.clone()))]).await?;
    let written = state.store.put(&path, &data, pre).await?;
    audit(state, ctx, &ctx.actor(None), action, &path, json!({})).await;
    Ok((value, written.stat.version))
}

/// The app after a change, without its secret, with its ETag.
fn app_view((value, version): (Value, i32)) -> Response {
    with_etag(
        json_response(StatusCode::OK, &document::redacted(&value), None),
        version,
    )
}

async fn update(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
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
    let changed = modify(&state, &ctx, env, &key, "app.update", |app| {
        patch.apply(app)
    });
    Ok(app_view(changed.await?))
}

async fn disable(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    let changed = modify(&state, &ctx, env, &key, "app.disable", |app| {
        document::set_status(app, v1::AppStatus::Disabled)
    });
    Ok(app_view(changed.await?))
}

async fn enable(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    let changed = modify(&state, &ctx, env, &key, "app.enable", |app| {
        document::set_status(app, v1::AppStatus::Active)
    });
    Ok(app_view(changed.await?))
}

/// The body of `grant` and `revoke`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiIds {
    apis: Vec<String>,
}

async fn grant(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (ids, _) = parse_json::<ApiIds>(&body, "grant")?;
    for id in ids.apis.iter().filter(|id| *id != "*") {
        check_name("api id", id)?;
    }
    let changed = modify(&state, &ctx, env, &key, "app.grant", |app| {
        document::grant(app, ids.apis)
    });
    Ok(app_view(changed.await?))
}

async fn revoke(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    let (ids, _) = parse_json::<ApiIds>(&body, "revoke")?;
    let changed = modify(&state, &ctx, env, &key, "app.revoke", |app| {
        document::revoke(app, &ids.apis)
    });
    Ok(app_view(changed.await?))
}

async fn rotate_secret(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    let secret = document::new_secret()?;
    let new = Value::String(secret.clone());
    let (value, version) = modify(&state, &ctx, env, &key, "app.rotate_secret", |app| {
        app.insert("secret".to_owned(), new);
    })
    .await?;
    let body = document::credentials(&key, &secret, version, &value);
    Ok(with_etag(
        json_response(StatusCode::OK, &body, None),
        version,
    ))
}

async fn remove(
    State(state): State<Shared>,
    Extension(env): Extension<Env>,
    Path(key): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("app key", &key)?;
    delete_doc(&state, &ctx, env, &rel(&key), true, "app.delete").await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{ctx, read as answer, TestRegistry};

    fn body(v: Value) -> Bytes {
        Bytes::from(serde_json::to_vec(&v).unwrap())
    }

    fn key(k: &str) -> Path<String> {
        Path(k.to_owned())
    }

    async fn stored(s: &Shared, k: &str) -> v1::App {
        let doc = s
            .store
            .get(&format!("sandbox/apps/{k}"))
            .await
            .unwrap()
            .unwrap();
        serde_json::from_slice(&doc.data).unwrap()
    }

    #[tokio::test]
    async fn secrets_are_shown_once_and_never_read_back() {
        let reg = TestRegistry::start();
        let (s, env) = (reg.state.clone(), Extension(Env::Sandbox));
        let made = create(
            State(s.clone()),
            env,
            ctx(&[]),
            body(json!({"app_key": "m1"})),
        );
        let (status, etag, shown) = answer(made.await.unwrap()).await;
        assert_eq!((status, etag.as_deref()), (201, Some("0")));
        let secret = shown["secret"].as_str().unwrap().to_owned();
        assert_eq!(secret.len(), 48);
        assert!(shown["app"].get("secret").is_none());
        assert_eq!(
            stored(&s, "m1").await.secret,
            secret,
            "the secret shown is the one stored"
        );

        // Reads never show it, nor the raw text of an unreadable app.
        s.store
            .put(
                "sandbox/apps/broken",
                br#"{"secret":"leak-me""#,
                Precondition::Any,
            )
            .await
            .unwrap();
        let (_, _, all) = answer(list(State(s.clone()), env).await.unwrap()).await;
        assert_eq!(all["items"].as_array().unwrap().len(), 2);
        assert!(!all.to_string().contains(&secret));
        assert!(!all.to_string().contains("leak-me"));
        let one = read(State(s.clone()), env, key("m1"));
        let (_, etag, app) = answer(one.await.unwrap()).await;
        assert_eq!(etag.as_deref(), Some("0"));
        assert_eq!(app, json!({"status": "active", "apis": []}));

        // Rotation shows the new one once.
        let rotated = rotate_secret(State(s.clone()), env, key("m1"), ctx(&[]));
        let (_, etag, shown) = answer(rotated.await.unwrap()).await;
        let new = shown["secret"].as_str().unwrap();
        assert_ne!(new, secret);
        assert_eq!(etag.as_deref(), Some("1"));
        assert_eq!(stored(&s, "m1").await.secret, new);
        // A patch may not set it.
        let patch = update(
            State(s.clone()),
            env,
            key("m1"),
            ctx(&[]),
            body(json!({"secret": "x"})),
        );
        assert_eq!(patch.await.unwrap_err().code, "BAD_REQUEST");
    }

    #[tokio::test]
    async fn grants_status_and_preconditions() {
        let reg = TestRegistry::start();
        let (s, env) = (reg.state.clone(), Extension(Env::Live));
        // Grants name APIs that exist (the registry refuses others).
        for api in ["apis/a", "apis/b"] {
            let pre = crate::zk_store::Precondition::Any;
            s.store.put(api, b"{}", pre).await.unwrap();
        }
        let made = create(
            State(s.clone()),
            env,
            ctx(&[]),
            body(json!({"app_key": "m2", "apis": ["a"]})),
        );
        made.await.unwrap();
        let granted = grant(
            State(s.clone()),
            env,
            key("m2"),
            ctx(&[]),
            body(json!({"apis": ["b", "a", "*"]})),
        );
        let (_, etag, app) = answer(granted.await.unwrap()).await;
        assert_eq!(app["apis"], json!(["a", "b", "*"]));
        assert_eq!(etag.as_deref(), Some("1"));
        let bad = grant(
            State(s.clone()),
            env,
            key("m2"),
            ctx(&[]),
            body(json!({"apis": ["a/b"]})),
        );
        assert_eq!(bad.await.unwrap_err().code, "BAD_REQUEST");

        // If-Match: only over that version; without it, over the version read.
        let stale = revoke(
            State(s.clone()),
            env,
            key("m2"),
            ctx(&[("if-match", "\"0\"")]),
            body(json!({"apis": ["a"]})),
        );
        assert_eq!(stale.await.unwrap_err().code, "CONFLICT");
        let revoked = revoke(
            State(s.clone()),
            env,
            key("m2"),
            ctx(&[("if-match", "\"1\"")]),
            body(json!({"apis": ["a"]})),
        );
        let (_, _, app) = answer(revoked.await.unwrap()).await;
        assert_eq!(app["apis"], json!(["b", "*"]));

        let off = disable(State(s.clone()), env, key("m2"), ctx(&[]));
        let (_, etag, app) = answer(off.await.unwrap()).await;
        assert_eq!(
            (app["status"].as_str(), etag.as_deref()),
            (Some("disabled"), Some("3"))
        );
        let names = s.store.list("audit").await.unwrap();
        let last = s
            .store
            .get(&format!("audit/{}", names.last().unwrap()))
            .await
            .unwrap()
            .unwrap();
        let last: Value = serde_json::from_slice(&last.data).unwrap();
        assert_eq!(
            (last["action"].as_str(), last["target"].as_str()),
            (Some("app.disable"), Some("apps/m2"))
        );

        let missing = enable(State(s.clone()), env, key("nobody"), ctx(&[]));
        assert_eq!(missing.await.unwrap_err().code, "NOT_FOUND");
    }
}
