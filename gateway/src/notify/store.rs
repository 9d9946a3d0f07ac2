//! Where notifications wait for their merchant (docs/operations/notifications.md, "Notifications"):
//! Redis Streams when the gateway has `--redis` (any node serves any app), else a bounded
//! queue per app in this node's memory.
//!
//! # Redis: one stream and one consumer group per app
//! `portico:notify:{app}` is the app's stream; `XADD ... MINID ~ <now - retention>` trims it
//! by the longest retention of the topics the app is granted. Delivery uses a consumer group
//! (`merchant`, one consumer): `XREADGROUP ... >` hands out new events and records them as
//! pending, `XACK` (from whichever node the merchant's ack reaches) settles them, and
//! `XAUTOCLAIM` finds the pending ones idle for longer than the ack timeout, which are sent
//! again. The group, not the node, holds "what was delivered and what was acknowledged", so
//! a merchant that reconnects to another gateway gets its pending events first, then the
//! rest. We chose the consumer group over an explicit acked offset because acks may arrive
//! out of order and on any node: `XACK` by id needs no read-modify-write of an offset, and
//! the pending list is exactly the set to redeliver.
//!
//! # De-duplication by the publisher's id
//! An event with a publisher `id` (`key`) is stored once per app, topic and id within the
//! topic's retention (`dedupe_ms`); publishing it again answers the original event id with
//! `duplicate`. With Redis, one script does "is `portico:notify:{app}:dedupe:<topic>:<id>`
//! set? else `XADD` and set it to the new id, expiring after the retention" atomically, in
//! the one round trip `XADD` took alone, so two nodes publishing the same id at once store
//! one event (the key shares the stream's `{app}` hash tag, so a Redis Cluster keeps both
//! on one shard). In memory, a map per app of at most [`MEMORY_DEDUPE_KEYS`] ids (the
//! oldest forgotten first).
//!
//! # Redis is not trusted with the content (docs/SECURITY.md, "A hostile Redis")
//! Every entry carries `m`, an HMAC-SHA256 ([`MacKey`], `--notify-key-file`, a key Redis never
//! sees) over the app, the entry's id and every field delivered or signed (topic, payload,
//! publish time, expiry, publisher id, keep-until time). The publisher chooses the id itself
//! (`<now ms>-0`, or just above the stream's last id when that is not above it: one script,
//! [`PUBLISH`], retried with the id Redis reports) so that the MAC binds it: an entry moved
//! to another id or another app's stream does not verify. Entries are checked as they are
//! read ([`RedisStore`]); one that fails is acknowledged and deleted, logged and counted in
//! `portico_notify_forged_total`, and never handed to a stream or a callback. A valid entry
//! written again (a replay) is refused too: by its id, which must be above the last id this
//! node handed out as new for the app and not one acknowledged through this node, and by its
//! keep-until time (`r`, the publish time plus the retention), past which it is dropped.
//!
//! # Memory: the same semantics, on one node
//! A queue per app of at most `memory_max_events` events (the oldest dropped beyond it, and
//! after the retention), a cursor, and the pending (delivered, unacknowledged) ids with the
//! time each was last sent.

use crate::fleet::Fleet;
use hmac::{Hmac, Mac};
use prometheus::IntCounter;
use redis::Value;
use sha2::Sha256;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// The consumer group (and its one consumer) of every app stream.
const GROUP: &str = "merchant";
/// Pending events sent again per poll at most.
pub const REDELIVER_MAX: usize = 200;
/// Without Redis: publisher ids remembered per app at most, for de-duplication.
pub const MEMORY_DEDUPE_KEYS: usize = 100_000;

/// An event id: `<unix ms>-<sequence>`, as Redis Streams assign them; ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    pub ms: u64,
    pub seq: u64,
}

