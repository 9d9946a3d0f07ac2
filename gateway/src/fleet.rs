//! The fleet: what one gateway knows of the others (docs/operations/cluster.md, "Running a cluster").
//!
//! - **Membership.** How many gateways are registered in ZooKeeper's `nodes/` (followed with a
//!   child watch by `portico_control::zk`), at least 1. Cluster-scope rate limits are split by
//!   it when there is no Redis or Redis is down: each node admits `limit / members`.
//! - **Redis** (`--redis redis://host:port` or `rediss://` for TLS, optional; an ACL user and
//!   password from `--redis-user` and `--redis-password-file` / `PORTICO_REDIS_PASSWORD`,
//!   [`RedisSettings`]). Shared counters for cluster-scope rate
//!   limits ([`Lease`]) and the cluster-wide nonce record ([`Fleet::claim_nonce`]). One
//!   connection (multiplexed, reconnecting), a health probe every [`PROBE_EVERY`]; its state
//!   is `/status`'s `redis` and `/metrics`' `portico_redis_up`. While Redis is down, limits
//!   fall back to the membership split and nonces to the node's own replay cache: requests
//!   never fail because of Redis.
//!
//! # Leases: a cluster budget without a Redis round trip per request
//! A cluster-scope rule keeps its bucket in Redis: a GCRA "theoretical arrival time" per rule
//! and key, updated by one Lua script ([`LEASE_SCRIPT`]) that grants up to `want` calls at
//! once. Each node takes calls from a local lease and asks Redis for the next batch, off the
//! request path, when the lease runs low: a batch is the node's demand over the last
//! [`LEASE_LEAD`] (0.1 s) of traffic, at most 0.1 s of the rule's limit, and a refill is asked
//! when half of the last batch is left. A request thus waits on Redis never; at high rates a
//! node makes about ten Redis calls a second per key (at most [`MIN_POLL`] apart while the
//! bucket is empty), whatever its request rate.
//!
//! A key no node served within [`WARM`] (1 s) is *cold*: its first calls are admitted on the
//! membership split while the first lease is on its way, and charged to Redis with the next
//! refill (`debt`), so they count against the shared budget all the same.
//!
//! **Error bound.** Redis grants exactly the GCRA budget (`limit` per period plus `burst`).
//! Over any window the fleet admits at most that plus the cold-start admissions of a
//! period in which Redis has not answered yet (at most one split burst per node), and at
//! least that minus the tokens leased but unspent: at most one batch (0.1 s of the limit) per
//! node and key, which expire after [`LEASE_TTL`] (1 s). For 300/s on three nodes: at most
//! 90 calls under the limit in a second when load moves away from a node, none above it in
//! steady state.

use crate::error::{Code, GatewayError};
use arc_swap::ArcSwapOption;
use prometheus::{IntCounter, IntGauge, Registry};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// A lease holds about this much of a node's demand, in seconds.
pub const LEASE_LEAD: f64 = 0.1;
/// Leased calls not spent within this are dropped (they would be admitted late).
pub const LEASE_TTL: Duration = Duration::from_secs(1);
/// A key Redis answered for within this is warm: its calls come from the lease only.
pub const WARM: Duration = Duration::from_secs(1);
/// While Redis says a bucket is empty, a node asks again at most this often.
pub const MIN_POLL: Duration = Duration::from_millis(10);
/// The health probe's period.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);
/// The longest a Redis command may take before Redis counts as down.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(250);

/// One batch grant on a GCRA bucket, in one round trip. KEYS[1]: the bucket; ARGV: the
/// emission interval (µs, may be fractional), the tolerance (burst × interval, µs), the calls
/// wanted, the calls already admitted to charge (`debt`). Time is Redis's own (`TIME`), so
/// the nodes' clocks do not matter. Returns `{granted, wait_µs}`: `wait` is the time until
/// one more call would be granted when fewer than wanted were.
pub const LEASE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local debt = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
tat = tat + debt * interval
if tat > now + tolerance then tat = now + tolerance end
local avail = math.floor((now + tolerance - tat) / interval)
local grant = want
if avail < grant then grant = avail end
if grant < 0 then grant = 0 end
tat = tat + grant * interval
local wait = 0
if grant < want then wait = tat + interval - (now + tolerance) end
if wait < 0 then wait = 0 end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return {grant, math.floor(wait)}
";

