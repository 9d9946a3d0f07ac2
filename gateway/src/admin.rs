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
    /// Set once the traffic listener accepts connections (Pingora binds it after the admin
    /// listener is up): `/readyz` waits for it too.
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
    let text = s.live.shared.metrics.render();
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
        "rejected_documents": plane.rejected_documents(),
        "config_loop": reload_status(plane),
        "invoke": breakers,
        "clusters": clusters_status(&rt),
    })
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
    }
    Json(body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::plane;
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
            status["config_loop"],
            serde_json::json!({
                "running": true,
                "restarts": 1,
                "last_restart": {"at_ms": 42, "reason": "it panicked: x"},
            })
        );
    }
}