impl EventId {
    /// Parses `<ms>-<seq>` (or `<ms>`, sequence 0).
    pub fn parse(s: &str) -> Option<EventId> {
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        Some(EventId {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// The notification key: the HMAC-SHA256 key of every stream entry (`--notify-key-file`),
/// the same on every gateway of a cluster and never given to Redis.
#[derive(Clone)]
pub struct MacKey(Hmac<Sha256>);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(<redacted>)")
    }
}

/// The shortest notification key accepted, in bytes of the file's text.
pub const MIN_KEY_BYTES: usize = 32;

/// What the MAC of an entry starts with: a MAC of this kind is never one of another kind.
const MAC_DOMAIN: &[u8] = b"PORTICO-NOTIFY-ENTRY-v1";

impl MacKey {
    /// A key of `bytes` (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: &[u8]) -> Result<MacKey, String> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the notification key must be at least {MIN_KEY_BYTES} bytes (e.g. `openssl rand -hex 32`)"
            ));
        }
        Hmac::<Sha256>::new_from_slice(bytes)
            .map(MacKey)
            .map_err(|e| format!("notification key: {e}"))
    }

    /// Reads the key from `path` (mode 0600, its text without surrounding whitespace).
    pub fn from_file(path: &std::path::Path) -> Result<MacKey, String> {
        let text = crate::fleet::read_private_file(path)?;
        MacKey::new(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A random key known to this process only (a gateway with Redis and no key file).
    pub fn ephemeral() -> MacKey {
        let mut bytes = [0u8; 32];
        let random = rustls::crypto::ring::default_provider()
            .secure_random
            .fill(&mut bytes);
        if random.is_err() {
            // No system randomness: still a key no Redis holds, if a weaker one.
            for b in &mut bytes {
                *b = fastrand::u8(..);
            }
        }
        MacKey::new(&bytes).unwrap_or_else(|_| unreachable!())
    }

    fn digest(&self, app: &str, id: EventId, f: &EntryFields<'_>) -> Hmac<Sha256> {
        let mut m = self.0.clone();
        m.update(MAC_DOMAIN);
        let id = id.to_string();
        let at = f.published_at_ms.to_string();
        let x = f.expires_at_ms.to_string();
        let r = f.keep_until_ms.to_string();
        let mut parts: Vec<(u8, &[u8])> = vec![
            (b'a', app.as_bytes()),
            (b'i', id.as_bytes()),
            (b't', f.topic.as_bytes()),
            (b'p', f.payload.as_bytes()),
            (b'@', at.as_bytes()),
            (b'x', x.as_bytes()),
            (b'r', r.as_bytes()),
        ];
        if let Some(k) = f.key {
            parts.push((b'k', k.as_bytes()));
        }
        // Tagged and length-prefixed: no two different entries encode alike.
        for (tag, value) in parts {
            m.update(&[tag]);
            m.update(&(value.len() as u64).to_be_bytes());
            m.update(value);
        }
        m
    }

    /// The MAC (hex) of an entry of `app`'s stream with id `id`.
    pub fn sign(&self, app: &str, id: EventId, f: &EntryFields<'_>) -> String {
        hex::encode(self.digest(app, id, f).finalize().into_bytes())
    }

    /// Whether `mac` (hex) is the MAC of the entry (compared in constant time).
    pub fn verify(&self, app: &str, id: EventId, f: &EntryFields<'_>, mac: &str) -> bool {
        let Ok(bytes) = hex::decode(mac) else {
            return false;
        };
        self.digest(app, id, f).verify_slice(&bytes).is_ok()
    }
}

/// The fields of a stream entry the MAC covers (besides the app and the id).
#[derive(Debug, Clone, Copy)]
pub struct EntryFields<'a> {
    pub topic: &'a str,
    pub payload: &'a str,
    pub published_at_ms: u64,
    pub expires_at_ms: u64,
    pub keep_until_ms: u64,
    pub key: Option<&'a str>,
}

/// One stored notification.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub topic: String,
    /// The payload, as JSON text.
    pub payload: String,
    /// Unix ms when it was published.
    pub published_at_ms: u64,
    /// Unix ms after which it is dropped instead of delivered (`ttl_s`); 0: never.
    pub expires_at_ms: u64,
    /// The publisher's own id (`id` in the publish body), if it gave one.
    pub key: Option<String>,
}

/// An event to store (its id is assigned by the store).
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub topic: String,
    pub payload: String,
    pub published_at_ms: u64,
    pub expires_at_ms: u64,
    pub key: Option<String>,
    /// Events older than this many ms may be trimmed from the app's queue.
    pub retention_ms: u64,
    /// How long `key` is remembered for de-duplication, in ms (the topic's retention).
    pub dedupe_ms: u64,
}

/// What a publish stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub id: EventId,
    /// The key was already published for the app and topic: `id` is the original's and
    /// nothing was stored.
    pub duplicate: bool,
}

/// What one poll of an app's queue found.
#[derive(Debug, Default)]
pub struct Batch {
    /// Pending events unacknowledged for longer than the ack timeout: sent again.
    pub redeliver: Vec<Event>,
    /// Events never delivered, in publish order.
    pub fresh: Vec<Event>,
    /// Delivered and not yet acknowledged, after this poll.
    pub pending: u64,
}

/// The notifications store: Redis Streams or this node's memory.
pub enum Store {
    Memory(MemoryStore),
    Redis(Box<RedisStore>),
}

