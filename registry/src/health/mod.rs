//! Per-API health, aggregated from the live gateways (served at `GET /api/v1/health/apis` by
//! [`crate::api::health`]).
//!
//! - [`scraper`]: the monitor task — lists the live nodes, scrapes their `/metrics` every
//!   [`scraper::INTERVAL`] while someone asks, keeps a short ring of samples;
//! - [`prometheus`]: reads the text exposition format into per-API figures;
//! - [`quantiles`]: counter and histogram deltas between samples, quantiles as Prometheus'
//!   `histogram_quantile` computes them;
//! - [`report`]: the report built from the samples;
//! - [`recorder`]: the task turning the scrapes into rollups in the history store
//!   ([`crate::history`], below [`crate::state`], which holds it).

pub mod prometheus;
pub mod quantiles;
pub mod recorder;
pub mod report;
pub mod scraper;
