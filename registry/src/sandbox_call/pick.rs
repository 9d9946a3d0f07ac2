//! Whom a "try it" call involves: the sandbox app that signs it and the live gateway node
//! whose sandbox listener receives it.

use crate::error::{ApiError, ApiResult};
use crate::gateway_status::live_nodes;
use crate::input::check_name;
use crate::state::Shared;
use crate::zk_store::Env;
use axum::http::StatusCode;
use portico_control::v1;
use portico_control::zk::NodeInfo;

/// The sandbox app `(key, secret)` to sign with: `wanted`, else the first active one granted
/// `api_id` (or `*`), else the first active one (the gateway then answers `APP_FORBIDDEN`,
/// which is what a merchant would see). 422 `SANDBOX_APP_MISSING` when there is none.
pub async fn app(
    state: &Shared,
    wanted: Option<&str>,
    api_id: Option<&str>,
) -> ApiResult<(String, String)> {
    if let Some(key) = wanted {
        check_name("app_key", key)?;
        let doc = state
            .store
            .require(
                &Env::Sandbox.path(&format!("apps/{key}")),
                &format!("sandbox app {key:?}"),
            )
            .await?;
        let app: v1::App = serde_json::from_slice(&doc.data).map_err(|e| {
            ApiError::internal(format!("stored sandbox app {key:?} is not valid: {e}"))
        })?;
        return Ok((key.to_owned(), app.secret));
    }
    let docs = state.store.list_docs(&Env::Sandbox.path("apps")).await?;
    let apps = docs.into_iter().filter_map(|(key, doc)| {
        let app = serde_json::from_slice::<v1::App>(&doc.data).ok()?;
        Some((key, app))
    });
    choose_app(apps, api_id).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "SANDBOX_APP_MISSING",
            "no active sandbox app to sign with: create one (Apps → sandbox) and grant it the API",
        )
    })
}

/// Of `apps` (in key order), the first active one granted `api_id` or `*`, else the first
/// active one.
fn choose_app(
    apps: impl Iterator<Item = (String, v1::App)>,
    api_id: Option<&str>,
) -> Option<(String, String)> {
    let mut fallback = None;
    for (key, app) in apps {
        if app.status != v1::AppStatus::Active {
            continue;
        }
        let granted = app
            .apis
            .iter()
            .any(|a| a == "*" || Some(a.as_str()) == api_id);
        if granted {
            return Some((key, app.secret));
        }
        if fallback.is_none() {
            fallback = Some((key, app.secret));
        }
    }
    fallback
}

/// The gateway node that answers the call: `wanted` (404 when it is not live), else the first
/// live node with a sandbox listener; 503 `NO_SANDBOX_GATEWAY` when the node runs none.
pub async fn node(state: &Shared, wanted: Option<&str>) -> ApiResult<NodeInfo> {
    let nodes = live_nodes(state).await?;
    if let Some(id) = wanted {
        let node = nodes
            .into_iter()
            .find(|n| n.node_id == id)
            .ok_or_else(|| ApiError::not_found(format!("gateway node {id:?} is not live")))?;
        if node.sandbox_addr.is_none() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_SANDBOX_GATEWAY",
                format!("gateway node {id:?} runs no sandbox listener (--sandbox-listen)"),
            ));
        }
        return Ok(node);
    }
    let total = nodes.len();
    nodes
        .into_iter()
        .find(|n| n.sandbox_addr.as_deref().is_some_and(|a| !a.is_empty()))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NO_SANDBOX_GATEWAY",
                format!(
                    "no live gateway node runs a sandbox listener ({total} node(s) live): start \
                     one with --sandbox-listen"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(key: &str, status: &str, apis: &[&str]) -> (String, v1::App) {
        let app = serde_json::from_value(json!({
            "secret": format!("secret-of-{key}"), "status": status, "apis": apis
        }))
        .unwrap();
        (key.to_owned(), app)
    }

    #[test]
    fn the_app_granted_the_api_signs_else_any_active_one() {
        let apps = || {
            vec![
                app("a-disabled", "disabled", &["*"]),
                app("b-other", "active", &["other.api"]),
                app("c-granted", "active", &["order.get"]),
                app("d-star", "active", &["*"]),
            ]
            .into_iter()
        };
        let chosen = |api| choose_app(apps(), api).map(|(k, _)| k);
        assert_eq!(chosen(Some("order.get")).as_deref(), Some("c-granted"));
        assert_eq!(chosen(Some("x.y")).as_deref(), Some("d-star"));
        assert_eq!(chosen(None).as_deref(), Some("d-star"));
        let only_other = vec![app("b-other", "active", &["other.api"])].into_iter();
        let (key, secret) = choose_app(only_other, Some("order.get")).unwrap();
        assert_eq!(
            (key.as_str(), secret.as_str()),
            ("b-other", "secret-of-b-other")
        );
        let none_active = vec![app("a", "disabled", &["*"])].into_iter();
        assert_eq!(choose_app(none_active, None), None);
    }
}