impl Store {
    /// `"redis"` or `"memory"`, as in `/status`.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
        }
    }

    /// Appends an event to `app`'s queue, unless its key was already published for the app
    /// and topic within `dedupe_ms`; returns its id (or the original's).
    pub async fn publish(&self, app: &str, event: NewEvent) -> Result<Stored, String> {
        match self {
            Store::Memory(m) => Ok(m.publish(app, event)),
            Store::Redis(r) => r.publish(app, event).await,
        }
    }

    /// On a new stream: everything delivered before and still pending, in order (sent
    /// again first); acknowledges every pending event up to `last_acked` (`Last-Event-ID`).
    pub async fn resume(
        &self,
        app: &str,
        last_acked: Option<EventId>,
    ) -> Result<Vec<Event>, String> {
        match self {
            Store::Memory(m) => Ok(m.resume(app, last_acked)),
            Store::Redis(r) => r.resume(app, last_acked).await,
        }
    }

    /// Events to send now: pending ones idle for `ack_timeout_ms` (at most [`REDELIVER_MAX`])
    /// and up to `max` new ones (none when `max` is 0).
    pub async fn poll(&self, app: &str, ack_timeout_ms: u64, max: usize) -> Result<Batch, String> {
        match self {
            Store::Memory(m) => Ok(m.poll(app, ack_timeout_ms, max)),
            Store::Redis(r) => r.poll(app, ack_timeout_ms, max).await,
        }
    }

    /// Acknowledges `ids` of `app`; returns how many were pending.
    pub async fn ack(&self, app: &str, ids: &[EventId]) -> Result<u64, String> {
        match self {
            Store::Memory(m) => Ok(m.ack(app, ids)),
            Store::Redis(r) => r.ack(app, ids).await,
        }
    }

    /// Events of `app` not acknowledged yet (pending and never delivered).
    pub async fn backlog(&self, app: &str) -> Result<u64, String> {
        match self {
            Store::Memory(m) => Ok(m.backlog(app)),
            Store::Redis(r) => r.backlog(app).await,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Memory

#[derive(Debug, Default)]
struct AppQueue {
    /// Every event not acknowledged, in id order.
    events: VecDeque<Event>,
    /// Ids delivered at least once, with the time of the last send (ms).
    pending: BTreeMap<EventId, u64>,
    /// The last id delivered for the first time.
    cursor: Option<EventId>,
    /// The last id assigned.
    last: Option<EventId>,
    /// Publisher ids seen: `(topic, key)` → (event id, forgotten after this unix ms).
    keys: HashMap<(String, String), (EventId, u64)>,
    /// The same, oldest first, to forget beyond [`MEMORY_DEDUPE_KEYS`].
    key_order: VecDeque<(String, String)>,
}

/// A bounded queue per app on this node.
#[derive(Debug)]
pub struct MemoryStore {
    apps: Mutex<HashMap<String, AppQueue>>,
    max_events: usize,
    /// Events dropped because a queue was full.
    pub dropped: std::sync::atomic::AtomicU64,
}

impl MemoryStore {
    pub fn new(max_events: usize) -> MemoryStore {
        MemoryStore {
            apps: Mutex::new(HashMap::new()),
            max_events: max_events.max(1),
            dropped: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, AppQueue>> {
        self.apps.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, app: &str, e: NewEvent) -> Stored {
        let now = portico_control::clock::now_ms();
        let mut apps = self.lock();
        let q = apps.entry(app.to_owned()).or_default();
        // Forget expired keys (oldest first) and those beyond the bound.
        while let Some(front) = q.key_order.front() {
            let expired = q.keys.get(front).is_none_or(|(_, until)| *until <= now);
            if !expired && q.key_order.len() <= MEMORY_DEDUPE_KEYS {
                break;
            }
            if let Some(k) = q.key_order.pop_front() {
                q.keys.remove(&k);
            }
        }
        let dedupe = e.key.as_ref().map(|k| (e.topic.clone(), k.clone()));
        if let Some(k) = &dedupe {
            if let Some((id, until)) = q.keys.get(k) {
                if *until > now {
                    return Stored {
                        id: *id,
                        duplicate: true,
                    };
                }
            }
        }
        let id = match q.last {
            Some(last) if last.ms >= now => EventId {
                ms: last.ms,
                seq: last.seq + 1,
            },
            _ => EventId { ms: now, seq: 0 },
        };
        q.last = Some(id);
        q.events.push_back(Event {
            id,
            topic: e.topic,
            payload: e.payload,
            published_at_ms: e.published_at_ms,
            expires_at_ms: e.expires_at_ms,
            key: e.key,
        });
        let oldest = now.saturating_sub(e.retention_ms);
        while let Some(front) = q.events.front() {
            let over = q.events.len() > self.max_events;
            if !over && front.id.ms >= oldest {
                break;
            }
            if over {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let gone = front.id;
            q.pending.remove(&gone);
            q.events.pop_front();
        }
        if let Some(k) = dedupe {
            if q.keys
                .insert(k.clone(), (id, now.saturating_add(e.dedupe_ms)))
                .is_none()
            {
                q.key_order.push_back(k);
            }
        }
        Stored {
            id,
            duplicate: false,
        }
    }

    fn resume(&self, app: &str, last_acked: Option<EventId>) -> Vec<Event> {
        let now = portico_control::clock::now_ms();
        let mut apps = self.lock();
        let Some(q) = apps.get_mut(app) else {
            return Vec::new();
        };
        if let Some(upto) = last_acked {
            let acked: Vec<EventId> = q.pending.range(..=upto).map(|(id, _)| *id).collect();
            for id in &acked {
                q.pending.remove(id);
            }
            q.events.retain(|e| e.id > upto || Some(e.id) > q.cursor);
        }
        let mut out = Vec::new();
        for e in &q.events {
            if let Some(at) = q.pending.get_mut(&e.id) {
                *at = now;
                out.push(e.clone());
            }
        }
        out
    }

    fn poll(&self, app: &str, ack_timeout_ms: u64, max: usize) -> Batch {
        let now = portico_control::clock::now_ms();
        let mut apps = self.lock();
        let Some(q) = apps.get_mut(app) else {
            return Batch::default();
        };
        let mut batch = Batch::default();
        let due: Vec<EventId> = q
            .pending
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) >= ack_timeout_ms)
            .map(|(id, _)| *id)
            .take(REDELIVER_MAX)
            .collect();
        for id in due {
            q.pending.insert(id, now);
            if let Some(e) = q.events.iter().find(|e| e.id == id) {
                batch.redeliver.push(e.clone());
            }
        }
        let cursor = q.cursor;
        for e in q
            .events
            .iter()
            .filter(|e| cursor.is_none_or(|c| e.id > c))
            .take(max)
        {
            batch.fresh.push(e.clone());
        }
        for e in &batch.fresh {
            q.pending.insert(e.id, now);
            q.cursor = Some(e.id);
        }
        batch.pending = q.pending.len() as u64;
        batch
    }

    fn ack(&self, app: &str, ids: &[EventId]) -> u64 {
        let mut apps = self.lock();
        let Some(q) = apps.get_mut(app) else {
            return 0;
        };
        let mut n = 0;
        for id in ids {
            if q.pending.remove(id).is_some() {
                n += 1;
                if let Ok(i) = q.events.binary_search_by(|e| e.id.cmp(id)) {
                    q.events.remove(i);
                }
            }
        }
        n
    }

    fn backlog(&self, app: &str) -> u64 {
        self.lock().get(app).map_or(0, |q| q.events.len() as u64)
    }

    /// Every app with a queue and its backlog (for `/metrics` and `/status`).
    pub fn backlogs(&self) -> Vec<(String, u64)> {
        self.lock()
            .iter()
            .map(|(app, q)| (app.clone(), q.events.len() as u64))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Redis

/// Redis Streams on a connection of their own (to the fleet's Redis, `fleet.rs`), so that
/// notification traffic never delays the request path's nonce records and leases.
pub struct RedisStore {
    fleet: Arc<Fleet>,
    conn: tokio::sync::OnceCell<redis::aio::ConnectionManager>,
    /// Apps whose consumer group this process created or found, so that a publish does not
    /// send `XGROUP CREATE` every time; an app is forgotten on `NOGROUP` (Redis lost it).
    groups: Mutex<HashSet<String>>,
    /// The key of every entry's MAC.
    key: MacKey,
    /// What this node handed out per app, to refuse an entry written again.
    seen: Mutex<HashMap<String, Seen>>,
    /// The last id this node published per app.
    last_ids: Mutex<HashMap<String, EventId>>,
    /// Entries refused (`portico_notify_forged_total`).
    forged: IntCounter,
}

/// Ids acknowledged through this node remembered per app at most (the oldest forgotten):
/// ≈ 40 KB per app that acks through the node.
pub const SEEN_ACKED_MAX: usize = 1_000;

/// Per app: the last id handed out as new, and ids acknowledged through this node.
#[derive(Debug, Default)]
struct Seen {
    high: Option<EventId>,
    acked: HashSet<EventId>,
    order: VecDeque<EventId>,
}

impl Seen {
    fn acked(&mut self, id: EventId) {
        if self.acked.insert(id) {
            self.order.push_back(id);
        }
        while self.order.len() > SEEN_ACKED_MAX {
            if let Some(old) = self.order.pop_front() {
                self.acked.remove(&old);
            }
        }
    }
}

/// An entry as read, before it is checked.
#[derive(Debug)]
struct Raw {
    event: Event,
    keep_until_ms: u64,
    mac: Option<String>,
}

impl Raw {
    fn fields(&self) -> EntryFields<'_> {
        EntryFields {
            topic: &self.event.topic,
            payload: &self.event.payload,
            published_at_ms: self.event.published_at_ms,
            expires_at_ms: self.event.expires_at_ms,
            keep_until_ms: self.keep_until_ms,
            key: self.event.key.as_deref(),
        }
    }
}

/// The Pub/Sub channel every gateway with Redis subscribes to: a message is the key of an
/// app whose stream grew, so that a stream held on another node is woken at once instead
/// of at its next poll (docs/operations/notifications.md, "Notifications").
pub const WAKE_CHANNEL: &str = "portico:notify:wake";

/// The longest a notifications command may take (the request path's Redis commands have
/// `fleet::REDIS_TIMEOUT`; a batch of events is bigger and nothing waits on it inline).
pub const REDIS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

fn stream_key(app: &str) -> String {
    format!("portico:notify:{{{app}}}")
}

fn dedupe_key(app: &str, topic: &str, key: &str) -> String {
    format!("portico:notify:{{{app}}}:dedupe:{topic}:{key}")
}

/// KEYS: the stream, then the de-duplication key if the event has a publisher id. ARGV: the
/// de-duplication expiry (ms), `MINID`, the id chosen, the app (announced on
/// [`WAKE_CHANNEL`]), then the entry's fields and values. Answers `{1, id}` (stored),
/// `{0, original id}` (a duplicate) or `{2, the stream's last id}` (the id chosen is not
/// above it: choose again).
const PUBLISH: &str = r"
if KEYS[2] then
  local prev = redis.call('GET', KEYS[2])
  if prev then return {0, prev} end
end
local ok, id = pcall(redis.call, 'XADD', KEYS[1], 'MINID', '~', ARGV[2], ARGV[3], unpack(ARGV, 5))
if not ok then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then return {2, info[i + 1]} end
  end
  return redis.error_reply('XADD refused the id ' .. ARGV[3])
end
if KEYS[2] then redis.call('SET', KEYS[2], id, 'PX', ARGV[1]) end
redis.call('PUBLISH', 'portico:notify:wake', ARGV[4])
return {1, id}
";

/// The id to publish at `now_ms` after `last`: `<now>-0`, or just above `last`.
fn next_id(now_ms: u64, last: Option<EventId>) -> EventId {
    let at_now = EventId { ms: now_ms, seq: 0 };
    match last {
        Some(l) if l >= at_now => EventId {
            ms: l.ms,
            seq: l.seq.saturating_add(1),
        },
        _ => at_now,
    }
}

fn lock_map<T>(m: &Mutex<HashMap<String, T>>) -> MutexGuard<'_, HashMap<String, T>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Tries of a publish whose chosen id another publisher took first.
const PUBLISH_TRIES: usize = 8;

/// Redis's answer as text, for errors. A lost connection is reported to the fleet (its
/// probe decides when Redis is back); a slow command is not: notifications run on their own
/// connection and their load must not switch the request path's Redis features off.
fn failed(fleet: &Fleet, what: &str, e: &redis::RedisError) -> String {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        fleet.redis_failed(format!("notify {what}: {e}"));
    }
    format!("{what}: {e}")
}

fn lock_set(m: &Mutex<HashSet<String>>) -> MutexGuard<'_, HashSet<String>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        _ => &[],
    }
}

/// One stream entry `[id, [field, value, ...]]`; `None` for an entry whose data was
/// trimmed away.
fn entry(v: &Value) -> Option<Raw> {
    let parts = items(v);
    let id = EventId::parse(&text(parts.first()?)?)?;
    let fields = items(parts.get(1)?);
    let mut raw = Raw {
        event: Event {
            id,
            topic: String::new(),
            payload: String::from("null"),
            published_at_ms: id.ms,
            expires_at_ms: 0,
            key: None,
        },
        keep_until_ms: 0,
        mac: None,
    };
    let e = &mut raw.event;
    for pair in fields.chunks(2) {
        let (Some(k), Some(v)) = (pair.first().and_then(text), pair.get(1).and_then(text)) else {
            continue;
        };
        match k.as_str() {
            "t" => e.topic = v,
            "p" => e.payload = v,
            "at" => e.published_at_ms = v.parse().unwrap_or(id.ms),
            "x" => e.expires_at_ms = v.parse().unwrap_or(0),
            "k" => e.key = Some(v),
            "r" => raw.keep_until_ms = v.parse().unwrap_or(0),
            "m" => raw.mac = Some(v),
            _ => {}
        }
    }
    Some(raw)
}

/// The entries of an `XREADGROUP` answer (one stream).
fn read_entries(v: &Value) -> Vec<Raw> {
    let mut out = Vec::new();
    for stream in items(v) {
        if let Some(entries) = items(stream).get(1) {
            out.extend(items(entries).iter().filter_map(entry));
        }
    }
    out
}

/// Why an entry read from Redis is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// No MAC, or one that does not verify.
    Forged,
    /// A valid entry this node already handed out as new or saw acknowledged.
    Replayed,
    /// Past its keep-until time (an old entry written again, or one never trimmed).
    Stale,
}

