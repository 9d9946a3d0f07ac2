//! `clusters/<name>`: a backend cluster (docs/operations/clusters.md, "Clusters: balancing, health,
//! failover, sleep", "gRPC client settings", "Cluster document"): its endpoints and standby
//! set (addresses, weights, none twice), `host`, balancing and hash key, sticky cookie,
//! health check, outlier ejection, sleep and autoscale hooks, gRPC client settings.

use super::fields::{check_name, excerpt, is_header_name, parse_json};
use crate::v1;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

pub(super) fn check_cluster(name: &str, raw: &[u8]) -> Result<v1::Cluster, String> {
    check_name(name).map_err(|e| format!("name: {e}"))?;
    let c: v1::Cluster = parse_json(raw)?;
    if c.endpoints.is_empty() {
        return Err("endpoints: must list at least one endpoint".to_owned());
    }
    let mut seen: HashMap<&str, String> = HashMap::with_capacity(c.endpoints.len());
    check_endpoints("endpoints", &c.endpoints, &mut seen)?;
    check_routing(&c, &mut seen)?;
    if let Some(host) = &c.host {
        check_host(host).map_err(|e| format!("host: {e}"))?;
    }
    if let Some(g) = &c.grpc {
        if c.protocol != v1::Protocol::Grpc {
            return Err(
                "grpc: gRPC client settings on a cluster whose protocol is not grpc".to_owned(),
            );
        }
        check_grpc_client(g)?;
    }
    Ok(c)
}

/// A cluster's gRPC client settings (docs/operations/clusters.md, "gRPC client settings").
fn check_grpc_client(g: &v1::GrpcClient) -> Result<(), String> {
    // grpc-core's default server policy answers a PING more often than every 5 minutes
    // with GOAWAY too_many_pings once a few arrived; grpc-go and grpc-java clients refuse
    // intervals under 10 s. Below that a keep-alive would kill the calls it protects.
    if let Some(ms) = g.keepalive_ms {
        if ms != 0 && !(10_000..=MAX_ROUTING_MS).contains(&ms) {
            return Err(format!(
                "grpc.keepalive_ms: must be 0 (no PINGs) or 10000..{MAX_ROUTING_MS} ms, not {ms}"
            ));
        }
    }
    if let Some(ms) = g.keepalive_timeout_ms {
        if !(1_000..=600_000).contains(&ms) {
            return Err(format!(
                "grpc.keepalive_timeout_ms: must be 1000..600000 ms, not {ms}"
            ));
        }
    }
    if let Some(ms) = g.connect_timeout_ms {
        if !(10..=60_000).contains(&ms) {
            return Err(format!(
                "grpc.connect_timeout_ms: must be 10..60000 ms, not {ms}"
            ));
        }
    }
    if let Some(n) = g.compress_min_bytes {
        // A gRPC message is at most 4 GiB (its length prefix); requests are far smaller.
        if n > u64::from(u32::MAX) {
            return Err(format!(
                "grpc.compress_min_bytes: must be at most {}, not {n}",
                u32::MAX
            ));
        }
    }
    Ok(())
}

/// A cluster's `host`: a host name or address, with an optional port, as a `Host` header
/// carries it (RFC 9110 §7.2: no user info, path or spaces), at most 255 bytes.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() || host.len() > 255 {
        return Err("must be 1 to 255 bytes".to_owned());
    }
    let ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']'));
    if !ok {
        return Err(format!(
            "{host:?} is not a host name or address with an optional port"
        ));
    }
    Ok(())
}

/// A list of endpoints: addresses, weights, no address twice (across both sets).
fn check_endpoints<'c>(
    field: &str,
    eps: &'c [v1::Endpoint],
    seen: &mut HashMap<&'c str, String>,
) -> Result<(), String> {
    for (i, ep) in eps.iter().enumerate() {
        check_addr(&ep.addr).map_err(|e| format!("{field}[{i}].addr: {e}"))?;
        if ep.weight == 0 {
            return Err(format!("{field}[{i}].weight: must be at least 1"));
        }
        if let Some(j) = seen.insert(&ep.addr, format!("{field}[{i}]")) {
            return Err(format!(
                "{field}[{i}].addr: {:?} repeats {j}",
                excerpt(&ep.addr)
            ));
        }
    }
    Ok(())
}

