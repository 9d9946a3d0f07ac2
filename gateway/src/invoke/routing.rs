//! Smart routing of one cluster (docs/operations/clusters.md, "Clusters: balancing, health,
//! failover, sleep"): which set serves (primary or standby, by the operator's `active` or
//! by automatic failover), which endpoints of it are available (active probes, passive
//! ejection), and which one a call goes to (`round_robin`, `least_load`, `peak_ewma`,
//! `consistent_hash`, or the sticky cookie's endpoint).
//!
//! Everything a pick reads is atomics; a pick walks the set's endpoints once or twice
//! (clusters are small), takes no lock and allocates nothing.

use crate::invoke::balance::Balancer;
use crate::invoke::health::{EndpointState, Prober, DECAY_MS, LOAD_FRESH_MS};
use portico_control::v1::{self, ActiveSet, Balancing};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How long the primary set must stay healthy before an automatic failback
/// (`failback: auto`), in ms (docs/OPERATIONS.md).
pub const FAILBACK_AFTER_MS: u64 = 3_000;

/// One set of endpoints (primary or standby): its round-robin balancer and the state of
/// each endpoint, in the configured order.
#[derive(Debug)]
pub struct Set {
    pub balancer: Arc<Balancer>,
    pub endpoints: Vec<Arc<EndpointState>>,
    /// Per endpoint: a 64-bit hash of its address (consistent hashing).
    addr_hash: Vec<u64>,
}

impl Set {
    fn new(name: &str, eps: &[v1::Endpoint], resolved: &HashMap<String, SocketAddr>) -> Set {
        let endpoints: Vec<Arc<EndpointState>> = eps
            .iter()
            .map(|e| Arc::new(EndpointState::new(e, resolved.get(&e.addr).copied())))
            .collect();
        if endpoints.iter().any(|e| e.sock.is_none()) {
            tracing::warn!(cluster = %name, "some endpoints do not resolve; they are never picked");
        }
        Set {
            balancer: Arc::new(Balancer::new(eps)),
            addr_hash: eps.iter().map(|e| hash64(e.addr.as_bytes())).collect(),
            endpoints,
        }
    }

    /// The sticky tokens of its endpoints, in order (computed at reload; see
    /// `invoke/sticky.rs`).
    fn sticky_tokens(&self, cluster: &str) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|e| crate::invoke::sticky::token(cluster, &e.addr))
            .collect()
    }

    /// Whether `eps` is this set's list (addresses, weights, order).
    fn same(&self, eps: &[v1::Endpoint]) -> bool {
        self.balancer.same_endpoints(eps)
    }

    /// The share of endpoints that are available.
    pub fn healthy_fraction(&self, now_ms: u64) -> f64 {
        if self.endpoints.is_empty() {
            return 0.0;
        }
        let up = self
            .endpoints
            .iter()
            .filter(|e| e.available(now_ms))
            .count();
        up as f64 / self.endpoints.len() as f64
    }
}

/// Why a set serves: the document says so (`manual`, the operator's choice) or the gateway
/// failed over on its own (`auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Manual,
    Auto,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Manual => "manual",
            Reason::Auto => "auto",
        }
    }
}

/// The endpoint a call goes to.
#[derive(Debug, Clone)]
pub struct Pick {
    pub endpoint: Arc<EndpointState>,
    pub set: ActiveSet,
    /// Its index in the set (for the sticky token).
    pub index: usize,
}

/// What the request offers the balancer.
#[derive(Debug, Default, Clone, Copy)]
pub struct Hints<'a> {
    /// The hash of the request's `hash_key` (consistent hashing); `None` when absent.
    pub key: Option<u64>,
    /// The sticky cookie's token, when the request carried one.
    pub sticky: Option<&'a str>,
}

