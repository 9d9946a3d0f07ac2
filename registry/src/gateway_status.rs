//! Reading every live gateway's admin `/status` at once, for the views that merge what the
//! gateways report (hot keys, notifications; docs/operations/gateway.md, "Admin endpoints"). A
//! gateway that cannot be read is reported with the error; it never fails the whole view.
//! The document is read as a [`GatewayStatus`] (`portico_control::status`: what an older or
//! newer gateway may leave out or add is said there).
//!
//! [`Served`] and [`refusals`] read what the gateways actually serve of each document (refused
//! documents, switches served degraded, each cluster's active side) for the lists that show it
//! next to the tree (docs/operations/registry.md, "What the gateways serve").

use crate::error::{ApiError, ApiResult};
use crate::state::Shared;
use crate::zk_store::Env;
use portico_control::status::{GatewayStatus, KeptDocument, PlaneStatus};
use portico_control::zk::NodeInfo;
use serde_json::{json, Value};
use std::time::Duration;

/// The live gateway nodes (`nodes/<id>`; a document that does not parse is left out).
pub async fn live_nodes(state: &Shared) -> ApiResult<Vec<NodeInfo>> {
    Ok(state
        .store
        .list_docs("nodes")
        .await?
        .iter()
        .filter_map(|(_, d)| serde_json::from_slice::<NodeInfo>(&d.data).ok())
        .collect())
}

/// How long one gateway's `/status` may take.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// A client for calls to gateways: no proxy, `timeout` per request.
pub fn client(timeout: Duration) -> ApiResult<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .no_proxy()
        .build()
        .map_err(|e| ApiError::unavailable(format!("no HTTP client: {e}")))
}

/// One gateway's `/status` at `admin_addr`, or why it could not be read (unreachable, not a
/// 2xx, or not a gateway's status: the field that does not read is named).
pub async fn read_one(client: &reqwest::Client, admin_addr: &str) -> Result<GatewayStatus, String> {
    let url = format!("http://{admin_addr}/status");
    let resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("{url} answered {}", resp.status()));
    }
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    GatewayStatus::from_slice(&body).map_err(|e| format!("{url}: {e}"))
}

/// What [`read_all`] answers: every live node with its `/status` or why it could not be read.
pub type Reads = Vec<(NodeInfo, Result<GatewayStatus, String>)>;

/// Every live gateway node with its `/status` (or why it could not be read), in node order.
pub async fn read_all(state: &Shared) -> ApiResult<Reads> {
    let nodes = live_nodes(state).await?;
    let client = client(STATUS_TIMEOUT)?;
    let reads =
        futures::future::join_all(nodes.iter().map(|info| read_one(&client, &info.admin_addr)))
            .await;
    Ok(nodes.into_iter().zip(reads).collect())
}

/// Splits [`read_all`]'s answer into the `nodes` list of a view (`{node_id, ok, error?}`)
/// and the statuses that could be read, as `(node id, status)`.
pub fn split(reads: Reads) -> (Vec<Value>, Vec<(String, GatewayStatus)>) {
    let mut nodes = Vec::with_capacity(reads.len());
    let mut statuses = Vec::with_capacity(reads.len());
    for (info, read) in reads {
        match read {
            Ok(status) => {
                nodes.push(json!({"node_id": info.node_id, "ok": true}));
                statuses.push((info.node_id, status));
            }
            Err(e) => nodes.push(json!({"node_id": info.node_id, "ok": false, "error": e})),
        }
    }
    (nodes, statuses)
}

// What the gateways serve, next to what the tree says (docs/operations/registry.md, "What the gateways
// serve").

/// One gateway's refusal of one document: it is not served; `kept_previous` says whether the
/// gateway still serves the last version it accepted, described by `kept` (that version's
/// `updated_by`, `updated_at`, `version`, `degraded`, `active` and `digest`, the gateway's
/// `/status` `rejected_documents[].kept`; older gateways report none).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Refusal {
    /// The gateway node.
    pub node_id: String,
    /// Why the gateway refused the document (naming the field).
    pub reason: String,
    /// Whether the previous accepted version is still served in its place.
    pub kept_previous: bool,
    /// The served previous version, when the gateway describes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<KeptDocument>,
}