/// Metrics of the fleet, registered once on the gateway's registry.
#[derive(Clone)]
pub struct FleetMetrics {
    /// 1 while Redis answers (or none is configured: then 0 and `redis` absent in /status).
    pub redis_up: IntGauge,
    /// Gateways registered in `nodes/`, as used for the split.
    pub members: IntGauge,
    /// Redis commands that failed or timed out.
    pub redis_errors: IntCounter,
    /// Lease refills asked of Redis.
    pub lease_refills: IntCounter,
    /// Signed calls whose nonce could not be recorded cluster-wide (Redis down): checked by
    /// the node's own replay cache only.
    pub nonce_unchecked: IntCounter,
}

impl FleetMetrics {
    fn new() -> FleetMetrics {
        // The names and help texts are constants: these cannot fail.
        let gauge = |n: &str, h: &str| IntGauge::new(n, h).unwrap_or_else(|_| unreachable!());
        let counter = |n: &str, h: &str| IntCounter::new(n, h).unwrap_or_else(|_| unreachable!());
        FleetMetrics {
            redis_up: gauge(
                "portico_redis_up",
                "1 while Redis (--redis) answers, else 0",
            ),
            members: gauge(
                "portico_cluster_members",
                "Gateways registered in ZooKeeper nodes/ (cluster-scope limits split by it)",
            ),
            redis_errors: counter(
                "portico_redis_errors_total",
                "Redis commands that failed or timed out",
            ),
            lease_refills: counter(
                "portico_rate_limit_lease_refills_total",
                "Batches of cluster-scope rate-limit calls asked of Redis",
            ),
            nonce_unchecked: counter(
                "portico_replay_cluster_unchecked_total",
                "Signed calls whose nonce was checked by this node only (Redis down)",
            ),
        }
    }

    /// Registers every series on `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.redis_up.clone()))?;
        registry.register(Box::new(self.members.clone()))?;
        registry.register(Box::new(self.redis_errors.clone()))?;
        registry.register(Box::new(self.lease_refills.clone()))?;
        registry.register(Box::new(self.nonce_unchecked.clone()))?;
        Ok(())
    }
}

/// The Redis side: the connection and its health.
struct RedisLink {
    url: String,
    client: redis::Client,
    conn: ArcSwapOption<ConnectionManager>,
    up: AtomicBool,
    /// Unix ms of the last change of `up` (the start, before the first probe).
    since_ms: AtomicU64,
    last_error: ArcSwapOption<String>,
    script: redis::Script,
    /// An authentication refusal was logged (reset when Redis answers).
    auth_logged: AtomicBool,
}

/// A batch to ask of Redis for a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefillAsk {
    pub want: u32,
    pub debt: u32,
}

struct RefillJob {
    lease: Arc<Lease>,
    ask: RefillAsk,
}

/// What the gateway knows of its fleet; one per process, shared by both planes.
pub struct Fleet {
    members: AtomicU32,
    redis: Option<RedisLink>,
    refills: Option<mpsc::UnboundedSender<RefillJob>>,
    refill_rx: Mutex<Option<mpsc::UnboundedReceiver<RefillJob>>>,
    pub metrics: FleetMetrics,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("members", &self.members())
            .field("redis", &self.redis.as_ref().map(|r| &r.url))
            .finish()
    }
}

impl Default for Fleet {
    /// A gateway on its own: one member, no Redis.
    fn default() -> Self {
        // Without Redis there is no URL to refuse.
        Fleet::with_redis(None).unwrap_or_else(|_| unreachable!())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How to reach Redis: the URL (`redis://host:port[/db]`, or `rediss://` for TLS) and the
/// credentials, which never come from the command line (docs/operations/cluster.md, "Redis
/// credentials and TLS"): the ACL user (`--redis-user`, default `default`) and the password
/// from a file of mode 0600 (`--redis-password-file`) or `PORTICO_REDIS_PASSWORD`.
#[derive(Clone, Default)]
pub struct RedisSettings {
    pub url: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// PEM CA certificates a `rediss://` server is verified against (else the system's).
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact(&self.url))
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca_pem", &self.ca_pem.is_some())
            .finish()
    }
}

impl RedisSettings {
    /// Settings for `url` without credentials.
    pub fn url(url: &str) -> RedisSettings {
        RedisSettings {
            url: url.to_owned(),
            ..RedisSettings::default()
        }
    }

