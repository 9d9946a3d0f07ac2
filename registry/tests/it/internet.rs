//! The registry against the internet (docs/SECURITY.md, "The registry and the internet"; its
//! "Threat model" names these tests): the registry binary on a free 127.0.0.1 port, raw sockets
//! from several loopback addresses (127.0.0.2, ... are the "other hosts"), a real ZooKeeper and,
//! for try-it, a real gateway with a sandbox listener in front of a local HTTP server.
//!
//! - slow connections from one host leave the console, the admin API and the portal usable,
//!   and are closed by the header-read timeout;
//! - the per-address cap refuses one connection too many while another address is served;
//! - the per-app portal document checks the signature before reading ZooKeeper;
//! - try-it is rate-limited per address, relays at most 1 MiB, passes the merchant's address;
//! - outbound calls made for config authors are fenced (egress policy, no redirects);
//! - merchant documents name public URLs, never node addresses.
//!
//! No traffic ever leaves 127.0.0.0/8: the metadata address only appears in documents and in a
//! redirect that must not be followed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::procs::{http, spawn_gateway, spawn_registry, wait_registered, RegistryProc};
use crate::common::TOKEN;
use portico_testkit::{free_port, wait_for, ZooKeeper};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A connection from `from` (a loopback address) to `to`, as a blocking std socket.
fn connect_from(rt: &tokio::runtime::Runtime, from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        let stream = socket.connect(to).await.unwrap();
        let std = stream.into_std().unwrap();
        std.set_nonblocking(false).unwrap();
        std
    })
}

/// Whether the peer has closed `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

fn addr_of(base: &str) -> SocketAddr {
    base.trim_start_matches("http://").parse().unwrap()
}

/// A blocking client whose connections come from `from`.
fn client_from(from: Ipv4Addr) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .local_address(IpAddr::V4(from))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn work() -> (tempfile::TempDir, std::path::PathBuf) {
    let work = tempfile::Builder::new()
        .prefix("portico-internet-")
        .tempdir()
        .unwrap();
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // A console build of one page, so `/` answers 200.
    let console = work.path().join("console");
    std::fs::create_dir_all(&console).unwrap();
    std::fs::write(
        console.join("index.html"),
        "<!doctype html><title>c</title>",
    )
    .unwrap();
    (work, logs)
}

fn registry(
    zk: &ZooKeeper,
    work: &tempfile::TempDir,
    logs: &std::path::Path,
    args: &[&str],
) -> RegistryProc {
    let console = work.path().join("console");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    spawn_registry(zk, "registry", logs, |cmd| {
        cmd.env("PORTICO_CONSOLE_DIR", &console).args(&args);
    })
}

#[test]
fn slow_connections_from_one_host_leave_the_console_usable() {
    let zk = ZooKeeper::on_shared();
    let (work, logs) = work();
    let reg = registry(&zk, &work, &logs, &[]);
    let to = addr_of(&reg.base);
    let rt = runtime();
    let http = http();
    let other = client_from(Ipv4Addr::new(127, 0, 0, 2));
    let paths = [
        ("/", false),
        ("/api/v1/apps", true),
        ("/portal/openapi.json", false),
    ];
    // A baseline round (it also builds the portal's public document once).
    let mut baseline = Duration::ZERO;
    for client in [&http, &other] {
        for (path, token) in paths {
            let started = Instant::now();
            let mut req = client.get(format!("{}{path}", reg.base));
            if token {
                req = req.bearer_auth(TOKEN);
            }
            assert_eq!(req.send().unwrap().status().as_u16(), 200, "{path}");
            baseline = baseline.max(started.elapsed());
        }
    }
    println!("without slow connections: worst {baseline:?}");
    let opened = Instant::now();
    let mut slow: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = connect_from(&rt, Ipv4Addr::LOCALHOST, to);
            s.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: registry\r\nX-Slow: ")
                .unwrap();
            s
        })
        .collect();
    println!("200 slow connections opened in {:?}", opened.elapsed());

    // The console, the admin API and the portal, from the same host and from another one.
    let mut worst = Duration::ZERO;
    let mut total = Duration::ZERO;
    let mut n = 0u32;
    for round in 0..5 {
        for (client, who) in [(&http, "same host"), (&other, "other host")] {
            for (path, token) in paths {
                let started = Instant::now();
                let mut req = client.get(format!("{}{path}", reg.base));
                if token {
                    req = req.bearer_auth(TOKEN);
                }
                let resp = req.send().unwrap();
                let status = resp.status().as_u16();
                resp.bytes().unwrap();
                let took = started.elapsed();
                assert_eq!(status, 200, "{path} from the {who} (round {round})");
                worst = worst.max(took);
                total += took;
                n += 1;
            }
        }
        // The slow connections send a byte now and then, as slowloris does.
        for s in &mut slow {
            let _ = s.write_all(b"a");
        }
    }
    println!(
        "with 200 slow connections held: {n} console/admin/portal requests, mean {:?}, worst {worst:?}",
        total / n
    );
    // Starved, the registry would not answer before the slow connections are closed (10 s);
    // the bound leaves room for a loaded 2-core test machine.
    assert!(
        worst < Duration::from_secs(3),
        "the registry answered slowly: {worst:?} (baseline {baseline:?})"
    );

    // The default header-read timeout (10 s) closes every one of them.
    let deadline = opened + Duration::from_secs(14);
    for (i, s) in slow.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            closed_within(s, left),
            "slow connection {i} still open {:?} after it was opened",
            opened.elapsed()
        );
    }
    let closed_after = opened.elapsed();
    println!("all 200 closed by the header-read timeout {closed_after:?} after opening");
    assert!(
        closed_after >= Duration::from_secs(9),
        "closed too early: {closed_after:?}"
    );
}

