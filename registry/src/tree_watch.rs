//! Changes made to the served trees outside the registry (zkCli, a script with ZooKeeper
//! credentials) recorded in the audit log (docs/operations/registry.md, "Changes outside the
//! registry").
//!
//! Every registry watches its root with a persistent recursive ZooKeeper watch; the one that
//! leads `leader/tree-watch` records. A change to a served document (`apis/…`, `switches/…`,
//! …, live or under `sandbox/`) is a registry's own when this process wrote that `mzxid`
//! ([`crate::zk_store::Store::wrote`]) or when a recent audit entry of another registry names
//! it (`detail.zxid`, which [`crate::audit::record`] adds); any other is appended with
//! actor [`OUTSIDE_ACTOR`], the path, and whether the gateways would accept the document
//! (`valid`, and the `reason` when not). Each `mzxid` is recorded once.
//!
//! Changes made while this registry had no session (or no watch) are not seen: ZooKeeper
//! does not replay them.

use crate::alerts::leader::Leadership;
use crate::audit::{append, OUTSIDE_ACTOR};
use crate::state::{AppState, Shared};
use crate::zk_store::Env;
use portico_control::zk::relative_path;
use portico_control::DocKind;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use zookeeper_client as zk;

/// The folder of the election of the registry that records.
pub const LEADER_DIR: &str = "leader/tree-watch";
/// How long after a change the registry looks whose it is: the writing registry's audit
/// entry (or this process's own note of the write) lands after ZooKeeper's event.
const SETTLE: Duration = Duration::from_millis(1500);
/// How many of the newest audit entries are searched for another registry's write.
const AUDIT_LOOKBACK: usize = 200;
/// How many recorded `mzxid`s are remembered (to record each once).
const SEEN_KEPT: usize = 4096;

/// A served document's change, as ZooKeeper reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The tree.
    pub env: Env,
    /// The path relative to the env (`switches/x`).
    pub rel: String,
    /// Whether the document was deleted.
    pub deleted: bool,
}

/// The served document an event's tree path (relative to the root) names, if any.
pub fn classify(rel_to_root: &str, deleted: bool) -> Option<Change> {
    let (env, rel) = match rel_to_root.strip_prefix("sandbox/") {
        Some(rest) => (Env::Sandbox, rest),
        None => (Env::Live, rel_to_root),
    };
    DocKind::classify(rel)?;
    Some(Change {
        env,
        rel: rel.to_owned(),
        deleted,
    })
}

/// Starts watching the tree of `state` (the task ends when the state is dropped).
pub fn start(state: &Shared, registry_id: &str) {
    let watcher = Arc::new(Watcher {
        state: Arc::downgrade(state),
        leadership: Leadership::in_dir(LEADER_DIR, registry_id),
        seen: Mutex::new(VecDeque::new()),
    });
    tokio::spawn(run(watcher));
}

struct Watcher {
    state: Weak<AppState>,
    leadership: Leadership,
    /// The `mzxid`s recorded (or found to be a registry's), newest last.
    seen: Mutex<VecDeque<i64>>,
}

impl Watcher {
    /// Marks `mzxid` seen; `false` if it was already.
    fn first_sight(&self, mzxid: i64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(&mzxid) {
            return false;
        }
        if seen.len() >= SEEN_KEPT {
            seen.pop_front();
        }
        seen.push_back(mzxid);
        true
    }
}

