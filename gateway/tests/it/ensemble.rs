//! Gateways on a three-server ZooKeeper ensemble (docs/operations/cluster.md, "Running a cluster",
//! "Losing a ZooKeeper server"): the leader killed under load costs no request, and a switch
//! flipped right after still reaches every gateway within a second.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use crate::support::*;
use portico_testkit::ZkEnsemble;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROOT: &str = "/portico";

fn fallback(version: u64) -> Value {
    json!({"degraded": true, "fallback": {"status": 200, "body": {"v": version}}})
}

/// Creates or replaces `<root>/<rel>` in an open tree.
fn put(hosts: &str, rel: &str, doc: &Value) {
    support::zk::put(hosts, ROOT, &[(rel, doc.clone())]);
}

#[test]
fn the_leader_killed_under_load_costs_nothing_and_switches_still_arrive() {
    let mut ens = ZkEnsemble::start();
    let hosts = ens.connect_string();
    put(
        &hosts,
        "clusters/nowhere",
        &json!({"protocol": "http", "endpoints": [{"addr": format!("127.0.0.1:{}", free_port())}]}),
    );
    put(
        &hosts,
        "apis/ping.get",
        &json!({"id": "ping.get", "http": {"method": "GET", "path": "/v1/ping"},
                "backend": {"cluster": "nowhere", "http": {}}, "auth": "none"}),
    );
    put(&hosts, "switches/ping.get", &fallback(1));
    let gws: Vec<GatewayProcess> = (1..=2)
        .map(|n| {
            GatewayProcess::start_args(vec![
                "--zk".into(),
                hosts.clone(),
                "--node-id".into(),
                format!("gw-{n}"),
                "--zk-session-timeout-ms".into(),
                "6000".into(),
            ])
        })
        .collect();
    let version = |gw: &GatewayProcess| -> Option<u64> {
        let v: Value = client().get(gw.url("/v1/ping")).send().ok()?.json().ok()?;
        v["v"].as_u64()
    };
    for gw in &gws {
        assert!(wait_until(Duration::from_secs(30), || version(gw) == Some(1)));
    }

    // Steady load on both gateways.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let handles: Vec<_> = gws
        .iter()
        .map(|gw| {
            let url = gw.url("/v1/ping");
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                let http = client();
                while !stop.load(Ordering::Relaxed) {
                    match http.get(&url).send() {
                        Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    let leader = ens.leader().expect("a leader");
    ens.kill(leader);
    // The two left elect a new leader.
    assert!(
        wait_until(Duration::from_secs(30), || ens.leader().is_some()),
        "no new leader"
    );
    // A switch flipped now (through a surviving server) reaches every gateway within 1 s.
    put(&hosts, "switches/ping.get", &fallback(2));
    let flipped = Instant::now();
    for gw in &gws {
        assert!(
            wait_until(Duration::from_secs(10), || version(gw) == Some(2)),
            "{}",
            gw.status()
        );
    }
    let took = flipped.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("leader {leader} killed under load: {ok} ok, {failed} failed; switch everywhere in {took:?}");
    assert_eq!(failed, 0);
    assert!(ok > 0);
    assert!(took < Duration::from_secs(1), "the switch took {took:?}");
    for gw in &gws {
        assert_eq!(gw.status()["zookeeper"]["state"], "connected");
    }
}
