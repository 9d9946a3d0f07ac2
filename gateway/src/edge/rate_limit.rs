//! `rate_limit`: multi-dimensional rate limits, GCRA (the generic cell rate algorithm, a
//! token bucket kept as one "theoretical arrival time" per key).
//!
//! Two kinds of rule apply to a call, all of which must admit it:
//! - the API's `policy.rate_limits`, each counted per its `key`: `api` (the API as a whole),
//!   `app` (per calling app), `ip` (per client address, after trusted-proxy resolution),
//!   `header:<Name>` (per value of that request header, first value if repeated), or a list
//!   of these for a combined key. A part the call does not have (no such header, no app on an
//!   `auth: none` API, no client address) counts as the empty value: all such calls share
//!   one bucket. An unknown part (validation should have refused it) is a constant;
//! - the calling app's own `rate_limits` (from its App document), counted per app across all
//!   APIs; only for signed calls.
//!
//! `limit` calls per `per` (second or minute) is the steady rate; `burst` (default `limit`,
//! at least 1) is the bucket size: up to `burst` calls may arrive at once, after which calls
//! are admitted at the steady rate. A refused call gets 429 `RATE_LIMITED` with
//! `Retry-After` = whole seconds until it would be admitted (at least 1). A call refused by
//! one rule is refunded to the rules that had already admitted it. `limit: 0` refuses all.
//!
//! **Time** is the request's `now_ms` (the gateway's clock, controlled by tests). A clock
//! stepping backwards can at worst make a key look like its bucket was just emptied (the
//! stored arrival time is clamped to one bucket ahead of now).
//!
//! **State** lives in a [`RateLimiters`] registry that outlives snapshots: a stage built from
//! a new snapshot reuses the limiter of every (API id, rule index) and (app key, rule index)
//! whose rule is unchanged, and starts afresh where the rule changed. A key's state is one
//! `AtomicU64` updated by compare-and-swap; keys are sharded in a `DashMap` (no global lock)
//! and stored as a 64-bit keyed SipHash of the key parts (fixed size, no allocation per
//! call). Memory: [`RateLimiters::housekeeping`] drops keys whose bucket is full again
//! (equivalent to never having been seen), and a limiter tracks at most
//! [`RateLimiters::DEFAULT_MAX_KEYS`] keys. A new key at that bound makes room: the buckets
//! full again are dropped at once, and if that is not enough, the buckets closest to full
//! (the least used keys) down to 7/8 of the bound, at most once per [`SWEEP_NS`] per
//! limiter; only a new key arriving while the limiter is full between two sweeps is admitted
//! untracked. Keys that are being used stay tracked however many keys an attacker mints
//! (docs/SECURITY.md, "Trust between merchants").
//!
//! **Addresses.** An `ip` key counts an IPv6 client by its /64 (the prefix one subscriber is
//! given: a client can send from any of its 2^64 addresses), an IPv4 client (or an
//! IPv4-mapped IPv6 address) by its address.
//!
//! **Scope.** A rule with `"scope": "cluster"` is one budget for the whole fleet (module
//! docs of `fleet`, docs/operations/cluster.md "Running a cluster"): with Redis up, calls are taken
//! from a lease on the shared bucket ([`Lease`]); without Redis, while it is down, and for a
//! key's first calls before its first lease, the local bucket runs at `limit / members`
//! (burst split likewise, at least 1), `members` being the gateways registered in
//! ZooKeeper's `nodes/`, read on every call so a join or leave re-splits at once. Keys of
//! cluster rules are hashed with SHA-256 (the same on every node) instead of the
//! per-process SipHash.

use crate::edge::{Carried, EdgeCtx, EdgeRequest, Flow, Stage};
use crate::error::{Code, GatewayError};
use http::HeaderName;
use portico_control::{v1, Snapshot};
use sha2::{Digest, Sha256};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use super::limiters::{Charge, NANOS_PER_MS, NANOS_PER_SEC};
pub use super::limiters::{Limiter, RateLimiters, SWEEP_NS};

