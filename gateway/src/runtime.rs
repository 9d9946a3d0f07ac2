//! The gateway's one snapshot: everything a request reads, built and validated fully before
//! it is swapped in behind a single `ArcSwap` (DESIGN.md §4.4). Runtime state that must
//! outlive a reload (replay cache, rate limiters, bulkheads, breakers, balancers, gRPC
//! channels, the upstream pool) is carried across by key when its definition is unchanged.

use crate::edge::auth::{AuthStage, ReplayCache};
use crate::edge::degrade::DegradeStage;
use crate::edge::ip_acl::IpAclStage;
use crate::edge::permit::PermitStage;
use crate::edge::rate_limit::{RateLimitStage, RateLimiters};
use crate::edge::route::RouteStage;
use crate::invoke::balance::Balancer;
use crate::invoke::breaker::{Breaker, Clock, SystemClock};
use crate::invoke::bulkhead::Bulkhead;
use crate::invoke::grpc::{GrpcInvoker, GrpcMethods};
use crate::invoke::http::HttpInvoker;
use crate::observe::access_log::AccessLog;
use crate::observe::metrics::Metrics;
use arc_swap::ArcSwap;
use portico_control::{Api, Snapshot};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
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
    pub http: HttpInvoker,
    pub grpc: GrpcInvoker,
    pub clock: Arc<dyn Clock>,
    pub node_id: String,
    /// Request body limit when an API sets none.
    pub default_max_body: u64,
}

/// An API's metric series, resolved once per snapshot so the request path does not hash
/// label values for the common case.
#[derive(Debug)]
pub struct ApiMetrics {
    /// `portico_requests_total{plane, api, status="200", code="OK"}`.
    pub ok: prometheus::IntCounter,
    pub latency: prometheus::Histogram,
    pub upstream_latency: prometheus::Histogram,
}

impl ApiMetrics {
    fn new(metrics: &Metrics, plane: &str, api: &str) -> ApiMetrics {
        ApiMetrics {
            ok: metrics
                .requests
                .with_label_values(&[plane, api, "200", "OK"]),
            latency: metrics.latency.with_label_values(&[plane, api]),
            upstream_latency: metrics.upstream_latency.with_label_values(&[plane, api]),
        }
    }
}

/// The per-API invoke state: pool, breaker, balancer and resolved endpoints.
pub struct ApiRuntime {
    pub metrics: Arc<ApiMetrics>,
    pub bulkhead: Arc<Bulkhead>,
    pub breaker: Arc<Breaker>,
    pub balancer: Arc<Balancer>,
    /// The cluster's endpoints resolved to socket addresses (in the balancer's order).
    pub addrs: Arc<HashMap<String, SocketAddr>>,
}

/// The edge stages, built from one snapshot.
pub struct Edge {
    pub ip_acl: IpAclStage,
    pub route: RouteStage,
    pub auth: AuthStage,
    pub permit: PermitStage,
    pub rate_limit: RateLimitStage,
    pub degrade: DegradeStage,
}

/// A cluster's balancer and its endpoints resolved to socket addresses.
pub type ClusterRuntime = (Arc<Balancer>, Arc<HashMap<String, SocketAddr>>);

/// Everything one request reads, from one snapshot.
pub struct Runtime {
    pub snapshot: Arc<Snapshot>,
    pub edge: Edge,
    pub apis: HashMap<String, ApiRuntime>,
    pub grpc: GrpcMethods,
    /// Resolved endpoints per cluster (shared by the APIs of that cluster).
    pub clusters: HashMap<String, ClusterRuntime>,
}

/// Runtime state that lives across reloads of one plane.
pub struct Carried {
    pub replay: Arc<ReplayCache>,
    pub limiters: Arc<RateLimiters>,
}

/// One served tree: the current runtime behind one `ArcSwap`, and what it carries across
/// reloads.
pub struct Plane {
    pub kind: PlaneKind,
    pub current: ArcSwap<Runtime>,
    pub carried: Carried,
    pub shared: Arc<Shared>,
    /// Set once a real configuration has been applied (for `/readyz`).
    pub ready: AtomicBool,
    /// Describes the live source (`dir:...`, `zk:...`, `snapshot:...`).
    pub source: ArcSwap<String>,
    /// Unix ms when the applied config was built.
    pub applied_at_ms: std::sync::atomic::AtomicU64,
}

