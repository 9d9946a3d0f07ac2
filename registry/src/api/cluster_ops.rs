//! Operating a live cluster (docs/operations/clusters.md, "Failover runbook"): manual failover between its
//! primary and standby sets, its overview for the console (each gateway's view of its sets,
//! from the gateways' `/status`) and its autoscale and sleep events ([`crate::autoscale`]).
//!
//! Live only: the sandbox has no traffic to move, scale or put to sleep.

use super::audit::audit;
use super::context::Ctx;
use super::documents::check_precondition;
use super::validation::validate_change;
use crate::autoscale;
use crate::error::{ApiError, ApiResult};
use crate::input::{check_name, parse_object};
use crate::route::{Body, Reply, Route};
use crate::state::Shared;
use crate::zk_store::{Env, Precondition};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use portico_control::v1;
use portico_control::zk::NodeInfo;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// Deadline of one gateway's `/status` read for the overview.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1500);
/// Longest failover reason kept.
const MAX_REASON: usize = 500;
/// Read-modify-write attempts of a failover racing other writes of the cluster.
const FAILOVER_ATTEMPTS: usize = 5;

/// The routes (live only).
pub fn routes() -> Vec<Route> {
    const TAG: &str = "clusters";
    vec![
        Route::new(
            Method::POST,
            "/clusters/{name}/failover",
            TAG,
            "Move a cluster's traffic to its primary or standby set (writes `active`; reason required; audited)",
            post(failover),
        )
        .body(Body::Json("Failover"))
        .reply(Reply::Json(200, "Cluster"))
        .conditional(),
        Route::new(
            Method::GET,
            "/clusters/{name}/overview",
            TAG,
            "A cluster's sets, each gateway's view of them (active set, endpoint health and load), its request rate and autoscale events",
            get(overview),
        )
        .reply(Reply::Json(200, "ClusterOverview")),
        Route::new(
            Method::GET,
            "/clusters/{name}/autoscale/events",
            TAG,
            "A cluster's recent autoscale firings, webhook failures and sleep calls, newest first",
            get(events),
        )
        .reply(Reply::Json(200, "ClusterEvents")),
    ]
}

/// The body of `POST /clusters/{name}/failover`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailoverRequest {
    /// `primary` or `standby`.
    to: String,
    /// Why (required; audited).
    reason: String,
}

fn rel(name: &str) -> String {
    format!("clusters/{name}")
}

/// The set a cluster document says serves: its `active`, `primary` when absent.
pub fn active_of(doc: &Value) -> &str {
    doc.get("active")
        .and_then(Value::as_str)
        .unwrap_or("primary")
}

/// Whether a cluster document has a standby set with at least one endpoint.
fn has_standby(doc: &Value) -> bool {
    doc.pointer("/standby/endpoints")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.is_empty())
}

/// Checks a failover request: 400 naming what is wrong.
fn check_request(body: &Bytes) -> ApiResult<FailoverRequest> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("failover: not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("failover: must be a JSON object"));
    }
    let (req, _) = parse_object::<FailoverRequest>(body, "failover")
        .map_err(|e| ApiError::bad_request(e.message))?;
    if req.to != "primary" && req.to != "standby" {
        return Err(ApiError::bad_request(format!(
            "failover: `to` must be \"primary\" or \"standby\", not {:?}",
            req.to
        )));
    }
    let reason = req.reason.trim();
    if reason.is_empty() {
        return Err(ApiError::bad_request(
            "failover: `reason` is required (it is recorded in the audit log)",
        ));
    }
    if reason.chars().count() > MAX_REASON {
        return Err(ApiError::bad_request(format!(
            "failover: `reason` is longer than {MAX_REASON} characters"
        )));
    }
    Ok(FailoverRequest {
        to: req.to,
        reason: reason.to_owned(),
    })
}

