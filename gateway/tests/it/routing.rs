//! Smart routing over real processes (docs/operations/clusters.md, "Clusters: balancing,
//! health, failover, sleep"): several demo backends on free ports behind one gateway, for
//! HTTP and gRPC clusters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::routing::*;
use crate::support::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn eps(list: &[&Demo]) -> Value {
    list.iter()
        .map(|d| json!({"addr": d.http.to_string()}))
        .collect()
}

fn grpc_eps(list: &[&Demo]) -> Value {
    list.iter()
        .map(|d| json!({"addr": d.grpc.to_string()}))
        .collect()
}

/// Counts the answers of `n` calls by serving instance; every call must answer 200.
fn spread(gw: &GatewayProcess, path: &str, n: usize) -> HashMap<String, usize> {
    let c = client();
    let mut m = HashMap::new();
    for _ in 0..n {
        let a = call_with(&c, gw, path, &[]);
        assert_eq!(a.status, 200, "{a:?}");
        assert!(!a.load_leaked, "the load report reached the merchant");
        *m.entry(a.instance).or_insert(0) += 1;
    }
    m
}

#[test]
fn least_load_prefers_the_less_loaded_endpoint_and_follows_swaps() {
    let hot = Demo::start(&load(0.9));
    let cold = Demo::start(&load(0.1));
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&[&hot, &cold]), "balancing": "least_load"}),
        None,
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let m = spread(&gw, "/v1/echo", 100);
    let to_cold = m.get(&cold.http.to_string()).copied().unwrap_or(0);
    assert!(to_cold >= 80, "{m:?}");
    // The reports swap: within seconds the traffic follows.
    hot.admin("load", &format!("value={}", load(0.1)));
    cold.admin("load", &format!("value={}", load(0.9)));
    let shifted = wait_until(Duration::from_secs(15), || {
        let m = spread(&gw, "/v1/echo", 50);
        m.get(&hot.http.to_string()).copied().unwrap_or(0) >= 40
    });
    assert!(shifted, "traffic did not follow the new load reports");
    let status = cluster_status(&gw, "web");
    assert_eq!(status["balancing"], "least_load");
    assert!(status["primary"][0]["load"].as_f64().is_some(), "{status}");
}

#[test]
fn grpc_clusters_balance_on_load_and_health_checks_take_sleepers_out() {
    let hot = Demo::start(&load(0.9));
    let cold = Demo::start(&load(0.1));
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&[&hot])}),
        Some(
            json!({"protocol": "grpc", "endpoints": grpc_eps(&[&hot, &cold]), "balancing": "least_load",
            "health_check": {"interval_ms": 200, "timeout_ms": 500, "unhealthy_after": 2, "healthy_after": 1}}),
        ),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let m = spread(&gw, "/v1/orders/7", 60);
    let to_cold = m.get(&cold.grpc.to_string()).copied().unwrap_or(0);
    assert!(to_cold >= 48, "{m:?}");
    // The cold one goes to sleep: its health service says NOT_SERVING, and within
    // interval × unhealthy_after + 1 s it gets no traffic.
    cold.admin("sleep", "");
    std::thread::sleep(Duration::from_millis(200 * 2 + 1000));
    assert_eq!(
        endpoint_healthy(&gw, "rpc", &cold.grpc.to_string()),
        Some(false)
    );
    let m = spread(&gw, "/v1/orders/7", 20);
    assert_eq!(m.get(&hot.grpc.to_string()), Some(&20), "{m:?}");
    cold.admin("wake", "");
    assert!(wait_until(Duration::from_secs(10), || endpoint_healthy(
        &gw,
        "rpc",
        &cold.grpc.to_string()
    ) == Some(true)));
    let m = spread(&gw, "/v1/orders/7", 20);
    assert!(
        m.get(&cold.grpc.to_string()).copied().unwrap_or(0) >= 15,
        "{m:?}"
    );
}

#[test]
fn peak_ewma_avoids_a_slow_endpoint() {
    let slow = Demo::start("");
    let fast = Demo::start("");
    slow.admin("faults", "delay_ms=150");
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&[&slow, &fast]), "balancing": "peak_ewma"}),
        None,
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let m = spread(&gw, "/v1/echo", 60);
    let to_fast = m.get(&fast.http.to_string()).copied().unwrap_or(0);
    assert!(to_fast >= 50, "{m:?}");
}

