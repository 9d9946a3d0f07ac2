//! Hot APIs over real processes (docs/operations/caching.md, "Caching and hot keys", "Key-level
//! switches"): a real gateway, the real demo backend (its `/__stats` request counter tells
//! whether the backend was called), free loopback ports; ZooKeeper and the registry for the
//! switch flipped through the registry.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::*;
use portico_testkit::ZooKeeper;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests the backend saw for `path`.
fn backend_hits(backend: &BackendProcess, path: &str) -> u64 {
    let v: Value = client()
        .get(format!("{}/__stats", backend.http_url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    v["by_path"][path].as_u64().unwrap_or(0)
}

fn base_tree(backend: &BackendProcess) -> ConfigTree {
    let t = ConfigTree::new();
    t.put(
        "clusters/demo-http",
        &json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]}),
    );
    t.put("apps/merchant-1", &json!({"secret": SECRET, "apis": ["*"]}));
    t.put(
        "apps/merchant-2",
        &json!({"secret": "another-secret", "apis": ["other.api"]}),
    );
    t
}

fn sku_api(id: &str, prefix: &str, auth: &str, policy: Value) -> Value {
    json!({
        "id": id,
        "http": {"method": "GET", "path": format!("/v1/{prefix}/{{sku}}")},
        "backend": {"cluster": "demo-http", "timeout_ms": 3000, "http": {"path": format!("/echo/{prefix}/{{sku}}")}},
        "auth": auth,
        "policy": policy
    })
}

/// A signed GET as merchant-1, with extra headers.
fn get(gw: &GatewayProcess, path: &str, headers: &[(&str, &str)]) -> reqwest::blocking::Response {
    let mut req = signed(&client(), "GET", &gw.url(path), KEY, SECRET, None);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().unwrap()
}

