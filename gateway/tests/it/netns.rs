//! Across real network boundaries (docs/operations/cluster.md, "Running a cluster", "Losing a
//! ZooKeeper server"): a three-server ZooKeeper ensemble and two gateways, each on its own
//! namespaced host of a private network (`10.213.0.0/24`, a bridge in a namespace of its own;
//! `portico_testkit::netns`). The link of the ZooKeeper server the first gateway's session is
//! on is taken down, then the second gateway's link: the first gateway keeps answering signed
//! requests without a failure, applies a switch flipped after the cuts within a bound, and
//! sees the cut-off gateway leave `nodes/` once its session expires.
//!
//! Needs root and `ip netns` (CI runs `./ops/test.sh` as root, which installs `iproute2`);
//! elsewhere it says why and passes without running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use crate::support::*;
use portico_testkit::netns::{self, NetLab};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROOT: &str = "/portico";
/// Inside the lab's namespaces every port is free: the well-known ones are used.
const ZK_PORT: u16 = 2181;
const GW_PORT: u16 = 8080;
const ADMIN_PORT: u16 = 9180;
/// The gateways' ZooKeeper session timeout.
const SESSION_MS: u64 = 4000;
/// How long a switch flipped after the cuts may take to reach the surviving gateway: its
/// session must first notice the lost server (2/3 of the session timeout without an answer)
/// and move to another one.
const SWITCH_BOUND: Duration = Duration::from_secs(15);

fn fallback(version: u64) -> Value {
    json!({"degraded": true, "reason": "netns test",
           "fallback": {"status": 200, "body": {"v": version}}})
}

/// Creates or replaces documents under `ROOT` (an open tree), through `hosts`.
fn put(hosts: &str, docs: &[(&str, Value)]) {
    support::zk::put(hosts, ROOT, docs);
}

/// A ZooKeeper four-letter command's answer (`srvr`, `cons`), `None` if the server is away.
fn four_letters(addr: Ipv4Addr, cmd: &str) -> Option<String> {
    let addr = SocketAddr::from((addr, ZK_PORT));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

/// Starts ZooKeeper server `n` (1..=3) of the ensemble `servers` on lab host `zk<n>`.
fn start_zk(lab: &mut NetLab, n: usize, servers: &[Ipv4Addr], dir: &std::path::Path) -> usize {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("myid"), format!("{n}\n")).unwrap();
    let members: String = servers
        .iter()
        .enumerate()
        .map(|(i, a)| format!("server.{}={a}:2888:3888\n", i + 1))
        .collect();
    let cfg = portico_testkit::ensemble_member_config(
        &data,
        &servers[n - 1].to_string(),
        ZK_PORT,
        &members,
    );
    std::fs::write(dir.join("zoo.cfg"), cfg).unwrap();
    let out = std::fs::File::create(dir.join("zookeeper.out")).unwrap();
    let mut cmd = lab.command(
        &format!("zk{n}"),
        portico_testkit::zk_home().join("bin/zkServer.sh"),
    );
    portico_testkit::zk_server_command(&mut cmd, dir, 128);
    cmd.stdout(out.try_clone().unwrap()).stderr(out);
    lab.spawn(cmd)
}

fn start_gateway(lab: &mut NetLab, host: &str, addr: Ipv4Addr, zk_hosts: &str) -> usize {
    let mut cmd = lab.command(host, env!("CARGO_BIN_EXE_portico-gateway"));
    cmd.args(["--zk", zk_hosts, "--zk-root", ROOT])
        .args(["--zk-session-timeout-ms", &SESSION_MS.to_string()])
        .args(["--node-id", host])
        .args(["--listen", &format!("{addr}:{GW_PORT}")])
        .args(["--admin-listen", &format!("{addr}:{ADMIN_PORT}")])
        .args(["--access-log", "off", "--threads", "2"])
        .env(
            "PORTICO_LOG",
            "warn,portico_gateway=info,portico_control=info",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    lab.spawn(cmd)
}

/// Sets the flag when dropped (also while unwinding from a failed assertion).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Requests answered 200 with the expected body, and the rest.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
}

