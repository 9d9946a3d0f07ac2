//! The notifier's state and what every notification file shares: the settings ([`Config`]),
//! the metrics, the store handle, the grants ([`granted`]), the stream slots and wakers a
//! session takes and releases, publishing and `/status`. The transports (`sse.rs`, `ws.rs`),
//! their session (`session.rs`) and the callbacks (`callback.rs`) use this file; it uses none
//! of them, only the store (`store.rs`). The entry point that hands a stream to its
//! transport, [`Notifier::serve`], is `mod.rs`'s.

use super::store::{self, EventId, NewEvent, Store};
use crate::error::{Code, GatewayError};
use crate::fleet::Fleet;
use arc_swap::ArcSwap;
use portico_control::status::DeadLetter;
use portico_control::{v1, Snapshot};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// The largest payload of one notification, as JSON text.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// The most ids one ack may carry.
pub const MAX_ACK_IDS: usize = 10_000;
/// The longest publisher id (`id` in the publish body).
pub const MAX_KEY_CHARS: usize = 128;

/// The notifier's settings (command-line flags, docs/operations/notifications.md "Notifications").
#[derive(Debug, Clone)]
pub struct Config {
    /// Unacknowledged events are sent again after this (`--notify-ack-timeout-ms`).
    pub ack_timeout: Duration,
    /// A heartbeat (an SSE comment line, a WebSocket ping) is sent after this much silence
    /// (`--notify-heartbeat-ms`).
    pub heartbeat: Duration,
    /// A stream with more events delivered and unacknowledged than this is closed as a slow
    /// consumer (`--notify-max-backlog`).
    pub max_backlog: u64,
    /// Streams this node holds at most (`--notify-max-streams`).
    pub max_streams: u64,
    /// Without Redis: events kept per app at most (`--notify-memory-events`).
    pub memory_events: usize,
    /// How often a stream looks for events published on other nodes (Redis) and for a
    /// revoked grant.
    pub poll: Duration,
    /// One callback POST may take this long (`--notify-callback-timeout-ms`).
    pub callback_timeout: Duration,
    /// Tries of one callback before it is dead-lettered (`--notify-callback-attempts`).
    pub callback_attempts: u32,
    /// The longest wait between two tries (`--notify-callback-max-backoff-ms`).
    pub callback_max_backoff: Duration,
    /// Publishes per app per second this node accepts (`--notify-publish-rate`); 0: no
    /// limit.
    pub publish_rate: u32,
    /// Publishes per app accepted at once above the rate (`--notify-publish-burst`).
    pub publish_burst: u32,
    /// The key of the MAC every Redis stream entry carries (`--notify-key-file`); `None`: a
    /// key of this process's own, made at start.
    pub mac_key: Option<store::MacKey>,
}

/// Dead letters kept on this node at most (the oldest forgotten).
pub const MAX_DEAD_LETTERS: usize = 1000;

impl Default for Config {
    fn default() -> Self {
        Config {
            ack_timeout: Duration::from_secs(30),
            heartbeat: Duration::from_secs(15),
            max_backlog: 1000,
            max_streams: 10_000,
            memory_events: 10_000,
            poll: Duration::from_millis(100),
            callback_timeout: Duration::from_secs(5),
            callback_attempts: 10,
            callback_max_backoff: Duration::from_secs(60),
            publish_rate: 1000,
            publish_burst: 2000,
            mac_key: None,
        }
    }
}

/// The notification metrics (`portico_notify_*`).
#[derive(Clone)]
pub struct NotifyMetrics {
    pub connections: IntGauge,
    pub published: IntCounter,
    pub delivered: IntCounter,
    pub acked: IntCounter,
    pub redelivered: IntCounter,
    pub backlog: IntGaugeVec,
    pub callback_failures: IntCounter,
    pub closed: IntCounterVec,
    pub publish_limited: IntCounterVec,
    pub duplicates: IntCounter,
    pub forged: IntCounter,
}

