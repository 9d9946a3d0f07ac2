//! The replay cache of `auth` (docs/SECURITY.md, "Replays"): the nonces each app used within
//! the signature window, per gateway node.
//!
//! A nonce must be remembered until its call's timestamp + 300 s; after that the timestamp
//! check refuses a replay by itself. At 10,000 signed calls a second from one app that is
//! 3,000,000 live nonces, so the structure is built for size and for a bound:
//!
//! - **Compact entries.** A nonce is kept as a 64-bit SipHash keyed at random per process
//!   (collisions cannot be engineered; an accidental one among 3 million nonces has odds of
//!   about 1 in 4·10^6 per call) and the second until which it is remembered, rounded up
//!   (so a nonce is remembered up to one second longer, never shorter): 12 bytes, in a
//!   SwissTable with one control byte per slot, ≈ 13 bytes a slot, 15–30 bytes a nonce.
//! - **Sharded per app.** Each app has [`SHARDS`] tables behind their own mutex, chosen by
//!   hash bits the table itself does not use; no global lock, no lock held across calls.
//! - **A memory bound per app, failing closed only past it.** A shard may not grow its
//!   table past its share of the app's bound ([`ReplayCache::DEFAULT_BYTES_PER_APP`], set by
//!   `--replay-cache-mib`). When a shard is full and may not grow, its expired entries are
//!   swept inline (at most once a second); if it is still full the call is refused with 429
//!   `RATE_LIMITED` (`Retry-After: 1`). Forgetting unexpired nonces instead would reopen a
//!   replay window; refusing only affects an app that sends more signed calls than its bound
//!   holds (≈ 11,000 a second for 300 s with the default), and only the app's own secret
//!   holder can fill it. A replay is still told apart from a full cache.
//! - [`ReplayCache::housekeeping`] (every few seconds, off the request path) drops expired
//!   entries, shrinks tables left mostly empty after a burst, and forgets idle apps.

use dashmap::DashMap;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Tables per app. A power of two; the shard is chosen by bits 48..52 of the nonce's hash.
pub const SHARDS: usize = 16;

/// What [`ReplayCache::check_and_record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceCheck {
    /// Not seen in the window; now recorded.
    Fresh,
    /// Seen for this app within the window.
    Replayed,
    /// The app's share of the cache is full of unexpired nonces: the call is refused (not
    /// recorded).
    Full,
}

/// A nonce's keyed hash, stored as two `u32` so an entry packs into 12 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NonceKey([u32; 2]);

impl NonceKey {
    fn new(hash: u64) -> NonceKey {
        NonceKey([hash as u32, (hash >> 32) as u32])
    }

    fn value(self) -> u64 {
        u64::from(self.0[0]) | (u64::from(self.0[1]) << 32)
    }
}

impl Hash for NonceKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.value());
    }
}

/// The key is already a keyed SipHash: the table uses it as is.
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (see `NonceKey`); fold anything else in all the same.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Nonce → the Unix second until which it is remembered.
type Table = HashMap<NonceKey, u32, BuildHasherDefault<Prehashed>>;

/// Bytes of one slot: the 12-byte entry and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<(NonceKey, u32)>() + 1;

/// The bytes a table of `slots` slots allocates (plus one group of trailing control bytes).
fn table_bytes(slots: usize) -> usize {
    if slots == 0 {
        0
    } else {
        slots * SLOT_BYTES + 16
    }
}

/// The entries a table of `slots` slots holds before it must reorganise (SwissTable: 7/8 of
/// the slots, all but one below 8).
fn full_capacity(slots: usize) -> usize {
    if slots < 8 {
        slots.saturating_sub(1)
    } else {
        slots / 8 * 7
    }
}

/// The live entries a table at its bound keeps before it refuses: 15/16 of its capacity
/// (see `ReplayCache::make_room`).
fn usable(slots: usize) -> usize {
    let full = full_capacity(slots);
    full - full.div_ceil(16)
}

