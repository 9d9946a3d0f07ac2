//! ZooKeeper: the [`ConfigSource`](crate::ConfigSource) (`--zk HOSTS --zk-root /portico`),
//! gateway node registration (`<root>/nodes/<node_id>`) and the path helpers the registry uses
//! (docs/ARCHITECTURE.md, "Control plane").
//!
//! - `source`: [`ZkSource`], its state for `/status` ([`ZkStatus`]), connecting with backoff;
//! - `session`: one session: the watch, full reads, coalesced re-reads;
//! - `shared`: what the source, its clones and its sessions share (settings, status, registration);
//! - `read`: reading the tree (whole, or some documents) and its generation;
//! - `node`: the node registration ([`NodeInfo`]);
//! - `auth`: credentials ([`ZkAuth`]) and the ACL of every node ([`AclPolicy`]);
//! - `lockdown`: locking an open tree (`portico zk lockdown`);
//! - `paths`: [`normalize_root`], [`join_path`], [`relative_path`], [`KIND_DIRS`];
//! - `retry`: the backoff every retry loop uses.
//!
//! # How the tree is followed
//! One session, one persistent recursive watch on the root. A node event under a served path
//! (`apis/x`, `clusters/x`, `apps/x`, `switches/x`, `descriptors/x`, `ipacl`) re-reads that one
//! document; events elsewhere (`sandbox/`, `nodes/`, `history/`, `audit/`) are ignored. Events are
//! coalesced: the first change after a quiet period is read at once (lowest switch latency), and
//! later ones in a burst at most once per debounce interval. After every (re)connect the whole
//! tree is read again, since a persistent watch misses events while disconnected. An expired
//! session is replaced by a new one (then a full read and a new node registration). Failures
//! back off and retry inside [`ConfigSource::run`](crate::ConfigSource::run); nothing here is on
//! a request path. A node this client may not read (its ACL) is not a failure of the read: it
//! is listed in [`crate::Tree::unreadable`] and rejected alone.
//!
//! # Generation
//! [`crate::Tree::generation`] is the highest of: the root's `pzxid`, the `pzxid` of each kind folder
//! (`apis`, `clusters`, `apps`, `switches`, `descriptors`) and the `mzxid` of each served
//! document. Every create, change or delete of a served document raises it, and any reader (a
//! gateway, the registry computing lag with [`read_tree`]) gets the same number for the same
//! state of ZooKeeper.

pub mod auth;
pub mod lockdown;
mod node;
mod paths;
mod read;
mod retry;
mod session;
mod shared;
mod source;

pub use auth::{AclPolicy, Role, ZkAuth};
pub use node::{ensure_path, ensure_path_with, NodeInfo};
pub use paths::{join_path, normalize_root, relative_path, KIND_DIRS};
pub use read::{read_generation, read_tree};
pub use shared::{ZkState, ZkStatus};
pub use source::{ZkSource, DEFAULT_DEBOUNCE, DEFAULT_SESSION_TIMEOUT};