#[test]
fn a_slow_head_is_closed_by_the_header_read_timeout() {
    let zk = ZooKeeper::on_shared();
    let (work, logs) = work();
    let reg = registry(
        &zk,
        &work,
        &logs,
        &["--header-read-timeout-s", "2", "--idle-timeout-s", "3"],
    );
    let to = addr_of(&reg.base);

    // A head sent a byte every 300 ms: it never completes within 2 s.
    let mut s = TcpStream::connect(to).unwrap();
    let started = Instant::now();
    let head =
        b"GET /api/v1/health HTTP/1.1\r\nHost: registry\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed = false;
    for b in head {
        if s.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut s, Duration::from_millis(300)) {
            closed = true;
            break;
        }
    }
    let took = started.elapsed();
    assert!(closed, "a trickled head was still open after {took:?}");
    println!("trickled head closed after {took:?}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "{took:?}"
    );

    // A connection that never sends anything.
    let mut silent = TcpStream::connect(to).unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    println!("silent connection closed after {:?}", started.elapsed());

    // A complete request is answered at once; the kept-alive connection then goes idle and is
    // closed too.
    let mut ok = TcpStream::connect(to).unwrap();
    ok.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: registry\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    ok.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let started = Instant::now();
    assert!(closed_within(&mut ok, Duration::from_secs(6)));
    println!(
        "idle keep-alive connection closed after {:?}",
        started.elapsed()
    );
}

#[test]
fn the_per_address_cap_refuses_one_too_many_while_another_address_is_served() {
    let zk = ZooKeeper::on_shared();
    let (work, logs) = work();
    let reg = registry(&zk, &work, &logs, &["--max-connections-per-address", "20"]);
    let to = addr_of(&reg.base);
    let rt = runtime();
    let here = Ipv4Addr::new(127, 0, 0, 3);
    let mut held: Vec<TcpStream> = (0..20).map(|_| connect_from(&rt, here, to)).collect();
    // The 21st from the same address is closed before anything is read from it.
    let mut extra = connect_from(&rt, here, to);
    let _ = extra.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: r\r\n\r\n");
    assert!(
        closed_within(&mut extra, Duration::from_secs(2)),
        "the 21st connection from one address was served"
    );
    // Another address is served meanwhile.
    let started = Instant::now();
    let resp = client_from(Ipv4Addr::new(127, 0, 0, 4))
        .get(format!("{}/api/v1/health", reg.base))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    println!("another address served in {:?}", started.elapsed());
    // One place freed: the address is served again.
    drop(held.pop());
    let same = client_from(here);
    assert!(wait_for(Duration::from_secs(5), || {
        same.get(format!("{}/api/v1/health", reg.base))
            .send()
            .is_ok_and(|r| r.status().as_u16() == 200)
    }));
}

