//! The hot-key detector of one API (docs/operations/caching.md, "Caching and hot keys"): a Space-Saving
//! heavy-hitter count over requests and response bytes per key, in fixed memory whatever the
//! key cardinality. Not a stage: the `cache` stage feeds it and asks it.
//!
//! Keys are counted by a 64-bit hash of their selector values ([`Detector::hasher`], a
//! foldhash keyed at random per detector, fed the values straight from the request: no key
//! string is built per request). The readable key (for `/status` and "block this key") is
//! made only when a counter needs it: when a key takes a free counter, or when a key already
//! counted is seen again in the window (docs/ARCHITECTURE.md, "The response cache").
//!
//! Counting runs in windows of [`WINDOW_MS`]: `capacity` counters (4 × `top`, at least 64)
//! split over [`SHARDS`] shards by hash, so concurrent requests for different keys rarely
//! meet on one lock. In a full shard, a key not counted replaces the smallest counter and
//! inherits its count as its error (Space-Saving), so any key with more than
//! 1/(capacity/SHARDS) of its shard's requests in a window is kept. When a window closes, each
//! counter's guaranteed rate (count − error) and bytes per second are compared with
//! `rate_above` and `bandwidth_share_above × link_bytes_per_s`; the hot set (at most `top`
//! keys, the highest rates first) is published behind an `ArcSwap`, so asking "is this key
//! hot" takes no lock (and, while nothing is hot, not even that load).
//!
//! A request costs one shard lock: [`Detector::record`] counts it under the lock and returns a
//! [`Tally`] naming its counter's slot; the answer's bytes are added later to that slot's
//! atomic byte count without a lock ([`Detector::add_bytes`]), if the slot still counts the
//! same key (a slot taken over by another key in between gets those bytes: one answer's worth
//! of error in an estimate that is approximate anyway).

use crate::edge::key_text::{display_key, KEY_SEPARATOR};
use arc_swap::ArcSwap;
use portico_control::HotKeysSpec;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The counting window, in milliseconds.
pub const WINDOW_MS: u64 = 500;
/// The fewest counters a detector keeps.
pub const MIN_COUNTERS: usize = 64;
/// The longest key kept as it is; longer keys are shown as a digest of them.
pub const MAX_KEY_BYTES: usize = 256;
/// Shards of one detector's counters.
pub const SHARDS: usize = 4;

/// A key the detector found hot.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HotKey {
    /// The key as shown to operators (selector values joined by `|`).
    pub key: String,
    /// Requests per second in the last window (a lower bound).
    pub rate: f64,
    /// Response bytes per second in the last window.
    pub bytes_per_s: f64,
    /// Unix ms when the key became hot.
    pub since_ms: u64,
    /// The key-level switch `match` that selects exactly this key (each selector of the policy's
    /// key with its one value), for "block this key" (docs/operations/caching.md, "Caching and hot keys").
    /// `None` when no switch can: the key was counted by a digest, or a part of it is missing from
    /// the requests (a switch matches present values only).
    pub switch_match: Option<std::collections::BTreeMap<String, Vec<String>>>,
}

/// Hashes that are already hashes: used as they are.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type ByHash<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// Where [`Detector::record`] counted a request: the key's hash and its counter's slot, for
/// [`Detector::add_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub hash: u64,
    slot: u32,
}

#[derive(Debug, Clone, Default)]
struct Counter {
    hash: u64,
    count: u64,
    error: u64,
    /// The readable key (bounded by [`bounded_key`]), once it was needed.
    name: Option<Box<str>>,
}

/// A slot's byte count, outside the shard's lock: `owner` is the hash of the key the slot
/// counts (0: none).
#[derive(Debug, Default)]
struct ByteCount {
    owner: AtomicU64,
    bytes: AtomicU64,
}

#[derive(Debug, Default)]
struct Shard {
    /// Key hash → index in `slots`.
    index: ByHash<u32>,
    slots: Vec<Counter>,
}

