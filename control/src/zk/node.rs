//! Gateway node registration: the ephemeral `<root>/nodes/<node_id>` document that tells the
//! registry which gateways are alive, where they listen and which configuration they serve
//! (docs/ARCHITECTURE.md, "Control plane").

use super::auth::{create_acl, read_policy, AclPolicy};
use super::paths::{join_path, relative_path};
use super::retry::{sleep_until_opt, Backoff};
use crate::snapshot::ConfigVersion;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

/// The document of `<root>/nodes/<node_id>`: one live gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node_id: String,
    /// Merchant traffic listener.
    pub addr: String,
    /// Admin listener (`/metrics`, `/status`).
    pub admin_addr: String,
    /// Sandbox listener, if the node runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_addr: Option<String>,
    /// Internal listener (`--internal-listen`: notifications are published there), if the
    /// node runs one; absent in registrations of older gateways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_addr: Option<String>,
    /// RFC 3339 start time of the gateway process.
    pub started_at: String,
    /// The configuration the node serves (generation 0 and an empty digest before the first).
    #[serde(default)]
    pub config_version: ConfigVersion,
    /// RFC 3339 time of the last update of this document.
    #[serde(default)]
    pub updated_at: String,
}

impl NodeInfo {
    /// A registration with `started_at` and `updated_at` set to now.
    pub fn new(node_id: &str, addr: &str, admin_addr: &str) -> NodeInfo {
        let now = crate::clock::now_rfc3339();
        NodeInfo {
            node_id: node_id.to_owned(),
            addr: addr.to_owned(),
            admin_addr: admin_addr.to_owned(),
            sandbox_addr: None,
            internal_addr: None,
            started_at: now.clone(),
            config_version: ConfigVersion::default(),
            updated_at: now,
        }
    }
}

/// Keeps `<root>/nodes/<node_id>` equal to the desired registration on the current session.
/// Ends when either channel's sender is gone.
pub(super) async fn registration_loop(
    root: String,
    mut sessions: watch::Receiver<Option<zk::Client>>,
    mut desired: watch::Receiver<Option<NodeInfo>>,
) {
    let mut reg = Registrar {
        root,
        written: None,
        registered: None,
    };
    let mut backoff = Backoff::default();
    let mut retry_at: Option<Instant> = None;
    loop {
        let client = sessions.borrow_and_update().clone();
        let info = desired.borrow_and_update().clone();
        match (client, info) {
            (Some(client), Some(info)) => {
                if reg.sync(&client, info).await {
                    backoff.reset();
                    retry_at = None;
                } else {
                    retry_at = Some(backoff.next_at());
                }
            }
            (Some(client), None) => reg.withdraw(&client).await,
            (None, _) => {}
        }
        tokio::select! {
            r = sessions.changed() => if r.is_err() { return },
            r = desired.changed() => if r.is_err() { return },
            _ = sleep_until_opt(retry_at) => { retry_at = None; }
        }
    }
}

