//! What the portal documents: the live tree as a gateway validates it (`build_snapshot`:
//! a document a gateway would refuse is not shown either), which of its APIs anyone may
//! call, which one app may call, and where merchants send calls.
//!
//! "Public" (docs/OPERATIONS.md, "The merchants' portal"): an API with `auth: none`, or one
//! granted (by id or by `*`) to at least one active app. An API nobody is granted is not
//! callable by any merchant, so it is not shown; nothing says which app holds a grant.

use crate::error::ApiResult;
use crate::state::Shared;
use crate::zk_store::Env;
use portico_control::zk::NodeInfo;
use portico_control::{build_snapshot, v1, Api, Snapshot};
use std::sync::{Arc, OnceLock};

/// The live configuration and the live gateway nodes.
pub struct Live {
    /// The live tree, validated as a gateway does.
    pub snapshot: Snapshot,
    /// The registered gateway nodes (`nodes/<id>`).
    pub nodes: Vec<NodeInfo>,
}

/// Reads the live tree and the nodes from ZooKeeper.
pub async fn load(state: &Shared) -> ApiResult<Live> {
    let tree = state.store.tree(Env::Live).await?;
    let snapshot = build_snapshot(&tree, None);
    let nodes = state
        .store
        .list_docs("nodes")
        .await?
        .iter()
        .filter_map(|(_, d)| serde_json::from_slice::<NodeInfo>(&d.data).ok())
        .collect();
    Ok(Live { snapshot, nodes })
}

/// Whether `app` may call `api` (granted by id or `*`).
pub fn granted(app: &v1::App, api: &str) -> bool {
    app.apis.iter().any(|a| a == "*" || a == api)
}

/// The APIs anyone may call: `auth: none`, or granted to at least one active app.
pub fn public_apis(snapshot: &Snapshot) -> Vec<Arc<Api>> {
    let active: Vec<&v1::App> = snapshot
        .apps
        .values()
        .filter(|a| a.status == v1::AppStatus::Active)
        .map(Arc::as_ref)
        .collect();
    snapshot
        .apis
        .values()
        .filter(|api| {
            api.auth == v1::AuthMode::None || active.iter().any(|app| granted(app, &api.id))
        })
        .cloned()
        .collect()
}

/// The APIs `app` may call: those granted to it, and the public (`auth: none`) ones.
pub fn app_apis(snapshot: &Snapshot, app: &v1::App) -> Vec<Arc<Api>> {
    snapshot
        .apis
        .values()
        .filter(|api| api.auth == v1::AuthMode::None || granted(app, &api.id))
        .cloned()
        .collect()
}

/// Base URLs merchants use instead of the nodes' own addresses (`--portal-gateway-url`,
/// `--portal-sandbox-url`): a load balancer's public name in production.
#[derive(Debug, Clone, Default)]
pub struct PublicUrls {
    /// The live gateway, e.g. `https://api.example.com`.
    pub gateway: Option<String>,
    /// The sandbox listener, e.g. `https://sandbox.api.example.com`.
    pub sandbox: Option<String>,
}

static URLS: OnceLock<PublicUrls> = OnceLock::new();

/// Sets the public URLs. Only the first call has an effect; returns whether it was this one.
pub fn set_public_urls(urls: PublicUrls) -> bool {
    URLS.set(urls).is_ok()
}

/// Where merchants send calls: the configured public URLs, else every live node's listener
/// (and sandbox listener) as `http://<addr>`.
pub fn servers(nodes: &[NodeInfo]) -> super::openapi::Servers {
    let urls = URLS.get().cloned().unwrap_or_default();
    let mut live: Vec<String> = match urls.gateway {
        Some(u) => vec![u],
        None => nodes.iter().map(|n| format!("http://{}", n.addr)).collect(),
    };
    let mut sandbox: Vec<String> = match urls.sandbox {
        Some(u) => vec![u],
        None => nodes
            .iter()
            .filter_map(|n| n.sandbox_addr.as_ref())
            .filter(|a| !a.is_empty())
            .map(|a| format!("http://{a}"))
            .collect(),
    };
    live.sort();
    live.dedup();
    sandbox.sort();
    sandbox.dedup();
    super::openapi::Servers { live, sandbox }
}