/// One part of a rule's key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyPart {
    Api,
    App,
    Ip,
    Header(HeaderName),
    /// Not a known part: a constant.
    Unknown,
}

impl KeyPart {
    fn parse(part: &str) -> Self {
        match part.trim() {
            "api" => KeyPart::Api,
            "app" => KeyPart::App,
            "ip" => KeyPart::Ip,
            other => match other.strip_prefix("header:") {
                Some(name) => HeaderName::from_bytes(name.trim().as_bytes())
                    .map(KeyPart::Header)
                    .unwrap_or(KeyPart::Unknown),
                None => KeyPart::Unknown,
            },
        }
    }

    /// Whether the part varies between calls to the same API.
    fn varies(&self) -> bool {
        matches!(self, KeyPart::App | KeyPart::Ip | KeyPart::Header(_))
    }
}

/// One API rule as the stage applies it.
#[derive(Debug)]
struct ApiRule {
    parts: Vec<KeyPart>,
    limiter: Arc<Limiter>,
    /// A cluster-scope rule: its key is hashed the same on every node.
    cluster: bool,
}

/// SHA-256 as a `Hasher` (its first 8 bytes): the key hash of cluster-scope rules, the same
/// on every node (the per-process SipHash is not).
struct StableHasher(Sha256);

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Applies the API's and the calling app's rate limits.
#[derive(Debug)]
pub struct RateLimitStage {
    apis: HashMap<String, Vec<ApiRule>>,
    apps: HashMap<String, Vec<Arc<Limiter>>>,
    hasher: RandomState,
}

fn per_str(per: v1::Per) -> &'static str {
    match per {
        v1::Per::Second => "second",
        v1::Per::Minute => "minute",
    }
}

impl RateLimitStage {
    /// Builds the stage for `snapshot`, taking limiters from (and registering new ones in)
    /// `limiters`; limiters of rules no longer in the snapshot are dropped from the registry.
    fn with_limiters(snapshot: &Snapshot, limiters: &RateLimiters) -> Self {
        let mut apis = HashMap::new();
        for (id, api) in &snapshot.apis {
            let rules: Vec<ApiRule> = api
                .policy
                .rate_limits
                .iter()
                .enumerate()
                .map(|(i, rule)| {
                    let parts: Vec<KeyPart> =
                        rule.key.parts().into_iter().map(KeyPart::parse).collect();
                    let keyed = parts.iter().any(KeyPart::varies);
                    let limiter = limiters.limiter(
                        "api",
                        &limiters.api,
                        (id.clone(), i),
                        rule,
                        keyed,
                        || {
                            format!(
                                "{} per {} by {}",
                                rule.limit,
                                per_str(rule.per),
                                rule.key.parts().join("+")
                            )
                        },
                    );
                    ApiRule {
                        parts,
                        limiter,
                        cluster: rule.scope == v1::Scope::Cluster,
                    }
                })
                .collect();
            if !rules.is_empty() {
                apis.insert(id.clone(), rules);
            }
        }
        let mut apps = HashMap::new();
        for (key, app) in &snapshot.apps {
            let rules: Vec<Arc<Limiter>> = app
                .rate_limits
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let rule = v1::RateLimitRule {
                        key: v1::RateKey::One("app".to_owned()),
                        limit: l.limit,
                        per: l.per,
                        burst: l.burst,
                        scope: l.scope,
                    };
                    limiters.limiter("app", &limiters.app, (key.clone(), i), &rule, false, || {
                        format!("the app's own {} per {}", l.limit, per_str(l.per))
                    })
                })
                .collect();
            if !rules.is_empty() {
                apps.insert(key.clone(), rules);
            }
        }
        limiters.api.retain(|(id, i), _| {
            snapshot
                .apis
                .get(id)
                .is_some_and(|a| *i < a.policy.rate_limits.len())
        });
        limiters.app.retain(|(key, i), _| {
            snapshot
                .apps
                .get(key)
                .is_some_and(|a| *i < a.rate_limits.len())
        });
        RateLimitStage {
            apis,
            apps,
            hasher: limiters.hasher.clone(),
        }
    }

    /// The hash of a rule's key for this call.
    fn key(&self, rule: &ApiRule, api_id: &str, req: &EdgeRequest<'_>, ctx: &EdgeCtx) -> u64 {
        if rule.cluster {
            Self::key_with(StableHasher(Sha256::new()), &rule.parts, api_id, req, ctx)
        } else {
            Self::key_with(self.hasher.build_hasher(), &rule.parts, api_id, req, ctx)
        }
    }

    fn key_with(
        mut h: impl Hasher,
        parts: &[KeyPart],
        api_id: &str,
        req: &EdgeRequest<'_>,
        ctx: &EdgeCtx,
    ) -> u64 {
        for part in parts {
            match part {
                KeyPart::Api => api_id.hash(&mut h),
                KeyPart::App => ctx.app_key.as_deref().unwrap_or("").hash(&mut h),
                KeyPart::Ip => ctx.client_ip.map(ip_bucket).hash(&mut h),
                KeyPart::Header(name) => req
                    .headers
                    .get(name)
                    .map_or(&b""[..], |v| v.as_bytes())
                    .hash(&mut h),
                KeyPart::Unknown => 0u8.hash(&mut h),
            }
        }
        h.finish()
    }
}