#[test]
fn consistent_hash_keeps_each_key_on_one_endpoint() {
    let ds: Vec<Demo> = (0..3).map(|_| Demo::start("")).collect();
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&ds.iter().collect::<Vec<_>>()),
               "balancing": "consistent_hash", "hash_key": "header:X-User"}),
        None,
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let c = client();
    let mut used = std::collections::HashSet::new();
    for u in 0..20 {
        let user = format!("user-{u}");
        let first = call_with(&c, &gw, "/v1/echo", &[("X-User", &user)]);
        assert_eq!(first.status, 200);
        for _ in 0..4 {
            let a = call_with(&c, &gw, "/v1/echo", &[("X-User", &user)]);
            assert_eq!(a.instance, first.instance, "{user} moved");
        }
        used.insert(first.instance);
    }
    assert!(used.len() >= 2, "20 keys all on one endpoint: {used:?}");
}

#[test]
fn grpc_clusters_hash_stick_and_avoid_a_slow_endpoint() {
    let mut ds: Vec<Demo> = (0..3).map(|_| Demo::start("")).collect();
    let web = json!({"protocol": "http", "endpoints": eps(&[&ds[0]])});
    let c = client();

    // consistent_hash: each key stays on one endpoint.
    let t = tree(
        web.clone(),
        Some(
            json!({"protocol": "grpc", "endpoints": grpc_eps(&ds.iter().collect::<Vec<_>>()),
                    "balancing": "consistent_hash", "hash_key": "header:X-User"}),
        ),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let mut used = std::collections::HashSet::new();
    for u in 0..15 {
        let user = format!("user-{u}");
        let first = call_with(&c, &gw, "/v1/orders/7", &[("X-User", &user)]);
        assert_eq!(first.status, 200, "{first:?}");
        for _ in 0..3 {
            let a = call_with(&c, &gw, "/v1/orders/7", &[("X-User", &user)]);
            assert_eq!(a.instance, first.instance, "{user} moved");
        }
        used.insert(first.instance);
    }
    assert!(used.len() >= 2, "15 keys all on one endpoint: {used:?}");
    drop(gw);

    // sticky: a cookie holds the endpoint; when it dies the next call moves, no error.
    let t = tree(
        web.clone(),
        Some(
            json!({"protocol": "grpc", "endpoints": grpc_eps(&ds.iter().collect::<Vec<_>>()),
                    "sticky": {"ttl_s": 600}}),
        ),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let first = call(&gw, "/v1/orders/7", &[]);
    assert_eq!(first.status, 200, "{first:?}");
    let pair = cookie_pair(
        &first
            .cookie
            .clone()
            .expect("a first answer sets the cookie"),
    );
    for _ in 0..20 {
        let a = call_with(&c, &gw, "/v1/orders/7", &[("Cookie", &pair)]);
        assert_eq!(a.status, 200);
        assert_eq!(a.instance, first.instance);
        assert_eq!(a.cookie, None, "an honoured cookie is not set again");
    }
    let victim = ds
        .iter_mut()
        .find(|d| d.grpc.to_string() == first.instance)
        .unwrap();
    victim.kill();
    let moved = call(&gw, "/v1/orders/7", &[("Cookie", &pair)]);
    assert_eq!(moved.status, 200, "{moved:?}");
    assert_ne!(moved.instance, first.instance);
    assert!(moved.cookie.is_some(), "a new cookie for the new endpoint");
    drop(gw);

    // peak_ewma: the slow one of two live endpoints gets little traffic.
    let live: Vec<&Demo> = ds
        .iter()
        .filter(|d| d.grpc.to_string() != first.instance)
        .collect();
    let (slow, fast) = (live[0], live[1]);
    slow.admin("faults", "delay_ms=150");
    let t = tree(
        web,
        Some(
            json!({"protocol": "grpc", "endpoints": grpc_eps(&[slow, fast]),
                    "balancing": "peak_ewma"}),
        ),
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let m = spread(&gw, "/v1/orders/7", 60);
    let to_fast = m.get(&fast.grpc.to_string()).copied().unwrap_or(0);
    assert!(to_fast >= 50, "{m:?}");
}

/// The `NAME=value` part of a `Set-Cookie`.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().trim().to_owned()
}

#[test]
fn sticky_cookie_holds_an_endpoint_and_moves_when_it_dies() {
    let mut ds: Vec<Demo> = (0..3).map(|_| Demo::start("")).collect();
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&ds.iter().collect::<Vec<_>>()),
               "sticky": {"ttl_s": 600},
               "health_check": {"interval_ms": 300, "unhealthy_after": 2, "healthy_after": 1}}),
        None,
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let first = call(&gw, "/v1/echo", &[]);
    let set = first
        .cookie
        .clone()
        .expect("a first answer sets the cookie");
    assert!(set.starts_with("PORTICO_STICKY="), "{set}");
    assert!(set.contains("HttpOnly") && set.contains("Path=/") && set.contains("Max-Age=600"));
    assert!(
        !set.contains("127.0.0.1"),
        "the token reveals the address: {set}"
    );
    let pair = cookie_pair(&set);
    let c = client();
    for _ in 0..50 {
        let a = call_with(&c, &gw, "/v1/echo", &[("Cookie", &pair)]);
        assert_eq!(a.status, 200);
        assert_eq!(a.instance, first.instance);
        assert_eq!(a.cookie, None, "an honoured cookie is not set again");
    }
    // A forged cookie is ignored: the call is served and given a real cookie.
    let forged = call(
        &gw,
        "/v1/echo",
        &[("Cookie", "PORTICO_STICKY=00112233445566778899aabbccddeeff")],
    );
    assert_eq!(forged.status, 200);
    assert!(forged.cookie.is_some());
    // The endpoint dies: the very next call reaches another, with a new cookie, no error.
    let victim = ds
        .iter_mut()
        .find(|d| d.http.to_string() == first.instance)
        .unwrap();
    victim.kill();
    let moved = call(&gw, "/v1/echo", &[("Cookie", &pair)]);
    assert_eq!(moved.status, 200, "{moved:?}");
    assert_ne!(moved.instance, first.instance);
    let new_pair = cookie_pair(&moved.cookie.expect("a new cookie"));
    assert_ne!(new_pair, pair);
    for _ in 0..10 {
        let a = call_with(&c, &gw, "/v1/echo", &[("Cookie", &new_pair)]);
        assert_eq!(a.instance, moved.instance);
    }
}