/// The live tree of these tests: an app, an HTTP API (`/echo`, `/big`) on `backend`, and
/// (sandbox) an IP ACL that trusts the registry (127.0.0.1) as a proxy and denies 127.0.0.2.
fn seed(base: &str, backend: SocketAddr) {
    let cluster =
        json!({"protocol": "http", "endpoints": [{"addr": backend.to_string(), "weight": 1}]});
    let api = |id: &str, path: &str| {
        json!({"id": id, "version": 1, "http": {"method": "GET", "path": path},
               "backend": {"cluster": "local", "timeout_ms": 10000, "http": {}}, "auth": "none"})
    };
    let app = json!({"secret": "internet-secret-1", "status": "active", "apis": ["*"]});
    let ipacl = json!({"deny": ["127.0.0.2/32"], "allow": [], "trusted_proxies": ["127.0.0.1/32"]});
    let file = |v: &Value| json!({"encoding": "utf-8", "content": v.to_string()});
    let files = json!({
        "clusters/local.json": file(&cluster),
        "apis/echo.get.json": file(&api("echo.get", "/echo")),
        "apis/big.get.json": file(&api("big.get", "/big")),
        "apps/m-internet.json": file(&app),
        "ipacl.json": file(&ipacl),
    });
    for env in ["live", "sandbox"] {
        let resp = http()
            .post(format!("{base}/api/v1/import?env={env}"))
            .bearer_auth(TOKEN)
            .json(&json!({ "files": files }))
            .send()
            .unwrap();
        let status = resp.status();
        assert!(
            status.is_success(),
            "import {env}: {}",
            resp.text().unwrap()
        );
    }
}

type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A local HTTP backend: `/big` answers 8 MiB (as fast as it is read), anything else a small
/// JSON body; every request's path and `X-Forwarded-For` are recorded.
fn backend() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let record = record.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(1) => head.push(b[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                let xff = head
                    .lines()
                    .find_map(|l| {
                        l.split_once(':')
                            .filter(|(k, _)| k.eq_ignore_ascii_case("x-forwarded-for"))
                    })
                    .map(|(_, v)| v.trim().to_owned());
                record.lock().unwrap().push((path.clone(), xff));
                if path == "/big" {
                    let size = 8 * 1024 * 1024;
                    let _ = s.write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n")
                            .as_bytes(),
                    );
                    let chunk = vec![b'x'; 64 * 1024];
                    for _ in 0..(size / chunk.len()) {
                        if s.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                } else {
                    let body = r#"{"ok":true}"#;
                    let _ = s.write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                            .as_bytes(),
                    );
                }
            });
        }
    });
    (addr, seen)
}

fn try_it(from: Ipv4Addr, base: &str, path: &str) -> (u16, Option<String>, Value) {
    let resp = client_from(from)
        .post(format!("{base}/portal/try"))
        .json(&json!({"method": "GET", "path": path}))
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry, resp.json().unwrap_or(Value::Null))
}

#[test]
fn try_it_is_limited_capped_and_passes_the_merchants_address() {
    let zk = ZooKeeper::on_shared();
    let (work, logs) = work();
    let reg = registry(
        &zk,
        &work,
        &logs,
        &[
            "--portal-try-per-minute",
            "4",
            "--portal-gateway-url",
            "https://api.example.test",
            "--portal-sandbox-url",
            "https://sandbox.example.test/",
        ],
    );
    let (backend, seen) = backend();
    seed(&reg.base, backend);
    let sandbox = free_port();
    let mut gw = spawn_gateway(&zk, "gw-internet", &logs, |cmd| {
        cmd.args(["--sandbox-listen", &format!("127.0.0.1:{sandbox}")])
            .args(["--access-log", "off"]);
    });
    let registered = wait_registered(&reg.base, Duration::from_secs(60), |n| {
        n["sandbox_addr"] == format!("127.0.0.1:{sandbox}") && n["in_sync"] == true
    });
    gw.proc.assert_alive();
    assert!(registered, "gateway not registered:\n{}", gw.proc.tail());
    // The node registers before its sandbox listener may be accepting: wait for that too.
    let up = wait_for(Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", sandbox)).is_ok()
    });
    assert!(up, "the sandbox listener is not up:\n{}", gw.proc.tail());
    let sandbox_addr = format!("127.0.0.1:{sandbox}");
    let gateway_addr = gw.url.trim_start_matches("http://").to_owned();

    // The merchant's address reaches the sandbox gateway, which takes the registry's word
    // (a trusted proxy there) and passes it on.
    let merchant = Ipv4Addr::new(127, 0, 0, 3);
    let (status, _, answer) = try_it(merchant, &reg.base, "/echo");
    assert_eq!(status, 200, "{answer:#}\n{}", gw.proc.tail());
    assert_eq!(answer["response"]["status"], 200, "{answer:#}");
    let xff = seen.lock().unwrap().last().cloned().unwrap().1.unwrap();
    assert!(
        xff.starts_with("127.0.0.3"),
        "X-Forwarded-For at the backend: {xff}"
    );
    println!("X-Forwarded-For at the sandbox's backend: {xff}");
    assert_eq!(
        answer["request"]["url"], "https://sandbox.example.test/echo",
        "{answer:#}"
    );
    let text = answer.to_string();
    assert!(!text.contains(&sandbox_addr), "a node address in {text}");
    // The sandbox's IP deny list sees the merchant, not the registry.
    let (status, _, answer) = try_it(Ipv4Addr::new(127, 0, 0, 2), &reg.base, "/echo");
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["status"], 403, "{answer:#}");
    assert!(
        answer["response"]["body"]
            .as_str()
            .unwrap()
            .contains("IP_BLOCKED"),
        "{answer:#}"
    );

    // At most 1 MiB of an 8 MiB answer is relayed.
    let started = Instant::now();
    let (status, _, answer) = try_it(Ipv4Addr::new(127, 0, 0, 4), &reg.base, "/big");
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["status"], 200, "{answer:#}");
    assert_eq!(answer["response"]["truncated"], true);
    assert_eq!(answer["response"]["body_bytes"], 1024 * 1024);
    println!("8 MiB answer relayed as 1 MiB in {:?}", started.elapsed());

    // 4 calls a minute per address: the fifth waits; another address does not.
    let limited = Ipv4Addr::new(127, 0, 0, 5);
    for i in 0..4 {
        let (status, _, answer) = try_it(limited, &reg.base, "/echo");
        assert_eq!(status, 200, "call {i}: {answer:#}");
    }
    let (status, retry, answer) = try_it(limited, &reg.base, "/echo");
    assert_eq!(status, 429, "{answer:#}");
    assert_eq!(answer["code"], "RATE_LIMITED");
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let (status, _, _) = try_it(Ipv4Addr::new(127, 0, 0, 6), &reg.base, "/echo");
    assert_eq!(status, 200);

    // Merchant documents name the public URLs only.
    let public = http()
        .get(format!("{}/portal/openapi.json", reg.base))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let path = "/portal/apps/m-internet/openapi.json";
    let app_doc = signed_get(
        &reg.base,
        path,
        "m-internet",
        "internet-secret-1",
        "nonce-doc-1",
    );
    assert_eq!(app_doc.0, 200, "{}", app_doc.1);
    for (what, text) in [("public", &public), ("app", &app_doc.1)] {
        assert!(text.contains("https://api.example.test"), "{what}");
        assert!(text.contains("https://sandbox.example.test"), "{what}");
        for node in [&sandbox_addr, &gateway_addr] {
            assert!(
                !text.contains(node.as_str()),
                "{what} document names {node}"
            );
        }
    }
}