/// A cluster's routing state. Built per snapshot; the endpoint states, balancers and
/// prober are carried across reloads when the endpoints are unchanged (`invoke/state.rs`).
#[derive(Debug)]
pub struct Routing {
    pub name: String,
    pub cluster: Arc<v1::Cluster>,
    pub primary: Set,
    pub standby: Option<Set>,
    /// Set by an automatic failover, cleared by the failback.
    auto_failed_over: AtomicBool,
    /// Since when (Unix ms) the primary set is healthy again after a failover (0: not).
    primary_ok_since_ms: AtomicU64,
    /// Whether a wake-up is in progress (the prober then probes often).
    pub waking: Arc<AtomicBool>,
    /// Until when (Unix ms) a wake call is in progress (0: none); see `invoke/sleep.rs`.
    pub wake_until_ms: AtomicU64,
    prober: Option<Arc<Prober>>,
    /// Sticky tokens per set, in endpoint order (see `invoke/sticky.rs`).
    pub tokens: [Vec<String>; 2],
}

impl Routing {
    /// The routing of `cluster` named `name`, carrying `old`'s endpoint state, balancers and
    /// prober where the carry rule allows (docs/ARCHITECTURE.md, "One snapshot"): the sets'
    /// state when their endpoint lists are unchanged; the prober when, in addition, the
    /// protocol and health check are; the failover state only when the whole document is.
    pub fn build(
        name: &str,
        cluster: &Arc<v1::Cluster>,
        resolved: &HashMap<String, SocketAddr>,
        old: Option<&Routing>,
    ) -> Routing {
        let keep_set = |old: Option<&Set>, eps: &[v1::Endpoint]| match old {
            Some(s) if s.same(eps) => Set {
                balancer: Arc::clone(&s.balancer),
                endpoints: s.endpoints.clone(),
                addr_hash: s.addr_hash.clone(),
            },
            _ => Set::new(name, eps, resolved),
        };
        let primary = keep_set(old.map(|o| &o.primary), &cluster.endpoints);
        let standby = cluster
            .standby
            .as_ref()
            .map(|sb| keep_set(old.and_then(|o| o.standby.as_ref()), &sb.endpoints));
        let same_sets = old.is_some_and(|o| {
            o.primary.same(&cluster.endpoints)
                && match (&o.standby, &cluster.standby) {
                    (Some(a), Some(b)) => a.same(&b.endpoints),
                    (None, None) => true,
                    _ => false,
                }
        });
        let same_doc = old.is_some_and(|o| *o.cluster == **cluster);
        let waking = match old {
            Some(o) if same_sets => Arc::clone(&o.waking),
            _ => Arc::new(AtomicBool::new(false)),
        };
        let prober = match (old, &cluster.health_check) {
            (Some(o), Some(_))
                if same_sets
                    && o.prober.is_some()
                    && o.cluster.health_check == cluster.health_check
                    && o.cluster.protocol == cluster.protocol =>
            {
                o.prober.clone()
            }
            (_, Some(hc)) => {
                let all: Vec<Arc<EndpointState>> = primary
                    .endpoints
                    .iter()
                    .chain(standby.iter().flat_map(|s| s.endpoints.iter()))
                    .cloned()
                    .collect();
                Prober::start(name, cluster.protocol, hc, all, Arc::clone(&waking)).map(Arc::new)
            }
            (_, None) => None,
        };
        let (auto, since) = match old {
            Some(o) if same_doc => (
                o.auto_failed_over.load(Ordering::Relaxed),
                o.primary_ok_since_ms.load(Ordering::Relaxed),
            ),
            _ => (false, 0),
        };
        let tokens = [
            primary.sticky_tokens(name),
            standby
                .as_ref()
                .map(|s| s.sticky_tokens(name))
                .unwrap_or_default(),
        ];
        Routing {
            name: name.to_owned(),
            cluster: Arc::clone(cluster),
            primary,
            standby,
            auto_failed_over: AtomicBool::new(auto),
            primary_ok_since_ms: AtomicU64::new(since),
            waking,
            wake_until_ms: AtomicU64::new(0),
            prober,
            tokens,
        }
    }

