//! One ZooKeeper session of the source: the persistent recursive watch on the root, the full
//! reads, and the coalesced re-reads of the documents events name (module docs of
//! [`crate::zk`]). [`serve_session`] returns how the session ended; the source decides what
//! comes next.

use super::paths::relative_path;
use super::read::{read_paths, read_tree};
use super::retry::{sleep_until_opt, Backoff};
use super::shared::{Shared, ZkState};
use crate::tree::{DocKind, Tree};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

/// How a session ended.
pub(super) enum SessionEnd {
    /// The update receiver is gone: stop.
    Closed,
    /// The session expired: establish a new one at once.
    Expired,
    /// The server refused this client access to the root (its credentials): back off, then
    /// a new one (the operator may fix the ACLs meanwhile).
    Unauthorized(String),
    /// The session failed otherwise: back off, then a new one.
    Failed(String),
}

impl SessionEnd {
    /// The end an error means, if it ends the session (others are retried within it).
    fn terminal(e: &zk::Error) -> Option<SessionEnd> {
        match e {
            zk::Error::SessionExpired | zk::Error::SessionMoved => Some(SessionEnd::Expired),
            zk::Error::ClientClosed | zk::Error::AuthFailed => {
                Some(SessionEnd::Failed(e.to_string()))
            }
            _ => None,
        }
    }

    fn from_error(e: zk::Error) -> SessionEnd {
        SessionEnd::terminal(&e).unwrap_or(SessionEnd::Failed(e.to_string()))
    }
}

/// Serves one session until it ends: watches the root, publishes the client on `sessions`
/// (for the node registration), then follows the tree, sending every new state to `updates`.
pub(super) async fn serve_session(
    source: &Shared,
    client: zk::Client,
    updates: &mpsc::Sender<Tree>,
    sessions: &watch::Sender<Option<zk::Client>>,
) -> SessionEnd {
    match Session::establish(source, client, sessions).await {
        Ok(session) => session.run(updates).await,
        Err(end) => end,
    }
}

/// The state of one session's loop.
struct Session<'a> {
    source: &'a Shared,
    client: zk::Client,
    root: String,
    watcher: zk::PersistentWatcher,
    /// The tree as this session knows it, and as it was last sent.
    tree: Tree,
    sent: Option<Tree>,
    /// Whether the connection is up (the session may outlive a lost connection).
    connected: bool,
    /// The persistent watch must be added again (after a reconnect).
    rewatch: bool,
    /// A full read is due (a new connection, a structural change, a failed read).
    need_full: bool,
    /// When a failed watch or full read may be tried again.
    retry_at: Option<Instant>,
    backoff: Backoff,
    /// Documents named by events and not yet re-read, and when to re-read them.
    pending: BTreeSet<String>,
    flush_at: Option<Instant>,
    last_flush: Instant,
}

/// What a node event at tree path `rel` calls for.
enum EventAction {
    Ignore,
    FullRead,
    Read(String),
}

