//! The bulkhead: one concurrency pool per API (docs/ARCHITECTURE.md, "The invoke tier").
//!
//! A call holds a [`BulkheadPermit`] for its whole duration. When the pool is full the call
//! is refused with 503 `BULKHEAD_FULL`, at once or, when the policy sets `max_wait_ms`, after
//! waiting at most that long for a slot. A hanging backend therefore costs only its own API's
//! pool, never the gateway's threads or another API's capacity.
//!
//! Defaults (no `policy.bulkhead`): [`DEFAULT_MAX_CONCURRENT`] calls in flight, no wait.

use crate::error::{Code, GatewayError};
use portico_control::v1::BulkheadPolicy;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Calls in flight per API when the API sets no `policy.bulkhead`.
pub const DEFAULT_MAX_CONCURRENT: u32 = 256;

/// How long a call waits for a slot when the policy sets no `max_wait_ms`: not at all.
pub const DEFAULT_MAX_WAIT_MS: u64 = 0;

/// One API's concurrency pool. Cloning shares the pool (clones are the same bulkhead).
#[derive(Debug, Clone)]
pub struct Bulkhead {
    semaphore: Arc<Semaphore>,
    capacity: u32,
    max_wait: Duration,
    rejected: Arc<AtomicU64>,
}

/// A slot in the pool; the slot is given back when the permit is dropped.
#[derive(Debug)]
pub struct BulkheadPermit {
    _permit: OwnedSemaphorePermit,
}

/// The effective `(capacity, max_wait_ms)` of a policy, defaults applied. A `max_concurrent`
/// of 0 (which validation should refuse) is read as 1 rather than as "refuse everything".
fn resolve(policy: Option<&BulkheadPolicy>) -> (u32, u64) {
    match policy {
        None => (DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_WAIT_MS),
        Some(p) => (
            p.max_concurrent.max(1),
            p.max_wait_ms.unwrap_or(DEFAULT_MAX_WAIT_MS),
        ),
    }
}

