//! The rate limiters' state, kept per rule across reloads ([`RateLimiters`] in the plane's
//! `Carried`): each rule's buckets (GCRA cells, local or leased from the fleet's shared
//! bucket). The stage that picks the rules and keys of a call is `rate_limit.rs`; the
//! algorithm and its scopes are described there.

use crate::fleet::{self, Fleet, Lease, Take};
use dashmap::DashMap;
use portico_control::v1;
use sha2::{Digest, Sha256};
use std::collections::hash_map::RandomState;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub(super) const NANOS_PER_MS: u64 = 1_000_000;
pub(super) const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The buckets of one limiter.
#[derive(Debug)]
enum Cells {
    /// The key never varies (`api`, or an app's own limit): one bucket.
    Single(AtomicU64),
    /// Key hash → theoretical arrival time (ns since the epoch).
    Keyed {
        map: DashMap<u64, AtomicU64>,
        len: AtomicUsize,
        max_keys: usize,
        /// When (ns) room was last made at the bound.
        last_sweep: AtomicU64,
    },
}

/// The shortest time between two sweeps of a limiter at its key bound.
pub const SWEEP_NS: u64 = 50 * NANOS_PER_MS;

/// What admitting a call charged, to give it back if a later rule refuses the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Charge {
    /// The local bucket, at this emission interval (ns).
    Cell(u64),
    /// The cluster lease of the key.
    Lease,
    /// Nothing (an untracked key past the key cap).
    Nothing,
}

/// The shared-bucket side of a cluster-scope limiter.
#[derive(Debug)]
struct ClusterSide {
    fleet: Arc<Fleet>,
    /// `portico:rl:<api|app>:<id>:<index>:<rule digest>`; a key's bucket adds `:<key hash>`.
    prefix: String,
    leases: DashMap<u64, Arc<Lease>>,
}

/// One rule's GCRA limiter and its buckets.
#[derive(Debug)]
pub struct Limiter {
    /// The rule it was built from (an app limit as a rule keyed `app`), to detect changes.
    rule: v1::RateLimitRule,
    /// Emission interval: the steady time between two calls, ns (0 when `limit` is 0).
    interval_ns: u64,
    /// Bucket size in time: `burst × interval`, ns.
    tolerance_ns: u64,
    burst: u64,
    period_ns: u64,
    cells: Cells,
    /// Set for a cluster-scope rule.
    cluster: Option<ClusterSide>,
    /// How the rule reads in a refusal message.
    pub(super) describe: String,
}

impl Limiter {
    fn new(
        rule: v1::RateLimitRule,
        keyed: bool,
        max_keys: usize,
        describe: String,
        cluster: Option<(Arc<Fleet>, String)>,
    ) -> Self {
        let period_ns = match rule.per {
            v1::Per::Second => NANOS_PER_SEC,
            v1::Per::Minute => 60 * NANOS_PER_SEC,
        };
        let interval_ns = if rule.limit == 0 {
            0
        } else {
            (period_ns / u64::from(rule.limit)).max(1)
        };
        let burst = u64::from(rule.burst.unwrap_or(rule.limit).max(1));
        let cells = if keyed {
            Cells::Keyed {
                map: DashMap::new(),
                len: AtomicUsize::new(0),
                max_keys,
                last_sweep: AtomicU64::new(0),
            }
        } else {
            Cells::Single(AtomicU64::new(0))
        };
        let cluster =
            cluster
                .filter(|_| rule.scope == v1::Scope::Cluster)
                .map(|(fleet, prefix)| ClusterSide {
                    fleet,
                    prefix,
                    leases: DashMap::new(),
                });
        Limiter {
            rule,
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(burst),
            burst,
            period_ns,
            cells,
            cluster,
            describe,
        }
    }

    /// The local bucket's (interval, tolerance) now: the rule's own, or for a cluster rule
    /// its share of the fleet.
    fn local_rates(&self) -> (u64, u64) {
        match &self.cluster {
            Some(c) => fleet::split(self.interval_ns, self.burst, c.fleet.members()),
            None => (self.interval_ns, self.tolerance_ns),
        }
    }

