//! The invoke tier's state for one snapshot: per API its bulkhead, breaker, balancer and
//! resolved endpoints, per cluster its balancer and endpoints, and the prepared gRPC methods.
//! The runtime holds one [`InvokeState`] per snapshot; [`InvokeState::build`] is where the
//! reload-carry rule of the invoke tier lives (docs/ARCHITECTURE.md, "One snapshot"):
//!
//! - a cluster whose endpoint lists (addresses, weights, order; primary and standby) are
//!   unchanged keeps its balancer (and its place in the sequence), its resolved addresses
//!   and each endpoint's health, ejection, load and latency state; its prober too when the
//!   health check is unchanged; its failover state only when the whole document is
//!   (`invoke/routing.rs`);
//! - an API whose bulkhead policy is unchanged (defaults applied) keeps its bulkhead, with
//!   the calls in flight in it;
//! - an API whose breaker policy, backend and cluster are all unchanged keeps its breaker
//!   (a breaker judges one backend: a new backend starts Closed);
//! - descriptor pools are kept per SHA-256 ([`GrpcMethods::build`]);
//! - state of an API or cluster no longer in the snapshot is dropped with the old state.

use crate::invoke::balance::Balancer;
use crate::invoke::breaker::{Breaker, Clock};
use crate::invoke::bulkhead::Bulkhead;
use crate::invoke::grpc::GrpcMethods;
use crate::invoke::routing::Routing;
use portico_control::template::Rewrite;
use portico_control::{v1, Api, BackendKind, Snapshot};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// A cluster's balancer, its endpoints resolved to socket addresses, and its routing state
/// (sets, endpoint health and load, failover, prober: `invoke/routing.rs`).
#[derive(Debug, Clone)]
pub struct ClusterRuntime {
    /// The primary set's round-robin balancer (the routing's).
    pub balancer: Arc<Balancer>,
    /// Endpoint address as configured (both sets) → the socket address it resolved to.
    /// Endpoints that do not resolve are left out (and logged) and never picked.
    pub addrs: Arc<HashMap<String, SocketAddr>>,
    pub routing: Arc<Routing>,
}

impl ClusterRuntime {
    /// The runtime of `cluster`: its endpoints resolved once (at reload, never per request),
    /// carrying `old`'s routing state where `Routing::build` allows.
    fn build(
        name: &str,
        cluster: &Arc<v1::Cluster>,
        old: Option<&ClusterRuntime>,
    ) -> ClusterRuntime {
        let same_lists = old.is_some_and(|o| {
            o.routing.cluster.endpoints == cluster.endpoints
                && o.routing.cluster.standby.as_ref().map(|s| &s.endpoints)
                    == cluster.standby.as_ref().map(|s| &s.endpoints)
        });
        let addrs = match old {
            Some(o) if same_lists => Arc::clone(&o.addrs),
            _ => Arc::new(resolve(name, cluster)),
        };
        let routing = Arc::new(Routing::build(
            name,
            cluster,
            &addrs,
            old.map(|o| &*o.routing),
        ));
        ClusterRuntime {
            balancer: Arc::clone(&routing.primary.balancer),
            addrs,
            routing,
        }
    }
}

/// Resolves every endpoint of both sets (once per reload).
fn resolve(name: &str, cluster: &v1::Cluster) -> HashMap<String, SocketAddr> {
    let mut addrs = HashMap::new();
    let standby = cluster.standby.iter().flat_map(|s| s.endpoints.iter());
    for ep in cluster.endpoints.iter().chain(standby) {
        match ep.addr.to_socket_addrs().map(|mut it| it.next()) {
            Ok(Some(a)) => {
                addrs.insert(ep.addr.clone(), a);
            }
            _ => {
                tracing::warn!(cluster = %name, addr = %ep.addr, "endpoint does not resolve; skipped")
            }
        }
    }
    addrs
}