    /// The client these settings describe (nothing connects yet): the URL's own user and
    /// password are replaced by `user` / `password` when those are given.
    pub fn client(&self) -> redis::RedisResult<redis::Client> {
        use redis::IntoConnectionInfo as _;
        let mut info = self.url.as_str().into_connection_info()?;
        if let Some(user) = &self.user {
            info.redis.username = Some(user.clone());
        }
        if let Some(password) = &self.password {
            info.redis.password = Some(password.clone());
        }
        let tls = matches!(info.addr, redis::ConnectionAddr::TcpTls { .. });
        if tls {
            // rustls needs a process-wide provider; the gateway's is ring (a second install
            // is refused harmlessly).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        match (&self.ca_pem, tls) {
            (Some(pem), true) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            _ => redis::Client::open(info),
        }
    }
}

impl Fleet {
    /// A fleet using Redis as `redis` says when given; `Err` for a URL the client refuses.
    /// Nothing connects until [`Fleet::start`].
    pub fn with_redis(redis: Option<RedisSettings>) -> redis::RedisResult<Fleet> {
        let metrics = FleetMetrics::new();
        metrics.members.set(1);
        let client = redis.as_ref().map(RedisSettings::client).transpose()?;
        let (refills, refill_rx) = match &redis {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        Ok(Fleet {
            members: AtomicU32::new(1),
            redis: redis.zip(client).map(|(settings, client)| RedisLink {
                url: settings.url,
                client,
                conn: ArcSwapOption::empty(),
                up: AtomicBool::new(false),
                since_ms: AtomicU64::new(portico_control::clock::now_ms()),
                last_error: ArcSwapOption::empty(),
                script: redis::Script::new(LEASE_SCRIPT),
                auth_logged: AtomicBool::new(false),
            }),
            refills,
            refill_rx: Mutex::new(refill_rx),
            metrics,
        })
    }

    /// Starts following `members` (ZooKeeper's `nodes/`, when the gateway runs on ZooKeeper)
    /// and, with Redis, the connection, its probe and the lease refills, on `rt`.
    pub fn start(
        self: &Arc<Self>,
        rt: &tokio::runtime::Handle,
        members: Option<watch::Receiver<Option<usize>>>,
    ) {
        if let Some(mut rx) = members {
            let fleet = Arc::clone(self);
            rt.spawn(async move {
                loop {
                    let seen = *rx.borrow_and_update();
                    if let Some(n) = seen {
                        fleet.set_members(n);
                    }
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            });
        }
        if self.redis.is_some() {
            let fleet = Arc::clone(self);
            rt.spawn(async move { fleet.probe_loop().await });
            if let Some(mut rx) = lock(&self.refill_rx).take() {
                let fleet = Arc::clone(self);
                rt.spawn(async move {
                    while let Some(job) = rx.recv().await {
                        let fleet = Arc::clone(&fleet);
                        tokio::spawn(async move { fleet.refill_now(job).await });
                    }
                });
            }
        }
    }

    /// Sets the number of live gateways (at least 1 is used).
    pub fn set_members(&self, n: usize) {
        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        if self.members.swap(n, Ordering::Relaxed) != n {
            tracing::info!(members = n, "fleet: cluster-scope limits now split by {n}");
        }
        self.metrics.members.set(i64::from(n));
    }

    /// The number of live gateways, at least 1.
    pub fn members(&self) -> u32 {
        self.members.load(Ordering::Relaxed).max(1)
    }

    /// Whether Redis is configured.
    pub fn has_redis(&self) -> bool {
        self.redis.is_some()
    }

    /// Whether Redis is configured and answering: cluster-scope limits use leases.
    pub fn redis_up(&self) -> bool {
        self.redis
            .as_ref()
            .is_some_and(|r| r.up.load(Ordering::Relaxed))
    }

    /// `/status`'s `redis` block: `{"url", "state": "ok"|"down", "since", "last_error"}`, or
    /// `None` without Redis.
    pub fn redis_status(&self) -> Option<portico_control::status::RedisStatus> {
        let r = self.redis.as_ref()?;
        let since_ms = r.since_ms.load(Ordering::Relaxed);
        let since =
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(since_ms) * 1_000_000)
                .ok()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                });
        Some(portico_control::status::RedisStatus {
            url: redact(&r.url),
            state: if r.up.load(Ordering::Relaxed) {
                "ok"
            } else {
                "down"
            }
            .to_owned(),
            since,
            since_unix_ms: since_ms,
            last_error: r.last_error.load_full().map(|e| (*e).clone()),
        })
    }

    fn mark(&self, up: bool, error: Option<String>) {
        let Some(r) = &self.redis else { return };
        if let Some(e) = error {
            self.metrics.redis_errors.inc();
            r.last_error.store(Some(Arc::new(e)));
        }
        if up {
            r.auth_logged.store(false, Ordering::Relaxed);
        }
        if r.up.swap(up, Ordering::Relaxed) != up {
            r.since_ms
                .store(portico_control::clock::now_ms(), Ordering::Relaxed);
            if up {
                tracing::info!(url = %redact(&r.url), "redis: up; cluster-scope limits and nonces shared again");
            } else {
                tracing::warn!(url = %redact(&r.url), error = ?r.last_error.load_full(), "redis: down; cluster-scope limits split by membership, nonces checked per node");
            }
        }
        self.metrics.redis_up.set(i64::from(up));
    }

    /// Connects (retrying), then probes with `PING` every [`PROBE_EVERY`]; the connection
    /// manager reconnects by itself after a failure.
    async fn probe_loop(self: Arc<Self>) {
        let Some(r) = &self.redis else { return };
        loop {
            let conn = r.conn.load_full();
            match conn {
                None => match connect(&r.client).await {
                    Ok(c) => {
                        r.conn.store(Some(Arc::new(c)));
                        continue;
                    }
                    Err(e) => {
                        self.auth_failed(r, &e);
                        self.mark(false, Some(format!("connect: {e}")))
                    }
                },
                Some(c) => {
                    let mut c = (*c).clone();
                    let ping = tokio::time::timeout(
                        REDIS_TIMEOUT,
                        redis::cmd("PING").query_async::<String>(&mut c),
                    )
                    .await;
                    match ping {
                        Ok(Ok(_)) => self.mark(true, None),
                        Ok(Err(e)) => {
                            self.auth_failed(r, &e);
                            self.mark(false, Some(format!("PING: {e}")))
                        }
                        Err(_) => self.mark(false, Some("PING: timed out".to_owned())),
                    }
                }
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// Logs, once until Redis answers again, that Redis refused the credentials (none given
    /// to a server that wants them, or wrong ones).
    fn auth_failed(&self, r: &RedisLink, e: &redis::RedisError) {
        if auth_refused(e) && !r.auth_logged.swap(true, Ordering::Relaxed) {
            tracing::error!(url = %redact(&r.url), error = %e, "redis: authentication refused: give the ACL user (--redis-user) and its password (--redis-password-file or PORTICO_REDIS_PASSWORD)");
        }
    }

    /// The shared Redis connection while Redis is configured and answering; `None`
    /// otherwise.
    pub fn redis_conn(&self) -> Option<ConnectionManager> {
        self.conn()
    }

    /// The Redis URL (`--redis`), for a module that needs its own connection.
    pub fn redis_url(&self) -> Option<&str> {
        self.redis.as_ref().map(|r| r.url.as_str())
    }

    /// A client for Redis with the fleet's credentials and TLS, for a module that needs its
    /// own connection (the notifications store, the wake-up subscription).
    pub fn redis_client(&self) -> Option<&redis::Client> {
        self.redis.as_ref().map(|r| &r.client)
    }

    /// Records a failed Redis command of another module (the notifications store): counted
    /// in `portico_redis_errors_total` and shown as `/status`'s `redis.last_error`.
    pub fn redis_failed(&self, error: String) {
        self.mark(false, Some(error));
    }

    fn conn(&self) -> Option<ConnectionManager> {
        let r = self.redis.as_ref()?;
        if !r.up.load(Ordering::Relaxed) {
            return None;
        }
        r.conn.load_full().map(|c| (*c).clone())
    }

    /// Asks Redis for a batch for `lease`, off the request path (a no-op without Redis: the
    /// lease is released).
    pub fn refill(&self, lease: &Arc<Lease>, ask: RefillAsk) {
        let job = RefillJob {
            lease: Arc::clone(lease),
            ask,
        };
        let sent = self.refills.as_ref().map(|tx| tx.send(job));
        if !matches!(sent, Some(Ok(()))) {
            lease.failed(ask.debt);
        }
    }

    async fn refill_now(&self, job: RefillJob) {
        let (Some(r), Some(mut conn)) = (&self.redis, self.conn()) else {
            job.lease.failed(job.ask.debt);
            return;
        };
        self.metrics.lease_refills.inc();
        let mut inv = r.script.key(&job.lease.redis_key);
        inv.arg(format!("{:.3}", job.lease.interval_us))
            .arg(format!("{:.3}", job.lease.tolerance_us))
            .arg(job.ask.want)
            .arg(job.ask.debt);
        let result =
            tokio::time::timeout(REDIS_TIMEOUT, inv.invoke_async::<(u64, u64)>(&mut conn)).await;
        let now = now_ns();
        match result {
            Ok(Ok((granted, wait_us))) => {
                let granted = u32::try_from(granted).unwrap_or(u32::MAX);
                job.lease
                    .fill(granted, job.ask.want, wait_us.saturating_mul(1000), now);
            }
            Ok(Err(e)) => {
                job.lease.failed(job.ask.debt);
                self.mark(false, Some(format!("lease: {e}")));
            }
            Err(_) => {
                job.lease.failed(job.ask.debt);
                self.mark(false, Some("lease: timed out".to_owned()));
            }
        }
    }

    /// Records a signed call's nonce cluster-wide (`SET key 1 NX PX window`), after the
    /// node's own replay cache found it fresh (docs/SECURITY.md, "Replays"). `Err` 401
    /// `NONCE_REPLAYED` when another node (or this one) recorded it already; without Redis,
    /// or with Redis down or slow, `Ok` (fail open to the node's own cache, counted in
    /// `portico_replay_cluster_unchecked_total`).
    pub async fn claim_nonce(&self, claim: &NonceClaim) -> Result<(), GatewayError> {
        if self.redis.is_none() {
            return Ok(());
        }
        let Some(mut conn) = self.conn() else {
            self.metrics.nonce_unchecked.inc();
            return Ok(());
        };
        let mut cmd = redis::cmd("SET");
        cmd.arg(&claim.key)
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(claim.ttl_ms.max(1));
        let set = cmd.query_async::<Option<String>>(&mut conn);
        match tokio::time::timeout(REDIS_TIMEOUT, set).await {
            Ok(Ok(Some(_))) => Ok(()),
            Ok(Ok(None)) => Err(GatewayError::new(
                Code::NonceReplayed,
                "this nonce was already used by this app within the last 300 s",
            )),
            Ok(Err(e)) => {
                self.metrics.nonce_unchecked.inc();
                self.mark(false, Some(format!("nonce: {e}")));
                Ok(())
            }
            Err(_) => {
                self.metrics.nonce_unchecked.inc();
                self.mark(false, Some("nonce: timed out".to_owned()));
                Ok(())
            }
        }
    }
}

/// A nonce to record cluster-wide: set by `auth` for a signed call when the fleet has Redis,
/// claimed by the pipeline right after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceClaim {
    /// `portico:nonce:<hex of SHA-256(app key, nonce), 128 bits>`.
    pub key: String,
    /// How long to remember it: until the call's timestamp + 300 s.
    pub ttl_ms: u64,
}

impl NonceClaim {
    pub fn new(app_key: &str, nonce: &str, remember_until_ms: u64, now_ms: u64) -> NonceClaim {
        let mut h = Sha256::new();
        h.update(app_key.as_bytes());
        h.update([0u8]);
        h.update(nonce.as_bytes());
        let digest = h.finalize();
        NonceClaim {
            key: format!("portico:nonce:{}", hex::encode(&digest[..16])),
            ttl_ms: remember_until_ms.saturating_sub(now_ms).max(1),
        }
    }
}

async fn connect(client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    connect_with(client, REDIS_TIMEOUT).await
}

/// A connection by `client` whose commands time out after `timeout` (connecting too); it
/// reconnects by itself. The fleet's own uses [`REDIS_TIMEOUT`]; the notifications store
/// opens another, so its traffic never queues behind or before the request path's.
pub async fn connect_with(
    client: &redis::Client,
    timeout: Duration,
) -> redis::RedisResult<ConnectionManager> {
    let client = client.clone();
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(timeout)
        .set_response_timeout(timeout)
        .set_number_of_retries(1);
    ConnectionManager::new_with_config(client, config).await
}

/// Reads a secret from `path` (the one rule for secret files: `portico_control::secret_file`).
pub fn read_private_file(path: &std::path::Path) -> Result<String, String> {
    portico_control::secret_file::read(path)
}

/// Whether Redis refused the credentials (none given to a server that wants them, or wrong
/// ones).
pub fn auth_refused(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || text.contains("NOAUTH")
        || text.contains("WRONGPASS")
}

/// The URL without a password (`redis://:secret@host` → `redis://:***@host`).
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    }
}