/// The slots a table sized for `capacity` entries has (SwissTable's `capacity_to_buckets`).
fn slots_for(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        1..=3 => 4,
        4..=7 => 8,
        c => (c * 8 / 7).next_power_of_two(),
    }
}

/// One of an app's tables. The SwissTable of `std` does not say how many slots it has, so
/// the shard follows it: it grows when it is full and more than half of its usable slots are
/// live (otherwise it reorganises in place); slots freed by `retain` may stay tombstones
/// that still count as used until then.
#[derive(Debug, Default)]
struct Shard {
    table: Table,
    /// The table's slots (see [`slots_for`]).
    slots: usize,
    /// When an inline sweep last ran (Unix seconds), so a full shard is swept at most once a
    /// second.
    last_sweep_s: u64,
}

/// What inserting one more entry into a shard would do.
enum Room {
    /// It fits (possibly after a reorganisation in place).
    Fits,
    /// The table doubles to this many slots.
    Grows(usize),
}

impl Shard {
    /// Drops entries expired at `now_ms`; returns how many.
    fn sweep(&mut self, now_ms: u64) -> usize {
        let before = self.table.len();
        self.table.retain(|_, until| alive(*until, now_ms));
        before - self.table.len()
    }

    fn room(&self) -> Room {
        let len = self.table.len();
        let full = full_capacity(self.slots);
        if len < self.table.capacity() || len < full / 2 {
            Room::Fits
        } else {
            Room::Grows(slots_for((len + 1).max(full + 1)))
        }
    }

    /// Copies the live entries into a fresh table of the same size, clearing the tombstones
    /// that would otherwise make the next insert grow it.
    fn rebuild(&mut self) {
        let mut fresh =
            Table::with_capacity_and_hasher(full_capacity(self.slots), Default::default());
        fresh.extend(self.table.drain());
        self.table = fresh;
    }
}

/// Whether an entry remembered until second `until_s` is still live at `now_ms`.
fn alive(until_s: u32, now_ms: u64) -> bool {
    u64::from(until_s) * 1000 >= now_ms
}

/// One app's nonces.
#[derive(Debug, Default)]
struct AppNonces {
    shards: [Mutex<Shard>; SHARDS],
}

impl AppNonces {
    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        let i = ((hash >> 48) as usize) & (SHARDS - 1);
        // A panic while holding a shard cannot leave a table half-updated in a way that
        // matters (an entry is either in or not): keep using it.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Figures for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Nonces remembered, over all apps.
    pub nonces: usize,
    /// Bytes the tables hold (their allocations, not only the live entries).
    pub bytes: usize,
    /// Calls refused because an app's share was full, since start.
    pub full: u64,
}

/// Nonces seen per app within the signature window, shared by every `AuthStage` built
/// across snapshot reloads (one per plane, in `Carried`).
#[derive(Debug)]
pub struct ReplayCache {
    apps: DashMap<Box<str>, Arc<AppNonces>>,
    hasher: RandomState,
    /// The most a shard's table may allocate: the per-app bound / [`SHARDS`].
    shard_bytes: usize,
    nonces: AtomicUsize,
    bytes: AtomicUsize,
    full: AtomicU64,
    /// Whether a fresh nonce is also recorded cluster-wide (Redis configured): then `auth`
    /// hands a [`crate::fleet::NonceClaim`] to the pipeline.
    across_nodes: bool,
    /// Calls signed before this Unix ms are refused: the nonces seen before it are not here
    /// (a gateway without Redis, since its process started; 0: none refused).
    signed_since_ms: u64,
}

impl Default for ReplayCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayCache {
    /// The default memory bound per app: 64 MiB, room for ≈ 3.4 million nonces (11,000
    /// signed calls a second for 300 s).
    pub const DEFAULT_BYTES_PER_APP: usize = 64 << 20;

    pub fn new() -> Self {
        Self::with_bound(Self::DEFAULT_BYTES_PER_APP)
    }