/// `POST /clusters/{name}/failover`: sets the cluster document's `active` (every other field
/// kept) under the document's version (compare-and-set; with `If-Match` that version, else the
/// version just read, retried when another write won), validated as any write, audited as
/// `cluster.failover` with who, from, to and why. The gateways get it through ZooKeeper.
async fn failover(
    State(state): State<Shared>,
    Path(name): Path<String>,
    ctx: Ctx,
    body: Bytes,
) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    let req = check_request(&body)?;
    let given = ctx.precondition(None)?;
    if given == Precondition::Absent {
        return Err(ApiError::bad_request(
            "failover: If-None-Match does not apply (the cluster must exist)",
        ));
    }
    let rel = rel(&name);
    let path = Env::Live.path(&rel);
    let actor = ctx.actor(None);
    for _ in 0..FAILOVER_ATTEMPTS {
        check_precondition(&state, Env::Live, &rel, given).await?;
        let doc = state
            .store
            .require(&path, &format!("cluster {name:?}"))
            .await?;
        let mut value: Value = serde_json::from_slice(&doc.data).map_err(|e| {
            ApiError::conflict(format!(
                "cluster {name:?} is not valid JSON ({e}): fix it with PUT first"
            ))
        })?;
        if req.to == "standby" && !has_standby(&value) {
            return Err(ApiError::bad_request(format!(
                "failover: cluster {name:?} has no standby set (`standby.endpoints`)"
            )));
        }
        let from = active_of(&value).to_owned();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("active".to_owned(), Value::String(req.to.clone()));
        }
        let _: v1::Cluster = crate::input::typed_document(&value, "cluster")?;
        let data = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;
        validate_change(&state, Env::Live, &[(rel.clone(), Some(data.clone()))]).await?;
        let pre = match given {
            Precondition::Version(v) => Precondition::Version(v),
            _ => Precondition::Version(doc.stat.version),
        };
        match state.store.put(&path, &data, pre).await {
            Ok(written) => {
                let detail = json!({
                    "version": written.stat.version,
                    "from": from,
                    "to": req.to,
                    "reason": req.reason,
                });
                audit(&state, &ctx, &actor, "cluster.failover", &path, detail).await;
                tracing::info!(cluster = %name, %from, to = %req.to, %actor, reason = %req.reason, "failover");
                return Ok(super::reply::raw_json_response(
                    StatusCode::OK,
                    data,
                    Some(&written.stat),
                ));
            }
            // Another write won the race: read again, unless the client pinned a version.
            Err(e) if e.code == "CONFLICT" && !matches!(given, Precondition::Version(_)) => {
                continue
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(format!(
        "cluster {name:?} kept changing during the failover: retry"
    )))
}

