//! The hot-key detector of one API (docs/OPERATIONS.md, "Hot keys"): a Space-Saving
//! heavy-hitter count over requests and response bytes per key, in fixed memory whatever the
//! key cardinality. Not a stage: the `cache` stage feeds it and asks it.
//!
//! Counting runs in windows of [`WINDOW_MS`]: `capacity` counters (4 × `top`, at least 64);
//! a key not counted replaces the smallest counter and inherits its count as its error
//! (Space-Saving), so any key with more than 1/capacity of a window's requests is kept.
//! When a window closes, each counter's guaranteed rate (count − error) and bytes per second
//! are compared with `rate_above` and `bandwidth_share_above × link_bytes_per_s`; the hot set
//! (at most `top` keys, the highest rates first) is published behind an `ArcSwap`, so asking
//! "is this key hot" takes no lock. A key stays hot while each window finds it hot; `since`
//! is when it became hot.

use arc_swap::ArcSwap;
use portico_control::HotKeysSpec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The counting window, in milliseconds.
pub const WINDOW_MS: u64 = 500;
/// The fewest counters a detector keeps.
pub const MIN_COUNTERS: usize = 64;
/// The longest key kept as it is; longer keys are counted by a digest of them.
pub const MAX_KEY_BYTES: usize = 256;

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
}

#[derive(Debug, Clone, Default)]
struct Counter {
    count: u64,
    error: u64,
    bytes: u64,
}

#[derive(Debug)]
struct Window {
    start_ms: u64,
    counters: HashMap<String, Counter>,
}

/// One API's detector.
#[derive(Debug)]
pub struct Detector {
    spec: HotKeysSpec,
    capacity: usize,
    window: Mutex<Window>,
    hot: ArcSwap<HashMap<String, HotKey>>,
    /// Times a key became hot (for `/metrics`).
    pub detections: AtomicU64,
}

impl Detector {
    pub fn new(spec: HotKeysSpec, now_ms: u64) -> Detector {
        let capacity = (spec.top * 4).max(MIN_COUNTERS);
        Detector {
            spec,
            capacity,
            window: Mutex::new(Window {
                start_ms: now_ms,
                counters: HashMap::with_capacity(capacity),
            }),
            hot: ArcSwap::from_pointee(HashMap::new()),
            detections: AtomicU64::new(0),
        }
    }

    /// How many counters the detector keeps: its memory is this many keys of at most
    /// [`MAX_KEY_BYTES`] each.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counts one request for `key` (and `bytes` of its answer, when known) at `now_ms`.
    pub fn record(&self, key: &str, bytes: u64, now_ms: u64) {
        let key = bounded_key(key);
        let Ok(mut w) = self.window.lock() else {
            return;
        };
        self.roll_if_due(&mut w, now_ms);
        if let Some(c) = w.counters.get_mut(key.as_ref()) {
            c.count += 1;
            c.bytes += bytes;
            return;
        }
        let mut counter = Counter {
            count: 1,
            error: 0,
            bytes,
        };
        if w.counters.len() >= self.capacity {
            // Space-Saving: the new key takes the smallest counter's place and count.
            let smallest = w
                .counters
                .iter()
                .min_by_key(|(_, c)| c.count)
                .map(|(k, c)| (k.clone(), c.count));
            if let Some((k, count)) = smallest {
                w.counters.remove(&k);
                counter.count = count + 1;
                counter.error = count;
            }
        }
        w.counters.insert(key.into_owned(), counter);
    }

    /// Adds `bytes` of an answer to `key`'s counter if it is counted (the request itself was
    /// counted by [`Detector::record`] before the answer was known).
    pub fn add_bytes(&self, key: &str, bytes: u64) {
        let key = bounded_key(key);
        if let Ok(mut w) = self.window.lock() {
            if let Some(c) = w.counters.get_mut(key.as_ref()) {
                c.bytes += bytes;
            }
        }
    }

    /// Whether `key` is hot now (no lock).
    pub fn is_hot(&self, key: &str) -> bool {
        let hot = self.hot.load();
        !hot.is_empty() && hot.contains_key(bounded_key(key).as_ref())
    }

    /// The hot keys, highest rate first, after closing the window if it is due at `now_ms`.
    pub fn hot_keys(&self, now_ms: u64) -> Vec<HotKey> {
        if let Ok(mut w) = self.window.lock() {
            self.roll_if_due(&mut w, now_ms);
        }
        let mut list: Vec<HotKey> = self.hot.load().values().cloned().collect();
        list.sort_by(|a, b| b.rate.total_cmp(&a.rate).then(a.key.cmp(&b.key)));
        list
    }