impl NotifyMetrics {
    fn new() -> NotifyMetrics {
        // The names and help texts are constants: these cannot fail.
        let gauge = |n: &str, h: &str| IntGauge::new(n, h).unwrap_or_else(|_| unreachable!());
        let counter = |n: &str, h: &str| IntCounter::new(n, h).unwrap_or_else(|_| unreachable!());
        NotifyMetrics {
            connections: gauge(
                "portico_notify_connections",
                "Notification streams open on this node",
            ),
            published: counter(
                "portico_notify_events_published_total",
                "Notifications stored by this node (one per app)",
            ),
            delivered: counter(
                "portico_notify_delivered_total",
                "Notifications sent to merchants for the first time (streams and callbacks)",
            ),
            acked: counter(
                "portico_notify_acked_total",
                "Notifications acknowledged by merchants through this node",
            ),
            redelivered: counter(
                "portico_notify_redelivered_total",
                "Notifications sent again after the ack timeout or on a new stream",
            ),
            backlog: IntGaugeVec::new(
                Opts::new(
                    "portico_notify_backlog",
                    "Notifications not acknowledged yet, by app (as last seen by this node)",
                ),
                &["app"],
            )
            .unwrap_or_else(|_| unreachable!()),
            callback_failures: counter(
                "portico_notify_callback_failures_total",
                "Callback POSTs that failed (non-2xx or no answer)",
            ),
            closed: IntCounterVec::new(
                Opts::new(
                    "portico_notify_streams_closed_total",
                    "Notification streams closed by the gateway, by reason",
                ),
                &["reason"],
            )
            .unwrap_or_else(|_| unreachable!()),
            publish_limited: IntCounterVec::new(
                Opts::new(
                    "portico_notify_publish_limited_total",
                    "Publishes refused with 429 by the per-app publish rate, by app",
                ),
                &["app"],
            )
            .unwrap_or_else(|_| unreachable!()),
            duplicates: counter(
                "portico_notify_duplicates_total",
                "Publishes whose id was already published for the app and topic (answered with the original event, nothing stored)",
            ),
            forged: counter(
                "portico_notify_forged_total",
                "Redis stream entries dropped undelivered: no valid MAC of the notification key, or a valid entry written again (docs/SECURITY.md, \"A hostile Redis\")",
            ),
        }
    }

    /// Registers every series on `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.connections.clone()))?;
        registry.register(Box::new(self.published.clone()))?;
        registry.register(Box::new(self.delivered.clone()))?;
        registry.register(Box::new(self.acked.clone()))?;
        registry.register(Box::new(self.redelivered.clone()))?;
        registry.register(Box::new(self.backlog.clone()))?;
        registry.register(Box::new(self.callback_failures.clone()))?;
        registry.register(Box::new(self.closed.clone()))?;
        registry.register(Box::new(self.publish_limited.clone()))?;
        registry.register(Box::new(self.duplicates.clone()))?;
        registry.register(Box::new(self.forged.clone()))?;
        Ok(())
    }
}

/// The stream an app holds on this node: its token (a newer stream replaces it).
#[derive(Debug, Clone)]
struct Holder {
    token: u64,
    since_ms: u64,
}

/// The notifications of one gateway process (shared by the live plane's pipeline, the
/// internal listener and `/status`).
pub struct Notifier {
    pub config: Config,
    pub store: Store,
    pub metrics: NotifyMetrics,
    /// The live plane's snapshot (topics and apps), replaced on every reload.
    snapshot: ArcSwap<Snapshot>,
    /// Per app: woken when this node stores an event for it.
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    /// Per app: the stream this node serves.
    holders: Mutex<HashMap<String, Holder>>,
    pub(super) fleet: Arc<Fleet>,
    pub(super) streams: AtomicU64,
    /// Callbacks that never succeeded, newest last (at most [`MAX_DEAD_LETTERS`]).
    dead: Mutex<std::collections::VecDeque<DeadLetter>>,
    /// The per-app publish rate on this node (`None`: no limit).
    publish_limit: Option<governor::DefaultKeyedRateLimiter<String>>,
    /// With Redis: this node is subscribed to [`store::WAKE_CHANNEL`], so a stream is woken
    /// by a publish on any node and polls only as a safety net ([`Notifier::poll_every`]).
    wake_subscribed: AtomicBool,
}