/// Sets the watch and follows it; again after the session ends.
async fn run(watcher: Arc<Watcher>) {
    loop {
        let Some(state) = watcher.state.upgrade() else {
            return;
        };
        match watch_once(&watcher, &state).await {
            Ok(()) => {}
            Err(e) => tracing::debug!(error = %e, "tree watch: cannot watch now"),
        }
        drop(state);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// One session's watch: returns when the session ends or the registry is gone.
async fn watch_once(watcher: &Arc<Watcher>, state: &Shared) -> Result<(), String> {
    let client = state.store.client().await.map_err(|e| e.message)?;
    let root = state.store.root().to_owned();
    let mut events = client
        .watch(&root, zk::AddWatchMode::PersistentRecursive)
        .await
        .map_err(|e| e.to_string())?;
    // Enroll in the election now, so that leadership is known when changes come.
    watcher.leadership.check(state).await;
    let mut last_check = std::time::Instant::now();
    loop {
        let event = match tokio::time::timeout(Duration::from_secs(5), events.changed()).await {
            Ok(event) => event,
            Err(_) => {
                if watcher.state.strong_count() == 0 {
                    return Ok(());
                }
                if last_check.elapsed() > Duration::from_secs(5) {
                    watcher.leadership.check(state).await;
                    last_check = std::time::Instant::now();
                }
                continue;
            }
        };
        let deleted = match event.event_type {
            zk::EventType::Session => {
                if event.session_state.is_terminated() {
                    return Ok(());
                }
                continue;
            }
            zk::EventType::NodeCreated | zk::EventType::NodeDataChanged => false,
            zk::EventType::NodeDeleted => true,
            zk::EventType::NodeChildrenChanged => continue,
        };
        let Some(change) = relative_path(&root, &event.path).and_then(|r| classify(r, deleted))
        else {
            continue;
        };
        let (watcher, state) = (watcher.clone(), state.clone());
        tokio::spawn(async move {
            tokio::time::sleep(SETTLE).await;
            if let Err(e) = consider(&watcher, &state, &change).await {
                tracing::warn!(path = %change.rel, error = %e, "tree watch: change not recorded");
            }
        });
    }
}

/// Records `change` when it is no registry's and this registry leads.
async fn consider(watcher: &Watcher, state: &Shared, change: &Change) -> Result<(), String> {
    if !watcher.leadership.check(state).await {
        return Ok(());
    }
    let path = change.env.path(&change.rel);
    let doc = if change.deleted {
        None
    } else {
        match state.store.get(&path).await.map_err(|e| e.message)? {
            Some(doc) => Some(doc),
            // Deleted since: its own event follows.
            None => return Ok(()),
        }
    };
    let mzxid = doc.as_ref().map(|d| d.stat.mzxid);
    if state.store.wrote(&path, mzxid) {
        return Ok(());
    }
    if let Some(z) = mzxid {
        if !watcher.first_sight(z) {
            return Ok(());
        }
    }
    if registry_audited(state, &path, mzxid).await? {
        return Ok(());
    }
    let detail = match &doc {
        None => json!({"deleted": true}),
        Some(doc) => {
            let (valid, reason) = validity(state, change, &doc.data).await;
            json!({
                "valid": valid,
                "reason": reason,
                "version": doc.stat.version,
                "zxid": doc.stat.mzxid,
            })
        }
    };
    let action = if change.deleted {
        "outside.delete"
    } else {
        "outside.write"
    };
    tracing::info!(path, action, "a change outside the registry");
    append(state, "-", OUTSIDE_ACTOR, action, &path, detail).await;
    Ok(())
}

/// Whether a recent audit entry of a registry names this write (`detail.zxid`; for a delete,
/// a registry's delete of the path).
async fn registry_audited(state: &Shared, path: &str, mzxid: Option<i64>) -> Result<bool, String> {
    let mut names = state.store.list("audit").await.map_err(|e| e.message)?;
    names.sort();
    let newest = names.iter().rev().take(AUDIT_LOOKBACK);
    let reads = futures::future::join_all(
        newest.map(|name| async move { state.store.get(&format!("audit/{name}")).await }),
    )
    .await;
    Ok(reads.into_iter().flatten().flatten().any(|doc| {
        let Ok(entry) = serde_json::from_slice::<Value>(&doc.data) else {
            return false;
        };
        entry["target"] == path
            && entry["actor"] != OUTSIDE_ACTOR
            && match mzxid {
                Some(z) => entry["detail"]["zxid"] == z,
                None => entry["detail"]["zxid"] == 0,
            }
    }))
}

/// Whether the gateways would accept the document at `change` as the tree holds it now, and
/// if not why (the gateways' own validation of the env's tree).
async fn validity(state: &Shared, change: &Change, data: &[u8]) -> (bool, Option<String>) {
    if let Err(e) = serde_json::from_slice::<Value>(data) {
        return (false, Some(format!("not valid JSON: {e}")));
    }
    let Ok(tree) = state.store.tree(change.env).await else {
        return (true, None);
    };
    let snapshot = portico_control::build_snapshot(&tree, None);
    match snapshot.rejected.iter().find(|r| r.path == change.rel) {
        Some(r) => (false, Some(r.reason.clone())),
        None => (true, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_served_documents_are_watched() {
        let c = classify("switches/x", false).unwrap();
        assert_eq!((c.env, c.rel.as_str()), (Env::Live, "switches/x"));
        let c = classify("sandbox/apis/a", true).unwrap();
        assert_eq!(
            (c.env, c.rel.as_str(), c.deleted),
            (Env::Sandbox, "apis/a", true)
        );
        assert!(classify("ipacl", false).is_some());
        for other in [
            "audit/entry-0000000001",
            "nodes/gw-1",
            "leader/alerts/n-1",
            "switches",
            "",
        ] {
            assert_eq!(classify(other, false), None, "{other}");
        }
    }
}
