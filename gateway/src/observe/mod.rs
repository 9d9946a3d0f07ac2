//! Observation: Prometheus metrics and the JSON access log.

pub mod access_log;
pub mod metrics;
