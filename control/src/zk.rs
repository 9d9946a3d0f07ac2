//! The ZooKeeper [`ConfigSource`] (`--zk HOSTS --zk-root /portico`) and gateway node
//! registration (`<root>/nodes/<node_id>`).
//!
//! # How the tree is followed
//! One session, one persistent recursive watch on the root. A node event under a served path
//! (`apis/x`, `clusters/x`, `apps/x`, `switches/x`, `descriptors/x`, `ipacl`) re-reads that one
//! document; events elsewhere (`sandbox/`, `nodes/`, `history/`, `audit/`) are ignored. Events are
//! coalesced: the first change after a quiet period is read at once (lowest switch latency), and
//! later ones in a burst at most once per debounce interval. After every (re)connect the whole
//! tree is read again, since a persistent watch misses events while disconnected. An expired
//! session is replaced by a new one (then a full read and a new node registration). Failures
//! back off and retry inside [`ConfigSource::run`]; nothing here is on a request path.
//!
//! # Generation
//! [`Tree::generation`] is the highest of: the root's `pzxid`, the `pzxid` of each kind folder
//! (`apis`, `clusters`, `apps`, `switches`, `descriptors`) and the `mzxid` of each served
//! document. Every create, change or delete of a served document raises it, and any reader (a
//! gateway, the registry computing lag with [`read_tree`]) gets the same number for the same
//! state of ZooKeeper.

use crate::snapshot::ConfigVersion;
use crate::source::ConfigSource;
use crate::tree::{DocKind, Tree};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

/// Session timeout asked of ZooKeeper unless [`ZkSource::with_session_timeout`] says otherwise.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// Minimum spacing of re-reads during a burst of changes.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(10);
/// Backoff between failed connection attempts: starts here, doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The folders of a served tree, below the root (the `ipacl` document sits at the root).
pub const KIND_DIRS: [&str; 6] = [
    "apis",
    "clusters",
    "apps",
    "switches",
    "descriptors",
    "alerts",
];

/// Connection state of a [`ZkSource`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZkState {
    /// No session yet: the first connection is being attempted (or retried).
    Connecting,
    /// A session is established and the watch is in place.
    Connected,
    /// The session exists but the connection is lost; the client is reconnecting.
    Disconnected,
    /// The session expired; a new one is being established.
    Expired,
}

/// A snapshot of a [`ZkSource`]'s connection, for `/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZkStatus {
    pub state: ZkState,
    /// When `state` was entered, in Unix epoch milliseconds.
    pub since_unix_ms: u64,
    /// The current session id (hex), if a session was ever established.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The most recent error, kept until the next successful full read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Generation of the last tree sent (0 before the first).
    pub generation: u64,
    /// Trees sent so far.
    pub trees_sent: u64,
    /// When the last tree was sent, in Unix epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tree_unix_ms: Option<u64>,
    /// Sessions established so far (1 after the first connect; more after expiries).
    pub sessions: u64,
}

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
            started_at: now.clone(),
            config_version: ConfigVersion::default(),
            updated_at: now,
        }
    }
}

/// Normalizes a ZooKeeper root: a leading `/`, no trailing `/` (except for `/` itself).
pub fn normalize_root(root: &str) -> String {
    let trimmed = root.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_owned()
    } else if trimmed.starts_with('/') {
        trimmed.to_owned()
    } else {
        format!("/{trimmed}")
    }
}

/// The absolute ZooKeeper path of `rel` (a tree path like `apis/x`) under `root`.
pub fn join_path(root: &str, rel: &str) -> String {
    if rel.is_empty() {
        root.to_owned()
    } else if root == "/" {
        format!("/{rel}")
    } else {
        format!("{root}/{rel}")
    }
}

/// The tree path of an absolute ZooKeeper `path` under `root`: `Some("")` for the root itself,
/// `None` outside it.
pub fn relative_path<'a>(root: &str, path: &'a str) -> Option<&'a str> {
    if root == "/" {
        return path.strip_prefix('/');
    }
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix('/')
    }
}