    /// Whether this routing's prober is `other`'s (carried across a reload).
    pub fn same_prober(&self, other: &Routing) -> bool {
        match (&self.prober, &other.prober) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether an active prober runs for this cluster.
    pub fn probing(&self) -> bool {
        self.prober.is_some()
    }

    /// How many endpoints the cluster has in both sets: a call can only be retried on
    /// another endpoint when there is more than one.
    pub fn endpoint_count(&self) -> usize {
        self.primary.endpoints.len() + self.standby.as_ref().map_or(0, |s| s.endpoints.len())
    }

    pub fn set(&self, which: ActiveSet) -> Option<&Set> {
        match which {
            ActiveSet::Primary => Some(&self.primary),
            ActiveSet::Standby => self.standby.as_ref(),
        }
    }

    /// The set that serves now and why: `active: standby` in the document; else the standby
    /// set while the primary's healthy fraction is below `failover_below` (and, with
    /// `failback: auto`, until the primary has been healthy for [`FAILBACK_AFTER_MS`];
    /// with `manual`, until the document changes); else the primary.
    pub fn serving(&self, now_ms: u64) -> (ActiveSet, Reason) {
        if self.cluster.active() == ActiveSet::Standby {
            return (ActiveSet::Standby, Reason::Manual);
        }
        let Some(sb) = &self.cluster.standby else {
            return (ActiveSet::Primary, Reason::Manual);
        };
        let below = self.primary.healthy_fraction(now_ms) < sb.failover_below;
        if self.auto_failed_over.load(Ordering::Relaxed) {
            if below {
                self.primary_ok_since_ms.store(0, Ordering::Relaxed);
                return (ActiveSet::Standby, Reason::Auto);
            }
            if sb.failback == v1::Failback::Manual {
                return (ActiveSet::Standby, Reason::Auto);
            }
            let since = self.primary_ok_since_ms.load(Ordering::Relaxed);
            if since == 0 {
                let _ = self.primary_ok_since_ms.compare_exchange(
                    0,
                    now_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            } else if now_ms.saturating_sub(since) >= FAILBACK_AFTER_MS {
                if self.auto_failed_over.swap(false, Ordering::Relaxed) {
                    tracing::warn!(cluster = %self.name, "failback: the primary set serves again");
                }
                return (ActiveSet::Primary, Reason::Manual);
            }
            return (ActiveSet::Standby, Reason::Auto);
        }
        if below {
            self.primary_ok_since_ms.store(0, Ordering::Relaxed);
            if !self.auto_failed_over.swap(true, Ordering::Relaxed) {
                tracing::warn!(cluster = %self.name, "failover: the primary set is unhealthy, the standby set serves");
            }
            return (ActiveSet::Standby, Reason::Auto);
        }
        (ActiveSet::Primary, Reason::Manual)
    }

    /// Picks the endpoint for a call among the serving set's available endpoints not in
    /// `tried` (endpoints this call already failed to connect to). `None`: none is
    /// available (the caller answers 503 `NO_HEALTHY_UPSTREAM`, or wakes a sleeping
    /// cluster).
    pub fn pick(&self, hints: Hints<'_>, tried: &[usize]) -> Option<Pick> {
        let now = portico_control::clock::now_ms();
        let (which, _) = self.serving(now);
        let set = self.set(which)?;
        let ok = |i: usize| {
            let e = &set.endpoints[i];
            e.weight > 0 && e.available(now) && !tried.contains(&e.id())
        };
        if let Some(token) = hints.sticky {
            let tokens = &self.tokens[which as usize];
            if let Some(i) = tokens.iter().position(|t| t == token) {
                if ok(i) {
                    return Some(self.picked(which, set, i));
                }
            }
        }
        let found = self.pick_in(which, set, hints, now, &ok);
        if let Some(index) = found {
            return Some(self.picked(which, set, index));
        }
        // A retry after connect failures on every endpoint of the serving set: the other
        // set, if any, rather than an error (docs/OPERATIONS.md).
        if tried.is_empty() {
            return None;
        }
        let other = match which {
            ActiveSet::Primary => ActiveSet::Standby,
            ActiveSet::Standby => ActiveSet::Primary,
        };
        let oset = self.set(other)?;
        let ok = |i: usize| {
            let e = &oset.endpoints[i];
            e.weight > 0 && e.available(now) && !tried.contains(&e.id())
        };
        let index = self.pick_in(other, oset, hints, now, &ok)?;
        Some(self.picked(other, oset, index))
    }

    /// The balancing mode's choice in `set` among the endpoints `ok` admits.
    fn pick_in(
        &self,
        _which: ActiveSet,
        set: &Set,
        hints: Hints<'_>,
        now: u64,
        ok: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        match self.cluster.balancing() {
            Balancing::RoundRobin => set.balancer.pick_where(ok),
            Balancing::ConsistentHash => match hints.key {
                Some(key) => rendezvous(set, key, ok),
                None => set.balancer.pick_where(ok),
            },
            Balancing::PeakEwma => {
                two_choices(set, ok, |a, b| a.latency_cost() <= b.latency_cost())
            }
            Balancing::LeastLoad => two_choices(set, ok, |a, b| {
                let (sa, sb) = load_scores(a, b, now);
                sa <= sb
            }),
        }
    }

    fn picked(&self, which: ActiveSet, set: &Set, index: usize) -> Pick {
        Pick {
            endpoint: Arc::clone(&set.endpoints[index]),
            set: which,
            index,
        }
    }

    /// Records a failed call of real traffic on `pick` (5xx, connect failure, timeout) and
    /// ejects the endpoint when the outlier policy says so, unless it is the last available
    /// endpoint of its set.
    pub fn failed(&self, pick: &Pick) {
        let outlier = self.cluster.outlier.as_ref();
        if !pick.endpoint.record_failure(outlier) {
            return;
        }
        let Some(o) = outlier else { return };
        let Some(set) = self.set(pick.set) else {
            return;
        };
        let now = portico_control::clock::now_ms();
        let others = set
            .endpoints
            .iter()
            .filter(|e| !Arc::ptr_eq(e, &pick.endpoint) && e.available(now))
            .count();
        if others == 0 {
            return;
        }
        pick.endpoint.eject(now + o.eject_ms);
        tracing::warn!(cluster = %self.name, endpoint = %pick.endpoint.addr, eject_ms = o.eject_ms, "endpoint ejected after consecutive failures");
    }

    /// Whether every endpoint of both sets is down (a cluster with `sleep` is then asleep).
    pub fn all_down(&self, now_ms: u64) -> bool {
        self.primary
            .endpoints
            .iter()
            .chain(self.standby.iter().flat_map(|s| s.endpoints.iter()))
            .all(|e| !e.available(now_ms))
    }

    /// The `/status` view (`clusters.<name>`): the serving set, why, and each endpoint's
    /// health and load score.
    pub fn status(&self) -> portico_control::status::ClusterStatus {
        use portico_control::status::EndpointStatus;
        let now = portico_control::clock::now_ms();
        let (active, reason) = self.serving(now);
        let set_status = |set: &Set| -> Vec<EndpointStatus> {
            set.endpoints
                .iter()
                .map(|e| {
                    let load = e.load_report(now);
                    EndpointStatus {
                        addr: e.addr.clone(),
                        healthy: e.available(now),
                        probe_healthy: e.probe_healthy(),
                        ejected_until: e.ejected_until(now),
                        load: load.map(|(l, _)| l),
                        load_age_ms: load.map(|(_, a)| a),
                        latency_ewma_us: e.latency_cost().round(),
                    }
                })
                .collect()
        };
        portico_control::status::ClusterStatus {
            active: active.as_str().to_owned(),
            reason: reason.as_str().to_owned(),
            balancing: self.cluster.balancing().as_str().to_owned(),
            health_check: self.prober.is_some(),
            primary: set_status(&self.primary),
            standby: self.standby.as_ref().map(set_status),
        }
    }
}

/// The least-load scores of two candidates: each endpoint's report while fresh
/// ([`LOAD_FRESH_MS`]), decaying past that toward its share of the two peak-EWMA latency
/// costs (an endpoint that never reported is scored by latency alone).
fn load_scores(a: &EndpointState, b: &EndpointState, now: u64) -> (f64, f64) {
    let (la, lb) = (a.latency_cost(), b.latency_cost());
    let sum = la + lb;
    let (na, nb) = if sum > 0.0 {
        (la / sum, lb / sum)
    } else {
        (0.5, 0.5)
    };
    let score = |e: &EndpointState, lat: f64| match e.load_report(now) {
        None => lat,
        Some((load, age)) => {
            let w = if age <= LOAD_FRESH_MS {
                1.0
            } else {
                (-((age - LOAD_FRESH_MS) as f64) / DECAY_MS).exp()
            };
            w * load + (1.0 - w) * lat
        }
    };
    (score(a, na), score(b, nb))
}

/// Power of two choices among the endpoints `ok` admits: two distinct ones at random,
/// `better(a, b)` says whether `a` wins.
fn two_choices(
    set: &Set,
    ok: impl Fn(usize) -> bool,
    better: impl Fn(&EndpointState, &EndpointState) -> bool,
) -> Option<usize> {
    let n = (0..set.endpoints.len()).filter(|&i| ok(i)).count();
    let nth = |k: usize| (0..set.endpoints.len()).filter(|&i| ok(i)).nth(k);
    match n {
        0 => None,
        1 => nth(0),
        _ => {
            let r1 = fastrand::usize(..n);
            let mut r2 = fastrand::usize(..n - 1);
            if r2 >= r1 {
                r2 += 1;
            }
            let (a, b) = (nth(r1)?, nth(r2)?);
            if better(&set.endpoints[a], &set.endpoints[b]) {
                Some(a)
            } else {
                Some(b)
            }
        }
    }
}

/// Weighted rendezvous hashing: the admitted endpoint with the highest
/// `-weight / ln(u)`, `u` uniform in (0, 1) from the key and the endpoint's address. Adding
/// an endpoint moves only the keys it wins (about 1/N of them).
fn rendezvous(set: &Set, key: u64, ok: impl Fn(usize) -> bool) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for i in (0..set.endpoints.len()).filter(|&i| ok(i)) {
        let h = mix(key ^ set.addr_hash[i]);
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let score = -f64::from(set.endpoints[i].weight) / u.ln();
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// FNV-1a, then a finalising mix: stable across processes and Rust versions, so every
/// gateway maps a key to the same endpoint.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn routing(doc: serde_json::Value) -> Routing {
        let c: v1::Cluster = serde_json::from_value(doc).unwrap();
        let mut resolved = HashMap::new();
        for e in c
            .endpoints
            .iter()
            .chain(c.standby.iter().flat_map(|s| s.endpoints.iter()))
        {
            resolved.insert(e.addr.clone(), e.addr.parse().unwrap());
        }
        Routing::build("c", &Arc::new(c), &resolved, None)
    }

    fn eps(n: usize) -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| json!({"addr": format!("127.0.0.{}:80", i + 1)}))
            .collect()
    }

    #[test]
    fn consistent_hash_moves_at_most_about_one_nth_of_keys() {
        let four = routing(
            json!({"protocol": "http", "endpoints": eps(4), "balancing": "consistent_hash", "hash_key": "ip"}),
        );
        let five = routing(
            json!({"protocol": "http", "endpoints": eps(5), "balancing": "consistent_hash", "hash_key": "ip"}),
        );
        let keys = 20_000u64;
        let mut moved = 0;
        let mut per = HashMap::new();
        for k in 0..keys {
            let key = hash64(format!("user-{k}").as_bytes());
            let hints = Hints {
                key: Some(key),
                sticky: None,
            };
            let a = four.pick(hints, &[]).unwrap().endpoint.addr.clone();
            // The same key again: the same endpoint.
            assert_eq!(four.pick(hints, &[]).unwrap().endpoint.addr, a);
            let b = five.pick(hints, &[]).unwrap().endpoint.addr.clone();
            *per.entry(a.clone()).or_insert(0) += 1;
            if a != b {
                // A key only moves to the new endpoint.
                assert_eq!(b, "127.0.0.5:80");
                moved += 1;
            }
        }
        let share = moved as f64 / keys as f64;
        assert!(share <= 0.2 * 1.1, "moved {share}");
        assert!(share > 0.15, "moved {share}");
        for n in per.values() {
            assert!((*n as f64 / keys as f64 - 0.25).abs() < 0.03, "{per:?}");
        }
    }

    #[test]
    fn least_load_prefers_the_lower_report() {
        let r =
            routing(json!({"protocol": "http", "endpoints": eps(2), "balancing": "least_load"}));
        let now = portico_control::clock::now_ms();
        r.primary.endpoints[0].record_load(0.9, now);
        r.primary.endpoints[1].record_load(0.1, now);
        for _ in 0..50 {
            assert_eq!(r.pick(Hints::default(), &[]).unwrap().index, 1);
        }
        // An old report decays toward the latency score.
        r.primary.endpoints[1].record_load(0.1, now - 60_000);
        let picks: usize = (0..50)
            .filter(|_| r.pick(Hints::default(), &[]).unwrap().index == 1)
            .count();
        assert_eq!(picks, 50, "0.5 (latency only) still beats 0.9");
        r.primary.endpoints[0].record_load(0.9, now - 60_000);
        r.primary.endpoints[1].record_load(0.6, now);
        assert_eq!(r.pick(Hints::default(), &[]).unwrap().index, 0);
    }

    #[test]
    fn failover_and_failback_follow_the_primary_health() {
        let r = routing(json!({"protocol": "http", "endpoints": eps(2),
            "standby": {"endpoints": [{"addr": "127.0.1.1:80"}], "failover_below": 0.5},
            "outlier": {"consecutive_failures": 1, "eject_ms": 600000}}));
        let now = portico_control::clock::now_ms();
        assert_eq!(r.serving(now), (ActiveSet::Primary, Reason::Manual));
        // One of two ejected: 0.5 is not below 0.5.
        r.primary.endpoints[0].eject(now + 600_000);
        assert_eq!(r.serving(now), (ActiveSet::Primary, Reason::Manual));
        // The last one is never ejected by the passive detector...
        let p = r.pick(Hints::default(), &[]).unwrap();
        assert_eq!(p.index, 1);
        r.failed(&p);
        assert!(r.primary.endpoints[1].available(now));
        // ... but the probes may take it out: failover.
        let hc: v1::HealthCheck =
            serde_json::from_value(json!({"unhealthy_after": 1, "healthy_after": 1})).unwrap();
        r.primary.endpoints[1].record_probe(false, &hc);
        assert_eq!(r.serving(now), (ActiveSet::Standby, Reason::Auto));
        assert_eq!(
            r.pick(Hints::default(), &[]).unwrap().set,
            ActiveSet::Standby
        );
        r.primary.endpoints[1].record_probe(true, &hc);
        assert_eq!(r.serving(now), (ActiveSet::Standby, Reason::Auto));
        assert_eq!(r.serving(now + 1000), (ActiveSet::Standby, Reason::Auto));
        assert_eq!(
            r.serving(now + FAILBACK_AFTER_MS),
            (ActiveSet::Primary, Reason::Manual)
        );
    }

    #[test]
    fn manual_standby_and_no_healthy_endpoint() {
        let r = routing(
            json!({"protocol": "http", "endpoints": eps(1), "active": "standby",
            "standby": {"endpoints": [{"addr": "127.0.1.1:80"}]}}),
        );
        let p = r.pick(Hints::default(), &[]).unwrap();
        assert_eq!(
            (p.set, p.endpoint.addr.as_str()),
            (ActiveSet::Standby, "127.0.1.1:80")
        );
        // A retry after a connect failure on the whole serving set goes to the other set;
        // with every endpoint tried there is none.
        let retry = r.pick(Hints::default(), &[p.endpoint.id()]).unwrap();
        assert_eq!(
            (retry.set, retry.endpoint.addr.as_str()),
            (ActiveSet::Primary, "127.0.0.1:80")
        );
        assert!(r
            .pick(Hints::default(), &[p.endpoint.id(), retry.endpoint.id()])
            .is_none());
    }
}
