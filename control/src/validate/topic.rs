//! `topics/<name>`: a notification topic (docs/operations/notifications.md, "Notifications"): its name,
//! the apps it grants and its retention. Its tests are with the apps' notification fields
//! ([`super::app`]).

use super::fields::{check_name, parse_json};
use crate::v1;

/// The longest topic retention: 30 days.
pub const MAX_RETENTION_S: u64 = 30 * 86_400;

/// `topics/<name>`: a notification topic (docs/operations/notifications.md, "Notifications").
pub(super) fn check_topic(name: &str, raw: &[u8]) -> Result<v1::Topic, String> {
    check_name(name).map_err(|e| format!("name: {e}"))?;
    let topic: v1::Topic = parse_json(raw)?;
    for (i, a) in topic.apps.iter().enumerate() {
        if a != "*" {
            check_name(a).map_err(|e| format!("apps[{i}]: must be \"*\" or an app key: {e}"))?;
        }
    }
    if !(1..=MAX_RETENTION_S).contains(&topic.retention_s) {
        return Err(format!(
            "retention_s: must be between 1 and {MAX_RETENTION_S}"
        ));
    }
    Ok(topic)
}
