//! Daily and weekly reports (docs/operations/history-and-reports.md, "Reports"): `GET /reports` builds one from
//! this registry's history store ([`crate::reports`]), as JSON or HTML; `POST /reports/send`
//! writes the platform's and every owner's report to `--reports-dir` and mails the owners now.

use super::audit::audit;
use super::context::Ctx;
use super::reply::json_response;
use crate::error::{ApiError, ApiResult};
use crate::input::check_name;
use crate::reports::{self, deliver, Period};
use crate::route::{Param, Reply, Route};
use crate::state::Shared;
use axum::extract::{Query, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};

/// The routes.
pub fn routes() -> Vec<Route> {
    const TAG: &str = "reports";
    vec![
        Route::new(Method::GET, "/reports", TAG, "A report over the rolling 24 h (day) or 7 days (week) up to now, per API and for the platform: calls, availability, TP50/90/99/999, top error codes, slowest APIs, breaker openings, switch flips, change vs the previous period, series for charts", get(report))
            .reply(Reply::JsonOrHtml("Report"))
            .query_as("period", "day (default) or week", Param::OneOf(&["day", "week"]))
            .query_as("api", "only this API", Param::Name)
            .query_as("format", "json (default) or html", Param::OneOf(&["json", "html"])),
        Route::new(Method::POST, "/reports/send", TAG, "Write the platform's and each owner's report to --reports-dir and mail each owner theirs now (SMTP when --smtp is set)", post(send))
            .reply(Reply::Json(200, "ReportsSent"))
            .query_as("period", "day (default) or week", Param::OneOf(&["day", "week"])),
    ]
}

fn period_of(q: &HashMap<String, String>) -> ApiResult<Period> {
    match q.get("period") {
        None => Ok(Period::Day),
        Some(p) => Period::parse(p)
            .ok_or_else(|| ApiError::bad_request(format!("period: {p:?} is not day or week"))),
    }
}

/// 503 `NO_HISTORY_STORE`: this registry was started without `--data-dir` / `--history-db`
/// (docs/operations/history-and-reports.md, "The history store"); not ZooKeeper's fault, so not its code.
fn no_history() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "NO_HISTORY_STORE",
        "this registry keeps no history store: start it with --data-dir (or --history-db) to build reports",
    )
}

async fn report(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let period = period_of(&q)?;
    let html = match q.get("format").map(String::as_str) {
        None | Some("json") => false,
        Some("html") => true,
        Some(f) => {
            return Err(ApiError::bad_request(format!(
                "format: {f:?} is not json or html"
            )))
        }
    };
    let only: Option<BTreeSet<String>> = match q.get("api") {
        Some(api) => {
            check_name("api", api)?;
            Some([api.clone()].into_iter().collect())
        }
        None => None,
    };
    let history = state.history().cloned().ok_or_else(no_history)?;
    // Owners are decoration: a report is still answered while ZooKeeper is away.
    let owners = deliver::owners(&state).await.unwrap_or_default();
    let now = portico_control::clock::now_ms();
    let r = tokio::task::spawn_blocking(move || {
        reports::build(&history, period, only.as_ref(), &owners, now)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    if html {
        return Ok((
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            reports::html::render(&r),
        )
            .into_response());
    }
    Ok(json_response(StatusCode::OK, &r, None))
}

async fn send(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    ctx: Ctx,
) -> ApiResult<Response> {
    let period = period_of(&q)?;
    let d = deliver::configured().ok_or_else(no_history)?;
    let out = deliver::deliver(&state, &d, period)
        .await
        .map_err(ApiError::unavailable)?;
    audit(
        &state,
        &ctx,
        &ctx.actor(None),
        "reports.send",
        period.name(),
        json!({"files": out.files.len(), "mails": out.mails.iter().filter(|m| m.sent).count()}),
    )
    .await;
    Ok(json_response(StatusCode::OK, &out, None))
}
