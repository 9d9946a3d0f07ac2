//! What the registry remembers of the gateways' traffic (docs/operations/history-and-reports.md, "The history
//! store"): per-API per-minute rollups (calls by status and code, a latency histogram with the
//! gateways' buckets, breaker openings, switch flips) and the alerts it evaluated, for 35 days
//! in a bounded SQLite file (`--history-db`).
//!
//! - [`store`]: the SQLite store and its records (sits with `zk_store` in the layers: it
//!   imports nothing of the crate, so [`crate::state`] can hold it).
//!
//! The task filling it from the gateways' scrapes is [`crate::health::recorder`], above
//! [`crate::state`].

pub mod store;

pub use store::{AlertBoard, AlertEvent, AlertNow, HistoryStore, Limits, Rollup};
