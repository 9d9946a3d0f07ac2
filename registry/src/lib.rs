//! Portico's registry: the admin REST API over the ZooKeeper configuration tree (no configuration
//! of its own; any number can run side by side), the publishing workflow for backend teams (protos
//! → descriptor → sandbox drafts → publish → history → rollback), the console's server side, and
//! the client side used by the `portico` CLI.
//!
//! Layers, each importing only the ones below it:
//! - [`server`]: the router, the request middleware (request id, bearer auth, error envelope)
//!   and start-up;
//! - [`api`]: the routes, one module per resource; [`openapi`]: the OpenAPI document of them;
//! - [`portal`]: the merchants' developer portal (public, under `/portal`: OpenAPI documents,
//!   the pages, "try it" against the sandbox);
//! - [`health`] (per-API health from the gateways' metrics), [`sandbox_call`] (the console's
//!   "try it"), [`protos`] (proto compilation, descriptor analysis, reflection, drafts):
//!   the logic behind some routes;
//! - [`route`] (route descriptions), [`input`] (checking what clients send), [`state`]
//!   (config and shared state), [`zk_store`] (ZooKeeper access with compare-and-set writes),
//!   [`console`] (the built admin UI), [`error`] (the one error type);
//! - [`autoscale`]: the background task evaluating the clusters' autoscale rules and idle time
//!   on the rates of [`health`] (it writes the audit log through [`api::audit`]);
//! - [`alerts`] (rule evaluation every 2 s, notifications), [`history`] (per-minute rollups
//!   in SQLite and the recorder filling them), [`reports`] (daily and weekly reports, the
//!   owners' mails): background tasks on [`health`]'s scrapes (docs/OPERATIONS.md, "Alerts",
//!   "The history store", "Reports");
//! - [`client`]: a small HTTP client of this API (used by the CLI), apart from the rest.

#![recursion_limit = "1024"]

pub mod alerts;
pub mod api;
pub mod autoscale;
pub mod client;
pub mod console;
pub mod egress;
pub mod error;
pub mod health;
pub mod history;
pub mod input;
pub mod listener;
pub mod openapi;
pub mod portal;
pub mod protos;
pub mod reports;
pub mod route;
pub mod sandbox_call;
pub mod server;
pub mod state;
#[cfg(test)]
mod test_support;
pub mod tree_watch;
pub mod zk_store;

pub use server::{router, spawn, MAX_BODY_BYTES};
pub use state::{AppState, Config};