/// The address an `ip` key counts: an IPv6 client's /64, an IPv4 (or IPv4-mapped) client's
/// own address.
pub fn ip_bucket(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V4(_) => ip,
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                std::net::IpAddr::V6(std::net::Ipv6Addr::from(prefix))
            }
        },
    }
}

impl Stage for RateLimitStage {
    /// Reload phase: takes each rule's limiter from the plane's carried registry, the same
    /// limiter (and its buckets) while the rule is unchanged, a fresh one where it changed;
    /// limiters of rules gone are dropped from the registry.
    fn build(snapshot: &Snapshot, carried: &Carried) -> Self {
        RateLimitStage::with_limiters(snapshot, &carried.limiters)
    }

    fn name(&self) -> &'static str {
        "rate_limit"
    }

    /// Request phase, after `permit` (so only admitted callers spend their app's budget).
    /// `Continue`: every applicable rule admitted the call (and counted it); `Respond`: 429
    /// `RATE_LIMITED` with `Retry-After`. Without a route (a pipeline bug) it fails closed
    /// with 500.
    fn apply(&self, req: &EdgeRequest<'_>, ctx: &mut EdgeCtx) -> Flow {
        let Some(api) = ctx.api() else {
            return GatewayError::new(Code::Internal, "rate_limit ran before route").into();
        };
        let api_rules = self
            .apis
            .get(&api.id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let app_rules = ctx
            .app_key
            .as_ref()
            .and_then(|k| self.apps.get(k))
            .map(Vec::as_slice)
            .unwrap_or_default();
        if api_rules.is_empty() && app_rules.is_empty() {
            return Flow::Continue;
        }
        let now = req.now_ms.saturating_mul(NANOS_PER_MS);
        let checks = || {
            api_rules
                .iter()
                .map(|r| (&r.limiter, self.key(r, &api.id, req, ctx)))
                .chain(app_rules.iter().map(|l| (l, 0u64)))
        };
        let mut charged: Vec<(&Arc<Limiter>, u64, Charge)> = Vec::new();
        for (limiter, key) in checks() {
            match limiter.acquire(key, now) {
                Ok(charge) => charged.push((limiter, key, charge)),
                Err(wait_ns) => {
                    for (earlier, key, charge) in charged {
                        earlier.refund(key, charge);
                    }
                    let secs = wait_ns.div_ceil(NANOS_PER_SEC).max(1);
                    return GatewayError::new(
                        Code::RateLimited,
                        format!("rate limit exceeded: {}", limiter.describe),
                    )
                    .with_retry_after(secs)
                    .into();
                }
            }
        }
        Flow::Continue
    }
}

