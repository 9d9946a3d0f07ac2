//! The gateway's one snapshot: everything a request reads, built and validated fully before
//! it is swapped in behind a single `ArcSwap` (docs/ARCHITECTURE.md, "One snapshot").
//!
//! A [`Runtime`] is composed of the edge stages ([`Stages`]), the invoke tier's state
//! ([`InvokeState`]) and the per-API metric series. Each part carries what must outlive a
//! reload by key, when its definition is unchanged: the edge through the plane's
//! [`Carried`] (replay cache, rate limiters per rule), the invoke tier from the previous
//! runtime (bulkheads, breakers, balancers and resolved endpoints, descriptor pools; see
//! `invoke/state.rs`), and the metric series per API. Process-wide services (the HTTP pool
//! and gRPC channels, metrics, the access log) live in [`Shared`].

use crate::edge::rate_limit::RateLimiters;
use crate::edge::replay::ReplayCache;
use crate::edge::{Carried, Stages};
use crate::fleet::Fleet;
use crate::invoke::breaker::{Clock, SystemClock};
use crate::invoke::{Clients, InvokeState};
use crate::observe::access_log::AccessLog;
use crate::observe::metrics::{ApiMetrics, Metrics};
use arc_swap::{ArcSwap, ArcSwapOption};
use portico_control::{Rejection, Snapshot};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Which tree a plane serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaneKind {
    /// Published APIs, for merchants.
    Live,
    /// Drafts (`sandbox/`), for backend teams trying their APIs.
    Sandbox,
}

impl PlaneKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PlaneKind::Live => "live",
            PlaneKind::Sandbox => "sandbox",
        }
    }
}

/// Process-wide services shared by every plane.
pub struct Shared {
    pub metrics: Metrics,
    pub access_log: AccessLog,
    /// The backend clients: the HTTP connection pool and the gRPC channels.
    pub clients: Clients,
    /// The breakers' monotonic clock.
    pub clock: Arc<dyn Clock>,
    pub node_id: String,
    /// Request body limit when an API sets none.
    pub default_max_body: u64,
    /// The replay cache's memory bound per app, in bytes (`--replay-cache-mib`).
    pub replay_bytes_per_app: usize,
    /// Unix ms when this process started: without Redis, calls signed earlier are refused
    /// (their nonces died with the process that may have accepted them).
    pub started_ms: u64,
    /// The longest a single write of an answer to a merchant may take (zero: unbounded).
    pub write_timeout: std::time::Duration,
    /// The other gateways: membership and Redis (cluster-scope limits, nonces).
    pub fleet: Arc<Fleet>,
    /// Notifications (the live plane's streams and acks, the internal listener).
    pub notify: Arc<crate::notify::Notifier>,
}

/// Everything one request reads, from one snapshot.
pub struct Runtime {
    pub snapshot: Arc<Snapshot>,
    pub edge: Stages,
    pub invoke: InvokeState,
    /// Per API id: its metric series.
    pub metrics: HashMap<String, Arc<ApiMetrics>>,
}

impl Runtime {
    /// Builds every stage, the invoke state and the metric series from `snapshot`, reusing
    /// state from `previous` (and the plane's `carried` edge state) where the definition is
    /// unchanged. Runs on the reload task, never per request.
    pub fn build(
        snapshot: Arc<Snapshot>,
        previous: Option<&Runtime>,
        carried: &Carried,
        shared: &Shared,
        kind: PlaneKind,
    ) -> Runtime {
        let edge = Stages::build(&snapshot, carried);
        let invoke = InvokeState::build(&snapshot, previous.map(|p| &p.invoke), &shared.clock);
        let metrics = snapshot
            .apis
            .keys()
            .map(|id| {
                let series = previous
                    .and_then(|p| p.metrics.get(id))
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(ApiMetrics::new(&shared.metrics, kind.as_str(), id))
                    });
                (id.clone(), series)
            })
            .collect();
        Runtime {
            snapshot,
            edge,
            invoke,
            metrics,
        }
    }
}

