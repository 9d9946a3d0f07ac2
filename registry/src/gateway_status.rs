//! Reading every live gateway's admin `/status` at once, for the views that merge what the
//! gateways report (hot keys, notifications; docs/OPERATIONS.md, "Admin endpoints"). A
//! gateway that cannot be read is reported with the error; it never fails the whole view.
//!
//! [`Served`] and [`refusals`] read what the gateways actually serve of each document (refused
//! documents, switches served degraded, each cluster's active side) for the lists that show it
//! next to the tree (docs/OPERATIONS.md, "What the gateways serve").

use crate::error::{ApiError, ApiResult};
use crate::state::Shared;
use crate::zk_store::Env;
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

/// Every live gateway node with its `/status` (or why it could not be read), in node order.
pub async fn read_all(state: &Shared) -> ApiResult<Vec<(NodeInfo, Result<Value, String>)>> {
    let nodes = live_nodes(state).await?;
    let client = client(STATUS_TIMEOUT)?;
    let reads = futures::future::join_all(nodes.iter().map(|info| {
        let client = client.clone();
        async move {
            let url = format!("http://{}/status", info.admin_addr);
            let resp = client.get(&url).send().await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("{url} answered {}", resp.status()));
            }
            resp.json::<Value>().await.map_err(|e| e.to_string())
        }
    }))
    .await;
    Ok(nodes.into_iter().zip(reads).collect())
}

/// Splits [`read_all`]'s answer into the `nodes` list of a view (`{node_id, ok, error?}`)
/// and the statuses that could be read, as `(node id, status)`.
pub fn split(reads: Vec<(NodeInfo, Result<Value, String>)>) -> (Vec<Value>, Vec<(String, Value)>) {
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

// What the gateways serve, next to what the tree says (docs/OPERATIONS.md, "What the gateways
// serve").

/// One gateway's refusal of one document: it is not served; `kept_previous` says whether the
/// gateway still serves the last version it accepted, described by `kept` (that version's
/// `updated_by`, `updated_at`, `version`, `degraded`, `active` and `digest`, as the gateway
/// reports them; older gateways report none).
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
    pub kept: Option<Value>,
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
    pub planes: Vec<(String, Value)>,
}

impl Served {
    /// Reads every live gateway's `/status` and keeps the env's plane.
    pub async fn read(state: &Shared, env: Env) -> ApiResult<Served> {
        Ok(Served::from_reads(env, read_all(state).await?))
    }

    /// [`Served`] from [`read_all`]'s answer.
    pub fn from_reads(env: Env, reads: Vec<(NodeInfo, Result<Value, String>)>) -> Served {
        let (nodes, statuses) = split(reads);
        let planes = statuses
            .into_iter()
            .filter_map(|(node, status)| match env {
                Env::Live => Some((node, status)),
                Env::Sandbox => status.get("sandbox").cloned().map(|s| (node, s)),
            })
            .collect();
        Served { nodes, planes }
    }

    /// Every refused document, by path, with the nodes refusing it (in node order).
    pub fn refusals(&self) -> Refusals {
        let mut out = Refusals::new();
        for (node, plane) in &self.planes {
            let rejected = plane["rejected_documents"].as_array();
            for r in rejected.into_iter().flatten() {
                let Some(path) = r["path"].as_str() else {
                    continue;
                };
                out.entry(path.to_owned()).or_default().push(Refusal {
                    node_id: node.clone(),
                    reason: r["reason"].as_str().unwrap_or_default().to_owned(),
                    kept_previous: r["kept_previous"].as_bool().unwrap_or(false),
                    kept: r.get("kept").filter(|k| !k.is_null()).cloned(),
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
            .filter(|(_, p)| {
                p["switches_degraded"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|v| v.as_str() == Some(id)))
            })
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
                let c = p["clusters"].get(name)?;
                Some(json!({"node_id": node, "active": c["active"], "reason": c["reason"]}))
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

    #[test]
    fn served_gathers_refusals_switches_and_sides_per_env() {
        let gw1 = json!({
            "rejected_documents": [{"path": "switches/x", "reason": "not JSON",
                "kept_previous": true, "kept": {"degraded": true, "updated_by": "sre"}}],
            "switches_degraded": ["x"],
            "clusters": {"c": {"active": "standby", "reason": "auto"}},
            "sandbox": {"rejected_documents": [{"path": "apis/d", "reason": "r",
                "kept_previous": false}], "switches_degraded": [], "clusters": {}},
        });
        let gw2 = json!({"rejected_documents": [], "switches_degraded": [],
            "clusters": {"c": {"active": "standby", "reason": "manual"}}});
        let reads = vec![
            (node("gw-1"), Ok(gw1)),
            (node("gw-2"), Ok(gw2)),
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
                kept: Some(json!({"degraded": true, "updated_by": "sre"})),
            }]
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