impl Plane {
    /// A plane serving an empty configuration until the first snapshot arrives.
    pub fn new(kind: PlaneKind, shared: Arc<Shared>) -> Plane {
        let carried = Carried {
            replay: Arc::new(ReplayCache::new()),
            limiters: Arc::new(RateLimiters::new()),
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
            applied_at_ms: std::sync::atomic::AtomicU64::new(0),
        }
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
        m.config_generation
            .with_label_values(&[plane])
            .set(runtime.snapshot.version.generation as i64);
        m.apis_loaded
            .with_label_values(&[plane])
            .set(runtime.snapshot.apis.len() as i64);
        m.config_rejected_documents
            .with_label_values(&[plane])
            .set(runtime.snapshot.rejected.len() as i64);
        for r in &runtime.snapshot.rejected {
            let kind = r.path.split('/').next().unwrap_or("other");
            m.config_rejections.with_label_values(&[plane, kind]).inc();
        }
        // Forget per-API series of APIs that are gone.
        for id in previous.apis.keys() {
            if !runtime.apis.contains_key(id) {
                let _ = m.breaker_state.remove_label_values(&[plane, id]);
                let _ = m.bulkhead_in_flight.remove_label_values(&[plane, id]);
            }
        }
        self.current.store(Arc::new(runtime));
        self.ready.store(true, Ordering::Release);
        self.applied_at_ms
            .store(portico_control::clock::now_ms(), Ordering::Relaxed);
    }

    /// Periodic upkeep off the request path: limiter cleanup and state gauges.
    pub fn housekeeping(&self) {
        self.carried.limiters.housekeeping();
        self.carried
            .replay
            .housekeeping(portico_control::clock::now_ms());
        let rt = self.current.load();
        let plane = self.kind.as_str();
        for (id, api) in &rt.apis {
            let m = &self.shared.metrics;
            m.breaker_state
                .with_label_values(&[plane, id])
                .set(api.breaker.state().gauge());
            m.bulkhead_in_flight
                .with_label_values(&[plane, id])
                .set(i64::from(api.bulkhead.in_flight()));
        }
    }
}

impl Runtime {
    /// Builds every stage and the per-API invoke state from `snapshot`, reusing state from
    /// `previous` where the definition is unchanged. Runs on the config task, never per request.
    pub fn build(
        snapshot: Arc<Snapshot>,
        previous: Option<&Runtime>,
        carried: &Carried,
        shared: &Shared,
        kind: PlaneKind,
    ) -> Runtime {
        let edge = Edge {
            ip_acl: IpAclStage::from(snapshot.as_ref()),
            route: RouteStage::build(&snapshot),
            auth: AuthStage::new(&snapshot, carried.replay.clone()),
            permit: PermitStage::from(snapshot.as_ref()),
            rate_limit: RateLimitStage::build(&snapshot, &carried.limiters),
            degrade: DegradeStage::from(snapshot.as_ref()),
        };
        let mut clusters = HashMap::new();
        for (name, cluster) in &snapshot.clusters {
            let reuse = previous.and_then(|p| {
                let old = p.snapshot.clusters.get(name)?;
                if old.endpoints == cluster.endpoints {
                    p.clusters.get(name).cloned()
                } else {
                    None
                }
            });
            let entry = reuse.unwrap_or_else(|| {
                let mut addrs = HashMap::new();
                for ep in &cluster.endpoints {
                    match ep.addr.to_socket_addrs().map(|mut it| it.next()) {
                        Ok(Some(a)) => {
                            addrs.insert(ep.addr.clone(), a);
                        }
                        _ => tracing::warn!(cluster = %name, addr = %ep.addr, "endpoint does not resolve; skipped"),
                    }
                }
                (Arc::new(Balancer::new(&cluster.endpoints)), Arc::new(addrs))
            });
            clusters.insert(name.clone(), entry);
        }
        let mut apis = HashMap::new();
        for (id, api) in &snapshot.apis {
            let old = previous.and_then(|p| p.apis.get(id));
            let bulkhead = match old {
                Some(o) if o.bulkhead.same_policy(api.policy.bulkhead.as_ref()) => {
                    o.bulkhead.clone()
                }
                _ => Arc::new(Bulkhead::new(api.policy.bulkhead.as_ref())),
            };
            let breaker = match old {
                Some(o)
                    if o.breaker.same_policy(api.policy.breaker.as_ref())
                        && same_backend(previous, id, api) =>
                {
                    o.breaker.clone()
                }
                _ => Arc::new(Breaker::new(
                    api.policy.breaker.as_ref(),
                    shared.clock.clone(),
                )),
            };
            let Some((balancer, addrs)) = clusters.get(&api.cluster).cloned() else {
                continue;
            };
            let metrics = match old {
                Some(o) => o.metrics.clone(),
                None => Arc::new(ApiMetrics::new(&shared.metrics, kind.as_str(), id)),
            };
            apis.insert(
                id.clone(),
                ApiRuntime {
                    metrics,
                    bulkhead,
                    breaker,
                    balancer,
                    addrs,
                },
            );
        }
        let grpc = GrpcMethods::build(&snapshot, previous.map(|p| &p.grpc));
        Runtime {
            snapshot,
            edge,
            apis,
            grpc,
            clusters,
        }
    }
}

fn same_backend(previous: Option<&Runtime>, id: &str, api: &Api) -> bool {
    previous
        .and_then(|p| p.snapshot.apis.get(id))
        .is_some_and(|old| old.backend == api.backend && old.cluster == api.cluster)
}

/// The system clock for breakers.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}