/// The state of a plane's reload loop, for `/status` (see `reload.rs`).
#[derive(Default)]
pub struct ReloadStatus {
    /// A tree whose snapshot could not be built (the build panicked): reported among the
    /// rejected documents while the previous configuration keeps being served. Cleared by
    /// the next snapshot applied.
    pub build_failure: ArcSwapOption<Rejection>,
    /// Whether the reload loop is running (false before it starts and while it waits to be
    /// restarted).
    pub running: AtomicBool,
    /// Times the reload loop was restarted after it panicked or its source ended.
    pub restarts: AtomicU64,
    /// Why the loop was last restarted, and when (Unix ms).
    pub last_restart: ArcSwapOption<(u64, String)>,
}

/// One served tree: the current runtime behind one `ArcSwap`, and what it carries across
/// reloads.
pub struct Plane {
    pub kind: PlaneKind,
    pub current: ArcSwap<Runtime>,
    pub carried: Carried,
    pub shared: Arc<Shared>,
    /// The sandbox plane's view of the live one: a sandbox app must not sign with its live
    /// secret ([`Plane::check_plane_secret`]).
    pub live: std::sync::OnceLock<std::sync::Weak<Plane>>,
    /// Set once a real configuration has been applied (for `/readyz`).
    pub ready: AtomicBool,
    /// Describes the live source (`dir:...`, `zk:...`, `snapshot:...`).
    pub source: ArcSwap<String>,
    /// Unix ms when the applied config was built.
    pub applied_at_ms: AtomicU64,
    pub reload: ReloadStatus,
    /// Runtimes replaced by [`Plane::apply`] that requests in flight may still hold: they
    /// are dropped here, off the traffic threads, once nothing else holds them
    /// ([`Plane::release_retired`]).
    retired: std::sync::Mutex<Vec<Arc<Runtime>>>,
}

impl Plane {
    /// A plane serving an empty configuration until the first snapshot arrives.
    pub fn new(kind: PlaneKind, shared: Arc<Shared>) -> Plane {
        let carried = Carried {
            replay: Arc::new(
                ReplayCache::with_bound(shared.replay_bytes_per_app)
                    .shared_across_nodes(shared.fleet.has_redis())
                    .signed_since(if shared.fleet.has_redis() {
                        0
                    } else {
                        shared.started_ms
                    }),
            ),
            limiters: Arc::new(RateLimiters::with_fleet(shared.fleet.clone())),
            ..Carried::default()
        };
        let empty = Arc::new(Snapshot::default());
        let runtime = Runtime::build(empty, None, &carried, &shared, kind);
        Plane {
            kind,
            current: ArcSwap::from_pointee(runtime),
            carried,
            shared,
            ready: AtomicBool::new(false),
            source: ArcSwap::from_pointee(String::from("none")),
            applied_at_ms: AtomicU64::new(0),
            reload: ReloadStatus::default(),
            retired: std::sync::Mutex::new(Vec::new()),
            live: std::sync::OnceLock::new(),
        }
    }

    /// Request phase, right after `auth`, on the sandbox plane only: a call verified with
    /// the very secret the live plane has for the same app would be as good on live, so a
    /// call signed "for the sandbox" could be replayed there. The sandbox accepts sandbox
    /// secrets only (docs/PROTOCOL.md, "The sandbox"): 401 `SIGNATURE_INVALID` otherwise.
    pub fn check_plane_secret(
        &self,
        edge: &crate::edge::EdgeCtx,
    ) -> Result<(), crate::error::GatewayError> {
        if self.kind != PlaneKind::Sandbox {
            return Ok(());
        }
        let (Some(key), Some(app)) = (edge.app_key.as_deref(), edge.app.as_ref()) else {
            return Ok(());
        };
        let Some(live) = self.live.get().and_then(std::sync::Weak::upgrade) else {
            return Ok(());
        };
        let shared_secret = live
            .current
            .load()
            .snapshot
            .apps
            .get(key)
            .is_some_and(|l| l.secret == app.secret);
        if shared_secret {
            return Err(crate::error::GatewayError::new(
                crate::error::Code::SignatureInvalid,
                "this app's sandbox secret is its live secret; the sandbox accepts calls \
                 signed with a sandbox secret only",
            )
            .with_detail("sandbox app signs with its live secret"));
        }
        Ok(())
    }

