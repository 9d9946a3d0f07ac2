//! `switches/<api_id>` and `switches/<api_id>@<label>`: an API-wide or key-level switch
//! (docs/operations/degrading.md, "Degrading an API", "Key-level switches"): its name, its `match`
//! (key-level only), the message shown to merchants and the fallback answer.

use super::fields::{check_name, excerpt, is_header_name, parse_json};
use crate::selector::{split_switch_name, Selector};
use crate::v1;
use std::collections::BTreeMap;

/// A key-level switch's API id, label and parsed `match`.
type KeyMatch = (String, String, Vec<(Selector, Vec<String>)>);

/// The most values one selector of a switch's `match` may list.
pub const MAX_MATCH_VALUES: usize = 1000;
/// The longest value in a switch's `match`.
pub const MAX_MATCH_VALUE_CHARS: usize = 256;

/// `switches/<api_id>` (API-wide, no `match`) or `switches/<api_id>@<label>` (key-level,
/// with a `match`).
pub(super) fn check_switch(
    name: &str,
    raw: &[u8],
) -> Result<(v1::Switch, Option<KeyMatch>), String> {
    let (api_id, label) = split_switch_name(name);
    check_name(api_id).map_err(|e| format!("name: {e}"))?;
    if let Some(label) = label {
        check_name(label).map_err(|e| format!("name: label {e}"))?;
    }
    let sw: v1::Switch = parse_json(raw)?;
    let key = match label {
        None if !sw.matches.is_empty() => {
            return Err(format!(
                "match: only a key-level switch switches/{api_id}@<label> has a match"
            ))
        }
        None => None,
        // A key-level switch that is off may leave its match out.
        Some(_) if !sw.degraded && sw.matches.is_empty() => None,
        Some(label) => Some((
            api_id.to_owned(),
            label.to_owned(),
            check_match(&sw.matches)?,
        )),
    };
    if let Some(m) = &sw.message {
        // Shown to merchants in the 503 envelope: one short line of text.
        if m.chars().count() > 200 || m.chars().any(char::is_control) {
            return Err(
                "message: at most 200 characters, no control characters (it is shown to merchants)"
                    .to_owned(),
            );
        }
    }
    if let Some(fb) = &sw.fallback {
        if !(100..=599).contains(&fb.status) {
            return Err("fallback.status: must be between 100 and 599".to_owned());
        }
        for (k, v) in &fb.headers {
            if !is_header_name(k) {
                return Err(format!(
                    "fallback.headers: {:?} is not a header name",
                    excerpt(k)
                ));
            }
            let reserved = ["content-length", "transfer-encoding", "connection"];
            if reserved.iter().any(|r| r.eq_ignore_ascii_case(k)) {
                return Err(format!("fallback.headers.{k}: set by the gateway itself"));
            }
            if v.chars()
                .any(|c| (c.is_control() && c != '\t') || c == '\u{7f}')
            {
                return Err(format!(
                    "fallback.headers.{k}: control characters are not allowed"
                ));
            }
        }
    }
    Ok((sw, key))
}

/// A key-level switch's `match`: 1 to `MAX_SELECTORS` selectors, each with 1 to
/// [`MAX_MATCH_VALUES`] values.
fn check_match(m: &BTreeMap<String, Vec<String>>) -> Result<Vec<(Selector, Vec<String>)>, String> {
    if m.is_empty() || m.len() > crate::selector::MAX_SELECTORS {
        return Err(format!(
            "match: must list 1 to {} selectors",
            crate::selector::MAX_SELECTORS
        ));
    }
    let mut out: Vec<(Selector, Vec<String>)> = Vec::with_capacity(m.len());
    for (name, values) in m {
        let sel = Selector::parse(name).map_err(|e| format!("match: {e}"))?;
        if out.iter().any(|(s, _)| *s == sel) {
            return Err(format!("match: {sel} appears twice"));
        }
        if values.is_empty() || values.len() > MAX_MATCH_VALUES {
            return Err(format!(
                "match.{name}: must list 1 to {MAX_MATCH_VALUES} values"
            ));
        }
        if let Some(v) = values
            .iter()
            .find(|v| v.chars().count() > MAX_MATCH_VALUE_CHARS)
        {
            return Err(format!(
                "match.{name}: {:?} is longer than {MAX_MATCH_VALUE_CHARS} characters",
                excerpt(v)
            ));
        }
        out.push((sel, values.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::test_support::*;
    use serde_json::json;

    #[test]
    fn a_switch_message_is_one_short_line() {
        let doc = |m: &str| serde_json::to_vec(&json!({"degraded": true, "message": m})).unwrap();
        let (sw, _) = check_switch("order.get", &doc("back at 10:00")).unwrap();
        assert_eq!(sw.message.as_deref(), Some("back at 10:00"));
        for bad in ["a\nb".to_owned(), "x".repeat(201)] {
            let e = check_switch("order.get", &doc(&bad)).unwrap_err();
            assert!(e.starts_with("message:"), "{e}");
        }
    }

    // Hot APIs: key-level switches and cache/hot-key policies.

    #[test]
    fn key_level_switches() {
        let mut t = T::new();
        t.put(
            "switches/order.get@sku-BK-1",
            json!({"degraded": true, "match": {"path:sku": ["BK-1"]}, "fallback": {"status": 200, "body": {"stock": 0}}}),
        )
        .put(
            "switches/order.get@north-cm",
            json!({"degraded": true, "match": {"header:X-Region": ["north"], "header:X-Carrier": ["cm"]}}),
        )
        .put("switches/order.get", json!({"degraded": false}))
        .put("switches/a@nomatch", json!({"degraded": true}))
        .put("switches/a@off", json!({"degraded": false}))
        .put("switches/a@bad", json!({"degraded": true, "match": {"cookie:x": ["1"]}}))
        .put("switches/a@empty", json!({"degraded": true, "match": {"app": []}}))
        .put("switches/a@b@c", json!({"degraded": true, "match": {"app": ["m1"]}}))
        .put("switches/a@", json!({"degraded": true, "match": {"app": ["m1"]}}))
        .put("switches/wide", json!({"degraded": true, "match": {"app": ["m1"]}}));
        let s = t.build(None);
        let keyed = &s.key_switches["order.get"];
        assert_eq!(keyed.len(), 2);
        let bk = keyed.iter().find(|k| k.label == "sku-BK-1").unwrap();
        assert_eq!(
            bk.matches,
            vec![(Selector::Path("sku".into()), vec!["BK-1".to_owned()])]
        );
        let rc = keyed.iter().find(|k| k.label == "north-cm").unwrap();
        assert_eq!(rc.matches.len(), 2);
        assert!(rc.matches.contains(&(
            Selector::Header("x-region".into()),
            vec!["north".to_owned()]
        )));
        assert!(s.switches.contains_key("order.get@sku-BK-1"));
        assert!(!s.switches["order.get"].degraded);
        assert!(reason(&s, "switches/a@nomatch").starts_with("match: must list 1"));
        assert!(reason(&s, "switches/a@bad").starts_with("match: "));
        assert!(reason(&s, "switches/a@empty").starts_with("match.app: "));
        assert!(reason(&s, "switches/a@b@c").starts_with("name: label"));
        assert!(reason(&s, "switches/a@").starts_with("name: label"));
        assert!(reason(&s, "switches/wide").starts_with("match: only a key-level switch"));
        assert!(!s.key_switches.contains_key("a"));
        assert!(s.switches.contains_key("a@off"));
    }
}
