//! The admin listener: `/metrics` (Prometheus text), `/healthz`, `/readyz` (200 once a
//! snapshot is loaded), `/status` (JSON: node, config source and version, APIs, breakers,
//! the reload loop's health, the TLS certificate in use). `/status` is a
//! [`portico_control::status::GatewayStatus`], filled here from the parts each module reports
//! (its schema: `docs/schemas/gateway-status.schema.json`; docs/operations/gateway.md, "Admin
//! endpoints").

use crate::runtime::Plane;
use crate::tls::CertStore;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use portico_control::status as st;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    pub live: Arc<Plane>,
    pub sandbox: Option<Arc<Plane>>,
    pub started_at_ms: u64,
    pub listen: String,
    /// Set once this process holds every traffic listener's socket (live, sandbox, TLS;
    /// Pingora binds them, or receives them with `--upgrade`, after the admin listener is
    /// up) and each TLS listener has completed a handshake: `/readyz` waits for it too.
    pub listening: Arc<std::sync::atomic::AtomicBool>,
    /// The live plane's configuration source (its connection state goes into `/status`).
    pub source: Option<Arc<dyn portico_control::ConfigSource>>,
    /// The TLS listeners and their certificate, when TLS is configured.
    pub tls: Option<TlsStatus>,
}

/// What `/status` shows of TLS: the listeners and the certificate in use.
#[derive(Clone)]
pub struct TlsStatus {
    pub listen: Option<String>,
    pub sandbox_listen: Option<String>,
    pub certs: Arc<CertStore>,
}

impl TlsStatus {
    /// `/status`'s `tls`: the certificate part with the listeners.
    fn status(&self) -> st::TlsStatus {
        st::TlsStatus {
            listen: self.listen.clone(),
            sandbox_listen: self.sandbox_listen.clone(),
            ..self.certs.status()
        }
    }
}

/// The admin router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(state)
}

async fn metrics(State(s): State<AdminState>) -> Response {
    s.live.housekeeping();
    if let Some(sb) = &s.sandbox {
        sb.housekeeping();
    }
    let mut text = s.live.shared.metrics.render();
    text.push_str(&hot_metrics(&s.live));
    text.push_str(&fleet_metrics(&s));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn readyz(State(s): State<AdminState>) -> Response {
    if !s.listening.load(Ordering::Acquire) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "traffic listener not accepting yet\n",
        )
            .into_response()
    } else if let Some(why) = s.source.as_ref().and_then(|src| src.refused()) {
        // Serving the configuration it has, but cut off from changes: out of rotation
        // (docs/operations/zookeeper.md, "ZooKeeper credentials and ACLs").
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("configuration source refused access: {why}\n"),
        )
            .into_response()
    } else if s.live.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no configuration loaded yet\n",
        )
            .into_response()
    }
}

/// One plane's part of `/status` (the live plane's is the top level, the sandbox's `sandbox`).
fn plane_status(plane: &Plane) -> st::PlaneStatus {
    let rt = plane.current.load();
    let snap = &rt.snapshot;
    let applied_at = plane.applied_at_ms.load(Ordering::Relaxed);
    let now = portico_control::clock::now_ms();
    let invoke = rt
        .invoke
        .apis
        .iter()
        .map(|(id, a)| {
            let api = st::InvokeStatus {
                breaker: a.breaker.state().as_str().to_owned(),
                in_flight: u64::from(a.bulkhead.in_flight()),
                max_concurrent: u64::from(a.bulkhead.capacity()),
            };
            (id.clone(), api)
        })
        .collect();
    st::PlaneStatus {
        ready: plane.ready.load(Ordering::Acquire),
        config_source: plane.source.load().as_str().to_owned(),
        config_version: snap.version.clone(),
        applied_at_ms: applied_at,
        config_age_ms: if applied_at > 0 {
            now.saturating_sub(applied_at)
        } else {
            0
        },
        apis_loaded: snap.apis.len() as u64,
        apis: snap.apis.keys().cloned().collect(),
        apps_loaded: snap.apps.len() as u64,
        switches_degraded: snap
            .switches
            .iter()
            .filter(|(_, s)| s.degraded)
            .map(|(k, _)| k.clone())
            .collect(),
        rejected_documents: rejected_status(plane, snap),
        config_loop: reload_status(plane),
        invoke,
        hot_keys: hot_keys_status(&rt, now),
        clusters: Some(clusters_status(&rt)),
    }
}