/// `GET /clusters/{name}/overview`: the document, its sets, each live gateway's view (from its
/// `/status` `clusters.<name>`; `unknown` when the gateway does not report clusters, an older
/// gateway, or cannot be read), the cluster's request rate (and when this registry last
/// evaluated it) and its recent events.
async fn overview(State(state): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    let doc = state
        .store
        .require(&Env::Live.path(&rel(&name)), &format!("cluster {name:?}"))
        .await?;
    let cluster: Value = serde_json::from_slice(&doc.data).unwrap_or(Value::Null);
    let nodes: Vec<NodeInfo> = state
        .store
        .list_docs("nodes")
        .await?
        .iter()
        .filter_map(|(_, d)| serde_json::from_slice::<NodeInfo>(&d.data).ok())
        .collect();
    let client = reqwest::Client::builder()
        .timeout(STATUS_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let gateways =
        futures::future::join_all(nodes.iter().map(|node| gateway_view(&client, node, &name)))
            .await;
    let rate = autoscale::current_rate(&state, &name);
    let events = autoscale::events(&state, &name).await?;
    let body = json!({
        "name": name,
        "etag": doc.stat.version.to_string(),
        "cluster": cluster,
        "active": active_of(&cluster),
        "sets": {
            "primary": cluster.get("endpoints").cloned().unwrap_or(json!([])),
            "standby": cluster.pointer("/standby/endpoints").cloned().unwrap_or(json!([])),
        },
        "gateways": gateways,
        "rps": rate,
        "evaluated_at_ms": autoscale::evaluated_at_ms(&state),
        "events": events,
    });
    Ok(super::reply::json_response(
        StatusCode::OK,
        &body,
        Some(&doc.stat),
    ))
}

/// One gateway's view of the cluster: `{node_id, admin_addr, config_version, active, reason,
/// endpoints: [{addr, set, healthy, load, ...}], status, note?, error?}`, `active: "unknown"`
/// when its `/status` has no `clusters` block (an older gateway) or cannot be read.
async fn gateway_view(client: &reqwest::Client, node: &NodeInfo, name: &str) -> Value {
    let read = crate::gateway_status::read_one(client, &node.admin_addr).await;
    let mut view = json!({
        "node_id": node.node_id,
        "admin_addr": node.admin_addr,
        "config_version": node.config_version,
        "active": "unknown",
        "endpoints": [],
    });
    match read {
        Ok(status) => match &status.live.clusters {
            Some(clusters) => match clusters.get(name) {
                Some(c) => {
                    view["active"] = json!(c.active);
                    view["reason"] = json!(c.reason);
                    view["endpoints"] = Value::Array(endpoints_of(c));
                    view["status"] = serde_json::to_value(c).unwrap_or(Value::Null);
                }
                None => view["note"] = json!("the gateway does not serve this cluster"),
            },
            None => view["note"] = json!("the gateway does not report clusters (older version)"),
        },
        Err(e) => view["error"] = json!(e),
    }
    view
}

/// The endpoints of a gateway's `/status` `clusters.<name>` (`primary` and `standby` lists),
/// each with the `set` it belongs to.
fn endpoints_of(cluster_status: &portico_control::status::ClusterStatus) -> Vec<Value> {
    let primary = cluster_status.primary.iter().map(|e| ("primary", e));
    let standby = cluster_status
        .standby
        .iter()
        .flatten()
        .map(|e| ("standby", e));
    primary
        .chain(standby)
        .map(|(set, e)| {
            let mut e = serde_json::to_value(e).unwrap_or(Value::Null);
            if let Some(obj) = e.as_object_mut() {
                obj.insert("set".to_owned(), json!(set));
            }
            e
        })
        .collect()
}

/// `GET /clusters/{name}/autoscale/events`: `{"items": [event, ...]}`, newest first.
async fn events(State(state): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    check_name("cluster", &name)?;
    state
        .store
        .require(&Env::Live.path(&rel(&name)), &format!("cluster {name:?}"))
        .await?;
    let items = autoscale::events(&state, &name).await?;
    Ok(super::reply::json_response(
        StatusCode::OK,
        &json!({"items": items}),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failover_requests_are_checked() {
        let ok = check_request(&Bytes::from_static(
            br#"{"to":"standby","reason":" dc1 down "}"#,
        ))
        .unwrap();
        assert_eq!(
            (ok.to.as_str(), ok.reason.as_str()),
            ("standby", "dc1 down")
        );
        for bad in [
            &br#"{"to":"standby"}"#[..],
            br#"{"to":"standby","reason":"  "}"#,
            br#"{"to":"sideways","reason":"x"}"#,
            br#"{"to":"primary","reason":"x","extra":1}"#,
            br#"[]"#,
            br#"{oops"#,
        ] {
            let err = check_request(&Bytes::copy_from_slice(bad)).unwrap_err();
            assert_eq!(
                err.status,
                StatusCode::BAD_REQUEST,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn gateway_endpoints_are_listed_with_their_set() {
        let read = |v: Value| -> portico_control::status::ClusterStatus {
            serde_json::from_value(v).unwrap()
        };
        let status = read(json!({"active": "primary",
            "primary": [{"addr": "a:1", "healthy": true, "load": 0.25}],
            "standby": [{"addr": "b:1", "healthy": false, "load": null}]}));
        let e = endpoints_of(&status);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0]["set"], "primary");
        assert_eq!(e[0]["load"], 0.25);
        assert_eq!(e[1]["set"], "standby");
        assert_eq!(e[1]["healthy"], false);
        assert!(endpoints_of(&read(json!({"primary": [], "standby": null}))).is_empty());
    }

    #[test]
    fn active_defaults_to_primary_and_standby_needs_endpoints() {
        assert_eq!(active_of(&json!({})), "primary");
        assert_eq!(active_of(&json!({"active": "standby"})), "standby");
        assert!(!has_standby(&json!({})));
        assert!(!has_standby(&json!({"standby": {"endpoints": []}})));
        assert!(has_standby(
            &json!({"standby": {"endpoints": [{"addr": "a:1"}]}})
        ));
    }
}