/// How often a stream polls its store while every publish wakes it (the memory store, or
/// Redis while the node is subscribed to the wake channel): only for redeliveries after the
/// ack timeout and, with Redis, as a safety net for a lost wake message.
pub const POLL_WHEN_SUBSCRIBED: Duration = Duration::from_secs(1);

/// One event a publish stored (or found already stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub app: String,
    pub id: EventId,
    /// The publisher's `id` was already published for this app and topic within the
    /// topic's retention: `id` is the original event's, nothing new was stored.
    pub duplicate: bool,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("store", &self.store.kind())
            .finish()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The body of `POST /internal/v1/notifications`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// One app; absent: every app granted the topic.
    #[serde(default)]
    pub app: Option<String>,
    pub topic: String,
    /// The publisher's own id of the event (kept as `key`).
    #[serde(default)]
    pub id: Option<String>,
    pub payload: serde_json::Value,
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

/// Whether `app_key` (document `app`) may receive `topic`: the topic lists it or `"*"`, or
/// the app lists the topic in its own `topics` (docs/operations/notifications.md, "Notifications").
pub fn granted(snapshot: &Snapshot, app_key: &str, app: &v1::App, topic: &str) -> bool {
    snapshot.topics.contains_key(topic)
        && (snapshot.topic_granted(app_key, topic) || app.topics.iter().any(|t| t == topic))
}

/// The topics `app_key` may receive.
pub fn granted_topics(snapshot: &Snapshot, app_key: &str) -> Vec<String> {
    let Some(app) = snapshot.apps.get(app_key) else {
        return Vec::new();
    };
    snapshot
        .topics
        .keys()
        .filter(|t| granted(snapshot, app_key, app, t))
        .cloned()
        .collect()
}

impl Notifier {
    /// A notifier on Redis Streams when the fleet has Redis, else on this node's memory.
    pub fn new(config: Config, fleet: Arc<Fleet>) -> Notifier {
        let metrics = NotifyMetrics::new();
        let store = if fleet.has_redis() {
            let key = config.mac_key.clone().unwrap_or_else(|| {
                tracing::warn!("notify: no notification key (--notify-key-file): entries in Redis are signed with a key of this process only, so other gateways, and this one after a restart, drop them as forged");
                store::MacKey::ephemeral()
            });
            Store::Redis(Box::new(store::RedisStore::new(
                Arc::clone(&fleet),
                key,
                metrics.forged.clone(),
            )))
        } else {
            Store::Memory(store::MemoryStore::new(config.memory_events))
        };
        Notifier {
            store,
            metrics,
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            wakers: Mutex::new(HashMap::new()),
            holders: Mutex::new(HashMap::new()),
            fleet,
            streams: AtomicU64::new(0),
            dead: Mutex::default(),
            publish_limit: publish_limiter(&config),
            wake_subscribed: AtomicBool::new(false),
            config,
        }
    }

    /// How long an idle stream waits for a wake-up before it polls the store again:
    /// [`POLL_WHEN_SUBSCRIBED`] when every publish that concerns it wakes it (the memory
    /// store, whose events are published on this node only, or Redis while this node follows
    /// the wake channel), else `config.poll`.
    pub fn poll_every(&self) -> Duration {
        let woken_by_every_publish = matches!(self.store, store::Store::Memory(_))
            || self.wake_subscribed.load(Ordering::Relaxed);
        if woken_by_every_publish {
            self.config.poll.max(POLL_WHEN_SUBSCRIBED)
        } else {
            self.config.poll
        }
    }

