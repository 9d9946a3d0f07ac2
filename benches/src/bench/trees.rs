//! Portico configuration trees (docs/operations/config-tree.md "The configuration tree", directory form) for the benchmarks.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::{json, Value};

use crate::runner::{app_key, app_secret, APPS};

/// A generous limit: never reached by a benchmark, but the limiter still runs.
pub const GENEROUS_PER_SECOND: u32 = 10_000_000;

pub fn write_doc(root: &Path, rel: &str, doc: &Value) -> anyhow::Result<()> {
    let path = root.join(rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_vec_pretty(doc)?)?;
    Ok(())
}

/// The common part: the bench apps (generous per-app limits), a few other apps, and an IP
/// ACL with some entries (an allow list admitting loopback and a deny list of 40 CIDRs).
pub fn write_common(root: &Path) -> anyhow::Result<()> {
    for i in 0..APPS {
        write_doc(
            root,
            &format!("apps/{}.json", app_key(i)),
            &json!({
                "name": format!("Benchmark app {i}"),
                "secret": app_secret(i),
                "status": "active",
                "apis": ["*"],
                "rate_limits": [{ "limit": GENEROUS_PER_SECOND, "per": "second" }]
            }),
        )?;
    }
    for i in 0..20 {
        write_doc(
            root,
            &format!("apps/merchant-{i:03}.json"),
            &json!({
                "secret": format!("secret-of-merchant-{i:03}"),
                "status": if i % 7 == 3 { "disabled" } else { "active" },
                "apis": ["bench.order.get", format!("filler.{i}.get")],
                "rate_limits": [{ "limit": 100, "per": "second" }]
            }),
        )?;
    }
    let mut deny: Vec<String> = (0..30)
        .map(|i| format!("{}.{}.0.0/16", 11 + i, 7 * i % 250))
        .collect();
    deny.extend((0..10).map(|i| format!("2001:db8:{i:x}::/48")));
    write_doc(
        root,
        "ipacl.json",
        &json!({
            "deny": deny,
            "allow": ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "192.168.0.0/16"]
        }),
    )?;
    Ok(())
}

pub fn write_cluster(
    root: &Path,
    name: &str,
    protocol: &str,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    write_doc(
        root,
        &format!("clusters/{name}.json"),
        &json!({ "protocol": protocol, "endpoints": [{ "addr": addr.to_string(), "weight": 1 }] }),
    )
}

/// The policy every benchmarked API carries: a two-rule rate limit (per app+ip per second,
/// per API per minute), a bulkhead and a breaker, all far from tripping.
pub fn bench_policy() -> Value {
    json!({
        "bulkhead": { "max_concurrent": 1024 },
        "breaker": { "consecutive_failures": 1000, "open_ms": 1000 },
        "rate_limits": [
            { "key": ["app", "ip"], "limit": GENEROUS_PER_SECOND, "per": "second" },
            { "key": "api", "limit": u32::MAX / 2, "per": "minute" }
        ]
    })
}

/// `count` filler HTTP APIs on `cluster`, so that routing looks at a realistic table.
pub fn write_fillers(root: &Path, cluster: &str, count: usize) -> anyhow::Result<()> {
    for i in 0..count {
        let (method, path) = match i % 4 {
            0 => ("GET", format!("/v1/svc{i}/items/{{item_id}}")),
            1 => ("POST", format!("/v1/svc{i}/items")),
            2 => ("GET", format!("/v2/shops/{{shop_id}}/svc{i}/{{rest=**}}")),
            _ => ("PUT", format!("/v1/svc{i}/items/{{item_id}}:touch")),
        };
        write_doc(
            root,
            &format!("apis/filler.{i}.get.json"),
            &json!({
                "id": format!("filler.{i}.get"),
                "version": 1,
                "http": { "method": method, "path": path },
                "backend": { "cluster": cluster, "timeout_ms": 1000, "http": { "path": "/echo/filler" } },
                "auth": "signature"
            }),
        )?;
    }
    Ok(())
}

/// An HTTP API `id` answering `method path` and rewriting to `rewrite` on `cluster`.
#[allow(clippy::too_many_arguments)]
pub fn write_http_api(
    root: &Path,
    id: &str,
    method: &str,
    path: &str,
    cluster: &str,
    rewrite: &str,
    timeout_ms: u64,
    policy: Value,
) -> anyhow::Result<()> {
    let mut http = json!({ "method": method, "path": path });
    if method != "GET" && method != "DELETE" {
        http["body"] = json!("*");
    }
    write_doc(
        root,
        &format!("apis/{id}.json"),
        &json!({
            "id": id,
            "version": 1,
            "http": http,
            "backend": { "cluster": cluster, "timeout_ms": timeout_ms, "http": { "path": rewrite } },
            "auth": "signature",
            "policy": policy
        }),
    )
}

/// `GET /v1/<prefix>/orders/{order_id}` → the demo backend's `/orders/{order_id}` on
/// `cluster`: the API shape the cache, routing and fleet suites compare variants of.
pub fn write_order_get(
    root: &Path,
    id: &str,
    prefix: &str,
    cluster: &str,
    policy: Value,
) -> anyhow::Result<()> {
    write_http_api(
        root,
        id,
        "GET",
        &format!("/v1/{prefix}/orders/{{order_id}}"),
        cluster,
        "/orders/{order_id}",
        1000,
        policy,
    )
}

/// A transcoded gRPC API `id` (`service/method` of the demo descriptor set).
#[allow(clippy::too_many_arguments)]
pub fn write_grpc_api(
    root: &Path,
    id: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    cluster: &str,
    service: &str,
    rpc: &str,
    descriptor: &str,
    policy: Value,
) -> anyhow::Result<()> {
    let mut http = json!({ "method": method, "path": path });
    if let Some(b) = body {
        http["body"] = json!(b);
    }
    write_doc(
        root,
        &format!("apis/{id}.json"),
        &json!({
            "id": id,
            "version": 1,
            "http": http,
            "backend": {
                "cluster": cluster,
                "timeout_ms": 1000,
                "grpc": { "service": service, "method": rpc, "descriptor": descriptor }
            },
            "auth": "signature",
            "policy": policy
        }),
    )
}

/// Writes the demo FileDescriptorSet as `descriptors/<sha256>.pb`; returns the hash.
pub fn write_demo_descriptor(root: &Path) -> anyhow::Result<String> {
    let bytes = portico_demo::grpc::descriptor_set_bytes();
    let sha = portico_control::sign::body_digest(bytes);
    let dir = root.join("descriptors");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(format!("{sha}.pb")), bytes)?;
    Ok(sha)
}