    /// GCRA on one bucket: `Ok` admits (and charges) the call, `Err(ns)` is the wait until
    /// one would be admitted.
    fn acquire_cell(
        cell: &AtomicU64,
        now: u64,
        (interval_ns, tolerance_ns): (u64, u64),
    ) -> Result<(), u64> {
        let horizon = now.saturating_add(tolerance_ns);
        let mut tat = cell.load(Ordering::Acquire);
        loop {
            if tat > horizon {
                // Only possible when the clock went backwards: clamp (and store) to "bucket
                // just emptied", so the wait is bounded by one interval.
                match cell.compare_exchange_weak(tat, horizon, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => tat = horizon,
                    Err(current) => {
                        tat = current;
                        continue;
                    }
                }
            }
            let next = tat.max(now).saturating_add(interval_ns);
            if next > horizon {
                return Err(next - horizon);
            }
            match cell.compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }

    /// Admits or refuses one call for `key` at `now` (ns): `Ok` says what was charged,
    /// `Err(ns)` is the wait until one would be admitted.
    pub(super) fn acquire(&self, key: u64, now: u64) -> Result<Charge, u64> {
        if self.interval_ns == 0 {
            return Err(self.period_ns);
        }
        if let Some(c) = &self.cluster {
            if c.fleet.redis_up() {
                if let Some(lease) = self.lease(c, key) {
                    let (take, ask) = lease.take(now);
                    if let Some(ask) = ask {
                        c.fleet.refill(&lease, ask);
                    }
                    return match take {
                        Take::Admit => Ok(Charge::Lease),
                        Take::Refuse(wait) => Err(wait),
                        Take::Cold => {
                            let charged = self.acquire_local(key, now)?;
                            lease.charge_cold();
                            Ok(charged)
                        }
                    };
                }
            }
        }
        self.acquire_local(key, now)
    }

    /// The lease of `key` (made on first use), or `None` past the key cap.
    fn lease(&self, c: &ClusterSide, key: u64) -> Option<Arc<Lease>> {
        if let Some(l) = c.leases.get(&key) {
            return Some(Arc::clone(l.value()));
        }
        let max = match &self.cells {
            Cells::Single(_) => 1,
            Cells::Keyed { max_keys, .. } => *max_keys,
        };
        if c.leases.len() >= max {
            return None;
        }
        let lease = c.leases.entry(key).or_insert_with(|| {
            let burst = u32::try_from(self.burst).unwrap_or(u32::MAX);
            Arc::new(Lease::new(
                format!("{}:{key:016x}", c.prefix),
                self.interval_ns,
                burst,
            ))
        });
        Some(Arc::clone(lease.value()))
    }

    /// GCRA on the local bucket of `key` (for a cluster rule: the node's share).
    fn acquire_local(&self, key: u64, now: u64) -> Result<Charge, u64> {
        let rates = self.local_rates();
        match &self.cells {
            Cells::Single(cell) => Self::acquire_cell(cell, now, rates)?,
            Cells::Keyed {
                map,
                len,
                max_keys,
                last_sweep,
            } => {
                if let Some(cell) = map.get(&key) {
                    Self::acquire_cell(cell.value(), now, rates)?;
                } else if len.load(Ordering::Relaxed) >= *max_keys
                    && !Self::make_room(map, len, *max_keys, last_sweep, now)
                {
                    return Ok(Charge::Nothing);
                } else {
                    let cell = map.entry(key).or_insert_with(|| {
                        len.fetch_add(1, Ordering::Relaxed);
                        AtomicU64::new(0)
                    });
                    Self::acquire_cell(cell.value(), now, rates)?;
                }
            }
        }
        Ok(Charge::Cell(rates.0))
    }

    /// At the key bound: drops the buckets full again at `now`, then, if the map is still
    /// above 7/8 of the bound, the ones closest to full (the least used keys) down to it; at
    /// most once per [`SWEEP_NS`] (a caller in between finds no room and is not tracked).
    /// Returns whether a new key fits now.
    fn make_room(
        map: &DashMap<u64, AtomicU64>,
        len: &AtomicUsize,
        max_keys: usize,
        last_sweep: &AtomicU64,
        now: u64,
    ) -> bool {
        let last = last_sweep.load(Ordering::Acquire);
        let due = last == 0 || now >= last.saturating_add(SWEEP_NS);
        if !due
            || last_sweep
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return len.load(Ordering::Relaxed) < max_keys;
        }
        let target = max_keys - max_keys / 8;
        let mut threshold = now;
        if map.len() > target {
            // The (len - target)-th smallest arrival time: the least used keys fall below it.
            let mut tats: Vec<u64> = map
                .iter()
                .map(|e| e.value().load(Ordering::Relaxed))
                .collect();
            let drop = tats.len() - target;
            if drop > 0 {
                let (_, nth, _) = tats.select_nth_unstable(drop - 1);
                threshold = threshold.max(*nth);
            }
        }
        let mut removed = 0usize;
        map.retain(|_, tat| {
            let keep = tat.load(Ordering::Relaxed) > threshold;
            if !keep {
                removed += 1;
            }
            keep
        });
        let left = len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(removed))
            })
            .map_or(0, |n| n.saturating_sub(removed));
        left < max_keys
    }

    /// Gives back one call charged by [`Limiter::acquire`] (another rule refused it).
    pub(super) fn refund(&self, key: u64, charge: Charge) {
        let interval = match charge {
            Charge::Cell(interval) => interval,
            Charge::Nothing => return,
            Charge::Lease => {
                if let Some(l) = self.cluster.as_ref().and_then(|c| c.leases.get(&key)) {
                    l.value().give_back();
                }
                return;
            }
        };
        let give_back = |cell: &AtomicU64| {
            let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                Some(tat.saturating_sub(interval))
            });
        };
        match &self.cells {
            Cells::Single(cell) => give_back(cell),
            Cells::Keyed { map, .. } => {
                if let Some(cell) = map.get(&key) {
                    give_back(cell.value());
                }
            }
        }
    }

    /// Drops buckets that are full again at `now` (ns): forgetting them changes nothing.
    fn housekeeping(&self, now: u64) {
        if let Some(c) = &self.cluster {
            c.leases.retain(|_, lease| !lease.idle(now));
        }
        if let Cells::Keyed { map, len, .. } = &self.cells {
            let mut removed = 0usize;
            map.retain(|_, tat| {
                let keep = tat.load(Ordering::Relaxed) > now;
                if !keep {
                    removed += 1;
                }
                keep
            });
            let _ = len.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(removed))
            });
        }
    }

    /// Keys tracked.
    fn keys(&self) -> usize {
        match &self.cells {
            Cells::Single(_) => 1,
            Cells::Keyed { len, .. } => len.load(Ordering::Relaxed),
        }
    }
}