/// One API's invoke state: its concurrency pool, breaker, and cluster.
#[derive(Debug, Clone)]
pub struct ApiRuntime {
    /// The definition this state was built for (the carry rule compares against it).
    pub api: Arc<Api>,
    pub bulkhead: Arc<Bulkhead>,
    pub breaker: Arc<Breaker>,
    /// The API's cluster's balancer (shared by the APIs of that cluster).
    pub balancer: Arc<Balancer>,
    /// The cluster's endpoints resolved to socket addresses.
    pub addrs: Arc<HashMap<String, SocketAddr>>,
    /// The cluster's routing (shared by the APIs of that cluster).
    pub routing: Arc<Routing>,
    /// An HTTP backend's rewrite path, parsed once (validation has checked it parses).
    pub rewrite: Option<Arc<Rewrite>>,
}

impl ApiRuntime {
    /// The state of `api` on `cluster`, keeping `old`'s bulkhead and breaker where the carry
    /// rule says so.
    fn build(
        api: &Arc<Api>,
        cluster: &ClusterRuntime,
        old: Option<&ApiRuntime>,
        clock: &Arc<dyn Clock>,
    ) -> ApiRuntime {
        let bulkhead = match old {
            Some(o) if o.bulkhead.same_policy(api.policy.bulkhead.as_ref()) => {
                Arc::clone(&o.bulkhead)
            }
            _ => Arc::new(Bulkhead::new(api.policy.bulkhead.as_ref())),
        };
        let breaker = match old {
            Some(o)
                if o.breaker.same_policy(api.policy.breaker.as_ref())
                    && o.api.backend == api.backend
                    && o.api.cluster == api.cluster =>
            {
                Arc::clone(&o.breaker)
            }
            _ => Arc::new(Breaker::new(api.policy.breaker.as_ref(), Arc::clone(clock))),
        };
        ApiRuntime {
            api: Arc::clone(api),
            bulkhead,
            breaker,
            balancer: Arc::clone(&cluster.balancer),
            addrs: Arc::clone(&cluster.addrs),
            routing: Arc::clone(&cluster.routing),
            rewrite: match &api.backend {
                BackendKind::Http { path: Some(p) } => Rewrite::parse(p).ok().map(Arc::new),
                _ => None,
            },
        }
    }
}

/// Everything the invoke tier reads for one snapshot.
#[derive(Debug, Default)]
pub struct InvokeState {
    /// Per API id. An API whose cluster is not in the snapshot has none (its calls answer 503
    /// `NO_HEALTHY_UPSTREAM`).
    pub apis: HashMap<String, ApiRuntime>,
    /// Per cluster name.
    pub clusters: HashMap<String, ClusterRuntime>,
    /// The gRPC APIs' prepared methods.
    pub grpc: GrpcMethods,
}

