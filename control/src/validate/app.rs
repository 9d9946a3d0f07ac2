//! `apps/<app_key>`: an app (docs/operations/config-tree.md, "The configuration tree"): its secret, the
//! APIs and topics it names, its rate limits, and its `callback_url` (docs/operations/notifications.md,
//! "Notifications").

use super::fields::{check_name, parse_json};
use crate::v1;

/// The shortest app secret.
pub const MIN_SECRET_CHARS: usize = 8;

/// The longest app callback URL.
pub const MAX_CALLBACK_URL_CHARS: usize = 2048;

pub(super) fn check_app(name: &str, raw: &[u8]) -> Result<v1::App, String> {
    check_name(name).map_err(|e| format!("app key: {e}"))?;
    let app: v1::App = parse_json(raw)?;
    if app.secret.chars().count() < MIN_SECRET_CHARS {
        return Err(format!(
            "secret: must be at least {MIN_SECRET_CHARS} characters"
        ));
    }
    for (i, a) in app.apis.iter().enumerate() {
        if a != "*" {
            check_name(a).map_err(|e| format!("apis[{i}]: must be \"*\" or an API id: {e}"))?;
        }
    }
    for (i, t) in app.topics.iter().enumerate() {
        check_name(t).map_err(|e| format!("topics[{i}]: must be a topic name: {e}"))?;
    }
    if let Some(url) = &app.callback_url {
        check_callback_url(url).map_err(|e| format!("callback_url: {e}"))?;
    }
    for (i, rl) in app.rate_limits.iter().enumerate() {
        if rl.limit == 0 {
            return Err(format!("rate_limits[{i}].limit: must be at least 1"));
        }
        if rl.burst == Some(0) {
            return Err(format!("rate_limits[{i}].burst: must be at least 1"));
        }
    }
    Ok(app)
}

/// An app's `callback_url`: an absolute `http://` or `https://` URL with a host and no
/// spaces or fragment.
fn check_callback_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_CALLBACK_URL_CHARS {
        return Err(format!(
            "must be at most {MAX_CALLBACK_URL_CHARS} characters"
        ));
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    if url.bytes().any(|b| !b.is_ascii_graphic()) || url.contains('#') {
        return Err("must be visible ASCII without spaces or a fragment".into());
    }
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err("must name a host (and no user info)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::IpAclRules;
    use crate::validate::test_support::*;
    use serde_json::json;

    #[test]
    fn topics_and_the_app_notification_fields() {
        let mut t = T::new();
        t.put(
            "topics/orders",
            json!({"owner": "order-team", "apps": ["m1"], "retention_s": 3600}),
        )
        .put("topics/all", json!({"apps": ["*"]}))
        .put("topics/bad-app", json!({"apps": ["a b"]}))
        .put("topics/forever", json!({"apps": ["*"], "retention_s": 0}))
        .put(
            "apps/m1",
            json!({"secret": "12345678", "topics": ["orders"], "callback_url": "https://m1.example/cb?x=1"}),
        )
        .put("apps/m2", json!({"secret": "12345678"}))
        .put(
            "apps/badcb",
            json!({"secret": "12345678", "callback_url": "ftp://x/"}),
        )
        .put(
            "apps/badtopic",
            json!({"secret": "12345678", "topics": ["no spaces"]}),
        );
        let s = t.build(None);
        assert_eq!(s.topics["orders"].retention_s, 3600);
        assert_eq!(s.topics["all"].retention_s, v1::DEFAULT_RETENTION_S);
        assert!(reason(&s, "topics/bad-app").starts_with("apps[0]:"));
        assert!(reason(&s, "topics/forever").starts_with("retention_s:"));
        assert!(reason(&s, "apps/badcb").starts_with("callback_url:"));
        assert!(reason(&s, "apps/badtopic").starts_with("topics[0]:"));
        assert!(s.topic_granted("m1", "orders") && s.topic_granted("m2", "all"));
        assert!(!s.topic_granted("m2", "orders") && !s.topic_granted("m1", "nope"));
        assert_eq!(s.granted_topics("m2"), vec!["all".to_owned()]);
        assert!(check_callback_url("http://h:1/p").is_ok());
        assert!(check_callback_url("https://u@h/").is_err());
        assert!(check_callback_url("https:///p").is_err());
    }

    #[test]
    fn app_switch_ipacl_descriptor_rules() {
        let mut t = T::new();
        t.put("apps/short", json!({"secret": "1234567"}))
            .put(
                "apps/bad-api",
                json!({"secret": "12345678", "apis": ["a b"]}),
            )
            .put(
                "apps/status",
                json!({"secret": "12345678", "status": "paused"}),
            )
            .put(
                "apps/ok",
                json!({"secret": "12345678", "status": "disabled", "apis": ["order.get"]}),
            )
            .put(
                "switches/bad",
                json!({"degraded": true, "fallback": {"status": 99}}),
            )
            .put(
                "switches/hdr",
                json!({"degraded": true, "fallback": {"headers": {"Bad Name": "x"}}}),
            )
            .put("switches/good", json!({"degraded": true}))
            .put("ipacl", json!({"deny": ["10.0.0.0/8", "300.1.1.1"]}))
            .bytes(&format!("descriptors/{}", "0".repeat(64)), b"x".to_vec())
            .bytes("descriptors/XYZ", b"x".to_vec());
        let junk = b"\xff\xff\xff".to_vec();
        t.bytes(&format!("descriptors/{}", sha(&junk)), junk);
        let s = t.build(None);
        assert!(reason(&s, "apps/short").starts_with("secret:"));
        assert!(reason(&s, "apps/bad-api").starts_with("apis[0]:"));
        assert!(reason(&s, "apps/status").starts_with("status:"));
        assert!(s.apps.contains_key("ok"));
        assert!(reason(&s, "switches/bad").starts_with("fallback.status:"));
        assert!(reason(&s, "switches/hdr").starts_with("fallback.headers:"));
        assert!(s.switches.contains_key("good"));
        assert_eq!(
            reason(&s, "ipacl"),
            "deny[1]: \"300.1.1.1\" is not a CIDR or IP address"
        );
        assert!(reason(&s, &format!("descriptors/{}", "0".repeat(64))).contains("SHA-256"));
        assert!(reason(&s, "descriptors/XYZ").starts_with("name:"));
        assert!(reason(&s, &format!("descriptors/{}", sha(b"\xff\xff\xff")))
            .contains("FileDescriptorSet"));
        assert_eq!(*s.ipacl, IpAclRules::default());
    }
}
