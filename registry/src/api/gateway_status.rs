//! Reading every live gateway's admin `/status` at once, for the views that merge what the
//! gateways report (hot keys, notifications; docs/OPERATIONS.md, "Admin endpoints"). A
//! gateway that cannot be read is reported with the error; it never fails the whole view.

use crate::error::{ApiError, ApiResult};
use crate::sandbox_call::pick::live_nodes;
use crate::state::Shared;
use portico_control::zk::NodeInfo;
use serde_json::{json, Value};
use std::time::Duration;

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