/// One API's detector.
#[derive(Debug)]
pub struct Detector {
    spec: HotKeysSpec,
    capacity: usize,
    per_shard: usize,
    hasher: foldhash::quality::RandomState,
    shards: Vec<Mutex<Shard>>,
    /// Per shard, per slot: the bytes of the answers to the slot's key.
    bytes: Vec<Box<[ByteCount]>>,
    /// Unix ms when the current window started; whoever moves it closes the window.
    window_start: AtomicU64,
    hot: ArcSwap<ByHash<HotKey>>,
    /// Whether `hot` holds any key.
    any_hot: AtomicBool,
    /// Times a key became hot (for `/metrics`).
    pub detections: AtomicU64,
}

impl Detector {
    pub fn new(spec: HotKeysSpec, now_ms: u64) -> Detector {
        let per_shard = (spec.top * 4).max(MIN_COUNTERS).div_ceil(SHARDS);
        Detector {
            spec,
            capacity: per_shard * SHARDS,
            per_shard,
            hasher: foldhash::quality::RandomState::default(),
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        index: ByHash::with_capacity_and_hasher(per_shard, Default::default()),
                        slots: Vec::with_capacity(per_shard),
                    })
                })
                .collect(),
            bytes: (0..SHARDS)
                .map(|_| (0..per_shard).map(|_| ByteCount::default()).collect())
                .collect(),
            window_start: AtomicU64::new(now_ms),
            hot: ArcSwap::from_pointee(ByHash::default()),
            any_hot: AtomicBool::new(false),
            detections: AtomicU64::new(0),
        }
    }

    /// How many counters the detector keeps: its memory is this many counters with keys of
    /// at most [`MAX_KEY_BYTES`] each.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A hasher for one key: write each selector value's bytes with
    /// `write_u8(`[`KEY_SEPARATOR`]`)` between them, then `finish` (see [`Detector::hash_key`]).
    pub fn hasher(&self) -> impl Hasher {
        self.hasher.build_hasher()
    }

    /// The hash of a readable key (the selector values joined by [`KEY_SEPARATOR`]): the
    /// same as hashing its values one by one with [`Detector::hasher`].
    pub fn hash_key(&self, key: &str) -> u64 {
        let mut h = self.hasher();
        for (i, part) in key.split(char::from(KEY_SEPARATOR)).enumerate() {
            if i > 0 {
                h.write_u8(KEY_SEPARATOR);
            }
            h.write(part.as_bytes());
        }
        h.finish()
    }

    fn shard_of(hash: u64) -> usize {
        // The low bits pick the hash map's bucket; the high bits pick the shard.
        (hash >> 58) as usize % SHARDS
    }

    /// Counts one request for the key of hash `hash` at `now_ms`; `name` makes its readable
    /// key, called only when a counter needs it (see the module docs). `None` only if the
    /// shard's lock was poisoned.
    pub fn record(&self, hash: u64, name: impl FnOnce() -> String, now_ms: u64) -> Option<Tally> {
        self.roll_if_due(now_ms);
        let s = Self::shard_of(hash);
        let mut shard = self.shards[s].lock().ok()?;
        let shard = &mut *shard;
        if let Some(&slot) = shard.index.get(&hash) {
            let c = &mut shard.slots[slot as usize];
            c.count += 1;
            if c.name.is_none() {
                c.name = Some(bounded_key(&name()).into());
            }
            return Some(Tally { hash, slot });
        }
        let mut counter = Counter {
            hash,
            count: 1,
            ..Counter::default()
        };
        let slot = if shard.slots.len() < self.per_shard {
            counter.name = Some(bounded_key(&name()).into());
            shard.slots.push(counter);
            shard.slots.len() - 1
        } else {
            // Space-Saving: the new key takes the smallest counter's place and count.
            let (slot, smallest) = shard
                .slots
                .iter_mut()
                .enumerate()
                .min_by_key(|(_, c)| c.count)?;
            shard.index.remove(&smallest.hash);
            counter.count = smallest.count + 1;
            counter.error = smallest.count;
            *smallest = counter;
            slot
        };
        let cell = &self.bytes[s][slot];
        cell.owner.store(hash, Ordering::Relaxed);
        cell.bytes.store(0, Ordering::Relaxed);
        let slot = slot as u32;
        shard.index.insert(hash, slot);
        Some(Tally { hash, slot })
    }

    /// Adds `bytes` of an answer to the counter that counted its request (see the module
    /// docs), if that counter still counts the same key. No lock.
    pub fn add_bytes(&self, tally: Tally, bytes: u64) {
        let cells = &self.bytes[Self::shard_of(tally.hash)];
        if let Some(cell) = cells.get(tally.slot as usize) {
            if cell.owner.load(Ordering::Relaxed) == tally.hash {
                cell.bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }
    }

    /// Whether the key of hash `hash` is hot now (no lock; no load while nothing is hot).
    pub fn is_hot(&self, hash: u64) -> bool {
        self.any_hot.load(Ordering::Relaxed) && self.hot.load().contains_key(&hash)
    }

    /// The hot keys, highest rate first, after closing the window if it is due at `now_ms`.
    pub fn hot_keys(&self, now_ms: u64) -> Vec<HotKey> {
        self.roll_if_due(now_ms);
        let mut list: Vec<HotKey> = self.hot.load().values().cloned().collect();
        list.sort_by(|a, b| b.rate.total_cmp(&a.rate).then(a.key.cmp(&b.key)));
        list
    }

    /// Closes the window when it is due at `now_ms`: the one caller that moves
    /// `window_start` takes each shard's lock in turn (never two at once), reads and clears
    /// its counters, and publishes the hot set.
    fn roll_if_due(&self, now_ms: u64) {
        let start = self.window_start.load(Ordering::Acquire);
        let elapsed = now_ms.saturating_sub(start);
        if elapsed < WINDOW_MS {
            return;
        }
        if self
            .window_start
            .compare_exchange(start, now_ms, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let secs = elapsed as f64 / 1000.0;
        let previous = self.hot.load();
        let bandwidth_limit = self
            .spec
            .link_bytes_per_s
            .map(|link| link as f64 * self.spec.bandwidth_share_above);
        let mut found: Vec<(u64, Option<Box<str>>, f64, f64)> = Vec::new();
        for (shard, cells) in self.shards.iter().zip(&self.bytes) {
            let Ok(mut shard) = shard.lock() else {
                continue;
            };
            shard.index.clear();
            for (c, cell) in shard.slots.drain(..).zip(cells.iter()) {
                cell.owner.store(0, Ordering::Relaxed);
                let bytes = cell.bytes.swap(0, Ordering::Relaxed);
                let rate = (c.count - c.error) as f64 / secs;
                let bytes_per_s = bytes as f64 / secs;
                let hot = rate > self.spec.rate_above
                    || bandwidth_limit.is_some_and(|limit| bytes_per_s > limit);
                if hot {
                    found.push((c.hash, c.name, rate, bytes_per_s));
                }
            }
        }
        found.sort_by(|a, b| b.2.total_cmp(&a.2));
        found.truncate(self.spec.top);
        let mut next = ByHash::with_capacity_and_hasher(found.len(), Default::default());
        for (hash, name, rate, bytes_per_s) in found {
            let before = previous.get(&hash);
            let since_ms = match before {
                Some(before) => before.since_ms,
                None => {
                    self.detections.fetch_add(1, Ordering::Relaxed);
                    now_ms
                }
            };
            let (key, switch_match) = match (&name, before) {
                (Some(name), _) => (display_key(name), switch_match(&self.spec.key, name)),
                // Named in an earlier window.
                (None, Some(before)) => (before.key.clone(), before.switch_match.clone()),
                // Seen once in a window, in a full shard: known by its hash only.
                (None, None) => (format!("{UNNAMED_PREFIX}{hash:016x}"), None),
            };
            next.insert(
                hash,
                HotKey {
                    key,
                    rate,
                    bytes_per_s,
                    since_ms,
                    switch_match,
                },
            );
        }
        if !(next.is_empty() && previous.is_empty()) {
            self.any_hot.store(!next.is_empty(), Ordering::Relaxed);
            self.hot.store(Arc::new(next));
        }
    }
}

/// The prefix of a digested key (see [`bounded_key`]).
const DIGEST_PREFIX: &str = "sha256:";
/// The prefix of a hot key shown by its hash (never named: see the module docs).
const UNNAMED_PREFIX: &str = "hash:";

/// `key` itself up to [`MAX_KEY_BYTES`], else a digest of it (so memory stays fixed).
pub fn bounded_key(key: &str) -> std::borrow::Cow<'_, str> {
    if key.len() <= MAX_KEY_BYTES {
        return std::borrow::Cow::Borrowed(key);
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    std::borrow::Cow::Owned(format!("{DIGEST_PREFIX}{}", hex::encode(digest)))
}

/// The switch `match` naming exactly the counted `key` of the selectors `selectors`: each
/// selector with its value. `None` for what looks like a digest (a real key of that exact
/// shape is merely not offered), or when a part is empty (missing from the request).
fn switch_match(
    selectors: &[portico_control::selector::Selector],
    key: &str,
) -> Option<std::collections::BTreeMap<String, Vec<String>>> {
    let digest = key.len() == DIGEST_PREFIX.len() + 64
        && key.starts_with(DIGEST_PREFIX)
        && key[DIGEST_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit());
    if digest || selectors.is_empty() {
        return None;
    }
    let parts: Vec<&str> = key.split('\x1f').collect();
    if parts.len() != selectors.len() || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some(
        selectors
            .iter()
            .zip(parts)
            .map(|(sel, value)| (sel.to_string(), vec![value.to_owned()]))
            .collect(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rec(d: &Detector, key: &str, now_ms: u64) -> Tally {
        d.record(d.hash_key(key), || key.to_owned(), now_ms)
            .unwrap()
    }

    fn counted(d: &Detector) -> usize {
        d.shards.iter().map(|s| s.lock().unwrap().slots.len()).sum()
    }

    fn spec(rate_above: f64, link: Option<u64>) -> HotKeysSpec {
        HotKeysSpec {
            key: Vec::new(),
            rate_above,
            bandwidth_share_above: 0.7,
            link_bytes_per_s: link,
            auto_cache_ms: 1000,
            top: 20,
        }
    }

    #[test]
    fn one_hot_key_among_many_cold_ones() {
        let d = Detector::new(spec(200.0, None), 0);
        // 500 requests for the hot key and 10,000 distinct cold keys in one second.
        // All within one window.
        for i in 0..10_000u64 {
            let t = i * (WINDOW_MS - 1) / 10_000;
            if i % 20 == 0 {
                rec(&d, "BK-1", t);
            }
            rec(&d, &format!("cold-{i}"), t);
        }
        assert!(
            !d.is_hot(d.hash_key("BK-1")),
            "not before the window closes"
        );
        let hot = d.hot_keys(WINDOW_MS);
        assert_eq!(hot.len(), 1, "{hot:?}");
        assert_eq!(hot[0].key, "BK-1");
        assert!(hot[0].rate > 200.0, "{hot:?}");
        assert_eq!(hot[0].since_ms, WINDOW_MS);
        assert!(d.is_hot(d.hash_key("BK-1")) && !d.is_hot(d.hash_key("cold-5")));
        assert_eq!(d.detections.load(Ordering::Relaxed), 1);
        // Memory is fixed: never more counters than the capacity.
        assert!(counted(&d) <= d.capacity());
        // Still hot in the next window: `since` is kept; quiet afterwards: no longer hot.
        for _ in 0..300 {
            rec(&d, "BK-1", WINDOW_MS + 10);
        }
        assert_eq!(d.hot_keys(2 * WINDOW_MS)[0].since_ms, WINDOW_MS);
        assert!(d.hot_keys(3 * WINDOW_MS).is_empty());
        assert!(!d.is_hot(d.hash_key("BK-1")));
    }

    #[test]
    fn the_bandwidth_rule() {
        let d = Detector::new(spec(1000.0, Some(1_000_000)), 0);
        for _ in 0..20 {
            let big = rec(&d, "big", 10);
            d.add_bytes(big, 40_000);
            let small = rec(&d, "small", 10);
            d.add_bytes(small, 100);
        }
        let hot = d.hot_keys(WINDOW_MS);
        assert_eq!(hot.len(), 1, "{hot:?}");
        assert_eq!(hot[0].key, "big");
        assert!(hot[0].bytes_per_s > 700_000.0);
    }

    #[test]
    fn bytes_go_to_the_key_that_holds_the_slot() {
        let d = Detector::new(spec(1e9, Some(1_000)), 0);
        let t = rec(&d, "big", 10);
        d.add_bytes(t, 1_000);
        // Fill every shard with other keys twice over: "big" loses its slot to a newcomer.
        for i in 0..d.capacity() * 8 {
            for _ in 0..3 {
                rec(&d, &format!("k{i}"), 20);
            }
        }
        // The late answer of the evicted key is not counted for the slot's new key.
        d.add_bytes(t, 1_000_000);
        // A late answer from a closed window is dropped too.
        let again = rec(&d, "again", 30);
        let hot = d.hot_keys(WINDOW_MS);
        assert!(hot.is_empty(), "{hot:?}");
        d.add_bytes(again, 1_000_000);
        assert!(d.hot_keys(2 * WINDOW_MS).is_empty());
    }

    #[test]
    fn a_million_keys_keep_the_memory_fixed() {
        let d = Detector::new(spec(1e9, None), 0);
        for i in 0..1_000_000u64 {
            rec(&d, &i.to_string(), i / 1000);
        }
        assert!(counted(&d) <= d.capacity());
        let long = "k".repeat(10_000);
        rec(&d, &long, 0);
        assert!(bounded_key(&long).len() < 100);
        for s in &d.shards {
            let s = s.lock().unwrap();
            assert!(s.slots.len() <= d.per_shard && s.index.len() == s.slots.len());
            assert!(s
                .slots
                .iter()
                .all(|c| c.name.as_ref().is_none_or(|n| n.len() <= MAX_KEY_BYTES)));
        }
    }

    #[test]
    fn a_key_is_named_only_when_a_counter_needs_it() {
        let d = Detector::new(spec(1.0, None), 0);
        let named = std::cell::Cell::new(0);
        let name = |k: &str| {
            named.set(named.get() + 1);
            k.to_owned()
        };
        // Free counters: each new key is named once.
        for i in 0..d.capacity() * 4 {
            let k = format!("k{i}");
            d.record(d.hash_key(&k), || name(&k), 1);
        }
        let first = named.get();
        assert!(first <= d.capacity(), "{first}");
        // Full shards: new keys seen once are counted by hash only.
        for i in 0..10_000 {
            let k = format!("new{i}");
            d.record(d.hash_key(&k), || name(&k), 2);
        }
        assert_eq!(named.get(), first);
        // A key seen twice in a window is named; then not again.
        for _ in 0..5 {
            d.record(d.hash_key("BK-1"), || name("BK-1"), 3);
        }
        assert_eq!(named.get(), first + 1);
        let hot = d.hot_keys(WINDOW_MS);
        assert!(hot.iter().any(|k| k.key == "BK-1"), "{hot:?}");
    }

    #[test]
    fn the_hash_of_the_parts_is_the_hash_of_the_joined_key() {
        let d = Detector::new(spec(1.0, None), 0);
        let mut h = d.hasher();
        h.write(b"BK-1");
        h.write_u8(KEY_SEPARATOR);
        h.write(b"north");
        assert_eq!(h.finish(), d.hash_key("BK-1\x1fnorth"));
        assert_ne!(d.hash_key("a"), d.hash_key("b"));
    }

    #[test]
    fn a_hot_key_names_the_switch_match_that_blocks_exactly_it() {
        use portico_control::selector::Selector;
        let sels = Selector::parse_key(&["path:sku", "header:X-Region"]).unwrap();
        let m = switch_match(&sels, "BK-1\x1fnorth").unwrap();
        assert_eq!(m["path:sku"], vec!["BK-1".to_owned()]);
        // Header names are kept lower-case (they match whatever the case).
        assert_eq!(m["header:x-region"], vec!["north".to_owned()]);
        // A missing part, a digest or a different shape cannot be blocked by a switch.
        assert!(switch_match(&sels, "BK-1\x1f").is_none());
        assert!(switch_match(&sels, "BK-1").is_none());
        let digest = bounded_key(&"k".repeat(1000)).into_owned();
        assert!(switch_match(&sels[..1], &digest).is_none());
        assert!(switch_match(&sels[..1], "sha256:not-a-digest").is_some());
    }
}