#[cfg(test)]
impl RateLimitStage {
    /// The limiter of rule `index` of API `api_id` (for tests of the reload-carry rule).
    pub(crate) fn api_limiter(&self, api_id: &str, index: usize) -> Option<&Arc<Limiter>> {
        self.apis.get(api_id)?.get(index).map(|r| &r.limiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::Fleet;
    use crate::testing::{api, app, get, routed, NOW_MS};
    use http::HeaderMap;
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use v1::{AppStatus, AuthMode, Per, RateKey, RateLimitRule};

    fn rule(key: &[&str], limit: u32, per: Per, burst: Option<u32>) -> RateLimitRule {
        let key = match key {
            [one] => RateKey::One((*one).to_owned()),
            many => RateKey::Many(many.iter().map(|s| (*s).to_owned()).collect()),
        };
        RateLimitRule {
            key,
            limit,
            per,
            burst,
            scope: v1::Scope::Node,
        }
    }

    fn snapshot(
        apis: &[(&str, Vec<RateLimitRule>)],
        apps: &[(&str, Vec<v1::AppRateLimit>)],
    ) -> Snapshot {
        let mut s = Snapshot::default();
        for (id, rules) in apis {
            s.apis.insert(
                (*id).to_owned(),
                api(id, AuthMode::Signature, rules.clone()),
            );
        }
        for (key, limits) in apps {
            s.apps.insert(
                (*key).to_owned(),
                app("s", AppStatus::Active, &["*"], limits.clone()),
            );
        }
        s
    }

    /// A call as it reaches the stage.
    struct Call<'a> {
        api: &'a str,
        app: Option<&'a str>,
        ip: Option<&'a str>,
        headers: HeaderMap,
        at_ms: u64,
    }

    impl<'a> Call<'a> {
        fn new(api: &'a str) -> Self {
            Call {
                api,
                app: None,
                ip: None,
                headers: HeaderMap::new(),
                at_ms: NOW_MS,
            }
        }
        fn app(mut self, a: &'a str) -> Self {
            self.app = Some(a);
            self
        }
        fn ip(mut self, ip: &'a str) -> Self {
            self.ip = Some(ip);
            self
        }
        fn header(mut self, name: &'static str, value: &str) -> Self {
            self.headers.insert(name, value.parse().unwrap());
            self
        }
        fn at(mut self, ms: u64) -> Self {
            self.at_ms = NOW_MS + ms;
            self
        }
    }

    /// `Ok(())` or `Err(retry_after)`.
    fn run(stage: &RateLimitStage, snapshot: &Snapshot, call: &Call<'_>) -> Result<(), u64> {
        let req = EdgeRequest {
            method: "GET",
            path: "/x",
            query: None,
            headers: &call.headers,
            peer: None,
            body: b"",
            now_ms: call.at_ms,
        };
        let mut ctx = routed(&snapshot.apis[call.api]);
        ctx.app_key = call.app.map(str::to_owned);
        ctx.app = call.app.and_then(|k| snapshot.apps.get(k).cloned());
        ctx.client_ip = call.ip.map(|s| s.parse::<IpAddr>().unwrap());
        match stage.apply(&req, &mut ctx) {
            Flow::Continue => Ok(()),
            Flow::Respond(Err(e)) => {
                assert_eq!(e.code, Code::RateLimited);
                assert_eq!(e.status(), 429);
                Err(e.retry_after.unwrap())
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// How many of `n` identical calls pass.
    fn passes(stage: &RateLimitStage, snapshot: &Snapshot, call: &Call<'_>, n: usize) -> usize {
        (0..n)
            .filter(|_| run(stage, snapshot, call).is_ok())
            .count()
    }

    #[test]
    fn exactly_limit_pass_then_429_then_refill() {
        let snap = snapshot(&[("a", vec![rule(&["api"], 5, Per::Second, None)])], &[]);
        let reg = RateLimiters::new();
        let stage = RateLimitStage::with_limiters(&snap, &reg);
        let call = Call::new("a");
        assert_eq!(passes(&stage, &snap, &call, 5), 5);
        assert_eq!(run(&stage, &snap, &call), Err(1));
        // 200 ms later one call's worth (1/5 s) has come back, not two.
        let later = Call::new("a").at(200);
        assert_eq!(passes(&stage, &snap, &later, 3), 1);
        // After a full period the whole burst is back.
        let much_later = Call::new("a").at(1200);
        assert_eq!(passes(&stage, &snap, &much_later, 10), 5);
    }

    #[test]
    fn per_minute_and_retry_after() {
        let snap = snapshot(&[("a", vec![rule(&["api"], 2, Per::Minute, None)])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(passes(&stage, &snap, &Call::new("a"), 2), 2);
        // One call every 30 s: the next is 30 s away.
        assert_eq!(run(&stage, &snap, &Call::new("a")), Err(30));
        assert_eq!(run(&stage, &snap, &Call::new("a").at(20_500)), Err(10));
        assert_eq!(run(&stage, &snap, &Call::new("a").at(30_000)), Ok(()));
        assert_eq!(run(&stage, &snap, &Call::new("a").at(30_000)), Err(30));
    }

    #[test]
    fn burst_sets_the_bucket_size() {
        let snap = snapshot(
            &[("a", vec![rule(&["api"], 10, Per::Second, Some(2))])],
            &[],
        );
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(passes(&stage, &snap, &Call::new("a"), 5), 2);
        assert_eq!(passes(&stage, &snap, &Call::new("a").at(100), 5), 1);
    }

    #[test]
    fn ip_key_counts_per_address_and_missing_parts_share_one_bucket() {
        let snap = snapshot(&[("a", vec![rule(&["ip"], 2, Per::Second, None)])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(passes(&stage, &snap, &Call::new("a").ip("192.0.2.1"), 3), 2);
        assert_eq!(passes(&stage, &snap, &Call::new("a").ip("192.0.2.2"), 3), 2);
        assert_eq!(
            passes(&stage, &snap, &Call::new("a").ip("2001:db8::1"), 3),
            2
        );
        assert_eq!(passes(&stage, &snap, &Call::new("a"), 3), 2);
    }

    #[test]
    fn header_key_and_combined_key() {
        let snap = snapshot(
            &[
                ("h", vec![rule(&["header:X-Region"], 1, Per::Second, None)]),
                (
                    "c",
                    vec![rule(&["app", "header:x-region"], 1, Per::Second, None)],
                ),
            ],
            &[],
        );
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        let east = Call::new("h").header("x-region", "east");
        let west = Call::new("h").header("x-region", "west");
        assert_eq!(passes(&stage, &snap, &east, 2), 1);
        assert_eq!(passes(&stage, &snap, &west, 2), 1);
        assert_eq!(passes(&stage, &snap, &Call::new("h"), 2), 1);
        // Header absent and header empty are the same (empty) value.
        assert_eq!(
            passes(&stage, &snap, &Call::new("h").header("x-region", ""), 1),
            0
        );

        // Combined: each (app, region) pair has its own bucket.
        assert_eq!(
            passes(
                &stage,
                &snap,
                &Call::new("c").app("m1").header("x-region", "east"),
                2
            ),
            1
        );
        assert_eq!(
            passes(
                &stage,
                &snap,
                &Call::new("c").app("m1").header("x-region", "west"),
                2
            ),
            1
        );
        assert_eq!(
            passes(
                &stage,
                &snap,
                &Call::new("c").app("m2").header("x-region", "east"),
                2
            ),
            1
        );
        // Parts cannot run into each other: ("ab", "c") is not ("a", "bc").
        assert_eq!(
            passes(
                &stage,
                &snap,
                &Call::new("c").app("ab").header("x-region", "c"),
                1
            ),
            1
        );
        assert_eq!(
            passes(
                &stage,
                &snap,
                &Call::new("c").app("a").header("x-region", "bc"),
                1
            ),
            1
        );
    }

    #[test]
    fn app_limits_count_across_apis_and_refused_calls_are_refunded() {
        let snap = snapshot(
            &[
                ("a", vec![]),
                ("b", vec![rule(&["ip"], 1, Per::Second, None)]),
            ],
            &[(
                "m1",
                vec![v1::AppRateLimit {
                    limit: 3,
                    per: Per::Second,
                    burst: None,
                    scope: v1::Scope::Node,
                }],
            )],
        );
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(run(&stage, &snap, &Call::new("a").app("m1")), Ok(()));
        assert_eq!(
            run(&stage, &snap, &Call::new("b").app("m1").ip("192.0.2.1")),
            Ok(())
        );
        // Refused by the ip rule of "b" (checked first): the app's budget is not spent.
        assert_eq!(
            run(&stage, &snap, &Call::new("b").app("m1").ip("192.0.2.1")),
            Err(1)
        );
        assert_eq!(run(&stage, &snap, &Call::new("a").app("m1")), Ok(()));
        // Three calls over two APIs: the app's limit is reached.
        assert_eq!(run(&stage, &snap, &Call::new("a").app("m1")), Err(1));
        // Refused by the app limit: the ip rule's charge is given back.
        assert_eq!(
            run(&stage, &snap, &Call::new("b").app("m1").ip("192.0.2.3")),
            Err(1)
        );
        assert_eq!(run(&stage, &snap, &Call::new("b").ip("192.0.2.3")), Ok(()));
        // Unsigned calls have no app limit; an app without limits has none either.
        assert_eq!(passes(&stage, &snap, &Call::new("a"), 10), 10);
        assert_eq!(passes(&stage, &snap, &Call::new("a").app("m2"), 10), 10);
        // A second later the app's budget is back.
        assert_eq!(
            passes(&stage, &snap, &Call::new("a").app("m1").at(1000), 5),
            3
        );
    }

    #[test]
    fn limiters_survive_rebuilds_with_unchanged_rules_and_reset_on_change() {
        let reg = RateLimiters::new();
        let app_limit = vec![v1::AppRateLimit {
            limit: 1,
            per: Per::Minute,
            burst: None,
            scope: v1::Scope::Node,
        }];
        let snap1 = snapshot(
            &[
                ("a", vec![rule(&["api"], 2, Per::Second, None)]),
                ("b", vec![rule(&["api"], 2, Per::Second, None)]),
                ("c", vec![]),
            ],
            &[("m1", app_limit.clone())],
        );
        let stage1 = RateLimitStage::with_limiters(&snap1, &reg);
        assert_eq!(passes(&stage1, &snap1, &Call::new("a"), 2), 2);
        assert_eq!(passes(&stage1, &snap1, &Call::new("b"), 2), 2);
        assert_eq!(run(&stage1, &snap1, &Call::new("c").app("m1")), Ok(()));
        assert_eq!(run(&stage1, &snap1, &Call::new("c").app("m1")), Err(60));
        assert_eq!(reg.limiters(), 3);

        // "a" unchanged, "b" changed, the app's limit unchanged.
        let snap2 = snapshot(
            &[
                ("a", vec![rule(&["api"], 2, Per::Second, None)]),
                ("b", vec![rule(&["api"], 3, Per::Second, None)]),
                ("c", vec![]),
            ],
            &[("m1", app_limit)],
        );
        let stage2 = RateLimitStage::with_limiters(&snap2, &reg);
        assert_eq!(run(&stage2, &snap2, &Call::new("a")), Err(1));
        assert_eq!(passes(&stage2, &snap2, &Call::new("b"), 4), 3);
        assert_eq!(
            run(&stage2, &snap2, &Call::new("c").app("m1").at(2000)),
            Err(58)
        );
        // The old stage, still serving in-flight calls, shares the surviving limiters.
        assert_eq!(run(&stage1, &snap1, &Call::new("a")), Err(1));

        // Removed rules are dropped from the registry.
        let snap3 = snapshot(&[("a", vec![rule(&["api"], 2, Per::Second, None)])], &[]);
        let _stage3 = RateLimitStage::with_limiters(&snap3, &reg);
        assert_eq!(reg.limiters(), 1);
    }

    #[test]
    fn cluster_scope_without_redis_is_split_by_the_live_members_at_once() {
        let fleet = Arc::new(Fleet::default());
        fleet.set_members(3);
        let reg = RateLimiters::with_fleet(Arc::clone(&fleet));
        let mut cluster = rule(&["api"], 6, Per::Second, None);
        cluster.scope = v1::Scope::Cluster;
        let snap = snapshot(
            &[
                ("c", vec![cluster]),
                ("n", vec![rule(&["api"], 6, Per::Second, None)]),
            ],
            &[(
                "m1",
                vec![v1::AppRateLimit {
                    limit: 30,
                    per: Per::Second,
                    burst: None,
                    scope: v1::Scope::Cluster,
                }],
            )],
        );
        let stage = RateLimitStage::with_limiters(&snap, &reg);
        // 6/s over three nodes: this one admits 2 at once, then one every 500 ms.
        assert_eq!(passes(&stage, &snap, &Call::new("c"), 10), 2);
        assert_eq!(passes(&stage, &snap, &Call::new("c").at(500), 10), 1);
        // A node-scope rule is not split.
        assert_eq!(passes(&stage, &snap, &Call::new("n"), 10), 6);
        // The app's own cluster limit too: 30/s over three is 10.
        assert_eq!(
            passes(&stage, &snap, &Call::new("n").app("m1").at(5000), 20),
            6
        );
        assert_eq!(
            passes(&stage, &snap, &Call::new("c").app("m1").at(5000), 20),
            2
        );
        // Two nodes left: re-split on the next call, without a rebuild.
        fleet.set_members(2);
        assert_eq!(passes(&stage, &snap, &Call::new("c").at(10_000), 10), 3);
    }

    #[test]
    fn cluster_keys_hash_the_same_in_every_process() {
        let key = |stage: &RateLimitStage, snap: &Snapshot| {
            let r = &stage.apis["c"][0];
            let mut headers = HeaderMap::new();
            headers.insert("x-region", "east".parse().unwrap());
            let req = EdgeRequest {
                method: "GET",
                path: "/x",
                query: None,
                headers: &headers,
                peer: None,
                body: b"",
                now_ms: NOW_MS,
            };
            let mut ctx = routed(&snap.apis["c"]);
            ctx.app_key = Some("m1".into());
            stage.key(r, "c", &req, &ctx)
        };
        let mut cluster = rule(&["app", "header:x-region"], 6, Per::Second, None);
        cluster.scope = v1::Scope::Cluster;
        let snap = snapshot(&[("c", vec![cluster])], &[]);
        // Two registries stand for two processes: different SipHash keys, same cluster key.
        let a = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        let b = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(key(&a, &snap), key(&b, &snap));
    }

    #[test]
    fn housekeeping_drops_idle_keys_only() {
        let reg = RateLimiters::new();
        let snap = snapshot(&[("a", vec![rule(&["ip"], 1, Per::Minute, None)])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &reg);
        for i in 0..100 {
            let ip = format!("10.0.0.{i}");
            assert_eq!(run(&stage, &snap, &Call::new("a").ip(&ip)), Ok(()));
        }
        assert_eq!(reg.tracked_keys(), 100);
        reg.housekeeping_at(NOW_MS + 30_000);
        assert_eq!(reg.tracked_keys(), 100);
        // A bucket that has refilled is the same as an unseen one: dropped.
        reg.housekeeping_at(NOW_MS + 60_000);
        assert_eq!(reg.tracked_keys(), 0);
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("10.0.0.1").at(60_000)),
            Ok(())
        );
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("10.0.0.1").at(60_000)),
            Err(60)
        );
    }

    #[test]
    fn at_the_key_bound_the_least_used_keys_make_room() {
        let reg = RateLimiters::with_max_keys(8);
        let snap = snapshot(&[("a", vec![rule(&["ip"], 1, Per::Minute, None)])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &reg);
        // Eight keys, each with its one call of the minute spent.
        for i in 0..8 {
            let ip = format!("10.0.0.{i}");
            assert_eq!(
                run(&stage, &snap, &Call::new("a").ip(&ip).at(i * 1000)),
                Ok(())
            );
        }
        assert_eq!(reg.tracked_keys(), 8);
        // A ninth key: the least used (the oldest, closest to full) make room; it is tracked
        // and limited like any other.
        let nine = Call::new("a").ip("10.0.0.9").at(9_000);
        assert_eq!(run(&stage, &snap, &nine), Ok(()));
        assert_eq!(run(&stage, &snap, &nine), Err(60));
        assert!(reg.tracked_keys() <= 8, "{}", reg.tracked_keys());
        // The most recently used keys are still limited: no failing open for them.
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("10.0.0.7").at(9_000)),
            Err(58)
        );
        // Within the sweep interval a further newcomer finds no room: admitted untracked.
        assert_eq!(
            passes(&stage, &snap, &Call::new("a").ip("10.0.1.1").at(9_010), 3),
            3
        );
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let snap = snapshot(&[("a", vec![rule(&["ip"], 1, Per::Minute, None)])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("2001:db8:1:2::1")),
            Ok(())
        );
        // Another address of the same /64: the same bucket.
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("2001:db8:1:2:ffff::9")),
            Err(60)
        );
        // Another /64: its own.
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("2001:db8:1:3::1")),
            Ok(())
        );
        // IPv4, plain or mapped: by address.
        assert_eq!(run(&stage, &snap, &Call::new("a").ip("192.0.2.1")), Ok(()));
        assert_eq!(
            run(&stage, &snap, &Call::new("a").ip("::ffff:192.0.2.1")),
            Err(60)
        );
        assert_eq!(run(&stage, &snap, &Call::new("a").ip("192.0.2.2")), Ok(()));
    }

