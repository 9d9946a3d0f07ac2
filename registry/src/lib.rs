//! Portico's registry: the admin REST API over the ZooKeeper configuration tree (no configuration
//! of its own; any number can run side by side), the publishing workflow for backend teams (protos
//! → descriptor → sandbox drafts → publish → history → rollback), the console's server side, and
//! the client side used by the `portico` CLI.
//!
//! Layers (docs/ARCHITECTURE.md, "Registry layers"): a module imports only modules of a lower
//! layer, never one beside it; nothing imports [`server`]. `registry/tests/it/layers.rs` reads
//! this table and checks it, and that no files import each other, on every test run.
//!
//! | layer | modules | what |
//! |---|---|---|
//! | 8 | [`server`] | the router, the request middleware (request id, bearer auth, error envelope), start-up |
//! | 7 | [`portal`] | the merchants' developer portal (public, under `/portal`) |
//! | 6 | [`api`] | the routes, one module per resource |
//! | 5 | [`sandbox_call`], [`reports`], [`tree_watch`] | the console's "try it"; daily and weekly reports; changes made outside the registry |
//! | 4 | [`openapi`], [`served`], [`alerts`], [`autoscale`] | the OpenAPI document; what the gateways serve of each API; alert evaluation and notifications; the clusters' autoscale and sleep task |
//! | 3 | [`route`], [`audit`], [`gateway_status`], [`health`] | route descriptions; the audit log; the gateways' `/status`; per-API health from the gateways' metrics, and the recorder filling the history store |
//! | 2 | [`state`] | config and shared state |
//! | 1 | [`zk_store`], [`input`], [`console`], [`protos`] | ZooKeeper access with compare-and-set writes; checking what clients send; the built admin UI; proto compilation, descriptor analysis, reflection |
//! | 0 | [`error`], [`history`], [`egress`], [`listener`], [`client`], [`cadence`] | the one error type; the SQLite history store; outbound calls for authors; the accept loop; a small HTTP client of this API (used by the CLI); how often the background evaluation runs |
//!
//! The background tasks ([`alerts`], [`autoscale`], [`reports`], [`health::recorder`],
//! [`tree_watch`]) sit below [`api`], which shows what they found (docs/operations/alerts.md,
//! "Alerts", "The history store", "Reports"); they write the audit log through [`audit`].

#![recursion_limit = "1024"]

pub mod alerts;
pub mod api;
pub mod audit;
pub mod autoscale;
pub mod cadence;
pub mod client;
pub mod console;
pub mod egress;
pub mod error;
pub mod gateway_status;
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
pub mod served;
pub mod server;
pub mod state;
#[cfg(test)]
mod test_support;
pub mod tree_watch;
pub mod zk_store;

pub use server::{router, spawn, MAX_BODY_BYTES};
pub use state::{AppState, Config};
