//! Waiting between attempts: the doubling backoff every retry loop of the ZooKeeper source
//! uses, and a sleep until an optional deadline for `select!` arms.

use std::time::Duration;
use tokio::time::Instant;

/// The first wait after a failure.
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// A backoff that starts at [`MIN_BACKOFF`] and doubles up to [`MAX_BACKOFF`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: MIN_BACKOFF }
    }
}

impl Backoff {
    /// The wait before the next attempt; the one after it is twice as long (at most
    /// [`MAX_BACKOFF`]).
    pub(super) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(MAX_BACKOFF);
        delay
    }

    /// The instant of the next attempt, counted from now (see [`Backoff::next_delay`]).
    pub(super) fn next_at(&mut self) -> Instant {
        Instant::now() + self.next_delay()
    }

    /// After a success: the next failure waits [`MIN_BACKOFF`] again.
    pub(super) fn reset(&mut self) {
        self.next = MIN_BACKOFF;
    }
}

/// Sleeps until `at`, or forever when there is no deadline.
pub(super) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<Duration> = (0..7).map(|_| b.next_delay()).collect();
        assert_eq!(waits[0], MIN_BACKOFF);
        assert_eq!(waits[1], MIN_BACKOFF * 2);
        assert_eq!(waits[4], Duration::from_millis(1600));
        assert_eq!(waits[5], MAX_BACKOFF);
        assert_eq!(waits[6], MAX_BACKOFF);
        b.reset();
        assert_eq!(b.next_delay(), MIN_BACKOFF);
    }
}
