//! The cadence of the registry's background evaluation: how often the health monitor scrapes the
//! gateways' `/metrics` and how often alerts and autoscale evaluate their rules, and the windows
//! they measure over, which are a fixed number of those intervals (docs/operations/registry.md,
//! "portico-registry", `--evaluation-interval-ms`).
//!
//! Production runs at [`DEFAULT`] (every 2 s, windows of 10 s). Tests shorten the interval so
//! that they wait on a few fast rounds rather than on seconds-long ones; the documents' own
//! durations (`for_s`, `cooldown_s`, `idle_s`) keep their meaning in seconds whatever the
//! cadence. The setting is process-wide: it is set once at start-up, before the background
//! tasks start, and each task reads it when it starts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The production interval.
pub const DEFAULT: Duration = Duration::from_secs(2);
/// The shortest interval accepted (a scrape of every gateway per round must stay cheap).
pub const MIN: Duration = Duration::from_millis(100);

static INTERVAL_MS: AtomicU64 = AtomicU64::new(DEFAULT.as_millis() as u64);

/// The interval now.
pub fn interval() -> Duration {
    Duration::from_millis(INTERVAL_MS.load(Ordering::Relaxed))
}

/// Sets the interval, kept within [`MIN`]..=[`DEFAULT`]; answers the one in force.
pub fn set_interval(interval: Duration) -> Duration {
    let d = bounded(interval);
    INTERVAL_MS.store(d.as_millis() as u64, Ordering::Relaxed);
    d
}

/// `interval` kept within [`MIN`]..=[`DEFAULT`], in whole milliseconds.
pub fn bounded(interval: Duration) -> Duration {
    Duration::from_millis(interval.clamp(MIN, DEFAULT).as_millis() as u64)
}

/// `production` (a window or a staleness bound written for the [`DEFAULT`] interval) at the
/// interval now: the same number of intervals.
pub fn scaled(production: Duration) -> Duration {
    scaled_to(production, interval())
}

/// `production` at `interval`.
pub fn scaled_to(production: Duration, interval: Duration) -> Duration {
    production.mul_f64(interval.as_secs_f64() / DEFAULT.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_keep_their_number_of_intervals() {
        let ten = Duration::from_secs(10);
        assert_eq!(scaled_to(ten, DEFAULT), ten);
        assert_eq!(
            scaled_to(ten, Duration::from_millis(250)),
            Duration::from_millis(1250)
        );
        assert_eq!(
            scaled_to(Duration::from_secs(6), Duration::from_millis(100)),
            Duration::from_millis(300)
        );
    }

    #[test]
    fn the_interval_is_kept_within_its_bounds() {
        // The process-wide value is left alone: other unit tests run beside this one.
        assert_eq!(bounded(Duration::from_millis(10)), MIN);
        assert_eq!(bounded(Duration::from_secs(60)), DEFAULT);
        assert_eq!(
            bounded(Duration::from_micros(250_400)),
            Duration::from_millis(250)
        );
        assert_eq!(interval(), DEFAULT, "production unless set");
    }
}