fn now_ns() -> u64 {
    portico_control::clock::now_ms().saturating_mul(1_000_000)
}

/// What [`Lease::take`] decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Admitted from the lease.
    Admit,
    /// The key is cold (Redis has not served it lately): decide on the membership split, and
    /// [`Lease::charge_cold`] if admitted.
    Cold,
    /// Refused: the shared bucket is empty; the wait in ns.
    Refuse(u64),
}

#[derive(Debug, Default)]
struct LeaseState {
    /// Calls leased and not spent.
    tokens: u32,
    /// When they were granted (ns).
    granted_at: u64,
    /// Redis said the bucket is empty until then (ns): no call admitted, no refill asked.
    denied_until: u64,
    /// A refill is in flight.
    pending: bool,
    /// When Redis last answered for this key (ns; 0: never).
    served_at: u64,
    /// Calls seen since the last refill was asked, and since when (ns).
    demand: u32,
    demand_since: u64,
    /// The size of the last batch asked (the low-water mark is half of it).
    batch: u32,
    /// Calls admitted cold, to charge with the next refill.
    debt: u32,
}

/// A node's share of one cluster-scope bucket (one rule, one key) in Redis.
#[derive(Debug)]
pub struct Lease {
    redis_key: String,
    interval_ns: u64,
    interval_us: f64,
    tolerance_us: f64,
    /// The largest batch: [`LEASE_LEAD`] of the limit, at least 1.
    cap: u32,
    /// The most debt kept (one bucket): older cold admissions are forgiven.
    max_debt: u32,
    state: Mutex<LeaseState>,
}

