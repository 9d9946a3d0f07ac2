//! The response cache's and hot-key detectors' state, kept per API across reloads
//! ([`HotState`] in the plane's `Carried`), and the ticket the cache stage hands on for a
//! request it did not answer ([`CacheTicket`]). The stage itself is `cache.rs`.

use super::hot_keys::{Detector, Tally};
use bytes::Bytes;
use portico_control::{v1, HotPolicy};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Shards of one API's cache.
pub const SHARDS: usize = 16;

/// One cached answer.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Bytes,
    pub(super) etag: String,
    /// Unix ms when the answer was stored (for `Age`).
    pub(super) stored_ms: u64,
    pub(super) expires_ms: u64,
    pub(super) seq: u64,
    /// A marker, not an answer: the answers under this base key vary by these request
    /// headers (lower-case, sorted) and are stored under [`varied_key`]s.
    pub(super) vary: Option<Arc<[String]>>,
}

#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) map: HashMap<String, Arc<Entry>>,
    /// Keys in insertion order with their entry's `seq`, for oldest-first eviction.
    pub(super) order: VecDeque<(String, u64)>,
    pub(super) seq: u64,
}

/// One API's cache: bounded, sharded.
#[derive(Debug)]
pub struct ApiCache {
    pub(super) shards: Vec<Mutex<Shard>>,
    pub(super) per_shard: usize,
}

impl ApiCache {
    pub fn new(max_entries: usize) -> ApiCache {
        ApiCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: max_entries.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        &self.shards[(h as usize) % SHARDS]
    }

    pub(super) fn get(&self, key: &str, now_ms: u64) -> Option<Arc<Entry>> {
        let shard = self.shard(key).lock().ok()?;
        shard
            .map
            .get(key)
            .filter(|e| e.expires_ms > now_ms)
            .cloned()
    }

    pub(super) fn put(&self, key: String, mut entry: Entry) {
        let Ok(mut shard) = self.shard(&key).lock() else {
            return;
        };
        shard.seq += 1;
        entry.seq = shard.seq;
        shard.order.push_back((key.clone(), entry.seq));
        shard.map.insert(key, Arc::new(entry));
        while shard.map.len() > self.per_shard {
            let Some((old, seq)) = shard.order.pop_front() else {
                break;
            };
            if shard.map.get(&old).is_some_and(|e| e.seq == seq) {
                shard.map.remove(&old);
            }
        }
        // Replaced keys leave stale order records: keep them bounded too.
        if shard.order.len() > 2 * self.per_shard + 16 {
            let live: VecDeque<(String, u64)> = shard
                .order
                .iter()
                .filter(|(k, s)| shard.map.get(k).is_some_and(|e| e.seq == *s))
                .cloned()
                .collect();
            shard.order = live;
        }
    }

    /// Entries held now (fresh or not yet evicted).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map(|s| s.map.len()).unwrap_or(0))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Body bytes held now.
    pub fn body_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .map(|s| s.map.values().map(|e| e.body.len()).sum())
                    .unwrap_or(0)
            })
            .sum()
    }
}

/// One API's cache and detector, with its parsed policy.
#[derive(Debug)]
pub struct ApiHot {
    pub id: String,
    pub policy: Arc<HotPolicy>,
    pub cache: ApiCache,
    pub detector: Option<Detector>,
    /// Answers by how they were served: HIT (304s included), MISS (stored), BYPASS.
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub bypasses: AtomicU64,
}

/// Caches and detectors by API id, carried across reloads (see [`Carried`]).
#[derive(Debug, Default)]
pub struct HotState {
    pub(super) apis: Mutex<HashMap<String, (v1::ApiDefinition, Arc<ApiHot>)>>,
}

/// What the stage decided for a request it did not answer, for the invoke tier and
/// [`CacheStage::finish`].
#[derive(Debug, Clone)]
pub struct CacheTicket {
    pub api: Arc<ApiHot>,
    /// The cache key (binding and selector values); empty when `ttl_ms` is 0.
    pub key: String,
    /// Where the hot-key detector counted the request, when the API has a detector.
    pub tally: Option<Tally>,
    /// How long to keep a 200 answer; 0: do not store it.
    pub ttl_ms: u64,
    /// Largest body read whole.
    pub max_body: usize,
    /// The `If-None-Match` sent, if any.
    pub if_none_match: Option<String>,
    /// What the gateway tells the backend about the caller, for `Vary` on the headers it sets.
    pub app: Option<String>,
    pub client_ip: Option<IpAddr>,
}

impl CacheTicket {
    /// The body size up to which the invoke tier should read a 200 answer whole: set only
    /// when the answer may be stored. Any other answer is streamed, its bytes counted on the
    /// way (`invoke::Upstream::body_bytes`).
    pub fn collect(&self) -> Option<usize> {
        (self.ttl_ms > 0).then_some(self.max_body)
    }
}
