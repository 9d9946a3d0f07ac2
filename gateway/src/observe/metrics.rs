//! The gateway's Prometheus metrics, served as text on the admin listener's `/metrics`.
//!
//! Per-API latency is a histogram whose buckets are fine enough for TP50/90/99/999 with
//! `histogram_quantile()`; availability is `requests_total` by status class.

use prometheus::core::Collector;
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
    /// Snapshot builds by plane and result (`applied`, `unchanged`, `failed`: the build
    /// panicked and the previous configuration is kept).
    pub config_reloads: IntCounterVec,
    /// Documents refused in the latest build, by plane (a failed build counts as one).
    pub config_rejected_documents: IntGaugeVec,
    /// Document refusals over time, by plane and kind (`snapshot`: a whole build failed).
    pub config_rejections: IntCounterVec,
    /// Restarts of a plane's reload loop after it panicked or its source ended, by plane.
    pub config_loop_restarts: IntCounterVec,
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
    /// Nonces in the replay cache, by plane.
    pub replay_nonces: IntGaugeVec,
    /// Bytes the replay cache's tables hold, by plane.
    pub replay_bytes: IntGaugeVec,
    /// Signed calls refused because their app's share of the replay cache was full.
    pub replay_full: IntCounterVec,
    /// Open connections by traffic listener (`portico-live`, `portico-sandbox`).
    pub connections_open: IntGaugeVec,
    /// Connections refused by listener because it was at `--max-connections`.
    pub connections_refused: IntCounterVec,
    /// Connections refused by listener because their client address was at
    /// `--max-connections-per-address`.
    pub connections_refused_per_address: IntCounterVec,
    /// TLS handshakes that did not complete, by listener and reason (`timeout`: not within
    /// `--tls-handshake-timeout-ms`; `error`).
    pub tls_handshake_failures: IntCounterVec,
    /// HTTP/2 connections the gateway closed with a GOAWAY, by listener and reason (`idle`,
    /// `reset_budget`, `malformed`).
    pub h2_goaways: IntCounterVec,
    /// Smart routing (docs/operations/clusters.md, "Clusters: balancing, health, failover, sleep").
    pub routing: RoutingMetrics,
}

/// The clusters' routing state, refreshed by the planes' housekeeping (and each scrape).
pub struct RoutingMetrics {
    /// 1 for the set serving each cluster, 0 for the other, by plane, cluster and set.
    pub active_set: IntGaugeVec,
    /// 1 when an endpoint is available (probes healthy, not ejected), by plane, cluster
    /// and endpoint.
    pub endpoint_healthy: IntGaugeVec,
    /// Passive ejections, by plane, cluster and endpoint.
    pub ejections: IntCounterVec,
    /// Active probes, by plane, cluster, endpoint and result (`ok`, `failed`).
    pub probes: IntCounterVec,
}

const CLUSTER_ACTIVE_SET: Spec = Spec {
    name: "portico_cluster_active_set",
    help: "1 for the endpoint set (primary, standby) serving the cluster",
    labels: &["plane", "cluster", "set"],
};
const ENDPOINT_HEALTHY: Spec = Spec {
    name: "portico_endpoint_healthy",
    help: "1 when the endpoint is available: health checks pass and it is not ejected",
    labels: &["plane", "cluster", "endpoint"],
};
const ENDPOINT_EJECTIONS: Spec = Spec {
    name: "portico_endpoint_ejections_total",
    help: "Passive (outlier) ejections of the endpoint",
    labels: &["plane", "cluster", "endpoint"],
};
const ENDPOINT_PROBES: Spec = Spec {
    name: "portico_endpoint_probes_total",
    help: "Active health probes of the endpoint, by result",
    labels: &["plane", "cluster", "endpoint", "result"],
};

