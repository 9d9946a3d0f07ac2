//! Where configuration comes from. A [`ConfigSource`] reads the whole tree and then reports
//! the whole tree again after every change; the gateway builds and validates a new
//! [`crate::Snapshot`] from each report and swaps it in. Sources never block the request path.

use crate::tree::Tree;
use async_trait::async_trait;
use tokio::sync::mpsc;

/// What a source says about its connection.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceStatus {
    /// Whether changes reach the gateway now (false while ZooKeeper is unreachable).
    pub connected: bool,
    /// Source-specific detail for `/status` (ZooKeeper: session, state, last error).
    pub detail: Option<serde_json::Value>,
}

/// A source of configuration trees.
#[async_trait]
pub trait ConfigSource: Send + Sync + 'static {
    /// Human-readable identity for logs and `/status`, e.g. `dir:/etc/portico`,
    /// `zk:127.0.0.1:2181/portico`.
    fn describe(&self) -> String;

    /// The source's connection state, for `/status` and the `portico_config_source_connected`
    /// gauge. Sources without a connection (a directory) are always connected.
    fn status(&self) -> SourceStatus {
        SourceStatus {
            connected: true,
            detail: None,
        }
    }

    /// Control phase (`/readyz`): why the source refuses this process access to the
    /// configuration (ZooKeeper: credentials missing or not those the tree's ACLs name), or
    /// `None` when it does not. A refused source keeps the node out of rotation while it
    /// serves what it has (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").
    fn refused(&self) -> Option<String> {
        None
    }

    /// Runs until `updates` is closed: sends the whole tree once it has first been read, then
    /// again after every change. Transient failures (an unreadable file, a lost ZooKeeper
    /// session) are logged and retried inside; they never end the loop.
    async fn run(&self, updates: mpsc::Sender<Tree>);
}

pub use dir::{file_path_for, read_tree, DirSource};

pub mod dir;