/// The refused documents of an env, by tree path relative to the env (`switches/x`,
/// `apis/order.get`; folders such as `apps` too), each with the gateways that refuse it.
pub type Refusals = std::collections::BTreeMap<String, Vec<Refusal>>;

/// What every live gateway serves in one env: its plane's `/status` per node that could be
/// read (the `sandbox` object for [`Env::Sandbox`]; a gateway without a sandbox listener is
/// not counted there).
#[derive(Debug, Clone)]
pub struct Served {
    /// `{node_id, ok, error?}` per live gateway (as [`split`]).
    pub nodes: Vec<Value>,
    /// `(node id, plane status)` of the gateways read that serve the env.
    pub planes: Vec<(String, PlaneStatus)>,
}

impl Served {
    /// Reads every live gateway's `/status` and keeps the env's plane.
    pub async fn read(state: &Shared, env: Env) -> ApiResult<Served> {
        Ok(Served::from_reads(env, read_all(state).await?))
    }

    /// [`Served`] from [`read_all`]'s answer.
    pub fn from_reads(env: Env, reads: Reads) -> Served {
        let (nodes, statuses) = split(reads);
        let planes = statuses
            .into_iter()
            .filter_map(|(node, status)| match env {
                Env::Live => Some((node, status.live)),
                Env::Sandbox => status.sandbox.map(|s| (node, s)),
            })
            .collect();
        Served { nodes, planes }
    }

    /// Every refused document, by path, with the nodes refusing it (in node order).
    pub fn refusals(&self) -> Refusals {
        let mut out = Refusals::new();
        for (node, plane) in &self.planes {
            for r in &plane.rejected_documents {
                out.entry(r.path.clone()).or_default().push(Refusal {
                    node_id: node.clone(),
                    reason: r.reason.clone(),
                    kept_previous: r.kept_previous,
                    kept: r.kept.clone(),
                });
            }
        }
        out
    }

    /// The nodes refusing the document at `rel` (`switches/x`).
    pub fn refused(&self, rel: &str) -> Vec<Refusal> {
        self.refusals().remove(rel).unwrap_or_default()
    }

    /// The nodes that serve the switch `id` degraded (from `switches_degraded`).
    pub fn degraded_on(&self, id: &str) -> Vec<String> {
        self.planes
            .iter()
            .filter(|(_, p)| p.switches_degraded.iter().any(|s| s == id))
            .map(|(node, _)| node.clone())
            .collect()
    }

    /// The active side each node serves for cluster `name`: `{node_id, active, reason}`
    /// (`reason` `manual`: the document's `active`; `auto`: automatic failover). Nodes that
    /// do not serve the cluster are left out.
    pub fn cluster_sides(&self, name: &str) -> Vec<Value> {
        self.planes
            .iter()
            .filter_map(|(node, p)| {
                let c = p.clusters.as_ref()?.get(name)?;
                Some(json!({"node_id": node, "active": c.active, "reason": c.reason}))
            })
            .collect()
    }

    /// The `served` object of the document `name` in folder `dir` (`switches`, `apps`,
    /// `topics`, `clusters`, `apis`): `nodes` (how many gateways answered), `refused` (the
    /// [`Refusal`]s), and per kind: for a switch `degraded` (true / false when every node
    /// agrees, null when they differ or none answered) and `degraded_on`; for a cluster
    /// `sides` ([`Served::cluster_sides`]) and `active` (when every node agrees).
    pub fn item(&self, refusals: &Refusals, dir: &str, name: &str) -> Value {
        let rel = format!("{dir}/{name}");
        let refused = refusals.get(&rel).cloned().unwrap_or_default();
        let mut out = json!({"nodes": self.planes.len(), "refused": refused});
        let agreed = |values: Vec<Value>| -> Value {
            match values.split_first() {
                Some((first, rest)) if rest.iter().all(|v| v == first) => first.clone(),
                _ => Value::Null,
            }
        };
        match dir {
            "switches" => {
                let on = self.degraded_on(name);
                let each = self
                    .planes
                    .iter()
                    .map(|(node, _)| Value::Bool(on.contains(node)))
                    .collect();
                out["degraded"] = agreed(each);
                out["degraded_on"] = json!(on);
            }
            "clusters" => {
                let sides = self.cluster_sides(name);
                out["active"] = agreed(sides.iter().map(|s| s["active"].clone()).collect());
                out["sides"] = json!(sides);
            }
            _ => {}
        }
        out
    }
}