impl InvokeState {
    /// Builds the state of `snapshot`, carrying from `previous` (the plane's current state)
    /// whatever the module's carry rule keeps. Runs on the reload task, never per request.
    pub fn build(
        snapshot: &Snapshot,
        previous: Option<&InvokeState>,
        clock: &Arc<dyn Clock>,
    ) -> InvokeState {
        let clusters: HashMap<String, ClusterRuntime> = snapshot
            .clusters
            .iter()
            .map(|(name, cluster)| {
                let old = previous.and_then(|p| p.clusters.get(name));
                let state = match old {
                    // The same document: everything is kept as it is.
                    Some(o) if *o.routing.cluster == **cluster => o.clone(),
                    _ => ClusterRuntime::build(name, cluster, old),
                };
                (name.clone(), state)
            })
            .collect();
        let apis = snapshot
            .apis
            .iter()
            .filter_map(|(id, api)| {
                let cluster = clusters.get(&api.cluster)?;
                let old = previous.and_then(|p| p.apis.get(id));
                Some((id.clone(), ApiRuntime::build(api, cluster, old, clock)))
            })
            .collect();
        InvokeState {
            apis,
            clusters,
            grpc: GrpcMethods::build(snapshot, previous.map(|p| &p.grpc)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::invoke::breaker::ManualClock;
    use crate::testing::{api_with, cluster};
    use portico_control::BackendKind;

    fn clock() -> Arc<dyn Clock> {
        Arc::new(ManualClock::new(0))
    }

    fn http_api(id: &str, cluster: &str, policy: v1::Policy) -> Arc<Api> {
        let mut api = api_with(
            id,
            &[("GET", "/x")],
            BackendKind::Http { path: None },
            policy,
            v1::AuthMode::None,
        );
        api.cluster = cluster.to_owned();
        Arc::new(api)
    }

    fn snapshot(apis: Vec<Arc<Api>>, clusters: &[(&str, &[(&str, u32)])]) -> Snapshot {
        Snapshot {
            apis: apis.into_iter().map(|a| (a.id.clone(), a)).collect(),
            clusters: clusters
                .iter()
                .map(|(name, eps)| ((*name).to_owned(), cluster(eps)))
                .collect(),
            ..Snapshot::default()
        }
    }

    fn bulkhead(max: u32) -> v1::Policy {
        serde_json::from_value(serde_json::json!({"bulkhead": {"max_concurrent": max}})).unwrap()
    }

    fn breaker(failures: u32) -> v1::Policy {
        serde_json::from_value(serde_json::json!({"breaker": {"consecutive_failures": failures}}))
            .unwrap()
    }

    const ONE: &[(&str, u32)] = &[("127.0.0.1:1", 1)];
    const TWO: &[(&str, u32)] = &[("127.0.0.1:1", 1), ("127.0.0.1:2", 1)];

    #[test]
    fn unchanged_definitions_keep_their_state() {
        let clock = clock();
        let s1 = snapshot(vec![http_api("a", "c", bulkhead(4))], &[("c", ONE)]);
        let first = InvokeState::build(&s1, None, &clock);
        // The same documents again, as a reload of an unrelated change would bring them.
        let s2 = snapshot(vec![http_api("a", "c", bulkhead(4))], &[("c", ONE)]);
        let second = InvokeState::build(&s2, Some(&first), &clock);
        let (a1, a2) = (&first.apis["a"], &second.apis["a"]);
        assert!(Arc::ptr_eq(&a1.bulkhead, &a2.bulkhead));
        assert!(Arc::ptr_eq(&a1.breaker, &a2.breaker));
        assert!(Arc::ptr_eq(&a1.balancer, &a2.balancer));
        assert!(Arc::ptr_eq(&a1.addrs, &a2.addrs));
        assert!(Arc::ptr_eq(
            &first.clusters["c"].balancer,
            &second.clusters["c"].balancer
        ));
        // A call in flight through the old bulkhead is seen by the new one: it is the same.
        let _permit = a1.bulkhead.try_acquire().unwrap();
        assert_eq!(a2.bulkhead.in_flight(), 1);
    }

    #[test]
    fn a_changed_endpoint_list_gives_a_new_balancer() {
        let clock = clock();
        let apis = || vec![http_api("a", "c", v1::Policy::default())];
        let first = InvokeState::build(&snapshot(apis(), &[("c", ONE)]), None, &clock);
        let second = InvokeState::build(&snapshot(apis(), &[("c", TWO)]), Some(&first), &clock);
        assert!(!Arc::ptr_eq(
            &first.apis["a"].balancer,
            &second.apis["a"].balancer
        ));
        assert_eq!(second.apis["a"].balancer.len(), 2);
        assert_eq!(second.apis["a"].addrs.len(), 2);
        // Only the endpoints changed: the API's bulkhead and breaker stay.
        assert!(Arc::ptr_eq(
            &first.apis["a"].breaker,
            &second.apis["a"].breaker
        ));
        assert!(Arc::ptr_eq(
            &first.apis["a"].bulkhead,
            &second.apis["a"].bulkhead
        ));
        // A weight is part of the list too.
        let reweighted: &[(&str, u32)] = &[("127.0.0.1:1", 1), ("127.0.0.1:2", 3)];
        let third = InvokeState::build(
            &snapshot(apis(), &[("c", reweighted)]),
            Some(&second),
            &clock,
        );
        assert!(!Arc::ptr_eq(
            &second.apis["a"].balancer,
            &third.apis["a"].balancer
        ));
    }

    #[test]
    fn a_changed_policy_gives_a_new_breaker_or_bulkhead() {
        let clock = clock();
        let first = InvokeState::build(
            &snapshot(vec![http_api("a", "c", breaker(5))], &[("c", ONE)]),
            None,
            &clock,
        );
        let second = InvokeState::build(
            &snapshot(vec![http_api("a", "c", breaker(3))], &[("c", ONE)]),
            Some(&first),
            &clock,
        );
        assert!(!Arc::ptr_eq(
            &first.apis["a"].breaker,
            &second.apis["a"].breaker
        ));
        assert!(second.apis["a"]
            .breaker
            .same_policy(second.apis["a"].api.policy.breaker.as_ref()));
        // The bulkhead policy did not change (both default): it stays.
        assert!(Arc::ptr_eq(
            &first.apis["a"].bulkhead,
            &second.apis["a"].bulkhead
        ));
        let third = InvokeState::build(
            &snapshot(vec![http_api("a", "c", bulkhead(2))], &[("c", ONE)]),
            Some(&second),
            &clock,
        );
        assert!(!Arc::ptr_eq(
            &second.apis["a"].bulkhead,
            &third.apis["a"].bulkhead
        ));
        assert_eq!(third.apis["a"].bulkhead.capacity(), 2);
    }

    #[test]
    fn a_new_backend_or_cluster_gives_a_new_breaker() {
        let clock = clock();
        let clusters: &[(&str, &[(&str, u32)])] = &[("c", ONE), ("d", ONE)];
        let first = InvokeState::build(
            &snapshot(vec![http_api("a", "c", v1::Policy::default())], clusters),
            None,
            &clock,
        );
        let moved = InvokeState::build(
            &snapshot(vec![http_api("a", "d", v1::Policy::default())], clusters),
            Some(&first),
            &clock,
        );
        assert!(!Arc::ptr_eq(
            &first.apis["a"].breaker,
            &moved.apis["a"].breaker
        ));
        let mut rewritten = (*http_api("a", "d", v1::Policy::default())).clone();
        rewritten.backend = BackendKind::Http {
            path: Some("/v2/x".to_owned()),
        };
        let rewritten = InvokeState::build(
            &snapshot(vec![Arc::new(rewritten)], clusters),
            Some(&moved),
            &clock,
        );
        assert!(!Arc::ptr_eq(
            &moved.apis["a"].breaker,
            &rewritten.apis["a"].breaker
        ));
        assert!(Arc::ptr_eq(
            &moved.apis["a"].bulkhead,
            &rewritten.apis["a"].bulkhead
        ));
    }

    #[test]
    fn removed_apis_and_clusters_are_dropped_and_do_not_come_back() {
        let clock = clock();
        let first = InvokeState::build(
            &snapshot(
                vec![
                    http_api("a", "c", v1::Policy::default()),
                    http_api("b", "c", v1::Policy::default()),
                ],
                &[("c", ONE), ("d", TWO)],
            ),
            None,
            &clock,
        );
        let b_breaker = Arc::clone(&first.apis["b"].breaker);
        let second = InvokeState::build(
            &snapshot(
                vec![http_api("a", "c", v1::Policy::default())],
                &[("c", ONE)],
            ),
            Some(&first),
            &clock,
        );
        assert!(!second.apis.contains_key("b"));
        assert!(!second.clusters.contains_key("d"));
        // Re-added later, "b" starts afresh: its old state is not resurrected.
        let third = InvokeState::build(
            &snapshot(
                vec![
                    http_api("a", "c", v1::Policy::default()),
                    http_api("b", "c", v1::Policy::default()),
                ],
                &[("c", ONE)],
            ),
            Some(&second),
            &clock,
        );
        assert!(!Arc::ptr_eq(&b_breaker, &third.apis["b"].breaker));
    }

    #[test]
    fn an_api_without_its_cluster_has_no_state_and_bad_endpoints_are_skipped() {
        let clock = clock();
        let unresolvable: &[(&str, u32)] = &[("127.0.0.1:1", 1), ("not an address", 1)];
        let state = InvokeState::build(
            &snapshot(
                vec![
                    http_api("a", "c", v1::Policy::default()),
                    http_api("lost", "nowhere", v1::Policy::default()),
                ],
                &[("c", unresolvable)],
            ),
            None,
            &clock,
        );
        assert!(!state.apis.contains_key("lost"));
        let a = &state.apis["a"];
        assert_eq!(a.balancer.len(), 2);
        assert_eq!(a.addrs.len(), 1);
        assert!(a.addrs.contains_key("127.0.0.1:1"));
    }
}
