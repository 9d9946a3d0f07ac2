//! The live apps, kept in memory so that `GET /portal/apps/<key>/openapi.json` checks the
//! signature before it reads anything from ZooKeeper (docs/SECURITY.md, "The registry and the
//! internet"): an anonymous request, signed or not, for a key that exists or not, costs no
//! ZooKeeper read; only a verified one reads the tree for its document.
//!
//! The apps come from a watch on the live tree, as a gateway's (`portico_control::ZkSource`):
//! started by the first request for an app document, it re-reads the tree only when the tree
//! changes, so a new app or a rotated secret is seen within moments, as gateways see it. While
//! ZooKeeper is away the last apps seen are used.

use crate::error::{ApiError, ApiResult};
use crate::state::Shared;
use portico_control::{build_snapshot, v1, ConfigSource, Tree, ZkSource};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;

/// How long the first request waits for the first read of the tree.
const FIRST_READ: Duration = Duration::from_secs(10);

/// App key → app, as a gateway validates them.
pub type Apps = HashMap<String, Arc<v1::App>>;

/// One registry's live apps (made by the portal's router; the watch starts on first use).
#[derive(Default)]
pub struct LiveApps {
    apps: OnceLock<watch::Receiver<Option<Arc<Apps>>>>,
}

impl LiveApps {
    /// The live apps now: the last read of the tree, waiting (up to [`FIRST_READ`]) only for
    /// the very first one; 503 when there has been none.
    pub async fn get(&self, state: &Shared) -> ApiResult<Arc<Apps>> {
        let mut rx = self.apps.get_or_init(|| start(state)).clone();
        if let Some(apps) = rx.borrow().clone() {
            return Ok(apps);
        }
        let first = tokio::time::timeout(FIRST_READ, async {
            rx.wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|apps| apps.clone())
        })
        .await;
        first.ok().flatten().ok_or_else(|| {
            ApiError::unavailable(
                "the portal has not read the live apps yet (ZooKeeper unavailable?); retry later",
            )
        })
    }
}

/// Starts watching the live tree; its apps are sent on the answered channel.
fn start(state: &Shared) -> watch::Receiver<Option<Arc<Apps>>> {
    let (tx, rx) = watch::channel(None);
    let source = ZkSource::new(state.store.hosts(), state.store.root())
        .with_auth(state.store.auth().cloned())
        .with_debounce(Duration::from_millis(100));
    let (trees_tx, mut trees) = tokio::sync::mpsc::channel::<Tree>(2);
    tokio::spawn(async move {
        let runner = tokio::spawn(async move { source.run(trees_tx).await });
        while let Some(tree) = trees.recv().await {
            let snapshot = build_snapshot(&tree, None);
            let apps: Apps = snapshot
                .apps
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            tracing::debug!(apps = apps.len(), "portal: live apps read");
            if tx.send(Some(Arc::new(apps))).is_err() {
                break;
            }
        }
        runner.abort();
    });
    rx
}
