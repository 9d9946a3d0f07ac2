//! The gateway's Prometheus metrics, served as text on the admin listener's `/metrics`.
//!
//! Per-API latency is a histogram whose buckets are fine enough for TP50/90/99/999 with
//! `histogram_quantile()`; availability is `requests_total` by status class.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets in seconds: 250 µs to 30 s, dense where APIs live.
const LATENCY_BUCKETS: &[f64] = &[
    0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
];

/// Every metric the gateway exports.
pub struct Metrics {
    pub registry: Registry,
    /// Requests by plane (`live`/`sandbox`), API id (`-` when unrouted), status and code.
    pub requests: IntCounterVec,
    /// End-to-end latency by plane and API.
    pub latency: HistogramVec,
    /// Backend call latency by plane and API (only calls that reached a backend).
    pub upstream_latency: HistogramVec,
    /// Requests the gateway answered itself with an error code, by plane and code.
    pub rejections: IntCounterVec,
    /// The applied configuration's generation, by plane.
    pub config_generation: IntGaugeVec,
    /// Snapshot builds by plane and result (`applied`, `unchanged`).
    pub config_reloads: IntCounterVec,
    /// Documents refused in the latest build, by plane.
    pub config_rejected_documents: IntGaugeVec,
    /// Document refusals over time, by plane and kind.
    pub config_rejections: IntCounterVec,
    /// APIs loaded, by plane.
    pub apis_loaded: IntGaugeVec,
    /// Breaker state by plane and API: 0 closed, 1 open, 2 half-open.
    pub breaker_state: IntGaugeVec,
    /// Calls in flight by plane and API (bulkhead occupancy).
    pub bulkhead_in_flight: IntGaugeVec,
    /// Access log lines dropped because the writer could not keep up.
    pub access_log_dropped: IntCounter,
    /// Time to build and validate a snapshot.
    pub snapshot_build_seconds: Histogram,
    /// Whether the configuration source is connected (ZooKeeper), by plane.
    pub source_connected: IntGauge,
}

impl Metrics {
    /// Creates and registers every metric. Fails only on a programming error (a bad name).
    pub fn new() -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "portico_requests_total",
                "Requests by plane, API, status and code",
            ),
            &["plane", "api", "status", "code"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "portico_request_duration_seconds",
                "End-to-end request latency",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["plane", "api"],
        )?;
        let upstream_latency = HistogramVec::new(
            HistogramOpts::new("portico_upstream_duration_seconds", "Backend call latency")
                .buckets(LATENCY_BUCKETS.to_vec()),
            &["plane", "api"],
        )?;
        let rejections = IntCounterVec::new(
            Opts::new(
                "portico_rejections_total",
                "Requests answered by the gateway with an error code",
            ),
            &["plane", "code"],
        )?;
        let config_generation = IntGaugeVec::new(
            Opts::new(
                "portico_config_generation",
                "Generation of the applied configuration",
            ),
            &["plane"],
        )?;
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "portico_config_reloads_total",
                "Configuration snapshots built",
            ),
            &["plane", "result"],
        )?;
        let config_rejected_documents = IntGaugeVec::new(
            Opts::new(
                "portico_config_rejected_documents",
                "Documents refused in the latest snapshot build",
            ),
            &["plane"],
        )?;
        let config_rejections = IntCounterVec::new(
            Opts::new(
                "portico_config_document_rejections_total",
                "Document refusals, by kind",
            ),
            &["plane", "kind"],
        )?;
        let apis_loaded = IntGaugeVec::new(
            Opts::new("portico_apis_loaded", "APIs in the applied configuration"),
            &["plane"],
        )?;
        let breaker_state = IntGaugeVec::new(
            Opts::new(
                "portico_breaker_state",
                "Circuit breaker state: 0 closed, 1 open, 2 half-open",
            ),
            &["plane", "api"],
        )?;
        let bulkhead_in_flight = IntGaugeVec::new(
            Opts::new("portico_bulkhead_in_flight", "Backend calls in flight"),
            &["plane", "api"],
        )?;
        let access_log_dropped = IntCounter::new(
            "portico_access_log_dropped_total",
            "Access log lines dropped because the writer fell behind",
        )?;
        let snapshot_build_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "portico_snapshot_build_seconds",
                "Time to build and validate a snapshot",
            )
            .buckets(vec![0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]),
        )?;
        let source_connected = IntGauge::new(
            "portico_config_source_connected",
            "1 when the live configuration source is connected (always 1 for a directory)",
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(upstream_latency.clone()))?;
        registry.register(Box::new(rejections.clone()))?;
        registry.register(Box::new(config_generation.clone()))?;
        registry.register(Box::new(config_reloads.clone()))?;
        registry.register(Box::new(config_rejected_documents.clone()))?;
        registry.register(Box::new(config_rejections.clone()))?;
        registry.register(Box::new(apis_loaded.clone()))?;
        registry.register(Box::new(breaker_state.clone()))?;
        registry.register(Box::new(bulkhead_in_flight.clone()))?;
        registry.register(Box::new(access_log_dropped.clone()))?;
        registry.register(Box::new(snapshot_build_seconds.clone()))?;
        registry.register(Box::new(source_connected.clone()))?;
        Ok(Metrics {
            registry,
            requests,
            latency,
            upstream_latency,
            rejections,
            config_generation,
            config_reloads,
            config_rejected_documents,
            config_rejections,
            apis_loaded,
            breaker_state,
            bulkhead_in_flight,
            access_log_dropped,
            snapshot_build_seconds,
            source_connected,
        })
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_registered_metrics() {
        let m = Metrics::new().unwrap();
        m.requests
            .with_label_values(&["live", "order.get", "200", "OK"])
            .inc();
        m.latency
            .with_label_values(&["live", "order.get"])
            .observe(0.004);
        let text = m.render();
        assert!(text.contains(
            "portico_requests_total{api=\"order.get\",code=\"OK\",plane=\"live\",status=\"200\"} 1"
        ));
        assert!(text.contains("portico_request_duration_seconds_bucket"));
    }
}