/// A metric's name, help text and label names.
struct Spec {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

const PLANE: &[&str] = &["plane"];
const PLANE_API: &[&str] = &["plane", "api"];

const REQUESTS: Spec = Spec {
    name: "portico_requests_total",
    help: "Requests by plane, API, status and code",
    labels: &["plane", "api", "status", "code"],
};
const REQUEST_DURATION: Spec = Spec {
    name: "portico_request_duration_seconds",
    help: "End-to-end request latency",
    labels: PLANE_API,
};
const UPSTREAM_DURATION: Spec = Spec {
    name: "portico_upstream_duration_seconds",
    help: "Backend call latency",
    labels: PLANE_API,
};
const REJECTIONS: Spec = Spec {
    name: "portico_rejections_total",
    help: "Requests answered by the gateway with an error code",
    labels: &["plane", "code"],
};
const CONFIG_GENERATION: Spec = Spec {
    name: "portico_config_generation",
    help: "Generation of the applied configuration",
    labels: PLANE,
};
const CONFIG_RELOADS: Spec = Spec {
    name: "portico_config_reloads_total",
    help: "Configuration snapshots built",
    labels: &["plane", "result"],
};
const CONFIG_REJECTED_DOCUMENTS: Spec = Spec {
    name: "portico_config_rejected_documents",
    help: "Documents refused in the latest snapshot build",
    labels: PLANE,
};
const CONFIG_REJECTIONS: Spec = Spec {
    name: "portico_config_document_rejections_total",
    help: "Document refusals, by kind",
    labels: &["plane", "kind"],
};
const CONFIG_LOOP_RESTARTS: Spec = Spec {
    name: "portico_config_loop_restarts_total",
    help: "Restarts of the configuration reload loop after it panicked or its source ended",
    labels: PLANE,
};
const APIS_LOADED: Spec = Spec {
    name: "portico_apis_loaded",
    help: "APIs in the applied configuration",
    labels: PLANE,
};
const BREAKER_STATE: Spec = Spec {
    name: "portico_breaker_state",
    help: "Circuit breaker state: 0 closed, 1 open, 2 half-open",
    labels: PLANE_API,
};
const BULKHEAD_IN_FLIGHT: Spec = Spec {
    name: "portico_bulkhead_in_flight",
    help: "Backend calls in flight",
    labels: PLANE_API,
};
const ACCESS_LOG_DROPPED: Spec = Spec {
    name: "portico_access_log_dropped_total",
    help: "Access log lines dropped because the writer fell behind",
    labels: &[],
};
const SNAPSHOT_BUILD: Spec = Spec {
    name: "portico_snapshot_build_seconds",
    help: "Time to build and validate a snapshot",
    labels: &[],
};
const SOURCE_CONNECTED: Spec = Spec {
    name: "portico_config_source_connected",
    help: "1 when the live configuration source is connected (always 1 for a directory)",
    labels: &[],
};

const REPLAY_NONCES: Spec = Spec {
    name: "portico_replay_cache_nonces",
    help: "Nonces remembered by the replay cache",
    labels: PLANE,
};
const REPLAY_BYTES: Spec = Spec {
    name: "portico_replay_cache_bytes",
    help: "Bytes held by the replay cache's tables",
    labels: PLANE,
};
const REPLAY_FULL: Spec = Spec {
    name: "portico_replay_cache_full_total",
    help: "Signed calls refused (429) because their app's share of the replay cache was full",
    labels: PLANE,
};
const CONNECTIONS_OPEN: Spec = Spec {
    name: "portico_connections_open",
    help: "Open connections, by traffic listener",
    labels: &["listener"],
};
const CONNECTIONS_REFUSED: Spec = Spec {
    name: "portico_connections_refused_total",
    help: "Connections refused because the listener was at its connection limit",
    labels: &["listener"],
};
const CONNECTIONS_REFUSED_PER_ADDRESS: Spec = Spec {
    name: "portico_connections_refused_per_address_total",
    help: "Connections refused because their client address was at its connection limit",
    labels: &["listener"],
};
const TLS_HANDSHAKE_FAILURES: Spec = Spec {
    name: "portico_tls_handshake_failures_total",
    help: "TLS handshakes not completed, by listener and reason (timeout, error)",
    labels: &["listener", "reason"],
};
const H2_GOAWAYS: Spec = Spec {
    name: "portico_h2_goaway_total",
    help: "HTTP/2 connections closed by the gateway with a GOAWAY, by listener and reason (idle, reset_budget, malformed)",
    labels: &["listener", "reason"],
};

/// Snapshot build time buckets in seconds: 100 µs to 5 s.
const BUILD_BUCKETS: &[f64] = &[0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

/// Registers `metric` in `registry`.
fn registered<M>(registry: &Registry, metric: prometheus::Result<M>) -> prometheus::Result<M>
where
    M: prometheus::core::Collector + Clone + 'static,
{
    let metric = metric?;
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

fn counters(r: &Registry, s: &Spec) -> prometheus::Result<IntCounterVec> {
    registered(r, IntCounterVec::new(Opts::new(s.name, s.help), s.labels))
}

fn gauges(r: &Registry, s: &Spec) -> prometheus::Result<IntGaugeVec> {
    registered(r, IntGaugeVec::new(Opts::new(s.name, s.help), s.labels))
}

fn histograms(r: &Registry, s: &Spec, buckets: &[f64]) -> prometheus::Result<HistogramVec> {
    let opts = HistogramOpts::new(s.name, s.help).buckets(buckets.to_vec());
    registered(r, HistogramVec::new(opts, s.labels))
}

impl Metrics {
    /// Creates and registers every metric. Fails only on a programming error (a bad name).
    pub fn new() -> prometheus::Result<Metrics> {
        let r = Registry::new();
        let build = HistogramOpts::new(SNAPSHOT_BUILD.name, SNAPSHOT_BUILD.help)
            .buckets(BUILD_BUCKETS.to_vec());
        Ok(Metrics {
            requests: counters(&r, &REQUESTS)?,
            latency: histograms(&r, &REQUEST_DURATION, LATENCY_BUCKETS)?,
            upstream_latency: histograms(&r, &UPSTREAM_DURATION, LATENCY_BUCKETS)?,
            rejections: counters(&r, &REJECTIONS)?,
            config_generation: gauges(&r, &CONFIG_GENERATION)?,
            config_reloads: counters(&r, &CONFIG_RELOADS)?,
            config_rejected_documents: gauges(&r, &CONFIG_REJECTED_DOCUMENTS)?,
            config_rejections: counters(&r, &CONFIG_REJECTIONS)?,
            config_loop_restarts: counters(&r, &CONFIG_LOOP_RESTARTS)?,
            apis_loaded: gauges(&r, &APIS_LOADED)?,
            breaker_state: gauges(&r, &BREAKER_STATE)?,
            bulkhead_in_flight: gauges(&r, &BULKHEAD_IN_FLIGHT)?,
            access_log_dropped: registered(
                &r,
                IntCounter::new(ACCESS_LOG_DROPPED.name, ACCESS_LOG_DROPPED.help),
            )?,
            snapshot_build_seconds: registered(&r, Histogram::with_opts(build))?,
            source_connected: registered(
                &r,
                IntGauge::new(SOURCE_CONNECTED.name, SOURCE_CONNECTED.help),
            )?,
            replay_nonces: gauges(&r, &REPLAY_NONCES)?,
            replay_bytes: gauges(&r, &REPLAY_BYTES)?,
            replay_full: counters(&r, &REPLAY_FULL)?,
            connections_open: gauges(&r, &CONNECTIONS_OPEN)?,
            connections_refused: counters(&r, &CONNECTIONS_REFUSED)?,
            connections_refused_per_address: counters(&r, &CONNECTIONS_REFUSED_PER_ADDRESS)?,
            tls_handshake_failures: counters(&r, &TLS_HANDSHAKE_FAILURES)?,
            h2_goaways: counters(&r, &H2_GOAWAYS)?,
            routing: RoutingMetrics {
                active_set: gauges(&r, &CLUSTER_ACTIVE_SET)?,
                endpoint_healthy: gauges(&r, &ENDPOINT_HEALTHY)?,
                ejections: counters(&r, &ENDPOINT_EJECTIONS)?,
                probes: counters(&r, &ENDPOINT_PROBES)?,
            },
            registry: r,
        })
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "encoding metrics");
        }
        let mut text = String::from_utf8(buf).unwrap_or_default();
        // Kept by the egress policy itself (portico_control::egress), shared with the registry.
        text.push_str(&format!(
            "# HELP portico_egress_refused_total Outbound calls made for config authors (wake_url, health checks, callbacks) that the egress policy refused.\n\
             # TYPE portico_egress_refused_total counter\nportico_egress_refused_total {}\n",
            portico_control::egress::refused_total()
        ));
        text
    }
}

/// An API's metric series, resolved once per snapshot so the request path does not hash
/// label values for the common case.
#[derive(Debug)]
pub struct ApiMetrics {
    /// `portico_requests_total{plane, api, status="200", code="OK"}`.
    pub ok: IntCounter,
    pub latency: Histogram,
    pub upstream_latency: Histogram,
}

impl ApiMetrics {
    /// The series of API `api` on `plane`.
    pub fn new(metrics: &Metrics, plane: &str, api: &str) -> ApiMetrics {
        ApiMetrics {
            ok: metrics
                .requests
                .with_label_values(&[plane, api, "200", "OK"]),
            latency: metrics.latency.with_label_values(&[plane, api]),
            upstream_latency: metrics.upstream_latency.with_label_values(&[plane, api]),
        }
    }