/// Follows the children of `<root>/nodes` on the current session (a child watch, set again
/// after every change) and publishes how many gateways are registered: the fleet size that
/// cluster-scope rate limits are split by without Redis (docs/operations/cluster.md, "Running a
/// cluster"). `None` while there is no session or `nodes/` cannot be read. A change is seen
/// within one ZooKeeper round trip of the join or leave (a leave: when the session of the
/// gateway that left ends, at once for a clean stop, after its session timeout for a crash).
/// Ends when the session channel closes.
pub(super) async fn members_loop(
    root: String,
    mut sessions: watch::Receiver<Option<zk::Client>>,
    members: watch::Sender<Option<usize>>,
) {
    let nodes = join_path(&root, "nodes");
    let mut backoff = Backoff::default();
    loop {
        let client = sessions.borrow_and_update().clone();
        let mut retry_at = None;
        let mut watcher = None;
        match &client {
            Some(client) => match client.list_and_watch_children(&nodes).await {
                Ok((children, w)) => {
                    backoff.reset();
                    members.send_if_modified(|m| {
                        let changed = *m != Some(children.len());
                        *m = Some(children.len());
                        changed
                    });
                    watcher = Some(w);
                }
                Err(zk::Error::NoNode) => {
                    // Nobody registered yet (our own registration creates `nodes/`).
                    members.send_replace(Some(0));
                    retry_at = Some(backoff.next_at());
                }
                Err(e) => {
                    tracing::debug!(error = %e, path = %nodes, "listing nodes/ failed; retrying");
                    retry_at = Some(backoff.next_at());
                }
            },
            None => {
                members.send_replace(None);
            }
        }
        let changed = async {
            match watcher {
                Some(w) => {
                    w.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            r = sessions.changed() => if r.is_err() { return },
            _ = changed => {}
            _ = sleep_until_opt(retry_at) => {}
        }
    }
}

/// What the registration loop has written, so that only changes are written.
struct Registrar {
    root: String,
    /// The document last written, and on which session.
    written: Option<(zk::SessionId, NodeInfo)>,
    /// The node path last registered, with the client of its session.
    registered: Option<(zk::Client, String)>,
}

impl Registrar {
    /// Makes the node document `info` on `client`'s session; returns false if that failed
    /// (to be retried).
    async fn sync(&mut self, client: &zk::Client, info: NodeInfo) -> bool {
        let sid = client.session_id();
        if self
            .written
            .as_ref()
            .is_some_and(|(s, w)| *s == sid && *w == info)
        {
            return true;
        }
        let path = join_path(&self.root, &format!("nodes/{}", info.node_id));
        if let Some((old_client, old_path)) = self.registered.take() {
            if old_path != path && old_client.session_id() == sid {
                let _ = old_client.delete(&old_path, None).await;
            }
        }
        let result = write_node(client, &self.root, &path, &info).await;
        self.registered = Some((client.clone(), path.clone()));
        match result {
            Ok(()) => {
                self.written = Some((sid, info));
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, path = %path, "node registration failed; retrying");
                false
            }
        }
    }

    /// Removes the node document written on `client`'s session, if any.
    async fn withdraw(&mut self, client: &zk::Client) {
        if let Some((old_client, old_path)) = self.registered.take() {
            if old_client.session_id() == client.session_id() {
                let _ = client.delete(&old_path, None).await;
            }
        }
        self.written = None;
    }
}

/// Creates or updates the ephemeral node document, replacing a leftover owned by an older session.
async fn write_node(
    client: &zk::Client,
    root: &str,
    path: &str,
    info: &NodeInfo,
) -> Result<(), zk::Error> {
    let data = serde_json::to_vec(info)
        .map_err(|e| zk::Error::UnexpectedError(format!("encode node info: {e}")))?;
    let own = client.session_id().0;
    for _ in 0..3 {
        match client.check_stat(path).await? {
            Some(stat) if stat.ephemeral_owner == own => {
                match client.set_data(path, &data, Some(stat.version)).await {
                    Ok(_) => return Ok(()),
                    Err(zk::Error::BadVersion) | Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(e),
                }
            }
            Some(stat) => {
                // A leftover of an earlier session of this node (or a persistent node someone
                // made): replace it so that it vanishes with our session.
                match client.delete(path, Some(stat.version)).await {
                    Ok(()) | Err(zk::Error::NoNode) | Err(zk::Error::BadVersion) => continue,
                    Err(e) => return Err(e),
                }
            }
            None => {
                // The ACL follows the policy (docs/operations/zookeeper.md, "ZooKeeper credentials and
                // ACLs"), read from `nodes/` where a gateway may see the digest ids (module docs
                // of `auth`); this gateway's identities get cdrwa on their own node.
                let policy = match read_policy(client, &join_path(root, "nodes")).await? {
                    Some(policy) => Some(policy),
                    None => read_policy(client, root).await?,
                };
                let rel = relative_path(root, path).unwrap_or("nodes");
                let acl = create_acl(policy.as_ref(), rel);
                let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acl));
                match client.create(path, &data, &options).await {
                    Ok(_) => return Ok(()),
                    Err(zk::Error::NodeExists) => continue,
                    Err(zk::Error::NoNode) => {
                        let parent = join_path(root, "nodes");
                        ensure_path_with(client, root, &parent, policy.as_ref()).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(zk::Error::UnexpectedError(format!(
        "{path} keeps changing under registration"
    )))
}

/// Creates `path` and its missing ancestors as empty persistent nodes (`mkdir -p`).
pub async fn ensure_path(
    client: &zk::Client,
    path: &str,
    options: &zk::CreateOptions<'_>,
) -> Result<(), zk::Error> {
    if path == "/" || path.is_empty() {
        return Ok(());
    }
    let mut current = String::new();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        current.push('/');
        current.push_str(segment);
        match client.create(&current, &[], options).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates `path` and its missing ancestors as empty persistent nodes, each with the ACL
/// `policy` gives its tree path under `root` (ancestors of the root get the root's); open
/// nodes when `policy` is `None` (an open tree).
pub async fn ensure_path_with(
    client: &zk::Client,
    root: &str,
    path: &str,
    policy: Option<&AclPolicy>,
) -> Result<(), zk::Error> {
    let mut current = String::new();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        current.push('/');
        current.push_str(segment);
        // Existing nodes are skipped without a create: ZooKeeper checks the parent's CREATE
        // permission before existence, and a gateway may not create under the root.
        if client.check_stat(&current).await?.is_some() {
            continue;
        }
        let rel = relative_path(root, &current).unwrap_or("");
        let acl = create_acl(policy, rel);
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        match client.create(&current, &[], &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_info_json_shape() {
        let info = NodeInfo::new("gw-1", "127.0.0.1:8080", "127.0.0.1:9180");
        let v: serde_json::Value = serde_json::to_value(&info).unwrap();
        for key in [
            "node_id",
            "addr",
            "admin_addr",
            "started_at",
            "config_version",
            "updated_at",
        ] {
            assert!(v.get(key).is_some(), "{key} missing in {v}");
        }
        assert_eq!(v["config_version"]["generation"], 0);
        assert!(v.get("internal_addr").is_none(), "absent unless set: {v}");
    }

    #[test]
    fn registrations_without_an_internal_address_stay_valid() {
        let old = r#"{"node_id": "gw-old", "addr": "127.0.0.1:8080",
            "admin_addr": "127.0.0.1:9180", "started_at": "2026-01-01T00:00:00Z"}"#;
        let info: NodeInfo = serde_json::from_str(old).unwrap();
        assert_eq!(info.internal_addr, None);
        let mut new = NodeInfo::new("gw-1", "127.0.0.1:8080", "127.0.0.1:9180");
        new.internal_addr = Some("127.0.0.1:9181".into());
        let back: NodeInfo = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
        assert_eq!(back.internal_addr.as_deref(), Some("127.0.0.1:9181"));
    }
}
