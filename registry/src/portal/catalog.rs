//! What the portal documents: the live tree as a gateway validates it (`build_snapshot`:
//! a document a gateway would refuse is not shown either), which of its APIs anyone may
//! call, which one app may call, and where merchants send calls.
//!
//! "Public" (docs/operations/portal.md, "The merchants' portal"): an API with `auth: none`, or one
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
    let nodes = crate::gateway_status::live_nodes(state).await?;
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

/// Checks that the public URLs are given unless the registry runs in local mode: listening
/// on a loopback address (`--listen 127.0.0.1:9000`, the default), where only this machine
/// reaches the portal and the nodes' own (loopback) listeners are what merchants use.
/// Anywhere else the portal would otherwise name internal node addresses to merchants.
pub fn require_public_urls(urls: &PublicUrls, listen: std::net::SocketAddr) -> Result<(), String> {
    if listen.ip().is_loopback() {
        return Ok(());
    }
    let missing: Vec<&str> = [
        ("--portal-gateway-url", urls.gateway.is_none()),
        ("--portal-sandbox-url", urls.sandbox.is_none()),
    ]
    .into_iter()
    .filter(|(_, m)| *m)
    .map(|(f, _)| f)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} required: the registry listens on {listen}, not a loopback address, so the \
             developer portal must name the gateways' public URLs, never the nodes' own \
             addresses (docs/operations/portal.md, \"The merchants' portal\")",
            missing.join(" and ")
        ))
    }
}

/// The public sandbox base URL merchants see for `node` (the configured one, else the node's
/// sandbox listener: local mode only, see [`require_public_urls`]).
pub fn public_sandbox_base(node: &NodeInfo) -> String {
    match URLS.get().and_then(|u| u.sandbox.clone()) {
        Some(u) => u,
        None => format!(
            "http://{}",
            node.sandbox_addr.as_deref().unwrap_or_default()
        ),
    }
}

/// A public base URL as given to `--portal-gateway-url` / `--portal-sandbox-url`: `http://` or
/// `https://`, a host, no query or fragment; without its trailing `/`.
pub fn check_public_url(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("{url:?}: must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?}: no host"));
    }
    if url.contains(['?', '#']) || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{url:?}: no query, fragment, spaces or non-ASCII characters"
        ));
    }
    Ok(url.to_owned())
}

/// Where merchants send calls: the configured public URLs ([`set_public_urls`]), else every
/// live node's listener (and sandbox listener) as `http://<addr>`.
pub fn servers(nodes: &[NodeInfo]) -> super::openapi::Servers {
    servers_with(&URLS.get().cloned().unwrap_or_default(), nodes)
}

/// [`servers`] with the public URLs `urls`.
pub fn servers_with(urls: &PublicUrls, nodes: &[NodeInfo]) -> super::openapi::Servers {
    let mut live: Vec<String> = match &urls.gateway {
        Some(u) => vec![u.clone()],
        None => nodes.iter().map(|n| format!("http://{}", n.addr)).collect(),
    };
    let mut sandbox: Vec<String> = match &urls.sandbox {
        Some(u) => vec![u.clone()],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_checked_and_trimmed() {
        assert_eq!(
            check_public_url("https://api.example.com/").unwrap(),
            "https://api.example.com"
        );
        assert_eq!(
            check_public_url("http://10.0.0.1:8080/gw").unwrap(),
            "http://10.0.0.1:8080/gw"
        );
        for bad in [
            "api.example.com",
            "ftp://x",
            "https://",
            "https:///x",
            "https://a?b=1",
            "https://a b",
        ] {
            assert!(check_public_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn public_urls_are_required_outside_local_mode() {
        let none = PublicUrls::default();
        assert!(require_public_urls(&none, "127.0.0.1:9000".parse().unwrap()).is_ok());
        assert!(require_public_urls(&none, "[::1]:9000".parse().unwrap()).is_ok());
        let err = require_public_urls(&none, "0.0.0.0:9000".parse().unwrap()).unwrap_err();
        assert!(
            err.contains("--portal-gateway-url and --portal-sandbox-url"),
            "{err}"
        );
        let half = PublicUrls {
            gateway: Some("https://api.example.com".into()),
            sandbox: None,
        };
        let err = require_public_urls(&half, "10.0.0.2:9000".parse().unwrap()).unwrap_err();
        assert!(err.starts_with("--portal-sandbox-url required"), "{err}");
        let both = PublicUrls {
            gateway: Some("https://api.example.com".into()),
            sandbox: Some("https://sandbox.example.com".into()),
        };
        assert!(require_public_urls(&both, "10.0.0.2:9000".parse().unwrap()).is_ok());
    }

    #[test]
    fn servers_prefer_the_public_urls_over_the_nodes() {
        let mut node = NodeInfo::new("gw-1", "10.0.0.5:8080", "10.0.0.5:9090");
        node.sandbox_addr = Some("10.0.0.5:8081".into());
        let from_nodes = servers_with(&PublicUrls::default(), std::slice::from_ref(&node));
        assert_eq!(from_nodes.live, ["http://10.0.0.5:8080"]);
        assert_eq!(from_nodes.sandbox, ["http://10.0.0.5:8081"]);
        let urls = PublicUrls {
            gateway: Some("https://api.example.com".into()),
            sandbox: None,
        };
        let mixed = servers_with(&urls, &[node]);
        assert_eq!(mixed.live, ["https://api.example.com"]);
        assert_eq!(mixed.sandbox, ["http://10.0.0.5:8081"]);
    }
}