/// The limiters of all rules, kept across snapshot reloads (create one at start-up; one per
/// configuration tree, i.e. a separate one for the sandbox listener).
#[derive(Debug)]
pub struct RateLimiters {
    /// (API id, index in `policy.rate_limits`) → limiter.
    pub(super) api: DashMap<(String, usize), Arc<Limiter>>,
    /// (app key, index in the app's `rate_limits`) → limiter.
    pub(super) app: DashMap<(String, usize), Arc<Limiter>>,
    pub(super) hasher: RandomState,
    max_keys: usize,
    /// The fleet cluster-scope rules count with.
    fleet: Arc<Fleet>,
}

impl Default for RateLimiters {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimiters {
    /// Keys one limiter tracks at most (about 40 bytes each).
    pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

    pub fn new() -> Self {
        Self::with_max_keys(Self::DEFAULT_MAX_KEYS)
    }

    pub fn with_max_keys(max_keys: usize) -> Self {
        RateLimiters {
            api: DashMap::new(),
            app: DashMap::new(),
            hasher: RandomState::new(),
            max_keys,
            fleet: Arc::new(Fleet::default()),
        }
    }

    /// Limiters whose cluster-scope rules count with `fleet` (one per process).
    pub fn with_fleet(fleet: Arc<Fleet>) -> Self {
        RateLimiters {
            fleet,
            ..Self::new()
        }
    }

    /// The limiter at `slot`, reused if its rule is unchanged, else made afresh.
    /// `kind` (`api` or `app`) names the slot's map in the Redis keys of cluster rules.
    pub(super) fn limiter(
        &self,
        kind: &str,
        map: &DashMap<(String, usize), Arc<Limiter>>,
        slot: (String, usize),
        rule: &v1::RateLimitRule,
        keyed: bool,
        describe: impl FnOnce() -> String,
    ) -> Arc<Limiter> {
        use dashmap::mapref::entry::Entry;
        let fresh = |slot: &(String, usize)| {
            // The rule's digest is part of its Redis keys: a changed rule starts afresh on
            // every node, as it does locally.
            let digest = Sha256::digest(format!("{rule:?}").as_bytes());
            let prefix = format!(
                "portico:rl:{kind}:{}:{}:{}",
                slot.0,
                slot.1,
                hex::encode(&digest[..6])
            );
            Arc::new(Limiter::new(
                rule.clone(),
                keyed,
                self.max_keys,
                describe(),
                Some((Arc::clone(&self.fleet), prefix)),
            ))
        };
        match map.entry(slot) {
            Entry::Occupied(e) if e.get().rule == *rule => Arc::clone(e.get()),
            Entry::Occupied(mut e) => {
                let fresh = fresh(e.key());
                e.insert(Arc::clone(&fresh));
                fresh
            }
            Entry::Vacant(v) => {
                let fresh = fresh(v.key());
                v.insert(Arc::clone(&fresh));
                fresh
            }
        }
    }

    /// Drops idle keys, by the system clock. The gateway calls this every few seconds.
    pub fn housekeeping(&self) {
        self.housekeeping_at(portico_control::clock::now_ms());
    }

    /// Drops keys idle at `now_ms` (their bucket is full again).
    pub fn housekeeping_at(&self, now_ms: u64) {
        let now = now_ms.saturating_mul(NANOS_PER_MS);
        for l in self.api.iter() {
            l.value().housekeeping(now);
        }
        for l in self.app.iter() {
            l.value().housekeeping(now);
        }
    }

    /// Keys tracked over all limiters (for metrics).
    pub fn tracked_keys(&self) -> usize {
        let api: usize = self.api.iter().map(|l| l.value().keys()).sum();
        let app: usize = self.app.iter().map(|l| l.value().keys()).sum();
        api + app
    }

    /// Limiters held (for metrics and tests).
    pub fn limiters(&self) -> usize {
        self.api.len() + self.app.len()
    }
}