/// `rejected_documents`: each refused document (`path`, `reason`, `kept_previous`) and, when
/// the previous version is kept, `kept`: what of it is served ([`kept_summary`]).
fn rejected_status(plane: &Plane, snap: &portico_control::Snapshot) -> Vec<st::RejectedDocument> {
    plane
        .rejected_documents()
        .into_iter()
        .map(|r| {
            let kept = r
                .kept_previous
                .then(|| snap.accepted.get(&r.path))
                .flatten()
                .map(|bytes| kept_summary(bytes));
            st::RejectedDocument {
                path: r.path,
                reason: r.reason,
                kept_previous: r.kept_previous,
                kept,
            }
        })
        .collect()
}

/// The fields of a kept document that tell which version it is and what it does: its
/// `updated_by`, `updated_at`, `version`, `degraded`, `active` when the document has them
/// (with the type the document kind that defines them gives them), and `digest`, the SHA-256
/// of its bytes.
fn kept_summary(bytes: &[u8]) -> st::KeptDocument {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(bytes));
    let doc = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(doc)) => doc,
        _ => serde_json::Map::new(),
    };
    let text = |field: &str| doc.get(field).and_then(|v| v.as_str()).map(str::to_owned);
    st::KeptDocument {
        updated_by: text("updated_by"),
        updated_at: text("updated_at"),
        version: doc.get("version").and_then(serde_json::Value::as_u64),
        degraded: doc.get("degraded").and_then(serde_json::Value::as_bool),
        active: text("active"),
        digest,
    }
}

// Hot APIs (docs/operations/caching.md, "Caching and hot keys").

/// `hot_keys`: per API with a hot-key policy, its hot keys (key, rate, bytes/s, since, and the
/// key-level switch `match` selecting exactly that key, or null).
fn hot_keys_status(
    rt: &crate::runtime::Runtime,
    now_ms: u64,
) -> BTreeMap<String, Vec<st::HotKeyStatus>> {
    let mut out = BTreeMap::new();
    for api in rt.edge.cache.apis() {
        if let Some(d) = &api.detector {
            let keys = d
                .hot_keys(now_ms)
                .into_iter()
                .map(|k| st::HotKeyStatus {
                    key: k.key,
                    rate: (k.rate * 10.0).round() / 10.0,
                    bytes_per_s: k.bytes_per_s.round(),
                    since_ms: k.since_ms,
                    switch_match: k.switch_match,
                })
                .collect();
            out.insert(api.id.clone(), keys);
        }
    }
    out
}