#[test]
fn health_checks_take_a_dead_endpoint_out_and_bring_it_back() {
    let a = Demo::start("");
    let mut b = Demo::start("");
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&[&a, &b]),
               "health_check": {"path": "/healthz", "interval_ms": 300, "timeout_ms": 200, "unhealthy_after": 2, "healthy_after": 2}}),
        None,
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let m = spread(&gw, "/v1/echo", 20);
    assert_eq!(m.len(), 2, "{m:?}");
    b.kill();
    std::thread::sleep(Duration::from_millis(300 * 2 + 1000));
    assert_eq!(
        endpoint_healthy(&gw, "web", &b.http.to_string()),
        Some(false)
    );
    let metrics = gw.metrics();
    let line = format!(
        "portico_endpoint_healthy{{cluster=\"web\",endpoint=\"{}\",plane=\"live\"}} 0",
        b.http
    );
    assert!(metrics.contains(&line), "{line} not in metrics");
    assert!(metrics.contains("portico_endpoint_probes_total"));
    let m = spread(&gw, "/v1/echo", 20);
    assert_eq!(m.get(&a.http.to_string()), Some(&20), "{m:?}");
    b.restart();
    assert!(wait_until(Duration::from_secs(10), || endpoint_healthy(
        &gw,
        "web",
        &b.http.to_string()
    ) == Some(true)));
    let m = spread(&gw, "/v1/echo", 20);
    assert!(
        m.get(&b.http.to_string()).copied().unwrap_or(0) >= 8,
        "{m:?}"
    );
}