/// A signed GET (the portal's app document): status and body.
fn signed_get(base: &str, path: &str, key: &str, secret: &str, nonce: &str) -> (u16, String) {
    let signed = portico_control::sign::sign_request(
        secret.as_bytes(),
        "GET",
        path,
        None,
        key,
        portico_control::clock::now_ms(),
        nonce,
        b"",
    );
    let mut req = http().get(format!("{base}{path}"));
    for (k, v) in signed.pairs() {
        req = req.header(k, v);
    }
    let resp = req.send().unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}

#[test]
fn the_app_document_checks_the_signature_before_reading_zookeeper() {
    let mut zk = ZooKeeper::start();
    let (work, logs) = work();
    let reg = registry(&zk, &work, &logs, &[]);
    seed(&reg.base, "127.0.0.1:9".parse().unwrap());
    let path = "/portal/apps/m-internet/openapi.json";
    let good = signed_get(
        &reg.base,
        path,
        "m-internet",
        "internet-secret-1",
        "nonce-good-1",
    );
    assert_eq!(good.0, 200, "{}", good.1);
    let envelope = |body: &str| -> (String, String) {
        let v: Value = serde_json::from_str(body).unwrap();
        let message = v["message"].as_str().unwrap();
        // The message ends with the string-to-sign, which names the key.
        let message = message.split("; the string-to-sign").next().unwrap();
        (v["code"].as_str().unwrap().to_owned(), message.to_owned())
    };
    let bad = signed_get(&reg.base, path, "m-internet", "wrong-secret", "nonce-bad-1");
    let unknown_path = "/portal/apps/m-nobody/openapi.json";
    let unknown = signed_get(
        &reg.base,
        unknown_path,
        "m-nobody",
        "whatever-1",
        "nonce-unk-1",
    );
    assert_eq!((bad.0, unknown.0), (401, 401));
    assert_eq!(envelope(&bad.1), envelope(&unknown.1));

    // ZooKeeper gone: refusals answer exactly as before, at once (nothing is read from it).
    zk.stop();
    for (i, (p, key, secret)) in [
        (path, "m-internet", "wrong-secret"),
        (unknown_path, "m-nobody", "whatever-1"),
    ]
    .into_iter()
    .enumerate()
    {
        let started = Instant::now();
        let (status, body) = signed_get(&reg.base, p, key, secret, &format!("nonce-down-{i}"));
        let took = started.elapsed();
        assert_eq!(status, 401, "{body}");
        assert_eq!(envelope(&body), envelope(&bad.1));
        println!("{key}: 401 in {took:?} with ZooKeeper stopped");
        assert!(
            took < Duration::from_millis(500),
            "{took:?}: did it wait for ZooKeeper?"
        );
    }
}