fn header(resp: &reqwest::blocking::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn cache_hits_misses_refusals_and_304s() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    t.put(
        "apis/sku.get",
        &sku_api(
            "sku.get",
            "skus",
            "signature",
            json!({"cache": {"ttl_ms": 60000, "key": ["path:sku", "query:region"]}}),
        ),
    );
    t.put(
        "apis/short.get",
        &sku_api(
            "short.get",
            "short",
            "signature",
            json!({"cache": {"ttl_ms": 700, "key": ["path:sku"]}}),
        ),
    );
    t.put(
        "apis/limited.get",
        &sku_api(
            "limited.get",
            "limited",
            "signature",
            json!({"cache": {"ttl_ms": 60000, "key": ["path:sku"]},
                   "rate_limits": [{"key": "app", "limit": 2, "per": "minute"}]}),
        ),
    );
    t.put(
        "apis/plain.get",
        &sku_api("plain.get", "plain", "signature", json!({})),
    );
    let gw = GatewayProcess::start(t.path(), &[]);

    // MISS, then HIT with the same body and ETag, the backend counter flat.
    let first = get(&gw, "/v1/skus/BK-1?region=north", &[]);
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-portico-cache"), "MISS");
    let etag = header(&first, "etag");
    assert!(etag.starts_with('"') && etag.len() == 18, "{etag}");
    let ctype = header(&first, "content-type");
    let body = first.text().unwrap();
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 1);
    for _ in 0..5 {
        let again = get(&gw, "/v1/skus/BK-1?region=north", &[]);
        assert_eq!(again.status(), 200);
        assert_eq!(header(&again, "x-portico-cache"), "HIT");
        assert_eq!(header(&again, "etag"), etag);
        assert_eq!(header(&again, "content-type"), ctype);
        assert!(!header(&again, "x-portico-request-id").is_empty());
        assert_eq!(again.text().unwrap(), body);
    }
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 1);

    // A different key is a MISS: another sku, another region.
    assert_eq!(
        header(
            &get(&gw, "/v1/skus/BK-2?region=north", &[]),
            "x-portico-cache"
        ),
        "MISS"
    );
    assert_eq!(
        header(
            &get(&gw, "/v1/skus/BK-1?region=south", &[]),
            "x-portico-cache"
        ),
        "MISS"
    );
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 2);

    // If-None-Match with the current ETag: 304, empty body, same ETag, no backend call.
    let nm = get(
        &gw,
        "/v1/skus/BK-1?region=north",
        &[("If-None-Match", &etag)],
    );
    assert_eq!(nm.status(), 304);
    assert_eq!(header(&nm, "etag"), etag);
    assert!(nm.bytes().unwrap().is_empty());
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 2);

    // Unsigned and forbidden calls are refused even though the entry is cached.
    let unsigned = client()
        .get(gw.url("/v1/skus/BK-1?region=north"))
        .send()
        .unwrap();
    assert_eq!(code_of(unsigned).1, "SIGNATURE_MISSING");
    let forbidden = signed(
        &client(),
        "GET",
        &gw.url("/v1/skus/BK-1?region=north"),
        "merchant-2",
        "another-secret",
        None,
    )
    .send()
    .unwrap();
    assert_eq!(code_of(forbidden).1, "APP_FORBIDDEN");

    // A rate-limited app gets 429 even for a HIT.
    assert_eq!(
        header(&get(&gw, "/v1/limited/A", &[]), "x-portico-cache"),
        "MISS"
    );
    assert_eq!(
        header(&get(&gw, "/v1/limited/A", &[]), "x-portico-cache"),
        "HIT"
    );
    let (s, code, _) = code_of(get(&gw, "/v1/limited/A", &[]));
    assert_eq!((s, code.as_str()), (429, "RATE_LIMITED"));
    assert_eq!(backend_hits(&backend, "/echo/limited/A"), 1);

    // no-store answers are not cached.
    for _ in 0..2 {
        let r = get(&gw, "/v1/skus/NS?cache_control=no-store", &[]);
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-portico-cache"), "BYPASS");
        assert!(header(&r, "etag").is_empty());
    }
    assert_eq!(backend_hits(&backend, "/echo/skus/NS"), 2);

    // After the ttl: a MISS again; the echoed body changed (a new request id), so a new ETag,
    // and the old ETag no longer matches: 200.
    let a = get(&gw, "/v1/short/S1", &[]);
    let old = header(&a, "etag");
    assert_eq!(header(&a, "x-portico-cache"), "MISS");
    assert_eq!(
        get(&gw, "/v1/short/S1", &[("If-None-Match", &old)]).status(),
        304
    );
    std::thread::sleep(Duration::from_millis(900));
    let b = get(&gw, "/v1/short/S1", &[("If-None-Match", &old)]);
    assert_eq!(b.status(), 200);
    assert_eq!(header(&b, "x-portico-cache"), "MISS");
    assert_ne!(header(&b, "etag"), old);
    assert_eq!(backend_hits(&backend, "/echo/short/S1"), 2);

    // An API without a cache or hot-key policy carries no cache header.
    let p = get(&gw, "/v1/plain/P", &[]);
    assert_eq!(p.status(), 200);
    assert!(header(&p, "x-portico-cache").is_empty());

    // A few thousand distinct keys over HTTP: the cache stays within max_entries.
    let metrics = gw.metrics();
    assert!(
        metrics.contains("portico_cache_responses_total{api=\"sku.get\",result=\"HIT\"} 6"),
        "{metrics}"
    );

    // A degraded API never answers from its cache.
    let digest = gw.digest();
    t.put(
        "switches/sku.get",
        &json!({"degraded": true, "reason": "flash sale over"}),
    );
    assert!(gw.wait_for_new_config(&digest));
    let (s, code, _) = code_of(get(&gw, "/v1/skus/BK-1?region=north", &[]));
    assert_eq!((s, code.as_str()), (503, "API_DEGRADED"));
    // Restored: the entry (carried across the reload) answers again.
    let digest = gw.digest();
    t.put("switches/sku.get", &json!({"degraded": false}));
    assert!(gw.wait_for_new_config(&digest));
    let r = get(&gw, "/v1/skus/BK-1?region=north", &[]);
    assert_eq!(header(&r, "x-portico-cache"), "HIT");
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 2);
}

