//! The `policy` of an API document (docs/operations/config-tree.md, "The configuration tree"): bulkhead,
//! breaker, rate limits and body limit, and the hot-API parts `cache`, `hot_keys` and
//! `read_only` parsed into a [`HotPolicy`] (docs/operations/caching.md, "Caching and hot keys").

use super::fields::{excerpt, is_header_name, MAX_TIMEOUT_MS};
use crate::selector::Selector;
use crate::snapshot::{CacheSpec, HotKeysSpec, HotPolicy};
use crate::v1;
use std::collections::HashSet;

pub(super) fn check_policy(p: &v1::Policy) -> Result<(), String> {
    if let Some(bh) = &p.bulkhead {
        if bh.max_concurrent == 0 {
            return Err("policy.bulkhead.max_concurrent: must be at least 1".to_owned());
        }
        if bh.max_wait_ms.is_some_and(|w| w > MAX_TIMEOUT_MS) {
            return Err(format!(
                "policy.bulkhead.max_wait_ms: must be at most {MAX_TIMEOUT_MS}"
            ));
        }
    }
    if let Some(br) = &p.breaker {
        let at_least_one = [
            (
                "consecutive_failures",
                br.consecutive_failures.map(u64::from),
            ),
            (
                "consecutive_slow_calls",
                br.consecutive_slow_calls.map(u64::from),
            ),
            ("half_open_probes", br.half_open_probes.map(u64::from)),
            ("min_calls", br.min_calls.map(u64::from)),
        ];
        for (name, v) in at_least_one {
            if v == Some(0) {
                return Err(format!("policy.breaker.{name}: must be at least 1"));
            }
        }
        const DAY_MS: u64 = 86_400_000;
        let durations = [
            ("slow_call_ms", br.slow_call_ms, MAX_TIMEOUT_MS),
            ("open_ms", br.open_ms, DAY_MS),
            ("window_ms", br.window_ms, DAY_MS),
        ];
        for (name, v, max) in durations {
            if let Some(v) = v {
                if !(1..=max).contains(&v) {
                    return Err(format!(
                        "policy.breaker.{name}: must be between 1 and {max}"
                    ));
                }
            }
        }
        if let Some(r) = br.error_ratio {
            if !(r > 0.0 && r <= 1.0) {
                return Err("policy.breaker.error_ratio: must be in (0, 1]".to_owned());
            }
        }
    }
    for (i, rl) in p.rate_limits.iter().enumerate() {
        let field = format!("policy.rate_limits[{i}]");
        check_rate_key(&rl.key).map_err(|e| format!("{field}.key: {e}"))?;
        if rl.limit == 0 {
            return Err(format!("{field}.limit: must be at least 1"));
        }
        if rl.burst == Some(0) {
            return Err(format!("{field}.burst: must be at least 1"));
        }
    }
    if p.max_body_bytes == Some(0) {
        return Err("policy.max_body_bytes: must be at least 1".to_owned());
    }
    hot_policy(p)?;
    Ok(())
}

fn check_rate_key(k: &v1::RateKey) -> Result<(), String> {
    let parts = k.parts();
    if parts.is_empty() {
        return Err("must not be an empty list".to_owned());
    }
    let mut seen = HashSet::with_capacity(parts.len());
    for p in &parts {
        let ok = match *p {
            "api" | "app" | "ip" => true,
            other => other.strip_prefix("header:").is_some_and(is_header_name),
        };
        if !ok {
            return Err(format!(
                "{:?} is not one of api, app, ip, header:<Name>",
                excerpt(p)
            ));
        }
        if !seen.insert(p.to_ascii_lowercase()) {
            return Err(format!("{:?} appears twice", excerpt(p)));
        }
    }
    Ok(())
}

// Hot APIs: `policy.cache`, `policy.hot_keys` (docs/operations/caching.md, "Caching and hot keys").

/// Default and bounds of `policy.cache.max_entries`.
pub const DEFAULT_CACHE_ENTRIES: u64 = 10_000;
pub const MAX_CACHE_ENTRIES: u64 = 1_000_000;
/// Default and bounds of `policy.cache.max_body_bytes`.
pub const DEFAULT_CACHE_BODY_BYTES: u64 = 65_536;
pub const MAX_CACHE_BODY_BYTES: u64 = 8 << 20;
/// The longest cache ttl and hot-key `auto_cache_ms`: one day.
pub const MAX_CACHE_TTL_MS: u64 = 86_400_000;
/// The most keys a hot-key detector tracks (`policy.hot_keys.top`).
pub const MAX_HOT_TOP: u32 = 1000;

/// `field[i]: ...` for an error of one selector, `field: ...` for one of the whole key.
fn key_error(field: &str, e: &str) -> String {
    if e.starts_with('[') {
        format!("{field}{e}")
    } else {
        format!("{field}: {e}")
    }
}