impl Lease {
    /// A lease on the bucket `redis_key` of a rule with emission interval `interval_ns` (one
    /// call per interval) and `burst` calls.
    pub fn new(redis_key: String, interval_ns: u64, burst: u32) -> Lease {
        let interval_ns = interval_ns.max(1);
        let per_second = 1e9 / interval_ns as f64;
        let cap = batch_of(per_second).clamp(1.0, f64::from(burst.max(1)));
        Lease {
            redis_key,
            interval_ns,
            interval_us: interval_ns as f64 / 1000.0,
            tolerance_us: interval_ns as f64 / 1000.0 * f64::from(burst.max(1)),
            cap: cap as u32,
            max_debt: burst.max(1),
            state: Mutex::new(LeaseState::default()),
        }
    }

    /// The Redis key of the bucket.
    pub fn redis_key(&self) -> &str {
        &self.redis_key
    }

    /// Request phase: takes one call at `now` (ns), and says whether to ask Redis for more
    /// now (the caller hands the ask to [`Fleet::refill`]).
    pub fn take(&self, now: u64) -> (Take, Option<RefillAsk>) {
        let mut st = lock(&self.state);
        if st.demand_since == 0 {
            st.demand_since = now;
        }
        st.demand = st.demand.saturating_add(1);
        if st.tokens > 0 && now.saturating_sub(st.granted_at) > LEASE_TTL.as_nanos() as u64 {
            st.tokens = 0;
        }
        let warm = st.served_at != 0 && now.saturating_sub(st.served_at) <= WARM.as_nanos() as u64;
        let take = if st.tokens > 0 {
            st.tokens -= 1;
            Take::Admit
        } else if now < st.denied_until {
            // Redis said the shared bucket is empty until then (however long ago it said
            // so: a slow limit's wait may outlast `WARM`).
            Take::Refuse(st.denied_until - now)
        } else if !warm {
            Take::Cold
        } else {
            Take::Refuse(self.interval_ns)
        };
        let low = st.tokens <= st.batch / 2;
        let ask = (!st.pending && now >= st.denied_until && low).then(|| {
            let elapsed = now
                .saturating_sub(st.demand_since)
                .max(MIN_POLL.as_nanos() as u64);
            let rate = f64::from(st.demand) * 1e9 / elapsed as f64;
            let want = batch_of(rate).clamp(1.0, f64::from(self.cap)) as u32;
            st.pending = true;
            st.batch = want;
            st.demand = 0;
            st.demand_since = now;
            RefillAsk {
                want,
                debt: std::mem::take(&mut st.debt),
            }
        });
        (take, ask)
    }