/// A signed call as `key`/`secret`: its status, `X-Portico-Cache` and the app the backend
/// saw (the demo echoes `X-Portico-App`) with the body it saw.
fn call_as(
    gw: &GatewayProcess,
    method: &str,
    path: &str,
    key: &str,
    secret: &str,
    body: Option<&[u8]>,
) -> (u16, String, String, String) {
    let r = signed(&client(), method, &gw.url(path), key, secret, body)
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let cache = header(&r, "x-portico-cache");
    let v: Value = r.json().unwrap_or(Value::Null);
    let app = v["headers"]["x-portico-app"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (
        status,
        cache,
        app,
        v["body"].as_str().unwrap_or_default().to_owned(),
    )
}

/// docs/SECURITY.md, "Trust between merchants": a cached answer is never served to a caller it was
/// not made for.
#[test]
fn two_apps_never_see_each_others_cached_answer() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    const KEY3: &str = "merchant-3";
    const SECRET3: &str = "third-secret";
    t.put(
        "apps/merchant-3",
        &json!({"secret": SECRET3, "apis": ["*"]}),
    );
    // The backend answers per app, and says so (`Vary: X-Portico-App`), publicly cacheable.
    t.put(
        "apis/acct.get",
        &sku_api(
            "acct.get",
            "acct",
            "signature",
            json!({"cache": {"ttl_ms": 60000, "key": ["path:sku"]}}),
        ),
    );
    t.put(
        "apis/shared.get",
        &sku_api(
            "shared.get",
            "shared",
            "signature",
            json!({"cache": {"ttl_ms": 60000, "shared": true, "query": ["region"]}}),
        ),
    );
    t.put(
        "apis/hotonly.get",
        &sku_api(
            "hotonly.get",
            "hotonly",
            "signature",
            json!({"hot_keys": {"key": ["path:sku"], "rate_above": 2}}),
        ),
    );
    t.put(
        "apis/order.query",
        &json!({
            "id": "order.query",
            "http": {"method": "POST", "path": "/v1/order/query"},
            "backend": {"cluster": "demo-http", "timeout_ms": 3000, "http": {"path": "/echo/order/query"}},
            "auth": "signature",
            "policy": {"cache": {"ttl_ms": 60000}, "read_only": true}
        }),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let public = "cache_control=public,max-age=60&vary=X-Portico-App";

    // The issue's reproduction: A's answer for ?fields=all, then B for the same path without
    // the query, then B with the query: each a MISS made for B.
    let a_url = format!("/v1/acct/ACC-1?fields=all&{public}");
    let (s, c, app, _) = call_as(&gw, "GET", &a_url, KEY, SECRET, None);
    assert_eq!((s, c.as_str(), app.as_str()), (200, "MISS", KEY));
    let (_, c, app, _) = call_as(&gw, "GET", &a_url, KEY, SECRET, None);
    assert_eq!((c.as_str(), app.as_str()), ("HIT", KEY));
    let b_plain = format!("/v1/acct/ACC-1?{public}");
    let (_, c, app, _) = call_as(&gw, "GET", &b_plain, KEY3, SECRET3, None);
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY3));
    let (_, c, app, _) = call_as(&gw, "GET", &a_url, KEY3, SECRET3, None);
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY3));
    let (_, c, app, _) = call_as(&gw, "GET", &a_url, KEY3, SECRET3, None);
    assert_eq!((c.as_str(), app.as_str()), ("HIT", KEY3));
    let (_, c, app, _) = call_as(&gw, "GET", &a_url, KEY, SECRET, None);
    assert_eq!((c.as_str(), app.as_str()), ("HIT", KEY));
    // A query value holding the old separator byte is only another key.
    let (_, c, app, _) = call_as(
        &gw,
        "GET",
        &format!("/v1/acct/ACC-1?fields=all%1F&{public}"),
        KEY3,
        SECRET3,
        None,
    );
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY3));

    // `shared: true` leaves the app out, but `Vary: X-Portico-App` still keeps the answers
    // apart; an unnamed query parameter does not split entries, a named one does.
    let shared = format!("/v1/shared/S-1?region=north&{public}");
    let (_, c, app, _) = call_as(&gw, "GET", &shared, KEY, SECRET, None);
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY));
    let (_, c, app, _) = call_as(&gw, "GET", &shared, KEY3, SECRET3, None);
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY3));
    let (_, c, app, _) = call_as(&gw, "GET", &shared, KEY, SECRET, None);
    assert_eq!((c.as_str(), app.as_str()), ("HIT", KEY));
    let (_, c, app, _) = call_as(&gw, "GET", &format!("{shared}&page=2"), KEY3, SECRET3, None);
    assert_eq!((c.as_str(), app.as_str()), ("HIT", KEY3));
    let south = format!("/v1/shared/S-1?region=south&{public}");
    let (_, c, _, _) = call_as(&gw, "GET", &south, KEY3, SECRET3, None);
    assert_eq!(c, "MISS");
    // Without Vary a shared answer is one for everybody: that is what `shared` says.
    let one = "/v1/shared/S-2?cache_control=public";
    let (_, c, app, _) = call_as(&gw, "GET", one, KEY, SECRET, None);
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY));
    let (_, c, app, _) = call_as(&gw, "GET", one, KEY3, SECRET3, None);
    assert_eq!((c.as_str(), app.as_str()), ("HIT", KEY));
    // Never stored: Vary: *, private, Set-Cookie-free but per-call Vary.
    for q in [
        "vary=*",
        "cache_control=private",
        "vary=X-Portico-Request-Id",
    ] {
        for _ in 0..2 {
            let (s, c, _, _) = call_as(&gw, "GET", &format!("/v1/shared/N?{q}"), KEY, SECRET, None);
            assert_eq!((s, c.as_str()), (200, "BYPASS"), "{q}");
        }
    }

    // Router style on a read-only cached API: keyed on the body, and on the app.
    let router = "/router?method=order.query";
    let (s, c, app, body) = call_as(
        &gw,
        "POST",
        router,
        KEY,
        SECRET,
        Some(br#"{"order_id":"2002"}"#),
    );
    assert_eq!((s, c.as_str(), app.as_str()), (200, "MISS", KEY), "{body}");
    assert!(body.contains("2002"), "{body}");
    let (_, c, _, body) = call_as(
        &gw,
        "POST",
        router,
        KEY,
        SECRET,
        Some(br#"{"order_id":"9999"}"#),
    );
    assert_eq!(c, "MISS");
    assert!(body.contains("9999"), "{body}");
    let (_, c, _, body) = call_as(
        &gw,
        "POST",
        router,
        KEY,
        SECRET,
        Some(br#"{ "order_id" : "2002" }"#),
    );
    assert_eq!(c, "HIT", "the same JSON, spaced otherwise");
    assert!(body.contains("2002"), "{body}");
    let (_, c, app, body) = call_as(
        &gw,
        "POST",
        router,
        KEY3,
        SECRET3,
        Some(br#"{"order_id":"2002"}"#),
    );
    assert_eq!((c.as_str(), app.as_str()), ("MISS", KEY3));
    assert!(body.contains("2002"), "{body}");

    // Hot keys alone never turn caching on: the key turns hot, answers still go to the
    // backend, each for its own app.
    let hot = "/v1/hotonly/H-1?cache_control=public,max-age=60";
    let mut sent = 0u64;
    let mut calls_while_hot = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while calls_while_hot < 20 && Instant::now() < deadline {
        let (key, secret) = if sent.is_multiple_of(2) {
            (KEY, SECRET)
        } else {
            (KEY3, SECRET3)
        };
        let (s, c, app, _) = call_as(&gw, "GET", hot, key, secret, None);
        assert_eq!((s, c.as_str(), app.as_str()), (200, "BYPASS", key));
        sent += 1;
        if sent.is_multiple_of(10)
            && hot_keys_of(&gw, "hotonly.get")
                .iter()
                .any(|k| k["key"] == "H-1")
        {
            calls_while_hot += 10;
        }
    }
    assert!(
        calls_while_hot >= 20,
        "H-1 never turned hot: {}",
        gw.status()["hot_keys"]
    );
    assert_eq!(backend_hits(&backend, "/echo/hotonly/H-1"), sent);
}

#[test]
fn many_distinct_keys_stay_bounded() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    t.put(
        "apis/open.get",
        &sku_api(
            "open.get",
            "open",
            "none",
            json!({"cache": {"ttl_ms": 60000, "key": ["path:sku"], "max_entries": 64}}),
        ),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let c = client();
    for i in 0..2000 {
        let r = c.get(gw.url(&format!("/v1/open/k{i}"))).send().unwrap();
        assert_eq!(r.status(), 200);
    }
    let metrics = gw.metrics();
    let entries: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("portico_cache_entries{api=\"open.get\"} "))
        .unwrap()
        .parse()
        .unwrap();
    // max_entries rounded up to whole shards.
    assert!((1..=64 + 16).contains(&entries), "{entries}");
}

#[test]
fn key_level_and_dimension_switches() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    t.put(
        "apis/sku.get",
        &sku_api("sku.get", "skus", "signature", json!({})),
    );
    t.put(
        "switches/sku.get@sku-BK-1",
        &json!({"degraded": true, "match": {"path:sku": ["BK-1"]}, "reason": "sku BK-1 oversold",
                "updated_by": "sre-alice", "fallback": {"status": 200, "body": {"sku": "BK-1", "stock": 0}}}),
    );
    t.put(
        "switches/sku.get@north-cm",
        &json!({"degraded": true, "match": {"header:X-Region": ["north"], "header:X-Carrier": ["cm"]}}),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    assert!(gw.status()["rejected_documents"]
        .as_array()
        .unwrap()
        .is_empty());

    let r = get(&gw, "/v1/skus/BK-1", &[]);
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v, json!({"sku": "BK-1", "stock": 0}));
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 0);
    assert_eq!(get(&gw, "/v1/skus/BK-2", &[]).status(), 200);
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-2"), 1);
    // docs/SECURITY.md, "Trust between merchants": the router style is matched on the same field,
    // from its body (the router's own query is not the request).
    let r = signed(
        &client(),
        "POST",
        &gw.url("/router?method=sku.get&sku=BK-2"),
        KEY,
        SECRET,
        Some(br#"{"sku":"BK-1"}"#),
    )
    .send()
    .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().unwrap();
    assert_eq!(v, json!({"sku": "BK-1", "stock": 0}));
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-1"), 0);

    // Only the combination of region and carrier.
    let both = [("X-Region", "north"), ("X-Carrier", "cm")];
    let (s, code, _) = code_of(get(&gw, "/v1/skus/BK-3", &both));
    assert_eq!((s, code.as_str()), (503, "API_DEGRADED"));
    assert_eq!(
        get(
            &gw,
            "/v1/skus/BK-3",
            &[("X-Region", "north"), ("X-Carrier", "ct")]
        )
        .status(),
        200
    );
    assert_eq!(
        get(
            &gw,
            "/v1/skus/BK-3",
            &[("X-Region", "south"), ("X-Carrier", "cm")]
        )
        .status(),
        200
    );
    assert_eq!(backend_hits(&backend, "/echo/skus/BK-3"), 2);

    // The API-wide switch wins over the key-level ones.
    let digest = gw.digest();
    t.put(
        "switches/sku.get",
        &json!({"degraded": true, "reason": "all off"}),
    );
    assert!(gw.wait_for_new_config(&digest));
    let (_, _, v) = code_of(get(&gw, "/v1/skus/BK-1", &[]));
    // Merchants read the public message; "all off" is the operators' reason.
    assert_eq!(v["message"], "the API is temporarily unavailable", "{v}");
}

/// Sends GETs for `path` from `threads` threads until `stop`.
fn load(
    gw: &GatewayProcess,
    path: String,
    threads: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..threads)
        .map(|_| {
            let url = gw.url(&path);
            let stop = stop.clone();
            std::thread::spawn(move || {
                let c = client();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if c.get(&url).send().is_ok_and(|r| r.status() == 200) {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect()
}

fn hot_keys_of(gw: &GatewayProcess, api: &str) -> Vec<Value> {
    gw.status()["hot_keys"][api]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_hot_key_among_cold_keys_is_found_and_cached() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    t.put(
        "apis/hot.get",
        &sku_api(
            "hot.get",
            "hot",
            "none",
            json!({"hot_keys": {"key": ["path:sku"], "rate_above": 100, "auto_cache_ms": 1000},
                   "read_only": true}),
        ),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let hot = load(&gw, "/v1/hot/BK-1".into(), 3, &stop);
    // Cold keys: 10,000 distinct ones, as many as the machine sends meanwhile.
    let cold = {
        let url = gw.url("/v1/hot/");
        let stop = stop.clone();
        std::thread::spawn(move || {
            let c = client();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && i < 10_000 {
                let _ = c.get(format!("{url}cold-{i}")).send();
                i += 1;
            }
            i
        })
    };
    let found = wait_until(Duration::from_secs(10), || {
        hot_keys_of(&gw, "hot.get")
            .iter()
            .any(|k| k["key"] == "BK-1")
    });
    let took = started.elapsed();
    assert!(
        found,
        "BK-1 never reported hot: {}",
        gw.status()["hot_keys"]
    );
    eprintln!("hot key reported after {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let keys = hot_keys_of(&gw, "hot.get");
    assert!(
        keys.iter()
            .all(|k| !k["key"].as_str().unwrap().starts_with("cold")),
        "{keys:?}"
    );
    let entry = keys.iter().find(|k| k["key"] == "BK-1").unwrap();
    assert!(entry["rate"].as_f64().unwrap() > 100.0, "{entry}");
    assert!(entry["since_ms"].as_u64().unwrap() > 0);

    // While hot, it is served from the cache: the backend sees at most one refresh per
    // auto_cache_ms from each of the 3 sending threads (concurrent misses are not merged).
    std::thread::sleep(Duration::from_millis(300));
    let hits = |gw: &GatewayProcess| -> u64 {
        gw.metrics()
            .lines()
            .find_map(|l| {
                l.strip_prefix("portico_cache_responses_total{api=\"hot.get\",result=\"HIT\"} ")
            })
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = backend_hits(&backend, "/echo/hot/BK-1");
    let hits_before = hits(&gw);
    let r = client().get(gw.url("/v1/hot/BK-1")).send().unwrap();
    assert_eq!(header(&r, "x-portico-cache"), "HIT");
    std::thread::sleep(Duration::from_millis(500));
    let after = backend_hits(&backend, "/echo/hot/BK-1");
    let served = hits(&gw) - hits_before;
    stop.store(true, Ordering::Relaxed);
    let sent: u64 = hot.into_iter().map(|h| h.join().unwrap()).sum();
    let cold_sent = cold.join().unwrap();
    eprintln!(
        "hot requests {sent}, cold {cold_sent}; in 0.5 s: {served} HITs, {} backend calls for BK-1",
        after - before
    );
    assert!(
        after - before <= 6,
        "backend called {} times",
        after - before
    );
    assert!(
        served >= 20 && served > 5 * (after - before),
        "{served} HITs"
    );
    // A cold key is not cached.
    let r = client().get(gw.url("/v1/hot/cold-x")).send().unwrap();
    assert_eq!(header(&r, "x-portico-cache"), "BYPASS");
    let metrics = gw.metrics();
    assert!(
        metrics.contains("portico_hot_key_detections_total{api=\"hot.get\"} 1"),
        "{metrics}"
    );
}

#[test]
fn the_bandwidth_rule_finds_a_large_answer_at_a_modest_rate() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    t.put(
        "apis/big.get",
        &json!({
            "id": "big.get",
            "http": {"method": "GET", "path": "/v1/big/{sku}"},
            "backend": {"cluster": "demo-http", "http": {"path": "/bytes/40000"}},
            "auth": "none",
            "policy": {"hot_keys": {"key": ["path:sku"], "rate_above": 100000,
                "link_bytes_per_s": 1000000, "bandwidth_share_above": 0.3}}
        }),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    // About 20 requests a second of 40 KB: 800 KB/s, above 30% of a 1 MB/s link.
    let c = client();
    let started = Instant::now();
    let mut found = None;
    while started.elapsed() < Duration::from_secs(10) {
        let r = c.get(gw.url("/v1/big/PHOTO")).send().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.bytes().unwrap().len(), 40000);
        let keys = hot_keys_of(&gw, "big.get");
        if let Some(k) = keys.into_iter().find(|k| k["key"] == "PHOTO") {
            found = Some(k);
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let k = found.expect("PHOTO never reported hot");
    assert!(k["bytes_per_s"].as_f64().unwrap() > 300_000.0, "{k}");
    assert!(k["rate"].as_f64().unwrap() < 100.0, "{k}");
}

/// An answer too large to read whole is streamed (`BYPASS`, no gateway `ETag`), and its bytes
/// still reach the bandwidth rule.
#[test]
fn a_streamed_answer_counts_for_the_bandwidth_rule() {
    let backend = BackendProcess::start_http().unwrap();
    let t = base_tree(&backend);
    t.put(
        "apis/video.get",
        &json!({
            "id": "video.get",
            "http": {"method": "GET", "path": "/v1/video/{sku}"},
            "backend": {"cluster": "demo-http", "http": {"path": "/bytes/300000"}},
            "auth": "none",
            "policy": {"hot_keys": {"key": ["path:sku"], "rate_above": 100000,
                "link_bytes_per_s": 1000000, "bandwidth_share_above": 0.3}}
        }),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let c = client();
    let started = Instant::now();
    let mut found = None;
    while started.elapsed() < Duration::from_secs(10) {
        let r = c.get(gw.url("/v1/video/CLIP")).send().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-portico-cache"), "BYPASS");
        assert_eq!(header(&r, "etag"), "");
        assert_eq!(r.bytes().unwrap().len(), 300_000);
        if let Some(k) = hot_keys_of(&gw, "video.get")
            .into_iter()
            .find(|k| k["key"] == "CLIP")
        {
            found = Some(k);
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let k = found.expect("CLIP never reported hot");
    assert!(k["bytes_per_s"].as_f64().unwrap() > 300_000.0, "{k}");
    assert_eq!(k["match"], json!({"path:sku": ["CLIP"]}), "{k}");
}

#[test]
fn a_key_level_switch_through_the_registry_applies_on_every_gateway() {
    let zk = ZooKeeper::start_locked();
    let backend = BackendProcess::start_http().unwrap();
    let registry = Registry::start(&zk, "sre-alice");
    let ok = |(s, v): (u16, Value)| assert!(s == 200 || s == 201, "{s} {v}");
    for env in ["", "/sandbox"] {
        ok(registry.call(
            "PUT",
            &format!("{env}/clusters/demo-http"),
            Some(json!({"protocol": "http", "endpoints": [{"addr": backend.http.to_string()}]})),
        ));
    }
    ok(registry.call(
        "POST",
        "/apps",
        Some(json!({"app_key": KEY, "secret": SECRET, "apis": ["*"]})),
    ));
    ok(registry.call(
        "PUT",
        "/sandbox/apis/sku.get",
        Some(sku_api(
            "sku.get",
            "skus",
            "signature",
            json!({"hot_keys": {"key": ["path:sku"], "rate_above": 5}}),
        )),
    ));
    ok(registry.call("POST", "/apis/sku.get/publish", None));
    let snaps: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let gateways: Vec<GatewayProcess> = (0..2)
        .map(|i| {
            let snap = snaps[i].path();
            let mut args = vec![
                "--zk".to_owned(),
                zk.connect_string(),
                "--snapshot-dir".into(),
                snap.join("lkg").display().to_string(),
                "--node-id".into(),
                format!("gw-hot-{i}"),
            ];
            if let Some(c) = zk.credentials() {
                args.push("--zk-auth-file".into());
                args.push(c.gateway_file().display().to_string());
            }
            GatewayProcess::start_args(args)
        })
        .collect();
    for gw in &gateways {
        assert!(wait_until(Duration::from_secs(15), || get(
            gw,
            "/v1/skus/BK-1",
            &[]
        )
        .status()
            == 200));
    }

    // A labelled switch without a match is refused before anything is written.
    let (s, v) = registry.call(
        "PUT",
        "/switches/sku.get@sku-BK-1",
        Some(json!({"degraded": true, "reason": "oversold"})),
    );
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("VALIDATION_FAILED")),
        "{v}"
    );

    let flipped = Instant::now();
    ok(registry.call(
        "PUT",
        "/switches/sku.get@sku-BK-1",
        Some(json!({"degraded": true, "reason": "oversold", "match": {"path:sku": ["BK-1"]}})),
    ));
    for gw in &gateways {
        assert!(wait_until(Duration::from_secs(10), || code_of(get(
            gw,
            "/v1/skus/BK-1",
            &[]
        ))
        .1 == "API_DEGRADED"));
    }
    let took = flipped.elapsed();
    eprintln!("key-level switch applied on both gateways after {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    for gw in &gateways {
        assert_eq!(get(gw, "/v1/skus/BK-2", &[]).status(), 200);
        assert!(gw.status()["switches_degraded"]
            .as_array()
            .unwrap()
            .contains(&json!("sku.get@sku-BK-1")));
    }
    let (s, v) = registry.call("GET", "/switches/sku.get@sku-BK-1", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["updated_by"], "sre-alice");
    assert_eq!(v["match"], json!({"path:sku": ["BK-1"]}));

    // The registry aggregates the gateways' hot keys.
    let found = wait_until(Duration::from_secs(15), || {
        for gw in &gateways {
            for _ in 0..10 {
                get(gw, "/v1/skus/BK-2", &[]);
            }
        }
        let (s, v) = registry.call("GET", "/apis/sku.get/hot-keys", None);
        assert_eq!(s, 200, "{v}");
        v["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["key"] == "BK-2" && k["gateways"].as_array().unwrap().len() == 2)
    });
    let (_, v) = registry.call("GET", "/apis/sku.get/hot-keys", None);
    assert!(found, "{v}");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2, "{v}");
    assert!(v["keys"][0]["rate"].as_f64().unwrap() > 5.0, "{v}");

    // Removed: BK-1 reaches the backend again.
    let (s, v) = registry.call("DELETE", "/switches/sku.get@sku-BK-1", None);
    assert!(s == 200 || s == 204, "{s} {v}");
    for gw in &gateways {
        assert!(wait_until(Duration::from_secs(10), || get(
            gw,
            "/v1/skus/BK-1",
            &[]
        )
        .status()
            == 200));
    }
}