impl RedisStore {
    pub fn new(fleet: Arc<Fleet>, key: MacKey, forged: IntCounter) -> RedisStore {
        RedisStore {
            fleet,
            conn: tokio::sync::OnceCell::new(),
            groups: Mutex::new(HashSet::new()),
            key,
            seen: Mutex::new(HashMap::new()),
            last_ids: Mutex::new(HashMap::new()),
            forged,
        }
    }

    fn seen(&self) -> MutexGuard<'_, HashMap<String, Seen>> {
        lock_map(&self.seen)
    }

    /// Why `raw` (read from `app`'s stream; `fresh`: handed out as new) must not be
    /// delivered, if it must not.
    fn judge(&self, app: &str, raw: &Raw, fresh: bool, now_ms: u64) -> Option<Refused> {
        let valid = raw
            .mac
            .as_deref()
            .is_some_and(|m| self.key.verify(app, raw.event.id, &raw.fields(), m));
        if !valid {
            return Some(Refused::Forged);
        }
        if raw.keep_until_ms <= now_ms {
            return Some(Refused::Stale);
        }
        let mut seen = self.seen();
        let s = seen.entry(app.to_owned()).or_default();
        let id = raw.event.id;
        if s.acked.contains(&id) || (fresh && s.high.is_some_and(|h| id <= h)) {
            return Some(Refused::Replayed);
        }
        if fresh {
            s.high = Some(id);
        }
        None
    }

    /// The entries of `raw` that may be delivered; the others are logged, counted (all
    /// but stale ones) and acknowledged and deleted, so that they are never read again.
    async fn checked(&self, app: &str, raw: Vec<Raw>, fresh: bool) -> Vec<Event> {
        let now = portico_control::clock::now_ms();
        let mut out = Vec::with_capacity(raw.len());
        let mut refused = Vec::new();
        for r in raw {
            match self.judge(app, &r, fresh, now) {
                None => out.push(r.event),
                Some(why) => {
                    if why == Refused::Stale {
                        tracing::debug!(app, id = %r.event.id, "notify: entry past its retention dropped");
                    } else {
                        self.forged.inc();
                        tracing::warn!(app, id = %r.event.id, reason = ?why, "notify: a Redis stream entry failed verification and was dropped (docs/SECURITY.md, \"A hostile Redis\")");
                    }
                    refused.push(r.event.id.to_string());
                }
            }
        }
        if !refused.is_empty() {
            if let Ok(mut c) = self.conn().await {
                let key = stream_key(app);
                let mut pipe = redis::pipe();
                pipe.cmd("XACK")
                    .arg(&key)
                    .arg(GROUP)
                    .arg(&refused)
                    .ignore()
                    .cmd("XDEL")
                    .arg(&key)
                    .arg(&refused)
                    .ignore();
                let r: redis::RedisResult<()> = pipe.query_async(&mut c).await;
                if let Err(e) = r {
                    tracing::debug!(app, error = %e, "notify: dropping refused entries failed");
                }
            }
        }
        out
    }

    /// This store's connection, opened on first use; `Err` while the fleet's probe finds
    /// Redis down (fail fast rather than wait for a timeout).
    async fn conn(&self) -> Result<redis::aio::ConnectionManager, String> {
        let client = self
            .fleet
            .redis_client()
            .filter(|_| self.fleet.redis_up())
            .ok_or_else(|| "Redis is not reachable".to_owned())?;
        self.conn
            .get_or_try_init(|| crate::fleet::connect_with(client, REDIS_TIMEOUT))
            .await
            .cloned()
            .map_err(|e| failed(&self.fleet, "connect", &e))
    }

    /// A `NOGROUP` answer: the group is gone (Redis restarted empty, the key was deleted).
    fn lost_group(&self, app: &str, e: &redis::RedisError) -> bool {
        let lost = e.code() == Some("NOGROUP");
        if lost {
            lock_set(&self.groups).remove(app);
        }
        lost
    }

    /// Creates the app's group (and stream) unless this process knows it exists; new groups
    /// start at the stream's beginning so that events published before the first
    /// connection are kept.
    async fn ensure_group(&self, app: &str) -> Result<(), String> {
        if lock_set(&self.groups).contains(app) {
            return Ok(());
        }
        let mut c = self.conn().await?;
        let r: redis::RedisResult<Value> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream_key(app))
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut c)
            .await;
        match r {
            Ok(_) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(failed(&self.fleet, "XGROUP CREATE", &e)),
        }
        lock_set(&self.groups).insert(app.to_owned());
        Ok(())
    }

    async fn publish(&self, app: &str, e: NewEvent) -> Result<Stored, String> {
        self.ensure_group(app).await?;
        let mut c = self.conn().await?;
        let now = portico_control::clock::now_ms();
        let oldest = now.saturating_sub(e.retention_ms);
        let keep_until_ms = e.published_at_ms.saturating_add(e.retention_ms.max(1));
        let fields = EntryFields {
            topic: &e.topic,
            payload: &e.payload,
            published_at_ms: e.published_at_ms,
            expires_at_ms: e.expires_at_ms,
            keep_until_ms,
            key: e.key.as_deref(),
        };
        // Just above the last id this node published for the app: publishes within one ms
        // do not collide (one round trip); another node's take one more.
        let last = lock_map(&self.last_ids).get(app).copied();
        let mut id = next_id(now, last);
        for _ in 0..PUBLISH_TRIES {
            let mac = self.key.sign(app, id, &fields);
            let script = redis::Script::new(PUBLISH);
            let mut inv = script.prepare_invoke();
            inv.key(stream_key(app));
            if let Some(k) = &e.key {
                inv.key(dedupe_key(app, &e.topic, k));
            }
            inv.arg(e.dedupe_ms.max(1))
                .arg(oldest)
                .arg(id.to_string())
                .arg(app)
                .arg("t")
                .arg(&e.topic)
                .arg("p")
                .arg(&e.payload)
                .arg("at")
                .arg(e.published_at_ms)
                .arg("x")
                .arg(e.expires_at_ms)
                .arg("r")
                .arg(keep_until_ms);
            if let Some(k) = &e.key {
                inv.arg("k").arg(k);
            }
            inv.arg("m").arg(mac);
            let (outcome, answered): (i64, String) = inv
                .invoke_async(&mut c)
                .await
                .map_err(|err| failed(&self.fleet, "XADD", &err))?;
            let answered = EventId::parse(&answered)
                .ok_or_else(|| format!("XADD answered an odd id {answered:?}"))?;
            if outcome != 0 {
                lock_map(&self.last_ids).insert(app.to_owned(), answered);
            }
            match outcome {
                1 => {
                    return Ok(Stored {
                        id: answered,
                        duplicate: false,
                    })
                }
                0 => {
                    return Ok(Stored {
                        id: answered,
                        duplicate: true,
                    })
                }
                // Another publisher (or a clock ahead of ours) took the id: just above it.
                _ => id = next_id(portico_control::clock::now_ms(), Some(answered)),
            }
        }
        Err(format!(
            "XADD: no free id after {PUBLISH_TRIES} tries (publishers racing on {app:?})"
        ))
    }

    async fn resume(&self, app: &str, last_acked: Option<EventId>) -> Result<Vec<Event>, String> {
        self.ensure_group(app).await?;
        let mut c = self.conn().await?;
        let key = stream_key(app);
        if let Some(upto) = last_acked {
            let pending: Value = redis::cmd("XPENDING")
                .arg(&key)
                .arg(GROUP)
                .arg("-")
                .arg(upto.to_string())
                .arg(100_000)
                .query_async(&mut c)
                .await
                .map_err(|e| failed(&self.fleet, "XPENDING", &e))?;
            let ids: Vec<String> = items(&pending)
                .iter()
                .filter_map(|p| items(p).first().and_then(text))
                .collect();
            if !ids.is_empty() {
                let _: u64 = redis::cmd("XACK")
                    .arg(&key)
                    .arg(GROUP)
                    .arg(&ids)
                    .query_async(&mut c)
                    .await
                    .map_err(|e| failed(&self.fleet, "XACK", &e))?;
            }
        }
        let mut out = Vec::new();
        let mut after = String::from("0");
        loop {
            let v: Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(GROUP)
                .arg("COUNT")
                .arg(1000)
                .arg("STREAMS")
                .arg(&key)
                .arg(&after)
                .query_async(&mut c)
                .await
                .map_err(|e| failed(&self.fleet, "XREADGROUP", &e))?;
            let got = read_entries(&v);
            let Some(last) = got.last().map(|r| r.event.id) else {
                break;
            };
            out.extend(self.checked(app, got, false).await);
            after = last.to_string();
        }
        Ok(out)
    }

    async fn poll(&self, app: &str, ack_timeout_ms: u64, max: usize) -> Result<Batch, String> {
        let mut c = self.conn().await?;
        let key = stream_key(app);
        let mut pipe = redis::pipe();
        pipe.cmd("XAUTOCLAIM")
            .arg(&key)
            .arg(GROUP)
            .arg(GROUP)
            .arg(ack_timeout_ms)
            .arg("0-0")
            .arg("COUNT")
            .arg(REDELIVER_MAX);
        // COUNT 0 would mean "no limit": with no room, no new events are read.
        if max > 0 {
            pipe.cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(GROUP)
                .arg("COUNT")
                .arg(max)
                .arg("STREAMS")
                .arg(&key)
                .arg(">");
        } else {
            pipe.cmd("PING");
        }
        pipe.cmd("XPENDING").arg(&key).arg(GROUP);
        let (claimed, fresh, summary): (Value, Value, Value) = match pipe.query_async(&mut c).await
        {
            Ok(v) => v,
            Err(e) if self.lost_group(app, &e) => {
                self.ensure_group(app).await?;
                return Ok(Batch::default());
            }
            Err(e) => return Err(failed(&self.fleet, "poll", &e)),
        };
        let redeliver: Vec<Raw> = items(&claimed)
            .get(1)
            .map(|v| items(v).iter().filter_map(entry).collect())
            .unwrap_or_default();
        let fresh = read_entries(&fresh);
        let read = redeliver.len() + fresh.len();
        let redeliver = self.checked(app, redeliver, false).await;
        let fresh = self.checked(app, fresh, true).await;
        // Entries refused were pending when counted, and are acknowledged since.
        let refused = (read - redeliver.len() - fresh.len()) as u64;
        let pending = items(&summary)
            .first()
            .and_then(text)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
            .saturating_sub(refused);
        Ok(Batch {
            redeliver,
            fresh,
            pending,
        })
    }

    async fn ack(&self, app: &str, ids: &[EventId]) -> Result<u64, String> {
        if ids.is_empty() {
            return Ok(0);
        }
        {
            // Only ids that can exist: a merchant cannot acknowledge its future events away.
            let now = portico_control::clock::now_ms();
            let mut seen = self.seen();
            let s = seen.entry(app.to_owned()).or_default();
            for id in ids.iter().filter(|id| id.ms <= now) {
                s.acked(*id);
            }
        }
        let mut c = self.conn().await?;
        let ids: Vec<String> = ids.iter().map(EventId::to_string).collect();
        let r: redis::RedisResult<u64> = redis::cmd("XACK")
            .arg(stream_key(app))
            .arg(GROUP)
            .arg(&ids)
            .query_async(&mut c)
            .await;
        match r {
            Ok(n) => Ok(n),
            Err(e) if e.code() == Some("NOGROUP") => Ok(0),
            Err(e) => Err(failed(&self.fleet, "XACK", &e)),
        }
    }

    async fn backlog(&self, app: &str) -> Result<u64, String> {
        let mut c = self.conn().await?;
        let r: redis::RedisResult<Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(stream_key(app))
            .query_async(&mut c)
            .await;
        let v = match r {
            Ok(v) => v,
            Err(e) if e.code() == Some("ERR") => return Ok(0),
            Err(e) => return Err(failed(&self.fleet, "XINFO", &e)),
        };
        let mut total = 0;
        for group in items(&v) {
            let fields = items(group);
            for pair in fields.chunks(2) {
                let (Some(k), Some(v)) = (pair.first().and_then(text), pair.get(1)) else {
                    continue;
                };
                if k == "pending" || k == "lag" {
                    total += text(v).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
                }
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn new(topic: &str) -> NewEvent {
        NewEvent {
            topic: topic.to_owned(),
            payload: "{}".to_owned(),
            published_at_ms: 1,
            expires_at_ms: 0,
            key: None,
            retention_ms: 86_400_000,
            dedupe_ms: 86_400_000,
        }
    }

    #[test]
    fn entry_macs_bind_the_app_the_id_and_every_field() {
        let key = MacKey::new(&[7u8; 32]).unwrap();
        let f = EntryFields {
            topic: "orders",
            payload: r#"{"refund":"IBAN-X"}"#,
            published_at_ms: 5,
            expires_at_ms: 0,
            keep_until_ms: 10,
            key: Some("k1"),
        };
        let id = EventId { ms: 5, seq: 0 };
        let mac = key.sign("merchant-1", id, &f);
        assert!(key.verify("merchant-1", id, &f, &mac));
        // Another app's stream, another id, any field changed, another key: refused.
        assert!(!key.verify("merchant-2", id, &f, &mac));
        assert!(!key.verify("merchant-1", EventId { ms: 5, seq: 1 }, &f, &mac));
        for changed in [
            EntryFields {
                topic: "orderz",
                ..f
            },
            EntryFields { payload: "{}", ..f },
            EntryFields {
                keep_until_ms: 11,
                ..f
            },
            EntryFields {
                expires_at_ms: 1,
                ..f
            },
            EntryFields { key: None, ..f },
            EntryFields {
                key: Some("k2"),
                ..f
            },
        ] {
            assert!(!key.verify("merchant-1", id, &changed, &mac));
        }
        assert!(!MacKey::new(&[8u8; 32])
            .unwrap()
            .verify("merchant-1", id, &f, &mac));
        assert!(!key.verify("merchant-1", id, &f, "zz"));
        assert!(MacKey::new(b"short").is_err());
    }

    #[test]
    fn publish_ids_follow_the_clock_and_never_repeat() {
        assert_eq!(next_id(5, None), EventId { ms: 5, seq: 0 });
        assert_eq!(
            next_id(5, Some(EventId { ms: 4, seq: 9 })),
            EventId { ms: 5, seq: 0 }
        );
        assert_eq!(
            next_id(5, Some(EventId { ms: 5, seq: 0 })),
            EventId { ms: 5, seq: 1 }
        );
        // A clock behind the stream's last id: just above it.
        assert_eq!(
            next_id(3, Some(EventId { ms: 7, seq: 2 })),
            EventId { ms: 7, seq: 3 }
        );
    }

    #[test]
    fn ids_parse_and_order() {
        let a = EventId::parse("5-1").unwrap();
        let b = EventId::parse("5-10").unwrap();
        assert!(a < b);
        assert_eq!(a.to_string(), "5-1");
        assert_eq!(EventId::parse("7").unwrap(), EventId { ms: 7, seq: 0 });
        assert!(EventId::parse("x-1").is_none());
    }

    #[test]
    fn memory_delivers_in_order_redelivers_and_forgets_acked() {
        let m = MemoryStore::new(3);
        let ids: Vec<EventId> = (0..4).map(|_| m.publish("a", new("t")).id).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        // Bounded: the oldest was dropped.
        assert_eq!(m.backlog("a"), 3);
        let b = m.poll("a", 60_000, 10);
        assert_eq!(
            b.fresh.iter().map(|e| e.id).collect::<Vec<_>>(),
            ids[1..].to_vec()
        );
        assert_eq!(b.pending, 3);
        assert!(m.poll("a", 60_000, 10).fresh.is_empty());
        assert_eq!(m.ack("a", &[ids[1], ids[1]]), 1);
        // Timeout 0: everything pending is due again.
        let again = m.poll("a", 0, 10);
        assert_eq!(again.redeliver.len(), 2);
        // A new stream: the pending ones first; Last-Event-ID acks up to it.
        let resumed = m.resume("a", Some(ids[2]));
        assert_eq!(
            resumed.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![ids[3]]
        );
        assert_eq!(m.backlog("a"), 1);
    }

    #[test]
    fn memory_stores_a_publisher_id_once_per_topic_within_the_window() {
        let m = MemoryStore::new(100);
        let keyed = |topic: &str, key: &str, dedupe_ms: u64| NewEvent {
            key: Some(key.into()),
            dedupe_ms,
            ..new(topic)
        };
        let first = m.publish("a", keyed("t", "k1", 60_000));
        assert!(!first.duplicate);
        let again = m.publish("a", keyed("t", "k1", 60_000));
        assert_eq!((again.id, again.duplicate), (first.id, true));
        // Another topic, another app, another key: new events.
        assert!(!m.publish("a", keyed("u", "k1", 60_000)).duplicate);
        assert!(!m.publish("b", keyed("t", "k1", 60_000)).duplicate);
        assert!(!m.publish("a", keyed("t", "k2", 60_000)).duplicate);
        assert_eq!(m.backlog("a"), 3);
        // A window of 0 ms: remembered for no time at all.
        assert!(!m.publish("a", keyed("t", "k3", 0)).duplicate);
        assert!(!m.publish("a", keyed("t", "k3", 0)).duplicate);
    }
}
