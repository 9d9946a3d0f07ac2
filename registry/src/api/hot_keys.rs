//! `GET /apis/{id}/hot-keys`: an API's hot keys aggregated across the live gateways
//! (docs/operations/caching.md, "Caching and hot keys"). Each registered gateway's `/status` is read at
//! once (`hot_keys.<id>`); keys are merged by name: rates and bytes per second add up, `since_ms`
//! is the earliest, `gateways` lists where the key is hot. A gateway that cannot be read is listed
//! in `nodes` with the error, and the answer is still 200.

use super::reply::json_response;
use crate::error::ApiResult;
use crate::gateway_status;
use crate::input::check_name;
use crate::route::Route;
use crate::state::Shared;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use portico_control::status::GatewayStatus;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The route.
pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/apis/{id}/hot-keys",
        "ops",
        "An API's hot keys aggregated across the live gateways' /status: per key the summed \
         rate and bytes/s, the earliest since_ms, the gateways finding it hot and the \
         key-level switch match that blocks exactly it (null when none can); gateways that \
         cannot be read are listed with the error",
        get(hot_keys),
    )]
}

/// One key as merged across gateways.
#[derive(Debug, Default)]
struct Merged {
    rate: f64,
    bytes_per_s: f64,
    since_ms: Option<u64>,
    gateways: Vec<String>,
    /// The key-level switch `match` selecting exactly this key, as the gateways computed it.
    switch_match: Option<BTreeMap<String, Vec<String>>>,
}

/// Merges the `hot_keys.<api>` lists of the nodes' statuses (node id, status).
fn merge(api: &str, statuses: &[(String, GatewayStatus)]) -> Vec<Value> {
    let mut keys: BTreeMap<String, Merged> = BTreeMap::new();
    for (node, status) in statuses {
        let Some(list) = status.live.hot_keys.get(api) else {
            continue;
        };
        for k in list {
            let m = keys.entry(k.key.clone()).or_default();
            m.rate += k.rate;
            m.bytes_per_s += k.bytes_per_s;
            m.since_ms = Some(m.since_ms.map_or(k.since_ms, |s| s.min(k.since_ms)));
            if m.switch_match.is_none() {
                m.switch_match.clone_from(&k.switch_match);
            }
            m.gateways.push(node.clone());
        }
    }
    let mut out: Vec<(String, Merged)> = keys.into_iter().collect();
    out.sort_by(|a, b| b.1.rate.total_cmp(&a.1.rate).then(a.0.cmp(&b.0)));
    out.into_iter()
        .map(|(key, m)| {
            json!({
                "key": key,
                "rate": (m.rate * 10.0).round() / 10.0,
                "bytes_per_s": m.bytes_per_s.round(),
                "since_ms": m.since_ms,
                "gateways": m.gateways,
                "match": m.switch_match,
            })
        })
        .collect()
}

async fn hot_keys(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let (nodes, statuses) = gateway_status::split(gateway_status::read_all(&state).await?);
    let body = json!({"api_id": id, "keys": merge(&id, &statuses), "nodes": nodes});
    Ok(json_response(StatusCode::OK, &body, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_merge_across_gateways() {
        let with_hot_keys = |hot_keys: Value| GatewayStatus {
            live: portico_control::status::PlaneStatus {
                hot_keys: serde_json::from_value(hot_keys).unwrap(),
                ..Default::default()
            },
            ..GatewayStatus::default()
        };
        let a = with_hot_keys(json!({"sku.get": [
            {"key": "BK-1", "rate": 300.0, "bytes_per_s": 1000.0, "since_ms": 20,
             "match": {"path:sku": ["BK-1"]}},
            {"key": "BK-2", "rate": 150.0, "bytes_per_s": 10.0, "since_ms": 30}
        ], "other": [{"key": "X", "rate": 1.0}]}));
        let b = with_hot_keys(json!({"sku.get": [
            {"key": "BK-1", "rate": 250.0, "bytes_per_s": 500.0, "since_ms": 10}
        ]}));
        let merged = merge(
            "sku.get",
            &[
                ("gw-a".into(), a),
                ("gw-b".into(), b),
                ("gw-c".into(), GatewayStatus::default()),
            ],
        );
        assert_eq!(merged.len(), 2);
        assert_eq!(
            merged[0],
            json!({"key": "BK-1", "rate": 550.0, "bytes_per_s": 1500.0, "since_ms": 10,
                   "gateways": ["gw-a", "gw-b"], "match": {"path:sku": ["BK-1"]}})
        );
        assert_eq!(merged[1]["key"], "BK-2");
        assert_eq!(merged[1]["match"], Value::Null);
    }
}