    /// A cold call was admitted on the membership split: charge it to Redis later.
    pub fn charge_cold(&self) {
        let mut st = lock(&self.state);
        st.debt = st.debt.saturating_add(1).min(self.max_debt);
    }

    /// Gives back a call taken from the lease (another rule refused it).
    pub fn give_back(&self) {
        let mut st = lock(&self.state);
        st.tokens = st.tokens.saturating_add(1);
    }

    /// Redis granted `granted` of `want` calls at `now` (ns); when short, the bucket has one
    /// more call in `wait_ns`.
    pub fn fill(&self, granted: u32, want: u32, wait_ns: u64, now: u64) {
        let mut st = lock(&self.state);
        st.pending = false;
        st.served_at = now;
        if now.saturating_sub(st.granted_at) > LEASE_TTL.as_nanos() as u64 {
            st.tokens = 0;
        }
        st.tokens = st.tokens.saturating_add(granted);
        st.granted_at = now;
        st.denied_until = if granted < want {
            now.saturating_add(wait_ns.max(MIN_POLL.as_nanos() as u64))
        } else {
            0
        };
    }

    /// The refill failed (Redis down): the debt is kept for the next one.
    pub fn failed(&self, debt: u32) {
        let mut st = lock(&self.state);
        st.pending = false;
        st.debt = st.debt.saturating_add(debt).min(self.max_debt);
    }