/// The most names in `policy.cache.query`.
pub const MAX_CACHE_QUERY_NAMES: usize = 32;

/// `policy.cache.query`: distinct, non-empty names of at most 128 bytes, sorted.
fn cache_query_names(names: &[String]) -> Result<Vec<String>, String> {
    if names.len() > MAX_CACHE_QUERY_NAMES {
        return Err(format!(
            "policy.cache.query: at most {MAX_CACHE_QUERY_NAMES} names"
        ));
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() || n.len() > 128 {
            return Err(format!("policy.cache.query[{i}]: a name of 1 to 128 bytes"));
        }
        if out.contains(n) {
            return Err(format!("policy.cache.query[{i}]: {n:?} is named twice"));
        }
        out.push(n.clone());
    }
    out.sort();
    Ok(out)
}

/// The parsed cache and hot-key policy of `p`; `None` when it has neither.
pub fn hot_policy(p: &v1::Policy) -> Result<Option<HotPolicy>, String> {
    let cache = match &p.cache {
        None => None,
        Some(c) => {
            if c.ttl_ms > MAX_CACHE_TTL_MS {
                return Err(format!(
                    "policy.cache.ttl_ms: must be at most {MAX_CACHE_TTL_MS}"
                ));
            }
            let key = if c.key.is_empty() {
                Vec::new()
            } else {
                Selector::parse_key(&c.key).map_err(|e| key_error("policy.cache.key", &e))?
            };
            let max_entries = c.max_entries.unwrap_or(DEFAULT_CACHE_ENTRIES);
            if !(1..=MAX_CACHE_ENTRIES).contains(&max_entries) {
                return Err(format!(
                    "policy.cache.max_entries: must be between 1 and {MAX_CACHE_ENTRIES}"
                ));
            }
            let max_body = c.max_body_bytes.unwrap_or(DEFAULT_CACHE_BODY_BYTES);
            if !(1..=MAX_CACHE_BODY_BYTES).contains(&max_body) {
                return Err(format!(
                    "policy.cache.max_body_bytes: must be between 1 and {MAX_CACHE_BODY_BYTES}"
                ));
            }
            Some(CacheSpec {
                ttl_ms: c.ttl_ms,
                key,
                max_entries: max_entries as usize,
                max_body_bytes: max_body as usize,
                shared: c.shared,
                query: match &c.query {
                    None => None,
                    Some(names) => Some(cache_query_names(names)?),
                },
            })
        }
    };
    let hot_keys = match &p.hot_keys {
        None => None,
        Some(h) => {
            let key =
                Selector::parse_key(&h.key).map_err(|e| key_error("policy.hot_keys.key", &e))?;
            let rate_above = h.rate_above.unwrap_or(200.0);
            if !(rate_above.is_finite() && rate_above > 0.0) {
                return Err("policy.hot_keys.rate_above: must be above 0".to_owned());
            }
            let share = h.bandwidth_share_above.unwrap_or(0.7);
            if !(share > 0.0 && share <= 1.0) {
                return Err("policy.hot_keys.bandwidth_share_above: must be in (0, 1]".to_owned());
            }
            if h.link_bytes_per_s == Some(0) {
                return Err("policy.hot_keys.link_bytes_per_s: must be at least 1".to_owned());
            }
            // Automatic caching is opt-in (docs/operations/caching.md, "Caching and hot keys"): an
            // API that may be cached by itself says so twice, `read_only` and the ttl.
            let auto_cache_ms = match h.auto_cache_ms {
                Some(ms) if p.read_only => ms,
                _ => 0,
            };
            if auto_cache_ms > MAX_CACHE_TTL_MS {
                return Err(format!(
                    "policy.hot_keys.auto_cache_ms: must be at most {MAX_CACHE_TTL_MS}"
                ));
            }
            let top = h.top.unwrap_or(20);
            if !(1..=MAX_HOT_TOP).contains(&top) {
                return Err(format!(
                    "policy.hot_keys.top: must be between 1 and {MAX_HOT_TOP}"
                ));
            }
            Some(HotKeysSpec {
                key,
                rate_above,
                bandwidth_share_above: share,
                link_bytes_per_s: h.link_bytes_per_s,
                auto_cache_ms,
                top: top as usize,
            })
        }
    };
    if cache.is_none() && hot_keys.is_none() && !p.read_only {
        return Ok(None);
    }
    Ok(Some(HotPolicy {
        cache,
        hot_keys,
        read_only: p.read_only,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::test_support::*;
    use serde_json::json;

    #[test]
    fn good_policy_and_keys() {
        let mut v = grpc_api("order.get", "/v1/orders/{order_id}");
        v["policy"] = json!({
            "bulkhead": {"max_concurrent": 64},
            "breaker": {"consecutive_failures": 3, "slow_call_ms": 50, "consecutive_slow_calls": 3, "open_ms": 5000, "error_ratio": 0.5},
            "rate_limits": [
                {"key": "app", "limit": 100, "per": "second"},
                {"key": ["api", "header:X-Region"], "limit": 600, "per": "minute"},
                {"limit": 5, "per": "second"}
            ]
        });
        let s = T::new().api(v).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
    }

    #[test]
    fn cache_and_hot_key_policies() {
        let mut v = http_api("sku.get", "GET", "/v1/skus/{sku}");
        v["policy"] = json!({
            "cache": {"ttl_ms": 2000, "key": ["path:sku", "query:region"], "max_entries": 100},
            "hot_keys": {"key": ["path:sku"], "rate_above": 50, "link_bytes_per_s": 1000000}
        });
        let mut plain = http_api("plain.get", "GET", "/v1/plain");
        plain["policy"] = json!({});
        let s = T::new().api(v).api(plain).build(None);
        assert!(s.rejected.is_empty(), "{:?}", s.rejected);
        let hot = &s.hot["sku.get"];
        let cache = hot.cache.as_ref().unwrap();
        assert_eq!(cache.ttl_ms, 2000);
        assert_eq!(cache.max_entries, 100);
        assert_eq!(cache.max_body_bytes, DEFAULT_CACHE_BODY_BYTES as usize);
        assert_eq!(cache.key.len(), 2);
        let hk = hot.hot_keys.as_ref().unwrap();
        assert_eq!((hk.rate_above, hk.bandwidth_share_above), (50.0, 0.7));
        // Hot keys cache themselves only on an API that opts in twice (docs/operations/caching.md,
        // "Caching and hot keys").
        assert_eq!((hk.auto_cache_ms, hk.top), (0, 20));
        assert!(!s.hot.contains_key("plain.get"));
        let opted = |policy: serde_json::Value| {
            let mut a = http_api("a.get", "GET", "/v1/a/{sku}");
            a["policy"] = policy;
            let s = T::new().api(a).build(None);
            assert!(s.rejected.is_empty(), "{:?}", s.rejected);
            s.hot["a.get"].hot_keys.as_ref().unwrap().auto_cache_ms
        };
        let hot = json!({"key": ["path:sku"], "auto_cache_ms": 1500});
        assert_eq!(opted(json!({"hot_keys": hot, "read_only": true})), 1500);
        assert_eq!(opted(json!({"hot_keys": hot})), 0);
        assert_eq!(
            opted(json!({"hot_keys": {"key": ["path:sku"]}, "read_only": true})),
            0
        );
        // The cache's own options: shared, and the query parameters that count (sorted).
        let mut c = http_api("c.get", "GET", "/v1/c");
        c["policy"] = json!({"cache": {"ttl_ms": 5, "shared": true, "query": ["z", "a"]}});
        let s = T::new().api(c).build(None);
        let cache = s.hot["c.get"].cache.as_ref().unwrap();
        assert!(cache.shared);
        assert_eq!(
            cache.query.as_deref(),
            Some(&["a".to_owned(), "z".to_owned()][..])
        );

        for (policy, field) in [
            (
                json!({"cache": {"ttl_ms": 1, "query": ["a", "a"]}}),
                "policy.cache.query[1]:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "query": [""]}}),
                "policy.cache.query[0]:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "key": ["bogus"]}}),
                "policy.cache.key[0]:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "max_entries": 0}}),
                "policy.cache.max_entries:",
            ),
            (
                json!({"cache": {"ttl_ms": 1, "max_body_bytes": 0}}),
                "policy.cache.max_body_bytes:",
            ),
            (
                json!({"cache": {"ttl_ms": 90000000}}),
                "policy.cache.ttl_ms:",
            ),
            (json!({"hot_keys": {"key": []}}), "policy.hot_keys.key:"),
            (
                json!({"hot_keys": {"key": ["app"], "rate_above": 0}}),
                "policy.hot_keys.rate_above:",
            ),
            (
                json!({"hot_keys": {"key": ["app"], "bandwidth_share_above": 1.5}}),
                "policy.hot_keys.bandwidth_share_above:",
            ),
            (
                json!({"hot_keys": {"key": ["app"], "top": 0}}),
                "policy.hot_keys.top:",
            ),
            (
                json!({"hot_keys": {"key": ["app"], "link_bytes_per_s": 0}}),
                "policy.hot_keys.link_bytes_per_s:",
            ),
        ] {
            let r = api_reason(|v| v["policy"] = policy.clone());
            assert!(r.starts_with(field), "{policy}: {r}");
        }
    }
}
