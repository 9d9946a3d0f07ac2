//! `alerts/<name>`: an alert rule (docs/operations/alerts.md, "Alerts", "Receivers and the webhook
//! signature"), checked on its own: the condition is known, the threshold fits it, the
//! receivers are usable. Gateways only validate it; the registry evaluates it.

use super::fields::{check_email, check_name, parse_json};
use crate::v1;

/// The longest alert `for_s`: a day.
pub const MAX_ALERT_FOR_S: u64 = 86_400;

/// Checks an alert rule (`alerts/<name>`, docs/operations/alerts.md "Alerts") on its own: the
/// condition is known, the threshold fits it, the receivers are usable.
pub fn check_alert(name: &str, raw: &[u8]) -> Result<v1::AlertRule, String> {
    check_name(name).map_err(|e| format!("name: {e}"))?;
    let rule: v1::AlertRule = parse_json(raw)?;
    if rule.api != "*" {
        check_name(&rule.api).map_err(|e| format!("api: must be \"*\" or an API id: {e}"))?;
    }
    if !v1::ALERT_CONDITIONS.contains(&rule.condition.as_str()) {
        return Err(format!(
            "condition: {:?} is not one of {}",
            rule.condition,
            v1::ALERT_CONDITIONS.join(", ")
        ));
    }
    let optional = matches!(rule.condition.as_str(), "breaker_open" | "node_missing");
    match rule.threshold {
        None if !optional => {
            return Err(format!(
                "threshold: required for {} (in {})",
                rule.condition,
                threshold_unit(&rule.condition)
            ))
        }
        None => {}
        Some(t) if !t.is_finite() || t < 0.0 => {
            return Err("threshold: must be a number of at least 0".to_owned())
        }
        Some(t) if rule.condition == "availability_below" && t > 1.0 => {
            return Err(
                "threshold: availability is a fraction, 0 to 1 (0.999 for 99.9%)".to_owned(),
            )
        }
        Some(_) => {}
    }
    if rule.for_s > MAX_ALERT_FOR_S {
        return Err(format!("for_s: must be at most {MAX_ALERT_FOR_S}"));
    }
    if let Some(sev) = &rule.severity {
        let ok = (1..=32).contains(&sev.len())
            && sev
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'));
        if !ok {
            return Err("severity: 1 to 32 of A-Z a-z 0-9 _ -".to_owned());
        }
    }
    for (i, r) in rule.receivers.iter().enumerate() {
        match (&r.webhook, &r.email) {
            (Some(url), None) => {
                check_webhook_url(url).map_err(|e| format!("receivers[{i}].webhook: {e}"))?
            }
            (None, Some(addr)) => {
                check_email(addr).map_err(|e| format!("receivers[{i}].email: {e}"))?
            }
            _ => {
                return Err(format!(
                    "receivers[{i}]: set exactly one of webhook and email"
                ))
            }
        }
    }
    if rule.description.as_ref().is_some_and(|d| d.len() > 1000) {
        return Err("description: at most 1000 bytes".to_owned());
    }
    Ok(rule)
}

/// The unit of a condition's threshold, for messages.
fn threshold_unit(condition: &str) -> &'static str {
    match condition {
        "tp99_ms_above" => "milliseconds",
        "availability_below" => "a fraction, 0 to 1",
        "qps_above" | "qps_below" => "requests per second",
        "config_lag_above" => "seconds",
        _ => "nodes",
    }
}

/// `http://` or `https://`, a host, no spaces or control characters.
fn check_webhook_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?} must start with http:// or https://"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(format!("{url:?} needs a host (and no user info)"));
    }
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{url:?} is not a URL"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::test_support::*;
    use serde_json::json;

    #[test]
    fn alert_rules_and_owners() {
        let mut t = T::new();
        let ok = json!({"api": "order.get", "condition": "tp99_ms_above", "threshold": 200,
            "for_s": 10, "severity": "page", "receivers": [{"webhook": "http://127.0.0.1:7000/hook"},
            {"email": "sre@example.com"}]});
        t.put("alerts/order-slow", ok)
            .put("alerts/any-breaker", json!({"condition": "breaker_open"}))
            .put(
                "alerts/cond",
                json!({"condition": "tp99_above", "threshold": 1}),
            )
            .put("alerts/no-threshold", json!({"condition": "qps_below"}))
            .put(
                "alerts/avail",
                json!({"condition": "availability_below", "threshold": 99.9}),
            )
            .put(
                "alerts/neg",
                json!({"condition": "qps_above", "threshold": -1}),
            )
            .put(
                "alerts/api",
                json!({"api": "a b", "condition": "qps_above", "threshold": 1}),
            )
            .put(
                "alerts/for",
                json!({"condition": "node_missing", "for_s": 100000}),
            )
            .put(
                "alerts/recv",
                json!({"condition": "node_missing", "receivers": [{}]}),
            )
            .put(
                "alerts/both",
                json!({"condition": "node_missing",
                "receivers": [{"webhook": "http://x/", "email": "a@b.c"}]}),
            )
            .put(
                "alerts/url",
                json!({"condition": "node_missing", "receivers": [{"webhook": "ftp://x/"}]}),
            )
            .put(
                "alerts/mail",
                json!({"condition": "node_missing", "receivers": [{"email": "nobody"}]}),
            )
            .put(
                "alerts/sev",
                json!({"condition": "node_missing", "severity": "very bad"}),
            );
        let mut owned = http_api("owned", "GET", "/owned");
        owned["owner"] = json!("team-orders@example.com");
        let mut badly = http_api("badly", "GET", "/badly");
        badly["owner"] = json!("Team <orders@example.com>");
        t.api(owned).api(badly);
        let s = t.build(None);
        assert!(s.accepted.contains_key("alerts/order-slow"));
        assert!(s.accepted.contains_key("alerts/any-breaker"));
        assert!(reason(&s, "alerts/cond").starts_with("condition: \"tp99_above\" is not one of"));
        assert_eq!(
            reason(&s, "alerts/no-threshold"),
            "threshold: required for qps_below (in requests per second)"
        );
        assert!(reason(&s, "alerts/avail").contains("fraction"));
        assert!(reason(&s, "alerts/neg").starts_with("threshold:"));
        assert!(reason(&s, "alerts/api").starts_with("api:"));
        assert!(reason(&s, "alerts/for").starts_with("for_s:"));
        assert!(reason(&s, "alerts/recv").starts_with("receivers[0]: set exactly one"));
        assert!(reason(&s, "alerts/both").starts_with("receivers[0]: set exactly one"));
        assert!(reason(&s, "alerts/url").starts_with("receivers[0].webhook:"));
        assert!(reason(&s, "alerts/mail").starts_with("receivers[0].email:"));
        assert!(reason(&s, "alerts/sev").starts_with("severity:"));
        assert_eq!(
            s.apis["owned"].definition.owner.as_deref(),
            Some("team-orders@example.com")
        );
        assert!(reason(&s, "apis/badly").starts_with("owner:"));
        // A rule may name an API that does not exist (yet, or any more).
        let rule = check_alert(
            "x",
            br#"{"api":"gone","condition":"qps_above","threshold":5}"#,
        );
        assert_eq!(rule.unwrap().for_s, 0);
        for good in ["a@b.co", "first.last+tag@mail.example.com"] {
            assert!(check_email(good).is_ok(), "{good}");
        }
        for bad in ["", "a@b", "@b.c", "a@.b", "a b@c.d", "a@b.c.", "<a@b.c>"] {
            assert!(check_email(bad).is_err(), "{bad}");
        }
    }
}