    /// Builds a runtime from `snapshot` (carrying state from the current one) and swaps it in.
    pub fn apply(&self, snapshot: Arc<Snapshot>) {
        let previous = self.current.load_full();
        let runtime = Runtime::build(
            snapshot,
            Some(&previous),
            &self.carried,
            &self.shared,
            self.kind,
        );
        let plane = self.kind.as_str();
        let m = &self.shared.metrics;
        let snapshot = &runtime.snapshot;
        m.config_generation
            .with_label_values(&[plane])
            .set(snapshot.version.generation as i64);
        m.apis_loaded
            .with_label_values(&[plane])
            .set(snapshot.apis.len() as i64);
        m.config_rejected_documents
            .with_label_values(&[plane])
            .set(snapshot.rejected.len() as i64);
        for r in &snapshot.rejected {
            let kind = r.path.split('/').next().unwrap_or("other");
            m.config_rejections.with_label_values(&[plane, kind]).inc();
        }
        for id in previous.metrics.keys() {
            if !runtime.metrics.contains_key(id) {
                ApiMetrics::forget(m, plane, id);
            }
        }
        if self.kind == PlaneKind::Live {
            self.shared.notify.apply(Arc::clone(&runtime.snapshot));
        }
        self.current.store(Arc::new(runtime));
        self.reload.build_failure.store(None);
        self.ready.store(true, Ordering::Release);
        self.applied_at_ms
            .store(portico_control::clock::now_ms(), Ordering::Relaxed);
        self.retire(previous);
    }

    /// Keeps a replaced runtime until nothing else holds it, so that its last holder is
    /// not a request: dropping a runtime of 10,000 APIs takes ≈ 23 million instructions
    /// (its route tree, per-API state), which would stall the traffic thread that happened
    /// to finish the last request on it (benches/RESULTS.md, "10,000 APIs vs 10 APIs").
    fn retire(&self, runtime: Arc<Runtime>) {
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(runtime);
        self.release_retired();
    }

    /// Drops the replaced runtimes nothing else holds any more (at each apply, and from the
    /// housekeeping every few seconds); returns how many are still held.
    pub fn release_retired(&self) -> usize {
        let released: Vec<Arc<Runtime>> = {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            let (free, held) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|rt| Arc::strong_count(rt) == 1);
            *retired = held;
            free
        };
        // Dropped outside the lock.
        drop(released);
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The documents refused by the applied snapshot, and the failed build of a newer tree if
    /// there was one (`/status`'s `rejected_documents`).
    pub fn rejected_documents(&self) -> Vec<Rejection> {
        let rt = self.current.load();
        let mut out = rt.snapshot.rejected.clone();
        if let Some(failure) = self.reload.build_failure.load_full() {
            out.push((*failure).clone());
        }
        out
    }

    /// Periodic upkeep off the request path: limiter cleanup, replaced runtimes released,
    /// state gauges.
    pub fn housekeeping(&self) {
        self.release_retired();
        self.carried.limiters.housekeeping();
        self.carried
            .replay
            .housekeeping(portico_control::clock::now_ms());
        let rt = self.current.load();
        let plane = self.kind.as_str();
        let m = &self.shared.metrics;
        let replay = self.carried.replay.stats();
        m.replay_nonces
            .with_label_values(&[plane])
            .set(i64::try_from(replay.nonces).unwrap_or(i64::MAX));
        m.replay_bytes
            .with_label_values(&[plane])
            .set(i64::try_from(replay.bytes).unwrap_or(i64::MAX));
        let full = m.replay_full.with_label_values(&[plane]);
        full.inc_by(replay.full.saturating_sub(full.get()));
        self.routing_metrics(&rt);
        for (id, api) in &rt.invoke.apis {
            m.breaker_state
                .with_label_values(&[plane, id])
                .set(api.breaker.state().gauge());
            m.bulkhead_in_flight
                .with_label_values(&[plane, id])
                .set(i64::from(api.bulkhead.in_flight()));
        }
    }
}