    /// A cache whose tables hold at most `bytes_per_app` for any one app.
    pub fn with_bound(bytes_per_app: usize) -> Self {
        ReplayCache {
            apps: DashMap::new(),
            hasher: RandomState::new(),
            shard_bytes: (bytes_per_app / SHARDS).max(table_bytes(slots_for(1))),
            nonces: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            full: AtomicU64::new(0),
            across_nodes: false,
            signed_since_ms: 0,
        }
    }

    /// Refuses calls signed before `ms` (Unix ms): the cache holds no nonce seen before it.
    pub fn signed_since(mut self, ms: u64) -> Self {
        self.signed_since_ms = ms;
        self
    }

    /// The earliest signing time (Unix ms) whose nonces this cache can vouch for.
    pub fn signed_since_ms(&self) -> u64 {
        self.signed_since_ms
    }

    /// Sets whether fresh nonces are also recorded cluster-wide (the gateway has Redis).
    pub fn shared_across_nodes(mut self, yes: bool) -> Self {
        self.across_nodes = yes;
        self
    }

    /// Whether fresh nonces are also recorded cluster-wide.
    pub fn is_shared_across_nodes(&self) -> bool {
        self.across_nodes
    }

    /// How many nonces one app can hold at most (every shard grown to its bound).
    pub fn nonces_per_app(&self) -> usize {
        let mut slots = slots_for(1);
        while table_bytes(slots * 2) <= self.shard_bytes {
            slots *= 2;
        }
        usable(slots) * SHARDS
    }

    fn app(&self, app_key: &str) -> Arc<AppNonces> {
        if let Some(a) = self.apps.get(app_key) {
            return Arc::clone(a.value());
        }
        Arc::clone(self.apps.entry(Box::from(app_key)).or_default().value())
    }

    /// Records `nonce` for `app_key` until `remember_until_ms` (the call's timestamp + 300 s)
    /// unless it is already remembered at `now_ms`. Atomic: of two concurrent calls with the
    /// same nonce exactly one is `Fresh`.
    pub fn check_and_record(
        &self,
        app_key: &str,
        nonce: &str,
        remember_until_ms: u64,
        now_ms: u64,
    ) -> NonceCheck {
        let app = self.app(app_key);
        let hash = self.hasher.hash_one(nonce);
        let key = NonceKey::new(hash);
        let until_s = u32::try_from(remember_until_ms.div_ceil(1000)).unwrap_or(u32::MAX);
        let mut shard = app.shard(hash);
        if let Some(until) = shard.table.get_mut(&key) {
            if alive(*until, now_ms) {
                return NonceCheck::Replayed;
            }
            // An expired leftover: its timestamp is out of the window, so this is a new call
            // that happens to reuse the nonce.
            *until = until_s;
            return NonceCheck::Fresh;
        }
        if let Room::Grows(slots) = shard.room() {
            if table_bytes(slots) <= self.shard_bytes {
                self.bytes.fetch_add(
                    table_bytes(slots) - table_bytes(shard.slots),
                    Ordering::Relaxed,
                );
                shard.slots = slots;
            } else if !self.make_room(&mut shard, now_ms) {
                self.full.fetch_add(1, Ordering::Relaxed);
                return NonceCheck::Full;
            }
        }
        shard.table.insert(key, until_s);
        self.nonces.fetch_add(1, Ordering::Relaxed);
        NonceCheck::Fresh
    }

    /// A shard at its bound needs room for one more entry: sweep its expired entries (at most
    /// once a second) and, if live entries leave room but tombstones do not, rebuild it at
    /// the same size. `false` when live nonces fill 15/16 of it.
    fn make_room(&self, shard: &mut Shard, now_ms: u64) -> bool {
        let now_s = now_ms / 1000;
        if now_s > shard.last_sweep_s {
            shard.last_sweep_s = now_s;
            let removed = shard.sweep(now_ms);
            self.nonces.fetch_sub(removed, Ordering::Relaxed);
        }
        match shard.room() {
            Room::Fits => true,
            // Rebuild only when it frees a sixteenth of the table: rebuilding for every
            // call near the bound would cost a table copy per call.
            Room::Grows(_) if shard.table.len() < usable(shard.slots) => {
                shard.rebuild();
                true
            }
            Room::Grows(_) => false,
        }
    }

