//! What every request shares: how the registry runs ([`Config`]), the state built from it
//! ([`AppState`], one ZooKeeper store) and the id of the current request ([`RequestId`]).
//!
//! The registry keeps no other configuration state (docs/ARCHITECTURE.md, the control plane):
//! any number can run side by side against one ZooKeeper. What a registry observed of the
//! gateways (the history store, docs/operations/history-and-reports.md "The history store") is its own.

use crate::history::HistoryStore;
use crate::zk_store::Store;
use portico_control::zk::ZkAuth;
use std::sync::{Arc, OnceLock};

/// The header carrying the request id, as on the gateway (docs/PROTOCOL.md, "Request ids").
pub const REQUEST_ID_HEADER: &str = "x-portico-request-id";

/// How a registry runs.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// ZooKeeper connect string.
    pub zk_hosts: String,
    /// Root of the tree (default `/portico`).
    pub zk_root: String,
    /// The admin bearer token; `None` only with `--insecure-no-auth`.
    pub token: Option<String>,
    /// ZooKeeper `digest` credentials (`--zk-auth-file`, `PORTICO_ZK_AUTH`); `None`: an open
    /// tree (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").
    pub zk_auth: Option<ZkAuth>,
}

/// State shared by every request.
pub struct AppState {
    /// The ZooKeeper tree, read and written with compare-and-set.
    pub store: Store,
    /// The admin bearer token; `None`: every request is accepted.
    pub token: Option<String>,
    /// The history store, when this registry keeps one (set once at start-up by
    /// `portico-registry`; absent in a registry embedded without it).
    pub history: OnceLock<Arc<HistoryStore>>,
    /// The gateways' publisher token (`--publish-token-file`, `PORTICO_PUBLISH_TOKEN`), for
    /// the console's "send test event" (docs/operations/notifications.md, "Notifications"); set once at
    /// start-up, absent without one.
    pub publish_token: OnceLock<String>,
}

/// The state as handlers receive it.
pub type Shared = Arc<AppState>;

/// The request id of the current request (set by the server's middleware, read by handlers).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl AppState {
    /// The history store, if this registry keeps one.
    pub fn history(&self) -> Option<&Arc<HistoryStore>> {
        self.history.get()
    }

    /// The state of a registry running with `config` (ZooKeeper is connected on first use).
    pub fn new(config: &Config) -> Shared {
        Arc::new(AppState {
            store: Store::new(&config.zk_hosts, &config.zk_root).with_auth(config.zk_auth.clone()),
            token: config.token.clone(),
            history: OnceLock::new(),
            publish_token: OnceLock::new(),
        })
    }
}
