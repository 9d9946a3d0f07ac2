//! The wall clock, in the forms the workspace uses: Unix epoch milliseconds and RFC 3339
//! text. One place, so every crate (gateway, registry, CLI, benches) reads time the same way.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch of `t` (0 before the epoch, `u64::MAX` past year 584
/// million).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The wall clock in Unix epoch milliseconds.
pub fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// Unix epoch milliseconds as RFC 3339 UTC with milliseconds (`2026-11-30T01:00:00.123Z`);
/// empty when out of range.
pub fn rfc3339_ms(ms: i64) -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_default()
}

/// The current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    rfc3339_ms(i64::try_from(now_ms()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_milliseconds_in_utc() {
        assert_eq!(rfc3339_ms(1_796_000_000_123), "2026-11-30T00:53:20.123Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn unix_ms_of_times() {
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_millis(42)), 42);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        let now = now_ms();
        assert!(now > 1_700_000_000_000, "{now}");
        let text = now_rfc3339();
        assert!(text.ends_with('Z') && text.len() == 24, "{text}");
    }
}
