//! Portico's control-plane model, shared by the gateway and the registry.
//!
//! - [`v1`]: the external documents of the configuration tree (docs/operations/config-tree.md, "The configuration tree").
//! - [`tree`]: a raw tree of documents as read from a source (paths → bytes).
//! - [`template`]: `google.api.http` path templates (parse, match).
//! - [`selector`]: key selectors (`path:sku`, `header:X-Region`, ...) of caches, hot keys and
//!   key-level switches.
//! - [`fieldpath`]: field paths (`shop.id`) resolved through a protobuf message type.
//! - [`validate`]: a [`Tree`] → one immutable [`Snapshot`], rejecting bad documents one by one.
//! - [`source`]: the [`ConfigSource`] trait and the directory source (`--config-dir`).
//! - [`store`]: the last-known-good snapshot on disk (`--snapshot-dir`).
//! - [`egress`]: where outbound calls made for config authors may go (webhooks, callbacks,
//!   health checks, `wake_url`, the reflection import).
//! - [`status`]: a gateway's admin `/status` document, written by the gateway and read by the
//!   registry and the CLI (its schema: `docs/schemas/gateway-status.schema.json`).
//!
//! Layers (docs/ARCHITECTURE.md, "Control layers"): a module imports only modules of a lower
//! layer, never one beside it. `control/tests/it/layers.rs` reads this table and checks it, and
//! that no files import each other, on every test run.
//!
//! | layer | modules |
//! |---|---|
//! | 4 | [`status`] |
//! | 3 | [`validate`], [`store`], [`zk`] |
//! | 2 | [`snapshot`] |
//! | 1 | [`selector`], [`source`] |
//! | 0 | [`v1`], [`tree`], [`template`], [`fieldpath`], [`sign`], [`egress`], [`clock`], [`secret_file`] |

pub mod clock;
pub mod egress;
pub mod fieldpath;
pub mod secret_file;
pub mod selector;
pub mod sign;
pub mod snapshot;
pub mod source;
pub mod status;
pub mod store;
pub mod template;
pub mod tree;
pub mod v1;
pub mod validate;
pub mod zk;

pub use snapshot::{
    Api, BackendKind, Binding, CacheSpec, ConfigVersion, HotKeysSpec, HotPolicy, IpAclRules,
    KeySwitch, Rejection, Snapshot,
};
pub use source::{ConfigSource, DirSource, SourceStatus};
pub use tree::{DocKind, Tree};
pub use validate::build_snapshot;
pub use zk::{NodeInfo, ZkSource, ZkState, ZkStatus};