    /// Drops every series of an API no longer configured on `plane` (requests by status and
    /// code, latencies, breaker state, bulkhead occupancy), so `/metrics` stops reporting an
    /// API that is gone. Runs at reload, never per request.
    pub fn forget(metrics: &Metrics, plane: &str, api: &str) {
        let _ = metrics.breaker_state.remove_label_values(&[plane, api]);
        let _ = metrics
            .bulkhead_in_flight
            .remove_label_values(&[plane, api]);
        let _ = metrics.latency.remove_label_values(&[plane, api]);
        let _ = metrics.upstream_latency.remove_label_values(&[plane, api]);
        // `requests_total` has a series per status and code seen: find them.
        let family = metrics
            .requests
            .collect()
            .into_iter()
            .flat_map(|f| f.get_metric().to_vec());
        for metric in family {
            let label = |name: &str| {
                metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            };
            if label("plane") == plane && label("api") == api {
                let (status, code) = (label("status"), label("code"));
                let _ = metrics.requests.remove_label_values(&[
                    plane,
                    api,
                    status.as_str(),
                    code.as_str(),
                ]);
            }
        }
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

    #[test]
    fn forgetting_an_api_drops_all_its_series_on_that_plane_only() {
        let m = Metrics::new().unwrap();
        for plane in ["live", "sandbox"] {
            let api = ApiMetrics::new(&m, plane, "gone");
            api.ok.inc();
            api.latency.observe(0.01);
            api.upstream_latency.observe(0.005);
            m.requests
                .with_label_values(&[plane, "gone", "429", "RATE_LIMITED"])
                .inc();
            m.breaker_state.with_label_values(&[plane, "gone"]).set(1);
            m.bulkhead_in_flight
                .with_label_values(&[plane, "gone"])
                .set(2);
        }
        ApiMetrics::new(&m, "live", "kept").ok.inc();
        ApiMetrics::forget(&m, "live", "gone");
        let text = m.render();
        let live_gone = text
            .lines()
            .filter(|l| l.contains("api=\"gone\"") && l.contains("plane=\"live\""))
            .collect::<Vec<_>>();
        assert!(live_gone.is_empty(), "{live_gone:?}");
        assert!(text.contains(
            "portico_requests_total{api=\"gone\",code=\"RATE_LIMITED\",plane=\"sandbox\",status=\"429\"} 1"
        ));
        assert!(text.contains("portico_breaker_state{api=\"gone\",plane=\"sandbox\"} 1"));
        assert!(text.contains(
            "portico_requests_total{api=\"kept\",code=\"OK\",plane=\"live\",status=\"200\"} 1"
        ));
    }
}