    fn roll_if_due(&self, w: &mut Window, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(w.start_ms);
        if elapsed < WINDOW_MS {
            return;
        }
        let secs = elapsed as f64 / 1000.0;
        let previous = self.hot.load();
        let bandwidth_limit = self
            .spec
            .link_bytes_per_s
            .map(|link| link as f64 * self.spec.bandwidth_share_above);
        let mut found: Vec<(String, f64, f64)> = w
            .counters
            .iter()
            .filter_map(|(key, c)| {
                let rate = (c.count - c.error) as f64 / secs;
                let bytes_per_s = c.bytes as f64 / secs;
                let hot = rate > self.spec.rate_above
                    || bandwidth_limit.is_some_and(|limit| bytes_per_s > limit);
                hot.then(|| (key.clone(), rate, bytes_per_s))
            })
            .collect();
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        found.truncate(self.spec.top);
        let mut next = HashMap::with_capacity(found.len());
        for (key, rate, bytes_per_s) in found {
            let since_ms = match previous.get(&key) {
                Some(before) => before.since_ms,
                None => {
                    self.detections.fetch_add(1, Ordering::Relaxed);
                    now_ms
                }
            };
            let shown = crate::edge::keys::display_key(&key);
            next.insert(
                key,
                HotKey {
                    key: shown,
                    rate,
                    bytes_per_s,
                    since_ms,
                },
            );
        }
        // A window that saw nothing for a long time starts afresh.
        w.counters.clear();
        w.start_ms = now_ms;
        if !(next.is_empty() && previous.is_empty()) {
            self.hot.store(Arc::new(next));
        }
    }
}

/// `key` itself up to [`MAX_KEY_BYTES`], else a digest of it (so memory stays fixed).
pub fn bounded_key(key: &str) -> std::borrow::Cow<'_, str> {
    if key.len() <= MAX_KEY_BYTES {
        return std::borrow::Cow::Borrowed(key);
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    std::borrow::Cow::Owned(format!("sha256:{}", hex::encode(digest)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
                d.record("BK-1", 0, t);
            }
            d.record(&format!("cold-{i}"), 0, t);
        }
        assert!(!d.is_hot("BK-1"), "not before the window closes");
        let hot = d.hot_keys(WINDOW_MS);
        assert_eq!(hot.len(), 1, "{hot:?}");
        assert_eq!(hot[0].key, "BK-1");
        assert!(hot[0].rate > 200.0, "{hot:?}");
        assert_eq!(hot[0].since_ms, WINDOW_MS);
        assert!(d.is_hot("BK-1") && !d.is_hot("cold-5"));
        assert_eq!(d.detections.load(Ordering::Relaxed), 1);
        // Memory is fixed: never more counters than the capacity.
        assert!(d.window.lock().unwrap().counters.len() <= d.capacity());
        // Still hot in the next window: `since` is kept; quiet afterwards: no longer hot.
        for _ in 0..300 {
            d.record("BK-1", 0, WINDOW_MS + 10);
        }
        assert_eq!(d.hot_keys(2 * WINDOW_MS)[0].since_ms, WINDOW_MS);
        assert!(d.hot_keys(3 * WINDOW_MS).is_empty());
        assert!(!d.is_hot("BK-1"));
    }

    #[test]
    fn the_bandwidth_rule() {
        let d = Detector::new(spec(1000.0, Some(1_000_000)), 0);
        for _ in 0..20 {
            d.record("big", 0, 10);
            d.add_bytes("big", 40_000);
            d.record("small", 100, 10);
        }
        let hot = d.hot_keys(WINDOW_MS);
        assert_eq!(hot.len(), 1, "{hot:?}");
        assert_eq!(hot[0].key, "big");
        assert!(hot[0].bytes_per_s > 700_000.0);
    }

    #[test]
    fn a_million_keys_keep_the_memory_fixed() {
        let d = Detector::new(spec(1e9, None), 0);
        for i in 0..1_000_000u64 {
            d.record(&i.to_string(), 10, i / 1000);
        }
        assert!(d.window.lock().unwrap().counters.len() <= d.capacity());
        let long = "k".repeat(10_000);
        d.record(&long, 0, 0);
        assert!(bounded_key(&long).len() < 100);
    }
}