    #[test]
    fn zero_limit_refuses_and_backward_clock_is_bounded() {
        let snap = snapshot(
            &[
                ("z", vec![rule(&["api"], 0, Per::Minute, None)]),
                ("a", vec![rule(&["api"], 1, Per::Second, None)]),
            ],
            &[],
        );
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(run(&stage, &snap, &Call::new("z")), Err(60));
        assert_eq!(run(&stage, &snap, &Call::new("a").at(10_000)), Ok(()));
        // The clock steps back 10 s: the bucket looks empty, for one interval only.
        assert_eq!(run(&stage, &snap, &Call::new("a")), Err(1));
        assert_eq!(run(&stage, &snap, &Call::new("a").at(1000)), Ok(()));
    }

    #[test]
    fn no_rules_continue_and_no_route_fails_closed() {
        let snap = snapshot(&[("a", vec![])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        assert_eq!(passes(&stage, &snap, &Call::new("a"), 100), 100);
        let headers = HeaderMap::new();
        let req = get("/x", &headers, None);
        assert!(matches!(
            stage.apply(&req, &mut EdgeCtx::default()),
            Flow::Respond(_)
        ));
    }

    #[test]
    fn concurrent_calls_never_exceed_the_burst() {
        let snap = snapshot(&[("a", vec![rule(&["ip"], 1000, Per::Minute, None)])], &[]);
        let stage = RateLimitStage::with_limiters(&snap, &RateLimiters::new());
        let admitted = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let call = Call::new("a").ip("192.0.2.1");
                    let n = passes(&stage, &snap, &call, 500);
                    admitted.fetch_add(n, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 1000);
    }
}