/// The refused documents of `env` as the live gateways report them, by tree path relative to
/// the env: for each, which nodes refuse it, why, and whether the previous version is kept
/// and served ([`Refusal`]). Gateways that cannot be read are left out (see [`Served`] for
/// which answered).
pub async fn refusals(state: &Shared, env: Env) -> ApiResult<Refusals> {
    Ok(Served::read(state, env).await?.refusals())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> NodeInfo {
        serde_json::from_value(json!({"node_id": id, "addr": "a", "admin_addr": "b",
            "started_at": ""}))
        .unwrap()
    }

    /// A gateway's `/status` with the plane fields given (the rest at their defaults).
    fn status(planes: Value) -> GatewayStatus {
        let mut doc = json!({"node_id": "n", "listen": "l", "started_at_ms": 0, "version": "v",
            "ready": true, "config_source": "s", "config_version": {"generation": 1, "digest": ""},
            "applied_at_ms": 0, "config_age_ms": 0, "apis_loaded": 0, "apis": [],
            "apps_loaded": 0, "switches_degraded": [], "rejected_documents": [], "invoke": {}});
        let plane = doc.clone();
        for (k, v) in planes.as_object().unwrap() {
            if k == "sandbox" {
                let mut sandbox = plane.clone();
                for (k, v) in v.as_object().unwrap() {
                    sandbox[k] = v.clone();
                }
                doc[k] = sandbox;
            } else {
                doc[k] = v.clone();
            }
        }
        GatewayStatus::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap()
    }

    #[test]
    fn served_gathers_refusals_switches_and_sides_per_env() {
        let gw1 = json!({
            "rejected_documents": [{"path": "switches/x", "reason": "not JSON",
                "kept_previous": true, "kept": {"degraded": true, "updated_by": "sre",
                "digest": "d"}}],
            "switches_degraded": ["x"],
            "clusters": {"c": {"active": "standby", "reason": "auto"}},
            "sandbox": {"rejected_documents": [{"path": "apis/d", "reason": "r",
                "kept_previous": false}], "switches_degraded": [], "clusters": {}},
        });
        let gw2 = json!({"rejected_documents": [], "switches_degraded": [],
            "clusters": {"c": {"active": "standby", "reason": "manual"}}});
        let reads = vec![
            (node("gw-1"), Ok(status(gw1))),
            (node("gw-2"), Ok(status(gw2))),
            (node("gw-3"), Err("refused".to_owned())),
        ];
        let live = Served::from_reads(Env::Live, reads.clone());
        assert_eq!(live.nodes.len(), 3);
        let refusals = live.refusals();
        assert_eq!(
            refusals["switches/x"],
            vec![Refusal {
                node_id: "gw-1".into(),
                reason: "not JSON".into(),
                kept_previous: true,
                kept: Some(KeptDocument {
                    degraded: Some(true),
                    updated_by: Some("sre".into()),
                    digest: "d".into(),
                    ..KeptDocument::default()
                }),
            }]
        );
        assert_eq!(
            serde_json::to_value(&refusals["switches/x"][0]).unwrap()["kept"],
            json!({"degraded": true, "updated_by": "sre", "digest": "d"}),
            "passed on as the gateway wrote it"
        );
        let x = live.item(&refusals, "switches", "x");
        assert_eq!(x["degraded"], Value::Null, "the nodes disagree");
        assert_eq!(x["degraded_on"], json!(["gw-1"]));
        assert_eq!(x["nodes"], 2);
        let c = live.item(&refusals, "clusters", "c");
        assert_eq!(c["active"], "standby");
        assert_eq!(c["sides"][0]["reason"], "auto");
        let other = live.item(&refusals, "switches", "y");
        assert_eq!(
            (other["degraded"].clone(), other["refused"].clone()),
            (json!(false), json!([]))
        );

        let sandbox = Served::from_reads(Env::Sandbox, reads);
        assert_eq!(sandbox.planes.len(), 1, "only gw-1 has a sandbox plane");
        assert!(!sandbox.refused("apis/d")[0].kept_previous);
        assert!(sandbox.refused("switches/x").is_empty());
    }
}