/// Upper bound of the routing durations (intervals, holds, ejections): one day.
const MAX_ROUTING_MS: u64 = 86_400_000;

/// The routing parts of a cluster (docs/operations/clusters.md, "Clusters: balancing, health,
/// failover, sleep").
fn check_routing<'c>(
    c: &'c v1::Cluster,
    seen: &mut HashMap<&'c str, String>,
) -> Result<(), String> {
    let ms = |field: &str, v: u64| -> Result<(), String> {
        if v == 0 || v > MAX_ROUTING_MS {
            return Err(format!("{field}: must be 1..{MAX_ROUTING_MS} ms, not {v}"));
        }
        Ok(())
    };
    match (c.balancing(), &c.hash_key) {
        (v1::Balancing::ConsistentHash, None) => {
            return Err("hash_key: balancing consistent_hash needs a hash_key \
                        (app, ip, header:<Name>, query:<name> or path:<var>)"
                .to_owned())
        }
        (v1::Balancing::ConsistentHash, Some(k)) => {
            check_hash_key(k).map_err(|e| format!("hash_key: {e}"))?
        }
        (b, Some(_)) => {
            return Err(format!(
                "hash_key: only used by balancing consistent_hash, not {}",
                b.as_str()
            ))
        }
        (_, None) => {}
    }
    if let Some(s) = &c.sticky {
        if !is_cookie_name(&s.cookie) {
            return Err(format!(
                "sticky.cookie: {:?} is not a cookie name (an RFC 6265 token)",
                excerpt(&s.cookie)
            ));
        }
        if s.ttl_s == 0 || s.ttl_s > 400 * 86_400 {
            return Err(format!("sticky.ttl_s: must be 1..{} s", 400 * 86_400));
        }
    }
    if let Some(h) = &c.health_check {
        if !h.path.starts_with('/') || h.path.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(format!(
                "health_check.path: {:?} must start with '/' and hold no spaces or controls",
                excerpt(&h.path)
            ));
        }
        ms("health_check.interval_ms", h.interval_ms)?;
        ms("health_check.timeout_ms", h.timeout_ms)?;
        if h.unhealthy_after == 0 || h.unhealthy_after > 100 {
            return Err("health_check.unhealthy_after: must be 1..100".to_owned());
        }
        if h.healthy_after == 0 || h.healthy_after > 100 {
            return Err("health_check.healthy_after: must be 1..100".to_owned());
        }
    }
    if let Some(o) = &c.outlier {
        if o.consecutive_failures == 0 || o.consecutive_failures > 10_000 {
            return Err("outlier.consecutive_failures: must be 1..10000".to_owned());
        }
        ms("outlier.eject_ms", o.eject_ms)?;
    }
    if let Some(sb) = &c.standby {
        if sb.endpoints.is_empty() {
            return Err("standby.endpoints: must list at least one endpoint".to_owned());
        }
        check_endpoints("standby.endpoints", &sb.endpoints, seen)?;
        if !(sb.failover_below > 0.0 && sb.failover_below <= 1.0) {
            return Err(format!(
                "standby.failover_below: must be in (0, 1], not {}",
                sb.failover_below
            ));
        }
    }
    if c.active() == v1::ActiveSet::Standby && c.standby.is_none() {
        return Err("active: \"standby\" but the cluster has no standby set".to_owned());
    }
    if let Some(s) = &c.sleep {
        check_url(&s.wake_url).map_err(|e| format!("sleep.wake_url: {e}"))?;
        if c.health_check.is_none() {
            return Err(
                "sleep: needs a health_check (it tells when the backend is awake)".to_owned(),
            );
        }
        if s.hold_ms > MAX_ROUTING_MS {
            return Err(format!(
                "sleep.hold_ms: must be at most {MAX_ROUTING_MS} ms"
            ));
        }
        if s.retry_after_s == 0 || s.retry_after_s > 86_400 {
            return Err("sleep.retry_after_s: must be 1..86400 s".to_owned());
        }
        if let Some(u) = &s.sleep_url {
            check_url(u).map_err(|e| format!("sleep.sleep_url: {e}"))?;
        }
        if s.idle_s == Some(0) {
            return Err("sleep.idle_s: must be at least 1 s".to_owned());
        }
    }
    if let Some(a) = &c.autoscale {
        check_url(&a.webhook).map_err(|e| format!("autoscale.webhook: {e}"))?;
        if a.rules.is_empty() {
            return Err("autoscale.rules: must list at least one rule".to_owned());
        }
        for (i, r) in a.rules.iter().enumerate() {
            let f = format!("autoscale.rules[{i}]");
            match (r.rps_above, r.rps_below) {
                (None, None) => {
                    return Err(format!("{f}: needs rps_above or rps_below"));
                }
                (Some(_), Some(_)) => {
                    return Err(format!("{f}: set rps_above or rps_below, not both"));
                }
                (Some(v), None) | (None, Some(v)) if !(v.is_finite() && v >= 0.0) => {
                    return Err(format!("{f}: the rate must be a number >= 0, not {v}"));
                }
                _ => {}
            }
            if r.for_s == 0 || r.for_s > 86_400 {
                return Err(format!("{f}.for_s: must be 1..86400 s"));
            }
        }
        if a.cooldown_s > 86_400 {
            return Err("autoscale.cooldown_s: must be at most 86400 s".to_owned());
        }
    }
    Ok(())
}