/// The cache and hot-key series, in Prometheus text: `portico_hot_keys{api}`,
/// `portico_hot_key_detections_total{api}`, `portico_cache_responses_total{api,result}`,
/// `portico_cache_entries{api}`, `portico_cache_body_bytes{api}`.
fn hot_metrics(plane: &Plane) -> String {
    use std::fmt::Write as _;
    let rt = plane.current.load();
    let now = portico_control::clock::now_ms();
    let mut apis: Vec<_> = rt.edge.cache.apis().collect();
    if apis.is_empty() {
        return String::new();
    }
    apis.sort_by(|a, b| a.id.cmp(&b.id));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# HELP portico_hot_keys Keys the hot-key detector finds hot now."
    );
    let _ = writeln!(t, "# TYPE portico_hot_keys gauge");
    for a in apis.iter().filter(|a| a.detector.is_some()) {
        let n = a.detector.as_ref().map_or(0, |d| d.hot_keys(now).len());
        let _ = writeln!(t, "portico_hot_keys{{api=\"{}\"}} {n}", a.id);
    }
    let _ = writeln!(
        t,
        "# HELP portico_hot_key_detections_total Times a key became hot."
    );
    let _ = writeln!(t, "# TYPE portico_hot_key_detections_total counter");
    for a in apis.iter() {
        if let Some(d) = &a.detector {
            let n = d.detections.load(Ordering::Relaxed);
            let _ = writeln!(
                t,
                "portico_hot_key_detections_total{{api=\"{}\"}} {n}",
                a.id
            );
        }
    }
    let _ = writeln!(t, "# HELP portico_cache_responses_total Answers of APIs with a cache or hot-key policy, by X-Portico-Cache.");
    let _ = writeln!(t, "# TYPE portico_cache_responses_total counter");
    for a in &apis {
        for (result, n) in [
            ("HIT", &a.hits),
            ("MISS", &a.misses),
            ("BYPASS", &a.bypasses),
        ] {
            let n = n.load(Ordering::Relaxed);
            let _ = writeln!(
                t,
                "portico_cache_responses_total{{api=\"{}\",result=\"{result}\"}} {n}",
                a.id
            );
        }
    }
    let _ = writeln!(
        t,
        "# HELP portico_cache_entries Entries held in the response cache."
    );
    let _ = writeln!(t, "# TYPE portico_cache_entries gauge");
    for a in &apis {
        let _ = writeln!(
            t,
            "portico_cache_entries{{api=\"{}\"}} {}",
            a.id,
            a.cache.len()
        );
    }
    let _ = writeln!(
        t,
        "# HELP portico_cache_body_bytes Body bytes held in the response cache."
    );
    let _ = writeln!(t, "# TYPE portico_cache_body_bytes gauge");
    for a in &apis {
        let _ = writeln!(
            t,
            "portico_cache_body_bytes{{api=\"{}\"}} {}",
            a.id,
            a.cache.body_bytes()
        );
    }
    t
}

// The fleet's dashboard series (docs/operations/monitoring.md, "Dashboards and scrape configuration").

/// The ZooKeeper session states `/status` reports (`zookeeper.state`).
const ZK_STATES: [&str; 5] = [
    "connecting",
    "connected",
    "disconnected",
    "expired",
    "unauthorized",
];

/// Series read from the applied snapshots and the configuration source at scrape time, in
/// Prometheus text: `portico_switch_degraded{plane,switch}` (1 for a switch that degrades
/// its API or key, 0 for one that does not) and, in ZooKeeper mode,
/// `portico_zookeeper_session_state{state}` (1 for the session's current state).
fn fleet_metrics(s: &AdminState) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# HELP portico_switch_degraded 1 while the switch degrades its API (or key), 0 otherwise."
    );
    let _ = writeln!(t, "# TYPE portico_switch_degraded gauge");
    for plane in std::iter::once(&s.live).chain(s.sandbox.as_ref()) {
        let rt = plane.current.load();
        for (key, switch) in &rt.snapshot.switches {
            let _ = writeln!(
                t,
                "portico_switch_degraded{{plane=\"{}\",switch=\"{}\"}} {}",
                plane.kind.as_str(),
                escape_label(key),
                u8::from(switch.degraded)
            );
        }
    }
    let state = s
        .source
        .as_ref()
        .and_then(|src| src.status().detail)
        .and_then(|d| d.get("state").and_then(|v| v.as_str()).map(str::to_owned));
    if let Some(state) = state {
        let _ = writeln!(
            t,
            "# HELP portico_zookeeper_session_state 1 for the ZooKeeper session's current state."
        );
        let _ = writeln!(t, "# TYPE portico_zookeeper_session_state gauge");
        for name in ZK_STATES {
            let _ = writeln!(
                t,
                "portico_zookeeper_session_state{{state=\"{name}\"}} {}",
                u8::from(state == name)
            );
        }
    }
    t
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `clusters.<name>`: the set serving, why, and each endpoint's health and load score
/// (docs/operations/clusters.md, "Clusters: balancing, health, failover, sleep").
fn clusters_status(rt: &crate::runtime::Runtime) -> BTreeMap<String, st::ClusterStatus> {
    rt.invoke
        .clusters
        .iter()
        .map(|(name, c)| (name.clone(), c.routing.status()))
        .collect()
}