/// Reads the whole served tree under `root` (absolute, normalized), with its generation (see the
/// module docs). A missing root or folder is an empty part of the tree. Requests are pipelined.
pub async fn read_tree(client: &zk::Client, root: &str) -> Result<Tree, zk::Error> {
    let mut tree = Tree::default();
    let root_stat = match client.check_stat(root).await? {
        Some(stat) => stat,
        None => return Ok(tree),
    };
    let mut generation = root_stat.pzxid;
    let listings = futures::future::join_all(
        KIND_DIRS
            .iter()
            .map(|dir| client.get_children(&join_path(root, dir))),
    )
    .await;
    let mut paths = vec!["ipacl".to_owned()];
    for (dir, listing) in KIND_DIRS.iter().zip(listings) {
        match listing {
            Ok((children, stat)) => {
                generation = generation.max(stat.pzxid);
                paths.extend(children.into_iter().map(|name| format!("{dir}/{name}")));
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    let reads = futures::future::join_all(
        paths
            .iter()
            .map(|rel| client.get_data(&join_path(root, rel))),
    )
    .await;
    for (rel, read) in paths.iter().zip(reads) {
        match read {
            Ok((data, stat)) => {
                if tree.insert(rel, data) {
                    generation = generation.max(stat.mzxid);
                }
            }
            // Deleted between the listing and the read: its event follows.
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    tree.generation = zxid_to_generation(generation);
    Ok(tree)
}

fn zxid_to_generation(zxid: i64) -> u64 {
    u64::try_from(zxid).unwrap_or(0)
}

/// A ZooKeeper configuration source, plus this gateway's node registration.
///
/// Cheap to clone: clones share the connection state and registration. [`ConfigSource::run`]
/// owns the session; [`ZkSource::register_node`] and [`ZkSource::set_applied`] only record what
/// the node document should say, and the running source writes it (again after each new session).
#[derive(Clone)]
pub struct ZkSource {
    inner: Arc<Inner>,
}

struct Inner {
    hosts: String,
    root: String,
    session_timeout: Duration,
    debounce: Duration,
    status: watch::Sender<ZkStatus>,
    registration: watch::Sender<Option<NodeInfo>>,
}

impl ZkSource {
    /// A source for the tree under `root` (e.g. `/portico`, or `/portico/sandbox` for a sandbox
    /// listener) on the ensemble `hosts` (`host:port[,host:port...]`). Nothing connects until
    /// [`ConfigSource::run`].
    pub fn new(hosts: &str, root: &str) -> ZkSource {
        let (status, _) = watch::channel(ZkStatus {
            state: ZkState::Connecting,
            since_unix_ms: crate::clock::now_ms(),
            session_id: None,
            last_error: None,
            generation: 0,
            trees_sent: 0,
            last_tree_unix_ms: None,
            sessions: 0,
        });
        let (registration, _) = watch::channel(None);
        ZkSource {
            inner: Arc::new(Inner {
                hosts: hosts.trim().to_owned(),
                root: normalize_root(root),
                session_timeout: DEFAULT_SESSION_TIMEOUT,
                debounce: DEFAULT_DEBOUNCE,
                status,
                registration,
            }),
        }
    }

    /// Sets the session timeout to negotiate (default 6 s; the server clamps it to its
    /// `minSessionTimeout..maxSessionTimeout`). Call before cloning or running.
    pub fn with_session_timeout(self, timeout: Duration) -> ZkSource {
        self.rebuild(|inner| inner.session_timeout = timeout)
    }

    /// Sets the minimum spacing of re-reads during a burst of changes (default 10 ms).
    pub fn with_debounce(self, debounce: Duration) -> ZkSource {
        self.rebuild(|inner| inner.debounce = debounce)
    }

    fn rebuild(self, change: impl FnOnce(&mut Inner)) -> ZkSource {
        let mut inner = Inner {
            hosts: self.inner.hosts.clone(),
            root: self.inner.root.clone(),
            session_timeout: self.inner.session_timeout,
            debounce: self.inner.debounce,
            status: watch::channel(self.inner.status.borrow().clone()).0,
            registration: watch::channel(self.inner.registration.borrow().clone()).0,
        };
        change(&mut inner);
        ZkSource {
            inner: Arc::new(inner),
        }
    }

    /// The ensemble connect string.
    pub fn hosts(&self) -> &str {
        &self.inner.hosts
    }

    /// The normalized root path.
    pub fn root(&self) -> &str {
        &self.inner.root
    }

    /// The current connection state.
    pub fn state(&self) -> ZkStatus {
        self.inner.status.borrow().clone()
    }

    /// A receiver that sees every change of [`ZkSource::state`].
    pub fn watch_state(&self) -> watch::Receiver<ZkStatus> {
        self.inner.status.subscribe()
    }

    /// Registers this gateway as the ephemeral `<root>/nodes/<node_id>` (parents created as
    /// needed). Written by the running source as soon as it has a session, and re-created after
    /// every new session. Calling again replaces the document (its `config_version` is kept if
    /// the new one has generation 0).
    pub fn register_node(&self, mut info: NodeInfo) {
        self.inner.registration.send_modify(|current| {
            if info.config_version.generation == 0 && info.config_version.digest.is_empty() {
                if let Some(old) = current.as_ref() {
                    info.config_version = old.config_version.clone();
                }
            }
            info.updated_at = crate::clock::now_rfc3339();
            *current = Some(info);
        });
    }

    /// Records the configuration version the gateway now serves; the node document is updated
    /// at once (or on the next session). No-op before [`ZkSource::register_node`].
    pub fn set_applied(&self, version: &ConfigVersion) {
        self.inner
            .registration
            .send_if_modified(|current| match current {
                Some(info) if info.config_version != *version => {
                    info.config_version = version.clone();
                    info.updated_at = crate::clock::now_rfc3339();
                    true
                }
                _ => false,
            });
    }

    /// Stops registering this node; the running source deletes its node document.
    pub fn deregister_node(&self) {
        self.inner.registration.send_replace(None);
    }

    /// The node document as it should currently be.
    pub fn node_info(&self) -> Option<NodeInfo> {
        self.inner.registration.borrow().clone()
    }

    fn set_state(&self, state: ZkState, error: Option<String>) {
        self.inner.status.send_modify(|status| {
            if status.state != state {
                status.state = state;
                status.since_unix_ms = crate::clock::now_ms();
            }
            if error.is_some() {
                status.last_error = error;
            }
        });
    }

    async fn connect(&self) -> Result<zk::Client, zk::Error> {
        zk::Client::connector()
            .with_session_timeout(self.inner.session_timeout)
            .with_fail_eagerly()
            .connect(&self.inner.hosts)
            .await
    }

    /// Serves one session until it ends; returns how it ended.
    async fn serve_session(
        &self,
        client: zk::Client,
        updates: &mpsc::Sender<Tree>,
        sessions: &watch::Sender<Option<zk::Client>>,
    ) -> SessionEnd {
        let root = self.inner.root.clone();
        let mut watcher = match client
            .watch(&root, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(w) => w,
            Err(e) => return SessionEnd::from_error(e),
        };
        let session_id = client.session_id().to_string();
        self.inner.status.send_modify(|s| {
            s.session_id = Some(session_id.clone());
            s.sessions += 1;
        });
        tracing::info!(hosts = %self.inner.hosts, root = %root, session = %session_id, "zookeeper session established");
        sessions.send_replace(Some(client.clone()));

        let mut state = SessionView::default();
        let mut need_full = true;
        let mut retry_at: Option<Instant> = None;
        let mut pending: BTreeSet<String> = BTreeSet::new();
        let mut flush_at: Option<Instant> = None;
        let mut last_flush = Instant::now() - self.inner.debounce;
        let mut connected = true;
        let mut backoff = MIN_BACKOFF;

        let mut rewatch = false;
        loop {
            // After a reconnect, add the persistent watch again: zookeeper-client 0.11 does not
            // re-send persistent watches on reconnect (its `resend_watches` only sends the
            // oneshot kinds), so the server forgot ours. The old watcher is dropped after the new
            // one is in place, which keeps the server-side watch.
            if rewatch && connected && retry_at.is_none_or(|t| t <= Instant::now()) {
                match client
                    .watch(&root, zk::AddWatchMode::PersistentRecursive)
                    .await
                {
                    Ok(fresh) => {
                        watcher = fresh;
                        rewatch = false;
                        need_full = true;
                        retry_at = None;
                    }
                    Err(e) => {
                        if let Some(end) = SessionEnd::terminal(&e) {
                            return end;
                        }
                        tracing::warn!(error = %e, "zookeeper watch failed; retrying");
                        retry_at = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
                continue;
            }
            // A full read is due and the connection is up: do it now.
            if need_full && connected && retry_at.is_none_or(|t| t <= Instant::now()) {
                match read_tree(&client, &root).await {
                    Ok(tree) => {
                        need_full = false;
                        retry_at = None;
                        backoff = MIN_BACKOFF;
                        pending.clear();
                        flush_at = None;
                        state.docs = tree.docs;
                        state.generation = tree.generation;
                        self.set_state(ZkState::Connected, None);
                        self.inner.status.send_modify(|s| s.last_error = None);
                        if !self.send(&mut state, updates).await {
                            return SessionEnd::Closed;
                        }
                    }
                    Err(e) => {
                        if let Some(end) = SessionEnd::terminal(&e) {
                            return end;
                        }
                        tracing::warn!(error = %e, "zookeeper full read failed; retrying");
                        self.set_state(ZkState::Disconnected, Some(format!("full read: {e}")));
                        retry_at = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
                continue;
            }

            let wake_at = match (
                flush_at,
                (need_full || rewatch).then_some(retry_at).flatten(),
            ) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                biased;
                event = watcher.changed() => {
                    match event.event_type {
                        zk::EventType::Session => match event.session_state {
                            zk::SessionState::Disconnected => {
                                connected = false;
                                self.set_state(ZkState::Disconnected, Some("connection lost".to_owned()));
                            }
                            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                                connected = true;
                                // The watch must be added again, and events may have been missed
                                // while disconnected: re-watch, then read everything.
                                rewatch = true;
                                need_full = true;
                                retry_at = None;
                            }
                            zk::SessionState::Expired => return SessionEnd::Expired,
                            zk::SessionState::AuthFailed => return SessionEnd::Failed("authentication failed".to_owned()),
                            zk::SessionState::Closed => return SessionEnd::Failed("session closed".to_owned()),
                        },
                        kind => {
                            let Some(rel) = relative_path(&root, &event.path) else { continue };
                            match classify_event(rel, kind) {
                                EventAction::Ignore => {}
                                EventAction::FullRead => { need_full = true; retry_at = None; }
                                EventAction::Read(path) => {
                                    pending.insert(path);
                                    if flush_at.is_none() {
                                        // Leading edge: read at once after a quiet period; in a
                                        // burst, at most once per debounce interval.
                                        flush_at = Some((last_flush + self.inner.debounce).max(Instant::now()));
                                    }
                                }
                            }
                        }
                    }
                }
                _ = sleep_until_opt(wake_at) => {
                    if flush_at.is_some_and(|t| t <= Instant::now()) {
                        flush_at = None;
                        last_flush = Instant::now();
                        if need_full {
                            // A full read follows and covers these paths.
                            continue;
                        }
                        let paths = std::mem::take(&mut pending);
                        match self.read_paths(&client, &root, &paths, &mut state).await {
                            Ok(()) => {
                                if !self.send(&mut state, updates).await {
                                    return SessionEnd::Closed;
                                }
                            }
                            Err(e) => {
                                if let Some(end) = SessionEnd::terminal(&e) {
                                    return end;
                                }
                                tracing::warn!(error = %e, "zookeeper read failed; a full read follows");
                                need_full = true;
                            }
                        }
                    }
                }
                _ = updates.closed() => return SessionEnd::Closed,
            }
        }
    }

    /// Re-reads the given served documents into `state`.
    async fn read_paths(
        &self,
        client: &zk::Client,
        root: &str,
        paths: &BTreeSet<String>,
        state: &mut SessionView,
    ) -> Result<(), zk::Error> {
        let reads = futures::future::join_all(
            paths
                .iter()
                .map(|rel| client.get_data(&join_path(root, rel))),
        )
        .await;
        let mut deleted_parents = BTreeSet::new();
        for (rel, read) in paths.iter().zip(reads) {
            match read {
                Ok((data, stat)) => {
                    state.generation = state.generation.max(zxid_to_generation(stat.mzxid));
                    state.docs.insert(rel.clone(), data);
                }
                Err(zk::Error::NoNode) => {
                    state.docs.remove(rel);
                    let parent = rel.rsplit_once('/').map(|(dir, _)| dir).unwrap_or("");
                    deleted_parents.insert(parent.to_owned());
                }
                Err(e) => return Err(e),
            }
        }
        for parent in deleted_parents {
            if let Some(stat) = client.check_stat(&join_path(root, &parent)).await? {
                state.generation = state.generation.max(zxid_to_generation(stat.pzxid));
            }
        }
        Ok(())
    }

    /// Sends the current tree if it differs from the last one sent. Returns false once the
    /// receiver is gone.
    async fn send(&self, state: &mut SessionView, updates: &mpsc::Sender<Tree>) -> bool {
        if state.sent.as_ref().is_some_and(|(generation, docs)| {
            *generation == state.generation && *docs == state.docs
        }) {
            return true;
        }
        let tree = Tree {
            docs: state.docs.clone(),
            generation: state.generation,
        };
        if updates.send(tree).await.is_err() {
            return false;
        }
        state.sent = Some((state.generation, state.docs.clone()));
        let generation = state.generation;
        self.inner.status.send_modify(|s| {
            s.generation = generation;
            s.trees_sent += 1;
            s.last_tree_unix_ms = Some(crate::clock::now_ms());
        });
        true
    }
}

/// What a session loop knows of the tree, and what it last sent.
#[derive(Default)]
struct SessionView {
    docs: BTreeMap<String, Vec<u8>>,
    generation: u64,
    sent: Option<(u64, BTreeMap<String, Vec<u8>>)>,
}

enum EventAction {
    Ignore,
    FullRead,
    Read(String),
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

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

enum SessionEnd {
    /// The update receiver is gone: stop.
    Closed,
    /// The session expired: establish a new one at once.
    Expired,
    /// The session failed otherwise: back off, then a new one.
    Failed(String),
}

impl SessionEnd {
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

#[async_trait]
impl ConfigSource for ZkSource {
    fn describe(&self) -> String {
        format!("zk:{}{}", self.inner.hosts, self.inner.root)
    }

    fn status(&self) -> crate::source::SourceStatus {
        let state = self.state();
        crate::source::SourceStatus {
            connected: state.state == ZkState::Connected,
            detail: serde_json::to_value(&state).ok(),
        }
    }

    async fn run(&self, updates: mpsc::Sender<Tree>) {
        let (sessions, session_rx) = watch::channel::<Option<zk::Client>>(None);
        let registrar = tokio::spawn(registration_loop(
            self.inner.root.clone(),
            session_rx,
            self.inner.registration.subscribe(),
        ));
        let _abort = AbortOnDrop(registrar);
        let mut backoff = MIN_BACKOFF;
        loop {
            if updates.is_closed() {
                return;
            }
            let connected = tokio::select! {
                r = self.connect() => r,
                _ = updates.closed() => return,
            };
            let client = match connected {
                Ok(client) => client,
                Err(e) => {
                    let state = match self.state().state {
                        ZkState::Connected => ZkState::Disconnected,
                        other => other,
                    };
                    self.set_state(state, Some(format!("connect to {}: {e}", self.inner.hosts)));
                    tracing::debug!(hosts = %self.inner.hosts, error = %e, "zookeeper connect failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = updates.closed() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            backoff = MIN_BACKOFF;
            let end = self.serve_session(client, &updates, &sessions).await;
            sessions.send_replace(None);
            match end {
                SessionEnd::Closed => return,
                SessionEnd::Expired => {
                    tracing::warn!(hosts = %self.inner.hosts, "zookeeper session expired; starting a new one");
                    self.set_state(ZkState::Expired, Some("session expired".to_owned()));
                }
                SessionEnd::Failed(e) => {
                    tracing::warn!(hosts = %self.inner.hosts, error = %e, "zookeeper session failed; retrying");
                    self.set_state(ZkState::Disconnected, Some(e));
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = updates.closed() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps `<root>/nodes/<node_id>` equal to the desired registration on the current session.
async fn registration_loop(
    root: String,
    mut sessions: watch::Receiver<Option<zk::Client>>,
    mut desired: watch::Receiver<Option<NodeInfo>>,
) {
    // What was last written, on which session, so that only changes are written.
    let mut written: Option<(zk::SessionId, NodeInfo)> = None;
    let mut registered_path: Option<(zk::Client, String)> = None;
    let mut backoff = MIN_BACKOFF;
    let mut retry_at: Option<Instant> = None;
    loop {
        let client = sessions.borrow_and_update().clone();
        let info = desired.borrow_and_update().clone();
        let mut failed = false;
        match (client, info) {
            (Some(client), Some(info)) => {
                let sid = client.session_id();
                let up_to_date = written
                    .as_ref()
                    .is_some_and(|(s, w)| *s == sid && *w == info);
                if !up_to_date {
                    let path = join_path(&root, &format!("nodes/{}", info.node_id));
                    if let Some((old_client, old_path)) = registered_path.take() {
                        if old_path != path && old_client.session_id() == sid {
                            let _ = old_client.delete(&old_path, None).await;
                        }
                    }
                    match write_node(&client, &root, &path, &info).await {
                        Ok(()) => {
                            written = Some((sid, info));
                            registered_path = Some((client, path));
                            backoff = MIN_BACKOFF;
                            retry_at = None;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, path = %path, "node registration failed; retrying");
                            registered_path = Some((client, path));
                            failed = true;
                        }
                    }
                }
            }
            (Some(client), None) => {
                if let Some((old_client, old_path)) = registered_path.take() {
                    if old_client.session_id() == client.session_id() {
                        let _ = client.delete(&old_path, None).await;
                    }
                }
                written = None;
            }
            (None, _) => {}
        }
        if failed {
            retry_at = Some(Instant::now() + backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        tokio::select! {
            r = sessions.changed() => if r.is_err() { return },
            r = desired.changed() => if r.is_err() { return },
            _ = sleep_until_opt(retry_at) => { retry_at = None; }
        }
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
                let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
                match client.create(path, &data, &options).await {
                    Ok(_) => return Ok(()),
                    Err(zk::Error::NodeExists) => continue,
                    Err(zk::Error::NoNode) => {
                        let parent = join_path(root, "nodes");
                        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                        ensure_path(client, &parent, &dir).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_paths() {
        assert_eq!(normalize_root("/portico/"), "/portico");
        assert_eq!(normalize_root("portico"), "/portico");
        assert_eq!(normalize_root(""), "/");
        assert_eq!(join_path("/portico", "apis/x"), "/portico/apis/x");
        assert_eq!(join_path("/", "apis/x"), "/apis/x");
        assert_eq!(join_path("/portico", ""), "/portico");
        assert_eq!(relative_path("/portico", "/portico/apis/x"), Some("apis/x"));
        assert_eq!(relative_path("/portico", "/portico"), Some(""));
        assert_eq!(relative_path("/portico", "/porticox/apis"), None);
        assert_eq!(relative_path("/", "/apis/x"), Some("apis/x"));
    }

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
    }
}