    /// Drops nonces expired at `now_ms` (the gateway's clock, epoch ms), gives back the
    /// memory of tables left less than a quarter full, and forgets apps left with none. Call
    /// every few seconds.
    pub fn housekeeping(&self, now_ms: u64) {
        for app in self.apps.iter() {
            for shard in &app.value().shards {
                let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
                let removed = shard.sweep(now_ms);
                self.nonces.fetch_sub(removed, Ordering::Relaxed);
                let len = shard.table.len();
                if len < full_capacity(shard.slots) / 4 {
                    let slots = slots_for(len * 2);
                    if slots < shard.slots {
                        shard.table.shrink_to(len * 2);
                        self.bytes.fetch_sub(
                            table_bytes(shard.slots) - table_bytes(slots),
                            Ordering::Relaxed,
                        );
                        shard.slots = slots;
                    }
                }
            }
        }
        // An app's entry is removed only when nobody holds it: clones are taken under the
        // DashMap shard's read lock and `retain` holds its write lock, so no insert is lost.
        self.apps.retain(|_, a| {
            Arc::strong_count(a) > 1
                || a.shards.iter().any(|s| {
                    let s = s.lock().unwrap_or_else(|p| p.into_inner());
                    s.slots > 0
                })
        });
    }

    /// Nonces remembered, bytes held and calls refused as full.
    pub fn stats(&self) -> ReplayStats {
        ReplayStats {
            nonces: self.nonces.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            full: self.full.load(Ordering::Relaxed),
        }
    }