    /// With Redis: follows [`store::WAKE_CHANNEL`] on a connection of its own for the life
    /// of the process, waking this node's stream of each app announced (reconnecting with
    /// a growing pause; streams poll at `config.poll` while it is not subscribed).
    pub async fn follow_wakes(self: Arc<Self>) {
        use futures::StreamExt;
        let Some(client) = self.fleet.redis_client().cloned() else {
            return;
        };
        let mut pause = Duration::from_millis(250);
        loop {
            let subscribed = async {
                let mut pubsub =
                    tokio::time::timeout(store::REDIS_TIMEOUT, client.get_async_pubsub())
                        .await
                        .map_err(|_| {
                            redis::RedisError::from(std::io::Error::from(
                                std::io::ErrorKind::TimedOut,
                            ))
                        })??;
                pubsub.subscribe(store::WAKE_CHANNEL).await?;
                Ok::<_, redis::RedisError>(pubsub)
            }
            .await;
            match subscribed {
                Ok(mut pubsub) => {
                    pause = Duration::from_millis(250);
                    self.wake_subscribed.store(true, Ordering::Relaxed);
                    tracing::info!(channel = store::WAKE_CHANNEL, "notify: following wake-ups");
                    let mut messages = pubsub.on_message();
                    while let Some(msg) = messages.next().await {
                        let Ok(app) = msg.get_payload::<String>() else {
                            continue;
                        };
                        let waker = lock(&self.wakers).get(&app).cloned();
                        if let Some(w) = waker {
                            w.notify_waiters();
                        }
                    }
                    self.wake_subscribed.store(false, Ordering::Relaxed);
                    tracing::warn!(
                        "notify: the wake-up subscription ended; streams poll until it is back"
                    );
                }
                Err(e) => {
                    tracing::debug!(error = %e, "notify: subscribing to wake-ups failed");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// Reload phase (the live plane's `apply`): the snapshot grants are read from.
    pub fn apply(&self, snapshot: Arc<Snapshot>) {
        self.snapshot.store(snapshot);
        // Every stream checks its grants now, so a revoked one closes at once rather than
        // at its next poll.
        for w in lock(&self.wakers).values() {
            w.notify_waiters();
        }
    }

    /// The snapshot in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub(super) fn waker(&self, app: &str) -> Arc<Notify> {
        Arc::clone(lock(&self.wakers).entry(app.to_owned()).or_default())
    }

    /// Publishes `req` (internal listener): validates it against the snapshot and the
    /// per-app publish rate, stores one event per app (or, for a publisher `id` already
    /// published for that app and topic within the topic's retention, finds the original),
    /// and answers them in app order. Errors are the envelope's: 400 `BAD_REQUEST`, 404
    /// `TOPIC_NOT_FOUND`, 403 `APP_FORBIDDEN`, 413 `BODY_TOO_LARGE`, 429 `RATE_LIMITED`
    /// (with `Retry-After`; nothing stored), 503 `NOTIFY_UNAVAILABLE` (the store failed).
    pub async fn publish(&self, req: PublishRequest) -> Result<Vec<Published>, GatewayError> {
        let snap = self.snapshot();
        let Some(topic) = snap.topics.get(&req.topic) else {
            return Err(GatewayError::new(
                Code::TopicNotFound,
                format!(
                    "no topic {:?} (topics/<name> in the configuration)",
                    req.topic
                ),
            ));
        };
        if let Some(key) = &req.id {
            if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
                return Err(GatewayError::bad_request(format!(
                    "id: must be 1 to {MAX_KEY_CHARS} characters"
                )));
            }
        }
        let retention_s = topic.retention_s;
        if let Some(ttl) = req.ttl_s {
            if ttl == 0 || ttl > retention_s {
                return Err(GatewayError::bad_request(format!(
                    "ttl_s: must be between 1 and the topic's retention_s ({retention_s})"
                )));
            }
        }
        let payload = serde_json::to_string(&req.payload)
            .map_err(|e| GatewayError::bad_request(format!("payload: {e}")))?;
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(GatewayError::new(
                Code::BodyTooLarge,
                format!("payload: larger than {MAX_PAYLOAD_BYTES} bytes"),
            ));
        }
        let apps: Vec<String> = match &req.app {
            Some(app) => {
                let Some(doc) = snap.apps.get(app) else {
                    return Err(GatewayError::bad_request(format!("app: no app {app:?}")));
                };
                if !granted(&snap, app, doc, &req.topic) {
                    return Err(GatewayError::new(
                        Code::AppForbidden,
                        format!("app {app:?} is not granted the topic {:?}", req.topic),
                    ));
                }
                vec![app.clone()]
            }
            None => snap
                .apps
                .iter()
                .filter(|(k, doc)| granted(&snap, k, doc, &req.topic))
                .map(|(k, _)| k.clone())
                .collect(),
        };
        self.check_publish_rate(&apps)?;
        let now = portico_control::clock::now_ms();
        let mut out = Vec::with_capacity(apps.len());
        for app in apps {
            let event = NewEvent {
                topic: req.topic.clone(),
                payload: payload.clone(),
                published_at_ms: now,
                expires_at_ms: req.ttl_s.map_or(0, |t| now.saturating_add(t * 1000)),
                key: req.id.clone(),
                retention_ms: self.retention_ms(&snap, &app),
                dedupe_ms: retention_s.saturating_mul(1000),
            };
            let stored = self.store.publish(&app, event).await.map_err(|e| {
                GatewayError::new(Code::NotifyUnavailable, "the notification store failed")
                    .with_detail(e)
            })?;
            if stored.duplicate {
                self.metrics.duplicates.inc();
            } else {
                self.metrics.published.inc();
                self.waker(&app).notify_waiters();
            }
            out.push(Published {
                app,
                id: stored.id,
                duplicate: stored.duplicate,
            });
        }
        Ok(out)
    }

    /// The per-app publish rate (docs/operations/notifications.md, "Notifications"): each app of the
    /// publish takes one token; if any has none left, 429 `RATE_LIMITED` with the wait
    /// before that app may publish again (at least 1 s) and nothing is stored.
    fn check_publish_rate(&self, apps: &[String]) -> Result<(), GatewayError> {
        use governor::clock::Clock as _;
        let Some(limit) = &self.publish_limit else {
            return Ok(());
        };
        for app in apps {
            if let Err(not_until) = limit.check_key(app) {
                let wait = not_until.wait_time_from(limit.clock().now());
                self.metrics
                    .publish_limited
                    .with_label_values(&[app.as_str()])
                    .inc();
                let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
                return Err(GatewayError::new(
                    Code::RateLimited,
                    format!(
                        "app {app:?} publishes faster than {} per second (burst {}); retry later",
                        self.config.publish_rate, self.config.publish_burst
                    ),
                )
                .with_retry_after(secs));
            }
        }
        Ok(())
    }

    /// The longest retention of the topics `app` may receive (its queue is trimmed by it).
    fn retention_ms(&self, snap: &Snapshot, app: &str) -> u64 {
        granted_topics(snap, app)
            .iter()
            .filter_map(|t| snap.topics.get(t))
            .map(|t| t.retention_s)
            .max()
            .unwrap_or(v1::DEFAULT_RETENTION_S)
            .saturating_mul(1000)
    }

    /// Acknowledges `ids` of `app` (an HTTP ack or a WebSocket ack message); answers how
    /// many were pending, and wakes the app's session (room for new events).
    pub async fn ack_ids(&self, app: &str, ids: &[EventId]) -> Result<u64, String> {
        let n = self.store.ack(app, ids).await?;
        self.metrics.acked.inc_by(n);
        self.waker(app).notify_waiters();
        Ok(n)
    }

    /// Takes the app's stream slot on this node (and, with Redis, cluster-wide): a stream
    /// already open for the app is closed as `replaced` at its next poll.
    pub(super) async fn hold(&self, app: &str) -> u64 {
        let token = fastrand::u64(1..);
        lock(&self.holders).insert(
            app.to_owned(),
            Holder {
                token,
                since_ms: portico_control::clock::now_ms(),
            },
        );
        if let Some(mut c) = self.fleet.redis_conn() {
            claim_owner(&mut c, app, token).await;
        }
        self.waker(app).notify_waiters();
        token
    }

    /// Whether the stream `token` still holds the app (on this node, and in Redis when it
    /// answers); refreshes the Redis claim.
    pub(super) async fn holds(&self, app: &str, token: u64) -> bool {
        if lock(&self.holders).get(app).map(|h| h.token) != Some(token) {
            return false;
        }
        let Some(mut c) = self.fleet.redis_conn() else {
            return true;
        };
        let current: redis::RedisResult<Option<u64>> = redis::cmd("GET")
            .arg(owner_key(app))
            .query_async(&mut c)
            .await;
        match current {
            Ok(Some(t)) if t != token => false,
            Ok(_) => {
                claim_owner(&mut c, app, token).await;
                true
            }
            // Redis unsure: keep serving; the store's own calls will tell.
            Err(_) => true,
        }
    }

    pub(super) fn dead_letter(&self, d: DeadLetter) {
        let mut dead = lock(&self.dead);
        if dead.len() >= MAX_DEAD_LETTERS {
            dead.pop_front();
        }
        dead.push_back(d);
    }

    pub(super) fn release(&self, app: &str, token: u64) {
        let mut holders = lock(&self.holders);
        if holders.get(app).map(|h| h.token) == Some(token) {
            holders.remove(app);
        }
    }

    /// `/status`'s `notify`: the store, the streams on this node, the backlogs known.
    pub async fn status(&self) -> portico_control::status::NotifyStatus {
        let streams = lock(&self.holders)
            .iter()
            .map(|(app, h)| portico_control::status::NotifyStream {
                app: app.clone(),
                since_ms: h.since_ms,
            })
            .collect();
        let snap = self.snapshot();
        let mut backlog = std::collections::BTreeMap::new();
        for app in snap.apps.keys() {
            if granted_topics(&snap, app).is_empty() {
                continue;
            }
            if let Ok(n) = self.store.backlog(app).await {
                self.metrics
                    .backlog
                    .with_label_values(&[app.as_str()])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
                backlog.insert(app.clone(), n);
            }
        }
        let (dead_letters, dead_letters_total) = {
            let dead = lock(&self.dead);
            (
                dead.iter().rev().take(100).cloned().collect(),
                dead.len() as u64,
            )
        };
        let mut out = portico_control::status::NotifyStatus {
            store: self.store.kind().to_owned(),
            streams,
            backlog,
            topics: snap.topics.keys().cloned().collect(),
            ack_timeout_ms: self.config.ack_timeout.as_millis() as u64,
            max_backlog: self.config.max_backlog,
            callbacks: snap
                .apps
                .iter()
                .filter(|(_, a)| a.callback_url.is_some())
                .map(|(k, _)| k.clone())
                .collect(),
            dead_letters,
            dead_letters_total,
            ..Default::default()
        };
        match &self.store {
            Store::Redis(_) => {
                out.wake_subscribed = Some(self.wake_subscribed.load(Ordering::Relaxed));
                // Where the key of the entries' MACs comes from: `file` (--notify-key-file,
                // shared by the fleet) or `ephemeral` (this process's own).
                let key = if self.config.mac_key.is_some() {
                    "file"
                } else {
                    "ephemeral"
                };
                out.notify_key = Some(key.to_owned());
            }
            Store::Memory(m) => {
                out.memory_max_events = Some(self.config.memory_events as u64);
                out.memory_dropped = Some(m.dropped.load(Ordering::Relaxed));
            }
        }
        out
    }
}

/// The per-app publish limiter of `config` (`None` with a rate of 0).
fn publish_limiter(config: &Config) -> Option<governor::DefaultKeyedRateLimiter<String>> {
    let rate = std::num::NonZeroU32::new(config.publish_rate)?;
    let burst = std::num::NonZeroU32::new(config.publish_burst.max(config.publish_rate))?;
    Some(governor::RateLimiter::keyed(
        governor::Quota::per_second(rate).allow_burst(burst),
    ))
}

/// How long a stream's cluster-wide claim on its app lasts without a refresh.
const OWNER_TTL_MS: u64 = 30_000;

fn owner_key(app: &str) -> String {
    format!("portico:notify:{{{app}}}:owner")
}

/// Records in Redis that the stream `token` holds `app`'s notifications for
/// [`OWNER_TTL_MS`] (a failure is left to the store's own calls to tell).
async fn claim_owner(c: &mut redis::aio::ConnectionManager, app: &str, token: u64) {
    let _: redis::RedisResult<()> = redis::cmd("SET")
        .arg(owner_key(app))
        .arg(token)
        .arg("PX")
        .arg(OWNER_TTL_MS)
        .query_async(c)
        .await;
}
