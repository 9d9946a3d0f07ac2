//! What a [`ZkSource`](super::ZkSource), its clones and its sessions share: the settings, the
//! connection status for `/status` ([`ZkStatus`]) and the node registration. Below both
//! `source.rs` (connecting, the session loop) and `session.rs` (one session), which update it.

use super::auth::ZkAuth;
use super::node::NodeInfo;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::watch;

/// Connection state of a [`ZkSource`](super::ZkSource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// ZooKeeper refused this gateway's credentials (none given, or not those the tree's ACLs
    /// name): the gateway keeps serving what it has and retries (docs/operations/zookeeper.md,
    /// "ZooKeeper credentials and ACLs").
    Unauthorized,
}

/// A snapshot of a [`ZkSource`](super::ZkSource)'s connection, for `/status` (its `zookeeper`,
/// [`crate::status::GatewayStatus::zookeeper`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

/// The state behind a [`ZkSource`](super::ZkSource) and its clones.
pub(super) struct Shared {
    pub(super) hosts: String,
    pub(super) root: String,
    pub(super) session_timeout: Duration,
    pub(super) debounce: Duration,
    pub(super) auth: Option<ZkAuth>,
    pub(super) status: watch::Sender<ZkStatus>,
    pub(super) registration: watch::Sender<Option<NodeInfo>>,
    /// Gateways registered in `nodes/` (see [`ZkSource::watch_members`](super::ZkSource::watch_members)).
    pub(super) members: watch::Sender<Option<usize>>,
}

impl Shared {
    /// The ensemble connect string.
    pub(super) fn hosts(&self) -> &str {
        &self.hosts
    }

    /// The normalized root path.
    pub(super) fn root(&self) -> &str {
        &self.root
    }

    /// The user this source authenticates as, if any.
    pub(super) fn auth_user(&self) -> Option<&str> {
        self.auth.as_ref().map(ZkAuth::user)
    }

    /// The minimum spacing of re-reads during a burst of changes.
    pub(super) fn debounce(&self) -> Duration {
        self.debounce
    }

    /// Enters `state` (its `since` moves only on a change); `error`, if any, becomes the last
    /// error.
    pub(super) fn set_state(&self, state: ZkState, error: Option<String>) {
        self.status.send_modify(|status| {
            if status.state != state {
                status.state = state;
                status.since_unix_ms = crate::clock::now_ms();
            }
            if error.is_some() {
                status.last_error = error;
            }
        });
    }

    /// Records a new session.
    pub(super) fn session_started(&self, session_id: &str) {
        self.status.send_modify(|s| {
            s.session_id = Some(session_id.to_owned());
            s.sessions += 1;
        });
    }

    /// After a full read: connected, and no error to report any more.
    pub(super) fn tree_read(&self) {
        self.set_state(ZkState::Connected, None);
        self.status.send_modify(|s| s.last_error = None);
    }

    /// Records a tree sent to the gateway.
    pub(super) fn tree_sent(&self, generation: u64) {
        self.status.send_modify(|s| {
            s.generation = generation;
            s.trees_sent += 1;
            s.last_tree_unix_ms = Some(crate::clock::now_ms());
        });
    }
}
