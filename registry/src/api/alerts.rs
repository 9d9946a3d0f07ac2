//! Alert rules (`alerts/<name>`, live tree only) and what the registry evaluates of them
//! (docs/operations/alerts.md, "Alerts"): the rules are documents like the others (compare-and-set,
//! validated, audited); `GET /alerting` answers the alerts pending or firing now and the
//! history of firings and resolutions ([`crate::alerts`]).

use super::context::Ctx;
use super::documents::{delete_doc, get_json, list_json, write_json, Write};
use super::reply::json_response;
use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, count, parse_document};
use crate::route::{Body, Param, Reply, Route};
use crate::state::Shared;
use crate::zk_store::Env;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, put};
use portico_control::v1;
use serde_json::json;
use std::collections::HashMap;

/// Events answered by default, and at most.
const EVENTS_DEFAULT: usize = 50;
const EVENTS_MAX: usize = 500;

/// The routes (live only: rules watch the live gateways).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "alerts";
    vec![
        Route::new(Method::GET, "/alerts", TAG, "List alert rules", get(list))
            .reply(Reply::Json(200, "List")),
        Route::new(Method::GET, "/alerts/{name}", TAG, "Get an alert rule", get(read))
            .reply(Reply::Json(200, "AlertRule")),
        Route::new(Method::PUT, "/alerts/{name}", TAG, "Create or replace an alert rule: api (an id or *), condition (tp99_ms_above, availability_below, qps_above, qps_below, breaker_open, node_missing, config_lag_above), threshold, for_s, severity, receivers (webhook or email)", put(set))
            .body(Body::Json("AlertRule"))
            .reply(Reply::Json(200, "AlertRule"))
            .conditional(),
        Route::new(Method::DELETE, "/alerts/{name}", TAG, "Remove an alert rule (a firing alert of it resolves after its for_s)", delete(remove))
            .reply(Reply::Empty)
            .conditional(),
        Route::new(Method::GET, "/alerting", TAG, "The alerts pending, firing or resolving now (as this registry evaluates them every 2 s), whether this registry sends the notifications, and the newest firings and resolutions with their notifications", get(status))
            .reply(Reply::Json(200, "Alerting"))
            .query_as("limit", "events answered (default 50, at most 500)", Param::Count)
            .query_as("rule", "only the events of this rule", Param::Name)
            .query_as("api", "only the events of this API", Param::Name),
    ]
}

fn rel(name: &str) -> String {
    format!("alerts/{name}")
}

async fn list(State(state): State<Shared>) -> ApiResult<Response> {
    list_json(&state, Env::Live, "alerts").await
}

async fn read(State(state): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    check_name("alert rule name", &name)?;
    get_json(
        &state,
        Env::Live,
        &rel(&name),
        &format!("alert rule {name:?}"),
    )
    .await
}

async fn set(
    State(state): State<Shared>,
    Path(name): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("alert rule name", &name)?;
    let (_, value) = parse_document::<v1::AlertRule>(&body, "alert rule")?;
    let write = Write {
        env: Env::Live,
        rel: &rel(&name),
        value: &value,
        pre: ctx.precondition(None)?,
        action: "alert.put",
        actor: ctx.actor(None),
    };
    write_json(&state, &ctx, write).await
}

async fn remove(
    State(state): State<Shared>,
    Path(name): Path<String>,
    ctx: Ctx,
) -> ApiResult<Response> {
    check_name("alert rule name", &name)?;
    delete_doc(&state, &ctx, Env::Live, &rel(&name), false, "alert.delete").await
}

async fn status(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let limit = count(&q, "limit", EVENTS_DEFAULT, EVENTS_MAX)?;
    for key in ["rule", "api"] {
        if let Some(v) = q.get(key) {
            check_name(key, v)?;
        }
    }
    let Some(history) = state.history().cloned() else {
        return Ok(json_response(
            StatusCode::OK,
            &json!({"evaluating": false, "leader": false, "rules": 0, "alerts": [], "events": [],
                "problem": "this registry keeps no history store: alerts are not evaluated"}),
            None,
        ));
    };
    let board = history.board();
    let (rule, api) = (q.get("rule").cloned(), q.get("api").cloned());
    let events = tokio::task::spawn_blocking(move || {
        history.events(limit, None, rule.as_deref(), api.as_deref())
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut body = serde_json::to_value(&board).map_err(|e| ApiError::internal(e.to_string()))?;
    body["events"] =
        serde_json::to_value(&events).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_response(StatusCode::OK, &body, None))
}
