//! `GET /health/apis`: per-API health aggregated from the live gateways' `/metrics`
//! ([`crate::health`]).

use super::reply::json_response;
use crate::error::{ApiError, ApiResult};
use crate::health::report::{report, SeriesFilter};
use crate::health::scraper::monitor;
use crate::route::{Param, Route};
use crate::state::Shared;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use std::collections::HashMap;
use std::time::Duration;

/// Default window of the summary figures, in seconds.
const DEFAULT_WINDOW_S: u64 = 10;

/// The route of the health report.
pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/health/apis",
        "ops",
        "Per-API health aggregated from the live gateways' /metrics (scraped every 2 s while \
         someone asks): QPS, TP50/90/99/999, availability (non-5xx share), calls in flight and \
         each node's breaker state, with a short history for charts",
        get(apis_health),
    )
    .query_as(
        "window",
        "seconds the summary figures cover (default 10, 2 to 180)",
        Param::Count,
    )
    .query_as(
        "plane",
        "live (default), sandbox or all",
        Param::OneOf(&["live", "sandbox", "all"]),
    )
    .query(
        "series",
        "comma-separated API ids whose history to include; `*` (default) all, `none` none",
    )]
}

/// `?window`: 2 to 180 seconds, default [`DEFAULT_WINDOW_S`].
fn window_param(q: &HashMap<String, String>) -> ApiResult<Duration> {
    let secs = match q.get("window") {
        Some(w) => w
            .parse::<u64>()
            .map_err(|_| {
                ApiError::bad_request(format!("window: {w:?} is not a number of seconds"))
            })?
            .clamp(2, 180),
        None => DEFAULT_WINDOW_S,
    };
    Ok(Duration::from_secs(secs))
}

/// `?plane`: `live` (default), `sandbox`, or `all` (`None`).
fn plane_param(q: &HashMap<String, String>) -> ApiResult<Option<&'static str>> {
    match q.get("plane").map(String::as_str) {
        None | Some("live") => Ok(Some("live")),
        Some("sandbox") => Ok(Some("sandbox")),
        Some("all") => Ok(None),
        Some(other) => Err(ApiError::bad_request(format!(
            "plane: {other:?} is not live, sandbox or all"
        ))),
    }
}

/// `?series`: `*` or `all` (default), `none` or empty, or comma-separated API ids.
fn series_param(q: &HashMap<String, String>) -> SeriesFilter {
    match q.get("series").map(String::as_str) {
        None | Some("*") | Some("all") => SeriesFilter::All,
        Some("none") | Some("") => SeriesFilter::None,
        Some(list) => SeriesFilter::Only(
            list.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
    }
}

async fn apis_health(
    State(state): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let window = window_param(&q)?;
    let plane = plane_param(&q)?;
    let series = series_param(&q);
    let m = monitor(&state);
    m.first_round().await;
    let body = report(&m.inner(), window, plane, &series);
    Ok(json_response(StatusCode::OK, &body, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parameters() {
        assert_eq!(window_param(&q(&[])).unwrap(), Duration::from_secs(10));
        assert_eq!(
            window_param(&q(&[("window", "1")])).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            window_param(&q(&[("window", "999")])).unwrap(),
            Duration::from_secs(180)
        );
        assert!(window_param(&q(&[("window", "x")])).is_err());
        assert_eq!(plane_param(&q(&[])).unwrap(), Some("live"));
        assert_eq!(plane_param(&q(&[("plane", "all")])).unwrap(), None);
        assert!(plane_param(&q(&[("plane", "x")])).is_err());
        assert!(matches!(series_param(&q(&[])), SeriesFilter::All));
        assert!(matches!(
            series_param(&q(&[("series", "")])),
            SeriesFilter::None
        ));
        match series_param(&q(&[("series", "a, b,,")])) {
            SeriesFilter::Only(ids) => assert_eq!(ids.into_iter().collect::<Vec<_>>(), ["a", "b"]),
            other => panic!("{other:?}"),
        }
    }
}