    /// Nonces remembered, over all apps.
    pub fn len(&self) -> usize {
        self.stats().nonces
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::NOW_MS;
    use portico_control::sign::MAX_SKEW_MS;

    #[test]
    fn the_shard_follows_the_swiss_table_s_size() {
        // What the accounting assumes is what std's HashMap does: a table without tombstones
        // has exactly the capacity of the slots the shard counts.
        let mut shard = Shard::default();
        for i in 0..200_000u64 {
            if let Room::Grows(slots) = shard.room() {
                shard.slots = slots;
            }
            shard
                .table
                .insert(NonceKey::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)), 0);
            assert_eq!(shard.table.capacity(), full_capacity(shard.slots), "at {i}");
        }
        assert_eq!(SLOT_BYTES, 13);
        assert_eq!(shard.slots, 262_144);
        shard.rebuild();
        assert_eq!(shard.table.capacity(), full_capacity(shard.slots));
        assert_eq!(shard.table.len(), 200_000);
    }

    #[test]
    fn a_shard_at_its_bound_keeps_its_size_through_expiry_and_tombstones() {
        // One app at a steady rate: every second 2,000 new nonces, each remembered 10 s, in a
        // cache whose bound holds ≈ 1.5 times the live set. Sweeps leave tombstones; the
        // shards must neither grow past the bound nor refuse.
        let bound = table_bytes(2048) * SHARDS;
        let cache = ReplayCache::with_bound(bound);
        let per_app = cache.nonces_per_app();
        assert_eq!(per_app, 1680 * SHARDS);
        let mut n = 0u64;
        for second in 0..120u64 {
            let now = NOW_MS + second * 1000;
            for _ in 0..2000 {
                n += 1;
                let nonce = format!("nonce-{n:010}");
                assert_eq!(
                    cache.check_and_record("a", &nonce, now + 10_000, now),
                    NonceCheck::Fresh,
                    "second {second}"
                );
            }
            if second % 5 == 0 {
                cache.housekeeping(now);
            }
            let stats = cache.stats();
            assert!(stats.bytes <= bound, "{stats:?}");
            assert!(stats.nonces <= 2000 * 16, "{stats:?}");
        }
        assert_eq!(cache.stats().full, 0);
    }

    #[test]
    fn the_default_bound_holds_10k_calls_a_second_for_the_window() {
        let cache = ReplayCache::new();
        assert!(cache.nonces_per_app() >= 10_000 * 300 * 11 / 10);
        assert!(table_bytes(cache.nonces_per_app() / SHARDS) * SHARDS <= 64 << 20);
    }

    #[test]
    fn full_shards_refuse_instead_of_forgetting_and_still_see_replays() {
        // Each shard may hold only its first table (4 slots, 3 entries).
        let cache = ReplayCache::with_bound(table_bytes(4) * SHARDS);
        assert_eq!(cache.nonces_per_app(), 2 * SHARDS);
        let until = NOW_MS + MAX_SKEW_MS;
        let mut accepted = Vec::new();
        let mut refused = None;
        for i in 0..10 * SHARDS {
            let nonce = format!("nonce-{i:04}");
            match cache.check_and_record("a", &nonce, until, NOW_MS) {
                NonceCheck::Fresh => accepted.push(nonce),
                NonceCheck::Full => {
                    refused = Some(nonce);
                    break;
                }
                NonceCheck::Replayed => panic!("{nonce} replayed"),
            }
        }
        let refused = refused.expect("a shard fills up");
        assert!(accepted.len() <= 3 * SHARDS);
        for nonce in &accepted {
            assert_eq!(
                cache.check_and_record("a", nonce, until, NOW_MS),
                NonceCheck::Replayed
            );
        }
        assert_eq!(cache.stats().full, 1);
        // Another app is unaffected.
        assert_eq!(
            cache.check_and_record("b", &refused, until, NOW_MS),
            NonceCheck::Fresh
        );
        // Once entries expire an inline sweep makes room.
        assert_eq!(
            cache.check_and_record("a", &refused, until + 400_000, until + 1),
            NonceCheck::Fresh
        );
        assert!(cache.len() <= accepted.len() + 1);
    }

    #[test]
    fn remembered_until_the_end_of_the_window_and_at_most_a_second_longer() {
        let cache = ReplayCache::new();
        let until = NOW_MS + MAX_SKEW_MS + 250;
        assert_eq!(
            cache.check_and_record("a", "nonce-xyz", until, NOW_MS),
            NonceCheck::Fresh
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-xyz", until, until),
            NonceCheck::Replayed
        );
        assert_eq!(
            cache.check_and_record("a", "nonce-xyz", until + 400_000, until + 1000),
            NonceCheck::Fresh
        );
    }

    #[test]
    fn housekeeping_drops_expired_nonces_gives_memory_back_and_forgets_idle_apps() {
        let cache = ReplayCache::new();
        for i in 0..50_000 {
            let nonce = format!("nonce-{i:06}");
            let until = NOW_MS + MAX_SKEW_MS;
            assert_eq!(
                cache.check_and_record("a", &nonce, until, NOW_MS),
                NonceCheck::Fresh
            );
        }
        let stats = cache.stats();
        assert_eq!(stats.nonces, 50_000);
        assert!(stats.bytes >= 50_000 * 12, "{stats:?}");
        cache.housekeeping(NOW_MS + 1000);
        assert_eq!(cache.len(), 50_000);
        cache.housekeeping(NOW_MS + MAX_SKEW_MS + 1);
        let stats = cache.stats();
        assert_eq!(stats.nonces, 0);
        assert_eq!(stats.bytes, 0, "{stats:?}");
        assert!(cache.apps.is_empty());
    }

    #[test]
    fn concurrent_duplicates_admit_exactly_one() {
        let cache = Arc::new(ReplayCache::new());
        let fresh = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for i in 0..200 {
                        let nonce = format!("nonce-{i:04}");
                        if cache.check_and_record("a", &nonce, NOW_MS + 1, NOW_MS)
                            == NonceCheck::Fresh
                        {
                            fresh.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(fresh.load(Ordering::Relaxed), 200);
    }
}