impl Plane {
    /// The clusters' routing gauges and counters (counters catch up with the endpoints'
    /// own atomic counts).
    fn routing_metrics(&self, rt: &Runtime) {
        let plane = self.kind.as_str();
        let m = &self.shared.metrics.routing;
        let now = portico_control::clock::now_ms();
        let catch_up =
            |c: prometheus::IntCounter, total: u64| c.inc_by(total.saturating_sub(c.get()));
        for (name, cluster) in &rt.invoke.clusters {
            let r = &cluster.routing;
            let (serving, _) = r.serving(now);
            for set in [
                portico_control::v1::ActiveSet::Primary,
                portico_control::v1::ActiveSet::Standby,
            ] {
                let Some(eps) = r.set(set) else { continue };
                m.active_set
                    .with_label_values(&[plane, name, set.as_str()])
                    .set(i64::from(serving == set));
                for e in &eps.endpoints {
                    let labels = [plane, name.as_str(), e.addr.as_str()];
                    m.endpoint_healthy
                        .with_label_values(&labels)
                        .set(i64::from(e.available(now)));
                    catch_up(
                        m.ejections.with_label_values(&labels),
                        e.ejections.load(Ordering::Relaxed),
                    );
                    if r.probing() {
                        let probes =
                            |result| m.probes.with_label_values(&[plane, name, &e.addr, result]);
                        catch_up(probes("ok"), e.probes_ok.load(Ordering::Relaxed));
                        catch_up(probes("failed"), e.probes_failed.load(Ordering::Relaxed));
                    }
                }
            }
        }
    }
}