#[test]
fn a_cut_zookeeper_server_and_a_cut_gateway_leave_the_fleet_serving_and_switching() {
    if let Some(why) = netns::unavailable() {
        eprintln!("SKIPPED: network namespaces are not available here: {why}");
        return;
    }
    let mut lab = NetLab::new();
    let zk_addrs: Vec<Ipv4Addr> = (1..=3)
        .map(|n| lab.host(&format!("zk{n}"), 10 + n as u8))
        .collect();
    let gw1 = lab.host("gw1", 21);
    let gw2 = lab.host("gw2", 22);
    lab.host("client", 100);
    let zk_hosts = zk_addrs
        .iter()
        .map(|a| format!("{a}:{ZK_PORT}"))
        .collect::<Vec<_>>()
        .join(",");
    let dirs: Vec<tempfile::TempDir> = (0..3)
        .map(|_| {
            tempfile::Builder::new()
                .prefix("portico-netns-zk-")
                .tempdir()
                .unwrap()
        })
        .collect();
    for n in 1..=3 {
        start_zk(&mut lab, n, &zk_addrs, dirs[n - 1].path());
    }
    let quorum = lab.in_host("client", || {
        wait_until(Duration::from_secs(90), || {
            zk_addrs
                .iter()
                .all(|a| four_letters(*a, "srvr").is_some_and(|t| t.contains("Mode: ")))
        })
    });
    assert!(quorum, "the ensemble did not reach a quorum across the lab");
    lab.in_host("client", || {
        put(
            &zk_hosts,
            &[
                (
                    "clusters/nowhere",
                    json!({"protocol": "http", "endpoints": [{"addr": "10.213.0.250:80"}]}),
                ),
                (
                    "apps/merchant-1",
                    json!({"secret": SECRET, "status": "active", "apis": ["*"]}),
                ),
                (
                    "apis/ping.get",
                    json!({"id": "ping.get", "http": {"method": "GET", "path": "/v1/ping"},
                           "backend": {"cluster": "nowhere", "http": {}}, "auth": "signature"}),
                ),
                ("switches/ping.get", fallback(1)),
            ],
        )
    });
    start_gateway(&mut lab, "gw1", gw1, &zk_hosts);
    start_gateway(&mut lab, "gw2", gw2, &zk_hosts);

    let url = |gw: Ipv4Addr| format!("http://{gw}:{GW_PORT}/v1/ping");
    let admin = |gw: Ipv4Addr, path: &str| format!("http://{gw}:{ADMIN_PORT}{path}");
    // A signed call's answer: the fallback's version, if it was one.
    let version = |http: &reqwest::blocking::Client, gw: Ipv4Addr| -> Option<u64> {
        let r = signed(http, "GET", &url(gw), KEY, SECRET, None)
            .send()
            .ok()?;
        if r.status() != 200 {
            return None;
        }
        r.json::<Value>().ok()?["v"].as_u64()
    };
    let status = |http: &reqwest::blocking::Client, gw: Ipv4Addr| -> Value {
        http.get(admin(gw, "/status"))
            .send()
            .and_then(|r| r.json())
            .unwrap_or(Value::Null)
    };
    lab.in_host("client", || {
        let http = client();
        for gw in [gw1, gw2] {
            assert!(
                wait_until(Duration::from_secs(60), || http
                    .get(admin(gw, "/readyz"))
                    .send()
                    .is_ok_and(|r| r.status() == 200)),
                "gateway {gw} never became ready"
            );
            assert!(wait_until(Duration::from_secs(30), || version(&http, gw) == Some(1)));
        }
        assert!(
            wait_until(Duration::from_secs(30), || status(&http, gw1)
                ["cluster_members"]
                == 2),
            "{}",
            status(&http, gw1)
        );
    });

    // Steady signed load on both gateways, from the client host, until the end of the scope
    // (or a failed assertion: the guard stops the load so the lab can be dropped).
    let stop = AtomicBool::new(false);
    let survivor = Tally::default();
    let cut_off = Tally::default();
    let (cut_zk, before_gw2_cut, applied, members_after) = std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        for (gw, tally) in [(gw1, &survivor), (gw2, &cut_off)] {
            let (lab, stop, url) = (&lab, &stop, &url);
            s.spawn(move || {
                lab.in_host("client", || {
                    let http = reqwest::blocking::Client::builder()
                        .timeout(Duration::from_secs(3))
                        .no_proxy()
                        .build()
                        .unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        match signed(&http, "GET", &url(gw), KEY, SECRET, None).send() {
                            Ok(r) if r.status() == 200 => tally.ok.fetch_add(1, Ordering::Relaxed),
                            _ => tally.failed.fetch_add(1, Ordering::Relaxed),
                        };
                        std::thread::sleep(Duration::from_millis(10));
                    }
                })
            });
        }
        std::thread::sleep(Duration::from_secs(1));

        // Cut the ZooKeeper server gw1's session is on (found with `cons`), then gw2.
        let on = lab.in_host("client", || {
            let needle = format!("/{gw1}:");
            (0..3).find(|&i| four_letters(zk_addrs[i], "cons").is_some_and(|t| t.contains(&needle)))
        });
        let cut_zk = on.unwrap_or(0);
        eprintln!(
            "gw1's session is on zk{} ({}); cutting its link, then gw2's",
            cut_zk + 1,
            if on.is_some() {
                "found with cons"
            } else {
                "not found: cutting zk1"
            }
        );
        lab.cut(&format!("zk{}", cut_zk + 1));
        let before_gw2_cut = cut_off.ok.load(Ordering::Relaxed);
        lab.cut("gw2");

        // A switch flipped now, through the servers left, reaches gw1 within the bound.
        let left: String = (0..3)
            .filter(|&i| i != cut_zk)
            .map(|i| format!("{}:{ZK_PORT}", zk_addrs[i]))
            .collect::<Vec<_>>()
            .join(",");
        lab.in_host("client", || {
            put(&left, &[("switches/ping.get", fallback(2))])
        });
        let flipped = Instant::now();
        let (applied, members_after) = lab.in_host("client", || {
            let http = client();
            let applied = wait_until(Duration::from_secs(60), || version(&http, gw1) == Some(2));
            let took = flipped.elapsed();
            // gw2's session expires on the ensemble: gw1 sees it leave nodes/.
            let left_nodes = wait_until(Duration::from_secs(30), || {
                status(&http, gw1)["cluster_members"] == 1
            });
            (
                applied.then_some(took),
                left_nodes.then(|| flipped.elapsed()),
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        (cut_zk, before_gw2_cut, applied, members_after)
    });
    let (ok, failed) = (
        survivor.ok.load(Ordering::Relaxed),
        survivor.failed.load(Ordering::Relaxed),
    );
    let final_status = lab.in_host("client", || status(&client(), gw1));
    eprintln!(
        "zk{} cut; survivor gw1: {ok} ok, {failed} failed; switch applied {applied:?} after the flip; \
         gw2 out of nodes/ after {members_after:?}; gw2 answered {before_gw2_cut} before its cut, \
         {} failed after; gw1 zookeeper: {}",
        cut_zk + 1,
        cut_off.failed.load(Ordering::Relaxed),
        final_status["zookeeper"]
    );
    let took = applied.unwrap_or_else(|| panic!("the switch never reached gw1: {final_status}"));
    assert_eq!(failed, 0, "the surviving gateway failed requests");
    assert!(ok > 100, "too little load reached gw1: {ok}");
    assert!(took < SWITCH_BOUND, "the switch took {took:?}");
    assert!(
        members_after.is_some(),
        "gw1 still counts gw2 in nodes/: {final_status}"
    );
    assert_eq!(final_status["zookeeper"]["state"], "connected");
    // The cut-off gateway is unreachable indeed (the cut is real).
    assert!(cut_off.failed.load(Ordering::Relaxed) > 0);
}
