//! The admin listener: `/metrics` (Prometheus text), `/healthz`, `/readyz` (200 once a
//! snapshot is loaded), `/status` (JSON: node, config source and version, APIs, breakers,
//! the reload loop's health, the TLS certificate in use). docs/OPERATIONS.md ("Admin
//! endpoints") lists the fields.

use crate::runtime::Plane;
use crate::tls::CertStore;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
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
    fn to_json(&self) -> serde_json::Value {
        let mut v = self.certs.status();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("listen".into(), self.listen.clone().into());
            obj.insert("sandbox_listen".into(), self.sandbox_listen.clone().into());
        }
        v
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
        // (docs/OPERATIONS.md, "ZooKeeper credentials and ACLs").
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

fn plane_status(plane: &Plane) -> serde_json::Value {
    let rt = plane.current.load();
    let snap = &rt.snapshot;
    let applied_at = plane.applied_at_ms.load(Ordering::Relaxed);
    let now = portico_control::clock::now_ms();
    let breakers: serde_json::Map<String, serde_json::Value> = rt
        .invoke
        .apis
        .iter()
        .map(|(id, a)| {
            (
                id.clone(),
                serde_json::json!({
                    "breaker": a.breaker.state().as_str(),
                    "in_flight": a.bulkhead.in_flight(),
                    "max_concurrent": a.bulkhead.capacity(),
                }),
            )
        })
        .collect();
    serde_json::json!({
        "ready": plane.ready.load(Ordering::Acquire),
        "config_source": plane.source.load().as_str(),
        "config_version": snap.version,
        "applied_at_ms": applied_at,
        "config_age_ms": if applied_at > 0 { now.saturating_sub(applied_at) } else { 0 },
        "apis_loaded": snap.apis.len(),
        "apis": snap.apis.keys().collect::<Vec<_>>(),
        "apps_loaded": snap.apps.len(),
        "switches_degraded": snap.switches.iter().filter(|(_, s)| s.degraded).map(|(k, _)| k).collect::<Vec<_>>(),
        "rejected_documents": rejected_status(plane, snap),
        "config_loop": reload_status(plane),
        "invoke": breakers,
        "hot_keys": hot_keys_status(&rt, now),
        "clusters": clusters_status(&rt),
    })
}

/// `rejected_documents`: each refused document (`path`, `reason`, `kept_previous`) and, when
/// the previous version is kept, `kept`: what of it is served (docs/OPERATIONS.md, "Admin
/// endpoints": its `updated_by`, `updated_at`, `version`, `degraded`, `active` when the
/// document has them, and `digest`, the SHA-256 of its bytes).
fn rejected_status(plane: &Plane, snap: &portico_control::Snapshot) -> serde_json::Value {
    plane
        .rejected_documents()
        .into_iter()
        .map(|r| {
            let kept = r
                .kept_previous
                .then(|| snap.accepted.get(&r.path))
                .flatten()
                .map(|bytes| kept_summary(bytes));
            serde_json::json!({
                "path": r.path,
                "reason": r.reason,
                "kept_previous": r.kept_previous,
                "kept": kept,
            })
        })
        .collect::<Vec<_>>()
        .into()
}

/// The fields of a kept document that tell which version it is and what it does.
fn kept_summary(bytes: &[u8]) -> serde_json::Value {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(bytes));
    let mut out = serde_json::Map::new();
    if let Ok(serde_json::Value::Object(doc)) = serde_json::from_slice::<serde_json::Value>(bytes) {
        for field in ["updated_by", "updated_at", "version", "degraded", "active"] {
            if let Some(v) = doc.get(field) {
                out.insert(field.to_owned(), v.clone());
            }
        }
    }
    out.insert("digest".to_owned(), digest.into());
    out.into()
}

// Hot APIs (docs/OPERATIONS.md, "Caching and hot keys").

/// `hot_keys`: per API with a hot-key policy, its hot keys (key, rate, bytes/s, since, and the
/// key-level switch `match` selecting exactly that key, or null).
fn hot_keys_status(rt: &crate::runtime::Runtime, now_ms: u64) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for api in rt.edge.cache.apis() {
        if let Some(d) = &api.detector {
            let keys: Vec<serde_json::Value> = d
                .hot_keys(now_ms)
                .into_iter()
                .map(|k| {
                    serde_json::json!({
                        "key": k.key,
                        "rate": (k.rate * 10.0).round() / 10.0,
                        "bytes_per_s": k.bytes_per_s.round(),
                        "since_ms": k.since_ms,
                        "match": k.switch_match,
                    })
                })
                .collect();
            out.insert(api.id.clone(), keys.into());
        }
    }
    out.into()
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

// The fleet's dashboard series (docs/OPERATIONS.md, "Dashboards and scrape configuration").

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
/// (docs/OPERATIONS.md, "Clusters: balancing, health, failover, sleep").
fn clusters_status(rt: &crate::runtime::Runtime) -> serde_json::Value {
    rt.invoke
        .clusters
        .iter()
        .map(|(name, c)| (name.clone(), c.routing.status()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The reload loop's health: running or not, restarts, and the last restart's reason.
fn reload_status(plane: &Plane) -> serde_json::Value {
    let r = &plane.reload;
    let last = r
        .last_restart
        .load_full()
        .map(|last| serde_json::json!({"at_ms": last.0, "reason": last.1}));
    serde_json::json!({
        "running": r.running.load(Ordering::Acquire),
        "restarts": r.restarts.load(Ordering::Relaxed),
        "last_restart": last,
    })
}

async fn status(State(s): State<AdminState>) -> Json<serde_json::Value> {
    let mut body = serde_json::json!({
        "node_id": s.live.shared.node_id,
        "listen": s.listen,
        "started_at_ms": s.started_at_ms,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let live = plane_status(&s.live);
    if let (Some(obj), Some(l)) = (body.as_object_mut(), live.as_object()) {
        for (k, v) in l {
            obj.insert(k.clone(), v.clone());
        }
        if let Some(sb) = &s.sandbox {
            obj.insert("sandbox".into(), plane_status(sb));
        }
        if let Some(detail) = s.source.as_ref().and_then(|src| src.status().detail) {
            obj.insert("zookeeper".into(), detail);
        }
        if let Some(tls) = &s.tls {
            obj.insert("tls".into(), tls.to_json());
        }
        // The fleet (docs/OPERATIONS.md, "Running a cluster").
        let fleet = &s.live.shared.fleet;
        obj.insert("cluster_members".into(), fleet.members().into());
        if let Some(redis) = fleet.redis_status() {
            obj.insert("redis".into(), redis);
        }
        // Notifications (docs/OPERATIONS.md, "Notifications").
        obj.insert("notify".into(), s.live.shared.notify.status().await);
    }
    Json(body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::plane;

    #[test]
    fn a_kept_document_is_described_by_its_version_fields_and_digest() {
        let kept = kept_summary(br#"{"degraded":true,"updated_by":"sre","reason":"x"}"#);
        assert_eq!(kept["degraded"], true);
        assert_eq!(kept["updated_by"], "sre");
        assert!(kept.get("reason").is_none());
        assert_eq!(kept["digest"].as_str().map(str::len), Some(64));
        assert_eq!(
            kept_summary(b"not json").as_object().map(|o| o.len()),
            Some(1)
        );
    }
    use portico_control::Rejection;

    #[test]
    fn status_reports_a_failed_build_and_the_reload_loop() {
        let plane = plane();
        let status = plane_status(&plane);
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
        let status = plane_status(&plane);
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