    /// Whether the lease holds nothing worth keeping at `now` (housekeeping drops it).
    pub fn idle(&self, now: u64) -> bool {
        let st = lock(&self.state);
        !st.pending
            && st.debt == 0
            && now.saturating_sub(st.served_at.max(st.demand_since)) > 5 * WARM.as_nanos() as u64
    }
}

/// The calls [`LEASE_LEAD`] of `rate` (per second) needs, rounded up (with a little slack
/// for the rounding of emission intervals to whole nanoseconds).
fn batch_of(rate: f64) -> f64 {
    (rate * LEASE_LEAD - 1e-3).ceil()
}

/// The membership split of a rule: each of `members` nodes gets `1/members` of the rate
/// (its emission interval multiplied) and of the burst (rounded up, at least 1). Returns
/// (interval ns, tolerance ns) for the local GCRA.
pub fn split(interval_ns: u64, burst: u64, members: u32) -> (u64, u64) {
    let n = u64::from(members.max(1));
    let interval = interval_ns.saturating_mul(n);
    let burst = burst.div_ceil(n).max(1);
    (interval, interval.saturating_mul(burst))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_700_000_000_000 * MS;

    #[test]
    fn split_divides_rate_and_burst() {
        // 300/s: 3.33 ms between calls; split by 3: 10 ms, burst 300 → 100.
        let interval = 1_000_000_000 / 300;
        assert_eq!(split(interval, 300, 1), (interval, interval * 300));
        assert_eq!(split(interval, 300, 3), (interval * 3, interval * 3 * 100));
        // A burst smaller than the fleet still lets each node admit one.
        assert_eq!(split(interval, 2, 3).1, interval * 3);
        // Zero members (unknown) counts as one.
        assert_eq!(split(interval, 10, 0), split(interval, 10, 1));
    }

    #[test]
    fn a_cold_key_is_decided_locally_and_asks_for_a_lease() {
        let lease = Lease::new("k".into(), 1_000_000_000 / 300, 300);
        let (take, ask) = lease.take(T0);
        assert_eq!(take, Take::Cold);
        let ask = ask.unwrap();
        assert_eq!(ask.debt, 0);
        assert!(ask.want >= 1);
        lease.charge_cold();
        // In flight: no second ask, still cold.
        assert_eq!(lease.take(T0 + MS), (Take::Cold, None));
        lease.charge_cold();
        lease.fill(ask.want, ask.want, 0, T0 + 2 * MS);
        // Warm now: calls come from the lease.
        let mut admitted = 0;
        let mut next = None;
        for i in 0..ask.want {
            let (take, a) = lease.take(T0 + 3 * MS + u64::from(i));
            if take == Take::Admit {
                admitted += 1;
            }
            next = next.or(a);
        }
        assert_eq!(admitted, ask.want);
        // The next ask carries the two cold admissions as debt.
        assert_eq!(next.unwrap().debt, 2);
    }

    #[test]
    fn batches_follow_demand_and_are_capped() {
        let lease = Lease::new("k".into(), 1_000_000_000 / 300, 300);
        assert_eq!(lease.cap, 30);
        let (_, ask) = lease.take(T0);
        lease.fill(1, ask.unwrap().want, 0, T0);
        // 100 calls within 100 ms: 1,000/s of demand → 0.1 s is 100, capped at 30.
        let mut asks = vec![];
        for i in 0..100u64 {
            if let (_, Some(a)) = lease.take(T0 + i * MS) {
                asks.push(a);
            }
        }
        let a = asks.last().unwrap();
        assert_eq!(a.want, 30);
        // 20/s of demand: batches of 2.
        let slow = Lease::new("k".into(), 1_000_000_000 / 300, 300);
        let (_, a) = slow.take(T0);
        slow.fill(1, a.unwrap().want, 0, T0);
        let mut last = None;
        for i in 1..=10u64 {
            let t = T0 + i * 50 * MS;
            if let (_, Some(a)) = slow.take(t) {
                slow.fill(a.want, a.want, 0, t);
                last = Some(a);
            }
        }
        assert_eq!(last.unwrap().want, 2);
    }

    #[test]
    fn an_empty_bucket_refuses_until_redis_says_and_polls_at_most_every_min_poll() {
        let lease = Lease::new("k".into(), 1_000_000_000 / 300, 300);
        let (_, ask) = lease.take(T0);
        // Redis: nothing left, one more call in 1 ms.
        lease.fill(0, ask.unwrap().want, MS, T0);
        let (take, ask) = lease.take(T0 + MS);
        assert_eq!(take, Take::Refuse(MIN_POLL.as_nanos() as u64 - MS));
        assert_eq!(ask, None);
        // After MIN_POLL a new ask goes out; the call itself is refused meanwhile.
        let (take, ask) = lease.take(T0 + MIN_POLL.as_nanos() as u64);
        assert!(matches!(take, Take::Refuse(_)));
        assert!(ask.is_some());
    }

    #[test]
    fn a_long_wait_refuses_past_the_warm_period() {
        // 2 per minute: Redis's next call is 30 s away, far past `WARM`.
        let lease = Lease::new("k".into(), 30_000_000_000, 2);
        let (_, ask) = lease.take(T0);
        lease.fill(0, ask.unwrap().want, 30_000 * MS, T0);
        let (take, ask) = lease.take(T0 + 5_000 * MS);
        assert_eq!(take, Take::Refuse(25_000 * MS));
        assert_eq!(ask, None);
    }

    #[test]
    fn unspent_tokens_expire_and_a_failure_keeps_the_debt() {
        let lease = Lease::new("k".into(), 1_000_000_000 / 300, 300);
        let (_, ask) = lease.take(T0);
        lease.fill(10, ask.unwrap().want, 0, T0);
        assert_eq!(lease.take(T0 + MS).0, Take::Admit);
        // 1.5 s later the nine left are stale: dropped, and the key has gone cold.
        let later = T0 + 1_500 * MS;
        let (take, ask) = lease.take(later);
        assert_eq!(take, Take::Cold);
        lease.charge_cold();
        lease.failed(ask.unwrap().debt);
        let (_, ask) = lease.take(later + MS);
        assert_eq!(ask.unwrap().debt, 1);
        lease.give_back();
        assert!(!lease.idle(later + MS));
    }

    #[test]
    fn nonce_keys_are_stable_and_separate_apps() {
        let a = NonceClaim::new("app-1", "nonce-123", T0 / MS + 300_000, T0 / MS);
        assert_eq!(
            a,
            NonceClaim::new("app-1", "nonce-123", T0 / MS + 300_000, T0 / MS)
        );
        assert_eq!(a.ttl_ms, 300_000);
        assert!(a.key.starts_with("portico:nonce:"));
        assert_eq!(a.key.len(), "portico:nonce:".len() + 32);
        assert_ne!(a.key, NonceClaim::new("app-2", "nonce-123", 0, 0).key);
        // ("ab", "c") is not ("a", "bc").
        assert_ne!(
            NonceClaim::new("ab", "cnonce", 0, 0).key,
            NonceClaim::new("a", "bcnonce", 0, 0).key
        );
    }

    #[test]
    fn redis_urls_are_shown_without_password() {
        assert_eq!(
            redact("redis://:pw@10.0.0.1:6379"),
            "redis://***@10.0.0.1:6379"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
