//! `GET /apis/{id}/hot-keys`: an API's hot keys aggregated across the live gateways
//! (docs/OPERATIONS.md, "Hot keys"). Each registered gateway's `/status` is read at once
//! (`hot_keys.<id>`); keys are merged by name: rates and bytes per second add up, `since_ms`
//! is the earliest, `gateways` lists where the key is hot. A gateway that cannot be read is
//! listed in `nodes` with the error, and the answer is still 200.

use super::reply::json_response;
use crate::error::ApiResult;
use crate::input::check_name;
use crate::route::Route;
use crate::state::Shared;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use portico_control::zk::NodeInfo;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long one gateway's `/status` may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// The route.
pub fn routes() -> Vec<Route> {
    vec![Route::new(
        Method::GET,
        "/apis/{id}/hot-keys",
        "ops",
        "An API's hot keys aggregated across the live gateways' /status: per key the summed \
         rate and bytes/s, the earliest since_ms and the gateways finding it hot; gateways \
         that cannot be read are listed with the error",
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
}

/// Merges the `hot_keys.<api>` lists of the nodes' statuses (node id, status).
fn merge(api: &str, statuses: &[(String, Value)]) -> Vec<Value> {
    let mut keys: BTreeMap<String, Merged> = BTreeMap::new();
    for (node, status) in statuses {
        let Some(list) = status["hot_keys"][api].as_array() else {
            continue;
        };
        for k in list {
            let Some(name) = k["key"].as_str() else {
                continue;
            };
            let m = keys.entry(name.to_owned()).or_default();
            m.rate += k["rate"].as_f64().unwrap_or(0.0);
            m.bytes_per_s += k["bytes_per_s"].as_f64().unwrap_or(0.0);
            if let Some(since) = k["since_ms"].as_u64() {
                m.since_ms = Some(m.since_ms.map_or(since, |s| s.min(since)));
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
            })
        })
        .collect()
}

async fn hot_keys(State(state): State<Shared>, Path(id): Path<String>) -> ApiResult<Response> {
    check_name("api id", &id)?;
    let docs = state.store.list_docs("nodes").await?;
    let infos: Vec<NodeInfo> = docs
        .iter()
        .filter_map(|(_, d)| serde_json::from_slice::<NodeInfo>(&d.data).ok())
        .collect();
    let client = reqwest::Client::builder()
        .timeout(STATUS_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| crate::error::ApiError::unavailable(format!("no HTTP client: {e}")))?;
    let reads = futures::future::join_all(infos.iter().map(|info| {
        let client = client.clone();
        async move {
            let url = format!("http://{}/status", info.admin_addr);
            let read = async {
                let resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
                if !resp.status().is_success() {
                    return Err(format!("{url} answered {}", resp.status()));
                }
                resp.json::<Value>().await.map_err(|e| e.to_string())
            }
            .await;
            (info.node_id.clone(), read)
        }
    }))
    .await;
    let mut nodes = Vec::with_capacity(reads.len());
    let mut statuses = Vec::with_capacity(reads.len());
    for (node, read) in reads {
        match read {
            Ok(status) => {
                nodes.push(json!({"node_id": node, "ok": true}));
                statuses.push((node, status));
            }
            Err(e) => nodes.push(json!({"node_id": node, "ok": false, "error": e})),
        }
    }
    let body = json!({"api_id": id, "keys": merge(&id, &statuses), "nodes": nodes});
    Ok(json_response(StatusCode::OK, &body, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_merge_across_gateways() {
        let a = json!({"hot_keys": {"sku.get": [
            {"key": "BK-1", "rate": 300.0, "bytes_per_s": 1000.0, "since_ms": 20},
            {"key": "BK-2", "rate": 150.0, "bytes_per_s": 10.0, "since_ms": 30}
        ], "other": [{"key": "X", "rate": 1.0}]}});
        let b = json!({"hot_keys": {"sku.get": [
            {"key": "BK-1", "rate": 250.0, "bytes_per_s": 500.0, "since_ms": 10}
        ]}});
        let merged = merge(
            "sku.get",
            &[
                ("gw-a".into(), a),
                ("gw-b".into(), b),
                ("gw-c".into(), json!({})),
            ],
        );
        assert_eq!(merged.len(), 2);
        assert_eq!(
            merged[0],
            json!({"key": "BK-1", "rate": 550.0, "bytes_per_s": 1500.0, "since_ms": 10,
                   "gateways": ["gw-a", "gw-b"]})
        );
        assert_eq!(merged[1]["key"], "BK-2");
    }
}