/// The system clock for breakers.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::{cluster_doc, http_api_doc, plane, tree};
    use portico_control::build_snapshot;
    use serde_json::{json, Value};

    /// Builds `docs` against the plane's current snapshot and applies it, as a reload does.
    fn apply(plane: &Plane, docs: &[(&str, Value)]) -> Arc<Runtime> {
        let previous = plane.current.load_full();
        let snapshot = build_snapshot(&tree(docs), Some(&previous.snapshot));
        assert!(snapshot.rejected.is_empty(), "{:?}", snapshot.rejected);
        plane.apply(Arc::new(snapshot));
        plane.current.load_full()
    }

    fn limited(max_concurrent: u32, failures: u32, per_second: u32) -> Value {
        json!({
            "bulkhead": {"max_concurrent": max_concurrent},
            "breaker": {"consecutive_failures": failures},
            "rate_limits": [{"key": "ip", "limit": per_second, "per": "second"}],
        })
    }

    fn endpoints(ports: &[u16]) -> Vec<String> {
        ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }

    #[test]
    fn an_unchanged_policy_keeps_its_limiter_bulkhead_and_breaker() {
        let plane = plane();
        let c = cluster_doc(&endpoints(&[1]));
        let first = apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(8, 5, 10))),
                ("clusters/c", c.clone()),
            ],
        );
        // Another document changes (a new API): "a" is untouched.
        let second = apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(8, 5, 10))),
                ("apis/b", http_api_doc("b", "c", None, json!({}))),
                ("clusters/c", c),
            ],
        );
        assert_ne!(
            first.snapshot.version.digest,
            second.snapshot.version.digest
        );
        let limiter = |rt: &Runtime| rt.edge.rate_limit.api_limiter("a", 0).cloned().unwrap();
        assert!(Arc::ptr_eq(&limiter(&first), &limiter(&second)));
        let (a1, a2) = (&first.invoke.apis["a"], &second.invoke.apis["a"]);
        assert!(Arc::ptr_eq(&a1.bulkhead, &a2.bulkhead));
        assert!(Arc::ptr_eq(&a1.breaker, &a2.breaker));
        assert!(Arc::ptr_eq(&a1.balancer, &a2.balancer));
        assert!(Arc::ptr_eq(&first.metrics["a"], &second.metrics["a"]));
    }

    #[test]
    fn changed_definitions_get_fresh_state() {
        let plane = plane();
        let first = apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(8, 5, 10))),
                ("clusters/c", cluster_doc(&endpoints(&[1]))),
            ],
        );
        // New endpoints and a new breaker policy; bulkhead and rate limit unchanged.
        let second = apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(8, 3, 10))),
                ("clusters/c", cluster_doc(&endpoints(&[1, 2]))),
            ],
        );
        let (a1, a2) = (&first.invoke.apis["a"], &second.invoke.apis["a"]);
        assert!(!Arc::ptr_eq(&a1.balancer, &a2.balancer));
        assert_eq!(a2.balancer.len(), 2);
        assert!(!Arc::ptr_eq(&a1.breaker, &a2.breaker));
        assert!(Arc::ptr_eq(&a1.bulkhead, &a2.bulkhead));
        let limiter = |rt: &Runtime| rt.edge.rate_limit.api_limiter("a", 0).cloned().unwrap();
        assert!(Arc::ptr_eq(&limiter(&first), &limiter(&second)));
        // A new rate limit and a new bulkhead size: fresh ones.
        let third = apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(4, 3, 20))),
                ("clusters/c", cluster_doc(&endpoints(&[1, 2]))),
            ],
        );
        assert!(!Arc::ptr_eq(&limiter(&second), &limiter(&third)));
        let a3 = &third.invoke.apis["a"];
        assert!(!Arc::ptr_eq(&a2.bulkhead, &a3.bulkhead));
        assert!(Arc::ptr_eq(&a2.breaker, &a3.breaker));
        assert!(Arc::ptr_eq(&a2.balancer, &a3.balancer));
    }

    #[test]
    fn a_removed_api_drops_its_state_and_metric_series() {
        let plane = plane();
        let c = cluster_doc(&endpoints(&[1]));
        apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(8, 5, 10))),
                (
                    "apis/gone",
                    http_api_doc("gone", "c", None, limited(8, 5, 10)),
                ),
                ("clusters/c", c.clone()),
            ],
        );
        plane.housekeeping();
        let text = plane.shared.metrics.render();
        assert!(
            text.contains(r#"portico_breaker_state{api="gone",plane="live"} 0"#),
            "{text}"
        );
        assert!(text.contains(r#"portico_bulkhead_in_flight{api="gone",plane="live"} 0"#));
        assert_eq!(plane.carried.limiters.limiters(), 2);

        let rt = apply(
            &plane,
            &[
                ("apis/a", http_api_doc("a", "c", None, limited(8, 5, 10))),
                ("clusters/c", c),
            ],
        );
        assert!(!rt.invoke.apis.contains_key("gone"));
        assert!(!rt.metrics.contains_key("gone"));
        assert!(rt.edge.rate_limit.api_limiter("gone", 0).is_none());
        assert_eq!(plane.carried.limiters.limiters(), 1);
        plane.housekeeping();
        let text = plane.shared.metrics.render();
        assert!(!text.contains(r#"api="gone",plane="live"} 0"#), "{text}");
        assert!(text.contains(r#"portico_breaker_state{api="a",plane="live"} 0"#));
    }

    #[test]
    fn a_replaced_runtime_is_dropped_by_the_plane_not_by_its_last_request() {
        let plane = plane();
        plane.apply(Arc::new(build_snapshot(&tree(&[]), None)));
        // Every runtime replaced while nothing held it is gone at once.
        assert_eq!(plane.release_retired(), 0);
        // A request in flight holds the current runtime across a reload.
        let held = plane.current.load_full();
        let watch = Arc::downgrade(&held);
        plane.apply(Arc::new(build_snapshot(&tree(&[]), None)));
        assert_eq!(plane.release_retired(), 1, "still held by the request");
        // The request ends (on a traffic thread): the runtime outlives it ...
        std::thread::spawn(move || drop(held)).join().unwrap();
        assert!(watch.upgrade().is_some());
        // ... until the plane releases it.
        assert_eq!(plane.release_retired(), 0);
        assert!(watch.upgrade().is_none());
    }

    #[test]
    fn apply_reports_the_snapshot_and_a_failed_build() {
        let plane = plane();
        assert!(!plane.ready.load(Ordering::Acquire));
        let mut t = tree(&[("clusters/c", cluster_doc(&endpoints(&[1])))]);
        t.insert("apis/bad", b"{not json".to_vec());
        let snapshot = build_snapshot(&t, None);
        plane.apply(Arc::new(snapshot));
        assert!(plane.ready.load(Ordering::Acquire));
        let rejected = plane.rejected_documents();
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].path, "apis/bad");
        let text = plane.shared.metrics.render();
        assert!(text.contains(r#"portico_config_rejected_documents{plane="live"} 1"#));
        assert!(text
            .contains(r#"portico_config_document_rejections_total{kind="apis",plane="live"} 1"#));
        // A failed build is listed beside the snapshot's own rejections until the next apply.
        plane.reload.build_failure.store(Some(Arc::new(Rejection {
            path: "*".to_owned(),
            reason: "boom".to_owned(),
            kept_previous: true,
            internal: true,
        })));
        assert_eq!(plane.rejected_documents().len(), 2);
        plane.apply(Arc::new(build_snapshot(&tree(&[]), None)));
        assert!(plane.rejected_documents().is_empty());
    }
}
