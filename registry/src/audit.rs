//! The audit log: every write is appended to `<root>/audit/entry-NNNNNNNNNN` with who, what,
//! where and the request id; the newest [`AUDIT_KEEP`] entries are kept. Read back through
//! `GET /api/v1/audit` ([`crate::api::ops`]). Below the routes, so that background tasks
//! (autoscale, the tree watch) write it too; the routes write it through
//! [`crate::api::audit::audit`].

use crate::state::Shared;
use crate::zk_store::Precondition;
use serde_json::{json, Value};

/// The audit log keeps this many newest entries.
pub const AUDIT_KEEP: usize = 10_000;
/// Every this many appends, older entries are removed.
const AUDIT_TRIM_EVERY: u64 = 500;

/// The actor of the entries for changes made to the tree by something other than a registry
/// (zkCli; docs/operations/registry.md, "Changes outside the registry").
pub const OUTSIDE_ACTOR: &str = "outside the registry";

/// Appends an entry to the audit log for the request (or task) `request_id`. A failure is
/// logged, never returned: the change itself has been made. When this registry just wrote
/// `target`, the entry's detail gets `zxid`, the write's `mzxid` (0 for a delete): the
/// registry that watches the tree tells registries' writes from others' by it
/// ([`crate::tree_watch`]).
pub async fn record(
    state: &Shared,
    request_id: &str,
    actor: &str,
    action: &str,
    target: &str,
    mut detail: Value,
) {
    if let (Some(zxid), Some(obj)) = (state.store.last_write_zxid(target), detail.as_object_mut()) {
        obj.insert("zxid".to_owned(), zxid.into());
    }
    append(state, request_id, actor, action, target, detail).await;
}

/// Appends an entry as given (see [`record`]).
pub async fn append(
    state: &Shared,
    request_id: &str,
    actor: &str,
    action: &str,
    target: &str,
    detail: Value,
) {
    let entry = json!({
        "at": portico_control::clock::now_rfc3339(),
        "actor": actor,
        "action": action,
        "target": target,
        "request_id": request_id,
        "detail": detail,
    });
    let bytes = serde_json::to_vec(&entry).unwrap_or_default();
    match state.store.append("audit", "entry-", &bytes).await {
        Ok(name) => {
            let seq = name
                .trim_start_matches("entry-")
                .parse::<u64>()
                .unwrap_or(1);
            if seq > 0 && seq % AUDIT_TRIM_EVERY == 0 {
                let state = state.clone();
                tokio::spawn(async move { trim_audit(&state).await });
            }
        }
        Err(e) => tracing::warn!(action, target, error = %e, "audit entry not written"),
    }
}

/// Removes all but the newest [`AUDIT_KEEP`] audit entries (best effort).
async fn trim_audit(state: &Shared) {
    let Ok(mut names) = state.store.list("audit").await else {
        return;
    };
    if names.len() <= AUDIT_KEEP {
        return;
    }
    names.sort();
    let excess = names.len() - AUDIT_KEEP;
    for name in names.into_iter().take(excess) {
        let _ = state
            .store
            .delete(&format!("audit/{name}"), Precondition::Any)
            .await;
    }
}