impl Bulkhead {
    /// A new, empty pool for `policy` (`None`: [`DEFAULT_MAX_CONCURRENT`] slots, no wait).
    pub fn new(policy: Option<&BulkheadPolicy>) -> Self {
        let (capacity, max_wait_ms) = resolve(policy);
        Bulkhead {
            semaphore: Arc::new(Semaphore::new(capacity as usize)),
            capacity,
            max_wait: Duration::from_millis(max_wait_ms),
            rejected: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Takes a slot for one call. `Ok(permit)`: the call may proceed and holds the slot until
    /// the permit is dropped. `Err`: 503 `BULKHEAD_FULL` — the pool stayed full, either at
    /// once (no `max_wait_ms`) or for the whole of `max_wait_ms`.
    pub async fn acquire(&self) -> Result<BulkheadPermit, GatewayError> {
        if let Ok(permit) = Arc::clone(&self.semaphore).try_acquire_owned() {
            return Ok(BulkheadPermit { _permit: permit });
        }
        if !self.max_wait.is_zero() {
            let waiting = Arc::clone(&self.semaphore).acquire_owned();
            if let Ok(Ok(permit)) = tokio::time::timeout(self.max_wait, waiting).await {
                return Ok(BulkheadPermit { _permit: permit });
            }
        }
        self.rejected.fetch_add(1, Ordering::Relaxed);
        Err(self.full_error())
    }

    /// Takes a slot only if one is free right now (never waits, whatever `max_wait_ms` says).
    /// `Err`: 503 `BULKHEAD_FULL`.
    pub fn try_acquire(&self) -> Result<BulkheadPermit, GatewayError> {
        match Arc::clone(&self.semaphore).try_acquire_owned() {
            Ok(permit) => Ok(BulkheadPermit { _permit: permit }),
            Err(_) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                Err(self.full_error())
            }
        }
    }

    fn full_error(&self) -> GatewayError {
        let message = if self.max_wait.is_zero() {
            format!("the API's concurrency limit ({}) is reached", self.capacity)
        } else {
            format!(
                "the API's concurrency limit ({}) stayed reached for {} ms",
                self.capacity,
                self.max_wait.as_millis()
            )
        };
        GatewayError::new(Code::BulkheadFull, message)
    }

    /// Calls holding a slot right now (a gauge for /metrics).
    pub fn in_flight(&self) -> u32 {
        let available = u32::try_from(self.semaphore.available_permits()).unwrap_or(u32::MAX);
        self.capacity.saturating_sub(available)
    }

    /// The pool's size: at most this many calls are in flight at once.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// How long a call waits for a slot before it is refused (zero: refused at once).
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Calls refused with `BULKHEAD_FULL` since this pool was made (a counter for /metrics).
    pub fn rejected_total(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Whether `policy` gives this same pool (defaults applied on both sides): `true` means the
    /// gateway should keep this bulkhead, with its calls in flight, across a snapshot reload.
    pub fn same_policy(&self, policy: Option<&BulkheadPolicy>) -> bool {
        let (capacity, max_wait_ms) = resolve(policy);
        capacity == self.capacity && Duration::from_millis(max_wait_ms) == self.max_wait
    }
}

impl Default for Bulkhead {
    fn default() -> Self {
        Bulkhead::new(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_concurrent: u32, max_wait_ms: Option<u64>) -> BulkheadPolicy {
        BulkheadPolicy {
            max_concurrent,
            max_wait_ms,
        }
    }

    #[test]
    fn defaults_when_no_policy() {
        let b = Bulkhead::new(None);
        assert_eq!(b.capacity(), DEFAULT_MAX_CONCURRENT);
        assert_eq!(b.max_wait(), Duration::ZERO);
        assert_eq!(b.in_flight(), 0);
        assert!(b.same_policy(None));
        assert!(b.same_policy(Some(&policy(DEFAULT_MAX_CONCURRENT, None))));
        assert!(b.same_policy(Some(&policy(DEFAULT_MAX_CONCURRENT, Some(0)))));
        assert!(!b.same_policy(Some(&policy(64, None))));
        assert!(!b.same_policy(Some(&policy(DEFAULT_MAX_CONCURRENT, Some(10)))));
    }

    #[test]
    fn zero_capacity_is_read_as_one() {
        let b = Bulkhead::new(Some(&policy(0, None)));
        assert_eq!(b.capacity(), 1);
        let first = b.try_acquire();
        assert!(first.is_ok());
        assert!(b.try_acquire().is_err());
    }

    #[tokio::test]
    async fn fills_then_rejects_at_once() {
        let b = Bulkhead::new(Some(&policy(2, None)));
        let p1 = b.acquire().await.unwrap();
        let p2 = b.acquire().await.unwrap();
        assert_eq!(b.in_flight(), 2);

        let started = tokio::time::Instant::now();
        let err = b.acquire().await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(50));
        assert_eq!(err.code, Code::BulkheadFull);
        assert_eq!(err.status(), 503);
        assert_eq!(b.rejected_total(), 1);

        drop(p1);
        assert_eq!(b.in_flight(), 1);
        let p3 = b.acquire().await.unwrap();
        assert_eq!(b.in_flight(), 2);
        drop((p2, p3));
        assert_eq!(b.in_flight(), 0);
    }

    #[tokio::test]
    async fn waits_then_rejects() {
        let b = Bulkhead::new(Some(&policy(1, Some(100))));
        let _held = b.acquire().await.unwrap();
        let started = tokio::time::Instant::now();
        let err = b.acquire().await.unwrap_err();
        let waited = started.elapsed();
        assert_eq!(err.code, Code::BulkheadFull);
        assert!(waited >= Duration::from_millis(95), "waited {waited:?}");
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
        assert_eq!(b.in_flight(), 1);
        assert_eq!(b.rejected_total(), 1);
    }

    #[tokio::test]
    async fn waits_then_admits_when_a_permit_is_released() {
        let b = Bulkhead::new(Some(&policy(1, Some(10_000))));
        let held = b.acquire().await.unwrap();
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(held);
        });
        let started = tokio::time::Instant::now();
        let permit = b.acquire().await.unwrap();
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(90), "waited {waited:?}");
        assert!(waited < Duration::from_millis(10_000), "waited {waited:?}");
        assert_eq!(b.in_flight(), 1);
        releaser.await.unwrap();
        drop(permit);
        assert_eq!(b.in_flight(), 0);
        assert_eq!(b.rejected_total(), 0);
    }

    #[tokio::test]
    async fn clones_share_the_pool() {
        let b = Bulkhead::new(Some(&policy(1, None)));
        let c = b.clone();
        let _p = b.acquire().await.unwrap();
        assert!(c.acquire().await.is_err());
        assert_eq!(c.in_flight(), 1);
    }

    #[tokio::test]
    async fn try_acquire_never_waits() {
        let b = Bulkhead::new(Some(&policy(1, Some(60_000))));
        let _p = b.try_acquire().unwrap();
        let err = b.try_acquire().unwrap_err();
        assert_eq!(err.code, Code::BulkheadFull);
    }
}
