//! The edge: cheap checks first, each stage in its own file, all reading one snapshot.
//!
//! Request order (the pipeline, `pipeline.rs`, lists them exactly so):
//! `ip_acl → route → (read body) → auth → permit → rate_limit → degrade → cache`.
//!
//! Every stage is built the same way, [`Stage::build`] from the snapshot and the state the
//! plane [`Carried`] across reloads, and answers the same way, [`Flow`] (`stage.rs`, which
//! imports no stage: the state the stages keep across reloads lives apart from them, in
//! `cache_store.rs`, `limiters.rs` and `replay.rs`).

pub mod auth;
pub mod cache;
pub mod cache_key;
pub mod cache_store;
pub mod degrade;
pub mod framing;
pub mod hot_keys;
pub mod ip_acl;
pub mod key_text;
pub mod keys;
pub mod limiters;
pub mod permit;
pub mod rate_limit;
pub mod replay;
pub mod route;
mod stage;
mod stages;

pub use stage::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
pub use stages::Stages;
