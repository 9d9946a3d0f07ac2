//! Portico's registry: the admin REST API over the ZooKeeper configuration tree (stateless;
//! any number can run side by side), the publishing workflow for backend teams (protos →
//! descriptor → sandbox drafts → publish → history → rollback), and the client side used by the
//! `portico` CLI.
//!
//! - [`server`]: start-up, middleware (request id, bearer auth, error envelope).
//! - [`api`]: the routes (one table; the OpenAPI document is generated from it).
//! - [`zk_store`]: ZooKeeper access with compare-and-set writes.
//! - [`protos`]: proto compilation, descriptor analysis, gRPC reflection import, drafts.
//! - [`openapi`]: the OpenAPI 3 document.
//! - [`client`]: a small HTTP client of this API (used by the CLI).

#![recursion_limit = "1024"]

pub mod api;
pub mod client;
pub mod console;
pub mod error;
pub mod health;
pub mod openapi;
pub mod protos;
pub mod sandbox_call;
pub mod server;
pub mod zk_store;

pub use server::{router, spawn, AppState, Config};