/// The reload loop's health: running or not, restarts, and the last restart's reason.
fn reload_status(plane: &Plane) -> st::ConfigLoopStatus {
    let r = &plane.reload;
    st::ConfigLoopStatus {
        running: r.running.load(Ordering::Acquire),
        restarts: r.restarts.load(Ordering::Relaxed),
        last_restart: r.last_restart.load_full().map(|last| st::LastRestart {
            at_ms: last.0,
            reason: last.1.clone(),
        }),
    }
}

/// The whole `/status` document.
async fn gateway_status(s: &AdminState) -> st::GatewayStatus {
    // The fleet (docs/operations/cluster.md, "Running a cluster").
    let fleet = &s.live.shared.fleet;
    st::GatewayStatus {
        node_id: s.live.shared.node_id.clone(),
        listen: s.listen.clone(),
        started_at_ms: s.started_at_ms,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        live: plane_status(&s.live),
        sandbox: s.sandbox.as_deref().map(plane_status),
        // ZooKeeper mode: the source's detail is its `ZkStatus`.
        zookeeper: s
            .source
            .as_ref()
            .and_then(|src| src.status().detail)
            .and_then(|detail| serde_json::from_value(detail).ok()),
        tls: s.tls.as_ref().map(TlsStatus::status),
        cluster_members: fleet.members(),
        redis: fleet.redis_status(),
        // Notifications (docs/operations/notifications.md, "Notifications").
        notify: Some(s.live.shared.notify.status().await),
    }
}

/// `GET /status`: the document as a [`serde_json::Value`], so that every object's keys are in
/// sorted order, as they always were.
async fn status(State(s): State<AdminState>) -> Json<serde_json::Value> {
    Json(gateway_status(&s).await.to_value())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::plane;

    #[test]
    fn a_kept_document_is_described_by_its_version_fields_and_digest() {
        let kept = kept_summary(br#"{"degraded":true,"updated_by":"sre","reason":"x"}"#);
        assert_eq!(kept.degraded, Some(true));
        assert_eq!(kept.updated_by.as_deref(), Some("sre"));
        assert_eq!(kept.digest.len(), 64);
        let json = serde_json::to_value(&kept).unwrap();
        assert!(json.get("reason").is_none() && json.get("version").is_none());
        let kept = kept_summary(br#"{"version":3,"active":"standby"}"#);
        assert_eq!(
            (kept.version, kept.active.as_deref()),
            (Some(3), Some("standby"))
        );
        assert_eq!(
            serde_json::to_value(kept_summary(b"not json"))
                .unwrap()
                .as_object()
                .map(|o| o.len()),
            Some(1)
        );
    }
    use portico_control::Rejection;

    #[test]
    fn status_reports_a_failed_build_and_the_reload_loop() {
        let plane = plane();
        let status = serde_json::to_value(plane_status(&plane)).unwrap();
        assert_eq!(status["ready"], false);
        assert_eq!(status["rejected_documents"], serde_json::json!([]));
        assert_eq!(
            status["config_loop"],
            serde_json::json!({"running": false, "restarts": 0, "last_restart": null})
        );
        plane.reload.build_failure.store(Some(Arc::new(Rejection {
            path: "*".to_owned(),
            reason: "building the configuration failed".to_owned(),
            kept_previous: true,
            internal: true,
        })));
        plane.reload.running.store(true, Ordering::Release);
        plane.reload.restarts.store(1, Ordering::Relaxed);
        plane
            .reload
            .last_restart
            .store(Some(Arc::new((42, "it panicked: x".to_owned()))));
        let status = serde_json::to_value(plane_status(&plane)).unwrap();
        assert_eq!(status["rejected_documents"][0]["path"], "*");
        assert_eq!(status["rejected_documents"][0]["kept_previous"], true);
        assert_eq!(
            status["rejected_documents"][0]["kept"],
            serde_json::Value::Null
        );
        assert_eq!(
            status["config_loop"],
            serde_json::json!({
                "running": true,
                "restarts": 1,
                "last_restart": {"at_ms": 42, "reason": "it panicked: x"},
            })
        );
    }
}