#[test]
fn outbound_calls_to_metadata_addresses_are_refused_and_redirects_not_followed() {
    let zk = ZooKeeper::on_shared();
    let (work, logs) = work();
    let reg = registry(&zk, &work, &logs, &[]);
    let put = |path: &str, doc: Value| -> (u16, Value) {
        let resp = http()
            .put(format!("{}/api/v1{path}", reg.base))
            .bearer_auth(TOKEN)
            .json(&doc)
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.json().unwrap_or(Value::Null))
    };
    // Write time: an alert rule with a webhook to the metadata address is refused.
    for hook in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://2852039166/",
        "http://metadata.google.internal/computeMetadata/v1/",
    ] {
        let (status, body) = put(
            "/alerts/steal",
            json!({"condition": "node_missing", "receivers": [{"webhook": hook}]}),
        );
        assert_eq!(status, 400, "{hook}: {body:#}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("egress policy"), "{message}");
        assert!(message.contains("receivers[0].webhook"), "{message}");
    }
    let (status, body) = put(
        "/alerts/fine",
        json!({"condition": "node_missing", "receivers": [{"webhook": "http://127.0.0.1:9/hook"}]}),
    );
    assert!(status == 200 || status == 201, "{body:#}");
    // The reflection import names its backend: refused too, before any connection.
    let resp = http()
        .post(format!("{}/api/v1/reflection", reg.base))
        .bearer_auth(TOKEN)
        .json(&json!({"addr": "169.254.169.254:50051", "cluster": "c"}))
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().unwrap();
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("egress policy"), "{text}");

    // Call time: a webhook to a local server that redirects to the metadata address gets the
    // 302 as its answer; the redirect is not followed (and would be refused if it were).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    let hits = Arc::new(Mutex::new(0u32));
    let count = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut buf = vec![0u8; 65536];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            *count.lock().unwrap() += 1;
            let _ = s.write_all(
                b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let sender = portico_registry::alerts::notify::Sender::new(None, None).unwrap();
    let payload = portico_registry::alerts::notify::Payload {
        id: "steal@*/0/firing".into(),
        rule: "steal".into(),
        api: "*".into(),
        condition: "node_missing".into(),
        value: None,
        threshold: 0.0,
        for_s: 0,
        severity: "warning".into(),
        state: "firing".into(),
        started_at: "2026-12-02T00:00:00Z".into(),
        fired_at: "2026-12-02T00:00:00Z".into(),
        resolved_at: None,
        summary: "test".into(),
        description: None,
        registry: "test".into(),
        console_url: None,
        sent_at: "2026-12-02T00:00:00Z".into(),
    };
    let receivers = [
        portico_control::v1::AlertReceiver {
            webhook: Some(hook.clone()),
            email: None,
        },
        portico_control::v1::AlertReceiver {
            webhook: Some("http://169.254.169.254/latest/meta-data/".into()),
            email: None,
        },
    ];
    let refused_before = portico_control::egress::refused_total();
    let outcomes = runtime().block_on(sender.deliver(&payload, &receivers));
    assert_eq!(outcomes[0].status, Some(302), "{:?}", outcomes[0]);
    assert!(!outcomes[0].ok);
    assert_eq!(
        outcomes[0].attempts, 1,
        "a redirect is an answer, not retried"
    );
    assert_eq!(*hits.lock().unwrap(), 1);
    assert_eq!(outcomes[1].status, None, "{:?}", outcomes[1]);
    assert!(
        outcomes[1]
            .error
            .as_deref()
            .unwrap()
            .contains("egress policy refuses 169.254.169.254"),
        "{:?}",
        outcomes[1]
    );
    assert!(portico_control::egress::refused_total() > refused_before);
}

#[test]
fn outside_local_mode_the_portal_urls_are_required() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portico-registry"))
        .args([
            "--zk",
            "127.0.0.1:1",
            "--listen",
            "0.0.0.0:0",
            "--insecure-no-auth",
        ])
        .env_remove("PORTICO_PORTAL_GATEWAY_URL")
        .env_remove("PORTICO_PORTAL_SANDBOX_URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--portal-gateway-url and --portal-sandbox-url required"),
        "{err}"
    );
}