/// `app` | `ip` | `header:<Name>` | `query:<name>` | `path:<var>`.
fn check_hash_key(k: &str) -> Result<(), String> {
    let ok = match k.split_once(':') {
        None => matches!(k, "app" | "ip"),
        Some(("header", n)) => is_header_name(n),
        Some(("query", n)) => {
            !n.is_empty()
                && n.bytes()
                    .all(|b| (0x21..0x7f).contains(&b) && b != b'&' && b != b'=')
        }
        Some(("path", n)) => {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        }
        Some(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not one of app, ip, header:<Name>, query:<name>, path:<var>",
            excerpt(k)
        ))
    }
}

/// A cookie name: an RFC 6265 token (RFC 9110 token characters).
fn is_cookie_name(s: &str) -> bool {
    s.len() <= 64 && is_header_name(s)
}

/// An absolute `http://` or `https://` URL with a host.
fn check_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| format!("{:?} must start with http:// or https://", excerpt(u)))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || u.len() > 2048 || u.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(format!("{:?} is not an absolute URL", excerpt(u)));
    }
    Ok(())
}

/// `ip:port` (`[v6]:port`) or `hostname:port`.
fn check_addr(addr: &str) -> Result<(), String> {
    if addr.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let bad = || format!("{:?} is not host:port", excerpt(addr));
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("{:?}: port must be 1..65535", excerpt(addr))),
    }
    if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
        return Err(bad());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "{:?}: {:?} is not a hostname or IP address",
            excerpt(addr),
            excerpt(host)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::test_support::*;
    use serde_json::json;

    #[test]
    fn cluster_rules() {
        let mut t = T::new();
        t.put("clusters/empty", json!({"protocol": "http", "endpoints": []}))
            .put("clusters/badaddr", json!({"protocol": "http", "endpoints": [{"addr": "nohost"}]}))
            .put("clusters/badport", json!({"protocol": "http", "endpoints": [{"addr": "h:0"}]}))
            .put("clusters/w0", json!({"protocol": "http", "endpoints": [{"addr": "h:80", "weight": 0}]}))
            .put("clusters/dup", json!({"protocol": "http", "endpoints": [{"addr": "h:80"}, {"addr": "h:80"}]}))
            .put("clusters/proto", json!({"protocol": "ftp", "endpoints": [{"addr": "h:80"}]}))
            .put("clusters/v6", json!({"protocol": "grpc", "endpoints": [{"addr": "[::1]:50051"}, {"addr": "a-b.c_d.example:1"}]}))
            .put("clusters/host", json!({"protocol": "http", "host": "orders.internal:8080", "endpoints": [{"addr": "h:80"}]}))
            .put("clusters/badhost", json!({"protocol": "http", "host": "a b/c", "endpoints": [{"addr": "h:80"}]}));
        let s = t.build(None);
        assert!(reason(&s, "clusters/empty").starts_with("endpoints:"));
        assert!(reason(&s, "clusters/badaddr").starts_with("endpoints[0].addr:"));
        assert!(reason(&s, "clusters/badport").starts_with("endpoints[0].addr:"));
        assert_eq!(
            reason(&s, "clusters/w0"),
            "endpoints[0].weight: must be at least 1"
        );
        assert!(reason(&s, "clusters/dup").starts_with("endpoints[1].addr:"));
        assert!(
            reason(&s, "clusters/proto").starts_with("protocol:"),
            "{}",
            reason(&s, "clusters/proto")
        );
        assert!(s.clusters.contains_key("v6"));
        assert!(s.clusters.contains_key("host"));
        assert!(reason(&s, "clusters/badhost").starts_with("host:"));
        assert_eq!(s.rejected.len(), 7);
    }

    /// A cluster document with every routing field (docs/operations/clusters.md, "Clusters: balancing,
    /// health, failover, sleep").
    fn full_cluster() -> serde_json::Value {
        json!({
            "protocol": "http",
            "endpoints": [{"addr": "127.0.0.1:18081", "weight": 1}, {"addr": "127.0.0.1:18082", "weight": 1}],
            "balancing": "least_load",
            "sticky": {"cookie": "PORTICO_STICKY", "ttl_s": 3600},
            "health_check": {"path": "/healthz", "interval_ms": 1000, "timeout_ms": 500, "unhealthy_after": 2, "healthy_after": 2},
            "outlier": {"consecutive_failures": 5, "eject_ms": 10000},
            "standby": {"endpoints": [{"addr": "127.0.0.1:28081", "weight": 1}], "failover_below": 0.5, "failback": "auto"},
            "active": "primary",
            "sleep": {"wake_url": "http://127.0.0.1:7000/wake/order-svc", "hold_ms": 3000, "retry_after_s": 2},
            "autoscale": {"webhook": "http://127.0.0.1:7000/scale", "rules": [
                {"rps_above": 500.0, "for_s": 10, "action": "up"},
                {"rps_below": 10.0, "for_s": 60, "action": "down"}], "cooldown_s": 60}
        })
    }

    #[test]
    fn routing_fields_round_trip_and_old_documents_stay_unchanged() {
        for doc in [
            json!({"protocol": "http", "endpoints": [{"addr": "h:80", "weight": 2}]}),
            json!({"protocol": "grpc", "endpoints": [{"addr": "h:80", "weight": 1}], "balancing": "round_robin"}),
            full_cluster(),
        ] {
            let c: v1::Cluster = serde_json::from_value(doc.clone()).unwrap();
            assert_eq!(serde_json::to_value(&c).unwrap(), doc);
        }
        let mut t = T::new();
        t.put("clusters/full", full_cluster());
        let s = t.build(None);
        let c = &s.clusters["full"];
        assert_eq!(c.balancing(), v1::Balancing::LeastLoad);
        assert_eq!(c.active(), v1::ActiveSet::Primary);
        // Defaults of the optional parts.
        let c: v1::Cluster = serde_json::from_value(json!({
            "protocol": "http", "endpoints": [{"addr": "h:80"}],
            "sticky": {}, "health_check": {}, "outlier": {},
            "standby": {"endpoints": [{"addr": "h:81"}]},
            "sleep": {"wake_url": "http://w/"}
        }))
        .unwrap();
        assert_eq!(c.balancing(), v1::Balancing::RoundRobin);
        let st = c.sticky.unwrap();
        assert_eq!((st.cookie.as_str(), st.ttl_s), ("PORTICO_STICKY", 3600));
        let h = c.health_check.unwrap();
        assert_eq!(
            (
                h.path.as_str(),
                h.interval_ms,
                h.timeout_ms,
                h.unhealthy_after,
                h.healthy_after
            ),
            ("/healthz", 1000, 500, 2, 2)
        );
        let o = c.outlier.unwrap();
        assert_eq!((o.consecutive_failures, o.eject_ms), (5, 10_000));
        let sb = c.standby.unwrap();
        assert_eq!((sb.failover_below, sb.failback), (0.5, v1::Failback::Auto));
        let sl = c.sleep.unwrap();
        assert_eq!((sl.hold_ms, sl.retry_after_s), (3000, 2));
    }

    #[test]
    fn routing_rules() {
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let bad: Vec<(&str, Edit, &str)> = vec![
            (
                "balancing",
                Box::new(|v| v["balancing"] = json!("random")),
                "balancing: unknown variant `random`",
            ),
            (
                "hash needs key",
                Box::new(|v| v["balancing"] = json!("consistent_hash")),
                "hash_key: balancing consistent_hash needs a hash_key",
            ),
            (
                "hash key syntax",
                Box::new(|v| {
                    v["balancing"] = json!("consistent_hash");
                    v["hash_key"] = json!("cookie:x");
                }),
                "hash_key: \"cookie:x\" is not one of",
            ),
            (
                "header name",
                Box::new(|v| {
                    v["balancing"] = json!("consistent_hash");
                    v["hash_key"] = json!("header:a b");
                }),
                "hash_key:",
            ),
            (
                "key without hash",
                Box::new(|v| v["hash_key"] = json!("ip")),
                "hash_key: only used by balancing consistent_hash, not least_load",
            ),
            (
                "cookie",
                Box::new(|v| v["sticky"]["cookie"] = json!("a;b")),
                "sticky.cookie:",
            ),
            (
                "ttl",
                Box::new(|v| v["sticky"]["ttl_s"] = json!(0)),
                "sticky.ttl_s:",
            ),
            (
                "path",
                Box::new(|v| v["health_check"]["path"] = json!("healthz")),
                "health_check.path:",
            ),
            (
                "interval",
                Box::new(|v| v["health_check"]["interval_ms"] = json!(0)),
                "health_check.interval_ms: must be 1..",
            ),
            (
                "timeout",
                Box::new(|v| v["health_check"]["timeout_ms"] = json!(0)),
                "health_check.timeout_ms:",
            ),
            (
                "unhealthy",
                Box::new(|v| v["health_check"]["unhealthy_after"] = json!(0)),
                "health_check.unhealthy_after:",
            ),
            (
                "healthy",
                Box::new(|v| v["health_check"]["healthy_after"] = json!(0)),
                "health_check.healthy_after:",
            ),
            (
                "failures",
                Box::new(|v| v["outlier"]["consecutive_failures"] = json!(0)),
                "outlier.consecutive_failures:",
            ),
            (
                "eject",
                Box::new(|v| v["outlier"]["eject_ms"] = json!(0)),
                "outlier.eject_ms:",
            ),
            (
                "below 0",
                Box::new(|v| v["standby"]["failover_below"] = json!(0.0)),
                "standby.failover_below: must be in (0, 1]",
            ),
            (
                "below >1",
                Box::new(|v| v["standby"]["failover_below"] = json!(1.5)),
                "standby.failover_below:",
            ),
            (
                "failback",
                Box::new(|v| v["standby"]["failback"] = json!("never")),
                "standby.failback: unknown variant",
            ),
            (
                "standby empty",
                Box::new(|v| v["standby"]["endpoints"] = json!([])),
                "standby.endpoints: must list",
            ),
            (
                "standby dup",
                Box::new(|v| v["standby"]["endpoints"] = json!([{"addr": "127.0.0.1:18082"}])),
                "standby.endpoints[0].addr: \"127.0.0.1:18082\" repeats endpoints[1]",
            ),
            (
                "standby addr",
                Box::new(|v| v["standby"]["endpoints"] = json!([{"addr": "nohost"}])),
                "standby.endpoints[0].addr:",
            ),
            (
                "active",
                Box::new(|v| v["active"] = json!("secondary")),
                "active: unknown variant",
            ),
            (
                "active no standby",
                Box::new(|v| {
                    v["active"] = json!("standby");
                    v.as_object_mut().unwrap().remove("standby");
                }),
                "active: \"standby\" but the cluster has no standby set",
            ),
            (
                "wake",
                Box::new(|v| v["sleep"]["wake_url"] = json!("ftp://x")),
                "sleep.wake_url:",
            ),
            (
                "wake host",
                Box::new(|v| v["sleep"]["wake_url"] = json!("http:///x")),
                "sleep.wake_url:",
            ),
            (
                "retry",
                Box::new(|v| v["sleep"]["retry_after_s"] = json!(0)),
                "sleep.retry_after_s:",
            ),
            (
                "sleep url",
                Box::new(|v| v["sleep"]["sleep_url"] = json!("x")),
                "sleep.sleep_url:",
            ),
            (
                "idle",
                Box::new(|v| v["sleep"]["idle_s"] = json!(0)),
                "sleep.idle_s:",
            ),
            (
                "webhook",
                Box::new(|v| v["autoscale"]["webhook"] = json!("")),
                "autoscale.webhook:",
            ),
            (
                "no rules",
                Box::new(|v| v["autoscale"]["rules"] = json!([])),
                "autoscale.rules: must list",
            ),
            (
                "rule neither",
                Box::new(|v| v["autoscale"]["rules"][1] = json!({"for_s": 5, "action": "down"})),
                "autoscale.rules[1]: needs rps_above or rps_below",
            ),
            (
                "rule both",
                Box::new(|v| v["autoscale"]["rules"][0]["rps_below"] = json!(1.0)),
                "autoscale.rules[0]: set rps_above or rps_below, not both",
            ),
            (
                "rule negative",
                Box::new(|v| v["autoscale"]["rules"][0]["rps_above"] = json!(-1.0)),
                "autoscale.rules[0]: the rate must be",
            ),
            (
                "rule for",
                Box::new(|v| v["autoscale"]["rules"][0]["for_s"] = json!(0)),
                "autoscale.rules[0].for_s:",
            ),
            (
                "rule action",
                Box::new(|v| v["autoscale"]["rules"][0]["action"] = json!("sideways")),
                "autoscale.rules[0].action: unknown variant",
            ),
        ];
        for (what, edit, want) in bad {
            let mut doc = full_cluster();
            edit(&mut doc);
            let mut t = T::new();
            t.put("clusters/c", doc);
            let s = t.build(None);
            let r = reason(&s, "clusters/c");
            assert!(r.starts_with(want), "{what}: {r}");
        }
        for key in [
            "app",
            "ip",
            "header:X-User",
            "query:user_id",
            "path:order_id",
        ] {
            let mut doc = full_cluster();
            doc["balancing"] = json!("consistent_hash");
            doc["hash_key"] = json!(key);
            let mut t = T::new();
            t.put("clusters/c", doc);
            assert!(t.build(None).clusters.contains_key("c"), "{key}");
        }
    }

    #[test]
    fn grpc_client_settings_are_checked() {
        let doc = |grpc: serde_json::Value, protocol: &str| {
            serde_json::to_vec(
                &json!({"protocol": protocol, "endpoints": [{"addr": "h:1"}], "grpc": grpc}),
            )
            .unwrap()
        };
        let c = check_cluster(
            "svc",
            &doc(
                json!({"keepalive_ms": 300000, "keepalive_timeout_ms": 20000,
                       "compress_min_bytes": 1024, "connect_timeout_ms": 500}),
                "grpc",
            ),
        )
        .unwrap();
        let g = c.grpc.unwrap();
        assert_eq!(
            (g.keepalive_ms, g.compress_min_bytes, g.connect_timeout_ms),
            (Some(300_000), Some(1024), Some(500))
        );
        assert!(check_cluster("svc", &doc(json!({"keepalive_ms": 0}), "grpc")).is_ok());
        for (grpc, protocol, expect) in [
            (
                json!({"keepalive_ms": 30}),
                "grpc",
                "grpc.keepalive_ms: must be 0",
            ),
            (
                json!({"keepalive_timeout_ms": 10}),
                "grpc",
                "grpc.keepalive_timeout_ms:",
            ),
            (
                json!({"connect_timeout_ms": 0}),
                "grpc",
                "grpc.connect_timeout_ms:",
            ),
            (
                json!({"compress_min_bytes": 1u64 << 40}),
                "grpc",
                "grpc.compress_min_bytes:",
            ),
            (json!({"keepalive": 1}), "grpc", "unknown field `keepalive`"),
            (
                json!({}),
                "http",
                "grpc: gRPC client settings on a cluster whose protocol is not grpc",
            ),
        ] {
            let e = check_cluster("svc", &doc(grpc.clone(), protocol)).unwrap_err();
            assert!(e.contains(expect), "{grpc}: {e}");
        }
    }
}