#[test]
fn outliers_are_ejected_without_active_checks_but_never_the_last_one() {
    let a = Demo::start("");
    let b = Demo::start("");
    b.admin("faults", "status=500");
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&[&a, &b]),
               "outlier": {"consecutive_failures": 3, "eject_ms": 60000}}),
        None,
    );
    let gw = GatewayProcess::start(t.path(), &[]);
    let c = client();
    let mut failed = 0;
    for _ in 0..40 {
        if call_with(&c, &gw, "/v1/echo", &[]).status != 200 {
            failed += 1;
        }
    }
    assert_eq!(failed, 3, "ejected after 3 consecutive failures");
    let status = cluster_status(&gw, "web");
    let eb = status["primary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["addr"] == b.http.to_string())
        .unwrap()
        .clone();
    assert_eq!(eb["healthy"], false, "{status}");
    assert!(eb["ejected_until"].as_u64().unwrap() > now_ms());
    assert!(gw.metrics().contains("portico_endpoint_ejections_total"));
    // The last available endpoint fails too: it is not ejected (the API stays reachable).
    a.admin("faults", "status=500");
    for _ in 0..10 {
        // The backend's 500, or the API's breaker: never "no healthy upstream".
        let r = call_with(&c, &gw, "/v1/echo", &[]);
        assert_ne!(r.code, "NO_HEALTHY_UPSTREAM", "{r:?}");
    }
    assert_eq!(
        endpoint_healthy(&gw, "web", &a.http.to_string()),
        Some(true)
    );
}

