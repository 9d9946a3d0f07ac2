//! [`ZkSource`]: the ZooKeeper [`ConfigSource`], its connection state for `/status`, and the
//! registration it keeps for this gateway. [`ConfigSource::run`] connects (with backoff),
//! serves each session ([`super::session`]) and starts a new one when it ends.

use super::auth::ZkAuth;
use super::node::{members_loop, registration_loop, NodeInfo};
use super::paths::normalize_root;
use super::retry::Backoff;
use super::session::{serve_session, SessionEnd};
use super::shared::Shared;
pub use super::shared::{ZkState, ZkStatus};
use crate::snapshot::ConfigVersion;
use crate::source::{ConfigSource, SourceStatus};
use crate::tree::Tree;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use zookeeper_client as zk;

/// Session timeout asked of ZooKeeper unless [`ZkSource::with_session_timeout`] says otherwise.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// Minimum spacing of re-reads during a burst of changes.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(10);

/// A ZooKeeper configuration source, plus this gateway's node registration.
///
/// Cheap to clone: clones share the connection state and registration. [`ConfigSource::run`]
/// owns the session; [`ZkSource::register_node`] and [`ZkSource::set_applied`] only record what
/// the node document should say, and the running source writes it (again after each new session).
#[derive(Clone)]
pub struct ZkSource {
    inner: Arc<Shared>,
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
        let (members, _) = watch::channel(None);
        ZkSource {
            inner: Arc::new(Shared {
                hosts: hosts.trim().to_owned(),
                root: normalize_root(root),
                session_timeout: DEFAULT_SESSION_TIMEOUT,
                debounce: DEFAULT_DEBOUNCE,
                auth: None,
                status,
                registration,
                members,
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

    /// Sets the `digest` credentials every session authenticates with (again after every new
    /// session); `None` (the default) for an open tree.
    pub fn with_auth(self, auth: Option<ZkAuth>) -> ZkSource {
        self.rebuild(|inner| inner.auth = auth)
    }

    fn rebuild(self, change: impl FnOnce(&mut Shared)) -> ZkSource {
        let mut inner = Shared {
            hosts: self.inner.hosts.clone(),
            root: self.inner.root.clone(),
            session_timeout: self.inner.session_timeout,
            debounce: self.inner.debounce,
            auth: self.inner.auth.clone(),
            status: watch::channel(self.inner.status.borrow().clone()).0,
            registration: watch::channel(self.inner.registration.borrow().clone()).0,
            members: watch::channel(*self.inner.members.borrow()).0,
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

    /// Enters `state` (see [`Shared::set_state`]).
    fn set_state(&self, state: ZkState, error: Option<String>) {
        self.inner.set_state(state, error);
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

    /// How many gateways are registered in `<root>/nodes/` (this one included), followed
    /// with a child watch while the source runs; `None` while unknown (no session yet).
    pub fn watch_members(&self) -> watch::Receiver<Option<usize>> {
        self.inner.members.subscribe()
    }

    /// Stops registering this node; the running source deletes its node document.
    pub fn deregister_node(&self) {
        self.inner.registration.send_replace(None);
    }

    /// The node document as it should currently be.
    pub fn node_info(&self) -> Option<NodeInfo> {
        self.inner.registration.borrow().clone()
    }

    async fn connect(&self) -> Result<zk::Client, zk::Error> {
        ZkAuth::connector(self.inner.auth.as_ref())
            .with_session_timeout(self.inner.session_timeout)
            .with_fail_eagerly()
            .connect(&self.inner.hosts)
            .await
    }

    /// Connects, retrying with backoff until it works; `None` once `updates` is closed.
    async fn connect_with_retry(
        &self,
        updates: &mpsc::Sender<Tree>,
        backoff: &mut Backoff,
    ) -> Option<zk::Client> {
        loop {
            let connected = tokio::select! {
                r = self.connect() => r,
                _ = updates.closed() => return None,
            };
            match connected {
                Ok(client) => {
                    backoff.reset();
                    return Some(client);
                }
                Err(e) => {
                    let state = match self.state().state {
                        ZkState::Connected => ZkState::Disconnected,
                        other => other,
                    };
                    self.set_state(state, Some(format!("connect to {}: {e}", self.inner.hosts)));
                    tracing::debug!(hosts = %self.inner.hosts, error = %e, "zookeeper connect failed; retrying");
                    if !pause(backoff, updates).await {
                        return None;
                    }
                }
            }
        }
    }
}

/// Waits out the next backoff delay; false if `updates` closed meanwhile.
async fn pause(backoff: &mut Backoff, updates: &mpsc::Sender<Tree>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(backoff.next_delay()) => true,
        _ = updates.closed() => false,
    }
}

#[async_trait]
impl ConfigSource for ZkSource {
    fn describe(&self) -> String {
        format!("zk:{}{}", self.inner.hosts, self.inner.root)
    }

    fn status(&self) -> SourceStatus {
        let state = self.state();
        SourceStatus {
            connected: state.state == ZkState::Connected,
            detail: serde_json::to_value(&state).ok(),
        }
    }

    fn refused(&self) -> Option<String> {
        let state = self.state();
        (state.state == ZkState::Unauthorized).then(|| {
            state
                .last_error
                .unwrap_or_else(|| "ZooKeeper refused access".to_owned())
        })
    }

    async fn run(&self, updates: mpsc::Sender<Tree>) {
        let (sessions, session_rx) = watch::channel::<Option<zk::Client>>(None);
        let registrar = tokio::spawn(registration_loop(
            self.inner.root.clone(),
            session_rx,
            self.inner.registration.subscribe(),
        ));
        let _abort = AbortOnDrop(registrar);
        let members = tokio::spawn(members_loop(
            self.inner.root.clone(),
            sessions.subscribe(),
            self.inner.members.clone(),
        ));
        let _abort_members = AbortOnDrop(members);
        let mut backoff = Backoff::default();
        loop {
            if updates.is_closed() {
                return;
            }
            let Some(client) = self.connect_with_retry(&updates, &mut backoff).await else {
                return;
            };
            let end = serve_session(&self.inner, client, &updates, &sessions).await;
            sessions.send_replace(None);
            match end {
                SessionEnd::Closed => return,
                SessionEnd::Expired => {
                    tracing::warn!(hosts = %self.inner.hosts, "zookeeper session expired; starting a new one");
                    self.set_state(ZkState::Expired, Some("session expired".to_owned()));
                }
                SessionEnd::Unauthorized(e) => {
                    // Logged once when it starts (and again after access worked meanwhile).
                    if self.state().state != ZkState::Unauthorized {
                        tracing::error!(hosts = %self.inner.hosts, root = %self.inner.root, error = %e, "zookeeper refused access; serving the configuration already applied; retrying");
                    }
                    self.set_state(ZkState::Unauthorized, Some(e));
                    if !pause(&mut backoff, &updates).await {
                        return;
                    }
                }
                SessionEnd::Failed(e) => {
                    tracing::warn!(hosts = %self.inner.hosts, error = %e, "zookeeper session failed; retrying");
                    self.set_state(ZkState::Disconnected, Some(e));
                    if !pause(&mut backoff, &updates).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Aborts the task when dropped (the registration loop ends with [`ConfigSource::run`]).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