impl<'a> Session<'a> {
    /// Adds the persistent watch on the root and announces the session.
    async fn establish(
        source: &'a Shared,
        client: zk::Client,
        sessions: &watch::Sender<Option<zk::Client>>,
    ) -> Result<Session<'a>, SessionEnd> {
        let root = source.root().to_owned();
        check_access(source, &client, &root).await?;
        let watcher = client
            .watch(&root, zk::AddWatchMode::PersistentRecursive)
            .await
            .map_err(SessionEnd::from_error)?;
        let session_id = client.session_id().to_string();
        source.session_started(&session_id);
        tracing::info!(hosts = %source.hosts(), root = %root, session = %session_id, "zookeeper session established");
        sessions.send_replace(Some(client.clone()));
        let now = Instant::now();
        Ok(Session {
            source,
            client,
            root,
            watcher,
            tree: Tree::default(),
            sent: None,
            connected: true,
            rewatch: false,
            need_full: true,
            retry_at: None,
            backoff: Backoff::default(),
            pending: BTreeSet::new(),
            flush_at: None,
            // As if the last flush were one debounce ago: the first change is read at once.
            last_flush: now.checked_sub(source.debounce()).unwrap_or(now),
        })
    }

    /// The session's loop: re-watch or full read when due, otherwise wait for an event or
    /// a timer.
    async fn run(mut self, updates: &mpsc::Sender<Tree>) -> SessionEnd {
        loop {
            let step = if self.due(self.rewatch) {
                self.add_watch_again().await
            } else if self.due(self.need_full) {
                self.full_read(updates).await
            } else {
                self.wait(updates).await
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    /// Whether work flagged by `flag` may run now: connected, and not backing off.
    fn due(&self, flag: bool) -> bool {
        flag && self.connected && self.retry_at.is_none_or(|t| t <= Instant::now())
    }

    /// After a reconnect, adds the persistent watch again: zookeeper-client 0.11 does not
    /// re-send persistent watches on reconnect (its `resend_watches` only sends the oneshot
    /// kinds), so the server forgot ours. The old watcher is dropped after the new one is in
    /// place, which keeps the server-side watch.
    async fn add_watch_again(&mut self) -> Result<(), SessionEnd> {
        match self
            .client
            .watch(&self.root, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(fresh) => {
                self.watcher = fresh;
                self.rewatch = false;
                self.need_full = true;
                self.retry_at = None;
            }
            Err(e) => {
                if let Some(end) = SessionEnd::terminal(&e) {
                    return Err(end);
                }
                tracing::warn!(error = %e, "zookeeper watch failed; retrying");
                self.retry_at = Some(self.backoff.next_at());
            }
        }
        Ok(())
    }

    /// Reads the whole tree and sends it.
    async fn full_read(&mut self, updates: &mpsc::Sender<Tree>) -> Result<(), SessionEnd> {
        match read_tree(&self.client, &self.root).await {
            Ok(tree) => {
                self.need_full = false;
                self.retry_at = None;
                self.backoff.reset();
                self.pending.clear();
                self.flush_at = None;
                self.tree = tree;
                self.source.tree_read();
                self.send(updates).await
            }
            Err(e) => {
                if let Some(end) = SessionEnd::terminal(&e) {
                    return Err(end);
                }
                tracing::warn!(error = %e, "zookeeper full read failed; retrying");
                self.source
                    .set_state(ZkState::Disconnected, Some(format!("full read: {e}")));
                self.retry_at = Some(self.backoff.next_at());
                Ok(())
            }
        }
    }

    /// Waits for the next event, the re-read of pending documents, or a retry.
    async fn wait(&mut self, updates: &mpsc::Sender<Tree>) -> Result<(), SessionEnd> {
        let retry = (self.need_full || self.rewatch)
            .then_some(self.retry_at)
            .flatten();
        let wake_at = match (self.flush_at, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            biased;
            event = self.watcher.changed() => match event.event_type {
                zk::EventType::Session => self.on_session_state(event.session_state),
                kind => {
                    self.on_node_event(&event.path, kind);
                    Ok(())
                }
            },
            _ = sleep_until_opt(wake_at) => self.flush_if_due(updates).await,
            _ = updates.closed() => Err(SessionEnd::Closed),
        }
    }

    fn on_session_state(&mut self, state: zk::SessionState) -> Result<(), SessionEnd> {
        match state {
            zk::SessionState::Disconnected => {
                self.connected = false;
                self.source
                    .set_state(ZkState::Disconnected, Some("connection lost".to_owned()));
            }
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                self.connected = true;
                // The watch must be added again, and events may have been missed while
                // disconnected: re-watch, then read everything.
                self.rewatch = true;
                self.need_full = true;
                self.retry_at = None;
            }
            zk::SessionState::Expired => return Err(SessionEnd::Expired),
            zk::SessionState::AuthFailed => {
                return Err(SessionEnd::Failed("authentication failed".to_owned()))
            }
            zk::SessionState::Closed => {
                return Err(SessionEnd::Failed("session closed".to_owned()))
            }
        }
        Ok(())
    }

    fn on_node_event(&mut self, path: &str, kind: zk::EventType) {
        let Some(rel) = relative_path(&self.root, path) else {
            return;
        };
        match classify_event(rel, kind) {
            EventAction::Ignore => {}
            EventAction::FullRead => {
                self.need_full = true;
                self.retry_at = None;
            }
            EventAction::Read(path) => {
                self.pending.insert(path);
                if self.flush_at.is_none() {
                    // Leading edge: read at once after a quiet period; in a burst, at most
                    // once per debounce interval.
                    let next = add(self.last_flush, self.source.debounce());
                    self.flush_at = Some(next.max(Instant::now()));
                }
            }
        }
    }

    /// Re-reads the pending documents if their time has come, and sends the result.
    async fn flush_if_due(&mut self, updates: &mpsc::Sender<Tree>) -> Result<(), SessionEnd> {
        if self.flush_at.is_none_or(|t| t > Instant::now()) {
            return Ok(());
        }
        self.flush_at = None;
        self.last_flush = Instant::now();
        if self.need_full {
            // A full read follows and covers these paths.
            return Ok(());
        }
        let paths = std::mem::take(&mut self.pending);
        match read_paths(&self.client, &self.root, &paths, &mut self.tree).await {
            Ok(()) => self.send(updates).await,
            Err(e) => {
                if let Some(end) = SessionEnd::terminal(&e) {
                    return Err(end);
                }
                tracing::warn!(error = %e, "zookeeper read failed; a full read follows");
                self.need_full = true;
                Ok(())
            }
        }
    }

    /// Sends the current tree if it differs from the last one sent.
    async fn send(&mut self, updates: &mpsc::Sender<Tree>) -> Result<(), SessionEnd> {
        if self.sent.as_ref() == Some(&self.tree) {
            return Ok(());
        }
        if updates.send(self.tree.clone()).await.is_err() {
            return Err(SessionEnd::Closed);
        }
        self.source.tree_sent(self.tree.generation);
        self.sent = Some(self.tree.clone());
        Ok(())
    }
}

/// Reads the root once, so that credentials the tree's ACLs do not accept (none, a wrong
/// password) fail the session clearly instead of showing up as a tree with every folder
/// unreadable.
async fn check_access(source: &Shared, client: &zk::Client, root: &str) -> Result<(), SessionEnd> {
    match client.get_children(root).await {
        Ok(_) | Err(zk::Error::NoNode) => Ok(()),
        Err(zk::Error::NoAuth) => {
            let who = match source.auth_user() {
                Some(user) => format!("as {user:?}"),
                None => "without credentials".to_owned(),
            };
            Err(SessionEnd::Unauthorized(format!(
                "ZooKeeper refused to let this gateway read {root} {who} (NoAuth): give the \
                 gateway credentials with --zk-auth-file or PORTICO_ZK_AUTH \
                 (docs/operations/zookeeper.md, \"ZooKeeper credentials and ACLs\")"
            )))
        }
        Err(zk::Error::AuthFailed) => Err(SessionEnd::Unauthorized(
            "ZooKeeper rejected the credentials (AuthFailed)".to_owned(),
        )),
        Err(e) => Err(SessionEnd::from_error(e)),
    }
}

/// `at + d`, or `at` itself if that is past what an instant can hold.
fn add(at: Instant, d: Duration) -> Instant {
    at.checked_add(d).unwrap_or(at)
}

/// What a node event at tree path `rel` calls for.
fn classify_event(rel: &str, kind: zk::EventType) -> EventAction {
    if DocKind::classify(rel).is_some() {
        if rel == "ipacl" && kind != zk::EventType::NodeDataChanged {
            // Created or deleted at the root: the root's pzxid moved too.
            return EventAction::FullRead;
        }
        return EventAction::Read(rel.to_owned());
    }
    let top_level = !rel.contains('/');
    let structural = matches!(
        kind,
        zk::EventType::NodeCreated | zk::EventType::NodeDeleted
    );
    if structural && top_level {
        // The root itself, a kind folder, or another top-level node: rare; re-read everything
        // so the generation (root and folder pzxids) stays what a full reader computes.
        return EventAction::FullRead;
    }
    EventAction::Ignore
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_classified() {
        use zk::EventType::*;
        assert!(
            matches!(classify_event("apis/x", NodeDataChanged), EventAction::Read(p) if p == "apis/x")
        );
        assert!(matches!(
            classify_event("switches/x", NodeDeleted),
            EventAction::Read(_)
        ));
        assert!(matches!(
            classify_event("ipacl", NodeDataChanged),
            EventAction::Read(_)
        ));
        assert!(matches!(
            classify_event("ipacl", NodeCreated),
            EventAction::FullRead
        ));
        assert!(matches!(
            classify_event("apis", NodeCreated),
            EventAction::FullRead
        ));
        assert!(matches!(
            classify_event("", NodeDeleted),
            EventAction::FullRead
        ));
        assert!(matches!(
            classify_event("sandbox/apis/x", NodeCreated),
            EventAction::Ignore
        ));
        assert!(matches!(
            classify_event("nodes/gw-1", NodeDataChanged),
            EventAction::Ignore
        ));
        assert!(matches!(
            classify_event("audit/entry-1", NodeCreated),
            EventAction::Ignore
        ));
        assert!(matches!(
            classify_event("apis", NodeDataChanged),
            EventAction::Ignore
        ));
    }

    #[test]
    fn instants_never_overflow() {
        let now = Instant::now();
        assert_eq!(add(now, Duration::MAX), now);
        assert!(add(now, Duration::from_millis(5)) > now);
    }
}