#[test]
fn failover_under_load_moves_to_standby_and_fails_back() {
    let mut p1 = Demo::start("");
    let mut p2 = Demo::start("");
    let s1 = Demo::start("");
    let t = tree(
        json!({"protocol": "http", "endpoints": eps(&[&p1, &p2]),
               "health_check": {"interval_ms": 200, "timeout_ms": 200, "unhealthy_after": 2, "healthy_after": 1},
               "standby": {"endpoints": eps(&[&s1]), "failover_below": 0.5, "failback": "auto"}}),
        None,
    );
    let gw = Arc::new(GatewayProcess::start(t.path(), &[]));
    assert_eq!(cluster_status(&gw, "web")["active"], "primary");
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (gw, stop, total, failed) =
                (gw.clone(), stop.clone(), total.clone(), failed.clone());
            std::thread::spawn(move || {
                let c = client();
                while !stop.load(Ordering::Relaxed) {
                    let a = call_with(&c, &gw, "/v1/echo", &[]);
                    total.fetch_add(1, Ordering::Relaxed);
                    if a.status != 200 {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(3000));
    p1.kill();
    p2.kill();
    assert!(wait_until(Duration::from_secs(10), || cluster_status(
        &gw, "web"
    )["active"]
        == "standby"));
    let during = (
        total.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    std::thread::sleep(Duration::from_millis(1000));
    let after = (
        total.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(during.0 > 200, "too little load: {during:?}");
    assert!(
        (during.1 as f64) < during.0 as f64 * 0.01,
        "failed during the switch: {during:?}"
    );
    assert_eq!(
        after.1, during.1,
        "failures after the switch: {during:?} → {after:?}"
    );
    let st = cluster_status(&gw, "web");
    assert_eq!(st["reason"], "auto");
    assert!(gw
        .metrics()
        .contains("portico_cluster_active_set{cluster=\"web\",plane=\"live\",set=\"standby\"} 1"));
    let m = spread(&gw, "/v1/echo", 10);
    assert_eq!(m.get(&s1.http.to_string()), Some(&10));
    // Failback: the primaries come back, and after a few healthy seconds serve again.
    p1.restart();
    p2.restart();
    assert!(wait_until(Duration::from_secs(15), || cluster_status(
        &gw, "web"
    )["active"]
        == "primary"));
    let m = spread(&gw, "/v1/echo", 10);
    assert_eq!(m.get(&s1.http.to_string()), None, "{m:?}");
}

#[test]
fn manual_standby_in_the_tree_reaches_the_gateway_and_state_survives_reloads() {
    let a = Demo::start("");
    let b = Demo::start("");
    let s = Demo::start("");
    b.admin("faults", "status=500");
    let doc = |active: &str| {
        json!({"protocol": "http", "endpoints": eps(&[&a, &b]), "active": active,
               "sticky": {},
               "outlier": {"consecutive_failures": 2, "eject_ms": 60000},
               "standby": {"endpoints": eps(&[&s]), "failback": "manual"}})
    };
    let t = tree(doc("primary"), None);
    let gw = GatewayProcess::start(t.path(), &[]);
    let c = client();
    for _ in 0..10 {
        call_with(&c, &gw, "/v1/echo", &[]);
    }
    let ejected = |gw: &GatewayProcess| {
        cluster_status(gw, "web")["primary"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["addr"] == b.http.to_string())
            .unwrap()["ejected_until"]
            .clone()
    };
    let before = ejected(&gw);
    assert!(before.as_u64().is_some());
    let first = call(&gw, "/v1/echo", &[]);
    let pair = cookie_pair(&first.cookie.unwrap());
    // An unrelated change: a new API. Ejection and the sticky cookie survive the reload.
    let digest = gw.digest();
    t.put(
        "apis/echo2",
        &json!({"id": "echo2", "http": {"method": "GET", "path": "/v1/echo2"},
                "backend": {"cluster": "web", "http": {"path": "/echo"}}, "auth": "none"}),
    );
    assert!(gw.wait_for_new_config(&digest));
    assert_eq!(ejected(&gw), before);
    let again = call(&gw, "/v1/echo", &[("Cookie", &pair)]);
    assert_eq!(
        (again.instance.as_str(), again.cookie),
        (first.instance.as_str(), None)
    );
    // The operator moves the cluster to its standby set: written to the tree, applied.
    let digest = gw.digest();
    t.put("clusters/web", &doc("standby"));
    assert!(gw.wait_for_new_config(&digest));
    let st = cluster_status(&gw, "web");
    assert_eq!(
        (st["active"].as_str(), st["reason"].as_str()),
        (Some("standby"), Some("manual"))
    );
    let m = spread(&gw, "/v1/echo", 10);
    assert_eq!(m.get(&s.http.to_string()), Some(&10), "{m:?}");
    // Only `active` changed: the endpoints' state is still carried.
    assert_eq!(ejected(&gw), before);
    let digest = gw.digest();
    t.put("clusters/web", &doc("primary"));
    assert!(gw.wait_for_new_config(&digest));
    let m = spread(&gw, "/v1/echo", 10);
    assert_eq!(m.get(&a.http.to_string()), Some(&10), "{m:?}");
}

#[test]
fn a_sleeping_cluster_is_woken_once_and_requests_are_held() {
    let d = Demo::start("");
    d.admin("sleep", "");
    let wake = |after_ms: u64| format!("http://{}/__admin/wake?after_ms={after_ms}", d.http);
    let doc = |after_ms: u64, hold_ms: u64| {
        json!({"protocol": "http", "endpoints": eps(&[&d]),
               "health_check": {"interval_ms": 1000, "unhealthy_after": 1, "healthy_after": 1},
               "sleep": {"wake_url": wake(after_ms), "hold_ms": hold_ms, "retry_after_s": 3}})
    };
    // Waking takes 5 s, holding only 500 ms: 503 BACKEND_LOADING with Retry-After.
    let t = tree(doc(5000, 500), None);
    let gw = GatewayProcess::start(t.path(), &[]);
    assert!(wait_until(Duration::from_secs(10), || endpoint_healthy(
        &gw,
        "web",
        &d.http.to_string()
    ) == Some(false)));
    let a = call(&gw, "/v1/echo", &[]);
    assert_eq!(
        (a.status, a.code.as_str()),
        (503, "BACKEND_LOADING"),
        "{a:?}"
    );
    assert_eq!(a.retry_after.as_deref(), Some("3"));
    assert_eq!(d.admin_state()["wake_calls"], 1);
    // Back to sleep; a quick wake (300 ms) within a long hold: concurrent first requests
    // are held and answered 200, with one wake call.
    assert!(wait_until(Duration::from_secs(10), || !d.admin_state()
        ["asleep"]
        .as_bool()
        .unwrap()));
    d.admin("sleep", "");
    let digest = gw.digest();
    t.put("clusters/web", &doc(300, 5000));
    assert!(gw.wait_for_new_config(&digest));
    assert!(wait_until(Duration::from_secs(10), || endpoint_healthy(
        &gw,
        "web",
        &d.http.to_string()
    ) == Some(false)));
    let wakes_before = d.admin_state()["wake_calls"].as_u64().unwrap();
    let gw = Arc::new(gw);
    let started = Instant::now();
    let held: Vec<_> = (0..5)
        .map(|_| {
            let gw = gw.clone();
            std::thread::spawn(move || call(&gw, "/v1/echo", &[]).status)
        })
        .collect();
    for h in held {
        assert_eq!(h.join().unwrap(), 200);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        d.admin_state()["wake_calls"].as_u64().unwrap(),
        wakes_before + 1
    );
}
